//! Whole layers as programs (SPEC.md §12): Megatron-style tensor-parallel
//! and sequence-parallel MLPs, each checked end to end by the oracle (the
//! composed backward against the derivative of the composed meaning) and
//! costed in elements sent per rank. Each has a negative twin with one step's
//! backward wrong, which the oracle must reject for the named property.

use crate::fsdp::coll;
use crate::run::check_op;
use rayon::prelude::*;
use spmd_generators::Scope;
use spmd_interp::{parse, Backward, Collective, Kind, Op, Program, Step, TypedOp};
use spmd_oracle::{Property, Verdict};
use spmd_semantics::{Mesh, Shape, State, Type, Q};

/// One program, its expected verdict, what the oracle derived, and its cost.
pub struct ProgramResult {
    pub name: &'static str,
    /// `None`: sound; else the property its (deliberately wrong) twin fails.
    pub expect: Option<Property>,
    pub program: TypedOp,
    pub verdict: Verdict,
    /// Elements sent per rank at the reference shapes, forward and backward.
    pub forward_cost: Q,
    pub backward_cost: Q,
}

impl ProgramResult {
    pub fn as_expected(&self) -> bool {
        self.verdict.violation().map(|v| v.property) == self.expect
    }
}

fn t(s: State) -> Type {
    Type::one(s)
}

/// A collective step with its declared backward.
fn coll_step(name: &str, arg: usize, fwd: Op, bwd: Op, src: State, dst: State) -> Step {
    Step {
        name: name.into(),
        op: TypedOp {
            op: fwd,
            inputs: vec![t(src)],
            output: t(dst),
            backward: Backward::Transpose(bwd),
            jvp: None,
        },
        args: vec![arg],
    }
}

/// A local step (its backward is its local VJP). Expression variables are
/// numbered alphabetically, so `args` follow that order.
fn local_step(name: &str, expr: &str, args: &[usize], inputs: &[State], out: State) -> Step {
    Step {
        name: name.into(),
        op: TypedOp::local(
            parse(expr).expect("valid expression"),
            inputs.iter().map(|&s| t(s)).collect(),
            t(out),
        ),
        args: args.to_vec(),
    }
}

fn program(inputs: &[State], steps: Vec<Step>) -> TypedOp {
    let p = Program::new(inputs.iter().map(|&s| t(s)).collect(), steps)
        .expect("the steps are type-consistent");
    TypedOp {
        inputs: p.inputs.clone(),
        output: p.output().clone(),
        op: Op::Program(Box::new(p)),
        backward: Backward::Steps,
        jvp: None,
    }
}

/// y = ((x W1)^2) W2 with W1 split by columns and W2 by rows (values 1, 2),
/// the activation x (value 0) of type `x`, then the rows' partial sums
/// reduced. `first` brings x to the type the first matmul takes; `last`
/// reduces.
fn mlp(x: State, first: Step, first_out: State, last: Step) -> TypedOp {
    use State::*;
    program(
        &[x, Varying, Varying],
        vec![
            first,
            local_step(
                "h = (x W1)^2",
                "matmul(a, b)^2",
                &[3, 1],
                &[first_out, Varying],
                Varying,
            ),
            local_step(
                "o = h W2",
                "matmul(a, b)",
                &[4, 2],
                &[Varying, Varying],
                Varying,
            ),
            coll_step(
                "reinterpret(V,P)",
                5,
                coll("reinterpret(V,P)", Varying, Partial),
                coll("reinterpret(R,V)", Reduced, Varying),
                Varying,
                Partial,
            ),
            Step {
                args: vec![6],
                ..last
            },
        ],
    )
}

/// Tensor parallel (Megatron's f and g): x is Invariant; f = pvary forward,
/// psum backward; g = all_reduce forward, identity backward.
fn tensor_parallel(f_backward: Op) -> TypedOp {
    use State::*;
    mlp(
        Invariant,
        coll_step(
            "f: pvary",
            0,
            coll("pvary", Invariant, Varying),
            f_backward,
            Invariant,
            Varying,
        ),
        Varying,
        coll_step(
            "g: all_reduce",
            0,
            coll("all_reduce(I)", Partial, Invariant),
            coll("reinterpret(I,R)", Invariant, Reduced),
            Partial,
            Invariant,
        ),
    )
}

/// Sequence parallel: x is sharded along the sequence (dim 0); gather it
/// before the column-parallel matmul, reduce-scatter after the row-parallel
/// one.
fn sequence_parallel(gather: Step, gathered: State) -> TypedOp {
    use State::*;
    mlp(
        Varying,
        gather,
        gathered,
        coll_step(
            "reduce_scatter(dim=0)",
            0,
            coll("reduce_scatter(dim=0)", Partial, Varying),
            coll("all_gather(R, dim=0)", Varying, Reduced),
            Partial,
            Varying,
        ),
    )
}

/// The reference sizes for costs: 4 ranks; TP activations 8 x 4 (SP: the
/// local 2 x 4 of 8 x 4), W1 local 4 x 2, W2 local 2 x 4.
pub fn reference() -> Mesh {
    Mesh::line(4)
}

fn shapes(sequence_parallel: bool) -> Vec<Shape> {
    let x = if sequence_parallel {
        vec![2, 4]
    } else {
        vec![8, 4]
    };
    vec![x, vec![4, 2], vec![2, 4]]
}

/// Every program, checked in `scope` (one-axis meshes) and costed.
pub fn programs(scope: &Scope) -> Vec<ProgramResult> {
    use State::*;
    let tp = tensor_parallel(coll("psum_invariant", Varying, Invariant));
    // Twin: f's backward without its all-reduce. Each rank keeps its own
    // partial gradient of the replicated x, a cast no catalogue admits.
    let tp_twin = tensor_parallel(Op::Collective(Collective {
        name: "reinterpret(V,I)".into(),
        kind: Kind::Reinterpret,
        axes: vec![0],
        src: Varying,
        dst: Invariant,
    }));
    let sp = sequence_parallel(
        coll_step(
            "all_gather(R, dim=0)",
            0,
            coll("all_gather(R, dim=0)", Varying, Reduced),
            coll("reduce_scatter(dim=0)", Partial, Varying),
            Varying,
            Reduced,
        ),
        Reduced,
    );
    // Twin: gather to Invariant, whose transpose slices the gradient without
    // summing it; the first matmul then mixes I with V.
    let sp_twin = sequence_parallel(
        coll_step(
            "all_gather(I, dim=0)",
            0,
            coll("all_gather(I, dim=0)", Varying, Invariant),
            coll("convert(I,V, dim=0)", Invariant, Varying),
            Varying,
            Invariant,
        ),
        Invariant,
    );
    let m = reference();
    let meshes = scope.meshes_with(1);
    // Three inputs share the grid: raise the points cap so that the
    // smallest two-rank cases (324 points) and a few more are enumerated.
    let scope = Scope {
        max_points: scope.max_points.max(2048),
        ..scope.clone()
    };
    let list: Vec<(&'static str, Option<Property>, TypedOp, bool)> = vec![
        (
            "tensor parallel MLP: f = pvary/psum, g = all_reduce",
            None,
            tp,
            false,
        ),
        (
            "twin: tensor parallel, f's backward without psum",
            Some(Property::B1),
            tp_twin,
            false,
        ),
        (
            "sequence parallel MLP: all_gather(R) / reduce_scatter",
            None,
            sp,
            true,
        ),
        (
            "twin: sequence parallel, gather to I (slice back)",
            Some(Property::B3),
            sp_twin,
            true,
        ),
    ];
    list.into_par_iter()
        .map(|(name, expect, program, seq)| {
            let Op::Program(p) = &program.op else {
                unreachable!("built as programs above")
            };
            let (forward_cost, backward_cost) =
                p.cost(&m, &shapes(seq)).expect("reference shapes fit");
            let verdict = check_op(&program, &scope, &meshes, &|_| {});
            ProgramResult {
                name,
                expect,
                program,
                verdict,
                forward_cost,
                backward_cost,
            }
        })
        .collect()
}
