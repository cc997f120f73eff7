//! Fidelity over the uneven recordings (SPEC.md §23.13): DTensor's
//! redistribute on uneven shards and spmd_types' `split_sizes` gathers,
//! from `tests/fixtures/uneven/`, replayed through the dialects'
//! implementations and checked by §23.10's checks on each recorded case.

use super::{CaseResult, Class};
use crate::registry::parse_tensor;
use crate::run::UsageError;
use serde_json::Value;
use spmd_dialects::uneven::StepFn;
use spmd_oracle::uneven::{check_step, Impl, Tally};
use spmd_semantics::uneven::{Placement, Split};
use spmd_semantics::Tensor;

/// The recordings read, relative to the fixtures directory.
pub const FILES: [&str; 3] = [
    "uneven/dtensor_uneven.json",
    "uneven/dtensor_uneven_2.15.0.json",
    "uneven/spmd_types_uneven.json",
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

fn tensors(v: &Value) -> Option<Vec<Tensor>> {
    v.as_array()?
        .iter()
        .map(|x| parse_tensor(x.as_str()?).ok())
        .collect()
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
fn verdict(
    input: &Placement,
    output: &Placement,
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
    if mesh.len() != 1 || src.len() != 1 || dst.len() != 1 {
        return (
            id,
            Class::NotExpressible(
                "nested shards on a 2-D mesh: rules on uneven shards are checked on one axis (SPEC.md §23.10)"
                    .into(),
            ),
            String::new(),
        );
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
                let grad = match &input {
                    Placement::Red => Placement::Inv,
                    p => p.cot(),
                };
                let b: Option<StepFn> =
                    spmd_dialects::dtensor::redistribute(&output.cot(), &grad).ok();
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

fn spmd_types_case(c: &Value) -> (String, Class, String) {
    let sizes = usizes(&c["split_sizes"]);
    let op = c["op"].as_str().unwrap_or("?");
    let id = format!(
        "{op}(split_sizes={sizes:?}) on {}",
        c["split"].as_str().unwrap_or("?")
    );
    let n = sizes.len();
    if let Some(why) = c["refused"].as_str() {
        return (
            id,
            Class::Undetermined(format!(
                "not run by the recorder (LocalTensorMode cannot run the uneven reduce_scatter): {why}"
            )),
            String::new(),
        );
    }
    if op != "all_gather" {
        return (id, Class::NotExpressible(format!("op {op}")), String::new());
    }
    let (Some(input), Some(output)) = (tensors(&c["input"]), tensors(&c["output"])) else {
        return (
            id,
            Class::NotExpressible("a piece not exact in float64".into()),
            String::new(),
        );
    };
    let p = Placement::Shard(0, Split::Sizes(sizes.clone()));
    let e = match spmd_dialects::uneven::elaborate(
        spmd_semantics::Dialect::SpmdTypes,
        "all_gather",
        None,
        &p,
        &Placement::Red,
    ) {
        Ok(e) => e,
        Err(e) => return (id, Class::ModelMismatch(e), String::new()),
    };
    match (e.forward)(&input) {
        Err(why) => (
            id,
            Class::ModelMismatch(format!("the model raises: {why}")),
            String::new(),
        ),
        Ok(out) => match first_difference(&out, &output) {
            Some(d) => (id, Class::ModelMismatch(d), String::new()),
            None => {
                let shape = p.denote(&input).map(|t| t.shape).unwrap_or_default();
                let (class, mut note) = verdict(
                    &p,
                    &Placement::Red,
                    &*e.forward,
                    e.backward.as_ref().map(|b| &**b as &Impl),
                    n,
                    &shape,
                );
                if let Some(b) = c["backward_error"].as_str() {
                    note.push_str(&format!(
                        "; the backward is the model's pick (the recorder could not run spmd_types' own: {b})"
                    ));
                }
                (id, class, note)
            }
        },
    }
}

/// Every case of the uneven recordings in `dir` (the fixtures directory);
/// recordings that are not there are skipped.
pub fn run(dir: &str) -> Result<Vec<CaseResult>, UsageError> {
    use rayon::prelude::*;
    let mut out = Vec::new();
    for f in FILES {
        let name = format!("{dir}/{f}");
        if !std::path::Path::new(&name).exists() {
            continue;
        }
        let text = crate::rules::read_text_limit(&name, 16 << 20)?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| UsageError(format!("{name}: not a recording: {e}")))?;
        let spmd = f.contains("spmd_types");
        let (system, version) = if spmd {
            ("spmd_types", v["spmd_types"].as_str().unwrap_or("?"))
        } else {
            ("dtensor", v["torch"].as_str().unwrap_or("?"))
        };
        let cases = v["cases"]
            .as_array()
            .ok_or_else(|| UsageError(format!("{name}: no `cases`")))?;
        let results: Vec<CaseResult> = cases
            .par_iter()
            .map(|c| {
                let (id, class, note) = if spmd {
                    spmd_types_case(c)
                } else {
                    dtensor_case(c)
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
