//! PyTorch local SPMD types, seed 003 (`003_1618fa7ef4a0a05c.txt`, "The
//! typing rules for non-comms ops"). Names: `I`, `V`, `P`, `R` (its R,
//! "Replicate", is the canonical Reduced), `S(d)` for a Varying axis that
//! shards tensor dim d. Local ops never communicate, so this system inserts
//! no casts: a typing either follows from its rules or is an error.

use crate::{columns, malformed, OpClass, Outcome, System};
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "spmd_types",
    dialect: Dialect::SpmdTypes,
    seeds: "003",
    typing,
};

/// The explicit casts of seed 003, which local ops never insert.
pub const CASTS: &[&str] = &["reinterpret", "convert"];

/// Seed 003's rules, axis by axis (each axis is typed on its own: the rules
/// name one mesh axis's states).
pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    let Some(cols) = columns(inputs) else {
        return malformed();
    };
    let mut out = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        match axis(op, col) {
            Ok(s) => out.push(s),
            Err(e) => return Outcome::Error(format!("mesh axis {a}: {e}")),
        }
    }
    Outcome::infers(out)
}

fn axis(op: OpClass, col: &[State]) -> Result<State, String> {
    use State::*;
    let all = |s: State| col.iter().all(|&c| c == s);
    let any = |s: State| col.contains(&s);
    // "Invariant not allowed to mix with other types"; "op(Invariant..) ->
    // Invariant" for any op.
    if any(Invariant) {
        return if all(Invariant) {
            Ok(Invariant)
        } else {
            Err("Invariant does not mix with other types".into())
        };
    }
    // "op(Replicate..) -> Replicate", "op(Varying..) -> Varying" for any op.
    if all(Reduced) {
        return Ok(Reduced);
    }
    if all(Varying) {
        return Ok(Varying);
    }
    // "op(Replicate, Varying) -> Varying".
    if !any(Partial) {
        return Ok(Varying);
    }
    if all(Partial) {
        if col.len() == 1 {
            // "linear_op(Partial) -> Partial": neg, scaling, sums and means
            // over a tensor dim and views are linear; the rest are not.
            return match op {
                OpClass::Neg
                | OpClass::ScalarMul
                | OpClass::Sum
                | OpClass::Mean
                | OpClass::View => Ok(Partial),
                _ => Err(format!(
                    "{} is not linear: only linear ops keep Partial",
                    op.name()
                )),
            };
        }
        // "Partial + Partial -> Partial", and "multilinear operations can
        // accept multiple Partial arguments" read as linear in all inputs
        // jointly (add, sub, concat); "Partial * Partial is forbidden" is
        // explicit for multiplication, and the seed gives it precedence.
        return match op {
            OpClass::Add | OpClass::Sub | OpClass::Concat => Ok(Partial),
            o if o.is_multilinear() => Err("Partial * Partial is forbidden".into()),
            _ => Err(format!(
                "no rule admits several Partial inputs to {}",
                op.name()
            )),
        };
    }
    // One Partial beside Replicate operands of a multilinear op: the op is
    // linear in that argument ("linear_op(Partial) -> Partial"), and "only
    // addition (and more generally, multilinear operations) can accept
    // multiple Partial arguments" says a multilinear op accepts Partial ones.
    // The seed table reads it this way on two axes (`st_2d_mul_rp`) but
    // lists R * P -> P as unlisted on one (`st_gap_rep_times_part`).
    let partials = col.iter().filter(|&&c| c == Partial).count();
    if op.is_multilinear() && partials == 1 && !any(Varying) {
        return Ok(Partial);
    }
    // Partial beside Replicate or Varying otherwise: no rule lists it.
    Err("no rule admits Partial beside Replicate or Varying".into())
}
