//! `spmd-check registry spmd_types` beyond its elementwise functions
//! (SPEC.md §22): every other torch function of spmd_types 0.3.1's op
//! registry and type decompositions (reductions, views, concatenation,
//! contractions, addmm-like ops), its functions with a Python scalar, and
//! `rules.einsum`, typed by `spmd_types.typecheck(local=False)` for R, P
//! and S(d) inputs and checked against torch 2.14.1's kernels recorded call
//! by call into tests/fixtures/registry/spmd_types.json.gz. The classes per
//! family are pinned, and each class has a twin made by tampering with the
//! recording.

mod common;

use common::registry::{check, class_of, entry};
use spmd_check::registry::{self, Class, File};
use std::collections::BTreeMap;

fn recorded() -> File {
    common::registry::recorded("spmd_types")
}

fn only(op: &str, args: &str) -> File {
    common::registry::only("spmd_types", op, args)
}

fn claims(f: &mut File) -> &mut Vec<Vec<String>> {
    entry(f).claims.as_mut().expect("claims")
}

fn claim(c: &[&str]) -> Vec<String> {
    c.iter().map(|s| s.to_string()).collect()
}

const SUM0: (&str, &str) = ("torch.sum", "rank=2, dim=0, keepdim=False");
const RULES_MM: (&str, &str) = ("spmd_types.rules.einsum", "rank=2, 'ij,jk->ik'");

#[test]
fn every_family_classifies_as_pinned() {
    let f = recorded();
    let rep = check(f.clone());
    let family: BTreeMap<(&str, &str), &str> = f
        .entries
        .iter()
        .map(|e| ((e.op.as_str(), e.args.as_str()), e.family.as_str()))
        .collect();
    let mut got: BTreeMap<String, (usize, [usize; 5])> = BTreeMap::new();
    for e in &f.entries {
        got.entry(e.family.clone()).or_default().0 += 1;
    }
    for r in &rep.rows {
        let fam = family[&(r.op.as_str(), r.args.as_str())];
        got.get_mut(fam).unwrap().1[match r.class {
            Class::Correct => 0,
            Class::Incorrect => 1,
            Class::Latent => 2,
            Class::Missing => 3,
            Class::Undetermined => 4,
        }] += 1;
    }
    // entries, then correct, incorrect, latent, missing, undetermined
    let want: BTreeMap<String, (usize, [usize; 5])> = [
        ("linearity LINEAR", (12, [12, 0, 0, 0, 0])),
        ("linearity MULTILINEAR", (5, [7, 0, 0, 0, 0])),
        ("scalar", (8, [5, 0, 0, 0, 0])),
        ("reduction", (39, [79, 0, 0, 0, 0])),
        ("view", (71, [112, 0, 0, 11, 23])),
        ("concatenation", (26, [50, 0, 0, 0, 0])),
        ("contraction", (16, [41, 0, 0, 0, 20])),
        ("decomposition", (3, [4, 0, 0, 0, 7])),
        ("rules", (9, [33, 0, 0, 0, 0])),
        // Collectives and casts (SPEC.md §22.5): the undetermined ones are
        // calls the dialect's table has no reading or transpose of.
        ("collective", (120, [93, 0, 0, 0, 27])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(got, want, "{}", registry::summary(&rep));
    // Every undetermined row is an entry whose typing depends on the
    // input shapes (a size-1 dim that broadcasts, a view of a size-1
    // shard), named in its detail.
    let local = |r: &&registry::Row| family[&(r.op.as_str(), r.args.as_str())] != "collective";
    for r in rep
        .rows
        .iter()
        .filter(local)
        .filter(|r| r.class == Class::Undetermined)
    {
        assert!(
            r.detail.contains("depend on the input shapes"),
            "{}: {}",
            r.shown_op(),
            r.detail
        );
    }
    // spmd_types' own states only: R, S(d) and a pending sum.
    assert!(rep.rows.iter().filter(local).all(|r| r
        .inputs
        .iter()
        .chain([&r.output])
        .all(|p| p == "R" || p == "P(sum)" || p.starts_with("S("))));
    // What is not recorded is counted, with its reasons.
    assert_eq!(f.not_recorded.values().sum::<usize>(), 91);
    assert!(f.not_recorded.keys().any(|k| k.contains("tuple output")));
}

#[test]
fn the_elementwise_entries_are_unchanged() {
    let mut f = recorded();
    f.entries.retain(|e| e.family.starts_with("linearity "));
    assert_eq!(f.entries.len(), 17);
    assert!(f.entries.iter().all(|e| e.kernel.is_some()));
    let rep = check(f);
    assert_eq!(rep.rows.len(), 19, "{}", registry::summary(&rep));
    assert!(rep.rows.iter().all(|r| r.class == Class::Correct));
}

#[test]
fn sum_over_a_shard_is_pending_and_its_twins_fail() {
    let (op, args) = SUM0;
    let rep = check(only(op, args));
    assert_eq!(class_of(&rep, "S(0) -> P(sum)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "S(1) -> S(0)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "P(sum) -> P(sum)"), vec![Class::Correct]);

    // Twin: a claim that the shard survives the sum over its own dim is
    // incorrect, and the report names the property that fails.
    let mut f = only(op, args);
    claims(&mut f).push(claim(&["S(0)", "S(0)"]));
    let rep = check(f);
    let bad: Vec<_> = rep
        .rows
        .iter()
        .filter(|r| r.placements() == "S(0) -> S(0)")
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].class, Class::Incorrect, "{}", bad[0].detail);
    assert!(bad[0].detail.starts_with("F3 "), "{}", bad[0].detail);
    assert!(bad[0].cex.is_some());

    // Twin: drop the right claim S(0) -> P(sum): it is missing.
    let mut f = only(op, args);
    claims(&mut f).retain(|c| c != &claim(&["P(sum)", "S(0)"]));
    let rep = check(f);
    assert_eq!(class_of(&rep, "S(0) -> P(sum)"), vec![Class::Missing]);
}

#[test]
fn a_tampered_call_makes_a_right_claim_incorrect() {
    let (op, args) = SUM0;
    // The global call on [[0], [1]] (two ranks of [1, 1], sharded on dim
    // 0) sums to [1]; record 2 instead.
    let target = "2x1:0,1";
    let mut f = only(op, args);
    let k = entry(&mut f).tensor_kernel.as_mut().expect("call by call");
    let call = k
        .calls
        .iter_mut()
        .find(|c| c.len() == 2 && c[0].as_deref() == Some(target))
        .expect("the call is recorded");
    assert_eq!(call[1].as_deref(), Some("1:1"));
    call[1] = Some("1:2".into());
    let rep = check(f);
    assert_eq!(class_of(&rep, "S(0) -> P(sum)"), vec![Class::Incorrect]);
}

#[test]
fn rules_einsum_is_multilinear_and_its_twins_fail() {
    let (op, args) = RULES_MM;
    let rep = check(only(op, args));
    // A contraction over the shard is pending; a pending factor with a
    // replicated one stays pending; a row shard stays a row shard.
    assert_eq!(class_of(&rep, "S(1), S(0) -> P(sum)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "P(sum), R -> P(sum)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "S(0), R -> S(0)"), vec![Class::Correct]);
    assert!(rep.rows.iter().all(|r| r.class == Class::Correct));

    // Twin: a pending sum in both factors (linear_in=((0, 1),), jointly
    // linear, as if matmul were addition) is incorrect.
    let mut f = only(op, args);
    claims(&mut f).push(claim(&["P(sum)", "P(sum)", "P(sum)"]));
    let rep = check(f);
    let r: Vec<_> = rep
        .rows
        .iter()
        .filter(|r| r.placements() == "P(sum), P(sum) -> P(sum)")
        .collect();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].class, Class::Incorrect, "{}", r[0].detail);
    assert!(r[0].detail.starts_with("F3 "), "{}", r[0].detail);

    // Twin: drop R, S(1) -> S(1): it is missing.
    let mut f = only(op, args);
    claims(&mut f).retain(|c| c != &claim(&["S(1)", "R", "S(1)"]));
    let rep = check(f);
    assert_eq!(class_of(&rep, "R, S(1) -> S(1)"), vec![Class::Missing]);
}

#[test]
fn a_scalar_operand_is_typed_apart() {
    // P * 2 stays a pending sum; P + 2 is refused (affine: the constant
    // would be summed once per rank), and claiming it is incorrect.
    let rep = check(only("torch.mul", "other=2"));
    assert_eq!(class_of(&rep, "P(sum) -> P(sum)"), vec![Class::Correct]);
    let mut f = only("torch.add", "other=2");
    assert!(claims(&mut f).iter().all(|c| c.iter().all(|p| p == "R")));
    let rep = check(f.clone());
    assert!(rep.rows.is_empty(), "nothing claimed and nothing missing");
    claims(&mut f).push(claim(&["P(sum)", "P(sum)"]));
    let rep = check(f);
    let r = &rep.rows[0];
    assert_eq!(r.placements(), "P(sum) -> P(sum)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert_eq!(r.cex.as_ref().unwrap().n, 2, "{}", r.detail);
}

#[test]
fn an_index_typed_r_keeps_a_pending_sum_out_of_index_select() {
    // spmd_types types the index tensor too: P with an R index is a
    // linear op mixing P and R, refused, though the values would defer.
    let rep = check(only("torch.index_select", "rank=2, dim=0, index=R [0]"));
    assert_eq!(class_of(&rep, "P(sum) -> P(sum)"), vec![Class::Missing]);
    // A shard of the other dim passes through (DTensor's rule).
    assert_eq!(class_of(&rep, "S(1) -> S(1)"), vec![Class::Correct]);
}
