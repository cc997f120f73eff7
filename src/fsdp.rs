//! Communication cost computed, not asserted (SPEC.md §10.4): FSDP's weight
//! gather to Reduced with a reduce-scatter backward, against the naive gather
//! to Invariant whose backward all-reduces. Both are checked end to end for
//! gradient correctness by the oracle, and their traffic is counted.

use crate::run::check_op;
use spmd_generators::Scope;
use spmd_interp::catalogue::collective;
use spmd_interp::{parse, Backward, Op, Program, Step, TypedOp};
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

fn coll(text: &str, src: State, dst: State) -> Op {
    Op::Collective(collective(text, &[src], &[dst], &["x".to_string()]).expect("catalogue entry"))
}

/// x (the batch, Varying) times the weight w (Varying, sharded on dim 0)
/// gathered to Reduced by `gather`, whose declared backward is `transpose`:
/// a two-step program (SPEC.md §12).
fn program(gather: Op, transpose: Op) -> TypedOp {
    let (v, r) = (Type::one(State::Varying), Type::one(State::Reduced));
    let steps = vec![
        Step {
            name: gather.describe(),
            op: TypedOp {
                op: gather,
                inputs: vec![v.clone()],
                output: r.clone(),
                backward: Backward::Transpose(transpose),
                jvp: None,
            },
            args: vec![1],
        },
        Step {
            name: "matmul(x, w)".into(),
            // Variables are numbered alphabetically: a is x, b is w.
            op: TypedOp::local(
                parse("matmul(a, b)").expect("valid"),
                vec![v.clone(), r],
                v.clone(),
            ),
            args: vec![0, 2],
        },
    ];
    let p = Program::new(vec![v.clone(), v.clone()], steps).expect("type-consistent");
    TypedOp {
        op: Op::Program(Box::new(p)),
        inputs: vec![v.clone(), v.clone()],
        output: v,
        backward: Backward::Steps,
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
        let Op::Program(p) = &program.op else {
            unreachable!("built as a program above")
        };
        // x is a batch of 3 rows; only the weight's traffic counts.
        let x = vec![3, w[0] * m.num_ranks()];
        let (forward_cost, backward_cost) =
            p.cost(&m, &[x, w.clone()]).expect("reference shapes fit");
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
