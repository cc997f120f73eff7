//! The scopes users ask about, timed (issue 30): `spmd-check bench
//! --scopes`. Each job is one question a rule designer asks, checked the
//! way `check` or `programs` checks it at the default caps; the report says
//! what was decided (cases, cases beyond the caps, random cases, the
//! verdict) beside the time, so a faster run that decides less is seen as
//! such. Each job runs once, on every core.

use crate::check::{check_rule, CheckConfig};
use serde_json::{json, Value};
use spmd_generators::Scope;
use std::time::Instant;

/// One question: a rule file checked by `check` (with the scope's largest
/// rank), or a system's generated programs at a depth.
enum Question {
    Rule { text: &'static str, max_rank: usize },
    Programs { system: &'static str, depth: usize },
}

struct ScopeJob {
    name: &'static str,
    what: &'static str,
    question: Question,
}

const ATTENTION: &str = r#"[[rule]]
name = "attention, heads sharded on 4 ranks"
mesh = { x = 4 }
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["V", "V", "V"]
output = "V"
"#;

const SOFTMAX8: &str = r#"[[rule]]
name = "softmax over a local dim, rows sharded on 8 ranks"
mesh = { x = 8 }
op = { expr = "softmax(x, 1)" }
inputs = ["S(0)"]
output = "S(0)"
"#;

const GATHER8: &str = r#"[[rule]]
name = "all_gather of 2-D tensors on 8 ranks"
mesh = { x = 8 }
dialect = "jax"
forward = "all_gather(dim = 0, to = 'reduced')"
backward = "psum_scatter(dim = 0)"
inputs = ["Varying"]
output = "Reduced"
"#;

const PRODUCT4: &str = r#"[[rule]]
name = "a four-input product"
op = { expr = "a * b * c * d" }
inputs = ["V", "V", "V", "V"]
output = "V"
"#;

fn jobs() -> Vec<ScopeJob> {
    let mut out = vec![
        ScopeJob {
            name: "attention 4 ranks",
            what: "softmax(q k^T) v, rank 3, heads sharded (V) on 4 ranks; shapes of rank up to 3",
            question: Question::Rule {
                text: ATTENTION,
                max_rank: 3,
            },
        },
        ScopeJob {
            name: "softmax 8 ranks",
            what: "softmax along a local dim, rows sharded S(0) on 8 ranks",
            question: Question::Rule {
                text: SOFTMAX8,
                max_rank: 2,
            },
        },
        ScopeJob {
            name: "all_gather 8 ranks",
            what: "JAX's all_gather to reduced with psum_scatter as its backward, 2-D tensors on 8 ranks",
            question: Question::Rule {
                text: GATHER8,
                max_rank: 2,
            },
        },
        ScopeJob {
            name: "product of 4",
            what: "a * b * c * d, every input V, on the default meshes",
            question: Question::Rule {
                text: PRODUCT4,
                max_rank: 2,
            },
        },
    ];
    for system in ["jax", "dtensor", "spmd_types", "nabla", "ltensor"] {
        out.push(ScopeJob {
            name: system,
            what: "generated programs of up to 3 steps, typed by the system and checked",
            question: Question::Programs { system, depth: 3 },
        });
    }
    out
}

/// Run one job: its time and what it decided.
fn measure(job: &ScopeJob) -> Value {
    let t = Instant::now();
    let mut v = match &job.question {
        Question::Rule { text, max_rank } => {
            let scope = Scope {
                max_rank: *max_rank,
                ..Scope::default()
            };
            let specs = crate::rules::parse_file(job.name, text).expect("a bench rule parses");
            let rules =
                crate::rules::build(job.name, text, &specs, &scope).expect("a bench rule builds");
            let cfg = CheckConfig {
                scope,
                cases: 256,
                seed: 0,
            };
            let r = check_rule(&rules[0], &cfg, &[], &|_| {});
            let c = r.verdict.tally();
            let whole = c.cases_beyond_cap == 0
                && c.stopped.is_none()
                && (r.verdict.is_sound() || r.verdict.violation().is_some());
            json!({
                "verdict": crate::check::rule_word(&r),
                "instances": c.instances(),
                "cases": c.cases,
                "cases_beyond_cap": c.cases_beyond_cap,
                "random_cases": r.random_cases,
                "whole_default_scope": whole,
            })
        }
        Question::Programs { system, depth } => {
            let sys = spmd_dialects::system(system).expect("a known system");
            let scope = Scope::default();
            let opts = crate::generated::RunOptions {
                partition: None,
                progress: None,
            };
            let r = crate::generated::run_with(sys, *depth, &scope, &opts);
            let rep = &r.report;
            json!({
                "verdict": crate::generated::summary_line(rep),
                "instances": null,
                "classes": rep.distinct,
                "not_checked": rep.not_checked.len(),
                "undetermined": rep.other,
                // Each class is checked at the default caps, but how many
                // of its cases were beyond them is not kept per class:
                // unknown, never claimed.
                "whole_default_scope": null,
            })
        }
    };
    let ms = t.elapsed().as_secs_f64() * 1e3;
    v["name"] = json!(job.name);
    v["what"] = json!(job.what);
    v["ms"] = json!((ms * 1e3).round() / 1e3);
    v
}

/// The jobs whose name contains `only` (all without it), in order.
pub fn measure_only(only: Option<&str>) -> Result<Value, String> {
    let picked = crate::bench::pick(jobs(), |j| j.name, only)?;
    Ok(json!({
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "scopes": picked.iter().map(measure).collect::<Vec<_>>(),
    }))
}

/// Print the measurements (of the jobs named like `only`): text, or JSON
/// with `json`.
pub fn print(json: bool, only: Option<&str>) -> Result<(), String> {
    let v = measure_only(only)?;
    if json {
        crate::bench::print_document(v);
        return Ok(());
    }
    println!("{} cores; each scope once, on every core", v["cores"]);
    for j in v["scopes"].as_array().into_iter().flatten() {
        let whole = match j["whole_default_scope"].as_bool() {
            Some(true) => "whole default scope",
            Some(false) => "part of the default scope",
            None => "each class at the default caps",
        };
        let count = match j["instances"].as_u64() {
            Some(n) => format!("{n} instances"),
            None => format!("{} classes", j["classes"]),
        };
        println!(
            "{:<20} {:>10.1} ms {:>18}  {whole}: {}",
            j["name"].as_str().unwrap_or(""),
            j["ms"].as_f64().unwrap_or(0.0),
            count,
            j["verdict"].as_str().unwrap_or(""),
        );
    }
    Ok(())
}
