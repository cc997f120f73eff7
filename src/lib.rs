//! spmd-check: an exact reference interpreter and exhaustive checker for the
//! sharding type rules of SPMD systems. This facade re-exports the
//! workspace crates, which follow the pipeline: read → elaborate → execute →
//! check → report.
//!
//! | crate | phase | SPEC.md |
//! |---|---|---|
//! | `syntax` | read: rule files and jobs | §11.1, §11.4 |
//! | `semantics` | states, values, denotation | §1–§3 |
//! | `dialects` | elaborate: each system's names, typing, casts, transposes | §15 |
//! | `interp` | execute: local ops and collectives | §6, §10 |
//! | `oracle` | check: properties, exact finite differences, verdicts | §4, §5, §7 |
//! | `generators` | scope and enumeration | §8 |
//! | `drivers` | commands and their reports | §9, §11–§21 |
//!
//! `src/` holds only this facade and the command line (`main.rs`).

/// One `#[test]` per rule of a rule file (SPEC.md §11.4).
pub use spmd_check_macros::rule_tests;
pub use spmd_drivers::*;
