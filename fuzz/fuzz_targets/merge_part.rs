//! Partition outputs, as `spmd-check merge PART...` reads them: the input
//! is the parts' texts separated by NUL bytes (which no JSON text holds);
//! each is parsed, then they are merged and the exit code read.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spmd_drivers::partition;

fuzz_target!(|data: &[u8]| {
    spmd_fuzz::init();
    let mut docs = Vec::new();
    for (i, part) in data.split(|&b| b == 0).enumerate() {
        // `read_text` refuses what is not UTF-8; `merge` what is not JSON.
        let Ok(text) = std::str::from_utf8(part) else {
            return;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
            return;
        };
        docs.push((format!("part{i}.json"), v));
    }
    let Ok(merged) = partition::merge(&docs, spmd_drivers::generated::ASSEMBLE) else {
        return;
    };
    let command = partition::command_of(&docs[0].1).unwrap_or("");
    let _ = serde_json::to_string_pretty(&merged);
    let _ = partition::exit_code(command, &merged, false);
});
