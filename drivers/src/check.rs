//! `spmd-check check`: a rule's verdict or its minimal counterexample
//! (SPEC.md §11.2-11.4): saved counterexamples replayed first, then the
//! exhaustive scope, then random cases beyond it (proptest, shrinking).

mod random;

use crate::partial_kinds;
use crate::rules::{pending_fits, pending_free, pending_scope};
use crate::rules::{PendingRule, Rule};
use crate::run::{check_forward, check_op, UsageError};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestError};
use random::{random_abort, random_part, random_runner, RANDOM_DIM, RANDOM_FREE, STOPPED};
use serde::{Deserialize, Serialize};
use spmd_oracle::{Checker, Outcome, Tally, Verdict, Violation};
use spmd_semantics::pending::Place;
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
    /// For a rule with pending kinds (SPEC.md §21.7), what their check
    /// found; `verdict` then only summarises it for callers that do not
    /// read this.
    pub pending: Option<PendingReport>,
    /// For a rule on uneven shards (SPEC.md §23.10), what its check found;
    /// `verdict` then only summarises it.
    pub uneven: Option<crate::uneven::UnevenReport>,
    /// For a rule with a `vmap` (SPEC.md §24.4), what V1 found.
    pub batching: Option<crate::batching::TransformReport>,
    /// What the rule's system decided when it elaborated it (SPEC.md
    /// §15.5): inserted casts, inferred types, chosen backwards.
    pub elaboration: Vec<String>,
    /// The rule writes its mesh and every axis of it has one rank: nothing
    /// on more than one rank can run, whatever the flags.
    pub one_rank_mesh: bool,
}

impl RuleReport {
    /// The report of a rule checked outside the core (a `vmap`, uneven
    /// shards), with what it is in words.
    pub fn outside_core(&self) -> Option<(&dyn crate::pinned::Verdicted, &'static str)> {
        if let Some(b) = &self.batching {
            return Some((b, "batching"));
        }
        self.uneven
            .as_ref()
            .map(|u| (u as &dyn crate::pinned::Verdicted, "uneven shards"))
    }
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
    /// Whether the stored case is well formed (every file read is untrusted):
    /// named axes of positive sizes and a bounded rank count, every rank's
    /// values for every input, as many as its shape holds, each a rational.
    pub fn validate(&self) -> Result<(), String> {
        let mut ranks = 1usize;
        for (i, (name, size)) in self.mesh.iter().enumerate() {
            if name.is_empty() {
                return Err("a mesh axis with an empty name".into());
            }
            if self.mesh[..i].iter().any(|(n, _)| n == name) {
                return Err(format!("mesh axis \"{name}\" named twice"));
            }
            if *size == 0 {
                return Err(format!("mesh axis \"{name}\" of size 0"));
            }
            ranks = ranks
                .checked_mul(*size)
                .filter(|&n| n <= MAX_STORED_RANKS)
                .ok_or_else(|| format!("a mesh of more than {MAX_STORED_RANKS} ranks"))?;
        }
        let cap = crate::run::MAX_CHECK_SCALARS;
        let mut scalars = 0usize;
        for (i, (shape, per_rank)) in self.inputs.iter().enumerate() {
            let numel = shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .and_then(|n| n.checked_mul(ranks))
                .and_then(|n| n.checked_add(scalars))
                .filter(|&n| n <= cap)
                .map(|n| (n - scalars) / ranks)
                .ok_or_else(|| {
                    format!("input {i} has shape {shape:?}: more than {cap} elements on all ranks together")
                })?;
            scalars += numel * ranks;
            if per_rank.len() != ranks {
                return Err(format!(
                    "input {i} has values for {} ranks; the mesh has {ranks}",
                    per_rank.len()
                ));
            }
            for (r, vals) in per_rank.iter().enumerate() {
                if vals.len() != numel {
                    return Err(format!(
                        "input {i}, rank {r}: {} values for shape {shape:?} ({numel})",
                        vals.len()
                    ));
                }
                if let Some(v) = vals.iter().find(|v| Q::parse(v).is_none()) {
                    return Err(format!(
                        "input {i}, rank {r}: `{}` is not a rational",
                        crate::words::excerpt(v)
                    ));
                }
            }
        }
        Ok(())
    }
    /// The stored values per input; `None` unless the case is well formed.
    pub fn values(&self) -> Option<Vec<PerRank>> {
        self.validate().ok()?;
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

/// The most ranks a stored counterexample may name: those of a rule's mesh.
pub const MAX_STORED_RANKS: usize = crate::rules::MAX_RANKS;

/// Read a regression file. A file that does not exist holds none; one that
/// cannot be read, is not a regular file, is larger than a rule file may be,
/// is not JSON of the right form, or stores a case that is not well formed
/// is an error naming the file, so that it is never overwritten unread.
pub fn load_regressions(path: &str) -> Result<Regressions, UsageError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Regressions::new()),
        _ => {}
    }
    let text = crate::rules::read_text_limit(path, crate::rules::MAX_FILE_BYTES)?;
    let regs: Regressions = serde_json::from_str(&text).map_err(|e| {
        UsageError(format!(
            "{path}: not a regression file ({e}); move it away or repair it"
        ))
    })?;
    for (rule, cases) in &regs {
        for (k, s) in cases.iter().enumerate() {
            s.validate().map_err(|why| {
                UsageError(format!(
                    "{path}: rule \"{}\", stored case {}: {why}",
                    crate::words::quoted_name(rule),
                    k + 1
                ))
            })?;
        }
    }
    Ok(regs)
}

/// Write a regression file through a temporary file beside it, so that an
/// interrupted write leaves the old file whole.
pub fn save_regressions(path: &str, r: &Regressions) -> Result<(), UsageError> {
    let text = serde_json::to_string_pretty(r).expect("json");
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| UsageError(format!("{path}: cannot write regressions: {e}")))
}

/// Run the oracle on one stored instance; `Some` if it still fails.
pub fn replay(rule: &Rule, s: &Stored) -> Option<Box<Violation>> {
    if rule.pending.is_some() {
        return None;
    }
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

/// Check one rule: replayed counterexamples, the exhaustive scope, then
/// random cases.
pub fn check_rule(
    rule: &Rule,
    cfg: &CheckConfig,
    stored: &[Stored],
    progress: &dyn Fn(u64),
) -> RuleReport {
    if let Some(p) = &rule.pending {
        return check_pending(rule, p, cfg, stored);
    }
    if let Some(b) = &rule.batching {
        return check_batching(rule, b, cfg);
    }
    if let Some(u) = &rule.uneven {
        return check_uneven(rule, u, cfg);
    }
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
        pending: None,
        uneven: None,
        batching: None,
        elaboration: rule.elaboration.clone(),
        one_rank_mesh: one_rank_mesh(rule),
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
    if let Some(why) = not_sound(rule, r) {
        panic!("{why}");
    }
}

/// Why a rule's report is not sound, as the assertions say it: its
/// verdict in words and the counterexample; `None` when it is sound.
fn not_sound(rule: &Rule, r: &RuleReport) -> Option<String> {
    if let Some((o, _)) = r.outside_core() {
        return (o.failed() || o.inconclusive())
            .then(|| format!("rule `{}` is {}\n{}", rule.name, o.word(), o.report()));
    }
    if let Some(p) = &r.pending {
        return (!p.verdict.is_sound()).then(|| {
            format!(
                "rule `{}` is {}\n{}",
                rule.name,
                p.word(),
                p.report(rule.dialect)
            )
        });
    }
    if let Some(v) = r.verdict.violation() {
        return Some(format!(
            "rule `{}` is {}:\n{}",
            rule.name,
            rule_word(r),
            v.report_in(rule.dialect)
        ));
    }
    (!r.verdict.is_sound()).then(|| format!("rule `{}` is {}", rule.name, rule_word(r)))
}

/// Check one rule of the file `path` as `spmd-check check` does: its stored
/// counterexamples replayed first, and a new one saved.
fn check_saving(path: &str, r: &Rule) -> RuleReport {
    let rpath = regression_path(path);
    let mut regs = load_regressions(&rpath).unwrap_or_else(|e| panic!("{e}"));
    let stored = regs.get(&r.name).cloned().unwrap_or_default();
    let rep = check_rule(r, &library_config(), &stored, &|_| {});
    if let Some(s) = counterexample(&rep) {
        let list = regs.entry(r.name.clone()).or_default();
        if !list.contains(&s) {
            list.push(s);
            let _ = save_regressions(&rpath, &regs);
        }
    }
    rep
}

/// The counterexample a report found, as it is stored (a pending-kind rule's
/// from its own report, any other's from its violation).
fn counterexample(rep: &RuleReport) -> Option<Stored> {
    if rep.uneven.is_some() || rep.batching.is_some() {
        return None;
    }
    match &rep.pending {
        Some(p) => p.stored(),
        None => rep.verdict.violation().map(Stored::from_violation),
    }
}

/// The rule named `name` of the file `path`, read as `spmd-check check`
/// reads it; panics when the file does not read or has no such rule.
#[track_caller]
fn rule_in_file(path: &str, name: &str) -> Rule {
    crate::rules::load(path, &spmd_generators::Scope::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("{path} has no rule named {name:?}"))
}

/// Panics unless the rule named `name` of the file `path` is sound, with
/// its verdict in words and its report; what `rule_tests!` calls for each
/// rule (SPEC.md §11.4).
#[track_caller]
pub fn assert_rule_in_file_sound(path: &str, name: &str) {
    let r = rule_in_file(path, name);
    if let Some(why) = not_sound(&r, &check_saving(path, &r)) {
        panic!("{why}");
    }
}

/// Panics unless the checker finds the rule named `name` of the file `path`
/// unsound (a counterexample): for deliberately wrong twins
/// (`rule_tests!(PATH, unsound = [...])`). Vacuous or undetermined is not
/// unsound, and fails too.
#[track_caller]
pub fn assert_rule_in_file_unsound(path: &str, name: &str) {
    let r = rule_in_file(path, name);
    let rep = check_saving(path, &r);
    if counterexample(&rep).is_none() {
        panic!(
            "rule `{name}` of {path} is listed as unsound, but the checker says: {}",
            rule_word(&rep)
        );
    }
}

/// Every rule of a rule file must be sound. As `spmd-check check` does,
/// the counterexamples saved beside the file are replayed first and new
/// ones are saved there (`FILE.regressions.json`) before the panic, which
/// names every rule that is not sound, not only the first.
#[track_caller]
pub fn assert_rules_sound(path: &str) {
    let rules = crate::rules::load(path, &spmd_generators::Scope::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    for r in &rules {
        failures.extend(not_sound(r, &check_saving(path, r)));
    }
    if !failures.is_empty() {
        panic!(
            "{} of {} rules of {path} are not sound:\n\n{}",
            failures.len(),
            rules.len(),
            failures.join("\n\n")
        );
    }
}

// ---------------------------------------------------------------------------
// Rules with pending kinds (SPEC.md §21.7)

/// The report of a rule with pending kinds (SPEC.md §21.7).
#[derive(Clone, Debug)]
pub struct PendingReport {
    pub rule: PendingRule,
    /// The oracle's verdict (`pending::check_places` on the exhaustive
    /// scope, then the random cases, counted in its tally): defers is
    /// `Sound` and never a proof; a counterexample is the per-rank values.
    pub verdict: partial_kinds::Verdict,
    pub random_note: Option<String>,
    /// The counterexample came from the regression file ...
    pub replayed: bool,
    /// ... or from the random part.
    pub from_random: bool,
    /// The exhaustive scope, in words.
    pub scope: String,
    /// The rule's dialect, whose names the words use.
    pub dialect: spmd_semantics::Dialect,
}

/// A placement in a dialect's words.
pub fn place_in(d: spmd_semantics::Dialect, p: Place) -> String {
    use spmd_semantics::{Dialect, State};
    match (d, p) {
        (Dialect::Dtensor, Place::Part(k)) => format!("Partial({k})"),
        (Dialect::Dtensor, Place::Shard(i)) => format!("Shard({i})"),
        (Dialect::Jax, Place::Part(k)) => format!("Unreduced({k})"),
        (_, Place::Inv) => d.state_name(State::Invariant).unwrap_or("I").to_string(),
        _ => p.to_string(),
    }
}

impl PendingReport {
    pub fn failed(&self) -> bool {
        self.verdict.violation().is_some()
    }
    /// Vacuous or undetermined: `check` exits 3 unless --allow-vacuous.
    pub fn inconclusive(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::Vacuous { .. } | Verdict::Undetermined { .. }
        )
    }
    /// The counterexample and the property it violates, F1 or F3.
    pub fn refuted(&self) -> Option<(&'static str, &partial_kinds::Counterexample)> {
        self.verdict.violation().map(|c| (c.property(), c))
    }
    /// The verdict in words: what was checked, never "proof".
    pub fn word(&self) -> String {
        let c = self.verdict.tally();
        let mut w = match &self.verdict {
            Verdict::Sound { .. } => format!(
                "defers (bounded: {} instances exhaustive on {} cases, {} on more than one rank, and {} random; {} outside the domain; {} cases beyond the cap{}); backward not checked (pending kinds are checked forward only, SPEC.md §21.7)",
                self.verdict.decided(), c.cases, c.distributed_cases, c.random, c.outside_domain, c.cases_beyond_cap,
                match c.undecided {
                    0 => String::new(),
                    u => format!("; {u} undecided (overlapping enclosures or a value beyond the exact field), not counted as passes"),
                }
            ),
            Verdict::Unsound { violation: cex, .. } => format!(
                "unsound {} (the per-rank outputs under {} {}, SPEC.md §21.2)",
                cex.property(),
                place_in(self.dialect, self.rule.output),
                match (cex.property(), self.rule.forward) {
                    ("F1", _) => "are not well formed",
                    (_, Some(_)) => "do not denote the value the input denotes",
                    _ => "do not denote the op of the inputs' denotations",
                }
            ),
            Verdict::Vacuous { .. } => format!(
                "vacuous ({}; nothing on more than one rank was checked: {})",
                self.verdict.reason().unwrap_or_default(),
                if self.rule.ranks == Some(1) {
                    format!("the rule's mesh gives axis `{}` one rank", self.rule.axis)
                } else {
                    "raise --max-points".into()
                }
            ),
            Verdict::Undetermined { .. } => {
                format!("undetermined ({})", self.verdict.reason().unwrap_or_default())
            }
        };
        if let Some(cex) = self.verdict.violation() {
            if let Some(fv) = &cex.field {
                w.push_str(&format!(" (decided {})", fv.decided));
            }
        }
        if let Some(n) = &self.random_note {
            w.push_str(&format!(" [{n}]"));
        }
        if self.replayed {
            w.push_str(" (replayed from the regression file)");
        } else if self.from_random {
            w.push_str(" (found by a random case, shrunk)");
        }
        w
    }
    /// The counterexample, one line per value, in the rule's dialect.
    pub fn report(&self, d: spmd_semantics::Dialect) -> String {
        let Some((property, cex)) = self.refuted() else {
            return String::new();
        };
        let r = &self.rule;
        let ranks = |ts: &[Tensor]| {
            ts.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let mut s = format!(
            "violates {property} (SPEC.md §21.2) on {} ranks of axis `{}`\n",
            cex.n, r.axis
        );
        for (i, x) in cex.inputs.iter().enumerate() {
            let den = spmd_semantics::pending::denote(r.inputs[i], x)
                .map_or("nothing".into(), |t| t.to_string());
            s.push_str(&format!(
                "  {} : {}   per rank {}   denotes {den}\n",
                r.f.vars.get(i).map_or("?", String::as_str),
                place_in(d, r.inputs[i]),
                ranks(x)
            ));
        }
        if let Some(fv) = &cex.field {
            // A transcendental op: the values are in the exact field (§19).
            s.push_str(&format!(
                "  output : {}   per rank {}   denotes {}\n  expected ({}): {}\n  actual:   {}\n",
                place_in(d, r.output),
                fv.per_rank.join(" | "),
                fv.denoted.as_deref().unwrap_or("nothing (not well formed)"),
                match r.forward {
                    Some(_) => "the value the input denotes",
                    None => "the op on the inputs' denotations",
                },
                fv.expected,
                fv.denoted.as_deref().unwrap_or("no value"),
            ));
            return s;
        }
        s.push_str(&format!(
            "  output : {}   per rank {}   denotes {}\n  expected ({}): {}\n  actual:   {}\n",
            place_in(d, r.output),
            ranks(&cex.per_rank),
            cex.denoted
                .as_ref()
                .map_or("nothing (not well formed)".into(), |t| t.to_string()),
            match r.forward {
                Some(_) => "the value the input denotes",
                None => "the op on the inputs' denotations",
            },
            cex.expected,
            cex.denoted
                .as_ref()
                .map_or("no value".into(), |t| t.to_string()),
        ));
        s
    }
    /// The `--json` entry (without name and file).
    pub fn json(&self, d: spmd_semantics::Dialect) -> serde_json::Value {
        use serde_json::json;
        let c = self.verdict.tally();
        let r = &self.rule;
        let (verdict, reason) = (self.verdict.name(), self.verdict.reason());
        let (property, cex) = match self.refuted() {
            Some((property, cex)) => {
                let ts = |x: &[Tensor]| x.iter().map(|t| t.to_string()).collect::<Vec<_>>();
                (
                    Some(property),
                    json!({
                        "ranks": cex.n,
                        "axis": r.axis,
                        "inputs": cex.inputs.iter().enumerate().map(|(i, x)| json!({
                            "label": r.f.vars.get(i),
                            "type": place_in(d, r.inputs[i]),
                            "per_rank": ts(x),
                        })).collect::<Vec<_>>(),
                        "per_rank_outputs": match &cex.field {
                            Some(fv) => json!(fv.per_rank),
                            None => json!(ts(&cex.per_rank)),
                        },
                        "denoted": match &cex.field {
                            Some(fv) => json!(fv.denoted),
                            None => json!(cex.denoted.as_ref().map(|t| t.to_string())),
                        },
                        "expected": match &cex.field {
                            Some(fv) => fv.expected.clone(),
                            None => cex.expected.to_string(),
                        },
                        "decided": cex.field.as_ref().map(|fv| fv.decided),
                        "report": self.report(d),
                    }),
                )
            }
            _ => (None, serde_json::Value::Null),
        };
        json!({
            "verdict": verdict,
            "proof": false,
            "property": property,
            "counterexample": cex,
            "pending": {
                "verdict": self.verdict.key(),
                "axis": r.axis,
                "inputs": r.inputs.iter().map(|p| place_in(d, *p)).collect::<Vec<_>>(),
                "output": place_in(d, r.output),
                "scope": self.scope,
            },
            "instances": self.verdict.decided(),
            "cases": c.cases,
            "distributed_cases": c.distributed_cases,
            "cases_beyond_cap": c.cases_beyond_cap,
            "outside_domain": c.outside_domain,
            "undecided": c.undecided,
            "random_cases": c.random,
            "random_distributed": c.random_distributed,
            "random_note": self.random_note,
            "replayed": self.replayed,
            "backward_checked": false,
            "reason": reason,
            "summary": self.word(),
        })
    }
    /// The counterexample by value, for the regression file (SPEC.md §11.3).
    pub fn stored(&self) -> Option<Stored> {
        let (property, cex) = self.refuted()?;
        if cex.field.is_some() {
            // A transcendental counterexample is found again by the
            // exhaustive part; replay evaluates rationals only.
            return None;
        }
        Some(Stored {
            mesh: vec![(self.rule.axis.clone(), cex.n)],
            inputs: cex
                .inputs
                .iter()
                .map(|x| {
                    (
                        x[0].shape.clone(),
                        x.iter()
                            .map(|t| t.data.iter().map(|q| q.to_string()).collect())
                            .collect(),
                    )
                })
                .collect(),
            property: property.to_string(),
        })
    }
    /// The verdict as `RuleReport::verdict` holds it for callers that do
    /// not read `pending`: the same verdict and tally, its counterexample
    /// as a core `Violation` on the rule's axis (inputs and per-rank
    /// outputs typed by their placements; a transcendental op's outputs,
    /// which are not rationals, in `expected` and `actual` only).
    fn core_verdict(&self) -> Verdict {
        match &self.verdict {
            Verdict::Sound { proof, tally } => Verdict::Sound {
                proof: *proof,
                tally: tally.clone(),
            },
            Verdict::Vacuous { tally } => Verdict::Vacuous {
                tally: tally.clone(),
            },
            Verdict::Undetermined { tally } => Verdict::Undetermined {
                tally: tally.clone(),
            },
            Verdict::Unsound { violation, tally } => Verdict::Unsound {
                violation: Box::new(self.violation(violation)),
                tally: tally.clone(),
            },
        }
    }
    fn violation(&self, cex: &partial_kinds::Counterexample) -> spmd_oracle::check::Violation {
        use spmd_oracle::check::{Shown, Violation};
        use spmd_semantics::{PerRank, Property, Type};
        let r = &self.rule;
        let shown = |label: &str, input: bool, p: Place, ts: &[Tensor]| Shown {
            label: label.to_string(),
            input,
            alternative: false,
            ty: Type::of_place(p),
            value: PerRank {
                tensors: ts.to_vec(),
            },
        };
        let mut values: Vec<Shown> = cex
            .inputs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                shown(
                    r.f.vars.get(i).map_or("?", String::as_str),
                    true,
                    r.inputs[i],
                    x,
                )
            })
            .collect();
        let (expected, actual) = match &cex.field {
            Some(fv) => (fv.expected.clone(), fv.denoted.clone()),
            None => {
                values.push(shown("output", false, r.output, &cex.per_rank));
                (
                    cex.expected.to_string(),
                    cex.denoted.as_ref().map(|t| t.to_string()),
                )
            }
        };
        Violation {
            property: if cex.property() == "F1" {
                Property::F1
            } else {
                Property::F3
            },
            mesh: spmd_semantics::Mesh::new(&[(r.axis.as_str(), cex.n)]),
            what: self.word(),
            shown: values,
            expected,
            actual: actual.unwrap_or_else(|| "no value (not well formed)".into()),
        }
    }
}

/// One instance: the per-rank inputs `xs[i][rank]`. `Ok(None)`: the op
/// divides by zero (outside the domain), or the instance passes;
/// `Ok(Some(..))`: the failing property and the counterexample.
fn pending_instance(
    r: &PendingRule,
    xs: Vec<Vec<Tensor>>,
    n: usize,
) -> Result<Option<(&'static str, partial_kinds::Counterexample)>, String> {
    use spmd_interp::eval::{eval, Ctx, EvalError};
    let globals: Vec<Tensor> = r
        .inputs
        .iter()
        .zip(&xs)
        .map(|(&p, x)| spmd_semantics::pending::denote(p, x).ok_or("an input is not well formed"))
        .collect::<Result<_, _>>()?;
    let mut ctx = Ctx::default();
    let expected = match eval(&r.f.expr, &globals, &mut ctx) {
        Ok(t) => t,
        Err(EvalError::DivByZero) => return Ok(None),
        Err(EvalError::Shape(s)) => return Err(s),
    };
    let mut per_rank = Vec::with_capacity(n);
    if let Some(c) = r.forward {
        per_rank = c.forward(&xs[0]);
    } else {
        for k in 0..n {
            let local: Vec<&Tensor> = xs.iter().map(|x| &x[k]).collect();
            match eval(&r.f.expr, &local, &mut ctx) {
                Ok(t) => per_rank.push(t),
                Err(EvalError::DivByZero) => return Ok(None),
                Err(EvalError::Shape(s)) => return Err(s),
            }
        }
    }
    let denoted = spmd_semantics::pending::denote(r.output, &per_rank);
    if denoted.as_ref() == Some(&expected) {
        return Ok(None);
    }
    let property = if denoted.is_none() { "F1" } else { "F3" };
    Ok(Some((
        property,
        partial_kinds::Counterexample {
            n,
            inputs: xs,
            expected,
            per_rank,
            denoted,
            field: None,
        },
    )))
}

/// Replays a stored counterexample on a pending-kind rule; `Some` if it
/// still fails. A stored instance that does not fit the rule (another axis,
/// arity, shape, or an input its placement cannot hold) is passed over.
fn replay_pending(
    r: &PendingRule,
    s: &Stored,
) -> Option<(&'static str, partial_kinds::Counterexample)> {
    let [(axis, n)] = s.mesh.as_slice() else {
        return None;
    };
    if *axis != r.axis || *n == 0 || r.ranks.is_some_and(|k| k != *n) {
        return None;
    }
    let xs: Vec<Vec<Tensor>> = s.values()?.into_iter().map(|p| p.tensors).collect();
    if xs.len() != r.inputs.len() || xs.iter().any(|x| x.len() != *n) {
        return None;
    }
    if r.inputs
        .iter()
        .zip(&xs)
        .any(|(&p, x)| spmd_semantics::pending::denote(p, x).is_none())
    {
        return None;
    }
    let shapes: Vec<Shape> = xs.iter().map(|x| x[0].shape.clone()).collect();
    if !pending_fits(r, *n, &shapes) {
        return None;
    }
    pending_instance(r, xs, *n).ok().flatten()
}

/// A random instance of a pending-kind rule: ranks, local shapes, scalars.
#[derive(Clone, Debug)]
struct PendingCase {
    n: usize,
    shapes: Vec<Shape>,
    vals: Vec<Q>,
}

fn pending_inputs(r: &PendingRule, c: &PendingCase) -> Vec<Vec<Tensor>> {
    let mut at = 0;
    r.inputs
        .iter()
        .zip(&c.shapes)
        .map(|(&p, s)| {
            let numel: usize = s.iter().product();
            let k = pending_free(p, s, c.n);
            let vals = &c.vals[at..at + k];
            at += k;
            match p {
                Place::Inv => vec![Tensor::new(s.clone(), vals.to_vec()); c.n],
                _ => vals
                    .chunks(numel.max(1))
                    .take(c.n)
                    .map(|ch| Tensor::new(s.clone(), ch[..numel].to_vec()))
                    .collect(),
            }
        })
        .collect()
}

/// The random part (SPEC.md §8.4 for pending kinds): ranks from the scope,
/// shapes of rank 0-2 with dims up to 4, scalars from `arb_q`; a failure is
/// shrunk. Returns (passed, passed on more than one rank, failure, note).
#[allow(clippy::type_complexity)]
fn pending_random(
    r: &PendingRule,
    ranks: &[usize],
    cfg: &CheckConfig,
) -> (
    u64,
    u64,
    Option<(&'static str, partial_kinds::Counterexample)>,
    Option<String>,
) {
    if cfg.cases == 0 || ranks.is_empty() {
        return (0, 0, None, None);
    }
    // Every rank count × shape tuple that fits, built, not filtered: the
    // shapes of rank 0 to 2 with dims up to 4, at most 64 free scalars.
    let shapes = spmd_generators::Scope {
        max_rank: 2,
        max_dim: RANDOM_DIM,
        ..spmd_generators::Scope::default()
    }
    .shapes();
    let k = r.inputs.len();
    let total = (shapes.len() as u64).checked_pow(k as u32);
    if total.is_none_or(|t| t > spmd_generators::MAX_SHAPE_TUPLES) {
        let note = format!(
            "random part ran no case: its {k} inputs make more than {} shape tuples",
            spmd_generators::MAX_SHAPE_TUPLES
        );
        return (0, 0, None, Some(note));
    }
    let tuples = spmd_generators::tuples(&shapes, k);
    let mut entries: Vec<(usize, Vec<Shape>)> = Vec::new();
    for &n in ranks {
        for t in &tuples {
            let free: usize = r
                .inputs
                .iter()
                .zip(t)
                .map(|(&p, s)| pending_free(p, s, n))
                .sum();
            if pending_fits(r, n, t) && free <= RANDOM_FREE {
                entries.push((n, t.clone()));
            }
        }
    }
    let numel = |t: &[Shape]| t.iter().map(|s| s.iter().product::<usize>()).sum::<usize>();
    entries.sort_by(|a, b| (a.0, numel(&a.1), &a.1).cmp(&(b.0, numel(&b.1), &b.1)));
    if entries.is_empty() {
        let note = "random part ran no case: no rank count and shapes fit the rule".to_string();
        return (0, 0, None, Some(note));
    }
    let domain = spmd_generators::Domain::weighted(entries, 2, RANDOM_DIM);
    let mut runner = random_runner(cfg);
    let rm = r.clone();
    let strategy = domain
        .with_values(move |&n, shapes| {
            rm.inputs
                .iter()
                .zip(shapes)
                .map(|(&p, s)| pending_free(p, s, n))
                .sum()
        })
        .prop_map(|(n, shapes, vals)| PendingCase { n, shapes, vals });
    let counts = std::cell::Cell::new((0u64, 0u64));
    let failed = std::cell::Cell::new(false);
    let stopped: RefCell<Option<String>> = RefCell::new(None);
    let result = runner.run(&strategy, |c| {
        if let Some(why) = crate::run::stop_reason() {
            // As in `random_part`: stop generating at once.
            *stopped.borrow_mut() = Some(why);
            return Err(TestCaseError::fail(STOPPED));
        }
        match pending_instance(r, pending_inputs(r, &c), c.n) {
            Ok(Some((p, _))) => {
                failed.set(true);
                Err(TestCaseError::fail(p))
            }
            Ok(None) => {
                if !failed.get() {
                    let (a, b) = counts.get();
                    counts.set((a + 1, b + u64::from(c.n > 1)));
                }
                Ok(())
            }
            Err(e) => Err(TestCaseError::reject(e)),
        }
    });
    let (ran, multi) = counts.get();
    let mut note = stopped.into_inner().map(|w| format!("random part {w}"));
    let mut found = None;
    match result {
        Err(TestError::Fail(..)) if !failed.get() => {}
        Err(TestError::Fail(_, minimal)) => {
            found = pending_instance(r, pending_inputs(r, &minimal), minimal.n)
                .ok()
                .flatten();
        }
        Err(TestError::Abort(why)) => note = Some(random_abort(ran, &why)),
        Ok(()) => {}
    }
    (ran, multi, found, note)
}

/// Checks a rule with pending kinds: stored counterexamples first, then
/// `partial_kinds::check_places` on the exhaustive scope, then random cases.
fn check_pending(rule: &Rule, p: &PendingRule, cfg: &CheckConfig, stored: &[Stored]) -> RuleReport {
    let scope = pending_scope(&cfg.scope, p.ranks);
    let mut rep = PendingReport {
        rule: p.clone(),
        verdict: Verdict::Vacuous {
            tally: partial_kinds::tally(),
        },
        random_note: None,
        replayed: false,
        from_random: false,
        scope: scope.describe(),
        dialect: rule.dialect,
    };
    let transcendental = spmd_interp::transcendental::is_transcendental(&p.f.expr);
    let stored = if transcendental { &[][..] } else { stored };
    if let Some((_, cex)) = stored.iter().find_map(|s| replay_pending(p, s)) {
        rep.verdict = partial_kinds::conclude(&partial_kinds::tally(), 0, Some(cex));
        rep.replayed = true;
    } else {
        let exhaustive = match p.forward {
            Some(_) => Ok(collective_exhaustive(p, &scope)),
            None => partial_kinds::check_places(&p.f, &p.inputs, &[p.output], &scope),
        };
        rep.verdict = match exhaustive {
            Err(e) => Verdict::Undetermined {
                tally: Tally {
                    stopped: Some(e),
                    ..partial_kinds::tally()
                },
            },
            Ok(mut vs) => vs.remove(0),
        };
        if !rep.failed() && transcendental && cfg.cases > 0 {
            rep.random_note = Some(
                "no random cases: a transcendental op is checked on the exhaustive grid only, SPEC.md §21.7"
                    .into(),
            );
        } else if !rep.failed() && !matches!(rep.verdict, Verdict::Undetermined { .. }) {
            let (ran, multi, found, note) = pending_random(p, &scope.ranks, cfg);
            rep.random_note = note;
            rep.from_random = found.is_some();
            // The random cases join the tally; the verdict is concluded
            // again (random cases on more than one rank decide a vacuous
            // exhaustive part, bounded; a stop leaves it undetermined).
            let mut t = rep.verdict.tally().clone();
            t.random = ran;
            t.random_distributed = multi;
            if found.is_none() {
                t.stopped = rep
                    .random_note
                    .clone()
                    .filter(|_| crate::run::stop_reason().is_some());
            }
            rep.verdict = Verdict::conclude(t, found.map(|(_, cex)| Box::new(cex)));
        }
    }
    RuleReport {
        name: rule.name.clone(),
        verdict: rep.core_verdict(),
        random_cases: rep.verdict.tally().random,
        random_requested: cfg.cases,
        random_note: rep.random_note.clone(),
        replayed: rep.replayed,
        backward_checked: false,
        no_grad: vec![],
        dialect: rule.dialect,
        pending: Some(rep),
        uneven: None,
        batching: None,
        elaboration: rule.elaboration.clone(),
        one_rank_mesh: one_rank_mesh(rule),
    }
}

/// The report of a rule checked outside the core (uneven shards, a
/// `vmap`): `verdict` summarises its own checks (sound, vacuous or
/// unsound, never a proof) for callers that read only it.
#[allow(clippy::too_many_arguments)] // the summary's parts
fn outside_core(
    rule: &Rule,
    cfg: &CheckConfig,
    violation: Option<Violation>,
    inconclusive: bool,
    cases: u64,
    distributed_cases: u64,
    backward_checked: bool,
) -> RuleReport {
    let tally = Tally {
        cases,
        distributed_cases,
        ..Tally::new()
    };
    let verdict = match violation {
        Some(v) => Verdict::Unsound {
            violation: Box::new(v),
            tally,
        },
        None if inconclusive => Verdict::Vacuous { tally },
        None => Verdict::Sound {
            proof: false,
            tally,
        },
    };
    RuleReport {
        name: rule.name.clone(),
        verdict,
        random_cases: 0,
        random_requested: cfg.cases,
        random_note: None,
        replayed: false,
        backward_checked,
        no_grad: vec![],
        dialect: rule.dialect,
        pending: None,
        uneven: None,
        batching: None,
        elaboration: rule.elaboration.clone(),
        one_rank_mesh: false,
    }
}

/// A rule with a `vmap` (SPEC.md §24.4): V1.
fn check_batching(rule: &Rule, b: &crate::batching::Transform, cfg: &CheckConfig) -> RuleReport {
    use crate::pinned::Verdicted;
    let rep = b.check();
    let mut r = outside_core(
        rule,
        cfg,
        rep.violation(),
        rep.inconclusive(),
        rep.cases(),
        rep.cases(),
        matches!(b, crate::batching::Transform::Program(p) if p.has_backward),
    );
    r.batching = Some(rep);
    r
}

/// A rule on uneven shards (SPEC.md §23.10): its own checks.
fn check_uneven(rule: &Rule, u: &crate::uneven::UnevenRule, cfg: &CheckConfig) -> RuleReport {
    let rep = crate::uneven::check(u, rule.dialect);
    let mut r = outside_core(
        rule,
        cfg,
        rep.violation(),
        rep.inconclusive(),
        rep.tally.cases,
        rep.tally.uneven_cases,
        u.has_backward(),
    );
    r.uneven = Some(rep);
    r
}

/// The exhaustive part for a collective of a pending kind (SPEC.md §21.7):
/// §21.2's scope and order (fewest ranks, then fewest free scalars; in the
/// first failing case the fewest nonzero scalars, then the earliest values),
/// the per-rank forward against the value the input denotes.
fn collective_exhaustive(
    r: &PendingRule,
    scope: &partial_kinds::Scope,
) -> Vec<partial_kinds::Verdict> {
    let nv = scope.values.len();
    let mut counts = partial_kinds::tally();
    let mut failed = 0u64;
    type Fail = ((usize, Vec<usize>), partial_kinds::Counterexample);
    let mut fail: Option<Fail> = None;
    'ranks: for &n in &scope.ranks {
        let mut shapes: Vec<&Shape> = scope
            .shapes
            .iter()
            .filter(|s| pending_fits(r, n, std::slice::from_ref(*s)))
            .collect();
        shapes.sort_by_key(|s| pending_free(r.inputs[0], s, n));
        for s in shapes {
            let fr = pending_free(r.inputs[0], s, n);
            let Some(points) = u32::try_from(fr)
                .ok()
                .and_then(|f| (nv as u64).checked_pow(f))
                .filter(|&p| p <= scope.max_points)
            else {
                counts.cases_beyond_cap += 1;
                continue;
            };
            counts.cases += 1;
            counts.distributed_cases += u64::from(n > 1);
            let mut idx = vec![0usize; fr];
            for _ in 0..points {
                let c = PendingCase {
                    n,
                    shapes: vec![s.clone()],
                    vals: idx.iter().map(|&i| scope.values[i].clone()).collect(),
                };
                counts.passed += 1;
                if let Ok(Some((_, cex))) = pending_instance(r, pending_inputs(r, &c), n) {
                    failed += 1;
                    let key = (idx.iter().filter(|&&i| i != 0).count(), idx.clone());
                    if fail.as_ref().is_none_or(|f| key < f.0) {
                        fail = Some((key, cex));
                    }
                }
                for d in idx.iter_mut() {
                    *d += 1;
                    if *d < nv {
                        break;
                    }
                    *d = 0;
                }
            }
            if fail.is_some() {
                break 'ranks;
            }
        }
    }
    vec![partial_kinds::conclude(
        &counts,
        failed,
        fail.map(|(_, cex)| cex),
    )]
}

/// A rule's verdict in words that say exactly what was checked (SPEC.md
/// §11.2): `sound (proof)`, `sound (bounded: 0 exhaustive, 812 random)`,
/// `forward sound (proof); backward not checked (none declared)`, ...
pub fn rule_word(rep: &RuleReport) -> String {
    let v = &rep.verdict;
    let t = v.tally();
    let fwd = if rep.backward_checked { "" } else { "forward " };
    let mut w = match v {
        Verdict::Sound { proof: true, .. } if t.by_identity => {
            format!("{fwd}sound (proof by identity)")
        }
        Verdict::Sound { proof: true, .. } => format!("{fwd}sound (proof)"),
        Verdict::Sound { .. } => format!(
            "{fwd}sound (bounded: {} exhaustive, {}{} random{})",
            t.instances(),
            match t.identity_cases {
                0 => String::new(),
                n => format!("{n} cases by identity, "),
            },
            t.random,
            if t.undecided > 0 {
                format!("; {} undecided, overlapping enclosures", t.undecided)
            } else {
                String::new()
            }
        ),
        Verdict::Unsound { violation, .. } => format!("unsound {}", violation.property.code()),
        Verdict::Vacuous { .. } => match crate::words::vacuous_hint(v, rep.one_rank_mesh) {
            Some(r) => format!("vacuous ({r})"),
            None => "vacuous".into(),
        },
        Verdict::Undetermined { .. } => format!(
            "undetermined ({})",
            v.undetermined_reason().unwrap_or_default()
        ),
    };
    if !rep.backward_checked && !matches!(v, Verdict::Unsound { .. }) {
        w.push_str("; backward not checked (none declared)");
    } else if !rep.no_grad.is_empty() && !matches!(v, Verdict::Unsound { .. }) {
        w.push_str(&format!(
            "; no gradient checked for {} (no_grad)",
            rep.no_grad.join(", ")
        ));
    }
    if v.proof() && rep.random_cases > 0 {
        w.push_str(&format!(
            ", and {} random cases beyond it",
            rep.random_cases
        ));
    }
    if let Some(n) = &rep.random_note {
        w.push_str(&format!(" [{n}]"));
    }
    if rep.replayed {
        w.push_str(" (replayed from the regression file)");
    }
    w
}

/// Whether a rule writes its mesh and that mesh has one rank (see
/// `RuleReport::one_rank_mesh`).
fn one_rank_mesh(rule: &Rule) -> bool {
    rule.mesh_written && !rule.meshes.is_empty() && rule.meshes.iter().all(|m| m.num_ranks() == 1)
}
