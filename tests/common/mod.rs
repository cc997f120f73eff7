//! Shared by the end-to-end tests: run the built `spmd-check` binary.

use spmd_check::interp::TypedOp;
use spmd_check::semantics::perrank::{from_free, num_free};
use spmd_check::semantics::{Mesh, PerRank, Q};
use std::process::Command;

#[allow(dead_code)]
pub mod registry;

/// A small deterministic generator (no float, no clock).
#[allow(dead_code)]
pub struct Lcg(pub u64);

#[allow(dead_code)]
impl Lcg {
    /// A number below `n`.
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
    /// An integer from -3 to 3.
    pub fn int(&mut self) -> Q {
        Q::int(self.next(7) as i64 - 3)
    }
    /// An integer from -3 to 3 over 1 or 2.
    pub fn frac(&mut self) -> Q {
        Q::frac(self.next(7) as i64 - 3, self.next(2) as i64 + 1)
    }
}

/// Random well-formed inputs of `op` on `m` with these shapes, each free
/// scalar drawn by `draw`.
#[allow(dead_code)]
pub fn random_inputs<S: AsRef<[usize]>>(
    op: &TypedOp,
    m: &Mesh,
    shapes: &[S],
    rng: &mut Lcg,
    draw: fn(&mut Lcg) -> Q,
) -> Vec<PerRank> {
    op.inputs
        .iter()
        .zip(shapes)
        .map(|(t, s)| {
            let s = s.as_ref();
            let vals: Vec<Q> = (0..num_free(m, t, s)).map(|_| draw(rng)).collect();
            from_free(m, t, s, &vals)
        })
        .collect()
}

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

/// A fresh, empty directory of this test process, `TAG-NAME`.
#[allow(dead_code)]
pub fn fresh_dir(tag: &str, name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-{tag}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The report of rule `name` in `check --json` output.
#[allow(dead_code)]
pub fn rule_named(v: &serde_json::Value, name: &str) -> serde_json::Value {
    v["rules"]
        .as_array()
        .expect("check --json gives an object with `rules`")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no rule {name} in {v}"))
        .clone()
}

/// Exit code, stdout and stderr of `spmd-check ARGS`.
#[allow(dead_code)]
pub fn run(args: &[&str]) -> (i32, String, String) {
    run_in(std::path::Path::new("."), args)
}

/// `run` in the directory `dir`.
#[allow(dead_code)]
pub fn run_in(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spmd-check"))
        .current_dir(dir)
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

/// The lines of an error on stderr that are not a source snippet: 1 for a
/// well-formed error. A snippet (SPEC.md §11.4) may follow the one-line
/// error; each of its lines starts with a space or with `N |`, and it shows
/// a caret line.
#[allow(dead_code)]
pub fn error_lines(err: &str) -> usize {
    let snippet = |l: &str| {
        l.starts_with(' ') || {
            let d = l.bytes().take_while(u8::is_ascii_digit).count();
            d > 0 && l[d..].starts_with(" |")
        }
    };
    let lines: Vec<&str> = err.trim().lines().collect();
    let body = lines.iter().filter(|l| !snippet(l)).count();
    if body < lines.len() {
        // A snippet has its caret line.
        assert!(err.contains('^'), "a snippet without a caret: {err}");
    }
    body
}

/// The rules of the examples' rule files that the core oracle checks (no
/// pending kinds, no uneven shards), each with its file, built in `scope`.
#[allow(dead_code)]
pub fn core_example_rules(
    scope: &spmd_check::generators::Scope,
) -> Vec<(&'static str, spmd_check::rules::Rule)> {
    let mut out = vec![];
    for file in [
        "examples/rules.toml",
        "examples/global.toml",
        "examples/jvps.toml",
    ] {
        let text = std::fs::read_to_string(file).expect("reads");
        let specs = spmd_check::rules::parse_file(file, &text).expect("parses");
        for r in spmd_check::rules::build(file, &text, &specs, scope).expect("builds") {
            if r.pending.is_none() && r.uneven.is_none() {
                out.push((file, r));
            }
        }
    }
    out
}

/// Each class's first program of JAX's and DTensor's generated programs of
/// one and two steps, as rules built in `scope`.
#[allow(dead_code)]
pub fn generated_rules(scope: &spmd_check::generators::Scope) -> Vec<spmd_check::rules::Rule> {
    let mut rules = vec![];
    for system in ["jax", "dtensor"] {
        let sys = spmd_check::dialects::system(system).expect("a system");
        for depth in 1..=2 {
            let t = spmd_check::generated::classify(sys, depth);
            for class in &t.classes {
                let spec = &t.accepted[class[0] as usize].1.spec;
                if let Ok(r) = spmd_check::generated::build_spec(spec, scope) {
                    rules.push(r);
                }
            }
        }
    }
    rules
}

/// Every one-axis typing of each named built-in, as `derive` makes them,
/// with a name and the meshes of `scope` it is checked on.
#[allow(dead_code)]
pub fn builtin_typings(
    names: &[&str],
    scope: &spmd_check::generators::Scope,
) -> Vec<(
    String,
    spmd_check::interp::TypedOp,
    Vec<spmd_check::semantics::Mesh>,
)> {
    use spmd_check::generators::{all_types, meshes_for, tuples};
    let mut out = vec![];
    let types = all_types(1);
    for name in names {
        let f = spmd_check::interp::builtin(name).expect("a built-in");
        for ins in tuples(&types, f.arity()) {
            for o in &types {
                let op = spmd_check::interp::TypedOp::local(f.clone(), ins.clone(), o.clone());
                let meshes = meshes_for(&op, scope);
                out.push((format!("{name} {ins:?} -> {o:?}"), op, meshes));
            }
        }
    }
    out
}

/// The rules that `check_op` checks whole (a backward, no pending kinds),
/// each as a name, its typed op and its meshes.
#[allow(dead_code)]
pub fn checked_ops(
    rules: Vec<spmd_check::rules::Rule>,
) -> Vec<(
    String,
    spmd_check::interp::TypedOp,
    Vec<spmd_check::semantics::Mesh>,
)> {
    rules
        .into_iter()
        .filter(|r| r.has_backward && r.pending.is_none())
        .map(|r| (r.name.clone(), r.op, r.meshes))
        .collect()
}
