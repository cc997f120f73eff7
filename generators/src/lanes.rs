//! Lane groups of a case (SPEC.md §8.5): a partition of the case's free
//! scalars into lanes and cores such that every quantity a property
//! compares reads the scalars of one lane and of the one core that lane
//! reads (the entries of inputs that every entry of the lane reads whole,
//! such as a broadcast scalar). A grid over such a case is decided by the
//! points whose nonzeros lie in one lane and its core.

pub use crate::exhaustive::Part;
use crate::exhaustive::Split;
use spmd_interp::lanes::{lanes, total, Lanes};
use spmd_interp::{Backward, Op, TypedOp};
use spmd_semantics::perrank::{global_sources, FreeSlots};
use spmd_semantics::tensor::numel;
use spmd_semantics::{Mesh, Shape, State, Type};
use std::cell::OnceCell;
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
/// of Invariant values read ranks of one class only (SPEC.md §2.4). Ranks
/// are numbered row-major, so the first rank of a class has coordinate 0
/// on every other axis.
fn class_first(m: &Mesh, t: &Type) -> Vec<usize> {
    (0..m.num_ranks())
        .map(|r| {
            t.states
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == State::Varying)
                .map(|(a, _)| m.coord(r, a) * m.stride(a))
                .sum()
        })
        .collect()
}

/// The lane groups of a case: a group number per free scalar (inputs in
/// order, each input's scalars as `from_free` lays them out), per entry of
/// each input's and of the output's ranks (rank r, entry e at r·numel + e),
/// numbered from 0 in order of first appearance among the free scalars;
/// and per group whether it is a core or a lane, with the core it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneGroups {
    pub free: Vec<u32>,
    pub inputs: Vec<Vec<u32>>,
    pub out: Vec<u32>,
    pub parts: Vec<Part>,
}

impl LaneGroups {
    /// The split the walk over the free scalars takes.
    pub fn split(&self) -> Split<'_> {
        Split {
            group: &self.free,
            parts: &self.parts,
        }
    }
    /// Whether group `g` is a core.
    pub fn is_core(&self, g: u32) -> bool {
        self.parts.get(g as usize) == Some(&Part::Core)
    }
    /// Per group, whether it is a core.
    pub fn cores(&self) -> Vec<bool> {
        self.parts.iter().map(|p| *p == Part::Core).collect()
    }
    /// The lane a point (a value per free scalar) checks alone: the group
    /// of its first nonzero outside every core; `None` when its nonzeros
    /// all lie in cores (SPEC.md §8.5).
    pub fn lane_at(&self, point: &[spmd_semantics::Q]) -> Option<u32> {
        point
            .iter()
            .zip(&self.free)
            .find(|(q, &g)| !q.is_zero() && !self.is_core(g))
            .map(|(_, &g)| g)
    }
}

/// The lane groups of a case; `None` unless its free scalars fall into at
/// least two lanes. Only a local op with its own VJP, no declared JVP and
/// a total function (`spmd_interp::lanes::total`: no domain error, no kink)
/// is split, so that every property at a point is a conjunction of
/// properties of one group each (SPEC.md §8.5).
pub fn lane_groups(op: &TypedOp, m: &Mesh, shapes: &[Shape], out: &Shape) -> Option<LaneGroups> {
    lane_groups_with(op, m, shapes, out, &Default::default())
}

/// `lane_groups` with a place for the lanes of the op's function at
/// `shapes`, filled on first use: the typings of one function share it
/// (the shape table holds one per entry).
pub fn lane_groups_with(
    op: &TypedOp,
    m: &Mesh,
    shapes: &[Shape],
    out: &Shape,
    local: &OnceCell<Option<Lanes>>,
) -> Option<LaneGroups> {
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
    let local: &Lanes = local.get_or_init(|| lanes(&f.expr, shapes)).as_ref()?;
    // Global types: the meaning is the function of the global tensors, whose
    // lanes are read on the global shapes.
    let global = match op.is_global() {
        false => None,
        true => {
            let (gout, out_src) = global_sources(m, &op.output, out)?;
            let mut gin = Vec::new();
            let mut in_src = Vec::new();
            for (t, s) in op.inputs.iter().zip(shapes) {
                let (g, src) = global_sources(m, t, s)?;
                gin.push(g);
                in_src.push(src);
            }
            let gl = lanes(&f.expr, &gin)?;
            Some((gout, out_src, gin, in_src, gl))
        }
    };
    // An input either view reads whole is a core input: its scalars join
    // the core of the entries that read them, never a lane.
    let core_input: Vec<bool> = (0..shapes.len())
        .map(|i| local.shared[i] || global.as_ref().is_some_and(|g| g.4.shared[i]))
        .collect();
    // Output entries and the core scalars they read.
    let mut reads_core: Vec<(usize, usize)> = Vec::new();
    // Each rank runs the function: an output entry reads the entries of its
    // lane, and the whole of each core input on its rank.
    let out_keys = Lanes::keys(&local.out_dims, out);
    let in_keys: Vec<Option<Vec<u64>>> = local
        .in_dims
        .iter()
        .zip(shapes)
        .enumerate()
        .map(|(i, (d, s))| {
            d.as_ref()
                .filter(|_| !core_input[i])
                .map(|d| Lanes::keys(d, s))
        })
        .collect();
    // The first node met with each lane key; keys are below the number of
    // output entries (each key is some entry's coordinates along the lane
    // dims).
    let key_count = out_keys
        .iter()
        .chain(in_keys.iter().flatten().flatten())
        .max()
        .map_or(0, |&k| k as usize + 1);
    let mut first: Vec<usize> = vec![usize::MAX; key_count];
    let join = |dsu: &mut Dsu, first: &mut [usize], k: u64, x: usize| {
        let slot = &mut first[k as usize];
        if *slot == usize::MAX {
            *slot = x;
        }
        dsu.union(*slot, x);
    };
    for r in 0..nr {
        first.fill(usize::MAX);
        for (e, k) in out_keys.iter().enumerate() {
            join(&mut dsu, &mut first, *k, out_node(r, e));
        }
        for (i, keys) in in_keys.iter().enumerate() {
            let Some(keys) = keys else { continue };
            for (e, k) in keys.iter().enumerate() {
                join(&mut dsu, &mut first, *k, node(i, r, e));
            }
        }
        let mut core: Option<usize> = None;
        for i in (0..shapes.len()).filter(|&i| core_input[i]) {
            for e in 0..ns[i] {
                let c = *core.get_or_insert(node(i, r, e));
                dsu.union(c, node(i, r, e));
            }
        }
        if let Some(c) = core {
            reads_core.extend((0..n_out).map(|e| (out_node(r, e), c)));
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
    if let Some((gout, out_src, gin, in_src, gl)) = &global {
        let mut first: HashMap<u64, usize> = HashMap::new();
        for (k, &(r, e)) in Lanes::keys(&gl.out_dims, gout).iter().zip(out_src) {
            let a = *first.entry(*k).or_insert(out_node(r, e));
            dsu.union(a, out_node(r, e));
        }
        for (i, d) in gl.in_dims.iter().enumerate() {
            let Some(d) = d.as_ref().filter(|_| !core_input[i]) else {
                continue;
            };
            for (k, &(r, e)) in Lanes::keys(d, &gin[i]).iter().zip(&in_src[i]) {
                let a = *first.entry(*k).or_insert(node(i, r, e));
                dsu.union(a, node(i, r, e));
            }
        }
        // A core input of the global function is read whole by every
        // global output entry, wherever its members are placed.
        let mut core: Option<usize> = None;
        for (i, src) in in_src.iter().enumerate().filter(|(i, _)| gl.shared[*i]) {
            for &(r, e) in src {
                let c = *core.get_or_insert(node(i, r, e));
                dsu.union(c, node(i, r, e));
            }
        }
        if let Some(c) = core {
            reads_core.extend(out_src.iter().map(|&(r, e)| (out_node(r, e), c)));
        }
    }
    // A lane reads one core: the cores its entries read are joined.
    let mut lane_core: Vec<usize> = vec![usize::MAX; dsu.0.len()];
    for &(o, c) in &reads_core {
        let lane = dsu.find(o);
        if lane_core[lane] == usize::MAX {
            lane_core[lane] = c;
        }
        dsu.union(lane_core[lane], c);
    }
    let is_core_node = |x: usize| {
        x < total_free && {
            let i = offset.partition_point(|&o| o <= x) - 1;
            core_input[i]
        }
    };
    let mut number: Vec<u32> = vec![u32::MAX; dsu.0.len()];
    let mut roots: Vec<usize> = Vec::new();
    let mut id = |dsu: &mut Dsu, x: usize| {
        let root = dsu.find(x);
        if number[root] == u32::MAX {
            roots.push(root);
            number[root] = roots.len() as u32 - 1;
        }
        number[root]
    };
    let free: Vec<u32> = (0..total_free).map(|x| id(&mut dsu, x)).collect();
    let inputs = (0..shapes.len())
        .map(|i| {
            (0..nr)
                .flat_map(|r| (0..ns[i]).map(move |e| (r, e)))
                .map(|(r, e)| id(&mut dsu, node(i, r, e)))
                .collect()
        })
        .collect();
    let out: Vec<u32> = (0..nr * n_out)
        .map(|k| id(&mut dsu, total_free + k))
        .collect();
    // Core nodes are only ever joined with core nodes, so a root tells.
    let mut parts: Vec<Part> = roots
        .iter()
        .map(|&x| {
            if is_core_node(x) {
                Part::Core
            } else {
                Part::Lane(None)
            }
        })
        .collect();
    for (lane, &c) in lane_core.iter().enumerate() {
        if c != usize::MAX {
            let (l, c) = (number[dsu.find(lane)], number[dsu.find(c)]);
            parts[l as usize] = Part::Lane(Some(c));
        }
    }
    let lanes_with_scalars = {
        let mut ids: Vec<u32> = free
            .iter()
            .copied()
            .filter(|&g| parts[g as usize] != Part::Core)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    };
    (lanes_with_scalars > 1).then_some(LaneGroups {
        free,
        inputs,
        out,
        parts,
    })
}
