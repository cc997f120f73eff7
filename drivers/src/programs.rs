//! Whole layers as programs (SPEC.md §12.2): Megatron-style tensor-parallel
//! and sequence-parallel MLPs, written as a rule file
//! (`examples/programs.toml`), each checked end to end by the oracle (the
//! composed backward against the derivative of the composed meaning) and
//! costed in elements sent per rank. Each has a negative twin the oracle
//! must reject for the named property.

use crate::rules::{build, parse_file, Rule};
use crate::run::{check_forward, check_op, UsageError};
use rayon::prelude::*;
use spmd_generators::Scope;
use spmd_interp::{Op, TypedOp};
use spmd_oracle::{Property, Verdict};
use spmd_semantics::{Mesh, Shape, Q};

/// The layers, as data.
pub const LAYERS_TOML: &str = include_str!("../../examples/programs.toml");

/// One program of a table: its name in the rule file, what this suite
/// expects (`None`: sound, else the property it fails), and the local input
/// shapes its traffic is computed at.
pub struct Expected {
    pub name: &'static str,
    pub expect: Option<Property>,
    pub shapes: &'static [&'static [usize]],
}

const TP: &[&[usize]] = &[&[8, 4], &[4, 2], &[2, 4]];
const SP: &[&[usize]] = &[&[2, 4], &[4, 2], &[2, 4]];

/// What this suite expects of each program of `LAYERS_TOML`. Reference:
/// 4 ranks; TP activations 8 x 4 (SP: the local 2 x 4 of 8 x 4), W1 local
/// 4 x 2, W2 local 2 x 4.
pub const LAYERS: &[Expected] = &[
    Expected {
        name: "tensor parallel MLP",
        expect: None,
        shapes: TP,
    },
    Expected {
        name: "tensor parallel MLP without f",
        expect: Some(Property::B1),
        shapes: TP,
    },
    Expected {
        name: "sequence parallel MLP",
        expect: None,
        shapes: SP,
    },
    Expected {
        name: "sequence parallel MLP gathering to I",
        expect: Some(Property::B3),
        shapes: SP,
    },
];

/// One program, its expected verdict, what the oracle derived, and its cost.
pub struct ProgramResult {
    pub name: String,
    /// `None`: sound; else the property its (deliberately wrong) twin fails.
    pub expect: Option<Property>,
    pub program: TypedOp,
    pub verdict: Verdict,
    /// Elements sent per rank at the reference shapes, forward and backward.
    pub forward_cost: Q,
    pub backward_cost: Q,
}

impl ProgramResult {
    pub fn as_expected(&self) -> bool {
        self.verdict.violation().map(|v| v.property) == self.expect
    }
}

/// The mesh traffic is computed on: 4 ranks.
pub fn reference() -> Mesh {
    Mesh::line(4)
}

fn verdict_of(rule: &Rule, scope: &Scope) -> Verdict {
    if rule.has_backward {
        check_op(&rule.op, scope, &rule.meshes, &|_| {})
    } else {
        check_forward(&rule.op, scope, &rule.meshes)
    }
}

/// Every layer, checked in `scope` and costed.
pub fn programs(scope: &Scope) -> Result<Vec<ProgramResult>, UsageError> {
    check_table("examples/programs.toml", LAYERS_TOML, LAYERS, scope)
}

/// Check and cost every program a table expects something of, from the rule
/// file `text` (named `file` in errors).
pub fn check_table(
    file: &str,
    text: &str,
    table: &[Expected],
    scope: &Scope,
) -> Result<Vec<ProgramResult>, UsageError> {
    // Three inputs share the grid: raise the points cap so that the
    // smallest two-rank cases (324 points) and a few more are enumerated.
    let scope = Scope {
        max_points: scope.max_points.max(2048),
        ..scope.clone()
    };
    let rules = build(file, text, &parse_file(file, text)?, &scope)?;
    let m = reference();
    table
        .par_iter()
        .map(|e| {
            let rule = rules
                .iter()
                .find(|r| r.name == e.name)
                .ok_or_else(|| UsageError(format!("{file}: no program `{}`", e.name)))?;
            let Op::Program(p) = &rule.op.op else {
                return Err(UsageError(format!("{file}: `{}` is not a program", e.name)));
            };
            let shapes: Vec<Shape> = e.shapes.iter().map(|s| s.to_vec()).collect();
            let (forward_cost, backward_cost) = p
                .cost(&m, &shapes)
                .map_err(|x| UsageError(format!("{file}: `{}`: {x}", e.name)))?;
            Ok(ProgramResult {
                name: e.name.to_string(),
                expect: e.expect,
                verdict: verdict_of(rule, &scope),
                program: rule.op.clone(),
                forward_cost,
                backward_cost,
            })
        })
        .collect()
}
