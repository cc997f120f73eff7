//! F1 and B3 on uneven shards (SPEC.md §23.10), on one mesh axis or on
//! nested placements over several (§23.20). A step
//! (a collective, or a system's implementation of one) is linear, so it is
//! decided on a basis of its well-formed inputs: a case passes exactly when
//! every value of its shape does. A local op is checked on a basis and a
//! ramp per input (bounded). The backward being checked is only called;
//! what it must equal comes from the forward and the pairing.

use spmd_semantics::uneven::{pair, Placed};
use spmd_semantics::{Tensor, Q};

/// A per-rank implementation: one tensor per rank in, one per rank out, or
/// the system's refusal.
pub type Impl<'a> = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>, String> + 'a;

/// A local op on every rank: the inputs' tensors to the result.
pub type LocalOp<'a> = dyn Fn(&[Tensor]) -> Result<Tensor, String> + 'a;

/// A counterexample.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// A well-formed input whose per-rank result does not denote what it
    /// must (`denoted: None`: not well formed, or the per-rank op raised,
    /// as `note` says).
    F1 {
        n: usize,
        inputs: Vec<Vec<Tensor>>,
        outputs: Vec<Tensor>,
        expected: Tensor,
        denoted: Option<Tensor>,
        note: Option<String>,
    },
    /// ⟨F dx, g⟩ ≠ ⟨dx, B g⟩ for a basis tangent and cotangent
    /// (`backward_side: None`: B g is not well formed).
    B3 {
        n: usize,
        tangent: Vec<Tensor>,
        cotangent: Vec<Tensor>,
        backward: Vec<Tensor>,
        forward_side: Q,
        backward_side: Option<Q>,
    },
    /// The backward raised on a cotangent of a forward that ran.
    BackwardRaised {
        n: usize,
        cotangent: Vec<Tensor>,
        message: String,
    },
}

impl Failure {
    pub fn property(&self) -> &'static str {
        match self {
            Failure::F1 { .. } => "F1",
            Failure::B3 { .. } | Failure::BackwardRaised { .. } => "B3",
        }
    }
    pub fn ranks(&self) -> usize {
        match self {
            Failure::F1 { n, .. } | Failure::B3 { n, .. } | Failure::BackwardRaised { n, .. } => *n,
        }
    }
}

/// What was run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Cases (axis size and shapes) checked.
    pub cases: u64,
    /// Of them, cases whose pieces differ in length.
    pub uneven_cases: u64,
    /// Values (and, for B3, tangent and cotangent pairs) compared.
    pub instances: u64,
    /// Cases the implementation refused, and the first refusal.
    pub refused: u64,
    pub first_refusal: Option<String>,
}

impl Tally {
    fn refuse(&mut self, why: String) {
        self.refused += 1;
        self.first_refusal.get_or_insert(why);
    }
}

fn uneven<P: Placed>(p: &P, shape: &[usize], n: usize) -> bool {
    p.local_shapes(shape, n)
        .map(|s| s.iter().any(|l| *l != s[0]))
        .unwrap_or(false)
}

/// Checks a step from `input` to `output` on `n` ranks and a global value
/// of `shape`: F1 (the value is kept) on a basis, then B3 for `backward`
/// (from `output.cot()` to `input.cot()`) on every basis pair. A refusal
/// of the forward counts the case as refused.
pub fn check_step<P: Placed>(
    input: &P,
    output: &P,
    forward: &Impl,
    backward: Option<&Impl>,
    n: usize,
    shape: &[usize],
    tally: &mut Tally,
) -> Result<(), Box<Failure>> {
    let zero = Tensor::zeros(shape);
    let Ok(z) = input.distribute(&zero, n) else {
        return Ok(());
    };
    if let Err(why) = forward(&z) {
        tally.refuse(why);
        return Ok(());
    }
    tally.cases += 1;
    tally.uneven_cases += u64::from(uneven(input, shape, n) || uneven(output, shape, n));
    let basis = input.basis(shape, n).unwrap_or_default();
    let mut images = Vec::with_capacity(basis.len());
    for dx in &basis {
        tally.instances += 1;
        let want = input.denote(dx).expect("a basis value is well formed");
        let out = match forward(dx) {
            Ok(o) => o,
            Err(why) => {
                return Err(Box::new(Failure::F1 {
                    n,
                    inputs: vec![dx.clone()],
                    outputs: Vec::new(),
                    expected: want,
                    denoted: None,
                    note: Some(format!("raised on a value after running on zeros: {why}")),
                }))
            }
        };
        let got = output.denote(&out);
        if got.as_ref() != Some(&want) {
            return Err(Box::new(Failure::F1 {
                n,
                inputs: vec![dx.clone()],
                outputs: out,
                expected: want,
                denoted: got,
                note: None,
            }));
        }
        images.push((want, got.expect("checked above")));
    }
    let Some(backward) = backward else {
        return Ok(());
    };
    let (cot_in, cot_out) = (input.cot(), output.cot());
    for g in cot_out.basis(shape, n).unwrap_or_default() {
        let gd = cot_out.denote(&g).expect("a basis value is well formed");
        let bg = backward(&g).map_err(|message| {
            Box::new(Failure::BackwardRaised {
                n,
                cotangent: g.clone(),
                message,
            })
        })?;
        let bgd = cot_in.denote(&bg);
        for (dx, (x, fx)) in basis.iter().zip(&images) {
            tally.instances += 1;
            let lhs = pair(fx, &gd).expect("equal shapes");
            let rhs = bgd.as_ref().and_then(|b| pair(x, b));
            if rhs.as_ref() != Some(&lhs) {
                return Err(Box::new(Failure::B3 {
                    n,
                    tangent: dx.clone(),
                    cotangent: g.clone(),
                    backward: bg.clone(),
                    forward_side: lhs,
                    backward_side: rhs,
                }));
            }
        }
    }
    Ok(())
}

/// A ramp 1, 2, 3, ... of `shape`.
pub fn ramp(shape: &[usize]) -> Tensor {
    let k = spmd_semantics::tensor::numel(shape);
    Tensor::new(shape.to_vec(), (1..=k).map(|i| Q::int(i as i64)).collect())
}

/// Checks a local op run on every rank, with `inputs` placed as given and
/// the result read as `output`, on `n` ranks and these global shapes: F1
/// (the per-rank results denote `f` of the inputs' values) for every
/// combination of a basis value or the ramp per input, at most
/// `max_instances`. A global value the op refuses is outside its domain.
pub fn check_op<P: Placed>(
    inputs: &[P],
    output: &P,
    f: &LocalOp,
    n: usize,
    shapes: &[Vec<usize>],
    max_instances: u64,
    tally: &mut Tally,
) -> Result<(), Box<Failure>> {
    let mut values: Vec<Vec<Vec<Tensor>>> = Vec::new();
    for (p, s) in inputs.iter().zip(shapes) {
        let mut v = p.basis(s, n).unwrap_or_default();
        if let Ok(r) = p.distribute(&ramp(s), n) {
            v.push(r);
        }
        if v.is_empty() {
            return Ok(());
        }
        values.push(v);
    }
    tally.cases += 1;
    tally.uneven_cases += u64::from(inputs.iter().zip(shapes).any(|(p, s)| uneven(p, s, n)));
    let mut idx = vec![0usize; values.len()];
    let mut done = 0u64;
    loop {
        if done >= max_instances {
            return Ok(());
        }
        let xs: Vec<&Vec<Tensor>> = idx.iter().zip(&values).map(|(&i, v)| &v[i]).collect();
        let globals: Vec<Tensor> = inputs
            .iter()
            .zip(&xs)
            .map(|(p, x)| p.denote(x).expect("well formed"))
            .collect();
        if let Ok(expected) = f(&globals) {
            done += 1;
            tally.instances += 1;
            let per: Result<Vec<Tensor>, String> = (0..n)
                .map(|r| {
                    let here: Vec<Tensor> = xs.iter().map(|x| x[r].clone()).collect();
                    f(&here).map_err(|e| format!("rank {r}: {e}"))
                })
                .collect();
            let (outputs, denoted, note) = match per {
                Ok(o) => {
                    let d = output.denote(&o);
                    (o, d, None)
                }
                Err(e) => (Vec::new(), None, Some(e)),
            };
            if denoted.as_ref() != Some(&expected) {
                return Err(Box::new(Failure::F1 {
                    n,
                    inputs: xs.into_iter().cloned().collect(),
                    outputs,
                    expected,
                    denoted,
                    note,
                }));
            }
        }
        let mut more = false;
        for k in (0..idx.len()).rev() {
            idx[k] += 1;
            if idx[k] < values[k].len() {
                more = true;
                break;
            }
            idx[k] = 0;
        }
        if !more {
            return Ok(());
        }
    }
}
