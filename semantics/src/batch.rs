//! Batched values (SPEC.md §24.1): a batch of k per-rank values stacked
//! along a batch dim of every rank's tensor. The batch dim is local to
//! each rank: element i of the batch is the per-rank value whose tensor on
//! rank r is entry i along that dim of rank r's batched tensor.

use crate::tensor::Tensor;

/// Where a value is batched: at a dim of every rank's tensor, or not at
/// all (the same value for every batch element, as JAX's `in_axes=None`).
pub type Axis = Option<usize>;

/// Stacks k tensors along a new dim `axis` (at most their rank), or says
/// why not: no tensors, an axis past the end, or shapes that differ.
pub fn stack(xs: &[Tensor], axis: usize) -> Result<Tensor, String> {
    let first = xs.first().ok_or("a batch of no elements")?;
    if axis > first.rank() {
        return Err(format!(
            "batch dim {axis} past the end of a tensor of rank {}",
            first.rank()
        ));
    }
    if let Some(x) = xs.iter().find(|x| x.shape != first.shape) {
        return Err(format!(
            "batch elements of shapes {:?} and {:?} cannot be stacked",
            first.shape, x.shape
        ));
    }
    Ok(Tensor::stack(xs, axis))
}

/// Entry `i` along dim `axis`, the dim dropped; `None` when there is no
/// such dim or entry.
pub fn select(t: &Tensor, axis: usize, i: usize) -> Option<Tensor> {
    if axis >= t.rank() || i >= t.shape[axis] {
        return None;
    }
    let s = t.slice(axis, i, i + 1);
    let mut shape = s.shape.clone();
    shape.remove(axis);
    Some(Tensor::new(shape, s.data))
}

/// The per-rank batched value of a batch: rank r holds element i's
/// tensor on rank r at entry i along `axis`. `batch[i][r]` is element i's
/// tensor on rank r.
pub fn stack_per_rank(batch: &[Vec<Tensor>], axis: usize) -> Result<Vec<Tensor>, String> {
    let ranks = batch.first().map_or(0, Vec::len);
    if batch.iter().any(|e| e.len() != ranks) {
        return Err("batch elements on different numbers of ranks".into());
    }
    (0..ranks)
        .map(|r| {
            let here: Vec<Tensor> = batch.iter().map(|e| e[r].clone()).collect();
            stack(&here, axis)
        })
        .collect()
}

/// The batch elements of a per-rank batched value of `k` elements at
/// `axis`, or `None` when some rank's tensor has no such entries.
pub fn unstack_per_rank(xs: &[Tensor], axis: usize, k: usize) -> Option<Vec<Vec<Tensor>>> {
    if xs.iter().any(|x| x.shape.get(axis) != Some(&k)) {
        return None;
    }
    (0..k)
        .map(|i| xs.iter().map(|x| select(x, axis, i)).collect())
        .collect()
}

/// Moves dim `from` of `t` to position `to` (as `jnp.moveaxis`, which
/// vmap applies to put a batch dim at `out_axes`); `None` when either is
/// past the end of `t`.
pub fn move_dim(t: &Tensor, from: usize, to: usize) -> Option<Tensor> {
    if from >= t.rank() || to >= t.rank() {
        return None;
    }
    if from == to {
        return Some(t.clone());
    }
    if t.shape[from] == 0 {
        let mut shape = t.shape.clone();
        let k = shape.remove(from);
        shape.insert(to, k);
        return Some(Tensor::new(shape, vec![]));
    }
    let parts: Vec<Tensor> = (0..t.shape[from])
        .map(|i| select(t, from, i))
        .collect::<Option<_>>()?;
    Some(Tensor::stack(&parts, to))
}
