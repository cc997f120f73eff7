//! `spmd-check fidelity` (SPEC.md §16): replay what the real systems did,
//! recorded by `peers/` into `tests/fixtures/*.json`, through this tool's
//! model of them, and classify every recorded case.
//!
//! A collective case carries an `spmd-check run` job. Its per-rank forward
//! and transpose must equal the real library's exactly (else the model
//! misstates the system); then the oracle checks the rule over the whole
//! scope on the recorded mesh, so a real behaviour that breaks gradient
//! correctness is reported with a counterexample. A typing case records what
//! a system accepts, with which output type and inserted casts, or what it
//! refuses; the oracle decides whether that typing means anything.

use crate::check::{check_rule, CheckConfig};
use crate::job::{parse_job, run_job, run_job_as_recorded, tensor_json};
use crate::rules::{load_str_as_recorded, Rule};
use crate::run::UsageError;
use serde_json::Value;
use spmd_generators::Scope;
use spmd_semantics::{Mesh, Q};

mod dtensor;
mod jax;
mod nabla;
mod spmd_types;
pub mod transforms;
pub mod uneven;
pub mod vmap_programs;
/// Per-rank tensors of a recording, each written `SHAPE:VALUES`; `None`
/// when one is missing or not exact.
pub(crate) fn tensors(v: &Value) -> Option<Vec<spmd_semantics::Tensor>> {
    v.as_array()?
        .iter()
        .map(|x| crate::registry::parse_tensor(x.as_str()?).ok())
        .collect()
}

/// A recording `file` in `dir`, its path and its JSON (at most 16 MiB);
/// `None` when the file is absent.
pub(crate) fn read_recording(dir: &str, file: &str) -> Result<Option<(String, Value)>, UsageError> {
    let name = format!("{dir}/{file}");
    if !std::path::Path::new(&name).exists() {
        return Ok(None);
    }
    let text = crate::rules::read_text_limit(&name, 16 << 20)?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("{name}: not a recording: {e}")))?;
    Ok(Some((name, v)))
}

use dtensor::*;
use jax::*;
use nabla::*;
use spmd_types::*;

/// How one recorded case compares with the model and the oracle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// The real system and the model agree, and the oracle finds the
    /// behaviour sound (or the refusal justified).
    Agree,
    /// The real system refuses something the oracle proves meaningful.
    SoundRejection,
    /// The real system does something the oracle finds unsound: a defect of
    /// the real system, with the counterexample.
    RealDefect(String),
    /// The model computes something other than the real system (a defect of
    /// this tool's dialect), with the first difference.
    ModelMismatch(String),
    /// The case cannot be written in this tool's terms, and why.
    NotExpressible(String),
    /// The oracle could not decide the question the case asks (vacuous or
    /// undetermined even with random cases), and why: never counted as sound.
    Undetermined(String),
}

impl Class {
    pub fn key(&self) -> &'static str {
        match self {
            Class::Agree => "agree",
            Class::SoundRejection => "sound_rejection",
            Class::RealDefect(_) => "real_defect",
            Class::ModelMismatch(_) => "model_mismatch",
            Class::NotExpressible(_) => "not_expressible",
            Class::Undetermined(_) => "undetermined",
        }
    }
    pub fn detail(&self) -> Option<&str> {
        match self {
            Class::RealDefect(s)
            | Class::ModelMismatch(s)
            | Class::NotExpressible(s)
            | Class::Undetermined(s) => Some(s),
            _ => None,
        }
    }
}

/// The classes in report order.
pub const CLASSES: &[&str] = &[
    "agree",
    "sound_rejection",
    "real_defect",
    "model_mismatch",
    "not_expressible",
    "undetermined",
];

/// One classified case.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub file: String,
    pub system: String,
    pub version: String,
    pub id: String,
    pub class: Class,
    /// What was compared, in a few words.
    pub note: String,
    /// The system's dialect typing function (`spmd_dialects`) beside what
    /// the real system did, for a typing case it can be asked about.
    pub dialect: Option<DialectCheck>,
}

/// A typing case run through the system's dialect typing function and
/// compared with the real outcome: accepted or refused, the output state,
/// and the casts inserted (by name, in order of appearance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DialectCheck {
    /// What the dialect does, in the words the real outcome is put in.
    pub ours: String,
    /// What the real system did.
    pub real: String,
}

impl DialectCheck {
    pub fn matches(&self) -> bool {
        self.ours == self.real
    }
    /// `dialect: matches`, or `dialect: differs (ours ..., real ...)`.
    pub fn line(&self) -> String {
        if self.matches() {
            "dialect: matches".into()
        } else {
            format!("dialect: differs (ours {}, real {})", self.ours, self.real)
        }
    }
}

/// The fixtures directory of this checkout.
pub fn default_dir() -> String {
    // This crate sits one folder below the checkout.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(std::path::Path::new("."));
    format!("{}/tests/fixtures", root.display())
}

/// Classify every case of every fixture in `dir`.
pub fn run(dir: &str) -> Result<Vec<CaseResult>, UsageError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| UsageError(format!("{dir}: cannot read: {e}")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(UsageError(format!("{dir}: no fixtures (*.json)")));
    }
    let mut out = Vec::new();
    for f in files {
        let name = f.to_string_lossy().into_owned();
        let text = crate::rules::read_text_limit(&name, 16 << 20)?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| UsageError(format!("{name}: not a fixture: {e}")))?;
        let system = v["system"].as_str().unwrap_or("?").to_string();
        let version = v["version"].as_str().unwrap_or("?").to_string();
        let cases = v["cases"]
            .as_array()
            .ok_or_else(|| UsageError(format!("{name}: no `cases`")))?;
        use rayon::prelude::*;
        let results: Vec<CaseResult> = cases
            .par_iter()
            .filter(|c| c["kind"] != "op_linearity")
            .map(|c| {
                let id = c["id"].as_str().unwrap_or("?").to_string();
                let (class, mut note) = classify(&system, &version, c);
                let dialect = dialect_check(&system, &version, c);
                if let Some(d) = &dialect {
                    note = if note.is_empty() {
                        d.line()
                    } else {
                        format!("{note}; {}", d.line())
                    };
                }
                CaseResult {
                    file: name.clone(),
                    system: system.clone(),
                    version: version.clone(),
                    id,
                    class,
                    note,
                    dialect,
                }
            })
            .collect();
        out.extend(results);
    }
    // The uneven recordings (SPEC.md §23.13), in their own folder.
    out.extend(uneven::run(dir)?);
    // The vmap recording (SPEC.md §24.6).
    out.extend(transforms::run(dir)?);
    out.extend(vmap_programs::run(dir)?);
    Ok(out)
}

fn classify(system: &str, version: &str, c: &Value) -> (Class, String) {
    match c["kind"].as_str() {
        Some("collective") => collective(c),
        Some("typing") if system == "jax" => jax_typing(c, version),
        Some("typing") if system == "nabla" => nabla_typing(c),
        Some("typing") if c["source"] == "infer_local_type_for_axis" => spmd_types_typing(c),
        Some("typing") if c["source"] == "torch" => torch_typing(c),
        Some("typing") if c["source"] == "dtensor_propagation" => dtensor_typing(c),
        k => (
            Class::NotExpressible(format!("unknown case kind {k:?}")),
            String::new(),
        ),
    }
}

/// A JSON array of strings (missing or other entries are skipped).
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Exact values of a recorded per-rank array: its shape per rank and the
/// scalars in row-major order.
pub(crate) fn exact(v: &Value) -> Option<Vec<(Vec<usize>, Vec<Q>)>> {
    fn go(v: &Value, shape: &mut Vec<usize>, depth: usize, out: &mut Vec<Q>) -> Option<()> {
        match v {
            Value::Array(xs) => {
                if shape.len() == depth {
                    shape.push(xs.len());
                } else if shape[depth] != xs.len() {
                    return None;
                }
                for x in xs {
                    go(x, shape, depth + 1, out)?;
                }
                Some(())
            }
            Value::Number(n) => {
                out.push(Q::parse(&n.to_string())?);
                Some(())
            }
            Value::String(s) => {
                out.push(Q::parse(s)?);
                Some(())
            }
            _ => None,
        }
    }
    v.as_array()?
        .iter()
        .map(|r| {
            let (mut shape, mut vals) = (vec![], vec![]);
            go(r, &mut shape, 0, &mut vals)?;
            Some((shape, vals))
        })
        .collect()
}

/// The first difference between our per-rank values and the recorded ones.
pub(crate) fn differs(ours: &spmd_semantics::PerRank, real: &Value) -> Option<String> {
    let ours_json = Value::Array(ours.tensors.iter().map(tensor_json).collect());
    let (a, b) = (exact(&ours_json)?, exact(real)?);
    if a.len() != b.len() {
        return Some(format!(
            "{} ranks, the real system has {}",
            a.len(),
            b.len()
        ));
    }
    for (r, ((sa, va), (sb, vb))) in a.iter().zip(&b).enumerate() {
        // A rank-0 value may be recorded as shape (1,).
        let same_shape = sa == sb || (va.len() == 1 && vb.len() == 1);
        if !same_shape || va != vb {
            return Some(format!(
                "rank {r}: ours {}, the real system's {}",
                ours_json[r], real[r]
            ));
        }
    }
    None
}

fn config(cases: u32) -> CheckConfig {
    CheckConfig {
        scope: Scope::default(),
        cases,
        seed: 0,
    }
}

/// What the oracle decided about a rule.
pub(crate) enum Judged {
    Sound,
    Unsound(String),
    /// Neither: vacuous or undetermined, and why.
    Undetermined(String),
}

impl Judged {
    fn is_sound(&self) -> bool {
        matches!(self, Judged::Sound)
    }
    /// The class of an accepted case: sound agrees, unsound is the real
    /// system's defect, undecided is undetermined.
    fn accepted(self, note: String) -> (Class, String) {
        match self {
            Judged::Sound => (Class::Agree, note),
            Judged::Unsound(v) => (Class::RealDefect(v), note),
            Judged::Undetermined(why) => (Class::Undetermined(why), note),
        }
    }
}

/// The judgement a verdict gives: a vacuous or undetermined verdict is
/// never sound (SPEC.md §16).
fn judged(v: &spmd_oracle::Verdict, rule: &Rule) -> Judged {
    if let Some(x) = v.violation() {
        return Judged::Unsound(x.one_line_in(rule.dialect));
    }
    if v.is_sound() {
        return Judged::Sound;
    }
    Judged::Undetermined(
        v.vacuous_reason()
            .map(str::to_string)
            .or_else(|| v.undetermined_reason())
            .unwrap_or_else(|| v.name().to_string()),
    )
}

/// The oracle's verdict on a rule over the whole scope on its mesh; a
/// vacuous or undetermined scope is widened by random cases before it is
/// called undetermined.
pub(crate) fn oracle(rule: &Rule) -> Judged {
    let r = check_rule(rule, &config(0), &[], &|_| {});
    match judged(&r.verdict, rule) {
        Judged::Undetermined(_) => {
            let r = check_rule(rule, &config(256), &[], &|_| {});
            judged(&r.verdict, rule)
        }
        j => j,
    }
}

/// A one-axis rule file for a local op.
fn local_rule(
    dialect: &str,
    mesh: &Mesh,
    expr: &str,
    inputs: &[String],
    output: &str,
    no_grad: &[usize],
) -> Result<Rule, UsageError> {
    let axis = &mesh.axes[0];
    let ins: Vec<String> = inputs.iter().map(|s| format!("{s:?}")).collect();
    let text = format!(
        "[[rule]]\nname = \"case\"\ndialect = {dialect:?}\nmesh = {{ {} = {} }}\nop = {{ expr = {expr:?} }}\ninputs = [{}]\noutput = {output:?}\nno_grad = {no_grad:?}\n",
        axis.name,
        axis.size,
        ins.join(", ")
    );
    let mut rules = load_str_as_recorded("<fixture>", &text)?;
    Ok(rules.remove(0))
}

/// Forward properties only (F1-F3): what a recorded typing says.
pub(crate) fn forward_sound(rule: &Rule) -> Judged {
    let v = crate::run::check_forward(&rule.op, &Scope::default(), &rule.meshes);
    judged(&v, rule)
}

/// A refusal by the real system: justified when no output type of `expr`
/// on `types` is sound, a sound rejection (with the sound typings) otherwise.
fn judge_refusal(
    dialect: &str,
    expr: &str,
    types: &[String],
    no_grad: &[usize],
    real: &Value,
    what: &str,
    ng: &str,
) -> (Class, String) {
    let mesh = Mesh::new(&[("x", 2)]);
    let outs: &[&str] = if dialect == "jax" {
        &["Invariant", "Varying", "Unreduced", "Reduced"]
    } else {
        &["I", "R", "V", "P"]
    };
    let judged: Vec<(&str, Judged)> = outs
        .iter()
        .filter_map(|out| {
            let r = local_rule(dialect, &mesh, expr, types, out, no_grad).ok()?;
            Some((*out, oracle(&r)))
        })
        .collect();
    let sound: Vec<&str> = judged
        .iter()
        .filter(|(_, j)| j.is_sound())
        .map(|(o, _)| *o)
        .collect();
    let open: Vec<String> = judged
        .iter()
        .filter_map(|(o, j)| match j {
            Judged::Undetermined(why) => Some(format!("{o} ({why})")),
            _ => None,
        })
        .collect();
    let e = real["error"].as_str().unwrap_or("");
    let e = e.split(':').next().unwrap_or(e);
    if !sound.is_empty() {
        (
            Class::SoundRejection,
            format!(
                "{what}refused ({e}){ng}; sound as {} -> {}",
                types.join(", "),
                sound.join(" or ")
            ),
        )
    } else if !open.is_empty() {
        (
            Class::Undetermined(format!("undecided for {}", open.join(", "))),
            format!(
                "{what}refused ({e}){ng}; no output type is proved sound, and the oracle cannot decide {} -> {}",
                types.join(", "),
                open.join(" or ")
            ),
        )
    } else {
        (
            Class::Agree,
            format!("{what}refused ({e}){ng}; no output type is sound"),
        )
    }
}

// ---- the dialect typing functions against the real systems ----

/// Run a typing case through its system's dialect typing function
/// (`spmd_dialects::jax` or `spmd_dialects::spmd_types`) and put both
/// outcomes in the same words. `None` for a case that is no typing case of
/// those systems, or whose op has no class.
pub fn dialect_check(system: &str, version: &str, c: &Value) -> Option<DialectCheck> {
    if c["kind"] != "typing" {
        return None;
    }
    match system {
        "jax" => jax_dialect(c, version),
        "spmd_types" => spmd_types_dialect(c),
        "dtensor" => dtensor_dialect(c),
        "nabla" => nabla_dialect(c, version),
        _ => None,
    }
}

/// An outcome in words: `refused`, `unknown (...)`, or `accepted -> OUT`
/// with ` after CAST, ...` when casts were inserted.
fn outcome_words(
    o: &spmd_dialects::Outcome,
    name: &dyn Fn(spmd_semantics::State) -> String,
) -> String {
    use spmd_dialects::Outcome;
    match o {
        Outcome::Error(_) => "refused".into(),
        Outcome::Unknown(r) => format!("unknown ({r})"),
        Outcome::Infers { output, casts } => {
            let out: Vec<String> = output.iter().map(|&s| name(s)).collect();
            let casts: Vec<&str> = casts.iter().map(|c| c.name).collect();
            accepted_words(&out.join(", "), &casts)
        }
    }
}

fn accepted_words(out: &str, casts: &[&str]) -> String {
    if casts.is_empty() {
        format!("accepted -> {out}")
    } else {
        format!("accepted -> {out} after {}", casts.join(", "))
    }
}

/// Per system and version: (system, version, cases the dialect matches,
/// cases compared).
pub fn dialect_counts(results: &[CaseResult]) -> Vec<(String, String, usize, usize)> {
    let mut out: Vec<(String, String, usize, usize)> = Vec::new();
    for r in results {
        let Some(d) = &r.dialect else { continue };
        let i = match out.iter().position(|g| g.0 == r.system && g.1 == r.version) {
            Some(i) => i,
            None => {
                out.push((r.system.clone(), r.version.clone(), 0, 0));
                out.len() - 1
            }
        };
        out[i].3 += 1;
        if d.matches() {
            out[i].2 += 1;
        }
    }
    out
}

/// The text section of `spmd-check fidelity`: per system "dialect matches
/// real N of M", then every difference.
pub fn dialect_text(results: &[CaseResult]) -> String {
    let counts = dialect_counts(results);
    if counts.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nthe dialect typing functions (dialects/src/<system>.rs) against the real systems:\n",
    );
    for (sys, ver, n, m) in &counts {
        s.push_str(&format!(
            "  {sys:<12} {ver:<14} dialect matches real {n} of {m}\n"
        ));
    }
    let differ: Vec<&CaseResult> = results
        .iter()
        .filter(|r| r.dialect.as_ref().is_some_and(|d| !d.matches()))
        .collect();
    if !differ.is_empty() {
        s.push_str(&format!("\ndialect differs ({}):\n", differ.len()));
        for r in differ {
            let d = r.dialect.as_ref().expect("filtered");
            s.push_str(&format!("  {} {}: {}\n", r.system, r.id, d.line()));
        }
    }
    s
}

/// The JSON of the same: per system the counts, and every difference.
pub fn dialect_json(results: &[CaseResult]) -> Value {
    serde_json::json!({
        "systems": dialect_counts(results).iter().map(|(sys, ver, n, m)| serde_json::json!({
            "system": sys, "version": ver, "dialect_matches_real": n, "compared": m,
        })).collect::<Vec<_>>(),
        "differences": results.iter().filter_map(|r| {
            let d = r.dialect.as_ref()?;
            (!d.matches()).then(|| serde_json::json!({
                "system": r.system, "id": r.id, "ours": d.ours, "real": d.real,
            }))
        }).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal whose every candidate rule is vacuous (the op is defined
    /// nowhere) is undetermined, never a sound rejection; its twin, a
    /// refusal of an op the oracle decides, is (SPEC.md §16).
    #[test]
    fn a_vacuous_refusal_is_undetermined_not_sound() {
        let real = serde_json::json!({"accepted": false, "error": "SpmdTypeError: refused"});
        let (c, note) = judge_refusal(
            "spmd_types",
            "1 / (a - a)",
            &["V".into()],
            &[],
            &real,
            "",
            "",
        );
        assert_eq!(c.key(), "undetermined", "{c:?} {note}");
        assert!(!note.contains("sound as"), "{note}");
        let (c, note) = judge_refusal("spmd_types", "a + a", &["V".into()], &[], &real, "", "");
        assert_eq!(c.key(), "sound_rejection", "{c:?} {note}");
        assert!(note.contains("sound as V -> V"), "{note}");
    }
}
