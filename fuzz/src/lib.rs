//! What the fuzz targets share: a tiny scope, so that every input that gets
//! past reading is also elaborated, built and checked in a few milliseconds,
//! and the check-and-report path `spmd-check check` runs on a rule.

use spmd_drivers::check::{check_rule, emit_rstest, CheckConfig, Stored};
use spmd_drivers::rules::{self, Rule, RuleSpec};
use spmd_drivers::run::UsageError;
use spmd_generators::Scope;
use spmd_semantics::{Mesh, Q};

/// With `SPMD_FUZZ_SHOW=1`, print what an input did (run the target binary
/// on one file to see how far it got).
pub fn show(what: impl FnOnce() -> String) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("SPMD_FUZZ_SHOW").is_some()) {
        eprintln!("{}", what());
    }
}

/// The most rules of one input that are checked (each is built).
pub const MAX_CHECKED_RULES: usize = 3;

/// One rayon thread: the targets are fuzzed one process per core.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build_global();
    });
}

/// The scope of every target: 1- and 2-rank meshes and one 2 × 2 mesh,
/// tensors of rank 0 to 2 with dims 1 and 2, three values, a few thousand
/// instances per rule. Larger rules are refused by the same estimate that
/// refuses them on the command line.
pub fn tiny_scope() -> Scope {
    Scope {
        meshes: vec![
            Mesh::line(1),
            Mesh::line(2),
            Mesh::new(&[("dp", 2), ("tp", 2)]),
        ],
        max_rank: 2,
        max_dim: 2,
        values: vec![Q::frac(0, 1), Q::frac(1, 1), Q::frac(-1, 2)],
        max_free: 2,
        max_points: 16,
        max_instances: 2_000,
        mesh_dims: false,
    }
}

/// `check`'s configuration for the tiny scope: two random cases (none for
/// programs: see `check_and_report`).
pub fn tiny_config() -> CheckConfig {
    CheckConfig {
        scope: tiny_scope(),
        cases: 2,
        seed: 0,
    }
}

/// The scope for the exact transcendental path (SPEC.md §19), whose
/// instances cost tens of milliseconds each under the fuzzer's
/// instrumentation (most of it in the coverage hooks of big-integer gcds):
/// dims of 1, two values, four points per case, at most 32 instances, no
/// random cases.
pub fn transcendental_config() -> CheckConfig {
    CheckConfig {
        scope: Scope {
            max_dim: 1,
            values: vec![Q::frac(0, 1), Q::frac(1, 2)],
            max_points: 4,
            max_instances: 32,
            ..tiny_scope()
        },
        cases: 0,
        seed: 0,
    }
}

/// Whether a rule takes the exact transcendental path.
pub fn is_transcendental(rule: &Rule) -> bool {
    rule.op.op.is_transcendental_local()
        || rule
            .pending
            .as_ref()
            .is_some_and(|p| spmd_interp::transcendental::is_transcendental(&p.f.expr))
}

/// Read a rule file's text as `spmd-check check` does (after `read_text`):
/// parse, build in the tiny scope. The error is what the command prints.
pub fn read_rules(file: &str, text: &str) -> Result<(Vec<RuleSpec>, Vec<Rule>), UsageError> {
    let specs = rules::parse_file(file, text)?;
    let built = rules::build(file, text, &specs, &tiny_scope())?;
    Ok((specs, built))
}

/// Check one rule as `spmd-check check` does and produce every report it
/// prints or writes: the verdict's words and JSON, the counterexample's
/// report, its stored form (which must be readable again: the command
/// writes it to the regression file it will read next time), the rstest
/// and the JAX / PyTorch scripts.
pub fn check_and_report(spec: &RuleSpec, rule: &Rule, stored: &[Stored]) {
    let mut cfg = match is_transcendental(rule) {
        true => transcendental_config(),
        false => tiny_config(),
    };
    if matches!(rule.op.op, spmd_interp::Op::Program(_)) {
        // A failing random case is shrunk (up to 4096 more checks): seconds
        // for a program of several steps here.
        cfg.cases = 0;
    }
    // `build` refused rules beyond the tiny scope's estimate; the
    // transcendental scope has its own, smaller limit.
    let estimate = match &rule.pending {
        Some(p) => spmd_drivers::rules::pending_estimate(
            p,
            &spmd_drivers::rules::pending_scope(&cfg.scope, p.ranks),
        ),
        None => spmd_drivers::run::estimate(&rule.op, &cfg.scope),
    };
    if estimate > cfg.scope.max_instances {
        show(|| format!("rule \"{}\": {estimate} instances, not checked", rule.name));
        return;
    }
    let rep = check_rule(rule, &cfg, stored, &|_| {});
    let word = spmd_drivers::report::rule_word(&rep);
    show(|| format!("rule \"{}\": {word}", rep.name));
    if let Some(p) = &rep.pending {
        let _ = (p.word(), p.report(rep.dialect), p.json(rep.dialect));
        if let Some(s) = p.stored() {
            readable(&s);
        }
        return;
    }
    let v = &rep.verdict;
    let _ = spmd_drivers::report::verdict_json(v);
    if let Some(x) = v.violation() {
        let _ = x.report_in(rep.dialect);
        let s = Stored::from_violation(x);
        readable(&s);
        let _ = s.hash(&rep.name);
        let toml = rules::to_toml(spec);
        let _ = emit_rstest(&toml, &rep.name, x);
        for lang in ["jax", "pytorch"] {
            let lang = spmd_drivers::emit::Lang::parse(lang).expect("a language");
            let _ = spmd_drivers::emit::emit_script(lang, rule, &toml, x);
        }
    }
}

/// A counterexample the tool stores must be one it can load again.
fn readable(s: &Stored) {
    let text = serde_json::to_string(s).expect("a stored case is JSON");
    let back: Stored = serde_json::from_str(&text).expect("a stored case reads back");
    if let Err(why) = back.validate() {
        panic!("check stored a case its regression file then refuses: {why}: {text}");
    }
}
