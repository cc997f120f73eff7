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
    Ok(out)
}

fn classify(system: &str, version: &str, c: &Value) -> (Class, String) {
    match c["kind"].as_str() {
        Some("collective") => collective(c),
        Some("typing") if system == "jax" => jax_typing(c, version),
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
fn exact(v: &Value) -> Option<Vec<(Vec<usize>, Vec<Q>)>> {
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
fn differs(ours: &spmd_semantics::PerRank, real: &Value) -> Option<String> {
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
enum Judged {
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
fn oracle(rule: &Rule) -> Judged {
    let r = check_rule(rule, &config(0), &[], &|_| {});
    match judged(&r.verdict, rule) {
        Judged::Undetermined(_) => {
            let r = check_rule(rule, &config(256), &[], &|_| {});
            judged(&r.verdict, rule)
        }
        j => j,
    }
}

fn collective(c: &Value) -> (Class, String) {
    let real = &c["real"];
    let refused = real["error"].as_str().filter(|e| !e.is_empty());
    let why = c["why"].as_str().unwrap_or("");
    let job_v = &c["job"];
    if job_v.is_null() {
        let what = match refused {
            Some(e) => format!("refused by the real system ({e}); {why}"),
            None => why.to_string(),
        };
        return (Class::NotExpressible(what), "no job".into());
    }
    let text = job_v.to_string();
    let job = match parse_job("<fixture>", &text) {
        Ok(j) => j,
        Err(e) => {
            return (
                Class::ModelMismatch(format!("job does not parse: {e}")),
                String::new(),
            )
        }
    };
    let mut cot_note = String::new();
    let mut first = run_job(&job, "<fixture>", &text, false);
    if let Err(e) = &first {
        if e.0.starts_with("cotangent:") {
            // The real system handed a cotangent this model's type for it
            // does not allow (e.g. DTensor's Partial() gradient of a
            // Partial() output, where cot(P) = R): compare the forward.
            cot_note = format!("; the recorded cotangent is not expressible ({})", e.0);
            let mut j = job.clone();
            j.cotangent = None;
            first = run_job(&j, "<fixture>", &text, false);
        }
    }
    let rep = match first {
        Ok(r) => r,
        Err(e) => {
            return match refused {
                Some(_) => (Class::Agree, "both refuse".into()),
                None => (
                    Class::ModelMismatch(format!(
                        "the real system accepts it; the model refuses: {e}"
                    )),
                    String::new(),
                ),
            };
        }
    };
    if let Some(e) = refused {
        // The real system refuses what the model builds: is it meaningful?
        return match oracle(&rep.rule) {
            Judged::Sound => (
                Class::SoundRejection,
                format!("refused ({e}), but the oracle finds the rule sound"),
            ),
            Judged::Unsound(_) => (Class::Agree, "refused, and the rule is unsound".into()),
            Judged::Undetermined(why) => (
                Class::Undetermined(why),
                format!("refused ({e}); the oracle cannot decide the rule"),
            ),
        };
    }
    if let Some(d) = differs(&rep.output.value, &real["output_per_rank"]) {
        return (Class::ModelMismatch(format!("forward: {d}")), String::new());
    }
    let note = match (&rep.backward, real.get("transpose_per_rank")) {
        (Some(b), Some(t)) if !t.is_null() => {
            if let Some(d) = differs(&b[0].value, t) {
                return (
                    Class::ModelMismatch(format!("transpose: {d}")),
                    String::new(),
                );
            }
            "forward and transpose equal the real system's".to_string()
        }
        _ => format!(
            "forward equals the real system's; transpose not compared ({})",
            if why.is_empty() { "none spelled" } else { why }
        ),
    };
    let mut note = note;
    note.push_str(&cot_note);
    oracle(&rep.rule).accepted(note)
}

/// The expression of a recorded JAX local op on operands `a`, `b`.
fn jax_expr(op: &str, shapes: &[Vec<usize>]) -> Option<String> {
    Some(
        match op {
            "neg" => "-a",
            "abs" => "abs(a)",
            "mul_const" => "2 * a",
            "add" => "a + b",
            "sub" => "a - b",
            "mul" => "a * b",
            "div" => "a / b",
            "sum" if shapes.first()?.len() == 1 => "sum(a, 0)",
            "dot" if shapes.iter().all(|s| s.len() == 1) => "einsum(\"i,i->\", a, b)",
            // Three operands (JAX 0.12 recordings): compositions.
            "add3" => "a + b + c",
            "mul3" => "a * b * c",
            "fma" => "a * b + c",
            _ => return None,
        }
        .to_string(),
    )
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
fn forward_sound(rule: &Rule) -> Judged {
    let v = crate::run::check_forward(&rule.op, &Scope::default(), &rule.meshes);
    judged(&v, rule)
}

fn jax_typing(c: &Value, version: &str) -> (Class, String) {
    let ins = c["inputs"].as_array().cloned().unwrap_or_default();
    let shapes: Vec<Vec<usize>> = ins
        .iter()
        .filter_map(|i| exact(&i["per_rank"]).and_then(|r| r.first().map(|x| x.0.clone())))
        .collect();
    let op = c["op"].as_str().unwrap_or("");
    let Some(expr) = jax_expr(op, &shapes) else {
        return (
            Class::NotExpressible(format!("no expression for JAX's `{op}` on these shapes")),
            String::new(),
        );
    };
    let mesh = Mesh::new(&[("x", 2)]);
    let real = &c["real"];
    let inserted: Vec<&str> = real["inserted"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The types the op actually sees: JAX's inserted casts applied. pvary
    // and reduced_vary_cast make an operand Varying; preduced makes an
    // Invariant one Reduced.
    let states: Vec<String> = ins
        .iter()
        .map(|i| i["state"].as_str().unwrap_or("?").to_string())
        .collect();
    let mut seen: Vec<String> = states.clone();
    let vary = inserted
        .iter()
        .any(|s| s.starts_with("pvary") || s.starts_with("reduced_vary_cast"));
    if vary {
        for s in &mut seen {
            if s == "Invariant" || s == "Reduced" {
                *s = "Varying".into();
            }
        }
    }
    if real["jaxpr"].as_array().is_some_and(|j| {
        j.iter()
            .any(|p| p.as_str().is_some_and(|p| p.starts_with("preduced")))
    }) {
        for s in &mut seen {
            if s == "Invariant" {
                *s = "Reduced".into();
            }
        }
    }
    let casts = if inserted.is_empty() {
        String::new()
    } else {
        format!(" after {}", inserted.join(", "))
    };
    if real["accepted"] == true {
        if let Some(done) = jax_typing_with_backward(c, version, &expr, &states, &casts) {
            return done;
        }
        let out = real["output"]["state"].as_str().unwrap_or("?");
        let rule = match local_rule("jax", &mesh, &expr, &seen, out, &[]) {
            Ok(r) => r,
            Err(e) => {
                return (
                    Class::ModelMismatch(format!("cannot build: {e}")),
                    String::new(),
                )
            }
        };
        // The recorded per-rank output must be what the expression gives.
        let xs: Vec<spmd_semantics::PerRank> = ins
            .iter()
            .filter_map(|i| {
                let r = exact(&i["per_rank"])?;
                Some(spmd_semantics::PerRank {
                    tensors: r
                        .into_iter()
                        .map(|(s, v)| spmd_semantics::Tensor::new(s, v))
                        .collect(),
                })
            })
            .collect();
        if let Ok(f) = rule.op.op.forward(&mesh, &xs) {
            if let Some(d) = differs(&f.y, &real["output_per_rank"]) {
                return (
                    Class::ModelMismatch(format!("`{expr}`: {d}")),
                    String::new(),
                );
            }
        }
        let note = format!(
            "accepted as {} -> {out}{casts}; forward checked only ({})",
            seen.join(", "),
            match real["transpose_error"].as_str() {
                Some(e) => format!(
                    "JAX's own backward fails: {}",
                    e.split(':').next().unwrap_or(e)
                ),
                None => "the op is rational; program steps must be polynomial".into(),
            }
        );
        forward_sound(&rule).accepted(note)
    } else {
        judge_refusal("jax", &expr, &states, &[], real, "", "")
    }
}

/// spmd_types' per-axis typing function, replayed on one op per linearity
/// class: LINEAR sums its operands, MULTILINEAR multiplies them, NONLINEAR
/// is `abs` of their sum; a `Scalar` operand is the constant 3.
fn spmd_types_typing(c: &Value) -> (Class, String) {
    if c["out_partial"] == true {
        return (
            Class::NotExpressible(
                "out_partial_axes declares the result Partial over a contraction the op does not show"
                    .into(),
            ),
            String::new(),
        );
    }
    let lin = c["op"].as_str().unwrap_or("");
    let ins = strings(&c["inputs"]);
    let names = ["a", "b", "c"];
    let mut terms = Vec::new();
    let mut types = Vec::new();
    let mut no_grad = Vec::new();
    let flags: Vec<bool> = c["no_grad"]
        .as_array()
        .map(|a| a.iter().map(|b| b == true).collect())
        .unwrap_or_default();
    for (k, s) in ins.iter().enumerate() {
        if s == "Scalar" {
            terms.push("3".to_string());
        } else {
            if flags.get(k) == Some(&true) {
                no_grad.push(types.len());
            }
            terms.push(names[k].to_string());
            types.push(s.clone());
        }
    }
    if types.is_empty() {
        return (
            Class::NotExpressible("only scalar operands: no tensor input to type".into()),
            String::new(),
        );
    }
    let expr = match lin {
        "linearity=LINEAR" => terms.join(" + "),
        "linearity=MULTILINEAR" => terms.join(" * "),
        "linearity=NONLINEAR" => format!("abs({})", terms.join(" + ")),
        _ => {
            return (
                Class::NotExpressible(format!("unknown class {lin}")),
                String::new(),
            )
        }
    };
    let real = &c["real"];
    let out = real["output"].as_str();
    judge_spmd_types(&expr, &types, &no_grad, real, out)
}

/// A real torch op under spmd_types' `typecheck()`: the op as an
/// expression; without `requires_grad` (or under `torch.no_grad()`) no
/// operand gets a gradient, so only the forward is at stake.
fn torch_typing(c: &Value) -> (Class, String) {
    let op = c["op"].as_str().unwrap_or("");
    let expr = match op {
        "add" => "a + b",
        "sub" => "a - b",
        "mul" => "a * b",
        "div" => "a / b",
        "matmul" => "matmul(a, b)",
        // max(a, b) exactly, in the expression language.
        "maximum" => "(a + b + abs(a - b)) / 2",
        "neg" => "-a",
        "sum" => "sum(a, 0)",
        "mul_scalar" => "2 * a",
        "add_scalar" => "a + 2",
        "clone" => "a",
        _ => {
            return (
                Class::NotExpressible(format!(
                    "torch.{op} is not exact in rationals (transcendental)"
                )),
                String::new(),
            )
        }
    };
    let types = strings(&c["inputs"]);
    let no_grad: Vec<usize> = if c["requires_grad"] == true && c["torch_no_grad"] != true {
        vec![]
    } else {
        (0..types.len()).collect()
    };
    let real = &c["real"];
    let out = real["output"]
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_str);
    judge_spmd_types(expr, &types, &no_grad, real, out)
}

/// A DTensor op as an expression of its operands `a`, `b` and, per
/// operand, the recorded input it reads (`x * x` reads input 0 twice).
fn dtensor_expr(op: &str) -> Option<(&'static str, &'static [usize])> {
    Some(match op {
        "neg" => ("-a", &[0]),
        "scale" => ("3 * a", &[0]),
        "add_const" => ("a + 1", &[0]),
        "square" => ("a * b", &[0, 0]),
        "relu" => ("relu(a)", &[0]),
        "abs" => ("abs(a)", &[0]),
        "sum" => ("sum(a, 0)", &[0]),
        "mean" => ("mean(a, 0)", &[0]),
        "amax" => ("max(a, 0)", &[0]),
        "transpose" => ("transpose(a)", &[0]),
        "floor" => ("floor(a)", &[0]),
        "add" => ("a + b", &[0, 1]),
        "sub" => ("a - b", &[0, 1]),
        "mul" => ("a * b", &[0, 1]),
        "div" => ("a / b", &[0, 1]),
        "matmul" => ("matmul(a, b)", &[0, 1]),
        "cat" => ("concat(a, b, 0)", &[0, 1]),
        _ => return None,
    })
}

/// A pending reduction DTensor names that is not a sum: `Partial(avg)`,
/// `Partial(max)`, ... (spmd-check's Partial is a pending sum).
fn other_partial(p: &str) -> bool {
    p.starts_with("Partial(") && p != "Partial()"
}

/// A DTensor case whose output is `Partial(avg | max | min)` (SPEC.md
/// §21.5): the op runs on each rank's local tensors and must give DTensor's
/// per-rank output exactly; the typing must defer (§21.2); and, where
/// DTensor recorded a gradient, it must equal the exact derivative of the op
/// on the global tensors paired with the cotangent (difference quotients,
/// §21.4; DTensor's own backward is only compared, never used).
fn dtensor_pending(
    c: &Value,
    expr: &str,
    ops: &[(String, Value)],
    out: &str,
    n: u64,
) -> (Class, String) {
    use crate::partial_kinds::{check_places, global_gradient, Scope as PScope};
    use spmd_semantics::pending::{denote, Place};
    use spmd_semantics::Tensor;
    let not = |why: String| (Class::NotExpressible(why), String::new());
    if c["real"]["inserted"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        return not(format!("DTensor gives {out} after a redistribution; only direct typings of pending kinds are replayed"));
    }
    let tensors = |v: &Value| -> Option<Vec<Tensor>> {
        Some(
            exact(v)?
                .into_iter()
                .map(|(s, d)| Tensor::new(s, d))
                .collect(),
        )
    };
    let parsed: Option<Vec<(Place, Vec<Tensor>)>> = ops
        .iter()
        .map(|(p, v)| Some((Place::parse(p).ok()?, tensors(v)?)))
        .collect();
    let (Some(parsed), Ok(out_place)) = (parsed, Place::parse(out)) else {
        return not(format!(
            "placements or values of `{expr}` -> {out} not readable"
        ));
    };
    let Ok(f) = spmd_interp::expr::parse(expr) else {
        return not(format!("`{expr}` does not parse"));
    };
    // Forward, rank by rank.
    let mut per_rank = Vec::new();
    for r in 0..n as usize {
        let local: Option<Vec<&Tensor>> = parsed.iter().map(|(_, xs)| xs.get(r)).collect();
        let Some(local) = local else {
            return not("fewer per-rank values than ranks".into());
        };
        match spmd_interp::eval::eval(&f.expr, &local, &mut Default::default()) {
            Ok(t) => per_rank.push(t),
            Err(e) => {
                return (
                    Class::ModelMismatch(format!("`{expr}` on rank {r}: {e:?}")),
                    String::new(),
                )
            }
        }
    }
    let real = &c["real"];
    let theirs = tensors(&real["output_per_rank"]).unwrap_or_default();
    let same = theirs.len() == per_rank.len()
        && theirs.iter().zip(&per_rank).all(|(a, b)| a.data == b.data);
    if !same {
        return (
            Class::ModelMismatch(format!(
                "`{expr}` forward: ours {per_rank:?}, DTensor's {}",
                real["output_per_rank"]
            )),
            String::new(),
        );
    }
    let ins: Vec<Place> = parsed.iter().map(|p| p.0).collect();
    let mut note = format!(
        "`{expr}` on {} -> {out}; forward equals DTensor's per rank",
        ins.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The gradient DTensor returned, against the exact derivative.
    let grads = real["transpose"]
        .as_array()
        .filter(|_| real["transpose_error"].is_null());
    let cot = tensors(&real["cotangent"]["per_rank"])
        .zip(Place::parse(real["cotangent"]["placement"].as_str().unwrap_or("?")).ok());
    if let (Some(gs), Some((cts, cp))) = (grads, cot) {
        let globals: Option<Vec<Tensor>> = parsed.iter().map(|(p, xs)| denote(*p, xs)).collect();
        let g = denote(cp, &cts);
        let want = globals
            .zip(g)
            .and_then(|(xs, g)| global_gradient(&f, &xs, &g));
        let Some(want) = want else {
            return not("the derivative is undetermined here (a kink)".into());
        };
        for (k, (gk, w)) in gs.iter().zip(&want).enumerate() {
            let place = Place::parse(gk["placement"].as_str().unwrap_or("?")).ok();
            let got = place
                .zip(tensors(&gk["per_rank"]))
                .and_then(|(p, ts)| denote(p, &ts));
            if got.as_ref().map(|t| &t.data) != Some(&w.data) {
                return (
                    Class::ModelMismatch(format!(
                        "gradient of input {k}: DTensor's denotes {got:?}, the exact derivative of `{expr}` on the global tensors is {w}"
                    )),
                    String::new(),
                );
            }
        }
        note += "; every gradient equals the exact derivative of the op on the global tensors (DTensor's backward only compared)";
    }
    match check_places(&f, &ins, &[out_place], &PScope::conform()) {
        Ok(mut v) => {
            let v = v.remove(0);
            note += &format!("; oracle (SPEC.md §21.2): {}", v.text());
            match v.key() {
                "defers" => (Class::Agree, note),
                "refuted" => (Class::RealDefect(v.text()), note),
                _ => (Class::NotExpressible(v.text()), note),
            }
        }
        Err(e) => not(e),
    }
}

/// A DTensor case as DTensor recorded it: its redistributions are steps.
fn run_json(job: &Value) -> Result<crate::job::JobReport, UsageError> {
    let text = job.to_string();
    parse_job("<fixture>", &text).and_then(|j| run_job_as_recorded(&j, "<fixture>", &text, false))
}

/// One redistribution as DTensor 2.14.1 performs it, on recorded per-rank
/// values: Replicate() to Partial() keeps value / n on every rank (its
/// `_partition_value`); every other move is this tool's `redistribute`.
fn dtensor_move(x: &Value, from: &str, to: &str, n: u64) -> Result<Value, UsageError> {
    let job = if from == "Replicate()" && to == "Partial()" {
        serde_json::json!({"dialect": "dtensor", "mesh": {"x": n},
            "op": {"expr": format!("a / {n}")}, "inputs": [{"type": from, "per_rank": x}],
            "output": from})
    } else {
        serde_json::json!({"dialect": "dtensor", "mesh": {"x": n}, "forward": "redistribute",
            "inputs": [{"type": from, "per_rank": x}], "output": to})
    };
    let r = run_json(&job)?;
    Ok(Value::Array(
        r.output.value.tensors.iter().map(tensor_json).collect(),
    ))
}

/// DTensor's sharding propagation of one local op, replayed (SPEC.md §16.2):
/// the redistributions DTensor inserted are applied to the recorded values
/// (`dtensor_move`), then the op runs at the placements DTensor ran it on;
/// the per-rank output must equal DTensor's. Where DTensor inserted
/// nothing, every gradient must equal DTensor's too, and the oracle checks
/// the op backward included, reading a Replicate() input whose gradient
/// DTensor returned as Partial() as the proposal's Reduced() (its cotangent
/// is a pending sum). Otherwise the oracle checks the forward.
fn dtensor_typing(c: &Value) -> (Class, String) {
    let op = c["op"].as_str().unwrap_or("");
    let Some((expr, reads)) = dtensor_expr(op) else {
        return (
            Class::NotExpressible(format!("no expression for DTensor's `{op}`")),
            String::new(),
        );
    };
    let real = &c["real"];
    let ins = c["inputs"].as_array().cloned().unwrap_or_default();
    let n = c["mesh"]["x"].as_u64().unwrap_or(2);
    // Per operand position: placement and per-rank values.
    let mut ops: Vec<(String, Value)> = Vec::new();
    for &k in reads {
        let Some(i) = ins.get(k) else {
            return (
                Class::NotExpressible("fewer inputs than the op reads".into()),
                String::new(),
            );
        };
        ops.push((
            i["placement"].as_str().unwrap_or("?").to_string(),
            i["per_rank"].clone(),
        ));
    }
    let placements: Vec<String> = ops.iter().map(|o| o.0.clone()).collect();
    if real["accepted"] != true {
        let what = format!("`{expr}` ");
        return judge_refusal("dtensor", expr, &placements, &[], real, &what, "");
    }
    let out = real["output"].as_str().unwrap_or("?");
    if other_partial(out) {
        return dtensor_pending(c, expr, &ops, out, n);
    }
    // Each move goes to the first operand position reading its input that
    // has not moved yet (DTensor moves arguments, not inputs).
    let mut moved = vec![false; ops.len()];
    let mut moves = Vec::new();
    for m in real["inserted"].as_array().cloned().unwrap_or_default() {
        let k = m["input"].as_u64().map(|k| k as usize);
        let Some(pos) = (0..ops.len()).find(|&p| Some(reads[p]) == k && !moved[p]) else {
            return (
                Class::NotExpressible("a redistribution of no operand".into()),
                String::new(),
            );
        };
        let (from, to) = (
            m["from"].as_str().unwrap_or("?"),
            m["to"].as_str().unwrap_or("?"),
        );
        match dtensor_move(&ops[pos].1, from, to, n) {
            Ok(v) => ops[pos] = (to.to_string(), v),
            Err(e) => {
                return (
                    Class::ModelMismatch(format!(
                        "DTensor moves {from} -> {to}; the model refuses: {e}"
                    )),
                    String::new(),
                )
            }
        }
        moved[pos] = true;
        moves.push(format!("{} {from} -> {to}", ["a", "b"][pos]));
    }
    let seen: Vec<String> = ops.iter().map(|o| o.0.clone()).collect();
    let mut job = serde_json::json!({
        "dialect": "dtensor", "mesh": c["mesh"], "op": {"expr": expr},
        "inputs": ops.iter().map(|(t, v)| serde_json::json!({"type": t, "per_rank": v})).collect::<Vec<_>>(),
        "output": out,
    });
    let rep = match run_json(&job) {
        Ok(r) => r,
        Err(e) => {
            return (
                Class::ModelMismatch(format!("DTensor runs it; the model refuses: {e}")),
                String::new(),
            )
        }
    };
    if let Some(d) = differs(&rep.output.value, &real["output_per_rank"]) {
        return (
            Class::ModelMismatch(format!("`{expr}` forward: {d}")),
            String::new(),
        );
    }
    let after = if moves.is_empty() {
        String::new()
    } else {
        format!(" after redistributing {}", moves.join(", "))
    };
    let mesh = Mesh::new(&[("x", n as usize)]);
    let grads = real["transpose"]
        .as_array()
        .filter(|_| real["transpose_error"].is_null());
    // Gradients: only where DTensor moved nothing and every operand is its
    // own input (autograd sums a shared input's two gradients).
    let one_to_one = reads.iter().enumerate().all(|(p, &k)| p == k);
    if let (true, true, Some(g)) = (moves.is_empty(), one_to_one, grads) {
        job["cotangent"] = real["cotangent"]["per_rank"].clone();
        let ours = match run_json(&job) {
            Ok(r) => r.backward,
            Err(e) => {
                return (
                    Class::ModelMismatch(format!("the model cannot run the backward: {e}")),
                    String::new(),
                )
            }
        };
        if let Some(ours) = ours {
            for (k, (b, gk)) in ours.iter().zip(g).enumerate() {
                // DTensor may return a gradient in another placement than
                // its input's (sum of a Shard(0) vector: Replicate()): moved
                // to the input's placement, it must be ours rank by rank.
                let gp = gk["placement"].as_str().unwrap_or("?");
                // The cotangent placement of the input: Partial()'s is
                // Replicate(), the others' their own.
                let cot = if seen[k] == "Partial()" {
                    "Replicate()"
                } else {
                    seen[k].as_str()
                };
                let same = gp == cot || (seen[k] == "Replicate()" && gp == "Partial()");
                let theirs = if same {
                    gk["per_rank"].clone()
                } else {
                    match dtensor_move(&gk["per_rank"], gp, cot, n) {
                        Ok(v) => v,
                        Err(e) => {
                            return (
                                Class::ModelMismatch(format!("gradient in {gp}: {e}")),
                                String::new(),
                            )
                        }
                    }
                };
                if let Some(d) = differs(&b.value, &theirs) {
                    return (
                        Class::ModelMismatch(format!(
                            "`{expr}` gradient of {}: {d}",
                            ["a", "b"][k]
                        )),
                        String::new(),
                    );
                }
            }
            // DTensor's gradient placements decide each input's cotangent.
            let mut typed = seen.clone();
            let mut reduced = Vec::new();
            for (k, t) in typed.iter_mut().enumerate() {
                if t == "Replicate()" && g[k]["placement"] == "Partial()" {
                    *t = "Reduced()".into();
                    reduced.push(["a", "b"][k]);
                }
            }
            let rule = match local_rule("dtensor", &mesh, expr, &typed, out, &[]) {
                Ok(r) => r,
                Err(e) => {
                    return (
                        Class::ModelMismatch(format!("cannot build: {e}")),
                        String::new(),
                    )
                }
            };
            let read = if reduced.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} read as Reduced() (DTensor returns its gradient Partial())",
                    reduced.join(", ")
                )
            };
            let note = format!(
                "`{expr}` on {} -> {out}; forward and every gradient equal DTensor's per rank{read}",
                placements.join(", ")
            );
            return oracle(&rule).accepted(note);
        }
    }
    let rule = match local_rule("dtensor", &mesh, expr, &seen, out, &[]) {
        Ok(r) => r,
        Err(e) => {
            return (
                Class::ModelMismatch(format!("cannot build: {e}")),
                String::new(),
            )
        }
    };
    let note = format!(
        "`{expr}` on {} -> {out}{after}; forward equals DTensor's per rank; forward checked only ({})",
        placements.join(", "),
        if !moves.is_empty() {
            "DTensor redistributed an operand, whose backward is DTensor's redistribute"
        } else if !one_to_one {
            "one input read twice"
        } else {
            "DTensor recorded no gradient"
        }
    );
    forward_sound(&rule).accepted(note)
}

/// Classify what spmd_types did with `expr` on `types`: accepted with
/// output `out`, or refused.
fn judge_spmd_types(
    expr: &str,
    types: &[String],
    no_grad: &[usize],
    real: &Value,
    out: Option<&str>,
) -> (Class, String) {
    let mesh = Mesh::new(&[("x", 2)]);
    let ng = if no_grad.is_empty() {
        String::new()
    } else {
        format!(" (no_grad {no_grad:?})")
    };
    if real["accepted"] == true {
        let out = out.unwrap_or("?");
        let rule = match local_rule("spmd_types", &mesh, expr, types, out, no_grad) {
            Ok(r) => r,
            Err(e) => {
                return (
                    Class::ModelMismatch(format!("cannot build: {e}")),
                    String::new(),
                )
            }
        };
        let note = format!("`{expr}` accepted as {} -> {out}{ng}", types.join(", "));
        oracle(&rule).accepted(note)
    } else {
        let what = format!("`{expr}` ");
        let ng = if no_grad.is_empty() {
            String::new()
        } else {
            format!(" (no_grad {no_grad:?})")
        };
        judge_refusal("spmd_types", expr, types, no_grad, real, &what, &ng)
    }
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

/// An accepted JAX case replayed through the user's path (SPEC.md §15.5):
/// the op as a `run` job in JAX's names, with no casts and no output
/// written, so the JAX dialect elaborates it (inserts the casts, infers the
/// output, picks JAX's transposes). The per-rank output and every operand's
/// gradient must equal JAX's; then the elaborated program is checked,
/// backward included. `None` when JAX could not differentiate it, or the
/// dialect does not read it as JAX did (refuses, or infers another output:
/// the dialect check reports that), so the recorded typing is judged as
/// recorded instead.
fn jax_typing_with_backward(
    c: &Value,
    version: &str,
    expr: &str,
    states: &[String],
    casts: &str,
) -> Option<(Class, String)> {
    let real = &c["real"];
    if !real["transpose_error"].is_null() {
        return None;
    }
    let grads = real["transpose"].as_array()?;
    if grads.len() != states.len() || states.len() > 3 {
        return None;
    }
    let names = &["a", "b", "c"][..states.len()];
    let out = real["output"]["state"].as_str()?;
    // The dialect of the recorded version (`jax@0.10` for 0.10.2).
    let dialect = spmd_dialects::jax::Version::of(version).system().name;
    let job = serde_json::json!({
        "dialect": dialect, "mesh": c["mesh"], "op": {"expr": expr}, "vars": names,
        "inputs": c["inputs"].as_array()?.iter().map(|i| serde_json::json!({
            "type": i["state"], "per_rank": i["per_rank"]})).collect::<Vec<_>>(),
        "cotangent": real["cotangent"]["per_rank"],
    });
    let text = job.to_string();
    let j = parse_job("<fixture>", &text).ok()?;
    let rep = run_job(&j, "<fixture>", &text, false).ok()?;
    if !jax_state_is(&rep.rule.op.output, out) {
        return None;
    }
    if let Some(d) = differs(&rep.output.value, &real["output_per_rank"]) {
        return Some((Class::ModelMismatch(format!("forward: {d}")), String::new()));
    }
    let ours = rep.backward.as_ref()?;
    for (k, (b, g)) in ours.iter().zip(grads).enumerate() {
        if let Some(d) = differs(&b.value, &g["per_rank"]) {
            return Some((
                Class::ModelMismatch(format!("gradient of {}: {d}", names[k])),
                String::new(),
            ));
        }
    }
    let note = format!(
        "accepted as {} -> {out}{casts}; forward and every gradient equal JAX's, run as a user's job (the dialect elaborates it)",
        states.join(", ")
    );
    Some(oracle(&rep.rule).accepted(note))
}

/// Whether a one-axis type is JAX's state `name` (Varying, Invariant, ...).
fn jax_state_is(t: &spmd_semantics::Type, name: &str) -> bool {
    t.states.len() == 1
        && spmd_semantics::Dialect::Jax
            .parse_state(name)
            .is_ok_and(|(s, _)| s == t.states[0])
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

/// A recorded JAX composition of three operands against the dialect's
/// elaboration of the same expression (SPEC.md §15.5), as a user's job on
/// the recorded states: accepted or refused, and the output. JAX types it
/// node by node, so where it puts a cast (on an operand or on an
/// intermediate) is not compared; the values are, by the user's path.
fn jax_dialect_by_elaboration(c: &Value, version: &str) -> Option<DialectCheck> {
    let expr = jax_expr(c["op"].as_str()?, &[])?;
    let sys = spmd_dialects::jax::Version::of(version).system();
    let job = serde_json::json!({
        "dialect": sys.name, "mesh": c["mesh"], "op": {"expr": expr}, "vars": ["a", "b", "c"],
        "inputs": c["inputs"].as_array()?.iter().map(|i| serde_json::json!({
            "type": i["state"], "per_rank": i["per_rank"]})).collect::<Vec<_>>(),
    });
    let text = job.to_string();
    let ours =
        match parse_job("<fixture>", &text).and_then(|j| run_job(&j, "<fixture>", &text, false)) {
            Ok(r) if r.rule.op.output.states.len() == 1 => {
                accepted_words(&sys.state_name(r.rule.op.output.states[0]), &[])
            }
            Ok(_) => return None,
            // Undefined on the recorded values is not a refusal of the typing.
            Err(e) if e.0.contains("undefined on these values") => return None,
            Err(_) => "refused".to_string(),
        };
    let r = &c["real"];
    let real = if r["accepted"] == true {
        accepted_words(r["output"]["state"].as_str()?, &[])
    } else {
        "refused".to_string()
    };
    Some(DialectCheck { ours, real })
}

/// A recorded JAX typing case: the op as an op class, its operands (the
/// Python scalar of `2.0 * a` an operand of its own), and the real outcome
/// with the inserted casts by name (`pvary[x]` is `pvary`,
/// `reduced_vary_cast_p[x]` is `reduced_vary_cast`).
fn jax_dialect(c: &Value, version: &str) -> Option<DialectCheck> {
    use spmd_dialects::{jax, OpClass, Operand};
    if c["inputs"].as_array().is_some_and(|a| a.len() == 3) {
        return jax_dialect_by_elaboration(c, version);
    }
    let state = |s: &str| -> Option<spmd_semantics::State> {
        spmd_semantics::Dialect::Jax
            .parse_state(s)
            .ok()
            .map(|t| t.0)
    };
    let mut operands: Vec<Operand> = Vec::new();
    for i in c["inputs"].as_array()? {
        operands.push(Operand::tensor(vec![state(i["state"].as_str()?)?]));
    }
    let op = match c["op"].as_str()? {
        "neg" => OpClass::Neg,
        "abs" => OpClass::Nonlinear,
        "sum" => OpClass::Sum,
        "add" => OpClass::Add,
        "sub" => OpClass::Sub,
        "mul" => OpClass::Mul,
        "div" => OpClass::Division,
        "dot" => OpClass::Matmul,
        // `2.0 * a`: a product whose first factor is a Python scalar.
        "mul_const" => {
            operands.insert(0, Operand::Scalar);
            OpClass::Mul
        }
        _ => return None,
    };
    let v = jax::Version::of(version);
    let ours = outcome_words(&jax::typing_operands_in(v, op, &operands), &|s| {
        jax::SYSTEM.state_name(s)
    });
    let r = &c["real"];
    let real = if r["accepted"] == true {
        let casts: Vec<&str> = r["inserted"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // JAX 0.12 also lists `convert_element_type` among the inserted
        // equations (`mul_const_V`: the weakly typed constant made float64);
        // a change of dtype, no cast of the sharding type, so not compared.
        let casts: Vec<&str> = casts
            .iter()
            .map(|p| {
                let p = p.split('[').next().unwrap_or(p);
                p.strip_suffix("_p").unwrap_or(p)
            })
            .filter(|p| *p != "convert_element_type")
            .collect();
        accepted_words(r["output"]["state"].as_str()?, &casts)
    } else {
        "refused".into()
    };
    Some(DialectCheck { ours, real })
}

/// A recorded spmd_types typing case: an `infer_local_type_for_axis` case
/// (LINEAR is add, or neg with one operand; MULTILINEAR is mul; NONLINEAR
/// is a nonlinear elementwise op; `Scalar` a Python scalar; `no_grad` and
/// `out_partial` as recorded), or a torch op under `typecheck()` (without
/// `requires_grad`, or under `torch.no_grad()`, every operand is no_grad).
/// DTensor's propagation (`spmd_dialects::dtensor`) against torch's, in
/// canonical letters: the output and each redistribution as
/// `redistribute(k: FROM->TO)` with the input k it moves.
fn dtensor_dialect(c: &Value) -> Option<DialectCheck> {
    use spmd_dialects::OpClass::*;
    let class = match c["op"].as_str()? {
        "neg" => Neg,
        "scale" => ScalarMul,
        "add_const" | "relu" | "abs" => Nonlinear,
        "square" => Mul,
        "sum" => Sum,
        "mean" => Mean,
        "amax" => Max,
        "transpose" => View,
        "floor" => NarrowingCast,
        "add" => Add,
        "sub" => Sub,
        "mul" => Mul,
        "div" => Division,
        "matmul" => Matmul,
        "cat" => Concat,
        _ => return None,
    };
    let letter = |p: &str| -> String {
        if p.starts_with("Shard(") {
            "V".into()
        } else if p == "Replicate()" {
            "I".into()
        } else if p == "Partial()" {
            "P".into()
        } else {
            p.to_string()
        }
    };
    let reads: &[usize] = dtensor_expr(c["op"].as_str()?)?.1;
    let ins = c["inputs"].as_array()?;
    let mut types = Vec::new();
    for &k in reads {
        let p = ins.get(k)?["placement"].as_str()?;
        types.push(vec![
            spmd_semantics::Dialect::Dtensor.parse_state(p).ok()?.0,
        ]);
    }
    let o = spmd_dialects::dtensor::typing_shard0(class, &types);
    let words = |out: &str, moves: &[String]| -> String {
        if moves.is_empty() {
            format!("accepted -> {out}")
        } else {
            format!("accepted -> {out} after {}", moves.join(", "))
        }
    };
    // Seed 001's grad-placement hook stands where torch returns a
    // Replicate() operand's gradient Partial(): both are said as
    // `grad Partial() on k`.
    let hook = spmd_dialects::dtensor::GRAD_HOOK;
    let pending = match types.as_slice() {
        [t] => spmd_dialects::dtensor::pending_output_shard0(class, t),
        _ => None,
    };
    let ours = match &o {
        _ if pending.is_some() => words(&pending.expect("some").dtensor(), &[]),
        spmd_dialects::Outcome::Infers { output, casts } => {
            let mut w = words(
                &output[0].letter().to_string(),
                &casts
                    .iter()
                    // A hook on a moved operand carries its move to I.
                    .filter(|m| m.name != hook || m.from != spmd_semantics::State::Invariant)
                    .map(|m| {
                        let to = if m.name == hook {
                            spmd_semantics::State::Invariant
                        } else {
                            m.to
                        };
                        format!(
                            "redistribute({}: {}->{})",
                            reads[m.input],
                            m.from.letter(),
                            to.letter()
                        )
                    })
                    .collect::<Vec<_>>(),
            );
            let mut hooked: Vec<usize> = casts
                .iter()
                .filter(|m| m.name == hook)
                .map(|m| reads[m.input])
                .collect();
            hooked.dedup();
            for k in hooked {
                w.push_str(&format!("; grad Partial() on {k}"));
            }
            w
        }
        other => outcome_words(other, &|s| s.letter().to_string()),
    };
    let r = &c["real"];
    let real = if r["accepted"] == true {
        // Moves are named by input (`x * x` reads input 0 twice, and either
        // operand may be the one moved).
        let mut moves = Vec::new();
        // Each input's placement after DTensor's moves.
        let mut after: Vec<String> = ins
            .iter()
            .map(|i| i["placement"].as_str().unwrap_or("?").to_string())
            .collect();
        for m in r["inserted"].as_array()? {
            let k = m["input"].as_u64()? as usize;
            moves.push(format!(
                "redistribute({k}: {}->{})",
                letter(m["from"].as_str()?),
                letter(m["to"].as_str()?)
            ));
            if let Some(a) = after.get_mut(k) {
                *a = m["to"].as_str()?.to_string();
            }
        }
        let mut w = words(&letter(r["output"].as_str()?), &moves);
        if let Some(g) = r["transpose"].as_array() {
            for (k, gk) in g.iter().enumerate() {
                if after.get(k).map(String::as_str) == Some("Replicate()")
                    && gk["placement"] == "Partial()"
                {
                    w.push_str(&format!("; grad Partial() on {k}"));
                }
            }
        }
        w
    } else {
        "refused".into()
    };
    Some(DialectCheck { ours, real })
}

fn spmd_types_dialect(c: &Value) -> Option<DialectCheck> {
    use spmd_dialects::{spmd_types, OpClass, Operand};
    let state = |s: &str| -> Option<spmd_semantics::State> {
        spmd_semantics::Dialect::SpmdTypes
            .parse_state(s)
            .ok()
            .map(|t| t.0)
    };
    let ins: Vec<&str> = c["inputs"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let r = &c["real"];
    let (op, flags, scalar, out_partial, real_out) = match c["source"].as_str()? {
        "infer_local_type_for_axis" => {
            let op = match c["op"].as_str()? {
                "linearity=LINEAR" if ins.len() == 1 => OpClass::Neg,
                "linearity=LINEAR" => OpClass::Add,
                "linearity=MULTILINEAR" => OpClass::Mul,
                "linearity=NONLINEAR" => OpClass::Nonlinear,
                _ => return None,
            };
            let flags: Vec<bool> = match c["no_grad"].as_array() {
                Some(a) => a.iter().map(|b| b == true).collect(),
                None => vec![false; ins.len()],
            };
            let out = r["output"].as_str().map(String::from);
            (op, flags, None, c["out_partial"] == true, out)
        }
        "torch" => {
            let (op, scalar) = match c["op"].as_str()? {
                "add" => (OpClass::Add, false),
                "sub" => (OpClass::Sub, false),
                "mul" => (OpClass::Mul, false),
                "div" => (OpClass::Division, false),
                "matmul" => (OpClass::Matmul, false),
                "neg" => (OpClass::Neg, false),
                "sum" => (OpClass::Sum, false),
                "clone" => (OpClass::View, false),
                "mul_scalar" => (OpClass::Mul, true),
                "add_scalar" => (OpClass::Add, true),
                // maximum, sin: not in the registry, NONLINEAR.
                "maximum" | "sin" => (OpClass::Nonlinear, false),
                _ => return None,
            };
            let ng = c["requires_grad"] != true || c["torch_no_grad"] == true;
            let out = r["output"]
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(Value::as_str)
                .map(String::from);
            (op, vec![ng; ins.len()], Some(scalar), false, out)
        }
        _ => return None,
    };
    let mut operands = Vec::new();
    for (k, s) in ins.iter().enumerate() {
        operands.push(if *s == "Scalar" {
            Operand::Scalar
        } else {
            Operand::Tensor {
                types: vec![state(s)?],
                no_grad: flags.get(k) == Some(&true),
            }
        });
    }
    if scalar == Some(true) {
        operands.push(Operand::Scalar);
    }
    let axes: &[usize] = if out_partial { &[0] } else { &[] };
    let o = if operands.iter().all(|o| *o == Operand::Scalar) {
        // Scalars alone: the real per-axis function types an empty column
        // of tensors; the dialect function needs the number of mesh axes.
        spmd_types::typing_scalars(op, operands.len(), 1, axes)
    } else {
        spmd_types::typing_operands(op, &operands, axes)
    };
    let ours = outcome_words(&o, &|s| s.letter().to_string());
    let real = if r["accepted"] == true {
        accepted_words(&real_out?, &[])
    } else {
        "refused".into()
    };
    Some(DialectCheck { ours, real })
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
