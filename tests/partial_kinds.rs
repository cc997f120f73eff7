//! Pending reductions beyond sums (SPEC.md §21): each derived property with
//! a negative twin that says which property fails. Verdicts come from the
//! oracle; the expected ones here are what the denotation implies.

mod common;
use spmd_check::conform::{check_oracle_row, conform_section, ORACLE_ROWS};
use spmd_check::partial_kinds::*;
use spmd_interp::expr::parse;
use spmd_semantics::pending::PartialKind::{Avg, Max, Min, Sum};
use spmd_semantics::pending::Place;
use spmd_semantics::Q;

use Place::{Inv, Part, Shard};

fn verdict(expr: &str, ins: &[Place], out: Place) -> Verdict {
    let f = parse(expr).unwrap();
    check_places(&f, ins, &[out], &Scope::conform())
        .unwrap()
        .remove(0)
}

fn defers(expr: &str, ins: &[Place], out: Place) {
    let v = verdict(expr, ins, out);
    assert_eq!(v.key(), "defers", "`{expr}` {ins:?} -> {out}: {}", v.text());
    assert!(v.tally().distributed_cases > 0);
}

/// The counterexample of a typing that must be refuted.
fn refuted(expr: &str, ins: &[Place], out: Place) -> Counterexample {
    match verdict(expr, ins, out) {
        Verdict::Unsound { violation: c, .. } => *c,
        v => panic!("`{expr}` {ins:?} -> {out} should be refuted: {}", v.text()),
    }
}

#[test]
fn relu_defers_max_and_min_but_never_swaps_them() {
    defers("relu(x)", &[Part(Max)], Part(Max));
    // Computed, not guessed: relu is non-decreasing, so it defers min too.
    defers("relu(x)", &[Part(Min)], Part(Min));
    // Twins: it keeps the kind; a pending sum does not pass through it.
    let c = refuted("relu(x)", &[Part(Max)], Part(Min));
    assert_eq!(c.n, 2);
    refuted("relu(x)", &[Part(Min)], Part(Max));
    refuted("relu(x)", &[Part(Sum)], Part(Sum));
}

#[test]
fn negation_and_negative_scaling_swap_max_and_min() {
    defers("-x", &[Part(Max)], Part(Min));
    defers("-x", &[Part(Min)], Part(Max));
    defers("-2 * x", &[Part(Max)], Part(Min));
    // Twin: neg keeping max is refuted on two ranks, with denotations.
    let c = refuted("-x", &[Part(Max)], Part(Max));
    assert_eq!(c.n, 2);
    assert_ne!(c.denoted.as_ref(), Some(&c.expected));
    refuted("-2 * x", &[Part(Max)], Part(Max));
    // Positive scaling keeps it.
    defers("2 * x", &[Part(Max)], Part(Max));
}

#[test]
fn adding_a_constant_defers_max_but_not_sum() {
    defers("x + 3", &[Part(Max)], Part(Max));
    defers("x + y", &[Part(Min), Inv], Part(Min));
    defers("x + 3", &[Part(Avg)], Part(Avg));
    // Twin: on two ranks the constant is counted twice.
    let c = refuted("x + 3", &[Part(Sum)], Part(Sum));
    assert_eq!(c.n, 2);
    assert_eq!(c.expected.data, vec![Q::int(3)]);
    assert_eq!(c.denoted.unwrap().data, vec![Q::int(6)]);
}

#[test]
fn avg_is_the_sum_over_n() {
    defers("x", &[Part(Avg)], Part(Avg));
    defers("x / 2", &[Part(Sum)], Part(Sum));
    // Twin: reading a pending mean as a pending sum is off by n.
    let c = refuted("x", &[Part(Avg)], Part(Sum));
    let (got, want) = (
        c.denoted.unwrap().data[0].clone(),
        c.expected.data[0].clone(),
    );
    assert_eq!(got, want.mul(&Q::int(c.n as i64)));
    // The collectives: all_reduce(avg) keeps the mean; all_reduce(sum)
    // claimed for it fails F3.
    let rows = collective_rows();
    let row = rows
        .iter()
        .find(|r| r.name.starts_with("all_reduce(avg)"))
        .unwrap();
    assert!(check_collective(row, &Scope::conform()).is_ok());
    let twin = rows
        .iter()
        .find(|r| r.name == "twin: all_reduce(sum) claimed P(avg) -> I")
        .unwrap();
    assert_eq!(
        check_collective(twin, &Scope::conform()).unwrap_err().0,
        "F3"
    );
}

#[test]
fn reductions_over_a_dim_commute_only_with_their_own_kind() {
    // sum over a dim does not commute with a pending max ...
    let c = refuted("sum(x, 0)", &[Part(Max)], Part(Max));
    assert_eq!(c.inputs[0][0].shape, vec![2], "needs two elements: {c}");
    // ... but with a pending sum (twin of the above).
    defers("sum(x, 0)", &[Part(Sum)], Part(Sum));
    // max over a dim commutes with a pending max, not with a pending sum.
    defers("max(x, 0)", &[Part(Max)], Part(Max));
    refuted("max(x, 0)", &[Part(Sum)], Part(Sum));
    // mean and avg: a mean over a dim passes avg and sum through.
    defers("mean(x, 0)", &[Part(Avg)], Part(Avg));
    defers("mean(x, 0)", &[Part(Sum)], Part(Sum));
    refuted("mean(x, 0)", &[Part(Max)], Part(Max));
    // Over the sharded dim: mean gives avg, max gives max, sum gives sum.
    defers("mean(x, 0)", &[Shard(0)], Part(Avg));
    defers("max(x, 0)", &[Shard(0)], Part(Max));
    defers("sum(x, 0)", &[Shard(0)], Part(Sum));
    refuted("mean(x, 0)", &[Shard(0)], Part(Sum));
    refuted("max(x, 0)", &[Shard(0)], Part(Avg));
}

#[test]
fn elementwise_max_of_two_pending_maxima() {
    let max = "(x + y + abs(x - y)) / 2";
    defers(max, &[Part(Max), Part(Max)], Part(Max));
    refuted(max, &[Part(Min), Part(Min)], Part(Min));
    // A product of two pending means is not a pending mean.
    refuted("x * y", &[Part(Avg), Part(Avg)], Part(Avg));
    defers("x * y", &[Part(Avg), Inv], Part(Avg));
}

#[test]
fn derived_table_has_every_typing_and_one_deferring_output_for_neg() {
    let f = parse("-x").unwrap();
    let rows = derive_partial(&f, Max, &Scope::conform()).unwrap();
    assert_eq!(rows.len(), 5);
    let ok: Vec<Place> = rows
        .iter()
        .filter(|r| r.verdict.key() == "defers")
        .map(|r| r.output)
        .collect();
    assert_eq!(ok, vec![Part(Min)]);
    // Two inputs: three input assignments times five outputs.
    let f = parse("x * y").unwrap();
    assert_eq!(
        derive_partial(&f, Avg, &Scope::conform()).unwrap().len(),
        15
    );
}

#[test]
fn collectives_keep_the_value_and_their_twins_fail_f3() {
    for row in collective_rows() {
        let res = check_collective(&row, &Scope::conform());
        match row.expect_fail {
            None => assert!(res.is_ok(), "{}: {:?}", row.name, res.err()),
            Some(p) => assert_eq!(res.err().map(|e| e.0), Some(p.into()), "{}", row.name),
        }
    }
}

#[test]
fn from_local_gradients_dtensor_is_right_for_sum_only() {
    let s = Scope::conform();
    assert!(check_from_local(Sum, dtensor_from_local_backward, &s).is_ok());
    for k in [Avg, Max, Min] {
        let e = check_from_local(k, dtensor_from_local_backward, &s).unwrap_err();
        assert!(e.starts_with("B3"), "{k}: {e}");
        // The transpose of the denotation passes where DTensor's fails.
        let (checked, _) = check_from_local(k, exact_from_local_backward, &s).unwrap();
        assert!(checked > 0);
    }
    // avg: DTensor's gradient is n times the derivative.
    let e = check_from_local(Avg, dtensor_from_local_backward, &s).unwrap_err();
    assert!(
        e.contains("gives rank 0 element 0 1, the derivative of the denotation is 1/2"),
        "{e}"
    );
}

#[test]
fn all_reduce_max_jvp_is_the_tangent_at_the_maximum() {
    let s = Scope::conform();
    for k in [Max, Min] {
        let (checked, ties) = check_all_reduce_jvp(k, argext_jvp, &s).unwrap();
        assert!(checked > 0 && ties > 0, "ties are undetermined, not passes");
        assert!(check_all_reduce_jvp(k, psum_jvp, &s)
            .unwrap_err()
            .starts_with("J1"));
        assert!(check_all_reduce_jvp(k, same_kind_jvp, &s)
            .unwrap_err()
            .starts_with("J1"));
    }
    // The linear kinds' JVP is their own reduction.
    assert!(check_all_reduce_jvp(Avg, argext_jvp, &s).is_ok());
    assert!(check_all_reduce_jvp(Avg, psum_jvp, &s).is_err());
}

#[test]
fn conform_section_comes_out_as_pinned() {
    let (text, json, ok) = conform_section(&Scope::conform()).unwrap();
    assert_eq!(json["ok"], serde_json::json!(ok));
    assert!(json["entries"]
        .as_array()
        .is_some_and(|e| e.iter().all(|x| x["as_pinned"] == serde_json::json!(true))));
    assert!(ok, "{text}");
    let rules = read_rules(RULES_TOML).unwrap();
    let results = check_rules(&rules, &Scope::conform()).unwrap();
    let findings: Vec<&str> = results
        .iter()
        .filter(|r| r.is_finding())
        .map(|r| r.rule.name.as_str())
        .collect();
    assert_eq!(
        findings,
        vec![
            "threshold(x, 0, 5) P(max) (value > threshold; off 0)",
            "reduce_max of an Unreduced (sum) operand, no out_sharding",
            "reduce_min of an Unreduced (sum) operand, no out_sharding",
        ]
    );
    assert!(results.iter().all(|r| r.as_expected() && r.twin_rejected()));
    assert!(results.iter().filter(|r| r.twin.is_some()).count() >= 30);
}

/// Negative twin for the table check: a rule pinned `defers` that the oracle
/// refutes is not as pinned, and a twin that is sound is not rejected.
#[test]
fn a_wrong_rule_row_is_caught() {
    let text = r#"
[[rule]]
name = "neg keeps max"
system = "test"
source = "made up"
op = "-x"
inputs = ["Partial(max)"]
output = "Partial(max)"
expect = "defers"
twin = { inputs = ["Partial(max)"], output = "Partial(min)" }
"#;
    let r = check_rules(&read_rules(text).unwrap(), &Scope::conform()).unwrap();
    assert!(!r[0].as_expected());
    assert!(r[0].is_finding());
    assert!(!r[0].twin_rejected());
}

#[test]
fn bad_rule_rows_are_one_line_errors_naming_the_row() {
    let base = "[[rule]]\nname = \"r\"\nsystem = \"s\"\nsource = \"x\"\n";
    for (extra, want) in [
        (
            "op = \"-x\"\ninputs = [\"Partial(prod)\"]\noutput = \"I\"\nexpect = \"defers\"\n",
            "unknown pending reduction",
        ),
        (
            "op = \"-x\"\ninputs = [\"I\", \"I\"]\noutput = \"I\"\nexpect = \"defers\"\n",
            "2 placements for 1 inputs",
        ),
        (
            "op = \"-x\"\ninputs = [\"I\"]\noutput = \"I\"\nexpect = \"maybe\"\n",
            "expect is",
        ),
        (
            "op = \"-(\"\ninputs = [\"I\"]\noutput = \"I\"\nexpect = \"defers\"\n",
            "rule `r`",
        ),
    ] {
        let e = read_rules(&format!("{base}{extra}")).unwrap_err();
        assert!(e.contains(want) && !e.contains('\n'), "{e}");
    }
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn derive_partial_on_the_command_line() {
    let out = cli(&["derive", "relu", "--partial", "max", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&v["command"], &v["mode"]),
        (&"derive".into(), &"partial".into())
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let at = |o: &str| rows.iter().find(|r| r["output"] == o).unwrap()["verdict"].clone();
    assert_eq!(at("P(max)"), "defers");
    assert_eq!(at("P(min)"), "refuted");
    assert!(v["scope"].as_str().unwrap().contains("ranks"));
    let out = cli(&["derive", "--expr", "x + 1", "--partial", "sum"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("P(sum) -> P(sum)                   counterexample: 2 ranks"),
        "{text}"
    );
    // Bad input: one line, exit 2.
    for args in [
        &["derive", "relu", "--partial", "prod"][..],
        &["derive", "--expr", "exp(exp(x))", "--partial", "max"][..],
        &["derive", "relu", "--partial", "max", "--global"][..],
        &["derive", "--partial", "max"][..],
    ] {
        let out = cli(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(common::error_lines(&err), 1, "{args:?}: {err}");
    }
}

/// `derive --partial` follows the scope flags (SPEC.md §21.2): `--scope
/// small` keeps 1-2 ranks and `--max-points` replaces its cap. The twin: a cap
/// too small for any multi-rank case makes every row vacuous, which the
/// report says instead of "defers".
#[test]
fn derive_partial_follows_the_scope_flags() {
    let scope_of = |args: &[&str]| -> serde_json::Value {
        let mut a = vec!["derive", "relu", "--partial", "max", "--json"];
        a.extend_from_slice(args);
        let out = cli(&a);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let small = scope_of(&["--scope", "small"]);
    let s = small["scope"].as_str().unwrap();
    assert!(s.contains("1, 2 ranks") && !s.contains("3"), "{s}");
    let rows = |v: &serde_json::Value| v["rows"].as_array().unwrap().clone();
    let at = |v: &serde_json::Value, o: &str| {
        rows(v).iter().find(|r| r["output"] == o).unwrap()["verdict"].clone()
    };
    assert_eq!(at(&small, "P(max)"), "defers");
    let tiny = scope_of(&["--max-points", "10"]);
    assert!(
        rows(&tiny).iter().all(|r| r["verdict"] == "vacuous"),
        "{tiny}"
    );
}

/// Negative twins for the fidelity replay of DTensor's Partial(avg) and
/// Partial(max) (SPEC.md §21.5): a gradient off by n, a wrong forward, and
/// an output kind that does not denote the op.
#[test]
fn tampered_pending_cases_are_caught() {
    use spmd_check::fidelity::run;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-pending-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = std::fs::read_to_string(format!(
        "{}/dtensor_ops.json",
        spmd_check::fidelity::default_dir()
    ))
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&src).unwrap();
    let cases = v["cases"].as_array_mut().unwrap();
    let mut mean = cases.iter().find(|c| c["id"] == "mean_S").unwrap().clone();
    let mut amax = cases.iter().find(|c| c["id"] == "amax_S").unwrap().clone();
    let mut amax_sum = amax.clone();
    mean["real"]["transpose"][0]["per_rank"] = serde_json::json!([[10, 10], [10, 10]]);
    amax["real"]["output_per_rank"] = serde_json::json!([4, 4]);
    amax_sum["id"] = serde_json::json!("amax_S_as_sum");
    amax_sum["real"]["output"] = serde_json::json!("Partial(sum)");
    amax_sum["real"]["transpose"] = serde_json::Value::Null;
    v["cases"] = serde_json::json!([mean, amax, amax_sum]);
    std::fs::write(dir.join("dtensor_ops.json"), v.to_string()).unwrap();
    let rs = run(dir.to_str().unwrap()).unwrap();
    let class = |id: &str| rs.iter().find(|r| r.id == id).unwrap().class.clone();
    let c = class("mean_S");
    assert_eq!(c.key(), "model_mismatch", "{c:?}");
    assert!(c.detail().unwrap().contains("gradient"), "{c:?}");
    assert_eq!(class("amax_S").key(), "model_mismatch");
    // Partial() (a sum) for amax: the general replay, which the oracle
    // refutes (F3 in its own terms).
    let c = class("amax_S_as_sum");
    assert_eq!(c.key(), "real_defect", "{c:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The linear kinds' per-rank gradients through the oracle's own B3
/// (SPEC.md §21.4): psum with the cotangent on every rank is sound, pmean
/// with it fails B3 (off by n), pmean with g / n is sound.
#[test]
fn linear_kinds_per_rank_gradients_by_the_oracle() {
    let got: Vec<bool> = ORACLE_ROWS
        .iter()
        .map(|(_, t, _)| check_oracle_row(t).is_ok())
        .collect();
    assert_eq!(got, vec![true, false, true]);
    let e = check_oracle_row(ORACLE_ROWS[1].1).unwrap_err();
    assert!(e.starts_with("B3"), "{e}");
    assert!(e.contains("expected <1/2 | 1/2>, got <1 | 1>"), "{e}");
}

// ---------------------------------------------------------------------------
// Transcendental ops under a pending kind (SPEC.md §21.2): the exact field,
// comparisons decided exactly or by disjoint enclosures, undecided counted.

/// The field values of a transcendental counterexample.
fn field(c: &Counterexample) -> &FieldValues {
    c.field.as_ref().expect("a transcendental counterexample")
}

#[test]
fn exp_defers_a_pending_max_and_fails_on_a_pending_sum() {
    // exp is increasing: exp(max x) = max exp(x), on every decided instance.
    let v = verdict("exp(x)", &[Part(Max)], Part(Max));
    assert_eq!(v.key(), "defers", "{}", v.text());
    assert!(v.tally().distributed_cases > 0 && v.decided() > 0);
    assert_eq!(v.tally().undecided, 0, "{}", v.text());
    defers("exp(x)", &[Part(Min)], Part(Min));
    // Twin: exp(a + b) is not exp a + exp b. The first instance of two
    // ranks already differs, exactly: e^0 + e^0 = 2 against e^(0 + 0) = 1.
    let c = refuted("exp(x)", &[Part(Sum)], Part(Sum));
    assert_eq!(c.n, 2);
    assert_eq!(c.inputs[0][0].to_string(), "0");
    assert_eq!(c.inputs[0][1].to_string(), "0");
    let fv = field(&c);
    assert_eq!(fv.decided, "exactly");
    assert_eq!(fv.expected, "1");
    assert_eq!(fv.denoted.as_deref(), Some("2"));
    // Twin: a claimed output kind of min for a pending max is refuted on
    // x = (0, 1): per-rank e^0 and e^1 denote 1 under min, exp(max) = e.
    // Ordering e against 1 rests on an enclosure.
    let c = refuted("exp(x)", &[Part(Max)], Part(Min));
    assert_eq!(c.n, 2);
    assert_eq!(
        (c.inputs[0][0].to_string(), c.inputs[0][1].to_string()),
        ("0".into(), "1".into())
    );
    let fv = field(&c);
    assert_eq!(fv.decided, "by disjoint enclosures");
    assert_eq!(fv.denoted.as_deref(), Some("1"));
    assert_eq!(fv.expected, "e^(1)");
}

#[test]
fn tanh_and_sigmoid_keep_their_kind_and_a_wrong_kind_is_refuted() {
    defers("tanh(x)", &[Part(Min)], Part(Min));
    defers("sigmoid(x)", &[Part(Max)], Part(Max));
    // Twins: the other extreme, and avg (tanh is not linear).
    let c = refuted("tanh(x)", &[Part(Min)], Part(Max));
    assert_eq!(c.n, 2);
    assert!(field(&c).per_rank.iter().any(|v| v.contains("e^(2)")));
    let c = refuted("tanh(x)", &[Part(Avg)], Part(Avg));
    assert_eq!(c.n, 2);
    let c = refuted("sigmoid(x)", &[Part(Max)], Inv);
    // The per-rank outputs differ, so a Replicate output denotes nothing.
    assert_eq!(field(&c).denoted, None);
}

#[test]
fn cos_is_not_monotone_and_is_refuted_on_a_pending_max() {
    // cos decreases on [0, π]: max(cos 0, cos 1) = 1, cos(max(0, 1)) = cos 1.
    let c = refuted("cos(x)", &[Part(Max)], Part(Max));
    assert_eq!(c.n, 2);
    assert_eq!(field(&c).expected, "cos(1)");
    assert_eq!(field(&c).decided, "by disjoint enclosures");
}

#[test]
fn undecided_instances_are_named_never_passed() {
    // log(x²) − 2 log x is 0 for x > 0, but its normal form is not empty
    // (log 4 and log 2 are different atoms), so comparing two ranks'
    // values needs enclosures, which all contain 0: undecided.
    let v = verdict("log(x * x) - 2 * log(x)", &[Part(Max)], Part(Max));
    assert_eq!(v.key(), "defers", "{}", v.text());
    assert!(v.tally().undecided > 0, "{}", v.text());
    assert!(v.text().contains("undecided"), "{}", v.text());
    assert_eq!(v.json()["undecided"], v.tally().undecided);
    // Twin: adding 1 and claiming a pending sum counts the 1 once per rank,
    // decided exactly on x = (1, 1) (log 1 = 0): 1 + 1 against 1.
    let c = refuted("log(x * x) - 2 * log(x) + 1", &[Part(Max)], Part(Sum));
    assert_eq!(c.n, 2);
    assert_eq!(field(&c).decided, "exactly");
    assert_eq!(field(&c).denoted.as_deref(), Some("2"));
}

#[test]
fn derive_exp_partial_max_on_the_command_line() {
    let out = cli(&["derive", "exp", "--partial", "max", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let at = |o: &str| rows.iter().find(|r| r["output"] == o).unwrap().clone();
    assert_eq!(at("P(max)")["verdict"], "defers");
    let sum = at("P(sum)");
    assert_eq!(sum["verdict"], "refuted");
    assert_eq!(sum["counterexample"]["decided"], "exactly");
    assert_eq!(
        at("P(min)")["counterexample"]["decided"],
        "by disjoint enclosures"
    );
}

/// Never vacuously sound (SPEC.md §7.1): a pending-kind run whose every
/// instance was undecided (overlapping enclosures, §21.2) concludes
/// undetermined with that reason, neither sound nor vacuous; one where
/// nothing ran on more than one rank is vacuous. Twin: one decided
/// instance on two ranks beside them defers, and never as a proof.
#[test]
fn a_check_with_nothing_decided_is_undetermined() {
    let run = |passed: u64, undecided: u64, distributed: u64| {
        let mut t = tally();
        t.cases = 2;
        t.distributed_cases = distributed;
        t.passed = passed;
        t.undecided = undecided;
        conclude(&t, 0, None)
    };
    let v = run(0, 5, 1);
    assert_eq!(v.key(), "undetermined", "{}", v.text());
    assert!(!v.is_sound());
    assert!(
        v.text().contains("no instance decided: on all 5"),
        "{}",
        v.text()
    );
    assert_eq!(v.json()["verdict"], "undetermined");
    let v = run(3, 0, 0);
    assert_eq!(v.key(), "vacuous", "{}", v.text());
    assert!(
        v.text().contains("no case on more than one rank"),
        "{}",
        v.text()
    );
    let v = run(1, 5, 1);
    assert_eq!(v.key(), "defers", "{}", v.text());
    assert!(v.is_sound() && !v.proof());
    // A failure is a refutation, whatever else was counted.
    let f = parse("x").unwrap();
    let cex = check_places(&f, &[Part(Max)], &[Part(Min)], &Scope::conform())
        .unwrap()
        .remove(0);
    assert_eq!(cex.key(), "refuted");
    assert!(cex.tally().failed > 0 && cex.decided() > cex.tally().failed);
}
