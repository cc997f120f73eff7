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
name = "product with broadcast scalars"
op = { expr = "a * b * c" }
inputs = ["V", "V", "V"]
output = "V"

[[rule]]
name = "product of Partials, scalars among them"
op = { expr = "a * b * c" }
inputs = ["P", "P", "V"]
output = "P"

[[rule]]
name = "exp times a shared Invariant"
op = { expr = "exp(x * s) - s" }
inputs = ["V", "I"]
output = "V"

[[rule]]
name = "exp of Partial times a scalar"
op = { expr = "exp(x) * s" }
inputs = ["V", "P"]
output = "P"

[[rule]]
name = "softmax rows times a sum"
op = { expr = "softmax(x, 1) * sum(y, 0)" }
inputs = ["S(0)", "R"]
output = "S(0)"

[[rule]]
name = "rows times a sum of Partials"
op = { expr = "x * sum(y, 0)" }
inputs = ["V", "P"]
output = "V"

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

/// The one rule of `text`, built on `scope`.
fn one_rule(text: &str, scope: &Scope) -> Rule {
    let specs = parse_file("rule.toml", text).expect("parses");
    build("rule.toml", text, &specs, scope)
        .expect("builds")
        .remove(0)
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
    let (mut laned, mut failing, mut fewer, mut cored) = (0, 0, 0, 0);
    for r in rules(&scope) {
        let run = || check_op(&r.op, &scope, &r.meshes, &|_| {});
        let full = with_lane_mode(LaneMode::Off, run);
        let lane = with_lane_mode(LaneMode::WithinCaps, run);
        let plain = with_lane_mode(LaneMode::WithinCaps, || with_plain_points(run));
        assert_eq!(shown(&full), shown(&lane), "{}", r.name);
        assert_eq!(shown(&full), shown(&plain), "{}", r.name);
        let split: Vec<_> = with_lane_mode(LaneMode::WithinCaps, || {
            cases(&r.op, &scope, &r.meshes)
                .0
                .into_iter()
                .filter_map(|c| c.lanes)
                .collect()
        });
        let used = !split.is_empty();
        laned += usize::from(used);
        cored += usize::from(split.iter().any(|l| l.cores().contains(&true)));
        failing += usize::from(matches!(full, Verdict::Unsound { .. }));
        fewer += usize::from(used && instances(&lane) < instances(&full));
    }
    assert!(laned >= 12, "{laned} rules with lane cases");
    assert!(failing >= 4, "{failing} failing rules compared");
    assert!(fewer >= 8, "{fewer} rules visit fewer points lane by lane");
    assert!(cored >= 6, "{cored} rules with a core read by every lane");
}

#[test]
fn cases_over_the_caps_are_checked_lane_by_lane() {
    // Softmax over rows of 2 or 3 entries on 8 ranks: every case has 16 to
    // 72 free scalars, over the cap of 4, and each row is a lane of its own.
    let scope = Scope::default();
    let text = "[[rule]]\nname = \"softmax on 8\"\nmesh = { x = 8 }\nop = { expr = \"softmax(x, 1)\" }\ninputs = [\"S(0)\"]\noutput = \"S(0)\"\n";
    let r = one_rule(text, &scope);
    let (cs, cover) = cases(&r.op, &scope, &r.meshes);
    assert_eq!(cover.beyond_cap, 0);
    assert!(cs.len() >= 9 && cs.iter().all(|c| c.lanes.is_some()));
    let (off, off_cover) = with_lane_mode(LaneMode::Off, || cases(&r.op, &scope, &r.meshes));
    assert!(off.is_empty() && off_cover.beyond_cap as usize == cs.len());
    // The wrong twin, softmax over the sharded dim: its lanes are columns
    // across all 8 ranks, over the cap, so nothing is checked and it is
    // not called sound.
    let wrong = text.replace("softmax(x, 1)", "softmax(x, 0)");
    let w = one_rule(&wrong, &scope);
    let v = check_op(&w.op, &scope, &w.meshes, &|_| {});
    assert!(!shown(&v).starts_with("sound"), "{}", shown(&v));
}

#[test]
fn a_broadcast_scalar_is_a_core_over_the_caps() {
    // a · b · c · d, every input Varying, on the default meshes: the cases
    // with a scalar beside tensors of 6 or 9 entries were all over the caps
    // (168 of them; the rest split a rank at a time); with each rank's
    // scalars as the core of that rank's lanes they are all checked, and
    // the proof stands.
    let scope = Scope::default();
    let text = "[[rule]]\nname = \"product of 4\"\nop = { expr = \"a * b * c * d\" }\ninputs = [\"V\", \"V\", \"V\", \"V\"]\noutput = \"V\"\n";
    let r = one_rule(text, &scope);
    let (cs, cover) = cases(&r.op, &scope, &r.meshes);
    assert_eq!(cover.beyond_cap, 0);
    let cored = cs
        .iter()
        .filter(|c| c.lanes.as_ref().is_some_and(|l| l.cores().contains(&true)))
        .count();
    let (_, off) = with_lane_mode(LaneMode::Off, || cases(&r.op, &scope, &r.meshes));
    // Every case over the caps is split, most of them with a core (a
    // rank's scalars read by that rank's lanes).
    let laned = cs.iter().filter(|c| c.lanes.is_some()).count();
    assert_eq!(off.beyond_cap as usize, laned);
    assert!(cored >= 168, "{cored} cases with a core");
    let v = check_op(&r.op, &scope, &r.meshes, &|_| {});
    assert!(
        matches!(v, Verdict::Sound { proof: true, .. }),
        "{}",
        shown(&v)
    );
    // Its twin, every input Partial: a core of Partial scalars read with
    // each lane; the first failure is found within the caps.
    let wrong = text.replace("\"V\", \"V\", \"V\", \"V\"]", "\"P\", \"P\", \"P\", \"P\"]");
    let wrong = wrong.replace("output = \"V\"", "output = \"P\"");
    let w = one_rule(&wrong, &scope);
    let v = check_op(&w.op, &scope, &w.meshes, &|_| {});
    assert!(shown(&v).starts_with("unsound"), "{}", shown(&v));
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

/// The core's items are kept at every lane's points (SPEC.md §8.5). For
/// x[0..2] · s with x Varying and s Partial, F2 fails along s's kernel
/// only where x is nonzero: at a point of one of x's lanes (a rank's x),
/// on an item of the core (s). The slice keeps x of rank 1 or more, so
/// every case is split. Negative twins: a checker that keeps only the
/// lane's own items there reports another property at that point; a walk
/// that splits the core off as a lane of its own never has x and s
/// nonzero together, and reports another property.
#[test]
fn the_core_is_checked_with_every_lane() {
    use spmd_check::generators::LaneGroups;
    use spmd_check::oracle::{Checker, Outcome, Phase, Property};
    use spmd_check::semantics::Q;
    let mut scope = Scope::default();
    scope.meshes.retain(|m| m.num_ranks() == 2);
    let text = "[[rule]]\nname = \"x times a Partial scalar\"\nop = { expr = \"slice(x, 0, 0, 2) * s\" }\ninputs = [\"V\", \"P\"]\noutput = \"V\"\n";
    let r = one_rule(text, &scope);
    let cs = with_lane_mode(LaneMode::WithinCaps, || cases(&r.op, &scope, &r.meshes).0);
    let c = cs
        .iter()
        .find(|c| c.lanes.is_some() && c.shapes == [vec![2], vec![]])
        .expect("x of 2 entries beside a scalar is split");
    let l: &LaneGroups = c.lanes.as_ref().expect("split");
    // x's four scalars are two lanes (a rank each), each reading the core
    // of s's scalar on that rank.
    let lanes: Vec<u32> = l.free[..4].to_vec();
    assert!(lanes.iter().all(|&g| !l.is_core(g)));
    assert!(l.free[4..].iter().all(|&g| l.is_core(g)));
    // The point x = (1, 0 | 0, 0), s = 0: a point of x's first lane.
    let mut point = vec![Q::zero(); l.free.len()];
    point[0] = Q::one();
    let g = l.lane_at(&point).expect("a lane point");
    assert_eq!(g, lanes[0]);
    let xs = c.inputs(&r.op, &point);
    let check = |core: Vec<bool>| {
        Checker::new(&r.op, &c.mesh, c.shapes.clone())
            .expect("fits")
            .with_lanes(l.inputs.clone(), l.out.clone(), core)
            .check(&xs, Phase::Lane(g))
    };
    assert!(
        matches!(check(l.cores()), Outcome::Fail(v) if v.property == Property::F2),
        "the core's kernel direction fails F2 here"
    );
    // Twin: without the core's items the point misses F2 and reports a
    // later property (B1 at the unit cotangent), not the full check's.
    let apart = check(vec![false; l.parts.len()]);
    assert!(
        matches!(&apart, Outcome::Fail(v) if v.property == Property::B1),
        "{apart:?}"
    );
    // The walk with the core as a lane of its own never has x and s
    // nonzero together: it misses F2 and meets B2 at a later point.
    let full = check_op(&r.op, &scope, &r.meshes, &|_| {});
    assert!(shown(&full).contains("F2"), "{}", shown(&full));
    let split = with_lane_mode(LaneMode::WithinCaps, || {
        check_op(&r.op, &scope, &r.meshes, &|_| {})
    });
    assert_eq!(shown(&full), shown(&split));
    let apart = with_lane_mode(LaneMode::WithinCapsCoresApart, || {
        check_op(&r.op, &scope, &r.meshes, &|_| {})
    });
    assert_ne!(shown(&apart), shown(&full));
    assert!(
        matches!(&apart, Verdict::Unsound { violation, .. } if violation.property == Property::B2),
        "{}",
        shown(&apart)
    );
}
