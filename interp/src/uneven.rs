//! Collectives on shards of different lengths (SPEC.md §23.9), on one
//! mesh axis: per rank, in rank order. Sizes come from the tensors each
//! rank holds (a gather concatenates what it receives) or from a split
//! rule (a scatter cuts by it), as NCCL-style `split_sizes` APIs do.
//! These are the collectives as the math defines them; a system's own
//! implementation (DTensor's pad and unpad) lives in its dialect.

use spmd_semantics::uneven::{Placement, Split};
use spmd_semantics::{Tensor, Q};
use std::fmt;

/// A collective or cast on one axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Coll {
    /// Every rank receives the concatenation of all pieces along `dim`.
    AllGather { dim: usize },
    /// Sum of equal shapes, cut along `dim` by `split`; rank r keeps piece r.
    ReduceScatter { dim: usize, split: Split },
    /// Every rank cuts its tensor along `split_dim` by `split` and sends
    /// piece j to rank j; rank j concatenates what it receives along
    /// `concat_dim`, in rank order.
    AllToAll {
        split_dim: usize,
        concat_dim: usize,
        split: Split,
    },
    /// Local: rank r keeps piece r of its (replicated) tensor.
    Scatter { dim: usize, split: Split },
    /// Sum of equal shapes on every rank.
    AllReduce,
}

impl fmt::Display for Coll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coll::AllGather { dim } => write!(f, "all_gather(dim={dim})"),
            Coll::ReduceScatter { dim, split } => {
                write!(f, "reduce_scatter(dim={dim}, split={split})")
            }
            Coll::AllToAll {
                split_dim,
                concat_dim,
                split,
            } => write!(
                f,
                "all_to_all(split_dim={split_dim}, concat_dim={concat_dim}, split={split})"
            ),
            Coll::Scatter { dim, split } => write!(f, "scatter(dim={dim}, split={split})"),
            Coll::AllReduce => write!(f, "all_reduce"),
        }
    }
}

fn sum(xs: &[Tensor]) -> Result<Tensor, String> {
    let first = xs.first().ok_or("no ranks")?;
    let mut acc = first.clone();
    for (r, x) in xs.iter().enumerate().skip(1) {
        if x.shape != first.shape {
            return Err(format!(
                "a sum over ranks of shapes {:?} (rank 0) and {:?} (rank {r})",
                first.shape, x.shape
            ));
        }
        acc.add_scaled(&Q::one(), x);
    }
    Ok(acc)
}

/// The concatenation of `xs` along `dim`, or why the pieces do not fit.
pub fn concat(xs: &[Tensor], dim: usize) -> Result<Tensor, String> {
    let first = xs.first().ok_or("no ranks")?;
    for (r, x) in xs.iter().enumerate() {
        if dim >= x.rank() {
            return Err(format!("rank {r}'s tensor has no dim {dim}"));
        }
        if x.rank() != first.rank()
            || (0..x.rank()).any(|d| d != dim && x.shape[d] != first.shape[d])
        {
            return Err(format!(
                "pieces of shapes {:?} (rank 0) and {:?} (rank {r}) do not concatenate along dim {dim}",
                first.shape, x.shape
            ));
        }
    }
    Ok(Tensor::concat(xs, dim))
}

impl Coll {
    /// The placements it converts between, given the input's placement
    /// (`None`: it does not apply to that placement).
    pub fn output(&self, input: &Placement, to_reduced: bool) -> Option<Placement> {
        let replicated = if to_reduced {
            Placement::Red
        } else {
            Placement::Inv
        };
        match (self, input) {
            (Coll::AllGather { dim }, Placement::Shard(d, _)) if d == dim => Some(replicated),
            (Coll::ReduceScatter { dim, split }, Placement::Part) => {
                Some(Placement::Shard(*dim, split.clone()))
            }
            (
                Coll::AllToAll {
                    split_dim,
                    concat_dim,
                    split,
                },
                Placement::Shard(d, _),
            ) if d == concat_dim => Some(Placement::Shard(*split_dim, split.clone())),
            (Coll::Scatter { dim, split }, Placement::Inv | Placement::Red) => {
                Some(Placement::Shard(*dim, split.clone()))
            }
            (Coll::AllReduce, Placement::Part) => Some(replicated),
            _ => None,
        }
    }

    /// The per-rank forward, or why these tensors do not fit it.
    pub fn forward(&self, xs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        let n = xs.len();
        match self {
            Coll::AllGather { dim } => Ok(vec![concat(xs, *dim)?; n]),
            Coll::AllReduce => Ok(vec![sum(xs)?; n]),
            Coll::ReduceScatter { dim, split } => split.split(&sum(xs)?, *dim, n),
            Coll::Scatter { dim, split } => xs
                .iter()
                .enumerate()
                .map(|(r, x)| Ok(split.split(x, *dim, n)?.swap_remove(r)))
                .collect(),
            Coll::AllToAll {
                split_dim,
                concat_dim,
                split,
            } => {
                let pieces = xs
                    .iter()
                    .map(|x| split.split(x, *split_dim, n))
                    .collect::<Result<Vec<_>, _>>()?;
                (0..n)
                    .map(|j| {
                        let got: Vec<Tensor> = pieces.iter().map(|p| p[j].clone()).collect();
                        concat(&got, *concat_dim)
                    })
                    .collect()
            }
        }
    }

    /// Entries sent between ranks (a ring model, as §10 counts): what
    /// every rank receives that it did not hold.
    pub fn traffic(&self, xs: &[Tensor]) -> usize {
        let n = xs.len();
        let sizes: Vec<usize> = xs.iter().map(Tensor::numel).collect();
        let total: usize = sizes.iter().sum();
        match self {
            Coll::AllGather { .. } => sizes.iter().map(|s| total - s).sum(),
            Coll::AllReduce => 2 * (n.saturating_sub(1)) * sizes.first().copied().unwrap_or(0),
            Coll::ReduceScatter { .. } => n.saturating_sub(1) * sizes.first().copied().unwrap_or(0),
            Coll::AllToAll { .. } => match self.forward(xs) {
                // Everything but the piece a rank keeps.
                Ok(out) => out
                    .iter()
                    .map(Tensor::numel)
                    .sum::<usize>()
                    .saturating_sub(self.kept(xs)),
                Err(_) => 0,
            },
            Coll::Scatter { .. } => 0,
        }
    }

    fn kept(&self, xs: &[Tensor]) -> usize {
        match self {
            Coll::AllToAll {
                split_dim, split, ..
            } => xs
                .iter()
                .enumerate()
                .map(|(r, x)| {
                    split
                        .split(x, *split_dim, xs.len())
                        .map_or(0, |p| p[r].numel())
                })
                .sum(),
            _ => 0,
        }
    }
}
