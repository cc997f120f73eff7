//! The seed systems as dialects (SPEC.md §15): each system's typing function
//! on rows whose answer its seed states, the classification against the
//! oracle on a case per class, and a deliberately wrong typing function that
//! the classification must catch.

mod common;

use spmd_check::derive::{classify_outcome, classify_rows, derive, Class, DerivedRow};
use spmd_check::dialects::tables::{jvp_rows, seed_rules, SYSTEMS as TABLE_SYSTEMS};
use spmd_check::dialects::{
    dtensor, jax, ltensor, nabla, spmd_types, system, OpClass, Outcome, System, SYSTEMS,
};
use spmd_check::generators::Scope;
use spmd_check::interp::builtin;
use spmd_check::semantics::State::{
    self, Invariant as I, Partial as P, Reduced as R, Varying as V,
};

/// One-axis input types.
fn one(states: &[State]) -> Vec<Vec<State>> {
    states.iter().map(|&s| vec![s]).collect()
}

/// An inferred output and its casts as (name, input, to).
type Inferred = (Vec<State>, Vec<(&'static str, usize, State)>);

fn infers(o: &Outcome) -> Option<Inferred> {
    match o {
        Outcome::Infers { output, casts } => Some((
            output.clone(),
            casts.iter().map(|c| (c.name, c.input, c.to)).collect(),
        )),
        _ => None,
    }
}

// ---- the tables ----

/// No row was lost moving the tables to TOML: the counts per system that
/// the Rust consts had (spmd_types 32, jax 5, dtensor 3, ltensor 3, nabla 10
/// local-op rows; jax 1 and nabla 4 JVP rows).
#[test]
fn seed_tables_keep_their_row_counts() {
    let count = |s: &str| seed_rules().iter().filter(|r| r.system == s).count();
    let jcount = |s: &str| jvp_rows().iter().filter(|r| r.system == s).count();
    let got: Vec<(usize, usize)> = TABLE_SYSTEMS
        .iter()
        .map(|s| (count(s), jcount(s)))
        .collect();
    assert_eq!(got, vec![(32, 0), (5, 1), (3, 0), (3, 0), (10, 4)]);
    assert_eq!(seed_rules().len(), 53);
    assert_eq!(jvp_rows().len(), 5);
}

#[test]
fn every_system_has_a_table_and_a_typing_function() {
    let names: Vec<&str> = SYSTEMS.iter().map(|s| s.name).collect();
    assert_eq!(names, TABLE_SYSTEMS);
    assert!(system("jax").is_ok());
    assert!(system("torch").is_err_and(|e| e.contains("unknown dialect")));
}

// ---- each system's typing function, on what its seed says ----

/// Seed 003: "op(Replicate..) -> Replicate", "op(Varying..) -> Varying",
/// "op(Replicate, Varying) -> Varying", "Partial + Partial -> Partial",
/// "linear_op(Partial) -> Partial", "Partial * Partial is forbidden",
/// "Invariant not allowed to mix with other types".
#[test]
fn spmd_types_follows_seed_003() {
    let t = spmd_types::typing;
    assert_eq!(t(OpClass::Mul, &one(&[R, R])), Outcome::infers(vec![R]));
    assert_eq!(t(OpClass::Nonlinear, &one(&[V])), Outcome::infers(vec![V]));
    assert_eq!(t(OpClass::Matmul, &one(&[R, V])), Outcome::infers(vec![V]));
    assert_eq!(t(OpClass::Add, &one(&[P, P])), Outcome::infers(vec![P]));
    assert_eq!(t(OpClass::Sum, &one(&[P])), Outcome::infers(vec![P]));
    assert_eq!(t(OpClass::Mul, &one(&[I, I])), Outcome::infers(vec![I]));
    assert!(
        matches!(t(OpClass::Mul, &one(&[P, P])), Outcome::Error(e) if e.contains("Partial * Partial"))
    );
    assert!(matches!(t(OpClass::Add, &one(&[I, V])), Outcome::Error(e) if e.contains("Invariant")));
    assert!(matches!(
        t(OpClass::Nonlinear, &one(&[P])),
        Outcome::Error(_)
    ));
    // Two axes, each typed by its own rule.
    assert_eq!(
        t(OpClass::Add, &[vec![V, P], vec![V, P]]),
        Outcome::infers(vec![V, P])
    );
}

/// Where seed 003 is silent or says otherwise, the typing function follows
/// the real spmd-types 0.3.1 (tests/fixtures/spmd_types_typing.json): Python
/// scalars, `no_grad` operands, `out_partial_axes`, a lone Partial factor of
/// a multilinear op, and division's nonlinear divisor.
#[test]
fn spmd_types_follows_the_real_library() {
    use spmd_check::dialects::Operand::{self, Scalar};
    let t = |op, ops: &[Operand], outp: &[usize]| spmd_types::typing_operands(op, ops, outp);
    let ten = |s: State| Operand::tensor(vec![s]);
    let ng = |s: State| Operand::Tensor {
        types: vec![s],
        no_grad: true,
    };
    // `linear_Scalar_Scalar` -> R; `nonlinear_Scalar_I` -> I.
    assert_eq!(
        spmd_types::typing_scalars(OpClass::Add, 2, 1, &[]),
        Outcome::infers(vec![R])
    );
    assert_eq!(
        t(OpClass::Nonlinear, &[Scalar, ten(I)], &[]),
        Outcome::infers(vec![I])
    );
    // `linear_P_Scalar` refused (P + 3 is affine); `multilinear_P_Scalar` -> P.
    assert!(matches!(
        t(OpClass::Add, &[ten(P), Scalar], &[]),
        Outcome::Error(_)
    ));
    assert_eq!(
        t(OpClass::Mul, &[ten(P), Scalar], &[]),
        Outcome::infers(vec![P])
    );
    // no_grad: `linear_R_I_nograd10` -> I, `linear_R_I_nograd01` -> R,
    // `linear_I_V_nograd10` -> V, `linear_I_V_nograd01` refused.
    assert_eq!(
        t(OpClass::Add, &[ng(R), ten(I)], &[]),
        Outcome::infers(vec![I])
    );
    assert_eq!(
        t(OpClass::Add, &[ten(R), ng(I)], &[]),
        Outcome::infers(vec![R])
    );
    assert_eq!(
        t(OpClass::Add, &[ng(I), ten(V)], &[]),
        Outcome::infers(vec![V])
    );
    assert!(matches!(
        t(OpClass::Add, &[ten(I), ng(V)], &[]),
        Outcome::Error(_)
    ));
    // out_partial: V -> P; R and I refused.
    assert_eq!(
        t(OpClass::Mul, &[ten(V), ten(R)], &[0]),
        Outcome::infers(vec![P])
    );
    assert!(matches!(
        t(OpClass::Add, &[ten(R)], &[0]),
        Outcome::Error(_)
    ));
    assert!(matches!(
        t(OpClass::Add, &[ten(I)], &[0]),
        Outcome::Error(_)
    ));
    // P with V refused under every linearity.
    for op in [OpClass::Add, OpClass::Mul, OpClass::Nonlinear] {
        assert!(matches!(
            spmd_types::typing(op, &one(&[P, V])),
            Outcome::Error(_)
        ));
    }
    // Seed 003 admits no lone Partial factor of mul ("only linear ops keep
    // Partial"); the library's MULTILINEAR does (`multilinear_P`).
    assert_eq!(
        spmd_types::typing(OpClass::Mul, &one(&[P])),
        Outcome::infers(vec![P])
    );
    // Division is MULTILINEAR with its divisor nonlinear:
    // `torch_div_P_R_plain` -> P, `torch_div_R_P_plain` refused.
    assert_eq!(
        spmd_types::typing(OpClass::Division, &one(&[P, R])),
        Outcome::infers(vec![P])
    );
    assert!(matches!(
        spmd_types::typing(OpClass::Division, &one(&[R, P])),
        Outcome::Error(_)
    ));
}

/// Seed 000 where real JAX 0.10.2 agrees: unary ops copy `reduced`; equal
/// `reduced` sets propagate; dot_general does not propagate; `pvary` marks
/// an Invariant operand Varying. Where the seed and real JAX disagree, the
/// function follows JAX (tests/fixtures/jax_typing.json), and the pins say
/// so: seed 000's n-ary rule skips an input without `reduced` (I + R -> R),
/// real JAX refuses it (`add_R_I`); seed 000 is silent on Unreduced and on
/// Reduced meeting Varying, real JAX has a rule for each (`mul_U_R`,
/// `add_V_R`).
#[test]
fn jax_follows_seed_000_where_real_jax_does() {
    let t = jax::typing;
    assert_eq!(t(OpClass::Nonlinear, &one(&[R])), Outcome::infers(vec![R]));
    assert_eq!(t(OpClass::Add, &one(&[R, R])), Outcome::infers(vec![R]));
    // Seed 000 says R + I -> R; real JAX refuses it (`add_R_I`).
    assert!(matches!(
        t(OpClass::Add, &one(&[R, I])),
        Outcome::Error(e) if e.contains("cannot be replicated on the same axes")
    ));
    assert_eq!(t(OpClass::Matmul, &one(&[R, R])), Outcome::infers(vec![I]));
    assert_eq!(t(OpClass::Matmul, &one(&[I, R])), Outcome::infers(vec![I]));
    // Different `reduced` axes: an error in the seed and in JAX.
    assert!(matches!(
        t(OpClass::Add, &[vec![R, I], vec![I, R]]),
        Outcome::Error(e) if e.contains("ShardingTypeError")
    ));
    assert!(
        matches!(t(OpClass::Max, &one(&[R])), Outcome::Error(e) if e.contains("NotImplementedError"))
    );
    assert_eq!(
        infers(&t(OpClass::Add, &one(&[I, V]))),
        Some((vec![V], vec![(jax::PVARY, 0, V)]))
    );
    // Seed 000 is silent on Reduced meeting Varying; JAX inserts
    // reduced_vary_cast (`add_V_R`).
    assert_eq!(
        infers(&t(OpClass::Add, &one(&[V, R]))),
        Some((vec![V], vec![(jax::REDUCED_VARY_CAST, 1, V)]))
    );
    // Seed 000 is silent on Unreduced; JAX's rules are per primitive.
    assert_eq!(t(OpClass::Add, &one(&[P, P])), Outcome::infers(vec![P]));
    assert_eq!(t(OpClass::Mul, &one(&[P, R])), Outcome::infers(vec![P]));
    // JAX 0.10.2 had no unreduced rule for sub; 0.12 types it as add:
    // all operands Unreduced, else refused.
    assert!(matches!(
        jax::typing_0_10(OpClass::Sub, &one(&[P, P])),
        Outcome::Error(e) if e.contains("NotImplementedError")
    ));
    assert_eq!(t(OpClass::Sub, &one(&[P, P])), Outcome::infers(vec![P]));
    assert!(matches!(
        t(OpClass::Sub, &one(&[P, R])),
        Outcome::Error(e) if e.contains("`sub` does not allow this")
    ));
    // neg of Unreduced: refused by 0.10.2, kept Unreduced by 0.12; abs
    // refused by both, as non-linear in 0.12.
    assert!(matches!(
        jax::typing_0_10(OpClass::Neg, &one(&[P])),
        Outcome::Error(e) if e.contains("NotImplementedError")
    ));
    assert_eq!(t(OpClass::Neg, &one(&[P])), Outcome::infers(vec![P]));
    assert!(matches!(
        t(OpClass::Nonlinear, &one(&[P])),
        Outcome::Error(e) if e.contains("non-linear")
    ));
    // div: 0.11 added U / R -> U; an Unreduced denominator stays refused.
    assert!(matches!(
        jax::typing_0_10(OpClass::Division, &one(&[P, R])),
        Outcome::Error(_)
    ));
    assert_eq!(
        jax::typing_0_11(OpClass::Division, &one(&[P, R])),
        Outcome::infers(vec![P])
    );
    assert!(matches!(
        t(OpClass::Division, &one(&[R, P])),
        Outcome::Error(e) if e.contains("denominator")
    ));
    assert!(matches!(
        t(OpClass::Matmul, &one(&[P, R])),
        Outcome::Error(_)
    ));
    // A constant factor is an Invariant scalar: 2 * R is refused
    // (`mul_const_R`; seed 000's unary rule would keep R).
    assert!(matches!(
        t(OpClass::ScalarMul, &one(&[R])),
        Outcome::Error(_)
    ));
    // No recorded case and no seed rule: still unknown.
    assert!(matches!(
        t(OpClass::Concat, &one(&[P, P])),
        Outcome::Unknown(_)
    ));
}

/// Seed 001, DTensor: "If any input has Reduced on a mesh dim, output gets
/// Reduced on that dim"; the seed's FSDP example reads it as "every input"
/// (`dtensor-fsdp`). Shard and Partial follow torch 2.14.1's propagation
/// (tests/fixtures/dtensor_ops.json), with the redistributions it inserts.
#[test]
fn dtensor_follows_seed_001_and_torch() {
    let t = dtensor::typing;
    // Replicate() * Reduced() -> Reduced(); x's gradient, a pending sum,
    // is all-reduced by the grad-placement hook.
    assert_eq!(
        infers(&t(OpClass::Mul, &one(&[I, R]))),
        Some((vec![R], vec![(dtensor::GRAD_HOOK, 0, R)]))
    );
    assert_eq!(t(OpClass::Matmul, &one(&[R, R])), Outcome::infers(vec![R]));
    assert_eq!(t(OpClass::Neg, &one(&[I])), Outcome::infers(vec![I]));
    // The other reading: inputs disagree, so the output is Replicate().
    let f = dtensor::typing_fsdp_reading;
    assert_eq!(f(OpClass::Mul, &one(&[I, R])), Outcome::infers(vec![I]));
    assert_eq!(f(OpClass::Matmul, &one(&[R, R])), Outcome::infers(vec![R]));
    assert_eq!(
        spmd_dialects::system("dtensor-fsdp").unwrap().name,
        "dtensor-fsdp"
    );
    // Replicate() * Shard(0): the Replicate() operand is sharded first.
    assert_eq!(
        infers(&t(OpClass::Mul, &one(&[V, I]))),
        Some((vec![V], vec![(dtensor::REDISTRIBUTE, 1, V)]))
    );
    // Partial() + Replicate(): the Replicate() operand becomes Partial().
    assert_eq!(
        infers(&t(OpClass::Add, &one(&[P, I]))),
        Some((vec![P], vec![(dtensor::REDISTRIBUTE, 1, P)]))
    );
    // Partial() * Replicate() stays Partial() with no move; the
    // Replicate() operand's gradient comes back Partial() and is hooked.
    assert_eq!(
        infers(&t(OpClass::Mul, &one(&[P, I]))),
        Some((vec![P], vec![(dtensor::GRAD_HOOK, 1, R)]))
    );
    // A nonlinear op reduces Partial() first.
    assert_eq!(
        infers(&t(OpClass::Nonlinear, &one(&[P]))),
        Some((vec![I], vec![(dtensor::REDISTRIBUTE, 0, I)]))
    );
    // A sum of a Shard(d) operand depends on d: unknown on local states,
    // Partial() with Shard(0), as torch does.
    assert!(matches!(t(OpClass::Sum, &one(&[V])), Outcome::Unknown(_)));
    assert_eq!(
        dtensor::typing_shard0(OpClass::Sum, &one(&[V])),
        Outcome::infers(vec![P])
    );
    // mean of Shard(0) is Partial(avg): no state here, so unknown.
    assert!(matches!(t(OpClass::Mean, &one(&[V])), Outcome::Unknown(_)));
    assert!(matches!(
        t(OpClass::Einsum, &one(&[V, I])),
        Outcome::Unknown(_)
    ));
}

/// Seed 001, LTensor: variant dims by union, reduced dims by intersection,
/// `mark_varying` inserted; no Partial.
#[test]
fn ltensor_follows_seed_001() {
    let t = ltensor::typing;
    assert_eq!(t(OpClass::Add, &one(&[R, R])), Outcome::infers(vec![R]));
    assert_eq!(t(OpClass::Add, &one(&[R, I])), Outcome::infers(vec![I]));
    assert_eq!(
        infers(&t(OpClass::Mul, &one(&[V, I]))),
        Some((vec![V], vec![(ltensor::MARK_VARYING, 1, V)]))
    );
    assert!(matches!(
        t(OpClass::Add, &one(&[P, P])),
        Outcome::Unknown(_)
    ));
}

/// Seed 004: slice and gather defer the pending sum; concatenate defers
/// only when every input is partial; nonlinear ops and narrowing casts
/// force the reduction (an inserted all_reduce).
#[test]
fn nabla_follows_seeds_002_and_004() {
    let t = nabla::typing;
    assert_eq!(t(OpClass::View, &one(&[P])), Outcome::infers(vec![P]));
    assert_eq!(t(OpClass::Concat, &one(&[P, P])), Outcome::infers(vec![P]));
    assert_eq!(
        infers(&t(OpClass::Concat, &one(&[P, I]))),
        Some((vec![I], vec![(nabla::ALL_REDUCE, 0, I)]))
    );
    assert_eq!(
        infers(&t(OpClass::NarrowingCast, &one(&[P]))),
        Some((vec![I], vec![(nabla::ALL_REDUCE, 0, I)]))
    );
    assert_eq!(
        infers(&t(OpClass::Nonlinear, &one(&[P]))),
        Some((vec![I], vec![(nabla::ALL_REDUCE, 0, I)]))
    );
    assert_eq!(t(OpClass::Mul, &one(&[V, I])), Outcome::infers(vec![V]));
    assert!(matches!(
        t(OpClass::Division, &one(&[P, I])),
        Outcome::Unknown(_)
    ));
    assert!(matches!(
        t(OpClass::Add, &one(&[R, R])),
        Outcome::Unknown(_)
    ));
}

// ---- the classification, computed by the oracle ----

fn derived(op: &str) -> Vec<DerivedRow> {
    derive(&builtin(op).unwrap(), &Scope::default(), &|_| {}).expect("derives")
}

fn class_of(rows: &[DerivedRow], sys: &System, op: OpClass, ins: &[State], out: State) -> Class {
    let rs = classify_rows(rows, sys, op).expect("one-axis rows");
    rs.into_iter()
        .find(|r| {
            r.row.op.output.states[0] == out
                && r.row
                    .op
                    .inputs
                    .iter()
                    .map(|t| t.states[0])
                    .eq(ins.iter().copied())
        })
        .expect("the typing is derived")
        .class
}

#[test]
fn one_case_per_class() {
    let add = derived("add");
    let mul = derived("mul");
    // JAX accepts I + V by inserting pvary; V + V -> V is sound.
    assert_eq!(
        class_of(&add, &jax::SYSTEM, OpClass::Add, &[I, V], V),
        Class::Agrees
    );
    // Seed 003 rejects P * P and the oracle finds it unsound.
    assert_eq!(
        class_of(&mul, &spmd_types::SYSTEM, OpClass::Mul, &[P, P], P),
        Class::Agrees
    );
    // Seed 000's n-ary rule skips an input without `reduced`: I * R -> R,
    // which fails B1. Real JAX refuses I * R (`mul_I_R`), and the typing
    // function follows it: the refusal agrees with the oracle.
    assert_eq!(
        class_of(&mul, &jax::SYSTEM, OpClass::Mul, &[I, R], R),
        Class::Agrees
    );
    // Seed 003 reads "multilinear operations can accept ... Partial
    // arguments" for one Partial factor: R * P -> P, sound.
    assert_eq!(
        class_of(&mul, &spmd_types::SYSTEM, OpClass::Mul, &[R, P], P),
        Class::Agrees
    );
    // JAX's reduce_max has no reduced rule (NotImplementedError), yet
    // max(x, 0) on Reduced data is sound.
    let max = derived("max");
    assert_eq!(
        class_of(&max, &jax::SYSTEM, OpClass::Max, &[R], R),
        Class::SoundRejection
    );
    // R * R -> V is sound too, but seed 003 infers R.
    assert_eq!(
        class_of(&mul, &spmd_types::SYSTEM, OpClass::Mul, &[R, R], V),
        Class::PermissivenessGap
    );
    // Seed 000 is silent on Unreduced (this row was `unknown`); real JAX
    // refuses an Unreduced factor beside an Invariant one (`mul_U_I`), and
    // the oracle finds U * I -> U unsound: the refusal agrees.
    assert_eq!(
        class_of(&mul, &jax::SYSTEM, OpClass::Mul, &[P, I], P),
        Class::Agrees
    );
    // JAX 0.10.2 refused sub on Unreduced (`sub_U_U`), which is linear and
    // sound: a sound rejection. JAX 0.12 accepts it, and agrees.
    let sub = derived("sub");
    assert_eq!(
        class_of(&sub, &jax::SYSTEM_0_10, OpClass::Sub, &[P, P], P),
        Class::SoundRejection
    );
    assert_eq!(
        class_of(&sub, &jax::SYSTEM, OpClass::Sub, &[P, P], P),
        Class::Agrees
    );
    // Where no recorded case and no seed sentence speak, still unknown.
    let concat = derived("concat");
    assert!(matches!(
        class_of(&concat, &jax::SYSTEM, OpClass::Concat, &[P, P], P),
        Class::Unknown(_)
    ));
}

/// A deliberately wrong typing function: Partial in, Partial out, for any
/// op (seed 003's "multilinear" sentence read literally for mul).
fn wrong(_: OpClass, inputs: &[Vec<State>]) -> Outcome {
    if inputs.iter().all(|t| t == &vec![P]) {
        Outcome::infers(vec![P])
    } else {
        Outcome::Error("not this one".into())
    }
}

const WRONG: System = System {
    name: "wrong",
    dialect: spmd_check::semantics::Dialect::Canonical,
    seeds: "none",
    typing: wrong,
    cast: spmd_check::dialects::ltensor::cast,
    collective: spmd_check::dialects::ltensor::collective,
};

/// The negative twin: the classifier must call P * P -> P an unsound
/// acceptance, with the oracle's F2 counterexample; the same function on
/// add agrees (P + P -> P is sound), so the class is computed.
#[test]
fn a_wrong_typing_function_is_caught() {
    let mul = derived("mul");
    match class_of(&mul, &WRONG, OpClass::Mul, &[P, P], P) {
        Class::UnsoundAcceptance(c) => assert!(c.starts_with("F2"), "{c}"),
        c => panic!("P * P -> P classified {c:?}"),
    }
    let add = derived("add");
    assert_eq!(
        class_of(&add, &WRONG, OpClass::Add, &[P, P], P),
        Class::Agrees
    );
}

/// Without a verdict, or with an inconclusive one, the class says so.
#[test]
fn no_verdict_is_unknown() {
    let o = Outcome::infers(vec![V]);
    assert!(matches!(
        classify_outcome(&o, &[V], V, &|_, _| None),
        Class::Unknown(_)
    ));
}

// ---- the command line ----

#[test]
fn derive_mul_under_every_dialect() {
    for sys in TABLE_SYSTEMS {
        let (code, out, err) = common::run(&["derive", "mul", "--dialect", sys]);
        assert_eq!(code, 0, "{sys}: {err}");
        let last = out.lines().last().unwrap_or_default();
        assert!(last.starts_with("64 typings: "), "{sys}: {last}");
        // The counts add up to the typings.
        let total: usize = last
            .trim_start_matches("64 typings: ")
            .split(", ")
            .map(|p| p.split(' ').next().unwrap().parse::<usize>().unwrap())
            .sum();
        assert_eq!(total, 64, "{sys}: {last}");
    }
    let (_, out, _) = common::run(&["derive", "mul", "--dialect", "spmd_types"]);
    assert!(
        out.contains("P, P -> P")
            && out.contains("error: mesh axis 0: Partial * Partial is forbidden"),
        "{out}"
    );
}

#[test]
fn derive_dialect_json_has_a_class_per_row() {
    let (code, out, err) = common::run(&["derive", "add", "--dialect", "jax", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (v["mode"].as_str(), v["system"].as_str()),
        (Some("dialect"), Some("jax"))
    );
    let rows = v["typings"].as_array().expect("array");
    assert_eq!(rows.len(), 64);
    let iv = rows
        .iter()
        .find(|r| r["inputs"] == serde_json::json!(["I", "V"]) && r["output"] == "V")
        .expect("I, V -> V");
    assert_eq!(iv["class"], "agrees");
    assert_eq!(iv["system_does"]["casts"][0]["name"], "pvary");
}

#[test]
fn derive_dialect_refuses_what_it_cannot_classify() {
    for args in [
        &["derive", "--expr", "x * y", "--dialect", "jax"][..],
        &["derive", "mul", "--global", "--dialect", "jax"][..],
        &["derive", "mul", "--dialect", "torch"][..],
    ] {
        let (code, _, err) = common::run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(common::error_lines(&err), 1, "{err}");
    }
}

/// Each typing function against its own seed table: the rows whose claim it
/// does not reproduce, pinned. Each is a seed (or the table's reading of
/// it) at odds with itself:
/// - `st_multilinear_mul`: seed 003's "multilinear operations can accept
///   multiple Partial arguments" read literally allows P * P, which
///   "Partial * Partial is forbidden" (`st_pp_mul`) rules out; the typing
///   function follows the explicit prohibition.
/// - `st_gap_rep_times_part`: the table lists R * P -> P as unlisted, yet
///   allows it on the tp axis of `st_2d_mul_rp`; the typing function allows
///   it (one Partial factor of a multilinear op).
/// - `jax_nary_skips_empty`: seed 000 allows R + I -> R (inputs without
///   `reduced` are skipped); the typing function follows real JAX 0.10.2,
///   which refuses it (`add_R_I` in tests/fixtures/jax_typing.json). The
///   row keeps the seed's claim and says what JAX does (`real`).
/// - `dtensor_fsdp_inputs_disagree`: seed 001's FSDP example says `x @ w`
///   with only `w` Reduced is not Reduced, while its code and table say
///   any Reduced input makes the output Reduced.
#[test]
fn typing_functions_against_their_tables() {
    use spmd_check::conform::typing_of_row;
    let mut differ = Vec::new();
    let mut typed = 0;
    for r in seed_rules() {
        if let Some(t) = typing_of_row(r) {
            typed += 1;
            if t.matches_claim == Some(false) {
                differ.push(r.id.as_str());
            }
        }
    }
    assert!(typed >= 25, "{typed} rows typed");
    assert_eq!(
        differ,
        [
            "st_multilinear_mul",
            "st_gap_rep_times_part",
            "jax_nary_skips_empty",
            "dtensor_fsdp_inputs_disagree"
        ]
    );
}

/// Where a seed row states a JAX or spmd_types behaviour the real library
/// contradicts, the row keeps the seed's claim and says what the real
/// library does (`real`), so a finding of conform reads as the seed's, not
/// the library's. The typing function, which follows the real library,
/// computes the same answer as the note.
#[test]
fn rows_the_real_libraries_contradict_say_so() {
    use spmd_check::conform::typing_of_row;
    let row = |id: &str| {
        seed_rules()
            .iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no row {id}"))
    };
    let r = row("jax_nary_skips_empty");
    assert!(
        r.rule.starts_with("seed 000:") && r.rule.contains("real jax 0.10.2 refuses R + I"),
        "{}",
        r.rule
    );
    let t = typing_of_row(r).expect("typed");
    assert!(matches!(t.outcome, Outcome::Error(_)), "{:?}", t.outcome);
    let r = row("st_multilinear_mul");
    assert!(r
        .real
        .as_deref()
        .is_some_and(|x| x.contains("refuses P * P")));
    assert!(matches!(
        typing_of_row(r).expect("typed").outcome,
        Outcome::Error(_)
    ));
    let r = row("st_gap_rep_times_part");
    assert!(r
        .real
        .as_deref()
        .is_some_and(|x| x.contains("accepts R * P -> P")));
    assert_eq!(
        typing_of_row(r).expect("typed").outcome,
        Outcome::infers(vec![P])
    );
    // The conform report shows the note beside the seed's rule.
    let (code, out, err) = common::run(&["conform", "--dialect", "jax"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.contains("jax_nary_skips_empty [jax]"))
        .expect("the finding");
    assert!(line.contains("real jax 0.10.2 refuses"), "{line}");
}

/// `derive --dialect dtensor` and `--dialect dtensor-fsdp`: the two readings
/// of the proposal's Reduced() give different verdicts on `x * y` with only
/// y Reduced(), and a typing whose soundness rests on DTensor's run-time
/// choice of gradient placement is reported as unknown, with the condition.
#[test]
fn both_readings_of_dtensor_reduced_are_derived() {
    let derive = |d: &str| -> Vec<serde_json::Value> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"))
            .args(["derive", "mul", "--dialect", d, "--json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["typings"].as_array().expect("typings").clone()
    };
    let row = |rows: &[serde_json::Value], ins: [&str; 2], out: &str| {
        rows.iter()
            .find(|r| r["inputs"] == serde_json::json!(ins) && r["output"] == out)
            .cloned()
            .unwrap()
    };
    let any = derive("dtensor");
    let every = derive("dtensor-fsdp");
    // The FSDP reading keeps x * w Replicate() when only w is Reduced(),
    // and the oracle finds that unsound (B3: the gradient of w counted
    // twice): the reading the seed's example uses is not sound.
    let r = row(&every, ["I", "R"], "I");
    assert_eq!(r["class"], "unsound acceptance", "{r}");
    assert_eq!(r["property"], "B3");
    // The code's reading makes it Reduced().
    let r = row(&any, ["I", "R"], "R");
    assert_eq!(r["system_does"]["infers"], serde_json::json!(["Reduced()"]));
    // Replicate() * Partial() -> Partial(): unsound with the local VJP's
    // gradient taken as Replicate() (B2); DTensor returns it Partial() and
    // the grad-placement hook all-reduces it, and with that cast it agrees.
    let r = row(&any, ["I", "P"], "P");
    assert_eq!(r["property"], "B2");
    assert_eq!(r["class"], "agrees", "{r}");
    assert!(
        r["system_does"].to_string().contains("grad_placement_hook"),
        "{r}"
    );
    assert_eq!(any.len(), 64);
    assert_eq!(every.len(), 64);
}

/// Every built-in op has the op class elaboration gives its expression, so
/// `derive sin --dialect jax` is asked like `derive mul --dialect jax`:
/// transcendental and normalising ops are Nonlinear, `floordiv` is floor
/// division, `cumsum` linear in every system. The twin: a composition has
/// no single class.
#[test]
fn every_builtin_has_an_op_class() {
    for (name, _) in spmd_check::interp::BUILTINS {
        assert!(OpClass::of_builtin(name).is_some(), "{name}");
    }
    assert_eq!(OpClass::of_builtin("sin"), Some(OpClass::Nonlinear));
    assert_eq!(OpClass::of_builtin("softmax"), Some(OpClass::Nonlinear));
    assert_eq!(
        OpClass::of_builtin("floordiv"),
        Some(OpClass::FloorDivision)
    );
    assert_eq!(
        spmd_check::dialects::elaborate::single_op_class("sin(x) + x"),
        None
    );
    // And the oracle's classification of JAX on sin: R -> P is unsound,
    // and JAX keeps R, which agrees.
    let sin = derived("sin");
    assert_eq!(
        class_of(&sin, &jax::SYSTEM, OpClass::Nonlinear, &[R], P),
        Class::Agrees
    );
}
