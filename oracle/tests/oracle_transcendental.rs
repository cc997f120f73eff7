//! The exact path for transcendental local ops (SPEC.md §19.4,
//! `exact_deriv`): each property of §4 decided on one instance, with the
//! report it prints, beside a twin that passes. Values are exact (e^(1) is
//! a symbol of the field, shown with six decimals, rounded down).

use spmd_interp::{parse, parse_with_vars, Backward, Jvp, TypedOp};
use spmd_oracle::{Checker, Outcome, Phase, Property};
use spmd_semantics::perrank::from_free;
use spmd_semantics::{Mesh, PerRank, State, Type, Q};
use State::{Invariant as I, Partial as P, Reduced as R, Varying as V};

fn typed(src: &str, ins: &[State], out: State) -> TypedOp {
    TypedOp::local(
        parse(src).expect("parses"),
        ins.iter().map(|&s| Type::one(s)).collect(),
        Type::one(out),
    )
}

fn vars(names: &[&str], extra: &str) -> Vec<String> {
    names
        .iter()
        .map(|s| s.to_string())
        .chain([extra.to_string()])
        .collect()
}

fn with_backward(mut op: TypedOp, names: &[&str], bwd: &[&str]) -> TypedOp {
    let order = vars(names, "g");
    op.backward = Backward::Local(
        bwd.iter()
            .map(|b| parse_with_vars(b, &order).expect("parses"))
            .collect(),
    );
    op
}

/// The outcome on the line of two ranks, inputs scalars from their free
/// values: "pass", "B3 undetermined", "outside the domain", or the
/// violation as "property: what | expected | actual".
fn run(op: &TypedOp, vals: &[&[i64]], phase: Phase) -> String {
    let m = Mesh::line(2);
    let xs: Vec<PerRank> = op
        .inputs
        .iter()
        .zip(vals)
        .map(|(t, v)| {
            let free: Vec<Q> = v.iter().map(|&k| Q::int(k)).collect();
            from_free(&m, t, &[], &free)
        })
        .collect();
    let c = Checker::new(op, &m, vec![vec![]; xs.len()]).unwrap();
    match c.check(&xs, phase) {
        Outcome::Pass(p) if p.undecided => "undecided".into(),
        Outcome::Pass(p) if p.b3_undetermined => "B3 undetermined".into(),
        Outcome::Pass(_) => "pass".into(),
        Outcome::OutsideDomain => "outside the domain".into(),
        Outcome::Fail(v) => {
            format!(
                "{}: {} | {} | {}",
                v.property.code(),
                v.what,
                v.expected,
                v.actual
            )
        }
    }
}

fn all(op: &TypedOp, vals: &[&[i64]]) -> String {
    run(op, vals, Phase::All)
}

#[test]
fn f1_an_output_that_differs_along_a_replicated_axis() {
    let op = typed("exp(x)", &[V], I);
    assert_eq!(
        all(&op, &[&[0, 1]]),
        "F1: the output differs between ranks along I axis `x` | rank 1 equal to rank 0 | e^(1) ≈ 2.718281 vs 1"
    );
    // The twin: the same function to a Varying output.
    assert_eq!(all(&typed("exp(x)", &[V], V), &[&[0, 1]]), "pass");
}

#[test]
fn f2_equivalent_inputs_with_different_outputs() {
    // exp of a Partial value: moving x along (1, -1) keeps its sum, not
    // the sum of the exponentials.
    assert_eq!(
        all(&typed("exp(x)", &[P], P), &[&[0, 0]]),
        "F2: x and x' are equivalent (same denotation) but the outputs are not | 2 | (e^(-1) + e^(1)) ≈ 3.086161"
    );
    assert_eq!(all(&typed("exp(x)", &[I], I), &[&[1]]), "pass");
}

#[test]
fn f3_an_output_that_denotes_something_else() {
    // Each rank's exp(x_r) read as Partial denotes their sum.
    assert_eq!(
        all(&typed("exp(x)", &[V], P), &[&[0, 0]]),
        "F3: the output does not denote `exp(x)` of the inputs' denotations | 1 | 2"
    );
    assert_eq!(all(&typed("exp(x)", &[V], V), &[&[0, 0]]), "pass");
}

#[test]
fn b1_a_backward_result_that_differs_along_a_replicated_axis() {
    // x is Partial, so its cotangent is Reduced: the same on every rank.
    // `+ x` makes it differ.
    let bad = with_backward(
        typed("x * exp(y)", &[P, I], P),
        &["x", "y"],
        &["g * exp(y) + x", "g"],
    );
    assert_eq!(
        all(&bad, &[&[1, 2], &[0]]),
        "B1: the backward's cotangent for x differs between ranks along R axis `x` | rank 1 equal to rank 0 | 3 vs 2"
    );
    // The twin: the right backward for x, and y given no gradient.
    let mut good = with_backward(
        typed("x * exp(y)", &[P, I], P),
        &["x", "y"],
        &["g * exp(y)", "g"],
    );
    good.no_grad = vec![1];
    assert_eq!(all(&good, &[&[1, 2], &[0]]), "pass");
}

#[test]
fn b2_a_backward_that_depends_on_the_representative() {
    let bad = with_backward(
        typed("x * exp(y)", &[P, V], P),
        &["x", "y"],
        &["g * exp(y)", "g * exp(y) * x * x"],
    );
    assert_eq!(
        all(&bad, &[&[1, 2], &[0, 0]]),
        "B2: x and x' are equivalent but the backward's cotangents for y are not | <1 | 4> | <0 | 9>"
    );
    // The twin: the same backward with y given no gradient, which B1-B3
    // skip, passes.
    let mut good = with_backward(
        typed("x * exp(y)", &[P, V], P),
        &["x", "y"],
        &["g * exp(y)", "g * exp(y) * x * x"],
    );
    good.no_grad = vec![1];
    assert_eq!(all(&good, &[&[1, 2], &[0, 0]]), "pass");
}

#[test]
fn b2_a_cotangent_that_denotes_zero_must_give_zero() {
    // The output is Reduced, its cotangent Partial: g = (1, -1) denotes 0,
    // but g·g does not.
    let bad = with_backward(typed("exp(x)", &[V], R), &["x"], &["g * g * exp(x)"]);
    let got = all(&bad, &[&[1, 1]]);
    assert!(
        got.starts_with(
            "B2: the cotangent g denotes zero but the backward's result does not | 0 | "
        ),
        "{got}"
    );
}

#[test]
fn b3_a_backward_that_is_not_the_gradient() {
    let bad = with_backward(typed("exp(x)", &[V], V), &["x"], &["g"]);
    assert_eq!(
        all(&bad, &[&[0, 1]]),
        "B3: the backward's cotangent for x is not the gradient (element 0 of rank 1's piece) | e^(1) ≈ 2.718281 | 1"
    );
    // A negative value is shown rounded down too.
    let neg = with_backward(typed("0 - exp(x)", &[V], V), &["x"], &["g"]);
    assert_eq!(
        all(&neg, &[&[0, 1]]),
        "B3: the backward's cotangent for x is not the gradient (element 0 of rank 0's piece) | -1 | 1"
    );
    assert_eq!(
        all(&neg, &[&[1, 1]]),
        "B3: the backward's cotangent for x is not the gradient (element 0 of rank 0's piece) | -e^(1) ≈ -2.718282 | 1"
    );
    // The twins: the right hand-written backward, and the built-in VJP.
    let good = with_backward(typed("exp(x)", &[V], V), &["x"], &["g * exp(x)"]);
    assert_eq!(all(&good, &[&[0, 1]]), "pass");
    assert_eq!(all(&typed("sin(x) * x", &[V], V), &[&[1, 2]]), "pass");
    // Only the forward properties with Phase::Forward: the wrong backward
    // is not looked at.
    assert_eq!(run(&bad, &[&[0, 1]], Phase::Forward), "pass");
}

#[test]
fn b3_is_undetermined_at_a_kink_and_outside_the_domain_is_counted_apart() {
    let op = typed("exp(relu(x))", &[V], V);
    assert_eq!(all(&op, &[&[0, 1]]), "B3 undetermined");
    assert_eq!(all(&op, &[&[1, 1]]), "pass");
    let log = typed("log(x)", &[V], V);
    assert_eq!(all(&log, &[&[0, 1]]), "outside the domain");
    assert_eq!(all(&log, &[&[1, 2]]), "pass");
}

/// SPEC.md §19.4: a declared JVP of a transcendental op is not checked on
/// this path, so the instance is left undetermined, never passed.
#[test]
fn a_declared_jvp_leaves_the_instance_undetermined() {
    let mut op = typed("exp(x)", &[V], V);
    assert_eq!(run(&op, &[&[1, 2]], Phase::Tangent), "pass");
    op.jvp = Some(Jvp::Local(
        parse_with_vars("exp(x) * dx", &vars(&["x"], "dx")).unwrap(),
    ));
    assert_eq!(run(&op, &[&[1, 2]], Phase::Tangent), "B3 undetermined");
    assert_eq!(run(&op, &[&[1, 2]], Phase::All), "B3 undetermined");
    assert_eq!(run(&op, &[&[1, 2]], Phase::Forward), "pass");
}

/// Which ops take the exact path: a transcendental forward, hand-written
/// backward or declared JVP, each alone; a polynomial op with none does not.
#[test]
fn the_exact_path_takes_any_transcendental_part() {
    use spmd_oracle::exact_deriv::applies;
    let poly = typed("x * x", &[V], V);
    assert!(!applies(&poly));
    assert!(applies(&typed("exp(x)", &[V], V)));
    assert!(!applies(&with_backward(
        poly.clone(),
        &["x"],
        &["2 * x * g"]
    )));
    assert!(applies(&with_backward(
        poly.clone(),
        &["x"],
        &["2 * x * g * exp(0 * x)"]
    )));
    let mut jvp = poly.clone();
    jvp.jvp = Some(Jvp::Local(
        parse_with_vars("2 * x * dx * exp(0 * x)", &vars(&["x"], "dx")).unwrap(),
    ));
    assert!(applies(&jvp));
    jvp.jvp = Some(Jvp::Local(
        parse_with_vars("2 * x * dx", &vars(&["x"], "dx")).unwrap(),
    ));
    assert!(!applies(&jvp));
}

/// A value between 0 and 10⁻⁶ is shown as 0.000000, without a sign.
#[test]
fn a_tiny_positive_value_is_shown_without_a_sign() {
    let bad = with_backward(typed("exp(x)", &[V], V), &["x"], &["g"]);
    assert_eq!(
        all(&bad, &[&[-20, 0]]),
        "B3: the backward's cotangent for x is not the gradient (element 0 of rank 0's piece) | e^(-20) ≈ 0.000000 | 1"
    );
}

/// A report shows one value where the family is constant (every rank of a
/// Partial output's denotation holds the same sum), and marks the inputs
/// and the alternative of an F2 failure.
#[test]
fn a_report_shows_each_value_once_and_marks_inputs() {
    let m = Mesh::line(3);
    let op = typed("exp(x)", &[V], P);
    let xs = vec![from_free(
        &m,
        &Type::one(V),
        &[],
        &[Q::zero(), Q::zero(), Q::zero()],
    )];
    let c = Checker::new(&op, &m, vec![vec![]]).unwrap();
    let Outcome::Fail(f) = c.check(&xs, Phase::All) else {
        panic!("exp(x) from V to P denotes the sum over ranks");
    };
    assert_eq!(
        (f.property, f.expected.as_str(), f.actual.as_str()),
        (Property::F3, "1", "3")
    );
    let op = typed("exp(x)", &[P], P);
    let xs = vec![from_free(
        &m,
        &Type::one(P),
        &[],
        &[Q::zero(), Q::zero(), Q::zero()],
    )];
    let c = Checker::new(&op, &m, vec![vec![]]).unwrap();
    let Outcome::Fail(f) = c.check(&xs, Phase::All) else {
        panic!("exp of a Partial value is not well defined");
    };
    let marks: Vec<(&str, bool, bool)> = f
        .shown
        .iter()
        .map(|s| (s.label.as_str(), s.input, s.alternative))
        .collect();
    assert_eq!(marks, [("x", true, false), ("x'", false, true)]);
}

/// SPEC.md §19.3: where an enclosure cannot tell a value from a kink
/// (log(x²) − 2·log(x) is 0, which the field does not see, so relu's
/// comparison straddles), the instance is undecided: neither a pass nor a
/// failure. log(x²) − log(x) = log(x) > 0 is decided (the twin).
#[test]
fn an_instance_no_enclosure_decides_is_undecided() {
    let op = typed("relu(log(x * x) - 2 * log(x))", &[V], V);
    assert_eq!(all(&op, &[&[2, 3]]), "undecided");
    let twin = typed("relu(log(x * x) - log(x))", &[V], V);
    assert_eq!(all(&twin, &[&[2, 3]]), "pass");
}

/// Global SPMD (SPEC.md §13.2) on the exact path: x is Varying and shards
/// dim 0 of a global tensor of two entries per rank. exp is elementwise,
/// so the output's global tensor is exp of the input's; a concatenation
/// per rank is not the concatenation of the global tensors (F3).
#[test]
fn a_global_op_keeps_the_global_meaning() {
    let m = Mesh::line(2);
    let laid = Type::laid(vec![V], vec![Some(0)]);
    let global = |src: &str| TypedOp::local(parse(src).unwrap(), vec![laid.clone()], laid.clone());
    let xs = vec![from_free(
        &m,
        &laid,
        &[2],
        &[Q::zero(), Q::one(), Q::int(2), Q::int(3)],
    )];
    let show = |op: &TypedOp| {
        let c = Checker::new(op, &m, vec![vec![2]]).unwrap();
        match c.check(&xs, Phase::All) {
            Outcome::Fail(f) => format!(
                "{:?}: {} | {} | {}",
                f.property, f.what, f.expected, f.actual
            ),
            o => format!("{o:?}"),
        }
    };
    let pass = "Pass(Pass { b3_undetermined: false, undecided: false })";
    assert_eq!(show(&global("exp(x)")), pass);
    assert_eq!(show(&global("exp(x) * 2")), pass);
    let e = "1, e^(1) ≈ 2.718281, e^(2) ≈ 7.389056, e^(3) ≈ 20.085536";
    let (e01, e23) = ("1, e^(1) ≈ 2.718281", "e^(2) ≈ 7.389056, e^(3) ≈ 20.085536");
    assert_eq!(
        show(&global("concat(exp(x), exp(x), 0)")),
        format!(
            "F3: the output's global tensor is not `concat(exp(x), exp(x), 0)` of the inputs' global tensors | [{e}, {e}] | [{e01}, {e01}, {e23}, {e23}]"
        )
    );
}
