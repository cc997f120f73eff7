//! The exact interpreter of spmd-check (SPEC.md §6): local ops as expressions,
//! their shapes, degrees, values and local VJPs, and per-rank execution of a
//! typed operation.

pub mod batch;
pub mod catalogue;
pub mod collective;
pub mod einsum;
pub mod eval;
pub mod expr;
pub mod external;
pub mod infer;
pub mod lanes;
pub mod op;
pub mod program;
pub mod ragged;
pub mod table;
pub mod transcendental;
pub mod uneven;

pub use collective::{Collective, Kind};
pub use eval::{Degree, EvalError};
pub use expr::{parse, parse_with_vars, Expr, LocalFn, ParseError};
pub use op::{builtin, Backward, Jvp, Op, TypedOp, BUILTINS};
pub use program::{Program, Step};
