//! Shape and degree inference, exact evaluation and the local VJP of
//! expressions (SPEC.md §6.1-§6.3). One function per judgement, one arm per op.

use crate::expr::{DimOp, Einsum, Expr, Mask, Rounding};
use spmd_semantics::tensor::{numel, same_shape, strides, unravel};
use spmd_semantics::{Shape, Tensor, Q};
use std::borrow::{Borrow, Cow};
use std::cell::RefCell;
use std::rc::Rc;

/// Why an evaluation has no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// Outside the domain of the function (SPEC.md §5.4): not a pass, not a failure.
    DivByZero,
    /// Shapes that inference should have rejected: an interpreter bug or an
    /// input of the wrong shape.
    Shape(String),
}

/// Degree bounds of a local function, per input (SPEC.md §5.2). Along a
/// direction that moves only input `i`, the function of the step `h` is a
/// ratio of polynomials of degrees at most `num[i]` and `den[i]`. `piecewise`:
/// this holds only between kinks (abs, relu, max, floor, cast). `total`:
/// for a polynomial, a bound on its total degree in all inputs' scalars
/// together (a variable 1, a sum the maximum, a product the sum); it means
/// nothing for a ratio, a kinked or a transcendental function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Degree {
    pub num: Vec<u32>,
    pub den: Vec<u32>,
    pub piecewise: bool,
    pub total: u32,
}

impl Degree {
    fn constant(n: usize) -> Degree {
        Degree {
            num: vec![0; n],
            den: vec![0; n],
            piecewise: false,
            total: 0,
        }
    }
    /// A polynomial (no division by a non-constant) with no kinks: the
    /// polynomial-grid argument of SPEC.md §8.3 applies.
    pub fn is_polynomial(&self) -> bool {
        !self.piecewise && self.den.iter().all(|&d| d == 0)
    }
    fn zip(
        a: &Degree,
        b: &Degree,
        total: u32,
        f: impl Fn(u32, u32, u32, u32) -> (u32, u32),
    ) -> Degree {
        let (num, den) = (0..a.num.len())
            .map(|i| f(a.num[i], a.den[i], b.num[i], b.den[i]))
            .unzip();
        Degree {
            num,
            den,
            piecewise: a.piecewise || b.piecewise,
            total,
        }
    }
    // Degrees saturate rather than wrap: a bound that overflowed would
    // read as small and let a huge power past the degree refusal.
    /// p1/q1 ± p2/q2 = (p1 q2 ± p2 q1) / (q1 q2).
    fn plus(a: &Degree, b: &Degree) -> Degree {
        Degree::zip(a, b, a.total.max(b.total), |n1, d1, n2, d2| {
            (
                n1.saturating_add(d2).max(n2.saturating_add(d1)),
                d1.saturating_add(d2),
            )
        })
    }
    fn times(a: &Degree, b: &Degree) -> Degree {
        Degree::zip(a, b, a.total.saturating_add(b.total), |n1, d1, n2, d2| {
            (n1.saturating_add(n2), d1.saturating_add(d2))
        })
    }
    fn over(a: &Degree, b: &Degree) -> Degree {
        Degree::zip(a, b, a.total.saturating_add(b.total), |n1, d1, n2, d2| {
            (n1.saturating_add(d2), d1.saturating_add(n2))
        })
    }
    /// A sum of `k` terms of this degree.
    fn summed(&self, k: usize) -> Degree {
        let k = u32::try_from(k.max(1)).unwrap_or(u32::MAX);
        let (num, den) = self
            .num
            .iter()
            .zip(&self.den)
            .map(|(&n, &d)| {
                if d == 0 {
                    (n, 0)
                } else {
                    (
                        n.saturating_add((k - 1).saturating_mul(d)),
                        k.saturating_mul(d),
                    )
                }
            })
            .unzip();
        Degree {
            num,
            den,
            piecewise: self.piecewise,
            total: self.total,
        }
    }
    /// The marker degree of a transcendental node: (1, 1) in every input it
    /// depends on, so that it is never polynomial (SPEC.md §19.4).
    fn transcendental(&self) -> Degree {
        let dep: Vec<bool> = self
            .num
            .iter()
            .zip(&self.den)
            .map(|(n, d)| n + d > 0)
            .collect();
        Degree {
            num: dep.iter().map(|&b| u32::from(b)).collect(),
            den: dep.iter().map(|&b| u32::from(b)).collect(),
            piecewise: self.piecewise,
            total: self.total,
        }
    }
    fn kinked(mut self) -> Degree {
        self.piecewise = true;
        self
    }
    fn merge(ds: &[Degree]) -> Degree {
        let mut out = ds[0].clone();
        for d in &ds[1..] {
            let total = out.total.max(d.total);
            out = Degree::zip(&out, d, total, |n1, d1, n2, d2| (n1.max(n2), d1.max(d2)));
        }
        out
    }
}

fn elementwise_shape(a: &[usize], b: &[usize]) -> Result<Shape, String> {
    if a == b || b.is_empty() {
        Ok(a.to_vec())
    } else if a.is_empty() {
        Ok(b.to_vec())
    } else {
        Err(format!(
            "shapes {a:?} and {b:?} do not match (only equal shapes or a scalar broadcast)"
        ))
    }
}

fn check_dim(shape: &[usize], d: usize, what: &str) -> Result<(), String> {
    if d < shape.len() {
        Ok(())
    } else {
        Err(format!("{what}: dim {d} out of range for shape {shape:?}"))
    }
}

/// Label sizes of an einsum, checking operand ranks and agreement.
fn einsum_sizes(s: &Einsum, shapes: &[Shape]) -> Result<Vec<(char, usize)>, String> {
    let mut sizes: Vec<(char, usize)> = Vec::new();
    for (labels, shape) in s.inputs.iter().zip(shapes) {
        if labels.len() != shape.len() {
            return Err(format!(
                "einsum `{s}`: operand with labels `{}` has shape {shape:?}",
                labels.iter().collect::<String>()
            ));
        }
        for (c, &n) in labels.iter().zip(shape) {
            match sizes.iter().find(|(l, _)| l == c) {
                Some((_, m)) if *m != n => {
                    return Err(format!("einsum `{s}`: label `{c}` has sizes {m} and {n}"))
                }
                Some(_) => {}
                None => sizes.push((*c, n)),
            }
        }
    }
    Ok(sizes)
}

/// Output shape and degree bounds of `e` on inputs of the given shapes.
/// SPEC.md §6.2.
pub fn infer(e: &Expr, shapes: &[Shape]) -> Result<(Shape, Degree), String> {
    let n = shapes.len();
    Ok(match e {
        Expr::Var(i) => {
            let s = shapes
                .get(*i)
                .ok_or_else(|| format!("input {i} is missing"))?;
            let mut d = Degree::constant(n);
            d.num[*i] = 1;
            d.total = 1;
            (s.clone(), d)
        }
        Expr::Const(_) => (vec![], Degree::constant(n)),
        Expr::Neg(a) => infer(a, shapes)?,
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) => {
            let (sa, da) = infer(a, shapes)?;
            let (sb, db) = infer(b, shapes)?;
            let s = elementwise_shape(&sa, &sb)?;
            let d = match e {
                Expr::Mul(..) => Degree::times(&da, &db),
                Expr::Div(..) => Degree::over(&da, &db),
                _ => Degree::plus(&da, &db),
            };
            (s, d)
        }
        Expr::Pow(a, k) => {
            let (s, d) = infer(a, shapes)?;
            let num = d.num.iter().map(|x| x.saturating_mul(*k)).collect();
            let den = d.den.iter().map(|x| x.saturating_mul(*k)).collect();
            (
                s,
                Degree {
                    num,
                    den,
                    piecewise: d.piecewise,
                    total: d.total.saturating_mul(*k),
                },
            )
        }
        Expr::Sum(a, dim) | Expr::Mean(a, dim) | Expr::Max(a, dim) => {
            let (mut s, d) = infer(a, shapes)?;
            check_dim(&s, *dim, "sum/mean/max")?;
            let k = s.remove(*dim);
            let d = if matches!(e, Expr::Max(..)) {
                d.kinked()
            } else {
                d.summed(k)
            };
            (s, d)
        }
        Expr::Einsum(spec, args) => {
            let inferred: Vec<(Shape, Degree)> = args
                .iter()
                .map(|a| infer(a, shapes))
                .collect::<Result<_, _>>()?;
            let arg_shapes: Vec<Shape> = inferred.iter().map(|x| x.0.clone()).collect();
            let sizes = einsum_sizes(spec, &arg_shapes)?;
            let out: Shape = spec
                .output
                .iter()
                .map(|c| sizes.iter().find(|(l, _)| l == c).expect("checked").1)
                .collect();
            let contracted: usize = sizes
                .iter()
                .filter(|(l, _)| !spec.output.contains(l))
                .map(|(_, s)| *s)
                .product();
            let mut d = inferred[0].1.clone();
            for (_, di) in &inferred[1..] {
                d = Degree::times(&d, di);
            }
            (out, d.summed(contracted))
        }
        Expr::Reshape(a, shape) => {
            let (s, d) = infer(a, shapes)?;
            // Checked: written sizes whose product wraps to the input's
            // element count (4 x (2^62 + 1)) must not pass for it.
            let product = shape.iter().try_fold(1usize, |n, &k| n.checked_mul(k));
            if product != Some(numel(&s)) {
                return Err(format!(
                    "reshape of {s:?} to {shape:?} changes the number of elements"
                ));
            }
            (shape.clone(), d)
        }
        Expr::Slice(a, dim, start, end) => {
            let (mut s, d) = infer(a, shapes)?;
            check_dim(&s, *dim, "slice")?;
            if start >= end || *end > s[*dim] {
                return Err(format!(
                    "slice {start}..{end} out of range for dim {dim} of size {}",
                    s[*dim]
                ));
            }
            s[*dim] = end - start;
            (s, d)
        }
        Expr::Concat(args, dim) => {
            let inferred: Vec<(Shape, Degree)> = args
                .iter()
                .map(|a| infer(a, shapes))
                .collect::<Result<_, _>>()?;
            let mut s = inferred[0].0.clone();
            check_dim(&s, *dim, "concat")?;
            for (si, _) in &inferred[1..] {
                let mut a = si.clone();
                let mut b = s.clone();
                if a.len() != b.len() {
                    return Err(format!("concat of ranks {} and {}", b.len(), a.len()));
                }
                a[*dim] = 0;
                b[*dim] = 0;
                if a != b {
                    return Err(format!("concat along {dim} of shapes {:?} and {:?}", s, si));
                }
                s[*dim] += si[*dim];
            }
            let ds: Vec<Degree> = inferred.into_iter().map(|x| x.1).collect();
            (s, Degree::merge(&ds))
        }
        Expr::Take(a, dim, idx) => {
            let (mut s, d) = infer(a, shapes)?;
            check_dim(&s, *dim, "take")?;
            if let Some(bad) = idx.iter().find(|&&i| i >= s[*dim]) {
                return Err(format!(
                    "take index {bad} out of range for dim {dim} of size {}",
                    s[*dim]
                ));
            }
            s[*dim] = idx.len();
            (s, d)
        }
        Expr::UpdateSlice(a, u, start) => {
            let (s, da) = infer(a, shapes)?;
            let (su, du) = infer(u, shapes)?;
            if su.len() != s.len() || start.len() != s.len() {
                return Err(format!(
                    "dynamic_update_slice: ranks of {s:?}, {su:?} and start {start:?} differ"
                ));
            }
            for k in 0..s.len() {
                if start[k] + su[k] > s[k] {
                    return Err(format!(
                        "dynamic_update_slice: update {su:?} at {start:?} does not fit in {s:?}"
                    ));
                }
            }
            (s, Degree::merge(&[da, du]))
        }
        Expr::Abs(a) | Expr::Relu(a) => {
            let (s, d) = infer(a, shapes)?;
            (s, d.kinked())
        }
        Expr::Floor(a) | Expr::Cast(a, _) | Expr::Round(_, a) => {
            let (s, _) = infer(a, shapes)?;
            (s, Degree::constant(n).kinked())
        }
        Expr::Unary(_, a) => {
            let (s, d) = infer(a, shapes)?;
            (s, d.transcendental())
        }
        Expr::Table(t, args) => {
            if args.len() != t.0.arity || args.is_empty() {
                return Err(format!(
                    "{}: {} arguments for a kernel of {}",
                    t.0.name,
                    args.len(),
                    t.0.arity
                ));
            }
            let inferred: Vec<(Shape, Degree)> = args
                .iter()
                .map(|a| infer(a, shapes))
                .collect::<Result<_, _>>()?;
            let ds: Vec<Degree> = inferred.iter().map(|x| x.1.clone()).collect();
            // A kernel recorded call by call: the output shape it gave.
            let ins: Vec<Shape> = inferred.iter().map(|x| x.0.clone()).collect();
            if let Some(out) = t.0.shape(&ins) {
                return Ok((out?, Degree::merge(&ds).transcendental().kinked()));
            }
            // The shapes the library was asked about: all alike.
            let s = inferred[0].0.clone();
            if let Some((bad, _)) = inferred.iter().find(|(x, _)| *x != s) {
                return Err(format!(
                    "{} is elementwise: shapes {s:?} and {bad:?}",
                    t.0.name
                ));
            }
            // Known only on recorded points: never a polynomial.
            (s, Degree::merge(&ds).transcendental().kinked())
        }
        Expr::Dimwise(op, a, dim, _) => {
            let (mut s, d) = infer(a, shapes)?;
            check_dim(&s, *dim, "softmax/logsumexp/layernorm/rmsnorm")?;
            if *op == DimOp::LogSumExp {
                s.remove(*dim);
            }
            (s, d.transcendental())
        }
        Expr::CrossEntropy(a, t, dim) => {
            let (sa, da) = infer(a, shapes)?;
            let (st, dt) = infer(t, shapes)?;
            if sa != st {
                return Err(format!(
                    "cross_entropy: logits {sa:?} and targets {st:?} differ in shape"
                ));
            }
            let mut s = sa;
            check_dim(&s, *dim, "cross_entropy")?;
            s.remove(*dim);
            (s, Degree::merge(&[da, dt]).transcendental())
        }
        Expr::Cumsum(a, dim) => {
            let (s, d) = infer(a, shapes)?;
            check_dim(&s, *dim, "cumsum")?;
            (s, d)
        }
        Expr::Where(m, a, b) => {
            let (sa, da) = infer(a, shapes)?;
            let (sb, db) = infer(b, shapes)?;
            let s = elementwise_shape(&sa, &sb)?;
            match m {
                Mask::Input(me) => {
                    let (sm, _) = infer(me, shapes)?;
                    let s = elementwise_shape(&s, &sm)?;
                    (s, Degree::merge(&[da, db]).kinked())
                }
                Mask::Const(v) => {
                    if s.last() != Some(&v.len()) {
                        return Err(format!(
                            "where: a constant mask of {} entries needs a last dim of that size, got shape {s:?}",
                            v.len()
                        ));
                    }
                    (s, Degree::merge(&[da, db]))
                }
            }
        }
    })
}

/// Visit the tuples of `choices` (one shape per input, the cartesian
/// product in lexicographic order, input 0 most significant) that no
/// subexpression of `e` rejects on its own: a superset of those `infer`
/// accepts, in the same order. Inputs are fixed one at a time; a
/// subexpression is inferred as soon as the last input it reads is fixed
/// (unless its parent is inferred then too), and one that fails prunes
/// every tuple extending the prefix, because `infer` infers every
/// subexpression of `e` and fails with it (SPEC.md §18.9). Each choice
/// made at any position counts against `budget`; `false` when the budget
/// ran out before the search ended.
pub fn visit_viable(
    e: &Expr,
    arity: usize,
    choices: &[Shape],
    budget: u64,
    leaf: &mut dyn FnMut(&[Shape]),
) -> bool {
    if arity == 0 {
        leaf(&[]);
        return true;
    }
    // ready[j]: the subexpressions to infer once input j is fixed.
    let mut ready: Vec<Vec<&Expr>> = vec![Vec::new(); arity];
    let last = checkpoints(e, &mut ready);
    push_ready(&mut ready, e, last);
    let mut all: Vec<Shape> = vec![Vec::new(); arity];
    let mut left = budget;
    viable_from(&ready, choices, 0, &mut all, &mut left, leaf)
}

/// The last input `e` reads; each child that reads an earlier one (or
/// none) is put in `ready` at that input.
fn checkpoints<'a>(e: &'a Expr, ready: &mut Vec<Vec<&'a Expr>>) -> Option<usize> {
    let mut me = match e {
        Expr::Var(i) => Some(*i),
        _ => None,
    };
    let kids: Vec<(&Expr, Option<usize>)> = e
        .children()
        .into_iter()
        .map(|c| (c, checkpoints(c, ready)))
        .collect();
    for (_, l) in &kids {
        me = me.max(*l);
    }
    for (c, l) in kids {
        if l != me {
            push_ready(ready, c, l);
        }
    }
    me
}

fn push_ready<'a>(ready: &mut [Vec<&'a Expr>], e: &'a Expr, last: Option<usize>) {
    // A variable alone is always inferred; a constant has no shape to fail.
    if matches!(e, Expr::Var(_) | Expr::Const(_)) {
        return;
    }
    let j = last.unwrap_or(0).min(ready.len() - 1);
    ready[j].push(e);
}

fn viable_from(
    ready: &[Vec<&Expr>],
    choices: &[Shape],
    j: usize,
    all: &mut Vec<Shape>,
    left: &mut u64,
    leaf: &mut dyn FnMut(&[Shape]),
) -> bool {
    'choice: for c in choices {
        if *left == 0 {
            return false;
        }
        *left -= 1;
        all[j].clone_from(c);
        for sub in &ready[j] {
            if infer(sub, all).is_err() {
                continue 'choice;
            }
        }
        if j + 1 == all.len() {
            leaf(all);
        } else if !viable_from(ready, choices, j + 1, all, left, leaf) {
            return false;
        }
    }
    true
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

/// The loop of an einsum over every label (in the order of `sizes`): each
/// label's size, the output's shape, and the output's and each operand's
/// stride per label (0 where the label is absent).
#[derive(Debug, PartialEq)]
pub struct EinsumPlan {
    pub dims: Vec<usize>,
    pub out_shape: Shape,
    pub out_st: Vec<usize>,
    pub op_st: Vec<Vec<usize>>,
}

/// The plan of `spec` on operands of `shapes`; `sizes` gives every label's
/// size.
pub fn einsum_plan(spec: &Einsum, shapes: &[&[usize]], sizes: &[(char, usize)]) -> EinsumPlan {
    let stride_of = |ls: &[char], shape: &[usize]| -> Vec<usize> {
        let st = strides(shape);
        sizes
            .iter()
            .map(|(c, _)| ls.iter().position(|l| l == c).map(|p| st[p]).unwrap_or(0))
            .collect()
    };
    let out_shape: Shape = spec
        .output
        .iter()
        .map(|c| sizes.iter().find(|x| x.0 == *c).expect("label size").1)
        .collect();
    EinsumPlan {
        dims: sizes.iter().map(|x| x.1).collect(),
        out_st: stride_of(&spec.output, &out_shape),
        op_st: spec
            .inputs
            .iter()
            .zip(shapes)
            .map(|(ls, sh)| stride_of(ls, sh))
            .collect(),
        out_shape,
    }
}

/// General einsum; `sizes` gives every label's size (labels of the output
/// that occur in no operand broadcast).
pub fn einsum(spec: &Einsum, ops: &[&Tensor], sizes: &[(char, usize)]) -> Tensor {
    let shapes: Vec<&[usize]> = ops.iter().map(|t| t.shape.as_slice()).collect();
    let plan = einsum_plan(spec, &shapes, sizes);
    let mut out = Tensor::zeros(&[]);
    einsum_planned_into(&plan, ops, &mut out);
    out
}

fn all_sizes(spec: &Einsum, ops: &[&Tensor]) -> Vec<(char, usize)> {
    let shapes: Vec<Shape> = ops.iter().map(|t| t.shape.clone()).collect();
    einsum_sizes(spec, &shapes).expect("einsum shapes were inferred")
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
    *out = ev(e, xs, ctx)?.into_owned();
    Ok(())
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
        if let Some((op, a, b)) = bin {
            rev_binary(op, a, b, xs, i, gi, grads)?;
        } else if let Some((op, a)) = un {
            add_share(a, i, &op.share(leaf(a, xs).at(i), gi), grads);
        } else {
            rev_at(e, xs, i, gi, grads)?;
        }
    }
    Ok(())
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
fn ev<'a, T: Borrow<Tensor>>(
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
            let plan = einsum_plan_cached(spec, &shapes).expect("einsum shapes were inferred");
            let mut out = Tensor::placeholder();
            einsum_planned_into(&plan, &refs, &mut out);
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

fn backprop<T: Borrow<Tensor>>(
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
            let va = ev(a, xs, ctx)?;
            let d = va.map(|x| (1..*k).fold(Q::int(*k as i64), |acc, _| acc.mul(x)));
            backprop(a, xs, &g.zip(&d, Q::mul), grads, ctx)?;
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

/// The einsum of operand `k`'s VJP: the cotangent (on the output's labels)
/// contracted with every other operand, in order, onto `k`'s labels.
pub fn operand_vjp_spec(spec: &Einsum, k: usize) -> Einsum {
    let mut inputs = vec![spec.output.clone()];
    inputs.extend(
        (0..spec.inputs.len())
            .filter(|&j| j != k)
            .map(|j| spec.inputs[j].clone()),
    );
    Einsum {
        inputs,
        output: spec.inputs[k].clone(),
    }
}

/// `backprop` of an einsum by the definition: per operand, the einsum that
/// contracts `g` with the other operands onto its labels, planned anew.
fn einsum_vjp_general<T: Borrow<Tensor>>(
    spec: &Einsum,
    args: &[Expr],
    xs: &[T],
    g: &Tensor,
    grads: &mut [Tensor],
    ctx: &mut Ctx,
) -> Result<(), EvalError> {
    let vals: Vec<Cow<Tensor>> = args
        .iter()
        .map(|a| ev(a, xs, ctx))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&Tensor> = vals.iter().map(|v| &**v).collect();
    let sizes = all_sizes(spec, &refs);
    for (k, arg) in args.iter().enumerate() {
        let mut ops = vec![g];
        ops.extend(
            vals.iter()
                .enumerate()
                .filter(|&(j, _)| j != k)
                .map(|(_, v)| &**v),
        );
        let gk = einsum(&operand_vjp_spec(spec, k), &ops, &sizes);
        backprop(arg, xs, &gk, grads, ctx)?;
    }
    Ok(())
}

/// `backprop` of an einsum of at most `FLAT_OPS` operands by one
/// `FlatPlan` for all of them, allocating nothing for an operand that is a
/// variable: its cotangent is added straight into its gradient (the same
/// entries `add_scaled` would add). `false`, with nothing done but the
/// operands' evaluation, where the plan does not fit; the caller then takes
/// the general path.
fn einsum_vjp_flat<T: Borrow<Tensor>>(
    spec: &Einsum,
    args: &[Expr],
    xs: &[T],
    g: &Tensor,
    grads: &mut [Tensor],
    ctx: &mut Ctx,
) -> Result<bool, EvalError> {
    let mut vals: [Option<Cow<Tensor>>; FLAT_OPS] = Default::default();
    for (v, a) in vals.iter_mut().zip(args) {
        *v = Some(ev(a, xs, ctx)?);
    }
    let mut refs: [&Tensor; FLAT_OPS] = [g; FLAT_OPS];
    let mut shapes: [&[usize]; FLAT_OPS] = [&[]; FLAT_OPS];
    for ((r, s), v) in refs.iter_mut().zip(&mut shapes).zip(&vals) {
        if let Some(v) = v {
            *r = v;
            *s = &v.shape;
        }
    }
    let (refs, shapes) = (&refs[..args.len()], &shapes[..args.len()]);
    let Some(plan) = FlatPlan::cached(spec, shapes, &g.shape) else {
        return Ok(false);
    };
    for (k, arg) in args.iter().enumerate() {
        match arg {
            Expr::Var(i) if grads.get(*i).is_some_and(|t| t.shape == refs[k].shape) => {
                plan.vjp_into(k, g, refs, &mut grads[*i].data)
            }
            _ => {
                let mut gk = Tensor::zeros(&refs[k].shape);
                plan.vjp_into(k, g, refs, &mut gk.data);
                backprop(arg, xs, &gk, grads, ctx)?;
            }
        }
    }
    Ok(true)
}

/// The plan `einsum` makes for operands of these shapes (the label sizes it
/// finds, then `einsum_plan`), made once for a workspace whose operands
/// keep their shapes (SPEC.md §18.1).
pub fn einsum_plan_for(spec: &Einsum, shapes: &[&[usize]]) -> Result<EinsumPlan, String> {
    let owned: Vec<Shape> = shapes.iter().map(|s| s.to_vec()).collect();
    let sizes = einsum_sizes(spec, &owned)?;
    Ok(einsum_plan(spec, shapes, &sizes))
}

/// `einsum` by a plan made beforehand (`einsum_plan_for` on these operands'
/// shapes), written into `out`, whose buffers are reused: the same
/// products, added in the same order.
pub fn einsum_planned_into(plan: &EinsumPlan, ops: &[&Tensor], out: &mut Tensor) {
    out.shape.clone_from(&plan.out_shape);
    out.data.clear();
    out.data.resize(numel(&plan.out_shape), Q::zero());
    if ops.len() <= FLAT_OPS {
        let mut srcs: [(&[Q], &[usize]); FLAT_OPS] = [(&[], &[]); FLAT_OPS];
        for ((slot, t), st) in srcs.iter_mut().zip(ops).zip(&plan.op_st) {
            *slot = (&t.data, st);
        }
        contract_into(&plan.dims, &srcs[..ops.len()], &mut out.data, &plan.out_st);
    } else {
        let srcs: Vec<(&[Q], &[usize])> = ops
            .iter()
            .zip(&plan.op_st)
            .map(|(t, st)| (t.data.as_slice(), st.as_slice()))
            .collect();
        contract_into(&plan.dims, &srcs, &mut out.data, &plan.out_st);
    }
}

/// The einsum loop over every index of `dims` (the last label fastest):
/// the product of the sources' entries, each source read at the dot of the
/// index with its strides, multiplied in order and stopped at a zero, is
/// added into `dst`'s entry at the dot of the index with `dst_st`.
fn contract_into(dims: &[usize], srcs: &[(&[Q], &[usize])], dst: &mut [Q], dst_st: &[usize]) {
    // The last label runs in a plain loop; the odometer turns the others.
    let Some((&inner, outer)) = dims.split_last() else {
        // No labels: one product into the single entry.
        let mut prod = Q::one();
        for (t, _) in srcs {
            prod = prod.mul(&t[0]);
            if prod.is_zero() {
                return;
            }
        }
        dst[0] = dst[0].add(&prod);
        return;
    };
    let no = outer.len();
    let mut idx = [0usize; 16];
    let mut idx_heap = Vec::new();
    let idx: &mut [usize] = if no <= idx.len() {
        &mut idx[..no]
    } else {
        idx_heap.resize(no, 0);
        &mut idx_heap
    };
    let mut offs = [0usize; 16];
    let mut offs_heap = Vec::new();
    let offs: &mut [usize] = if srcs.len() <= offs.len() {
        &mut offs[..srcs.len()]
    } else {
        offs_heap.resize(srcs.len(), 0);
        &mut offs_heap
    };
    let o_st = dst_st[no];
    let mut o = 0usize;
    for _ in 0..numel(outer) {
        match srcs {
            // Two operands (matmuls and their VJPs): a zero factor skips
            // the product, as the general loop stops at a zero.
            [(a, sa), (b, sb)] => {
                let (a_st, b_st) = (sa[no], sb[no]);
                let (mut ia, mut ib, mut io) = (offs[0], offs[1], o);
                if a_st == 0 || b_st == 0 {
                    // One factor is fixed along the last label (as a
                    // matmul's left operand along the output's last dim):
                    // its zero test is taken once.
                    let (x, ys, mut iy, y_st) = if a_st == 0 {
                        (&a[ia], b, ib, b_st)
                    } else {
                        (&b[ib], a, ia, a_st)
                    };
                    if !x.is_zero() {
                        for _ in 0..inner {
                            let y = &ys[iy];
                            if !y.is_zero() {
                                dst[io].add_mul(x, y);
                            }
                            iy += y_st;
                            io += o_st;
                        }
                    }
                } else {
                    for _ in 0..inner {
                        let (x, y) = (&a[ia], &b[ib]);
                        if !x.is_zero() && !y.is_zero() {
                            dst[io].add_mul(x, y);
                        }
                        ia += a_st;
                        ib += b_st;
                        io += o_st;
                    }
                }
            }
            _ => {
                let mut io = o;
                for j in 0..inner {
                    let mut prod = Q::one();
                    for ((t, st), off) in srcs.iter().zip(offs.iter()) {
                        prod = prod.mul(&t[*off + j * st[no]]);
                        if prod.is_zero() {
                            break;
                        }
                    }
                    if !prod.is_zero() {
                        dst[io] = dst[io].add(&prod);
                    }
                    io += o_st;
                }
            }
        }
        let mut d = no;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for (off, (_, st)) in offs.iter_mut().zip(srcs) {
                *off += st[d];
            }
            o += dst_st[d];
            if idx[d] < outer[d] {
                break;
            }
            for (off, (_, st)) in offs.iter_mut().zip(srcs) {
                *off -= st[d] * outer[d];
            }
            o -= dst_st[d] * outer[d];
            idx[d] = 0;
        }
    }
}

/// The last few einsum plans a thread asked for, by spec, operand shapes
/// and output shape: a program asks for the same einsum's plans at every
/// instance and sample (SPEC.md §18.9). The oldest goes first.
struct PlanCache<P> {
    entries: Vec<(Einsum, Vec<Shape>, Shape, P)>,
}

impl<P: Clone> PlanCache<P> {
    const KEEP: usize = 16;
    const fn new() -> PlanCache<P> {
        PlanCache {
            entries: Vec::new(),
        }
    }
    /// The plan kept for these, or `make`'s, kept.
    fn get(
        &mut self,
        spec: &Einsum,
        shapes: &[&[usize]],
        out: &[usize],
        make: impl FnOnce() -> P,
    ) -> P {
        let hit = self.entries.iter().find(|(sp, sh, o, _)| {
            o[..] == *out
                && sh.len() == shapes.len()
                && sh.iter().zip(shapes).all(|(a, b)| a[..] == **b)
                && sp == spec
        });
        if let Some(e) = hit {
            return e.3.clone();
        }
        let p = make();
        if self.entries.len() >= Self::KEEP {
            self.entries.remove(0);
        }
        self.entries.push((
            spec.clone(),
            shapes.iter().map(|s| s.to_vec()).collect(),
            out.to_vec(),
            p.clone(),
        ));
        p
    }
}

/// `einsum_plan_for`, remembered per thread for the last few specs and
/// operand shapes (`PlanCache`): an einsum evaluated on the tree path, or
/// a program's step denoted at every instance, is planned once. Shared
/// (`Arc`), since a program's sampler, which holds its steps' plans, may
/// move to another thread.
pub fn einsum_plan_cached(
    spec: &Einsum,
    shapes: &[&[usize]],
) -> Result<std::sync::Arc<EinsumPlan>, String> {
    thread_local! {
        static PLANS: RefCell<PlanCache<Result<std::sync::Arc<EinsumPlan>, String>>> =
            const { RefCell::new(PlanCache::new()) };
    }
    PLANS.with(|c| {
        c.borrow_mut().get(spec, shapes, &[], || {
            einsum_plan_for(spec, shapes).map(std::sync::Arc::new)
        })
    })
}

/// Labels and operands an einsum's VJP plans without the heap
/// (`FlatPlan`); more take `einsum`'s own path.
const FLAT_LABELS: usize = 16;
const FLAT_OPS: usize = 8;

/// The plan `einsum_plan` makes (with the label sizes `all_sizes` finds),
/// held in fixed arrays: label sizes in order of first occurrence over the
/// operands, and per label the output's and each operand's stride (that
/// of the label's first position, 0 where it is absent).
#[cfg_attr(test, derive(Debug, PartialEq))]
struct FlatPlan {
    labels: usize,
    dims: [usize; FLAT_LABELS],
    out_st: [usize; FLAT_LABELS],
    op_st: [[usize; FLAT_LABELS]; FLAT_OPS],
}

impl FlatPlan {
    /// `FlatPlan::new`, remembered per thread for the last few specs and
    /// shapes asked: a program's backward asks for the same einsum's plan
    /// at every instance and sample (SPEC.md §18.9).
    fn cached(spec: &Einsum, shapes: &[&[usize]], out: &[usize]) -> Option<Rc<FlatPlan>> {
        thread_local! {
            static PLANS: RefCell<PlanCache<Option<Rc<FlatPlan>>>> =
                const { RefCell::new(PlanCache::new()) };
        }
        PLANS.with(|c| {
            c.borrow_mut().get(spec, shapes, out, || {
                FlatPlan::new(spec, shapes, out).map(Rc::new)
            })
        })
    }

    /// The plan for operands of `shapes` and an output cotangent of shape
    /// `out`; `None` where they do not fit the spec (ranks, label sizes,
    /// the output's shape) or the arrays, so that the caller takes the
    /// general path, which is the definition.
    fn new(spec: &Einsum, shapes: &[&[usize]], out: &[usize]) -> Option<FlatPlan> {
        if shapes.len() > FLAT_OPS || spec.inputs.len() != shapes.len() {
            return None;
        }
        let mut p = FlatPlan {
            labels: 0,
            dims: [0; FLAT_LABELS],
            out_st: [0; FLAT_LABELS],
            op_st: [[0; FLAT_LABELS]; FLAT_OPS],
        };
        let mut names = [' '; FLAT_LABELS];
        for (ls, sh) in spec.inputs.iter().zip(shapes) {
            if ls.len() != sh.len() {
                return None;
            }
            for (c, &n) in ls.iter().zip(*sh) {
                match names[..p.labels].iter().position(|l| l == c) {
                    Some(l) if p.dims[l] != n => return None,
                    Some(_) => {}
                    None if p.labels == FLAT_LABELS => return None,
                    None => {
                        names[p.labels] = *c;
                        p.dims[p.labels] = n;
                        p.labels += 1;
                    }
                }
            }
        }
        let names = &names[..p.labels];
        // Every output label is an operand's, of the cotangent's size.
        if spec.output.len() != out.len() {
            return None;
        }
        for (c, &n) in spec.output.iter().zip(out) {
            match names.iter().position(|l| l == c) {
                Some(l) if p.dims[l] == n => {}
                _ => return None,
            }
        }
        let fill = |st: &mut [usize; FLAT_LABELS], ls: &[char], sh: &[usize]| {
            for (l, c) in names.iter().enumerate() {
                st[l] = match ls.iter().position(|x| x == c) {
                    Some(q) => sh[q + 1..].iter().product(),
                    None => 0,
                };
            }
        };
        fill(&mut p.out_st, &spec.output, out);
        for ((st, ls), sh) in p.op_st.iter_mut().zip(&spec.inputs).zip(shapes) {
            fill(st, ls, sh);
        }
        Some(p)
    }

    /// Add into `dst` (of operand `k`'s shape) the cotangent of operand `k`
    /// for output cotangent `g`: `einsum`'s VJP contraction of `g` with the
    /// other operands onto k's labels, the same products in the same order.
    fn vjp_into(&self, k: usize, g: &Tensor, ops: &[&Tensor], dst: &mut [Q]) {
        let mut srcs: [(&[Q], &[usize]); FLAT_OPS] = [(&[], &[]); FLAT_OPS];
        srcs[0] = (&g.data, &self.out_st[..self.labels]);
        let mut n = 1;
        for (j, t) in ops.iter().enumerate() {
            if j != k {
                srcs[n] = (&t.data, &self.op_st[j][..self.labels]);
                n += 1;
            }
        }
        contract_into(
            &self.dims[..self.labels],
            &srcs[..n],
            dst,
            &self.op_st[k][..self.labels],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse;

    fn t(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), v.iter().map(|&x| Q::int(x)).collect())
    }

    #[test]
    fn degrees_propagate() {
        let f = parse("x * y + 1").unwrap();
        let (_, d) = infer(&f.expr, &[vec![], vec![]]).unwrap();
        assert_eq!(d.num, vec![1, 1]);
        assert!(d.is_polynomial());
        let f = parse("x / (y + 1)").unwrap();
        let (_, d) = infer(&f.expr, &[vec![], vec![]]).unwrap();
        assert_eq!((d.num.clone(), d.den.clone()), (vec![1, 0], vec![0, 1]));
        assert!(!d.is_polynomial());
        let f = parse("x / 2").unwrap();
        assert!(infer(&f.expr, &[vec![]]).unwrap().1.is_polynomial());
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
        let (mut compared, mut undefined) = (0, 0);
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
                        }
                    }
                }
            }
        }
        assert!(compared > 300, "{compared}");
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
    /// The flat einsum VJP (one stack plan for every operand, a variable's
    /// cotangent added in place) against the definition
    /// (`einsum_vjp_general`): contraction, transposition, a full sum, an
    /// outer product, three operands, a repeated variable and a computed
    /// operand, with zeros in the values and the cotangent, into gradients
    /// that already hold a value.
    #[test]
    fn the_flat_einsum_vjp_is_the_definition() {
        let a23 = t(&[2, 3], &[1, -2, 0, 3, 5, -1]);
        let b32 = t(&[3, 2], &[2, 0, 1, -3, 4, 1]);
        let v3 = t(&[3], &[0, 2, -1]);
        let w2 = t(&[2], &[3, -1]);
        type Case<'a> = (&'a str, Vec<&'a Tensor>);
        let cases: [Case; 7] = [
            ("einsum(\"ij,jk->ik\", a, b)", vec![&a23, &b32]),
            ("einsum(\"ij->ji\", a)", vec![&a23]),
            ("einsum(\"ij->\", a)", vec![&a23]),
            ("einsum(\"i,j->ij\", a, b)", vec![&v3, &w2]),
            ("einsum(\"ij,jk,j->ki\", a, b, c)", vec![&a23, &b32, &v3]),
            ("einsum(\"i,i->i\", a, a)", vec![&v3]),
            (
                "einsum(\"ij,jk->ik\", a * 2 - b, c)",
                vec![&a23, &a23, &b32],
            ),
        ];
        let mut compared = 0;
        for (src, xs) in cases {
            let f = parse(src).unwrap();
            let Expr::Einsum(spec, args) = &f.expr else {
                panic!("{src}")
            };
            let y = eval(&f.expr, &xs, &mut Ctx::default()).unwrap();
            for off in [0, 1] {
                let n = y.numel() as i64;
                let g = Tensor::new(
                    y.shape.clone(),
                    (0..n).map(|k| Q::frac((k + off) % 3 - 1, 2)).collect(),
                );
                let start: Vec<Tensor> = xs.iter().map(|x| x.map(|v| v.add(&Q::one()))).collect();
                let (mut flat, mut def) = (start.clone(), start.clone());
                let done = einsum_vjp_flat(spec, args, &xs, &g, &mut flat, &mut Ctx::default());
                assert_eq!(done, Ok(true), "{src}");
                einsum_vjp_general(spec, args, &xs, &g, &mut def, &mut Ctx::default()).unwrap();
                assert_eq!(flat, def, "{src}, g {g}");
                if !g.is_zero() {
                    assert_ne!(flat, start, "{src}: the cotangent reached no gradient");
                }
                compared += 1;
            }
        }
        assert_eq!(compared, 14);
        // Shapes the plan does not fit are left to the definition: a
        // cotangent of another shape, operands disagreeing on a label.
        let f = parse("einsum(\"ij,jk->ik\", a, b)").unwrap();
        let Expr::Einsum(spec, args) = &f.expr else {
            unreachable!()
        };
        let wrong_g = t(&[2, 3], &[1; 6]);
        let mut gr = vec![Tensor::zeros(&[2, 3]), Tensor::zeros(&[3, 2])];
        let done = einsum_vjp_flat(
            spec,
            args,
            &[&a23, &b32],
            &wrong_g,
            &mut gr,
            &mut Ctx::default(),
        );
        assert_eq!(done, Ok(false));
        assert!(gr.iter().all(Tensor::is_zero), "nothing written");
        assert!(FlatPlan::new(spec, &[&[2, 3], &[2, 2]], &[2, 2]).is_none());
        assert!(FlatPlan::new(spec, &[&[2, 3], &[3, 2]], &[2, 2]).is_some());
        // The twin: operand 1's contraction written into operand 0's
        // gradient (both 2x2 here) is told apart from the definition.
        let (a, b) = (t(&[2, 2], &[1, 2, 3, 4]), t(&[2, 2], &[0, 1, -1, 2]));
        let g = t(&[2, 2], &[1, 0, 2, 1]);
        let plan = FlatPlan::new(spec, &[&[2, 2], &[2, 2]], &[2, 2]).unwrap();
        let mut wrong = Tensor::zeros(&[2, 2]);
        plan.vjp_into(1, &g, &[&a, &b], &mut wrong.data);
        let mut def = vec![Tensor::zeros(&[2, 2]), Tensor::zeros(&[2, 2])];
        einsum_vjp_general(spec, args, &[&a, &b], &g, &mut def, &mut Ctx::default()).unwrap();
        assert_ne!(wrong, def[0]);
    }

    /// The per-thread plans give what `FlatPlan::new` and `einsum_plan_for`
    /// give, whatever was asked before: specs and shapes in turn, more of them than are kept,
    /// and back. The twin: a plan for other shapes is not handed out (a
    /// cache keyed by the spec alone would give the 2x3 plan for 2x2).
    #[test]
    fn cached_flat_plans_are_the_plans_of_their_shapes() {
        let specs: Vec<Einsum> = ["ij,jk->ik", "ij,kj->ik", "ij->ji", "i,i->", "bij,bjk->bik"]
            .iter()
            .map(|s| Einsum::parse(s).unwrap())
            .collect();
        let asks: Vec<(usize, Vec<Vec<usize>>, Vec<usize>)> = (1..5usize)
            .flat_map(|n| {
                vec![
                    (0, vec![vec![2, n], vec![n, 3]], vec![2, 3]),
                    (1, vec![vec![2, n], vec![3, n]], vec![2, 3]),
                    (2, vec![vec![n, 2]], vec![2, n]),
                    (3, vec![vec![n], vec![n]], vec![]),
                    (4, vec![vec![2, n, 2], vec![2, 2, n]], vec![2, n, n]),
                    // Shapes that do not fit: no plan.
                    (0, vec![vec![2, n], vec![n + 1, 3]], vec![2, 3]),
                ]
            })
            .collect();
        for round in 0..3 {
            for (k, sh, out) in asks.iter().chain(asks.iter().rev()) {
                let shapes: Vec<&[usize]> = sh.iter().map(|s| &s[..]).collect();
                let fresh = FlatPlan::new(&specs[*k], &shapes, out);
                let kept = FlatPlan::cached(&specs[*k], &shapes, out);
                assert_eq!(kept.as_deref(), fresh.as_ref(), "round {round}: {k} {sh:?}");
                // The forward's plans, kept the same way.
                let fresh = einsum_plan_for(&specs[*k], &shapes);
                let kept = einsum_plan_cached(&specs[*k], &shapes);
                assert_eq!(kept.as_deref(), fresh.as_ref(), "round {round}: {k} {sh:?}");
            }
        }
        let sp = &specs[0];
        let p23 = FlatPlan::cached(sp, &[&[2, 3], &[3, 2]], &[2, 2]).unwrap();
        let p22 = FlatPlan::cached(sp, &[&[2, 2], &[2, 2]], &[2, 2]).unwrap();
        assert_ne!(*p23, *p22);
        let p23 = einsum_plan_cached(sp, &[&[2, 3], &[3, 2]]).unwrap();
        let p22 = einsum_plan_cached(sp, &[&[2, 2], &[2, 2]]).unwrap();
        assert_ne!(*p23, *p22);
    }
    /// The incremental einsum against the entry-by-entry definition (an
    /// index vector per entry), on specs with contraction, transposition,
    /// and three operands.
    #[test]
    fn einsum_matches_the_definition() {
        fn naive(spec: &Einsum, ops: &[&Tensor], sizes: &[(char, usize)]) -> Tensor {
            let labels: Vec<char> = sizes.iter().map(|x| x.0).collect();
            let dims: Vec<usize> = sizes.iter().map(|x| x.1).collect();
            let off = |ls: &[char], shape: &[usize], idx: &[usize]| -> usize {
                let st = strides(shape);
                ls.iter()
                    .enumerate()
                    .map(|(p, c)| idx[labels.iter().position(|l| l == c).unwrap()] * st[p])
                    .sum()
            };
            let out_shape: Vec<usize> = spec
                .output
                .iter()
                .map(|c| sizes.iter().find(|x| x.0 == *c).unwrap().1)
                .collect();
            let mut out = Tensor::zeros(&out_shape);
            for flat in 0..numel(&dims) {
                let idx = unravel(flat, &dims);
                let prod = ops.iter().zip(&spec.inputs).fold(Q::one(), |a, (t, ls)| {
                    a.mul(&t.data[off(ls, &t.shape, &idx)])
                });
                let o = off(&spec.output, &out_shape, &idx);
                out.data[o] = out.data[o].add(&prod);
            }
            out
        }
        let a = t(&[2, 3], &[1, -2, 3, 0, 5, -1]);
        let b = t(&[3, 2], &[2, 1, 0, -3, 4, 1]);
        let v = t(&[3], &[1, 2, -1]);
        type Case<'a> = (&'a str, Vec<&'a Tensor>, Vec<(char, usize)>);
        let (s3, s5) = (t(&[], &[3]), t(&[], &[-5]));
        let w = t(&[2], &[0, -2]);
        let cases: [Case; 9] = [
            // Scalars: no label at all.
            (",->", vec![&s3, &s5], vec![]),
            // Two operands, no outer label: the inner loop alone.
            ("i,i->", vec![&v, &v], vec![('i', 3)]),
            ("ij,ij->j", vec![&a, &a], vec![('i', 2), ('j', 3)]),
            (
                "ij,jk->ik",
                vec![&a, &b],
                vec![('i', 2), ('j', 3), ('k', 2)],
            ),
            ("ij->ji", vec![&a], vec![('i', 2), ('j', 3)]),
            ("ij,j->i", vec![&a, &v], vec![('i', 2), ('j', 3)]),
            // One factor fixed along the last label, first or second
            // (with zeros, whose products are skipped).
            ("i,ij->ij", vec![&w, &a], vec![('i', 2), ('j', 3)]),
            ("ij,i->ij", vec![&a, &w], vec![('i', 2), ('j', 3)]),
            (
                "ij,jk,j->ki",
                vec![&a, &b, &v],
                vec![('i', 2), ('j', 3), ('k', 2)],
            ),
        ];
        for (src, ops, sizes) in cases {
            let spec = Einsum::parse(src).unwrap();
            assert_eq!(
                einsum(&spec, &ops, &sizes),
                naive(&spec, &ops, &sizes),
                "{src}"
            );
        }
        // The twin: a transposed result is told apart.
        let spec = Einsum::parse("ij->ji").unwrap();
        let id = Einsum::parse("ij->ij").unwrap();
        let sz = [('i', 2), ('j', 3)];
        assert_ne!(einsum(&spec, &[&a], &sz).data, naive(&id, &[&a], &sz).data);
    }
}
