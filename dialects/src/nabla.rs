//! Nabla, seeds 002 (`002_69a41435f670f263.txt`, factor-based propagation)
//! and 004 (`004_5b42e74c14f79410.txt`, partial propagation). Names:
//! `replicated` (the canonical Invariant), `sharded`, `partial`; Nabla has
//! no Reduced.
//!
//! Seed 004: linear/distributive ops may defer the pending sum (slice and
//! gather do; concatenate only when every input is partial; the helpers
//! "preserve if all inputs carry the axis" and "preserve if at most n inputs
//! carry the axis"); nonlinear ops and narrowing casts must force the
//! reduction first, which inserts an `all_reduce` on each partial input.
//! Seed 002: an elementwise op of sharded and replicated inputs is sharded
//! (one factor, sharded alike); whether a contraction, reduction or view of
//! a sharded input stays sharded depends on which tensor dim is sharded,
//! which a one-axis local type does not carry: `Unknown`.

use crate::{columns, malformed, Cast, OpClass, Outcome, System};
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "nabla",
    dialect: Dialect::Nabla,
    seeds: "002, 004",
    typing,
};

/// The cast Nabla inserts to force a pending sum.
pub const ALL_REDUCE: &str = "all_reduce";
pub const CASTS: &[&str] = &[ALL_REDUCE];

/// What the op does with partial inputs on one axis.
enum OnPartial {
    Defer,
    Force,
    Unknown(String),
}

fn on_partial(op: OpClass, col: &[State]) -> OnPartial {
    use OpClass::*;
    let partials = col.iter().filter(|&&s| s == State::Partial).count();
    match op {
        // Linear in their one input: defer (SliceTensorOp, GatherOp).
        Neg | ScalarMul | View | Sum | Mean if col.len() == 1 => OnPartial::Defer,
        // "preserve if all inputs carry the axis" (ConcatenateOp; add and
        // sub are linear in all inputs jointly the same way).
        Add | Sub | Concat => {
            if partials == col.len() {
                OnPartial::Defer
            } else {
                OnPartial::Force
            }
        }
        // "preserve if at most n inputs carry the axis" with n = 1: a
        // partial times replicated values (row-parallel matmul).
        Mul | Matmul | Einsum => {
            if partials == 1 && col.iter().all(|&s| s != State::Varying) {
                OnPartial::Defer
            } else {
                OnPartial::Unknown(format!(
                    "seed 004 does not say what {} does with {partials} partial inputs beside {:?}",
                    op.name(),
                    col
                ))
            }
        }
        // "nonlinear ops must force reduction"; "CastOp no longer
        // incorrectly defers narrowing casts". max is not linear.
        Nonlinear | Max | NarrowingCast => OnPartial::Force,
        Division => OnPartial::Unknown("seed 004 does not say whether division defers".into()),
        Neg | ScalarMul | View | Sum | Mean => {
            OnPartial::Unknown(format!("{} with several inputs", op.name()))
        }
    }
}

pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    let Some(cols) = columns(inputs) else {
        return malformed();
    };
    if inputs.iter().any(|t| t.contains(&State::Reduced)) {
        return Outcome::Unknown("Nabla (seeds 002, 004) has no Reduced state".into());
    }
    let mut out = Vec::new();
    let mut casts = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        let mut col = col.clone();
        if col.contains(&State::Partial) {
            match on_partial(op, &col) {
                OnPartial::Defer => {
                    out.push(State::Partial);
                    continue;
                }
                OnPartial::Force => {
                    for (i, s) in col.iter_mut().enumerate() {
                        if *s == State::Partial {
                            casts.push(Cast {
                                input: i,
                                axis: a,
                                name: ALL_REDUCE,
                                from: State::Partial,
                                to: State::Invariant,
                            });
                            *s = State::Invariant;
                        }
                    }
                }
                OnPartial::Unknown(r) => return Outcome::Unknown(format!("mesh axis {a}: {r}")),
            }
        }
        if !col.contains(&State::Varying) {
            out.push(State::Invariant);
            continue;
        }
        // Seed 002's elementwise template: one factor, sharded alike.
        let elementwise = matches!(
            op,
            OpClass::Add
                | OpClass::Sub
                | OpClass::Neg
                | OpClass::ScalarMul
                | OpClass::Mul
                | OpClass::Nonlinear
                | OpClass::NarrowingCast
                | OpClass::Division
        );
        if !elementwise {
            return Outcome::Unknown(format!(
                "mesh axis {a}: whether {} of a sharded input stays sharded depends on which tensor dim is sharded (seed 002's factors), which a local type does not carry",
                op.name()
            ));
        }
        out.push(State::Varying);
    }
    Outcome::Infers { output: out, casts }
}
