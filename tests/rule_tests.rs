//! `rule_tests!` (SPEC.md §11.4): one `#[test]` per rule of a file; rules
//! listed as `unsound` pass only when the checker finds a counterexample.

mod fixture {
    spmd_check::rule_tests!(
        "tests/rule_tests/rules.toml",
        unsound = ["partial times partial"]
    );

    /// The generated tests have the rules' names; calling them runs them.
    #[test]
    fn the_tests_are_named_by_the_rules() {
        add_of_partials();
        neg_of_varying();
        partial_times_partial();
    }
}

/// The twins: the assertions the generated tests call do fail on the wrong
/// answer, naming the rule and the verdict.
#[test]
fn a_wrong_expectation_fails() {
    use spmd_check::check::{assert_rule_in_file_sound, assert_rule_in_file_unsound};
    let f = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rule_tests/rules.toml");
    let msg = |r: std::thread::Result<()>| {
        let e = r.expect_err("must panic");
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let m = msg(std::panic::catch_unwind(|| {
        assert_rule_in_file_sound(f, "partial times partial")
    }));
    assert!(
        m.contains("partial times partial") && m.contains("unsound"),
        "{m}"
    );
    let m = msg(std::panic::catch_unwind(|| {
        assert_rule_in_file_unsound(f, "add of partials")
    }));
    assert!(
        m.contains("listed as unsound") && m.contains("sound"),
        "{m}"
    );
    let m = msg(std::panic::catch_unwind(|| {
        assert_rule_in_file_sound(f, "no such rule")
    }));
    assert!(m.contains("no rule named"), "{m}");
}
