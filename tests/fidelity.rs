//! `spmd-check fidelity` (SPEC.md §16): the recorded behaviour of the real
//! systems, replayed through the model and classified by the oracle.

use spmd_check::fidelity::{default_dir, run, CaseResult};
use std::sync::OnceLock;

/// The committed recordings replayed once for every test that reads them
/// (each reads a different part; a replay takes seconds).
fn replayed() -> &'static [CaseResult] {
    static RS: OnceLock<Vec<CaseResult>> = OnceLock::new();
    RS.get_or_init(|| run(&default_dir()).unwrap())
}

fn class_of<'a>(rs: &'a [CaseResult], system: &str, id: &str) -> &'a CaseResult {
    rs.iter()
        .find(|r| r.system == system && r.id == id)
        .unwrap_or_else(|| panic!("no case {system} {id}"))
}

#[test]
fn every_recorded_case_is_classified_and_the_model_matches_the_real_systems() {
    let rs = replayed();
    assert!(rs.len() > 1000, "{} cases", rs.len());
    for r in rs {
        if let Some(d) = r.class.detail() {
            assert!(
                !d.starts_with("unknown case kind"),
                "{} {}: {d}",
                r.system,
                r.id
            );
        }
        // The model computes exactly what the real libraries computed.
        assert_ne!(
            r.class.key(),
            "model_mismatch",
            "{} {}: {:?}",
            r.system,
            r.id,
            r.class
        );
    }
    // Agreement must not regress (counts at the time of recording).
    let agree = |s: &str| {
        rs.iter()
            .filter(|r| r.system == s && r.class.key() == "agree")
            .count()
    };
    assert!(agree("jax") >= 130, "jax: {}", agree("jax"));
    assert!(
        agree("spmd_types") >= 776,
        "spmd_types: {}",
        agree("spmd_types")
    );
    assert!(agree("dtensor") >= 16, "dtensor: {}", agree("dtensor"));
}

#[test]
fn findings_about_the_real_systems_are_computed() {
    let rs = replayed();
    // JAX refuses Invariant + Reduced, and rightly: no output type of
    // a + b is sound there.
    assert_eq!(class_of(rs, "jax", "add_I_R").class.key(), "agree");
    // JAX refuses to negate an Unreduced value, which is linear and sound.
    assert_eq!(class_of(rs, "jax", "neg_U").class.key(), "sound_rejection");
    assert_eq!(
        class_of(rs, "jax", "dot_U_R").class.key(),
        "sound_rejection"
    );
    // Mixing Invariant with Varying: JAX inserts pvary, and the result is
    // sound.
    let c = class_of(rs, "jax", "add_I_V");
    assert_eq!(c.class.key(), "agree");
    assert!(c.note.contains("pvary"), "{}", c.note);
    // ... and its gradients, with pvary transposed by psum, are JAX's.
    assert!(c.note.contains("every gradient equal JAX's"), "{}", c.note);
    // JAX's pmean transpose (divide by n, then pvary) reproduces exactly and
    // is a correct transpose.
    let c = class_of(rs, "jax", "pmean_V_n4");
    assert_eq!(c.class.key(), "agree", "{c:?}");
    assert!(c.note.contains("forward and transpose"), "{}", c.note);
}

/// The dialect typing functions speak for the real systems: every recorded
/// JAX typing case and every `infer_local_type_for_axis` case (out_partial
/// included) and torch op under `typecheck()` is run through
/// `spmd_dialects::jax` / `spmd_dialects::spmd_types` and compared with what
/// the real library did (accepted or refused, output, inserted casts).
#[test]
fn the_dialects_match_the_real_systems_on_every_typing_case() {
    let rs = replayed();
    let typing = |sys: &str, pred: &dyn Fn(&CaseResult) -> bool| -> Vec<&CaseResult> {
        rs.iter().filter(|r| r.system == sys && pred(r)).collect()
    };
    let jax = typing("jax", &|r| r.file.ends_with("jax_typing.json"));
    assert_eq!(jax.len(), 96);
    let infer = typing("spmd_types", &|r| {
        r.file.ends_with("spmd_types_typing.json") && !r.id.starts_with("torch_")
    });
    assert_eq!(infer.len(), 840);
    assert!(infer.iter().any(|r| r.id.ends_with("_outpartial")));
    let torch = typing("spmd_types", &|r| r.id.starts_with("torch_"));
    assert_eq!(torch.len(), 360);
    // Three inputs (every state triple, each linearity): spmd_types types
    // the set of input types, a Scalar taking the others' type.
    let three = typing("spmd_types", &|r| {
        r.file.ends_with("spmd_types_typing3.json")
    });
    assert_eq!(three.len(), 375);
    for r in jax.iter().chain(&infer).chain(&torch).chain(&three) {
        let d = r
            .dialect
            .as_ref()
            .unwrap_or_else(|| panic!("{} {}: not compared", r.system, r.id));
        assert!(d.matches(), "{} {}: {}", r.system, r.id, d.line());
        assert!(r.note.ends_with("dialect: matches"), "{}", r.note);
    }
    // The facts the comparison rests on, from the real cases.
    let d = |id: &str| class_of(rs, "jax", id).dialect.clone().unwrap();
    assert_eq!(d("add_I_R").real, "refused");
    assert_eq!(d("dot_I_R").real, "accepted -> Invariant");
    assert_eq!(
        d("add_V_R").real,
        "accepted -> Varying after reduced_vary_cast"
    );
    assert_eq!(d("mul_const_V").real, "accepted -> Varying after pvary");
    let d = class_of(rs, "spmd_types", "linear_R_I_nograd10")
        .dialect
        .clone()
        .unwrap();
    assert_eq!(d.ours, "accepted -> I");
    // Collective cases are not typing cases: no dialect comparison.
    assert!(class_of(rs, "jax", "psum_V_n2").dialect.is_none());
    // The command reports the counts, text and JSON.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"))
        .args(["fidelity"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("dialect matches real 96 of 96"), "{text}");
    assert!(text.contains("dialect matches real 1575 of 1575"), "{text}");
}

/// Negative twins: a fixture whose recorded value is off, or whose system
/// accepts a typing with no meaning, must be flagged.
#[test]
fn tampered_fixtures_are_caught() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-fidelity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = std::fs::read_to_string(format!("{}/jax_collectives.json", default_dir())).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&src).unwrap();
    let cases = v["cases"].as_array_mut().unwrap();
    let psum = cases.iter_mut().find(|c| c["id"] == "psum_V_n2").unwrap();
    // The real psum of 1 and 2 is 3 on both ranks; claim 4.
    psum["real"]["output_per_rank"] = serde_json::json!([[4], [4]]);
    let typing = serde_json::json!({
    "system": "jax", "version": "tampered", "cases": [
        {"kind": "typing", "id": "mul_U_U_claimed", "op": "mul", "call": "a * b",
         "mesh": {"x": 2},
         "inputs": [
             {"state": "Unreduced", "per_rank": [[1, 2], [3, 4]]},
             {"state": "Unreduced", "per_rank": [[1, 1], [2, 2]]}],
         "real": {"accepted": true, "output": {"state": "Unreduced"}, "inserted": [],
                  "jaxpr": ["mul"], "output_per_rank": [[1, 2], [6, 8]], "error": null}}
    ]});
    std::fs::write(dir.join("jax_collectives.json"), v.to_string()).unwrap();
    // JAX's gradient for the Invariant operand of a + b is the psum of the
    // cotangent; claim it is the cotangent itself.
    let src = std::fs::read_to_string(format!("{}/jax_typing.json", default_dir())).unwrap();
    let mut t: serde_json::Value = serde_json::from_str(&src).unwrap();
    let add = t["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["id"] == "add_I_V")
        .unwrap();
    let ct = add["real"]["cotangent"]["per_rank"].clone();
    add["real"]["transpose"][0]["per_rank"] = ct;
    // Flip a real outcome: claim JAX accepts Invariant + Reduced as Reduced
    // (seed 000's n-ary rule). The dialect, which follows real JAX, must
    // now differ from the fixture.
    let air = t["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["id"] == "add_I_R")
        .unwrap();
    air["real"]["accepted"] = serde_json::json!(true);
    air["real"]["error"] = serde_json::Value::Null;
    air["real"]["output"] = serde_json::json!({"state": "Reduced"});
    air["real"]["inserted"] = serde_json::json!([]);
    std::fs::write(dir.join("jax_typing.json"), t.to_string()).unwrap();
    // And spmd_types: claim `linear_R_I_nograd10` infers R.
    let src = std::fs::read_to_string(format!("{}/spmd_types_typing.json", default_dir())).unwrap();
    let mut st: serde_json::Value = serde_json::from_str(&src).unwrap();
    let ri = st["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["id"] == "linear_R_I_nograd10")
        .unwrap();
    ri["real"]["output"] = serde_json::json!("R");
    std::fs::write(dir.join("spmd_types_typing.json"), st.to_string()).unwrap();
    std::fs::write(dir.join("tampered_typing.json"), typing.to_string()).unwrap();
    let rs = run(dir.to_str().unwrap()).unwrap();
    let c = class_of(&rs, "jax", "psum_V_n2");
    assert_eq!(c.class.key(), "model_mismatch", "{c:?}");
    let c = class_of(&rs, "jax", "add_I_V");
    assert_eq!(c.class.key(), "model_mismatch", "{c:?}");
    assert!(c.class.detail().unwrap().contains("gradient of a"), "{c:?}");
    let c = class_of(&rs, "jax", "mul_U_U_claimed");
    assert_eq!(c.class.key(), "real_defect", "{c:?}");
    assert!(c.class.detail().unwrap().starts_with("F2"), "{c:?}");
    // The flipped outcomes: the dialect differs, and says how.
    let c = class_of(&rs, "jax", "add_I_R");
    assert!(
        c.note
            .contains("dialect: differs (ours refused, real accepted -> Reduced)"),
        "{c:?}"
    );
    let c = class_of(&rs, "spmd_types", "linear_R_I_nograd10");
    assert!(
        c.note
            .contains("dialect: differs (ours accepted -> I, real accepted -> R)"),
        "{c:?}"
    );
    // The untouched cases still match, and the counts say one differs.
    let text = spmd_check::fidelity::dialect_text(&rs);
    assert!(text.contains("dialect matches real 95 of 96"), "{text}");
    assert!(text.contains("dialect matches real 1199 of 1200"), "{text}");
    assert!(text.contains("jax add_I_R: dialect: differs"), "{text}");
    let j = spmd_check::fidelity::dialect_json(&rs);
    assert_eq!(j["differences"].as_array().unwrap().len(), 3, "{j}");
}

#[test]
fn the_command_reports_per_system_and_version() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"))
        .args(["fidelity", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let systems = v["systems"].as_array().unwrap();
    for s in ["jax", "spmd_types", "dtensor"] {
        let row = systems.iter().find(|r| r["system"] == s).unwrap();
        let total: u64 = [
            "agree",
            "sound_rejection",
            "real_defect",
            "model_mismatch",
            "not_expressible",
            "undetermined",
        ]
        .iter()
        .map(|k| row[*k].as_u64().unwrap())
        .sum();
        assert_eq!(total, row["cases"].as_u64().unwrap(), "{s}");
        assert!(row["version"].as_str().is_some_and(|v| !v.is_empty()));
    }
}

/// DTensor's own propagation of local ops (tests/fixtures/dtensor_ops.json,
/// torch 2.14.1): every case replayed, and the dialect follows it.
#[test]
fn dtensor_propagation_is_replayed_and_the_dialect_follows_it() {
    let rs = replayed();
    let ops: Vec<&CaseResult> = rs
        .iter()
        .filter(|r| r.file.ends_with("dtensor_ops.json"))
        .collect();
    assert_eq!(ops.len(), 87);
    let count = |k: &str| ops.iter().filter(|r| r.class.key() == k).count();
    assert_eq!(count("agree"), 87, "{ops:#?}");
    assert_eq!(count("not_expressible"), 0);
    // Partial(avg) and Partial(max) (SPEC.md §21.5): forward and gradient
    // exact, the typing deferred by the oracle.
    for id in ["mean_S", "amax_S"] {
        let c = class_of(rs, "dtensor", id);
        assert_eq!(c.class.key(), "agree", "{c:?}");
        assert!(
            c.note
                .contains("every gradient equals the exact derivative"),
            "{c:?}"
        );
        assert!(c.note.contains("defers (bounded"), "{c:?}");
    }
    // Replicate() + Partial(): DTensor divides the Replicate() operand by n
    // on every rank (Replicate() -> Partial()) first.
    let c = class_of(rs, "dtensor", "add_P_R");
    assert!(
        c.note.contains("redistributing b Replicate() -> Partial()"),
        "{c:?}"
    );
    // x @ w with w Replicate(): DTensor returns w's gradient Partial(), the
    // proposal's Reduced() reading, and that is sound.
    let c = class_of(rs, "dtensor", "matmul_S_R");
    assert_eq!(c.class.key(), "agree");
    assert!(c.note.contains("b read as Reduced()"), "{c:?}");
    let matched = ops
        .iter()
        .filter(|r| r.dialect.as_ref().is_some_and(|d| d.matches()))
        .count();
    assert_eq!(matched, 87);
    let d = class_of(rs, "dtensor", "mul_P_P").dialect.clone().unwrap();
    assert_eq!(
        d.ours,
        "accepted -> P after redistribute(1: P->I); grad Partial() on 1"
    );
    assert!(d.matches());
    // The grad-placement hook is predicted where torch returns a
    // Replicate() operand's gradient Partial().
    let d = class_of(rs, "dtensor", "mul_R_P").dialect.clone().unwrap();
    assert_eq!(d.real, "accepted -> P; grad Partial() on 0");
    assert!(d.matches());
}

/// Negative twins for the DTensor replay: a Partial() + Replicate() that
/// skipped the partition is unsound; a Replicate() gradient where DTensor
/// returns Partial() is not a gradient; a different move is a dialect
/// difference.
#[test]
fn tampered_dtensor_cases_are_caught() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-fidelity-dt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = std::fs::read_to_string(format!("{}/dtensor_ops.json", default_dir())).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&src).unwrap();
    let cases = v["cases"].as_array_mut().unwrap();
    let int = |x: &serde_json::Value| x.as_i64().unwrap();
    {
        let c = cases.iter_mut().find(|c| c["id"] == "add_P_R").unwrap();
        let a = c["inputs"][0]["per_rank"].clone();
        let b = c["inputs"][1]["per_rank"].clone();
        let out: Vec<Vec<i64>> = (0..2)
            .map(|r| (0..2).map(|i| int(&a[r][i]) + int(&b[r][i])).collect())
            .collect();
        c["real"]["inserted"] = serde_json::json!([]);
        c["real"]["output_per_rank"] = serde_json::json!(out);
    }
    {
        let c = cases.iter_mut().find(|c| c["id"] == "matmul_S_R").unwrap();
        c["real"]["transpose"][1]["placement"] = serde_json::json!("Replicate()");
    }
    {
        let c = cases.iter_mut().find(|c| c["id"] == "mul_R_P").unwrap();
        c["real"]["inserted"] =
            serde_json::json!([{"input": 1, "from": "Partial()", "to": "Replicate()"}]);
    }
    std::fs::write(dir.join("dtensor_ops.json"), v.to_string()).unwrap();
    let rs = run(dir.to_str().unwrap()).unwrap();
    let c = class_of(&rs, "dtensor", "add_P_R");
    assert_eq!(c.class.key(), "real_defect", "{c:?}");
    let c = class_of(&rs, "dtensor", "matmul_S_R");
    assert_eq!(c.class.key(), "real_defect", "{c:?}");
    assert!(c.class.detail().unwrap().starts_with("B1"), "{c:?}");
    let c = class_of(&rs, "dtensor", "mul_R_P");
    assert!(!c.dialect.as_ref().unwrap().matches(), "{c:?}");
}

/// jax 0.11.2 and 0.12.0.1 (recorded on Python 3.12): the same 96 typing
/// cases, identical but for local ops on Unreduced operands. 0.11.2
/// implements division (an Unreduced numerator over a Reduced denominator
/// stays Unreduced), which 0.10.2 refused; 0.12.0.1 adds neg and sub. The
/// oracle finds them sound, so 0.10.2's sound rejections are gone. Each
/// version is judged against the dialect of its own version (`jax@0.10`,
/// `jax@0.11`, `jax`), which matches it on all 96; the twin: the newest
/// dialect's typing differs from 0.10.2's recorded refusals.
#[test]
fn jax_0_11_implements_unreduced_division() {
    let rs = replayed();
    let at = |v: &str, id: &str| {
        rs.iter()
            .find(|r| r.system == "jax" && r.version == v && r.id == id)
            .unwrap_or_else(|| panic!("no jax {v} {id}"))
    };
    assert_eq!(at("0.10.2", "div_U_R").class.key(), "sound_rejection");
    let c = at("0.11.2", "div_U_R");
    assert_eq!(c.class.key(), "agree", "{c:?}");
    for id in ["neg_U", "sub_U_U", "div_U_R"] {
        let c = at("0.12.0.1", id);
        assert_eq!(c.class.key(), "agree", "{c:?}");
    }
    for v in ["0.10.2", "0.11.2", "0.12.0.1"] {
        let typing: Vec<&CaseResult> = rs
            .iter()
            .filter(|r| r.system == "jax" && r.version == v && r.dialect.is_some())
            .collect();
        // 0.12.0.1 adds 192 three-operand compositions, replayed through
        // elaboration (a + b + c, a * b * c, a * b + c).
        let n = if v == "0.12.0.1" { 96 + 192 } else { 96 };
        assert_eq!(typing.len(), n, "{v}");
        assert!(
            typing.iter().all(|r| r.dialect.as_ref().unwrap().matches()),
            "{v}"
        );
    }
    let three: Vec<&CaseResult> = rs
        .iter()
        .filter(|r| r.version == "0.12.0.1" && r.id.starts_with("fma_"))
        .collect();
    assert_eq!(three.len(), 64);
    assert!(three.iter().all(|r| r.class.key() == "agree"), "{three:?}");
    let real = serde_json::json!({"accepted": false});
    let case = serde_json::json!({"kind": "typing", "id": "neg_U", "op": "neg",
        "inputs": [{"state": "Unreduced"}], "real": real});
    let newest = spmd_check::fidelity::dialect_check("jax", "0.12.0.1", &case).unwrap();
    assert!(!newest.matches(), "{newest:?}");
    let old = spmd_check::fidelity::dialect_check("jax", "0.10.2", &case).unwrap();
    assert!(old.matches(), "{old:?}");
}

/// A refusal is judged by deciding every output type; a vacuous or
/// undecided oracle run is never "sound" (SPEC.md §16). spmd_types refusing
/// a nonlinear op on (R, V, P): no output type is sound, so the refusal is
/// justified (it used to be "sound as R, V, P -> I or R or V or P", from a
/// run that checked nothing). Twin: refusing the linear sum of three
/// Partial operands is a sound rejection, decided on three inputs too.
#[test]
fn three_input_refusals_are_decided_never_vacuously_sound() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-fidelity-3in-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let case = |id: &str, op: &str, inputs: &[&str]| {
        serde_json::json!({"kind": "typing", "source": "infer_local_type_for_axis",
            "id": id, "op": op, "inputs": inputs, "no_grad": null, "out_partial": false,
            "real": {"accepted": false, "output": null, "error": "SpmdTypeError: refused"}})
    };
    let f = serde_json::json!({"system": "spmd_types", "version": "three-inputs", "cases": [
        case("nonlinear_R_V_P", "linearity=NONLINEAR", &["R", "V", "P"]),
        case("linear_P_P_P", "linearity=LINEAR", &["P", "P", "P"]),
    ]});
    std::fs::write(dir.join("spmd_types_typing.json"), f.to_string()).unwrap();
    let rs = run(dir.to_str().unwrap()).unwrap();
    let n = class_of(&rs, "spmd_types", "nonlinear_R_V_P");
    assert_eq!(n.class.key(), "agree", "{n:?}");
    assert!(n.note.contains("no output type is sound"), "{n:?}");
    let l = class_of(&rs, "spmd_types", "linear_P_P_P");
    assert_eq!(l.class.key(), "sound_rejection", "{l:?}");
    assert!(l.note.contains("-> P"), "{l:?}");
}

/// JAX 0.12's collective cases are written as JAX users call them (no
/// backward, no output), so the dialect's inserted pvary, inferred output
/// and transpose are what is compared with JAX: psum of an Invariant value
/// agrees, forward and transpose. Twin: the same case with JAX's recorded
/// transpose changed on one rank is a model mismatch at the transpose.
#[test]
fn jax_0_12_collectives_replay_through_elaboration() {
    let rs = replayed();
    let c = rs
        .iter()
        .find(|r| r.system == "jax" && r.version == "0.12.0.1" && r.id == "psum_I_n4")
        .unwrap();
    assert_eq!(c.class.key(), "agree", "{c:?}");
    assert!(c.note.contains("forward and transpose equal"), "{c:?}");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-fidelity-012-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = "jax_collectives_0.12.0.1.json";
    let src = std::fs::read_to_string(format!("{}/{name}", default_dir())).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&src).unwrap();
    let case = v["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["id"] == "psum_I_n4")
        .unwrap();
    assert!(case["job"]["backward"].is_null(), "{case}");
    let t = &mut case["real"]["transpose_per_rank"];
    t[2] = serde_json::json!([0]);
    std::fs::write(dir.join(name), v.to_string()).unwrap();
    let rs = run(dir.to_str().unwrap()).unwrap();
    let c = class_of(&rs, "jax", "psum_I_n4");
    assert_eq!(c.class.key(), "model_mismatch", "{c:?}");
    assert!(c.class.detail().unwrap().contains("transpose"), "{c:?}");
}

/// Negative twins for the three-operand typings (JAX 0.12.0.1): a gradient
/// claimed wrong (the Invariant operand of `a + b + c` keeping each rank's
/// cotangent instead of their sum) is a model mismatch, and a refusal
/// flipped to an acceptance makes the dialect differ; the untouched cases
/// beside them still agree.
#[test]
fn tampered_three_operand_cases_are_caught() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-fidelity-3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src =
        std::fs::read_to_string(format!("{}/jax_typing_0.12.0.1.json", default_dir())).unwrap();
    let mut t: serde_json::Value = serde_json::from_str(&src).unwrap();
    let cases = t["cases"].as_array_mut().unwrap();
    let add3 = cases.iter_mut().find(|c| c["id"] == "add3_I_V_V").unwrap();
    let ct = add3["real"]["cotangent"]["per_rank"].clone();
    add3["real"]["transpose"][0]["per_rank"] = ct;
    let refused = cases
        .iter_mut()
        .find(|c| c["id"].as_str().unwrap().starts_with("mul3_") && c["real"]["accepted"] == false)
        .unwrap();
    let flipped = refused["id"].as_str().unwrap().to_string();
    refused["real"]["accepted"] = serde_json::json!(true);
    refused["real"]["error"] = serde_json::Value::Null;
    refused["real"]["output"] = serde_json::json!({"state": "Varying"});
    refused["real"]["inserted"] = serde_json::json!([]);
    t["cases"] = serde_json::json!(t["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(
            |c| ["add3_I_V_V", "fma_I_V_V", flipped.as_str()].contains(&c["id"].as_str().unwrap())
        )
        .cloned()
        .collect::<Vec<_>>());
    std::fs::write(dir.join("jax_typing_0.12.0.1.json"), t.to_string()).unwrap();
    let rs = run(dir.to_str().unwrap()).unwrap();
    let c = class_of(&rs, "jax", "add3_I_V_V");
    assert_eq!(c.class.key(), "model_mismatch", "{c:?}");
    let c = class_of(&rs, "jax", &flipped);
    assert!(c.note.contains("dialect: differs"), "{c:?}");
    let c = class_of(&rs, "jax", "fma_I_V_V");
    assert_eq!(c.class.key(), "agree", "{c:?}");
    assert!(c.note.contains("dialect: matches"), "{c:?}");
}

/// The notes say what happened (issue 26): a transpose that was run and
/// raised is reported as raised, not as "none spelled", and a recorded error
/// is "raised", never called a refusal. The twin: without the error the
/// transpose is compared.
#[test]
fn notes_say_a_backward_raised() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-fidelity-raised-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = std::fs::read_to_string(format!("{}/jax_collectives.json", default_dir())).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&src).unwrap();
    let cases = v["cases"].as_array_mut().unwrap();
    let mut psum = cases
        .iter()
        .find(|c| c["id"] == "psum_V_n2")
        .unwrap()
        .clone();
    psum["id"] = serde_json::json!("psum_V_n2_raised");
    psum["real"]["transpose_per_rank"] = serde_json::Value::Null;
    psum["real"]["transpose_error"] = serde_json::json!("RuntimeError: boom");
    let mut nojob = cases
        .iter()
        .find(|c| c["id"] == "psum_V_n2")
        .unwrap()
        .clone();
    nojob["id"] = serde_json::json!("psum_V_n2_nojob");
    nojob["job"] = serde_json::Value::Null;
    nojob["real"]["error"] = serde_json::json!("AttributeError: 'LocalIntNode'");
    cases.push(psum);
    cases.push(nojob);
    std::fs::write(dir.join("jax_collectives.json"), v.to_string()).unwrap();
    let rs = run(dir.to_str().unwrap()).unwrap();
    let raised = class_of(&rs, "jax", "psum_V_n2_raised");
    assert!(
        raised
            .note
            .contains("the real backward raised RuntimeError: boom"),
        "{raised:?}"
    );
    assert!(!raised.note.contains("none spelled"), "{raised:?}");
    let nojob = class_of(&rs, "jax", "psum_V_n2_nojob");
    assert!(
        nojob.note.contains("raised AttributeError")
            || format!("{:?}", nojob.class).contains("raised AttributeError"),
        "{nojob:?}"
    );
    assert!(!format!("{nojob:?}").contains("refused"), "{nojob:?}");
    let plain = class_of(&rs, "jax", "psum_V_n2");
    assert!(
        plain.note.contains("forward and transpose equal"),
        "{plain:?}"
    );
}
