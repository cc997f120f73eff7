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
    let xs: Option<Vec<_>> = ins.iter().map(|i| per_rank(&i["per_rank"])).collect();
    let Some(xs) = xs else {
        return (
            Class::NotExpressible("per-rank operands not readable".into()),
            String::new(),
        );
    };
    // The operands as Nabla's kernel saw them: as given, or after a reshard
    // Nabla inserted, which is checked value by value.
    let seen_v = real["seen_per_rank"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut seen_states = states.clone();
    let mut seen_xs = xs.clone();
    let mut moves = Vec::new();
    for (k, x) in xs.iter().enumerate() {
        let Some(sv) = seen_v.get(k) else { continue };
        let Some(sx) = per_rank(sv) else {
            return (
                Class::NotExpressible(format!("operand {k} as seen not readable")),
                String::new(),
            );
        };
        match reshard(&states[k], x, &sx) {
            Ok(None) => {}
            Ok(Some((to, what))) => {
                moves.push(format!("{what} of operand {k} ({} -> {to})", states[k]));
                seen_states[k] = to.to_string();
                seen_xs[k] = sx;
            }
            Err(why) => {
                return (
                    Class::NotExpressible(format!("operand {k}: {why}")),
                    String::new(),
                )
            }
        }
    }
    // The collectives Nabla inserted (`shard` is the slicing of a scalar's
    // constant, or the no-op reshard after an all_gather: no collective).
    let collectives: Vec<String> = inserted(real)
        .into_iter()
        .filter(|c| c != "shard")
        .collect();
    let gathered = moves.iter().any(|m| m.starts_with("all_gather"));
    // A reduction over the sharded dim: the op on each rank's block, then
    // an all_reduce of the results (see `global_reduction`).
    let reduced_after = moves.is_empty() && collectives == ["all_reduce"];
    let expected: &[&str] = if gathered { &["all_gather"] } else { &[] };
    if !reduced_after && collectives != expected {
        return (
            Class::NotExpressible(format!(
                "Nabla inserted {} and the operands it ran on do not explain it",
                collectives.join(", ")
            )),
            String::new(),
        );
    }
    let (states, xs) = (seen_states, seen_xs);
    let recorded_out = real["output"]["state"].as_str().unwrap_or("?");
    let op = c["op"].as_str().unwrap_or("?");
    if reduced_after {
        return global_reduction(op, &xs, &real["output_per_rank"]);
    }
    if op == "slice" && states.iter().any(|s| s == "sharded") {
        return (
            Class::NotExpressible(
                "a slice of the sharded dim: Nabla takes the global slice, so some ranks hold an empty block (uneven shards, which the semantics does not model, SPEC.md §13.1)".into(),
            ),
            String::new(),
        );
    }
    // Sharded operands that stay sharded are judged with their layout
    // (dim 0, SPEC.md §13): whether the output's blocks are the global
    // result's is a question of the global tensors.
    let laid = recorded_out == "sharded" && states.iter().all(|s| s == "sharded");
    let built = if laid {
        let s0: Vec<String> = states.iter().map(|_| "S(0)".to_string()).collect();
        local_rule("spmd_types", &mesh, expr, &s0, "S(0)", &[])
    } else {
        local_rule("nabla", &mesh, expr, &states, recorded_out, &[])
    };
    let out = recorded_out;
    let rule = match built {
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
    let laid_words = if laid {
        " (as S(0), with the layout)"
    } else {
        ""
    };
    let inserted_words = if moves.is_empty() {
        "nothing inserted".to_string()
    } else {
        format!("after {}, checked rank by rank", moves.join(", "))
    };
    let note = format!(
        "accepted as {} -> {out}{laid_words} on {n} ranks, {inserted_words}; per-rank output equals Nabla's; forward checked (F1-F3, the scope and 256 random cases)",
        states.join(", ")
    );
    forward_oracle(&rule).accepted(note)
}

/// sum, mean or max over the sharded dim of a sharded vector: Nabla reduces
/// each block and all-reduces (by the op's own reduction) to replicated.
/// Its local type has no layout, so the typing is not expressible one
/// axis at a time; the values are checked against the global reduction of
/// the joined blocks, and a wrong value is a defect.
fn global_reduction(op: &str, xs: &[spmd_semantics::PerRank], real: &Value) -> (Class, String) {
    use spmd_semantics::Q;
    let Some(x) = xs.first() else {
        return (Class::NotExpressible("no operand".into()), String::new());
    };
    let all: Vec<Q> = x.tensors.iter().flat_map(|t| t.data.clone()).collect();
    let total = all.iter().fold(Q::zero(), |a, b| a.add(b));
    let want = match op {
        "sum" => total,
        "mean" => total.div(&Q::int(all.len() as i64)).unwrap_or(Q::zero()),
        "max" => match all.iter().cloned().reduce(|a, b| if b > a { b } else { a }) {
            Some(m) => m,
            None => return (Class::NotExpressible("empty".into()), String::new()),
        },
        _ => {
            return (
                Class::NotExpressible(format!("`{op}` followed by an all_reduce is not replayed")),
                String::new(),
            )
        }
    };
    let got = exact(real).unwrap_or_default();
    let ok = got.len() == x.tensors.len() && got.iter().all(|(_, v)| v.len() == 1 && v[0] == want);
    let why = "over the sharded dim, which a one-axis local type does not carry (its layout, SPEC.md §13)";
    if ok {
        (
            Class::NotExpressible(format!(
                "{op} {why}; Nabla reduces each block and all-reduces, and every rank's value is the global {op} ({want}), checked"
            )),
            String::new(),
        )
    } else {
        (
            Class::RealDefect(format!(
                "{op} {why}: the global {op} is {want}, Nabla gives {real}"
            )),
            String::new(),
        )
    }
}

/// What Nabla did to an operand in `state` given as `x` before its kernel
/// saw `seen`: nothing (`None`); an all_gather of a sharded operand (every
/// rank sees the ranks' blocks joined along dim 0), read as `replicated`;
/// a slice of a replicated one (rank r sees the r-th block of dim 0), read
/// as `sharded`; an all_reduce of a partial one (every rank sees the sum),
/// read as `replicated`. Anything else is refused with the reason.
fn reshard(
    state: &str,
    x: &spmd_semantics::PerRank,
    seen: &spmd_semantics::PerRank,
) -> Result<Option<(&'static str, &'static str)>, String> {
    use spmd_semantics::Tensor;
    let n = x.tensors.len();
    if seen.tensors.len() != n {
        return Err(format!("{} ranks seen, {n} given", seen.tensors.len()));
    }
    if x.tensors == seen.tensors {
        return Ok(None);
    }
    let all_see = |t: &Tensor| seen.tensors.iter().all(|s| s == t);
    match state {
        "sharded" => {
            let mut shape = x.tensors[0].shape.clone();
            if shape.is_empty() {
                return Err("a sharded scalar".into());
            }
            shape[0] = x.tensors.iter().map(|t| t.shape[0]).sum();
            let data = x.tensors.iter().flat_map(|t| t.data.clone()).collect();
            if all_see(&Tensor::new(shape, data)) {
                return Ok(Some(("replicated", "all_gather")));
            }
        }
        "replicated" => {
            let g = &x.tensors[0];
            if let Some(&d0) = g.shape.first() {
                if d0 % n == 0 {
                    let rows = d0 / n;
                    let width = g.data.len() / d0.max(1);
                    let ok = seen.tensors.iter().enumerate().all(|(r, s)| {
                        let mut shape = g.shape.clone();
                        shape[0] = rows;
                        *s == Tensor::new(
                            shape,
                            g.data[r * rows * width..(r + 1) * rows * width].to_vec(),
                        )
                    });
                    if ok {
                        return Ok(Some(("sharded", "shard")));
                    }
                }
            }
        }
        "partial" => {
            let mut sum = x.tensors[0].clone();
            for t in &x.tensors[1..] {
                if t.shape != sum.shape {
                    return Err("partial operands of different shapes".into());
                }
                for (a, b) in sum.data.iter_mut().zip(&t.data) {
                    *a = a.add(b);
                }
            }
            if all_see(&sum) {
                return Ok(Some(("replicated", "all_reduce")));
            }
        }
        _ => {}
    }
    Err(format!(
        "Nabla ran the op on other values than the given {state} operand, and not an all_gather, slice or all_reduce of it"
    ))
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
    // A reduction of a sharded operand: the dialect answers Unknown (the
    // one-axis type does not say whether the reduced dim is the sharded
    // one), so the case is not compared.
    let sharded = inputs
        .iter()
        .any(|t| t.contains(&spmd_semantics::State::Varying));
    if sharded && matches!(op, OpClass::Sum | OpClass::Mean | OpClass::Max) {
        return None;
    }
    let sys = nabla::Version::of(version).system();
    let ours = outcome_words(&(sys.typing)(op, &inputs), &|s| sys.state_name(s));
    let r = &c["real"];
    let real = if r["accepted"] == true {
        // `shard` is a slicing (of a scalar's constant, or the no-op
        // reshard after a gather), not a collective: not compared.
        let casts = inserted(r);
        let casts: Vec<&str> = casts
            .iter()
            .map(String::as_str)
            .filter(|c| *c != "shard")
            .collect();
        accepted_words(r["output"]["state"].as_str()?, &casts)
    } else {
        "refused".into()
    };
    Some(DialectCheck { ours, real })
}
