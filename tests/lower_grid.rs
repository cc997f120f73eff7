//! The lower-set grid of SPEC.md §8.3: which degree bounds it rests on
//! (total degrees per input), where the full product grid stays, and the
//! declared parts of a rule whose degrees the grid must cover.

mod common;
use common::{rule_named, run, temp_rule_file};

use spmd_check::generators::{cases, Case, Scope};
use spmd_check::interp::eval::{eval, infer, Ctx};
use spmd_check::interp::external::External;
use spmd_check::interp::{parse, Backward, Op, TypedOp, BUILTINS};
use spmd_check::oracle::{Checker, Outcome, Phase};
use spmd_check::semantics::{Dialect, Mesh, Shape, State, Tensor, Type, Q};
use std::ops::ControlFlow;

/// Each wrong rule agrees with the right one on the first d + 1 values of
/// the forward's degree d (0 and 1), so a grid built from the forward's
/// degree alone called it a proof. Its right sibling stays a proof.
const DECLARED: &str = r#"
[[rule]]
name = "meaning of higher degree, wrong"
op = { expr = "x" }
meaning = "x * x"
inputs = ["V"]
output = "V"

[[rule]]
name = "meaning of higher degree, right"
op = { expr = "x" }
meaning = "x * x - x * x + x"
inputs = ["V"]
output = "V"

[[rule]]
name = "backward of higher degree, wrong"
op = { expr = "2 * x" }
backward = ["g * x * x - g * x + 2 * g"]
inputs = ["V"]
output = "V"

[[rule]]
name = "backward of the same degree, right"
op = { expr = "x * x" }
backward = ["2 * g * x"]
inputs = ["V"]
output = "V"

[[rule]]
name = "jvp of higher degree, wrong"
op = { expr = "x" }
jvp = "dx * x * x - dx * x + dx"
inputs = ["V"]
output = "V"

[[rule]]
name = "jvp of higher degree, right"
op = { expr = "x" }
jvp = "dx * x * x - dx * x * x + dx"
inputs = ["V"]
output = "V"
"#;

#[test]
fn declared_parts_of_higher_degree_widen_the_grid_or_end_the_proof() {
    let f = temp_rule_file("declared.toml", DECLARED);
    let (code, out, err) = run(&["check", &f, "--json", "--cases", "0"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let by = |n: &str| rule_named(&v, n);
    for (name, property) in [
        ("meaning of higher degree, wrong", "F3"),
        ("backward of higher degree, wrong", "B3"),
        ("jvp of higher degree, wrong", "J1"),
    ] {
        let r = by(name);
        assert_eq!(r["verdict"], "unsound", "{name}: {r}");
        assert_eq!(r["property"], property, "{name}: {r}");
    }
    for name in [
        "meaning of higher degree, right",
        "backward of the same degree, right",
        "jvp of higher degree, right",
    ] {
        let r = by(name);
        assert_eq!(r["verdict"], "sound", "{name}: {r}");
        assert_eq!(r["proof"], true, "{name}: {r}");
    }
}

/// Values for the probes below: a fixed sequence over small rationals.
fn probe(seed: &mut u64) -> Q {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let n = ((*seed >> 33) % 7) as i64 - 3;
    let d = ((*seed >> 40) % 3) as i64 + 1;
    Q::frac(n, d)
}

fn tensor(shape: &Shape, seed: &mut u64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::new(shape.clone(), (0..n).map(|_| probe(seed)).collect())
}

/// The (d+1)-th finite difference of h ↦ f(x + h·v) over h = 0..=d+1 is
/// zero for every output entry exactly when that line is a polynomial of
/// degree at most d. `unit`: v moves one coordinate of input i (what the
/// oracle's extra sample of §5.2 sees); otherwise v moves every coordinate
/// of input i at once (what a total degree bounds).
fn line_degree_at_most(
    expr: &spmd_check::interp::Expr,
    shapes: &[Shape],
    i: usize,
    d: u32,
    unit: Option<usize>,
    seed: &mut u64,
) -> bool {
    let x: Vec<Tensor> = shapes.iter().map(|s| tensor(s, seed)).collect();
    let mut v = tensor(&shapes[i], seed);
    if let Some(c) = unit {
        for (k, q) in v.data.iter_mut().enumerate() {
            *q = if k == c { Q::one() } else { Q::zero() };
        }
    }
    let at = |h: i64| -> Tensor {
        let mut xs = x.clone();
        for (a, b) in xs[i].data.iter_mut().zip(&v.data) {
            *a = a.add(&b.mul(&Q::int(h)));
        }
        eval(expr, &xs, &mut Ctx::default()).unwrap()
    };
    let n = d as i64 + 1;
    // Σ_j (-1)^(n-j) C(n, j) f(j).
    let mut acc: Option<Vec<Q>> = None;
    let mut binom = Q::one();
    for j in 0..=n {
        let sign = if (n - j) % 2 == 0 {
            Q::one()
        } else {
            Q::int(-1)
        };
        let w = sign.mul(&binom);
        let y = at(j);
        let acc = acc.get_or_insert_with(|| vec![Q::zero(); y.data.len()]);
        for (a, b) in acc.iter_mut().zip(&y.data) {
            *a = a.add(&w.mul(b));
        }
        binom = binom.mul(&Q::frac(n - j, j + 1));
    }
    acc.unwrap().iter().all(Q::is_zero)
}

/// Every polynomial built-in op and a few compositions: the inferred degree
/// of input i bounds the degree along every direction that moves input i,
/// which is a bound on the total degree in input i's scalars (the premise
/// of the lower-set grid, SPEC.md §8.3), on every shape tuple of a small
/// scope.
#[test]
fn inferred_degrees_bound_the_total_degree() {
    let extra = [
        "x * y + x",
        "matmul(x, transpose(x))",
        "einsum(\"ij,jk->ik\", x, matmul(x, y))",
        "sum(x * x, 0) * y",
        "concat(x * y, y, 0)",
        "(x + y)^3 - x",
        "mean(x, 0) * mean(x, 0)",
        "slice(x, 0, 0, 1) * slice(x, 0, 1, 2)",
        "take(x, 0, [1, 0]) * x",
        "dynamic_update_slice(x * x, y, [0])",
    ];
    let exprs: Vec<&str> = BUILTINS.iter().map(|(_, e)| *e).chain(extra).collect();
    let scope = Scope {
        max_dim: 2,
        ..Scope::default()
    };
    let mut seed = 7u64;
    let mut checked = 0;
    for text in exprs {
        let f = parse(text).unwrap();
        let k = f.arity();
        for shapes in spmd_check::generators::tuples(&scope.shapes(), k) {
            let Ok((_, deg)) = infer(&f.expr, &shapes) else {
                continue;
            };
            if !deg.is_polynomial() {
                continue;
            }
            for i in 0..k {
                for _ in 0..3 {
                    assert!(
                        line_degree_at_most(&f.expr, &shapes, i, deg.num[i], None, &mut seed),
                        "`{text}` on {shapes:?}: degree {} in input {i} is too small",
                        deg.num[i]
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500, "{checked}");
}

/// Negative twin of the probe above: x0·x1 has degree 1 along every unit
/// direction, so the oracle's extra sample (§5.2) cannot tell a claimed
/// degree 1 from the true total degree 2; the dense direction can.
#[test]
fn a_per_coordinate_degree_passes_unit_lines_and_fails_dense_ones() {
    let f = parse("slice(x, 0, 0, 1) * slice(x, 0, 1, 2)").unwrap();
    let shapes = vec![vec![2]];
    let mut seed = 11u64;
    for c in 0..2 {
        assert!(line_degree_at_most(
            &f.expr,
            &shapes,
            0,
            1,
            Some(c),
            &mut seed
        ));
    }
    let dense_fails = (0..5).any(|_| !line_degree_at_most(&f.expr, &shapes, 0, 1, None, &mut seed));
    assert!(dense_fails);
    // The inferred bound is the total degree, 2.
    assert_eq!(infer(&f.expr, &shapes).unwrap().1.num, vec![2]);
}

/// x ↦ x₀·x₁ on a 2-vector, declared of degree 1: true along each
/// coordinate, while the total degree is 2. Its backward for x₁ is off by
/// g·x₀·x₁, of degree 1 in each coordinate too, so it is wrong only where
/// x₀ and x₁ are both nonzero.
fn kernel() -> External {
    let two = |s: &[Shape]| -> Result<Shape, String> {
        if s == [vec![2]] {
            Ok(vec![1])
        } else {
            Err(format!("takes a 2-vector, not {s:?}"))
        }
    };
    External::new("prod", vec!["x".to_string()], vec![1], |a: &[&Tensor]| {
        Ok(Tensor::new(vec![1], vec![a[0].data[0].mul(&a[0].data[1])]))
    })
    .with_shape(two)
    .with_backward(|a: &[&Tensor], g: &Tensor| {
        let (x0, x1, g) = (&a[0].data[0], &a[0].data[1], &g.data[0]);
        let dx1 = g.mul(x0).add(&g.mul(x0).mul(x1));
        Ok(vec![Tensor::new(vec![2], vec![g.mul(x1), dx1])])
    })
}

fn first_failure(op: &TypedOp, c: &Case) -> Option<String> {
    let checker = Checker::new(op, &c.mesh, c.shapes.clone()).unwrap();
    let r = c.for_each_point(
        &mut |p| match checker.check(&c.inputs(op, p), Phase::full(true)) {
            Outcome::Fail(v) => ControlFlow::Break(v.property.code().to_string()),
            _ => ControlFlow::Continue(()),
        },
    );
    match r {
        ControlFlow::Break(p) => Some(p),
        ControlFlow::Continue(()) => None,
    }
}

/// A kernel's declared degree is a claim per coordinate (§20.4), so its
/// cases keep the product grid, which finds the wrong backward; the lower
/// set of the same degree (the twin) passes it on every case, which is why
/// kernels do not get it. Built-in ops do.
#[test]
fn kernels_keep_the_product_grid() {
    let v = Type::one(State::Varying);
    let op = TypedOp {
        op: Op::External(kernel()),
        inputs: vec![v.clone()],
        output: v.clone(),
        backward: Backward::LocalVjp,
        jvp: None,
        no_grad: vec![],
    };
    let scope = Scope::default();
    let meshes = vec![Mesh::line(1)];
    let (cs, _) = cases(&op, &scope, &meshes);
    assert!(!cs.is_empty());
    assert!(cs
        .iter()
        .all(|c| c.proof_grid && c.budgets.iter().all(Option::is_none)));
    assert!(cs
        .iter()
        .any(|c| first_failure(&op, c).as_deref() == Some("B3")));
    let lower: Vec<Case> = cs
        .into_iter()
        .map(|c| Case {
            budgets: vec![Some(1)],
            points_known: None,
            ..c
        })
        .collect();
    assert!(lower.iter().all(|c| first_failure(&op, c).is_none()));
    // End to end: unsound B3.
    let rep = spmd_check::check_external(
        kernel(),
        &["V"],
        "V",
        Dialect::SpmdTypes,
        &spmd_check::check::CheckConfig {
            scope: Scope::default(),
            cases: 0,
            seed: 0,
        },
    )
    .unwrap();
    assert_eq!(rep.verdict.violation().unwrap().property.code(), "B3");
    // The built-in x * y gets the lower set: degree 1 per input, so
    // zero and the unit points of each input.
    let mul = TypedOp::local(parse("x * y").unwrap(), vec![v.clone(), v.clone()], v);
    let (cs, _) = cases(&mul, &scope, &meshes);
    assert!(cs.iter().all(|c| c.budgets == vec![Some(1), Some(1)]));
    let c = cs
        .iter()
        .find(|c| c.shapes == vec![vec![2], vec![2]])
        .unwrap();
    assert_eq!(c.points(), 9);
}
