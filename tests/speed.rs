//! SPEC.md §18: a case's grid is split across threads, and what a run
//! reports (verdicts, counterexamples, counts) does not depend on how many.

use spmd_check::derive::derive;
use spmd_check::generators::Scope;
use spmd_check::interp::builtin;
use spmd_check::report::derive_json;
use spmd_check::semantics::Mesh;

fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool")
        .install(f)
}

/// Two-rank cases of `x / y` have 6⁴ points, so the split is exercised.
fn scope() -> Scope {
    Scope {
        meshes: vec![Mesh::line(1), Mesh::line(2)],
        max_rank: 1,
        max_dim: 2,
        ..Scope::default()
    }
}

fn derived(op: &str, threads: usize) -> serde_json::Value {
    let f = builtin(op).expect("builtin");
    in_pool(threads, || {
        derive_json(&derive(&f, &scope(), &|_| {}).expect("derive"))
    })
}

#[test]
fn derived_tables_are_the_same_on_one_and_two_threads() {
    for op in ["div", "mul", "relu"] {
        let (a, b) = (derived(op, 1), derived(op, 2));
        assert_eq!(a, b, "derive {op} differs between 1 and 2 threads");
    }
}

/// The twin: the comparison above can fail. Two different ops give different
/// reports (their counterexamples and counts are in the JSON), so equal
/// reports are not vacuous.
#[test]
fn the_comparison_sees_counterexamples_and_counts() {
    let (a, b) = (derived("div", 2), derived("mul", 2));
    assert_ne!(a, b);
    let rows = a.as_array().expect("rows");
    assert!(rows.iter().any(|r| !r["counterexample"].is_null()));
}

/// A rule whose first failure is a backward one (held while the rest of the
/// case is scanned for a forward one) reports the same counterexample and
/// counts at any thread count.
#[test]
fn rule_reports_are_the_same_on_one_and_two_threads() {
    let text = "[[rule]]\nname = \"I mixed with V\"\nop = \"mul\"\ninputs = [\"I\", \"V\"]\noutput = \"V\"\n\n[[rule]]\nname = \"P / V\"\nop = \"div\"\ninputs = [\"P\", \"V\"]\noutput = \"P\"\n\n[[rule]]\nname = \"x over y\"\nop = \"div\"\ninputs = [\"V\", \"V\"]\noutput = \"V\"\n";
    let report = |threads: usize| {
        in_pool(threads, || {
            let sc = scope();
            let specs = spmd_check::rules::parse_file("t", text).expect("parse");
            let rules = spmd_check::rules::build("t", text, &specs, &sc).expect("build");
            let cfg = spmd_check::check::CheckConfig {
                scope: sc,
                cases: 0,
                seed: 0,
            };
            rules
                .iter()
                .map(|r| {
                    let rep = spmd_check::check::check_rule(r, &cfg, &[], &|_| {});
                    let mut j = spmd_check::report::verdict_json(&rep.verdict);
                    j["name"] = serde_json::json!(rep.name);
                    j
                })
                .collect::<Vec<_>>()
        })
    };
    let (a, b) = (report(1), report(2));
    assert_eq!(a, b);
    assert!(a[0]["counterexample"].is_object(), "I*V -> V must fail");
    assert!(a[2]["counterexample"].is_null(), "V/V -> V is sound");
}
