//! JAX sharding in types, seed 000 (`000_6bb2a9a5771a72de.txt`), as the
//! real JAX 0.10.2 behaves (`shard_map`, `check_vma=True`, recorded in
//! `tests/fixtures/jax_typing.json`). Names: `Invariant` (no annotation),
//! `Varying` (axis in `vma`), `Unreduced` (`spec.unreduced`), `Reduced`
//! (`spec.reduced`).
//!
//! The typing function speaks for JAX as it actually behaves. Every recorded
//! typing case (op neg, abs, `2.0 * a`, add, sub, mul, div, sum, dot on one
//! axis) is reproduced exactly: accepted or refused, the output state, and
//! the casts JAX inserts (`pvary`, `reduced_vary_cast`). `spmd-check
//! fidelity` computes that comparison. Where seed 000 says otherwise, the
//! rule below cites both the seed sentence and the recorded case; both are
//! reported (SPEC.md §15.2, §16.3). Ops with no recorded case keep the
//! seed's rule, or `Unknown` where the seed is silent.
//!
//! Per mesh axis:
//! 1. `vma`: if some operand is Varying, every other operand is cast to
//!    Varying first: Invariant by `pvary`, Reduced by `reduced_vary_cast`,
//!    and Unreduced is refused by the inserted `pvary` (`add_V_U`). The
//!    output is Varying.
//! 2. Otherwise an Unreduced operand follows the op's unreduced rule.
//! 3. Otherwise a Reduced operand follows the op's reduced rule.
//! 4. Otherwise every operand is Invariant and so is the output.
//!
//! A Python scalar operand is a weakly typed Invariant value (`mul_const_R`
//! is refused with the I + R error; `mul_const_V` pvaries the constant).

use crate::{columns, malformed, Cast, OpClass, Operand, Outcome, System};
use spmd_interp::Collective;
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "jax",
    dialect: Dialect::Jax,
    seeds: "000",
    typing,
};

/// The casts JAX inserts, and the no-op casts and collectives of seed 000's
/// "State Transition Primitives" (the catalogue holds their meanings).
pub const PVARY: &str = "pvary";
pub const REDUCED_VARY_CAST: &str = "reduced_vary_cast";
pub const CASTS: &[&str] = &[
    "pvary",
    "preduced",
    "vary_unreduced_cast",
    "reduced_vary_cast",
];

/// The version of JAX this function follows where it departs from seed 000.
pub const REAL_VERSION: &str = "jax 0.10.2";

/// How an op treats `reduced` on an axis where no operand is Varying.
enum ReducedRule {
    /// `unop_reduced_rule`: the output's `reduced` is the input's. Seed 000
    /// and real JAX agree (`neg_R`, `abs_R`, `sum_R` stay Reduced).
    Unary,
    /// Element-wise n-ary ops. Seed 000: "n-ary ops: the non-empty `reduced`
    /// sets must be equal; inputs without `reduced` are skipped" (so I + R
    /// -> R). Real JAX refuses an Invariant operand beside a Reduced one:
    /// `ShardingTypeError: Inputs cannot be replicated on the same axes that
    /// another input is reduced on` (`add_I_R`, `add_R_I`, `sub_I_R`,
    /// `mul_I_R`, `div_R_I`, `mul_const_R`); all Reduced stays Reduced
    /// (`add_R_R`, `mul_R_R`, `div_R_R`).
    Nary,
    /// `_dot_general_reduced_rule`: the output gets no `reduced`. Seed 000
    /// and real JAX agree: I·R, R·I and R·R give Invariant (`dot_I_R`,
    /// `dot_R_I`, `dot_R_R`).
    DotGeneral,
    /// No `reduced_rule` (seed 000: reduce_max): NotImplementedError if any
    /// input is Reduced. No recorded case.
    None,
    /// The seed's table does not list the op, and no case is recorded.
    Unlisted,
}

fn reduced_rule(op: OpClass, arity: usize) -> ReducedRule {
    use OpClass::*;
    match op {
        // Unary ops (sin, exp, neg, ...), convert_element_type, transpose,
        // squeeze, dynamic_slice, reduce_sum: "Propagates from input".
        Neg | Nonlinear | NarrowingCast | View | Sum if arity == 1 => ReducedRule::Unary,
        // Binary ops (add, mul, sub, div), concatenate,
        // dynamic_update_slice: "All inputs must match, then propagates".
        // A constant factor is an Invariant operand (`mul_const_R`).
        Add | Sub | Mul | Division | Concat | Nonlinear | NarrowingCast | View | Sum | Neg
        | ScalarMul => ReducedRule::Nary,
        Matmul | Einsum => ReducedRule::DotGeneral,
        // reduce_max has no reduced_rule in the seed's list.
        Max => ReducedRule::None,
        // jnp.mean is not in the list (reduce_sum is).
        Mean => ReducedRule::Unlisted,
    }
}

/// How an op treats an Unreduced operand on an axis where no operand is
/// Varying. Seed 000 states no rule for local ops on Unreduced inputs; these
/// are real JAX 0.10.2's, one per primitive, from the recorded cases.
enum UnreducedRule {
    /// add: every operand Unreduced gives Unreduced (`add_U_U`); Unreduced
    /// beside anything else is refused (`add_U_I`, `add_U_R`: "lhs is
    /// unreduced while rhs is not").
    Add,
    /// mul: one Unreduced factor beside Reduced ones gives Unreduced
    /// (`mul_U_R`, `mul_R_U`); two Unreduced factors are refused ("mul is
    /// bilinear", `mul_U_U`); an Invariant factor is refused ("should be
    /// reduced along the same axes", `mul_U_I`, `mul_const_U`).
    Mul,
    /// dot_general: any Unreduced operand is refused (`dot_U_R`, `dot_U_U`,
    /// `dot_I_U`), even where mul accepts it.
    DotGeneral,
    /// reduce_sum: Unreduced stays Unreduced (`sum_U`).
    Keep,
    /// neg, sub, div, abs: `NotImplementedError: unreduced rule for <op> is
    /// not implemented` (`neg_U`, `sub_U_U`, `div_U_R`, `abs_U`).
    NotImplemented,
    /// No recorded case and no seed rule.
    Unknown,
}

fn unreduced_rule(op: OpClass) -> UnreducedRule {
    use OpClass::*;
    match op {
        Add => UnreducedRule::Add,
        Mul | ScalarMul => UnreducedRule::Mul,
        Matmul | Einsum => UnreducedRule::DotGeneral,
        Sum => UnreducedRule::Keep,
        Neg | Sub | Division | Nonlinear => UnreducedRule::NotImplemented,
        Mean | Max | View | Concat | NarrowingCast => UnreducedRule::Unknown,
    }
}

/// JAX's typing of a local op on plain tensors. A constant factor
/// (`ScalarMul`) is typed as JAX types `2.0 * a`: a product with an
/// Invariant scalar (`mul_const_*`). A cast JAX puts on the constant itself
/// (`pvary` in `mul_const_V`) is left out here: the constant is no input of
/// the typing.
pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    if op == OpClass::ScalarMul && inputs.len() == 1 {
        let mut operands = vec![Operand::Scalar];
        operands.extend(Operand::tensors(inputs));
        return match typing_operands(OpClass::Mul, &operands) {
            Outcome::Infers { output, casts } => Outcome::Infers {
                output,
                casts: casts
                    .into_iter()
                    .filter(|c| c.input > 0)
                    .map(|c| Cast {
                        input: c.input - 1,
                        ..c
                    })
                    .collect(),
            },
            o => o,
        };
    }
    typing_operands(op, &Operand::tensors(inputs))
}

/// JAX's typing of a local op whose operands may be Python scalars (each an
/// Invariant value; `no_grad` means nothing to JAX's typing). Cast inputs
/// index `operands`.
pub fn typing_operands(op: OpClass, operands: &[Operand]) -> Outcome {
    let axes = operands.iter().find_map(|o| match o {
        Operand::Tensor { types, .. } => Some(types.len()),
        Operand::Scalar => None,
    });
    let Some(axes) = axes else {
        return malformed();
    };
    let inputs: Vec<Vec<State>> = operands
        .iter()
        .map(|o| match o {
            Operand::Tensor { types, .. } => types.clone(),
            Operand::Scalar => vec![State::Invariant; axes],
        })
        .collect();
    let Some(cols) = columns(&inputs) else {
        return malformed();
    };
    let mut output = Vec::new();
    let mut casts = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        match axis(op, a, col, &mut casts) {
            Ok(s) => output.push(s),
            Err(o) => return o,
        }
    }
    Outcome::Infers { output, casts }
}

/// One mesh axis: the output state, or the outcome that ends the typing.
fn axis(op: OpClass, a: usize, col: &[State], casts: &mut Vec<Cast>) -> Result<State, Outcome> {
    use State::*;
    let any = |s: State| col.contains(&s);
    let err = |e: String| Err(Outcome::Error(e));
    if any(Varying) {
        // Seed 000 names `pvary` (Invariant -> Varying, "mark replicated as
        // varying") but does not spell out its insertion, and says nothing
        // of Reduced meeting Varying. Real JAX inserts pvary on an Invariant
        // operand (`add_I_V`, `dot_V_I`) and reduced_vary_cast on a Reduced
        // one (`add_V_R`, `mul_R_V`, `dot_R_V`); an Unreduced one makes the
        // inserted pvary fail (`add_V_U`, `dot_U_V`).
        if any(Partial) {
            return err(format!(
                "ValueError: pvary cannot accept args which are unreduced (mesh axis {a})"
            ));
        }
        for (i, &s) in col.iter().enumerate() {
            let name = match s {
                Invariant => PVARY,
                Reduced => REDUCED_VARY_CAST,
                _ => continue,
            };
            casts.push(Cast {
                input: i,
                axis: a,
                name,
                from: s,
                to: Varying,
            });
        }
        return Ok(Varying);
    }
    if any(Partial) {
        // Seed 000: no rule for local ops on Unreduced. Real JAX 0.10.2 has
        // one per primitive (UnreducedRule).
        let all_u = col.iter().all(|&s| s == Partial);
        let units = col.iter().filter(|&&s| s == Partial).count();
        return match unreduced_rule(op) {
            UnreducedRule::Keep if col.len() == 1 => Ok(Partial),
            UnreducedRule::Add if all_u => Ok(Partial),
            UnreducedRule::Add => err(format!(
                "ShardingTypeError: an operand is unreduced on mesh axis {a} while another is not; `add` does not allow this"
            )),
            UnreducedRule::Mul if units > 1 => err(format!(
                "ShardingTypeError: operands of `mul` cannot both be unreduced on mesh axis {a} since mul is bilinear"
            )),
            UnreducedRule::Mul if any(Invariant) => err(format!(
                "ShardingTypeError: a factor of `mul` should be reduced along mesh axis {a}, where another is unreduced"
            )),
            UnreducedRule::Mul => Ok(Partial),
            UnreducedRule::DotGeneral => err(format!(
                "ShardingTypeError: lhs or rhs passed to dot_general cannot be unreduced (mesh axis {a})"
            )),
            UnreducedRule::NotImplemented => err(format!(
                "NotImplementedError: unreduced rule for {} is not implemented",
                op.name()
            )),
            UnreducedRule::Keep | UnreducedRule::Unknown => Err(Outcome::Unknown(format!(
                "neither seed 000 nor a recorded {REAL_VERSION} case gives {} a rule for Unreduced inputs",
                op.name()
            ))),
        };
    }
    if any(Reduced) {
        return match reduced_rule(op, col.len()) {
            ReducedRule::Unary => Ok(Reduced),
            ReducedRule::Nary if any(Invariant) => err(format!(
                "ShardingTypeError: Inputs cannot be replicated on the same axes that another input is reduced on (mesh axis {a})"
            )),
            ReducedRule::Nary => Ok(Reduced),
            ReducedRule::DotGeneral => Ok(Invariant),
            ReducedRule::None => err(format!(
                "NotImplementedError: reduced rule for {} not implemented",
                op.name()
            )),
            ReducedRule::Unlisted => Err(Outcome::Unknown(format!(
                "seed 000 does not list {} among the ops with a reduced rule",
                op.name()
            ))),
        };
    }
    Ok(Invariant)
}

/// JAX's primitive name for a catalogue collective at its states (seed 000,
/// and jax 0.10.2's pmean, ppermute and all_to_all), where JAX has one:
/// how `transposes --dialect jax` spells a backward.
pub fn primitive_name(c: &Collective) -> Option<&'static str> {
    use spmd_interp::Kind;
    use State::*;
    Some(match (&c.kind, c.src, c.dst) {
        (Kind::Reinterpret, Invariant, Varying) => "pvary",
        (Kind::Reinterpret, Invariant, Reduced) => "preduced",
        (Kind::Reinterpret, Varying, Partial) => "vary_unreduced_cast",
        (Kind::Reinterpret, Reduced, Varying) => "reduced_vary_cast",
        (Kind::AllGather { .. }, Varying, Reduced) => "all_gather_reduced",
        (Kind::AllGather { .. }, Varying, Invariant) => "all_gather_invariant",
        (Kind::AllGather { .. }, Varying, Varying) => "all_gather",
        (Kind::AllReduce, Varying, Invariant) => "psum_invariant",
        (Kind::AllReduce, Partial, Invariant) => "unreduced_psum",
        (Kind::ReduceScatter { .. }, Varying, Varying) => "psum_scatter",
        (Kind::ReduceScatter { .. }, Partial, Varying) => "unreduced_psum_scatter",
        (Kind::PMean, _, _) => "pmean",
        (Kind::PPermute { .. }, _, _) => "ppermute",
        (Kind::AllToAll { .. }, _, _) => "all_to_all",
        _ => return None,
    })
}
