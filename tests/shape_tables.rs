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

/// Every built-in op and a few larger expressions (products of up to six
/// inputs, attention, nested einsums, concat and where), with the 1-D and
/// 2-D shapes of the default scope and of rank up to 3.
fn expressions() -> Vec<(String, Op)> {
    let mut out: Vec<(String, Op)> = spmd_check::interp::op::BUILTINS
        .iter()
        .map(|(n, _)| {
            let f = spmd_check::interp::op::builtin(n).expect("built-in");
            (n.to_string(), Op::Local(f))
        })
        .collect();
    for src in [
        "a*b*c",
        "a*b*c*d",
        "a*(b*(c*d))",
        "a*b*c*d*e",
        "sum(a*b, 0) + c",
        "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)",
        "matmul(matmul(a, b), c)",
        "concat(a, b*c, 1)",
        "where(m, x*y, z)",
        "dynamic_update_slice(a, b + c, [0, 0])",
    ] {
        let f = spmd_check::interp::expr::parse(src).expect("parses");
        out.push((src.to_string(), Op::Local(f)));
    }
    out
}

#[test]
fn an_expressions_candidates_keep_every_accepted_tuple_in_order() {
    let m = Mesh::line(2);
    let (mut kept, mut total) = (0usize, 0usize);
    for rank in [2, 3] {
        let scope = Scope {
            max_rank: rank,
            max_dim: if rank == 3 { 2 } else { 3 },
            ..Scope::default()
        };
        let shapes = scope.shapes_for(&m);
        for (name, op) in expressions() {
            let k = op.arity();
            if (shapes.len() as u64).pow(k as u32) > 400_000 {
                continue;
            }
            let all = tuples(&shapes, k);
            let cand = candidate_tuples(&op, &m, &shapes);
            assert_eq!(
                accepted(&op, &m, &cand),
                accepted(&op, &m, &all),
                "{name} at rank {rank}"
            );
            assert!(cand.len() <= all.len(), "{name}");
            kept += cand.len();
            total += all.len();
        }
    }
    assert!(kept * 4 < total, "{kept} of {total} tuples kept");
}

#[test]
fn a_six_input_product_is_searched_not_multiplied_out() {
    // 13^6 = 4,826,809 tuples; the pruned search keeps those of equal
    // shapes or scalars: 12 (2^6 - 1) + 1 of them.
    let scope = Scope::default();
    let m = Mesh::line(2);
    let f = spmd_check::interp::expr::parse("a*b*c*d*e*f").expect("parses");
    let op = Op::Local(f);
    let n = spmd_check::generators::candidate_count(&op, &m, &scope.shapes_for(&m), 400_000);
    assert_eq!(n, Some(12 * 63 + 1));
    let cand = candidate_tuples(&op, &m, &scope.shapes_for(&m));
    assert_eq!(accepted(&op, &m, &cand).len(), cand.len());
    // The budget bounds the search: 700 choices are not enough.
    assert_eq!(
        spmd_check::generators::candidate_count(&op, &m, &scope.shapes_for(&m), 700),
        None
    );
    // Six matrices contracted to a scalar keep 9^6 = 531,441 tuples: the
    // search stops at the guard's limit, and the rule is refused.
    let f = spmd_check::interp::expr::parse("einsum(\"ij,kl,mn,op,qr,st->\", a, b, c, d, e, f)")
        .expect("parses");
    let op = Op::Local(f.clone());
    let n = spmd_check::generators::candidate_count(&op, &m, &scope.shapes_for(&m), 400_000);
    assert_eq!(n, None);
    let v = spmd_check::semantics::Type::one(spmd_check::semantics::State::Varying);
    let typed = spmd_check::interp::TypedOp::local(f, vec![v.clone(); 6], v);
    let err = spmd_check::generators::tuple_guard(&typed, &scope).expect_err("refused");
    assert!(err.contains("more than 400000 shape tuples"), "{err}");
}

#[test]
fn an_expression_pruner_that_cut_an_accepted_tuple_is_caught() {
    // The twin of the comparison above for expressions.
    let m = Mesh::line(2);
    let shapes = Scope::default().shapes_for(&m);
    let f = spmd_check::interp::expr::parse("sum(a*b, 0) + c").expect("parses");
    let op = Op::Local(f);
    let want = accepted(&op, &m, &tuples(&shapes, 3));
    let mut cand = candidate_tuples(&op, &m, &shapes);
    cand.retain(|t| *t != want[want.len() / 2]);
    assert_ne!(accepted(&op, &m, &cand), want);
}
