//! Checking over the scope: the cases come from the generators' case driver
//! (SPEC.md §8), the oracle decides each instance, and the tally becomes a
//! verdict (SPEC.md §7).

use spmd_generators::switch::Switch;
use spmd_generators::{cases, Scope};
pub use spmd_generators::{enumerated_cases, estimate, meshes_for, MAX_DEGREE, MAX_SHAPE_TUPLES};
use spmd_interp::TypedOp;
use spmd_oracle::exact_deriv::{case_identity, Identity};
use spmd_oracle::{Checker, Outcome, Phase, Property, Tally, Verdict};
use spmd_semantics::{Mesh, PerRank, Q};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Set by Ctrl-C: running enumerations stop at their next point.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The deadline in nanoseconds after `epoch()`; `NO_DEADLINE` when none.
/// An atomic rather than a `OnceLock<Instant>`: the Python front sets a
/// deadline per call (`time_limit=`) and clears it after, and every
/// enumeration point reads it.
static DEADLINE_NS: AtomicU64 = AtomicU64::new(NO_DEADLINE);
const NO_DEADLINE: u64 = u64::MAX;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Stop every enumeration at this instant (`--time-limit`, `time_limit=`).
pub fn set_deadline(at: Instant) {
    let ns = at.saturating_duration_since(epoch()).as_nanos();
    let ns = u64::try_from(ns)
        .unwrap_or(NO_DEADLINE - 1)
        .min(NO_DEADLINE - 1);
    DEADLINE_NS.store(ns, Ordering::SeqCst);
}

/// No deadline from now on (a later run without a time limit).
pub fn clear_deadline() {
    DEADLINE_NS.store(NO_DEADLINE, Ordering::SeqCst);
}

/// Why a run must stop now, if it must: Ctrl-C, or the time limit passed.
pub fn stop_reason() -> Option<String> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        return Some("interrupted".into());
    }
    let d = DEADLINE_NS.load(Ordering::Relaxed);
    if d != NO_DEADLINE && epoch().elapsed().as_nanos() >= u128::from(d) {
        return Some("time limit reached".into());
    }
    None
}

pub use spmd_syntax::UsageError;

/// The most scalars (elements of every input on every rank) one instance
/// given by value may have for the oracle to check it: a job's `--check`,
/// a stored counterexample. The check's memory grows with the square of
/// this (2 ranks of 1024 elements took 0.5 GB, of 4096 elements 10 GB).
pub const MAX_CHECK_SCALARS: usize = 2048;

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
    run_cases(op, scope, meshes, true, progress, None)
}

/// `check_op` on cases already found for `meshes` (by
/// `spmd_generators::typings_cases_until`), so they are not found again.
pub fn check_op_in(
    op: &TypedOp,
    scope: &Scope,
    meshes: &[Mesh],
    found: (Vec<spmd_generators::Case>, spmd_generators::Coverage),
    progress: &dyn Fn(u64),
) -> Verdict {
    run_cases(op, scope, meshes, true, progress, Some(found))
}

/// The checker of case `c`, with its lane groups.
fn checker_of<'a>(op: &'a TypedOp, c: &'a spmd_generators::Case) -> Checker<'a> {
    let checker = Checker::new(op, &c.mesh, c.shapes.clone()).expect("shape tuples fit");
    match &c.lanes {
        Some(l) => checker.with_lanes(l.inputs.clone(), l.out.clone(), l.cores()),
        None => checker,
    }
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
    found: Option<(Vec<spmd_generators::Case>, spmd_generators::Coverage)>,
) -> Verdict {
    let mut tally = Tally::new();
    let (cs, cover) = found.unwrap_or_else(|| cases(op, scope, meshes));
    tally.cases_beyond_cap = cover.beyond_cap;
    tally.distributed_beyond_cap = cover.distributed_beyond_cap;
    for c in &cs {
        // What other checks imply is left out (SPEC.md §8.3, §4.7): B2's
        // primal half where B1 and B3 over the grid imply it, and B1 and B3
        // at unit cotangents that are multiples of another's denotation
        // plus one that denotes zero. A case that passes whole has shown
        // them; one that fails, or (for B2) leaves B3 undetermined, is
        // checked again in full, from the tally it started with, so its
        // first failure and counts are the full check's.
        let mode = Switch(&IMPLIED_MODE).get();
        let lighter = backward && !plain_points() && mode != ImpliedMode::Full;
        let checker = checker_of(op, c);
        let b2 = lighter && c.b2_implied;
        let gs = lighter && checker.reduces_cotangents();
        let before = (b2 || gs).then(|| tally.clone());
        let checker = if b2 { checker.implied_b2() } else { checker };
        let checker = if gs {
            checker.reduced_cotangents()
        } else {
            checker
        };
        let (mut n, mut r) = scan_case(op, c, &checker, backward, &mut tally);
        if let Some(t) = before {
            let unsure =
                b2 && (tally.b3_undetermined > t.b3_undetermined || tally.undecided > t.undecided);
            let again = mode == ImpliedMode::LeftOut && tally.stopped.is_none();
            if (r.is_some() || unsure) && again {
                tally = t;
                (n, r) = scan_case(op, c, &checker_of(op, c), backward, &mut tally);
            }
        }
        progress(n);
        if let Some(v) = r {
            return Verdict::conclude(tally, Some(v));
        }
        if tally.stopped.is_some() {
            return Verdict::conclude(tally, None);
        }
        tally.cases += 1;
        if c.mesh.num_ranks() > 1 {
            tally.distributed_cases += 1;
        }
        tally.proof_grid &= c.proof_grid;
    }
    let everywhere = decide_by_identity(op, &cover.symbolic, backward, &mut tally);
    // Every case an identity defined at every point: a proof (SPEC.md
    // §19.8), the grid's cases run again on symbolic values.
    if everywhere
        && tally.cases_beyond_cap == 0
        && !tally.proof_grid
        && spmd_oracle::exact_deriv::applies(op)
    {
        let within: Vec<(Mesh, Vec<spmd_semantics::Shape>)> = cs
            .iter()
            .map(|c| (c.mesh.clone(), c.shapes.clone()))
            .collect();
        let held = identities(op, &within, backward);
        if let Some(why) = stop_reason() {
            // Stopped before it finished, like any run (SPEC.md §7.1).
            tally.stopped.get_or_insert(why);
        } else if held.iter().all(|&i| i == Identity::Everywhere) {
            tally.proof_grid = true;
            tally.by_identity = true;
        }
    }
    Verdict::conclude(tally, None)
}

/// Each case run once on symbolic values (SPEC.md §19.8), in parallel;
/// a stop leaves the rest `No`.
fn identities(
    op: &TypedOp,
    cases: &[(Mesh, Vec<spmd_semantics::Shape>)],
    backward: bool,
) -> Vec<Identity> {
    use rayon::prelude::*;
    cases
        .par_iter()
        .map(|(m, shapes)| {
            if stop_reason().is_some() {
                return Identity::No;
            }
            case_identity(op, m, shapes, backward, &|| stop_reason().is_some())
        })
        .collect()
}

/// The cases over the caps of a transcendental op that hold whole as
/// identities (SPEC.md §19.8), moved from `cases_beyond_cap` to `cases`.
/// Only a run that found no violation gets here, and an identity only
/// passes, so the first violation and its case are the grid's alone.
/// Whether every one of them is an identity defined everywhere.
fn decide_by_identity(
    op: &TypedOp,
    over: &[(Mesh, Vec<spmd_semantics::Shape>)],
    backward: bool,
    tally: &mut Tally,
) -> bool {
    let held = identities(op, over, backward);
    if let Some(why) = stop_reason() {
        tally.stopped.get_or_insert(why);
        return false;
    }
    for ((m, _), _) in over.iter().zip(&held).filter(|(_, &h)| h != Identity::No) {
        tally.cases_beyond_cap -= 1;
        tally.cases += 1;
        tally.identity_cases += 1;
        if m.num_ranks() > 1 {
            tally.distributed_beyond_cap -= 1;
            tally.distributed_cases += 1;
        }
    }
    held.iter().all(|&h| h == Identity::Everywhere)
}

/// One case's grid, its points split across the rayon pool's threads
/// (SPEC.md §18). Every point is checked with every property; the result is
/// then read in the order of §7.2 as one thread would have found it: the
/// first forward violation wins, a backward violation is held while the
/// rest of the case is scanned for forward ones, and points after a held
/// violation count as checked for F1-F3 only. So the verdict, the
/// counterexample and the counts are the same for any number of threads.
/// Returns the points checked and the violation, if any; a stop (Ctrl-C,
/// time limit) is written into `tally`.
fn scan_case(
    op: &TypedOp,
    c: &spmd_generators::Case,
    checker: &Checker,
    backward: bool,
    tally: &mut Tally,
) -> (u64, Option<Box<spmd_oracle::Violation>>) {
    // Points are taken in blocks, so memory stays bounded on any grid; a
    // block's points lie end to end in one buffer.
    const BLOCK: usize = 4096;
    let mut scan = Scan { held: None, n: 0 };
    let width: usize = c.lists.iter().map(|(k, _)| k).sum();
    let mut block = Points {
        flat: Vec::with_capacity(BLOCK.min(c.points() as usize) * width),
        width,
        len: 0,
    };
    let mut found: Option<Box<spmd_oracle::Violation>> = None;
    let r = c.for_each_point(&mut |p| {
        block.push(p);
        if block.len < BLOCK {
            return ControlFlow::Continue(());
        }
        let r = scan.block(op, c, checker, backward, tally, &block);
        block.clear();
        match r {
            Some(v) => {
                found = v;
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        }
    });
    if r.is_continue() && block.len > 0 {
        if let Some(v) = scan.block(op, c, checker, backward, tally, &block) {
            found = v;
        }
    }
    (scan.n, found.or(scan.held))
}

/// A block of grid points of equal length, end to end in one buffer.
struct Points {
    flat: Vec<Q>,
    width: usize,
    len: usize,
}

impl Points {
    fn push(&mut self, p: &[Q]) {
        debug_assert_eq!(p.len(), self.width);
        self.flat.extend_from_slice(p);
        self.len += 1;
    }
    fn clear(&mut self) {
        self.flat.clear();
        self.len = 0;
    }
    fn get(&self, k: usize) -> &[Q] {
        &self.flat[k * self.width..(k + 1) * self.width]
    }
}

/// The state of reading a case's outcomes in order (see `scan_case`).
struct Scan {
    held: Option<Box<spmd_oracle::Violation>>,
    n: u64,
}

impl Scan {
    /// Check one block of points in parallel and read it in order.
    /// `Some(v)`: the case is over, with the forward violation `v`, or
    /// `None` when a stop was requested.
    #[allow(clippy::type_complexity)]
    fn block(
        &mut self,
        op: &TypedOp,
        c: &spmd_generators::Case,
        checker: &Checker,
        backward: bool,
        tally: &mut Tally,
        points: &Points,
    ) -> Option<Option<Box<spmd_oracle::Violation>>> {
        use rayon::prelude::*;
        use std::sync::atomic::AtomicUsize;
        let full = Phase::full(backward);
        // A case whose other properties do not depend on the values checks
        // them at its first point and F1, F3 at the rest (SPEC.md §8.3).
        let base = self.n;
        let plain = plain_points();
        let once = c.once && !plain;
        let per_input = c.per_input && !plain && full == Phase::All;
        // The inputs whose value indices use up their budget at a point
        // leave out their properties of one degree less (§8.3); with every
        // input so, that leaves F1 and F3 alone.
        // A point of a lane case has one nonzero group: the others' items
        // are as at the point 0 (SPEC.md §8.5).
        let lanes = c.lanes.as_ref().filter(|_| !plain && full == Phase::All);
        let phase_at = |k: usize, p: &[Q]| {
            if once && base + k as u64 > 0 {
                return Phase::Values;
            }
            // A point nonzero in cores alone checks everything.
            if let Some(g) = lanes.and_then(|l| l.lane_at(p)) {
                return Phase::Lane(g);
            }
            if !per_input {
                return full;
            }
            match c.saturated_inputs(p) {
                0 => full,
                m if m.count_ones() as usize == c.lists.len() => Phase::Values,
                m => Phase::AllBut(m),
            }
        };
        let reader = c.inputs_for(op);
        // The smallest index with a forward violation found so far: points
        // beyond it are never read, so they are not checked.
        let first_forward = AtomicUsize::new(usize::MAX);
        let stopped: OnceLock<String> = OnceLock::new();
        let one = |k: usize, p: &[Q]| -> Option<Outcome> {
            if k > first_forward.load(Ordering::Relaxed) || stopped.get().is_some() {
                return None;
            }
            if let Some(why) = stop_reason() {
                let _ = stopped.set(why);
                return None;
            }
            // The inputs go into buffers kept per thread; a thread already
            // inside a check (a stolen task) takes fresh ones.
            thread_local! {
                static XS: std::cell::RefCell<Vec<PerRank>> = const { std::cell::RefCell::new(Vec::new()) };
            }
            let o = XS.with(|b| match b.try_borrow_mut() {
                Ok(mut xs) => {
                    reader.inputs_into(p, &mut xs);
                    checker.check(&xs, phase_at(k, p))
                }
                Err(_) => checker.check(&c.inputs(op, p), phase_at(k, p)),
            });
            if matches!(&o, Outcome::Fail(v) if is_forward(v.property)) {
                first_forward.fetch_min(k, Ordering::Relaxed);
            }
            Some(o)
        };
        // A point costs at least ~10 µs, far above rayon's cost of a split,
        // so even two points are worth spreading (a program whose cases are
        // small otherwise ran on one core).
        let outcomes: Vec<Option<Outcome>> = if points.len < 2 {
            (0..points.len).map(|k| one(k, points.get(k))).collect()
        } else {
            (0..points.len)
                .into_par_iter()
                .map(|k| one(k, points.get(k)))
                .collect()
        };
        // Read in order, as one thread would have.
        for (k, o) in outcomes.into_iter().enumerate() {
            let Some(o) = o else {
                tally.stopped = Some(
                    stopped
                        .get()
                        .cloned()
                        .unwrap_or_else(|| "interrupted".into()),
                );
                return Some(None);
            };
            self.n += 1;
            // After a held backward violation a point is checked for F1-F3
            // only: a forward violation stands, the rest reads as a pass,
            // except that a point outside the domain is checked again
            // forward only (the division by zero may have been in the
            // backward).
            let o = match (self.held.is_some(), o) {
                (false, o) => o,
                (true, Outcome::Fail(v)) if is_forward(v.property) => Outcome::Fail(v),
                (true, Outcome::OutsideDomain) => {
                    checker.check(&c.inputs(op, points.get(k)), Phase::Forward)
                }
                (true, _) => Outcome::Pass(Default::default()),
            };
            tally.record(&o);
            match o {
                Outcome::Fail(v) if is_forward(v.property) => return Some(Some(v)),
                Outcome::Fail(v) if self.held.is_none() => self.held = Some(v),
                _ => {}
            }
        }
        None
    }
}

/// How a case checks what other checks imply (B2's primal half on a grid
/// that implies it, SPEC.md §8.3; B1 and B3 at unit cotangents implied by
/// others, §4.7): left out, and the case checked again in full where it
/// fails (the default); always checked; or left out with no second run,
/// which may report a later failure than the full check (a test's
/// negative twin). Hidden: a test switch.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImpliedMode {
    LeftOut,
    Full,
    LeftOutNoRerun,
}

thread_local! {
    static IMPLIED_MODE: std::cell::Cell<ImpliedMode> = const { std::cell::Cell::new(ImpliedMode::LeftOut) };
}

/// Run `f` with what is implied checked as `mode` says, for the checks `f` starts on
/// this thread.
#[doc(hidden)]
pub fn with_implied_mode<T>(mode: ImpliedMode, f: impl FnOnce() -> T) -> T {
    Switch(&IMPLIED_MODE).with(mode, f)
}

thread_local! {
    static PLAIN_POINTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether every point of every case is checked with every property, even
/// where §8.3 decides the value-free ones at the first point: for tests
/// that compare the two (`with_plain_points`).
fn plain_points() -> bool {
    Switch(&PLAIN_POINTS).get()
}

/// Run `f` with every point checked in full, for the checks `f` starts on
/// this thread (each case reads the flag here before it spreads its
/// points). Hidden: a test switch, like `Checker::plain`.
#[doc(hidden)]
pub fn with_plain_points<T>(f: impl FnOnce() -> T) -> T {
    Switch(&PLAIN_POINTS).with(true, f)
}

/// Only the forward properties F1-F3 (SPEC.md §4.2-4.4), for an op that has
/// no declared backward.
pub fn check_forward(op: &TypedOp, scope: &Scope, meshes: &[Mesh]) -> Verdict {
    run_cases(op, scope, meshes, false, &|_| {}, None)
}
