//! `spmd-check run JOB`: one rule, op or program run on per-rank values the
//! user gives (SPEC.md §14). The job names the op exactly as a rule file
//! does (§11.1) and is built by the same code (`rules::build`); this module
//! only reads the values, runs forward and backward, and reports.

use crate::rules::{self, RuleSpec, StepSpec, TypeSpec};
use crate::run::UsageError;
use crate::types::{parse_type, parse_types};
use serde_json::{json, Value};
use spmd_generators::Scope;
use spmd_interp::catalogue::NAMES;
use spmd_interp::{EvalError, TypedOp};
use spmd_oracle::uneven::{Failure, Tally};
use spmd_oracle::{show_denot, Checker, Outcome, Phase};
use spmd_semantics::perrank::{denote, draw, global, well_formed};
use spmd_semantics::uneven::Placement;
use spmd_semantics::{Dialect, Mesh, PerRank, Shape, State, Tensor, Type, Q};
pub use spmd_syntax::job::{parse_job, parse_scalar, InputSpec, Job, MeshSpec, Nest, MAX_LITERAL};

/// A typed per-rank value of a report.
#[derive(Clone, Debug)]
pub struct Valued {
    pub label: String,
    pub ty: Type,
    pub value: PerRank,
}

/// How `--check` ended on the instance.
#[derive(Clone, Debug)]
pub enum CheckResult {
    Pass { b3_undetermined: bool },
    Violation(Box<spmd_oracle::Violation>),
    OutsideDomain,
}

/// What `spmd-check run` found.
#[derive(Clone, Debug)]
pub struct JobReport {
    pub mesh: Mesh,
    pub op: TypedOp,
    /// The output type was inferred, not written.
    pub output_inferred: bool,
    pub inputs: Vec<Valued>,
    pub output: Valued,
    /// The forward met a kink exactly (SPEC.md §5.3).
    pub at_kink: bool,
    pub cotangent: Option<Valued>,
    /// Whether the rule declares a backward.
    pub has_backward: bool,
    /// One cotangent per input, when a cotangent was given and the rule has a backward.
    pub backward: Option<Vec<Valued>>,
    pub traffic_forward: Q,
    pub traffic_backward: Option<Q>,
    pub check: Option<CheckResult>,
    /// The rule the job built, on the job's mesh (for checking it over the
    /// whole scope, as `fidelity` does).
    pub rule: rules::Rule,
}

pub(crate) fn err(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

/// The mesh of a job: 1 to 8 ranks per axis, names distinct.
pub(crate) fn job_mesh(m: &MeshSpec) -> Result<Mesh, UsageError> {
    if m.0.is_empty() {
        return Err(err("mesh: names no axis"));
    }
    for (i, (a, n)) in m.0.iter().enumerate() {
        if a.trim().is_empty() {
            return Err(err("mesh: an axis needs a name"));
        }
        if m.0[..i].iter().any(|(b, _)| b == a) {
            return Err(err(format!("mesh: axis `{a}` named twice")));
        }
        if *n == 0 || *n > 8 {
            return Err(err(format!(
                "mesh: axis `{a}` has size {n}; sizes are 1 to 8"
            )));
        }
    }
    let ranks = m.0.iter().try_fold(1usize, |r, (_, n)| r.checked_mul(*n));
    if ranks.is_none_or(|r| r > rules::MAX_RANKS) {
        return Err(err(format!("mesh: more than {} ranks", rules::MAX_RANKS)));
    }
    let axes: Vec<(&str, usize)> = m.0.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    Ok(Mesh::new(&axes))
}

/// A type as written, with its axes put in the mesh's order. A single state
/// applies to every axis; `{axis: state}` must name every axis; a partition
/// spec leaves the axes it does not name Invariant.
fn job_type(d: Dialect, spec: &TypeSpec, m: &Mesh, what: &str) -> Result<Type, UsageError> {
    let bad = |e: String| err(format!("{what}: {e}"));
    let names: Vec<String> = m.axes.iter().map(|a| a.name.clone()).collect();
    let place = |axes: &[String], t: &Type, fill: Option<State>| -> Result<Type, UsageError> {
        if let Some(a) = axes.iter().find(|a| !names.contains(a)) {
            return Err(bad(format!("the mesh {m} has no axis `{a}`")));
        }
        let mut out = Type::new(vec![State::Invariant; names.len()]);
        for (i, n) in names.iter().enumerate() {
            match axes.iter().position(|a| a == n) {
                Some(j) => {
                    out.states[i] = t.states[j];
                    out.layout[i] = t.layout[j];
                }
                None => match fill {
                    Some(s) => out.states[i] = s,
                    None => return Err(bad(format!("the type names no state for axis `{n}`"))),
                },
            }
        }
        Ok(out)
    };
    match spec {
        TypeSpec::Axes(map) => {
            let axes: Vec<String> = map.keys().cloned().collect();
            let mut t = Type::new(vec![]);
            for s in map.values() {
                let (st, dim) = d.parse_state(s.trim()).map_err(bad)?;
                t.states.push(st);
                t.layout.push(dim);
            }
            place(&axes, &t, None)
        }
        TypeSpec::One(s) if s.trim().starts_with("P(") => {
            let (axes, ts) = parse_types(d, &[s.as_str()]).map_err(|e| bad(e.0))?;
            let t = &ts[0];
            // Axes sharding one dim are major first in mesh order (§13.1).
            let pos = |a: &String| names.iter().position(|n| n == a);
            for i in 0..axes.len() {
                for j in i + 1..axes.len() {
                    if t.states[i] == State::Varying
                        && t.states[j] == State::Varying
                        && t.layout[i] == t.layout[j]
                        && pos(&axes[i]) > pos(&axes[j])
                    {
                        return Err(bad(format!(
                            "`{s}`: axes sharding one dim must follow the mesh order {m}"
                        )));
                    }
                }
            }
            place(&axes, t, Some(State::Invariant))
        }
        TypeSpec::One(s) if s.trim().starts_with('{') => {
            let (axes, t) = parse_type(d, s).map_err(|e| bad(e.0))?;
            place(&axes, &t, None)
        }
        TypeSpec::One(s) => {
            let (st, dim) = d.parse_state(s.trim()).map_err(bad)?;
            Ok(Type::laid(vec![st; names.len()], vec![dim; names.len()]))
        }
    }
}

/// A type in rule-file syntax (spmd_types names, every axis named).
fn type_text(t: &Type, m: &Mesh) -> String {
    let parts: Vec<String> = m
        .axes
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}: {}", a.name, t.axis_letter(i)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Read per-rank values: one entry per rank (row-major over the mesh axes),
/// rectangular, the same shape on every rank.
pub(crate) fn read_per_rank(n: &Nest, m: &Mesh, what: &str) -> Result<PerRank, UsageError> {
    let Nest::List(ranks) = n else {
        return Err(err(format!(
            "{what}: expected an array with one entry per rank ({} ranks), got a scalar",
            m.num_ranks()
        )));
    };
    if ranks.len() != m.num_ranks() {
        return Err(err(format!(
            "{what}: {} ranks given, the mesh {m} has {}",
            ranks.len(),
            m.num_ranks()
        )));
    }
    let mut tensors: Vec<Tensor> = Vec::new();
    for (r, x) in ranks.iter().enumerate() {
        let here = format!("{what}, rank {r}");
        let shape = shape_of(x, &here)?;
        let mut data = Vec::new();
        flatten(x, &here, &mut data)?;
        if let Some(t0) = tensors.first() {
            if t0.shape != shape {
                return Err(err(format!(
                    "{here}: shape {shape:?}, but rank 0 has shape {:?}",
                    t0.shape
                )));
            }
        }
        tensors.push(Tensor::new(shape, data));
    }
    Ok(PerRank { tensors })
}

fn shape_of(n: &Nest, what: &str) -> Result<Shape, UsageError> {
    match n {
        Nest::Scalar(_) => Ok(vec![]),
        Nest::List(xs) => {
            let first = xs
                .first()
                .ok_or_else(|| err(format!("{what}: an empty array (dims must be at least 1)")))?;
            let inner = shape_of(first, what)?;
            for (i, x) in xs.iter().enumerate().skip(1) {
                if shape_of(x, what)? != inner {
                    return Err(err(format!(
                        "{what}: ragged array (entry {i} has another shape than entry 0)"
                    )));
                }
            }
            let mut s = vec![xs.len()];
            s.extend(inner);
            Ok(s)
        }
    }
}

fn flatten(n: &Nest, what: &str, out: &mut Vec<Q>) -> Result<(), UsageError> {
    match n {
        Nest::Scalar(s) => {
            out.push(parse_scalar(s).map_err(|e| err(format!("{what}: {e}")))?);
            Ok(())
        }
        Nest::List(xs) => xs.iter().try_for_each(|x| flatten(x, what, out)),
    }
}

/// SPEC.md §2.3 with a message naming the input and the axis.
fn check_well_formed(m: &Mesh, t: &Type, x: &PerRank, what: &str) -> Result<(), UsageError> {
    well_formed(m, t, x).map_err(|e| {
        err(format!(
            "{what}: not well formed for {}: ranks {} and {} differ only along axis `{}`, where the state is {:?}, so they must hold equal tensors ({} vs {})",
            t.display(m),
            e.rank,
            e.other,
            m.axes[e.axis].name,
            t.states[e.axis],
            x.tensors[e.rank],
            x.tensors[e.other]
        ))
    })
}

/// The base name of a catalogue call, `all_gather` of `all_gather(R, dim=0)`.
fn base_name(text: &str) -> &str {
    text.split('(').next().unwrap_or("").trim()
}

/// The `dim` parameter of a call, 0 when absent.
fn dim_param(text: &str) -> usize {
    text.split(['(', ',', ')'])
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| matches!(k.trim(), "dim" | "gather_dim" | "scatter_dim"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Output types the seed tables (`collectives::PAIR_ROWS`) give a collective
/// from `input`: rows of the job's dialect with the same name (else the same
/// kind), from the input's state, applied to every axis in that state (or to
/// any subset of them when the call names its axes).
fn table_candidates(d: Dialect, fw: &str, input: &Type) -> Vec<Type> {
    let name = base_name(fw);
    let family = |n: &str| NAMES.iter().find(|(x, _)| *x == n).map(|(_, f)| *f);
    let rows: &[crate::collectives::PairRow] = &crate::collectives::PAIR_ROWS;
    // One-axis rows of the typed modes: JAX's legacy untyped mode
    // (check_vma=False) is a row of its own, not a destination to infer.
    let one_axis =
        |r: &&crate::collectives::PairRow| !r.src.contains('{') && !r.id.contains("legacy");
    let mut picked: Vec<_> = rows
        .iter()
        .filter(one_axis)
        .filter(|r| base_name(r.forward) == name && r.dialect == d)
        .collect();
    if picked.is_empty() {
        picked = rows
            .iter()
            .filter(one_axis)
            .filter(|r| base_name(r.forward) == name)
            .collect();
    }
    if picked.is_empty() {
        picked = rows
            .iter()
            .filter(one_axis)
            .filter(|r| family(base_name(r.forward)) == family(name) && family(name).is_some())
            .filter(|r| r.dialect == d)
            .collect();
    }
    let named_axes = fw.contains("axis");
    let mut out: Vec<Type> = Vec::new();
    for r in picked {
        let (Ok((s, _)), Ok((t, _))) = (r.dialect.parse_state(r.src), r.dialect.parse_state(r.dst))
        else {
            continue;
        };
        let at: Vec<usize> = (0..input.states.len())
            .filter(|&a| input.states[a] == s)
            .collect();
        if at.is_empty() {
            continue;
        }
        let subsets: Vec<Vec<usize>> = if named_axes {
            (1..1usize << at.len())
                .map(|bits| {
                    (0..at.len())
                        .filter(|i| bits >> i & 1 == 1)
                        .map(|i| at[i])
                        .collect()
                })
                .collect()
        } else {
            vec![at]
        };
        for sub in subsets {
            let mut c = input.clone();
            for &a in &sub {
                c.states[a] = t;
                c.layout[a] = match (t, input.states[a]) {
                    (State::Varying, State::Varying) => input.layout[a],
                    (State::Varying, _) if input.is_global() => Some(dim_param(fw)),
                    _ => None,
                };
            }
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// Build the job's typed op with the rule-file machinery.
fn build(
    job: &Job,
    file: &str,
    text: &str,
    m: &Mesh,
    inputs: &[Type],
    output: &Type,
    steps: &[StepSpec],
) -> Result<rules::Rule, UsageError> {
    let spec = RuleSpec {
        name: job.name.clone().unwrap_or_else(|| "job".into()),
        dialect: None,
        op: job.op.clone(),
        forward: job.forward.clone(),
        backward: job.backward.clone(),
        inputs: inputs
            .iter()
            .map(|t| TypeSpec::One(type_text(t, m)))
            .collect(),
        output: TypeSpec::One(type_text(output, m)),
        jvp: job.jvp.clone(),
        mesh: Some(m.axes.iter().map(|a| (a.name.clone(), a.size)).collect()),
        names: job.names.clone(),
        step: steps.to_vec(),
        vars: job.vars.clone(),
        no_grad: job.no_grad.clone(),
        meaning: job.meaning.clone(),
        vmap: None,
        batched: None,
    };
    let scope = Scope {
        max_instances: u64::MAX,
        ..Scope::default()
    };
    let mut built = rules::build(file, text, &[spec], &scope)?;
    Ok(built.remove(0))
}

/// Read, build and run a job file.
pub fn run_file(path: &str, check: bool) -> Result<JobReport, UsageError> {
    let text = rules::read_text(path)?;
    let job = parse_job(path, &text)?;
    run_job(&job, path, &text, check)
}

/// Run a parsed job: `file` and `text` locate build errors.
pub fn run_job(job: &Job, file: &str, text: &str, check: bool) -> Result<JobReport, UsageError> {
    run_job_with(job, file, text, check, true)
}

/// Run a job as a real system recorded it (fixtures, SPEC.md §15.5): read in
/// the system's names, not elaborated by our model of its typing, so that
/// what the system did is run, not what we think it does.
pub fn run_job_as_recorded(
    job: &Job,
    file: &str,
    text: &str,
    check: bool,
) -> Result<JobReport, UsageError> {
    run_job_with(job, file, text, check, false)
}

fn run_job_with(
    job: &Job,
    file: &str,
    text: &str,
    check: bool,
    elaborate: bool,
) -> Result<JobReport, UsageError> {
    let (d, system) = match job.dialect.as_deref() {
        None => (Dialect::SpmdTypes, None),
        Some("canonical") => (Dialect::Canonical, None),
        Some(x) => {
            let sys = spmd_dialects::system(x).map_err(|e| {
                err(format!(
                    "dialect: {}",
                    e.replace("(expected one of: ", "(expected one of: canonical, ")
                ))
            })?;
            (sys.dialect, Some(sys))
        }
    };
    let m = job_mesh(&job.mesh)?;
    let in_types: Vec<Type> = job
        .inputs
        .iter()
        .enumerate()
        .map(|(i, x)| job_type(d, &x.ty, &m, &format!("inputs[{i}].type")))
        .collect::<Result<_, _>>()?;
    let steps: Vec<StepSpec> = job
        .steps
        .iter()
        .map(|s| {
            let t = job_type(d, &s.output, &m, &format!("step `{}`: output", s.name))?;
            Ok(StepSpec {
                output: TypeSpec::One(type_text(&t, &m)),
                ..s.clone()
            })
        })
        .collect::<Result<_, UsageError>>()?;
    // Values first: they do not depend on the op.
    let xs: Vec<PerRank> = job
        .inputs
        .iter()
        .enumerate()
        .map(|(i, x)| read_per_rank(&x.per_rank, &m, &format!("inputs[{i}].per_rank")))
        .collect::<Result<_, _>>()?;
    for (i, (x, t)) in xs.iter().zip(&in_types).enumerate() {
        check_well_formed(&m, t, x, &format!("inputs[{i}].per_rank"))?;
    }
    let shapes: Vec<Shape> = xs.iter().map(|x| x.shape().to_vec()).collect();
    let global = in_types.iter().any(Type::is_global);
    // Jobs in JAX's language are elaborated by JAX's typing; the other
    // systems' jobs are read in their names only, for now (SPEC.md §15.5).
    let (rule, output_inferred) = match (&job.output, system.filter(|_| elaborate && !global)) {
        // A system's language: its typing elaborates the job (SPEC.md §15.5).
        (o, Some(sys)) => {
            let output = o
                .as_ref()
                .map(|o| job_type(d, o, &m, "output"))
                .transpose()?;
            let step_types = job
                .steps
                .iter()
                .map(|s| {
                    job_type(d, &s.output, &m, &format!("step `{}`: output", s.name)).map(Some)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let spec = RuleSpec {
                name: job.name.clone().unwrap_or_else(|| "job".into()),
                op: job.op.clone(),
                forward: job.forward.clone(),
                backward: job.backward.clone(),
                jvp: job.jvp.clone(),
                vars: job.vars.clone(),
                no_grad: job.no_grad.clone(),
                meaning: job.meaning.clone(),
                names: job.names.clone(),
                step: job.steps.clone(),
                ..RuleSpec::default()
            };
            let axes: Vec<String> = m.axes.iter().map(|a| a.name.clone()).collect();
            let surface = spmd_dialects::elaborate::Surface {
                spec: &spec,
                inputs: in_types.clone(),
                output: output.clone(),
                steps: step_types,
                axes,
            };
            let e = spmd_dialects::elaborate::elaborate(sys, &surface).map_err(err)?;
            let canon = RuleSpec {
                mesh: Some(m.axes.iter().map(|a| (a.name.clone(), a.size)).collect()),
                ..e.spec
            };
            let scope = Scope {
                max_instances: u64::MAX,
                ..Scope::default()
            };
            let mut built = rules::build(file, text, &[canon], &scope)?;
            let mut rule = built.remove(0);
            rule.dialect = d;
            rule.elaboration = e.notes;
            (rule, output.is_none())
        }
        (Some(o), None) => {
            let t = job_type(d, o, &m, "output")?;
            (build(job, file, text, &m, &in_types, &t, &steps)?, false)
        }
        (None, None) => (
            infer_and_build(job, d, file, text, &m, &in_types, &steps, &shapes)?,
            true,
        ),
    };
    let op = rule.op.clone();
    let (out_shape, _) = op
        .op
        .infer(&m, &shapes)
        .map_err(|e| err(format!("the inputs' shapes {shapes:?} do not fit: {e}")))?;
    if !op.layouts_fit(&m, &shapes, &out_shape) {
        return Err(err(format!(
            "the inputs' shapes {shapes:?} do not fit the layouts of {} (SPEC.md §13.1)",
            op.signature(&m)
        )));
    }
    let fwd = op.op.forward(&m, &xs).map_err(|e| match e {
        EvalError::DivByZero => err("the op is undefined on these values (division by zero)"),
        EvalError::Shape(s) => err(s),
    })?;
    let cotangent = match &job.cotangent {
        None => None,
        Some(n) => {
            let g = read_per_rank(n, &m, "cotangent")?;
            if g.shape() != out_shape.as_slice() {
                return Err(err(format!(
                    "cotangent: shape {:?}, the output has shape {out_shape:?}",
                    g.shape()
                )));
            }
            let tc = op.output.cot();
            check_well_formed(&m, &tc, &g, "cotangent")?;
            Some(Valued {
                label: "dy".into(),
                ty: tc,
                value: g,
            })
        }
    };
    let backward = match (&cotangent, rule.has_backward) {
        (Some(g), true) => {
            op.backward_accepts(&m, &out_shape, &shapes)
                .map_err(|e| err(format!("the backward cannot take the cotangent: {e}")))?;
            let gs = op.backward(&m, &xs, &g.value).map_err(|e| match e {
                EvalError::DivByZero => {
                    err("the backward is undefined on these values (division by zero)")
                }
                EvalError::Shape(s) => err(s),
            })?;
            Some(
                gs.into_iter()
                    .zip(&op.inputs)
                    .enumerate()
                    .map(|(i, (v, t))| Valued {
                        label: format!("dx{i}"),
                        ty: t.cot(),
                        value: v,
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    let check = if check {
        // Checked before the oracle allocates (it grows with the square).
        let scalars: usize = xs
            .iter()
            .map(|x| x.shape().iter().product::<usize>() * m.num_ranks())
            .sum();
        if scalars > crate::run::MAX_CHECK_SCALARS {
            return Err(err(format!(
                "--check: the inputs hold {scalars} elements on all ranks together; the oracle checks at most {}",
                crate::run::MAX_CHECK_SCALARS
            )));
        }
        let c = Checker::new(&op, &m, shapes.clone()).map_err(err)?;
        Some(match c.check(&xs, Phase::full(rule.has_backward)) {
            Outcome::Pass(p) => CheckResult::Pass {
                b3_undetermined: p.b3_undetermined,
            },
            Outcome::Fail(v) => CheckResult::Violation(v),
            Outcome::OutsideDomain => CheckResult::OutsideDomain,
        })
    } else {
        None
    };
    Ok(JobReport {
        traffic_forward: op.op.cost(&m, &shapes),
        traffic_backward: rule
            .has_backward
            .then(|| op.backward_cost(&m, &shapes, &out_shape)),
        inputs: xs
            .into_iter()
            .zip(&op.inputs)
            .enumerate()
            .map(|(i, (v, t))| Valued {
                label: format!("x{i}"),
                ty: t.clone(),
                value: v,
            })
            .collect(),
        output: Valued {
            label: "y".into(),
            ty: op.output.clone(),
            value: fwd.y,
        },
        at_kink: fwd.at_kink,
        cotangent,
        has_backward: rule.has_backward,
        backward,
        check,
        output_inferred,
        mesh: m,
        op,
        rule,
    })
}

/// The output type when the job does not write it: a program's last step;
/// a local op's common input type; a collective's unique destination in the
/// seed tables that builds and takes the input shape (when the tables list
/// none from the input's state, the unique type over all states that does).
#[allow(clippy::too_many_arguments)]
fn infer_and_build(
    job: &Job,
    d: Dialect,
    file: &str,
    text: &str,
    m: &Mesh,
    ins: &[Type],
    steps: &[StepSpec],
    shapes: &[Shape],
) -> Result<rules::Rule, UsageError> {
    if let Some(last) = job.steps.last() {
        let t = job_type(d, &last.output, m, &format!("step `{}`: output", last.name))?;
        return build(job, file, text, m, ins, &t, steps);
    }
    if job.op.is_some() {
        return match ins.first() {
            Some(t) if ins.iter().all(|x| x == t) => build(job, file, text, m, ins, t, steps),
            _ => Err(err(
                "give `output`: a local op's output type is inferred only when every input has the same type",
            )),
        };
    }
    let Some(fw) = &job.forward else {
        return Err(err(
            "a job needs `op` (a local op), `forward` (a collective) or `steps` (a program)",
        ));
    };
    if ins.len() != 1 {
        return Err(err("a collective takes one input"));
    }
    if fw.contains("|>") {
        return Err(err(
            "give `output`: the output type of a composition is not inferred",
        ));
    }
    let mut fits: Vec<(Type, rules::Rule)> = Vec::new();
    let mut first_err: Option<UsageError> = None;
    let mut candidates = table_candidates(d, fw, &ins[0]);
    if candidates.is_empty() {
        // Not in the tables from this state: every type that builds.
        let n = ins[0].states.len();
        candidates = (0..4usize.pow(n as u32))
            .map(|k| {
                let mut t = ins[0].clone();
                for a in 0..n {
                    t.states[a] = spmd_semantics::ALL_STATES[(k / 4usize.pow(a as u32)) % 4];
                    if t.states[a] != State::Varying {
                        t.layout[a] = None;
                    } else if ins[0].states[a] != State::Varying && ins[0].is_global() {
                        t.layout[a] = Some(dim_param(fw));
                    }
                }
                t
            })
            .collect();
    }
    for c in candidates {
        match build(job, file, text, m, ins, &c, steps) {
            Ok(r) => match r.op.op.infer(m, shapes) {
                Ok(_) => fits.push((c, r)),
                Err(e) => {
                    first_err.get_or_insert(err(format!(
                        "the inputs' shapes {shapes:?} do not fit: {e}"
                    )));
                }
            },
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match fits.len() {
        1 => Ok(fits.pop().expect("one").1),
        // Every destination the tables list failed: say why the first did.
        0 if first_err.is_some() => Err(first_err.expect("checked")),
        0 => Err(err(format!(
            "give `output`: the seed tables list no destination of `{fw}` from {} that builds",
            ins[0].display(m)
        ))),
        _ => Err(err(format!(
            "give `output`: `{fw}` from {} could go to any of {}",
            ins[0].display(m),
            fits.iter()
                .map(|(t, _)| t.display(m))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// A scalar in JSON: an integer when it is one (and fits), else "p/q".
fn q_json(q: &Q) -> Value {
    match q.to_i64() {
        Some(i) => json!(i),
        None => json!(q.to_string()),
    }
}

/// A tensor as nested JSON arrays (a scalar bare).
pub fn tensor_json(t: &Tensor) -> Value {
    fn go(shape: &[usize], data: &[Q]) -> Value {
        if shape.is_empty() {
            return q_json(&data[0]);
        }
        let inner: usize = shape[1..].iter().product();
        Value::Array(
            (0..shape[0])
                .map(|i| go(&shape[1..], &data[i * inner..(i + 1) * inner]))
                .collect(),
        )
    }
    go(&t.shape, &t.data)
}

fn per_rank_json(x: &PerRank) -> Value {
    Value::Array(x.tensors.iter().map(tensor_json).collect())
}

/// What a value denotes, as JSON: the global tensor under a global type;
/// else the tensor, nested in one array level per Varying axis (mesh order)
/// indexed by that axis's coordinate.
pub fn denotes_json(m: &Mesh, t: &Type, x: &PerRank) -> Value {
    let d = denote(m, t, x);
    if let Some(g) = t.is_global().then(|| global(m, t, &d)).flatten() {
        return tensor_json(&g);
    }
    let vaxes: Vec<usize> = (0..t.states.len())
        .filter(|&a| t.states[a] == State::Varying)
        .collect();
    fn go(m: &Mesh, vaxes: &[usize], coords: &mut Vec<usize>, family: &[Tensor]) -> Value {
        match vaxes.split_first() {
            None => tensor_json(&family[m.rank(coords)]),
            Some((&a, rest)) => Value::Array(
                (0..m.axes[a].size)
                    .map(|k| {
                        coords[a] = k;
                        let v = go(m, rest, coords, family);
                        coords[a] = 0;
                        v
                    })
                    .collect(),
            ),
        }
    }
    go(m, &vaxes, &mut vec![0; m.ndim()], &d.family)
}

fn denotes_text(m: &Mesh, t: &Type, x: &PerRank) -> String {
    let d = denote(m, t, x);
    match t.is_global().then(|| global(m, t, &d)).flatten() {
        Some(g) => format!("{g} (global)"),
        None => show_denot(m, t, &d),
    }
}

impl JobReport {
    /// 0 pass (or no check), 1 a violation, 2 outside the op's domain.
    pub fn exit_code(&self) -> u8 {
        match &self.check {
            Some(CheckResult::Violation(_)) => 1,
            Some(CheckResult::OutsideDomain) => 2,
            _ => 0,
        }
    }

    fn notes(&self) -> Vec<String> {
        let mut n: Vec<String> = self.rule.elaboration.clone();
        if self.output_inferred && self.rule.elaboration.is_empty() {
            n.push(format!(
                "output type {} inferred (no `output` given)",
                self.op.output.display(&self.mesh)
            ));
        }
        if self.cotangent.is_some() && !self.has_backward {
            n.push("no backward is declared, so none was run".into());
        }
        if self.at_kink {
            n.push("the forward met a kink exactly (SPEC.md §5.3)".into());
        }
        n
    }

    pub fn to_json(&self) -> Value {
        let m = &self.mesh;
        let typed = |v: &Valued| {
            json!({
                "type": v.ty.display(m),
                "per_rank": per_rank_json(&v.value),
                "denotes": denotes_json(m, &v.ty, &v.value),
            })
        };
        let mut o = serde_json::Map::new();
        o.insert("mesh".into(), crate::words::mesh_json(m));
        o.insert("op".into(), json!(self.op.op.describe()));
        o.insert("signature".into(), json!(self.op.signature(m)));
        o.insert(
            "inputs".into(),
            Value::Array(self.inputs.iter().map(typed).collect()),
        );
        o.insert("output".into(), typed(&self.output));
        if let Some(g) = &self.cotangent {
            o.insert("cotangent".into(), typed(g));
            o.insert(
                "backward".into(),
                match &self.backward {
                    Some(bs) => Value::Array(
                        bs.iter()
                            .map(|b| {
                                json!({
                                    "type": b.ty.display(m),
                                    "per_rank": per_rank_json(&b.value),
                                })
                            })
                            .collect(),
                    ),
                    None => Value::Null,
                },
            );
        }
        o.insert(
            "traffic".into(),
            json!({
                "forward": q_json(&self.traffic_forward),
                "backward": self.traffic_backward.as_ref().map(q_json),
            }),
        );
        if let Some(c) = &self.check {
            o.insert(
                "check".into(),
                match c {
                    CheckResult::Pass { b3_undetermined } => json!({
                        "outcome": "pass",
                        "b3_undetermined": b3_undetermined,
                    }),
                    CheckResult::Violation(v) => json!({
                        "outcome": "violation",
                        "property": v.property.code(),
                        "title": v.property.title(),
                        "counterexample": v.one_line(),
                    }),
                    CheckResult::OutsideDomain => json!({"outcome": "outside domain"}),
                },
            );
        }
        o.insert("notes".into(), json!(self.notes()));
        Value::Object(o)
    }

    pub fn to_text(&self) -> String {
        let m = &self.mesh;
        let mut s = format!(
            "{} : {} on mesh {m}\n",
            self.op.op.describe(),
            self.op.signature(m)
        );
        let show = |v: &Valued, denotes: bool, s: &mut String| {
            s.push_str(&format!("  {} : {}", v.label, v.ty.display(m)));
            if denotes {
                s.push_str(&format!("   denotes {}", denotes_text(m, &v.ty, &v.value)));
            }
            s.push('\n');
            for line in draw(m, &v.ty, &v.value) {
                s.push_str(&format!("      {line}\n"));
            }
        };
        s.push_str("inputs:\n");
        for x in &self.inputs {
            show(x, true, &mut s);
        }
        s.push_str("output:\n");
        show(&self.output, true, &mut s);
        if let Some(g) = &self.cotangent {
            s.push_str("cotangent:\n");
            show(g, true, &mut s);
            match &self.backward {
                Some(bs) => {
                    s.push_str("backward:\n");
                    for b in bs {
                        show(b, false, &mut s);
                    }
                }
                None => s.push_str("backward: none declared\n"),
            }
        }
        s.push_str(&format!(
            "traffic (elements sent per rank): forward {}, backward {}\n",
            self.traffic_forward,
            self.traffic_backward
                .as_ref()
                .map_or("none declared".to_string(), Q::to_string)
        ));
        for n in self.notes() {
            s.push_str(&format!("note: {n}\n"));
        }
        if let Some(c) = &self.check {
            s.push_str(&match c {
                CheckResult::Pass { b3_undetermined } => format!(
                    "check: pass{}\n",
                    if *b3_undetermined {
                        " (B3 undetermined at a kink)"
                    } else {
                        ""
                    }
                ),
                CheckResult::Violation(v) => {
                    format!("check: violation: {}\n{}", v.one_line(), v.report())
                }
                CheckResult::OutsideDomain => {
                    "check: outside the op's domain (division by zero)\n".into()
                }
            });
        }
        s
    }
}

// ---------------------------------------------------------------------------
// Jobs on uneven shards (SPEC.md §23.11): pieces of different lengths, one
// mesh axis.

/// What `spmd-check run` found on uneven shards.
pub struct UnevenRun {
    pub dialect: Dialect,
    pub axis: String,
    pub n: usize,
    pub what: String,
    pub notes: Vec<String>,
    pub inputs: Vec<(Placement, Vec<Tensor>)>,
    pub output: (Placement, Vec<Tensor>),
    pub cotangent: Option<(Placement, Vec<Tensor>)>,
    pub backward: Option<(Placement, Vec<Tensor>, String)>,
    pub traffic_forward: usize,
    pub traffic_backward: Option<usize>,
    /// `--check`: the rule's checks on this case (F1, and B3 with a
    /// backward), on every value of the inputs' shapes.
    pub check: Option<Result<Tally, Box<Failure>>>,
}

/// A job's report: the core's or, for uneven shards, its own.
pub enum Ran {
    Core(Box<JobReport>),
    Uneven(Box<UnevenRun>),
    Ragged(Box<crate::ragged::RaggedRun>),
    Nested(Box<crate::nested::NestedRun>),
    Batched(Box<crate::batching::BatchRun>),
    /// A program under `vmap` (SPEC.md §24.13).
    BatchedProgram(Box<crate::vmap_program::ProgramRun>),
}

impl Ran {
    pub fn to_text(&self) -> String {
        match self {
            Ran::Core(r) => r.to_text(),
            Ran::Uneven(u) => u.to_text(),
            Ran::Ragged(r) => r.to_text(),
            Ran::Nested(r) => r.to_text(),
            Ran::Batched(r) => r.to_text(),
            Ran::BatchedProgram(r) => r.to_text(),
        }
    }
    pub fn to_json(&self) -> Value {
        match self {
            Ran::Core(r) => r.to_json(),
            Ran::Uneven(u) => u.to_json(),
            Ran::Ragged(r) => r.to_json(),
            Ran::Nested(r) => r.to_json(),
            Ran::Batched(r) => r.to_json(),
            Ran::BatchedProgram(r) => r.to_json(),
        }
    }
    pub fn exit_code(&self) -> u8 {
        match self {
            Ran::Core(r) => r.exit_code(),
            Ran::Uneven(u) => u8::from(matches!(u.check, Some(Err(_)))),
            Ran::Ragged(r) => r.exit_code(),
            Ran::Nested(r) => r.exit_code(),
            Ran::Batched(r) => r.exit_code(),
            Ran::BatchedProgram(r) => r.exit_code(),
        }
    }
}

/// `spmd-check run FILE`: a job on uneven shards goes to its own run.
pub fn run_any(path: &str, check: bool) -> Result<Ran, UsageError> {
    let text = rules::read_text(path)?;
    let job = parse_job(path, &text)?;
    if let Some(r) = crate::ragged::run(&job, check)? {
        return Ok(Ran::Ragged(Box::new(r)));
    }
    if let Some(r) = crate::vmap_program::run(&job, path, &text, check)? {
        return Ok(Ran::BatchedProgram(Box::new(r)));
    }
    if let Some(r) = crate::batching::run(&job, check)? {
        return Ok(Ran::Batched(Box::new(r)));
    }
    if names_uneven(&job) {
        if let Some(r) = crate::nested::run(&job, check)? {
            return Ok(Ran::Nested(Box::new(r)));
        }
    }
    match run_uneven(&job, check)? {
        Some(u) => Ok(Ran::Uneven(Box::new(u))),
        None => Ok(Ran::Core(Box::new(run_job(&job, path, &text, check)?))),
    }
}

/// Per-rank values whose shapes may differ from rank to rank.
pub(crate) fn read_pieces(n: &Nest, ranks: usize, what: &str) -> Result<Vec<Tensor>, UsageError> {
    let Nest::List(xs) = n else {
        return Err(err(format!(
            "{what}: expected an array with one entry per rank ({ranks} ranks), got a scalar"
        )));
    };
    if xs.len() != ranks {
        return Err(err(format!(
            "{what}: {} ranks given, the mesh has {ranks}",
            xs.len()
        )));
    }
    xs.iter()
        .enumerate()
        .map(|(r, x)| {
            let here = format!("{what}, rank {r}");
            let shape = shape_of_allowing_empty(x, &here)?;
            let mut data = Vec::new();
            flatten(x, &here, &mut data)?;
            Ok(Tensor::new(shape, data))
        })
        .collect()
}

/// As `shape_of`, but `[]` is an empty piece (a rank with no rows), shape [0].
fn shape_of_allowing_empty(n: &Nest, what: &str) -> Result<Shape, UsageError> {
    match n {
        Nest::List(xs) if xs.is_empty() => Ok(vec![0]),
        _ => shape_of(n, what),
    }
}

/// The one axis of an uneven job and its state text per type.
pub(crate) fn one_axis_text(spec: &TypeSpec, axis: &str, what: &str) -> Result<String, UsageError> {
    match spec {
        TypeSpec::One(t) => Ok(t.clone()),
        TypeSpec::Axes(m) => match (m.len(), m.get(axis)) {
            (1, Some(t)) => Ok(t.clone()),
            _ => Err(err(format!(
                "{what}: a job on uneven shards has one mesh axis, `{axis}`"
            ))),
        },
    }
}

/// Whether a job is on uneven shards: a type names a split rule, or an
/// input's ranks hold pieces of different shapes under a shard.
pub fn names_uneven(job: &Job) -> bool {
    use spmd_dialects::uneven::names_split;
    let texts_name_split = job
        .inputs
        .iter()
        .map(|x| &x.ty)
        .chain(job.output.as_ref())
        .any(|t| match t {
            TypeSpec::One(x) => names_split(x),
            TypeSpec::Axes(m) => m.values().any(|x| names_split(x)),
        });
    // Pieces of different shapes, each a well-formed array, under a shard
    // with its dim; anything else goes to the core's run and its errors.
    let uneven_pieces = |x: &InputSpec| {
        let shard = match &x.ty {
            TypeSpec::One(t) => spmd_dialects::uneven::names_shard(t),
            TypeSpec::Axes(m) => m.values().any(|t| spmd_dialects::uneven::names_shard(t)),
        };
        match &x.per_rank {
            Nest::List(xs) if shard => {
                let shapes: Option<Vec<Shape>> = xs
                    .iter()
                    .map(|x| shape_of_allowing_empty(x, "").ok())
                    .collect();
                shapes.is_some_and(|s| s.iter().any(|t| *t != s[0]))
            }
            _ => false,
        }
    };
    texts_name_split || job.inputs.iter().any(uneven_pieces)
}

/// The job on uneven shards, or `None` when it is not one: no type names a
/// split and every input's ranks hold tensors of one shape.
pub fn run_uneven(job: &Job, check: bool) -> Result<Option<UnevenRun>, UsageError> {
    use spmd_dialects::uneven::{elaborate, names_split, parse_placement, show};
    if !names_uneven(job) {
        return Ok(None);
    }
    let d = match job.dialect.as_deref() {
        None => Dialect::SpmdTypes,
        Some("canonical") => Dialect::Canonical,
        Some(x) => {
            spmd_dialects::system(x)
                .map_err(|e| err(format!("dialect: {e}")))?
                .dialect
        }
    };
    if job.mesh.0.len() != 1 {
        return Err(err(
            "mesh: a job on uneven shards (pieces of different lengths) has one mesh axis",
        ));
    }
    let m = job_mesh(&job.mesh)?;
    let (axis, n) = (m.axes[0].name.clone(), m.axes[0].size);
    let unsupported = [
        (!job.steps.is_empty() || !job.names.is_empty(), "a program"),
        (job.jvp.is_some(), "`jvp`"),
        (job.meaning.is_some(), "`meaning`"),
        (!job.no_grad.is_empty(), "`no_grad`"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|u| u.0) {
        return Err(err(format!(
            "{what} is not supported on uneven shards (SPEC.md §23.11)"
        )));
    }
    let mut inputs = Vec::new();
    for (i, x) in job.inputs.iter().enumerate() {
        let what = format!("inputs[{i}]");
        let text = one_axis_text(&x.ty, &axis, &format!("{what}.type"))?;
        let mut p = parse_placement(d, &text).map_err(|e| err(format!("{what}.type: {e}")))?;
        let xs = read_pieces(&x.per_rank, n, &format!("{what}.per_rank"))?;
        // spmd_types takes `split_sizes` as given: a shard written without
        // a split has the sizes its pieces have.
        if let (Dialect::SpmdTypes, Placement::Shard(k, _), false) = (d, &p, names_split(&text)) {
            let k = *k;
            if xs.iter().all(|t| t.shape.len() > k) {
                p = Placement::Shard(
                    k,
                    spmd_semantics::uneven::Split::Sizes(xs.iter().map(|t| t.shape[k]).collect()),
                );
            }
        }
        if p.denote(&xs).is_none() {
            let lens: Vec<String> = xs.iter().map(|t| format!("{:?}", t.shape)).collect();
            return Err(err(format!(
                "{what}.per_rank: pieces of shapes {} are not well formed for {}{}",
                lens.join(", "),
                show(d, &p),
                match &p {
                    Placement::Shard(k, _) => format!(
                        " (name the sizes they have, e.g. S({k}, sizes=[{}]))",
                        xs.iter()
                            .map(|t| t.shape.get(*k).copied().unwrap_or(0).to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    _ => String::new(),
                }
            )));
        }
        inputs.push((p, xs));
    }
    let out_spec = job
        .output
        .as_ref()
        .ok_or_else(|| err("output: a job on uneven shards writes its output type"))?;
    let out_text = one_axis_text(out_spec, &axis, "output")?;
    let output = parse_placement(d, &out_text).map_err(|e| err(format!("output: {e}")))?;
    let backward_text = match &job.backward {
        None => None,
        Some(rules::BackwardSpec::One(b)) => Some(b.as_str()),
        Some(rules::BackwardSpec::PerInput(_)) => {
            return Err(err(
                "backward: a collective on uneven shards has one backward",
            ))
        }
    };
    let per_rank_err = |e: String| err(format!("the forward does not run on these pieces: {e}"));
    let (what, notes, out, traffic, elab, f) = match (&job.op, &job.forward) {
        (None, Some(fw)) => {
            if inputs.len() != 1 {
                return Err(err("inputs: a collective takes one input"));
            }
            let e = elaborate(d, fw, backward_text, &inputs[0].0, &output)
                .map_err(|e| err(format!("forward: {e}")))?;
            let out = (e.forward)(&inputs[0].1).map_err(per_rank_err)?;
            let traffic =
                spmd_dialects::uneven::traffic(d, fw, &inputs[0].0, &output, &inputs[0].1);
            (
                e.forward_text.clone(),
                e.notes.clone(),
                out,
                traffic,
                Some(e),
                None,
            )
        }
        (Some(o), None) => {
            let f = match o {
                rules::OpSpec::Name(name) => spmd_interp::builtin(name).map_err(err)?,
                rules::OpSpec::Expr { expr } => match job.vars.as_deref() {
                    None => spmd_interp::parse(expr),
                    Some(v) => spmd_interp::parse_with_vars(expr, v),
                }
                .map_err(|e| err(format!("op: {e}")))?,
            };
            if f.arity() != inputs.len() {
                return Err(err(format!(
                    "`{}` takes {} inputs, {} given",
                    f.text,
                    f.arity(),
                    inputs.len()
                )));
            }
            let out = (0..n)
                .map(|r| {
                    let here: Vec<Tensor> = inputs.iter().map(|x| x.1[r].clone()).collect();
                    let shapes: Vec<Shape> = here.iter().map(|t| t.shape.clone()).collect();
                    spmd_interp::eval::infer(&f.expr, &shapes)
                        .map_err(|e| per_rank_err(format!("rank {r}: {e}")))?;
                    spmd_interp::eval::eval(&f.expr, &here, &mut Default::default()).map_err(|e| {
                        match e {
                            EvalError::DivByZero => {
                                per_rank_err(format!("rank {r}: division by zero"))
                            }
                            EvalError::Shape(s) => per_rank_err(format!("rank {r}: {s}")),
                        }
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            (f.text.clone(), vec![], out, 0, None, Some(f))
        }
        (Some(_), Some(_)) => return Err(err("give either `op` or `forward`, not both")),
        (None, None) => return Err(err("a job needs `op` or `forward`")),
    };
    let (cotangent, backward, traffic_backward) = match (&job.cotangent, &elab) {
        (Some(g), Some(e)) => {
            let cp = output.cot();
            let gs = read_pieces(g, n, "cotangent")?;
            if cp.denote(&gs).is_none() {
                return Err(err(format!(
                    "cotangent: not well formed for {}",
                    show(d, &cp)
                )));
            }
            match (&e.backward, &e.backward_text) {
                (Some(b), Some(t)) => {
                    let bs = b(&gs).map_err(|e| err(format!("the backward raised: {e}")))?;
                    let tb = Some(spmd_dialects::uneven::traffic(
                        d,
                        job.backward.as_ref().map_or(t.as_str(), |_| t.as_str()),
                        &cp,
                        &inputs[0].0.cot(),
                        &gs,
                    ));
                    (Some((cp, gs)), Some((inputs[0].0.cot(), bs, t.clone())), tb)
                }
                _ => (Some((cp, gs)), None, None),
            }
        }
        (Some(_), None) => {
            return Err(err(
                "cotangent: local ops on uneven shards are run forward (SPEC.md §23.11)",
            ))
        }
        _ => (None, None, None),
    };
    let check = check.then(|| {
        let mut tally = Tally::default();
        let shapes: Vec<Shape> = inputs
            .iter()
            .map(|(p, xs)| p.denote(xs).map(|t| t.shape).unwrap_or_default())
            .collect();
        let r = match (&elab, &f) {
            (Some(e), _) => spmd_oracle::uneven::check_step(
                &inputs[0].0,
                &output,
                &*e.forward,
                e.backward
                    .as_ref()
                    .map(|b| &**b as &spmd_oracle::uneven::Impl),
                n,
                &shapes[0],
                &mut tally,
            ),
            (None, Some(f)) => {
                let run = |xs: &[Tensor]| -> Result<Tensor, String> {
                    let s: Vec<Shape> = xs.iter().map(|t| t.shape.clone()).collect();
                    spmd_interp::eval::infer(&f.expr, &s)?;
                    spmd_interp::eval::eval(&f.expr, xs, &mut Default::default())
                        .map_err(|e| format!("{e:?}"))
                };
                let ps: Vec<Placement> = inputs.iter().map(|x| x.0.clone()).collect();
                spmd_oracle::uneven::check_op(&ps, &output, &run, n, &shapes, 4096, &mut tally)
            }
            _ => Ok(()),
        };
        r.map(|()| tally)
    });
    Ok(Some(UnevenRun {
        dialect: d,
        axis,
        n,
        what,
        notes,
        inputs,
        output: (output, out),
        cotangent,
        backward,
        traffic_forward: traffic,
        traffic_backward,
        check,
    }))
}

impl UnevenRun {
    fn pieces(xs: &[Tensor]) -> String {
        xs.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" | ")
    }
    fn denotes(p: &Placement, xs: &[Tensor]) -> String {
        p.denote(xs)
            .map_or("nothing (not well formed)".into(), |t| t.to_string())
    }
    pub fn to_text(&self) -> String {
        use spmd_dialects::uneven::show;
        let d = self.dialect;
        let mut s = format!(
            "{} on axis `{}` of {} ranks (uneven shards, SPEC.md §23.11)\n",
            self.what, self.axis, self.n
        );
        for n in &self.notes {
            s.push_str(&format!("  elaborated: {n}\n"));
        }
        s.push_str("inputs:\n");
        for (i, (p, xs)) in self.inputs.iter().enumerate() {
            s.push_str(&format!(
                "  x{i} : {}   denotes {}\n      per rank {}\n",
                show(d, p),
                Self::denotes(p, xs),
                Self::pieces(xs)
            ));
        }
        let (p, ys) = &self.output;
        s.push_str(&format!(
            "output:\n  y : {}   denotes {}\n      per rank {}\n",
            show(d, p),
            Self::denotes(p, ys),
            Self::pieces(ys)
        ));
        if let Some((p, gs)) = &self.cotangent {
            s.push_str(&format!(
                "cotangent:\n  dy : {}   denotes {}\n      per rank {}\n",
                show(d, p),
                Self::denotes(p, gs),
                Self::pieces(gs)
            ));
            match &self.backward {
                Some((p, bs, t)) => s.push_str(&format!(
                    "backward ({t}):\n  dx0 : {}   denotes {}\n      per rank {}\n",
                    show(d, p),
                    Self::denotes(p, bs),
                    Self::pieces(bs)
                )),
                None => s.push_str("backward: none declared or picked\n"),
            }
        }
        s.push_str(&format!(
            "traffic: forward {} entries",
            self.traffic_forward
        ));
        if let Some(t) = self.traffic_backward {
            s.push_str(&format!(", backward {t} entries"));
        }
        s.push('\n');
        match &self.check {
            None => {}
            Some(Ok(t)) => s.push_str(&format!(
                "check: passed on every value of these shapes ({} instances{})\n",
                t.instances,
                if self.backward.is_some() || self.inputs.len() == 1 && self.cotangent.is_some() {
                    ", F1 and B3"
                } else {
                    ", F1"
                }
            )),
            Some(Err(f)) => s.push_str(&format!(
                "check: violates {} on these shapes: {}\n",
                f.property(),
                crate::uneven::failure_line(f)
            )),
        }
        s
    }
    pub fn to_json(&self) -> Value {
        use spmd_dialects::uneven::show;
        let d = self.dialect;
        let typed = |p: &Placement, xs: &[Tensor]| {
            json!({
                "type": show(d, p),
                "per_rank": xs.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                "denotes": p.denote(xs).map(|t| t.to_string()),
            })
        };
        json!({
            "mesh": {self.axis.clone(): self.n},
            "op": self.what,
            "signature": format!(
                "{} -> {}",
                self.inputs.iter().map(|(p, _)| show(d, p)).collect::<Vec<_>>().join(", "),
                show(d, &self.output.0)
            ),
            "uneven": true,
            "elaboration": self.notes,
            "inputs": self.inputs.iter().map(|(p, xs)| typed(p, xs)).collect::<Vec<_>>(),
            "output": typed(&self.output.0, &self.output.1),
            "cotangent": self.cotangent.as_ref().map(|(p, g)| typed(p, g)),
            "backward": self.backward.as_ref().map(|(p, b, t)| {
                let mut j = typed(p, b);
                j["collective"] = json!(t);
                j
            }),
            "traffic": {"forward": self.traffic_forward, "backward": self.traffic_backward},
            "check": match &self.check {
                None => Value::Null,
                Some(Ok(t)) => json!({"result": "pass", "instances": t.instances}),
                Some(Err(f)) => json!({"result": "violation", "property": f.property(),
                    "summary": crate::uneven::failure_line(f)}),
            },
        })
    }
}
