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

use crate::uneven::StepFn;
use crate::{columns, malformed, Cast, OpClass, Outcome, System};
use spmd_interp::uneven::Coll;
use spmd_semantics::pending::PartialKind;
use spmd_semantics::uneven::{Placement, Split};
use spmd_semantics::{Dialect, State, Tensor};

pub const SYSTEM: System = System {
    name: "dtensor",
    dialect: Dialect::Dtensor,
    seeds: "001",
    typing,
    cast,
    collective,
};

/// The seed's FSDP example's reading of `Reduced()` propagation.
pub const FSDP_READING: System = System {
    name: "dtensor-fsdp",
    dialect: Dialect::Dtensor,
    seeds: "001",
    typing: typing_fsdp_reading,
    cast,
    collective,
};

/// The real library's version whose propagation `one_dim` follows.
pub const REAL_VERSION: &str = "torch 2.14.1";

/// DTensor inserts redistributions, named so.
pub const REDISTRIBUTE: &str = "redistribute";
/// Seed 001's grad-placement hook on a `Replicate()` operand whose gradient
/// comes back `Partial()`: nothing in the forward, an all-reduce of the
/// gradient to `Replicate()` in the backward. As a cast it is Replicate()
/// read as Reduced() (`reinterpret(I,R)`, transposed by `all_reduce(I)`).
pub const GRAD_HOOK: &str = "grad_placement_hook";
pub const CASTS: &[&str] = &[REDISTRIBUTE, GRAD_HOOK];

/// Which inputs' `Reduced()` makes the output `Reduced()`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Any input (the seed's code and table).
    Any,
    /// Every input (the seed's FSDP example).
    Every,
}

/// The typing function on local states: a Varying operand is some
/// `Shard(d)`, so where DTensor's answer depends on d (a sum, matmul,
/// concatenation or view of a sharded operand) it is `Unknown`.
pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_with(op, inputs, Reading::Any, false)
}

pub fn typing_fsdp_reading(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_with(op, inputs, Reading::Every, false)
}

/// The typing function with every Varying operand `Shard(0)`, as the
/// fixture records it (sums over dim 0, matmul of 2-D operands,
/// concatenation along dim 0): what `fidelity` compares with torch.
pub fn typing_shard0(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_with(op, inputs, Reading::Any, true)
}

fn typing_with(op: OpClass, inputs: &[Vec<State>], reading: Reading, shard0: bool) -> Outcome {
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
        let dim_dependent = matches!(
            op,
            OpClass::Sum | OpClass::Matmul | OpClass::Concat | OpClass::View
        ) && seen.contains(&State::Varying);
        if dim_dependent && !shard0 {
            return Outcome::Unknown(format!(
                "mesh dim {axis}: DTensor's answer for {} of a Shard(d) operand depends on d, which a local type does not carry",
                op.name()
            ));
        }
        let (o, moves) = match one_dim(op, &seen) {
            Ok(x) => x,
            Err(reason) => return Outcome::Unknown(format!("mesh dim {axis}: {reason}")),
        };
        let mut after = seen.clone();
        for &(input, to) in &moves {
            after[input] = to;
        }
        // The gradient of an operand Replicate() after the moves, beside a
        // Partial() or Shard() one, of mul, matmul or div, comes back
        // Partial() (torch 2.14.1: mul_R_P, matmul_S_R, div_P_R); the hook
        // all-reduces it. A Reduced() input needs no hook (its gradient is
        // a pending sum already). A moved operand's move and hook are one
        // cast, from its own state to Reduced().
        let upgrade = match reading {
            Reading::Any => col.contains(&State::Reduced),
            Reading::Every => col.iter().all(|&s| s == State::Reduced),
        };
        let out_state = if o == State::Invariant && upgrade {
            State::Reduced
        } else {
            o
        };
        // Also beside a Reduced() output, whose cotangent is a pending sum.
        let hooked = |input: usize| {
            after[input] == State::Invariant
                && col[input] != State::Reduced
                && ((matches!(op, OpClass::Mul | OpClass::Matmul | OpClass::Division)
                    && matches!(o, State::Partial | State::Varying))
                    || out_state == State::Reduced)
        };
        for &(input, to) in &moves {
            if !hooked(input) {
                casts.push(Cast {
                    input,
                    axis,
                    name: REDISTRIBUTE,
                    from: col[input],
                    to,
                });
            }
        }
        for (input, &from) in col.iter().enumerate() {
            if hooked(input) {
                casts.push(Cast {
                    input,
                    axis,
                    name: GRAD_HOOK,
                    from,
                    to: State::Reduced,
                });
            }
        }
        out.push(out_state);
    }
    Outcome::Infers { output: out, casts }
}

/// torch 2.14.1's pending reductions other than a sum, on one mesh dim
/// with every Varying operand `Shard(0)` and the reduction over dim 0
/// (SPEC.md §21.5): `mean` gives `Partial(avg)` (`mean_single_dim_strategy`)
/// and `amax` `Partial(max)` (`LINEAR_REDUCTION_OP_MAP`). `one_dim` cannot
/// say these, since its Partial is a pending sum; `None` elsewhere.
pub fn pending_output_shard0(op: OpClass, s: &[State]) -> Option<PartialKind> {
    match (op, s) {
        (OpClass::Mean, [State::Varying]) => Some(PartialKind::Avg),
        (OpClass::Max, [State::Varying]) => Some(PartialKind::Max),
        _ => None,
    }
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
        (Neg | ScalarMul | View | Cumsum, [x]) => (*x, vec![]),
        (Sum, [I]) => (I, vec![]),
        (Sum, [_]) => (P, vec![]),
        (Mean, [V]) => return not_sum("avg"),
        (Max, [V]) => return not_sum("max"),
        (Nonlinear | NarrowingCast | Mean | Max, [P]) => (I, vec![(0, I)]),
        (FloorDivision, [P, b]) => (*b, vec![(0, I)]),
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

/// A cast of this dialect spelled as a catalogue call in seed 003's names,
/// whose transpose seed 003's table gives (how generated programs run it):
/// each `redistribute` move as the collective DTensor performs, and the
/// grad-placement hook as `reinterpret(I,R)`, transposed by `all_reduce(I)`
/// (the hook's all-reduce of the gradient). Replicate() -> Partial() is
/// DTensor's division by n on every rank; `convert(I,P)` (rank 0 keeps the
/// value) has the same meaning and transpose.
pub fn cast_as_catalogue(name: &str, from: State, to: State) -> Option<&'static str> {
    use State::{Invariant as I, Partial as P, Reduced as R, Varying as V};
    Some(match (name, from, to) {
        (REDISTRIBUTE, I, V) => "convert(I,V, dim={d})",
        (REDISTRIBUTE, R, V) => "convert(R,V, dim={d})",
        (REDISTRIBUTE, V, I) => "all_gather(I, dim={d})",
        (REDISTRIBUTE, P, I) => "all_reduce(I)",
        (REDISTRIBUTE, P, V) => "reduce_scatter(dim={d})",
        (REDISTRIBUTE, I, P) => "convert(I,P)",
        (REDISTRIBUTE, R, P) => "convert(R,P)",
        // The hook after a move to Replicate(): the move and the hook's
        // all-reduce of the gradient together.
        (GRAD_HOOK, I, R) => "reinterpret(I,R)",
        (GRAD_HOOK, P, R) => "all_reduce(R)",
        (GRAD_HOOK, V, R) => "all_gather(R, dim={d})",
        _ => return None,
    })
}

/// How DTensor runs a cast its propagation inserts: by its table, else
/// its move as seed 003's call (`cast_as_catalogue`) with that call's
/// backward from the spmd_types table.
pub fn cast(name: &str, from: State, to: State) -> Option<(String, String)> {
    use crate::elaborate::{cast_by_table, fill, table_rows};
    if let Some(c) = cast_by_table("dtensor", name, from, to) {
        return Some(c);
    }
    let fwd = cast_as_catalogue(name, from, to)?;
    let (r, _, _) = table_rows("spmd_types").find(|(r, _, _)| r.forward == fwd)?;
    Some((fill(&r.forward), fill(r.backward.as_deref()?)))
}

crate::elaborate::table_collective_reader!("DTensor");

// ---------------------------------------------------------------------------
// Uneven shards (SPEC.md §23.9): DTensor's redistribute as torch 2.14.1
// implements it in `torch/distributed/tensor/placement_types.py`
// (`Shard._to_replicate_tensor`, `_maybe_pad_tensor`, `_maybe_unpad_tensor`,
// `_reduce_shard_tensor`, `_split_tensor`).

/// `Shard(dim) -> Replicate()`: when the logical length L does not divide
/// by n, every piece is padded (or cut, as a negative pad does) to
/// c = ⌈L/n⌉ rows, the padded pieces are gathered, and the trailing
/// n·c − L rows are dropped. Right exactly when the pieces are torch.chunk's.
pub fn padded_gather(xs: &[Tensor], dim: usize) -> Result<Vec<Tensor>, String> {
    let n = xs.len();
    if n == 0 {
        return Err("a gather over no ranks".into());
    }
    let len = xs.iter().try_fold(0usize, |a, x| {
        x.shape
            .get(dim)
            .map(|l| a + l)
            .ok_or_else(|| format!("no dim {dim} in a piece of shape {:?}", x.shape))
    })?;
    let gathered = if len % n == 0 {
        // The even branch: all_gather_single of equal pieces.
        if xs.iter().any(|x| x.shape[dim] != xs[0].shape[dim]) {
            return Err(format!(
                "all_gather_single of pieces of different lengths along dim {dim} (total {len}, which {n} divides)"
            ));
        }
        spmd_interp::uneven::concat(xs, dim)?
    } else {
        let c = len.div_ceil(n);
        let padded: Vec<Tensor> = xs
            .iter()
            .map(|x| {
                let have = x.shape[dim];
                if have >= c {
                    x.slice(dim, 0, c)
                } else {
                    let mut pad = x.shape.clone();
                    pad[dim] = c - have;
                    Tensor::concat(&[x.clone(), Tensor::zeros(&pad)], dim)
                }
            })
            .collect();
        spmd_interp::uneven::concat(&padded, dim)?.slice(dim, 0, len)
    };
    Ok(vec![gathered; n])
}

/// The collective DTensor runs for `redistribute(input -> output)` on one
/// mesh dim, uneven shards included.
pub fn redistribute(input: &Placement, output: &Placement) -> Result<StepFn, String> {
    use Placement::*;
    let chunk = |dim| Coll::Scatter {
        dim,
        split: Split::Chunk,
    };
    Ok(match (input, output) {
        (Shard(d, _), Inv | Red) => {
            let d = *d;
            Box::new(move |xs| padded_gather(xs, d))
        }
        // `_split_tensor`: torch.chunk of the local value, whatever split
        // the output claims.
        (Inv | Red, Shard(d, _)) => crate::uneven::boxed(chunk(*d)),
        // `_reduce_shard_tensor`: torch.chunk's pieces, padded to equal
        // length, reduce-scattered, unpadded: the chunk of the sum.
        (Part, Shard(d, _)) => crate::uneven::boxed(Coll::ReduceScatter {
            dim: *d,
            split: Split::Chunk,
        }),
        (Part, Inv | Red) => crate::uneven::boxed(Coll::AllReduce),
        // `_to_new_shard_dim`: an all_to_all to torch.chunk's pieces.
        (Shard(c, _), Shard(s, _)) if c != s => crate::uneven::boxed(Coll::AllToAll {
            split_dim: *s,
            concat_dim: *c,
            split: Split::Chunk,
        }),
        (a, b) if a == b => Box::new(|xs: &[Tensor]| Ok(xs.to_vec())),
        // `Shard._to_partial_tensor`: each rank's piece placed at its
        // torch.chunk offset in zeros of the logical shape; a piece of
        // another size than torch.chunk's fails its `torch._check`.
        (Shard(d, _), Part) => {
            let d = *d;
            Box::new(move |xs: &[Tensor]| {
                let len = xs.iter().try_fold(0usize, |a, x| {
                    x.shape
                        .get(d)
                        .map(|l| a + l)
                        .ok_or_else(|| format!("no dim {d} in a piece of shape {:?}", x.shape))
                })?;
                let sizes = Split::Chunk.sizes(len, xs.len())?;
                let mut at = 0;
                xs.iter()
                    .zip(&sizes)
                    .map(|(x, &k)| {
                        if x.shape[d] != k {
                            return Err(format!(
                                "a piece of {} rows where torch.chunk gives {k} (torch._check)",
                                x.shape[d]
                            ));
                        }
                        let mut before = x.shape.clone();
                        before[d] = at;
                        let mut after = x.shape.clone();
                        after[d] = len - at - k;
                        at += k;
                        spmd_interp::uneven::concat(
                            &[Tensor::zeros(&before), x.clone(), Tensor::zeros(&after)],
                            d,
                        )
                    })
                    .collect()
            })
        }
        (Inv | Red, Part) => {
            return Err(
                "DTensor refuses Replicate -> Partial(sum) in redistribute (only Shard to Partial(sum))"
                    .into(),
            )
        }
        _ => {
            return Err(format!(
                "redistribute {input} -> {output} is not modelled on uneven shards"
            ))
        }
    })
}

/// One step of DTensor's plan for a redistribute over several mesh dims:
/// the mesh dim it runs on and the move there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanStep {
    pub mesh_dim: usize,
    pub from: Placement,
    pub to: Placement,
}

/// DTensor's greedy plan (torch 2.14.1, `_redistribute.py`,
/// `generate_greedy_transform_infos`) from `src` to `dst`, one placement
/// per mesh dim (SPEC.md §23.20). With a shard in `src`, it first walks the
/// mesh dims from inner to outer: a dim whose target is `Shard(d)` while
/// the dims before it shard tensor dim d differently now and in the
/// target goes to Replicate() instead (the nested shard must be undone
/// first); every dim that differs moves. Then it walks outer to inner and
/// moves every dim still not at its target. Reduced counts as Replicate().
pub fn plan(src: &[Placement], dst: &[Placement]) -> Vec<PlanStep> {
    use Placement::*;
    let norm = |p: &Placement| match p {
        Red => Inv,
        q => q.clone(),
    };
    let mut cur: Vec<Placement> = src.iter().map(norm).collect();
    let dst: Vec<Placement> = dst.iter().map(norm).collect();
    let mut steps = Vec::new();
    let shards = |ps: &[Placement], d: usize, before: usize| -> Vec<usize> {
        ps.iter()
            .take(before)
            .enumerate()
            .filter(|(_, p)| matches!(p, Shard(k, _) if *k == d))
            .map(|(i, _)| i)
            .collect()
    };
    if cur.iter().any(|p| matches!(p, Shard(..))) && cur.len() > 1 {
        for m in (0..cur.len()).rev() {
            let mut target = dst[m].clone();
            if let Shard(d, _) = &target {
                if shards(&cur, *d, m) != shards(&dst, *d, m) {
                    target = Inv;
                }
            }
            if !same_move(&cur[m], &target) {
                steps.push(PlanStep {
                    mesh_dim: m,
                    from: cur[m].clone(),
                    to: target.clone(),
                });
                cur[m] = target;
            }
        }
    }
    for m in 0..cur.len() {
        if !same_move(&cur[m], &dst[m]) {
            steps.push(PlanStep {
                mesh_dim: m,
                from: cur[m].clone(),
                to: dst[m].clone(),
            });
            cur[m] = dst[m].clone();
        }
    }
    steps
}

/// Placements DTensor does not move between: equal, or two shards of one
/// tensor dim (DTensor compares `Shard(d)`, which has no split rule).
fn same_move(a: &Placement, b: &Placement) -> bool {
    match (a, b) {
        (Placement::Shard(x, _), Placement::Shard(y, _)) => x == y,
        _ => a == b,
    }
}

/// The ranks of each group that runs a step on `mesh_dim` of a row-major
/// mesh of these sizes: the ranks that differ only in that coordinate.
pub fn groups(sizes: &[usize], mesh_dim: usize) -> Vec<Vec<usize>> {
    let n: usize = sizes.iter().product();
    let stride: usize = sizes[mesh_dim + 1..].iter().product();
    let size = sizes[mesh_dim];
    (0..n)
        .filter(|r| (r / stride).is_multiple_of(size))
        .map(|r| (0..size).map(|k| r + k * stride).collect())
        .collect()
}

/// `redistribute` over several mesh dims (SPEC.md §23.20): DTensor's plan,
/// each step the one-dim `redistribute` of this file run on every group of
/// ranks along its mesh dim.
pub fn redistribute_nested(
    sizes: &[usize],
    src: &[Placement],
    dst: &[Placement],
) -> Result<StepFn, String> {
    if sizes.len() != src.len() || sizes.len() != dst.len() || sizes.is_empty() {
        return Err(format!(
            "{} placements and {} for a mesh of {} dims",
            src.len(),
            dst.len(),
            sizes.len()
        ));
    }
    run_plan(sizes, plan(src, dst))
}

/// The placement DTensor holds a placement as: a Reduced value (the
/// cotangent of a Partial one, a Partial input's gradient) is
/// Replicate().
pub fn held(p: &Placement) -> Placement {
    match p {
        Placement::Red => Placement::Inv,
        other => other.clone(),
    }
}

/// [`held`], axis by axis.
pub fn held_nested(p: &spmd_semantics::uneven::Nested) -> Vec<Placement> {
    p.axes.iter().map(|(_, q)| held(q)).collect()
}

/// DTensor's backward of a redistribute over several mesh dims (SPEC.md
/// §23.20): its plan from the output's cotangent back to the input's, and
/// that plan's steps.
pub fn redistribute_nested_backward(
    sizes: &[usize],
    input: &spmd_semantics::uneven::Nested,
    output: &spmd_semantics::uneven::Nested,
) -> Result<(StepFn, Vec<PlanStep>), String> {
    use spmd_semantics::uneven::Placed;
    let (cin, cout) = (held_nested(&input.cot()), held_nested(&output.cot()));
    Ok((redistribute_nested(sizes, &cout, &cin)?, plan(&cout, &cin)))
}

/// Runs the steps of a plan in order, each on every group of ranks along
/// its mesh dim (a row-major mesh of these sizes).
pub fn run_plan(sizes: &[usize], plan: Vec<PlanStep>) -> Result<StepFn, String> {
    if sizes.is_empty() || plan.iter().any(|s| s.mesh_dim >= sizes.len()) {
        return Err(format!("a plan for a mesh of {} dims", sizes.len()));
    }
    let steps: Vec<(Vec<Vec<usize>>, StepFn)> = plan
        .into_iter()
        .map(|s| Ok((groups(sizes, s.mesh_dim), redistribute(&s.from, &s.to)?)))
        .collect::<Result<_, String>>()?;
    let n: usize = sizes.iter().product();
    Ok(Box::new(move |xs: &[Tensor]| {
        if xs.len() != n {
            return Err(format!("{} ranks for a mesh of {n}", xs.len()));
        }
        let mut cur = xs.to_vec();
        for (gs, f) in &steps {
            for g in gs {
                let pieces: Vec<Tensor> = g.iter().map(|&r| cur[r].clone()).collect();
                let out = f(&pieces)?;
                for (&r, t) in g.iter().zip(out) {
                    cur[r] = t;
                }
            }
        }
        Ok(cur)
    }))
}

/// How `redistribute` runs, in words.
pub fn redistribute_words(input: &Placement, output: &Placement) -> &'static str {
    use Placement::*;
    match (input, output) {
        (Shard(..), Inv | Red) => "pad to ceil(L/n) rows, all_gather, drop the trailing padding",
        (Inv | Red, Shard(..)) => "a local torch.chunk",
        (Part, Shard(..)) => "pad, reduce_scatter, unpad (torch.chunk's pieces of the sum)",
        (Part, Inv | Red) => "all_reduce",
        (Shard(..), Part) => "each piece in place, zeros elsewhere (no traffic)",
        (Shard(..), Shard(..)) => "all_to_all to torch.chunk's pieces",
        _ => "no collective",
    }
}

// ---------------------------------------------------------------------------
// `allow_uneven_sharding` (SPEC.md §23.16): the flag each single-dim
// strategy carries in torch 2.14.1, recorded by
// peers/record_uneven_dtensor_ops.py into tables/dtensor_allow_uneven.toml.
// A strategy is dropped when an input's sharded dim has fewer rows than
// ranks (`is_tensor_shardable`), unless its flag is set and the input
// already has the strategy's placement; DTensor then redistributes to
// Replicate first.

#[derive(serde::Deserialize)]
struct AllowUneven {
    torch: String,
    allow_uneven_sharding: std::collections::BTreeMap<String, bool>,
}

fn allow_table() -> &'static AllowUneven {
    static T: std::sync::OnceLock<AllowUneven> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        toml::from_str(include_str!("../tables/dtensor_allow_uneven.toml"))
            .expect("the recorded table parses (tested)")
    })
}

/// The torch version the flags were recorded from.
pub fn allow_uneven_version() -> &'static str {
    &allow_table().torch
}

/// The flag of an aten op's single-dim strategy; `None` when it has none.
pub fn allow_uneven_sharding(aten: &str) -> Option<bool> {
    allow_table().allow_uneven_sharding.get(aten).copied()
}

/// How many strategies are recorded, and how many allow uneven sharding.
pub fn allow_uneven_counts() -> (usize, usize) {
    let t = &allow_table().allow_uneven_sharding;
    (t.len(), t.values().filter(|v| **v).count())
}

/// The aten op DTensor dispatches a built-in op of this tool to.
pub fn aten_of(builtin: &str) -> Option<&'static str> {
    Some(match builtin {
        "add" => "aten.add.Tensor",
        "sub" => "aten.sub.Tensor",
        "mul" => "aten.mul.Tensor",
        "div" => "aten.div.Tensor",
        "neg" => "aten.neg.default",
        "relu" => "aten.relu.default",
        "abs" => "aten.abs.default",
        "sum" => "aten.sum.dim_IntList",
        "mean" => "aten.mean.dim",
        "matmul" => "aten.mm.default",
        "transpose" => "aten.t.default",
        "reshape" => "aten.view.default",
        _ => return None,
    })
}

/// Whether DTensor keeps the written strategy for inputs of these global
/// shapes on `n` ranks: every sharded dim has at least n rows, or the
/// strategy allows uneven sharding (the inputs are written in the
/// strategy's placements). `Err` says what DTensor does instead.
pub fn keeps_strategy(
    aten: &str,
    flag: bool,
    n: usize,
    inputs: &[Placement],
    shapes: &[Vec<usize>],
) -> Result<(), String> {
    if flag {
        return Ok(());
    }
    for (p, s) in inputs.iter().zip(shapes) {
        if let Placement::Shard(d, _) = p {
            if s.get(*d).is_some_and(|&l| l < n) {
                return Err(format!(
                    "{aten} does not allow uneven sharding: a dim of {} rows over {n} ranks drops the strategy, and DTensor redistributes to Replicate() first",
                    s[*d]
                ));
            }
        }
    }
    Ok(())
}
