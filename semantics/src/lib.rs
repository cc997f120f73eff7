//! The denotational core of spmd-check (SPEC.md §1-§3): exact scalars and
//! tensors, meshes, states and types with their dialect names, per-rank values
//! and what they denote.

pub mod batch;
pub mod expoly;
pub mod interval;
pub mod mesh;
pub mod names;
pub mod pending;
pub mod perrank;
pub mod property;
pub mod q;
mod sorted;
pub mod state;
pub mod symbolic;
pub mod tensor;
pub mod uneven;

pub use mesh::{Axis, Mesh};
pub use perrank::{denote, equivalent, well_formed, Denot, PerRank};
pub use property::Property;
pub use q::Q;
pub use state::{Dialect, State, Type, ALL_STATES};
pub use tensor::{Shape, Tensor};
