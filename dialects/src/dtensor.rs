//! PyTorch DTensor with the proposed `Reduced` placement: seed 001
//! (`001_aeb7802ad7963ca5.txt`, "Propagation Strategy") for `Reduced()`, and
//! torch 2.14.1's own sharding propagation for `Replicate()`, `Shard(d)` and
//! `Partial()`, as recorded by `peers/record_dtensor_ops.py` in
//! `tests/fixtures/dtensor_ops.json`. Names: `Replicate()` (the canonical
//! Invariant), `Shard(d)` (Varying, read here as `Shard(0)` of every
//! operand, as recorded), `Partial()` (a pending sum), `Reduced()`.
//!
//! DTensor never refuses a local op for its placements: where an op cannot
//! run on them, it redistributes an operand first (`redistribute`, the casts
//! of this dialect) and then runs. `REAL` holds, per op class and per pair
//! of placements on one mesh dim, what torch 2.14.1 did; mesh dims are
//! propagated one at a time.
//!
//! `Reduced()` is the proposal's: DTensor's propagation treats it as
//! `Replicate()`, then the output's `Replicate()` becomes `Reduced()` on
//! every mesh dim where an input is `Reduced()` (the seed's code and table:
//! "uniform rule for ALL ops"). The seed's FSDP example reads it the other
//! way ("inputs disagree → y is NOT Reduced": only when every input is
//! `Reduced()`); `FSDP_READING` is that second reading, as its own system
//! `dtensor-fsdp` (`derive OP --dialect dtensor-fsdp`).

use crate::{columns, malformed, Cast, OpClass, Outcome, System};
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "dtensor",
    dialect: Dialect::Dtensor,
    seeds: "001",
    typing,
};

/// The seed's FSDP example's reading of `Reduced()` propagation.
pub const FSDP_READING: System = System {
    name: "dtensor-fsdp",
    dialect: Dialect::Dtensor,
    seeds: "001",
    typing: typing_fsdp_reading,
};

/// The real library's version whose propagation `one_dim` follows.
pub const REAL_VERSION: &str = "torch 2.14.1";

/// DTensor inserts redistributions, named so.
pub const REDISTRIBUTE: &str = "redistribute";
pub const CASTS: &[&str] = &[REDISTRIBUTE];

/// Which inputs' `Reduced()` makes the output `Reduced()`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Any input (the seed's code and table).
    Any,
    /// Every input (the seed's FSDP example).
    Every,
}

pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_with(op, inputs, Reading::Any)
}

pub fn typing_fsdp_reading(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_with(op, inputs, Reading::Every)
}

fn typing_with(op: OpClass, inputs: &[Vec<State>], reading: Reading) -> Outcome {
    let Some(cols) = columns(inputs) else {
        return malformed();
    };
    let mut out = Vec::new();
    let mut casts = Vec::new();
    for (axis, col) in cols.iter().enumerate() {
        // Propagation sees Reduced() as Replicate().
        let seen: Vec<State> = col
            .iter()
            .map(|&s| {
                if s == State::Reduced {
                    State::Invariant
                } else {
                    s
                }
            })
            .collect();
        let (o, moves) = match one_dim(op, &seen) {
            Ok(x) => x,
            Err(reason) => return Outcome::Unknown(format!("mesh dim {axis}: {reason}")),
        };
        for (input, to) in moves {
            casts.push(Cast {
                input,
                axis,
                name: REDISTRIBUTE,
                from: col[input],
                to,
            });
        }
        let upgrade = match reading {
            Reading::Any => col.contains(&State::Reduced),
            Reading::Every => col.iter().all(|&s| s == State::Reduced),
        };
        out.push(if o == State::Invariant && upgrade {
            State::Reduced
        } else {
            o
        });
    }
    Outcome::Infers { output: out, casts }
}

/// A redistribution: the operand and the placement it is moved to.
type Move = (usize, State);

/// torch 2.14.1's propagation of one op on one mesh dim, for operands each
/// `Replicate()` (I), `Shard(0)` (V) or `Partial()` (P): the output and the
/// operands it redistributes first (tests/fixtures/dtensor_ops.json).
fn one_dim(op: OpClass, s: &[State]) -> Result<(State, Vec<Move>), String> {
    use OpClass::*;
    use State::{Invariant as I, Partial as P, Varying as V};
    let not_sum = |kind: &str| {
        Err(format!(
            "DTensor gives Partial({kind}), a pending reduction other than a sum"
        ))
    };
    Ok(match (op, s) {
        (Neg | ScalarMul | View, [x]) => (*x, vec![]),
        (Sum, [I]) => (I, vec![]),
        (Sum, [_]) => (P, vec![]),
        (Mean, [V]) => return not_sum("avg"),
        (Max, [V]) => return not_sum("max"),
        (Nonlinear | NarrowingCast | Mean | Max, [P]) => (I, vec![(0, I)]),
        (Nonlinear | NarrowingCast | Mean | Max, [x]) => (*x, vec![]),
        (Add | Sub | Mul | Division | Matmul | Concat, [a, b]) => binary(op, *a, *b)
            .ok_or_else(|| format!("no recorded propagation for {}", op.name()))?,
        _ => {
            return Err(format!(
                "no recorded DTensor propagation for {} on {} operands",
                op.name(),
                s.len()
            ))
        }
    })
}

fn binary(op: OpClass, a: State, b: State) -> Option<(State, Vec<Move>)> {
    use OpClass::*;
    use State::{Invariant as I, Partial as P, Varying as V};
    Some(match (op, a, b) {
        (_, I, I) => (I, vec![]),
        (Concat, P, P) => (P, vec![]),
        (Concat, I, P) => (P, vec![(0, P)]),
        (Concat, P, I) => (P, vec![(1, P)]),
        // Concatenating along the sharded dim gathers every non-Replicate()
        // operand.
        (Concat, x, y) => {
            let mut m = vec![];
            if x != I {
                m.push((0, I));
            }
            if y != I {
                m.push((1, I));
            }
            (I, m)
        }
        (Matmul, I, V) => (P, vec![(0, V)]),
        (Matmul, V, I) => (V, vec![]),
        (Matmul, I, P) | (Matmul, P, I) => (P, vec![]),
        (Matmul, V, V) => (V, vec![(1, I)]),
        (Matmul, V, P) => (P, vec![(0, I)]),
        (Matmul, P, V) => (P, vec![(0, V)]),
        (Matmul, P, P) => (P, vec![(1, I)]),
        // Elementwise: a Replicate() operand follows a Shard(0) one.
        (_, I, V) => (V, vec![(0, V)]),
        (_, V, I) => (V, vec![(1, V)]),
        (_, V, V) => (V, vec![]),
        (_, V, P) => (V, vec![(1, V)]),
        (_, P, V) => (V, vec![(0, V)]),
        (Add | Sub, I, P) => (P, vec![(0, P)]),
        (Add | Sub, P, I) => (P, vec![(1, P)]),
        (Add | Sub, P, P) => (P, vec![]),
        (Mul, I, P) | (Mul, P, I) => (P, vec![]),
        (Division, P, I) => (P, vec![]),
        (Division, I, P) => (I, vec![(1, I)]),
        (Mul | Division, P, P) => (P, vec![(1, I)]),
        _ => return None,
    })
}
