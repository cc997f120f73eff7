//! `spmd-check check` end to end (SPEC.md §11): the issue's rule file as
//! written, regression replay, JSON, emitted tests, bad input.

mod common;
use common::{rule_named, run, temp_rule_file};

const EXAMPLE: &str = include_str!("../examples/rules.toml");

#[test]
fn the_example_rule_file_is_checked_as_written() {
    let f = temp_rule_file("rules.toml", EXAMPLE);
    let (code, out, err) = run(&["check", &f, "--json", "--cases", "32"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let by = |n: &str| {
        v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .unwrap()
            .clone()
    };
    let pp = by("partial times partial");
    assert_eq!(pp["verdict"], "unsound");
    assert_eq!(pp["property"], "F2");
    assert_eq!(pp["counterexample"]["mesh"], serde_json::json!({"x": 2}));
    // Rationals are strings; per-rank values listed.
    assert_eq!(
        pp["counterexample"]["inputs"][0]["per_rank"],
        serde_json::json!(["1", "0"])
    );
    for n in ["scaled partial", "gather to reduced", "two axes"] {
        assert_eq!(by(n)["verdict"], "sound", "{n}");
        assert_eq!(by(n)["proof"], true, "{n}");
    }
    // The counterexample was saved by value and is replayed first.
    let regs = std::fs::read_to_string(format!("{f}.regressions.json")).unwrap();
    assert!(regs.contains("partial times partial"));
    let (_, out2, _) = run(&["check", &f, "--json", "--cases", "0"]);
    let v2: serde_json::Value = serde_json::from_str(&out2).unwrap();
    assert_eq!(v2["rules"][0]["replayed"], true);
}

#[test]
fn emitted_tests_replay_their_counterexample() {
    let f = temp_rule_file("emit.toml", EXAMPLE);
    let (_, out, _) = run(&["check", &f, "--emit", "rstest", "--cases", "0"]);
    assert!(out.contains("#[test]\nfn cx_"), "{out}");
    // Run the emitted call the way the pasted test would.
    let (toml, stored) = common::emitted_literals(&out);
    spmd_check::check::assert_counterexample(&toml, &stored);
}

/// A rule name can hold anything TOML allows: the emitted test keeps it in
/// one comment line and escaped literals, and still replays.
#[test]
fn emitted_tests_are_safe_for_any_rule_name() {
    let name = "evil \\\"# }\\nfn injected() {}";
    let text = format!(
        "[[rule]]\nname = \"{name}\"\nop = \"mul\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n"
    );
    let f = temp_rule_file("evil.toml", &text);
    let (code, out, err) = run(&["check", &f, "--emit", "rstest", "--cases", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(!out.lines().any(|l| l.starts_with("fn injected")), "{out}");
    let (toml, stored) = common::emitted_literals(&out);
    assert!(toml.contains("fn injected"), "{toml}");
    spmd_check::check::assert_counterexample(&toml, &stored);
}

#[test]
fn a_sound_rule_passes_the_library_assertion_and_an_unsound_one_fails() {
    let scope = spmd_check::generators::Scope::default();
    let text = "[[rule]]\nname = \"add\"\nop = \"add\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n\n[[rule]]\nname = \"mix\"\nop = \"mul\"\ninputs = [\"I\", \"V\"]\noutput = \"V\"\n";
    let specs = spmd_check::rules::parse_file("t.toml", text).unwrap();
    let rules = spmd_check::rules::build("t.toml", text, &specs, &scope).unwrap();
    spmd_check::check::assert_rule_sound(&rules[0]);
    let r = std::panic::catch_unwind(|| spmd_check::check::assert_rule_sound(&rules[1]));
    let msg = *r
        .expect_err("I mixed with V must fail")
        .downcast::<String>()
        .unwrap();
    assert!(msg.contains("B1 backward closure (SPEC.md §4.5)"), "{msg}");
}

#[test]
fn bad_rule_files_name_file_line_and_column() {
    let cases = [
        ("unknown_op.toml", "[[rule]]\nname = \"a\"\nop = \"mull\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n", ":3:7: ", "unknown op `mull`"),
        ("bad_state.toml", "[[rule]]\nname = \"b\"\nop = \"mul\"\ninputs = [\"P\", \"Q\"]\noutput = \"P\"\n", ":4:", "`Q` is not a state"),
        ("syntax.toml", "[[rule]]\nname = \"c\"\nop = \"mul\"\ninputs = [\"P\", \"P\"\noutput = \"P\"\n", ":5:1: ", ""),
        ("coll.toml", "[[rule]]\nname = \"d\"\nforward = \"all_gathr(dim = 0)\"\ninputs = [\"V\"]\noutput = \"R\"\n", ":3:", "unknown collective"),
        ("state_arg.toml", "[[rule]]\nname = \"e\"\nforward = \"all_gather(R)\"\nbackward = \"reduce_scatter()\"\ninputs = [\"P\"]\noutput = \"R\"\n", ":3:", "cannot start from P"),
        ("jvp_var.toml", "[[rule]]\nname = \"g\"\nop = \"mul\"\ninputs = [\"V\", \"V\"]\noutput = \"V\"\njvp = \"dx * z\"\n", ":6:8: ", "unknown variable `z` (the inputs are x, y, dx, dy)"),
        ("unlaid.toml", "[[rule]]\nname = \"h\"\nop = \"mul\"\ninputs = [\"S(0)\", \"V\"]\noutput = \"S(0)\"\n", ":4:", "every Varying axis needs one"),
        ("pspec.toml", "[[rule]]\nname = \"i\"\ndialect = \"jax\"\nop = \"mul\"\ninputs = [\"P('x', 'x')\", \"P('x', None)\"]\noutput = \"P('x', None)\"\n", ":5:", "names axis `x` twice"),
        ("prog_undef.toml", "[[rule]]\nname = \"j\"\nnames = [\"x\"]\ninputs = [\"V\"]\noutput = \"V\"\n\n[[rule.step]]\nname = \"y\"\nexpr = \"x * z\"\noutput = \"V\"\n", ":9:", "uses `z`, which is not defined before it"),
        ("prog_out.toml", "[[rule]]\nname = \"k\"\nnames = [\"x\"]\ninputs = [\"V\"]\noutput = \"I\"\n\n[[rule.step]]\nname = \"y\"\nexpr = \"2 * x\"\noutput = \"V\"\n", ":", "the last step's value is V, the rule's output is I"),
        ("trap.json", "{\"rule\": [{\"name\": \"f\", \"op\": \"mul\", \"inputs\": [\"P\", \"Unreduced\"], \"output\": \"P\"}]}", ":1:", "in dialect jax it means Partial"),
    ];
    for (name, text, loc, what) in cases {
        let f = temp_rule_file(name, text);
        let (code, _, err) = run(&["check", &f]);
        assert_eq!(code, 2, "{name}: {err}");
        assert_eq!(common::error_lines(&err), 1, "{name}: {err}");
        assert!(err.contains(&format!("{name}{loc}")), "{name}: {err}");
        assert!(err.contains(what), "{name}: {err}");
    }
}

#[test]
fn declared_jvps_are_checked_by_j1() {
    let f = temp_rule_file("jvps.toml", include_str!("../examples/jvps.toml"));
    let (code, out, err) = run(&["check", &f, "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let verdicts: Vec<(String, String, Option<String>)> = v["rules"]
        .as_array()
        .expect("array of rules")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_string(),
                r["verdict"].as_str().unwrap_or_default().to_string(),
                r["property"].as_str().map(String::from),
            )
        })
        .collect();
    assert_eq!(verdicts.len(), 3, "{out}");
    assert_eq!(verdicts[0].1, "sound", "{out}");
    assert_eq!(verdicts[1].1, "unsound", "{out}");
    assert_eq!(verdicts[1].2.as_deref(), Some("J1"), "{out}");
    assert_eq!(verdicts[2].1, "sound", "{out}");
}

/// Global SPMD rules on a 2-D mesh (examples/global.toml): FSDP on dp with
/// tensor parallelism on tp, and seed 001's open question about
/// (Shard(0), Reduced()).
#[test]
fn global_rules_on_a_2d_mesh() {
    let f = temp_rule_file("global.toml", include_str!("../examples/global.toml"));
    let (code, out, err) = run(&["check", &f, "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let got: Vec<(String, Option<String>)> = v["rules"]
        .as_array()
        .expect("array")
        .iter()
        .map(|r| {
            (
                r["verdict"].as_str().unwrap_or_default().to_string(),
                r["property"].as_str().map(String::from),
            )
        })
        .collect();
    let (b1, b3) = (Some("B1".to_string()), Some("B3".to_string()));
    let sound = ("sound".to_string(), None);
    assert_eq!(
        got,
        [
            ("unsound".to_string(), b1.clone()),
            sound.clone(),
            sound.clone(),
            ("unsound".to_string(), b1),
            // JAX partition specs.
            sound.clone(),
            ("unsound".to_string(), b3),
            sound.clone(),
            sound.clone(),
            // Two axes on one dim: gathering the minor one keeps the
            // global tensor, gathering the major one permutes it.
            sound,
            ("unsound".to_string(), Some("F3".to_string())),
        ],
        "{out}"
    );
}

/// SPEC.md §13.2: under global types a collective that moves data must keep
/// the global tensor. Each sound rule is paired with a wrong twin (F3).
#[test]
fn global_collectives_keep_the_global_tensor() {
    let text = r#"[[rule]]
name = "gather the dim that is sharded"
forward = "all_gather(R, dim=0)"
backward = "reduce_scatter(dim=0)"
inputs = ["S(0)"]
output = "R"

[[rule]]
name = "gather another dim"
forward = "all_gather(R, dim=1)"
backward = "reduce_scatter(dim=1)"
inputs = ["S(0)"]
output = "R"

[[rule]]
name = "reduce_scatter a partial onto dim 1"
forward = "reduce_scatter(dim=1)"
inputs = ["P"]
output = "S(1)"

[[rule]]
name = "reduce_scatter onto dim 1, claimed S(0)"
forward = "reduce_scatter(dim=1)"
inputs = ["P"]
output = "S(0)"

[[rule]]
name = "all_to_all S(0) -> S(1)"
forward = "all_to_all(split=1, concat=0)"
inputs = ["S(0)"]
output = "S(1)"
"#;
    let f = temp_rule_file("global_collectives.toml", text);
    let (code, out, err) = run(&["check", &f, "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let got: Vec<(&str, Option<&str>)> = v["rules"]
        .as_array()
        .expect("array")
        .iter()
        .map(|r| (r["verdict"].as_str().unwrap_or(""), r["property"].as_str()))
        .collect();
    let (ok, f3) = (("sound", None), ("unsound", Some("F3")));
    assert_eq!(got, [ok, f3, ok, f3, ok], "{out}");
}

/// Programs in rule files (SPEC.md §12.3): the tensor-parallel MLP is sound,
/// the same without f's psum fails B1, and the emitted test replays it.
#[test]
fn programs_in_rule_files() {
    let f = temp_rule_file("programs.toml", include_str!("../examples/programs.toml"));
    let (code, out, err) = run(&["check", &f, "--emit", "rstest", "--cases", "16"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        out.contains("rule \"tensor parallel MLP\": sound (proof)"),
        "{out}"
    );
    assert!(
        out.contains("rule \"tensor parallel MLP without f\": unsound B1"),
        "{out}"
    );
    let (toml, stored) = common::emitted_literals(&out);
    spmd_check::check::assert_counterexample(&toml, &stored);
}

/// SPEC.md §4.7: a hand-written backward is probed for linearity in g. At
/// unit cotangents `g * g` and `relu(g)` equal `g`, so without the probe
/// both were called proofs; the twin, the linear backward, stays a proof.
#[test]
fn a_backward_not_linear_in_g_fails_b3() {
    let text = r#"
[[rule]]
name = "squares g"
op = { expr = "3 * x" }
backward = ["3 * g * g"]
inputs = ["V"]
output = "V"

[[rule]]
name = "relu of g"
op = { expr = "3 * x" }
backward = ["3 * relu(g)"]
inputs = ["V"]
output = "V"

[[rule]]
name = "linear twin"
op = { expr = "3 * x" }
backward = ["3 * g"]
inputs = ["V"]
output = "V"
"#;
    let f = temp_rule_file("nonlinear_g.toml", text);
    let (code, out, err) = run(&["check", &f, "--cases", "0", "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let by = |n: &str| rule_named(&v, n);
    for n in ["squares g", "relu of g"] {
        assert_eq!(by(n)["verdict"], "unsound", "{n}");
        assert_eq!(by(n)["property"], "B3", "{n}");
    }
    assert_eq!(by("linear twin")["verdict"], "sound");
    assert_eq!(by("linear twin")["proof"], true);
}

/// `--cases` beyond 1,000,000 is bad input (exit 2, one line) rather than
/// hours of random cases; the cap itself is accepted.
#[test]
fn too_many_random_cases_are_refused() {
    let f = temp_rule_file("cases.toml", EXAMPLE);
    let (code, _, err) = run(&["check", &f, "--cases", "1000001"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cases"), "{err}");
    let (code, _, err) = run(&["check", &f, "--cases", "1000000", "--time-limit", "1"]);
    assert!(code <= 3, "{err}");
}

/// A random part that proptest gives up on (every generated case outside
/// the op's domain) says so in the tool's words, never proptest's "Too many
/// local rejects" (issue 26); the twin, a rule in its domain, has no note.
#[test]
fn a_random_part_given_up_says_why_in_the_tools_words() {
    let f = common::temp_rule_file(
        "never_in_domain.toml",
        "[[rule]]\nname = \"never\"\ninputs = [\"V\"]\nop = { expr = \"log(0 - x*x)\" }\noutput = \"V\"\n\n[[rule]]\nname = \"always\"\ninputs = [\"V\"]\nop = { expr = \"log(1 + x*x)\" }\noutput = \"V\"\n",
    );
    let (code, out, err) = common::run(&["check", &f, "--cases", "50"]);
    assert_eq!(code, 3, "{out}{err}");
    let never = out.lines().find(|l| l.contains("\"never\"")).unwrap();
    assert!(never.contains("outside the op's domain"), "{out}");
    assert!(!out.to_lowercase().contains("reject"), "{out}");
    let always = out.lines().find(|l| l.contains("\"always\"")).unwrap();
    assert!(always.contains(": sound"), "{out}");
    assert!(!always.contains("random part"), "{out}");
}
