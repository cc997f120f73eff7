//! Lane groups of a case (SPEC.md §8.5): a partition of the case's free
//! scalars such that every quantity a property compares reads the scalars
//! of one group only. A grid over such a case is decided by the points
//! where at most one group is nonzero.

use spmd_interp::lanes::{lanes, total, Lanes};
use spmd_interp::{Backward, Op, TypedOp};
use spmd_semantics::perrank::{global_sources, FreeSlots};
use spmd_semantics::tensor::numel;
use spmd_semantics::{Mesh, Shape, State, Type};
use std::collections::HashMap;

struct Dsu(Vec<usize>);

impl Dsu {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.0[a.max(b)] = a.min(b);
        }
    }
}

/// The ranks of `m` keyed by their coordinates along the axes where `t` is
/// Varying: every rank maps to the first rank of its class. Denotations,
/// the equality of replicated ranks (F1), pending sums and the cotangents
/// of Invariant values read ranks of one class only (SPEC.md §2.4).
fn class_first(m: &Mesh, t: &Type) -> Vec<usize> {
    let mut first: HashMap<Vec<usize>, usize> = HashMap::new();
    (0..m.num_ranks())
        .map(|r| {
            let c = m.coords(r);
            let key: Vec<usize> = t
                .states
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == State::Varying)
                .map(|(a, _)| c[a])
                .collect();
            *first.entry(key).or_insert(r)
        })
        .collect()
}

/// The lane groups of a case: a group number per free scalar (inputs in
/// order, each input's scalars as `from_free` lays them out), per entry of
/// each input's and of the output's ranks (rank r, entry e at r·numel + e),
/// numbered from 0 in order of first appearance among the free scalars.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneGroups {
    pub free: Vec<u32>,
    pub inputs: Vec<Vec<u32>>,
    pub out: Vec<u32>,
}

/// The lane groups of a case; `None` unless its free scalars fall into at
/// least two groups. Only a local op with its own VJP, no declared JVP and
/// a total function (`spmd_interp::lanes::total`: no domain error, no kink)
/// is split, so that every property at a point is a conjunction of
/// properties of one group each (SPEC.md §8.5).
pub fn lane_groups(op: &TypedOp, m: &Mesh, shapes: &[Shape], out: &Shape) -> Option<LaneGroups> {
    let Op::Local(f) = &op.op else {
        return None;
    };
    if !matches!(op.backward, Backward::LocalVjp) || op.jvp.is_some() || !total(&f.expr) {
        return None;
    }
    let nr = m.num_ranks();
    let slots: Vec<FreeSlots> = op.inputs.iter().map(|t| FreeSlots::new(m, t)).collect();
    let ns: Vec<usize> = shapes.iter().map(|s| numel(s)).collect();
    let n_out = numel(out);
    // Node numbers: the free scalars, input after input, then the output's
    // entries rank after rank.
    let mut offset = Vec::with_capacity(shapes.len());
    let mut total_free = 0usize;
    for i in 0..shapes.len() {
        offset.push(total_free);
        let reps = (0..nr).map(|r| slots[i].slot(r) + 1).max().unwrap_or(0);
        total_free = total_free.checked_add(reps.checked_mul(ns[i])?)?;
    }
    let node = |i: usize, r: usize, e: usize| offset[i] + slots[i].slot(r) * ns[i] + e;
    let out_node = |r: usize, e: usize| total_free + r * n_out + e;
    let mut dsu = Dsu((0..total_free + nr * n_out).collect());
    // Each rank runs the function: an output entry reads the entries of its
    // lane.
    let local: Lanes = lanes(&f.expr, shapes)?;
    let out_keys = Lanes::keys(&local.out_dims, out);
    let in_keys: Vec<Option<Vec<u64>>> = local
        .in_dims
        .iter()
        .zip(shapes)
        .map(|(d, s)| d.as_ref().map(|d| Lanes::keys(d, s)))
        .collect();
    for r in 0..nr {
        let mut first: HashMap<u64, usize> = HashMap::new();
        for (e, k) in out_keys.iter().enumerate() {
            let a = *first.entry(*k).or_insert(out_node(r, e));
            dsu.union(a, out_node(r, e));
        }
        for (i, keys) in in_keys.iter().enumerate() {
            let Some(keys) = keys else { continue };
            for (e, k) in keys.iter().enumerate() {
                let a = *first.entry(*k).or_insert(node(i, r, e));
                dsu.union(a, node(i, r, e));
            }
        }
    }
    // Ranks of one class are read together.
    for (r, &f) in class_first(m, &op.output).iter().enumerate() {
        for e in 0..n_out {
            dsu.union(out_node(f, e), out_node(r, e));
        }
    }
    for (i, t) in op.inputs.iter().enumerate() {
        for (r, &f) in class_first(m, t).iter().enumerate() {
            for e in 0..ns[i] {
                dsu.union(node(i, f, e), node(i, r, e));
            }
        }
    }
    // Global types: the meaning is the function of the global tensors, whose
    // lanes are read on the global shapes.
    if op.is_global() {
        let (gout, out_src) = global_sources(m, &op.output, out)?;
        let mut gin = Vec::new();
        let mut in_src = Vec::new();
        for (t, s) in op.inputs.iter().zip(shapes) {
            let (g, src) = global_sources(m, t, s)?;
            gin.push(g);
            in_src.push(src);
        }
        let gl = lanes(&f.expr, &gin)?;
        let mut first: HashMap<u64, usize> = HashMap::new();
        for (k, &(r, e)) in Lanes::keys(&gl.out_dims, &gout).iter().zip(&out_src) {
            let a = *first.entry(*k).or_insert(out_node(r, e));
            dsu.union(a, out_node(r, e));
        }
        for (i, d) in gl.in_dims.iter().enumerate() {
            let Some(d) = d else { continue };
            for (k, &(r, e)) in Lanes::keys(d, &gin[i]).iter().zip(&in_src[i]) {
                let a = *first.entry(*k).or_insert(node(i, r, e));
                dsu.union(a, node(i, r, e));
            }
        }
    }
    let mut number: HashMap<usize, u32> = HashMap::new();
    let mut id = |x: usize| {
        let root = dsu.find(x);
        let next = number.len() as u32;
        *number.entry(root).or_insert(next)
    };
    let free: Vec<u32> = (0..total_free).map(&mut id).collect();
    let groups = free.iter().max().map_or(0, |g| g + 1);
    let inputs = (0..shapes.len())
        .map(|i| {
            (0..nr)
                .flat_map(|r| (0..ns[i]).map(move |e| (r, e)))
                .map(|(r, e)| id(node(i, r, e)))
                .collect()
        })
        .collect();
    let out = (0..nr * n_out).map(|k| id(total_free + k)).collect();
    (groups > 1).then_some(LaneGroups { free, inputs, out })
}
