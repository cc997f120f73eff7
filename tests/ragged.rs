//! Ragged all-to-all (SPEC.md §23): the exact forward against JAX's
//! documented example, and JAX 0.12.0.1's transpose rule against the
//! derivative of the forward over every small layout. JAX's rule must fail
//! exactly on the layouts where two received segments start on one row
//! and a row at or after it is written (an empty segment sharing its
//! offset: peers/repro_jax_ragged.py shows it in JAX); a rule that zeroes
//! exactly the written rows must pass everywhere, and that rule with one
//! value changed must fail.

mod common;
use spmd_check::dialects::jax::ragged_all_to_all_transpose;
use spmd_check::generators::ragged::{layouts, Inputs};
use spmd_check::interp::ragged::{row_width, Layout};
use spmd_check::oracle::ragged::check_transpose;
use spmd_check::semantics::{Tensor, Q};

fn vector(xs: &[i64]) -> Tensor {
    Tensor::new(vec![xs.len()], xs.iter().map(|&x| Q::int(x)).collect())
}

fn ints(t: &Tensor) -> Vec<i64> {
    t.data
        .iter()
        .map(|q| q.to_string().parse().expect("an integer"))
        .collect()
}

/// The exact transpose written from the layout: each sent row gets the
/// sum of the cotangents of the rows it was written to; the written rows
/// of `output` get nothing.
fn exact_rule(l: &Layout, cot: &[Tensor], operand_rows: usize) -> (Vec<Tensor>, Vec<Tensor>) {
    let mut op_t: Vec<Tensor> = cot
        .iter()
        .map(|t| {
            let mut s = t.shape.clone();
            s[0] = operand_rows;
            Tensor::zeros(&s)
        })
        .collect();
    let mut out_t = cot.to_vec();
    for g in l.segments() {
        let w = row_width(&cot[g.dst]);
        for k in 0..g.rows * w {
            let (from, to) = (g.from * w + k, g.to * w + k);
            op_t[g.src].data[from] = op_t[g.src].data[from].add(&cot[g.dst].data[to]);
            out_t[g.dst].data[to] = Q::zero();
        }
    }
    (op_t, out_t)
}

/// JAX's example in `ragged_all_to_all`'s docstring.
#[test]
fn the_forward_gives_jaxs_documented_example() {
    let l = Layout {
        input_offsets: vec![vec![0, 1], vec![0, 1]],
        send_sizes: vec![vec![1, 2], vec![1, 1]],
        output_offsets: vec![vec![0, 0], vec![1, 2]],
        recv_sizes: vec![vec![1, 1], vec![2, 1]],
    };
    l.validate(3, 4).expect("valid");
    let y = l.forward(
        &[vector(&[1, 2, 2]), vector(&[3, 4, 0])],
        &[vector(&[0; 4]), vector(&[0; 4])],
    );
    assert_eq!(ints(&y[0]), [1, 3, 0, 0]);
    assert_eq!(ints(&y[1]), [2, 2, 4, 0]);
    // Untrusted layouts are refused with a reason, never run.
    let mut bad = l.clone();
    bad.recv_sizes[1][0] = 1;
    assert!(bad.validate(3, 4).unwrap_err().contains("expects 1 rows"));
    let mut bad = l.clone();
    bad.output_offsets[1][1] = 4;
    assert!(bad
        .validate(3, 4)
        .unwrap_err()
        .contains("leaves its output"));
    let mut bad = l.clone();
    bad.input_offsets[0][1] = usize::MAX;
    assert!(bad
        .validate(3, 4)
        .unwrap_err()
        .contains("leaves its operand"));
    let mut bad = l;
    bad.output_offsets[1][0] = 0;
    assert!(bad
        .validate(3, 4)
        .unwrap_err()
        .contains("written by two segments"));
}

/// The minimal case of peers/repro_jax_ragged.py: rank 1 receives an empty
/// segment and its own two rows, both at row 0. JAX's rule gives the
/// cotangent [1, 2, 3, 4] for rank 1's `output` (as the traced jaxpr does
/// in JAX); the derivative is [0, 0, 3, 4].
#[test]
fn jaxs_rule_leaks_the_cotangent_of_overwritten_rows() {
    let l = Layout {
        input_offsets: vec![vec![0, 0], vec![0, 0]],
        send_sizes: vec![vec![0, 0], vec![0, 2]],
        output_offsets: vec![vec![0, 0], vec![0, 0]],
        recv_sizes: vec![vec![0, 0], vec![0, 2]],
    };
    l.validate(4, 4).expect("valid");
    let y = l.forward(
        &[vector(&[10, 11, 12, 13]), vector(&[20, 21, 22, 23])],
        &[vector(&[-1, -2, -3, -4]), vector(&[-5, -6, -7, -8])],
    );
    assert_eq!(ints(&y[1]), [20, 21, -7, -8]);
    let cot = [vector(&[1, 2, 3, 4]), vector(&[1, 2, 3, 4])];
    let (op_t, out_t) = ragged_all_to_all_transpose(&l, &cot, 4);
    assert_eq!(ints(&op_t[1]), [1, 2, 0, 0]);
    assert_eq!(ints(&out_t[1]), [1, 2, 3, 4]);
    let (_, exact) = exact_rule(&l, &cot, 4);
    assert_eq!(ints(&exact[1]), [0, 0, 3, 4]);
    let m = check_transpose(&l, &[4], &[4], &|c| ragged_all_to_all_transpose(&l, c, 4))
        .expect_err("JAX's rule fails B3");
    assert_eq!((m.input, m.rank, m.row), ("output", 1, 0), "{m:?}");
    assert_eq!(m.got, Some(Q::one()));
    assert_eq!(m.want, Q::zero());
}

/// Whether two received segments start on one row of a rank that has a
/// written row at or after it: where JAX's running sum undercounts.
fn shares_a_start(l: &Layout, rows: usize) -> bool {
    let segs = l.segments();
    (0..l.ranks()).any(|d| {
        (0..rows).any(|p| {
            let starting = segs.iter().filter(|g| g.dst == d && g.to == p).count();
            starting >= 2
                && segs
                    .iter()
                    .any(|g| g.dst == d && g.rows > 0 && g.to + g.rows > p)
        })
    })
}

/// Every layout of 2 ranks, buffers of 3 rows of 2 elements, segments of
/// up to 2 rows: JAX's rule fails B3 exactly where two segments share a
/// start, the exact rule holds everywhere, and the exact rule with one
/// value changed fails.
#[test]
fn jaxs_rule_fails_exactly_where_segments_share_a_start() {
    let (rows, width) = (3, 2);
    let shape = [rows, width];
    let all = layouts(2, rows, 2, Inputs::Packed);
    assert!(all.len() > 100, "{} layouts", all.len());
    let mut failing = 0;
    for l in &all {
        let jax = check_transpose(l, &shape, &shape, &|c| {
            ragged_all_to_all_transpose(l, c, rows)
        });
        assert_eq!(jax.is_err(), shares_a_start(l, rows), "{l:?}: {jax:?}");
        failing += usize::from(jax.is_err());
        check_transpose(l, &shape, &shape, &|c| exact_rule(l, c, rows))
            .expect("the exact rule holds");
    }
    assert!(failing > 0 && failing < all.len());
    // The smallest layout where JAX's rule fails sends one row.
    let first = all
        .iter()
        .find(|l| shares_a_start(l, rows))
        .expect("a failing layout");
    assert_eq!(first.send_sizes.iter().flatten().sum::<usize>(), 1);
    // The twin: the exact rule off by one value is rejected.
    let l = &all[all.len() / 2];
    let off = |c: &[Tensor]| {
        let (mut a, b) = exact_rule(l, c, rows);
        a[0].data[0] = a[0].data[0].add(&Q::one());
        (a, b)
    };
    assert!(check_transpose(l, &shape, &shape, &off).is_err());
}

/// Whether some operand row is sent by two segments.
fn sends_a_row_twice(l: &Layout) -> bool {
    let segs = l.segments();
    segs.iter().enumerate().any(|(i, a)| {
        segs[i + 1..]
            .iter()
            .any(|b| a.src == b.src && a.from < b.from + b.rows && b.from < a.from + a.rows)
    })
}

/// With the senders' offsets free (a row may be sent twice, which the
/// documentation does not forbid): JAX's rule fails B3 exactly where
/// segments share a start or an operand row is sent twice, whose
/// cotangent must be the sum of both destinations' and JAX's reverse call
/// writes one of them.
#[test]
fn jaxs_rule_also_fails_where_a_row_is_sent_twice() {
    let (rows, width) = (2, 1);
    let shape = [rows, width];
    let all = layouts(2, rows, 1, Inputs::Any);
    let mut twice = 0;
    for l in &all {
        let jax = check_transpose(l, &shape, &shape, &|c| {
            ragged_all_to_all_transpose(l, c, rows)
        });
        let expect = shares_a_start(l, rows) || sends_a_row_twice(l);
        assert_eq!(jax.is_err(), expect, "{l:?}: {jax:?}");
        twice += usize::from(sends_a_row_twice(l) && !shares_a_start(l, rows));
        check_transpose(l, &shape, &shape, &|c| exact_rule(l, c, rows))
            .expect("the exact rule holds");
    }
    assert!(twice > 0);
}

/// One recorded layout: JAX's own traced transpose on each basis
/// cotangent (peers/record_ragged_jax.py).
#[derive(serde::Deserialize)]
struct Recorded {
    input_offsets: Vec<Vec<usize>>,
    send_sizes: Vec<Vec<usize>>,
    output_offsets: Vec<Vec<usize>>,
    recv_sizes: Vec<Vec<usize>>,
    operand_t: Vec<Vec<Vec<i64>>>,
    output_t: Vec<Vec<Vec<i64>>>,
}

fn layout_of(r: &Recorded) -> Layout {
    Layout {
        input_offsets: r.input_offsets.clone(),
        send_sizes: r.send_sizes.clone(),
        output_offsets: r.output_offsets.clone(),
        recv_sizes: r.recv_sizes.clone(),
    }
}

#[derive(serde::Deserialize)]
struct RecordedSet {
    rows: usize,
    max_rows: usize,
    packed: bool,
    layouts: Vec<Recorded>,
}

#[derive(serde::Deserialize)]
struct RecordedFile {
    jax: String,
    sets: Vec<RecordedSet>,
}

/// JAX 0.12.0.1's own transpose (its traced jaxpr evaluated on CPU, the
/// collectives from their meaning), recorded on every layout the
/// generator makes: it fails B3 exactly where segments share a start or a
/// row is sent twice, and it equals the transcription in
/// `dialects::jax` on every basis cotangent. A recorded value changed is
/// caught.
#[test]
fn jaxs_recorded_transpose_fails_where_the_model_says() {
    let text = spmd_check::registry::read_maybe_gz(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/uneven/ragged_jax_0.12.0.1.json.gz"
    ))
    .expect("the recording reads");
    let file: RecordedFile = serde_json::from_str(&text).expect("the recording parses");
    assert_eq!(file.jax, "0.12.0.1");
    assert_eq!(file.sets.len(), 2);
    for set in &file.sets {
        let rows = set.rows;
        let inputs = if set.packed {
            Inputs::Packed
        } else {
            Inputs::Any
        };
        let mut want = layouts(2, rows, set.max_rows, inputs);
        let mut got: Vec<Layout> = set.layouts.iter().map(layout_of).collect();
        let key = |l: &Layout| format!("{l:?}");
        want.sort_by_key(key);
        got.sort_by_key(key);
        assert_eq!(got, want, "the recording holds every generated layout");
        let shape = [rows];
        for r in &set.layouts {
            let l = layout_of(r);
            // Basis cotangent b is 1 at rank b / rows, row b % rows.
            let recorded = |c: &[Tensor]| {
                let b = (0..2 * rows)
                    .find(|&b| c[b / rows].data[b % rows] == Q::one())
                    .expect("a basis cotangent");
                let t = |v: &Vec<Vec<i64>>| v.iter().map(|x| vector(x)).collect::<Vec<_>>();
                (t(&r.operand_t[b]), t(&r.output_t[b]))
            };
            let jax = check_transpose(&l, &shape, &shape, &recorded);
            assert_eq!(
                jax.is_err(),
                shares_a_start(&l, rows) || sends_a_row_twice(&l),
                "{l:?}: {jax:?}"
            );
            for b in 0..2 * rows {
                let mut c = vec![vector(&vec![0; rows]), vector(&vec![0; rows])];
                c[b / rows].data[b % rows] = Q::one();
                let (op, out) = ragged_all_to_all_transpose(&l, &c, rows);
                // Where a row is sent twice JAX leaves the order of the
                // writes unspecified; elsewhere the two agree exactly.
                if !sends_a_row_twice(&l) {
                    assert_eq!(
                        op.iter().map(ints).collect::<Vec<_>>(),
                        r.operand_t[b],
                        "{l:?}"
                    );
                }
                assert_eq!(
                    out.iter().map(ints).collect::<Vec<_>>(),
                    r.output_t[b],
                    "{l:?}"
                );
            }
        }
    }
    // The twin: one value of a layout where JAX's transpose holds, changed.
    let set = &file.sets[0];
    let r = set
        .layouts
        .iter()
        .find(|r| {
            r.send_sizes.iter().flatten().sum::<usize>() > 0
                && !shares_a_start(&layout_of(r), set.rows)
        })
        .expect("a layout that sends, where JAX's transpose holds");
    let l = layout_of(r);
    let rows = set.rows;
    let changed = |c: &[Tensor]| {
        let b = (0..2 * rows)
            .find(|&b| c[b / rows].data[b % rows] == Q::one())
            .expect("a basis cotangent");
        let mut out: Vec<Tensor> = r.output_t[b].iter().map(|x| vector(x)).collect();
        out[0].data[0] = out[0].data[0].add(&Q::one());
        (r.operand_t[b].iter().map(|x| vector(x)).collect(), out)
    };
    assert!(check_transpose(&l, &[rows], &[rows], &changed).is_err());
}

/// J1 for `ragged_all_to_all` (SPEC.md §23.3): JAX 0.12.0.1's JVP rule
/// (parallel.py, `_ragged_all_to_all_jvp`: the op itself on the operand's
/// and the output's tangents, with the same sizes and offsets) equals the
/// derivative of the forward along every unit tangent, on every packed
/// layout of 2 ranks; the twin, a JVP that leaves out the output buffer's
/// tangent (the rows nothing is written to keep their tangent), fails on
/// a layout with an unwritten output row.
#[test]
fn jaxs_jvp_rule_is_the_derivative_and_a_jvp_without_the_outputs_tangent_is_not() {
    use spmd_check::oracle::ragged::check_jvp;
    let (rows, n) = (3, 2);
    let ls = layouts(n, rows, 2, Inputs::Packed);
    assert!(!ls.is_empty());
    let buffers = |base: i64| -> Vec<Tensor> {
        (0..n)
            .map(|r| {
                vector(
                    &(0..rows as i64)
                        .map(|i| base + 10 * r as i64 + i)
                        .collect::<Vec<_>>(),
                )
            })
            .collect()
    };
    let (operand, output) = (buffers(1), buffers(100));
    let jax = |l: &Layout| {
        let l = l.clone();
        move |_: &[Tensor], _: &[Tensor], dop: &[Tensor], dout: &[Tensor]| l.forward(dop, dout)
    };
    let no_output_tangent = |l: &Layout| {
        let l = l.clone();
        move |_: &[Tensor], _: &[Tensor], dop: &[Tensor], dout: &[Tensor]| {
            let z: Vec<Tensor> = dout.iter().map(|t| Tensor::zeros(&t.shape)).collect();
            l.forward(dop, &z)
        }
    };
    let mut twin_failed = 0;
    for l in &ls {
        check_jvp(l, &operand, &output, &jax(l)).unwrap_or_else(|m| panic!("{l:?}: {m:?}"));
        if let Err(m) = check_jvp(l, &operand, &output, &no_output_tangent(l)) {
            assert_eq!(m.input, "output");
            twin_failed += 1;
        }
    }
    // Every layout leaves some output row unwritten or not: the twin fails
    // on exactly those that leave one.
    let unwritten = ls
        .iter()
        .filter(|l| {
            let mut written = vec![vec![false; rows]; n];
            for g in l.segments() {
                for k in 0..g.rows {
                    written[g.dst][g.to + k] = true;
                }
            }
            written.iter().flatten().any(|w| !w)
        })
        .count();
    assert!(twin_failed > 0);
    assert_eq!(twin_failed, unwritten);
}

/// `run` of a `ragged_all_to_all` job (SPEC.md §23.19): the case,
/// an empty segment sharing its offset with rank 1's own rows, is B3
/// violated by JAX's transpose with the exact cotangent [0, 0, 3, 4] beside
/// JAX's [1, 2, 3, 4] (exit 1); an MoE dispatch without empty segments is
/// sound (exit 0) with its traffic.
#[test]
fn run_reads_a_ragged_job_and_checks_jaxs_transpose() {
    use common::run;
    let ex = |f: &str| format!("{}/examples/{f}", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = run(&["run", &ex("run_ragged.json"), "--check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("  d output  : per rank [1, 2, 3, 4] | [1, 2, 3, 4]\nexact"),
        "{out}"
    );
    assert!(
        out.contains("  d output  : per rank [1, 2, 3, 4] | [0, 0, 3, 4]\n"),
        "{out}"
    );
    assert!(out.contains("check B3: violated"), "{out}");
    assert!(out.contains("check J1: JAX's JVP equals"), "{out}");
    // Without --check, the run shows and does not judge.
    let (code, _, _) = run(&["run", &ex("run_ragged.json")]);
    assert_eq!(code, 0);
    let (code, out, err) = run(&["run", &ex("run_ragged_moe.json"), "--check", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["check"]["B3"]["result"], "pass");
    assert_eq!(v["check"]["J1"]["result"], "pass");
    assert_eq!(v["backward"]["output"], v["exact"]["output"]);
    assert_eq!(v["traffic"]["forward"], 5);
}

/// A hostile ragged job is one line naming where and what, exit 2.
#[test]
fn a_hostile_ragged_job_is_one_line_exit_2() {
    use common::{error_lines, fresh_dir, run};
    let d = fresh_dir("ragged", "hostile");
    let base: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/examples/run_ragged_moe.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "overlap",
            Box::new(|v| v["layout"]["output_offsets"][1][0] = 0.into()),
            "written by two segments",
        ),
        (
            "leaves",
            Box::new(|v| v["layout"]["output_offsets"][1][1] = 4.into()),
            "leaves its output",
        ),
        (
            "huge",
            Box::new(|v| v["layout"]["input_offsets"][1][1] = serde_json::json!(u64::MAX)),
            "leaves its operand",
        ),
        (
            "sizes",
            Box::new(|v| v["layout"]["recv_sizes"][0][0] = 2.into()),
            "rank 0 expects 2 rows",
        ),
        (
            "ranks",
            Box::new(|v| v["layout"]["send_sizes"] = serde_json::json!([[1, 2]])),
            "send_sizes has 1 ranks",
        ),
        (
            "negative",
            Box::new(|v| v["layout"]["send_sizes"][0][0] = (-1).into()),
            "invalid value",
        ),
        (
            "type",
            Box::new(|v| v["inputs"][0]["type"] = "Invariant".into()),
            "the type is Varying",
        ),
        (
            "dialect",
            Box::new(|v| v["dialect"] = "dtensor".into()),
            "JAX's collective",
        ),
        (
            "no layout",
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("layout");
            }),
            "needs its layout",
        ),
        (
            "layout alone",
            Box::new(|v| v["forward"] = "all_gather".into()),
            "only `forward = \"ragged_all_to_all\"`",
        ),
        (
            "shapes",
            Box::new(|v| v["inputs"][1]["per_rank"][1] = serde_json::json!([0, 0, 0])),
            "JAX gives every rank one shape",
        ),
        (
            "rows",
            Box::new(|v| v["inputs"][1]["per_rank"] = serde_json::json!([[[0], [0]], [[0], [0]]])),
            "differ",
        ),
        (
            "cotangent",
            Box::new(|v| v["cotangent"] = serde_json::json!([[1], [2]])),
            "cotangent: rank 0",
        ),
        (
            "backward",
            Box::new(|v| v["backward"] = "all_to_all".into()),
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
        assert_eq!(error_lines(&err), 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
    }
}
