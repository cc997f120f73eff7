//! `spmd-check registry jax` (SPEC.md §22): the types JAX 0.12.0.1's own
//! rules give its elementwise primitives on one mesh axis (invariant R,
//! varying S(0), unreduced P(sum)), recorded by peers/record_registry_jax.py
//! into tests/fixtures/registry/jax.json, checked against the primitives'
//! recorded kernels. The classification is pinned: a rule whose class
//! changes fails here. Each class has a twin made by tampering with the
//! recording in memory.

mod common;

use common::run;
use spmd_check::registry::{self, Class, File, Options, Report, Row};

fn recorded() -> File {
    registry::read(&registry::default_file("jax")).expect("the committed recording reads")
}

fn check(f: File, glob: Option<&str>) -> Report {
    let opts = Options {
        op_glob: glob.map(str::to_string),
        missing: true,
        record: false,
    };
    registry::run(f, "test", &opts).expect("runs")
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

fn counts(rep: &Report) -> (usize, usize, usize, usize, usize) {
    let t = registry::totals(&rep.rows);
    let n = |c| *t.get(&c).unwrap_or(&0);
    (
        n(Class::Correct),
        n(Class::Incorrect),
        n(Class::Missing),
        n(Class::Undetermined),
        n(Class::Latent),
    )
}

#[test]
fn the_recorded_registry_classifies_as_pinned() {
    let f = recorded();
    assert_eq!(f.system, "jax");
    assert_eq!(f.versions.get("jax").map(String::as_str), Some("0.12.0.1"));
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
    let rep = check(recorded(), None);
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
        let r = row(&rep, op, args, pl);
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
        let r = row(&rep, op, "", pl);
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
    let rep = check(recorded(), None);
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
        let r = row(&rep, op, args, pl);
        assert_eq!(r.class, Class::Incorrect, "{op}({args}) {pl}");
        assert_eq!(r.detail, detail);
        assert!(r.cex.is_some());
    }
    // integer_pow(y=1) is the identity: its pending sum could be kept,
    // JAX types it invariant instead.
    let r = row(&rep, "lax.integer_pow", "y=1", "P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Missing, "{}", r.detail);
    // y=0 gives 1 on every rank: invariant is right there.
    let r = row(&rep, "lax.integer_pow", "y=0", "P(sum) -> R");
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
    let rep = check(recorded(), None);
    for (op, pl) in [
        ("lax.exp", "P(sum) -> P(sum)"),
        ("lax.mul", "P(sum), P(sum) -> P(sum)"),
    ] {
        assert!(rep
            .rows
            .iter()
            .all(|r| !(r.op == op && r.args.is_empty() && r.placements() == pl)));
    }
    let r = row(&rep, "lax.add", "", "P(sum), P(sum) -> P(sum)");
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
