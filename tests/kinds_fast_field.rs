//! The memoised field check of pending kinds (SPEC.md §21.2) against the
//! plain one: interned values, memoised evaluations, signs, equalities and
//! sums must give the same verdicts, counts and counterexamples, byte for
//! byte, as evaluating and deciding every instance afresh.

use spmd_check::partial_kinds::*;
use spmd_interp::expr::parse;
use spmd_semantics::pending::PartialKind::{Avg, Max, Min, Sum};
use spmd_semantics::pending::Place;

use Place::{Inv, Part, Shard};

/// Small enough for the plain path: 1 to 3 ranks, three shapes (ranks 0, 1, 2).
fn scope() -> Scope {
    Scope {
        ranks: vec![1, 2, 3],
        shapes: vec![vec![], vec![2], vec![1, 1]],
        max_points: 1_296,
        ..Scope::default()
    }
}

fn outs() -> Vec<Place> {
    vec![Inv, Part(Sum), Part(Avg), Part(Max), Part(Min), Shard(0)]
}

fn memoised(expr: &str, ins: &[Place], scope: &Scope) -> String {
    let f = parse(expr).unwrap();
    format!("{:?}", check_places(&f, ins, &outs(), scope).unwrap())
}

fn plain(expr: &str, ins: &[Place], scope: &Scope) -> String {
    let f = parse(expr).unwrap();
    format!(
        "{:?}",
        check_places_field_plain(&f, ins, &outs(), scope).unwrap()
    )
}

#[test]
fn memoised_field_checks_agree_with_plain_ones() {
    let mut undecided = 0;
    let mut outside = 0;
    let mut refuted = 0;
    for (expr, ins) in [
        ("exp(x)", vec![Part(Max)]),
        ("exp(x)", vec![Part(Sum)]),
        ("tanh(x)", vec![Part(Min)]),
        ("sigmoid(x)", vec![Part(Avg)]),
        ("log(x)", vec![Part(Sum)]),
        ("log(x)", vec![Part(Max)]),
        ("sin(x)", vec![Part(Max)]),
        ("sqrt(x)", vec![Part(Min)]),
        ("x * exp(y)", vec![Part(Max), Inv]),
        ("exp(x) - y", vec![Part(Sum), Part(Sum)]),
    ] {
        let s = scope();
        let a = memoised(expr, &ins, &s);
        let b = plain(expr, &ins, &s);
        assert_eq!(a, b, "`{expr}` {ins:?}: memoised and plain differ");
        let f = parse(expr).unwrap();
        for v in check_places(&f, &ins, &outs(), &s).unwrap() {
            undecided += v.tally().undecided;
            outside += v.tally().outside_domain;
            refuted += u64::from(v.key() == "refuted");
        }
    }
    // The comparison covers every path: undecided comparisons (log 4
    // against 2 log 2), instances outside the domain, and counterexamples.
    assert!(undecided > 0 && outside > 0 && refuted > 0);
}

#[test]
fn the_comparison_sees_a_different_counterexample() {
    // The negative twin: the same op on the same grid, only the values'
    // order changed, picks another minimal counterexample; the comparison
    // above would see a memo that answered for the wrong values.
    let a = scope();
    let mut b = scope();
    b.values.swap(1, 3);
    assert_ne!(a.values, b.values);
    let (x, y) = (
        memoised("exp(x)", &[Part(Sum)], &a),
        plain("exp(x)", &[Part(Sum)], &b),
    );
    assert_ne!(x, y);
    // And a memo answering for another op would be seen too.
    assert_ne!(
        memoised("exp(x)", &[Part(Max)], &a),
        plain("tanh(x)", &[Part(Max)], &a)
    );
}
