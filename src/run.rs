//! The exhaustive driver: enumerate the scope, ask the oracle, conclude a
//! verdict (SPEC.md §7, §8).

use spmd_generators::{for_each_grid_point, grid_size, shape_tuples, Scope};
use spmd_interp::TypedOp;
use spmd_oracle::{Checker, Outcome, Phase, Property, Tally, Verdict};
use spmd_semantics::perrank::{from_free, num_free};
use spmd_semantics::{Mesh, PerRank, Shape, Q};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Set by Ctrl-C: running enumerations stop at their next point.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static DEADLINE: OnceLock<Instant> = OnceLock::new();

/// Stop every enumeration at this instant (`--time-limit`).
pub fn set_deadline(at: Instant) {
    let _ = DEADLINE.set(at);
}

/// Why a run must stop now, if it must: Ctrl-C, or the time limit passed.
pub fn stop_reason() -> Option<String> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        return Some("interrupted".into());
    }
    match DEADLINE.get() {
        Some(d) if Instant::now() >= *d => Some("time limit reached".into()),
        _ => None,
    }
}

/// A user error in what was asked (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One mesh × shape case of a run and its grid.
struct Case {
    mesh: Mesh,
    shapes: Vec<Shape>,
    /// Per input: free-scalar count and its value list.
    lists: Vec<(usize, Vec<Q>)>,
    proof_grid: bool,
}

impl Case {
    fn points(&self) -> u64 {
        let flat: Vec<&[Q]> = self
            .lists
            .iter()
            .flat_map(|(k, v)| std::iter::repeat_n(v.as_slice(), *k))
            .collect();
        grid_size(&flat)
    }
}

/// The cases of a typed op in a scope: meshes with as many axes as the types,
/// every fitting shape tuple, those over the free-scalar cap set aside.
fn cases(op: &TypedOp, scope: &Scope, meshes: &[Mesh], tally: &mut Tally) -> Vec<Case> {
    let mut out = Vec::new();
    // Cases over the points cap on more than one rank, fewest points kept.
    let mut spill: Option<Case> = None;
    for m in meshes {
        for shapes in shape_tuples(&op.op, m, scope) {
            let (out_shape, deg) = op.op.infer(m, &shapes).expect("shape tuples fit");
            if !op.layouts_fit(m, &shapes, &out_shape) {
                continue; // a layout names a dim these shapes lack (SPEC.md §13.1)
            }
            let frees: Vec<usize> = op
                .inputs
                .iter()
                .zip(&shapes)
                .map(|(t, s)| num_free(m, t, s))
                .collect();
            if frees.iter().any(|&k| k > scope.max_free) {
                tally.cases_beyond_cap += 1;
                tally.distributed_beyond_cap += u64::from(m.num_ranks() > 1);
                continue;
            }
            let poly =
                deg.is_polynomial() && deg.num.iter().all(|&d| (d as usize) < scope.values.len());
            let lists = frees
                .iter()
                .zip(&deg.num)
                .map(|(&k, &d)| (k, scope.grid_values(poly, d)))
                .collect();
            let case = Case {
                mesh: m.clone(),
                shapes,
                lists,
                proof_grid: poly,
            };
            if case.points() > scope.max_points {
                tally.cases_beyond_cap += 1;
                tally.distributed_beyond_cap += u64::from(m.num_ranks() > 1);
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
            tally.cases_beyond_cap -= 1;
            tally.distributed_beyond_cap -= 1;
            out.push(c);
        }
    }
    out
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
    let mut t = Tally::new();
    cases(op, scope, &meshes_for(op, scope), &mut t)
        .iter()
        .map(Case::points)
        .fold(0u64, u64::saturating_add)
}

/// The largest degree bound, numerator plus denominator per input, that
/// exact finite differences accept (SPEC.md §5.2). Beyond it the sampled
/// rationals grow too large for a check to finish.
pub const MAX_DEGREE: u32 = 16;

/// Refuse an op whose degree bound exceeds `MAX_DEGREE` on the first shapes
/// in scope that fit it.
pub fn degree_guard(op: &TypedOp, scope: &Scope) -> Result<(), UsageError> {
    tuple_guard(op, scope)?;
    for m in meshes_for(op, scope) {
        if let Some(shapes) = shape_tuples(&op.op, &m, scope).into_iter().next() {
            let (_, d) = op.op.infer(&m, &shapes).map_err(UsageError)?;
            if let Some(i) = (0..d.num.len()).find(|&i| d.num[i] + d.den[i] > MAX_DEGREE) {
                return Err(UsageError(format!(
                    "`{}` has degree bound {} in input {i}; exact finite differences take at most {MAX_DEGREE}",
                    op.op.describe(),
                    d.num[i] + d.den[i]
                )));
            }
            return Ok(());
        }
    }
    Ok(())
}

/// The most input shape tuples enumerated per mesh.
pub const MAX_SHAPE_TUPLES: u64 = 400_000;

/// Refuse, before any enumeration, an op whose inputs have more shape tuples
/// per mesh than `MAX_SHAPE_TUPLES` (seven inputs over the default 13 shapes
/// would be 62 million; building them exhausted memory).
pub fn tuple_guard(op: &TypedOp, scope: &Scope) -> Result<(), UsageError> {
    let n = scope.max_shapes() as u64;
    let k = op.op.arity();
    let total = n.checked_pow(k as u32).unwrap_or(u64::MAX);
    if total > MAX_SHAPE_TUPLES {
        return Err(UsageError(format!(
            "scope too large: {k} inputs over {n} shapes make {total} shape tuples per mesh (limit {MAX_SHAPE_TUPLES}); lower --max-rank or --max-dim"
        )));
    }
    Ok(())
}

/// Refuse a run whose estimate exceeds the scope's limit.
pub fn guard(total: u64, scope: &Scope) -> Result<(), UsageError> {
    if total > scope.max_instances {
        return Err(UsageError(format!(
            "scope too large: about {total} instances (limit {}); raise it with --max-instances {total} or lower --max-free",
            scope.max_instances
        )));
    }
    Ok(())
}

/// Check a typed op over the whole scope; stop at the first violation,
/// minimal in the order of SPEC.md §7.2: smallest mesh, then shapes, then
/// the most basic property (all forward properties of a case are decided
/// before its backward ones), then fewest nonzeros, then values.
pub fn check_op(op: &TypedOp, scope: &Scope, meshes: &[Mesh], progress: &dyn Fn(u64)) -> Verdict {
    run_cases(op, scope, meshes, true, progress)
}

fn is_forward(p: Property) -> bool {
    matches!(p, Property::F1 | Property::F2 | Property::F3)
}

/// The enumeration behind `check_op` and `check_forward`. One pass per case:
/// the first backward violation is held while the rest of the case is
/// scanned for forward ones, which take precedence (SPEC.md §7.2).
fn run_cases(
    op: &TypedOp,
    scope: &Scope,
    meshes: &[Mesh],
    backward: bool,
    progress: &dyn Fn(u64),
) -> Verdict {
    let mut tally = Tally::new();
    let cs = cases(op, scope, meshes, &mut tally);
    for c in &cs {
        let checker = Checker::new(op, &c.mesh, c.shapes.clone()).expect("shape tuples fit");
        let flat: Vec<&[Q]> = c
            .lists
            .iter()
            .flat_map(|(k, v)| std::iter::repeat_n(v.as_slice(), *k))
            .collect();
        let mut held: Option<Box<spmd_oracle::Violation>> = None;
        let mut n = 0u64;
        let r = for_each_grid_point(&flat, &mut |point| {
            let phase = if held.is_none() {
                Phase::full(backward)
            } else {
                Phase::Forward
            };
            if n.is_multiple_of(64) {
                if let Some(why) = stop_reason() {
                    tally.stopped = Some(why);
                    return ControlFlow::Break(None);
                }
            }
            let o = checker.check(&split_inputs(op, c, point), phase);
            tally.record(&o);
            n += 1;
            if n.is_multiple_of(4096) {
                progress(4096);
            }
            match o {
                Outcome::Fail(v) if is_forward(v.property) => ControlFlow::Break(Some(v)),
                Outcome::Fail(v) => {
                    held = Some(v);
                    ControlFlow::Continue(())
                }
                _ => ControlFlow::Continue(()),
            }
        });
        progress(n % 4096);
        if let ControlFlow::Break(v) = r {
            // A held backward violation stands even when the run stopped.
            return Verdict::conclude(tally, v.or(held));
        }
        if let Some(v) = held {
            return Verdict::conclude(tally, Some(v));
        }
        tally.cases += 1;
        if c.mesh.num_ranks() > 1 {
            tally.distributed_cases += 1;
        }
        tally.proof_grid &= c.proof_grid;
    }
    Verdict::conclude(tally, None)
}

fn split_inputs(op: &TypedOp, c: &Case, point: &[Q]) -> Vec<PerRank> {
    let mut at = 0;
    op.inputs
        .iter()
        .zip(&c.shapes)
        .zip(&c.lists)
        .map(|((t, s), (k, _))| {
            let x = from_free(&c.mesh, t, s, &point[at..at + k]);
            at += k;
            x
        })
        .collect()
}

/// The enumerated cases of a typed op: mesh, input shapes, and the value list
/// of every free scalar (all inputs, in order).
pub fn enumerated_cases(
    op: &TypedOp,
    scope: &Scope,
    meshes: &[Mesh],
) -> Vec<(Mesh, Vec<Shape>, Vec<Vec<Q>>)> {
    let mut t = Tally::new();
    cases(op, scope, meshes, &mut t)
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

/// Only the forward properties F1-F3 (SPEC.md §4.2-4.4), for an op that has
/// no declared backward.
pub fn check_forward(op: &TypedOp, scope: &Scope, meshes: &[Mesh]) -> Verdict {
    run_cases(op, scope, meshes, false, &|_| {})
}
