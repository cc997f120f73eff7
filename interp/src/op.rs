//! Typed operations and their per-rank execution (SPEC.md §4, §6.4).

use crate::eval::{eval, infer, vjp, Ctx, Degree, EvalError};
use crate::expr::{parse, LocalFn};
use spmd_semantics::perrank::Denot;
use spmd_semantics::{Mesh, PerRank, Shape, Tensor, Type};

/// An operation on per-rank values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The same local function on every rank; never communicates.
    Local(LocalFn),
}

/// How the backward of a typed op is computed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Backward {
    /// The per-rank VJP of the local function (SPEC.md §6.3).
    LocalVjp,
}

/// An op with the types it is claimed to have: the thing a rule states and
/// the oracle checks (SPEC.md §4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypedOp {
    pub op: Op,
    pub inputs: Vec<Type>,
    pub output: Type,
    pub backward: Backward,
}

/// The forward of one instance, with whether a kink was met exactly.
pub struct Forward {
    pub y: PerRank,
    pub at_kink: bool,
}

impl Op {
    pub fn arity(&self) -> usize {
        match self {
            Op::Local(f) => f.arity(),
        }
    }
    pub fn describe(&self) -> String {
        match self {
            Op::Local(f) => f.text.clone(),
        }
    }
    /// Output shape and degree bounds for inputs of these shapes; `Err` when
    /// the shapes do not fit the op.
    pub fn infer(&self, shapes: &[Shape]) -> Result<(Shape, Degree), String> {
        match self {
            Op::Local(f) => infer(&f.expr, shapes),
        }
    }
    /// The per-rank forward.
    pub fn forward(&self, m: &Mesh, xs: &[PerRank]) -> Result<Forward, EvalError> {
        match self {
            Op::Local(f) => {
                let mut ctx = Ctx::default();
                let y = (0..m.num_ranks())
                    .map(|r| {
                        let args: Vec<Tensor> = xs.iter().map(|x| x.tensors[r].clone()).collect();
                        eval(&f.expr, &args, &mut ctx)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Forward {
                    y: PerRank { tensors: y },
                    at_kink: ctx.at_kink,
                })
            }
        }
    }
    /// The declared global meaning on denotations (SPEC.md §4, F3). For a
    /// local op: the local function applied to the denotations, rank by rank
    /// of the full-rank family.
    pub fn spec(&self, m: &Mesh, ds: &[Denot]) -> Result<Denot, EvalError> {
        match self {
            Op::Local(f) => {
                let family = (0..m.num_ranks())
                    .map(|r| {
                        let args: Vec<Tensor> = ds.iter().map(|d| d.family[r].clone()).collect();
                        eval(&f.expr, &args, &mut Ctx::default())
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Denot { family })
            }
        }
    }
}

impl TypedOp {
    pub fn local(f: LocalFn, inputs: Vec<Type>, output: Type) -> TypedOp {
        TypedOp {
            op: Op::Local(f),
            inputs,
            output,
            backward: Backward::LocalVjp,
        }
    }
    /// The per-rank backward: the cotangent of every input for cotangent `g`.
    pub fn backward(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
    ) -> Result<Vec<PerRank>, EvalError> {
        match (&self.backward, &self.op) {
            (Backward::LocalVjp, Op::Local(f)) => {
                let mut out: Vec<PerRank> = xs
                    .iter()
                    .map(|_| PerRank {
                        tensors: Vec::new(),
                    })
                    .collect();
                for r in 0..m.num_ranks() {
                    let args: Vec<Tensor> = xs.iter().map(|x| x.tensors[r].clone()).collect();
                    for (i, gi) in vjp(&f.expr, &args, &g.tensors[r])?.into_iter().enumerate() {
                        out[i].tensors.push(gi);
                    }
                }
                Ok(out)
            }
        }
    }
    /// `P, R -> P` style signature in canonical letters.
    pub fn signature(&self, m: &Mesh) -> String {
        let ins: Vec<String> = self.inputs.iter().map(|t| t.display(m)).collect();
        format!("{} -> {}", ins.join(", "), self.output.display(m))
    }
}

/// The built-in local ops of `spmd-check derive OP`, as data: a name and the
/// expression that defines it (SPEC.md §6.1).
pub const BUILTINS: &[(&str, &str)] = &[
    ("neg", "-x"),
    ("add", "x + y"),
    ("sub", "x - y"),
    ("mul", "x * y"),
    ("div", "x / y"),
    ("scale", "3 * x"),
    ("add_const", "x + 1"),
    ("square", "x^2"),
    ("cube", "x^3"),
    ("sum", "sum(x, 0)"),
    ("mean", "mean(x, 0)"),
    ("max", "max(x, 0)"),
    ("matmul", "matmul(x, y)"),
    ("einsum", "einsum(\"ij,ij->i\", x, y)"),
    ("transpose", "transpose(x)"),
    ("reshape", "reshape(x, [4])"),
    ("slice", "slice(x, 0, 0, 1)"),
    ("concat", "concat(x, y, 0)"),
    ("gather", "take(x, 0, [0, 0])"),
    ("dynamic_update_slice", "dynamic_update_slice(x, y, [0])"),
    ("abs", "abs(x)"),
    ("relu", "relu(x)"),
    ("floor", "floor(x)"),
    ("cast", "cast(x, 1)"),
];

/// Look up a built-in op by name.
pub fn builtin(name: &str) -> Result<LocalFn, String> {
    match BUILTINS.iter().find(|(n, _)| *n == name) {
        Some((_, src)) => {
            let mut f = parse(src)
                .map_err(|e| format!("built-in `{name}` does not parse: {e} (interpreter bug)"))?;
            f.text = format!("{name} = {src}");
            Ok(f)
        }
        None => Err(format!(
            "unknown op `{name}` (built-in ops: {}; or use --expr)",
            BUILTINS.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_infers_on_some_shape() {
        let shapes: Vec<Shape> = vec![vec![], vec![1], vec![2], vec![2, 2], vec![4]];
        for (name, _) in BUILTINS {
            let f = builtin(name).unwrap();
            let ok = shapes
                .iter()
                .any(|s| infer(&f.expr, &vec![s.clone(); f.arity()]).is_ok());
            assert!(ok, "{name} fits no test shape");
        }
        assert!(builtin("nope").unwrap_err().contains("unknown op"));
    }
}
