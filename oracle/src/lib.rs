//! The oracle of spmd-check (SPEC.md §4, §5, §7): decides the properties of a
//! typed operation on one instance, with exact finite differences that never
//! call the backward being checked. Drivers (exhaustive enumeration, proptest,
//! the CLI) feed it instances and aggregate its outcomes into verdicts.

pub mod batching;
pub mod check;
pub mod exact_deriv;
pub mod fd;
pub mod outcome;
pub mod pending;
pub mod ragged;
pub mod uneven;
pub mod verdict;

pub use check::{
    check, check_involution, show_denot, Checker, Outcome, Pass, Phase, Property, Shown, Violation,
};
pub use verdict::{Tally, Verdict};
