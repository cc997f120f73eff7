//! The exact transcendental path (SPEC.md §19): expressions evaluated over
//! the field of `spmd_semantics::expoly`, in forward mode over dual numbers
//! of that field (the oracle's derivative), and in reverse mode (the local
//! VJP under check). The three share the tensor plumbing below and nothing
//! else: the reverse-mode rules are written by hand per op, the forward mode
//! follows from the field operations alone, so a wrong VJP rule cannot hide
//! behind the same mistake in the derivative.

use crate::eval::{infer, round_q};
use crate::expr::{DimOp, Einsum, Expr, Fun, Mask, Rounding};
use spmd_semantics::expoly::{gelu_c, XErr};
use spmd_semantics::tensor::{numel, strides, unravel};
use spmd_semantics::{Shape, Tensor, Q};
use std::cmp::Ordering;

type R<T> = Result<T, XErr>;

pub use crate::expr::{is_transcendental, representable};

mod field;
pub use field::{Dual, DualOf, DualsOf, Field};

/// A tensor over a field.
#[derive(Clone, Debug)]
pub struct XT<S> {
    pub shape: Shape,
    pub data: Vec<S>,
}

impl<S: Field> XT<S> {
    pub fn from_q(t: &Tensor) -> XT<S> {
        XT {
            shape: t.shape.clone(),
            data: t.data.iter().map(S::q).collect(),
        }
    }
    pub fn zeros(shape: &[usize]) -> XT<S> {
        XT {
            shape: shape.to_vec(),
            data: vec![S::zero(); numel(shape)],
        }
    }
    fn map(&self, f: impl Fn(&S) -> R<S>) -> R<XT<S>> {
        Ok(XT {
            shape: self.shape.clone(),
            data: self.data.iter().map(f).collect::<R<_>>()?,
        })
    }
}

/// Evaluation state: whether a kink was met (SPEC.md §5.3).
#[derive(Default, Debug)]
pub struct XCtx {
    pub at_kink: bool,
}

/// Errors of the exact path: an `XErr`, or a shape the inference should
/// have rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XEvalError {
    X(XErr),
    Shape(String),
}

impl From<XErr> for XEvalError {
    fn from(e: XErr) -> XEvalError {
        XEvalError::X(e)
    }
}

type ER<T> = Result<T, XEvalError>;

fn bshape(a: &[usize], b: &[usize]) -> ER<Shape> {
    if a == b || b.is_empty() {
        Ok(a.to_vec())
    } else if a.is_empty() {
        Ok(b.to_vec())
    } else {
        Err(XEvalError::Shape(format!("shapes {a:?} and {b:?} differ")))
    }
}

fn binary<S: Field>(a: &XT<S>, b: &XT<S>, f: impl Fn(&S, &S) -> R<S>) -> ER<XT<S>> {
    let s = bshape(&a.shape, &b.shape)?;
    let at = |t: &XT<S>, i: usize| if t.data.len() == 1 { 0 } else { i };
    let data = (0..numel(&s))
        .map(|i| f(&a.data[at(a, i)], &b.data[at(b, i)]))
        .collect::<R<_>>()?;
    Ok(XT { shape: s, data })
}

/// Flat indices of every lane along `dim`, lane by lane in output order.
fn lanes(shape: &[usize], dim: usize) -> Vec<Vec<usize>> {
    let outer: usize = shape[..dim].iter().product();
    let k = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            out.push((0..k).map(|j| (o * k + j) * inner + i).collect());
        }
    }
    out
}

fn removed(shape: &[usize], dim: usize) -> Shape {
    let mut s = shape.to_vec();
    s.remove(dim);
    s
}

/// The source flat index of every output entry of a structural op, found
/// by running the op on a tensor of indices (exact integers).
fn index_map(shape: &[usize], f: impl Fn(&Tensor) -> Tensor) -> (Shape, Vec<usize>) {
    let idx = Tensor::new(
        shape.to_vec(),
        (0..numel(shape)).map(|i| Q::int(i as i64)).collect(),
    );
    let out = f(&idx);
    let map = out
        .data
        .iter()
        .map(|q| q.to_i64().expect("index") as usize)
        .collect();
    (out.shape, map)
}

fn gather<S: Field>(t: &XT<S>, shape: Shape, map: &[usize]) -> XT<S> {
    XT {
        shape,
        data: map.iter().map(|&i| t.data[i].clone()).collect(),
    }
}

fn scatter<S: Field>(g: &XT<S>, shape: &[usize], map: &[usize]) -> R<XT<S>> {
    let mut out = XT::<S>::zeros(shape);
    for (o, &i) in map.iter().enumerate() {
        out.data[i] = out.data[i].add(&g.data[o])?;
    }
    Ok(out)
}

fn sum<S: Field>(xs: &[&S]) -> R<S> {
    let mut acc = S::zero();
    for x in xs {
        acc = acc.add(x)?;
    }
    Ok(acc)
}

/// Structural maps of a node as index maps: (output shape, map) for the
/// given operand (and, for two-operand nodes, the second operand's offset).
fn einsum<S: Field>(spec: &Einsum, ops: &[&XT<S>]) -> ER<XT<S>> {
    let mut sizes: Vec<(char, usize)> = Vec::new();
    for (labels, t) in spec.inputs.iter().zip(ops) {
        if labels.len() != t.shape.len() {
            return Err(XEvalError::Shape(format!("einsum `{spec}` rank")));
        }
        for (c, &n) in labels.iter().zip(&t.shape) {
            if !sizes.iter().any(|(l, _)| l == c) {
                sizes.push((*c, n));
            }
        }
    }
    for c in &spec.output {
        if !sizes.iter().any(|(l, _)| l == c) {
            return Err(XEvalError::Shape(format!("einsum `{spec}` label {c}")));
        }
    }
    let shapes: Vec<&[usize]> = ops.iter().map(|t| t.shape.as_slice()).collect();
    let crate::eval::EinsumPlan {
        dims,
        out_shape,
        out_st,
        op_st,
    } = crate::eval::einsum_plan(spec, &shapes, &sizes);
    let mut out = XT::<S>::zeros(&out_shape);
    'index: for flat in 0..numel(&dims) {
        let idx = unravel(flat, &dims);
        let mut prod: Option<S> = None;
        for (t, st) in ops.iter().zip(&op_st) {
            let off: usize = idx.iter().zip(st).map(|(i, s)| i * s).sum();
            // A zero factor makes the product zero, which adds nothing
            // (`Field::is_zero`).
            if t.data[off].is_zero() {
                continue 'index;
            }
            // 1 · a · b · ..., the 1 not built (`Field::one_times`).
            prod = Some(match prod {
                None => t.data[off].one_times()?,
                Some(p) => p.mul(&t.data[off])?,
            });
        }
        let prod = match prod {
            Some(p) => p,
            None => S::q(&Q::one()),
        };
        let o: usize = idx.iter().zip(&out_st).map(|(i, s)| i * s).sum();
        out.data[o] = out.data[o].add(&prod)?;
    }
    Ok(out)
}

fn is_integer_q(v: &Q) -> bool {
    v.is_integer()
}

/// A function of one scalar written with the field operations only: the
/// meaning of each elementwise function (SPEC.md §19.1); over `X`, from a
/// per-thread memo for rational arguments (`Field::fun`).
pub fn apply_fun<S: Field>(f: Fun, x: &S) -> R<S> {
    x.fun(f)
}

/// `apply_fun` computed afresh, never from a memo.
pub fn apply_fun_plain<S: Field>(f: Fun, x: &S) -> R<S> {
    let one = S::q(&Q::one());
    let half = S::q(&Q::frac(1, 2));
    Ok(match f {
        Fun::Exp => x.exp()?,
        Fun::Log => x.log()?,
        Fun::Sqrt => x.sqrt()?,
        Fun::Rsqrt => one.div(&x.sqrt()?)?,
        Fun::Tanh => {
            let e = x.mul(&S::q(&Q::int(2)))?.exp()?;
            e.sub(&one)?.div(&e.add(&one)?)?
        }
        Fun::Sigmoid => one.div(&one.add(&x.neg().exp()?)?)?,
        Fun::Sin => x.sin()?,
        Fun::Cos => x.cos()?,
        Fun::Gelu => x.mul(&half)?.mul(&one.add(&x.gelu_t()?)?)?,
        Fun::Silu => x.div(&one.add(&x.neg().exp()?)?)?,
    })
}

/// softmax, logsumexp, layernorm, rmsnorm of one lane, from field
/// operations only.
fn dimwise_lane<S: Field>(op: DimOp, xs: &[&S], eps: &Q) -> R<Vec<S>> {
    let k = S::q(&Q::int(xs.len() as i64));
    Ok(match op {
        DimOp::Softmax => {
            let es: Vec<S> = xs.iter().map(|x| x.exp()).collect::<R<_>>()?;
            let z = sum(&es.iter().collect::<Vec<_>>())?;
            es.iter().map(|e| e.div(&z)).collect::<R<_>>()?
        }
        DimOp::LogSumExp => {
            let es: Vec<S> = xs.iter().map(|x| x.exp()).collect::<R<_>>()?;
            vec![sum(&es.iter().collect::<Vec<_>>())?.log()?]
        }
        DimOp::LayerNorm => {
            let mu = sum(xs)?.div(&k)?;
            let cs: Vec<S> = xs.iter().map(|x| x.sub(&mu)).collect::<R<_>>()?;
            let sq: Vec<S> = cs.iter().map(|c| c.mul(c)).collect::<R<_>>()?;
            let var = sum(&sq.iter().collect::<Vec<_>>())?.div(&k)?;
            let sd = var.add(&S::q(eps))?.sqrt()?;
            cs.iter().map(|c| c.div(&sd)).collect::<R<_>>()?
        }
        DimOp::RmsNorm => {
            let sq: Vec<S> = xs.iter().map(|x| x.mul(x)).collect::<R<_>>()?;
            let ms = sum(&sq.iter().collect::<Vec<_>>())?.div(&k)?;
            let r = ms.add(&S::q(eps))?.sqrt()?;
            xs.iter().map(|x| x.div(&r)).collect::<R<_>>()?
        }
    })
}

/// Which entries `where` takes from its first branch.
fn select<S: Field>(
    m: &Mask,
    shape: &[usize],
    xs: &[XT<S>],
    ctx: &mut XCtx,
) -> ER<(Vec<bool>, Shape)> {
    match m {
        Mask::Input(me) => {
            let vm = eval(me, xs, ctx)?;
            let s = bshape(shape, &vm.shape)?;
            let at = |i: usize| if vm.data.len() == 1 { 0 } else { i };
            let mut sel = Vec::with_capacity(numel(&s));
            for i in 0..numel(&s) {
                let sg = vm.data[at(i)].sign()?;
                ctx.at_kink |= sg == Ordering::Equal;
                sel.push(sg == Ordering::Greater);
            }
            Ok((sel, s))
        }
        Mask::Const(v) => Ok((
            (0..numel(shape)).map(|i| v[i % v.len()] == 1).collect(),
            shape.to_vec(),
        )),
    }
}

fn round_s<S: Field>(k: Option<Rounding>, bits: Option<u32>, x: &S, ctx: &mut XCtx) -> R<S> {
    let q = x.value_q().ok_or_else(|| {
        XErr::Unsupported(
            "rounding of an irrational number (its nearest integers are not decided exactly)"
                .into(),
        )
    })?;
    let r = match (k, bits) {
        (Some(k), _) => {
            ctx.at_kink |= match k {
                Rounding::Round => q.mul(&Q::int(2)).is_integer() && !q.is_integer(),
                _ => is_integer_q(&q),
            };
            round_q(k, &q)
        }
        (None, Some(b)) => {
            let scaled = q.mul(&Q::int(1i64 << (b + 1)));
            ctx.at_kink |= scaled.is_integer() && !q.mul(&Q::int(1i64 << b)).is_integer();
            q.round_to_bits(b)
        }
        (None, None) => {
            ctx.at_kink |= q.is_integer();
            q.floor()
        }
    };
    Ok(S::q(&r))
}

/// The value of `e` over the field (or its dual numbers).
pub fn eval<S: Field>(e: &Expr, xs: &[XT<S>], ctx: &mut XCtx) -> ER<XT<S>> {
    let ev = |a: &Expr, ctx: &mut XCtx| eval(a, xs, ctx);
    Ok(match e {
        Expr::Table(t, _) => {
            return Err(XEvalError::Shape(format!(
                "{}: a recorded kernel is rational, not evaluated over the field",
                t.0.name
            )))
        }
        Expr::Var(i) => xs
            .get(*i)
            .cloned()
            .ok_or_else(|| XEvalError::Shape(format!("input {i} missing")))?,
        Expr::Const(q) => XT {
            shape: vec![],
            data: vec![S::q(q)],
        },
        Expr::Neg(a) => ev(a, ctx)?.map(|x| Ok(x.neg()))?,
        Expr::Add(a, b) => binary(&ev(a, ctx)?, &ev(b, ctx)?, S::add)?,
        Expr::Sub(a, b) => binary(&ev(a, ctx)?, &ev(b, ctx)?, S::sub)?,
        Expr::Mul(a, b) => binary(&ev(a, ctx)?, &ev(b, ctx)?, S::mul)?,
        Expr::Div(a, b) => binary(&ev(a, ctx)?, &ev(b, ctx)?, S::div)?,
        Expr::Pow(a, k) => ev(a, ctx)?.map(|x| {
            let mut acc = S::q(&Q::one());
            for _ in 0..*k {
                acc = acc.mul(x)?;
            }
            Ok(acc)
        })?,
        Expr::Sum(a, d) | Expr::Mean(a, d) | Expr::Max(a, d) => {
            let t = ev(a, ctx)?;
            let k = S::q(&Q::int(t.shape[*d] as i64));
            let mut data = Vec::new();
            for lane in lanes(&t.shape, *d) {
                let vals: Vec<&S> = lane.iter().map(|&i| &t.data[i]).collect();
                data.push(match e {
                    Expr::Sum(..) => sum(&vals)?,
                    Expr::Mean(..) => sum(&vals)?.div(&k)?,
                    _ => {
                        let mut best = vals[0].clone();
                        for v in &vals[1..] {
                            match v.sub(&best)?.sign()? {
                                Ordering::Greater => best = (*v).clone(),
                                Ordering::Equal => ctx.at_kink = true,
                                Ordering::Less => {}
                            }
                        }
                        best
                    }
                });
            }
            XT {
                shape: removed(&t.shape, *d),
                data,
            }
        }
        Expr::Einsum(spec, args) => {
            let vals: Vec<XT<S>> = args.iter().map(|a| ev(a, ctx)).collect::<ER<_>>()?;
            let refs: Vec<&XT<S>> = vals.iter().collect();
            einsum(spec, &refs)?
        }
        Expr::Reshape(..) | Expr::Slice(..) | Expr::Take(..) => {
            let (a, f) = structural(e);
            let t = ev(a, ctx)?;
            let (shape, map) = index_map(&t.shape, f);
            gather(&t, shape, &map)
        }
        Expr::Concat(args, d) => {
            let vals: Vec<XT<S>> = args.iter().map(|a| ev(a, ctx)).collect::<ER<_>>()?;
            let (shape, map) = concat_map(
                &vals.iter().map(|v| v.shape.clone()).collect::<Vec<_>>(),
                *d,
            );
            let all: Vec<S> = vals.iter().flat_map(|v| v.data.iter().cloned()).collect();
            XT {
                shape,
                data: map.iter().map(|&i| all[i].clone()).collect(),
            }
        }
        Expr::UpdateSlice(a, u, start) => {
            let (ta, tu) = (ev(a, ctx)?, ev(u, ctx)?);
            let map = update_map(&ta.shape, &tu.shape, start);
            let n = ta.data.len();
            XT {
                shape: ta.shape.clone(),
                data: map
                    .iter()
                    .map(|&i| {
                        if i < n {
                            ta.data[i].clone()
                        } else {
                            tu.data[i - n].clone()
                        }
                    })
                    .collect(),
            }
        }
        Expr::Abs(a) | Expr::Relu(a) => {
            let t = ev(a, ctx)?;
            let relu = matches!(e, Expr::Relu(..));
            let mut data = Vec::with_capacity(t.data.len());
            for x in &t.data {
                let s = x.sign()?;
                ctx.at_kink |= s == Ordering::Equal;
                data.push(match s {
                    Ordering::Less if relu => S::zero(),
                    Ordering::Less => x.neg(),
                    _ => x.clone(),
                });
            }
            XT {
                shape: t.shape,
                data,
            }
        }
        Expr::Floor(a) | Expr::Cast(a, _) | Expr::Round(_, a) => {
            let t = ev(a, ctx)?;
            let (k, bits) = match e {
                Expr::Round(k, _) => (Some(*k), None),
                Expr::Cast(_, b) => (None, Some(*b)),
                _ => (None, None),
            };
            let mut data = Vec::with_capacity(t.data.len());
            for x in &t.data {
                data.push(round_s(k, bits, x, ctx)?);
            }
            XT {
                shape: t.shape,
                data,
            }
        }
        Expr::Cumsum(a, d) => {
            let t = ev(a, ctx)?;
            let mut out = t.clone();
            for lane in lanes(&t.shape, *d) {
                let mut acc = S::zero();
                for &i in &lane {
                    acc = acc.add(&t.data[i])?;
                    out.data[i] = acc.clone();
                }
            }
            out
        }
        Expr::Where(m, a, b) => {
            let (ta, tb) = (ev(a, ctx)?, ev(b, ctx)?);
            let s = bshape(&ta.shape, &tb.shape)?;
            let (sel, s) = select(m, &s, xs, ctx)?;
            let at = |t: &XT<S>, i: usize| if t.data.len() == 1 { 0 } else { i };
            XT {
                data: sel
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| {
                        if p {
                            ta.data[at(&ta, i)].clone()
                        } else {
                            tb.data[at(&tb, i)].clone()
                        }
                    })
                    .collect(),
                shape: s,
            }
        }
        Expr::Unary(f, a) => ev(a, ctx)?.map(|x| apply_fun(*f, x))?,
        Expr::Dimwise(op, a, d, eps) => {
            let t = ev(a, ctx)?;
            let ls = lanes(&t.shape, *d);
            if *op == DimOp::LogSumExp {
                let mut data = Vec::new();
                for lane in ls {
                    let vals: Vec<&S> = lane.iter().map(|&i| &t.data[i]).collect();
                    data.extend(dimwise_lane(*op, &vals, eps)?);
                }
                XT {
                    shape: removed(&t.shape, *d),
                    data,
                }
            } else {
                let mut out = t.clone();
                for lane in ls {
                    let vals: Vec<&S> = lane.iter().map(|&i| &t.data[i]).collect();
                    for (&i, v) in lane.iter().zip(dimwise_lane(*op, &vals, eps)?) {
                        out.data[i] = v;
                    }
                }
                out
            }
        }
        Expr::CrossEntropy(a, tg, d) => {
            let (x, t) = (ev(a, ctx)?, ev(tg, ctx)?);
            let mut data = Vec::new();
            for lane in lanes(&x.shape, *d) {
                let vals: Vec<&S> = lane.iter().map(|&i| &x.data[i]).collect();
                let lse = dimwise_lane(DimOp::LogSumExp, &vals, &Q::zero())?.remove(0);
                let mut tgt = S::zero();
                for &i in &lane {
                    tgt = tgt.add(&x.data[i].mul(&t.data[i])?)?;
                }
                data.push(lse.sub(&tgt)?);
            }
            XT {
                shape: removed(&x.shape, *d),
                data,
            }
        }
    })
}

/// The operand and the index-level function of a one-operand structural node.
#[allow(clippy::type_complexity)]
fn structural(e: &Expr) -> (&Expr, Box<dyn Fn(&Tensor) -> Tensor + '_>) {
    match e {
        Expr::Reshape(a, s) => (
            a,
            Box::new(move |t: &Tensor| Tensor::new(s.clone(), t.data.clone())),
        ),
        Expr::Slice(a, d, s, t) => (a, Box::new(move |x: &Tensor| x.slice(*d, *s, *t))),
        Expr::Take(a, d, idx) => (
            a,
            Box::new(move |x: &Tensor| {
                let parts: Vec<Tensor> = idx.iter().map(|&i| x.slice(*d, i, i + 1)).collect();
                Tensor::concat(&parts, *d)
            }),
        ),
        _ => unreachable!("only structural nodes"),
    }
}

fn concat_map(shapes: &[Shape], d: usize) -> (Shape, Vec<usize>) {
    let mut off = 0;
    let parts: Vec<Tensor> = shapes
        .iter()
        .map(|s| {
            let n = numel(s);
            let t = Tensor::new(
                s.clone(),
                (off..off + n).map(|i| Q::int(i as i64)).collect(),
            );
            off += n;
            t
        })
        .collect();
    let out = Tensor::concat(&parts, d);
    let map = out
        .data
        .iter()
        .map(|q| q.to_i64().expect("index") as usize)
        .collect();
    (out.shape, map)
}

fn update_map(sa: &[usize], su: &[usize], start: &[usize]) -> Vec<usize> {
    let n = numel(sa);
    let mut map: Vec<usize> = (0..n).collect();
    let st = strides(sa);
    for k in 0..numel(su) {
        let i = unravel(k, su);
        let off: usize = i
            .iter()
            .zip(start)
            .zip(&st)
            .map(|((a, b), s)| (a + b) * s)
            .sum();
        map[off] = n + k;
    }
    map
}

/// The local VJP over the field, by reverse mode with a hand-written rule
/// per op (SPEC.md §19.1): the backward under check, never the oracle's
/// derivative.
pub fn vjp<S: Field>(e: &Expr, xs: &[XT<S>], g: &XT<S>) -> ER<Vec<XT<S>>> {
    let mut grads: Vec<XT<S>> = xs.iter().map(|x| XT::zeros(&x.shape)).collect();
    let mut ctx = XCtx::default();
    back(e, xs, g, &mut grads, &mut ctx)?;
    Ok(grads)
}

fn unbroadcast<S: Field>(g: &XT<S>, shape: &[usize]) -> R<XT<S>> {
    if g.shape == shape {
        return Ok(g.clone());
    }
    Ok(XT {
        shape: vec![],
        data: vec![sum(&g.data.iter().collect::<Vec<_>>())?],
    })
}

fn scale_by<S: Field>(g: &XT<S>, d: &XT<S>) -> ER<XT<S>> {
    binary(g, d, S::mul)
}

/// d f / d x of an elementwise function, written by hand.
fn fun_slope<S: Field>(f: Fun, x: &S) -> R<S> {
    let one = S::q(&Q::one());
    let half = S::q(&Q::frac(1, 2));
    Ok(match f {
        Fun::Exp => x.exp()?,
        Fun::Log => one.div(x)?,
        Fun::Sqrt => half.div(&x.sqrt()?)?,
        Fun::Rsqrt => {
            // -1/2 x^(-3/2) = -rsqrt(x) / (2x)
            let r = one.div(&x.sqrt()?)?;
            r.neg().mul(&half)?.div(x)?
        }
        Fun::Tanh => {
            let t = apply_fun(Fun::Tanh, x)?;
            one.sub(&t.mul(&t)?)?
        }
        Fun::Sigmoid => {
            let s = apply_fun(Fun::Sigmoid, x)?;
            s.mul(&one.sub(&s)?)?
        }
        Fun::Sin => x.cos()?,
        Fun::Cos => x.sin()?.neg(),
        Fun::Gelu => {
            let t = x.gelu_t()?;
            let c3 = S::q(&gelu_c().mul(&Q::int(3)));
            let inner = one.add(&c3.mul(x)?.mul(x)?)?;
            let a = half.mul(&one.add(&t)?)?;
            let b = half
                .mul(x)?
                .mul(&one.sub(&t.mul(&t)?)?)?
                .mul(&S::sqrt_two_over_pi()?)?
                .mul(&inner)?;
            a.add(&b)?
        }
        Fun::Silu => {
            let s = apply_fun(Fun::Sigmoid, x)?;
            s.mul(&one.add(&x.mul(&one.sub(&s)?)?)?)?
        }
    })
}

fn back<S: Field>(
    e: &Expr,
    xs: &[XT<S>],
    g: &XT<S>,
    grads: &mut [XT<S>],
    ctx: &mut XCtx,
) -> ER<()> {
    let ev = |a: &Expr, ctx: &mut XCtx| eval(a, xs, ctx);
    match e {
        Expr::Table(t, _) => {
            return Err(XEvalError::Shape(format!(
                "{}: a recorded kernel has no derivative",
                t.0.name
            )))
        }
        Expr::Var(i) => {
            let gi = &mut grads[*i];
            for (a, b) in gi.data.iter_mut().zip(&g.data) {
                *a = a.add(b)?;
            }
        }
        Expr::Const(_) => {}
        Expr::Neg(a) => back(a, xs, &g.map(|v| Ok(v.neg()))?, grads, ctx)?,
        Expr::Add(a, b) | Expr::Sub(a, b) => {
            let (sa, sb) = (ev(a, ctx)?.shape, ev(b, ctx)?.shape);
            back(a, xs, &unbroadcast(g, &sa)?, grads, ctx)?;
            let gb = unbroadcast(g, &sb)?;
            let gb = if matches!(e, Expr::Sub(..)) {
                gb.map(|v| Ok(v.neg()))?
            } else {
                gb
            };
            back(b, xs, &gb, grads, ctx)?;
        }
        Expr::Mul(a, b) => {
            let (va, vb) = (ev(a, ctx)?, ev(b, ctx)?);
            back(
                a,
                xs,
                &unbroadcast(&scale_by(g, &vb)?, &va.shape)?,
                grads,
                ctx,
            )?;
            back(
                b,
                xs,
                &unbroadcast(&scale_by(g, &va)?, &vb.shape)?,
                grads,
                ctx,
            )?;
        }
        Expr::Div(a, b) => {
            let (va, vb) = (ev(a, ctx)?, ev(b, ctx)?);
            let ga = binary(g, &vb, S::div)?;
            let q = binary(&va, &vb, |x, y| x.div(&y.mul(y)?))?;
            let gb = binary(g, &q, |x, y| Ok(x.mul(y)?.neg()))?;
            back(a, xs, &unbroadcast(&ga, &va.shape)?, grads, ctx)?;
            back(b, xs, &unbroadcast(&gb, &vb.shape)?, grads, ctx)?;
        }
        Expr::Pow(a, k) => {
            let va = ev(a, ctx)?;
            let d = va.map(|x| {
                let mut acc = S::q(&Q::int(*k as i64));
                for _ in 1..*k {
                    acc = acc.mul(x)?;
                }
                Ok(acc)
            })?;
            back(a, xs, &scale_by(g, &d)?, grads, ctx)?;
        }
        Expr::Sum(a, d) | Expr::Mean(a, d) | Expr::Max(a, d) => {
            let va = ev(a, ctx)?;
            let k = S::q(&Q::int(va.shape[*d] as i64));
            let mut ga = XT::zeros(&va.shape);
            for (o, lane) in lanes(&va.shape, *d).iter().enumerate() {
                match e {
                    Expr::Max(..) => {
                        let mut best = lane[0];
                        for &i in &lane[1..] {
                            if va.data[i].sub(&va.data[best])?.sign()? == Ordering::Greater {
                                best = i;
                            }
                        }
                        ga.data[best] = g.data[o].clone();
                    }
                    _ => {
                        let v = if matches!(e, Expr::Mean(..)) {
                            g.data[o].div(&k)?
                        } else {
                            g.data[o].clone()
                        };
                        for &i in lane {
                            ga.data[i] = v.clone();
                        }
                    }
                }
            }
            back(a, xs, &ga, grads, ctx)?;
        }
        Expr::Einsum(spec, args) => {
            let vals: Vec<XT<S>> = args.iter().map(|a| ev(a, ctx)).collect::<ER<_>>()?;
            for (k, arg) in args.iter().enumerate() {
                let ops = crate::einsum::vjp_operands(g, &vals, k);
                let s = crate::eval::operand_vjp_spec(spec, k);
                // Labels of operand k that occur nowhere else broadcast.
                let mut gk = einsum_to(&s, &ops, &vals[k].shape)?;
                gk.shape = vals[k].shape.clone();
                back(arg, xs, &gk, grads, ctx)?;
            }
        }
        Expr::Reshape(..) | Expr::Slice(..) | Expr::Take(..) => {
            let (a, f) = structural(e);
            let sa = ev(a, ctx)?.shape;
            let (_, map) = index_map(&sa, f);
            back(a, xs, &scatter(g, &sa, &map)?, grads, ctx)?;
        }
        Expr::Concat(args, d) => {
            let shapes: Vec<Shape> = args
                .iter()
                .map(|a| ev(a, ctx).map(|v| v.shape))
                .collect::<ER<_>>()?;
            let (_, map) = concat_map(&shapes, *d);
            let total: usize = shapes.iter().map(|s| numel(s)).sum();
            let all = scatter(g, &[total], &map)?;
            let mut off = 0;
            for (a, s) in args.iter().zip(&shapes) {
                let n = numel(s);
                let ga = XT {
                    shape: s.clone(),
                    data: all.data[off..off + n].to_vec(),
                };
                off += n;
                back(a, xs, &ga, grads, ctx)?;
            }
        }
        Expr::UpdateSlice(a, u, start) => {
            let (sa, su) = (ev(a, ctx)?.shape, ev(u, ctx)?.shape);
            let map = update_map(&sa, &su, start);
            let n = numel(&sa);
            let all = scatter(g, &[n + numel(&su)], &map)?;
            back(
                a,
                xs,
                &XT {
                    shape: sa,
                    data: all.data[..n].to_vec(),
                },
                grads,
                ctx,
            )?;
            back(
                u,
                xs,
                &XT {
                    shape: su,
                    data: all.data[n..].to_vec(),
                },
                grads,
                ctx,
            )?;
        }
        Expr::Abs(a) | Expr::Relu(a) => {
            let va = ev(a, ctx)?;
            let relu = matches!(e, Expr::Relu(..));
            let slope = va.map(|v| {
                Ok(S::q(&match v.sign()? {
                    Ordering::Equal => Q::zero(),
                    Ordering::Less if relu => Q::zero(),
                    Ordering::Less => Q::int(-1),
                    Ordering::Greater => Q::one(),
                }))
            })?;
            back(a, xs, &scale_by(g, &slope)?, grads, ctx)?;
        }
        Expr::Floor(_) | Expr::Cast(..) | Expr::Round(..) => {}
        Expr::Cumsum(a, d) => {
            let mut ga = g.clone();
            for lane in lanes(&g.shape, *d) {
                let mut acc = S::zero();
                for &i in lane.iter().rev() {
                    acc = acc.add(&g.data[i])?;
                    ga.data[i] = acc.clone();
                }
            }
            back(a, xs, &ga, grads, ctx)?;
        }
        Expr::Where(m, a, b) => {
            let (va, vb) = (ev(a, ctx)?, ev(b, ctx)?);
            let s = bshape(&va.shape, &vb.shape)?;
            let (sel, _) = select(m, &s, xs, ctx)?;
            let pick = |first: bool| XT {
                shape: g.shape.clone(),
                data: g
                    .data
                    .iter()
                    .zip(&sel)
                    .map(|(v, &p)| if p == first { v.clone() } else { S::zero() })
                    .collect(),
            };
            back(a, xs, &unbroadcast(&pick(true), &va.shape)?, grads, ctx)?;
            back(b, xs, &unbroadcast(&pick(false), &vb.shape)?, grads, ctx)?;
        }
        Expr::Unary(f, a) => {
            let va = ev(a, ctx)?;
            let d = va.map(|x| fun_slope(*f, x))?;
            back(a, xs, &scale_by(g, &d)?, grads, ctx)?;
        }
        Expr::Dimwise(op, a, d, eps) => {
            let va = ev(a, ctx)?;
            let y = eval(e, xs, ctx)?;
            let mut ga = XT::zeros(&va.shape);
            for (o, lane) in lanes(&va.shape, *d).iter().enumerate() {
                let kq = S::q(&Q::int(lane.len() as i64));
                match op {
                    DimOp::Softmax => {
                        // s ⊙ (g - <g, s>)
                        let mut dot = S::zero();
                        for &i in lane {
                            dot = dot.add(&g.data[i].mul(&y.data[i])?)?;
                        }
                        for &i in lane {
                            ga.data[i] = y.data[i].mul(&g.data[i].sub(&dot)?)?;
                        }
                    }
                    DimOp::LogSumExp => {
                        // g · softmax
                        let vals: Vec<&S> = lane.iter().map(|&i| &va.data[i]).collect();
                        let s = dimwise_lane(DimOp::Softmax, &vals, eps)?;
                        for (&i, si) in lane.iter().zip(&s) {
                            ga.data[i] = g.data[o].mul(si)?;
                        }
                    }
                    DimOp::LayerNorm | DimOp::RmsNorm => {
                        // r (g - mean(g) - y mean(g y)) for layernorm, without
                        // the mean(g) term for rmsnorm; r = 1 / sd.
                        let vals: Vec<&S> = lane.iter().map(|&i| &va.data[i]).collect();
                        let sd = if *op == DimOp::LayerNorm {
                            let mu = sum(&vals)?.div(&kq)?;
                            let mut var = S::zero();
                            for v in &vals {
                                let c = v.sub(&mu)?;
                                var = var.add(&c.mul(&c)?)?;
                            }
                            var.div(&kq)?.add(&S::q(eps))?.sqrt()?
                        } else {
                            let mut ms = S::zero();
                            for v in &vals {
                                ms = ms.add(&v.mul(v)?)?;
                            }
                            ms.div(&kq)?.add(&S::q(eps))?.sqrt()?
                        };
                        let (mut mg, mut mgy) = (S::zero(), S::zero());
                        for &i in lane {
                            mg = mg.add(&g.data[i])?;
                            mgy = mgy.add(&g.data[i].mul(&y.data[i])?)?;
                        }
                        let (mg, mgy) = (mg.div(&kq)?, mgy.div(&kq)?);
                        for &i in lane {
                            let mut v = g.data[i].sub(&y.data[i].mul(&mgy)?)?;
                            if *op == DimOp::LayerNorm {
                                v = v.sub(&mg)?;
                            }
                            ga.data[i] = v.div(&sd)?;
                        }
                    }
                }
            }
            back(a, xs, &ga, grads, ctx)?;
        }
        Expr::CrossEntropy(a, tg, d) => {
            let (va, vt) = (ev(a, ctx)?, ev(tg, ctx)?);
            let mut gx = XT::zeros(&va.shape);
            let mut gt = XT::zeros(&vt.shape);
            for (o, lane) in lanes(&va.shape, *d).iter().enumerate() {
                let vals: Vec<&S> = lane.iter().map(|&i| &va.data[i]).collect();
                let s = dimwise_lane(DimOp::Softmax, &vals, &Q::zero())?;
                for (&i, si) in lane.iter().zip(&s) {
                    gx.data[i] = g.data[o].mul(&si.sub(&vt.data[i])?)?;
                    gt.data[i] = g.data[o].mul(&va.data[i])?.neg();
                }
            }
            back(a, xs, &gx, grads, ctx)?;
            back(tg, xs, &gt, grads, ctx)?;
        }
    }
    Ok(())
}

/// einsum into a given output shape (labels of the output found in no
/// operand broadcast, as in the adjoint of a contraction).
fn einsum_to<S: Field>(spec: &Einsum, ops: &[&XT<S>], out: &[usize]) -> ER<XT<S>> {
    let missing: Vec<(char, usize)> = spec
        .output
        .iter()
        .zip(out)
        .filter(|(c, _)| !spec.inputs.iter().any(|l| l.contains(c)))
        .map(|(c, n)| (*c, *n))
        .collect();
    if missing.is_empty() {
        return einsum(spec, ops);
    }
    // Add a ones operand carrying the missing labels.
    let ones_shape: Shape = missing.iter().map(|x| x.1).collect();
    let ones = XT {
        shape: ones_shape.clone(),
        data: vec![S::q(&Q::one()); numel(&ones_shape)],
    };
    let mut s = spec.clone();
    s.inputs.push(missing.iter().map(|x| x.0).collect());
    let mut all: Vec<&XT<S>> = ops.to_vec();
    all.push(&ones);
    einsum(&s, &all)
}

/// Output shape of `e` (exact path inputs share the rational inference).
pub fn out_shape(e: &Expr, shapes: &[Shape]) -> Result<Shape, String> {
    infer(e, shapes).map(|x| x.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse;
    use spmd_semantics::expoly::X;
    use spmd_semantics::symbolic::Sym;

    fn xt(v: &[i64]) -> XT<X> {
        XT {
            shape: vec![v.len()],
            data: v.iter().map(|&k| X::q(Q::int(k))).collect(),
        }
    }

    /// `einsum` skips a product with a zero factor (`Field::is_zero`) and
    /// starts each product from its first factor (`Field::one_times`): the
    /// same values, in the same normal forms, as the loop that multiplies
    /// 1 by every factor and adds every product, here over dual numbers whose
    /// values and derivatives are zero in places and irrational elsewhere.
    /// The twin: changing one operand entry changes the result, so the
    /// comparison sees a wrong skip.
    #[test]
    fn a_zero_factor_is_skipped_exactly() {
        type D = DualOf<X>;
        let e = |k: i64| X::exp_q(Q::int(k));
        let d = |v: X, dv: X| D { v, d: dv };
        let a = XT::<D> {
            shape: vec![2, 2],
            data: vec![
                d(X::zero(), X::zero()),
                d(e(1), X::q(Q::int(2))),
                d(X::q(Q::int(3)), X::zero()),
                d(X::zero(), e(-1)),
            ],
        };
        let b = XT::<D> {
            shape: vec![2, 2],
            data: vec![
                d(e(2), X::zero()),
                d(X::zero(), X::zero()),
                d(X::q(Q::frac(1, 2)), e(1)),
                d(X::q(Q::int(-1)), X::q(Q::int(1))),
            ],
        };
        let spec = Einsum::parse("ij,jk->ik").unwrap();
        // Every product formed and added, in einsum's index order.
        let full = |a: &XT<D>, b: &XT<D>| {
            let mut out: Vec<D> = (0..4).map(|_| D::zero()).collect();
            for i in 0..2 {
                for j in 0..2 {
                    for k in 0..2 {
                        let p = D::q(&Q::one())
                            .mul(&a.data[i * 2 + j])
                            .unwrap()
                            .mul(&b.data[j * 2 + k])
                            .unwrap();
                        out[i * 2 + k] = out[i * 2 + k].add(&p).unwrap();
                    }
                }
            }
            out
        };
        let parts =
            |v: &[D]| -> Vec<(X, X)> { v.iter().map(|x| (x.v.clone(), x.d.clone())).collect() };
        let got = einsum(&spec, &[&a, &b]).unwrap();
        assert_eq!(parts(&got.data), parts(&full(&a, &b)));
        // `zero_is_zero` says what `zero().is_zero()` would.
        assert_eq!(X::zero_is_zero(), X::zero().is_zero());
        assert_eq!(D::zero_is_zero(), D::zero().is_zero());
        assert_eq!(Sym::zero_is_zero(), Sym::zero().is_zero());
        assert!(X::zero_is_zero());
        // `one_times` is `q(1).mul` itself, on every entry.
        for x in a.data.iter().chain(&b.data) {
            let want = D::q(&Q::one()).mul(x).unwrap();
            let got = x.one_times().unwrap();
            assert_eq!((got.v, got.d), (want.v, want.d));
        }
        let mut a2 = a.clone();
        a2.data[0] = d(X::q(Q::int(1)), X::zero());
        assert_ne!(
            parts(&einsum(&spec, &[&a2, &b]).unwrap().data),
            parts(&got.data)
        );
    }

    /// `DualsOf` carries several tangents at once. On expressions that use
    /// every operation of the field (exp, log, √, sin, cos, gelu's tanh,
    /// division, softmax, layernorm, an einsum), the value and component k
    /// of the derivative are, in the same normal form, what `DualOf`
    /// computes with tangent k alone; one tangent is zero throughout and
    /// the second input carries none. Where `DualOf` fails (√ at 0), so
    /// does `DualsOf`. The twin: with the tangents given in another order
    /// the components no longer agree.
    #[test]
    fn several_tangents_at_once_are_each_tangent_alone() {
        let x = [1i64, 2];
        let y = [3i64, -1];
        let tangents: [[Q; 2]; 4] = [
            [Q::one(), Q::zero()],
            [Q::zero(), Q::one()],
            [Q::zero(), Q::zero()],
            [Q::frac(1, 2), Q::int(-1)],
        ];
        let at_once = |ts: &[[Q; 2]]| -> Vec<XT<DualsOf<X>>> {
            let xs = XT {
                shape: vec![2],
                data: (0..2)
                    .map(|j| DualsOf {
                        v: X::q(Q::int(x[j])),
                        d: ts.iter().map(|t| X::q(t[j].clone())).collect(),
                    })
                    .collect(),
            };
            let ys = XT {
                shape: vec![2],
                data: y
                    .iter()
                    .map(|&v| DualsOf {
                        v: X::q(Q::int(v)),
                        d: vec![],
                    })
                    .collect(),
            };
            vec![xs, ys]
        };
        let alone = |t: &[Q; 2]| -> Vec<XT<Dual>> {
            let xs = XT {
                shape: vec![2],
                data: (0..2)
                    .map(|j| Dual {
                        v: X::q(Q::int(x[j])),
                        d: X::q(t[j].clone()),
                    })
                    .collect(),
            };
            let ys = XT {
                shape: vec![2],
                data: y
                    .iter()
                    .map(|&v| Dual {
                        v: X::q(Q::int(v)),
                        d: X::zero(),
                    })
                    .collect(),
            };
            vec![xs, ys]
        };
        let order = ["x".to_string(), "y".to_string()];
        let mut reversed_differs = 0;
        for src in [
            "exp(x) * y",
            "log(x + 3) / (y + 4)",
            "sqrt(x * x + 1) - y",
            "sin(x) + cos(y) * x",
            "gelu(x) * y",
            "tanh(x) + sigmoid(y)",
            "softmax(x * y, 0)",
            "layernorm(x + y, 0)",
            "einsum(\"i,i->\", exp(x), y)",
            "exp(y) + 1",
        ] {
            let f = crate::expr::parse_with_vars(src, &order).unwrap();
            let many = eval(&f.expr, &at_once(&tangents), &mut XCtx::default()).unwrap();
            for (k, t) in tangents.iter().enumerate() {
                let one = eval(&f.expr, &alone(t), &mut XCtx::default()).unwrap();
                assert_eq!(many.shape, one.shape, "{src}");
                for (a, b) in many.data.iter().zip(&one.data) {
                    assert_eq!(a.v, b.v, "{src}: value");
                    assert_eq!(a.d_at(k), b.d, "{src}: tangent {k}");
                }
            }
            let mut back = tangents.clone();
            back.reverse();
            let rev = eval(&f.expr, &at_once(&back), &mut XCtx::default()).unwrap();
            let one = eval(&f.expr, &alone(&tangents[0]), &mut XCtx::default()).unwrap();
            reversed_differs += usize::from(
                rev.data
                    .iter()
                    .zip(&one.data)
                    .any(|(a, b)| a.d_at(0) != b.d),
            );
        }
        // Every expression but `exp(y) + 1`, which does not read x, and
        // layernorm, which on two entries is ±1 and has no derivative.
        assert_eq!(reversed_differs, 8);
        // √ at 0 has no derivative: both refuse.
        let f = crate::expr::parse_with_vars("sqrt(x - 1) * y", &order).unwrap();
        assert!(eval(&f.expr, &alone(&tangents[0]), &mut XCtx::default()).is_err());
        assert!(eval(&f.expr, &at_once(&tangents), &mut XCtx::default()).is_err());
    }

    /// The hand-written VJP against the dual-number derivative, coordinate
    /// by coordinate: ⟨g, J e_k⟩ = (Jᵀ g)_k.
    fn agree(src: &str, x: &[i64], g: &[i64]) -> bool {
        let f = parse(src).unwrap();
        let xs = vec![xt(x)];
        let gt = xt(g);
        let back = vjp(&f.expr, &xs, &gt).unwrap();
        for k in 0..x.len() {
            let dual = XT {
                shape: vec![x.len()],
                data: (0..x.len())
                    .map(|j| Dual {
                        v: X::q(Q::int(x[j])),
                        d: X::q(Q::int(i64::from(j == k))),
                    })
                    .collect(),
            };
            let y = eval(&f.expr, &[dual], &mut XCtx::default()).unwrap();
            let mut pair = X::zero();
            for (yi, gi) in y.data.iter().zip(&gt.data) {
                pair = pair.add(&yi.d.mul(gi).unwrap()).unwrap();
            }
            if !pair.eq_exact(&back[0].data[k]).unwrap() {
                return false;
            }
        }
        true
    }

    #[test]
    fn hand_written_vjps_match_forward_mode() {
        for src in [
            "softmax(x, 0)",
            "layernorm(x, 0)",
            "rmsnorm(x, 0)",
            "exp(x) * x",
            "tanh(x)",
            "sigmoid(x)",
            "silu(x)",
            "cumsum(x, 0)",
            "rsqrt(x * x + 1)",
        ] {
            assert!(agree(src, &[1, 2, -1], &[1, 0, 2]), "{src}");
        }
        // logsumexp reduces: a scalar cotangent.
        let f = parse("logsumexp(x, 0)").unwrap();
        let g = XT {
            shape: vec![],
            data: vec![X::one()],
        };
        let b = vjp(&f.expr, &[xt(&[0, 1])], &g).unwrap();
        let e = X::exp_q(Q::one());
        let want = e.div(&X::one().add(&e).unwrap()).unwrap();
        assert!(b[0].data[1].eq_exact(&want).unwrap());
    }

    #[test]
    fn memoised_functions_are_the_plain_ones() {
        // Every function on rational arguments, asked twice (the second
        // answer from the memo), is what the plain computation gives,
        // errors included (log of a negative number, huge exponents).
        let funs = [
            Fun::Exp,
            Fun::Log,
            Fun::Sqrt,
            Fun::Rsqrt,
            Fun::Tanh,
            Fun::Sigmoid,
            Fun::Sin,
            Fun::Cos,
            Fun::Gelu,
            Fun::Silu,
        ];
        let args = ["0", "1", "-1", "2", "1/2", "-2", "8", "100000"];
        for _ in 0..2 {
            for f in funs {
                for a in args {
                    let x = X::q(Q::parse(a).unwrap());
                    assert_eq!(apply_fun(f, &x), apply_fun_plain(f, &x), "{f:?}({a})");
                }
            }
        }
    }

    #[test]
    fn the_memo_tells_functions_and_arguments_apart() {
        // The negative twin: a memo keyed by the argument alone (or the
        // function alone) would answer tanh 1 with sigmoid 1 (or tanh 2
        // with tanh 1); those differ, so the test above would see it.
        let (one, two) = (X::q(Q::one()), X::q(Q::int(2)));
        let _ = apply_fun(Fun::Sigmoid, &one);
        assert_ne!(
            apply_fun(Fun::Tanh, &one),
            apply_fun_plain(Fun::Sigmoid, &one)
        );
        assert_ne!(apply_fun(Fun::Tanh, &two), apply_fun_plain(Fun::Tanh, &one));
    }

    #[test]
    fn a_wrong_vjp_is_caught_by_the_same_comparison() {
        // The twin: sigmoid's slope taken as s instead of s(1 - s) differs
        // from forward mode, and the comparison says so.
        let x = X::q(Q::int(1));
        let s = apply_fun(Fun::Sigmoid, &x).unwrap();
        let d = apply_fun(
            Fun::Sigmoid,
            &Dual {
                v: x.clone(),
                d: X::one(),
            },
        )
        .unwrap()
        .d;
        assert!(!s.eq_exact(&d).unwrap());
        assert!(fun_slope(Fun::Sigmoid, &x).unwrap().eq_exact(&d).unwrap());
    }

    /// Over the symbolic domain the hand-written slope of every function it
    /// keeps is an identity with forward mode at a variable; the twin, a
    /// wrong slope, is not one, and `same` answers it as undecided rather
    /// than false (no point shows the difference).
    #[test]
    fn symbolic_slopes_are_identities_and_a_wrong_one_is_not() {
        let x = Sym::var(0);
        let dual = DualOf {
            v: x.clone(),
            d: Sym::q(Q::one()),
        };
        for f in [Fun::Exp, Fun::Tanh, Fun::Sigmoid, Fun::Silu, Fun::Gelu] {
            let d = apply_fun(f, &dual).unwrap().d;
            assert_eq!(fun_slope(f, &x).unwrap().same(&d), Ok(true), "{f:?}");
        }
        let s = apply_fun(Fun::Sigmoid, &x).unwrap();
        let d = apply_fun(Fun::Sigmoid, &dual).unwrap().d;
        assert!(matches!(s.same(&d), Err(XErr::Undecided(_))));
        for f in [Fun::Log, Fun::Sin, Fun::Cos] {
            assert!(
                matches!(apply_fun(f, &x), Err(XErr::Unsupported(_))),
                "{f:?}"
            );
        }
    }
}
