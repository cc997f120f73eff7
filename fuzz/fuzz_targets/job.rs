//! A job file (JSON or TOML), as `spmd-check run JOB` reads it: parsed,
//! elaborated, built and run on its per-rank values, reported as text and
//! JSON; a small job is also checked as `run --check` does.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spmd_drivers::job;

/// The most scalars (every input on every rank) of a job also checked: the
/// command allows 2048, whose check takes seconds; the fuzzer needs many
/// runs a second.
const MAX_CHECKED_SCALARS: usize = 64;

fuzz_target!(|data: &[u8]| {
    spmd_fuzz::init();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = "fuzz.json";
    let Ok(j) = job::parse_job(file, text) else {
        return;
    };
    let Ok(r) = job::run_job(&j, file, text, false) else {
        return;
    };
    let _ = (r.to_text(), r.to_json(), r.exit_code());
    let scalars: usize = r
        .inputs
        .iter()
        .map(|x| x.value.tensors.iter().map(|t| t.data.len()).sum::<usize>())
        .sum();
    if scalars <= MAX_CHECKED_SCALARS {
        if let Ok(r) = job::run_job(&j, file, text, true) {
            let _ = (r.to_text(), r.to_json(), r.exit_code());
        }
    }
});
