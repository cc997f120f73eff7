//! Communication cost computed, not asserted (SPEC.md §10.4): FSDP's weight
//! gather to Reduced with a reduce-scatter backward, against the naive gather
//! to Invariant whose backward all-reduces. Both are programs in a rule file
//! (`examples/fsdp.toml`), checked end to end for gradient correctness by the
//! oracle, and their traffic is counted.

use crate::programs::{check_table, Expected, ProgramResult};
use crate::run::UsageError;
use spmd_generators::Scope;
use spmd_oracle::Property;

/// The strategies, as data.
pub const FSDP_TOML: &str = include_str!("../../examples/fsdp.toml");

/// x: a local batch of 3 rows times the full 8-row weight, whose local
/// shard is 2 x 4 on 4 ranks.
const SHAPES: &[&[usize]] = &[&[3, 8], &[2, 4]];

/// What each strategy must give: the two ways are sound, the twin fails B3.
pub const STRATEGIES: &[Expected] = &[
    Expected {
        name: "fsdp: all_gather to Reduced, reduce_scatter back",
        expect: None,
        shapes: SHAPES,
    },
    Expected {
        name: "naive: all_gather to Invariant, all_reduce back",
        expect: None,
        shapes: SHAPES,
    },
    Expected {
        name: "twin: all_gather to Reduced, slice back unreduced",
        expect: Some(Property::B3),
        shapes: SHAPES,
    },
];

/// The weight shard the traffic is computed for.
pub fn weight_shard() -> &'static [usize] {
    SHAPES[1]
}

/// All strategies, checked in `scope` and costed on `programs::reference()`.
pub fn strategies(scope: &Scope) -> Result<Vec<ProgramResult>, UsageError> {
    check_table("examples/fsdp.toml", FSDP_TOML, STRATEGIES, scope)
}
