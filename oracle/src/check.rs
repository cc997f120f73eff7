//! The properties of one typed operation on one instance (SPEC.md §4).
//!
//! `check` takes an instance (mesh and well-formed inputs) and decides pass,
//! outside the domain, or a violation naming the property. It knows nothing
//! of how instances are enumerated. Its derivative comes from exact finite
//! differences of the forward (SPEC.md §5); it never calls the backward to
//! compute one, only to compare against.

use crate::fd::{FitBufs, PolyWeights};
use spmd_interp::eval::{eval_at, eval_into, pointwise_inputs, Ctx};
use spmd_interp::program::give_back;
use spmd_interp::{Degree, EvalError, Op, TypedOp};
use spmd_semantics::perrank::{self, denote, Denot, Projection};
use spmd_semantics::{Mesh, PerRank, Shape, Tensor, Type, Q};
use std::sync::{Arc, Mutex};

pub use spmd_semantics::Property;

pub use crate::outcome::{show_denot, Outcome, Pass, Phase, Shown, Violation};

mod backward;
mod parts;

use parts::{out_parts, type_parts, Supports, TypeParts};

/// One mesh × shape case of a typed op, with everything that does not depend
/// on the values computed once.
pub struct Checker<'a> {
    op: &'a TypedOp,
    m: &'a Mesh,
    shapes: Vec<Shape>,
    out_shape: Shape,
    deg: Degree,
    step: Q,
    /// Per input: the denotation basis (SPEC.md §5.1).
    bases: Vec<Arc<Vec<(perrank::DenotCoord, PerRank)>>>,
    /// Free-scalar basis of the output cotangent type.
    gs: Arc<Vec<PerRank>>,
    /// Their denotations.
    dgs: Arc<Vec<Denot>>,
    /// Directions of the output cotangent type that denote zero.
    g_kernel: Arc<Vec<PerRank>>,
    /// The first nonzero (rank, entry) of each unit cotangent and of each
    /// of the cotangent's kernel directions (their lane groups' keys).
    gs_first: Arc<Vec<Option<(usize, usize)>>>,
    g_kernel_first: Arc<Vec<Option<(usize, usize)>>>,
    /// For a pointwise local op, the supports of the unit cotangents and
    /// of the cotangent's kernel directions: where its backward writes
    /// (`backward_unit`).
    supps: Option<Arc<Supports>>,
    /// Why the backward cannot take a cotangent of this case's shape, if so.
    bwd_shape_err: Option<String>,
    /// Why the declared JVP cannot take tangents of this case's shapes, if so.
    jvp_shape_err: Option<String>,
    /// Per input, for a polynomial op: finite-difference weights.
    weights: Vec<Option<Arc<PolyWeights>>>,
    /// Per input, for a piecewise op with no division along the input's
    /// lines: the same weights at the small step. Between kinks the map is
    /// a polynomial of the degree bound in the step, so the interpolation
    /// reads the derivative and check that `fd::derivative`'s fit would
    /// (SPEC.md §18.1).
    line_weights: Vec<Option<Arc<PolyWeights>>>,
    /// Denotation maps of the input and output types and the inputs' cotangents.
    proj_in: Vec<Projection>,
    proj_out: Projection,
    proj_cot_in: Vec<Projection>,
    /// Per output cotangent unit: the nonzero entries of its denotation
    /// (flat index, value), each divided by the output type's repeat
    /// factor, so a pairing with it is a short sum (SPEC.md §18).
    dg_supp: Arc<Vec<Vec<(usize, Q)>>>,
    /// Per input, per basis direction: its nonzero entries (rank, element,
    /// value) and the ranks it touches, to perturb a workspace in place.
    basis_nz: Vec<Vec<Sparse>>,
    /// The same for the kernel directions.
    kernel_nz: Vec<Vec<Sparse>>,
    /// Per input: the steps along its kernel lines (`line_steps`).
    steps: Vec<Vec<Q>>,
    /// The inputs' cotangent types, and the output's.
    cot_in: Vec<Type>,
    cot_out: Type,
    /// Buffers of this case, one set per thread at work on it (`Scratch`).
    scratch: Pool,
    /// Whether the op is checked by `exact_deriv` instead (SPEC.md §19.4).
    exact: bool,
    /// For a local op that is pointwise on this case's shapes, per input:
    /// whether output entry k reads its entry k and no other, so a sample
    /// along it recomputes only the entries it moves (SPEC.md §18.8).
    /// Empty otherwise.
    entrywise: Vec<bool>,
    /// The case's lane groups, when it has them (`with_lanes`), and the
    /// group of each item the properties loop over.
    lanes: Option<crate::exact_deriv::LaneSets>,
    lane_of: Option<LaneOf>,
    /// Whether the primal half of B2 is left out, as implied by B1 and B3
    /// over a lower-set grid (`implied_b2`, SPEC.md §8.3).
    b2_implied: bool,
    /// Per unit cotangent of `gs`: whether it is the first with its
    /// denotation, where the rest are implied by linearity (`reps_of`);
    /// `None` where none is implied.
    g_reps: Option<Vec<bool>>,
    /// Whether B1 and B3 run at those cotangents only (`implied_b2`).
    g_reduced: bool,
}

/// The buffers one instance works in, kept with its case and reused by the
/// next instance, so an instance allocates none of them (SPEC.md §18.1).
/// Every one is overwritten before it is read.
#[derive(Default)]
struct Scratch {
    /// The inputs, perturbed in place (`Sparse::set`) and reset after.
    xs2: Vec<PerRank>,
    /// The output's tensors, the output workspace of `Work`.
    y: Vec<Tensor>,
    /// The output's denotation and the inputs'.
    dy: Denot,
    dxs: Vec<Denot>,
    fd: FdBufs,
    /// A program's sampler from the last instance, whose buffers the next
    /// one reuses (`Program::sampler_at`).
    sampler: Option<spmd_interp::program::Sampler>,
    /// The instance's output, overwritten by the next instance.
    fwd: Vec<Tensor>,
}

/// The backward properties' buffers (`Scratch`).
#[derive(Default)]
struct FdBufs {
    /// The output's denotation, flat.
    y0: Vec<Q>,
    /// The finite-difference columns of one input.
    cols: Vec<Vec<Q>>,
    /// A column's working buffers (`ColBufs`).
    col: ColBufs,
    /// The backward's results at the instance, denoted (B2).
    dbs: Vec<Denot>,
    /// The backward's results at the instance, one per cotangent basis
    /// direction, rewritten in place by each instance (`backward_here_into`).
    bws: Vec<Vec<PerRank>>,
    /// Per entry of `bws`: whether it is as the op's last backward at that
    /// same unit cotangent left it (`TypedOp::backward_into_kept`).
    bws_kept: Vec<bool>,
    /// Buffers a program's backward zeroes and fills instead of allocating
    /// (`Program::backward_from_pooled`).
    spare: Vec<PerRank>,
    /// The backward's results at a moved instance (B2), rewritten in place
    /// like `bws`.
    b2s: Vec<PerRank>,
    /// The backward's results at each of the cotangent's kernel
    /// directions, kept as `bws` is, with their flags.
    bks: Vec<Vec<PerRank>>,
    bks_kept: Vec<bool>,
    /// One member of a local op's meaning (F3, `Checker::f3_mismatch`).
    spec: Option<Tensor>,
    /// A program's meaning, step by step (F3, `Program::spec_into`).
    prog_spec: spmd_interp::program::SpecWork,
}

/// The buffers one finite-difference column works in (`directional_flat`).
#[derive(Default)]
struct ColBufs {
    /// A polynomial column's check value and one sample (`poly_directional`).
    p: Vec<Q>,
    ys: Vec<Q>,
    /// The rational fit's samples and elimination (`derivative_into`), and
    /// its result on an entrywise direction's covered coordinates.
    fit: FitBufs,
    covered: Vec<Q>,
    /// The samples of an entrywise direction computed off the workspace
    /// (`Checker::sample_direct`).
    direct: Direct,
}

/// `Checker::sample_direct`'s buffers: the moved input entry as a
/// one-entry tensor, and the output entries it moves.
#[derive(Default)]
struct Direct {
    one: Option<Tensor>,
    vals: Vec<Q>,
}

/// A case's scratch buffers, boxed on purpose: a lease (below) moves a
/// pointer in and out, not the structure.
#[allow(clippy::vec_box)]
type Pool = Mutex<Vec<Box<Scratch>>>;

/// A `Scratch` taken from a case's pool, given back when dropped. It is
/// boxed, so taking and giving it back moves a pointer: no copy of the
/// buffers' headers, and no empty `Scratch` built and dropped in its place.
struct Lease<'c> {
    pool: &'c Pool,
    ws: Option<Box<Scratch>>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(ws) = self.ws.take() {
            let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            p.push(ws);
        }
    }
}

/// `dst := src`, reusing `dst`'s buffers.
fn copy_into(dst: &mut Vec<PerRank>, src: &[PerRank]) {
    dst.truncate(src.len());
    for (k, x) in src.iter().enumerate() {
        match dst.get_mut(k) {
            Some(d) => d.tensors.clone_from(&x.tensors),
            None => dst.push(x.clone()),
        }
    }
}

/// `out[k] := ⟦xs[k]⟧` under `projs[k]`, reusing `out`'s buffers.
fn denote_all(projs: &[Projection], xs: &[PerRank], out: &mut Vec<Denot>) {
    out.truncate(xs.len());
    out.resize_with(xs.len(), Denot::default);
    for ((p, x), d) in projs.iter().zip(xs).zip(out.iter_mut()) {
        p.denote_into(x, d);
    }
}

/// An instance's sampling state: the output workspace (`sample`), and for a
/// program the workspace of its steps, whose clean state holds the
/// instance's step outputs.
struct Work {
    y: PerRank,
    prog: Option<spmd_interp::program::Sampler>,
}

impl Work {
    /// The last sample's output: a program's is read in its sampler,
    /// without a copy; any other op's is `y`.
    fn out(&self) -> &PerRank {
        match &self.prog {
            Some(s) => s.output(),
            None => &self.y,
        }
    }
}

/// The lane group of each item of a case's properties (`Checker::with_lanes`):
/// unit cotangents, the cotangent's kernel directions, and per input its
/// kernel directions and denotation basis.
struct LaneOf {
    gs: Vec<Option<u32>>,
    g_kernel: Vec<Option<u32>>,
    kernel: Vec<Vec<Option<u32>>>,
    basis: Vec<Vec<Option<u32>>>,
}

/// A sparse per-rank direction: nonzero entries and the ranks it touches.
#[derive(Clone)]
struct Sparse {
    /// Shared by the clones a case's checker takes from its type's parts.
    entries: Arc<[(usize, usize, Q)]>,
    touched: Arc<[bool]>,
    /// For a basis direction of an entrywise input (`Checker::entrywise`):
    /// the flat coordinates of the output's denotation that read an output
    /// entry it moves, in order (SPEC.md §18.8).
    cover: Option<Vec<usize>>,
}

impl Sparse {
    fn of(v: &PerRank) -> Sparse {
        let mut entries = Vec::new();
        for (r, t) in v.tensors.iter().enumerate() {
            for (e, q) in t.data.iter().enumerate() {
                if !q.is_zero() {
                    entries.push((r, e, q.clone()));
                }
            }
        }
        let touched: Vec<bool> = v.tensors.iter().map(|t| !t.is_zero()).collect();
        Sparse {
            entries: entries.into(),
            touched: touched.into(),
            cover: None,
        }
    }
    /// `work := base + h·self` on the entries this direction touches.
    fn set(&self, work: &mut PerRank, base: &PerRank, h: &Q) {
        for (r, e, v) in self.entries.iter() {
            work.tensors[*r].data[*e] = Sparse::moved(&base.tensors[*r].data[*e], h, v);
        }
    }
    /// An entry `b` moved by `h` along a direction whose entry there is `v`.
    #[inline(always)]
    fn moved(b: &Q, h: &Q, v: &Q) -> Q {
        // A unit direction's entries are 1: the step itself.
        if v.is_one() {
            b.add(h)
        } else {
            b.add(&h.mul(v))
        }
    }
    /// Undo `set`.
    fn reset(&self, work: &mut PerRank, base: &PerRank) {
        for (r, e, _) in self.entries.iter() {
            work.tensors[*r].data[*e] = base.tensors[*r].data[*e].clone();
        }
    }
}

/// Inputs of a local op evaluated without a heap list of arguments.
const MAX_ARGS: usize = 8;

enum Stop {
    Domain,
    Fail(Box<Violation>),
}

impl From<EvalError> for Stop {
    fn from(e: EvalError) -> Stop {
        match e {
            EvalError::DivByZero => Stop::Domain,
            EvalError::Shape(s) => {
                panic!("interpreter bug: shape error on an inferred instance: {s}")
            }
        }
    }
}

/// The inputs of an instance, by the names the rule gave them.
fn inputs_shown(op: &TypedOp, xs: &[PerRank]) -> Vec<Shown> {
    xs.iter()
        .enumerate()
        .map(|(i, x)| Shown {
            input: true,
            ..shown(op.input_name(i), &op.inputs[i], x)
        })
        .collect()
}

fn alternative(label: String, ty: &Type, value: &PerRank) -> Shown {
    Shown {
        alternative: true,
        ..shown(label, ty, value)
    }
}

fn shown(label: impl Into<String>, ty: &Type, value: &PerRank) -> Shown {
    Shown {
        label: label.into(),
        input: false,
        alternative: false,
        ty: ty.clone(),
        value: value.clone(),
    }
}

impl<'a> Checker<'a> {
    /// Prepare the case `m`, `shapes`; `Err` when the op does not accept the shapes.
    pub fn new(op: &'a TypedOp, m: &'a Mesh, shapes: Vec<Shape>) -> Result<Checker<'a>, String> {
        let (out_shape, deg) = op.op.infer(m, &shapes)?;
        // Piecewise maps are sampled with a small step so that samples stay
        // between kinks (SPEC.md §5.3).
        let step = if deg.piecewise {
            Q::frac(1, 1 << 16)
        } else {
            Q::one()
        };
        let ins: Vec<Arc<TypeParts>> = op
            .inputs
            .iter()
            .zip(&shapes)
            .map(|(t, s)| type_parts(m, t, s))
            .collect();
        let bases = ins.iter().map(|p| p.bases.clone()).collect();
        let tc = op.output.cot();
        let outs = out_parts(m, &op.output, &out_shape);
        let weights: Vec<Option<Arc<PolyWeights>>> = deg
            .num
            .iter()
            .map(|&d| deg.is_polynomial().then(|| PolyWeights::shared(d, &step)))
            .collect();
        let line_weights: Vec<Option<Arc<PolyWeights>>> = (0..deg.num.len())
            .map(|i| {
                (!deg.is_polynomial() && deg.den[i] == 0)
                    .then(|| PolyWeights::shared(deg.num[i], &step))
            })
            .collect();
        let bwd_shape_err = op.backward_accepts(m, &out_shape, &shapes).err();
        let jvp_shape_err = op.jvp_accepts(m, &shapes, &out_shape).err();
        let proj_in = ins.iter().map(|p| p.proj.clone()).collect();
        let proj_cot_in = ins.iter().map(|p| p.proj_cot.clone()).collect();
        let proj_out = outs.proj.clone();
        let g_reps = (!hand_written_backward(op))
            .then(|| reps_of(&outs.dg_supp, outs.g_kernel.len()))
            .flatten();
        let mut basis_nz: Vec<Vec<Sparse>> = ins.iter().map(|p| p.basis_nz.clone()).collect();
        let kernel_nz = ins.iter().map(|p| p.kernel_nz.clone()).collect();
        let steps = (0..op.inputs.len()).map(|i| line_steps(&deg, i)).collect();
        let cot_in = op.inputs.iter().map(Type::cot).collect();
        let entrywise = match &op.op {
            // `sample` takes the rank-wise path only up to MAX_ARGS inputs.
            Op::Local(f) if shapes.len() <= MAX_ARGS => {
                pointwise_inputs(&f.expr, &shapes).unwrap_or_default()
            }
            _ => Vec::new(),
        };
        let supps =
            (matches!(&op.op, Op::Local(_)) && !entrywise.is_empty()).then(|| outs.supports());
        // Which denotation coordinates each entrywise basis direction can
        // move: member r' at entry k, for every rank r among r''s sources
        // with entry k moved.
        let n_out = spmd_semantics::tensor::numel(&out_shape);
        for (dirs, _) in basis_nz.iter_mut().zip(&entrywise).filter(|(_, w)| **w) {
            for e in dirs.iter_mut() {
                let mut cover: Vec<usize> = (0..m.num_ranks())
                    .flat_map(|member| {
                        let srcs = proj_out.sources(member);
                        e.entries
                            .iter()
                            .filter(|(r, _, _)| srcs.contains(r))
                            .map(move |(_, k, _)| member * n_out + k)
                            .collect::<Vec<_>>()
                    })
                    .collect();
                cover.sort_unstable();
                cover.dedup();
                e.cover = Some(cover);
            }
        }
        Ok(Checker {
            op,
            m,
            shapes,
            out_shape,
            deg,
            step,
            bases,
            gs: outs.gs.clone(),
            dgs: outs.dgs.clone(),
            g_kernel: outs.g_kernel.clone(),
            gs_first: outs.gs_first.clone(),
            g_kernel_first: outs.g_kernel_first.clone(),
            supps,
            bwd_shape_err,
            jvp_shape_err,
            weights,
            line_weights,
            proj_in,
            proj_out,
            proj_cot_in,
            dg_supp: outs.dg_supp.clone(),
            basis_nz,
            kernel_nz,
            steps,
            cot_in,
            cot_out: tc,
            scratch: Mutex::new(Vec::new()),
            exact: crate::exact_deriv::applies(op),
            entrywise,
            lanes: None,
            lane_of: None,
            b2_implied: false,
            g_reps,
            g_reduced: false,
        })
    }

    /// This checker without the entrywise fast paths (SPEC.md §18.8,
    /// §18.9): every sample recomputes whole ranks, and every column is
    /// read off the full denotation. The outcomes are the same; tests
    /// compare the two.
    #[doc(hidden)]
    pub fn plain(mut self) -> Self {
        self.entrywise.clear();
        for e in self.basis_nz.iter_mut().flatten() {
            e.cover = None;
        }
        self
    }

    /// This checker without the primal half of B2, for a case whose grid
    /// decides polynomial identities of the degrees inferred (SPEC.md §8.3):
    /// a run of it that checks every point with no failure and no
    /// undetermined B3 has shown B1 and B3 everywhere, and with them B2's
    /// primal half. A run that fails or leaves B3 undetermined proves
    /// nothing about B2, and its caller runs the case again in full
    /// (`spmd_drivers::run`), so the first failure is the full check's.
    pub fn implied_b2(mut self) -> Self {
        self.b2_implied = true;
        self
    }

    /// Whether this case has unit cotangents whose B1 and B3 are implied
    /// by the others' and by the cotangent half of B2 (`reps_of`).
    pub fn reduces_cotangents(&self) -> bool {
        self.g_reps.is_some()
    }

    /// This checker with B1 and B3 run at one unit cotangent per
    /// denotation (SPEC.md §4.7): the backward, built-in, is linear in g,
    /// and every other unit cotangent is a multiple of such a one plus a
    /// cotangent that denotes zero, whose results the cotangent half of B2
    /// checks (denoting zero) and B1 with it (well formed). So an instance
    /// that passes has B1 and B3 at every unit cotangent. As with
    /// `implied_b2`, a run that fails is run again in full by its caller.
    pub fn reduced_cotangents(mut self) -> Self {
        self.g_reduced = self.g_reps.is_some();
        self
    }

    /// Whether B1 and B3 run at unit cotangent `gi`.
    fn runs_g(&self, gi: usize) -> bool {
        !self.g_reduced || self.g_reps.as_ref().is_none_or(|r| r[gi])
    }

    /// This checker with the lane groups of its case (SPEC.md §8.5): per
    /// input and for the output, a group per entry of each rank (rank r,
    /// entry e at r·numel + e), and per group whether it is a core.
    /// `Phase::Lane` then restricts the properties to one lane and the
    /// cores.
    pub fn with_lanes(mut self, inputs: Vec<Vec<u32>>, out: Vec<u32>, core: Vec<bool>) -> Self {
        let sets = crate::exact_deriv::LaneSets { inputs, out, core };
        let n_out = spmd_semantics::tensor::numel(&self.out_shape);
        let n_in: Vec<usize> = self
            .shapes
            .iter()
            .map(|s| spmd_semantics::tensor::numel(s))
            .collect();
        // An item's group is that of its first entry (every item of a case
        // lies in one group, or in a core).
        let at = |i: Option<usize>, first: Option<(usize, usize)>| {
            let n = i.map_or(n_out, |i| n_in[i]);
            first.and_then(|(r, k)| sets.group(i, r * n + k))
        };
        let of = |i: Option<usize>, e: &Sparse| at(i, e.entries.first().map(|&(r, k, _)| (r, k)));
        let per_input = |dirs: &[Vec<Sparse>]| -> Vec<Vec<Option<u32>>> {
            dirs.iter()
                .enumerate()
                .map(|(i, ds)| ds.iter().map(|e| of(Some(i), e)).collect())
                .collect()
        };
        let lane_of = LaneOf {
            gs: self.gs_first.iter().map(|&f| at(None, f)).collect(),
            g_kernel: self.g_kernel_first.iter().map(|&f| at(None, f)).collect(),
            kernel: per_input(&self.kernel_nz),
            basis: per_input(&self.basis_nz),
        };
        self.lane_of = Some(lane_of);
        self.lanes = Some(sets);
        self
    }

    /// Whether an item of lane group `g` is checked in `phase`: every item
    /// but under `Phase::Lane`, then those of its lane and of the cores
    /// (SPEC.md §8.5).
    fn keeps(&self, phase: Phase, g: impl FnOnce(&LaneOf) -> Option<u32>) -> bool {
        match (phase, &self.lane_of, &self.lanes) {
            (Phase::Lane(a), Some(l), Some(sets)) => g(l).is_none_or(|x| sets.keeps(a, x)),
            _ => true,
        }
    }

    /// Check one instance: inputs `xs`, well formed for their types.
    pub fn check(&self, xs: &[PerRank], phase: Phase) -> Outcome {
        if self.exact {
            // SPEC.md §19.4
            return crate::exact_deriv::check(self.op, self.m, xs, phase, self.lanes.as_ref());
        }
        match self.run(xs, phase) {
            Ok(p) => Outcome::Pass(p),
            Err(Stop::Domain) => Outcome::OutsideDomain,
            Err(Stop::Fail(v)) => Outcome::Fail(v),
        }
    }

    fn inputs_shown(&self, xs: &[PerRank]) -> Vec<Shown> {
        inputs_shown(self.op, xs)
    }
    /// Input `i`'s name as the rule wrote it.
    fn nm(&self, i: usize) -> String {
        self.op.input_name(i)
    }
    fn fail(
        &self,
        p: Property,
        what: String,
        shown: Vec<Shown>,
        expected: String,
        actual: String,
    ) -> Stop {
        Stop::Fail(Box::new(Violation {
            property: p,
            mesh: self.m.clone(),
            what,
            shown,
            expected,
            actual,
        }))
    }
    fn den_out(&self, y: &PerRank) -> Denot {
        self.proj_out.denote(y)
    }

    fn lease(&self) -> Lease<'_> {
        let ws = self
            .scratch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default();
        Lease {
            pool: &self.scratch,
            ws: Some(ws),
        }
    }

    fn run(&self, xs: &[PerRank], phase: Phase) -> Result<Pass, Stop> {
        let mut lease = self.lease();
        let ws = lease.ws.as_deref_mut().expect("a lease holds its scratch");
        self.run_in(xs, phase, ws)
    }

    fn run_in(&self, xs: &[PerRank], phase: Phase, ws: &mut Scratch) -> Result<Pass, Stop> {
        let m = self.m;
        let op = self.op;
        // A program's step outputs are kept: its samples recompute only
        // what a perturbation reaches, and its backward at this instance
        // reuses them (SPEC.md §18.1).
        // The output goes into the buffers of the last instance's.
        let mut ybase = std::mem::take(&mut ws.fwd);
        let n = m.num_ranks();
        // An instance outside the domain gives the buffers back too.
        let mut fwd = || -> Result<_, Stop> {
            Ok(match &op.op {
                Op::Program(p) => {
                    // The sampler of an earlier instance of the case lends its
                    // buffers (`Program::sampler_at`).
                    let (s, at_kink) = p.sampler_at(m, xs, ws.sampler.take())?;
                    ybase.clone_from(&s.base().last().expect("nonempty").tensors);
                    (at_kink, Some(s))
                }
                // `Op::forward` of a local op, rank by rank into the buffers.
                Op::Local(f)
                    if !xs.is_empty()
                        && xs.len() <= MAX_ARGS
                        && xs.iter().all(|x| x.tensors.len() == n) =>
                {
                    ybase.truncate(n);
                    ybase.resize_with(n, Tensor::placeholder);
                    let mut ctx = Ctx::default();
                    for (r, o) in ybase.iter_mut().enumerate() {
                        let mut args: [&Tensor; MAX_ARGS] = [&xs[0].tensors[r]; MAX_ARGS];
                        for (a, x) in args.iter_mut().zip(xs) {
                            *a = &x.tensors[r];
                        }
                        eval_into(&f.expr, &args[..xs.len()], &mut ctx, o)?;
                    }
                    (ctx.at_kink, None)
                }
                _ => {
                    let f = op.op.forward(m, xs)?;
                    ybase = f.y.tensors;
                    (f.at_kink, None)
                }
            })
        };
        let (at_kink, sampler) = match fwd() {
            Ok(r) => r,
            Err(e) => {
                ws.fwd = ybase;
                return Err(e);
            }
        };
        let y = PerRank { tensors: ybase };
        // F1: the output is well formed.
        if let Err(e) = perrank::well_formed(m, &op.output, &y) {
            let mut s = self.inputs_shown(xs);
            s.push(shown("out", &op.output, &y));
            let stop = self.fail(
                Property::F1,
                format!(
                    "the output differs between ranks along {} axis `{}`",
                    op.output.states[e.axis], m.axes[e.axis].name
                ),
                s,
                format!(
                    "rank {} equal to rank {}",
                    m.coords(e.other)
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    m.coords(e.rank)
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                format!("{} vs {}", y.tensors[e.other], y.tensors[e.rank]),
            );
            ws.fwd = y.tensors;
            ws.sampler = sampler;
            return Err(stop);
        }
        let Scratch {
            xs2,
            y: ybuf,
            dy,
            dxs,
            fd,
            sampler: kept,
            fwd: fwd_buf,
        } = ws;
        self.proj_out.denote_into(&y, dy);
        // One workspace copy of the inputs, perturbed in place and reset
        // after each direction (SPEC.md §18).
        copy_into(xs2, xs);
        // And one of the output, holding each sample (`sample`).
        let mut ys = std::mem::take(ybuf);
        ys.clone_from(&y.tensors);
        let mut yw = Work {
            y: PerRank { tensors: ys },
            prog: sampler,
        };
        let r = self.props(xs, phase, xs2, &y, &mut yw, dy, dxs, fd, at_kink);
        *ybuf = yw.y.tensors;
        *kept = yw.prog;
        *fwd_buf = y.tensors;
        r
    }

    /// `run` after F1, in the instance's buffers.
    #[allow(clippy::too_many_arguments)]
    fn props(
        &self,
        xs: &[PerRank],
        phase: Phase,
        xs2: &mut [PerRank],
        y: &PerRank,
        yw: &mut Work,
        dy: &Denot,
        dxs: &mut Vec<Denot>,
        fd: &mut FdBufs,
        at_kink: bool,
    ) -> Result<Pass, Stop> {
        let (m, op) = (self.m, self.op);
        // F2: moving an input along a direction that denotes zero keeps the
        // output's denotation.
        let f2 = phase != Phase::Values;
        for (i, ti) in op
            .inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| f2 && !phase.skips(*i))
        {
            for (k, zs) in self.kernel_nz[i].iter().enumerate() {
                if !self.keeps(phase, |l| l.kernel[i][k]) {
                    continue;
                }
                for t in &self.steps[i] {
                    zs.set(&mut xs2[i], &xs[i], t);
                    match self.sample(xs2, i, y, zs, yw) {
                        Ok(_) => {}
                        Err(EvalError::DivByZero) => {
                            self.unsample(y, i, zs, yw);
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                    let y2 = yw.out();
                    if perrank::well_formed(m, &op.output, y2).is_err() {
                        // An F1 failure off the grid. For a polynomial F1 is
                        // itself polynomial, so the grid has a failing point
                        // that is smaller in the order of §7.2; otherwise
                        // report it here.
                        if self.deg.is_polynomial() {
                            self.unsample(y, i, zs, yw);
                            continue;
                        }
                        return self.run(xs2, Phase::Forward);
                    }
                    if !self.proj_out.matches(y2, dy) {
                        let dy2 = self.den_out(y2);
                        let mut s = self.inputs_shown(xs);
                        s.push(alternative(format!("{}'", self.nm(i)), ti, &xs2[i]));
                        s.push(shown("out", &op.output, y));
                        s.push(shown("out'", &op.output, y2));
                        return Err(self.fail(
                            Property::F2,
                            format!("{0} and {0}' are equivalent (same denotation) but the outputs are not", self.nm(i)),
                            s,
                            show_denot(m, &op.output, dy),
                            show_denot(m, &op.output, &dy2),
                        ));
                    }
                    self.unsample(y, i, zs, yw);
                }
                zs.reset(&mut xs2[i], &xs[i]);
            }
        }
        // `xs2` equals `xs` again: the backward properties reuse it.
        // F3: the output denotes the declared global meaning.
        let f3 = match self.f3_steps(xs)? {
            Some(steps) => steps,
            None => {
                denote_all(&self.proj_in, xs, dxs);
                let buf = fd.spec.get_or_insert_with(|| Tensor::zeros(&[]));
                self.f3_mismatch(dxs, dy, buf, &mut fd.prog_spec)?
            }
        };
        if let Some((what, expected, actual)) = f3 {
            let mut s = self.inputs_shown(xs);
            s.push(shown("out", &op.output, y));
            return Err(self.fail(Property::F3, what, s, expected, actual));
        }
        match phase {
            Phase::Forward | Phase::Values => Ok(Pass::default()),
            Phase::Tangent => self.tangent_props(xs, xs2, y, yw, dy, at_kink, fd),
            Phase::All | Phase::AllBut(_) | Phase::Lane(_) => {
                self.backward_props(xs, xs2, y, yw, dy, at_kink, fd, phase)
            }
        }
    }

    /// F3 of a program under global types (SPEC.md §13.2): every step
    /// must keep its own global meaning on the values it is given, exactly
    /// as the step would if written as a rule on its own; then the program
    /// keeps the composed global meaning. `None` for anything else, which
    /// `f3_mismatch` checks.
    #[allow(clippy::type_complexity)]
    fn f3_steps(&self, xs: &[PerRank]) -> Result<Option<Option<(String, String, String)>>, Stop> {
        let (m, op) = (self.m, self.op);
        let spmd_interp::Op::Program(p) = &op.op else {
            return Ok(None);
        };
        if !op.is_global() {
            return Ok(None);
        }
        let vals = p.values(m, xs)?;
        let k = p.inputs.len();
        let types: Vec<&Type> = p
            .inputs
            .iter()
            .chain(p.steps.iter().map(|st| &st.op.output))
            .collect();
        for (j, st) in p.steps.iter().enumerate() {
            let dargs: Vec<Denot> = st
                .args
                .iter()
                .map(|&a| denote(m, types[a], &vals[a]))
                .collect();
            let dout = denote(m, &st.op.output, &vals[k + j]);
            if let Some((what, e, a)) = f3_mismatch(m, &st.op, &dargs, &dout)? {
                return Ok(Some(Some((format!("step `{}`: {what}", st.name), e, a))));
            }
        }
        Ok(Some(None))
    }

    /// F3 (SPEC.md §4.4, §13.2): what is wrong, expected and actual, when
    /// the output does not denote the declared meaning.
    /// A local SPMD op's meaning is first computed member by member into
    /// `buf` and compared with `dy` as it comes (`Op::spec` is the local
    /// function on each member, SPEC.md §4.4); only a mismatch or an
    /// instance outside the domain goes on to the plain comparison, which
    /// builds the report.
    fn f3_mismatch(
        &self,
        dxs: &[Denot],
        dy: &Denot,
        buf: &mut Tensor,
        prog: &mut spmd_interp::program::SpecWork,
    ) -> Result<Option<(String, String, String)>, Stop> {
        // A program with local types: its meaning in the case's workspace
        // (`Program::spec_into`), the comparison `f3_mismatch` ends with.
        if let Op::Program(p) = &self.op.op {
            if !self.op.is_global() && p.spec_into(self.m, dxs, prog)? == dy {
                return Ok(None);
            }
        }
        if let Op::Local(f) = &self.op.op {
            let n = self.m.num_ranks();
            let fits = !self.op.is_global()
                && !dxs.is_empty()
                && dxs.len() <= MAX_ARGS
                && dy.family.len() == n
                && dxs.iter().all(|d| d.family.len() == n);
            if fits {
                let agrees = (0..n).all(|r| {
                    let mut args: [&Tensor; MAX_ARGS] = [&dxs[0].family[r]; MAX_ARGS];
                    for (a, d) in args.iter_mut().zip(dxs) {
                        *a = &d.family[r];
                    }
                    eval_into(&f.expr, &args[..dxs.len()], &mut Ctx::default(), buf).is_ok()
                        && *buf == dy.family[r]
                });
                if agrees {
                    return Ok(None);
                }
            }
        }
        f3_mismatch(self.m, self.op, dxs, dy)
    }

    /// The forward at `work`, which differs from the instance's inputs
    /// only on the entries of input `i` that direction `e` moves, read
    /// after as `out.out()`; `out.y` holds the instance's output `base` on
    /// entry. A local op recomputes only the ranks `e` touches, in place and
    /// without allocating on the pointwise path (SPEC.md §18), exactly as
    /// `Op::forward_touching` does, and of a pointwise op only the output
    /// entries that read a moved entry (SPEC.md §18.8); a program
    /// recomputes only what the perturbation reaches, in its workspace
    /// (`Program::sample`, SPEC.md §18.1), where the sample is read without
    /// a copy; other ops run `forward_touching`. Returns whether a
    /// recomputed entry met a kink (the callers that read it sample only
    /// kink-free instances). `unsample` restores `out`.
    fn sample(
        &self,
        work: &[PerRank],
        i: usize,
        base: &PerRank,
        e: &Sparse,
        out: &mut Work,
    ) -> Result<bool, EvalError> {
        let touched = &e.touched;
        match (&self.op.op, out.prog.as_mut()) {
            (Op::Local(f), _) if !work.is_empty() && work.len() <= MAX_ARGS => {
                let mut ctx = Ctx::default();
                let rank_args = |r: usize| {
                    let mut args: [&Tensor; MAX_ARGS] = [&work[0].tensors[r]; MAX_ARGS];
                    for (a, x) in args.iter_mut().zip(work) {
                        *a = &x.tensors[r];
                    }
                    args
                };
                if self.entrywise.get(i) == Some(&true) {
                    // Output entry k reads entry k of input i and no other
                    // output entry reads it; the entries not recomputed are
                    // the instance's, which is in the domain.
                    for (r, k, _) in e.entries.iter() {
                        let args = rank_args(*r);
                        out.y.tensors[*r].data[*k] =
                            eval_at(&f.expr, &args[..work.len()], *k, &mut ctx)?;
                    }
                    return Ok(ctx.at_kink);
                }
                for r in (0..self.m.num_ranks()).filter(|&r| touched[r]) {
                    let args = rank_args(r);
                    eval_into(
                        &f.expr,
                        &args[..work.len()],
                        &mut ctx,
                        &mut out.y.tensors[r],
                    )?;
                }
                Ok(ctx.at_kink)
            }
            // The sample stays in the sampler, where `Work::out` reads it.
            (Op::Program(p), Some(s)) => p.sample(self.m, s, work, i, touched),
            (op, _) => {
                let fw = op.forward_touching(self.m, work, base, touched)?;
                out.y = fw.y;
                Ok(fw.at_kink)
            }
        }
    }

    /// Put `base` back into `out` after `sample` along direction `e` of
    /// input `i` (also after a failed one). Only a local op's sample writes
    /// into `out.y`; any other op's sample replaces `out.y` whole, so there
    /// is nothing to restore. A program's sampler is left as the sample
    /// left it: its next sample puts back what it does not recompute
    /// (`Program::sample`), every read of it follows a sample, and the next
    /// instance rewrites it whole (`Program::sampler_at`).
    fn unsample(&self, base: &PerRank, i: usize, e: &Sparse, out: &mut Work) {
        match (&self.op.op, out.prog.as_mut()) {
            (Op::Local(_), _) if self.entrywise.get(i) == Some(&true) => {
                for (r, k, _) in e.entries.iter() {
                    out.y.tensors[*r].data[*k].clone_from(&base.tensors[*r].data[*k]);
                }
            }
            (Op::Local(_), _) => {
                for (r, t) in e.touched.iter().enumerate() {
                    if *t {
                        out.y.tensors[r].clone_from(&base.tensors[r]);
                    }
                }
            }
            _ => {}
        }
    }

    /// The backward at the instance's inputs `xs`. A program with its
    /// steps' backwards reuses the step outputs kept in `yw` instead of
    /// running its forward again; the result is `TypedOp::backward`'s.
    fn backward_here(
        &self,
        xs: &[PerRank],
        yw: &Work,
        g: &PerRank,
    ) -> Result<Vec<PerRank>, EvalError> {
        match (&self.op.op, &self.op.backward, &yw.prog) {
            (Op::Program(p), spmd_interp::Backward::Steps, Some(s)) => {
                let out = p.backward_from(self.m, xs, s.base(), g)?;
                Ok(self.zero_no_grad(xs, out))
            }
            _ => self.op.backward(self.m, xs, g),
        }
    }

    /// `backward_here` into `out`, reusing its buffers where the op's
    /// backward can (`TypedOp::backward_into_kept`, whose `kept` this
    /// passes on); the values are the same.
    fn backward_here_into(
        &self,
        xs: &[PerRank],
        yw: &Work,
        g: &PerRank,
        out: &mut Vec<PerRank>,
        spare: &mut Vec<PerRank>,
        kept: &mut bool,
    ) -> Result<(), EvalError> {
        if yw.prog.is_some() {
            *kept = false;
        }
        match (&self.op.op, &self.op.backward, &yw.prog) {
            (Op::Program(p), spmd_interp::Backward::Steps, Some(s)) => {
                // The last results go back to the pool the backward takes
                // its zeroed buffers from.
                for b in out.drain(..) {
                    give_back(spare, b);
                }
                p.backward_from_pooled_into(self.m, xs, s.base(), g, spare, out)?;
                let r = std::mem::take(out);
                *out = self.zero_no_grad(xs, r);
                Ok(())
            }
            (_, _, Some(_)) => {
                *out = self.backward_here(xs, yw, g)?;
                Ok(())
            }
            (_, _, None) => self.op.backward_into_kept(self.m, xs, g, out, kept),
        }
    }

    /// `backward_here_into` at the case's cotangent `g`, a unit or a
    /// kernel direction whose nonzero entries are `supp`, at the instance's
    /// own inputs, where the forward ran: a pointwise local op writes only
    /// the entries of the support (`TypedOp::backward_unit_into_kept`);
    /// the values are the same. The plain checker (`plain`) takes the
    /// general path.
    #[allow(clippy::too_many_arguments)]
    fn backward_unit(
        &self,
        xs: &[PerRank],
        yw: &Work,
        g: &PerRank,
        supp: Option<&[(usize, usize)]>,
        out: &mut Vec<PerRank>,
        spare: &mut Vec<PerRank>,
        kept: &mut bool,
    ) -> Result<(), EvalError> {
        match supp {
            Some(supp) if self.writes_supports(yw) => self
                .op
                .backward_unit_into_kept(self.m, xs, g, supp, out, kept),
            _ => self.backward_here_into(xs, yw, g, out, spare, kept),
        }
    }

    /// Whether `backward_unit` takes the supports' path: a pointwise local
    /// op, not the plain checker.
    fn writes_supports(&self, yw: &Work) -> bool {
        self.supps.is_some() && yw.prog.is_none() && !self.entrywise.is_empty()
    }

    /// The backward at `work`, which differs from the instance's inputs
    /// only on the ranks of input `j` marked in `touched`, into `out`: a
    /// program's forward is sampled in its workspace (`Program::sample`);
    /// any other op's backward is written into `out`'s
    /// buffers where it can (`TypedOp::backward_into`). The result is
    /// `TypedOp::backward`'s.
    #[allow(clippy::too_many_arguments)]
    fn backward_near(
        &self,
        work: &[PerRank],
        j: usize,
        touched: &[bool],
        yw: &mut Work,
        g: &PerRank,
        out: &mut Vec<PerRank>,
        spare: &mut Vec<PerRank>,
    ) -> Result<(), EvalError> {
        match (&self.op.op, &self.op.backward, yw.prog.as_mut()) {
            (Op::Program(p), spmd_interp::Backward::Steps, Some(s)) => {
                for b in out.drain(..) {
                    give_back(spare, b);
                }
                let r = p
                    .sample(self.m, s, work, j, touched)
                    .and_then(|_| p.backward_from(self.m, work, s.steps(), g));
                *out = self.zero_no_grad(work, r?);
                Ok(())
            }
            _ => self.op.backward_into(self.m, work, g, out),
        }
    }

    /// Zeros for the inputs that get no gradient, as `TypedOp::backward`
    /// gives them.
    fn zero_no_grad(&self, xs: &[PerRank], mut out: Vec<PerRank>) -> Vec<PerRank> {
        for &i in &self.op.no_grad {
            if let (Some(o), Some(x)) = (out.get_mut(i), xs.get(i)) {
                *o = PerRank {
                    tensors: x.tensors.iter().map(|t| Tensor::zeros(&t.shape)).collect(),
                };
            }
        }
        out
    }

    /// A flat output denotation as a family.
    fn unflat(&self, flat: &[Q]) -> Denot {
        let shape = &self.out_shape;
        let n = shape.iter().product::<usize>();
        let family = (0..self.m.num_ranks())
            .map(|r| Tensor::new(shape.clone(), flat[r * n..(r + 1) * n].to_vec()))
            .collect();
        Denot { family }
    }
}

/// Steps `t` at which to compare along a kernel line of input `i` (SPEC.md
/// §4.3): for a polynomial of degree d in the step, t = 1..d with t = 0
/// decides it. Off polynomials the check is bounded; fractional steps then
/// also leave the value grid, where rounding and kinks show.
fn line_steps(deg: &Degree, i: usize) -> Vec<Q> {
    let d = deg.num[i] + deg.den[i];
    if deg.is_polynomial() {
        return (1..=d as i64).map(Q::int).collect();
    }
    let mut t: Vec<Q> = (1..=d.max(1) as i64 + 1).map(Q::int).collect();
    t.extend([Q::frac(1, 4), Q::frac(1, 3)]);
    t
}

/// Check every property of SPEC.md §4 on one instance: mesh `m`, inputs `xs`
/// (well formed for their types). Convenience for one-off checks; drivers
/// prepare a `Checker` per case.
pub fn check(op: &TypedOp, m: &Mesh, xs: &[PerRank]) -> Outcome {
    let shapes: Vec<Shape> = xs.iter().map(|x| x.shape().to_vec()).collect();
    match Checker::new(op, m, shapes) {
        Ok(c) => c.check(xs, Phase::All),
        Err(e) => panic!("interpreter bug: check called on shapes the op rejects: {e}"),
    }
}

/// T1 (SPEC.md §4.9) on one instance: `tt`, the declared transpose of the
/// declared transpose of `op`, computes the same global function as `op`.
pub fn check_involution(op: &TypedOp, tt: &TypedOp, m: &Mesh, xs: &[PerRank]) -> Outcome {
    let a = match op.op.forward(m, xs) {
        Ok(f) => f.y,
        Err(_) => return Outcome::OutsideDomain,
    };
    let b = match tt.op.forward(m, xs) {
        Ok(f) => f.y,
        Err(_) => return Outcome::OutsideDomain,
    };
    let (da, db) = (denote(m, &op.output, &a), denote(m, &tt.output, &b));
    if a.shape() == b.shape() && da == db {
        return Outcome::Pass(Pass::default());
    }
    let mut shown_vals: Vec<Shown> = inputs_shown(op, xs);
    shown_vals.push(shown("out", &op.output, &a));
    shown_vals.push(shown("y_tt", &tt.output, &b));
    Outcome::Fail(Box::new(Violation {
        property: Property::T1,
        mesh: m.clone(),
        what: format!(
            "the transpose of the transpose, `{}`, is not `{}`",
            tt.op.describe(),
            op.op.describe()
        ),
        shown: shown_vals,
        expected: show_denot(m, &op.output, &da),
        actual: show_denot(m, &tt.output, &db),
    }))
}

/// F3 (SPEC.md §4.4, §13.2) for `op` on input denotations `dxs` and output
/// denotation `dy`: what is wrong, the expected and the actual value.
fn f3_mismatch(
    m: &Mesh,
    op: &TypedOp,
    dxs: &[Denot],
    dy: &Denot,
) -> Result<Option<(String, String, String)>, Stop> {
    let g = |t: Option<Tensor>| t.map_or_else(|| "no global tensor".into(), |t| t.to_string());
    if let Some(want) = op.global_spec(m, dxs)? {
        // Global SPMD: the op on the global tensors.
        let have = perrank::global(m, &op.output, dy);
        return Ok((have.as_ref() != Some(&want)).then(|| {
            (
                format!(
                    "the output's global tensor is not `{}` of the inputs' global tensors",
                    op.op.describe()
                ),
                want.to_string(),
                g(have),
            )
        }));
    }
    if op.redistributes_globally() {
        // Global SPMD: moving data keeps the global tensor.
        let (before, after) = (
            perrank::global(m, &op.inputs[0], &dxs[0]),
            perrank::global(m, &op.output, dy),
        );
        if before != after {
            return Ok(Some((
                format!(
                    "`{}` changes the global tensor; it should only move data",
                    op.op.describe()
                ),
                g(before),
                g(after),
            )));
        }
    }
    if let Some(want) = dxs.first().and_then(|d0| op.global_reading(m, d0)) {
        // Global SPMD: reducing or permuting Varying pieces has a fixed
        // global reading, and the output's layout must match it.
        let have = perrank::global(m, &op.output, dy);
        if want != have {
            return Ok(Some((
                format!(
                    "the output's global tensor is not what `{}` makes of the input's pieces",
                    op.op.describe()
                ),
                g(want),
                g(have),
            )));
        }
    }
    let want = op.op.spec(m, dxs)?;
    Ok((want != *dy).then(|| {
        (
            format!(
                "the output does not denote `{}` of the inputs' denotations",
                op.op.describe()
            ),
            show_denot(m, &op.output, &want),
            show_denot(m, &op.output, dy),
        )
    }))
}

/// Per unit cotangent (with `supp`, its denotation's nonzero coordinates
/// and values): whether it is the first with its denotation. The firsts'
/// denotations must use pairwise disjoint coordinates, so they are
/// independent, and with the `kernel` cotangents (which denote zero) they
/// must be as many as the units: then they make a basis of the cotangents,
/// and every other unit is its first plus a cotangent that denotes zero.
/// `None` when that fails or when every unit is a first: then none is
/// implied.
fn reps_of(supp: &[Vec<(usize, Q)>], kernel: usize) -> Option<Vec<bool>> {
    let mut firsts: Vec<&[(usize, Q)]> = Vec::new();
    let mut used = std::collections::HashSet::new();
    let mut reps = Vec::with_capacity(supp.len());
    for s in supp {
        if s.is_empty() {
            return None;
        }
        if firsts.contains(&s.as_slice()) {
            reps.push(false);
            continue;
        }
        if !s.iter().all(|(c, _)| used.insert(*c)) {
            return None;
        }
        firsts.push(s);
        reps.push(true);
    }
    let kept = firsts.len();
    (kept < supp.len() && kept + kernel == supp.len()).then_some(reps)
}

/// Whether `op`'s backward, or a program step's, is a rule designer's
/// hand-written function of g (built-in VJPs and transposes are linear by
/// construction).
fn hand_written_backward(op: &TypedOp) -> bool {
    match (&op.backward, &op.op) {
        (spmd_interp::op::Backward::Local(_), _) => true,
        (spmd_interp::op::Backward::Steps, Op::Program(p)) => {
            p.steps.iter().any(|s| hand_written_backward(&s.op))
        }
        _ => false,
    }
}

/// Per-rank tensors as `a | b | ...`.
fn show_per_rank(x: &PerRank) -> String {
    x.tensors
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_interp::{parse, Backward, Program, Step};
    use spmd_semantics::State;

    /// SPEC.md §18.1: the buffer set of a case keeps a program's workspace,
    /// so the next instance runs its forward into its buffers. After an
    /// instance of a program the set holds its sampler; after one of a
    /// local op (the twin) it holds none. The outcome is a pass either way.
    #[test]
    fn a_case_keeps_a_programs_workspace_for_the_next_instance() {
        let m = Mesh::line(2);
        let v = Type::one(State::Varying);
        let local = |src: &str| TypedOp::local(parse(src).unwrap(), vec![v.clone()], v.clone());
        let steps = vec![
            Step {
                name: "sq".into(),
                op: local("x * x"),
                args: vec![0],
            },
            Step {
                name: "twice".into(),
                op: local("2 * x"),
                args: vec![1],
            },
        ];
        let program = TypedOp {
            op: Op::Program(Box::new(Program::new(vec![v.clone()], steps).unwrap())),
            inputs: vec![v.clone()],
            output: v.clone(),
            backward: Backward::Steps,
            jvp: None,
            no_grad: vec![],
        };
        let xs = vec![perrank::from_free(&m, &v, &[], &[Q::int(3), Q::int(-1)])];
        for (op, keeps) in [(&program, true), (&local("2 * x * x"), false)] {
            let c = Checker::new(op, &m, vec![vec![]]).unwrap();
            for _ in 0..2 {
                assert!(
                    matches!(c.check(&xs, Phase::All), Outcome::Pass(ref p) if !p.b3_undetermined)
                );
                let pool = c.scratch.lock().unwrap();
                assert_eq!(pool.len(), 1);
                assert_eq!(pool[0].sampler.is_some(), keeps);
            }
        }
    }
}
