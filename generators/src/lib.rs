//! Instance generators for spmd-check (SPEC.md §8): the exhaustive small
//! scope, value grids ordered for minimal counterexamples, and proptest /
//! quickcheck generators for random cases beyond it. Depends on semantics and
//! interp only, never on the oracle.

pub mod driver;
pub mod exhaustive;
pub mod lanes;
pub mod switch;
pub use lanes::{lane_groups, LaneGroups, Part};
pub mod programs;
pub mod ragged;
pub mod random;
pub mod uneven;

pub use driver::{
    affine_in_each, candidate_bound, cases, cases_in, degree_guard, enumerated_cases, estimate,
    estimate_typings, estimate_typings_until, meshes_for, own_partials, shape_table, tuple_guard,
    typings_bound, typings_cases_until, values_free, with_joint_budget, with_lane_mode, Case,
    CaseInputs, Coverage, LaneMode, ShapeTable, TypingCases, MAX_DEGREE, MAX_SHAPE_TUPLES,
};
pub use exhaustive::{
    all_global_types, all_types, candidate_count, candidate_tuples, for_each_grid_point,
    for_each_lane_point, for_each_lower_point, grid_size, lane_size, lower_size, shape_tuples,
    tuples, visit_candidates, Exhaustive, Scope, Split, DEFAULT_VALUES,
};
pub use random::{
    arb_mesh, arb_per_rank, arb_q, arb_shape, arb_state, arb_tensor, arb_type, small_meshes,
    ArbMesh, ArbPerRank, ArbState, ArbTensor, ArbType, Domain,
};
