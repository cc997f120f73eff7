//! JAX's recorded behaviour (SPEC.md §16): its collectives replayed as
//! users' `run` jobs, its typing cases (two and three operands) judged by
//! the oracle, and the `jax` dialect's typing against them.

use super::*;

pub(super) fn collective(c: &Value) -> (Class, String) {
    let real = &c["real"];
    let refused = real["error"].as_str().filter(|e| !e.is_empty());
    let why = c["why"].as_str().unwrap_or("");
    let job_v = &c["job"];
    if job_v.is_null() {
        let what = match refused {
            // "Raised", not "refused": the recorded error may be a crash of
            // the real system (an AttributeError inside torch) rather than a
            // typing refusal.
            Some(e) => format!("the real system raised {e}; {why}"),
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
        _ => match real["transpose_error"].as_str().filter(|e| !e.is_empty()) {
            // A transpose was spelled and run, and the real backward raised.
            Some(e) => format!(
                "forward equals the real system's; transpose not compared: the real backward raised {e}"
            ),
            None => format!(
                "forward equals the real system's; transpose not compared ({})",
                if why.is_empty() { "none spelled" } else { why }
            ),
        },
    };
    let mut note = note;
    note.push_str(&cot_note);
    oracle(&rep.rule).accepted(note)
}

/// The expression of a recorded JAX local op on operands `a`, `b`.
pub(super) fn jax_expr(op: &str, shapes: &[Vec<usize>]) -> Option<String> {
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

pub(super) fn jax_typing(c: &Value, version: &str) -> (Class, String) {
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

/// An accepted JAX case replayed through the user's path (SPEC.md §15.5):
/// the op as a `run` job in JAX's names, with no casts and no output
/// written, so the JAX dialect elaborates it (inserts the casts, infers the
/// output, picks JAX's transposes). The per-rank output and every operand's
/// gradient must equal JAX's; then the elaborated program is checked,
/// backward included. `None` when JAX could not differentiate it, or the
/// dialect does not read it as JAX did (refuses, or infers another output:
/// the dialect check reports that), so the recorded typing is judged as
/// recorded instead.
pub(super) fn jax_typing_with_backward(
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
pub(super) fn jax_state_is(t: &spmd_semantics::Type, name: &str) -> bool {
    t.states.len() == 1
        && spmd_semantics::Dialect::Jax
            .parse_state(name)
            .is_ok_and(|(s, _)| s == t.states[0])
}

/// A recorded JAX composition of three operands against the dialect's
/// elaboration of the same expression (SPEC.md §15.5), as a user's job on
/// the recorded states: accepted or refused, and the output. JAX types it
/// node by node, so where it puts a cast (on an operand or on an
/// intermediate) is not compared; the values are, by the user's path.
pub(super) fn jax_dialect_by_elaboration(c: &Value, version: &str) -> Option<DialectCheck> {
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
pub(super) fn jax_dialect(c: &Value, version: &str) -> Option<DialectCheck> {
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
