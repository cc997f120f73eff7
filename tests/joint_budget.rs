//! The joint budget (SPEC.md §8.3): where an op built from its own partials
//! has a total degree t in all its inputs together below the sum of its
//! per-input degrees, its grid keeps only the points whose value indices,
//! over all inputs, sum to at most t, and at those that reach t leaves out
//! every property of total degree t − 1. The built-ins' one-axis typings,
//! sums and products of several inputs, the examples' rules and the
//! generated programs of JAX and DTensor of up to two steps get the same
//! verdict, failing property and counterexample either way, on fewer
//! points. The lower set's twin (a product missed under too low a budget)
//! is a unit test of `generators::exhaustive`; the degrees' twins below.

mod common;

use spmd_check::generators::{cases, with_joint_budget, Scope};
use spmd_check::interp::{parse, TypedOp};
use spmd_check::oracle::Verdict;
use spmd_check::rules::{build, parse_file};
use spmd_check::run::check_op;
use spmd_check::semantics::Mesh;

const RULES: &str = r#"
[[rule]]
name = "three summed"
op = { expr = "a + b + c" }
inputs = ["V", "V", "V"]
output = "V"

[[rule]]
name = "three summed, Partial"
op = { expr = "a + b + c" }
inputs = ["P", "P", "V"]
output = "P"

[[rule]]
name = "a product plus a term"
op = { expr = "a * b + c" }
inputs = ["V", "I", "V"]
output = "V"

[[rule]]
name = "a product of Partials plus a term"
op = { expr = "a * b + c" }
inputs = ["P", "P", "P"]
output = "P"

[[rule]]
name = "a square plus a product"
op = { expr = "x * x + x * y - 2 * y" }
inputs = ["V", "I"]
output = "V"

[[rule]]
name = "program: a product, a sum, a square"
names = ["x", "y", "z"]
inputs = ["V", "V", "V"]
output = "V"

[[rule.step]]
name = "p"
expr = "x * y"
output = "V"

[[rule.step]]
name = "s"
expr = "p + z"
output = "V"

[[rule.step]]
name = "q"
expr = "pow(s, 2)"
output = "V"

[[rule]]
name = "program: a product of Partials, a sum"
names = ["x", "y", "z"]
inputs = ["P", "P", "P"]
output = "P"

[[rule.step]]
name = "p"
expr = "x * y"
output = "P"

[[rule.step]]
name = "s"
expr = "p + z"
output = "P"

[[rule]]
name = "a square of a Partial plus a product"
op = { expr = "x * x + x * y" }
inputs = ["P", "R"]
output = "P"
"#;

/// What must agree: the verdict's kind, its proof flag and the
/// counterexample with its property (the counts differ: fewer points).
fn shown(v: &Verdict) -> String {
    match v {
        Verdict::Sound { proof, .. } => format!("sound proof={proof}"),
        Verdict::Unsound { violation, .. } => format!("unsound {violation:?}"),
        Verdict::Vacuous { .. } => "vacuous".into(),
        Verdict::Undetermined { .. } => "undetermined".into(),
    }
}

fn ops(scope: &Scope) -> Vec<(String, TypedOp, Vec<Mesh>)> {
    let mut out = common::builtin_typings(&["add", "sub", "mul"], scope);
    let specs = parse_file("joint.toml", RULES).expect("parses");
    let mut rules = build("joint.toml", RULES, &specs, scope).expect("builds");
    rules.extend(
        common::core_example_rules(scope)
            .into_iter()
            .map(|(_, r)| r),
    );
    rules.extend(common::generated_rules(scope));
    out.extend(common::checked_ops(rules));
    out
}

#[test]
fn the_joint_budget_changes_no_outcome() {
    let scope = Scope::default();
    let (mut used, mut failing, mut fewer) = (0, 0, 0);
    for (name, op, meshes) in ops(&scope) {
        let joint = check_op(&op, &scope, &meshes, &|_| {});
        let apart = with_joint_budget(false, || check_op(&op, &scope, &meshes, &|_| {}));
        assert_eq!(shown(&joint), shown(&apart), "{name}");
        let u = cases(&op, &scope, &meshes)
            .0
            .iter()
            .any(|c| c.total.is_some());
        used += usize::from(u);
        failing += usize::from(u && matches!(joint, Verdict::Unsound { .. }));
        fewer += usize::from(u && joint.tally().instances() < apart.tally().instances());
        if !u {
            assert_eq!(format!("{joint:?}"), format!("{apart:?}"), "{name}");
        }
    }
    // 506, 123 and 506 when written.
    assert!(used >= 400, "{used} ops with a joint budget");
    assert!(failing >= 100, "{failing} of them failing");
    assert!(fewer >= 400, "{fewer} of them on fewer points");
}

/// The total degrees the budget rests on: a variable 1, a sum the largest
/// term, a product the sum of its factors, a power k times its base, a
/// contraction the sum of its operands; a program composes its steps'.
/// Twins: the per-input degrees alone (a sum of the inputs') overstate a
/// sum and understate nothing; a product's total is not its per-input
/// maximum.
#[test]
fn total_degrees_are_inferred() {
    for (text, shapes, total) in [
        ("a + b + c", vec![vec![]; 3], 1),
        ("a * b + c", vec![vec![]; 3], 2),
        ("x * x + x * y - 2 * y", vec![vec![]; 2], 2),
        ("pow(a + b, 3) * c", vec![vec![]; 3], 4),
        ("einsum(\"ij,jk->ik\", a, b) + c", vec![vec![2, 2]; 3], 2),
        ("sum(a * b, 0) / 2", vec![vec![3]; 2], 2),
        ("a * b * c * d", vec![vec![]; 4], 4),
    ] {
        let f = parse(text).expect("parses");
        let (_, d) = spmd_check::interp::eval::infer(&f.expr, &shapes).expect("infers");
        assert_eq!(d.total, total, "{text}");
        let per_input: u32 = d.num.iter().sum();
        assert!(d.total <= per_input, "{text}");
        if text == "a * b * c * d" {
            assert!(d.total > *d.num.iter().max().expect("inputs"), "{text}");
        }
    }
    // A program: (x·y + z)² has total degree 4, degree 2 in each input.
    let scope = Scope::default();
    let specs = parse_file("joint.toml", RULES).expect("parses");
    let rules = build("joint.toml", RULES, &specs, &scope).expect("builds");
    let r = rules
        .iter()
        .find(|r| r.name == "program: a product, a sum, a square")
        .expect("the program");
    let (_, d) =
        r.op.op
            .infer(&r.meshes[0], &[vec![], vec![], vec![]])
            .expect("infers");
    assert_eq!((d.num.clone(), d.total), (vec![2, 2, 2], 4));
}
