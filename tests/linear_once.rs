//! A linear op whose backward and JVP do not read the primals has the same
//! F2, J1 and B1-B3 at every point, so each case decides them at its first
//! point and checks F1 and F3 at the rest (SPEC.md §8.3). Every collective
//! row of every system's table (its expected failures included), its
//! backward as an op of its own, and every linear rule of the examples get
//! the same verdict, counterexample and counts as with every property at
//! every point.

mod common;

use spmd_check::collectives::{instantiate, pair_rows};
use spmd_check::generators::{cases, values_free, Scope};
use spmd_check::interp::{Backward, Op, TypedOp};
use spmd_check::oracle::{Checker, Outcome, Phase, Property};
use spmd_check::run::{check_forward, check_op, with_plain_points};
use spmd_check::semantics::{Mesh, Q};

/// The op's verdict as `check` gets it (forward and J1 only without a
/// backward), then with every property at every point, and whether some
/// case decided its value-free properties once.
fn both(op: &TypedOp, scope: &Scope, meshes: &[Mesh]) -> (String, String, bool) {
    let run = || {
        if matches!(op.backward, Backward::LocalVjp) {
            format!("{:?}", check_forward(op, scope, meshes))
        } else {
            format!("{:?}", check_op(op, scope, meshes, &|_| {}))
        }
    };
    let fast = run();
    let plain = with_plain_points(run);
    let once = cases(op, scope, meshes).0.iter().any(|c| c.once);
    (fast, plain, once)
}

#[test]
fn collective_rows_agree_with_every_property_at_every_point() {
    let scope = Scope::default();
    let (mut ops, mut once, mut failing) = (0, 0, 0);
    for r in pair_rows(None) {
        for choice in [(0, 0, 0), (1, 1, 1)] {
            let Ok((op, bop, meshes)) = instantiate(r, choice, &scope) else {
                continue;
            };
            // The negative twin of conform's table: the backward doubled
            // (B3 must fail), the same way with and without the switch.
            let twin = match &op.backward {
                Backward::Transpose(b) => {
                    let two = spmd_check::interp::parse("2 * x").expect("parses");
                    let mut t = op.clone();
                    t.backward = Backward::Transpose(Op::Compose(vec![b.clone(), Op::Local(two)]));
                    Some(t)
                }
                _ => None,
            };
            for o in std::iter::once(op).chain(bop).chain(twin) {
                let (fast, plain, used) = both(&o, &scope, &meshes);
                assert_eq!(fast, plain, "{} {choice:?}", r.id);
                ops += 1;
                once += usize::from(used);
                failing += usize::from(fast.starts_with("Unsound"));
            }
        }
    }
    assert!(ops > 100, "{ops} ops");
    assert!(once * 2 > ops, "{once} of {ops} ops decided once per case");
    assert!(failing * 4 > ops, "{failing} of {ops} failing ops compared");
}

#[test]
fn linear_rules_of_the_examples_agree() {
    let scope = Scope::default();
    let mut used = 0;
    for (file, r) in common::core_example_rules(&scope) {
        let (fast, plain, once) = both(&r.op, &scope, &r.meshes);
        assert_eq!(fast, plain, "{file}: {}", r.name);
        used += usize::from(once);
    }
    assert!(used >= 3, "{used} rules decided once per case");
}

/// The twin: a collective given a backward that reads the primal (built
/// here: rule files give a collective only a collective backward) is not
/// value-free, and would be wrongly passed were its backward checked at
/// x = 0 only; the right local backward is value-free and passes.
#[test]
fn a_backward_that_reads_the_primal_is_checked_at_every_point() {
    let text = r#"
[[rule]]
name = "psum"
dialect = "jax"
forward = "psum"
backward = "pvary"
inputs = ["Varying"]
output = "Invariant"
"#;
    let specs = spmd_check::rules::parse_file("t.toml", text).expect("parses");
    let scope = Scope::default();
    let rules = spmd_check::rules::build("t.toml", text, &specs, &scope).expect("builds");
    let local = |src: &str| {
        let f = spmd_check::interp::expr::parse_with_vars(src, &["x".into(), "g".into()])
            .expect("parses");
        let mut op = rules[0].op.clone();
        op.backward = Backward::Local(vec![f]);
        op
    };
    let (right, wrong) = (local("g"), local("g + x * g"));
    let meshes = &rules[0].meshes;
    let m = meshes
        .iter()
        .find(|m| m.num_ranks() == 2)
        .expect("2 ranks")
        .clone();
    let shapes = vec![vec![]];
    let (out, _) = wrong.op.infer(&m, &shapes).expect("fits");
    assert!(values_free(&right, &shapes, &out));
    assert!(!values_free(&wrong, &shapes, &out));
    let c = Checker::new(&wrong, &m, shapes.clone()).expect("checker");
    let at = |v: i64| {
        let xs = vec![spmd_check::semantics::perrank::from_free(
            &m,
            &wrong.inputs[0],
            &shapes[0],
            &[Q::int(v), Q::int(0)],
        )];
        c.check(&xs, Phase::All)
    };
    assert!(matches!(at(0), Outcome::Pass(_)));
    assert!(matches!(at(1), Outcome::Fail(v) if v.property == Property::B3));
    // The runs find it, at the same point with and without the switch,
    // and pass the right one.
    let (fast, plain, _) = both(&wrong, &scope, meshes);
    assert_eq!(fast, plain);
    assert!(fast.starts_with("Unsound"), "{fast}");
    let (fast, plain, once) = both(&right, &scope, meshes);
    assert_eq!(fast, plain);
    assert!(once && fast.starts_with("Sound"), "{fast}");
}
