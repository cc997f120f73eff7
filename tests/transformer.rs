//! SPEC.md §19: transformer-block ops checked exactly. Every verdict below is
//! computed by the oracle on the exact transcendental path; each sound rule
//! has a twin the oracle must reject, with the property that fails named.

mod common;
use common::{run, temp_rule_file};
use serde_json::Value;

fn rule(name: &str, expr: &str, inputs: &[&str], output: &str, extra: &str) -> String {
    let ins: Vec<String> = inputs.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "[[rule]]\nname = \"{name}\"\nop = {{ expr = {expr:?} }}\ninputs = [{}]\noutput = \"{output}\"\n{extra}\n",
        ins.join(", ")
    )
}

/// Check a rule file; the verdict and failing property of each rule by name.
fn check(file: &str, text: &str, flags: &[&str]) -> Vec<(String, String, Option<String>, bool)> {
    let f = temp_rule_file(file, text);
    let mut args = vec!["check", &f, "--json", "--cases", "0"];
    args.extend_from_slice(flags);
    let (code, out, err) = run(&args);
    assert!(code == 0 || code == 1, "exit {code}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["verdict"].as_str().unwrap().to_string(),
                r["property"].as_str().map(String::from),
                r["proof"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

fn verdict_of<'a>(
    rows: &'a [(String, String, Option<String>, bool)],
    name: &str,
) -> &'a (String, String, Option<String>, bool) {
    rows.iter().find(|r| r.0 == name).unwrap()
}

/// A sound rule, a proof exactly where every case is an identity defined
/// at every point (SPEC.md §19.8): exp, tanh, sigmoid, gelu, silu,
/// softmax, logsumexp and cross-entropy; never where a function is outside
/// the symbolic domain (sin, log of a polynomial) or a root may be
/// undefined (layernorm, rmsnorm).
fn assert_sound(rows: &[(String, String, Option<String>, bool)], name: &str, proof: bool) {
    let r = verdict_of(rows, name);
    assert_eq!(r.1, "sound", "{name}: {r:?}");
    assert_eq!(r.3, proof, "{name}: {r:?}");
}

fn assert_unsound(rows: &[(String, String, Option<String>, bool)], name: &str, prop: &str) {
    let r = verdict_of(rows, name);
    assert_eq!(r.1, "unsound", "{name}: {r:?}");
    assert_eq!(r.2.as_deref(), Some(prop), "{name}: {r:?}");
}

/// Two ranks, and enough points for a softmax dim of 2 on two ranks.
const DIM_OPS: &[&str] = &["--scope", "small", "--max-points", "1296"];

#[test]
fn softmax_over_the_sharded_dim_is_unsound_over_a_local_dim_sound() {
    let text = rule("local", "softmax(x, 1)", &["S(0)"], "S(0)", "")
        + &rule("sharded", "softmax(x, 0)", &["S(0)"], "S(0)", "");
    let rows = check("softmax.toml", &text, DIM_OPS);
    assert_sound(&rows, "local", true);
    assert_unsound(&rows, "sharded", "F3");
}

#[test]
fn layernorm_on_partial_is_unsound_on_varying_rows_sound() {
    let text = rule("partial", "layernorm(x, 0)", &["P"], "P", "")
        + &rule("varying", "layernorm(x, 0)", &["V"], "V", "")
        + &rule("rms partial", "rmsnorm(x, 0)", &["P"], "P", "")
        + &rule("rms replicated", "rmsnorm(x, 0)", &["R"], "R", "");
    let rows = check("layernorm.toml", &text, DIM_OPS);
    assert_unsound(&rows, "partial", "F2");
    assert_sound(&rows, "varying", false);
    assert_unsound(&rows, "rms partial", "F2");
    assert_sound(&rows, "rms replicated", false);
}

#[test]
fn exp_on_replicate_is_sound_on_partial_unsound() {
    let text = rule("exp R", "exp(x)", &["R"], "R", "")
        + &rule("exp P", "exp(x)", &["P"], "P", "")
        + &rule("tanh V", "tanh(x)", &["V"], "V", "")
        + &rule("sigmoid R to P", "sigmoid(x)", &["R"], "P", "")
        + &rule("silu V", "silu(x)", &["V"], "V", "");
    let rows = check("exp.toml", &text, &["--scope", "small"]);
    assert_sound(&rows, "exp R", true);
    assert_unsound(&rows, "exp P", "F2");
    assert_sound(&rows, "tanh V", true);
    assert_unsound(&rows, "sigmoid R to P", "F3");
    assert_sound(&rows, "silu V", true);
}

#[test]
fn enclosure_ops_find_counterexamples_and_pass_where_values_coincide() {
    // log, sin and gelu are not in the exact field: equal values are
    // recognised as the same atoms, unequal ones by disjoint enclosures.
    let text = rule("log R", "log(x * x + 1)", &["R"], "R", "")
        + &rule("log P", "log(x * x + 1)", &["P"], "P", "")
        + &rule("gelu V", "gelu(x)", &["V"], "V", "")
        + &rule("gelu R to P", "gelu(x)", &["R"], "P", "")
        + &rule("sin V", "sin(x)", &["V"], "V", "")
        + &rule("cos I to P", "cos(x)", &["I"], "P", "");
    let rows = check("enclosures.toml", &text, &["--scope", "small"]);
    assert_sound(&rows, "log R", false);
    assert_unsound(&rows, "log P", "F2");
    assert_sound(&rows, "gelu V", true);
    assert_unsound(&rows, "gelu R to P", "F3");
    assert_sound(&rows, "sin V", false);
    assert_unsound(&rows, "cos I to P", "F3");
}

#[test]
fn cross_entropy_on_vocab_sharded_logits_needs_the_all_reduces() {
    let text = rule(
        "vocab",
        "cross_entropy(x, t, 1)",
        &["S(1)", "S(1)"],
        "P",
        "",
    ) + &rule(
        "batch",
        "cross_entropy(x, t, 1)",
        &["S(0)", "S(0)"],
        "S(0)",
        "",
    ) + &rule("replicated", "cross_entropy(x, t, 1)", &["R", "R"], "R", "");
    let rows = check("ce.toml", &text, &["--scope", "small"]);
    assert_unsound(&rows, "vocab", "F3");
    assert_sound(&rows, "batch", true);
    assert_sound(&rows, "replicated", true);
}

#[test]
fn a_hand_written_vjp_is_checked_against_forward_mode() {
    let good = "backward = [\"softmax(x, 0) * (g - sum(g * softmax(x, 0), 0))\"]";
    let wrong = "backward = [\"softmax(x, 0) * g\"]";
    let lse = "backward = [\"g * softmax(x, 0)\"]";
    let lse_wrong = "backward = [\"g * exp(x)\"]";
    let text = rule("good", "softmax(x, 0)", &["R"], "R", good)
        + &rule("wrong", "softmax(x, 0)", &["R"], "R", wrong)
        + &rule("lse", "logsumexp(x, 0)", &["V"], "V", lse)
        + &rule("lse wrong", "logsumexp(x, 0)", &["V"], "V", lse_wrong);
    let mut flags = DIM_OPS.to_vec();
    flags.extend(["--max-rank", "1"]);
    let rows = check("vjp.toml", &text, &flags);
    assert_sound(&rows, "good", true);
    assert_unsound(&rows, "wrong", "B3");
    assert_sound(&rows, "lse", true);
    assert_unsound(&rows, "lse wrong", "B3");
}

#[test]
fn rational_companions_cumsum_where_rounding() {
    // These stay on the rational path, so their sound verdicts are proofs
    // where the op is polynomial.
    let text = rule("cumsum local", "cumsum(x, 1)", &["S(0)"], "S(0)", "")
        + &rule("cumsum sharded", "cumsum(x, 0)", &["S(0)"], "S(0)", "")
        + &rule("where V", "where(m, x, 2 * x)", &["V", "V"], "V", "")
        + &rule("where mask P", "where(m, x, y)", &["P", "R", "R"], "R", "")
        + &rule("where const", "where([1, 0], x, y)", &["P", "P"], "P", "")
        + &rule("floordiv R", "floordiv(x, y)", &["R", "R"], "R", "")
        + &rule("int P", "int(x)", &["P"], "P", "");
    let rows = check("rational.toml", &text, &["--scope", "small"]);
    let r = verdict_of(&rows, "cumsum local");
    assert_eq!((r.1.as_str(), r.3), ("sound", true), "{r:?}");
    assert_unsound(&rows, "cumsum sharded", "F3");
    assert_eq!(verdict_of(&rows, "where V").1, "sound");
    assert_unsound(&rows, "where mask P", "F1");
    assert_eq!(verdict_of(&rows, "where const").1, "sound");
    assert_eq!(verdict_of(&rows, "floordiv R").1, "sound");
    assert_unsound(&rows, "int P", "F2");
}

#[test]
fn attention_scores_on_rank_three_tensors() {
    let e = "einsum(\"hqd,hkd->hqk\", q, k)";
    let text = rule("heads", e, &["S(0)", "S(0)"], "S(0)", "")
        + &rule("head dim sharded", e, &["S(2)", "S(2)"], "S(0)", "")
        + &rule("head dim partial", e, &["S(2)", "S(2)"], "P", "");
    let rows = check(
        "attention.toml",
        &text,
        &["--scope", "small", "--max-rank", "3"],
    );
    assert_eq!(verdict_of(&rows, "heads").1, "sound");
    assert_unsound(&rows, "head dim sharded", "F3");
    assert_eq!(verdict_of(&rows, "head dim partial").1, "sound");
}

#[test]
fn derive_tables_for_softmax_layernorm_and_exp() {
    let rows = |args: &[&str]| -> Vec<Value> {
        let (code, out, err) = run(args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["typings"]
            .as_array()
            .unwrap()
            .clone()
    };
    let find = |rs: &[Value], i: &str, o: &str| -> (String, Option<String>) {
        let r = rs
            .iter()
            .find(|r| r["inputs"][0] == i && r["output"] == o)
            .unwrap();
        (
            r["verdict"].as_str().unwrap().into(),
            r["property"].as_str().map(String::from),
        )
    };
    let exp = rows(&["derive", "--expr", "exp(x)", "--json", "--scope", "small"]);
    assert_eq!(exp.len(), 16);
    assert_eq!(find(&exp, "R", "R").0, "sound");
    assert_eq!(find(&exp, "P", "P"), ("unsound".into(), Some("F2".into())));
    let sm = rows(&[
        "derive",
        "softmax",
        "--json",
        "--scope",
        "small",
        "--max-points",
        "1296",
    ]);
    assert_eq!(find(&sm, "V", "V").0, "sound");
    assert_eq!(find(&sm, "V", "I"), ("unsound".into(), Some("F1".into())));
    assert_eq!(find(&sm, "R", "P"), ("unsound".into(), Some("F3".into())));
    let ln = rows(&[
        "derive",
        "layernorm",
        "--json",
        "--scope",
        "small",
        "--max-points",
        "1296",
    ]);
    assert_eq!(find(&ln, "R", "R").0, "sound");
    assert_eq!(find(&ln, "P", "P"), ("unsound".into(), Some("F2".into())));
}

#[test]
fn bad_arguments_are_one_line_errors() {
    for e in [
        "softmax(x)",
        "exp(x, 1)",
        "where([2], x, y)",
        "layernorm(x, 0, -1)",
        "cumsum(x)",
        "cross_entropy(x, 1)",
        // Outside the exact field: refused, never guessed.
        "exp(exp(x))",
        "softmax(exp(x), 0)",
        "floor(sqrt(x))",
    ] {
        let (code, out, err) = run(&["derive", "--expr", e]);
        assert_eq!(code, 2, "{e}: {out}");
        assert_eq!(common::error_lines(&err), 1, "{e}: {err}");
    }
    // A dim out of range is a shape error for every shape in scope: vacuous,
    // never a panic.
    let (code, _, err) = run(&["derive", "--expr", "softmax(x, 5)"]);
    assert!(code == 0 || code == 2 || code == 3, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Inside a program or a declared meaning a transcendental op is not
    // checked yet (SPEC.md §19.6): it fits no shape, which is said, never
    // a panic and never "sound".
    let f = temp_rule_file(
        "prog.toml",
        "[[rule]]\nname = \"p\"\nnames = [\"x\"]\ninputs = [\"R\"]\noutput = \"R\"\n\n[[rule.step]]\nname = \"a\"\nexpr = \"exp(x)\"\noutput = \"R\"\n",
    );
    let (code, out, err) = run(&["check", &f, "--scope", "small", "--cases", "0"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("vacuous"), "{out}");
}

#[test]
fn the_transformer_block_table_is_pinned() {
    // SPEC.md §19.7: every cell computed by the oracle; pinned here so a
    // change in any verdict is noticed. The P and S(1) columns are the
    // twins of the sound cells beside them.
    use spmd_check::conform::{transformer_scope, transformer_table, transformer_text};
    let rows = transformer_table(&transformer_scope()).unwrap();
    let want = "\
exp(x)            sound     sound     sound     sound     F2        sound
tanh(x)           sound     sound     sound     sound     F2        sound
sigmoid(x)        sound     sound     sound     sound     F3        sound
gelu(x)           sound     sound     sound     sound     F2        sound
silu(x)           sound     sound     sound     sound     F2        sound
softmax(x, 1)     sound     sound     sound     F3        F3        sound
layernorm(x, 1)   sound     sound     sound     F3        F2        sound
rmsnorm(x, 1)     sound     sound     sound     F3        F2        sound
cumsum(x, 1)      sound     sound     sound     F3        sound     sound";
    let text = transformer_text(&rows);
    assert!(
        text.contains("a proof for exp(x), tanh(x), sigmoid(x), gelu(x), silu(x), softmax(x, 1), cumsum(x, 1) (by identity")
            && text.contains("bounded for layernorm(x, 1), rmsnorm(x, 1);"),
        "{text}"
    );
    let got: Vec<&str> = text.lines().skip(2).take(9).map(str::trim_end).collect();
    assert_eq!(got.join("\n"), want, "{text}");
    // Sound cells are proofs where every case is an identity defined at
    // every point (SPEC.md §19.8) and for cumsum (a polynomial grid); the
    // norms' (a root that may be undefined) are bounded. The footer says
    // which.
    for r in &rows {
        if r.verdict.is_sound() {
            let bounded = ["layernorm", "rmsnorm"].iter().any(|o| r.op.starts_with(o));
            assert_eq!(r.verdict.proof(), !bounded, "{} {}", r.op, r.ty);
        }
    }
}

/// SPEC.md §19.6: on the default scope (no scope flags) a transcendental op
/// takes three values per scalar, so lanes of length 2 on two ranks are
/// checked: softmax of Varying rows typed Invariant is refuted (F1), where
/// with six values those cases were beyond the cap and it passed. Its twin,
/// the same rows kept Varying, stays sound.
#[test]
fn default_scope_reaches_sharded_lanes_of_dim_ops() {
    let text = rule("softmax V to I", "softmax(x, 0)", &["V"], "I", "")
        + &rule("softmax V to V", "softmax(x, 0)", &["V"], "V", "");
    let rows = check("default_scope.toml", &text, &[]);
    let bad = verdict_of(&rows, "softmax V to I");
    assert_eq!(bad.1, "unsound", "{bad:?}");
    assert_eq!(bad.2.as_deref(), Some("F1"), "{bad:?}");
    assert_sound(&rows, "softmax V to V", true);
}
