//! Uneven shards (SPEC.md §23.4): how a tensor dim of some length is split
//! over n ranks, and what per-rank pieces of different lengths denote.
//! The denotation stays concatenation in rank order; only the sizes vary.

use crate::tensor::Tensor;

/// How a dim is split over the ranks of one axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Split {
    /// DTensor's (torch.chunk, padded with empty shards): every rank
    /// `ceil(len / n)` rows while they last, so the last ranks may be
    /// shorter or empty. Nabla's ceil division gives the same sizes.
    Chunk,
    /// The first `len mod n` ranks one row longer than the others.
    Divmod,
    /// Given sizes, one per rank (spmd_types' `split_sizes`).
    Sizes(Vec<usize>),
}

impl Split {
    /// The per-rank sizes of a dim of `len` over `n` ranks, or why there
    /// are none.
    pub fn sizes(&self, len: usize, n: usize) -> Result<Vec<usize>, String> {
        if n == 0 {
            return Err("a split over no ranks".into());
        }
        match self {
            Split::Chunk => {
                let c = len.div_ceil(n);
                Ok((0..n).map(|r| len.saturating_sub(r * c).min(c)).collect())
            }
            Split::Divmod => Ok((0..n).map(|r| len / n + usize::from(r < len % n)).collect()),
            Split::Sizes(s) => {
                if s.len() != n {
                    return Err(format!("{} sizes for {n} ranks", s.len()));
                }
                let total = s
                    .iter()
                    .try_fold(0usize, |a, &b| a.checked_add(b))
                    .ok_or("the sizes overflow")?;
                if total != len {
                    return Err(format!("sizes summing to {total} for a dim of {len}"));
                }
                Ok(s.clone())
            }
        }
    }

    /// The pieces of `t` along `dim`, one per rank.
    pub fn split(&self, t: &Tensor, dim: usize, n: usize) -> Result<Vec<Tensor>, String> {
        let len = *t
            .shape
            .get(dim)
            .ok_or_else(|| format!("no dim {dim} in a tensor of rank {}", t.rank()))?;
        let sizes = self.sizes(len, n)?;
        let mut at = 0;
        Ok(sizes
            .iter()
            .map(|&s| {
                let piece = t.slice(dim, at, at + s);
                at += s;
                piece
            })
            .collect())
    }

    /// What per-rank pieces denote under this split of `dim`: their
    /// concatenation, if every piece has the size the split gives it for
    /// the total length and the pieces agree on every other dim.
    pub fn denote(&self, xs: &[Tensor], dim: usize) -> Option<Tensor> {
        let first = xs.first()?;
        if dim >= first.rank()
            || xs.iter().any(|x| {
                x.rank() != first.rank()
                    || (0..first.rank()).any(|d| d != dim && x.shape[d] != first.shape[d])
            })
        {
            return None;
        }
        let len = xs.iter().map(|x| x.shape[dim]).sum();
        let sizes = self.sizes(len, xs.len()).ok()?;
        if xs.iter().zip(&sizes).any(|(x, &s)| x.shape[dim] != s) {
            return None;
        }
        Some(Tensor::concat(xs, dim))
    }
}

/// A one-step all_gather over a flattened mesh with pad-then-unpad
/// (SPEC.md §23.6): every piece padded with zero rows to the longest
/// `chunk` size c = ⌈L/n⌉ (L the pieces' total length along `dim`), the
/// padded pieces concatenated, then rank r's `chunk` size kept from its
/// padded block. Right when the pieces were split by one `chunk` over the
/// n ranks; pieces split dim by dim (DTensor's nested shards) come out
/// with rows lost and padding in their place.
pub fn flat_gather_padded(xs: &[Tensor], dim: usize) -> Option<Tensor> {
    let first = xs.first()?;
    if dim >= first.rank() {
        return None;
    }
    let len: usize = xs.iter().map(|x| x.shape[dim]).sum();
    let c = len.div_ceil(xs.len());
    let keep = Split::Chunk.sizes(len, xs.len()).ok()?;
    let mut kept = Vec::with_capacity(xs.len());
    for (x, &k) in xs.iter().zip(&keep) {
        let have = x.shape[dim];
        if have > c {
            return None;
        }
        let mut pad_shape = x.shape.clone();
        pad_shape[dim] = c - have;
        let padded = Tensor::concat(&[x.clone(), Tensor::zeros(&pad_shape)], dim);
        kept.push(padded.slice(dim, 0, k));
    }
    Some(Tensor::concat(&kept, dim))
}
