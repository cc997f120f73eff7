//! Programs and local ops under `vmap` (SPEC.md §24.9): the rule's
//! program, batched step by step by its dialect's batching rules
//! (`spmd_interp::batch`), checked three ways on every case:
//!
//! - V1: the batched forward against the stack of the elements' results
//!   (`oracle::batching::check_v1`);
//! - `grad(vmap(f))`: the batched program, each collective step's
//!   backward the transpose of the batched collective, checked by the
//!   core (F1-F3, B1-B3, J1 where declared) against the batched program's
//!   meaning;
//! - `vmap(grad(f))`: the same program with each collective step's
//!   backward the batched transpose, checked the same way.
//!
//! With V1 holding, the batched program's meaning is the stack of the
//! elements' meanings, so each order is checked against the stack of the
//! exact per-element derivatives (an unbatched input's gradient summed
//! over the batch), never against the other order.

use crate::run::UsageError;
use serde_json::{json, Value};
use spmd_interp::batch::{batch_program, exact_rule, BatchError, Batching, Bdim, Order};
use spmd_interp::{Backward, Op, Program, Step, TypedOp};
use spmd_oracle::batching::{check_v1, V1Failure, V1Tally};
use spmd_oracle::check::{Checker, Outcome, Phase, Violation};
use spmd_semantics::batch::stack_per_rank;
use spmd_semantics::perrank::{from_free, num_free};
use spmd_semantics::{Dialect, Mesh, PerRank, Shape, Tensor, Q};

/// Batch sizes tried.
pub const MAX_BATCH: usize = 2;
/// Batches of each size per case (their values differ).
pub const BATCHES: usize = 2;
/// Element shape tuples per mesh: the smallest half, then the largest.
pub const SHAPES_PER_MESH: usize = 4;
/// Meshes tried: the rule's first ones with at most this many ranks.
pub const MAX_RANKS: usize = 4;

/// Whose batching rules batch the collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rules {
    /// JAX 0.12.0.1's (`dialects::jax::batch_collective`, its transposes).
    Jax,
    /// The meaning's own (`spmd_interp::batch::exact_rule`): the project's
    /// letters, with every step's backward as written.
    Exact,
    /// Nabla's: its vmap keeps batch dims leading and shifts every
    /// collective dim by them (`_get_physical_axis`,
    /// nabla/ops/communication/base.py), which is the meaning's rule.
    Nabla,
    /// spmd_types 0.3.1 under `torch.vmap`: local ops keep their types (its
    /// `_vmap` copies them); its collectives are autograd Functions without
    /// a vmap rule, which torch.vmap refuses.
    SpmdTypes,
}

/// What torch.vmap says to an spmd_types 0.3.1 collective.
pub const SPMD_TYPES_REFUSAL: &str = "spmd_types 0.3.1's collectives are torch.autograd.Functions without a vmap rule: torch.vmap raises RuntimeError (\"... it must override the setup_context staticmethod\")";

impl Rules {
    pub fn name(self) -> &'static str {
        match self {
            Rules::Jax => "JAX 0.12.0.1's batching rules and transposes",
            Rules::Exact => {
                "the meaning's batching rule (the project's letters; backwards as written, batched)"
            }
            Rules::SpmdTypes => "spmd_types 0.3.1 under torch.vmap (local ops keep their types)",
            Rules::Nabla => "Nabla's batching (batch dims leading, collective dims shifted by them: _get_physical_axis)",
        }
    }
    fn batch(
        self,
        p: &Program,
        m: &Mesh,
        shapes: &[Shape],
        r: &VmapProgram,
        k: usize,
        order: Order,
    ) -> Result<Program, BatchError> {
        let no_transpose = |_: &spmd_interp::Kind| -> Result<spmd_interp::Kind, String> {
            Err("backwards are as written".into())
        };
        let refuse =
            |_: &spmd_interp::Kind, _: usize| -> Result<(spmd_interp::Kind, usize), String> {
                Err(SPMD_TYPES_REFUSAL.into())
            };
        let b = match self {
            Rules::Jax => Batching {
                rule: &spmd_dialects::jax::batch_collective,
                transpose: &spmd_dialects::jax::transpose_collective,
                order,
                local_converts: true,
            },
            Rules::Exact | Rules::Nabla => Batching {
                rule: &exact_rule,
                transpose: &no_transpose,
                order,
                local_converts: true,
            },
            Rules::SpmdTypes => Batching {
                rule: &refuse,
                transpose: &no_transpose,
                order,
                local_converts: false,
            },
        };
        batch_program(p, m, shapes, &r.in_dims, r.out_axis, k, &b)
    }
}

/// A rule with a `vmap` whose body is a program or a local op.
#[derive(Clone, Debug)]
pub struct VmapProgram {
    /// The rule's op, unbatched (a one-step program for a single op).
    pub op: TypedOp,
    pub program: Program,
    pub in_dims: Vec<Bdim>,
    pub out_axis: usize,
    pub rules: Rules,
    pub meshes: Vec<Mesh>,
    pub has_backward: bool,
    /// The input names, for reports.
    pub names: Vec<String>,
    /// `spmd_axis_name` (SPEC.md §24.12): the mesh axis the batch is
    /// sharded over and its size. Each shard runs its own slice of the
    /// batch on the rule's other axes, so each is checked as a batch of
    /// its own: `SHARD` batches per case for each shard.
    pub spmd: Option<(String, usize)>,
}

/// What failed, and where.
#[derive(Clone, Debug)]
pub enum Fail {
    /// The unbatched program already fails a core property on an element:
    /// nothing about vmap is decided.
    Unbatched(Box<Violation>),
    /// The batched forward is not the stack (or refuses).
    V1(Box<V1Failure>),
    /// One order's batched program fails a core property.
    Order(Order, Box<Violation>),
    /// One order's batched backward cannot be built: the system's rule
    /// claims a batch dim past the end.
    BackwardRefused(Order, String),
}

/// The first failure: the case and what failed.
#[derive(Clone, Debug)]
pub struct VmapFailure {
    pub mesh: Mesh,
    pub shapes: Vec<Shape>,
    pub k: usize,
    pub fail: Fail,
}

/// What the checks found.
#[derive(Clone, Debug)]
pub struct VmapReport {
    pub rule: VmapProgram,
    pub cases: u64,
    pub tally: V1Tally,
    /// Batched programs checked by the core, per order.
    pub instances: u64,
    /// Cases whose batching is not modelled (skipped), with the first reason.
    pub unmodelled: u64,
    pub unmodelled_why: Option<String>,
    pub failure: Option<Box<VmapFailure>>,
}

fn order_name(o: Order) -> &'static str {
    match o {
        Order::GradOfVmap => "grad(vmap(f))",
        Order::VmapOfGrad => "vmap(grad(f))",
    }
}

/// What a property of a batched program is about: its forward, its JVP,
/// or its backward in one order.
fn checked_in(o: Order, p: spmd_semantics::Property) -> &'static str {
    use spmd_semantics::Property::*;
    match p {
        F1 | F2 | F3 => "vmap(f)",
        J1 => "jvp(vmap(f))",
        _ => order_name(o),
    }
}

/// Reads a rule's `vmap` for its built (unbatched) op.
pub fn build(
    op: &TypedOp,
    names: &[String],
    in_dims: Vec<Bdim>,
    out_axis: usize,
    rules: Rules,
    meshes: &[Mesh],
    has_backward: bool,
) -> Result<VmapProgram, String> {
    if in_dims.len() != op.inputs.len() {
        return Err(format!(
            "`in_axes` names {} inputs, the rule has {}",
            in_dims.len(),
            op.inputs.len()
        ));
    }
    if in_dims.iter().all(Option::is_none) {
        return Err("no input is batched: `vmap` would run the rule once".into());
    }
    let program = match &op.op {
        Op::Program(p) => (**p).clone(),
        _ => {
            let mut p = Program::new(
                op.inputs.clone(),
                vec![Step {
                    name: "f".into(),
                    op: op.clone(),
                    args: (0..op.inputs.len()).collect(),
                }],
            )?;
            p.names = names.to_vec();
            p
        }
    };
    let meshes: Vec<Mesh> = meshes
        .iter()
        .filter(|m| m.num_ranks() <= MAX_RANKS && m.num_ranks() > 1)
        .take(2)
        .cloned()
        .collect();
    let r = VmapProgram {
        op: op.clone(),
        program,
        in_dims,
        out_axis,
        rules,
        meshes,
        has_backward,
        names: names.to_vec(),
        spmd: None,
    };
    // A batching that is not modelled at all is said at once.
    if let Some((m, shapes)) = r.cases().into_iter().next() {
        for order in [Order::GradOfVmap, Order::VmapOfGrad] {
            if let Err(BatchError::Unmodelled(why)) =
                rules.batch(&r.program, &m, &shapes, &r, 1, order)
            {
                return Err(if why.contains(SPMD_TYPES_REFUSAL) {
                    format!("spmd_types refuses it: {why}")
                } else {
                    format!("its batching is not modelled: {why}")
                });
            }
        }
    }
    Ok(r)
}

/// Small element shapes: ranks 0 to 2, dims 1 and 2.
fn choices() -> Vec<Shape> {
    let mut v: Vec<Shape> = vec![vec![]];
    for a in [1, 2] {
        v.push(vec![a]);
    }
    for a in [1, 2] {
        for b in [1, 2] {
            v.push(vec![a, b]);
        }
    }
    v
}

impl VmapProgram {
    /// The cases: each mesh with its smallest viable element shapes whose
    /// ranks reach every batched input's batch dim.
    pub fn cases(&self) -> Vec<(Mesh, Vec<Shape>)> {
        let mut out = Vec::new();
        for m in &self.meshes {
            let mut tuples = self.program.viable_tuples(m, &choices());
            tuples.retain(|t| {
                t.iter()
                    .zip(&self.in_dims)
                    .all(|(s, d)| d.is_none_or(|d| d <= s.len()))
                    && self
                        .program
                        .infer(m, t)
                        .is_ok_and(|(o, _)| self.out_axis <= o.len())
            });
            tuples.sort_by_key(|t| {
                (
                    t.iter().map(|s| s.iter().product::<usize>()).sum::<usize>(),
                    t.iter().map(Vec::len).sum::<usize>(),
                )
            });
            // The smallest tuples and the largest: the first failure is a
            // smallest one, and the dims of 2 are reached.
            let n = tuples.len();
            let half = SHAPES_PER_MESH / 2;
            let picked: Vec<usize> = if n <= SHAPES_PER_MESH {
                (0..n).collect()
            } else {
                (0..half).chain(n - half..n).collect()
            };
            out.extend(picked.into_iter().map(|i| (m.clone(), tuples[i].clone())));
        }
        out
    }
    pub fn in_axes_text(&self) -> String {
        let v: Vec<String> = self
            .in_dims
            .iter()
            .map(|d| d.map_or("none".into(), |d| d.to_string()))
            .collect();
        format!("[{}]", v.join(", "))
    }
}

/// Deterministic small values: integers -2..=2, seeded.
fn values(seed: u64, n: usize) -> Vec<Q> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            Q::int(((s >> 33) % 5) as i64 - 2)
        })
        .collect()
}

/// The batched op the core checks: the batched program, or its one step
/// when nothing follows it (so a declared JVP is checked too).
fn typed(r: &VmapProgram, q: Program) -> TypedOp {
    if q.steps.len() == 1 {
        let mut t = q.steps.into_iter().next().expect("one").op;
        t.no_grad = r.op.no_grad.clone();
        return t;
    }
    TypedOp {
        op: Op::Program(Box::new(q)),
        inputs: r.op.inputs.clone(),
        output: r.op.output.clone(),
        backward: Backward::Steps,
        jvp: None,
        no_grad: r.op.no_grad.clone(),
    }
}

fn per_rank(x: &[Vec<Tensor>]) -> Vec<PerRank> {
    x.iter().map(|t| PerRank { tensors: t.clone() }).collect()
}

/// Checks every case: meshes of fewest ranks first, then the smallest
/// shapes, batch sizes 1 and 2; the first failure is the counterexample.
pub fn check(r: &VmapProgram) -> VmapReport {
    let mut rep = VmapReport {
        rule: r.clone(),
        cases: 0,
        tally: V1Tally::default(),
        instances: 0,
        unmodelled: 0,
        unmodelled_why: None,
        failure: None,
    };
    let phase = Phase::full(r.has_backward);
    'all: for (m, shapes) in r.cases() {
        rep.cases += 1;
        let plain = Checker::new(&r.op, &m, shapes.clone()).ok();
        for k in 1..=MAX_BATCH {
            if crate::run::stop_reason().is_some() {
                break 'all;
            }
            let mut built = Vec::new();
            for order in [Order::GradOfVmap, Order::VmapOfGrad] {
                match r.rules.batch(&r.program, &m, &shapes, r, k, order) {
                    Ok(q) => built.push((order, Ok(q))),
                    Err(BatchError::Unmodelled(why)) => {
                        rep.unmodelled += 1;
                        rep.unmodelled_why.get_or_insert(why);
                        continue 'all;
                    }
                    Err(BatchError::BackwardRefused(why)) => {
                        rep.failure = Some(Box::new(VmapFailure {
                            mesh: m.clone(),
                            shapes: shapes.clone(),
                            k,
                            fail: Fail::BackwardRefused(order, why),
                        }));
                        break 'all;
                    }
                    // The forward refuses: V1 below says so.
                    Err(BatchError::Refused(why)) => built.push((order, Err(why))),
                }
            }
            // Under spmd_axis_name each shard's slice of the batch is a
            // batch of its own, with its own values.
            let shards = r.spmd.as_ref().map_or(1, |s| s.1);
            for j in 0..BATCHES * shards {
                let elems: Vec<Vec<Vec<Tensor>>> = (0..k)
                    .map(|i| {
                        r.op.inputs
                            .iter()
                            .zip(&shapes)
                            .enumerate()
                            .map(|(a, (t, s))| {
                                // An unbatched input is one value for every element.
                                let e = if r.in_dims[a].is_some() { i } else { 0 };
                                let seed = (j * 64 + e * 8 + a) as u64 + 1;
                                from_free(&m, t, s, &values(seed, num_free(&m, t, s))).tensors
                            })
                            .collect()
                    })
                    .collect();
                let unbatched = |xs: &[Vec<Tensor>]| -> Result<Vec<Tensor>, String> {
                    r.program
                        .forward(&m, &per_rank(xs))
                        .map(|f| f.y.tensors)
                        .map_err(|e| format!("{e:?}"))
                };
                let fwd = &built[0].1;
                let batched = |xs: &[Vec<Tensor>]| -> Result<Vec<Tensor>, String> {
                    fwd.as_ref().map_err(Clone::clone).and_then(|q| {
                        q.forward(&m, &per_rank(xs))
                            .map(|f| f.y.tensors)
                            .map_err(|e| format!("{e:?}"))
                    })
                };
                // Each element alone first: a program that fails without
                // vmap says so, and vmap is not blamed.
                if let Some(c) = &plain {
                    for e in &elems {
                        let xs = per_rank(e);
                        if let Outcome::Fail(v) = c.check(&xs, phase) {
                            rep.failure = Some(Box::new(VmapFailure {
                                mesh: m.clone(),
                                shapes: shapes.clone(),
                                k,
                                fail: Fail::Unbatched(v),
                            }));
                            break 'all;
                        }
                    }
                }
                let before = rep.tally.batches;
                if let Err(f) = check_v1(
                    &unbatched,
                    &batched,
                    &r.in_dims,
                    Some(r.out_axis),
                    std::slice::from_ref(&elems),
                    &mut rep.tally,
                ) {
                    rep.failure = Some(Box::new(VmapFailure {
                        mesh: m.clone(),
                        shapes: shapes.clone(),
                        k,
                        fail: Fail::V1(f),
                    }));
                    break 'all;
                }
                if rep.tally.batches == before {
                    continue;
                }
                // The batched inputs, as V1 stacked them.
                let xs: Vec<PerRank> = r
                    .in_dims
                    .iter()
                    .enumerate()
                    .map(|(a, d)| match d {
                        Some(d) => {
                            let col: Vec<Vec<Tensor>> =
                                elems.iter().map(|e| e[a].clone()).collect();
                            PerRank {
                                tensors: stack_per_rank(&col, *d).expect("stacked by V1"),
                            }
                        }
                        None => PerRank {
                            tensors: elems[0][a].clone(),
                        },
                    })
                    .collect();
                let bshapes: Vec<Shape> = xs.iter().map(|x| x.shape().to_vec()).collect();
                for (order, q) in &built {
                    let Ok(q) = q else { continue };
                    let t = typed(r, q.clone());
                    let Ok(c) = Checker::new(&t, &m, bshapes.clone()) else {
                        continue;
                    };
                    rep.instances += 1;
                    if let Outcome::Fail(v) = c.check(&xs, phase) {
                        rep.failure = Some(Box::new(VmapFailure {
                            mesh: m.clone(),
                            shapes: shapes.clone(),
                            k,
                            fail: Fail::Order(*order, v),
                        }));
                        break 'all;
                    }
                }
            }
        }
    }
    rep
}

fn show(xs: &[Tensor]) -> String {
    xs.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

impl VmapReport {
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }
    pub fn inconclusive(&self) -> bool {
        !self.failed() && self.tally.batches == 0
    }
    /// The verdict as pinned.
    pub fn key(&self) -> String {
        match self.failure.as_deref().map(|f| &f.fail) {
            Some(Fail::Unbatched(v)) => format!("unsound {} before vmap", v.property),
            Some(Fail::V1(_)) => "unsound V1".into(),
            Some(Fail::Order(o, v)) => {
                format!("unsound {} in {}", v.property, checked_in(*o, v.property))
            }
            Some(Fail::BackwardRefused(o, _)) => format!("refused in {}", order_name(*o)),
            None if self.inconclusive() => "vacuous".into(),
            None => "sound".into(),
        }
    }
    /// The verdict in words: what was checked.
    pub fn word(&self) -> String {
        if let Some(f) = &self.failure {
            let at = format!("{} ranks, a batch of {}", f.mesh.num_ranks(), f.k);
            return match &f.fail {
                Fail::Unbatched(v) => format!(
                    "unsound {} before vmap (SPEC.md §24.9: an element alone fails it, {} ranks; vmap not checked)",
                    v.property,
                    f.mesh.num_ranks()
                ),
                Fail::V1(_) => format!("unsound V1 (SPEC.md §24.9, {at})"),
                Fail::Order(o, v) => format!(
                    "unsound {} in {} (SPEC.md §24.9, {at})",
                    v.property,
                    checked_in(*o, v.property)
                ),
                Fail::BackwardRefused(o, _) => format!(
                    "unsound: {} does not run (SPEC.md §24.9, {at}: the system's batching rule claims a batch dim past the end)",
                    order_name(*o)
                ),
            };
        }
        if self.inconclusive() {
            return format!(
                "vacuous (no batch ran: {} cases{})",
                self.cases,
                self.unmodelled_why
                    .as_ref()
                    .map_or(String::new(), |w| format!("; not modelled: {w}"))
            );
        }
        let jvp = if self.rule.program.steps.len() == 1 && self.rule.op.has_jvp() {
            ", J1 of jvp(vmap(f))"
        } else {
            ""
        };
        let props = if self.rule.has_backward {
            format!("V1, F1-F3 of vmap(f){jvp}, B1-B3 of grad(vmap(f)) and of vmap(grad(f))")
        } else {
            format!("V1, F1-F3 of vmap(f){jvp}")
        };
        format!(
            "{props} sound (bounded: {} cases on {}{}, {} batches of 1 to {MAX_BATCH} elements, {} batched programs checked by the core{})",
            self.cases,
            self.ranks_text(),
            self.rule.spmd.as_ref().map_or(String::new(), |(a, n)| format!(
                " for each of the {n} shards of the batch over `{a}`"
            )),
            self.tally.batches,
            self.instances,
            if self.unmodelled > 0 {
                format!("; {} cases not modelled", self.unmodelled)
            } else {
                String::new()
            }
        )
    }
    fn ranks_text(&self) -> String {
        let mut ns: Vec<usize> = self.rule.meshes.iter().map(Mesh::num_ranks).collect();
        ns.dedup();
        match ns.as_slice() {
            [n] => format!("{n} ranks"),
            ns => format!(
                "{} to {} ranks",
                ns.iter().min().copied().unwrap_or(0),
                ns.iter().max().copied().unwrap_or(0)
            ),
        }
    }
    /// The elaboration: which rules batch the program.
    pub fn elaboration(r: &VmapProgram) -> String {
        let spmd = match &r.spmd {
            None => String::new(),
            Some((a, n)) => format!(
                "; the batch sharded over `{a}` ({n} shards, each run on its own ranks of the other axes): batched values are Varying over `{a}`, an unbatched input is pvary-ed to Varying over it (JAX's auto pvary, Nabla's broadcast), the output is Varying over it"
            ),
        };
        format!(
            "vmap at in_axes {} (out_axes {}) of {} step(s), batched by {}{spmd}",
            r.in_axes_text(),
            r.out_axis,
            r.program.steps.len(),
            r.rules.name()
        )
    }
    /// The counterexample, one line per value.
    pub fn report(&self) -> String {
        let Some(f) = &self.failure else {
            return String::new();
        };
        let head = format!(
            "on {} ranks, element shapes {:?}, in_axes {}, a batch of {}",
            f.mesh.num_ranks(),
            f.shapes,
            self.rule.in_axes_text(),
            f.k
        );
        match &f.fail {
            Fail::Unbatched(v) => format!(
                "the program alone violates {} on an element (before vmap):\n{}",
                v.property,
                v.report_in(Dialect::Canonical)
            ),
            Fail::V1(x) => {
                let mut s = format!("violates V1 (SPEC.md §24.9) {head}\n");
                for (i, e) in x.batch.iter().enumerate() {
                    let ins: Vec<String> = e
                        .iter()
                        .enumerate()
                        .map(|(a, v)| format!("{} = {}", self.name(a), show(v)))
                        .collect();
                    s.push_str(&format!("  element {i}: {}\n", ins.join("; ")));
                }
                s.push_str(&format!(
                    "  expected (the stack of the elements' results at dim {}): {}\n",
                    self.rule.out_axis,
                    x.expected.as_ref().map_or("no stack".into(), |e| show(e))
                ));
                s.push_str(&format!(
                    "  got (the batched program): {}\n",
                    match &x.got {
                        Ok(g) => show(g),
                        Err(e) => format!("refused: {e}"),
                    }
                ));
                s
            }
            Fail::Order(o, v) => format!(
                "{} violates {} {head}:\n{}",
                checked_in(*o, v.property),
                v.property,
                v.report_in(Dialect::Canonical)
            ),
            Fail::BackwardRefused(o, why) => {
                format!("{} does not run {head}: {why}\n", order_name(*o))
            }
        }
    }
    fn name(&self, a: usize) -> String {
        self.rule
            .names
            .get(a)
            .cloned()
            .unwrap_or_else(|| format!("x{a}"))
    }
    /// The counterexample in one line.
    pub fn line(&self) -> Option<String> {
        let f = self.failure.as_ref()?;
        Some(format!(
            "{} ranks, shapes {:?}, a batch of {}: {}",
            f.mesh.num_ranks(),
            f.shapes,
            f.k,
            match &f.fail {
                Fail::Unbatched(v) => format!("before vmap: {}", v.one_line()),
                Fail::V1(x) => format!(
                    "V1: expected {}, got {}",
                    x.expected.as_ref().map_or("no stack".into(), |e| show(e)),
                    match &x.got {
                        Ok(g) => show(g),
                        Err(e) => format!("a refusal ({e})"),
                    }
                ),
                Fail::Order(o, v) => format!("{}: {}", checked_in(*o, v.property), v.one_line()),
                Fail::BackwardRefused(o, why) => format!("{}: {why}", order_name(*o)),
            }
        ))
    }
    /// The counterexample as the core's violation.
    pub fn violation(&self) -> Option<Violation> {
        let f = self.failure.as_ref()?;
        Some(match &f.fail {
            Fail::Unbatched(v) => {
                let mut v = (**v).clone();
                v.what = format!("{}: {}", self.word(), v.what);
                v
            }
            Fail::Order(_, v) => {
                let mut v = (**v).clone();
                v.what = format!("{}: {}", self.word(), v.what);
                v
            }
            _ => Violation {
                property: spmd_semantics::Property::V1,
                mesh: f.mesh.clone(),
                what: self.word(),
                shown: vec![],
                expected: self.line().unwrap_or_default(),
                actual: String::new(),
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
        let property = self.failure.as_deref().map(|f| match &f.fail {
            Fail::Order(_, v) | Fail::Unbatched(v) => v.property.to_string(),
            _ => "V1".into(),
        });
        let order = self.failure.as_deref().and_then(|f| match &f.fail {
            Fail::Order(o, v) => Some(checked_in(*o, v.property)),
            Fail::BackwardRefused(o, _) => Some(order_name(*o)),
            Fail::V1(_) => None,
            Fail::Unbatched(_) => Some("f"),
        });
        let r = &self.rule;
        json!({
            "verdict": verdict,
            "proof": false,
            "property": property,
            "batching": {
                "program": true,
                "steps": r.program.steps.len(),
                "rules": r.rules.name(),
                "in_axes": r.in_dims,
                "out_axes": r.out_axis,
                "ranks": r.meshes.iter().map(Mesh::num_ranks).collect::<Vec<_>>(),
                "orders_checked": r.has_backward,
                "spmd_axis_name": r.spmd.as_ref().map(|(a, n)| json!({"axis": a, "shards": n})),
            },
            "cases": self.cases,
            "instances": self.tally.batches,
            "core_instances": self.instances,
            "unmodelled_cases": self.unmodelled,
            "random_cases": 0,
            "random_note": Value::Null,
            "replayed": false,
            "reason": self.unmodelled_why,
            "backward_checked": r.has_backward,
            "counterexample": match &self.failure {
                Some(f) => json!({
                    "batching": true,
                    "order": order,
                    "ranks": f.mesh.num_ranks(),
                    "shapes": f.shapes,
                    "batch": f.k,
                    "line": self.line(),
                    "report": self.report(),
                }),
                None => Value::Null,
            },
            "summary": self.word(),
        })
    }
}

impl crate::pinned::Verdicted for VmapReport {
    fn failed(&self) -> bool {
        VmapReport::failed(self)
    }
    fn inconclusive(&self) -> bool {
        VmapReport::inconclusive(self)
    }
    fn report(&self) -> String {
        VmapReport::report(self)
    }
    fn key(&self) -> String {
        VmapReport::key(self)
    }
    fn word(&self) -> String {
        VmapReport::word(self)
    }
    fn json(&self) -> Value {
        VmapReport::json(self)
    }
    fn line(&self) -> Option<String> {
        VmapReport::line(self)
    }
}

/// A rule's `vmap` read for the program path: the batch dims of its
/// inputs and its output's.
pub fn read_axes(
    v: &spmd_syntax::rule::VmapSpec,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<(Vec<Bdim>, usize), UsageError> {
    let in_dims: Vec<Bdim> = v
        .in_axes
        .iter()
        .map(|a| a.read().map_err(|e| err("in_axes", e)))
        .collect::<Result<_, _>>()?;
    let out_axis = match &v.out_axes {
        None => 0,
        Some(a) => a
            .read()
            .map_err(|e| err("out_axes", e))?
            .ok_or_else(|| err("out_axes", "a batched program's output is batched".into()))?,
    };
    if in_dims.iter().flatten().chain([&out_axis]).any(|&d| d > 8) {
        return Err(err("in_axes", "batch dims are at most 8".into()));
    }
    Ok((in_dims, out_axis))
}

// ---------------------------------------------------------------------------
// Rules with a `vmap` over a program (SPEC.md §24.9, §24.12).

/// A rule with a `vmap` over a program, a local op, or a collective with
/// its backward or JVP (SPEC.md §24.9): the rule built without it, then
/// batched by its dialect's rules.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_rule(
    file: &str,
    text: &str,
    s: &spmd_syntax::rule::RuleSpec,
    scope: &spmd_generators::Scope,
    elaborate: bool,
    dialect: Dialect,
    letters: bool,
    err: &dyn Fn(&str, String) -> UsageError,
) -> Result<crate::rules::Rule, UsageError> {
    let v = s.vmap.as_ref().expect("a vmap");
    // The batch sharded over a mesh axis (SPEC.md §24.12): the program is
    // written over the other axes; each shard runs on its own ranks.
    let mut inner_mesh = s.mesh.clone();
    let spmd = match &v.spmd_axis_name {
        None => None,
        Some(a) => {
            let Some(mesh) = s.mesh.as_ref() else {
                return Err(err(
                    "spmd_axis_name",
                    format!("`spmd_axis_name = \"{a}\"` shards the batch over a mesh axis: write the rule's mesh, with `{a}` and the axes the program runs on"),
                ));
            };
            let Some(&size) = mesh.get(a) else {
                return Err(err(
                    "spmd_axis_name",
                    format!("`{a}` is not an axis of the rule's mesh"),
                ));
            };
            if mesh.len() < 2 {
                return Err(err(
                    "spmd_axis_name",
                    format!("the mesh has no axis beside `{a}` for the program to run on"),
                ));
            }
            if size == 0 || size > 8 {
                return Err(err("mesh", "mesh axis sizes must be 1 to 8".into()));
            }
            let mut m = mesh.clone();
            m.shift_remove(a);
            inner_mesh = Some(m);
            Some((a.clone(), size))
        }
    };
    let rules = match dialect {
        Dialect::Jax => Rules::Jax,
        _ if letters => Rules::Exact,
        Dialect::SpmdTypes => Rules::SpmdTypes,
        Dialect::Nabla => Rules::Nabla,
        d => {
            return Err(err(
                "vmap",
                format!(
                    "no batching rule of dialect {} is modelled for programs and local ops; write the rule in JAX's language or the project's letters",
                    d.name()
                ),
            ))
        }
    };
    let (in_dims, out_axis) = read_axes(v, err)?;
    let inner = spmd_syntax::rule::RuleSpec {
        vmap: None,
        batched: None,
        mesh: inner_mesh,
        ..s.clone()
    };
    let mut rule = crate::rules::build_one(file, text, &inner, scope, elaborate).map_err(|e| match &spmd {
        Some((a, _)) if e.0.contains(a.as_str()) => UsageError(format!(
            "{} (with `spmd_axis_name = \"{a}\"` the program's types and collectives are written over the other mesh axes: each batch element lives on one shard of `{a}`, and a collective over it would combine different elements; JAX refuses it)",
            e.0
        )),
        _ => e,
    })?;
    if rule.pending.is_some() || rule.uneven.is_some() {
        return Err(err(
            "vmap",
            "`vmap` of a rule with pending kinds or uneven shards is not checked".into(),
        ));
    }
    let names: Vec<String> = if s.names.is_empty() {
        match &rule.op.op {
            spmd_interp::Op::Local(f) => f.vars.clone(),
            _ => (0..rule.op.inputs.len()).map(|i| format!("x{i}")).collect(),
        }
    } else {
        s.names.clone()
    };
    let mut p = build(
        &rule.op,
        &names,
        in_dims,
        out_axis,
        rules,
        &rule.meshes,
        rule.has_backward,
    )
    .map_err(|e| err("vmap", e))?;
    p.spmd = spmd;
    rule.elaboration.push(VmapReport::elaboration(&p));
    rule.batching = Some(crate::batching::Transform::Program(Box::new(p)));
    Ok(rule)
}

// ---------------------------------------------------------------------------
// Generated programs under `vmap` (SPEC.md §24.11).

/// The batching rules of a system's generated programs, or why it has none.
pub fn rules_of(system: &str) -> Result<Rules, String> {
    match system {
        "jax" => Ok(Rules::Jax),
        "nabla" => Ok(Rules::Nabla),
        "spmd_types" => Ok(Rules::SpmdTypes),
        s => Err(format!(
            "no batching rule of {s} is modelled (SPEC.md §24.9): programs under vmap are generated for jax, nabla and spmd_types"
        )),
    }
}

/// One generated program under one `in_axes`, checked.
pub struct GeneratedRow {
    pub name: String,
    pub program: String,
    pub in_axes: String,
    pub report: Result<VmapReport, String>,
}

/// Every program `programs --dialect SYS --depth N` accepts, under `vmap`
/// with every input batched at 0, every input batched at 1 (on the shapes
/// of rank 1 or more), and (with two or more inputs) only the first
/// batched at 0; each checked as a rule with that `vmap` (§24.9).
pub fn generated(sys: &spmd_dialects::System, depth: usize) -> Result<Vec<GeneratedRow>, String> {
    use rayon::prelude::*;
    let rules = rules_of(sys.name)?;
    let scope = spmd_generators::Scope::default();
    let items = crate::generated::generate(sys, depth);
    let mut jobs = Vec::new();
    for it in &items {
        let crate::generated::Typing::Accepted(t) = &it.typing else {
            continue;
        };
        let n = t.spec.names.len();
        let mut axes: Vec<Vec<Bdim>> = vec![vec![Some(0); n], vec![Some(1); n]];
        if n > 1 {
            let mut first = vec![None; n];
            first[0] = Some(0);
            axes.push(first);
        }
        for a in axes {
            jobs.push((t.spec.clone(), a));
        }
    }
    Ok(jobs
        .par_iter()
        .map(|(spec, in_dims)| {
            let text = |d: &[Bdim]| {
                let v: Vec<String> = d
                    .iter()
                    .map(|x| x.map_or("none".into(), |x| x.to_string()))
                    .collect();
                format!("[{}]", v.join(", "))
            };
            let program = spec
                .step
                .iter()
                .map(|s| {
                    s.expr
                        .clone()
                        .or_else(|| s.forward.clone())
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join("; ");
            let report = crate::generated::build_spec(spec, &scope).and_then(|rule| {
                let p = build(
                    &rule.op,
                    &spec.names,
                    in_dims.clone(),
                    0,
                    rules,
                    &rule.meshes,
                    rule.has_backward,
                )?;
                Ok(check(&p))
            });
            GeneratedRow {
                name: spec.name.clone(),
                program,
                in_axes: text(in_dims),
                report,
            }
        })
        .collect())
}

/// `programs --dialect SYS --depth N --vmap`: prints the report; whether a
/// program failed because of vmap (exit 1).
pub fn programs_cmd(
    sys: &spmd_dialects::System,
    depth: usize,
    json: bool,
) -> Result<bool, UsageError> {
    let rows = generated(sys, depth).map_err(UsageError)?;
    let (text, body, failed) = generated_report(sys.name, depth, &rows);
    if json {
        let body = json!({"mode": "vmap", "report": body});
        let doc = crate::words::document("programs", body);
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    } else {
        print!("{text}");
    }
    Ok(failed)
}

/// The text and JSON of a generated run; whether any program came out
/// unsound.
pub fn generated_report(
    system: &str,
    depth: usize,
    rows: &[GeneratedRow],
) -> (String, Value, bool) {
    let key = |r: &GeneratedRow| match &r.report {
        Ok(rep) => rep.key(),
        Err(e) if e.contains("spmd_types refuses") => "refused by spmd_types".into(),
        Err(_) => "not modelled".into(),
    };
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for r in rows {
        *counts.entry(key(r)).or_default() += 1;
    }
    // Only a failure of vmap fails the run: a program that fails alone is
    // `programs`' finding, counted here as "before vmap".
    let vmap_failed = |r: &GeneratedRow| {
        r.report
            .as_ref()
            .is_ok_and(|rep| rep.failed() && !rep.key().ends_with("before vmap"))
    };
    let failed = rows.iter().any(vmap_failed);
    let mut text = format!(
        "{system} depth {depth} under vmap (SPEC.md §24.11): {} programs x in_axes checked\n",
        rows.len()
    );
    for (k, n) in &counts {
        text.push_str(&format!("  {k}: {n}\n"));
    }
    let shown = rows.iter().filter(|r| vmap_failed(r)).take(10).chain(
        rows.iter()
            .filter(|r| !vmap_failed(r) && key(r) != "sound")
            .take(3),
    );
    for r in shown {
        let why = match &r.report {
            Ok(rep) => rep.line().unwrap_or_else(|| rep.word()),
            Err(e) => e.clone(),
        };
        text.push_str(&format!(
            "  {} ({}) at in_axes {}: {}\n",
            r.name, r.program, r.in_axes, why
        ));
    }
    let json = serde_json::json!({
        "system": system,
        "depth": depth,
        "checked": rows.len(),
        "counts": counts,
        "failed": failed,
        "programs": rows.iter().map(|r| serde_json::json!({
            "name": r.name,
            "program": r.program,
            "in_axes": r.in_axes,
            "verdict": key(r),
            "summary": match &r.report { Ok(rep) => rep.word(), Err(e) => e.clone() },
        })).collect::<Vec<_>>(),
    });
    (text, json, failed)
}

// ---------------------------------------------------------------------------
// `run` of a program under `vmap` (SPEC.md §24.13).

/// One run of a program under `vmap` on a job's batched values.
pub struct ProgramRun {
    pub rule: VmapProgram,
    pub mesh: Mesh,
    /// Per element: each input per rank, and the program's result per rank.
    pub elements: Vec<(Vec<Vec<Tensor>>, Vec<Tensor>)>,
    /// The stack of the elements' results at `out_axes`, per rank.
    pub expected: Option<Vec<Tensor>>,
    /// The batched program's result (JAX's rules, grad(vmap(f))'s forward).
    pub got: Result<Vec<Tensor>, String>,
    /// With `--check`, the rule's check (§24.9).
    pub check: Option<VmapReport>,
    /// The job's batched inputs, per rank.
    pub inputs: Vec<PerRank>,
}

/// A job with a `vmap` and an `op` or steps (or a collective with its
/// backward or JVP): `None` when it has no `vmap` or is one collective
/// alone (§24.7 runs that).
pub fn run(
    job: &spmd_syntax::job::Job,
    file: &str,
    text: &str,
    check_it: bool,
) -> Result<Option<ProgramRun>, UsageError> {
    let Some(v) = &job.vmap else {
        return Ok(None);
    };
    let one_collective = job.forward.is_some()
        && job.op.is_none()
        && job.steps.is_empty()
        && job.backward.is_none()
        && job.jvp.is_none();
    if one_collective {
        return Ok(None);
    }
    if v.spmd_axis_name.is_some() {
        return Err(UsageError(
            "vmap.spmd_axis_name: `run` batches over no mesh axis; check the rule with `spmd-check check` (SPEC.md §24.12)".into(),
        ));
    }
    if job.batched.is_some() || job.cotangent.is_some() {
        return Err(UsageError(
            "`batched` and `cotangent` do not go with a program under `vmap` (SPEC.md §24.13)"
                .into(),
        ));
    }
    let m = crate::job::job_mesh(&job.mesh)?;
    let output = job
        .output
        .clone()
        .ok_or_else(|| UsageError("output: a job with `vmap` writes its output type".into()))?;
    let spec = spmd_syntax::rule::RuleSpec {
        name: job.name.clone().unwrap_or_else(|| "job".into()),
        dialect: job.dialect.clone(),
        op: job.op.clone(),
        forward: job.forward.clone(),
        backward: job.backward.clone(),
        inputs: job.inputs.iter().map(|x| x.ty.clone()).collect(),
        output,
        jvp: job.jvp.clone(),
        mesh: Some(m.axes.iter().map(|a| (a.name.clone(), a.size)).collect()),
        names: job.names.clone(),
        step: job.steps.clone(),
        vars: job.vars.clone(),
        no_grad: job.no_grad.clone(),
        meaning: job.meaning.clone(),
        vmap: Some(v.clone()),
        batched: None,
    };
    let rule =
        crate::rules::build(file, text, &[spec], &spmd_generators::Scope::default())?.remove(0);
    let Some(crate::batching::Transform::Program(r)) = rule.batching else {
        return Ok(None);
    };
    let r = *r;
    let xs: Vec<PerRank> = job
        .inputs
        .iter()
        .enumerate()
        .map(|(i, x)| crate::job::read_per_rank(&x.per_rank, &m, &format!("inputs[{i}].per_rank")))
        .collect::<Result<_, _>>()?;
    // The batch size: the length of every batched input's batch dim.
    let mut k = None;
    for (i, (x, d)) in xs.iter().zip(&r.in_dims).enumerate() {
        let Some(d) = d else { continue };
        let len = *x.shape().get(*d).ok_or_else(|| {
            UsageError(format!(
                "inputs[{i}].per_rank: shape {:?} has no batch dim {d}",
                x.shape()
            ))
        })?;
        if k.is_some_and(|k| k != len) {
            return Err(UsageError(format!(
                "inputs[{i}].per_rank: a batch of {len} where another input has {}",
                k.unwrap_or(0)
            )));
        }
        k = Some(len);
    }
    let k = k.unwrap_or(0);
    if !(1..=64).contains(&k) {
        return Err(UsageError(format!(
            "a batch of {k} elements: `run` takes 1 to 64"
        )));
    }
    let elems: Vec<Vec<Vec<Tensor>>> = (0..k)
        .map(|e| {
            xs.iter()
                .zip(&r.in_dims)
                .map(|(x, d)| match d {
                    Some(d) => x
                        .tensors
                        .iter()
                        .map(|t| spmd_semantics::batch::select(t, *d, e).expect("checked"))
                        .collect(),
                    None => x.tensors.clone(),
                })
                .collect()
        })
        .collect();
    for e in &elems {
        for (i, (x, t)) in e.iter().zip(&r.op.inputs).enumerate() {
            spmd_semantics::perrank::well_formed(&m, t, &PerRank { tensors: x.clone() }).map_err(
                |w| {
                    UsageError(format!(
                        "inputs[{i}].per_rank: an element is not well formed for its type: {w:?}"
                    ))
                },
            )?;
        }
    }
    let shapes: Vec<Shape> = elems[0].iter().map(|x| x[0].shape.clone()).collect();
    r.program.infer(&m, &shapes).map_err(|e| {
        UsageError(format!(
            "inputs: the program does not take elements of shapes {shapes:?}: {e}"
        ))
    })?;
    let mut elements = Vec::new();
    for e in &elems {
        let y = r
            .program
            .forward(&m, &per_rank(e))
            .map_err(|err| UsageError(format!("the program refuses an element: {err:?}")))?
            .y
            .tensors;
        elements.push((e.clone(), y));
    }
    let results: Vec<Vec<Tensor>> = elements.iter().map(|e| e.1.clone()).collect();
    let expected = stack_per_rank(&results, r.out_axis).ok();
    let got = r
        .rules
        .batch(&r.program, &m, &shapes, &r, k, Order::GradOfVmap)
        .map_err(|e| e.to_string())
        .and_then(|q| {
            q.forward(&m, &xs)
                .map(|f| f.y.tensors)
                .map_err(|e| format!("{e:?}"))
        });
    let check = check_it.then(|| check(&r));
    Ok(Some(ProgramRun {
        rule: r,
        mesh: m,
        elements,
        expected,
        got,
        check,
        inputs: xs,
    }))
}

impl ProgramRun {
    /// Whether the batched program gives the stack on these values.
    pub fn holds_here(&self) -> bool {
        matches!((&self.expected, &self.got), (Some(e), Ok(g)) if e == g)
    }
    pub fn exit_code(&self) -> u8 {
        let checked_bad = self.check.as_ref().is_some_and(VmapReport::failed);
        u8::from(!self.holds_here() || checked_bad)
    }
    pub fn to_text(&self) -> String {
        let r = &self.rule;
        let mut s = format!("{}\n", VmapReport::elaboration(r));
        for (i, (e, y)) in self.elements.iter().enumerate() {
            let ins: Vec<String> = e
                .iter()
                .enumerate()
                .map(|(a, x)| {
                    format!(
                        "{} = {}",
                        r.names.get(a).cloned().unwrap_or_else(|| format!("x{a}")),
                        show(x)
                    )
                })
                .collect();
            s.push_str(&format!(
                "element {i}: {}\n  result: {}\n",
                ins.join("; "),
                show(y)
            ));
        }
        s.push_str(&format!(
            "stack of the results at dim {}: {}\n",
            r.out_axis,
            self.expected
                .as_ref()
                .map_or("none (the results do not stack)".into(), |e| show(e))
        ));
        s.push_str(&format!(
            "the batched program ({}): {}\n",
            r.rules.name(),
            match &self.got {
                Ok(g) => show(g),
                Err(e) => format!("refused: {e}"),
            }
        ));
        s.push_str(if self.holds_here() {
            "V1 holds on these values\n"
        } else {
            "V1 FAILS on these values (SPEC.md §24.9)\n"
        });
        if let Some(c) = &self.check {
            s.push_str(&format!("check: {}\n", c.word()));
            s.push_str(&c.report());
        }
        s
    }
    pub fn to_json(&self) -> Value {
        let r = &self.rule;
        let strings = |xs: &[Tensor]| xs.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let mut j = json!({
            "mesh": self.mesh.axes.iter().map(|a| (a.name.clone(), json!(a.size))).collect::<serde_json::Map<_, _>>(),
            "op": r.program.describe(),
            "signature": format!(
                "{} -> {}",
                r.op.inputs.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
                r.op.output
            ),
            "batching": {
                "program": true,
                "rules": r.rules.name(),
                "in_axes": r.in_dims,
                "out_axes": r.out_axis,
            },
            "inputs": self.inputs.iter().zip(&r.op.inputs).map(|(x, t)| json!({
                "type": t.to_string(),
                "per_rank": strings(&x.tensors),
            })).collect::<Vec<_>>(),
            "output": {
                "type": r.op.output.to_string(),
                "per_rank": match &self.got { Ok(g) => strings(g), Err(_) => vec![] },
                "refused": self.got.as_ref().err(),
            },
            "elements": self.elements.iter().map(|(e, y)| json!({
                "inputs": e.iter().map(|x| strings(x)).collect::<Vec<_>>(),
                "result": strings(y),
            })).collect::<Vec<_>>(),
            "expected": self.expected.as_deref().map(strings),
            "holds_here": self.holds_here(),
        });
        if let Some(c) = &self.check {
            j["check"] = c.json();
        }
        j
    }
}
