//! SPEC.md §10.5: `spmd-check transposes` finds JAX's transpose of pmean
//! (divide by n, then pvary: no traffic), the inverse permutation as the
//! transpose of ppermute, and answers in the dialect it is asked in. Each
//! finding has its wrong twin, which the oracle must keep out of the list.

mod common;

use common::run;
use spmd_check::generators::Scope;
use spmd_check::semantics::{Dialect, Q};
use spmd_check::transposes::{describe_typed, search};

fn found(dialect: Dialect, op: &str, from: &str, to: &str) -> Vec<(String, Q)> {
    search(dialect, op, from, to, &Scope::default())
        .expect("searches")
        .into_iter()
        .map(|f| {
            assert!(f.verdict.is_sound());
            (describe_typed(&f.backward, dialect), f.cost)
        })
        .collect()
}

/// pmean's transpose divides by n and casts to Varying, at no traffic; the
/// cast alone (seed 000's declared pvary) is not a transpose.
#[test]
fn pmean_transposes_by_dividing_then_pvary() {
    let got = found(Dialect::SpmdTypes, "pmean", "V", "I");
    assert_eq!(got[0].1, Q::zero(), "{got:?}");
    assert!(
        got.iter().any(
            |(t, c)| t == "reinterpret()[I->V] |> divide_by_group_size()[V->V]" && *c == Q::zero()
        ),
        "{got:?}"
    );
    assert!(
        !got.iter().any(|(t, _)| t == "reinterpret()[I->V]"),
        "{got:?}"
    );
    // psum's transpose is the cast alone, and dividing is wrong there.
    let psum = found(Dialect::SpmdTypes, "psum", "V", "I");
    assert_eq!(psum[0].0, "reinterpret()[I->V]");
    assert!(!psum.iter().any(|(t, _)| t.contains("divide_by_group_size")));
}

/// The transpose of ppermute is the inverse permutation (full or partial);
/// a 3-cycle is not its own transpose.
#[test]
fn ppermute_transposes_by_its_inverse() {
    let got = found(Dialect::SpmdTypes, "ppermute(perm=[1,2,0])", "V", "V");
    let texts: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
    assert!(texts.contains(&"ppermute(perm=[2,0,1])[V->V]"), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.contains("perm=[1,2,0]")),
        "{texts:?}"
    );
    let partial = found(Dialect::SpmdTypes, "ppermute(perm=[1,_])", "V", "V");
    assert_eq!(partial[0].0, "ppermute(perm=[_,0])[V->V]");
    assert_eq!(partial[0].1, Q::int(16));
}

/// `--dialect jax` answers in JAX's names: states (Unreduced, Varying) and
/// primitives (unreduced_psum_scatter, pvary) where the catalogue has them.
#[test]
fn transposes_answer_in_the_dialect_asked() {
    let got = found(
        Dialect::Jax,
        "all_gather_reduced(dim=0)",
        "Varying",
        "Reduced",
    );
    assert_eq!(
        got[0].0,
        "unreduced_psum_scatter(dim=0)[Unreduced->Varying]"
    );
    let pmean = found(Dialect::Jax, "pmean", "Varying", "Invariant");
    assert!(
        pmean
            .iter()
            .any(|(t, _)| t
                == "pvary()[Invariant->Varying] |> divide_by_group_size()[Varying->Varying]"),
        "{pmean:?}"
    );
    let (code, out, err) = run(&[
        "transposes",
        "all_gather_reduced(dim=0)",
        "--from",
        "Varying",
        "--to",
        "Reduced",
        "--dialect",
        "jax",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("unreduced_psum_scatter(dim=0)[Unreduced->Varying]"),
        "{out}"
    );
    assert!(!out.contains("[P->"), "{out}");
    let (code, out, _) = run(&[
        "transposes",
        "psum",
        "--from",
        "Varying",
        "--to",
        "Invariant",
        "--dialect",
        "jax",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        v["transposes"][0]["backward"],
        "pvary()[Invariant->Varying]"
    );
    // The spmd_types default keeps the catalogue's names.
    let (_, out, _) = run(&["transposes", "pmean", "--from", "V", "--to", "I"]);
    assert!(
        out.contains("reinterpret()[I->V] |> divide_by_group_size()[V->V]"),
        "{out}"
    );
    // Bad input is a one-line error, exit 2.
    let (code, _, err) = run(&["transposes", "convert(dim=0)", "--from", "V", "--to", "R"]);
    assert_eq!(code, 2);
    assert_eq!(common::error_lines(&err), 1, "{err}");
}

/// With layouts, the transposes are searched under global types: the
/// transpose of redistribute from S(0) to S(1) (an all-to-all) is the
/// all-to-all back, and the cast that used to pass for it is not listed.
#[test]
fn redistribute_between_layouts_transposes_by_the_all_to_all_back() {
    let got = found(Dialect::SpmdTypes, "redistribute", "S(0)", "S(1)");
    assert_eq!(got[0].0, "all_to_all(split=0, concat=1)[V->V]");
    assert!(!got
        .iter()
        .any(|(t, _)| t.starts_with("reinterpret()[V->V]")));
    let gather = found(Dialect::SpmdTypes, "all_gather", "S(1)", "R");
    assert_eq!(gather[0].0, "reduce_scatter(dim=1)[P->V]");
}

/// JAX's own parameter spellings are read: `tiled = true` concatenates
/// (unstacked), `tiled = false` is the stacked form.
#[test]
fn jax_parameter_spellings() {
    let tiled = found(
        Dialect::Jax,
        "psum_scatter(scatter_dimension=0, tiled=true)",
        "Varying",
        "Varying",
    );
    assert_eq!(tiled[0].0, "all_gather(dim=0)[Varying->Varying]");
    let stacked = found(
        Dialect::Jax,
        "psum_scatter(scatter_dimension=0, tiled=false)",
        "Varying",
        "Varying",
    );
    assert_eq!(stacked[0].0, "all_gather(dim=0, stack)[Varying->Varying]");
}
