//! `TypedOp::backward_into` (a local op's VJP added into reused buffers)
//! against `TypedOp::backward` (fresh tensors): every rational built-in,
//! several meshes and shapes, one buffer written over by every case, so a
//! case starts from what another op, shape or rank count left there. Zero
//! cotangents on some ranks exercise the path that leaves exact zeros. The
//! twin, a fast path that adds into the old contents instead of zeros, is
//! caught at the case named.

use spmd_interp::eval::infer;
use spmd_interp::{builtin, TypedOp};
use spmd_semantics::state::State;
use spmd_semantics::tensor::Tensor;
use spmd_semantics::{Mesh, PerRank, Type, Q};

/// The built-ins whose backward `backward_into` computes itself: the
/// polynomial, rational and piecewise ones (the transcendental ones have
/// no exact VJP at rational points and take `backward`).
const OPS: &[&str] = &[
    "neg",
    "add",
    "sub",
    "mul",
    "div",
    "scale",
    "add_const",
    "square",
    "cube",
    "sum",
    "mean",
    "max",
    "matmul",
    "einsum",
    "transpose",
    "slice",
    "concat",
    "gather",
    "abs",
    "relu",
];

struct Lcg(u64);
impl Lcg {
    fn q(&mut self) -> Q {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = (self.0 >> 33) as i64;
        Q::frac(v % 19 - 9, v % 5 + 1)
    }
}

fn value(m: &Mesh, shape: &[usize], rng: &mut Lcg, zero_rank: Option<usize>) -> PerRank {
    PerRank {
        tensors: (0..m.num_ranks())
            .map(|r| {
                let n = shape.iter().product();
                let data = (0..n)
                    .map(|_| {
                        if Some(r) == zero_rank {
                            Q::zero()
                        } else {
                            rng.q()
                        }
                    })
                    .collect();
                Tensor::new(shape.to_vec(), data)
            })
            .collect(),
    }
}

type Into<'a> = &'a dyn Fn(&TypedOp, &Mesh, &[PerRank], &PerRank, &mut Vec<PerRank>);

/// The first case where `run` differs from `backward`, or how many cases
/// were compared.
fn check(run: Into) -> Result<usize, String> {
    let mut rng = Lcg(11);
    let mut cases = 0;
    let shapes: [&[usize]; 4] = [&[], &[2], &[2, 2], &[3, 2]];
    let meshes = [
        Mesh::line(1),
        Mesh::line(2),
        Mesh::line(3),
        Mesh::new(&[("x", 2), ("y", 2)]),
    ];
    // One buffer for everything.
    let mut buf: Vec<PerRank> = Vec::new();
    each_case(&meshes, &shapes, |c| {
        for zero_rank in [None, Some(0)] {
            let xs: Vec<PerRank> = (0..c.arity)
                .map(|_| value(c.m, c.s, &mut rng, None))
                .collect();
            let g = value(c.m, c.out_shape, &mut rng, zero_rank);
            let want = match c.op.backward(c.m, &xs, &g) {
                Ok(w) => w,
                Err(_) => continue, // outside the domain (div)
            };
            run(c.op, c.m, &xs, &g, &mut buf);
            if buf != want {
                return Err(format!(
                    "{} on mesh {} shape {:?} zero rank {zero_rank:?}",
                    c.name, c.m, c.s
                ));
            }
            cases += 1;
        }
        Ok(())
    })?;
    Ok(cases)
}

/// One op of `OPS` on one mesh and input shape, typed all Varying.
struct Case<'a> {
    m: &'a Mesh,
    name: &'a str,
    s: &'a [usize],
    arity: usize,
    op: &'a TypedOp,
    out_shape: &'a [usize],
}

/// `f` on every op of `OPS`, mesh and input shape the op accepts, in that
/// order; the first error stops the walk.
fn each_case(
    meshes: &[Mesh],
    shapes: &[&[usize]],
    mut f: impl FnMut(&Case) -> Result<(), String>,
) -> Result<(), String> {
    for m in meshes {
        for name in OPS {
            let fun = builtin(name).expect("a built-in");
            let arity = fun.arity();
            for &s in shapes {
                let ins = vec![s.to_vec(); arity];
                let Ok((out_shape, _)) = infer(&fun.expr, &ins) else {
                    continue;
                };
                let v = Type::one(State::Varying);
                let op = TypedOp::local(fun.clone(), vec![v.clone(); arity], v);
                f(&Case {
                    m,
                    name,
                    s,
                    arity,
                    op: &op,
                    out_shape: &out_shape,
                })?;
            }
        }
    }
    Ok(())
}

#[test]
fn backward_into_equals_backward() {
    let cases =
        check(&|op, m, xs, g, out| op.backward_into(m, xs, g, out).expect("in domain")).unwrap();
    eprintln!("{cases} cases");
    assert!(cases > 300, "{cases}");
}

#[test]
fn a_backward_into_that_adds_to_old_buffer_data_is_caught() {
    // Adds the right result to whatever the buffer held, where the shapes
    // happen to agree.
    let stale = |op: &TypedOp, m: &Mesh, xs: &[PerRank], g: &PerRank, out: &mut Vec<PerRank>| {
        let old = out.clone();
        op.backward_into(m, xs, g, out).expect("in domain");
        for (o, p) in out.iter_mut().zip(&old) {
            for (t, u) in o.tensors.iter_mut().zip(&p.tensors) {
                if t.shape == u.shape {
                    t.add_scaled(&Q::one(), u);
                }
            }
        }
    };
    let e = check(&stale).unwrap_err();
    assert_eq!(e, "neg on mesh {x: 1} shape [] zero rank Some(0)");
}

type Kept<'a> =
    &'a dyn Fn(&TypedOp, &Mesh, &[PerRank], &PerRank, &mut Vec<PerRank>, &mut bool) -> bool;

/// A cotangent zero on exactly the ranks in `zero`, nonzero elsewhere.
fn cotangent(m: &Mesh, shape: &[usize], rng: &mut Lcg, zero: &[usize]) -> PerRank {
    let mut g = value(m, shape, rng, None);
    for (r, t) in g.tensors.iter_mut().enumerate() {
        for q in &mut t.data {
            if zero.contains(&r) {
                *q = Q::zero();
            } else if q.is_zero() {
                *q = Q::one();
            }
        }
    }
    g
}

/// `backward_into_kept` as the oracle calls it (`run` returns whether the
/// call succeeded): per op, mesh and shape, one buffer and one flag per
/// cotangent zero pattern, kept across instances, some of them outside
/// the domain (a zero denominator), against `backward`. With `shared`,
/// the patterns share one buffer and flag, which breaks the contract.
fn check_kept(run: Kept, shared: bool) -> Result<(usize, usize), String> {
    let mut rng = Lcg(23);
    let (mut cases, mut outside) = (0, 0);
    let shapes: [&[usize]; 3] = [&[], &[2], &[2, 2]];
    let meshes = [
        Mesh::line(1),
        Mesh::line(3),
        Mesh::new(&[("x", 2), ("y", 2)]),
    ];
    each_case(&meshes, &shapes, |c| {
        let n = c.m.num_ranks();
        let patterns: Vec<Vec<usize>> = vec![vec![], vec![0], (1..n).collect()];
        let gs: Vec<PerRank> = patterns
            .iter()
            .map(|z| cotangent(c.m, c.out_shape, &mut rng, z))
            .collect();
        let mut bufs: Vec<(Vec<PerRank>, bool)> = vec![(Vec::new(), false); gs.len()];
        for instance in 0..4 {
            let xs: Vec<PerRank> = (0..c.arity)
                .map(|_| value(c.m, c.s, &mut rng, None))
                .collect();
            for (k, g) in gs.iter().enumerate() {
                let (buf, kept) = &mut bufs[if shared { 0 } else { k }];
                let ok = run(c.op, c.m, &xs, g, buf, kept);
                let want = c.op.backward(c.m, &xs, g);
                let here = format!(
                    "{} on mesh {} shape {:?} instance {instance} zero ranks {:?}",
                    c.name, c.m, c.s, patterns[k]
                );
                match want {
                    Ok(w) if ok && *buf == w => cases += 1,
                    Err(_) if !ok => outside += 1,
                    _ => return Err(here),
                }
            }
        }
        Ok(())
    })?;
    Ok((cases, outside))
}

fn kept_call(
    op: &TypedOp,
    m: &Mesh,
    xs: &[PerRank],
    g: &PerRank,
    out: &mut Vec<PerRank>,
    kept: &mut bool,
) -> bool {
    op.backward_into_kept(m, xs, g, out, kept).is_ok()
}

#[test]
fn backward_into_kept_equals_backward() {
    let (cases, outside) = check_kept(&kept_call, false).unwrap();
    eprintln!("{cases} cases, {outside} outside the domain");
    assert!(cases > 1000 && outside > 0, "{cases} {outside}");
}

#[test]
fn a_kept_buffer_shared_by_two_zero_patterns_is_caught() {
    // The contract broken: the rank the last cotangent wrote is not zeroed
    // for a cotangent that is zero there.
    let e = check_kept(&kept_call, true).unwrap_err();
    assert_eq!(e, "neg on mesh {x: 1} shape [] instance 0 zero ranks [0]");
}

#[test]
fn a_kept_path_that_adds_to_the_last_result_is_caught() {
    // Skips the zeroing of the ranks it writes, where it may claim `kept`.
    let stale = |op: &TypedOp,
                 m: &Mesh,
                 xs: &[PerRank],
                 g: &PerRank,
                 out: &mut Vec<PerRank>,
                 kept: &mut bool| {
        let (old, again) = (out.clone(), *kept);
        let ok = op.backward_into_kept(m, xs, g, out, kept).is_ok();
        if again {
            for (o, p) in out.iter_mut().zip(&old) {
                for (t, u) in o.tensors.iter_mut().zip(&p.tensors) {
                    t.add_scaled(&Q::one(), u);
                }
            }
        }
        ok
    };
    let e = check_kept(&stale, false).unwrap_err();
    assert_eq!(e, "neg on mesh {x: 1} shape [] instance 1 zero ranks []");
}
