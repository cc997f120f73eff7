//! Lane grids (SPEC.md §8.5): a case whose op separates into lanes is
//! decided by the points where at most one lane group is nonzero, each
//! checking only that group's items. On the same cases, the lane grid and
//! the full grid give the same verdict, counterexample and failing
//! property, sound and unsound rules alike; the lane grid visits fewer
//! points. The analysis itself and its twins are in `interp/tests/lanes.rs`.

use spmd_check::generators::{cases, with_lane_mode, LaneMode, Scope};
use spmd_check::oracle::Verdict;
use spmd_check::rules::{build, parse_file, Rule};
use spmd_check::run::{check_op, with_plain_points};

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
name = "softmax Invariant to Varying"
op = { expr = "softmax(x, 1)" }
inputs = ["I"]
output = "V"

[[rule]]
name = "softmax Partial"
op = { expr = "softmax(x, 1)" }
inputs = ["P"]
output = "P"

[[rule]]
name = "softmax Replicate"
op = { expr = "softmax(x, 0)" }
inputs = ["R"]
output = "R"

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
name = "tanh plus sigmoid"
op = { expr = "tanh(x) + sigmoid(y)" }
inputs = ["V", "V"]
output = "V"

[[rule]]
name = "tanh of Partial"
op = { expr = "tanh(x)" }
inputs = ["P"]
output = "P"

[[rule]]
name = "logsumexp rows"
op = { expr = "softmax(x, 1) * 2 - x" }
inputs = ["S(0)"]
output = "S(0)"

[[rule]]
name = "batched matmul, batch sharded"
op = { expr = "einsum(\"bij,bjk->bik\", a, b)" }
inputs = ["S(0)", "S(0)"]
output = "S(0)"

[[rule]]
name = "matmul of Partial by Partial"
op = { expr = "einsum(\"ij,jk->ik\", a, b)" }
inputs = ["P", "P"]
output = "P"

[[rule]]
name = "attention, heads sharded"
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["S(0)", "S(0)", "S(0)"]
output = "S(0)"

[[rule]]
name = "attention, queries sharded, keys replicated"
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["S(1)", "R", "R"]
output = "S(1)"

[[rule]]
name = "attention, keys sharded"
op = { expr = "einsum(\"hqk,hkd->hqd\", softmax(einsum(\"hqd,hkd->hqk\", q, k), 2), v)" }
inputs = ["S(0)", "S(1)", "S(1)"]
output = "S(0)"
"#;

fn rules(scope: &Scope) -> Vec<Rule> {
    let specs = parse_file("lanes.toml", RULES).expect("parses");
    build("lanes.toml", RULES, &specs, scope).expect("builds")
}

/// What must agree: the verdict's kind, its proof flag, the cases, and the
/// counterexample with its property.
fn shown(v: &Verdict) -> String {
    match v {
        Verdict::Sound { proof, tally } => {
            format!("sound proof={proof} cases={}", tally.cases)
        }
        Verdict::Unsound { violation, tally } => {
            format!("unsound cases={} {violation:?}", tally.cases)
        }
        Verdict::Vacuous { tally } => format!("vacuous cases={}", tally.cases),
        Verdict::Undetermined { tally } => format!("undetermined cases={}", tally.cases),
    }
}

fn instances(v: &Verdict) -> u64 {
    match v {
        Verdict::Sound { tally, .. }
        | Verdict::Unsound { tally, .. }
        | Verdict::Vacuous { tally }
        | Verdict::Undetermined { tally } => tally.instances(),
    }
}

#[test]
fn lane_grids_agree_with_full_grids_on_the_same_cases() {
    let mut scope = Scope::default();
    scope.meshes.retain(|m| m.num_ranks() <= 2);
    scope.max_rank = 3;
    scope.max_dim = 2;
    let (mut laned, mut failing, mut fewer) = (0, 0, 0);
    for r in rules(&scope) {
        let run = || check_op(&r.op, &scope, &r.meshes, &|_| {});
        let full = with_lane_mode(LaneMode::Off, run);
        let lane = with_lane_mode(LaneMode::WithinCaps, run);
        let plain = with_lane_mode(LaneMode::WithinCaps, || with_plain_points(run));
        assert_eq!(shown(&full), shown(&lane), "{}", r.name);
        assert_eq!(shown(&full), shown(&plain), "{}", r.name);
        let used = with_lane_mode(LaneMode::WithinCaps, || {
            cases(&r.op, &scope, &r.meshes)
                .0
                .iter()
                .any(|c| c.lanes.is_some())
        });
        laned += usize::from(used);
        failing += usize::from(matches!(full, Verdict::Unsound { .. }));
        fewer += usize::from(used && instances(&lane) < instances(&full));
    }
    assert!(laned >= 12, "{laned} rules with lane cases");
    assert!(failing >= 4, "{failing} failing rules compared");
    assert!(fewer >= 8, "{fewer} rules visit fewer points lane by lane");
}

#[test]
fn cases_over_the_caps_are_checked_lane_by_lane() {
    // Softmax over rows of 2 or 3 entries on 8 ranks: every case has 16 to
    // 72 free scalars, over the cap of 4, and each row is a lane of its own.
    let scope = Scope::default();
    let text = "[[rule]]\nname = \"softmax on 8\"\nmesh = { x = 8 }\nop = { expr = \"softmax(x, 1)\" }\ninputs = [\"S(0)\"]\noutput = \"S(0)\"\n";
    let specs = parse_file("s8.toml", text).expect("parses");
    let r = build("s8.toml", text, &specs, &scope)
        .expect("builds")
        .remove(0);
    let (cs, cover) = cases(&r.op, &scope, &r.meshes);
    assert_eq!(cover.beyond_cap, 0);
    assert!(cs.len() >= 9 && cs.iter().all(|c| c.lanes.is_some()));
    let (off, off_cover) = with_lane_mode(LaneMode::Off, || cases(&r.op, &scope, &r.meshes));
    assert!(off.is_empty() && off_cover.beyond_cap as usize == cs.len());
    // The wrong twin, softmax over the sharded dim: its lanes are columns
    // across all 8 ranks, over the cap, so nothing is checked and it is
    // not called sound.
    let wrong = text.replace("softmax(x, 1)", "softmax(x, 0)");
    let specs = parse_file("w8.toml", &wrong).expect("parses");
    let w = build("w8.toml", &wrong, &specs, &scope)
        .expect("builds")
        .remove(0);
    let v = check_op(&w.op, &scope, &w.meshes, &|_| {});
    assert!(!shown(&v).starts_with("sound"), "{}", shown(&v));
}

#[test]
fn forward_mode_skips_ranks_with_zero_tangent_of_a_total_function() {
    // B3's derivative of a total function leaves out the ranks a
    // coordinate's tangent does not touch (SPEC.md §19.4). On two ranks a
    // right hand-written VJP of softmax stays sound (a derivative that
    // dropped a rank it should read would not match it) and a wrong one
    // fails B3 there.
    let scope = Scope {
        max_rank: 1,
        ..Scope::default()
    };
    let rule = |name: &str, backward: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nmesh = {{ x = 2 }}\nop = {{ expr = \"softmax(x, 0)\" }}\ninputs = [\"V\"]\noutput = \"V\"\nbackward = [\"{backward}\"]\n"
        )
    };
    let text = rule("good", "softmax(x, 0) * (g - sum(g * softmax(x, 0), 0))")
        + &rule("wrong", "softmax(x, 0) * g");
    let specs = parse_file("vjp.toml", &text).expect("parses");
    let rs = build("vjp.toml", &text, &specs, &scope).expect("builds");
    let v: Vec<String> = rs
        .iter()
        .map(|r| shown(&check_op(&r.op, &scope, &r.meshes, &|_| {})))
        .collect();
    assert!(v[0].starts_with("sound"), "{}", v[0]);
    assert!(
        v[1].starts_with("unsound") && v[1].contains("B3"),
        "{}",
        v[1]
    );
    assert!(v[1].contains("size: 2"), "{}", v[1]);
}
