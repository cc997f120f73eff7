//! SPEC.md §10.4: the FSDP strategies (examples/fsdp.toml) are checked end
//! to end and their costs computed from the ring model; the twin must fail
//! B3.

use spmd_check::fsdp::strategies;
use spmd_check::generators::Scope;
use spmd_check::oracle::Property;
use spmd_check::semantics::Q;

#[test]
fn reduced_gather_halves_backward_traffic_and_both_are_correct() {
    let s = strategies(&Scope::default()).expect("the strategies build");
    assert_eq!(s.len(), 3);
    for x in &s[..2] {
        assert!(x.verdict.proof(), "{}: {}", x.name, x.verdict.name());
    }
    assert_eq!(
        s[2].verdict.violation().map(|v| v.property),
        Some(Property::B3),
        "the twin must fail B3"
    );
    // Forward traffic is the same all-gather (3 x 8 elements); backward halves.
    assert_eq!(s[0].forward_cost, Q::int(24));
    assert_eq!(s[0].forward_cost, s[1].forward_cost);
    assert_eq!(s[0].backward_cost, Q::int(24));
    assert_eq!(
        s[1].backward_cost.div(&s[0].backward_cost).unwrap(),
        Q::int(2)
    );
}
