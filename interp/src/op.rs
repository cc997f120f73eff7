//! Typed operations and their per-rank execution (SPEC.md §4, §6.4).

use crate::collective::{Collective, Kind};
use crate::eval::{eval, infer, vjp, vjp_add, vjp_add_at, Ctx, Degree, EvalError};
use crate::expr::{parse, LocalFn};
use crate::program::{Program, MAX_ARGS};
use spmd_semantics::perrank::{global, Denot};
use spmd_semantics::{Mesh, PerRank, Shape, Tensor, Type, Q};

/// An operation on per-rank values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The same local function on every rank; never communicates.
    Local(LocalFn),
    /// A collective or cast on one value (SPEC.md §10).
    Collective(Collective),
    /// `a |> b |> ...`: one-input ops applied in order.
    Compose(Vec<Op>),
    /// Runs `forward` but claims the global meaning of `meaning`: how an
    /// implementation that disagrees with its documentation looks.
    Declared { forward: Box<Op>, meaning: Box<Op> },
    /// A straight-line program of typed steps (SPEC.md §12).
    Program(Box<Program>),
    /// A local op computed by a closure (SPEC.md §20.4).
    External(crate::external::External),
}

/// How the backward of a typed op is computed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Backward {
    /// The per-rank VJP of the local function (SPEC.md §6.3).
    LocalVjp,
    /// A named transpose applied to the cotangent (one-input ops).
    Transpose(Op),
    /// For `Op::Program`: every step's own backward, in reverse.
    Steps,
    /// A hand-written local backward (a rule designer's VJP): one function
    /// per input, of the primals and then the output cotangent `g`, run on
    /// every rank.
    Local(Vec<LocalFn>),
}

/// An op with the types it is claimed to have: the thing a rule states and
/// the oracle checks (SPEC.md §4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypedOp {
    pub op: Op,
    pub inputs: Vec<Type>,
    pub output: Type,
    pub backward: Backward,
    /// A declared forward-mode rule, checked by J1 (SPEC.md §4.8). `None`:
    /// a linear op is its own JVP; other ops declare none.
    pub jvp: Option<Jvp>,
    /// Inputs that get no gradient (spmd_types' `no_grad`): B1-B3 skip them.
    pub no_grad: Vec<usize>,
}

/// A declared JVP: how a system computes the output tangent. Tangents have
/// the types of their primals (SPEC.md §4.8).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Jvp {
    /// A local function of the primals and then the tangents (`x, y, dx,
    /// dy`), run on every rank.
    Local(LocalFn),
    /// An op applied to the tangent alone (one-input ops), e.g. all_reduce
    /// as the JVP of all_reduce.
    Tangent(Op),
}

/// The forward of one instance, with whether a kink was met exactly.
pub struct Forward {
    pub y: PerRank,
    pub at_kink: bool,
}

/// Why a transcendental op inside a program or a declared meaning fits no
/// shape: only plain local ops take the exact path so far (SPEC.md §19.6).
pub const TRANSCENDENTAL_ONLY_LOCAL: &str =
    "transcendental ops are checked as plain local ops only, not as program steps or declared meanings (SPEC.md §19.6)";

impl Op {
    /// A local op that needs the exact transcendental path (SPEC.md §19).
    pub fn is_transcendental_local(&self) -> bool {
        matches!(self, Op::Local(f) if crate::transcendental::is_transcendental(&f.expr))
    }
    pub fn arity(&self) -> usize {
        match self {
            Op::Local(f) => f.arity(),
            Op::Collective(_) | Op::Compose(_) => 1,
            Op::Declared { forward, .. } => forward.arity(),
            Op::Program(p) => p.inputs.len(),
            Op::External(e) => e.arity(),
        }
    }
    pub fn describe(&self) -> String {
        match self {
            Op::Local(f) => f.text.clone(),
            Op::Collective(c) => c.describe(),
            Op::Compose(ops) => ops
                .iter()
                .map(Op::describe)
                .collect::<Vec<_>>()
                .join(" |> "),
            Op::Declared { forward, meaning } => format!(
                "{} (declared as {})",
                forward.describe(),
                meaning.describe()
            ),
            Op::Program(p) => p.describe(),
            Op::External(e) => e.describe(),
        }
    }
    /// Linear in its input (collectives, casts and their compositions): its
    /// JVP is itself (SPEC.md §4.8).
    pub fn is_linear(&self) -> bool {
        match self {
            Op::Local(_) | Op::External(_) => false,
            Op::Collective(_) => true,
            Op::Compose(ops) => ops.iter().all(Op::is_linear),
            Op::Declared { forward, .. } => forward.is_linear(),
            Op::Program(_) => false,
        }
    }
    /// Output shape and degree bounds for inputs of these shapes on mesh `m`;
    /// `Err` when the shapes do not fit the op.
    pub fn infer(&self, m: &Mesh, shapes: &[Shape]) -> Result<(Shape, Degree), String> {
        let linear = || Degree {
            num: vec![1],
            den: vec![0],
            piecewise: false,
            total: 1,
        };
        match self {
            Op::Local(f) => infer(&f.expr, shapes),
            Op::Collective(c) => match shapes {
                [s] => Ok((c.infer(m, s)?, linear())),
                _ => Err(format!("{} takes one input", c.name)),
            },
            Op::Declared { forward, meaning } => {
                if forward.is_transcendental_local() || meaning.is_transcendental_local() {
                    return Err(TRANSCENDENTAL_ONLY_LOCAL.into());
                }
                forward.infer(m, shapes)
            }
            Op::Compose(ops) => {
                let mut s = shapes.to_vec();
                for op in ops {
                    s = vec![op.infer(m, &s)?.0];
                }
                Ok((s.pop().expect("one shape"), linear()))
            }
            Op::Program(p) => {
                if p.steps.iter().any(|st| st.op.op.is_transcendental_local()) {
                    return Err(TRANSCENDENTAL_ONLY_LOCAL.into());
                }
                p.infer(m, shapes)
            }
            Op::External(e) => e.infer(shapes),
        }
    }
    /// Communication per rank in the ring model for inputs of these shapes
    /// (SPEC.md §10.4); zero for local ops.
    pub fn cost(&self, m: &Mesh, shapes: &[Shape]) -> Q {
        match self {
            Op::Local(_) | Op::External(_) => Q::zero(),
            Op::Collective(c) => c.cost(m, &shapes[0]),
            Op::Declared { forward, .. } => forward.cost(m, shapes),
            Op::Compose(ops) => {
                let mut s = shapes.to_vec();
                let mut total = Q::zero();
                for op in ops {
                    total = total.add(&op.cost(m, &s));
                    s = vec![op.infer(m, &s).map(|x| x.0).unwrap_or_default()];
                }
                total
            }
            Op::Program(p) => p.cost(m, shapes).map_or_else(|_| Q::zero(), |c| c.0),
        }
    }
    /// The per-rank forward.
    pub fn forward(&self, m: &Mesh, xs: &[PerRank]) -> Result<Forward, EvalError> {
        match self {
            Op::Local(f) => {
                let mut ctx = Ctx::default();
                let y = (0..m.num_ranks())
                    .map(|r| {
                        let args: Vec<&Tensor> = xs.iter().map(|x| &x.tensors[r]).collect();
                        eval(&f.expr, &args, &mut ctx)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Forward {
                    y: PerRank { tensors: y },
                    at_kink: ctx.at_kink,
                })
            }
            Op::Collective(c) => {
                // Parameters that do not fit this mesh or shape (a
                // permutation of another length, a dim out of range) are an
                // error here, never a panic in the forward.
                let mut y = PerRank {
                    tensors: Vec::with_capacity(m.num_ranks()),
                };
                c.forward_into(m, &xs[0], &mut y)
                    .map_err(EvalError::Shape)?;
                Ok(Forward { y, at_kink: false })
            }
            Op::Declared { forward, .. } => forward.forward(m, xs),
            Op::Compose(ops) => {
                let mut x = xs[0].clone();
                for op in ops {
                    x = op.forward(m, std::slice::from_ref(&x))?.y;
                }
                Ok(Forward {
                    y: x,
                    at_kink: false,
                })
            }
            Op::Program(p) => p.forward(m, xs),
            Op::External(e) => e.forward(m, xs),
        }
    }
    /// The links of a collective (itself alone) or of a nonempty chain of
    /// collectives, in order, each an `Op::Collective`: what
    /// `collectives_into` runs. `None` for any other op.
    pub fn collective_links(&self) -> Option<&[Op]> {
        match self {
            Op::Collective(_) => Some(std::slice::from_ref(self)),
            Op::Compose(ops)
                if !ops.is_empty() && ops.iter().all(|o| matches!(o, Op::Collective(_))) =>
            {
                Some(ops)
            }
            _ => None,
        }
    }

    /// `forward` of a collective, or of a chain of them, on one input,
    /// written into `out`, whose buffers are reused, with a pair of
    /// per-thread buffers between the links (`run_chain`): the value
    /// `forward` gives (a chain's links run `Collective::forward_into` as
    /// they do there). `None` for any other op.
    pub fn collectives_into(
        &self,
        m: &Mesh,
        x: &PerRank,
        out: &mut PerRank,
    ) -> Option<Result<(), EvalError>> {
        thread_local! {
            static LINKS: std::cell::Cell<[PerRank; 2]> = const {
                std::cell::Cell::new([PerRank { tensors: vec![] }, PerRank { tensors: vec![] }])
            };
        }
        let links = self.collective_links()?;
        let [mut a, mut b] =
            LINKS.replace([PerRank { tensors: vec![] }, PerRank { tensors: vec![] }]);
        let r = run_chain(links.len(), x, &mut a, &mut b, out, |i, src, dst| {
            let Op::Collective(c) = &links[i] else {
                unreachable!("collectives only")
            };
            c.forward_into(m, src, dst).map_err(EvalError::Shape)
        });
        LINKS.set([a, b]);
        Some(r)
    }

    /// The forward at `xs`, given its value `base` at inputs that differ
    /// from `xs` only on the ranks marked in `touched`. A local op runs rank
    /// by rank, so only those ranks are recomputed; other ops run in full.
    pub fn forward_touching(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        base: &PerRank,
        touched: &[bool],
    ) -> Result<Forward, EvalError> {
        match self {
            Op::Local(f) => {
                let mut ctx = Ctx::default();
                let mut y = base.clone();
                for r in (0..m.num_ranks()).filter(|&r| touched[r]) {
                    let args: Vec<&Tensor> = xs.iter().map(|x| &x.tensors[r]).collect();
                    y.tensors[r] = eval(&f.expr, &args, &mut ctx)?;
                }
                Ok(Forward {
                    y,
                    at_kink: ctx.at_kink,
                })
            }
            _ => self.forward(m, xs),
        }
    }
    /// The declared global meaning on denotations (SPEC.md §4, F3). For a
    /// local op: the local function applied to the denotations, rank by rank
    /// of the full-rank family.
    pub fn spec(&self, m: &Mesh, ds: &[Denot]) -> Result<Denot, EvalError> {
        match self {
            Op::Local(f) => {
                let family = (0..m.num_ranks())
                    .map(|r| {
                        let args: Vec<&Tensor> = ds.iter().map(|d| &d.family[r]).collect();
                        eval(&f.expr, &args, &mut Ctx::default())
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Denot { family })
            }
            Op::Collective(c) => {
                if let Some(t) = ds[0].family.first() {
                    c.infer(m, &t.shape).map_err(EvalError::Shape)?;
                }
                Ok(c.spec(m, &ds[0]))
            }
            Op::Declared { meaning, .. } => meaning.spec(m, ds),
            Op::Compose(ops) => {
                let mut d = ds[0].clone();
                for op in ops {
                    d = op.spec(m, std::slice::from_ref(&d))?;
                }
                Ok(d)
            }
            Op::Program(p) => p.spec(m, ds),
            Op::External(e) => e.spec(ds),
        }
    }
}

impl TypedOp {
    pub fn local(f: LocalFn, inputs: Vec<Type>, output: Type) -> TypedOp {
        TypedOp {
            op: Op::Local(f),
            inputs,
            output,
            backward: Backward::LocalVjp,
            jvp: None,
            no_grad: vec![],
        }
    }
    /// Whether the op is read with global SPMD semantics: some type carries a
    /// layout (SPEC.md §13).
    pub fn is_global(&self) -> bool {
        self.inputs
            .iter()
            .chain([&self.output])
            .any(Type::is_global)
    }
    /// Whether local input shapes `shapes` (output shape `out`) make an
    /// instance: always for a local SPMD op; for a global one, every layout
    /// must name a dim its tensor has and the global input shapes must fit
    /// the local function (SPEC.md §13.1).
    pub fn layouts_fit(&self, m: &Mesh, shapes: &[Shape], out: &[usize]) -> bool {
        if !self.is_global() {
            return true;
        }
        let globals: Option<Vec<Shape>> = self
            .inputs
            .iter()
            .zip(shapes)
            .map(|(t, s)| t.global_shape(m, s))
            .collect();
        match (globals, self.output.global_shape(m, out), self.meaning_fn()) {
            (Some(g), Some(_), Some(f)) => infer(&f.expr, &g).is_ok(),
            (Some(_), Some(_), _) => true,
            _ => false,
        }
    }
    /// The local function whose meaning a local op declares: its own, or
    /// the one a rule's `meaning` gives.
    fn meaning_fn(&self) -> Option<&LocalFn> {
        match &self.op {
            Op::Local(f) => Some(f),
            Op::Declared { meaning, .. } => match meaning.as_ref() {
                Op::Local(f) => Some(f),
                _ => None,
            },
            _ => None,
        }
    }
    /// SPEC.md §13.2: for a local op under global types, the declared meaning
    /// is the local function applied to the global tensors. `None` for an op
    /// that is not global, or not local (collectives keep the meanings of
    /// §10.2).
    pub fn global_spec(&self, m: &Mesh, ds: &[Denot]) -> Result<Option<Tensor>, EvalError> {
        let Some(f) = self.meaning_fn() else {
            return Ok(None);
        };
        if !self.is_global() {
            return Ok(None);
        }
        let gs: Vec<Tensor> = ds
            .iter()
            .zip(&self.inputs)
            .map(|(d, t)| {
                global(m, t, d).ok_or_else(|| {
                    EvalError::Shape(format!("the layout of {t} does not fit the shape"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(eval(&f.expr, &gs, &mut Ctx::default())?))
    }
    /// SPEC.md §13.2: read with global types, a collective that only moves
    /// data (a gather, a reduction of a Partial value, a scatter of one, an
    /// all-to-all, a convert, a cast whose meaning keeps the value, or a
    /// composition of these) must leave the global tensor as it was.
    pub fn redistributes_globally(&self) -> bool {
        fn moves_only(op: &Op) -> bool {
            use spmd_semantics::State::{Partial, Varying};
            match op {
                Op::Collective(c) => match c.kind {
                    Kind::AllGather { stack, .. } => !stack && c.src == Varying,
                    Kind::AllReduce | Kind::ReduceScatter { stack: false, .. } => c.src == Partial,
                    Kind::AllToAll { .. } | Kind::Convert { stack: false, .. } => true,
                    // A cast keeps the value (§10.2) unless it turns a
                    // non-Partial value into a Partial one.
                    Kind::Reinterpret => c.dst != Partial || c.src == Partial,
                    Kind::ReduceScatter { stack: true, .. }
                    | Kind::Convert { stack: true, .. }
                    | Kind::PPermute { .. }
                    | Kind::PMean
                    | Kind::DivideByGroupSize => false,
                },
                Op::Compose(ops) => ops.iter().all(moves_only),
                _ => false,
            }
        }
        self.is_global() && moves_only(&self.op)
    }
    /// SPEC.md §13.2: read with global types, the global tensor the output of
    /// a collective that reduces or permutes Varying pieces must have, given
    /// the input's denotation `d`: for an all-reduce or reduce-scatter of V,
    /// the group's pieces summed (the input read as Partial on the group
    /// axes); for pmean, that divided by n (of a Partial input, its global
    /// tensor divided by n); for ppermute, the moved pieces read with the
    /// input's layout. `None` where no such reading applies (local types,
    /// other ops); `Some(None)` where a layout does not fit the shape.
    pub fn global_reading(&self, m: &Mesh, d: &Denot) -> Option<Option<Tensor>> {
        use spmd_semantics::State::{Partial, Varying};
        let Op::Collective(c) = &self.op else {
            return None;
        };
        if !self.is_global() {
            return None;
        }
        let n = c.group_size(m) as i64;
        let as_partial = || {
            let mut t = self.inputs[0].clone();
            for &a in &c.axes {
                t.states[a] = Partial;
                t.layout[a] = None;
            }
            let summed = Collective {
                kind: Kind::Reinterpret,
                dst: Partial,
                ..c.clone()
            }
            .spec(m, d);
            global(m, &t, &summed)
        };
        let inv_n = Q::frac(1, n);
        match (&c.kind, c.src) {
            (Kind::AllReduce | Kind::ReduceScatter { stack: false, .. }, Varying) => {
                Some(as_partial())
            }
            (Kind::PMean, Varying) => Some(as_partial().map(|t| t.scale(&inv_n))),
            (Kind::PMean, Partial) => Some(global(m, &self.inputs[0], d).map(|t| t.scale(&inv_n))),
            (Kind::PPermute { .. }, _) => Some(global(m, &self.inputs[0], &c.spec(m, d))),
            _ => None,
        }
    }
    /// Whether the declared JVP takes tangents of the input shapes and gives
    /// one of the output shape `out` (a JVP written for other shapes may
    /// not).
    pub fn jvp_accepts(&self, m: &Mesh, shapes: &[Shape], out: &[usize]) -> Result<(), String> {
        let got = match &self.jvp {
            None => return Ok(()),
            Some(Jvp::Local(f)) => {
                let both: Vec<Shape> = shapes.iter().chain(shapes).cloned().collect();
                infer(&f.expr, &both)?.0
            }
            Some(Jvp::Tangent(op)) => op.infer(m, &shapes[..1])?.0,
        };
        if got == out {
            Ok(())
        } else {
            Err(format!(
                "it gives a tangent of shape {got:?}, the output has {out:?}"
            ))
        }
    }
    /// Whether J1 has a rule to check: a declared JVP, or a linear op.
    pub fn has_jvp(&self) -> bool {
        self.jvp.is_some() || (self.op.is_linear() && self.inputs.len() == 1)
    }
    /// The output tangent for tangent `dx` of input `i` (the other inputs'
    /// tangents zero), by the declared JVP or, for a linear op, by the op
    /// itself. Never used by the oracle to compute a derivative: J1 compares
    /// it with one.
    pub fn tangent(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        i: usize,
        dx: &PerRank,
    ) -> Result<PerRank, EvalError> {
        match &self.jvp {
            Some(Jvp::Local(f)) => {
                let zeros: Vec<Vec<Tensor>> = xs
                    .iter()
                    .map(|x| x.tensors.iter().map(|t| Tensor::zeros(&t.shape)).collect())
                    .collect();
                let mut ctx = Ctx::default();
                let tensors = (0..m.num_ranks())
                    .map(|r| {
                        let mut args: Vec<&Tensor> = xs.iter().map(|x| &x.tensors[r]).collect();
                        args.extend((0..xs.len()).map(|j| {
                            if j == i {
                                &dx.tensors[r]
                            } else {
                                &zeros[j][r]
                            }
                        }));
                        eval(&f.expr, &args, &mut ctx)
                    })
                    .collect::<Result<_, _>>()?;
                Ok(PerRank { tensors })
            }
            Some(Jvp::Tangent(op)) => Ok(op.forward(m, std::slice::from_ref(dx))?.y),
            None => Ok(self.op.forward(m, std::slice::from_ref(dx))?.y),
        }
    }
    /// The per-rank backward: the cotangent of every input for cotangent `g`;
    /// zeros for the inputs marked `no_grad`.
    pub fn backward(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
    ) -> Result<Vec<PerRank>, EvalError> {
        let mut out = self.backward_all(m, xs, g)?;
        for &i in &self.no_grad {
            if let (Some(o), Some(x)) = (out.get_mut(i), xs.get(i)) {
                *o = PerRank {
                    tensors: x.tensors.iter().map(|t| Tensor::zeros(&t.shape)).collect(),
                };
            }
        }
        Ok(out)
    }
    /// `backward` written into `out`, reusing its buffers: for a local op
    /// with the VJP of its expression and no `no_grad` input, every rank's
    /// cotangents are zeroed in place and `vjp_add` adds into them, so a
    /// caller that keeps `out` between calls allocates nothing per call
    /// (SPEC.md §18.1). The values are `backward`'s: the same sums from
    /// exact zeros, and a rank whose cotangent is zero gets exact zeros, as
    /// there. Every other op gets `backward` itself. On an error `out`
    /// holds partial values.
    pub fn backward_into(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
        out: &mut Vec<PerRank>,
    ) -> Result<(), EvalError> {
        self.backward_into_kept(m, xs, g, out, &mut false)
    }

    /// `backward_into` for a caller that calls it again and again with one
    /// cotangent's zero pattern, as the oracle does per unit cotangent
    /// (benches/HISTORY.md §18.11). On entry `*kept` says that `out` is as the last
    /// call left it, untouched since, and that call had inputs of these
    /// shapes and a cotangent zero on exactly the ranks where `g` is.
    /// Then the ranks where `g` is zero already hold exact zeros and are
    /// not zeroed again. On return `*kept` says whether the next call may
    /// claim it: true after the local VJP path, which writes only the
    /// ranks where `g` is nonzero, even when it stops with an error.
    #[allow(clippy::needless_range_loop)] // ranks index g, xs and out alike
    pub fn backward_into_kept(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
        out: &mut Vec<PerRank>,
        kept: &mut bool,
    ) -> Result<(), EvalError> {
        let n = m.num_ranks();
        let fits =
            xs.len() <= MAX_ARGS && g.tensors.len() == n && xs.iter().all(|x| x.tensors.len() == n);
        match (&self.backward, &self.op) {
            (Backward::LocalVjp, Op::Local(f)) if self.no_grad.is_empty() && fits => {
                // A claim the buffers' structure contradicts is not taken.
                let again =
                    *kept && out.len() == xs.len() && out.iter().all(|o| o.tensors.len() == n);
                *kept = true;
                if !again {
                    zeros_as(out, xs);
                }
                // Every swap below is undone before the loop can leave, so
                // the slots hold placeholders, which own no memory, when
                // they go out of scope: they need no drop.
                let mut grads: std::mem::ManuallyDrop<[Tensor; MAX_ARGS]> =
                    std::mem::ManuallyDrop::new(std::array::from_fn(|_| Tensor::placeholder()));
                for r in 0..n {
                    // The VJP is linear in g: a zero cotangent gives exact
                    // zeros, already in place.
                    if g.tensors[r].is_zero() {
                        continue;
                    }
                    if again {
                        for (o, x) in out.iter_mut().zip(xs) {
                            o.tensors[r].zero_as(&x.tensors[r].shape);
                        }
                    }
                    let mut args: [&Tensor; MAX_ARGS] = [&g.tensors[r]; MAX_ARGS];
                    for (a, x) in args.iter_mut().zip(xs) {
                        *a = &x.tensors[r];
                    }
                    let k = xs.len();
                    for (slot, o) in grads.iter_mut().zip(out.iter_mut()) {
                        std::mem::swap(slot, &mut o.tensors[r]);
                    }
                    let res = vjp_add(&f.expr, &args[..k], &g.tensors[r], &mut grads[..k]);
                    for (slot, o) in grads.iter_mut().zip(out.iter_mut()) {
                        std::mem::swap(slot, &mut o.tensors[r]);
                    }
                    res?;
                }
                Ok(())
            }
            _ => {
                *kept = false;
                *out = self.backward(m, xs, g)?;
                Ok(())
            }
        }
    }
    /// `backward_into_kept` at a cotangent `g` that is zero off `supp`,
    /// its nonzero entries as (rank, entry) in ascending order, at inputs
    /// `xs` where the forward is defined at every entry: a pointwise local
    /// VJP then writes only the entries of `supp` (and entry 0 of an input
    /// broadcast from a scalar), so only those are put back to zero and
    /// recomputed (`vjp_add_at`). The same values as `backward_into_kept`,
    /// whose contract `out` and `kept` keep: `out` holds this op's result
    /// at the same `g` when `kept` says so. Any other op, or a pointwise
    /// path `vjp_add` would not take, runs `backward_into_kept`.
    pub fn backward_unit_into_kept(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
        supp: &[(usize, usize)],
        out: &mut Vec<PerRank>,
        kept: &mut bool,
    ) -> Result<(), EvalError> {
        let n = m.num_ranks();
        let fits =
            xs.len() <= MAX_ARGS && g.tensors.len() == n && xs.iter().all(|x| x.tensors.len() == n);
        let again = *kept && out.len() == xs.len() && out.iter().all(|o| o.tensors.len() == n);
        let (Backward::LocalVjp, Op::Local(f)) = (&self.backward, &self.op) else {
            return self.backward_into_kept(m, xs, g, out, kept);
        };
        if !self.no_grad.is_empty() || !fits || xs.is_empty() {
            return self.backward_into_kept(m, xs, g, out, kept);
        }
        if !again {
            // Fresh buffers, as `backward_into_kept` starts from.
            zeros_as(out, xs);
        }
        *kept = true;
        let mut grads: std::mem::ManuallyDrop<[Tensor; MAX_ARGS]> =
            std::mem::ManuallyDrop::new(std::array::from_fn(|_| Tensor::placeholder()));
        let k = xs.len();
        let mut at: [usize; 16] = [0; 16];
        let mut rest = supp;
        while let Some(&(r, _)) = rest.first() {
            let run = rest.iter().take_while(|(q, _)| *q == r).count();
            let (here, next) = rest.split_at(run);
            rest = next;
            if here.len() > at.len() || r >= n {
                return self.backward_into_kept(m, xs, g, out, kept);
            }
            for (a, (_, e)) in at.iter_mut().zip(here) {
                *a = *e;
            }
            let at = &at[..here.len()];
            // Back to zero where the last result at this g was written.
            for o in out.iter_mut().filter(|_| again) {
                let t = &mut o.tensors[r];
                let len = t.data.len();
                for &e in at {
                    if let Some(q) = t.data.get_mut(if len == 1 { 0 } else { e }) {
                        *q = Q::zero();
                    }
                }
            }
            let mut args: [&Tensor; MAX_ARGS] = [&g.tensors[r]; MAX_ARGS];
            for (a, x) in args.iter_mut().zip(xs) {
                *a = &x.tensors[r];
            }
            for (slot, o) in grads.iter_mut().zip(out.iter_mut()) {
                std::mem::swap(slot, &mut o.tensors[r]);
            }
            let res = vjp_add_at(&f.expr, &args[..k], &g.tensors[r], at, &mut grads[..k]);
            for (slot, o) in grads.iter_mut().zip(out.iter_mut()) {
                std::mem::swap(slot, &mut o.tensors[r]);
            }
            match res {
                Some(res) => res?,
                // Not the pointwise path: the whole backward, afresh.
                None => {
                    *kept = false;
                    return self.backward_into_kept(m, xs, g, out, kept);
                }
            }
        }
        Ok(())
    }
    fn backward_all(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
    ) -> Result<Vec<PerRank>, EvalError> {
        let op = match &self.op {
            // A declared meaning changes F3 only; the backward is the
            // forward's.
            Op::Declared { forward, .. } => forward.as_ref(),
            op => op,
        };
        match (&self.backward, op) {
            (Backward::Local(fs), _) => {
                let mut ctx = Ctx::default();
                let mut out: Vec<PerRank> = fs
                    .iter()
                    .map(|_| PerRank {
                        tensors: Vec::with_capacity(m.num_ranks()),
                    })
                    .collect();
                for r in 0..m.num_ranks() {
                    let mut args: Vec<&Tensor> = xs.iter().map(|x| &x.tensors[r]).collect();
                    args.push(&g.tensors[r]);
                    for (i, f) in fs.iter().enumerate() {
                        out[i].tensors.push(eval(&f.expr, &args, &mut ctx)?);
                    }
                }
                Ok(out)
            }
            (Backward::LocalVjp, Op::Local(f)) => {
                let mut out: Vec<PerRank> = xs
                    .iter()
                    .map(|_| PerRank {
                        tensors: Vec::new(),
                    })
                    .collect();
                for r in 0..m.num_ranks() {
                    // The VJP is linear in g: a zero cotangent gives exact zeros.
                    if g.tensors[r].is_zero() {
                        for (i, x) in xs.iter().enumerate() {
                            out[i].tensors.push(Tensor::zeros(&x.tensors[r].shape));
                        }
                        continue;
                    }
                    let args: Vec<&Tensor> = xs.iter().map(|x| &x.tensors[r]).collect();
                    for (i, gi) in vjp(&f.expr, &args, &g.tensors[r])?.into_iter().enumerate() {
                        out[i].tensors.push(gi);
                    }
                }
                Ok(out)
            }
            (Backward::Transpose(t), _) => Ok(vec![t.forward(m, std::slice::from_ref(g))?.y]),
            (Backward::Steps, Op::Program(p)) => p.backward(m, xs, g),
            (Backward::LocalVjp, Op::External(e)) => e.backward(m, xs, g),
            (Backward::Steps, op) => Err(EvalError::Shape(format!(
                "`{}` is not a program",
                op.describe()
            ))),
            (Backward::LocalVjp, op) => Err(EvalError::Shape(format!(
                "`{}` has no local VJP: declare its backward",
                op.describe()
            ))),
        }
    }
    /// Whether the backward accepts a cotangent of the output's shape `out`
    /// (a declared transpose may not, e.g. an all_to_all with the wrong dims).
    pub fn backward_accepts(
        &self,
        m: &Mesh,
        out: &[usize],
        inputs: &[Shape],
    ) -> Result<(), String> {
        match &self.backward {
            // A program's backward is its steps': each must take the
            // cotangent of its own output (SPEC.md §12.1).
            Backward::Steps => match &self.op {
                Op::Program(p) => p.backward_accepts(m, inputs),
                _ => Ok(()),
            },
            Backward::LocalVjp => Ok(()),
            Backward::Local(fs) => {
                let mut shapes = inputs.to_vec();
                shapes.push(out.to_vec());
                for (i, f) in fs.iter().enumerate() {
                    if self.no_grad.contains(&i) {
                        continue;
                    }
                    let s = infer(&f.expr, &shapes)?.0;
                    if s != inputs[i] {
                        return Err(format!(
                            "`{}` gives a cotangent of shape {s:?} for input {i} of shape {:?}",
                            f.text, inputs[i]
                        ));
                    }
                }
                Ok(())
            }
            Backward::Transpose(t) => {
                let s = t.infer(m, &[out.to_vec()])?.0;
                if s == inputs[0] {
                    Ok(())
                } else {
                    Err(format!(
                        "it maps a cotangent of shape {out:?} to shape {s:?}, the input has {:?}",
                        inputs[0]
                    ))
                }
            }
        }
    }
    /// Elements sent per rank by the backward, for inputs of shapes `args`
    /// and an output (so a cotangent) of shape `out` (SPEC.md §10.4).
    pub fn backward_cost(&self, m: &Mesh, args: &[Shape], out: &[usize]) -> Q {
        match (&self.backward, &self.op) {
            (Backward::LocalVjp | Backward::Local(_), _) => Q::zero(),
            (Backward::Transpose(t), _) => t.cost(m, &[out.to_vec()]),
            (Backward::Steps, Op::Program(p)) => {
                p.cost(m, args).map_or_else(|_| Q::zero(), |c| c.1)
            }
            _ => Q::zero(),
        }
    }
    /// Input `i`'s name as written: a local function's variable, a program's
    /// named input; `x` for the one input of a collective, `x{i}` otherwise.
    pub fn input_name(&self, i: usize) -> String {
        fn of(op: &Op, i: usize, n: usize) -> Option<String> {
            match op {
                Op::Local(f) => f.vars.get(i).cloned(),
                Op::External(e) => e.vars.get(i).cloned(),
                Op::Program(p) => p.names.get(i).cloned(),
                Op::Declared { forward, .. } => of(forward, i, n),
                _ if n == 1 => Some("x".into()),
                _ => None,
            }
        }
        of(&self.op, i, self.inputs.len()).unwrap_or_else(|| format!("x{i}"))
    }
    /// `P, R -> P` style signature in canonical letters.
    pub fn signature(&self, m: &Mesh) -> String {
        let ins: Vec<String> = self.inputs.iter().map(|t| t.display(m)).collect();
        format!("{} -> {}", ins.join(", "), self.output.display(m))
    }
}

/// The built-in local ops of `spmd-check derive OP`, as data: a name and the
/// expression that defines it (SPEC.md §6.1).
pub const BUILTINS: &[(&str, &str)] = &[
    ("neg", "-x"),
    ("add", "x + y"),
    ("sub", "x - y"),
    ("mul", "x * y"),
    ("div", "x / y"),
    ("scale", "3 * x"),
    ("add_const", "x + 1"),
    ("square", "x^2"),
    ("cube", "x^3"),
    ("sum", "sum(x, 0)"),
    ("mean", "mean(x, 0)"),
    ("max", "max(x, 0)"),
    ("matmul", "matmul(x, y)"),
    ("einsum", "einsum(\"ij,ij->i\", x, y)"),
    ("transpose", "transpose(x)"),
    ("reshape", "reshape(x, [4])"),
    ("slice", "slice(x, 0, 0, 1)"),
    ("concat", "concat(x, y, 0)"),
    ("gather", "take(x, 0, [0, 0])"),
    ("dynamic_update_slice", "dynamic_update_slice(x, y, [0])"),
    ("abs", "abs(x)"),
    ("relu", "relu(x)"),
    ("floor", "floor(x)"),
    ("cast", "cast(x, 1)"),
    // Transcendental and normalising ops (SPEC.md §19), and the rational
    // ops that came with them.
    ("exp", "exp(x)"),
    ("log", "log(x)"),
    ("sqrt", "sqrt(x)"),
    ("rsqrt", "rsqrt(x)"),
    ("tanh", "tanh(x)"),
    ("sigmoid", "sigmoid(x)"),
    ("sin", "sin(x)"),
    ("cos", "cos(x)"),
    ("gelu", "gelu(x)"),
    ("silu", "silu(x)"),
    ("softmax", "softmax(x, 0)"),
    ("logsumexp", "logsumexp(x, 0)"),
    ("layernorm", "layernorm(x, 0)"),
    ("rmsnorm", "rmsnorm(x, 0)"),
    ("cross_entropy", "cross_entropy(x, t, 0)"),
    ("cumsum", "cumsum(x, 0)"),
    ("where", "where(m, x, y)"),
    ("floordiv", "floordiv(x, y)"),
    ("truncdiv", "truncdiv(x, y)"),
    ("int", "int(x)"),
];

/// Look up a built-in op by name.
pub fn builtin(name: &str) -> Result<LocalFn, String> {
    match BUILTINS.iter().find(|(n, _)| *n == name) {
        Some((_, src)) => {
            let mut f = parse(src)
                .map_err(|e| format!("built-in `{name}` does not parse: {e} (interpreter bug)"))?;
            f.text = format!("{name} = {src}");
            Ok(f)
        }
        None => Err(format!(
            "unknown op `{name}`{} (built-in ops: {}; or use --expr)",
            spmd_semantics::names::did_you_mean(name, BUILTINS.iter().map(|b| b.0)),
            BUILTINS.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// A chain of `n` links run from `first` into `out`: link i reads link
/// i − 1's result (the first link reads `first`), the links between write
/// into `a` and `b` by turns and the last into `out`. The first error
/// stops it.
pub(crate) fn run_chain<T, E>(
    n: usize,
    first: &T,
    a: &mut T,
    b: &mut T,
    out: &mut T,
    mut link: impl FnMut(usize, &T, &mut T) -> Result<(), E>,
) -> Result<(), E> {
    for i in 0..n {
        let (src, dst): (&T, &mut T) = match i {
            0 => (first, &mut *a),
            _ if i % 2 == 1 => (&*a, &mut *b),
            _ => (&*b, &mut *a),
        };
        let dst = if i + 1 == n { &mut *out } else { dst };
        link(i, src, dst)?;
    }
    Ok(())
}

/// `out := zeros of xs's shapes`, one per input, reusing `out`'s buffers.
fn zeros_as(out: &mut Vec<PerRank>, xs: &[PerRank]) {
    out.truncate(xs.len());
    while out.len() < xs.len() {
        out.push(PerRank {
            tensors: Vec::new(),
        });
    }
    for (o, x) in out.iter_mut().zip(xs) {
        o.zero_as(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_infers_on_some_shape() {
        let shapes: Vec<Shape> = vec![vec![], vec![1], vec![2], vec![2, 2], vec![4]];
        for (name, _) in BUILTINS {
            let f = builtin(name).unwrap();
            let ok = shapes
                .iter()
                .any(|s| infer(&f.expr, &vec![s.clone(); f.arity()]).is_ok());
            assert!(ok, "{name} fits no test shape");
        }
        assert!(builtin("nope").unwrap_err().contains("unknown op"));
    }
}
