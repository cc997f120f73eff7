//! Tests as data (issue 25), after the WebAssembly testsuite's `.wast`
//! scripts: every job file `tests/suite/run/NAME.json` (the format
//! `spmd-check run` reads) is run by the built binary as
//! `spmd-check run NAME.json --json [flags]`, and what it reports is compared
//! with `NAME.expected.json` beside it. tests/suite/README.md gives the
//! format of an expectation and how to add a case.
//!
//! A job with no expectation, or an expectation with no job, fails the
//! harness, so a case cannot silently vanish; every failing case is
//! reported, not just the first. `SUITE_ONLY=text` runs only the cases whose
//! name contains `text`.

mod common;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The keys an expectation may hold; any other is a mistake in the file.
const KEYS: &[&str] = &[
    "flags",
    "exit",
    "output_type",
    "output",
    "backward",
    "traffic",
    "check",
    "counterexample_prefix",
    "notes_contain",
    "notes_lack",
    "error",
];

/// The keys that assert something about the run (an expectation must hold
/// at least one, so an empty file cannot pass everything).
const ASSERTING: &[&str] = &[
    "output_type",
    "output",
    "backward",
    "traffic",
    "check",
    "counterexample_prefix",
    "notes_contain",
    "notes_lack",
    "error",
];

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/suite/run")
}

/// The cases of a folder: names with both files, and one problem line for
/// each job with no expectation, expectation with no job, or other file.
fn pair_up(dir: &Path) -> (Vec<String>, Vec<String>) {
    let mut jobs = BTreeSet::new();
    let mut exps = BTreeSet::new();
    let mut problems = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".expected.json") {
            exps.insert(stem.to_string());
        } else if let Some(stem) = name.strip_suffix(".json") {
            jobs.insert(stem.to_string());
        } else if name != "README.md" {
            problems.push(format!("{name}: neither a job (.json) nor an expectation"));
        }
    }
    for j in jobs.difference(&exps) {
        problems.push(format!("{j}.json: a job with no {j}.expected.json"));
    }
    for x in exps.difference(&jobs) {
        problems.push(format!(
            "{x}.expected.json: an expectation with no {x}.json"
        ));
    }
    (jobs.intersection(&exps).cloned().collect(), problems)
}

/// What one run gave.
struct Outcome {
    code: i32,
    out: Value,
    err: String,
}

fn flags(exp: &Value) -> Vec<String> {
    match exp.get("flags") {
        Some(Value::Array(fs)) => fs
            .iter()
            .map(|f| f.as_str().unwrap_or("<not a string>").to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// Run the job file with `--json` and the expectation's flags.
fn run_case(job: &Path, exp: &Value) -> Outcome {
    let f = job.display().to_string();
    let fl = flags(exp);
    let mut args = vec!["run", f.as_str(), "--json"];
    args.extend(fl.iter().map(|s| s.as_str()));
    let (code, out, err) = common::run(&args);
    Outcome {
        code,
        out: serde_json::from_str(&out).unwrap_or(Value::Null),
        err,
    }
}

/// The strings of an expectation's list key, or a problem.
fn strings<'a>(exp: &'a Value, key: &str, bad: &mut Vec<String>) -> Vec<&'a str> {
    match exp.get(key) {
        None => Vec::new(),
        Some(Value::Array(xs)) if xs.iter().all(|x| x.is_string()) => {
            xs.iter().map(|x| x.as_str().unwrap()).collect()
        }
        Some(other) => {
            bad.push(format!("`{key}` must be a list of strings, not {other}"));
            Vec::new()
        }
    }
}

/// Every way the run differs from the expectation (empty: it matches).
fn compare(exp: &Value, got: &Outcome) -> Vec<String> {
    let mut bad = Vec::new();
    let Some(obj) = exp.as_object() else {
        return vec!["the expectation is not a JSON object".into()];
    };
    for k in obj.keys() {
        if !KEYS.contains(&k.as_str()) {
            bad.push(format!("unknown expectation key `{k}`"));
        }
    }
    if !ASSERTING.iter().any(|k| obj.contains_key(*k)) {
        bad.push(format!(
            "the expectation asserts nothing (give one of {ASSERTING:?})"
        ));
    }
    let default_exit = if obj.contains_key("error") { 2 } else { 0 };
    let want_exit = obj
        .get("exit")
        .and_then(Value::as_i64)
        .unwrap_or(default_exit);
    if i64::from(got.code) != want_exit {
        bad.push(format!(
            "exit {} (wanted {want_exit}); stderr: {}",
            got.code,
            got.err.trim()
        ));
    }
    let v = &got.out;
    if let Some(t) = obj.get("output_type") {
        if &v["output"]["type"] != t {
            bad.push(format!("output type {} (wanted {t})", v["output"]["type"]));
        }
    }
    if let Some(y) = obj.get("output") {
        if &v["output"]["per_rank"] != y {
            bad.push(format!("output {} (wanted {y})", v["output"]["per_rank"]));
        }
    }
    if let Some(dx) = obj.get("backward") {
        // One per_rank list per input; null when no backward is reported.
        let got_dx = match v.get("backward") {
            Some(Value::Array(bs)) => {
                Value::Array(bs.iter().map(|b| b["per_rank"].clone()).collect())
            }
            Some(other) => other.clone(),
            None => Value::Null,
        };
        if &got_dx != dx {
            bad.push(format!("backward {got_dx} (wanted {dx})"));
        }
    }
    if let Some(t) = obj.get("traffic") {
        match t.as_object() {
            Some(t) => {
                for (k, w) in t {
                    if &v["traffic"][k] != w {
                        bad.push(format!("traffic.{k} {} (wanted {w})", v["traffic"][k]));
                    }
                }
            }
            None => bad.push(format!("`traffic` must be an object, not {t}")),
        }
    }
    if let Some(c) = obj.get("check") {
        match c.as_object() {
            Some(c) => {
                for (k, w) in c {
                    if &v["check"][k] != w {
                        bad.push(format!("check.{k} {} (wanted {w})", v["check"][k]));
                    }
                }
            }
            None => bad.push(format!("`check` must be an object, not {c}")),
        }
    }
    if let Some(p) = obj.get("counterexample_prefix") {
        let ce = v["check"]["counterexample"].as_str().unwrap_or("");
        if !p.as_str().is_some_and(|p| ce.starts_with(p)) {
            bad.push(format!("counterexample `{ce}` does not start with {p}"));
        }
    }
    let notes = v["notes"].to_string();
    for s in strings(exp, "notes_contain", &mut bad) {
        if !notes.contains(s) {
            bad.push(format!("notes lack `{s}`: {notes}"));
        }
    }
    for s in strings(exp, "notes_lack", &mut bad) {
        if notes.contains(s) {
            bad.push(format!("notes contain `{s}`: {notes}"));
        }
    }
    if let Some(e) = obj.get("error") {
        let Some(e) = e.as_str() else {
            bad.push(format!("`error` must be a string, not {e}"));
            return bad;
        };
        if !got.err.contains(e) {
            bad.push(format!("stderr lacks `{e}`: {}", got.err.trim()));
        }
        if common::error_lines(&got.err) != 1 {
            bad.push(format!("stderr is not one line: {}", got.err.trim()));
        }
        if got.err.contains("panicked") {
            bad.push(format!("it panicked: {}", got.err.trim()));
        }
    }
    bad
}

fn load_expectation(dir: &Path, name: &str) -> Result<Value, String> {
    let p = dir.join(format!("{name}.expected.json"));
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{name}.expected.json: not JSON: {e}"))
}

/// Run every case of the folder: one line per problem, all of them.
fn run_folder(dir: &Path, only: Option<&str>) -> (usize, Vec<String>) {
    let (names, mut failures) = pair_up(dir);
    let mut ran = 0;
    for name in &names {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        ran += 1;
        match load_expectation(dir, name) {
            Err(e) => failures.push(e),
            Ok(exp) => {
                let got = run_case(&dir.join(format!("{name}.json")), &exp);
                for b in compare(&exp, &got) {
                    failures.push(format!("{name}: {b}"));
                }
            }
        }
    }
    (ran, failures)
}

#[test]
fn every_job_gives_its_expectation() {
    let only = std::env::var("SUITE_ONLY").ok();
    let (ran, failures) = run_folder(&suite_dir(), only.as_deref());
    assert!(ran > 0, "no case ran");
    assert!(
        failures.is_empty(),
        "{} problem(s) in {ran} case(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The folder holds the negative kinds the harness must be seen to detect:
/// a refused job (exit 2) and a wrong backward that `--check` refutes.
#[test]
fn the_suite_holds_negative_cases() {
    let (names, _) = pair_up(&suite_dir());
    let exps: Vec<Value> = names
        .iter()
        .map(|n| load_expectation(&suite_dir(), n).unwrap())
        .collect();
    assert!(exps.iter().any(|e| e.get("error").is_some()));
    assert!(exps
        .iter()
        .any(|e| e["exit"] == json!(1) && e["check"]["outcome"] == "violation"));
}

/// A deliberately wrong expectation makes the comparison fail, naming what
/// differs; the right one passes.
#[test]
fn a_tampered_expectation_is_caught() {
    let dir = suite_dir();
    let case = |name: &str| {
        let exp = load_expectation(&dir, name).unwrap();
        let got = run_case(&dir.join(format!("{name}.json")), &exp);
        (exp, got)
    };
    // A forward case: wrong output, backward, type, traffic, each caught.
    let (exp, got) = case("jax_psum_x2");
    assert_eq!(compare(&exp, &got), Vec::<String>::new());
    for (key, wrong, named) in [
        ("output", json!([[3], [4]]), "output"),
        ("backward", json!([[[5], [6]]]), "backward"),
        ("output_type", json!("V"), "output type"),
        ("traffic", json!({"forward": 2}), "traffic.forward"),
        ("notes_contain", json!(["no such note"]), "notes lack"),
        ("exit", json!(1), "exit 0"),
        ("flavour", json!(1), "unknown expectation key"),
    ] {
        let mut t = exp.clone();
        t[key] = wrong;
        let bad = compare(&t, &got);
        assert!(bad.iter().any(|b| b.contains(named)), "{key}: {bad:?}");
    }
    // An expectation that asserts nothing is refused.
    let bad = compare(&json!({"flags": []}), &got);
    assert!(bad.iter().any(|b| b.contains("asserts nothing")), "{bad:?}");
    // A refuted backward: another property, or a pass, is caught.
    let (exp, got) = case("jax_ppermute_partial_wrong_backward_0_x4");
    assert_eq!(compare(&exp, &got), Vec::<String>::new());
    let mut t = exp.clone();
    t["check"]["property"] = json!("B2");
    assert!(compare(&t, &got)
        .iter()
        .any(|b| b.contains("check.property")));
    let mut t = exp.clone();
    t["exit"] = json!(0);
    t["check"] = json!({"outcome": "pass"});
    assert_eq!(compare(&t, &got).len(), 2, "{:?}", compare(&t, &got));
    // A refused job: another message is caught.
    let (exp, got) = case("bad_ranks");
    assert_eq!(compare(&exp, &got), Vec::<String>::new());
    let mut t = exp.clone();
    t["error"] = json!("some other complaint");
    assert!(compare(&t, &got).iter().any(|b| b.contains("stderr lacks")));
}

/// A job without an expectation, or an expectation without a job, is a
/// failure of the harness, and every failing case is listed.
#[test]
fn orphans_and_all_failures_are_reported() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-check-suite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let job = r#"{"dialect": "jax", "mesh": {"x": 2}, "forward": "psum",
        "inputs": [{"type": "Varying", "per_rank": [[1], [2]]}]}"#;
    std::fs::write(dir.join("lonely_job.json"), job).unwrap();
    std::fs::write(
        dir.join("lonely_exp.expected.json"),
        r#"{"output": [[3], [3]]}"#,
    )
    .unwrap();
    for (name, want) in [
        ("wrong_a", "[[4], [4]]"),
        ("wrong_b", "[[5], [5]]"),
        ("right", "[[3], [3]]"),
    ] {
        std::fs::write(dir.join(format!("{name}.json")), job).unwrap();
        std::fs::write(
            dir.join(format!("{name}.expected.json")),
            format!(r#"{{"output": {want}}}"#),
        )
        .unwrap();
    }
    let (ran, failures) = run_folder(&dir, None);
    assert_eq!(ran, 3);
    let all = failures.join("\n");
    assert_eq!(failures.len(), 4, "{all}");
    assert!(all.contains("lonely_job.json: a job with no"), "{all}");
    assert!(
        all.contains("lonely_exp.expected.json: an expectation with no"),
        "{all}"
    );
    assert!(all.contains("wrong_a: output"), "{all}");
    assert!(all.contains("wrong_b: output"), "{all}");
}
