//! Deriving the complete table of typings of a local op on one mesh axis
//! (SPEC.md §9.1).

use crate::run::{check_op, degree_guard, estimate, guard, UsageError};
use rayon::prelude::*;
use spmd_generators::{all_global_types, all_types, Scope};
use spmd_interp::{LocalFn, TypedOp};
use spmd_oracle::Verdict;
use spmd_semantics::{Mesh, Type};

/// One typing of the derived table and its verdict.
pub struct DerivedRow {
    pub op: TypedOp,
    pub verdict: Verdict,
}

/// Every combination of input states × output state on one axis, each
/// checked by the oracle on the 1-axis meshes of the scope.
pub fn derive(
    f: &LocalFn,
    scope: &Scope,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<DerivedRow>, UsageError> {
    derive_types(f, scope, &all_types(1), progress)
}

/// The same with global SPMD types (SPEC.md §13.3): I, P, R and S(d) for
/// every tensor dim d the scope's shapes have, so the table is the op's
/// shard propagation rule.
pub fn derive_global(
    f: &LocalFn,
    scope: &Scope,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<DerivedRow>, UsageError> {
    derive_types(f, scope, &all_global_types(scope.max_rank), progress)
}

fn derive_types(
    f: &LocalFn,
    scope: &Scope,
    types: &[Type],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<DerivedRow>, UsageError> {
    let types = types.to_vec();
    let mut ops = Vec::new();
    let ins: Vec<Vec<Type>> = spmd_generators::tuples(&types, f.arity());
    for i in &ins {
        for o in &types {
            ops.push(TypedOp::local(f.clone(), i.clone(), o.clone()));
        }
    }
    let meshes = scope.meshes_with(1);
    if meshes.is_empty() {
        return Err(UsageError(
            "the scope has no one-axis mesh to derive on".into(),
        ));
    }
    degree_guard(&ops[0], scope)?;
    let total = ops
        .iter()
        .map(|op| estimate(op, scope))
        .fold(0u64, u64::saturating_add);
    guard(total, scope)?;
    if meshes
        .iter()
        .all(|m| spmd_generators::shape_tuples(&ops[0].op, m, scope).is_empty())
    {
        return Err(UsageError(format!(
            "no input shapes in scope fit `{}`",
            f.text
        )));
    }
    // Note: on a one-rank mesh every state denotes the local value itself, so
    // for a local op with its local VJP the outcome there is the same for
    // every typing (SPEC.md §9.1). Check those cases once and share them;
    // should they fail, every typing is checked in full instead.
    let (single, multi): (Vec<Mesh>, Vec<Mesh>) =
        meshes.iter().cloned().partition(|m| m.num_ranks() == 1);
    let shared = check_op(&ops[0], scope, &single, progress);
    let share = shared.is_sound() || matches!(shared, Verdict::Vacuous { .. });
    Ok(ops
        .into_par_iter()
        .map(|op| {
            let verdict = if share {
                match check_op(&op, scope, &multi, progress) {
                    Verdict::Unsound { violation, tally } => Verdict::Unsound { violation, tally },
                    v => {
                        let mut t = shared.tally().clone();
                        t.absorb(v.tally());
                        Verdict::conclude(t, None)
                    }
                }
            } else {
                check_op(&op, scope, &meshes, progress)
            };
            DerivedRow { op, verdict }
        })
        .collect())
}
