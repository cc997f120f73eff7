//! Rule files (SPEC.md §11.1): typing rules a designer proposes, in TOML or
//! the same structure as JSON, turned into typed operations. Every error
//! names the file, line and column.

use crate::run::UsageError;
use crate::types::{meshes_named, parse_types};
use serde::{Deserialize, Serialize};
use spmd_generators::Scope;
use spmd_interp::catalogue::{check_group_sizes, collective_typed};
use spmd_interp::{builtin, parse, parse_with_vars, Backward, Jvp, Op, TypedOp};
use spmd_semantics::{Dialect, Mesh, Type, ALL_STATES};
use std::collections::BTreeMap;

/// An op: a built-in name or `{ expr = "..." }`.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(untagged)]
pub enum OpSpec {
    Name(String),
    Expr { expr: String },
}

/// A type: one state (one-axis meshes) or a state per named axis.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(untagged)]
pub enum TypeSpec {
    One(String),
    Axes(BTreeMap<String, String>),
}

/// One `[[rule]]` as written.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<OpSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<String>,
    pub inputs: Vec<TypeSpec>,
    pub output: TypeSpec,
    /// A declared JVP, checked by J1: for a local op an expression of the
    /// primals and their tangents (`dx * y + x * dy`), for a collective the
    /// op applied to the tangent (`all_reduce`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jvp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<BTreeMap<String, usize>>,
    /// A program (SPEC.md §12.3): names for the inputs, in order ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// ... and its steps; the last one's value is the output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step: Vec<StepSpec>,
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
    rule: Vec<RuleSpec>,
}

/// A rule ready to check.
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub op: TypedOp,
    /// The meshes it is checked on.
    pub meshes: Vec<Mesh>,
    /// Whether a backward was declared (collectives may have none).
    pub has_backward: bool,
}

/// `file:line:col` of a byte offset.
fn locate(file: &str, text: &str, offset: usize) -> String {
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
fn find_in_rule(text: &str, rule_name: &str, needle: &str) -> usize {
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
                first_line(&e.to_string())
            ))
        })?;
        Ok(f.rule)
    } else {
        let f: RuleFile = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| locate(file, text, s.start))
                .unwrap_or_else(|| file.to_string());
            UsageError(format!("{at}: {}", first_line(e.message())))
        })?;
        Ok(f.rule)
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

fn type_text(t: &TypeSpec) -> String {
    match t {
        TypeSpec::One(s) => s.clone(),
        TypeSpec::Axes(m) => {
            let parts: Vec<String> = m.iter().map(|(a, s)| format!("{a}: {s}")).collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

/// The intermediate states of a composition `a |> b |> ...` from `src` to
/// `dst`: the unique assignment under which every step is a catalogue op.
fn compose(text: &str, src: &Type, dst: &Type, axes: &[String]) -> Result<Op, String> {
    let steps: Vec<&str> = text.split("|>").map(str::trim).collect();
    if steps.len() == 1 {
        return collective_typed(steps[0], src, dst, axes).map(Op::Collective);
    }
    let n = src.states.len();
    let all: Vec<Type> = (0..4usize.pow(n as u32))
        .map(|k| {
            (0..n)
                .map(|a| ALL_STATES[(k / 4usize.pow(a as u32)) % 4])
                .collect()
        })
        .map(Type::new)
        .collect();
    // Try every chain of intermediate types; keep those where every step parses.
    let mut chains: Vec<Vec<Op>> = vec![];
    fn go(
        steps: &[&str],
        from: &Type,
        dst: &Type,
        all: &[Type],
        axes: &[String],
        acc: &mut Vec<Op>,
        out: &mut Vec<Vec<Op>>,
    ) {
        if steps.len() == 1 {
            if let Ok(c) = collective_typed(steps[0], from, dst, axes) {
                acc.push(Op::Collective(c));
                out.push(acc.clone());
                acc.pop();
            }
            return;
        }
        for mid in all {
            if let Ok(c) = collective_typed(steps[0], from, mid, axes) {
                if c.is_noop_cast() {
                    continue;
                }
                acc.push(Op::Collective(c));
                go(&steps[1..], mid, dst, all, axes, acc, out);
                acc.pop();
            }
        }
    }
    go(&steps, src, dst, &all, axes, &mut vec![], &mut chains);
    match chains.len() {
        0 => Err(format!("`{text}` does not go from {src} to {dst} through catalogue ops")),
        1 => Ok(Op::Compose(chains.pop().expect("one chain"))),
        k => Err(format!(
            "`{text}` is ambiguous ({k} ways through intermediate states); give each step its states, e.g. `all_gather(R)`"
        )),
    }
}

/// Build the rules of a file, reporting errors at their place.
pub fn build(
    file: &str,
    text: &str,
    specs: &[RuleSpec],
    scope: &Scope,
) -> Result<Vec<Rule>, UsageError> {
    specs
        .iter()
        .map(|s| build_one(file, text, s, scope))
        .collect()
}

fn build_one(file: &str, text: &str, s: &RuleSpec, scope: &Scope) -> Result<Rule, UsageError> {
    let at = |needle: &str| locate(file, text, find_in_rule(text, &s.name, needle));
    let err = |needle: &str, msg: String| {
        UsageError(format!("{}: rule \"{}\": {msg}", at(needle), s.name))
    };
    let dialect = match &s.dialect {
        Some(d) => Dialect::parse(d).map_err(|e| err(d, e))?,
        None => Dialect::SpmdTypes,
    };
    let mut texts: Vec<String> = s.inputs.iter().map(type_text).collect();
    texts.push(type_text(&s.output));
    texts.extend(s.step.iter().map(|st| type_text(&st.output)));
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (axes, mut types) = parse_types(dialect, &refs).map_err(|e| {
        let bad = texts
            .iter()
            .find(|t| parse_types(dialect, &[t.as_str()]).is_err())
            .cloned()
            .unwrap_or_default();
        let needle = bad
            .trim_matches(|c| c == '{' || c == '}')
            .split(':')
            .next_back()
            .unwrap_or("")
            .trim()
            .to_string();
        err(&needle, e.0)
    })?;
    let step_types = types.split_off(s.inputs.len() + 1);
    let output = types.pop().expect("output type");
    // Global SPMD (SPEC.md §13): once a type carries a layout, every Varying
    // axis of the rule must say which dim it shards.
    if types
        .iter()
        .chain([&output])
        .chain(&step_types)
        .any(Type::is_global)
    {
        if let Some(t) = types
            .iter()
            .chain([&output])
            .chain(&step_types)
            .find(|t| t.unlaid_varying_axis().is_some())
        {
            return Err(err(
                "inputs",
                format!(
                    "the rule uses layouts (S(d)), so every Varying axis needs one; {t} has a Varying axis without"
                ),
            ));
        }
    }
    let meshes = match &s.mesh {
        Some(m) => {
            let mesh = Mesh::new(&m.iter().map(|(a, n)| (a.as_str(), *n)).collect::<Vec<_>>());
            // Order the mesh's axes as the types name them.
            let ordered: Vec<(&str, usize)> = axes
                .iter()
                .map(|a| {
                    m.get(a)
                        .map(|n| (a.as_str(), *n))
                        .ok_or_else(|| err("mesh", format!("the mesh has no axis `{a}`")))
                })
                .collect::<Result<_, _>>()?;
            if mesh.ndim() != axes.len() {
                return Err(err(
                    "mesh",
                    format!(
                        "the mesh has {} axes, the types name {}",
                        mesh.ndim(),
                        axes.len()
                    ),
                ));
            }
            if ordered.iter().any(|(_, n)| *n == 0 || *n > 8) {
                return Err(err("mesh", "mesh axis sizes must be 1 to 8".into()));
            }
            vec![Mesh::new(&ordered)]
        }
        None => meshes_named(&scope.meshes, &axes),
    };
    if meshes.is_empty() {
        return Err(err(
            "inputs",
            format!("no mesh in scope has the axes {axes:?}; add `mesh = {{ ... }}`"),
        ));
    }
    let (op, backward, has_backward) = match (&s.op, &s.forward) {
        _ if !s.step.is_empty() => {
            if s.op.is_some() || s.forward.is_some() || s.backward.is_some() || s.jvp.is_some() {
                return Err(err(
                    "step",
                    "a program has steps instead of `op`, `forward`, `backward` or `jvp`".into(),
                ));
            }
            build_program(s, &types, &output, &step_types, &axes, &err)?
        }
        (Some(o), None) => {
            let f = match o {
                OpSpec::Name(n) => builtin(n).map_err(|e| err(n, e))?,
                OpSpec::Expr { expr } => {
                    parse(expr).map_err(|e| err(expr, format!("expression `{expr}`: {e}")))?
                }
            };
            if f.arity() != types.len() {
                return Err(err(
                    "inputs",
                    format!(
                        "`{}` takes {} inputs, {} types given",
                        f.text,
                        f.arity(),
                        types.len()
                    ),
                ));
            }
            match s.backward.as_deref() {
                None | Some("local") => (Op::Local(f), Backward::LocalVjp, true),
                Some(b) => {
                    return Err(err(
                        b,
                        format!(
                        "a local op's backward is \"local\" (its VJP); `{b}` is not supported here"
                    ),
                    ))
                }
            }
        }
        (None, Some(fw)) => {
            if types.len() != 1 {
                return Err(err("inputs", "a collective takes one input".into()));
            }
            let fop = compose(fw, &types[0], &output, &axes).map_err(|e| err(fw, e))?;
            check_group_sizes(&fop, &meshes).map_err(|e| err(fw, e))?;
            match s.backward.as_deref() {
                None => (fop, Backward::LocalVjp, false),
                Some("local") => {
                    return Err(err(
                        "local",
                        "a collective has no local VJP: name its backward".into(),
                    ))
                }
                Some(b) => {
                    let bop =
                        compose(b, &output.cot(), &types[0].cot(), &axes).map_err(|e| err(b, e))?;
                    check_group_sizes(&bop, &meshes).map_err(|e| err(b, e))?;
                    (fop, Backward::Transpose(bop), true)
                }
            }
        }
        (Some(_), Some(_)) => {
            return Err(err(
                "forward",
                "give either `op` or `forward`, not both".into(),
            ))
        }
        (None, None) => {
            return Err(err(
                "name",
                "a rule needs `op` (a local op) or `forward` (a collective)".into(),
            ))
        }
    };
    let jvp = match &s.jvp {
        None => None,
        Some(j) => Some(match &op {
            Op::Local(f) => {
                let mut order = f.vars.clone();
                order.extend(f.vars.iter().map(|v| format!("d{v}")));
                Jvp::Local(
                    parse_with_vars(j, &order).map_err(|e| err(j, format!("jvp `{j}`: {e}")))?,
                )
            }
            _ => Jvp::Tangent(
                compose(j, &types[0], &output, &axes).map_err(|e| err(j, format!("jvp: {e}")))?,
            ),
        }),
    };
    let op = TypedOp {
        op,
        inputs: std::mem::take(&mut types),
        output,
        backward,
        jvp,
    };
    // Refuse what cannot finish: a degree beyond exact finite differences,
    // or more instances than the scope allows.
    crate::run::degree_guard(&op, scope).map_err(|e| err("op", e.0))?;
    crate::run::guard(crate::run::estimate(&op, scope), scope).map_err(|e| err("name", e.0))?;
    // Shapes must fit on some mesh, or the rule is vacuous by construction.
    Ok(Rule {
        name: s.name.clone(),
        op,
        meshes,
        has_backward,
    })
}

/// A program's typed steps (SPEC.md §12.3).
fn build_program(
    s: &RuleSpec,
    types: &[Type],
    output: &Type,
    step_types: &[Type],
    axes: &[String],
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<(Op, Backward, bool), UsageError> {
    if s.names.len() != types.len() {
        return Err(err(
            "names",
            format!(
                "a program names its {} inputs: `names` has {}",
                types.len(),
                s.names.len()
            ),
        ));
    }
    let mut names: Vec<String> = s.names.clone();
    let mut value_types: Vec<Type> = types.to_vec();
    let mut steps = Vec::new();
    let mut has_backward = true;
    for (st, out) in s.step.iter().zip(step_types) {
        if names.contains(&st.name) {
            return Err(err(
                &st.name,
                format!("value `{}` is defined twice", st.name),
            ));
        }
        let index = |v: &str| {
            names.iter().position(|n| n == v).ok_or_else(|| {
                err(
                    v,
                    format!(
                        "step `{}` uses `{v}`, which is not defined before it",
                        st.name
                    ),
                )
            })
        };
        let step = match (&st.expr, &st.forward) {
            (Some(e), None) => {
                let f = parse(e)
                    .map_err(|x| err(e, format!("step `{}`: expression `{e}`: {x}", st.name)))?;
                let args: Vec<usize> = f.vars.iter().map(|v| index(v)).collect::<Result<_, _>>()?;
                let ins: Vec<Type> = args.iter().map(|&a| value_types[a].clone()).collect();
                spmd_interp::Step {
                    name: format!("{} = {e}", st.name),
                    op: TypedOp::local(f, ins, out.clone()),
                    args,
                }
            }
            (None, Some(fw)) => {
                let arg_name = st.input.as_deref().ok_or_else(|| {
                    err(
                        &st.name,
                        format!("step `{}` names its collective's `input`", st.name),
                    )
                })?;
                let a = index(arg_name)?;
                let src = &value_types[a];
                let fop = compose(fw, src, out, axes)
                    .map_err(|x| err(fw, format!("step `{}`: {x}", st.name)))?;
                let backward = match &st.backward {
                    Some(b) => Backward::Transpose(
                        compose(b, &out.cot(), &src.cot(), axes)
                            .map_err(|x| err(b, format!("step `{}`: backward: {x}", st.name)))?,
                    ),
                    None => {
                        has_backward = false;
                        Backward::LocalVjp
                    }
                };
                spmd_interp::Step {
                    name: format!("{} = {fw}", st.name),
                    op: TypedOp {
                        op: fop,
                        inputs: vec![src.clone()],
                        output: out.clone(),
                        backward,
                        jvp: None,
                    },
                    args: vec![a],
                }
            }
            _ => {
                return Err(err(
                    &st.name,
                    format!("step `{}` needs either `expr` or `forward`", st.name),
                ))
            }
        };
        names.push(st.name.clone());
        value_types.push(out.clone());
        steps.push(step);
    }
    let p = spmd_interp::Program::new(types.to_vec(), steps).map_err(|x| err("step", x))?;
    if p.output() != output {
        return Err(err(
            "output",
            format!(
                "the last step's value is {}, the rule's output is {output}",
                p.output()
            ),
        ));
    }
    Ok((Op::Program(Box::new(p)), Backward::Steps, has_backward))
}

/// Read and build every rule of a file.
pub fn load(path: &str, scope: &Scope) -> Result<Vec<Rule>, UsageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{path}: cannot read: {e}")))?;
    let specs = parse_file(path, &text)?;
    build(path, &text, &specs, scope)
}

/// One rule as a TOML file of its own (for emitted tests).
pub fn to_toml(spec: &RuleSpec) -> String {
    toml::to_string(&RuleFile {
        rule: vec![spec.clone()],
    })
    .unwrap_or_default()
}
