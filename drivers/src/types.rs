//! Types written in any dialect (SPEC.md §1.2): `P` on one axis, or
//! `{dp: V, tp: P}` naming every axis of a mesh.

use crate::run::UsageError;
use spmd_semantics::pending::{PartialKind, Place};
use spmd_semantics::{Dialect, Mesh, State, Type};

/// Parse a type. A single state applies to a one-axis mesh; an axis map
/// fixes the axis names and their order.
pub fn parse_type(d: Dialect, text: &str) -> Result<(Vec<String>, Type), UsageError> {
    let t = text.trim();
    if let Some(body) = t.strip_prefix('{').and_then(|b| b.strip_suffix('}')) {
        let mut names = Vec::new();
        let mut states = Vec::new();
        let mut layout = Vec::new();
        for part in split_top(body) {
            let (axis, st) = part
                .split_once(':')
                .or_else(|| part.split_once('='))
                .ok_or_else(|| {
                    UsageError(format!("`{part}` in type `{t}` is not `axis: state`"))
                })?;
            let (s, dim) = d
                .parse_state(st.trim().trim_matches('"'))
                .map_err(UsageError)?;
            names.push(axis.trim().to_string());
            states.push(s);
            layout.push(dim);
        }
        if names.is_empty() {
            return Err(UsageError(format!("type `{t}` names no axis")));
        }
        return Ok((names, Type::laid(states, layout)));
    }
    let (s, dim) = d.parse_state(t).map_err(UsageError)?;
    Ok((vec!["x".into()], Type::laid(vec![s], vec![dim])))
}

/// Split at commas not inside parentheses (so `Shard(0)` stays whole).
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// A JAX-style partition spec, `P('x', None, reduced={'y'})` (SPEC.md §13.4).
struct PSpec {
    /// Per tensor dim, the mesh axes sharding it, major first.
    dims: Vec<Vec<String>>,
    reduced: Vec<String>,
    unreduced: Vec<String>,
}

fn axis_names(text: &str) -> Vec<String> {
    text.trim()
        .trim_start_matches(['(', '{', '['])
        .trim_end_matches([')', '}', ']'])
        .split(',')
        .map(|a| a.trim().trim_matches(['\'', '"']).to_string())
        .filter(|a| !a.is_empty() && a != "None")
        .collect()
}

fn parse_pspec(text: &str) -> Result<PSpec, UsageError> {
    let t = text.trim();
    let body = t
        .strip_prefix("P(")
        .and_then(|b| b.strip_suffix(')'))
        .ok_or_else(|| UsageError(format!("`{t}` is not a partition spec `P(...)`")))?;
    let mut spec = PSpec {
        dims: vec![],
        reduced: vec![],
        unreduced: vec![],
    };
    for part in split_top_all(body) {
        match part.split_once('=') {
            Some((k, v)) if k.trim() == "reduced" => spec.reduced = axis_names(v),
            Some((k, v)) if k.trim() == "unreduced" => spec.unreduced = axis_names(v),
            Some((k, _)) => {
                return Err(UsageError(format!(
                    "`{t}`: unknown keyword `{}` (expected reduced or unreduced)",
                    k.trim()
                )))
            }
            None => spec.dims.push(axis_names(&part)),
        }
    }
    Ok(spec)
}

/// Split at commas outside any brackets.
fn split_top_all(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out.into_iter().map(|p| p.trim().to_string()).collect()
}

/// Types written as partition specs. The mesh axes are the mesh's when one
/// is written, else those the specs name in order of first mention; an axis
/// a spec does not name is Invariant.
fn parse_pspecs(
    texts: &[&str],
    mesh_axes: Option<&[String]>,
) -> Result<(Vec<String>, Vec<Type>), UsageError> {
    let specs: Vec<PSpec> = texts
        .iter()
        .map(|t| parse_pspec(t))
        .collect::<Result<_, _>>()?;
    let mut axes: Vec<String> = mesh_axes.map(<[String]>::to_vec).unwrap_or_default();
    for sp in &specs {
        for a in sp
            .dims
            .iter()
            .flatten()
            .chain(&sp.reduced)
            .chain(&sp.unreduced)
        {
            if !axes.contains(a) {
                if mesh_axes.is_some() {
                    return Err(UsageError(format!(
                        "a partition spec names axis `{a}`, which the mesh lacks"
                    )));
                }
                axes.push(a.clone());
            }
        }
    }
    if axes.is_empty() {
        return Err(UsageError(
            "the partition specs name no mesh axis".to_string(),
        ));
    }
    let mut out = Vec::new();
    for (sp, text) in specs.iter().zip(texts) {
        let mut states = vec![State::Invariant; axes.len()];
        let mut layout = vec![None; axes.len()];
        let mut seen: Vec<String> = Vec::new();
        let mut put = |a: &String, s: State, d: Option<usize>| {
            if seen.contains(a) {
                return Err(UsageError(format!(
                    "`{text}` names axis `{a}` twice (seed 003, rule 3)"
                )));
            }
            seen.push(a.clone());
            let i = axes.iter().position(|x| x == a).expect("collected");
            states[i] = s;
            layout[i] = d;
            Ok(())
        };
        for (d, group) in sp.dims.iter().enumerate() {
            let pos: Vec<usize> = group
                .iter()
                .map(|a| axes.iter().position(|x| x == a).expect("collected"))
                .collect();
            if pos.windows(2).any(|w| w[0] > w[1]) {
                return Err(UsageError(format!(
                    "`{text}`: axes sharding one dim must follow the mesh order {axes:?}"
                )));
            }
            for a in group {
                put(a, State::Varying, Some(d))?;
            }
        }
        for a in &sp.reduced {
            put(a, State::Reduced, None)?;
        }
        for a in &sp.unreduced {
            put(a, State::Partial, None)?;
        }
        out.push(Type::laid(states, layout));
    }
    Ok((axes, out))
}

/// Parse several types that must name the same axes; returns the axis names.
/// Types written as partition specs `P(...)` are read together (§13.4).
pub fn parse_types(d: Dialect, texts: &[&str]) -> Result<(Vec<String>, Vec<Type>), UsageError> {
    parse_types_in(d, texts, None)
}

/// As `parse_types`, with the mesh's axis order when a mesh is written: the
/// axes of every type are put in that order, whatever order a type names
/// them in (SPEC.md §1.2). Without a mesh the first type's order is used.
pub fn parse_types_in(
    d: Dialect,
    texts: &[&str],
    mesh_axes: Option<&[String]>,
) -> Result<(Vec<String>, Vec<Type>), UsageError> {
    if texts.iter().any(|t| t.trim().starts_with("P(")) {
        let (axes, types) = parse_pspecs(texts, mesh_axes)?;
        return Ok((axes, types));
    }
    let mut axes: Option<Vec<String>> = mesh_axes.map(<[String]>::to_vec);
    let mut out = Vec::new();
    for t in texts {
        let (names, ty) = parse_type(d, t)?;
        if let Some(dup) = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
        {
            return Err(UsageError(format!(
                "type `{t}` names axis `{}` twice",
                dup.1
            )));
        }
        let reference = match &axes {
            // A one-state type on a one-axis mesh takes the mesh's name.
            Some(a) if names.len() == 1 && a.len() == 1 && !t.trim().starts_with('{') => {
                out.push(ty);
                continue;
            }
            Some(a) => a.clone(),
            None => {
                axes = Some(names.clone());
                out.push(ty);
                continue;
            }
        };
        let same_set =
            names.len() == reference.len() && names.iter().all(|n| reference.contains(n));
        if !same_set {
            return Err(UsageError(format!(
                "type `{t}` names axes {names:?}, {} {reference:?}",
                if mesh_axes.is_some() {
                    "the mesh has"
                } else {
                    "another type names"
                }
            )));
        }
        let perm: Vec<usize> = reference
            .iter()
            .map(|a| names.iter().position(|n| n == a).expect("same set"))
            .collect();
        out.push(Type::laid(
            perm.iter().map(|&i| ty.states[i]).collect(),
            perm.iter().map(|&i| ty.layout[i]).collect(),
        ));
    }
    Ok((axes.unwrap_or_default(), out))
}

/// Keep only the meshes whose axis names match (for one-axis types, any
/// one-axis mesh), renaming nothing.
pub fn meshes_named(meshes: &[Mesh], axes: &[String]) -> Vec<Mesh> {
    meshes
        .iter()
        .filter(|m| {
            m.ndim() == axes.len()
                && (axes.len() == 1 || m.axes.iter().zip(axes).all(|(a, n)| a.name == *n))
        })
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------
// Pending kinds in rule files (SPEC.md §21.7)

/// Which axes of one written type carry a pending kind: `(Some(axis), k)` for
/// an axis of a table `{x = "Partial(max)"}`, `(None, k)` for every Partial
/// axis of the type (a one-state type, or a partition spec's
/// `unreduced_kind`).
pub type KindMarks = Vec<(Option<String>, PartialKind)>;

/// A kind written inside one state: `Partial(max)`, `Partial("avg")`
/// (every dialect but JAX) or `Unreduced(min)` (JAX). `Ok(None)`: no kind
/// is written (`Partial()`, `Shard(0)`, ...). `Err((needle, message))`.
fn state_kind(d: Dialect, state: &str) -> Result<Option<PartialKind>, (String, String)> {
    let t = state.trim();
    for pre in ["Partial(", "Unreduced("] {
        let Some(inner) = t.strip_prefix(pre).and_then(|r| r.strip_suffix(')')) else {
            continue;
        };
        let word = inner.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        if word.is_empty() {
            return Ok(None);
        }
        let jax = d == Dialect::Jax;
        if jax != (pre == "Unreduced(") {
            let want = if jax { "Unreduced(k)" } else { "Partial(k)" };
            return Err((
                t.to_string(),
                format!(
                    "`{t}`: in dialect {} a pending kind is written {want} (SPEC.md §21.7)",
                    d.name()
                ),
            ));
        }
        let k = PartialKind::parse(word).map_err(|e| (t.to_string(), format!("`{t}`: {e}")))?;
        if jax && k == PartialKind::Avg {
            return Err((
                word.to_string(),
                format!("`{t}`: JAX has no unreduced kind avg (UnreducedKind: sum, max, min)"),
            ));
        }
        return Ok(Some(k));
    }
    Ok(None)
}

/// The kind of a partition spec's `unreduced_kind=` value: `max`,
/// `UnreducedKind.max`, `jax.sharding.UnreducedKind.max` (JAX 0.11,
/// `jax/_src/partition_spec.py`).
fn unreduced_kind(v: &str) -> Result<PartialKind, String> {
    let w = v.trim().trim_matches(|c| c == '"' || c == '\'');
    let w = w.rsplit('.').next().unwrap_or(w).trim();
    match w {
        "sum" => Ok(PartialKind::Sum),
        "max" => Ok(PartialKind::Max),
        "min" => Ok(PartialKind::Min),
        _ => Err(format!(
            "unknown unreduced_kind `{}` (JAX's UnreducedKind: sum, max, min)",
            v.trim()
        )),
    }
}

/// Removes the pending kinds from a rule's written types, so that the core
/// reads each such axis as its Partial state, and says where they were. A
/// kind `sum` is the core's Partial itself. Errors are `(needle, message)`:
/// what to point at in the file, and why.
pub fn strip_kinds(
    d: Dialect,
    texts: &[String],
) -> Result<(Vec<String>, Vec<KindMarks>), (String, String)> {
    let partial = d.state_name(State::Partial).unwrap_or("Partial");
    let mut out = Vec::new();
    let mut marks = Vec::new();
    for text in texts {
        let t = text.trim();
        let mut m = KindMarks::new();
        if let Some(body) = t.strip_prefix("P(").and_then(|b| b.strip_suffix(')')) {
            // A partition spec: `unreduced_kind=` applies to its unreduced axes.
            let mut kept = Vec::new();
            let mut has_unreduced = false;
            for part in split_top_all(body) {
                match part.split_once('=') {
                    Some((k, v)) if k.trim() == "unreduced_kind" => {
                        let kind = unreduced_kind(v).map_err(|e| (v.trim().to_string(), e))?;
                        m.push((None, kind));
                    }
                    Some((k, v)) => {
                        has_unreduced |= k.trim() == "unreduced" && !axis_names(v).is_empty();
                        kept.push(part);
                    }
                    None => kept.push(part),
                }
            }
            if !m.is_empty() && !has_unreduced {
                return Err((
                    "unreduced_kind".into(),
                    format!("`{t}`: unreduced_kind needs a non-empty unreduced set (as in JAX)"),
                ));
            }
            // Texts without kinds stay exactly as written (error messages quote them).
            out.push(if m.is_empty() {
                text.clone()
            } else {
                format!("P({})", kept.join(", "))
            });
        } else if let Some(body) = t.strip_prefix('{').and_then(|b| b.strip_suffix('}')) {
            let mut parts = Vec::new();
            for part in split_top(body) {
                let Some((axis, st)) = part.split_once(':').or_else(|| part.split_once('=')) else {
                    parts.push(part);
                    continue;
                };
                let st = st.trim().trim_matches('"');
                match state_kind(d, st)? {
                    Some(k) => {
                        m.push((Some(axis.trim().to_string()), k));
                        parts.push(format!("{}: {partial}", axis.trim()));
                    }
                    None => parts.push(part),
                }
            }
            out.push(if m.is_empty() {
                text.clone()
            } else {
                format!("{{{}}}", parts.join(", "))
            });
        } else {
            match state_kind(d, t)? {
                Some(k) => {
                    m.push((None, k));
                    out.push(partial.to_string());
                }
                None => out.push(text.clone()),
            }
        }
        marks.push(m);
    }
    Ok((out, marks))
}

/// Writes the kinds `strip_kinds` found into the types read without them
/// (one `KindMarks` per type, in order): a kind refines the Partial state
/// of the axes it names (`Type::kinds`), every Partial axis where it names
/// none.
pub fn apply_kinds(axes: &[String], types: &mut [Type], marks: &[KindMarks]) {
    for (t, m) in types.iter_mut().zip(marks) {
        for (ax, k) in m {
            for a in 0..t.states.len() {
                if ax
                    .as_deref()
                    .is_none_or(|n| axes.get(a).is_some_and(|x| x == n))
                {
                    t.set_kind(a, *k);
                }
            }
        }
    }
}

/// Each type's placement on every axis (SPEC.md §21.7, `Type::place`). A
/// Varying axis without a layout has no global value: an error.
pub fn kind_places(axes: &[String], types: &[&Type]) -> Result<Vec<Vec<Place>>, String> {
    types
        .iter()
        .map(|t| {
            (0..t.states.len())
                .map(|a| {
                    t.place(a).ok_or_else(|| format!(
                        "axis `{}` is Varying without a layout; with pending kinds every Varying axis shards a dim (Shard(d))",
                        axes.get(a).map_or("?", String::as_str)
                    ))
                })
                .collect()
        })
        .collect()
}
