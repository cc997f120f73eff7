//! Checking over the scope: the cases come from the generators' case driver
//! (SPEC.md §8), the oracle decides each instance, and the tally becomes a
//! verdict (SPEC.md §7).

use spmd_generators::{cases, for_each_grid_point, Scope};
pub use spmd_generators::{enumerated_cases, estimate, meshes_for, MAX_DEGREE, MAX_SHAPE_TUPLES};
use spmd_interp::TypedOp;
use spmd_oracle::{Checker, Outcome, Phase, Property, Tally, Verdict};
use spmd_semantics::{Mesh, Q};
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

/// Refuse an op whose degree bound exceeds `MAX_DEGREE` (SPEC.md §5.2), or
/// whose inputs make too many shape tuples (§8.1).
pub fn degree_guard(op: &TypedOp, scope: &Scope) -> Result<(), UsageError> {
    spmd_generators::degree_guard(op, scope).map_err(UsageError)
}

/// Refuse, before any enumeration, an op with too many shape tuples.
pub fn tuple_guard(op: &TypedOp, scope: &Scope) -> Result<(), UsageError> {
    spmd_generators::tuple_guard(op, scope).map_err(UsageError)
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
    let (cs, cover) = cases(op, scope, meshes);
    tally.cases_beyond_cap = cover.beyond_cap;
    tally.distributed_beyond_cap = cover.distributed_beyond_cap;
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
            let o = checker.check(&c.inputs(op, point), phase);
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

/// Only the forward properties F1-F3 (SPEC.md §4.2-4.4), for an op that has
/// no declared backward.
pub fn check_forward(op: &TypedOp, scope: &Scope, meshes: &[Mesh]) -> Verdict {
    run_cases(op, scope, meshes, false, &|_| {})
}
