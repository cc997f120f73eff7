//! Straight-line programs of typed steps (SPEC.md §12): a whole
//! tensor-parallel layer, say, checked end to end like one typed op. Its
//! backward runs the steps' own declared backwards in reverse, adding the
//! cotangents of values used more than once; the oracle checks that
//! composition against the derivative of the program's meaning.

use crate::collective::Kind;
use crate::eval::{
    einsum_plan_cached, einsum_planned_into, eval, eval_into, vjp, vjp_add, Ctx, Degree,
    EinsumPlan, EvalError,
};
use crate::expr::Expr;
use crate::op::{run_chain, Backward, Forward, Op, TypedOp};
use spmd_semantics::perrank::Denot;
use spmd_semantics::tensor::same_shape;
use spmd_semantics::{Mesh, PerRank, Shape, Tensor, Type, Q};

/// One step: a typed op applied to earlier values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// A short name for reports, e.g. `f: pvary`.
    pub name: String,
    pub op: TypedOp,
    /// Value numbers of its arguments: the program's inputs are values
    /// 0..k, step j defines value k + j.
    pub args: Vec<usize>,
}

/// A program: its inputs' types, then its steps. The last step's value is
/// the output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Program {
    pub inputs: Vec<Type>,
    pub steps: Vec<Step>,
    /// The inputs' names, for reports (empty: `x0`, `x1`, ...).
    pub names: Vec<String>,
}

impl Program {
    /// A program whose steps are type-consistent: every argument exists
    /// already and has the type its step expects.
    pub fn new(inputs: Vec<Type>, steps: Vec<Step>) -> Result<Program, String> {
        if steps.is_empty() {
            return Err("a program needs at least one step".into());
        }
        let mut types = inputs.clone();
        for s in &steps {
            if s.args.len() != s.op.inputs.len() {
                return Err(format!(
                    "step `{}` takes {} values, {} given",
                    s.name,
                    s.op.inputs.len(),
                    s.args.len()
                ));
            }
            for (a, want) in s.args.iter().zip(&s.op.inputs) {
                let have = types.get(*a).ok_or_else(|| {
                    format!("step `{}` uses value {a}, which is not defined yet", s.name)
                })?;
                if have != want {
                    return Err(format!(
                        "step `{}` expects {want} but value {a} is {have}",
                        s.name
                    ));
                }
            }
            types.push(s.op.output.clone());
        }
        Ok(Program {
            inputs,
            steps,
            names: vec![],
        })
    }

    pub fn output(&self) -> &Type {
        &self.steps.last().expect("nonempty").op.output
    }

    pub fn describe(&self) -> String {
        self.steps
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The shapes of every value.
    fn shapes(&self, m: &Mesh, shapes: &[Shape]) -> Result<Vec<Shape>, String> {
        let mut all = shapes.to_vec();
        for s in &self.steps {
            let args: Vec<Shape> = s.args.iter().map(|&a| all[a].clone()).collect();
            let out =
                s.op.op
                    .infer(m, &args)
                    .map_err(|e| format!("step `{}`: {e}", s.name))?
                    .0;
            all.push(out);
        }
        Ok(all)
    }

    /// Output shape and, per program input, a degree bound for the output
    /// along a direction moving only that input (SPEC.md §12.1). A local
    /// step's bound substitutes its arguments' degrees Dⱼ into its
    /// expression: a sum takes the maximum of its terms, a product the sum
    /// of its factors, a power k times its base. A collective is linear in
    /// its one argument. Any other step falls back to Σ dⱼ·Dⱼ, its
    /// per-argument degrees dⱼ weighting the Dⱼ, and a local step's bound is
    /// never above that. Steps must be polynomial or piecewise polynomial.
    pub fn infer(&self, m: &Mesh, shapes: &[Shape]) -> Result<(Shape, Degree), String> {
        let k = self.inputs.len();
        let mut all = shapes.to_vec();
        // deg[v][i]: degree of value v along input i.
        let mut deg: Vec<Vec<u32>> = (0..k)
            .map(|v| (0..k).map(|i| u32::from(v == i)).collect())
            .collect();
        // tot[v]: a bound on value v's total degree in all inputs.
        let mut tot: Vec<u32> = vec![1; k];
        let mut piecewise = false;
        for s in &self.steps {
            let args: Vec<Shape> = s.args.iter().map(|&a| all[a].clone()).collect();
            let (out, d) =
                s.op.op
                    .infer(m, &args)
                    .map_err(|e| format!("step `{}`: {e}", s.name))?;
            if d.den.iter().any(|&x| x > 0) {
                return Err(format!(
                    "step `{}` is rational; program steps must be polynomial or piecewise polynomial",
                    s.name
                ));
            }
            piecewise |= d.piecewise;
            let row: Vec<u32> = (0..k)
                .map(|i| {
                    let along: Vec<u32> = s.args.iter().map(|&a| deg[a][i]).collect();
                    let weighted = along
                        .iter()
                        .zip(&d.num)
                        .map(|(&dv, &dj)| dj.saturating_mul(dv))
                        .fold(0u32, u32::saturating_add);
                    match substituted(&s.op.op, &along) {
                        Some(b) => b.min(weighted),
                        None => weighted,
                    }
                })
                .collect();
            deg.push(row);
            tot.push(substituted_total(&d, s.args.iter().map(|&a| tot[a])));
            all.push(out);
        }
        let out = all.pop().expect("nonempty");
        let num = deg.pop().expect("nonempty");
        Ok((
            out,
            Degree {
                den: vec![0; num.len()],
                num,
                piecewise,
                total: tot.pop().expect("nonempty"),
            },
        ))
    }

    /// The tuples of `choices` (one per input, the cartesian product in
    /// lexicographic order, input 0 most significant) that no step rejects
    /// on its own: a superset of those `infer` accepts, in the same order.
    /// Inputs are fixed one at a time, and each step is inferred as soon as
    /// every input it reads (through earlier steps too) is fixed, so a step
    /// that rejects its shapes, or is rational, prunes every tuple that
    /// extends the prefix: `infer` fails on each of them at that step or
    /// earlier (SPEC.md §18.9).
    pub fn viable_tuples(&self, m: &Mesh, choices: &[Shape]) -> Vec<Vec<Shape>> {
        let mut out = Vec::new();
        self.visit_viable(m, choices, u64::MAX, &mut |t| out.push(t.to_vec()));
        out
    }

    /// `viable_tuples`, each given to `leaf` in turn; every choice made at
    /// any position counts against `budget`, and `false` says the budget
    /// ran out before the search ended.
    pub fn visit_viable(
        &self,
        m: &Mesh,
        choices: &[Shape],
        budget: u64,
        leaf: &mut dyn FnMut(&[Shape]),
    ) -> bool {
        let k = self.inputs.len();
        // ready[j]: the last input step j reads, through earlier steps.
        let mut last: Vec<Option<usize>> = (0..k).map(Some).collect();
        for s in &self.steps {
            let r = s
                .args
                .iter()
                .filter_map(|&a| last.get(a).copied().flatten())
                .max();
            last.push(r);
        }
        let ready: Vec<usize> = last[k..].iter().map(|r| r.unwrap_or(0)).collect();
        let mut all: Vec<Shape> = vec![Vec::new(); k + self.steps.len()];
        if k == 0 {
            leaf(&[]);
            return true;
        }
        let mut left = budget;
        self.viable_from(m, choices, &ready, 0, &mut all, &mut left, leaf)
    }

    #[allow(clippy::too_many_arguments)]
    fn viable_from(
        &self,
        m: &Mesh,
        choices: &[Shape],
        ready: &[usize],
        j: usize,
        all: &mut Vec<Shape>,
        left: &mut u64,
        leaf: &mut dyn FnMut(&[Shape]),
    ) -> bool {
        let k = self.inputs.len();
        'choice: for c in choices {
            if *left == 0 {
                return false;
            }
            *left -= 1;
            all[j] = c.clone();
            for (s, step) in self.steps.iter().enumerate() {
                if ready[s] != j {
                    continue;
                }
                let args: Vec<Shape> = step.args.iter().map(|&a| all[a].clone()).collect();
                match step.op.op.infer(m, &args) {
                    Ok((o, d)) if d.den.iter().all(|&x| x == 0) => all[k + s] = o,
                    _ => continue 'choice,
                }
            }
            if j + 1 == k {
                leaf(&all[..k]);
            } else if !self.viable_from(m, choices, ready, j + 1, all, left, leaf) {
                return false;
            }
        }
        true
    }

    /// Whether every step's backward takes the cotangent of its output's
    /// shape, for inputs of shapes `shapes`; the first step that does not,
    /// and why.
    pub fn backward_accepts(&self, m: &Mesh, shapes: &[Shape]) -> Result<(), String> {
        let all = self.shapes(m, shapes)?;
        let k = self.inputs.len();
        for (j, s) in self.steps.iter().enumerate() {
            let args: Vec<Shape> = s.args.iter().map(|&a| all[a].clone()).collect();
            s.op.backward_accepts(m, &all[k + j], &args)
                .map_err(|e| format!("step `{}`: {e}", s.name))?;
        }
        Ok(())
    }

    /// Every value's per-rank data: the inputs, then each step's output.
    pub fn values(&self, m: &Mesh, xs: &[PerRank]) -> Result<Vec<PerRank>, EvalError> {
        let mut vals = xs.to_vec();
        vals.extend(self.run_steps(m, xs)?.0);
        Ok(vals)
    }

    /// Each step's output (the values after the inputs), and whether a
    /// step met a kink. Arguments are read in place, never copied.
    pub fn run_steps(&self, m: &Mesh, xs: &[PerRank]) -> Result<(Vec<PerRank>, bool), EvalError> {
        let k = xs.len();
        let mut vals: Vec<PerRank> = Vec::with_capacity(self.steps.len());
        let mut kink = false;
        for s in &self.steps {
            let f = step_forward(m, s, xs, &vals, k)?;
            kink |= f.at_kink;
            vals.push(f.y);
        }
        Ok((vals, kink))
    }

    pub fn forward(&self, m: &Mesh, xs: &[PerRank]) -> Result<Forward, EvalError> {
        let (mut vals, at_kink) = self.run_steps(m, xs)?;
        Ok(Forward {
            y: vals.pop().expect("nonempty"),
            at_kink,
        })
    }

    /// The declared meaning: the steps' meanings composed.
    pub fn spec(&self, m: &Mesh, ds: &[Denot]) -> Result<Denot, EvalError> {
        let k = ds.len();
        let mut vals: Vec<Denot> = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let at = |a: usize| if a < k { &ds[a] } else { &vals[a - k] };
            // An einsum step is planned once for all ranks.
            let plan = StepPlan::of(s, &|a| at(a).family.first().map(|t| t.shape.clone()));
            let d = self.step_spec(m, s, &at, plan.as_ref())?;
            vals.push(d);
        }
        Ok(vals.pop().expect("nonempty"))
    }

    /// `spec` in a workspace kept from one instance of a case to the next:
    /// the steps' meanings are written into `w`'s buffers, and each einsum
    /// step is planned once, on the first instance (the denotations' shapes
    /// are the case's). The same value as `spec`.
    pub fn spec_into<'w>(
        &self,
        m: &Mesh,
        ds: &[Denot],
        w: &'w mut SpecWork,
    ) -> Result<&'w Denot, EvalError> {
        let k = ds.len();
        let n = m.num_ranks();
        w.vals.truncate(self.steps.len());
        w.vals
            .resize_with(self.steps.len(), || Denot { family: vec![] });
        if w.plans.len() != self.steps.len() {
            // Planned on the denotations' shapes, step by step, as `spec`
            // plans them.
            let mut plans = Vec::with_capacity(self.steps.len());
            let mut shapes: Vec<Option<Shape>> = ds
                .iter()
                .map(|d| d.family.first().map(|t| t.shape.clone()))
                .collect();
            for (j, st) in self.steps.iter().enumerate() {
                plans.push(StepPlan::of(st, &|a| shapes.get(a).cloned().flatten()));
                let (done, rest) = w.vals.split_at_mut(j);
                let at = |a: usize| if a < k { &ds[a] } else { &done[a - k] };
                rest[0] = self.step_spec(m, st, &at, plans[j].as_ref())?;
                shapes.push(rest[0].family.first().map(|t| t.shape.clone()));
            }
            w.plans = plans;
            return Ok(w.vals.last().expect("nonempty"));
        }
        for (j, st) in self.steps.iter().enumerate() {
            let (done, rest) = w.vals.split_at_mut(j);
            let at = |a: usize| if a < k { &ds[a] } else { &done[a - k] };
            match &st.op.op {
                Op::Local(f) => {
                    let out = &mut rest[0].family;
                    out.resize_with(n, Tensor::placeholder);
                    let mut ctx = Ctx::default();
                    for (r, o) in out.iter_mut().enumerate() {
                        if let Some(p) = &w.plans[j] {
                            if p.eval_with(&|v| &at(st.args[v]).family[r], o) {
                                continue;
                            }
                        }
                        eval_step_at(&f.expr, &st.args, &|a| &at(a).family[r], &mut ctx, o)?;
                    }
                }
                // A collective, or a chain of them, written in place of the
                // last instance's meaning link by link (`run_chain`,
                // `Collective::spec_into`), each after the shape check
                // `Op::spec` makes.
                op if st.args.len() == 1 && op.collective_links().is_some() => {
                    let links = op.collective_links().expect("collectives");
                    let [a, b] = &mut w.chain;
                    let (shape, groups) = (&mut w.shape, &mut w.groups);
                    run_chain(
                        links.len(),
                        at(st.args[0]),
                        a,
                        b,
                        &mut rest[0],
                        |i, src, dst| {
                            let Op::Collective(c) = &links[i] else {
                                unreachable!("collectives only")
                            };
                            if let Some(t) = src.family.first() {
                                c.infer_into(m, &t.shape, shape).map_err(EvalError::Shape)?;
                            }
                            c.spec_into(m, src, dst, groups);
                            Ok::<(), EvalError>(())
                        },
                    )?;
                }
                _ => rest[0] = self.step_spec(m, st, &at, None)?,
            }
        }
        Ok(w.vals.last().expect("nonempty"))
    }

    /// One step's meaning on its arguments' denotations, as `spec`
    /// computes it.
    fn step_spec<'a>(
        &self,
        m: &Mesh,
        s: &Step,
        at: &impl Fn(usize) -> &'a Denot,
        plan: Option<&StepPlan>,
    ) -> Result<Denot, EvalError> {
        Ok(match &s.op.op {
            Op::Local(f) => {
                let family = (0..m.num_ranks())
                    .map(|r| {
                        if let Some(p) = plan {
                            let mut out = Tensor::placeholder();
                            if p.eval_with(&|v| &at(s.args[v]).family[r], &mut out) {
                                return Ok(out);
                            }
                        }
                        let args: Vec<&Tensor> = s.args.iter().map(|&a| &at(a).family[r]).collect();
                        eval(&f.expr, &args, &mut Ctx::default())
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Denot { family }
            }
            op => match s.args.as_slice() {
                [a] => op.spec(m, std::slice::from_ref(at(*a)))?,
                args => {
                    let args: Vec<Denot> = args.iter().map(|&a| at(a).clone()).collect();
                    op.spec(m, &args)?
                }
            },
        })
    }

    /// Reverse pass: each step's declared backward, last step first; a value
    /// used by several steps gets the sum of their cotangents.
    pub fn backward(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
    ) -> Result<Vec<PerRank>, EvalError> {
        let (vals, _) = self.run_steps(m, xs)?;
        self.backward_from(m, xs, &vals, g)
    }

    /// `backward` given the steps' outputs at `xs` (`run_steps`), so that
    /// several cotangents at one instance share one forward pass.
    pub fn backward_from(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        steps: &[PerRank],
        g: &PerRank,
    ) -> Result<Vec<PerRank>, EvalError> {
        self.backward_from_pooled(m, xs, steps, g, &mut Vec::new())
    }

    /// `backward_from` taking the buffers of the cotangents it starts from
    /// zero out of `spare` (any shapes: each is zeroed to the value's
    /// shapes first) and putting the steps' cotangents it is done with
    /// back, at most `SPARE_CAP` in all, so that a caller who keeps `spare`
    /// and gives back the results it no longer needs allocates little per
    /// call (SPEC.md §18.1). The values are `backward_from`'s.
    pub fn backward_from_pooled(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        steps: &[PerRank],
        g: &PerRank,
        spare: &mut Vec<PerRank>,
    ) -> Result<Vec<PerRank>, EvalError> {
        let mut out = Vec::new();
        self.backward_from_pooled_into(m, xs, steps, g, spare, &mut out)?;
        Ok(out)
    }

    /// `backward_from_pooled` with its results written into `out` (cleared
    /// first), whose vector is reused, as is a per-thread list of the
    /// steps' cotangents: a caller that gives its results back to `spare`
    /// allocates nothing per call once the pool holds enough buffers. On an
    /// error `out` is left empty.
    pub fn backward_from_pooled_into(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        steps: &[PerRank],
        g: &PerRank,
        spare: &mut Vec<PerRank>,
        out: &mut Vec<PerRank>,
    ) -> Result<(), EvalError> {
        thread_local! {
            static COT: std::cell::Cell<Vec<Option<PerRank>>> =
                const { std::cell::Cell::new(Vec::new()) };
        }
        out.clear();
        let k = xs.len();
        let at = |a: usize| if a < k { &xs[a] } else { &steps[a - k] };
        let last = self.steps.len() - 1;
        let mut cot = COT.take();
        cot.clear();
        cot.resize_with(k + steps.len(), || None);
        let mut r = Ok(());
        for (j, s) in self.steps.iter().enumerate().rev() {
            // The output's cotangent is `g` itself, read in place.
            let taken = if j == last {
                None
            } else {
                match cot[k + j].take() {
                    Some(c) => Some(c),
                    None => continue, // the value does not reach the output
                }
            };
            r = step_backward(m, s, &at, taken.as_ref().unwrap_or(g), &mut cot, spare);
            if let Some(t) = taken {
                give_back(spare, t);
            }
            if r.is_err() {
                break;
            }
        }
        if r.is_ok() {
            out.extend((0..k).map(|i| {
                cot[i].take().unwrap_or_else(|| PerRank {
                    tensors: xs[i]
                        .tensors
                        .iter()
                        .map(|t| Tensor::zeros(&t.shape))
                        .collect(),
                })
            }));
        }
        // What is left (after an error) goes back to the pool.
        for c in cot.drain(..).flatten() {
            give_back(spare, c);
        }
        COT.set(cot);
        r
    }

    /// A workspace for sampling the forward near the instance with inputs
    /// `xs` and step outputs `steps` (`run_steps`), see `sample`. A local
    /// step that is an einsum of its arguments (or a power of one) gets its
    /// einsum planned here, once for the operands' shapes.
    pub fn sampler(&self, xs: &[PerRank], steps: Vec<PerRank>) -> Sampler {
        let k = xs.len();
        let shape_of = |a: usize| -> Option<Shape> {
            let v = if a < k { &xs[a] } else { &steps[a - k] };
            v.tensors.first().map(|t| t.shape.clone())
        };
        let plans = self
            .steps
            .iter()
            .map(|st| StepPlan::of(st, &shape_of))
            .collect();
        Sampler {
            work: steps.clone(),
            dirty: steps.iter().map(|v| vec![false; v.tensors.len()]).collect(),
            base: steps,
            plans,
        }
    }

    /// Run the forward at inputs `xs` and give its sampler, with whether a
    /// step met a kink: `sampler(xs, run_steps(xs))`, but written into the
    /// buffers of `old` (a sampler of this program, from an earlier
    /// instance) where there is one. Its einsum plans are kept: they were
    /// made for the same shapes in a case, and a plan checks its operands'
    /// shapes before use, so another shape takes the definition. The values
    /// are those of `run_steps` and `sampler` (SPEC.md §18.1).
    pub fn sampler_at(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        old: Option<Sampler>,
    ) -> Result<(Sampler, bool), EvalError> {
        let Some(mut s) = old.filter(|s| s.plans.len() == self.steps.len()) else {
            let (vals, kink) = self.run_steps(m, xs)?;
            return Ok((self.sampler(xs, vals), kink));
        };
        let k = xs.len();
        let ns = self.steps.len();
        s.base.truncate(ns);
        s.base.resize_with(ns, || PerRank {
            tensors: Vec::new(),
        });
        let mut kink = false;
        let n = m.num_ranks();
        for (j, st) in self.steps.iter().enumerate() {
            let (done, rest) = s.base.split_at_mut(j);
            let out = &mut rest[0];
            // A planned einsum step rank by rank, as `sample` runs it (no
            // kinks: an einsum and its power have none); another step, or
            // operands of other shapes, the plain step.
            if let Some(p) = &s.plans[j] {
                let at = |a: usize| if a < k { &xs[a] } else { &done[a - k] };
                out.tensors.truncate(n);
                out.tensors.resize_with(n, Tensor::placeholder);
                if (0..n).all(|r| p.eval_into(&st.args, &at, r, &mut out.tensors[r])) {
                    continue;
                }
            }
            kink |= step_forward_into(m, st, xs, done, k, out)?;
        }
        s.work.truncate(ns);
        s.work.resize_with(ns, || PerRank {
            tensors: Vec::new(),
        });
        for (w, b) in s.work.iter_mut().zip(&s.base) {
            // Tensor::clone_from keeps the buffers.
            w.tensors.clone_from(&b.tensors);
        }
        s.dirty.truncate(ns);
        s.dirty.resize_with(ns, Vec::new);
        for (d, b) in s.dirty.iter_mut().zip(&s.base) {
            d.clear();
            d.resize(b.tensors.len(), false);
        }
        Ok((s, kink))
    }

    /// The forward at inputs `xs` that equal the sampler's instance except
    /// on the ranks of input `i` marked in `touched`, written into the
    /// sampler's workspace (SPEC.md §18.1). Only what can differ is
    /// recomputed: a local step (rank by rank) on the ranks where an
    /// argument differs, in place; any other step in full where an argument
    /// differs at all; the rest is the instance's. Returns whether a
    /// recomputed step met a kink (the instance's own kinks are not
    /// repeated: the callers that read it sample only kink-free instances).
    /// `unsample` restores the workspace, also after an error. A sample may
    /// also follow another (or an error) without `unsample`: a rank the
    /// last one overwrote and this one does not recompute is put back from
    /// the instance first (SPEC.md §18.8).
    pub fn sample(
        &self,
        m: &Mesh,
        s: &mut Sampler,
        xs: &[PerRank],
        i: usize,
        touched: &[bool],
    ) -> Result<bool, EvalError> {
        let k = xs.len();
        let n = m.num_ranks();
        let mut kink = false;
        for (j, st) in self.steps.iter().enumerate() {
            let (done, rest) = s.work.split_at_mut(j);
            let (dirty_done, dirty_rest) = s.dirty.split_at_mut(j);
            let plan = s.plans[j].as_ref();
            let arg_dirty = |a: usize, r: usize| -> bool {
                if a < k {
                    a == i && touched[r]
                } else {
                    dirty_done[a - k][r]
                }
            };
            let mask = &mut dirty_rest[0];
            let out = &mut rest[0];
            let base = &s.base[j];
            let rank_wise = rank_wise(m, &st.op.op);
            if rank_wise.is_some() {
                let mut any = false;
                for (r, d) in mask.iter_mut().enumerate() {
                    let now = st.args.iter().any(|&a| arg_dirty(a, r));
                    if *d && !now {
                        // Left over from the last sample.
                        out.tensors[r].clone_from(&base.tensors[r]);
                    }
                    *d = now;
                    any |= now;
                }
                if !any {
                    continue;
                }
            }
            let at = |a: usize| if a < k { &xs[a] } else { &done[a - k] };
            match rank_wise {
                Some(RankWise::Expr(e)) => {
                    let mut ctx = Ctx::default();
                    for r in (0..n).filter(|&r| mask[r]) {
                        if let Some(p) = plan {
                            if p.eval_into(&st.args, &at, r, &mut out.tensors[r]) {
                                continue;
                            }
                        }
                        eval_step_at(
                            e,
                            &st.args,
                            &|a| &at(a).tensors[r],
                            &mut ctx,
                            &mut out.tensors[r],
                        )?;
                    }
                    kink |= ctx.at_kink;
                }
                Some(RankWise::Copy) => {
                    for r in (0..n).filter(|&r| mask[r]) {
                        out.tensors[r].clone_from(&at(st.args[0]).tensors[r]);
                    }
                }
                Some(RankWise::Scale(q)) => {
                    for r in (0..n).filter(|&r| mask[r]) {
                        out.tensors[r] = at(st.args[0]).tensors[r].scale(&q);
                    }
                }
                None => {
                    let any = (0..n).any(|r| st.args.iter().any(|&a| arg_dirty(a, r)));
                    if !any {
                        for (r, d) in mask.iter_mut().enumerate() {
                            if *d {
                                out.tensors[r].clone_from(&base.tensors[r]);
                                *d = false;
                            }
                        }
                        continue;
                    }
                    mask.iter_mut().for_each(|d| *d = true);
                    kink |= step_forward_into(m, st, xs, done, k, out)?;
                }
            }
        }
        Ok(kink)
    }

    /// Put the instance's values back into the sampler's workspace.
    pub fn unsample(&self, s: &mut Sampler) {
        for ((w, b), d) in s.work.iter_mut().zip(&s.base).zip(&mut s.dirty) {
            for (r, dr) in d.iter_mut().enumerate() {
                if *dr {
                    w.tensors[r].clone_from(&b.tensors[r]);
                    *dr = false;
                }
            }
        }
    }

    /// Elements sent per rank: the forward's collectives, and the backward's
    /// (declared transposes applied to cotangents of the output shapes).
    pub fn cost(&self, m: &Mesh, shapes: &[Shape]) -> Result<(Q, Q), String> {
        let all = self.shapes(m, shapes)?;
        let k = self.inputs.len();
        let (mut fwd, mut bwd) = (Q::zero(), Q::zero());
        for (j, s) in self.steps.iter().enumerate() {
            let args: Vec<Shape> = s.args.iter().map(|&a| all[a].clone()).collect();
            fwd = fwd.add(&s.op.op.cost(m, &args));
            bwd = bwd.add(&s.op.backward_cost(m, &args, &all[k + j]));
        }
        Ok((fwd, bwd))
    }
}

/// A step's arguments evaluated without a heap list of them (also the most
/// inputs of a local op whose backward `TypedOp::backward_into` writes in
/// place).
pub(crate) const MAX_ARGS: usize = 8;

/// A placeholder argument slot, overwritten before use.
static EMPTY: Tensor = Tensor::placeholder();

/// The local function a step's forward runs rank by rank, if any: a local
/// op's, or that of a declared op whose forward is local (its declared
/// meaning changes only F3).
fn local_expr(op: &Op) -> Option<&Expr> {
    match op {
        Op::Local(f) => Some(&f.expr),
        Op::Declared { forward, .. } => local_expr(forward),
        _ => None,
    }
}

/// How a step's forward computes rank r from its arguments' rank r alone,
/// if it does: a local function; a reinterpretation (the identity on each
/// rank); a division by the group size (a scaling on each rank). These are
/// exactly what `Op::forward` computes on those ranks.
enum RankWise<'a> {
    Expr(&'a Expr),
    Copy,
    Scale(Q),
}

fn rank_wise<'a>(m: &Mesh, op: &'a Op) -> Option<RankWise<'a>> {
    match op {
        Op::Local(f) => Some(RankWise::Expr(&f.expr)),
        Op::Declared { forward, .. } => rank_wise(m, forward),
        Op::Collective(c) => match c.kind {
            Kind::Reinterpret => Some(RankWise::Copy),
            Kind::DivideByGroupSize => Some(RankWise::Scale(Q::frac(1, c.group_size(m) as i64))),
            _ => None,
        },
        _ => None,
    }
}

/// One step's forward on values read in place: value `a` is input `a` of
/// `xs` below `k`, else step output `a - k`. A local step runs rank by rank
/// exactly as `Op::forward` does (one kink flag over the ranks); any other
/// step gets its arguments as a slice, borrowed when it has one.
fn step_forward(
    m: &Mesh,
    s: &Step,
    xs: &[PerRank],
    steps: &[PerRank],
    k: usize,
) -> Result<Forward, EvalError> {
    let mut y = PerRank {
        tensors: Vec::new(),
    };
    let at_kink = step_forward_into(m, s, xs, steps, k, &mut y)?;
    Ok(Forward { y, at_kink })
}

/// [`step_forward`] written into `out`, reusing its tensors' buffers where
/// the step is local or a collective; whether a kink was met. On an error
/// `out` holds partial data.
fn step_forward_into(
    m: &Mesh,
    s: &Step,
    xs: &[PerRank],
    steps: &[PerRank],
    k: usize,
    out: &mut PerRank,
) -> Result<bool, EvalError> {
    let at = |a: usize| if a < k { &xs[a] } else { &steps[a - k] };
    if let Some(e) = local_expr(&s.op.op) {
        let n = m.num_ranks();
        out.tensors.truncate(n);
        out.tensors.resize_with(n, Tensor::placeholder);
        let mut ctx = Ctx::default();
        for (r, o) in out.tensors.iter_mut().enumerate() {
            eval_step_at(e, &s.args, &|a| &at(a).tensors[r], &mut ctx, o)?;
        }
        return Ok(ctx.at_kink);
    }
    let f = match (&s.op.op, s.args.as_slice()) {
        (Op::Collective(c), [a]) => {
            c.forward_into(m, at(*a), out).map_err(EvalError::Shape)?;
            return Ok(false);
        }
        (op, [a]) => match op.collectives_into(m, at(*a), out) {
            // A chain of collectives, into the buffers (`Op::collectives_into`).
            Some(r) => return r.map(|()| false),
            None => op.forward(m, std::slice::from_ref(at(*a)))?,
        },
        (op, args) => {
            let args: Vec<PerRank> = args.iter().map(|&a| at(a).clone()).collect();
            op.forward(m, &args)?
        }
    };
    *out = f.y;
    Ok(f.at_kink)
}

/// One step's declared backward at cotangent `g`, its arguments read in
/// place through `at`, each argument's cotangent added into `cot` (a value
/// used by several steps gets the sum). A local op's own VJP (no
/// `no_grad`) runs rank by rank exactly as `TypedOp::backward` does, a zero
/// cotangent giving exact zeros; any other backward gets its arguments as a
/// slice, borrowed when the step has one.
fn step_backward<'a>(
    m: &Mesh,
    s: &Step,
    at: &impl Fn(usize) -> &'a PerRank,
    g: &PerRank,
    cot: &mut [Option<PerRank>],
    spare: &mut Vec<PerRank>,
) -> Result<(), EvalError> {
    let gs = match (&s.op.backward, &s.op.op) {
        (Backward::LocalVjp, Op::Local(f)) if s.op.no_grad.is_empty() => {
            if local_vjp_in_place(m.num_ranks(), s, &f.expr, at, g, cot, spare)? {
                return Ok(());
            }
            let n = m.num_ranks();
            let mut out: Vec<PerRank> = s
                .args
                .iter()
                .map(|_| PerRank {
                    tensors: Vec::with_capacity(n),
                })
                .collect();
            for r in 0..n {
                if g.tensors[r].is_zero() {
                    for (o, &a) in out.iter_mut().zip(&s.args) {
                        o.tensors.push(Tensor::zeros(&at(a).tensors[r].shape));
                    }
                    continue;
                }
                let args: Vec<&Tensor> = s.args.iter().map(|&a| &at(a).tensors[r]).collect();
                for (o, gi) in out.iter_mut().zip(vjp(&f.expr, &args, &g.tensors[r])?) {
                    o.tensors.push(gi);
                }
            }
            out
        }
        // A collective's transpose, run into a pooled buffer: the value
        // `Op::forward` gives, which is `forward_into` a fresh one.
        // A chain of collectives likewise (`Op::collectives_into`).
        (Backward::Transpose(t), _)
            if s.op.no_grad.is_empty() && s.args.len() == 1 && t.collective_links().is_some() =>
        {
            let mut z = spare.pop().unwrap_or(PerRank {
                tensors: Vec::new(),
            });
            t.collectives_into(m, g, &mut z)
                .expect("a collective or a chain of them")?;
            if let Some(spent) = add_cotangent(&mut cot[s.args[0]], z) {
                give_back(spare, spent);
            }
            return Ok(());
        }
        _ => match s.args.as_slice() {
            [a] => s.op.backward(m, std::slice::from_ref(at(*a)), g)?,
            args => {
                let args: Vec<PerRank> = args.iter().map(|&a| at(a).clone()).collect();
                s.op.backward(m, &args, g)?
            }
        },
    };
    for (&a, ga) in s.args.iter().zip(gs) {
        if let Some(spent) = add_cotangent(&mut cot[a], ga) {
            give_back(spare, spent);
        }
    }
    Ok(())
}

/// Most buffers `Program::backward_from_pooled` keeps in its pool.
pub const SPARE_CAP: usize = 64;

/// Put `p` into the pool `spare` unless it is full.
pub fn give_back(spare: &mut Vec<PerRank>, p: PerRank) {
    if spare.len() < SPARE_CAP {
        spare.push(p);
    }
}

/// `slot + ga` into `slot` (`ga` where it is empty): in place where the
/// two have the same ranks and shapes (the same sums as `PerRank::add`),
/// else by `PerRank::add` itself. Gives back `ga` when it was added in
/// place, for a pool.
fn add_cotangent(slot: &mut Option<PerRank>, ga: PerRank) -> Option<PerRank> {
    match slot {
        None => {
            *slot = Some(ga);
            None
        }
        Some(prev)
            if prev.tensors.len() == ga.tensors.len()
                && prev
                    .tensors
                    .iter()
                    .zip(&ga.tensors)
                    .all(|(p, q)| p.shape == q.shape) =>
        {
            for (p, q) in prev.tensors.iter_mut().zip(&ga.tensors) {
                p.add_scaled(&Q::one(), q);
            }
            Some(ga)
        }
        Some(prev) => {
            *prev = prev.add(&ga);
            Some(ga)
        }
    }
}

/// A local step's VJP added rank by rank straight into its arguments'
/// cotangents in `cot` (`vjp_add`), a missing one starting at zeros: no
/// tensor per rank and argument beyond those, and no sum of two. Only for
/// distinct arguments (at most `MAX_ARGS`) whose values and cotangents
/// have `n` ranks of matching shapes, and a cotangent `g` of `n` ranks;
/// otherwise `false`, with nothing done, and the caller takes the general
/// path. A rank where `g` is zero adds nothing, as its exact zeros would.
fn local_vjp_in_place<'a>(
    n: usize,
    s: &Step,
    e: &Expr,
    at: &impl Fn(usize) -> &'a PerRank,
    g: &PerRank,
    cot: &mut [Option<PerRank>],
    spare: &mut Vec<PerRank>,
) -> Result<bool, EvalError> {
    let na = s.args.len();
    if na > MAX_ARGS || g.tensors.len() != n {
        return Ok(false);
    }
    for (i, &a) in s.args.iter().enumerate() {
        if s.args[..i].contains(&a) || at(a).tensors.len() != n {
            return Ok(false);
        }
        if let Some(c) = &cot[a] {
            let fits = c.tensors.len() == n
                && c.tensors
                    .iter()
                    .zip(&at(a).tensors)
                    .all(|(c, v)| c.shape == v.shape);
            if !fits {
                return Ok(false);
            }
        }
    }
    for &a in &s.args {
        if cot[a].is_none() {
            // Zeros of the value's shapes, in a spare buffer if there is one.
            let mut z = spare.pop().unwrap_or(PerRank {
                tensors: Vec::new(),
            });
            z.zero_as(at(a));
            cot[a] = Some(z);
        }
    }
    // Empty tensors (no buffers), swapped with each rank's cotangents. Every
    // swap is undone before the loop can leave, so they need no drop.
    let mut grads: std::mem::ManuallyDrop<[Tensor; MAX_ARGS]> =
        std::mem::ManuallyDrop::new(std::array::from_fn(|_| Tensor::placeholder()));
    for r in 0..n {
        if g.tensors[r].is_zero() {
            continue;
        }
        let mut args: [&Tensor; MAX_ARGS] = [&EMPTY; MAX_ARGS];
        for ((slot, gr), &a) in args.iter_mut().zip(grads.iter_mut()).zip(&s.args) {
            *slot = &at(a).tensors[r];
            let c = cot[a].as_mut().expect("filled above");
            std::mem::swap(gr, &mut c.tensors[r]);
        }
        let res = vjp_add(e, &args[..na], &g.tensors[r], &mut grads[..na]);
        for (gr, &a) in grads.iter_mut().zip(&s.args) {
            let c = cot[a].as_mut().expect("filled above");
            std::mem::swap(gr, &mut c.tensors[r]);
        }
        res?;
    }
    Ok(true)
}

/// A local step's function `e` at one rank into `out`, its argument `a`
/// (an index into the program's values) read as `arg(a)`: on the stack up
/// to `MAX_ARGS` arguments.
fn eval_step_at<'a>(
    e: &Expr,
    args: &[usize],
    arg: &impl Fn(usize) -> &'a Tensor,
    ctx: &mut Ctx,
    out: &mut Tensor,
) -> Result<(), EvalError> {
    if args.len() <= MAX_ARGS {
        let mut xs: [&Tensor; MAX_ARGS] = [&EMPTY; MAX_ARGS];
        for (slot, &a) in xs.iter_mut().zip(args) {
            *slot = arg(a);
        }
        eval_into(e, &xs[..args.len()], ctx, out)
    } else {
        let xs: Vec<&Tensor> = args.iter().map(|&a| arg(a)).collect();
        eval_into(e, &xs, ctx, out)
    }
}

/// A local step `einsum(...)` or `einsum(...)^k` over its arguments, planned
/// for the operands' shapes at the sampler's instance.
struct StepPlan {
    plan: std::sync::Arc<EinsumPlan>,
    /// Per operand: the local function's variable (an index into the
    /// step's arguments).
    vars: Vec<usize>,
    shapes: Vec<Shape>,
    pow: Option<u32>,
}

impl StepPlan {
    /// The plan of a local step that is `einsum(...)` or `einsum(...)^k`
    /// over its arguments, for the argument shapes `shape_of` gives (by
    /// value index); `None` for any other step or shapes the spec refuses.
    fn of(st: &Step, shape_of: &impl Fn(usize) -> Option<Shape>) -> Option<StepPlan> {
        let Op::Local(f) = &st.op.op else {
            return None;
        };
        let (spec, args, pow) = match &f.expr {
            Expr::Einsum(spec, args) => (spec, args, None),
            Expr::Pow(inner, p) => match &**inner {
                Expr::Einsum(spec, args) => (spec, args, Some(*p)),
                _ => return None,
            },
            _ => return None,
        };
        let vars: Vec<usize> = args
            .iter()
            .map(|a| match a {
                Expr::Var(v) if *v < st.args.len() => Some(*v),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let shapes: Vec<Shape> = vars
            .iter()
            .map(|&v| shape_of(st.args[v]))
            .collect::<Option<_>>()?;
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let plan = einsum_plan_cached(spec, &refs).ok()?;
        Some(StepPlan {
            plan,
            vars,
            shapes,
            pow,
        })
    }

    /// Rank `r` of the step into `out`, exactly as `eval` computes it (the
    /// einsum, then each entry to the power); `false`, with nothing
    /// written, where an operand's shape is not the planned one.
    fn eval_into<'a>(
        &self,
        args: &[usize],
        at: &impl Fn(usize) -> &'a PerRank,
        r: usize,
        out: &mut Tensor,
    ) -> bool {
        self.eval_with(&|v| &at(args[v]).tensors[r], out)
    }

    /// `eval_into` with the step's argument `v` (an index into its
    /// arguments) read as `arg(v)`.
    fn eval_with<'a>(&self, arg: &impl Fn(usize) -> &'a Tensor, out: &mut Tensor) -> bool {
        let mut ops: [&Tensor; MAX_ARGS] = [&EMPTY; MAX_ARGS];
        if self.vars.len() > MAX_ARGS {
            return false;
        }
        for ((slot, &v), shape) in ops.iter_mut().zip(&self.vars).zip(&self.shapes) {
            let t = arg(v);
            if !same_shape(&t.shape, shape) {
                return false;
            }
            *slot = t;
        }
        einsum_planned_into(&self.plan, &ops[..self.vars.len()], out);
        if let Some(k) = self.pow {
            for v in out.data.iter_mut() {
                *v = (0..k).fold(Q::one(), |acc, _| acc.mul(v));
            }
        }
        true
    }
}

/// A program's workspace for its meaning (`Program::spec_into`): the steps'
/// meanings at the last instance, and per step its planned einsum, made on
/// the first instance of a case and kept for the others.
#[derive(Default)]
pub struct SpecWork {
    vals: Vec<Denot>,
    plans: Vec<Option<StepPlan>>,
    /// A collective step's output shape, its group buffers, and the two
    /// meanings a chain of collectives passes between its links.
    shape: Shape,
    groups: crate::collective::SpecBufs,
    chain: [Denot; 2],
}

/// A program's sampling workspace (`Program::sampler`): the instance's step
/// outputs, a working copy that `Program::sample` overwrites in place, and
/// per step the ranks it overwrote.
pub struct Sampler {
    base: Vec<PerRank>,
    work: Vec<PerRank>,
    dirty: Vec<Vec<bool>>,
    /// Per step: its planned einsum, if it is one.
    plans: Vec<Option<StepPlan>>,
}

impl Sampler {
    /// The steps' outputs at the last sample (the instance's after `unsample`).
    pub fn steps(&self) -> &[PerRank] {
        &self.work
    }
    /// The program's output at the last sample.
    pub fn output(&self) -> &PerRank {
        self.work.last().expect("nonempty")
    }
    /// The ranks where the last sample's output may differ from the instance's.
    pub fn output_changed(&self) -> &[bool] {
        self.dirty.last().expect("nonempty")
    }
    /// The instance's steps' outputs.
    pub fn base(&self) -> &[PerRank] {
        &self.base
    }
}

/// Degree along a line of `op` applied to arguments that are polynomials of
/// degrees `args` along it; `None` where the op's structure is not read here
/// (the caller then uses the per-argument bound).
fn substituted(op: &Op, args: &[u32]) -> Option<u32> {
    match op {
        Op::Local(f) => expr_degree(&f.expr, args),
        Op::Collective(_) | Op::Compose(_) => args.first().copied(),
        Op::Declared { forward, .. } => substituted(forward, args),
        _ => None,
    }
}

/// The degree of `e` when variable j is a polynomial of degree `vars[j]`:
/// sums, concatenations and updates take the maximum, products and einsums
/// add, a power multiplies, reductions, reshapes, slices and gathers keep
/// the degree (each output entry is a sum of input entries), abs, relu and
/// max keep it on each piece, floor and casts are constant on each piece.
/// `None` for a division by a non-constant or a node not read here.
fn expr_degree(e: &Expr, vars: &[u32]) -> Option<u32> {
    let d = |x: &Expr| expr_degree(x, vars);
    let max_of = |xs: &[Expr]| {
        xs.iter()
            .map(|x| expr_degree(x, vars))
            .try_fold(0u32, |a, b| Some(a.max(b?)))
    };
    match e {
        Expr::Var(i) => vars.get(*i).copied(),
        Expr::Const(_) => Some(0),
        Expr::Neg(a)
        | Expr::Sum(a, _)
        | Expr::Mean(a, _)
        | Expr::Max(a, _)
        | Expr::Reshape(a, _)
        | Expr::Slice(a, ..)
        | Expr::Take(a, ..)
        | Expr::Abs(a)
        | Expr::Relu(a) => d(a),
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::UpdateSlice(a, b, _) => Some(d(a)?.max(d(b)?)),
        Expr::Mul(a, b) => Some(d(a)?.saturating_add(d(b)?)),
        Expr::Div(a, b) => match d(b)? {
            0 => d(a),
            _ => None,
        },
        Expr::Pow(a, k) => Some(d(a)?.saturating_mul(*k)),
        Expr::Einsum(_, xs) => xs
            .iter()
            .map(|x| expr_degree(x, vars))
            .try_fold(0u32, |a, b| Some(a.saturating_add(b?))),
        Expr::Concat(xs, _) => max_of(xs),
        Expr::Floor(_) | Expr::Cast(..) => Some(0),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// A bound on the total degree, in the program's inputs, of a step whose
/// degree in its arguments is `d` (at most `d.num[j]` in argument j, at
/// most `d.total` in all together) applied to arguments of total degrees
/// `args`: the largest Σ αⱼ·Tⱼ over exponents within those bounds, which
/// taking the arguments of highest degree first attains.
fn substituted_total(d: &Degree, args: impl Iterator<Item = u32>) -> u32 {
    let mut by: Vec<(u32, u32)> = args.zip(d.num.iter().copied()).collect();
    by.sort_by_key(|b| std::cmp::Reverse(b.0));
    let (mut left, mut total) = (d.total, 0u32);
    for (t, n) in by {
        let take = left.min(n);
        total = total.saturating_add(take.saturating_mul(t));
        left -= take;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse;
    use spmd_semantics::State;

    fn local(name: &str, expr: &str, args: &[usize], n: usize) -> Step {
        let v = Type::one(State::Varying);
        Step {
            name: name.into(),
            op: TypedOp::local(parse(expr).unwrap(), vec![v.clone(); n], v),
            args: args.to_vec(),
        }
    }

    #[test]
    fn steps_must_fit_their_values() {
        let v = Type::one(State::Varying);
        let bad = Program::new(vec![v.clone()], vec![local("s", "a * b", &[0, 1], 2)]);
        assert!(bad
            .unwrap_err()
            .contains("value 1, which is not defined yet"));
        let p = Type::one(State::Partial);
        let step = Step {
            name: "t".into(),
            op: TypedOp::local(parse("2 * a").unwrap(), vec![p.clone()], p),
            args: vec![0],
        };
        let bad = Program::new(vec![v], vec![step]);
        assert!(bad.unwrap_err().contains("expects P but value 0 is V"));
    }

    /// The meaning in a kept workspace equals `spec` instance after
    /// instance, and after the shapes change (another case: the einsum
    /// plan made for the first shapes is not used for the new ones). The
    /// twin: a workspace whose plan is used on operands it was not made
    /// for would give the first shapes' contraction; `eval_with` refuses
    /// them, which the change of shapes below exercises.
    #[test]
    fn the_meaning_in_a_kept_workspace_is_the_meaning() {
        let v = Type::one(State::Varying);
        let p = Program::new(
            vec![v.clone(), v],
            vec![
                local("t", "einsum(\"ij,jk->ik\", a, b)", &[0, 1], 2),
                local("u", "t * t + a", &[2, 0], 2),
            ],
        )
        .unwrap();
        let m = Mesh::line(2);
        let den = |shape: &[usize], seed: i64| Denot {
            family: (0..2)
                .map(|r| {
                    let n: usize = shape.iter().product();
                    Tensor::new(
                        shape.to_vec(),
                        (0..n as i64)
                            .map(|k| Q::int(seed + 3 * k - 2 * r))
                            .collect(),
                    )
                })
                .collect(),
        };
        let mut w = SpecWork::default();
        for (shape, seed) in [
            (vec![2, 2], 1),
            (vec![2, 2], -4),
            (vec![3, 3], 2),
            (vec![3, 3], 7),
        ] {
            let ds = vec![den(&shape, seed), den(&shape, seed + 1)];
            let want = p.spec(&m, &ds).unwrap();
            assert_eq!(*p.spec_into(&m, &ds, &mut w).unwrap(), want, "{shape:?}");
        }
        // The plan kept is the first shapes': (2, 2).
        assert_eq!(
            w.plans[0].as_ref().map(|p| p.shapes.clone()),
            Some(vec![vec![2, 2]; 2])
        );
    }

    /// x used twice (y = x * (3x)): the reverse pass adds both cotangents,
    /// dy/dx = 6x.
    #[test]
    fn a_value_used_twice_gets_the_sum_of_its_cotangents() {
        let v = Type::one(State::Varying);
        let p = Program::new(
            vec![v],
            vec![
                local("t = 3x", "3 * a", &[0], 1),
                local("y = x t", "a * b", &[0, 1], 2),
            ],
        )
        .unwrap();
        let m = Mesh::line(1);
        let x = PerRank {
            tensors: vec![Tensor::scalar(Q::int(2))],
        };
        let g = PerRank {
            tensors: vec![Tensor::scalar(Q::one())],
        };
        assert_eq!(
            p.forward(&m, std::slice::from_ref(&x)).unwrap().y.tensors[0].data[0],
            Q::int(12)
        );
        let dx = p.backward(&m, &[x], &g).unwrap();
        assert_eq!(dx[0].tensors[0].data[0], Q::int(12));
        let (_, d) = p.infer(&m, &[vec![]]).unwrap();
        assert_eq!(d.num, vec![2]);
    }

    /// The reverse pass by the steps' own backwards (`TypedOp::backward`
    /// on cloned arguments) with cotangents summed by `PerRank::add`, or,
    /// for the twin, overwritten by the last step's.
    fn backward_by_ops(
        p: &Program,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
        sum: bool,
    ) -> Vec<PerRank> {
        let vals = p.values(m, xs).unwrap();
        let mut cot: Vec<Option<PerRank>> = vec![None; vals.len()];
        cot[vals.len() - 1] = Some(g.clone());
        for (j, s) in p.steps.iter().enumerate().rev() {
            let Some(gj) = cot[xs.len() + j].take() else {
                continue;
            };
            let args: Vec<PerRank> = s.args.iter().map(|&a| vals[a].clone()).collect();
            for (&a, ga) in s.args.iter().zip(s.op.backward(m, &args, &gj).unwrap()) {
                cot[a] = Some(match cot[a].take() {
                    Some(prev) if sum => prev.add(&ga),
                    _ => ga,
                });
            }
        }
        cot.truncate(xs.len());
        cot.into_iter().map(|c| c.unwrap()).collect()
    }

    /// The in-place reverse pass (local VJPs added straight into the
    /// cotangents, in-place sums) against the steps' own backwards summed
    /// by `PerRank::add`: fan-out of inputs and of step values, an einsum
    /// step, a full contraction broadcast back, a step using one value
    /// twice (the general path), and a cotangent that is zero on a rank.
    #[test]
    fn the_in_place_reverse_pass_is_the_steps_backwards_summed() {
        let steps = vec![
            local("t = x0 x1", "a * b", &[0, 1], 2),
            local("u = t x0", "einsum(\"i,i->i\", a, b)", &[2, 0], 2),
            local("w = u + 3t", "a + 3 * b", &[3, 2], 2),
            local("y = x1 w - x0", "a * b - c", &[1, 4, 0], 3),
            local("z = y y", "a * b", &[5, 5], 2),
            local("q = z . x0", "einsum(\"i,i->\", a, b)", &[6, 0], 2),
            local("o = q x1 / 2", "a * b / 2", &[7, 1], 2),
        ];
        let v = Type::one(State::Varying);
        let p = Program::new(vec![v.clone(), v], steps).unwrap();
        let m = Mesh::line(2);
        let vec2 = |a: Q, b: Q| Tensor::new(vec![2], vec![a, b]);
        let pr = |ts: Vec<Tensor>| PerRank { tensors: ts };
        let xs = [
            pr(vec![
                vec2(Q::frac(1, 2), Q::int(-1)),
                vec2(Q::int(2), Q::zero()),
            ]),
            pr(vec![
                vec2(Q::int(3), Q::frac(-2, 3)),
                vec2(Q::one(), Q::int(2)),
            ]),
        ];
        let gs = [
            pr(vec![
                vec2(Q::one(), Q::int(-2)),
                vec2(Q::frac(1, 3), Q::int(5)),
            ]),
            pr(vec![vec2(Q::int(2), Q::zero()), vec2(Q::zero(), Q::zero())]),
        ];
        for g in &gs {
            let got = p.backward(&m, &xs, g).unwrap();
            assert_eq!(got, backward_by_ops(&p, &m, &xs, g, true));
            assert!(
                got.iter().all(|c| !c.tensors[0].is_zero()),
                "reached every input"
            );
            // The twin: a pass that keeps one step's cotangent of x0 instead
            // of the sum over its four uses is told apart.
            let wrong = backward_by_ops(&p, &m, &xs, g, false);
            assert_ne!(got[0], wrong[0]);
        }
    }

    /// Fan-in of one value to both arguments of a sum, five times: the
    /// per-argument bound doubled each time (2⁵), the substituted one stays
    /// linear; a product still adds (x·x has degree 2).
    #[test]
    fn sums_take_the_maximum_and_products_add() {
        let mut steps = vec![];
        for k in 0..5 {
            steps.push(local("b", "2 * a", &[2 * k], 1));
            steps.push(local("v", "a + b", &[2 * k, 2 * k + 1], 2));
        }
        let v = Type::one(State::Varying);
        let p = Program::new(vec![v.clone()], steps).unwrap();
        let (_, d) = p.infer(&Mesh::line(1), &[vec![]]).unwrap();
        assert_eq!(d.num, vec![1]);
        let sq = Program::new(vec![v], vec![local("s", "a * b", &[0, 0], 2)]).unwrap();
        let (_, d) = sq.infer(&Mesh::line(1), &[vec![]]).unwrap();
        assert_eq!(d.num, vec![2]);
    }
}
