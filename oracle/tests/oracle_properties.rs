//! Single properties of the oracle (SPEC.md §4, §5), each stated on one
//! instance with exact values and beside a twin that concludes otherwise.
//! Each was found by mutation testing (oracle/MUTANTS.md): a change to the
//! oracle that gave a different verdict without any oracle test failing.

use spmd_interp::{parse, parse_with_vars, Jvp, TypedOp};
use spmd_oracle::{check, check_involution, Checker, Outcome, Phase, Property};
use spmd_semantics::perrank::from_free;
use spmd_semantics::{Mesh, PerRank, State, Type, Q};

fn typed(src: &str, ins: &[State], out: State) -> TypedOp {
    TypedOp::local(
        parse(src).expect("parses"),
        ins.iter().map(|&s| Type::one(s)).collect(),
        Type::one(out),
    )
}

/// A scalar input of type `s` on `m` from its free scalars.
fn scalar(m: &Mesh, s: State, vals: &[Q]) -> PerRank {
    from_free(m, &Type::one(s), &[], vals)
}

fn show(o: &Outcome) -> String {
    match o {
        Outcome::Pass(p) if p.b3_undetermined => "B3 undetermined".into(),
        Outcome::Pass(p) if p.undecided => "undecided".into(),
        Outcome::Pass(_) => "pass".into(),
        Outcome::OutsideDomain => "outside the domain".into(),
        Outcome::Fail(v) => v.property.code().into(),
    }
}

/// SPEC.md §5.3: a sample exactly at a kink leaves B3 undetermined, even
/// where the samples around it would agree with a reconstruction. relu(x)
/// is read by interpolation at the step s = 2⁻¹⁶ (degree 1: samples at 0,
/// s, and the check sample 2s). At x = −2s the check sample is relu(0), a
/// kink, while relu is 0 at x and x + s and its VJP gives 0: a sample
/// taken at the kink as if it were in the domain would make B3 pass. At
/// x = −3s no sample reaches the kink and B3 is decided (the twin); at
/// x = −s the kink is the middle sample.
#[test]
fn a_sample_at_a_kink_leaves_b3_undetermined() {
    let s = Q::frac(1, 1 << 16);
    let m = Mesh::line(1);
    for st in [State::Invariant, State::Varying] {
        let op = typed("relu(x)", &[st], st);
        for (k, want) in [
            (-2, "B3 undetermined"),
            (-1, "B3 undetermined"),
            (-3, "pass"),
            (0, "B3 undetermined"),
            (1, "pass"),
        ] {
            let xs = vec![scalar(&m, st, &[Q::int(k).mul(&s)])];
            let full = Checker::new(&op, &m, vec![vec![]]).unwrap();
            let plain = Checker::new(&op, &m, vec![vec![]]).unwrap().plain();
            for c in [full, plain] {
                // Twice: the second instance reuses the first one's buffers.
                for _ in 0..2 {
                    assert_eq!(show(&c.check(&xs, Phase::All)), want, "{st} at {k}s");
                }
            }
        }
    }
}

/// SPEC.md §4.9: the transpose of the transpose must compute the same
/// global function. An op of the same shape but another function fails T1
/// with both values shown; the same function written differently passes.
#[test]
fn an_involution_with_the_same_shape_but_another_function_fails_t1() {
    let m = Mesh::line(2);
    let v = State::Varying;
    let op = typed("2 * x", &[v], v);
    let xs = vec![scalar(&m, v, &[Q::int(1), Q::int(-3)])];
    let same = typed("x + x", &[v], v);
    assert_eq!(show(&check_involution(&op, &same, &m, &xs)), "pass");
    let other = typed("3 * x", &[v], v);
    match check_involution(&op, &other, &m, &xs) {
        Outcome::Fail(f) => {
            assert_eq!(f.property, Property::T1);
            assert_eq!(
                (f.expected.as_str(), f.actual.as_str()),
                ("<2 | -6>", "<3 | -9>")
            );
        }
        o => panic!("{}", show(&o)),
    }
    // Outside the domain of either, the instance is counted as such.
    let div = typed("1 / x", &[v], v);
    let at0 = vec![scalar(&m, v, &[Q::zero(), Q::one()])];
    assert_eq!(
        show(&check_involution(&div, &div, &m, &at0)),
        "outside the domain"
    );
    assert_eq!(
        show(&check_involution(&op, &div, &m, &at0)),
        "outside the domain"
    );
}

/// SPEC.md §4.4: `2*x + 1` on Partial is well defined but denotes
/// 2·Σx + n, not 2·Σx + 1 (F3); `2*x` passes. The same with nine inputs,
/// more than the oracle's rank-by-rank fast path takes (eight): the plain
/// comparison decides those.
#[test]
fn f3_fails_where_the_output_denotes_something_else() {
    let m = Mesh::line(2);
    let p = State::Partial;
    for (names, vals) in [
        (vec!["x"], vec![Q::int(1), Q::int(-2)]),
        (
            vec!["a", "b", "c", "d", "f", "g", "k", "u", "w"],
            (0..18).map(|k| Q::frac(k - 9, 2)).collect(),
        ),
    ] {
        let sum = names.join(" + ");
        let xs: Vec<PerRank> = vals.chunks(2).map(|v| scalar(&m, p, v)).collect();
        let ins = vec![p; names.len()];
        let right = typed(&format!("2 * ({sum})"), &ins, p);
        assert_eq!(show(&check(&right, &m, &xs)), "pass", "{sum}");
        let wrong = typed(&format!("2 * ({sum}) + 1"), &ins, p);
        match check(&wrong, &m, &xs) {
            Outcome::Fail(f) => {
                assert_eq!(f.property, Property::F3, "{sum}");
                // Σ over ranks of 2·(their sum) + 1 exceeds 2·Σ + 1 by 1.
                let total = vals.iter().fold(Q::zero(), |a, v| a.add(v));
                let want = Q::int(2).mul(&total).add(&Q::one());
                let have = want.add(&Q::one());
                assert!(f.expected.contains(&want.to_string()), "{}", f.one_line());
                assert!(f.actual.contains(&have.to_string()), "{}", f.one_line());
            }
            o => panic!("{sum}: {}", show(&o)),
        }
    }
}

/// SPEC.md §4.8: J1 is undetermined at a kink like B3, both where the
/// instance is at one (x = 0) and where a sample meets one (x = −2s, whose
/// check sample is relu(0)). Off kinks it is decided: the JVP `dx` is
/// relu's derivative for x > 0 and fails J1 for x < 0.
#[test]
fn j1_is_undetermined_at_a_kink_and_decided_off_it() {
    let s = Q::frac(1, 1 << 16);
    let m = Mesh::line(2);
    let v = State::Varying;
    let mut op = typed("relu(x)", &[v], v);
    let order = vec!["x".to_string(), "dx".to_string()];
    op.jvp = Some(Jvp::Local(parse_with_vars("dx", &order).unwrap()));
    let c = Checker::new(&op, &m, vec![vec![]]).unwrap();
    for (k, want) in [
        (0, "B3 undetermined"),
        (-2, "B3 undetermined"),
        (1, "pass"),
        (-3, "J1"),
    ] {
        // Rank 1 holds 1, away from the kink; rank 0 holds k steps.
        let xs = vec![scalar(&m, v, &[Q::int(k).mul(&s), Q::one()])];
        assert_eq!(show(&c.check(&xs, Phase::Tangent)), want, "at {k}s");
    }
}

/// A violation's report marks which values are the instance's inputs and
/// which is the equivalent alternative an F2 failure moved to.
#[test]
fn a_report_marks_inputs_and_the_alternative() {
    let m = Mesh::line(2);
    let p = State::Partial;
    let op = typed("x * x", &[p], p);
    let xs = vec![scalar(&m, p, &[Q::one(), Q::zero()])];
    let Outcome::Fail(f) = check(&op, &m, &xs) else {
        panic!("x * x on Partial is not well defined");
    };
    assert_eq!(f.property, Property::F2);
    let marks: Vec<(&str, bool, bool)> = f
        .shown
        .iter()
        .map(|s| (s.label.as_str(), s.input, s.alternative))
        .collect();
    assert_eq!(marks[0], ("x", true, false));
    assert!(marks.contains(&("x'", false, true)), "{marks:?}");
}
