//! A rule file (TOML or JSON), as `spmd-check check FILE` reads it: parsed,
//! elaborated and built in a tiny scope, then up to three of its rules
//! checked (replay, exhaustive scope, two random cases) and reported.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spmd_fuzz::init();
    // `read_text` refuses what is not UTF-8.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((specs, rules)) = spmd_fuzz::read_rules("fuzz.toml", text) else {
        return;
    };
    for (spec, rule) in specs.iter().zip(&rules).take(spmd_fuzz::MAX_CHECKED_RULES) {
        let _ = spmd_drivers::rules::to_toml(spec);
        spmd_fuzz::check_and_report(spec, rule, &[]);
    }
});
