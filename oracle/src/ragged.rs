//! B3 for a transpose of ragged all-to-all (SPEC.md §23): the cotangents a
//! backward gives for `operand` and `output` against the derivative of the
//! forward, which is linear, so the derivative along an input coordinate
//! is the forward of that coordinate's unit vector. The backward being
//! checked is only called, never used to compute what it must equal.

use spmd_interp::ragged::Layout;
use spmd_semantics::{Tensor, Q};

/// A basis cotangent whose cotangent for one input element differs.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// The basis cotangent: 1 at this rank, row and element of the result.
    pub cot_rank: usize,
    pub cot_row: usize,
    pub cot_elem: usize,
    /// `operand` or `output`.
    pub input: &'static str,
    pub rank: usize,
    pub row: usize,
    pub elem: usize,
    /// What the backward gave there (`None`: no such element).
    pub got: Option<Q>,
    pub want: Q,
}

/// A backward: the result's cotangent (per rank) to the cotangents of
/// `operand` and of `output` (per rank).
pub type Backward<'a> = dyn Fn(&[Tensor]) -> (Vec<Tensor>, Vec<Tensor>) + 'a;

/// Decide B3 for `backward` on a validated `layout` with `operand` and
/// `output` buffers of these shapes on every rank (the same trailing
/// dims): every basis cotangent, every input element. `Err` names the
/// first element that differs; a cotangent of the wrong shape has no
/// elements.
pub fn check_transpose(
    layout: &Layout,
    operand_shape: &[usize],
    output_shape: &[usize],
    backward: &Backward,
) -> Result<(), Mismatch> {
    let n = layout.ranks();
    let zeros = |s: &[usize]| -> Vec<Tensor> { (0..n).map(|_| Tensor::zeros(s)).collect() };
    // The forward of every input unit vector: column (input, rank, flat).
    let mut columns: Vec<(&'static str, usize, usize, Vec<Tensor>)> = Vec::new();
    for (input, shape) in [("operand", operand_shape), ("output", output_shape)] {
        let size: usize = shape.iter().product();
        for r in 0..n {
            for e in 0..size {
                let mut a = zeros(operand_shape);
                let mut b = zeros(output_shape);
                let unit = if input == "operand" { &mut a } else { &mut b };
                unit[r].data[e] = Q::one();
                columns.push((input, r, e, layout.forward(&a, &b)));
            }
        }
    }
    let size: usize = output_shape.iter().product();
    let width: usize = output_shape.iter().skip(1).product::<usize>().max(1);
    let in_width = |input: &str| {
        let s = if input == "operand" {
            operand_shape
        } else {
            output_shape
        };
        s.iter().skip(1).product::<usize>().max(1)
    };
    for cr in 0..n {
        for ce in 0..size {
            let mut cot = zeros(output_shape);
            cot[cr].data[ce] = Q::one();
            let (op_t, out_t) = backward(&cot);
            for (input, r, e, y) in &columns {
                let want = y[cr].data[ce].clone();
                let given = if *input == "operand" { &op_t } else { &out_t };
                let shape = if *input == "operand" {
                    operand_shape
                } else {
                    output_shape
                };
                let got = given
                    .get(*r)
                    .filter(|t| t.shape == shape)
                    .and_then(|t| t.data.get(*e))
                    .cloned();
                if got.as_ref() != Some(&want) {
                    let w = in_width(input);
                    return Err(Mismatch {
                        cot_rank: cr,
                        cot_row: ce / width,
                        cot_elem: ce % width,
                        input,
                        rank: *r,
                        row: e / w,
                        elem: e % w,
                        got,
                        want,
                    });
                }
            }
        }
    }
    Ok(())
}
