//! Searching the catalogue for correct transposes of a collective or cast
//! (SPEC.md §10.5): every catalogue op, and every composition of two, typed
//! from cot(dst) to cot(src), is tried as the backward. Those the oracle finds
//! sound are listed cheapest first in the ring model.

use crate::run::{check_op, UsageError};
use crate::types::parse_types;
use rayon::prelude::*;
use spmd_generators::Scope;
use spmd_interp::catalogue::collective_typed;
use spmd_interp::{Backward, Collective, Kind, Op, TypedOp};
use spmd_oracle::Verdict;
use spmd_semantics::{Dialect, Mesh, State, Type, ALL_STATES, Q};

/// A correct transpose and its cost.
pub struct Found {
    pub backward: Op,
    pub cost: Q,
    pub verdict: Verdict,
}

/// Candidate calls: the canonical names with each parameter choice in scope
/// (stacked forms included), the division by the group size (JAX's
/// transpose of pmean divides by n), and, for a ppermute forward, the
/// inverse permutation.
fn calls(forward: &Collective) -> Vec<String> {
    let mut v = Vec::new();
    for d in 0..2 {
        for stack in ["", ", stack"] {
            v.push(format!("all_gather(dim={d}{stack})"));
            v.push(format!("reduce_scatter(dim={d}{stack})"));
            v.push(format!("convert(dim={d}{stack})"));
        }
        for c in 0..2 {
            v.push(format!("all_to_all(split={d}, concat={c})"));
            if matches!(forward.kind, Kind::AllToAll { stack: true, .. }) {
                v.push(format!("all_to_all(split={d}, concat={c}, stack)"));
            }
        }
    }
    v.extend(
        [
            "all_reduce",
            "pmean",
            "reinterpret",
            "convert",
            "divide_by_group_size",
        ]
        .map(String::from),
    );
    if let Kind::PPermute { perm, pairs } = &forward.kind {
        let mut inv = vec![None; perm.len()];
        for (k, p) in perm.iter().enumerate() {
            if let Some(j) = p {
                inv[*j] = Some(k);
            }
        }
        let text: Vec<String> = if *pairs {
            // JAX's form keeps the group open: the inverse as pairs.
            inv.iter()
                .enumerate()
                .filter_map(|(d, s)| s.map(|s| format!("({d}, {s})")))
                .collect()
        } else {
            inv.iter()
                .map(|x| x.map(|k| k.to_string()).unwrap_or("_".into()))
                .collect()
        };
        let sep = if *pairs { ", " } else { "," };
        v.push(format!("ppermute(perm=[{}])", text.join(sep)));
    }
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
        // Collectives from their proper sources to the destinations the
        // seed tables give them (seed 003's transitions, seed 000's
        // all_gather, psum_scatter, psum and pmean).
        Kind::AllGather { .. } => s == Varying && matches!(d, Reduced | Invariant | Varying),
        Kind::AllToAll { .. } => s == Varying && d == Varying,
        Kind::AllReduce | Kind::PMean => {
            matches!(s, Partial | Varying) && matches!(d, Reduced | Invariant)
        }
        Kind::ReduceScatter { .. } => matches!(s, Partial | Varying) && d == Varying,
        Kind::PPermute { .. } => s == Varying && d == Varying,
        Kind::DivideByGroupSize => s == d,
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
    // With layouts (`--from 'S(0)'`), the forward and the candidates' ends
    // are read with global types (SPEC.md §13); intermediate states have
    // none.
    let fwd = collective_typed(forward, &types[0], &types[1], &axes).map_err(UsageError)?;
    let (from, to) = (types[1].cot(), types[0].cot());
    let one = |text: &str, a: &Type, b: &Type| {
        collective_typed(text, a, b, &axes)
            .ok()
            .filter(listed)
            .map(Op::Collective)
    };
    let calls = calls(&fwd);
    let fwd_kind = fwd.kind.clone();
    let mut cands: Vec<Op> = calls.iter().filter_map(|c| one(c, &from, &to)).collect();
    for mid in ALL_STATES.map(Type::one) {
        for a in &calls {
            for b in &calls {
                if let (Some(x), Some(y)) = (one(a, &from, &mid), one(b, &mid, &to)) {
                    if noop(&x) || noop(&y) {
                        continue; // the one-step candidate covers it
                    }
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
    let quick_mesh = match &fwd_kind {
        Kind::PPermute { perm, .. } => Mesh::line(perm.len()),
        _ => Mesh::line(2),
    };
    let quick = Scope {
        meshes: vec![quick_mesh],
        max_points: 16,
        ..scope.clone()
    };
    let meshes = scope.meshes_with(1);
    let (m, shape) = reference();
    // A permutation fits only a group of its own length; ppermute keeps the
    // shape, and every candidate's cost depends only on the group size.
    let out_shape = match base.op.infer(&m, std::slice::from_ref(&shape)) {
        Ok(x) => x.0,
        Err(_) if matches!(fwd_kind, Kind::PPermute { .. }) => shape.clone(),
        Err(e) => return Err(UsageError(e)),
    };
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
    let key = |o: &Op| describe_typed(o, Dialect::Canonical);
    found.sort_by(|a, b| {
        a.cost
            .cmp(&b.cost)
            .then_with(|| steps(&a.backward).cmp(&steps(&b.backward)))
            .then_with(|| key(&a.backward).cmp(&key(&b.backward)))
    });
    found.dedup_by(|a, b| key(&a.backward) == key(&b.backward));
    Ok(found)
}

fn noop(o: &Op) -> bool {
    matches!(o, Op::Collective(c) if c.is_noop_cast())
}

/// A candidate with the states of each step, in a dialect's names:
/// `reduce_scatter(dim=0)[P->V]`, or with `Dialect::Jax`
/// `unreduced_psum_scatter(dim=0)[Unreduced->Varying]`. The canonical and
/// spmd_types dialects keep the catalogue's names and state letters; JAX
/// uses its own primitive names where the catalogue has them (the others,
/// convert for one, keep theirs).
pub fn describe_typed(op: &Op, dialect: Dialect) -> String {
    match op {
        Op::Collective(c) => match dialect {
            Dialect::Canonical | Dialect::SpmdTypes => c.describe_typed(),
            _ => {
                let state = |s: State| {
                    dialect
                        .state_name(s)
                        .map(String::from)
                        .unwrap_or_else(|| s.to_string())
                };
                let mut c = c.clone();
                if dialect == Dialect::Jax {
                    if let Some(n) = spmd_dialects::jax::primitive_name(&c) {
                        c.name = n.to_string();
                    }
                }
                format!("{}[{}->{}]", c.describe(), state(c.src), state(c.dst))
            }
        },
        Op::Compose(ops) => ops
            .iter()
            .map(|o| describe_typed(o, dialect))
            .collect::<Vec<_>>()
            .join(" |> "),
        other => other.describe(),
    }
}
