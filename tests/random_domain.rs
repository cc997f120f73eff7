//! The random part draws its meshes and shapes from a domain built by the
//! pruned search (SPEC.md §11.2, §18.9), never by drawing and filtering:
//! the domain holds exactly the cases a filter over every mesh and shape
//! tuple would keep, and a rule whose shapes the default scope never
//! reaches (attention, rank 3) is checked on random cases.

use spmd_check::check::{check_rule, CheckConfig};
use spmd_check::generators::{small_meshes, tuples, Domain, Scope};
use spmd_check::interp::TypedOp;
use spmd_check::oracle::{Property, Verdict};
use spmd_check::rules::{build, parse_file};
use spmd_check::semantics::perrank::num_free;
use spmd_check::semantics::{Mesh, Shape};

fn rules(text: &str) -> Vec<spmd_check::rules::Rule> {
    let specs = parse_file("t.toml", text).expect("parses");
    build("t.toml", text, &specs, &Scope::default()).expect("builds")
}

/// What a draw-and-filter sampler keeps: every mesh × tuple the op accepts
/// within 64 free scalars.
fn filtered(op: &TypedOp, meshes: &[Mesh], rank: usize) -> Vec<(Mesh, Vec<Shape>)> {
    let shapes = Scope {
        max_rank: rank,
        max_dim: 4,
        ..Scope::default()
    }
    .shapes();
    let mut out = vec![];
    for m in meshes {
        for t in tuples(&shapes, op.inputs.len()) {
            let fits = op
                .op
                .infer(m, &t)
                .is_ok_and(|(o, _)| op.layouts_fit(m, &t, &o));
            let free: usize = op
                .inputs
                .iter()
                .zip(&t)
                .map(|(ty, s)| num_free(m, ty, s))
                .sum();
            if fits && free <= 64 {
                out.push((m.clone(), t));
            }
        }
    }
    out
}

fn sorted(mut v: Vec<(Mesh, Vec<Shape>)>) -> Vec<String> {
    let mut s: Vec<String> = v.drain(..).map(|(m, t)| format!("{m:?} {t:?}")).collect();
    s.sort();
    s
}

const RULES: &str = r#"
[[rule]]
name = "product"
op = { expr = "x * y" }
inputs = ["V", "I"]
output = "V"

[[rule]]
name = "matmul, column parallel"
op = { expr = "matmul(x, w)" }
inputs = ["I", "V"]
output = "V"

[[rule]]
name = "scores"
op = { expr = "einsum(\"hqd,hkd->hqk\", q, k)" }
inputs = ["V", "V"]
output = "V"

[[rule]]
name = "gather to reduced"
dialect = "jax"
forward = "all_gather(dim = 0, to = 'reduced')"
backward = "psum_scatter(dim = 0)"
inputs = ["Varying"]
output = "Reduced"

[[rule]]
name = "product on two axes"
op = { expr = "x * y" }
inputs = [{ dp = "V", tp = "I" }, { dp = "I", tp = "V" }]
output = { dp = "V", tp = "V" }
"#;

#[test]
fn the_domain_is_what_a_filter_would_keep() {
    for r in rules(RULES) {
        let axes: Vec<&str> = r.meshes[0].axes.iter().map(|a| a.name.as_str()).collect();
        let meshes = small_meshes(&axes, 4, 8);
        for rank in [2, 3] {
            let d = Domain::build(&r.op, &meshes, rank, 4, 64, 400_000).expect("within budget");
            // Rank-3 einsums have no case at rank 2; every rule has some at 3.
            assert!(rank == 2 || !d.is_empty(), "{}", r.name);
            assert_eq!(
                sorted(d.entries.clone()),
                sorted(filtered(&r.op, &meshes, rank)),
                "{} at rank {rank}",
                r.name
            );
        }
    }
}

#[test]
fn a_domain_missing_a_case_is_caught() {
    // The twin: a search that lost one accepted tuple.
    let r = &rules(RULES)[2];
    let meshes = small_meshes(&["x"], 4, 8);
    let mut d = Domain::build(&r.op, &meshes, 3, 4, 64, 400_000).expect("within budget");
    d.entries.pop();
    assert_ne!(sorted(d.entries), sorted(filtered(&r.op, &meshes, 3)));
}

#[test]
fn meshes_are_listed_not_filtered() {
    let two = small_meshes(&["dp", "tp"], 4, 8);
    // Sizes 1..=4 on two axes with at most 8 ranks: 16 - 4 (3x3, 3x4,
    // 4x3, 4x4) = 12, fewest ranks first.
    assert_eq!(two.len(), 12);
    assert!(two.windows(2).all(|w| w[0].num_ranks() <= w[1].num_ranks()));
    assert!(two.iter().all(|m| m.num_ranks() <= 8));
}

const ATTENTION: &str = r#"
[[rule]]
name = "attention, heads sharded"
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["V", "V", "V"]
output = "V"

[[rule]]
name = "attention, heads sharded, output claimed replicated"
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["V", "V", "V"]
output = "R"
"#;

#[test]
fn attention_at_rank_3_is_checked_on_random_cases() {
    // The default scope has rank 2 at most: no exhaustive case, so the
    // random part decides, and every case it asks for runs.
    let rs = rules(ATTENTION);
    let cfg = CheckConfig {
        scope: Scope::default(),
        cases: 32,
        seed: 0,
    };
    let right = check_rule(&rs[0], &cfg, &[], &|_| {});
    assert_eq!(right.random_cases, 32, "{:?}", right.random_note);
    assert!(right.random_note.is_none());
    assert!(
        matches!(right.verdict, Verdict::Sound { .. }),
        "{:?}",
        right.verdict
    );
    // The twin: an output claimed Reduced is found from random cases
    // alone, shrunk to two ranks: a zero cotangent's Partial pieces give
    // a backward that is not zero (B2).
    let wrong = check_rule(&rs[1], &cfg, &[], &|_| {});
    match &wrong.verdict {
        Verdict::Unsound { violation, .. } => {
            assert_eq!(violation.property, Property::B2);
            assert_eq!(violation.mesh.num_ranks(), 2);
        }
        v => panic!("expected unsound B2, got {v:?}"),
    }
}
