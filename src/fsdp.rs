//! Communication cost computed, not asserted (SPEC.md §10.4): FSDP's weight
//! gather to Reduced with a reduce-scatter backward, against the naive gather
//! to Invariant whose backward all-reduces. Both are checked end to end for
//! gradient correctness by the oracle, and their traffic is counted.

use crate::run::check_op;
use spmd_generators::Scope;
use spmd_interp::catalogue::collective;
use spmd_interp::{parse, Backward, Op, TypedOp};
use spmd_oracle::Verdict;
use spmd_semantics::{Mesh, State, Type, Q};

/// One way to run a data-parallel matmul with a sharded weight.
pub struct Strategy {
    pub name: &'static str,
    /// False for the negative twin, a deliberately wrong backward.
    pub expect_sound: bool,
    pub program: TypedOp,
    pub verdict: Verdict,
    /// Elements sent per rank, forward and backward, at the reference size.
    pub forward_cost: Q,
    pub backward_cost: Q,
}

/// The reference size for costs: 4 ranks, weight shard of 2 x 4 (8 x 4 in full).
pub fn reference() -> (Mesh, Vec<usize>) {
    (Mesh::line(4), vec![2, 4])
}

pub(crate) fn coll(text: &str, src: State, dst: State) -> Op {
    Op::Collective(collective(text, &[src], &[dst], &["x".to_string()]).expect("catalogue entry"))
}

/// x (the batch, Varying) times the gathered weight w (Varying, sharded on dim 0).
fn program(pre: Op, transpose: Op) -> TypedOp {
    let v = Type::one(State::Varying);
    TypedOp {
        op: Op::Apply {
            pre: vec![None, Some(pre)],
            body: Box::new(Op::Local(parse("matmul(x, w)").expect("valid"))),
        },
        inputs: vec![v.clone(), v.clone()],
        output: v,
        backward: Backward::Apply(vec![None, Some(transpose)]),
        jvp: None,
    }
}

/// Both strategies, checked in `scope` and costed at the reference size.
pub fn strategies(scope: &Scope) -> Vec<Strategy> {
    use State::*;
    let fsdp = program(
        coll("all_gather(R, dim=0)", Varying, Reduced),
        coll("reduce_scatter(dim=0)", Partial, Varying),
    );
    let naive = program(
        Op::Compose(vec![
            coll("all_gather(I, dim=0)", Varying, Invariant),
            coll("reinterpret(I,R)", Invariant, Reduced),
        ]),
        // The transpose of a composition runs the transposes in reverse.
        Op::Compose(vec![
            coll("all_reduce(I)", Partial, Invariant),
            coll("convert(I,V, dim=0)", Invariant, Varying),
        ]),
    );
    // Negative twin: gather to Reduced but slice the partial gradient without
    // reducing it, as if it were replicated.
    let wrong = program(
        coll("all_gather(R, dim=0)", Varying, Reduced),
        coll("convert(dim=0)", Partial, Varying),
    );
    let (m, w) = reference();
    let meshes = scope.meshes_with(1);
    [
        (
            "fsdp: all_gather to Reduced, reduce_scatter back",
            true,
            fsdp,
        ),
        (
            "naive: all_gather to Invariant, all_reduce back",
            true,
            naive,
        ),
        (
            "twin: all_gather to Reduced, slice back unreduced",
            false,
            wrong,
        ),
    ]
    .into_iter()
    .map(|(name, expect_sound, program)| {
        let (pre, tr) = match (&program.op, &program.backward) {
            (Op::Apply { pre, .. }, Backward::Apply(t)) => (
                pre[1].clone().expect("pre"),
                t[1].clone().expect("transpose"),
            ),
            _ => unreachable!("built as a program above"),
        };
        let forward_cost = pre.cost(&m, std::slice::from_ref(&w));
        let gathered = pre.infer(&m, std::slice::from_ref(&w)).expect("fits").0;
        let backward_cost = tr.cost(&m, &[gathered]);
        let verdict = check_op(&program, scope, &meshes, &|_| {});
        Strategy {
            name,
            expect_sound,
            program,
            verdict,
            forward_cost,
            backward_cost,
        }
    })
    .collect()
}
