//! The exhaustive small scope (SPEC.md §8.1, §8.2).

use spmd_interp::Op;
use spmd_semantics::{Mesh, Shape, State, Type, ALL_STATES, Q};
use std::ops::ControlFlow;

/// Every value of a small domain, in the order used for minimal
/// counterexamples (simplest first). Compositional, after miri's `Exhaustive`.
pub trait Exhaustive: Sized {
    fn all(scope: &Scope) -> Vec<Self>;
}

impl Exhaustive for State {
    fn all(_: &Scope) -> Vec<State> {
        ALL_STATES.to_vec()
    }
}

impl Exhaustive for Mesh {
    fn all(scope: &Scope) -> Vec<Mesh> {
        scope.meshes.clone()
    }
}

impl Exhaustive for Shape {
    fn all(scope: &Scope) -> Vec<Shape> {
        scope.shapes()
    }
}

/// Every type on `ndim` mesh axes (4^ndim), in state order.
pub fn all_types(ndim: usize) -> Vec<Type> {
    tuples(&ALL_STATES, ndim)
        .into_iter()
        .map(Type::new)
        .collect()
}

/// One-axis global SPMD types (SPEC.md §13): I, P, R, and Varying sharding
/// each tensor dim below `max_rank`, written S(0), S(1), ...
pub fn all_global_types(max_rank: usize) -> Vec<Type> {
    let mut out: Vec<Type> = [State::Invariant, State::Partial, State::Reduced]
        .into_iter()
        .map(Type::one)
        .collect();
    out.extend((0..max_rank).map(|d| Type::laid(vec![State::Varying], vec![Some(d)])));
    out
}

/// The values of the default scope, simplest first: a polynomial of degree d
/// is decided by the first d + 1 (SPEC.md §8.3).
pub const DEFAULT_VALUES: [(i64, i64); 6] = [(0, 1), (1, 1), (-1, 1), (2, 1), (1, 2), (-2, 1)];

/// The bounds of exhaustive enumeration (SPEC.md §8.1).
#[derive(Clone, Debug)]
pub struct Scope {
    /// Meshes in the order tried (fewest ranks first).
    pub meshes: Vec<Mesh>,
    /// Tensor ranks 0..=max_rank ...
    pub max_rank: usize,
    /// ... with every dim in 1..=max_dim.
    pub max_dim: usize,
    /// Scalar values, simplest first; must start with 0.
    pub values: Vec<Q>,
    /// A mesh × shape case where some input has more free scalars than this
    /// is left to the random part ...
    pub max_free: usize,
    /// ... and so is one whose grid has more points than this.
    pub max_points: u64,
    /// Refuse to start a run estimated above this many instances.
    pub max_instances: u64,
    /// Also give tensor dims equal to each mesh axis size and to the mesh's
    /// rank count, so a scatter or a sharded dim fits on a mesh larger than
    /// `max_dim` (SPEC.md §8.1).
    pub mesh_dims: bool,
}

impl Default for Scope {
    fn default() -> Scope {
        Scope {
            meshes: vec![
                Mesh::line(1),
                Mesh::line(2),
                Mesh::line(3),
                Mesh::line(4),
                Mesh::new(&[("dp", 2), ("tp", 2)]),
                Mesh::new(&[("dp", 2), ("tp", 3)]),
            ],
            max_rank: 2,
            max_dim: 3,
            values: DEFAULT_VALUES.iter().map(|&(n, d)| Q::frac(n, d)).collect(),
            max_free: 4,
            max_points: 256,
            max_instances: 20_000_000,
            mesh_dims: false,
        }
    }
}

impl Scope {
    /// Shapes of rank 0..=max_rank with dims 1..=max_dim, smallest first.
    pub fn shapes(&self) -> Vec<Shape> {
        self.shapes_with(&(1..=self.max_dim).collect::<Vec<_>>())
    }
    /// The shapes used on mesh `m`: `shapes()`, plus, with `mesh_dims`,
    /// dims equal to `m`'s axis sizes and rank count.
    pub fn shapes_for(&self, m: &Mesh) -> Vec<Shape> {
        let mut dims: Vec<usize> = (1..=self.max_dim).collect();
        if self.mesh_dims {
            for d in m.axes.iter().map(|a| a.size).chain([m.num_ranks()]) {
                if !dims.contains(&d) {
                    dims.push(d);
                }
            }
        }
        self.shapes_with(&dims)
    }
    /// The most shapes of any mesh of the scope.
    pub fn max_shapes(&self) -> usize {
        self.meshes
            .iter()
            .map(|m| self.shapes_for(m).len())
            .max()
            .unwrap_or_else(|| self.shapes().len())
    }
    fn shapes_with(&self, dims: &[usize]) -> Vec<Shape> {
        let mut out: Vec<Shape> = vec![vec![]];
        let mut layer: Vec<Shape> = vec![vec![]];
        for _ in 0..self.max_rank {
            layer = layer
                .into_iter()
                .flat_map(|s| {
                    dims.iter().map(move |&d| {
                        let mut t = s.clone();
                        t.push(d);
                        t
                    })
                })
                .collect();
            out.extend(layer.iter().cloned());
        }
        out.sort_by_key(|s| (s.iter().product::<usize>(), s.len(), s.clone()));
        out
    }
    /// The meshes of the scope with exactly `ndim` axes.
    pub fn meshes_with(&self, ndim: usize) -> Vec<Mesh> {
        self.meshes
            .iter()
            .filter(|m| m.ndim() == ndim)
            .cloned()
            .collect()
    }
    /// The grid for one input: the first `degree + 1` values for a polynomial
    /// (enough for a proof), every value otherwise.
    pub fn grid_values(&self, polynomial: bool, degree: u32) -> Vec<Q> {
        if polynomial {
            self.values
                .iter()
                .take(degree as usize + 1)
                .cloned()
                .collect()
        } else {
            self.values.clone()
        }
    }
}

/// Every `k`-tuple of `items` (the k-fold cartesian product), in order.
pub fn tuples<T: Clone>(items: &[T], k: usize) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = vec![vec![]];
    for _ in 0..k {
        out = out
            .into_iter()
            .flat_map(|t| {
                items.iter().map(move |x| {
                    let mut u = t.clone();
                    u.push(x.clone());
                    u
                })
            })
            .collect();
    }
    out
}

/// The tuples of `shapes` worth inferring for `op` on `m`, in the order of
/// `tuples`: for a program those that no step rejects on its own
/// (`Program::viable_tuples`), for an expression those that no
/// subexpression rejects on its own (`eval::visit_viable`), and all of them
/// otherwise; a superset of the ones `infer` accepts (SPEC.md §18.9).
pub fn candidate_tuples(op: &Op, m: &Mesh, shapes: &[Shape]) -> Vec<Vec<Shape>> {
    let mut out = Vec::new();
    visit_candidates(op, m, shapes, u64::MAX, &mut |t| out.push(t.to_vec()));
    out
}

/// How many tuples `candidate_tuples` gives, if its search makes at most
/// `budget` choices; `None` beyond.
pub fn candidate_count(op: &Op, m: &Mesh, shapes: &[Shape], budget: u64) -> Option<u64> {
    let mut n = 0u64;
    visit_candidates(op, m, shapes, budget, &mut |_| n += 1).then_some(n)
}

/// `candidate_tuples`, each given to `leaf` in turn; every choice of a
/// shape at any input position counts against `budget`, and `false` says
/// it ran out before the search ended.
pub fn visit_candidates(
    op: &Op,
    m: &Mesh,
    shapes: &[Shape],
    budget: u64,
    leaf: &mut dyn FnMut(&[Shape]),
) -> bool {
    match op {
        Op::Program(p) => p.visit_viable(m, shapes, budget, leaf),
        Op::Local(f) => spmd_interp::eval::visit_viable(&f.expr, f.arity(), shapes, budget, leaf),
        Op::Declared { forward, .. } => visit_candidates(forward, m, shapes, budget, leaf),
        _ => visit_product(shapes, op.arity(), budget, leaf),
    }
}

/// Every `k`-tuple of `items` in the order of `tuples`, each choice
/// counted against `budget` as `visit_candidates` counts it.
fn visit_product(items: &[Shape], k: usize, budget: u64, leaf: &mut dyn FnMut(&[Shape])) -> bool {
    fn go(
        items: &[Shape],
        t: &mut Vec<Shape>,
        k: usize,
        left: &mut u64,
        leaf: &mut dyn FnMut(&[Shape]),
    ) -> bool {
        if t.len() == k {
            leaf(t);
            return true;
        }
        for x in items {
            if *left == 0 {
                return false;
            }
            *left -= 1;
            t.push(x.clone());
            let ok = go(items, t, k, left, leaf);
            t.pop();
            if !ok {
                return false;
            }
        }
        true
    }
    let mut left = budget;
    go(items, &mut Vec::with_capacity(k), k, &mut left, leaf)
}

/// Every tuple of input shapes from the scope that the op accepts, smallest
/// total size first.
pub fn shape_tuples(op: &Op, m: &Mesh, scope: &Scope) -> Vec<Vec<Shape>> {
    let mut ok: Vec<Vec<Shape>> = candidate_tuples(op, m, &scope.shapes_for(m))
        .into_iter()
        .filter(|t| op.infer(m, t).is_ok())
        .collect();
    ok.sort_by_key(|t| {
        (
            t.iter().map(|s| s.iter().product::<usize>()).sum::<usize>(),
            t.clone(),
        )
    });
    ok
}

/// Number of points of a grid with `lists[p]` the values of position p.
pub fn grid_size(lists: &[&[Q]]) -> u64 {
    lists
        .iter()
        .fold(1u64, |acc, l| acc.saturating_mul(l.len() as u64))
}

/// Visit every point of the grid (position p takes the values `lists[p]`,
/// each starting with 0), fewest nonzeros first, then in value order: the
/// first counterexample met is the one with fewest nonzeros (SPEC.md §7.2).
pub fn for_each_grid_point<B>(
    lists: &[&[Q]],
    f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>,
) -> ControlFlow<B> {
    for_each_lower_point(lists, &[(lists.len(), None)], None, f)
}

/// The positions of a grid grouped in blocks (one per input): `blocks[b] =
/// (k, budget)` is k consecutive positions. With `budget = Some(d)` only
/// the points where the value indices of the block's positions (the index
/// into `lists[p]`, 0 for the value 0) sum to at most d are kept: a lower
/// set of multi-indices, which decides the polynomials of total degree at
/// most d in the block (SPEC.md §8.3). With `None` every combination is
/// kept. The block sizes must add up to `lists.len()`.
///
/// With `total = Some(t)` only the points whose value indices sum, over
/// all positions, to at most t are kept besides: the lower set that
/// decides the polynomials of total degree at most t in all positions
/// together (SPEC.md §8.3).
///
/// Visits the kept points in the order of `for_each_grid_point` (fewest
/// nonzeros first, then value order), so the first counterexample met is
/// the one `for_each_grid_point` would meet first among them.
pub fn for_each_lower_point<B>(
    lists: &[&[Q]],
    blocks: &[(usize, Option<usize>)],
    total: Option<usize>,
    f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>,
) -> ControlFlow<B> {
    for_each_lane_point(lists, blocks, total, None, f)
}

/// What a group of positions is in a lane split (SPEC.md §8.5): a lane,
/// with the core it reads if any, or a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Lane(Option<u32>),
    Core,
}

/// A split of a grid's positions: a group per position, and what each
/// group is (`parts[g]`).
#[derive(Clone, Copy, Debug)]
pub struct Split<'a> {
    pub group: &'a [u32],
    pub parts: &'a [Part],
}

impl Split<'_> {
    /// The positions of each group that a point may have nonzero together
    /// with a lane's: the lane's and its core's; for a core, its own.
    fn reach(&self, g: u32) -> impl Fn(u32) -> bool + '_ {
        let core = match self.parts[g as usize] {
            Part::Lane(c) => c,
            Part::Core => None,
        };
        move |x| x == g || Some(x) == core
    }
}

/// `for_each_lower_point` restricted, with `split`, to the points whose
/// nonzero positions all lie in one lane and the core it reads, or in one
/// core: the same points in the same order, the others skipped (SPEC.md
/// §8.5).
pub fn for_each_lane_point<B>(
    lists: &[&[Q]],
    blocks: &[(usize, Option<usize>)],
    total: Option<usize>,
    groups: Option<Split<'_>>,
    f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>,
) -> ControlFlow<B> {
    let block_of: Vec<usize> = blocks
        .iter()
        .enumerate()
        .flat_map(|(b, &(k, _))| std::iter::repeat_n(b, k))
        .collect();
    assert_eq!(block_of.len(), lists.len(), "blocks cover the grid");
    let mut w = Walk {
        lists,
        block_of,
        budget: blocks
            .iter()
            .map(|&(_, d)| d.unwrap_or(usize::MAX))
            .collect(),
        used: vec![0; blocks.len()],
        nonzero: vec![0; blocks.len()],
        chosen: Vec::new(),
        point: vec![Q::zero(); lists.len()],
        groups,
        total: total.unwrap_or(usize::MAX),
        total_used: 0,
    };
    // No point has more nonzeros than a lane and its core have positions.
    let most = match groups {
        None => lists.len(),
        Some(sp) => {
            let mut count = vec![0usize; sp.parts.len()];
            for &x in sp.group {
                count[x as usize] += 1;
            }
            (0..sp.parts.len() as u32)
                .map(|g| {
                    let reach = sp.reach(g);
                    (0..sp.parts.len() as u32)
                        .filter(|&x| reach(x))
                        .map(|x| count[x as usize])
                        .sum::<usize>()
                })
                .max()
                .unwrap_or(0)
        }
    };
    // Each nonzero takes index 1 at least.
    for nnz in 0..=most.min(w.total) {
        w.subsets(nnz, 0, f)?;
    }
    ControlFlow::Continue(())
}

/// The state of `for_each_lower_point`: the point, its nonzero positions,
/// and per block the sum of value indices and the count of nonzeros so far.
struct Walk<'a> {
    lists: &'a [&'a [Q]],
    block_of: Vec<usize>,
    budget: Vec<usize>,
    used: Vec<usize>,
    nonzero: Vec<usize>,
    chosen: Vec<usize>,
    point: Vec<Q>,
    groups: Option<Split<'a>>,
    /// The budget of all positions together, and what the chosen values
    /// use of it.
    total: usize,
    total_used: usize,
}

impl Walk<'_> {
    /// Whether a position of group `g` may join the chosen ones: all in one
    /// lane and its core, or in one core.
    fn fits(&self, sp: Split<'_>, g: u32) -> bool {
        let lane = self
            .chosen
            .iter()
            .map(|&c| sp.group[c])
            .chain([g])
            .find(|&x| sp.parts[x as usize] != Part::Core);
        let anchor = lane.unwrap_or(g);
        let reach = sp.reach(anchor);
        reach(g) && self.chosen.iter().all(|&c| reach(sp.group[c]))
    }

    /// Every set of `nnz` positions from `start` on, in lexicographic order;
    /// a block never gets more nonzeros than its budget (each takes index
    /// 1 at least).
    fn subsets<B>(
        &mut self,
        nnz: usize,
        start: usize,
        f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if self.chosen.len() == nnz {
            return self.walk(0, f);
        }
        for p in start..self.lists.len() {
            let b = self.block_of[p];
            if let Some(sp) = self.groups {
                if !self.fits(sp, sp.group[p]) {
                    continue;
                }
            }
            if self.lists[p].len() > 1 && self.nonzero[b] < self.budget[b] {
                self.chosen.push(p);
                self.nonzero[b] += 1;
                self.subsets(nnz, p + 1, f)?;
                self.nonzero[b] -= 1;
                self.chosen.pop();
            }
        }
        ControlFlow::Continue(())
    }

    /// Every nonzero value for the chosen positions from `at` on, within
    /// the budgets (the positions still to come need index 1 at least).
    fn walk<B>(&mut self, at: usize, f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>) -> ControlFlow<B> {
        if at == self.chosen.len() {
            return f(&self.point);
        }
        let p = self.chosen[at];
        let b = self.block_of[p];
        let later = self.chosen[at + 1..]
            .iter()
            .filter(|&&q| self.block_of[q] == b)
            .count();
        let later_all = self.chosen.len() - at - 1;
        for j in 1..self.lists[p].len() {
            if self.used[b].saturating_add(j).saturating_add(later) > self.budget[b]
                || self.total_used.saturating_add(j).saturating_add(later_all) > self.total
            {
                break;
            }
            self.point[p] = self.lists[p][j].clone();
            self.used[b] += j;
            self.total_used += j;
            let r = self.walk(at + 1, f);
            self.used[b] -= j;
            self.total_used -= j;
            r?;
        }
        self.point[p] = Q::zero();
        ControlFlow::Continue(())
    }
}

/// C(n, k), or `u64::MAX` when it does not fit.
fn binomial_sat(n: usize, k: usize) -> u64 {
    let k = k.min(n - k);
    let mut r: u128 = 1;
    for i in 1..=k {
        // r · (n − k + i) / i is C(n − k + i, i), an integer.
        r = r * (n - k + i) as u128 / i as u128;
        if r > u64::MAX as u128 {
            return u64::MAX;
        }
    }
    r as u64
}

/// Number of points `for_each_lower_point` visits: per block of k
/// positions with `n` values each, n^k, or with budget d the index vectors
/// in 0..n with sum at most d (C(k + d, d) when d < n); with a `total`
/// budget, the index vectors of all blocks whose sum is at most it.
pub fn lower_size(blocks: &[(usize, usize, Option<usize>)], total: Option<usize>) -> u64 {
    // ways[s]: index vectors of k positions, n values each, summing to s,
    // for s up to `cap`.
    let ways = |k: usize, n: usize, cap: usize| {
        let mut ways = vec![0u64; cap + 1];
        ways[0] = 1;
        for _ in 0..k {
            let mut next = vec![0u64; cap + 1];
            for (s, &w) in ways.iter().enumerate() {
                for j in 0..n.min(cap + 1 - s) {
                    next[s + j] = next[s + j].saturating_add(w);
                }
            }
            ways = next;
        }
        ways
    };
    if let Some(t) = total {
        // The blocks convolved, sums above t dropped.
        let mut acc = vec![0u64; t + 1];
        acc[0] = 1;
        for &(k, n, budget) in blocks {
            let here = ways(k, n, budget.unwrap_or(usize::MAX).min(t));
            let mut next = vec![0u64; t + 1];
            for (s, &a) in acc.iter().enumerate().filter(|(_, a)| **a > 0) {
                for (j, &w) in here.iter().enumerate().take(t + 1 - s) {
                    next[s + j] = next[s + j].saturating_add(a.saturating_mul(w));
                }
            }
            acc = next;
        }
        return acc.iter().fold(0u64, |a, &w| a.saturating_add(w));
    }
    blocks.iter().fold(1u64, |acc, &(k, n, budget)| {
        let here = match budget {
            None => u32::try_from(k)
                .ok()
                .and_then(|k| (n as u64).checked_pow(k))
                .unwrap_or(u64::MAX),
            // No position can reach its last value: C(k + d, d) vectors.
            Some(d) if d < n => binomial_sat(k + d, d),
            Some(d) => ways(k, n, d).iter().fold(0u64, |a, &w| a.saturating_add(w)),
        };
        acc.saturating_mul(here)
    })
}

/// Number of points `for_each_lane_point` visits with `split`: the point
/// 0; per core the points of its own lower set but 0; per lane the points
/// of the lower set of it and its core that are nonzero in the lane.
pub fn lane_size(
    blocks: &[(usize, usize, Option<usize>)],
    total: Option<usize>,
    split: Split<'_>,
) -> u64 {
    lane_size_of(&lane_sizes(blocks, total, split), split)
}

/// Per block (one per input): its positions, its value count and its
/// budget.
pub type Blocks = Vec<(usize, usize, Option<usize>)>;

/// `lane_size` from the groups' own counts (`lane_sizes`).
pub fn lane_size_of(sizes: &LaneSizes, split: Split<'_>) -> u64 {
    (0..split.parts.len()).fold(1u64, |acc, g| {
        let below = match split.parts[g] {
            Part::Core | Part::Lane(None) => 1,
            Part::Lane(Some(c)) => sizes.size(c as usize),
        };
        acc.saturating_add(sizes.size(g).saturating_sub(below))
    })
}

/// The lower sets of a split's groups (`lane_sizes`): each distinct one
/// once, as its blocks and its number of points, and per group which.
pub struct LaneSizes {
    pub sets: Vec<(Blocks, u64)>,
    pub of_group: Vec<u32>,
}

impl LaneSizes {
    /// The number of points of group `g`'s lower set.
    pub fn size(&self, g: usize) -> u64 {
        self.sets[self.of_group[g] as usize].1
    }
}

/// Per group of `split`: `blocks` with each block's positions counted in
/// what a point with that group nonzero may have nonzero, the group and
/// (for a lane) its core; and the number of points of that lower set
/// (with the joint budget `total`). Groups of equal counts share one set,
/// counted once.
pub fn lane_sizes(
    blocks: &[(usize, usize, Option<usize>)],
    total: Option<usize>,
    split: Split<'_>,
) -> LaneSizes {
    let ng = split.parts.len();
    let nb = blocks.len();
    // count[g · nb + b]: positions of block b in group g.
    let mut count = vec![0usize; ng * nb];
    let mut at = 0;
    for (b, &(k, _, _)) in blocks.iter().enumerate() {
        for &g in &split.group[at..at + k] {
            count[g as usize * nb + b] += 1;
        }
        at += k;
    }
    let mut sets: Vec<(Blocks, u64)> = Vec::new();
    let mut of_group = Vec::with_capacity(ng);
    let mut here: Blocks = blocks.to_vec();
    for g in 0..ng {
        let core = match split.parts[g] {
            Part::Lane(Some(c)) => Some(c as usize),
            _ => None,
        };
        for (b, h) in here.iter_mut().enumerate() {
            h.0 = count[g * nb + b] + core.map_or(0, |c| count[c * nb + b]);
        }
        // Few distinct sets in practice: distinct counts of positions
        // that together make at most the case's free scalars.
        let i = match sets.iter().position(|(b, _)| *b == here) {
            Some(i) => i,
            None => {
                sets.push((here.clone(), lower_size(&here, total)));
                sets.len() - 1
            }
        };
        of_group.push(i as u32);
    }
    LaneSizes { sets, of_group }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count of a budgeted block, by the binomial when no position
    /// can reach its last value and by the sums otherwise, is the number
    /// of index vectors a brute force finds.
    #[test]
    fn lower_size_of_one_block_counts_its_index_vectors() {
        for k in 0..5usize {
            for n in 1..5usize {
                for d in 0..7usize {
                    let mut count = 0u64;
                    for code in 0..n.pow(k as u32) {
                        let (mut c, mut sum) = (code, 0);
                        for _ in 0..k {
                            sum += c % n;
                            c /= n;
                        }
                        count += u64::from(sum <= d);
                    }
                    assert_eq!(lower_size(&[(k, n, Some(d))], None), count, "{k} {n} {d}");
                }
            }
        }
        assert_eq!(lower_size(&[(200, 300, Some(100))], None), u64::MAX);
    }

    #[test]
    fn grid_visits_every_point_once_fewest_nonzeros_first() {
        let a = [Q::zero(), Q::one(), Q::int(2)];
        let b = [Q::zero(), Q::one()];
        let lists: Vec<&[Q]> = vec![&a, &b, &a];
        let mut seen = Vec::new();
        let _ = for_each_grid_point::<()>(&lists, &mut |p| {
            seen.push(p.to_vec());
            ControlFlow::Continue(())
        });
        assert_eq!(seen.len() as u64, grid_size(&lists));
        let mut dedup = seen.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), seen.len());
        let nnz: Vec<usize> = seen
            .iter()
            .map(|p| p.iter().filter(|q| !q.is_zero()).count())
            .collect();
        assert!(nnz.windows(2).all(|w| w[0] <= w[1]));
    }

    fn visit(lists: &[&[Q]], blocks: &[(usize, Option<usize>)]) -> Vec<Vec<Q>> {
        visit_total(lists, blocks, None)
    }

    fn visit_total(
        lists: &[&[Q]],
        blocks: &[(usize, Option<usize>)],
        total: Option<usize>,
    ) -> Vec<Vec<Q>> {
        let mut seen = Vec::new();
        let _ = for_each_lower_point::<()>(lists, blocks, total, &mut |p| {
            seen.push(p.to_vec());
            ControlFlow::Continue(())
        });
        seen
    }

    fn values(n: usize) -> Vec<Q> {
        Scope::default().values[..n].to_vec()
    }

    /// The lower set is the full grid filtered by the per-block sums of
    /// value indices, visited in the same order, and `lower_size` counts it.
    #[test]
    fn lower_set_is_the_filtered_grid_in_grid_order() {
        let three = values(3);
        let two = values(2);
        let lists: Vec<&[Q]> = vec![&three, &three, &three, &two, &two];
        let blocks = [(3, Some(2)), (2, Some(1))];
        let full = visit(&lists, &[(5, None)]);
        let index = |p: usize, q: &Q| lists[p].iter().position(|v| v == q).unwrap();
        let kept: Vec<Vec<Q>> = full
            .into_iter()
            .filter(|pt| {
                let s0: usize = (0..3).map(|p| index(p, &pt[p])).sum();
                let s1: usize = (3..5).map(|p| index(p, &pt[p])).sum();
                s0 <= 2 && s1 <= 1
            })
            .collect();
        let lower = visit(&lists, &blocks);
        assert_eq!(lower, kept);
        // C(3 + 2, 2) = 10 points for the first block, 2 + 1 for the second.
        assert_eq!(lower.len(), 30);
        assert_eq!(lower_size(&[(3, 3, Some(2)), (2, 2, Some(1))], None), 30);
        // The example: 4 scalars of degree 2 take 15 points, not 81;
        // degree 1 takes zero and the 4 unit vectors.
        assert_eq!(lower_size(&[(4, 3, Some(2))], None), 15);
        assert_eq!(lower_size(&[(4, 2, Some(1))], None), 5);
        assert_eq!(lower_size(&[(4, 3, None)], None), 81);
        let four = values(3);
        let l4: Vec<&[Q]> = vec![&four; 4];
        assert_eq!(visit(&l4, &[(4, Some(2))]).len(), 15);
    }

    /// Rank of a matrix over Q by exact elimination.
    fn rank(mut a: Vec<Vec<Q>>) -> usize {
        let cols = a.first().map_or(0, Vec::len);
        let mut r = 0;
        for c in 0..cols {
            let Some(p) = (r..a.len()).find(|&i| !a[i][c].is_zero()) else {
                continue;
            };
            a.swap(r, p);
            let inv = Q::one().div(&a[r][c]).unwrap();
            for i in 0..a.len() {
                if i != r && !a[i][c].is_zero() {
                    let f = a[i][c].mul(&inv);
                    let pivot = a[r].clone();
                    for (x, y) in a[i].iter_mut().zip(&pivot) {
                        *x = x.sub(&f.mul(y));
                    }
                }
            }
            r += 1;
        }
        r
    }

    fn monomial(x: &[Q], alpha: &[usize]) -> Q {
        x.iter()
            .zip(alpha)
            .fold(Q::one(), |acc, (v, &e)| (0..e).fold(acc, |a, _| a.mul(v)))
    }

    /// Unisolvence (SPEC.md §8.3): on the lower set of blocks of total
    /// degree d, the monomials of that degree are independent, so a
    /// polynomial of those degrees that vanishes on the set is zero.
    #[test]
    fn lower_set_decides_total_degree_polynomials() {
        for (k0, d0, k1, d1) in [(2, 2, 1, 1), (3, 1, 2, 2), (2, 3, 2, 1), (4, 2, 0, 0)] {
            let a = values(d0 + 1);
            let b = values(d1 + 1);
            let mut lists: Vec<&[Q]> = vec![&a; k0];
            lists.extend(std::iter::repeat_n(b.as_slice(), k1));
            let points = visit(&lists, &[(k0, Some(d0)), (k1, Some(d1))]);
            // The exponents: the same lower set, read as multi-indices.
            let idx: Vec<Q> = (0..=d0.max(d1)).map(|i| Q::int(i as i64)).collect();
            let ia: Vec<&[Q]> = lists.iter().map(|l| &idx[..l.len()]).collect();
            let alphas: Vec<Vec<usize>> = visit(&ia, &[(k0, Some(d0)), (k1, Some(d1))])
                .iter()
                .map(|p| p.iter().map(|q| q.to_string().parse().unwrap()).collect())
                .collect();
            assert_eq!(alphas.len(), points.len());
            let m: Vec<Vec<Q>> = points
                .iter()
                .map(|x| alphas.iter().map(|al| monomial(x, al)).collect())
                .collect();
            assert_eq!(rank(m), points.len(), "blocks {k0}x{d0}, {k1}x{d1}");
        }
    }

    /// A budget over all blocks together (SPEC.md §8.3): the points are the
    /// lower set's with the value indices of all positions summing to at
    /// most t, in the same order; `lower_size` counts them; and the
    /// monomials of total degree at most t within the blocks' degrees are
    /// independent on them. Its twin: a polynomial of total degree t + 1
    /// within the blocks' degrees vanishes there and not on the blocks'
    /// lower set.
    #[test]
    fn a_joint_budget_decides_polynomials_of_that_total_degree() {
        let three = values(3);
        let lists: Vec<&[Q]> = vec![&three; 5];
        let index = |p: usize, q: &Q| lists[p].iter().position(|v| v == q).unwrap();
        for (blocks, t) in [
            (vec![(2, Some(2)), (3, Some(1))], 2),
            (vec![(2, Some(2)), (3, Some(2))], 3),
            (vec![(1, Some(1)), (1, Some(1)), (3, Some(2))], 1),
            (vec![(5, None)], 2),
        ] {
            let lower = visit(&lists, &blocks);
            let want: Vec<Vec<Q>> = lower
                .iter()
                .filter(|pt| (0..5).map(|p| index(p, &pt[p])).sum::<usize>() <= t)
                .cloned()
                .collect();
            let joint = visit_total(&lists, &blocks, Some(t));
            assert_eq!(joint, want, "{blocks:?} {t}");
            let sized: Vec<(usize, usize, Option<usize>)> =
                blocks.iter().map(|&(k, d)| (k, 3, d)).collect();
            assert_eq!(lower_size(&sized, Some(t)), joint.len() as u64);
            assert!(joint.len() < lower.len());
            // Unisolvence: the exponents are the same set.
            let idx: Vec<Q> = (0..3).map(|i| Q::int(i as i64)).collect();
            let ia: Vec<&[Q]> = vec![&idx; 5];
            let alphas: Vec<Vec<usize>> = visit_total(&ia, &blocks, Some(t))
                .iter()
                .map(|p| p.iter().map(|q| q.to_string().parse().unwrap()).collect())
                .collect();
            let m: Vec<Vec<Q>> = joint
                .iter()
                .map(|x| alphas.iter().map(|al| monomial(x, al)).collect())
                .collect();
            assert_eq!(rank(m), joint.len(), "{blocks:?} {t}");
        }
        // Twin: x0·x1 has total degree 2 and degree 1 in each block of
        // (1, 1), (1, 1): it vanishes where the indices sum to at most 1.
        let two = values(2);
        let lists: Vec<&[Q]> = vec![&two; 2];
        let blocks = [(1, Some(1)), (1, Some(1))];
        let p = |x: &[Q]| x[0].mul(&x[1]);
        assert!(visit_total(&lists, &blocks, Some(1))
            .iter()
            .all(|x| p(x).is_zero()));
        assert!(visit(&lists, &blocks).iter().any(|x| !p(x).is_zero()));
    }

    /// Negative twin: the lower set needs a TOTAL degree bound. x0·x1 has
    /// degree 1 in each scalar but total degree 2; it vanishes on the lower
    /// set of degree 1 (zero and the unit points) though it is not zero,
    /// while the product grid of two values per scalar sees it.
    #[test]
    fn lower_set_misses_a_per_scalar_degree_bound() {
        let two = values(2);
        let lists: Vec<&[Q]> = vec![&two, &two];
        let p = |x: &[Q]| x[0].mul(&x[1]);
        let lower = visit(&lists, &[(2, Some(1))]);
        assert!(lower.iter().all(|x| p(x).is_zero()));
        let full = visit(&lists, &[(2, None)]);
        assert!(full.iter().any(|x| !p(x).is_zero()));
    }

    #[test]
    fn default_shapes_are_thirteen_smallest_first() {
        let s = Scope::default().shapes();
        assert_eq!(s.len(), 13);
        assert_eq!(s[0], Vec::<usize>::new());
        assert_eq!(s.last().unwrap(), &vec![3, 3]);
    }

    /// The lane walk visits exactly the points of the full walk whose
    /// nonzeros lie in one lane and its core, or in one core, in the same
    /// order, and `lane_size` counts them; with budgets too. Without cores
    /// (the first split) that is one group.
    #[test]
    fn lane_walk_is_the_full_walk_filtered_to_one_lane_and_its_core() {
        let v = [Q::zero(), Q::one(), Q::int(2)];
        let lists: Vec<&[Q]> = vec![&v; 8];
        let plain = ([0u32, 1, 0, 2, 1, 1, 2, 0], vec![Part::Lane(None); 3]);
        // Lanes 0 and 1 read core 3, lane 2 reads core 4, lane 5 none.
        let star = (
            [0u32, 3, 1, 0, 2, 4, 3, 5],
            vec![
                Part::Lane(Some(3)),
                Part::Lane(Some(3)),
                Part::Lane(Some(4)),
                Part::Core,
                Part::Core,
                Part::Lane(None),
            ],
        );
        for (groups, parts) in [plain, star] {
            let split = Split {
                group: &groups,
                parts: &parts,
            };
            for (blocks, total) in [
                (vec![(8, None)], None),
                (vec![(2, Some(2)), (6, Some(1))], None),
                (vec![(3, None), (5, Some(2))], None),
                (vec![(2, Some(2)), (6, Some(1))], Some(2)),
            ] {
                let mut full = Vec::new();
                let _ = for_each_lower_point::<()>(&lists, &blocks, total, &mut |p| {
                    full.push(p.to_vec());
                    ControlFlow::Continue(())
                });
                let fits = |p: &Vec<Q>| {
                    let gs: Vec<u32> = (0..p.len())
                        .filter(|&k| !p[k].is_zero())
                        .map(|k| groups[k])
                        .collect();
                    let lanes: Vec<u32> = gs
                        .iter()
                        .copied()
                        .filter(|&g| parts[g as usize] != Part::Core)
                        .collect();
                    match lanes.first() {
                        None => gs.windows(2).all(|w| w[0] == w[1]),
                        Some(&l) => gs
                            .iter()
                            .all(|&g| g == l || parts[l as usize] == Part::Lane(Some(g))),
                    }
                };
                let want: Vec<Vec<Q>> = full.iter().filter(|p| fits(p)).cloned().collect();
                let mut got = Vec::new();
                let _ = for_each_lane_point::<()>(&lists, &blocks, total, Some(split), &mut |p| {
                    got.push(p.to_vec());
                    ControlFlow::Continue(())
                });
                assert_eq!(got, want, "{blocks:?}");
                assert!(got.len() < full.len());
                let sized: Vec<(usize, usize, Option<usize>)> =
                    blocks.iter().map(|&(k, d)| (k, 3, d)).collect();
                assert_eq!(
                    lane_size(&sized, total, split),
                    got.len() as u64,
                    "{blocks:?}"
                );
            }
        }
    }

    /// Why the lane walk needs separable properties: a predicate that
    /// fails only where two lanes are nonzero at once, or two cores, fails
    /// on the full walk and never on the lane walk.
    #[test]
    fn the_lane_walk_misses_what_couples_two_groups() {
        let v = [Q::zero(), Q::one()];
        let lists: Vec<&[Q]> = vec![&v; 6];
        let groups = [0u32, 0, 1, 1, 2, 3];
        let parts = [
            Part::Lane(Some(2)),
            Part::Lane(Some(3)),
            Part::Core,
            Part::Core,
        ];
        let split = Split {
            group: &groups,
            parts: &parts,
        };
        for coupled in [
            (|p: &[Q]| !p[0].is_zero() && !p[3].is_zero()) as fn(&[Q]) -> bool,
            |p: &[Q]| !p[4].is_zero() && !p[5].is_zero(),
            |p: &[Q]| !p[0].is_zero() && !p[5].is_zero(),
        ] {
            let mut full = false;
            let _ = for_each_lower_point::<()>(&lists, &[(6, None)], None, &mut |p| {
                full |= coupled(p);
                ControlFlow::Continue(())
            });
            let mut lane = false;
            let _ = for_each_lane_point::<()>(&lists, &[(6, None)], None, Some(split), &mut |p| {
                lane |= coupled(p);
                ControlFlow::Continue(())
            });
            assert!(full && !lane);
        }
    }
}
