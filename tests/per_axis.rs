//! SPEC.md §9.5: for local ops with their local VJP, a typing on a two-axis
//! mesh is sound exactly when each axis's one-axis typing is sound. Checked
//! by the oracle for every typing on {dp: 2, tp: 2}; a disagreement would be
//! printed with its verdict.

use rstest::rstest;
use spmd_check::derive::{per_axis_against, per_axis_agreement};
use spmd_check::generators::Scope;
use spmd_check::interp::builtin;
use spmd_check::semantics::Mesh;

#[rstest]
#[case::neg("neg", 256)]
#[case::relu("relu", 256)]
#[case::sum("sum", 256)]
#[case::mul("mul", 4096)]
fn two_axis_typings_follow_the_one_axis_tables(#[case] op: &str, #[case] typings: usize) {
    let m = Mesh::new(&[("dp", 2), ("tp", 2)]);
    let (agree, disagree) =
        per_axis_agreement(&builtin(op).unwrap(), &Scope::default(), &m).unwrap();
    for d in &disagree {
        eprintln!(
            "{}: predicted {}, oracle {} {:?}",
            d.op.signature(&m),
            if d.predicted_sound {
                "sound"
            } else {
                "unsound"
            },
            d.verdict.name(),
            d.verdict.violation().map(|v| v.one_line())
        );
    }
    assert!(disagree.is_empty(), "{} disagreements", disagree.len());
    // Nearly every typing is decided (vacuous ones are not counted).
    assert!(agree * 10 >= typings * 9, "{agree} of {typings} decided");
}

/// Negative twin: predicting mul's two-axis verdicts from add's one-axis
/// table must disagree (P, P -> P is sound for add, not for mul).
#[test]
fn another_ops_table_predicts_wrongly() {
    let m = Mesh::new(&[("dp", 2), ("tp", 2)]);
    let (mul, add) = (builtin("mul").unwrap(), builtin("add").unwrap());
    let (_, disagree) = per_axis_against(&mul, &add, &Scope::default(), &m).unwrap();
    assert!(!disagree.is_empty());
    assert!(disagree
        .iter()
        .any(|d| d.predicted_sound && !d.verdict.is_sound()));
}
