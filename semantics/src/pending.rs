//! Pending reductions of several kinds (SPEC.md §21.1): a Partial value on
//! a mesh axis whose reduction over the ranks is a sum, a mean, an
//! elementwise maximum or an elementwise minimum.
//!
//! A kind refines the Partial state of one axis of a `Type` (`Type::kinds`),
//! as a layout refines a Varying one; `State::Partial` alone is the pending
//! sum of SPEC.md §1.1. This module holds what a kind means: ⊕ₖ over one
//! axis (`fold_col`, `combine`), and what one axis contributes to a global
//! value (`Place`, `denote`), which `perrank::Projection` folds with too.
//! Conventions: `k` a kind, `xs` one tensor per rank of the axis, in rank
//! order.

use crate::q::Q;
use crate::tensor::{same_shape, Tensor};
use std::fmt;

/// The reduction a Partial value still owes along one mesh axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PartialKind {
    /// Σ_r x_r: spmd-check's `P`, DTensor's `Partial()` / `Partial("sum")`,
    /// JAX's `Unreduced` (kind `sum`).
    Sum,
    /// (Σ_r x_r) / n: DTensor's `Partial("avg")`; JAX has no such kind.
    Avg,
    /// max_r x_r elementwise: DTensor's `Partial("max")`, JAX's
    /// `UnreducedKind.max` (jax 0.11, not 0.10.2).
    Max,
    /// min_r x_r elementwise: DTensor's `Partial("min")`, JAX's
    /// `UnreducedKind.min`.
    Min,
}

pub const ALL_KINDS: [PartialKind; 4] = [
    PartialKind::Sum,
    PartialKind::Avg,
    PartialKind::Max,
    PartialKind::Min,
];

impl PartialKind {
    /// The word DTensor's `Partial(reduce_op)` and this tool use.
    pub fn name(self) -> &'static str {
        match self {
            PartialKind::Sum => "sum",
            PartialKind::Avg => "avg",
            PartialKind::Max => "max",
            PartialKind::Min => "min",
        }
    }

    /// Reads a kind: `sum`, `avg` (or `mean`), `max`, `min`.
    pub fn parse(s: &str) -> Result<PartialKind, String> {
        match s.trim() {
            "sum" => Ok(PartialKind::Sum),
            "avg" | "mean" => Ok(PartialKind::Avg),
            "max" => Ok(PartialKind::Max),
            "min" => Ok(PartialKind::Min),
            other => Err(format!(
                "unknown pending reduction `{other}` (kinds: sum, avg, max, min)"
            )),
        }
    }

    /// Reads DTensor's placement spelling: `Partial()` is a sum,
    /// `Partial(avg)` / `Partial("max")` name their kind.
    pub fn from_dtensor(p: &str) -> Option<PartialKind> {
        let inner = p.trim().strip_prefix("Partial(")?.strip_suffix(')')?;
        let inner = inner.trim().trim_matches(|c| c == '"' || c == '\'');
        if inner.is_empty() {
            return Some(PartialKind::Sum);
        }
        PartialKind::parse(inner).ok()
    }

    /// DTensor's spelling of the placement.
    pub fn dtensor(self) -> String {
        format!("Partial({})", self.name())
    }

    /// JAX's `UnreducedKind` member, where JAX has the kind.
    pub fn jax(self) -> Option<&'static str> {
        match self {
            PartialKind::Sum => Some("UnreducedKind.sum"),
            PartialKind::Avg => None,
            PartialKind::Max => Some("UnreducedKind.max"),
            PartialKind::Min => Some("UnreducedKind.min"),
        }
    }

    /// Sum and avg are linear in the per-rank values; max and min are not
    /// (they are piecewise linear, with kinks at ties).
    pub fn is_linear(self) -> bool {
        match self {
            PartialKind::Sum | PartialKind::Avg => true,
            PartialKind::Max | PartialKind::Min => false,
        }
    }
}

impl fmt::Display for PartialKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// ⊕_k over the ranks of one axis (SPEC.md §21.1): what a Partial(k) value
/// with per-rank tensors `xs` denotes. An empty group or tensors of
/// different shapes have no denotation.
pub fn combine(k: PartialKind, xs: &[Tensor]) -> Result<Tensor, String> {
    let Some(first) = xs.first() else {
        return Err("a pending reduction over no rank".into());
    };
    if let Some(bad) = xs.iter().find(|x| !same_shape(&x.shape, &first.shape)) {
        return Err(format!(
            "per-rank tensors of different shapes {:?} and {:?}",
            first.shape, bad.shape
        ));
    }
    let n = xs.len();
    let data = (0..first.numel())
        .map(|i| fold_col(k, n, xs.iter().map(|x| &x.data[i])))
        .collect();
    Ok(Tensor::new(first.shape.clone(), data))
}

/// What one axis of a type contributes to the global value (SPEC.md
/// §21.1): `Type::place` of that axis. Invariant and Reduced are one
/// value (`Inv`, DTensor's `Replicate()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// The same tensor on every rank (Invariant, DTensor's `Replicate()`).
    Inv,
    /// One tensor per rank, owing the reduction `k`.
    Part(PartialKind),
    /// One piece per rank of a global tensor split evenly along dim `d`.
    Shard(usize),
}

impl Place {
    /// Reads `I`, `R`, `Replicate()`, `Invariant`, `Partial()`,
    /// `Partial(max)`, `P(avg)`, `Unreduced(min)`, `S(0)`, `Shard(0)`.
    pub fn parse(s: &str) -> Result<Place, String> {
        let t = s.trim();
        match t {
            "I" | "R" | "Invariant" | "Replicate" | "Replicate()" => return Ok(Place::Inv),
            "P" | "Partial" | "Partial()" | "Unreduced" => {
                return Ok(Place::Part(PartialKind::Sum))
            }
            _ => {}
        }
        let inner = |pre: &str| {
            t.strip_prefix(pre)
                .and_then(|r| r.strip_suffix(')'))
                .map(|r| r.trim().trim_matches(|c| c == '"' || c == '\''))
        };
        for pre in ["Partial(", "P(", "Unreduced("] {
            if let Some(k) = inner(pre) {
                return PartialKind::parse(k).map(Place::Part);
            }
        }
        for pre in ["Shard(", "S("] {
            if let Some(d) = inner(pre) {
                return d
                    .parse::<usize>()
                    .map(Place::Shard)
                    .map_err(|_| format!("`{t}`: the dim of a shard is a number"));
            }
        }
        Err(format!(
            "unknown placement `{t}` (Replicate(), Partial(sum|avg|max|min), Shard(d))"
        ))
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Inv => f.write_str("I"),
            Place::Part(k) => write!(f, "P({k})"),
            Place::Shard(d) => write!(f, "S({d})"),
        }
    }
}

/// What `xs` (one tensor per rank) denotes under `p`; `None` where they are
/// not well formed for it.
pub fn denote(p: Place, xs: &[Tensor]) -> Option<Tensor> {
    match p {
        Place::Inv => xs.iter().all(|x| x == &xs[0]).then(|| xs[0].clone()),
        Place::Part(k) => combine(k, xs).ok(),
        Place::Shard(d) => {
            let s = &xs[0].shape;
            (d < s.len() && xs.iter().all(|x| x.shape == *s)).then(|| Tensor::concat(xs, d))
        }
    }
}

/// `denote` into `out`, reusing its buffers: `false` where `xs` are not
/// well formed for `p` (then `out` is unspecified).
pub fn denote_into(p: Place, xs: &[Tensor], out: &mut Tensor) -> bool {
    let first = &xs[0];
    match p {
        Place::Inv => {
            if !xs.iter().all(|x| x == first) {
                return false;
            }
            out.clone_from(first);
        }
        Place::Part(k) => {
            if !xs.iter().all(|x| same_shape(&x.shape, &first.shape)) {
                return false;
            }
            out.shape.clone_from(&first.shape);
            out.data.clear();
            let n = xs.len();
            out.data
                .extend((0..first.numel()).map(|e| fold_col(k, n, xs.iter().map(|x| &x.data[e]))));
        }
        Place::Shard(_) => match denote(p, xs) {
            Some(t) => *out = t,
            None => return false,
        },
    }
    true
}

/// Whether `xs` under `p` denote `want` (`None`: not well formed), that
/// is `denote(p, xs).map(|t| t == *want)`, compared in place.
pub fn denotes(p: Place, xs: &[Tensor], want: &Tensor) -> Option<bool> {
    let first = &xs[0];
    match p {
        Place::Inv => xs.iter().all(|x| x == first).then(|| first == want),
        Place::Part(k) => {
            if !xs.iter().all(|x| same_shape(&x.shape, &first.shape)) {
                return None;
            }
            let n = xs.len();
            Some(
                same_shape(&first.shape, &want.shape)
                    && (0..first.numel()).all(|e| {
                        let col = xs.iter().map(|x| &x.data[e]);
                        match k {
                            PartialKind::Max => col.max().expect("n >= 1") == &want.data[e],
                            PartialKind::Min => col.min().expect("n >= 1") == &want.data[e],
                            _ => fold_col(k, n, col) == want.data[e],
                        }
                    }),
            )
        }
        Place::Shard(_) => denote(p, xs).map(|t| t == *want),
    }
}

/// ⊕ₖ of one column: one element of the denotation of a Partial(k) axis
/// whose ranks hold `col` (`n` of them). Every denotation of a pending
/// kind, here and in `perrank::Projection`, folds with this.
pub fn fold_col<'q>(k: PartialKind, n: usize, col: impl Iterator<Item = &'q Q>) -> Q {
    match k {
        PartialKind::Sum => col.fold(Q::zero(), |a, b| a.add(b)),
        PartialKind::Avg => col
            .fold(Q::zero(), |a, b| a.add(b))
            .div(&Q::int(n as i64))
            .expect("n >= 1"),
        PartialKind::Max => col.max().expect("n >= 1").clone(),
        PartialKind::Min => col.min().expect("n >= 1").clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[i64]) -> Tensor {
        Tensor::new(vec![xs.len()], xs.iter().map(|&x| Q::int(x)).collect())
    }

    #[test]
    fn each_kind_denotes_its_reduction() {
        let xs = [v(&[1, -2]), v(&[3, 4]), v(&[-1, 1])];
        assert_eq!(combine(PartialKind::Sum, &xs).unwrap(), v(&[3, 3]));
        assert_eq!(combine(PartialKind::Max, &xs).unwrap(), v(&[3, 4]));
        assert_eq!(combine(PartialKind::Min, &xs).unwrap(), v(&[-1, -2]));
        let avg = combine(PartialKind::Avg, &xs).unwrap();
        assert_eq!(avg, v(&[1, 1]));
        // Twin: avg is not the sum (off by the group size 3).
        assert_ne!(avg, combine(PartialKind::Sum, &xs).unwrap());
    }

    #[test]
    fn avg_is_sum_over_n_on_every_group_size() {
        for n in 1..=4i64 {
            let xs: Vec<Tensor> = (0..n).map(|r| v(&[r * r - 2, 1 - r])).collect();
            let s = combine(PartialKind::Sum, &xs).unwrap();
            let a = combine(PartialKind::Avg, &xs).unwrap();
            assert_eq!(a.scale(&Q::int(n)), s, "n = {n}");
        }
    }

    #[test]
    fn bad_groups_have_no_denotation() {
        assert!(combine(PartialKind::Max, &[]).is_err());
        assert!(combine(PartialKind::Sum, &[v(&[1]), v(&[1, 2])]).is_err());
    }

    #[test]
    fn names_round_trip() {
        for k in ALL_KINDS {
            assert_eq!(PartialKind::parse(k.name()).unwrap(), k);
            assert_eq!(PartialKind::from_dtensor(&k.dtensor()), Some(k));
        }
        assert_eq!(
            PartialKind::from_dtensor("Partial()"),
            Some(PartialKind::Sum)
        );
        assert_eq!(
            PartialKind::from_dtensor("Partial(\"max\")"),
            Some(PartialKind::Max)
        );
        assert_eq!(PartialKind::from_dtensor("Replicate()"), None);
        assert!(PartialKind::parse("prod").unwrap_err().contains("unknown"));
        assert_eq!(PartialKind::Avg.jax(), None);
    }
}
