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

/// Whether `s` names a state of `system`'s collectives: JAX's four, or
/// spmd_types' R, I, V, P and S(d).
pub fn valid_state(system: &str, s: &str) -> bool {
    match system {
        "spmd_types" => {
            matches!(s, "R" | "I" | "V" | "P")
                || s.strip_prefix("S(")
                    .and_then(|r| r.strip_suffix(')'))
                    .is_some_and(|d| d.parse::<u8>().is_ok())
        }
        _ => STATES.contains(&s),
    }
}

/// A state as a row shows it: JAX's in lower case, spmd_types' as written.
fn shown_state(system: &str, s: &str) -> String {
    if system == "jax" {
        s.to_lowercase()
    } else {
        s.to_string()
    }
}

/// Recorded per-rank values as a job takes them: a registry file may write
/// each rank's tensor as text (`"2x2:1,2,3,4"`); nested lists pass as they
/// are.
fn per_rank_values(v: Option<&Value>) -> Value {
    let Some(v) = v else { return Value::Null };
    match v.as_array() {
        Some(ranks) if !ranks.is_empty() && ranks.iter().all(Value::is_string) => Value::Array(
            ranks
                .iter()
                .map(|t| {
                    t.as_str()
                        .and_then(|t| super::parse_tensor(t).ok())
                        .map(|t| crate::job::tensor_json(&t))
                        .unwrap_or(Value::Null)
                })
                .collect(),
        ),
        _ => v.clone(),
    }
}

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

/// How the system's dialect reads a recorded call: the forward, the
/// backward (`None`: the dialect's own choice, or none recorded), the
/// input's and output's types in the dialect's names, and whether the job
/// is elaborated by the dialect (its table picks the backward).
struct Reading {
    dialect: &'static str,
    forward: String,
    backward: Option<String>,
    input: String,
    output: String,
    elaborate: bool,
}

/// JAX: the recorded jaxprs, read primitive by primitive. spmd_types: the
/// call, spelled in its dialect's collective table, whose row gives the
/// backward.
fn reading(
    system: &str,
    e: &Entry,
    c: &super::CollectiveCase,
    out: &str,
) -> Result<Reading, String> {
    match system {
        "jax" => {
            let forward = read_jaxpr(&c.forward, c.n).map_err(|why| {
                let also = c
                    .backward_error
                    .as_deref()
                    .map(|e| format!("; and {e}"))
                    .unwrap_or_default();
                format!("forward: {why}{also}")
            })?;
            let backward = match &c.backward {
                Some(b) => Some(read_jaxpr(b, c.n).map_err(|why| format!("transpose: {why}"))?),
                None => None,
            };
            Ok(Reading {
                dialect: "jax",
                forward,
                backward,
                input: c.input.clone(),
                output: out.to_string(),
                elaborate: false,
            })
        }
        "spmd_types" => {
            let arg = |k: &str| {
                e.args.split(", ").find_map(|a| {
                    a.split_once('=')
                        .filter(|(key, _)| *key == k)
                        .map(|(_, v)| v.to_string())
                })
            };
            let fun = e.op.strip_prefix("spmd_types.").unwrap_or(&e.op);
            let (src, dst) = (
                arg("src").ok_or("no src in the arguments")?,
                arg("dst").ok_or("no dst in the arguments")?,
            );
            let (forward, input, output) =
                spmd_dialects::spmd_types::registry_call(fun, &src, &dst)?;
            if output != out {
                return Err(format!(
                    "the library's output is {out}; the dialect's reading gives {output}"
                ));
            }
            Ok(Reading {
                dialect: "spmd_types",
                forward,
                backward: None,
                input,
                output,
                elaborate: true,
            })
        }
        other => Err(format!("no reading of {other}'s collectives")),
    }
}

/// spmd_types' casts and redistribute from a type to the same type are
/// identities: sound whatever the type (F1–F3 and B1–B3 hold of the
/// identity with itself as transpose). What is checked is that the library
/// computes one: its output equals its input and its gradient the
/// cotangent, exactly, on the recorded values.
fn identity(system: &str, e: &Entry, c: &super::CollectiveCase) -> Option<(Class, String)> {
    let same_type = e.args.split(", ").find_map(|a| a.strip_prefix("src="))
        == e.args.split(", ").find_map(|a| a.strip_prefix("dst="));
    let cast = [
        "spmd_types.convert",
        "spmd_types.reinterpret",
        "spmd_types.redistribute",
    ];
    if system != "spmd_types" || !same_type || !cast.contains(&e.op.as_str()) {
        return None;
    }
    let tensors = |v: &Option<Value>| -> Option<Vec<spmd_semantics::Tensor>> {
        v.as_ref()?
            .as_array()?
            .iter()
            .map(|t| super::parse_tensor(t.as_str()?).ok())
            .collect()
    };
    let pairs = [
        ("output", &c.output_per_rank, "input", &c.input_per_rank),
        (
            "gradient",
            &c.grad_per_rank,
            "cotangent",
            &c.cotangent_per_rank,
        ),
    ];
    for (what, got, of, want) in pairs {
        match (tensors(got), tensors(want)) {
            (Some(g), Some(w)) if g == w => {}
            (Some(_), Some(_)) => {
                return Some((
                    Class::Incorrect,
                    format!("a cast to the same type is the identity, but the library's {what} differs from its {of} on {} ranks", c.n),
                ))
            }
            _ => {
                return Some((
                    Class::Undetermined,
                    format!("the identity's {what} or {of} was not recorded exactly"),
                ))
            }
        }
    }
    Some((
        Class::Correct,
        format!(
            "the identity: output and gradient equal input and cotangent on {} ranks",
            c.n
        ),
    ))
}

/// The class of one recorded case, with the words that explain it.
fn judge_case(system: &str, e: &Entry, c: &super::CollectiveCase) -> (Class, String) {
    let und = |why: String| (Class::Undetermined, why);
    if let Some(err) = &c.error {
        return und(format!("the recorder failed on this call: {err}"));
    }
    let Some(out) = c.output.as_deref() else {
        return und("refused".into());
    };
    if let Some(verdict) = identity(system, e, c) {
        return verdict;
    }
    let r = match reading(system, e, c, out) {
        Ok(r) => r,
        Err(why) => return und(why),
    };
    let fwd = r.forward.clone();
    let mut job = json!({
        "dialect": r.dialect,
        "mesh": {"x": c.n},
        "forward": fwd,
        "inputs": [{"type": r.input, "per_rank": per_rank_values(c.input_per_rank.as_ref())}],
        "output": r.output,
    });
    if let Some(b) = &r.backward {
        job["backward"] = json!(b);
    }
    if r.backward.is_some() || (r.elaborate && c.grad_per_rank.is_some()) {
        if let Some(ct) = &c.cotangent_per_rank {
            job["cotangent"] = per_rank_values(Some(ct));
        }
    }
    let text = job.to_string();
    let where_ = format!("{} ({})", e.op, e.args);
    let parsed = match crate::job::parse_job(&where_, &text) {
        Ok(j) => j,
        Err(err) => return und(format!("our reading `{fwd}` cannot be built: {}", err.0)),
    };
    let ran = if r.elaborate {
        crate::job::run_job(&parsed, &where_, &text, false)
    } else {
        crate::job::run_job_as_recorded(&parsed, &where_, &text, false)
    };
    let rep = match ran {
        Ok(rep) => rep,
        Err(err) => return und(format!("our reading `{fwd}` cannot be built: {}", err.0)),
    };
    // The backward the reading runs: JAX's recorded one, or the one the
    // dialect's table gives.
    let bwd: Option<String> = match (&r.backward, &rep.op.backward) {
        (Some(b), _) => Some(b.clone()),
        (None, spmd_interp::Backward::Transpose(op)) if rep.backward.is_some() => {
            Some(op.describe())
        }
        _ => None,
    };
    // Our reading must compute what the library computed before its
    // verdict is about the library.
    let out_real = c.output_per_rank.as_ref().map(|v| per_rank_values(Some(v)));
    let grad_real = c.grad_per_rank.as_ref().map(|v| per_rank_values(Some(v)));
    let values = match (&c.run_error, &out_real) {
        (Some(err), _) => format!("values not compared: the library did not run it ({err})"),
        (None, Some(real)) if exact(real).is_some() => {
            if let Some(d) = differs(&rep.output.value, real) {
                return und(format!(
                    "our reading `{fwd}` differs from the library's: {d}"
                ));
            }
            match (&rep.backward, &grad_real) {
                (Some(b), Some(real)) if exact(real).is_some() => {
                    if let Some(d) = differs(&b[0].value, real) {
                        return und(format!(
                            "our reading `{}` of the transpose differs from the library's gradient: {d}",
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
            let raised = match (err, &c.grad_per_rank) {
                (Some(e), _) => format!("its transpose raises {e}"),
                (None, Some(_)) => format!(
                    "the {} dialect's table names no transpose of it to compare with the library's gradient",
                    system
                ),
                (None, None) => "no transpose was recorded".into(),
            };
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
pub(super) fn rows(system: &str, e: &Entry, cases: &[super::CollectiveCase]) -> Vec<Row> {
    let mut out = Vec::new();
    let mut states: Vec<&str> = Vec::new();
    for c in cases {
        if !states.contains(&c.input.as_str()) {
            states.push(&c.input);
        }
    }
    for state in states {
        let mine: Vec<&super::CollectiveCase> = cases.iter().filter(|c| c.input == state).collect();
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
                judge_case(system, e, c)
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
            inputs: vec![shown_state(system, state)],
            output: shown_state(system, first.output.as_deref().unwrap_or_default()),
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
