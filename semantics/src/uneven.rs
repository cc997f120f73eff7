//! Uneven shards (SPEC.md §23.4): how a tensor dim of some length is split
//! over n ranks, and what per-rank pieces of different lengths denote.
//! The denotation stays concatenation in rank order; only the sizes vary.

use crate::q::Q;
use crate::tensor::Tensor;
use std::fmt;

/// How a dim is split over the ranks of one axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// DTensor's (torch.chunk, padded with empty shards): every rank
    /// `ceil(len / n)` rows while they last, so the last ranks may be
    /// shorter or empty.
    Chunk,
    /// Nabla's ceil division: the same sizes as `Chunk`, named as Nabla
    /// names it so that a rule reads back as written.
    Ceil,
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
            Split::Chunk | Split::Ceil => {
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

    /// Reads `chunk`, `ceil`, `divmod` or `sizes=[3, 2]` (SPEC.md §23.8).
    pub fn parse(text: &str) -> Result<Split, String> {
        let t = text.trim();
        match t {
            "chunk" => return Ok(Split::Chunk),
            "ceil" => return Ok(Split::Ceil),
            "divmod" => return Ok(Split::Divmod),
            _ => {}
        }
        let list = t
            .strip_prefix("sizes")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('='))
            .map(str::trim)
            .and_then(|r| r.strip_prefix('['))
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(|| {
                format!(
                    "`{t}` is not a split rule (expected chunk, ceil, divmod or sizes=[a, b, ...]){}",
                    crate::names::did_you_mean(t, ["chunk", "ceil", "divmod"])
                )
            })?;
        if list.trim().is_empty() {
            return Err(format!("`{t}`: sizes=[...] names one size per rank"));
        }
        let sizes = list
            .split(',')
            .map(|x| {
                let x = x.trim();
                x.parse::<usize>()
                    .ok()
                    .filter(|&v| v <= MAX_SIZE)
                    .ok_or_else(|| format!("`{x}` in `{t}` is not a size (0 to {MAX_SIZE})"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if sizes.len() > MAX_RANKS {
            return Err(format!(
                "`{t}` names {} sizes; an axis has at most {MAX_RANKS} ranks",
                sizes.len()
            ));
        }
        if sizes.iter().sum::<usize>() > MAX_SIZE {
            return Err(format!(
                "`{t}`: sizes totalling more than {MAX_SIZE} rows are beyond what exact checking of every basis pair finishes"
            ));
        }
        Ok(Split::Sizes(sizes))
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

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Split::Chunk => write!(f, "chunk"),
            Split::Ceil => write!(f, "ceil"),
            Split::Divmod => write!(f, "divmod"),
            Split::Sizes(s) => {
                let s: Vec<String> = s.iter().map(usize::to_string).collect();
                write!(f, "sizes=[{}]", s.join(", "))
            }
        }
    }
}

/// The most rows a written `sizes=[...]` may total: B3 is checked on
/// every pair of basis values, so larger dims do not finish in seconds.
pub const MAX_SIZE: usize = 32;
/// The most sizes a written `sizes=[...]` may name (ranks on one axis).
pub const MAX_RANKS: usize = 8;

/// A placement on one mesh axis whose shards may differ in length
/// (SPEC.md §23.8): Invariant, Reduced, a pending sum, or a shard of a
/// tensor dim split by a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    Inv,
    Red,
    Part,
    Shard(usize, Split),
}

impl Placement {
    /// SPEC.md §3, axis by axis: the cotangent's placement.
    pub fn cot(&self) -> Placement {
        match self {
            Placement::Inv => Placement::Inv,
            Placement::Red => Placement::Part,
            Placement::Part => Placement::Red,
            Placement::Shard(d, s) => Placement::Shard(*d, s.clone()),
        }
    }

    /// The global value per-rank tensors denote (SPEC.md §23.8): one copy
    /// where every rank holds the same tensor, the sum of equal shapes, or
    /// the concatenation of pieces of the sizes the split gives. `None`:
    /// not well formed.
    pub fn denote(&self, xs: &[Tensor]) -> Option<Tensor> {
        let first = xs.first()?;
        match self {
            Placement::Inv | Placement::Red => xs.iter().all(|x| x == first).then(|| first.clone()),
            Placement::Part => {
                if xs.iter().any(|x| x.shape != first.shape) {
                    return None;
                }
                let mut acc = first.clone();
                for x in &xs[1..] {
                    acc.add_scaled(&Q::one(), x);
                }
                Some(acc)
            }
            Placement::Shard(d, s) => s.denote(xs, *d),
        }
    }

    /// The local shape of every rank holding a value of `global` shape.
    pub fn local_shapes(&self, global: &[usize], n: usize) -> Result<Vec<Vec<usize>>, String> {
        match self {
            Placement::Shard(d, s) => {
                let len = *global
                    .get(*d)
                    .ok_or_else(|| format!("no dim {d} in a shape of rank {}", global.len()))?;
                Ok(s.sizes(len, n)?
                    .into_iter()
                    .map(|k| {
                        let mut l = global.to_vec();
                        l[*d] = k;
                        l
                    })
                    .collect())
            }
            _ => Ok(vec![global.to_vec(); n]),
        }
    }

    /// A basis of the per-rank values of `global` shape that are well
    /// formed here: a unit entry on one rank (Partial, Shard) or the same
    /// unit entry on every rank (Invariant, Reduced). Every well-formed
    /// value is a combination of these, so a linear map is decided on them.
    pub fn basis(&self, global: &[usize], n: usize) -> Result<Vec<Vec<Tensor>>, String> {
        let shapes = self.local_shapes(global, n)?;
        let zeros = || -> Vec<Tensor> { shapes.iter().map(|s| Tensor::zeros(s)).collect() };
        let mut out = Vec::new();
        match self {
            Placement::Inv | Placement::Red => {
                for e in 0..crate::tensor::numel(global) {
                    let mut v = zeros();
                    for t in &mut v {
                        t.data[e] = Q::one();
                    }
                    out.push(v);
                }
            }
            Placement::Part | Placement::Shard(..) => {
                for (r, s) in shapes.iter().enumerate() {
                    for e in 0..crate::tensor::numel(s) {
                        let mut v = zeros();
                        v[r].data[e] = Q::one();
                        out.push(v);
                    }
                }
            }
        }
        Ok(out)
    }

    /// One per-rank value denoting `v`: copies, `v` on the first rank and
    /// zeros on the others (a pending sum), or the split's pieces.
    pub fn distribute(&self, v: &Tensor, n: usize) -> Result<Vec<Tensor>, String> {
        match self {
            Placement::Inv | Placement::Red => Ok(vec![v.clone(); n]),
            Placement::Part => Ok((0..n)
                .map(|r| {
                    if r == 0 {
                        v.clone()
                    } else {
                        Tensor::zeros(&v.shape)
                    }
                })
                .collect()),
            Placement::Shard(d, s) => s.split(v, *d, n),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Inv => write!(f, "I"),
            Placement::Red => write!(f, "R"),
            Placement::Part => write!(f, "P"),
            Placement::Shard(d, s) => write!(f, "S({d}, {s})"),
        }
    }
}

/// What the checks of SPEC.md §23.10 need of a layout of per-rank values:
/// one placement on one axis, or nested placements over several axes.
pub trait Placed: Clone + fmt::Display {
    /// The cotangent's layout.
    fn cot(&self) -> Self;
    /// The global value per-rank tensors denote, if well formed.
    fn denote(&self, xs: &[Tensor]) -> Option<Tensor>;
    /// Every rank's local shape for a value of `global` shape on `n` ranks.
    fn local_shapes(&self, global: &[usize], n: usize) -> Result<Vec<Vec<usize>>, String>;
    /// Per-rank values spanning the well-formed values of `global` shape.
    fn basis(&self, global: &[usize], n: usize) -> Result<Vec<Vec<Tensor>>, String>;
    /// One per-rank value denoting `v`.
    fn distribute(&self, v: &Tensor, n: usize) -> Result<Vec<Tensor>, String>;
}

impl Placed for Placement {
    fn cot(&self) -> Self {
        Placement::cot(self)
    }
    fn denote(&self, xs: &[Tensor]) -> Option<Tensor> {
        Placement::denote(self, xs)
    }
    fn local_shapes(&self, global: &[usize], n: usize) -> Result<Vec<Vec<usize>>, String> {
        Placement::local_shapes(self, global, n)
    }
    fn basis(&self, global: &[usize], n: usize) -> Result<Vec<Vec<Tensor>>, String> {
        Placement::basis(self, global, n)
    }
    fn distribute(&self, v: &Tensor, n: usize) -> Result<Vec<Tensor>, String> {
        Placement::distribute(self, v, n)
    }
}

/// Placements over several mesh axes (SPEC.md §23.20), outermost (mesh dim
/// 0) first, each with its axis size. Ranks are numbered row-major over
/// the mesh. A value is placed as DTensor places it: the outermost
/// placement splits (or copies, or partitions) the global value over mesh
/// dim 0, and each piece is placed again by the rest over the remaining
/// dims; so `[S(0), S(0)]` splits a dim and then each of its pieces.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Nested {
    pub axes: Vec<(usize, Placement)>,
}

impl Nested {
    /// The number of ranks: the product of the axis sizes.
    pub fn ranks(&self) -> usize {
        self.axes.iter().map(|a| a.0).product()
    }

    fn inner(&self) -> Nested {
        Nested {
            axes: self.axes[1..].to_vec(),
        }
    }

    fn check_ranks(&self, n: usize) -> Result<(), String> {
        if self.axes.is_empty() {
            return Err("a layout over no mesh axes".into());
        }
        if n != self.ranks() {
            return Err(format!("{n} ranks for a mesh of {}", self.ranks()));
        }
        Ok(())
    }
}

impl fmt::Display for Nested {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ps: Vec<String> = self.axes.iter().map(|a| a.1.to_string()).collect();
        let ns: Vec<String> = self.axes.iter().map(|a| a.0.to_string()).collect();
        write!(f, "[{}] on {}", ps.join(", "), ns.join("x"))
    }
}

impl Placed for Nested {
    fn cot(&self) -> Self {
        Nested {
            axes: self.axes.iter().map(|(n, p)| (*n, p.cot())).collect(),
        }
    }

    fn denote(&self, xs: &[Tensor]) -> Option<Tensor> {
        self.check_ranks(xs.len()).ok()?;
        let (n0, p0) = &self.axes[0];
        if self.axes.len() == 1 {
            return p0.denote(xs);
        }
        let inner = self.inner();
        let per = inner.ranks();
        let pieces: Option<Vec<Tensor>> = (0..*n0)
            .map(|i| inner.denote(&xs[i * per..(i + 1) * per]))
            .collect();
        p0.denote(&pieces?)
    }

    fn local_shapes(&self, global: &[usize], n: usize) -> Result<Vec<Vec<usize>>, String> {
        self.check_ranks(n)?;
        let (n0, p0) = &self.axes[0];
        let outer = p0.local_shapes(global, *n0)?;
        if self.axes.len() == 1 {
            return Ok(outer);
        }
        let inner = self.inner();
        let mut out = Vec::with_capacity(n);
        for s in &outer {
            out.extend(inner.local_shapes(s, inner.ranks())?);
        }
        Ok(out)
    }

    fn distribute(&self, v: &Tensor, n: usize) -> Result<Vec<Tensor>, String> {
        self.check_ranks(n)?;
        let (n0, p0) = &self.axes[0];
        let outer = p0.distribute(v, *n0)?;
        if self.axes.len() == 1 {
            return Ok(outer);
        }
        let inner = self.inner();
        let mut out = Vec::with_capacity(n);
        for t in &outer {
            out.extend(inner.distribute(t, inner.ranks())?);
        }
        Ok(out)
    }

    /// A spanning set, axis by axis. Where the outermost placement gives
    /// each group of ranks its own piece (a shard, a pending sum), it is
    /// the inner spanning set of each group's piece with the other groups
    /// zero. Where every group must denote one value (Invariant,
    /// Reduced), it is each inner element b in the first group with the
    /// other groups holding the inner distribution of what b denotes, and
    /// for each other group, b minus the distribution of what b denotes
    /// (a value denoting zero), the rest zero. Any well-formed value is a
    /// combination of these, as distribution is linear.
    fn basis(&self, global: &[usize], n: usize) -> Result<Vec<Vec<Tensor>>, String> {
        self.check_ranks(n)?;
        let (n0, p0) = &self.axes[0];
        if self.axes.len() == 1 {
            return p0.basis(global, n);
        }
        let inner = self.inner();
        let per = inner.ranks();
        let shapes = self.local_shapes(global, n)?;
        let zeros = || -> Vec<Tensor> { shapes.iter().map(|s| Tensor::zeros(s)).collect() };
        let outer = p0.local_shapes(global, *n0)?;
        let mut out = Vec::new();
        match p0 {
            Placement::Part | Placement::Shard(..) => {
                for (i, s) in outer.iter().enumerate() {
                    for b in inner.basis(s, per)? {
                        let mut v = zeros();
                        v[i * per..(i + 1) * per].clone_from_slice(&b);
                        out.push(v);
                    }
                }
            }
            Placement::Inv | Placement::Red => {
                for b in inner.basis(global, per)? {
                    let d = inner
                        .denote(&b)
                        .ok_or("an inner spanning value is not well formed")?;
                    let canon = inner.distribute(&d, per)?;
                    let mut v = zeros();
                    v[..per].clone_from_slice(&b);
                    for i in 1..*n0 {
                        v[i * per..(i + 1) * per].clone_from_slice(&canon);
                    }
                    out.push(v);
                    if b != canon {
                        let diff: Vec<Tensor> = b
                            .iter()
                            .zip(&canon)
                            .map(|(x, c)| {
                                let mut t = x.clone();
                                t.add_scaled(&Q::int(-1), c);
                                t
                            })
                            .collect();
                        for i in 1..*n0 {
                            let mut v = zeros();
                            v[i * per..(i + 1) * per].clone_from_slice(&diff);
                            out.push(v);
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The pairing of two global values of one shape (SPEC.md §3): the sum of
/// their entrywise products; `None` for different shapes.
pub fn pair(a: &Tensor, b: &Tensor) -> Option<Q> {
    (a.shape == b.shape).then(|| {
        a.data
            .iter()
            .zip(&b.data)
            .fold(Q::zero(), |acc, (x, y)| acc.add(&x.mul(y)))
    })
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
