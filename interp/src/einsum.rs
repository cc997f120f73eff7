//! Einsum: its plans (made once per spec and operand shapes, and kept per
//! thread), the contraction loop, and the VJP of an einsum node.

use crate::eval::{backprop, ev, Ctx, EvalError};
use crate::expr::{Einsum, Expr};
use crate::infer::einsum_sizes;
use spmd_semantics::tensor::{numel, strides};
use spmd_semantics::{Shape, Tensor, Q};
use std::borrow::{Borrow, Cow};
use std::cell::RefCell;
use std::rc::Rc;

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

/// The operands of operand `k`'s VJP einsum (`operand_vjp_spec`): the
/// cotangent `g`, then every other operand in order.
pub(crate) fn vjp_operands<'a, T: ?Sized>(
    g: &'a T,
    vals: impl IntoIterator<Item = &'a T>,
    k: usize,
) -> Vec<&'a T> {
    std::iter::once(g)
        .chain(
            vals.into_iter()
                .enumerate()
                .filter(|&(j, _)| j != k)
                .map(|(_, v)| v),
        )
        .collect()
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
pub(crate) fn einsum_vjp_general<T: Borrow<Tensor>>(
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
        let ops = vjp_operands(g, vals.iter().map(|v| &**v), k);
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
pub(crate) fn einsum_vjp_flat<T: Borrow<Tensor>>(
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
pub(crate) const FLAT_OPS: usize = 8;

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
    use crate::eval::eval;
    use crate::expr::parse;
    use spmd_semantics::tensor::unravel;

    fn t(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), v.iter().map(|&x| Q::int(x)).collect())
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
