//! The catalogue of collectives and casts by name (SPEC.md §10.1): the names
//! of seed 003 (`all_gather(R)`, `reinterpret(R,P)`, ...) and of JAX
//! (`all_gather_reduced`, `pvary`, ...), with parameters, mapped to kinds,
//! and `divide_by_group_size` (a local division by n, the other half of
//! JAX's transpose of pmean).

use crate::collective::{check_perm, Coll, Collective, Kind};
use spmd_semantics::pending::{PartialKind, Place};
use spmd_semantics::{Dialect, State, Type};

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
    // JAX's older name for pvary, and its generic cast `pcast(to=...)`.
    ("pbroadcast", "cast"),
    ("pcast", "cast"),
    ("preduced", "cast"),
    ("vary_unreduced_cast", "cast"),
    ("reduced_vary_cast", "cast"),
    ("convert", "convert"),
    ("ppermute", "ppermute"),
    ("redistribute", "redistribute"),
    ("divide_by_group_size", "scale"),
];

/// Parsed arguments of a call such as `all_gather(dim = 1, stack)` or
/// `reinterpret(R, P)`. Every argument given is recorded, so the family can
/// refuse the ones it does not take (none is silently ignored).
#[derive(Default, Debug)]
struct Args {
    dim: Option<usize>,
    split: Option<usize>,
    concat: Option<usize>,
    stack: Option<bool>,
    perm: Option<Vec<Option<usize>>>,
    /// `perm` was given as JAX's (source, destination) pairs.
    pairs: bool,
    axes: Option<Vec<String>>,
    states: Vec<String>,
}

impl Args {
    /// The parameters given, by canonical name.
    fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.dim.is_some() {
            v.push("dim");
        }
        if self.split.is_some() {
            v.push("split");
        }
        if self.concat.is_some() {
            v.push("concat");
        }
        if self.stack.is_some() {
            v.push("stack");
        }
        if self.perm.is_some() {
            v.push("perm");
        }
        v
    }
}

fn split_top(body: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in body.chars() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced `{c}`"));
                }
            }
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if depth != 0 {
        return Err("unbalanced brackets".into());
    }
    if !cur.trim().is_empty() || !parts.is_empty() {
        parts.push(cur);
    }
    Ok(parts)
}

/// `[a, b, ...]` (brackets required), split on commas.
fn list<'a>(name: &str, k: &str, v: &'a str) -> Result<Vec<&'a str>, String> {
    let inner = v
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| format!("{name}: `{k}` takes a list `[...]`, got `{}`", v.trim()))?;
    if inner.trim().is_empty() {
        return Ok(vec![]);
    }
    Ok(inner.split(',').map(str::trim).collect())
}

/// `[(0, 1), (1, 0)]`: JAX's permutation as (source, destination) pairs,
/// turned into `perm[source] = destination` over members 0..=max index
/// (members past the largest index named send nothing; the group size comes
/// from the mesh). As in JAX, a source or a destination named twice is an
/// error; a rank outside the group is one when the mesh is known.
fn perm_pairs(name: &str, v: &str) -> Result<Vec<Option<usize>>, String> {
    let inner = v
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| format!("{name}: `perm` takes a list `[...]`, got `{}`", v.trim()))?;
    let mut pairs = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let body = rest
            .strip_prefix('(')
            .and_then(|r| r.split_once(')'))
            .ok_or_else(|| format!("{name}: `perm` pairs are written `(source, destination)`"))?;
        let (a, b) = body
            .0
            .split_once(',')
            .ok_or_else(|| format!("{name}: `({})` is not a pair", body.0))?;
        let num = |x: &str| {
            let x = x.trim();
            if x.starts_with('-') && x[1..].trim().parse::<usize>().is_ok() {
                // JAX reads a negative rank from the end of the group, which
                // only the mesh fixes.
                return Err(format!(
                    "{name}: `perm` pair entry `{x}` is negative; write the member's rank (0 to the group size - 1)"
                ));
            }
            x.parse::<usize>()
                .map_err(|_| format!("{name}: `perm` pair entry `{x}` is not a rank"))
        };
        pairs.push((num(a)?, num(b)?));
        rest = body.1.trim().trim_start_matches(',').trim();
    }
    let n = pairs.iter().map(|&(a, b)| a.max(b) + 1).max().unwrap_or(0);
    if n > 4096 {
        return Err(format!("{name}: `perm` names rank {}", n - 1));
    }
    let mut perm = vec![None; n];
    for (a, b) in pairs {
        if perm[a].replace(b).is_some() {
            return Err(format!(
                "{name}: sources and destinations must be unique; member {a} is given two destinations"
            ));
        }
    }
    Ok(perm)
}

fn parse_args(name: &str, body: &str) -> Result<Args, String> {
    let mut a = Args::default();
    let parts = split_top(body).map_err(|e| format!("{name}: {e}"))?;
    let uint = |k: &str, v: &str| {
        v.trim().parse::<usize>().map_err(|_| {
            format!(
                "{name}: `{k}` takes a non-negative integer, got `{}`",
                v.trim()
            )
        })
    };
    let once = |k: &str, set: bool| {
        if set {
            Err(format!("{name}: parameter `{k}` given twice"))
        } else {
            Ok(())
        }
    };
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            return Err(format!("{name}: empty argument"));
        }
        match p.split_once('=') {
            Some((k, v)) => {
                let k = k.trim();
                match k {
                    "dim" | "gather_dim" | "scatter_dim" | "scatter_dimension" => {
                        once("dim", a.dim.is_some())?;
                        a.dim = Some(uint(k, v)?);
                    }
                    "split" | "split_dim" | "split_axis" => {
                        once("split", a.split.is_some())?;
                        a.split = Some(uint(k, v)?);
                    }
                    "concat" | "concat_dim" | "concat_axis" => {
                        once("concat", a.concat.is_some())?;
                        a.concat = Some(uint(k, v)?);
                    }
                    "stack" | "tiled" => {
                        once("stack", a.stack.is_some())?;
                        let b = match v.trim() {
                            "true" | "True" => true,
                            "false" | "False" => false,
                            o => {
                                return Err(format!("{name}: `{k}` takes true or false, got `{o}`"))
                            }
                        };
                        // JAX's `tiled=True` concatenates: the opposite of stacking.
                        a.stack = Some(if k == "tiled" { !b } else { b });
                    }
                    "perm" if v.contains('(') => {
                        // JAX's form: (source, destination) pairs; members
                        // that send nothing are absent. The group is taken
                        // to be members 0 to the largest index named.
                        once("perm", a.perm.is_some())?;
                        a.perm = Some(perm_pairs(name, v)?);
                        a.pairs = true;
                    }
                    "perm" => {
                        once("perm", a.perm.is_some())?;
                        let perm = list(name, k, v)?
                            .into_iter()
                            .map(|s| {
                                if s == "_" {
                                    Ok(None)
                                } else {
                                    uint("perm", s).map(Some)
                                }
                            })
                            .collect::<Result<Vec<_>, _>>()?;
                        a.perm = Some(perm);
                    }
                    // JAX's `axis=` of all_gather is the tensor dim; a mesh
                    // axis is a name, never a number.
                    "axis" if v.trim().parse::<usize>().is_ok() => {
                        once("dim", a.dim.is_some())?;
                        a.dim = Some(uint(k, v)?);
                    }
                    "to" => {
                        let st = match v.trim().trim_matches(['\'', '"']) {
                            "varying" | "Varying" => "V",
                            "reduced" | "Reduced" => "R",
                            "unreduced" | "Unreduced" => "P",
                            "invariant" | "Invariant" => "I",
                            o => {
                                return Err(format!(
                                    "{name}: `to` is varying, reduced, unreduced or invariant, got `{o}`"
                                ))
                            }
                        };
                        if !a.states.is_empty() {
                            return Err(format!("{name}: `to` and a state argument both given"));
                        }
                        a.states.push(st.to_string());
                    }
                    "axis" | "axes" | "mesh_axis" | "axis_name" => {
                        once("axis", a.axes.is_some())?;
                        let v = v.trim();
                        let names: Vec<String> = if v.starts_with('[') || v.starts_with('(') {
                            let inner = &v[1..v.len().saturating_sub(1).max(1)];
                            inner
                                .split(',')
                                .map(|s| s.trim().trim_matches('"').trim_matches('\'').to_string())
                                .filter(|s| !s.is_empty())
                                .collect()
                        } else {
                            vec![v.trim_matches('"').trim_matches('\'').to_string()]
                        };
                        if names.is_empty() || names.iter().any(String::is_empty) {
                            return Err(format!("{name}: `{k}` names no mesh axis"));
                        }
                        a.axes = Some(names);
                    }
                    _ => return Err(format!("{name}: unknown parameter `{k}`")),
                }
            }
            None if p == "stack" => {
                once("stack", a.stack.is_some())?;
                a.stack = Some(true);
            }
            None => a.states.push(p.to_string()),
        }
    }
    Ok(a)
}

/// The parameters each family takes (besides state arguments and `axis`).
fn takes(family: &str) -> &'static [&'static str] {
    match family {
        "gather" => &["dim", "stack"],
        "scatter" => &["dim", "stack"],
        "convert" => &["dim", "stack"],
        "all_to_all" => &["split", "concat", "stack"],
        "ppermute" => &["perm"],
        "redistribute" => &["dim"],
        _ => &[],
    }
}

/// Build a collective from a call's text and the states it converts between
/// on the group axes, without layouts (local SPMD). See [`collective_typed`].
pub fn collective(
    text: &str,
    src: &[State],
    dst: &[State],
    axis_names: &[String],
) -> Result<Collective, String> {
    collective_typed(
        text,
        &Type::new(src.to_vec()),
        &Type::new(dst.to_vec()),
        axis_names,
    )
}

/// The layout shared by the group axes of a type (`None` if unlaid), or an
/// error when they shard different dims.
fn group_layout(name: &str, t: &Type, axes: &[usize]) -> Result<Option<usize>, String> {
    let ls: Vec<Option<usize>> = axes
        .iter()
        .map(|&a| t.layout.get(a).copied().flatten())
        .collect();
    if ls.iter().any(|l| *l != ls[0]) {
        return Err(format!(
            "{name}: the group axes of {t} shard different dims; one collective acts on one dim"
        ));
    }
    Ok(ls[0])
}

/// Build a collective from a call's text and the types it converts between
/// on the group axes. `axis_names` are the mesh's axis names; the group is
/// the `axis`/`axes` parameter, or else every axis whose state or layout
/// changes (or, when none changes, every axis).
///
/// Under global types (SPEC.md §13) an omitted `dim` (`split`, `concat`) is
/// the layout's dim on the group axes, and `redistribute` routes by layouts:
/// `S(i) -> S(j)` with i ≠ j is an all-to-all (split j, concat i).
/// Every argument is checked against what the op takes: an unknown,
/// repeated or inapplicable parameter, or a malformed permutation, is an
/// error.
pub fn collective_typed(
    text: &str,
    src_t: &Type,
    dst_t: &Type,
    axis_names: &[String],
) -> Result<Collective, String> {
    let t = text.trim();
    let (name, body) = match t.split_once('(') {
        Some((n, rest)) => (
            n.trim(),
            rest.trim_end()
                .strip_suffix(')')
                .ok_or_else(|| format!("`{t}`: missing `)`"))?,
        ),
        None => (t, ""),
    };
    let family = NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| match name {
            "pmax" | "pmin" => format!(
                "`{name}` reduces by max or min, which is not linear: it is not a collective of this catalogue (its denotation needs a Partial(max) state)"
            ),
            "axis_index" => {
                "`axis_index` takes no operand: give each rank's index as a Varying input's per-rank values instead".to_string()
            }
            _ => format!(
                "unknown collective `{name}`{} (known: {})",
                spmd_semantics::names::did_you_mean(name, NAMES.iter().map(|n| n.0)),
                NAMES.iter().map(|n| n.0).collect::<Vec<_>>().join(", ")
            ),
        })?;
    let (src, dst) = (&src_t.states[..], &dst_t.states[..]);
    if src.len() != dst.len() || src.is_empty() {
        return Err(format!(
            "{name}: source and destination have {} and {} axes",
            src.len(),
            dst.len()
        ));
    }
    let a = parse_args(name, body)?;
    if name == "pcast" && a.states.is_empty() {
        return Err("pcast: give its destination, e.g. pcast(to='varying')".into());
    }
    if let Some(p) = a.given().into_iter().find(|p| !takes(family).contains(p)) {
        let ok = takes(family);
        return Err(format!(
            "{name}: takes no `{p}` parameter ({})",
            if ok.is_empty() {
                "it takes none besides states and `axis`".to_string()
            } else {
                format!("it takes {}", ok.join(", "))
            }
        ));
    }
    let lay = |t: &Type, i: usize| t.layout.get(i).copied().flatten();
    // An axis changes when its state does, or when both sides name
    // different layouts (an unlaid side, as in the middle of a composition,
    // says nothing).
    let changed: Vec<usize> = (0..src.len())
        .filter(|&i| {
            src[i] != dst[i]
                || matches!((lay(src_t, i), lay(dst_t, i)), (Some(a), Some(b)) if a != b)
        })
        .collect();
    // 003-style state arguments (`all_gather(R)`, `reinterpret(R, P)`,
    // `all_gather(S(1), R)`) must agree with the types they are used at.
    let mut hint_src: Option<usize> = None;
    let mut hint_dst: Option<usize> = None;
    if !a.states.is_empty() {
        let parsed = a
            .states
            .iter()
            .map(|s| Dialect::SpmdTypes.parse_state(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{name}: {e}"))?;
        let (want_src, want_dst) = match parsed.as_slice() {
            [d] => (None, Some(*d)),
            [s, d] => (Some(*s), Some(*d)),
            _ => return Err(format!("{name}: at most two state arguments (src, dst)")),
        };
        let probe = changed.first().copied().unwrap_or(0);
        if want_src.is_some_and(|s| s.0 != src[probe])
            || want_dst.is_some_and(|d| d.0 != dst[probe])
        {
            return Err(format!(
                "`{t}` converts {}{} but is used from {} to {}",
                want_src.map(|s| format!("{} ", s.0)).unwrap_or_default(),
                want_dst.map(|d| format!("to {}", d.0)).unwrap_or_default(),
                src[probe],
                dst[probe]
            ));
        }
        hint_src = want_src.and_then(|s| s.1);
        hint_dst = want_dst.and_then(|d| d.1);
        if let Some((d, h)) = a.dim.and_then(|d| {
            [hint_src, hint_dst]
                .into_iter()
                .flatten()
                .find(|h| *h != d)
                .map(|h| (d, h))
        }) {
            return Err(format!(
                "`{t}`: dim={d} contradicts the state argument S({h})"
            ));
        }
    }
    let axes: Vec<usize> = match &a.axes {
        Some(names) => {
            let mut v = Vec::new();
            for n in names {
                let i = axis_names.iter().position(|x| x == n).ok_or_else(|| {
                    format!(
                        "{name}: no mesh axis `{n}`{}",
                        spmd_semantics::names::did_you_mean(
                            n,
                            axis_names.iter().map(|a| a.as_str())
                        )
                    )
                })?;
                if v.contains(&i) {
                    return Err(format!("{name}: mesh axis `{n}` named twice"));
                }
                v.push(i);
            }
            v
        }
        None => {
            if changed.is_empty() {
                (0..src.len()).collect()
            } else {
                changed.clone()
            }
        }
    };
    if axes.iter().any(|&i| i >= src.len()) {
        return Err(format!("{name}: the types have {} axes", src.len()));
    }
    let (s0, d0) = (src[axes[0]], dst[axes[0]]);
    if axes.iter().any(|&i| src[i] != s0 || dst[i] != d0) {
        return Err(format!(
            "{name}: the group axes must share one source and one destination state"
        ));
    }
    for &i in &changed {
        if !axes.contains(&i) {
            return Err(format!(
                "{name}: axis `{}` changes state or layout but is not in the group",
                axis_names.get(i).cloned().unwrap_or_default()
            ));
        }
    }
    // Layouts on the group axes, from the types or a `S(d)` state argument.
    let pick = |from_type: Option<usize>, hint: Option<usize>| match (from_type, hint) {
        (Some(x), Some(y)) if x != y => Err(format!(
            "{name}: the state argument says S({y}) but the type says S({x})"
        )),
        (x, y) => Ok(x.or(y)),
    };
    let ls = pick(group_layout(name, src_t, &axes)?, hint_src)?;
    let ld = pick(group_layout(name, dst_t, &axes)?, hint_dst)?;
    let stack = a.stack.unwrap_or(false);
    use State::*;
    if stack {
        let laid = match family {
            "gather" => ls,
            "scatter" => ld,
            _ => ls.or(ld),
        };
        if laid.is_some() {
            return Err(format!(
                "{name}: `stack` reads Varying as stacked pieces, which the layout S({}) contradicts; drop one of them",
                laid.unwrap_or(0)
            ));
        }
    }
    let kind = match family {
        "gather" => Kind::AllGather {
            dim: a.dim.or(ls).unwrap_or(0),
            stack,
        },
        "reduce" => Kind::AllReduce,
        "mean" => Kind::PMean,
        "scale" => {
            if s0 != d0 || ls != ld {
                return Err(format!(
                    "{name} keeps the state and layout; it cannot go from {s0} to {d0} or change S(d)"
                ));
            }
            Kind::DivideByGroupSize
        }
        "scatter" => Kind::ReduceScatter {
            dim: a.dim.or(ld).unwrap_or(0),
            stack,
        },
        // `stack` is JAX's untiled form (tiled=False).
        "all_to_all" => Kind::AllToAll {
            split: a.split.or(ld).unwrap_or(0),
            concat: a.concat.or(ls).unwrap_or(0),
            stack,
        },
        "cast" => Kind::Reinterpret,
        "convert" => {
            // Convert keeps the value with local work only (seed 003): the
            // transitions that would need communication are not converts.
            match (s0, d0) {
                (Varying, Reduced | Invariant) => {
                    return Err(format!(
                        "convert from {s0} to {d0} would need communication; use all_gather (convert keeps the value with local work only)"
                    ))
                }
                (Partial, Reduced | Invariant) => {
                    return Err(format!(
                        "convert from {s0} to {d0} would need communication; use all_reduce (convert keeps the value with local work only)"
                    ))
                }
                (Partial, Varying) => {
                    return Err(format!(
                        "convert from {s0} to {d0} would need communication; use reduce_scatter (convert keeps the value with local work only)"
                    ))
                }
                _ => {}
            }
            let dim = match (s0, d0) {
                (Varying, _) => a.dim.or(ls),
                (_, Varying) => a.dim.or(ld),
                _ => a.dim,
            };
            if stack
                && !matches!(
                    (s0, d0),
                    (Varying, Partial) | (Reduced | Invariant, Varying)
                )
            {
                return Err(format!(
                    "convert: `stack` applies from V to P (stack) and from R or I to V (unstack), not from {s0} to {d0}"
                ));
            }
            if a.dim.is_some() && !(s0 == Varying || d0 == Varying) {
                return Err(format!(
                    "convert from {s0} to {d0} touches no dim; it takes no `dim`"
                ));
            }
            Kind::Convert {
                dim: dim.unwrap_or(0),
                stack,
            }
        }
        "ppermute" => {
            let perm = a
                .perm
                .ok_or_else(|| format!("{name}: needs perm = [...]"))?;
            check_perm(name, &perm)?;
            Kind::PPermute {
                perm,
                pairs: a.pairs,
            }
        }
        // Keep the global value (Varying read as concatenation along its
        // layout's dim, or `dim` without a layout): the route of seed 003's
        // state-transition table that does so.
        "redistribute" => {
            if !a.states.is_empty() {
                return Err(
                    "redistribute: its route comes from the types; it takes no state arguments"
                        .into(),
                );
            }
            let side = |l: Option<usize>, what: &str| match (l, a.dim) {
                (Some(x), Some(y)) if x != y => Err(format!(
                    "redistribute: dim={y} but the {what} layout is S({x})"
                )),
                (l, d) => Ok(l.or(d).unwrap_or(0)),
            };
            let route = match (s0, d0) {
                (Varying, Varying) => match (ls, ld) {
                    (Some(i), Some(j)) if i != j => Kind::AllToAll {
                        split: j,
                        concat: i,
                        stack: false,
                    },
                    _ => Kind::Reinterpret,
                },
                (Varying, Reduced | Invariant) => Kind::AllGather {
                    dim: side(ls, "source")?,
                    stack: false,
                },
                (Partial, Reduced | Invariant) => Kind::AllReduce,
                (Partial, Varying) => Kind::ReduceScatter {
                    dim: side(ld, "destination")?,
                    stack: false,
                },
                (Reduced | Invariant, Varying) => Kind::Convert {
                    dim: side(ld, "destination")?,
                    stack: false,
                },
                (Varying, Partial) => Kind::Convert {
                    dim: side(ls, "source")?,
                    stack: false,
                },
                (Reduced | Invariant, Partial) => Kind::Convert {
                    dim: 0,
                    stack: false,
                },
                (a, b)
                    if a == b || matches!((a, b), (Reduced, Invariant) | (Invariant, Reduced)) =>
                {
                    Kind::Reinterpret
                }
                (a, b) => return Err(format!("redistribute: no route from {a} to {b}")),
            };
            let touches_dim = matches!((s0, d0), (Varying, _) | (_, Varying))
                && !matches!(route, Kind::Reinterpret);
            if a.dim.is_some() && !touches_dim {
                return Err(format!(
                    "redistribute from {s0} to {d0} touches no dim; it takes no `dim`"
                ));
            }
            route
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
        Kind::Reinterpret | Kind::Convert { .. } | Kind::DivideByGroupSize => None,
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

/// A permutation's length must be its group's size, which only a mesh fixes:
/// `Err` when some ppermute in `op` fits none of `meshes` (a rule that could
/// never run), so a rule file says so at build time instead of a vacuous
/// verdict.
pub fn check_group_sizes(op: &crate::Op, meshes: &[spmd_semantics::Mesh]) -> Result<(), String> {
    match op {
        crate::Op::Collective(c) => {
            if let Kind::PPermute { perm, pairs } = &c.kind {
                let sizes: Vec<usize> = meshes
                    .iter()
                    .filter(|m| c.axes.iter().all(|&a| a < m.ndim()))
                    .map(|m| c.group_size(m))
                    .collect();
                if *pairs && !sizes.iter().any(|&s| s >= perm.len()) {
                    return Err(format!(
                        "{}: the permutation names member {}; the meshes give groups of {sizes:?}",
                        c.name,
                        perm.len() - 1
                    ));
                }
                if !*pairs && !sizes.contains(&perm.len()) {
                    return Err(format!(
                        "{}: a permutation of {} entries needs a group of {} ranks; the meshes give groups of {sizes:?}",
                        c.name,
                        perm.len(),
                        perm.len()
                    ));
                }
            }
            Ok(())
        }
        crate::Op::Compose(ops) => ops.iter().try_for_each(|o| check_group_sizes(o, meshes)),
        _ => Ok(()),
    }
}

/// A collective of a pending kind named in a rule's `forward` (SPEC.md
/// §21.7), for the claimed placements `src -> dst`: `all_reduce(k)`,
/// `reduce_scatter(k, dim=d)`, `partition(k)`, JAX's `unreduced_psum`,
/// `unreduced_pmax`, `unreduced_pmin`, and DTensor's `redistribute`, which
/// the placements determine.
pub fn kind_collective(text: &str, src: Place, dst: Place) -> Result<Coll, String> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let kind = |w: &str| PartialKind::parse(w.trim_matches(|c| c == '"' || c == '\''));
    let arg = |pre: &str| t.strip_prefix(pre).and_then(|r| r.strip_suffix(')'));
    let c = if t == "redistribute" {
        match (src, dst) {
            (Place::Part(k), Place::Inv) => Coll::AllReduce(k),
            (Place::Part(k), Place::Shard(d)) => Coll::ReduceScatter(k, d),
            _ => {
                return Err(format!(
                    "`redistribute` from {src} to {dst} is not a pending-kind collective here (from Partial(k) to Replicate() or Shard(d); DTensor's redistribute refuses Replicate() to Partial(k), SPEC.md §21.3)"
                ))
            }
        }
    } else if let Some(k @ ("sum" | "max" | "min")) = t.strip_prefix("unreduced_p") {
        Coll::AllReduce(kind(k)?)
    } else if let Some(a) = arg("all_reduce(") {
        Coll::AllReduce(kind(a)?)
    } else if let Some(a) = arg("partition(") {
        Coll::Partition(kind(a)?)
    } else if let Some(a) = arg("reduce_scatter(") {
        let (k, d) = a
            .split_once(',')
            .ok_or_else(|| format!("`{text}`: reduce_scatter(k, dim=d)"))?;
        let d = d.trim_start_matches("dim=");
        Coll::ReduceScatter(
            kind(k)?,
            d.parse()
                .map_err(|_| format!("`{text}`: the dim of reduce_scatter is a number"))?,
        )
    } else {
        return Err(format!(
            "`{text}` is not a pending-kind collective (all_reduce(k), reduce_scatter(k, dim=d), partition(k), unreduced_psum|pmax|pmin, redistribute; SPEC.md §21.7)"
        ));
    };
    // The kinds may differ from the claim (that is what is checked); the
    // shape of the move may not.
    let (cs, cd) = c.places();
    let same = |a: Place, b: Place| match (a, b) {
        (Place::Part(_), Place::Part(_)) | (Place::Inv, Place::Inv) => true,
        (Place::Shard(x), Place::Shard(y)) => x == y,
        _ => false,
    };
    if !same(cs, src) || !same(cd, dst) {
        return Err(format!(
            "`{text}` goes from {cs} to {cd}; the rule claims {src} -> {dst}"
        ));
    }
    Ok(c)
}
