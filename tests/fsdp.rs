//! SPEC.md §10.4: the FSDP example's costs are computed from the ring model,
//! and both strategies are checked end to end; the twin must fail B3.

use spmd_check::fsdp::strategies;
use spmd_check::generators::Scope;
use spmd_check::oracle::Property;
use spmd_check::semantics::Q;

#[test]
fn reduced_gather_halves_backward_traffic_and_both_are_correct() {
    let s = strategies(&Scope::default());
    assert_eq!(s.len(), 3);
    for x in &s[..2] {
        assert!(x.verdict.is_sound(), "{}: {}", x.name, x.verdict.name());
    }
    assert_eq!(
        s[2].verdict.violation().map(|v| v.property),
        Some(Property::B3),
        "the twin must fail B3"
    );
    // Forward traffic is the same all-gather; backward halves.
    assert_eq!(s[0].forward_cost, s[1].forward_cost);
    assert_eq!(
        s[1].backward_cost.div(&s[0].backward_cost).unwrap(),
        Q::int(2)
    );
}
