//! Cases decided by identity (SPEC.md §19.8): a case of a transcendental op
//! over the caps is run once on symbolic values, and decided when every
//! comparison is an identity. Where the grid decides a case too, the two
//! must agree: an identity never holds on a case where the grid finds a
//! counterexample (the twins), and it does hold on the grid's sound cases
//! of the ops it covers.

use spmd_check::generators::{cases, with_lane_mode, LaneMode, Scope};
use spmd_check::oracle::exact_deriv::{case_identity, Identity};
use spmd_check::oracle::outcome::Outcome;
use spmd_check::oracle::Verdict;
use spmd_check::rules::{build, parse_file, Rule};
use spmd_check::run::check_op;
use std::ops::ControlFlow;

/// Sound rules and their wrong twins, each with a function the symbolic
/// domain keeps exact (exp, softmax, sigmoid, tanh, gelu, silu, products,
/// the log of logsumexp and cross-entropy, the root of layernorm and
/// rmsnorm).
const RULES: &str = r#"
[[rule]]
name = "softmax rows, rows sharded"
op = { expr = "softmax(x, 1)" }
inputs = ["S(0)"]
output = "S(0)"

[[rule]]
name = "softmax over the sharded dim"
op = { expr = "softmax(x, 0)" }
inputs = ["S(0)"]
output = "S(0)"

[[rule]]
name = "softmax Varying"
op = { expr = "softmax(x, 1)" }
inputs = ["V"]
output = "V"

[[rule]]
name = "softmax Varying to Invariant"
op = { expr = "softmax(x, 1)" }
inputs = ["V"]
output = "I"

[[rule]]
name = "softmax Partial"
op = { expr = "softmax(x, 1)" }
inputs = ["P"]
output = "P"

[[rule]]
name = "exp times Invariant"
op = { expr = "exp(x) * y" }
inputs = ["V", "I"]
output = "V"

[[rule]]
name = "exp of Partial times Invariant"
op = { expr = "exp(x) * y" }
inputs = ["P", "I"]
output = "P"

[[rule]]
name = "gelu of Varying"
op = { expr = "gelu(x) * y" }
inputs = ["V", "V"]
output = "V"

[[rule]]
name = "gelu of Replicate to Partial"
op = { expr = "gelu(x)" }
inputs = ["R"]
output = "P"

[[rule]]
name = "tanh plus sigmoid"
op = { expr = "tanh(x) + sigmoid(y)" }
inputs = ["V", "V"]
output = "V"

[[rule]]
name = "silu of Invariant to Partial"
op = { expr = "silu(x)" }
inputs = ["I"]
output = "P"

[[rule]]
name = "exp, its backward right"
op = { expr = "exp(x) * x" }
inputs = ["V"]
output = "V"
backward = ["g * exp(x) * (x + 1)"]

[[rule]]
name = "exp, its backward without the product rule"
op = { expr = "exp(x) * x" }
inputs = ["V"]
output = "V"
backward = ["g * exp(x) * x"]

[[rule]]
name = "sigmoid times Varying"
op = { expr = "sigmoid(x) * y" }
inputs = ["V", "V"]
output = "V"

[[rule]]
name = "sigmoid, its backward written as s(1 - s)"
op = { expr = "sigmoid(x)" }
inputs = ["R"]
output = "R"
backward = ["g * sigmoid(x) * (1 - sigmoid(x))"]

[[rule]]
name = "sigmoid, its backward without the square"
op = { expr = "sigmoid(x)" }
inputs = ["R"]
output = "R"
backward = ["g * sigmoid(x) * (1 - x)"]

[[rule]]
name = "cross-entropy on batch-sharded logits"
op = { expr = "cross_entropy(x, t, 1)" }
inputs = ["S(0)", "S(0)"]
output = "S(0)"

[[rule]]
name = "cross-entropy on vocab-sharded logits, no all-reduce"
op = { expr = "cross_entropy(x, t, 1)" }
inputs = ["S(1)", "S(1)"]
output = "P"

[[rule]]
name = "logsumexp of Replicate to Varying"
op = { expr = "logsumexp(x, 0)" }
inputs = ["R"]
output = "V"

[[rule]]
name = "logsumexp of Varying to Replicate"
op = { expr = "logsumexp(x, 0)" }
inputs = ["V"]
output = "R"

[[rule]]
name = "layernorm of Varying rows"
op = { expr = "layernorm(x, 1)" }
inputs = ["V"]
output = "V"

[[rule]]
name = "layernorm over the sharded dim"
op = { expr = "layernorm(x, 0)" }
inputs = ["S(0)"]
output = "S(0)"

[[rule]]
name = "rmsnorm of Replicate, with an epsilon"
op = { expr = "rmsnorm(x, 1, 1)" }
inputs = ["R"]
output = "R"

[[rule]]
name = "rmsnorm of Partial"
op = { expr = "rmsnorm(x, 1, 1)" }
inputs = ["P"]
output = "P"

[[rule]]
name = "attention, heads sharded"
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["S(0)", "S(0)", "S(0)"]
output = "S(0)"

[[rule]]
name = "attention, keys sharded"
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["S(0)", "S(1)", "S(1)"]
output = "S(0)"
"#;

/// The one rule of `text`, built on `scope`.
fn one_rule(text: &str, scope: &Scope) -> Rule {
    let specs = parse_file("rule.toml", text).expect("parses");
    build("rule.toml", text, &specs, scope)
        .expect("builds")
        .remove(0)
}

fn rules(scope: &Scope) -> Vec<Rule> {
    let specs = parse_file("identity.toml", RULES).expect("parses");
    build("identity.toml", RULES, &specs, scope).expect("builds")
}

fn small() -> Scope {
    let mut scope = Scope::default();
    scope.meshes.retain(|m| m.num_ranks() <= 2);
    scope.max_rank = 3;
    scope.max_dim = 2;
    scope
}

/// On every case the grid decides, with lanes off so that each case is
/// enumerated whole: where the grid finds a counterexample, no identity
/// holds on that case (the rule's twin is rejected); where it is sound,
/// the identity holds on the cases of the functions it covers.
#[test]
fn identities_agree_with_the_grid_where_both_decide() {
    let scope = small();
    let (mut agreed, mut refused_twins, mut sound_rules) = (0, 0, 0);
    let mut undecided_empty = 0;
    for r in rules(&scope) {
        let (cs, _) = with_lane_mode(LaneMode::Off, || cases(&r.op, &scope, &r.meshes));
        let v = with_lane_mode(LaneMode::Off, || {
            check_op(&r.op, &scope, &r.meshes, &|_| {})
        });
        match &v {
            Verdict::Unsound { violation, .. } => {
                let shapes: Vec<_> = violation
                    .shown
                    .iter()
                    .filter(|s| s.input && !s.alternative)
                    .map(|s| s.value.shape().to_vec())
                    .collect();
                assert!(
                    case_identity(&r.op, &violation.mesh, &shapes, true, &|| false) == Identity::No,
                    "{}: an identity on the grid's failing case {shapes:?}",
                    r.name
                );
                refused_twins += 1;
            }
            Verdict::Sound { .. } => {
                sound_rules += 1;
                for c in &cs {
                    if case_identity(&r.op, &c.mesh, &c.shapes, true, &|| false) != Identity::No {
                        agreed += 1;
                        continue;
                    }
                    // Only a case the grid decides nothing on may be left:
                    // every point outside the domain (layernorm of rows of
                    // length 1, where the variance is the zero function).
                    let _ = c.for_each_point(&mut |p| {
                        let o =
                            spmd_check::oracle::check::check(&r.op, &c.mesh, &c.inputs(&r.op, p));
                        assert!(
                            matches!(o, Outcome::OutsideDomain),
                            "{}: no identity on the grid's case {:?} on {}, which decides {o:?}",
                            r.name,
                            c.shapes,
                            c.mesh
                        );
                        ControlFlow::<()>::Continue(())
                    });
                    undecided_empty += 1;
                }
            }
            // No multi-rank shape fits on this small scope: nothing to
            // compare.
            Verdict::Vacuous { .. } => {}
            other => panic!("{}: {other:?}", r.name),
        }
    }
    assert!(
        refused_twins >= 12,
        "{refused_twins} failing rules compared"
    );
    assert!(sound_rules >= 12, "{sound_rules} sound rules compared");
    assert!(agreed >= 100, "{agreed} sound cases decided both ways");
    assert!(
        undecided_empty <= agreed / 10,
        "{undecided_empty} cases left to a grid that decides nothing"
    );
}

/// Cases over the caps: the sound rules' are decided by identity and
/// counted among the cases, none left beyond the cap; a wrong backward
/// that the grid catches on small cases is not an identity on the large
/// ones either.
#[test]
fn cases_over_the_caps_are_decided_by_identity() {
    let mut scope = Scope::default();
    scope.meshes.retain(|m| m.num_ranks() == 2);
    scope.max_rank = 3;
    scope.max_dim = 2;
    let text = "[[rule]]\nname = \"attention on 2\"\nmesh = { x = 2 }\nop = { expr = \"einsum(\\\"hqk,hkd->hqd\\\", softmax(einsum(\\\"hqd,hkd->hqk\\\", q, k), 2), v)\" }\ninputs = [\"V\", \"V\", \"V\"]\noutput = \"V\"\n";
    let r = one_rule(text, &scope);
    let (_, cover) = cases(&r.op, &scope, &r.meshes);
    assert!(cover.beyond_cap >= 20, "{}", cover.beyond_cap);
    assert_eq!(cover.symbolic.len() as u64, cover.beyond_cap);
    let v = check_op(&r.op, &scope, &r.meshes, &|_| {});
    let t = v.tally();
    // Every case, on the grid or over the caps, is an identity defined at
    // every point (softmax divides by a sum of exponentials): a proof.
    assert!(v.is_sound() && v.proof() && t.by_identity, "{v:?}");
    assert_eq!(t.cases_beyond_cap, 0);
    assert_eq!(t.identity_cases, cover.beyond_cap);
    // The twin: its output typed Invariant. The grid refutes it, and no
    // case over the caps is an identity.
    let wrong = text.replace("output = \"V\"", "output = \"I\"");
    let w = one_rule(&wrong, &scope);
    assert!(matches!(
        check_op(&w.op, &scope, &w.meshes, &|_| {}),
        Verdict::Unsound { .. }
    ));
    let (_, wc) = cases(&w.op, &scope, &w.meshes);
    assert!(!wc.symbolic.is_empty());
    assert!(wc
        .symbolic
        .iter()
        .all(|(m, s)| case_identity(&w.op, m, s, true, &|| false) == Identity::No));
}

/// Layernorm divides by a root that vanishes where a row is constant
/// (ε = 0): its cases over the caps are identities where it is defined,
/// counted as decided, but its verdict stays bounded; the same rule's
/// twin over the sharded dim is refuted by the grid.
#[test]
fn identities_where_defined_are_no_proof() {
    let mut scope = Scope::default();
    scope.meshes.retain(|m| m.num_ranks() == 2);
    let text = "[[rule]]\nname = \"ln\"\nop = { expr = \"layernorm(x, 1)\" }\ninputs = [\"V\"]\noutput = \"V\"\n";
    let r = one_rule(text, &scope);
    let v = check_op(&r.op, &scope, &r.meshes, &|_| {});
    let t = v.tally();
    assert!(v.is_sound() && !v.proof() && !t.by_identity, "{v:?}");
    assert!(t.identity_cases > 0, "{t:?}");
    let (cs, _) = cases(&r.op, &scope, &r.meshes);
    assert!(cs.iter().any(
        |c| case_identity(&r.op, &c.mesh, &c.shapes, true, &|| false) == Identity::WhereDefined
    ));
    let wrong = text
        .replace("layernorm(x, 1)", "layernorm(x, 0)")
        .replace("\"V\"", "\"S(0)\"");
    let w = one_rule(&wrong, &scope);
    assert!(matches!(
        check_op(&w.op, &scope, &w.meshes, &|_| {}),
        Verdict::Unsound { .. }
    ));
}

/// What the symbolic domain refuses leaves a case to the grid: sin and cos
/// (no exponential form kept), the log of a value without a sign by its
/// form (log(x² + 1)), and a kink's sign (relu).
#[test]
fn refused_functions_decide_nothing() {
    let scope = small();
    for expr in ["cos(x)", "sin(x) * x", "log(x * x + 1)", "relu(x) * exp(x)"] {
        let text = format!(
            "[[rule]]\nname = \"r\"\nop = {{ expr = {expr:?} }}\ninputs = [\"V\"]\noutput = \"V\"\n"
        );
        let r = one_rule(&text, &scope);
        let (cs, _) = cases(&r.op, &scope, &r.meshes);
        assert!(!cs.is_empty());
        assert!(
            cs.iter()
                .all(|c| case_identity(&r.op, &c.mesh, &c.shapes, true, &|| false) == Identity::No),
            "{expr}"
        );
    }
}
