//! `spmd-check run` end to end (SPEC.md §14): what is not one job and one
//! expectation. The collectives run by hand (JAX and seed 003, on 2 and 4
//! ranks, forward and transpose), the recorded JAX partial ppermutes and
//! untiled all_to_alls, bad values and `--check`'s JSON verdicts are data:
//! tests/suite/run/, run by tests/suite.rs. Here: denotations, a 2-D mesh's
//! axis order (JSON and TOML), exact decimals, a job that is not JSON,
//! `--check`'s text form, the README's example, and the library API.

mod common;
use common::run;
use serde_json::{json, Value};
use spmd_check::job::{parse_job, parse_scalar, run_job, CheckResult};
use spmd_check::semantics::Q;

/// Write a job to a file of its own and return its path.
fn job_file(name: &str, text: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-check-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// Run a job with `--json` (plus extra flags): exit code, parsed output, stderr.
fn run_job_json(name: &str, job: &Value, extra: &[&str]) -> (i32, Value, String) {
    let f = job_file(name, &job.to_string());
    let mut args = vec!["run", f.as_str(), "--json"];
    args.extend(extra);
    let (code, out, err) = run(&args);
    let v = serde_json::from_str(&out).unwrap_or(Value::Null);
    (code, v, err)
}

/// What values denote: a Partial output is its sum, a Varying one its
/// pieces, and an R→P reinterpret n times the value.
#[test]
fn denotations_are_reported() {
    let base = |fw: &str, ty: &str, x: Value, n: usize| json!({"mesh": {"x": n}, "forward": fw, "inputs": [{"type": ty, "per_rank": x}]});
    let (c, v, e) = run_job_json(
        "den1.json",
        &base("reinterpret(V,P)", "V", json!([[1], [2]]), 2),
        &[],
    );
    assert_eq!(c, 0, "{e}");
    assert_eq!(v["output"]["denotes"], json!([3]));
    assert_eq!(v["inputs"][0]["denotes"], json!([[1], [2]]));
    let (_, v, _) = run_job_json(
        "den2.json",
        &base("reinterpret(R,P)", "R", json!([[5], [5], [5], [5]]), 4),
        &[],
    );
    assert_eq!(v["output"]["denotes"], json!([20]));
    // Without a cotangent there is no backward key at all.
    assert!(v.get("backward").is_none());
}

/// A 2-D mesh keeps its axes in the order written: ranks are row-major over
/// z then a, so the value below is Invariant along z and Varying along a.
#[test]
fn mesh_axes_keep_their_written_order() {
    let text = r#"{"dialect": "jax", "mesh": {"z": 2, "a": 2},
        "forward": "all_gather_reduced(dim=0)",
        "inputs": [{"type": {"z": "Invariant", "a": "Varying"}, "per_rank": [[1], [2], [1], [2]]}]}"#;
    let f = job_file("order.json", text);
    let (code, out, err) = run(&["run", &f, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // A mesh is an object whose keys keep the axis order.
    assert_eq!(v["mesh"].to_string(), r#"{"z":2,"a":2}"#);
    assert_eq!(v["output"]["type"], "{z: I, a: R}");
    assert_eq!(
        v["output"]["per_rank"],
        json!([[1, 2], [1, 2], [1, 2], [1, 2]])
    );
    // The same in TOML.
    let toml = r#"dialect = "jax"
forward = "all_gather_reduced(dim=0)"
[mesh]
z = 2
a = 2
[[inputs]]
type = { z = "Invariant", a = "Varying" }
per_rank = [[1], [2], [1], [2]]
"#;
    let f = job_file("order.toml", toml);
    let (code, out, err) = run(&["run", &f, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // A mesh is an object whose keys keep the axis order.
    assert_eq!(v["mesh"].to_string(), r#"{"z":2,"a":2}"#);
    assert_eq!(v["output"]["type"], "{z: I, a: R}");
}

/// Decimals are read from their text, never through a float.
#[test]
fn decimals_are_exact() {
    assert_eq!(parse_scalar("0.5").unwrap(), Q::frac(1, 2));
    assert_eq!(parse_scalar("1e-3").unwrap(), Q::frac(1, 1000));
    let job = r#"{"dialect": "jax", "mesh": {"x": 2}, "forward": "psum",
        "inputs": [{"type": "Varying", "per_rank": [[0.5], [1e-3]]}]}"#;
    let f = job_file("dec.json", job);
    let (code, out, err) = run(&["run", &f, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["output"]["per_rank"], json!([["501/1000"], ["501/1000"]]));
    // 0.1 + 0.2 is exactly 3/10; more digits than a double holds survive.
    let job = r#"{"mesh": {"x": 2}, "forward": "all_reduce(R)",
        "inputs": [{"type": "P", "per_rank": [[0.1], [0.20000000000000000000001]]}]}"#;
    let f = job_file("dec2.json", job);
    let (code, out, err) = run(&["run", &f, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["output"]["per_rank"][0],
        json!(["30000000000000000000001/100000000000000000000000"])
    );
    // TOML: the same job, floats read from their text, strings as p/q.
    let toml = r#"dialect = "jax"
forward = "psum"
mesh = { x = 2 }
[[inputs]]
type = "Varying"
per_rank = [[0.5], ["1/3"]]
"#;
    let f = job_file("dec.toml", toml);
    let (code, out, err) = run(&["run", &f, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["output"]["per_rank"], json!([["5/6"], ["5/6"]]));
}

/// A job that is not valid JSON is reported with its place (the bad
/// values themselves are cases of tests/suite/run/, `bad_*`).
#[test]
fn bad_json_is_reported() {
    let f = job_file("bad_json.json", r#"{"mesh": {"x": 2}, "forward": "psum""#);
    let (code, _, err) = run(&["run", &f]);
    assert_eq!(code, 2, "{err}");
}

/// `--check`'s text form names the property it refutes (its JSON form,
/// pass and violation, is in tests/suite/run/, `check_*`).
#[test]
fn check_text_names_the_property() {
    let job = json!({"dialect": "jax", "mesh": {"x": 2}, "forward": "pmean", "backward": "pvary",
           "inputs": [{"type": "Varying", "per_rank": [[1], [2]]}]});
    let f = job_file("check_pmean_text.json", &job.to_string());
    let (code, out, _) = run(&["run", &f, "--check"]);
    assert_eq!(code, 1);
    assert!(out.contains("B3 gradient"), "{out}");
}

/// The README's example runs as written from the repository root.
#[test]
fn the_example_job_runs() {
    let root = env!("CARGO_MANIFEST_DIR");
    let (code, out, err) = run(&[
        "run",
        &format!("{root}/examples/run_gather.json"),
        "--check",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("denotes [1, 2, 3, 4]"), "{out}");
    assert!(out.contains("check: pass"), "{out}");
    // The README shows the file as it is.
    let readme = include_str!("../README.md");
    let example = include_str!("../examples/run_gather.json");
    assert!(readme.contains(example.trim()), "README shows another job");
}

/// Library level: a local op with its output inferred, and a two-step
/// program whose backward runs through both steps.
#[test]
fn local_ops_and_programs_through_the_library() {
    let text = r#"{"mesh": {"x": 2}, "op": "mul",
        "inputs": [{"type": "V", "per_rank": [[1], [2]]}, {"type": "V", "per_rank": [[3], [4]]}],
        "cotangent": [[1], [1]]}"#;
    let job = parse_job("mul.json", text).unwrap();
    let r = run_job(&job, "mul.json", text, true).unwrap();
    assert_eq!(r.output.value.tensors[1].data, vec![Q::int(8)]);
    let b = r.backward.as_ref().unwrap();
    // d(x*y)/dx = y, d(x*y)/dy = x, rank by rank.
    assert_eq!(b[0].value.tensors[1].data, vec![Q::int(4)]);
    assert_eq!(b[1].value.tensors[1].data, vec![Q::int(2)]);
    assert!(matches!(r.check, Some(CheckResult::Pass { .. })));

    // p = x * w (V), then y = all_gather(R) of p, backward reduce_scatter.
    // x = (1, 2), w = (3, 4): p = (3, 8), y = [3, 8] everywhere. The P
    // cotangent (1, 0) + (0, 1) sums to [1, 1]: dp = (1, 1), so
    // dx = dp * w = (3, 4) and dw = dp * x = (1, 2).
    let text = r#"{"mesh": {"x": 2}, "names": ["x", "w"],
        "steps": [{"name": "p", "expr": "x * w", "output": "V"},
                  {"name": "y", "forward": "all_gather(R, dim=0)", "input": "p",
                   "backward": "reduce_scatter(dim=0)", "output": "R"}],
        "inputs": [{"type": "V", "per_rank": [[1], [2]]}, {"type": "V", "per_rank": [[3], [4]]}],
        "cotangent": [[1, 0], [0, 1]]}"#;
    let job = parse_job("prog.json", text).unwrap();
    let r = run_job(&job, "prog.json", text, true).unwrap();
    let y: Vec<Vec<Q>> = r
        .output
        .value
        .tensors
        .iter()
        .map(|t| t.data.clone())
        .collect();
    assert_eq!(y, vec![vec![Q::int(3), Q::int(8)]; 2]);
    let b = r.backward.as_ref().unwrap();
    let dx: Vec<Q> = b[0]
        .value
        .tensors
        .iter()
        .map(|t| t.data[0].clone())
        .collect();
    let dw: Vec<Q> = b[1]
        .value
        .tensors
        .iter()
        .map(|t| t.data[0].clone())
        .collect();
    assert_eq!(dx, vec![Q::int(3), Q::int(4)]);
    assert_eq!(dw, vec![Q::int(1), Q::int(2)]);
    // Gathering one element from each of 2 ranks sends 1; so does the scatter.
    assert_eq!(r.traffic_forward, Q::int(1));
    assert_eq!(r.traffic_backward, Some(Q::int(1)));
    assert!(matches!(r.check, Some(CheckResult::Pass { .. })));
    assert_eq!(r.exit_code(), 0);
}
