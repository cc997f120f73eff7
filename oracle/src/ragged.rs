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

/// A tangent the JVP gives that differs from the derivative (J1).
#[derive(Clone, Debug, PartialEq)]
pub struct JvpMismatch {
    /// The unit tangent: 1 at this input, rank and flat element.
    pub input: &'static str,
    pub rank: usize,
    pub elem: usize,
    /// Where the result's tangent differs, and the two values.
    pub out_rank: usize,
    pub out_elem: usize,
    pub got: Option<Q>,
    pub want: Q,
}

/// A JVP: the primal operand and output buffers and their tangents (per
/// rank) to the result's tangent (per rank).
pub type Jvp<'a> = dyn Fn(&[Tensor], &[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor> + 'a;

/// Decide J1 for `jvp` at the primal point `operand`, `output` on a
/// validated `layout`: for every unit tangent of either buffer, the JVP's
/// result tangent against the derivative of the forward along it, the
/// exact difference F(x + t) − F(x) (the forward is linear, so a step of 1
/// is exact). The JVP is only called.
pub fn check_jvp(
    layout: &Layout,
    operand: &[Tensor],
    output: &[Tensor],
    jvp: &Jvp,
) -> Result<(), JvpMismatch> {
    let n = layout.ranks();
    let base = layout.forward(operand, output);
    let zeros =
        |xs: &[Tensor]| -> Vec<Tensor> { xs.iter().map(|t| Tensor::zeros(&t.shape)).collect() };
    for (input, buf) in [("operand", operand), ("output", output)] {
        for r in 0..n {
            for e in 0..buf[r].numel() {
                let (mut dop, mut dout) = (zeros(operand), zeros(output));
                let t = if input == "operand" {
                    &mut dop
                } else {
                    &mut dout
                };
                t[r].data[e] = Q::one();
                let moved_op: Vec<Tensor> =
                    operand.iter().zip(&dop).map(|(a, b)| a.add(b)).collect();
                let moved_out: Vec<Tensor> =
                    output.iter().zip(&dout).map(|(a, b)| a.add(b)).collect();
                let moved = layout.forward(&moved_op, &moved_out);
                let got = jvp(operand, output, &dop, &dout);
                for (q, (m, b)) in moved.iter().zip(&base).enumerate() {
                    for (k, (mv, bv)) in m.data.iter().zip(&b.data).enumerate() {
                        let want = mv.sub(bv);
                        let g = got
                            .get(q)
                            .filter(|t| t.shape == m.shape)
                            .and_then(|t| t.data.get(k))
                            .cloned();
                        if g.as_ref() != Some(&want) {
                            return Err(JvpMismatch {
                                input,
                                rank: r,
                                elem: e,
                                out_rank: q,
                                out_elem: k,
                                got: g,
                                want,
                            });
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The exact cotangents of `operand` and `output` for the result's
/// cotangent `cot`, from the forward alone: the forward is linear, so the
/// cotangent of an input element is the dot product of `cot` with the
/// forward of that element's unit vector (SPEC.md §23.2).
pub fn exact_vjp(
    layout: &Layout,
    operand_shape: &[usize],
    output_shape: &[usize],
    cot: &[Tensor],
) -> (Vec<Tensor>, Vec<Tensor>) {
    let n = layout.ranks();
    let zeros = |s: &[usize]| -> Vec<Tensor> { (0..n).map(|_| Tensor::zeros(s)).collect() };
    let mut out = (zeros(operand_shape), zeros(output_shape));
    for which in 0..2 {
        let size: usize = if which == 0 {
            operand_shape.iter().product()
        } else {
            output_shape.iter().product()
        };
        for r in 0..n {
            for e in 0..size {
                let (mut a, mut b) = (zeros(operand_shape), zeros(output_shape));
                if which == 0 {
                    a[r].data[e] = Q::one();
                } else {
                    b[r].data[e] = Q::one();
                }
                let col = layout.forward(&a, &b);
                let mut v = Q::zero();
                for (c, g) in col.iter().zip(cot) {
                    for (x, y) in c.data.iter().zip(&g.data) {
                        if !x.is_zero() {
                            v = v.add(&x.mul(y));
                        }
                    }
                }
                let t = if which == 0 { &mut out.0 } else { &mut out.1 };
                t[r].data[e] = v;
            }
        }
    }
    out
}
