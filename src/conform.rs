//! The seeds' local-op typing rules as data, and the conformance run
//! (SPEC.md §9.2, §9.3).
//!
//! Each row states what a seed system says of one typing (`claim`), and what
//! this suite expects the oracle to derive (`expect`: `None` for sound, or the
//! property that fails). Where claim and oracle disagree, that is a finding
//! about the seed system; `expect` records the findings we know of so the test
//! suite notices if the oracle's answer ever changes. Every row the seed
//! allows carries a negative twin: a deliberately wrong variant the oracle
//! must reject for the named property.

use crate::run::{check_op, UsageError};
use crate::types::{meshes_named, parse_types};
use spmd_generators::Scope;
use spmd_interp::{parse, TypedOp};
use spmd_oracle::{Property, Verdict};
use spmd_semantics::Dialect;

/// What a seed system says of a typing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A rule of the seed admits it.
    Allowed,
    /// The seed forbids it explicitly.
    Forbidden,
    /// No rule of the seed admits it (forbidden by omission).
    Unlisted,
}

/// A deliberately wrong variant of an allowed rule.
#[derive(Clone, Copy, Debug)]
pub struct Twin {
    pub op: &'static str,
    pub inputs: &'static [&'static str],
    pub output: &'static str,
    pub fails: Property,
}

/// One typing rule of a seed system.
#[derive(Clone, Copy, Debug)]
pub struct SeedRule {
    pub id: &'static str,
    /// `spmd_types`, `jax`, `dtensor`, `ltensor` or `nabla`.
    pub system: &'static str,
    /// The dialect its state names are written in.
    pub dialect: Dialect,
    /// The seed's rule, briefly.
    pub rule: &'static str,
    pub op: &'static str,
    pub inputs: &'static [&'static str],
    pub output: &'static str,
    pub claim: Claim,
    pub expect: Option<Property>,
    pub twin: Option<Twin>,
}

use Claim::*;
use Property::*;

const fn twin(
    op: &'static str,
    inputs: &'static [&'static str],
    output: &'static str,
    fails: Property,
) -> Option<Twin> {
    Some(Twin {
        op,
        inputs,
        output,
        fails,
    })
}

/// The local-op typing rules of the seeds. Seed 003 (spmd_types) is covered
/// rule by rule, with each forbidden combination; the others contribute the
/// propagation rules they state for local ops.
pub const SEED_RULES: &[SeedRule] = &[
    // ---- seed 003: PyTorch local SPMD types (R is the canonical Reduced) ----
    SeedRule {
        id: "st_rep_mul",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Replicate..) -> Replicate",
        op: "x * y",
        inputs: &["R", "R"],
        output: "R",
        claim: Allowed,
        expect: None,
        twin: twin("x * y", &["R", "R"], "I", B3),
    },
    SeedRule {
        id: "st_rep_nonlinear",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Replicate..) -> Replicate",
        op: "x * x + 1",
        inputs: &["R"],
        output: "R",
        claim: Allowed,
        expect: None,
        twin: twin("x * x + 1", &["R"], "P", F3),
    },
    SeedRule {
        id: "st_rep_div",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Replicate..) -> Replicate",
        op: "x / (y + 1)",
        inputs: &["R", "R"],
        output: "R",
        claim: Allowed,
        expect: None,
        twin: twin("x / (y + 1)", &["I", "R"], "R", B1),
    },
    SeedRule {
        id: "st_inv_mul",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Invariant..) -> Invariant",
        op: "x * y",
        inputs: &["I", "I"],
        output: "I",
        claim: Allowed,
        expect: None,
        twin: twin("x * y", &["I", "I"], "R", B1),
    },
    SeedRule {
        id: "st_var_mul",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Varying..) -> Varying",
        op: "x * y",
        inputs: &["V", "V"],
        output: "V",
        claim: Allowed,
        expect: None,
        twin: twin("x * y", &["V", "V"], "P", F3),
    },
    SeedRule {
        id: "st_var_matmul",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Varying..) -> Varying",
        op: "matmul(x, y)",
        inputs: &["V", "V"],
        output: "V",
        claim: Allowed,
        expect: None,
        twin: twin("matmul(x, y)", &["V", "V"], "R", F1),
    },
    SeedRule {
        id: "st_lin_scale",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "linear_op(Partial) -> Partial",
        op: "3 * x",
        inputs: &["P"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("3 * x + 1", &["P"], "P", F3),
    },
    SeedRule {
        id: "st_lin_sum",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "linear_op(Partial) -> Partial",
        op: "sum(x, 0)",
        inputs: &["P"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("sum(x, 0) * sum(x, 0)", &["P"], "P", F2),
    },
    SeedRule {
        id: "st_lin_transpose",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "linear_op(Partial) -> Partial",
        op: "transpose(x)",
        inputs: &["P"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("transpose(x)", &["P"], "R", F1),
    },
    SeedRule {
        id: "st_rep_var",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Replicate, Varying) -> Varying",
        op: "x * y",
        inputs: &["R", "V"],
        output: "V",
        claim: Allowed,
        expect: None,
        twin: twin("x * y", &["I", "V"], "V", B1),
    },
    SeedRule {
        id: "st_rep_var_matmul",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "op(Replicate, Varying) -> Varying",
        op: "matmul(x, y)",
        inputs: &["R", "V"],
        output: "V",
        claim: Allowed,
        expect: None,
        twin: twin("matmul(x, y)", &["R", "V"], "R", F1),
    },
    SeedRule {
        id: "st_pp_add",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "Partial + Partial -> Partial",
        op: "x + y",
        inputs: &["P", "P"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("x * y", &["P", "P"], "P", F2),
    },
    SeedRule {
        id: "st_multilinear_concat",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "multilinear n-ary ops accept several Partial arguments",
        op: "concat(x, y, 0)",
        inputs: &["P", "P"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("concat(x, y, 0)", &["P", "R"], "P", F3),
    },
    // The same sentence read literally: multiplication is multilinear too.
    SeedRule {
        id: "st_multilinear_mul",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "multilinear n-ary ops accept several Partial arguments",
        op: "x * y",
        inputs: &["P", "P"],
        output: "P",
        claim: Allowed,
        expect: Some(F2),
        twin: None,
    },
    SeedRule {
        id: "st_pp_mul",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "Partial * Partial is forbidden",
        op: "x * y",
        inputs: &["P", "P"],
        output: "P",
        claim: Forbidden,
        expect: Some(F2),
        twin: None,
    },
    SeedRule {
        id: "st_inv_var",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "Invariant does not mix with other types",
        op: "x * y",
        inputs: &["I", "V"],
        output: "V",
        claim: Forbidden,
        expect: Some(B1),
        twin: None,
    },
    SeedRule {
        id: "st_inv_rep",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "Invariant does not mix with other types",
        op: "x + y",
        inputs: &["I", "R"],
        output: "R",
        claim: Forbidden,
        expect: Some(B1),
        twin: None,
    },
    SeedRule {
        id: "st_inv_part",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "Invariant does not mix with other types",
        op: "x + y",
        inputs: &["I", "P"],
        output: "P",
        claim: Forbidden,
        expect: Some(F3),
        twin: None,
    },
    SeedRule {
        id: "st_nonlinear_p",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "only linear ops keep Partial",
        op: "x * x",
        inputs: &["P"],
        output: "P",
        claim: Forbidden,
        expect: Some(F2),
        twin: None,
    },
    SeedRule {
        id: "st_affine_p",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "only linear ops keep Partial",
        op: "2 * x + 1",
        inputs: &["P"],
        output: "P",
        claim: Forbidden,
        expect: Some(F3),
        twin: None,
    },
    SeedRule {
        id: "st_rep_plus_part",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "(no rule admits R + P)",
        op: "x + y",
        inputs: &["R", "P"],
        output: "P",
        claim: Unlisted,
        expect: Some(F3),
        twin: None,
    },
    SeedRule {
        id: "st_gap_rep_times_part",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "(no rule admits R * P -> P)",
        op: "x * y",
        inputs: &["R", "P"],
        output: "P",
        claim: Unlisted,
        expect: None,
        twin: None,
    },
    SeedRule {
        id: "st_gap_rep_to_var",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "(no rule admits op(R..) -> V)",
        op: "x * y",
        inputs: &["R", "R"],
        output: "V",
        claim: Unlisted,
        expect: None,
        twin: None,
    },
    // Two mesh axes: a state per axis.
    SeedRule {
        id: "st_2d_add",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "per axis: op(V..) -> V and P + P -> P",
        op: "x + y",
        inputs: &["{dp: V, tp: P}", "{dp: V, tp: P}"],
        output: "{dp: V, tp: P}",
        claim: Allowed,
        expect: None,
        twin: twin(
            "x * y",
            &["{dp: V, tp: P}", "{dp: V, tp: P}"],
            "{dp: V, tp: P}",
            F2,
        ),
    },
    SeedRule {
        id: "st_2d_mul_rp",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "per axis: op(V..) -> V and linear_op(Partial) -> Partial",
        op: "x * y",
        inputs: &["{dp: V, tp: P}", "{dp: V, tp: R}"],
        output: "{dp: V, tp: P}",
        claim: Allowed,
        expect: None,
        twin: twin(
            "x * y",
            &["{dp: V, tp: P}", "{dp: V, tp: I}"],
            "{dp: V, tp: P}",
            B2,
        ),
    },
    SeedRule {
        id: "st_2d_rep_var",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "per axis: op(Replicate, Varying) -> Varying",
        op: "x * y",
        inputs: &["{dp: R, tp: V}", "{dp: V, tp: V}"],
        output: "{dp: V, tp: V}",
        claim: Allowed,
        expect: None,
        twin: twin(
            "x * y",
            &["{dp: I, tp: V}", "{dp: V, tp: V}"],
            "{dp: V, tp: V}",
            B1,
        ),
    },
    SeedRule {
        id: "st_2d_inv",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "per axis: op(Invariant..) -> Invariant",
        op: "x * y",
        inputs: &["{dp: I, tp: I}", "{dp: I, tp: I}"],
        output: "{dp: I, tp: I}",
        claim: Allowed,
        expect: None,
        twin: twin(
            "x * y",
            &["{dp: I, tp: I}", "{dp: I, tp: I}"],
            "{dp: I, tp: R}",
            B1,
        ),
    },
    // ---- seed 000: JAX reduced propagation for local ops ----
    SeedRule {
        id: "jax_unary_copies_reduced",
        system: "jax",
        dialect: Dialect::Jax,
        rule: "unary ops copy `reduced` from the input",
        op: "x * x * x",
        inputs: &["Reduced"],
        output: "Reduced",
        claim: Allowed,
        expect: None,
        twin: twin("x * x * x", &["Reduced"], "Invariant", B3),
    },
    SeedRule {
        id: "jax_nary_same_reduced",
        system: "jax",
        dialect: Dialect::Jax,
        rule: "n-ary ops: inputs with equal `reduced` propagate it",
        op: "x * y",
        inputs: &["Reduced", "Reduced"],
        output: "Reduced",
        claim: Allowed,
        expect: None,
        twin: twin("x * y", &["Reduced", "Reduced"], "Unreduced", F3),
    },
    // nary_reduced_rule collects only non-empty `reduced` sets, so an input
    // with none does not count as a mismatch.
    SeedRule {
        id: "jax_nary_skips_empty",
        system: "jax",
        dialect: Dialect::Jax,
        rule: "n-ary ops: inputs without `reduced` are skipped in the match",
        op: "x + y",
        inputs: &["Reduced", "Invariant"],
        output: "Reduced",
        claim: Allowed,
        expect: Some(B1),
        twin: None,
    },
    SeedRule {
        id: "jax_nary_mismatch",
        system: "jax",
        dialect: Dialect::Jax,
        rule: "n-ary ops: different `reduced` axes are an error",
        op: "x + y",
        inputs: &[
            "{dp: Reduced, tp: Invariant}",
            "{dp: Invariant, tp: Reduced}",
        ],
        output: "{dp: Reduced, tp: Reduced}",
        claim: Forbidden,
        expect: Some(B1),
        twin: None,
    },
    SeedRule {
        id: "jax_dot_no_propagation",
        system: "jax",
        dialect: Dialect::Jax,
        rule: "dot_general does not propagate `reduced`",
        op: "matmul(x, y)",
        inputs: &["Reduced", "Reduced"],
        output: "Invariant",
        claim: Allowed,
        expect: Some(B3),
        twin: None,
    },
    // ---- seed 001: DTensor Reduced placement (Replicate() is Invariant) ----
    SeedRule {
        id: "dtensor_uniform_any_reduced",
        system: "dtensor",
        dialect: Dialect::Dtensor,
        rule: "uniform: any Reduced() input makes the output Reduced()",
        op: "x * y",
        inputs: &["Replicate()", "Reduced()"],
        output: "Reduced()",
        claim: Allowed,
        expect: Some(B1),
        twin: None,
    },
    SeedRule {
        id: "dtensor_both_reduced_matmul",
        system: "dtensor",
        dialect: Dialect::Dtensor,
        rule: "w1 @ w2 with both Reduced() is Reduced()",
        op: "matmul(x, y)",
        inputs: &["Reduced()", "Reduced()"],
        output: "Reduced()",
        claim: Allowed,
        expect: None,
        twin: twin(
            "matmul(x, y)",
            &["Reduced()", "Reduced()"],
            "Replicate()",
            B3,
        ),
    },
    SeedRule {
        id: "dtensor_fsdp_inputs_disagree",
        system: "dtensor",
        dialect: Dialect::Dtensor,
        rule: "x @ w: inputs disagree, so y is not Reduced()",
        op: "matmul(x, y)",
        inputs: &["Replicate()", "Reduced()"],
        output: "Replicate()",
        claim: Allowed,
        expect: Some(B3),
        twin: None,
    },
    // ---- seed 001: LTensor reduced tracking (canonical letters) ----
    SeedRule {
        id: "ltensor_union_varying",
        system: "ltensor",
        dialect: Dialect::Canonical,
        rule: "variance: union (any varying input makes the output varying)",
        op: "x * y",
        inputs: &["V", "I"],
        output: "V",
        claim: Allowed,
        expect: Some(B1),
        twin: None,
    },
    SeedRule {
        id: "ltensor_intersection_reduced",
        system: "ltensor",
        dialect: Dialect::Canonical,
        rule: "reduced: intersection (all inputs reduced, else not)",
        op: "x + y",
        inputs: &["R", "I"],
        output: "I",
        claim: Allowed,
        expect: Some(B3),
        twin: None,
    },
    SeedRule {
        id: "ltensor_all_reduced",
        system: "ltensor",
        dialect: Dialect::Canonical,
        rule: "reduced: intersection (all inputs reduced, else not)",
        op: "x + y",
        inputs: &["R", "R"],
        output: "R",
        claim: Allowed,
        expect: None,
        twin: twin("x + y", &["R", "R"], "I", B3),
    },
    // ---- seed 003, global SPMD: shard propagation, map(f, in_spec(x)) ==
    // out_spec(f(x)), read with the global semantics of SPEC.md §13 ----
    SeedRule {
        id: "st_global_einsum_batch",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "einsum: an output label sharded on an axis is sharded the same in every operand using it",
        op: "einsum(\"ij,ij->i\", x, y)",
        inputs: &["S(0)", "S(0)"],
        output: "S(0)",
        claim: Allowed,
        expect: None,
        // Sharding the contracted label instead, output claimed sharded.
        twin: twin("einsum(\"ij,ij->i\", x, y)", &["S(1)", "S(1)"], "S(0)", F3),
    },
    SeedRule {
        id: "st_global_matmul_rows",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "matmul: rows of x sharded, w replicated (R): rows of y sharded",
        op: "matmul(x, y)",
        inputs: &["S(0)", "R"],
        output: "S(0)",
        claim: Allowed,
        expect: None,
        twin: twin("matmul(x, y)", &["S(0)", "R"], "S(1)", F3),
    },
    SeedRule {
        id: "st_global_contracted_sharded",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "einsum rule 1: no contracted dimension is sharded",
        op: "matmul(x, y)",
        inputs: &["S(1)", "S(0)"],
        output: "S(0)",
        claim: Forbidden,
        expect: Some(F3),
        twin: None,
    },
    SeedRule {
        id: "st_global_out_partial",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "out_partial_axes: a sharded contraction is local, then Partial",
        op: "matmul(x, y)",
        inputs: &["S(1)", "S(0)"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("matmul(x, y)", &["S(1)", "S(0)"], "R", F1),
    },
    SeedRule {
        id: "st_global_sum_sharded_dim",
        system: "spmd_types",
        dialect: Dialect::SpmdTypes,
        rule: "out_partial_axes: sum over a sharded dim is local, then Partial",
        op: "sum(x, 0)",
        inputs: &["S(0)"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("sum(x, 0)", &["S(0)"], "S(0)", F3),
    },
    // ---- seed 002: Nabla's factor templates, read globally (SPEC.md §13):
    // a sharded contracting dimension is reduced locally and left Partial
    // for an inserted AllReduce ----
    SeedRule {
        id: "nabla_contracting_dim_allreduce",
        system: "nabla",
        dialect: Dialect::SpmdTypes,
        rule: "matmul template: sharded K is contracted locally, AllReduce inserted",
        op: "matmul(x, y)",
        inputs: &["S(1)", "S(0)"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("matmul(x, y)", &["S(1)", "S(0)"], "I", F1),
    },
    SeedRule {
        id: "nabla_reduce_sum_sharded",
        system: "nabla",
        dialect: Dialect::SpmdTypes,
        rule: "reduce template: a sharded reduced dim is reduced locally, AllReduce inserted",
        op: "sum(x, 0)",
        inputs: &["S(0)"],
        output: "P",
        claim: Allowed,
        expect: None,
        twin: twin("mean(x, 0)", &["S(0)"], "P", F3),
    },
    SeedRule {
        id: "nabla_reduce_mean_sharded",
        system: "nabla",
        dialect: Dialect::SpmdTypes,
        rule: "reduce template applied to mean: local means, AllReduce (sum) inserted",
        op: "mean(x, 0)",
        inputs: &["S(0)"],
        output: "P",
        claim: Unlisted,
        expect: Some(F3),
        twin: None,
    },
    SeedRule {
        id: "nabla_reduce_max_sharded",
        system: "nabla",
        dialect: Dialect::SpmdTypes,
        rule: "reduce template applied to max: local maxima, AllReduce (sum) inserted",
        op: "max(x, 0)",
        inputs: &["S(0)"],
        output: "P",
        claim: Unlisted,
        expect: Some(F3),
        twin: None,
    },
    // ---- seed 004: Nabla partial propagation ----
    SeedRule {
        id: "nabla_slice_defers",
        system: "nabla",
        dialect: Dialect::Nabla,
        rule: "SliceTensorOp defers the pending sum",
        op: "slice(x, 0, 0, 1)",
        inputs: &["partial"],
        output: "partial",
        claim: Allowed,
        expect: None,
        twin: twin("cast(slice(x, 0, 0, 1), 1)", &["partial"], "partial", F2),
    },
    SeedRule {
        id: "nabla_gather_defers",
        system: "nabla",
        dialect: Dialect::Nabla,
        rule: "GatherOp defers the pending sum",
        op: "take(x, 0, [0, 0])",
        inputs: &["partial"],
        output: "partial",
        claim: Allowed,
        expect: None,
        twin: twin("take(x, 0, [0, 0]) * x", &["partial"], "partial", F2),
    },
    SeedRule {
        id: "nabla_concat_all_partial",
        system: "nabla",
        dialect: Dialect::Nabla,
        rule: "concatenate defers when every input is partial",
        op: "concat(x, y, 0)",
        inputs: &["partial", "partial"],
        output: "partial",
        claim: Allowed,
        expect: None,
        twin: twin("concat(x, y, 0)", &["partial", "replicated"], "partial", F3),
    },
    SeedRule {
        id: "nabla_concat_some_partial",
        system: "nabla",
        dialect: Dialect::Nabla,
        rule: "ConcatenateOp must not defer when only some inputs are partial",
        op: "concat(x, y, 0)",
        inputs: &["partial", "replicated"],
        output: "partial",
        claim: Forbidden,
        expect: Some(F3),
        twin: None,
    },
    SeedRule {
        id: "nabla_narrowing_cast",
        system: "nabla",
        dialect: Dialect::Nabla,
        rule: "CastOp must not defer narrowing casts",
        op: "cast(x, 1)",
        inputs: &["partial"],
        output: "partial",
        claim: Forbidden,
        expect: Some(F2),
        twin: None,
    },
    SeedRule {
        id: "nabla_nonlinear",
        system: "nabla",
        dialect: Dialect::Nabla,
        rule: "nonlinear ops force the reduction first",
        op: "relu(x)",
        inputs: &["partial"],
        output: "partial",
        claim: Forbidden,
        expect: Some(F2),
        twin: None,
    },
];

/// The systems of the table, for `--dialect`.
pub const SYSTEMS: &[&str] = &["spmd_types", "jax", "dtensor", "ltensor", "nabla"];

/// Build the typed op of a row's parts, with the meshes it is checked on.
pub fn typed(
    dialect: Dialect,
    op: &str,
    inputs: &[&str],
    output: &str,
    scope: &Scope,
) -> Result<(TypedOp, Vec<spmd_semantics::Mesh>), UsageError> {
    let f = parse(op).map_err(|e| UsageError(format!("expression `{op}`: {e}")))?;
    if f.arity() != inputs.len() {
        return Err(UsageError(format!(
            "`{op}` takes {} inputs, {} types given",
            f.arity(),
            inputs.len()
        )));
    }
    let mut all: Vec<&str> = inputs.to_vec();
    all.push(output);
    let (axes, mut types) = parse_types(dialect, &all)?;
    let out = types.pop().expect("output type");
    let meshes = meshes_named(&scope.meshes, &axes);
    if meshes.is_empty() {
        return Err(UsageError(format!("no mesh in scope has axes {axes:?}")));
    }
    Ok((TypedOp::local(f, types, out), meshes))
}

/// The result of one row.
pub struct RowResult {
    pub rule: &'static SeedRule,
    pub verdict: Verdict,
    /// The twin's verdict, when the row has one.
    pub twin: Option<Verdict>,
}

impl RowResult {
    /// The property the oracle found violated, if any.
    pub fn derived(&self) -> Option<Property> {
        self.verdict.violation().map(|v| v.property)
    }
    /// Whether the seed's claim and the oracle agree.
    pub fn agrees(&self) -> bool {
        match self.rule.claim {
            Claim::Allowed => self.verdict.is_sound(),
            Claim::Forbidden | Claim::Unlisted => !self.verdict.is_sound(),
        }
    }
    /// Whether the twin was rejected for its named property.
    pub fn twin_rejected(&self) -> Option<bool> {
        let t = self.rule.twin?;
        let v = self.twin.as_ref()?;
        Some(v.violation().map(|x| x.property) == Some(t.fails))
    }
    /// A finding about the seed system, when claim and oracle disagree.
    pub fn finding(&self) -> Option<String> {
        if self.agrees() {
            return None;
        }
        Some(match self.rule.claim {
            Claim::Allowed => format!(
                "published rule is unsound: {}",
                self.verdict
                    .violation()
                    .map(|v| v.one_line())
                    .unwrap_or_else(|| self.verdict.name().into())
            ),
            Claim::Forbidden => {
                "forbidden, yet the oracle finds it sound (permissiveness gap)".into()
            }
            Claim::Unlisted => {
                "no rule admits it, yet the oracle finds it sound (permissiveness gap)".into()
            }
        })
    }
}

/// Check one row and its twin.
pub fn check_row(
    r: &'static SeedRule,
    scope: &Scope,
    progress: &dyn Fn(u64),
) -> Result<RowResult, UsageError> {
    let (op, meshes) = typed(r.dialect, r.op, r.inputs, r.output, scope)?;
    let verdict = check_op(&op, scope, &meshes, progress);
    let twin = match r.twin {
        Some(t) => {
            let (op, meshes) = typed(r.dialect, t.op, t.inputs, t.output, scope)?;
            Some(check_op(&op, scope, &meshes, progress))
        }
        None => None,
    };
    Ok(RowResult {
        rule: r,
        verdict,
        twin,
    })
}

/// The rows of one system, or all.
pub fn rows(system: Option<&str>) -> Result<Vec<&'static SeedRule>, UsageError> {
    if let Some(s) = system {
        if !SYSTEMS.contains(&s) {
            return Err(UsageError(format!(
                "unknown dialect `{s}` (expected one of: {})",
                SYSTEMS.join(", ")
            )));
        }
    }
    Ok(SEED_RULES
        .iter()
        .filter(|r| system.is_none_or(|s| r.system == s))
        .collect())
}
