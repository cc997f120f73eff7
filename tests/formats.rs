//! SPEC.md §11.4: `--format markdown` and `--format junit` of `check`,
//! `conform` and `derive`. Each testcase's outcome is the tool's own
//! verdict: a JUnit `failure` exactly for the rules (typings) whose verdict
//! is neither sound nor vacuous, `skipped` exactly for the vacuous ones, as
//! `--json` of the same run says; names that look like markup are escaped;
//! exit codes are those of the text report.

mod common;
use common::run_in;
use serde_json::Value;
use std::path::PathBuf;

fn fresh(name: &str) -> PathBuf {
    common::fresh_dir("formats", name)
}

/// An unsound rule, sound ones, a vacuous one (a one-rank mesh), and names
/// that are markup in XML and Markdown.
const RULES: &str = r#"
[[rule]]
name = "partial times partial <b> & \"c\" | d"
op = "mul"
inputs = ["P", "P"]
output = "P"

[[rule]]
name = "scaled partial"
op = { expr = "3 * x" }
inputs = ["P"]
output = "P"

[[rule]]
name = "one rank"
op = "mul"
inputs = ["V", "V"]
output = "V"
mesh = { x = 1 }

[[rule]]
name = "relu of partial"
op = "relu"
inputs = ["P"]
output = "P"
"#;

/// The text between `start` and the next `end` after it.
fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let i = s.find(start)? + start.len();
    Some(&s[i..i + s[i..].find(end)?])
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#10;", "\n")
        .replace("&amp;", "&")
}

/// Each testcase of a JUnit document: its name and what it holds
/// (`failure`, `skipped` or neither).
fn testcases(xml: &str) -> Vec<(String, &'static str)> {
    xml.split("<testcase ")
        .skip(1)
        .map(|tc| {
            let body = &tc[..tc.find("</testcase>").expect("closed")];
            let name = unescape(between(body, " name=\"", "\"").expect("a name"));
            let kind = if body.contains("<failure ") {
                "failure"
            } else if body.contains("<skipped ") {
                "skipped"
            } else {
                "pass"
            };
            (name, kind)
        })
        .collect()
}

/// The elements nest: every tag opened is closed, in order, and no `<` or
/// `&` is left raw in text or attributes (what a parser would refuse).
fn well_formed(xml: &str) {
    let body = xml
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        .expect("an XML declaration");
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find('<') {
        let text = &rest[..i];
        assert!(!text.contains('>'), "a raw > in text: {text}");
        for (j, _) in text.match_indices('&') {
            let ent = &text[j..];
            assert!(
                ["&lt;", "&gt;", "&amp;", "&quot;", "&apos;", "&#"]
                    .iter()
                    .any(|e| ent.starts_with(e)),
                "a raw & in text: {text}"
            );
        }
        let close = rest[i..].find('>').expect("a tag ends") + i;
        let tag = &rest[i + 1..close];
        assert!(!tag.contains('<'), "a raw < inside a tag: {tag}");
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if tag.starts_with('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.as_str()), "{tag}");
        } else if !tag.ends_with('/') {
            stack.push(name);
        }
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

/// What each outcome should be, from `--json`'s verdicts: failure for a
/// verdict neither sound nor vacuous, skipped for vacuous.
fn expected_from_json(
    entries: &[Value],
    name_key: &dyn Fn(&Value) -> String,
) -> Vec<(String, &'static str)> {
    entries
        .iter()
        .map(|r| {
            let kind = match r["verdict"].as_str().unwrap() {
                "sound" => "pass",
                "vacuous" => "skipped",
                _ => "failure",
            };
            (name_key(r), kind)
        })
        .collect()
}

#[test]
fn check_junit_fails_exactly_the_rules_that_are_not_sound() {
    let d = fresh("check");
    std::fs::write(d.join("rules.toml"), RULES).unwrap();
    let args = ["check", "rules.toml", "--cases", "0", "--scope", "small"];
    let with = |f: &[&'static str]| -> Vec<&str> { args.iter().chain(f).copied().collect() };
    let (json_code, json, err) = run_in(&d, &with(&["--json"]));
    assert_eq!(json_code, 1, "{err}");
    let v: Value = serde_json::from_str(&json).unwrap();
    let rules = v["rules"].as_array().unwrap();
    let want = expected_from_json(rules, &|r| r["name"].as_str().unwrap().to_string());
    // The file has each kind of outcome, so each is tested.
    for k in ["pass", "failure", "skipped"] {
        assert!(want.iter().any(|w| w.1 == k), "no {k} in {want:?}");
    }
    let (code, xml, err) = run_in(&d, &with(&["--format", "junit"]));
    assert_eq!(code, json_code, "the exit code follows the verdicts: {err}");
    well_formed(&xml);
    assert_eq!(testcases(&xml), want, "{xml}");
    // The failure's message is the counterexample's one line.
    let unsound = rules.iter().find(|r| r["verdict"] == "unsound").unwrap();
    let prop = unsound["property"].as_str().unwrap();
    assert!(
        xml.contains(&format!("<failure message=\"{prop} on mesh {{")),
        "{xml}"
    );
    // Totals agree with the cases.
    let fails = want.iter().filter(|w| w.1 == "failure").count();
    assert!(
        xml.contains(&format!("tests=\"{}\" failures=\"{fails}\"", want.len())),
        "{xml}"
    );
    // The markup in the name is escaped, never raw.
    assert!(!xml.contains("<b>") && xml.contains("&lt;b&gt; &amp; &quot;c&quot;"));

    // The same rows in Markdown: one table row per rule, FAIL exactly
    // where JUnit has a failure, and the `|` in a name does not add a cell.
    let (code, md, _) = run_in(&d, &with(&["--format", "markdown"]));
    assert_eq!(code, json_code);
    let rows: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| rule |"))
        .collect();
    assert_eq!(rows.len(), rules.len(), "{md}");
    for (row, (_, kind)) in rows.iter().zip(&want) {
        let cells = row.replace("\\|", "").matches('|').count() - 1;
        assert_eq!(cells, 4, "{row}");
        assert_eq!(row.ends_with("| **FAIL** |"), *kind == "failure", "{row}");
        assert_eq!(row.contains("| skipped"), *kind == "skipped", "{row}");
    }
    assert!(
        md.contains("partial times partial \\<b> \\& \"c\" \\| d"),
        "{md}"
    );

    // The text report is unchanged by the new flags, and --format text is it.
    let (c1, text, _) = run_in(&d, &args);
    let (c2, text2, _) = run_in(&d, &with(&["--format", "text"]));
    assert_eq!((c1, &text), (c2, &text2));
    assert!(text.contains(": rule \"one rank\": vacuous"), "{text}");
    // --json with another format is a one-line error.
    let (c, _, err) = run_in(&d, &with(&["--json", "--format", "junit"]));
    assert_eq!(c, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn derive_junit_follows_the_verdicts() {
    let d = fresh("derive");
    let args = ["derive", "mul", "--scope", "small"];
    let with = |f: &[&'static str]| -> Vec<&str> { args.iter().chain(f).copied().collect() };
    let (_, json, _) = run_in(&d, &with(&["--json"]));
    let v: Value = serde_json::from_str(&json).unwrap();
    // A typing's name is its signature, as the text report shows it.
    let sig = |r: &Value| {
        let ins: Vec<&str> = r["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        format!("{} -> {}", ins.join(", "), r["output"].as_str().unwrap())
    };
    let want = expected_from_json(v["typings"].as_array().unwrap(), &sig);
    let (code, xml, err) = run_in(&d, &with(&["--format", "junit"]));
    assert_eq!(code, 0, "{err}");
    well_formed(&xml);
    assert_eq!(testcases(&xml), want);
    assert!(want.iter().any(|w| w.1 == "failure") && want.iter().any(|w| w.1 == "pass"));
    let (_, md, _) = run_in(&d, &with(&["--format", "markdown"]));
    assert_eq!(
        md.lines().filter(|l| l.ends_with("| **FAIL** |")).count(),
        want.iter().filter(|w| w.1 == "failure").count()
    );
    // --partial has no table format: a one-line error.
    let (c, _, err) = run_in(
        &d,
        &["derive", "relu", "--partial", "max", "--format", "junit"],
    );
    assert_eq!(c, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn conform_junit_fails_what_makes_conform_exit_1() {
    let d = fresh("conform");
    let args = ["conform", "--dialect", "nabla", "--scope", "small"];
    let with = |f: &[&'static str]| -> Vec<&str> { args.iter().chain(f).copied().collect() };
    let (json_code, json, _) = run_in(&d, &with(&["--json"]));
    let v: Value = serde_json::from_str(&json).unwrap();
    let (code, xml, err) = run_in(&d, &with(&["--format", "junit"]));
    assert_eq!(code, json_code, "{err}");
    well_formed(&xml);
    let cases = testcases(&xml);
    // One testcase per row of each section.
    let rows: usize = [
        "local_rules",
        "collectives",
        "jvps",
        "fsdp",
        "programs",
        "generated_programs",
        "pending_kinds",
    ]
    .iter()
    .map(|s| v[*s].as_array().unwrap().len())
    .sum();
    // The uneven section (SPEC.md §23.12) is one entry holding a row per rule.
    let uneven = v["uneven"][0]["rules"].as_array().unwrap();
    assert!(!uneven.is_empty());
    // So is the transforms section (SPEC.md §24.5): JAX's rules only, so
    // none under --dialect nabla.
    let transforms = v["transforms"][0]["rules"].as_array().unwrap();
    assert_eq!(cases.len(), rows + uneven.len() + transforms.len(), "{xml}");
    assert!(xml.contains("<testsuite name=\"uneven shards\""), "{xml}");
    // A failure exactly for a twin not rejected or a result not as expected.
    let bad = v["local_rules"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["jvps"].as_array().unwrap())
        .filter(|r| r["twin"]["rejected"] == false)
        .count()
        + v["fsdp"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["as_expected"] == false)
            .count()
        + uneven.iter().filter(|r| r["as_pinned"] == false).count();
    assert_eq!(cases.iter().filter(|c| c.1 == "failure").count(), bad);
    assert_eq!(json_code, i32::from(bad > 0));
    // An unsound seed row the suite expects is a note, not a failure.
    let unsound = v["local_rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == "unsound")
        .count();
    assert!(unsound > 0);
    assert!(xml.matches("note: ").count() >= unsound, "{xml}");
    // --transformer has a text report only.
    let (c, _, err) = run_in(&d, &["conform", "--transformer", "--json"]);
    assert_eq!(c, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn registry_junit_fails_exactly_the_incorrect_claims() {
    let d = fresh("registry");
    let args = ["registry", "dtensor", "--op", "aten.threshold.default"];
    let (code, xml, err) = run_in(&d, &[&args[..], &["--format", "junit"]].concat());
    assert_eq!(code, 1, "{err}");
    well_formed(&xml);
    let (_, json, _) = run_in(&d, &[&args[..], &["--json"]].concat());
    let v: Value = serde_json::from_str(&json).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let cases = testcases(&xml);
    assert_eq!(cases.len(), rows.len());
    let failed = cases.iter().filter(|(_, o)| *o == "failure").count();
    let incorrect = rows.iter().filter(|r| r["class"] == "incorrect").count();
    assert_eq!((failed, incorrect), (6, 6));
    let (code, md, _) = run_in(
        &d,
        &[
            "registry",
            "dtensor",
            "--op",
            "aten.relu.default",
            "--format",
            "markdown",
        ],
    );
    assert_eq!(code, 0);
    assert!(
        md.contains("| aten.relu.default | P(max) -> P(max) | correct |"),
        "{md}"
    );
}
