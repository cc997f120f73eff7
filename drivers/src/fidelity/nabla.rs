//! The released Nabla's recorded behaviour (SPEC.md §16.4): its typing of
//! local ops on replicated and partial operands, replayed as recorded and
//! judged by the oracle, and the `nabla` dialect of the recorded version
//! (`nabla@26.2251344`) against it.

use super::*;

/// The recorded operands and output of a case, rank by rank.
fn per_rank(v: &Value) -> Option<spmd_semantics::PerRank> {
    Some(spmd_semantics::PerRank {
        tensors: exact(v)?
            .into_iter()
            .map(|(s, d)| spmd_semantics::Tensor::new(s, d))
            .collect(),
    })
}

/// The collectives and reshards Nabla ran for the call, by name.
fn inserted(real: &Value) -> Vec<String> {
    strings(&real["inserted"])
}

/// A recorded Nabla typing case, as recorded: the op on the operands'
/// recorded states (Nabla's names) to the recorded output state. Nabla
/// must have inserted nothing and run the op on the operands as given
/// (`seen_per_rank`); then the expression's per-rank output must be
/// Nabla's rank by rank (else the model misreads the case), and the typing
/// is judged by F1-F3: sound agrees, unsound is Nabla's defect with the
/// counterexample.
pub(super) fn nabla_typing(c: &Value) -> (Class, String) {
    let real = &c["real"];
    let Some(expr) = c["expr"].as_str() else {
        return (
            Class::NotExpressible(format!(
                "`{}` has no expression here: a float32 cast of these values is exact, and the model's cast rounds to fixed-point bits",
                c["op"].as_str().unwrap_or("?")
            )),
            String::new(),
        );
    };
    let ins = c["inputs"].as_array().cloned().unwrap_or_default();
    let states: Vec<String> = ins
        .iter()
        .map(|i| i["state"].as_str().unwrap_or("?").to_string())
        .collect();
    let n = c["mesh"]["x"].as_u64().unwrap_or(0) as usize;
    if n < 2 {
        return (
            Class::NotExpressible("no mesh axis `x` of two or more ranks".into()),
            String::new(),
        );
    }
    let mesh = Mesh::new(&[("x", n)]);
    if real["accepted"] != true {
        return judge_refusal_on("nabla", &mesh, expr, &states, real);
    }
    let ins_inserted = inserted(real);
    if !ins_inserted.is_empty() {
        return (
            Class::NotExpressible(format!(
                "Nabla inserted {}; only direct typings are replayed",
                ins_inserted.join(", ")
            )),
            String::new(),
        );
    }
    let xs: Option<Vec<_>> = ins.iter().map(|i| per_rank(&i["per_rank"])).collect();
    let Some(xs) = xs else {
        return (
            Class::NotExpressible("per-rank operands not readable".into()),
            String::new(),
        );
    };
    // Nabla's kernel saw the operands as given (no resharding).
    if let Some(seen) = real["seen_per_rank"].as_array() {
        for (k, (x, s)) in xs.iter().zip(seen).enumerate() {
            if let Some(d) = differs(x, s) {
                return (
                    Class::NotExpressible(format!(
                        "Nabla resharded operand {k} before the op ({d})"
                    )),
                    String::new(),
                );
            }
        }
    }
    let out = real["output"]["state"].as_str().unwrap_or("?");
    let rule = match local_rule("nabla", &mesh, expr, &states, out, &[]) {
        Ok(r) => r,
        Err(e) => {
            return (
                Class::ModelMismatch(format!("cannot build: {e}")),
                String::new(),
            )
        }
    };
    match rule.op.op.forward(&mesh, &xs) {
        Ok(f) => {
            if let Some(d) = differs(&f.y, &real["output_per_rank"]) {
                return (
                    Class::ModelMismatch(format!("`{expr}`: {d}")),
                    String::new(),
                );
            }
        }
        Err(e) => {
            return (
                Class::ModelMismatch(format!("`{expr}` on the recorded operands: {e:?}")),
                String::new(),
            )
        }
    }
    let note = format!(
        "accepted as {} -> {out} on {n} ranks, nothing inserted; per-rank output equals Nabla's; forward checked (F1-F3, the scope and 256 random cases)",
        states.join(", ")
    );
    forward_oracle(&rule).accepted(note)
}

/// F1-F3 over the whole scope, then 256 random cases (seed 0): Nabla's
/// gradients were not recorded, so the backward is not judged. The random
/// part matters: max(P) keeps partial wrongly, and its smallest
/// counterexample lies beyond the exhaustive grid.
fn forward_oracle(rule: &Rule) -> Judged {
    let mut r = rule.clone();
    r.has_backward = false;
    let rep = check_rule(&r, &config(256), &[], &|_| {});
    judged(&rep.verdict, &r)
}

/// A refusal on the case's own mesh: no recorded case is refused, so this
/// only keeps the classifier total.
fn judge_refusal_on(
    dialect: &str,
    mesh: &Mesh,
    expr: &str,
    states: &[String],
    real: &Value,
) -> (Class, String) {
    let outs = ["replicated", "partial", "sharded"];
    let sound: Vec<&str> = outs
        .iter()
        .filter(|o| {
            local_rule(dialect, mesh, expr, states, o, &[]).is_ok_and(|r| oracle(&r).is_sound())
        })
        .copied()
        .collect();
    let e = real["error"].as_str().unwrap_or("");
    if sound.is_empty() {
        (
            Class::Agree,
            format!("refused ({e}); no output type is sound"),
        )
    } else {
        (
            Class::SoundRejection,
            format!(
                "refused ({e}); sound as {} -> {}",
                states.join(", "),
                sound.join(" or ")
            ),
        )
    }
}

/// A recorded Nabla typing case through the `nabla` dialect of its version
/// (`nabla@26.2251344` for the release, else the seeds' `nabla`): accepted
/// or refused, the output state in Nabla's names, and the collectives
/// inserted, by name.
pub(super) fn nabla_dialect(c: &Value, version: &str) -> Option<DialectCheck> {
    use spmd_dialects::{nabla, OpClass};
    let state = |s: &str| -> Option<spmd_semantics::State> {
        spmd_semantics::Dialect::Nabla
            .parse_state(s)
            .ok()
            .map(|t| t.0)
    };
    let mut inputs: Vec<Vec<spmd_semantics::State>> = Vec::new();
    for i in c["inputs"].as_array()? {
        inputs.push(vec![state(i["state"].as_str()?)?]);
    }
    let op = match c["op"].as_str()? {
        "neg" => OpClass::Neg,
        // `a * 2.0`: Nabla makes the scalar a replicated constant.
        "mul_const" => OpClass::ScalarMul,
        "add_const" | "relu" | "abs" => OpClass::Nonlinear,
        "sum" => OpClass::Sum,
        "mean" => OpClass::Mean,
        "max" => OpClass::Max,
        "cumsum" => OpClass::Cumsum,
        "slice" | "transpose" | "reshape" => OpClass::View,
        "cast_f32" => OpClass::NarrowingCast,
        "add" => OpClass::Add,
        "sub" => OpClass::Sub,
        "mul" => OpClass::Mul,
        "div" => OpClass::Division,
        "concat" => OpClass::Concat,
        "matmul" => OpClass::Matmul,
        _ => return None,
    };
    let sys = nabla::Version::of(version).system();
    let ours = outcome_words(&(sys.typing)(op, &inputs), &|s| sys.state_name(s));
    let r = &c["real"];
    let real = if r["accepted"] == true {
        let casts = inserted(r);
        let casts: Vec<&str> = casts.iter().map(String::as_str).collect();
        accepted_words(r["output"]["state"].as_str()?, &casts)
    } else {
        "refused".into()
    };
    Some(DialectCheck { ours, real })
}
