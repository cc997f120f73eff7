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
    for_each_lower_point(lists, &[(lists.len(), None)], f)
}

/// The positions of a grid grouped in blocks (one per input): `blocks[b] =
/// (k, budget)` is k consecutive positions. With `budget = Some(d)` only
/// the points where the value indices of the block's positions (the index
/// into `lists[p]`, 0 for the value 0) sum to at most d are kept: a lower
/// set of multi-indices, which decides the polynomials of total degree at
/// most d in the block (SPEC.md §8.3). With `None` every combination is
/// kept. The block sizes must add up to `lists.len()`.
///
/// Visits the kept points in the order of `for_each_grid_point` (fewest
/// nonzeros first, then value order), so the first counterexample met is
/// the one `for_each_grid_point` would meet first among them.
pub fn for_each_lower_point<B>(
    lists: &[&[Q]],
    blocks: &[(usize, Option<usize>)],
    f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>,
) -> ControlFlow<B> {
    for_each_lane_point(lists, blocks, None, f)
}

/// `for_each_lower_point` restricted, with `groups` (a group per
/// position), to the points whose nonzero positions all lie in one group:
/// the same points in the same order, the others skipped (SPEC.md §8.5).
pub fn for_each_lane_point<B>(
    lists: &[&[Q]],
    blocks: &[(usize, Option<usize>)],
    groups: Option<&[u32]>,
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
    };
    // No point has more nonzeros than its group has positions.
    let most = match groups {
        None => lists.len(),
        Some(g) => {
            let mut count: std::collections::HashMap<u32, usize> = Default::default();
            g.iter()
                .map(|&x| *count.entry(x).and_modify(|c| *c += 1).or_insert(1))
                .max()
                .unwrap_or(0)
        }
    };
    for nnz in 0..=most {
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
    groups: Option<&'a [u32]>,
}

impl Walk<'_> {
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
            if let (Some(g), Some(&c)) = (self.groups, self.chosen.first()) {
                if g[p] != g[c] {
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
        for j in 1..self.lists[p].len() {
            if self.used[b].saturating_add(j).saturating_add(later) > self.budget[b] {
                break;
            }
            self.point[p] = self.lists[p][j].clone();
            self.used[b] += j;
            let r = self.walk(at + 1, f);
            self.used[b] -= j;
            r?;
        }
        self.point[p] = Q::zero();
        ControlFlow::Continue(())
    }
}

/// Number of points `for_each_lower_point` visits: per block of k
/// positions with `n` values each, n^k, or with budget d the index vectors
/// in 0..n with sum at most d (C(k + d, d) when d < n).
pub fn lower_size(blocks: &[(usize, usize, Option<usize>)]) -> u64 {
    blocks.iter().fold(1u64, |acc, &(k, n, budget)| {
        let here = match budget {
            None => (n as u64).checked_pow(k as u32).unwrap_or(u64::MAX),
            Some(d) => {
                // ways[s]: index vectors of the positions so far summing to s.
                let mut ways = vec![0u64; d + 1];
                ways[0] = 1;
                for _ in 0..k {
                    let mut next = vec![0u64; d + 1];
                    for (s, &w) in ways.iter().enumerate() {
                        for j in 0..n.min(d + 1 - s) {
                            next[s + j] = next[s + j].saturating_add(w);
                        }
                    }
                    ways = next;
                }
                ways.iter().fold(0u64, |a, &w| a.saturating_add(w))
            }
        };
        acc.saturating_mul(here)
    })
}

/// Number of points `for_each_lane_point` visits with `groups` (a group
/// per position, the positions of `blocks` in order): the point 0, and per
/// group the points of its own lower set but 0.
pub fn lane_size(blocks: &[(usize, usize, Option<usize>)], groups: &[u32]) -> u64 {
    lane_blocks(blocks, groups).iter().fold(1u64, |acc, b| {
        acc.saturating_add(lower_size(b).saturating_sub(1))
    })
}

/// Per group of `groups` (a group per position, the positions of `blocks`
/// in order), in the order of the group numbers: `blocks` with each
/// block's positions counted in that group only.
pub fn lane_blocks(
    blocks: &[(usize, usize, Option<usize>)],
    groups: &[u32],
) -> Vec<Vec<(usize, usize, Option<usize>)>> {
    let mut ids: Vec<u32> = groups.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids.iter()
        .map(|&g| {
            let mut at = 0;
            blocks
                .iter()
                .map(|&(k, n, d)| {
                    let here = groups[at..at + k].iter().filter(|&&x| x == g).count();
                    at += k;
                    (here, n, d)
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut seen = Vec::new();
        let _ = for_each_lower_point::<()>(lists, blocks, &mut |p| {
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
        assert_eq!(lower_size(&[(3, 3, Some(2)), (2, 2, Some(1))]), 30);
        // The example: 4 scalars of degree 2 take 15 points, not 81;
        // degree 1 takes zero and the 4 unit vectors.
        assert_eq!(lower_size(&[(4, 3, Some(2))]), 15);
        assert_eq!(lower_size(&[(4, 2, Some(1))]), 5);
        assert_eq!(lower_size(&[(4, 3, None)]), 81);
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
    /// nonzeros lie in one group, in the same order, and `lane_size`
    /// counts them; with budgets too.
    #[test]
    fn lane_walk_is_the_full_walk_filtered_to_one_group() {
        let v = [Q::zero(), Q::one(), Q::int(2)];
        let lists: Vec<&[Q]> = vec![&v; 6];
        let groups = [0u32, 1, 0, 2, 1, 1];
        for blocks in [
            vec![(6, None)],
            vec![(2, Some(2)), (4, Some(1))],
            vec![(3, None), (3, Some(2))],
        ] {
            let mut full = Vec::new();
            let _ = for_each_lower_point::<()>(&lists, &blocks, &mut |p| {
                full.push(p.to_vec());
                ControlFlow::Continue(())
            });
            let one_group = |p: &Vec<Q>| {
                let gs: Vec<u32> = (0..p.len())
                    .filter(|&k| !p[k].is_zero())
                    .map(|k| groups[k])
                    .collect();
                gs.windows(2).all(|w| w[0] == w[1])
            };
            let want: Vec<Vec<Q>> = full.iter().filter(|p| one_group(p)).cloned().collect();
            let mut got = Vec::new();
            let _ = for_each_lane_point::<()>(&lists, &blocks, Some(&groups), &mut |p| {
                got.push(p.to_vec());
                ControlFlow::Continue(())
            });
            assert_eq!(got, want, "{blocks:?}");
            assert!(got.len() < full.len());
            let sized: Vec<(usize, usize, Option<usize>)> =
                blocks.iter().map(|&(k, d)| (k, 3, d)).collect();
            assert_eq!(lane_size(&sized, &groups), got.len() as u64, "{blocks:?}");
        }
    }

    /// Why the lane walk needs separable properties: a predicate that
    /// fails only where two groups are nonzero at once fails on the full
    /// walk and never on the lane walk.
    #[test]
    fn the_lane_walk_misses_what_couples_two_groups() {
        let v = [Q::zero(), Q::one()];
        let lists: Vec<&[Q]> = vec![&v; 4];
        let groups = [0u32, 0, 1, 1];
        let coupled = |p: &[Q]| !p[0].is_zero() && !p[3].is_zero();
        let mut full = false;
        let _ = for_each_lower_point::<()>(&lists, &[(4, None)], &mut |p| {
            full |= coupled(p);
            ControlFlow::Continue(())
        });
        let mut lane = false;
        let _ = for_each_lane_point::<()>(&lists, &[(4, None)], Some(&groups), &mut |p| {
            lane |= coupled(p);
            ControlFlow::Continue(())
        });
        assert!(full && !lane);
    }
}
