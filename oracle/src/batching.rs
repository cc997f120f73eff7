//! V1, batching (SPEC.md §24.2): a system's batched form of a per-rank
//! step against the meaning of batching. For every batch of k elements,
//! the batched form run on the stacked inputs must give, on every rank,
//! exactly the stack of the unbatched step run on each element. Both sides
//! are only called: what the batched form must equal comes from the
//! unbatched step and stacking alone.

use spmd_semantics::batch::{stack_per_rank, Axis};
use spmd_semantics::Tensor;

/// A per-rank step: per input, each rank's tensor; out, each rank's
/// tensor (or the step's refusal).
pub type Step<'a> = dyn Fn(&[Vec<Tensor>]) -> Result<Vec<Tensor>, String> + 'a;

/// A batch where the batched form differs from the stack of the elements'
/// results.
#[derive(Clone, Debug, PartialEq)]
pub struct V1Failure {
    /// `batch[i][j][r]`: element i, input j, rank r.
    pub batch: Vec<Vec<Vec<Tensor>>>,
    /// The batched inputs (per input, per rank).
    pub batched_inputs: Vec<Vec<Tensor>>,
    /// The stack of the elements' results, per rank (`None`: an element's
    /// result could not be stacked, or an element was refused).
    pub expected: Option<Vec<Tensor>>,
    /// The batched form's result, per rank, or its refusal.
    pub got: Result<Vec<Tensor>, String>,
    /// The first rank that differs, where both sides ran.
    pub rank: Option<usize>,
}

/// What V1 ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct V1Tally {
    pub batches: u64,
    /// Batches whose elements the unbatched step refused (outside its
    /// domain), or that cannot be stacked at `in_axes`: nothing compared.
    pub outside: u64,
}

/// Decides V1 on each batch: `batch[i][j]` is element i's input j, each
/// rank's tensor. Inputs with `in_axes[j] = None` are not batched: they
/// must be the same in every element, and are passed once, unstacked.
/// The expected result stacks the elements' results at `out_axis` (`None`:
/// every element's result must be the same, and is expected unstacked).
pub fn check_v1(
    unbatched: &Step,
    batched: &Step,
    in_axes: &[Axis],
    out_axis: Axis,
    batches: &[Vec<Vec<Vec<Tensor>>>],
    tally: &mut V1Tally,
) -> Result<(), Box<V1Failure>> {
    for batch in batches {
        let Some(first) = batch.first() else {
            continue;
        };
        let inputs: Result<Vec<Vec<Tensor>>, String> = in_axes
            .iter()
            .enumerate()
            .map(|(j, ax)| match ax {
                Some(a) => {
                    let elems: Vec<Vec<Tensor>> = batch.iter().map(|e| e[j].clone()).collect();
                    stack_per_rank(&elems, *a)
                }
                None => {
                    if batch.iter().any(|e| e[j] != first[j]) {
                        Err(format!(
                            "input {j} is not batched but differs between elements"
                        ))
                    } else {
                        Ok(first[j].clone())
                    }
                }
            })
            .collect();
        let Ok(inputs) = inputs else {
            tally.outside += 1;
            continue;
        };
        let results: Result<Vec<Vec<Tensor>>, String> =
            batch.iter().map(|e| unbatched(e)).collect();
        let Ok(results) = results else {
            tally.outside += 1;
            continue;
        };
        tally.batches += 1;
        let expected = match out_axis {
            Some(a) => stack_per_rank(&results, a).ok(),
            None => results
                .iter()
                .all(|r| *r == results[0])
                .then(|| results[0].clone()),
        };
        let got = batched(&inputs);
        let rank = match (&expected, &got) {
            (Some(e), Ok(g)) => {
                if e == g {
                    continue;
                }
                Some(
                    (0..e.len().max(g.len()))
                        .find(|&r| e.get(r) != g.get(r))
                        .unwrap_or(0),
                )
            }
            _ => None,
        };
        return Err(Box::new(V1Failure {
            batch: batch.clone(),
            batched_inputs: inputs,
            expected,
            got,
            rank,
        }));
    }
    Ok(())
}

/// Batches of k elements for a step that is linear in its one input: for
/// each position i < k and each per-rank value b of `basis`, the batch
/// holding b at i and zeros (of b's shapes) elsewhere. A batched form that
/// is linear too satisfies V1 on every batch of k elements exactly when it
/// does on these (both sides are linear in the batch).
pub fn linear_batches(basis: &[Vec<Tensor>], k: usize) -> Vec<Vec<Vec<Vec<Tensor>>>> {
    let mut out = Vec::new();
    for i in 0..k {
        for b in basis {
            let zero: Vec<Tensor> = b.iter().map(|t| Tensor::zeros(&t.shape)).collect();
            out.push(
                (0..k)
                    .map(|p| vec![if p == i { b.clone() } else { zero.clone() }])
                    .collect(),
            );
        }
    }
    out
}
