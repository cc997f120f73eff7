//! Speed of the main jobs, measured and printed, never asserted: used by
//! `spmd-check bench` and `cargo bench`.

use crate::collectives::{check_pair, pair_rows};
use crate::conform::{check_row, rows};
use crate::derive::derive;
use rayon::prelude::*;
use spmd_generators::Scope;
use spmd_interp::builtin;
use std::time::Instant;

/// Time counterexamples to forbidden rules, derived tables and the
/// conformance tables on this machine.
pub fn run() {
    // Counterexamples to the rules the seeds forbid (SPEC.md §11.2).
    let forbid = "[[rule]]\nname = \"P*P\"\nop = \"mul\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n\n[[rule]]\nname = \"nonlinear on P\"\nop = { expr = \"x * x\" }\ninputs = [\"P\"]\noutput = \"P\"\n\n[[rule]]\nname = \"I mixed with V\"\nop = \"mul\"\ninputs = [\"I\", \"V\"]\noutput = \"V\"\n";
    {
        let sc = spmd_generators::Scope::default();
        let specs = crate::rules::parse_file("bench", forbid).expect("rules");
        let rules = crate::rules::build("bench", forbid, &specs, &sc).expect("rules");
        let cfg = crate::check::CheckConfig {
            scope: sc,
            cases: 256,
            seed: 0,
        };
        for r in &rules {
            let t = std::time::Instant::now();
            let rep = crate::check::check_rule(r, &cfg, &[], &|_| {});
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
        let rows = derive(&f, &scope, &|_| {}).expect("derive");
        let n: u64 = rows.iter().map(|r| r.verdict.tally().instances()).sum();
        println!(
            "derive {name:<8} {:>8.1} ms  {n} instances",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let t = Instant::now();
    let rs = rows(None).expect("rows");
    let n = rs.len();
    rs.par_iter().for_each(|r| {
        check_row(r, &scope, &|_| {}).expect("row");
    });
    pair_rows(None).par_iter().for_each(|r| {
        check_pair(r, &scope).expect("row");
    });
    println!(
        "conform  {:>8.1} ms  {n} local rules and {} collective rows",
        t.elapsed().as_secs_f64() * 1e3,
        pair_rows(None).len()
    );
    let t = Instant::now();
    let jv = crate::jvps::jvp_rows(None);
    jv.par_iter().for_each(|r| {
        crate::jvps::check_jvp(r, &scope).expect("row");
    });
    println!(
        "jvps     {:>8.1} ms  {} JVP rules with twins",
        t.elapsed().as_secs_f64() * 1e3,
        jv.len()
    );
    let t = Instant::now();
    let ps = crate::programs::programs(&scope).expect("layers");
    println!(
        "programs {:>8.1} ms  {} layers (tensor and sequence parallel, with twins)",
        t.elapsed().as_secs_f64() * 1e3,
        ps.len()
    );
}
