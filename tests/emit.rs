//! `spmd-check check --emit jax|pytorch` (SPEC.md §20.2): a counterexample
//! becomes a script carrying the oracle's exact values. Running the scripts
//! needs the real frameworks (`bash peers/repro.sh`); these tests check what
//! is written without them.

mod common;
use common::run;
use spmd_check::check::{check_rule, CheckConfig};
use spmd_check::emit::{emit_script, Lang};
use spmd_check::rules::{parse_file, to_toml, Rule};

const FLOOR_DIV: &str = r#"
[[rule]]
name = "floor division keeps P"
dialect = "spmd_types"
op = { expr = "floor(x / y)" }
inputs = ["P", "R"]
output = "P"
"#;

/// The wrong twin's sound sibling: true division by a replicated value is
/// linear in the dividend, so P / R -> P is sound and nothing is emitted.
const TRUE_DIV: &str = r#"
[[rule]]
name = "true division keeps P"
dialect = "spmd_types"
op = { expr = "x / y" }
inputs = ["P", "R"]
output = "P"
"#;

fn cfg() -> CheckConfig {
    CheckConfig {
        scope: spmd_generators::Scope::default(),
        cases: 0,
        seed: 0,
    }
}

fn script(text: &str, lang: Lang) -> Option<Result<String, String>> {
    let rule = Rule::from_toml_str(text).unwrap();
    let spec = parse_file("<t>", text).unwrap().remove(0);
    let rep = check_rule(&rule, &cfg(), &[], &|_| {});
    rep.verdict
        .violation()
        .map(|v| emit_script(lang, &rule, &to_toml(&spec), v))
}

/// The embedded `DATA = json.loads("...")` of a script.
fn data(script: &str) -> serde_json::Value {
    let line = script
        .lines()
        .find(|l| l.starts_with("DATA = json.loads("))
        .expect("a DATA line");
    let lit = &line["DATA = json.loads(".len()..line.len() - 1];
    let text: String = serde_json::from_str(lit).expect("a JSON string literal");
    serde_json::from_str(&text).expect("JSON data")
}

#[test]
fn floor_division_gives_a_pytorch_script_with_the_oracles_values() {
    let s = script(FLOOR_DIV, Lang::Pytorch)
        .expect("unsound")
        .expect("emitted");
    assert!(
        s.contains("torch.div(a0, a1, rounding_mode=\"floor\")"),
        "{s}"
    );
    assert!(s.contains("LocalTensorMode") && s.contains("fake_pg"));
    let d = data(&s);
    assert_eq!(d["property"], "F2");
    assert_eq!(d["output"], "P");
    assert_eq!(d["ranks"], 2);
    let states: Vec<_> = d["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["state"].clone())
        .collect();
    assert_eq!(states, ["P", "R"]);
    // The oracle's outputs for the instance and its equivalent twin: both
    // are computed rank by rank, so the framework must match them exactly.
    let oracle = d["oracle"].as_array().unwrap();
    let out = |l: &str| oracle.iter().find(|o| o["label"] == l).unwrap()["per_rank"].clone();
    assert_eq!(out("out"), serde_json::json!([["0"], ["0"]]));
    assert_eq!(out("out'"), serde_json::json!([["-1"], ["0"]]));
    assert_ne!(out("out"), out("out'"));
    assert_eq!(d["alternatives"].as_array().unwrap().len(), 1);
}

#[test]
fn the_sound_sibling_emits_nothing() {
    assert!(script(TRUE_DIV, Lang::Pytorch).is_none());
    assert!(script(TRUE_DIV, Lang::Jax).is_none());
}

#[test]
fn jax_script_forces_host_devices_and_carries_the_cotangent() {
    let rule = r#"
[[rule]]
name = "dot of two reduced operands to invariant"
dialect = "jax"
op = "matmul"
inputs = ["P(None, None, reduced={'x'})", "P(None, None, reduced={'x'})"]
output = "P(None, None)"
"#;
    let s = script(rule, Lang::Jax).expect("unsound").expect("emitted");
    assert!(s.contains("--xla_force_host_platform_device_count=2"));
    assert!(s.contains("jax.shard_map") && s.contains("jnp.einsum(\"ij,jk->ik\", a0, a1)"));
    let d = data(&s);
    assert_eq!(d["property"], "B3");
    assert_eq!(d["backward"], true);
    assert_eq!(d["output"], "I");
    let labels: Vec<_> = d["oracle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["label"].as_str().unwrap().to_string())
        .collect();
    assert!(labels.contains(&"g".to_string()), "{labels:?}");
}

#[test]
fn what_cannot_be_spelled_says_why() {
    // pmean is emitted for JAX as `lax.pmean`, not for PyTorch (spmd_types
    // has no pmean), which says so in one line.
    let gather = r#"
[[rule]]
name = "pmean with pvary as its backward"
dialect = "jax"
forward = "pmean"
backward = "pvary"
inputs = ["Varying"]
output = "Invariant"
"#;
    let s = script(gather, Lang::Jax)
        .expect("unsound")
        .expect("emitted");
    assert!(s.contains("return lax.pmean(a0, DATA[\"axis\"])"), "{s}");
    assert_eq!(data(&s)["declared_backward"], "pvary()[Invariant->Varying]");
    let why = script(gather, Lang::Pytorch).expect("unsound").unwrap_err();
    assert!(why.contains("no spmd_types call"), "{why}");
    // A constant that float64 does not hold exactly is refused, not rounded.
    let third = r#"
[[rule]]
name = "x * 0.1 + 1 keeps P"
op = { expr = "x * 0.1 + 1" }
inputs = ["P"]
output = "P"
"#;
    let why = script(third, Lang::Pytorch).expect("unsound").unwrap_err();
    assert!(why.contains("1/10 is not exact in float64"), "{why}");
}

#[test]
fn cli_writes_one_script_per_counterexample() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-check-emit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("r.toml");
    std::fs::write(&rules, format!("{FLOOR_DIV}\n{TRUE_DIV}")).unwrap();
    let (code, out, err) = run(&[
        "check",
        rules.to_str().unwrap(),
        "--cases",
        "0",
        "--emit",
        "pytorch",
        "--emit-dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let written: Vec<_> = out
        .lines()
        .filter(|l| l.contains("pytorch repro written to"))
        .collect();
    assert_eq!(written.len(), 1, "{out}");
    let path = written[0].rsplit(' ').next().unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("floor division keeps P"));
    // The script is valid Python where python3 is installed.
    if let Ok(o) = std::process::Command::new("python3")
        .args([
            "-c",
            "import ast,sys; ast.parse(open(sys.argv[1]).read())",
            path,
        ])
        .output()
    {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (code, _, err) = run(&["check", rules.to_str().unwrap(), "--emit", "tensorflow"]);
    assert_eq!(code, 2, "{err}");
}

// ---- External kernels (SPEC.md §20.4): a closure as a local op, called
// ---- only where float64 is exact.

mod external {
    use spmd_check::check::CheckConfig;
    use spmd_check::interp::external::{from_f64, to_f64, External, KernelError};
    use spmd_check::semantics::{Dialect, Tensor};

    fn cfg() -> CheckConfig {
        CheckConfig {
            scope: spmd_generators::Scope::default(),
            cases: 0,
            seed: 0,
        }
    }

    /// An element-wise float64 kernel, as a real one would compute.
    fn float_kernel(
        f: impl Fn(&[f64]) -> f64 + Send + Sync + 'static,
    ) -> impl Fn(&[&Tensor]) -> Result<Tensor, KernelError> + Send + Sync + 'static {
        move |args: &[&Tensor]| {
            let n = args[0].data.len();
            let data = (0..n)
                .map(|k| {
                    let xs: Vec<f64> = args.iter().map(|t| to_f64(&t.data[k]).unwrap()).collect();
                    let y = f(&xs);
                    from_f64(y).ok_or_else(|| KernelError::Inexact(format!("{y} is not exact")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Tensor::new(args[0].shape.clone(), data))
        }
    }

    /// x * y with a hand-written backward scaled by `factor` on x.
    fn mul(factor: f64) -> External {
        let vars = vec!["x".to_string(), "y".to_string()];
        External::new("mul", vars, vec![1, 1], float_kernel(|v| v[0] * v[1])).with_backward(
            move |args: &[&Tensor], g: &Tensor| {
                let dx = float_kernel(move |v| factor * v[1] * v[2])(&[args[0], args[1], g])?;
                let dy = float_kernel(|v| v[0] * v[2])(&[args[0], args[1], g])?;
                Ok(vec![dx, dy])
            },
        )
    }

    #[test]
    fn a_correct_kernel_is_sound_and_an_off_by_two_backward_fails_b3() {
        let ok = spmd_check::check_external(mul(1.0), &["P", "R"], "P", Dialect::SpmdTypes, &cfg())
            .unwrap();
        assert!(
            ok.verdict.is_sound(),
            "{}",
            spmd_check::report::rule_word(&ok)
        );
        assert!(ok.backward_checked);
        let bad =
            spmd_check::check_external(mul(2.0), &["P", "R"], "P", Dialect::SpmdTypes, &cfg())
                .unwrap();
        let v = bad
            .verdict
            .violation()
            .expect("the off-by-two backward is caught");
        assert_eq!(v.property.code(), "B3", "{}", v.report());
        // A wrong typing of the right kernel fails a forward property.
        let pp = spmd_check::check_external(mul(1.0), &["P", "P"], "P", Dialect::SpmdTypes, &cfg())
            .unwrap();
        assert_eq!(pp.verdict.violation().unwrap().property.code(), "F2");
    }

    #[test]
    fn a_kernel_that_rounds_makes_the_verdict_undetermined() {
        let third = External::new(
            "third",
            vec!["x".into()],
            vec![1],
            float_kernel(|v| v[0] / 3.0),
        );
        let rep =
            spmd_check::check_external(third, &["P"], "P", Dialect::SpmdTypes, &cfg()).unwrap();
        assert_eq!(rep.verdict.name(), "undetermined");
        let why = rep.verdict.undetermined_reason().unwrap();
        assert!(why.contains("kernel calls refused"), "{why}");
        // The same kernel scaled by 1/2 is exact everywhere: sound.
        let half = External::new(
            "half",
            vec!["x".into()],
            vec![1],
            float_kernel(|v| v[0] / 2.0),
        );
        let rep =
            spmd_check::check_external(half, &["P"], "P", Dialect::SpmdTypes, &cfg()).unwrap();
        assert!(rep.verdict.is_sound());
        assert!(!rep.backward_checked, "no backward declared");
    }

    #[test]
    fn input_types_must_fit() {
        let e = spmd_check::check_external(mul(1.0), &["P"], "P", Dialect::SpmdTypes, &cfg());
        assert!(e.is_err());
    }
}

/// A collective rule whose declared backward is wrong: all_reduce P -> R
/// transposed by a reinterpret that keeps the cotangent local (B1). The
/// PyTorch script runs spmd_types' own `all_reduce` (with its own
/// transpose) and carries the declared backward, so it can say that the
/// framework does not do what the rule declares.
const ALL_REDUCE_WRONG: &str = r#"
[[rule]]
name = "all_reduce P to R, backward keeps P"
mesh = { x = 2 }
forward = "all_reduce(R)"
inputs = ["P"]
output = "R"
backward = "reinterpret(P,R)"
"#;

/// Its sound sibling: the transpose spmd_types itself uses.
const ALL_REDUCE_RIGHT: &str = r#"
[[rule]]
name = "all_reduce P to R"
mesh = { x = 2 }
forward = "all_reduce(R)"
inputs = ["P"]
output = "R"
backward = "all_reduce(R)"
"#;

#[test]
fn a_collective_rule_gives_a_pytorch_script_with_spmd_types_call() {
    assert!(script(ALL_REDUCE_RIGHT, Lang::Pytorch).is_none(), "sound");
    let s = script(ALL_REDUCE_WRONG, Lang::Pytorch)
        .expect("unsound")
        .expect("emitted");
    assert!(s.contains("all_reduce(a0, PG, src=P, dst=R)"), "{s}");
    let d = data(&s);
    assert_eq!(d["property"], "B1");
    assert!(d["declared_backward"]
        .as_str()
        .unwrap()
        .starts_with("reinterpret"));
    // The same rule for JAX: all_reduce to Reduced has no JAX call in the
    // recorded spellings, and the reason says so.
    let why = script(ALL_REDUCE_WRONG, Lang::Jax).unwrap().unwrap_err();
    assert!(why.contains("no JAX call"), "{why}");
}

/// JAX collectives as jax 0.10.2 spells them (tests/fixtures/
/// jax_collectives.json): ppermute with (source, destination) pairs.
#[test]
fn a_jax_collective_rule_gives_a_script_with_jaxs_call() {
    let wrong = r#"
[[rule]]
name = "ppermute transposed by itself (not its inverse)"
dialect = "jax"
mesh = { x = 4 }
forward = "ppermute(perm=[1,2,3,0])"
backward = "ppermute(perm=[1,2,3,0])"
inputs = ["Varying"]
output = "Varying"
"#;
    let s = script(wrong, Lang::Jax).expect("unsound").expect("emitted");
    assert!(
        s.contains("lax.ppermute(a0, DATA[\"axis\"], perm=[(0, 1), (1, 2), (2, 3), (3, 0)])"),
        "{s}"
    );
    assert_eq!(data(&s)["property"], "B3");
    // Its sound sibling, transposed by the inverse, emits nothing.
    let right = wrong
        .replace(
            "backward = \"ppermute(perm=[1,2,3,0])\"",
            "backward = \"ppermute(perm=[3,0,1,2])\"",
        )
        .replace("(not its inverse)", "by its inverse");
    assert!(script(&right, Lang::Jax).is_none());
}

/// `--json` keeps `--emit` (issue 26): each unsound rule's entry carries an
/// `emitted` object (the script's path, which exists, or why there is none;
/// with rstest the test itself), and the sound rule's entry has none. Twin:
/// without `--emit` no entry has one.
#[test]
fn json_keeps_emit() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-check-emit-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("r.toml");
    std::fs::write(&rules, format!("{FLOOR_DIV}\n{TRUE_DIV}")).unwrap();
    let f = rules.to_str().unwrap();
    let d = dir.to_str().unwrap();
    let parse = |out: &str| -> Vec<serde_json::Value> {
        serde_json::from_str::<serde_json::Value>(out).unwrap()["rules"]
            .as_array()
            .unwrap()
            .clone()
    };
    let (code, out, err) = run(&[
        "check",
        f,
        "--cases",
        "0",
        "--json",
        "--emit",
        "pytorch",
        "--emit-dir",
        d,
    ]);
    assert_eq!(code, 1, "{err}");
    let entries = parse(&out);
    let unsound: Vec<_> = entries
        .iter()
        .filter(|e| e["verdict"] == "unsound")
        .collect();
    assert!(!unsound.is_empty(), "{out}");
    for e in &unsound {
        let em = &e["emitted"];
        assert_eq!(em["kind"], "pytorch", "{e}");
        match em["path"].as_str() {
            Some(p) => assert!(std::path::Path::new(p).exists(), "{p}"),
            None => assert!(em["why"].is_string(), "{em}"),
        }
    }
    assert!(entries
        .iter()
        .filter(|e| e["verdict"] != "unsound")
        .all(|e| e.get("emitted").is_none()));
    let (_, out, _) = run(&["check", f, "--cases", "0", "--json", "--emit", "rstest"]);
    let entries = parse(&out);
    let e = entries.iter().find(|e| e["verdict"] == "unsound").unwrap();
    assert!(
        e["emitted"]["test"].as_str().unwrap().contains("#[test]"),
        "{e}"
    );
    let (_, out, _) = run(&["check", f, "--cases", "0", "--json"]);
    assert!(
        parse(&out).iter().all(|e| e.get("emitted").is_none()),
        "{out}"
    );
}
