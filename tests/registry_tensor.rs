//! `spmd-check registry dtensor` on reductions, views, contractions and
//! the softmax backward ops (SPEC.md §22):
//! kernels recorded call by call from torch 2.14.1 into
//! tests/fixtures/registry/dtensor.json.gz. The classes of both families
//! are pinned, and each class has a twin made by tampering with the
//! recording: a wrong claim is incorrect, a dropped claim is missing, a
//! wrong recorded call makes a right claim incorrect, and a call that was
//! never recorded leaves the claim undetermined (and is wanted).

mod common;

use common::registry::{check, class_of, entry};
use common::run;
use spmd_check::registry::{self, Class, Entry, File};
use std::collections::BTreeMap;

fn recorded() -> File {
    common::registry::recorded("dtensor")
}

fn only(op: &str, args: &str) -> File {
    common::registry::only("dtensor", op, args)
}

const SUM0: (&str, &str) = ("aten.sum.dim_IntList", "rank=2, dim=[0], keepdim=False");
const AMAX0: (&str, &str) = ("aten.amax.default", "rank=2, dim=[0], keepdim=False");

#[test]
fn reductions_and_views_classify_as_pinned() {
    let f = recorded();
    let fams: BTreeMap<String, Vec<String>> = f.entries.iter().fold(BTreeMap::new(), |mut m, e| {
        m.entry(e.family.clone()).or_default().push(e.op.clone());
        m
    });
    let mut g = f.clone();
    g.entries.retain(|e| e.family != "pointwise");
    let rep = check(g);
    let mut got = BTreeMap::new();
    for (fam, ops) in &fams {
        if fam == "pointwise" {
            continue;
        }
        let mut t = [0usize; 5];
        for r in rep.rows.iter().filter(|r| ops.contains(&r.op)) {
            t[match r.class {
                Class::Correct => 0,
                Class::Incorrect => 1,
                Class::Latent => 2,
                Class::Missing => 3,
                Class::Undetermined => 4,
            }] += 1;
        }
        let entries = f.entries.iter().filter(|e| &e.family == fam).count();
        got.insert(fam.clone(), (entries, t));
    }
    let want: BTreeMap<String, (usize, [usize; 5])> = [
        // entries, then correct, incorrect, latent, missing, undetermined
        ("backward".to_string(), (6, [2, 0, 0, 6, 2])),
        ("matmul".to_string(), (6, [12, 0, 0, 0, 28])),
        ("reduction".to_string(), (286, [292, 45, 0, 97, 38])),
        // DTensor.redistribute's entries: no forward claims, its pairs are
        // checked backward (tests/registry_backward.rs).
        ("redistribute".to_string(), (20, [0, 0, 0, 0, 0])),
        // DTensor.from_local and to_local: no forward claims, checked
        // backward (tests/registry_backward.rs).
        ("local".to_string(), (3, [0, 0, 0, 0, 0])),
        ("view".to_string(), (80, [352, 0, 0, 114, 55])),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want, "{}", registry::summary(&rep));
    // The incorrect claims: linalg__powsum (a sum of |x|^ord) keeping a
    // pending sum, which is not linear; logsumexp with keepdim claiming
    // the shard of dim 1 moves to dim 0; the inf-norms keeping a pending
    // max or min. Each was reproduced in
    // DTensor by its script when recorded.
    for r in rep.rows.iter().filter(|r| r.class == Class::Incorrect) {
        let expected = match r.op.as_str() {
            "aten.linalg__powsum.default" => "P(sum) -> P(sum)",
            "aten.logsumexp.default" => "S(1) -> S(0)",
            // The inf-norm max|x| (and the -inf one, min|x|) keeping a
            // pending max (min): |x| is not monotone.
            "aten.linalg_vector_norm.default" | "aten.norm.Scalar" => {
                if r.args.contains("-inf") {
                    "P(min) -> P(min)"
                } else {
                    "P(max) -> P(max)"
                }
            }
            other => panic!("{other} {}: {}", r.placements(), r.detail),
        };
        assert_eq!(r.placements(), expected, "{}", r.detail);
        assert!(r.detail.starts_with("F3 2 ranks"), "{}", r.detail);
        assert!(
            r.repro.as_ref().is_some_and(|o| o.reproduced),
            "{}",
            r.detail
        );
    }
    let lse: Vec<_> = rep
        .rows
        .iter()
        .filter(|r| r.class == Class::Incorrect && r.op == "aten.logsumexp.default")
        .collect();
    assert_eq!(lse.len(), 1);
    assert_eq!(lse[0].args, "rank=2, dim=[0], keepdim=True");
}

#[test]
fn sum_over_a_sharded_dim_is_pending_and_the_twins_fail() {
    let (op, args) = SUM0;
    let rep = check(only(op, args));
    // Summing the sharded dim leaves a pending sum; summing across the
    // other dim keeps the shard; a pending sum stays pending.
    assert_eq!(class_of(&rep, "S(0) -> P(sum)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "S(1) -> S(0)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "P(sum) -> P(sum)"), vec![Class::Correct]);
    // A pending average stays one too, but DTensor does not register it.
    assert_eq!(class_of(&rep, "P(avg) -> P(avg)"), vec![Class::Missing]);

    // Twin: a claim that the shard survives the sum over its own dim.
    let mut f = only(op, args);
    entry(&mut f)
        .claims
        .as_mut()
        .unwrap()
        .push(vec!["S(0)".into(), "S(0)".into()]);
    let rep = check(f);
    let bad: Vec<_> = rep
        .rows
        .iter()
        .filter(|r| r.placements() == "S(0) -> S(0)")
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].class, Class::Incorrect, "{}", bad[0].detail);
    assert!(bad[0].detail.starts_with("F"), "{}", bad[0].detail);

    // Twin: drop the right claim S(0) -> P(sum): it is missing.
    let mut f = only(op, args);
    entry(&mut f)
        .claims
        .as_mut()
        .unwrap()
        .retain(|c| c != &["P(sum)", "S(0)"]);
    let rep = check(f);
    assert_eq!(class_of(&rep, "S(0) -> P(sum)"), vec![Class::Missing]);
}

#[test]
fn the_softmax_backward_is_linear_in_the_gradient_and_dtensor_does_not_say_so() {
    // _softmax_backward_data(g, y, dim) = y * (g - sum(g * y, dim)): linear
    // in g, so a pending sum of g with y replicated stays pending. DTensor
    // registers only the shard of the other dim.
    let (op, args) = ("aten._softmax_backward_data.default", "rank=2, dim=1");
    let rep = check(only(op, args));
    assert_eq!(class_of(&rep, "S(0), S(0) -> S(0)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "P(sum), R -> P(sum)"), vec![Class::Missing]);
    // Twin: claim the shard of the softmax dim survives (each rank would
    // normalise over its own half of the row).
    let mut f = only(op, args);
    entry(&mut f)
        .claims
        .as_mut()
        .unwrap()
        .push(vec!["S(1)".into(), "S(1)".into(), "S(1)".into()]);
    let rep = check(f);
    assert_eq!(class_of(&rep, "S(1), S(1) -> S(1)"), vec![Class::Incorrect]);
    // Twin: a pending sum of the output y is not linear (y appears twice).
    let mut f = only(op, args);
    entry(&mut f)
        .claims
        .as_mut()
        .unwrap()
        .push(vec!["P(sum)".into(), "R".into(), "P(sum)".into()]);
    let rep = check(f);
    assert_eq!(
        class_of(&rep, "R, P(sum) -> P(sum)"),
        vec![Class::Incorrect]
    );
}

#[test]
fn mm_rules_hold_and_a_wrong_one_fails() {
    let (op, args) = ("aten.mm.default", "rank=2");
    let rep = check(only(op, args));
    // Row-parallel: the contracted dim sharded on both sides is pending.
    assert_eq!(class_of(&rep, "S(1), S(0) -> P(sum)"), vec![Class::Correct]);
    assert_eq!(class_of(&rep, "S(0), R -> S(0)"), vec![Class::Correct]);
    let mut f = only(op, args);
    entry(&mut f).claims.as_mut().unwrap().push(vec![
        "P(sum)".into(),
        "P(sum)".into(),
        "P(sum)".into(),
    ]);
    let rep = check(f);
    assert_eq!(
        class_of(&rep, "P(sum), P(sum) -> P(sum)"),
        vec![Class::Incorrect]
    );
}

#[test]
fn amax_keeps_a_pending_max_not_a_pending_sum() {
    let (op, args) = AMAX0;
    let rep = check(only(op, args));
    assert_eq!(class_of(&rep, "S(0) -> P(max)"), vec![Class::Correct]);
    assert!(
        class_of(&rep, "S(0) -> P(sum)").is_empty(),
        "neither claimed nor sound"
    );
    let mut f = only(op, args);
    entry(&mut f)
        .claims
        .as_mut()
        .unwrap()
        .push(vec!["P(sum)".into(), "S(0)".into()]);
    let rep = check(f);
    let r = rep
        .rows
        .iter()
        .find(|r| r.placements() == "S(0) -> P(sum)")
        .expect("the tampered claim is a row");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    let cex = r.cex.as_ref().expect("a counterexample");
    assert_eq!(cex.n, 2, "the smallest mesh: {}", r.detail);
}

#[test]
fn a_tampered_call_makes_a_right_claim_incorrect_and_a_dropped_call_undetermined() {
    let (op, args) = SUM0;
    // The global call on [[0], [1]] (two ranks of [1, 1], sharded on dim
    // 0) sums to [1]; record 2 instead.
    let target = "2x1:0,1";
    let mut f = only(op, args);
    let k = entry(&mut f)
        .tensor_kernel
        .as_mut()
        .expect("recorded call by call");
    let call = k
        .calls
        .iter_mut()
        .find(|c| c[0].as_deref() == Some(target))
        .expect("the call is recorded");
    assert_eq!(call[1].as_deref(), Some("1:1"));
    call[1] = Some("1:2".into());
    let rep = check(f);
    let r = rep
        .rows
        .iter()
        .find(|r| r.placements() == "S(0) -> P(sum)")
        .unwrap();
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);

    // Dropping that call leaves its instances unchecked: undetermined, and
    // the run wants the call back.
    let mut f = only(op, args);
    let k = entry(&mut f).tensor_kernel.as_mut().unwrap();
    k.calls.retain(|c| c[0].as_deref() != Some(target));
    let rep = check(f);
    let r = rep
        .rows
        .iter()
        .find(|r| r.placements() == "S(0) -> P(sum)")
        .unwrap();
    assert_eq!(r.class, Class::Undetermined, "{}", r.detail);
    assert!(
        r.detail.contains("no kernel output was recorded"),
        "{}",
        r.detail
    );
    let wanted: Vec<&Vec<String>> = rep.wanted.iter().flat_map(|w| &w.calls).collect();
    assert!(wanted.contains(&&vec![target.to_string()]), "{wanted:?}");
}

#[test]
fn shape_dependent_entries_are_undetermined_with_the_difference() {
    let f = recorded();
    let dependent: Vec<&Entry> = f
        .entries
        .iter()
        .filter(|e| e.shape_dependent.is_some())
        .collect();
    assert!(!dependent.is_empty());
    let mut g = f.clone();
    g.entries.retain(|e| e.shape_dependent.is_some());
    let rep = check(g);
    assert!(!rep.rows.is_empty());
    for r in &rep.rows {
        assert_eq!(r.class, Class::Undetermined, "{}", r.detail);
        assert!(
            r.detail.contains("depend on the input shapes"),
            "{}",
            r.detail
        );
    }
}

#[test]
fn bad_tensor_records_are_one_line_and_exit_2() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-reg-tensor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (op, args) = SUM0;
    type Tamper = Box<dyn Fn(&mut Entry)>;
    let cases: Vec<(&str, Tamper)> = vec![
        (
            "is not SHAPE:VALUES",
            Box::new(|e: &mut Entry| {
                e.tensor_kernel.as_mut().unwrap().calls[0][0] = Some("1,2".into())
            }),
        ),
        (
            "with 3 values",
            Box::new(|e: &mut Entry| {
                e.tensor_kernel.as_mut().unwrap().calls[0][0] = Some("2x1:1,2,3".into())
            }),
        ),
        (
            "too large",
            Box::new(|e: &mut Entry| {
                e.tensor_kernel.as_mut().unwrap().calls[0][0] =
                    Some("100000x100000x100000:1".into())
            }),
        ),
        (
            "ranks for 2 inputs",
            Box::new(|e: &mut Entry| e.tensor_kernel.as_mut().unwrap().ranks = vec![2, 2]),
        ),
        (
            "exactly one of `out` and `refused`",
            Box::new(|e: &mut Entry| e.tensor_kernel.as_mut().unwrap().shapes[0].out = None),
        ),
    ];
    for (i, (why, tamper)) in cases.iter().enumerate() {
        let mut f = only(op, args);
        tamper(entry(&mut f));
        let path = dir.join(format!("bad{i}.json"));
        std::fs::write(&path, serde_json::to_string(&f).unwrap()).unwrap();
        let (code, _, err) = run(&["registry", "dtensor", "--file", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{why}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(why), "{why}: {err}");
    }
    // A gzip file that is cut short is one line too.
    let gz = std::fs::read(registry::default_file("dtensor")).unwrap();
    let path = dir.join("cut.json.gz");
    std::fs::write(&path, &gz[..gz.len() / 2]).unwrap();
    let (code, _, err) = run(&["registry", "dtensor", "--file", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
