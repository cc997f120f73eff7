//! The random part of `spmd-check check` (SPEC.md §11.2): cases beyond
//! the exhaustive scope drawn by proptest from the rule's domain (meshes
//! and shapes the op accepts, then free scalars), a failure shrunk to a
//! minimal one, and the part's notes when fewer cases ran than were asked
//! for. The proptest runner, stop marker and abort note are shared with
//! the random part of pending-kind rules in `check`.

use super::CheckConfig;
use crate::rules::Rule;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use spmd_oracle::{Checker, Outcome, Violation};
use spmd_semantics::perrank::{from_free, num_free};
use spmd_semantics::{Mesh, PerRank, Shape, Q};
use std::cell::RefCell;

/// A random instance: mesh sizes, input shapes, free scalars.
#[derive(Clone, Debug)]
struct Case {
    mesh: Mesh,
    shapes: Vec<Shape>,
    vals: Vec<Q>,
}

/// The random part's shapes: rank 0 to 3 (one beyond the default scope),
/// dims 1 to 4, at most 64 free scalars per case (SPEC.md §11.2).
const RANDOM_RANK: usize = 3;
pub(super) const RANDOM_DIM: usize = 4;
pub(super) const RANDOM_FREE: usize = 64;

/// Random cases drawn from the rule's domain (`Domain`): a mesh and shapes
/// the op accepts, by construction, then free scalars. An op whose search
/// at rank 3 passes the shape-tuple limit is drawn at rank 2; `Err` says
/// why no case can be drawn.
fn random_cases(rule: &Rule) -> Result<BoxedStrategy<Case>, String> {
    let meshes = match &rule.meshes[..] {
        [m] => vec![m.clone()],
        _ => {
            let axes: Vec<&str> = rule.meshes[0]
                .axes
                .iter()
                .map(|a| a.name.as_str())
                .collect();
            spmd_generators::small_meshes(&axes, 4, 8)
        }
    };
    let build = |rank| {
        spmd_generators::Domain::build(
            &rule.op,
            &meshes,
            rank,
            RANDOM_DIM,
            RANDOM_FREE,
            spmd_generators::MAX_SHAPE_TUPLES,
        )
    };
    let domain = build(RANDOM_RANK).or_else(|| build(2)).ok_or_else(|| {
        format!(
            "its inputs make more than {} shape tuples to search per mesh",
            spmd_generators::MAX_SHAPE_TUPLES
        )
    })?;
    if domain.is_empty() {
        return Err(format!(
            "no mesh of at most 8 ranks and no shapes of rank at most {RANDOM_RANK} with dims up to {RANDOM_DIM} fit the rule"
        ));
    }
    let op = rule.op.clone();
    Ok(domain
        .with_values(move |m, shapes| {
            op.inputs
                .iter()
                .zip(shapes)
                .map(|(t, s)| num_free(m, t, s))
                .sum()
        })
        .prop_map(|(mesh, shapes, vals)| Case { mesh, shapes, vals })
        .boxed())
}

fn inputs_of(rule: &Rule, c: &Case) -> Vec<PerRank> {
    let mut at = 0;
    rule.op
        .inputs
        .iter()
        .zip(&c.shapes)
        .map(|(t, s)| {
            let k = num_free(&c.mesh, t, s);
            let x = from_free(&c.mesh, t, s, &c.vals[at..at + k]);
            at += k;
            x
        })
        .collect()
}

/// What the random part did.
pub(super) struct RandomRun {
    pub(super) violation: Option<Box<Violation>>,
    /// Cases that ran and passed, before any failure ...
    pub(super) ran: u64,
    /// ... of which on more than one rank.
    pub(super) distributed: u64,
    /// Why fewer cases ran than were asked for.
    pub(super) note: Option<String>,
}

/// The random part's proptest runner: `cfg.cases` cases from `cfg.seed`
/// (ChaCha), shrinking up to 4096 steps, nothing persisted.
/// The failure a random part reports to proptest to stop (Ctrl-C, time limit).
pub(super) const STOPPED: &str = "stopped";

pub(super) fn random_runner(cfg: &CheckConfig) -> TestRunner {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&cfg.seed.to_le_bytes());
    let config = Config {
        cases: cfg.cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        max_global_rejects: cfg.cases.saturating_mul(16).max(1024),
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

/// Random cases with proptest; a failure is shrunk (smaller meshes, shapes,
/// values toward 0) and returned.
pub(super) fn random_part(rule: &Rule, cfg: &CheckConfig) -> RandomRun {
    let mut out = RandomRun {
        violation: None,
        ran: 0,
        distributed: 0,
        note: None,
    };
    if cfg.cases == 0 {
        return out;
    }
    let mut runner = random_runner(cfg);
    let phase = rule.phase();
    let last: RefCell<Option<Box<Violation>>> = RefCell::new(None);
    // Counted until the first failure; shrinking re-runs cases.
    let counts = std::cell::Cell::new((0u64, 0u64));
    let failed = std::cell::Cell::new(false);
    let stopped: RefCell<Option<String>> = RefCell::new(None);
    let strategy = match random_cases(rule) {
        Ok(s) => s,
        Err(why) => {
            out.note = Some(format!("random part ran no case: {why}"));
            return out;
        }
    };
    let result = runner.run(&strategy, |c| {
        if let Some(why) = crate::run::stop_reason() {
            // A failure ends the run at once; passing would still have
            // proptest generate every remaining case. Below, a stop that
            // found no real failure is not taken for one.
            *stopped.borrow_mut() = Some(why);
            return Err(TestCaseError::fail(STOPPED));
        }
        let xs = inputs_of(rule, &c);
        let checker =
            Checker::new(&rule.op, &c.mesh, c.shapes.clone()).map_err(TestCaseError::reject)?;
        match checker.check(&xs, phase) {
            Outcome::Fail(v) => {
                failed.set(true);
                let msg = v.one_line();
                *last.borrow_mut() = Some(v);
                Err(TestCaseError::fail(msg))
            }
            Outcome::OutsideDomain => Err(TestCaseError::reject("outside the domain")),
            _ => {
                if !failed.get() {
                    let (n, d) = counts.get();
                    counts.set((n + 1, d + u64::from(c.mesh.num_ranks() > 1)));
                }
                Ok(())
            }
        }
    });
    (out.ran, out.distributed) = counts.get();
    if let Some(why) = stopped.into_inner() {
        out.note = Some(format!("random part {why}"));
    }
    match result {
        Err(TestError::Fail(..)) if !failed.get() => {}
        Err(TestError::Fail(_, minimal)) => {
            // Re-run the shrunk case to get its violation.
            let xs = inputs_of(rule, &minimal);
            out.violation = Checker::new(&rule.op, &minimal.mesh, minimal.shapes.clone())
                .ok()
                .and_then(|checker| match checker.check(&xs, phase) {
                    Outcome::Fail(v) => Some(v),
                    _ => None,
                })
                .or_else(|| last.into_inner());
        }
        Err(TestError::Abort(why)) => out.note = Some(random_abort(out.ran, &why)),
        Ok(()) => {}
    }
    if out.note.is_none() && out.violation.is_none() && out.ran < u64::from(cfg.cases) {
        out.note = Some(format!(
            "{} of {} random cases ran; the rest were outside the op's domain",
            out.ran, cfg.cases
        ));
    }
    out
}

/// Why the random part stopped early, in this tool's words: proptest aborts
/// a run when too many generated cases are rejected ("Too many global
/// rejects"), which here means their values were outside the op's domain
/// (meshes and shapes are built to fit, never rejected: §11.2).
pub(super) fn random_abort(ran: u64, why: &proptest::test_runner::Reason) -> String {
    let what = if why.message().contains("reject") {
        "too many of the generated cases were outside the op's domain".to_string()
    } else {
        why.message().to_string()
    };
    format!("random part stopped after {ran} cases: {what}")
}
