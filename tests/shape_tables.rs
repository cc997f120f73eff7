//! A program's shape table (SPEC.md §18.9): inputs are fixed one at a
//! time and each step is inferred as soon as the inputs it reads are
//! fixed, so a step that rejects its shapes prunes every tuple extending
//! the prefix. The pruned candidates must keep every tuple `infer` accepts,
//! in the same order as the full cartesian product.

use spmd_check::generators::{candidate_tuples, tuples, Scope};
use spmd_check::interp::{Op, TypedOp};
use spmd_check::rules::{build, parse_file};
use spmd_check::semantics::{Mesh, Shape};

/// Every program of the layer, FSDP and pattern tables, with its name and
/// the meshes its rule is checked on.
fn programs() -> Vec<(String, TypedOp, Vec<Mesh>)> {
    let scope = Scope::default();
    let mut out = vec![];
    let files = [
        ("examples/programs.toml", spmd_check::programs::LAYERS_TOML),
        ("examples/fsdp.toml", spmd_check::fsdp::FSDP_TOML),
        ("ddp.toml", include_str!("../examples/patterns/ddp.toml")),
        (
            "fsdp_tp.toml",
            include_str!("../examples/patterns/fsdp_tp.toml"),
        ),
        (
            "megatron.toml",
            include_str!("../examples/patterns/megatron.toml"),
        ),
        ("moe.toml", include_str!("../examples/patterns/moe.toml")),
        ("zero.toml", include_str!("../examples/patterns/zero.toml")),
        (
            "sequence_parallel.toml",
            include_str!("../examples/patterns/sequence_parallel.toml"),
        ),
    ];
    for (file, text) in files {
        let specs = parse_file(file, text).expect("parses");
        for r in build(file, text, &specs, &scope).expect("builds") {
            if matches!(r.op.op, Op::Program(_)) {
                out.push((r.name, r.op, r.meshes));
            }
        }
    }
    out
}

fn accepted(op: &Op, m: &Mesh, ts: &[Vec<Shape>]) -> Vec<Vec<Shape>> {
    ts.iter()
        .filter(|t| op.infer(m, t).is_ok())
        .cloned()
        .collect()
}

/// Per program and mesh: (accepted among the candidates, accepted among
/// all tuples, candidates, all tuples).
type Row = (Vec<Vec<Shape>>, Vec<Vec<Shape>>, usize, usize);

fn rows() -> Vec<(String, Row)> {
    let scope = Scope::default();
    let mut out = vec![];
    for (name, op, meshes) in programs() {
        for m in meshes {
            let shapes = scope.shapes_for(&m);
            let all = tuples(&shapes, op.op.arity());
            let cand = candidate_tuples(&op.op, &m, &shapes);
            let row = (
                accepted(&op.op, &m, &cand),
                accepted(&op.op, &m, &all),
                cand.len(),
                all.len(),
            );
            out.push((format!("{name} on {m:?}"), row));
        }
    }
    out
}

#[test]
fn a_programs_candidates_keep_every_accepted_tuple_in_order() {
    let rows = rows();
    assert!(rows.len() >= 10, "{} programs checked", rows.len());
    let (mut kept, mut total) = (0, 0);
    for (what, (got, want, cand, all)) in &rows {
        assert_eq!(got, want, "{what}");
        assert!(cand <= all, "{what}");
        kept += cand;
        total += all;
    }
    // Some tables are not empty, and the pruning is real.
    assert!(rows.iter().any(|r| !r.1 .1.is_empty()));
    assert!(kept < total, "{kept} of {total} tuples kept");
}

#[test]
fn a_candidate_list_missing_an_accepted_tuple_is_caught() {
    // The twin: what a pruner that cut one prefix too many would give.
    // The comparison above sees it.
    let scope = Scope::default();
    let (_, op, meshes) = programs().into_iter().next().expect("a program");
    let m = meshes[0].clone();
    let shapes = scope.shapes_for(&m);
    let mut cand = candidate_tuples(&op.op, &m, &shapes);
    let want = accepted(&op.op, &m, &tuples(&shapes, op.op.arity()));
    assert!(!want.is_empty());
    cand.retain(|t| *t != want[want.len() - 1]);
    assert_ne!(accepted(&op.op, &m, &cand), want);
}
