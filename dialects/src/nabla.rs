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

use crate::uneven::StepFn;
use crate::{columns, malformed, Cast, OpClass, Outcome, System};
use spmd_interp::uneven::Coll;
use spmd_semantics::uneven::{Placement, Split};
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "nabla",
    dialect: Dialect::Nabla,
    seeds: "002, 004",
    typing,
    cast,
    collective,
};

/// The released Nabla, nabla-ml 26.2251344 (PyPI), as recorded in
/// `tests/fixtures/nabla_typing_26.2251344.json` (SPEC.md §16.4): asked for
/// by name, `nabla@26.2251344`. Not the seeds' rules: what the release does.
pub const SYSTEM_26_2251344: System = System {
    name: "nabla@26.2251344",
    dialect: Dialect::Nabla,
    seeds: "none: nabla-ml 26.2251344 as recorded",
    typing: typing_26_2251344,
    cast,
    collective,
};

/// Which Nabla: the seeds' rules (the default `nabla`) or a recorded
/// release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// Seeds 002 and 004 (`nabla`).
    Seeds,
    /// nabla-ml 26.2251344 as released (`nabla@26.2251344`).
    V26_2251344,
}

impl Version {
    /// The version a fixture records (`26.2251344`); any other is the seeds'.
    pub fn of(recorded: &str) -> Version {
        match recorded {
            "26.2251344" => Version::V26_2251344,
            _ => Version::Seeds,
        }
    }
    pub fn system(self) -> &'static System {
        match self {
            Version::Seeds => &SYSTEM,
            Version::V26_2251344 => &SYSTEM_26_2251344,
        }
    }
}

/// The op classes the recording of nabla-ml 26.2251344 covers, on 2, 3 and
/// 4 ranks (the fixture's `op` in brackets):
/// neg, scalar mul (`mul_const`), nonlinear (`relu`, `abs`, `add_const`),
/// sum, mean, max, cumsum, views (`slice`, `transpose`, `reshape`), the
/// narrowing cast (`cast_f32`), add, sub, mul, division, concat, matmul.
fn recorded_26_2251344(op: OpClass) -> bool {
    !matches!(op, OpClass::Einsum | OpClass::FloorDivision)
}

/// The cast the release inserts before an op that meets a sharded operand
/// with a replicated or partial one: it gathers the sharded operand.
pub const ALL_GATHER: &str = "all_gather";

/// nabla-ml 26.2251344 as recorded (every case of the fixture; sharded
/// operands are sharded along dim 0 of a vector), per mesh axis:
/// - any partial operand and no sharded one: partial, no collective (the
///   union of the operands' partial axes, `core/sharding/spmd.py`'s
///   pure-partial path); replicated operands alone: replicated;
/// - every operand sharded: sharded, no collective (elementwise ops,
///   concatenate, cumsum and slice run on the local blocks);
/// - a sharded operand beside a replicated or partial one: the sharded one
///   is all-gathered, then as above (partial if any operand is partial);
/// - sum, mean and max of a sharded operand reduce each block and then
///   all-reduce: the one-axis type does not say whether the sharded dim is
///   the reduced one, so `Unknown`.
///
/// It refuses nothing. Matmul and einsum of a sharded operand, floor
/// division and einsum at all were not recorded: `Unknown`.
pub fn typing_26_2251344(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    use OpClass::*;
    let Some(cols) = columns(inputs) else {
        return malformed();
    };
    if inputs.iter().any(|t| t.contains(&State::Reduced)) {
        return Outcome::Unknown("Nabla has no Reduced state".into());
    }
    if !recorded_26_2251344(op) {
        return Outcome::Unknown(format!(
            "nabla-ml 26.2251344 was not recorded on {}",
            op.name()
        ));
    }
    let mut out = Vec::new();
    let mut casts = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        if col.contains(&State::Varying) {
            match op {
                Sum | Mean | Max => {
                    return Outcome::Unknown(format!(
                        "mesh axis {a}: nabla-ml 26.2251344 reduces each block and all-reduces when the reduced dim is the sharded one; a one-axis type does not say which dim is sharded"
                    ))
                }
                Matmul | Einsum => {
                    return Outcome::Unknown(format!(
                        "mesh axis {a}: nabla-ml 26.2251344 was not recorded on {} of a sharded operand",
                        op.name()
                    ))
                }
                _ => {}
            }
            if col.iter().all(|&s| s == State::Varying) {
                out.push(State::Varying);
                continue;
            }
            for (i, &s) in col.iter().enumerate() {
                if s == State::Varying {
                    casts.push(Cast {
                        input: i,
                        axis: a,
                        name: ALL_GATHER,
                        from: State::Varying,
                        to: State::Invariant,
                    });
                }
            }
        }
        out.push(if col.contains(&State::Partial) {
            State::Partial
        } else {
            State::Invariant
        });
    }
    Outcome::Infers { output: out, casts }
}

/// The cast Nabla inserts to force a pending sum.
pub const ALL_REDUCE: &str = "all_reduce";
pub const CASTS: &[&str] = &[ALL_REDUCE, ALL_GATHER];

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
        Neg | ScalarMul | View | Sum | Mean | Cumsum if col.len() == 1 => OnPartial::Defer,
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
        Nonlinear | Max | NarrowingCast | FloorDivision => OnPartial::Force,
        Division => OnPartial::Unknown("seed 004 does not say whether division defers".into()),
        Neg | ScalarMul | View | Sum | Mean | Cumsum => {
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

/// What Nabla's factor propagation does with a reshape of a tensor sharded
/// along one dim (seed 002, "Reshaping"): the sharding flows to an output
/// dim, or the input must be gathered first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReshapeSharding {
    /// The output is sharded along this dim, with no communication.
    Keeps(usize),
    /// No output dim carries the sharded factor as a contiguous block: the
    /// input is gathered (replicated) before the reshape, and why.
    Gathers(String),
}

/// Reshape `input` to `output` (global shapes, row-major) with input dim
/// `dim` sharded evenly over `n` ranks. Seed 002 decomposes dims into
/// factors (`100 = 2 * 50`, `40 = 2 * 20`) to see which input factor flows
/// to which output dim. Stated exactly: rank r holds, for every index of the
/// dims before `dim`, a contiguous run of the row-major order, the r-th
/// n-th of the run spanned by `dim` and the dims after it. An output dim e
/// holds the same runs exactly when the dims before e span as many elements
/// as the dims before `dim` do and n divides the size of e; then the
/// sharding flows to e (the first such e of size above 1). Uneven shards
/// (seed 002's ceil division, a shorter last shard) are refused: the
/// semantics splits a dim evenly (SPEC.md §13.1).
pub fn reshape_sharding(
    input: &[usize],
    output: &[usize],
    dim: usize,
    n: usize,
) -> Result<ReshapeSharding, String> {
    let prod = |s: &[usize]| s.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
    let (Some(pi), Some(po)) = (prod(input), prod(output)) else {
        return Err("shape too large".into());
    };
    if pi != po {
        return Err(format!(
            "reshape from {input:?} to {output:?} changes the number of elements"
        ));
    }
    if n == 0 || dim >= input.len() {
        return Err(format!("no dim {dim} of {input:?} to shard over {n} ranks"));
    }
    if !input[dim].is_multiple_of(n) {
        return Err(format!(
            "dim {dim} of size {} does not split evenly over {n} ranks (Nabla's ceil-division shards are not modelled)",
            input[dim]
        ));
    }
    let before = prod(&input[..dim]).unwrap_or(usize::MAX);
    let mut acc = 1usize;
    for (e, &size) in output.iter().enumerate() {
        if acc == before && size > 1 && size.is_multiple_of(n) {
            return Ok(ReshapeSharding::Keeps(e));
        }
        acc = acc.saturating_mul(size);
    }
    Ok(ReshapeSharding::Gathers(format!(
        "no dim of {output:?} holds the {n} contiguous blocks of dim {dim} of {input:?}"
    )))
}

/// How Nabla runs a cast its typing inserts: by its table, its forced
/// all-reduce of a partial input (Partial to Invariant), and the release's
/// all-gather of a sharded one (Varying to Invariant).
pub fn cast(name: &str, from: State, to: State) -> Option<(String, String)> {
    use crate::elaborate::{fill, table_rows};
    let own = [(
        "all_reduce",
        State::Partial,
        State::Invariant,
        "all_reduce(I)",
        "reinterpret(I,R)",
    )];
    if let Some(c) = crate::elaborate::cast_by_table_or("nabla", &own, name, from, to) {
        return Some(c);
    }
    // The release's gather of a sharded operand (nabla@26.2251344): seed
    // 003's all_gather to Invariant, with that table's backward.
    if (name, from, to) != (ALL_GATHER, State::Varying, State::Invariant) {
        return None;
    }
    let (r, _, _) =
        table_rows("spmd_types").find(|(r, _, _)| r.forward == "all_gather(I, dim={d})")?;
    Some((fill(&r.forward), fill(r.backward.as_deref()?)))
}

crate::elaborate::table_collective_reader!("Nabla");

// ---------------------------------------------------------------------------
// Uneven shards (SPEC.md §23.9), from nabla-ml 26.2251344's
// `nabla/ops/communication/`: shards by ceil division; `reduce_scatter`
// (reduce_scatter.py, `compute_physical_shape`) and `all_to_all`
// (all_to_all.py) raise where the scattered dim does not divide by the
// number of shards; `all_gather`'s VJP (all_gather.py, `vjp_rule`) is a
// `reshard` of the cotangent back to the input's sharding, a local slice.

/// A scatter that raises, as Nabla's does, where the dim it cuts does not
/// divide by the number of ranks.
pub fn divisible(c: Coll) -> StepFn {
    Box::new(move |xs| {
        let n = xs.len();
        let dim = match &c {
            Coll::ReduceScatter { dim, .. } => *dim,
            Coll::AllToAll { split_dim, .. } => *split_dim,
            _ => return c.forward(xs),
        };
        if let Some(len) = xs.first().and_then(|x| x.shape.get(dim)) {
            if len % n != 0 {
                let what = match c {
                    Coll::AllToAll { .. } => "all_to_all split axis",
                    _ => "reduce_scatter axis",
                };
                return Err(format!("{what} size {len} not divisible by {n}"));
            }
        }
        c.forward(xs)
    })
}

/// The backward Nabla picks on uneven shards.
pub fn uneven_backward(c: &Coll, input: &Placement) -> Option<(StepFn, String)> {
    match (c, input) {
        (Coll::AllGather { dim }, Placement::Shard(..)) => {
            let back = Coll::Scatter {
                dim: *dim,
                split: Split::Ceil,
            };
            Some((
                crate::uneven::boxed(back),
                "reshard to the input's sharding (a local slice by ceil division)".into(),
            ))
        }
        (Coll::ReduceScatter { dim, .. } | Coll::Scatter { dim, .. }, _) => {
            let back = Coll::AllGather { dim: *dim };
            let text = back.to_string();
            Some((crate::uneven::boxed(back), text))
        }
        _ => None,
    }
}
