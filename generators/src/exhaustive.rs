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
    out.extend((0..max_rank).map(|d| Type {
        states: vec![State::Varying],
        layout: vec![Some(d)],
    }));
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

/// Every tuple of input shapes from the scope that the op accepts, smallest
/// total size first.
pub fn shape_tuples(op: &Op, m: &Mesh, scope: &Scope) -> Vec<Vec<Shape>> {
    let mut ok: Vec<Vec<Shape>> = tuples(&scope.shapes_for(m), op.arity())
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
    let mut point: Vec<Q> = vec![Q::zero(); lists.len()];
    for nnz in 0..=lists.len() {
        subsets(lists, nnz, 0, &mut Vec::new(), &mut point, f)?;
    }
    ControlFlow::Continue(())
}

/// Every set of `nnz` positions from `start` on, in lexicographic order.
fn subsets<B>(
    lists: &[&[Q]],
    nnz: usize,
    start: usize,
    chosen: &mut Vec<usize>,
    point: &mut Vec<Q>,
    f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>,
) -> ControlFlow<B> {
    if chosen.len() == nnz {
        return walk(lists, chosen, 0, point, f);
    }
    for p in start..lists.len() {
        if lists[p].len() > 1 {
            chosen.push(p);
            subsets(lists, nnz, p + 1, chosen, point, f)?;
            chosen.pop();
        }
    }
    ControlFlow::Continue(())
}

fn walk<B>(
    lists: &[&[Q]],
    chosen: &[usize],
    at: usize,
    point: &mut Vec<Q>,
    f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>,
) -> ControlFlow<B> {
    if at == chosen.len() {
        return f(point);
    }
    let p = chosen[at];
    for v in &lists[p][1..] {
        point[p] = v.clone();
        walk(lists, chosen, at + 1, point, f)?;
    }
    point[p] = Q::zero();
    ControlFlow::Continue(())
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

    #[test]
    fn default_shapes_are_thirteen_smallest_first() {
        let s = Scope::default().shapes();
        assert_eq!(s.len(), 13);
        assert_eq!(s[0], Vec::<usize>::new());
        assert_eq!(s.last().unwrap(), &vec![3, 3]);
    }
}
