//! SPEC.md §11.4: every command's `--json` is one document of the shape
//! `schemas/spmd-check-1.schema.json` describes, whatever the flags; each
//! command is run on a small input and its output validated against the
//! schema (with boon, a JSON Schema 2020-12 validator). Twins: the schema
//! rejects what the output used to be (a bare array, a mesh as text, no
//! `schema`), so a validation that passes means something.

mod common;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const SCHEMA: &str = include_str!("../schemas/spmd-check-1.schema.json");

/// Validates documents against the committed schema.
struct Validator {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl Validator {
    fn new() -> Validator {
        let v: Value = serde_json::from_str(SCHEMA).expect("the schema is JSON");
        let id = v["$id"]
            .as_str()
            .expect("the schema has an $id")
            .to_string();
        let mut schemas = boon::Schemas::new();
        let mut c = boon::Compiler::new();
        c.add_resource(&id, v).expect("the schema is added");
        let index = c
            .compile(&id, &mut schemas)
            .unwrap_or_else(|e| panic!("the schema compiles: {e}"));
        Validator { schemas, index }
    }
    /// The first error, if the document is not valid.
    fn errors(&self, doc: &Value) -> Option<String> {
        self.schemas
            .validate(doc, self.index)
            .err()
            .map(|e| format!("{e:#}"))
    }
    fn assert_valid(&self, what: &str, doc: &Value) {
        if let Some(e) = self.errors(doc) {
            panic!("{what}: not valid against the schema:\n{e}\n{doc:#}");
        }
    }
}

/// A fresh directory for this test's files (regressions are written
/// beside rule files).
fn fresh(name: &str) -> PathBuf {
    common::fresh_dir("json-schema", name)
}

/// Run `spmd-check ARGS` in `dir`: exit code and the JSON it printed.
fn json_in(dir: &Path, args: &[&str]) -> (i32, Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

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
name = "two axes"
op = "add"
inputs = [{ dp = "V", tp = "I" }, { dp = "V", tp = "I" }]
output = { dp = "V", tp = "I" }

[[rule]]
name = "one rank"
op = "mul"
inputs = ["V", "V"]
output = "V"
mesh = { x = 1 }
"#;

/// `check` in every shape: plain, with --emit, with pending kinds, a
/// partition's parts and their merge; one document of one shape each.
#[test]
fn check_and_merge_match_the_schema() {
    let v = Validator::new();
    let d = fresh("check");
    std::fs::write(d.join("rules.toml"), RULES).unwrap();
    std::fs::write(
        d.join("kinds.toml"),
        include_str!("../examples/partial_kinds.toml"),
    )
    .unwrap();
    let base = ["check", "rules.toml", "--cases", "4", "--scope", "small"];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let run = |args: Vec<String>| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        json_in(&d, &a)
    };
    let (code, first) = run(with(&["--json"]));
    assert_eq!(code, 1);
    v.assert_valid("check --json", &first);
    // Every later run replays the saved counterexample first.
    let (_, single) = run(with(&["--json"]));
    v.assert_valid("check --json (replayed)", &single);
    assert_eq!(single["rules"][0]["replayed"], true);
    // The counterexample's mesh is an object.
    let pp = &single["rules"][0];
    assert_eq!(pp["counterexample"]["mesh"], json!({"x": 2}));
    let (_, same) = run(with(&["--format", "json"]));
    assert_eq!(same, single, "--format json is --json");
    let (_, emitted) = run(with(&["--json", "--emit", "rstest"]));
    v.assert_valid("check --json --emit rstest", &emitted);
    assert!(emitted["rules"][0]["emitted"]["test"].is_string());
    let (_, kinds) = json_in(
        &d,
        &[
            "check",
            "kinds.toml",
            "--cases",
            "0",
            "--scope",
            "small",
            "--json",
        ],
    );
    v.assert_valid("check --json (pending kinds)", &kinds);
    let mut parts = Vec::new();
    for k in 1..=2 {
        let p = format!("{k}/2");
        let (_, part) = run(with(&["--json", "--partition", &p]));
        v.assert_valid(&format!("check --json --partition {p}"), &part);
        // A part has the single run's shape, with `partition` added.
        let keys = |x: &Value| -> Vec<String> {
            x.as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "partition")
                .cloned()
                .collect()
        };
        assert_eq!(keys(&part), keys(&single));
        let f = format!("part{k}.json");
        std::fs::write(d.join(&f), part.to_string()).unwrap();
        parts.push(f);
    }
    let (code, merged) = json_in(&d, &["merge", &parts[1], &parts[0]]);
    assert_eq!(code, 1);
    v.assert_valid("merge", &merged);
    assert_eq!(merged, single);
}

/// The twins: what the output used to be is rejected by the schema.
#[test]
fn the_schema_rejects_the_old_shapes() {
    let v = Validator::new();
    let cex = json!({"property": "F2", "mesh": {"x": 2}, "what": "w",
        "values": [], "expected": "0", "actual": "1"});
    let rule = json!({"verdict": "unsound", "proof": false, "property": "F2",
        "counterexample": cex, "instances": 1, "cases": 1, "random_cases": 0,
        "reason": null, "name": "r", "file": "f", "summary": "unsound F2",
        "random_requested": 0, "random_note": null, "replayed": false,
        "backward_checked": true});
    let good = json!({"schema": "spmd-check/1", "command": "check", "rules": [rule]});
    assert_eq!(v.errors(&good), None);
    // A bare list, as `check --json` printed before.
    assert!(v.errors(&json!([rule])).is_some());
    // No schema, another schema, an unknown command.
    let mut bad = good.clone();
    bad.as_object_mut().unwrap().remove("schema");
    assert!(v.errors(&bad).is_some());
    let mut bad = good.clone();
    bad["schema"] = json!("spmd-check/0");
    assert!(v.errors(&bad).is_some());
    let mut bad = good.clone();
    bad["command"] = json!("nonsense");
    assert!(v.errors(&bad).is_some());
    // A mesh as text, as the counterexamples printed before.
    let mut bad = good.clone();
    bad["rules"][0]["counterexample"]["mesh"] = json!("{x: 2}");
    assert!(v.errors(&bad).is_some());
    // A key the command's document does not have.
    let mut bad = good.clone();
    bad["extra"] = json!(1);
    assert!(v.errors(&bad).is_some());
    // An unsound verdict without its counterexample.
    let mut bad = good.clone();
    bad["rules"][0]["counterexample"] = Value::Null;
    assert!(v.errors(&bad).is_some());
    // A part's key with the scope as Rust Debug text.
    let mut bad = good.clone();
    bad["partition"] = json!({"k": 1, "n": 1, "key": {"scope": "Scope { meshes: [] }"},
        "sections": {"rules": {"total": 1, "entries": [[0, rule]]}}});
    assert!(v.errors(&bad).is_some());
}

#[test]
fn conform_matches_the_schema() {
    let v = Validator::new();
    let d = fresh("conform");
    let args = [
        "conform",
        "--dialect",
        "nabla",
        "--scope",
        "small",
        "--json",
    ];
    let (code, single) = json_in(&d, &args);
    assert_eq!(code, 0);
    v.assert_valid("conform --json", &single);
    let mut a = args.to_vec();
    a.extend(["--partition", "1/2"]);
    let (_, part) = json_in(&d, &a);
    v.assert_valid("conform --json --partition 1/2", &part);
}

#[test]
fn derive_transposes_and_run_match_the_schema() {
    let v = Validator::new();
    let d = fresh("derive");
    for args in [
        &["derive", "mul", "--scope", "small", "--json"][..],
        &[
            "derive", "--expr", "x * y", "--global", "--scope", "small", "--json",
        ],
        &[
            "derive",
            "add",
            "--dialect",
            "jax",
            "--scope",
            "small",
            "--json",
        ],
        &[
            "derive",
            "relu",
            "--partial",
            "max",
            "--scope",
            "small",
            "--json",
        ],
        &[
            "transposes",
            "all_gather(dim=0)",
            "--from",
            "V",
            "--to",
            "R",
            "--scope",
            "small",
            "--json",
        ],
    ] {
        let (code, doc) = json_in(&d, args);
        assert_eq!(code, 0, "{args:?}");
        v.assert_valid(&args.join(" "), &doc);
        assert_eq!(doc["command"], args[0]);
    }
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/run_gather.json");
    let (_, doc) = json_in(&d, &["run", job.to_str().unwrap(), "--check", "--json"]);
    v.assert_valid("run --check --json", &doc);
    assert_eq!(doc["mesh"], json!({"x": 4}));
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/run_vmap_program.json");
    let (code, doc) = json_in(&d, &["run", job.to_str().unwrap(), "--check", "--json"]);
    assert_eq!(code, 0);
    v.assert_valid("run run_vmap_program.json --check --json", &doc);
}

#[test]
fn programs_and_patterns_match_the_schema() {
    let v = Validator::new();
    let d = fresh("programs");
    let base = ["programs", "--dialect", "jax", "--scope", "small", "--json"];
    for extra in [
        &["--depth", "1"][..],
        &["--depth", "1", "--partition", "1/2"],
        &["--depth", "1", "--dry-run"],
        &["--random", "5"],
        &["--depth", "1", "--vmap"],
    ] {
        let mut a = base.to_vec();
        a.extend(extra);
        let (code, doc) = json_in(&d, &a);
        assert_eq!(code, 0, "{a:?}");
        v.assert_valid(&a.join(" "), &doc);
    }
    let (_, doc) = json_in(
        &d,
        &["patterns", "--dialect", "jax", "--scope", "small", "--json"],
    );
    v.assert_valid("patterns --json", &doc);
}

#[test]
fn fidelity_matches_the_schema() {
    let v = Validator::new();
    let d = fresh("fidelity");
    let fx = d.join("fixtures");
    std::fs::create_dir_all(&fx).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dtensor_collectives.json");
    std::fs::copy(src, fx.join("dtensor_collectives.json")).unwrap();
    let (_, doc) = json_in(&d, &["fidelity", "--dir", "fixtures", "--json"]);
    v.assert_valid("fidelity --json", &doc);
}

#[test]
fn registry_matches_the_schema() {
    let v = Validator::new();
    let d = fresh("registry");
    let (_, doc) = json_in(
        &d,
        &[
            "registry",
            "dtensor",
            "--op",
            "aten.threshold.default",
            "--show-repro",
            "--json",
        ],
    );
    v.assert_valid("registry --json --show-repro", &doc);
    assert!(doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["repro"]["script"].is_string()));
}

/// Uneven shards (SPEC.md §23.10–§23.14): `check` of the uneven rules
/// (sound, unsound and vacuous entries), `run` of a job with pieces of
/// different lengths, `derive --uneven`.
#[test]
fn uneven_outputs_match_the_schema() {
    let v = Validator::new();
    let d = fresh("uneven");
    std::fs::write(
        d.join("uneven.toml"),
        include_str!("../examples/uneven.toml"),
    )
    .unwrap();
    let (code, doc) = json_in(&d, &["check", "uneven.toml", "--json"]);
    assert_eq!(code, 1);
    v.assert_valid("check uneven.toml --json", &doc);
    let verdicts: Vec<&str> = doc["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["verdict"].as_str().unwrap())
        .collect();
    for w in ["sound", "unsound", "vacuous"] {
        assert!(verdicts.contains(&w), "{w}");
    }
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/run_uneven.json");
    let (code, doc) = json_in(&d, &["run", job.to_str().unwrap(), "--check", "--json"]);
    assert_eq!(code, 0);
    v.assert_valid("run run_uneven.json --check --json", &doc);
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/batching.toml");
    let (code, doc) = json_in(&d, &["check", ex.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    v.assert_valid("check batching.toml --json", &doc);
    for (f, want) in [
        ("run_ragged.json", 1),
        ("run_ragged_moe.json", 0),
        ("run_nested.json", 0),
        ("run_vmap.json", 1),
    ] {
        let job = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(f);
        let (code, doc) = json_in(&d, &["run", job.to_str().unwrap(), "--check", "--json"]);
        assert_eq!(code, want, "{f}");
        v.assert_valid(&format!("run {f} --check --json"), &doc);
    }
    let (code, doc) = json_in(&d, &["derive", "matmul", "--uneven", "chunk", "--json"]);
    assert_eq!(code, 0);
    v.assert_valid("derive matmul --uneven chunk --json", &doc);
    let (code, doc) = json_in(
        &d,
        &[
            "programs",
            "--dialect",
            "dtensor",
            "--uneven",
            "divmod",
            "--json",
        ],
    );
    assert_eq!(code, 1);
    v.assert_valid("programs --dialect dtensor --uneven divmod --json", &doc);
}
