//! Elaboration (SPEC.md §15.5): a job written in JAX's language runs as
//! JAX runs it: the casts JAX inserts, the output type it infers, its
//! transposes as backwards, its refusals. Expected numbers are those real
//! JAX 0.12.0.1 gave (peers/recorded/jax_pipeline_0.12.0.1.json), worked out
//! again here by hand.

mod common;
use common::{rule_named, temp_rule_file};
use serde_json::{json, Value};
use spmd_check::job::{parse_job, run_job, CheckResult};

fn run(job: &Value, check: bool) -> Result<spmd_check::job::JobReport, String> {
    let text = job.to_string();
    let j = parse_job("job.json", &text).map_err(|e| e.0)?;
    run_job(&j, "job.json", &text, check).map_err(|e| e.0)
}

fn per_rank(v: &Value) -> Vec<Value> {
    v["per_rank"].as_array().unwrap().clone()
}

/// x Invariant + y Varying: JAX inserts pvary on x, whose transpose sums
/// the cotangents, so x's gradient is 101+201+301+401 = 1004 on every rank.
#[test]
fn invariant_plus_varying_gets_jax_gradients() {
    let job = json!({"dialect": "jax", "mesh": {"x": 4}, "op": "add",
        "inputs": [{"type": "Invariant", "per_rank": [[1], [1], [1], [1]]},
                   {"type": "Varying", "per_rank": [[10], [20], [30], [40]]}],
        "cotangent": [[101], [201], [301], [401]]});
    let r = run(&job, true).unwrap();
    let v = r.to_json();
    assert_eq!(v["output"]["type"], "V");
    let b = v["backward"].as_array().unwrap();
    assert_eq!(b[0]["type"], "I");
    assert_eq!(per_rank(&b[0]), vec![json!([1004]); 4]);
    assert_eq!(
        per_rank(&b[1]),
        vec![json!([101]), json!([201]), json!([301]), json!([401])]
    );
    assert!(
        v["notes"].to_string().contains("inserts pvary on `x`"),
        "{}",
        v["notes"]
    );
    assert!(matches!(r.check, Some(CheckResult::Pass { .. })));
}

/// The negative twin: the same program with pvary's transpose written
/// wrongly (pvary again, which keeps each rank's cotangent) is caught by
/// the oracle, at B3 or before.
#[test]
fn a_wrong_transpose_of_the_inserted_cast_is_refuted() {
    let job = json!({"dialect": "canonical", "mesh": {"x": 4},
        "names": ["x_in", "y"],
        "steps": [
            {"name": "x", "forward": "pvary", "input": "x_in", "backward": "reinterpret(V,I)", "output": "V"},
            {"name": "out", "expr": "x + y", "output": "V"}],
        "inputs": [{"type": "Invariant", "per_rank": [[1], [1], [1], [1]]},
                   {"type": "Varying", "per_rank": [[10], [20], [30], [40]]}],
        "cotangent": [[101], [201], [301], [401]]});
    match run(&job, true) {
        Ok(r) => assert!(
            matches!(r.check, Some(CheckResult::Violation(_))),
            "{}",
            r.to_text()
        ),
        // Refused before running: the written backward does not even type.
        Err(e) => assert!(e.contains("reinterpret"), "{e}"),
    }
}

/// U * U: JAX refuses a bilinear op of two Unreduced operands.
#[test]
fn unreduced_times_unreduced_is_refused_with_jax_reason() {
    let job = json!({"dialect": "jax", "mesh": {"x": 2}, "op": "mul",
        "inputs": [{"type": "Unreduced", "per_rank": [[1], [2]]},
                   {"type": "Unreduced", "per_rank": [[3], [4]]}]});
    let e = run(&job, false).unwrap_err();
    assert!(e.contains("bilinear"), "{e}");
    // Twin: U * R is accepted (one Unreduced factor beside Reduced).
    let ok = json!({"dialect": "jax", "mesh": {"x": 2}, "op": "mul",
        "inputs": [{"type": "Unreduced", "per_rank": [[1], [2]]},
                   {"type": "Reduced", "per_rank": [[3], [3]]}]});
    assert_eq!(run(&ok, false).unwrap().to_json()["output"]["type"], "P");
}

/// psum of an Invariant value: JAX pvaries it first; 4 x 5 = 20, and the
/// transpose (psum_invariant of pvary's) gives 4 x 7 = 28.
#[test]
fn psum_of_invariant_is_pvaried_first_and_transposed() {
    let job = json!({"dialect": "jax", "mesh": {"x": 4}, "forward": "psum",
        "inputs": [{"type": "Invariant", "per_rank": [[5], [5], [5], [5]]}],
        "cotangent": [[7], [7], [7], [7]]});
    let v = run(&job, true).unwrap().to_json();
    assert_eq!(per_rank(&v["output"]), vec![json!([20]); 4]);
    assert_eq!(per_rank(&v["backward"][0]), vec![json!([28]); 4]);
    // psum of Unreduced is unreduced_psum (transpose preduced): 1+2+3+4.
    let u = json!({"dialect": "jax", "mesh": {"x": 4}, "forward": "psum",
        "inputs": [{"type": "Unreduced", "per_rank": [[1], [2], [3], [4]]}],
        "cotangent": [[7], [7], [7], [7]]});
    let v = run(&u, true).unwrap().to_json();
    assert_eq!(v["output"]["type"], "I");
    assert_eq!(per_rank(&v["output"]), vec![json!([10]); 4]);
    assert_eq!(v["backward"][0]["type"], "R");
}

/// JAX's pcast table: Unreduced -> varying is refused; Reduced -> varying
/// is reduced_vary_cast.
#[test]
fn pcast_follows_jax_table() {
    let bad = json!({"dialect": "jax", "mesh": {"x": 2}, "forward": "pcast(to='varying')",
        "inputs": [{"type": "Unreduced", "per_rank": [[1], [2]]}]});
    let e = run(&bad, false).unwrap_err();
    assert!(e.contains("Unsupported pcast from=unreduced"), "{e}");
    let ok = json!({"dialect": "jax", "mesh": {"x": 2}, "forward": "pcast(to='varying')",
        "inputs": [{"type": "Reduced", "per_rank": [[1], [1]]}]});
    assert_eq!(run(&ok, false).unwrap().to_json()["output"]["type"], "V");
}

/// all_gather(..., to='invarying') is all_gather_invariant, transposed by
/// a local slice: rank r keeps entry r of the cotangent.
#[test]
fn all_gather_to_invarying() {
    let job = json!({"dialect": "jax", "mesh": {"x": 4}, "forward": "all_gather(dim=0, to='invarying')",
        "inputs": [{"type": "Varying", "per_rank": [[1], [2], [3], [4]]}],
        "cotangent": [[7, 8, 9, 10], [7, 8, 9, 10], [7, 8, 9, 10], [7, 8, 9, 10]]});
    let v = run(&job, true).unwrap().to_json();
    assert_eq!(v["output"]["type"], "I");
    assert_eq!(
        per_rank(&v["backward"][0]),
        vec![json!([7]), json!([8]), json!([9]), json!([10])]
    );
}

/// The untiled form: rank r keeps entry r of the stacked dim and drops
/// the dim. (Until now the transcription gave it the tiled slice, whose
/// result has the stacked dim still: B1 failed on every shape.)
#[test]
fn untiled_all_gather_to_invarying() {
    let job = json!({"dialect": "jax", "mesh": {"x": 2}, "forward": "all_gather(dim=0, stack, to='invarying')",
        "inputs": [{"type": "Varying", "per_rank": [[1, 2], [3, 4]]}],
        "cotangent": [[[5, 6], [7, 8]], [[5, 6], [7, 8]]]});
    let r = run(&job, true).unwrap();
    let v = r.to_json();
    assert_eq!(v["output"]["type"], "I");
    assert_eq!(
        per_rank(&v["backward"][0]),
        vec![json!([5, 6]), json!([7, 8])]
    );
    assert!(matches!(r.check, Some(CheckResult::Pass { .. })), "{v}");
}

/// Dialect names are the same in jobs and rule files: `ltensor` is read.
#[test]
fn ltensor_is_a_dialect_of_rule_files_too() {
    let text = "[[rule]]\nname = \"l\"\ndialect = \"ltensor\"\nop = \"add\"\ninputs = [\"V\", \"V\"]\noutput = \"V\"\n";
    assert!(spmd_check::rules::load_str("r.toml", text).is_ok());
    let bad = text.replace("ltensor", "ltensr");
    let e = spmd_check::rules::load_str("r.toml", &bad).unwrap_err().0;
    assert!(e.contains("canonical, spmd_types, jax"), "{e}");
}

/// The `jax` dialect follows JAX 0.12.0.1: `neg` of an Unreduced value
/// stays Unreduced, with the cotangent passed through negated. The twin:
/// the recorded 0.10.2, selected as `jax@0.10`, refuses it with
/// NotImplementedError, as that version did; and `jax@0.11` likewise.
#[test]
fn jax_versions_are_selectable_by_name() {
    let job = |d: &str| {
        json!({"dialect": d, "mesh": {"x": 2}, "op": "neg",
            "inputs": [{"type": "Unreduced", "per_rank": [[1], [2]]}],
            "cotangent": [[5], [5]]})
    };
    let r = run(&job("jax"), true).unwrap();
    let v = r.to_json();
    assert_eq!(v["output"]["type"], "P", "{v}");
    assert_eq!(per_rank(&v["output"]), vec![json!([-1]), json!([-2])]);
    assert!(matches!(r.check, Some(CheckResult::Pass { .. })));
    for old in ["jax@0.10", "jax@0.11"] {
        let e = run(&job(old), false).unwrap_err();
        assert!(e.contains("NotImplementedError"), "{old}: {e}");
    }
    let e = run(&job("jax@0.9"), false).unwrap_err();
    assert!(e.contains("jax@0.10"), "{e}");
}

/// `check` reads a rule file in JAX's language as JAX runs it: `x + y` on
/// Invariant and Varying gets JAX's pvary (with its transpose, a sum of
/// the cotangents), so the rule is sound, and the report lists the cast.
/// The twin: the same typing in canonical letters, with no cast, takes each
/// rank's cotangent as the Invariant input's gradient, and is refuted.
#[test]
fn check_elaborates_rule_files() {
    let jax = "[[rule]]\nname = \"iv\"\ndialect = \"jax\"\nop = \"add\"\ninputs = [\"Invariant\", \"Varying\"]\noutput = \"Varying\"\n";
    let f = temp_rule_file("elab-jax.toml", jax);
    let (code, out, err) = common::run(&["check", &f, "--json", "--cases", "0"]);
    assert_eq!(code, 0, "{out} {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = rule_named(&v, "iv");
    assert_eq!(r["verdict"], "sound", "{r}");
    assert!(
        r["elaboration"][0]
            .as_str()
            .unwrap()
            .contains("inserts pvary"),
        "{r}"
    );
    let canon = jax
        .replace("\"jax\"", "\"canonical\"")
        .replace("Invariant", "I")
        .replace("Varying", "V");
    let f = temp_rule_file("elab-canon.toml", &canon);
    let (code, out, err) = common::run(&["check", &f, "--json", "--cases", "0"]);
    assert_eq!(code, 1, "{out} {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = rule_named(&v, "iv");
    assert_eq!(r["verdict"], "unsound", "{r}");
    assert!(r.get("elaboration").is_none(), "{r}");
    assert!(r["property"].as_str().unwrap().starts_with('B'), "{r}");
}

/// `jax(auto_pcast=False)` (JAX 0.12.0.1 with `jax_auto_pcast=False`,
/// recorded in peers/recorded/jax_options_0.12.0.1.json): the I + V job
/// that the default dialect runs with an inserted pvary (the twin above,
/// 1004 on every rank) is refused with JAX's reason, as is psum of an
/// Invariant value; with the pcast written, the program runs and x's
/// gradient is 1004 again, as JAX's was; psum of a Varying value is the
/// default's. `jax(check_vma=False)` is refused, saying why.
#[test]
fn auto_pcast_false_refuses_what_jax_then_refuses() {
    let ins = json!([{"type": "Invariant", "per_rank": [[1], [1], [1], [1]]},
                     {"type": "Varying", "per_rank": [[10], [20], [30], [40]]}]);
    let add = json!({"dialect": "jax(auto_pcast=False)", "mesh": {"x": 4}, "op": "add",
        "inputs": ins, "cotangent": [[101], [201], [301], [401]]});
    let e = run(&add, false).unwrap_err();
    assert!(e.contains("requires varying manual axes to match"), "{e}");
    let mut default = add.clone();
    default["dialect"] = json!("jax");
    assert!(run(&default, false).is_ok());
    let written = json!({"dialect": "jax(auto_pcast=False)", "mesh": {"x": 4},
        "names": ["x_in", "y"],
        "steps": [
            {"name": "x", "forward": "pcast(to='varying')", "input": "x_in", "output": "Varying"},
            {"name": "out", "expr": "x + y", "output": "Varying"}],
        "inputs": ins, "cotangent": [[101], [201], [301], [401]]});
    let r = run(&written, true).unwrap();
    let v = r.to_json();
    assert_eq!(per_rank(&v["backward"][0]), vec![json!([1004]); 4], "{v}");
    assert!(matches!(r.check, Some(CheckResult::Pass { .. })));
    let psum = |t: &str| {
        json!({"dialect": "jax(auto_pcast=False)", "mesh": {"x": 4}, "forward": "psum",
            "inputs": [{"type": t, "per_rank": [[1], [2], [3], [4]]}],
            "cotangent": [[101], [101], [101], [101]]})
    };
    let mut inv = psum("Invariant");
    inv["inputs"][0]["per_rank"] = json!([[5], [5], [5], [5]]);
    let e = run(&inv, false).unwrap_err();
    assert!(e.contains("variant->invariant"), "{e}");
    let v = run(&psum("Varying"), true).unwrap().to_json();
    assert_eq!(per_rank(&v["output"]), vec![json!([10]); 4]);
    assert_eq!(per_rank(&v["backward"][0]), vec![json!([101]); 4]);
    let mut off = default.clone();
    off["dialect"] = json!("jax(check_vma=False)");
    let e = run(&off, false).unwrap_err();
    assert!(
        e.contains("is not modelled") && e.contains("boundary"),
        "{e}"
    );
}

/// The auto_pcast=False reading against every float64 typing JAX recorded
/// under that option (add and mul on the 16 state pairs): accepted or
/// refused, output state and casts all equal. Twin: the default reading
/// differs from the recording (it accepts I + V with a pvary).
#[test]
fn auto_pcast_false_matches_the_recorded_typing() {
    use spmd_dialects::{jax, OpClass, Outcome};
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/peers/recorded/jax_options_0.12.0.1.json"
    );
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let state = |s: &Value| {
        spmd_semantics::Dialect::Jax
            .parse_state(s.as_str().unwrap())
            .unwrap()
            .0
    };
    let (mut compared, mut default_differs) = (0, 0);
    for c in rec["settings"]["auto_pcast_false"]["typing"]
        .as_array()
        .unwrap()
    {
        if c["dtype"] != "float64" {
            continue;
        }
        let op = match c["op"].as_str().unwrap() {
            "add" => OpClass::Add,
            "mul" => OpClass::Mul,
            o => panic!("{o}"),
        };
        let ins: Vec<Vec<_>> = c["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| vec![state(&i["state"])])
            .collect();
        let real = c["accepted"] == true;
        let ours = jax::typing_no_auto_pcast(op, &ins);
        match (&ours, real) {
            (Outcome::Infers { output, casts }, true) => {
                assert!(casts.is_empty(), "{}", c["id"]);
                assert_eq!(
                    output[0],
                    state(&c["output_type"]["state_as_typed"]),
                    "{}",
                    c["id"]
                );
            }
            (Outcome::Error(_), false) => {}
            _ => panic!("{}: ours {ours:?}, JAX accepted = {real}", c["id"]),
        }
        compared += 1;
        let default = jax::typing(op, &ins);
        default_differs += usize::from(matches!(default, Outcome::Infers { .. }) != real);
    }
    assert_eq!(compared, 32);
    assert!(default_differs >= 4, "{default_differs}");
}
