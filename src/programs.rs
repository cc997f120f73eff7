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
pub const LAYERS_TOML: &str = include_str!("../examples/programs.toml");

/// What this suite expects of each program of `LAYERS_TOML`: `None` for
/// sound, else the property its twin fails; and whether x is sharded along
/// the sequence (for the reference shapes).
pub const LAYERS: &[(&str, Option<Property>, bool)] = &[
    ("tensor parallel MLP", None, false),
    ("tensor parallel MLP without f", Some(Property::B1), false),
    ("sequence parallel MLP", None, true),
    (
        "sequence parallel MLP gathering to I",
        Some(Property::B3),
        true,
    ),
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

/// The reference sizes for costs: 4 ranks; TP activations 8 x 4 (SP: the
/// local 2 x 4 of 8 x 4), W1 local 4 x 2, W2 local 2 x 4.
pub fn reference() -> Mesh {
    Mesh::line(4)
}

fn shapes(sequence_parallel: bool) -> Vec<Shape> {
    let x = if sequence_parallel {
        vec![2, 4]
    } else {
        vec![8, 4]
    };
    vec![x, vec![4, 2], vec![2, 4]]
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
    // Three inputs share the grid: raise the points cap so that the
    // smallest two-rank cases (324 points) and a few more are enumerated.
    let scope = Scope {
        max_points: scope.max_points.max(2048),
        ..scope.clone()
    };
    let file = "examples/programs.toml";
    let rules = build(file, LAYERS_TOML, &parse_file(file, LAYERS_TOML)?, &scope)?;
    let m = reference();
    LAYERS
        .par_iter()
        .map(|&(name, expect, seq)| {
            let rule = rules
                .iter()
                .find(|r| r.name == name)
                .ok_or_else(|| UsageError(format!("{file}: no program `{name}`")))?;
            let Op::Program(p) = &rule.op.op else {
                return Err(UsageError(format!("{file}: `{name}` is not a program")));
            };
            let (forward_cost, backward_cost) = p
                .cost(&m, &shapes(seq))
                .map_err(|e| UsageError(format!("{file}: `{name}`: {e}")))?;
            Ok(ProgramResult {
                name: name.to_string(),
                expect,
                verdict: verdict_of(rule, &scope),
                program: rule.op.clone(),
                forward_cost,
                backward_cost,
            })
        })
        .collect()
}
