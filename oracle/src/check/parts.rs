//! The parts of a case's checker that depend only on the mesh, a type
//! and a shape, whatever the op (SPEC.md §18): an input type's denotation
//! basis, kernel directions and projections, and the output type's unit
//! cotangents, their denotations and supports. Each thread keeps the small
//! ones it built, shared by every case with the same key.

use super::Sparse;
use spmd_semantics::perrank::{
    self, denot_basis, free_unit, kernel_basis, num_free, Denot, Projection,
};
use spmd_semantics::{Mesh, PerRank, Shape, Type, Q};
use std::sync::Arc;

/// What a checker needs of one input type at one shape on one mesh,
/// whatever the op: the denotation basis (dense and sparse), the kernel
/// directions (sparse), and the projections of the type and of its
/// cotangent. Every case with that mesh, type and shape shares them, so
/// each thread keeps those it built (`type_parts`).
pub(super) struct TypeParts {
    pub(super) bases: Arc<Vec<(perrank::DenotCoord, PerRank)>>,
    pub(super) basis_nz: Vec<Sparse>,
    pub(super) kernel_nz: Vec<Sparse>,
    pub(super) proj: Projection,
    pub(super) proj_cot: Projection,
}

/// The same for the output type: the unit cotangents, the cotangent's
/// kernel directions, the units' denotations and their supports divided
/// by the output's repeat factor, and the output's projection.
pub(super) struct OutParts {
    pub(super) gs: Arc<Vec<PerRank>>,
    pub(super) g_kernel: Arc<Vec<PerRank>>,
    pub(super) gs_first: Arc<Vec<Option<(usize, usize)>>>,
    pub(super) g_kernel_first: Arc<Vec<Option<(usize, usize)>>>,
    /// The supports of the units and kernel directions, built when a
    /// pointwise local op first asks (`OutParts::supports`).
    supps: std::sync::OnceLock<Arc<Supports>>,
    pub(super) dgs: Arc<Vec<Denot>>,
    pub(super) dg_supp: Arc<Vec<Vec<(usize, Q)>>>,
    pub(super) proj: Projection,
}

/// The most scalars one entry of a thread's `TypeParts` or `OutParts`
/// cache may hold (its dense vectors' entries): a large case amortises its
/// set-up over its instances, and its parts are left to it alone.
const PARTS_ENTRY_MOST: usize = 1 << 12;
/// The most scalars each cache holds in all before it starts again.
const PARTS_MOST: usize = 1 << 14;

/// A thread's cache: entries by the hash of their key, and the scalars
/// they hold.
type PartsCache<V> = std::cell::RefCell<(
    std::collections::HashMap<u64, Vec<(Mesh, Type, Shape, Arc<V>)>>,
    usize,
)>;

thread_local! {
    static TYPE_PARTS: PartsCache<TypeParts> = Default::default();
    static OUT_PARTS: PartsCache<OutParts> = Default::default();
}

/// The entry of `cache` for (`m`, `t`, `shape`), built by `make` on a
/// miss, which also says how many scalars it holds.
fn parts_of<V>(
    cache: &'static std::thread::LocalKey<PartsCache<V>>,
    m: &Mesh,
    t: &Type,
    shape: &[usize],
    make: impl FnOnce() -> (V, usize),
) -> Arc<V> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (m, t, shape).hash(&mut h);
    let key = h.finish();
    let hit = cache.with(|c| {
        c.borrow().0.get(&key).and_then(|b| {
            b.iter()
                .find(|(m2, t2, s2, _)| m2 == m && t2 == t && s2.as_slice() == shape)
                .map(|e| e.3.clone())
        })
    });
    if let Some(v) = hit {
        return v;
    }
    let (v, size) = make();
    let v = Arc::new(v);
    if size > PARTS_ENTRY_MOST {
        return v;
    }
    cache.with(|c| {
        let (map, held) = &mut *c.borrow_mut();
        if *held + size > PARTS_MOST {
            map.clear();
            *held = 0;
        }
        *held += size;
        map.entry(key)
            .or_default()
            .push((m.clone(), t.clone(), shape.to_vec(), v.clone()));
    });
    v
}

/// The scalars of per-rank values.
fn scalars<'a>(vs: impl IntoIterator<Item = &'a PerRank>) -> usize {
    vs.into_iter()
        .flat_map(|v| &v.tensors)
        .map(|t| t.data.len())
        .sum()
}

pub(super) fn type_parts(m: &Mesh, t: &Type, shape: &[usize]) -> Arc<TypeParts> {
    parts_of(&TYPE_PARTS, m, t, shape, || {
        let bases = denot_basis(m, t, shape);
        let basis_nz = bases.iter().map(|(_, e)| Sparse::of(e)).collect();
        let kernel_nz = kernel_basis(m, t, shape).iter().map(Sparse::of).collect();
        let size = scalars(bases.iter().map(|(_, b)| b));
        let parts = TypeParts {
            bases: Arc::new(bases),
            basis_nz,
            kernel_nz,
            proj: Projection::new(m, t),
            proj_cot: Projection::new(m, &t.cot()),
        };
        (parts, size)
    })
}

pub(super) fn out_parts(m: &Mesh, t: &Type, shape: &[usize]) -> Arc<OutParts> {
    parts_of(&OUT_PARTS, m, t, shape, || {
        let tc = t.cot();
        let gs: Vec<PerRank> = (0..num_free(m, &tc, shape))
            .map(|k| free_unit(m, &tc, shape, k))
            .collect();
        let g_kernel = kernel_basis(m, &tc, shape);
        let proj_cot = Projection::new(m, &tc);
        let dgs: Vec<Denot> = gs.iter().map(|g| proj_cot.denote(g)).collect();
        let rep = Q::int(perrank::repeat_factor(m, t) as i64);
        let dg_supp = dgs
            .iter()
            .map(|d| {
                d.flat()
                    .into_iter()
                    .enumerate()
                    .filter(|(_, v)| !v.is_zero())
                    .map(|(k, v)| (k, v.div(&rep).expect("repeat factor is positive")))
                    .collect()
            })
            .collect();
        let size = 2 * scalars(&gs) + scalars(&g_kernel);
        let first = |vs: &[PerRank]| -> Vec<Option<(usize, usize)>> {
            vs.iter()
                .map(|v| {
                    v.tensors
                        .iter()
                        .enumerate()
                        .find_map(|(r, t)| t.data.iter().position(|q| !q.is_zero()).map(|k| (r, k)))
                })
                .collect()
        };
        let parts = OutParts {
            gs_first: Arc::new(first(&gs)),
            supps: std::sync::OnceLock::new(),
            g_kernel_first: Arc::new(first(&g_kernel)),
            gs: Arc::new(gs),
            g_kernel: Arc::new(g_kernel),
            dgs: Arc::new(dgs),
            dg_supp: Arc::new(dg_supp),
            proj: Projection::new(m, t),
        };
        (parts, size)
    })
}

/// The nonzero entries, (rank, entry) in order, of each unit cotangent
/// and of each of the cotangent's kernel directions.
pub(super) struct Supports {
    pub(super) gs: Vec<Vec<(usize, usize)>>,
    pub(super) g_kernel: Vec<Vec<(usize, usize)>>,
}

impl OutParts {
    /// The supports of the units and kernel directions, built once.
    pub(super) fn supports(&self) -> Arc<Supports> {
        self.supps
            .get_or_init(|| {
                let of = |vs: &[PerRank]| -> Vec<Vec<(usize, usize)>> {
                    vs.iter()
                        .map(|v| {
                            v.tensors
                                .iter()
                                .enumerate()
                                .flat_map(|(r, t)| {
                                    t.data
                                        .iter()
                                        .enumerate()
                                        .filter(|(_, q)| !q.is_zero())
                                        .map(move |(k, _)| (r, k))
                                })
                                .collect()
                        })
                        .collect()
                };
                Arc::new(Supports {
                    gs: of(&self.gs),
                    g_kernel: of(&self.g_kernel),
                })
            })
            .clone()
    }
}
