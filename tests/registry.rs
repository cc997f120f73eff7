//! `spmd-check registry` (SPEC.md §22): DTensor's registered pointwise
//! strategies, recorded from torch 2.14.1 into
//! tests/fixtures/registry/dtensor.json.gz, checked against the recorded
//! kernel. The classification is pinned: a rule whose class changes fails
//! here. Each class has a twin made by tampering with the recording.

mod common;

use common::run;
use spmd_check::registry::{self, Class, File, Report};

fn recorded() -> File {
    common::registry::recorded("dtensor")
}

fn check(f: File, glob: Option<&str>) -> Report {
    common::registry::check_glob(f, glob)
}

/// The first entry of `op`, to tamper with.
fn entry<'a>(f: &'a mut File, op: &str) -> &'a mut registry::Entry {
    f.entries
        .iter_mut()
        .find(|e| e.op == op)
        .unwrap_or_else(|| panic!("{op} is registered"))
}

/// The claims of the first entry of `op`.
fn claims<'a>(f: &'a mut File, op: &str) -> &'a mut Vec<Vec<String>> {
    entry(f, op).claims.as_mut().expect("claims")
}

fn rows<'a>(rep: &'a Report, op: &str, args: &str, placements: &str) -> Vec<&'a registry::Row> {
    rep.rows
        .iter()
        .filter(|r| r.op == op && r.args == args && r.placements() == placements)
        .collect()
}

#[test]
fn the_recorded_registry_classifies_as_pinned() {
    // The pointwise family (reductions and views: tests/registry_tensor.rs).
    let mut f = recorded();
    f.entries.retain(|e| e.family == "pointwise");
    let rep = check(f, None);
    assert_eq!(
        common::registry::totals(&rep),
        (591, 6, 2, 2193, 253),
        "{}",
        registry::summary(&rep)
    );
    // Every incorrect claim is threshold keeping Partial(max|min) where
    // its value lies above the threshold, and each was reproduced in
    // DTensor by its script when recorded.
    for r in rep.rows.iter().filter(|r| r.class == Class::Incorrect) {
        assert_eq!(r.op, "aten.threshold.default", "{}", r.detail);
        assert!(
            r.repro.as_ref().is_some_and(|o| o.reproduced),
            "{}",
            r.detail
        );
        assert!(r.detail.starts_with("F3 2 ranks"), "{}", r.detail);
    }
    // to.dtype keeping Partial(sum) into an integer dtype is wrong as
    // registered, but eager DTensor never uses it (the op reaches the
    // dispatcher as _to_copy, which redistributes to Replicate first).
    for dtype in ["int64", "int32"] {
        let r = rows(
            &rep,
            "aten.to.dtype",
            &format!("dtype=torch.{dtype}"),
            "P(sum) -> P(sum)",
        );
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].class, Class::Latent, "{}", r[0].detail);
        assert!(r[0].detail.contains("chose R"), "{}", r[0].detail);
    }
    // The right threshold (value below the threshold) is correct.
    let ok = rows(
        &rep,
        "aten.threshold.default",
        "threshold=0.0, value=-1.0",
        "P(max) -> P(max)",
    );
    assert_eq!(ok[0].class, Class::Correct, "{}", ok[0].detail);
}

#[test]
fn the_counterexample_is_the_minimal_one() {
    let rep = check(recorded(), Some("aten.threshold.default"));
    let bad = rows(
        &rep,
        "aten.threshold.default",
        "threshold=0.0, value=1.0",
        "P(max) -> P(max)",
    );
    assert_eq!(bad[0].class, Class::Incorrect);
    assert_eq!(
        bad[0].detail.split("; reproduced").next().unwrap(),
        "F3 2 ranks; input 0 per rank [0, 1/2]; per-rank outputs [1, 1/2] denote 1, but f of the inputs' denotations is 1/2"
    );
}

#[test]
fn a_tampered_claim_is_incorrect_and_a_dropped_claim_is_missing() {
    let mut f = recorded();
    // Twin 1: abs does not keep a pending sum (|1| + |-1| is not |0|).
    claims(&mut f, "aten.abs.default").push(vec!["P(sum)".into(), "P(sum)".into()]);
    // Twin 2: relu's P(max) -> P(max) taken out of the registry.
    claims(&mut f, "aten.relu.default")
        .retain(|c| c != &vec!["P(max)".to_string(), "P(max)".to_string()]);
    let rep = check(f.clone(), Some("aten.abs.default"));
    let a = rows(&rep, "aten.abs.default", "", "P(sum) -> P(sum)");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].class, Class::Incorrect, "{}", a[0].detail);
    assert!(a[0].repro.is_none(), "never run in the framework");
    let rep = check(f, Some("aten.relu.default"));
    let r = rows(&rep, "aten.relu.default", "", "P(max) -> P(max)");
    assert_eq!(r[0].class, Class::Missing, "{}", r[0].detail);
    assert!(r[0].detail.contains("redistributes"), "{}", r[0].detail);
    // Untampered, both are what the library says.
    let rep = check(recorded(), Some("aten.abs.default"));
    assert!(rows(&rep, "aten.abs.default", "", "P(sum) -> P(sum)").is_empty());
    let rep = check(recorded(), Some("aten.relu.default"));
    let r = rows(&rep, "aten.relu.default", "", "P(max) -> P(max)");
    assert_eq!(r[0].class, Class::Correct, "{}", r[0].detail);
}

#[test]
fn a_tampered_kernel_value_makes_a_right_claim_incorrect() {
    let mut f = recorded();
    // neg(1) recorded as 1 instead of -1.
    let k = entry(&mut f, "aten.neg.default").kernel.as_mut().unwrap();
    let row = k
        .rows
        .iter_mut()
        .find(|r| r[0].as_deref() == Some("1"))
        .expect("neg was looked up at 1");
    row[1] = Some("1".into());
    let rep = check(f, Some("aten.neg.default"));
    let bad: Vec<_> = rep
        .rows
        .iter()
        .filter(|r| r.class == Class::Incorrect)
        .collect();
    assert!(!bad.is_empty(), "{}", registry::summary(&rep));
    let rep = check(recorded(), Some("aten.neg.default"));
    assert!(rep.rows.iter().all(|r| r.class != Class::Incorrect));
}

#[test]
fn an_inexact_kernel_is_undetermined_never_correct() {
    let rep = check(recorded(), Some("aten.exp.default"));
    assert!(!rep.rows.is_empty());
    for r in &rep.rows {
        assert_eq!(
            r.class,
            Class::Undetermined,
            "{} {}",
            r.placements(),
            r.detail
        );
        assert!(r.detail.contains("not exact in float64"), "{}", r.detail);
    }
}

#[test]
fn the_cli_reports_exits_and_writes_repro_scripts() {
    let (code, out, err) = run(&[
        "registry",
        "dtensor",
        "--op",
        "aten.threshold.default",
        "--show-repro",
    ]);
    assert_eq!(code, 1, "an incorrect claim fails the run: {err}");
    assert!(out.contains("6 incorrect"), "{out}");
    assert!(
        out.contains("torch.ops.aten.threshold.default(x0, 0.0, 1.0)"),
        "{out}"
    );
    assert!(out.contains("Partial(\"max\")"), "{out}");
    let (code, out, _) = run(&["registry", "dtensor", "--op", "aten.relu.default", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["command"], "registry");
    assert_eq!(v["totals"]["incorrect"], 0);
    let (code, _, err) = run(&["registry", "dtensr"]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean `dtensor`"), "{err}");
}

#[test]
fn a_bad_registry_file_is_one_line_and_exit_2() {
    // A small registry of the recording's own entries, written as plain JSON.
    let mut f = recorded();
    f.entries
        .retain(|e| ["aten.abs.default", "aten.threshold.default"].contains(&e.op.as_str()));
    let good = serde_json::to_string(&f).unwrap();
    let cases: Vec<(&str, String)> = vec![
        ("not json", "{".into()),
        (
            "wrong schema",
            good.replacen("spmd-check-registry/1", "other/1", 1),
        ),
        (
            "bad placement",
            good.replacen("\"P(max)\"", "\"P(prod)\"", 1),
        ),
        (
            "short claim",
            good.replacen("[\"S(0)\",\"S(0)\"]", "[\"S(0)\"]", 1),
        ),
        (
            "bad number",
            good.replacen("[\"-1\",\"1\"]", "[\"-1\",\"one\"]", 1),
        ),
    ];
    for (what, text) in cases {
        assert_ne!(text, good, "{what}: the tampering applies");
        let p = common::temp_rule_file(&format!("registry-{}.json", what.replace(' ', "-")), &text);
        let (code, out, err) = run(&["registry", "dtensor", "--file", &p]);
        assert_eq!(code, 2, "{what}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: {err}");
        assert!(err.contains(&p), "{what}: names the file: {err}");
    }
}

#[test]
fn spmd_types_elementwise_registry_is_correct_and_its_twin_is_not() {
    let mut f = registry::read(&registry::default_file("spmd_types")).expect("reads");
    // The elementwise entries (the rest: tests/registry_spmd_types.rs).
    f.entries.retain(|e| e.family.starts_with("linearity "));
    let rep = check(f.clone(), None);
    let t = registry::totals(&rep.rows);
    assert_eq!(
        t.get(&Class::Correct),
        Some(&19),
        "{}",
        registry::summary(&rep)
    );
    assert_eq!(rep.rows.len(), 19, "{}", registry::summary(&rep));
    // Only spmd_types' own states are searched: no Shard, no max/min.
    assert!(rep.rows.iter().all(|r| r
        .inputs
        .iter()
        .chain([&r.output])
        .all(|p| p == "R" || p == "P(sum)")));
    // Twin: div typed multilinear in both factors (nonlinear_args dropped)
    // would let a pending sum into the divisor.
    let mut bad = f;
    let div = bad
        .entries
        .iter_mut()
        .find(|e| e.op == "torch.div")
        .expect("div");
    div.claims
        .as_mut()
        .unwrap()
        .push(vec!["P(sum)".into(), "R".into(), "P(sum)".into()]);
    let rep = check(bad, Some("torch.div"));
    let r = rows(&rep, "torch.div", "", "R, P(sum) -> P(sum)");
    assert_eq!(r[0].class, Class::Incorrect, "{}", r[0].detail);
}

/// The live path against the installed torch, where
/// SPMD_CHECK_TORCH_PYTHON names a Python that has it (skipped otherwise):
/// it agrees with the recording, and a monkeypatched wrong strategy is
/// caught.
#[test]
fn live_agrees_with_the_recording_and_catches_a_patched_strategy() {
    let Ok(py) = std::env::var("SPMD_CHECK_TORCH_PYTHON") else {
        eprintln!("skipped: SPMD_CHECK_TORCH_PYTHON is not set");
        return;
    };
    let live = |patch: Option<&str>, op: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"));
        cmd.args(["registry", "dtensor", "--live", "--op", op, "--json"])
            .env("SPMD_CHECK_TORCH_PYTHON", &py);
        if let Some(p) = patch {
            cmd.env("SPMD_CHECK_REGISTRY_PATCH", p);
        }
        let out = cmd.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        v
    };
    let classes = |v: &serde_json::Value| {
        let mut c: Vec<String> = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{} {} {:?} {}",
                    r["args"], r["output"], r["inputs"], r["class"]
                )
            })
            .collect();
        c.sort();
        c
    };
    let rec = run(&[
        "registry",
        "dtensor",
        "--op",
        "aten.threshold.default",
        "--json",
    ]);
    let recorded: serde_json::Value = serde_json::from_str(&rec.1).unwrap();
    assert_eq!(
        classes(&live(None, "aten.threshold.default")),
        classes(&recorded)
    );
    let v = live(Some("aten.abs.default=P(sum),P(sum)"), "aten.abs.default");
    assert_eq!(v["totals"]["incorrect"], 1, "{v}");
    let v = live(None, "aten.abs.default");
    assert_eq!(v["totals"]["incorrect"], 0, "{v}");
    // The live path records the backward and 2x2 steps too, and classes
    // them as the recording does (same seeds, same library).
    let live_t = live(None, "aten.threshold.default");
    for part in ["backward", "mesh2d"] {
        assert_eq!(live_t[part]["totals"], recorded[part]["totals"], "{part}");
    }
}
