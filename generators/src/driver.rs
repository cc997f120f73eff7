//! The case driver (SPEC.md §8): which mesh × shape cases a typed op is
//! checked on, their grids, the caps and the refusals that keep a run
//! finite. It enumerates; asking the oracle about each instance is the
//! caller's (the dependency rule keeps the oracle out of generators).

use crate::exhaustive::{
    candidate_count, candidate_tuples, for_each_lane_point, lane_size, lane_size_of, lane_sizes,
    lower_size, shape_tuples, Scope, Split,
};
use crate::lanes::{lane_groups_with, LaneGroups, Part};
use crate::switch::Switch;
use rayon::prelude::*;
use spmd_interp::{Backward, Degree, Jvp, Op, TypedOp};
use spmd_semantics::pending::PartialKind;
use spmd_semantics::perrank::{num_free, FreeSlots};
use spmd_semantics::{Mesh, PerRank, Shape, Q};
use std::ops::ControlFlow;
use std::rc::Rc;

/// Cases set aside by the caps (SPEC.md §8.1).
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    /// Mesh × shape cases left out for exceeding `max_free` or `max_points` ...
    pub beyond_cap: u64,
    /// ... of which on a mesh of more than one rank.
    pub distributed_beyond_cap: u64,
    /// Those of a transcendental op, each as its mesh and input shapes:
    /// the oracle may decide them by identity instead (SPEC.md §19.8).
    pub symbolic: Vec<(Mesh, Vec<Shape>)>,
}

/// One mesh × shape case of a run and its grid.
pub struct Case {
    pub mesh: Mesh,
    pub shapes: Vec<Shape>,
    /// Per input: free-scalar count and its value list.
    pub lists: Vec<(usize, Vec<Q>)>,
    /// Per input: `Some(d)` when only the points whose value indices (over
    /// that input's scalars) sum to at most d are visited, the lower set
    /// that decides a polynomial of total degree d in the input (SPEC.md
    /// §8.3); `None` when every combination of the values is.
    pub budgets: Vec<Option<usize>>,
    /// A budget on the value indices of all inputs together, where the
    /// op's total degree in all of them is below the sum of the inputs'
    /// budgets (SPEC.md §8.3); `None` otherwise.
    pub total: Option<usize>,
    /// Whether the grid decides polynomial identities (SPEC.md §8.3).
    pub proof_grid: bool,
    /// Whether the properties that do not depend on the inputs' values
    /// (F2, J1, B1-B3) are decided at the first point alone, the others
    /// checking F1 and F3: a linear op whose backward and JVP do not read
    /// the primals (SPEC.md §8.3, `values_free`).
    pub once: bool,
    /// Whether each input's cotangent is made of local partials and
    /// constant maps (`own_partials`), so that input i's properties that
    /// have degree dᵢ − 1 in it are decided at the points where its value
    /// indices sum to less than its budget dᵢ (SPEC.md §8.3,
    /// `saturated_inputs`); with budget 1, where input i is zero.
    pub per_input: bool,
    /// Whether the primal half of B2 is implied by B1 and B3 on this grid,
    /// so that a run may leave it out and check the case again in full
    /// only where it fails (SPEC.md §8.3): the lower set of inferred
    /// total degrees, and every pending reduction a sum or a mean.
    pub b2_implied: bool,
    /// A lane group per free scalar (all inputs in order) when only the
    /// points with at most one nonzero group are visited: the case's op
    /// separates into lanes, and each property at a point is a conjunction
    /// of properties of one group each (SPEC.md §8.5, `lane_groups`).
    pub lanes: Option<LaneGroups>,
    /// `points()` as the driver counted it when it built the case; `None`
    /// counts again. Whoever changes the lists, budgets, joint budget or
    /// lanes of a built case sets it to `None`.
    pub points_known: Option<u64>,
}

impl Case {
    /// Per input: its free scalars, its value count and its budget.
    fn blocks(&self) -> Vec<(usize, usize, Option<usize>)> {
        self.lists
            .iter()
            .zip(&self.budgets)
            .map(|((k, v), &b)| (*k, v.len(), b))
            .collect()
    }
    /// Grid points of the case.
    pub fn points(&self) -> u64 {
        if let Some(p) = self.points_known {
            return p;
        }
        let blocks = self.blocks();
        match &self.lanes {
            Some(g) => lane_size(&blocks, self.total, g.split()),
            None => lower_size(&blocks, self.total),
        }
    }
    /// Visit the case's points (each a value per free scalar, all inputs
    /// in order) in the order of SPEC.md §7.2.
    pub fn for_each_point<B>(&self, f: &mut dyn FnMut(&[Q]) -> ControlFlow<B>) -> ControlFlow<B> {
        let flat: Vec<&[Q]> = self
            .lists
            .iter()
            .flat_map(|(k, v)| std::iter::repeat_n(v.as_slice(), *k))
            .collect();
        let blocks: Vec<(usize, Option<usize>)> = self
            .lists
            .iter()
            .zip(&self.budgets)
            .map(|((k, _), &b)| (*k, b))
            .collect();
        for_each_lane_point(
            &flat,
            &blocks,
            self.total,
            self.lanes.as_ref().map(LaneGroups::split),
            f,
        )
    }
}

/// Whether `op` calls an external kernel anywhere. A kernel's declared
/// degree is the user's claim along each coordinate (SPEC.md §20.4), not a
/// total degree, so its cases keep the full product grid.
fn has_external(op: &Op) -> bool {
    match op {
        Op::External(_) => true,
        Op::Local(_) | Op::Collective(_) => false,
        Op::Compose(ops) => ops.iter().any(has_external),
        Op::Declared { forward, meaning } => has_external(forward) || has_external(meaning),
        Op::Program(p) => p.steps.iter().any(|s| has_external(&s.op.op)),
    }
}

/// The degree per input that the grid must decide: the forward's bound
/// `fwd`, raised to the declared meaning's (F3 compares with it) and a
/// declared local JVP's (J1), each read in the primal inputs. `None` when
/// no polynomial grid decides the properties: a declared part that is not
/// polynomial; a hand-written backward of higher degree than the forward
/// (B2 is decided in its step t by the forward's degree, §4.3); or a
/// program with a declared step or a hand-written step backward.
fn grid_degree(
    op: &TypedOp,
    m: &Mesh,
    shapes: &[Shape],
    out: &Shape,
    fwd: &Degree,
) -> Option<Vec<u32>> {
    if !fwd.is_polynomial() {
        return None;
    }
    let k = shapes.len();
    let mut d = fwd.num.clone();
    if let Op::Declared { meaning, .. } = &op.op {
        let (_, dm) = meaning.infer(m, shapes).ok()?;
        if !dm.is_polynomial() {
            return None;
        }
        for (a, b) in d.iter_mut().zip(&dm.num) {
            *a = (*a).max(*b);
        }
    }
    if let Op::Program(p) = &op.op {
        let plain = p.steps.iter().all(|s| {
            !matches!(s.op.op, Op::Declared { .. }) && !matches!(s.op.backward, Backward::Local(_))
        });
        if !plain {
            return None;
        }
    }
    if let Backward::Local(fs) = &op.backward {
        let mut with_g = shapes.to_vec();
        with_g.push(out.clone());
        for f in fs {
            let (_, db) = spmd_interp::eval::infer(&f.expr, &with_g).ok()?;
            if !db.is_polynomial() || (0..k).any(|i| db.num[i] > fwd.num[i]) {
                return None;
            }
        }
    }
    if let Some(Jvp::Local(f)) = &op.jvp {
        let mut with_t = shapes.to_vec();
        with_t.extend_from_slice(shapes);
        let (_, dj) = spmd_interp::eval::infer(&f.expr, &with_t).ok()?;
        if !dj.is_polynomial() {
            return None;
        }
        for (a, b) in d.iter_mut().zip(&dj.num[..k]) {
            *a = (*a).max(*b);
        }
    }
    Some(d)
}

/// Whether every pending reduction of the op's types is a sum or a mean, so
/// that denotations are linear in the per-rank values (SPEC.md §2.4).
fn owes_sums(op: &TypedOp) -> bool {
    op.inputs.iter().chain([&op.output]).all(|t| {
        t.kinds
            .iter()
            .all(|k| matches!(k, PartialKind::Sum | PartialKind::Avg))
    })
}

/// Whether every property but F1 and F3 is the same at every value of the
/// inputs (SPEC.md §8.3): the forward is linear (a collective, a cast, a
/// composition of them; a declared one claims a linear meaning too), every
/// type's pending reduction is a sum or a mean, the backward is a
/// transpose or a local function of degree 0 in the primals (or none), and
/// so is the JVP. Then F2's defect f(x + tz) - f(x) = t f(z), the backward, the
/// Jacobian it is compared with in B3, and the JVP do not depend on x.
pub fn values_free(op: &TypedOp, shapes: &[Shape], out: &Shape) -> bool {
    let linear = match &op.op {
        Op::Declared { forward, meaning } => forward.is_linear() && meaning.is_linear(),
        o => o.is_linear(),
    };
    if !linear || !owes_sums(op) {
        return false;
    }
    let k = shapes.len();
    let free_of_primals = |f: &spmd_interp::LocalFn, extra: &[Shape]| {
        let mut with = shapes.to_vec();
        with.extend_from_slice(extra);
        spmd_interp::eval::infer(&f.expr, &with)
            .is_ok_and(|(_, d)| d.is_polynomial() && d.num[..k].iter().all(|&n| n == 0))
    };
    let backward = match &op.backward {
        // A linear op is never a local function: it has no local VJP to
        // run, and fails the same way at every point if asked for one.
        Backward::Transpose(_) | Backward::LocalVjp => true,
        Backward::Local(fs) => fs
            .iter()
            .all(|f| free_of_primals(f, std::slice::from_ref(out))),
        Backward::Steps => false,
    };
    let jvp = match &op.jvp {
        None | Some(Jvp::Tangent(_)) => true,
        Some(Jvp::Local(f)) => free_of_primals(f, shapes),
    };
    backward && jvp
}

/// Whether each input's cotangent is a sum of products of local partials
/// and constant maps (SPEC.md §8.3): a local op with the per-rank VJP as
/// its backward and no declared JVP, or a program that runs its steps'
/// backwards, each step a local op with its own VJP or a linear op whose
/// backward is a transpose; every type's pending reduction a sum or a mean;
/// at most 64 inputs. Reverse mode takes each partial along an operand,
/// at the step's operands, so on every path from input i the product of
/// partials has degree at most dᵢ − 1 in input i's scalars, where dᵢ is the
/// inferred degree, even where a transpose is wrong: input i's cotangent
/// has degree dᵢ − 1 in input i, as does every difference of the forward
/// along input i.
pub fn own_partials(op: &TypedOp) -> bool {
    let own_vjp = |o: &TypedOp| {
        matches!(o.op, Op::Local(_)) && matches!(o.backward, Backward::LocalVjp) && o.jvp.is_none()
    };
    let shape = match &op.op {
        Op::Local(_) => own_vjp(op),
        Op::Program(p) => {
            matches!(op.backward, Backward::Steps)
                && op.jvp.is_none()
                && p.steps.iter().all(|st| {
                    let s = &st.op;
                    owes_sums(s)
                        && s.jvp.is_none()
                        && (own_vjp(s)
                            || (s.op.is_linear() && matches!(s.backward, Backward::Transpose(_))))
                })
        }
        _ => false,
    };
    shape && op.inputs.len() <= 64 && owes_sums(op)
}

/// Whether an op is affine in each input separately (grid degree 1 in
/// every input) and [`own_partials`]: then input i's value-free properties
/// do not read input i at all (SPEC.md §8.3), the case of degree 1 of
/// the per-input budgets.
pub fn affine_in_each(op: &TypedOp, degree: Option<&[u32]>) -> bool {
    own_partials(op) && degree.is_some_and(|d| d.iter().all(|&d| d == 1))
}

/// The cases of a typed op in a scope: meshes with as many axes as the types,
/// every fitting shape tuple, those over the free-scalar cap set aside.
pub fn cases(op: &TypedOp, scope: &Scope, meshes: &[Mesh]) -> (Vec<Case>, Coverage) {
    let tables: Vec<Rc<ShapeTable>> = meshes.iter().map(|m| shape_table(op, scope, m)).collect();
    cases_in(op, scope, meshes, &tables)
}

/// Per mesh: every input shape tuple the op accepts, with its output shape
/// and degree bound. It depends on the op's function, not on its types, so
/// the typings of one function share it (SPEC.md §18.1).
/// Each entry also holds, once asked for, the lanes of a local op's
/// function at those shapes (`spmd_interp::lanes::lanes`), which its
/// typings' lane groups share.
pub type ShapeTable = Vec<(
    Vec<Shape>,
    Shape,
    spmd_interp::Degree,
    std::cell::OnceCell<Option<spmd_interp::lanes::Lanes>>,
)>;

/// The shape table of `op` on mesh `m`: the tuples of `shape_tuples`, in
/// its order, each inferred once. A run asks for the same table twice (the
/// estimate, then the cases), so each thread keeps its last few tables; a
/// table depends only on the function, the mesh and the scope's shapes,
/// which key it. Shared, not copied: a hit clones a pointer.
pub fn shape_table(op: &TypedOp, scope: &Scope, m: &Mesh) -> Rc<ShapeTable> {
    type Entry = (Op, Mesh, Vec<Shape>, Rc<ShapeTable>);
    thread_local! {
        static TABLES: std::cell::RefCell<Vec<Entry>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    const KEEP: usize = 8;
    let shapes = scope.shapes_for(m);
    let hit = TABLES.with(|t| {
        t.borrow()
            .iter()
            .find(|(o, mm, s, _)| *o == op.op && mm == m && *s == shapes)
            .map(|e| e.3.clone())
    });
    if let Some(t) = hit {
        return t;
    }
    let mut table: ShapeTable = candidate_tuples(&op.op, m, &shapes)
        .into_iter()
        .filter_map(|t| {
            op.op
                .infer(m, &t)
                .ok()
                .map(|(out, deg)| (t, out, deg, Default::default()))
        })
        .collect();
    // The order of `shape_tuples` (a stable sort on the same key).
    table.sort_by_key(|(t, _, _, _)| {
        (
            t.iter().map(|s| s.iter().product::<usize>()).sum::<usize>(),
            t.clone(),
        )
    });
    let table = Rc::new(table);
    TABLES.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() >= KEEP {
            t.remove(0);
        }
        t.push((op.op.clone(), m.clone(), shapes, table.clone()));
    });
    table
}

/// `cases` with the shape tables of `meshes` given (one per mesh, from
/// `shape_table` of an op with the same function).
pub fn cases_in(
    op: &TypedOp,
    scope: &Scope,
    meshes: &[Mesh],
    tables: &[Rc<ShapeTable>],
) -> (Vec<Case>, Coverage) {
    let mut tally = Coverage::default();
    let mut out = Vec::new();
    // Cases over the points cap on more than one rank, fewest points kept.
    let mut spill: Option<Case> = None;
    for (m, table) in meshes.iter().zip(tables) {
        for (shapes, out_shape, deg, local) in table.iter() {
            let shapes = shapes.clone();
            if !op.layouts_fit(m, &shapes, out_shape) {
                continue; // a layout names a dim these shapes lack (SPEC.md §13.1)
            }
            let frees: Vec<usize> = op
                .inputs
                .iter()
                .zip(&shapes)
                .map(|(t, s)| num_free(m, t, s))
                .collect();
            let degree = grid_degree(op, m, &shapes, out_shape, deg);
            // A case that decides its value-free properties once (§8.3)
            // costs one full point and a forward per other point, so only
            // the points cap bounds it, not the free-scalar cap.
            let linear_grid = degree.as_ref().is_some_and(|d| d.iter().all(|&d| d == 1))
                && !has_external(&op.op)
                && values_free(op, &shapes, out_shape);
            let over_free = frees.iter().any(|&k| k > scope.max_free) && !linear_grid;
            let poly = degree
                .as_ref()
                .is_some_and(|d| d.iter().all(|&d| (d as usize) < scope.values.len()));
            // Total-degree bounds (every inferred bound is one, §8.3) make
            // the lower set enough; a kernel's per-coordinate claim needs
            // the full product of the first d + 1 values.
            let lower = poly && !has_external(&op.op);
            let transcendental = op.op.is_transcendental_local();
            let (lists, budgets) = frees
                .iter()
                .enumerate()
                .map(|(i, &k)| match &degree {
                    Some(d) if poly => (
                        (k, scope.grid_values(true, d[i])),
                        lower.then_some(d[i] as usize),
                    ),
                    // A transcendental op takes the first three values in
                    // every combination (SPEC.md §19.6), so that a lane of
                    // length 2 on two ranks fits under the caps.
                    _ if transcendental => {
                        ((k, scope.values.iter().take(3).cloned().collect()), None)
                    }
                    _ => ((k, scope.grid_values(false, 0)), None),
                })
                .unzip();
            let once = lower && values_free(op, &shapes, out_shape);
            let per_input = lower && !once && own_partials(op);
            let mut case = Case {
                mesh: m.clone(),
                shapes,
                lists,
                budgets,
                proof_grid: poly,
                once,
                per_input,
                b2_implied: lower && owes_sums(op),
                lanes: None,
                total: None,
                points_known: None,
            };
            // The op's total degree in all inputs together bounds every
            // property of an op built from its own partials (SPEC.md §8.3).
            if per_input && Switch(&JOINT_BUDGET).get() {
                let sum = case
                    .budgets
                    .iter()
                    .flatten()
                    .fold(0usize, |a, &d| a.saturating_add(d));
                let t = deg.total as usize;
                if case.budgets.iter().all(Option::is_some) && t < sum {
                    case.total = Some(t);
                }
            }
            // A case over the caps whose op separates into lanes visits
            // only the points with one nonzero lane group, which decide the
            // rest; the caps then bound each group (SPEC.md §8.5).
            let flat_points = case.points();
            let over = over_free || flat_points > scope.max_points;
            let mode = Switch(&LANE_MODE).get();
            let lanes_here = match mode {
                LaneMode::OverCaps => over,
                LaneMode::Off => false,
                LaneMode::WithinCaps | LaneMode::WithinCapsCoresApart => !over,
            };
            let mut lane_points = None;
            if lanes_here {
                case.lanes = lane_groups_with(op, m, &case.shapes, out_shape, local)
                    .map(|mut g| {
                        if mode == LaneMode::WithinCapsCoresApart {
                            g.parts.fill(Part::Lane(None));
                        }
                        g
                    })
                    .filter(|g| {
                        lane_points = lanes_within(&case, g.split(), scope, linear_grid);
                        lane_points.is_some()
                    });
            }
            // Counted once here; the estimate and the run read it.
            case.points_known = Some(match (&case.lanes, lane_points) {
                (Some(_), Some(p)) => p,
                _ => flat_points,
            });
            if over_free && case.lanes.is_none() {
                tally.beyond_cap += 1;
                tally.distributed_beyond_cap += u64::from(m.num_ranks() > 1);
                if transcendental {
                    tally.symbolic.push((m.clone(), case.shapes.clone()));
                }
                continue;
            }
            if case.lanes.is_none() && case.points() > scope.max_points {
                tally.beyond_cap += 1;
                tally.distributed_beyond_cap += u64::from(m.num_ranks() > 1);
                if transcendental {
                    tally.symbolic.push((m.clone(), case.shapes.clone()));
                }
                if m.num_ranks() > 1 && spill.as_ref().is_none_or(|c| case.points() < c.points()) {
                    spill = Some(case);
                }
                continue;
            }
            out.push(case);
        }
    }
    // Without any multi-rank case the run would test nothing about
    // distribution: take the smallest one anyway, within 16 times the cap
    // (SPEC.md §8.1). The cases before it are all on one rank, so the order
    // of §7.2 is kept.
    if !out.iter().any(|c| c.mesh.num_ranks() > 1) {
        if let Some(c) = spill.filter(|c| c.points() <= scope.max_points.saturating_mul(16)) {
            tally.beyond_cap -= 1;
            tally.distributed_beyond_cap -= 1;
            tally
                .symbolic
                .retain(|(m, s)| !(*m == c.mesh && *s == c.shapes));
            out.push(c);
        }
    }
    (out, tally)
}

/// When a case is visited lane by lane (SPEC.md §8.5): over the caps (the
/// default), never, or within the caps only (for tests that compare the
/// lane grid with the full one on the same cases); and, as a negative
/// twin, within the caps with every core taken as a lane of its own.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneMode {
    OverCaps,
    Off,
    WithinCaps,
    WithinCapsCoresApart,
}

thread_local! {
    static LANE_MODE: std::cell::Cell<LaneMode> = const { std::cell::Cell::new(LaneMode::OverCaps) };
    static JOINT_BUDGET: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Run `f` with lane grids used as `mode` says, on this thread. Hidden: a
/// test switch, like `run::with_plain_points`.
#[doc(hidden)]
pub fn with_lane_mode<T>(mode: LaneMode, f: impl FnOnce() -> T) -> T {
    Switch(&LANE_MODE).with(mode, f)
}

/// Run `f` with the joint budget of §8.3 used (the default) or not, on
/// this thread. Hidden: a test switch, for tests that compare the two.
#[doc(hidden)]
pub fn with_joint_budget<T>(on: bool, f: impl FnOnce() -> T) -> T {
    Switch(&JOINT_BUDGET).with(on, f)
}

/// Whether each lane group of `case` (a lane with its core, or a core) is
/// within the caps: at most `max_free` scalars of any input (unless the
/// case is linear, which only the points cap bounds) and at most
/// `max_points` points of its own; and the whole case within 16 times the
/// points cap, the bound of the one case taken beyond it (SPEC.md §8.1).
/// When so, the case's points split this way; `None` otherwise.
fn lanes_within(case: &Case, split: Split<'_>, scope: &Scope, linear: bool) -> Option<u64> {
    let sizes = lane_sizes(&case.blocks(), case.total, split);
    let each = sizes.sets.iter().all(|(b, size)| {
        (linear || b.iter().all(|x| x.0 <= scope.max_free)) && *size <= scope.max_points
    });
    let all = lane_size_of(&sizes, split);
    (each && all <= scope.max_points.saturating_mul(16)).then_some(all)
}

/// The meshes a typed op is checked on: those of the scope with as many axes
/// as its types.
pub fn meshes_for(op: &TypedOp, scope: &Scope) -> Vec<Mesh> {
    scope.meshes_with(op.output.states.len())
}

/// Estimated instance count of checking `op` in `scope`.
pub fn estimate(op: &TypedOp, scope: &Scope) -> u64 {
    if tuple_guard(op, scope).is_err() {
        return u64::MAX;
    }
    cases(op, scope, &meshes_for(op, scope))
        .0
        .iter()
        .map(Case::points)
        .fold(0u64, u64::saturating_add)
}

/// The sum of `estimate` over typings `ops` of one function with the same
/// number of mesh axes: the shape tables are computed once, not per typing.
pub fn estimate_typings(ops: &[TypedOp], scope: &Scope) -> u64 {
    estimate_typings_until(ops, scope, u64::MAX).0
}

/// `estimate_typings`, stopped as soon as the sum passes `limit`: the sum
/// so far and how many typings (from the first) it covers. A caller that
/// only refuses beyond `limit` need not walk the rest: a five-input
/// function's 4,096 typings took seconds to walk under the fuzzer's
/// instrumentation only to be refused (fuzz target expr).
pub fn estimate_typings_until(ops: &[TypedOp], scope: &Scope, limit: u64) -> (u64, usize) {
    let Some(first) = ops.first() else {
        return (0, 0);
    };
    let (total, done, _) = typings_cases_until(ops, scope, limit, &[meshes_for(first, scope)]);
    (total, done)
}

/// Per typing, per group of meshes: the cases `cases` finds on that group,
/// and its coverage.
pub type TypingCases = Vec<Vec<(Vec<Case>, Coverage)>>;

/// `estimate_typings_until` with the meshes in groups (`parts`, together
/// those of `meshes_for`), keeping the cases it walks: a run that needs the
/// estimate first then checks the very cases it counted instead of finding
/// them again (benches/HISTORY.md §18.12). With at most one group holding
/// meshes of more than one rank, the count is the same as over all meshes
/// at once: the multi-rank case taken beyond the cap (§8.1) is taken when
/// no multi-rank case is within it, in that group as in the whole. The
/// cases are kept for the typings walked (all of them unless cut short).
pub fn typings_cases_until(
    ops: &[TypedOp],
    scope: &Scope,
    limit: u64,
    parts: &[Vec<Mesh>],
) -> (u64, usize, TypingCases) {
    let Some(first) = ops.first() else {
        return (0, 0, Vec::new());
    };
    if tuple_guard(first, scope).is_err() {
        return (u64::MAX, 0, Vec::new());
    }
    // Typings are found in parallel, a chunk at a time, and added up in
    // order: the count, where it stops and what it keeps are those of a
    // walk one typing after another (at most a chunk more is found).
    let chunk = 4 * rayon::current_num_threads().max(1);
    let mut total = 0u64;
    let mut kept = Vec::with_capacity(ops.len());
    for (c, part) in ops.chunks(chunk).enumerate() {
        let found: Vec<Vec<(Vec<Case>, Coverage)>> = part
            .par_iter()
            .map(|op| {
                parts
                    .iter()
                    .map(|ms| {
                        // Each thread keeps the function's tables (`shape_table`).
                        let tables: Vec<Rc<ShapeTable>> =
                            ms.iter().map(|m| shape_table(first, scope, m)).collect();
                        cases_in(op, scope, ms, &tables)
                    })
                    .collect()
            })
            .collect();
        for (j, per) in found.into_iter().enumerate() {
            if total > limit {
                return (total, c * chunk + j, kept);
            }
            let n = per
                .iter()
                .flat_map(|(cs, _)| cs)
                .map(Case::points)
                .fold(0u64, u64::saturating_add);
            total = total.saturating_add(n);
            kept.push(per);
        }
    }
    (total, ops.len(), kept)
}

/// An upper bound on `estimate_typings(ops, scope)` from the shape tables
/// alone, without the cases: every case a run keeps has at most
/// `max_points` points, or, checked lane by lane (SPEC.md §8.5), at most
/// `max_points` per group besides the point 0, with at most one group per
/// free scalar, and at most 16 · `max_points` in all; and the one multi-rank case it may take beyond the cap
/// at most 16 times that (SPEC.md §8.1). When this is within a limit the
/// estimate is too, and a caller that only compares with the limit need
/// not walk every typing's cases (benches/HISTORY.md §18.11).
pub fn typings_bound(ops: &[TypedOp], scope: &Scope) -> u64 {
    let Some(first) = ops.first() else {
        return 0;
    };
    if tuple_guard(first, scope).is_err() {
        return u64::MAX;
    }
    let per_typing = cases_bound(first, scope).saturating_add(scope.max_points.saturating_mul(16));
    (ops.len() as u64).saturating_mul(per_typing)
}

/// The most points the cases of one typing of `op`'s function keep within
/// the caps, from its shape tables: `max_points` per table entry, or for a
/// function that may split into lanes, 1 + (free scalars) · (`max_points`
/// − 1), at most 16 · `max_points`, when that is more.
fn cases_bound(op: &TypedOp, scope: &Scope) -> u64 {
    let split = matches!(op.op, Op::Local(_));
    meshes_for(op, scope)
        .iter()
        .map(|m| {
            shape_table(op, scope, m)
                .iter()
                .map(|(shapes, _, _, _)| {
                    let free = shapes
                        .iter()
                        .map(|s| s.iter().product::<usize>() as u64)
                        .fold(0u64, u64::saturating_add)
                        .saturating_mul(m.num_ranks() as u64);
                    let lanes = free
                        .saturating_mul(scope.max_points.saturating_sub(1))
                        .saturating_add(1)
                        .min(scope.max_points.saturating_mul(16));
                    if split {
                        scope.max_points.max(lanes)
                    } else {
                        scope.max_points
                    }
                })
                .fold(0u64, u64::saturating_add)
        })
        .fold(0, u64::saturating_add)
}

/// The largest degree bound, numerator plus denominator per input, that
/// exact finite differences accept (SPEC.md §5.2). Beyond it the sampled
/// rationals grow too large for a check to finish.
pub const MAX_DEGREE: u32 = 16;

/// Refuse an op whose degree bound exceeds `MAX_DEGREE` on the first shapes
/// in scope that fit it.
pub fn degree_guard(op: &TypedOp, scope: &Scope) -> Result<(), String> {
    tuple_guard(op, scope)?;
    for m in meshes_for(op, scope) {
        if let Some(shapes) = shape_tuples(&op.op, &m, scope).into_iter().next() {
            let (_, d) = op.op.infer(&m, &shapes)?;
            let bound = |i: usize| d.num[i].saturating_add(d.den[i]);
            if let Some(i) = (0..d.num.len()).find(|&i| bound(i) > MAX_DEGREE) {
                return Err(format!(
                    "`{}` has degree bound {} in input {i}; exact finite differences take at most {MAX_DEGREE}",
                    op.op.describe(),
                    bound(i)
                ));
            }
            return Ok(());
        }
    }
    Ok(())
}

/// The most input shape tuples enumerated per mesh: the most shape choices
/// the search for them makes (`visit_candidates`).
pub const MAX_SHAPE_TUPLES: u64 = 400_000;

/// Refuse, before any enumeration, an op whose inputs have more shape tuples
/// per mesh than `MAX_SHAPE_TUPLES` (seven inputs over the default 13 shapes
/// would be 62 million; building them exhausted memory). Within the limit
/// the cartesian product is fine; beyond it, an op whose search prunes
/// (an expression, a program) is refused only if the pruned search on some
/// mesh of the scope makes more choices than that (SPEC.md §8.1).
pub fn tuple_guard(op: &TypedOp, scope: &Scope) -> Result<(), String> {
    let n = scope.max_shapes() as u64;
    let k = op.op.arity();
    let total = n.checked_pow(k as u32).unwrap_or(u64::MAX);
    if total <= MAX_SHAPE_TUPLES {
        return Ok(());
    }
    let pruned = matches!(op.op, Op::Local(_) | Op::Program(_))
        || matches!(&op.op, Op::Declared { forward, .. } if matches!(**forward, Op::Local(_)));
    let mut meshes = meshes_for(op, scope);
    if meshes.is_empty() && !matches!(op.op, Op::Program(_)) {
        // An expression's search does not read the mesh; a program's does,
        // and is searched only on the meshes it is checked on.
        meshes = scope.meshes.clone();
    }
    if pruned && !meshes.is_empty() {
        let mut seen: Vec<Vec<Shape>> = Vec::new();
        let within = meshes.iter().all(|m| {
            let shapes = scope.shapes_for(m);
            // An expression's search depends on the shapes alone.
            if !matches!(op.op, Op::Program(_)) {
                if seen.contains(&shapes) {
                    return true;
                }
                seen.push(shapes.clone());
            }
            candidate_count(&op.op, m, &shapes, MAX_SHAPE_TUPLES).is_some()
        });
        if within {
            return Ok(());
        }
        return Err(format!(
            "scope too large: {k} inputs over {n} shapes make more than {MAX_SHAPE_TUPLES} shape tuples to search per mesh; lower --max-rank or --max-dim"
        ));
    }
    Err(format!(
        "scope too large: {k} inputs over {n} shapes make {total} shape tuples per mesh (limit {MAX_SHAPE_TUPLES}); lower --max-rank or --max-dim"
    ))
}

/// The most shape tuples `op` has on any mesh of the scope it is checked
/// on (`candidate_count`), or `None` when a search would pass
/// `MAX_SHAPE_TUPLES` choices.
pub fn candidate_bound(op: &TypedOp, scope: &Scope) -> Option<u64> {
    let mut meshes = meshes_for(op, scope);
    if meshes.is_empty() {
        meshes = scope.meshes.clone();
    }
    meshes.iter().try_fold(0u64, |acc, m| {
        candidate_count(&op.op, m, &scope.shapes_for(m), MAX_SHAPE_TUPLES).map(|c| acc.max(c))
    })
}

impl Case {
    /// The inputs whose scalars at `point` use up their budget: the value
    /// indices of input i's scalars sum to dᵢ ≥ 1 (a bit per input, inputs
    /// 0..64). Such a point lies outside the lower set of budget dᵢ − 1 in
    /// input i, which decides input i's properties of degree dᵢ − 1 there
    /// (SPEC.md §8.3). With every budget 1 these are the inputs that are
    /// not zero. Where the case has a joint budget t and the indices of all
    /// inputs sum to t, every input with a budget: the point lies outside
    /// the lower set of joint budget t − 1, which decides the properties of
    /// total degree t − 1.
    pub fn saturated_inputs(&self, point: &[Q]) -> u64 {
        let (mut mask, mut at, mut all, mut sum) = (0u64, 0, 0u64, 0usize);
        for (i, ((k, values), budget)) in self.lists.iter().zip(&self.budgets).enumerate() {
            let used: usize = point[at..at + k]
                .iter()
                .filter(|v| !v.is_zero())
                .map(|v| values.iter().position(|w| w == v).unwrap_or(usize::MAX))
                .fold(0, usize::saturating_add);
            let counted = i < 64 && budget.is_some_and(|d| d >= 1);
            if counted && budget.is_some_and(|d| used >= d) {
                mask |= 1 << i;
            }
            if counted {
                all |= 1 << i;
            }
            sum = sum.saturating_add(used);
            at += k;
        }
        match self.total {
            Some(t) if t >= 1 && sum >= t => all,
            _ => mask,
        }
    }
    /// Each input's per-rank value at one grid point.
    pub fn inputs(&self, op: &TypedOp, point: &[Q]) -> Vec<PerRank> {
        let mut out = Vec::new();
        self.inputs_into(op, point, &mut out);
        out
    }

    /// `inputs` written into `out`, reusing its buffers.
    pub fn inputs_into(&self, op: &TypedOp, point: &[Q], out: &mut Vec<PerRank>) {
        self.inputs_for(op).inputs_into(point, out);
    }

    /// How `op`'s inputs are read from this case's grid points: compute it
    /// once per case, then `CaseInputs::inputs_into` per point.
    pub fn inputs_for<'c>(&'c self, op: &TypedOp) -> CaseInputs<'c> {
        CaseInputs {
            case: self,
            slots: op
                .inputs
                .iter()
                .map(|t| FreeSlots::new(&self.mesh, t))
                .collect(),
        }
    }
}

/// A case's inputs as read from its grid points (`Case::inputs_for`).
pub struct CaseInputs<'c> {
    case: &'c Case,
    slots: Vec<FreeSlots>,
}

impl CaseInputs<'_> {
    /// `Case::inputs_into`: each input's per-rank value at one grid point,
    /// written into `out`'s buffers.
    pub fn inputs_into(&self, point: &[Q], out: &mut Vec<PerRank>) {
        let c = self.case;
        out.truncate(self.slots.len());
        out.resize_with(self.slots.len(), || PerRank {
            tensors: Vec::new(),
        });
        let mut at = 0;
        for (((slots, s), (k, _)), x) in self.slots.iter().zip(&c.shapes).zip(&c.lists).zip(out) {
            slots.fill(s, &point[at..at + k], x);
            at += k;
        }
    }
}

/// The enumerated cases of a typed op: mesh, input shapes, and the value list
/// of every free scalar (all inputs, in order).
pub fn enumerated_cases(
    op: &TypedOp,
    scope: &Scope,
    meshes: &[Mesh],
) -> Vec<(Mesh, Vec<Shape>, Vec<Vec<Q>>)> {
    cases(op, scope, meshes)
        .0
        .into_iter()
        .map(|c| {
            let flat = c
                .lists
                .iter()
                .flat_map(|(k, v)| std::iter::repeat_n(v.clone(), *k))
                .collect();
            (c.mesh, c.shapes, flat)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exhaustive::{all_types, tuples};

    /// Every one-axis typing of a built-in, as `derive` makes them.
    fn typings(name: &str) -> Vec<TypedOp> {
        let f = spmd_interp::builtin(name).expect("a built-in");
        let types = all_types(1);
        let mut ops = Vec::new();
        for ins in tuples(&types, f.arity()) {
            for o in &types {
                ops.push(TypedOp::local(f.clone(), ins.clone(), o.clone()));
            }
        }
        ops
    }

    fn scopes() -> Vec<(&'static str, Scope)> {
        vec![
            ("default", Scope::default()),
            (
                "scalars, one point per case",
                Scope {
                    max_rank: 0,
                    max_points: 1,
                    ..Scope::default()
                },
            ),
            (
                "four points per case",
                Scope {
                    max_points: 4,
                    ..Scope::default()
                },
            ),
        ]
    }

    /// The first op and scope where `bound` is below the estimate, or how
    /// many were compared.
    fn first_below(bound: &dyn Fn(&[TypedOp], &Scope) -> u64) -> Result<usize, String> {
        let mut n = 0;
        for name in ["neg", "relu", "add", "mul", "div", "sum", "matmul"] {
            let ops = typings(name);
            for (what, scope) in scopes() {
                let (b, e) = (bound(&ops, &scope), estimate_typings(&ops, &scope));
                if b < e {
                    return Err(format!("{name} on scope {what}: bound {b} < estimate {e}"));
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// The stopped walk: the whole estimate when the limit is not passed,
    /// and otherwise a sum past the limit from a prefix of the typings,
    /// which is the prefix's own estimate.
    #[test]
    fn the_stopped_estimate_is_the_estimate_of_a_prefix() {
        for name in ["add", "mul", "matmul"] {
            let ops = typings(name);
            let scope = Scope::default();
            let full = estimate_typings(&ops, &scope);
            assert_eq!(
                estimate_typings_until(&ops, &scope, full),
                (full, ops.len())
            );
            let (part, done) = estimate_typings_until(&ops, &scope, full / 4);
            assert!(part > full / 4 && done < ops.len(), "{name}: {part} {done}");
            assert_eq!(part, estimate_typings(&ops[..done], &scope), "{name}");
        }
    }

    #[test]
    fn the_typings_bound_is_never_below_the_estimate() {
        assert_eq!(first_below(&typings_bound), Ok(21));
    }

    #[test]
    fn a_bound_without_the_spilled_case_is_caught() {
        // Forgets the one case a run takes beyond the cap (SPEC.md §8.1).
        // (add's scalar cases fit the cap since its joint budget, §8.3.)
        let no_spill =
            |ops: &[TypedOp], scope: &Scope| ops.len() as u64 * cases_bound(&ops[0], scope);
        assert_eq!(
            first_below(&no_spill),
            Err("mul on scope scalars, one point per case: bound 256 < estimate 400".into())
        );
    }

    /// The cases `derive` keeps from its estimate: in two groups, one-rank
    /// meshes and the others, their points add up to the estimate over all
    /// meshes at once, and each group's cases are those `cases` finds on
    /// it, typing by typing.
    #[test]
    fn cases_kept_in_two_groups_are_the_estimated_ones() {
        for name in ["neg", "relu", "add", "mul", "matmul"] {
            let ops = typings(name);
            for (what, scope) in scopes() {
                let (single, multi): (Vec<Mesh>, Vec<Mesh>) = meshes_for(&ops[0], &scope)
                    .into_iter()
                    .partition(|m| m.num_ranks() == 1);
                let parts = [single, multi];
                let (total, done, kept) = typings_cases_until(&ops, &scope, u64::MAX, &parts);
                assert_eq!(total, estimate_typings(&ops, &scope), "{name} on {what}");
                assert_eq!((done, kept.len()), (ops.len(), ops.len()));
                for (op, per) in ops.iter().zip(&kept) {
                    for (ms, (cs, cover)) in parts.iter().zip(per) {
                        let (want, wc) = cases(op, &scope, ms);
                        let key = |cs: &[Case]| -> Vec<(Mesh, Vec<Shape>)> {
                            cs.iter()
                                .map(|c| (c.mesh.clone(), c.shapes.clone()))
                                .collect()
                        };
                        assert_eq!(key(cs), key(&want), "{name} on {what}");
                        assert_eq!(cover.beyond_cap, wc.beyond_cap, "{name} on {what}");
                    }
                }
            }
        }
    }

    /// Its twin: with the multi-rank meshes in groups of their own, each
    /// group may take a case beyond the cap (SPEC.md §8.1), and the count
    /// passes the estimate.
    #[test]
    fn multi_rank_meshes_in_several_groups_count_more() {
        let ops = typings("mul");
        let scope = Scope {
            max_rank: 0,
            max_points: 1,
            ..Scope::default()
        };
        let apart: Vec<Vec<Mesh>> = meshes_for(&ops[0], &scope)
            .into_iter()
            .map(|m| vec![m])
            .collect();
        let (total, _, _) = typings_cases_until(&ops, &scope, u64::MAX, &apart);
        assert!(total > estimate_typings(&ops, &scope), "{total}");
    }

    /// A built case keeps its own count: for every case of five
    /// built-ins' typings on three scopes, with lanes or without, the
    /// count it keeps is the one counted afresh.
    #[test]
    fn a_built_case_keeps_its_count_of_points() {
        let mut lane_cases = 0;
        for name in ["neg", "relu", "add", "mul", "matmul"] {
            for (what, scope) in scopes() {
                for op in typings(name) {
                    for c in cases(&op, &scope, &meshes_for(&op, &scope)).0 {
                        let known = c.points_known;
                        lane_cases += usize::from(c.lanes.is_some());
                        let fresh = Case {
                            points_known: None,
                            ..c
                        };
                        assert_eq!(known, Some(fresh.points()), "{name} on {what}");
                    }
                }
            }
        }
        assert!(lane_cases > 0);
    }

    /// Its twin: a case whose lanes are dropped after it is built, its
    /// count kept, no longer counts its own grid.
    #[test]
    fn a_case_changed_after_it_is_built_must_count_again() {
        let op = &typings("mul")[0];
        let scope = Scope::default();
        let stale = cases(op, &scope, &meshes_for(op, &scope))
            .0
            .into_iter()
            .filter(|c| c.lanes.is_some())
            .map(|c| Case { lanes: None, ..c })
            .filter(|c| {
                let fresh = Case {
                    points_known: None,
                    lanes: None,
                    mesh: c.mesh.clone(),
                    shapes: c.shapes.clone(),
                    lists: c.lists.clone(),
                    budgets: c.budgets.clone(),
                    total: c.total,
                    proof_grid: c.proof_grid,
                    once: c.once,
                    per_input: c.per_input,
                    b2_implied: c.b2_implied,
                };
                fresh.points() != c.points()
            })
            .count();
        assert!(stale > 0);
    }
}
