//! Derived tables (SPEC.md §9.1) and the small-scope rules behind them
//! (§7.1, §8.1): every verdict rests on cases with more than one rank.

use spmd_check::derive::derive;
use spmd_check::generators::Scope;
use spmd_check::interp::builtin;
use spmd_check::oracle::Verdict;

fn row<'a>(
    rows: &'a [spmd_check::derive::DerivedRow],
    ins: &str,
    out: &str,
) -> &'a spmd_check::derive::DerivedRow {
    rows.iter()
        .find(|r| {
            r.op.signature(&spmd_check::semantics::Mesh::line(1)) == format!("{ins} -> {out}")
        })
        .unwrap_or_else(|| panic!("no row {ins} -> {out}"))
}

/// x / y on two ranks has 6⁴ grid points, above the default cap: the
/// smallest such case is enumerated anyway, so V, V -> V is checked on two
/// ranks, and P, P -> P is refuted there.
#[test]
fn division_is_checked_on_more_than_one_rank() {
    let rows = derive(&builtin("div").unwrap(), &Scope::default(), &|_| {}).unwrap();
    let vv = row(&rows, "V, V", "V");
    assert!(vv.verdict.is_sound(), "{}", vv.verdict.name());
    assert!(vv.verdict.tally().distributed_cases > 0);
    let pp = row(&rows, "P, P", "P");
    assert!(pp.verdict.violation().is_some(), "{}", pp.verdict.name());
}

/// reshape to [4] needs 2 x 2 inputs: 8 free scalars on two ranks, over the
/// free-scalar cap. A typing whose values join the ranks (P -> P: a
/// Partial value is summed over them) is never checked on two ranks, so it
/// is vacuous and says why, never sound. V -> V keeps each rank's scalars
/// apart, so its two-rank cases are checked rank by rank (SPEC.md §8.5).
#[test]
fn typings_never_checked_on_two_ranks_are_vacuous_not_sound() {
    let rows = derive(&builtin("reshape").unwrap(), &Scope::default(), &|_| {}).unwrap();
    let v = &row(&rows, "P", "P").verdict;
    assert!(matches!(v, Verdict::Vacuous { .. }), "{}", v.name());
    assert_eq!(
        v.vacuous_reason(),
        Some("no multi-rank case within the caps")
    );
    let vv = &row(&rows, "V", "V").verdict;
    assert!(
        vv.is_sound() && vv.tally().distributed_cases > 0,
        "{}",
        vv.name()
    );
    // With the cap raised it is checked, and sound.
    let scope = Scope {
        max_free: 8,
        ..Scope::default()
    };
    let rows = derive(&builtin("reshape").unwrap(), &scope, &|_| {}).unwrap();
    let v = &row(&rows, "P", "P").verdict;
    assert!(
        v.is_sound() && v.tally().distributed_cases > 0,
        "{}",
        v.name()
    );
}

/// The global SPMD table of matmul (SPEC.md §13.3) is the classic shard
/// propagation rule, derived: rows or columns sharded against a Reduced
/// operand, or a sharded contraction left Partial (seed 003's einsum rules
/// and out_partial_axes). Nothing else is sound.
#[test]
fn global_matmul_table_is_the_shard_propagation_rule() {
    use spmd_check::derive::derive_global;
    let rows = derive_global(&builtin("matmul").unwrap(), &Scope::default(), &|_| {}).unwrap();
    let m = spmd_check::semantics::Mesh::line(1);
    let mut sound: Vec<String> = rows
        .iter()
        .filter(|r| r.verdict.is_sound())
        .map(|r| r.op.signature(&m))
        .collect();
    sound.sort();
    assert_eq!(
        sound,
        [
            "I, I -> I",
            "P, R -> P",
            "R, P -> P",
            "R, R -> R",
            "R, S(1) -> S(1)",
            "S(0), R -> S(0)",
            "S(1), S(0) -> P",
        ]
    );
    // DTensor's Shard(0) @ Replicate() -> Shard(0), with Replicate() read as
    // Invariant, gives the weight a gradient that differs across ranks.
    let i = row(&rows, "S(0), I", "S(0)");
    assert_eq!(
        i.verdict.violation().map(|v| v.property),
        Some(spmd_check::oracle::Property::B1)
    );
}
