//! Uneven rules (SPEC.md §23.9): placements with split rules in a
//! system's own spelling, the collectives a rule names, and elaboration:
//! which implementation each system runs for a named collective and which
//! backward it picks. The systems' own implementations live in their
//! modules (`dtensor::padded_gather`, `nabla::reduce_scatter_divisible`,
//! `spmd_types::all_gather_backward`, `jax::boundary`).

use spmd_interp::uneven::Coll;
use spmd_semantics::uneven::{Placement, Split};
use spmd_semantics::{Dialect, State, Tensor};

/// A per-rank implementation, boxed.
pub type StepFn =
    Box<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>, String> + Send + Sync + std::panic::RefUnwindSafe>;

/// A written step, elaborated: the forward and backward a system runs,
/// in words and as functions.
pub struct Elaborated {
    pub forward: StepFn,
    pub forward_text: String,
    pub backward: Option<StepFn>,
    pub backward_text: Option<String>,
    /// What the system decided (SPEC.md §15.5).
    pub notes: Vec<String>,
}

/// The split a dialect gives a shard written without one.
pub fn default_split(d: Dialect) -> Split {
    match d {
        Dialect::Nabla => Split::Ceil,
        _ => Split::Chunk,
    }
}

/// Whether a type text names a split rule (`S(0, chunk)`): such a rule is
/// checked on uneven shards.
pub fn names_split(text: &str) -> bool {
    shard_args(text).is_some_and(|(_, rest)| rest.is_some())
}

/// Whether a type text is a shard with its dim (`S(0)`, `Shard(0)`,
/// `sharded(0, ceil)`): pieces of different lengths under it are uneven.
pub fn names_shard(text: &str) -> bool {
    shard_args(text).is_some()
}

/// `S(d, split)`, `Shard(d, split)`, `sharded(d, split)` or `Varying(d,
/// split)`: the dim text and the split text, if any.
fn shard_args(text: &str) -> Option<(&str, Option<&str>)> {
    let t = text.trim();
    let inner = ["S(", "Shard(", "sharded(", "Varying("]
        .iter()
        .find_map(|p| t.strip_prefix(p))?
        .strip_suffix(')')?;
    Some(match inner.split_once(',') {
        Some((d, s)) => (d.trim(), Some(s.trim())),
        None => (inner.trim(), None),
    })
}

/// Reads one placement in a dialect's names: a shard with its dim and
/// split (the dialect's default split when none is written), or a state.
pub fn parse_placement(d: Dialect, text: &str) -> Result<Placement, String> {
    if let Some((dim, split)) = shard_args(text) {
        let dim = dim
            .parse::<usize>()
            .map_err(|_| format!("bad shard dim `{dim}` in `{}`", text.trim()))?;
        let split = match split {
            Some(s) => Split::parse(s)?,
            None => default_split(d),
        };
        return Ok(Placement::Shard(dim, split));
    }
    match d.parse_state(text)? {
        (State::Invariant, _) => Ok(Placement::Inv),
        (State::Reduced, _) => Ok(Placement::Red),
        (State::Partial, _) => Ok(Placement::Part),
        (State::Varying, _) => Err(format!(
            "`{}`: a shard on uneven rows names its dim, as `S(0, chunk)`",
            text.trim()
        )),
    }
}

/// A placement in a dialect's names.
pub fn show(d: Dialect, p: &Placement) -> String {
    match (d, p) {
        (Dialect::Dtensor, Placement::Shard(k, s)) => format!("Shard({k}, {s})"),
        (Dialect::Nabla, Placement::Shard(k, s)) => format!("sharded({k}, {s})"),
        (_, Placement::Shard(k, s)) => format!("S({k}, {s})"),
        (_, Placement::Inv) => d.state_name(State::Invariant).unwrap_or("I").into(),
        (_, Placement::Red) => d.state_name(State::Reduced).unwrap_or("R").into(),
        (_, Placement::Part) => d.state_name(State::Partial).unwrap_or("P").into(),
    }
}

/// The collectives a rule may name, with their arguments.
pub const NAMES: [&str; 5] = [
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "scatter",
    "all_reduce",
];

/// `name(key=value, ...)`: the name and its arguments.
fn call(text: &str) -> Result<(String, Vec<(String, String)>), String> {
    let t = text.trim();
    let (name, args) = match t.split_once('(') {
        Some((n, rest)) => (
            n.trim(),
            rest.strip_suffix(')')
                .ok_or_else(|| format!("`{t}`: a `(` without its `)`"))?,
        ),
        None => (t, ""),
    };
    let mut out = Vec::new();
    // Split on commas outside brackets (sizes=[3, 2]).
    let mut depth = 0i32;
    let mut at = 0;
    let bytes: Vec<char> = args.chars().collect();
    let mut parts = Vec::new();
    for (i, c) in bytes.iter().enumerate() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(bytes[at..i].iter().collect::<String>());
                at = i + 1;
            }
            _ => {}
        }
    }
    parts.push(bytes[at..].iter().collect::<String>());
    for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("`{p}` in `{t}`: arguments are written key=value"))?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok((name.to_string(), out))
}

fn arg_dim(args: &[(String, String)], key: &str) -> Result<Option<usize>, String> {
    args.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| {
            v.parse::<usize>()
                .map_err(|_| format!("`{key}={v}`: not a dim"))
        })
        .transpose()
}

fn arg_split(args: &[(String, String)]) -> Result<Option<Split>, String> {
    args.iter()
        .find(|(k, _)| k == "split" || k == "split_sizes")
        .map(|(k, v)| {
            if k == "split_sizes" {
                Split::parse(&format!("sizes={v}"))
            } else {
                Split::parse(v)
            }
        })
        .transpose()
}

/// A named collective from `input` to `output`, its dims and split taken
/// from the placements unless written.
pub fn parse_coll(text: &str, input: &Placement, output: &Placement) -> Result<Coll, String> {
    let (name, args) = call(text)?;
    for (k, _) in &args {
        if !["dim", "split", "split_sizes", "split_dim", "concat_dim"].contains(&k.as_str()) {
            return Err(format!(
                "`{k}` in `{}`: not an argument (dim, split, split_sizes, split_dim, concat_dim)",
                text.trim()
            ));
        }
    }
    let in_shard = match input {
        Placement::Shard(d, s) => Some((*d, s.clone())),
        _ => None,
    };
    let out_shard = match output {
        Placement::Shard(d, s) => Some((*d, s.clone())),
        _ => None,
    };
    let split = arg_split(&args)?;
    let need = |what: &str| {
        format!(
            "`{}`: {what}, and the rule takes {input} to {output}",
            text.trim()
        )
    };
    let coll = match name.as_str() {
        "all_gather" => Coll::AllGather {
            dim: arg_dim(&args, "dim")?
                .or(in_shard.as_ref().map(|s| s.0))
                .ok_or_else(|| need("all_gather takes a shard"))?,
        },
        "reduce_scatter" | "scatter" => {
            let (dim, s) = out_shard.ok_or_else(|| need("it makes a shard"))?;
            let dim = arg_dim(&args, "dim")?.unwrap_or(dim);
            let split = split.unwrap_or(s);
            if name == "scatter" {
                Coll::Scatter { dim, split }
            } else {
                Coll::ReduceScatter { dim, split }
            }
        }
        "all_to_all" => {
            let (sd, s) = out_shard.ok_or_else(|| need("all_to_all makes a shard"))?;
            let cd = in_shard
                .as_ref()
                .map(|s| s.0)
                .ok_or_else(|| need("all_to_all takes a shard"))?;
            Coll::AllToAll {
                split_dim: arg_dim(&args, "split_dim")?.unwrap_or(sd),
                concat_dim: arg_dim(&args, "concat_dim")?.unwrap_or(cd),
                split: split.unwrap_or(s),
            }
        }
        "all_reduce" => Coll::AllReduce,
        other => {
            return Err(format!(
                "`{other}` is not a collective on uneven shards (expected one of: {}){}",
                NAMES.join(", "),
                spmd_semantics::names::did_you_mean(other, NAMES)
            ))
        }
    };
    if coll.output(input, true).is_none() {
        return Err(format!(
            "`{}` does not take {input} to {output}",
            text.trim()
        ));
    }
    Ok(coll)
}

/// The collective as a boxed implementation.
pub fn boxed(c: Coll) -> StepFn {
    Box::new(move |xs| c.forward(xs))
}

/// The backward the math gives a collective from `input` to `output`
/// (its transpose, SPEC.md §23.9): what a system that follows the types
/// picks. `None`: none is a collective here.
pub fn transpose(c: &Coll, input: &Placement, output: &Placement) -> Option<Coll> {
    Some(match (c, input, output) {
        (Coll::AllGather { dim }, Placement::Shard(_, s), Placement::Inv) => Coll::Scatter {
            dim: *dim,
            split: s.clone(),
        },
        (Coll::AllGather { dim }, Placement::Shard(_, s), _) => Coll::ReduceScatter {
            dim: *dim,
            split: s.clone(),
        },
        (Coll::ReduceScatter { dim, .. } | Coll::Scatter { dim, .. }, _, _) => {
            Coll::AllGather { dim: *dim }
        }
        (
            Coll::AllToAll {
                split_dim,
                concat_dim,
                ..
            },
            Placement::Shard(_, s),
            _,
        ) => Coll::AllToAll {
            split_dim: *concat_dim,
            concat_dim: *split_dim,
            split: s.clone(),
        },
        _ => return None,
    })
}

/// Elaborates a written step in a dialect (SPEC.md §23.9): the system's
/// implementation of the named collective and the backward it picks
/// (`backward` written overrides the pick).
pub fn elaborate(
    d: Dialect,
    forward: &str,
    backward: Option<&str>,
    input: &Placement,
    output: &Placement,
) -> Result<Elaborated, String> {
    let mut notes = Vec::new();
    let (fwd, forward_text): (StepFn, String) = match d {
        Dialect::Dtensor if call(forward)?.0 == "redistribute" => {
            let f = crate::dtensor::redistribute(input, output)?;
            notes.push(format!(
                "DTensor runs redistribute {} -> {} as {}",
                show(d, input),
                show(d, output),
                crate::dtensor::redistribute_words(input, output)
            ));
            (f, forward.trim().to_string())
        }
        _ => {
            let c = parse_coll(forward, input, output)?;
            let text = c.to_string();
            (system_forward(d, c, &mut notes)?, text)
        }
    };
    let fwd = boundary(d, fwd, &mut notes);
    let cot_in = input.cot();
    let cot_out = output.cot();
    let (bwd, backward_text) = match backward {
        Some(b) => {
            let (f, t) = match d {
                Dialect::Dtensor if call(b)?.0 == "redistribute" => (
                    crate::dtensor::redistribute(
                        &crate::dtensor::held(&cot_out),
                        &crate::dtensor::held(&cot_in),
                    )?,
                    b.trim().to_string(),
                ),
                _ => {
                    let c = parse_coll(b, &cot_out, &cot_in)?;
                    let t = c.to_string();
                    (system_forward(d, c, &mut notes)?, t)
                }
            };
            (Some(f), Some(t))
        }
        None => match system_backward(d, forward, input, output)? {
            Some((f, t)) => {
                notes.push(format!("{} picks the backward {t}", d.name()));
                (Some(f), Some(t))
            }
            None => (None, None),
        },
    };
    Ok(Elaborated {
        forward: fwd,
        forward_text,
        backward: bwd,
        backward_text,
        notes,
    })
}

/// The implementation a system runs for a generic collective.
fn system_forward(d: Dialect, c: Coll, notes: &mut Vec<String>) -> Result<StepFn, String> {
    Ok(match (d, &c) {
        (Dialect::Nabla, Coll::ReduceScatter { .. } | Coll::AllToAll { .. }) => {
            notes.push("Nabla raises where the scattered dim does not divide".into());
            crate::nabla::divisible(c)
        }
        _ => boxed(c),
    })
}

/// JAX gives every device one static shape: an input whose pieces differ
/// in shape is refused at the `shard_map` boundary, and a step that would
/// make pieces of different shapes cannot be written.
fn boundary(d: Dialect, f: StepFn, notes: &mut Vec<String>) -> StepFn {
    if d != Dialect::Jax {
        return f;
    }
    notes.push("JAX refuses pieces of different lengths at the shard_map boundary".into());
    Box::new(move |xs| {
        crate::jax::boundary(xs)?;
        let out = f(xs)?;
        crate::jax::boundary(&out).map_err(|_| {
            "JAX gives every device the same shape; this step would not".to_string()
        })?;
        Ok(out)
    })
}

/// The backward a system picks for a written forward, as it picks it.
fn system_backward(
    d: Dialect,
    forward: &str,
    input: &Placement,
    output: &Placement,
) -> Result<Option<(StepFn, String)>, String> {
    let (cot_in, cot_out) = (input.cot(), output.cot());
    if d == Dialect::Dtensor && call(forward)?.0 == "redistribute" {
        // DTensor holds the cotangent of a Partial(sum) value, and the
        // gradient of one, as Replicate().
        let (from, grad) = (
            crate::dtensor::held(&cot_out),
            crate::dtensor::held(&cot_in),
        );
        let f = crate::dtensor::redistribute(&from, &grad)?;
        return Ok(Some((
            f,
            format!("redistribute {} -> {}", show(d, &from), show(d, &grad)),
        )));
    }
    let c = parse_coll(forward, input, output)?;
    Ok(match d {
        Dialect::SpmdTypes => crate::spmd_types::uneven_backward(&c, input, output),
        Dialect::Nabla => crate::nabla::uneven_backward(&c, input),
        _ => transpose(&c, input, output).and_then(|t| {
            t.output(&cot_out, matches!(cot_in, Placement::Red))
                .filter(|o| *o == cot_in)
                .map(|_| {
                    let text = t.to_string();
                    (boxed(t), text)
                })
        }),
    })
}

/// The collective that moves a value from `input` to `output` when a
/// system names only the move (DTensor's `redistribute`).
pub fn generic(input: &Placement, output: &Placement) -> Option<Coll> {
    use Placement::*;
    Some(match (input, output) {
        (Shard(d, _), Inv | Red) => Coll::AllGather { dim: *d },
        (Part, Shard(d, s)) => Coll::ReduceScatter {
            dim: *d,
            split: s.clone(),
        },
        (Inv | Red, Shard(d, s)) => Coll::Scatter {
            dim: *d,
            split: s.clone(),
        },
        (Part, Inv | Red) => Coll::AllReduce,
        (Shard(c, _), Shard(sd, s)) if c != sd => Coll::AllToAll {
            split_dim: *sd,
            concat_dim: *c,
            split: s.clone(),
        },
        _ => return None,
    })
}

/// Entries a step sends between ranks on these pieces: the named
/// collective's (a ring model, SPEC.md §10), or for DTensor's
/// `redistribute` what its padded implementation sends (every piece
/// padded to ⌈L/n⌉ rows before a gather or scatter). A step whose
/// text names no collective (a backward picked by words) counts as the
/// collective that moves `input` to `output`.
pub fn traffic(
    d: Dialect,
    text: &str,
    input: &Placement,
    output: &Placement,
    xs: &[Tensor],
) -> usize {
    let n = xs.len();
    let padded = |dim: usize| -> Option<usize> {
        let len: usize = xs
            .iter()
            .map(|x| x.shape.get(dim).copied().unwrap_or(0))
            .sum();
        let first = xs.first()?;
        let inner: usize = first
            .shape
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != dim)
            .map(|(_, s)| s)
            .product();
        Some(n * n.saturating_sub(1) * len.div_ceil(n) * inner)
    };
    let redistribute = call(text).map(|c| c.0).ok().as_deref() == Some("redistribute");
    match (d, redistribute, input, output) {
        (Dialect::Dtensor, true, Placement::Shard(k, _), Placement::Inv | Placement::Red) => {
            padded(*k).unwrap_or(0)
        }
        _ => parse_coll(text, input, output)
            .ok()
            .or_else(|| generic(input, output))
            .map_or(0, |c| c.traffic(xs)),
    }
}
