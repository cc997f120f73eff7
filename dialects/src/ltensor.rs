//! LTensor's variance and reduced tracking, seed 001
//! (`001_aeb7802ad7963ca5.txt`, "reduced tracking in LTensor"). Written in
//! canonical letters: a mesh dim in `_variant_dims` is V, in `_reduced_dims`
//! R, in neither I. LTensor has no Partial.
//!
//! `__torch_function__` makes the output's variant dims the union of the
//! inputs' ("Union (ANY)") and its reduced dims the intersection ("all
//! inputs reduced → output reduced"), the same for every local op (custom
//! strategies are registered for collectives only). Before running the op
//! it calls `unwrap_and_insert_mark_varying`, whose body the seed elides
//! ("existing logic for mark_varying"); this function reads it as marking an
//! invariant input varying on the output's variant dims, as JAX's pvary
//! does. What it does to a reduced input there the seed does not say.

use crate::{columns, malformed, Cast, OpClass, Outcome, System};
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "ltensor",
    dialect: Dialect::Canonical,
    seeds: "001",
    typing,
    cast,
    collective,
};

/// The cast LTensor inserts.
pub const MARK_VARYING: &str = "mark_varying";
pub const CASTS: &[&str] = &[MARK_VARYING];

pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    let Some(cols) = columns(inputs) else {
        return malformed();
    };
    let _same_for_every_local_op = op;
    if inputs.iter().any(|t| t.contains(&State::Partial)) {
        return Outcome::Unknown(
            "LTensor (seed 001) tracks variant and reduced dims only: it has no Partial".into(),
        );
    }
    let mut out = Vec::new();
    let mut casts = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        if col.contains(&State::Varying) {
            if col.contains(&State::Reduced) {
                return Outcome::Unknown(format!(
                    "mesh dim {a}: seed 001 elides mark_varying and does not say what it does to a reduced input"
                ));
            }
            for (i, &s) in col.iter().enumerate() {
                if s == State::Invariant {
                    casts.push(Cast {
                        input: i,
                        axis: a,
                        name: MARK_VARYING,
                        from: State::Invariant,
                        to: State::Varying,
                    });
                }
            }
            out.push(State::Varying);
        } else if col.iter().all(|&s| s == State::Reduced) {
            out.push(State::Reduced);
        } else {
            out.push(State::Invariant);
        }
    }
    Outcome::Infers { output: out, casts }
}

/// How LTensor runs a cast its typing inserts: by its table, and
/// `mark_varying` as pvary (whose transpose sums the cotangents).
pub fn cast(name: &str, from: State, to: State) -> Option<(String, String)> {
    let own = [(
        "mark_varying",
        State::Invariant,
        State::Varying,
        "pvary",
        "psum_invariant",
    )];
    crate::elaborate::cast_by_table_or("ltensor", &own, name, from, to)
}

crate::elaborate::table_collective_reader!("LTensor");
