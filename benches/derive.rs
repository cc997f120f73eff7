//! Speed of the main jobs, measured (never asserted). Run with
//! `cargo bench` or `spmd-check bench`; both print wall-clock times.

use spmd_check::conform::{check_row, rows};
use spmd_check::derive::derive;
use spmd_check::generators::Scope;
use spmd_check::interp::builtin;
use std::time::Instant;

fn main() {
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
