//! The seed systems as executable dialects (SPEC.md §15).
//!
//! One module per system (`jax`, `spmd_types`, `dtensor`, `ltensor`,
//! `nabla`) holds its state names (read from semantics' `DIALECT_TABLE`), the
//! spellings of the casts it inserts, and its typing function for local ops:
//! given an op class and the input types (a state per mesh axis), what the
//! system infers, which casts it inserts, or the error it raises. Each rule
//! cites its seed; where the seed is silent the function answers `Unknown`.
//! `tables` holds each system's seed table as data (`tables/<system>.toml`).

pub mod dtensor;
pub mod elaborate;
pub mod jax;
pub mod ltensor;
pub mod nabla;
pub mod spmd_types;
pub mod tables;
pub mod uneven;

use spmd_semantics::{Dialect, State, Type};

/// The op classes a typing function distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    // Linear.
    Add,
    Sub,
    Neg,
    /// A tensor times a constant.
    ScalarMul,
    // Multilinear.
    /// Elementwise product.
    Mul,
    Matmul,
    Einsum,
    /// Elementwise and not linear (relu, x^2, abs, x + 1, ...).
    Nonlinear,
    // Reductions over a tensor dim.
    Sum,
    Mean,
    Max,
    /// Views and indexing of one tensor: transpose, reshape, slice, gather.
    View,
    /// Several tensors placed side by side: concat, dynamic_update_slice
    /// (linear in all inputs jointly).
    Concat,
    Division,
    /// `floor(x / y)`: one op in PyTorch (`floor_divide`, `//`).
    FloorDivision,
    /// A running sum along a dim: linear.
    Cumsum,
    NarrowingCast,
}

impl OpClass {
    /// The class of a built-in op of `spmd-check derive` (interp's BUILTINS).
    pub fn of_builtin(name: &str) -> Option<OpClass> {
        use OpClass::*;
        Some(match name {
            "add" => Add,
            "sub" => Sub,
            "neg" => Neg,
            "scale" => ScalarMul,
            "mul" => Mul,
            "matmul" => Matmul,
            "einsum" => Einsum,
            "add_const" | "square" | "cube" | "abs" | "relu" | "floor" => Nonlinear,
            "sum" => Sum,
            "mean" => Mean,
            "max" => Max,
            "transpose" | "reshape" | "slice" | "gather" => View,
            "concat" | "dynamic_update_slice" => Concat,
            "div" => Division,
            "floor_divide" => FloorDivision,
            "cumsum" => Cumsum,
            "cast" => NarrowingCast,
            // The rest (transcendental and normalising ops, `where`,
            // `floordiv`, `int`, ...) as elaboration types their expression.
            _ => {
                let (_, text) = spmd_interp::BUILTINS.iter().find(|(n, _)| *n == name)?;
                return elaborate::single_op_class(text);
            }
        })
    }
    pub fn name(self) -> &'static str {
        use OpClass::*;
        match self {
            Add => "add",
            Sub => "sub",
            Neg => "neg",
            ScalarMul => "scalar mul",
            Mul => "mul",
            Matmul => "matmul",
            Einsum => "einsum",
            Nonlinear => "nonlinear",
            Sum => "sum",
            Mean => "mean",
            Max => "max",
            View => "view",
            Concat => "concat",
            Division => "division",
            FloorDivision => "floor division",
            Cumsum => "cumsum",
            NarrowingCast => "narrowing cast",
        }
    }
    /// add, sub, neg, scalar mul: linear in every input jointly.
    pub fn is_linear(self) -> bool {
        matches!(
            self,
            OpClass::Add | OpClass::Sub | OpClass::Neg | OpClass::ScalarMul
        )
    }
    /// mul, matmul, einsum: linear in each input separately.
    pub fn is_multilinear(self) -> bool {
        matches!(self, OpClass::Mul | OpClass::Matmul | OpClass::Einsum)
    }
}

/// A cast a system inserts before the op: input `input` on mesh axis `axis`
/// goes from `from` to `to` by the call spelled `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cast {
    pub input: usize,
    pub axis: usize,
    pub name: &'static str,
    pub from: State,
    pub to: State,
}

/// One operand of an op as a real library sees it (SPEC.md §16): a tensor
/// with a state per mesh axis, which may be marked as taking no gradient
/// (spmd_types' `no_grad`), or a Python scalar, which carries no type of its
/// own (JAX reads it as Invariant; spmd_types as Replicate when alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operand {
    Tensor { types: Vec<State>, no_grad: bool },
    Scalar,
}

impl Operand {
    /// A tensor that takes a gradient.
    pub fn tensor(types: Vec<State>) -> Operand {
        Operand::Tensor {
            types,
            no_grad: false,
        }
    }
    /// Plain tensors, one per input type.
    pub fn tensors(inputs: &[Vec<State>]) -> Vec<Operand> {
        inputs.iter().cloned().map(Operand::tensor).collect()
    }
}

/// What a system's typing function does with one op and its input types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It infers `output` (a state per axis), after inserting `casts`.
    Infers {
        output: Vec<State>,
        casts: Vec<Cast>,
    },
    /// It raises this error.
    Error(String),
    /// The seed does not say; the reason names what is missing.
    Unknown(String),
}

impl Outcome {
    pub fn infers(output: Vec<State>) -> Outcome {
        Outcome::Infers {
            output,
            casts: Vec::new(),
        }
    }
}

/// A seed system as a dialect.
pub struct System {
    /// `spmd_types`, `jax`, `dtensor`, `ltensor` or `nabla`.
    pub name: &'static str,
    /// The state names it is written in.
    pub dialect: Dialect,
    /// The seed documents its rules come from.
    pub seeds: &'static str,
    /// Its typing function: op class and input types, a state per mesh axis
    /// for each input (all of one length).
    pub typing: fn(OpClass, &[Vec<State>]) -> Outcome,
    /// How a cast its typing inserts is run: the catalogue call and the
    /// system's backward for it (SPEC.md §15.5).
    pub cast: fn(&str, State, State) -> Option<(String, String)>,
    /// How it reads a collective call on an input type over the mesh axes:
    /// the casts it inserts, the catalogue call, the output type it
    /// infers and its transpose; or its refusal (SPEC.md §15.5). The
    /// output the author wrote, if any, picks between readings the call
    /// leaves open (a redistribute to any placement).
    pub collective: ReadCollective,
}

/// How a system reads a collective call: the call, the input type, the
/// mesh axes and the written output if any (see [`System::collective`]).
pub type ReadCollective =
    fn(&str, &Type, &[String], Option<&Type>) -> Result<elaborate::Reading, String>;

/// Every system, in the order of the seed tables.
pub const SYSTEMS: [System; 5] = [
    spmd_types::SYSTEM,
    jax::SYSTEM,
    dtensor::SYSTEM,
    ltensor::SYSTEM,
    nabla::SYSTEM,
];

/// A system by name.
pub fn system(name: &str) -> Result<&'static System, String> {
    if name == jax::NO_CHECK_VMA {
        return Err(jax::no_check_vma_reason());
    }
    SYSTEMS
        .iter()
        .chain(READINGS)
        .find(|s| s.name == name)
        .ok_or_else(|| {
            format!(
                "unknown dialect `{name}`{} (expected one of: {})",
                spmd_semantics::names::did_you_mean(
                    name,
                    SYSTEMS.iter().chain(READINGS).map(|s| s.name)
                ),
                SYSTEMS
                    .iter()
                    .chain(READINGS)
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// Second readings of a system, asked for by name only: DTensor's
/// `Reduced()` propagation as the seed's FSDP example reads it, and older
/// recorded JAX versions (`jax@0.11`, `jax@0.10`), and JAX with
/// `jax_auto_pcast=False` (`jax(auto_pcast=False)`), and the released Nabla
/// as recorded (`nabla@26.2251344`).
pub const READINGS: &[System] = &[
    dtensor::FSDP_READING,
    jax::SYSTEM_0_11,
    jax::SYSTEM_0_10,
    jax::SYSTEM_NO_AUTO_PCAST,
    nabla::SYSTEM_26_2251344,
];

impl System {
    /// A state in this system's names.
    pub fn state_name(&self, s: State) -> String {
        // LTensor is written in canonical letters (SPEC.md §1.2).
        match self.dialect {
            Dialect::Canonical => s.letter().to_string(),
            d => d
                .state_name(s)
                .map(|n| n.to_string())
                .unwrap_or_else(|| format!("{} (no name in {})", s.letter(), d.name())),
        }
    }
    /// A type in its names: one state, or `{axis: state, ...}` by position.
    pub fn type_name(&self, t: &Type) -> String {
        let names: Vec<String> = t.states.iter().map(|&s| self.state_name(s)).collect();
        if names.len() == 1 {
            names[0].clone()
        } else {
            format!("({})", names.join(", "))
        }
    }
    /// Its answer for one typing on one axis, in its own words.
    pub fn describe(&self, o: &Outcome) -> String {
        match o {
            Outcome::Infers { output, casts } => {
                let out: Vec<String> = output.iter().map(|&s| self.state_name(s)).collect();
                let mut t = format!("infers {}", out.join(", "));
                for c in casts {
                    t.push_str(&format!(
                        "; inserts {} on input {} ({} -> {})",
                        c.name,
                        c.input + 1,
                        self.state_name(c.from),
                        self.state_name(c.to)
                    ));
                }
                t
            }
            Outcome::Error(e) => format!("error: {e}"),
            Outcome::Unknown(r) => format!("unknown: {r}"),
        }
    }
}

/// Per-axis columns of the inputs: `cols[a][i]` is input i's state on axis a.
/// `None` when there are no inputs or they disagree on the number of axes.
pub fn columns(inputs: &[Vec<State>]) -> Option<Vec<Vec<State>>> {
    let n = inputs.first()?.len();
    if inputs.iter().any(|t| t.len() != n) {
        return None;
    }
    Some(
        (0..n)
            .map(|a| inputs.iter().map(|t| t[a]).collect())
            .collect(),
    )
}

/// The answer for malformed input types.
pub(crate) fn malformed() -> Outcome {
    Outcome::Error("the inputs must be one or more types over the same mesh axes".into())
}
