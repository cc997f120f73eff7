//! The entrywise sample of SPEC.md §18.8: for a pointwise expression, an
//! input that `pointwise_inputs` marks has the output's entries one for
//! one, so moving some of its entries changes only those output entries,
//! and `eval_at` recomputes each one as `eval_into` would (value, kink,
//! division by zero). Checked against a full `eval_into` at the moved
//! inputs, for expressions with scalar (broadcast) inputs, kinks and
//! quotients. The twin, which also updates entry by entry along an input
//! read by every entry, is caught.

use spmd_interp::eval::{eval_at, eval_into, pointwise_inputs, Ctx};
use spmd_interp::{parse_with_vars, EvalError};
use spmd_semantics::tensor::Tensor;
use spmd_semantics::Q;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
    /// Small values with zeros and ties, so kinks and zero denominators
    /// occur.
    fn q(&mut self) -> Q {
        Q::frac(self.next(7) as i64 - 3, self.next(2) as i64 + 1)
    }
}

/// `src` as a function of x and y, in that order.
fn parse2(src: &str) -> Result<spmd_interp::LocalFn, spmd_interp::ParseError> {
    parse_with_vars(src, &["x".to_string(), "y".to_string()])
}

const EXPRS: &[&str] = &[
    "x * y",
    "x + y * 3",
    "x / (y + 1)",
    "relu(x) * y - abs(y)",
    "x^3 - 2 * x * y",
    "-x / y",
    "floor(x) + y",
];

type Update<'a> = &'a dyn Fn(&str, &[Tensor], usize, &[usize], &mut Tensor) -> Option<bool>;

/// `pointwise_inputs` for `src` on the shapes of `xs`.
fn marked(src: &str, xs: &[Tensor]) -> Option<Vec<bool>> {
    let e = parse2(src).expect("parses");
    let shapes: Vec<Vec<usize>> = xs.iter().map(|t| t.shape.clone()).collect();
    pointwise_inputs(&e.expr, &shapes)
}

/// Entry by entry as the oracle does: `None` when the input is not marked
/// (the caller then evaluates in full).
fn entrywise(
    src: &str,
    xs: &[Tensor],
    i: usize,
    moved: &[usize],
    out: &mut Tensor,
) -> Option<bool> {
    marked(src, xs)?[i].then(|| update(src, xs, moved, out))
}

/// The twin: entry by entry whatever the input's shape.
fn regardless(
    src: &str,
    xs: &[Tensor],
    _i: usize,
    moved: &[usize],
    out: &mut Tensor,
) -> Option<bool> {
    marked(src, xs).map(|_| update(src, xs, moved, out))
}

/// Recompute output entries `moved` (entry k of the output for entry k of
/// the input, or entry 0 of a scalar input): `Some` kink flag, or the
/// division by zero as `false` with `out` left as it is.
fn update(src: &str, xs: &[Tensor], moved: &[usize], out: &mut Tensor) -> bool {
    let e = parse2(src).expect("parses");
    let mut ctx = Ctx::default();
    for &k in moved {
        match eval_at(&e.expr, xs, k, &mut ctx) {
            Ok(v) => out.data[k] = v,
            Err(EvalError::DivByZero) => return false,
            Err(s) => panic!("{s:?}"),
        }
    }
    ctx.at_kink
}

/// The first case where `run` differs from a full evaluation at the moved
/// inputs, or how many cases agreed.
fn check(run: Update) -> Result<usize, String> {
    let mut rng = Lcg(5);
    let shapes: [&[usize]; 4] = [&[], &[1], &[3], &[2, 2]];
    let mut cases = 0;
    for src in EXPRS {
        let e = parse2(src).expect("parses");
        for sx in shapes {
            for sy in shapes {
                for _ in 0..12 {
                    let mut xs: Vec<Tensor> = [sx, sy]
                        .iter()
                        .map(|s| {
                            let n = s.iter().product();
                            Tensor::new(s.to_vec(), (0..n).map(|_| rng.q()).collect())
                        })
                        .collect();
                    let mut base = Tensor::zeros(&[]);
                    if eval_into(&e.expr, &xs, &mut Ctx::default(), &mut base).is_err() {
                        continue; // the instance is outside the domain
                    }
                    let i = rng.next(2) as usize;
                    let n = xs[i].data.len();
                    let moved: Vec<usize> = (0..n).filter(|_| rng.next(2) == 0).collect();
                    for &k in &moved {
                        xs[i].data[k] = xs[i].data[k].add(&rng.q());
                    }
                    let mut full = Tensor::zeros(&[]);
                    let mut ctx = Ctx::default();
                    let want = eval_into(&e.expr, &xs, &mut ctx, &mut full).map(|_| ());
                    let mut got = base.clone();
                    let Some(kink) = run(src, &xs, i, &moved, &mut got) else {
                        continue;
                    };
                    let here = format!("`{src}` x{sx:?} y{sy:?} moving input {i} at {moved:?}");
                    match want {
                        Err(_) => {
                            // A zero denominator: it is at a moved entry
                            // (the instance was in the domain), so the
                            // entrywise update must meet it too.
                            if update(src, &xs, &moved, &mut base.clone()) {
                                return Err(format!("{here}: missed a division by zero"));
                            }
                        }
                        Ok(()) => {
                            if got != full {
                                return Err(format!("{here}: {got:?} is not {full:?}"));
                            }
                            // A kink the full evaluation meets off the moved
                            // entries is the instance's own, which the
                            // oracle never samples.
                            if kink && !ctx.at_kink {
                                return Err(format!(
                                    "{here}: a kink the full forward does not meet"
                                ));
                            }
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    Ok(cases)
}

#[test]
fn an_entrywise_sample_is_the_full_forward() {
    let cases = check(&entrywise).unwrap();
    eprintln!("{cases} cases");
    assert!(cases > 500, "{cases}");
}

#[test]
fn an_entrywise_sample_along_a_broadcast_input_is_caught() {
    let e = check(&regardless).unwrap_err();
    assert!(e.contains("is not"), "{e}");
}

#[test]
fn pointwise_inputs_marks_inputs_with_the_outputs_entries() {
    let e = parse2("x * y + 1").expect("parses");
    let s = |v: &[usize]| v.to_vec();
    assert_eq!(
        pointwise_inputs(&e.expr, &[s(&[2, 2]), s(&[])]),
        Some(vec![true, false])
    );
    assert_eq!(
        pointwise_inputs(&e.expr, &[s(&[3]), s(&[3])]),
        Some(vec![true, true])
    );
    // Not pointwise on these shapes (elementwise needs equal shapes or a
    // scalar), and no output entries.
    assert_eq!(pointwise_inputs(&e.expr, &[s(&[2]), s(&[3])]), None);
    assert_eq!(pointwise_inputs(&e.expr, &[s(&[0]), s(&[])]), None);
    let m = parse2("matmul(x, y)").expect("parses");
    assert_eq!(pointwise_inputs(&m.expr, &[s(&[2, 2]), s(&[2, 2])]), None);
}

/// A binary node on variables and constants (`x * y`, `3 * x`, `x - 2`, ...)
/// is evaluated in one loop over the entries instead of walking the tree
/// (SPEC.md §18.8). `run` evaluates such an expression in full into a
/// buffer and at single entries; it is compared with `eval` (the tree
/// walk), values and divisions by zero alike. Returns the first
/// difference, or how many evaluations agreed.
type Leafwise<'a> = &'a dyn Fn(
    &spmd_interp::Expr,
    &[Tensor],
    &mut Tensor,
    usize,
) -> (Result<(), EvalError>, Option<Q>);

fn compare_leafwise(run: Leafwise) -> Result<usize, String> {
    let mut rng = Lcg(23);
    let srcs = [
        "x * y", "x + y", "x - y", "x / y", "3 * x", "x - 2", "2 / y", "y * x",
    ];
    let shapes: [&[usize]; 3] = [&[], &[3], &[2, 2]];
    let mut agreed = 0;
    for src in srcs {
        let e = parse2(src).expect("parses");
        for sx in shapes {
            for sy in shapes {
                for _ in 0..10 {
                    let xs: Vec<Tensor> = [sx, sy]
                        .iter()
                        .map(|s| {
                            let n = s.iter().product();
                            Tensor::new(s.to_vec(), (0..n).map(|_| rng.q()).collect())
                        })
                        .collect();
                    if pointwise_inputs(&e.expr, &[sx.to_vec(), sy.to_vec()]).is_none() {
                        continue;
                    }
                    let want = spmd_interp::eval::eval(&e.expr, &xs, &mut Ctx::default());
                    // An entry of the output (the first where it is
                    // outside the domain).
                    let n = want.as_ref().map_or(1, |w| w.data.len());
                    let k = rng.next(n as u64) as usize;
                    let mut got = Tensor::new(vec![7], vec![Q::int(7); 7]);
                    let (full, at) = run(&e.expr, &xs, &mut got, k);
                    let here = format!("`{src}` x{sx:?} y{sy:?}");
                    match (&want, full) {
                        (Ok(w), Ok(())) => {
                            if &got != w || at.as_ref() != Some(&w.data[k]) {
                                return Err(format!("{here}: {got:?} / {at:?} is not {w:?}"));
                            }
                        }
                        (Err(_), Err(_)) => {}
                        (w, g) => return Err(format!("{here}: {w:?} against {g:?}")),
                    }
                    agreed += 1;
                }
            }
        }
    }
    Ok(agreed)
}

#[test]
fn a_leafwise_binary_node_is_the_tree_walk() {
    let real: Leafwise = &|e, xs, out, k| {
        let full = eval_into(e, xs, &mut Ctx::default(), out);
        let at = eval_at(e, xs, k, &mut Ctx::default()).ok();
        (full, at)
    };
    let n = compare_leafwise(real).unwrap();
    assert!(n > 300, "{n}");
}

#[test]
fn a_leafwise_loop_that_swaps_its_operands_is_caught() {
    // `x - y` computed as `y - x`: what a loop reading its leaves in the
    // wrong order would give.
    let swapped: Leafwise = &|e, xs, out, k| {
        let e = match e {
            spmd_interp::Expr::Sub(a, b) => spmd_interp::Expr::Sub(b.clone(), a.clone()),
            e => e.clone(),
        };
        let full = eval_into(&e, xs, &mut Ctx::default(), out);
        let at = eval_at(&e, xs, k, &mut Ctx::default()).ok();
        (full, at)
    };
    let err = compare_leafwise(swapped).unwrap_err();
    assert!(err.contains("x - y") || err.contains("x - 2"), "{err}");
}
