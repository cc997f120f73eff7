//! Elaboration (SPEC.md §15.5): a rule, job or program written in a
//! system's language, turned into the canonical program that system runs.
//!
//! The system's typing function types every local op node by node; the
//! casts it inserts become steps of their own, each with the system's
//! backward for it; a collective call in the system's spelling becomes the
//! catalogue call the system means, after the casts it inserts (JAX's
//! automatic `pvary`), with the output type the system infers and the
//! system's transpose as its backward unless the author wrote one. What the
//! system refuses is refused with its reason. The result is a canonical
//! rule (`RuleSpec` in the project's letters) that the builder builds like
//! any other, plus one line per decision for the report.
//!
//! Conventions: `t: Type` a type (a state per mesh axis), `axes` the mesh
//! axes in order, `sys` the system.
//!
//! Note: a cast the typing asks for on a compound operand is put on the
//! leaves of that operand instead (pvary(f(x)) is run as f(pvary(x))).
//! Values agree because every cast is the identity on per-rank data, and
//! gradients agree because the casts a typing inserts on a compound operand
//! sit on a path where every leaf has the same state on that axis (so the
//! operand's derivative is the same on every rank of the group). SPEC.md
//! §15.5 states it.

use crate::{OpClass, Outcome, System};
use spmd_interp::{builtin, parse, parse_with_vars, Expr, LocalFn};
use spmd_semantics::{State, Type};
use spmd_syntax::{BackwardSpec, OpSpec, RuleSpec, StepSpec, TypeSpec};

/// A rule as written, with its types already read in the system's names.
pub struct Surface<'a> {
    pub spec: &'a RuleSpec,
    pub inputs: Vec<Type>,
    /// `None`: the author left it to the system to infer.
    pub output: Option<Type>,
    /// One per step of a program, `None` where left to infer.
    pub steps: Vec<Option<Type>>,
    /// The mesh axes, in order.
    pub axes: Vec<String>,
}

/// What elaboration made of a rule: the canonical rule, and what the system
/// decided (inserted casts, inferred types, chosen backwards), one line each.
#[derive(Clone, Debug)]
pub struct Elaborated {
    pub spec: RuleSpec,
    pub notes: Vec<String>,
}

/// A cast or collective as a system runs it: the catalogue call, the type
/// it produces, and its backward (the system's transpose), in catalogue
/// spelling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub forward: String,
    pub output: Type,
    pub backward: Option<String>,
    /// The system's own name for it, for the report.
    pub name: String,
}

/// How a system reads one collective call on an input type: the casts it
/// inserts first, then the call itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    pub casts: Vec<Call>,
    pub call: Call,
}

/// The canonical text of a type over `axes`: `{x: V, y: I}`.
pub fn type_text(t: &Type, axes: &[String]) -> String {
    let parts: Vec<String> = axes
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{a}: {}", t.axis_letter(i)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn ty(t: &Type, axes: &[String]) -> TypeSpec {
    TypeSpec::One(type_text(t, axes))
}

/// The op class a typing function sees at one node of an expression, with
/// the node's tensor operands; `None` for a leaf or a constant.
fn node_class(e: &Expr) -> Option<(OpClass, Vec<&Expr>)> {
    use Expr::*;
    let konst = |x: &Expr| !has_var(x);
    Some(match e {
        Var(_) | Const(_) => return None,
        Neg(a) => (OpClass::Neg, vec![a]),
        Add(a, b) | Sub(a, b) if konst(a) || konst(b) => {
            // x + c: affine, typed as a nonlinear unary op (seed 003: "x + 1").
            let t = if konst(a) { b } else { a };
            (OpClass::Nonlinear, vec![t])
        }
        Add(a, b) => (OpClass::Add, vec![a, b]),
        Sub(a, b) => (OpClass::Sub, vec![a, b]),
        Mul(a, b) if konst(a) || konst(b) => {
            (OpClass::ScalarMul, vec![if konst(a) { b } else { a }])
        }
        Mul(a, b) => (OpClass::Mul, vec![a, b]),
        Div(a, b) if konst(b) => (OpClass::ScalarMul, vec![a]),
        Div(a, b) if konst(a) => (OpClass::Nonlinear, vec![b]),
        Div(a, b) => (OpClass::Division, vec![a, b]),
        // floor(a / b) is one op in PyTorch (floor_divide), and so is the
        // truncating division (`torch.div(rounding_mode='trunc')`).
        Floor(d) | Round(_, d) if matches!(&**d, Div(_, b) if !konst(b)) => match &**d {
            Div(a, b) => (OpClass::FloorDivision, vec![a, b]),
            _ => unreachable!("matched above"),
        },
        Pow(a, _) | Abs(a) | Relu(a) | Floor(a) | Unary(_, a) | Round(_, a) => {
            (OpClass::Nonlinear, vec![a])
        }
        Dimwise(_, a, _, _) => (OpClass::Nonlinear, vec![a]),
        // A recorded kernel is typed as any nonlinear elementwise op.
        Table(_, xs) => (
            OpClass::Nonlinear,
            xs.iter().filter(|x| has_var(x)).collect(),
        ),
        Sum(a, _) => (OpClass::Sum, vec![a]),
        Mean(a, _) => (OpClass::Mean, vec![a]),
        Max(a, _) => (OpClass::Max, vec![a]),
        Cumsum(a, _) => (OpClass::Cumsum, vec![a]),
        Einsum(_, xs) => (
            if xs.len() == 2 {
                OpClass::Matmul
            } else {
                OpClass::Einsum
            },
            xs.iter().filter(|x| has_var(x)).collect(),
        ),
        Reshape(a, _) | Slice(a, _, _, _) | Take(a, _, _) => (OpClass::View, vec![a]),
        Concat(xs, _) => (OpClass::Concat, xs.iter().filter(|x| has_var(x)).collect()),
        UpdateSlice(a, b, _) => (OpClass::Concat, vec![a, b]),
        Cast(a, _) => (OpClass::NarrowingCast, vec![a]),
        CrossEntropy(a, b, _) => (OpClass::Nonlinear, vec![a, b]),
        Where(m, a, b) => {
            let mut v: Vec<&Expr> = vec![a, b];
            if let spmd_interp::expr::Mask::Input(c) = m {
                v.insert(0, c);
            }
            (
                OpClass::Nonlinear,
                v.into_iter().filter(|x| has_var(x)).collect(),
            )
        }
    })
}

/// The op class of an expression that is one op on its inputs (every
/// operand of the root a variable or a constant), as elaboration types it:
/// `sin(x)` is Nonlinear, `floor(x / y)` floor division. `None` for a
/// composition, whose class is per node.
pub fn single_op_class(text: &str) -> Option<OpClass> {
    let f = parse(text).ok()?;
    let (class, operands) = node_class(&f.expr)?;
    operands
        .iter()
        .all(|o| matches!(o, Expr::Var(_) | Expr::Const(_)))
        .then_some(class)
}

fn has_var(e: &Expr) -> bool {
    let mut found = false;
    leaves(e, &mut |_| found = true);
    found
}

/// Every variable under `e`.
fn leaves(e: &Expr, f: &mut dyn FnMut(usize)) {
    match e {
        Expr::Var(i) => f(*i),
        _ => e.children().into_iter().for_each(|c| leaves(c, f)),
    }
}

/// A cast the typing asked for, put on one input (all axes it names).
#[derive(Clone, Debug, PartialEq, Eq)]
struct LeafCast {
    input: usize,
    name: &'static str,
    axis: usize,
    from: State,
    to: State,
}

/// Type an expression node by node with the system's typing function, on
/// input types `ins`; casts are put on the inputs (see the module's Note).
/// Returns the output type and the casts, or the system's refusal.
fn type_expr(sys: &System, f: &LocalFn, ins: &[Type]) -> Result<(Type, Vec<LeafCast>), String> {
    let mut cur: Vec<Type> = ins.to_vec();
    let mut casts: Vec<LeafCast> = Vec::new();
    // Each round either types the tree or moves some input strictly up the
    // cast order; a system's casts never undo each other, so this ends.
    for _ in 0..64 {
        match type_node(sys, &f.expr, &cur)? {
            Typed::Done(t) => return Ok((t, casts)),
            Typed::Cast {
                leaves,
                name,
                axis,
                from,
                to,
            } => {
                for i in leaves {
                    if cur[i].states[axis] == from {
                        cur[i].states[axis] = to;
                        casts.push(LeafCast {
                            input: i,
                            name,
                            axis,
                            from,
                            to,
                        });
                    }
                }
            }
        }
    }
    Err(format!("{}: the typing did not settle", sys.name))
}

enum Typed {
    Done(Type),
    Cast {
        leaves: Vec<usize>,
        name: &'static str,
        axis: usize,
        from: State,
        to: State,
    },
}

fn type_node(sys: &System, e: &Expr, ins: &[Type]) -> Result<Typed, String> {
    let Some((class, args)) = node_class(e) else {
        return Ok(Typed::Done(match e {
            Expr::Var(i) => ins[*i].clone(),
            // A constant on its own: typed by its context.
            _ => Type::new(vec![
                State::Invariant;
                ins.first().map_or(0, |t| t.states.len())
            ]),
        }));
    };
    let mut types = Vec::new();
    for a in &args {
        match type_node(sys, a, ins)? {
            Typed::Done(t) => types.push(t),
            c => return Ok(c),
        }
    }
    if types.is_empty() {
        return Ok(Typed::Done(Type::new(vec![
            State::Invariant;
            ins.first().map_or(0, |t| t
                .states
                .len())
        ])));
    }
    let per_axis: Vec<Vec<State>> = types.iter().map(|t| t.states.clone()).collect();
    match (sys.typing)(class, &per_axis) {
        Outcome::Infers { output, casts } => {
            if let Some(c) = casts.first() {
                let mut ls = Vec::new();
                leaves(args[c.input], &mut |i| {
                    if !ls.contains(&i) {
                        ls.push(i)
                    }
                });
                return Ok(Typed::Cast {
                    leaves: ls,
                    name: c.name,
                    axis: c.axis,
                    from: c.from,
                    to: c.to,
                });
            }
            Ok(Typed::Done(Type::new(output)))
        }
        Outcome::Error(e) => Err(format!(
            "{} refuses {} on ({}): {e}",
            sys.name,
            class.name(),
            types
                .iter()
                .map(|t| sys.type_name(t))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Outcome::Unknown(r) => Err(format!(
            "the {} dialect does not know how {} types {} on ({}): {r}",
            sys.name,
            sys.name,
            class.name(),
            types
                .iter()
                .map(|t| sys.type_name(t))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The local function of a rule's `op`.
fn local_fn(o: &OpSpec, vars: Option<&[String]>) -> Result<LocalFn, String> {
    match o {
        OpSpec::Name(n) => builtin(n),
        OpSpec::Expr { expr } => match vars {
            None => parse(expr),
            Some(v) => parse_with_vars(expr, v),
        }
        .map_err(|e| format!("expression `{expr}`: {e}")),
    }
}

/// The output the system infers must be the one written, when written.
fn agree(sys: &System, what: &str, inferred: &Type, written: &Option<Type>) -> Result<(), String> {
    match written {
        Some(w) if w.states != inferred.states => Err(format!(
            "{}: {} infers {}, the rule writes {} (to check a typing {} does not infer, write the rule with dialect = \"canonical\")",
            what,
            sys.name,
            sys.type_name(inferred),
            sys.type_name(w),
            sys.name
        )),
        _ => Ok(()),
    }
}

/// Elaborate a rule written in `sys`'s language (SPEC.md §15.5).
pub fn elaborate(sys: &System, s: &Surface) -> Result<Elaborated, String> {
    let spec = s.spec;
    let axes = &s.axes;
    let mut notes = Vec::new();
    let mut out = RuleSpec {
        dialect: None,
        ..spec.clone()
    };
    if !spec.step.is_empty() {
        return elaborate_program(sys, s);
    }
    match (&spec.op, &spec.forward) {
        (Some(o), None) => {
            let f = local_fn(o, spec.vars.as_deref())?;
            if f.arity() != s.inputs.len() {
                // The builder says it in its own words.
                return Ok(Elaborated { spec: out, notes });
            }
            let (t, casts) = type_expr(sys, &f, &s.inputs)?;
            agree(sys, "output", &t, &s.output)?;
            if s.output.is_none() {
                notes.push(format!(
                    "{} infers the output {}",
                    sys.name,
                    sys.type_name(&t)
                ));
            }
            out.output = ty(&t, axes);
            out.inputs = s.inputs.iter().map(|t| ty(t, axes)).collect();
            if casts.is_empty() {
                return Ok(Elaborated { spec: out, notes });
            }
            // A program: the casts on the inputs, then the op itself.
            let vars = f.vars.clone();
            let mut names: Vec<String> = vars.iter().map(|v| format!("{v}_in")).collect();
            let mut steps = Vec::new();
            let mut cur = s.inputs.clone();
            for i in 0..vars.len() {
                let mine: Vec<&LeafCast> = casts.iter().filter(|c| c.input == i).collect();
                let mut last = names[i].clone();
                for (k, c) in mine.iter().enumerate() {
                    cur[i].states[c.axis] = c.to;
                    let (fw, bw) = (sys.cast)(c.name, c.from, c.to).ok_or_else(|| {
                        format!(
                            "{} inserts {} ({} -> {}), which has no catalogue spelling",
                            sys.name,
                            c.name,
                            c.from.letter(),
                            c.to.letter()
                        )
                    })?;
                    let fw = on_axis(&fw, &axes[c.axis], axes.len());
                    let bw = on_axis(&bw, &axes[c.axis], axes.len());
                    let name = if k + 1 == mine.len() {
                        vars[i].clone()
                    } else {
                        format!("{}_{k}", vars[i])
                    };
                    notes.push(format!(
                        "{} inserts {} on `{}` (mesh axis {}: {} -> {}); backward {}",
                        sys.name,
                        c.name,
                        vars[i],
                        axes[c.axis],
                        sys.state_name(c.from),
                        sys.state_name(c.to),
                        bw
                    ));
                    steps.push(StepSpec {
                        name: name.clone(),
                        expr: None,
                        forward: Some(fw),
                        input: Some(last.clone()),
                        backward: Some(bw),
                        output: ty(&cur[i], axes),
                    });
                    last = name;
                }
                if mine.is_empty() {
                    names[i] = vars[i].clone();
                }
            }
            let text = match o {
                OpSpec::Expr { expr } => expr.clone(),
                OpSpec::Name(n) => spmd_interp::BUILTINS
                    .iter()
                    .find(|(b, _)| b == n)
                    .map_or_else(|| f.text.clone(), |(_, e)| e.to_string()),
            };
            steps.push(StepSpec {
                name: "out".into(),
                expr: Some(text),
                forward: None,
                input: None,
                backward: None,
                output: ty(&t, axes),
            });
            if spec.backward.is_some() || spec.jvp.is_some() || spec.meaning.is_some() {
                return Err(format!(
                    "{} inserts casts here ({}), so the op becomes a program; a written `backward`, `jvp` or `meaning` applies to one op: write the casts as steps instead",
                    sys.name,
                    notes.join("; ")
                ));
            }
            out.op = None;
            out.vars = None;
            out.names = names;
            out.step = steps;
            Ok(Elaborated { spec: out, notes })
        }
        (None, Some(fw)) if s.inputs.len() == 1 && !fw.contains("|>") => {
            let r = (sys.collective)(fw, &s.inputs[0], axes, s.output.as_ref())?;
            agree(sys, "output", &r.call.output, &s.output)?;
            if s.output.is_none() {
                notes.push(format!(
                    "{} infers the output {}",
                    sys.name,
                    sys.type_name(&r.call.output)
                ));
            }
            let backward = match &spec.backward {
                Some(b) => Some(b.clone()),
                None => r.call.backward.clone().map(|b| {
                    notes.push(format!(
                        "backward of {}: {b}, {}'s transpose",
                        r.call.name, sys.name
                    ));
                    BackwardSpec::One(b)
                }),
            };
            if r.call.forward != *fw {
                notes.push(format!("{} runs `{fw}` as `{}`", sys.name, r.call.forward));
            }
            out.output = ty(&r.call.output, axes);
            out.inputs = vec![ty(&s.inputs[0], axes)];
            if r.casts.is_empty() {
                out.forward = Some(r.call.forward.clone());
                out.backward = backward;
                return Ok(Elaborated { spec: out, notes });
            }
            if spec.jvp.is_some() {
                return Err(format!(
                    "{} inserts casts before `{fw}`, so it becomes a program; a written `jvp` applies to one collective",
                    sys.name
                ));
            }
            let mut steps = Vec::new();
            let mut last = "x".to_string();
            for (k, c) in r.casts.iter().enumerate() {
                notes.push(format!(
                    "{} inserts {} before `{fw}` ({} -> {}); backward {}",
                    sys.name,
                    c.name,
                    sys.type_name(if k == 0 {
                        &s.inputs[0]
                    } else {
                        &r.casts[k - 1].output
                    }),
                    sys.type_name(&c.output),
                    c.backward.as_deref().unwrap_or("none")
                ));
                let name = format!("x{}", k + 1);
                steps.push(StepSpec {
                    name: name.clone(),
                    expr: None,
                    forward: Some(c.forward.clone()),
                    input: Some(last),
                    backward: c.backward.clone(),
                    output: ty(&c.output, axes),
                });
                last = name;
            }
            let bw = match backward {
                Some(BackwardSpec::One(b)) => Some(b),
                Some(BackwardSpec::PerInput(_)) => {
                    return Err("a collective's backward is one call, not a list".into())
                }
                None => None,
            };
            steps.push(StepSpec {
                name: "out".into(),
                expr: None,
                forward: Some(r.call.forward.clone()),
                input: Some(last),
                backward: bw,
                output: ty(&r.call.output, axes),
            });
            out.forward = None;
            out.backward = None;
            out.names = vec!["x".into()];
            out.step = steps;
            Ok(Elaborated { spec: out, notes })
        }
        _ => {
            // A composition or a malformed rule: the builder reads it as
            // written (in canonical letters), and says what is wrong.
            out.inputs = s.inputs.iter().map(|t| ty(t, axes)).collect();
            match &s.output {
                Some(t) => out.output = ty(t, axes),
                None => {
                    return Err(format!(
                        "give `output`: {} does not infer the output of a composition",
                        sys.name
                    ))
                }
            }
            Ok(Elaborated { spec: out, notes })
        }
    }
}

/// A program: each step elaborated in turn; the casts become steps before it.
fn elaborate_program(sys: &System, s: &Surface) -> Result<Elaborated, String> {
    let spec = s.spec;
    let axes = &s.axes;
    let mut notes = Vec::new();
    if spec.names.len() != s.inputs.len() {
        // The builder says it in its own words.
        let mut out = spec.clone();
        out.dialect = None;
        out.inputs = s.inputs.iter().map(|t| ty(t, axes)).collect();
        out.output = ty(s.output.as_ref().unwrap_or(&s.inputs[0]), axes);
        return Ok(Elaborated { spec: out, notes });
    }
    let mut vals: Vec<(String, Type)> = spec
        .names
        .iter()
        .cloned()
        .zip(s.inputs.iter().cloned())
        .collect();
    let find = |vals: &[(String, Type)], n: &str| -> Result<usize, String> {
        vals.iter()
            .rposition(|(m, _)| m == n)
            .ok_or_else(|| format!("a step uses `{n}`, which is not defined before it"))
    };
    let mut steps: Vec<StepSpec> = Vec::new();
    let mut fresh = 0usize;
    for (st, written) in spec.step.iter().zip(&s.steps) {
        match (&st.expr, &st.forward) {
            (Some(e), None) => {
                let f =
                    parse(e).map_err(|x| format!("step `{}`: expression `{e}`: {x}", st.name))?;
                let idx: Vec<usize> = f
                    .vars
                    .iter()
                    .map(|v| find(&vals, v))
                    .collect::<Result<_, _>>()?;
                let ins: Vec<Type> = idx.iter().map(|&i| vals[i].1.clone()).collect();
                let (t, casts) =
                    type_expr(sys, &f, &ins).map_err(|x| format!("step `{}`: {x}", st.name))?;
                let mut renames: Vec<(String, String)> = Vec::new();
                agree(sys, &format!("step `{}`", st.name), &t, written)?;
                for c in &casts {
                    let (fw, bw) = (sys.cast)(c.name, c.from, c.to).ok_or_else(|| {
                        format!(
                            "{} inserts {}, which has no catalogue spelling",
                            sys.name, c.name
                        )
                    })?;
                    let src = idx[c.input];
                    let mut t2 = vals[src].1.clone();
                    t2.states[c.axis] = c.to;
                    let var = f.vars[c.input].clone();
                    fresh += 1;
                    let tmp = format!("{var}__{fresh}");
                    notes.push(format!(
                        "step `{}`: {} inserts {} on `{var}` (mesh axis {}: {} -> {})",
                        st.name,
                        sys.name,
                        c.name,
                        axes[c.axis],
                        sys.state_name(c.from),
                        sys.state_name(c.to)
                    ));
                    steps.push(StepSpec {
                        name: tmp.clone(),
                        expr: None,
                        forward: Some(on_axis(&fw, &axes[c.axis], axes.len())),
                        input: Some(vals[src].0.clone()),
                        backward: Some(on_axis(&bw, &axes[c.axis], axes.len())),
                        output: ty(&t2, axes),
                    });
                    renames.push((var, tmp.clone()));
                    vals.push((tmp, t2));
                }
                let mut text = e.clone();
                for (from, to) in &renames {
                    text = rename_var(&text, from, to);
                }
                steps.push(StepSpec {
                    expr: Some(text),
                    output: ty(&t, axes),
                    ..st.clone()
                });
                vals.push((st.name.clone(), t));
            }
            (None, Some(fw)) => {
                let arg = st
                    .input
                    .as_deref()
                    .ok_or_else(|| format!("step `{}` names its collective's `input`", st.name))?;
                let a = find(&vals, arg)?;
                let r = (sys.collective)(fw, &vals[a].1, axes, written.as_ref())
                    .map_err(|x| format!("step `{}`: {x}", st.name))?;
                agree(sys, &format!("step `{}`", st.name), &r.call.output, written)?;
                let mut last = vals[a].0.clone();
                for c in &r.casts {
                    fresh += 1;
                    let n = format!("{}__{fresh}", st.name);
                    notes.push(format!(
                        "step `{}`: {} inserts {} before `{fw}`",
                        st.name, sys.name, c.name
                    ));
                    steps.push(StepSpec {
                        name: n.clone(),
                        expr: None,
                        forward: Some(c.forward.clone()),
                        input: Some(last),
                        backward: c.backward.clone(),
                        output: ty(&c.output, axes),
                    });
                    last = n;
                }
                let backward = st.backward.clone().or_else(|| {
                    r.call.backward.clone().inspect(|b| {
                        notes.push(format!(
                            "step `{}`: backward {b}, {}'s transpose of {}",
                            st.name, sys.name, r.call.name
                        ))
                    })
                });
                steps.push(StepSpec {
                    name: st.name.clone(),
                    expr: None,
                    forward: Some(r.call.forward.clone()),
                    input: Some(last),
                    backward,
                    output: ty(&r.call.output, axes),
                });
                vals.push((st.name.clone(), r.call.output));
            }
            _ => {
                return Err(format!(
                    "step `{}` needs either `expr` or `forward`",
                    st.name
                ))
            }
        }
    }
    let last = vals
        .last()
        .map(|v| v.1.clone())
        .expect("a program has steps");
    agree(sys, "output", &last, &s.output)?;
    let mut out = spec.clone();
    out.dialect = None;
    out.inputs = s.inputs.iter().map(|t| ty(t, axes)).collect();
    out.output = ty(&last, axes);
    out.step = steps;
    Ok(Elaborated { spec: out, notes })
}

/// `text` with every use of the variable `from` renamed `to`: whole
/// identifiers outside quoted strings, not followed by `(` (a call).
pub fn rename_var(text: &str, from: &str, to: &str) -> String {
    let cs: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c == '"' || c == '\'' {
            let q = c;
            out.push(c);
            i += 1;
            while i < cs.len() {
                out.push(cs[i]);
                i += 1;
                if cs[i - 1] == q {
                    break;
                }
            }
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            let word: String = cs[start..i].iter().collect();
            let call = cs[i..].iter().find(|c| !c.is_whitespace()) == Some(&'(');
            out.push_str(if word == from && !call { to } else { &word });
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// A cast call confined to one mesh axis where the mesh has several.
fn on_axis(call: &str, axis: &str, n_axes: usize) -> String {
    if n_axes == 1 || call.contains("axis") {
        return call.to_string();
    }
    match call.strip_suffix(')') {
        Some(head) => format!("{head}, axis={axis})"),
        None => format!("{call}(axis={axis})"),
    }
}

/// A row's template with its parameters filled as a program step uses it:
/// dim 0, split 0, concat 1.
pub fn fill(t: &str) -> String {
    t.replace("{d}", "0")
        .replace("{s}", "0")
        .replace("{c}", "1")
}

/// A collective row with its source and destination states.
pub type StatedRow = (&'static crate::tables::CollectiveRow, State, State);

/// The one-axis rows of `system`'s collective table that declare a
/// backward, with their source and destination states. The states are read
/// once for every system's table (the tables are static; a typing asks for
/// them at every inserted cast, and a state that is not one-axis is read
/// with an error message, "did you mean" included, before it is passed
/// over).
pub fn table_rows(system: &str) -> impl Iterator<Item = &'static StatedRow> + '_ {
    static ROWS: std::sync::OnceLock<Vec<StatedRow>> = std::sync::OnceLock::new();
    ROWS.get_or_init(|| {
        crate::tables::collective_rows()
            .iter()
            .filter(|r| r.backward.is_some())
            .filter(|r| !r.forward.starts_with("redistribute"))
            .filter_map(|r| {
                let (s, ls) = r.dialect.parse_state(&r.src).ok()?;
                let (d, ld) = r.dialect.parse_state(&r.dst).ok()?;
                (ls.is_none() && ld.is_none()).then_some((r, s, d))
            })
            .collect()
    })
    .iter()
    .filter(move |(r, _, _)| r.system == system)
}

/// How `system` runs a cast its typing inserts, from its collective table:
/// a row named so, between these states (the catalogue call and the
/// system's backward). A system's own casts beyond its table are in its
/// file (`dtensor::cast`, `ltensor::cast`, `nabla::cast`).
pub fn cast_by_table(system: &str, name: &str, from: State, to: State) -> Option<(String, String)> {
    let (r, _, _) =
        table_rows(system).find(|(r, s, d)| r.forward == name && *s == from && *d == to)?;
    Some((fill(&r.forward), fill(r.backward.as_deref()?)))
}

/// A cast of a system's own beyond its table: its name, the states it goes
/// between, the catalogue call and that call's backward.
pub type OwnCast = (&'static str, State, State, &'static str, &'static str);

/// [`cast_by_table`], else one of the system's own casts.
pub fn cast_by_table_or(
    system: &str,
    own: &[OwnCast],
    name: &str,
    from: State,
    to: State,
) -> Option<(String, String)> {
    cast_by_table(system, name, from, to).or_else(|| {
        own.iter()
            .find(|(n, f, t, _, _)| *n == name && *f == from && *t == to)
            .map(|(_, _, _, fw, bw)| (fw.to_string(), bw.to_string()))
    })
}

/// A table-read system's collective reader, `collective` in its file:
/// [`collective_by_table`] for that file's `SYSTEM`.
macro_rules! table_collective_reader {
    ($what:literal) => {
        #[doc = concat!("How ", $what, " reads a collective call: by its table (SPEC.md §15.5).")]
        pub fn collective(
            call: &str,
            t: &spmd_semantics::Type,
            axes: &[String],
            want: Option<&spmd_semantics::Type>,
        ) -> Result<crate::elaborate::Reading, String> {
            crate::elaborate::collective_by_table(&SYSTEM, call, t, axes, want)
        }
    };
}
pub(crate) use table_collective_reader;

/// The name of a call, `all_gather` of `all_gather(R, dim=0)`.
pub fn base_name(call: &str) -> &str {
    call.split('(').next().unwrap_or("").trim()
}

/// The top-level arguments of a call, split at commas outside brackets.
pub fn call_args(call: &str) -> Vec<String> {
    let Some(open) = call.find('(') else {
        return vec![];
    };
    let inner = call[open + 1..]
        .trim_end()
        .strip_suffix(')')
        .unwrap_or(&call[open + 1..]);
    let mut out = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in inner.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The mesh axes a call acts on: those it names (`axis=x`, `axes=[x, y]`),
/// else every axis in `from`, else every axis. Never empty: a name that is
/// not an axis of the mesh, or a type of no axis, is an error.
pub fn acting_axes(
    call: &str,
    t: &Type,
    axes: &[String],
    from: &[State],
) -> Result<Vec<usize>, String> {
    for a in call_args(call) {
        if let Some((k, v)) = a.split_once('=') {
            if matches!(k.trim(), "axis" | "axes" | "axis_name") {
                let names: Vec<String> = v
                    .trim_matches(|c: char| c == '[' || c == ']' || c == '(' || c == ')')
                    .split(',')
                    .map(|n| n.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
                    .filter(|n| !n.is_empty())
                    .collect();
                if let Some(n) = names.iter().find(|n| !axes.contains(n)) {
                    return Err(format!(
                        "`{call}`: `{n}` is not an axis of the mesh{} (its axes: {})",
                        spmd_semantics::names::did_you_mean(n, axes.iter().map(|a| a.as_str())),
                        axes.join(", ")
                    ));
                }
                let at: Vec<usize> = (0..axes.len().min(t.states.len()))
                    .filter(|&i| names.contains(&axes[i]))
                    .collect();
                if at.is_empty() {
                    return Err(format!("`{call}`: `{}` names no axis", a.trim()));
                }
                return Ok(at);
            }
        }
    }
    if t.states.is_empty() {
        return Err(format!("`{call}`: the input's type has no mesh axis"));
    }
    let some: Vec<usize> = (0..t.states.len())
        .filter(|&i| from.contains(&t.states[i]))
        .collect();
    Ok(if some.is_empty() {
        (0..t.states.len()).collect()
    } else {
        some
    })
}

/// A system's reading of a collective from its table: the rows with this
/// call's name (else of its catalogue family) from the input's state on the
/// acting axes; the output the unique row gives, its backward the row's.
pub fn collective_by_table(
    system: &'static System,
    call: &str,
    t: &Type,
    axes: &[String],
    want: Option<&Type>,
) -> Result<Reading, String> {
    let name = base_name(call);
    let rows = crate::tables::collective_rows();
    let one_axis = |r: &&crate::tables::CollectiveRow| {
        !r.src.contains('{') && !r.id.contains("legacy") && r.system == system.name
    };
    let states = |r: &crate::tables::CollectiveRow| -> Option<(State, State)> {
        Some((
            r.dialect.parse_state(&r.src).ok()?.0,
            r.dialect.parse_state(&r.dst).ok()?.0,
        ))
    };
    let from: Vec<State> = rows
        .iter()
        .filter(one_axis)
        .filter(|r| base_name(&r.forward) == name)
        .filter_map(|r| states(r).map(|s| s.0))
        .collect();
    let at = acting_axes(call, t, axes, &from)?;
    let src = t.states[at[0]];
    if at.iter().any(|&a| t.states[a] != src) {
        return Err(format!(
            "`{call}` acts on mesh axes in different states ({}); name one with axis=",
            system.type_name(t)
        ));
    }
    // A call's flags: positional arguments that are no state (`stack`).
    let flags = |c: &str| -> Vec<String> {
        call_args(c)
            .into_iter()
            .filter(|a| {
                !a.contains('=')
                    && system.dialect.parse_state(a).is_err()
                    && spmd_semantics::Dialect::Canonical.parse_state(a).is_err()
            })
            .collect()
    };
    let mine = flags(call);
    let mut found: Vec<(State, Option<String>)> = Vec::new();
    // Rows spelled with the call's own flags first, then the rest.
    for exact in [true, false] {
        for r in rows
            .iter()
            .filter(one_axis)
            .filter(|r| base_name(&r.forward) == name)
            .filter(|r| (flags(&r.forward) == mine) == exact)
        {
            if let Some((s, d)) = states(r) {
                if s == src && !found.iter().any(|(x, _)| *x == d) {
                    found.push((d, r.backward.clone()));
                }
            }
        }
    }
    // States written as the call's positional arguments name its
    // destination (`all_gather(R)`), or its source and destination
    // (`reinterpret(V, I)`), in the system's names or canonical letters.
    let written: Vec<State> = call_args(call)
        .iter()
        .filter(|a| !a.contains('='))
        .filter_map(|a| {
            system
                .dialect
                .parse_state(a)
                .or_else(|_| spmd_semantics::Dialect::Canonical.parse_state(a))
                .ok()
                .map(|x| x.0)
        })
        .collect();
    match written.as_slice() {
        [d] => found.retain(|(x, _)| x == d),
        [s, d] if *s == src => found.retain(|(x, _)| x == d),
        [s, _] => {
            return Err(format!(
                "`{call}` names its source {}, the input is {} there",
                system.state_name(*s),
                system.state_name(src)
            ))
        }
        _ => {}
    }
    // Then the output the author wrote picks between what is left.
    if found.len() > 1 {
        if let Some(w) = want.filter(|w| w.states.len() == t.states.len()) {
            found.retain(|(x, _)| *x == w.states[at[0]]);
        }
    }
    let (dst, bw) = match found.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(format!(
                "{}'s collective table has no `{name}` from {}",
                system.name,
                system.state_name(src)
            ))
        }
        many => {
            return Err(format!(
                "give `output`: `{call}` from {} may go to any of {} in {}'s table",
                system.state_name(src),
                many.iter()
                    .map(|(d, _)| system.state_name(*d))
                    .collect::<Vec<_>>()
                    .join(", "),
                system.name
            ))
        }
    };
    let mut out = t.clone();
    for &a in &at {
        out.states[a] = dst;
        if dst != State::Varying {
            out.layout[a] = None;
        }
    }
    let backward = bw.map(|b| with_params(&b, call));
    Ok(Reading {
        casts: vec![],
        call: Call {
            forward: call.to_string(),
            output: out,
            backward,
            name: name.to_string(),
        },
    })
}

/// A backward template with the call's own parameters filled in: `{d}`
/// from the call's dim, `{s}`/`{c}` from its split and concat (swapped: the
/// transpose of an all_to_all swaps them).
fn with_params(template: &str, call: &str) -> String {
    let get = |keys: &[&str]| -> Option<String> {
        call_args(call).into_iter().find_map(|a| {
            let (k, v) = a.split_once('=')?;
            keys.contains(&k.trim()).then(|| v.trim().to_string())
        })
    };
    let d = get(&["dim", "gather_dim", "scatter_dim", "scatter_dimension"]).unwrap_or("0".into());
    let s = get(&["split", "split_dim", "split_axis"]).unwrap_or("0".into());
    let c = get(&["concat", "concat_dim", "concat_axis"]).unwrap_or("1".into());
    template
        .replace("{d}", &d)
        .replace("{s}", &c)
        .replace("{c}", &s)
}
