//! The command line end to end: verdicts, JSON, and bad input (exit code 2,
//! one line, never a panic).

mod common;
use common::run;

#[test]
fn derive_expr_json_has_a_real_verdict_per_row() {
    let (code, out, err) = run(&["derive", "--expr", "x + 1", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["schema"], "spmd-check/1");
    assert_eq!(v["command"], "derive");
    assert_eq!(v["mode"], "table");
    let rows = v["typings"].as_array().expect("array");
    assert_eq!(rows.len(), 16);
    for r in rows {
        let verdict = r["verdict"].as_str().unwrap();
        assert!(["sound", "unsound", "vacuous", "undetermined"].contains(&verdict));
        assert_eq!(r["property"].is_null(), verdict != "unsound");
    }
    // x + 1 on P: well-defined but not the declared meaning (F3).
    let p = rows
        .iter()
        .find(|r| r["inputs"][0] == "P" && r["output"] == "P")
        .unwrap();
    assert_eq!(p["property"], "F3");
    let i = rows
        .iter()
        .find(|r| r["inputs"][0] == "I" && r["output"] == "I")
        .unwrap();
    assert_eq!(i["verdict"], "sound");
    assert_eq!(i["proof"], true);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    for args in [
        vec!["derive", "nosuchop"],
        vec!["derive", "--expr", "x * "],
        vec!["derive", "--expr", "foo(x)"],
        vec!["derive"],
        vec!["conform", "--dialect", "klingon"],
        vec!["derive", "mul", "--max-instances", "10"],
        vec!["derive", "--expr", "x^100"],
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let (_, _, err) = run(&["derive", "--expr", "x * "]);
    assert!(err.contains("column 5"), "{err}");
    let (_, _, err) = run(&["derive", "mul", "--max-instances", "10"]);
    assert!(err.contains("--max-instances"), "{err}");
    let (_, _, err) = run(&["derive", "--expr", "x^100"]);
    assert!(err.contains("degree bound 100"), "{err}");
}

/// The README's map of folders to SPEC.md chapters names only paths that exist.
#[test]
fn readme_paths_exist() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let mut n = 0;
    for line in readme.lines().filter(|l| l.starts_with("| `")) {
        let path = line.split('`').nth(1).unwrap();
        assert!(
            std::path::Path::new(&format!("{root}/{path}")).exists(),
            "README names missing path {path}"
        );
        n += 1;
    }
    assert!(n >= 5, "README has no path table");
}

/// The README's worked counterexample is what `derive mul` prints today.
#[test]
fn readme_counterexample_is_current() {
    let readme = include_str!("../README.md");
    let shown = readme
        .lines()
        .find(|l| l.trim_start().starts_with("P, P -> P"))
        .expect("README shows the P, P -> P row");
    let (code, out, err) = run(&["derive", "mul"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().any(|l| l == shown),
        "README shows\n{shown}\nbut derive mul prints\n{out}"
    );
}

/// `conform` ends with one summary line (issue 26): what was checked and
/// whether everything came out as expected, matching its exit code. Twin:
/// with `--json` there is no such line (the JSON document is the output).
#[test]
fn conform_ends_with_one_summary_line() {
    let (code, out, err) = run(&["conform"]);
    assert_eq!(code, 0, "{err}");
    let last = out.lines().last().unwrap();
    assert!(last.starts_with("conform: 53 seed rules ("), "{last}");
    assert!(
        last.ends_with("every twin rejected and every result as expected (exit 0)"),
        "{last}"
    );
    let (_, json, _) = run(&["conform", "--json"]);
    assert!(!json.contains("\nconform: "));
    assert!(serde_json::from_str::<serde_json::Value>(&json).is_ok());
}

/// A misspelt name anywhere a name is read (ops, functions, collectives,
/// states, dialects, fields, mesh axes) is answered with the nearest known
/// name, and an error that points into a file shows that line with a caret
/// under the name (SPEC.md §11.4).
#[test]
fn misspelt_names_get_the_nearest_name_and_a_caret() {
    let rule = |line: &str| {
        format!("[[rule]]\nname = \"m\"\nmesh = {{ x = 2 }}\ninputs = [\"V\"]\noutput = \"V\"\n{line}\n")
    };
    let cases = [
        (rule("op = \"nge\""), "`neg`", "\"nge\""),
        (rule("forward = \"all_gathr(I)\""), "`all_gather`", "all_gathr"),
        (rule("dialect = \"jaxx\""), "`jax`", "jaxx"),
        (rule("outptu = 1"), "`output`", "outptu"),
        (rule("op = { expr = \"sinn(x)\" }"), "`sin`", ""),
        (rule("forward = \"psum(axis=xx)\""), "`x`", ""),
        (
            "[[rule]]\nname = \"m\"\ndialect = \"jax\"\ninputs = [\"Varyng\"]\nop = \"neg\"\noutput = \"Varying\"\n".to_string(),
            "`Varying`",
            "Varyng",
        ),
    ];
    for (i, (text, want, under)) in cases.iter().enumerate() {
        let f = common::temp_rule_file(&format!("typo{i}.toml"), text);
        let (code, out, err) = run(&["check", &f]);
        assert_eq!(code, 2, "{text}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{text}: {err}");
        let first = err.lines().next().unwrap();
        assert!(first.starts_with("error: "), "{err}");
        assert!(
            first.contains(&format!("did you mean {want}?")),
            "{text}: {err}"
        );
        // The snippet: the file's line, then a caret under the name.
        let caret = err.lines().find(|l| l.contains('^'));
        assert!(caret.is_some(), "{text}: no caret: {err}");
        if !under.is_empty() {
            let src = err
                .lines()
                .find(|l| l.contains(under) && l.contains(" | "))
                .unwrap();
            let at = src.find(under).unwrap();
            let c = caret.unwrap().find('^').unwrap();
            assert!((at..at + under.len()).contains(&c), "{text}: {err}");
        }
    }
    // Commands and expressions too.
    for (args, want) in [
        (vec!["derive", "mull"], "`mul`"),
        (vec!["derive", "--expr", "sinn(x)"], "`sin`"),
        (vec!["conform", "--dialect", "jaxx"], "`jax`"),
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(&format!("did you mean {want}?")),
            "{args:?}: {err}"
        );
    }
    // The twin: a name near nothing gets no guess, only the list.
    for args in [
        vec!["derive", "frobnicate"],
        vec!["conform", "--dialect", "klingon"],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.contains("did you mean"), "{args:?}: {err}");
    }
}

/// `bench --only NAME` measures the jobs named like NAME and no other; a
/// name no job has is bad input that lists the jobs (exit 2, one line).
#[test]
fn bench_only_measures_the_named_jobs() {
    let (code, out, err) = run(&["bench", "--only", "derive relu", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let jobs = v["jobs"].as_array().expect("jobs");
    let names: Vec<&str> = jobs.iter().filter_map(|j| j["name"].as_str()).collect();
    assert_eq!(names, ["derive relu"]);
    assert!(jobs[0]["instances"].as_u64().unwrap_or(0) > 0, "{out}");
    assert!(v["fsdp_jax_shapes"].is_null(), "{out}");
    let (code, _, err) = run(&["bench", "--scopes", "--only", "product", "--json"]);
    assert_eq!(code, 0, "{err}");
    for args in [
        vec!["bench", "--only", "no such job"],
        vec!["bench", "--scopes", "--only", "derive mul"],
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{args:?}: {err}");
        assert!(err.contains("the jobs are"), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}
