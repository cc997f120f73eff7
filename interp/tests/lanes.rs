//! The lane analysis (SPEC.md §8.5) against the evaluators: moving an
//! input entry of lane κ changes no output entry of another lane, and the
//! VJP of a unit cotangent in lane κ is zero off lane κ and does not read
//! the inputs of other lanes. Checked on the exact field for every
//! expression (the path of transcendental ops) and on rationals for the
//! rational ones (the path of the others). Twins: lane maps that split a
//! softmax row, or attention's queries, are caught.

use spmd_interp::eval::{eval, vjp, Ctx};
use spmd_interp::lanes::{lanes, total, Lanes};
use spmd_interp::transcendental::{self as tr, is_transcendental, XCtx, XT};
use spmd_interp::{parse, Expr};
use spmd_semantics::expoly::X;
use spmd_semantics::tensor::numel;
use spmd_semantics::{Shape, Tensor, Q};

/// Deterministic small rationals: -2, -1, -1/2, 0, 1/2, 1, 2 in a
/// scrambled order.
fn values(n: usize, seed: usize) -> Vec<Q> {
    const V: [(i64, i64); 7] = [(1, 2), (-1, 1), (2, 1), (0, 1), (-1, 2), (1, 1), (-2, 1)];
    (0..n)
        .map(|k| {
            let (a, b) = V[(k * 5 + seed * 3 + k * k) % 7];
            Q::frac(a, b)
        })
        .collect()
}

fn same(a: &XT<X>, b: &XT<X>, k: usize) -> bool {
    a.data[k].eq_exact(&b.data[k]).expect("decidable")
}

fn x_eval(e: &Expr, xs: &[Tensor]) -> XT<X> {
    let args: Vec<XT<X>> = xs.iter().map(XT::from_q).collect();
    tr::eval(e, &args, &mut XCtx::default()).expect("total")
}

fn x_vjp(e: &Expr, xs: &[Tensor], g: &Tensor) -> Vec<XT<X>> {
    let args: Vec<XT<X>> = xs.iter().map(XT::from_q).collect();
    tr::vjp(e, &args, &XT::from_q(g)).expect("total")
}

/// Whether the evaluators respect the lane map `l` of `e` at `shapes`, at a
/// few points; the first disagreement otherwise.
fn respects(e: &Expr, shapes: &[Shape], l: &Lanes) -> Result<(), String> {
    let out_shape = tr::out_shape(e, shapes).expect("infers");
    let out_keys = Lanes::keys(&l.out_dims, &out_shape);
    let in_keys: Vec<Option<Vec<u64>>> = l
        .in_dims
        .iter()
        .zip(shapes)
        .map(|(d, s)| d.as_ref().map(|d| Lanes::keys(d, s)))
        .collect();
    let rational = !is_transcendental(e);
    for seed in 0..3 {
        let xs: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::new(s.clone(), values(numel(s), seed * 7 + i)))
            .collect();
        let y = x_eval(e, &xs);
        let n_out = numel(&out_shape);
        let units: Vec<Tensor> = (0..n_out)
            .map(|k| {
                let mut g = Tensor::zeros(&out_shape);
                g.data[k] = Q::one();
                g
            })
            .collect();
        let bs: Vec<Vec<XT<X>>> = units.iter().map(|g| x_vjp(e, &xs, g)).collect();
        // The VJP of a unit cotangent is zero off its lane.
        for (k, b) in bs.iter().enumerate() {
            for (i, bi) in b.iter().enumerate() {
                for (j, v) in bi.data.iter().enumerate() {
                    // A shared input may be written anywhere.
                    let off = match &in_keys[i] {
                        Some(keys) => keys[j] != out_keys[k],
                        None => !l.shared[i],
                    };
                    if off && !v.eq_exact(&X::zero()).expect("decidable") {
                        return Err(format!(
                            "VJP of output entry {k} reaches entry {j} of input {i}"
                        ));
                    }
                }
            }
        }
        // A shared input is read by every lane: nothing to check.
        for i in (0..shapes.len()).filter(|&i| !l.shared[i]) {
            for j in 0..numel(&shapes[i]) {
                let mut moved = xs.clone();
                moved[i].data[j] = moved[i].data[j].add(&Q::one());
                let y2 = x_eval(e, &moved);
                let key = in_keys[i].as_ref().map(|k| k[j]);
                for (k, &ok) in out_keys.iter().enumerate() {
                    if key != Some(ok) && !same(&y, &y2, k) {
                        return Err(format!(
                            "moving entry {j} of input {i} changes output entry {k}"
                        ));
                    }
                    if key == Some(ok) {
                        continue;
                    }
                    // The VJP of another lane does not read the moved entry.
                    let b2 = x_vjp(e, &moved, &units[k]);
                    for (a, b) in bs[k].iter().zip(&b2) {
                        if (0..a.data.len()).any(|t| !same(a, b, t)) {
                            return Err(format!(
                                "the VJP of output entry {k} reads entry {j} of input {i}"
                            ));
                        }
                    }
                    if rational {
                        let r1 = vjp(e, &xs, &units[k]).expect("total");
                        let r2 = vjp(e, &moved, &units[k]).expect("total");
                        if r1 != r2 {
                            return Err(format!(
                                "the rational VJP of output entry {k} reads entry {j} of input {i}"
                            ));
                        }
                    }
                }
                if rational {
                    let a = eval(e, &xs, &mut Ctx::default()).expect("total");
                    let b = eval(e, &moved, &mut Ctx::default()).expect("total");
                    for (k, &ok) in out_keys.iter().enumerate() {
                        if key != Some(ok) && a.data[k] != b.data[k] {
                            return Err(format!(
                                "rationally, entry {j} of input {i} changes output entry {k}"
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn shapes(s: &[&[usize]]) -> Vec<Shape> {
    s.iter().map(|d| d.to_vec()).collect()
}

/// Expressions, their shapes and the output lane dims the analysis must
/// find.
fn catalogue() -> Vec<(&'static str, Vec<Shape>, Vec<usize>)> {
    vec![
        ("softmax(x, 1)", shapes(&[&[3, 2]]), vec![0]),
        ("softmax(x, 0)", shapes(&[&[3, 2]]), vec![1]),
        (
            "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)",
            shapes(&[&[2, 2, 2], &[2, 3, 2], &[2, 3, 2]]),
            vec![0],
        ),
        (
            "einsum(\"bij,bjk->bik\", a, b)",
            shapes(&[&[2, 2, 3], &[2, 3, 2]]),
            vec![0],
        ),
        ("x * y", shapes(&[&[2, 3], &[2, 3]]), vec![0, 1]),
        ("exp(x) * y - 2", shapes(&[&[2, 2], &[2, 2]]), vec![0, 1]),
        // A scalar is read whole by every entry: a shared input.
        ("x * sum(y, 0)", shapes(&[&[2], &[3]]), vec![0]),
        ("x - y", shapes(&[&[2, 2], &[]]), vec![0, 1]),
        (
            "a * b * c * d",
            shapes(&[&[2, 2], &[], &[2, 2], &[]]),
            vec![0, 1],
        ),
        ("x * y + sum(x * x, 0)", shapes(&[&[2], &[2]]), vec![0]),
        ("exp(x * s) + t", shapes(&[&[3], &[], &[]]), vec![0]),
        ("softmax(x, 1) * s", shapes(&[&[2, 2], &[]]), vec![0]),
        ("concat(x, y, 1)", shapes(&[&[2, 1], &[2, 2]]), vec![0]),
        ("slice(x, 1, 0, 2)", shapes(&[&[2, 3]]), vec![0]),
        ("cumsum(x, 1)", shapes(&[&[2, 3]]), vec![0]),
        ("reshape(x, [2, 3, 1])", shapes(&[&[2, 3]]), vec![0, 1]),
        ("reshape(x, [3, 2])", shapes(&[&[2, 3]]), vec![]),
        ("logsumexp(x, 1)", shapes(&[&[3, 2]]), vec![0]),
        (
            "dynamic_update_slice(x, u, [0, 1])",
            shapes(&[&[2, 3], &[2, 1]]),
            vec![0],
        ),
        ("take(x, 1, [2, 0])", shapes(&[&[2, 3]]), vec![0]),
        (
            "tanh(x) + sigmoid(y)",
            shapes(&[&[2, 2], &[2, 2]]),
            vec![0, 1],
        ),
        ("einsum(\"ij->ji\", x)", shapes(&[&[2, 3]]), vec![0, 1]),
        ("mean(x, 0) / 2", shapes(&[&[3, 2]]), vec![0]),
        (
            "cross_entropy(x, t, 1)",
            shapes(&[&[2, 3], &[2, 3]]),
            vec![0],
        ),
        ("x * x + pow(y, 2)", shapes(&[&[2], &[2]]), vec![0]),
    ]
}

#[test]
fn lanes_are_respected_by_the_evaluators() {
    for (text, s, want) in catalogue() {
        let f = parse(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        let l = lanes(&f.expr, &s).unwrap_or_else(|| panic!("{text}: no analysis"));
        assert_eq!(l.out_dims, want, "{text}");
        respects(&f.expr, &s, &l).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}

#[test]
fn lane_maps_that_split_what_is_read_together_are_caught() {
    // A softmax row split into lanes of one entry.
    let f = parse("softmax(x, 1)").expect("parses");
    let wrong = Lanes {
        out_dims: vec![0, 1],
        in_dims: vec![Some(vec![0, 1])],
        shared: vec![false],
    };
    let e = respects(&f.expr, &shapes(&[&[3, 2]]), &wrong).expect_err("caught");
    assert!(
        e.contains("changes output entry") || e.contains("VJP"),
        "{e}"
    );
    // Attention's queries as lanes: every query reads every key.
    let f = parse("einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)")
        .expect("parses");
    let wrong = Lanes {
        out_dims: vec![0, 1],
        in_dims: vec![Some(vec![0, 1]), Some(vec![0, 1]), Some(vec![0, 1])],
        shared: vec![false; 3],
    };
    let s = shapes(&[&[2, 2, 2], &[2, 2, 2], &[2, 2, 2]]);
    assert!(respects(&f.expr, &s, &wrong).is_err());
    // A sum over rows: the analysis has no lane; claiming one is caught.
    let f = parse("x * sum(y, 0)").expect("parses");
    let wrong = Lanes {
        out_dims: vec![0],
        in_dims: vec![Some(vec![0]), Some(vec![0])],
        shared: vec![false; 2],
    };
    assert!(respects(&f.expr, &shapes(&[&[3], &[3]]), &wrong).is_err());
    // The same with y's sharing left out: y read by no lane.
    let mut wrong = lanes(&f.expr, &shapes(&[&[3], &[3]])).expect("analysed");
    assert_eq!(wrong.shared, [false, true]);
    wrong.shared[1] = false;
    let e = respects(&f.expr, &shapes(&[&[3], &[3]]), &wrong).expect_err("caught");
    assert!(e.contains("of input 1"), "{e}");
    // A broadcast scalar not shared: every entry reads it.
    let f = parse("a * b * c * d").expect("parses");
    let s = shapes(&[&[2, 2], &[], &[2, 2], &[]]);
    let mut wrong = lanes(&f.expr, &s).expect("analysed");
    assert_eq!(wrong.shared, [false, true, false, true]);
    wrong.shared[3] = false;
    let e = respects(&f.expr, &s, &wrong).expect_err("caught");
    assert!(e.contains("of input 3"), "{e}");
}

/// Which inputs are shared: those a scalar subexpression reads, or read
/// beside a lane along no dim of theirs.
#[test]
fn scalars_make_the_inputs_they_read_shared() {
    for (text, s, want) in [
        ("x * sum(y, 0)", shapes(&[&[2], &[3]]), vec![false, true]),
        (
            "x * y + sum(x * x, 0)",
            shapes(&[&[2], &[2]]),
            vec![true, false],
        ),
        ("x - y", shapes(&[&[2, 2], &[]]), vec![false, true]),
        ("x * y", shapes(&[&[2, 3], &[2, 3]]), vec![false, false]),
        ("x * y", shapes(&[&[], &[]]), vec![false, false]),
        (
            "softmax(x, 1) * s",
            shapes(&[&[2, 2], &[]]),
            vec![false, true],
        ),
    ] {
        let f = parse(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        let l = lanes(&f.expr, &s).expect("analysed");
        assert_eq!(l.shared, want, "{text}");
        for (i, sh) in want.iter().enumerate() {
            if *sh {
                assert_eq!(
                    l.in_dims[i], None,
                    "{text}: a shared input has no lane dims"
                );
            }
        }
    }
}

#[test]
fn total_functions_are_those_without_domain_errors_or_kinks() {
    for (text, want) in [
        ("softmax(x, 1)", true),
        ("exp(x) * y - 2", true),
        ("x / 2", true),
        ("tanh(x) + sigmoid(y)", true),
        (
            "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)",
            true,
        ),
        ("x / y", false),
        ("x / 0", false),
        ("relu(x)", false),
        ("log(x)", false),
        ("layernorm(x, 0)", false),
        ("exp(x) / y", false),
        ("max(x, 0)", false),
        ("x / (1 + x * x)", false),
        ("log(softmax(x, 0))", false),
    ] {
        let f = parse(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        assert_eq!(total(&f.expr), want, "{text}");
    }
}
