//! The collective tables (SPEC.md §10.3): every forward/backward row of seed
//! 003 and every primitive and transpose pair of seed 000, for every
//! parameter choice in scope, with its negative twin.

use rstest::rstest;
use spmd_check::collectives::{check_pair, twin_must_fail, Involution, PAIR_ROWS};
use spmd_check::generators::Scope;

#[rstest]
#[case::st_reinterpret_r_i("st_reinterpret_r_i")]
#[case::st_reinterpret_r_v("st_reinterpret_r_v")]
#[case::st_convert_r_v("st_convert_r_v")]
#[case::st_reinterpret_r_p("st_reinterpret_r_p")]
#[case::st_convert_r_p("st_convert_r_p")]
#[case::st_reinterpret_i_r("st_reinterpret_i_r")]
#[case::st_convert_i_v("st_convert_i_v")]
#[case::st_convert_i_p("st_convert_i_p")]
#[case::st_all_gather_r("st_all_gather_r")]
#[case::st_all_gather_r_stack("st_all_gather_r_stack")]
#[case::st_all_gather_i_stack("st_all_gather_i_stack")]
#[case::st_reduce_scatter_unstack("st_reduce_scatter_unstack")]
#[case::st_convert_r_v_unstack("st_convert_r_v_unstack")]
#[case::st_convert_i_v_unstack("st_convert_i_v_unstack")]
#[case::st_convert_v_p_stack("st_convert_v_p_stack")]
#[case::st_all_gather_i("st_all_gather_i")]
#[case::st_all_gather_v("st_all_gather_v")]
#[case::st_all_to_all_literal("st_all_to_all_literal")]
#[case::st_all_to_all_swapped("st_all_to_all_swapped")]
#[case::st_reinterpret_v_p("st_reinterpret_v_p")]
#[case::st_convert_v_p("st_convert_v_p")]
#[case::st_all_reduce_r("st_all_reduce_r")]
#[case::st_all_reduce_i("st_all_reduce_i")]
#[case::st_reduce_scatter("st_reduce_scatter")]
#[case::st_reinterpret_i_v("st_reinterpret_i_v")]
#[case::st_2d_all_reduce_flat("st_2d_all_reduce_flat")]
#[case::st_2d_all_gather_flat("st_2d_all_gather_flat")]
#[case::st_2d_gather_tp_dp_i("st_2d_gather_tp_dp_i")]
#[case::st_2d_gather_tp_dp_v("st_2d_gather_tp_dp_v")]
#[case::st_2d_gather_tp_dp_p("st_2d_gather_tp_dp_p")]
#[case::st_2d_gather_tp_dp_r("st_2d_gather_tp_dp_r")]
#[case::st_redistribute_r_i("st_redistribute_r_i")]
#[case::st_redistribute_r_v("st_redistribute_r_v")]
#[case::st_redistribute_r_p("st_redistribute_r_p")]
#[case::st_redistribute_i_r("st_redistribute_i_r")]
#[case::st_redistribute_i_v("st_redistribute_i_v")]
#[case::st_redistribute_i_p("st_redistribute_i_p")]
#[case::st_redistribute_v_r("st_redistribute_v_r")]
#[case::st_redistribute_v_i("st_redistribute_v_i")]
#[case::st_redistribute_v_p("st_redistribute_v_p")]
#[case::st_redistribute_p_r("st_redistribute_p_r")]
#[case::st_redistribute_p_i("st_redistribute_p_i")]
#[case::st_redistribute_p_v("st_redistribute_p_v")]
#[case::jax_pvary("jax_pvary")]
#[case::jax_preduced("jax_preduced")]
#[case::jax_vary_unreduced_cast("jax_vary_unreduced_cast")]
#[case::jax_reduced_vary_cast("jax_reduced_vary_cast")]
#[case::jax_all_gather_reduced("jax_all_gather_reduced")]
#[case::jax_unreduced_psum_scatter("jax_unreduced_psum_scatter")]
#[case::jax_psum_invariant("jax_psum_invariant")]
#[case::jax_all_gather_invariant("jax_all_gather_invariant")]
#[case::jax_all_gather("jax_all_gather")]
#[case::jax_reduce_scatter("jax_reduce_scatter")]
#[case::jax_unreduced_psum("jax_unreduced_psum")]
#[case::jax_psum("jax_psum")]
#[case::jax_legacy_psum("jax_legacy_psum")]
#[case::jax_pmean("jax_pmean")]
#[case::jax_ppermute("jax_ppermute")]
#[case::jax_ppermute_partial("jax_ppermute_partial")]
#[case::jax_ppermute_partial_back("jax_ppermute_partial_back")]
fn collective_row(#[case] id: &str) {
    let r = PAIR_ROWS.iter().find(|r| r.id == id).expect("row");
    let res = check_pair(r, &Scope::default()).expect("row parses");
    assert_eq!(
        res.verdict.violation().map(|v| v.property),
        r.expect,
        "{id} [{}]: oracle says {}: {:?}",
        res.params,
        res.verdict.name(),
        res.verdict.violation().map(|v| v.one_line())
    );
    if r.expect.is_none() {
        assert!(res.verdict.is_sound(), "{id}: {}", res.verdict.name());
    }
    assert_eq!(
        res.twin.violation().map(|v| v.property),
        Some(twin_must_fail(r)),
        "{id}: the negative twin must fail {}",
        twin_must_fail(r)
    );
}

/// T1 holds for every pair whose transposes the table lists both ways, and the
/// deliberately wrong pmean/pvary pair fails it.
#[test]
fn involution_of_transpose_pairs() {
    let scope = Scope::default();
    for id in [
        "st_all_gather_r",
        "st_reduce_scatter",
        "st_convert_r_v",
        "st_all_gather_r_stack",
        "st_reduce_scatter_unstack",
        "st_convert_r_v_unstack",
        "st_convert_v_p_stack",
        "jax_all_gather_reduced",
        "jax_reduced_vary_cast",
    ] {
        let r = PAIR_ROWS.iter().find(|r| r.id == id).unwrap();
        let res = check_pair(r, &scope).unwrap();
        assert!(
            matches!(res.involution, Involution::Checked(None)),
            "{id}: {}",
            res.t1_word()
        );
    }
    // JAX's pmean transpose (divide by n, then pvary) is sound; pvary
    // alone, which an earlier row wrongly attributed to JAX, is off by n.
    let r = PAIR_ROWS.iter().find(|r| r.id == "jax_pmean").unwrap();
    let res = check_pair(r, &scope).unwrap();
    assert!(res.verdict.is_sound(), "{}", res.line());
    let (op, _, meshes) = spmd_check::collectives::instantiate(r, (0, 0, 0), &scope).unwrap();
    let wrong = spmd_check::interp::TypedOp {
        backward: spmd_check::interp::Backward::Transpose(spmd_check::interp::Op::Collective(
            spmd_check::interp::catalogue::collective(
                "pvary",
                &[spmd_check::semantics::State::Invariant],
                &[spmd_check::semantics::State::Varying],
                &["x".to_string()],
            )
            .unwrap(),
        )),
        ..op
    };
    let v = spmd_check::run::check_op(&wrong, &scope, &meshes, &|_| {});
    assert_eq!(
        v.violation().map(|x| x.property),
        Some(spmd_check::oracle::Property::B3)
    );
    // JAX lists pvary -> psum_invariant but not the way back.
    let r = PAIR_ROWS.iter().find(|r| r.id == "jax_pvary").unwrap();
    assert!(matches!(
        check_pair(r, &scope).unwrap().involution,
        Involution::NotListed(_)
    ));
}

/// SPEC.md §10.5: the cheapest correct transpose of all_gather to Reduced is
/// reduce_scatter, and all_to_all's transposes swap split and concat. The
/// negative side: all_to_all with its own dims is not among them.
#[test]
fn transpose_search_finds_the_cheapest() {
    use spmd_check::semantics::Dialect;
    use spmd_check::transposes::{describe_typed, search};
    let scope = Scope::default();
    let found = search(Dialect::SpmdTypes, "all_gather(dim=0)", "V", "R", &scope).unwrap();
    assert_eq!(
        describe_typed(&found[0].backward, Dialect::SpmdTypes),
        "reduce_scatter(dim=0)[P->V]"
    );
    assert!(found.windows(2).all(|w| w[0].cost <= w[1].cost));
    let a2a = search(
        Dialect::SpmdTypes,
        "all_to_all(split=0, concat=1)",
        "V",
        "V",
        &scope,
    )
    .unwrap();
    let texts: Vec<String> = a2a
        .iter()
        .map(|f| describe_typed(&f.backward, Dialect::SpmdTypes))
        .collect();
    assert!(
        texts.contains(&"all_to_all(split=1, concat=0)[V->V]".to_string()),
        "{texts:?}"
    );
    assert!(
        !texts
            .iter()
            .any(|t| t.starts_with("all_to_all(split=0, concat=1)")),
        "{texts:?}"
    );
}
