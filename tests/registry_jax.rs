//! `spmd-check registry jax` (SPEC.md §22): the types JAX 0.12.0.1's own
//! rules give its elementwise primitives on one mesh axis (invariant R,
//! varying S(0), unreduced P(sum)), and its reductions, dot_general and
//! shape primitives (varying entered at dim d is S(d); their kernels
//! recorded call by call), recorded by peers/record_registry_jax.py into
//! tests/fixtures/registry/jax.json.gz, checked against the primitives'
//! recorded kernels. The classification is pinned: a rule whose class
//! changes fails here. Each class has a twin made by tampering with the
//! recording in memory.

mod common;

use common::run;
use spmd_check::registry::{self, Class, File, Report, Row};

fn recorded() -> File {
    common::registry::recorded("jax")
}

fn check(f: File, glob: Option<&str>) -> Report {
    common::registry::check_glob(f, glob)
}

/// The entry of `op` with exactly these args, to tamper with.
fn entry<'a>(f: &'a mut File, op: &str, args: &str) -> &'a mut registry::Entry {
    f.entries
        .iter_mut()
        .find(|e| e.op == op && e.args == args)
        .unwrap_or_else(|| panic!("{op}({args}) is recorded"))
}

fn claims<'a>(f: &'a mut File, op: &str, args: &str) -> &'a mut Vec<Vec<String>> {
    entry(f, op, args).claims.as_mut().expect("claims")
}

fn claim(c: &[&str]) -> Vec<String> {
    c.iter().map(|s| s.to_string()).collect()
}

/// The one row of `op(args)` with these placements.
fn row<'a>(rep: &'a Report, op: &str, args: &str, placements: &str) -> &'a Row {
    let rs: Vec<&Row> = rep
        .rows
        .iter()
        .filter(|r| r.op == op && r.args == args && r.placements() == placements)
        .collect();
    assert_eq!(rs.len(), 1, "{op}({args}) {placements}: {} rows", rs.len());
    rs[0]
}

/// (correct, incorrect, missing, undetermined, latent), this file's order.
fn counts(rep: &Report) -> (usize, usize, usize, usize, usize) {
    let (c, i, l, m, u) = common::registry::totals(rep);
    (c, i, m, u, l)
}

/// The recording with only the entries of one family.
fn family(fam: &str) -> File {
    let mut f = recorded();
    f.entries.retain(|e| e.family == fam);
    f
}

/// `family(fam)` with JAX's varying outputs read as claims: S(d') for each
/// output dim, as if a varying value meant the concatenation its out_spec
/// makes. The recording keeps them apart (`unmodelled`: the type promises
/// no global value); the tests read them this way to reach the S(d) paths.
fn with_varying(fam: &str) -> File {
    let mut f = family(fam);
    for e in &mut f.entries {
        let v = std::mem::take(&mut e.unmodelled);
        if let Some(c) = e.claims.as_mut() {
            c.extend(v);
        }
    }
    f
}

#[test]
fn the_recorded_registry_classifies_as_pinned() {
    let f = recorded();
    assert_eq!(f.system, "jax");
    assert_eq!(f.versions.get("jax").map(String::as_str), Some("0.12.0.1"));
    let mut f = f;
    f.entries.retain(|e| e.family == "elementwise");
    let rep = check(f, None);
    // (correct, incorrect, missing, undetermined, latent)
    assert_eq!(
        counts(&rep),
        (69, 20, 6, 40, 0),
        "{}",
        registry::summary(&rep)
    );
    // Only JAX's own states are claimed or searched: no P(max), P(avg).
    assert!(rep.rows.iter().all(|r| r
        .inputs
        .iter()
        .chain([&r.output])
        .all(|p| p == "R" || p == "S(0)" || p == "P(sum)")));
    // Every incorrect claim lets an unreduced input through a rule that
    // is not linear in it, and none is latent (no repro outcomes yet).
    let mut bad: Vec<String> = rep
        .rows
        .iter()
        .filter(|r| r.class == Class::Incorrect)
        .map(|r| {
            assert!(r.inputs.iter().any(|p| p == "P(sum)"), "{}", r.detail);
            assert!(
                r.detail.starts_with("F1 2 ranks") || r.detail.starts_with("F3 2 ranks"),
                "{}",
                r.detail
            );
            r.shown_op()
        })
        .collect();
    bad.dedup();
    assert_eq!(
        bad,
        [
            "lax.clamp",
            "lax.convert_element_type(new_dtype=int64)",
            "lax.convert_element_type(new_dtype=int32)",
            "lax.integer_pow(y=-2)",
            "lax.integer_pow(y=-1)",
            "lax.integer_pow(y=1)",
            "lax.integer_pow(y=2)",
            "lax.integer_pow(y=3)",
            "lax.select_n",
        ]
    );
}

#[test]
fn the_linear_rules_jax_registers_are_correct() {
    let rep = common::registry::checked("jax");
    for (op, args, pl) in [
        ("lax.add", "", "P(sum), P(sum) -> P(sum)"),
        ("lax.sub", "", "P(sum), P(sum) -> P(sum)"),
        ("lax.neg", "", "P(sum) -> P(sum)"),
        ("lax.copy", "", "P(sum) -> P(sum)"),
        ("lax.add", "", "S(0), S(0) -> S(0)"),
        // mul and div keep a pending sum beside a reduced operand ...
        ("lax.mul", "R=reduced", "P(sum), R -> P(sum)"),
        ("lax.mul", "R=reduced", "R, P(sum) -> P(sum)"),
        ("lax.div", "R=reduced", "P(sum), R -> P(sum)"),
        // ... and a float cast keeps it (bounded: the scope's sums are
        // exact in float32).
        (
            "lax.convert_element_type",
            "new_dtype=float32",
            "P(sum) -> P(sum)",
        ),
    ] {
        let r = row(rep, op, args, pl);
        assert_eq!(r.class, Class::Correct, "{op}({args}) {pl}: {}", r.detail);
        assert!(r.detail.starts_with("bounded: "), "{}", r.detail);
    }
    // ... but refuse one beside an invariant operand, which would be as
    // right: missing.
    for (op, pl) in [
        ("lax.mul", "P(sum), R -> P(sum)"),
        ("lax.mul", "R, P(sum) -> P(sum)"),
        ("lax.div", "P(sum), R -> P(sum)"),
    ] {
        let r = row(rep, op, "", pl);
        assert_eq!(r.class, Class::Missing, "{op} {pl}: {}", r.detail);
    }
    // add of an unreduced and an invariant operand is refused, and rightly:
    // the invariant one would be counted on every rank.
    assert!(rep
        .rows
        .iter()
        .all(|r| !(r.op == "lax.add" && r.placements() == "P(sum), R -> P(sum)")));
}

#[test]
fn the_counterexamples_are_exact_and_minimal() {
    let rep = common::registry::checked("jax");
    let cases = [
        (
            "lax.convert_element_type",
            "new_dtype=int32",
            "P(sum) -> P(sum)",
            "F3 2 ranks; input 0 per rank [-1, 1/2]; per-rank outputs [-1, 0] denote -1, but f of the inputs' denotations is 0",
        ),
        (
            "lax.integer_pow",
            "y=2",
            "P(sum) -> R",
            "F1 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1",
        ),
        (
            "lax.clamp",
            "",
            "R, P(sum), R -> R",
            "F1 2 ranks; input 0 per rank [0, 0]; input 1 per rank [0, 1]; input 2 per rank [1, 1]; per-rank outputs [0, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1",
        ),
    ];
    for (op, args, pl, detail) in cases {
        let r = row(rep, op, args, pl);
        assert_eq!(r.class, Class::Incorrect, "{op}({args}) {pl}");
        assert_eq!(r.detail, detail);
        assert!(r.cex.is_some());
    }
    // integer_pow(y=1) is the identity: its pending sum could be kept,
    // JAX types it invariant instead.
    let r = row(rep, "lax.integer_pow", "y=1", "P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Missing, "{}", r.detail);
    // y=0 gives 1 on every rank: invariant is right there.
    let r = row(rep, "lax.integer_pow", "y=0", "P(sum) -> R");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);
}

#[test]
fn select_n_takes_the_pending_sum_of_its_first_case_only() {
    let rep = check(recorded(), Some("lax.select_n"));
    // which, case 0, case 1: an invariant case 1 beside an unreduced case
    // 0 is counted on every rank.
    let r = row(&rep, "lax.select_n", "", "R, P(sum), R -> P(sum)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F3 2 ranks"), "{}", r.detail);
    // Both cases unreduced under an invariant predicate: correct. `which`
    // is boolean, so the scope's 1/2, -1 and 2 are no values of it: those
    // instances are outside the domain, counted, not unchecked.
    let r = row(&rep, "lax.select_n", "", "R, P(sum), P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);
    assert!(
        r.detail.contains("no value of the kernel's input dtype"),
        "{}",
        r.detail
    );
}

#[test]
fn a_tampered_claim_is_incorrect_and_a_dropped_claim_is_missing() {
    let mut f = recorded();
    // Twin 1: exp keeping a pending sum (e^0 + e^0 is not e^0).
    claims(&mut f, "lax.exp", "").push(claim(&["P(sum)", "P(sum)"]));
    // Twin 2: mul bilinear in both unreduced factors.
    claims(&mut f, "lax.mul", "").push(claim(&["P(sum)", "P(sum)", "P(sum)"]));
    // Twin 3: add's P(sum), P(sum) -> P(sum) taken out.
    claims(&mut f, "lax.add", "").retain(|c| c != &claim(&["P(sum)", "P(sum)", "P(sum)"]));
    let rep = check(f, None);
    let r = row(&rep, "lax.exp", "", "P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F3 2 ranks"), "{}", r.detail);
    let r = row(&rep, "lax.mul", "", "P(sum), P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F3 2 ranks"), "{}", r.detail);
    let r = row(&rep, "lax.add", "", "P(sum), P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Missing, "{}", r.detail);
    // Untampered: exp and mul refuse them (no row: a refusal is sound),
    // and add's claim is correct.
    let rep = common::registry::checked("jax");
    for (op, pl) in [
        ("lax.exp", "P(sum) -> P(sum)"),
        ("lax.mul", "P(sum), P(sum) -> P(sum)"),
    ] {
        assert!(rep
            .rows
            .iter()
            .all(|r| !(r.op == op && r.args.is_empty() && r.placements() == pl)));
    }
    let r = row(rep, "lax.add", "", "P(sum), P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);
}

#[test]
fn a_tampered_kernel_value_makes_a_right_claim_incorrect() {
    let mut f = recorded();
    // neg(1) recorded as 1 instead of -1.
    let k = entry(&mut f, "lax.neg", "").kernel.as_mut().unwrap();
    let at1 = k
        .rows
        .iter_mut()
        .find(|r| r[0].as_deref() == Some("1"))
        .expect("neg was looked up at 1");
    assert_eq!(at1[1].as_deref(), Some("-1"));
    at1[1] = Some("1".into());
    let rep = check(f, Some("lax.neg"));
    let r = row(&rep, "lax.neg", "", "P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    let rep = check(recorded(), Some("lax.neg"));
    let r = row(&rep, "lax.neg", "", "P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);
}

#[test]
fn the_cli_checks_the_jax_recording() {
    let (code, out, err) = run(&["registry", "jax", "--op", "lax.integer_pow"]);
    assert_eq!(code, 1, "an incorrect claim fails the run: {err}");
    assert!(out.contains("registry jax (jax 0.12.0.1"), "{out}");
    assert!(out.contains("5 incorrect"), "{out}");
    let (code, out, _) = run(&["registry", "jax", "--op", "lax.add", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["system"], "jax");
    assert_eq!(v["totals"]["correct"], 2);
    assert_eq!(v["totals"]["incorrect"], 0);
    // A DTensor recording is not a JAX one.
    let (code, _, err) = run(&[
        "registry",
        "jax",
        "--file",
        &registry::default_file("dtensor"),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not `jax`"), "{err}");
}

/// (entries, correct, incorrect, missing, undetermined, latent) of a family.
fn family_counts(fam: &str) -> (usize, (usize, usize, usize, usize, usize), Report) {
    let f = family(fam);
    let n = f.entries.len();
    let rep = check(f, None);
    (n, counts(&rep), rep)
}

/// The tensor kernel's recorded call on these inputs, to tamper with.
fn call<'a>(e: &'a mut registry::Entry, ins: &[&str]) -> &'a mut Option<String> {
    let k = e.tensor_kernel.as_mut().expect("recorded call by call");
    let c = k
        .calls
        .iter_mut()
        .find(|c| {
            c.len() == ins.len() + 1 && c.iter().zip(ins).all(|(a, b)| a.as_deref() == Some(*b))
        })
        .unwrap_or_else(|| panic!("a call on {ins:?} is recorded"));
    c.last_mut().unwrap()
}

/// A varying output read through an out_spec that does not follow the
/// data: JAX's varying type names no dim, so each S(d') of the output is
/// claimed; those the op does not carry the input's dim to are incorrect
/// in the checker's sense (shard_map is per-device by design; see the
/// report). Counted apart from the unreduced findings.
fn varying_only(r: &Row) -> bool {
    r.inputs.iter().all(|p| p != "P(sum)") && r.output.starts_with("S(")
}

#[test]
fn reductions_classify_as_pinned_and_drop_a_pending_sum() {
    let (n, c, rep) = family_counts("reduction");
    assert_eq!(
        (n, c),
        (REDUCTION.0, REDUCTION.1),
        "{}",
        registry::summary(&rep)
    );
    // Every incorrect claim types an unreduced operand's result invariant:
    // the primitives with no unreduced rule (jax._src.lax.utils.call_ur_rule
    // looks for unreduced in the explicit-mode spec only). Varying outputs
    // are not claims (`unmodelled`) and never missing.
    assert!(
        rep.rows
            .iter()
            .all(|r| !r.output.starts_with("S(") || r.inputs.iter().any(|p| p == "P(sum)")),
        "no varying output is checked"
    );
    let mut dropped: Vec<String> = Vec::new();
    for r in rep.rows.iter().filter(|r| r.class == Class::Incorrect) {
        if varying_only(r) {
            continue;
        }
        assert_eq!(
            r.placements(),
            "P(sum) -> R",
            "{}: {}",
            r.shown_op(),
            r.detail
        );
        assert!(r.detail.starts_with("F1 2 ranks"), "{}", r.detail);
        if !dropped.contains(&r.op) {
            dropped.push(r.op.clone());
        }
    }
    dropped.sort();
    assert_eq!(
        dropped,
        [
            "lax.argmax",
            "lax.argmin",
            "lax.cumlogsumexp",
            "lax.cummax",
            "lax.cummin",
            "lax.cumprod",
            "lax.cumsum",
            "lax.reduce_and",
            "lax.reduce_or",
            "lax.reduce_prod",
            "lax.reduce_xor",
        ]
    );
    // reduce_sum has its rule: a pending sum stays pending.
    let sum0 = "rank=2, axes=(0,)";
    assert_eq!(
        row(&rep, "lax.reduce_sum", sum0, "P(sum) -> P(sum)").class,
        Class::Correct
    );
    // Read as out_spec concatenations, the varying outputs: reducing the
    // other dim keeps the shard ...
    let vrep = check(with_varying("reduction"), Some("lax.reduce_sum"));
    assert_eq!(
        row(&vrep, "lax.reduce_sum", sum0, "S(1) -> S(0)").class,
        Class::Correct
    );
    // ... reducing the sharded one leaves per-rank partial sums, typed
    // varying: read through out_specs P('x') they are concatenated, not
    // summed. Unreduced would be right, and JAX does not type it so.
    let r = row(&vrep, "lax.reduce_sum", sum0, "S(0) -> S(0)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert_eq!(
        row(&rep, "lax.reduce_sum", sum0, "S(0) -> P(sum)").class,
        Class::Missing
    );
    // cumsum is linear, but typed invariant on an unreduced operand.
    let cs = "rank=1, axis=0, reverse=False";
    let r = row(&rep, "lax.cumsum", cs, "P(sum) -> R");
    assert_eq!(
        r.detail,
        "F1 2 ranks; input 0 per rank [[0], [1]]; per-rank outputs [[0], [1]] denote nothing (not the same on every rank), but f of the inputs' denotations is [1]"
    );
    assert_eq!(
        row(&rep, "lax.cumsum", cs, "P(sum) -> P(sum)").class,
        Class::Missing
    );

    // Twins. A pending sum claimed through reduce_max is incorrect.
    let mut f = family("reduction");
    claims(&mut f, "lax.reduce_max", "rank=1, axes=(0,)").push(claim(&["P(sum)", "P(sum)"]));
    // reduce_sum's right claim dropped is missing.
    claims(&mut f, "lax.reduce_sum", "rank=1, axes=(0,)")
        .retain(|c| c != &claim(&["P(sum)", "P(sum)"]));
    let rep = check(f, Some("lax.reduce_*"));
    let r = row(
        &rep,
        "lax.reduce_max",
        "rank=1, axes=(0,)",
        "P(sum) -> P(sum)",
    );
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F3 2 ranks"), "{}", r.detail);
    let r = row(
        &rep,
        "lax.reduce_sum",
        "rank=1, axes=(0,)",
        "P(sum) -> P(sum)",
    );
    assert_eq!(r.class, Class::Missing, "{}", r.detail);
    // A tampered recorded call (the sum of [2] recorded as 3) flips the
    // right claim: per-rank [1], [1] sum to 2 against f([2]) = 3.
    let mut f = family("reduction");
    let out = call(
        entry(&mut f, "lax.reduce_sum", "rank=1, axes=(0,)"),
        &["1:2"],
    );
    assert_eq!(out.as_deref(), Some(":2"));
    *out = Some(":3".into());
    let rep = check(f, Some("lax.reduce_sum"));
    let r = row(
        &rep,
        "lax.reduce_sum",
        "rank=1, axes=(0,)",
        "P(sum) -> P(sum)",
    );
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
}

#[test]
fn dot_general_refuses_an_unreduced_operand_and_types_contractions_varying() {
    let (n, c, rep) = family_counts("contraction");
    assert_eq!(
        (n, c),
        (CONTRACTION.0, CONTRACTION.1),
        "{}",
        registry::summary(&rep)
    );
    // No claim is incorrect: dot_general's outputs are varying (not
    // claims) or refused.
    assert!(rep.rows.iter().all(|r| r.class != Class::Incorrect));
    let mm = "ranks=[2, 2], matmul, dimension_numbers=(((1,), (0,)), ((), ()))";
    // dot_general is bilinear: a pending sum beside an invariant operand
    // stays pending, but JAX refuses any unreduced operand.
    for pl in ["P(sum), R -> P(sum)", "R, P(sum) -> P(sum)"] {
        assert_eq!(
            row(&rep, "lax.dot_general", mm, pl).class,
            Class::Missing,
            "{pl}"
        );
    }
    // Contracting the sharded dims of both leaves a pending sum, typed
    // varying instead.
    assert_eq!(
        row(&rep, "lax.dot_general", mm, "S(1), S(0) -> P(sum)").class,
        Class::Missing
    );
    let bi = "ranks=[2, 2], batched inner, dimension_numbers=(((1,), (1,)), ((0,), (0,)))";
    let vrep = check(with_varying("contraction"), None);
    let r = row(&vrep, "lax.dot_general", bi, "S(0), S(0) -> S(0)");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);

    // Twins: a claim bilinear in two pending sums is incorrect; the right
    // batched claim dropped is missing; a tampered call flips it.
    let mut f = with_varying("contraction");
    claims(&mut f, "lax.dot_general", mm).push(claim(&["P(sum)", "P(sum)", "P(sum)"]));
    claims(&mut f, "lax.dot_general", bi).retain(|c| c != &claim(&["S(0)", "S(0)", "S(0)"]));
    let rep = check(f, None);
    let r = row(&rep, "lax.dot_general", mm, "P(sum), P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F3 2 ranks"), "{}", r.detail);
    let r = row(&rep, "lax.dot_general", bi, "S(0), S(0) -> S(0)");
    assert_eq!(r.class, Class::Missing, "{}", r.detail);
    let mut f = with_varying("contraction");
    let out = call(entry(&mut f, "lax.dot_general", bi), &["1x1:1", "1x1:1"]);
    assert_eq!(out.as_deref(), Some("1:1"));
    *out = Some("1:2".into());
    let rep = check(f, None);
    let r = row(&rep, "lax.dot_general", bi, "S(0), S(0) -> S(0)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
}

#[test]
fn shape_primitives_follow_the_shard_and_concatenate_counts_an_invariant_operand() {
    let (n, c, rep) = family_counts("shape");
    assert_eq!((n, c), (SHAPE.0, SHAPE.1), "{}", registry::summary(&rep));
    let mut bad: Vec<String> = Vec::new();
    for r in rep
        .rows
        .iter()
        .filter(|r| r.class == Class::Incorrect && !varying_only(r))
    {
        let s = format!("{} {}", r.shown_op(), r.placements());
        if !bad.contains(&s) {
            bad.push(s);
        }
    }
    bad.sort();
    assert_eq!(
        bad,
        [
            "lax.concatenate(rank=1, dimension=0) P(sum), R -> P(sum)",
            "lax.concatenate(rank=1, dimension=0) R, P(sum) -> P(sum)",
            "lax.concatenate(rank=2, dimension=0) P(sum), R -> P(sum)",
            "lax.concatenate(rank=2, dimension=0) R, P(sum) -> P(sum)",
            "lax.concatenate(rank=2, dimension=1) P(sum), R -> P(sum)",
            "lax.concatenate(rank=2, dimension=1) R, P(sum) -> P(sum)",
            "lax.rev(rank=1, dimensions=(0,)) P(sum) -> R",
            "lax.rev(rank=2, dimensions=(0,)) P(sum) -> R",
            "lax.rev(rank=2, dimensions=(1,)) P(sum) -> R",
        ]
    );
    let r = row(
        &rep,
        "lax.concatenate",
        "rank=1, dimension=0",
        "R, P(sum) -> P(sum)",
    );
    assert_eq!(
        r.detail,
        "F3 2 ranks; input 0 per rank [[1], [1]]; input 1 per rank [[0], [0]]; per-rank outputs [[1, 0], [1, 0]] denote [2, 0], but f of the inputs' denotations is [1, 0]"
    );
    let tr = "rank=2, permutation=(1, 0)";
    let vrep = check(with_varying("shape"), Some("lax.transpose"));
    for pl in ["S(0) -> S(1)", "S(1) -> S(0)", "P(sum) -> P(sum)"] {
        assert_eq!(
            row(&vrep, "lax.transpose", tr, pl).class,
            Class::Correct,
            "{pl}"
        );
    }
    assert_eq!(
        row(
            &rep,
            "lax.rev",
            "rank=1, dimensions=(0,)",
            "P(sum) -> P(sum)"
        )
        .class,
        Class::Missing
    );

    // Twins: transpose typing a pending sum invariant is incorrect; its
    // right claim dropped is missing; a tampered call flips it.
    let mut f = with_varying("shape");
    claims(&mut f, "lax.transpose", tr).retain(|c| c != &claim(&["S(1)", "S(0)"]));
    claims(&mut f, "lax.transpose", tr).push(claim(&["R", "P(sum)"]));
    let rep = check(f, Some("lax.transpose"));
    assert_eq!(
        row(&rep, "lax.transpose", tr, "S(0) -> S(1)").class,
        Class::Missing
    );
    let r = row(&rep, "lax.transpose", tr, "P(sum) -> R");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F1 2 ranks"), "{}", r.detail);
    let mut f = with_varying("shape");
    let out = call(entry(&mut f, "lax.transpose", tr), &["1x1:1"]);
    assert_eq!(out.as_deref(), Some("1x1:1"));
    *out = Some("1x1:2".into());
    let rep = check(f, Some("lax.transpose"));
    let r = row(&rep, "lax.transpose", tr, "S(0) -> S(1)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
}

// (entries, (correct, incorrect, missing, undetermined, latent)) per family.
const REDUCTION: (usize, (usize, usize, usize, usize, usize)) = (64, (4, 52, 11, 0, 0));
const CONTRACTION: (usize, (usize, usize, usize, usize, usize)) = (6, (0, 0, 24, 0, 0));
const SHAPE: (usize, (usize, usize, usize, usize, usize)) = (16, (13, 9, 3, 0, 0));
