//! Collectives and casts (SPEC.md §10): per-rank forward, declared global
//! meaning on denotations, shapes, and ring-model communication cost.
//!
//! A collective acts on a *group*: the ranks that differ only in the group's
//! mesh axes (several axes form one flattened group, row-major). `k(r)` is a
//! rank's index in its group and `n` the group size. The forward and the spec
//! are written separately, so F3 compares two independent descriptions.

use spmd_semantics::pending::{PartialKind, Place};
use spmd_semantics::perrank::Denot;
use spmd_semantics::tensor::{numel, same_shape};
use spmd_semantics::{Mesh, PerRank, Shape, State, Tensor, Q};

/// What a collective does to local tensors.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Concatenate (or stack) the group's tensors along `dim`.
    AllGather { dim: usize, stack: bool },
    /// Sum the group's tensors.
    AllReduce,
    /// Sum, then keep chunk k(r) along `dim`; with `stack` (the unstack
    /// form), `dim` has size n and the chunk's dim is dropped.
    ReduceScatter { dim: usize, stack: bool },
    /// Split along `split`, send chunk j to group member j, concatenate the
    /// received chunks along `concat`. With `stack` (JAX's untiled form),
    /// `split` has size n and each chunk is one entry with that dim dropped;
    /// the received entries are stacked along a new dim at `concat` (a
    /// position in the output).
    AllToAll {
        split: usize,
        concat: usize,
        stack: bool,
    },
    /// Keep the local tensors; change only the type.
    Reinterpret,
    /// Keep the denotation with local work only (Varying read as
    /// concatenation along `dim`, or with `stack` as stacking along a new
    /// `dim`).
    Convert { dim: usize, stack: bool },
    /// Member k sends to member perm[k] (None: sends nowhere); members that
    /// receive nothing hold zeros. With `pairs` (JAX's `(source,
    /// destination)` form) the group may be larger than `perm`: members past
    /// its end send nothing. Without it, `perm` lists every member.
    PPermute {
        perm: Vec<Option<usize>>,
        pairs: bool,
    },
    /// All-reduce divided by the group size.
    PMean,
    /// Divide by the group size, locally, the state unchanged (what JAX's
    /// transpose of pmean does before pvary).
    DivideByGroupSize,
}

/// A collective on a group of mesh axes, with the states it converts between
/// on those axes (the same on every group axis).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Collective {
    /// The catalogue name, e.g. `all_gather_reduced`.
    pub name: String,
    pub kind: Kind,
    pub axes: Vec<usize>,
    pub src: State,
    pub dst: State,
}

/// The group's tensors summed in group order, into one buffer.
fn sum(ts: &[&Tensor]) -> Tensor {
    let mut acc = ts[0].clone();
    for t in &ts[1..] {
        assert_eq!(
            acc.shape, t.shape,
            "collective sum: shape mismatch (interpreter bug)"
        );
        for (a, b) in acc.data.iter_mut().zip(&t.data) {
            *a = a.add(b);
        }
    }
    acc
}

/// The group's tensors concatenated (or stacked) along `dim`, in group order.
fn gather(ts: &[&Tensor], dim: usize, stack: bool) -> Tensor {
    let parts: Vec<Tensor> = ts.iter().map(|t| (*t).clone()).collect();
    if stack {
        Tensor::stack(&parts, dim)
    } else {
        Tensor::concat(&parts, dim)
    }
}

/// Each group's sum and gather, computed once per call at the group's first
/// member and shared by every member (they all combine the same tensors in
/// the same order).
struct GroupSums {
    sums: Vec<Option<Tensor>>,
    gathers: Vec<Option<Tensor>>,
}

impl GroupSums {
    fn new(ranks: usize) -> GroupSums {
        GroupSums {
            sums: vec![None; ranks],
            gathers: vec![None; ranks],
        }
    }
    fn get(&mut self, g: &[usize], ts: &[&Tensor]) -> &Tensor {
        self.sums[g[0]].get_or_insert_with(|| sum(ts))
    }
    fn gather(&mut self, g: &[usize], ts: &[&Tensor], dim: usize, stack: bool) -> &Tensor {
        self.gathers[g[0]].get_or_insert_with(|| gather(ts, dim, stack))
    }
}

/// Chunk `k` of `n` along `dim` (what `x.chunk(n, dim)[k]` is), sliced
/// alone.
fn piece(x: &Tensor, n: usize, k: usize, dim: usize) -> Tensor {
    let len = x.shape[dim] / n;
    x.slice(dim, k * len, (k + 1) * len)
}

/// Entry `k` along `dim` (of size n), with the dim dropped.
fn unstack(x: &Tensor, n: usize, k: usize, dim: usize) -> Tensor {
    let piece = piece(x, n, k, dim);
    let mut shape = piece.shape.clone();
    shape.remove(dim);
    Tensor::new(shape, piece.data)
}

/// `sum` of the group `g`'s tensors of `d` into `acc`, reusing its buffer.
fn sum_into(d: &Denot, g: &[usize], acc: &mut Tensor) {
    acc.clone_from(&d.family[g[0]]);
    for &q in &g[1..] {
        let t = &d.family[q];
        assert_eq!(
            acc.shape, t.shape,
            "collective sum: shape mismatch (interpreter bug)"
        );
        for (a, b) in acc.data.iter_mut().zip(&t.data) {
            *a = a.add(b);
        }
    }
}

/// `gather` of the group `g`'s tensors of `d` into `out`, reusing its
/// buffer: stacking is concatenating parts with a unit dim inserted at
/// `dim`, so both copy, per block before `dim`, each part's run in group
/// order.
fn gather_into(d: &Denot, g: &[usize], dim: usize, stack: bool, out: &mut Tensor) {
    let first = &d.family[g[0]];
    out.shape.clone_from(&first.shape);
    if stack {
        out.shape.insert(dim, g.len());
    } else {
        out.shape[dim] = g.iter().map(|&q| d.family[q].shape[dim]).sum();
    }
    out.data.clear();
    let outer = numel(&first.shape[..dim]);
    for o in 0..outer {
        for &q in g {
            let p = &d.family[q];
            let inner = numel(&p.shape[dim..]);
            out.data
                .extend_from_slice(&p.data[o * inner..(o + 1) * inner]);
        }
    }
}

/// `piece` into `out`, reusing its buffer.
fn piece_into(x: &Tensor, n: usize, k: usize, dim: usize, out: &mut Tensor) {
    let len = x.shape[dim] / n;
    let (start, end) = (k * len, (k + 1) * len);
    let outer = numel(&x.shape[..dim]);
    let inner = numel(&x.shape[dim + 1..]);
    out.shape.clone_from(&x.shape);
    out.shape[dim] = len;
    out.data.clear();
    for o in 0..outer {
        let base = o * x.shape[dim] * inner;
        out.data
            .extend_from_slice(&x.data[base + start * inner..base + end * inner]);
    }
}

/// `unstack` into `out`, reusing its buffer.
fn unstack_into(x: &Tensor, n: usize, k: usize, dim: usize, out: &mut Tensor) {
    piece_into(x, n, k, dim, out);
    out.shape.remove(dim);
}

/// `x.scale(c)` into `out`, reusing its buffer.
fn scale_into(x: &Tensor, c: &Q, out: &mut Tensor) {
    out.shape.clone_from(&x.shape);
    out.data.clear();
    out.data.extend(x.data.iter().map(|a| a.mul(c)));
}

/// The group buffers of `Collective::spec_into`, kept by its caller: each
/// group's sum and gather, computed once per call at the group's first
/// member, as `GroupSums` does.
#[derive(Default)]
pub struct SpecBufs {
    sums: Vec<Tensor>,
    gathers: Vec<Tensor>,
    have_sum: Vec<bool>,
    have_gather: Vec<bool>,
}

impl SpecBufs {
    fn reset(&mut self, ranks: usize) {
        for v in [&mut self.sums, &mut self.gathers] {
            v.truncate(ranks);
            v.resize_with(ranks, Tensor::placeholder);
        }
        for v in [&mut self.have_sum, &mut self.have_gather] {
            v.clear();
            v.resize(ranks, false);
        }
    }
    fn sum(&mut self, d: &Denot, g: &[usize]) -> &Tensor {
        if !self.have_sum[g[0]] {
            sum_into(d, g, &mut self.sums[g[0]]);
            self.have_sum[g[0]] = true;
        }
        &self.sums[g[0]]
    }
    fn gather(&mut self, d: &Denot, g: &[usize], dim: usize, stack: bool) -> &Tensor {
        if !self.have_gather[g[0]] {
            gather_into(d, g, dim, stack, &mut self.gathers[g[0]]);
            self.have_gather[g[0]] = true;
        }
        &self.gathers[g[0]]
    }
}

/// n pieces: `x` at index `k`, zeros of its shape elsewhere.
fn one_hot(x: &Tensor, n: usize, k: usize) -> Vec<Tensor> {
    (0..n)
        .map(|j| {
            if j == k {
                x.clone()
            } else {
                Tensor::zeros(&x.shape)
            }
        })
        .collect()
}

/// `x` at entry `k` of a new dim `dim` of size n, zeros elsewhere.
fn place_stacked(x: &Tensor, n: usize, k: usize, dim: usize) -> Tensor {
    Tensor::stack(&one_hot(x, n, k), dim)
}

/// `x` as block `k` of n along `dim`, zeros elsewhere.
fn place(x: &Tensor, n: usize, k: usize, dim: usize) -> Tensor {
    Tensor::concat(&one_hot(x, n, k), dim)
}

/// Chunk `k` of `n` equal chunks along one dim of a row-major tensor, read
/// as runs of its flat data: the chunk's flat offset `f` lies in block
/// `f / bl` (of `bl` = chunk length × inner size) and is the tensor's offset
/// `(block * n + k) * bl + f % bl`.
struct Chunk {
    bl: usize,
    n: usize,
    k: usize,
    /// Entries in the chunk.
    len: usize,
}

impl Chunk {
    fn new(s: &[usize], dim: usize, n: usize, k: usize) -> Chunk {
        let bl = s[dim] / n * numel(&s[dim + 1..]);
        Chunk {
            bl,
            n,
            k,
            len: numel(&s[..dim]) * bl,
        }
    }
    /// Calls `f(chunk offset, tensor offset, run length)` for the runs that
    /// cover chunk offsets `from..to`.
    fn runs(&self, from: usize, to: usize, mut f: impl FnMut(usize, usize, usize)) {
        let mut at = from;
        while at < to {
            let (b, off) = (at / self.bl, at % self.bl);
            let run = (self.bl - off).min(to - at);
            f(at, (b * self.n + self.k) * self.bl + off, run);
            at += run;
        }
    }
    /// Appends the chunk's entries `from..to` of `x` to `dst`.
    fn push(&self, dst: &mut Vec<Q>, x: &[Q], from: usize, to: usize) {
        self.runs(from, to, |_, src, run| {
            dst.extend_from_slice(&x[src..src + run])
        });
    }
    /// Adds the chunk of `x` to `dst` (the chunk's length) entrywise.
    fn add(&self, dst: &mut [Q], x: &[Q]) {
        self.runs(0, self.len, |at, src, run| {
            for (a, b) in dst[at..at + run].iter_mut().zip(&x[src..src + run]) {
                *a = a.add(b);
            }
        });
    }
}

impl Collective {
    pub fn group_size(&self, m: &Mesh) -> usize {
        self.axes.iter().map(|&a| m.axes[a].size).product()
    }

    /// Output shape for an input shape, or why the shape does not fit.
    pub fn infer(&self, m: &Mesh, s: &[usize]) -> Result<Shape, String> {
        let mut out = Vec::new();
        self.infer_into(m, s, &mut out)?;
        Ok(out)
    }

    /// `infer` written into `out`, whose buffer is reused; on an error `out`
    /// holds junk.
    pub(crate) fn infer_into(&self, m: &Mesh, s: &[usize], out: &mut Shape) -> Result<(), String> {
        let n = self.group_size(m);
        let dim_ok = |d: usize| {
            if d < s.len() {
                Ok(())
            } else {
                Err(format!(
                    "{}: dim {d} out of range for shape {s:?}",
                    self.name
                ))
            }
        };
        let div = |d: usize| {
            if s[d].is_multiple_of(n) {
                Ok(())
            } else {
                Err(format!(
                    "{}: dim {d} of {s:?} not divisible by {n}",
                    self.name
                ))
            }
        };
        let full = |d: usize| {
            if d < s.len() && s[d] == n {
                Ok(())
            } else {
                Err(format!(
                    "{}: unstacking needs dim {d} of {s:?} to have the group size {n}",
                    self.name
                ))
            }
        };
        out.clear();
        out.extend_from_slice(s);
        match &self.kind {
            Kind::AllGather { dim, stack: true } => {
                if *dim > s.len() {
                    return Err(format!(
                        "{}: stack dim {dim} out of range for {s:?}",
                        self.name
                    ));
                }
                out.insert(*dim, n);
            }
            Kind::AllGather { dim, stack: false } => {
                dim_ok(*dim)?;
                out[*dim] *= n;
            }
            Kind::ReduceScatter { dim, stack: true } => {
                full(*dim)?;
                out.remove(*dim);
            }
            Kind::ReduceScatter { dim, stack: false } => {
                dim_ok(*dim)?;
                div(*dim)?;
                out[*dim] /= n;
            }
            Kind::AllToAll {
                split,
                concat,
                stack: false,
            } => {
                dim_ok(*split)?;
                dim_ok(*concat)?;
                div(*split)?;
                out[*split] /= n;
                out[*concat] *= n;
            }
            Kind::AllToAll {
                split,
                concat,
                stack: true,
            } => {
                // JAX: x.shape[split_axis] must be the group size; the
                // output drops that dim and has a new one of size n at
                // `concat` (so `concat` is below the rank, as in JAX).
                if *split >= s.len() || s[*split] != n {
                    return Err(format!(
                        "{}: the untiled all_to_all needs its split dim {split} of {s:?} to have the group size {n}",
                        self.name
                    ));
                }
                dim_ok(*concat)?;
                out.remove(*split);
                out.insert(*concat, n);
            }
            Kind::Convert { dim, stack } => match (self.src, self.dst, stack) {
                (State::Reduced | State::Invariant, State::Varying, true) => {
                    full(*dim)?;
                    out.remove(*dim);
                }
                (State::Reduced | State::Invariant, State::Varying, false) => {
                    dim_ok(*dim)?;
                    div(*dim)?;
                    out[*dim] /= n;
                }
                (State::Varying, State::Partial, true) => {
                    if *dim > s.len() {
                        return Err(format!(
                            "{}: stack dim {dim} out of range for {s:?}",
                            self.name
                        ));
                    }
                    out.insert(*dim, n);
                }
                (State::Varying, State::Partial, false) => {
                    dim_ok(*dim)?;
                    out[*dim] *= n;
                }
                (State::Varying, State::Reduced | State::Invariant, _)
                | (State::Partial, State::Reduced | State::Invariant | State::Varying, _) => {
                    return Err(format!(
                        "{}: a convert from {} to {} would need communication",
                        self.name, self.src, self.dst
                    ));
                }
                (_, _, true) => {
                    return Err(format!(
                        "{}: no stacked convert from {} to {}",
                        self.name, self.src, self.dst
                    ));
                }
                _ => {}
            },
            Kind::PPermute { perm, pairs } => {
                check_perm(&self.name, perm)?;
                if *pairs && perm.len() > n {
                    return Err(format!(
                        "{}: perm names member {}, outside the group of {n}",
                        self.name,
                        perm.len() - 1
                    ));
                }
                if !*pairs && perm.len() != n {
                    return Err(format!(
                        "{}: permutation of {} entries on a group of {n}",
                        self.name,
                        perm.len()
                    ));
                }
            }
            Kind::AllReduce | Kind::Reinterpret | Kind::PMean | Kind::DivideByGroupSize => {}
        }
        Ok(())
    }

    /// The per-rank forward.
    pub fn forward(&self, m: &Mesh, x: &PerRank) -> PerRank {
        let mut out = PerRank {
            tensors: Vec::new(),
        };
        if self.forward_into(m, x, &mut out).is_err() {
            // Parameters that do not fit: whatever the plain forward does.
            return self.forward_reference(m, x);
        }
        out
    }

    /// The per-rank forward written into `out`, reusing its tensors'
    /// buffers: each rank's result is copied (or summed) straight from the
    /// inputs by offset runs, with no intermediate gather, chunk or group
    /// sum. Equal to [`Collective::forward_reference`]: same entries, each
    /// sum taken in group order. An input shape that does not fit
    /// ([`Collective::infer`]) is an error and leaves `out` as it was.
    pub fn forward_into(&self, m: &Mesh, x: &PerRank, out: &mut PerRank) -> Result<(), String> {
        // The output shape goes into a buffer kept per thread: this runs for
        // every sample of a program's collective step.
        thread_local! {
            static SHAPE: std::cell::Cell<Shape> = const { std::cell::Cell::new(Vec::new()) };
        }
        let mut shape = SHAPE.take();
        let r = self
            .infer_into(m, x.shape(), &mut shape)
            .map(|()| self.forward_into_shaped(m, x, &shape, out));
        SHAPE.set(shape);
        r
    }

    /// `forward_into` once the output shape `shape` is inferred.
    fn forward_into_shaped(&self, m: &Mesh, x: &PerRank, shape: &Shape, out: &mut PerRank) {
        let nr = m.num_ranks();
        let s = x.shape();
        if x.tensors.len() != nr || x.tensors.iter().any(|t| !same_shape(&t.shape, s)) {
            *out = self.forward_reference(m, x);
            return;
        }
        let groups = m.groups(&self.axes);
        let n = groups.n;
        out.tensors.truncate(nr);
        out.tensors.resize_with(nr, Tensor::placeholder);
        let size = numel(s);
        // Results shared by the whole group are built at its first member
        // (the smallest rank, so already written) and copied.
        let shared = matches!(
            self.kind,
            Kind::AllGather { .. } | Kind::AllReduce | Kind::PMean
        );
        for r in 0..nr {
            let (g, k) = (groups.members(r), groups.index(r));
            let (done, rest) = out.tensors.split_at_mut(r);
            let o = &mut rest[0];
            if shared && k != 0 {
                o.clone_from(&done[g[0]]);
                continue;
            }
            o.shape.clone_from(shape);
            o.data.clear();
            let here = &x.tensors[r];
            match &self.kind {
                Kind::AllGather { dim, .. } => {
                    // Stacking inserts a dim of size 1 in each part: the
                    // same runs as concatenating along `dim`.
                    let inner = numel(&s[*dim..]);
                    o.data.reserve(size * n);
                    for b in 0..numel(&s[..*dim]) {
                        for &q in g {
                            o.data
                                .extend_from_slice(&x.tensors[q].data[b * inner..(b + 1) * inner]);
                        }
                    }
                }
                Kind::AllReduce | Kind::PMean => {
                    o.data.extend_from_slice(&x.tensors[g[0]].data);
                    for &q in &g[1..] {
                        for (a, b) in o.data.iter_mut().zip(&x.tensors[q].data) {
                            *a = a.add(b);
                        }
                    }
                    if let Kind::PMean = self.kind {
                        let h = Q::frac(1, n as i64);
                        for a in &mut o.data {
                            *a = a.mul(&h);
                        }
                    }
                }
                Kind::DivideByGroupSize => {
                    let h = Q::frac(1, n as i64);
                    o.data.extend(here.data.iter().map(|a| a.mul(&h)));
                }
                Kind::ReduceScatter { dim, .. } => {
                    // Chunk k of the sum is the sum of the chunks k.
                    let runs = Chunk::new(s, *dim, n, k);
                    runs.push(&mut o.data, &x.tensors[g[0]].data, 0, runs.len);
                    for &q in &g[1..] {
                        runs.add(&mut o.data, &x.tensors[q].data);
                    }
                }
                Kind::AllToAll {
                    split,
                    concat,
                    stack,
                } => {
                    // Chunk k (along `split`) of each member, concatenated
                    // along `concat` in group order. Untiled, the chunk is
                    // one entry with its dim dropped (the same flat data)
                    // and the pieces are stacked at `concat`: the same runs
                    // as concatenating pieces of the dropped shape there.
                    let runs = Chunk::new(s, *split, n, k);
                    let mut ps = s.to_vec();
                    if *stack {
                        ps.remove(*split);
                    } else {
                        ps[*split] /= n;
                    }
                    let inner = numel(&ps[*concat..]);
                    o.data.reserve(runs.len * n);
                    for b in 0..numel(&ps[..*concat]) {
                        for &q in g {
                            runs.push(&mut o.data, &x.tensors[q].data, b * inner, (b + 1) * inner);
                        }
                    }
                }
                Kind::Reinterpret => o.data.extend_from_slice(&here.data),
                Kind::Convert { dim, .. } => match (self.src, self.dst) {
                    (State::Reduced | State::Invariant, State::Varying) => {
                        // Chunk k; unstacking drops the dim (of size n).
                        let runs = Chunk::new(s, *dim, n, k);
                        runs.push(&mut o.data, &here.data, 0, runs.len);
                    }
                    (State::Varying, State::Partial) => {
                        // Block k of n along `dim`, zeros elsewhere; the
                        // stacked form (a new dim) has the same runs.
                        let inner = numel(&s[*dim..]);
                        o.data.reserve(size * n);
                        for b in 0..numel(&s[..*dim]) {
                            for j in 0..n {
                                if j == k {
                                    o.data
                                        .extend_from_slice(&here.data[b * inner..(b + 1) * inner]);
                                } else {
                                    o.data.resize(o.data.len() + inner, Q::zero());
                                }
                            }
                        }
                    }
                    (State::Reduced | State::Invariant, State::Partial) => {
                        if k == 0 {
                            o.data.extend_from_slice(&here.data);
                        } else {
                            o.data.resize(size, Q::zero());
                        }
                    }
                    _ => o.data.extend_from_slice(&here.data),
                },
                Kind::PPermute { perm, .. } => match perm.iter().position(|p| *p == Some(k)) {
                    Some(src) => o.data.extend_from_slice(&x.tensors[g[src]].data),
                    None => o.data.resize(size, Q::zero()),
                },
            }
        }
    }

    /// The per-rank forward written plainly (each rank's result built from
    /// whole-tensor gathers, sums and chunks). [`Collective::forward_into`]
    /// is tested against it; it also serves inputs whose ranks hold tensors
    /// of different shapes, which the fast path does not handle.
    pub fn forward_reference(&self, m: &Mesh, x: &PerRank) -> PerRank {
        let groups = m.groups(&self.axes);
        let mut sums = GroupSums::new(m.num_ranks());
        let tensors = (0..m.num_ranks())
            .map(|r| {
                let (g, k) = (groups.members(r), groups.index(r));
                let n = g.len();
                let xs: Vec<&Tensor> = g.iter().map(|&q| &x.tensors[q]).collect();
                match &self.kind {
                    Kind::AllGather { dim, stack } => sums.gather(g, &xs, *dim, *stack).clone(),
                    Kind::AllReduce => sums.get(g, &xs).clone(),
                    Kind::PMean => sums.get(g, &xs).scale(&Q::frac(1, n as i64)),
                    Kind::DivideByGroupSize => x.tensors[r].scale(&Q::frac(1, n as i64)),
                    Kind::ReduceScatter { dim, stack: true } => {
                        unstack(sums.get(g, &xs), n, k, *dim)
                    }
                    Kind::ReduceScatter { dim, stack: false } => {
                        sums.get(g, &xs).chunk(n, *dim)[k].clone()
                    }
                    Kind::AllToAll {
                        split,
                        concat,
                        stack: false,
                    } => {
                        let parts: Vec<Tensor> =
                            xs.iter().map(|t| t.chunk(n, *split)[k].clone()).collect();
                        Tensor::concat(&parts, *concat)
                    }
                    Kind::AllToAll {
                        split,
                        concat,
                        stack: true,
                    } => {
                        let parts: Vec<Tensor> =
                            xs.iter().map(|t| unstack(t, n, k, *split)).collect();
                        Tensor::stack(&parts, *concat)
                    }
                    Kind::Reinterpret => x.tensors[r].clone(),
                    Kind::Convert { dim, stack } => match (self.src, self.dst) {
                        (State::Reduced | State::Invariant, State::Varying) if *stack => {
                            unstack(&x.tensors[r], n, k, *dim)
                        }
                        (State::Reduced | State::Invariant, State::Varying) => {
                            x.tensors[r].chunk(n, *dim)[k].clone()
                        }
                        (State::Varying, State::Partial) if *stack => {
                            place_stacked(&x.tensors[r], n, k, *dim)
                        }
                        (State::Reduced | State::Invariant, State::Partial) => {
                            if k == 0 {
                                x.tensors[r].clone()
                            } else {
                                Tensor::zeros(&x.tensors[r].shape)
                            }
                        }
                        (State::Varying, State::Partial) => place(&x.tensors[r], n, k, *dim),
                        _ => x.tensors[r].clone(),
                    },
                    Kind::PPermute { perm, .. } => match perm.iter().position(|p| *p == Some(k)) {
                        Some(src) => xs[src].clone(),
                        None => Tensor::zeros(&x.tensors[r].shape),
                    },
                }
            })
            .collect();
        PerRank { tensors }
    }

    /// The declared global meaning (SPEC.md §10.2), on full-rank families.
    pub fn spec(&self, m: &Mesh, d: &Denot) -> Denot {
        let groups = m.groups(&self.axes);
        let mut sums = GroupSums::new(m.num_ranks());
        let family = (0..m.num_ranks())
            .map(|r| {
                let (g, k) = (groups.members(r), groups.index(r));
                let n = g.len();
                let ds: Vec<&Tensor> = g.iter().map(|&q| &d.family[q]).collect();
                let here = &d.family[r];
                match (&self.kind, self.src) {
                    // Gathering concatenates the Varying pieces.
                    (Kind::AllGather { dim, stack }, _) => {
                        sums.gather(g, &ds, *dim, *stack).clone()
                    }
                    // A Partial value is already its sum: all_reduce keeps it.
                    (Kind::AllReduce, State::Partial) => here.clone(),
                    (Kind::AllReduce, _) => sums.get(g, &ds).clone(),
                    (Kind::PMean, State::Partial) => here.scale(&Q::frac(1, n as i64)),
                    (Kind::PMean, _) => sums.get(g, &ds).scale(&Q::frac(1, n as i64)),
                    (Kind::DivideByGroupSize, _) => here.scale(&Q::frac(1, n as i64)),
                    (Kind::ReduceScatter { dim, stack: true }, State::Partial) => {
                        unstack(here, n, k, *dim)
                    }
                    (Kind::ReduceScatter { dim, stack: true }, _) => {
                        unstack(sums.get(g, &ds), n, k, *dim)
                    }
                    (Kind::ReduceScatter { dim, .. }, State::Partial) => piece(here, n, k, *dim),
                    (Kind::ReduceScatter { dim, .. }, _) => piece(sums.get(g, &ds), n, k, *dim),
                    (
                        Kind::AllToAll {
                            split,
                            concat,
                            stack: false,
                        },
                        _,
                    ) => {
                        let parts: Vec<Tensor> =
                            ds.iter().map(|t| piece(t, n, k, *split)).collect();
                        Tensor::concat(&parts, *concat)
                    }
                    // Untiled: member k's output, entry j along `concat`,
                    // is member j's entry k along `split`.
                    (
                        Kind::AllToAll {
                            split,
                            concat,
                            stack: true,
                        },
                        _,
                    ) => {
                        // Written apart from the forward: entry k of each
                        // member as a slice of size 1, that unit dim moved
                        // to `concat`, then concatenated there.
                        let parts: Vec<Tensor> = ds
                            .iter()
                            .map(|t| {
                                let p = piece(t, n, k, *split);
                                let mut shape = p.shape.clone();
                                shape.remove(*split);
                                shape.insert(*concat, 1);
                                Tensor::new(shape, p.data)
                            })
                            .collect();
                        Tensor::concat(&parts, *concat)
                    }
                    // Reinterpreting keeps local data, so the denotation
                    // changes as seed 003 describes.
                    (Kind::Reinterpret, State::Invariant | State::Reduced) => match self.dst {
                        State::Partial => here.scale(&Q::int(n as i64)),
                        _ => here.clone(),
                    },
                    (Kind::Reinterpret, State::Varying) => match self.dst {
                        State::Partial => sums.get(g, &ds).clone(),
                        _ => here.clone(),
                    },
                    (Kind::Reinterpret, State::Partial) => here.clone(),
                    // Converting keeps the denotation, Varying read as
                    // concatenation along `dim` (or stacking with `stack`).
                    (Kind::Convert { dim, stack }, State::Invariant | State::Reduced) => {
                        match (self.dst, stack) {
                            (State::Varying, true) => unstack(here, n, k, *dim),
                            (State::Varying, false) => piece(here, n, k, *dim),
                            _ => here.clone(),
                        }
                    }
                    (Kind::Convert { dim, stack }, State::Varying) => match self.dst {
                        State::Partial => sums.gather(g, &ds, *dim, *stack).clone(),
                        // Not a convert (it needs communication): refused
                        // by `infer`, so never run.
                        _ => here.clone(),
                    },
                    (Kind::Convert { .. }, State::Partial) => here.clone(),
                    (Kind::PPermute { perm, .. }, _) => {
                        match perm.iter().position(|p| *p == Some(k)) {
                            Some(src) => ds[src].clone(),
                            None => Tensor::zeros(&here.shape),
                        }
                    }
                }
            })
            .collect();
        Denot { family }
    }

    /// `spec` written into `out`, reusing its tensors and the group
    /// buffers `w`: the same formulas, each result built in place of the
    /// last instance's (a program's F3 runs it at every instance). An
    /// all_to_all builds its pieces as `spec` does.
    pub fn spec_into(&self, m: &Mesh, d: &Denot, out: &mut Denot, w: &mut SpecBufs) {
        if matches!(self.kind, Kind::AllToAll { .. }) {
            *out = self.spec(m, d);
            return;
        }
        let groups = m.groups(&self.axes);
        let nr = m.num_ranks();
        w.reset(nr);
        out.family.truncate(nr);
        out.family.resize_with(nr, Tensor::placeholder);
        for (r, o) in out.family.iter_mut().enumerate() {
            let (g, k) = (groups.members(r), groups.index(r));
            let n = g.len();
            let here = &d.family[r];
            let h = || Q::frac(1, n as i64);
            match (&self.kind, self.src) {
                (Kind::AllGather { dim, stack }, _) => o.clone_from(w.gather(d, g, *dim, *stack)),
                (Kind::AllReduce, State::Partial) => o.clone_from(here),
                (Kind::AllReduce, _) => o.clone_from(w.sum(d, g)),
                (Kind::PMean, State::Partial) => scale_into(here, &h(), o),
                (Kind::PMean, _) => scale_into(w.sum(d, g), &h(), o),
                (Kind::DivideByGroupSize, _) => scale_into(here, &h(), o),
                (Kind::ReduceScatter { dim, stack: true }, State::Partial) => {
                    unstack_into(here, n, k, *dim, o)
                }
                (Kind::ReduceScatter { dim, stack: true }, _) => {
                    unstack_into(w.sum(d, g), n, k, *dim, o)
                }
                (Kind::ReduceScatter { dim, .. }, State::Partial) => {
                    piece_into(here, n, k, *dim, o)
                }
                (Kind::ReduceScatter { dim, .. }, _) => piece_into(w.sum(d, g), n, k, *dim, o),
                (Kind::AllToAll { .. }, _) => unreachable!("built by `spec` above"),
                (Kind::Reinterpret, State::Invariant | State::Reduced) => match self.dst {
                    State::Partial => scale_into(here, &Q::int(n as i64), o),
                    _ => o.clone_from(here),
                },
                (Kind::Reinterpret, State::Varying) => match self.dst {
                    State::Partial => o.clone_from(w.sum(d, g)),
                    _ => o.clone_from(here),
                },
                (Kind::Reinterpret, State::Partial) => o.clone_from(here),
                (Kind::Convert { dim, stack }, State::Invariant | State::Reduced) => {
                    match (self.dst, stack) {
                        (State::Varying, true) => unstack_into(here, n, k, *dim, o),
                        (State::Varying, false) => piece_into(here, n, k, *dim, o),
                        _ => o.clone_from(here),
                    }
                }
                (Kind::Convert { dim, stack }, State::Varying) => match self.dst {
                    State::Partial => o.clone_from(w.gather(d, g, *dim, *stack)),
                    _ => o.clone_from(here),
                },
                (Kind::Convert { .. }, State::Partial) => o.clone_from(here),
                (Kind::PPermute { perm, .. }, _) => match perm.iter().position(|p| *p == Some(k)) {
                    Some(src) => o.clone_from(&d.family[g[src]]),
                    None => {
                        o.shape.clone_from(&here.shape);
                        o.data.clear();
                        o.data.resize(numel(&here.shape), Q::zero());
                    }
                },
            }
        }
    }

    /// Elements sent per rank in the ring model (SPEC.md §10.4), for a local
    /// input of `in_shape`.
    pub fn cost(&self, m: &Mesh, in_shape: &[usize]) -> Q {
        let n = self.group_size(m) as i64;
        let local: i64 = in_shape.iter().product::<usize>() as i64;
        let frac = Q::frac(n - 1, n);
        match &self.kind {
            Kind::AllGather { .. } => frac.mul(&Q::int(local * n)),
            Kind::ReduceScatter { .. } => frac.mul(&Q::int(local)),
            Kind::AllReduce | Kind::PMean => frac.mul(&Q::int(2 * local)),
            Kind::AllToAll { .. } => frac.mul(&Q::int(local)),
            Kind::PPermute { perm, .. } => {
                if perm.iter().enumerate().all(|(k, p)| *p == Some(k)) {
                    Q::zero()
                } else {
                    Q::int(local)
                }
            }
            Kind::Reinterpret | Kind::Convert { .. } | Kind::DivideByGroupSize => Q::zero(),
        }
    }

    /// Whether this is a cast that changes nothing (same state in and out).
    pub fn is_noop_cast(&self) -> bool {
        matches!(self.kind, Kind::Reinterpret | Kind::Convert { .. }) && self.src == self.dst
    }
    /// `all_gather(dim=0)[V->R]`: the call with its states.
    pub fn describe_typed(&self) -> String {
        format!("{}[{}->{}]", self.describe(), self.src, self.dst)
    }
    /// `all_gather_reduced(dim=0)` style text.
    pub fn describe(&self) -> String {
        let p = match &self.kind {
            Kind::AllGather { dim, stack } => {
                format!("dim={dim}{}", if *stack { ", stack" } else { "" })
            }
            Kind::ReduceScatter { dim, stack } => {
                format!("dim={dim}{}", if *stack { ", stack" } else { "" })
            }
            Kind::Convert { dim, stack } => {
                if self.src == State::Varying || self.dst == State::Varying {
                    format!("dim={dim}{}", if *stack { ", stack" } else { "" })
                } else {
                    String::new()
                }
            }
            Kind::AllToAll {
                split,
                concat,
                stack,
            } => format!(
                "split={split}, concat={concat}{}",
                if *stack { ", stack" } else { "" }
            ),
            Kind::PPermute { perm, pairs: true } => {
                let p: Vec<String> = perm
                    .iter()
                    .enumerate()
                    .filter_map(|(s, d)| d.map(|d| format!("({s}, {d})")))
                    .collect();
                format!("perm=[{}]", p.join(", "))
            }
            Kind::PPermute { perm, .. } => {
                let p: Vec<String> = perm
                    .iter()
                    .map(|x| x.map(|v| v.to_string()).unwrap_or("_".into()))
                    .collect();
                format!("perm=[{}]", p.join(","))
            }
            _ => String::new(),
        };
        format!("{}({p})", self.name)
    }
}

// ---------------------------------------------------------------------------
// Collectives of pending kinds (SPEC.md §21.3): on one axis, per-rank
// tensors in rank order.

/// A collective on one axis that performs (or creates) a pending reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coll {
    /// all_reduce(k): Partial(k) -> Replicate. JAX `unreduced_pmax`, DTensor
    /// `redistribute(Partial(k) -> Replicate())`.
    AllReduce(PartialKind),
    /// reduce_scatter(k, d): Partial(k) -> Shard(d).
    ReduceScatter(PartialKind, usize),
    /// DTensor's `Replicate() -> Partial(k)`: `_partition_value`.
    Partition(PartialKind),
}

/// Ring all-reduce, written pairwise: member r starts from its own tensor
/// and folds in the others in ring order r+1, r+2, ...; avg divides once at
/// the end (how a sum-then-scale backend computes it). Independent of
/// `pending::combine` on purpose: F3 compares the two. One axis, `xs`
/// one tensor per rank.
pub fn ring_fold(k: PartialKind, xs: &[Tensor], start: usize) -> Tensor {
    let n = xs.len();
    let mut acc = xs[start].clone();
    for j in 1..n {
        let y = &xs[(start + j) % n];
        acc = match k {
            PartialKind::Sum | PartialKind::Avg => acc.add(y),
            PartialKind::Max => acc.zip(y, |a, b| if b > a { b.clone() } else { a.clone() }),
            PartialKind::Min => acc.zip(y, |a, b| if b < a { b.clone() } else { a.clone() }),
        };
    }
    if k == PartialKind::Avg {
        acc = acc.scale(&Q::frac(1, n as i64));
    }
    acc
}

impl Coll {
    pub fn name(&self) -> String {
        match self {
            Coll::AllReduce(k) => format!("all_reduce({k}): P({k}) -> I"),
            Coll::ReduceScatter(k, d) => format!("reduce_scatter({k}, dim={d}): P({k}) -> S({d})"),
            Coll::Partition(k) => format!("partition({k}): I -> P({k})"),
        }
    }
    pub fn places(&self) -> (Place, Place) {
        match *self {
            Coll::AllReduce(k) => (Place::Part(k), Place::Inv),
            Coll::ReduceScatter(k, d) => (Place::Part(k), Place::Shard(d)),
            Coll::Partition(k) => (Place::Inv, Place::Part(k)),
        }
    }
    /// The per-rank forward.
    pub fn forward(&self, xs: &[Tensor]) -> Vec<Tensor> {
        let n = xs.len();
        match *self {
            Coll::AllReduce(k) => (0..n).map(|r| ring_fold(k, xs, r)).collect(),
            Coll::ReduceScatter(k, d) => (0..n)
                .map(|r| ring_fold(k, xs, r).chunk(n, d)[r].clone())
                .collect(),
            Coll::Partition(k) => match k {
                // DTensor 2.14.1 `Partial._partition_value`: v / n for sum,
                // v itself for avg, max and min.
                PartialKind::Sum => xs.iter().map(|x| x.scale(&Q::frac(1, n as i64))).collect(),
                PartialKind::Avg | PartialKind::Max | PartialKind::Min => xs.to_vec(),
            },
        }
    }
}

/// Check a permutation on its own: entries in range and no member receiving
/// twice. Its length must be the group size, which only a mesh says
/// (`Collective::infer`).
pub fn check_perm(name: &str, perm: &[Option<usize>]) -> Result<(), String> {
    let n = perm.len();
    if n == 0 {
        return Err(format!("{name}: empty permutation"));
    }
    let mut seen = vec![false; n];
    for p in perm.iter().flatten() {
        if *p >= n {
            return Err(format!(
                "{name}: perm entry {p} out of range for a group of {n}"
            ));
        }
        if std::mem::replace(&mut seen[*p], true) {
            return Err(format!(
                "{name}: perm sends two members to {p}; it must be injective"
            ));
        }
    }
    Ok(())
}
