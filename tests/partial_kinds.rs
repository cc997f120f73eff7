//! Pending reductions beyond sums (SPEC.md §21): every derived property with
//! a negative twin that names which property fails.

use spmd_check::partial_kinds::*;
use spmd_interp::expr::parse;
use spmd_semantics::pending::PartialKind::{self, *};

fn verdict(expr: &str, ins: &[Place], out: Place) -> Verdict {
    let f = parse(expr).unwrap();
    check_places(&f, ins, &[out], &Scope::default()).unwrap().remove(0)
}

#[test]
fn conform_section_comes_out_as_pinned() {
    let (text, ok) = conform_section(&Scope::conform()).unwrap();
    assert!(ok, "{text}");
}
