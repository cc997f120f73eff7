//! Speed of the main jobs, measured (never asserted). Run with
//! `cargo bench` or `spmd-check bench`; both print wall-clock times.

use spmd_check::conform::{check_row, rows};
use spmd_check::derive::derive;
use spmd_check::generators::Scope;
use spmd_check::interp::builtin;
use std::time::Instant;

fn main() {
    // Counterexamples to the rules the seeds forbid (SPEC.md §11.2).
    let forbid = "[[rule]]\nname = \"P*P\"\nop = \"mul\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n\n[[rule]]\nname = \"nonlinear on P\"\nop = { expr = \"x * x\" }\ninputs = [\"P\"]\noutput = \"P\"\n\n[[rule]]\nname = \"I mixed with V\"\nop = \"mul\"\ninputs = [\"I\", \"V\"]\noutput = \"V\"\n";
    {
        let sc = spmd_check::generators::Scope::default();
        let specs = spmd_check::rules::parse_file("bench", forbid).expect("rules");
        let rules = spmd_check::rules::build("bench", forbid, &specs, &sc).expect("rules");
        let cfg = spmd_check::check::CheckConfig {
            scope: sc,
            cases: 256,
            seed: 0,
        };
        for r in &rules {
            let t = std::time::Instant::now();
            let rep = spmd_check::check::check_rule(r, &cfg, &[], &|_| {});
            let prop = rep
                .verdict
                .violation()
                .map(|v| v.property.code())
                .unwrap_or("none");
            println!(
                "counterexample {:<16} {:>8.2} ms  {prop}",
                r.name,
                t.elapsed().as_secs_f64() * 1e3
            );
        }
    }

    let scope = Scope::default();
    for name in ["mul", "add", "matmul", "div", "relu"] {
        let f = builtin(name).expect("builtin");
        let t = Instant::now();
        let table = derive(&f, &scope, &|_| {}).expect("derive");
        let n: u64 = table.iter().map(|r| r.verdict.tally().instances()).sum();
        println!(
            "derive {name:<8} {:>9.1} ms  {n} instances",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let t = Instant::now();
    let all = rows(None).expect("rows");
    for r in &all {
        check_row(r, &scope, &|_| {}).expect("row");
    }
    println!(
        "conform (sequential) {:>9.1} ms  {} rules",
        t.elapsed().as_secs_f64() * 1e3,
        all.len()
    );
}
