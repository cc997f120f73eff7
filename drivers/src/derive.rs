//! Deriving the complete table of typings of a local op on one mesh axis
//! (SPEC.md §9.1).

use crate::run::{check_op, check_op_in, degree_guard, guard, UsageError};

/// The most typings `derive` enumerates (4^6: five inputs and the output).
pub const MAX_TYPINGS: u64 = 4096;
/// The most typings × shape tuples whose instances `derive` estimates
/// before it starts: the estimate itself must take well under a second.
pub const MAX_TYPING_TUPLES: u64 = 1_000_000;
use rayon::prelude::*;
use spmd_dialects::{OpClass, Outcome, System};
use spmd_generators::{all_global_types, all_types, Scope};
use spmd_interp::{LocalFn, TypedOp};
use spmd_oracle::Verdict;
use spmd_semantics::{Dialect, State};
use spmd_semantics::{Mesh, Type};

/// One typing of the derived table and its verdict.
pub struct DerivedRow {
    pub op: TypedOp,
    pub verdict: Verdict,
}

/// Every combination of input states × output state on one axis, each
/// checked by the oracle on the 1-axis meshes of the scope.
pub fn derive(
    f: &LocalFn,
    scope: &Scope,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<DerivedRow>, UsageError> {
    derive_types(f, scope, &all_types(1), progress)
}

/// The same with global SPMD types (SPEC.md §13.3): I, P, R and S(d) for
/// every tensor dim d the scope's shapes have, so the table is the op's
/// shard propagation rule.
pub fn derive_global(
    f: &LocalFn,
    scope: &Scope,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<DerivedRow>, UsageError> {
    derive_types(f, scope, &all_global_types(scope.max_rank), progress)
}

fn derive_types(
    f: &LocalFn,
    scope: &Scope,
    types: &[Type],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<DerivedRow>, UsageError> {
    let types = types.to_vec();
    // 4^(inputs + 1) typings: refuse before building them.
    let typings = (types.len() as u64)
        .checked_pow(f.arity() as u32 + 1)
        .unwrap_or(u64::MAX);
    if typings > MAX_TYPINGS {
        return Err(UsageError(format!(
            "`{}` has {} inputs: {typings} typings to derive (limit {MAX_TYPINGS}); check chosen typings with a rule file instead",
            f.text,
            f.arity()
        )));
    }
    let product = (scope.max_shapes() as u64)
        .checked_pow(f.arity() as u32)
        .unwrap_or(u64::MAX);
    if typings.saturating_mul(product) > MAX_TYPING_TUPLES {
        // The shape tuples the estimate walks: those the pruned search
        // keeps (SPEC.md §18.9), not the cartesian product.
        let probe = TypedOp::local(
            f.clone(),
            vec![types[0].clone(); f.arity()],
            types[0].clone(),
        );
        let tuples = spmd_generators::candidate_bound(&probe, scope).unwrap_or(u64::MAX);
        if typings.saturating_mul(tuples) > MAX_TYPING_TUPLES {
            let tuples = if tuples == u64::MAX {
                format!("more than {}", spmd_generators::MAX_SHAPE_TUPLES)
            } else {
                tuples.to_string()
            };
            return Err(UsageError(format!(
                "scope too large: {typings} typings x {tuples} shape tuples to estimate; lower --max-rank or --max-dim, or check chosen typings with a rule file"
            )));
        }
    }
    let mut ops = Vec::new();
    let ins: Vec<Vec<Type>> = spmd_generators::tuples(&types, f.arity());
    for i in &ins {
        for o in &types {
            ops.push(TypedOp::local(f.clone(), i.clone(), o.clone()));
        }
    }
    let meshes = scope.meshes_with(1);
    if meshes.is_empty() {
        return Err(UsageError(
            "the scope has no one-axis mesh to derive on".into(),
        ));
    }
    degree_guard(&ops[0], scope)?;
    // Note: on a one-rank mesh every state denotes the local value itself, so
    // for a local op with its local VJP the outcome there is the same for
    // every typing (SPEC.md §9.1). Check those cases once and share them;
    // should they fail, every typing is checked in full instead.
    let (single, multi): (Vec<Mesh>, Vec<Mesh>) =
        meshes.iter().cloned().partition(|m| m.num_ranks() == 1);
    // Every typing shares the function's shape tables (SPEC.md §18.1).
    // The estimate walks every typing's cases; a bound from the tables
    // alone spares that walk when it is within the limit (benches/HISTORY.md §18.11).
    // When it walks them, the run checks the cases it found.
    let mut found_cases: Vec<Vec<(Vec<spmd_generators::Case>, spmd_generators::Coverage)>> =
        Vec::new();
    if spmd_generators::typings_bound(&ops, scope) > scope.max_instances {
        // The walk stops once past the limit: the decision is the same,
        // and a refusal does not wait on thousands of typings.
        let (total, done, kept) = spmd_generators::typings_cases_until(
            &ops,
            scope,
            scope.max_instances,
            &[single.clone(), multi.clone()],
        );
        found_cases = kept;
        if done < ops.len() {
            return Err(UsageError(format!(
                "scope too large: more than {} instances (the first {done} of {} typings have about {total}); raise --max-instances, lower --max-free, --max-rank or --max-dim, or check chosen typings with a rule file",
                scope.max_instances,
                ops.len()
            )));
        }
        guard(total, scope)?;
    }
    if meshes
        .iter()
        .all(|m| spmd_generators::shape_tuples(&ops[0].op, m, scope).is_empty())
    {
        return Err(UsageError(format!(
            "no input shapes in scope fit `{}`",
            f.text
        )));
    }
    // The cases found by the estimate, per typing: its one-rank and its
    // multi-rank ones.
    let mut found: Vec<Option<[_; 2]>> = found_cases
        .into_iter()
        .map(|per| per.try_into().ok())
        .collect();
    found.resize_with(ops.len(), || None);
    let shared = match found[0].as_mut() {
        Some([s, _]) => {
            let s = std::mem::take(s);
            check_op_in(&ops[0], scope, &single, s, progress)
        }
        None => check_op(&ops[0], scope, &single, progress),
    };
    let share = shared.is_sound() || matches!(shared, Verdict::Vacuous { .. });
    Ok(ops
        .into_par_iter()
        .zip(found.into_par_iter())
        .map(|(op, found)| {
            let multi_found = found.map(|[_, m]| m);
            let verdict = if share {
                let v = match multi_found {
                    Some(m) => check_op_in(&op, scope, &multi, m, progress),
                    None => check_op(&op, scope, &multi, progress),
                };
                match v {
                    Verdict::Unsound { violation, tally } => Verdict::Unsound { violation, tally },
                    v => {
                        let mut t = shared.tally().clone();
                        t.absorb(v.tally());
                        Verdict::conclude(t, None)
                    }
                }
            } else {
                check_op(&op, scope, &meshes, progress)
            };
            DerivedRow { op, verdict }
        })
        .collect())
}

/// One typing on a two-axis mesh whose verdict differs from the per-axis
/// prediction (SPEC.md §9.5).
pub struct AxisDisagreement {
    pub op: TypedOp,
    pub predicted_sound: bool,
    pub verdict: Verdict,
}

/// SPEC.md §9.5: check every typing of `f` on the two-axis mesh `m` against
/// the prediction "sound iff each axis's one-axis typing is sound", the
/// one-axis verdicts derived first. Returns how many typings agree (vacuous
/// ones are not counted) and those that do not.
pub fn per_axis_agreement(
    f: &LocalFn,
    scope: &Scope,
    m: &Mesh,
) -> Result<(usize, Vec<AxisDisagreement>), UsageError> {
    per_axis_against(f, f, scope, m)
}

/// The same, predicting from the one-axis table of `table` (of the same
/// arity) instead of `f`'s own: with another op's table the prediction must
/// fail somewhere, which is this check's negative twin.
pub fn per_axis_against(
    f: &LocalFn,
    table: &LocalFn,
    scope: &Scope,
    m: &Mesh,
) -> Result<(usize, Vec<AxisDisagreement>), UsageError> {
    per_axis(f, table, scope, m, false)
}

/// The same over global types (SPEC.md §13): every axis I, P, R or S(d).
pub fn per_axis_agreement_global(
    f: &LocalFn,
    scope: &Scope,
    m: &Mesh,
) -> Result<(usize, Vec<AxisDisagreement>), UsageError> {
    per_axis(f, f, scope, m, true)
}

fn per_axis(
    f: &LocalFn,
    table: &LocalFn,
    scope: &Scope,
    m: &Mesh,
    global: bool,
) -> Result<(usize, Vec<AxisDisagreement>), UsageError> {
    let (rows, one) = if global {
        (
            derive_global(table, scope, &|_| {})?,
            all_global_types(scope.max_rank),
        )
    } else {
        (derive(table, scope, &|_| {})?, all_types(1))
    };
    let sound1 = |ins: Vec<Type>, out: Type| {
        rows.iter()
            .find(|r| r.op.inputs == ins && r.op.output == out)
            .map(|r| r.verdict.is_sound())
            .expect("every one-axis typing is derived")
    };
    // Two-axis types: every pair of one-axis types.
    let two: Vec<Type> = spmd_generators::tuples(&one, 2)
        .into_iter()
        .map(|p| {
            Type::laid(
                vec![p[0].states[0], p[1].states[0]],
                vec![p[0].layout[0], p[1].layout[0]],
            )
        })
        .collect();
    let ops: Vec<TypedOp> = spmd_generators::tuples(&two, f.arity())
        .into_iter()
        .flat_map(|ins| {
            two.iter()
                .map(move |o| TypedOp::local(f.clone(), ins.clone(), o.clone()))
        })
        .collect();
    let results: Vec<(TypedOp, Verdict, bool)> = ops
        .into_par_iter()
        .map(|op| {
            let axis = |t: &Type, a: usize| Type::laid(vec![t.states[a]], vec![t.layout[a]]);
            let predicted = (0..2).all(|a| {
                sound1(
                    op.inputs.iter().map(|t| axis(t, a)).collect(),
                    axis(&op.output, a),
                )
            });
            let v = check_op(&op, scope, std::slice::from_ref(m), &|_| {});
            (op, v, predicted)
        })
        .collect();
    let mut agree = 0;
    let mut disagree = Vec::new();
    for (op, verdict, predicted_sound) in results {
        if matches!(verdict, Verdict::Vacuous { .. }) {
            continue;
        }
        if verdict.is_sound() == predicted_sound {
            agree += 1;
        } else {
            disagree.push(AxisDisagreement {
                op,
                predicted_sound,
                verdict,
            });
        }
    }
    Ok((agree, disagree))
}

/// One typing of a derived one-axis table beside what a seed system's typing
/// function does with it (SPEC.md §15.3).
pub struct DialectRow<'a> {
    pub row: &'a DerivedRow,
    pub outcome: spmd_dialects::Outcome,
    pub class: Class,
}

/// Classify every row of a one-axis derived table (`derive`, not
/// `derive_global`) under `sys`'s typing function for op class `class`.
pub fn classify_rows<'a>(
    rows: &'a [DerivedRow],
    sys: &spmd_dialects::System,
    class: spmd_dialects::OpClass,
) -> Result<Vec<DialectRow<'a>>, UsageError> {
    if rows
        .iter()
        .any(|r| r.op.output.is_global() || r.op.output.states.len() != 1)
    {
        return Err(UsageError(
            "--dialect classifies one-axis local typings only (not --global)".into(),
        ));
    }
    let verdict = |ins: &[spmd_semantics::State], out: spmd_semantics::State| {
        rows.iter()
            .find(|r| {
                r.op.output.states[0] == out
                    && r.op.inputs.len() == ins.len()
                    && r.op.inputs.iter().zip(ins).all(|(t, s)| t.states[0] == *s)
            })
            .map(|r| r.verdict.clone())
    };
    Ok(rows
        .iter()
        .map(|row| {
            let ins: Vec<spmd_semantics::State> =
                row.op.inputs.iter().map(|t| t.states[0]).collect();
            let (outcome, class) = classify(sys, class, &ins, row.op.output.states[0], &verdict);
            DialectRow {
                row,
                outcome,
                class,
            }
        })
        .collect())
}

/// `derive --dialect`: the system and the class of the built-in op, or
/// `None` without the flag. An `--expr` has no op class, and `--global`
/// types are not what the typing functions take.
pub fn dialect_for(
    dialect: Option<&str>,
    op: Option<&str>,
    global: bool,
) -> Result<Option<(&'static spmd_dialects::System, spmd_dialects::OpClass)>, UsageError> {
    let Some(d) = dialect else { return Ok(None) };
    let sys = spmd_dialects::system(d).map_err(UsageError)?;
    if global {
        return Err(UsageError(
            "--dialect works on one-axis local typings, not --global".into(),
        ));
    }
    let class = op.and_then(spmd_dialects::OpClass::of_builtin).ok_or_else(|| {
        UsageError(
            "--dialect needs a built-in op (e.g. `derive mul --dialect jax`): an --expr has no op class"
                .into(),
        )
    })?;
    Ok(Some((sys, class)))
}

/// `derive OP --partial k` (SPEC.md §21.2): the table of which outputs defer
/// a pending reduction of kind `k`, printed (or as JSON). Its scope is §21.2's
/// own; `--global` and `--dialect` do not combine with it.
/// The local function of `derive`'s OP or `--expr`; `neither` and `both`
/// are the errors when none or both are given.
pub fn op_or_expr(
    op: Option<&str>,
    expr: Option<&str>,
    neither: &str,
    both: &str,
) -> Result<spmd_interp::LocalFn, UsageError> {
    match (op, expr) {
        (Some(name), None) => spmd_interp::op::builtin(name).map_err(UsageError),
        (None, Some(e)) => spmd_interp::expr::parse(e)
            .map_err(|err| UsageError(format!("--expr `{}`: {err}", crate::words::excerpt(e)))),
        (Some(_), Some(_)) => Err(UsageError(both.into())),
        (None, None) => Err(UsageError(neither.into())),
    }
}

pub fn derive_partial_cmd(
    op: Option<&str>,
    expr: Option<&str>,
    kind: &str,
    other_mode: bool,
    format: crate::report::Format,
    scope: crate::partial_kinds::Scope,
) -> Result<std::process::ExitCode, UsageError> {
    use crate::partial_kinds as pk;
    if other_mode {
        return Err(UsageError(
            "--partial does not combine with --global or --dialect".into(),
        ));
    }
    let k = spmd_semantics::pending::PartialKind::parse(kind)
        .map_err(|e| UsageError(format!("--partial: {e}")))?;
    let either = "give either OP or --expr with --partial";
    let f = op_or_expr(op, expr, either, either)?;
    use crate::report::Format;
    if matches!(format, Format::Markdown | Format::Junit) {
        return Err(UsageError(
            "--partial has a text and a JSON report only (--format text or json)".into(),
        ));
    }
    let rows = pk::derive_partial(&f, k, &scope)?;
    if format == Format::Json {
        let mut body = serde_json::json!({"mode": "partial"});
        if let serde_json::Value::Object(o) = pk::derive_json(&f, k, &scope, &rows) {
            body.as_object_mut().expect("an object").extend(o);
        }
        let v = crate::words::document("derive", body);
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        print!("{}", pk::derive_text(&f, k, &scope, &rows));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// How a system's answer for one typing compares with the oracle's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// It accepts the typing (after its casts) and the oracle proves it
    /// sound, or it does not give this typing and the oracle finds it unsound.
    Agrees,
    /// It accepts a typing the oracle finds unsound: the counterexample.
    UnsoundAcceptance(String),
    /// It raises an error on inputs whose typing the oracle finds sound.
    SoundRejection,
    /// It infers another output for these inputs, and this one is sound too.
    PermissivenessGap,
    /// The seed is silent, or the oracle reached no verdict: the reason.
    Unknown(String),
}

impl Class {
    pub fn word(&self) -> &'static str {
        match self {
            Class::Agrees => "agrees",
            Class::UnsoundAcceptance(_) => "unsound acceptance",
            Class::SoundRejection => "sound rejection",
            Class::PermissivenessGap => "permissiveness gap",
            Class::Unknown(_) => "unknown",
        }
    }
    /// The words of every class, in report order.
    pub const WORDS: [&'static str; 5] = [
        "agrees",
        "unsound acceptance",
        "sound rejection",
        "permissiveness gap",
        "unknown",
    ];
}

/// Run a system's typing function on one one-axis typing (`inputs` → `output`)
/// and classify its answer. `verdict(ins, out)` is the oracle's verdict of a
/// one-axis typing of the same op; the row's own verdict is asked for
/// `(inputs, output)`, and where the system inserts casts, the verdict of the
/// typing after them decides (the casts themselves are checked with the
/// collective tables, SPEC.md §10.3).
pub fn classify(
    sys: &System,
    op: OpClass,
    inputs: &[State],
    output: State,
    verdict: &dyn Fn(&[State], State) -> Option<Verdict>,
) -> (Outcome, Class) {
    let per_axis: Vec<Vec<State>> = inputs.iter().map(|&s| vec![s]).collect();
    let outcome = (sys.typing)(op, &per_axis);
    let mut class = classify_outcome(&outcome, inputs, output, verdict);
    // DTensor picks a gradient's placement when autograd runs: torch 2.14.1
    // returns the gradient of a Replicate() operand of mul or matmul as
    // Partial() where the other operand is Partial() or Shard(), and the
    // proposal's grad-placement hook all-reduces it to Replicate(). Read as
    // the proposal's Reduced() (whose cotangent is a pending sum) a backward
    // failure of the plain local VJP may vanish; the row's verdict is then
    // about a backward DTensor does not use, and the class says so.
    if let (Dialect::Dtensor, Class::UnsoundAcceptance(x), Outcome::Infers { casts, .. }) =
        (sys.dialect, &class, &outcome)
    {
        if x.starts_with('B') {
            let mut eff = inputs.to_vec();
            for c in casts {
                eff[c.input] = c.to;
            }
            for s in eff.iter_mut().filter(|s| **s == State::Invariant) {
                *s = State::Reduced;
            }
            if verdict(&eff, output).is_some_and(|v| v.is_sound()) {
                class = Class::Unknown(format!(
                    "sound with DTensor's own backward, not with this typing's: torch 2.14.1 returns the Replicate() inputs' gradients as Partial() (tests/fixtures/dtensor_ops.json, mul_R_P; read as Reduced(), sound), and seed 001's grad-placement hook then all-reduces them to Replicate(); taken as Replicate() gradients from the local VJP as is: {x}"
                ));
            }
        }
    }
    (outcome, class)
}

/// The classification of an outcome already computed (SPEC.md §15.3).
pub fn classify_outcome(
    outcome: &Outcome,
    inputs: &[State],
    output: State,
    verdict: &dyn Fn(&[State], State) -> Option<Verdict>,
) -> Class {
    let inconclusive = |v: &Option<Verdict>| {
        Class::Unknown(match v {
            Some(v) => format!("the oracle's verdict is {}", v.name()),
            None => "the oracle has no verdict for this typing".into(),
        })
    };
    // Not this typing: the system errs, or infers another output.
    let rejected = |gap: Class| {
        let v = verdict(inputs, output);
        match &v {
            Some(v) if v.is_sound() => gap,
            Some(v) if v.violation().is_some() => Class::Agrees,
            _ => inconclusive(&v),
        }
    };
    match outcome {
        Outcome::Unknown(r) => Class::Unknown(format!("seed silent: {r}")),
        Outcome::Error(_) => rejected(Class::SoundRejection),
        Outcome::Infers { output: o, .. } if o.as_slice() != [output] => {
            rejected(Class::PermissivenessGap)
        }
        Outcome::Infers { casts, .. } => {
            let mut eff = inputs.to_vec();
            for c in casts {
                eff[c.input] = c.to;
            }
            let v = verdict(&eff, output);
            match &v {
                Some(v) if v.is_sound() => Class::Agrees,
                Some(v) => match v.violation() {
                    Some(x) => Class::UnsoundAcceptance(x.one_line()),
                    None => inconclusive(&Some(v.clone())),
                },
                None => inconclusive(&v),
            }
        }
    }
}
