//! Fidelity over the `vmap` recording (SPEC.md §24.6): JAX 0.12.0.1 run
//! on CPU with `vmap` inside and around `shard_map`, replayed case by
//! case. JAX's per-rank outputs are checked against the meaning of
//! batching (V1, on the recorded values: the stack of the unbatched
//! collective run on each element), and the dialect's batching rule,
//! run on the same inputs, must give JAX's outputs.

use super::{tensors, CaseResult, Class};
use crate::run::UsageError;
use serde_json::Value;
use spmd_interp::catalogue::collective;
use spmd_interp::Collective;
use spmd_semantics::batch::{select, stack_per_rank};
use spmd_semantics::{Mesh, PerRank, State, Tensor};

/// The recording read, relative to the fixtures directory.
pub const FILE: &str = "transforms/jax_vmap_0.12.0.1.json";

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

/// The key of a case's twin on Explicit axes: everything but the axis
/// types and the values.
fn twin_key(c: &Value) -> String {
    format!(
        "{}|{}|{}|{}|{}|{}|{}",
        c["collective"],
        c["params"],
        c["in_axes"],
        c["out_axes"],
        c["where"],
        c["batch"],
        c["block_shape"]
    )
}

/// One `spmd_axis_name` case (SPEC.md §24.12): `vmap(shard_map(f over
/// o), spmd_axis_name = s)` on a mesh of two axes, the batch sharded over
/// s. Each shard of s runs its slice of the batch on the ranks of o: V1
/// there, against the unbatched collective on each element, and JAX's
/// batching rule on the same slice.
fn spmd_case(i: usize, c: &Value, all: &[Value]) -> (String, Class, String) {
    let name = c["collective"].as_str().unwrap_or("?");
    let id = format!(
        "spmd_axis_name_cases[{i}]: {} {name}({}) at in_axes {}, spmd_axis_name {} ({})",
        c["where"].as_str().unwrap_or("?"),
        c["params"],
        c["in_axes"],
        c["spmd_axis_name"],
        c["axis_types"].as_str().unwrap_or("?")
    );
    let ne = |why: &str| (id.clone(), Class::NotExpressible(why.into()), String::new());
    let spmd = c["spmd_axis_name"].as_str().unwrap_or("");
    if c["params"]["axis_name"].as_str() == Some(spmd) && matches!(name, "pcast" | "pvary") {
        return ne("a cast over the spmd axis changes types only; casts under spmd_axis_name are not modelled");
    }
    // A collective over the spmd axis itself would combine different
    // batch elements: no element has that axis. JAX refuses it.
    if c["params"]["axis_name"].as_str() == Some(spmd) {
        return match c["error"].as_str() {
            Some(e) => (
                id,
                Class::Agree,
                format!("JAX refuses a collective over the spmd axis, which would mix batch elements ({})", crate::words::excerpt(e)),
            ),
            None => (
                id,
                Class::RealDefect("JAX runs a collective over the spmd axis, which mixes batch elements".into()),
                String::new(),
            ),
        };
    }
    // An Auto run the recorder found equal to its Explicit twin.
    if c["values_as_explicit"].as_bool() == Some(true) {
        let key = twin_key(c);
        return match all.iter().enumerate().find(|(_, t)| {
            t["axis_types"] == "Explicit"
                && twin_key(t) == key
                && t.get("values_as_explicit").is_none()
        }) {
            Some((j, t)) => {
                let (_, class, note) = spmd_case(j, t, &[]);
                (id, class, format!("the recorder found its values equal to its Explicit twin's ([{j}]): {note}"))
            }
            None => ne("an Auto run with no values of its own and no Explicit twin"),
        };
    }
    let axes: Vec<&str> = c["mesh_axes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let sizes: Vec<usize> = c["mesh"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64().map(|v| v as usize))
                .collect()
        })
        .unwrap_or_default();
    let (Some(si), true) = (
        axes.iter().position(|a| *a == spmd),
        axes.len() == 2 && sizes.len() == 2,
    ) else {
        return ne("not a mesh of two axes with the spmd axis among them");
    };
    let oi = 1 - si;
    let (ns, no) = (sizes[si], sizes[oi]);
    if c["params"]["axis_name"].as_str() != Some(axes[oi]) {
        return ne("a collective over neither mesh axis");
    }
    let coll = match unbatched(name, &c["params"]) {
        Ok(x) => x,
        Err(e) => return ne(&e),
    };
    let (Some(d), Some(batch), Some(out_axis)) = (
        c["in_axis"].as_u64().map(|v| v as usize),
        c["batch"].as_u64().map(|v| v as usize),
        c["out_axes"].as_u64().map(|v| v as usize),
    ) else {
        return ne("a case without in_axis, batch or out_axes");
    };
    let Some(inputs) = tensors(&c["inputs"]) else {
        return ne("no inputs recorded");
    };
    if !(1..=64).contains(&ns)
        || !(1..=64).contains(&no)
        || inputs.len() != ns * no
        || batch % ns != 0
        || batch > 256
    {
        return ne("a mesh, batch or input count the model does not take");
    }
    let k = batch / ns;
    let m = Mesh::line(no);
    // Device (a, b) of the mesh is input a * sizes[1] + b.
    let device = |s_i: usize, o_i: usize| {
        let mut coord = [0usize; 2];
        coord[si] = s_i;
        coord[oi] = o_i;
        coord[0] * sizes[1] + coord[1]
    };
    let Some(elem_spec) = c["out_spec"].as_str().and_then(parse_spec) else {
        return ne("no out_spec recorded");
    };
    // The meaning: for each global batch index, the unbatched shard_map's
    // global output (its per-rank outputs placed by its out_specs), all
    // stacked at out_axes: shard s holds indices s*k .. s*k + k.
    let mut globals = Vec::new();
    let mut ours_locals: Vec<Option<Vec<Tensor>>> = Vec::new();
    for s_i in 0..ns {
        let slice: Vec<Tensor> = (0..no)
            .map(|o_i| inputs[device(s_i, o_i)].clone())
            .collect();
        if slice
            .iter()
            .any(|t| t.shape != slice[0].shape || t.rank() > 4)
        {
            return ne("inputs of different shapes on one shard");
        }
        for e in 0..k {
            let Some(el) = slice
                .iter()
                .map(|t| select(t, d, e))
                .collect::<Option<Vec<Tensor>>>()
            else {
                return ne("inputs without the shard's slice of the batch at their batch dim");
            };
            if coll.infer(&m, &el[0].shape).is_err() {
                return ne("the unbatched collective does not take the elements");
            }
            let r = coll.forward(&m, &PerRank { tensors: el }).tensors;
            let Some(g) = assemble(&r, &elem_spec, &[axes[oi]], &[no]) else {
                return ne("the element's outputs do not assemble by its out_specs");
            };
            globals.push(g);
        }
        // The model: JAX's batching rule on the shard's local blocks.
        ours_locals.push(
            spmd_dialects::jax::batch_collective(&coll.kind, d)
                .ok()
                .and_then(|(kind, od)| {
                    let b = Collective {
                        kind,
                        ..coll.clone()
                    };
                    b.infer(&m, &slice[0].shape).ok()?;
                    move_dim(
                        b.forward(
                            &m,
                            &PerRank {
                                tensors: slice.clone(),
                            },
                        )
                        .tensors,
                        od,
                        0,
                    )
                }),
        );
    }
    let Ok(expected) = spmd_semantics::batch::stack(&globals, out_axis) else {
        return ne("the elements' global outputs do not stack");
    };
    // The model's global output: each shard's local batched outputs placed
    // by out_specs with the batch (at 0) over the spmd axis.
    let ours: Option<Tensor> = (|| {
        let mut per_device = vec![Tensor::zeros(&[]); ns * no];
        for (s_i, o) in ours_locals.iter().enumerate() {
            for (o_i, t) in o.as_ref()?.iter().enumerate() {
                per_device[device(s_i, o_i)] = t.clone();
            }
        }
        let mut spec = vec![Some(spmd.to_string())];
        spec.extend(elem_spec.iter().cloned());
        let g = assemble(&per_device, &spec, &axes, &sizes)?;
        let t = spmd_semantics::batch::move_dim(&g, 0, out_axis)?;
        Some(t)
    })();
    let err = c["error"].as_str().or(c["run_error"].as_str());
    match (tensors(&c["outputs"]), err) {
        (Some(real), _) => {
            if real.len() != ns * no {
                return ne("outputs of another number of devices");
            }
            let Some(out_spec) = c["output_sharding"].as_str().and_then(parse_spec) else {
                return ne("no output sharding recorded");
            };
            let Some(real) = assemble(&real, &out_spec, &axes, &sizes) else {
                return ne("JAX's outputs do not assemble by their sharding");
            };
            // JAX's untiled all_to_all is a wrapper with no single batched
            // form (§24.6): V1 alone.
            let transcribed = spmd_dialects::jax::batch_collective(&coll.kind, d).is_ok();
            if transcribed && ours.as_ref() != Some(&real) {
                return (
                    id,
                    Class::ModelMismatch(match &ours {
                        Some(o) => format!("the model's global output is {o}, JAX's {real}"),
                        None => "the model's batched form refuses where JAX runs".into(),
                    }),
                    String::new(),
                );
            }
            if real == expected {
                (
                    id,
                    Class::Agree,
                    format!(
                        "JAX's global output (its device shards placed by {}) is the stack of the unbatched shard_map's global outputs, each of the {ns} shards of the batch over `{spmd}` run on its own ranks (V1){}",
                        c["output_sharding"].as_str().unwrap_or("?"),
                        if transcribed {
                            ", and the model's batching rule gives it"
                        } else {
                            "; the model has no single batched form for this wrapper"
                        }
                    ),
                )
            } else {
                (
                    id,
                    Class::RealDefect(format!(
                        "V1: JAX's global output is {real} where the stack of the elements' global outputs is {expected}"
                    )),
                    String::new(),
                )
            }
        }
        (None, Some(e)) => (
            id,
            Class::RealDefect(format!(
                "V1: JAX raises ({}) where the stack of the elements' outputs exists; the model's batching rule {}",
                crate::words::excerpt(e),
                if ours.is_some() {
                    "runs (JAX's error is in shard_map's specs under spmd_axis_name, which the model does not follow)"
                } else {
                    "refuses too"
                }
            )),
            String::new(),
        ),
        (None, None) => ne("no outputs recorded"),
    }
}

/// A partition spec as recorded, `P('x', None, 'y')`: per dim, the mesh
/// axis it is split over. Several axes on one dim are not read.
fn parse_spec(s: &str) -> Option<Vec<Option<String>>> {
    let inner = s.trim().strip_prefix("P(")?.strip_suffix(')')?;
    if inner.contains('(') {
        return None;
    }
    inner
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| match x {
            "None" => Some(None),
            q => Some(Some(q.trim_matches('\'').to_string())),
        })
        .collect()
}

/// The global array whose shards (device i at row-major coordinates over
/// `sizes`) are `shards`, each dim split over the axis `spec` names (dims
/// past the spec are whole); `None` where they do not fit or a replicated
/// entry differs between devices.
fn assemble(
    shards: &[Tensor],
    spec: &[Option<String>],
    axes: &[&str],
    sizes: &[usize],
) -> Option<Tensor> {
    let first = shards.first()?;
    let rank = first.rank();
    if spec.len() > rank || shards.iter().any(|t| t.shape != first.shape) {
        return None;
    }
    let axis_of: Vec<Option<usize>> = (0..rank)
        .map(|i| match spec.get(i).cloned().flatten() {
            None => Some(None),
            Some(a) => axes.iter().position(|x| *x == a).map(Some),
        })
        .collect::<Option<Vec<_>>>()?;
    let shape: Vec<usize> = (0..rank)
        .map(|i| first.shape[i] * axis_of[i].map_or(1, |a| sizes[a]))
        .collect();
    let n = spmd_semantics::tensor::numel(&shape);
    if n > 1 << 20 {
        return None;
    }
    let mut out: Vec<Option<spmd_semantics::Q>> = vec![None; n];
    let gstrides = spmd_semantics::tensor::strides(&shape);
    let lstrides = spmd_semantics::tensor::strides(&first.shape);
    for (dev, t) in shards.iter().enumerate() {
        // The device's coordinates, row-major over `sizes`.
        let mut coord = vec![0; sizes.len()];
        let mut rest = dev;
        for a in (0..sizes.len()).rev() {
            coord[a] = rest % sizes[a];
            rest /= sizes[a];
        }
        for (flat, v) in t.data.iter().enumerate() {
            let mut g = 0;
            for i in 0..rank {
                let li = (flat / lstrides[i]) % first.shape[i];
                let off = axis_of[i].map_or(0, |a| coord[a] * first.shape[i]);
                g += (li + off) * gstrides[i];
            }
            match &out[g] {
                Some(w) if w != v => return None,
                _ => out[g] = Some(v.clone()),
            }
        }
    }
    Some(Tensor::new(
        shape,
        out.into_iter().collect::<Option<Vec<_>>>()?,
    ))
}

/// Every main case of the recording in `dir`, and its `spmd_axis_name`
/// cases (SPEC.md §24.12); the named-axis cases are counted as not
/// expressible. A missing recording gives no cases.
pub fn run(dir: &str) -> Result<Vec<CaseResult>, UsageError> {
    let Some((name, v)) = super::read_recording(dir, FILE)? else {
        return Ok(vec![]);
    };
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
    let spmd = v["spmd_axis_name_cases"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, c) in spmd.iter().enumerate() {
        let (id, class, note) = spmd_case(i, c, &spmd);
        out.push(CaseResult {
            file: name.clone(),
            system: "jax".into(),
            version: version.clone(),
            id,
            class,
            note,
            dialect: None,
        });
    }
    for key in ["named_axis_cases"] {
        let n = v[key].as_array().map_or(0, Vec::len);
        for i in 0..n {
            out.push(CaseResult {
                file: name.clone(),
                system: "jax".into(),
                version: version.clone(),
                id: format!("{key}[{i}]"),
                class: Class::NotExpressible(
                    "collectives over a named vmap axis are not modelled (SPEC.md §24.6)".into(),
                ),
                note: String::new(),
                dialect: None,
            });
        }
    }
    Ok(out)
}
