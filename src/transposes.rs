//! Searching the catalogue for correct transposes of a collective or cast
//! (SPEC.md §10.5): every catalogue op, and every composition of two, typed
//! from cot(dst) to cot(src), is tried as the backward. Those the oracle finds
//! sound are listed cheapest first in the ring model.

use crate::run::{check_op, UsageError};
use crate::types::parse_types;
use rayon::prelude::*;
use spmd_generators::Scope;
use spmd_interp::catalogue::collective;
use spmd_interp::{Backward, Collective, Kind, Op, TypedOp};
use spmd_oracle::Verdict;
use spmd_semantics::{Dialect, Mesh, State, ALL_STATES, Q};

/// A correct transpose and its cost.
pub struct Found {
    pub backward: Op,
    pub cost: Q,
    pub verdict: Verdict,
}

/// Candidate calls: the canonical names with each parameter choice in scope.
fn calls() -> Vec<String> {
    let mut v = Vec::new();
    for d in 0..2 {
        v.push(format!("all_gather(dim={d})"));
        v.push(format!("reduce_scatter(dim={d})"));
        v.push(format!("convert(dim={d})"));
        for c in 0..2 {
            v.push(format!("all_to_all(split={d}, concat={c})"));
        }
    }
    v.extend(["all_reduce", "pmean", "reinterpret"].map(String::from));
    v
}

/// Only transitions the seed tables know: casts between the pairs of seed
/// 003's state-transition table, collectives from their proper sources.
fn listed(c: &Collective) -> bool {
    use State::*;
    let (s, d) = (c.src, c.dst);
    match c.kind {
        Kind::Reinterpret => matches!(
            (s, d),
            (Reduced, Invariant | Varying | Partial)
                | (Invariant, Reduced | Varying)
                | (Varying, Partial)
        ),
        Kind::Convert { .. } => matches!(
            (s, d),
            (Reduced, Varying | Partial) | (Invariant, Partial | Varying) | (Varying, Partial)
        ),
        Kind::AllGather { .. } | Kind::AllToAll { .. } => s == Varying,
        Kind::AllReduce | Kind::ReduceScatter { .. } | Kind::PMean => {
            matches!(s, Partial | Varying)
        }
        Kind::PPermute { .. } => s == Varying && d == Varying,
    }
}

/// The reference for costs: 4 ranks, a local input of 4 x 4.
pub fn reference() -> (Mesh, Vec<usize>) {
    (Mesh::line(4), vec![4, 4])
}

/// All correct transposes of `forward` from `src` to `dst` (one mesh axis).
pub fn search(
    dialect: Dialect,
    forward: &str,
    src: &str,
    dst: &str,
    scope: &Scope,
) -> Result<Vec<Found>, UsageError> {
    let (axes, types) = parse_types(dialect, &[src, dst])?;
    if axes.len() != 1 {
        return Err(UsageError(
            "transposes searches one mesh axis: give single states for --from and --to".into(),
        ));
    }
    let (s, d) = (types[0].states[0], types[1].states[0]);
    let fwd = collective(forward, &[s], &[d], &axes).map_err(UsageError)?;
    let (from, to) = (d.cot(), s.cot());
    let one = |text: &str, a: State, b: State| {
        collective(text, &[a], &[b], &axes)
            .ok()
            .filter(listed)
            .map(Op::Collective)
    };
    let mut cands: Vec<Op> = calls().iter().filter_map(|c| one(c, from, to)).collect();
    for mid in ALL_STATES {
        for a in calls() {
            for b in calls() {
                if let (Some(x), Some(y)) = (one(&a, from, mid), one(&b, mid, to)) {
                    cands.push(Op::Compose(vec![x, y]));
                }
            }
        }
    }
    let base = TypedOp {
        op: Op::Collective(fwd),
        inputs: vec![types[0].clone()],
        output: types[1].clone(),
        backward: Backward::LocalVjp,
        jvp: None,
        no_grad: vec![],
    };
    // A quick screen on the two-rank mesh, then the whole scope.
    let quick = Scope {
        meshes: vec![Mesh::line(2)],
        max_points: 16,
        ..scope.clone()
    };
    let meshes = scope.meshes_with(1);
    let (m, shape) = reference();
    let out_shape = base
        .op
        .infer(&m, std::slice::from_ref(&shape))
        .map(|x| x.0)
        .map_err(UsageError)?;
    let mut found: Vec<Found> = cands
        .into_par_iter()
        .filter_map(|c| {
            let t = TypedOp {
                backward: Backward::Transpose(c.clone()),
                ..base.clone()
            };
            if !check_op(&t, &quick, &quick.meshes, &|_| {}).is_sound() {
                return None;
            }
            let verdict = check_op(&t, scope, &meshes, &|_| {});
            if !verdict.is_sound() {
                return None;
            }
            let cost = c.cost(&m, std::slice::from_ref(&out_shape));
            Some(Found {
                backward: c,
                cost,
                verdict,
            })
        })
        .collect();
    let steps = |o: &Op| if let Op::Compose(v) = o { v.len() } else { 1 };
    found.sort_by(|a, b| {
        a.cost
            .cmp(&b.cost)
            .then_with(|| steps(&a.backward).cmp(&steps(&b.backward)))
            .then_with(|| describe_typed(&a.backward).cmp(&describe_typed(&b.backward)))
    });
    found.dedup_by(|a, b| describe_typed(&a.backward) == describe_typed(&b.backward));
    Ok(found)
}

/// A candidate with the states of each step: `reduce_scatter(dim=0)[P->V]`.
pub fn describe_typed(op: &Op) -> String {
    match op {
        Op::Collective(c) => c.describe_typed(),
        Op::Compose(ops) => ops
            .iter()
            .map(describe_typed)
            .collect::<Vec<_>>()
            .join(" |> "),
        other => other.describe(),
    }
}
