//! PyTorch DTensor with the proposed `Reduced` placement, seed 001
//! (`001_aeb7802ad7963ca5.txt`, "Propagation Strategy"). Names:
//! `Replicate()` (the canonical Invariant), `Shard(d)`, `Partial()`,
//! `Reduced()`.
//!
//! The seed's rule runs in two steps: DTensor's existing sharding
//! propagation treats `Reduced()` as `Replicate()`, then
//! `propagate_reduced_annotation` upgrades the output's `Replicate()` to
//! `Reduced()` on every mesh dim where any input is `Reduced()` ("uniform
//! rule for ALL ops", and the table "Reduced Propagation by Op Category").
//! The seed's FSDP example says the opposite for `x @ w` with only `w`
//! Reduced ("inputs disagree → y is NOT Reduced"); the code and the table
//! say "any", and this function follows them (the seed table keeps both
//! rows, `dtensor_uniform_any_reduced` and `dtensor_fsdp_inputs_disagree`).
//! The existing propagation rules for `Shard` and `Partial` are not in the
//! seed: on those inputs the answer is `Unknown`.

use crate::{columns, malformed, OpClass, Outcome, System};
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "dtensor",
    dialect: Dialect::Dtensor,
    seeds: "001",
    typing,
};

/// DTensor inserts redistributions, not casts, and the seed names none for
/// local ops.
pub const CASTS: &[&str] = &[];

pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    let Some(cols) = columns(inputs) else {
        return malformed();
    };
    let _uniform_for_every_op = op;
    let mut out = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        if col
            .iter()
            .any(|s| matches!(s, State::Varying | State::Partial))
        {
            return Outcome::Unknown(format!(
                "mesh dim {a}: seed 001 leaves Shard and Partial to DTensor's existing propagation rules, which it does not state"
            ));
        }
        // Every input is Replicate() or Reduced(): the existing rules, which
        // treat both as Replicate(), give Replicate(); then the upgrade.
        out.push(if col.contains(&State::Reduced) {
            State::Reduced
        } else {
            State::Invariant
        });
    }
    Outcome::infers(out)
}
