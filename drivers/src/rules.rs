//! Rule files (SPEC.md §11.1): typing rules a designer proposes, in TOML or
//! the same structure as JSON, turned into typed operations. Every error
//! names the file, line and column.

use crate::run::UsageError;
use crate::types::{apply_kinds, kind_places, meshes_named, parse_types_in, strip_kinds};
use indexmap::IndexMap;
use spmd_generators::Scope;
use spmd_interp::catalogue::kind_collective;
use spmd_interp::catalogue::{check_group_sizes, collective_typed};
use spmd_interp::collective::Coll;
use spmd_interp::{builtin, parse, parse_with_vars, Backward, Jvp, Op, TypedOp};
use spmd_semantics::pending::Place;
use spmd_semantics::{Dialect, Mesh, Shape, Type, ALL_STATES};
use spmd_syntax::rule::{find_in_rule, type_text};
pub use spmd_syntax::rule::{
    locate, parse_file, read_text, read_text_limit, to_toml, BackwardSpec, OpSpec, RuleSpec,
    StepSpec, TypeSpec, MAX_FILE_BYTES,
};

/// The most ranks a written mesh may have.
pub const MAX_RANKS: usize = 64;

/// A rule ready to check.
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub op: TypedOp,
    /// The meshes it is checked on.
    pub meshes: Vec<Mesh>,
    /// Whether the rule writes its mesh (`mesh = {...}`): then no flag
    /// changes the meshes it is checked on.
    pub mesh_written: bool,
    /// Whether a backward was declared (collectives may have none).
    pub has_backward: bool,
    /// The dialect its types were written in; reports use its names.
    pub dialect: Dialect,
    /// A rule whose types name a pending kind other than sum (SPEC.md
    /// §21.7): checked by the pending-kind checks instead of the core. Its
    /// `op` then reads every kind as the core's Partial and is never checked.
    pub pending: Option<PendingRule>,
    /// A rule whose types name a split rule (SPEC.md §23.10): checked on
    /// uneven shards instead of the core; `op` is then a placeholder.
    pub uneven: Option<crate::uneven::UnevenRule>,
    /// A rule with a `vmap` (SPEC.md §24.4): checked by V1 instead of the
    /// core; `op` is then a placeholder.
    pub batching: Option<crate::batching::Transform>,
    /// What the system decided when it elaborated the rule (SPEC.md §15.5):
    /// inserted casts, inferred types, chosen backwards; empty when nothing
    /// was elaborated.
    pub elaboration: Vec<String>,
}

/// A rule with pending kinds (SPEC.md §21.7): a local op or a collective of
/// a kind, on the one mesh axis whose placements are not all Replicate.
#[derive(Clone, Debug)]
pub struct PendingRule {
    pub f: spmd_interp::LocalFn,
    /// The axis checked; every other axis of the rule is Replicate.
    pub axis: String,
    pub inputs: Vec<Place>,
    pub output: Place,
    /// The axis size when the rule's `mesh` fixes it.
    pub ranks: Option<usize>,
    /// For a collective rule, its per-rank forward; `f` is then the identity,
    /// its meaning (a collective keeps the value it is given).
    pub forward: Option<Coll>,
}

/// The most steps of a composition `a |> b |> ...`.
pub const MAX_COMPOSED: usize = 4;

/// The intermediate states of a composition `a |> b |> ...` from `src` to
/// `dst`: the unique assignment under which every step is a catalogue op.
/// Rule files and the collective tables' backwards use it.
pub fn compose(text: &str, src: &Type, dst: &Type, axes: &[String]) -> Result<Op, String> {
    let steps: Vec<&str> = text.split("|>").map(str::trim).collect();
    // The search below tries every intermediate state at every step.
    if steps.len() > MAX_COMPOSED {
        return Err(format!(
            "a composition of {} steps; at most {MAX_COMPOSED}",
            steps.len()
        ));
    }
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
            // Two chains already make it ambiguous.
            if out.len() > 1 {
                return;
            }
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
        _ => Err(format!(
            "`{text}` is ambiguous (more than one way through intermediate states); give each step its states, e.g. `all_gather(R)`"
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
        .map(|s| build_one(file, text, s, scope, true))
        .collect()
}

/// Build rules as a real system recorded them (fixtures, SPEC.md §15.5):
/// read in the system's names but not elaborated by our model of its
/// typing, so that what the system did is checked, not what we think it
/// does.
pub fn build_as_recorded(
    file: &str,
    text: &str,
    specs: &[RuleSpec],
    scope: &Scope,
) -> Result<Vec<Rule>, UsageError> {
    specs
        .iter()
        .map(|s| build_one(file, text, s, scope, false))
        .collect()
}

pub(crate) fn build_one(
    file: &str,
    text: &str,
    s: &RuleSpec,
    scope: &Scope,
    elaborate: bool,
) -> Result<Rule, UsageError> {
    let at = |needle: &str| locate(file, text, find_in_rule(text, &s.name, needle));
    let err = |needle: &str, msg: String| {
        UsageError(format!("{}: rule \"{}\": {msg}", at(needle), s.name))
    };
    // The names a rule is written in, and the system that elaborates it
    // (SPEC.md §15.5): none without `dialect` (the project's letters) or
    // with `dialect = "canonical"`.
    let (dialect, system) = match s.dialect.as_deref() {
        None => (Dialect::SpmdTypes, None),
        Some("canonical") => (Dialect::Canonical, None),
        Some(d) => {
            let sys = spmd_dialects::system(d).map_err(|e| {
                err(
                    d,
                    e.replace("(expected one of: ", "(expected one of: canonical, "),
                )
            })?;
            (sys.dialect, Some(sys))
        }
    };
    // serde_json's exact numbers arrive as a one-key table; a type is text.
    let all_types = s
        .inputs
        .iter()
        .chain([&s.output])
        .chain(s.step.iter().map(|st| &st.output));
    for t in all_types {
        if let TypeSpec::Axes(m) = t {
            if m.keys().any(|k| k.starts_with("$serde_json")) {
                let n = m.values().next().cloned().unwrap_or_default();
                return Err(err(
                    &n,
                    format!("`{n}` is a number; a type is a state (\"V\") or a table of states"),
                ));
            }
        }
    }
    // Batching (SPEC.md §24.4): a rule with a `vmap`; one collective alone
    // is checked by V1 on a basis, anything else as a batched program
    // (§24.9).
    if s.vmap.is_some() {
        let one_collective = s.forward.is_some()
            && s.vmap.as_ref().is_some_and(|v| v.spmd_axis_name.is_none())
            && s.op.is_none()
            && s.step.is_empty()
            && s.backward.is_none()
            && s.jvp.is_none()
            && s.meaning.is_none()
            && s.no_grad.is_empty();
        if one_collective || s.batched.is_some() {
            return build_batching(s, dialect, &err);
        }
        return crate::vmap_program::build_rule(
            file,
            text,
            s,
            scope,
            elaborate,
            dialect,
            system.is_none(),
            &err,
        );
    }
    if s.batched.is_some() {
        return Err(err(
            "batched",
            "`batched` is the batched form of a `vmap`: write the rule's `vmap` too".into(),
        ));
    }
    // Uneven shards (SPEC.md §23.10): a type naming a split rule.
    let named_split = |t: &TypeSpec| match t {
        TypeSpec::One(x) => spmd_dialects::uneven::names_split(x),
        TypeSpec::Axes(m) => m.values().any(|x| spmd_dialects::uneven::names_split(x)),
    };
    if s.inputs.iter().chain([&s.output]).any(named_split) {
        return build_uneven(s, dialect, &err);
    }
    let mut texts: Vec<String> = s.inputs.iter().map(type_text).collect();
    texts.push(type_text(&s.output));
    texts.extend(s.step.iter().map(|st| type_text(&st.output)));
    // Pending kinds (SPEC.md §21.7): the core reads each marked axis as its
    // Partial; the marks say which kind it owes.
    let (texts, marks) = strip_kinds(dialect, &texts).map_err(|(n, m)| err(&n, m))?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // The mesh, as written, fixes the axis order (SPEC.md §1.2).
    let mesh_axes: Option<Vec<String>> = s.mesh.as_ref().map(|m| m.keys().cloned().collect());
    let (axes, mut types) = parse_types_in(dialect, &refs, mesh_axes.as_deref()).map_err(|e| {
        let bad = texts
            .iter()
            .find(|t| parse_types_in(dialect, &[t.as_str()], mesh_axes.as_deref()).is_err())
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
    apply_kinds(&axes, &mut types, &marks);
    let step_types = types.split_off(s.inputs.len() + 1);
    let output = types.pop().expect("output type");
    if types
        .iter()
        .chain([&output])
        .chain(&step_types)
        .any(Type::has_kinds)
    {
        return build_pending(s, dialect, &axes, types, output, scope, &err);
    }
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
    // A system's language: its typing elaborates the rule (SPEC.md §15.5),
    // and the canonical rule it yields is what is checked.
    let global = types.iter().chain([&output]).any(Type::is_global);
    if let Some(sys) = system.filter(|_| elaborate && !global) {
        let surface = spmd_dialects::elaborate::Surface {
            spec: s,
            inputs: types.clone(),
            output: Some(output.clone()),
            steps: step_types.iter().cloned().map(Some).collect(),
            axes: axes.clone(),
        };
        let e = spmd_dialects::elaborate::elaborate(sys, &surface).map_err(|m| err("output", m))?;
        let canon = RuleSpec {
            dialect: None,
            ..e.spec
        };
        let mut rule = build_one(file, text, &canon, scope, false)?;
        rule.dialect = dialect;
        rule.elaboration = e.notes;
        return Ok(rule);
    }
    let meshes = match &s.mesh {
        Some(m) => {
            // `axes` is the mesh's own order (SPEC.md §1.2).
            let ordered = rule_mesh(m, axes.len()).map_err(|e| err("mesh", e))?;
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
            if s.op.is_some()
                || s.forward.is_some()
                || s.backward.is_some()
                || s.jvp.is_some()
                || s.meaning.is_some()
            {
                return Err(err(
                    "step",
                    "a program has steps instead of `op`, `forward`, `backward`, `jvp` or `meaning`"
                        .into(),
                ));
            }
            build_program(s, &types, &output, &step_types, &axes, &err)?
        }
        (Some(o), None) => {
            let f = local_fn(o, s.vars.as_deref(), &err)?;
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
            let backward = match &s.backward {
                None => Backward::LocalVjp,
                Some(BackwardSpec::One(b)) if b == "local" => Backward::LocalVjp,
                Some(BackwardSpec::One(b)) => {
                    return Err(err(
                        b,
                        format!(
                            "a local op's backward is \"local\" (its VJP) or one expression per input, e.g. [\"g * y\", \"g * x\"]; `{b}` is neither"
                        ),
                    ))
                }
                Some(BackwardSpec::PerInput(list)) => {
                    if list.len() != f.arity() {
                        return Err(err(
                            "backward",
                            format!(
                                "`backward` has {} expressions; `{}` has {} inputs",
                                list.len(),
                                f.text,
                                f.arity()
                            ),
                        ));
                    }
                    let mut order = f.vars.clone();
                    if order.iter().any(|v| v == "g") {
                        return Err(err(
                            "backward",
                            "a variable named `g` would shadow the output cotangent `g`".into(),
                        ));
                    }
                    order.push("g".into());
                    let fs = list
                        .iter()
                        .map(|e| {
                            parse_with_vars(e, &order)
                                .map_err(|x| err(e, format!("backward `{e}`: {x}")))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    Backward::Local(fs)
                }
            };
            let op = match &s.meaning {
                None => Op::Local(f),
                Some(text) => {
                    let meaning = parse_with_vars(text, &f.vars)
                        .map_err(|x| err(text, format!("meaning `{text}`: {x}")))?;
                    Op::Declared {
                        forward: Box::new(Op::Local(f)),
                        meaning: Box::new(Op::Local(meaning)),
                    }
                }
            };
            (op, backward, true)
        }
        (None, Some(fw)) => {
            if types.len() != 1 {
                return Err(err("inputs", "a collective takes one input".into()));
            }
            if s.meaning.is_some() {
                return Err(err(
                    "meaning",
                    "`meaning` is for local ops; a collective's meaning is its own (SPEC.md §10.2)"
                        .into(),
                ));
            }
            let fop = compose(fw, &types[0], &output, &axes).map_err(|e| err(fw, e))?;
            check_group_sizes(&fop, &meshes).map_err(|e| err(fw, e))?;
            let one = match &s.backward {
                None => None,
                Some(BackwardSpec::One(b)) => Some(b.as_str()),
                Some(BackwardSpec::PerInput(_)) => {
                    return Err(err(
                        "backward",
                        "a collective's backward is one collective or composition, not a list"
                            .into(),
                    ))
                }
            };
            match one {
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
    if let Some(&i) = s.no_grad.iter().find(|&&i| i >= types.len()) {
        return Err(err(
            "no_grad",
            format!(
                "no_grad names input {i}; the rule has {} inputs (0-based)",
                types.len()
            ),
        ));
    }
    let op = TypedOp {
        no_grad: s.no_grad.clone(),
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
        mesh_written: s.mesh.is_some(),
        has_backward,
        dialect,
        pending: None,
        uneven: None,
        batching: None,
        elaboration: Vec::new(),
    })
}

/// Refuses the fields a rule checked outside the core cannot have (a
/// program, `jvp`, `no_grad`, `meaning`, and with `no_backward` also
/// `backward`), saying `why`.
fn refuse_fields(
    s: &RuleSpec,
    no_backward: bool,
    why: &str,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<(), UsageError> {
    let unsupported = [
        (
            "step",
            !s.step.is_empty() || !s.names.is_empty(),
            "a program",
        ),
        (
            "backward",
            no_backward && s.backward.is_some(),
            "`backward`",
        ),
        ("jvp", s.jvp.is_some(), "`jvp`"),
        ("no_grad", !s.no_grad.is_empty(), "`no_grad`"),
        ("meaning", s.meaning.is_some(), "`meaning`"),
    ];
    match unsupported.iter().find(|u| u.1) {
        Some((needle, _, what)) => Err(err(needle, format!("{what} is not supported here: {why}"))),
        None => Ok(()),
    }
}

/// The local function of a rule checked outside the core: its `op`, or
/// for a `forward` (a collective, which takes one input) the identity
/// named after it (a collective keeps the value it is given); its arity
/// must be the number of input types.
fn op_or_forward(
    s: &RuleSpec,
    inputs: usize,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<spmd_interp::LocalFn, UsageError> {
    let f = match (&s.op, &s.forward) {
        (Some(_), Some(_)) => {
            return Err(err(
                "forward",
                "give either `op` or `forward`, not both".into(),
            ))
        }
        (None, Some(fw)) => {
            if inputs != 1 {
                return Err(err("inputs", "a collective takes one input".into()));
            }
            let mut id = parse("x").map_err(|e| err(fw, e.to_string()))?;
            id.text = fw.clone();
            id
        }
        (Some(o), None) => local_fn(o, s.vars.as_deref(), err)?,
        (None, None) => {
            return Err(err(
                "name",
                "a rule needs `op` (a local op) or `forward` (a collective)".into(),
            ))
        }
    };
    if f.arity() != inputs {
        return Err(err(
            "inputs",
            format!(
                "`{}` takes {} inputs, {} types given",
                f.text,
                f.arity(),
                inputs
            ),
        ));
    }
    Ok(f)
}

/// A rule on uneven shards (SPEC.md §23.10): one mesh axis, a collective
/// (`forward`, elaborated by the rule's system) or a local op (`op`).
fn build_uneven(
    s: &RuleSpec,
    dialect: Dialect,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<Rule, UsageError> {
    use spmd_dialects::uneven::{elaborate, parse_placement};
    refuse_fields(
        s,
        false,
        "rules on uneven shards take one input type per input, `forward` or `op`, and `backward` (SPEC.md §23.10)",
        err,
    )?;
    if let Some(m) = s.mesh.as_ref().filter(|m| m.len() > 1) {
        return build_nested(s, dialect, m, err);
    }
    // One axis: its name from the tables or the mesh, `x` otherwise.
    let mut axis: Option<String> = s
        .mesh
        .as_ref()
        .and_then(|m| (m.len() == 1).then(|| m.keys().next().cloned()).flatten());
    if let Some(m) = &s.mesh {
        if m.len() != 1 {
            return Err(err(
                "mesh",
                "uneven shards are checked on one mesh axis; the mesh names more".into(),
            ));
        }
    }
    let mut placement = |t: &TypeSpec| -> Result<spmd_semantics::uneven::Placement, UsageError> {
        let text = match t {
            TypeSpec::One(x) => x.clone(),
            TypeSpec::Axes(m) => {
                if m.len() != 1 {
                    return Err(err(
                        "inputs",
                        format!(
                            "uneven shards are checked on one mesh axis; `{}` names {}",
                            type_text(t),
                            m.len()
                        ),
                    ));
                }
                let (a, x) = m.iter().next().expect("one axis");
                match &axis {
                    Some(b) if b != a => {
                        return Err(err(
                            a,
                            format!("axis `{a}` here, `{b}` elsewhere in the rule"),
                        ))
                    }
                    _ => axis = Some(a.clone()),
                }
                x.clone()
            }
        };
        parse_placement(dialect, &text).map_err(|e| err(text.trim(), e))
    };
    let inputs = s
        .inputs
        .iter()
        .map(&mut placement)
        .collect::<Result<Vec<_>, _>>()?;
    let output = placement(&s.output)?;
    let ranks = s
        .mesh
        .as_ref()
        .map(|m| m.values().next().copied().unwrap_or(0));
    if let Some(n) = ranks {
        if n == 0 || n > 8 {
            return Err(err("mesh", "mesh axis sizes must be 1 to 8".into()));
        }
    }
    let backward = match &s.backward {
        None => None,
        Some(BackwardSpec::One(b)) => Some(b.as_str()),
        Some(BackwardSpec::PerInput(_)) => {
            return Err(err(
                "backward",
                "a collective on uneven shards has one backward".into(),
            ))
        }
    };
    if s.op.is_some() && s.forward.is_none() && backward.is_some() {
        return Err(err(
            "backward",
            "local ops on uneven shards are checked forward (SPEC.md §23.10)".into(),
        ));
    }
    let f = op_or_forward(s, inputs.len(), err)?;
    let (what, elaboration, has_backward) = match &s.forward {
        Some(fw) => {
            let e = elaborate(dialect, fw, backward, &inputs[0], &output)
                .map_err(|e| err(backward.filter(|b| e.contains(b.trim())).unwrap_or(fw), e))?;
            let notes = e.notes.clone();
            let has = e.backward.is_some();
            (
                crate::uneven::What::Step(std::sync::Arc::new(e)),
                notes,
                has,
            )
        }
        None => (crate::uneven::What::Op(f.clone()), vec![], false),
    };
    // DTensor keeps a strategy on uneven shards as its flag says (SPEC.md
    // §23.16).
    let mut elaboration = elaboration;
    let guard: Option<crate::uneven::Guard> = match (&what, dialect, &s.op) {
        (crate::uneven::What::Op(_), Dialect::Dtensor, Some(OpSpec::Name(name))) => {
            use spmd_dialects::dtensor::{allow_uneven_sharding, allow_uneven_version, aten_of};
            match aten_of(name).and_then(|a| Some((a, allow_uneven_sharding(a)?))) {
                Some((aten, flag)) => {
                    elaboration.push(format!(
                        "DTensor ({}) registers {aten} with allow_uneven_sharding={}",
                        allow_uneven_version(),
                        if flag { "True" } else { "False" }
                    ));
                    let ins = inputs.clone();
                    Some(std::sync::Arc::new(
                        move |n: usize, shapes: &[Vec<usize>]| {
                            spmd_dialects::dtensor::keeps_strategy(aten, flag, n, &ins, shapes)
                        },
                    ))
                }
                None => {
                    elaboration.push(format!(
                        "DTensor's allow_uneven_sharding for `{name}` is not recorded; checked as written"
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    let axis = axis.unwrap_or_else(|| "x".into());
    let n = ranks.unwrap_or(2);
    let types: Vec<Type> = inputs
        .iter()
        .map(|_| Type::new(vec![spmd_semantics::State::Invariant]))
        .collect();
    Ok(Rule {
        name: s.name.clone(),
        op: TypedOp::local(f, types, Type::new(vec![spmd_semantics::State::Invariant])),
        meshes: vec![Mesh::new(&[(axis.as_str(), n)])],
        mesh_written: s.mesh.is_some(),
        has_backward,
        dialect,
        pending: None,
        batching: None,
        uneven: Some(crate::uneven::UnevenRule {
            axis,
            ranks,
            inputs,
            output,
            what,
            guard,
            nest: None,
        }),
        elaboration,
    })
}

/// A rule with a `vmap` (SPEC.md §24.4): a collective on one mesh axis,
/// its types written as states.
fn build_batching(
    s: &RuleSpec,
    dialect: Dialect,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<Rule, UsageError> {
    refuse_fields(
        s,
        true,
        "a rule with `vmap` is one collective checked by V1 (SPEC.md §24.4)",
        err,
    )?;
    if s.op.is_some() {
        return Err(err(
            "vmap",
            "local ops under `vmap` are not checked yet: a rule with `vmap` batches a `forward` collective".into(),
        ));
    }
    let (axis, ranks) = match &s.mesh {
        None => ("x".to_string(), None),
        Some(m) if m.len() == 1 => {
            let (a, n) = m.iter().next().expect("one axis");
            if *n == 0 || *n > 8 {
                return Err(err("mesh", "mesh axis sizes must be 1 to 8".into()));
            }
            (a.clone(), Some(*n))
        }
        Some(_) => {
            return Err(err(
                "mesh",
                "a rule with `vmap` is checked on one mesh axis".into(),
            ))
        }
    };
    let state = |t: &TypeSpec| -> Result<spmd_semantics::State, UsageError> {
        let text = match t {
            TypeSpec::One(x) => x.clone(),
            TypeSpec::Axes(m) if m.len() == 1 => m.values().next().expect("one").clone(),
            TypeSpec::Axes(_) => {
                return Err(err(
                    &type_text(t),
                    "a rule with `vmap` is checked on one mesh axis".into(),
                ))
            }
        };
        dialect
            .parse_state(&text)
            .map(|(st, _)| st)
            .map_err(|e| err(text.trim(), e))
    };
    if s.inputs.len() != 1 {
        return Err(err(
            "inputs",
            format!("a collective takes one input, {} given", s.inputs.len()),
        ));
    }
    let in_t = Type::new(vec![state(&s.inputs[0])?]);
    let out_t = Type::new(vec![state(&s.output)?]);
    let b = crate::batching::build(s, dialect, &in_t, &out_t, &axis, ranks, err)?;
    let f = op_or_forward(s, 1, err)?;
    let probe = crate::batching::BatchReport {
        rule: b.clone(),
        tally: Default::default(),
        cases: 0,
        failure: None,
        ranks: vec![],
    };
    Ok(Rule {
        name: s.name.clone(),
        op: TypedOp::local(f, vec![in_t], out_t),
        meshes: vec![Mesh::new(&[(axis.as_str(), ranks.unwrap_or(2))])],
        mesh_written: s.mesh.is_some(),
        has_backward: false,
        dialect,
        pending: None,
        uneven: None,
        batching: Some(crate::batching::Transform::Collective(Box::new(b))),
        elaboration: vec![probe.elaboration()],
    })
}

/// A rule on uneven shards over several mesh axes (SPEC.md §23.20): one
/// placement per axis on its one input and its output; the step is
/// DTensor's `redistribute` (its plan, and its backward the plan back) or
/// `all_gather(flattened)`, the one-step gather over every axis with
/// pad-then-unpad (§23.6; no backward).
fn build_nested(
    s: &RuleSpec,
    dialect: Dialect,
    mesh: &IndexMap<String, usize>,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<Rule, UsageError> {
    use spmd_dialects::uneven::{parse_placement, Elaborated, StepFn};
    use spmd_semantics::uneven::{Nested, Placement};
    refuse_fields(
        s,
        false,
        "a rule on uneven shards over several mesh axes is one step (SPEC.md §23.20)",
        err,
    )?;
    let axes: Vec<(String, usize)> = mesh.iter().map(|(a, n)| (a.clone(), *n)).collect();
    if axes.iter().any(|a| a.1 == 0 || a.1 > 8) {
        return Err(err("mesh", "mesh axis sizes must be 1 to 8".into()));
    }
    let n: usize = axes.iter().map(|a| a.1).product();
    if n > crate::nested::MAX_RANKS {
        return Err(err(
            "mesh",
            format!(
                "{n} ranks; nested placements are checked on at most {}",
                crate::nested::MAX_RANKS
            ),
        ));
    }
    if s.inputs.len() != 1 || s.op.is_some() {
        return Err(err(
            "inputs",
            "a rule over several mesh axes on uneven shards is one step of one input, written `forward`".into(),
        ));
    }
    let nested = |t: &TypeSpec| -> Result<Nested, UsageError> {
        let TypeSpec::Axes(m) = t else {
            return Err(err(
                &type_text(t),
                format!(
                    "over the mesh's {} axes, name one placement per axis",
                    axes.len()
                ),
            ));
        };
        if let Some(k) = m.keys().find(|k| !mesh.contains_key(*k)) {
            return Err(err(k, format!("`{k}` is not an axis of the mesh")));
        }
        let ps = axes
            .iter()
            .map(|(a, size)| {
                let text = m.get(a).ok_or_else(|| {
                    err(
                        &type_text(t),
                        format!("`{}` names no placement for axis `{a}`", type_text(t)),
                    )
                })?;
                parse_placement(dialect, text)
                    .map(|p| (*size, p))
                    .map_err(|e| err(text.trim(), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nested { axes: ps })
    };
    let input = nested(&s.inputs[0])?;
    let output = nested(&s.output)?;
    let fw = s
        .forward
        .as_deref()
        .ok_or_else(|| err("inputs", "a nested rule writes its `forward`".into()))?;
    let sizes: Vec<usize> = axes.iter().map(|a| a.1).collect();
    let words = |steps: &[spmd_dialects::dtensor::PlanStep]| -> String {
        steps
            .iter()
            .map(|st| {
                format!(
                    "mesh dim {}: {} -> {}",
                    st.mesh_dim,
                    spmd_dialects::uneven::show(dialect, &st.from),
                    spmd_dialects::uneven::show(dialect, &st.to)
                )
            })
            .collect::<Vec<_>>()
            .join(", then ")
    };
    let e = match (dialect, fw.trim()) {
        (_, _) if s.backward.is_some() => {
            return Err(err(
                "backward",
                "a nested rule's backward is its system's (DTensor's plan back); it is not written"
                    .into(),
            ))
        }
        (Dialect::Dtensor, "redistribute") => {
            use spmd_dialects::dtensor::{held_nested, redistribute_nested_backward};
            let (src, dst) = (held_nested(&input), held_nested(&output));
            let f = spmd_dialects::dtensor::redistribute_nested(&sizes, &src, &dst)
                .map_err(|e| err(fw, e))?;
            let b = redistribute_nested_backward(&sizes, &input, &output).ok();
            let plan = spmd_dialects::dtensor::plan(&src, &dst);
            let (backward, backward_text) = match b {
                Some((b, back)) => (
                    Some(b),
                    Some(format!("redistribute back ({})", words(&back))),
                ),
                None => (None, None),
            };
            Elaborated {
                forward: f,
                forward_text: "redistribute".into(),
                backward_text,
                backward,
                notes: vec![format!(
                    "DTensor (torch 2.14.1) plans redistribute as {}",
                    if plan.is_empty() {
                        "no move".to_string()
                    } else {
                        words(&plan)
                    }
                )],
            }
        }
        (_, "all_gather(flattened)") => {
            let dim = match input.axes.iter().find_map(|(_, p)| match p {
                Placement::Shard(d, _) => Some(*d),
                _ => None,
            }) {
                Some(d) => d,
                None => return Err(err(fw, "the input shards no dim".into())),
            };
            if !output
                .axes
                .iter()
                .all(|(_, p)| matches!(p, Placement::Inv | Placement::Red))
            {
                return Err(err(
                    fw,
                    "a flattened all_gather ends replicated on every axis".into(),
                ));
            }
            let f: StepFn = Box::new(move |xs: &[spmd_semantics::Tensor]| {
                let g = spmd_semantics::uneven::flat_gather_padded(xs, dim)
                    .ok_or("a piece longer than the padded block, or no such dim")?;
                Ok(vec![g; xs.len()])
            });
            Elaborated {
                forward: f,
                forward_text: "all_gather(flattened)".into(),
                backward: None,
                backward_text: None,
                notes: vec![format!(
                    "one all_gather over the {n} ranks of the flattened mesh, each piece padded to ceil(L/{n}) rows and rank r's torch.chunk size kept (SPEC.md §23.6)"
                )],
            }
        }
        (d, other) => {
            return Err(err(
                other,
                format!(
                    "over several mesh axes a rule on uneven shards runs DTensor's `redistribute` or `all_gather(flattened)`; `{}` in dialect {} is not modelled",
                    other,
                    d.name()
                ),
            ))
        }
    };
    let (inner_axis, inner_n) = axes.last().cloned().expect("two axes");
    let elaboration = e.notes.clone();
    let has_backward = e.backward.is_some();
    let f = op_or_forward(s, 1, err)?;
    Ok(Rule {
        name: s.name.clone(),
        op: TypedOp::local(
            f,
            vec![Type::new(vec![spmd_semantics::State::Invariant])],
            Type::new(vec![spmd_semantics::State::Invariant]),
        ),
        meshes: vec![Mesh::new(
            &mesh
                .iter()
                .map(|(a, k)| (a.as_str(), *k))
                .collect::<Vec<_>>(),
        )],
        mesh_written: true,
        has_backward,
        dialect,
        pending: None,
        batching: None,
        uneven: Some(crate::uneven::UnevenRule {
            axis: inner_axis,
            ranks: Some(inner_n),
            inputs: vec![input.axes.last().expect("an axis").1.clone()],
            output: output.axes.last().expect("an axis").1.clone(),
            what: crate::uneven::What::Step(std::sync::Arc::new(e)),
            guard: None,
            nest: Some(std::sync::Arc::new(crate::uneven::NestSpec {
                axes,
                input,
                output,
            })),
        }),
        elaboration,
    })
}

/// A rule with pending kinds (SPEC.md §21.7): a local op (checked by
/// `partial_kinds::check_places`) or a collective of a kind, on one mesh
/// axis; every other axis must be Replicate on every input and the output.
/// A rule's `op`: a built-in by name, or an expression (over `vars` when
/// the rule names them); errors point at the name or the expression.
fn local_fn(
    o: &OpSpec,
    vars: Option<&[String]>,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<spmd_interp::LocalFn, UsageError> {
    match o {
        OpSpec::Name(n) => builtin(n).map_err(|e| err(n, e)),
        OpSpec::Expr { expr } => match vars {
            None => parse(expr),
            Some(v) => parse_with_vars(expr, v),
        }
        .map_err(|e| {
            err(
                expr,
                format!("expression `{}`: {e}", crate::words::excerpt(expr)),
            )
        }),
    }
}

/// A rule's `mesh`, in its own order (SPEC.md §1.2), checked against the
/// number of axes its types name and the limits of exact checking.
fn rule_mesh(m: &IndexMap<String, usize>, axes: usize) -> Result<Vec<(&str, usize)>, String> {
    let ordered: Vec<(&str, usize)> = m.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    if ordered.len() != axes {
        return Err(format!(
            "the mesh has {} axes, the types name {axes}",
            ordered.len()
        ));
    }
    if ordered.iter().any(|(a, _)| a.trim().is_empty()) {
        return Err("a mesh axis needs a name".into());
    }
    if ordered.iter().any(|(_, n)| *n == 0 || *n > 8) {
        return Err("mesh axis sizes must be 1 to 8".into());
    }
    if ordered.iter().map(|(_, n)| *n).product::<usize>() > MAX_RANKS {
        return Err(format!(
            "a mesh of more than {MAX_RANKS} ranks is beyond what exact checking finishes"
        ));
    }
    Ok(ordered)
}

#[allow(clippy::too_many_arguments)]
fn build_pending(
    s: &RuleSpec,
    dialect: Dialect,
    axes: &[String],
    types: Vec<Type>,
    output: Type,
    scope: &Scope,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<Rule, UsageError> {
    refuse_fields(
        s,
        true,
        "pending kinds other than sum are checked forward only (SPEC.md §21.7)",
        err,
    )?;
    let f = op_or_forward(s, types.len(), err)?;
    let all: Vec<&Type> = types.iter().chain([&output]).collect();
    let places = kind_places(axes, &all).map_err(|e| err("inputs", e))?;
    // The axis checked: the one where some placement is not Replicate.
    let active: Vec<usize> = (0..axes.len())
        .filter(|&a| places.iter().any(|p| p[a] != Place::Inv))
        .collect();
    let a = match active.as_slice() {
        [a] => *a,
        _ => {
            return Err(err(
                "inputs",
                format!(
                    "pending kinds are checked on one mesh axis, with every other axis Replicate; axes {} carry other placements (SPEC.md §21.7)",
                    active
                        .iter()
                        .map(|&i| format!("`{}`", axes[i]))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            ))
        }
    };
    let (meshes, ranks) = match &s.mesh {
        Some(m) => {
            let ordered = rule_mesh(m, axes.len()).map_err(|e| err("mesh", e))?;
            (vec![Mesh::new(&ordered)], Some(ordered[a].1))
        }
        None => (meshes_named(&scope.meshes, axes), None),
    };
    let mut places: Vec<Place> = places.iter().map(|p| p[a]).collect();
    let out_place = places.pop().expect("the output's placement");
    let forward = match &s.forward {
        Some(fw) => Some(kind_collective(fw, places[0], out_place).map_err(|e| err(fw, e))?),
        None => None,
    };
    let pending = PendingRule {
        f: f.clone(),
        axis: axes[a].clone(),
        inputs: places,
        output: out_place,
        ranks,
        forward,
    };
    // Refuse what cannot finish, as for the core (SPEC.md §11.2).
    let total = pending_estimate(&pending, &pending_scope(scope, ranks));
    if total > scope.max_instances {
        return Err(err(
            "name",
            format!(
                "scope too large: about {total} instances (limit {}); raise it with --max-instances {total} or lower --max-points",
                scope.max_instances
            ),
        ));
    }
    Ok(Rule {
        name: s.name.clone(),
        op: TypedOp::local(f, types, output),
        meshes,
        mesh_written: s.mesh.is_some(),
        has_backward: false,
        dialect,
        pending: Some(pending),
        uneven: None,
        batching: None,
        elaboration: Vec::new(),
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
    if let Some((i, n)) = (s.names.iter().enumerate()).find(|(i, n)| s.names[..*i].contains(n)) {
        let first = s.names.iter().position(|m| m == n).unwrap_or(0);
        return Err(err(
            "names",
            format!("input name `{n}` is given twice (inputs {first} and {i}, 0-based)"),
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
                let f = parse(e).map_err(|x| {
                    err(
                        e,
                        format!(
                            "step `{}`: expression `{}`: {x}",
                            st.name,
                            crate::words::excerpt(e)
                        ),
                    )
                })?;
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
                        no_grad: vec![],
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
    let mut p = spmd_interp::Program::new(types.to_vec(), steps).map_err(|x| err("step", x))?;
    p.names = s.names.clone();
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

impl Rule {
    /// The one rule of a TOML (or JSON) text, built in the default scope:
    /// `Rule::from_toml_str(r#"[[rule]] ... "#)` in a test.
    pub fn from_toml_str(text: &str) -> Result<Rule, UsageError> {
        let mut rules = load_str("<string>", text)?;
        match rules.len() {
            1 => Ok(rules.remove(0)),
            n => Err(UsageError(format!(
                "<string>: {n} rules; Rule::from_toml_str takes one (use rules::load_str)"
            ))),
        }
    }
    /// The properties its check covers (SPEC.md §7.2).
    pub fn phase(&self) -> spmd_oracle::Phase {
        spmd_oracle::Phase::full(self.has_backward)
    }
}

/// Build every rule of a TOML or JSON text, in the default scope; `file`
/// names it in errors.
pub fn load_str(file: &str, text: &str) -> Result<Vec<Rule>, UsageError> {
    let specs = parse_file(file, text)?;
    build(file, text, &specs, &Scope::default())
}

/// [`load_str`] for what a real system recorded: see [`build_as_recorded`].
pub fn load_str_as_recorded(file: &str, text: &str) -> Result<Vec<Rule>, UsageError> {
    let specs = parse_file(file, text)?;
    build_as_recorded(file, text, &specs, &Scope::default())
}

/// Read and build every rule of a file.
pub fn load(path: &str, scope: &Scope) -> Result<Vec<Rule>, UsageError> {
    let text = read_text(path)?;
    let specs = parse_file(path, &text)?;
    build(path, &text, &specs, scope)
}

/// The scope of a pending-kind rule (SPEC.md §21.7): `partial_kinds`'
/// default (1-4 ranks, local shapes up to [2, 2], six values, 50,000 points
/// per case), with the ranks of `check`'s one-axis meshes (`--scope small`
/// keeps 1-2), the rule's own axis size when its mesh fixes it, and
/// `--max-points`, `--max-rank`, `--max-dim` where given other than their
/// defaults.
pub fn pending_scope(
    s: &spmd_generators::Scope,
    ranks: Option<usize>,
) -> crate::partial_kinds::Scope {
    let d = spmd_generators::Scope::default();
    let mut p = crate::partial_kinds::Scope::default();
    match ranks {
        Some(n) => p.ranks = vec![n],
        None => {
            let mut r: Vec<usize> = s
                .meshes
                .iter()
                .filter(|m| m.ndim() == 1)
                .map(|m| m.num_ranks())
                .collect();
            r.sort_unstable();
            r.dedup();
            if !r.is_empty() {
                p.ranks = r;
            }
        }
    }
    if s.max_points != d.max_points {
        p.max_points = s.max_points;
    }
    if s.max_rank != d.max_rank || s.max_dim != d.max_dim {
        p.shapes = (0..=s.max_rank)
            .flat_map(|k| spmd_generators::tuples(&(1..=s.max_dim).collect::<Vec<_>>(), k))
            .collect();
    }
    p
}

/// The global shape of a local one under a placement on `n` ranks.
pub fn pending_global(p: Place, local: &[usize], n: usize) -> Option<Shape> {
    let mut s = local.to_vec();
    if let Place::Shard(d) = p {
        *s.get_mut(d)? *= n;
    }
    Some(s)
}

/// The scalars an input of this placement and local shape takes on `n` ranks.
pub fn pending_free(p: Place, shape: &[usize], n: usize) -> usize {
    let numel: usize = shape.iter().product();
    match p {
        Place::Inv => numel,
        Place::Part(_) | Place::Shard(_) => numel * n,
    }
}

/// Whether the op takes these local shapes, and the global ones they make.
pub fn pending_fits(r: &PendingRule, n: usize, shapes: &[Shape]) -> bool {
    use spmd_interp::eval::infer;
    let globals: Option<Vec<Shape>> = r
        .inputs
        .iter()
        .zip(shapes)
        .map(|(&p, s)| pending_global(p, s, n))
        .collect();
    if let Some(spmd_interp::collective::Coll::ReduceScatter(_, d)) = r.forward {
        // Each rank keeps its chunk of the reduced tensor along d.
        if shapes.first().is_none_or(|s| d >= s.len() || s[d] % n != 0) {
            return false;
        }
    }
    shapes.len() == r.inputs.len()
        && infer(&r.f.expr, shapes).is_ok()
        && globals.is_some_and(|g| infer(&r.f.expr, &g).is_ok())
}

/// How many instances the exhaustive part of a pending-kind rule runs: the
/// grid points of every case within the cap (SPEC.md §21.7), saturating.
pub fn pending_estimate(r: &PendingRule, scope: &crate::partial_kinds::Scope) -> u64 {
    let nv = scope.values.len() as u64;
    let mut total = 0u64;
    for &n in &scope.ranks {
        for shapes in spmd_generators::tuples(&scope.shapes, r.inputs.len()) {
            if !pending_fits(r, n, &shapes) {
                continue;
            }
            let free: usize = r
                .inputs
                .iter()
                .zip(&shapes)
                .map(|(&p, s)| pending_free(p, s, n))
                .sum();
            let points = u32::try_from(free)
                .ok()
                .and_then(|f| nv.checked_pow(f))
                .filter(|&p| p <= scope.max_points);
            total = total.saturating_add(points.unwrap_or(0));
        }
    }
    total
}
