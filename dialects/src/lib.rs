//! The seed systems as executable dialects (SPEC.md §15).
//!
//! One module per system (`jax`, `spmd_types`, `dtensor`, `ltensor`,
//! `nabla`) holds its state names (read from semantics' `DIALECT_TABLE`), the
//! spellings of the casts it inserts, and its typing function for local ops:
//! given an op class and the input types (a state per mesh axis), what the
//! system infers, which casts it inserts, or the error it raises. Each rule
//! cites its seed; where the seed is silent the function answers `Unknown`.
//! `tables` holds each system's seed table as data (`tables/<system>.toml`).
//! `classify` sets a typing function's answer beside the oracle's verdict.

pub mod dtensor;
pub mod jax;
pub mod ltensor;
pub mod nabla;
pub mod spmd_types;
pub mod tables;

use spmd_oracle::Verdict;
use spmd_semantics::{Dialect, State};

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
            "cast" => NarrowingCast,
            _ => return None,
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
}

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
    SYSTEMS
        .iter()
        .chain(READINGS)
        .find(|s| s.name == name)
        .ok_or_else(|| {
            format!(
                "unknown dialect `{name}` (expected one of: {})",
                SYSTEMS
                    .iter()
                    .chain(READINGS)
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// Second readings of a system's seed, asked for by name only: DTensor's
/// `Reduced()` propagation as the seed's FSDP example reads it.
pub const READINGS: &[System] = &[dtensor::FSDP_READING];

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

/// How a system's answer for one typing compares with the oracle's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// It accepts the typing (after its casts) and the oracle proves it
    /// sound, or it does not give this typing and the oracle finds it unsound.
    Agrees,
    /// It accepts a typing the oracle finds unsound: the counterexample.
    UnsoundAcceptance(String),
    /// It raises an error on inputs whose typing the oracle finds sound.
    SoundRejection,
    /// It infers another output for these inputs, and this one is sound too.
    PermissivenessGap,
    /// The seed is silent, or the oracle reached no verdict: the reason.
    Unknown(String),
}

impl Class {
    pub fn word(&self) -> &'static str {
        match self {
            Class::Agrees => "agrees",
            Class::UnsoundAcceptance(_) => "unsound acceptance",
            Class::SoundRejection => "sound rejection",
            Class::PermissivenessGap => "permissiveness gap",
            Class::Unknown(_) => "unknown",
        }
    }
    /// The words of every class, in report order.
    pub const WORDS: [&'static str; 5] = [
        "agrees",
        "unsound acceptance",
        "sound rejection",
        "permissiveness gap",
        "unknown",
    ];
}

/// Run a system's typing function on one one-axis typing (`inputs` → `output`)
/// and classify its answer. `verdict(ins, out)` is the oracle's verdict of a
/// one-axis typing of the same op; the row's own verdict is asked for
/// `(inputs, output)`, and where the system inserts casts, the verdict of the
/// typing after them decides (the casts themselves are checked with the
/// collective tables, SPEC.md §10.3).
pub fn classify(
    sys: &System,
    op: OpClass,
    inputs: &[State],
    output: State,
    verdict: &dyn Fn(&[State], State) -> Option<Verdict>,
) -> (Outcome, Class) {
    let per_axis: Vec<Vec<State>> = inputs.iter().map(|&s| vec![s]).collect();
    let outcome = (sys.typing)(op, &per_axis);
    let mut class = classify_outcome(&outcome, inputs, output, verdict);
    // DTensor picks a gradient's placement when autograd runs: torch 2.14.1
    // returns the gradient of a Replicate() operand of mul or matmul as
    // Partial() where the other operand is Partial() or Shard(), and the
    // proposal's grad-placement hook all-reduces it to Replicate(). Read as
    // the proposal's Reduced() (whose cotangent is a pending sum) a backward
    // failure of the plain local VJP may vanish; the row's verdict is then
    // about a backward DTensor does not use, and the class says so.
    if let (Dialect::Dtensor, Class::UnsoundAcceptance(x), Outcome::Infers { casts, .. }) =
        (sys.dialect, &class, &outcome)
    {
        if x.starts_with('B') {
            let mut eff = inputs.to_vec();
            for c in casts {
                eff[c.input] = c.to;
            }
            for s in eff.iter_mut().filter(|s| **s == State::Invariant) {
                *s = State::Reduced;
            }
            if verdict(&eff, output).is_some_and(|v| v.is_sound()) {
                class = Class::Unknown(format!(
                    "sound with DTensor's own backward, not with this typing's: torch 2.14.1 returns the Replicate() inputs' gradients as Partial() (tests/fixtures/dtensor_ops.json, mul_R_P; read as Reduced(), sound), and seed 001's grad-placement hook then all-reduces them to Replicate(); taken as Replicate() gradients from the local VJP as is: {x}"
                ));
            }
        }
    }
    (outcome, class)
}

/// The classification of an outcome already computed (SPEC.md §15.3).
pub fn classify_outcome(
    outcome: &Outcome,
    inputs: &[State],
    output: State,
    verdict: &dyn Fn(&[State], State) -> Option<Verdict>,
) -> Class {
    let inconclusive = |v: &Option<Verdict>| {
        Class::Unknown(match v {
            Some(v) => format!("the oracle's verdict is {}", v.name()),
            None => "the oracle has no verdict for this typing".into(),
        })
    };
    // Not this typing: the system errs, or infers another output.
    let rejected = |gap: Class| {
        let v = verdict(inputs, output);
        match &v {
            Some(v) if v.is_sound() => gap,
            Some(v) if v.violation().is_some() => Class::Agrees,
            _ => inconclusive(&v),
        }
    };
    match outcome {
        Outcome::Unknown(r) => Class::Unknown(format!("seed silent: {r}")),
        Outcome::Error(_) => rejected(Class::SoundRejection),
        Outcome::Infers { output: o, .. } if o.as_slice() != [output] => {
            rejected(Class::PermissivenessGap)
        }
        Outcome::Infers { casts, .. } => {
            let mut eff = inputs.to_vec();
            for c in casts {
                eff[c.input] = c.to;
            }
            let v = verdict(&eff, output);
            match &v {
                Some(v) if v.is_sound() => Class::Agrees,
                Some(v) => match v.violation() {
                    Some(x) => Class::UnsoundAcceptance(x.one_line()),
                    None => inconclusive(&Some(v.clone())),
                },
                None => inconclusive(&v),
            }
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
