//! SPEC.md §18.3: `--partition K/N` splits one run's items; `merge` of the
//! parts' JSON equals the single run's JSON, with its exit code. Bad K/N
//! and mismatched parts are bad input (one line, exit 2).

mod common;
use std::path::PathBuf;

/// Exit code, stdout and stderr of `spmd-check ARGS` run in `dir`.
use common::run_in;

const RULES: &str = r#"
[[rule]]
name = "partial times partial"
op = "mul"
inputs = ["P", "P"]
output = "P"

[[rule]]
name = "scaled partial"
op = { expr = "3 * x" }
inputs = ["P"]
output = "P"

[[rule]]
name = "gather to reduced"
dialect = "jax"
forward = "all_gather(dim = 0, to = 'reduced')"
backward = "psum_scatter(dim = 0)"
inputs = ["Varying"]
output = "Reduced"

[[rule]]
name = "I mixed with V"
op = "mul"
inputs = ["I", "V"]
output = "V"

[[rule]]
name = "ratio"
op = "div"
inputs = ["V", "V"]
output = "V"
"#;

/// A fresh directory holding `rules.toml` (regressions are written beside
/// it, so every run gets its own).
fn fresh(name: &str) -> PathBuf {
    let dir = common::fresh_dir("partition", name);
    std::fs::write(dir.join("rules.toml"), RULES).unwrap();
    dir
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn merged_check_parts_equal_the_single_run() {
    let args = [
        "check",
        "rules.toml",
        "--json",
        "--cases",
        "16",
        "--scope",
        "small",
    ];
    let whole = fresh("whole");
    let (code, single, err) = run_in(&whole, &args);
    assert_eq!(code, 1, "{err}");
    let parts = fresh("parts");
    let mut files = Vec::new();
    for k in 1..=3 {
        let p = format!("{k}/3");
        let mut a = args.to_vec();
        a.extend(["--partition", &p]);
        let (c, out, err) = run_in(&parts, &a);
        assert!(c == 0 || c == 1, "part {p}: exit {c}: {err}");
        let f = format!("part{k}.json");
        std::fs::write(parts.join(&f), out).unwrap();
        files.push(f);
    }
    // Any order of the parts.
    let mut m = vec!["merge"];
    m.extend(files.iter().rev().map(String::as_str));
    let (c, merged, err) = run_in(&parts, &m);
    assert_eq!(c, code, "merge gives the single run's exit code: {err}");
    assert_eq!(json(&merged), json(&single));
    // A part is the command's own document, with `partition` added; its
    // key is JSON (meshes as objects), not Debug text.
    let p1 = json(&std::fs::read_to_string(parts.join(&files[0])).unwrap());
    assert_eq!(
        (&p1["schema"], &p1["command"]),
        (&"spmd-check/1".into(), &"check".into())
    );
    assert!(p1["rules"].is_array(), "{p1}");
    assert_eq!(
        p1["partition"]["key"]["scope"]["meshes"][1],
        serde_json::json!({"x": 2})
    );
    assert!(!p1["partition"].to_string().contains("Scope {"), "{p1}");

    // A part of another schema, or a document that is not a part, is
    // refused in one line.
    let mut old = p1.clone();
    old["schema"] = "spmd-check/0".into();
    std::fs::write(parts.join("old.json"), old.to_string()).unwrap();
    let (c, _, err) = run_in(&parts, &["merge", "old.json", &files[1], &files[2]]);
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains("spmd-check/0") && err.trim().lines().count() == 1,
        "{err}"
    );
    std::fs::write(parts.join("single.json"), &single).unwrap();
    let (c, _, err) = run_in(&parts, &["merge", "single.json"]);
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains("not a part") && err.trim().lines().count() == 1,
        "{err}"
    );

    // The twin: a part left out, or given twice, is refused.
    let (c, _, err) = run_in(&parts, &["merge", &files[0], &files[1]]);
    assert_eq!(c, 2);
    assert!(
        err.contains("missing") && common::error_lines(&err) == 1,
        "{err}"
    );
    let (c, _, err) = run_in(&parts, &["merge", &files[0], &files[0], &files[1]]);
    assert_eq!(c, 2, "{err}");
}

#[test]
fn merged_conform_parts_equal_the_single_run() {
    let dir = fresh("conform");
    let args = [
        "conform",
        "--dialect",
        "nabla",
        "--scope",
        "small",
        "--json",
    ];
    let (code, single, err) = run_in(&dir, &args);
    assert_eq!(code, 0, "{err}");
    let mut files = Vec::new();
    for k in 1..=3 {
        let p = format!("{k}/3");
        let mut a = args.to_vec();
        a.extend(["--partition", &p]);
        let (c, out, err) = run_in(&dir, &a);
        assert_eq!(c, 0, "part {p}: {err}");
        let v = json(&out);
        assert_eq!(v["partition"]["k"], k);
        let f = format!("conform{k}.json");
        std::fs::write(dir.join(&f), out).unwrap();
        files.push(f);
    }
    let mut m = vec!["merge"];
    m.extend(files.iter().map(String::as_str));
    let (c, merged, err) = run_in(&dir, &m);
    assert_eq!(c, 0, "{err}");
    assert_eq!(json(&merged), json(&single));
    // Parts of different runs (another scope) do not merge.
    let (_, other, _) = run_in(
        &dir,
        &[
            "conform",
            "--dialect",
            "nabla",
            "--scope",
            "small",
            "--max-rank",
            "1",
            "--json",
            "--partition",
            "3/3",
        ],
    );
    std::fs::write(dir.join("other.json"), other).unwrap();
    let (c, _, err) = run_in(&dir, &["merge", &files[0], &files[1], "other.json"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("not from the same run"), "{err}");
}

#[test]
fn bad_partitions_are_one_line_and_exit_2() {
    let dir = fresh("bad");
    for p in ["0/3", "4/3", "1/0", "a/b", "3", ""] {
        for cmd in [
            vec!["check", "rules.toml"],
            vec!["conform", "--dialect", "nabla"],
        ] {
            let mut a = cmd.clone();
            a.extend(["--partition", p]);
            let (c, out, err) = run_in(&dir, &a);
            assert_eq!(c, 2, "{a:?}: {out}{err}");
            assert_eq!(common::error_lines(&err), 1, "{a:?}: {err}");
            assert!(err.contains("--partition"), "{err}");
        }
    }
    let (c, _, err) = run_in(&dir, &["merge", "rules.toml"]);
    assert_eq!(c, 2);
    assert_eq!(common::error_lines(&err), 1, "{err}");
}
