//! The checks of pending reductions beyond sums (`pending.rs`, SPEC.md
//! §21), on scopes small enough to enumerate in a fraction of a second:
//! which output placement a local op defers to, with the counts of the
//! run and the minimal counterexample of every output that fails; the
//! same in the exact field for transcendental ops; the collectives and
//! their twins; the gradients and JVPs of the kinds; and the verdicts'
//! words. Each assertion holds a value computed by the oracle, beside a
//! twin (another output, kind or function) that the oracle rejects with
//! the property named. Written for mutation testing (oracle/MUTANTS.md):
//! before them no oracle test called `pending.rs`.

use serde_json::json;
use spmd_interp::expr::parse;
use spmd_oracle::pending::*;
use spmd_oracle::Tally;
use spmd_semantics::pending::PartialKind::{self, Avg, Max, Min, Sum};
use spmd_semantics::pending::Place::{self, Inv, Part, Shard};
use spmd_semantics::{Tensor, Q};

fn scope(ranks: &[usize], shapes: &[&[usize]], vals: &[i64], max_points: u64) -> Scope {
    Scope {
        ranks: ranks.to_vec(),
        shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        values: vals.iter().map(|&v| Q::int(v)).collect(),
        max_points,
    }
}

/// 1 to 3 ranks, local shapes [], [1], [2], [1, 2], values 0, 1, −1, at
/// most 100 grid points a case.
fn scope_a() -> Scope {
    scope(&[1, 2, 3], &[&[], &[1], &[2], &[1, 2]], &[0, 1, -1], 100)
}

/// `scope_a` with the value 2 too (log 4 and 2 log 2 for the field).
fn scope_b() -> Scope {
    scope(&[1, 2, 3], &[&[], &[1], &[2], &[1, 2]], &[0, 1, -1, 2], 100)
}

/// Two ranks, local shapes [], [1], [2], values 0 and 1.
fn scope_c() -> Scope {
    scope(&[2], &[&[], &[1], &[2]], &[0, 1], 100)
}

/// A verdict on one line: its word, the run's counts (cases, of them on
/// more than one rank, beyond the cap; instances passed, failed, outside
/// the domain, undecided), and a counterexample's property and text.
fn line(v: &Verdict) -> String {
    let t = v.tally();
    let mut s = format!(
        "{} c{} d{} b{} p{} f{} o{} u{}",
        v.key(),
        t.cases,
        t.distributed_cases,
        t.cases_beyond_cap,
        t.passed,
        t.failed,
        t.outside_domain,
        t.undecided
    );
    if let Verdict::Unsound { violation, .. } = v {
        s += &format!(" | {}: {violation}", violation.property());
    }
    s
}

/// `check_places` of `expr` with inputs placed `ins` against every output
/// of `outs` at once, one line per output. For a transcendental op the
/// memoised field check must agree with the plain one, byte for byte.
fn table(expr: &str, ins: &[Place], outs: &[Place], sc: &Scope) -> String {
    let f = parse(expr).expect("parses");
    let vs = check_places(&f, ins, outs, sc).expect("checks");
    if spmd_interp::transcendental::is_transcendental(&f.expr) {
        let plain = check_places_field_plain(&f, ins, outs, sc).expect("checks");
        assert_eq!(
            format!("{vs:?}"),
            format!("{plain:?}"),
            "{expr}: memo and plain"
        );
    }
    outs.iter()
        .zip(&vs)
        .map(|(o, v)| format!("{o}: {}\n", line(v)))
        .collect()
}

/// The lines of a table as written in a test, indentation dropped.
fn lines(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect()
}

const ALL: [Place; 7] = [
    Inv,
    Part(Sum),
    Part(Avg),
    Part(Max),
    Part(Min),
    Shard(0),
    Shard(1),
];

#[test]
fn a_scope_describes_itself() {
    assert_eq!(
        Scope::default().describe(),
        "one axis of 1, 2, 3, 4 ranks; local shapes [] [1] [2] [1, 1] [1, 2] [2, 1] [2, 2]; \
         every value in {0, 1, -1, 2, 1/2, -2}; cases over 50000 grid points skipped"
    );
    // conform's scope only lowers the cap.
    assert_eq!(
        Scope::conform().describe(),
        "one axis of 1, 2, 3, 4 ranks; local shapes [] [1] [2] [1, 1] [1, 2] [2, 1] [2, 2]; \
         every value in {0, 1, -1, 2, 1/2, -2}; cases over 7776 grid points skipped"
    );
}

#[test]
fn placements_of_the_wrong_arity_are_refused() {
    let f = parse("x * y").expect("parses");
    let e = check_places(&f, &[Inv], &[Inv], &scope_a()).unwrap_err();
    assert_eq!(e, "`x * y` takes 2 inputs, 1 placements given");
    assert_eq!(
        check_places(&f, &[Inv, Inv], &[Inv], &scope_a()).map(|v| v.len()),
        Ok(1)
    );
    // The plain field check takes transcendental ops only.
    let e = check_places_field_plain(&f, &[Inv, Inv], &[Inv], &scope_a()).unwrap_err();
    assert_eq!(e, "`x * y`: not a transcendental op of 2 inputs");
    let g = parse("exp(x)").expect("parses");
    let e = check_places_field_plain(&g, &[Inv, Inv], &[Inv], &scope_a()).unwrap_err();
    assert_eq!(e, "`exp(x)`: not a transcendental op of 2 inputs");
    assert!(check_places_field_plain(&g, &[Inv], &[Inv], &scope_a()).is_ok());
}

/// SPEC.md §21.2: the identity defers a pending reduction to the same
/// kind and to no other; an Invariant value defers to every kind but the
/// sum (two ranks holding 1 denote 2 under a sum). One rank has no
/// scalar Shard(0) layout (F1). Each run counts 10 cases (6 on more than
/// one rank, 2 beyond the cap) and 258 instances: every output checked at
/// once, each with its own failures and first counterexample.
#[test]
fn the_identity_defers_each_kind_to_itself() {
    assert_eq!(
        table("x", &[Part(Sum)], &ALL, &scope_a()),
        lines(
            r#"
        I: refuted c10 d6 b2 p250 f8 o0 u0 | F1: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1
        P(sum): defers c10 d6 b2 p258 f0 o0 u0
        P(avg): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 1/2, but f of the inputs' denotations is 1
        P(max): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, -1]; per-rank outputs [0, -1] denote 0, but f of the inputs' denotations is -1
        P(min): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 0, but f of the inputs' denotations is 1
        S(0): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
        S(1): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
    "#
        )
    );
    assert_eq!(
        table("x", &[Part(Avg)], &ALL, &scope_a()),
        lines(
            r#"
        I: refuted c10 d6 b2 p252 f6 o0 u0 | F1: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1/2
        P(sum): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 1, but f of the inputs' denotations is 1/2
        P(avg): defers c10 d6 b2 p258 f0 o0 u0
        P(max): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 1, but f of the inputs' denotations is 1/2
        P(min): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 0, but f of the inputs' denotations is 1/2
        S(0): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
        S(1): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
    "#
        )
    );
    assert_eq!(
        table("x", &[Part(Max)], &ALL, &scope_a()),
        lines(
            r#"
        I: refuted c10 d6 b2 p252 f6 o0 u0 | F1: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1
        P(sum): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, -1]; per-rank outputs [0, -1] denote -1, but f of the inputs' denotations is 0
        P(avg): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 1/2, but f of the inputs' denotations is 1
        P(max): defers c10 d6 b2 p258 f0 o0 u0
        P(min): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 0, but f of the inputs' denotations is 1
        S(0): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
        S(1): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
    "#
        )
    );
    assert_eq!(
        table("x", &[Part(Min)], &ALL, &scope_a()),
        lines(
            r#"
        I: refuted c10 d6 b2 p252 f6 o0 u0 | F1: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
        P(sum): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 1, but f of the inputs' denotations is 0
        P(avg): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 1/2, but f of the inputs' denotations is 0
        P(max): refuted c10 d6 b2 p252 f6 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 1, but f of the inputs' denotations is 0
        P(min): defers c10 d6 b2 p258 f0 o0 u0
        S(0): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
        S(1): refuted c10 d6 b2 p255 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
    "#
        )
    );
    assert_eq!(
        table("x", &[Inv], &ALL, &scope_a()),
        lines(
            r#"
        I: defers c12 d8 b0 p72 f0 o0 u0
        P(sum): refuted c12 d8 b0 p70 f2 o0 u0 | F3: 2 ranks; input 0 per rank [1, 1]; per-rank outputs [1, 1] denote 2, but f of the inputs' denotations is 1
        P(avg): defers c12 d8 b0 p72 f0 o0 u0
        P(max): defers c12 d8 b0 p72 f0 o0 u0
        P(min): defers c12 d8 b0 p72 f0 o0 u0
        S(0): refuted c12 d8 b0 p69 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
        S(1): refuted c12 d8 b0 p69 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
    "#
        )
    );
}

/// Shards (SPEC.md §21.2): pieces along dim d denote their concatenation,
/// so the identity defers S(d) to S(d) only, and an op of a shard and a
/// replicated value keeps the shard. Shapes whose global form the op
/// rejects (a [2] piece of a shard against a replicated [2]) are left out
/// of the cases. max over the sharded dim defers to a pending max.
#[test]
fn a_shard_defers_to_the_same_dim() {
    assert_eq!(
        table("x", &[Shard(0)], &ALL, &scope_a()),
        lines(
            r#"
        I: refuted c7 d4 b2 p210 f9 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; per-rank outputs [[0], [0]] denote [0], but f of the inputs' denotations is [0, 0]
        P(sum): refuted c7 d4 b2 p210 f9 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; per-rank outputs [[0], [0]] denote [0], but f of the inputs' denotations is [0, 0]
        P(avg): refuted c7 d4 b2 p210 f9 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; per-rank outputs [[0], [0]] denote [0], but f of the inputs' denotations is [0, 0]
        P(max): refuted c7 d4 b2 p210 f9 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; per-rank outputs [[0], [0]] denote [0], but f of the inputs' denotations is [0, 0]
        P(min): refuted c7 d4 b2 p210 f9 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; per-rank outputs [[0], [0]] denote [0], but f of the inputs' denotations is [0, 0]
        S(0): defers c7 d4 b2 p219 f0 o0 u0
        S(1): refuted c7 d4 b2 p216 f3 o0 u0 | F1: 1 ranks; input 0 per rank [[0]]; per-rank outputs [[0]] denote nothing (not the same on every rank), but f of the inputs' denotations is [0]
    "#
        )
    );
    assert_eq!(
        table(
            "x",
            &[Shard(1)],
            &[Shard(0), Shard(1), Part(Sum)],
            &scope_a()
        ),
        lines(
            r#"
        S(0): refuted c2 d1 b1 p9 f81 o0 u0 | F3: 2 ranks; input 0 per rank [[[0, 0]], [[0, 0]]]; per-rank outputs [[[0, 0]], [[0, 0]]] denote [[0, 0], [0, 0]], but f of the inputs' denotations is [[0, 0, 0, 0]]
        S(1): defers c2 d1 b1 p90 f0 o0 u0
        P(sum): refuted c2 d1 b1 p9 f81 o0 u0 | F3: 2 ranks; input 0 per rank [[[0, 0]], [[0, 0]]]; per-rank outputs [[[0, 0]], [[0, 0]]] denote [[0, 0]], but f of the inputs' denotations is [[0, 0, 0, 0]]
    "#
        )
    );
    assert_eq!(
        table("x + y", &[Shard(0), Inv], &[Shard(0), Inv], &scope_a()),
        lines(
            r#"
        S(0): defers c8 d2 b4 p342 f0 o0 u0
        I: refuted c8 d2 b4 p315 f27 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; input 1 per rank [0, 0]; per-rank outputs [[0], [0]] denote [0], but f of the inputs' denotations is [0, 0]
    "#
        )
    );
    assert_eq!(
        table("max(x, 1)", &[Shard(1)], &[Part(Max), Shard(0)], &scope_a()),
        lines(
            r#"
        P(max): defers c2 d1 b1 p90 f0 o0 u0
        S(0): refuted c2 d1 b1 p9 f81 o0 u0 | F3: 2 ranks; input 0 per rank [[[0, 0]], [[0, 0]]]; per-rank outputs [[0], [0]] denote [0, 0], but f of the inputs' denotations is [0]
    "#
        )
    );
}

/// Instances outside the domain (1 / x at a denotation or a rank holding
/// 0) are counted apart; two pending inputs of different kinds; a
/// product with a replicated factor keeps a pending sum but not a
/// pending max (a negative factor swaps max and min).
#[test]
fn two_inputs_and_instances_outside_the_domain() {
    assert_eq!(
        table("1 / x", &[Part(Max)], &[Part(Max), Part(Sum)], &scope_a()),
        lines(
            r#"
        P(max): defers c10 d6 b2 p68 f0 o190 u0
        P(sum): refuted c10 d6 b2 p64 f4 o190 u0 | F3: 2 ranks; input 0 per rank [1, 1]; per-rank outputs [1, 1] denote 2, but f of the inputs' denotations is 1
    "#
        )
    );
    assert_eq!(
        table(
            "x - 2 * y",
            &[Part(Min), Part(Max)],
            &[Part(Min), Inv],
            &scope_a()
        ),
        lines(
            r#"
        P(min): refuted c11 d1 b0 p369 f18 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; input 1 per rank [0, 1]; per-rank outputs [0, -1] denote -1, but f of the inputs' denotations is -2
        I: refuted c11 d1 b0 p315 f72 o0 u0 | F1: 2 ranks; input 0 per rank [0, 0]; input 1 per rank [0, 1]; per-rank outputs [0, -2] denote nothing (not the same on every rank), but f of the inputs' denotations is -2
    "#
        )
    );
    assert_eq!(
        table(
            "x * y",
            &[Part(Sum), Inv],
            &[Part(Sum), Part(Max)],
            &scope_a()
        ),
        lines(
            r#"
        P(sum): defers c20 d10 b10 p900 f0 o0 u0
        P(max): refuted c20 d10 b10 p888 f12 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; input 1 per rank [-1, -1]; per-rank outputs [0, -1] denote 0, but f of the inputs' denotations is -1
    "#
        )
    );
}

/// Once every output has failed in an earlier case, the run stops: S(0)
/// fails on one rank and I on two, so only 5 of the 10 cases run (the
/// table above, with a deferring output, runs all 10).
#[test]
fn a_run_stops_once_every_output_has_failed() {
    assert_eq!(
        table("x", &[Part(Sum)], &[Inv, Shard(0)], &scope_a()),
        lines(
            r#"
        I: refuted c5 d1 b0 p25 f8 o0 u0 | F1: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1
        S(0): refuted c5 d1 b0 p30 f3 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0
    "#
        )
    );
}

/// Transcendental ops (SPEC.md §21.2, §19): values in the exact field,
/// every comparison decided exactly (normal forms) or by disjoint
/// enclosures, or counted undecided. exp is increasing, so it defers a
/// pending max and min and nothing else; log(x²) − 2 log x is 0 for
/// x > 0, but comparing it across ranks needs enclosures that all
/// contain 0 (undecided); an Invariant factor inside exp keeps a pending
/// max; `exp(x) * 0 + x` is rational, so its failures are decided
/// exactly. Shard outputs of pieces with distinct values are shown in
/// their places.
#[test]
fn transcendental_ops_are_decided_in_the_exact_field() {
    let b = scope_b();
    assert_eq!(
        table("exp(x)", &[Part(Max)], &ALL, &b),
        lines(
            r#"
        I: refuted c8 d4 b4 p188 f12 o0 u0 | F1: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [1, e^(1)] denote nothing (not the same on every rank), but f of the inputs' denotations is e^(1) (decided exactly)
        P(sum): refuted c8 d4 b4 p184 f16 o0 u0 | F3: 2 ranks; input 0 per rank [0, 0]; per-rank outputs [1, 1] denote 2, but f of the inputs' denotations is 1 (decided exactly)
        P(avg): refuted c8 d4 b4 p188 f12 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [1, e^(1)] denote (1/2 + 1/2·e^(1)), but f of the inputs' denotations is e^(1) (decided exactly)
        P(max): defers c8 d4 b4 p200 f0 o0 u0
        P(min): refuted c8 d4 b4 p188 f12 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [1, e^(1)] denote 1, but f of the inputs' denotations is e^(1) (decided by disjoint enclosures)
        S(0): refuted c8 d4 b4 p196 f4 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1 (decided exactly)
        S(1): refuted c8 d4 b4 p196 f4 o0 u0 | F1: 1 ranks; input 0 per rank [0]; per-rank outputs [1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1 (decided exactly)
    "#
        )
    );
    assert_eq!(
        table(
            "exp(x)",
            &[Part(Sum)],
            &[Part(Sum), Part(Avg), Part(Max), Part(Min)],
            &b
        ),
        lines(
            r#"
        P(sum): refuted c5 d1 b0 p40 f16 o0 u0 | F3: 2 ranks; input 0 per rank [0, 0]; per-rank outputs [1, 1] denote 2, but f of the inputs' denotations is 1 (decided exactly)
        P(avg): refuted c5 d1 b0 p41 f15 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [1, e^(1)] denote (1/2 + 1/2·e^(1)), but f of the inputs' denotations is e^(1) (decided exactly)
        P(max): refuted c5 d1 b0 p45 f11 o0 u0 | F3: 2 ranks; input 0 per rank [0, -1]; per-rank outputs [1, e^(-1)] denote 1, but f of the inputs' denotations is e^(-1) (decided by disjoint enclosures)
        P(min): refuted c5 d1 b0 p43 f13 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [1, e^(1)] denote 1, but f of the inputs' denotations is e^(1) (decided by disjoint enclosures)
    "#
        )
    );
    assert_eq!(
        table("exp(x)", &[Shard(0)], &[Shard(0), Inv], &b),
        lines(
            r#"
        S(0): defers c5 d2 b4 p116 f0 o0 u0
        I: refuted c5 d2 b4 p100 f16 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; per-rank outputs [[1], [1]] denote [1], but f of the inputs' denotations is [1, 1] (decided exactly)
    "#
        )
    );
    assert_eq!(
        table(
            "log(x * x) - 2 * log(x)",
            &[Part(Max)],
            &[Part(Max), Part(Sum), Part(Min), Shard(0)],
            &b
        ),
        lines(
            r#"
        P(max): defers c8 d4 b4 p20 f0 o164 u16
        P(sum): defers c8 d4 b4 p26 f0 o164 u10
        P(min): defers c8 d4 b4 p20 f0 o164 u16
        S(0): refuted c8 d4 b4 p34 f2 o164 u0 | F1: 1 ranks; input 0 per rank [1]; per-rank outputs [0] denote nothing (not the same on every rank), but f of the inputs' denotations is 0 (decided exactly)
    "#
        )
    );
    assert_eq!(
        table("x * exp(y)", &[Part(Max), Inv], &[Part(Max), Part(Min)], &b),
        lines(
            r#"
        P(max): defers c12 d4 b18 p576 f0 o0 u0
        P(min): refuted c12 d4 b18 p528 f48 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; input 1 per rank [0, 0]; per-rank outputs [0, 1] denote 0, but f of the inputs' denotations is 1 (decided exactly)
    "#
        )
    );
    assert_eq!(
        table(
            "exp(x) * 0 + x",
            &[Part(Max)],
            &[Part(Max), Part(Min), Part(Sum)],
            &b
        ),
        lines(
            r#"
        P(max): defers c8 d4 b4 p200 f0 o0 u0
        P(min): refuted c8 d4 b4 p188 f12 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [0, 1] denote 0, but f of the inputs' denotations is 1 (decided exactly)
        P(sum): refuted c8 d4 b4 p189 f11 o0 u0 | F3: 2 ranks; input 0 per rank [0, -1]; per-rank outputs [0, -1] denote -1, but f of the inputs' denotations is 0 (decided exactly)
    "#
        )
    );
    let c = scope_c();
    assert_eq!(
        table("exp(x) * y", &[Shard(0), Part(Sum)], &[Shard(0)], &c),
        lines(
            r#"
        S(0): refuted c1 d1 b0 p4 f12 o0 u0 | F3: 2 ranks; input 0 per rank [[0], [0]]; input 1 per rank [0, 1]; per-rank outputs [[0], [1]] denote [0, 1], but f of the inputs' denotations is [1, 1] (decided exactly)
    "#
        )
    );
    assert_eq!(
        table("exp(x)", &[Inv], &[Shard(0), Part(Sum)], &c),
        lines(
            r#"
        S(0): refuted c1 d1 b0 p0 f2 o0 u0 | F1: 2 ranks; input 0 per rank [0, 0]; per-rank outputs [1, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 1 (decided exactly)
        P(sum): refuted c1 d1 b0 p0 f2 o0 u0 | F3: 2 ranks; input 0 per rank [0, 0]; per-rank outputs [1, 1] denote 2, but f of the inputs' denotations is 1 (decided exactly)
    "#
        )
    );
}

fn t(v: &[i64]) -> Tensor {
    Tensor::new(vec![v.len()], v.iter().map(|&k| Q::int(k)).collect())
}

fn s(k: i64) -> Tensor {
    Tensor::new(vec![], vec![Q::int(k)])
}

/// Field values where each is shown (SPEC.md §21.2): on two ranks with
/// values 0 and 1 only, exp of a pending sum read as a pending max fails
/// only at x = (1, 1), where both ranks' e lie below e² (decided by
/// enclosures, no rank at the extreme); exp of a pending min read as a
/// pending max shows the maximum e held by rank 1; pieces of two entries
/// (each rank's key in the memo of evaluations holds its own entries, and
/// a shard's entries come rank after rank) and tensors of two dims are
/// written in their places; a value whose sign the enclosures cannot
/// decide (log 4 − 2 log 2 under relu) makes the instance undecided,
/// counted for every output.
#[test]
fn field_values_are_shown_in_their_places() {
    let c = scope_c();
    assert_eq!(
        table("exp(x)", &[Part(Sum)], &[Part(Max), Part(Min)], &c),
        lines(
            r#"
        P(max): refuted c1 d1 b0 p3 f1 o0 u0 | F3: 2 ranks; input 0 per rank [1, 1]; per-rank outputs [e^(1), e^(1)] denote e^(1), but f of the inputs' denotations is e^(2) (decided by disjoint enclosures)
        P(min): refuted c1 d1 b0 p1 f3 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [1, e^(1)] denote 1, but f of the inputs' denotations is e^(1) (decided by disjoint enclosures)
    "#
        )
    );
    assert_eq!(
        table("exp(x)", &[Part(Min)], &[Part(Max)], &c),
        lines(
            r#"
        P(max): refuted c1 d1 b0 p2 f2 o0 u0 | F3: 2 ranks; input 0 per rank [0, 1]; per-rank outputs [1, e^(1)] denote e^(1), but f of the inputs' denotations is 1 (decided by disjoint enclosures)
    "#
        )
    );
    let pieces = scope(&[2], &[&[2]], &[0, 1], 100);
    assert_eq!(
        table("exp(x)", &[Part(Max)], &[Part(Max), Part(Sum)], &pieces),
        lines(
            r#"
        P(max): defers c1 d1 b0 p16 f0 o0 u0
        P(sum): refuted c1 d1 b0 p0 f16 o0 u0 | F3: 2 ranks; input 0 per rank [[0, 0], [0, 0]]; per-rank outputs [[1, 1], [1, 1]] denote [2, 2], but f of the inputs' denotations is [1, 1] (decided exactly)
    "#
        )
    );
    let shard = scope(&[2], &[&[], &[2]], &[0, 1], 100);
    assert_eq!(
        table("exp(x) * y", &[Shard(0), Part(Sum)], &[Shard(0)], &shard),
        lines(
            r#"
        S(0): refuted c1 d1 b0 p16 f48 o0 u0 | F3: 2 ranks; input 0 per rank [[0, 0], [0, 0]]; input 1 per rank [0, 1]; per-rank outputs [[0, 0], [1, 1]] denote [0, 0, 1, 1], but f of the inputs' denotations is [1, 1, 1, 1] (decided exactly)
    "#
        )
    );
    let rows = scope(&[2], &[&[2, 2]], &[0, 1], 256);
    assert_eq!(
        table("exp(x)", &[Part(Max)], &[Part(Min), Part(Sum)], &rows),
        lines(
            r#"
        P(min): refuted c1 d1 b0 p16 f240 o0 u0 | F3: 2 ranks; input 0 per rank [[[0, 0], [0, 0]], [[0, 0], [0, 1]]]; per-rank outputs [[[1, 1], [1, 1]], [[1, 1], [1, e^(1)]]] denote [[1, 1], [1, 1]], but f of the inputs' denotations is [[1, 1], [1, e^(1)]] (decided by disjoint enclosures)
        P(sum): refuted c1 d1 b0 p0 f256 o0 u0 | F3: 2 ranks; input 0 per rank [[[0, 0], [0, 0]], [[0, 0], [0, 0]]]; per-rank outputs [[[1, 1], [1, 1]], [[1, 1], [1, 1]]] denote [[2, 2], [2, 2]], but f of the inputs' denotations is [[1, 1], [1, 1]] (decided exactly)
    "#
        )
    );
    let undecided = scope(&[1, 2], &[&[]], &[1, 2], 100);
    assert_eq!(
        table(
            "relu(log(x * x) - 2 * log(x))",
            &[Part(Max)],
            &[Part(Max), Inv],
            &undecided
        ),
        lines(
            r#"
        P(max): defers c2 d1 b0 p2 f0 o0 u4
        I: defers c2 d1 b0 p2 f0 o0 u4
    "#
        )
    );
}

/// A counterexample with plain values: two ranks holding 1 and 2 under
/// a pending max, each output 1, read as a pending sum.
fn plain_cex(denoted: Option<Tensor>) -> Counterexample {
    Counterexample {
        n: 2,
        inputs: vec![vec![s(1), s(2)]],
        expected: s(2),
        per_rank: vec![s(1), s(1)],
        denoted,
        field: None,
    }
}

/// The same with field values (a transcendental op, SPEC.md §21.2).
fn field_cex(denoted: Option<&str>) -> Counterexample {
    Counterexample {
        expected: Tensor::new(vec![0], vec![]),
        per_rank: vec![],
        denoted: None,
        field: Some(FieldValues {
            expected: "e^(2)".into(),
            per_rank: vec!["e^(1)".into(), "e^(2)".into()],
            denoted: denoted.map(str::to_string),
            decided: "by disjoint enclosures",
        }),
        ..plain_cex(None)
    }
}

/// A counterexample is F3 when the per-rank outputs denote a value, F1
/// when they denote none, and says so in its text, with field values as
/// the field writes them.
#[test]
fn a_counterexample_names_its_property_and_values() {
    let c = plain_cex(Some(s(2)));
    assert_eq!(c.property(), "F3");
    assert_eq!(
        c.to_string(),
        "2 ranks; input 0 per rank [1, 2]; per-rank outputs [1, 1] denote 2, but f of the inputs' denotations is 2"
    );
    let c = plain_cex(None);
    assert_eq!(c.property(), "F1");
    assert_eq!(
        c.to_string(),
        "2 ranks; input 0 per rank [1, 2]; per-rank outputs [1, 1] denote nothing (not the same on every rank), but f of the inputs' denotations is 2"
    );
    let c = field_cex(Some("(e^(1) + e^(2))"));
    assert_eq!(c.property(), "F3");
    assert_eq!(
        c.to_string(),
        "2 ranks; input 0 per rank [1, 2]; per-rank outputs [e^(1), e^(2)] denote (e^(1) + e^(2)), but f of the inputs' denotations is e^(2) (decided by disjoint enclosures)"
    );
    let c = field_cex(None);
    assert_eq!(c.property(), "F1");
    assert_eq!(
        c.to_string(),
        "2 ranks; input 0 per rank [1, 2]; per-rank outputs [e^(1), e^(2)] denote nothing (not the same on every rank), but f of the inputs' denotations is e^(2) (decided by disjoint enclosures)"
    );
}

/// A run's tally: 2 cases, `distributed` of them on more than one rank,
/// `passed` instances decided, 1 outside the domain, `undecided` more.
fn run(passed: u64, undecided: u64, distributed: u64) -> Tally {
    let mut t = tally();
    t.cases = 2;
    t.distributed_cases = distributed;
    t.passed = passed;
    t.outside_domain = 1;
    t.undecided = undecided;
    t
}

/// SPEC.md §21.2, §7.1: the verdict of one output, its word, reason,
/// text and JSON. A run that defers is never a proof; failures move out
/// of the passed instances; nothing on more than one rank, or nothing in
/// the domain, is vacuous; nothing decided is undetermined.
#[test]
fn a_verdict_says_what_was_decided() {
    let v = conclude(&run(5, 0, 1), 0, None);
    assert_eq!(
        (v.key(), v.decided(), v.is_sound(), v.proof()),
        ("defers", 5, true, false)
    );
    assert_eq!(v.reason(), None);
    assert_eq!(
        v.text(),
        "defers (bounded: 5 instances exhaustive on 2 cases, 1 on more than one rank; 1 outside the domain; 0 cases beyond the cap)"
    );
    assert_eq!(
        v.json(),
        json!({"verdict": "defers", "instances": 5, "cases": 2, "multi_rank_cases": 1,
               "outside_domain": 1, "beyond_cap": 0})
    );
    // Undecided instances are named, never counted as passes.
    let v = conclude(&run(5, 3, 1), 0, None);
    assert_eq!(
        v.text(),
        "defers (bounded: 5 instances exhaustive on 2 cases, 1 on more than one rank; 1 outside the domain; 0 cases beyond the cap; 3 undecided (overlapping enclosures or a value beyond the exact field), not counted as passes)"
    );
    assert_eq!(v.json()["undecided"], json!(3));
    // Two of the five decided instances failed: refuted, with the plain
    // counterexample in the JSON.
    let v = conclude(&run(5, 0, 1), 2, Some(plain_cex(Some(s(2)))));
    assert_eq!((v.key(), v.decided()), ("refuted", 5));
    assert_eq!((v.tally().passed, v.tally().failed), (3, 2));
    assert_eq!(v.reason(), None);
    assert_eq!(
        v.text(),
        "counterexample: 2 ranks; input 0 per rank [1, 2]; per-rank outputs [1, 1] denote 2, but f of the inputs' denotations is 2"
    );
    assert_eq!(
        v.json(),
        json!({"verdict": "refuted", "instances": 5, "cases": 2, "multi_rank_cases": 1,
               "outside_domain": 1, "beyond_cap": 0,
               "counterexample": {"ranks": 2, "inputs": [["1", "2"]],
                   "per_rank_outputs": ["1", "1"], "denoted": "2", "expected": "2"}})
    );
    // With field values, the JSON says how the difference was decided.
    let v = conclude(&run(5, 0, 1), 1, Some(field_cex(None)));
    assert_eq!(
        v.json()["counterexample"],
        json!({"ranks": 2, "inputs": [["1", "2"]], "per_rank_outputs": ["e^(1)", "e^(2)"],
               "denoted": null, "expected": "e^(2)", "decided": "by disjoint enclosures"})
    );
    // Nothing on more than one rank: vacuous, whatever passed.
    let v = conclude(&run(5, 0, 0), 0, None);
    assert_eq!(v.key(), "vacuous");
    let why = "no case on more than one rank within the cap";
    assert_eq!(v.reason().as_deref(), Some(why));
    assert_eq!(v.text(), format!("vacuous ({why})"));
    assert_eq!(
        v.json(),
        json!({"verdict": "vacuous", "instances": 5, "cases": 2, "multi_rank_cases": 0,
               "outside_domain": 1, "beyond_cap": 0, "reason": why})
    );
    // Everything outside the domain: vacuous for that reason.
    let v = conclude(&run(0, 0, 1), 0, None);
    assert_eq!(v.key(), "vacuous");
    assert_eq!(
        v.reason().as_deref(),
        Some("every instance is outside the domain")
    );
    // Nothing decided: undetermined, with the count; a stopped run says
    // why it stopped instead.
    let v = conclude(&run(0, 4, 1), 0, None);
    assert_eq!(v.key(), "undetermined");
    let why = "no instance decided: on all 4 the values left the exact field or the enclosures overlapped";
    assert_eq!(v.text(), format!("undetermined ({why})"));
    assert_eq!(v.json()["reason"], json!(why));
    let mut t = run(0, 4, 1);
    t.stopped = Some("interrupted".into());
    let v = conclude(&t, 0, None);
    assert_eq!(v.reason().as_deref(), Some("interrupted"));
}

/// SPEC.md §21.3: the collective rows, each claiming the placements it
/// converts between, with a twin per kind that reduces with the wrong
/// kind, partitions the wrong share, or keeps the wrong chunk, and must
/// fail F3.
#[test]
fn the_collective_rows_and_their_twins() {
    let rows: Vec<String> = collective_rows()
        .iter()
        .map(|r| {
            format!(
                "{} | {} | {} -> {} | {:?}",
                r.name, r.system, r.claim.0, r.claim.1, r.expect_fail
            )
        })
        .collect();
    let mut want = Vec::new();
    for (k, systems, wrong) in [
        ("sum", "dtensor, jax", "max"),
        ("avg", "dtensor", "sum"),
        ("max", "dtensor, jax", "sum"),
        ("min", "dtensor, jax", "sum"),
    ] {
        want.extend([
            format!("all_reduce({k}): P({k}) -> I | {systems} | P({k}) -> I | None"),
            format!(
                "reduce_scatter({k}, dim=0): P({k}) -> S(0) | {systems} | P({k}) -> S(0) | None"
            ),
            format!("partition({k}): I -> P({k}) | dtensor propagation | I -> P({k}) | None"),
            format!(
                "twin: all_reduce({wrong}) claimed P({k}) -> I | twin | P({k}) -> I | Some(\"F3\")"
            ),
            format!(
                "twin: partition({k}) keeping the other share | twin | I -> P({k}) | Some(\"F3\")"
            ),
        ]);
    }
    want.push(
        "twin: reduce_scatter(max) keeping chunk r+1 | twin | P(max) -> S(0) | Some(\"F3\")".into(),
    );
    assert_eq!(rows, want);
}

/// Each collective row over 1 to 3 ranks and shapes [], [1], [2], [3]
/// (at most 81 grid points a case): the rows keep the value, with the
/// counts of the run; each twin fails F3 at its first wrong instance.
#[test]
fn collectives_keep_the_value_and_their_twins_fail_f3() {
    let sc = scope(&[1, 2, 3], &[&[], &[1], &[2], &[3]], &[0, 1, -1], 81);
    let got: Vec<String> = collective_rows()
        .iter()
        .map(|r| match check_collective(r, &sc) {
            Ok(t) => format!(
                "{}: c{} d{} b{} p{}",
                r.name, t.cases, t.distributed_cases, t.cases_beyond_cap, t.passed
            ),
            Err((p, what)) => format!("{}: {p} {what}", r.name),
        })
        .collect();
    assert_eq!(got, vec![
            "all_reduce(sum): P(sum) -> I: c9 d5 b3 p195",
            "reduce_scatter(sum, dim=0): P(sum) -> S(0): c4 d1 b1 p120",
            "partition(sum): I -> P(sum): c12 d8 b0 p126",
            "twin: all_reduce(max) claimed P(sum) -> I: F3 denotes 0, the input denotes -1: 2 ranks, input per rank [-1, 0], output per rank [0, 0]",
            "twin: partition(sum) keeping the other share: F3 denotes 2, the input denotes 1: 2 ranks, input per rank [1, 1], output per rank [1, 1]",
            "all_reduce(avg): P(avg) -> I: c9 d5 b3 p195",
            "reduce_scatter(avg, dim=0): P(avg) -> S(0): c4 d1 b1 p120",
            "partition(avg): I -> P(avg): c12 d8 b0 p126",
            "twin: all_reduce(sum) claimed P(avg) -> I: F3 denotes 1, the input denotes 1/2: 2 ranks, input per rank [1, 0], output per rank [1, 1]",
            "twin: partition(avg) keeping the other share: F3 denotes 1/2, the input denotes 1: 2 ranks, input per rank [1, 1], output per rank [1/2, 1/2]",
            "all_reduce(max): P(max) -> I: c9 d5 b3 p195",
            "reduce_scatter(max, dim=0): P(max) -> S(0): c4 d1 b1 p120",
            "partition(max): I -> P(max): c12 d8 b0 p126",
            "twin: all_reduce(sum) claimed P(max) -> I: F3 denotes -1, the input denotes 0: 2 ranks, input per rank [-1, 0], output per rank [-1, -1]",
            "twin: partition(max) keeping the other share: F3 denotes 1/2, the input denotes 1: 2 ranks, input per rank [1, 1], output per rank [1/2, 1/2]",
            "all_reduce(min): P(min) -> I: c9 d5 b3 p195",
            "reduce_scatter(min, dim=0): P(min) -> S(0): c4 d1 b1 p120",
            "partition(min): I -> P(min): c12 d8 b0 p126",
            "twin: all_reduce(sum) claimed P(min) -> I: F3 denotes 1, the input denotes 0: 2 ranks, input per rank [1, 0], output per rank [1, 1]",
            "twin: partition(min) keeping the other share: F3 denotes 1/2, the input denotes 1: 2 ranks, input per rank [1, 1], output per rank [1/2, 1/2]",
            "twin: reduce_scatter(max) keeping chunk r+1: F3 denotes [0, 1], the input denotes [1, 0]: 2 ranks, input per rank [[1, 0], [0, 0]], output per rank [[0], [1]]",
        ]);
}

/// SPEC.md §21.4: the gradient of `from_local` to Partial(k). DTensor
/// gives every rank the cotangent, which is right for a sum only; the
/// transpose of the denotation (g / n for avg, g at the first extremum
/// for max and min) passes, ties undetermined.
#[test]
fn from_local_gradients_of_each_kind() {
    let sc = scope(&[1, 2, 3], &[], &[0, 1, -1], 81);
    let got: Vec<String> = [Sum, Avg, Max, Min]
        .iter()
        .flat_map(|&k| {
            [
                format!(
                    "{k} dtensor {:?}",
                    check_from_local(k, dtensor_from_local_backward, &sc)
                ),
                format!(
                    "{k} exact {:?}",
                    check_from_local(k, exact_from_local_backward, &sc)
                ),
            ]
        })
        .collect();
    assert_eq!(got, vec![
            "sum dtensor Ok((117, 0))",
            "sum exact Ok((117, 0))",
            "avg dtensor Err(\"B3: 2 ranks, x per rank [1, 0], cotangent 1: the backward gives rank 0 element 0 1, the derivative of the denotation is 1/2 (backward per rank [1, 1])\")",
            "avg exact Ok((117, 0))",
            "max dtensor Err(\"B3: 2 ranks, x per rank [1, 0], cotangent 1: the backward gives rank 1 element 0 1, the derivative of the denotation is 0 (backward per rank [1, 1])\")",
            "max exact Ok((74, 43))",
            "min dtensor Err(\"B3: 2 ranks, x per rank [1, 0], cotangent 1: the backward gives rank 0 element 0 1, the derivative of the denotation is 0 (backward per rank [1, 1])\")",
            "min exact Ok((74, 43))",
        ]);
}

/// SPEC.md §21.4: the JVP of all_reduce(k). The tangent at the extremum
/// is right for max and min (ties undetermined), the sum of the tangents
/// for sum only, the same reduction of the tangents for the linear kinds.
#[test]
fn all_reduce_jvps_of_each_kind() {
    let sc = scope(&[1, 2, 3], &[], &[0, 1, -1], 81);
    let got: Vec<String> = [Sum, Avg, Max, Min]
        .iter()
        .flat_map(|&k| {
            [
                format!("{k} argext {:?}", check_all_reduce_jvp(k, argext_jvp, &sc)),
                format!("{k} psum {:?}", check_all_reduce_jvp(k, psum_jvp, &sc)),
                format!("{k} same {:?}", check_all_reduce_jvp(k, same_kind_jvp, &sc)),
            ]
        })
        .collect();
    assert_eq!(got, vec![
            "sum argext Ok((117, 0))",
            "sum psum Ok((117, 0))",
            "sum same Ok((117, 0))",
            "avg argext Ok((117, 0))",
            "avg psum Err(\"J1: 2 ranks, x per rank [0, 0], unit tangent at rank 0 element 0: the JVP gives 1, the derivative of the denotation is 1/2\")",
            "avg same Ok((117, 0))",
            "max argext Ok((57, 60))",
            "max psum Err(\"J1: 2 ranks, x per rank [1, 0], unit tangent at rank 1 element 0: the JVP gives 1, the derivative of the denotation is 0\")",
            "max same Err(\"J1: 2 ranks, x per rank [1, 0], unit tangent at rank 1 element 0: the JVP gives 1, the derivative of the denotation is 0\")",
            "min argext Ok((57, 60))",
            "min psum Err(\"J1: 2 ranks, x per rank [1, 0], unit tangent at rank 0 element 0: the JVP gives 1, the derivative of the denotation is 0\")",
            "min same Err(\"J1: 2 ranks, x per rank [1, 0], unit tangent at rank 1 element 0: the JVP gives 0, the derivative of the denotation is 1\")",
        ]);
}

/// The per-rank gradients and tangents themselves: three ranks, two
/// elements, a tie for the maximum of element 0 (ranks 0 and 1) and of
/// element 1 (ranks 0 and 2): the first rank holding it gets g. The same
/// for ties of the minimum.
#[test]
fn the_gradient_goes_to_the_first_extremum() {
    let xs = [t(&[1, 2]), t(&[1, 0]), t(&[0, 2])];
    let g = t(&[5, 7]);
    let show = |ts: Vec<Tensor>| {
        ts.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let at = |k: PartialKind| show(exact_from_local_backward(k, &xs, &g));
    assert_eq!(at(Max), "[5, 7] [0, 0] [0, 0]");
    assert_eq!(at(Min), "[0, 0] [0, 7] [5, 0]");
    // Minimum 0 of element 0 on ranks 0 and 2, 3 of element 1 on 0 and 1.
    let ties = [t(&[0, 3]), t(&[1, 3]), t(&[0, 4])];
    assert_eq!(
        show(exact_from_local_backward(Min, &ties, &g)),
        "[5, 7] [0, 0] [0, 0]"
    );
    assert_eq!(at(Sum), "[5, 7] [5, 7] [5, 7]");
    assert_eq!(at(Avg), "[5/3, 7/3] [5/3, 7/3] [5/3, 7/3]");
    assert_eq!(
        show(dtensor_from_local_backward(Max, &xs, &g)),
        "[5, 7] [5, 7] [5, 7]"
    );
    let ts = [t(&[1, 10]), t(&[2, 20]), t(&[3, 30])];
    assert_eq!(argext_jvp(Max, &xs, &ts).to_string(), "[1, 10]");
    assert_eq!(argext_jvp(Min, &xs, &ts).to_string(), "[3, 20]");
    assert_eq!(argext_jvp(Avg, &xs, &ts).to_string(), "[2, 20]");
    assert_eq!(psum_jvp(Max, &xs, &ts).to_string(), "[6, 60]");
    assert_eq!(same_kind_jvp(Max, &xs, &ts).to_string(), "[3, 30]");
}

/// SPEC.md §21.5: the gradient of a function of global tensors paired
/// with a cotangent, from exact difference quotients at −s, s/2 and s
/// (s = 2⁻¹⁶), which must agree: for x·y + 2x at x = (1, 2), y = (3, −1)
/// with g = (1, 5), d/dx = (y + 2)·g = (5, 5) and d/dy = x·g = (1, 10).
/// At relu's kink the quotients differ, and so they do for x·x, whose
/// quotients are 2x + h: no gradient.
#[test]
fn a_global_gradient_from_exact_quotients() {
    let f = parse("x * y + 2 * x").expect("parses");
    let got = global_gradient(&f, &[t(&[1, 2]), t(&[3, -1])], &t(&[1, 5]));
    assert_eq!(got, Some(vec![t(&[5, 5]), t(&[1, 10])]));
    let sq = parse("x * x").expect("parses");
    assert_eq!(global_gradient(&sq, &[t(&[1, 2])], &t(&[1, 1])), None);
    let relu = parse("relu(x)").expect("parses");
    assert_eq!(global_gradient(&relu, &[t(&[0, 2])], &t(&[1, 1])), None);
    assert_eq!(
        global_gradient(&relu, &[t(&[-1, 2])], &t(&[3, 4])),
        Some(vec![t(&[0, 4])])
    );
}

/// The memos of `check_places` (SPEC.md §18) keep at most 2²⁰ entries;
/// beyond, every instance is evaluated afresh, and the verdicts must be
/// the memoised ones'. A pending sum on two ranks with 1449 values has
/// 1,050,525 multisets of two values: its denotations' memo is off, the
/// per-rank one (1449 entries) on. Two replicated inputs with 1025 values
/// have 1,050,625 pairs: both memos off. The sum defers, and read as a
/// pending max it is refuted at the first instance whose ranks hold 1
/// and 1; x − y is refuted as a pending sum at y = 1. Over three million
/// instances: under a second at the test profile's opt-level 3, about 10
/// s unoptimised (oracle/MUTANTS.md skips it in the quick runs).
#[test]
fn beyond_the_memo_caps_every_instance_is_evaluated() {
    let wide = |n: i64| Scope {
        ranks: vec![2],
        shapes: vec![vec![]],
        values: (0..n).map(Q::int).collect(),
        max_points: 3_000_000,
    };
    let f = parse("x").expect("parses");
    let v = check_places(&f, &[Part(Sum)], &[Part(Sum), Part(Max)], &wide(1449)).expect("checks");
    assert_eq!(
        v[0].text(),
        "defers (bounded: 2099601 instances exhaustive on 1 cases, 1 on more than one rank; 0 outside the domain; 0 cases beyond the cap)"
    );
    assert_eq!(
        v[1].text(),
        "counterexample: 2 ranks; input 0 per rank [1, 1]; per-rank outputs [1, 1] denote 1, but f of the inputs' denotations is 2"
    );
    let f = parse("x - y").expect("parses");
    let v = check_places(&f, &[Inv, Inv], &[Inv, Part(Sum)], &wide(1025)).expect("checks");
    assert_eq!(
        v[0].text(),
        "defers (bounded: 1050625 instances exhaustive on 1 cases, 1 on more than one rank; 0 outside the domain; 0 cases beyond the cap)"
    );
    assert_eq!(
        v[1].text(),
        "counterexample: 2 ranks; input 0 per rank [0, 0]; input 1 per rank [1, 1]; per-rank outputs [-1, -1] denote -2, but f of the inputs' denotations is -1"
    );
}
