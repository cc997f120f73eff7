//! Random instances beyond the exhaustive scope (SPEC.md §8.4): proptest
//! strategies (with shrinking) and quickcheck `Arbitrary` newtypes. Values are
//! well formed by construction: free scalars are drawn and replicated along
//! Invariant and Reduced axes, never filtered.

use proptest::prelude::*;
use quickcheck::{Arbitrary, Gen};
use spmd_semantics::perrank::{from_free, num_free};
use spmd_semantics::{Mesh, PerRank, Shape, State, Tensor, Type, ALL_STATES, Q};

/// A small rational: numerator in -4..=4, denominator in {1, 2, 3, 4}.
/// Shrinks toward 0 and toward integers.
pub fn arb_q() -> impl Strategy<Value = Q> {
    (-4i64..=4, 1i64..=4).prop_map(|(n, d)| Q::frac(n, d))
}

pub fn arb_state() -> impl Strategy<Value = State> {
    prop::sample::select(ALL_STATES.to_vec())
}

/// A mesh of 1 to 3 axes with sizes 1 to 4 and at most 8 ranks, drawn
/// from the list of all of them (smallest first, so it shrinks toward
/// fewer ranks), never filtered.
pub fn arb_mesh() -> impl Strategy<Value = Mesh> {
    let names = ["x", "y", "z"];
    let all: Vec<Mesh> = (1..=3)
        .flat_map(|n| small_meshes(&names[..n], 4, 8))
        .collect();
    prop::sample::select(all)
}

/// Every mesh with these axes, each of size 1 to `max_size`, with at most
/// `max_ranks` ranks, fewest ranks first (then by sizes).
pub fn small_meshes(axes: &[&str], max_size: usize, max_ranks: usize) -> Vec<Mesh> {
    let mut sizes: Vec<Vec<usize>> = vec![vec![]];
    for _ in axes {
        sizes = sizes
            .into_iter()
            .flat_map(|v| {
                (1..=max_size).filter_map(move |s| {
                    let mut w = v.clone();
                    w.push(s);
                    (w.iter().product::<usize>() <= max_ranks).then_some(w)
                })
            })
            .collect();
    }
    sizes.sort_by_key(|v| (v.iter().product::<usize>(), v.clone()));
    sizes
        .into_iter()
        .map(|v| Mesh::new(&axes.iter().copied().zip(v).collect::<Vec<_>>()))
        .collect()
}

/// The random part's domain (SPEC.md §11.2): every mesh × input shape
/// tuple a typed op accepts, built by the pruned search of its shape
/// table (§18.9) rather than drawn and filtered, so a draw is never
/// rejected for its shapes. Each entry carries the weight the old
/// draw-and-filter sampler gave it (each input's rank uniform, then each
/// dim), so that scalars and small ranks are drawn as often as before;
/// entries are sorted smallest first, so a failure shrinks toward fewer
/// ranks and smaller shapes.
#[derive(Clone, Debug)]
pub struct Domain<K = Mesh> {
    pub entries: Vec<(K, Vec<Shape>)>,
    /// Cumulative weights: entry i is drawn for x in cum[i-1]..cum[i].
    cum: Vec<u64>,
}

impl Domain<Mesh> {
    /// The domain of `op` on `meshes`, shapes of rank 0 to `max_rank` with
    /// dims 1 to `max_dim`, at most `max_free` free scalars in all; `None`
    /// when the search on some mesh passes `budget` shape choices.
    pub fn build(
        op: &spmd_interp::TypedOp,
        meshes: &[Mesh],
        max_rank: usize,
        max_dim: usize,
        max_free: usize,
        budget: u64,
    ) -> Option<Domain> {
        let scope = crate::exhaustive::Scope {
            max_rank,
            max_dim,
            ..crate::exhaustive::Scope::default()
        };
        let shapes = scope.shapes();
        // An expression's search does not depend on the mesh.
        let shared = match (&op.op, meshes.first()) {
            (spmd_interp::Op::Program(_), _) | (_, None) => None,
            (_, Some(m)) => {
                let mut t = Vec::new();
                if !crate::exhaustive::visit_candidates(&op.op, m, &shapes, budget, &mut |c| {
                    t.push(c.to_vec())
                }) {
                    return None;
                }
                Some(t)
            }
        };
        let mut entries: Vec<(Mesh, Vec<Shape>)> = Vec::new();
        for m in meshes {
            let mut keep = |t: &[Shape]| {
                let fits = op
                    .op
                    .infer(m, t)
                    .is_ok_and(|(out, _)| op.layouts_fit(m, t, &out));
                let free: usize = op
                    .inputs
                    .iter()
                    .zip(t)
                    .map(|(ty, s)| num_free(m, ty, s))
                    .sum();
                if fits && free <= max_free {
                    entries.push((m.clone(), t.to_vec()));
                }
            };
            match &shared {
                Some(ts) => ts.iter().for_each(|t| keep(t)),
                None => {
                    if !crate::exhaustive::visit_candidates(&op.op, m, &shapes, budget, &mut keep) {
                        return None;
                    }
                }
            }
        }
        let numel = |t: &[Shape]| t.iter().map(|s| s.iter().product::<usize>()).sum::<usize>();
        entries.sort_by(|a, b| {
            let key = |(m, t): &(Mesh, Vec<Shape>)| {
                let sizes: Vec<usize> = m.axes.iter().map(|a| a.size).collect();
                (m.num_ranks(), numel(t), sizes, t.clone())
            };
            key(a).cmp(&key(b))
        });
        Some(Domain::weighted(entries, max_rank, max_dim))
    }
}

impl<K: Clone + std::fmt::Debug> Domain<K> {
    /// A domain of these entries, in this order (smallest first), each
    /// weighted as the draw-and-filter sampler of shapes of rank 0 to
    /// `max_rank` with dims 1 to `max_dim` weighted it: 1/(max_rank + 1)
    /// for each input's rank, then 1/max_dim per dim.
    pub fn weighted(entries: Vec<(K, Vec<Shape>)>, max_rank: usize, max_dim: usize) -> Domain<K> {
        let weight = |t: &[Shape]| -> u128 {
            t.iter().fold(1u128, |w, s| {
                let r = (max_rank - s.len().min(max_rank)) as u32;
                w.saturating_mul((max_dim as u128).saturating_pow(r))
            })
        };
        let ws: Vec<u128> = entries.iter().map(|(_, t)| weight(t)).collect();
        // Scale down until the total fits a u64, every weight at least 1.
        let mut shift = 0u32;
        while ws
            .iter()
            .fold(0u128, |a, w| a.saturating_add((w >> shift).max(1)))
            > u64::MAX as u128
        {
            shift += 1;
        }
        let mut cum = Vec::with_capacity(ws.len());
        let mut total = 0u64;
        for w in ws {
            total += ((w >> shift).max(1)) as u64;
            cum.push(total);
        }
        Domain { entries, cum }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A draw from the domain, then `free(key, shapes)` free scalars for
    /// it (`arb_q`): a random case, built.
    pub fn with_values(
        &self,
        free: impl Fn(&K, &[Shape]) -> usize + 'static,
    ) -> impl Strategy<Value = (K, Vec<Shape>, Vec<Q>)>
    where
        K: 'static,
    {
        self.strategy().prop_flat_map(move |(key, shapes)| {
            let k = free(&key, &shapes);
            (Just(key), Just(shapes), prop::collection::vec(arb_q(), k))
        })
    }

    /// A draw from the domain by weight; it shrinks toward the first
    /// (smallest) entries. Call only on a domain that is not empty.
    pub fn strategy(&self) -> impl Strategy<Value = (K, Vec<Shape>)> {
        let total = *self.cum.last().expect("a domain that is not empty");
        let d = self.clone();
        (0..total).prop_map(move |x| {
            let i = d.cum.partition_point(|&c| c <= x);
            d.entries[i].clone()
        })
    }
}

pub fn arb_type(ndim: usize) -> impl Strategy<Value = Type> {
    prop::collection::vec(arb_state(), ndim).prop_map(Type::new)
}

/// A shape of rank 0 to 3 with dims 1 to 4.
pub fn arb_shape() -> impl Strategy<Value = Shape> {
    prop::collection::vec(1usize..=4, 0..=3)
}

pub fn arb_tensor(shape: Shape) -> impl Strategy<Value = Tensor> {
    let n = shape.iter().product::<usize>();
    prop::collection::vec(arb_q(), n).prop_map(move |d| Tensor::new(shape.clone(), d))
}

/// A well-formed per-rank value of type `t` on `m`.
pub fn arb_per_rank(m: Mesh, t: Type, shape: Shape) -> impl Strategy<Value = PerRank> {
    let k = num_free(&m, &t, &shape);
    prop::collection::vec(arb_q(), k).prop_map(move |v| from_free(&m, &t, &shape, &v))
}

fn gen_q(g: &mut Gen) -> Q {
    let n = (i8::arbitrary(g) % 5) as i64;
    let d = (u8::arbitrary(g) % 4) as i64 + 1;
    Q::frac(n, d)
}

/// quickcheck wrapper for `State`.
#[derive(Clone, Debug)]
pub struct ArbState(pub State);
impl Arbitrary for ArbState {
    fn arbitrary(g: &mut Gen) -> ArbState {
        ArbState(*g.choose(&ALL_STATES).expect("nonempty"))
    }
}

/// quickcheck wrapper for `Mesh` (1 or 2 axes, sizes 1..=3).
#[derive(Clone, Debug)]
pub struct ArbMesh(pub Mesh);
impl Arbitrary for ArbMesh {
    fn arbitrary(g: &mut Gen) -> ArbMesh {
        let ndim = if bool::arbitrary(g) { 1 } else { 2 };
        let names = ["x", "y"];
        let axes: Vec<(&str, usize)> = (0..ndim)
            .map(|i| (names[i], (u8::arbitrary(g) % 3) as usize + 1))
            .collect();
        ArbMesh(Mesh::new(&axes))
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = ArbMesh>> {
        // Shrink to fewer ranks: each axis toward size 1.
        let m = self.0.clone();
        let smaller: Vec<ArbMesh> = (0..m.ndim())
            .filter(|&a| m.axes[a].size > 1)
            .map(|a| {
                let mut s = m.clone();
                s.axes[a].size -= 1;
                ArbMesh(s)
            })
            .collect();
        Box::new(smaller.into_iter())
    }
}

/// quickcheck wrapper for an exact `Tensor` (rank 0 to 2, dims 1 to 3, small
/// rationals).
#[derive(Clone, Debug)]
pub struct ArbTensor(pub Tensor);
impl Arbitrary for ArbTensor {
    fn arbitrary(g: &mut Gen) -> ArbTensor {
        let shape: Shape = (0..(u8::arbitrary(g) % 3))
            .map(|_| (u8::arbitrary(g) % 3) as usize + 1)
            .collect();
        let n = shape.iter().product::<usize>();
        ArbTensor(Tensor::new(shape, (0..n).map(|_| gen_q(g)).collect()))
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = ArbTensor>> {
        // Shrink entries toward 0, then toward integers, one at a time.
        let t = self.0.clone();
        let out: Vec<ArbTensor> = (0..t.numel())
            .flat_map(|i| {
                let v = &t.data[i];
                let mut cands = Vec::new();
                if !v.is_zero() {
                    cands.push(Q::zero());
                }
                if !v.is_integer() {
                    cands.push(v.floor());
                }
                cands.into_iter().map({
                    let t = t.clone();
                    move |c| {
                        let mut u = t.clone();
                        u.data[i] = c;
                        ArbTensor(u)
                    }
                })
            })
            .collect();
        Box::new(out.into_iter())
    }
}

/// quickcheck wrapper for a `Type` with its mesh.
#[derive(Clone, Debug)]
pub struct ArbType(pub Mesh, pub Type);
impl Arbitrary for ArbType {
    fn arbitrary(g: &mut Gen) -> ArbType {
        let m = ArbMesh::arbitrary(g).0;
        let t = Type::new((0..m.ndim()).map(|_| ArbState::arbitrary(g).0).collect());
        ArbType(m, t)
    }
}

/// quickcheck wrapper for a well-formed `PerRank` with its mesh and type.
#[derive(Clone, Debug)]
pub struct ArbPerRank(pub Mesh, pub Type, pub PerRank);
impl Arbitrary for ArbPerRank {
    fn arbitrary(g: &mut Gen) -> ArbPerRank {
        let ArbType(m, t) = ArbType::arbitrary(g);
        let shape: Shape = (0..(u8::arbitrary(g) % 3))
            .map(|_| (u8::arbitrary(g) % 3) as usize + 1)
            .collect();
        let vals: Vec<Q> = (0..num_free(&m, &t, &shape)).map(|_| gen_q(g)).collect();
        let x = from_free(&m, &t, &shape, &vals);
        ArbPerRank(m, t, x)
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = ArbPerRank>> {
        // Shrink by zeroing one free scalar at a time.
        let (m, t, x) = (self.0.clone(), self.1.clone(), self.2.clone());
        let free = spmd_semantics::perrank::to_free(&m, &t, &x);
        let shape = x.shape().to_vec();
        let out: Vec<ArbPerRank> = (0..free.len())
            .filter(|&i| !free[i].is_zero())
            .map(|i| {
                let mut v = free.clone();
                v[i] = Q::zero();
                ArbPerRank(m.clone(), t.clone(), from_free(&m, &t, &shape, &v))
            })
            .collect();
        Box::new(out.into_iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_semantics::perrank::{denote, pair_denots, pair_per_rank, well_formed};

    proptest! {
        #[test]
        fn generated_values_are_well_formed(m in arb_mesh(), shape in arb_shape(), seed in any::<u64>()) {
            let t = Type::new((0..m.ndim()).map(|i| ALL_STATES[((seed >> (2 * i)) & 3) as usize]).collect());
            let k = num_free(&m, &t, &shape);
            let vals: Vec<Q> = (0..k).map(|i| Q::int(((seed >> (i % 60)) & 3) as i64 - 1)).collect();
            let x = from_free(&m, &t, &shape, &vals);
            prop_assert!(well_formed(&m, &t, &x).is_ok());
        }
    }

    quickcheck::quickcheck! {
        // Shrinking only moves toward simpler tensors of the same shape.
        fn tensor_shrinks_keep_the_shape(t: ArbTensor) -> bool {
            t.shrink().all(|u| u.0.shape == t.0.shape && u.0.nonzeros() <= t.0.nonzeros())
        }

        // SPEC.md §3.2: the per-rank pairing formula equals the pairing of
        // denotations, for every type on every mesh.
        fn pairing_formula_matches_denotations(x: ArbPerRank, seed: u64) -> bool {
            let ArbPerRank(m, t, x) = x;
            let c = t.cot();
            let shape = x.shape().to_vec();
            let vals: Vec<Q> = (0..num_free(&m, &c, &shape)).map(|i| Q::int(((seed >> (i % 60)) & 7) as i64 - 3)).collect();
            let g = from_free(&m, &c, &shape, &vals);
            pair_per_rank(&m, &t, &x, &g) == pair_denots(&m, &t, &denote(&m, &t, &x), &denote(&m, &c, &g))
        }
    }
}
