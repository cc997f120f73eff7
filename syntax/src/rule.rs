//! Rule files as written (SPEC.md §11.1): the structure of `[[rule]]`
//! tables, read from TOML or JSON, before any type is parsed or any system
//! elaborates them. Every error names the file, line and column.

use crate::UsageError;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// With its `arbitrary_precision` feature, serde_json hands a number that
/// does not fit a machine type (1e400) to `deserialize_any` as a map with
/// one key of this name: a visitor of maps must say "a number", never the
/// key.
const SERDE_JSON_NUMBER: &str = "$serde_json::private::Number";

/// An op: a built-in name or `{ expr = "..." }`.
#[derive(Serialize, Debug, Clone)]
#[serde(untagged)]
pub enum OpSpec {
    Name(String),
    Expr { expr: String },
}

// By hand rather than derived: an untagged enum lets `{ expr = "...",
// extra = 1 }` through, its unknown key unseen, and says nothing useful
// about what did not match.
impl<'de> Deserialize<'de> for OpSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OpSpec, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = OpSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an op name or a table { expr = \"...\" }")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<OpSpec, E> {
                Ok(OpSpec::Name(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<OpSpec, A::Error> {
                use serde::de::Error;
                let mut expr = None;
                while let Some(k) = m.next_key::<String>()? {
                    if k.starts_with(SERDE_JSON_NUMBER) {
                        return Err(A::Error::invalid_type(
                            serde::de::Unexpected::Other("a number"),
                            &self,
                        ));
                    }
                    match k.as_str() {
                        "expr" if expr.is_none() => expr = Some(m.next_value::<String>()?),
                        "expr" => return Err(A::Error::duplicate_field("expr")),
                        _ => return Err(A::Error::unknown_field(&k, &["expr"])),
                    }
                }
                let expr = expr.ok_or_else(|| A::Error::missing_field("expr"))?;
                Ok(OpSpec::Expr { expr })
            }
        }
        d.deserialize_any(V)
    }
}

/// A type: one state (one-axis meshes) or a state per named axis.
#[derive(Serialize, Debug, Clone)]
#[serde(untagged)]
pub enum TypeSpec {
    One(String),
    Axes(IndexMap<String, String>),
}

/// What a type is written as, for the error on anything else.
const TYPE_EXPECTED: &str =
    "a state name like \"V\" or a table of axis → state like { dp = \"V\", tp = \"R\" }";

// By hand rather than derived, as `OpSpec`: a derived untagged enum answers
// anything else with serde's "data did not match any variant of untagged
// enum TypeSpec", which names neither what was written nor what is wanted.
impl<'de> Deserialize<'de> for TypeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TypeSpec, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = TypeSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(TYPE_EXPECTED)
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TypeSpec, E> {
                Ok(TypeSpec::One(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<TypeSpec, A::Error> {
                use serde::de::Error;
                let mut axes = IndexMap::new();
                while let Some(axis) = m.next_key::<String>()? {
                    if axis.starts_with(SERDE_JSON_NUMBER) {
                        // The number's text is the entry's value.
                        let n = m.next_value::<String>().unwrap_or_default();
                        return Err(A::Error::custom(format!(
                            "`{n}` is a number; a type is {TYPE_EXPECTED}"
                        )));
                    }
                    let state = m.next_value::<StateName>()?.0;
                    if axes.insert(axis.clone(), state).is_some() {
                        return Err(A::Error::custom(format!("axis `{axis}` is given twice")));
                    }
                }
                Ok(TypeSpec::Axes(axes))
            }
        }
        d.deserialize_any(V)
    }
}

/// One axis's state inside a type table: a string, or an error that says so.
struct StateName(String);

impl<'de> Deserialize<'de> for StateName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StateName, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = StateName;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a state name like \"V\" for this axis")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<StateName, E> {
                Ok(StateName(s.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A backward: a collective or composition (or `"local"`, the local VJP),
/// or for a local op one expression per input over the primals and the
/// output cotangent `g` (`["g * y", "g * x"]`).
#[derive(Serialize, Debug, Clone)]
#[serde(untagged)]
pub enum BackwardSpec {
    One(String),
    PerInput(Vec<String>),
}

// By hand for the same reason as `TypeSpec`.
impl<'de> Deserialize<'de> for BackwardSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<BackwardSpec, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = BackwardSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a backward like \"all_reduce\" or \"local\", or a list of one expression per input like [\"g * y\", \"g * x\"]",
                )
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<BackwardSpec, E> {
                Ok(BackwardSpec::One(s.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<BackwardSpec, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = s.next_element::<String>()? {
                    v.push(e);
                }
                Ok(BackwardSpec::PerInput(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// One `[[rule]]` as written.
#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<OpSpec>,
    /// The order in which `op`'s variables bind to `inputs` (default: order
    /// of first appearance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<BackwardSpec>,
    /// Inputs (0-based) that get no gradient: B1-B3 skip them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_grad: Vec<usize>,
    /// A local op's declared global meaning, when it is not the local
    /// function itself (an expression over the same variables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meaning: Option<String>,
    pub inputs: Vec<TypeSpec>,
    pub output: TypeSpec,
    /// A declared JVP, checked by J1: for a local op an expression of the
    /// primals and their tangents (`dx * y + x * dy`), for a collective the
    /// op applied to the tangent (`all_reduce`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jvp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<IndexMap<String, usize>>,
    /// A program (SPEC.md §12.3): names for the inputs, in order ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// ... and its steps; the last one's value is the output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step: Vec<StepSpec>,
    /// A `vmap` of the rule's step (SPEC.md §24.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmap: Option<VmapSpec>,
    /// The system's batched form, as written; without it the dialect's
    /// batching rule is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batched: Option<String>,
}

/// `vmap = { in_axes = [0], out_axes = 0 }`: where each input and the
/// output are batched (`"none"`: not batched, as JAX's `None`).
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct VmapSpec {
    pub in_axes: Vec<BatchAxis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_axes: Option<BatchAxis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spmd_axis_name: Option<String>,
}

/// A batch dim, or `"none"`.
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum BatchAxis {
    Dim(usize),
    Word(String),
}

impl BatchAxis {
    /// The dim, `None` for `"none"`, or why the word is not one.
    pub fn read(&self) -> Result<Option<usize>, String> {
        match self {
            BatchAxis::Dim(d) => Ok(Some(*d)),
            BatchAxis::Word(w) if w.trim().eq_ignore_ascii_case("none") => Ok(None),
            BatchAxis::Word(w) => Err(format!(
                "`{w}` is not a batch dim (a dim number, or \"none\")"
            )),
        }
    }
}

impl Default for TypeSpec {
    fn default() -> TypeSpec {
        TypeSpec::One(String::new())
    }
}

/// One `[[rule.step]]` of a program: a local expression over earlier values
/// by name, or a collective on one of them.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// The value it defines.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<String>,
    /// The collective's argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The collective's declared transpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<String>,
    pub output: TypeSpec,
}

#[derive(Deserialize, Serialize, Debug)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<RuleSpec>,
}

/// `file:line:col` of a byte offset.
pub fn locate(file: &str, text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    format!("{file}:{line}:{col}")
}

/// Where the `idx`-th rule's value `needle` is written, best effort: the
/// first occurrence of it after the rule's name.
pub fn find_in_rule(text: &str, rule_name: &str, needle: &str) -> usize {
    let start = text.find(&format!("\"{rule_name}\"")).unwrap_or(0);
    text[start..]
        .find(needle)
        .map(|i| start + i)
        .unwrap_or(start)
}

/// Parse a rule file's text (TOML, or JSON when it starts with `{`).
pub fn parse_file(file: &str, text: &str) -> Result<Vec<RuleSpec>, UsageError> {
    if text.trim_start().starts_with('{') {
        let f: RuleFile = serde_json::from_str(text).map_err(|e| {
            UsageError(format!(
                "{file}:{}:{}: {}",
                e.line(),
                e.column(),
                // serde_json ends its message with the place, given already.
                crate::with_suggestion(&first_line(e.to_string().trim_end_matches(&format!(
                    " at line {} column {}",
                    e.line(),
                    e.column()
                ))))
            ))
        })?;
        check_list(file, text, f.rule)
    } else {
        let f: RuleFile = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| locate(file, text, s.start))
                .unwrap_or_else(|| file.to_string());
            UsageError(format!(
                "{at}: {}",
                crate::with_suggestion(&first_line(e.message()))
            ))
        })?;
        check_list(file, text, f.rule)
    }
}

/// A rule file names at least one rule, each once.
fn check_list(file: &str, text: &str, rules: Vec<RuleSpec>) -> Result<Vec<RuleSpec>, UsageError> {
    if rules.is_empty() {
        return Err(UsageError(format!("{file}: the file defines no rule")));
    }
    for (i, r) in rules.iter().enumerate() {
        if rules[..i].iter().any(|q| q.name == r.name) {
            let second = text
                .match_indices(&format!("\"{}\"", r.name))
                .nth(1)
                .map_or(0, |(k, _)| k);
            return Err(UsageError(format!(
                "{}: rule name \"{}\" is used twice; names must be unique (they key regressions)",
                locate(file, text, second),
                crate::quoted_name(&r.name)
            )));
        }
    }
    Ok(rules)
}

/// The largest rule file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// Read a rule or job file, refusing what is not a reasonably sized text
/// file (`/dev/zero` would otherwise be read forever).
pub fn read_text(path: &str) -> Result<String, UsageError> {
    read_text_limit(path, MAX_FILE_BYTES)
}

/// `read_text` with another size limit, in bytes.
pub fn read_text_limit(path: &str, limit: u64) -> Result<String, UsageError> {
    use std::io::Read;
    // Look before opening: opening a FIFO with no writer waits for ever, and
    // a device may never end.
    let meta =
        std::fs::metadata(path).map_err(|e| UsageError(format!("{path}: cannot read: {e}")))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(UsageError(format!("{path}: {what}; give a file")));
    }
    let f =
        std::fs::File::open(path).map_err(|e| UsageError(format!("{path}: cannot read: {e}")))?;
    let mut buf = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| UsageError(format!("{path}: cannot read: {e}")))?;
    if buf.len() as u64 > limit {
        return Err(UsageError(format!(
            "{path}: larger than {} MiB, the most read from one file",
            limit >> 20
        )));
    }
    String::from_utf8(buf).map_err(|e| {
        UsageError(format!(
            "{path}: not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

pub fn type_text(t: &TypeSpec) -> String {
    match t {
        TypeSpec::One(s) => s.clone(),
        TypeSpec::Axes(m) => {
            let parts: Vec<String> = m.iter().map(|(a, s)| format!("{a}: {s}")).collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

/// One rule as a TOML file of its own (for emitted tests).
pub fn to_toml(spec: &RuleSpec) -> String {
    toml::to_string(&RuleFile {
        rule: vec![spec.clone()],
    })
    .unwrap_or_default()
}
