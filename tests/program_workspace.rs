//! The program workspace of SPEC.md §18.1: a sample recomputes only what a
//! perturbation reaches, and the backward at an instance reuses its
//! forward. Both must give exactly what the full forward and backward give;
//! the oracle's verdicts on programs go through them, so a wrong program
//! backward must still be rejected for the right property.

mod common;

use common::{random_inputs, Lcg};
use spmd_check::check::{check_rule, CheckConfig};
use spmd_check::generators::{shape_table, Scope};
use spmd_check::interp::program::{Program, SpecWork, Step};
use spmd_check::interp::{parse, Backward, Op, TypedOp};
use spmd_check::oracle::check::{check, Outcome};
use spmd_check::oracle::Property;
use spmd_check::rules::{build, parse_file, Rule};
use spmd_check::semantics::perrank::Denot;
use spmd_check::semantics::{Mesh, PerRank, State, Type, Q};

/// A pool of buffers full of junk: nonzero values, shapes and rank counts
/// that fit no value here (1 to 5 ranks of n + 2 sevens).
fn junk_pool() -> Vec<PerRank> {
    (1..6)
        .map(|n| PerRank {
            tensors: (0..n)
                .map(|_| spmd_check::semantics::Tensor::new(vec![n + 2], vec![Q::int(7); n + 2]))
                .collect(),
        })
        .collect()
}

/// The meshes the comparisons below run on: two lines and a square.
fn meshes() -> [Mesh; 3] {
    [
        Mesh::line(2),
        Mesh::line(4),
        Mesh::new(&[("a", 2), ("b", 2)]),
    ]
}

/// Every program of the layer and FSDP tables, plus one whose values fan
/// out to two steps and that divides by the group size (both rank-wise
/// collectives of `Program::sample`: a reinterpretation and a scaling).
fn programs() -> Vec<TypedOp> {
    let scope = Scope::default();
    let mut out = vec![];
    for (file, text) in [
        ("examples/programs.toml", spmd_check::programs::LAYERS_TOML),
        ("examples/fsdp.toml", spmd_check::fsdp::FSDP_TOML),
    ] {
        let specs = parse_file(file, text).expect("parses");
        for r in build(file, text, &specs, &scope).expect("builds") {
            out.push(r.op);
        }
    }
    let fan = r#"[[rule]]
name = "fan out"
names = ["x", "w"]
inputs = ["V", "V"]
output = "V"
[[rule.step]]
name = "a"
expr = "x * w"
output = "V"
[[rule.step]]
name = "p"
forward = "reinterpret(V,P)"
input = "a"
backward = "reinterpret(R,V)"
output = "P"
[[rule.step]]
name = "s"
forward = "all_reduce(I)"
input = "p"
backward = "reinterpret(I,R)"
output = "I"
[[rule.step]]
name = "v"
forward = "pvary"
input = "s"
backward = "psum_invariant"
output = "V"
[[rule.step]]
name = "d"
forward = "divide_by_group_size"
input = "v"
backward = "divide_by_group_size"
output = "V"
[[rule.step]]
name = "y"
expr = "d * a + x"
output = "V"
"#;
    out.push(Rule::from_toml_str(fan).expect("fan out builds").op);
    out
}

/// `Program::sample` after perturbing input `i` on the ranks `touched`
/// against the full forward there; each step's output, and the backward
/// from the sampled steps against the full backward; then `unsample` must
/// give the instance back. Returns how many samples were compared.
fn compare_samples(op: &TypedOp, p: &Program, m: &Mesh, rng: &mut Lcg, wrong_mask: bool) -> usize {
    let mut compared = 0;
    let table = shape_table(op, &Scope::default(), m);
    for (shapes, ..) in table.iter().take(6) {
        let xs = random_inputs(op, m, shapes, rng, Lcg::int);
        let (steps, _) = p.run_steps(m, &xs).expect("polynomial");
        let mut s = p.sampler(&xs, steps.clone());
        for i in 0..xs.len() {
            for _ in 0..3 {
                let touched: Vec<bool> = (0..m.num_ranks()).map(|_| rng.next(2) == 0).collect();
                let mut work = xs.clone();
                for (r, t) in work[i].tensors.iter_mut().enumerate() {
                    if touched[r] {
                        for v in t.data.iter_mut() {
                            *v = v.add(&rng.int());
                        }
                    }
                }
                let mask: Vec<bool> = if wrong_mask {
                    vec![false; m.num_ranks()]
                } else {
                    touched.clone()
                };
                p.sample(m, &mut s, &work, i, &mask).expect("polynomial");
                let (full, _) = p.run_steps(m, &work).expect("polynomial");
                if wrong_mask {
                    // The negative twin: a mask that hides the change must
                    // leave a stale output somewhere, and this comparison
                    // must see it.
                    if s.steps() != full.as_slice() {
                        compared += 1;
                    }
                } else {
                    assert_eq!(s.steps(), full.as_slice(), "{} on {m}", p.describe());
                    assert_eq!(s.output(), full.last().unwrap());
                    // The backward from the sampled steps, against the
                    // one that runs its own forward (an error, such as a
                    // step with no backward, must be the same error).
                    let g = full.last().unwrap().clone();
                    let want = p.backward(m, &work, &g);
                    let got = p.backward_from(m, &work, s.steps(), &g);
                    assert_eq!(got, want, "{} on {m}", p.describe());
                    compared += 1;
                }
                p.unsample(&mut s);
                assert_eq!(s.steps(), steps.as_slice(), "unsample restores");
            }
        }
    }
    compared
}

#[test]
fn a_program_sample_is_the_full_forward() {
    let mut rng = Lcg(7);
    let meshes = meshes();
    let mut total = 0;
    let mut stale = 0;
    for op in programs() {
        let Op::Program(p) = &op.op else {
            panic!("a program")
        };
        for m in meshes
            .iter()
            .filter(|m| m.axes.len() == op.output.states.len())
        {
            total += compare_samples(&op, p, m, &mut rng, false);
            stale += compare_samples(&op, p, m, &mut rng, true);
        }
    }
    assert!(total > 100, "only {total} samples compared");
    // Twin: hiding the perturbed ranks from the sampler is caught.
    assert!(stale > 0, "a stale workspace went unnoticed");
}

/// A one-step program whose hand-written step backward is wrong: d(x·x) is
/// 2·g·x, not g·x. The oracle rejects it for B3 through the program path;
/// the twin with the right backward is sound.
fn square_program(backward: &str) -> TypedOp {
    let v = Type::one(State::Varying);
    let step = Step {
        name: "y = x * x".into(),
        op: TypedOp {
            backward: Backward::Local(vec![spmd_check::interp::parse_with_vars(
                backward,
                &["x".into(), "g".into()],
            )
            .unwrap()]),
            ..TypedOp::local(parse("x * x").unwrap(), vec![v.clone()], v.clone())
        },
        args: vec![0],
    };
    let p = Program::new(vec![v.clone()], vec![step]).unwrap();
    TypedOp {
        op: Op::Program(Box::new(p)),
        inputs: vec![v.clone()],
        output: v,
        backward: Backward::Steps,
        jvp: None,
        no_grad: vec![],
    }
}

#[test]
fn a_wrong_step_backward_fails_b3_through_the_workspace() {
    let m = Mesh::line(2);
    let x = PerRank {
        tensors: vec![
            spmd_check::semantics::Tensor::scalar(Q::int(1)),
            spmd_check::semantics::Tensor::scalar(Q::int(3)),
        ],
    };
    let wrong = square_program("g * x");
    match check(&wrong, &m, std::slice::from_ref(&x)) {
        Outcome::Fail(v) => assert_eq!(v.property, Property::B3, "{}", v.one_line()),
        o => panic!("g * x passed: {o:?}"),
    }
    let right = square_program("2 * g * x");
    match check(&right, &m, std::slice::from_ref(&x)) {
        Outcome::Pass(p) => assert!(!p.b3_undetermined),
        o => panic!("2 * g * x failed: {o:?}"),
    }
}

/// Depth one through a rule file: an all-reduce to Invariant whose
/// declared backward sums the cotangent again (every gradient n times too
/// large) is unsound for B3; with the reinterpretation as its backward it
/// is sound, as a proof.
#[test]
fn a_one_step_program_with_a_wrong_transpose_fails_b3() {
    let text = |bwd: &str| {
        format!(
            "[[rule]]\nname = \"reduce\"\nnames = [\"x\"]\ninputs = [\"P\"]\noutput = \"I\"\n\
             [[rule.step]]\nname = \"y\"\nforward = \"all_reduce(I)\"\ninput = \"x\"\nbackward = \"{bwd}\"\noutput = \"I\"\n"
        )
    };
    let cfg = CheckConfig {
        scope: Scope::default(),
        cases: 0,
        seed: 0,
    };
    let verdict = |t: &str| {
        let rule = Rule::from_toml_str(t).expect("builds");
        check_rule(&rule, &cfg, &[], &|_| {}).verdict
    };
    let wrong = verdict(&text("pvary |> reinterpret(V,P) |> all_reduce(R)"));
    assert_eq!(
        wrong.violation().map(|v| v.property),
        Some(Property::B3),
        "{}",
        wrong.name()
    );
    let right = verdict(&text("reinterpret(I,R)"));
    assert!(
        right.proof(),
        "{}: {:?}",
        right.name(),
        right.violation().map(|v| v.one_line())
    );
    assert!(right.tally().distributed_cases > 0);
}

/// The planned einsum of the workspace is `einsum`'s value, also into a
/// buffer that held another tensor; a plan for other shapes is not (twin).
#[test]
fn a_planned_einsum_is_the_einsum() {
    use spmd_check::interp::eval::{einsum_plan_for, einsum_planned_into, eval, Ctx};
    use spmd_check::semantics::Tensor;
    let mut rng = Lcg(3);
    let mut t = |shape: &[usize]| {
        let n = shape.iter().product();
        Tensor::new(shape.to_vec(), (0..n).map(|_| rng.int()).collect())
    };
    let cases: Vec<(&str, Vec<Tensor>)> = vec![
        ("matmul(a, b)", vec![t(&[2, 3]), t(&[3, 2])]),
        ("matmul(a, b)^2", vec![t(&[1, 3]), t(&[3, 3])]),
        ("einsum(\"ij,ij->i\", a, b)", vec![t(&[3, 2]), t(&[3, 2])]),
        (
            "einsum(\"i,j,k->ijk\", a, b, c)",
            vec![t(&[2]), t(&[3]), t(&[2])],
        ),
    ];
    for (text, xs) in &cases {
        let f = parse(text).unwrap();
        let (spec, args, pow) = match &f.expr {
            spmd_check::interp::Expr::Einsum(s, a) => (s, a, None),
            spmd_check::interp::Expr::Pow(inner, k) => match &**inner {
                spmd_check::interp::Expr::Einsum(s, a) => (s, a, Some(*k)),
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        assert_eq!(args.len(), xs.len());
        let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape.as_slice()).collect();
        let plan = einsum_plan_for(spec, &shapes).unwrap();
        let refs: Vec<&Tensor> = xs.iter().collect();
        let mut out = Tensor::new(vec![7], vec![Q::int(5); 7]);
        einsum_planned_into(&plan, &refs, &mut out);
        if let Some(k) = pow {
            for v in out.data.iter_mut() {
                *v = (0..k).fold(Q::one(), |acc, _| acc.mul(v));
            }
        }
        let want = eval(&f.expr, &refs, &mut Ctx::default()).unwrap();
        assert_eq!(out, want, "{text}");
    }
    // Twin: a plan for another contraction over operands of the same
    // shapes (b read transposed) gives another tensor, and this
    // comparison sees it.
    let a = t(&[2, 2]);
    let b = Tensor::new(vec![2, 2], vec![Q::int(1), Q::int(2), Q::int(3), Q::int(4)]);
    let other = spmd_check::interp::expr::Einsum::parse("ij,kj->ik").unwrap();
    let wrong = einsum_plan_for(&other, &[&[2, 2][..], &[2, 2][..]]).unwrap();
    let mut out = Tensor::scalar(Q::zero());
    einsum_planned_into(&wrong, &[&a, &b], &mut out);
    let id = Tensor::new(vec![2, 2], vec![Q::int(1), Q::int(0), Q::int(0), Q::int(1)]);
    let want = eval(
        &parse("matmul(a, b)").unwrap().expr,
        &[&id, &b],
        &mut Ctx::default(),
    )
    .unwrap();
    let mut got = Tensor::scalar(Q::zero());
    einsum_planned_into(&wrong, &[&id, &b], &mut got);
    assert_ne!(got, want, "b transposed must differ from b");
    assert_eq!(out.shape, vec![2, 2]);
}

/// What `each_instance` calls per instance.
type Visit<'a> = dyn FnMut(&TypedOp, &Program, &Mesh, Vec<PerRank>) + 'a;

/// `f(op, program, mesh, inputs)` at random inputs of the first four shape
/// tuples of every program above, on each of `meshes` with as many axes as
/// its types.
fn each_instance(meshes: &[Mesh], rng: &mut Lcg, f: &mut Visit) {
    for op in programs() {
        let Op::Program(p) = &op.op else {
            panic!("a program")
        };
        for m in meshes
            .iter()
            .filter(|m| m.axes.len() == op.output.states.len())
        {
            for (shapes, ..) in shape_table(&op, &Scope::default(), m).iter().take(4) {
                let xs = random_inputs(&op, m, shapes, rng, Lcg::int);
                f(&op, p, m, xs);
            }
        }
    }
}

/// `Program::backward_from_pooled` against `backward_from` on every program
/// above, with one pool shared by all of them that starts full of junk
/// (nonzero values, wrong shapes and rank counts) and gets every result
/// back after its comparison. `tamper` changes each pooled result before
/// the comparison (the twin below). Returns how many results were
/// compared and how many differed.
fn compare_pooled(tamper: &dyn Fn(&mut Vec<PerRank>)) -> (usize, usize) {
    let mut rng = Lcg(3);
    let mut spare = junk_pool();
    let (mut compared, mut differed) = (0, 0);
    let meshes = meshes();
    each_instance(&meshes, &mut rng, &mut |_, p, m, xs| {
        let (steps, _) = p.run_steps(m, &xs).expect("polynomial");
        let g = steps.last().unwrap().clone();
        let want = p.backward_from(m, &xs, &steps, &g);
        let got = p.backward_from_pooled(m, &xs, &steps, &g, &mut spare);
        match (got, want) {
            (Ok(mut got), Ok(want)) => {
                tamper(&mut got);
                compared += 1;
                differed += usize::from(got != want);
                for b in got {
                    spmd_check::interp::program::give_back(&mut spare, b);
                }
            }
            (got, want) => assert_eq!(got, want, "the same error"),
        }
    });
    (compared, differed)
}

#[test]
fn a_pooled_program_backward_is_the_backward() {
    let (compared, differed) = compare_pooled(&|_| {});
    assert!(compared > 40, "only {compared} compared");
    assert_eq!(differed, 0);
}

#[test]
fn a_pooled_backward_left_with_junk_is_caught() {
    // The twin: each result keeps a 7 where a pool buffer's junk would
    // show had it not been zeroed.
    let (compared, differed) = compare_pooled(&|got| {
        if let Some(t) = got.first_mut().and_then(|p| p.tensors.first_mut()) {
            if let Some(v) = t.data.first_mut() {
                *v = v.add(&Q::int(7));
            }
        }
    });
    assert_eq!(differed, compared);
}

/// `Program::spec` (einsum steps planned once per call), and
/// `Program::spec_into` in a workspace kept from another instance
/// (collective steps written in place), against the meaning composed step
/// by step from each step's own `Op::spec`, on every program above at
/// random denotations. `tamper` changes the program's result
/// before the comparison (the twin). Returns (compared, differed).
fn compare_specs(tamper: &dyn Fn(&mut Denot)) -> (usize, usize) {
    use spmd_check::semantics::perrank::denote;
    let mut rng = Lcg(5);
    let (mut compared, mut differed) = (0, 0);
    let meshes = [Mesh::line(2), Mesh::new(&[("a", 2), ("b", 2)])];
    each_instance(&meshes, &mut rng, &mut |op, p, m, xs| {
        let ds: Vec<Denot> = op
            .inputs
            .iter()
            .zip(&xs)
            .map(|(t, x)| denote(m, t, x))
            .collect();
        let k = ds.len();
        let mut vals: Vec<Denot> = Vec::new();
        let mut reference = Ok(());
        for st in &p.steps {
            let args: Vec<Denot> = st
                .args
                .iter()
                .map(|&a| {
                    if a < k {
                        ds[a].clone()
                    } else {
                        vals[a - k].clone()
                    }
                })
                .collect();
            match st.op.op.spec(m, &args) {
                Ok(d) => vals.push(d),
                Err(e) => {
                    reference = Err(e);
                    break;
                }
            }
        }
        // And `spec_into` in a workspace kept from another instance of the
        // case: its buffers hold that instance's meanings.
        let other: Vec<Denot> = ds
            .iter()
            .map(|d| Denot {
                family: d
                    .family
                    .iter()
                    .map(|t| t.map(|q| q.mul(&Q::int(2)).add(&Q::one())))
                    .collect(),
            })
            .collect();
        let mut w = SpecWork::default();
        let _ = p.spec_into(m, &other, &mut w);
        let kept = p.spec_into(m, &ds, &mut w).cloned();
        match (p.spec(m, &ds), reference) {
            (Ok(mut got), Ok(())) => {
                let mut kept = kept.expect("the workspace's meaning");
                tamper(&mut got);
                tamper(&mut kept);
                compared += 1;
                let want = vals.last().unwrap();
                differed += usize::from(&got != want || &kept != want);
            }
            (got, want) => assert_eq!(got.err(), want.err(), "the same error"),
        }
    });
    (compared, differed)
}

#[test]
fn a_program_meaning_with_planned_einsums_is_the_stepwise_meaning() {
    let (compared, differed) = compare_specs(&|_| {});
    assert!(compared > 20, "only {compared} compared");
    assert_eq!(differed, 0);
}

#[test]
fn a_changed_program_meaning_is_caught() {
    let (compared, differed) = compare_specs(&|d| {
        if let Some(v) = d.family.first_mut().and_then(|t| t.data.first_mut()) {
            *v = v.add(&Q::one());
        }
    });
    assert_eq!(differed, compared);
}

/// `Program::sampler_at` reusing the sampler of an earlier instance (left
/// mid-sample, with a perturbed workspace, and of other shapes where the
/// table has them) against a fresh `sampler` at the new instance: the same
/// steps, and the same sample afterwards. The twin: the old sampler as it
/// was left, without `sampler_at`, differs from the fresh one, so the
/// comparison would see a reuse that kept stale work.
#[test]
fn a_reused_sampler_is_a_fresh_sampler() {
    let mut rng = Lcg(9);
    let (mut compared, mut stale) = (0, 0);
    for op in programs() {
        let Op::Program(p) = &op.op else {
            panic!("a program")
        };
        for m in [Mesh::line(2), Mesh::new(&[("a", 2), ("b", 2)])]
            .iter()
            .filter(|m| m.axes.len() == op.output.states.len())
        {
            let table = shape_table(&op, &Scope::default(), m);
            let mut inst =
                |i: usize| random_inputs(&op, m, &table[i % table.len()].0, &mut rng, Lcg::int);
            for (a, b) in [(0, 0), (0, 1), (1, 0), (2, 2)] {
                let (xa, xb) = (inst(a), inst(b));
                let (mut old, _) = p.sampler_at(m, &xa, None).expect("polynomial");
                // Leave it mid-sample: input 0 perturbed on every rank.
                let mut work = xa.clone();
                for t in work[0].tensors.iter_mut() {
                    for v in t.data.iter_mut() {
                        *v = v.add(&Q::one());
                    }
                }
                let all = vec![true; m.num_ranks()];
                p.sample(m, &mut old, &work, 0, &all).expect("polynomial");
                let (vals, _) = p.run_steps(m, &xb).expect("polynomial");
                let mut fresh = p.sampler(&xb, vals);
                if old.steps() != fresh.steps() {
                    stale += 1;
                }
                let (mut reused, _) = p.sampler_at(m, &xb, Some(old)).expect("polynomial");
                assert_eq!(reused.base(), fresh.base(), "{} on {m}", p.describe());
                assert_eq!(reused.steps(), fresh.steps(), "{} on {m}", p.describe());
                // And the next sample agrees.
                let mut work = xb.clone();
                for t in work[1 % xb.len()].tensors.iter_mut() {
                    for v in t.data.iter_mut() {
                        *v = v.add(&Q::int(2));
                    }
                }
                let i = 1 % xb.len();
                let ra = p.sample(m, &mut reused, &work, i, &all);
                let rb = p.sample(m, &mut fresh, &work, i, &all);
                assert_eq!(ra, rb);
                assert_eq!(reused.steps(), fresh.steps(), "{} on {m}", p.describe());
                compared += 1;
            }
        }
    }
    assert!(compared > 20, "only {compared} compared");
    assert!(
        stale > compared / 2,
        "the twin: stale work seen only {stale} times"
    );
}

/// The program backward written plainly: every step's own
/// `TypedOp::backward` on fresh tensors, in reverse, a value used twice
/// getting the sum (`PerRank::add`) of its cotangents. With `overwrite`
/// (the twin) a later cotangent replaces the earlier one instead.
fn plain_backward(
    p: &Program,
    m: &Mesh,
    xs: &[PerRank],
    g: &PerRank,
    overwrite: bool,
) -> Vec<PerRank> {
    let (steps, _) = p.run_steps(m, xs).expect("polynomial");
    let k = xs.len();
    let val = |a: usize| if a < k { &xs[a] } else { &steps[a - k] };
    let mut cot: Vec<Option<PerRank>> = vec![None; k + steps.len()];
    cot[k + steps.len() - 1] = Some(g.clone());
    for (j, s) in p.steps.iter().enumerate().rev() {
        let Some(c) = cot[k + j].clone() else {
            continue;
        };
        let args: Vec<PerRank> = s.args.iter().map(|&a| val(a).clone()).collect();
        let gs = s.op.backward(m, &args, &c).expect("in the domain");
        for (&a, ga) in s.args.iter().zip(gs) {
            cot[a] = Some(match (&cot[a], overwrite) {
                (Some(prev), false) => prev.add(&ga),
                _ => ga,
            });
        }
    }
    (0..k)
        .map(|i| {
            cot[i].take().unwrap_or_else(|| PerRank {
                tensors: xs[i]
                    .tensors
                    .iter()
                    .map(|t| spmd_check::semantics::Tensor::zeros(&t.shape))
                    .collect(),
            })
        })
        .collect()
}

/// `backward_from_pooled` (its local VJPs added in place, its collectives'
/// transposes run into pooled buffers) against `plain_backward`, with the
/// pool starting full of junk. Returns (compared, differed).
fn compare_plain(overwrite: bool) -> (usize, usize) {
    let mut rng = Lcg(9);
    let mut spare = junk_pool();
    let meshes = meshes();
    let (mut compared, mut differed) = (0, 0);
    each_instance(&meshes, &mut rng, &mut |_, p, m, xs| {
        let (steps, _) = p.run_steps(m, &xs).expect("polynomial");
        let g = steps.last().unwrap().clone();
        let want = plain_backward(p, m, &xs, &g, overwrite);
        let got = p
            .backward_from_pooled(m, &xs, &steps, &g, &mut spare)
            .expect("in the domain");
        compared += 1;
        differed += usize::from(got != want);
        for b in got {
            spmd_check::interp::program::give_back(&mut spare, b);
        }
    });
    (compared, differed)
}

#[test]
fn a_program_backward_is_its_steps_backwards_composed() {
    let (compared, differed) = compare_plain(false);
    assert!(compared > 50, "{compared}");
    assert_eq!(differed, 0);
}

#[test]
fn a_composition_that_drops_a_fanned_out_cotangent_is_caught() {
    // The fan-out program uses a value twice; keeping only the last
    // cotangent of it differs from the sum.
    let (compared, differed) = compare_plain(true);
    assert!(
        differed > 0 && differed < compared,
        "{differed} of {compared}"
    );
}

/// Samples in a row without `unsample`, each moving a random input on
/// random ranks of the instance: each must be the full forward at its own
/// inputs, the ranks the previous sample overwrote being put back. With
/// `stale` (the twin) each is compared instead with the forward at its
/// inputs plus the previous sample's moves, what a workspace that kept the
/// previous sample's values would hold, and must differ somewhere. Returns
/// (compared, differed).
fn compare_chained(stale: bool) -> (usize, usize) {
    let (mut inputs, mut rng) = (Lcg(13), Lcg(17));
    let meshes = meshes();
    let (mut compared, mut differed) = (0, 0);
    each_instance(&meshes, &mut inputs, &mut |_, p, m, xs| {
        let (steps, _) = p.run_steps(m, &xs).expect("polynomial");
        let mut s = p.sampler(&xs, steps);
        let mut prev: Option<Vec<PerRank>> = None;
        for _ in 0..6 {
            let i = rng.next(xs.len() as u64) as usize;
            let touched: Vec<bool> = (0..m.num_ranks()).map(|_| rng.next(2) == 0).collect();
            let mut work = xs.clone();
            for (r, t) in work[i].tensors.iter_mut().enumerate() {
                if touched[r] {
                    for v in t.data.iter_mut() {
                        *v = v.add(&rng.int());
                    }
                }
            }
            p.sample(m, &mut s, &work, i, &touched).expect("polynomial");
            let at = match (&prev, stale) {
                // Both moves at once (where they hit the same input, the
                // later one's values).
                (Some(pw), true) => pw
                    .iter()
                    .zip(&work)
                    .zip(&xs)
                    .map(|((a, b), x)| if b != x { b.clone() } else { a.clone() })
                    .collect(),
                _ => work.clone(),
            };
            let (full, _) = p.run_steps(m, &at).expect("polynomial");
            compared += 1;
            differed += usize::from(s.steps() != full.as_slice());
            prev = Some(work);
        }
    });
    (compared, differed)
}

#[test]
fn samples_in_a_row_are_each_the_full_forward() {
    let (compared, differed) = compare_chained(false);
    assert!(compared > 100, "{compared}");
    assert_eq!(differed, 0);
}

#[test]
fn samples_in_a_row_that_kept_stale_ranks_would_be_caught() {
    let (compared, differed) = compare_chained(true);
    assert!(differed > 0, "{differed} of {compared}");
}
