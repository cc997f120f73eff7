//! The oracle's fast paths (SPEC.md §18.1) on piecewise ops: a column
//! along an input with no division is read by interpolation weights at the
//! small step instead of `fd::derivative`'s fit, and an instance works in
//! its case's reused buffers. A correct backward still passes and a wrong
//! one is still rejected with B3, on either kind of input, and one Checker
//! gives the same outcome for an instance whatever it checked before.

use spmd_interp::{parse, parse_with_vars, Backward, TypedOp};
use spmd_oracle::{Checker, Outcome, Phase, Property};
use spmd_semantics::perrank::{from_free, num_free};
use spmd_semantics::{Mesh, PerRank, State, Type, Q};

fn vals() -> Vec<Q> {
    vec![Q::int(-2), Q::frac(-1, 2), Q::zero(), Q::one(), Q::int(3)]
}

/// Every instance of `op` on `m` with scalar inputs whose free scalars are
/// drawn from `vals()`.
fn instances(op: &TypedOp, m: &Mesh) -> Vec<Vec<PerRank>> {
    let ks: Vec<usize> = op.inputs.iter().map(|t| num_free(m, t, &[])).collect();
    let total: usize = ks.iter().sum();
    let v = vals();
    let mut out = Vec::new();
    for code in 0..v.len().pow(total as u32) {
        let free: Vec<Q> = (0..total)
            .map(|j| v[code / v.len().pow(j as u32) % v.len()].clone())
            .collect();
        let mut at = 0;
        out.push(
            op.inputs
                .iter()
                .zip(&ks)
                .map(|(t, &k)| {
                    let x = from_free(m, t, &[], &free[at..at + k]);
                    at += k;
                    x
                })
                .collect(),
        );
    }
    out
}

/// Outcomes of every instance, as (property failed or "pass"/"undetermined"/"domain").
fn outcomes(op: &TypedOp, m: &Mesh) -> Vec<String> {
    let c = Checker::new(op, m, vec![vec![]; op.inputs.len()]).expect("scalars fit");
    instances(op, m)
        .iter()
        .map(|xs| match c.check(xs, Phase::All) {
            Outcome::Pass(p) if p.b3_undetermined => "undetermined".to_string(),
            Outcome::Pass(_) => "pass".into(),
            Outcome::OutsideDomain => "domain".into(),
            Outcome::Fail(v) => v.property.code().into(),
        })
        .collect()
}

fn typed(src: &str, ins: &[State], out: State) -> TypedOp {
    TypedOp::local(
        parse(src).expect("parses"),
        ins.iter().map(|&s| Type::one(s)).collect(),
        Type::one(out),
    )
}

fn with_backward(mut op: TypedOp, vars: &[&str], bwd: &[&str]) -> TypedOp {
    let order: Vec<String> = vars
        .iter()
        .map(|s| s.to_string())
        .chain(["g".to_string()])
        .collect();
    op.backward = Backward::Local(
        bwd.iter()
            .map(|b| parse_with_vars(b, &order).expect("parses"))
            .collect(),
    );
    op
}

#[test]
fn relu_passes_off_its_kink_and_a_wrong_backward_fails_b3() {
    for (s, m) in [
        (State::Varying, Mesh::line(2)),
        (State::Invariant, Mesh::line(3)),
    ] {
        let op = typed("relu(x)", &[s], s);
        let got = outcomes(&op, &m);
        assert!(
            got.iter().all(|o| o == "pass" || o == "undetermined"),
            "{s}: {got:?}"
        );
        assert!(got.iter().any(|o| o == "pass"), "{s}");
        // Negative twin: the identity gradient is wrong where x < 0.
        let wrong = with_backward(op, &["x"], &["g"]);
        let got = outcomes(&wrong, &m);
        assert!(got.iter().any(|o| o == "B3"), "{s}: {got:?}");
        assert!(got.iter().all(|o| o != "F1" && o != "F2" && o != "F3"));
    }
}

#[test]
fn relu_over_y_checks_both_inputs_and_each_wrong_backward_fails_b3() {
    // Along x the map is piecewise polynomial (the interpolation path);
    // along y it divides (the general fit).
    let m = Mesh::line(2);
    let v = State::Varying;
    let op = typed("relu(x) / y", &[v, v], v);
    let got = outcomes(&op, &m);
    assert!(
        got.iter()
            .all(|o| o == "pass" || o == "undetermined" || o == "domain"),
        "{got:?}"
    );
    assert!(got.iter().any(|o| o == "pass"));
    // Wrong for x only, then wrong for y only (the right x part divides by
    // x, so x = 0 leaves the domain): B3 names the input that is wrong.
    for (bwd, name) in [
        (["g / y", "-g * relu(x) / (y * y)"], "for x"),
        (["g * relu(x) / (x * y)", "-g * x / (y * y)"], "for y"),
    ] {
        let wrong = with_backward(op.clone(), &["x", "y"], &bwd);
        let c = Checker::new(&wrong, &m, vec![vec![]; 2]).unwrap();
        let first = instances(&wrong, &m)
            .iter()
            .find_map(|xs| match c.check(xs, Phase::All) {
                Outcome::Fail(v) => Some((v.property, v.what.clone())),
                _ => None,
            });
        let (p, what) = first.expect("a violation");
        assert_eq!(p, Property::B3, "{bwd:?}: {what}");
        assert!(what.contains(name), "{bwd:?}: {what}");
    }
}

#[test]
fn a_checker_gives_the_same_outcome_whatever_it_checked_before() {
    // The case's buffers carry nothing from one instance to the next: the
    // outcomes in order and in reverse order agree, on a one-off Checker too.
    let m = Mesh::line(2);
    let v = State::Varying;
    let p = State::Partial;
    for op in [
        typed("relu(x) / y", &[v, v], v),
        typed("x * y", &[p, v], p),
        typed("relu(x)", &[p], p),
    ] {
        let xs = instances(&op, &m);
        let c = Checker::new(&op, &m, vec![vec![]; op.inputs.len()]).unwrap();
        let show = |o: Outcome| match o {
            Outcome::Fail(v) => v.one_line(),
            o => format!("{o:?}"),
        };
        let fwd: Vec<String> = xs.iter().map(|x| show(c.check(x, Phase::All))).collect();
        let mut back: Vec<String> = xs
            .iter()
            .rev()
            .map(|x| show(c.check(x, Phase::All)))
            .collect();
        back.reverse();
        assert_eq!(fwd, back);
        for (x, want) in xs.iter().zip(&fwd).step_by(7) {
            assert_eq!(&show(spmd_oracle::check(&op, &m, x)), want);
        }
    }
}
