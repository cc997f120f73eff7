//! V1, batching (SPEC.md §24): JAX 0.12.0.1's batching rule of each
//! collective inside `shard_map` (`dialects::jax::batch_collective`)
//! against the meaning of batching, on every batch dim, batch sizes 1 to
//! 3, meshes of 2 and 3 ranks, decided on a basis (the collectives are
//! linear). The twin: the batched form that leaves all_gather's dim where
//! it was fails V1 with a one-element batch.

use spmd_check::dialects::jax::batch_collective;
use spmd_check::interp::catalogue::collective;
use spmd_check::interp::{Collective, Kind};
use spmd_check::oracle::batching::{check_v1, linear_batches, V1Tally};
use spmd_check::semantics::uneven::Placement;
use spmd_check::semantics::{Mesh, PerRank, State, Tensor};

/// A basis of the per-rank values of a state on n ranks, every rank's
/// tensor of `shape`: one rank's unit entry (Varying, Partial), or the
/// same unit entry on every rank (Invariant, Reduced).
fn basis(s: State, shape: &[usize], n: usize) -> Vec<Vec<Tensor>> {
    let p = match s {
        State::Invariant | State::Reduced => Placement::Inv,
        State::Varying | State::Partial => Placement::Part,
    };
    p.basis(shape, n).unwrap()
}

fn run<'a>(
    c: &'a Collective,
    m: &'a Mesh,
) -> impl Fn(&[Vec<Tensor>]) -> Result<Vec<Tensor>, String> + 'a {
    move |xs: &[Vec<Tensor>]| {
        let x = PerRank {
            tensors: xs[0].clone(),
        };
        let shape = &xs[0][0].shape;
        c.infer(m, shape)?;
        Ok(c.forward(m, &x).tensors)
    }
}

/// V1 of `batched` (with its output batch dim) for `c` on input shape
/// `shape`, batch dim `d`, batch sizes 1 to 3: `Err` names the batch size.
fn v1(
    c: &Collective,
    batched: &Collective,
    out_d: usize,
    shape: &[usize],
    d: usize,
    n: usize,
) -> Result<u64, String> {
    let m = Mesh::line(n);
    let mut t = V1Tally::default();
    for k in 1..=3 {
        let batches = linear_batches(&basis(c.src, shape, n), k);
        check_v1(
            &run(c, &m),
            &run(batched, &m),
            &[Some(d)],
            Some(out_d),
            &batches,
            &mut t,
        )
        .map_err(|f| format!("k = {k}: {f:?}"))?;
    }
    Ok(t.batches)
}

fn jax(text: &str, src: State, dst: State) -> Collective {
    collective(text, &[src], &[dst], &["x".to_string()]).expect(text)
}

/// Every batch dim of every collective's input, under JAX's rule: which
/// (collective, shape, batch dim) fail V1.
fn jax_failures(cases: &[(&str, State, State, Vec<usize>)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (text, src, dst, shape) in cases {
        let c = jax(text, *src, *dst);
        for n in [2, 3] {
            // Shapes whose stacked or split dims need the group size.
            let shape: Vec<usize> = shape.iter().map(|&s| if s == 0 { n } else { s }).collect();
            for d in 0..=shape.len() {
                let (kind, out_d) = batch_collective(&c.kind, d).expect("a rule");
                let b = Collective { kind, ..c.clone() };
                if let Err(e) = v1(&c, &b, out_d, &shape, d, n) {
                    bad.push(format!(
                        "{text} on {shape:?}, batch dim {d}, {n} ranks: {e}"
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn jaxs_batching_rules_keep_v1_for_gathers_reductions_and_permutes() {
    use State::*;
    // A 0 in a shape is the group size.
    let cases = vec![
        ("all_gather(dim=0)", Varying, Invariant, vec![2, 1]),
        ("all_gather(dim=1)", Varying, Invariant, vec![2, 1]),
        ("all_gather(dim=0, stack)", Varying, Invariant, vec![2, 1]),
        ("all_gather(dim=1, stack)", Varying, Invariant, vec![1, 2]),
        ("psum", Varying, Invariant, vec![2, 1]),
        ("psum_scatter(dim=0)", Varying, Varying, vec![0, 2]),
        ("psum_scatter(dim=1)", Varying, Varying, vec![2, 0]),
        (
            "all_to_all(split=0, concat=1)",
            Varying,
            Varying,
            vec![0, 1],
        ),
        (
            "all_to_all(split=1, concat=0)",
            Varying,
            Varying,
            vec![1, 0],
        ),
        ("ppermute(perm=[1, 0])", Varying, Varying, vec![2, 1]),
        ("pvary", Invariant, Varying, vec![2]),
    ];
    let bad = jax_failures(&cases);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The untiled psum_scatter removes its scatter dim, but JAX's rule moves
/// a batch dim after it up one (the all_gather rule's step): V1 fails for
/// every batch dim after the scatter dim, and holds before it.
#[test]
fn jaxs_rule_for_an_untiled_psum_scatter_misplaces_a_later_batch_dim() {
    use State::*;
    for dim in [0, 1] {
        let c = jax(&format!("psum_scatter(dim={dim}, stack)"), Varying, Varying);
        for n in [2, 3] {
            let mut shape = vec![2, 2];
            shape[dim] = n;
            for d in 0..=2 {
                let (kind, out_d) = batch_collective(&c.kind, d).unwrap();
                let b = Collective { kind, ..c.clone() };
                let r = v1(&c, &b, out_d, &shape, d, n);
                assert_eq!(
                    r.is_err(),
                    d > dim,
                    "dim {dim}, batch dim {d}, {n} ranks: {r:?}"
                );
                if d > dim {
                    // Right: the output's batch dim is d - 1.
                    assert!(v1(&c, &b, d - 1, &shape, d, n).is_ok());
                }
            }
        }
    }
}

/// The issue's twin: all_gather(dim = 0) batched at dim 0 must gather at
/// dim 1; leaving it at 0 concatenates the batch and fails V1 already for
/// one element, on 2 ranks.
#[test]
fn an_all_gather_batched_at_its_own_dim_fails_v1() {
    let c = jax("all_gather(dim=0)", State::Varying, State::Invariant);
    let wrong = Collective {
        kind: Kind::AllGather {
            dim: 0,
            stack: false,
        },
        ..c.clone()
    };
    let m = Mesh::line(2);
    let mut t = V1Tally::default();
    let f = check_v1(
        &run(&c, &m),
        &run(&wrong, &m),
        &[Some(0)],
        Some(0),
        &linear_batches(&basis(State::Varying, &[1], 2), 1),
        &mut t,
    )
    .expect_err("the batch is gathered as if it were data");
    assert_eq!(f.batch.len(), 1);
    let expected = f.expected.clone().unwrap();
    assert_eq!(expected[0].shape, vec![1, 2]);
    assert_eq!(f.got.clone().unwrap()[0].shape, vec![2, 1]);
    // JAX's rule gathers at dim 1 and holds.
    let (kind, out_d) = batch_collective(&c.kind, 0).unwrap();
    assert_eq!(
        kind,
        Kind::AllGather {
            dim: 1,
            stack: false
        }
    );
    let right = Collective { kind, ..c.clone() };
    assert!(v1(&c, &right, out_d, &[1], 0, 2).is_ok());
}

mod common;

/// `check` of rules with a `vmap` (SPEC.md §24.4): JAX's rules are V1
/// sound except the untiled psum_scatter batched after its scatter dim;
/// the written twin fails; exit 1; every rule's JSON names its batched
/// form and where it came from.
#[test]
fn check_reads_vmap_rules_and_decides_v1() {
    let ex = format!("{}/examples/batching.toml", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = common::run(&["check", &ex, "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let verdicts: Vec<(String, String)> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (name, verdict) in &verdicts {
        let pin = spmd_check::batching::PINNED
            .iter()
            .find(|p| p.0 == name)
            .unwrap()
            .1;
        let unsound = pin != "sound";
        assert_eq!(verdict, if unsound { "unsound" } else { "sound" }, "{name}");
        if name.starts_with("twin:") {
            assert!(unsound, "{name}");
        }
    }
    let twin = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"].as_str().unwrap().starts_with("twin:"))
        .unwrap();
    assert_eq!(twin["property"], "V1");
    assert_eq!(twin["batching"]["picked"], false);
    assert_eq!(twin["counterexample"]["ranks"], 2);
}

/// Hostile `vmap` rules: one line naming where and what, exit 2.
#[test]
fn a_hostile_vmap_rule_is_one_line_exit_2() {
    let d = common::fresh_dir("batching", "hostile");
    let p = d.join("r.toml");
    let base = "name = \"a\"\ndialect = \"jax\"\nforward = \"all_gather(dim=0)\"\ninputs = [\"Varying\"]\noutput = \"Invariant\"\n";
    let cases = [
        ("vmap = { in_axes = [\"zero\"] }", "is not a batch dim"),
        ("vmap = { in_axes = [\"none\"] }", "nothing to batch"),
        ("vmap = { in_axes = [0, 1] }", "one input"),
        (
            "vmap = { in_axes = [0], spmd_axis_name = \"x\" }",
            "write the rule's mesh",
        ),
        (
            "vmap = { in_axes = [0], spmd_axis_name = \"b\" }\nmesh = { x = 2 }",
            "not an axis of the rule's mesh",
        ),
        (
            "vmap = { in_axes = [0], spmd_axis_name = \"x\" }\nmesh = { x = 2 }",
            "no axis beside",
        ),
        (
            "vmap = { in_axes = [0], out_axes = \"none\" }",
            "batched output",
        ),
        ("vmap = { in_axes = [0], extra = 1 }", "unknown field"),
        (
            "vmap = { in_axes = [0] }\nbatched = \"all_gathr(dim=1)\"",
            "did you mean",
        ),
        (
            "batched = \"all_gather(dim=1)\"",
            "write the rule's `vmap` too",
        ),
        (
            "vmap = { in_axes = [0] }\nmesh = { x = 2, y = 2 }",
            "one mesh axis",
        ),
        ("vmap = { in_axes = [99] }", "at most 8"),
    ];
    for (extra, want) in cases {
        std::fs::write(&p, format!("[[rule]]\n{base}{extra}\n")).unwrap();
        let (code, out, err) = common::run(&["check", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{extra}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{extra}: {err}");
        assert!(err.contains(want), "{extra}: {err}");
    }
    // A dialect without a modelled batching rule asks for `batched`.
    std::fs::write(
        &p,
        "[[rule]]\nname = \"a\"\ndialect = \"spmd_types\"\nforward = \"all_gather(R, dim=0)\"\ninputs = [\"V\"]\noutput = \"R\"\nvmap = { in_axes = [0] }\n",
    )
    .unwrap();
    let (code, _, err) = common::run(&["check", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("write the batched form"), "{err}");
}

/// `conform`'s transforms section (SPEC.md §24.5): every rule of
/// examples/batching.toml comes out as pinned, the twin is rejected by V1;
/// its table fails exactly a row whose pin is not its verdict.
#[test]
fn the_transforms_section_comes_out_as_pinned() {
    use spmd_check::batching::{conform_rows, key, PINNED};
    use spmd_check::pinned::Verdicted;
    use spmd_check::report::table::{conform_tables, Outcome};
    let mut rows = conform_rows(None).expect("the section's rules build");
    assert_eq!(rows.len(), PINNED.len());
    for r in &rows {
        assert!(r.as_pinned(), "{}: {}", r.name, key(&r.report));
        if r.twin() {
            assert!(r.report.failed(), "{}", r.name);
        }
    }
    let was = key(&rows[0].report);
    rows[0].pinned = Some(if was == "sound" {
        "unsound V1"
    } else {
        "sound"
    });
    let t = conform_tables(&[], &[], &[], &[], &[], &[], None, None, Some(&rows));
    let sec = t.tables.iter().find(|t| t.title == "transforms").unwrap();
    assert_eq!(sec.rows[0].outcome, Outcome::Fail);
    assert!(sec.rows[1..].iter().all(|r| r.outcome == Outcome::Pass));
}

/// Fidelity over the vmap recording (SPEC.md §24.6): JAX 0.12.0.1's
/// per-rank outputs of every linear collective under vmap, inside and
/// around shard_map, equal the model's batching rule run on the same
/// inputs; they satisfy V1 everywhere but the untiled psum_scatter batched
/// after its scatter dim (24 cases, 12 of them a silent wrong value, 12 an
/// IndexError). The twin: a recording with one output entry changed is a
/// model mismatch.
#[test]
fn fidelity_replays_jaxs_vmap_recording() {
    let dir = spmd_check::fidelity::default_dir();
    let all = spmd_check::fidelity::transforms::run(&dir).expect("the recording reads");
    let (spmd, rs): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|r| r.id.starts_with("spmd_axis_name_cases"));
    let count = |class: &str| rs.iter().filter(|r| r.class.key() == class).count();
    assert_eq!(count("model_mismatch"), 0);
    assert_eq!(count("real_defect"), 24);
    assert!(rs
        .iter()
        .filter(|r| r.class.key() == "real_defect")
        .all(|r| r.id.contains("psum_scatter") && r.id.contains("\"tiled\":false")));
    assert_eq!(count("agree"), 402);
    // spmd_axis_name (SPEC.md §24.12): each shard of the batch on its own
    // ranks, JAX's global output against the stack of the elements'.
    let scount = |class: &str| spmd.iter().filter(|r| r.class.key() == class).count();
    assert_eq!(spmd.len(), 212);
    assert_eq!(scount("model_mismatch"), 0);
    assert_eq!(scount("agree"), 161);
    assert_eq!(scount("real_defect"), 25);
    assert!(spmd
        .iter()
        .filter(|r| r.class.key() == "real_defect")
        .all(|r| r.id.contains("psum_scatter")
            || r.id.contains("all_gather")
            || r.id.contains("pcast")));
    // The twin.
    let text = std::fs::read_to_string(format!("{dir}/{}", spmd_check::fidelity::transforms::FILE))
        .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = v["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["collective"] == "all_gather" && c["outputs"].is_array())
        .unwrap();
    let out = c["outputs"][0].as_str().unwrap().to_string();
    let (shape, vals) = out.split_once(':').unwrap();
    let mut vals: Vec<String> = vals.split(',').map(String::from).collect();
    vals[0] = "999".into();
    c["outputs"][0] = serde_json::json!(format!("{shape}:{}", vals.join(",")));
    let tmp = common::fresh_dir("batching", "fidelity");
    std::fs::create_dir_all(tmp.join("transforms")).unwrap();
    std::fs::write(
        tmp.join(spmd_check::fidelity::transforms::FILE),
        v.to_string(),
    )
    .unwrap();
    let rs = spmd_check::fidelity::transforms::run(tmp.to_str().unwrap()).unwrap();
    assert_eq!(
        rs.iter()
            .filter(|r| r.class.key() == "model_mismatch")
            .count(),
        1
    );
    // The twin of the spmd_axis_name replay: one device's output changed.
    let mut w = v.clone();
    let c = w["spmd_axis_name_cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["collective"] == "all_gather" && c["outputs"].is_array())
        .unwrap();
    let out = c["outputs"][1].as_str().unwrap().to_string();
    let (shape, vals) = out.split_once(':').unwrap();
    let mut vals: Vec<String> = vals.split(',').map(String::from).collect();
    vals[0] = "999".into();
    c["outputs"][1] = serde_json::json!(format!("{shape}:{}", vals.join(",")));
    std::fs::write(
        tmp.join(spmd_check::fidelity::transforms::FILE),
        w.to_string(),
    )
    .unwrap();
    let rs = spmd_check::fidelity::transforms::run(tmp.to_str().unwrap()).unwrap();
    // The changed case, and an Auto twin that takes its values if it has one.
    let mm: Vec<&str> = rs
        .iter()
        .filter(|r| r.id.starts_with("spmd_axis_name_cases") && r.class.key() == "model_mismatch")
        .map(|r| r.id.as_str())
        .collect();
    assert!((1..=2).contains(&mm.len()), "{mm:?}");
    assert!(mm.iter().all(|id| id.contains("all_gather")), "{mm:?}");
    // A hostile recording: a mesh of 10^12 ranks, a batch of 10^15, a
    // batch dim past the inputs' rank, a rank's input missing. Each is
    // one case that is not expressible, never a panic or a hang.
    let cases = v["cases"].as_array_mut().unwrap();
    cases[3]["mesh"] = serde_json::json!([1_000_000_000_000u64]);
    cases[4]["batch"] = serde_json::json!(1_000_000_000_000_000u64);
    cases[5]["in_axis"] = serde_json::json!(99);
    cases[6]["inputs"] = serde_json::json!(["2x2:1,2,3,4"]);
    std::fs::write(
        tmp.join(spmd_check::fidelity::transforms::FILE),
        v.to_string(),
    )
    .unwrap();
    let rs = spmd_check::fidelity::transforms::run(tmp.to_str().unwrap()).unwrap();
    for r in &rs[3..=6] {
        assert_eq!(r.class.key(), "not_expressible", "{r:?}");
    }
}

/// `run` of a collective under vmap (SPEC.md §24.7): the job's batched
/// per-rank values, each element's result, their stack and the batched
/// form's; JAX's untiled psum_scatter batched after its scatter dim fails
/// on the values (exit 1), the batched form written as the meaning asks
/// holds on them and on every batch of the shape (exit 0).
#[test]
fn run_shows_a_batched_collective_and_checks_v1() {
    let ex = format!("{}/examples/run_vmap.json", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = common::run(&["run", &ex]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(
            "the stack of the elements' results at dim 0: per rank [11, 22, 33] | [44, 55, 66]"
        ),
        "{out}"
    );
    assert!(out.contains("DIFFERENT (V1 fails here)"), "{out}");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ex).unwrap()).unwrap();
    v["batched"] = "psum_scatter(dim=0, stack)".into();
    let d = common::fresh_dir("batching", "run");
    let p = d.join("j.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let (code, out, err) = common::run(&["run", p.to_str().unwrap(), "--check", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["holds_here"], true);
    assert_eq!(j["check"]["result"], "pass");
    assert_eq!(j["output"]["per_rank"][0], "[11, 22, 33]");
    // Hostile: a batch dim past the input's rank, a cotangent, two axes.
    for (edit, want) in [
        (r#"{"vmap": {"in_axes": [5]}}"#, "no batch dim 5"),
        (r#"{"cotangent": [[1], [2]]}"#, "does not go with"),
        (r#"{"mesh": {"x": 2, "y": 1}}"#, "one mesh axis"),
    ] {
        let mut w = v.clone();
        let e: serde_json::Value = serde_json::from_str(edit).unwrap();
        for (k, x) in e.as_object().unwrap() {
            w[k] = x.clone();
        }
        std::fs::write(&p, w.to_string()).unwrap();
        let (code, out, err) = common::run(&["run", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{edit}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{edit}: {err}");
        assert!(err.contains(want), "{edit}: {err}");
    }
}

/// V1 of `batched` for `c` on element shape `shape` batched at `d_in`,
/// its output batched at `claimed` and moved to `d_out` as vmap moves it.
fn v1_moved(
    c: &Collective,
    batched: &Collective,
    claimed: usize,
    d_out: usize,
    shape: &[usize],
    d_in: usize,
    n: usize,
) -> bool {
    let m = Mesh::line(n);
    let mv = |y: Vec<Tensor>| -> Result<Vec<Tensor>, String> {
        y.iter()
            .map(|t| {
                spmd_check::semantics::batch::move_dim(t, claimed, d_out)
                    .ok_or_else(|| "batch dim past the end".to_string())
            })
            .collect()
    };
    let f = run(c, &m);
    let g = run(batched, &m);
    let fb = |xs: &[Vec<Tensor>]| g(xs).and_then(mv);
    let mut t = V1Tally::default();
    let ok = (1..=2).all(|k| {
        check_v1(
            &f,
            &fb,
            &[Some(d_in)],
            Some(d_out),
            &linear_batches(&basis(State::Varying, shape, n), k),
            &mut t,
        )
        .is_ok()
    });
    // Not vacuous: every batch was compared.
    assert!(
        t.batches > 0 && t.outside == 0,
        "{t:?}: {} at {d_in} on {shape:?}",
        c.describe()
    );
    ok
}

/// grad∘vmap against vmap∘grad for JAX's collectives (SPEC.md §24.8): the
/// cotangent map of a batched collective, taken as JAX takes it each way,
/// against the stack of the unbatched transposes. grad(vmap(f)) transposes
/// the batched primitive and holds for every collective and batch dim;
/// vmap(grad(f)) batches the transpose with its batching rule and fails
/// exactly where that transpose is an untiled psum_scatter batched after
/// its scatter dim: the transpose of an untiled all_gather batched after
/// its gather dim.
#[test]
fn grad_of_vmap_and_vmap_of_grad_against_the_meaning() {
    use spmd_check::dialects::jax::transpose_collective;
    use State::*;
    let cases = vec![
        ("all_gather(dim=0)", vec![2, 1]),
        ("all_gather(dim=1)", vec![2, 1]),
        ("all_gather(dim=0, stack)", vec![2, 1]),
        ("all_gather(dim=1, stack)", vec![1, 2]),
        ("psum_scatter(dim=0)", vec![0, 2]),
        ("psum_scatter(dim=1, stack)", vec![2, 0]),
        ("all_to_all(split=0, concat=1)", vec![0, 1]),
        ("ppermute(perm=[1, 0])", vec![2, 1]),
    ];
    let mut vmap_grad_fails = Vec::new();
    for (text, shape) in cases {
        let n = 2;
        let c = jax(text, Varying, Varying);
        let shape: Vec<usize> = shape.iter().map(|&s| if s == 0 { n } else { s }).collect();
        let m = Mesh::line(n);
        let out_shape = c.infer(&m, &shape).unwrap();
        let tc = Collective {
            kind: transpose_collective(&c.kind).unwrap(),
            ..c.clone()
        };
        for d in 0..=shape.len() {
            let (bk, d1) = batch_collective(&c.kind, d).unwrap();
            if d1 > out_shape.len() {
                // The forward's own batching already fails (§24.3): JAX
                // raises before any transpose.
                assert_eq!(text, "psum_scatter(dim=1, stack)");
                continue;
            }
            // grad(vmap(f)): the transpose of the batched primitive; the
            // cotangent comes batched at d1, the input's at d.
            let tb = Collective {
                kind: transpose_collective(&bk).unwrap(),
                ..c.clone()
            };
            assert!(
                v1_moved(&tc, &tb, d, d, &out_shape, d1, n),
                "grad(vmap) of {text} at {d}"
            );
            // vmap(grad(f)): the batching rule applied to the transpose.
            if let Ok((bt, d2)) = batch_collective(&tc.kind, d1) {
                let bt = Collective {
                    kind: bt,
                    ..c.clone()
                };
                if !v1_moved(&tc, &bt, d2, d, &out_shape, d1, n) {
                    vmap_grad_fails.push(format!("{text} at {d}"));
                }
            }
        }
    }
    assert_eq!(
        vmap_grad_fails,
        vec![
            "all_gather(dim=0, stack) at 1".to_string(),
            "all_gather(dim=0, stack) at 2".to_string(),
            "all_gather(dim=1, stack) at 2".to_string(),
        ]
    );
}

/// vmap∘vmap (SPEC.md §24.8): JAX's rule applied to an already batched
/// collective is checked by V1 against that batched collective (the inner
/// vmap's form, itself checked against the meaning above). It holds for
/// every pair of batch dims except where either level is an untiled
/// psum_scatter batched after its scatter dim.
#[test]
fn vmap_of_vmap_of_jaxs_collectives() {
    use State::*;
    let cases = vec![
        ("all_gather(dim=0)", vec![2]),
        ("all_gather(dim=0, stack)", vec![2]),
        ("psum", vec![2]),
        ("psum_scatter(dim=0)", vec![0]),
        ("psum_scatter(dim=0, stack)", vec![0]),
        ("all_to_all(split=0, concat=1)", vec![0, 1]),
        ("ppermute(perm=[1, 0])", vec![2]),
    ];
    let n = 2;
    let m = Mesh::line(n);
    let mut fails = Vec::new();
    for (text, shape) in cases {
        let c = jax(text, Varying, Varying);
        let shape: Vec<usize> = shape.iter().map(|&s| if s == 0 { n } else { s }).collect();
        for d1 in 0..=shape.len() {
            let (k1, o1) = batch_collective(&c.kind, d1).unwrap();
            let b1 = Collective {
                kind: k1.clone(),
                ..c.clone()
            };
            // The inner level must itself be right for the outer to mean
            // anything.
            let mut s1 = shape.clone();
            s1.insert(d1, 2);
            let Ok(out1) = b1.infer(&m, &s1) else {
                continue;
            };
            if o1 > out1.len() || !v1_moved(&c, &b1, o1, o1, &shape, d1, n) {
                fails.push(format!("{text}: inner at {d1}"));
                continue;
            }
            for d2 in 0..=s1.len() {
                let (k2, o2) = batch_collective(&k1, d2).unwrap();
                let b2 = Collective {
                    kind: k2,
                    ..c.clone()
                };
                if o2 > out1.len() || !v1_moved(&b1, &b2, o2, o2, &s1, d2, n) {
                    fails.push(format!("{text}: {d1} then {d2}"));
                }
            }
        }
    }
    assert!(
        fails
            .iter()
            .all(|f| f.starts_with("psum_scatter(dim=0, stack)")),
        "{fails:#?}"
    );
    assert!(!fails.is_empty());
}
