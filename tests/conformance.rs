//! The conformance suite (SPEC.md §9.2): every local-op typing rule of the
//! seed systems, each checked by the oracle. A row's expectation is either
//! sound or a named property; each allowed row's negative twin must be
//! rejected for its named property, so no row can pass vacuously.

use rstest::rstest;
use spmd_check::conform::{check_row, seed_rules};
use spmd_check::generators::Scope;
use spmd_check::oracle::Verdict;

fn row(id: &str) -> &'static spmd_check::conform::SeedRule {
    seed_rules()
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no seed rule `{id}`"))
}

#[rstest]
#[case::st_rep_mul("st_rep_mul")]
#[case::st_rep_nonlinear("st_rep_nonlinear")]
#[case::st_rep_div("st_rep_div")]
#[case::st_inv_mul("st_inv_mul")]
#[case::st_var_mul("st_var_mul")]
#[case::st_var_matmul("st_var_matmul")]
#[case::st_lin_scale("st_lin_scale")]
#[case::st_lin_sum("st_lin_sum")]
#[case::st_lin_transpose("st_lin_transpose")]
#[case::st_rep_var("st_rep_var")]
#[case::st_rep_var_matmul("st_rep_var_matmul")]
#[case::st_pp_add("st_pp_add")]
#[case::st_multilinear_concat("st_multilinear_concat")]
#[case::st_multilinear_mul("st_multilinear_mul")]
#[case::st_pp_mul("st_pp_mul")]
#[case::st_inv_var("st_inv_var")]
#[case::st_inv_rep("st_inv_rep")]
#[case::st_inv_part("st_inv_part")]
#[case::st_nonlinear_p("st_nonlinear_p")]
#[case::st_affine_p("st_affine_p")]
#[case::st_rep_plus_part("st_rep_plus_part")]
#[case::st_gap_rep_times_part("st_gap_rep_times_part")]
#[case::st_gap_rep_to_var("st_gap_rep_to_var")]
#[case::st_2d_add("st_2d_add")]
#[case::st_2d_mul_rp("st_2d_mul_rp")]
#[case::st_2d_rep_var("st_2d_rep_var")]
#[case::st_2d_inv("st_2d_inv")]
#[case::jax_unary_copies_reduced("jax_unary_copies_reduced")]
#[case::jax_nary_same_reduced("jax_nary_same_reduced")]
#[case::jax_nary_skips_empty("jax_nary_skips_empty")]
#[case::jax_nary_mismatch("jax_nary_mismatch")]
#[case::jax_dot_no_propagation("jax_dot_no_propagation")]
#[case::dtensor_uniform_any_reduced("dtensor_uniform_any_reduced")]
#[case::dtensor_both_reduced_matmul("dtensor_both_reduced_matmul")]
#[case::dtensor_fsdp_inputs_disagree("dtensor_fsdp_inputs_disagree")]
#[case::ltensor_union_varying("ltensor_union_varying")]
#[case::ltensor_intersection_reduced("ltensor_intersection_reduced")]
#[case::ltensor_all_reduced("ltensor_all_reduced")]
#[case::st_global_einsum_batch("st_global_einsum_batch")]
#[case::st_global_matmul_rows("st_global_matmul_rows")]
#[case::st_global_contracted_sharded("st_global_contracted_sharded")]
#[case::st_global_out_partial("st_global_out_partial")]
#[case::st_global_sum_sharded_dim("st_global_sum_sharded_dim")]
#[case::nabla_contracting_dim_allreduce("nabla_contracting_dim_allreduce")]
#[case::nabla_reduce_sum_sharded("nabla_reduce_sum_sharded")]
#[case::nabla_reduce_mean_sharded("nabla_reduce_mean_sharded")]
#[case::nabla_reduce_max_sharded("nabla_reduce_max_sharded")]
#[case::nabla_slice_defers("nabla_slice_defers")]
#[case::nabla_gather_defers("nabla_gather_defers")]
#[case::nabla_concat_all_partial("nabla_concat_all_partial")]
#[case::nabla_concat_some_partial("nabla_concat_some_partial")]
#[case::nabla_narrowing_cast("nabla_narrowing_cast")]
#[case::nabla_nonlinear("nabla_nonlinear")]
fn seed_rule(#[case] id: &str) {
    let r = row(id);
    let res = check_row(r, &Scope::default(), &|_| {}).expect("row parses");
    match r.expect {
        None => assert!(
            matches!(res.verdict, Verdict::Sound { .. }),
            "{id}: expected sound, oracle says {}: {:?}",
            res.verdict.name(),
            res.verdict.violation().map(|v| v.one_line())
        ),
        Some(p) => assert_eq!(
            res.derived(),
            Some(p),
            "{id}: expected a violation of {p}, oracle says {}",
            res.verdict.name()
        ),
    }
    if let Some(t) = &r.twin {
        let tv = res.twin.as_ref().expect("twin checked");
        assert_eq!(
            tv.violation().map(|v| v.property),
            Some(t.fails),
            "{id}: negative twin `{}` must fail {}, oracle says {}",
            t.op,
            t.fails,
            tv.name()
        );
    }
}

/// Every row that a seed allows has a twin (the suite cannot pass by
/// accepting everything), unless the row itself is a known finding.
#[test]
fn every_allowed_sound_row_has_a_negative_twin() {
    for r in seed_rules() {
        if r.claim == spmd_check::conform::Claim::Allowed && r.expect.is_none() {
            assert!(r.twin.is_some(), "{} has no negative twin", r.id);
        }
    }
}

/// The table covers the 2x2 mesh with different states on the two axes.
#[test]
fn two_axis_rows_exist() {
    assert!(
        seed_rules()
            .iter()
            .filter(|r| r.inputs.iter().any(|i| i.contains("dp:")))
            .count()
            >= 4
    );
}
