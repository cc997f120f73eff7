//! What other checks imply is left out, and a case that fails is checked
//! again in full: B2's primal half, implied by B1 and B3 on a grid that
//! decides polynomial identities (SPEC.md §8.3), and B1 and B3 at unit
//! cotangents that are another's denotation plus a cotangent denoting zero
//! (§4.7). The built-ins' one-axis typings, the examples' rules and
//! patterns, and the generated programs of JAX and DTensor of up to two
//! steps get the same verdict, counterexample and counts either way, their
//! failures included. The twins: without the second run every failing one
//! is still refuted (what is left out is implied), and a B2 failure is
//! reported at another property, which is why the second run is there.

mod common;

use spmd_check::generators::{cases, Scope};
use spmd_check::interp::TypedOp;
use spmd_check::oracle::{Checker, Property};
use spmd_check::rules::Rule;
use spmd_check::run::{check_op, with_implied_mode, ImpliedMode};

/// The ops compared: typed built-ins, rule files and generated programs,
/// each with its meshes.
fn ops(scope: &Scope) -> Vec<(String, TypedOp, Vec<spmd_check::semantics::Mesh>)> {
    let mut out = common::builtin_typings(&["mul", "add", "matmul"], scope);
    let mut rules: Vec<Rule> = common::core_example_rules(scope)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    for file in [
        "examples/patterns/zero.toml",
        "examples/patterns/megatron.toml",
        "examples/patterns/ddp.toml",
    ] {
        let text = std::fs::read_to_string(file).expect("reads");
        let specs = spmd_check::rules::parse_file(file, &text).expect("parses");
        rules.extend(spmd_check::rules::build(file, &text, &specs, scope).expect("builds"));
    }
    rules.extend(common::generated_rules(scope));
    out.extend(common::checked_ops(rules));
    out
}

fn property(v: &spmd_check::oracle::Verdict) -> Option<Property> {
    v.violation().map(|x| x.property)
}

#[test]
fn leaving_out_what_is_implied_changes_no_outcome() {
    let scope = Scope::default();
    let (mut used, mut b2) = (0, 0);
    let (mut reduced, mut reduced_failing) = (0, 0);
    for (name, op, meshes) in ops(&scope) {
        let cs = cases(&op, &scope, &meshes).0;
        let implied_b2 = cs.iter().any(|c| c.b2_implied);
        let fewer_gs = cs.iter().any(|c| {
            Checker::new(&op, &c.mesh, c.shapes.clone()).is_ok_and(|k| k.reduces_cotangents())
        });
        if !implied_b2 && !fewer_gs {
            continue;
        }
        used += 1;
        let fast = check_op(&op, &scope, &meshes, &|_| {});
        let full = with_implied_mode(ImpliedMode::Full, || {
            check_op(&op, &scope, &meshes, &|_| {})
        });
        assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{name}");
        // Without the second run nothing that fails passes: what is left
        // out is implied by what is checked.
        let once = || {
            with_implied_mode(ImpliedMode::LeftOutNoRerun, || {
                check_op(&op, &scope, &meshes, &|_| {})
            })
        };
        if fewer_gs {
            reduced += 1;
            if full.violation().is_some() {
                reduced_failing += 1;
                assert!(property(&once()).is_some(), "{name}: refuted only in full");
            }
        }
        // A failure of B2's primal half (an equivalent primal changes
        // the cotangent's denotation), as opposed to its cotangent half,
        // which is still checked at every point.
        let primal_half = full
            .violation()
            .is_some_and(|v| v.property == Property::B2 && v.what.contains("are equivalent"));
        if primal_half {
            b2 += 1;
            // The twin: no second run. B2 fails only where B3 (or B1) does
            // on the same grid, so the rule is still refuted, but at another
            // property.
            let p = property(&once());
            assert!(p.is_some(), "{name}: a B2 failure passed without B2");
            assert_ne!(p, Some(Property::B2), "{name}");
        }
    }
    println!("{used} ops, {b2} B2 failures, {reduced} with implied cotangents, {reduced_failing} failing");
    assert!(used >= 300, "{used} ops with something implied");
    assert!(b2 >= 3, "{b2} failures of B2's primal half compared");
    assert!(reduced >= 100, "{reduced} ops with implied unit cotangents");
    assert!(reduced_failing >= 10, "{reduced_failing} of them failing");
}
