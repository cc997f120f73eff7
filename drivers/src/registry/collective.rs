//! A library's collectives, checked as it runs them (SPEC.md §22.5).
//!
//! An entry of family `collective` holds what the library did for one call
//! (`jax.lax.psum(x, 'x')`, ...) on an input of each state, on meshes of
//! several sizes: the output's state or the refusal, the primitives the
//! call and its transpose bind, and the per-rank values of both. Each
//! accepted state is one claim, "this call takes a value of this state to
//! one of that state, and this is its transpose". It is read into the
//! catalogue by the system's dialect (`spmd_dialects::jax::catalogue_call`),
//! built as a job in the system's names (`job::run_job_as_recorded`, no
//! elaboration), its values compared with the library's, and only then
//! judged by the oracle: F1-F3 and B1-B3 on the recorded mesh.

use super::{Class, Entry, Row};
use crate::fidelity::{differs, exact, forward_sound, oracle, Judged};
use serde_json::{json, Value};
use std::time::Instant;

/// The states a collective's input or output may be in, as JAX names them.
pub const STATES: &[&str] = &["Invariant", "Varying", "Unreduced", "Reduced"];

/// A parameter of a recorded primitive in JAX's spelling: `0`, `True`,
/// `[(0, 1), (1, 0)]`.
fn spelled(v: &Value) -> String {
    match v {
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Array(xs) if xs.iter().all(Value::is_array) => {
            let pairs: Vec<String> = xs
                .iter()
                .map(|p| {
                    let p: Vec<String> = p.as_array().into_iter().flatten().map(spelled).collect();
                    format!("({})", p.join(", "))
                })
                .collect();
            format!("[{}]", pairs.join(", "))
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A recorded jaxpr as the dialect reads it: the catalogue composition,
/// or why there is none.
fn read_jaxpr(eqns: &[super::Eqn], n: usize) -> Result<String, String> {
    let prims: Vec<spmd_dialects::jax::Prim> = eqns
        .iter()
        .map(|e| spmd_dialects::jax::Prim {
            name: e.prim.clone(),
            params: e
                .params
                .iter()
                .map(|(k, v)| (k.clone(), spelled(v)))
                .collect(),
            operands: e
                .operands
                .iter()
                .map(|v| (!v.is_null()).then(|| v.to_string()))
                .collect(),
            shapes: e.shapes.clone(),
            out: e.out.clone(),
        })
        .collect();
    spmd_dialects::jax::read_jaxpr(&prims, n)
}

/// The class of one recorded case, with the words that explain it.
fn judge_case(e: &Entry, c: &super::CollectiveCase) -> (Class, String) {
    let und = |why: String| (Class::Undetermined, why);
    if let Some(err) = &c.error {
        return und(format!("the recorder failed on this call: {err}"));
    }
    let Some(out) = c.output.as_deref() else {
        return und("refused".into());
    };
    let fwd = match read_jaxpr(&c.forward, c.n) {
        Ok(t) => t,
        Err(why) => {
            let also = c
                .backward_error
                .as_deref()
                .map(|e| format!("; and {e}"))
                .unwrap_or_default();
            return und(format!("forward: {why}{also}"));
        }
    };
    let bwd = match (&c.backward, &c.backward_error) {
        (Some(b), _) => match read_jaxpr(b, c.n) {
            Ok(t) => Some(t),
            Err(why) => return und(format!("transpose: {why}")),
        },
        (None, Some(_)) | (None, None) => None,
    };
    let mut job = json!({
        "dialect": "jax",
        "mesh": {"x": c.n},
        "forward": fwd,
        "inputs": [{"type": c.input, "per_rank": c.input_per_rank.clone().unwrap_or(Value::Null)}],
        "output": out,
    });
    if let Some(b) = &bwd {
        job["backward"] = json!(b);
        if let Some(ct) = &c.cotangent_per_rank {
            job["cotangent"] = ct.clone();
        }
    }
    let text = job.to_string();
    let where_ = format!("{} ({})", e.op, e.args);
    let parsed = match crate::job::parse_job(&where_, &text) {
        Ok(j) => j,
        Err(err) => return und(format!("our reading `{fwd}` cannot be built: {}", err.0)),
    };
    let rep = match crate::job::run_job_as_recorded(&parsed, &where_, &text, false) {
        Ok(r) => r,
        Err(err) => return und(format!("our reading `{fwd}` cannot be built: {}", err.0)),
    };
    // Our reading must compute what the library computed before its
    // verdict is about the library.
    let values = match (&c.run_error, &c.output_per_rank) {
        (Some(err), _) => format!("values not compared: the library did not run it ({err})"),
        (None, Some(real)) if exact(real).is_some() => {
            if let Some(d) = differs(&rep.output.value, real) {
                return und(format!(
                    "our reading `{fwd}` differs from the library's: {d}"
                ));
            }
            match (&rep.backward, &c.grad_per_rank) {
                (Some(b), Some(real)) if exact(real).is_some() => {
                    if let Some(d) = differs(&b[0].value, real) {
                        return und(format!(
                            "our reading `{}` of the transpose differs from jax.vjp's: {d}",
                            bwd.as_deref().unwrap_or_default()
                        ));
                    }
                    "forward and transpose values equal the library's".to_string()
                }
                (Some(_), _) => return und("no exact gradient values were recorded".into()),
                (None, _) => "forward values equal the library's".to_string(),
            }
        }
        _ => return und("no exact output values were recorded".into()),
    };
    let what = match &bwd {
        Some(b) => format!("`{fwd}`, transposed by `{b}`"),
        None => format!("`{fwd}`"),
    };
    match (&bwd, &c.backward_error) {
        (Some(_), _) => match oracle(&rep.rule) {
            Judged::Sound => (
                Class::Correct,
                format!("{what}: F1-F3, B1-B3 hold on {} ranks; {values}", c.n),
            ),
            Judged::Unsound(v) => (Class::Incorrect, format!("{what}: {v}; {values}")),
            Judged::Undetermined(why) => und(format!("{what}: {why}")),
        },
        (None, err) => {
            let raised = err
                .as_deref()
                .map(|e| format!("its transpose raises {e}"))
                .unwrap_or_else(|| "no transpose was recorded".into());
            match forward_sound(&rep.rule) {
                Judged::Unsound(v) => (Class::Incorrect, format!("{what}: {v}; {values}")),
                Judged::Sound => und(format!(
                    "{what}: the forward holds (F1-F3 on {} ranks), but {raised}",
                    c.n
                )),
                Judged::Undetermined(why) => und(format!("{what}: {why}; {raised}")),
            }
        }
    }
}

/// The rows of a collective entry: one per input state the library
/// accepts on some mesh, the worst of its mesh sizes (incorrect, then
/// undetermined, then correct). A refusal is no claim.
pub(super) fn rows(e: &Entry, cases: &[super::CollectiveCase]) -> Vec<Row> {
    let mut out = Vec::new();
    for state in STATES {
        let mine: Vec<&super::CollectiveCase> =
            cases.iter().filter(|c| c.input == *state).collect();
        let Some(first) = mine.iter().find(|c| c.output.is_some()) else {
            continue;
        };
        let t0 = Instant::now();
        let mut worst: Option<(Class, String, usize)> = None;
        for c in &mine {
            let (class, detail) = if c.output.is_none() {
                (
                    Class::Undetermined,
                    format!(
                        "accepted on {} devices but refused on {}: {}",
                        first.n,
                        c.n,
                        c.refused.as_deref().unwrap_or("")
                    ),
                )
            } else if c.output != first.output {
                (
                    Class::Undetermined,
                    format!(
                        "the output is {} on {} devices and {} on {}",
                        first.output.as_deref().unwrap_or_default(),
                        first.n,
                        c.output.as_deref().unwrap_or_default(),
                        c.n
                    ),
                )
            } else {
                judge_case(e, c)
            };
            let rank = |k: Class| match k {
                Class::Incorrect => 0,
                Class::Undetermined => 1,
                _ => 2,
            };
            if worst.as_ref().is_none_or(|w| rank(class) < rank(w.0)) {
                worst = Some((class, detail, c.n));
            }
        }
        let (class, detail, n) = worst.expect("at least the accepted case");
        let sizes: Vec<String> = mine.iter().map(|c| c.n.to_string()).collect();
        out.push(Row {
            op: e.op.clone(),
            args: e.args.clone(),
            inputs: vec![state.to_lowercase()],
            output: first.output.as_deref().unwrap_or_default().to_lowercase(),
            class,
            detail: if class == Class::Correct {
                format!("{detail} (meshes of {} devices)", sizes.join(", "))
            } else {
                format!("on {n} devices: {detail}")
            },
            verdict: None,
            millis: t0.elapsed().as_millis(),
            cex: None,
            repro: None,
        });
    }
    out
}
