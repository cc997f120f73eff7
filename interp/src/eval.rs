//! Shape and degree inference, exact evaluation and the local VJP of
//! expressions (SPEC.md §6.1-§6.3). One function per judgement, one arm per op.

use crate::einsum::{einsum_vjp_flat, einsum_vjp_general, FLAT_OPS};
use crate::expr::{Einsum, Expr, Mask, Rounding};
use crate::infer::elementwise_shape;
use spmd_semantics::tensor::{numel, same_shape, strides, unravel};
use spmd_semantics::{Shape, Tensor, Q};
use std::borrow::{Borrow, Cow};

pub use crate::einsum::{
    einsum, einsum_plan, einsum_plan_cached, einsum_plan_for, einsum_planned_into,
    operand_vjp_spec, EinsumPlan,
};
pub use crate::infer::{infer, visit_viable, Degree};

/// Why an evaluation has no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// Outside the domain of the function (SPEC.md §5.4): not a pass, not a failure.
    DivByZero,
    /// Shapes that inference should have rejected: an interpreter bug or an
    /// input of the wrong shape.
    Shape(String),
}

/// Evaluation context: records whether any kink was met exactly
/// (SPEC.md §5.3), where the function has no derivative.
#[derive(Default, Debug)]
pub struct Ctx {
    pub at_kink: bool,
}

fn binary(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(&Q, &Q) -> Result<Q, EvalError>,
) -> Result<Tensor, EvalError> {
    let s = elementwise_shape(&a.shape, &b.shape).map_err(EvalError::Shape)?;
    // A scalar operand broadcasts by reading its one element (no copy).
    let at = |t: &Tensor, i: usize| if t.data.len() == 1 { 0 } else { i };
    let data = (0..numel(&s))
        .map(|i| f(&a.data[at(a, i)], &b.data[at(b, i)]))
        .collect::<Result<_, _>>()?;
    Ok(Tensor::new(s, data))
}

/// Sum out the broadcast of a scalar: the adjoint of `broadcast_to`.
fn unbroadcast(g: &Tensor, shape: &[usize]) -> Tensor {
    if g.shape == shape {
        g.clone()
    } else {
        Tensor::scalar(g.data.iter().fold(Q::zero(), |a, b| a.add(b)))
    }
}

/// Reduce along `dim` with `f`, returning the reduced tensor.
fn reduce(t: &Tensor, dim: usize, mut f: impl FnMut(&[&Q]) -> Q) -> Tensor {
    let outer: usize = t.shape[..dim].iter().product();
    let k = t.shape[dim];
    let inner: usize = t.shape[dim + 1..].iter().product();
    let mut shape = t.shape.clone();
    shape.remove(dim);
    let mut data = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let col: Vec<&Q> = (0..k).map(|j| &t.data[(o * k + j) * inner + i]).collect();
            data.push(f(&col));
        }
    }
    Tensor::new(shape, data)
}

/// Insert `dim` of size `k`, repeating values (the adjoint of a sum).
fn expand(t: &Tensor, dim: usize, k: usize) -> Tensor {
    Tensor::stack(&vec![t.clone(); k], dim)
}

/// Exact value of `e` on the inputs `xs`. SPEC.md §6.1.
pub fn eval<T: Borrow<Tensor>>(e: &Expr, xs: &[T], ctx: &mut Ctx) -> Result<Tensor, EvalError> {
    if let Some(shape) = pointwise_shape(e, xs, false) {
        let n = numel(shape);
        if n > 0 {
            let shape = shape.to_vec();
            let data = (0..n)
                .map(|i| at_point(e, xs, i, ctx))
                .collect::<Result<_, _>>()?;
            return Ok(Tensor { shape, data });
        }
    }
    Ok(ev(e, xs, ctx)?.into_owned())
}

/// `eval` into `out`, reusing its buffers on the pointwise path (below):
/// a workspace sample allocates nothing there. On an error `out` holds
/// partial data and must be restored by the caller.
pub fn eval_into<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    ctx: &mut Ctx,
    out: &mut Tensor,
) -> Result<(), EvalError> {
    if let Some(shape) = pointwise_shape(e, xs, false) {
        let n = numel(shape);
        if n > 0 {
            out.shape.clear();
            out.shape.extend_from_slice(shape);
            out.data.clear();
            out.data.reserve(n);
            if let Some((op, a, b)) = leaf_binary(e) {
                // `x * y`, `3 * x`, `x + 1`, ...: the node's one operation
                // per entry, as `at_point` applies it, without walking the
                // tree (SPEC.md §18.8).
                let (a, b) = (leaf(a, xs), leaf(b, xs));
                for i in 0..n {
                    out.data.push(op.apply(a.at(i), b.at(i))?);
                }
                return Ok(());
            }
            if let Some((op, a)) = leaf_unary(e) {
                let a = leaf(a, xs);
                for i in 0..n {
                    out.data.push(op.apply(a.at(i), ctx));
                }
                return Ok(());
            }
            for i in 0..n {
                let v = at_point(e, xs, i, ctx)?;
                out.data.push(v);
            }
            return Ok(());
        }
    }
    // An einsum of inputs, as `ev` contracts it (a cached plan), straight
    // into `out`.
    if let Expr::Einsum(spec, args) = e {
        if args.len() <= FLAT_OPS
            && args
                .iter()
                .all(|a| matches!(a, Expr::Var(i) if *i < xs.len()))
        {
            let mut refs: [&Tensor; FLAT_OPS] = [xs[0].borrow(); FLAT_OPS];
            let mut shapes: [&[usize]; FLAT_OPS] = [&[]; FLAT_OPS];
            for ((r, s), a) in refs.iter_mut().zip(&mut shapes).zip(args) {
                if let Expr::Var(i) = a {
                    *r = xs[*i].borrow();
                    *s = &r.shape;
                }
            }
            let n = args.len();
            einsum_cached_into(spec, &refs[..n], &shapes[..n], out);
            return Ok(());
        }
    }
    *out = ev(e, xs, ctx)?.into_owned();
    Ok(())
}

/// The einsum of `ops` (of these `shapes`, which `infer` accepted) into
/// `out` by the per-thread cached plan: `ev`'s contraction, and
/// `eval_into`'s of inputs.
fn einsum_cached_into(spec: &Einsum, ops: &[&Tensor], shapes: &[&[usize]], out: &mut Tensor) {
    let plan = einsum_plan_cached(spec, shapes).expect("einsum shapes were inferred");
    einsum_planned_into(&plan, ops, out);
}

// ---------------------------------------------------------------------
// The pointwise path (SPEC.md §18): an expression built only of
// elementwise nodes is evaluated one output entry at a time, with no
// intermediate tensor. Every node is then either a scalar or of the
// output's shape, so entry `i` of a node is its entry `i` or its one
// entry; each node's every entry is computed, so a division by zero or a
// kink anywhere is found exactly as by `ev`, which stays the definition.

/// The output shape of `e` when it is pointwise on inputs of these shapes:
/// variables, constants, + - * /, powers, negation, abs and relu (and, with
/// `!for_vjp`, floor, cast and rounding, whose VJP skips their argument).
/// `None` for any other node or for shapes `ev` would reject.
fn pointwise_shape<'a, T: Borrow<Tensor>>(
    e: &Expr,
    xs: &'a [T],
    for_vjp: bool,
) -> Option<&'a [usize]> {
    pointwise_walk(e, xs, for_vjp, &mut false)
}

/// `pointwise_shape`, which also sets `div` when `e` divides somewhere
/// (only then can its VJP leave the domain): one walk of the tree. A leaf,
/// a unary node of a leaf and a binary node of two leaves are answered
/// here, inlined into the caller, so `x / y` and `relu(x)` take no call.
#[inline(always)]
fn pointwise_walk<'a, T: Borrow<Tensor>>(
    e: &Expr,
    xs: &'a [T],
    for_vjp: bool,
    div: &mut bool,
) -> Option<&'a [usize]> {
    match e {
        Expr::Var(_) | Expr::Const(_) => leaf_shape(e, xs),
        Expr::Neg(a) | Expr::Pow(a, _) | Expr::Abs(a) | Expr::Relu(a) if is_leaf(a) => {
            leaf_shape(a, xs)
        }
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b)
            if is_leaf(a) && is_leaf(b) =>
        {
            *div |= matches!(e, Expr::Div(..));
            pair_shape(leaf_shape(a, xs)?, leaf_shape(b, xs)?)
        }
        _ => pointwise_node(e, xs, for_vjp, div),
    }
}

fn is_leaf(e: &Expr) -> bool {
    matches!(e, Expr::Var(_) | Expr::Const(_))
}

/// The shape of a variable (`None` past the inputs) or of a constant.
#[inline(always)]
fn leaf_shape<'a, T: Borrow<Tensor>>(e: &Expr, xs: &'a [T]) -> Option<&'a [usize]> {
    match e {
        Expr::Var(i) => Some(&xs.get(*i)?.borrow().shape),
        _ => Some(&[]),
    }
}

/// `elementwise_shape`'s rule for a binary node: equal shapes or a scalar.
#[inline(always)]
fn pair_shape<'a>(sa: &'a [usize], sb: &'a [usize]) -> Option<&'a [usize]> {
    if same_shape(sa, sb) || sb.is_empty() {
        Some(sa)
    } else if sa.is_empty() {
        Some(sb)
    } else {
        None
    }
}

/// `pointwise_walk` of an inner node (leaves never reach it).
fn pointwise_node<'a, T: Borrow<Tensor>>(
    e: &Expr,
    xs: &'a [T],
    for_vjp: bool,
    div: &mut bool,
) -> Option<&'a [usize]> {
    match e {
        Expr::Neg(a) | Expr::Pow(a, _) | Expr::Abs(a) | Expr::Relu(a) => {
            pointwise_walk(a, xs, for_vjp, div)
        }
        Expr::Floor(a) | Expr::Cast(a, _) | Expr::Round(_, a) if !for_vjp => {
            pointwise_walk(a, xs, for_vjp, div)
        }
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) => {
            *div |= matches!(e, Expr::Div(..));
            let sa = pointwise_walk(a, xs, for_vjp, div)?;
            let sb = pointwise_walk(b, xs, for_vjp, div)?;
            pair_shape(sa, sb)
        }
        _ => None,
    }
}

/// Per input, for an expression that is pointwise on inputs of these
/// shapes (see `pointwise_shape`) with at least one output entry: whether
/// the input has the output's number of entries, so that output entry k
/// reads its entry k and no other output entry reads it (any other input
/// is a scalar read by every entry). `None` when the expression is not
/// pointwise here.
pub fn pointwise_inputs(e: &Expr, shapes: &[Shape]) -> Option<Vec<bool>> {
    // Only the shapes are read.
    let ts: Vec<Tensor> = shapes
        .iter()
        .map(|s| Tensor {
            shape: s.clone(),
            data: Vec::new(),
        })
        .collect();
    let n = numel(pointwise_shape(e, &ts, false)?);
    (n > 0).then(|| shapes.iter().map(|s| numel(s) == n).collect())
}

/// Entry `k` of a pointwise expression (`pointwise_inputs` is `Some` for
/// these inputs' shapes): the value `eval_into` writes there, with the
/// same kink flag and the same division by zero for that entry.
pub fn eval_at<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    k: usize,
    ctx: &mut Ctx,
) -> Result<Q, EvalError> {
    if let Some((op, a, b)) = leaf_binary(e) {
        return op.apply(leaf(a, xs).at(k), leaf(b, xs).at(k));
    }
    if let Some((op, a)) = leaf_unary(e) {
        return Ok(op.apply(leaf(a, xs).at(k), ctx));
    }
    at_point(e, xs, k, ctx)
}

/// The operation of a unary node without a domain to leave.
#[derive(Clone, Copy)]
enum Un {
    Neg,
    Abs,
    Relu,
}

impl Un {
    /// `op x`, as `at_point` computes the node, kink flag included.
    #[inline]
    fn apply(self, x: &Q, ctx: &mut Ctx) -> Q {
        match self {
            Un::Neg => x.neg(),
            Un::Abs => {
                ctx.at_kink |= x.is_zero();
                x.abs()
            }
            Un::Relu => {
                ctx.at_kink |= x.is_zero();
                if x.is_negative() {
                    Q::zero()
                } else {
                    x.clone()
                }
            }
        }
    }
}

impl Un {
    /// The operand's share of cotangent `g` at operand value `x`; the
    /// slope at 0 is 0, as in `backprop`.
    #[inline]
    fn share(self, x: &Q, g: &Q) -> Q {
        match self {
            Un::Neg => g.neg(),
            _ if x.is_zero() => Q::zero(),
            Un::Relu if x.is_negative() => Q::zero(),
            Un::Abs if x.is_negative() => g.neg(),
            _ => g.clone(),
        }
    }
}

/// A negation, absolute value or relu of a variable or a constant.
fn leaf_unary(e: &Expr) -> Option<(Un, &Expr)> {
    let (op, a) = match e {
        Expr::Neg(a) => (Un::Neg, a),
        Expr::Abs(a) => (Un::Abs, a),
        Expr::Relu(a) => (Un::Relu, a),
        _ => return None,
    };
    is_leaf(a).then_some((op, &**a))
}

/// The operation of a binary node.
#[derive(Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

impl Bin {
    /// `x op y`, as `at_point` computes the node.
    #[inline]
    fn apply(self, x: &Q, y: &Q) -> Result<Q, EvalError> {
        Ok(match self {
            Bin::Add => x.add(y),
            Bin::Sub => x.sub(y),
            Bin::Mul => x.mul(y),
            Bin::Div => x.div(y).map_err(|_| EvalError::DivByZero)?,
        })
    }
}

/// A binary node both of whose operands are variables or constants.
fn leaf_binary(e: &Expr) -> Option<(Bin, &Expr, &Expr)> {
    let (op, a, b) = match e {
        Expr::Add(a, b) => (Bin::Add, a, b),
        Expr::Sub(a, b) => (Bin::Sub, a, b),
        Expr::Mul(a, b) => (Bin::Mul, a, b),
        Expr::Div(a, b) => (Bin::Div, a, b),
        _ => return None,
    };
    (is_leaf(a) && is_leaf(b)).then_some((op, &**a, &**b))
}

/// A variable's tensor or a constant, read at an output entry.
enum Leaf<'a> {
    Tensor(&'a Tensor),
    Const(&'a Q),
}

impl<'a> Leaf<'a> {
    #[inline]
    fn at(&self, i: usize) -> &'a Q {
        match *self {
            Leaf::Tensor(t) => entry(t, i),
            Leaf::Const(q) => q,
        }
    }
}

/// `e` (a variable or a constant, `leaf_binary`'s operands) as a `Leaf`.
fn leaf<'a, T: Borrow<Tensor>>(e: &'a Expr, xs: &'a [T]) -> Leaf<'a> {
    match e {
        Expr::Var(k) => Leaf::Tensor(xs[*k].borrow()),
        Expr::Const(q) => Leaf::Const(q),
        _ => unreachable!("leaf_binary and leaf_unary admit only variables and constants"),
    }
}

/// Entry `i` of a tensor that is either a scalar or of the output's shape.
#[inline]
fn entry(t: &Tensor, i: usize) -> &Q {
    &t.data[if t.data.len() == 1 { 0 } else { i }]
}

/// Entry `i` of a pointwise expression (see `pointwise_shape`).
fn at_point<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    i: usize,
    ctx: &mut Ctx,
) -> Result<Q, EvalError> {
    Ok(match e {
        Expr::Var(k) => entry(xs[*k].borrow(), i).clone(),
        Expr::Const(q) => q.clone(),
        Expr::Neg(a) => at_point(a, xs, i, ctx)?.neg(),
        Expr::Add(a, b) => at_point(a, xs, i, ctx)?.add(&at_point(b, xs, i, ctx)?),
        Expr::Sub(a, b) => at_point(a, xs, i, ctx)?.sub(&at_point(b, xs, i, ctx)?),
        Expr::Mul(a, b) => at_point(a, xs, i, ctx)?.mul(&at_point(b, xs, i, ctx)?),
        Expr::Div(a, b) => {
            let (x, y) = (at_point(a, xs, i, ctx)?, at_point(b, xs, i, ctx)?);
            x.div(&y).map_err(|_| EvalError::DivByZero)?
        }
        Expr::Pow(a, k) => {
            let x = at_point(a, xs, i, ctx)?;
            (0..*k).fold(Q::one(), |acc, _| acc.mul(&x))
        }
        Expr::Abs(a) => {
            let x = at_point(a, xs, i, ctx)?;
            ctx.at_kink |= x.is_zero();
            x.abs()
        }
        Expr::Relu(a) => {
            let x = at_point(a, xs, i, ctx)?;
            ctx.at_kink |= x.is_zero();
            if x.is_negative() {
                Q::zero()
            } else {
                x
            }
        }
        Expr::Floor(a) => {
            let x = at_point(a, xs, i, ctx)?;
            ctx.at_kink |= x.is_integer();
            x.floor()
        }
        Expr::Cast(a, bits) => {
            let x = at_point(a, xs, i, ctx)?;
            ctx.at_kink |= is_midpoint(&x, *bits);
            x.round_to_bits(*bits)
        }
        Expr::Round(k, a) => {
            let x = at_point(a, xs, i, ctx)?;
            ctx.at_kink |= match k {
                Rounding::Round => is_midpoint(&x, 0),
                _ => x.is_integer(),
            };
            round_q(*k, &x)
        }
        _ => unreachable!("pointwise_shape admits only the nodes above"),
    })
}

/// Reverse mode at output entry `i` of a pointwise expression (no floor,
/// cast or rounding): `gbar` is the cotangent of `e`'s entry; each input's
/// entry receives its share. Operand values are evaluated where a node
/// needs them, so every quotient's denominator is evaluated (and a zero
/// one found) whatever the cotangent; a zero cotangent skips the products.
fn rev_at<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    i: usize,
    gbar: &Q,
    grads: &mut [Tensor],
) -> Result<(), EvalError> {
    let val = |a: &Expr| at_point(a, xs, i, &mut Ctx::default());
    match e {
        Expr::Var(_) | Expr::Const(_) => add_share(e, i, gbar, grads),
        Expr::Neg(a) => rev_at(a, xs, i, &gbar.neg(), grads)?,
        Expr::Add(a, b) => {
            rev_at(a, xs, i, gbar, grads)?;
            rev_at(b, xs, i, gbar, grads)?;
        }
        Expr::Sub(a, b) => {
            rev_at(a, xs, i, gbar, grads)?;
            rev_at(b, xs, i, &gbar.neg(), grads)?;
        }
        Expr::Mul(a, b) => {
            let (va, vb) = (val(a)?, val(b)?);
            rev_at(a, xs, i, &gbar.mul(&vb), grads)?;
            rev_at(b, xs, i, &gbar.mul(&va), grads)?;
        }
        Expr::Div(a, b) => {
            let (va, vb) = (val(a)?, val(b)?);
            let z = |_| EvalError::DivByZero;
            // d(a/b)/da = 1/b, d(a/b)/db = -a/b², as `backprop` has them.
            let ga = gbar.div(&vb).map_err(z)?;
            let gb = gbar.mul(&va.div(&vb.mul(&vb)).map_err(z)?).neg();
            rev_at(a, xs, i, &ga, grads)?;
            rev_at(b, xs, i, &gb, grads)?;
        }
        Expr::Pow(a, k) => {
            let va = val(a)?;
            let slope = (1..*k).fold(Q::int(i64::from(*k)), |acc, _| acc.mul(&va));
            rev_at(a, xs, i, &gbar.mul(&slope), grads)?;
        }
        Expr::Abs(a) | Expr::Relu(a) => {
            let op = if matches!(e, Expr::Relu(..)) {
                Un::Relu
            } else {
                Un::Abs
            };
            rev_at(a, xs, i, &op.share(&val(a)?, gbar), grads)?;
        }
        _ => unreachable!("pointwise_shape(.., true) admits only the nodes above"),
    }
    Ok(())
}

/// `Ok` exactly where `at_point(e, xs, i, ..)` is, for the nodes
/// `pointwise_shape(.., true)` admits: only a quotient can fail, so only
/// the denominators are evaluated, not the entry's value.
fn defined_at<T: Borrow<Tensor>>(e: &Expr, xs: &[T], i: usize) -> Result<(), EvalError> {
    match e {
        Expr::Var(_) | Expr::Const(_) => Ok(()),
        Expr::Neg(a) | Expr::Pow(a, _) | Expr::Abs(a) | Expr::Relu(a) => defined_at(a, xs, i),
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) => {
            defined_at(a, xs, i)?;
            defined_at(b, xs, i)
        }
        Expr::Div(a, b) => {
            defined_at(a, xs, i)?;
            let zero = match &**b {
                Expr::Var(k) => entry(xs[*k].borrow(), i).is_zero(),
                Expr::Const(q) => q.is_zero(),
                b => at_point(b, xs, i, &mut Ctx::default())?.is_zero(),
            };
            if zero {
                Err(EvalError::DivByZero)
            } else {
                Ok(())
            }
        }
        _ => unreachable!("pointwise_shape(.., true) admits only the nodes above"),
    }
}

/// `vjp` on the pointwise path: reverse mode entry by entry, each input's
/// share added into its entry (summed over the entries a scalar input is
/// broadcast to). Where the cotangent's entry is zero nothing is added, but
/// when the expression divides (`div`, from `pointwise_walk`) its
/// denominators are still evaluated there, so a division by zero is found
/// wherever `backprop` finds it (it checks each quotient's denominator at
/// every entry).
fn vjp_pointwise<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    g: &Tensor,
    n: usize,
    div: bool,
    grads: &mut [Tensor],
) -> Result<(), EvalError> {
    let bin = leaf_binary(e);
    let un = leaf_unary(e);
    for i in 0..n {
        let gi = entry(g, i);
        if gi.is_zero() {
            if div {
                defined_at(e, xs, i)?;
            }
            continue;
        }
        rev_entry(e, bin, un, xs, i, gi, grads)?;
    }
    Ok(())
}

/// One output entry `i` of `vjp_pointwise`, at a nonzero cotangent entry
/// `gi`: the leaf forms in place, any other node by `rev_at`.
#[inline(always)]
fn rev_entry<T: Borrow<Tensor>>(
    e: &Expr,
    bin: Option<(Bin, &Expr, &Expr)>,
    un: Option<(Un, &Expr)>,
    xs: &[T],
    i: usize,
    gi: &Q,
    grads: &mut [Tensor],
) -> Result<(), EvalError> {
    if let Some((op, a, b)) = bin {
        rev_binary(op, a, b, xs, i, gi, grads)
    } else if let Some((op, a)) = un {
        add_share(a, i, &op.share(leaf(a, xs).at(i), gi), grads);
        Ok(())
    } else {
        rev_at(e, xs, i, gi, grads)
    }
}

/// `vjp_add` for a cotangent `g` that is zero off the output entries `at`
/// (ascending), on inputs where the expression is defined at every entry
/// (its forward ran without a division by zero): the same shares, added
/// in the same order, without reading the zero entries. `vjp_add` would
/// only test those entries' denominators there, which the forward already
/// found nonzero. `None` where `vjp_add` does not take its pointwise path
/// (the caller runs it instead).
pub fn vjp_add_at<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    g: &Tensor,
    at: &[usize],
    grads: &mut [Tensor],
) -> Option<Result<(), EvalError>> {
    let mut div = false;
    let shape = pointwise_walk(e, xs, true, &mut div)?;
    if numel(shape) == 0 || xs.is_empty() || !same_shape(&g.shape, shape) {
        return None;
    }
    let (bin, un) = (leaf_binary(e), leaf_unary(e));
    for &i in at {
        let gi = entry(g, i);
        if gi.is_zero() {
            continue;
        }
        if let Err(err) = rev_entry(e, bin, un, xs, i, gi, grads) {
            return Some(Err(err));
        }
    }
    Some(Ok(()))
}

/// `rev_at` for a binary node of variables and constants (`leaf_binary`),
/// reading the operands in place: the same shares, added in the same order.
fn rev_binary<T: Borrow<Tensor>>(
    op: Bin,
    a: &Expr,
    b: &Expr,
    xs: &[T],
    i: usize,
    gbar: &Q,
    grads: &mut [Tensor],
) -> Result<(), EvalError> {
    let (va, vb) = (leaf(a, xs).at(i), leaf(b, xs).at(i));
    let (ga, gb) = match op {
        Bin::Add => (gbar.clone(), gbar.clone()),
        Bin::Sub => (gbar.clone(), gbar.neg()),
        Bin::Mul => (gbar.mul(vb), gbar.mul(va)),
        Bin::Div => {
            // d(a/b)/da = 1/b, d(a/b)/db = -a/b² = -(g/b)·a/b.
            let ga = gbar.div(vb).map_err(|_| EvalError::DivByZero)?;
            let gb = ga.mul(va).div(vb).map_err(|_| EvalError::DivByZero)?.neg();
            (ga, gb)
        }
    };
    add_share(a, i, &ga, grads);
    add_share(b, i, &gb, grads);
    Ok(())
}

/// A variable's share `g` of output entry `i`, added into its cotangent
/// (at entry 0 for a broadcast scalar); a constant takes none.
#[inline]
fn add_share(e: &Expr, i: usize, g: &Q, grads: &mut [Tensor]) {
    if let Expr::Var(k) = e {
        if !g.is_zero() {
            let t = &mut grads[*k];
            let at = if t.data.len() == 1 { 0 } else { i };
            t.data[at] = t.data[at].add(g);
        }
    }
}

/// `eval` that borrows inputs instead of copying them: a variable is its
/// input, and only computed nodes allocate.
pub(crate) fn ev<'a, T: Borrow<Tensor>>(
    e: &Expr,
    xs: &'a [T],
    ctx: &mut Ctx,
) -> Result<Cow<'a, Tensor>, EvalError> {
    if let Expr::Var(i) = e {
        return xs
            .get(*i)
            .map(|x| Cow::Borrowed(x.borrow()))
            .ok_or_else(|| EvalError::Shape(format!("input {i} missing")));
    }
    Ok(Cow::Owned(match e {
        Expr::Var(_) => unreachable!("handled above"),
        Expr::Const(q) => Tensor::scalar(q.clone()),
        Expr::Neg(a) => ev(a, xs, ctx)?.map(Q::neg),
        Expr::Add(a, b) => binary(&*ev(a, xs, ctx)?, &*ev(b, xs, ctx)?, |x, y| Ok(x.add(y)))?,
        Expr::Sub(a, b) => binary(&*ev(a, xs, ctx)?, &*ev(b, xs, ctx)?, |x, y| Ok(x.sub(y)))?,
        Expr::Mul(a, b) => binary(&*ev(a, xs, ctx)?, &*ev(b, xs, ctx)?, |x, y| Ok(x.mul(y)))?,
        Expr::Div(a, b) => binary(&*ev(a, xs, ctx)?, &*ev(b, xs, ctx)?, |x, y| {
            x.div(y).map_err(|_| EvalError::DivByZero)
        })?,
        Expr::Pow(a, k) => ev(a, xs, ctx)?.map(|x| (0..*k).fold(Q::one(), |acc, _| acc.mul(x))),
        Expr::Sum(a, d) => reduce(&*ev(a, xs, ctx)?, *d, |c| {
            c.iter().fold(Q::zero(), |s, v| s.add(v))
        }),
        Expr::Mean(a, d) => {
            let t = ev(a, xs, ctx)?;
            let k = Q::int(t.shape[*d] as i64);
            reduce(&t, *d, |c| {
                c.iter()
                    .fold(Q::zero(), |s, v| s.add(v))
                    .div(&k)
                    .expect("dim size is positive")
            })
        }
        Expr::Max(a, d) => {
            let t = ev(a, xs, ctx)?;
            let mut tie = false;
            let r = reduce(&t, *d, |c| {
                let m = c.iter().max().expect("nonempty dim");
                tie |= c.iter().filter(|v| v == &m).count() > 1;
                (*m).clone()
            });
            ctx.at_kink |= tie;
            r
        }
        Expr::Einsum(spec, args) => {
            let vals: Vec<Cow<Tensor>> = args
                .iter()
                .map(|a| ev(a, xs, ctx))
                .collect::<Result<_, _>>()?;
            let refs: Vec<&Tensor> = vals.iter().map(|v| &**v).collect();
            let shapes: Vec<&[usize]> = refs.iter().map(|t| t.shape.as_slice()).collect();
            let mut out = Tensor::placeholder();
            einsum_cached_into(spec, &refs, &shapes, &mut out);
            out
        }
        Expr::Reshape(a, s) => Tensor::new(s.clone(), ev(a, xs, ctx)?.into_owned().data),
        Expr::Slice(a, d, s, t) => ev(a, xs, ctx)?.slice(*d, *s, *t),
        Expr::Concat(args, d) => {
            let vals: Vec<Tensor> = args
                .iter()
                .map(|a| ev(a, xs, ctx).map(Cow::into_owned))
                .collect::<Result<_, _>>()?;
            Tensor::concat(&vals, *d)
        }
        Expr::Take(a, d, idx) => {
            let t = ev(a, xs, ctx)?;
            let parts: Vec<Tensor> = idx.iter().map(|&i| t.slice(*d, i, i + 1)).collect();
            Tensor::concat(&parts, *d)
        }
        Expr::UpdateSlice(a, u, start) => {
            let mut t = ev(a, xs, ctx)?.into_owned();
            let uv = ev(u, xs, ctx)?;
            let st = strides(&t.shape);
            for (k, v) in uv.data.iter().enumerate() {
                let i = unravel(k, &uv.shape);
                let off: usize = i
                    .iter()
                    .zip(start)
                    .zip(&st)
                    .map(|((a, b), s)| (a + b) * s)
                    .sum();
                t.data[off] = v.clone();
            }
            t
        }
        Expr::Abs(a) => {
            let t = ev(a, xs, ctx)?;
            ctx.at_kink |= t.data.iter().any(Q::is_zero);
            t.map(Q::abs)
        }
        Expr::Relu(a) => {
            let t = ev(a, xs, ctx)?;
            ctx.at_kink |= t.data.iter().any(Q::is_zero);
            t.map(|v| {
                if v.is_negative() {
                    Q::zero()
                } else {
                    v.clone()
                }
            })
        }
        Expr::Floor(a) => {
            let t = ev(a, xs, ctx)?;
            ctx.at_kink |= t.data.iter().any(Q::is_integer);
            t.map(Q::floor)
        }
        Expr::Cast(a, bits) => {
            let t = ev(a, xs, ctx)?;
            // The kinks of rounding are the midpoints between grid points.
            ctx.at_kink |= t.data.iter().any(|v| is_midpoint(v, *bits));
            t.map(|v| v.round_to_bits(*bits))
        }
        Expr::Round(k, a) => {
            let t = ev(a, xs, ctx)?;
            ctx.at_kink |= t.data.iter().any(|v| match k {
                Rounding::Round => is_midpoint(v, 0),
                _ => v.is_integer(),
            });
            t.map(|v| round_q(*k, v))
        }
        Expr::Cumsum(a, d) => cumsum(&*ev(a, xs, ctx)?, *d, false),
        Expr::Table(t, args) => {
            let vals: Vec<Cow<'_, Tensor>> = args
                .iter()
                .map(|a| ev(a, xs, ctx))
                .collect::<Result<_, _>>()?;
            let refs: Vec<&Tensor> = vals.iter().map(|v| &**v).collect();
            // A point with no exact recorded value is outside the domain.
            t.0.apply(&refs)
                .map_err(EvalError::Shape)?
                .ok_or(EvalError::DivByZero)?
        }
        Expr::Where(m, a, b) => {
            let (va, vb) = (ev(a, xs, ctx)?, ev(b, xs, ctx)?);
            let (sel, shape) = select(m, &va, &vb, xs, ctx)?;
            let at = |t: &Tensor, i: usize| if t.data.len() == 1 { 0 } else { i };
            let data = sel
                .iter()
                .enumerate()
                .map(|(i, &pick)| {
                    if pick {
                        va.data[at(&va, i)].clone()
                    } else {
                        vb.data[at(&vb, i)].clone()
                    }
                })
                .collect();
            Tensor::new(shape, data)
        }
        Expr::Unary(..) | Expr::Dimwise(..) | Expr::CrossEntropy(..) => {
            return Err(EvalError::Shape(format!(
                "{} has no rational value: it is evaluated by the exact transcendental path (SPEC.md §19)",
                transcendental_name(e)
            )))
        }
    }))
}

/// The name of a transcendental node, for messages.
pub fn transcendental_name(e: &Expr) -> String {
    match e {
        Expr::Unary(f, _) => format!("`{}`", f.name()),
        Expr::Dimwise(op, ..) => format!("`{}`", format!("{op:?}").to_lowercase()),
        Expr::CrossEntropy(..) => "`cross_entropy`".into(),
        _ => "this expression".into(),
    }
}

/// Rounding of a rational to an integer.
pub fn round_q(k: Rounding, v: &Q) -> Q {
    match k {
        Rounding::Trunc if v.is_negative() => v.neg().floor().neg(),
        Rounding::Trunc => v.floor(),
        Rounding::Ceil => v.neg().floor().neg(),
        Rounding::Round => v.round_to_bits(0),
    }
}

/// Inclusive prefix sums along `dim`; `reverse`: suffix sums (its adjoint).
fn cumsum(t: &Tensor, dim: usize, reverse: bool) -> Tensor {
    let outer: usize = t.shape[..dim].iter().product();
    let k = t.shape[dim];
    let inner: usize = t.shape[dim + 1..].iter().product();
    let mut out = t.clone();
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = Q::zero();
            for j in 0..k {
                let j = if reverse { k - 1 - j } else { j };
                let at = (o * k + j) * inner + i;
                acc = acc.add(&t.data[at]);
                out.data[at] = acc.clone();
            }
        }
    }
    out
}

/// Which entries `where` takes from its first branch, and the result shape;
/// an input mask meets a kink where it is exactly 0.
fn select<T: Borrow<Tensor>>(
    m: &Mask,
    va: &Tensor,
    vb: &Tensor,
    xs: &[T],
    ctx: &mut Ctx,
) -> Result<(Vec<bool>, Shape), EvalError> {
    let s = elementwise_shape(&va.shape, &vb.shape).map_err(EvalError::Shape)?;
    match m {
        Mask::Input(me) => {
            let vm = ev(me, xs, ctx)?;
            let s = elementwise_shape(&s, &vm.shape).map_err(EvalError::Shape)?;
            ctx.at_kink |= vm.data.iter().any(Q::is_zero);
            let at = |i: usize| if vm.data.len() == 1 { 0 } else { i };
            let sel = (0..numel(&s))
                .map(|i| !vm.data[at(i)].is_negative() && !vm.data[at(i)].is_zero())
                .collect();
            Ok((sel, s))
        }
        Mask::Const(v) => {
            let sel = (0..numel(&s)).map(|i| v[i % v.len()] == 1).collect();
            Ok((sel, s))
        }
    }
}

/// Whether `v` is exactly halfway between two multiples of 2^-bits.
fn is_midpoint(v: &Q, bits: u32) -> bool {
    let scaled = v.mul(&Q::int(1i64 << (bits + 1)));
    scaled.is_integer() && !v.mul(&Q::int(1i64 << bits)).is_integer()
}

/// The local VJP: the cotangent of every input for output cotangent `g`, by
/// reverse-mode differentiation of the expression (SPEC.md §6.3). Used as the
/// default backward of a local op; the oracle never calls it to compute a
/// derivative.
pub fn vjp<T: Borrow<Tensor>>(e: &Expr, xs: &[T], g: &Tensor) -> Result<Vec<Tensor>, EvalError> {
    let mut grads = zeros_like(xs);
    vjp_add(e, xs, g, &mut grads)?;
    Ok(grads)
}

/// `vjp` added into `grads` (one per input, of its shape), which may hold
/// cotangents already: a value used again gets the sum without a tensor of
/// its own (SPEC.md §18.1). On an error `grads` holds partial sums.
pub fn vjp_add<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    g: &Tensor,
    grads: &mut [Tensor],
) -> Result<(), EvalError> {
    let mut div = false;
    if let Some(shape) = pointwise_walk(e, xs, true, &mut div) {
        let n = numel(shape);
        // Only a cotangent of the output's shape, and at least one input
        // (the duals are taken per input).
        if n > 0 && !xs.is_empty() && same_shape(&g.shape, shape) {
            return vjp_pointwise(e, xs, g, n, div, grads);
        }
    }
    backprop(e, xs, g, grads, &mut Ctx::default())
}

fn zeros_like<T: Borrow<Tensor>>(xs: &[T]) -> Vec<Tensor> {
    xs.iter()
        .map(|x| Tensor::zeros(&x.borrow().shape))
        .collect()
}

/// `vjp` by reverse mode over whole tensors: the definition the pointwise
/// path must agree with.
#[cfg(test)]
fn vjp_tree<T: Borrow<Tensor>>(e: &Expr, xs: &[T], g: &Tensor) -> Result<Vec<Tensor>, EvalError> {
    let mut grads = zeros_like(xs);
    backprop(e, xs, g, &mut grads, &mut Ctx::default())?;
    Ok(grads)
}

pub(crate) fn backprop<T: Borrow<Tensor>>(
    e: &Expr,
    xs: &[T],
    g: &Tensor,
    grads: &mut [Tensor],
    ctx: &mut Ctx,
) -> Result<(), EvalError> {
    match e {
        Expr::Var(i) => grads[*i].add_scaled(&Q::one(), g),
        Expr::Const(_) => {}
        Expr::Neg(a) => backprop(a, xs, &g.map(Q::neg), grads, ctx)?,
        Expr::Add(a, b) | Expr::Sub(a, b) => {
            let (sa, sb) = (ev(a, xs, ctx)?.shape.clone(), ev(b, xs, ctx)?.shape.clone());
            backprop(a, xs, &unbroadcast(g, &sa), grads, ctx)?;
            let gb = unbroadcast(g, &sb);
            let gb = if matches!(e, Expr::Sub(..)) {
                gb.map(Q::neg)
            } else {
                gb
            };
            backprop(b, xs, &gb, grads, ctx)?;
        }
        Expr::Mul(a, b) => {
            let (va, vb) = (ev(a, xs, ctx)?, ev(b, xs, ctx)?);
            let ga = binary(g, &vb, |x, y| Ok(x.mul(y)))?;
            let gb = binary(g, &va, |x, y| Ok(x.mul(y)))?;
            backprop(a, xs, &unbroadcast(&ga, &va.shape), grads, ctx)?;
            backprop(b, xs, &unbroadcast(&gb, &vb.shape), grads, ctx)?;
        }
        Expr::Div(a, b) => {
            let (va, vb) = (ev(a, xs, ctx)?, ev(b, xs, ctx)?);
            let dz = |_| EvalError::DivByZero;
            let ga = binary(g, &vb, |x, y| x.div(y).map_err(dz))?;
            // d(a/b)/db = -a/b^2
            let q = binary(&va, &vb, |x, y| x.div(&y.mul(y)).map_err(dz))?;
            let gb = binary(g, &q, |x, y| Ok(x.mul(y).neg()))?;
            backprop(a, xs, &unbroadcast(&ga, &va.shape), grads, ctx)?;
            backprop(b, xs, &unbroadcast(&gb, &vb.shape), grads, ctx)?;
        }
        Expr::Pow(a, k) => {
            // g · k a^(k-1), in buffers kept per thread (taken while in
            // use, so a nested power allocates its own): a program's
            // `matmul(x, w)^2` step runs this at every sample.
            thread_local! {
                static POW: std::cell::Cell<(Tensor, Tensor)> =
                    const { std::cell::Cell::new((Tensor::placeholder(), Tensor::placeholder())) };
            }
            let (mut va, mut gd) = POW.replace((Tensor::placeholder(), Tensor::placeholder()));
            eval_into(a, xs, ctx, &mut va)?;
            assert!(
                same_shape(&g.shape, &va.shape),
                "Tensor::zip: shape mismatch {:?} vs {:?} (interpreter bug)",
                g.shape,
                va.shape
            );
            gd.shape.clone_from(&g.shape);
            gd.data.clear();
            gd.data.extend(g.data.iter().zip(&va.data).map(|(gv, x)| {
                gv.mul(&(1..*k).fold(Q::int(*k as i64), |acc, _| acc.mul(x)))
            }));
            let r = backprop(a, xs, &gd, grads, ctx);
            POW.set((va, gd));
            r?;
        }
        Expr::Sum(a, d) | Expr::Mean(a, d) => {
            let va = ev(a, xs, ctx)?;
            let k = va.shape[*d];
            let mut ga = expand(g, *d, k);
            if matches!(e, Expr::Mean(..)) {
                ga = ga.map(|v| v.div(&Q::int(k as i64)).expect("positive"));
            }
            backprop(a, xs, &ga, grads, ctx)?;
        }
        Expr::Max(a, d) => {
            // Route the cotangent to the first maximal entry.
            let va = ev(a, xs, ctx)?;
            let outer: usize = va.shape[..*d].iter().product();
            let k = va.shape[*d];
            let inner: usize = va.shape[*d + 1..].iter().product();
            let mut ga = Tensor::zeros(&va.shape);
            for o in 0..outer {
                for i in 0..inner {
                    let at = |j: usize| (o * k + j) * inner + i;
                    let best = (0..k).fold(0, |b, j| {
                        if va.data[at(j)] > va.data[at(b)] {
                            j
                        } else {
                            b
                        }
                    });
                    ga.data[at(best)] = g.data[o * inner + i].clone();
                }
            }
            backprop(a, xs, &ga, grads, ctx)?;
        }
        Expr::Einsum(spec, args) if args.len() <= FLAT_OPS && einsum_vjp_flat(spec, args, xs, g, grads, ctx)? => {}
        Expr::Einsum(spec, args) => einsum_vjp_general(spec, args, xs, g, grads, ctx)?,
        Expr::Reshape(a, _) => {
            let sa = ev(a, xs, ctx)?.shape.clone();
            backprop(a, xs, &Tensor::new(sa, g.data.clone()), grads, ctx)?;
        }
        Expr::Slice(a, d, s, t) => {
            let sa = ev(a, xs, ctx)?.shape.clone();
            let mut parts = Vec::new();
            let mut shape = sa.clone();
            if *s > 0 {
                shape[*d] = *s;
                parts.push(Tensor::zeros(&shape));
            }
            parts.push(g.clone());
            if *t < sa[*d] {
                shape[*d] = sa[*d] - t;
                parts.push(Tensor::zeros(&shape));
            }
            backprop(a, xs, &Tensor::concat(&parts, *d), grads, ctx)?;
        }
        Expr::Concat(args, d) => {
            let mut off = 0;
            for a in args {
                let len = ev(a, xs, ctx)?.shape[*d];
                backprop(a, xs, &g.slice(*d, off, off + len), grads, ctx)?;
                off += len;
            }
        }
        Expr::Take(a, d, idx) => {
            let va = ev(a, xs, ctx)?;
            let mut parts: Vec<Tensor> = (0..va.shape[*d])
                .map(|_| {
                    let mut s = va.shape.clone();
                    s[*d] = 1;
                    Tensor::zeros(&s)
                })
                .collect();
            for (j, &i) in idx.iter().enumerate() {
                parts[i] = parts[i].add(&g.slice(*d, j, j + 1));
            }
            backprop(a, xs, &Tensor::concat(&parts, *d), grads, ctx)?;
        }
        Expr::UpdateSlice(a, u, start) => {
            let vu = ev(u, xs, ctx)?;
            let st = strides(&g.shape);
            let mut ga = g.clone();
            let mut gu = Tensor::zeros(&vu.shape);
            for k in 0..vu.numel() {
                let i = unravel(k, &vu.shape);
                let off: usize = i
                    .iter()
                    .zip(start)
                    .zip(&st)
                    .map(|((a, b), s)| (a + b) * s)
                    .sum();
                gu.data[k] = g.data[off].clone();
                ga.data[off] = Q::zero();
            }
            backprop(a, xs, &ga, grads, ctx)?;
            backprop(u, xs, &gu, grads, ctx)?;
        }
        Expr::Abs(a) | Expr::Relu(a) => {
            let va = ev(a, xs, ctx)?;
            let relu = matches!(e, Expr::Relu(..));
            let slope = va.map(|v| {
                if v.is_zero() {
                    Q::zero()
                } else if v.is_negative() {
                    if relu {
                        Q::zero()
                    } else {
                        Q::int(-1)
                    }
                } else {
                    Q::one()
                }
            });
            backprop(a, xs, &g.zip(&slope, Q::mul), grads, ctx)?;
        }
        // Piecewise constant: the derivative is zero away from the kinks.
        Expr::Floor(_) | Expr::Cast(..) | Expr::Round(..) => {}
        Expr::Cumsum(a, d) => backprop(a, xs, &cumsum(g, *d, true), grads, ctx)?,
        Expr::Table(t, _) => {
            return Err(EvalError::Shape(format!(
                "{}: a recorded kernel has no derivative",
                t.0.name
            )))
        }
        Expr::Where(m, a, b) => {
            let (va, vb) = (ev(a, xs, ctx)?, ev(b, xs, ctx)?);
            let (sel, _) = select(m, &va, &vb, xs, ctx)?;
            let pick = |first: bool| {
                let data = g
                    .data
                    .iter()
                    .zip(&sel)
                    .map(|(v, &p)| if p == first { v.clone() } else { Q::zero() })
                    .collect();
                Tensor::new(g.shape.clone(), data)
            };
            backprop(a, xs, &unbroadcast(&pick(true), &va.shape), grads, ctx)?;
            backprop(b, xs, &unbroadcast(&pick(false), &vb.shape), grads, ctx)?;
        }
        Expr::Unary(..) | Expr::Dimwise(..) | Expr::CrossEntropy(..) => {
            return Err(EvalError::Shape(format!(
                "{} has no rational VJP: it is differentiated by the exact transcendental path (SPEC.md §19)",
                transcendental_name(e)
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse;

    fn t(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), v.iter().map(|&x| Q::int(x)).collect())
    }

    #[test]
    fn matmul_and_its_vjp() {
        let f = parse("matmul(a, b)").unwrap();
        let a = t(&[1, 2], &[1, 2]);
        let b = t(&[2, 1], &[3, 4]);
        let y = eval(&f.expr, &[a.clone(), b.clone()], &mut Ctx::default()).unwrap();
        assert_eq!(y, t(&[1, 1], &[11]));
        let gs = vjp(&f.expr, &[a, b], &t(&[1, 1], &[1])).unwrap();
        assert_eq!(gs[0], t(&[1, 2], &[3, 4]));
        assert_eq!(gs[1], t(&[2, 1], &[1, 2]));
    }

    /// An einsum of inputs is contracted straight into `eval_into`'s
    /// buffer, and a power's VJP works in kept buffers: both against
    /// independent forms, a product of the same einsum written out (the
    /// product rule's arm) and `eval`, over a buffer that held another
    /// result. The twin: a cube's VJP is not the square's.
    #[test]
    fn an_einsum_and_its_power_in_kept_buffers() {
        let a = t(&[2, 3], &[1, -2, 3, 0, 5, -1]);
        let b = t(&[3, 2], &[2, 1, -1, 4, 0, 3]);
        let xs = [a, b];
        let g = t(&[2, 2], &[1, -3, 2, 5]);
        let mut out = t(&[5], &[9, 9, 9, 9, 9]);
        for src in ["matmul(a, b)", "einsum(\"ij,jk->ik\", a, b)"] {
            let e = parse(src).unwrap().expr;
            eval_into(&e, &xs, &mut Ctx::default(), &mut out).unwrap();
            assert_eq!(out, eval(&e, &xs, &mut Ctx::default()).unwrap(), "{src}");
        }
        let vjp_of = |src: &str| vjp(&parse(src).unwrap().expr, &xs, &g).unwrap();
        for _ in 0..2 {
            assert_eq!(
                vjp_of("matmul(a, b)^2"),
                vjp_of("matmul(a, b) * matmul(a, b)")
            );
            assert_eq!(
                vjp_of("matmul(a, b)^3"),
                vjp_of("matmul(a, b) * matmul(a, b) * matmul(a, b)")
            );
        }
        assert_ne!(
            vjp_of("matmul(a, b)^3"),
            vjp_of("matmul(a, b) * matmul(a, b)")
        );
    }

    #[test]
    fn kinks_are_detected() {
        let f = parse("relu(x)").unwrap();
        let mut c = Ctx::default();
        eval(&f.expr, &[t(&[], &[0])], &mut c).unwrap();
        assert!(c.at_kink);
        let f = parse("cast(x, 1)").unwrap();
        let mut c = Ctx::default();
        eval(&f.expr, &[Tensor::scalar(Q::frac(1, 4))], &mut c).unwrap();
        assert!(c.at_kink);
        let mut c = Ctx::default();
        eval(&f.expr, &[Tensor::scalar(Q::frac(1, 2))], &mut c).unwrap();
        assert!(!c.at_kink);
    }
    /// The pointwise path against the tree definition (`ev`, `backprop`):
    /// values, kinks, divisions by zero and VJPs on scalars, vectors and a
    /// broadcast scalar, over a small grid with zeros and fractions.
    /// The walk's shape rule and division flag, on leaf pairs (answered
    /// inline) and deeper nodes alike: mismatched shapes are not
    /// pointwise, a scalar goes with any shape, and only a quotient sets
    /// the flag.
    #[test]
    fn pointwise_walk_shapes_and_division() {
        let walk = |src: &str, xs: &[Tensor]| {
            let mut div = false;
            let s = pointwise_walk(&parse(src).unwrap().expr, xs, true, &mut div);
            (s.map(<[usize]>::to_vec), div)
        };
        let (v2, v3, s) = (t(&[2], &[1, 2]), t(&[3], &[1, 2, 3]), t(&[], &[5]));
        let m21 = Tensor::new(vec![2, 1], vec![Q::one(), Q::one()]);
        for src in ["x / y", "(x + 0) / (y * 1)"] {
            assert_eq!(walk(src, &[v2.clone(), v3.clone()]), (None, true), "{src}");
            assert_eq!(walk(src, &[v2.clone(), m21.clone()]), (None, true), "{src}");
            assert_eq!(
                walk(src, &[v2.clone(), s.clone()]),
                (Some(vec![2]), true),
                "{src}"
            );
            assert_eq!(
                walk(src, &[s.clone(), v3.clone()]),
                (Some(vec![3]), true),
                "{src}"
            );
        }
        for src in ["x * y", "(x + 0) - (y * 1)"] {
            assert_eq!(
                walk(src, &[v2.clone(), v2.clone()]),
                (Some(vec![2]), false),
                "{src}"
            );
            assert_eq!(walk(src, &[v2.clone(), v3.clone()]), (None, false), "{src}");
        }
        // A unary node of a leaf, answered inline, and the same node one
        // level deeper, answered by `pointwise_node`: the leaf's shape, a
        // scalar constant's, no division.
        for src in [
            "relu(x)",
            "-x",
            "abs(x)",
            "x ^ 2",
            "relu(x + 0)",
            "-(x * 1)",
        ] {
            for v in [&v2, &v3, &s] {
                let want = Some(v.shape.clone());
                assert_eq!(walk(src, std::slice::from_ref(v)), (want, false), "{src}");
            }
        }
        assert_eq!(
            walk("relu(2)", std::slice::from_ref(&v2)),
            (Some(vec![]), false)
        );
        assert_eq!(
            walk("relu(x / 2)", std::slice::from_ref(&v3)),
            (Some(vec![3]), true)
        );
        // A variable past the inputs is not pointwise.
        assert_eq!(walk("x / y", std::slice::from_ref(&v2)).0, None);
        let relu_of_second = Expr::Relu(Box::new(Expr::Var(1)));
        assert_eq!(
            pointwise_walk(&relu_of_second, std::slice::from_ref(&v2), true, &mut false),
            None
        );
    }

    #[test]
    fn pointwise_path_agrees_with_the_tree() {
        let exprs = [
            "x * y",
            "x + y",
            "x / y",
            "x - y",
            "2 / y",
            "x * x",
            "relu(x)",
            "abs(y)",
            "-x",
            "x / (y + 1)",
            "-(x * x) - y / 2 + 3",
            "abs(x - y) * x",
            "(x + y) ^ 3",
            "relu(x * y - 1) / (x - 2)",
            "floor(x / 2) + y",
            "cast(x, 1) * y",
        ];
        let grid = [Q::zero(), Q::one(), Q::int(-2), Q::frac(1, 2), Q::int(2)];
        let shapes: [(&[usize], &[usize]); 3] = [(&[], &[]), (&[2], &[2]), (&[2], &[])];
        let (mut compared, mut undefined, mut missed) = (0, 0, 0);
        for src in exprs {
            let f = parse(src).unwrap();
            for (sx, sy) in shapes {
                let n = numel(sx).max(numel(sy));
                for a in &grid {
                    for b in &grid {
                        let mk = |s: &[usize], v: &Q, w: &Q| {
                            let data = (0..numel(s))
                                .map(|k| if k == 0 { v.clone() } else { w.clone() })
                                .collect();
                            Tensor::new(s.to_vec(), data)
                        };
                        let xs = [mk(sx, a, b), mk(sy, b, a)];
                        assert!(pointwise_shape(&f.expr, &xs, false).is_some(), "{src}");
                        let (mut c1, mut c2) = (Ctx::default(), Ctx::default());
                        let fast = eval(&f.expr, &xs, &mut c1);
                        let tree = ev(&f.expr, &xs, &mut c2).map(Cow::into_owned);
                        assert_eq!(fast, tree, "{src} at {a}, {b}");
                        let mut into = t(&[3], &[7, 8, 9]);
                        let mut c3 = Ctx::default();
                        let r = eval_into(&f.expr, &xs, &mut c3, &mut into);
                        if let Ok(y) = &tree {
                            assert_eq!((r, &into), (Ok(()), y), "{src} at {a}, {b}");
                            assert_eq!(c3.at_kink, c2.at_kink, "{src} at {a}, {b}");
                            // Entry by entry, as the entrywise samples read it.
                            let mut c4 = Ctx::default();
                            for (i, v) in y.data.iter().enumerate() {
                                let at = eval_at(&f.expr, &xs, i, &mut c4);
                                assert_eq!(at.as_ref(), Ok(v), "{src} at {a}, {b}");
                            }
                            assert_eq!(c4.at_kink, c2.at_kink, "{src} at {a}, {b}");
                        }
                        // The VJP's domain probe at every entry, in the
                        // domain or not.
                        if pointwise_shape(&f.expr, &xs, true).is_some() {
                            for i in 0..n {
                                let probe = defined_at(&f.expr, &xs, i).is_ok();
                                let value = at_point(&f.expr, &xs, i, &mut Ctx::default());
                                assert_eq!(probe, value.is_ok(), "{src} at {a}, {b}, entry {i}");
                                undefined += usize::from(!probe);
                            }
                        }
                        // The kink flag means something only with a value.
                        let Ok(y) = tree else { continue };
                        assert_eq!(c1.at_kink, c2.at_kink, "{src} at {a}, {b}");
                        if pointwise_shape(&f.expr, &xs, true).is_none() {
                            continue;
                        }
                        // Cotangents with and without zero entries.
                        for off in [1, 0] {
                            let g = Tensor::new(
                                y.shape.clone(),
                                (0..n).map(|k| Q::int((k as i64 + off) % 3)).collect(),
                            );
                            assert_eq!(
                                vjp(&f.expr, &xs, &g),
                                vjp_tree(&f.expr, &xs, &g),
                                "{src} at {a}, {b}, g {g}"
                            );
                            compared += 1;
                            // Where the forward is defined, the VJP at the
                            // cotangent's nonzero entries alone is the
                            // whole VJP (`vjp_add_at`).
                            let nz: Vec<usize> = (0..n).filter(|&k| !g.data[k].is_zero()).collect();
                            let mut whole = zeros_like(&xs);
                            let mut at = zeros_like(&xs);
                            let w = vjp_add(&f.expr, &xs, &g, &mut whole);
                            let a_ = vjp_add_at(&f.expr, &xs, &g, &nz, &mut at);
                            assert_eq!(a_, Some(w), "{src} at {a}, {b}, g {g}");
                            assert_eq!(at, whole, "{src} at {a}, {b}, g {g}");
                            // The twin: an entry left out of `at` is missed.
                            if let Some((_, fewer)) = nz.split_first() {
                                let mut miss = zeros_like(&xs);
                                vjp_add_at(&f.expr, &xs, &g, fewer, &mut miss);
                                missed += usize::from(miss != whole);
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 300, "{compared}");
        assert!(missed > 100, "{missed}");
        // The probe met quotients with zero denominators.
        assert!(undefined > 20, "{undefined}");
        // The twin: the comparison sees a wrong derivative (d/dx of x*y is
        // not that of x*x).
        let xs = [t(&[], &[2]), t(&[], &[3])];
        let g = t(&[], &[1]);
        assert_ne!(
            vjp(&parse("x * y").unwrap().expr, &xs, &g),
            vjp_tree(&parse("x * x").unwrap().expr, &xs, &g)
        );
        // A division by zero in the VJP is found where the tree finds it.
        let xs = [t(&[2], &[1, 1]), t(&[2], &[1, 0])];
        let g = t(&[2], &[1, 0]);
        let f = parse("x / y").unwrap();
        assert_eq!(vjp(&f.expr, &xs, &g), Err(EvalError::DivByZero));
        assert_eq!(vjp_tree(&f.expr, &xs, &g), Err(EvalError::DivByZero));
    }
}
