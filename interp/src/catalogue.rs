//! The catalogue of collectives and casts by name (SPEC.md §10.1): the names
//! of seed 003 (`all_gather(R)`, `reinterpret(R,P)`, ...) and of JAX
//! (`all_gather_reduced`, `pvary`, ...), with parameters, mapped to kinds.

use crate::collective::{Collective, Kind};
use spmd_semantics::{Dialect, State};

/// Names and the kind each stands for (parameters filled in from the call).
pub const NAMES: &[(&str, &str)] = &[
    ("all_gather", "gather"),
    ("all_gather_invariant", "gather"),
    ("all_gather_reduced", "gather"),
    ("all_reduce", "reduce"),
    ("psum", "reduce"),
    ("psum_invariant", "reduce"),
    ("unreduced_psum", "reduce"),
    ("pmean", "mean"),
    ("reduce_scatter", "scatter"),
    ("psum_scatter", "scatter"),
    ("unreduced_psum_scatter", "scatter"),
    ("all_to_all", "all_to_all"),
    ("reinterpret", "cast"),
    ("pvary", "cast"),
    ("preduced", "cast"),
    ("vary_unreduced_cast", "cast"),
    ("reduced_vary_cast", "cast"),
    ("convert", "convert"),
    ("ppermute", "ppermute"),
    ("redistribute", "redistribute"),
];

/// Parsed arguments of a call such as `all_gather(dim = 1, stack)` or
/// `reinterpret(R, P)`.
#[derive(Default, Debug)]
struct Args {
    dim: Option<usize>,
    split: Option<usize>,
    concat: Option<usize>,
    stack: bool,
    perm: Option<Vec<Option<usize>>>,
    axes: Option<Vec<String>>,
    states: Vec<String>,
}

fn parse_args(name: &str, body: &str) -> Result<Args, String> {
    let mut a = Args::default();
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for c in body.chars() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        parts.push(cur);
    }
    let uint = |k: &str, v: &str| {
        v.trim().parse::<usize>().map_err(|_| {
            format!(
                "{name}: `{k}` takes a non-negative integer, got `{}`",
                v.trim()
            )
        })
    };
    for p in parts {
        let p = p.trim();
        match p.split_once('=') {
            Some((k, v)) => {
                let k = k.trim();
                match k {
                    "dim" | "gather_dim" | "scatter_dim" => a.dim = Some(uint(k, v)?),
                    "split" | "split_dim" | "split_axis" => a.split = Some(uint(k, v)?),
                    "concat" | "concat_dim" | "concat_axis" => a.concat = Some(uint(k, v)?),
                    "stack" => a.stack = v.trim() == "true",
                    "perm" => {
                        let inner = v.trim().trim_start_matches('[').trim_end_matches(']');
                        let perm = inner
                            .split(',')
                            .filter(|s| !s.trim().is_empty())
                            .map(|s| {
                                if s.trim() == "_" {
                                    Ok(None)
                                } else {
                                    uint("perm", s).map(Some)
                                }
                            })
                            .collect::<Result<Vec<_>, _>>()?;
                        a.perm = Some(perm);
                    }
                    "axis" | "axes" | "mesh_axis" => {
                        let inner = v.trim().trim_start_matches('[').trim_end_matches(']');
                        a.axes = Some(
                            inner
                                .split(',')
                                .map(|s| s.trim().trim_matches('"').trim_matches('\'').to_string())
                                .filter(|s| !s.is_empty())
                                .collect(),
                        );
                    }
                    _ => return Err(format!("{name}: unknown parameter `{k}`")),
                }
            }
            None if p == "stack" => a.stack = true,
            None => a.states.push(p.to_string()),
        }
    }
    Ok(a)
}

/// Build a collective from a call's text and the states it converts between
/// on the group axes. `axis_names` are the mesh's axis names; the group is
/// the `axis`/`axes` parameter, or else every axis whose state changes (or,
/// when none changes, every axis).
pub fn collective(
    text: &str,
    src: &[State],
    dst: &[State],
    axis_names: &[String],
) -> Result<Collective, String> {
    let t = text.trim();
    let (name, body) = match t.split_once('(') {
        Some((n, rest)) => (
            n.trim(),
            rest.strip_suffix(')')
                .ok_or_else(|| format!("`{t}`: missing `)`"))?,
        ),
        None => (t, ""),
    };
    let family = NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            format!(
                "unknown collective `{name}` (known: {})",
                NAMES.iter().map(|n| n.0).collect::<Vec<_>>().join(", ")
            )
        })?;
    let a = parse_args(name, body)?;
    // 003-style state arguments (`all_gather(R)`, `reinterpret(R, P)`) must
    // agree with the types they are used at.
    if !a.states.is_empty() {
        let parsed = a
            .states
            .iter()
            .map(|s| Dialect::SpmdTypes.parse_state(s).map(|x| x.0))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{name}: {e}"))?;
        let (want_src, want_dst) = match parsed.as_slice() {
            [d] => (None, Some(*d)),
            [s, d] => (Some(*s), Some(*d)),
            _ => return Err(format!("{name}: at most two state arguments (src, dst)")),
        };
        let axes_changed: Vec<usize> = (0..src.len()).filter(|&i| src[i] != dst[i]).collect();
        let probe = axes_changed.first().copied().unwrap_or(0);
        if want_src.is_some_and(|s| s != src[probe]) || want_dst.is_some_and(|d| d != dst[probe]) {
            return Err(format!(
                "`{t}` converts {}{} but is used from {} to {}",
                want_src.map(|s| format!("{s} ")).unwrap_or_default(),
                want_dst.map(|d| format!("to {d}")).unwrap_or_default(),
                src[probe],
                dst[probe]
            ));
        }
    }
    let axes: Vec<usize> = match &a.axes {
        Some(names) => names
            .iter()
            .map(|n| {
                axis_names
                    .iter()
                    .position(|x| x == n)
                    .ok_or_else(|| format!("{name}: no mesh axis `{n}`"))
            })
            .collect::<Result<_, _>>()?,
        None => {
            let changed: Vec<usize> = (0..src.len()).filter(|&i| src[i] != dst[i]).collect();
            if changed.is_empty() {
                (0..src.len()).collect()
            } else {
                changed
            }
        }
    };
    let (s0, d0) = (src[axes[0]], dst[axes[0]]);
    if axes.iter().any(|&i| src[i] != s0 || dst[i] != d0) {
        return Err(format!(
            "{name}: the group axes must share one source and one destination state"
        ));
    }
    for i in 0..src.len() {
        if !axes.contains(&i) && src[i] != dst[i] {
            return Err(format!(
                "{name}: axis `{}` changes state but is not in the group",
                axis_names.get(i).cloned().unwrap_or_default()
            ));
        }
    }
    let dim = a.dim.unwrap_or(0);
    let kind = match family {
        "gather" => Kind::AllGather {
            dim,
            stack: a.stack,
        },
        "reduce" => Kind::AllReduce,
        "mean" => Kind::PMean,
        "scatter" => Kind::ReduceScatter { dim },
        "all_to_all" => Kind::AllToAll {
            split: a.split.unwrap_or(0),
            concat: a.concat.unwrap_or(0),
        },
        "cast" => Kind::Reinterpret,
        "convert" => Kind::Convert { dim },
        "ppermute" => Kind::PPermute {
            perm: a
                .perm
                .ok_or_else(|| format!("{name}: needs perm = [...]"))?,
        },
        // Keep the global value (Varying read as concatenation along `dim`):
        // the route of seed 003's state-transition table that does so.
        "redistribute" => {
            use State::*;
            match (s0, d0) {
                (Varying, Reduced | Invariant) => Kind::AllGather { dim, stack: false },
                (Partial, Reduced | Invariant) => Kind::AllReduce,
                (Partial, Varying) => Kind::ReduceScatter { dim },
                (Reduced | Invariant, Varying | Partial) | (Varying, Partial) => {
                    Kind::Convert { dim }
                }
                (a, b)
                    if a == b || matches!((a, b), (Reduced, Invariant) | (Invariant, Reduced)) =>
                {
                    Kind::Reinterpret
                }
                (a, b) => return Err(format!("redistribute: no route from {a} to {b}")),
            }
        }
        _ => unreachable!("every family of NAMES is matched"),
    };
    // States the kind cannot start from (SPEC.md §10.1).
    let needs: Option<(&str, &[State])> = match kind {
        Kind::AllGather { .. } | Kind::AllToAll { .. } | Kind::PPermute { .. } => {
            Some(("Varying pieces", &[State::Varying]))
        }
        Kind::AllReduce | Kind::ReduceScatter { .. } | Kind::PMean => Some((
            "Partial or Varying values",
            &[State::Partial, State::Varying],
        )),
        Kind::Reinterpret | Kind::Convert { .. } => None,
    };
    if let Some((what, ok)) = needs {
        if !ok.contains(&s0) {
            return Err(format!(
                "`{name}` works on {what}; it cannot start from {s0}"
            ));
        }
    }
    Ok(Collective {
        name: name.to_string(),
        kind,
        axes,
        src: s0,
        dst: d0,
    })
}
