//! Named patterns (SPEC.md §17.4): FSDP, ZeRO, DDP, Megatron, sequence
//! parallelism, MoE and FSDP × TP, each a rule file in `examples/patterns/`
//! holding the pattern (its first rule) and a deliberately wrong twin (its
//! second rule). Each is checked end to end by the oracle, costed forward
//! and backward, and retyped by every system (§15): its local steps by the
//! system's typing function (with the casts it inserts), its collectives by
//! the system's table rows with the system's own backwards.

use crate::check::rule_word;
use crate::check::{check_rule, CheckConfig};
use crate::generated::{build_spec, cast_spelling, step_rule, Origin, Typed};
use crate::rules::{build, compose, parse_file, to_toml, Rule, RuleSpec, StepSpec, TypeSpec};
use crate::run::UsageError;
use crate::words::verdict_json;
use rayon::prelude::*;
use serde_json::{json, Value};
use spmd_dialects::{OpClass, Outcome, System};
use spmd_generators::Scope;
use spmd_interp::{Expr, Op};
use spmd_oracle::{Property, Verdict};
use spmd_semantics::{Mesh, Shape, State, Type, Q};
use std::collections::BTreeMap;

/// One pattern file and the local input shapes its traffic is computed at.
pub struct PatternFile {
    pub file: &'static str,
    pub text: &'static str,
    pub shapes: &'static [&'static [usize]],
}

macro_rules! pattern {
    ($name:literal, $shapes:expr) => {
        PatternFile {
            file: concat!("examples/patterns/", $name),
            text: include_str!(concat!("../../examples/patterns/", $name)),
            shapes: $shapes,
        }
    };
}

/// The patterns. Traffic is per rank, on the rule's mesh or else 4 ranks on
/// one axis, at these local input shapes.
pub const PATTERNS: &[PatternFile] = &[
    pattern!("fsdp.toml", &[&[2, 8], &[2, 4]]),
    pattern!("zero.toml", &[&[2, 4], &[8, 4]]),
    pattern!("ddp.toml", &[&[2, 4], &[4, 4]]),
    pattern!("megatron.toml", &[&[8, 4], &[4, 2], &[2, 4]]),
    pattern!("sequence_parallel.toml", &[&[2, 4], &[4, 2], &[2, 4]]),
    pattern!("moe.toml", &[&[4, 4], &[1, 16]]),
    pattern!("fsdp_tp.toml", &[&[2, 4], &[2, 2], &[1, 4]]),
];

/// Random cases per program after the exhaustive part (the 2 × 2 mesh has
/// no exhaustive case within the caps).
pub const RANDOM_CASES: u32 = 64;

/// One checked program: its rule-file verdict and traffic.
#[derive(Clone, Debug)]
pub struct Checked {
    pub name: String,
    pub verdict: Verdict,
    /// `sound (proof)`, `sound (bounded: E exhaustive, R random)`, ...
    pub words: String,
    /// Elements sent per rank, forward and backward, or why not computed.
    pub traffic: Result<(Q, Q), String>,
}

/// What one system makes of a pattern.
#[derive(Clone, Debug)]
pub enum SystemOutcome {
    /// The system cannot type it: the first step it refuses, and why.
    CannotType(String),
    /// The program as the system types it, checked end to end.
    Typed {
        toml: String,
        /// Where the system's program differs from the pattern as written.
        notes: Vec<String>,
        verdict: Box<Verdict>,
        words: String,
        /// For an unsound program: the first step unsound alone, or
        /// "composition".
        blame: Option<String>,
    },
}

#[derive(Clone, Debug)]
pub struct SystemResult {
    pub system: &'static str,
    pub outcome: SystemOutcome,
}

/// One pattern, its twin, and every system's typing of it.
#[derive(Clone, Debug)]
pub struct PatternResult {
    pub file: &'static str,
    pub mesh: String,
    pub shapes: Vec<Shape>,
    pub pattern: Checked,
    pub twin: Checked,
    pub systems: Vec<SystemResult>,
}

impl PatternResult {
    /// The pattern is sound and its twin has a counterexample.
    pub fn as_expected(&self) -> bool {
        self.pattern.verdict.is_sound() && self.twin.verdict.violation().is_some()
    }
    /// The property the twin fails, if any.
    pub fn twin_property(&self) -> Option<Property> {
        self.twin.verdict.violation().map(|v| v.property)
    }
}

/// The scope patterns are checked in: three inputs share the grid, so the
/// points cap is raised as for the hand-written layers (SPEC.md §12.1).
fn pattern_scope(scope: &Scope) -> Scope {
    Scope {
        max_points: scope.max_points.max(2048),
        ..scope.clone()
    }
}

fn check_one(rule: &Rule, scope: &Scope, seed: u64) -> (Verdict, String) {
    let cfg = CheckConfig {
        scope: scope.clone(),
        cases: RANDOM_CASES,
        seed,
    };
    let rep = check_rule(rule, &cfg, &[], &|_| {});
    let w = rule_word(&rep);
    (rep.verdict, w)
}

fn reference_mesh(rule: &Rule, spec: &RuleSpec) -> Mesh {
    if spec.mesh.is_some() {
        rule.meshes[0].clone()
    } else {
        Mesh::line(4)
    }
}

fn traffic(rule: &Rule, m: &Mesh, shapes: &[Shape]) -> Result<(Q, Q), String> {
    match &rule.op.op {
        Op::Program(p) => p.cost(m, shapes),
        _ => Err("not a program".into()),
    }
}

/// Check every pattern (restricted to `systems`), in `scope`.
pub fn run(systems: &[&'static System], scope: &Scope) -> Result<Vec<PatternResult>, UsageError> {
    let scope = pattern_scope(scope);
    PATTERNS
        .par_iter()
        .map(|p| run_one(p, systems, &scope))
        .collect()
}

/// `run_one` in the scope `run` uses.
pub fn run_pattern(
    p: &PatternFile,
    systems: &[&'static System],
    scope: &Scope,
) -> Result<PatternResult, UsageError> {
    run_one(p, systems, &pattern_scope(scope))
}

/// One pattern file, checked in `scope` as given (`run` raises its points
/// cap first).
pub fn run_one(
    p: &PatternFile,
    systems: &[&'static System],
    scope: &Scope,
) -> Result<PatternResult, UsageError> {
    let specs = parse_file(p.file, p.text)?;
    if specs.len() != 2 {
        return Err(UsageError(format!(
            "{}: a pattern file holds the pattern and its wrong twin ({} rules)",
            p.file,
            specs.len()
        )));
    }
    let rules = build(p.file, p.text, &specs, scope)?;
    let m = reference_mesh(&rules[0], &specs[0]);
    let shapes: Vec<Shape> = p.shapes.iter().map(|s| s.to_vec()).collect();
    let checked: Vec<Checked> = rules
        .par_iter()
        .map(|r| {
            let (verdict, words) = check_one(r, scope, 0);
            Checked {
                name: r.name.clone(),
                verdict,
                words,
                traffic: traffic(r, &m, &shapes),
            }
        })
        .collect();
    let [pattern, twin]: [Checked; 2] = checked.try_into().expect("two rules");
    let results: Vec<SystemResult> = systems
        .par_iter()
        .map(|sys| SystemResult {
            system: sys.name,
            outcome: under(sys, &specs[0], &rules[0], scope),
        })
        .collect();
    Ok(PatternResult {
        file: p.file,
        mesh: m.to_string(),
        shapes,
        pattern,
        twin,
        systems: results,
    })
}

/// The op class of a step's expression when it is one op applied to
/// variables (`matmul(a, b)`, `a * a`, `2 * a`, ...).
pub fn class_of_expr(e: &Expr) -> Option<OpClass> {
    let var = |x: &Expr| matches!(x, Expr::Var(_));
    let konst = |x: &Expr| matches!(x, Expr::Const(_));
    Some(match e {
        Expr::Add(a, b) if var(a) && var(b) => OpClass::Add,
        Expr::Sub(a, b) if var(a) && var(b) => OpClass::Sub,
        Expr::Neg(a) if var(a) => OpClass::Neg,
        Expr::Mul(a, b) if (konst(a) && var(b)) || (var(a) && konst(b)) => OpClass::ScalarMul,
        Expr::Div(a, b) if var(a) && konst(b) => OpClass::ScalarMul,
        Expr::Mul(a, b) if var(a) && a == b => OpClass::Nonlinear,
        Expr::Mul(a, b) if var(a) && var(b) => OpClass::Mul,
        Expr::Pow(a, _) | Expr::Abs(a) | Expr::Relu(a) if var(a) => OpClass::Nonlinear,
        Expr::Einsum(s, xs) if xs.iter().all(var) => {
            if s.inputs == [vec!['i', 'j'], vec!['j', 'k']] && s.output == ['i', 'k'] {
                OpClass::Matmul
            } else {
                OpClass::Einsum
            }
        }
        Expr::Sum(a, _) if var(a) => OpClass::Sum,
        Expr::Mean(a, _) if var(a) => OpClass::Mean,
        Expr::Max(a, _) if var(a) => OpClass::Max,
        Expr::Reshape(a, _) | Expr::Slice(a, ..) | Expr::Take(a, ..) if var(a) => OpClass::View,
        _ => return None,
    })
}

/// `name(args)` with `axis=AXIS` added to every call of a composition.
fn with_axis(text: &str, axis: Option<&str>) -> String {
    let Some(a) = axis else {
        return text.to_string();
    };
    text.split("|>")
        .map(|part| {
            let part = part.trim();
            match part.strip_suffix(')') {
                Some(head) => format!("{head}, axis={a})"),
                None => format!("{part}(axis={a})"),
            }
        })
        .collect::<Vec<_>>()
        .join(" |> ")
}

/// Whether two collective ops do the same thing (names aside: JAX's
/// `all_gather_reduced` is seed 003's `all_gather(R)`).
fn same_op(a: &Op, b: &Op) -> bool {
    match (a, b) {
        (Op::Collective(x), Op::Collective(y)) => {
            x.kind == y.kind && x.axes == y.axes && x.src == y.src && x.dst == y.dst
        }
        (Op::Compose(xs), Op::Compose(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_op(x, y))
        }
        (Op::Compose(xs), y) | (y, Op::Compose(xs)) if xs.len() == 1 => same_op(&xs[0], y),
        _ => false,
    }
}

/// A row template filled with every small choice of parameters.
fn fills(t: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for d in 0..2 {
        for (s, c) in [(0, 1), (1, 0), (0, 0), (1, 1)] {
            let f = t
                .replace("{d}", &d.to_string())
                .replace("{s}", &s.to_string())
                .replace("{c}", &c.to_string());
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

fn type_spec(t: &Type, axes: &[String], named: bool) -> TypeSpec {
    if named {
        TypeSpec::Axes(
            axes.iter()
                .zip(&t.states)
                .map(|(a, s)| (a.clone(), s.letter().to_string()))
                .collect(),
        )
    } else {
        TypeSpec::One(t.states[0].letter().to_string())
    }
}

/// Replace whole identifiers in an expression's text.
fn rename(text: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |w: &mut String, out: &mut String| {
        out.push_str(if w == from { to } else { w });
        w.clear();
    };
    let mut in_str = false;
    for ch in text.chars() {
        if ch == '"' {
            in_str = !in_str;
        }
        if !in_str && (ch.is_ascii_alphanumeric() || ch == '_') {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

fn letters(ts: &[Type]) -> String {
    ts.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pattern retyped by `sys`, as a rule spec with each step's origin, or
/// the first step it cannot type.
pub fn retype(sys: &System, spec: &RuleSpec, rule: &Rule) -> Result<(Typed, Vec<String>), String> {
    let Op::Program(prog) = &rule.op.op else {
        return Err("not a program".into());
    };
    let m = &rule.meshes[0];
    let axes: Vec<String> = m.axes.iter().map(|a| a.name.clone()).collect();
    let named = spec.mesh.is_some();
    let mut vals: BTreeMap<String, Type> = spec
        .names
        .iter()
        .cloned()
        .zip(prog.inputs.iter().cloned())
        .collect();
    let mut steps: Vec<StepSpec> = vec![];
    let mut origins: Vec<Origin> = vec![];
    let mut notes: Vec<String> = vec![];
    // The rows generated programs use (SPEC.md §17.2).
    let rows = crate::generated::slot_rows(sys.name);
    for (j, st) in spec.step.iter().enumerate() {
        let want = &prog.steps[j].op;
        if let Some(e) = &st.expr {
            let f = spmd_interp::parse(e).map_err(|x| format!("step `{}`: {x:?}", st.name))?;
            let class = class_of_expr(&f.expr).ok_or_else(|| {
                format!(
                    "step `{}`: `{e}` is not one op of a class the typing functions take",
                    st.name
                )
            })?;
            let ins: Vec<Type> = f.vars.iter().map(|v| vals[v].clone()).collect();
            let per_axis: Vec<Vec<State>> = ins.iter().map(|t| t.states.clone()).collect();
            let (output, casts) = match (sys.typing)(class, &per_axis) {
                Outcome::Infers { output, casts } => (output, casts),
                Outcome::Error(x) => {
                    return Err(format!(
                        "step `{}`: {} on ({}): error: {x}",
                        st.name,
                        class.name(),
                        letters(&ins)
                    ))
                }
                Outcome::Unknown(x) => {
                    return Err(format!(
                        "step `{}`: {} on ({}): unknown: {x}",
                        st.name,
                        class.name(),
                        letters(&ins)
                    ))
                }
            };
            let mut text = e.clone();
            let mut eff = ins.clone();
            for c in &casts {
                let (fw, bw) = cast_spelling(sys, c.name, c.from, c.to).ok_or_else(|| {
                    format!(
                        "step `{}`: the inserted cast {} ({} -> {}) has no known spelling",
                        st.name,
                        c.name,
                        c.from.letter(),
                        c.to.letter()
                    )
                })?;
                let axis = named.then(|| axes[c.axis].as_str());
                let (fw, bw) = (with_axis(&fw, axis), with_axis(&bw, axis));
                let v = &f.vars[c.input];
                let mut to = eff[c.input].clone();
                to.states[c.axis] = c.to;
                let n = format!("{v}_{}", c.name);
                steps.push(StepSpec {
                    name: n.clone(),
                    expr: None,
                    forward: Some(fw.clone()),
                    input: Some(v.clone()),
                    backward: Some(bw.clone()),
                    output: type_spec(&to, &axes, named),
                });
                notes.push(format!("{} inserts {n} = {fw} on `{v}`", sys.name));
                origins.push(Origin::Cast {
                    name: c.name.to_string(),
                    forward: fw,
                    backward: bw,
                });
                vals.insert(n.clone(), to.clone());
                eff[c.input] = to;
                text = rename(&text, v, &n);
            }
            let out = Type::new(output);
            if out != want.output {
                notes.push(format!(
                    "{} types `{}` as {out}, the pattern as {}",
                    sys.name, st.name, want.output
                ));
            }
            steps.push(StepSpec {
                name: st.name.clone(),
                expr: Some(text),
                forward: None,
                input: None,
                backward: None,
                output: type_spec(&out, &axes, named),
            });
            origins.push(Origin::Typing {
                op: class.name(),
                ins: eff.iter().flat_map(|t| t.states.clone()).collect(),
                out: out.states[0],
            });
            vals.insert(st.name.clone(), out);
        } else {
            let v = st.input.clone().unwrap_or_default();
            let src = vals[&v].clone();
            if src != want.inputs[0] {
                return Err(format!(
                    "step `{}`: {} gives `{v}` the type {src}, the collective takes {}",
                    st.name, sys.name, want.inputs[0]
                ));
            }
            let (axis, one) = match &want.op {
                Op::Collective(c) if c.axes.len() == 1 => (
                    named.then(|| axes[c.axes[0]].as_str()),
                    Some((c.src, c.dst)),
                ),
                _ => (None, None),
            };
            let dst = want.output.clone();
            let found = one.and_then(|(s0, d0)| {
                rows.iter()
                    .filter(|(_, s, d)| *s == s0 && *d == d0)
                    .find_map(|(r, _, _)| {
                        fills(r.forward).into_iter().find_map(|fw| {
                            let fwa = with_axis(&fw, axis);
                            let op = compose(&fwa, &src, &dst, &axes).ok()?;
                            if !same_op(&op, &want.op) {
                                return None;
                            }
                            // The backward filled with the same parameters.
                            let bw = fills(r.backward.expect("has a backward"))
                                .into_iter()
                                .zip(fills(r.forward))
                                .find(|(_, f)| *f == fw)
                                .map(|(b, _)| with_axis(&b, axis))?;
                            Some((r, fwa, bw))
                        })
                    })
            });
            let Some((r, fw, bw)) = found else {
                return Err(format!(
                    "step `{}`: no row of {}'s table with a backward does `{}` ({} -> {})",
                    st.name,
                    sys.name,
                    st.forward.clone().unwrap_or_default(),
                    src,
                    dst
                ));
            };
            if Some(&bw) != st.backward.as_ref() || Some(&fw) != st.forward.as_ref() {
                notes.push(format!(
                    "{} spells `{}` as {fw}, backward {bw} (row {})",
                    sys.name, st.name, r.id
                ));
            }
            steps.push(StepSpec {
                name: st.name.clone(),
                expr: None,
                forward: Some(fw),
                input: Some(v),
                backward: Some(bw),
                output: type_spec(&dst, &axes, named),
            });
            origins.push(Origin::Row(r.id));
            vals.insert(st.name.clone(), dst);
        }
    }
    let last = steps.last().expect("a step").output.clone();
    let out_spec = RuleSpec {
        name: format!("{} as {} types it", spec.name, sys.name),
        names: spec.names.clone(),
        inputs: spec.inputs.clone(),
        output: last,
        mesh: spec.mesh.clone(),
        step: steps,
        ..RuleSpec::default()
    };
    Ok((
        Typed {
            spec: out_spec,
            origins,
        },
        notes,
    ))
}

fn under(sys: &System, spec: &RuleSpec, rule: &Rule, scope: &Scope) -> SystemOutcome {
    let (t, notes) = match retype(sys, spec, rule) {
        Ok(x) => x,
        Err(e) => return SystemOutcome::CannotType(e),
    };
    let built = match build_spec(&t.spec, scope) {
        Ok(r) => r,
        Err(e) => return SystemOutcome::CannotType(format!("its program does not build: {e}")),
    };
    let (verdict, words) = check_one(&built, scope, 0);
    let blame = verdict.violation().map(|_| blame(&t, scope));
    SystemOutcome::Typed {
        toml: to_toml(&t.spec),
        notes,
        verdict: Box::new(verdict),
        words,
        blame,
    }
}

/// The first step of a typed pattern unsound alone, or "composition".
fn blame(t: &Typed, scope: &Scope) -> String {
    for k in 0..t.spec.step.len() {
        let spec = step_rule(t, k);
        let spec = RuleSpec {
            mesh: t.spec.mesh.clone(),
            ..spec
        };
        if let Ok(rule) = build_spec(&spec, scope) {
            let (v, _) = check_one(&rule, scope, 0);
            if let Some(x) = v.violation() {
                return format!(
                    "step `{}` ({}) is unsound alone: {}",
                    t.spec.step[k].name,
                    t.origins[k].describe(),
                    x.one_line()
                );
            }
        }
    }
    "composition: every step is sound alone".into()
}

fn traffic_text(t: &Result<(Q, Q), String>) -> String {
    match t {
        Ok((f, b)) => format!("forward {f}, backward {b}"),
        Err(e) => format!("not computed ({e})"),
    }
}

fn traffic_json(t: &Result<(Q, Q), String>) -> Value {
    match t {
        Ok((f, b)) => json!({"forward": f.to_string(), "backward": b.to_string()}),
        Err(e) => json!({"error": e}),
    }
}

fn checked_json(c: &Checked) -> Value {
    json!({
        "name": c.name,
        "verdict": verdict_json(&c.verdict),
        "words": c.words,
        "traffic": traffic_json(&c.traffic),
    })
}

pub fn json(results: &[PatternResult]) -> Value {
    Value::Array(
        results
            .iter()
            .map(|r| {
                json!({
                    "file": r.file,
                    "traffic_mesh": r.mesh,
                    "traffic_shapes": r.shapes,
                    "pattern": checked_json(&r.pattern),
                    "twin": checked_json(&r.twin),
                    "twin_fails": r.twin_property().map(|p| p.code()),
                    "as_expected": r.as_expected(),
                    "systems": r.systems.iter().map(|s| match &s.outcome {
                        SystemOutcome::CannotType(e) => json!({"system": s.system, "typed": false, "reason": e}),
                        SystemOutcome::Typed { toml, notes, verdict, words, blame } => json!({
                            "system": s.system,
                            "typed": true,
                            "notes": notes,
                            "verdict": verdict_json(verdict),
                            "words": words,
                            "blame": blame,
                            "rule": toml,
                        }),
                    }).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

pub fn text(results: &[PatternResult]) -> String {
    let mut s = String::from("named patterns (SPEC.md §17.4):\n");
    for r in results {
        let shapes = r
            .shapes
            .iter()
            .map(|x| format!("{x:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        s += &format!(
            "\n{} ({})\n  pattern: {}\n    traffic per rank on {} at local shapes {}: {}\n",
            r.pattern.name,
            r.file,
            r.pattern.words,
            r.mesh,
            shapes,
            traffic_text(&r.pattern.traffic)
        );
        if let Some(v) = r.pattern.verdict.violation() {
            s += &format!("    counterexample: {}\n", v.one_line());
        }
        s += &format!(
            "  twin \"{}\": {}\n",
            r.twin.name,
            if r.twin.verdict.violation().is_some() {
                r.twin.words.clone()
            } else {
                format!(
                    "{} (NOT REJECTED: the checker missed a wrong twin)",
                    r.twin.words
                )
            }
        );
        if let Some(v) = r.twin.verdict.violation() {
            s += &format!("    counterexample: {}\n", v.one_line());
        }
        s += &format!("    traffic: {}\n", traffic_text(&r.twin.traffic));
        for sys in &r.systems {
            match &sys.outcome {
                SystemOutcome::CannotType(e) => {
                    s += &format!("  {:<11} cannot type it: {e}\n", sys.system)
                }
                SystemOutcome::Typed {
                    notes,
                    words,
                    blame,
                    toml,
                    ..
                } => {
                    s += &format!("  {:<11} types it: {words}\n", sys.system);
                    for n in notes {
                        s += &format!("              {n}\n");
                    }
                    if let Some(b) = blame {
                        s += &format!("              blame: {b}\n");
                        for l in toml.lines() {
                            s += &format!("              | {l}\n");
                        }
                    }
                }
            }
        }
    }
    let bad = results.iter().filter(|r| !r.as_expected()).count();
    s += &format!(
        "\n{} patterns: {} sound with their twin rejected, {} not\n",
        results.len(),
        results.len() - bad,
        bad
    );
    s
}
