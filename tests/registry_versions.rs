//! DTensor's registry recorded from two torch releases (SPEC.md §22.4):
//! 2.14.1, the pinned one (dtensor.json.gz), and 2.15.0, the newest the
//! package registry serves (dtensor_2.15.0.json.gz), by the same command.
//! The newer recording is checked and pinned like the older one, and the
//! claims the two releases make are compared.

mod common;

use common::registry::{check, recorded};
use spmd_check::registry::{self, Class, File};
use std::collections::BTreeSet;

fn newest() -> File {
    let p = registry::default_file("dtensor").replace("dtensor.json", "dtensor_2.15.0.json");
    registry::read(&p).expect("the 2.15.0 recording reads")
}

type Claim = (String, String, Vec<String>);

fn claims(f: &File) -> BTreeSet<Claim> {
    f.entries
        .iter()
        .flat_map(|e| {
            e.claims
                .iter()
                .flatten()
                .map(|c| (e.op.clone(), e.args.clone(), c.clone()))
        })
        .collect()
}

#[test]
fn torch_2_15_classifies_as_pinned() {
    let f = newest();
    assert_eq!(f.versions.get("torch").map(String::as_str), Some("2.15.0"));
    let rep = check(f);
    assert_eq!(
        common::registry::totals(&rep),
        (1249, 51, 2, 2410, 376),
        "{}",
        registry::summary(&rep)
    );
    // Every incorrect claim was reproduced in torch 2.15.0 by its script.
    for r in rep.rows.iter().filter(|r| r.class == Class::Incorrect) {
        assert!(
            r.repro.as_ref().is_some_and(|o| o.reproduced),
            "{}",
            r.detail
        );
    }
}

#[test]
fn torch_2_15_makes_the_same_claims_as_2_14_1() {
    let old = recorded("dtensor");
    let new = newest();
    assert_eq!(
        old.versions.get("torch").map(String::as_str),
        Some("2.14.1")
    );
    let (a, b) = (claims(&old), claims(&new));
    assert!(a.len() > 1500, "{} claims", a.len());
    let added: Vec<_> = b.difference(&a).collect();
    let removed: Vec<_> = a.difference(&b).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "added {added:?}, removed {removed:?}"
    );
    // Twin: one claim dropped from the newer recording is seen.
    let mut g = new.clone();
    let e = g
        .entries
        .iter_mut()
        .find(|e| e.claims.as_ref().is_some_and(|c| !c.is_empty()))
        .unwrap();
    e.claims.as_mut().unwrap().pop();
    assert_eq!(a.difference(&claims(&g)).count(), 1);
}
