//! `spmd-check registry jax`, its collectives (SPEC.md §22.5): every public
//! collective of jax.lax called inside shard_map on 2 and 4 devices for an
//! input of each state, recorded with the primitives the call and its
//! transpose bind and their per-rank values, read into the catalogue,
//! confirmed on those values and judged F1-F3, B1-B3. The classes are
//! pinned; the twins tamper with the recording as a wrong library would.

mod common;

use serde_json::{json, Value};
use spmd_check::registry::{Class, CollectiveCase, Eqn, File, Report, Row};

fn collectives() -> File {
    let mut f = common::registry::recorded("jax");
    f.entries.retain(|e| e.family == "collective");
    f
}

fn row<'a>(rep: &'a Report, op: &str, args: &str, input: &str) -> &'a Row {
    let rs: Vec<&Row> = rep
        .rows
        .iter()
        .filter(|r| r.op == op && r.args == args && r.inputs == [input])
        .collect();
    assert_eq!(rs.len(), 1, "{op}({args}) on {input}: {} rows", rs.len());
    rs[0]
}

/// The recorded cases of `op(args)` on an input of `state`.
fn cases<'a>(f: &'a mut File, op: &str, args: &str, state: &str) -> Vec<&'a mut CollectiveCase> {
    let e = f
        .entries
        .iter_mut()
        .find(|e| e.op == op && e.args == args)
        .unwrap_or_else(|| panic!("{op}({args}) is recorded"));
    e.collective
        .as_mut()
        .expect("a collective entry")
        .iter_mut()
        .filter(|c| c.input == state)
        .collect()
}

#[test]
fn jax_collectives_classify_as_pinned() {
    let rep = common::registry::check(collectives());
    let (correct, incorrect, latent, missing, undetermined) = common::registry::totals(&rep);
    assert_eq!(
        (correct, incorrect, latent, missing, undetermined),
        (65, 0, 0, 0, 10),
        "{}",
        spmd_check::registry::text(&rep, spmd_check::registry::Listing::All, false)
    );
    // The rows the note names, each with what decided it.
    let psum = row(&rep, "lax.psum", "", "varying");
    assert_eq!(
        (psum.class, psum.output.as_str()),
        (Class::Correct, "invariant")
    );
    assert!(
        psum.detail
            .contains("`psum_invariant`, transposed by `pvary`"),
        "{}",
        psum.detail
    );
    assert!(
        psum.detail.contains("forward and transpose values equal"),
        "{}",
        psum.detail
    );
    let pmean = row(&rep, "lax.pmean", "", "unreduced");
    assert_eq!(pmean.class, Class::Correct, "{}", pmean.detail);
    assert!(
        pmean.detail.contains("`unreduced_psum(I) |> divide_by_group_size(I)`, transposed by `divide_by_group_size(I) |> preduced(R)`"),
        "{}",
        pmean.detail
    );
    for (op, args, input, why) in [
        ("lax.pmax", "", "varying", "`pmax` reduces by max"),
        ("lax.pbroadcast", "source=0", "varying", "copies one rank's value"),
        (
            "lax.all_to_all",
            "split_axis=0, concat_axis=1, tiled=False",
            "varying",
            "`broadcast_in_dim` is not a collective the catalogue reads; and jax.vjp raises ValueError: Expected cotangent type",
        ),
    ] {
        let r = row(&rep, op, args, input);
        assert_eq!(r.class, Class::Undetermined, "{op}({args})");
        assert!(r.detail.contains(why), "{op}({args}): {}", r.detail);
    }
    // A refusal is no claim: psum of a reduced value has no row.
    assert!(!rep
        .rows
        .iter()
        .any(|r| r.op == "lax.psum" && r.inputs == ["reduced"]));
}

/// The off-by-n transpose: pmean's transpose without its division by n,
/// recorded consistently (the gradient is the cotangent itself, as such a
/// library would compute), must fail B3.
#[test]
fn a_transpose_that_forgets_the_division_by_n_is_incorrect() {
    let mut f = collectives();
    for c in cases(&mut f, "lax.pmean", "", "Varying") {
        let pvary = c
            .backward
            .as_ref()
            .expect("a recorded transpose")
            .iter()
            .find(|e| e.prim == "pvary")
            .cloned()
            .expect("pmean's transpose pvaries");
        c.backward = Some(vec![pvary]);
        c.grad_per_rank = c.cotangent_per_rank.clone();
    }
    let rep = common::registry::check(f);
    let r = row(&rep, "lax.pmean", "", "varying");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.contains("B3"), "{}", r.detail);
    // The untampered rule is correct (the twin's other half).
    let rep = common::registry::check(collectives());
    assert_eq!(row(&rep, "lax.pmean", "", "varying").class, Class::Correct);
}

/// A reading that does not compute what JAX computed decides nothing: a
/// tampered output value leaves the claim undetermined, never correct.
#[test]
fn a_reading_that_differs_from_the_library_decides_nothing() {
    let mut f = collectives();
    for c in cases(&mut f, "lax.psum", "", "Varying") {
        let mut v = c.output_per_rank.clone().expect("values");
        v[0][0][0] = json!(-1000);
        c.output_per_rank = Some(v);
    }
    let rep = common::registry::check(f);
    let r = row(&rep, "lax.psum", "", "varying");
    assert_eq!(r.class, Class::Undetermined, "{}", r.detail);
    assert!(
        r.detail.contains("differs from the library's"),
        "{}",
        r.detail
    );
}

/// A primitive the catalogue does not read is named, and a recorded file
/// with a bad state is refused on reading, naming the entry.
#[test]
fn an_unknown_primitive_or_state_is_named() {
    let mut f = collectives();
    for c in cases(&mut f, "lax.psum", "", "Varying") {
        c.forward = vec![Eqn {
            prim: "frobnicate".into(),
            params: Default::default(),
            operands: vec![Value::Null],
            shapes: vec![],
            out: None,
        }];
    }
    let rep = common::registry::check(f.clone());
    let r = row(&rep, "lax.psum", "", "varying");
    assert_eq!(r.class, Class::Undetermined);
    assert!(r.detail.contains("`frobnicate`"), "{}", r.detail);

    let mut bad = serde_json::to_value(&f).expect("serializes");
    let es = bad["entries"].as_array_mut().expect("entries");
    es[0]["collective"][0]["input"] = json!("Sideways");
    let p = common::fresh_dir("registry_collectives", "bad_state").join("bad.json");
    std::fs::write(&p, bad.to_string()).expect("writes");
    let e = spmd_check::registry::read(p.to_str().expect("utf-8")).expect_err("refused");
    assert!(
        e.0.contains("entry 0") && e.0.contains("`Sideways`"),
        "{}",
        e.0
    );
}

/// spmd_types' collectives and casts: read by its dialect's table, whose
/// row gives the backward, confirmed on the library's values and judged.
#[test]
fn spmd_types_collectives_classify_as_pinned() {
    let mut f = common::registry::recorded("spmd_types");
    f.entries.retain(|e| e.family == "collective");
    let rep = common::registry::check(f);
    assert_eq!(common::registry::totals(&rep), (93, 0, 0, 0, 27));
    let r = rep
        .rows
        .iter()
        .find(|r| r.op == "spmd_types.all_reduce" && r.args == "src=P, dst=I")
        .expect("all_reduce P -> I");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);
    assert!(
        r.detail
            .contains("`all_reduce(I)`, transposed by `reinterpret()`"),
        "{}",
        r.detail
    );
    // A gap of the dialect's table is named, not judged.
    let r = rep
        .rows
        .iter()
        .find(|r| r.op == "spmd_types.all_reduce" && r.args == "src=V, dst=I")
        .expect("all_reduce V -> I");
    assert_eq!(r.class, Class::Undetermined);
    assert!(
        r.detail.contains("has no `all_reduce` from V"),
        "{}",
        r.detail
    );
}

/// A cast to the same type is the identity: an output that differs from
/// the input is incorrect, and so is a gradient that differs from the
/// cotangent; untampered, it is correct.
#[test]
fn an_identity_cast_that_changes_its_value_is_incorrect() {
    let mut f = common::registry::recorded("spmd_types");
    f.entries
        .retain(|e| e.op == "spmd_types.convert" && e.args == "src=R, dst=R");
    assert_eq!(f.entries.len(), 1);
    let rep = common::registry::check(f.clone());
    assert_eq!(rep.rows[0].class, Class::Correct, "{}", rep.rows[0].detail);
    for c in f.entries[0].collective.as_mut().expect("cases") {
        if let Some(g) = c.grad_per_rank.as_mut() {
            g[0] = json!("2x2:0,0,0,0");
        }
    }
    let rep = common::registry::check(f);
    assert_eq!(
        rep.rows[0].class,
        Class::Incorrect,
        "{}",
        rep.rows[0].detail
    );
    assert!(rep.rows[0]
        .detail
        .contains("gradient differs from its cotangent"));
}
