//! Per-rank values, well-formedness, denotation, equivalence and the pairing
//! (SPEC.md §2 and §3).
//!
//! Conventions (used across the workspace): `m: &Mesh`, `t: &Type`,
//! `x: &PerRank` for a primal, `g` for a cotangent, `r` for a rank,
//! `a` for a mesh axis index.
//!
//! A denotation is represented as a *full-rank family*: one tensor per rank,
//! constant along every axis whose state is not Varying. Two values of one
//! type are equivalent exactly when their families are equal, and the local
//! function of an op applies rank by rank to families (SPEC.md §2.4).

use crate::mesh::Mesh;
use crate::pending::{fold_col, PartialKind};
use crate::q::Q;
use crate::state::{State, Type};
use crate::tensor::{numel, Tensor};
use std::borrow::Cow;

/// A local tensor on every rank, indexed by linear rank.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct PerRank {
    pub tensors: Vec<Tensor>,
}

/// Why a per-rank value is not well formed (SPEC.md §2.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotWellFormed {
    pub axis: usize,
    pub rank: usize,
    pub other: usize,
}

impl PerRank {
    pub fn replicate(m: &Mesh, v: &Tensor) -> PerRank {
        PerRank {
            tensors: vec![v.clone(); m.num_ranks()],
        }
    }
    pub fn shape(&self) -> &[usize] {
        &self.tensors[0].shape
    }
    /// Turn this into zeros of `like`'s ranks and shapes, keeping the
    /// buffers it has (a workspace reused for cotangents).
    pub fn zero_as(&mut self, like: &PerRank) {
        self.tensors.truncate(like.tensors.len());
        for (r, t) in like.tensors.iter().enumerate() {
            match self.tensors.get_mut(r) {
                Some(z) => z.zero_as(&t.shape),
                None => self.tensors.push(Tensor::zeros(&t.shape)),
            }
        }
    }
    pub fn add(&self, o: &PerRank) -> PerRank {
        PerRank {
            tensors: self
                .tensors
                .iter()
                .zip(&o.tensors)
                .map(|(a, b)| a.add(b))
                .collect(),
        }
    }
    pub fn scale(&self, c: &Q) -> PerRank {
        PerRank {
            tensors: self.tensors.iter().map(|a| a.scale(c)).collect(),
        }
    }
    /// `self + h * dir`.
    pub fn axpy(&self, h: &Q, dir: &PerRank) -> PerRank {
        let mut out = self.clone();
        for (a, d) in out.tensors.iter_mut().zip(&dir.tensors) {
            a.add_scaled(h, d);
        }
        out
    }
    pub fn nonzeros(&self) -> usize {
        self.tensors.iter().map(Tensor::nonzeros).sum()
    }
}

/// SPEC.md §2.3: along every I or R axis, ranks that differ only in that
/// coordinate hold equal local tensors.
pub fn well_formed(m: &Mesh, t: &Type, x: &PerRank) -> Result<(), NotWellFormed> {
    let n = m.num_ranks();
    for (a, s) in t.states.iter().enumerate() {
        if !s.replicated() {
            continue;
        }
        let (st, size) = (axis_stride(m, a), m.axes[a].size);
        for r in 0..n {
            // `m.with_coord(r, a, 0)`, without building the coordinates.
            let r0 = r - (r / st % size) * st;
            if r0 != r && x.tensors[r] != x.tensors[r0] {
                return Err(NotWellFormed {
                    axis: a,
                    rank: r0,
                    other: r,
                });
            }
        }
    }
    Ok(())
}

/// How far apart in linear rank two ranks are that differ by one along axis
/// `a` (ranks are row-major over the axes, the last fastest).
fn axis_stride(m: &Mesh, a: usize) -> usize {
    m.axes[a + 1..].iter().map(|ax| ax.size).product()
}

/// Rank `r` with its coordinate set to 0 along every I and R axis of `t`
/// (its representative), computed without building coordinates.
fn representative(m: &Mesh, t: &Type, r: usize) -> usize {
    let mut p = r;
    for (a, s) in t.states.iter().enumerate() {
        if s.replicated() {
            let st = axis_stride(m, a);
            p -= (r / st % m.axes[a].size) * st;
        }
    }
    p
}

/// A denotation as a full-rank family (see the module comment).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Denot {
    pub family: Vec<Tensor>,
}

impl Denot {
    /// Every entry, member after member (the layout of `Projection::denote_flat`).
    pub fn flat(&self) -> Vec<Q> {
        self.family
            .iter()
            .flat_map(|t| t.data.iter().cloned())
            .collect()
    }
}

/// SPEC.md §2.4: sum over Partial axes (⊕ₖ where they owe another kind,
/// §21.1), coordinate 0 of Invariant and Reduced axes, Varying axes kept
/// as an index.
pub fn denote(m: &Mesh, t: &Type, x: &PerRank) -> Denot {
    Projection::new(m, t).denote(x)
}

/// The denotation map of one type on one mesh, precomputed: for every rank,
/// the ranks whose tensors sum to its family entry, and the first member
/// with the same sources (members along an Invariant, Reduced or Partial
/// axis repeat one sum, which is formed once).
#[derive(Clone, Debug)]
pub struct Projection {
    sources: Vec<Vec<usize>>,
    first: Vec<usize>,
    /// The reduction over the sources: a sum, unless the type's Partial
    /// axes owe another kind (SPEC.md §21.1; `Type::kinds`). A type whose
    /// Partial axes owe two different kinds is refused where it is read.
    kind: PartialKind,
}

impl Projection {
    /// The ranks whose tensors sum to family member `r` (SPEC.md §2.4).
    pub fn sources(&self, r: usize) -> &[usize] {
        &self.sources[r]
    }
    pub fn new(m: &Mesh, t: &Type) -> Projection {
        let sources = (0..m.num_ranks())
            .map(|r| {
                let mut base = m.coords(r);
                let mut p_axes = Vec::new();
                for (a, s) in t.states.iter().enumerate() {
                    match s {
                        State::Varying => {}
                        State::Invariant | State::Reduced => base[a] = 0,
                        State::Partial => {
                            base[a] = 0;
                            p_axes.push(a);
                        }
                    }
                }
                // Sum over the Partial coordinates of the projected rank.
                m.group(m.rank(&base), &p_axes)
            })
            .collect::<Vec<Vec<usize>>>();
        let first = (0..sources.len())
            .map(|r| (0..r).find(|&q| sources[q] == sources[r]).unwrap_or(r))
            .collect();
        let kind = (0..t.states.len())
            .map(|a| t.kind(a))
            .find(|k| *k != PartialKind::Sum)
            .unwrap_or(PartialKind::Sum);
        Projection {
            sources,
            first,
            kind,
        }
    }
    /// ⊕ₖ over the sources of one element, for a kind other than sum.
    fn fold_entry(&self, x: &PerRank, src: &[usize], e: usize) -> Q {
        fold_col(
            self.kind,
            src.len(),
            src.iter().map(|&r| &x.tensors[r].data[e]),
        )
    }
    /// The reduction over one source's ranks, for a kind other than sum.
    fn fold_tensor(&self, x: &PerRank, src: &[usize]) -> Tensor {
        let first = &x.tensors[src[0]];
        Tensor::new(
            first.shape.clone(),
            (0..first.numel())
                .map(|e| self.fold_entry(x, src, e))
                .collect(),
        )
    }
    /// The sum over one source's ranks; a one-rank source is borrowed.
    fn source_sum<'a>(x: &'a PerRank, src: &[usize]) -> Cow<'a, Tensor> {
        match src {
            [r] => Cow::Borrowed(&x.tensors[*r]),
            _ => {
                let mut acc = x.tensors[src[0]].clone();
                for &r in &src[1..] {
                    acc.add_scaled(&Q::one(), &x.tensors[r]);
                }
                Cow::Owned(acc)
            }
        }
    }
    pub fn denote(&self, x: &PerRank) -> Denot {
        let family = self
            .sources
            .iter()
            .map(|src| match self.kind {
                PartialKind::Sum => Self::source_sum(x, src).into_owned(),
                _ => self.fold_tensor(x, src),
            })
            .collect();
        Denot { family }
    }
    /// `denote` into a family whose buffers are reused (SPEC.md §18.1).
    pub fn denote_into(&self, x: &PerRank, out: &mut Denot) {
        let n = self.sources.len();
        out.family.truncate(n);
        while out.family.len() < n {
            out.family.push(Tensor::scalar(Q::zero()));
        }
        for (r, src) in self.sources.iter().enumerate() {
            let (done, rest) = out.family.split_at_mut(r);
            let o = &mut rest[0];
            let q = self.first[r];
            if q < r {
                o.clone_from(&done[q]);
                continue;
            }
            if self.kind != PartialKind::Sum {
                *o = self.fold_tensor(x, src);
                continue;
            }
            o.clone_from(&x.tensors[src[0]]);
            for &r in &src[1..] {
                o.add_scaled(&Q::one(), &x.tensors[r]);
            }
        }
    }
    /// Entry `e` of the sum over the source ranks `src`; no tensor is built.
    #[inline]
    fn entry_sum(x: &PerRank, src: &[usize], e: usize) -> Q {
        let mut acc = x.tensors[src[0]].data[e].clone();
        for &r in &src[1..] {
            let b = &x.tensors[r].data[e];
            if !b.is_zero() {
                acc = acc.add(b);
            }
        }
        acc
    }
    /// `self.denote(x) == *d`, without building the family.
    pub fn matches(&self, x: &PerRank, d: &Denot) -> bool {
        self.sources
            .iter()
            .zip(&d.family)
            .enumerate()
            .all(|(r, (src, want))| {
                // A repeated sum was compared at its first member.
                let q = self.first[r];
                if q < r {
                    return *want == d.family[q];
                }
                let first = &x.tensors[src[0]];
                if src.len() == 1 {
                    return first == want;
                }
                crate::tensor::same_shape(&first.shape, &want.shape)
                    && want.data.iter().enumerate().all(|(e, w)| match self.kind {
                        PartialKind::Sum => Self::entry_sum(x, src, e) == *w,
                        _ => self.fold_entry(x, src, e) == *w,
                    })
            })
    }
    /// Entry `e` of member `r` of the denotation of `x`, `denote`'s value
    /// there, without forming the other members; `None` where a source
    /// rank has no entry `e`. The oracle's B3 reads the basis coordinates
    /// of a backward's result this way (benches/HISTORY.md §18.11).
    #[inline]
    pub fn entry(&self, x: &PerRank, r: usize, e: usize) -> Option<Q> {
        let src = self.sources.get(r)?;
        if self.kind != PartialKind::Sum {
            let ok = src
                .iter()
                .all(|&s| x.tensors.get(s).is_some_and(|t| e < t.data.len()));
            return ok.then(|| self.fold_entry(x, src, e));
        }
        let mut acc = x.tensors.get(src[0])?.data.get(e)?.clone();
        for &s in &src[1..] {
            let b = x.tensors.get(s)?.data.get(e)?;
            if !b.is_zero() {
                acc = acc.add(b);
            }
        }
        Some(acc)
    }
    /// Whether `x` denotes zero.
    pub fn denotes_zero(&self, x: &PerRank) -> bool {
        self.sources.iter().enumerate().all(|(r, src)| {
            self.first[r] < r
                || (0..x.tensors[src[0]].numel()).all(|e| match self.kind {
                    PartialKind::Sum => Self::entry_sum(x, src, e).is_zero(),
                    _ => self.fold_entry(x, src, e).is_zero(),
                })
        })
    }
    /// The denotation's entries, family member after member, in one flat
    /// vector (what finite differences work on).
    pub fn denote_flat(&self, x: &PerRank) -> Vec<Q> {
        let mut out = Vec::new();
        self.denote_flat_into(x, &mut out);
        out
    }
    /// `denote_flat` into a buffer that is reused (SPEC.md §18).
    pub fn denote_flat_into(&self, x: &PerRank, out: &mut Vec<Q>) {
        let n = x.tensors.first().map_or(0, Tensor::numel);
        out.clear();
        out.reserve(n * self.sources.len());
        // A repeated member is copied from its first at q·n: every member
        // has n entries when every rank's tensor does.
        let mut uniform = None;
        for (r, src) in self.sources.iter().enumerate() {
            let at = out.len();
            let q = self.first[r];
            if q < r && *uniform.get_or_insert_with(|| x.tensors.iter().all(|t| t.numel() == n)) {
                out.extend_from_within(q * n..(q + 1) * n);
                continue;
            }
            if self.kind != PartialKind::Sum {
                out.extend((0..x.tensors[src[0]].numel()).map(|e| self.fold_entry(x, src, e)));
                continue;
            }
            out.extend_from_slice(&x.tensors[src[0]].data);
            for &r in &src[1..] {
                for (a, b) in out[at..].iter_mut().zip(&x.tensors[r].data) {
                    if !b.is_zero() {
                        *a = a.add(b);
                    }
                }
            }
        }
    }
}

/// The global shape, and per global entry its (member, entry).
pub type Sources = (Vec<usize>, Vec<(usize, usize)>);

/// Where each entry of the global tensor of type `t` (§13.1) comes from:
/// the global shape, and per global entry the (member, entry) of a
/// denotation whose members have local shape `shape`. Found by placing a
/// denotation whose values are their own positions; `None` where `global`
/// is.
pub fn global_sources(m: &Mesh, t: &Type, shape: &[usize]) -> Option<Sources> {
    let n = numel(shape);
    let nr = m.num_ranks();
    let family = (0..nr)
        .map(|r| {
            Tensor::new(
                shape.to_vec(),
                (0..n).map(|e| Q::int((r * n + e) as i64)).collect(),
            )
        })
        .collect();
    let g = global(m, t, &Denot { family })?;
    let src = g
        .data
        .iter()
        .map(|q| {
            let k = usize::try_from(q.to_i64()?).ok()?;
            (k < nr * n).then_some((k / n.max(1), k % n.max(1)))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((g.shape, src))
}

/// SPEC.md §13.1: the global tensor a denotation stands for under a type
/// whose every Varying axis shards a tensor dim. Blocks are placed by the
/// Varying coordinates; axes sharding the same dim are ordered as the mesh
/// orders them (the first is major). `None` when a Varying axis has no
/// layout or shards a dim the tensor does not have.
pub fn global(m: &Mesh, t: &Type, d: &Denot) -> Option<Tensor> {
    let local = &d.family.first()?.shape;
    let mut shape = local.clone();
    for (a, s) in t.states.iter().enumerate() {
        if *s == State::Varying {
            let dim = t.layout.get(a).copied().flatten()?;
            *shape.get_mut(dim)? *= m.axes[a].size;
        }
    }
    let mut out = Tensor::zeros(&shape);
    let lst = crate::tensor::strides(local);
    let gst = crate::tensor::strides(&shape);
    for r in 0..m.num_ranks() {
        let c = m.coords(r);
        // One representative per block: coordinate 0 on the other axes.
        if (0..c.len()).any(|a| t.states[a] != State::Varying && c[a] != 0) {
            continue;
        }
        // Block index per tensor dim, major axis first.
        let mut block = vec![0usize; shape.len()];
        for (a, s) in t.states.iter().enumerate() {
            if *s == State::Varying {
                let dim = t.layout[a].expect("checked above");
                block[dim] = block[dim] * m.axes[a].size + c[a];
            }
        }
        let src = &d.family[r];
        for (k, v) in src.data.iter().enumerate() {
            let off: usize = (0..local.len())
                .map(|i| ((k / lst[i]) % local[i] + block[i] * local[i]) * gst[i])
                .sum();
            out.data[off] = v.clone();
        }
    }
    Some(out)
}

/// SPEC.md §2.5: equal denotations.
pub fn equivalent(m: &Mesh, t: &Type, x: &PerRank, y: &PerRank) -> bool {
    denote(m, t, x) == denote(m, t, y)
}

/// Product of the sizes of the axes that are not Varying: how many times each
/// denotation entry repeats in a full-rank family.
pub fn repeat_factor(m: &Mesh, t: &Type) -> usize {
    t.states
        .iter()
        .zip(&m.axes)
        .filter(|(s, _)| **s != State::Varying)
        .map(|(_, ax)| ax.size)
        .product()
}

/// SPEC.md §3.2: ⟨⟦a⟧, ⟦b⟧⟩, the Frobenius product of denotations summed over
/// Varying indices, for denotations of a type `t` (or its cotangent type; both
/// have the same Varying axes).
pub fn pair_denots(m: &Mesh, t: &Type, a: &Denot, b: &Denot) -> Q {
    let total = a
        .family
        .iter()
        .zip(&b.family)
        .fold(Q::zero(), |acc, (x, y)| acc.add(&x.dot(y)));
    total
        .div(&Q::int(repeat_factor(m, t) as i64))
        .expect("repeat factor is positive")
}

/// SPEC.md §3.2 on per-rank data: Σ_r ⟨t_r, c_r⟩ divided by the product of the
/// sizes of the Invariant axes of the tangent type `t`.
pub fn pair_per_rank(m: &Mesh, t: &Type, tangent: &PerRank, cotangent: &PerRank) -> Q {
    let total = tangent
        .tensors
        .iter()
        .zip(&cotangent.tensors)
        .fold(Q::zero(), |acc, (x, y)| acc.add(&x.dot(y)));
    let inv: usize = t
        .states
        .iter()
        .zip(&m.axes)
        .filter(|(s, _)| **s == State::Invariant)
        .map(|(_, ax)| ax.size)
        .product();
    total.div(&Q::int(inv as i64)).expect("sizes are positive")
}

/// The representative ranks of a type: those whose coordinate is 0 along every
/// I and R axis. A well-formed value is fixed by its tensors there.
pub fn free_ranks(m: &Mesh, t: &Type) -> Vec<usize> {
    (0..m.num_ranks())
        .filter(|&r| representative(m, t, r) == r)
        .collect()
}

/// Number of free scalars of a well-formed value of type `t` and `shape`.
pub fn num_free(m: &Mesh, t: &Type, shape: &[usize]) -> usize {
    let reps = (0..m.num_ranks())
        .filter(|&r| representative(m, t, r) == r)
        .count();
    reps * numel(shape)
}

/// Build the well-formed value whose free scalars are `vals` (representative
/// ranks in order, elements row-major), replicating along I and R axes.
/// Well-formed by construction (SPEC.md §8.2).
pub fn from_free(m: &Mesh, t: &Type, shape: &[usize], vals: &[Q]) -> PerRank {
    let n = numel(shape);
    let reps = free_ranks(m, t);
    assert_eq!(
        vals.len(),
        reps.len() * n,
        "from_free: wrong number of free scalars (interpreter bug)"
    );
    let tensors = (0..m.num_ranks())
        .map(|r| {
            let i = reps
                .binary_search(&representative(m, t, r))
                .expect("projection is a representative");
            Tensor::new(shape.to_vec(), vals[i * n..(i + 1) * n].to_vec())
        })
        .collect();
    PerRank { tensors }
}

/// `from_free` written into `out`, reusing its tensors' buffers (a driver
/// builds every grid point's inputs this way); the same value.
pub fn from_free_into(m: &Mesh, t: &Type, shape: &[usize], vals: &[Q], out: &mut PerRank) {
    FreeSlots::new(m, t).fill(shape, vals, out);
}

/// Where each rank of a well-formed value of one type on one mesh reads
/// its tensor among the free scalars (`from_free`): its slot among the
/// representatives, in rank order. It depends on the mesh and the type
/// only, so a driver computes it once per case, not per grid point.
#[derive(Clone, Debug)]
pub struct FreeSlots {
    slot: Vec<usize>,
    reps: usize,
}

impl FreeSlots {
    pub fn new(m: &Mesh, t: &Type) -> FreeSlots {
        let nr = m.num_ranks();
        // A representative's slot is the count of those before it, and any
        // other rank's is its representative's, a smaller rank's.
        let mut slot = vec![0; nr];
        let mut reps = 0;
        for r in 0..nr {
            let p = representative(m, t, r);
            slot[r] = if p == r {
                reps += 1;
                reps - 1
            } else {
                slot[p]
            };
        }
        FreeSlots { slot, reps }
    }

    /// The slot rank `r` reads: its free scalars are those from
    /// `slot(r) · numel` on.
    pub fn slot(&self, r: usize) -> usize {
        self.slot[r]
    }

    /// `from_free_into` for a value of this mesh and type.
    pub fn fill(&self, shape: &[usize], vals: &[Q], out: &mut PerRank) {
        let n = numel(shape);
        assert_eq!(
            vals.len(),
            self.reps * n,
            "from_free: wrong number of free scalars (interpreter bug)"
        );
        let nr = self.slot.len();
        out.tensors.truncate(nr);
        out.tensors.resize_with(nr, Tensor::placeholder);
        for (o, &k) in out.tensors.iter_mut().zip(&self.slot) {
            o.shape.clear();
            o.shape.extend_from_slice(shape);
            o.data.clear();
            o.data.extend_from_slice(&vals[k * n..(k + 1) * n]);
        }
    }
}

/// The free scalars of a well-formed value (inverse of `from_free`).
pub fn to_free(m: &Mesh, t: &Type, x: &PerRank) -> Vec<Q> {
    free_ranks(m, t)
        .into_iter()
        .flat_map(|r| x.tensors[r].data.clone())
        .collect()
}

/// A unit direction of the free scalars: the well-formed value with a single
/// free scalar set to 1.
pub fn free_unit(m: &Mesh, t: &Type, shape: &[usize], i: usize) -> PerRank {
    let mut v = vec![Q::zero(); num_free(m, t, shape)];
    v[i] = Q::one();
    from_free(m, t, shape, &v)
}

/// A spanning set of the well-formed values that denote zero (SPEC.md §2.5):
/// for each Partial axis `a`, each representative rank `r` with coordinate
/// `k ≥ 1` on `a` and each element, `+1` at `r` and `-1` at `r` with `a := 0`.
pub fn kernel_basis(m: &Mesh, t: &Type, shape: &[usize]) -> Vec<PerRank> {
    let n = numel(shape);
    let reps = free_ranks(m, t);
    let mut out = Vec::new();
    for (a, s) in t.states.iter().enumerate() {
        if *s != State::Partial {
            continue;
        }
        for (i, &r) in reps.iter().enumerate() {
            if m.coords(r)[a] == 0 {
                continue;
            }
            let j0 = reps
                .binary_search(&m.with_coord(r, a, 0))
                .expect("representative");
            for e in 0..n {
                let mut v = vec![Q::zero(); reps.len() * n];
                v[i * n + e] = Q::one();
                v[j0 * n + e] = Q::int(-1);
                out.push(from_free(m, t, shape, &v));
            }
        }
    }
    out
}

/// One coordinate of the denotation space of a type: a Varying class (named
/// by its representative rank with every non-Varying coordinate 0) and an
/// element offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenotCoord {
    pub rank: usize,
    pub elem: usize,
}

/// The coordinates of the denotation space, with for each a well-formed
/// per-rank value denoting the unit vector at it (SPEC.md §5.1).
pub fn denot_basis(m: &Mesh, t: &Type, shape: &[usize]) -> Vec<(DenotCoord, PerRank)> {
    let n = numel(shape);
    let reps = free_ranks(m, t);
    let mut out = Vec::new();
    for (i, &r) in reps.iter().enumerate() {
        let c = m.coords(r);
        if t.states
            .iter()
            .enumerate()
            .any(|(a, s)| *s == State::Partial && c[a] != 0)
        {
            continue;
        }
        for e in 0..n {
            let mut v = vec![Q::zero(); reps.len() * n];
            v[i * n + e] = Q::one();
            out.push((DenotCoord { rank: r, elem: e }, from_free(m, t, shape, &v)));
        }
    }
    out
}

/// Render per-rank data the way the seeds draw it: one line per rank, with a
/// leading `+` where a pending sum is outstanding.
pub fn draw(m: &Mesh, t: &Type, x: &PerRank) -> Vec<String> {
    let partial = t.states.contains(&State::Partial);
    (0..m.num_ranks())
        .map(|r| {
            let c = m.coords(r);
            let coords: Vec<String> = c.iter().map(|v| v.to_string()).collect();
            format!(
                "rank {}: {}{}",
                coords.join(","),
                if partial { "+" } else { "" },
                x.tensors[r]
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(v: &[i64]) -> Vec<Q> {
        v.iter().map(|&x| Q::int(x)).collect()
    }

    /// `from_free_into`, and one type's `FreeSlots` kept across shapes, give
    /// `from_free`'s value whatever the buffer held before: every type on one-, two- and three-axis meshes, shapes of 1
    /// to 6 entries, one buffer reused throughout. The twin: the same
    /// scalars with two of them swapped give a different value, so the
    /// comparison sees where each scalar goes.
    #[test]
    fn from_free_into_agrees_with_from_free() {
        use crate::state::ALL_STATES;
        let meshes = [
            Mesh::line(2),
            Mesh::line(4),
            Mesh::new(&[("a", 2), ("b", 2)]),
            Mesh::new(&[("a", 2), ("b", 1), ("c", 2)]),
        ];
        let shapes: [&[usize]; 4] = [&[], &[2], &[2, 3], &[3, 1]];
        let mut buf = PerRank {
            tensors: vec![Tensor::new(vec![5], q(&[9, 9, 9, 9, 9])); 7],
        };
        let (mut checked, mut swapped) = (0, 0);
        for m in &meshes {
            let k = m.axes.len();
            for code in 0..4usize.pow(k as u32) {
                let states = (0..k)
                    .map(|a| ALL_STATES[code / 4usize.pow(a as u32) % 4])
                    .collect();
                let t = Type::new(states);
                // One type's slots serve every shape (a driver's case).
                let slots = FreeSlots::new(m, &t);
                for sh in shapes {
                    let nf = num_free(m, &t, sh);
                    let vals: Vec<Q> = (0..nf).map(|i| Q::frac(i as i64 + 1, 3)).collect();
                    from_free_into(m, &t, sh, &vals, &mut buf);
                    assert_eq!(buf, from_free(m, &t, sh, &vals), "{t:?} {sh:?}");
                    slots.fill(sh, &vals, &mut buf);
                    assert_eq!(buf, from_free(m, &t, sh, &vals), "{t:?} {sh:?}");
                    checked += 1;
                    if nf >= 2 {
                        let mut other = vals.clone();
                        other.swap(0, nf - 1);
                        from_free_into(m, &t, sh, &other, &mut buf);
                        assert_ne!(buf, from_free(m, &t, sh, &vals));
                        swapped += 1;
                    }
                }
            }
        }
        assert!(checked > 300 && swapped > 250, "{checked} {swapped}");
    }

    /// The projection's paths that form a repeated member's sum once
    /// (`denote_into`, `denote_flat_into`, `matches`, `denotes_zero`,
    /// `entry`) give
    /// what summing every member from its sources gives (`denote`): every
    /// type on one-, two- and three-axis meshes, arbitrary per-rank values
    /// (not well formed) and zeros. The twin: a
    /// projection that takes member 0 for every repeated member is told
    /// apart.
    #[test]
    fn projection_paths_agree_with_denote() {
        use crate::state::ALL_STATES;
        let meshes = [
            Mesh::line(3),
            Mesh::new(&[("a", 2), ("b", 2)]),
            Mesh::new(&[("a", 2), ("b", 1), ("c", 2)]),
        ];
        let flat = |d: &Denot| -> Vec<Q> { d.family.iter().flat_map(|t| t.data.clone()).collect() };
        let (mut checked, mut told_apart, mut entry_told_apart) = (0, 0, 0);
        for m in &meshes {
            let k = m.axes.len();
            let n = m.num_ranks();
            for code in 0..4usize.pow(k as u32) {
                let states = (0..k)
                    .map(|a| ALL_STATES[code / 4usize.pow(a as u32) % 4])
                    .collect();
                let t = Type::new(states);
                let p = Projection::new(m, &t);
                let values = |len: &dyn Fn(usize) -> usize| PerRank {
                    tensors: (0..n)
                        .map(|r| {
                            let l = len(r);
                            Tensor::new(
                                vec![l],
                                (0..l).map(|e| Q::frac((r * 7 + e) as i64 - 5, 2)).collect(),
                            )
                        })
                        .collect(),
                };
                let zero = PerRank::replicate(m, &Tensor::zeros(&[2]));
                for x in [values(&|_| 2), values(&|_| 3), zero] {
                    let want = p.denote(&x);
                    let mut got = Denot {
                        family: vec![Tensor::new(vec![1], q(&[4])); n + 1],
                    };
                    p.denote_into(&x, &mut got);
                    assert_eq!(got, want, "{t:?}");
                    let mut buf = q(&[1, 2, 3]);
                    p.denote_flat_into(&x, &mut buf);
                    assert_eq!(buf, flat(&want), "{t:?}");
                    let zero = want.family.iter().all(|f| f.data.iter().all(Q::is_zero));
                    assert_eq!(p.denotes_zero(&x), zero, "{t:?}");
                    assert!(p.matches(&x, &want), "{t:?}");
                    // Each entry on its own, and none past the tensors.
                    for (r, f) in want.family.iter().enumerate() {
                        for (e, w) in f.data.iter().enumerate() {
                            assert_eq!(p.entry(&x, r, e).as_ref(), Some(w), "{t:?} {r} {e}");
                        }
                        assert_eq!(p.entry(&x, r, f.data.len()), None, "{t:?}");
                    }
                    // The entry twin: one that reads only the first source
                    // misses every Partial sum.
                    let first_only =
                        |r: usize, e: usize| x.tensors[p.sources(r)[0]].data[e].clone();
                    entry_told_apart += usize::from((0..n).any(|r| {
                        (0..want.family[r].data.len())
                            .any(|e| first_only(r, e) != want.family[r].data[e])
                    }));
                    for r in 1..n {
                        let mut other = want.clone();
                        other.family[r].data[0] = other.family[r].data[0].add(&Q::one());
                        assert!(!p.matches(&x, &other), "{t:?} member {r}");
                    }
                    // The twin.
                    let wrong = Projection {
                        sources: p.sources.clone(),
                        first: vec![0; n],
                        kind: PartialKind::Sum,
                    };
                    let mut w = Denot { family: vec![] };
                    wrong.denote_into(&x, &mut w);
                    told_apart += usize::from(w != want);
                    checked += 1;
                }
            }
        }
        assert!(checked > 200 && told_apart > 50, "{checked} {told_apart}");
        assert!(entry_told_apart > 50, "{entry_told_apart}");
    }

    /// Two axes sharding one dim: the first mesh axis is major. Rank (a, b)
    /// holds block 2a + b of dim 0; an axis sharding dim 1 places blocks
    /// along columns.
    #[test]
    fn global_tensors_assemble_blocks_major_axis_first() {
        let m = Mesh::new(&[("dp", 2), ("tp", 2)]);
        let both0 = Type::laid(vec![State::Varying, State::Varying], vec![Some(0), Some(0)]);
        let x = PerRank {
            tensors: (0..4)
                .map(|r| Tensor::new(vec![1], q(&[r as i64])))
                .collect(),
        };
        let g = global(&m, &both0, &denote(&m, &both0, &x)).unwrap();
        let want: Vec<Q> = (0..4)
            .map(|r| Q::int(m.rank(&[r / 2, r % 2]) as i64))
            .collect();
        assert_eq!(g.shape, vec![4]);
        assert_eq!(g.data, want);
        // dp shards columns, tp is Partial: the global tensor sums over tp.
        let mixed = Type::laid(vec![State::Varying, State::Partial], vec![Some(1), None]);
        let y = PerRank {
            tensors: (0..4)
                .map(|r| Tensor::new(vec![1, 1], q(&[r as i64])))
                .collect(),
        };
        let g = global(&m, &mixed, &denote(&m, &mixed, &y)).unwrap();
        assert_eq!(g.shape, vec![1, 2]);
        let sum = |a: usize| (0..2).map(|b| m.rank(&[a, b]) as i64).sum::<i64>();
        assert_eq!(g.data, q(&[sum(0), sum(1)]));
        // A layout naming a dim the tensor lacks has no global tensor.
        assert!(global(
            &m,
            &both0,
            &denote(
                &m,
                &both0,
                &PerRank {
                    tensors: (0..4).map(|_| Tensor::scalar(Q::one())).collect(),
                }
            )
        )
        .is_none());
    }

    #[test]
    fn partial_values_with_equal_sums_are_equivalent() {
        let m = Mesh::line(2);
        let t = Type::one(State::Partial);
        let a = from_free(&m, &t, &[], &q(&[1, 1]));
        let b = from_free(&m, &t, &[], &q(&[2, 0]));
        assert!(equivalent(&m, &t, &a, &b));
        assert_eq!(denote(&m, &t, &a).family[0], Tensor::scalar(Q::int(2)));
        let c = from_free(&m, &t, &[], &q(&[2, 1]));
        assert!(!equivalent(&m, &t, &a, &c));
    }

    #[test]
    fn well_formedness_is_checked_per_axis() {
        let m = Mesh::new(&[("dp", 2), ("tp", 2)]);
        let t = Type::new(vec![State::Varying, State::Reduced]);
        let x = from_free(&m, &t, &[], &q(&[5, 7]));
        assert!(well_formed(&m, &t, &x).is_ok());
        assert_eq!(
            x.tensors
                .iter()
                .map(|t| t.data[0].clone())
                .collect::<Vec<_>>(),
            q(&[5, 5, 7, 7])
        );
        let mut bad = x.clone();
        bad.tensors[1] = Tensor::scalar(Q::int(6));
        assert_eq!(well_formed(&m, &t, &bad).unwrap_err().axis, 1);
    }

    #[test]
    fn pairing_on_denotations_matches_per_rank_formula() {
        // Every state on a 3-rank axis: the per-rank formula (divide by |I|)
        // equals the denotational pairing.
        let m = Mesh::line(3);
        for s in crate::state::ALL_STATES {
            let t = Type::one(s);
            let c = t.cot();
            let x = from_free(
                &m,
                &t,
                &[2],
                &(0..num_free(&m, &t, &[2]) as i64)
                    .map(|i| Q::int(i + 1))
                    .collect::<Vec<_>>(),
            );
            let g = from_free(
                &m,
                &c,
                &[2],
                &(0..num_free(&m, &c, &[2]) as i64)
                    .map(|i| Q::int(2 * i - 3))
                    .collect::<Vec<_>>(),
            );
            let d = pair_denots(&m, &t, &denote(&m, &t, &x), &denote(&m, &c, &g));
            assert_eq!(d, pair_per_rank(&m, &t, &x, &g), "state {s}");
        }
    }

    /// The rank arithmetic without coordinates (`representative`, the
    /// strides in `well_formed`) agrees with the mesh's coordinate maps, and
    /// `denote_into` with `denote`, on every type of a few meshes.
    #[test]
    fn fast_rank_maps_agree_with_coordinates() {
        use crate::state::ALL_STATES;
        for m in [
            Mesh::line(3),
            Mesh::new(&[("a", 2), ("b", 3)]),
            Mesh::new(&[("a", 2), ("b", 1), ("c", 2)]),
        ] {
            let k = m.axes.len();
            for code in 0..ALL_STATES.len().pow(k as u32) {
                let states: Vec<State> = (0..k)
                    .map(|a| ALL_STATES[code / ALL_STATES.len().pow(a as u32) % ALL_STATES.len()])
                    .collect();
                let t = Type::new(states);
                for r in 0..m.num_ranks() {
                    let mut c = m.coords(r);
                    for (a, s) in t.states.iter().enumerate() {
                        if s.replicated() {
                            c[a] = 0;
                        }
                    }
                    assert_eq!(representative(&m, &t, r), m.rank(&c));
                }
                let n = num_free(&m, &t, &[2]);
                let vals: Vec<Q> = (0..n as i64).map(|i| Q::int(i - 2)).collect();
                let x = from_free(&m, &t, &[2], &vals);
                assert!(well_formed(&m, &t, &x).is_ok());
                assert_eq!(to_free(&m, &t, &x), vals);
                let mut d = Denot { family: vec![] };
                Projection::new(&m, &t).denote_into(&x, &mut d);
                assert_eq!(d, denote(&m, &t, &x));
                // Break each replicated axis in turn: the error names the
                // same axis and ranks as the coordinate form.
                for r in 0..m.num_ranks() {
                    let mut bad = x.clone();
                    bad.tensors[r] = Tensor::new(vec![2], vec![Q::int(99), Q::int(98)]);
                    let want = t
                        .states
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.replicated())
                        .find_map(|(a, _)| {
                            (0..m.num_ranks()).find_map(|q| {
                                let q0 = m.with_coord(q, a, 0);
                                (q0 != q && bad.tensors[q] != bad.tensors[q0]).then_some(
                                    NotWellFormed {
                                        axis: a,
                                        rank: q0,
                                        other: q,
                                    },
                                )
                            })
                        });
                    assert_eq!(well_formed(&m, &t, &bad).err(), want);
                }
            }
        }
    }

    #[test]
    fn kernel_directions_denote_zero() {
        let m = Mesh::new(&[("a", 2), ("b", 3)]);
        let t = Type::new(vec![State::Partial, State::Partial]);
        let ks = kernel_basis(&m, &t, &[2]);
        assert_eq!(ks.len(), (3 + 4) * 2); // 3 ranks with a>=1, 4 with b>=1
        let zero = denote(&m, &t, &PerRank::replicate(&m, &Tensor::zeros(&[2])));
        for k in ks {
            assert_eq!(denote(&m, &t, &k), zero);
        }
    }

    /// One denotation (SPEC.md §21.1): a two-axis type whose Partial axis
    /// owes a kind denotes, per Varying coordinate, ⊕ₖ over that axis, the
    /// same fold as `pending::combine`; every entry point of `Projection`
    /// agrees. Twin: the same values read as a sum differ for max, min, avg.
    #[test]
    fn pending_kinds_denote_by_their_fold() {
        use crate::pending::{combine, ALL_KINDS};
        let m = Mesh::new(&[("dp", 2), ("tp", 3)]);
        let base = Type::new(vec![State::Varying, State::Partial]);
        let x = PerRank {
            tensors: (0..6)
                .map(|r| {
                    Tensor::new(
                        vec![2],
                        vec![Q::int(r as i64 * 3 - 7), Q::frac(5 - r as i64, 2)],
                    )
                })
                .collect(),
        };
        for k in ALL_KINDS {
            let t = base.clone().with_kind(1, k);
            let p = Projection::new(&m, &t);
            let d = p.denote(&x);
            for r in 0..6 {
                let group: Vec<Tensor> =
                    p.sources(r).iter().map(|&s| x.tensors[s].clone()).collect();
                assert_eq!(group.len(), 3);
                let want = combine(k, &group).unwrap();
                assert_eq!(d.family[r], want, "{k} member {r}");
                for e in 0..2 {
                    assert_eq!(p.entry(&x, r, e), Some(want.data[e].clone()));
                }
            }
            let mut into = Denot::default();
            p.denote_into(&x, &mut into);
            assert_eq!(into, d);
            assert!(p.matches(&x, &d));
            assert_eq!(p.denote_flat(&x), d.flat());
            let as_sum = Projection::new(&m, &base).denote(&x);
            assert_eq!(as_sum == d, k == PartialKind::Sum, "{k}");
            assert_eq!(
                t.display(&m),
                match k {
                    PartialKind::Sum => "{dp: V, tp: P}".to_string(),
                    _ => format!("{{dp: V, tp: P({k})}}"),
                }
            );
        }
    }
}
