//! JAX sharding in types, seed 000 (`000_6bb2a9a5771a72de.txt`). Names:
//! `Invariant` (no annotation), `Varying` (axis in `vma`), `Unreduced`
//! (`spec.unreduced`), `Reduced` (`spec.reduced`).
//!
//! A type here is three sets of axes: `vma`, `reduced`, `unreduced`. The
//! seed's propagation rules for local ops are about `reduced` only
//! ("Propagation Through Operations"); for `vma` it names the cast `pvary`
//! (Invariant → Varying, "mark replicated as varying"). This function makes
//! an op's `vma` the union of its inputs' and inserts `pvary` on an input
//! that is Invariant on such an axis. The seed describes `vma` and `pvary`
//! but does not spell out that insertion: it is JAX's behaviour as the issue
//! states it, and the one reading of this file that is not a seed sentence.
//! On Unreduced inputs the seed says nothing of local ops: `Unknown`.

use crate::{columns, malformed, Cast, OpClass, Outcome, System};
use spmd_semantics::{Dialect, State};
use std::collections::BTreeSet;

pub const SYSTEM: System = System {
    name: "jax",
    dialect: Dialect::Jax,
    seeds: "000",
    typing,
};

/// The cast JAX inserts, and the no-op casts and collectives of seed 000's
/// "State Transition Primitives" (the catalogue holds their meanings).
pub const PVARY: &str = "pvary";
pub const CASTS: &[&str] = &[
    "pvary",
    "preduced",
    "vary_unreduced_cast",
    "reduced_vary_cast",
];

/// How an op treats `reduced` (seed 000, "Operations with Reduced Rules").
enum ReducedRule {
    /// `unop_reduced_rule`: the output's `reduced` is the input's.
    Unary,
    /// `nary_reduced_rule`: the non-empty `reduced` sets must be equal; the
    /// output gets that set (or none).
    Nary,
    /// `_dot_general_reduced_rule`: the output gets none.
    DotGeneral,
    /// No `reduced_rule`: `call_reduced_rule` raises NotImplementedError if
    /// any input is Reduced.
    None,
    /// The seed's table does not list the op.
    Unlisted,
}

fn rule(op: OpClass, arity: usize) -> ReducedRule {
    use OpClass::*;
    match op {
        // Unary ops (sin, exp, neg, ...), convert_element_type, transpose,
        // squeeze, dynamic_slice, reduce_sum: "Propagates from input". A
        // constant factor carries no `reduced`, so scaling is unary here.
        Neg | ScalarMul | Nonlinear | NarrowingCast | View | Sum if arity == 1 => {
            ReducedRule::Unary
        }
        // Binary ops (add, mul, sub, div), concatenate,
        // dynamic_update_slice: "All inputs must match, then propagates".
        Add | Sub | Mul | Division | Concat | Nonlinear | NarrowingCast | View | Sum | Neg
        | ScalarMul => ReducedRule::Nary,
        Matmul | Einsum => ReducedRule::DotGeneral,
        // reduce_max has no reduced_rule in the seed's list.
        Max => ReducedRule::None,
        // jnp.mean is not in the list (reduce_sum is).
        Mean => ReducedRule::Unlisted,
    }
}

pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    let Some(cols) = columns(inputs) else {
        return malformed();
    };
    let set = |t: &Vec<State>, s: State| -> BTreeSet<usize> {
        (0..t.len()).filter(|&a| t[a] == s).collect()
    };
    if inputs.iter().any(|t| t.contains(&State::Partial)) {
        return Outcome::Unknown(
            "seed 000 states no rule for local ops on Unreduced inputs".into(),
        );
    }
    let reduced: Vec<BTreeSet<usize>> = inputs.iter().map(|t| set(t, State::Reduced)).collect();
    let any_reduced = reduced.iter().any(|r| !r.is_empty());
    let out_reduced: BTreeSet<usize> = match rule(op, inputs.len()) {
        ReducedRule::Unary => reduced[0].clone(),
        ReducedRule::Nary => {
            let mut distinct: Vec<&BTreeSet<usize>> =
                reduced.iter().filter(|r| !r.is_empty()).collect();
            distinct.sort();
            distinct.dedup();
            if distinct.len() > 1 {
                return Outcome::Error(
                    "ShardingTypeError: inputs must have same reduced axes".into(),
                );
            }
            distinct.first().map(|r| (*r).clone()).unwrap_or_default()
        }
        ReducedRule::DotGeneral => BTreeSet::new(),
        ReducedRule::None if any_reduced => {
            return Outcome::Error(format!(
                "NotImplementedError: reduced rule for {} not implemented",
                op.name()
            ))
        }
        ReducedRule::None => BTreeSet::new(),
        ReducedRule::Unlisted if any_reduced => {
            return Outcome::Unknown(format!(
                "seed 000 does not list {} among the ops with a reduced rule",
                op.name()
            ))
        }
        ReducedRule::Unlisted => BTreeSet::new(),
    };
    // vma: the union of the inputs'.
    let vma: BTreeSet<usize> = inputs.iter().flat_map(|t| set(t, State::Varying)).collect();
    let mut casts = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        if !vma.contains(&a) {
            continue;
        }
        if col.contains(&State::Reduced) || out_reduced.contains(&a) {
            return Outcome::Unknown(format!(
                "seed 000 does not say what an op does when Reduced meets Varying on mesh axis {a}"
            ));
        }
        for (i, &s) in col.iter().enumerate() {
            if s == State::Invariant {
                casts.push(Cast {
                    input: i,
                    axis: a,
                    name: PVARY,
                    from: State::Invariant,
                    to: State::Varying,
                });
            }
        }
    }
    let output = (0..cols.len())
        .map(|a| {
            if out_reduced.contains(&a) {
                State::Reduced
            } else if vma.contains(&a) {
                State::Varying
            } else {
                State::Invariant
            }
        })
        .collect();
    Outcome::Infers { output, casts }
}
