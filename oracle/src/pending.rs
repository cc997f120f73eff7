//! The checks of pending reductions beyond sums (SPEC.md §21): whether a
//! local op defers a Partial(k) value (F1, F3 over a bounded scope, exact,
//! with the exact field of §19 for transcendental ops), whether a collective
//! of a kind keeps the value it reduces (§21.3), the gradients of the
//! linear kinds and the JVPs of max and min (§21.4).
//!
//! A placement (`Place`) is one axis of a `Type` (`Type::place`); what it
//! denotes is `pending::denote`, the fold `perrank::Projection` uses too;
//! the collectives are the catalogue's (`collective::Coll`). Conventions:
//! `f` the local function, `k` a kind, `n` the ranks of the axis,
//! `xs[i][r]` input i's tensor on rank r, `g` a cotangent.

use crate::verdict::Tally;
use serde_json::{json, Value};
use spmd_interp::collective::{ring_fold, Coll};
use spmd_interp::eval::{eval, eval_into, infer, Ctx, EvalError};
use spmd_interp::expr::LocalFn;
use spmd_interp::transcendental::{
    eval as xeval_expr, is_transcendental, representable, XCtx, XEvalError, XT,
};
use spmd_semantics::expoly::{XErr, X};
use spmd_semantics::pending::{
    combine, denote, denote_into, denotes, fold_col, PartialKind, Place, ALL_KINDS,
};
use spmd_semantics::tensor::same_shape;
use spmd_semantics::{Shape, Tensor, Q};
use std::fmt;

/// The bounded scope of SPEC.md §21.2.
#[derive(Clone, Debug)]
pub struct Scope {
    pub ranks: Vec<usize>,
    pub shapes: Vec<Shape>,
    pub values: Vec<Q>,
    /// Cases with more grid points are skipped and counted.
    pub max_points: u64,
}

impl Default for Scope {
    fn default() -> Scope {
        Scope {
            ranks: vec![1, 2, 3, 4],
            shapes: vec![
                vec![],
                vec![1],
                vec![2],
                vec![1, 1],
                vec![1, 2],
                vec![2, 1],
                vec![2, 2],
            ],
            values: [(0, 1), (1, 1), (-1, 1), (2, 1), (1, 2), (-2, 1)]
                .iter()
                .map(|&(a, b)| Q::frac(a, b))
                .collect(),
            max_points: 50_000,
        }
    }
}

impl Scope {
    /// The scope `conform` and the tests use: cases of at most 6^5 grid
    /// points (two ranks with two scalars each, or four ranks with one).
    pub fn conform() -> Scope {
        Scope {
            max_points: 7_776,
            ..Scope::default()
        }
    }

    pub fn describe(&self) -> String {
        let vals: Vec<String> = self.values.iter().map(|v| v.to_string()).collect();
        format!(
            "one axis of {} ranks; local shapes {}; every value in {{{}}}; cases over {} grid points skipped",
            self.ranks
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.shapes
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(" "),
            vals.join(", "),
            self.max_points
        )
    }
}

/// A minimal instance where the output does not denote the meaning.
#[derive(Clone, Debug)]
pub struct Counterexample {
    pub n: usize,
    /// Per input, its per-rank tensors (an Invariant input on every rank).
    pub inputs: Vec<Vec<Tensor>>,
    /// f on the inputs' denotations.
    pub expected: Tensor,
    /// Per rank, f on that rank's tensors.
    pub per_rank: Vec<Tensor>,
    /// What the output placement makes of `per_rank` (`None`: not well
    /// formed, e.g. an Invariant output that differs between ranks).
    pub denoted: Option<Tensor>,
    /// For a transcendental op (SPEC.md §21.2) the values live in the exact
    /// field of §19.2, and this holds them as the field writes them; the
    /// three tensors above are then empty.
    pub field: Option<FieldValues>,
}

/// A transcendental counterexample's values (SPEC.md §21.2).
#[derive(Clone, Debug)]
pub struct FieldValues {
    pub expected: String,
    pub per_rank: Vec<String>,
    /// `None`: the per-rank outputs are not well formed for the placement.
    pub denoted: Option<String>,
    /// How the difference was decided: `exactly` (normal forms, §19.2) or
    /// `by disjoint enclosures` (§19.3).
    pub decided: &'static str,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |ts: &[Tensor]| {
            ts.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(f, "{} ranks; ", self.n)?;
        for (i, x) in self.inputs.iter().enumerate() {
            write!(f, "input {i} per rank [{}]; ", show(x))?;
        }
        if let Some(fv) = &self.field {
            return write!(
                f,
                "per-rank outputs [{}] denote {}, but f of the inputs' denotations is {} (decided {})",
                fv.per_rank.join(", "),
                match &fv.denoted {
                    Some(t) => t.clone(),
                    None => "nothing (not the same on every rank)".into(),
                },
                fv.expected,
                fv.decided
            );
        }
        write!(
            f,
            "per-rank outputs [{}] denote {}, but f of the inputs' denotations is {}",
            show(&self.per_rank),
            match &self.denoted {
                Some(t) => t.to_string(),
                None => "nothing (not the same on every rank)".into(),
            },
            self.expected
        )
    }
}

/// The verdict of a pending-kind check: the oracle's one `Verdict`, whose
/// counterexample is the per-rank values of §21.2. A run that defers is
/// `Sound` and never a proof (the scope is bounded); nothing on more than
/// one rank, or nothing in the domain, is `Vacuous`; no instance decided
/// is `Undetermined` (SPEC.md §7.1).
pub type Verdict = crate::verdict::Verdict<Counterexample>;

/// What a pending-kind run counted, before a verdict per output: `passed`
/// holds every instance in the domain that was decided (failures are
/// moved out per output by `conclude`), and it is never a proof grid.
pub fn tally() -> Tally {
    Tally::default()
}

/// The verdict of one output: `failed` of the run's decided instances
/// violated it, the first-ordered of them is `cex`.
pub fn conclude(run: &Tally, failed: u64, cex: Option<Counterexample>) -> Verdict {
    let mut t = run.clone();
    t.passed -= failed;
    t.failed = failed;
    t.proof_grid = false;
    Verdict::conclude(t, cex.map(Box::new))
}

impl Counterexample {
    /// F1 when the per-rank outputs are not well formed for the output
    /// placement (no value denoted, in the exact field for a
    /// transcendental op), else F3.
    pub fn property(&self) -> &'static str {
        let ill = match &self.field {
            Some(fv) => fv.denoted.is_none(),
            None => self.denoted.is_none(),
        };
        if ill {
            "F1"
        } else {
            "F3"
        }
    }
}

impl crate::verdict::Verdict<Counterexample> {
    /// The word of SPEC.md §21.2 for the verdict.
    pub fn key(&self) -> &'static str {
        match self {
            Verdict::Sound { .. } => "defers",
            Verdict::Unsound { .. } => "refuted",
            Verdict::Vacuous { .. } => "vacuous",
            Verdict::Undetermined { .. } => "undetermined",
        }
    }
    /// Why nothing was decided, in §21's words.
    pub fn reason(&self) -> Option<String> {
        let c = self.tally();
        match self {
            Verdict::Vacuous { .. } if c.distributed_cases == 0 => {
                Some("no case on more than one rank within the cap".into())
            }
            Verdict::Vacuous { .. } => Some("every instance is outside the domain".into()),
            Verdict::Undetermined { tally } => Some(tally.stopped.clone().unwrap_or_else(|| {
                format!(
                    "no instance decided: on all {} the values left the exact field or the enclosures overlapped",
                    tally.undecided
                )
            })),
            _ => None,
        }
    }
    /// The instances in the domain that were decided, passed or failed.
    pub fn decided(&self) -> u64 {
        let c = self.tally();
        c.passed + c.failed
    }
    pub fn text(&self) -> String {
        let c = self.tally();
        match self {
            Verdict::Sound { .. } => format!(
                "defers (bounded: {} instances exhaustive on {} cases, {} on more than one rank; {} outside the domain; {} cases beyond the cap{})",
                self.decided(), c.cases, c.distributed_cases, c.outside_domain, c.cases_beyond_cap,
                undecided_note(c)
            ),
            Verdict::Unsound { violation, .. } => format!("counterexample: {violation}"),
            _ => format!("{} ({})", self.key(), self.reason().unwrap_or_default()),
        }
    }
    pub fn json(&self) -> Value {
        let c = self.tally();
        let mut v = json!({"verdict": self.key(), "instances": self.decided(), "cases": c.cases,
            "multi_rank_cases": c.distributed_cases, "outside_domain": c.outside_domain,
            "beyond_cap": c.cases_beyond_cap});
        if c.undecided > 0 {
            v["undecided"] = json!(c.undecided);
        }
        match self {
            Verdict::Unsound { violation: cex, .. } if cex.field.is_some() => {
                let fv = cex.field.as_ref().expect("field values");
                let ts = |x: &[Tensor]| x.iter().map(|t| t.to_string()).collect::<Vec<_>>();
                v["counterexample"] = json!({
                    "ranks": cex.n,
                    "inputs": cex.inputs.iter().map(|x| ts(x)).collect::<Vec<_>>(),
                    "per_rank_outputs": fv.per_rank,
                    "denoted": fv.denoted,
                    "expected": fv.expected,
                    "decided": fv.decided,
                });
            }
            Verdict::Unsound { violation: cex, .. } => {
                let ts = |x: &[Tensor]| x.iter().map(|t| t.to_string()).collect::<Vec<_>>();
                v["counterexample"] = json!({
                    "ranks": cex.n,
                    "inputs": cex.inputs.iter().map(|x| ts(x)).collect::<Vec<_>>(),
                    "per_rank_outputs": ts(&cex.per_rank),
                    "denoted": cex.denoted.as_ref().map(|t| t.to_string()),
                    "expected": cex.expected.to_string(),
                });
            }
            Verdict::Vacuous { .. } | Verdict::Undetermined { .. } => {
                v["reason"] = json!(self.reason())
            }
            Verdict::Sound { .. } => {}
        }
        v
    }
}

/// The undecided instances of a transcendental check, where there are any.
fn undecided_note(c: &Tally) -> String {
    match c.undecided {
        0 => String::new(),
        u => format!(
            "; {u} undecided (overlapping enclosures or a value beyond the exact field), not counted as passes"
        ),
    }
}

fn global_shape(p: Place, local: &[usize], n: usize) -> Option<Shape> {
    let mut s = local.to_vec();
    if let Place::Shard(d) = p {
        *s.get_mut(d)? *= n;
    }
    Some(s)
}

fn free(p: Place, numel: usize, n: usize) -> usize {
    match p {
        Place::Inv => numel,
        Place::Part(_) | Place::Shard(_) => numel * n,
    }
}

/// The cases of the scope for inputs placed `ins`: (n, local shapes),
/// ordered by ranks, then free scalars. Shape tuples the op rejects (locally
/// or globally) are left out.
fn cases(f: &LocalFn, ins: &[Place], scope: &Scope) -> Vec<(usize, Vec<Shape>)> {
    let m = ins.len();
    let mut out = Vec::new();
    for &n in &scope.ranks {
        let mut tuples: Vec<Vec<Shape>> = vec![vec![]];
        for _ in 0..m {
            tuples = tuples
                .into_iter()
                .flat_map(|t| {
                    scope.shapes.iter().map(move |s| {
                        let mut t = t.clone();
                        t.push(s.clone());
                        t
                    })
                })
                .collect();
        }
        let mut ok: Vec<(usize, Vec<Shape>)> = tuples
            .into_iter()
            .filter(|t| {
                let globals: Option<Vec<Shape>> = ins
                    .iter()
                    .zip(t)
                    .map(|(&p, s)| global_shape(p, s, n))
                    .collect();
                infer(&f.expr, t).is_ok() && globals.is_some_and(|g| infer(&f.expr, &g).is_ok())
            })
            .map(|t| {
                let fr = ins
                    .iter()
                    .zip(&t)
                    .map(|(&p, s)| free(p, s.iter().product(), n))
                    .sum();
                (fr, t)
            })
            .collect();
        ok.sort_by_key(|(fr, _)| *fr);
        out.extend(ok.into_iter().map(|(_, t)| (n, t)));
    }
    out
}

/// A memo is kept when it has at most this many entries (one per code of
/// the values it depends on); above it every instance is evaluated afresh.
const MEMO_CAP: u64 = 1 << 20;

/// Outputs of f memoised by a code of its inputs' values, in one flat
/// buffer (SPEC.md §18): every entry has the same shape.
struct Arena {
    shape: Shape,
    numel: usize,
    /// Per entry: 0 not yet evaluated, 1 outside the domain, 2 evaluated.
    state: Vec<u8>,
    data: Vec<Q>,
}

impl Arena {
    fn new(shape: Shape, entries: usize) -> Arena {
        let numel = shape.iter().product();
        Arena {
            shape,
            numel,
            state: vec![0; entries],
            data: vec![Q::zero(); entries * numel],
        }
    }
    fn get(&self, slot: usize) -> &[Q] {
        &self.data[slot * self.numel..(slot + 1) * self.numel]
    }
    /// Stores `t` (or outside the domain); a shape other than the arena's
    /// is a checker bug.
    fn put(&mut self, slot: usize, t: Result<&Tensor, ()>) -> Result<(), String> {
        match t {
            Err(()) => self.state[slot] = 1,
            Ok(t) => {
                if t.shape != self.shape {
                    return Err(format!(
                        "an output of shape {:?} where {:?} was inferred (checker bug)",
                        t.shape, self.shape
                    ));
                }
                self.data[slot * self.numel..(slot + 1) * self.numel].clone_from_slice(&t.data);
                self.state[slot] = 2;
            }
        }
        Ok(())
    }
}

/// The per-rank outputs of one op, memoised by the local shapes and the
/// local values (a rank's output depends on nothing else), shared by every
/// placement of the op checked on the same scope values.
#[derive(Default)]
pub struct LocalMemo {
    by_shapes: Vec<(Vec<Shape>, Arena)>,
}

/// Everything one case (ranks and local shapes) of `check_places` reuses
/// from instance to instance (SPEC.md §18): the digit positions each
/// input's scalars come from, the inputs' denotations filled in place, f of
/// the denotations memoised by a code of the denoted values, and the
/// per-rank outputs memoised by the rank's local values (`LocalMemo`).
struct CaseWs<'a> {
    f: &'a LocalFn,
    ins: &'a [Place],
    n: usize,
    values: &'a [Q],
    shapes: &'a [Shape],
    /// Per input, the position of its first scalar in the grid index.
    offs: Vec<usize>,
    /// Per input, the local element count.
    numels: Vec<usize>,
    /// Per input, per element of its denotation, the grid position it
    /// reads (for a Partial input: rank 0's, rank r's is `numel * r` on).
    gpos: Vec<Vec<usize>>,
    globals: Vec<Tensor>,
    locals: Vec<Tensor>,
    /// f of the denotations, by the code of the denoted values
    /// (`global_code`); `None` above the cap or on one rank, where the
    /// denotations are rank 0's own tensors and f of them is rank 0's output.
    gmemo: Option<Arena>,
    gslot: usize,
    /// Without a memo: f of the denotations on this instance.
    expected: Tensor,
    /// Per input, the number of codes one element of its denotation has.
    gradix: Vec<usize>,
    /// binom[a][b] = a choose b, for the codes of multisets.
    binom: Vec<Vec<usize>>,
    /// Scratch for one element's digits over the ranks.
    dig: Vec<usize>,
    /// The per-rank outputs' memo (`None` above the cap), its index in the
    /// op's `LocalMemo`, and each rank's slot on this instance.
    memo: Option<usize>,
    slots: Vec<usize>,
    /// Without a memo: per rank, its output on this instance.
    bufs: Vec<Tensor>,
    /// The shape of every per-rank output.
    out_shape: Shape,
    /// Per shard dim of an output, where each element of the concatenation
    /// comes from: (rank, local index).
    shard_maps: Vec<(usize, Vec<(usize, usize)>)>,
    scratch: Tensor,
    ctx: Ctx,
}

/// Per global element, the position it has among `n` pieces of `shape`
/// concatenated along `d`, read back from a concatenation of
/// position-valued tensors so that the layout is `Tensor::concat`'s own.
fn concat_positions(shape: &[usize], n: usize, d: usize) -> Vec<usize> {
    let numel: usize = shape.iter().product();
    let pieces: Vec<Tensor> = (0..n)
        .map(|r| {
            Tensor::new(
                shape.to_vec(),
                (0..numel).map(|l| Q::int((r * numel + l) as i64)).collect(),
            )
        })
        .collect();
    Tensor::concat(&pieces, d)
        .data
        .iter()
        .map(|q| q.to_i64().expect("a position") as usize)
        .collect()
}

impl<'a> CaseWs<'a> {
    fn new(
        f: &'a LocalFn,
        ins: &'a [Place],
        n: usize,
        shapes: &'a [Shape],
        sizes: &[usize],
        values: &'a [Q],
        lmemo: &mut LocalMemo,
    ) -> Result<CaseWs<'a>, String> {
        let mut offs = Vec::with_capacity(ins.len());
        let mut off = 0;
        for &sz in sizes {
            offs.push(off);
            off += sz;
        }
        let numels: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
        let mut gpos = Vec::new();
        let mut globals = Vec::new();
        let mut gshapes = Vec::new();
        for (i, (&p, s)) in ins.iter().zip(shapes).enumerate() {
            let (o, numel) = (offs[i], numels[i]);
            let pos: Vec<usize> = match p {
                Place::Inv | Place::Part(_) => (o..o + numel).collect(),
                Place::Shard(d) => concat_positions(s, n, d).iter().map(|g| o + g).collect(),
            };
            let gs = global_shape(p, s, n).expect("cases keep valid shapes");
            globals.push(Tensor::new(gs.clone(), vec![Q::zero(); pos.len()]));
            gshapes.push(gs);
            gpos.push(pos);
        }
        let locals = shapes
            .iter()
            .zip(&numels)
            .map(|(s, &k)| Tensor::new(s.clone(), vec![Q::zero(); k]))
            .collect();
        let out_shape = infer(&f.expr, shapes)?.0;
        let nvu = values.len();
        let nv = nvu as u64;
        let local_free: usize = numels.iter().sum();
        let entries = u32::try_from(local_free)
            .ok()
            .and_then(|e| nv.checked_pow(e))
            .filter(|&m| m <= MEMO_CAP);
        let memo = entries.map(
            |m| match lmemo.by_shapes.iter().position(|(s, _)| s == shapes) {
                Some(at) => at,
                None => {
                    lmemo
                        .by_shapes
                        .push((shapes.to_vec(), Arena::new(out_shape.clone(), m as usize)));
                    lmemo.by_shapes.len() - 1
                }
            },
        );
        // A Partial(sum | avg) element's denotation depends only on the
        // multiset of its n digits: C(nv + n - 1, n) codes; the others read
        // one digit: nv codes.
        let mut binom = vec![vec![0usize; n + 1]; nvu + n];
        for a in 0..nvu + n {
            binom[a][0] = 1;
            for b in 1..=n.min(a) {
                binom[a][b] = binom[a - 1][b - 1].saturating_add(binom[a - 1][b]);
            }
        }
        let gradix: Vec<usize> = ins
            .iter()
            .map(|p| match p {
                Place::Part(PartialKind::Sum | PartialKind::Avg) if nvu > 0 => {
                    binom[nvu + n - 1][n]
                }
                _ => nvu,
            })
            .collect();
        let gmemo = match n {
            1 => None,
            _ => gpos
                .iter()
                .zip(&gradix)
                .try_fold(1u64, |acc, (pos, &rad)| {
                    (0..pos.len()).try_fold(acc, |a, _| a.checked_mul(rad as u64))
                })
                .filter(|&m| m <= MEMO_CAP)
                .map(|m| -> Result<Arena, String> {
                    Ok(Arena::new(infer(&f.expr, &gshapes)?.0, m as usize))
                })
                .transpose()?,
        };
        Ok(CaseWs {
            f,
            ins,
            n,
            values,
            shapes,
            offs,
            numels,
            gpos,
            globals,
            locals,
            gmemo,
            gslot: 0,
            expected: Tensor::zeros(&[]),
            gradix,
            binom,
            dig: Vec::with_capacity(n),
            memo,
            slots: vec![0; n],
            bufs: vec![Tensor::zeros(&[]); n],
            out_shape,
            shard_maps: Vec::new(),
            scratch: Tensor::zeros(&[]),
            ctx: Ctx::default(),
        })
    }

    /// The grid position of input `i`'s element `e` on rank `r`.
    fn pos(&self, i: usize, r: usize, e: usize) -> usize {
        match self.ins[i] {
            Place::Inv => self.offs[i] + e,
            Place::Part(_) | Place::Shard(_) => self.offs[i] + r * self.numels[i] + e,
        }
    }

    /// Fills rank `r`'s local inputs from the grid index.
    fn fill_locals(&mut self, idx: &[usize], r: usize) {
        for i in 0..self.ins.len() {
            for e in 0..self.numels[i] {
                let v = &self.values[idx[self.pos(i, r, e)]];
                self.locals[i].data[e].clone_from(v);
            }
        }
    }

    /// The code of the inputs' denotations on this instance: per element
    /// of each denotation, the digit it reads (Replicate, Shard, and max or
    /// min: the digit of the extreme value), or for a Partial(sum | avg)
    /// the rank of the multiset of its digits over the ranks; equal codes
    /// denote equal values.
    fn global_code(&mut self, idx: &[usize]) -> usize {
        let n = self.n;
        let mut code = 0usize;
        for i in 0..self.ins.len() {
            let numel = self.numels[i];
            let rad = self.gradix[i];
            for &p in &self.gpos[i] {
                let c = match self.ins[i] {
                    Place::Inv | Place::Shard(_) => idx[p],
                    Place::Part(k @ (PartialKind::Max | PartialKind::Min)) => {
                        let mut best = idx[p];
                        for r in 1..n {
                            let d = idx[p + r * numel];
                            let (v, b) = (&self.values[d], &self.values[best]);
                            if (k == PartialKind::Max && v > b) || (k == PartialKind::Min && v < b)
                            {
                                best = d;
                            }
                        }
                        best
                    }
                    Place::Part(_) => {
                        self.dig.clear();
                        self.dig.extend((0..n).map(|r| idx[p + r * numel]));
                        self.dig.sort_unstable();
                        self.dig
                            .iter()
                            .enumerate()
                            .map(|(j, &d)| self.binom[d + j][j + 1])
                            .sum()
                    }
                };
                code = code * rad + c;
            }
        }
        code
    }

    /// Fills the inputs' denotations from the grid index and evaluates f on
    /// them into `out`.
    fn eval_globals(&mut self, idx: &[usize], to_scratch: bool) -> Result<(), EvalError> {
        let n = self.n;
        for i in 0..self.ins.len() {
            let numel = self.numels[i];
            let g = &mut self.globals[i];
            match self.ins[i] {
                Place::Inv | Place::Shard(_) => {
                    for (slot, &p) in g.data.iter_mut().zip(&self.gpos[i]) {
                        slot.clone_from(&self.values[idx[p]]);
                    }
                }
                Place::Part(k) => {
                    for (slot, &p) in g.data.iter_mut().zip(&self.gpos[i]) {
                        *slot = fold_col(k, n, (0..n).map(|r| &self.values[idx[p + r * numel]]));
                    }
                }
            }
        }
        let out = match to_scratch {
            true => &mut self.scratch,
            false => &mut self.expected,
        };
        eval_into(&self.f.expr, &self.globals, &mut self.ctx, out)
    }

    /// Evaluates one instance: `Ok(false)` when it is outside the domain
    /// (f divides by zero on the denotations or on some rank, tried in that
    /// order), `Ok(true)` when f of the denotations and the per-rank
    /// outputs are ready.
    fn instance(&mut self, idx: &[usize], lmemo: &mut LocalMemo) -> Result<bool, String> {
        if self.gmemo.is_some() {
            let slot = self.global_code(idx);
            self.gslot = slot;
            if self.gmemo.as_ref().expect("memo").state[slot] == 0 {
                let res = self.eval_globals(idx, true);
                let gm = self.gmemo.as_mut().expect("memo");
                match res {
                    Ok(()) => gm.put(slot, Ok(&self.scratch))?,
                    Err(EvalError::DivByZero) => gm.put(slot, Err(()))?,
                    Err(EvalError::Shape(s)) => return Err(s),
                }
            }
            if self.gmemo.as_ref().expect("memo").state[slot] == 1 {
                return Ok(false);
            }
        } else if self.n > 1 || self.memo.is_none() {
            match self.eval_globals(idx, false) {
                Ok(()) => {}
                Err(EvalError::DivByZero) => return Ok(false),
                Err(EvalError::Shape(s)) => return Err(s),
            }
        }
        // On one rank with a memo, f of the denotations is rank 0's output
        // (the same tensors), evaluated next and in the same order.
        let nv = self.values.len();
        for r in 0..self.n {
            match self.memo {
                Some(m) => {
                    let mut slot = 0usize;
                    for i in 0..self.ins.len() {
                        for e in 0..self.numels[i] {
                            slot = slot * nv + idx[self.pos(i, r, e)];
                        }
                    }
                    self.slots[r] = slot;
                    if lmemo.by_shapes[m].1.state[slot] == 0 {
                        self.fill_locals(idx, r);
                        let res =
                            eval_into(&self.f.expr, &self.locals, &mut self.ctx, &mut self.scratch);
                        let arena = &mut lmemo.by_shapes[m].1;
                        match res {
                            Ok(()) => arena.put(slot, Ok(&self.scratch))?,
                            Err(EvalError::DivByZero) => arena.put(slot, Err(()))?,
                            Err(EvalError::Shape(s)) => return Err(s),
                        }
                    }
                    if lmemo.by_shapes[m].1.state[slot] == 1 {
                        return Ok(false);
                    }
                }
                None => {
                    self.fill_locals(idx, r);
                    match eval_into(&self.f.expr, &self.locals, &mut self.ctx, &mut self.bufs[r]) {
                        Ok(()) => {}
                        Err(EvalError::DivByZero) => return Ok(false),
                        Err(EvalError::Shape(s)) => return Err(s),
                    }
                    if self.bufs[r].shape != self.out_shape {
                        return Err("a per-rank output of another shape (checker bug)".into());
                    }
                }
            }
        }
        Ok(true)
    }

    /// Rank `r`'s output on the current instance (of shape `out_shape`).
    fn rank_out<'m>(&'m self, lmemo: &'m LocalMemo, r: usize) -> &'m [Q] {
        match self.memo {
            Some(m) => lmemo.by_shapes[m].1.get(self.slots[r]),
            None => &self.bufs[r].data,
        }
    }

    /// f of the denotations on the current instance: (shape, data).
    fn expected<'m>(&'m self, lmemo: &'m LocalMemo) -> (&'m [usize], &'m [Q]) {
        match (&self.gmemo, self.n, self.memo) {
            (Some(g), _, _) => (&g.shape, g.get(self.gslot)),
            (None, 1, Some(_)) => (&self.out_shape, self.rank_out(lmemo, 0)),
            _ => (&self.expected.shape, &self.expected.data),
        }
    }

    /// Whether the per-rank outputs, read under `out`, denote f of the
    /// denotations: `denote(out, per_rank) == Some(expected)`, compared in
    /// place.
    fn matches(&mut self, lmemo: &LocalMemo, out: Place) -> bool {
        let n = self.n;
        // On one rank with a memo, f of the denotations is rank 0's output
        // itself, and Replicate and every Partial(k) of one tensor denote
        // that tensor (exactly: 0 + x = x, x / 1 = x): nothing to compare.
        if n == 1 && self.memo.is_some() && !matches!(out, Place::Shard(_)) {
            return true;
        }
        if let Place::Shard(d) = out {
            if d < self.out_shape.len() && !self.shard_maps.iter().any(|(dd, _)| *dd == d) {
                let numel: usize = self.out_shape.iter().product::<usize>().max(1);
                let map = concat_positions(&self.out_shape, n, d)
                    .into_iter()
                    .map(|g| (g / numel, g % numel))
                    .collect();
                self.shard_maps.push((d, map));
            }
        }
        let (eshape, exp) = self.expected(lmemo);
        let first = &self.out_shape;
        match out {
            Place::Inv => {
                same_shape(first, eshape) && (0..n).all(|r| self.rank_out(lmemo, r) == exp)
            }
            Place::Part(k) => {
                same_shape(first, eshape)
                    && (0..exp.len()).all(|e| {
                        let col = (0..n).map(|r| &self.rank_out(lmemo, r)[e]);
                        match k {
                            PartialKind::Max => col.max().expect("n >= 1") == &exp[e],
                            PartialKind::Min => col.min().expect("n >= 1") == &exp[e],
                            _ => fold_col(k, n, col) == exp[e],
                        }
                    })
            }
            Place::Shard(d) => {
                if d >= first.len()
                    || first.len() != eshape.len()
                    || (0..first.len())
                        .any(|j| eshape[j] != if j == d { first[j] * n } else { first[j] })
                {
                    return false;
                }
                let map = &self
                    .shard_maps
                    .iter()
                    .find(|(dd, _)| *dd == d)
                    .expect("made above")
                    .1;
                map.iter()
                    .enumerate()
                    .all(|(g, &(r, l))| self.rank_out(lmemo, r)[l] == exp[g])
            }
        }
    }

    /// The counterexample of the current instance for `out`.
    fn counterexample(&self, lmemo: &LocalMemo, idx: &[usize], out: Place) -> Counterexample {
        let n = self.n;
        let inputs: Vec<Vec<Tensor>> = (0..self.ins.len())
            .map(|i| {
                (0..n)
                    .map(|r| {
                        Tensor::new(
                            self.shapes[i].clone(),
                            (0..self.numels[i])
                                .map(|e| self.values[idx[self.pos(i, r, e)]].clone())
                                .collect(),
                        )
                    })
                    .collect()
            })
            .collect();
        let per_rank: Vec<Tensor> = (0..n)
            .map(|r| Tensor::new(self.out_shape.clone(), self.rank_out(lmemo, r).to_vec()))
            .collect();
        let (es, ed) = self.expected(lmemo);
        Counterexample {
            n,
            inputs,
            expected: Tensor::new(es.to_vec(), ed.to_vec()),
            denoted: denote(out, &per_rank),
            per_rank,
            field: None,
        }
    }
}

/// A case's free scalars per input and its grid points (`nv` values per
/// scalar), counted in `counts`: `None` (and counted beyond the cap) when
/// the points exceed `scope.max_points`.
fn case_points(
    ins: &[Place],
    shapes: &[Vec<usize>],
    n: usize,
    nv: u64,
    scope: &Scope,
    counts: &mut Tally,
) -> Option<(Vec<usize>, u64)> {
    let sizes: Vec<usize> = ins
        .iter()
        .zip(shapes)
        .map(|(&p, s)| free(p, s.iter().product(), n))
        .collect();
    let total: usize = sizes.iter().sum();
    let points = u32::try_from(total)
        .ok()
        .and_then(|t| nv.checked_pow(t))
        .filter(|&p| p <= scope.max_points);
    let Some(points) = points else {
        counts.cases_beyond_cap += 1;
        return None;
    };
    counts.cases += 1;
    if n > 1 {
        counts.distributed_cases += 1;
    }
    Some((sizes, points))
}

/// Checks `f` with inputs placed `ins` against every output placement of
/// `outs` at once (SPEC.md §21.2): the output defers when, on every instance
/// of the scope, the per-rank outputs under it denote f of the inputs'
/// denotations. Each failing output gets the minimal counterexample: the
/// first failing case, and in it the fewest nonzero scalars, then the
/// earliest values.
pub fn check_places(
    f: &LocalFn,
    ins: &[Place],
    outs: &[Place],
    scope: &Scope,
) -> Result<Vec<Verdict>, String> {
    check_places_memo(f, ins, outs, scope, &mut LocalMemo::default())
}

/// `check_places` with the per-rank outputs' memo of `f` given: calls for
/// the same `f` and `scope.values` may share one.
pub fn check_places_memo(
    f: &LocalFn,
    ins: &[Place],
    outs: &[Place],
    scope: &Scope,
    lmemo: &mut LocalMemo,
) -> Result<Vec<Verdict>, String> {
    if ins.len() != f.arity() {
        return Err(format!(
            "`{}` takes {} inputs, {} placements given",
            f.text,
            f.arity(),
            ins.len()
        ));
    }
    if is_transcendental(&f.expr) {
        return check_places_field(f, ins, outs, scope);
    }
    let nv = scope.values.len() as u64;
    let mut counts = tally();
    // Per output: (case index, key, counterexample) of its first failure.
    type Fail = (usize, (usize, Vec<usize>), Counterexample);
    let mut fails: Vec<Option<Fail>> = vec![None; outs.len()];
    let mut failed = vec![0u64; outs.len()];
    for (ci, (n, shapes)) in cases(f, ins, scope).into_iter().enumerate() {
        if fails.iter().all(|x| x.as_ref().is_some_and(|x| x.0 < ci)) {
            break;
        }
        let Some((sizes, points)) = case_points(ins, &shapes, n, nv, scope, &mut counts) else {
            continue;
        };
        let mut ws = CaseWs::new(f, ins, n, &shapes, &sizes, &scope.values, lmemo)?;
        // The outputs still to compare in this case: those that have not
        // failed in an earlier one.
        let live: Vec<usize> = (0..outs.len())
            .filter(|&o| fails[o].as_ref().is_none_or(|x| x.0 == ci))
            .collect();
        let mut idx = vec![0usize; sizes.iter().sum()];
        for _ in 0..points {
            if ws.instance(&idx, lmemo)? {
                counts.passed += 1;
                for &o in &live {
                    if ws.matches(lmemo, outs[o]) {
                        continue;
                    }
                    failed[o] += 1;
                    let nonzero = idx.iter().filter(|&&i| i != 0).count();
                    let better = match &fails[o] {
                        None => true,
                        Some((_, (c, k), _)) => (nonzero, &idx[..]) < (*c, &k[..]),
                    };
                    if better {
                        fails[o] = Some((
                            ci,
                            (nonzero, idx.clone()),
                            ws.counterexample(lmemo, &idx, outs[o]),
                        ));
                    }
                }
            } else {
                counts.outside_domain += 1;
            }
            // Next grid point (odometer, first index fastest).
            for d in idx.iter_mut() {
                *d += 1;
                if *d < nv as usize {
                    break;
                }
                *d = 0;
            }
        }
    }
    Ok(fails
        .into_iter()
        .zip(failed)
        .map(|(fl, k)| conclude(&counts, k, fl.map(|(_, _, cex)| cex)))
        .collect())
}

// ---------------------------------------------------------------------------
// Transcendental ops (SPEC.md §21.2, §19): the same instances, evaluated in
// the exact field of `spmd_semantics::expoly`, every comparison decided
// exactly or by disjoint enclosures, or else counted undecided.

/// The multiply-rotate hash of rustc's `FxHasher`, written out here, for the
/// field memos below: their keys are the checker's own small integers and
/// tensors, so a hash that resists chosen keys (SipHash) buys nothing. A
/// collision costs time, never a wrong lookup (keys are compared).
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

/// A decision on the field: `Some((holds, by_enclosure))`, `None` when
/// undecided.
type Dec = Option<(bool, bool)>;

/// A sign of a difference: `Some((sign, by_enclosure))`, `None` undecided.
type SignDec = Option<(std::cmp::Ordering, bool)>;

/// A field tensor whose entries are ids of interned values (`Field::vals`).
#[derive(Debug)]
struct IdT {
    shape: Shape,
    data: Vec<usize>,
}

/// The field values of one transcendental check and the decisions between
/// them (SPEC.md §21.2). Every value f takes is interned once, as an id
/// into `vals` (equal ids exactly for equal values); decisions between two
/// values and ⊕ₖ of a column are memoised by ids, so a lookup hashes a few
/// integers instead of cloning and hashing polynomials. The same few values
/// recur on every instance of a grid. With `memo` off nothing is looked up
/// and every decision is computed afresh: the plain path the tests compare
/// the memoised one with.
struct Field {
    memo: bool,
    vals: Vec<X>,
    ids: FxMap<X, usize>,
    signs: FxMap<(usize, usize), SignDec>,
    eqs: FxMap<(usize, usize), Dec>,
    /// ⊕ₖ of a column, by (kind, ids of the column).
    sums: FxMap<Vec<usize>, Option<usize>>,
    key: Vec<usize>,
}

impl Field {
    fn new(memo: bool) -> Field {
        Field {
            memo,
            vals: Vec::new(),
            ids: FxMap::default(),
            signs: FxMap::default(),
            eqs: FxMap::default(),
            sums: FxMap::default(),
            key: Vec::new(),
        }
    }

    fn intern(&mut self, x: X) -> usize {
        if self.memo {
            if let Some(&i) = self.ids.get(&x) {
                return i;
            }
            self.ids.insert(x.clone(), self.vals.len());
        }
        self.vals.push(x);
        self.vals.len() - 1
    }

    fn intern_t(&mut self, t: XT<X>) -> IdT {
        IdT {
            shape: t.shape,
            data: t.data.into_iter().map(|x| self.intern(x)).collect(),
        }
    }

    /// The sign of a − b: exact when the difference is zero or one monomial
    /// without atoms, else by enclosure (SPEC.md §19.3); `None` undecided.
    fn sign_diff(&mut self, a: usize, b: usize) -> SignDec {
        if !self.memo {
            return sign_diff_uncached(&self.vals[a], &self.vals[b]);
        }
        if let Some(&v) = self.signs.get(&(a, b)) {
            return v;
        }
        let v = sign_diff_uncached(&self.vals[a], &self.vals[b]);
        self.signs.insert((a, b), v);
        v
    }

    /// a = b: exact without atoms (a nonzero normal form is nonzero,
    /// §19.2), by enclosure otherwise.
    fn eq_dec(&mut self, a: usize, b: usize) -> Dec {
        if !self.memo {
            if self.vals[a] == self.vals[b] {
                return Some((true, false));
            }
            return eq_dec_uncached(&self.vals[a], &self.vals[b]);
        }
        // Interned: equal ids exactly for equal values.
        if a == b {
            return Some((true, false));
        }
        if let Some(&v) = self.eqs.get(&(a, b)) {
            return v;
        }
        let v = eq_dec_uncached(&self.vals[a], &self.vals[b]);
        self.eqs.insert((a, b), v);
        v
    }

    /// ⊕ₖ (sum, mean) of a column, interned, or `None` where the field
    /// refuses.
    fn x_sum(&mut self, k: PartialKind, col: &[usize]) -> Option<usize> {
        if self.memo {
            self.key.clear();
            self.key.push(k as usize);
            self.key.extend_from_slice(col);
            if let Some(&v) = self.sums.get(self.key.as_slice()) {
                return v;
            }
        }
        let ys: Vec<&X> = col.iter().map(|&i| &self.vals[i]).collect();
        let v = x_sum(k, &ys);
        let v = v.map(|x| self.intern(x));
        if self.memo {
            let key = self.key.clone();
            self.sums.insert(key, v);
        }
        v
    }
}

/// A side of an instance (the denotations, or one rank): f's value there.
enum Side {
    Outside,
    Undecided,
    Val(IdT),
}

/// Evaluations of f, memoised (when the field's `memo` is on): a rank's
/// side by the indices of its local values into the scope's values (with
/// the shapes), the denotations' side by the denoted tensors; both point
/// into `sides`.
#[derive(Default)]
struct Evals {
    by_idx: FxMap<Vec<usize>, usize>,
    by_tensors: FxMap<Vec<Tensor>, usize>,
    sides: Vec<Side>,
    key: Vec<usize>,
}

impl Evals {
    fn eval(&mut self, f: &LocalFn, fd: &mut Field, xs: &[Tensor]) -> Result<usize, String> {
        let xt: Vec<XT<X>> = xs.iter().map(XT::from_q).collect();
        let side = match xeval_expr(&f.expr, &xt, &mut XCtx::default()) {
            Ok(t) => Side::Val(fd.intern_t(t)),
            Err(XEvalError::X(XErr::Domain)) => Side::Outside,
            Err(XEvalError::X(_)) => Side::Undecided,
            Err(XEvalError::Shape(s)) => return Err(s),
        };
        self.sides.push(side);
        Ok(self.sides.len() - 1)
    }

    /// f of the denotations.
    fn denoted(&mut self, f: &LocalFn, fd: &mut Field, gs: Vec<Tensor>) -> Result<usize, String> {
        if fd.memo {
            if let Some(&i) = self.by_tensors.get(gs.as_slice()) {
                return Ok(i);
            }
        }
        let i = self.eval(f, fd, &gs)?;
        if fd.memo {
            self.by_tensors.insert(gs, i);
        }
        Ok(i)
    }

    /// f on rank `r`: input i's local values are `idx[offs[i]..]`, the
    /// whole block for a Replicate input, the r-th piece of `numel` for the
    /// others (as `xs` holds them).
    #[allow(clippy::too_many_arguments)] // one case's layout, unpacked
    fn rank(
        &mut self,
        f: &LocalFn,
        fd: &mut Field,
        ins: &[Place],
        shapes: &[Shape],
        offs: &[usize],
        idx: &[usize],
        xs: &[Vec<Tensor>],
        r: usize,
    ) -> Result<usize, String> {
        if fd.memo {
            self.key.clear();
            for ((&p, s), &off) in ins.iter().zip(shapes).zip(offs) {
                let numel: usize = s.iter().product();
                let at = match p {
                    Place::Inv => off,
                    _ => off + r * numel,
                };
                self.key.push(s.len());
                self.key.extend_from_slice(s);
                self.key.extend_from_slice(&idx[at..at + numel]);
            }
            if let Some(&i) = self.by_idx.get(self.key.as_slice()) {
                return Ok(i);
            }
        }
        let side: Vec<Tensor> = xs.iter().map(|x| x[r].clone()).collect();
        let i = self.eval(f, fd, &side)?;
        if fd.memo {
            let key = self.key.clone();
            self.by_idx.insert(key, i);
        }
        Ok(i)
    }
}

fn sign_diff_uncached(a: &X, b: &X) -> SignDec {
    let d = a.sub(b).ok()?;
    if d.num.is_zero() {
        return Some((std::cmp::Ordering::Equal, false));
    }
    let exact = !d.has_atoms() && d.num.terms.len() == 1 && d.den.terms.len() == 1;
    d.sign().ok().map(|s| (s, !exact))
}

fn eq_dec_uncached(a: &X, b: &X) -> Dec {
    let d = a.sub(b).ok()?;
    if d.num.is_zero() {
        return Some((true, false));
    }
    if !d.has_atoms() {
        return Some((false, false));
    }
    match d.sign().ok()? {
        std::cmp::Ordering::Equal => None,
        _ => Some((false, true)),
    }
}

/// Decisions that must all hold, fed in order: `feed` answers the verdict
/// at the first failure (decided), `end` the rest (all held, or undecided).
#[derive(Default)]
struct AllDec {
    undecided: bool,
    enc: bool,
}

impl AllDec {
    fn feed(&mut self, d: Dec) -> Option<Dec> {
        match d {
            Some((false, e)) => return Some(Some((false, e))),
            Some((true, e)) => self.enc |= e,
            None => self.undecided = true,
        }
        None
    }
    fn end(self) -> Dec {
        (!self.undecided).then_some((true, self.enc))
    }
}

/// Whether the extreme (k = max or min) of `ys` equals `e`.
fn extreme_dec(fd: &mut Field, k: PartialKind, ys: &[usize], e: usize) -> Dec {
    let beyond = match k {
        PartialKind::Max => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Less,
    };
    let (mut undecided, mut hit, mut enc) = (false, false, false);
    for &y in ys {
        match fd.sign_diff(y, e) {
            // One value beyond e: the extreme is beyond it too.
            Some((s, en)) if s == beyond => return Some((false, en)),
            Some((std::cmp::Ordering::Equal, en)) => {
                hit = true;
                enc |= en;
            }
            Some((_, en)) => enc |= en,
            None => undecided = true,
        }
    }
    match (undecided, hit) {
        (false, h) => Some((h, enc)),
        (true, _) => None,
    }
}

/// ⊕ₖ of field values (sum, mean), or `None` where the field refuses.
fn x_sum(k: PartialKind, ys: &[&X]) -> Option<X> {
    let mut acc = X::zero();
    for y in ys {
        acc = acc.add(y).ok()?;
    }
    match k {
        PartialKind::Avg => acc.div(&X::q(Q::int(ys.len() as i64))).ok(),
        _ => Some(acc),
    }
}

/// Whether the per-rank outputs under `out` denote `exp` (SPEC.md §21.2).
fn field_matches(fd: &mut Field, out: Place, per_rank: &[&IdT], exp: &IdT) -> Dec {
    let n = per_rank.len();
    let first = &per_rank[0].shape;
    let mut all = AllDec::default();
    match out {
        Place::Inv => {
            if *first != exp.shape {
                return Some((false, false));
            }
            for y in per_rank {
                for (&a, &b) in y.data.iter().zip(&exp.data) {
                    if let Some(d) = all.feed(fd.eq_dec(a, b)) {
                        return d;
                    }
                }
            }
        }
        Place::Part(k) => {
            if *first != exp.shape {
                return Some((false, false));
            }
            let mut col = Vec::with_capacity(n);
            for (e, &want) in exp.data.iter().enumerate() {
                col.clear();
                col.extend(per_rank.iter().map(|y| y.data[e]));
                let d = match k {
                    PartialKind::Max | PartialKind::Min => extreme_dec(fd, k, &col, want),
                    _ => fd.x_sum(k, &col).and_then(|s| fd.eq_dec(s, want)),
                };
                if let Some(d) = all.feed(d) {
                    return d;
                }
            }
        }
        Place::Shard(d) => {
            let mut gs = first.clone();
            if d >= gs.len() {
                return Some((false, false));
            }
            gs[d] *= n;
            if gs != exp.shape {
                return Some((false, false));
            }
            let numel: usize = first.iter().product::<usize>().max(1);
            let map = concat_positions(first, n, d);
            for (g, &p) in map.iter().enumerate() {
                let dec = fd.eq_dec(per_rank[p / numel].data[p % numel], exp.data[g]);
                if let Some(d) = all.feed(dec) {
                    return d;
                }
            }
        }
    }
    all.end()
}

/// A field tensor written like `Tensor`'s Display, entries as the field
/// writes them.
fn xshow(fd: &Field, t: &IdT) -> String {
    let data: Vec<String> = t.data.iter().map(|&i| fd.vals[i].to_string()).collect();
    show_strings(&t.shape, &data)
}

/// What the per-rank outputs denote under `out`, as text, for a
/// counterexample: `None` where they are not the same on every rank (for a
/// Replicate output); an extreme the enclosures cannot order is written
/// `max(..)` / `min(..)`.
fn field_denoted(fd: &mut Field, out: Place, per_rank: &[&IdT]) -> Option<String> {
    let n = per_rank.len();
    let first = per_rank[0];
    match out {
        Place::Inv => {
            let mut all = AllDec::default();
            let mut same = None;
            'ranks: for y in per_rank {
                for (&a, &b) in y.data.iter().zip(&first.data) {
                    if let Some(d) = all.feed(fd.eq_dec(a, b)) {
                        same = Some(d);
                        break 'ranks;
                    }
                }
            }
            match same.unwrap_or_else(|| all.end()) {
                Some((true, _)) => Some(xshow(fd, first)),
                Some((false, _)) => None,
                None => Some(format!(
                    "{} (the ranks' equality undecided)",
                    xshow(fd, first)
                )),
            }
        }
        Place::Part(k) => {
            let mut data: Vec<String> = Vec::with_capacity(first.data.len());
            for e in 0..first.data.len() {
                let col: Vec<usize> = per_rank.iter().map(|y| y.data[e]).collect();
                data.push(match k {
                    PartialKind::Sum | PartialKind::Avg => fd
                        .x_sum(k, &col)
                        .map(|x| fd.vals[x].to_string())
                        .unwrap_or_else(|| "(beyond the field)".into()),
                    _ => {
                        let want = match k {
                            PartialKind::Max => std::cmp::Ordering::Greater,
                            _ => std::cmp::Ordering::Less,
                        };
                        let mut best = col[0];
                        let mut text = None;
                        for &y in &col[1..] {
                            match fd.sign_diff(y, best) {
                                Some((s, _)) if s == want => best = y,
                                Some(_) => {}
                                None => {
                                    let all: Vec<String> =
                                        col.iter().map(|&x| fd.vals[x].to_string()).collect();
                                    text = Some(format!("{k}({})", all.join(", ")));
                                    break;
                                }
                            }
                        }
                        text.unwrap_or_else(|| fd.vals[best].to_string())
                    }
                });
            }
            Some(show_strings(&first.shape, &data))
        }
        Place::Shard(d) => {
            if d >= first.shape.len() {
                return None;
            }
            let numel: usize = first.shape.iter().product::<usize>().max(1);
            let mut gs = first.shape.clone();
            gs[d] *= n;
            let data: Vec<String> = concat_positions(&first.shape, n, d)
                .iter()
                .map(|&p| fd.vals[per_rank[p / numel].data[p % numel]].to_string())
                .collect();
            Some(show_strings(&gs, &data))
        }
    }
}

fn show_strings(shape: &[usize], data: &[String]) -> String {
    if shape.is_empty() {
        return data[0].clone();
    }
    let inner: usize = shape[1..].iter().product();
    let parts: Vec<String> = (0..shape[0])
        .map(|i| show_strings(&shape[1..], &data[i * inner..(i + 1) * inner]))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// `check_places` for a transcendental op (SPEC.md §21.2): the scope's
/// cases and instances, f evaluated in the
/// exact field on the denotations and on every rank; an output defers when
/// every decided instance agrees, is refuted only by a decided difference,
/// and counts the undecided instances apart.
fn check_places_field(
    f: &LocalFn,
    ins: &[Place],
    outs: &[Place],
    scope: &Scope,
) -> Result<Vec<Verdict>, String> {
    check_places_field_with(f, ins, outs, scope, true)
}

/// `check_places` for a transcendental op with the field's memos off: every
/// side evaluated and every decision computed afresh on every instance. The
/// same verdicts, counts and counterexamples as the memoised path, only
/// slower; for the tests that compare the two.
#[doc(hidden)]
pub fn check_places_field_plain(
    f: &LocalFn,
    ins: &[Place],
    outs: &[Place],
    scope: &Scope,
) -> Result<Vec<Verdict>, String> {
    if ins.len() != f.arity() || !is_transcendental(&f.expr) {
        return Err(format!(
            "`{}`: not a transcendental op of {} inputs",
            f.text,
            ins.len()
        ));
    }
    check_places_field_with(f, ins, outs, scope, false)
}

fn check_places_field_with(
    f: &LocalFn,
    ins: &[Place],
    outs: &[Place],
    scope: &Scope,
    memo: bool,
) -> Result<Vec<Verdict>, String> {
    representable(&f.expr).map_err(|e| format!("`{}`: {e}", f.text))?;
    // The memos belong to this call (its op and scope), so they stay
    // bounded by one call's values.
    let mut fd = Field::new(memo);
    let mut evals = Evals::default();
    let values = &scope.values;
    let nv = values.len() as u64;
    let mut counts = tally();
    // Per output: undecided comparisons, and its first failure.
    let mut undecided = vec![0u64; outs.len()];
    let mut failed = vec![0u64; outs.len()];
    type Fail = (usize, (usize, Vec<usize>), Counterexample);
    let mut fails: Vec<Option<Fail>> = vec![None; outs.len()];
    let mut side_ix: Vec<usize> = Vec::new();
    for (ci, (n, shapes)) in cases(f, ins, scope).into_iter().enumerate() {
        if fails.iter().all(|x| x.as_ref().is_some_and(|x| x.0 < ci)) {
            break;
        }
        let Some((sizes, points)) = case_points(ins, &shapes, n, nv, scope, &mut counts) else {
            continue;
        };
        let live: Vec<usize> = (0..outs.len())
            .filter(|&o| fails[o].as_ref().is_none_or(|x| x.0 == ci))
            .collect();
        // Where each input's values start in `idx`.
        let offs: Vec<usize> = sizes
            .iter()
            .scan(0, |acc, &s| {
                let at = *acc;
                *acc += s;
                Some(at)
            })
            .collect();
        let mut idx = vec![0usize; sizes.iter().sum()];
        for _ in 0..points {
            // Per input, its per-rank tensors (an Invariant one on every rank).
            let mut xs: Vec<Vec<Tensor>> = Vec::with_capacity(ins.len());
            for (((&p, s), &sz), &off) in ins.iter().zip(&shapes).zip(&sizes).zip(&offs) {
                let numel: usize = s.iter().product();
                let vals: Vec<Q> = idx[off..off + sz]
                    .iter()
                    .map(|&i| values[i].clone())
                    .collect();
                xs.push(match p {
                    Place::Inv => vec![Tensor::new(s.clone(), vals); n],
                    _ => vals
                        .chunks(numel)
                        .map(|c| Tensor::new(s.clone(), c.to_vec()))
                        .collect(),
                });
            }
            let globals: Vec<Tensor> = ins
                .iter()
                .zip(&xs)
                .map(|(&p, x)| denote(p, x).ok_or("an input not well formed (checker bug)"))
                .collect::<Result<_, _>>()?;
            // f of the denotations, then every rank, in that order: the
            // first outside the domain or undecided settles the instance.
            side_ix.clear();
            let mut settled = None;
            let mut globals = Some(globals);
            for s in 0..=n {
                let ix = match globals.take() {
                    Some(gs) => evals.denoted(f, &mut fd, gs)?,
                    None => evals.rank(f, &mut fd, ins, &shapes, &offs, &idx, &xs, s - 1)?,
                };
                match &evals.sides[ix] {
                    Side::Val(_) => side_ix.push(ix),
                    Side::Outside => {
                        settled = Some(true);
                        break;
                    }
                    Side::Undecided => {
                        settled = Some(false);
                        break;
                    }
                }
            }
            match settled {
                Some(true) => counts.outside_domain += 1,
                Some(false) => counts.undecided += 1,
                None => {
                    counts.passed += 1;
                    let val = |i: &usize| match &evals.sides[*i] {
                        Side::Val(t) => t,
                        _ => unreachable!("only values are kept in side_ix"),
                    };
                    let expected = val(&side_ix[0]);
                    let per_rank: Vec<&IdT> = side_ix[1..].iter().map(val).collect();
                    for &o in &live {
                        let decided = match field_matches(&mut fd, outs[o], &per_rank, expected) {
                            None => {
                                undecided[o] += 1;
                                continue;
                            }
                            Some((true, _)) => continue,
                            Some((false, enc)) => enc,
                        };
                        failed[o] += 1;
                        let nonzero = idx.iter().filter(|&&i| i != 0).count();
                        let better = match &fails[o] {
                            None => true,
                            Some((_, (c, k), _)) => (nonzero, &idx[..]) < (*c, &k[..]),
                        };
                        if better {
                            let field = FieldValues {
                                expected: xshow(&fd, expected),
                                per_rank: per_rank.iter().map(|t| xshow(&fd, t)).collect(),
                                denoted: field_denoted(&mut fd, outs[o], &per_rank),
                                decided: if decided {
                                    "by disjoint enclosures"
                                } else {
                                    "exactly"
                                },
                            };
                            let empty = Tensor::new(vec![0], vec![]);
                            fails[o] = Some((
                                ci,
                                (nonzero, idx.clone()),
                                Counterexample {
                                    n,
                                    inputs: xs.clone(),
                                    expected: empty.clone(),
                                    per_rank: vec![],
                                    denoted: None,
                                    field: Some(field),
                                },
                            ));
                        }
                    }
                }
            }
            for d in idx.iter_mut() {
                *d += 1;
                if *d < nv as usize {
                    break;
                }
                *d = 0;
            }
        }
    }
    Ok(fails
        .into_iter()
        .zip(undecided)
        .zip(failed)
        .map(|((fl, u), k)| {
            // Instances whose evaluation was undecided, and those whose
            // comparison for this output was.
            let mut c = counts.clone();
            c.undecided += u;
            c.passed -= u;
            conclude(&c, k, fl.map(|(_, _, cex)| cex))
        })
        .collect())
}

// ---------------------------------------------------------------------------
// Collectives (SPEC.md §21.3)

/// A per-rank forward of a collective on one axis.
pub type CollForward = Box<dyn Fn(&[Tensor]) -> Vec<Tensor> + Sync>;

/// A collective row: a forward (possibly a deliberately wrong one) and the
/// placements it claims.
pub struct CollRow {
    pub name: String,
    pub system: &'static str,
    pub claim: (Place, Place),
    pub forward: CollForward,
    /// The property a twin must fail, or `None` for a rule that must hold.
    pub expect_fail: Option<&'static str>,
}

/// F1 (closure) and F3 (the value denoted is kept) for a collective on one
/// axis, exhaustive over the scope (SPEC.md §21.3). Returns the first
/// failure: (property, ranks, input per rank, output per rank).
pub fn check_collective(row: &CollRow, scope: &Scope) -> Result<Tally, (String, String)> {
    let (src, dst) = row.claim;
    let nv = scope.values.len();
    let mut counts = tally();
    for &n in &scope.ranks {
        let mut shapes: Vec<&Shape> = scope.shapes.iter().collect();
        shapes.sort_by_key(|s| s.iter().product::<usize>());
        for s in shapes {
            if let Place::Shard(d) = dst {
                if d >= s.len() || s[d] % n != 0 {
                    continue;
                }
            }
            let numel: usize = s.iter().product();
            let fr = free(src, numel, n);
            let Some(points) = (nv as u64)
                .checked_pow(fr as u32)
                .filter(|&p| p <= scope.max_points)
            else {
                counts.cases_beyond_cap += 1;
                continue;
            };
            counts.cases += 1;
            if n > 1 {
                counts.distributed_cases += 1;
            }
            let mut idx = vec![0usize; fr];
            // One workspace per case: the per-rank inputs are overwritten in
            // place and the denotations compared in place (SPEC.md §18).
            let mut xs = vec![Tensor::new(s.clone(), vec![Q::zero(); numel]); n];
            let mut before = Tensor::zeros(&[]);
            for _ in 0..points {
                for (r, x) in xs.iter_mut().enumerate() {
                    let base = match src {
                        Place::Inv => 0,
                        _ => r * numel,
                    };
                    for (e, v) in x.data.iter_mut().enumerate() {
                        v.clone_from(&scope.values[idx[base + e]]);
                    }
                }
                counts.passed += 1;
                assert!(
                    denote_into(src, &xs, &mut before),
                    "well formed by construction"
                );
                let ys = (row.forward)(&xs);
                let show = |ts: &[Tensor]| {
                    ts.iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let at = || {
                    format!(
                        "{n} ranks, input per rank [{}], output per rank [{}]",
                        show(&xs),
                        show(&ys)
                    )
                };
                match denotes(dst, &ys, &before) {
                    None => {
                        return Err(("F1".into(), format!("not well formed for {dst}: {}", at())))
                    }
                    Some(false) => {
                        let after = denote(dst, &ys).expect("well formed");
                        return Err((
                            "F3".into(),
                            format!("denotes {after}, the input denotes {before}: {}", at()),
                        ));
                    }
                    Some(true) => {}
                }
                for d in idx.iter_mut() {
                    *d += 1;
                    if *d < nv {
                        break;
                    }
                    *d = 0;
                }
            }
        }
    }
    Ok(counts)
}

/// The collective rows with their twins (SPEC.md §21.3).
pub fn collective_rows() -> Vec<CollRow> {
    let mut rows = Vec::new();
    for k in ALL_KINDS {
        for c in [
            Coll::AllReduce(k),
            Coll::ReduceScatter(k, 0),
            Coll::Partition(k),
        ] {
            let system = match (c, k.jax()) {
                // Only sharding propagation partitions; `redistribute`
                // refuses any move to a Partial but Shard -> Partial(sum).
                (Coll::Partition(_), _) => "dtensor propagation",
                (_, None) => "dtensor",
                _ => "dtensor, jax",
            };
            rows.push(CollRow {
                name: c.name(),
                system,
                claim: c.places(),
                forward: Box::new(move |xs| c.forward(xs)),
                expect_fail: None,
            });
        }
        // Twin: reduce with the wrong kind (sum for the others, max for sum).
        let wrong = if k == PartialKind::Sum {
            PartialKind::Max
        } else {
            PartialKind::Sum
        };
        let c = Coll::AllReduce(wrong);
        rows.push(CollRow {
            name: format!("twin: all_reduce({wrong}) claimed P({k}) -> I"),
            system: "twin",
            claim: (Place::Part(k), Place::Inv),
            forward: Box::new(move |xs| c.forward(xs)),
            expect_fail: Some("F3"),
        });
        // Twin: the other partition (v / n for max, avg, min; v for sum).
        rows.push(CollRow {
            name: format!("twin: partition({k}) keeping the other share"),
            system: "twin",
            claim: (Place::Inv, Place::Part(k)),
            forward: Box::new(move |xs: &[Tensor]| {
                let n = xs.len() as i64;
                match k {
                    PartialKind::Sum => xs.to_vec(),
                    _ => xs.iter().map(|x| x.scale(&Q::frac(1, n))).collect(),
                }
            }),
            expect_fail: Some("F3"),
        });
    }
    // Twin: a reduce-scatter that keeps the wrong chunk.
    rows.push(CollRow {
        name: "twin: reduce_scatter(max) keeping chunk r+1".into(),
        system: "twin",
        claim: (Place::Part(PartialKind::Max), Place::Shard(0)),
        forward: Box::new(|xs: &[Tensor]| {
            let n = xs.len();
            (0..n)
                .map(|r| ring_fold(PartialKind::Max, xs, r).chunk(n, 0)[(r + 1) % n].clone())
                .collect()
        }),
        expect_fail: Some("F3"),
    });
    rows
}

// ---------------------------------------------------------------------------
// Gradients and JVPs (SPEC.md §21.4)

/// The step of the exact difference quotients, as in SPEC.md §5.3.
fn step() -> Q {
    Q::frac(1, 1 << 16)
}

/// d/dh g(h) at 0 from exact difference quotients at −s, s/2 and s; `None`
/// where they differ (a kink at or near 0: undetermined).
fn slope(g: impl Fn(&Q) -> Option<Q>) -> Option<Q> {
    let s = step();
    let g0 = g(&Q::zero())?;
    let q = |h: Q| -> Option<Q> { g(&h)?.sub(&g0).div(&h).ok() };
    let a = q(s.clone())?;
    let b = q(s.div(&Q::int(2)).ok()?)?;
    let c = q(s.neg())?;
    (a == b && b == c).then_some(a)
}

/// A declared backward of `from_local(x, [Partial(k)])` (a per-rank
/// identity from per-rank values to Partial(k)): given the per-rank inputs
/// and the replicated cotangent, each rank's gradient.
pub type LocalBackward = fn(k: PartialKind, xs: &[Tensor], g: &Tensor) -> Vec<Tensor>;

/// DTensor 2.14.1 `_FromTorchTensor.backward`: a Partial input's gradient
/// is normalised to Replicate(), so every rank receives the cotangent.
pub fn dtensor_from_local_backward(_k: PartialKind, xs: &[Tensor], g: &Tensor) -> Vec<Tensor> {
    vec![g.clone(); xs.len()]
}

/// The transpose the denotation asks for: g for sum, g / n for avg, g at
/// the rank holding the extremum (the first, at a tie) for max and min.
pub fn exact_from_local_backward(k: PartialKind, xs: &[Tensor], g: &Tensor) -> Vec<Tensor> {
    let n = xs.len();
    match k {
        PartialKind::Sum => vec![g.clone(); n],
        PartialKind::Avg => vec![g.scale(&Q::frac(1, n as i64)); n],
        PartialKind::Max | PartialKind::Min => {
            let mut out = vec![Tensor::zeros(&g.shape); n];
            for i in 0..g.numel() {
                let mut best = 0;
                for r in 1..n {
                    let better = match k {
                        PartialKind::Max => xs[r].data[i] > xs[best].data[i],
                        _ => xs[r].data[i] < xs[best].data[i],
                    };
                    if better {
                        best = r;
                    }
                }
                out[best].data[i] = g.data[i].clone();
            }
            out
        }
    }
}

/// B3 for `from_local` to Partial(k) (SPEC.md §21.4): for every rank r and
/// element i, the derivative of ⟨⊕_k x, g⟩ along x_r[i], from exact
/// difference quotients of the denotation (never from the backward), must
/// equal the backward's entry. Instances at a tie are undetermined and
/// counted. Returns (instances checked, undetermined) or the first failure.
pub fn check_from_local(
    k: PartialKind,
    backward: LocalBackward,
    scope: &Scope,
) -> Result<(u64, u64), String> {
    let nv = scope.values.len();
    let mut col: Vec<Q> = Vec::new();
    for_each_per_rank(scope, |n, p, xs| {
        let s = xs[0].shape.clone();
        let numel = xs[0].numel();
        // Cotangent: a fixed non-trivial replicated value per instance.
        let g = Tensor::new(
            s,
            (0..numel)
                .map(|i| scope.values[(p as usize + i) % nv].clone())
                .collect(),
        );
        let got = backward(k, xs, &g);
        for r in 0..n {
            for i in 0..numel {
                // Only element i of ⊕ₖ x moves along x_r[i], so the
                // quotients of ⟨⊕ₖ x, g⟩ are those of its column i times
                // g[i], exactly.
                col.clear();
                col.extend(xs.iter().map(|x| x.data[i].clone()));
                let Some(d) = col_slope(k, &mut col, r, &g.data[i]) else {
                    return Ok(true);
                };
                if got[r].data[i] != d {
                    return Err(format!(
                        "B3: {n} ranks, x per rank [{}], cotangent {g}: the backward gives rank {r} element {i} {}, the derivative of the denotation is {d} (backward per rank [{}])",
                        show(xs), got[r].data[i], show(&got)
                    ));
                }
            }
        }
        Ok(false)
    })
}

/// The slope at 0 of h ↦ ⊕ₖ(col with col[r] + h) · w, from the same
/// exact difference quotients as `slope` (`None` where they differ). `col`
/// is restored.
fn col_slope(k: PartialKind, col: &mut [Q], r: usize, w: &Q) -> Option<Q> {
    let n = col.len();
    let base = col[r].clone();
    let mut at = |h: &Q| -> Q {
        col[r] = base.add(h);
        fold_col(k, n, col.iter()).mul(w)
    };
    let s = step();
    let g0 = at(&Q::zero());
    let mut q = |h: Q| -> Option<Q> { at(&h).sub(&g0).div(&h).ok() };
    let a = q(s.clone());
    let b = s.div(&Q::int(2)).ok().and_then(&mut q);
    let c = q(s.neg());
    col[r] = base;
    let (a, b, c) = (a?, b?, c?);
    (a == b && b == c).then_some(a)
}

/// Tensors joined for a message.
fn show(ts: &[Tensor]) -> String {
    ts.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every per-rank instance of the collective checks (SPEC.md §21.4): 2 or
/// more ranks of `scope`, scalar and [2] pieces, every combination of the
/// scope's values within its points cap. `check(n, index, xs)` answers
/// `Ok(true)` at a tie (counted undetermined), `Ok(false)` when the
/// instance was checked, or the failure. Returns (checked, undetermined).
fn for_each_per_rank(
    scope: &Scope,
    mut check: impl FnMut(usize, u64, &[Tensor]) -> Result<bool, String>,
) -> Result<(u64, u64), String> {
    let (mut checked, mut undetermined) = (0u64, 0u64);
    let nv = scope.values.len();
    for &n in scope.ranks.iter().filter(|&&n| n > 1) {
        for s in [vec![], vec![2]] {
            let numel: usize = s.iter().product();
            let fr = n * numel;
            let Some(points) = (nv as u64)
                .checked_pow(fr as u32)
                .filter(|&p| p <= scope.max_points)
            else {
                continue;
            };
            let mut idx = vec![0usize; fr];
            let mut xs = vec![Tensor::new(s.clone(), vec![Q::zero(); numel]); n];
            for p in 0..points {
                for (r, x) in xs.iter_mut().enumerate() {
                    for (e, v) in x.data.iter_mut().enumerate() {
                        v.clone_from(&scope.values[idx[r * numel + e]]);
                    }
                }
                if check(n, p, &xs)? {
                    undetermined += 1;
                } else {
                    checked += 1;
                }
                for d in idx.iter_mut() {
                    *d += 1;
                    if *d < nv {
                        break;
                    }
                    *d = 0;
                }
            }
        }
    }
    Ok((checked, undetermined))
}

/// A candidate JVP of all_reduce(k) (Partial(k) -> Replicate): per-rank
/// primals and tangents to the output tangent.
pub type CollJvp = fn(k: PartialKind, xs: &[Tensor], ts: &[Tensor]) -> Tensor;

/// The tangent of the rank holding the extremum (sum: the sum of tangents,
/// avg: their mean): what the denotation asks for away from ties.
pub fn argext_jvp(k: PartialKind, xs: &[Tensor], ts: &[Tensor]) -> Tensor {
    match k {
        PartialKind::Sum | PartialKind::Avg => combine(k, ts).expect("same shapes"),
        PartialKind::Max | PartialKind::Min => {
            let g = Tensor::new(ts[0].shape.clone(), vec![Q::one(); ts[0].numel()]);
            let w = exact_from_local_backward(k, xs, &g);
            let mut out = Tensor::zeros(&ts[0].shape);
            for (wr, tr) in w.iter().zip(ts) {
                for i in 0..out.numel() {
                    out.data[i] = out.data[i].add(&wr.data[i].mul(&tr.data[i]));
                }
            }
            out
        }
    }
}

/// The JVP psum would have: the sum of the tangents.
pub fn psum_jvp(_k: PartialKind, _xs: &[Tensor], ts: &[Tensor]) -> Tensor {
    combine(PartialKind::Sum, ts).expect("same shapes")
}

/// The same reduction applied to the tangents.
pub fn same_kind_jvp(k: PartialKind, _xs: &[Tensor], ts: &[Tensor]) -> Tensor {
    combine(k, ts).expect("same shapes")
}

/// J1 for all_reduce(k) (SPEC.md §21.4): for every instance and every
/// per-rank unit tangent, the JVP must equal the derivative of the
/// denotation along it (exact difference quotients; ties undetermined).
pub fn check_all_reduce_jvp(
    k: PartialKind,
    jvp: CollJvp,
    scope: &Scope,
) -> Result<(u64, u64), String> {
    let mut col: Vec<Q> = Vec::new();
    for_each_per_rank(scope, |n, _, xs| {
        let s = xs[0].shape.clone();
        let numel = xs[0].numel();
        let mut ts = vec![Tensor::zeros(&s); n];
        for r in 0..n {
            for i in 0..numel {
                ts[r].data[i] = Q::one();
                // Along x_r[i] only element i of the denotation moves: the
                // quotients of every other element are 0, exactly.
                col.clear();
                col.extend(xs.iter().map(|x| x.data[i].clone()));
                let Some(d) = col_slope(k, &mut col, r, &Q::one()) else {
                    return Ok(true);
                };
                let mut want = vec![Q::zero(); numel];
                want[i] = d;
                let got = jvp(k, xs, &ts);
                if got.data != want {
                    return Err(format!(
                        "J1: {n} ranks, x per rank [{}], unit tangent at rank {r} element {i}: the JVP gives {got}, the derivative of the denotation is {}",
                        show(xs),
                        Tensor::new(s.clone(), want)
                    ));
                }
                ts[r].data[i] = Q::zero();
            }
        }
        Ok(false)
    })
}

/// The derivative of `f` on global tensors at `xs` (inputs' global
/// values), paired with the cotangent `g`: one tensor per input. Exact
/// difference quotients; `None` at a kink (SPEC.md §21.5).
pub fn global_gradient(f: &LocalFn, xs: &[Tensor], g: &Tensor) -> Option<Vec<Tensor>> {
    let mut out = Vec::new();
    for i in 0..xs.len() {
        let mut gi = Tensor::zeros(&xs[i].shape);
        for e in 0..xs[i].numel() {
            gi.data[e] = slope(|h| {
                let mut ys = xs.to_vec();
                ys[i].data[e] = ys[i].data[e].add(h);
                let y = eval(&f.expr, &ys, &mut Ctx::default()).ok()?;
                Some(y.dot(g))
            })?;
        }
        out.push(gi);
    }
    Some(out)
}
