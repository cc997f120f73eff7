//! Fidelity over JAX's `vmap` of whole programs (SPEC.md §24.10):
//! `peers/record_vmap_programs_jax.py` ran small SPMD programs under
//! `vmap` inside and around `shard_map` in JAX 0.12.0.1 on CPU, with
//! their `grad(vmap(f))` and `vmap(grad(f))`. Each case is replayed
//! against the meaning:
//!
//! - the forward against the stack of the unbatched program (as JAX's
//!   language elaborates it here) run on each element (V1);
//! - each order's gradients against the exact per-element gradients of
//!   the loss `<g_i, f(x_i)>`, computed from the forward alone by exact
//!   finite differences (the programs are polynomials of degree at most
//!   4 in every input, so a five-point stencil is exact), stacked (an
//!   unbatched input's summed under `grad(vmap(f))`);
//!
//! and the model's batched program (§24.9, JAX's rules) must give what
//! JAX gave, or refuse where JAX raised.

use super::{tensors, CaseResult, Class};
use crate::run::UsageError;
use serde_json::Value;
use spmd_interp::batch::{batch_program, BatchError, Batching, Bdim, Order};
use spmd_interp::{Op, Program, TypedOp};
use spmd_semantics::batch::{select, stack_per_rank};
use spmd_semantics::perrank::{free_unit, num_free, repeat_factor};
use spmd_semantics::{Mesh, PerRank, Tensor, Q};

/// The recording read, relative to the fixtures directory.
pub const FILE: &str = "transforms/jax_vmap_programs_0.12.0.1.json";

/// The recorded programs in JAX's language, one rule each, named as the
/// recording names them.
pub const PROGRAMS: &str = r#"
[[rule]]
name = "row_parallel"
dialect = "jax"
names = ["x", "w"]
inputs = ["Varying", "Varying"]
output = "Invariant"
[[rule.step]]
name = "h"
expr = "matmul(x, w)"
output = "Varying"
[[rule.step]]
name = "y"
forward = "psum"
input = "h"
output = "Invariant"

[[rule]]
name = "row_parallel_deferred"
dialect = "jax"
names = ["x", "w"]
inputs = ["Varying", "Varying"]
output = "Invariant"
[[rule.step]]
name = "h"
expr = "matmul(x, w)"
output = "Varying"
[[rule.step]]
name = "h3"
expr = "2 * h + h"
output = "Varying"
[[rule.step]]
name = "y"
forward = "psum"
input = "h3"
output = "Invariant"

[[rule]]
name = "mlp"
dialect = "jax"
names = ["x", "w1", "w2"]
inputs = ["Invariant", "Varying", "Varying"]
output = "Invariant"
[[rule.step]]
name = "h"
expr = "matmul(matmul(x, w1)^2, w2)"
output = "Varying"
[[rule.step]]
name = "y"
forward = "psum"
input = "h"
output = "Invariant"

[[rule]]
name = "seq_parallel"
dialect = "jax"
names = ["x", "w1", "w2"]
inputs = ["Varying", "Varying", "Varying"]
output = "Varying"
[[rule.step]]
name = "xg"
forward = "all_gather(dim=0)"
input = "x"
output = "Varying"
[[rule.step]]
name = "o"
expr = "matmul(matmul(xg, w1)^2, w2)"
output = "Varying"
[[rule.step]]
name = "y"
forward = "psum_scatter(dim=0)"
input = "o"
output = "Varying"

[[rule]]
name = "gather_untiled"
dialect = "jax"
names = ["x"]
inputs = ["Varying"]
output = "Varying"
[[rule.step]]
name = "s"
expr = "x * x"
output = "Varying"
[[rule.step]]
name = "y"
forward = "all_gather(dim=0, stack)"
input = "s"
output = "Varying"

[[rule]]
name = "gather_untiled_invariant"
dialect = "jax"
names = ["x"]
inputs = ["Varying"]
output = "Invariant"
[[rule.step]]
name = "s"
expr = "x * x"
output = "Varying"
[[rule.step]]
name = "y"
forward = "all_gather(dim=0, stack, to='invarying')"
input = "s"
output = "Invariant"

[[rule]]
name = "scatter_untiled"
dialect = "jax"
names = ["x"]
inputs = ["Varying"]
output = "Varying"
[[rule.step]]
name = "s"
expr = "x * x"
output = "Varying"
[[rule.step]]
name = "y"
forward = "psum_scatter(dim=0, stack)"
input = "s"
output = "Varying"
"#;

/// The largest degree the five-point stencil differentiates exactly.
const STENCIL_DEGREE: u32 = 4;

fn tensor_lists(v: &Value) -> Option<Vec<Vec<Tensor>>> {
    v.as_array()?.iter().map(tensors).collect()
}

/// The loss `<g, y>` of one element, its output's repeated copies counted
/// once (`repeat_factor`).
fn loss(op: &TypedOp, m: &Mesh, xs: &[PerRank], g: &[Tensor]) -> Result<Q, String> {
    let y = op.op.forward(m, xs).map_err(|e| format!("{e:?}"))?.y;
    let mut s = Q::zero();
    for (t, gt) in y.tensors.iter().zip(g) {
        if t.shape != gt.shape {
            return Err(format!(
                "cotangent {:?} for an output {:?}",
                gt.shape, t.shape
            ));
        }
        for (a, b) in t.data.iter().zip(&gt.data) {
            s = s.add(&a.mul(b));
        }
    }
    let rep = Q::int(repeat_factor(m, &op.output) as i64);
    s.div(&rep).map_err(|_| "no repeat factor".to_string())
}

/// The exact gradient of one element's loss with respect to each input,
/// per rank, from the forward alone: along every free direction of the
/// input's type, a five-point stencil (exact up to degree 4; the caller
/// checks the degree).
pub fn exact_gradients(
    op: &TypedOp,
    m: &Mesh,
    xs: &[PerRank],
    g: &[Tensor],
) -> Result<Vec<Vec<Tensor>>, String> {
    let steps: [(i64, i64); 4] = [(-2, 1), (-1, -8), (1, 8), (2, -1)];
    let mut out = Vec::new();
    for (a, t) in op.inputs.iter().enumerate() {
        let shape = xs[a].shape().to_vec();
        let mut grad: Vec<Tensor> = (0..m.num_ranks()).map(|_| Tensor::zeros(&shape)).collect();
        for i in 0..num_free(m, t, &shape) {
            let u = free_unit(m, t, &shape, i);
            let mut d = Q::zero();
            for (h, w) in steps {
                let mut ys = xs.to_vec();
                for (x, e) in ys[a].tensors.iter_mut().zip(&u.tensors) {
                    for (v, ev) in x.data.iter_mut().zip(&e.data) {
                        *v = v.add(&ev.mul(&Q::int(h)));
                    }
                }
                d = d.add(&loss(op, m, &ys, g)?.mul(&Q::int(w)));
            }
            let d = d.div(&Q::int(12)).map_err(|e| format!("{e:?}"))?;
            for (gr, e) in grad.iter_mut().zip(&u.tensors) {
                for (v, ev) in gr.data.iter_mut().zip(&e.data) {
                    *v = v.add(&ev.mul(&d));
                }
            }
        }
        out.push(grad);
    }
    Ok(out)
}

/// Per rank, the sum of the elements' tensors.
fn summed(per_elem: &[Vec<Tensor>]) -> Vec<Tensor> {
    let mut acc = per_elem[0].clone();
    for e in &per_elem[1..] {
        for (a, b) in acc.iter_mut().zip(e) {
            for (x, y) in a.data.iter_mut().zip(&b.data) {
                *x = x.add(y);
            }
        }
    }
    acc
}

fn first_diff(a: &[Tensor], b: &[Tensor]) -> String {
    let r = (0..a.len().max(b.len()))
        .find(|&r| a.get(r) != b.get(r))
        .unwrap_or(0);
    format!(
        "rank {r}: {} where {} is meant",
        a.get(r).map_or("nothing".into(), |t| t.to_string()),
        b.get(r).map_or("nothing".into(), |t| t.to_string())
    )
}

/// The model's batched program (JAX's rules) in one order.
fn model(
    p: &Program,
    m: &Mesh,
    shapes: &[Vec<usize>],
    in_dims: &[Bdim],
    k: usize,
    order: Order,
) -> Result<Program, BatchError> {
    let b = Batching {
        rule: &spmd_dialects::jax::batch_collective,
        transpose: &spmd_dialects::jax::transpose_collective,
        order,
        local_converts: true,
    };
    batch_program(p, m, shapes, in_dims, 0, k, &b)
}

struct Case {
    id: String,
    class: Class,
    note: String,
}

fn case(c: &Value, rules: &[crate::rules::Rule]) -> Case {
    let id = format!(
        "{} {} at in_axes {} on {} ranks, a batch of {}",
        c["where"].as_str().unwrap_or("?"),
        c["program"].as_str().unwrap_or("?"),
        c["in_axes"],
        c["n"],
        c["k"]
    );
    let done = |class: Class, note: &str| Case {
        id: id.clone(),
        class,
        note: note.into(),
    };
    let ne = |why: String| done(Class::NotExpressible(why), "");
    let Some(rule) = rules
        .iter()
        .find(|r| Some(r.name.as_str()) == c["program"].as_str())
    else {
        return ne(format!("no program `{}` is transcribed", c["program"]));
    };
    let op = &rule.op;
    let Op::Program(p) = &op.op else {
        return ne("not a program".into());
    };
    let (Some(n), Some(k)) = (
        c["n"].as_u64().map(|v| v as usize),
        c["k"].as_u64().map(|v| v as usize),
    ) else {
        return ne("a case without n or k".into());
    };
    let in_dims: Option<Vec<Bdim>> = c["in_axes"]
        .as_array()
        .map(|a| a.iter().map(|d| d.as_u64().map(|v| v as usize)).collect());
    let (Some(in_dims), Some(inputs), Some(g)) = (
        in_dims,
        tensor_lists(&c["inputs"]),
        tensors(&c["cotangent"]),
    ) else {
        return ne("in_axes, inputs or cotangent not exact".into());
    };
    // A recording is untrusted: its sizes within the model's limits, one
    // tensor per rank of one shape for every input.
    if !(2..=64).contains(&n)
        || !(1..=64).contains(&k)
        || in_dims.len() != op.inputs.len()
        || inputs.len() != op.inputs.len()
        || inputs
            .iter()
            .chain([&g])
            .any(|t| t.len() != n || t.iter().any(|x| x.shape != t[0].shape || x.rank() > 4))
        || c["out_axes"].as_u64() != Some(0)
    {
        return ne("a mesh, batch, input or cotangent the model does not take".into());
    }
    let m = Mesh::line(n);
    // The elements: each input's tensors per rank, the batch dim read out.
    let mut elems: Vec<Vec<PerRank>> = Vec::new();
    for i in 0..k {
        let mut e = Vec::new();
        for (x, d) in inputs.iter().zip(&in_dims) {
            let t: Option<Vec<Tensor>> = match d {
                Some(d) => x.iter().map(|t| select(t, *d, i)).collect(),
                None => Some(x.clone()),
            };
            let Some(t) = t else {
                return ne(format!("inputs without {k} entries at their batch dims"));
            };
            e.push(PerRank { tensors: t });
        }
        elems.push(e);
    }
    let g_elems: Option<Vec<Vec<Tensor>>> = (0..k)
        .map(|i| g.iter().map(|t| select(t, 0, i)).collect())
        .collect();
    let Some(g_elems) = g_elems else {
        return ne("a cotangent without the batch".into());
    };
    let shapes: Vec<Vec<usize>> = elems[0].iter().map(|x| x.shape().to_vec()).collect();
    match op.op.infer(&m, &shapes) {
        Ok((_, deg)) => {
            if deg.piecewise
                || deg.den.iter().any(|&d| d > 0)
                || deg.num.iter().any(|&d| d > STENCIL_DEGREE)
            {
                return ne("the program is not a polynomial of degree at most 4".into());
            }
        }
        Err(e) => return ne(format!("the program does not take the elements: {e}")),
    }
    // The meaning: the stack of the elements' results and gradients.
    let mut ys = Vec::new();
    let mut grads: Vec<Vec<Vec<Tensor>>> = Vec::new();
    for (e, ge) in elems.iter().zip(&g_elems) {
        match op.op.forward(&m, e) {
            Ok(f) => ys.push(f.y.tensors),
            Err(err) => return ne(format!("the unbatched program refuses an element: {err:?}")),
        }
        match exact_gradients(op, &m, e, ge) {
            Ok(gr) => grads.push(gr),
            Err(err) => return ne(err),
        }
    }
    let Ok(expected) = stack_per_rank(&ys, 0) else {
        return ne("the elements' results do not stack".into());
    };
    let per_input = |a: usize| -> Vec<Vec<Tensor>> { grads.iter().map(|g| g[a].clone()).collect() };
    let mut grad_of_vmap = Vec::new();
    let mut vmap_of_grad = Vec::new();
    for (a, d) in in_dims.iter().enumerate() {
        let es = per_input(a);
        // vmap(grad(f)) with out_axes 0 stacks every input's gradients at 0.
        let (Ok(st), Ok(st0)) = (stack_per_rank(&es, d.unwrap_or(0)), stack_per_rank(&es, 0))
        else {
            return ne("the gradients do not stack".into());
        };
        grad_of_vmap.push(if d.is_some() { st } else { summed(&es) });
        vmap_of_grad.push(st0);
    }
    // JAX against the meaning.
    let real = |key: &str| tensors(&c[key]);
    let real_grads = |key: &str| tensor_lists(&c[key]);
    let mut defects = Vec::new();
    let mut checked = Vec::new();
    match real("forward") {
        Some(y) if y == expected => checked.push("V1"),
        Some(y) => defects.push(format!("V1: {}", first_diff(&y, &expected))),
        None => defects.push(format!(
            "V1: JAX raises ({}) where the stack of the elements' results exists",
            c["forward_error"].as_str().unwrap_or("no output")
        )),
    }
    for (key, want) in [
        ("grad_of_vmap", &grad_of_vmap),
        ("vmap_of_grad", &vmap_of_grad),
    ] {
        match real_grads(key) {
            Some(gs) if gs == *want => checked.push(if key == "grad_of_vmap" {
                "grad(vmap(f))"
            } else {
                "vmap(grad(f))"
            }),
            Some(gs) => {
                let a = (0..want.len())
                    .find(|&a| gs.get(a) != want.get(a))
                    .unwrap_or(0);
                defects.push(format!(
                    "{key}, input {a}: {}",
                    first_diff(gs.get(a).map_or(&[][..], |v| v), &want[a])
                ));
            }
            None => defects.push(format!(
                "{key}: JAX raises ({}) where the exact gradients exist",
                c[format!("{key}_error").as_str()]
                    .as_str()
                    .unwrap_or("no output")
            )),
        }
    }
    // The model (§24.9) against JAX.
    let xs: Vec<PerRank> = inputs
        .iter()
        .map(|t| PerRank { tensors: t.clone() })
        .collect();
    let gp = PerRank { tensors: g.clone() };
    let mut mismatch = None;
    for (order, key) in [
        (Order::GradOfVmap, "grad_of_vmap"),
        (Order::VmapOfGrad, "vmap_of_grad"),
    ] {
        let ours = model(p, &m, &shapes, &in_dims, k, order);
        let fwd = ours
            .as_ref()
            .ok()
            .and_then(|q| q.forward(&m, &xs).ok().map(|f| f.y.tensors));
        let bwd = ours
            .as_ref()
            .ok()
            .and_then(|q| q.backward(&m, &xs, &gp).ok());
        match (&fwd, real("forward")) {
            (Some(a), Some(b)) if *a == b => {}
            (None, None) => {}
            (a, b) => {
                mismatch = Some(format!(
                    "forward: the model {}, JAX {}",
                    a.as_ref().map_or("refuses".into(), |t| t[0].to_string()),
                    b.map_or("raises".into(), |t| t[0].to_string())
                ));
                break;
            }
        }
        let theirs = real_grads(key).map(|gs| {
            // JAX's vmap(grad(f)) gives an unbatched input's per-element
            // gradients, the model's batched backward their sum; JAX's are
            // stacked at 0, the model's batched backward puts a batched
            // input's where the input is batched.
            gs.into_iter()
                .zip(&in_dims)
                .map(|(t, d)| match (key, d) {
                    ("grad_of_vmap", _) => t,
                    (_, Some(d)) => t
                        .iter()
                        .map(|x| {
                            spmd_semantics::batch::move_dim(x, 0, *d).unwrap_or_else(|| x.clone())
                        })
                        .collect(),
                    (_, None) => {
                        let es: Option<Vec<Vec<Tensor>>> = (0..k)
                            .map(|i| t.iter().map(|x| select(x, 0, i)).collect())
                            .collect();
                        es.map_or(t, |es| summed(&es))
                    }
                })
                .collect::<Vec<_>>()
        });
        let ours_g = bwd.map(|b| b.into_iter().map(|x| x.tensors).collect::<Vec<_>>());
        match (ours_g, theirs) {
            (Some(a), Some(b)) if a == b => {}
            (None, None) => {}
            (a, b) => {
                mismatch = Some(format!(
                    "{key}: the model {}, JAX {}",
                    a.map_or("refuses".into(), |t| t[0][0].to_string()),
                    b.map_or("raises".into(), |t| t[0][0].to_string())
                ));
                break;
            }
        }
    }
    if let Some(mm) = mismatch {
        return done(Class::ModelMismatch(mm), "");
    }
    if !defects.is_empty() {
        return done(
            Class::RealDefect(defects.join("; ")),
            "the model's batched program (JAX's rules) does the same",
        );
    }
    done(
        Class::Agree,
        &format!(
            "{} against the meaning (exact per-element gradients from the forward), and the model's batched program gives JAX's values",
            checked.join(", ")
        ),
    )
}

/// Every case of the recording in `dir`; a missing recording gives none.
pub fn run(dir: &str) -> Result<Vec<CaseResult>, UsageError> {
    let Some((name, v)) = super::read_recording(dir, FILE)? else {
        return Ok(vec![]);
    };
    let version = v["jax_version"].as_str().unwrap_or("?").to_string();
    let cases = v["cases"]
        .as_array()
        .ok_or_else(|| UsageError(format!("{name}: no `cases`")))?;
    let specs = crate::rules::parse_file("fidelity: vmap programs", PROGRAMS)?;
    let rules = crate::rules::build(
        "fidelity: vmap programs",
        PROGRAMS,
        &specs,
        &spmd_generators::Scope::default(),
    )?;
    use rayon::prelude::*;
    Ok(cases
        .par_iter()
        .map(|c| {
            let r = case(c, &rules);
            CaseResult {
                file: name.clone(),
                system: "jax".into(),
                version: version.clone(),
                id: r.id,
                class: r.class,
                note: r.note,
                dialect: None,
            }
        })
        .collect())
}
