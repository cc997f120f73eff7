//! spmd-check: an exact reference interpreter and exhaustive checker for the
//! sharding type rules of SPMD systems. This facade re-exports the workspace
//! crates and holds the drivers: exhaustive runs, derived tables and the
//! conformance tables of the seed systems.
//!
//! | crate | SPEC.md |
//! |---|---|
//! | `semantics` | §1 states and dialects, §2 values and denotation, §3 cotangents and pairing |
//! | `interp` | §6 local ops |
//! | `oracle` | §4 properties, §5 exact finite differences, §7 verdicts |
//! | `generators` | §8 scope |
//! | `dialects` | §15 the seed systems as dialects, their tables |
//! | this crate | §9 derived tables and conformance |

pub mod bench;
pub mod check;
pub mod collectives;
pub mod conform;
pub mod derive;
pub mod fidelity;
pub mod fsdp;
pub mod generated;
pub mod job;
pub mod jvps;
pub mod partition;
pub mod programs;
pub mod report;
pub mod rules;
pub mod run;
pub mod transposes;
pub mod types;

pub use spmd_dialects as dialects;
pub use spmd_generators as generators;
pub use spmd_interp as interp;
pub use spmd_oracle as oracle;
pub use spmd_semantics as semantics;
