//! DTensor's recorded behaviour (SPEC.md §16.2): redistributions replayed
//! as jobs, sharding propagation of local ops (pending kinds included)
//! judged by the oracle, and the `dtensor` dialect against it.

use super::*;

/// A DTensor op as an expression of its operands `a`, `b` and, per
/// operand, the recorded input it reads (`x * x` reads input 0 twice).
pub(super) fn dtensor_expr(op: &str) -> Option<(&'static str, &'static [usize])> {
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
pub(super) fn other_partial(p: &str) -> bool {
    p.starts_with("Partial(") && p != "Partial()"
}

/// A DTensor case whose output is `Partial(avg | max | min)` (SPEC.md
/// §21.5): the op runs on each rank's local tensors and must give DTensor's
/// per-rank output exactly; the typing must defer (§21.2); and, where
/// DTensor recorded a gradient, it must equal the exact derivative of the op
/// on the global tensors paired with the cotangent (difference quotients,
/// §21.4; DTensor's own backward is only compared, never used).
pub(super) fn dtensor_pending(
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
    if let Some(e) = real["transpose_error"].as_str().filter(|e| !e.is_empty()) {
        note += &format!("; DTensor's backward raised {e} (gradients not compared)");
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
pub(super) fn run_json(job: &Value) -> Result<crate::job::JobReport, UsageError> {
    let text = job.to_string();
    parse_job("<fixture>", &text).and_then(|j| run_job_as_recorded(&j, "<fixture>", &text, false))
}

/// One redistribution as DTensor 2.14.1 performs it, on recorded per-rank
/// values: Replicate() to Partial() keeps value / n on every rank (its
/// `_partition_value`); every other move is this tool's `redistribute`.
pub(super) fn dtensor_move(x: &Value, from: &str, to: &str, n: u64) -> Result<Value, UsageError> {
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
pub(super) fn dtensor_typing(c: &Value) -> (Class, String) {
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
            "DTensor redistributed an operand, whose backward is DTensor's redistribute".to_string()
        } else if !one_to_one {
            "one input read twice".to_string()
        } else if let Some(e) = real["transpose_error"].as_str().filter(|e| !e.is_empty()) {
            format!("DTensor's backward raised {e}")
        } else {
            "DTensor recorded no gradient".to_string()
        }
    );
    forward_sound(&rule).accepted(note)
}

/// A recorded spmd_types typing case: an `infer_local_type_for_axis` case
/// (LINEAR is add, or neg with one operand; MULTILINEAR is mul; NONLINEAR
/// is a nonlinear elementwise op; `Scalar` a Python scalar; `no_grad` and
/// `out_partial` as recorded), or a torch op under `typecheck()` (without
/// `requires_grad`, or under `torch.no_grad()`, every operand is no_grad).
/// DTensor's propagation (`spmd_dialects::dtensor`) against torch's, in
/// canonical letters: the output and each redistribution as
/// `redistribute(k: FROM->TO)` with the input k it moves.
pub(super) fn dtensor_dialect(c: &Value) -> Option<DialectCheck> {
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
