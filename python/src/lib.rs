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
    BadInput::new_err(e.0)
}

/// The most random cases per rule, as the CLI's `--cases` allows.
const MAX_CASES: u32 = 1_000_000;

fn check_cases(cases: u32) -> PyResult<()> {
    if cases > MAX_CASES {
        return Err(BadInput::new_err(format!(
            "cases={cases}: at most {MAX_CASES} random cases per rule"
        )));
    }
    Ok(())
}

/// Run `work` on a thread of its own while this one watches for Ctrl-C.
/// Python handles signals only on its main thread, between bytecodes; while
/// Rust works nothing would, and a kernel called from Rust would take the
/// KeyboardInterrupt for its own failure. Here Ctrl-C sets the stop flag,
/// the work ends at its next instance, and KeyboardInterrupt is raised.
fn interruptible<T: Send>(py: Python<'_>, work: impl FnOnce() -> T + Send) -> PyResult<T> {
    use spmd_check::run::INTERRUPTED;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};
    std::thread::scope(|s| {
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
        match caught {
            Some(e) => {
                // Later calls start afresh.
                INTERRUPTED.store(false, Ordering::SeqCst);
                Err(e)
            }
            None => Ok(out),
        }
    })
}

/// The scope presets of the CLI's `--scope`.
fn scope(name: &str) -> PyResult<Scope> {
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

fn check_text_inner(file: &str, text: &str, cases: u32, seed: u64, sc: &str) -> PyResult<String> {
    let scope = scope(sc)?;
    let specs = spmd_check::rules::parse_file(file, text).map_err(bad)?;
    let rules = spmd_check::rules::build(file, text, &specs, &scope).map_err(bad)?;
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

/// One rule's verdict as the Python half reads it.
fn report_value(rep: &RuleReport, file: &str, rule_toml: &str) -> Value {
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

/// check_text(file, text, cases, seed, scope) -> JSON: one verdict per rule
/// of a TOML or JSON rule text; `file` names it in error messages.
#[pyfunction]
#[pyo3(signature = (file, text, cases=256, seed=0, scope="default"))]
fn check_text(
    py: Python<'_>,
    file: &str,
    text: &str,
    cases: u32,
    seed: u64,
    scope: &str,
) -> PyResult<String> {
    check_cases(cases)?;
    interruptible(py, || check_text_inner(file, text, cases, seed, scope))?
}

/// emit(text, lang, scope) -> JSON: per rule with a counterexample, its
/// name and either the script (`--emit jax|pytorch`, SPEC.md §20.2) or why
/// none can be written.
#[pyfunction]
#[pyo3(signature = (text, lang, scope="default"))]
fn emit(py: Python<'_>, text: &str, lang: &str, scope: &str) -> PyResult<String> {
    let lang = spmd_check::emit::Lang::parse(lang)
        .ok_or_else(|| BadInput::new_err(format!("lang `{lang}`: expected jax or pytorch")))?;
    let scope = self::scope(scope)?;
    py.allow_threads(|| {
        let specs = spmd_check::rules::parse_file("<string>", text).map_err(bad)?;
        let rules = spmd_check::rules::build("<string>", text, &specs, &scope).map_err(bad)?;
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
    })
}

/// read_rule_file(path) -> str: the file's text, with the CLI's limits.
#[pyfunction]
fn read_rule_file(path: &str) -> PyResult<String> {
    spmd_check::rules::read_text(path).map_err(bad)
}

/// derive(op, expr, dialect, global_, scope) -> JSON: the derived table.
#[pyfunction]
#[pyo3(signature = (op=None, expr=None, dialect=None, global_=false, scope="default"))]
fn derive(
    py: Python<'_>,
    op: Option<&str>,
    expr: Option<&str>,
    dialect: Option<&str>,
    global_: bool,
    scope: &str,
) -> PyResult<String> {
    let sc = self::scope(scope)?;
    let sys = spmd_check::derive::dialect_for(dialect, op, global_).map_err(bad)?;
    let f = match (op, expr) {
        (Some(name), None) => spmd_check::interp::builtin(name).map_err(BadInput::new_err)?,
        (None, Some(e)) => spmd_check::interp::parse(e)
            .map_err(|err| BadInput::new_err(format!("expr `{e}`: {err}")))?,
        (Some(_), Some(_)) => return Err(BadInput::new_err("give either op or expr, not both")),
        (None, None) => return Err(BadInput::new_err("give an op (\"mul\") or expr=\"x * y\"")),
    };
    interruptible(py, || {
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
    // kernel's failure (see `interruptible`).
    if Python::with_gil(|py| e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py)) {
        spmd_check::run::INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    KernelError::Failed(format!("{name} raised {e}"))
}

type PyTensor = (Vec<usize>, Vec<f64>);

/// check_kernel(name, vars, degree, forward, backward, shape, inputs,
/// output, dialect, cases, seed, scope) -> JSON verdict. `forward(args)`
/// takes a list of (shape, floats) and returns one; `backward(args, g)`
/// returns a list; `shape(shapes)` returns the output shape or raises.
#[pyfunction]
#[pyo3(signature = (name, vars, degree, forward, backward, shape, inputs, output, dialect="spmd_types", cases=256, seed=0, scope="default"))]
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
    let sc = self::scope(scope)?;
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
            let s = Python::with_gil(|py| {
                sh.call1(py, (shapes.to_vec(),))
                    .and_then(|r| r.extract::<Vec<usize>>(py))
                    .map_err(|e| e.to_string())
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
    let rep = interruptible(py, || {
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
    m.add_function(wrap_pyfunction!(derive, m)?)?;
    m.add_function(wrap_pyfunction!(run_job, m)?)?;
    m.add_function(wrap_pyfunction!(check_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(emit, m)?)?;
    Ok(())
}
