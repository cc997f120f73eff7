//! Declared JVPs (SPEC.md §4.8, §9.4): every forward-mode rule of the seeds
//! checked by J1, each with a wrong JVP that J1 must reject.

use rstest::rstest;
use spmd_check::generators::Scope;
use spmd_check::jvps::{all_jvp_rows, check_jvp};
use spmd_check::oracle::Property;

#[rstest]
#[case::nabla_all_reduce_jvp("nabla_all_reduce_jvp")]
#[case::nabla_all_reduce_invariant_jvp("nabla_all_reduce_invariant_jvp")]
#[case::nabla_pmean_jvp("nabla_pmean_jvp")]
#[case::jax_mul_jvp("jax_mul_jvp")]
#[case::nabla_mul_partial_jvp("nabla_mul_partial_jvp")]
fn jvp_rule(#[case] id: &str) {
    let r = all_jvp_rows()
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no JVP row `{id}`"));
    let res = check_jvp(r, &Scope::default()).expect("row builds");
    assert!(
        res.as_expected(),
        "{id}: expected {:?}, oracle says {}: {:?}",
        r.expect,
        res.verdict.name(),
        res.verdict.violation().map(|v| v.one_line())
    );
    assert_eq!(
        res.twin.violation().map(|v| v.property),
        Some(Property::J1),
        "{id}: the wrong JVP must fail J1, oracle says {}",
        res.twin.name()
    );
}

#[test]
fn every_jvp_row_has_a_case() {
    let src = include_str!("jvps.rs");
    for r in all_jvp_rows() {
        assert!(
            src.contains(&format!("#[case::{}(", r.id)),
            "{} has no test case",
            r.id
        );
    }
}

/// The double count of seed 004, as the tool reports it: the JVP's tangent
/// is n times the derivative.
#[test]
fn reducing_the_tangent_again_is_off_by_the_group_size() {
    let r = all_jvp_rows()
        .iter()
        .find(|r| r.id == "nabla_all_reduce_jvp")
        .unwrap();
    let res = check_jvp(r, &Scope::default()).unwrap();
    let v = res.twin.violation().expect("twin rejected");
    let n = v.mesh.num_ranks();
    assert!(n >= 2, "{}", v.one_line());
    assert!(v.what.contains("not the derivative"), "{}", v.one_line());
    let want: spmd_check::semantics::Q = v.expected.parse::<i64>().unwrap().into();
    let got: spmd_check::semantics::Q = v.actual.parse::<i64>().unwrap().into();
    assert_eq!(got, want.mul(&(n as i64).into()), "{}", v.one_line());
}

/// A JVP written for other shapes (found by tests/bad_input.rs): an
/// elementwise product rule declared for matmul fails J1 with its reason,
/// not a panic.
#[test]
fn a_jvp_that_does_not_fit_the_shapes_fails_j1() {
    let text = "[[rule]]\nname = \"m\"\nop = \"matmul\"\ninputs = [\"P\", \"R\"]\noutput = \"P\"\njvp = \"dx * y + x * dy\"\n";
    let scope = Scope::default();
    let specs = spmd_check::rules::parse_file("t.toml", text).unwrap();
    let rules = spmd_check::rules::build("t.toml", text, &specs, &scope).unwrap();
    let cfg = spmd_check::check::CheckConfig {
        scope,
        cases: 0,
        seed: 0,
    };
    let rep = spmd_check::check::check_rule(&rules[0], &cfg, &[], &|_| {});
    let v = rep.verdict.violation().expect("J1 fails");
    assert_eq!(v.property, Property::J1);
    assert!(
        v.what.contains("does not fit the shapes"),
        "{}",
        v.one_line()
    );
}
