//! Types written in any dialect (SPEC.md §1.2): `P` on one axis, or
//! `{dp: V, tp: P}` naming every axis of a mesh.

use crate::run::UsageError;
use spmd_semantics::{Dialect, Mesh, Type};

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
        return Ok((names, Type { states, layout }));
    }
    let (s, dim) = d.parse_state(t).map_err(UsageError)?;
    Ok((
        vec!["x".into()],
        Type {
            states: vec![s],
            layout: vec![dim],
        },
    ))
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

/// Parse several types that must name the same axes; returns the axis names.
pub fn parse_types(d: Dialect, texts: &[&str]) -> Result<(Vec<String>, Vec<Type>), UsageError> {
    let mut axes: Option<Vec<String>> = None;
    let mut out = Vec::new();
    for t in texts {
        let (names, ty) = parse_type(d, t)?;
        match &axes {
            Some(a) if *a != names => {
                return Err(UsageError(format!(
                    "type `{t}` names axes {names:?}, another type names {a:?}"
                )))
            }
            _ => axes = Some(names),
        }
        out.push(ty);
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
