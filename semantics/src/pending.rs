//! Pending reductions of several kinds (SPEC.md §21.1): a Partial value on
//! a mesh axis whose reduction over the ranks is a sum, a mean, an
//! elementwise maximum or an elementwise minimum.
//!
//! `State::P` (SPEC.md §1.1) is the pending sum and stays the only Partial
//! state of the core; the other kinds live beside it, here, with their
//! denotation, and are checked by the root package's `partial_kinds`
//! module. Conventions: `k` a kind, `xs` one tensor per rank of the axis, in
//! rank order.

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
    let n = Q::int(xs.len() as i64);
    let data = (0..first.numel())
        .map(|i| {
            let col = xs.iter().map(|x| &x.data[i]);
            match k {
                PartialKind::Sum => col.fold(Q::zero(), |a, b| a.add(b)),
                PartialKind::Avg => col
                    .fold(Q::zero(), |a, b| a.add(b))
                    .div(&n)
                    .expect("n >= 1"),
                PartialKind::Max => col.max().expect("nonempty").clone(),
                PartialKind::Min => col.min().expect("nonempty").clone(),
            }
        })
        .collect();
    Ok(Tensor::new(first.shape.clone(), data))
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
