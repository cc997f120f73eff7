//! Rules and jobs on uneven shards (SPEC.md §23.8–§23.12): each system's
//! rules as `conform` pins them, a negative twin for every collective and
//! split rule (asserting which property fails), the library checks on
//! their own, `run` on pieces of different lengths, and hostile input.

mod common;
use common::{fresh_dir, run};
use spmd_check::dialects::uneven::{elaborate, parse_placement};
use spmd_check::interp::uneven::Coll;
use spmd_check::oracle::uneven::{check_step, Failure, Tally};
use spmd_check::semantics::uneven::{Placement, Split};
use spmd_check::semantics::{Dialect, Tensor, Q};
use spmd_check::uneven::{conform_rows, key, PINNED};

#[test]
fn every_rule_of_the_section_comes_out_as_pinned() {
    let rows = conform_rows(None).expect("the section's rules build");
    assert_eq!(rows.len(), PINNED.len(), "one pin per rule");
    for r in &rows {
        assert!(
            r.as_pinned(),
            "{}: {} (pinned {:?})\n{}",
            r.name,
            key(&r.report),
            r.pinned,
            r.report.report()
        );
        // A twin is rejected with a counterexample, never by a refusal.
        if r.twin() {
            assert!(r.report.failed(), "{}", r.name);
        }
    }
    // Every system with uneven rules is in the section.
    for d in ["dtensor", "spmd_types", "nabla", "jax"] {
        assert!(rows.iter().any(|r| r.dialect.name() == d), "no rule of {d}");
    }
}

/// Checks `forward` from `input` to `output` on `n` ranks and a rows-only
/// global shape of every length 0..=n+1, with `backward`.
fn step(
    forward: &Coll,
    backward: Option<&Coll>,
    input: &Placement,
    output: &Placement,
    n: usize,
) -> Result<Tally, Box<Failure>> {
    let mut t = Tally::default();
    for len in 0..=n + 1 {
        let f = |xs: &[Tensor]| forward.forward(xs);
        let b = backward.map(|b| move |xs: &[Tensor]| b.forward(xs));
        check_step(
            input,
            output,
            &f,
            b.as_ref().map(|b| b as &spmd_check::oracle::uneven::Impl),
            n,
            &[len, 2],
            &mut t,
        )?;
    }
    Ok(t)
}

fn shard(d: usize, s: Split) -> Placement {
    Placement::Shard(d, s)
}

#[test]
fn each_collective_is_exact_and_its_wrong_split_twin_fails_the_named_property() {
    for n in [2, 3, 4] {
        for s in [Split::Chunk, Split::Ceil, Split::Divmod] {
            let other = if s == Split::Divmod {
                Split::Chunk
            } else {
                Split::Divmod
            };
            // all_gather to R, backward reduce_scatter with the same split.
            let ag = Coll::AllGather { dim: 0 };
            let rs = |split: &Split| Coll::ReduceScatter {
                dim: 0,
                split: split.clone(),
            };
            let t = step(&ag, Some(&rs(&s)), &shard(0, s.clone()), &Placement::Red, n)
                .unwrap_or_else(|f| panic!("all_gather {s} on {n}: {f:?}"));
            assert!(t.uneven_cases > 0);
            // Twin: the backward cuts by another rule (B3), from n = 3 on
            // where the rules differ.
            if n >= 3 {
                let e = step(
                    &ag,
                    Some(&rs(&other)),
                    &shard(0, s.clone()),
                    &Placement::Red,
                    n,
                )
                .expect_err("a backward cutting by another split");
                assert_eq!(e.property(), "B3", "{s} vs {other} on {n}");
                // Twin: a reduce_scatter cutting by another rule than its
                // output's (F1).
                let e = step(&rs(&other), None, &Placement::Part, &shard(0, s.clone()), n)
                    .expect_err("a scatter by another split");
                assert_eq!(e.property(), "F1");
                // Twin: a scatter by another rule (F1).
                let sc = Coll::Scatter {
                    dim: 0,
                    split: other.clone(),
                };
                let e = step(&sc, None, &Placement::Inv, &shard(0, s.clone()), n)
                    .expect_err("a local cut by another split");
                assert_eq!(e.property(), "F1");
            }
            // reduce_scatter, backward all_gather; scatter, backward all_gather.
            step(
                &rs(&s),
                Some(&ag),
                &Placement::Part,
                &shard(0, s.clone()),
                n,
            )
            .unwrap();
            let sc = Coll::Scatter {
                dim: 0,
                split: s.clone(),
            };
            step(&sc, Some(&ag), &Placement::Inv, &shard(0, s.clone()), n).unwrap();
            // all_to_all rows -> columns and back.
            let a2a = |sd, cd, split: &Split| Coll::AllToAll {
                split_dim: sd,
                concat_dim: cd,
                split: split.clone(),
            };
            let (rows, cols) = (shard(0, s.clone()), shard(1, s.clone()));
            let mut t = Tally::default();
            for l0 in 0..=n + 1 {
                for l1 in 0..=n + 1 {
                    let f = |xs: &[Tensor]| a2a(1, 0, &s).forward(xs);
                    let b = |xs: &[Tensor]| a2a(0, 1, &s).forward(xs);
                    check_step(&rows, &cols, &f, Some(&b), n, &[l0, l1], &mut t).unwrap();
                    if n >= 3 && l0 == n + 1 && l1 == 1 {
                        let w = |xs: &[Tensor]| a2a(0, 1, &other).forward(xs);
                        let mut u = Tally::default();
                        let e = check_step(&rows, &cols, &f, Some(&w), n, &[l0, l1], &mut u)
                            .expect_err("an all_to_all back by another split");
                        assert_eq!(e.property(), "B3");
                    }
                }
            }
            assert!(t.uneven_cases > 0);
        }
    }
}

#[test]
fn dtensor_pads_gathers_and_unpads_exactly_for_torch_chunk_only() {
    let run_case = |s: Split, len: usize, n: usize| -> Option<Vec<Tensor>> {
        let g = Tensor::new(vec![len], (1..=len).map(|i| Q::int(i as i64)).collect());
        let pieces = s.split(&g, 0, n).ok()?;
        spmd_check::dialects::dtensor::padded_gather(&pieces, 0).ok()
    };
    // torch.chunk's pieces: every rank gets the tensor back.
    for n in 2..=4 {
        for len in 0..=2 * n + 1 {
            let out = run_case(Split::Chunk, len, n).expect("chunk pieces gather");
            let want: Vec<Q> = (1..=len).map(|i| Q::int(i as i64)).collect();
            assert!(out.iter().all(|t| t.data == want), "{len} over {n}");
        }
    }
    // 5 rows first-ranks-longer over 4 ranks (2, 1, 1, 1): the padding of
    // the short pieces lands inside the result and the last row is lost.
    let out = run_case(Split::Divmod, 5, 4).unwrap();
    let ints: Vec<String> = out[0].data.iter().map(|q| q.to_string()).collect();
    assert_eq!(ints, ["1", "2", "3", "0", "4"]);
}

#[test]
fn elaboration_picks_each_systems_backward_and_refusal() {
    let s = |d, t: &str| parse_placement(d, t).unwrap();
    // Nabla: the gradient of an uneven all_gather is a local reshard, so its
    // reduce_scatter refusal does not meet it.
    let e = elaborate(
        Dialect::Nabla,
        "all_gather",
        None,
        &s(Dialect::Nabla, "sharded(0)"),
        &s(Dialect::Nabla, "replicated"),
    )
    .unwrap();
    assert!(e.backward_text.unwrap().starts_with("reshard"));
    let e = elaborate(
        Dialect::Nabla,
        "reduce_scatter",
        None,
        &Placement::Part,
        &s(Dialect::Nabla, "sharded(0)"),
    )
    .unwrap();
    let pieces: Vec<Tensor> = (0..2).map(|_| Tensor::zeros(&[3])).collect();
    assert_eq!(
        (e.forward)(&pieces).unwrap_err(),
        "reduce_scatter axis size 3 not divisible by 2"
    );
    // JAX: pieces of different shapes stop at the shard_map boundary.
    let e = elaborate(
        Dialect::Jax,
        "all_gather",
        None,
        &s(Dialect::Jax, "Varying(0, chunk)"),
        &Placement::Red,
    )
    .unwrap();
    let uneven = vec![Tensor::zeros(&[2]), Tensor::zeros(&[1])];
    assert!((e.forward)(&uneven).unwrap_err().contains("shard_map"));
    // spmd_types: to I, the backward keeps the rank's piece.
    let e = elaborate(
        Dialect::SpmdTypes,
        "all_gather",
        None,
        &s(Dialect::SpmdTypes, "S(0, sizes=[1, 2])"),
        &Placement::Inv,
    )
    .unwrap();
    assert_eq!(
        e.backward_text.as_deref(),
        Some("scatter(dim=0, split=sizes=[1, 2])")
    );
    // A shard without a rule takes the dialect's.
    assert_eq!(
        s(Dialect::Nabla, "sharded(1)"),
        Placement::Shard(1, Split::Ceil)
    );
    assert_eq!(
        s(Dialect::Dtensor, "Shard(1)"),
        Placement::Shard(1, Split::Chunk)
    );
}

#[test]
fn split_rules_read_back_as_written_and_ceil_is_chunk() {
    for t in ["chunk", "ceil", "divmod", "sizes=[3, 0, 2]"] {
        assert_eq!(Split::parse(t).unwrap().to_string(), t);
    }
    for n in 1..=6 {
        for len in 0..=20 {
            assert_eq!(
                Split::Ceil.sizes(len, n).unwrap(),
                Split::Chunk.sizes(len, n).unwrap()
            );
        }
    }
    // Twin: divmod is another rule (5 rows over 4 ranks).
    assert_ne!(
        Split::Divmod.sizes(5, 4).unwrap(),
        Split::Chunk.sizes(5, 4).unwrap()
    );
    for bad in [
        "chnk",
        "sizes=",
        "sizes=[]",
        "sizes=[1, x]",
        "sizes=[40]",
        "sizes=[1,1,1,1,1,1,1,1,1]",
    ] {
        assert!(Split::parse(bad).is_err(), "{bad}");
    }
    assert!(Split::parse("chnk")
        .unwrap_err()
        .contains("did you mean `chunk`"));
}

#[test]
fn check_reports_uneven_rules_with_their_exit_codes_and_json() {
    let dir = fresh_dir("uneven", "check");
    let p = dir.join("r.toml");
    let write = |body: &str| std::fs::write(&p, body).unwrap();
    let path = p.to_str().unwrap();
    write("[[rule]]\nname = \"a\"\ndialect = \"dtensor\"\nforward = \"redistribute\"\ninputs = [\"Shard(0, chunk)\"]\noutput = \"Replicate()\"\n");
    let (code, out, err) = run(&["check", path]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("sound (bounded:"), "{out}");
    assert!(
        out.contains("elaborated: DTensor runs redistribute"),
        "{out}"
    );
    // Twin: first-ranks-longer pieces through the same pad and unpad.
    write("[[rule]]\nname = \"a\"\ndialect = \"dtensor\"\nforward = \"redistribute\"\ninputs = [\"Shard(0, divmod)\"]\noutput = \"Replicate()\"\n");
    let (code, out, _) = run(&["check", path, "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["rules"][0];
    assert_eq!(r["verdict"], "unsound");
    assert_eq!(r["property"], "F1");
    assert_eq!(r["counterexample"]["ranks"], 3);
    // Every uneven case refused: vacuous, exit 3.
    write("[[rule]]\nname = \"a\"\ndialect = \"nabla\"\nforward = \"reduce_scatter\"\ninputs = [\"partial\"]\noutput = \"sharded(0, ceil)\"\n");
    let (code, out, _) = run(&["check", path]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("not divisible by"), "{out}");
}

#[test]
fn run_shows_pieces_of_different_lengths_and_checks_them() {
    let (code, out, err) = run(&["run", "examples/run_uneven.json", "--check"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("per rank [1, 2, 3] | [4, 5]"), "{out}");
    assert!(out.contains("denotes [1, 2, 3, 4, 5]"), "{out}");
    assert!(out.contains("check: passed"), "{out}");
    let dir = fresh_dir("uneven", "run");
    let p = dir.join("j.json");
    // Twin: a backward cutting by torch.chunk for pieces of sizes 3, 1, 0.
    std::fs::write(
        &p,
        r#"{"dialect": "spmd_types", "mesh": {"x": 3}, "forward": "all_gather",
        "backward": "reduce_scatter(split=chunk)",
        "inputs": [{"type": "S(0)", "per_rank": [[1, 2, 3], [4], []]}], "output": "R",
        "cotangent": [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]]}"#,
    )
    .unwrap();
    let (code, out, _) = run(&["run", p.to_str().unwrap(), "--check", "--json"]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["check"]["property"], "B3");
    assert_eq!(v["inputs"][0]["type"], "S(0, sizes=[3, 1, 0])");
    assert_eq!(v["backward"]["denotes"], serde_json::Value::Null);
}

#[test]
fn hostile_uneven_input_is_one_line_and_exit_2() {
    let dir = fresh_dir("uneven", "hostile");
    let p = dir.join("r.toml");
    let cases = [
        ("inputs = [\"S(0, sizes=[99])\"]\noutput = \"R\"\nforward = \"all_gather\"", "is not a size"),
        ("inputs = [\"S(0, chnk)\"]\noutput = \"R\"\nforward = \"all_gather\"", "did you mean `chunk`"),
        ("inputs = [\"S(x, chunk)\"]\noutput = \"R\"\nforward = \"all_gather\"", "bad shard dim"),
        ("inputs = [\"S(0, chunk)\"]\noutput = \"R\"\nforward = \"all_gathr\"", "did you mean `all_gather`"),
        ("inputs = [\"S(0, chunk)\"]\noutput = \"R\"\nforward = \"reduce_scatter\"", "it makes a shard, and the rule takes S(0, chunk) to R"),
        ("inputs = [{dp = \"S(0, chunk)\", tp = \"R\"}]\noutput = \"R\"\nforward = \"all_gather\"", "one mesh axis"),
        ("inputs = [\"S(0, chunk)\"]\noutput = \"R\"\nforward = \"all_gather(dim=x)\"", "not a dim"),
        ("inputs = [\"S(0, chunk)\"]\noutput = \"R\"\nforward = \"all_gather(dim=0\"", "without its `)`"),
        // Over several mesh axes (SPEC.md §23.20).
        ("dialect = \"dtensor\"\nmesh = {dp = 2, tp = 2}\ninputs = [{dp = \"Shard(0, chunk)\"}]\noutput = {dp = \"Replicate()\", tp = \"Replicate()\"}\nforward = \"redistribute\"", "names no placement for axis `tp`"),
        ("dialect = \"dtensor\"\nmesh = {dp = 2, tp = 2}\ninputs = [{dp = \"Shard(0, chunk)\", pp = \"R\"}]\noutput = {dp = \"Replicate()\", tp = \"Replicate()\"}\nforward = \"redistribute\"", "`pp` is not an axis"),
        ("dialect = \"dtensor\"\nmesh = {dp = 2, tp = 2}\ninputs = [\"Shard(0, chunk)\"]\noutput = {dp = \"Replicate()\", tp = \"Replicate()\"}\nforward = \"redistribute\"", "one placement per axis"),
        ("dialect = \"dtensor\"\nmesh = {dp = 4, tp = 8}\ninputs = [{dp = \"Shard(0, chunk)\", tp = \"Shard(0, chunk)\"}]\noutput = {dp = \"Replicate()\", tp = \"Replicate()\"}\nforward = \"redistribute\"", "at most 16"),
        ("dialect = \"dtensor\"\nmesh = {dp = 2, tp = 2}\ninputs = [{dp = \"Shard(0, chunk)\", tp = \"Shard(0, chunk)\"}]\noutput = {dp = \"Replicate()\", tp = \"Replicate()\"}\nforward = \"redistribute\"\nbackward = \"redistribute\"", "it is not written"),
        ("dialect = \"jax\"\nmesh = {dp = 2, tp = 2}\ninputs = [{dp = \"S(0, chunk)\", tp = \"S(0, chunk)\"}]\noutput = {dp = \"Invariant\", tp = \"Invariant\"}\nforward = \"all_gather\"", "is not modelled"),
        ("dialect = \"dtensor\"\nmesh = {dp = 2, tp = 2}\ninputs = [{dp = \"Shard(0, chunk)\", tp = \"Shard(0, chunk)\"}]\noutput = {dp = \"Replicate()\", tp = \"Shard(0, chunk)\"}\nforward = \"all_gather(flattened)\"", "ends replicated"),
        ("dialect = \"dtensor\"\nmesh = {dp = 2, tp = 2}\nop = \"relu\"\ninputs = [{dp = \"Shard(0, chunk)\", tp = \"Shard(0, chunk)\"}]\noutput = {dp = \"Shard(0, chunk)\", tp = \"Shard(0, chunk)\"}", "written `forward`"),
    ];
    for (body, want) in cases {
        std::fs::write(&p, format!("[[rule]]\nname = \"a\"\n{body}\n")).unwrap();
        let (code, out, err) = run(&["check", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{body}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{err}");
        assert!(err.contains(want), "{body}: {err}");
    }
    let j = dir.join("j.json");
    for (body, want) in [
        (
            r#""mesh": {"x": 2}, "inputs": [{"type": "S(0)", "per_rank": [[1, 2, 3], [4]]}]"#,
            "not well formed",
        ),
        (
            r#""mesh": {"x": 2, "y": 1}, "inputs": [{"type": "S(0)", "per_rank": [[1, 2], [4]]}]"#,
            "one placement per axis",
        ),
        (
            r#""mesh": {"x": 2}, "inputs": [{"type": "S(0)", "per_rank": [[1, 2], [4], [5]]}]"#,
            "ranks given",
        ),
        (
            r#""mesh": {"x": 2}, "inputs": [{"type": "Shard(0)", "per_rank": [[[1], [2, 3]], [4]]}]"#,
            "ragged",
        ),
    ] {
        std::fs::write(&j, format!(r#"{{"dialect": "dtensor", "forward": "redistribute", "output": "Replicate()", {body}}}"#)).unwrap();
        let (code, out, err) = run(&["run", j.to_str().unwrap()]);
        assert_eq!(code, 2, "{body}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{err}");
        assert!(err.contains(want), "{body}: {err}");
    }
}

/// Fidelity over the uneven recordings (SPEC.md §23.13): every 1-D case
/// DTensor ran, replayed through the dialect's redistribute, gives the
/// recorded pieces and passes F1 and B3; spmd_types' split_sizes gathers
/// likewise. The twin: a recording with one piece's rows rotated is a
/// model mismatch, named by rank.
#[test]
fn fidelity_replays_the_uneven_recordings_exactly_and_catches_a_tampered_one() {
    let dir = spmd_check::fidelity::default_dir();
    let rs = spmd_check::fidelity::uneven::run(&dir).expect("the recordings read");
    let count = |file: &str, class: &str| {
        rs.iter()
            .filter(|r| r.file.ends_with(file) && r.class.key() == class)
            .count()
    };
    for f in ["dtensor_uneven.json", "dtensor_uneven_2.15.0.json"] {
        assert_eq!(count(f, "model_mismatch"), 0, "{f}");
        assert_eq!(count(f, "real_defect"), 0, "{f}");
        // 1-D meshes: 576 cases, of which 48 refusals (R -> P(sum)) and
        // 42 with a piece not exact in float64; and 864 on 2×2 (§23.20).
        assert_eq!(count(f, "agree"), 486 + 864, "{f}");
        assert_eq!(count(f, "not_expressible"), 42, "{f}");
        // Every agreeing case was checked backward too, with the backward
        // the dtensor dialect picks (Partial(sum) -> Replicate() included).
        for r in rs
            .iter()
            .filter(|r| r.file.ends_with(f) && r.class.key() == "agree")
        {
            assert!(r.note.contains("B3"), "{f}: {} {}", r.id, r.note);
        }
        assert_eq!(
            count(f, "sound_rejection") + count(f, "undetermined"),
            48,
            "{f}"
        );
    }
    assert_eq!(count("spmd_types_uneven.json", "agree"), 72);
    assert_eq!(count("spmd_types_uneven.json", "undetermined"), 72);
    // gloo runs the uneven reduce_scatters' forwards; its allgather takes
    // one size on every rank, so the uneven gathers (and the scatters'
    // backwards) stay undetermined.
    assert_eq!(count("spmd_types_uneven_gloo.json", "agree"), 93);
    assert_eq!(count("spmd_types_uneven_gloo.json", "undetermined"), 51);
    // With the recorder's padded all_gather under spmd_types, every case
    // runs, spmd_types' own backward included, and agrees.
    assert_eq!(count("spmd_types_uneven_gloo_padded.json", "agree"), 144);
    // DTensor's own backward of every 1-D redistribute it runs, on every
    // basis cotangent: the model's picked backward, exactly.
    let f = "dtensor_uneven_backward.json";
    assert_eq!(count(f, "agree"), 2685);
    assert_eq!(count(f, "sound_rejection") + count(f, "undetermined"), 24);
    assert_eq!(count(f, "model_mismatch") + count(f, "real_defect"), 0);
    // The ops, from_local and JAX recordings (SPEC.md §23.16–§23.18).
    for f in [
        "dtensor_uneven_ops.json",
        "dtensor_from_local_uneven.json",
        "jax_uneven_0.12.0.1.json",
    ] {
        assert_eq!(count(f, "model_mismatch"), 0, "{f}");
    }
    assert_eq!(count("dtensor_uneven_ops.json", "agree"), 168);
    assert_eq!(count("dtensor_uneven_ops.json", "undetermined"), 3);
    assert_eq!(count("dtensor_from_local_uneven.json", "agree"), 24);
    assert_eq!(count("dtensor_from_local_uneven.json", "real_defect"), 20);
    assert_eq!(count("jax_uneven_0.12.0.1.json", "agree"), 6);
    assert_eq!(count("jax_uneven_0.12.0.1.json", "sound_rejection"), 9);
    // The twin.
    let tmp = fresh_dir("uneven", "fidelity");
    std::fs::create_dir_all(tmp.join("uneven")).unwrap();
    let text = std::fs::read_to_string(format!("{dir}/uneven/dtensor_uneven.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = v["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| {
            c["mesh"] == serde_json::json!([4])
                && c["src"][0] == "S(0)"
                && c["dst"][0] == "R"
                && c["shape"] == serde_json::json!([5, 2])
        })
        .expect("S(0) -> R of 5 rows on 4 ranks");
    c["after"][2] = serde_json::json!("5x2:3,4,1,2,5,6,7,8,9,10");
    std::fs::write(tmp.join("uneven/dtensor_uneven.json"), v.to_string()).unwrap();
    let rs = spmd_check::fidelity::uneven::run(tmp.to_str().unwrap()).unwrap();
    let bad: Vec<_> = rs
        .iter()
        .filter(|r| r.class.key() == "model_mismatch")
        .collect();
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0].class.detail().unwrap().starts_with("rank 2:"),
        "{:?}",
        bad[0]
    );
    // The backward's twin: one rank's recorded gradient of an uneven
    // S(0) -> Replicate() (5 rows on 4 ranks) with its entry moved to the
    // next column is a model mismatch on that rank.
    let tmp = fresh_dir("uneven", "fidelity-backward");
    std::fs::create_dir_all(tmp.join("uneven")).unwrap();
    let text =
        std::fs::read_to_string(format!("{dir}/uneven/dtensor_uneven_backward.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = v["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| {
            c["mesh"] == serde_json::json!([4])
                && c["src"][0] == "S(0)"
                && c["dst"][0] == "R"
                && c["shape"] == serde_json::json!([5, 2])
                && c["cotangent_global_index"] == 8
        })
        .expect("the backward of S(0) -> R of 5 rows on 4 ranks");
    // torch.chunk puts 2, 2, 1 and 0 rows on the ranks: row 4 is rank 2's.
    assert_eq!(c["grad_local"][2], "1x2:1,0");
    c["grad_local"][2] = serde_json::json!("1x2:0,1");
    std::fs::write(
        tmp.join("uneven/dtensor_uneven_backward.json"),
        v.to_string(),
    )
    .unwrap();
    let rs = spmd_check::fidelity::uneven::run(tmp.to_str().unwrap()).unwrap();
    let bad: Vec<_> = rs
        .iter()
        .filter(|r| r.class.key() == "model_mismatch")
        .collect();
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0].class.detail().unwrap().starts_with("rank 2:"),
        "{:?}",
        bad[0]
    );
}

/// `derive --uneven` (SPEC.md §23.14): the sound typings on uneven shards
/// are exactly the propagation rules that keep shards aligned, and each
/// wrong neighbour is unsound F1 (a shard of the other dim, a contraction
/// read as a shard).
#[test]
fn derive_on_uneven_shards_finds_the_aligned_typings() {
    let sound = |op: &str, rule: &str| -> Vec<String> {
        let (code, out, err) = run(&["derive", op, "--uneven", rule, "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let ts = v["typings"].as_array().unwrap();
        // Twins: every other typing with a shard fails F1.
        for t in ts.iter().filter(|t| t["verdict"] != "sound") {
            assert!(t["verdict"] == "vacuous" || t["property"] == "F1", "{t}");
        }
        ts.iter()
            .filter(|t| t["verdict"] == "sound")
            .map(|t| {
                format!(
                    "{} -> {}",
                    t["inputs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_str().unwrap())
                        .collect::<Vec<_>>()
                        .join(", "),
                    t["output"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(
        sound("matmul", "chunk"),
        [
            "Invariant, S(1, chunk) -> S(1, chunk)",
            "Reduced, S(1, chunk) -> S(1, chunk)",
            "S(0, chunk), Invariant -> S(0, chunk)",
            "S(0, chunk), Reduced -> S(0, chunk)",
            "S(1, chunk), S(0, chunk) -> Partial",
        ]
    );
    assert_eq!(
        sound("sum", "divmod"),
        ["S(0, divmod) -> Partial", "S(1, divmod) -> S(0, divmod)"]
    );
    let (code, _, err) = run(&["derive", "mul", "--uneven", "sizes=[1, 2]"]);
    assert_eq!(code, 2);
    assert!(err.contains("written sizes go in a rule file"), "{err}");
}

/// `programs --uneven` (SPEC.md §23.15): chains of moves as each system
/// runs them. DTensor's redistribute chains on torch.chunk's pieces are
/// exact forward and backward; the same chains on first-ranks-longer
/// pieces (the twin) fail F1 and B3. Nabla has no Reduced, and its
/// all_to_all refuses every uneven case; JAX refuses them all.
#[test]
fn chains_of_moves_on_uneven_shards_per_system() {
    let counts = |d: &str, rule: &str| -> (i32, Vec<String>) {
        let (code, out, err) = run(&[
            "programs",
            "--dialect",
            d,
            "--uneven",
            rule,
            "--depth",
            "2",
            "--json",
        ]);
        assert!(code == 0 || code == 1, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let keys = v["chains"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| match c["property"].as_str() {
                Some(p) => format!("unsound {p}"),
                None => c["verdict"].as_str().unwrap().to_string(),
            })
            .collect();
        (code, keys)
    };
    let (code, ks) = counts("dtensor", "chunk");
    assert_eq!((code, ks.len()), (0, 32));
    assert!(ks.iter().all(|k| k == "sound"), "{ks:?}");
    let (code, ks) = counts("dtensor", "divmod");
    assert_eq!(code, 1);
    for p in ["unsound F1", "unsound B3"] {
        assert!(ks.iter().any(|k| k == p), "{p}: {ks:?}");
    }
    let (_, ks) = counts("nabla", "ceil");
    assert_eq!(ks.len(), 12, "no Reduced in Nabla");
    assert_eq!(ks.iter().filter(|k| *k == "vacuous").count(), 2);
    let (_, ks) = counts("jax", "chunk");
    assert!(ks.iter().all(|k| k == "vacuous"), "{ks:?}");
}

/// DTensor's local ops on uneven shards, recorded (SPEC.md §23.16,
/// peers/record_uneven_dtensor_ops.py, torch 2.14.1): every output DTensor
/// gives denotes the op of the inputs' values under its placement (the
/// model's op, torch.chunk's split); DTensor keeps the written strategy
/// exactly where `keeps_strategy` says (a shard with fewer rows than ranks
/// and allow_uneven_sharding=False: Replicate() instead); the flags are
/// the recorded ones. Findings kept as such: reshape(-1) of a Shard(0)
/// value of 0 rows gives no result within 20 s, and of Shard(1) gives a
/// _StridedShard, which the model has no placement for.
#[test]
fn dtensor_ops_on_uneven_shards_are_exact_and_keep_the_strategy_as_flagged() {
    use spmd_check::dialects::dtensor::{
        allow_uneven_counts, allow_uneven_sharding, keeps_strategy,
    };
    assert_eq!(allow_uneven_counts(), (1220, 1014));
    assert_eq!(allow_uneven_sharding("aten.mm.default"), Some(false));
    assert_eq!(allow_uneven_sharding("aten.mul.Tensor"), Some(true));
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/uneven/dtensor_uneven_ops.json"
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let place = |p: &str| -> Option<Placement> {
        match p {
            "R" => Some(Placement::Inv),
            "P(sum)" => Some(Placement::Part),
            s => Some(Placement::Shard(
                s.strip_prefix("S(")?.strip_suffix(')')?.parse().ok()?,
                Split::Chunk,
            )),
        }
    };
    let (mut exact, mut predicted, mut no_result, mut strided) = (0, 0, 0, 0);
    // Twin: mm read as allowing uneven sharding mispredicts cases.
    let mut twin_wrong = 0;
    for c in v["cases"].as_array().unwrap() {
        let op = c["op"].as_str().unwrap();
        let n = c["mesh"][0].as_u64().unwrap() as usize;
        let shapes: Vec<Vec<usize>> = serde_json::from_value(c["shapes"].clone()).unwrap();
        let ins: Vec<Placement> = c["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| place(p.as_str().unwrap()).unwrap())
            .collect();
        if c.get("no_result").is_some() {
            assert_eq!((op, shapes[0][0]), ("reshape", 0), "{c}");
            no_result += 1;
            continue;
        }
        let Some(outs) = c["output"].as_array() else {
            continue;
        };
        let out = outs[0].as_str().unwrap();
        let Some(out_p) = place(out) else {
            assert!(out.starts_with("_S("), "{c}");
            strided += 1;
            continue;
        };
        let expr = spmd_check::fidelity::uneven::recorded_op(op, &shapes)
            .unwrap_or_else(|| panic!("{op}"));
        let f = spmd_check::interp::parse(&expr).unwrap();
        let globals: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let k: usize = s.iter().product();
                Tensor::new(
                    s.clone(),
                    (0..k).map(|j| Q::int((1 + 100 * i + j) as i64)).collect(),
                )
            })
            .collect();
        let want =
            spmd_check::interp::eval::eval(&f.expr, &globals, &mut Default::default()).unwrap();
        let pieces: Vec<Tensor> = c["per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| spmd_check::registry::parse_tensor(t.as_str().unwrap()).unwrap())
            .collect();
        assert_eq!(out_p.denote(&pieces).as_ref(), Some(&want), "{c}");
        exact += 1;
        // The written strategy's output, and whether DTensor kept it.
        let written = match (op, c["inputs"][0].as_str().unwrap(), ins.len()) {
            ("add", _, 2) if c["inputs"][1] == "R" => continue,
            ("sum", "S(0)", _) => "P(sum)",
            ("sum", "S(1)", _) => "S(0)",
            ("matmul", "R", _) => "S(1)",
            ("matmul", "S(1)", _) => "P(sum)",
            ("t", _, _) => "S(1)",
            (_, first, _) => first,
        };
        let aten = c["aten"].as_str().unwrap();
        // View ops have no single-dim strategy and no flag.
        let Some(flag) = allow_uneven_sharding(aten) else {
            assert_eq!(aten, "aten.view.default");
            continue;
        };
        let keeps = keeps_strategy(aten, flag, n, &ins, &shapes).is_ok();
        assert_eq!(keeps, out == written, "{c}");
        let twin_flag = flag || aten == "aten.mm.default";
        twin_wrong += usize::from(
            keeps_strategy(aten, twin_flag, n, &ins, &shapes).is_ok() != (out == written),
        );
        predicted += 1;
    }
    assert_eq!((exact, predicted, no_result, strided), (168, 150, 3, 9));
    assert!(twin_wrong > 0);
}

/// DTensor's `from_local` of pieces that do not follow torch.chunk (SPEC.md
/// §23.17, the class of pytorch #144109; recorded by
/// peers/record_from_local_uneven.py, torch 2.14.1): DTensor accepts them
/// with an explicit shape, and its redistribute to Replicate() then gives
/// exactly what the dialect's pad-gather-unpad gives on every recorded
/// case, which is the global vector exactly when the sizes are
/// torch.chunk's (finding: e.g. sizes 2, 1, 1, 1 over 4 ranks give
/// 1, 2, 3, 0, 4). Where n divides the length DTensor takes its even
/// branch, an all_gather of equal pieces: LocalTensorMode's gather
/// concatenates pieces of different lengths anyway, while a process group
/// needs equal ones, and the model refuses them; those cases are counted
/// apart.
#[test]
fn dtensor_from_local_of_non_chunk_pieces_loses_rows_as_the_model_says() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/uneven/dtensor_from_local_uneven.json"
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (mut right, mut wrong, mut even_branch) = (0, 0, 0);
    for c in v["cases"].as_array().unwrap() {
        let sizes: Vec<usize> = serde_json::from_value(c["sizes"].clone()).unwrap();
        let n = sizes.len();
        let len: usize = sizes.iter().sum();
        let global = Tensor::new(vec![len], (1..=len).map(|i| Q::int(i as i64)).collect());
        let pieces = Split::Sizes(sizes.clone()).split(&global, 0, n).unwrap();
        let real: Vec<Tensor> = c["after"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| spmd_check::registry::parse_tensor(t.as_str().unwrap()).unwrap())
            .collect();
        let Ok(ours) = spmd_check::dialects::dtensor::padded_gather(&pieces, 0) else {
            assert_eq!(len % n, 0, "{c}");
            assert!(real.iter().all(|t| *t == global), "{c}");
            even_branch += 1;
            continue;
        };
        assert_eq!(ours, real, "{c}");
        let chunk = Split::Chunk.sizes(len, n).unwrap() == sizes;
        assert_eq!(real[0] == global, chunk, "{c}");
        if chunk {
            right += 1;
        } else {
            wrong += 1;
        }
    }
    assert_eq!((right, wrong, even_branch), (24, 20, 6));
}

/// JAX's answer to uneven shards, recorded (SPEC.md §23.18,
/// peers/record_uneven_jax.py, jax 0.12.0.1 on CPU devices): both
/// `device_put` with NamedSharding(P('x')) and `shard_map` refuse exactly
/// where the dialect's boundary refuses torch.chunk's pieces of the length
/// (pieces of different lengths), and run everything else; a boundary
/// that accepted every case would be wrong on the 9 refused ones, and one
/// that refused every case on the 6 that ran.
#[test]
fn jax_refuses_uneven_shards_exactly_where_the_boundary_does() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/uneven/jax_uneven_0.12.0.1.json"
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (mut refused, mut ran) = (0, 0);
    for c in v["cases"].as_array().unwrap() {
        let n = c["mesh"][0].as_u64().unwrap() as usize;
        let len = c["length"].as_u64().unwrap() as usize;
        let pieces: Vec<Tensor> = Split::Chunk
            .sizes(len, n)
            .unwrap()
            .iter()
            .map(|&k| Tensor::zeros(&[k]))
            .collect();
        let ours = spmd_check::dialects::jax::boundary(&pieces);
        let real = c.get("shard_map_refused").is_some();
        assert_eq!(ours.is_err(), real, "{c}");
        assert_eq!(c.get("device_put_refused").is_some(), real, "{c}");
        if real {
            assert!(c["shard_map_refused"]
                .as_str()
                .unwrap()
                .contains("not evenly divisible"));
            refused += 1;
        } else {
            let want: Vec<f64> = (1..=len).map(|i| 2.0 * i as f64).collect();
            assert_eq!(
                serde_json::from_value::<Vec<f64>>(c["result"].clone()).unwrap(),
                want
            );
            ran += 1;
        }
    }
    assert_eq!((refused, ran), (9, 6));
}

/// The Markdown/JUnit table of the section fails exactly the rows whose
/// verdict is not the pinned one; its twin: a row pinned to another word
/// fails, with both words in its message.
#[test]
fn the_sections_table_fails_exactly_the_rows_not_as_pinned() {
    use spmd_check::report::table::{conform_tables, Outcome};
    let mut rows = conform_rows(Some("nabla")).expect("the section's rules build");
    let table = |rows: &[spmd_check::uneven::ConformRow]| {
        conform_tables(&[], &[], &[], &[], &[], &[], None, Some(rows), None)
    };
    let t = table(&rows);
    let sec = t
        .tables
        .iter()
        .find(|t| t.title == "uneven shards")
        .unwrap();
    assert_eq!(sec.rows.len(), rows.len());
    assert!(sec.rows.iter().all(|r| r.outcome == Outcome::Pass));
    // Twin: pin the first row to a verdict it does not have.
    let was = key(&rows[0].report);
    rows[0].pinned = Some(if was == "sound" { "vacuous" } else { "sound" });
    let t = table(&rows);
    let sec = t
        .tables
        .iter()
        .find(|t| t.title == "uneven shards")
        .unwrap();
    assert_eq!(sec.rows[0].outcome, Outcome::Fail);
    let msg = sec.rows[0].message.as_deref().unwrap();
    assert!(msg.contains(&format!("got {was}")), "{msg}");
    assert!(sec.rows[1..].iter().all(|r| r.outcome == Outcome::Pass));
}

/// `derive --uneven --format junit` (SPEC.md §23.14): one testcase per
/// typing of the JSON, failing exactly the unsound ones.
#[test]
fn derive_on_uneven_shards_as_junit_follows_the_verdicts() {
    let (code, out, err) = run(&["derive", "mul", "--uneven", "divmod", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ts = v["typings"].as_array().unwrap();
    let unsound = ts.iter().filter(|t| t["verdict"] == "unsound").count();
    let vacuous = ts.iter().filter(|t| t["verdict"] == "vacuous").count();
    assert!(unsound > 0 && unsound < ts.len());
    let (code, xml, err) = run(&["derive", "mul", "--uneven", "divmod", "--format", "junit"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(xml.matches("<testcase ").count(), ts.len(), "{xml}");
    assert_eq!(xml.matches("<failure ").count(), unsound, "{xml}");
    assert_eq!(xml.matches("<skipped").count(), vacuous, "{xml}");
    let (code, md, _) = run(&[
        "derive", "mul", "--uneven", "divmod", "--format", "markdown",
    ]);
    assert_eq!(code, 0);
    assert_eq!(md.matches("| **FAIL** |").count(), unsound, "{md}");
}

/// Nested shards over a 2×2 mesh (SPEC.md §23.20): every 2×2 case of the
/// recordings (torch 2.14.1 and 2.15.0) equals DTensor's greedy plan run
/// step by step, and F1 and B3 hold on the nested placements. Twins: the
/// plan without its inner-to-outer pass (each mesh dim moved straight to
/// its target, outer first) gives other pieces on some recorded case, and
/// the one-step flattened gather of the class of pytorch PR #194457 fails
/// F1 on [S(0), S(0)] of 5 rows, with rows lost.
#[test]
fn nested_shards_follow_dtensors_plan_and_the_flattened_gather_loses_rows() {
    use spmd_check::dialects::dtensor::{plan, run_plan, PlanStep};
    use spmd_check::semantics::uneven::{flat_gather_padded, Nested};
    let dir = spmd_check::fidelity::default_dir();
    let rs = spmd_check::fidelity::uneven::run(&dir).expect("the recordings read");
    for f in ["dtensor_uneven.json", "dtensor_uneven_2.15.0.json"] {
        let nested: Vec<_> = rs
            .iter()
            .filter(|r| r.file.ends_with(f) && r.id.contains("on [2, 2]"))
            .collect();
        assert_eq!(nested.len(), 864, "{f}");
        assert!(
            nested.iter().all(|r| r.class.key() == "agree"),
            "{f}: {:?}",
            nested.iter().find(|r| r.class.key() != "agree")
        );
    }
    // Twin 1: a plan without the inner-to-outer pass.
    let text = std::fs::read_to_string(format!("{dir}/uneven/dtensor_uneven.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let place = |p: &serde_json::Value| match p.as_str().unwrap() {
        "R" => Placement::Inv,
        "S(0)" => Placement::Shard(0, Split::Chunk),
        "S(1)" => Placement::Shard(1, Split::Chunk),
        other => panic!("{other}"),
    };
    let pieces = |x: &serde_json::Value| -> Option<Vec<Tensor>> {
        x.as_array()?
            .iter()
            .map(|t| spmd_check::registry::parse_tensor(t.as_str()?).ok())
            .collect()
    };
    let (mut differ, mut differ_planned) = (0, 0);
    for c in v["cases"].as_array().unwrap() {
        if c["mesh"] != serde_json::json!([2, 2]) || c.get("refused").is_some() {
            continue;
        }
        let src: Vec<Placement> = c["src"].as_array().unwrap().iter().map(place).collect();
        let dst: Vec<Placement> = c["dst"].as_array().unwrap().iter().map(place).collect();
        let (Some(before), Some(after)) = (pieces(&c["before"]), pieces(&c["after"])) else {
            continue;
        };
        let straight: Vec<PlanStep> = (0..2)
            .filter(|&m| src[m] != dst[m])
            .map(|m| PlanStep {
                mesh_dim: m,
                from: src[m].clone(),
                to: dst[m].clone(),
            })
            .collect();
        let naive = run_plan(&[2, 2], straight).unwrap();
        if naive(&before).ok().as_ref() != Some(&after) {
            differ += 1;
        }
        let planned = run_plan(&[2, 2], plan(&src, &dst)).unwrap();
        if planned(&before).ok().as_ref() != Some(&after) {
            differ_planned += 1;
        }
    }
    assert_eq!(differ_planned, 0);
    assert!(differ > 0, "the straight plan must go wrong somewhere");
    // Twin 2: the flattened one-step gather on nested shards.
    let s0 = Placement::Shard(0, Split::Chunk);
    let input = Nested {
        axes: vec![(2, s0.clone()), (2, s0.clone())],
    };
    let output = Nested {
        axes: vec![(2, Placement::Inv), (2, Placement::Inv)],
    };
    let flat = |xs: &[Tensor]| -> Result<Vec<Tensor>, String> {
        let g = flat_gather_padded(xs, 0).ok_or("a piece longer than the padded block")?;
        Ok(vec![g; xs.len()])
    };
    let mut t = Tally::default();
    let f = check_step(&input, &output, &flat, None, 4, &[5], &mut t)
        .expect_err("the flattened gather loses a row of 5");
    assert_eq!(f.property(), "F1");
    // The same gather is right on pieces of one chunk split over 4 ranks.
    let one = Placement::Shard(0, Split::Chunk);
    check_step(
        &one,
        &Placement::Inv,
        &flat,
        None,
        4,
        &[5],
        &mut Tally::default(),
    )
    .expect("right for one chunk split");
    // DTensor's own plan for it is sound there.
    let dtensor = run_plan(
        &[2, 2],
        plan(&[s0.clone(), s0.clone()], &[Placement::Inv, Placement::Inv]),
    )
    .unwrap();
    check_step(
        &input,
        &output,
        &dtensor,
        None,
        4,
        &[5],
        &mut Tally::default(),
    )
    .expect("DTensor's two-step gather is right");
}

/// `run` of a nested redistribute (SPEC.md §23.20): [S(0), S(0)] of 5 rows
/// on 2×2 (pieces 2, 1, 1, 1) gathered by DTensor's two-step plan, with
/// its backward and F1/B3 on the shape; pieces cut by one chunk split over
/// 4 ranks (2, 2, 1, 0) are not well formed there, and hostile jobs are
/// one line, exit 2.
#[test]
fn run_of_a_nested_redistribute_follows_dtensors_plan() {
    let ex = format!("{}/examples/run_nested.json", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = run(&["run", &ex, "--check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("DTensor's plan: mesh dim 1: Shard(0, chunk) -> Replicate(), then mesh dim 0"),
        "{out}"
    );
    assert!(out.contains("per rank [1, 0] | [0] | [0] | [1]"), "{out}");
    assert!(out.contains("check: passed"), "{out}");
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ex).unwrap()).unwrap();
    let d = fresh_dir("uneven", "nested-jobs");
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "one chunk split",
            Box::new(|v| v["inputs"][0]["per_rank"] = serde_json::json!([[1, 2], [3, 4], [5], []])),
            "not well formed for [Shard(0, chunk), Shard(0, chunk)]",
        ),
        (
            "dialect",
            Box::new(|v| v["dialect"] = "jax".into()),
            "is a DTensor redistribute",
        ),
        (
            "forward",
            Box::new(|v| v["forward"] = "all_gather".into()),
            "runs `redistribute`",
        ),
        (
            "one type",
            Box::new(|v| v["output"] = "Replicate()".into()),
            "one placement per axis",
        ),
        (
            "axis",
            Box::new(|v| v["output"] = serde_json::json!({"pp": "Replicate()"})),
            "`pp` is not an axis",
        ),
        (
            "ranks",
            Box::new(|v| v["mesh"] = serde_json::json!({"dp": 4, "tp": 8})),
            "at most 16",
        ),
        (
            "backward",
            Box::new(|v| v["backward"] = "all_gather".into()),
            "does not go with",
        ),
    ];
    for (name, edit, want) in cases {
        let mut v = base.clone();
        edit(&mut v);
        let f = d.join(format!("{}.json", name.replace(' ', "_")));
        std::fs::write(&f, v.to_string()).unwrap();
        let (code, out, err) = run(&["run", f.to_str().unwrap(), "--check"]);
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
    }
}

/// A hostile uneven recording (SPEC.md §23.13): a mesh of 10^12 ranks,
/// split sizes of 10^12 rows, a backward case on a huge mesh: each is one
/// case that is not expressible, never a panic, a hang or an allocation of
/// that size.
#[test]
fn a_hostile_uneven_recording_is_not_expressible_case_by_case() {
    let dir = spmd_check::fidelity::default_dir();
    let tmp = fresh_dir("uneven", "fidelity-hostile");
    std::fs::create_dir_all(tmp.join("uneven")).unwrap();
    for (f, key, val) in [
        (
            "dtensor_uneven.json",
            "mesh",
            serde_json::json!([1_000_000_000_000u64]),
        ),
        (
            "dtensor_uneven_backward.json",
            "mesh",
            serde_json::json!([1_000_000_000_000u64]),
        ),
        (
            "spmd_types_uneven.json",
            "split_sizes",
            serde_json::json!([1_000_000_000_000u64, 0]),
        ),
    ] {
        let text = std::fs::read_to_string(format!("{dir}/uneven/{f}")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cases = v["cases"].as_array_mut().unwrap();
        cases.truncate(3);
        cases[1][key] = val;
        std::fs::write(tmp.join("uneven").join(f), v.to_string()).unwrap();
    }
    let rs = spmd_check::fidelity::uneven::run(tmp.to_str().unwrap()).unwrap();
    for f in [
        "dtensor_uneven.json",
        "dtensor_uneven_backward.json",
        "spmd_types_uneven.json",
    ] {
        let these: Vec<_> = rs
            .iter()
            .filter(|r| r.file.ends_with(&format!("/{f}")))
            .collect();
        assert_eq!(these.len(), 3, "{f}");
        assert_eq!(
            these[1].class.key(),
            "not_expressible",
            "{f}: {:?}",
            these[1]
        );
    }
}

/// The gloo recordings' backward replay (SPEC.md §23.13): the twin, one
/// recorded gradient of spmd_types' uneven all_gather changed, is a model
/// mismatch of the backward on that rank.
#[test]
fn a_tampered_spmd_types_gradient_is_a_model_mismatch() {
    let dir = spmd_check::fidelity::default_dir();
    let f = "spmd_types_uneven_gloo_padded.json";
    let text = std::fs::read_to_string(format!("{dir}/uneven/{f}")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = v["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["op"] == "all_gather" && c["split_sizes"] == serde_json::json!([1, 0]))
        .expect("an uneven all_gather on 2 ranks");
    assert_eq!(c["grad"][0], "1x2:2102,2104");
    c["grad"][0] = serde_json::json!("1x2:2102,2105");
    let tmp = fresh_dir("uneven", "fidelity-gloo");
    std::fs::create_dir_all(tmp.join("uneven")).unwrap();
    std::fs::write(tmp.join("uneven").join(f), v.to_string()).unwrap();
    let rs = spmd_check::fidelity::uneven::run(tmp.to_str().unwrap()).unwrap();
    let bad: Vec<_> = rs
        .iter()
        .filter(|r| r.class.key() == "model_mismatch")
        .collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0]
            .class
            .detail()
            .unwrap()
            .starts_with("backward: rank 0:"),
        "{:?}",
        bad[0]
    );
}
