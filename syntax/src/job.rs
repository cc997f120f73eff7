//! Jobs as written (SPEC.md §14): a mesh, per-rank values kept as text so
//! that decimals are read exactly, and the op, collective or program to run,
//! in a system's own names.

use crate::rule::{BackwardSpec, OpSpec, StepSpec, TypeSpec};
use crate::UsageError;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use spmd_semantics::Q;
use std::fmt;

/// The longest literal accepted for one scalar, in characters, and the
/// largest decimal exponent.
pub const MAX_LITERAL: usize = 1000;

/// Per-rank values as written: nested arrays of scalars, each scalar kept as
/// its text so that decimals are read exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nest {
    Scalar(String),
    List(Vec<Nest>),
}

impl<'de> Deserialize<'de> for Nest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Nest, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Nest;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a number, a string \"p/q\", or an array of them")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Nest, E> {
                Ok(Nest::Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Nest, E> {
                Ok(Nest::Scalar(v.to_string()))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Nest, E> {
                Ok(Nest::Scalar(v.to_string()))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Nest, E> {
                Ok(Nest::Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Nest, E> {
                // JSON and TOML numbers arrive as text (see `parse_job`); a
                // float here would already be rounded.
                Err(E::custom(
                    "a number that is not an integer must be written as text, e.g. \"0.5\" or \"1/2\"",
                ))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Nest, E> {
                Ok(Nest::Scalar(v.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Nest, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = s.next_element()? {
                    out.push(x);
                }
                Ok(Nest::List(out))
            }
            // serde_json's `arbitrary_precision` hands a number over as a
            // one-entry map holding its text.
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Nest, A::Error> {
                match m.next_entry::<String, String>()? {
                    Some((k, v)) if k == "$serde_json::private::Number" => Ok(Nest::Scalar(v)),
                    _ => Err(de::Error::custom(
                        "expected a number, a string or an array, found an object",
                    )),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A mesh as written: axis names and sizes, in the order written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshSpec(pub Vec<(String, usize)>);

impl<'de> Deserialize<'de> for MeshSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MeshSpec, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MeshSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a mesh {{ axis: size, ... }}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<MeshSpec, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, usize>()? {
                    out.push((k, v));
                }
                Ok(MeshSpec(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// One input: its type and its local tensor on every rank.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    #[serde(rename = "type")]
    pub ty: TypeSpec,
    pub per_rank: Nest,
}

/// A job file as written (JSON, or TOML with the same structure).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Job {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub dialect: Option<String>,
    pub mesh: MeshSpec,
    #[serde(default)]
    pub op: Option<OpSpec>,
    #[serde(default)]
    pub forward: Option<String>,
    #[serde(default)]
    pub backward: Option<BackwardSpec>,
    #[serde(default)]
    pub jvp: Option<String>,
    #[serde(default)]
    pub vars: Option<Vec<String>>,
    #[serde(default)]
    pub no_grad: Vec<usize>,
    #[serde(default)]
    pub meaning: Option<String>,
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default, alias = "step")]
    pub steps: Vec<StepSpec>,
    pub inputs: Vec<InputSpec>,
    #[serde(default)]
    pub output: Option<TypeSpec>,
    #[serde(default)]
    pub cotangent: Option<Nest>,
    /// `ragged_all_to_all`'s integer arguments (SPEC.md §23.19).
    #[serde(default)]
    pub layout: Option<RaggedLayout>,
    /// A `vmap` of the job's collective (SPEC.md §24.7).
    #[serde(default)]
    pub vmap: Option<crate::rule::VmapSpec>,
    /// Its batched form, as written.
    #[serde(default)]
    pub batched: Option<String>,
}

/// The four per-rank lists of a `ragged_all_to_all` call, as JAX names
/// them (`[rank][slice]`).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct RaggedLayout {
    pub input_offsets: Vec<Vec<usize>>,
    pub send_sizes: Vec<Vec<usize>>,
    pub output_offsets: Vec<Vec<usize>>,
    pub recv_sizes: Vec<Vec<usize>>,
}

/// Read a scalar exactly: an integer, `p/q`, or a decimal such as `-1.25e-3`
/// (SPEC.md §6.1's literals, read by `Q::parse`), at most `MAX_LITERAL`
/// characters.
pub fn parse_scalar(text: &str) -> Result<Q, String> {
    let t = text.trim();
    if t.len() > MAX_LITERAL {
        return Err(format!(
            "a literal of {} characters (at most {MAX_LITERAL})",
            t.len()
        ));
    }
    Q::parse(t).ok_or_else(|| {
        format!("`{t}` is not a number (an integer, p/q, or a decimal; exponents up to ±1000)")
    })
}

/// Parse a job's text: JSON when it starts with `{`, else TOML. Numbers are
/// kept as text so that `0.5` is exactly 1/2.
pub fn parse_job(file: &str, text: &str) -> Result<Job, UsageError> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| {
            let msg = e.to_string();
            let msg = crate::with_suggestion(msg.split(" at line ").next().unwrap_or(&msg));
            UsageError(format!("{file}:{}:{}: {msg}", e.line(), e.column()))
        })
    } else {
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
            let at = e
                .span()
                .map(|sp| crate::rule::locate(file, text, sp.start))
                .unwrap_or_else(|| file.to_string());
            UsageError(format!("{at}: {}", one_line(&e.message())))
        })?;
        floats_as_text(doc.as_item_mut());
        toml::from_str(&doc.to_string()).map_err(|e| {
            UsageError(format!(
                "{file}: {}",
                crate::with_suggestion(&one_line(&e.message()))
            ))
        })
    }
}

fn one_line(e: &dyn fmt::Display) -> String {
    let s = e.to_string();
    let lines: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join(" ")
}

/// Replace every TOML float by a string of its text as written.
fn floats_as_text(item: &mut toml_edit::Item) {
    use toml_edit::Item;
    match item {
        Item::Value(v) => float_value(v),
        Item::Table(t) => t.iter_mut().for_each(|(_, i)| floats_as_text(i)),
        Item::ArrayOfTables(a) => a
            .iter_mut()
            .for_each(|t| t.iter_mut().for_each(|(_, i)| floats_as_text(i))),
        Item::None => {}
    }
}

fn float_value(v: &mut toml_edit::Value) {
    use toml_edit::Value as V;
    match v {
        V::Float(f) => {
            let raw = f
                .as_repr()
                .and_then(|r| r.as_raw().as_str())
                .map(|s| s.trim().replace('_', ""))
                .unwrap_or_else(|| f.value().to_string());
            *v = V::from(raw);
        }
        V::Array(a) => a.iter_mut().for_each(float_value),
        V::InlineTable(t) => t.iter_mut().for_each(|(_, x)| float_value(x)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_scalar("0.5").unwrap(), Q::frac(1, 2));
        assert_eq!(parse_scalar("1e-3").unwrap(), Q::frac(1, 1000));
        assert_eq!(parse_scalar("-1.25E2").unwrap(), Q::int(-125));
        assert_eq!(parse_scalar("3/6").unwrap(), Q::frac(1, 2));
        assert_eq!(parse_scalar("7").unwrap(), Q::int(7));
        for bad in ["", ".", "1e", "1/0", "abc", "1.2.3", "nan", "1e100000"] {
            assert!(parse_scalar(bad).is_err(), "{bad}");
        }
        assert!(parse_scalar(&"9".repeat(MAX_LITERAL + 1)).is_err());
    }
}
