//! Rules with a `vmap` (SPEC.md §24.4): a collective, its batched form as
//! the system picks it (the dialect's batching rule) or as written
//! (`batched`), checked by V1 (`oracle::batching`) on the cases below,
//! reported.

use crate::run::UsageError;
use serde_json::{json, Value};
use spmd_interp::catalogue::collective_typed;
use spmd_interp::Collective;
use spmd_oracle::batching::{check_v1, linear_batches, V1Failure, V1Tally};
use spmd_semantics::batch::select;
use spmd_semantics::uneven::Placement;
use spmd_semantics::{Dialect, Mesh, PerRank, State, Tensor, Type};
use spmd_syntax::rule::RuleSpec;

/// The axis sizes tried when the rule does not write its mesh.
pub const RANKS: [usize; 2] = [2, 3];
/// Batch sizes tried.
pub const MAX_BATCH: usize = 3;

/// A rule under `vmap`: one collective checked by V1 on a basis
/// (§24.4), or a program or local op batched step by step (§24.9).
#[derive(Clone, Debug)]
pub enum Transform {
    Collective(Box<BatchRule>),
    Program(Box<crate::vmap_program::VmapProgram>),
}

/// What the check of a [`Transform`] found.
#[derive(Clone, Debug)]
pub enum TransformReport {
    Collective(Box<BatchReport>),
    Program(Box<crate::vmap_program::VmapReport>),
}

impl Transform {
    pub fn check(&self) -> TransformReport {
        match self {
            Transform::Collective(b) => TransformReport::Collective(Box::new(check(b))),
            Transform::Program(p) => {
                TransformReport::Program(Box::new(crate::vmap_program::check(p)))
            }
        }
    }
}

impl TransformReport {
    fn inner(&self) -> &dyn crate::pinned::Verdicted {
        match self {
            TransformReport::Collective(b) => &**b,
            TransformReport::Program(p) => &**p,
        }
    }
    /// The counterexample as the core's violation.
    pub fn violation(&self) -> Option<spmd_oracle::check::Violation> {
        match self {
            TransformReport::Collective(b) => b.violation(),
            TransformReport::Program(p) => p.violation(),
        }
    }
    /// Batches compared by V1.
    pub fn batches(&self) -> u64 {
        match self {
            TransformReport::Collective(b) => b.tally.batches,
            TransformReport::Program(p) => p.tally.batches,
        }
    }
    /// Cases run.
    pub fn cases(&self) -> u64 {
        match self {
            TransformReport::Collective(b) => b.cases,
            TransformReport::Program(p) => p.cases,
        }
    }
}

impl crate::pinned::Verdicted for TransformReport {
    fn failed(&self) -> bool {
        self.inner().failed()
    }
    fn inconclusive(&self) -> bool {
        self.inner().inconclusive()
    }
    fn report(&self) -> String {
        self.inner().report()
    }
    fn key(&self) -> String {
        self.inner().key()
    }
    fn word(&self) -> String {
        self.inner().word()
    }
    fn json(&self) -> Value {
        self.inner().json()
    }
    fn line(&self) -> Option<String> {
        self.inner().line()
    }
}

/// A collective under `vmap`.
#[derive(Clone, Debug)]
pub struct BatchRule {
    pub unbatched: Collective,
    pub batched: Collective,
    /// The batched form as it reads (`all_gather(dim=1)`).
    pub batched_text: String,
    /// Whether the dialect picked it (else it was written).
    pub picked: bool,
    pub in_axis: usize,
    pub out_axis: usize,
    /// Where the batched form leaves the batch dim of its output, which
    /// vmap then moves to `out_axis` (the system's claim; a written form
    /// is taken to leave it at `out_axis`).
    pub claimed_out: usize,
    /// The rule's mesh (one axis), or none: then [`RANKS`].
    pub ranks: Option<usize>,
    pub axis: String,
}

/// What V1 found.
#[derive(Clone, Debug)]
pub struct BatchReport {
    pub rule: BatchRule,
    pub tally: V1Tally,
    pub cases: u64,
    pub failure: Option<Box<(usize, Vec<usize>, V1Failure)>>,
    pub ranks: Vec<usize>,
}

fn kind_text(c: &Collective) -> String {
    c.describe()
}

/// Reads a rule with a `vmap`: one input, a `forward` collective, types
/// on one mesh axis. `err` points at a field.
pub fn build(
    s: &RuleSpec,
    dialect: Dialect,
    in_t: &Type,
    out_t: &Type,
    axis: &str,
    ranks: Option<usize>,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<BatchRule, UsageError> {
    let v = s.vmap.as_ref().expect("a vmap");
    if v.spmd_axis_name.is_some() {
        return Err(err(
            "spmd_axis_name",
            "`spmd_axis_name` (a batch dim that is a mesh axis) is not checked yet; SPEC.md §24.4 says what is"
                .into(),
        ));
    }
    let fw = s.forward.as_deref().ok_or_else(|| {
        err(
            "vmap",
            "a rule with `vmap` batches a collective: write its `forward` (local ops and programs under vmap are not checked yet)"
                .into(),
        )
    })?;
    if s.inputs.len() != 1 || v.in_axes.len() != 1 {
        return Err(err(
            "in_axes",
            format!(
                "a collective takes one input: `in_axes` names {} and `inputs` {}",
                v.in_axes.len(),
                s.inputs.len()
            ),
        ));
    }
    let in_axis = v.in_axes[0]
        .read()
        .map_err(|e| err("in_axes", e))?
        .ok_or_else(|| {
            err(
                "in_axes",
                "an input that is not batched leaves nothing to batch: the collective runs once"
                    .into(),
            )
        })?;
    let out_axis = match &v.out_axes {
        None => 0,
        Some(a) => a
            .read()
            .map_err(|e| err("out_axes", e))?
            .ok_or_else(|| err("out_axes", "a batched input gives a batched output".into()))?,
    };
    if in_axis > 8 || out_axis > 8 {
        return Err(err("in_axes", "batch dims are at most 8".into()));
    }
    let names = vec![axis.to_string()];
    let unbatched = collective_typed(fw, in_t, out_t, &names).map_err(|e| err(fw, e))?;
    let (batched, batched_text, picked, claimed_out) = match &s.batched {
        Some(b) => {
            let c = collective_typed(b, in_t, out_t, &names).map_err(|e| err(b, e))?;
            let t = b.trim().to_string();
            (c, t, false, out_axis)
        }
        None => match dialect {
            Dialect::Jax => {
                let (kind, d) = spmd_dialects::jax::batch_collective(&unbatched.kind, in_axis)
                    .map_err(|e| err(fw, e))?;
                let c = Collective {
                    kind,
                    ..unbatched.clone()
                };
                let t = kind_text(&c);
                (c, t, true, d)
            }
            d => {
                return Err(err(
                    "vmap",
                    format!(
                        "no batching rule of dialect {} is modelled yet: write the batched form, e.g. batched = \"{fw}\"",
                        d.name()
                    ),
                ))
            }
        },
    };
    Ok(BatchRule {
        unbatched,
        batched,
        batched_text,
        picked,
        in_axis,
        out_axis,
        claimed_out,
        ranks,
        axis: axis.to_string(),
    })
}

/// Moves dim `from` of every rank's tensor to `to`, as vmap moves the
/// batched form's batch dim to `out_axes`.
fn move_dim(xs: Vec<Tensor>, from: usize, to: usize) -> Result<Vec<Tensor>, String> {
    xs.iter()
        .map(|t| {
            spmd_semantics::batch::move_dim(t, from, to).ok_or_else(|| {
                format!(
                    "the batched form's output has rank {}, and its batch dim is claimed at {from} (to move to {to})",
                    t.rank()
                )
            })
        })
        .collect()
}

/// Input shapes of a case: ranks 1 and 2 (and up to the batch dim), dims
/// from 1, 2 and the group size, the ones the collective takes.
fn shapes(c: &Collective, m: &Mesh, in_axis: usize) -> Vec<Vec<usize>> {
    let n = m.axes.iter().map(|a| a.size).product::<usize>();
    let mut dims = vec![1, 2, n];
    dims.sort_unstable();
    dims.dedup();
    let mut out: Vec<Vec<usize>> = Vec::new();
    let lo = in_axis.max(1);
    for rank in lo..=lo.max(2) {
        let mut all: Vec<Vec<usize>> = vec![vec![]];
        for _ in 0..rank {
            all = all
                .into_iter()
                .flat_map(|s| {
                    dims.iter().map(move |&d| {
                        let mut t = s.clone();
                        t.push(d);
                        t
                    })
                })
                .collect();
        }
        out.extend(all.into_iter().filter(|s| c.infer(m, s).is_ok()));
    }
    out.sort_by_key(|s| (s.iter().product::<usize>(), s.len()));
    out
}

/// The per-rank values of a state on `n` ranks (SPEC.md §24.2): one rank's
/// unit entry, or the same unit entry on every rank.
fn basis(s: State, shape: &[usize], n: usize) -> Vec<Vec<Tensor>> {
    let p = match s {
        State::Invariant | State::Reduced => Placement::Inv,
        State::Varying | State::Partial => Placement::Part,
    };
    p.basis(shape, n).unwrap_or_default()
}

/// The unbatched collective as a per-rank step on mesh `m`.
fn unbatched_step<'a>(
    rule: &'a BatchRule,
    m: &'a Mesh,
) -> impl Fn(&[Vec<Tensor>]) -> Result<Vec<Tensor>, String> + 'a {
    move |xs: &[Vec<Tensor>]| {
        rule.unbatched.infer(m, &xs[0][0].shape)?;
        Ok(rule
            .unbatched
            .forward(
                m,
                &PerRank {
                    tensors: xs[0].clone(),
                },
            )
            .tensors)
    }
}

/// The batched form as a per-rank step on mesh `m`, its output's batch
/// dim moved to `out_axes` as vmap moves it.
fn batched_step<'a>(
    rule: &'a BatchRule,
    m: &'a Mesh,
) -> impl Fn(&[Vec<Tensor>]) -> Result<Vec<Tensor>, String> + 'a {
    move |xs: &[Vec<Tensor>]| {
        rule.batched.infer(m, &xs[0][0].shape)?;
        let y = rule
            .batched
            .forward(
                m,
                &PerRank {
                    tensors: xs[0].clone(),
                },
            )
            .tensors;
        move_dim(y, rule.claimed_out, rule.out_axis)
    }
}

/// V1 on one element shape on `n` ranks, batch sizes 1 to 3: the first
/// failing batch.
fn check_one(
    rule: &BatchRule,
    n: usize,
    shape: &[usize],
    tally: &mut V1Tally,
) -> Option<Box<(usize, Vec<usize>, V1Failure)>> {
    let m = Mesh::new(&[(rule.axis.as_str(), n)]);
    let (f, fb) = (unbatched_step(rule, &m), batched_step(rule, &m));
    let b = basis(rule.unbatched.src, shape, n);
    for k in 1..=MAX_BATCH {
        if crate::run::stop_reason().is_some() {
            return None;
        }
        if let Err(x) = check_v1(
            &f,
            &fb,
            &[Some(rule.in_axis)],
            Some(rule.out_axis),
            &linear_batches(&b, k),
            tally,
        ) {
            return Some(Box::new((n, shape.to_vec(), *x)));
        }
    }
    None
}

/// Runs V1 on every case: meshes of fewest ranks first, then the smallest
/// shapes, then batch sizes 1 to 3; the first failure is the
/// counterexample.
pub fn check(rule: &BatchRule) -> BatchReport {
    let ns: Vec<usize> = match rule.ranks {
        Some(n) => vec![n],
        None => RANKS.to_vec(),
    };
    let mut tally = V1Tally::default();
    let mut cases = 0;
    let mut failure = None;
    'all: for &n in &ns {
        let m = Mesh::new(&[(rule.axis.as_str(), n)]);
        for shape in shapes(&rule.unbatched, &m, rule.in_axis) {
            if rule.in_axis > shape.len() {
                continue;
            }
            if crate::run::stop_reason().is_some() {
                break 'all;
            }
            cases += 1;
            failure = check_one(rule, n, &shape, &mut tally);
            if failure.is_some() {
                break 'all;
            }
        }
    }
    BatchReport {
        rule: rule.clone(),
        tally,
        cases,
        failure,
        ranks: ns,
    }
}

fn per_rank(xs: &[Tensor]) -> String {
    xs.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

impl BatchReport {
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }
    /// No batch was compared.
    pub fn inconclusive(&self) -> bool {
        !self.failed() && self.tally.batches == 0
    }
    fn ranks_text(&self) -> String {
        match self.ranks.as_slice() {
            [n] => format!("{n} ranks"),
            ns => format!(
                "{} to {} ranks",
                ns.first().copied().unwrap_or(0),
                ns.last().copied().unwrap_or(0)
            ),
        }
    }
    /// The verdict in words: what was checked.
    pub fn word(&self) -> String {
        if let Some(f) = &self.failure {
            return format!(
                "unsound V1 (SPEC.md §24.2, {} ranks, a batch of {})",
                f.0,
                f.2.batch.len()
            );
        }
        if self.inconclusive() {
            return format!(
                "vacuous (no batch ran on {}: the collective takes none of the shapes tried)",
                self.ranks_text()
            );
        }
        format!(
            "V1 sound (bounded: {} cases on {}, {} batches of 1 to {MAX_BATCH} elements; each decided on a basis, the step being linear)",
            self.cases,
            self.ranks_text(),
            self.tally.batches
        )
    }
    /// The elaboration: which batched form, and where it comes from.
    pub fn elaboration(&self) -> String {
        let r = &self.rule;
        format!(
            "vmap at in_axes {} (out_axes {}): batched form {} ({}), its output batched at dim {}",
            r.in_axis,
            r.out_axis,
            r.batched_text,
            if r.picked {
                "the dialect's batching rule"
            } else {
                "as written"
            },
            r.claimed_out
        )
    }
    /// The counterexample, one line per value.
    pub fn report(&self) -> String {
        let Some(f) = &self.failure else {
            return String::new();
        };
        let (n, shape, x) = &**f;
        let mut s = format!(
            "violates V1 (SPEC.md §24.2) on {n} ranks of axis `{}`: input shape {shape:?}, batched at dim {}\n",
            self.rule.axis, self.rule.in_axis
        );
        for (i, e) in x.batch.iter().enumerate() {
            s.push_str(&format!("  element {i}: per rank {}\n", per_rank(&e[0])));
        }
        s.push_str(&format!(
            "  batched input : per rank {}\n",
            per_rank(&x.batched_inputs[0])
        ));
        s.push_str(&format!(
            "  expected (the stack of the elements' results at dim {}): {}\n",
            self.rule.out_axis,
            x.expected.as_ref().map_or(
                "no stack (the results do not stack there)".to_string(),
                |e| { format!("per rank {}", per_rank(e)) }
            )
        ));
        s.push_str(&format!(
            "  got ({}): {}\n",
            self.rule.batched_text,
            match &x.got {
                Ok(g) => format!("per rank {}", per_rank(g)),
                Err(e) => format!("refused: {e}"),
            }
        ));
        s
    }
    /// The counterexample in one line.
    pub fn line(&self) -> Option<String> {
        let (n, shape, x) = &**self.failure.as_ref()?;
        Some(format!(
            "{n} ranks, input {shape:?} batched at {} ({} elements): expected {}, got {}",
            self.rule.in_axis,
            x.batch.len(),
            x.expected
                .as_ref()
                .map_or("no stack".to_string(), |e| per_rank(e)),
            match &x.got {
                Ok(g) => per_rank(g),
                Err(e) => format!("a refusal ({e})"),
            }
        ))
    }
    /// The counterexample as the core's violation.
    pub fn violation(&self) -> Option<spmd_oracle::check::Violation> {
        use spmd_oracle::check::{Shown, Violation};
        use spmd_semantics::Property;
        let (n, _, x) = &**self.failure.as_ref()?;
        let shown: Vec<Shown> = x
            .batch
            .iter()
            .enumerate()
            .map(|(i, e)| Shown {
                label: format!("element {i}"),
                input: true,
                alternative: false,
                ty: Type::new(vec![self.rule.unbatched.src]),
                value: PerRank {
                    tensors: e[0].clone(),
                },
            })
            .collect();
        Some(Violation {
            property: Property::V1,
            mesh: Mesh::new(&[(self.rule.axis.as_str(), *n)]),
            what: self.word(),
            shown,
            expected: x
                .expected
                .as_ref()
                .map_or("no stack".into(), |e| per_rank(e)),
            actual: match &x.got {
                Ok(g) => per_rank(g),
                Err(e) => format!("refused: {e}"),
            },
        })
    }
    /// The `--json` entry (without name and file).
    pub fn json(&self) -> Value {
        let verdict = if self.failed() {
            "unsound"
        } else if self.inconclusive() {
            "vacuous"
        } else {
            "sound"
        };
        let r = &self.rule;
        json!({
            "verdict": verdict,
            "proof": false,
            "property": self.failure.as_ref().map(|_| "V1"),
            "batching": {
                "forward": kind_text(&r.unbatched),
                "batched": r.batched_text,
                "picked": r.picked,
                "in_axes": [r.in_axis],
                "out_axes": r.out_axis,
                "claimed_out": r.claimed_out,
                "ranks": self.ranks,
            },
            "cases": self.cases,
            "instances": self.tally.batches,
            "random_cases": 0,
            "random_note": Value::Null,
            "replayed": false,
            "reason": Value::Null,
            "backward_checked": false,
            "counterexample": match &self.failure {
                Some(f) => json!({
                    "batching": true,
                    "ranks": f.0,
                    "shape": f.1,
                    "line": self.line(),
                    "report": self.report(),
                }),
                None => Value::Null,
            },
            "summary": self.word(),
        })
    }
}

// ---------------------------------------------------------------------------
// `conform`'s transforms section (SPEC.md §24.5).

/// The section's rules.
pub const CONFORM_TOML: &str = include_str!("../../examples/batching.toml");

/// Per rule of `CONFORM_TOML`, its pinned verdict: `sound`, `vacuous`,
/// `unsound V1`, `unsound <property> in <what>` or `refused in <order>`
/// (§24.9).
pub const PINNED: &[(&str, &str)] = &[
    (
        "jax: all_gather batched at its gather dim (the rule moves the gather to dim 1)",
        "sound",
    ),
    (
        "twin: all_gather batched at dim 0 that still gathers at dim 0",
        "unsound V1",
    ),
    ("jax: psum batched anywhere", "sound"),
    ("jax: untiled all_gather batched after its new dim", "sound"),
    ("jax: all_to_all batched between its dims", "sound"),
    (
        "jax: untiled psum_scatter batched after its scatter dim (JAX's rule says d + 1)",
        "unsound V1",
    ),
    (
        "the same psum_scatter, its batched form written as the meaning asks",
        "sound",
    ),
    (
        "jax: row-parallel matmul, its psum deferred past a linear op, x batched",
        "sound",
    ),
    (
        "jax: the same, x batched at 1 and w at 0, the output at 1",
        "sound",
    ),
    (
        "row-parallel matmul with a deferred Partial (the project's letters)",
        "sound",
    ),
    (
        "jax: tensor-parallel MLP, x batched (JAX inserts pvary on x)",
        "sound",
    ),
    (
        "jax: sequence-parallel MLP, everything batched at 0",
        "sound",
    ),
    (
        "jax: untiled psum_scatter in a program, batched after its scatter dim",
        "unsound V1",
    ),
    (
        "jax: untiled all_gather then a square, batched after the gather dim",
        "sound",
    ),
    (
        "jax: untiled all_gather and its transpose, the cotangent batched after the gather dim",
        "refused in vmap(grad(f))",
    ),
    ("a local op, one input not batched", "sound"),
    (
        "all_reduce P -> R with Nabla's JVP, all_reduce of the tangent",
        "sound",
    ),
    (
        "twin: all_reduce P -> R whose JVP reduces the tangent again",
        "unsound J1 before vmap",
    ),
    (
        "twin: tensor-parallel MLP without f (x used as if varying), under vmap",
        "unsound B1 before vmap",
    ),
    (
        "jax: row-parallel matmul, the batch sharded over dp (spmd_axis_name)",
        "sound",
    ),
];

/// A verdict as pinned.
pub fn key(r: &TransformReport) -> String {
    crate::pinned::Verdicted::key(r)
}

/// A collective's verdict as pinned.
fn collective_key(r: &BatchReport) -> String {
    if r.failed() {
        "unsound V1".into()
    } else if r.inconclusive() {
        "vacuous".into()
    } else {
        "sound".into()
    }
}

/// One rule of the section, checked.
pub type ConformRow = crate::pinned::Row<TransformReport>;

impl crate::pinned::Verdicted for BatchReport {
    fn failed(&self) -> bool {
        BatchReport::failed(self)
    }
    fn inconclusive(&self) -> bool {
        BatchReport::inconclusive(self)
    }
    fn report(&self) -> String {
        BatchReport::report(self)
    }
    fn key(&self) -> String {
        collective_key(self)
    }
    fn word(&self) -> String {
        BatchReport::word(self)
    }
    fn json(&self) -> Value {
        BatchReport::json(self)
    }
    fn line(&self) -> Option<String> {
        BatchReport::line(self)
    }
}

/// Checks every rule of the section whose system is `dialect` (all when
/// `None`).
pub fn conform_rows(dialect: Option<&str>) -> Result<Vec<ConformRow>, UsageError> {
    crate::pinned::rows(
        "examples/batching.toml",
        CONFORM_TOML,
        dialect,
        PINNED,
        |r| Some(r.batching.as_ref()?.check()),
    )
}

/// `conform`'s transforms section.
pub type Section = crate::pinned::Section<TransformReport>;

/// The section for the systems asked for.
pub fn conform_section(dialect: Option<&str>) -> Result<Section, UsageError> {
    let rows = conform_rows(dialect)?;
    Ok(crate::pinned::section(
        "transforms: collectives, programs and local ops under vmap (SPEC.md §24.5, §24.9, examples/batching.toml):",
        rows,
        |rows| format!("{} twins", rows.iter().filter(|r| r.twin()).count()),
    ))
}

// ---------------------------------------------------------------------------
// `run` of a collective under `vmap` (SPEC.md §24.7).

/// One run of a batched collective on the job's values.
pub struct BatchRun {
    pub rule: BatchRule,
    pub n: usize,
    /// The batched input, per rank.
    pub input: Vec<Tensor>,
    /// Each element (per rank), and the unbatched collective's result on it.
    pub elements: Vec<(Vec<Tensor>, Vec<Tensor>)>,
    /// The stack of the elements' results at `out_axes`, per rank.
    pub expected: Option<Vec<Tensor>>,
    /// The batched form's result moved to `out_axes`, or its refusal.
    pub got: Result<Vec<Tensor>, String>,
    /// `--check`: V1 on every batch of the input's shape.
    pub check: Option<BatchReport>,
}

/// The job as a batched collective, or `None` when it has no `vmap`.
pub fn run(job: &spmd_syntax::job::Job, check_it: bool) -> Result<Option<BatchRun>, UsageError> {
    let Some(v) = &job.vmap else {
        if job.batched.is_some() {
            return Err(UsageError(
                "batched: the batched form of a `vmap`; write the job's `vmap` too".into(),
            ));
        }
        return Ok(None);
    };
    let bad = |what: &str| {
        UsageError(format!(
            "{what} does not go with a job's `vmap` (SPEC.md §24.7)"
        ))
    };
    if job.op.is_some() || !job.steps.is_empty() || !job.names.is_empty() {
        return Err(bad(
            "an `op` or a program (a `vmap` batches one `forward` collective)",
        ));
    }
    if job.backward.is_some()
        || job.jvp.is_some()
        || job.meaning.is_some()
        || job.cotangent.is_some()
    {
        return Err(bad("`backward`, `jvp`, `meaning` or `cotangent`"));
    }
    let dialect = match job.dialect.as_deref() {
        None => Dialect::SpmdTypes,
        Some(d) => {
            spmd_dialects::system(d)
                .map_err(|e| UsageError(format!("dialect: {e}")))?
                .dialect
        }
    };
    let m = crate::job::job_mesh(&job.mesh)?;
    if m.axes.len() != 1 {
        return Err(UsageError(
            "mesh: a job with `vmap` runs on one mesh axis".into(),
        ));
    }
    let (axis, n) = (m.axes[0].name.clone(), m.axes[0].size);
    if job.inputs.len() != 1 {
        return Err(UsageError(format!(
            "inputs: a collective takes one input, {} given",
            job.inputs.len()
        )));
    }
    let text = crate::job::one_axis_text(&job.inputs[0].ty, &axis, "inputs[0].type")?;
    let state = |t: &str, what: &str| {
        dialect
            .parse_state(t)
            .map(|(s, _)| s)
            .map_err(|e| UsageError(format!("{what}: {e}")))
    };
    let in_t = Type::new(vec![state(&text, "inputs[0].type")?]);
    let out_spec = job
        .output
        .as_ref()
        .ok_or_else(|| UsageError("output: a job with `vmap` writes its output type".into()))?;
    let out_text = crate::job::one_axis_text(out_spec, &axis, "output")?;
    let out_t = Type::new(vec![state(&out_text, "output")?]);
    let spec = RuleSpec {
        name: job.name.clone().unwrap_or_else(|| "job".into()),
        forward: job.forward.clone(),
        vmap: Some(v.clone()),
        batched: job.batched.clone(),
        inputs: vec![spmd_syntax::rule::TypeSpec::One(text.clone())],
        output: spmd_syntax::rule::TypeSpec::One(out_text),
        ..RuleSpec::default()
    };
    let err = |what: &str, msg: String| UsageError(format!("{what}: {msg}"));
    let rule = build(&spec, dialect, &in_t, &out_t, &axis, Some(n), &err)?;
    let input = crate::job::read_pieces(&job.inputs[0].per_rank, n, "inputs[0].per_rank")?;
    if let Some(r) = input.iter().position(|t| t.shape != input[0].shape) {
        return Err(UsageError(format!(
            "inputs[0].per_rank: rank {r} has shape {:?}, rank 0 {:?}; a batch has one shape on every rank",
            input[r].shape, input[0].shape
        )));
    }
    let d = rule.in_axis;
    let k = *input[0].shape.get(d).ok_or_else(|| {
        UsageError(format!(
            "inputs[0].per_rank: tensors of rank {} have no batch dim {d}",
            input[0].rank()
        ))
    })?;
    if k == 0 || k > 64 {
        return Err(UsageError(format!(
            "inputs[0].per_rank: a batch of {k} elements (1 to 64)"
        )));
    }
    let elements: Vec<Vec<Tensor>> = (0..k)
        .map(|i| {
            input
                .iter()
                .map(|t| select(t, d, i).expect("in range"))
                .collect()
        })
        .collect();
    let results: Vec<(Vec<Tensor>, Vec<Tensor>)> = elements
        .iter()
        .map(|e| -> Result<_, UsageError> {
            rule.unbatched
                .infer(&m, &e[0].shape)
                .map_err(|x| UsageError(format!("the collective does not take an element: {x}")))?;
            let y = rule
                .unbatched
                .forward(&m, &PerRank { tensors: e.clone() })
                .tensors;
            Ok((e.clone(), y))
        })
        .collect::<Result<_, _>>()?;
    let outs: Vec<Vec<Tensor>> = results.iter().map(|r| r.1.clone()).collect();
    let expected = spmd_semantics::batch::stack_per_rank(&outs, rule.out_axis).ok();
    let got = batched_step(&rule, &m)(std::slice::from_ref(&input));
    let check = check_it.then(|| {
        let mut one = rule.clone();
        one.ranks = Some(n);
        check_shape(&one, &elements[0][0].shape)
    });
    Ok(Some(BatchRun {
        rule,
        n,
        input,
        elements: results,
        expected,
        got,
        check,
    }))
}

/// V1 on one element shape (a job's), batch sizes 1 to 3.
fn check_shape(rule: &BatchRule, shape: &[usize]) -> BatchReport {
    let n = rule.ranks.unwrap_or(2);
    let mut tally = V1Tally::default();
    let failure = check_one(rule, n, shape, &mut tally);
    BatchReport {
        rule: rule.clone(),
        tally,
        cases: 1,
        failure,
        ranks: vec![n],
    }
}

impl BatchRun {
    /// Whether the batched form gives the stack on the job's values.
    pub fn holds_here(&self) -> bool {
        matches!((&self.expected, &self.got), (Some(e), Ok(g)) if e == g)
    }

    /// 1 when V1 fails on the job's values or, with `--check`, on its
    /// shape.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.holds_here() || self.check.as_ref().is_some_and(BatchReport::failed))
    }

    pub fn to_text(&self) -> String {
        let r = &self.rule;
        let mut s = format!(
            "{} under vmap (in_axes {}, out_axes {}) on axis `{}` of {} ranks (SPEC.md §24.7)\n",
            kind_text(&r.unbatched),
            r.in_axis,
            r.out_axis,
            r.axis,
            self.n
        );
        s.push_str(&format!(
            "  elaborated: batched form {} ({}), its output batched at dim {}\n",
            r.batched_text,
            if r.picked {
                "the dialect's batching rule"
            } else {
                "as written"
            },
            r.claimed_out
        ));
        s.push_str(&format!(
            "batched input: per rank {}\n",
            per_rank(&self.input)
        ));
        for (i, (e, y)) in self.elements.iter().enumerate() {
            s.push_str(&format!(
                "  element {i}: per rank {}  ->  {}\n",
                per_rank(e),
                per_rank(y)
            ));
        }
        s.push_str(&format!(
            "the stack of the elements' results at dim {}: {}\n",
            r.out_axis,
            self.expected.as_ref().map_or(
                "none (they do not stack there)".to_string(),
                |e| format!("per rank {}", per_rank(e))
            )
        ));
        s.push_str(&format!(
            "the batched form gives: {}\n",
            match &self.got {
                Ok(g) => format!("per rank {}", per_rank(g)),
                Err(e) => format!("a refusal: {e}"),
            }
        ));
        s.push_str(&format!(
            "on these values: {}\n",
            if self.holds_here() {
                "equal (V1 holds here)"
            } else {
                "DIFFERENT (V1 fails here)"
            }
        ));
        if let Some(c) = &self.check {
            match &c.failure {
                None => s.push_str(&format!(
                    "check: V1 holds on every batch of 1 to {MAX_BATCH} elements of this shape ({} batches)\n",
                    c.tally.batches
                )),
                Some(_) => s.push_str(&format!(
                    "check: violates V1 on this shape: {}\n",
                    c.line().unwrap_or_default()
                )),
            }
        }
        s
    }

    pub fn to_json(&self) -> Value {
        let r = &self.rule;
        let strings = |xs: &[Tensor]| xs.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        json!({
            "mesh": {r.axis.clone(): self.n},
            "op": kind_text(&r.unbatched),
            "signature": format!("{} -> {}", r.unbatched.src, r.unbatched.dst),
            "batching": {
                "batched": r.batched_text,
                "picked": r.picked,
                "in_axes": [r.in_axis],
                "out_axes": r.out_axis,
                "claimed_out": r.claimed_out,
            },
            "inputs": [{"type": r.unbatched.src.to_string(), "per_rank": strings(&self.input)}],
            "output": {
                "type": r.unbatched.dst.to_string(),
                "per_rank": match &self.got { Ok(g) => strings(g), Err(_) => vec![] },
                "refused": self.got.as_ref().err(),
            },
            "elements": self.elements.iter().map(|(e, y)| json!({"input": strings(e), "result": strings(y)})).collect::<Vec<_>>(),
            "expected": self.expected.as_deref().map(strings),
            "holds_here": self.holds_here(),
            "check": self.check.as_ref().map(|c| match &c.failure {
                None => json!({"result": "pass", "batches": c.tally.batches}),
                Some(_) => json!({"result": "violation", "property": "V1", "summary": c.line()}),
            }),
        })
    }
}
