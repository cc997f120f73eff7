//! Shared by the end-to-end tests: run the built `spmd-check` binary.

use std::process::Command;

/// Write `text` to a fresh file `name` in a directory of this test process,
/// with no saved regressions beside it; its path.
#[allow(dead_code)]
pub fn temp_rule_file(name: &str, text: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-check-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    let _ = std::fs::remove_file(format!("{}.regressions.json", p.display()));
    p.display().to_string()
}

/// The report of rule `name` in `check --json` output.
#[allow(dead_code)]
pub fn rule_named(v: &serde_json::Value, name: &str) -> serde_json::Value {
    v.as_array()
        .expect("check --json gives an array")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no rule {name} in {v}"))
        .clone()
}

/// Exit code, stdout and stderr of `spmd-check ARGS`.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spmd-check"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The two string literals of the first emitted `assert_counterexample(..)`
/// call (`--emit rstest`), unescaped as the Rust compiler would.
#[allow(dead_code)]
pub fn emitted_literals(out: &str) -> (String, String) {
    let call = out
        .split("assert_counterexample(")
        .nth(1)
        .expect("an emitted call");
    let mut lits = Vec::new();
    let mut chars = call.chars();
    while lits.len() < 2 {
        // Skip to the opening quote.
        for c in chars.by_ref() {
            if c == '"' {
                break;
            }
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next().expect("escape") {
                    'n' => s.push('\n'),
                    't' => s.push('\t'),
                    'r' => s.push('\r'),
                    '0' => s.push('\0'),
                    'u' => {
                        let hex: String =
                            chars.by_ref().skip(1).take_while(|&c| c != '}').collect();
                        s.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                    }
                    other => s.push(other),
                },
                c => s.push(c),
            }
        }
        lits.push(s);
    }
    (lits.remove(0), lits.remove(0))
}
