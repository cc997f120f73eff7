//! Batching of local functions and programs under `vmap` (SPEC.md §24.9).
//!
//! A batched value has one extra dim, its batch dim, on every rank
//! (§24.1). A local function is batched by moving every batched input's
//! batch dim to the front and shifting every dim the expression names by
//! one (an einsum gains a label); an input that is not batched is
//! broadcast where an elementwise op meets a batched one. A collective is
//! batched by a rule given from outside (the dialect's: JAX's, or the
//! meaning's own, [`exact_rule`]), which says the batched collective and
//! where its output's batch dim lies. A program is batched step by step,
//! each value's batch dim tracked, the output's moved to `out_axes` at the
//! end. The backward of a batched collective step is what the system
//! differentiates: the transpose of the batched collective
//! (`grad(vmap(f))`) or the batched transpose (`vmap(grad(f))`), see
//! [`Order`].
//!
//! Nothing here decides anything: V1 (`oracle::batching`) and the core's
//! B-properties check the batched programs this builds.

use crate::collective::{Collective, Kind};
use crate::eval::infer;
use crate::expr::{Einsum, Expr, LocalFn, Mask};
use crate::op::{Backward, Jvp, Op, TypedOp};
use crate::program::{Program, Step};
use spmd_semantics::{Mesh, Shape, State};

/// Where a value's batch dim lies; `None`: not batched.
pub type Bdim = Option<usize>;

/// Why a program could not be batched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// The batching of this step is not modelled (e.g. a hand-written local
    /// backward, a conversion JAX has no primitive for): nothing is checked.
    Unmodelled(String),
    /// The system's rule refuses, or claims a batch dim past the end of its
    /// output: the batched program does not run (V1 fails).
    Refused(String),
    /// The same, in the batched backward of one order only (that order
    /// fails).
    BackwardRefused(String),
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Unmodelled(s) => write!(f, "not modelled: {s}"),
            BatchError::Refused(s) => write!(f, "refused: {s}"),
            BatchError::BackwardRefused(s) => write!(f, "the batched backward refused: {s}"),
        }
    }
}

/// Which composition of `grad` and `vmap` a batched program's backward
/// stands for (SPEC.md §24.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// `grad(vmap(f))`: the system transposes the batched collective, with
    /// its batched parameters (a hand-written backward is batched instead,
    /// as `vmap` of a custom VJP is).
    GradOfVmap,
    /// `vmap(grad(f))`: the system batches the unbatched transpose by its
    /// batching rule, and moves the result's batch dim to where the step's
    /// input has it.
    VmapOfGrad,
}

/// A collective batching rule: the batched kind for an input batched at
/// `d`, and the dim where the batched output's batch dim lies (a claim).
pub type Rule<'a> = dyn Fn(&Kind, usize) -> Result<(Kind, usize), String> + 'a;
/// A system's transpose of a collective kind.
pub type Transpose<'a> = dyn Fn(&Kind) -> Result<Kind, String> + 'a;

/// The meaning's own batching rule: the batched collective that computes
/// each element's collective, and the dim where the output's batch dim
/// really lies. Errors for conversions that insert or remove a dim.
pub fn exact_rule(kind: &Kind, d: usize) -> Result<(Kind, usize), String> {
    let up = |x: usize| x + usize::from(d <= x);
    Ok(match kind {
        Kind::AllGather { dim, stack } => {
            let out = if d > *dim && *stack { d + 1 } else { d };
            (
                Kind::AllGather {
                    dim: up(*dim),
                    stack: *stack,
                },
                out,
            )
        }
        Kind::ReduceScatter { dim, stack } => {
            let out = if d > *dim && *stack { d - 1 } else { d };
            (
                Kind::ReduceScatter {
                    dim: up(*dim),
                    stack: *stack,
                },
                out,
            )
        }
        Kind::AllToAll {
            split,
            concat,
            stack: false,
        } => (
            Kind::AllToAll {
                split: up(*split),
                concat: up(*concat),
                stack: false,
            },
            d,
        ),
        Kind::AllToAll {
            split,
            concat,
            stack: true,
        } => {
            // The split dim goes; a dim is inserted at `concat` of the output.
            let mid = if d <= *split { d } else { d - 1 };
            let c = if mid <= *concat { concat + 1 } else { *concat };
            (
                Kind::AllToAll {
                    split: up(*split),
                    concat: c,
                    stack: true,
                },
                if mid < c { mid } else { mid + 1 },
            )
        }
        Kind::Convert { dim, stack: false } => (
            Kind::Convert {
                dim: up(*dim),
                stack: false,
            },
            d,
        ),
        Kind::Convert { stack: true, .. } => {
            return Err(
                "an untiled conversion inserts or removes a dim; its batching is not modelled"
                    .into(),
            )
        }
        Kind::AllReduce
        | Kind::PMean
        | Kind::PPermute { .. }
        | Kind::Reinterpret
        | Kind::DivideByGroupSize => (kind.clone(), d),
    })
}

/// `x` (of rank `rank`) with dim `from` moved to `to`, as an einsum.
pub fn move_expr(x: Expr, rank: usize, from: usize, to: usize) -> Expr {
    if from == to {
        return x;
    }
    let labels: Vec<char> = (0..rank).map(|i| (b'a' + i as u8) as char).collect();
    let mut out = labels.clone();
    let c = out.remove(from);
    out.insert(to, c);
    Expr::Einsum(
        Einsum {
            inputs: vec![labels],
            output: out,
        },
        vec![x],
    )
}

/// `x` moved from `from` to `to` as a local function of one input.
fn move_fn(rank: usize, from: usize, to: usize) -> LocalFn {
    LocalFn {
        expr: move_expr(Expr::Var(0), rank, from, to),
        vars: vec!["x".into()],
        text: format!("moveaxis(x, {from}, {to})"),
    }
}

/// `k` copies of `x` (of element shape `s`) stacked at a new front dim.
fn broadcast(x: Expr, s: &[usize], k: usize) -> Expr {
    let mut shape = vec![1];
    shape.extend_from_slice(s);
    let one = Expr::Reshape(Box::new(x), shape);
    if k == 1 {
        one
    } else {
        Expr::Concat(vec![one; k], 0)
    }
}

/// Batches a local expression: `shapes` are the element shapes of its
/// inputs, `in_dims` where each input is batched, `k` the batch size. The
/// result's batch dim, or `None` when no batched input reaches it (then it
/// is the unbatched expression).
///
/// Where the expression is elementwise and every batched input has one
/// shape and one batch dim, with scalars beside them, the batch dim stays
/// where it is and the expression is unchanged (JAX's elementwise
/// batchers do the same); otherwise batched inputs move their batch dim
/// to the front and the result is batched at 0.
pub fn batch_expr(
    e: &Expr,
    shapes: &[Shape],
    in_dims: &[Bdim],
    k: usize,
) -> Result<(Expr, Bdim), String> {
    if let Some(d) = elementwise_keep(e, shapes, in_dims) {
        return Ok((e.clone(), Some(d)));
    }
    let b = Batcher { shapes, in_dims, k };
    let (x, is) = b.go(e)?;
    Ok((x, is.then_some(0)))
}

/// The inputs of an elementwise expression, or `None` if it is not one.
fn elementwise_vars(e: &Expr, out: &mut Vec<usize>) -> Option<()> {
    match e {
        Expr::Var(i) => out.push(*i),
        Expr::Const(_) => {}
        Expr::Neg(a)
        | Expr::Pow(a, _)
        | Expr::Abs(a)
        | Expr::Relu(a)
        | Expr::Floor(a)
        | Expr::Cast(a, _)
        | Expr::Unary(_, a)
        | Expr::Round(_, a) => elementwise_vars(a, out)?,
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) => {
            elementwise_vars(a, out)?;
            elementwise_vars(b, out)?;
        }
        _ => return None,
    }
    Some(())
}

/// The batch dim an elementwise expression keeps (`batch_expr`).
fn elementwise_keep(e: &Expr, shapes: &[Shape], in_dims: &[Bdim]) -> Option<usize> {
    let mut vars = Vec::new();
    elementwise_vars(e, &mut vars)?;
    let batched: Vec<usize> = vars
        .iter()
        .copied()
        .filter(|&i| in_dims.get(i).copied().flatten().is_some())
        .collect();
    let first = *batched.first()?;
    let (d, shape) = (in_dims[first]?, shapes.get(first)?);
    let same = batched
        .iter()
        .all(|&i| in_dims[i] == Some(d) && shapes.get(i) == Some(shape));
    let scalars_beside = vars
        .iter()
        .filter(|&&i| in_dims.get(i).copied().flatten().is_none())
        .all(|&i| shapes.get(i).is_some_and(Vec::is_empty));
    (same && scalars_beside && d <= shape.len()).then_some(d)
}

struct Batcher<'a> {
    shapes: &'a [Shape],
    in_dims: &'a [Bdim],
    k: usize,
}

impl Batcher<'_> {
    fn shape(&self, e: &Expr) -> Result<Shape, String> {
        Ok(infer(e, self.shapes)?.0)
    }
    /// Operands of an op whose operands must agree in shape: all batched
    /// (broadcast where not) when any is; scalars stay as they are.
    fn together(&self, es: &[&Expr]) -> Result<(Vec<Expr>, bool), String> {
        let parts: Vec<(Expr, bool)> = es.iter().map(|e| self.go(e)).collect::<Result<_, _>>()?;
        if !parts.iter().any(|p| p.1) {
            return Ok((parts.into_iter().map(|p| p.0).collect(), false));
        }
        let shapes: Vec<Shape> = es.iter().map(|e| self.shape(e)).collect::<Result<_, _>>()?;
        // Every non-scalar operand batched (broadcast where not).
        let mut out: Vec<Expr> = parts
            .iter()
            .zip(&shapes)
            .map(|((x, is), s)| {
                if *is || s.is_empty() {
                    x.clone()
                } else {
                    broadcast(x.clone(), s, self.k)
                }
            })
            .collect();
        // A batched scalar beside a tensor of shape s: spread it over s by
        // an einsum with ones of the tensor's batched shape (t * 0 + 1,
        // exact, of zero derivative).
        if let Some(full) = shapes.iter().position(|s| !s.is_empty()) {
            let s = &shapes[full];
            let labels: Vec<char> = (0..=s.len()).map(|i| (b'a' + i as u8) as char).collect();
            let ones = Expr::Add(
                Box::new(Expr::Mul(
                    Box::new(out[full].clone()),
                    Box::new(Expr::Const(spmd_semantics::Q::zero())),
                )),
                Box::new(Expr::Const(spmd_semantics::Q::one())),
            );
            for (i, ((_, is), sh)) in parts.iter().zip(&shapes).enumerate() {
                if *is && sh.is_empty() {
                    out[i] = Expr::Einsum(
                        Einsum {
                            inputs: vec![vec![labels[0]], labels.clone()],
                            output: labels.clone(),
                        },
                        vec![out[i].clone(), ones.clone()],
                    );
                }
            }
        }
        Ok((out, true))
    }
    fn go(&self, e: &Expr) -> Result<(Expr, bool), String> {
        let bx = |x: Expr| Box::new(x);
        Ok(match e {
            Expr::Var(i) => match self.in_dims.get(*i).copied().flatten() {
                None => (e.clone(), false),
                Some(d) => {
                    let rank = self.shapes.get(*i).map_or(0, Vec::len) + 1;
                    if d >= rank {
                        return Err(format!(
                            "input {i} is batched at dim {d}, past its rank {}",
                            rank - 1
                        ));
                    }
                    (move_expr(e.clone(), rank, d, 0), true)
                }
            },
            Expr::Const(_) => (e.clone(), false),
            Expr::Neg(a) => self.unary(a, |x| Expr::Neg(bx(x)))?,
            Expr::Pow(a, p) => self.unary(a, |x| Expr::Pow(bx(x), *p))?,
            Expr::Abs(a) => self.unary(a, |x| Expr::Abs(bx(x)))?,
            Expr::Relu(a) => self.unary(a, |x| Expr::Relu(bx(x)))?,
            Expr::Floor(a) => self.unary(a, |x| Expr::Floor(bx(x)))?,
            Expr::Cast(a, bits) => self.unary(a, |x| Expr::Cast(bx(x), *bits))?,
            Expr::Unary(f, a) => self.unary(a, |x| Expr::Unary(*f, bx(x)))?,
            Expr::Round(r, a) => self.unary(a, |x| Expr::Round(*r, bx(x)))?,
            Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) => {
                let (mut xs, is) = self.together(&[a, b])?;
                let (y, x) = (xs.pop().expect("two"), xs.pop().expect("two"));
                let out = match e {
                    Expr::Add(..) => Expr::Add(bx(x), bx(y)),
                    Expr::Sub(..) => Expr::Sub(bx(x), bx(y)),
                    Expr::Mul(..) => Expr::Mul(bx(x), bx(y)),
                    _ => Expr::Div(bx(x), bx(y)),
                };
                (out, is)
            }
            Expr::Sum(a, d) => self.dimmed(a, *d, |x, d| Expr::Sum(bx(x), d))?,
            Expr::Mean(a, d) => self.dimmed(a, *d, |x, d| Expr::Mean(bx(x), d))?,
            Expr::Max(a, d) => self.dimmed(a, *d, |x, d| Expr::Max(bx(x), d))?,
            Expr::Slice(a, d, s, t) => self.dimmed(a, *d, |x, d| Expr::Slice(bx(x), d, *s, *t))?,
            Expr::Take(a, d, idx) => {
                self.dimmed(a, *d, |x, d| Expr::Take(bx(x), d, idx.clone()))?
            }
            Expr::Cumsum(a, d) => self.dimmed(a, *d, |x, d| Expr::Cumsum(bx(x), d))?,
            Expr::Dimwise(op, a, d, eps) => {
                self.dimmed(a, *d, |x, d| Expr::Dimwise(*op, bx(x), d, eps.clone()))?
            }
            Expr::Reshape(a, shape) => {
                let (x, is) = self.go(a)?;
                if is {
                    let mut s = vec![self.k];
                    s.extend_from_slice(shape);
                    (Expr::Reshape(bx(x), s), true)
                } else {
                    (Expr::Reshape(bx(x), shape.clone()), false)
                }
            }
            Expr::Einsum(spec, args) => {
                let parts: Vec<(Expr, bool)> =
                    args.iter().map(|a| self.go(a)).collect::<Result<_, _>>()?;
                if !parts.iter().any(|p| p.1) {
                    return Ok((e.clone(), false));
                }
                let used = |c: char| {
                    spec.inputs.iter().any(|l| l.contains(&c)) || spec.output.contains(&c)
                };
                let fresh = ('a'..='z')
                    .find(|&c| !used(c))
                    .ok_or("an einsum that uses all 26 labels cannot gain a batch label")?;
                let inputs = spec
                    .inputs
                    .iter()
                    .zip(&parts)
                    .map(|(l, p)| {
                        let mut l2 = l.clone();
                        if p.1 {
                            l2.insert(0, fresh);
                        }
                        l2
                    })
                    .collect();
                let mut output = spec.output.clone();
                output.insert(0, fresh);
                (
                    Expr::Einsum(
                        Einsum { inputs, output },
                        parts.into_iter().map(|p| p.0).collect(),
                    ),
                    true,
                )
            }
            Expr::Concat(args, d) => {
                let refs: Vec<&Expr> = args.iter().collect();
                let (xs, is) = self.together(&refs)?;
                (Expr::Concat(xs, if is { d + 1 } else { *d }), is)
            }
            Expr::UpdateSlice(a, u, start) => {
                let (mut xs, is) = self.together(&[a, u])?;
                let (y, x) = (xs.pop().expect("two"), xs.pop().expect("two"));
                let mut st = start.clone();
                if is {
                    st.insert(0, 0);
                }
                (Expr::UpdateSlice(bx(x), bx(y), st), is)
            }
            Expr::CrossEntropy(x, t, d) => {
                let (mut xs, is) = self.together(&[x, t])?;
                let (y, x) = (xs.pop().expect("two"), xs.pop().expect("two"));
                (
                    Expr::CrossEntropy(bx(x), bx(y), if is { d + 1 } else { *d }),
                    is,
                )
            }
            Expr::Where(m, a, b) => match m {
                Mask::Const(c) => {
                    let (mut xs, is) = self.together(&[a, b])?;
                    let (y, x) = (xs.pop().expect("two"), xs.pop().expect("two"));
                    (Expr::Where(Mask::Const(c.clone()), bx(x), bx(y)), is)
                }
                Mask::Input(mk) => {
                    let (mut xs, is) = self.together(&[mk, a, b])?;
                    let y = xs.pop().expect("three");
                    let x = xs.pop().expect("three");
                    let mk = xs.pop().expect("three");
                    (Expr::Where(Mask::Input(bx(mk)), bx(x), bx(y)), is)
                }
            },
            Expr::Table(t, args) => {
                let refs: Vec<&Expr> = args.iter().collect();
                let (xs, is) = self.together(&refs)?;
                (Expr::Table(t.clone(), xs), is)
            }
        })
    }
    fn unary(&self, a: &Expr, f: impl Fn(Expr) -> Expr) -> Result<(Expr, bool), String> {
        let (x, is) = self.go(a)?;
        Ok((f(x), is))
    }
    fn dimmed(
        &self,
        a: &Expr,
        d: usize,
        f: impl Fn(Expr, usize) -> Expr,
    ) -> Result<(Expr, bool), String> {
        let (x, is) = self.go(a)?;
        Ok(if is {
            (f(x, d + 1), true)
        } else {
            (f(x, d), false)
        })
    }
}

/// A local function batched, and its output's batch dim (`batch_expr`);
/// an output no batched input reaches is broadcast, batched at 0.
pub fn batch_fn(
    f: &LocalFn,
    shapes: &[Shape],
    in_dims: &[Bdim],
    k: usize,
) -> Result<(LocalFn, usize), String> {
    let (expr, d) = batch_expr(&f.expr, shapes, in_dims, k)?;
    let (expr, d) = match d {
        Some(d) => (expr, d),
        None => {
            let out = infer(&f.expr, shapes)?.0;
            (broadcast(expr, &out, k), 0)
        }
    };
    Ok((
        LocalFn {
            expr,
            vars: f.vars.clone(),
            text: format!("vmap({})", f.text),
        },
        d,
    ))
}

/// How a program is batched: the collectives' rule and transpose, the
/// order of `grad` and `vmap`.
pub struct Batching<'a> {
    pub rule: &'a Rule<'a>,
    pub transpose: &'a Transpose<'a>,
    pub order: Order,
    /// Whether the system batches a conversion (`Kind::Convert`: local
    /// slicing or concatenation, e.g. JAX's transpose of
    /// all_gather_invariant, a dynamic_slice at axis_index) exactly, by
    /// [`convert_rule`], instead of asking `rule`.
    pub local_converts: bool,
}

/// A conversion batched at `d`: the dim it slices or concatenates moves
/// up one where `d` is at or before it; an untiled conversion removes its
/// dim (Invariant or Reduced to Varying or Partial) or inserts one (the
/// other way), and the batch dim follows.
pub fn convert_rule(c: &Collective, d: usize) -> Result<(Kind, usize), String> {
    let Kind::Convert { dim, stack } = c.kind else {
        return Err(format!("{} is not a conversion", c.describe()));
    };
    let removes = matches!(c.src, State::Invariant | State::Reduced);
    let out = match (stack, d > dim, removes) {
        (true, true, true) => d - 1,
        (true, true, false) => d + 1,
        _ => d,
    };
    Ok((
        Kind::Convert {
            dim: dim + usize::from(d <= dim),
            stack,
        },
        out,
    ))
}

/// A one-input linear op (a collective, a composition, a local function)
/// batched at `d` on element shape `s`: the batched op and its output's
/// batch dim (`Err(Refused)` where the rule refuses).
fn batch_linear(
    op: &Op,
    m: &Mesh,
    s: &[usize],
    d: usize,
    k: usize,
    b: &Batching,
) -> Result<(Op, usize, Shape), BatchError> {
    match op {
        Op::Collective(c) => {
            let out = c
                .infer(m, s)
                .map_err(|e| BatchError::Unmodelled(format!("{}: {e}", c.describe())))?;
            let (kind, e) = match c.kind {
                Kind::Convert { .. } if b.local_converts => convert_rule(c, d),
                _ => (b.rule)(&c.kind, d),
            }
            .map_err(BatchError::Unmodelled)?;
            if e > out.len() {
                return Err(BatchError::Refused(format!(
                    "the batched {} claims its output batched at dim {e}, past the end of its rank-{} output",
                    c.describe(),
                    out.len() + 1
                )));
            }
            Ok((Op::Collective(Collective { kind, ..c.clone() }), e, out))
        }
        Op::Compose(ops) => {
            let (mut cur, mut shape, mut parts) = (d, s.to_vec(), Vec::new());
            for o in ops {
                let (bo, e, out) = batch_linear(o, m, &shape, cur, k, b)?;
                parts.push(bo);
                cur = e;
                shape = out;
            }
            Ok((Op::Compose(parts), cur, shape))
        }
        Op::Local(f) => {
            let out = infer(&f.expr, &[s.to_vec()])
                .map_err(|e| BatchError::Unmodelled(format!("{}: {e}", f.text)))?
                .0;
            let (g, e) =
                batch_fn(f, &[s.to_vec()], &[Some(d)], k).map_err(BatchError::Unmodelled)?;
            Ok((Op::Local(g), e, out))
        }
        other => Err(BatchError::Unmodelled(format!(
            "{} is not batched (only collectives, compositions and local functions are)",
            other.describe()
        ))),
    }
}

/// `op` followed by moving the batch dim from `from` to `to` (rank `rank`).
fn then_move(op: Op, rank: usize, from: usize, to: usize) -> Op {
    if from == to {
        return op;
    }
    let mv = Op::Local(move_fn(rank, from, to));
    match op {
        Op::Compose(mut v) => {
            v.push(mv);
            Op::Compose(v)
        }
        o => Op::Compose(vec![o, mv]),
    }
}

/// Moving the batch dim from `from` to `to` (rank `rank`), then `op`.
fn before_move(op: Op, rank: usize, from: usize, to: usize) -> Op {
    let mv = Op::Local(move_fn(rank, from, to));
    match op {
        Op::Compose(mut v) => {
            v.insert(0, mv);
            Op::Compose(v)
        }
        o => Op::Compose(vec![mv, o]),
    }
}

/// A program batched (SPEC.md §24.9): element input shapes `shapes`,
/// batch dims `in_dims`, the output's batch dim moved to `out_axis`
/// (broadcast there if no input reaches it), batch size `k`. The types
/// are the program's: the batch dim is local to every rank.
pub fn batch_program(
    p: &Program,
    m: &Mesh,
    shapes: &[Shape],
    in_dims: &[Bdim],
    out_axis: usize,
    k: usize,
    b: &Batching,
) -> Result<Program, BatchError> {
    let unmodelled = |s: String| BatchError::Unmodelled(s);
    let at = |name: &str, e: BatchError| match e {
        BatchError::Unmodelled(s) => BatchError::Unmodelled(format!("step `{name}`: {s}")),
        BatchError::Refused(s) => BatchError::Refused(format!("step `{name}`: {s}")),
        BatchError::BackwardRefused(s) => {
            BatchError::BackwardRefused(format!("step `{name}`: {s}"))
        }
    };
    // The forward: every value's element shape and batch dim.
    let mut vals: Vec<(Shape, Bdim)> = shapes
        .iter()
        .cloned()
        .zip(in_dims.iter().copied())
        .collect();
    let forward_only = Batching {
        rule: b.rule,
        transpose: b.transpose,
        order: Order::GradOfVmap,
        local_converts: b.local_converts,
    };
    for st in &p.steps {
        let arg_shapes: Vec<Shape> = st.args.iter().map(|&a| vals[a].0.clone()).collect();
        let arg_dims: Vec<Bdim> = st.args.iter().map(|&a| vals[a].1).collect();
        let out_shape = st
            .op
            .op
            .infer(m, &arg_shapes)
            .map_err(|e| unmodelled(format!("step `{}`: {e}", st.name)))?
            .0;
        let out_dim = if arg_dims.iter().all(Option::is_none) {
            None
        } else {
            let (_, e) = batch_step(
                &st.op,
                m,
                &arg_shapes,
                &arg_dims,
                &out_shape,
                k,
                0,
                &forward_only,
            )
            .map_err(|e| at(&st.name, e))?;
            Some(e)
        };
        vals.push((out_shape, out_dim));
    }
    let last = p.inputs.len() + p.steps.len() - 1;
    // Under vmap(grad(f)) the backward is batched on its own: the output's
    // cotangent arrives batched at `out_axes`, a batched local VJP leaves
    // its cotangents batched at 0, a batched transpose where its rule
    // claims (§24.9).
    let mut cot: Vec<Bdim> = vec![None; vals.len()];
    cot[last] = Some(out_axis);
    if b.order == Order::VmapOfGrad {
        for (j, st) in p.steps.iter().enumerate().rev() {
            let v = p.inputs.len() + j;
            if vals[v].1.is_none() {
                continue;
            }
            let c = cot[v].unwrap_or(0);
            let mut deliver = |a: usize, d: usize| {
                cot[a] = match cot[a] {
                    None => Some(d),
                    Some(x) if x == d => Some(d),
                    Some(_) => Some(0),
                };
            };
            match (&st.op.op, &st.op.backward) {
                (Op::Collective(_), Backward::Transpose(bop)) => {
                    let a = st.args[0];
                    match batch_linear(bop, m, &vals[v].0, c, k, b) {
                        Ok((_, e2, _)) => deliver(a, e2),
                        Err(_) => deliver(a, 0),
                    }
                }
                // A batched local VJP keeps the cotangent's batch dim where
                // the step kept its batch dim and the cotangent arrives
                // there (elementwise), else puts it at 0.
                _ => {
                    let keep = if vals[v].1 == Some(c) { c } else { 0 };
                    for &a in &st.args {
                        deliver(a, keep);
                    }
                }
            }
        }
    }
    let mut steps = Vec::with_capacity(p.steps.len() + 1);
    for (j, st) in p.steps.iter().enumerate() {
        let v = p.inputs.len() + j;
        let arg_shapes: Vec<Shape> = st.args.iter().map(|&a| vals[a].0.clone()).collect();
        let arg_dims: Vec<Bdim> = st.args.iter().map(|&a| vals[a].1).collect();
        if vals[v].1.is_none() {
            steps.push(st.clone());
            continue;
        }
        let c = cot[v].unwrap_or(0);
        let (op, _) = batch_step(&st.op, m, &arg_shapes, &arg_dims, &vals[v].0, k, c, b)
            .map_err(|e| at(&st.name, e))?;
        steps.push(Step {
            name: st.name.clone(),
            op,
            args: st.args.clone(),
        });
    }
    let (out_shape, out_dim) = vals.last().expect("a step").clone();
    let rank = out_shape.len() + 1;
    if out_axis >= rank {
        return Err(BatchError::Refused(format!(
            "out_axes {out_axis} is past the end of the rank-{rank} batched output"
        )));
    }
    let ty = p.output().clone();
    let fin = match out_dim {
        Some(d) if d == out_axis => None,
        Some(d) => Some(move_fn(rank, d, out_axis)),
        None => Some(LocalFn {
            expr: move_expr(broadcast(Expr::Var(0), &out_shape, k), rank, 0, out_axis),
            vars: vec!["y".into()],
            text: format!("broadcast(y, {k} copies at dim {out_axis})"),
        }),
    };
    // One collective alone: the move to `out_axes` joins it, so its
    // declared JVP is checked with it (J1), and its backward starts by
    // moving the cotangent back.
    if let (Some(d), [only], Some(f)) = (out_dim, steps.as_mut_slice(), fin.as_ref()) {
        if matches!(only.op.op, Op::Collective(_)) {
            let mv = Op::Local(f.clone());
            let back = Op::Local(move_fn(rank, out_axis, d));
            let t = &mut only.op;
            if let Backward::Transpose(bw) = &t.backward {
                t.backward = Backward::Transpose(Op::Compose(vec![back, bw.clone()]));
            }
            t.op = Op::Compose(vec![t.op.clone(), mv.clone()]);
            if let Some(Jvp::Tangent(j)) = &t.jvp {
                t.jvp = Some(Jvp::Tangent(Op::Compose(vec![j.clone(), mv])));
            }
            let mut q = Program::new(p.inputs.clone(), steps).map_err(unmodelled)?;
            q.names = p.names.clone();
            return Ok(q);
        }
    }
    if let Some(f) = fin {
        steps.push(Step {
            name: "vmap: out_axes".into(),
            op: TypedOp::local(f, vec![ty.clone()], ty),
            args: vec![last],
        });
    }
    let mut q = Program::new(p.inputs.clone(), steps).map_err(unmodelled)?;
    q.names = p.names.clone();
    Ok(q)
}

/// One step batched: the batched typed op and its output's batch dim.
/// `cot`: where its output's cotangent arrives batched under
/// `vmap(grad(f))`.
#[allow(clippy::too_many_arguments)]
fn batch_step(
    t: &TypedOp,
    m: &Mesh,
    shapes: &[Shape],
    dims: &[Bdim],
    out_shape: &[usize],
    k: usize,
    cot: usize,
    b: &Batching,
) -> Result<(TypedOp, usize), BatchError> {
    let jvp_unmodelled =
        || BatchError::Unmodelled("a declared JVP on a program step is not batched".into());
    match &t.op {
        Op::Local(f) => {
            let (g, e) = batch_fn(f, shapes, dims, k).map_err(BatchError::Unmodelled)?;
            let backward = match &t.backward {
                Backward::LocalVjp => Backward::LocalVjp,
                _ => {
                    return Err(BatchError::Unmodelled(
                        "a hand-written local backward under vmap".into(),
                    ))
                }
            };
            if t.jvp.is_some() {
                return Err(jvp_unmodelled());
            }
            Ok((
                TypedOp {
                    op: Op::Local(g),
                    backward,
                    ..t.clone()
                },
                e,
            ))
        }
        Op::Collective(c) => {
            let d = dims[0].expect("batched");
            let (op, e, _) = batch_linear(&t.op, m, &shapes[0], d, k, b)?;
            let Op::Collective(bc) = &op else {
                unreachable!("a collective batches to a collective")
            };
            let in_rank = shapes[0].len() + 1;
            let backward = match &t.backward {
                Backward::Transpose(bop) => {
                    let own = matches!(bop, Op::Collective(tc)
                        if (b.transpose)(&c.kind).as_ref() == Ok(&tc.kind));
                    if b.order == Order::GradOfVmap && own {
                        // The transpose of the batched primitive, its
                        // batched parameters transposed.
                        let Op::Collective(tc) = bop else {
                            unreachable!("matched above")
                        };
                        let kind = (b.transpose)(&bc.kind).map_err(BatchError::Unmodelled)?;
                        Backward::Transpose(Op::Collective(Collective { kind, ..tc.clone() }))
                    } else {
                        // A hand-written backward under grad(vmap(f)) gets
                        // the cotangent where the forward left its output.
                        let out_rank = out_shape.len() + 1;
                        let at_cot = if b.order == Order::GradOfVmap { e } else { cot };
                        if at_cot >= out_rank {
                            return Err(BatchError::BackwardRefused(format!(
                                "the cotangent is batched at dim {at_cot}, past the end of the rank-{out_rank} output"
                            )));
                        }
                        let (bb, e2, _) =
                            batch_linear(bop, m, out_shape, at_cot, k, b).map_err(|x| match x {
                                BatchError::Refused(s) => BatchError::BackwardRefused(s),
                                other => other,
                            })?;
                        if e2 >= in_rank {
                            return Err(BatchError::BackwardRefused(format!(
                                "the batched backward {} leaves its batch dim at {e2}, past the end of its rank-{in_rank} output",
                                bop.describe()
                            )));
                        }
                        let bb = then_move(bb, in_rank, e2, d);
                        Backward::Transpose(if at_cot == e {
                            bb
                        } else {
                            before_move(bb, out_rank, e, at_cot)
                        })
                    }
                }
                Backward::LocalVjp => Backward::LocalVjp,
                _ => {
                    return Err(BatchError::Unmodelled(
                        "a collective step whose backward is not a transpose".into(),
                    ))
                }
            };
            let jvp = match &t.jvp {
                None => None,
                Some(Jvp::Tangent(j)) => {
                    let (bj, e3, _) = batch_linear(j, m, &shapes[0], d, k, b)?;
                    Some(Jvp::Tangent(then_move(bj, out_shape.len() + 1, e3, e)))
                }
                Some(Jvp::Local(_)) => return Err(jvp_unmodelled()),
            };
            Ok((
                TypedOp {
                    op: Op::Collective(bc.clone()),
                    backward,
                    jvp,
                    ..t.clone()
                },
                e,
            ))
        }
        other => Err(BatchError::Unmodelled(format!(
            "{} is not batched (program steps batch local functions and collectives)",
            other.describe()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{eval, Ctx};
    use spmd_semantics::{Tensor, Q};

    fn t(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), v.iter().map(|&x| Q::int(x)).collect())
    }

    #[test]
    fn sum_shifts_its_dim_and_broadcasts_the_unbatched() {
        // sum(x * w, 0) with x batched at 1, w not batched.
        let f = crate::expr::parse("sum(x * w, 0)").unwrap();
        let shapes = vec![vec![2], vec![2]];
        let (g, d) = batch_fn(&f, &shapes, &[Some(0), None], 3).unwrap();
        assert_eq!(d, 0);
        let x = t(&[3, 2], &[1, 2, 3, 4, 5, 6]);
        let w = t(&[2], &[10, 1]);
        let y = eval(&g.expr, &[&x, &w], &mut Ctx::default()).unwrap();
        assert_eq!(y, t(&[3], &[12, 34, 56]));
        // The twin: not shifting the dim sums over the batch instead.
        let wrong = Expr::Sum(
            Box::new(Expr::Mul(Box::new(Expr::Var(0)), Box::new(Expr::Var(1)))),
            0,
        );
        assert!(eval(&wrong, &[&x, &w], &mut Ctx::default()).is_err());
    }

    #[test]
    fn the_exact_rule_of_an_untiled_scatter_lowers_the_batch_dim() {
        let k = Kind::ReduceScatter {
            dim: 0,
            stack: true,
        };
        assert_eq!(
            exact_rule(&k, 1).unwrap(),
            (
                Kind::ReduceScatter {
                    dim: 0,
                    stack: true
                },
                0
            )
        );
        assert_eq!(
            exact_rule(&k, 0).unwrap(),
            (
                Kind::ReduceScatter {
                    dim: 1,
                    stack: true
                },
                0
            )
        );
    }
}
