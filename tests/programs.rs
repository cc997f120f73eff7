//! Whole layers as programs (SPEC.md §12): Megatron tensor and sequence
//! parallel MLPs checked end to end, each with a twin that one wrong step
//! makes unsound, and their traffic computed.

use spmd_check::generators::Scope;
use spmd_check::oracle::Property;
use spmd_check::programs::{programs, LAYERS};
use spmd_check::semantics::Q;

#[test]
fn programs_get_their_expected_verdicts_and_costs() {
    let ps = programs(&Scope::default()).expect("the layers build");
    assert_eq!(ps.len(), LAYERS.len());
    for p in &ps {
        assert!(
            p.as_expected(),
            "{}: expected {:?}, oracle says {}: {:?}",
            p.name,
            p.expect,
            p.verdict.name(),
            p.verdict.violation().map(|v| v.one_line())
        );
        if p.expect.is_none() {
            // Sound on more than one rank, not just on the trivial mesh.
            assert!(p.verdict.tally().distributed_cases > 0, "{}", p.name);
            assert!(p.verdict.proof(), "{}", p.name);
        }
    }
    let by = |n: &str| ps.iter().find(|p| p.name == n).unwrap();
    let (tp, sp) = (by("tensor parallel MLP"), by("sequence parallel MLP"));
    // Ring model, 4 ranks, 8 x 4 activations: an all-reduce of 32 elements
    // sends 2 * 3/4 * 32 = 48; sequence parallelism's all-gather plus
    // reduce-scatter sends the same.
    assert_eq!(tp.forward_cost, Q::int(48));
    assert_eq!(tp.backward_cost, Q::int(48));
    assert_eq!(sp.forward_cost, tp.forward_cost);
    assert_eq!(sp.backward_cost, tp.backward_cost);
    // Every sound layer has a twin in the table that fails.
    assert!(LAYERS.iter().filter(|l| l.expect.is_some()).count() >= 2);
    assert_eq!(
        by("tensor parallel MLP without f")
            .verdict
            .violation()
            .map(|v| v.property),
        Some(Property::B1)
    );
}
