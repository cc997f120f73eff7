//! Speed of the main jobs, measured and printed, never asserted: used by
//! `spmd-check bench` (text or `--json`) and `cargo bench` (SPEC.md §18).
//!
//! Per job: instances, instances per second, thread scaling at 1, 2 and all
//! cores (a rayon pool built per measurement), the process's peak memory,
//! and for the elementwise derive jobs `ratio_exact_to_f64`: the per-instance
//! time of the exact checker over that of the same per-instance algorithm
//! written here in f64 on the same cases. That kernel is the floor the exact
//! checker is measured against; it is the one place in the project where
//! floats decide anything, and what it decides is never reported as a
//! verdict. And `ratio_f64_to_arith`: the floor's time per arithmetic
//! operation on values (counted by a run compiled to count them) over that
//! of a plain loop of multiply-adds, how far the floor is from the
//! arithmetic it needs. And `ratio_exact_to_arith`, their product: the
//! exact checker's time per such operation over the plain loop's.

mod floor;

use crate::collectives::{check_pair, pair_rows};
use crate::conform::{check_row, rows};
use crate::derive::derive;
use floor::{arith_ns, floor_derive, rational_ns, Elem, Operands};
use rayon::prelude::*;
use serde_json::{json, Value};
use spmd_generators::Scope;
use spmd_interp::{builtin, TypedOp};
use spmd_oracle::{Checker, Outcome, Phase};
use spmd_semantics::{Mesh, PerRank, Q};
use std::time::Instant;

/// One job of the bench: its name and a run that returns the instances it
/// checked.
struct Job {
    name: String,
    note: String,
    run: Box<dyn Fn() -> u64 + Sync>,
    /// The elementwise op whose f64 kernel gives the floor, if any.
    floor: Option<Elem>,
}

/// The process's peak resident memory so far, in KiB (`getrusage`).
pub fn peak_rss_kib() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    if rc == 0 {
        u.ru_maxrss.max(0) as u64
    } else {
        0
    }
}

/// Run `f` on a pool of `threads` threads; milliseconds and its result.
fn timed_in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> (f64, T) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    let t = Instant::now();
    let out = pool.install(f);
    (t.elapsed().as_secs_f64() * 1e3, out)
}

fn derive_instances(name: &str, scope: &Scope) -> u64 {
    let f = builtin(name).expect("builtin");
    let rows = derive(&f, scope, &|_| {}).expect("derive");
    rows.iter().map(|r| r.verdict.tally().instances()).sum()
}

/// The conformance run as `spmd-check conform` does it: seed rows with
/// their twins, collective rows, JVP rules, FSDP and the layers.
fn conform_instances(scope: &Scope) -> u64 {
    let rs = rows(None).expect("rows");
    let a: u64 = rs
        .par_iter()
        .map(|r| {
            let res = check_row(r, scope, &|_| {}).expect("row");
            res.verdict.tally().instances() + res.twin.as_ref().map_or(0, |t| t.tally().instances())
        })
        .sum();
    let b: u64 = pair_rows(None)
        .par_iter()
        .map(|r| {
            check_pair(r, scope)
                .expect("row")
                .verdict
                .tally()
                .instances()
        })
        .sum();
    a + b + jvp_instances(scope) + fsdp_instances(scope) + program_instances(scope)
}

fn jvp_instances(scope: &Scope) -> u64 {
    crate::jvps::jvp_rows(None)
        .par_iter()
        .map(|r| {
            let j = crate::jvps::check_jvp(r, scope).expect("row");
            j.verdict.tally().instances() + j.twin.tally().instances()
        })
        .sum()
}

fn fsdp_instances(scope: &Scope) -> u64 {
    crate::fsdp::strategies(scope)
        .expect("fsdp")
        .iter()
        .map(|p| p.verdict.tally().instances())
        .sum()
}

fn program_instances(scope: &Scope) -> u64 {
    crate::programs::programs(scope)
        .expect("layers")
        .iter()
        .map(|p| p.verdict.tally().instances())
        .sum()
}

const FORBID: &str = "[[rule]]\nname = \"P*P\"\nop = \"mul\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n\n[[rule]]\nname = \"nonlinear on P\"\nop = { expr = \"x * x\" }\ninputs = [\"P\"]\noutput = \"P\"\n\n[[rule]]\nname = \"I mixed with V\"\nop = \"mul\"\ninputs = [\"I\", \"V\"]\noutput = \"V\"\n";

/// Counterexamples to the rules the seeds forbid (SPEC.md §11.2).
fn counterexample_instances() -> u64 {
    let sc = Scope::default();
    let specs = crate::rules::parse_file("bench", FORBID).expect("rules");
    let rules = crate::rules::build("bench", FORBID, &specs, &sc).expect("rules");
    let cfg = crate::check::CheckConfig {
        scope: sc,
        cases: 256,
        seed: 0,
    };
    rules
        .iter()
        .map(|r| {
            let rep = crate::check::check_rule(r, &cfg, &[], &|_| {});
            assert!(rep.verdict.violation().is_some(), "{} must fail", r.name);
            rep.verdict.tally().instances() + rep.random_cases
        })
        .sum()
}

fn jobs() -> Vec<Job> {
    let mut out = vec![Job {
        name: "counterexamples".into(),
        note: "three forbidden rules, each to its minimal counterexample".into(),
        run: Box::new(counterexample_instances),
        floor: None,
    }];
    for (name, floor) in [
        ("mul", Some(Elem::Mul)),
        ("add", Some(Elem::Add)),
        ("matmul", None),
        ("div", Some(Elem::Div)),
        ("relu", Some(Elem::Relu)),
    ] {
        out.push(Job {
            name: format!("derive {name}"),
            note: "every one-axis typing on the default scope".into(),
            run: Box::new(move || derive_instances(name, &Scope::default())),
            floor,
        });
    }
    out.push(Job {
        name: "conform".into(),
        note: "seed rows with twins, collectives, JVPs, FSDP, layers".into(),
        run: Box::new(|| conform_instances(&Scope::default())),
        floor: None,
    });
    out.push(Job {
        name: "jvps".into(),
        note: "JVP rules with twins".into(),
        run: Box::new(|| jvp_instances(&Scope::default())),
        floor: None,
    });
    out.push(Job {
        name: "programs".into(),
        note: "tensor and sequence parallel layers, with twins".into(),
        run: Box::new(|| program_instances(&Scope::default())),
        floor: None,
    });
    out.push(Job {
        name: "uneven".into(),
        note: "conform's uneven section: each system's rules on uneven shards, with twins (SPEC.md §23.12)".into(),
        run: Box::new(uneven_instances),
        floor: None,
    });
    out.push(Job {
        name: "fidelity uneven".into(),
        note: "the uneven recordings replayed and checked (SPEC.md §23.13)".into(),
        run: Box::new(fidelity_uneven_cases),
        floor: None,
    });
    out.push(Job {
        name: "transforms".into(),
        note:
            "conform's transforms section: collectives, programs and local ops under vmap, V1 and both orders of grad and vmap, with twins (SPEC.md §24.5, §24.9)"
                .into(),
        run: Box::new(transforms_batches),
        floor: None,
    });
    out.push(Job {
        name: "fidelity transforms".into(),
        note: "JAX's recorded vmap replayed and checked (SPEC.md §24.6)".into(),
        run: Box::new(fidelity_transforms_cases),
        floor: None,
    });
    out.push(Job {
        name: "fidelity vmap programs".into(),
        note: "JAX's recorded vmap of programs, forward and both orders' gradients, replayed against the meaning and the model (SPEC.md §24.10)".into(),
        run: Box::new(fidelity_vmap_program_cases),
        floor: None,
    });
    out
}

/// Cases of JAX's vmap-of-programs recording replayed (SPEC.md §24.10).
fn fidelity_vmap_program_cases() -> u64 {
    crate::fidelity::vmap_programs::run(&crate::fidelity::default_dir())
        .map_or(0, |r| r.len() as u64)
}

/// Batches of conform's transforms section compared by V1 (SPEC.md §24.5).
fn transforms_batches() -> u64 {
    crate::batching::conform_rows(None)
        .expect("the section's rules build")
        .iter()
        .map(|r| r.report.batches())
        .sum()
}

/// Cases of JAX's vmap recording replayed (SPEC.md §24.6).
fn fidelity_transforms_cases() -> u64 {
    crate::fidelity::transforms::run(&crate::fidelity::default_dir()).map_or(0, |r| r.len() as u64)
}

/// Instances of conform's uneven section (SPEC.md §23.12).
fn uneven_instances() -> u64 {
    crate::uneven::conform_rows(None)
        .expect("the section's rules build")
        .iter()
        .map(|r| r.report.tally.instances)
        .sum()
}

/// Cases of the uneven recordings replayed (SPEC.md §23.13).
fn fidelity_uneven_cases() -> u64 {
    crate::fidelity::uneven::run(&crate::fidelity::default_dir())
        .expect("the recordings read")
        .len() as u64
}

/// The thread counts measured: 1, 2 and all cores, without repeats.
fn thread_counts() -> Vec<usize> {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut v = vec![1, 2.min(all), all];
    v.dedup();
    v
}

/// Runs of the exact job and of its f64 floor behind `ratio_exact_to_f64`.
const FLOOR_RUNS: usize = 7;
/// The most turns, and the exact side's total time below which turns go on.
const FLOOR_MAX_RUNS: usize = 41;
const FLOOR_MS: f64 = 1500.0;

fn min_of(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The median of a nonempty list (the upper one of an even count).
fn median_of(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(job: &Job) -> Value {
    let counts = thread_counts();
    let mut scaling = Vec::new();
    let mut instances = 0;
    let mut ms1 = 0.0;
    for &k in &counts {
        let (ms, n) = timed_in_pool(k, || (job.run)());
        if k == 1 {
            ms1 = ms;
        }
        instances = n;
        scaling.push(json!({
            "threads": k,
            "ms": round3(ms),
            "speedup": round3(ms1 / ms),
        }));
    }
    let ms_all = scaling.last().and_then(|s| s["ms"].as_f64()).unwrap_or(ms1);
    let mut v = json!({
        "name": job.name,
        "what": job.note,
        "instances": instances,
        "ms": round3(ms_all),
        "instances_per_s": round3(instances as f64 / (ms_all / 1e3)),
        "threads": scaling,
        "ratio_exact_to_f64": Value::Null,
        "ratio_f64_to_arith": Value::Null,
        "ratio_exact_to_arith": Value::Null,
        "f64": Value::Null,
    });
    if let (Some(e), Some(name)) = (job.floor, job.name.strip_prefix("derive ")) {
        // The ratio is the fastest of the runs of each, exact and f64
        // taking turns on one thread, so a busy machine slows both alike
        // and a stray pause does not decide it. The medians are reported
        // beside it, so a reader sees how much the machine moved.
        let mut fms = Vec::with_capacity(FLOOR_RUNS);
        let mut ems = vec![ms1];
        let (f0, fl) = timed_in_pool(1, || floor_derive::<false>(name, e, &Scope::default()));
        fms.push(f0);
        // At least FLOOR_RUNS turns, and more while the exact side has had
        // under FLOOR_MS in all: a short job's minimum needs more tries to
        // land in a quiet moment.
        while ems.len() < FLOOR_MAX_RUNS
            && (ems.len() < FLOOR_RUNS || ems.iter().sum::<f64>() < FLOOR_MS)
        {
            ems.push(timed_in_pool(1, || (job.run)()).0);
            fms.push(timed_in_pool(1, || floor_derive::<false>(name, e, &Scope::default())).0);
        }
        let runs = ems.len();
        let per = |ms: f64, n: u64| ms * 1e3 / n.max(1) as f64;
        let exact_us = per(min_of(&ems), instances);
        let f64_us = per(min_of(&fms), fl.instances);
        let exact_med = per(median_of(&mut ems), instances);
        let f64_med = per(median_of(&mut fms), fl.instances);
        v["f64"] = json!({
            "instances": fl.instances,
            "ms": round3(min_of(&fms)),
            "us_per_instance": round3(f64_us),
            "runs": runs,
            "exact_us_per_instance": round3(exact_us),
            "median_us_per_instance": round3(f64_med),
            "exact_median_us_per_instance": round3(exact_med),
            "ratio_of_medians": round3(exact_med / f64_med),
            "failing_typings": fl.failing,
        });
        v["ratio_exact_to_f64"] = json!(round3(exact_us / f64_us));
        // The arithmetic the algorithm needs: the operations on values the
        // floor performs per instance, counted in a run of its own, against
        // the same number of multiply-adds in a plain loop.
        let counted = floor_derive::<true>(name, e, &Scope::default());
        let per = counted.arith as f64 / counted.instances.max(1) as f64;
        let plain_ns = arith_ns(1);
        let f64_ns_per_op = f64_us * 1e3 / per.max(1.0);
        v["f64"]["arith_per_instance"] = json!(round3(per));
        v["f64"]["ns_per_arith"] = json!(round3(f64_ns_per_op));
        v["f64"]["plain_loop_ns_per_arith"] = json!(round3(plain_ns));
        v["f64"]["vector_loop_ns_per_arith"] = json!(round3(arith_ns(4)));
        v["ratio_f64_to_arith"] = json!(round3(f64_ns_per_op / plain_ns));
        // The two goals in one figure: the exact checker's time per
        // counted operation over the plain loop's. Exact within 2× of the
        // floor and the floor within 4× of the arithmetic make at most 8×.
        v["ratio_exact_to_arith"] = json!(round3(exact_us * 1e3 / per.max(1.0) / plain_ns));
    }
    v["peak_rss_kib"] = json!(peak_rss_kib());
    v
}

fn round3(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e3).round() / 1e3
    } else {
        0.0
    }
}

/// The jobs whose name contains `only` (all without it); an error naming
/// every job when none does.
pub(crate) fn pick<T>(
    all: Vec<T>,
    name: impl Fn(&T) -> &str,
    only: Option<&str>,
) -> Result<Vec<T>, String> {
    let Some(o) = only else { return Ok(all) };
    let names: Vec<String> = all.iter().map(|j| name(j).to_string()).collect();
    let kept: Vec<T> = all.into_iter().filter(|j| name(j).contains(o)).collect();
    if kept.is_empty() {
        return Err(format!(
            "no job named like `{o}`; the jobs are: {}",
            names.join(", ")
        ));
    }
    Ok(kept)
}

/// The measurements of the jobs whose name contains `only` (all without
/// it), as one JSON value.
pub fn measure_only(only: Option<&str>) -> Result<Value, String> {
    let jobs: Vec<Value> = pick(jobs(), |j| &j.name, only)?
        .iter()
        .map(measure)
        .collect();
    Ok(json!({
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "jobs": jobs,
        "arith": arith_costs(),
        // FSDP at JAX's shapes goes with the whole run only.
        "fsdp_jax_shapes": if only.is_none() { fsdp_jax() } else { Value::Null },
        "peak_rss_kib": peak_rss_kib(),
    }))
}

/// What arithmetic itself costs here, per operation: the plain f64 loop
/// of `ratio_f64_to_arith`, and the same loop in the exact field on
/// integers, dyadic values and small fractions (SPEC.md §18.4).
fn arith_costs() -> Value {
    let f64_ns = arith_ns(1);
    let rational = |k: Operands| {
        let ns = rational_ns(k);
        json!({"ns_per_arith": round3(ns), "over_f64": round3(ns / f64_ns)})
    };
    json!({
        "f64_ns_per_arith": round3(f64_ns),
        "rational_integers": rational(Operands::Integers),
        "rational_dyadic": rational(Operands::Dyadic),
        "rational_fractions": rational(Operands::Fractions),
    })
}

/// Print the measurements (of the jobs named like `only`): text, or JSON
/// with `json`.
pub fn print(json: bool, only: Option<&str>) -> Result<(), String> {
    let v = measure_only(only)?;
    if json {
        print_document(v);
        return Ok(());
    }
    println!("{} cores; times at 1 / 2 / all cores", v["cores"]);
    for j in v["jobs"].as_array().into_iter().flatten() {
        let ts: Vec<String> = j["threads"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| format!("{:.1}", t["ms"].as_f64().unwrap_or(0.0)))
            .collect();
        let ratio = j["ratio_exact_to_f64"].as_f64().map_or(String::new(), |r| {
            let med = j["f64"]["ratio_of_medians"].as_f64().unwrap_or(0.0);
            let arith = j["ratio_f64_to_arith"].as_f64().unwrap_or(0.0);
            let exact = j["ratio_exact_to_arith"].as_f64().unwrap_or(0.0);
            let per = j["f64"]["arith_per_instance"].as_f64().unwrap_or(0.0);
            format!(
                "  exact/f64 per instance {r:.2}x (medians {med:.2}x); f64/arithmetic {arith:.2}x; exact/arithmetic {exact:.1}x ({per:.0} operations per instance)"
            )
        });
        println!(
            "{:<16} {:>9} instances  {:>10.0}/s  ms {}{ratio}",
            j["name"].as_str().unwrap_or(""),
            j["instances"],
            j["instances_per_s"].as_f64().unwrap_or(0.0),
            ts.join(" / "),
        );
    }
    let a = &v["arith"];
    let r = |k: &str| {
        format!(
            "{:.2} ns ({:.1}x)",
            a[k]["ns_per_arith"].as_f64().unwrap_or(0.0),
            a[k]["over_f64"].as_f64().unwrap_or(0.0)
        )
    };
    println!(
        "arithmetic per operation: f64 {:.3} ns; exact on integers {}, on dyadic steps {}, on small fractions {}",
        a["f64_ns_per_arith"].as_f64().unwrap_or(0.0),
        r("rational_integers"),
        r("rational_dyadic"),
        r("rational_fractions"),
    );
    let f = &v["fsdp_jax_shapes"];
    for s in f["strategies"].as_array().into_iter().flatten() {
        println!(
            "fsdp at JAX's shapes (w 8x3 on 4 ranks, x 5x8): {}: {} in {:.1} ms ({} instances)",
            s["name"].as_str().unwrap_or(""),
            s["verdict"].as_str().unwrap_or(""),
            s["ms"].as_f64().unwrap_or(0.0),
            s["instances"]
        );
    }
    println!("peak memory {} KiB", v["peak_rss_kib"]);
    Ok(())
}

/// A bench's measurements as the `bench` JSON document.
pub(crate) fn print_document(v: Value) {
    let d = crate::words::document("bench", v);
    println!("{}", serde_json::to_string_pretty(&d).expect("json"));
}

/// `cargo bench` and `spmd-check bench`: the text report.
pub fn run() {
    print(false, None).expect("every job");
}

/// FSDP's programs (examples/fsdp.toml) at the shapes of JAX's own test:
/// w 8x3 sharded by rows on 4 ranks (local 2x3), x a 5x8 batch per rank.
/// Far beyond the exhaustive scope, so a few instances with values from the
/// default list, chosen by a fixed sequence, are checked (bounded, like
/// JAX's `check_grads`, which checks one float point).
pub fn fsdp_jax() -> Value {
    let file = "examples/fsdp.toml";
    let text = crate::fsdp::FSDP_TOML;
    let sc = Scope::default();
    let specs = crate::rules::parse_file(file, text).expect("fsdp rules");
    let rules = crate::rules::build(file, text, &specs, &sc).expect("fsdp rules");
    let m = Mesh::line(4);
    let shapes = vec![vec![5, 8], vec![2, 3]];
    const INSTANCES: u64 = 4;
    let strategies: Vec<Value> = rules
        .iter()
        .map(|r| {
            let t = Instant::now();
            let Ok(c) = Checker::new(&r.op, &m, shapes.clone()) else {
                return json!({"name": r.name, "verdict": "shapes rejected"});
            };
            let mut verdict = format!("no violation on {INSTANCES} instances (bounded)");
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            let mut n = 0;
            for _ in 0..INSTANCES {
                let xs = fsdp_values(&r.op, &m, &shapes, &mut seed);
                n += 1;
                match c.check(&xs, Phase::full(r.has_backward)) {
                    Outcome::Fail(v) => {
                        verdict = format!("unsound {}", v.property.code());
                        break;
                    }
                    Outcome::OutsideDomain => {}
                    Outcome::Pass(_) => {}
                }
            }
            json!({
                "name": r.name,
                "verdict": verdict,
                "instances": n,
                "ms": round3(t.elapsed().as_secs_f64() * 1e3),
            })
        })
        .collect();
    json!({
        "mesh": {"x": 4},
        "w_global": [8, 3],
        "w_local": [2, 3],
        "x_local": [5, 8],
        "strategies": strategies,
    })
}

/// Well-formed inputs of `op`'s types at `shapes`, free scalars drawn from
/// the default values by a xorshift sequence.
fn fsdp_values(op: &TypedOp, m: &Mesh, shapes: &[Vec<usize>], seed: &mut u64) -> Vec<PerRank> {
    let vals = Scope::default().values;
    op.inputs
        .iter()
        .zip(shapes)
        .map(|(t, s)| {
            let k = spmd_semantics::perrank::num_free(m, t, s);
            let free: Vec<Q> = (0..k)
                .map(|_| {
                    *seed ^= *seed << 13;
                    *seed ^= *seed >> 7;
                    *seed ^= *seed << 17;
                    vals[(*seed % vals.len() as u64) as usize].clone()
                })
                .collect();
            spmd_semantics::perrank::from_free(m, t, s, &free)
        })
        .collect()
}
