//! Programs, local ops and collectives with a backward or JVP under
//! `vmap` (SPEC.md §24.9): batched step by step (`interp::batch`), V1 on
//! the forward, the core's properties on the batched program in both
//! orders of grad and vmap. Every property has its twin here or in
//! examples/batching.toml.

mod common;

use spmd_check::dialects::jax::{batch_collective, transpose_collective};
use spmd_check::interp::batch::{batch_program, exact_rule, BatchError, Batching, Order};
use spmd_check::interp::catalogue::collective;
use spmd_check::interp::{parse, Backward, Collective, Kind, Op, Program, Step, TypedOp};
use spmd_check::oracle::batching::{check_v1, linear_batches, V1Tally};
use spmd_check::oracle::check::{Checker, Outcome, Phase};
use spmd_check::semantics::batch::stack_per_rank;
use spmd_check::semantics::perrank::{from_free, num_free};
use spmd_check::semantics::uneven::Placement;
use spmd_check::semantics::{Mesh, PerRank, Property, State, Tensor, Type, Q};

fn ty(s: State) -> Type {
    Type::new(vec![s])
}

fn coll(text: &str, src: State, dst: State) -> Collective {
    collective(text, &[src], &[dst], &["x".to_string()]).expect(text)
}

fn forward<'a>(
    p: &'a Program,
    m: &Mesh,
) -> impl Fn(&[Vec<Tensor>]) -> Result<Vec<Tensor>, String> + 'a {
    let m = m.clone();
    move |xs: &[Vec<Tensor>]| {
        let xs: Vec<PerRank> = xs.iter().map(|t| PerRank { tensors: t.clone() }).collect();
        p.forward(&m, &xs)
            .map(|f| f.y.tensors)
            .map_err(|e| format!("{e:?}"))
    }
}

/// `x |> collective |> s * s`: a collective, then a square.
fn then_square(c: Collective) -> Program {
    let mut p = alone(c);
    let dst = p.output().clone();
    let sq = TypedOp::local(parse("s * s").unwrap(), vec![dst.clone()], dst);
    p.steps.push(Step {
        name: "sq".into(),
        op: sq,
        args: vec![1],
    });
    Program::new(p.inputs.clone(), p.steps).unwrap()
}

/// `x |> collective`, with JAX's transpose as its backward (none where
/// JAX has none).
fn alone(c: Collective) -> Program {
    let (src, dst) = (c.src, c.dst);
    let backward = match transpose_collective(&c.kind) {
        Ok(kind) => Backward::Transpose(Op::Collective(Collective {
            kind,
            name: "transpose".into(),
            src: dst,
            dst: src,
            ..c.clone()
        })),
        Err(_) => Backward::LocalVjp,
    };
    let step = TypedOp {
        op: Op::Collective(c),
        inputs: vec![ty(src)],
        output: ty(dst),
        backward,
        jvp: None,
        no_grad: vec![],
    };
    Program::new(
        vec![ty(src)],
        vec![Step {
            name: "c".into(),
            op: step,
            args: vec![0],
        }],
    )
    .unwrap()
}

/// JAX's untiled psum_scatter batched after its scatter dim, inside a
/// program, on elements of rank 3: JAX's claimed batch dim (d + 1) is in
/// range, so the batched program runs and V1 fails on values, not on a
/// refusal. The meaning's rule (d − 1) holds on the same batches.
#[test]
fn jaxs_untiled_psum_scatter_in_a_program_gives_wrong_values() {
    let m = Mesh::line(2);
    let p = then_square(coll(
        "psum_scatter(dim=0, stack)",
        State::Varying,
        State::Varying,
    ));
    let shape = vec![2, 2, 3];
    let no_t = |_: &Kind| -> Result<Kind, String> { Err("none".into()) };
    let jax = Batching {
        rule: &batch_collective,
        transpose: &transpose_collective,
        order: Order::GradOfVmap,
        local_converts: true,
    };
    let exact = Batching {
        rule: &exact_rule,
        transpose: &no_t,
        order: Order::GradOfVmap,
        local_converts: true,
    };
    let vals = |seed: i64, n: usize| -> Vec<Q> {
        (0..n)
            .map(|i| Q::int((i as i64 * 7 + seed) % 5 - 2))
            .collect()
    };
    let t = ty(State::Varying);
    let nf = num_free(&m, &t, &shape);
    let batch: Vec<Vec<Vec<Tensor>>> = (0..2)
        .map(|e| vec![from_free(&m, &t, &shape, &vals(e + 1, nf)).tensors])
        .collect();
    let f = forward(&p, &m);
    // x batched at 1: after the scatter dim 0.
    let q = batch_program(&p, &m, std::slice::from_ref(&shape), &[Some(1)], 0, 2, &jax).unwrap();
    let mut tally = V1Tally::default();
    let fail = check_v1(
        &f,
        &forward(&q, &m),
        &[Some(1)],
        Some(0),
        std::slice::from_ref(&batch),
        &mut tally,
    )
    .expect_err("JAX's rule misplaces the batch dim");
    assert!(fail.got.is_ok(), "values, not a refusal: {:?}", fail.got);
    assert!(fail.expected.is_some());
    let q = batch_program(
        &p,
        &m,
        std::slice::from_ref(&shape),
        &[Some(1)],
        0,
        2,
        &exact,
    )
    .unwrap();
    check_v1(
        &f,
        &forward(&q, &m),
        &[Some(1)],
        Some(0),
        &[batch],
        &mut tally,
    )
    .expect("the meaning's rule keeps V1");
}

/// The meaning's batching rule keeps V1 for every collective kind and
/// every batch dim, untiled all_to_all included, on 2 and 3 ranks; JAX's
/// rule, on the same cases, fails exactly where §24.3 says.
#[test]
fn the_exact_rule_keeps_v1_everywhere_and_jaxs_fails_where_it_should() {
    use State::*;
    let cases = [
        ("all_gather(dim=0)", Varying, Invariant, vec![2, 1]),
        ("all_gather(dim=1, stack)", Varying, Invariant, vec![1, 2]),
        ("psum_scatter(dim=0)", Varying, Varying, vec![0, 2]),
        ("psum_scatter(dim=0, stack)", Varying, Varying, vec![0, 2]),
        ("psum_scatter(dim=1, stack)", Varying, Varying, vec![2, 0]),
        (
            "all_to_all(split=0, concat=1)",
            Varying,
            Varying,
            vec![0, 1],
        ),
        (
            "all_to_all(split=0, concat=1, stack)",
            Varying,
            Varying,
            vec![0, 2],
        ),
        (
            "all_to_all(split=1, concat=0, stack)",
            Varying,
            Varying,
            vec![2, 0],
        ),
        ("psum", Varying, Invariant, vec![2, 1]),
        ("ppermute(perm=[1, 0])", Varying, Varying, vec![2, 1]),
    ];
    let mut jax_bad = Vec::new();
    let mut checked = 0;
    for (text, src, dst, shape) in &cases {
        for n in [2, 3] {
            if text.contains("perm") && n != 2 {
                continue;
            }
            let m = Mesh::line(n);
            let shape: Vec<usize> = shape.iter().map(|&s| if s == 0 { n } else { s }).collect();
            let c = coll(text, *src, *dst);
            let p = match *src {
                Varying | Partial => Placement::Part,
                _ => Placement::Inv,
            };
            let basis = p.basis(&shape, n).unwrap();
            for d in 0..=shape.len() {
                for (name, rule) in [
                    (
                        "exact",
                        &exact_rule as &dyn Fn(&Kind, usize) -> Result<(Kind, usize), String>,
                    ),
                    ("jax", &batch_collective),
                ] {
                    let Ok((kind, e)) = rule(&c.kind, d) else {
                        assert_eq!(
                            name, "jax",
                            "{text} at {d}: the exact rule batches every kind"
                        );
                        continue;
                    };
                    let b = Collective { kind, ..c.clone() };
                    let run = |cc: &Collective, to: Option<(usize, usize)>| {
                        let cc = cc.clone();
                        let m = m.clone();
                        move |xs: &[Vec<Tensor>]| -> Result<Vec<Tensor>, String> {
                            cc.infer(&m, &xs[0][0].shape)?;
                            let y = cc
                                .forward(
                                    &m,
                                    &PerRank {
                                        tensors: xs[0].clone(),
                                    },
                                )
                                .tensors;
                            match to {
                                None => Ok(y),
                                Some((from, to)) => y
                                    .iter()
                                    .map(|t| {
                                        spmd_check::semantics::batch::move_dim(t, from, to)
                                            .ok_or_else(|| "past the end".to_string())
                                    })
                                    .collect(),
                            }
                        }
                    };
                    let mut tally = V1Tally::default();
                    let mut ok = true;
                    for k in 1..=2 {
                        if check_v1(
                            &run(&c, None),
                            &run(&b, Some((e, 0))),
                            &[Some(d)],
                            Some(0),
                            &linear_batches(&basis, k),
                            &mut tally,
                        )
                        .is_err()
                        {
                            ok = false;
                        }
                    }
                    checked += tally.batches;
                    match (name, ok) {
                        ("exact", false) => {
                            panic!("{text} on {n} ranks at {d}: the exact rule fails V1")
                        }
                        ("jax", false) => jax_bad.push(format!("{text} at {d}")),
                        _ => {}
                    }
                }
            }
        }
    }
    assert!(checked > 500, "{checked}");
    jax_bad.sort();
    jax_bad.dedup();
    assert_eq!(
        jax_bad,
        vec![
            "psum_scatter(dim=0, stack) at 1",
            "psum_scatter(dim=0, stack) at 2",
            "psum_scatter(dim=1, stack) at 2",
        ]
    );
}

/// grad(vmap(f)): the core checks the batched program's backward (the
/// transposes of the batched collectives) against its meaning. With JAX's
/// transposes it is sound; with a transpose that forgets to shift the
/// gather dim of the batched all_gather (the twin) it fails B1.
#[test]
fn grad_of_vmap_with_a_wrong_batched_transpose_fails_b1() {
    let m = Mesh::line(2);
    let p = then_square(coll("all_gather(dim=0)", State::Varying, State::Varying));
    let shape = vec![1, 2];
    let wrong = |k: &Kind| -> Result<Kind, String> {
        Ok(match transpose_collective(k)? {
            Kind::ReduceScatter { dim, stack } => Kind::ReduceScatter {
                dim: dim.saturating_sub(1),
                stack,
            },
            other => other,
        })
    };
    let verdict = |t: &dyn Fn(&Kind) -> Result<Kind, String>| -> Option<Property> {
        let b = Batching {
            rule: &batch_collective,
            transpose: t,
            order: Order::GradOfVmap,
            local_converts: true,
        };
        let q = batch_program(&p, &m, std::slice::from_ref(&shape), &[Some(0)], 0, 2, &b).unwrap();
        let op = TypedOp {
            op: Op::Program(Box::new(q)),
            inputs: vec![ty(State::Varying)],
            output: ty(State::Varying),
            backward: Backward::Steps,
            jvp: None,
            no_grad: vec![],
        };
        let t = ty(State::Varying);
        let elems: Vec<Vec<Tensor>> = (0..2)
            .map(|e| {
                let v: Vec<Q> = (0..num_free(&m, &t, &shape))
                    .map(|i| Q::int((i as i64 + e) % 3 - 1))
                    .collect();
                from_free(&m, &t, &shape, &v).tensors
            })
            .collect();
        let x = PerRank {
            tensors: stack_per_rank(&elems, 0).unwrap(),
        };
        let c = Checker::new(&op, &m, vec![x.shape().to_vec()]).unwrap();
        match c.check(&[x], Phase::All) {
            Outcome::Fail(v) => Some(v.property),
            _ => None,
        }
    };
    assert_eq!(verdict(&transpose_collective), None);
    assert_eq!(verdict(&wrong), Some(Property::B1));
}

/// A backward the system's rule cannot batch is a refusal of that order
/// alone, and an unmodelled step says so.
#[test]
fn batching_errors_name_their_order() {
    let m = Mesh::line(2);
    let gather = || coll("all_gather(dim=0, stack)", State::Varying, State::Varying);
    let p = alone(gather());
    let sq = then_square(gather());
    let jax = |order| Batching {
        rule: &batch_collective,
        transpose: &transpose_collective,
        order,
        local_converts: true,
    };
    // x of rank 1 batched at 1, the output's cotangent at 0: both run.
    assert!(batch_program(
        &p,
        &m,
        &[vec![1]],
        &[Some(1)],
        0,
        1,
        &jax(Order::VmapOfGrad)
    )
    .is_ok());
    // The square keeps the gather's batch dim (2, elementwise); a cotangent
    // arriving there stays there (refused), one arriving at 0 goes to 0
    // (runs), as JAX's elementwise batchers place it.
    let run = |out: usize| {
        batch_program(
            &sq,
            &m,
            &[vec![1]],
            &[Some(1)],
            out,
            1,
            &jax(Order::VmapOfGrad),
        )
    };
    assert!(matches!(run(2), Err(BatchError::BackwardRefused(_))));
    assert!(run(0).is_ok());
    assert!(run(1).is_ok());
    // The cotangent at 2 (out_axes 2): JAX's psum_scatter rule claims 3.
    let e = batch_program(
        &p,
        &m,
        &[vec![1]],
        &[Some(1)],
        2,
        1,
        &jax(Order::VmapOfGrad),
    );
    assert!(matches!(e, Err(BatchError::BackwardRefused(_))), "{e:?}");
    assert!(batch_program(
        &p,
        &m,
        &[vec![1]],
        &[Some(1)],
        2,
        1,
        &jax(Order::GradOfVmap)
    )
    .is_ok());
    // A conversion is local slicing: batched exactly where the system's
    // conversions are local ops (JAX: its transpose of
    // all_gather_invariant is a dynamic_slice), not modelled where they
    // are not (spmd_types' autograd Functions).
    let conv = then_square(coll(
        "convert(I,V, dim=0)",
        State::Invariant,
        State::Varying,
    ));
    assert!(batch_program(
        &conv,
        &m,
        &[vec![2]],
        &[Some(0)],
        0,
        1,
        &jax(Order::GradOfVmap)
    )
    .is_ok());
    let no_local = Batching {
        rule: &batch_collective,
        transpose: &transpose_collective,
        order: Order::GradOfVmap,
        local_converts: false,
    };
    let e = batch_program(&conv, &m, &[vec![2]], &[Some(0)], 0, 1, &no_local);
    assert!(matches!(e, Err(BatchError::Unmodelled(_))), "{e:?}");
}

/// `check --json` of examples/batching.toml: the program rules come out
/// as pinned, each failure naming its property and where.
#[test]
fn check_json_of_programs_under_vmap() {
    let ex = format!("{}/examples/batching.toml", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = common::run(&["check", &ex, "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let find = |name: &str| common::rule_named(&v, name);
    let r = find("jax: row-parallel matmul, its psum deferred past a linear op, x batched");
    assert_eq!(r["verdict"], "sound");
    assert_eq!(r["batching"]["program"], true);
    assert_eq!(r["backward_checked"], true);
    assert!(r["core_instances"].as_u64().unwrap() > 0);
    let r = find("jax: untiled psum_scatter in a program, batched after its scatter dim");
    assert_eq!(r["property"], "V1");
    // The twins fail without vmap, and say so.
    let r = find("twin: all_reduce P -> R whose JVP reduces the tangent again");
    assert_eq!(r["property"], "J1");
    assert_eq!(r["counterexample"]["order"], "f");
    let r = find("twin: tensor-parallel MLP without f (x used as if varying), under vmap");
    assert_eq!(r["property"], "B1");
    assert_eq!(r["counterexample"]["order"], "f");
    let r = find(
        "jax: untiled all_gather and its transpose, the cotangent batched after the gather dim",
    );
    assert_eq!(r["verdict"], "unsound");
    assert_eq!(r["counterexample"]["order"], "vmap(grad(f))");
}

/// Hostile program rules under `vmap`: one line, exit 2.
#[test]
fn a_hostile_vmap_program_is_one_line_exit_2() {
    let d = common::fresh_dir("vmap_programs", "hostile");
    let p = d.join("r.toml");
    let prog = |dialect: &str, vmap: &str, extra: &str| {
        format!(
            "[[rule]]\nname = \"a\"\n{dialect}names = [\"x\", \"w\"]\ninputs = [\"V\", \"V\"]\noutput = \"V\"\n{vmap}\n{extra}\n[[rule.step]]\nname = \"y\"\nexpr = \"x * w\"\noutput = \"V\"\n"
        )
    };
    let cases = [
        (prog("", "vmap = { in_axes = [0] }", ""), "names 1 inputs"),
        (prog("", "vmap = { in_axes = [\"none\", \"none\"] }", ""), "no input is batched"),
        (prog("", "vmap = { in_axes = [0, 0], out_axes = \"none\" }", ""), "output is batched"),
        (
            prog("", "vmap = { in_axes = [0, 0], spmd_axis_name = \"x\" }", ""),
            "write the rule's mesh",
        ),
        (
            prog(
                "",
                "vmap = { in_axes = [0, 0], spmd_axis_name = \"dp\" }",
                "mesh = { dp = 2, x = 2 }\n",
            )
            .replace("expr = \"x * w\"", "forward = \"all_reduce(axes=[dp])\"\ninput = \"x\""),
            "a collective over it would combine different elements",
        ),
        (prog("dialect = \"dtensor\"\n", "vmap = { in_axes = [0, 0] }", ""), "no batching rule of dialect"),
        (prog("", "vmap = { in_axes = [0, 12] }", ""), "at most 8"),
        (
            "[[rule]]\nname = \"a\"\ndialect = \"spmd_types\"\nnames = [\"x\"]\ninputs = [\"P\"]\noutput = \"R\"\nvmap = { in_axes = [0] }\n\n[[rule.step]]\nname = \"y\"\nforward = \"all_reduce\"\ninput = \"x\"\noutput = \"R\"\n".to_string(),
            "setup_context",
        ),
        (
            "[[rule]]\nname = \"a\"\nop = \"mul\"\ninputs = [\"V\", \"V\"]\noutput = \"V\"\nbackward = [\"g * y\", \"g * x\"]\nvmap = { in_axes = [0, 0] }\n".to_string(),
            "hand-written local backward",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&p, &text).unwrap();
        let (code, out, err) = common::run(&["check", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{text}: {out}{err}");
        assert_eq!(common::error_lines(&err), 1, "{text}: {err}");
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// Fidelity over JAX's vmap of programs (SPEC.md §24.10): every recorded
/// case's forward and both orders' gradients against the meaning, and the
/// model's batched program against JAX. The untiled psum_scatter batched
/// after its scatter dim is JAX's defect (it raises); everything else
/// agrees. Twins: one changed value of JAX's forward or gradients is a
/// model mismatch; hostile recordings are not expressible.
#[test]
fn fidelity_replays_jaxs_vmap_of_programs() {
    use spmd_check::fidelity::vmap_programs::{run, FILE};
    let dir = spmd_check::fidelity::default_dir();
    let rs = run(&dir).expect("the recording reads");
    let count = |class: &str| rs.iter().filter(|r| r.class.key() == class).count();
    assert_eq!(rs.len(), 200);
    assert_eq!(count("real_defect"), 16);
    assert!(rs
        .iter()
        .filter(|r| r.class.key() == "real_defect")
        .all(|r| r.id.contains("scatter_untiled") && !r.id.contains("in_axes [0]")));
    assert_eq!(count("agree"), 184);
    assert!(rs
        .iter()
        .filter(|r| r.class.key() == "agree")
        .all(|r| r.note.contains("grad(vmap(f))") && r.note.contains("vmap(grad(f))")));
    let text = std::fs::read_to_string(format!("{dir}/{FILE}")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tmp = common::fresh_dir("vmap_programs", "fidelity");
    std::fs::create_dir_all(tmp.join("transforms")).unwrap();
    let changed = |key: &str, pick: &dyn Fn(&mut serde_json::Value) -> &mut serde_json::Value| {
        let mut w = v.clone();
        let c = w["cases"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["program"] == "mlp" && c["in_axes"][0] == 1 && c["k"] == 2)
            .unwrap();
        let slot = pick(&mut c[key]);
        let t = slot.as_str().unwrap().to_string();
        let (shape, vals) = t.split_once(':').unwrap();
        let mut vals: Vec<String> = vals.split(',').map(String::from).collect();
        vals[0] = "999".into();
        *slot = serde_json::json!(format!("{shape}:{}", vals.join(",")));
        std::fs::write(tmp.join(FILE), w.to_string()).unwrap();
        let rs = run(tmp.to_str().unwrap()).unwrap();
        rs.iter()
            .filter(|r| r.class.key() == "model_mismatch")
            .map(|r| format!("{:?}", r.class))
            .collect::<Vec<_>>()
    };
    let f = changed("forward", &|x| &mut x[0]);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].contains("forward"), "{f:?}");
    let g = changed("grad_of_vmap", &|x| &mut x[1][0]);
    assert_eq!(g.len(), 1, "{g:?}");
    assert!(g[0].contains("grad_of_vmap"), "{g:?}");
    let g = changed("vmap_of_grad", &|x| &mut x[0][1]);
    assert_eq!(g.len(), 1, "{g:?}");
    assert!(g[0].contains("vmap_of_grad"), "{g:?}");
    // Hostile: a mesh of 10^12 ranks, a batch of 10^15, an input missing,
    // in_axes of the wrong length, a cotangent of the wrong shape.
    let mut w = v.clone();
    let cases = w["cases"].as_array_mut().unwrap();
    cases[0]["n"] = serde_json::json!(1_000_000_000_000u64);
    cases[1]["k"] = serde_json::json!(1_000_000_000_000_000u64);
    cases[2]["inputs"] = serde_json::json!([["2x2:1,2,3,4"]]);
    cases[3]["in_axes"] = serde_json::json!([0, 0, 0, 0]);
    cases[4]["cotangent"] = serde_json::json!(["1:1", "1:1"]);
    cases[5]["program"] = serde_json::json!("unknown");
    std::fs::write(tmp.join(FILE), w.to_string()).unwrap();
    let rs = run(tmp.to_str().unwrap()).unwrap();
    for r in &rs[0..=5] {
        assert_eq!(r.class.key(), "not_expressible", "{r:?}");
    }
}

/// `programs --vmap` (SPEC.md §24.11): every generated JAX program of
/// depth 1 under vmap; none fails because of vmap (exit 0), the ones that
/// fail alone say "before vmap". A system without batching rules, or
/// another mode beside it, is one line, exit 2.
#[test]
fn generated_programs_under_vmap() {
    let (code, out, err) = common::run(&[
        "programs",
        "--dialect",
        "jax",
        "--depth",
        "1",
        "--vmap",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["report"];
    assert_eq!(r["failed"], false);
    let counts = r["counts"].as_object().unwrap();
    assert!(counts["sound"].as_u64().unwrap() > 100, "{counts:?}");
    assert!(
        counts
            .keys()
            .all(|k| k == "sound" || k == "vacuous" || k.ends_with("before vmap")),
        "{counts:?}"
    );
    let (code, out, err) = common::run(&[
        "programs",
        "--dialect",
        "spmd_types",
        "--depth",
        "1",
        "--vmap",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("refused by spmd_types"), "{out}");
    for bad in [
        &["programs", "--dialect", "dtensor", "--vmap"][..],
        &["programs", "--dialect", "jax", "--vmap", "--random", "3"],
    ] {
        let (code, _, err) = common::run(bad);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert_eq!(common::error_lines(&err), 1, "{err}");
    }
}

/// vmap(vmap(f)) of a program (SPEC.md §24.9): the row-parallel matmul
/// with its psum deferred, batched by JAX's rules once (x at 0) and again
/// (the batched x at 1). The twice-batched program must be the stack of
/// the once-batched one (V1), whose own V1 against the program holds
/// first; and the core finds both orders of the twice-batched program's
/// backward sound.
#[test]
fn vmap_of_vmap_of_a_program() {
    let text = "[[rule]]\nname = \"rp\"\ndialect = \"jax\"\nnames = [\"x\", \"w\"]\ninputs = [\"Varying\", \"Varying\"]\noutput = \"Invariant\"\n\n[[rule.step]]\nname = \"h\"\nexpr = \"3 * matmul(x, w)\"\noutput = \"Varying\"\n\n[[rule.step]]\nname = \"y\"\nforward = \"psum\"\ninput = \"h\"\noutput = \"Invariant\"\n";
    let rule = spmd_check::rules::load_str("rp.toml", text)
        .unwrap()
        .remove(0);
    let Op::Program(p) = &rule.op.op else {
        panic!("a program")
    };
    let m = Mesh::line(2);
    let jax = |order| Batching {
        rule: &batch_collective,
        transpose: &transpose_collective,
        order,
        local_converts: true,
    };
    let (k1, k2) = (2, 2);
    let shapes = vec![vec![2, 1], vec![1, 2]];
    let vx = ty(State::Varying);
    let mut tally = V1Tally::default();
    for order in [Order::GradOfVmap, Order::VmapOfGrad] {
        let q1 = batch_program(p, &m, &shapes, &[Some(0), None], 0, k1, &jax(order)).unwrap();
        let shapes1 = vec![vec![k1, 2, 1], vec![1, 2]];
        let q2 = batch_program(&q1, &m, &shapes1, &[Some(1), None], 0, k2, &jax(order)).unwrap();
        // Elements of the outer batch: once-batched inputs, w shared.
        let val = |seed: i64, shape: &[usize]| {
            let n = num_free(&m, &vx, shape);
            let v: Vec<Q> = (0..n)
                .map(|i| Q::int((i as i64 * 5 + seed) % 5 - 2))
                .collect();
            from_free(&m, &vx, shape, &v).tensors
        };
        let w = val(7, &[1, 2]);
        let batch: Vec<Vec<Vec<Tensor>>> = (0..k2)
            .map(|e| vec![val(e as i64 + 1, &[k1, 2, 1]), w.clone()])
            .collect();
        check_v1(
            &forward(&q1, &m),
            &forward(&q2, &m),
            &[Some(1), None],
            Some(0),
            std::slice::from_ref(&batch),
            &mut tally,
        )
        .expect("vmap of vmap is the stack of the once-batched program");
        // The once-batched program against the program itself.
        let inner: Vec<Vec<Vec<Tensor>>> = (0..k1)
            .map(|e| vec![val(e as i64 + 3, &[2, 1]), w.clone()])
            .collect();
        check_v1(
            &forward(p, &m),
            &forward(&q1, &m),
            &[Some(0), None],
            Some(0),
            std::slice::from_ref(&inner),
            &mut tally,
        )
        .expect("vmap is the stack of the program");
        // Both orders' backward of the twice-batched program.
        let op = TypedOp {
            op: Op::Program(Box::new(q2)),
            inputs: vec![vx.clone(), vx.clone()],
            output: ty(State::Invariant),
            backward: Backward::Steps,
            jvp: None,
            no_grad: vec![],
        };
        let x2 = PerRank {
            tensors: stack_per_rank(&batch.iter().map(|e| e[0].clone()).collect::<Vec<_>>(), 1)
                .unwrap(),
        };
        let xs = vec![x2, PerRank { tensors: w.clone() }];
        let c = Checker::new(&op, &m, xs.iter().map(|x| x.shape().to_vec()).collect()).unwrap();
        assert!(
            !matches!(c.check(&xs, Phase::All), Outcome::Fail(_)),
            "{order:?}"
        );
    }
    assert_eq!(tally.batches, 4);
}

/// `run` of a program under vmap (SPEC.md §24.13): each element's result,
/// their stack, the batched program's; V1 on the values. The example
/// holds (exit 0); JAX's untiled psum_scatter after a square, batched
/// after its scatter dim on elements of rank 3, gives other values (exit
/// 1). Hostile jobs: one line, exit 2.
#[test]
fn run_of_a_program_under_vmap() {
    let ex = format!(
        "{}/examples/run_vmap_program.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let (code, out, err) = common::run(&["run", &ex, "--check"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("V1 holds on these values"), "{out}");
    assert!(out.contains("[[[21]], [[33]]]"), "{out}");
    let d = common::fresh_dir("vmap_programs", "run");
    let p = d.join("j.json");
    // x per rank: [2 (scatter), 1, 2 (batch), 1] batched at 2.
    let x = |r: i64| serde_json::json!([[[[r], [r + 1]]], [[[r + 2], [r + 3]]]]);
    let job = serde_json::json!({
        "dialect": "jax", "mesh": {"x": 2}, "names": ["x"],
        "inputs": [{"type": "Varying", "per_rank": [x(1), x(5)]}],
        "output": "Varying",
        "steps": [
            {"name": "s", "expr": "x * x", "output": "Varying"},
            {"name": "y", "forward": "psum_scatter(dim=0, stack)", "input": "s", "output": "Varying"}
        ],
        "vmap": {"in_axes": [2], "out_axes": 0}
    });
    std::fs::write(&p, job.to_string()).unwrap();
    let (code, out, err) = common::run(&["run", p.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("V1 FAILS on these values"), "{out}");
    for (edit, want) in [
        (
            serde_json::json!({"cotangent": [[1], [1]]}),
            "do not go with",
        ),
        (
            serde_json::json!({"vmap": {"in_axes": [2], "spmd_axis_name": "x"}}),
            "spmd_axis_name",
        ),
        (
            serde_json::json!({"vmap": {"in_axes": [5]}}),
            "no batch dim 5",
        ),
    ] {
        let mut j = job.clone();
        for (k, v) in edit.as_object().unwrap() {
            j[k] = v.clone();
        }
        std::fs::write(&p, j.to_string()).unwrap();
        let (code, _, err) = common::run(&["run", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{edit}: {err}");
        assert_eq!(common::error_lines(&err), 1, "{err}");
        assert!(err.contains(want), "{edit}: {err}");
    }
}

/// The replay's exact gradients (from the forward alone) are what a right
/// backward gives, and not what a wrong one gives: the tensor-parallel
/// MLP's composed backward agrees with them; the same MLP without f (x
/// used as if varying, its backward missing the psum) does not.
#[test]
fn the_replays_exact_gradients_tell_a_wrong_backward() {
    use spmd_check::fidelity::vmap_programs::exact_gradients;
    let mlp = |with_f: bool| {
        let f = if with_f {
            "[[rule.step]]\nname = \"xv\"\nforward = \"pvary\"\ninput = \"x\"\nbackward = \"psum_invariant\"\noutput = \"V\"\n\n"
        } else {
            ""
        };
        let x = if with_f { "xv" } else { "x" };
        format!(
            "[[rule]]\nname = \"m\"\nnames = [\"x\", \"w1\", \"w2\"]\ninputs = [\"I\", \"V\", \"V\"]\noutput = \"I\"\n\n{f}[[rule.step]]\nname = \"h\"\nexpr = \"matmul({x}, w1)^2\"\noutput = \"V\"\n\n[[rule.step]]\nname = \"o\"\nexpr = \"matmul(h, w2)\"\noutput = \"V\"\n\n[[rule.step]]\nname = \"op\"\nforward = \"reinterpret(V,P)\"\ninput = \"o\"\nbackward = \"reinterpret(R,V)\"\noutput = \"P\"\n\n[[rule.step]]\nname = \"y\"\nforward = \"all_reduce(I)\"\ninput = \"op\"\nbackward = \"reinterpret(I,R)\"\noutput = \"I\"\n"
        )
    };
    let m = Mesh::line(2);
    let agrees = |with_f: bool| {
        let rule = spmd_check::rules::load_str("m.toml", &mlp(with_f))
            .unwrap()
            .remove(0);
        let op = rule.op;
        let Op::Program(p) = &op.op else {
            panic!("a program")
        };
        let shape = vec![2, 2];
        let xs: Vec<PerRank> = op
            .inputs
            .iter()
            .enumerate()
            .map(|(a, t)| {
                let v: Vec<Q> = (0..num_free(&m, t, &shape))
                    .map(|i| Q::int(((i + 3 * a) as i64 * 7) % 5 - 2))
                    .collect();
                from_free(&m, t, &shape, &v)
            })
            .collect();
        let g = from_free(&m, &op.output, &shape, &[1, -1, 2, 1].map(Q::int));
        let exact = exact_gradients(&op, &m, &xs, &g.tensors).unwrap();
        let bw: Vec<Vec<Tensor>> = p
            .backward(&m, &xs, &g)
            .unwrap()
            .into_iter()
            .map(|x| x.tensors)
            .collect();
        exact == bw
    };
    assert!(agrees(true));
    assert!(!agrees(false));
}
