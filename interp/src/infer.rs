//! Shape and degree inference of local expressions (SPEC.md §6.2, §8.3),
//! and the search for the viable tuples of a function's subexpressions
//! (SPEC.md §18.9).

use crate::expr::{DimOp, Einsum, Expr, Mask};
use spmd_semantics::tensor::numel;
use spmd_semantics::Shape;

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

pub(crate) fn elementwise_shape(a: &[usize], b: &[usize]) -> Result<Shape, String> {
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
pub(crate) fn einsum_sizes(s: &Einsum, shapes: &[Shape]) -> Result<Vec<(char, usize)>, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse;

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
}
