//! The released Nabla, nabla-ml 26.2251344, as recorded
//! (`tests/fixtures/nabla_typing_26.2251344.json`, SPEC.md §16.4): the
//! recording replays against its dialect version `nabla@26.2251344`, a
//! tampered recording does not, and the oracle refutes the released rules
//! where the seeds' `nabla` is sound or says nothing.

mod common;

use spmd_check::dialects::nabla::{self, Version};
use spmd_check::dialects::{OpClass, Outcome};
use spmd_check::fidelity::{default_dir, dialect_check, run, CaseResult};
use spmd_check::semantics::State::{Invariant as I, Partial as P};

const FIXTURE: &str = "nabla_typing_26.2251344.json";

fn fixture() -> serde_json::Value {
    let text = std::fs::read_to_string(format!("{}/{FIXTURE}", default_dir())).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Fidelity on a directory holding only `doc` as the Nabla fixture.
fn replay(tag: &str, doc: &serde_json::Value) -> Vec<CaseResult> {
    let dir = common::fresh_dir("nabla", tag);
    std::fs::write(dir.join(FIXTURE), doc.to_string()).unwrap();
    run(dir.to_str().unwrap()).unwrap()
}

fn case<'a>(rs: &'a [CaseResult], id: &str) -> &'a CaseResult {
    rs.iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no case {id}"))
}

/// The fixture says how it was run: the pinned versions and both shims.
#[test]
fn the_recording_says_how_it_was_run() {
    let v = fixture();
    assert_eq!(v["system"], "nabla");
    assert_eq!(v["version"], "26.2251344");
    let w = &v["recorded_with"];
    assert_eq!(w["nabla-ml"], "26.2251344");
    assert_eq!(w["modular"], "26.3.0");
    assert_eq!(w["max"], "26.3.0");
    let shims = w["shims"].as_array().unwrap();
    assert_eq!(shims.len(), 2, "{shims:?}");
    assert!(shims[0]
        .as_str()
        .unwrap()
        .contains("importlib.metadata.version"));
    assert!(shims[1].as_str().unwrap().contains("RemoveDeadValuesPass"));
    assert!(v["cases"].as_array().unwrap().len() >= 150);
}

/// Every recorded case is classified; the model reproduces every per-rank
/// output (no mismatch); `nabla@26.2251344` matches the release on every
/// case; and the release's defects are the cases the issue names.
#[test]
fn the_recording_replays_against_the_released_dialect() {
    let rs = replay("as-recorded", &fixture());
    assert_eq!(rs.len(), fixture()["cases"].as_array().unwrap().len());
    for r in &rs {
        assert_ne!(r.class.key(), "model_mismatch", "{} {:?}", r.id, r.class);
        match r.dialect.as_ref() {
            Some(d) => assert!(d.matches(), "{}: {}", r.id, d.line()),
            // sum, mean and max of a sharded operand: the one-axis type
            // does not say which dim is sharded; not compared.
            // The collectives are no typing cases.
            None => assert!(
                [
                    "sum_S_",
                    "mean_S_",
                    "max_S_",
                    "all_reduce_P_",
                    "all_gather_S_",
                    "reduce_scatter_P_",
                ]
                .iter()
                .any(|p| r.id.starts_with(p)),
                "{}: no dialect check",
                r.id
            ),
        }
        if let Some(d) = r.class.detail() {
            assert!(!d.starts_with("unknown case kind"), "{}: {d}", r.id);
        }
    }
    // Nabla's all_reduce and reduce_scatter of a partial vector and
    // all_gather of a sharded one, and the gradients nabla.vjp gives, equal
    // the catalogue's all_reduce(I), reduce_scatter(dim=0) and
    // all_gather(I, dim=0) with their transposes, and are sound.
    for n in 2..=4 {
        for c in ["all_reduce_P", "all_gather_S", "reduce_scatter_P"] {
            let r = case(&rs, &format!("{c}_n{n}"));
            assert_eq!(r.class.key(), "agree", "{}: {:?} {}", r.id, r.class, r.note);
            assert!(r.note.contains("forward and transpose equal"), "{}", r.note);
        }
    }
    // Wrong values, with the property that fails.
    for (id, prop) in [
        ("add_P_R_n2", "F3"),
        ("add_R_P_n3", "F3"),
        ("mul_P_P_n2", "F2"),
        ("div_R_P_n2", "F2"),
        ("relu_P_n2", "F2"),
        ("concat_P_R_n2", "F3"),
        ("max_P_n2", "F2"),
        ("add_S_P_n2", "F3"),
        ("cumsum_S_n3", "F3"),
        ("concat_S_S_n2", "F3"),
    ] {
        let r = case(&rs, id);
        assert_eq!(
            r.class.key(),
            "real_defect",
            "{id}: {:?} {}",
            r.class,
            r.note
        );
        assert!(
            r.class.detail().unwrap().starts_with(prop),
            "{id}: {:?}",
            r.class
        );
    }
    // The linear ones Nabla may keep partial are sound.
    for id in [
        "add_P_P_n2",
        "neg_P_n3",
        "sum_P_n2",
        "mean_P_n4",
        "slice_P_n2",
        "mul_R_P_n2",
        "matmul_P_R_n2",
        "concat_P_P_n2",
        "add_R_R_n4",
        "add_S_R_n2",
        "mul_P_S_n3",
        "relu_S_n2",
    ] {
        assert_eq!(
            case(&rs, id).class.key(),
            "agree",
            "{id}: {:?}",
            case(&rs, id).class
        );
    }
    // Exactly these typings are wrong, on every recorded mesh (2, 3, 4):
    // a partial operand of a non-linear use kept partial (also after
    // Nabla gathers a sharded operand beside it), and two ops on sharded
    // vectors whose blocks are not the global result's.
    let mut defects: Vec<String> = rs
        .iter()
        .filter(|r| r.class.key() == "real_defect")
        .map(|r| r.id.rsplit_once("_n").unwrap().0.to_string())
        .collect();
    assert_eq!(defects.len(), 69, "{defects:?}");
    defects.sort();
    defects.dedup();
    assert_eq!(
        defects,
        [
            "abs_P",
            "add_P_R",
            "add_P_S",
            "add_R_P",
            "add_S_P",
            "add_const_P",
            "concat_P_R",
            "concat_P_S",
            "concat_R_P",
            "concat_S_P",
            "concat_S_S",
            "cumsum_S",
            "div_P_P",
            "div_R_P",
            "div_S_P",
            "matmul_P_P",
            "max_P",
            "mul_P_P",
            "relu_P",
            "sub_P_R",
            "sub_P_S",
            "sub_R_P",
            "sub_S_P"
        ]
    );
}

/// The negative twins: a recorded per-rank output changed is a model
/// mismatch, and a recorded outcome changed (Nabla all-reducing add(P, R)
/// to replicated) makes the released dialect differ.
#[test]
fn a_tampered_recording_fails_fidelity() {
    let mut v = fixture();
    let cases = v["cases"].as_array_mut().unwrap();
    let add = cases.iter_mut().find(|c| c["id"] == "add_P_P_n2").unwrap();
    add["real"]["output_per_rank"][0][0] = serde_json::json!(99);
    let apr = cases.iter_mut().find(|c| c["id"] == "add_P_R_n2").unwrap();
    apr["real"]["output"]["state"] = serde_json::json!("replicated");
    let rs = replay("tampered", &v);
    let r = case(&rs, "add_P_P_n2");
    assert_eq!(r.class.key(), "model_mismatch", "{:?}", r.class);
    let d = case(&rs, "add_P_R_n2").dialect.as_ref().unwrap();
    assert!(!d.matches(), "{}", d.line());
    assert_eq!(d.ours, "accepted -> partial");
    // And the command exits 1 on the mismatch.
    let dir = common::fresh_dir("nabla", "tampered-cli");
    std::fs::write(dir.join(FIXTURE), v.to_string()).unwrap();
    let (code, out, _) = common::run(&["fidelity", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("model_mismatch"), "{out}");
}

/// The seeds' `nabla` is not the release: on the same recording it differs
/// exactly where the release keeps a partial operand of a non-linear use
/// partial, and asks for an all_reduce there.
#[test]
fn the_seed_dialect_differs_from_the_release() {
    let v = fixture();
    let d = |id: &str| {
        let c = v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap();
        dialect_check("nabla", "seeds", c).unwrap()
    };
    for id in ["add_P_R_n2", "relu_P_n2", "concat_P_R_n2"] {
        let x = d(id);
        assert!(!x.matches(), "{id}: {}", x.line());
        assert_eq!(x.ours, "accepted -> replicated after all_reduce", "{id}");
        assert_eq!(x.real, "accepted -> partial", "{id}");
    }
    for id in ["mul_P_P_n2", "div_R_P_n2"] {
        assert!(d(id).ours.starts_with("unknown"), "{id}: {}", d(id).ours);
    }
    for id in ["add_P_P_n2", "neg_P_n2", "sum_P_n2", "add_R_R_n2"] {
        assert!(d(id).matches(), "{id}: {}", d(id).line());
    }
}

fn rule(dialect: &str, expr: &str, inputs: &[&str], output: &str) -> String {
    let vars: Vec<String> = ["a", "b"][..inputs.len()]
        .iter()
        .map(|v| format!("{v:?}"))
        .collect();
    let ins: Vec<String> = inputs.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "[[rule]]\nname = \"r\"\ndialect = {dialect:?}\nmesh = {{ x = 2 }}\nop = {{ expr = {expr:?} }}\nvars = [{}]\ninputs = [{}]\noutput = {output:?}\n",
        vars.join(", "),
        ins.join(", ")
    )
}

/// `check --json` of one rule: exit code, verdict and property.
fn check(tag: &str, text: &str) -> (i32, String, Option<String>, serde_json::Value) {
    let f = common::temp_rule_file(&format!("{tag}.toml"), text);
    let (code, out, err) = common::run(&["check", &f, "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{tag}: {e}: {out} {err}"));
    let r = common::rule_named(&v, "r");
    (
        code,
        r["verdict"].as_str().unwrap_or("").to_string(),
        r["property"].as_str().map(String::from),
        r,
    )
}

const ISSUE_OPS: &[(&str, &str, &[&str], &str)] = &[
    // name, expression, inputs, the property the release fails
    ("add_P_R", "a + b", &["partial", "replicated"], "F3"),
    ("mul_P_P", "a * b", &["partial", "partial"], "F2"),
    ("div_R_P", "a / b", &["replicated", "partial"], "F2"),
    ("relu_P", "relu(a)", &["partial"], "F2"),
    (
        "concat_P_R",
        "concat(a, b, 0)",
        &["partial", "replicated"],
        "F3",
    ),
];

/// `spmd-check check` in the release's dialect: the output it infers is
/// partial, and the oracle refutes each typing, naming the property, with
/// a counterexample.
#[test]
fn the_released_rules_are_refuted_by_the_oracle() {
    for &(name, expr, ins, prop) in ISSUE_OPS {
        let (code, verdict, property, r) = check(
            &format!("released-{name}"),
            &rule("nabla@26.2251344", expr, ins, "partial"),
        );
        assert_eq!(code, 1, "{name}: {r}");
        assert_eq!(verdict, "unsound", "{name}: {r}");
        assert_eq!(property.as_deref(), Some(prop), "{name}: {r}");
        assert_eq!(r["counterexample"]["property"], prop, "{name}: {r}");
        assert!(r["counterexample"]["values"]
            .as_array()
            .is_some_and(|a| !a.is_empty()));
    }
    // The typing function itself, one axis: partial in, partial out, no cast.
    for (op, ins) in [
        (OpClass::Add, vec![vec![P], vec![I]]),
        (OpClass::Mul, vec![vec![P], vec![P]]),
        (OpClass::Division, vec![vec![I], vec![P]]),
        (OpClass::Nonlinear, vec![vec![P]]),
        (OpClass::Concat, vec![vec![P], vec![I]]),
    ] {
        assert_eq!(
            (Version::V26_2251344.system().typing)(op, &ins),
            Outcome::infers(vec![P]),
            "{op:?}"
        );
    }
    // `derive` classes the release's add of a partial and a replicated (or
    // gathered sharded) operand as unsound acceptances.
    let (code, out, err) = common::run(&["derive", "add", "--dialect", "nabla@26.2251344"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("4 unsound acceptance"), "{out}");
    assert!(
        out.contains("  I, P -> P      unsound F3       unsound acceptance"),
        "{out}"
    );
}

/// The seeds' `nabla` on the same ops: where it answers, it all-reduces the
/// partial operand and the result is sound; on mul(P, P) and div(R, P) the
/// seeds say nothing, and it answers Unknown rather than accept.
#[test]
fn the_seed_nabla_is_sound_on_the_same_ops() {
    for &(name, expr, ins, _) in ISSUE_OPS {
        let types: Vec<Vec<_>> = ins
            .iter()
            .map(|s| vec![if *s == "partial" { P } else { I }])
            .collect();
        let op = match name {
            "add_P_R" => OpClass::Add,
            "mul_P_P" => OpClass::Mul,
            "div_R_P" => OpClass::Division,
            "relu_P" => OpClass::Nonlinear,
            _ => OpClass::Concat,
        };
        match (nabla::SYSTEM.typing)(op, &types) {
            Outcome::Infers { output, casts } => {
                assert_eq!(output, vec![I], "{name}");
                assert!(casts.iter().all(|c| c.name == "all_reduce"), "{name}");
                let (code, verdict, _, r) = check(
                    &format!("seeds-{name}"),
                    &rule("nabla", expr, ins, "replicated"),
                );
                assert_eq!((code, verdict.as_str()), (0, "sound"), "{name}: {r}");
            }
            Outcome::Unknown(why) => {
                assert!(matches!(name, "mul_P_P" | "div_R_P"), "{name}: {why}");
            }
            Outcome::Error(e) => panic!("{name}: {e}"),
        }
    }
}
