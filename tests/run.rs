//! `spmd-check run` end to end (SPEC.md §14): every JAX and seed-003
//! collective run by hand on 2 and 4 ranks, forward and transpose, with the
//! expected numbers worked out here (not taken from the tool); bad input;
//! exact decimals; `--check` on a sound pair and on a wrong backward.

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

/// One collective on one mesh size, with what it must give.
struct Case {
    dialect: &'static str,
    forward: &'static str,
    backward: Option<&'static str>,
    input: &'static str,
    /// `None`: the output type is inferred from the seed tables.
    output: Option<&'static str>,
    /// The type the run must report for the output (canonical letters).
    out_type: &'static str,
    x: Value,
    y: Value,
    g: Value,
    /// The backward's result; `Null` when no backward is declared.
    dx: Value,
    traffic: (Value, Value),
}

fn check_case(c: &Case, n: usize) {
    let mut job = json!({
        "dialect": c.dialect,
        "mesh": {"x": n},
        "forward": c.forward,
        "inputs": [{"type": c.input, "per_rank": c.x}],
        "cotangent": c.g,
    });
    if let Some(b) = c.backward {
        job["backward"] = json!(b);
    }
    if let Some(o) = c.output {
        job["output"] = json!(o);
    }
    let name = format!(
        "{}_{n}.json",
        c.forward
            .chars()
            .filter(|ch| ch.is_alphanumeric())
            .collect::<String>()
    );
    let (code, v, err) = run_job_json(&name, &job, &[]);
    let what = format!("{} on {n} ranks", c.forward);
    assert_eq!(code, 0, "{what}: {err}");
    assert_eq!(v["output"]["type"], c.out_type, "{what}");
    assert_eq!(v["output"]["per_rank"], c.y, "{what}: forward");
    let dx = match &v["backward"] {
        Value::Array(bs) => Value::Array(bs.iter().map(|b| b["per_rank"].clone()).collect()),
        other => other.clone(),
    };
    assert_eq!(dx, c.dx, "{what}: backward");
    assert_eq!(
        v["traffic"]["forward"], c.traffic.0,
        "{what}: forward traffic"
    );
    assert_eq!(
        v["traffic"]["backward"], c.traffic.1,
        "{what}: backward traffic"
    );
    if c.backward.is_none() && c.dx.is_null() {
        let notes = v["notes"].to_string();
        assert!(notes.contains("no backward is declared"), "{what}: {notes}");
    }
}

/// Every JAX collective of seed 000, on 2 and 4 ranks.
#[test]
fn jax_collectives_by_hand() {
    let cases = [
        // psum: every rank gets the sum; its transpose pvary keeps each
        // rank's (equal) cotangent. Ring all-reduce sends 2(n-1)/n S.
        (
            Case {
                dialect: "jax",
                forward: "psum",
                backward: Some("pvary"),
                input: "Varying",
                output: None,
                out_type: "I",
                x: json!([[1], [2]]),
                y: json!([[3], [3]]),
                g: json!([[5], [5]]),
                dx: json!([[[5], [5]]]),
                traffic: (json!(1), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "psum",
                backward: Some("pvary"),
                input: "Varying",
                output: None,
                out_type: "I",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[10], [10], [10], [10]]),
                g: json!([[5], [5], [5], [5]]),
                dx: json!([[[5], [5], [5], [5]]]),
                traffic: (json!("3/2"), json!(0)),
            },
            4,
        ),
        // pmean: the mean on every rank; the seed lists no transpose.
        (
            Case {
                dialect: "jax",
                forward: "pmean",
                backward: None,
                input: "Varying",
                output: None,
                out_type: "I",
                x: json!([[1], [2]]),
                y: json!([["3/2"], ["3/2"]]),
                g: json!([[5], [5]]),
                // No backward written: JAX's own transpose of pmean runs
                // (divide by n, then pvary; SPEC.md §15.5).
                dx: json!([[["5/2"], ["5/2"]]]),
                traffic: (json!(1), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "pmean",
                backward: None,
                input: "Varying",
                output: None,
                out_type: "I",
                x: json!([[1], [2], [3], [4]]),
                y: json!([["5/2"], ["5/2"], ["5/2"], ["5/2"]]),
                g: json!([[5], [5], [5], [5]]),
                dx: json!([[["5/4"], ["5/4"], ["5/4"], ["5/4"]]]),
                traffic: (json!("3/2"), json!(0)),
            },
            4,
        ),
        // all_gather_reduced: the pieces concatenated on every rank; its
        // transpose sums the Unreduced cotangents and keeps chunk k.
        (
            Case {
                dialect: "jax",
                forward: "all_gather_reduced(dim=0)",
                backward: Some("unreduced_psum_scatter(dim=0)"),
                input: "Varying",
                output: None,
                out_type: "R",
                x: json!([[1], [2]]),
                y: json!([[1, 2], [1, 2]]),
                g: json!([[10, 20], [30, 40]]),
                dx: json!([[[40], [60]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "all_gather_reduced(dim=0)",
                backward: Some("unreduced_psum_scatter(dim=0)"),
                input: "Varying",
                output: None,
                out_type: "R",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]),
                // Column sums 1+5+9+13 = 28, then 32, 36, 40.
                g: json!([
                    [1, 2, 3, 4],
                    [5, 6, 7, 8],
                    [9, 10, 11, 12],
                    [13, 14, 15, 16]
                ]),
                dx: json!([[[28], [32], [36], [40]]]),
                traffic: (json!(3), json!(3)),
            },
            4,
        ),
        // all_gather (Varying to Varying): same data; its transpose is
        // psum_scatter of the Varying cotangent.
        (
            Case {
                dialect: "jax",
                forward: "all_gather(dim=0)",
                backward: Some("psum_scatter(dim=0)"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([[1], [2]]),
                y: json!([[1, 2], [1, 2]]),
                g: json!([[10, 20], [30, 40]]),
                dx: json!([[[40], [60]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "all_gather(dim=0)",
                backward: Some("psum_scatter(dim=0)"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]),
                g: json!([
                    [1, 2, 3, 4],
                    [5, 6, 7, 8],
                    [9, 10, 11, 12],
                    [13, 14, 15, 16]
                ]),
                dx: json!([[[28], [32], [36], [40]]]),
                traffic: (json!(3), json!(3)),
            },
            4,
        ),
        // psum_scatter: sum, keep chunk k; transpose all_gather.
        (
            Case {
                dialect: "jax",
                forward: "psum_scatter(dim=0)",
                backward: Some("all_gather(dim=0)"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([[1, 2], [3, 4]]),
                y: json!([[4], [6]]),
                g: json!([[5], [7]]),
                dx: json!([[[5, 7], [5, 7]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "psum_scatter(dim=0)",
                backward: Some("all_gather(dim=0)"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([
                    [1, 2, 3, 4],
                    [5, 6, 7, 8],
                    [9, 10, 11, 12],
                    [13, 14, 15, 16]
                ]),
                y: json!([[28], [32], [36], [40]]),
                g: json!([[5], [6], [7], [8]]),
                dx: json!([[[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8]]]),
                traffic: (json!(3), json!(3)),
            },
            4,
        ),
        // all_to_all: rank k gets chunk k of every member; the same call
        // is its own transpose here (split = concat).
        (
            Case {
                dialect: "jax",
                forward: "all_to_all(split=0, concat=0)",
                backward: Some("all_to_all(split=0, concat=0)"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([[1, 2], [3, 4]]),
                y: json!([[1, 3], [2, 4]]),
                g: json!([[10, 20], [30, 40]]),
                dx: json!([[[10, 30], [20, 40]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "all_to_all(split=0, concat=0)",
                backward: Some("all_to_all(split=0, concat=0)"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([
                    [1, 2, 3, 4],
                    [5, 6, 7, 8],
                    [9, 10, 11, 12],
                    [13, 14, 15, 16]
                ]),
                y: json!([
                    [1, 5, 9, 13],
                    [2, 6, 10, 14],
                    [3, 7, 11, 15],
                    [4, 8, 12, 16]
                ]),
                g: json!([
                    [10, 20, 30, 40],
                    [50, 60, 70, 80],
                    [90, 100, 110, 120],
                    [130, 140, 150, 160]
                ]),
                dx: json!([[
                    [10, 50, 90, 130],
                    [20, 60, 100, 140],
                    [30, 70, 110, 150],
                    [40, 80, 120, 160]
                ]]),
                traffic: (json!(3), json!(3)),
            },
            4,
        ),
        // ppermute: member perm[k] receives member k's tensor; the transpose
        // is the inverse permutation.
        (
            Case {
                dialect: "jax",
                forward: "ppermute(perm=[1,0])",
                backward: Some("ppermute(perm=[1,0])"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([[1], [2]]),
                y: json!([[2], [1]]),
                g: json!([[10], [20]]),
                dx: json!([[[20], [10]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "ppermute(perm=[1,2,3,0])",
                backward: Some("ppermute(perm=[3,0,1,2])"),
                input: "Varying",
                output: None,
                out_type: "V",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[4], [1], [2], [3]]),
                g: json!([[10], [20], [30], [40]]),
                dx: json!([[[20], [30], [40], [10]]]),
                traffic: (json!(1), json!(1)),
            },
            4,
        ),
        // pvary: no data moves; its transpose psum_invariant sums.
        (
            Case {
                dialect: "jax",
                forward: "pvary",
                backward: Some("psum_invariant"),
                input: "Invariant",
                output: None,
                out_type: "V",
                x: json!([[5], [5]]),
                y: json!([[5], [5]]),
                g: json!([[1], [2]]),
                dx: json!([[[3], [3]]]),
                traffic: (json!(0), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: "jax",
                forward: "pvary",
                backward: Some("psum_invariant"),
                input: "Invariant",
                output: None,
                out_type: "V",
                x: json!([[5], [5], [5], [5]]),
                y: json!([[5], [5], [5], [5]]),
                g: json!([[1], [2], [3], [4]]),
                dx: json!([[[10], [10], [10], [10]]]),
                traffic: (json!(0), json!("3/2")),
            },
            4,
        ),
    ];
    for (c, n) in &cases {
        check_case(c, *n);
    }
}

/// Seed 003's collectives and casts with their listed backwards, on 2 and 4
/// ranks.
#[test]
fn seed_003_collectives_by_hand() {
    let st = "spmd_types";
    let cases = [
        // all_gather(R): concatenate; backward reduce_scatter of the P cotangent.
        (
            Case {
                dialect: st,
                forward: "all_gather(R, dim=0)",
                backward: Some("reduce_scatter(dim=0)"),
                input: "V",
                output: None,
                out_type: "R",
                x: json!([[1], [2]]),
                y: json!([[1, 2], [1, 2]]),
                g: json!([[10, 20], [30, 40]]),
                dx: json!([[[40], [60]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "all_gather(R, dim=0)",
                backward: Some("reduce_scatter(dim=0)"),
                input: "V",
                output: None,
                out_type: "R",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]),
                g: json!([
                    [1, 2, 3, 4],
                    [5, 6, 7, 8],
                    [9, 10, 11, 12],
                    [13, 14, 15, 16]
                ]),
                dx: json!([[[28], [32], [36], [40]]]),
                traffic: (json!(3), json!(3)),
            },
            4,
        ),
        // all_gather(I): same data; backward convert(I,V) keeps chunk k of
        // the (equal) I cotangent and sends nothing.
        (
            Case {
                dialect: st,
                forward: "all_gather(I, dim=0)",
                backward: Some("convert(I,V, dim=0)"),
                input: "V",
                output: None,
                out_type: "I",
                x: json!([[1], [2]]),
                y: json!([[1, 2], [1, 2]]),
                g: json!([[10, 20], [10, 20]]),
                dx: json!([[[10], [20]]]),
                traffic: (json!(1), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "all_gather(I, dim=0)",
                backward: Some("convert(I,V, dim=0)"),
                input: "V",
                output: None,
                out_type: "I",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]),
                g: json!([
                    [10, 20, 30, 40],
                    [10, 20, 30, 40],
                    [10, 20, 30, 40],
                    [10, 20, 30, 40]
                ]),
                dx: json!([[[10], [20], [30], [40]]]),
                traffic: (json!(3), json!(0)),
            },
            4,
        ),
        // reduce_scatter: sum the P pieces, keep chunk k; backward all_gather(R).
        (
            Case {
                dialect: st,
                forward: "reduce_scatter(dim=0)",
                backward: Some("all_gather(R, dim=0)"),
                input: "P",
                output: None,
                out_type: "V",
                x: json!([[1, 2], [3, 4]]),
                y: json!([[4], [6]]),
                g: json!([[5], [7]]),
                dx: json!([[[5, 7], [5, 7]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "reduce_scatter(dim=0)",
                backward: Some("all_gather(R, dim=0)"),
                input: "P",
                output: None,
                out_type: "V",
                x: json!([
                    [1, 2, 3, 4],
                    [5, 6, 7, 8],
                    [9, 10, 11, 12],
                    [13, 14, 15, 16]
                ]),
                y: json!([[28], [32], [36], [40]]),
                g: json!([[5], [6], [7], [8]]),
                dx: json!([[[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8]]]),
                traffic: (json!(3), json!(3)),
            },
            4,
        ),
        // all_reduce(R): the sum everywhere; its own transpose.
        (
            Case {
                dialect: st,
                forward: "all_reduce(R)",
                backward: Some("all_reduce(R)"),
                input: "P",
                output: None,
                out_type: "R",
                x: json!([[1], [2]]),
                y: json!([[3], [3]]),
                g: json!([[4], [6]]),
                dx: json!([[[10], [10]]]),
                traffic: (json!(1), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "all_reduce(R)",
                backward: Some("all_reduce(R)"),
                input: "P",
                output: None,
                out_type: "R",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[10], [10], [10], [10]]),
                g: json!([[4], [6], [8], [10]]),
                dx: json!([[[28], [28], [28], [28]]]),
                traffic: (json!("3/2"), json!("3/2")),
            },
            4,
        ),
        // all_reduce(I): the sum; backward reinterpret(I,R) sends nothing.
        (
            Case {
                dialect: st,
                forward: "all_reduce(I)",
                backward: Some("reinterpret(I,R)"),
                input: "P",
                output: None,
                out_type: "I",
                x: json!([[1], [2]]),
                y: json!([[3], [3]]),
                g: json!([[5], [5]]),
                dx: json!([[[5], [5]]]),
                traffic: (json!(1), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "all_reduce(I)",
                backward: Some("reinterpret(I,R)"),
                input: "P",
                output: None,
                out_type: "I",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[10], [10], [10], [10]]),
                g: json!([[5], [5], [5], [5]]),
                dx: json!([[[5], [5], [5], [5]]]),
                traffic: (json!("3/2"), json!(0)),
            },
            4,
        ),
        // convert(R,V): keep chunk k; backward convert(V,P) places the
        // cotangent at chunk k of zeros.
        (
            Case {
                dialect: st,
                forward: "convert(R,V, dim=0)",
                backward: Some("convert(V,P, dim=0)"),
                input: "R",
                output: None,
                out_type: "V",
                x: json!([[1, 2], [1, 2]]),
                y: json!([[1], [2]]),
                g: json!([[10], [20]]),
                dx: json!([[[10, 0], [0, 20]]]),
                traffic: (json!(0), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "convert(R,V, dim=0)",
                backward: Some("convert(V,P, dim=0)"),
                input: "R",
                output: None,
                out_type: "V",
                x: json!([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]),
                y: json!([[1], [2], [3], [4]]),
                g: json!([[10], [20], [30], [40]]),
                dx: json!([[[10, 0, 0, 0], [0, 20, 0, 0], [0, 0, 30, 0], [0, 0, 0, 40]]]),
                traffic: (json!(0), json!(0)),
            },
            4,
        ),
        // convert(V,P): place at chunk k of zeros; backward convert(R,V).
        (
            Case {
                dialect: st,
                forward: "convert(V,P, dim=0)",
                backward: Some("convert(R,V, dim=0)"),
                input: "V",
                output: None,
                out_type: "P",
                x: json!([[1], [2]]),
                y: json!([[1, 0], [0, 2]]),
                g: json!([[10, 20], [10, 20]]),
                dx: json!([[[10], [20]]]),
                traffic: (json!(0), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "convert(V,P, dim=0)",
                backward: Some("convert(R,V, dim=0)"),
                input: "V",
                output: None,
                out_type: "P",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[1, 0, 0, 0], [0, 2, 0, 0], [0, 0, 3, 0], [0, 0, 0, 4]]),
                g: json!([
                    [10, 20, 30, 40],
                    [10, 20, 30, 40],
                    [10, 20, 30, 40],
                    [10, 20, 30, 40]
                ]),
                dx: json!([[[10], [20], [30], [40]]]),
                traffic: (json!(0), json!(0)),
            },
            4,
        ),
        // convert(I,P): rank 0 keeps the value, the others hold zeros;
        // backward reinterpret(R,I).
        (
            Case {
                dialect: st,
                forward: "convert(I,P)",
                backward: Some("reinterpret(R,I)"),
                input: "I",
                output: None,
                out_type: "P",
                x: json!([[5], [5]]),
                y: json!([[5], [0]]),
                g: json!([[7], [7]]),
                dx: json!([[[7], [7]]]),
                traffic: (json!(0), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "convert(I,P)",
                backward: Some("reinterpret(R,I)"),
                input: "I",
                output: None,
                out_type: "P",
                x: json!([[5], [5], [5], [5]]),
                y: json!([[5], [0], [0], [0]]),
                g: json!([[7], [7], [7], [7]]),
                dx: json!([[[7], [7], [7], [7]]]),
                traffic: (json!(0), json!(0)),
            },
            4,
        ),
        // reinterpret(R,P): local data kept (so it denotes n times more);
        // its own transpose.
        (
            Case {
                dialect: st,
                forward: "reinterpret(R,P)",
                backward: Some("reinterpret(R,P)"),
                input: "R",
                output: None,
                out_type: "P",
                x: json!([[5], [5]]),
                y: json!([[5], [5]]),
                g: json!([[7], [7]]),
                dx: json!([[[7], [7]]]),
                traffic: (json!(0), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "reinterpret(R,P)",
                backward: Some("reinterpret(R,P)"),
                input: "R",
                output: None,
                out_type: "P",
                x: json!([[5], [5], [5], [5]]),
                y: json!([[5], [5], [5], [5]]),
                g: json!([[7], [7], [7], [7]]),
                dx: json!([[[7], [7], [7], [7]]]),
                traffic: (json!(0), json!(0)),
            },
            4,
        ),
        // reinterpret(V,P): local data kept, now a pending sum; backward
        // reinterpret(R,V).
        (
            Case {
                dialect: st,
                forward: "reinterpret(V,P)",
                backward: Some("reinterpret(R,V)"),
                input: "V",
                output: None,
                out_type: "P",
                x: json!([[1], [2]]),
                y: json!([[1], [2]]),
                g: json!([[7], [7]]),
                dx: json!([[[7], [7]]]),
                traffic: (json!(0), json!(0)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "reinterpret(V,P)",
                backward: Some("reinterpret(R,V)"),
                input: "V",
                output: None,
                out_type: "P",
                x: json!([[1], [2], [3], [4]]),
                y: json!([[1], [2], [3], [4]]),
                g: json!([[7], [7], [7], [7]]),
                dx: json!([[[7], [7], [7], [7]]]),
                traffic: (json!(0), json!(0)),
            },
            4,
        ),
        // reinterpret(I,R): no data moves; backward all_reduce(I) sums the
        // P cotangent.
        (
            Case {
                dialect: st,
                forward: "reinterpret(I,R)",
                backward: Some("all_reduce(I)"),
                input: "I",
                output: None,
                out_type: "R",
                x: json!([[5], [5]]),
                y: json!([[5], [5]]),
                g: json!([[1], [2]]),
                dx: json!([[[3], [3]]]),
                traffic: (json!(0), json!(1)),
            },
            2,
        ),
        (
            Case {
                dialect: st,
                forward: "reinterpret(I,R)",
                backward: Some("all_reduce(I)"),
                input: "I",
                output: None,
                out_type: "R",
                x: json!([[5], [5], [5], [5]]),
                y: json!([[5], [5], [5], [5]]),
                g: json!([[1], [2], [3], [4]]),
                dx: json!([[[10], [10], [10], [10]]]),
                traffic: (json!(0), json!("3/2")),
            },
            4,
        ),
    ];
    for (c, n) in &cases {
        check_case(c, *n);
    }
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
    assert_eq!(v["mesh"], "{z: 2, a: 2}");
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
    assert_eq!(v["mesh"], "{z: 2, a: 2}");
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

/// Bad values: exit 2 with one line naming the input and what is wrong.
#[test]
fn bad_values_are_reported_not_panicked_on() {
    let psum = |x: Value| {
        json!({"dialect": "jax", "mesh": {"x": 2}, "forward": "psum", "backward": "pvary",
               "inputs": [{"type": "Varying", "per_rank": x}]})
    };
    let mut cases: Vec<(&str, Value, &str)> = vec![
        ("ranks", psum(json!([[1], [2], [3]])), "3 ranks given"),
        (
            "ragged",
            psum(json!([[[1, 2], [3]], [[1, 2], [3, 4]]])),
            "ragged",
        ),
        ("shapes", psum(json!([[1], [2, 3]])), "rank 0 has shape [1]"),
        ("scalar", psum(json!(5)), "one entry per rank"),
        ("empty", psum(json!([[], []])), "empty array"),
        ("word", psum(json!([["one"], [2]])), "is not a number"),
        (
            "zero_den",
            psum(json!([["1/0"], [2]])),
            "`1/0` is not a number",
        ),
        (
            "huge",
            psum(json!([[format!("{}", "9".repeat(1001))], [2]])),
            "at most 1000",
        ),
        ("huge_exp", psum(json!([["1e999999"], [2]])), "exponent"),
    ];
    let mut inv = psum(json!([[1], [2]]));
    inv["forward"] = json!("pvary");
    inv["backward"] = json!("psum_invariant");
    inv["inputs"][0]["type"] = json!("Invariant");
    cases.push(("not_invariant", inv, "not well formed for I"));
    let mut cot_shape = psum(json!([[1], [2]]));
    cot_shape["cotangent"] = json!([[1, 2], [3, 4]]);
    cases.push(("cot_shape", cot_shape, "cotangent: shape [2]"));
    let mut cot_wf = psum(json!([[1], [2]]));
    cot_wf["cotangent"] = json!([[5], [6]]);
    cases.push(("cot_wf", cot_wf, "cotangent: not well formed for I"));
    let mut red = json!({"mesh": {"x": 2}, "forward": "reduce_scatter(dim=0)",
        "inputs": [{"type": "R", "per_rank": [[1, 2], [3, 4]]}], "output": "V"});
    cases.push((
        "reduced",
        red.clone(),
        "inputs[0].per_rank: not well formed",
    ));
    red["inputs"][0]["type"] = json!("P");
    red["inputs"][0]["per_rank"] = json!([[1, 2, 3], [4, 5, 6]]);
    cases.push(("indivisible", red, "not divisible"));
    let mut big_mesh = psum(json!([[1], [2]]));
    big_mesh["mesh"] = json!({"x": 9});
    cases.push(("big_mesh", big_mesh, "sizes are 1 to 8"));
    let redistribute = json!({"mesh": {"x": 2}, "forward": "redistribute(dim=0)",
        "inputs": [{"type": "V", "per_rank": [[1], [2]]}]});
    cases.push(("ambiguous", redistribute, "give `output`"));
    let mixed = json!({"mesh": {"x": 2}, "op": "mul",
        "inputs": [{"type": "V", "per_rank": [[1], [2]]}, {"type": "R", "per_rank": [[1], [1]]}]});
    cases.push(("local_output", mixed, "give `output`"));
    for (name, job, want) in cases {
        let (code, v, err) = run_job_json(&format!("bad_{name}.json"), &job, &[]);
        assert_eq!(code, 2, "{name}: {v} {err}");
        assert!(err.contains(want), "{name}: expected `{want}` in: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    // A job that is not valid JSON is reported with its place.
    let f = job_file("bad_json.json", r#"{"mesh": {"x": 2}, "forward": "psum""#);
    let (code, _, err) = run(&["run", &f]);
    assert_eq!(code, 2, "{err}");
}

/// `--check` runs the oracle on exactly this instance: psum with pvary is
/// sound; pmean with pvary is off by n, which B3 names.
#[test]
fn check_follows_the_oracle() {
    let job = |fw: &str| {
        json!({"dialect": "jax", "mesh": {"x": 2}, "forward": fw, "backward": "pvary",
               "inputs": [{"type": "Varying", "per_rank": [[1], [2]]}]})
    };
    let (code, v, err) = run_job_json("check_psum.json", &job("psum"), &["--check"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["check"]["outcome"], "pass");
    let (code, v, err) = run_job_json("check_pmean.json", &job("pmean"), &["--check"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["check"]["outcome"], "violation");
    assert_eq!(v["check"]["property"], "B3");
    assert!(v["check"]["counterexample"]
        .as_str()
        .unwrap()
        .starts_with("B3 on mesh {x: 2}"));
    // Gathering to R and slicing the Partial cotangent without summing it:
    // a cotangent that denotes zero gives a nonzero gradient (B2).
    let slice = json!({"mesh": {"x": 2}, "forward": "all_gather(R, dim=0)",
        "backward": "reinterpret(P,R) |> convert(R,V, dim=0)",
        "inputs": [{"type": "V", "per_rank": [[1], [2]]}]});
    let (code, v, err) = run_job_json("check_slice.json", &slice, &["--check"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["check"]["property"], "B2");
    let mut sound = slice.clone();
    sound["backward"] = json!("reduce_scatter(dim=0)");
    let (code, v, err) = run_job_json("check_rs.json", &sound, &["--check"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["check"]["outcome"], "pass");
    // The text form names the property too.
    let f = job_file("check_pmean_text.json", &job("pmean").to_string());
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

/// One JAX job on {x: 4} with no backward written (so the dialect's
/// transpose runs), checked by the oracle: its JSON report.
fn jax4(name: &str, forward: &str, x: Value, ct: Value) -> Value {
    let job = json!({"dialect": "jax", "mesh": {"x": 4}, "forward": forward,
        "inputs": [{"type": "Varying", "per_rank": x}], "cotangent": ct});
    let (code, v, err) = run_job_json(name, &job, &["--check"]);
    assert_eq!(code, 0, "{forward}: {err}");
    assert_eq!(v["output"]["type"], "V", "{forward}");
    assert_eq!(v["check"]["outcome"], "pass", "{forward}: {}", v["check"]);
    v
}

/// The gradient a run reports (its one input's backward, per rank).
fn grad(v: &Value) -> Value {
    v["backward"][0]["per_rank"].clone()
}

/// Partial permutations (issue 25), as real JAX 0.12.0.1 runs them inside
/// shard_map on {x: 4}: a rank no pair sends to gets zeros, a rank no pair
/// sends from loses its value, and the gradient is the ppermute with the
/// pairs reversed. The numbers were recorded from JAX itself by
/// peers/probe_jax_catalogue.py (peers/recorded/jax_catalogue_0.12.0.1.json,
/// section `ppermute`), not worked out from this tool.
#[test]
fn jax_partial_ppermute_as_recorded() {
    let x = json!([[1], [2], [3], [4]]);
    let ct = json!([[10], [20], [30], [40]]);
    let cases = [
        (
            "ppermute(perm=[(0, 1)])",
            json!([[0], [1], [0], [0]]),
            json!([[20], [0], [0], [0]]),
            "ppermute(perm=[(1, 0)])",
        ),
        (
            "ppermute(perm=[(0, 2), (3, 1)])",
            json!([[0], [4], [1], [0]]),
            json!([[30], [0], [0], [20]]),
            "ppermute(perm=[(2, 0), (1, 3)])",
        ),
        (
            "ppermute(perm=[(1, 0), (2, 3), (3, 2)])",
            json!([[2], [0], [4], [3]]),
            json!([[0], [10], [40], [30]]),
            "ppermute(perm=[(0, 1), (3, 2), (2, 3)])",
        ),
    ];
    for (i, (fw, y, dx, back)) in cases.into_iter().enumerate() {
        let v = jax4(&format!("pp_partial_{i}.json"), fw, x.clone(), ct.clone());
        assert_eq!(v["output"]["per_rank"], y, "{fw}: forward");
        assert_eq!(grad(&v), dx, "{fw}: gradient");
        let notes = v["notes"].to_string();
        assert!(notes.contains(back), "{fw}: {notes}");
    }
}

/// The negative twins of the partial ppermute: its own perm as the
/// backward, and the inverse of a full permutation that agrees with it on
/// rank 0 (so sends cotangent to ranks JAX gives zero), are both refuted,
/// at B3 (the gradient), on exactly this instance.
#[test]
fn wrong_transposes_of_a_partial_ppermute_fail_b3() {
    for (i, back) in [
        "ppermute(perm=[(0, 1)])",
        "ppermute(perm=[(1, 0), (0, 1), (2, 2), (3, 3)])",
    ]
    .into_iter()
    .enumerate()
    {
        let job = json!({"dialect": "jax", "mesh": {"x": 4},
            "forward": "ppermute(perm=[(0, 1)])", "backward": back,
            "inputs": [{"type": "Varying", "per_rank": [[1], [2], [3], [4]]}],
            "cotangent": [[10], [20], [30], [40]]});
        let (code, v, err) = run_job_json(&format!("pp_wrong_{i}.json"), &job, &["--check"]);
        assert_eq!(code, 1, "{back}: {err}");
        assert_eq!(v["check"]["outcome"], "violation", "{back}");
        assert_eq!(v["check"]["property"], "B3", "{back}: {}", v["check"]);
    }
}

/// Permutations JAX refuses (recorded: a repeated source or destination is
/// "ValueError: ppermute sources and destinations must be unique", a rank
/// past the group an IndexError) are bad input: exit 2, one line. JAX
/// reads a negative rank from the end of the group; here it is refused with
/// that said, as the catalogue fixes no group size.
#[test]
fn bad_jax_permutations_are_refused() {
    for (perm, want) in [
        ("[(0, 1), (0, 2)]", "must be unique"),
        ("[(0, 1), (2, 1)]", "sends two members to 1"),
        ("[(0, 4)]", "names member 4"),
        ("[(5, 0)]", "names member 5"),
        ("[(0, -1)]", "negative"),
    ] {
        let job = json!({"dialect": "jax", "mesh": {"x": 4},
            "forward": format!("ppermute(perm={perm})"),
            "inputs": [{"type": "Varying", "per_rank": [[1], [2], [3], [4]]}],
            "cotangent": [[10], [20], [30], [40]]});
        let (code, v, err) = run_job_json("pp_bad.json", &job, &[]);
        assert_eq!(code, 2, "{perm}: {v} {err}");
        assert!(err.contains(want), "{perm}: expected `{want}` in: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{perm}: {err}");
    }
}

/// The untiled all_to_all (issue 25): `split_axis` has the group's size 4;
/// member k's output holds member j's entry k (along split, that dim
/// dropped) at entry j of a new dim at `concat_axis`. Forwards and, where
/// JAX 0.12.0.1 computes one, gradients are its recorded values
/// (peers/probe_jax_catalogue.py, section `all_to_all`). Where split and
/// concat differ, real JAX's own vjp raises ("Expected cotangent type
/// float64[4,2,1]{V:x} but got float64[4,1,2]{V:x}": its transpose rule
/// inserts the new dim twice); the gradient here is the transpose that rule
/// means, the untiled all_to_all with split and concat swapped, and the
/// expected values are that call run by real JAX on the cotangent.
#[test]
fn jax_untiled_all_to_all_as_recorded() {
    // Rank r holds entry (i, j) = 100 (r + 1) + 10 i + j; the cotangent's
    // flat entry k on rank r is 100 (r + 1) + k + 1.
    let x42 = json!([
        [[100, 101], [110, 111], [120, 121], [130, 131]],
        [[200, 201], [210, 211], [220, 221], [230, 231]],
        [[300, 301], [310, 311], [320, 321], [330, 331]],
        [[400, 401], [410, 411], [420, 421], [430, 431]]
    ]);
    let x24 = json!([
        [[100, 101, 102, 103], [110, 111, 112, 113]],
        [[200, 201, 202, 203], [210, 211, 212, 213]],
        [[300, 301, 302, 303], [310, 311, 312, 313]],
        [[400, 401, 402, 403], [410, 411, 412, 413]]
    ]);
    let c24 = json!([
        [[101, 102, 103, 104], [105, 106, 107, 108]],
        [[201, 202, 203, 204], [205, 206, 207, 208]],
        [[301, 302, 303, 304], [305, 306, 307, 308]],
        [[401, 402, 403, 404], [405, 406, 407, 408]]
    ]);
    let c42 = json!([
        [[101, 102], [103, 104], [105, 106], [107, 108]],
        [[201, 202], [203, 204], [205, 206], [207, 208]],
        [[301, 302], [303, 304], [305, 306], [307, 308]],
        [[401, 402], [403, 404], [405, 406], [407, 408]]
    ]);
    let cases = [
        (
            "all_to_all(split_axis=0, concat_axis=1, tiled=False)",
            &x42,
            &c24,
            json!([
                [[100, 200, 300, 400], [101, 201, 301, 401]],
                [[110, 210, 310, 410], [111, 211, 311, 411]],
                [[120, 220, 320, 420], [121, 221, 321, 421]],
                [[130, 230, 330, 430], [131, 231, 331, 431]]
            ]),
            json!([
                [[101, 105], [201, 205], [301, 305], [401, 405]],
                [[102, 106], [202, 206], [302, 306], [402, 406]],
                [[103, 107], [203, 207], [303, 307], [403, 407]],
                [[104, 108], [204, 208], [304, 308], [404, 408]]
            ]),
            true,
        ),
        (
            "all_to_all(split_axis=0, concat_axis=0, tiled=False)",
            &x42,
            &c42,
            json!([
                [[100, 101], [200, 201], [300, 301], [400, 401]],
                [[110, 111], [210, 211], [310, 311], [410, 411]],
                [[120, 121], [220, 221], [320, 321], [420, 421]],
                [[130, 131], [230, 231], [330, 331], [430, 431]]
            ]),
            json!([
                [[101, 102], [201, 202], [301, 302], [401, 402]],
                [[103, 104], [203, 204], [303, 304], [403, 404]],
                [[105, 106], [205, 206], [305, 306], [405, 406]],
                [[107, 108], [207, 208], [307, 308], [407, 408]]
            ]),
            false,
        ),
        (
            "all_to_all(split_axis=1, concat_axis=0, tiled=False)",
            &x24,
            &c42,
            json!([
                [[100, 110], [200, 210], [300, 310], [400, 410]],
                [[101, 111], [201, 211], [301, 311], [401, 411]],
                [[102, 112], [202, 212], [302, 312], [402, 412]],
                [[103, 113], [203, 213], [303, 313], [403, 413]]
            ]),
            json!([
                [[101, 201, 301, 401], [102, 202, 302, 402]],
                [[103, 203, 303, 403], [104, 204, 304, 404]],
                [[105, 205, 305, 405], [106, 206, 306, 406]],
                [[107, 207, 307, 407], [108, 208, 308, 408]]
            ]),
            true,
        ),
        (
            "all_to_all(split_axis=1, concat_axis=1, tiled=False)",
            &x24,
            &c24,
            json!([
                [[100, 200, 300, 400], [110, 210, 310, 410]],
                [[101, 201, 301, 401], [111, 211, 311, 411]],
                [[102, 202, 302, 402], [112, 212, 312, 412]],
                [[103, 203, 303, 403], [113, 213, 313, 413]]
            ]),
            json!([
                [[101, 201, 301, 401], [105, 205, 305, 405]],
                [[102, 202, 302, 402], [106, 206, 306, 406]],
                [[103, 203, 303, 403], [107, 207, 307, 407]],
                [[104, 204, 304, 404], [108, 208, 308, 408]]
            ]),
            false,
        ),
    ];
    for (i, (fw, x, ct, y, dx, jax_raises)) in cases.into_iter().enumerate() {
        let v = jax4(&format!("a2a_untiled_{i}.json"), fw, x.clone(), ct.clone());
        assert_eq!(v["output"]["per_rank"], y, "{fw}: forward");
        assert_eq!(grad(&v), dx, "{fw}: gradient");
        let notes = v["notes"].to_string();
        assert!(notes.contains("tiled=False"), "{fw}: {notes}");
        assert_eq!(notes.contains("raises"), jax_raises, "{fw}: {notes}");
    }
}

/// The untiled all_to_all's negative twins: on square pieces (4 x 4 on 4
/// ranks) the forward itself as the backward (split and concat not
/// swapped) has the right shape but moves entries wrongly, so B3 refutes
/// it; a split dim that is not the group size is bad input, one line, as
/// JAX refuses it (recorded: "all_to_all requires the size of the mapped
/// axis axis_name to equal x.shape[split_axis], but they are 4 and 2").
#[test]
fn untiled_all_to_all_twins() {
    let sq: Vec<Value> = (0..4)
        .map(|r| {
            json!((0..4)
                .map(|i| (0..4)
                    .map(|j| 100 * (r + 1) + 10 * i + j)
                    .collect::<Vec<_>>())
                .collect::<Vec<_>>())
        })
        .collect();
    let fw = "all_to_all(split_axis=0, concat_axis=1, tiled=False)";
    let mut job = json!({"dialect": "jax", "mesh": {"x": 4}, "forward": fw,
        "inputs": [{"type": "Varying", "per_rank": sq}], "cotangent": sq});
    let (code, v, err) = run_job_json("a2a_sq.json", &job, &["--check"]);
    assert_eq!((code, &v["check"]["outcome"]), (0, &json!("pass")), "{err}");
    job["backward"] = json!(fw);
    let (code, v, err) = run_job_json("a2a_sq_wrong.json", &job, &["--check"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["check"]["property"], "B3", "{}", v["check"]);
    let bad = json!({"dialect": "jax", "mesh": {"x": 4}, "forward": fw,
        "inputs": [{"type": "Varying", "per_rank": [[[1, 2], [3, 4]], [[1, 2], [3, 4]], [[1, 2], [3, 4]], [[1, 2], [3, 4]]]}]});
    let (code, _, err) = run_job_json("a2a_bad.json", &bad, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("group size 4"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
