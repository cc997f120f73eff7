//! Fidelity over the `vmap` recording (SPEC.md §24.6): JAX 0.12.0.1 run
//! on CPU with `vmap` inside and around `shard_map`, replayed case by
//! case. JAX's per-rank outputs are checked against the meaning of
//! batching (V1, on the recorded values: the stack of the unbatched
//! collective run on each element), and the dialect's batching rule,
//! run on the same inputs, must give JAX's outputs.

use super::{CaseResult, Class};
use crate::registry::parse_tensor;
use crate::run::UsageError;
use serde_json::Value;
use spmd_interp::catalogue::collective;
use spmd_interp::Collective;
use spmd_semantics::batch::{select, stack_per_rank};
use spmd_semantics::{Mesh, PerRank, State, Tensor};

/// The recording read, relative to the fixtures directory.
pub const FILE: &str = "transforms/jax_vmap_0.12.0.1.json";

fn tensors(v: &Value) -> Option<Vec<Tensor>> {
    v.as_array()?
        .iter()
        .map(|x| parse_tensor(x.as_str()?).ok())
        .collect()
}

/// The catalogue's collective for a recorded JAX call, or why none.
fn unbatched(name: &str, p: &Value) -> Result<Collective, String> {
    use State::*;
    let tiled = p["tiled"].as_bool().unwrap_or(true);
    let stack = if tiled { "" } else { ", stack" };
    let (text, src, dst) = match name {
        "psum" => ("psum".to_string(), Varying, Invariant),
        "pmean" => ("pmean".to_string(), Varying, Invariant),
        "all_gather" => (
            format!(
                "all_gather(dim={}{stack})",
                p["axis"].as_u64().ok_or("no axis")?
            ),
            Varying,
            Invariant,
        ),
        "psum_scatter" => (
            format!(
                "psum_scatter(dim={}{stack})",
                p["scatter_dimension"]
                    .as_u64()
                    .ok_or("no scatter_dimension")?
            ),
            Varying,
            Varying,
        ),
        "all_to_all" => (
            format!(
                "all_to_all(split={}, concat={}{stack})",
                p["split_axis"].as_u64().ok_or("no split_axis")?,
                p["concat_axis"].as_u64().ok_or("no concat_axis")?
            ),
            Varying,
            Varying,
        ),
        "ppermute" => {
            let pairs: Vec<String> = p["perm"]
                .as_array()
                .ok_or("no perm")?
                .iter()
                .map(|q| format!("({}, {})", q[0], q[1]))
                .collect();
            (
                format!("ppermute(perm=[{}])", pairs.join(", ")),
                Varying,
                Varying,
            )
        }
        other => {
            return Err(format!(
            "`{other}` is not a linear collective of the catalogue (max, min, an index or a cast)"
        ))
        }
    };
    collective(&text, &[src], &[dst], &["x".to_string()])
}

/// Moves dim `from` of every rank's tensor to `to`.
fn move_dim(xs: Vec<Tensor>, from: usize, to: usize) -> Option<Vec<Tensor>> {
    xs.iter()
        .map(|t| spmd_semantics::batch::move_dim(t, from, to))
        .collect()
}

fn case(c: &Value) -> (String, Class, String) {
    let name = c["collective"].as_str().unwrap_or("?");
    let id = format!(
        "{}: {name}({}) at in_axes {} on [{}]",
        c["where"].as_str().unwrap_or("?"),
        c["params"],
        c["in_axes"],
        c["mesh"][0]
    );
    let ne = |why: String| (id.clone(), Class::NotExpressible(why), String::new());
    let coll = match unbatched(name, &c["params"]) {
        Ok(x) => x,
        Err(e) => return ne(e),
    };
    let (Some(n), Some(d), Some(k), Some(out_axis)) = (
        c["mesh"][0].as_u64().map(|v| v as usize),
        c["in_axis"].as_u64().map(|v| v as usize),
        c["batch"].as_u64().map(|v| v as usize),
        c["out_axes"].as_u64().map(|v| v as usize),
    ) else {
        return ne("a case without mesh, in_axis, batch or out_axes".into());
    };
    let Some(inputs) = tensors(&c["inputs"]) else {
        return ne("inputs not exact".into());
    };
    // A recording is untrusted: one tensor per rank, of one shape, a
    // batch that the inputs hold.
    if n == 0 || n > 64 || inputs.len() != n || k == 0 || k > 64 {
        return ne(format!(
            "{} inputs for a mesh of {n} ranks and a batch of {k}",
            inputs.len()
        ));
    }
    if inputs.iter().any(|t| t.shape != inputs[0].shape) || out_axis > inputs[0].rank() {
        return ne("inputs of different shapes, or out_axes past their rank".into());
    }
    let m = Mesh::line(n);
    // The elements, each per rank.
    let elements: Option<Vec<Vec<Tensor>>> = (0..k)
        .map(|i| inputs.iter().map(|t| select(t, d, i)).collect())
        .collect();
    let Some(elements) = elements else {
        return ne(format!("inputs without {k} entries at dim {d}"));
    };
    let results: Result<Vec<Vec<Tensor>>, String> = elements
        .iter()
        .map(|e| {
            coll.infer(&m, &e[0].shape)?;
            Ok(coll.forward(&m, &PerRank { tensors: e.clone() }).tensors)
        })
        .collect();
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            return ne(format!(
                "the unbatched collective does not take the elements: {e}"
            ))
        }
    };
    let expected = stack_per_rank(&results, out_axis).ok();
    // The dialect's rule on the same inputs.
    let ours = spmd_dialects::jax::batch_collective(&coll.kind, d)
        .ok()
        .and_then(|(kind, od)| {
            let b = Collective {
                kind,
                ..coll.clone()
            };
            b.infer(&m, &inputs[0].shape).ok()?;
            let y = b
                .forward(
                    &m,
                    &PerRank {
                        tensors: inputs.clone(),
                    },
                )
                .tensors;
            move_dim(y, od, out_axis)
        });
    let Some(expected) = expected else {
        return ne("the elements' results do not stack".into());
    };
    // No transcription (JAX's untiled all_to_all): JAX's outputs against
    // V1 alone.
    let transcribed = spmd_dialects::jax::batch_collective(&coll.kind, d).is_ok();
    if !transcribed {
        return match tensors(&c["outputs"]) {
            Some(real) if real == expected => (
                id,
                Class::Agree,
                "JAX's per-rank outputs are the stack of the unbatched results (V1); the model has no single batched form for this wrapper".into(),
            ),
            Some(real) => (
                id,
                Class::RealDefect(format!(
                    "V1: rank 0 gets {} where the stack of the unbatched results is {}",
                    real[0], expected[0]
                )),
                String::new(),
            ),
            None => (
                id,
                Class::Undetermined(format!(
                    "JAX raised ({}) and the model has no batched form to compare",
                    c["error"].as_str().unwrap_or("no outputs")
                )),
                String::new(),
            ),
        };
    }
    match (tensors(&c["outputs"]), c["error"].as_str()) {
        (Some(real), _) => {
            if ours.as_ref() != Some(&real) {
                return (
                    id,
                    Class::ModelMismatch(match &ours {
                        Some(o) => format!(
                            "rank 0: the model's batched form gives {}, JAX {}",
                            o[0], real[0]
                        ),
                        None => format!("the model's batched form refuses; JAX gives {}", real[0]),
                    }),
                    String::new(),
                );
            }
            if real == expected {
                (
                    id,
                    Class::Agree,
                    "JAX's per-rank outputs are the stack of the unbatched results (V1) and the model's batching rule gives them".into(),
                )
            } else {
                (
                    id,
                    Class::RealDefect(format!(
                        "V1: rank 0 gets {} where the stack of the unbatched results is {} (the model's transcription of JAX's rule gives the same)",
                        real[0], expected[0]
                    )),
                    String::new(),
                )
            }
        }
        (None, Some(err)) => match ours {
            None => (
                id,
                Class::RealDefect(format!(
                    "V1: JAX raises ({err}) where the stack of the unbatched results is {} on rank 0; the model's transcription refuses too",
                    expected[0]
                )),
                String::new(),
            ),
            Some(_) => (
                id,
                Class::ModelMismatch(format!("JAX raises ({err}); the model's batched form runs")),
                String::new(),
            ),
        },
        (None, None) => ne("no outputs recorded".into()),
    }
}

/// Every main case of the recording in `dir`; the `spmd_axis_name` and
/// named-axis cases are counted as not expressible (no model yet). A
/// missing recording gives no cases.
pub fn run(dir: &str) -> Result<Vec<CaseResult>, UsageError> {
    let name = format!("{dir}/{FILE}");
    if !std::path::Path::new(&name).exists() {
        return Ok(vec![]);
    }
    let text = crate::rules::read_text_limit(&name, 16 << 20)?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("{name}: not a recording: {e}")))?;
    let version = v["jax"].as_str().unwrap_or("?").to_string();
    let cases = v["cases"]
        .as_array()
        .ok_or_else(|| UsageError(format!("{name}: no `cases`")))?;
    use rayon::prelude::*;
    let mut out: Vec<CaseResult> = cases
        .par_iter()
        .map(|c| {
            let (id, class, note) = case(c);
            CaseResult {
                file: name.clone(),
                system: "jax".into(),
                version: version.clone(),
                id,
                class,
                note,
                dialect: None,
            }
        })
        .collect();
    for key in ["spmd_axis_name_cases", "named_axis_cases"] {
        let n = v[key].as_array().map_or(0, Vec::len);
        for i in 0..n {
            out.push(CaseResult {
                file: name.clone(),
                system: "jax".into(),
                version: version.clone(),
                id: format!("{key}[{i}]"),
                class: Class::NotExpressible(
                    "a vmap whose axis is a mesh axis (spmd_axis_name) or a named axis of collectives is not modelled yet (SPEC.md §24.6)"
                        .into(),
                ),
                note: String::new(),
                dialect: None,
            });
        }
    }
    Ok(out)
}
