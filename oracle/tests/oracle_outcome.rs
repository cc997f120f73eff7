//! What a violation shows (`outcome.rs`): its one-line and multi-line
//! reports, in the canonical names and a dialect's, and a denotation as
//! text. Each was found by mutation testing (oracle/MUTANTS.md): the
//! reports were compared only with themselves, so a report emptied or
//! garbled everywhere at once went unnoticed.

use spmd_interp::{parse, TypedOp};
use spmd_oracle::{check, show_denot, Outcome, Violation};
use spmd_semantics::perrank::{denote, from_free, Denot};
use spmd_semantics::{Dialect, Mesh, State, Tensor, Type, Q};

/// `x * x` on a Partial x = (1, 0) over two ranks: moving x to the
/// equivalent (−1, 2) moves the output's sum from 1 to 5 (F2).
fn f2_violation() -> Violation {
    let m = Mesh::line(2);
    let p = Type::one(State::Partial);
    let op = TypedOp::local(parse("x * x").expect("parses"), vec![p.clone()], p.clone());
    let xs = vec![from_free(&m, &p, &[], &[Q::one(), Q::zero()])];
    match check(&op, &m, &xs) {
        Outcome::Fail(f) => *f,
        o => panic!("x * x on Partial must fail F2: {o:?}"),
    }
}

#[test]
fn a_violation_names_its_inputs_and_the_alternative_on_one_line() {
    let f = f2_violation();
    let inputs: Vec<&str> = f.inputs().iter().map(|s| s.label.as_str()).collect();
    assert_eq!(inputs, vec!["x"]);
    assert_eq!(
        f.one_line(),
        "F2 on mesh {x: 2}: x and x' are equivalent (same denotation) but the outputs are not; \
         x:P=(1, 0) x':P=(-1, 2); expected 1, got 5"
    );
    // The same in JAX's names: Partial is Unreduced.
    assert_eq!(
        f.one_line_in(Dialect::Jax),
        "F2 on mesh {x: 2}: x and x' are equivalent (same denotation) but the outputs are not; \
         x:Unreduced=(1, 0) x':Unreduced=(-1, 2); expected 1, got 5"
    );
}

#[test]
fn a_violation_reports_every_value_with_its_denotation_and_ranks() {
    let f = f2_violation();
    let body = |ty: &str| {
        format!(
            "violates F2 well-defined (SPEC.md §4.3) on mesh {{x: 2}}
  x and x' are equivalent (same denotation) but the outputs are not
  x : {ty}   denotes 1
      rank 0: +1
      rank 1: +0
  x' : {ty}   denotes 1
      rank 0: +-1
      rank 1: +2
  out : {ty}   denotes 1
      rank 0: +1
      rank 1: +0
  out' : {ty}   denotes 5
      rank 0: +1
      rank 1: +4
  expected: 1
  actual:   5
"
        )
    };
    assert_eq!(f.report(), body("P"));
    // DTensor calls a pending sum Partial().
    assert_eq!(f.report_in(Dialect::Dtensor), body("Partial()"));
}

/// A denotation is shown once per Varying coordinate: on a 2×2 mesh a
/// value Varying along `a` and Invariant along `b` denotes one tensor per
/// coordinate of `a`. A family that varies where its type does not (a
/// spec value the type cannot represent) is shown rank by rank. On a
/// line of three ranks a value that is not Varying is shown once.
#[test]
fn a_denotation_is_shown_once_per_varying_coordinate() {
    use State::{Invariant as I, Partial as P, Varying as V};
    let m = Mesh::new(&[("a", 2), ("b", 2)]);
    let odd = Denot {
        family: (0..4)
            .map(|r| Tensor::new(vec![], vec![Q::int(10 + r)]))
            .collect(),
    };
    for (states, want) in [
        ([V, I], "<1 | 2>"),
        ([I, V], "<1 | 2>"),
        ([V, V], "<1 | 2 | 3 | 4>"),
        ([I, I], "1"),
        // Partial along `a`: ranks (0, b) and (1, b) sum.
        ([P, V], "<4 | 6>"),
    ] {
        let t = Type::new(states.to_vec());
        let n = spmd_semantics::perrank::num_free(&m, &t, &[]) as i64;
        let free: Vec<Q> = (1..=n).map(Q::int).collect();
        let d = denote(&m, &t, &from_free(&m, &t, &[], &free));
        assert_eq!(show_denot(&m, &t, &d), want, "{}", t.display(&m));
        assert_eq!(
            show_denot(&m, &t, &odd),
            "<10 | 11 | 12 | 13>",
            "{}",
            t.display(&m)
        );
    }
    // On three ranks an Invariant value is still shown once, and a Partial
    // one as its sum.
    let m = Mesh::line(3);
    for (s, free, want) in [(I, &[5][..], "5"), (P, &[1, 2, 4][..], "7")] {
        let t = Type::one(s);
        let free: Vec<Q> = free.iter().map(|&k| Q::int(k)).collect();
        let d = denote(&m, &t, &from_free(&m, &t, &[], &free));
        assert_eq!(show_denot(&m, &t, &d), want, "{s}");
    }
}
