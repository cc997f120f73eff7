//! The finite-difference checker's paths (`check.rs`), each stated on one
//! instance with exact values and beside a twin that concludes otherwise.
//! Each was found by mutation testing (oracle/MUTANTS.md): a change to
//! `check.rs` that gave another verdict, or another report, without any
//! oracle test failing.

use spmd_interp::collective::{Collective, Kind};
use spmd_interp::program::{Program, Step};
use spmd_interp::{parse, parse_with_vars, Backward, Jvp, Op, TypedOp};
use spmd_oracle::{Checker, Outcome, Phase};
use spmd_semantics::perrank::from_free;
use spmd_semantics::{Mesh, PerRank, State, Type, Q};
use State::{Invariant as I, Partial as P, Reduced as R, Varying as V};

fn typed(src: &str, ins: &[Type], out: Type) -> TypedOp {
    TypedOp::local(parse(src).expect("parses"), ins.to_vec(), out)
}

fn one(s: State) -> Type {
    Type::one(s)
}

/// Varying on the one axis, laid out along tensor dim `d` (global SPMD,
/// SPEC.md §13): `S(d)`.
fn shard(d: usize) -> Type {
    Type::laid(vec![V], vec![Some(d)])
}

fn with_backward(mut op: TypedOp, names: &[&str], bwd: &[&str]) -> TypedOp {
    let order: Vec<String> = names
        .iter()
        .map(|s| s.to_string())
        .chain(["g".into()])
        .collect();
    op.backward = Backward::Local(
        bwd.iter()
            .map(|b| parse_with_vars(b, &order).expect("parses"))
            .collect(),
    );
    op
}

fn with_jvp(mut op: TypedOp, names: &[&str], jvp: &str) -> TypedOp {
    let order: Vec<String> = names
        .iter()
        .map(|s| s.to_string())
        .chain(names.iter().map(|s| format!("d{s}")))
        .collect();
    op.jvp = Some(Jvp::Local(parse_with_vars(jvp, &order).expect("parses")));
    op
}

/// An input of type `t` and local shape `shape` on `m` from its free
/// scalars, given as integers over `den`.
fn value(m: &Mesh, t: &Type, shape: &[usize], num: &[i64], den: i64) -> PerRank {
    let free: Vec<Q> = num.iter().map(|&k| Q::frac(k, den)).collect();
    from_free(m, t, shape, &free)
}

/// "pass", "B3 undetermined", "outside the domain", or the violation as
/// "property: what | expected | actual".
fn show(o: &Outcome) -> String {
    match o {
        Outcome::Pass(p) if p.undecided => "undecided".into(),
        Outcome::Pass(p) if p.b3_undetermined => "B3 undetermined".into(),
        Outcome::Pass(_) => "pass".into(),
        Outcome::OutsideDomain => "outside the domain".into(),
        Outcome::Fail(v) => format!(
            "{}: {} | {} | {}",
            v.property.code(),
            v.what,
            v.expected,
            v.actual
        ),
    }
}

/// The outcome of `op` on `m` at `xs` in `phase`, by a prepared checker
/// and by the same checker without its entrywise fast paths; both must
/// agree.
fn run(op: &TypedOp, m: &Mesh, xs: &[PerRank], phase: Phase) -> String {
    let shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape().to_vec()).collect();
    let full = Checker::new(op, m, shapes.clone()).expect("the shapes fit");
    let plain = Checker::new(op, m, shapes).expect("the shapes fit").plain();
    let a = show(&full.check(xs, phase));
    // Twice: the second instance reuses the first one's buffers.
    assert_eq!(show(&full.check(xs, phase)), a, "again");
    assert_eq!(show(&plain.check(xs, phase)), a, "without the fast paths");
    a
}

fn all(op: &TypedOp, m: &Mesh, xs: &[PerRank]) -> String {
    run(op, m, xs, Phase::All)
}

/// A local op of no inputs (a constant) runs and is checked like any
/// other: `1` is Invariant on every rank; read as Partial on two ranks it
/// denotes 2, not 1 (F3).
#[test]
fn a_constant_op_with_no_inputs_is_checked() {
    let m = Mesh::line(2);
    assert_eq!(all(&typed("1", &[], one(I)), &m, &[]), "pass");
    assert_eq!(
        all(&typed("1", &[], one(P)), &m, &[]),
        "F3: the output does not denote `1` of the inputs' denotations | 1 | 2"
    );
}

/// B2, primal half (SPEC.md §4.6): x is Partial, so x' = x + (−1, 1)
/// denotes the same value; y's cotangent `g * x * x` reads x rank by
/// rank, so it changes though the backward's results stay well formed
/// (y is Varying). The twin gives y no gradient and passes.
#[test]
fn b2_a_well_formed_backward_that_depends_on_the_representative() {
    let m = Mesh::line(2);
    let op = typed("x * y", &[one(P), one(V)], one(P));
    let bad = with_backward(op.clone(), &["x", "y"], &["g * y", "g * x * x"]);
    let xs = [
        value(&m, &one(P), &[], &[1, 2], 1),
        value(&m, &one(V), &[], &[0, 0], 1),
    ];
    assert_eq!(
        all(&bad, &m, &xs),
        "B2: x and x' are equivalent but the backward's cotangents for y are not | <1 | 4> | <0 | 9>"
    );
    let mut good = bad.clone();
    good.no_grad = vec![1];
    assert_eq!(all(&good, &m, &xs), "pass");
    // The built-in VJP of `x * y` gives y the cotangent g·x, rank by
    // rank, which fails the same way: at y = 0 the forward hides that x's
    // pieces are multiplied one by one (F2 holds), the backward does not.
    assert_eq!(
        all(&op, &m, &xs),
        "B2: x and x' are equivalent but the backward's cotangents for y are not | <1 | 2> | <0 | 3>"
    );
}

/// B2, cotangent half (SPEC.md §4.6): a Reduced output's cotangent is
/// Partial, and g = (−1, 1) denotes zero. `x` from Reduced to Reduced
/// passes; a backward for the Varying y that is linear in g but keeps
/// each rank's g fails, since (−y₀, y₁) is not zero.
#[test]
fn b2_a_cotangent_that_denotes_zero_must_give_zero() {
    let m = Mesh::line(2);
    let xs = [value(&m, &one(R), &[], &[3], 1)];
    assert_eq!(all(&typed("x", &[one(R)], one(R)), &m, &xs), "pass");
    let op = typed("x + 0 * y", &[one(R), one(V)], one(R));
    let xs = [
        value(&m, &one(R), &[], &[3], 1),
        value(&m, &one(V), &[], &[2, 5], 1),
    ];
    assert_eq!(all(&op, &m, &xs), "pass");
    let bad = with_backward(op, &["x", "y"], &["g", "g * y"]);
    assert_eq!(
        all(&bad, &m, &xs),
        "B2: the cotangent g denotes zero but the backward's result does not | 0 | <-2 | 5>"
    );
}

/// B3 (SPEC.md §4.7) where every entry of the backward's result that B3
/// reads is wrong: on one rank, a scalar x has one gradient entry, and
/// `2 * x` with the backward `g` gives 1 for 2 (the entry-by-entry
/// comparison must find that one entry, not only a mix of right and wrong
/// ones). On two ranks the same backward fails too. The twin `2 * g`
/// passes.
#[test]
fn b3_a_backward_wrong_at_every_entry() {
    let op = typed("2 * x", &[one(V)], one(V));
    for (m, vals, want) in [
        (Mesh::line(1), &[-3][..], "2 | 1"),
        (Mesh::line(2), &[1, -3][..], "<2 | 0> | <1 | 0>"),
    ] {
        let xs = [value(&m, &one(V), &[], vals, 1)];
        assert_eq!(
            all(&with_backward(op.clone(), &["x"], &["g"]), &m, &xs),
            format!("B3: the backward's cotangent for x is not the gradient | {want}")
        );
        assert_eq!(
            all(&with_backward(op.clone(), &["x"], &["2 * g"]), &m, &xs),
            "pass"
        );
    }
}

/// B1 (SPEC.md §4.5): x is Partial, so its cotangent is Reduced (the same
/// on every rank); `g * (1 + x)` differs between ranks where x does.
#[test]
fn b1_a_backward_result_that_differs_along_a_replicated_axis() {
    let m = Mesh::line(2);
    let op = typed("x", &[one(P)], one(P));
    let xs = [value(&m, &one(P), &[], &[1, 2], 1)];
    assert_eq!(
        all(&with_backward(op.clone(), &["x"], &["g * (1 + x)"]), &m, &xs),
        "B1: the backward's cotangent for x differs between ranks along R axis `x` | a well-formed value of type R | 2 | 3"
    );
    assert_eq!(all(&with_backward(op, &["x"], &["g"]), &m, &xs), "pass");
}

/// J1 (SPEC.md §4.8): a JVP's tangent must be a well-formed value of the
/// output type; `dx + x * x` on an Invariant output differs between
/// ranks where x (Varying) does. The JVP `dx * 0` is well formed and wrong.
#[test]
fn j1_a_tangent_that_is_not_well_formed() {
    let m = Mesh::line(2);
    let op = typed("x * 0 + 1", &[one(V)], one(I));
    let xs = [value(&m, &one(V), &[], &[1, 2], 1)];
    assert_eq!(
        run(&with_jvp(op.clone(), &["x"], "dx + x * x"), &m, &xs, Phase::Tangent),
        "J1: the JVP's tangent differs between ranks along I axis `x` | a well-formed value of type I | 2 | 4"
    );
    assert_eq!(
        run(&with_jvp(op, &["x"], "dx * 0"), &m, &xs, Phase::Tangent),
        "pass"
    );
}

/// A hand-written backward must be linear in g (SPEC.md §4.7): B3
/// compares it at unit cotangents, where `g * g * g` equals g; it is
/// odd, so right at −g, but at 2g it gives 8 where twice the result at g
/// is 2. `abs(g)` is right at g and 2g and wrong at −g only. `g` itself
/// passes.
#[test]
fn a_backward_that_is_not_linear_in_g_fails_b3() {
    let m = Mesh::line(1);
    let op = typed("x", &[one(V)], one(V));
    let xs = [value(&m, &one(V), &[], &[3], 1)];
    assert_eq!(
        all(&with_backward(op.clone(), &["x"], &["g * g * g"]), &m, &xs),
        "B3: the backward is not linear in g: at g' = 2·g its cotangent for x is not 2 times the one at g | 2 | 8"
    );
    assert_eq!(
        all(&with_backward(op.clone(), &["x"], &["abs(g)"]), &m, &xs),
        "B3: the backward is not linear in g: at g' = -1·g its cotangent for x is not -1 times the one at g | -1 | 1"
    );
    assert_eq!(all(&with_backward(op, &["x"], &["g"]), &m, &xs), "pass");
}

/// A program's steps with a hand-written backward are probed for
/// linearity in g too (SPEC.md §4.7), through the program's backward.
#[test]
fn a_program_step_whose_backward_is_not_linear_in_g_fails_b3() {
    let m = Mesh::line(1);
    let v = one(V);
    let step = |bwd: &str| Step {
        name: "id".into(),
        op: with_backward(
            typed("x", std::slice::from_ref(&v), v.clone()),
            &["x"],
            &[bwd],
        ),
        args: vec![0],
    };
    let program = |bwd: &str| TypedOp {
        op: Op::Program(Box::new(
            Program::new(vec![v.clone()], vec![step(bwd)]).expect("a program"),
        )),
        inputs: vec![v.clone()],
        output: v.clone(),
        backward: Backward::Steps,
        jvp: None,
        no_grad: vec![],
    };
    let xs = [value(&m, &v, &[], &[3], 1)];
    assert_eq!(
        all(&program("g * g * g"), &m, &xs),
        "B3: the backward is not linear in g: at g' = 2·g its cotangent for x0 is not 2 times the one at g | 2 | 8"
    );
    assert_eq!(all(&program("g"), &m, &xs), "pass");
}

/// B3's report (SPEC.md §4.7) for an input that is not Varying: the
/// gradient of `2 * x` on an Invariant x is 2 on every rank, shown once.
/// The backward `g` gives 1; `2 * g` passes.
#[test]
fn b3_reports_the_gradient_of_a_replicated_input_once() {
    let m = Mesh::line(2);
    let op = typed("2 * x", &[one(I)], one(I));
    let xs = [value(&m, &one(I), &[], &[5], 1)];
    assert_eq!(
        all(&with_backward(op.clone(), &["x"], &["g"]), &m, &xs),
        "B3: the backward's cotangent for x is not the gradient | 2 | 1"
    );
    assert_eq!(all(&with_backward(op, &["x"], &["2 * g"]), &m, &xs), "pass");
}

/// F2 along a kernel line of a piecewise op (SPEC.md §4.3): relu of a
/// Partial x = (1, 1/2) keeps its sum 3/2 at x + t·(−1, 1) for t = 1/4,
/// 1/3 and 1, where both pieces stay at or above 0; only at t = 2,
/// x' = (−1, 5/2), does it change (to 5/2). At
/// x = (3, 4) every step up to 2 keeps both pieces positive, and the
/// instance passes.
#[test]
fn f2_of_a_piecewise_op_is_checked_at_integer_steps_up_to_degree_plus_one() {
    let m = Mesh::line(2);
    let op = typed("relu(x)", &[one(P)], one(P));
    assert_eq!(
        all(&op, &m, &[value(&m, &one(P), &[], &[2, 1], 2)]),
        "F2: x and x' are equivalent (same denotation) but the outputs are not | 3/2 | 5/2"
    );
    assert_eq!(all(&op, &m, &[value(&m, &one(P), &[], &[3, 4], 1)]), "pass");
}

/// A local op that is not pointwise (SPEC.md §18.8): each sample along
/// an entry of x recomputes the whole rank, and is undone rank by rank.
/// `sum(x, 0)` of two entries on each of two ranks passes with its
/// built-in VJP and with the hand-written `g + 0 * x`; twice that fails
/// B3.
#[test]
fn a_sum_over_a_dim_is_sampled_rank_by_rank() {
    let m = Mesh::line(2);
    let op = typed("sum(x, 0)", &[one(V)], one(V));
    let xs = [value(&m, &one(V), &[2], &[1, -2, 3, 5], 1)];
    assert_eq!(all(&op, &m, &xs), "pass");
    assert_eq!(
        all(&with_backward(op.clone(), &["x"], &["g + 0 * x"]), &m, &xs),
        "pass"
    );
    assert_eq!(
        all(&with_backward(op, &["x"], &["2 * g + 0 * x"]), &m, &xs),
        "B3: the backward's cotangent for x is not the gradient | <[1, 1] | [0, 0]> | <[2, 2] | [0, 0]>"
    );
}

/// A pointwise op on two entries per rank (SPEC.md §18.8): a sample along
/// an entry reads only the output coordinates it covers, member by member.
/// `x * x` passes; the JVP `dx` fails J1 and the backward `g` fails B3,
/// with the columns of both ranks in their places.
#[test]
fn a_pointwise_op_on_two_entries_per_rank() {
    let m = Mesh::line(2);
    let op = typed("x * x", &[one(V)], one(V));
    let xs = [value(&m, &one(V), &[2], &[1, -2, 3, 5], 1)];
    assert_eq!(all(&op, &m, &xs), "pass");
    assert_eq!(
        run(
            &with_jvp(op.clone(), &["x"], "2 * x * dx"),
            &m,
            &xs,
            Phase::Tangent
        ),
        "pass"
    );
    assert_eq!(
        run(&with_jvp(op.clone(), &["x"], "dx"), &m, &xs, Phase::Tangent),
        "J1: the JVP's tangent along dx is not the derivative | <[2, 0] | [0, 0]> | <[1, 0] | [0, 0]>"
    );
    assert_eq!(
        all(&with_backward(op, &["x"], &["g"]), &m, &xs),
        "B3: the backward's cotangent for x is not the gradient | <[2, 0] | [0, 0]> | <[1, 0] | [0, 0]>"
    );
}

/// F3 under global types (SPEC.md §13.2): the local function is applied
/// to the global tensors. `x` from S(0) to S(0) keeps the global tensor;
/// from Invariant to S(0) every rank's copy becomes a piece, and the
/// global tensor is the copies concatenated. Read member by member (local
/// SPMD) both would hold.
#[test]
fn f3_of_a_global_op_compares_global_tensors() {
    let m = Mesh::line(2);
    let xs = [value(&m, &shard(0), &[2], &[1, 2, 3, 4], 1)];
    assert_eq!(all(&typed("x", &[shard(0)], shard(0)), &m, &xs), "pass");
    let xs = [value(&m, &one(I), &[2], &[1, 2], 1)];
    assert_eq!(
        run(&typed("x", &[one(I)], shard(0)), &m, &xs, Phase::Forward),
        "F3: the output's global tensor is not `x` of the inputs' global tensors | [1, 2] | [1, 2, 1, 2]"
    );
}

fn collective(
    name: &str,
    kind: Kind,
    src: State,
    dst: State,
    input: Type,
    output: Type,
) -> TypedOp {
    TypedOp {
        op: Op::Collective(Collective {
            name: name.into(),
            kind,
            axes: vec![0],
            src,
            dst,
        }),
        inputs: vec![input],
        output,
        backward: Backward::LocalVjp,
        jvp: None,
        no_grad: vec![],
    }
}

/// F3 of a collective that only moves data under global types (SPEC.md
/// §13.2): an all-gather along dim 0 of pieces laid out along dim 0 keeps
/// the global tensor; of pieces laid out along dim 1 it does not.
#[test]
fn f3_a_gather_must_keep_the_global_tensor() {
    let m = Mesh::line(2);
    let gather = Kind::AllGather {
        dim: 0,
        stack: false,
    };
    let xs = [value(&m, &shard(0), &[1, 2], &[1, 2, 3, 4], 1)];
    assert_eq!(
        run(
            &collective("all_gather", gather.clone(), V, I, shard(0), one(I)),
            &m,
            &xs,
            Phase::Forward
        ),
        "pass"
    );
    let xs = [value(&m, &shard(1), &[1, 2], &[1, 2, 3, 4], 1)];
    assert_eq!(
        run(&collective("all_gather", gather, V, I, shard(1), one(I)), &m, &xs, Phase::Forward),
        "F3: `all_gather(dim=0)` changes the global tensor; it should only move data | [[1, 2, 3, 4]] | [[1, 2], [3, 4]]"
    );
}

/// F3 of a reduction of Varying pieces under global types (SPEC.md
/// §13.2): the global tensor is the pieces summed. psum from S(0) to
/// Reduced holds it; to S(0) the sum is laid out as two pieces, and the
/// global tensor is it twice.
#[test]
fn f3_a_reduction_of_pieces_has_a_global_reading() {
    let m = Mesh::line(2);
    let xs = [value(&m, &shard(0), &[1], &[1, 2], 1)];
    assert_eq!(
        run(
            &collective("psum", Kind::AllReduce, V, R, shard(0), one(R)),
            &m,
            &xs,
            Phase::Forward
        ),
        "pass"
    );
    assert_eq!(
        run(&collective("psum", Kind::AllReduce, V, V, shard(0), shard(0)), &m, &xs, Phase::Forward),
        "F3: the output's global tensor is not what `psum()` makes of the input's pieces | [3] | [3, 3]"
    );
}

/// A program under global types (SPEC.md §13.2): each step keeps its
/// own global meaning on the values it is given. `x * x` then `2 * x`,
/// both S(0) to S(0), pass. A step that relabels S(0) pieces as S(1)
/// fails F3, named, even where a second step relabels them back so that
/// the program as a whole is the identity on every rank.
#[test]
fn f3_of_a_global_program_is_checked_step_by_step() {
    let m = Mesh::line(2);
    let step = |name: &str, src: &str, a: Type, b: Type, arg: usize| Step {
        name: name.into(),
        op: typed(src, &[a], b),
        args: vec![arg],
    };
    let program = |steps: Vec<Step>, out: Type| TypedOp {
        op: Op::Program(Box::new(
            Program::new(vec![shard(0)], steps).expect("a program"),
        )),
        inputs: vec![shard(0)],
        output: out,
        backward: Backward::Steps,
        jvp: None,
        no_grad: vec![],
    };
    let good = program(
        vec![
            step("sq", "x * x", shard(0), shard(0), 0),
            step("twice", "2 * x", shard(0), shard(0), 1),
        ],
        shard(0),
    );
    let xs = [value(&m, &shard(0), &[2, 2], &[1, 2, 3, 4, 5, 6, 7, 8], 1)];
    assert_eq!(all(&good, &m, &xs), "pass");
    let relabel = program(
        vec![
            step("as_s1", "x", shard(0), shard(1), 0),
            step("as_s0", "x", shard(1), shard(0), 1),
        ],
        shard(0),
    );
    assert_eq!(
        run(&relabel, &m, &xs, Phase::Forward),
        "F3: step `as_s1`: the output's global tensor is not `x` of the inputs' global tensors | [[1, 2], [3, 4], [5, 6], [7, 8]] | [[1, 2, 5, 6], [3, 4, 7, 8]]"
    );
}

/// An input that gets no gradient (SPEC.md §4.5) is left out of B3, so
/// a sample of it that meets a kink leaves nothing undetermined: relu(x)
/// at x = −2s (s = 2⁻¹⁶, the step) reads relu(0) two steps on. With a
/// declared JVP its columns are still read, for J1: `dy` leaves out
/// relu's derivative 1 along x at x = 1.
#[test]
fn an_input_without_gradient_is_left_out_of_b3_but_not_of_j1() {
    let m = Mesh::line(1);
    let s = 1 << 16;
    let mut op = typed("relu(x) + y", &[one(V), one(V)], one(V));
    let xs = |x: i64| {
        [
            value(&m, &one(V), &[], &[x], s),
            value(&m, &one(V), &[], &[1], 1),
        ]
    };
    assert_eq!(all(&op, &m, &xs(-2)), "B3 undetermined");
    op.no_grad = vec![0];
    assert_eq!(all(&op, &m, &xs(-2)), "pass");
    let op = with_jvp(op, &["x", "y"], "dy");
    assert_eq!(
        all(&op, &m, &xs(s)),
        "J1: the JVP's tangent along dx is not the derivative | 1 | 0"
    );
    assert_eq!(
        all(&with_jvp(op, &["x", "y"], "dx + dy"), &m, &xs(s)),
        "pass"
    );
}
