//! Nabla's reshape of a sharded tensor (seed 002, factor propagation; SPEC.md
//! §15.2): where `nabla::reshape_sharding` says the sharding flows to an
//! output dim, running the reshape rank by rank gives that layout of the
//! reshaped global tensor; where it says the input must be gathered, every
//! sharded layout of the output is wrong. The values are distinct integers,
//! and a layout is a permutation of them, so one instance decides each case
//! exactly.

use spmd_check::dialects::nabla::{reshape_sharding, ReshapeSharding};
use spmd_check::job::{parse_job, run_job, CheckResult};
use spmd_check::oracle::Property;
use spmd_check::semantics::perrank::global;
use spmd_check::semantics::{denote, Mesh, Tensor, Q};

/// Global shapes of rank 1 and 2 with at most 12 elements.
fn shapes() -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for a in 1..=12 {
        out.push(vec![a]);
        for b in 1..=12 {
            if a * b <= 12 {
                out.push(vec![a, b]);
            }
        }
    }
    out
}

/// Per-rank local pieces of the global tensor 0, 1, 2, ... sharded along
/// `dim` over `n` ranks, as a JSON array.
fn pieces(shape: &[usize], dim: usize, n: usize) -> serde_json::Value {
    let total: usize = shape.iter().product();
    let global: Vec<usize> = (0..total).collect();
    let mut local = shape.to_vec();
    local[dim] /= n;
    let strides: Vec<usize> = (0..shape.len())
        .map(|i| shape[i + 1..].iter().product())
        .collect();
    let ranks: Vec<serde_json::Value> = (0..n)
        .map(|r| {
            let count: usize = local.iter().product();
            let mut flat = Vec::with_capacity(count);
            for k in 0..count {
                // Local multi-index of k, then its global position.
                let mut rem = k;
                let mut at = 0;
                for i in 0..local.len() {
                    let st: usize = local[i + 1..].iter().product();
                    let mut c = rem / st;
                    rem %= st;
                    if i == dim {
                        c += r * local[dim];
                    }
                    at += c * strides[i];
                }
                flat.push(global[at]);
            }
            nest(&flat, &local)
        })
        .collect();
    serde_json::Value::Array(ranks)
}

fn nest(flat: &[usize], shape: &[usize]) -> serde_json::Value {
    if shape.len() == 1 {
        return serde_json::json!(flat);
    }
    let step = flat.len() / shape[0];
    serde_json::Value::Array(flat.chunks(step).map(|c| nest(c, &shape[1..])).collect())
}

/// The reshape run rank by rank with output layout S(e): does it denote the
/// reshaped global tensor?
fn layout_is_right(input: &[usize], output: &[usize], dim: usize, e: usize, n: usize) -> bool {
    let mut local_out = output.to_vec();
    local_out[e] /= n;
    // Each rank reshapes its piece to its share of the output; the meaning
    // is the reshape of the global tensor (SPEC.md §13.1).
    let job = serde_json::json!({
        "mesh": {"x": n},
        "op": {"expr": format!("reshape(a, {local_out:?})")},
        "meaning": format!("reshape(a, {output:?})"),
        "inputs": [{"type": format!("S({dim})"), "per_rank": pieces(input, dim, n)}],
        "output": format!("S({e})"),
    });
    let text = job.to_string();
    let j = parse_job("<test>", &text).unwrap();
    let rep = run_job(&j, "<test>", &text, true).unwrap();
    let m = Mesh::new(&[("x", n)]);
    let g = global(
        &m,
        &rep.output.ty,
        &denote(&m, &rep.output.ty, &rep.output.value),
    )
    .unwrap();
    let want = Tensor::new(
        output.to_vec(),
        (0..input.iter().product::<usize>())
            .map(|v| Q::int(v as i64))
            .collect(),
    );
    // The oracle, on this instance, must say the same as the comparison of
    // global tensors: F3 fails exactly when the layout is wrong.
    let right = g == want;
    match rep.check {
        Some(CheckResult::Pass { .. }) => assert!(right, "oracle passes a wrong layout"),
        Some(CheckResult::Violation(v)) => {
            assert!(!right, "oracle rejects a right layout: {v:?}");
            assert_eq!(v.property, Property::F3);
        }
        other => panic!("no verdict: {other:?}"),
    }
    right
}

#[test]
fn nabla_reshape_sharding_is_exactly_the_layouts_that_work() {
    let (mut kept, mut gathered) = (0, 0);
    for input in shapes() {
        for output in shapes() {
            if input.iter().product::<usize>() != output.iter().product::<usize>() {
                continue;
            }
            for n in [2, 3] {
                for dim in 0..input.len() {
                    if input[dim] % n != 0 {
                        continue;
                    }
                    match reshape_sharding(&input, &output, dim, n).unwrap() {
                        ReshapeSharding::Keeps(e) => {
                            kept += 1;
                            assert!(
                                layout_is_right(&input, &output, dim, e, n),
                                "{input:?} S({dim}) -> {output:?} S({e}) on {n} ranks"
                            );
                        }
                        ReshapeSharding::Gathers(_) => {
                            gathered += 1;
                            // The negative twin: any sharded output layout is wrong.
                            for e in 0..output.len() {
                                if output[e] % n == 0 {
                                    assert!(
                                        !layout_is_right(&input, &output, dim, e, n),
                                        "{input:?} S({dim}) -> {output:?} S({e}) on {n} ranks works, but Nabla gathers"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        kept > 100 && gathered > 20,
        "kept {kept}, gathered {gathered}"
    );
}

#[test]
fn seed_002s_examples_and_the_refusals() {
    // (100, 20) -> (2000,): dim 0 flows to dim 0; dim 1 cannot.
    assert_eq!(
        reshape_sharding(&[100, 20], &[2000], 0, 2),
        Ok(ReshapeSharding::Keeps(0))
    );
    assert!(matches!(
        reshape_sharding(&[100, 20], &[2000], 1, 2),
        Ok(ReshapeSharding::Gathers(_))
    ));
    // (100, 20) -> (40, 50): the factor 2 of 100 = 2 * 50 is the 2 of 40.
    assert_eq!(
        reshape_sharding(&[100, 20], &[40, 50], 0, 2),
        Ok(ReshapeSharding::Keeps(0))
    );
    // Uneven shards and a changed element count are refused, with a reason.
    assert!(reshape_sharding(&[3, 2], &[6], 0, 2)
        .unwrap_err()
        .contains("ceil-division"));
    assert!(reshape_sharding(&[3, 2], &[7], 0, 1).is_err());
}
