//! `spmd-check check`: a rule's verdict or its minimal counterexample
//! (SPEC.md §11.2-11.4): saved counterexamples replayed first, then the
//! exhaustive scope, then random cases beyond it (proptest, shrinking).

use crate::rules::Rule;
use crate::run::{check_forward, check_op, UsageError};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use serde::{Deserialize, Serialize};
use spmd_generators::arb_q;
use spmd_oracle::{Checker, Outcome, Tally, Verdict, Violation};
use spmd_semantics::perrank::{from_free, num_free};
use spmd_semantics::{Mesh, PerRank, Shape, Tensor, Q};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// How a rule is checked.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    pub scope: spmd_generators::Scope,
    /// Random cases beyond the exhaustive scope (0: none).
    pub cases: u32,
    pub seed: u64,
}

/// The outcome for one rule.
pub struct RuleReport {
    pub name: String,
    pub verdict: Verdict,
    /// Random cases that actually ran after the exhaustive part (the
    /// generator may reject some of those asked for) ...
    pub random_cases: u64,
    /// ... of those asked for (`--cases`).
    pub random_requested: u32,
    /// Why the random part ran fewer cases than asked, if it did.
    pub random_note: Option<String>,
    /// Whether the counterexample came from the regression file.
    pub replayed: bool,
    /// Whether B1-B3 were checked: false when no backward was declared.
    pub backward_checked: bool,
    /// Inputs whose gradient was not checked (`no_grad`), by name.
    pub no_grad: Vec<String>,
    /// The rule's dialect, whose names the report uses.
    pub dialect: spmd_semantics::Dialect,
}

/// A counterexample stored by value (SPEC.md §11.3).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Stored {
    pub mesh: Vec<(String, usize)>,
    /// Per input: its shape and, per rank, its elements as rationals ("1/2").
    pub inputs: Vec<(Shape, Vec<Vec<String>>)>,
    pub property: String,
}

impl Stored {
    pub fn from_violation(v: &Violation) -> Stored {
        Stored {
            mesh: v
                .mesh
                .axes
                .iter()
                .map(|a| (a.name.clone(), a.size))
                .collect(),
            inputs: v
                .inputs()
                .iter()
                .filter(|s| !s.label.ends_with('\''))
                .map(|s| {
                    (
                        s.value.shape().to_vec(),
                        s.value
                            .tensors
                            .iter()
                            .map(|t| t.data.iter().map(|q| q.to_string()).collect())
                            .collect(),
                    )
                })
                .collect(),
            property: v.property.code().to_string(),
        }
    }
    pub fn mesh(&self) -> Mesh {
        Mesh::new(
            &self
                .mesh
                .iter()
                .map(|(a, n)| (a.as_str(), *n))
                .collect::<Vec<_>>(),
        )
    }
    pub fn values(&self) -> Option<Vec<PerRank>> {
        self.inputs
            .iter()
            .map(|(shape, ranks)| {
                let tensors = ranks
                    .iter()
                    .map(|vals| {
                        vals.iter()
                            .map(|v| Q::parse(v))
                            .collect::<Option<Vec<Q>>>()
                            .map(|d| Tensor::new(shape.clone(), d))
                    })
                    .collect::<Option<Vec<Tensor>>>()?;
                Some(PerRank { tensors })
            })
            .collect()
    }
    /// A content hash (FNV-1a) naming the counterexample.
    pub fn hash(&self, rule: &str) -> String {
        let text = format!("{rule}|{}", serde_json::to_string(self).expect("json"));
        let h = text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        format!("{h:016x}")
    }
}

/// The regression file beside a rule file: `rules.toml` → `rules.toml.regressions.json`.
pub fn regression_path(rule_file: &str) -> String {
    format!("{rule_file}.regressions.json")
}

pub type Regressions = BTreeMap<String, Vec<Stored>>;

pub fn load_regressions(path: &str) -> Regressions {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

pub fn save_regressions(path: &str, r: &Regressions) -> Result<(), UsageError> {
    let text = serde_json::to_string_pretty(r).expect("json");
    std::fs::write(path, text)
        .map_err(|e| UsageError(format!("{path}: cannot write regressions: {e}")))
}

/// Run the oracle on one stored instance; `Some` if it still fails.
pub fn replay(rule: &Rule, s: &Stored) -> Option<Box<Violation>> {
    let m = s.mesh();
    let xs = s.values()?;
    if xs.len() != rule.op.inputs.len() || rule.op.inputs.iter().any(|t| t.states.len() != m.ndim())
    {
        return None;
    }
    let shapes: Vec<Shape> = xs.iter().map(|x| x.shape().to_vec()).collect();
    let checker = Checker::new(&rule.op, &m, shapes).ok()?;
    match checker.check(&xs, rule.phase()) {
        Outcome::Fail(v) => Some(v),
        _ => None,
    }
}

/// A random instance: mesh sizes, input shapes, free scalars.
#[derive(Clone, Debug)]
struct Case {
    mesh: Mesh,
    shapes: Vec<Shape>,
    vals: Vec<Q>,
}

fn random_cases(rule: &Rule) -> impl Strategy<Value = Case> {
    let axes: Vec<String> = rule.meshes[0].axes.iter().map(|a| a.name.clone()).collect();
    let fixed = (rule.meshes.len() == 1).then(|| rule.meshes[0].clone());
    let op = rule.op.clone();
    let ndim = axes.len();
    let mesh_s = match fixed {
        Some(m) => Just(m).boxed(),
        None => prop::collection::vec(1usize..=4, ndim)
            .prop_filter("at most 8 ranks", |v| v.iter().product::<usize>() <= 8)
            .prop_map(move |sizes| {
                Mesh::new(
                    &axes
                        .iter()
                        .map(String::as_str)
                        .zip(sizes)
                        .collect::<Vec<_>>(),
                )
            })
            .boxed(),
    };
    let arity = op.inputs.len();
    (
        mesh_s,
        prop::collection::vec(prop::collection::vec(1usize..=4, 0..=2), arity),
    )
        .prop_filter("shapes fit the op", move |(m, shapes)| {
            op.op
                .infer(m, shapes)
                .is_ok_and(|(out, _)| op.layouts_fit(m, shapes, &out))
                && op
                    .inputs
                    .iter()
                    .zip(shapes)
                    .map(|(t, s)| num_free(m, t, s))
                    .sum::<usize>()
                    <= 64
        })
        .prop_flat_map({
            let op = rule.op.clone();
            move |(m, shapes)| {
                let k: usize = op
                    .inputs
                    .iter()
                    .zip(&shapes)
                    .map(|(t, s)| num_free(&m, t, s))
                    .sum();
                (Just(m), Just(shapes), prop::collection::vec(arb_q(), k))
            }
        })
        .prop_map(|(mesh, shapes, vals)| Case { mesh, shapes, vals })
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
struct RandomRun {
    violation: Option<Box<Violation>>,
    /// Cases that ran and passed, before any failure ...
    ran: u64,
    /// ... of which on more than one rank.
    distributed: u64,
    /// Why fewer cases ran than were asked for.
    note: Option<String>,
}

/// Random cases with proptest; a failure is shrunk (smaller meshes, shapes,
/// values toward 0) and returned.
fn random_part(rule: &Rule, cfg: &CheckConfig) -> RandomRun {
    let mut out = RandomRun {
        violation: None,
        ran: 0,
        distributed: 0,
        note: None,
    };
    if cfg.cases == 0 {
        return out;
    }
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&cfg.seed.to_le_bytes());
    let config = Config {
        cases: cfg.cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        max_global_rejects: cfg.cases.saturating_mul(16).max(1024),
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let phase = rule.phase();
    let last: RefCell<Option<Box<Violation>>> = RefCell::new(None);
    // Counted until the first failure; shrinking re-runs cases.
    let counts = std::cell::Cell::new((0u64, 0u64));
    let failed = std::cell::Cell::new(false);
    let stopped: RefCell<Option<String>> = RefCell::new(None);
    let result = runner.run(&random_cases(rule), |c| {
        if let Some(why) = crate::run::stop_reason() {
            *stopped.borrow_mut() = Some(why);
            return Ok(());
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
        Err(TestError::Abort(why)) => {
            out.note = Some(format!(
                "random part stopped after {} cases: {why}",
                out.ran
            ));
        }
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

/// Check one rule: replayed counterexamples, the exhaustive scope, then
/// random cases.
pub fn check_rule(
    rule: &Rule,
    cfg: &CheckConfig,
    stored: &[Stored],
    progress: &dyn Fn(u64),
) -> RuleReport {
    let mut report = RuleReport {
        name: rule.name.clone(),
        verdict: Verdict::conclude(Tally::new(), None),
        random_cases: 0,
        random_requested: cfg.cases,
        random_note: None,
        replayed: false,
        backward_checked: rule.has_backward,
        no_grad: rule
            .op
            .no_grad
            .iter()
            .map(|&i| rule.op.input_name(i))
            .collect(),
        dialect: rule.dialect,
    };
    for s in stored {
        if let Some(v) = replay(rule, s) {
            report.verdict = Verdict::conclude(Tally::new(), Some(v));
            report.replayed = true;
            return report;
        }
    }
    let verdict = if rule.has_backward {
        check_op(&rule.op, &cfg.scope, &rule.meshes, progress)
    } else {
        check_forward(&rule.op, &cfg.scope, &rule.meshes)
    };
    // A vacuous exhaustive part (say, every multi-rank case beyond the caps)
    // still gets the random cases: they may find a counterexample, or
    // decide the rule on more than one rank.
    if !verdict.is_sound() && !matches!(verdict, Verdict::Vacuous { .. }) {
        report.verdict = verdict;
        return report;
    }
    let r = random_part(rule, cfg);
    let mut tally = verdict.tally().clone();
    tally.random += r.ran;
    tally.random_distributed += r.distributed;
    report.random_cases = r.ran;
    report.random_note = r.note;
    report.verdict = Verdict::conclude(tally, r.violation);
    report
}

/// A counterexample as a paste-ready Rust test, named by its content hash
/// (SPEC.md §11.4). The readable per-rank values stand in a comment above the
/// stored ones.
pub fn emit_rstest(rule_toml: &str, rule: &str, v: &Violation) -> String {
    let s = Stored::from_violation(v);
    let h = s.hash(rule);
    let json = serde_json::to_string(&s).expect("json");
    // Whatever the rule's name holds (quotes, `"#`, newlines), it stays
    // inside one comment line and inside escaped string literals.
    let mut out = format!(
        "// {}: {}\n",
        rule.escape_debug(),
        v.one_line().escape_debug()
    );
    for line in v.report().lines() {
        out.push_str(&format!("// {}\n", line.escape_debug()));
    }
    out.push_str(&format!(
        "#[test]\nfn cx_{h}() {{\n    spmd_check::check::assert_counterexample(\n        {:?},\n        {:?},\n    );\n}}\n",
        rule_toml.trim(),
        json
    ));
    out
}

/// For `--emit rstest` tests: the rule (one `[[rule]]` in TOML) still fails on
/// the stored instance, with the stored property.
#[track_caller]
pub fn assert_counterexample(rule_toml: &str, stored_json: &str) {
    let scope = spmd_generators::Scope::default();
    let specs = crate::rules::parse_file("<test>", rule_toml).unwrap_or_else(|e| panic!("{e}"));
    let rules =
        crate::rules::build("<test>", rule_toml, &specs, &scope).unwrap_or_else(|e| panic!("{e}"));
    let s: Stored = serde_json::from_str(stored_json).expect("stored counterexample");
    match replay(&rules[0], &s) {
        Some(v) => assert_eq!(v.property.code(), s.property, "{}", v.report()),
        None => panic!(
            "rule `{}` no longer fails on the stored instance",
            rules[0].name
        ),
    }
}

/// For rule designers in `cargo test`: fail with the full report unless the
/// rule is sound in the default scope (and 256 random cases). The panic
/// names the caller's line and says why a rule that is not unsound still
/// fails (vacuous: which caps; undetermined: why).
#[track_caller]
pub fn assert_rule_sound(rule: &Rule) {
    assert_report(rule, &check_rule(rule, &library_config(), &[], &|_| {}));
}

/// What the library assertions check: the default scope, 256 random cases.
fn library_config() -> CheckConfig {
    CheckConfig {
        scope: spmd_generators::Scope::default(),
        cases: 256,
        seed: 0,
    }
}

#[track_caller]
fn assert_report(rule: &Rule, r: &RuleReport) {
    if let Some(v) = r.verdict.violation() {
        panic!(
            "rule `{}` is {}:\n{}",
            rule.name,
            crate::report::rule_word(r),
            v.report_in(rule.dialect)
        );
    }
    assert!(
        r.verdict.is_sound(),
        "rule `{}` is {}",
        rule.name,
        crate::report::rule_word(r)
    );
}

/// Every rule of a rule file must be sound. As `spmd-check check` does,
/// the counterexamples saved beside the file are replayed first and a new
/// one is saved there (`FILE.regressions.json`) before the panic.
#[track_caller]
pub fn assert_rules_sound(path: &str) {
    let rules = crate::rules::load(path, &spmd_generators::Scope::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let rpath = regression_path(path);
    let mut regs = load_regressions(&rpath);
    for r in &rules {
        let stored = regs.get(&r.name).cloned().unwrap_or_default();
        let rep = check_rule(r, &library_config(), &stored, &|_| {});
        if let Some(v) = rep.verdict.violation() {
            let s = Stored::from_violation(v);
            let list = regs.entry(r.name.clone()).or_default();
            if !list.contains(&s) {
                list.push(s);
                let _ = save_regressions(&rpath, &regs);
            }
        }
        assert_report(r, &rep);
    }
}
