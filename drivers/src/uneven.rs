//! Rules on uneven shards (SPEC.md §23.10): read from rule files whose
//! types name a split rule, elaborated by their system, checked by the
//! oracle's uneven checks on the cases the generators build, reported.

use serde_json::{json, Value};
use spmd_dialects::uneven::{show, Elaborated};
use spmd_interp::eval::{eval, infer, Ctx, EvalError};
use spmd_interp::LocalFn;
use spmd_oracle::uneven::{check_op, check_step, Failure, Tally};
use spmd_semantics::uneven::Placement;
use spmd_semantics::{Dialect, Tensor};
use std::sync::Arc;

/// The most cases one rule runs.
pub const MAX_CASES: usize = 4000;
/// The most value combinations per case of a local op.
pub const MAX_VALUES: u64 = 400;
/// The axis sizes tried when the rule does not write its mesh.
pub const RANKS: [usize; 3] = [2, 3, 4];

/// What an uneven rule runs.
#[derive(Clone)]
pub enum What {
    /// A collective, as its system elaborated it.
    Step(Arc<Elaborated>),
    /// A local op on every rank.
    Op(LocalFn),
}

/// A rule on uneven shards, on one mesh axis.
#[derive(Clone)]
pub struct UnevenRule {
    pub axis: String,
    /// The axis size when the rule's mesh fixes it.
    pub ranks: Option<usize>,
    pub inputs: Vec<Placement>,
    pub output: Placement,
    pub what: What,
    /// For a local op, whether the system runs the written typing on a
    /// case (axis size, global shapes): `Err` says what it does instead,
    /// and the case counts as refused (DTensor's `allow_uneven_sharding`,
    /// SPEC.md §23.16).
    pub guard: Option<Guard>,
    /// Placements over several mesh axes (SPEC.md §23.20): then `axis`,
    /// `ranks`, `inputs` and `output` are the innermost axis's.
    pub nest: Option<Arc<NestSpec>>,
}

/// A rule's nested placements: its mesh axes (mesh dim 0 first) and its
/// input and output over them.
#[derive(Clone, Debug)]
pub struct NestSpec {
    pub axes: Vec<(String, usize)>,
    pub input: spmd_semantics::uneven::Nested,
    pub output: spmd_semantics::uneven::Nested,
}

impl NestSpec {
    /// `2x2`.
    pub fn mesh_text(&self) -> String {
        self.axes
            .iter()
            .map(|a| a.1.to_string())
            .collect::<Vec<_>>()
            .join("x")
    }
}

/// A nested layout in a dialect's names: `[Shard(0, chunk), Replicate()]`.
pub fn show_nested(d: Dialect, p: &spmd_semantics::uneven::Nested) -> String {
    format!(
        "[{}]",
        p.axes
            .iter()
            .map(|(_, q)| show(d, q))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// See [`UnevenRule::guard`].
pub type Guard = Arc<
    dyn Fn(usize, &[Vec<usize>]) -> Result<(), String> + Send + Sync + std::panic::RefUnwindSafe,
>;

impl std::fmt::Debug for UnevenRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UnevenRule({:?} -> {} on {})",
            self.inputs
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>(),
            self.output,
            self.axis
        )
    }
}

/// The verdict of an uneven rule.
#[derive(Clone, Debug)]
pub struct UnevenReport {
    pub rule: UnevenRule,
    pub dialect: Dialect,
    pub tally: Tally,
    pub failure: Option<Box<Failure>>,
    /// The axis sizes the cases ran on.
    pub ranks: Vec<usize>,
}

impl UnevenRule {
    /// The axis sizes checked: the rule's mesh, or the number of sizes a
    /// `sizes=[...]` split names, or 2 to 4.
    fn ns(&self) -> Vec<usize> {
        let written = self
            .inputs
            .iter()
            .chain([&self.output])
            .find_map(|p| match p {
                Placement::Shard(_, spmd_semantics::uneven::Split::Sizes(s)) => Some(s.len()),
                _ => None,
            });
        match (self.ranks, written) {
            (Some(n), _) => vec![n],
            (None, Some(n)) => vec![n],
            (None, None) => RANKS.to_vec(),
        }
    }
    /// The input's type in the dialect's names (nested where it is).
    pub fn input_text(&self, d: Dialect, i: usize) -> String {
        match &self.nest {
            Some(n) => show_nested(d, &n.input),
            None => show(d, &self.inputs[i]),
        }
    }
    /// The output's type in the dialect's names.
    pub fn output_text(&self, d: Dialect) -> String {
        match &self.nest {
            Some(n) => show_nested(d, &n.output),
            None => show(d, &self.output),
        }
    }
    /// The input's cotangent type.
    pub fn input_cot_text(&self, d: Dialect) -> String {
        use spmd_semantics::uneven::Placed;
        match &self.nest {
            Some(n) => show_nested(d, &n.input.cot()),
            None => show(d, &self.inputs[0].cot()),
        }
    }
    /// The output's cotangent type.
    pub fn output_cot_text(&self, d: Dialect) -> String {
        use spmd_semantics::uneven::Placed;
        match &self.nest {
            Some(n) => show_nested(d, &n.output.cot()),
            None => show(d, &self.output.cot()),
        }
    }
    /// Whether a backward is checked.
    pub fn has_backward(&self) -> bool {
        matches!(&self.what, What::Step(e) if e.backward.is_some())
    }
}

fn eval_fn(f: &LocalFn) -> impl Fn(&[Tensor]) -> Result<Tensor, String> + '_ {
    move |xs| {
        // Shapes first: the evaluator runs only on shapes inference took.
        let shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape.clone()).collect();
        infer(&f.expr, &shapes)?;
        eval(&f.expr, xs, &mut Ctx::default()).map_err(|e| match e {
            EvalError::DivByZero => "division by zero".to_string(),
            EvalError::Shape(s) => s,
        })
    }
}

/// Runs the rule's checks on every case (SPEC.md §23.10).
pub fn check(rule: &UnevenRule, dialect: Dialect) -> UnevenReport {
    check_through(rule, dialect, &[])
}

/// `check`, a step's cases also fitting the placements `via` (a chain's
/// intermediate ones, SPEC.md §23.15).
pub fn check_through(rule: &UnevenRule, dialect: Dialect, via: &[Placement]) -> UnevenReport {
    if let Some(nest) = &rule.nest {
        return check_nested(rule, nest, dialect);
    }
    let ns = rule.ns();
    let mut tally = Tally::default();
    let mut failure = None;
    match &rule.what {
        What::Step(e) => {
            let mut group = vec![&rule.inputs[0], &rule.output];
            group.extend(via);
            let groups = vec![group];
            let cases = spmd_generators::uneven::cases(&groups, &ns, 2, MAX_CASES, &|_| true);
            for c in cases {
                if crate::run::stop_reason().is_some() {
                    break;
                }
                if let Err(f) = check_step(
                    &rule.inputs[0],
                    &rule.output,
                    &*e.forward,
                    e.backward
                        .as_ref()
                        .map(|b| &**b as &spmd_oracle::uneven::Impl),
                    c.n,
                    &c.shapes[0],
                    &mut tally,
                ) {
                    failure = Some(f);
                    break;
                }
            }
        }
        What::Op(f) => {
            let run = eval_fn(f);
            let fits = |shapes: &[Vec<usize>]| infer(&f.expr, shapes).is_ok();
            let groups: Vec<Vec<&Placement>> = rule.inputs.iter().map(|p| vec![p]).collect();
            let cases = spmd_generators::uneven::cases(&groups, &ns, 2, MAX_CASES, &fits);
            for c in cases {
                if crate::run::stop_reason().is_some() {
                    break;
                }
                if let Some(Err(why)) = rule.guard.as_ref().map(|g| g(c.n, &c.shapes)) {
                    tally.refused += 1;
                    tally.first_refusal.get_or_insert(why);
                    continue;
                }
                if let Err(x) = check_op(
                    &rule.inputs,
                    &rule.output,
                    &run,
                    c.n,
                    &c.shapes,
                    MAX_VALUES,
                    &mut tally,
                ) {
                    failure = Some(x);
                    break;
                }
            }
        }
    }
    UnevenReport {
        rule: rule.clone(),
        dialect,
        tally,
        failure,
        ranks: ns,
    }
}

/// The global shapes a nested step is checked on: every tensor dim a
/// placement shards takes every length 0 to N + 1 (N the ranks), the
/// others length 1.
fn nested_shapes(nest: &NestSpec) -> Vec<Vec<usize>> {
    let n: usize = nest.axes.iter().map(|a| a.1).product();
    let sharded: Vec<usize> = nest
        .input
        .axes
        .iter()
        .chain(&nest.output.axes)
        .filter_map(|(_, p)| match p {
            Placement::Shard(d, _) => Some(*d),
            _ => None,
        })
        .collect();
    let rank = sharded.iter().max().map_or(1, |d| d + 1);
    let mut shapes: Vec<Vec<usize>> = vec![vec![]];
    for dim in 0..rank {
        let lens: Vec<usize> = if sharded.contains(&dim) {
            (0..=n + 1).collect()
        } else {
            vec![1]
        };
        shapes = shapes
            .into_iter()
            .flat_map(|s| {
                lens.iter().map(move |&l| {
                    let mut t = s.clone();
                    t.push(l);
                    t
                })
            })
            .collect();
    }
    shapes.truncate(MAX_CASES);
    shapes
}

/// A nested step's checks (SPEC.md §23.20): F1 and B3 on the nested
/// placements, for every shape of [`nested_shapes`].
fn check_nested(rule: &UnevenRule, nest: &NestSpec, dialect: Dialect) -> UnevenReport {
    let n: usize = nest.axes.iter().map(|a| a.1).product();
    let mut tally = Tally::default();
    let mut failure = None;
    if let What::Step(e) = &rule.what {
        for shape in nested_shapes(nest) {
            if crate::run::stop_reason().is_some() {
                break;
            }
            if let Err(f) = check_step(
                &nest.input,
                &nest.output,
                &*e.forward,
                e.backward
                    .as_ref()
                    .map(|b| &**b as &spmd_oracle::uneven::Impl),
                n,
                &shape,
                &mut tally,
            ) {
                failure = Some(f);
                break;
            }
        }
    }
    UnevenReport {
        rule: rule.clone(),
        dialect,
        tally,
        failure,
        ranks: vec![n],
    }
}

fn ranks(ts: &[Tensor]) -> String {
    ts.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

impl UnevenReport {
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }
    /// No case with pieces of different lengths ran: `check` exits 3.
    pub fn inconclusive(&self) -> bool {
        !self.failed() && self.tally.uneven_cases == 0
    }
    fn ranks_text(&self) -> String {
        if let Some(n) = &self.rule.nest {
            return format!("a {} mesh", n.mesh_text());
        }
        match self.ranks.as_slice() {
            [n] => format!("{n} ranks"),
            ns => format!(
                "{} to {} ranks",
                ns.first().copied().unwrap_or(0),
                ns.last().copied().unwrap_or(0)
            ),
        }
    }
    fn refusals(&self) -> String {
        match (&self.tally.first_refusal, self.tally.refused) {
            (Some(why), k) => format!("; {k} cases refused by the system (first: {why})"),
            _ => String::new(),
        }
    }
    /// The verdict in words: what was checked.
    pub fn word(&self) -> String {
        let t = &self.tally;
        let step = matches!(self.rule.what, What::Step(_));
        if let Some(f) = &self.failure {
            return format!(
                "unsound {} on uneven shards (SPEC.md §23.10, {} ranks)",
                f.property(),
                f.ranks()
            );
        }
        if t.uneven_cases == 0 {
            return format!(
                "vacuous (no case with pieces of different lengths ran on {}{})",
                self.ranks_text(),
                self.refusals()
            );
        }
        let backward = match (&self.rule.what, self.rule.has_backward()) {
            (_, true) => String::new(),
            (What::Step(_), false) => "; backward not checked (none declared or picked)".into(),
            (What::Op(_), false) => "; backward not checked (local ops on uneven shards are checked forward, SPEC.md §23.10)".into(),
        };
        format!(
            "{}sound (bounded: {} cases on {}, {} of them uneven, {} instances{}{}){backward}",
            if self.rule.has_backward() {
                ""
            } else {
                "forward "
            },
            t.cases,
            self.ranks_text(),
            t.uneven_cases,
            t.instances,
            if step {
                "; each case decided on a basis (the step is linear)"
            } else {
                "; a basis value or a ramp per input"
            },
            self.refusals()
        )
    }
    /// The counterexample, one line per value.
    pub fn report(&self) -> String {
        let d = self.dialect;
        let r = &self.rule;
        let Some(f) = &self.failure else {
            return String::new();
        };
        let mut s = format!(
            "violates {} (SPEC.md §23.10) on {}\n",
            f.property(),
            match &r.nest {
                Some(n) => format!("a {} mesh ({} ranks)", n.mesh_text(), f.ranks()),
                None => format!("{} ranks of axis `{}`", f.ranks(), r.axis),
            }
        );
        match &**f {
            Failure::F1 {
                inputs,
                outputs,
                expected,
                denoted,
                note,
                ..
            } => {
                for (i, x) in inputs.iter().enumerate() {
                    s.push_str(&format!(
                        "  input {i} : {}   per rank {}\n",
                        r.input_text(d, i),
                        ranks(x)
                    ));
                }
                if let Some(n) = note {
                    s.push_str(&format!("  the per-rank op raised: {n}\n"));
                }
                s.push_str(&format!(
                    "  output : {}   per rank {}   denotes {}\n  expected: {expected}\n",
                    r.output_text(d),
                    ranks(outputs),
                    denoted
                        .as_ref()
                        .map_or("nothing (not well formed)".into(), |t| t.to_string()),
                ));
            }
            Failure::B3 {
                tangent,
                cotangent,
                backward,
                forward_side,
                backward_side,
                ..
            } => {
                s.push_str(&format!(
                    "  tangent   : {}   per rank {}\n  cotangent : {}   per rank {}\n  backward  : {}   per rank {}\n  <F dx, g> = {forward_side}, <dx, B g> = {}\n",
                    r.input_text(d, 0),
                    ranks(tangent),
                    r.output_cot_text(d),
                    ranks(cotangent),
                    r.input_cot_text(d),
                    ranks(backward),
                    backward_side.as_ref().map_or("nothing (B g is not well formed)".into(), |q| q.to_string())
                ));
            }
            Failure::BackwardRaised {
                cotangent, message, ..
            } => {
                s.push_str(&format!(
                    "  cotangent : {}   per rank {}\n  the backward raised: {message}\n",
                    r.output_cot_text(d),
                    ranks(cotangent)
                ));
            }
        }
        s
    }
    /// The counterexample as the core's violation, for callers that read
    /// only `RuleReport::verdict`: inputs (and for B3 the cotangent and
    /// the backward's result) typed by their placements.
    pub fn violation(&self) -> Option<spmd_oracle::check::Violation> {
        use spmd_oracle::check::{Shown, Violation};
        use spmd_semantics::{Mesh, PerRank, Property, State, Type};
        let f = self.failure.as_ref()?;
        let ty = |p: &Placement| match p {
            Placement::Inv => Type::one(State::Invariant),
            Placement::Red => Type::one(State::Reduced),
            Placement::Part => Type::one(State::Partial),
            Placement::Shard(d, _) => Type::laid(vec![State::Varying], vec![Some(*d)]),
        };
        let nty = |n: &spmd_semantics::uneven::Nested| {
            let (states, dims): (Vec<State>, Vec<Option<usize>>) = n
                .axes
                .iter()
                .map(|(_, p)| match p {
                    Placement::Inv => (State::Invariant, None),
                    Placement::Red => (State::Reduced, None),
                    Placement::Part => (State::Partial, None),
                    Placement::Shard(d, _) => (State::Varying, Some(*d)),
                })
                .unzip();
            Type::laid(states, dims)
        };
        let shown = |label: String, input: bool, ty: Type, ts: &[Tensor]| Shown {
            label,
            input,
            alternative: false,
            ty,
            value: PerRank {
                tensors: ts.to_vec(),
            },
        };
        let r = &self.rule;
        let d = self.dialect;
        use spmd_semantics::uneven::Placed;
        let t_in = |i: usize| match &r.nest {
            Some(n) => nty(&n.input),
            None => ty(&r.inputs[i]),
        };
        let t_out = || match &r.nest {
            Some(n) => nty(&n.output),
            None => ty(&r.output),
        };
        let t_in_cot = || match &r.nest {
            Some(n) => nty(&n.input.cot()),
            None => ty(&r.inputs[0].cot()),
        };
        let t_out_cot = || match &r.nest {
            Some(n) => nty(&n.output.cot()),
            None => ty(&r.output.cot()),
        };
        let (property, values, expected, actual) = match &**f {
            Failure::F1 {
                inputs,
                outputs,
                expected,
                denoted,
                ..
            } => {
                let mut v: Vec<Shown> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, x)| shown(format!("x{i} : {}", r.input_text(d, i)), true, t_in(i), x))
                    .collect();
                v.push(shown(
                    format!("output : {}", r.output_text(d)),
                    false,
                    t_out(),
                    outputs,
                ));
                (
                    Property::F1,
                    v,
                    expected.to_string(),
                    denoted
                        .as_ref()
                        .map_or("no value (not well formed)".into(), |t| t.to_string()),
                )
            }
            Failure::B3 {
                tangent,
                cotangent,
                backward,
                forward_side,
                backward_side,
                ..
            } => (
                Property::B3,
                vec![
                    shown(
                        format!("dx : {}", r.input_text(d, 0)),
                        true,
                        t_in(0),
                        tangent,
                    ),
                    shown(
                        format!("g : {}", r.output_cot_text(d)),
                        false,
                        t_out_cot(),
                        cotangent,
                    ),
                    shown(
                        format!("B g : {}", r.input_cot_text(d)),
                        false,
                        t_in_cot(),
                        backward,
                    ),
                ],
                format!("<F dx, g> = {forward_side}"),
                backward_side
                    .as_ref()
                    .map_or("B g is not well formed".into(), |q| {
                        format!("<dx, B g> = {q}")
                    }),
            ),
            Failure::BackwardRaised {
                cotangent, message, ..
            } => (
                Property::B3,
                vec![shown(
                    format!("g : {}", r.output_cot_text(d)),
                    false,
                    t_out_cot(),
                    cotangent,
                )],
                "a cotangent of the input".into(),
                format!("the backward raised: {message}"),
            ),
        };
        Some(Violation {
            property,
            mesh: match &r.nest {
                Some(n) => Mesh::new(
                    &n.axes
                        .iter()
                        .map(|(a, k)| (a.as_str(), *k))
                        .collect::<Vec<_>>(),
                ),
                None => Mesh::new(&[(r.axis.as_str(), f.ranks())]),
            },
            what: self.word(),
            shown: values,
            expected,
            actual,
        })
    }
    /// The `--json` entry (without name and file).
    pub fn json(&self) -> Value {
        let t = &self.tally;
        let d = self.dialect;
        let verdict = if self.failed() {
            "unsound"
        } else if self.inconclusive() {
            "vacuous"
        } else {
            "sound"
        };
        let (steps, fwd_text, bwd_text) = match &self.rule.what {
            What::Step(e) => (
                e.notes.clone(),
                Some(e.forward_text.clone()),
                e.backward_text.clone(),
            ),
            What::Op(f) => (vec![], Some(f.text.clone()), None),
        };
        json!({
            "verdict": verdict,
            "proof": false,
            "property": self.failure.as_ref().map(|f| f.property()),
            "uneven": {
                "axis": self.rule.axis,
                "ranks": self.ranks,
                "inputs": (0..self.rule.inputs.len()).map(|i| self.rule.input_text(d, i)).collect::<Vec<_>>(),
                "output": self.rule.output_text(d),
                "mesh": self.rule.nest.as_ref().map(|n| n.axes.iter().map(|(a, k)| (a.clone(), json!(k))).collect::<serde_json::Map<_, _>>()),
                "forward": fwd_text,
                "backward": bwd_text,
                "elaboration": steps,
            },
            "cases": t.cases,
            "uneven_cases": t.uneven_cases,
            "instances": t.instances,
            "random_cases": 0,
            "random_note": Value::Null,
            "replayed": false,
            "reason": if self.inconclusive() { t.first_refusal.clone() } else { None },
            "refused": t.refused,
            "first_refusal": t.first_refusal,
            "backward_checked": self.rule.has_backward(),
            "counterexample": match &self.failure {
                Some(f) => json!({
                    "uneven": true,
                    "ranks": f.ranks(),
                    "axis": self.rule.axis,
                    "line": failure_line(f),
                    "report": self.report(),
                }),
                None => Value::Null,
            },
            "summary": self.word(),
        })
    }
}

/// A counterexample in one line.
pub fn failure_line(f: &Failure) -> String {
    let ranks = |ts: &[Tensor]| {
        ts.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    match f {
        Failure::F1 {
            inputs,
            outputs,
            expected,
            denoted,
            note,
            ..
        } => format!(
            "inputs {} give per rank {} denoting {}, expected {expected}{}",
            inputs
                .iter()
                .map(|x| format!("[{}]", ranks(x)))
                .collect::<Vec<_>>()
                .join(", "),
            ranks(outputs),
            denoted.as_ref().map_or("nothing".into(), |t| t.to_string()),
            note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
        ),
        Failure::B3 {
            tangent,
            cotangent,
            forward_side,
            backward_side,
            ..
        } => format!(
            "tangent {} and cotangent {}: <F dx, g> = {forward_side}, <dx, B g> = {}",
            ranks(tangent),
            ranks(cotangent),
            backward_side
                .as_ref()
                .map_or("nothing (not well formed)".into(), |q| q.to_string())
        ),
        Failure::BackwardRaised {
            cotangent, message, ..
        } => {
            format!("the backward raised on {}: {message}", ranks(cotangent))
        }
    }
}

// ---------------------------------------------------------------------------
// `conform`'s uneven section (SPEC.md §23.12): every system's rules on
// uneven shards and their twins, each verdict computed and compared with
// the one pinned here.

/// The rules of the section.
pub const CONFORM_TOML: &str = include_str!("../../examples/uneven.toml");

/// Per rule of `CONFORM_TOML`, the verdict pinned for it: `sound`,
/// `unsound F1`, `unsound B3` or `vacuous` (every uneven case refused by
/// the system). A twin's name starts with `twin:`.
pub const PINNED: &[(&str, &str)] = &[
    (
        "dtensor: redistribute Shard(0) -> Replicate() on torch.chunk's pieces",
        "sound",
    ),
    (
        "twin: the same pad-and-unpad on pieces split first-ranks-longer",
        "unsound F1",
    ),
    ("dtensor: redistribute Partial() -> Shard(0)", "sound"),
    (
        "spmd_types: all_gather(split_sizes) S(0) -> R, backward reduce_scatter(split_sizes)",
        "sound",
    ),
    (
        "twin: a backward that scatters by torch.chunk instead of the split sizes",
        "unsound B3",
    ),
    (
        "nabla: all_gather of ceil-divided shards, backward reshard",
        "sound",
    ),
    ("nabla: reduce_scatter onto ceil-divided shards", "vacuous"),
    ("jax: all_gather of uneven pieces", "vacuous"),
    ("mul of two chunk shards", "sound"),
    (
        "twin: mul of a chunk shard and a divmod shard of the same rows",
        "unsound F1",
    ),
    (
        "matmul contracting uneven shards gives a pending sum",
        "sound",
    ),
    (
        "spmd_types: all_gather(split_sizes) S(0) -> I, backward keeps the rank's piece",
        "sound",
    ),
    (
        "spmd_types: reduce_scatter(split_sizes) P -> S(0), backward all_gather",
        "sound",
    ),
    (
        "twin: reduce_scatter cutting by torch.chunk into pieces typed first-ranks-longer",
        "unsound F1",
    ),
    (
        "all_to_all from rows to columns, both by torch.chunk",
        "sound",
    ),
    (
        "twin: all_to_all whose backward cuts rows first-ranks-longer",
        "unsound B3",
    ),
    ("nabla: all_to_all onto ceil-divided shards", "sound"),
    (
        "dtensor: redistribute Replicate() -> Shard(0), backward the padded gather",
        "sound",
    ),
    (
        "twin: scatter by first-ranks-longer into pieces typed torch.chunk",
        "unsound F1",
    ),
    (
        "dtensor: mm of Shard(0) rows by a Replicate() weight, where DTensor keeps the strategy",
        "sound",
    ),
    (
        "dtensor: mul of Shard(0) pieces (allow_uneven_sharding=True)",
        "sound",
    ),
    (
        "dtensor: redistribute [Shard(0), Shard(0)] -> [Replicate(), Replicate()] on 2x2",
        "sound",
    ),
    (
        "dtensor: redistribute [Shard(0), Shard(0)] -> [Replicate(), Shard(0)] (the nested shard undone first)",
        "sound",
    ),
    (
        "dtensor: redistribute [Shard(0), Shard(1)] -> [Shard(1), Shard(0)] on 2x3",
        "sound",
    ),
    (
        "twin: one flattened all_gather of [Shard(0), Shard(0)] (the class of pytorch PR #194457)",
        "unsound F1",
    ),
];

/// A report's verdict as `PINNED` writes it.
pub fn key(r: &UnevenReport) -> String {
    match &r.failure {
        Some(f) => format!("unsound {}", f.property()),
        None if r.inconclusive() => "vacuous".into(),
        None => "sound".into(),
    }
}

/// One row of the section.
/// One rule of the section, checked.
pub type ConformRow = crate::pinned::Row<UnevenReport>;

impl crate::pinned::Verdicted for UnevenReport {
    fn failed(&self) -> bool {
        UnevenReport::failed(self)
    }
    fn inconclusive(&self) -> bool {
        UnevenReport::inconclusive(self)
    }
    fn report(&self) -> String {
        UnevenReport::report(self)
    }
    fn key(&self) -> String {
        key(self)
    }
    fn word(&self) -> String {
        UnevenReport::word(self)
    }
    fn json(&self) -> Value {
        UnevenReport::json(self)
    }
    fn line(&self) -> Option<String> {
        self.violation().map(|x| x.one_line())
    }
}

/// Checks every rule of the section whose system is `dialect` (all when
/// `None`; rules written without a dialect go with spmd_types').
pub fn conform_rows(dialect: Option<&str>) -> Result<Vec<ConformRow>, crate::run::UsageError> {
    crate::pinned::rows("examples/uneven.toml", CONFORM_TOML, dialect, PINNED, |r| {
        Some(check(r.uneven.as_ref()?, r.dialect))
    })
}

/// `conform`'s uneven section.
pub type Section = crate::pinned::Section<UnevenReport>;

/// The section as text and JSON, and whether every verdict is as pinned.
pub fn conform_section(dialect: Option<&str>) -> Result<Section, crate::run::UsageError> {
    let rows = conform_rows(dialect)?;
    Ok(crate::pinned::section(
        "uneven shards (SPEC.md §23.12, examples/uneven.toml):",
        rows,
        |rows| {
            format!(
                "{} twins, {} refused by their system on every uneven case",
                rows.iter().filter(|r| r.twin()).count(),
                rows.iter().filter(|r| key(&r.report) == "vacuous").count()
            )
        },
    ))
}

// ---------------------------------------------------------------------------
// `derive OP --uneven RULE` (SPEC.md §23.14): every one-axis typing of a
// local op whose shards are split by one rule, checked forward on uneven
// cases.

/// One derived typing on uneven shards.
pub struct Derived {
    pub inputs: Vec<Placement>,
    pub output: Placement,
    pub report: UnevenReport,
}

impl Derived {
    /// `S(0, chunk), R -> S(0, chunk)`, as the canonical dialect writes it.
    pub fn signature(&self) -> String {
        let d = Dialect::Canonical;
        format!(
            "{} -> {}",
            self.inputs
                .iter()
                .map(|p| show(d, p))
                .collect::<Vec<_>>()
                .join(", "),
            show(d, &self.output)
        )
    }
}

/// The placements a derived typing ranges over: I, R, P and a shard of
/// dim 0 and of dim 1 split by `split`.
pub fn derive_places(split: &spmd_semantics::uneven::Split) -> Vec<Placement> {
    vec![
        Placement::Inv,
        Placement::Red,
        Placement::Part,
        Placement::Shard(0, split.clone()),
        Placement::Shard(1, split.clone()),
    ]
}

/// Every typing of `f` over [`derive_places`] with a shard somewhere, checked as a rule with that
/// typing is (SPEC.md §23.10), in parallel.
pub fn derive(
    f: &LocalFn,
    split: &spmd_semantics::uneven::Split,
    dialect: Dialect,
) -> Vec<Derived> {
    use rayon::prelude::*;
    let places = derive_places(split);
    let k = f.arity();
    let mut typings: Vec<Vec<Placement>> = vec![vec![]];
    for _ in 0..=k {
        typings = typings
            .into_iter()
            .flat_map(|t| {
                places.iter().map(move |p| {
                    let mut u = t.clone();
                    u.push(p.clone());
                    u
                })
            })
            .collect();
    }
    // Only typings with a shard are about uneven shards.
    typings.retain(|t| t.iter().any(|p| matches!(p, Placement::Shard(..))));
    typings
        .into_par_iter()
        .map(|mut t| {
            let output = t.pop().expect("an output");
            let rule = UnevenRule {
                axis: "x".into(),
                ranks: None,
                inputs: t.clone(),
                output: output.clone(),
                what: What::Op(f.clone()),
                guard: None,
                nest: None,
            };
            Derived {
                inputs: t,
                output,
                report: check(&rule, dialect),
            }
        })
        .collect()
}

/// `N noun: a sound (bounded), b unsound F1, …`: how many reports have
/// each verdict of `keys`, as [`key`] writes them.
fn counts_line<'a>(
    noun: &str,
    reports: impl Iterator<Item = &'a UnevenReport>,
    keys: &[&str],
) -> String {
    let ks: Vec<String> = reports.map(key).collect();
    let parts: Vec<String> = keys
        .iter()
        .map(|k| {
            let c = ks.iter().filter(|x| x == k).count();
            if *k == "sound" {
                format!("{c} sound (bounded)")
            } else {
                format!("{c} {k}")
            }
        })
        .collect();
    format!("{} {noun}: {}\n", ks.len(), parts.join(", "))
}

/// The derived table as text: one line per typing, then the counts.
pub fn derive_text(f: &LocalFn, split: &spmd_semantics::uneven::Split, rows: &[Derived]) -> String {
    let mut s = format!(
        "typings of `{}` on one mesh axis, shards split by `{split}` (SPEC.md §23.14; forward only):\n",
        f.text
    );
    for r in rows {
        let sig = r.signature();
        let word = key(&r.report);
        match &r.report.failure {
            Some(x) => s.push_str(&format!("  {sig:<40} {word:<12} {}\n", failure_line(x))),
            None => s.push_str(&format!("  {sig:<40} {word}\n")),
        }
    }
    s.push_str(&counts_line(
        "typings",
        rows.iter().map(|r| &r.report),
        &["sound", "unsound F1", "vacuous"],
    ));
    s
}

/// The derived table as the `derive --json` body.
pub fn derive_json(f: &LocalFn, split: &spmd_semantics::uneven::Split, rows: &[Derived]) -> Value {
    let d = Dialect::Canonical;
    json!({
        "mode": "uneven",
        "op": f.text,
        "split": split.to_string(),
        "typings": rows.iter().map(|r| {
            let mut j = r.report.json();
            j["inputs"] = json!(r.inputs.iter().map(|p| show(d, p)).collect::<Vec<_>>());
            j["output"] = json!(show(d, &r.output));
            j
        }).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------------------
// `programs --dialect D --uneven RULE` (SPEC.md §23.15): every chain of up
// to `depth` moves between placements on uneven shards, each step as the
// system elaborates it, checked whole: F1 (the chain keeps the value) and
// B3 (the steps' backwards, run in reverse, against the chain).

/// One generated chain and its verdict.
pub struct Chain {
    pub places: Vec<Placement>,
    /// Each step's forward, in words.
    pub steps: Vec<String>,
    pub report: UnevenReport,
}

/// The step a system runs to move a value from `a` to `b`: DTensor's
/// `redistribute`, the collective that makes the move elsewhere; `None`
/// when the system has none (or refuses the move outright).
fn chain_step(d: Dialect, a: &Placement, b: &Placement) -> Option<Elaborated> {
    let name = match d {
        Dialect::Dtensor => "redistribute".to_string(),
        _ => {
            let c = spmd_dialects::uneven::generic(a, b)?;
            // By name only: dims and split come from the placements.
            c.to_string().split('(').next()?.to_string()
        }
    };
    spmd_dialects::uneven::elaborate(d, &name, None, a, b).ok()
}

/// Every chain of 1 to `depth` steps from a shard split by `split`
/// through I, R (where the system has it), P and shards of dims 0 and 1,
/// each step one the system
/// has, checked as one rule (SPEC.md §23.10) with the composed forward
/// and the composed backward when every step has one.
pub fn programs(d: Dialect, split: &spmd_semantics::uneven::Split, depth: usize) -> Vec<Chain> {
    use rayon::prelude::*;
    // The placements the system has: Nabla has no Reduced.
    let places: Vec<Placement> = derive_places(split)
        .into_iter()
        .filter(|p| *p != Placement::Red || d.state_name(spmd_semantics::State::Reduced).is_some())
        .collect();
    let mut chains: Vec<Vec<Placement>> = places
        .iter()
        .filter(|p| matches!(p, Placement::Shard(..)))
        .map(|p| vec![p.clone()])
        .collect();
    let mut all = Vec::new();
    for _ in 0..depth {
        chains = chains
            .into_iter()
            .flat_map(|c| {
                let last = c.last().expect("a start").clone();
                places
                    .iter()
                    .filter(move |p| **p != last)
                    .filter(|p| chain_step(d, c.last().expect("a start"), p).is_some())
                    .map(|p| {
                        let mut u = c.clone();
                        u.push(p.clone());
                        u
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        all.extend(chains.iter().cloned());
    }
    all.into_par_iter()
        .map(|places| {
            let steps: Vec<Elaborated> = places
                .windows(2)
                .map(|w| chain_step(d, &w[0], &w[1]).expect("kept above"))
                .collect();
            let words: Vec<String> = steps.iter().map(|e| e.forward_text.clone()).collect();
            let steps = Arc::new(steps);
            let fs = steps.clone();
            let forward: spmd_dialects::uneven::StepFn = Box::new(move |xs: &[Tensor]| {
                fs.iter().try_fold(xs.to_vec(), |v, e| (e.forward)(&v))
            });
            let backward: Option<spmd_dialects::uneven::StepFn> =
                steps.iter().all(|e| e.backward.is_some()).then(|| {
                    let bs = steps.clone();
                    Box::new(move |gs: &[Tensor]| {
                        bs.iter().rev().try_fold(gs.to_vec(), |g, e| {
                            (e.backward.as_ref().expect("checked above"))(&g)
                        })
                    }) as spmd_dialects::uneven::StepFn
                });
            let rule = UnevenRule {
                axis: "x".into(),
                ranks: None,
                inputs: vec![places[0].clone()],
                output: places.last().expect("a chain").clone(),
                what: What::Step(Arc::new(Elaborated {
                    forward,
                    forward_text: words.join(" |> "),
                    backward,
                    backward_text: None,
                    notes: vec![],
                })),
                guard: None,
                nest: None,
            };
            let report = check_through(&rule, d, &places[1..places.len() - 1]);
            Chain {
                places,
                steps: words,
                report,
            }
        })
        .collect()
}

/// The chains as text: one line per chain, then the counts.
pub fn programs_text(d: Dialect, split: &spmd_semantics::uneven::Split, rows: &[Chain]) -> String {
    let mut s = format!(
        "chains of moves on uneven shards split by `{split}`, as {} runs them (SPEC.md §23.15):\n",
        d.name()
    );
    for r in rows {
        let sig = r
            .places
            .iter()
            .map(|p| show(d, p))
            .collect::<Vec<_>>()
            .join(" -> ");
        let word = key(&r.report);
        let b = if r.report.rule.has_backward() || word != "sound" {
            ""
        } else {
            " (forward only: a step has no backward)"
        };
        match &r.report.failure {
            Some(x) => s.push_str(&format!("  {sig}: {word}: {}\n", failure_line(x))),
            None => s.push_str(&format!("  {sig}: {word}{b}\n")),
        }
    }
    s.push_str(&counts_line(
        "chains",
        rows.iter().map(|r| &r.report),
        &["sound", "unsound F1", "unsound B3", "vacuous"],
    ));
    s
}

/// The chains as the `programs --json` body.
pub fn programs_json(d: Dialect, split: &spmd_semantics::uneven::Split, rows: &[Chain]) -> Value {
    json!({
        "mode": "uneven",
        "dialect": d.name(),
        "split": split.to_string(),
        "chains": rows.iter().map(|r| {
            let mut j = r.report.json();
            j["places"] = json!(r.places.iter().map(|p| show(d, p)).collect::<Vec<_>>());
            j["steps"] = json!(r.steps);
            j
        }).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------------------
// The `--uneven` modes of `derive` and `programs` (SPEC.md §23.14, §23.15).

/// The split rule of `--uneven RULE`: chunk, ceil or divmod.
pub fn cli_split(rule: &str) -> Result<spmd_semantics::uneven::Split, crate::run::UsageError> {
    use crate::run::UsageError;
    let split = spmd_semantics::uneven::Split::parse(rule)
        .map_err(|e| UsageError(format!("--uneven: {e}")))?;
    if matches!(split, spmd_semantics::uneven::Split::Sizes(_)) {
        return Err(UsageError(
            "--uneven takes a rule (chunk, ceil, divmod); written sizes go in a rule file".into(),
        ));
    }
    Ok(split)
}

fn print_document(command: &str, body: Value) {
    let v = crate::words::document(command, body);
    println!("{}", serde_json::to_string_pretty(&v).expect("json"));
}

/// `derive OP --uneven RULE`: prints the table; `other_mode` when a flag
/// of another mode was given.
pub fn derive_cmd(
    op: Option<&str>,
    expr: Option<&str>,
    rule: &str,
    other_mode: bool,
    format: crate::report::Format,
) -> Result<(), crate::run::UsageError> {
    use crate::run::UsageError;
    if other_mode {
        return Err(UsageError(
            "--uneven is a mode of its own: it does not go with --global, --dialect or --partial"
                .into(),
        ));
    }
    let split = cli_split(rule)?;
    let f = crate::derive::op_or_expr(
        op,
        expr,
        "give an OP (e.g. `derive mul --uneven chunk`) or --expr \"x * y\"",
        "give either OP or --expr, not both",
    )?;
    if f.arity() > 2 {
        return Err(UsageError(format!(
            "--uneven derives ops of one or two inputs; `{}` takes {}",
            f.text,
            f.arity()
        )));
    }
    let rows = derive(&f, &split, Dialect::Canonical);
    match format {
        crate::report::Format::Json => print_document("derive", derive_json(&f, &split, &rows)),
        crate::report::Format::Text => print!("{}", derive_text(&f, &split, &rows)),
        fmt => crate::report::print_tables(
            fmt,
            &crate::report::table::uneven_derive_tables(&f.text, &split, &rows),
        ),
    }
    Ok(())
}

/// `programs --dialect D --uneven RULE`: prints the chains; whether one
/// is unsound (exit 1).
pub fn programs_cmd(
    d: Dialect,
    rule: &str,
    depth: usize,
    json: bool,
) -> Result<bool, crate::run::UsageError> {
    let split = cli_split(rule)?;
    let rows = programs(d, &split, depth);
    if json {
        print_document("programs", programs_json(d, &split, &rows));
    } else {
        print!("{}", programs_text(d, &split, &rows));
    }
    Ok(rows.iter().any(|r| r.report.failed()))
}
