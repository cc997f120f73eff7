//! Pending kinds in rule files (SPEC.md §21.7): `spmd-check check` on rules
//! with DTensor's Partial("max" | "min" | "avg") and JAX's unreduced kinds.
//! Every deferring rule has a twin the checks must refute, and each refutation
//! names its property and instance.

mod common;
use common::{rule_named, run, temp_rule_file};
use serde_json::{json, Value};

/// `check --json --cases 32` on `text`: exit code and the parsed reports.
fn check_json(name: &str, text: &str) -> (i32, Value) {
    let f = temp_rule_file(name, text);
    let (code, out, err) = run(&["check", &f, "--json", "--cases", "32"]);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    (code, v)
}

fn rule(name: &str, dialect: &str, op: &str, inputs: &[&str], output: &str) -> String {
    let ins: Vec<String> = inputs.iter().map(|i| format!("'{i}'")).collect();
    format!(
        "[[rule]]\nname = \"{name}\"\ndialect = \"{dialect}\"\nop = {{ expr = \"{op}\" }}\ninputs = [{}]\noutput = '{output}'\n\n",
        ins.join(", ")
    )
}

/// A deferring rule: sound in JSON, never a proof, with the pending verdict
/// `defers`, a bounded summary and something on more than one rank.
fn assert_defers(r: &Value) {
    assert_eq!(r["verdict"], "sound", "{r}");
    assert_eq!(r["proof"], false, "{r}");
    assert_eq!(r["pending"]["verdict"], "defers", "{r}");
    let s = r["summary"].as_str().unwrap();
    assert!(s.starts_with("defers (bounded: "), "{s}");
    assert!(!s.contains("proof"), "{s}");
    assert!(s.contains("backward not checked"), "{s}");
    assert!(r["distributed_cases"].as_u64().unwrap() > 0, "{r}");
}

/// A refuted rule: unsound with `property`, on `ranks` ranks.
fn assert_refuted(r: &Value, property: &str, ranks: u64) -> Value {
    assert_eq!(r["verdict"], "unsound", "{r}");
    assert_eq!(r["pending"]["verdict"], "refuted", "{r}");
    assert_eq!(r["property"], property, "{r}");
    assert_eq!(r["counterexample"]["ranks"], ranks, "{r}");
    r["counterexample"].clone()
}

#[test]
fn each_kind_defers_and_its_twin_is_refuted() {
    let mut text = String::new();
    // max: amax over the sharded dim (DTensor _math_ops.py) ...
    text += &rule(
        "amax",
        "dtensor",
        "max(x, 0)",
        &["Shard(0)"],
        "Partial(\"max\")",
    );
    // ... whose twin claims the wrong kind.
    text += &rule(
        "amax as min",
        "dtensor",
        "max(x, 0)",
        &["Shard(0)"],
        "Partial(\"min\")",
    );
    // min: amin, written -max(-x).
    text += &rule(
        "amin",
        "dtensor",
        "-max(-x, 0)",
        &["Shard(0)"],
        "Partial(min)",
    );
    text += &rule(
        "amin as max",
        "dtensor",
        "-max(-x, 0)",
        &["Shard(0)"],
        "Partial(max)",
    );
    // avg: x + c keeps a pending mean ...
    text += &rule(
        "avg plus one",
        "dtensor",
        "x + 1",
        &["Partial(avg)"],
        "Partial(avg)",
    );
    // ... but not as a sum (the constant would count n times).
    text += &rule(
        "avg plus one as sum",
        "dtensor",
        "x + 1",
        &["Partial(avg)"],
        "Partial(sum)",
    );
    // sum beside another kind: a pending max read as a pending sum is wrong ...
    text += &rule("max as sum", "dtensor", "x", &["Partial(max)"], "Partial()");
    // ... and 2 x keeps a pending max.
    text += &rule(
        "double max",
        "dtensor",
        "2 * x",
        &["Partial(max)"],
        "Partial(max)",
    );
    // F1: a pending max reduced locally is not the same on every rank.
    text += &rule(
        "amax of P(max) replicated",
        "dtensor",
        "max(x, 0)",
        &["Partial(max)"],
        "Replicate()",
    );
    let (code, v) = check_json("kinds.toml", &text);
    assert_eq!(code, 1, "{v}");
    for n in ["amax", "amin", "avg plus one", "double max"] {
        assert_defers(&rule_named(&v, n));
    }
    // The twins, each with its property and its minimal instance.
    let c = assert_refuted(&rule_named(&v, "amax as min"), "F3", 2);
    assert_eq!(c["inputs"][0]["per_rank"], json!(["[0]", "[1]"]), "{c}");
    assert_eq!(
        (c["expected"].clone(), c["denoted"].clone()),
        (json!("1"), json!("0"))
    );
    let c = assert_refuted(&rule_named(&v, "amin as max"), "F3", 2);
    assert_eq!(c["inputs"][0]["per_rank"], json!(["[0]", "[1]"]), "{c}");
    assert_eq!(
        (c["expected"].clone(), c["denoted"].clone()),
        (json!("0"), json!("1"))
    );
    let c = assert_refuted(&rule_named(&v, "avg plus one as sum"), "F3", 2);
    assert_eq!(c["inputs"][0]["per_rank"], json!(["0", "0"]), "{c}");
    assert_eq!(
        (c["expected"].clone(), c["denoted"].clone()),
        (json!("1"), json!("2"))
    );
    let c = assert_refuted(&rule_named(&v, "max as sum"), "F3", 2);
    assert_eq!(c["inputs"][0]["type"], "Partial(max)");
    // (0, 1) passes: its max and its sum are both 1.
    assert_eq!(c["inputs"][0]["per_rank"], json!(["0", "-1"]), "{c}");
    let c = assert_refuted(&rule_named(&v, "amax of P(max) replicated"), "F1", 2);
    assert_eq!(c["denoted"], Value::Null, "{c}");
    assert_eq!(c["per_rank_outputs"], json!(["0", "1"]), "{c}");
}

fn coll(name: &str, dialect: &str, forward: &str, input: &str, output: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\ndialect = \"{dialect}\"\nforward = \"{forward}\"\ninputs = ['{input}']\noutput = '{output}'\n\n"
    )
}

#[test]
fn collectives_of_a_kind_and_their_twins() {
    let mut text = String::new();
    text += &coll(
        "redistribute max",
        "dtensor",
        "redistribute",
        "Partial(max)",
        "Replicate()",
    );
    // Twin: an all-reduce of the wrong kind.
    text += &coll(
        "psum of a pending max",
        "dtensor",
        "all_reduce(sum)",
        "Partial(max)",
        "Replicate()",
    );
    text += &coll(
        "reduce_scatter avg",
        "dtensor",
        "reduce_scatter(avg, dim=0)",
        "Partial(avg)",
        "Shard(0)",
    );
    text += &coll(
        "reduce_scatter sum of avg",
        "dtensor",
        "reduce_scatter(sum, dim=0)",
        "Partial(avg)",
        "Shard(0)",
    );
    text += &coll(
        "unreduced_pmin",
        "jax",
        "unreduced_pmin",
        "Unreduced(min)",
        "Invariant",
    );
    text += &coll(
        "unreduced_pmax of a min",
        "jax",
        "unreduced_pmax",
        "Unreduced(min)",
        "Invariant",
    );
    text += &coll(
        "partition max",
        "dtensor",
        "partition(max)",
        "Replicate()",
        "Partial(max)",
    );
    // Twin: v/n on every rank is a pending sum, not a pending mean.
    text += &coll(
        "partition sum as avg",
        "dtensor",
        "partition(sum)",
        "Replicate()",
        "Partial(avg)",
    );
    let (code, v) = check_json("colls.toml", &text);
    assert_eq!(code, 1, "{v}");
    for n in [
        "redistribute max",
        "reduce_scatter avg",
        "unreduced_pmin",
        "partition max",
    ] {
        assert_defers(&rule_named(&v, n));
    }
    let c = assert_refuted(&rule_named(&v, "psum of a pending max"), "F3", 2);
    assert_eq!(c["inputs"][0]["per_rank"], json!(["0", "-1"]), "{c}");
    assert_eq!(
        (c["expected"].clone(), c["denoted"].clone()),
        (json!("0"), json!("-1"))
    );
    let c = assert_refuted(&rule_named(&v, "reduce_scatter sum of avg"), "F3", 2);
    assert_eq!(c["per_rank_outputs"], json!(["[0]", "[1]"]), "{c}");
    let c = assert_refuted(&rule_named(&v, "unreduced_pmax of a min"), "F3", 2);
    assert_eq!(c["inputs"][0]["type"], "Unreduced(min)");
    let c = assert_refuted(&rule_named(&v, "partition sum as avg"), "F3", 2);
    assert_eq!(c["per_rank_outputs"], json!(["1/2", "1/2"]), "{c}");
    assert_eq!(c["expected"], "1");
}

#[test]
fn a_pending_sum_alone_is_the_core_partial() {
    // Partial("sum") with no other kind is the core's P: a proof, with its
    // backward; and the core still refutes x + 1 on it.
    let mut text = rule(
        "sum",
        "dtensor",
        "sum(x, 0)",
        &["Shard(0)"],
        "Partial(\"sum\")",
    );
    // In DTensor's language, x + 1 on a pending sum is redistributed to
    // Replicate first (SPEC.md §15.5): claiming Partial is refused with
    // the typing DTensor infers, and nothing is checked.
    let claim = rule(
        "sum plus one",
        "dtensor",
        "x + 1",
        &["Partial(\"sum\")"],
        "Partial(sum)",
    );
    let f = temp_rule_file("sum-plus-one.toml", &claim);
    let (code, _, err) = run(&["check", &f]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("dtensor infers Replicate()"), "{err}");
    // Twin: the same claim in canonical letters is the core's P, which the
    // oracle refutes at F3.
    text += &rule("sum plus one", "canonical", "x + 1", &["P"], "P");
    let (code, v) = check_json("sum.toml", &text);
    assert_eq!(code, 1);
    let s = rule_named(&v, "sum");
    assert_eq!(
        (s["verdict"].clone(), s["proof"].clone()),
        (json!("sound"), json!(true))
    );
    assert!(s.get("pending").is_none(), "{s}");
    let t = rule_named(&v, "sum plus one");
    assert_eq!(
        (t["verdict"].clone(), t["property"].clone()),
        (json!("unsound"), json!("F3"))
    );
}

#[test]
fn jax_unreduced_kinds_in_partition_specs() {
    let mut text = rule(
        "reduce_max, out_sharding unreduced max",
        "jax",
        "max(x, 0)",
        &["P(\"x\")"],
        "P(unreduced={\"x\"}, unreduced_kind=UnreducedKind.max)",
    );
    // jax 0.11.2's reduce_max of an Unreduced (sum) operand (SPEC.md §21.6).
    text += &rule(
        "reduce_max of unreduced sum",
        "jax",
        "max(x, 0)",
        &["P(None, unreduced={\"x\"})"],
        "P(unreduced={\"x\"}, unreduced_kind=max)",
    );
    text += &rule(
        "neg max",
        "jax",
        "-x",
        &["Unreduced(max)"],
        "Unreduced(min)",
    );
    text += &rule(
        "neg max kept",
        "jax",
        "-x",
        &["Unreduced(max)"],
        "Unreduced(max)",
    );
    let (code, v) = check_json("jax.toml", &text);
    assert_eq!(code, 1);
    assert_defers(&rule_named(&v, "reduce_max, out_sharding unreduced max"));
    assert_defers(&rule_named(&v, "neg max"));
    let c = assert_refuted(&rule_named(&v, "reduce_max of unreduced sum"), "F3", 2);
    // Partial sums 0 and -1 denote -1, whose max is -1; the max of the
    // per-rank maxima is 0 (the instance peers/repro_unreduced_max.py runs).
    assert_eq!(c["inputs"][0]["type"], "Unreduced(sum)");
    assert_eq!(c["inputs"][0]["per_rank"], json!(["[0]", "[-1]"]), "{c}");
    assert_eq!(
        (c["expected"].clone(), c["denoted"].clone()),
        (json!("-1"), json!("0"))
    );
    assert_refuted(&rule_named(&v, "neg max kept"), "F3", 2);
}

#[test]
fn a_mesh_of_several_axes_checks_the_one_that_is_not_replicate() {
    let ok = "[[rule]]\nname = \"amin on tp\"\ndialect = \"dtensor\"\nmesh = { dp = 2, tp = 2 }\nop = { expr = \"-max(-x, 0)\" }\ninputs = [{ dp = \"Replicate()\", tp = \"Shard(0)\" }]\noutput = { dp = \"Replicate()\", tp = 'Partial(\"min\")' }\n";
    let (code, v) = check_json("two.toml", ok);
    assert_eq!(code, 0, "{v}");
    let r = rule_named(&v, "amin on tp");
    assert_defers(&r);
    assert_eq!(r["pending"]["axis"], "tp");
    // The twin on the same mesh: the wrong kind.
    let (code, v) = check_json(
        "two_twin.toml",
        &ok.replace("Partial(\"min\")", "Partial(\"max\")"),
    );
    assert_eq!(code, 1, "{v}");
    let c = assert_refuted(&rule_named(&v, "amin on tp"), "F3", 2);
    assert_eq!(c["axis"], "tp");
}

#[test]
fn a_one_rank_axis_is_vacuous_and_exits_3() {
    let text = "[[rule]]\nname = \"relu\"\ndialect = \"dtensor\"\nmesh = { x = 1 }\nop = \"relu\"\ninputs = [\"Partial(max)\"]\noutput = \"Partial(max)\"\n";
    let f = temp_rule_file("vacuous.toml", text);
    let (code, out, _) = run(&["check", &f, "--cases", "16"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("vacuous (") && out.contains("one rank"),
        "{out}"
    );
    let (code, _, _) = run(&["check", &f, "--cases", "16", "--allow-vacuous"]);
    assert_eq!(code, 0);
    // Its twin on two ranks decides it.
    let f2 = temp_rule_file("vacuous_twin.toml", &text.replace("x = 1", "x = 2"));
    let (code, out, _) = run(&["check", &f2, "--cases", "16"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("defers (bounded: "), "{out}");
}

#[test]
fn counterexamples_are_saved_and_replayed() {
    let text = rule(
        "sum of a pending max",
        "dtensor",
        "sum(x, 0)",
        &["Partial(max)"],
        "Partial(max)",
    );
    let f = temp_rule_file("replay.toml", &text);
    let (code, out, _) = run(&["check", &f, "--cases", "0"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unsound F3"), "{out}");
    assert!(
        out.contains("per rank [0, 0] | [1, -1]   denotes [1, 0]"),
        "{out}"
    );
    let regs = std::fs::read_to_string(format!("{f}.regressions.json")).unwrap();
    assert!(
        regs.contains("sum of a pending max") && regs.contains("F3"),
        "{regs}"
    );
    let (code, out, _) = run(&["check", &f, "--json", "--cases", "0"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rules"][0]["replayed"], true, "{v}");
    assert_eq!(v["rules"][0]["property"], "F3");
    // The twin (a sum of a pending sum) is never refuted by that entry.
    std::fs::write(&f, text.replace("Partial(max)", "Partial(avg)")).unwrap();
    let (code, out, _) = run(&["check", &f, "--json", "--cases", "0"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn bad_kind_rules_are_one_line_errors() {
    let cases = [
        ("prod", rule("prod", "dtensor", "x", &["Partial(\"prod\")"], "Partial(\"prod\")"), "unknown pending reduction `prod`"),
        (
            "multi",
            "[[rule]]\nname = \"multi\"\ndialect = \"dtensor\"\nop = \"relu\"\ninputs = [{dp = \"Shard(0)\", tp = \"Partial(max)\"}]\noutput = {dp = \"Shard(0)\", tp = \"Partial(max)\"}\n".to_string(),
            "axes `dp` and `tp`",
        ),
        ("jax word", rule("jax word", "dtensor", "x", &["Unreduced(max)"], "Partial(max)"), "Partial(k)"),
        ("avg in jax", rule("avg in jax", "jax", "x", &["P(unreduced={\"x\"}, unreduced_kind=avg)"], "Unreduced(max)"), "unreduced_kind `avg`"),
        ("kind alone", rule("kind alone", "jax", "x", &["P(None, unreduced_kind=max)"], "Unreduced(max)"), "non-empty unreduced"),
        (
            "backward",
            rule("backward", "dtensor", "x", &["Partial(max)"], "Partial(max)") + "backward = [\"g\"]\n",
            "`backward` is not supported",
        ),
        (
            "redistribute to max",
            coll("redistribute to max", "dtensor", "redistribute", "Replicate()", "Partial(max)"),
            "refuses Replicate() to Partial(k)",
        ),
        (
            "all_reduce to shard",
            coll("all_reduce to shard", "dtensor", "all_reduce(max)", "Partial(max)", "Shard(0)"),
            "goes from P(max) to I",
        ),
        (
            "psum",
            coll("psum", "jax", "psum", "Unreduced(max)", "Invariant"),
            "not a pending-kind collective",
        ),
        (
            "pmean",
            coll("pmean", "jax", "unreduced_pmean", "Unreduced(max)", "Invariant"),
            "not a pending-kind collective",
        ),
        ("varying", rule("varying", "spmd_types", "x + y", &["Partial(max)", "V"], "Partial(max)"), "Varying without a layout"),
    ];
    for (name, text, needle) in cases {
        let f = temp_rule_file("bad.toml", &text);
        let (code, out, err) = run(&["check", &f]);
        assert_eq!(code, 2, "{name}: {out} {err}");
        assert_eq!(common::error_lines(&err), 1, "{name}: {err}");
        assert!(
            err.contains(needle) && err.contains(&format!("rule \"{name}\"")),
            "{name}: {err}"
        );
        assert!(out.is_empty(), "{name}: {out}");
    }
}

#[test]
fn the_example_file_as_written() {
    let f = temp_rule_file(
        "partial_kinds.toml",
        include_str!("../examples/partial_kinds.toml"),
    );
    let (code, v) = check_json_file(&f);
    assert_eq!(code, 1);
    let wrong = [
        "sum over a dim of a pending max (wrong)",
        "threshold(x, 0, 5) keeps a pending max (DTensor's rule)",
    ];
    for r in v["rules"].as_array().unwrap() {
        let n = r["name"].as_str().unwrap();
        if wrong.contains(&n) {
            assert_refuted(r, "F3", 2);
        } else if r.get("pending").is_some() {
            assert_defers(r);
        } else {
            assert_eq!(r["verdict"], "sound", "{n}");
        }
    }
    assert_eq!(v["rules"].as_array().unwrap().len(), 11);
}

fn check_json_file(f: &str) -> (i32, Value) {
    let (code, out, err) = run(&["check", f, "--json", "--cases", "32"]);
    (
        code,
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}")),
    )
}

#[test]
fn the_library_assertions_read_kinds() {
    use spmd_check::rules::Rule;
    let good = rule(
        "relu",
        "dtensor",
        "relu(x)",
        &["Partial(max)"],
        "Partial(max)",
    );
    spmd_check::check::assert_rule_sound(&Rule::from_toml_str(&good).unwrap());
    let bad = rule(
        "relu as min",
        "dtensor",
        "relu(x)",
        &["Partial(max)"],
        "Partial(min)",
    );
    let r = Rule::from_toml_str(&bad).unwrap();
    let panic = std::panic::catch_unwind(|| spmd_check::check::assert_rule_sound(&r))
        .expect_err("a refuted kind rule must fail the assertion");
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("unsound F3") && msg.contains("violates F3"),
        "{msg}"
    );
}

#[test]
fn partitions_of_a_kind_file_merge_to_the_single_run() {
    let f = temp_rule_file("merge.toml", include_str!("../examples/partial_kinds.toml"));
    let dir = std::path::Path::new(&f).parent().unwrap().to_path_buf();
    let mut parts = Vec::new();
    for k in 1..=2 {
        let (code, out, err) = run(&[
            "check",
            &f,
            "--json",
            "--cases",
            "8",
            "--partition",
            &format!("{k}/2"),
        ]);
        assert!(code == 0 || code == 1, "{err}");
        let p = dir.join(format!("part{k}.json"));
        std::fs::write(&p, out).unwrap();
        parts.push(p.display().to_string());
    }
    let (code, out, err) = run(&["merge", &parts[0], &parts[1]]);
    assert_eq!(code, 1, "{out} {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let all = v["rules"].as_array().unwrap();
    assert_eq!(all.len(), 11, "{v}");
    assert_eq!(all.iter().filter(|r| r["verdict"] == "unsound").count(), 2);
    // The twin: without the two wrong rules the merge exits 0.
    let text = include_str!("../examples/partial_kinds.toml");
    let cut = text.find("# Deliberately wrong").unwrap();
    let g = temp_rule_file("merge_ok.toml", &text[..cut]);
    let mut parts = Vec::new();
    for k in 1..=2 {
        let (_, out, _) = run(&[
            "check",
            &g,
            "--json",
            "--cases",
            "8",
            "--partition",
            &format!("{k}/2"),
        ]);
        let p = dir.join(format!("ok{k}.json"));
        std::fs::write(&p, out).unwrap();
        parts.push(p.display().to_string());
    }
    let (code, out, _) = run(&["merge", &parts[0], &parts[1]]);
    assert_eq!(code, 0, "{out}");
}

/// Malformed kind spellings are bad input or ordinary states, never a panic.
#[test]
fn odd_kind_spellings_never_panic() {
    let odd = [
        "Partial(",
        "Partial(()",
        "Partial(\"\")",
        "Partial(max",
        "Partial(max))",
        "Unreduced()",
        "Unreduced(",
        "P(unreduced_kind=)",
        "P(unreduced={'x'}, unreduced_kind=)",
        "P(unreduced={'x'}, unreduced_kind=UnreducedKind.)",
        "P(unreduced={}, unreduced_kind=max)",
        "P('x', unreduced={'x'}, unreduced_kind=max)",
        "{x: Partial(max}",
        "{x: Partial(max), x: Partial(min)}",
        "{: Partial(max)}",
        "Shard(0)",
        "Shard(9)",
    ];
    for dialect in ["dtensor", "jax", "spmd_types"] {
        for o in odd {
            let text = format!(
                "[[rule]]\nname = \"odd\"\ndialect = \"{dialect}\"\nop = \"relu\"\ninputs = [\"Partial(max)\"]\noutput = {}\n",
                toml::Value::String(o.to_string())
            );
            let f = temp_rule_file("odd.toml", &text);
            let (code, out, err) = run(&["check", &f, "--cases", "4"]);
            assert!(
                [0, 1, 2, 3].contains(&code),
                "{dialect} {o}: {code} {out} {err}"
            );
            if code == 2 {
                assert_eq!(common::error_lines(&err), 1, "{dialect} {o}: {err}");
            }
        }
    }
}

#[test]
fn transcendental_kind_rules_are_decided_exactly_and_never_replayed() {
    // exp is non-decreasing, so it keeps a pending max (DTensor's rule) ...
    let mut text = rule(
        "exp max",
        "dtensor",
        "exp(x)",
        &["Partial(max)"],
        "Partial(max)",
    );
    // ... but not a pending max read as a pending avg: the twin.
    text += &rule(
        "exp avg",
        "dtensor",
        "exp(x)",
        &["Partial(max)"],
        "Partial(avg)",
    );
    let (code, v) = check_json("kind_exp", &text);
    assert_eq!(code, 1, "{v}");
    let r = rule_named(&v, "exp max");
    assert_defers(&r);
    assert_eq!(r["random_cases"], 0, "{r}");
    assert!(
        r["random_note"]
            .as_str()
            .unwrap()
            .contains("exhaustive grid only"),
        "{r}"
    );
    let t = rule_named(&v, "exp avg");
    let cx = assert_refuted(&t, "F3", 2);
    // Ranks hold 0 and 1: the max is 1, so exp gives e; the per-rank outputs
    // 1 and e read as a pending avg give (1 + e)/2, decided exactly.
    assert_eq!(cx["inputs"][0]["per_rank"], json!(["0", "1"]), "{cx}");
    assert_eq!(cx["per_rank_outputs"], json!(["1", "e^(1)"]), "{cx}");
    assert_eq!(cx["expected"], "e^(1)", "{cx}");
    assert_eq!(cx["decided"], "exactly", "{cx}");
    assert!(
        t["summary"]
            .as_str()
            .unwrap()
            .ends_with("(decided exactly)"),
        "{t}"
    );
    // Nothing is saved for replay: replay evaluates rationals only, and the
    // exhaustive part finds it again.
    let (code2, v2) = check_json("kind_exp", &text);
    assert_eq!(code2, 1);
    assert_eq!(rule_named(&v2, "exp avg")["replayed"], false, "{v2}");
}

/// One verdict (SPEC.md §7.1, §21.7): the library's `RuleReport::verdict`
/// of a refuted pending-kind rule is the oracle's `Unsound`, with the
/// counterexample as a violation of F3 on the rule's axis (the inputs and
/// per-rank outputs typed by their placements); the deferring twin is
/// sound and never a proof.
#[test]
fn a_refuted_kind_rule_is_unsound_in_the_one_verdict() {
    use spmd_check::check::{check_rule, CheckConfig};
    let text = rule(
        "wrong",
        "dtensor",
        "max(x, 0)",
        &["Shard(0)"],
        "Partial(\"min\")",
    ) + &rule(
        "right",
        "dtensor",
        "max(x, 0)",
        &["Shard(0)"],
        "Partial(\"max\")",
    );
    let rules = spmd_check::rules::load_str("<kinds>", &text).unwrap();
    let cfg = CheckConfig {
        scope: spmd_generators::Scope::default(),
        cases: 8,
        seed: 0,
    };
    let wrong = check_rule(&rules[0], &cfg, &[], &|_| {});
    let v = wrong
        .verdict
        .violation()
        .expect("the wrong kind is unsound");
    assert_eq!(v.property, spmd_semantics::Property::F3, "{}", v.one_line());
    assert_eq!(v.mesh.ndim(), 1);
    let tys: Vec<String> = v.shown.iter().map(|s| s.ty.display(&v.mesh)).collect();
    assert_eq!(tys, ["S(0)", "P(min)"], "{}", v.one_line());
    assert!(!v.shown[1].input);
    let right = check_rule(&rules[1], &cfg, &[], &|_| {});
    assert!(right.verdict.is_sound() && !right.verdict.proof());
    assert!(right.verdict.violation().is_none());
}
