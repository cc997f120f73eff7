//! Fidelity over the uneven recordings (SPEC.md §23.13): DTensor's
//! redistribute on uneven shards and spmd_types' `split_sizes` gathers,
//! from `tests/fixtures/uneven/`, replayed through the dialects'
//! implementations and checked by §23.10's checks on each recorded case.

use super::{tensors, CaseResult, Class};
use crate::run::UsageError;
use serde_json::Value;
use spmd_dialects::uneven::StepFn;
use spmd_oracle::uneven::{check_step, Impl, Tally};
use spmd_semantics::uneven::{Placement, Split};
use spmd_semantics::Tensor;

/// The recordings read, relative to the fixtures directory.
pub const FILES: [&str; 9] = [
    "uneven/dtensor_uneven.json",
    "uneven/dtensor_uneven_2.15.0.json",
    "uneven/dtensor_uneven_backward.json",
    "uneven/spmd_types_uneven.json",
    "uneven/spmd_types_uneven_gloo.json",
    "uneven/spmd_types_uneven_gloo_padded.json",
    "uneven/dtensor_uneven_ops.json",
    "uneven/dtensor_from_local_uneven.json",
    "uneven/jax_uneven_0.12.0.1.json",
];

/// A JSON array of sizes (other entries skipped).
fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64().map(|v| v as usize))
                .collect()
        })
        .unwrap_or_default()
}

fn dtensor_placement(p: &str) -> Option<Placement> {
    match p {
        "R" => Some(Placement::Inv),
        "P(sum)" => Some(Placement::Part),
        s => {
            let d = s.strip_prefix("S(")?.strip_suffix(')')?.parse().ok()?;
            Some(Placement::Shard(d, Split::Chunk))
        }
    }
}

/// The first rank whose tensor differs, in words.
fn first_difference(ours: &[Tensor], real: &[Tensor]) -> Option<String> {
    if ours.len() != real.len() {
        return Some(format!(
            "{} ranks, the recording {}",
            ours.len(),
            real.len()
        ));
    }
    ours.iter()
        .zip(real)
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(r, (a, b))| format!("rank {r}: ours {a}, real {b}"))
}

/// Checks a step the real system ran as the model runs it, on the
/// recorded case: agree when sound, a real defect when not.
fn verdict<P: spmd_semantics::uneven::Placed>(
    input: &P,
    output: &P,
    forward: &Impl,
    backward: Option<&Impl>,
    n: usize,
    shape: &[usize],
) -> (Class, String) {
    let mut t = Tally::default();
    match check_step(input, output, forward, backward, n, shape, &mut t) {
        Ok(()) => (
            Class::Agree,
            format!(
                "per-rank outputs equal; F1{} hold on every value of the shape ({} instances)",
                if backward.is_some() { " and B3" } else { "" },
                t.instances
            ),
        ),
        Err(f) => (
            Class::RealDefect(format!(
                "{}: {}",
                f.property(),
                crate::uneven::failure_line(&f)
            )),
            String::new(),
        ),
    }
}

fn dtensor_case(c: &Value) -> (String, Class, String) {
    let mesh = usizes(&c["mesh"]);
    let shape = usizes(&c["shape"]);
    let names = |k: &str| -> Vec<String> {
        c[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (src, dst) = (names("src"), names("dst"));
    let id = format!(
        "redistribute {} -> {} on {mesh:?}, {shape:?}",
        src.join(","),
        dst.join(",")
    );
    if mesh.len() != src.len() || mesh.len() != dst.len() || mesh.is_empty() {
        return (
            id,
            Class::NotExpressible(format!("placements {src:?} -> {dst:?} on mesh {mesh:?}")),
            String::new(),
        );
    }
    // A recording is untrusted: a mesh of at most 64 ranks, a shape of at
    // most 64 entries per dim and rank 4.
    if mesh.iter().any(|&k| k == 0 || k > 64)
        || mesh.iter().product::<usize>() > 64
        || shape.len() > 4
        || shape.iter().any(|&k| k > 64)
    {
        return (
            id,
            Class::NotExpressible(format!(
                "a mesh {mesh:?} or shape {shape:?} past the model's limits"
            )),
            String::new(),
        );
    }
    if mesh.len() > 1 {
        return nested_case(c, id, &mesh, &shape, &src, &dst);
    }
    let n = mesh[0];
    let (Some(input), Some(output)) = (dtensor_placement(&src[0]), dtensor_placement(&dst[0]))
    else {
        return (
            id,
            Class::NotExpressible(format!("placements {src:?} -> {dst:?}")),
            String::new(),
        );
    };
    let Some(before) = tensors(&c["before"]) else {
        return (
            id,
            Class::NotExpressible("a piece not exact in float64".into()),
            String::new(),
        );
    };
    let ours = spmd_dialects::dtensor::redistribute(&input, &output);
    if let Some(why) = c["refused"].as_str() {
        return match ours {
            Ok(f) => match f(&before) {
                Ok(_) => (
                    id,
                    Class::ModelMismatch(format!("the model runs what DTensor refuses: {why}")),
                    String::new(),
                ),
                Err(e) => refusal(id, &input, &output, n, &shape, why, &e),
            },
            Err(e) => refusal(id, &input, &output, n, &shape, why, &e),
        };
    }
    let Some(after) = tensors(&c["after"]) else {
        return (
            id,
            Class::NotExpressible("a piece not exact in float64".into()),
            String::new(),
        );
    };
    let f = match ours {
        Ok(f) => f,
        Err(e) => {
            return (
                id,
                Class::ModelMismatch(format!("the model refuses what DTensor runs: {e}")),
                String::new(),
            )
        }
    };
    match f(&before) {
        Err(e) => (
            id,
            Class::ModelMismatch(format!("the model raises on DTensor's pieces: {e}")),
            String::new(),
        ),
        Ok(out) => match first_difference(&out, &after) {
            Some(d) => (id, Class::ModelMismatch(d), String::new()),
            None => {
                // DTensor's backward as the dialect picks it.
                let b: Option<StepFn> = spmd_dialects::uneven::elaborate(
                    spmd_semantics::Dialect::Dtensor,
                    "redistribute",
                    None,
                    &input,
                    &output,
                )
                .ok()
                .and_then(|e| e.backward);
                let (class, note) = verdict(
                    &input,
                    &output,
                    &*f,
                    b.as_ref().map(|b| &**b as &Impl),
                    n,
                    &shape,
                );
                (id, class, note)
            }
        },
    }
}

/// A redistribute over several mesh dims (SPEC.md §23.20): the model runs
/// DTensor's plan (`dtensor::redistribute_nested`) on the recorded pieces
/// before; the pieces after must equal it, and then F1 and B3 run on the
/// nested placements with DTensor's backward (the plan from the output's
/// cotangent back, a Reduced cotangent held as Replicate()).
fn nested_case(
    c: &Value,
    id: String,
    mesh: &[usize],
    shape: &[usize],
    src: &[String],
    dst: &[String],
) -> (String, Class, String) {
    use spmd_semantics::uneven::Nested;
    let places = |names: &[String]| -> Option<Vec<Placement>> {
        names.iter().map(|p| dtensor_placement(p)).collect()
    };
    let (Some(sp), Some(dp)) = (places(src), places(dst)) else {
        return (
            id,
            Class::NotExpressible(format!("placements {src:?} -> {dst:?}")),
            String::new(),
        );
    };
    let nest = |ps: &[Placement]| Nested {
        axes: mesh.iter().copied().zip(ps.iter().cloned()).collect(),
    };
    let (input, output) = (nest(&sp), nest(&dp));
    if let Some(why) = c["refused"].as_str() {
        return (
            id,
            Class::Undetermined(format!("DTensor refuses: {why}")),
            String::new(),
        );
    }
    let (Some(before), Some(after)) = (tensors(&c["before"]), tensors(&c["after"])) else {
        return (
            id,
            Class::NotExpressible("a piece not exact in float64".into()),
            String::new(),
        );
    };
    let f = match spmd_dialects::dtensor::redistribute_nested(mesh, &sp, &dp) {
        Ok(f) => f,
        Err(e) => {
            return (
                id,
                Class::ModelMismatch(format!("the model refuses what DTensor runs: {e}")),
                String::new(),
            )
        }
    };
    let out = match f(&before) {
        Ok(o) => o,
        Err(e) => {
            return (
                id,
                Class::ModelMismatch(format!("the model raises on DTensor's pieces: {e}")),
                String::new(),
            )
        }
    };
    if let Some(d) = first_difference(&out, &after) {
        return (id, Class::ModelMismatch(d), String::new());
    }
    let b = spmd_dialects::dtensor::redistribute_nested_backward(mesh, &input, &output)
        .ok()
        .map(|(b, _)| b);
    let n: usize = mesh.iter().product();
    let (class, note) = verdict(
        &input,
        &output,
        &*f,
        b.as_ref().map(|b| &**b as &Impl),
        n,
        shape,
    );
    let steps: Vec<String> = spmd_dialects::dtensor::plan(&sp, &dp)
        .iter()
        .map(|s| format!("mesh dim {}: {} -> {}", s.mesh_dim, s.from, s.to))
        .collect();
    (
        id,
        class,
        format!("{note}; DTensor's plan: {}", steps.join(", ")),
    )
}

/// Both refuse: a sound rejection when a collective for the move exists
/// and is exact on the case (Replicate -> Partial: the value on the first
/// rank, zeros elsewhere, whose backward is the identity), else
/// undetermined.
fn refusal(
    id: String,
    input: &Placement,
    output: &Placement,
    n: usize,
    shape: &[usize],
    real: &str,
    ours: &str,
) -> (String, Class, String) {
    let note = format!("both refuse (DTensor: {real}; model: {ours})");
    if !(matches!(input, Placement::Inv | Placement::Red) && *output == Placement::Part) {
        return (
            id,
            Class::Undetermined(format!("{note}; no collective for the move is modelled")),
            String::new(),
        );
    }
    let partition = |xs: &[Tensor]| -> Result<Vec<Tensor>, String> {
        Ok(xs
            .iter()
            .enumerate()
            .map(|(r, x)| {
                if r == 0 {
                    x.clone()
                } else {
                    Tensor::zeros(&x.shape)
                }
            })
            .collect())
    };
    let identity = |xs: &[Tensor]| -> Result<Vec<Tensor>, String> { Ok(xs.to_vec()) };
    let mut t = Tally::default();
    match check_step(input, output, &partition, Some(&identity), n, shape, &mut t) {
        Ok(()) if t.instances == 0 => (
            id,
            Class::Undetermined(format!("{note}; an empty value, nothing to check")),
            String::new(),
        ),
        Ok(()) => (
            id,
            Class::SoundRejection,
            format!(
                "{note}; the value on rank 0 and zeros elsewhere is exact here ({} instances)",
                t.instances
            ),
        ),
        Err(f) => (
            id,
            Class::Undetermined(format!("{note}; the partition fails {}", f.property())),
            String::new(),
        ),
    }
}

/// Where a recorder could not run a case: LocalTensorMode cannot run the
/// uneven reduce_scatter (nor so the gather's backward); gloo's allgather
/// needs one size on every rank.
fn not_run(gloo: bool) -> &'static str {
    if gloo {
        "gloo's allgather takes one size on every rank"
    } else {
        "LocalTensorMode cannot run the uneven reduce_scatter"
    }
}

/// A recorded spmd_types collective with `split_sizes` (SPEC.md §23.7,
/// §23.13): the dialect's forward must give the recorded outputs, its
/// picked backward the recorded gradients where the recorder ran them,
/// and §23.10's checks then run on the case.
fn spmd_types_case(c: &Value, gloo: bool) -> (String, Class, String) {
    let sizes = usizes(&c["split_sizes"]);
    let op = c["op"].as_str().unwrap_or("?");
    let id = format!(
        "{op}(split_sizes={sizes:?}) on {}",
        c["split"].as_str().unwrap_or("?")
    );
    let n = sizes.len();
    if n == 0 || n > 64 || sizes.iter().any(|&k| k > 64) {
        return (
            id,
            Class::NotExpressible("split sizes past the model's limits".into()),
            String::new(),
        );
    }
    if let Some(why) = c["refused"].as_str() {
        return (
            id,
            Class::Undetermined(format!(
                "not run by the recorder ({}): {why}",
                not_run(gloo)
            )),
            String::new(),
        );
    }
    let shard = Placement::Shard(0, Split::Sizes(sizes.clone()));
    let (input_p, output_p) = match op {
        "all_gather" => (shard, Placement::Red),
        "reduce_scatter" => (Placement::Part, shard),
        _ => return (id, Class::NotExpressible(format!("op {op}")), String::new()),
    };
    let (Some(input), Some(output)) = (tensors(&c["input"]), tensors(&c["output"])) else {
        return (
            id,
            Class::NotExpressible("a piece not exact in float64".into()),
            String::new(),
        );
    };
    let e = match spmd_dialects::uneven::elaborate(
        spmd_semantics::Dialect::SpmdTypes,
        op,
        None,
        &input_p,
        &output_p,
    ) {
        Ok(e) => e,
        Err(e) => return (id, Class::ModelMismatch(e), String::new()),
    };
    let out = match (e.forward)(&input) {
        Err(why) => {
            return (
                id,
                Class::ModelMismatch(format!("the model raises: {why}")),
                String::new(),
            )
        }
        Ok(out) => out,
    };
    if let Some(d) = first_difference(&out, &output) {
        return (id, Class::ModelMismatch(d), String::new());
    }
    // spmd_types' own backward, where the recorder ran it.
    let own = match (tensors(&c["cotangent"]), tensors(&c["grad"]), &e.backward) {
        (Some(cot), Some(grad), Some(b)) => match b(&cot) {
            Err(why) => {
                return (
                    id,
                    Class::ModelMismatch(format!("the model's backward raises: {why}")),
                    String::new(),
                )
            }
            Ok(ours) => match first_difference(&ours, &grad) {
                Some(d) => {
                    return (
                        id,
                        Class::ModelMismatch(format!("backward: {d}")),
                        String::new(),
                    )
                }
                None => true,
            },
        },
        _ => false,
    };
    let shape = match &input_p {
        Placement::Part => output_p.denote(&output).map(|t| t.shape),
        p => p.denote(&input).map(|t| t.shape),
    }
    .unwrap_or_default();
    let (class, mut note) = verdict(
        &input_p,
        &output_p,
        &*e.forward,
        e.backward.as_ref().map(|b| &**b as &Impl),
        n,
        &shape,
    );
    if own {
        note.push_str(
            "; spmd_types' own backward gives the model's gradient on the recorded cotangent",
        );
    } else if let Some(b) = c["backward_error"].as_str() {
        note.push_str(&format!(
            "; the backward is the model's pick (the recorder could not run spmd_types' own, {}: {b})",
            not_run(gloo)
        ));
    }
    (id, class, note)
}

/// A recorded DTensor backward of an uneven redistribute (SPEC.md §23.13):
/// the cotangent's global value (read under the output's placement) is
/// given to the model's picked backward in the output's cotangent
/// placement; each rank's gradient must equal the recorded gradient of its
/// local piece (`grad_local`), and that must denote the cotangent's value
/// under DTensor's gradient placement, since redistribute is the identity
/// on global values (B3 on this cotangent).
fn dtensor_backward_case(c: &Value) -> (String, Class, String) {
    let mesh = usizes(&c["mesh"]);
    let shape = usizes(&c["shape"]);
    let name = |k: &str| c[k][0].as_str().unwrap_or("?").to_string();
    let (src, dst) = (name("src"), name("dst"));
    let id = format!(
        "backward of redistribute {src} -> {dst} on {mesh:?}, {shape:?}, cotangent e_{}",
        c["cotangent_global_index"]
    );
    let ne = |why: &str| (id.clone(), Class::NotExpressible(why.into()), String::new());
    let (Some(input), Some(output), [n]) = (
        dtensor_placement(&src),
        dtensor_placement(&dst),
        mesh.as_slice(),
    ) else {
        return ne("placements or mesh the model does not read");
    };
    let n = *n;
    if n == 0 || n > 64 || shape.len() > 4 || shape.iter().any(|&k| k > 64) {
        return ne("a mesh or shape past the model's limits");
    }
    if let Some(why) = c["refused"].as_str() {
        return refusal(id, &input, &output, n, &shape, why, "refused forward");
    }
    let (Some(cot), Some(grad)) = (tensors(&c["cotangent"]), tensors(&c["grad_local"])) else {
        return ne("a piece not exact in float64");
    };
    // DTensor's cotangent placements: the output's own.
    let Some(value) = output.denote(&cot) else {
        return ne("a cotangent whose pieces denote nothing under the output's placement");
    };
    let cot_out = output.cot();
    let Ok(cot_model) = cot_out.distribute(&value, n) else {
        return ne("a cotangent the model's cotangent placement cannot hold");
    };
    let e = match spmd_dialects::uneven::elaborate(
        spmd_semantics::Dialect::Dtensor,
        "redistribute",
        None,
        &input,
        &output,
    ) {
        Ok(e) => e,
        Err(e) => {
            return (
                id,
                Class::ModelMismatch(format!("the model refuses what DTensor runs: {e}")),
                String::new(),
            )
        }
    };
    let Some(b) = &e.backward else {
        return (
            id,
            Class::ModelMismatch("the model picks no backward".into()),
            String::new(),
        );
    };
    let ours = match b(&cot_model) {
        Ok(x) => x,
        Err(why) => {
            return (
                id,
                Class::ModelMismatch(format!("the model's backward raises: {why}")),
                String::new(),
            )
        }
    };
    if let Some(d) = first_difference(&ours, &grad) {
        return (id, Class::ModelMismatch(d), String::new());
    }
    let grad_p = spmd_dialects::dtensor::held(&input.cot());
    match grad_p.denote(&grad) {
        Some(g) if g == value => (
            id,
            Class::Agree,
            format!(
                "DTensor's gradient equals the model's backward ({}) on every rank and denotes the cotangent's value (B3)",
                e.backward_text.as_deref().unwrap_or("?")
            ),
        ),
        g => (
            id,
            Class::RealDefect(format!(
                "B3: the gradient denotes {}, the cotangent's value is {value}",
                g.map_or("nothing".to_string(), |g| g.to_string())
            )),
            String::new(),
        ),
    }
}

/// The expression of an op peers/record_uneven_dtensor_ops.py records,
/// for inputs of these global shapes.
pub fn recorded_op(op: &str, shapes: &[Vec<usize>]) -> Option<String> {
    Some(match op {
        "add" => "x + y".to_string(),
        "mul" => "x * y".into(),
        "relu" => "relu(x - 3)".into(),
        "sum" => "sum(x, 0)".into(),
        "matmul" => "matmul(x, y)".into(),
        "t" => "transpose(x)".into(),
        "reshape" => format!(
            "reshape(x, [{}])",
            shapes.first().map_or(0, |s| s.iter().product::<usize>())
        ),
        _ => return None,
    })
}

/// A recorded DTensor op on uneven shards (SPEC.md §23.16): the outputs
/// must denote the model's op of the inputs' values, and DTensor must keep
/// the written strategy exactly where `dtensor::keeps_strategy` says.
fn ops_case(c: &Value) -> (String, Class, String) {
    let op = c["op"].as_str().unwrap_or("?");
    let n = usizes(&c["mesh"]).first().copied().unwrap_or(0);
    let shapes: Vec<Vec<usize>> = c["shapes"]
        .as_array()
        .map(|a| a.iter().map(usizes).collect())
        .unwrap_or_default();
    let ins: Vec<String> = c["inputs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let id = format!("{op}({}) on [{n}], {shapes:?}", ins.join(", "));
    let ne = |why: String| (id.clone(), Class::NotExpressible(why), String::new());
    if c.get("no_result").is_some() {
        return (
            id.clone(),
            Class::Undetermined(format!(
                "DTensor gave no result ({}): its view propagation on a sharded dim of length 0",
                c["no_result"].as_str().unwrap_or("")
            )),
            String::new(),
        );
    }
    if let Some(why) = c["refused"].as_str() {
        return ne(format!(
            "DTensor refuses ({why}); the model has no rule for views on uneven shards"
        ));
    }
    let out = c["output"][0].as_str().unwrap_or("?");
    let (Some(out_p), Some(in_p)) = (
        dtensor_placement(out),
        ins.iter()
            .map(|p| dtensor_placement(p))
            .collect::<Option<Vec<_>>>(),
    ) else {
        return ne(format!(
            "placement {out}: the model has no _StridedShard (SPEC.md §23.8)"
        ));
    };
    let Some(expr) = recorded_op(op, &shapes) else {
        return ne(format!("op {op}"));
    };
    let Ok(f) = spmd_interp::parse(&expr) else {
        return ne(format!("op {op}"));
    };
    let globals: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let k: usize = s.iter().product();
            Tensor::new(
                s.clone(),
                (0..k)
                    .map(|j| spmd_semantics::Q::int((1 + 100 * i + j) as i64))
                    .collect(),
            )
        })
        .collect();
    let Ok(want) = spmd_interp::eval::infer(&f.expr, &shapes)
        .map_err(|_| ())
        .and_then(|_| {
            spmd_interp::eval::eval(&f.expr, &globals, &mut Default::default()).map_err(|_| ())
        })
    else {
        return ne(format!("{expr} on shapes {shapes:?}"));
    };
    let Some(pieces) = tensors(&c["per_rank"]) else {
        return ne("a piece not exact in float64".into());
    };
    if out_p.denote(&pieces).as_ref() != Some(&want) {
        return (
            id,
            Class::RealDefect(format!(
                "DTensor's pieces under {out} denote {}, the op gives {want}",
                out_p
                    .denote(&pieces)
                    .map_or("nothing".into(), |t| t.to_string())
            )),
            String::new(),
        );
    }
    let aten = c["aten"].as_str().unwrap_or("?");
    let Some(flag) = spmd_dialects::dtensor::allow_uneven_sharding(aten) else {
        return (
            id,
            Class::Agree,
            format!("the pieces under {out} denote the op; {aten} has no single-dim strategy flag"),
        );
    };
    let keeps = spmd_dialects::dtensor::keeps_strategy(aten, flag, n, &in_p, &shapes).is_ok();
    let kept = !matches!(out_p, Placement::Inv) || in_p.iter().all(|p| *p == Placement::Inv);
    // Mixed Shard and Replicate inputs of a pointwise op: DTensor's
    // strategy takes both as Shard, which no written typing says.
    if op == "add" && in_p.contains(&Placement::Inv) {
        return (
            id,
            Class::Agree,
            format!("the pieces under {out} denote the op (a Replicate() operand of a pointwise op: the strategy is not predicted)"),
        );
    }
    if keeps != kept {
        return (
            id,
            Class::ModelMismatch(format!(
                "keeps_strategy says {}, DTensor gave {out}",
                if keeps { "kept" } else { "dropped" }
            )),
            String::new(),
        );
    }
    (
        id,
        Class::Agree,
        format!(
            "the pieces under {out} denote the op; allow_uneven_sharding={flag}, strategy {}",
            if kept {
                "kept"
            } else {
                "dropped (Replicate() first)"
            }
        ),
    )
}

/// A recorded `from_local` of pieces of given sizes, then a redistribute
/// to Replicate() (SPEC.md §23.17).
fn from_local_case(c: &Value) -> (String, Class, String) {
    let sizes = usizes(&c["sizes"]);
    let n = sizes.len();
    let len: usize = sizes.iter().sum();
    let id = format!("from_local(sizes={sizes:?}) |> redistribute Replicate()");
    let global = Tensor::new(
        vec![len],
        (1..=len)
            .map(|i| spmd_semantics::Q::int(i as i64))
            .collect(),
    );
    let Ok(pieces) = Split::Sizes(sizes.clone()).split(&global, 0, n) else {
        return (id, Class::NotExpressible("sizes".into()), String::new());
    };
    let Some(real) = tensors(&c["after"]) else {
        return (
            id,
            Class::NotExpressible("a piece not exact in float64".into()),
            String::new(),
        );
    };
    match spmd_dialects::dtensor::padded_gather(&pieces, 0) {
        Err(e) => (
            id,
            Class::NotExpressible(format!(
                "LocalTensorMode concatenates pieces of different lengths in the even branch; a process group needs equal ones ({e})"
            )),
            String::new(),
        ),
        Ok(ours) => match first_difference(&ours, &real) {
            Some(d) => (id, Class::ModelMismatch(d), String::new()),
            None if real.iter().all(|t| *t == global) => (
                id,
                Class::Agree,
                "torch.chunk's sizes: the value comes back".into(),
            ),
            None => (
                id,
                Class::RealDefect(format!(
                    "from_local accepts pieces of sizes {sizes:?}, which are not torch.chunk's; the redistribute gives {} for {global} (pytorch #144109's class)",
                    real[0]
                )),
                String::new(),
            ),
        },
    }
}

/// A recorded JAX placement of a vector on n devices (SPEC.md §23.18).
fn jax_case(c: &Value) -> (String, Class, String) {
    let n = usizes(&c["mesh"]).first().copied().unwrap_or(0);
    let len = c["length"].as_u64().unwrap_or(0) as usize;
    let id = format!("shard_map over P('x') of a vector of {len} on {n} devices");
    let Ok(sizes) = Split::Chunk.sizes(len, n) else {
        return (id, Class::NotExpressible("sizes".into()), String::new());
    };
    let pieces: Vec<Tensor> = sizes.iter().map(|&k| Tensor::zeros(&[k])).collect();
    let ours = spmd_dialects::jax::boundary(&pieces);
    let real = c.get("shard_map_refused").and_then(Value::as_str);
    match (ours, real) {
        (Ok(()), None) => (id, Class::Agree, "both run it".into()),
        (Err(_), Some(why)) => {
            // Refused: meaningful if 2·x on the uneven pieces is exact.
            let p = Placement::Shard(0, Split::Chunk);
            let f = |xs: &[Tensor]| -> Result<Tensor, String> {
                Ok(xs[0].scale(&spmd_semantics::Q::int(2)))
            };
            let mut t = Tally::default();
            match spmd_oracle::uneven::check_op(std::slice::from_ref(&p), &p, &f, n, &[vec![len]], 64, &mut t) {
                Ok(()) if t.instances > 0 => (
                    id,
                    Class::SoundRejection,
                    format!(
                        "both refuse ({why}); 2 * x on torch.chunk's pieces is exact here ({} instances)",
                        t.instances
                    ),
                ),
                _ => (
                    id,
                    Class::Undetermined(format!("both refuse ({why})")),
                    String::new(),
                ),
            }
        }
        (Ok(()), Some(why)) => (
            id,
            Class::ModelMismatch(format!("JAX refuses ({why}); the model's boundary runs it")),
            String::new(),
        ),
        (Err(e), None) => (
            id,
            Class::ModelMismatch(format!("JAX runs it; the model's boundary refuses: {e}")),
            String::new(),
        ),
    }
}

/// Every case of the uneven recordings in `dir` (the fixtures directory);
/// recordings that are not there are skipped.
pub fn run(dir: &str) -> Result<Vec<CaseResult>, UsageError> {
    use rayon::prelude::*;
    let mut out = Vec::new();
    for f in FILES {
        let Some((name, v)) = super::read_recording(dir, f)? else {
            continue;
        };
        let kind = if f.contains("spmd_types_uneven_gloo") {
            "spmd_types_gloo"
        } else if f.contains("spmd_types") {
            "spmd_types"
        } else if f.contains("_backward") {
            "backward"
        } else if f.contains("jax_") {
            "jax"
        } else if f.contains("_ops") {
            "ops"
        } else if f.contains("from_local") {
            "from_local"
        } else {
            "redistribute"
        };
        let (system, version) = match kind {
            "spmd_types" | "spmd_types_gloo" => {
                ("spmd_types", v["spmd_types"].as_str().unwrap_or("?"))
            }
            "jax" => ("jax", v["jax"].as_str().unwrap_or("?")),
            _ => ("dtensor", v["torch"].as_str().unwrap_or("?")),
        };
        let cases = v["cases"]
            .as_array()
            .ok_or_else(|| UsageError(format!("{name}: no `cases`")))?;
        let results: Vec<CaseResult> = cases
            .par_iter()
            .map(|c| {
                let (id, class, note) = match kind {
                    "spmd_types" => spmd_types_case(c, false),
                    "spmd_types_gloo" => spmd_types_case(c, true),
                    "backward" => dtensor_backward_case(c),
                    "jax" => jax_case(c),
                    "ops" => ops_case(c),
                    "from_local" => from_local_case(c),
                    _ => dtensor_case(c),
                };
                CaseResult {
                    file: name.clone(),
                    system: system.into(),
                    version: version.into(),
                    id,
                    class,
                    note,
                    dialect: None,
                }
            })
            .collect();
        out.extend(results);
    }
    Ok(out)
}
