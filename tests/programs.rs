//! Whole layers as programs (SPEC.md §12): Megatron tensor and sequence
//! parallel MLPs checked end to end, each with a twin that one wrong step
//! makes unsound, and their traffic computed.

use spmd_check::check::{check_rule, CheckConfig};
use spmd_check::generators::Scope;
use spmd_check::oracle::Property;
use spmd_check::programs::{programs, LAYERS};
use spmd_check::rules::Rule;
use spmd_check::semantics::{Mesh, Q};

#[test]
fn programs_get_their_expected_verdicts_and_costs() {
    let ps = programs(&Scope::default()).expect("the layers build");
    assert_eq!(ps.len(), LAYERS.len());
    for p in &ps {
        assert!(
            p.as_expected(),
            "{}: expected {:?}, oracle says {}: {:?}",
            p.name,
            p.expect,
            p.verdict.name(),
            p.verdict.violation().map(|v| v.one_line())
        );
        if p.expect.is_none() {
            // Sound on more than one rank, not just on the trivial mesh.
            assert!(p.verdict.tally().distributed_cases > 0, "{}", p.name);
            assert!(p.verdict.proof(), "{}", p.name);
        }
    }
    let by = |n: &str| ps.iter().find(|p| p.name == n).unwrap();
    let (tp, sp) = (by("tensor parallel MLP"), by("sequence parallel MLP"));
    // Ring model, 4 ranks, 8 x 4 activations: an all-reduce of 32 elements
    // sends 2 * 3/4 * 32 = 48; sequence parallelism's all-gather plus
    // reduce-scatter sends the same.
    assert_eq!(tp.forward_cost, Q::int(48));
    assert_eq!(tp.backward_cost, Q::int(48));
    assert_eq!(sp.forward_cost, tp.forward_cost);
    assert_eq!(sp.backward_cost, tp.backward_cost);
    // Every sound layer has a twin in the table that fails.
    assert!(LAYERS.iter().filter(|l| l.expect.is_some()).count() >= 2);
    assert_eq!(
        by("tensor parallel MLP without f")
            .verdict
            .violation()
            .map(|v| v.property),
        Some(Property::B1)
    );
}

/// A residual stream of five blocks, `v = v + 2 v`, between Megatron's f and
/// g: each block feeds one value to both arguments of a sum, so the old
/// per-step bound Σ dⱼ·Dⱼ doubled per block (32 > 16: refused), while the
/// substituted bound of SPEC.md §12.1 stays 1 (the map is linear in x).
fn residual_chain(g_backward: &str) -> String {
    let mut s = String::from(
        "[[rule]]\nname = \"residual chain\"\nnames = [\"x\"]\ninputs = [\"I\"]\noutput = \"I\"\n\n\
         [[rule.step]]\nname = \"v0\"\nforward = \"pvary\"\ninput = \"x\"\nbackward = \"psum_invariant\"\noutput = \"V\"\n\n",
    );
    for k in 1..=5 {
        s += &format!(
            "[[rule.step]]\nname = \"b{k}\"\nexpr = \"2 * v{}\"\noutput = \"V\"\n\n\
             [[rule.step]]\nname = \"v{k}\"\nexpr = \"v{} + b{k}\"\noutput = \"V\"\n\n",
            k - 1,
            k - 1
        );
    }
    s += &format!(
        "[[rule.step]]\nname = \"p\"\nforward = \"reinterpret(V,P)\"\ninput = \"v5\"\nbackward = \"reinterpret(R,V)\"\noutput = \"P\"\n\n\
         [[rule.step]]\nname = \"y\"\nforward = \"all_reduce(I)\"\ninput = \"p\"\nbackward = \"{g_backward}\"\noutput = \"I\"\n"
    );
    s
}

fn check_text(text: &str) -> spmd_check::oracle::Verdict {
    let rule = Rule::from_toml_str(text).expect("the chain builds");
    let cfg = CheckConfig {
        scope: Scope::default(),
        cases: 0,
        seed: 0,
    };
    check_rule(&rule, &cfg, &[], &|_| {}).verdict
}

#[test]
fn a_deep_linear_chain_is_checked_not_refused() {
    let text = residual_chain("reinterpret(I,R)");
    let rule = Rule::from_toml_str(&text).expect("the chain builds");
    let m = Mesh::line(2);
    let (_, d) = rule.op.op.infer(&m, &[vec![2]]).unwrap();
    assert_eq!(d.num, vec![1], "a linear chain has degree 1");
    let v = check_text(&text);
    assert!(
        v.proof(),
        "{}: {:?}",
        v.name(),
        v.violation().map(|v| v.one_line())
    );
    assert!(v.tally().distributed_cases > 0);
    // Negative twin: g's backward sums the cotangent instead of passing it
    // on, so every gradient is n times too large.
    let twin = check_text(&residual_chain(
        "pvary |> reinterpret(V,P) |> all_reduce(R)",
    ));
    assert_eq!(
        twin.violation().map(|v| v.property),
        Some(Property::B3),
        "{}",
        twin.name()
    );
}

/// SPEC.md §5.2: a degree bound that is too small is caught by the check
/// sample, never trusted. y = ((x·x)·(x·x)) has degree 4; the sum bound and
/// the substituted bound both say 4, and the finite difference agrees with
/// the exact derivative 4x³; a bound of 3 (as if the product's factors took
/// the maximum, as sums do) is refused by the check sample.
#[test]
fn a_too_small_program_bound_is_caught_by_the_check_sample() {
    use spmd_check::interp::program::{Program, Step};
    use spmd_check::interp::{parse, TypedOp};
    use spmd_check::oracle::fd::{poly_derivative, FdFail, PolyWeights};
    use spmd_check::semantics::{PerRank, State, Tensor, Type};
    let v = Type::one(State::Varying);
    let step = |name: &str, e: &str, args: &[usize]| Step {
        name: name.into(),
        op: TypedOp::local(parse(e).unwrap(), vec![v.clone(); args.len()], v.clone()),
        args: args.to_vec(),
    };
    let p = Program::new(
        vec![v.clone()],
        vec![step("s", "a * b", &[0, 0]), step("q", "a * b", &[1, 1])],
    )
    .unwrap();
    let m = Mesh::line(1);
    let (_, d) = p.infer(&m, &[vec![]]).unwrap();
    assert_eq!(d.num, vec![4]);
    let x = Q::int(3);
    let mut f = |h: &Q| -> Result<Option<Vec<Q>>, FdFail> {
        let xs = [PerRank {
            tensors: vec![Tensor::scalar(x.add(h))],
        }];
        Ok(Some(p.forward(&m, &xs).unwrap().y.tensors[0].data.clone()))
    };
    let step_h = Q::int(1);
    let good = poly_derivative(&mut f, &PolyWeights::new(d.num[0], &step_h), &step_h);
    assert_eq!(good, Ok(vec![Q::int(4 * 27)]));
    let wrong = poly_derivative(&mut f, &PolyWeights::new(d.num[0] - 1, &step_h), &step_h);
    assert!(
        matches!(&wrong, Err(FdFail::Undetermined(why)) if why.contains("wrong degree bound")),
        "{wrong:?}"
    );
}
