//! The native half of the `spmd_check` Python package (SPEC.md §20.1).
//!
//! Every function takes text (a rule file, a job) and returns JSON text; the
//! pure-Python half (`spmd_check/__init__.py`) turns that into verdict
//! objects with exact `fractions.Fraction` values. Nothing here computes a
//! verdict: the root library does, exactly as `spmd-check check` would.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{json, Value};
use spmd_check::check::{check_rule, place_in, CheckConfig, PendingReport, RuleReport};
use spmd_check::generators::Scope;
use spmd_check::interp::external::{
    from_f64, to_f64, External, KernelError, MAX_KERNEL_ELEMENTS, MAX_KERNEL_RANK,
};
use spmd_check::oracle::Violation;
use spmd_check::run::UsageError;
use spmd_check::semantics::Tensor;

create_exception!(
    _native,
    BadInput,
    PyValueError,
    "Bad input: a rule, job, expression or flag the tool refuses (the CLI's exit code 2)."
);

fn bad(e: UsageError) -> PyErr {
    BadInput::new_err(pythonic(&e.0))
}

/// The library's messages name the CLI's flags (`raise --max-points`);
/// from Python the same knob is a keyword argument (`max_points=`). Each
/// `--flag` this package has a parameter for is renamed; a value after it
/// stays (`--max-instances 5000` is `max_instances=5000`), and a switch
/// becomes `=True`.
pub fn pythonic(msg: &str) -> String {
    // (flag, parameter, takes a value)
    const FLAGS: &[(&str, &str, bool)] = &[
        ("--cases", "cases", true),
        ("--seed", "seed", true),
        ("--scope", "scope", true),
        ("--time-limit", "time_limit", true),
        ("--max-instances", "max_instances", true),
        ("--max-points", "max_points", true),
        ("--max-free", "max_free", true),
        ("--max-rank", "max_rank", true),
        ("--max-dim", "max_dim", true),
        ("--mesh-dims", "mesh_dims", false),
        ("--expr", "expr", true),
        ("--dialect", "dialect", true),
        ("--global", "global_", false),
        ("--check", "check", false),
    ];
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find("--") {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let len = 2 + tail[2..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .unwrap_or(tail.len() - 2);
        let flag = &tail[..len];
        let Some(&(_, param, value)) = FLAGS.iter().find(|(f, _, _)| *f == flag) else {
            out.push_str(flag);
            rest = &tail[len..];
            continue;
        };
        rest = &tail[len..];
        if !value {
            out.push_str(param);
            out.push_str("=True");
            continue;
        }
        // A value written after the flag: a number, or a word such as
        // `large` for --scope.
        let v = rest.strip_prefix(' ').map(|r| {
            let n = r
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(r.len());
            &r[..n]
        });
        match v {
            Some(v) if v.starts_with(|c: char| c.is_ascii_digit()) => {
                out.push_str(&format!("{param}={v}"));
                rest = &rest[1 + v.len()..];
            }
            Some(v @ ("small" | "default" | "large")) if param == "scope" => {
                out.push_str(&format!("{param}=\"{v}\""));
                rest = &rest[1 + v.len()..];
            }
            _ => {
                out.push_str(param);
                out.push('=');
            }
        }
    }
    out.push_str(rest);
    out
}

/// A rule given from Python as dicts, laid out as JSON with one value per
/// line, and for each line the Python key path of what is on it
/// (`rule["inputs"][1]`). Every error the parser and the elaboration give
/// as `<dict>:LINE:COL` is then said as that key path: the user never wrote
/// a rule file, so a line and column would point into nothing they have.
struct Laid {
    text: String,
    paths: Vec<String>,
}

/// The file name errors give for a rule laid out from dicts.
const DICT_FILE: &str = "<dict>";

impl Laid {
    /// `rules`: the JSON of a list of rule dicts; `single`: the user gave
    /// one dict (its path is `rule`), not a list (`rule[0]`, ...).
    fn new(rules: &str, single: bool) -> PyResult<Laid> {
        let v: Value = serde_json::from_str(rules)
            .map_err(|e| BadInput::new_err(format!("rule: not a rule dict ({e})")))?;
        let Value::Array(items) = v else {
            return Err(BadInput::new_err(
                "rule: expected a dict or a list of dicts",
            ));
        };
        let mut lines: Vec<(String, String)> = vec![
            ("{".into(), "rule".into()),
            ("\"rule\": [".into(), "rule".into()),
        ];
        let n = items.len();
        for (i, item) in items.iter().enumerate() {
            let path = if single {
                "rule".to_string()
            } else {
                format!("rule[{i}]")
            };
            Self::lay(item, "", &path, i + 1 < n, &mut lines);
        }
        lines.push(("]".into(), "rule".into()));
        lines.push(("}".into(), "rule".into()));
        let text = lines
            .iter()
            .map(|(l, _)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Laid {
            text,
            paths: lines.into_iter().map(|(_, p)| p).collect(),
        })
    }

    /// One value, after `prefix` (`"key": ` or nothing), at `path`.
    fn lay(v: &Value, prefix: &str, path: &str, comma: bool, lines: &mut Vec<(String, String)>) {
        let c = if comma { "," } else { "" };
        match v {
            Value::Array(xs) if !xs.is_empty() => {
                lines.push((format!("{prefix}["), path.to_string()));
                for (i, x) in xs.iter().enumerate() {
                    Self::lay(x, "", &format!("{path}[{i}]"), i + 1 < xs.len(), lines);
                }
                lines.push((format!("]{c}"), path.to_string()));
            }
            Value::Object(m) if !m.is_empty() => {
                lines.push((format!("{prefix}{{"), path.to_string()));
                for (i, (k, x)) in m.iter().enumerate() {
                    let key = Value::String(k.clone()).to_string();
                    Self::lay(
                        x,
                        &format!("{key}: "),
                        &format!("{path}[{key}]"),
                        i + 1 < m.len(),
                        lines,
                    );
                }
                lines.push((format!("}}{c}"), path.to_string()));
            }
            scalar => lines.push((format!("{prefix}{scalar}{c}"), path.to_string())),
        }
    }

    /// `msg` with every `<dict>:LINE:COL` said as the key path on that line,
    /// and serde_json's own trailing position dropped.
    fn say(&self, msg: &str) -> String {
        let mut out = String::new();
        let mut rest = msg;
        let marker = format!("{DICT_FILE}:");
        while let Some(i) = rest.find(&marker) {
            out.push_str(&rest[..i]);
            let after = &rest[i + marker.len()..];
            let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let l = digits(after);
            let line: Option<usize> = after[..l].parse().ok();
            let mut used = l;
            if after[l..].starts_with(':') {
                let c = digits(&after[l + 1..]);
                if c > 0 {
                    used = l + 1 + c;
                }
            }
            match line.and_then(|n| self.paths.get(n.wrapping_sub(1))) {
                Some(p) => out.push_str(p),
                // No line: the message is about the rules as a whole.
                None => out.push_str("rule:"),
            }
            rest = &after[used..];
        }
        out.push_str(rest);
        // serde_json ends its messages with " at line L column C".
        if let Some(i) = out.rfind(" at line ") {
            let tail = &out[i + " at line ".len()..];
            let is_pos = tail.split_once(" column ").is_some_and(|(a, b)| {
                !a.is_empty()
                    && a.chars().all(|c| c.is_ascii_digit())
                    && b.trim_end().chars().all(|c| c.is_ascii_digit())
            });
            if is_pos {
                let end = out[i..].find('\n').map_or(out.len(), |j| i + j);
                out.replace_range(i..end, "");
            }
        }
        out
    }
}

/// Where a rule text came from: its file name, its text, and for dicts the
/// key paths of its lines.
struct Source {
    file: String,
    text: String,
    laid: Option<Laid>,
}

impl Source {
    fn new(file: &str, text: &str, dicts: Option<(&str, bool)>) -> PyResult<Source> {
        Ok(match dicts {
            Some((rules, single)) => {
                let laid = Laid::new(rules, single)?;
                Source {
                    file: DICT_FILE.into(),
                    text: laid.text.clone(),
                    laid: Some(laid),
                }
            }
            None => Source {
                file: file.into(),
                text: text.into(),
                laid: None,
            },
        })
    }
    fn err(&self, e: UsageError) -> PyErr {
        let msg = match &self.laid {
            Some(l) => l.say(&e.0),
            None => e.0,
        };
        BadInput::new_err(pythonic(&msg))
    }
}

/// The most random cases per rule, as the CLI's `--cases` allows.
const MAX_CASES: u32 = 1_000_000;

/// The scope limits a Python call may set, as the CLI's flags of the same
/// names (`max_instances=` is `--max-instances`), with the CLI's ranges.
#[derive(Default, Clone, Copy)]
struct Limits {
    max_free: Option<u64>,
    max_points: Option<u64>,
    max_instances: Option<u64>,
    max_rank: Option<u64>,
    max_dim: Option<u64>,
    mesh_dims: bool,
}

impl Limits {
    fn from_py(d: Option<std::collections::HashMap<String, u64>>) -> PyResult<Limits> {
        let mut l = Limits::default();
        for (k, v) in d.unwrap_or_default() {
            let (slot, lo, hi) = match k.as_str() {
                "max_free" => (&mut l.max_free, 1, 64),
                "max_points" => (&mut l.max_points, 1, u64::MAX),
                "max_instances" => (&mut l.max_instances, 1, 100_000_000),
                "max_rank" => (&mut l.max_rank, 1, 4),
                "max_dim" => (&mut l.max_dim, 1, 8),
                "mesh_dims" => {
                    l.mesh_dims = v != 0;
                    continue;
                }
                other => return Err(BadInput::new_err(format!("unknown limit `{other}`"))),
            };
            if v < lo || v > hi {
                return Err(BadInput::new_err(format!("{k}={v}: expected {lo} to {hi}")));
            }
            *slot = Some(v);
        }
        Ok(l)
    }
}

fn check_cases(cases: u32) -> PyResult<()> {
    if cases > MAX_CASES {
        return Err(BadInput::new_err(format!(
            "cases={cases}: at most {MAX_CASES} random cases per rule"
        )));
    }
    Ok(())
}

/// A time limit in seconds (`time_limit=`): positive and finite, at most a
/// year (an `Instant` that far ahead is still representable).
fn deadline(time_limit: Option<f64>) -> PyResult<Option<std::time::Instant>> {
    match time_limit {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 && t <= 365.0 * 86400.0 => Ok(Some(
            std::time::Instant::now() + std::time::Duration::from_secs_f64(t),
        )),
        Some(t) => Err(BadInput::new_err(format!(
            "time_limit={t}: expected a number of seconds above 0 and at most a year"
        ))),
    }
}

/// Run `work` on a thread of its own while this one watches for Ctrl-C.
/// Python handles signals only on its main thread, between bytecodes; while
/// Rust works nothing would, and a kernel called from Rust would take the
/// KeyboardInterrupt for its own failure. Here Ctrl-C sets the stop flag,
/// the work ends at its next instance (a kernel is not called again), and
/// KeyboardInterrupt is raised. `time_limit` (seconds) stops the work as
/// the CLI's `--time-limit` does: the verdict is then undetermined.
fn interruptible<T: Send>(
    py: Python<'_>,
    time_limit: Option<f64>,
    work: impl FnOnce() -> T + Send,
) -> PyResult<T> {
    use spmd_check::run::INTERRUPTED;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};
    match deadline(time_limit)? {
        Some(at) => spmd_check::run::set_deadline(at),
        None => spmd_check::run::clear_deadline(),
    }
    let out = std::thread::scope(|s| {
        let h = s.spawn(work);
        let mut caught: Option<PyErr> = None;
        loop {
            py.allow_threads(|| {
                let t = Instant::now();
                while !h.is_finished() && t.elapsed() < Duration::from_millis(50) {
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            if h.is_finished() {
                break;
            }
            if caught.is_none() {
                if let Err(e) = py.check_signals() {
                    INTERRUPTED.store(true, Ordering::SeqCst);
                    caught = Some(e);
                }
            }
        }
        let out = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        // Later calls start afresh. A kernel that raised KeyboardInterrupt
        // itself set the flag too: that is Ctrl-C, not the kernel's failure.
        let interrupted = INTERRUPTED.swap(false, Ordering::SeqCst);
        match caught {
            Some(e) => Err(e),
            None if interrupted => Err(pyo3::exceptions::PyKeyboardInterrupt::new_err(())),
            None => Ok(out),
        }
    });
    spmd_check::run::clear_deadline();
    out
}

/// The scope presets of the CLI's `--scope`, and its `--max-*` flags over
/// them.
fn scope(name: &str, limits: Limits) -> PyResult<Scope> {
    let mut s = preset(name)?;
    if let Some(v) = limits.max_free {
        s.max_free = v as usize;
    }
    if let Some(v) = limits.max_points {
        s.max_points = v;
    }
    if let Some(v) = limits.max_instances {
        s.max_instances = v;
    }
    if let Some(v) = limits.max_rank {
        s.max_rank = v as usize;
    }
    if let Some(v) = limits.max_dim {
        s.max_dim = v as usize;
    }
    s.mesh_dims |= limits.mesh_dims;
    Ok(s)
}

fn preset(name: &str) -> PyResult<Scope> {
    let mut s = Scope::default();
    match name {
        "default" => {}
        "small" => s.meshes.retain(|m| m.axes.iter().all(|a| a.size <= 2)),
        "large" => {
            s.max_free = 6;
            s.max_points = 4096;
        }
        other => {
            return Err(BadInput::new_err(format!(
                "scope `{other}`: expected default, small or large"
            )))
        }
    }
    Ok(s)
}

/// A counterexample with every shown value exact: per rank, the flat
/// row-major elements as "p/q" strings, and the shape.
pub fn violation_value(v: &Violation, rep: &RuleReport) -> Value {
    let values: Vec<Value> = v
        .shown
        .iter()
        .map(|s| {
            json!({
                "label": s.label,
                "input": s.input,
                "alternative": s.alternative,
                "type": s.ty.display_in(&v.mesh, rep.dialect),
                "shape": s.value.shape().to_vec(),
                "per_rank": s.value.tensors.iter()
                    .map(|t| t.data.iter().map(|q| q.to_string()).collect::<Vec<_>>())
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "property": v.property.code(),
        "title": v.property.title(),
        "mesh": v.mesh.axes.iter().map(|a| json!([a.name, a.size])).collect::<Vec<_>>(),
        "what": v.what,
        "expected": v.expected,
        "actual": v.actual,
        "values": values,
        "report": v.report_in(rep.dialect),
    })
}

fn check_text_inner(
    src: &Source,
    cases: u32,
    seed: u64,
    scope: Scope,
    only: Option<&str>,
) -> PyResult<String> {
    let (file, text) = (src.file.as_str(), src.text.as_str());
    let mut specs = spmd_check::rules::parse_file(file, text).map_err(|e| src.err(e))?;
    if let Some(name) = only {
        specs.retain(|s| s.name == name);
        if specs.is_empty() {
            return Err(BadInput::new_err(format!(
                "{file}: no rule named \"{name}\""
            )));
        }
    }
    let rules = spmd_check::rules::build(file, text, &specs, &scope).map_err(|e| src.err(e))?;
    let cfg = CheckConfig { scope, cases, seed };
    let mut out = Vec::new();
    for (spec, rule) in specs.iter().zip(&rules) {
        let rep = check_rule(rule, &cfg, &[], &|_| {});
        out.push(report_value(&rep, file, &spmd_check::rules::to_toml(spec)));
    }
    Ok(Value::Array(out).to_string())
}

/// A pending-kinds counterexample (SPEC.md §21.7) in the fields of
/// `violation_value`: the inputs and the per-rank outputs, exact.
fn pending_violation_value(p: &PendingReport, rep: &RuleReport) -> Value {
    let Some((property, cex)) = p.refuted() else {
        return Value::Null;
    };
    let r = &p.rule;
    let value = |label: &str, input: bool, ty: String, ts: &[Tensor]| {
        json!({
            "label": label,
            "input": input,
            "alternative": false,
            "type": ty,
            "shape": ts.first().map_or(vec![], |t| t.shape.to_vec()),
            "per_rank": ts.iter()
                .map(|t| t.data.iter().map(|q| q.to_string()).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
        })
    };
    let mut values: Vec<Value> = cex
        .inputs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let label = r.f.vars.get(i).map_or("?", String::as_str);
            value(label, true, place_in(rep.dialect, r.inputs[i]), x)
        })
        .collect();
    // A transcendental op's outputs are in the exact field of SPEC.md §19,
    // not rationals: they are in `expected`, `actual` and `report` only.
    let (expected, actual) = match &cex.field {
        Some(fv) => (fv.expected.clone(), fv.denoted.clone()),
        None => {
            let out = place_in(rep.dialect, r.output);
            values.push(value("output", false, out, &cex.per_rank));
            let den = cex.denoted.as_ref().map(|t| t.to_string());
            (cex.expected.to_string(), den)
        }
    };
    json!({
        "property": property,
        "title": if property == "F1" {
            "F1 closure (SPEC.md §21.2)"
        } else {
            "F3 spec (SPEC.md §21.2)"
        },
        "mesh": [[r.axis, cex.n]],
        "what": p.word(),
        "expected": expected,
        "actual": actual.unwrap_or_else(|| "no value (not well formed)".into()),
        "values": values,
        "report": p.report(rep.dialect),
    })
}

/// One rule's verdict as the Python half reads it, its hints naming this
/// package's parameters (`pythonic`).
fn report_value(rep: &RuleReport, file: &str, rule_toml: &str) -> Value {
    let mut j = report_value_cli(rep, file, rule_toml);
    for k in ["summary", "report", "reason"] {
        if let Some(Value::String(t)) = j.get(k) {
            j[k] = json!(pythonic(t));
        }
    }
    j
}

fn report_value_cli(rep: &RuleReport, file: &str, rule_toml: &str) -> Value {
    if let Some(p) = &rep.pending {
        // A rule with pending kinds: its own report, never the core
        // verdict's summary of it.
        let mut j = p.json(rep.dialect);
        let summary = p.word();
        let mut report = format!(
            "rule \"{}\": {summary}\n",
            spmd_check::report::quoted_name(&rep.name)
        );
        report.push_str(&p.report(rep.dialect));
        j["counterexample"] = pending_violation_value(p, rep);
        j["name"] = json!(rep.name);
        j["file"] = json!(file);
        j["sound"] = json!(j["verdict"] == "sound");
        j["summary"] = json!(summary);
        j["report"] = json!(report);
        j["no_grad"] = json!(rep.no_grad);
        j["rule_toml"] = json!(rule_toml);
        return j;
    }
    let v = &rep.verdict;
    let summary = spmd_check::report::rule_word(rep);
    let mut j = spmd_check::report::verdict_json(v);
    let mut report = format!(
        "rule \"{}\": {summary}\n",
        spmd_check::report::quoted_name(&rep.name)
    );
    if let Some(x) = v.violation() {
        report.push_str(&x.report_in(rep.dialect));
        j["counterexample"] = violation_value(x, rep);
    }
    j["name"] = json!(rep.name);
    j["file"] = json!(file);
    j["sound"] = json!(v.is_sound());
    j["summary"] = json!(summary);
    j["report"] = json!(report);
    j["backward_checked"] = json!(rep.backward_checked);
    j["no_grad"] = json!(rep.no_grad);
    j["rule_toml"] = json!(rule_toml);
    j
}

/// check_text(file, text, cases, seed, scope, dicts, single, limits,
/// time_limit) -> JSON: one verdict per rule of a TOML or JSON rule text;
/// `file` names it in error messages. With `dicts` (the JSON of a list of
/// rule dicts) the text is ignored and errors name key paths.
#[pyfunction]
#[pyo3(signature = (file, text, cases=256, seed=0, scope="default", dicts=None, single=false, limits=None, time_limit=None, only=None))]
#[allow(clippy::too_many_arguments)]
fn check_text(
    py: Python<'_>,
    file: &str,
    text: &str,
    cases: u32,
    seed: u64,
    scope: &str,
    dicts: Option<&str>,
    single: bool,
    limits: Option<std::collections::HashMap<String, u64>>,
    time_limit: Option<f64>,
    only: Option<&str>,
) -> PyResult<String> {
    check_cases(cases)?;
    let sc = self::scope(scope, Limits::from_py(limits)?)?;
    let src = Source::new(file, text, dicts.map(|d| (d, single)))?;
    interruptible(py, time_limit, || {
        check_text_inner(&src, cases, seed, sc, only)
    })?
}

/// rule_names(file, text) -> JSON: `[name, line]` of each rule of a rule
/// text, in order (the line where its name is written, 1-based), for the
/// pytest plugin's one item per rule.
#[pyfunction]
fn rule_names(file: &str, text: &str) -> PyResult<String> {
    let specs = spmd_check::rules::parse_file(file, text).map_err(bad)?;
    let mut from = 0;
    let out: Vec<Value> = specs
        .iter()
        .map(|s| {
            let quoted = Value::String(s.name.clone()).to_string();
            let at = text[from..].find(&quoted).map_or(from, |i| from + i);
            from = at;
            json!([s.name, text[..at].matches('\n').count() + 1])
        })
        .collect();
    Ok(Value::Array(out).to_string())
}

/// emit(text, lang, scope) -> JSON: per rule with a counterexample, its
/// name and either the script (`--emit jax|pytorch`, SPEC.md §20.2) or why
/// none can be written.
#[pyfunction]
#[pyo3(signature = (text, lang, scope="default", dicts=None, single=false, limits=None))]
fn emit(
    py: Python<'_>,
    text: &str,
    lang: &str,
    scope: &str,
    dicts: Option<&str>,
    single: bool,
    limits: Option<std::collections::HashMap<String, u64>>,
) -> PyResult<String> {
    let lang = spmd_check::emit::Lang::parse(lang)
        .ok_or_else(|| BadInput::new_err(format!("lang `{lang}`: expected jax or pytorch")))?;
    let scope = self::scope(scope, Limits::from_py(limits)?)?;
    let src = Source::new("<string>", text, dicts.map(|d| (d, single)))?;
    interruptible(py, None, || {
        let (file, text) = (src.file.as_str(), src.text.as_str());
        let specs = spmd_check::rules::parse_file(file, text).map_err(|e| src.err(e))?;
        let rules = spmd_check::rules::build(file, text, &specs, &scope).map_err(|e| src.err(e))?;
        let cfg = CheckConfig {
            scope,
            cases: 0,
            seed: 0,
        };
        let mut out = Vec::new();
        for (spec, rule) in specs.iter().zip(&rules) {
            let rep = check_rule(rule, &cfg, &[], &|_| {});
            if let Some(v) = rep.verdict.violation() {
                let toml = spmd_check::rules::to_toml(spec);
                out.push(match spmd_check::emit::emit_script(lang, rule, &toml, v) {
                    Ok(s) => json!({"name": rule.name, "script": s, "why": null}),
                    Err(w) => json!({"name": rule.name, "script": null, "why": w}),
                });
            }
        }
        Ok(Value::Array(out).to_string())
    })?
}

/// read_rule_file(path) -> str: the file's text, with the CLI's limits.
#[pyfunction]
fn read_rule_file(path: &str) -> PyResult<String> {
    spmd_check::rules::read_text(path).map_err(bad)
}

/// derive(op, expr, dialect, global_, scope) -> JSON: the derived table.
#[pyfunction]
#[pyo3(signature = (op=None, expr=None, dialect=None, global_=false, scope="default", limits=None, time_limit=None))]
#[allow(clippy::too_many_arguments)]
fn derive(
    py: Python<'_>,
    op: Option<&str>,
    expr: Option<&str>,
    dialect: Option<&str>,
    global_: bool,
    scope: &str,
    limits: Option<std::collections::HashMap<String, u64>>,
    time_limit: Option<f64>,
) -> PyResult<String> {
    let sc = self::scope(scope, Limits::from_py(limits)?)?;
    let sys = spmd_check::derive::dialect_for(dialect, op, global_).map_err(bad)?;
    let f = match (op, expr) {
        (Some(name), None) => {
            spmd_check::interp::builtin(name).map_err(|e| BadInput::new_err(pythonic(&e)))?
        }
        (None, Some(e)) => spmd_check::interp::parse(e)
            .map_err(|err| BadInput::new_err(format!("expr `{e}`: {err}")))?,
        (Some(_), Some(_)) => return Err(BadInput::new_err("give either op or expr, not both")),
        (None, None) => return Err(BadInput::new_err("give an op (\"mul\") or expr=\"x * y\"")),
    };
    interruptible(py, time_limit, || {
        let rows = if global_ {
            spmd_check::derive::derive_global(&f, &sc, &|_| {})
        } else {
            spmd_check::derive::derive(&f, &sc, &|_| {})
        }
        .map_err(bad)?;
        let v = match sys {
            Some((sys, class)) => {
                let rs = spmd_check::derive::classify_rows(&rows, sys, class).map_err(bad)?;
                spmd_check::report::dialect_json(&rs, sys)
            }
            None => spmd_check::report::derive_json(&rows),
        };
        Ok(v.to_string())
    })?
}

/// registry(system, op, file, live, python, missing, incorrect_only,
/// show_repro) -> JSON: `spmd-check registry --json` (SPEC.md §22).
#[pyfunction]
#[pyo3(signature = (system, op=None, file=None, live=false, python=None, missing=true, incorrect_only=false, show_repro=false, time_limit=None))]
#[allow(clippy::too_many_arguments)]
fn registry(
    py: Python<'_>,
    system: &str,
    op: Option<String>,
    file: Option<String>,
    live: bool,
    python: Option<String>,
    missing: bool,
    incorrect_only: bool,
    show_repro: bool,
    time_limit: Option<f64>,
) -> PyResult<String> {
    use spmd_check::registry as reg;
    if live && file.is_some() {
        return Err(BadInput::new_err(
            "give either file= or live=True, not both",
        ));
    }
    let (f, source) =
        reg::load(system, file, live, python.as_deref(), op.as_deref()).map_err(bad)?;
    interruptible(py, time_limit, || {
        let opts = reg::Options {
            op_glob: op,
            missing,
            record: false,
        };
        let rep = reg::run(f, &source, &opts).map_err(bad)?;
        let doc = spmd_check::report::document(
            "registry",
            reg::to_json(&rep, incorrect_only, show_repro),
        );
        Ok(doc.to_string())
    })?
}

/// run_job(file, text, check) -> JSON: one instance on given values
/// (`spmd-check run`), with `exit_code` as the CLI's.
#[pyfunction]
#[pyo3(signature = (file, text, check=false))]
fn run_job(py: Python<'_>, file: &str, text: &str, check: bool) -> PyResult<String> {
    py.allow_threads(|| {
        let job = spmd_check::job::parse_job(file, text).map_err(bad)?;
        let rep = spmd_check::job::run_job(&job, file, text, check).map_err(bad)?;
        let mut v = rep.to_json();
        v["exit_code"] = json!(rep.exit_code());
        v["text"] = json!(rep.to_text());
        Ok(v.to_string())
    })
}

/// One tensor as (shape, float64 elements) for the Python adapters; `None`
/// if a value is outside float64's exact window (never called then).
fn to_py(t: &Tensor) -> Option<(Vec<usize>, Vec<f64>)> {
    let data = t.data.iter().map(to_f64).collect::<Option<Vec<_>>>()?;
    Some((t.shape.clone(), data))
}

fn from_py(name: &str, shape: Vec<usize>, data: Vec<f64>) -> Result<Tensor, KernelError> {
    let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if numel != Some(data.len()) {
        return Err(KernelError::Failed(format!(
            "{name} returned {} values for shape {shape:?}",
            data.len()
        )));
    }
    let q = data
        .iter()
        .map(|&x| {
            from_f64(x).ok_or_else(|| {
                KernelError::Inexact(format!(
                    "{name} returned {x:e}, outside float64's exact window (it may have been rounded)"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Tensor::new(shape, q))
}

fn py_failed(name: &str, e: PyErr) -> KernelError {
    // A Ctrl-C that reached the kernel stops the run; it is not the
    // kernel's failure, and `interruptible` raises KeyboardInterrupt.
    if Python::with_gil(|py| e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py)) {
        spmd_check::run::INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
        return KernelError::Stopped;
    }
    KernelError::Failed(format!("{name} raised {e}"))
}

type PyTensor = (Vec<usize>, Vec<f64>);

/// check_kernel(name, vars, degree, forward, backward, shape, inputs,
/// output, dialect, cases, seed, scope) -> JSON verdict. `forward(args)`
/// takes a list of (shape, floats) and returns one; `backward(args, g)`
/// returns a list; `shape(shapes)` returns the output shape or raises.
#[pyfunction]
#[pyo3(signature = (name, vars, degree, forward, backward, shape, inputs, output, dialect="spmd_types", cases=256, seed=0, scope="default", limits=None, time_limit=None))]
#[allow(clippy::too_many_arguments)]
fn check_kernel(
    py: Python<'_>,
    name: String,
    vars: Vec<String>,
    degree: Vec<u32>,
    forward: PyObject,
    backward: Option<PyObject>,
    shape: Option<PyObject>,
    inputs: Vec<String>,
    output: String,
    dialect: &str,
    cases: u32,
    seed: u64,
    scope: &str,
    limits: Option<std::collections::HashMap<String, u64>>,
    time_limit: Option<f64>,
) -> PyResult<String> {
    if degree.len() != vars.len() {
        return Err(BadInput::new_err(format!(
            "{name}: {} degrees for {} inputs",
            degree.len(),
            vars.len()
        )));
    }
    if let Some(d) = degree.iter().find(|&&d| d > 16) {
        return Err(BadInput::new_err(format!(
            "{name}: degree {d} is beyond what exact finite differences take (16)"
        )));
    }
    check_cases(cases)?;
    let d = spmd_check::semantics::Dialect::parse(dialect).map_err(BadInput::new_err)?;
    let sc = self::scope(scope, Limits::from_py(limits)?)?;
    let n1 = name.clone();
    let mut ext = External::new(&name, vars, degree, move |args: &[&Tensor]| {
        let a: Vec<PyTensor> = args
            .iter()
            .map(|t| to_py(t).expect("checked exact"))
            .collect();
        let (s, v): PyTensor = Python::with_gil(|py| {
            forward
                .call1(py, (a,))
                .and_then(|r| r.extract(py))
                .map_err(|e| py_failed(&n1, e))
        })?;
        from_py(&n1, s, v)
    });
    if let Some(b) = backward {
        let n2 = name.clone();
        ext = ext.with_backward(move |args: &[&Tensor], g: &Tensor| {
            let a: Vec<PyTensor> = args
                .iter()
                .map(|t| to_py(t).expect("checked exact"))
                .collect();
            let g = to_py(g).expect("checked exact");
            let gs: Vec<PyTensor> = Python::with_gil(|py| {
                b.call1(py, (a, g))
                    .and_then(|r| r.extract(py))
                    .map_err(|e| py_failed(&n2, e))
            })?;
            gs.into_iter().map(|(s, v)| from_py(&n2, s, v)).collect()
        });
    }
    // A shape function that gives an output too large to build is the
    // caller's error, not a shape that does not fit: it is kept here and
    // raised as BadInput after the run.
    let too_large: std::sync::Arc<std::sync::Mutex<Option<String>>> = Default::default();
    if let Some(sh) = shape {
        let too_large = too_large.clone();
        let sized = move |shapes: &[Vec<usize>]| {
            // The function raising says these shapes do not fit; returning
            // something that is not a shape is the caller's error.
            let s = Python::with_gil(|py| {
                let r = sh
                    .call1(py, (shapes.to_vec(),))
                    .map_err(|e| e.to_string())?;
                r.extract::<Vec<usize>>(py).map_err(|_| {
                    let got = r
                        .bind(py)
                        .repr()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|_| "?".into());
                    let why = format!(
                        "the shape function returned {} for {shapes:?}: expected a tuple of ints from 0 up",
                        spmd_check::words::excerpt(&got)
                    );
                    if let Ok(mut g) = too_large.lock() {
                        g.get_or_insert(why.clone());
                    }
                    why
                })
            })?;
            let numel = s.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
            if s.len() > MAX_KERNEL_RANK || numel.is_none_or(|n| n > MAX_KERNEL_ELEMENTS) {
                let why = format!(
                    "the shape function gave {s:?} for {shapes:?}: at most {MAX_KERNEL_RANK} dims and {MAX_KERNEL_ELEMENTS} elements"
                );
                if let Ok(mut g) = too_large.lock() {
                    g.get_or_insert(why.clone());
                }
                return Err(why);
            }
            Ok(s)
        };
        ext = ext.with_shape(sized);
    }
    let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let cfg = CheckConfig {
        scope: sc,
        cases,
        seed,
    };
    // The oracle's worker threads take the GIL for each call.
    let rep = interruptible(py, time_limit, || {
        spmd_check::check_external(ext, &ins, &output, d, &cfg)
    })?
    .map_err(bad)?;
    if let Some(why) = too_large.lock().ok().and_then(|g| g.clone()) {
        return Err(BadInput::new_err(format!("{name}: {why}")));
    }
    Ok(report_value(&rep, "<kernel>", "").to_string())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("BadInput", m.py().get_type::<BadInput>())?;
    // The crate's version, which is also the wheel's (pyproject.toml's
    // dynamic version) and the CLI's `--version`.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(check_text, m)?)?;
    m.add_function(wrap_pyfunction!(read_rule_file, m)?)?;
    m.add_function(wrap_pyfunction!(rule_names, m)?)?;
    m.add_function(wrap_pyfunction!(derive, m)?)?;
    m.add_function(wrap_pyfunction!(run_job, m)?)?;
    m.add_function(wrap_pyfunction!(check_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(emit, m)?)?;
    m.add_function(wrap_pyfunction!(registry, m)?)?;
    Ok(())
}
