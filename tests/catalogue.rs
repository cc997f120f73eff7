//! The catalogue, exhaustively (SPEC.md §10.1, §13.2): every name, every
//! source/destination type and every parameter form either builds and gets a
//! verdict from the oracle through the normal check path, or is refused with
//! a one-line error; nothing panics. Under global types, every typing the
//! oracle finds sound for a data-moving op keeps the global tensor, checked
//! here independently by running the forward. Each verdict fixed here has a
//! wrong twin the oracle must reject, with the property that fails.

mod common;
use spmd_check::check::{check_rule, CheckConfig};
use spmd_check::generators::Scope;
use spmd_check::interp::catalogue::NAMES;
use spmd_check::interp::{Kind, Op};
use spmd_check::oracle::{Property, Verdict};
use spmd_check::rules::{build, parse_file, Rule};
use spmd_check::semantics::perrank::{denote, from_free, global, num_free};
use spmd_check::semantics::{Mesh, Q};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Every parameter form in scope: none, dims 0 and 1, stack, split/concat,
/// permutations (good, partial, out of range, not injective), and malformed
/// ones (repeated, unknown, not a number).
const PARAMS: &[&str] = &[
    "",
    "(dim=0)",
    "(dim=1)",
    "(stack)",
    "(dim=1, stack)",
    "(stack=true)",
    "(split=0, concat=1)",
    "(split=1, concat=0)",
    "(split=1)",
    "(perm=[1,0])",
    "(perm=[0,1])",
    "(perm=[_,0])",
    "(perm=[1,2,0])",
    "(perm=[5,5])",
    "(perm=[0,0])",
    "(perm=5)",
    "(dim=0, dim=1)",
    "(bogus=1)",
    "(dim=x)",
    "(stack=maybe)",
];

/// One-axis types: local (no layouts) and global.
const LOCAL: &[&str] = &["I", "R", "V", "P"];
const GLOBAL: &[&str] = &["I", "R", "P", "S(0)", "S(1)"];

/// A few two-axis typings, global (dp, tp).
const GLOBAL_2D: &[(&str, &str)] = &[
    (
        r#"{dp = "S(0)", tp = "S(0)"}"#,
        r#"{dp = "S(0)", tp = "R"}"#,
    ),
    (
        r#"{dp = "S(0)", tp = "S(0)"}"#,
        r#"{dp = "R", tp = "S(0)"}"#,
    ),
    (r#"{dp = "S(0)", tp = "S(0)"}"#, r#"{dp = "R", tp = "R"}"#),
    (
        r#"{dp = "S(0)", tp = "S(1)"}"#,
        r#"{dp = "S(0)", tp = "S(0)"}"#,
    ),
    (r#"{dp = "S(0)", tp = "R"}"#, r#"{dp = "S(1)", tp = "R"}"#),
    (
        r#"{dp = "P", tp = "S(1)"}"#,
        r#"{dp = "S(0)", tp = "S(1)"}"#,
    ),
    (r#"{dp = "R", tp = "P"}"#, r#"{dp = "R", tp = "S(1)"}"#),
];

fn rule_text(forward: &str, backward: Option<&str>, src: &str, dst: &str) -> String {
    let q = |t: &str| {
        if t.starts_with('{') {
            t.to_string()
        } else {
            format!("\"{t}\"")
        }
    };
    let back = backward
        .map(|b| format!("backward = \"{b}\"\n"))
        .unwrap_or_default();
    format!(
        "[[rule]]\nname = \"c\"\nforward = \"{forward}\"\n{back}inputs = [{}]\noutput = {}\n",
        q(src),
        q(dst)
    )
}

fn build_rule(text: &str) -> Result<Rule, String> {
    let specs = parse_file("c.toml", text).map_err(|e| e.0)?;
    let mut rules = build("c.toml", text, &specs, &cfg().scope).map_err(|e| e.0)?;
    Ok(rules.pop().expect("one rule"))
}

/// The default scope with room for two-axis cases (4 ranks, 2 × 2 shards).
fn cfg() -> CheckConfig {
    CheckConfig {
        scope: Scope {
            max_free: 8,
            max_points: 4096,
            ..Scope::default()
        },
        cases: 0,
        seed: 0,
    }
}

/// Build and check one rule: `Err` for bad input, else the oracle's verdict.
fn verdict(text: &str) -> Result<(Rule, Verdict), String> {
    let rule = build_rule(text)?;
    let v = check_rule(&rule, &cfg(), &[], &|_| {}).verdict;
    Ok((rule, v))
}

fn failed(v: &Verdict) -> Option<Property> {
    v.violation().map(|x| x.property)
}

/// Whether a catalogue name at these states only moves data (SPEC.md §13.2),
/// written from the names, not from the interpreter's kinds.
fn moves_data(family: &str, stack: bool, src: &str, dst: &str) -> bool {
    let v = |s: &str| s.starts_with('S') || s == "V";
    match family {
        "gather" => v(src) && !stack,
        "reduce" | "scatter" => src == "P" && !stack,
        "all_to_all" | "redistribute" => true,
        "convert" => !stack,
        "cast" => dst != "P" || src == "P",
        _ => false,
    }
}

/// The states of the first axis that changes (`{dp = "S(0)", tp = "R"}`
/// written per axis, or one state).
fn changed_states(s: &str, d: &str) -> (String, String) {
    let axes = |t: &str| -> Vec<String> {
        if !t.starts_with('{') {
            return vec![t.to_string()];
        }
        t.split('"').skip(1).step_by(2).map(String::from).collect()
    };
    let (a, b) = (axes(s), axes(d));
    a.iter()
        .zip(&b)
        .find(|(x, y)| x != y)
        .map(|(x, y)| (x.clone(), y.clone()))
        .unwrap_or((a[0].clone(), b[0].clone()))
}

/// Meshes to run on: two and three ranks on one axis, 2 × 2 and 2 × 3 on two.
fn meshes(ndim: usize) -> Vec<Mesh> {
    if ndim == 1 {
        vec![Mesh::line(2), Mesh::line(3)]
    } else {
        vec![
            Mesh::new(&[("dp", 2), ("tp", 2)]),
            Mesh::new(&[("dp", 2), ("tp", 3)]),
        ]
    }
}

/// Run the forward on values with distinct entries, for every fitting shape:
/// the global tensor must not change. Returns whether some shape fitted.
fn assert_global_kept(rule: &Rule, what: &str) -> bool {
    let op = &rule.op;
    let mut checked = 0;
    for m in meshes(op.inputs[0].states.len()) {
        for shape in [vec![2, 2], vec![2, 3], vec![3, 2], vec![6, 6], vec![2, 6]] {
            let Ok((out, _)) = op.op.infer(&m, std::slice::from_ref(&shape)) else {
                continue;
            };
            if !op.layouts_fit(&m, std::slice::from_ref(&shape), &out) {
                continue;
            }
            let k = num_free(&m, &op.inputs[0], &shape);
            let vals: Vec<Q> = (0..k).map(|i| Q::int(i as i64 * 7 % 11 + 1)).collect();
            let x = from_free(&m, &op.inputs[0], &shape, &vals);
            let y = op.op.forward(&m, std::slice::from_ref(&x)).expect("runs").y;
            let before = global(&m, &op.inputs[0], &denote(&m, &op.inputs[0], &x));
            let after = global(&m, &op.output, &denote(&m, &op.output, &y));
            assert_eq!(
                before, after,
                "{what}: sound, yet changes the global tensor"
            );
            checked += 1;
        }
    }
    checked > 0
}

/// One axis, global types: a sound reduction of Varying pieces (all-reduce,
/// reduce-scatter, pmean) gives the sum of the pieces (the mean for pmean)
/// as its global tensor, and a sound ppermute keeps the layout. Computed
/// here from the local tensors, independently of the interpreter's
/// global reading. Returns 1 when a check applied.
fn assert_global_reading(rule: &Rule, family: &str, s: &str, d: &str, what: &str) -> usize {
    let op = &rule.op;
    if family == "ppermute" {
        assert_eq!(s, d, "{what}: sound, yet a ppermute changes the layout");
        return 1;
    }
    let v = s.starts_with('S');
    if !(v && matches!(family, "reduce" | "scatter" | "mean")) {
        return 0;
    }
    let mut checked = 0;
    for m in [Mesh::line(2), Mesh::line(3)] {
        for shape in [vec![2, 2], vec![2, 3], vec![3, 2], vec![6, 6], vec![2, 6]] {
            let Ok((out, _)) = op.op.infer(&m, std::slice::from_ref(&shape)) else {
                continue;
            };
            if !op.layouts_fit(&m, std::slice::from_ref(&shape), &out) {
                continue;
            }
            let k = num_free(&m, &op.inputs[0], &shape);
            let vals: Vec<Q> = (0..k).map(|i| Q::int(i as i64 * 5 % 13 - 6)).collect();
            let x = from_free(&m, &op.inputs[0], &shape, &vals);
            let y = op.op.forward(&m, std::slice::from_ref(&x)).expect("runs").y;
            let mut want = x.tensors[1..]
                .iter()
                .fold(x.tensors[0].clone(), |a, t| a.add(t));
            if family == "mean" {
                want = want.scale(&Q::frac(1, m.num_ranks() as i64));
            }
            let have = global(&m, &op.output, &denote(&m, &op.output, &y));
            assert_eq!(have, Some(want), "{what}: sound, yet not the pieces' sum");
            checked += 1;
        }
    }
    usize::from(checked > 0)
}

/// SPEC.md §10.1, §13.2: the whole catalogue on one axis (local and global
/// types) and on a few two-axis global typings, with every parameter form.
#[test]
fn every_catalogue_call_builds_and_checks_or_is_refused() {
    let mut cases: Vec<(String, String, String, &str, bool)> = vec![];
    for (name, family) in NAMES {
        for p in PARAMS {
            let call = format!("{name}{p}");
            for (types, global) in [(LOCAL, false), (GLOBAL, true)] {
                for s in types {
                    for d in types {
                        cases.push((call.clone(), s.to_string(), d.to_string(), family, global));
                    }
                }
            }
            for (s, d) in GLOBAL_2D {
                cases.push((call.clone(), s.to_string(), d.to_string(), family, true));
            }
        }
    }
    let (mut panics, mut built, mut refused, mut sound, mut kept) = (vec![], 0, 0, 0, 0);
    let (mut reductions, mut kept_2d) = (0, 0);
    for (call, s, d, family, is_global) in &cases {
        let text = rule_text(call, None, s, d);
        let what = format!("{call} from {s} to {d}");
        match catch_unwind(AssertUnwindSafe(|| verdict(&text))) {
            Err(_) => panics.push(what),
            Ok(Err(e)) => {
                refused += 1;
                assert!(
                    !e.is_empty() && !e.contains('\n'),
                    "{what}: not a one-line error: {e:?}"
                );
            }
            Ok(Ok((rule, v))) => {
                built += 1;
                if v.is_sound() {
                    sound += 1;
                    let (src1, dst1) = changed_states(s, d);
                    let moves = moves_data(family, call.contains("stack"), &src1, &dst1);
                    if *is_global && moves && assert_global_kept(&rule, &what) {
                        kept += 1;
                        kept_2d += usize::from(s.starts_with('{'));
                    } else if *is_global && !s.starts_with('{') {
                        reductions += assert_global_reading(&rule, family, s, d, &what);
                    }
                }
            }
        }
    }
    assert!(
        panics.is_empty(),
        "{} cases panic: {panics:#?}",
        panics.len()
    );
    eprintln!(
        "{} cases: {built} built ({sound} sound, {kept} of them global data moves checked ({kept_2d} on two axes), {reductions} global reductions and permutations), {refused} refused",
        cases.len()
    );
    assert!(built > 100 && refused > 100 && kept > 10 && kept_2d > 5 && reductions > 10);
}

/// Every forward of the catalogue, on one axis with local and global types,
/// goes through `spmd-check transposes` without a panic: it lists
/// transposes or refuses with a one-line error.
#[test]
fn transposes_never_panic() {
    use spmd_check::semantics::Dialect;
    use spmd_check::transposes::search;
    let scope = Scope {
        meshes: vec![Mesh::line(1), Mesh::line(2), Mesh::line(3)],
        ..Scope::default()
    };
    let mut panics = vec![];
    for (name, _) in NAMES {
        for p in PARAMS {
            let call = format!("{name}{p}");
            for (s, d) in LOCAL
                .iter()
                .flat_map(|s| LOCAL.iter().map(move |d| (s, d)))
                .chain(
                    GLOBAL
                        .iter()
                        .flat_map(|s| GLOBAL.iter().map(move |d| (s, d))),
                )
            {
                {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        search(Dialect::SpmdTypes, &call, s, d, &scope)
                    }));
                    match r {
                        Err(_) => panics.push(format!("{call} from {s} to {d}")),
                        Ok(Err(e)) => assert!(!e.0.contains('\n'), "{call}: {e}"),
                        Ok(Ok(_)) => {}
                    }
                }
            }
        }
    }
    assert!(panics.is_empty(), "{panics:#?}");
}

/// The redistribute of seed 003 routed by layouts: S(0) -> S(1) is an
/// all-to-all (split 1, concat 0) and sound; the same types through a cast
/// (a no-op that changes the global tensor) fail F3.
#[test]
fn redistribute_between_layouts_is_an_all_to_all() {
    let text = rule_text("redistribute", Some("redistribute"), "S(0)", "S(1)");
    let (rule, v) = verdict(&text).expect("builds");
    match &rule.op.op {
        Op::Collective(c) => assert_eq!(
            c.kind,
            Kind::AllToAll {
                split: 1,
                concat: 0,
                stack: false
            }
        ),
        other => panic!("redistribute S(0) -> S(1) built {other:?}"),
    }
    assert!(v.is_sound(), "{}", v.name());
    for cast in ["reinterpret", "pvary", "convert", "reinterpret(V, V)"] {
        let (_, v) = verdict(&rule_text(cast, None, "S(0)", "S(1)")).expect("builds");
        assert_eq!(failed(&v), Some(Property::F3), "{cast} S(0) -> S(1)");
    }
    // A cast from R to S(0) tiles the value; convert keeps it.
    let (_, v) = verdict(&rule_text("reinterpret", None, "R", "S(0)")).expect("builds");
    assert_eq!(failed(&v), Some(Property::F3));
    let (_, v) = verdict(&rule_text("convert", Some("convert"), "R", "S(0)")).expect("builds");
    assert!(v.is_sound(), "{}", v.name());
}

/// A redistribute gathers along the layout's dim, not dim 0; an explicit
/// all_gather(dim=0) of the same types is the twin that fails F3.
#[test]
fn redistribute_uses_the_layout_dim() {
    let (rule, v) = verdict(&rule_text(
        "redistribute",
        Some("redistribute"),
        "S(1)",
        "R",
    ))
    .expect("builds");
    match &rule.op.op {
        Op::Collective(c) => assert_eq!(
            c.kind,
            Kind::AllGather {
                dim: 1,
                stack: false
            }
        ),
        other => panic!("{other:?}"),
    }
    assert!(v.is_sound(), "{}", v.name());
    let (_, v) = verdict(&rule_text("redistribute", None, "P", "S(1)")).expect("builds");
    assert!(v.is_sound(), "{}", v.name());
    let (_, v) = verdict(&rule_text("all_gather(dim=0)", None, "S(1)", "R")).expect("builds");
    assert_eq!(failed(&v), Some(Property::F3));
    // Omitted dims follow the layouts too.
    let (_, v) = verdict(&rule_text(
        "all_gather",
        Some("reduce_scatter"),
        "S(1)",
        "R",
    ))
    .expect("builds");
    assert!(v.is_sound(), "{}", v.name());
    let (_, v) =
        verdict(&rule_text("all_to_all", Some("all_to_all"), "S(1)", "S(0)")).expect("builds");
    assert!(v.is_sound(), "{}", v.name());
    // In a composition, the first step sees the source's layout and the
    // last the destination's; the explicit dim 0 is the twin.
    let (_, v) = verdict(&rule_text(
        "all_gather(R) |> reinterpret(R, I)",
        None,
        "S(1)",
        "I",
    ))
    .expect("builds");
    assert!(v.is_sound(), "{}", v.name());
    let (_, v) = verdict(&rule_text(
        "all_gather(R, dim=0) |> reinterpret(R, I)",
        None,
        "S(1)",
        "I",
    ))
    .expect("builds");
    assert_eq!(failed(&v), Some(Property::F3));
    // On two axes: the all-to-all on tp from S(1) to S(0) (tp minor on dim 0).
    let (_, v) = verdict(&rule_text(
        "redistribute",
        Some("redistribute"),
        r#"{dp = "S(0)", tp = "S(1)"}"#,
        r#"{dp = "S(0)", tp = "S(0)"}"#,
    ))
    .expect("builds");
    assert!(v.is_sound(), "{}", v.name());
    let (_, v) = verdict(&rule_text(
        "reinterpret",
        None,
        r#"{dp = "S(0)", tp = "S(1)"}"#,
        r#"{dp = "S(0)", tp = "S(0)"}"#,
    ))
    .expect("builds");
    assert_eq!(failed(&v), Some(Property::F3));
}

/// Malformed parameters are bad input, with a one-line error naming them.
#[test]
fn malformed_parameters_are_refused() {
    let bad: &[(&str, &str, &str, &str)] = &[
        ("ppermute(perm=[5,5])", "V", "V", "out of range"),
        ("ppermute(perm=[0,0])", "V", "V", "injective"),
        ("ppermute(perm=[1,2,3,4,0])", "V", "V", "needs a group of 5"),
        ("ppermute(perm=[])", "V", "V", "empty permutation"),
        ("ppermute(perm=1)", "V", "V", "takes a list"),
        ("ppermute", "V", "V", "needs perm"),
        ("ppermute(perm=[1,0], perm=[0,1])", "V", "V", "given twice"),
        ("all_gather(dim=0, dim=1)", "V", "R", "given twice"),
        ("all_gather(foo=1)", "V", "R", "unknown parameter `foo`"),
        ("all_reduce(dim=0)", "P", "R", "takes no `dim`"),
        ("psum(stack)", "P", "R", "takes no `stack`"),
        ("all_gather(split=1)", "V", "R", "takes no `split`"),
        ("reduce_scatter(concat=0)", "P", "V", "takes no `concat`"),
        ("all_to_all(dim=0)", "V", "V", "takes no `dim`"),
        ("reinterpret(dim=0)", "R", "V", "takes no `dim`"),
        ("ppermute(dim=0, perm=[1,0])", "V", "V", "takes no `dim`"),
        ("all_gather(perm=[1,0])", "V", "R", "takes no `perm`"),
        ("all_gather(stack=maybe)", "V", "R", "true or false"),
        ("all_gather(dim=-1)", "V", "R", "non-negative integer"),
        ("convert(R, P, dim=1)", "R", "P", "takes no `dim`"),
        ("redistribute(dim=1)", "P", "R", "takes no `dim`"),
        ("redistribute(dim=0)", "S(1)", "R", "layout is S(1)"),
        ("redistribute(stack)", "V", "R", "takes no `stack`"),
        ("redistribute(V, R)", "V", "R", "no state arguments"),
        ("all_gather(dim=0, stack)", "S(0)", "R", "contradicts"),
        ("convert(stack)", "R", "P", "`stack` applies"),
        ("all_gather(S(1), R)", "S(0)", "R", "S(1)"),
        ("all_gather(S(1), R, dim=0)", "V", "R", "contradicts"),
        ("all_gather(axis=tp)", "V", "R", "no mesh axis `tp`"),
    ];
    for (call, s, d, want) in bad {
        let e = match build_rule(&rule_text(call, None, s, d)) {
            Err(e) => e,
            Ok(_) => panic!("{call} from {s} to {d} builds"),
        };
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains(want), "{call}: `{e}` should say `{want}`");
    }
}

/// A convert from V to R or I (or from P to R, I or V) would need
/// communication: bad input at build time, in rule files and in
/// `transposes`, where it used to panic.
#[test]
fn converts_that_need_communication_are_refused() {
    for (s, d, use_) in [
        ("V", "R", "all_gather"),
        ("V", "I", "all_gather"),
        ("P", "R", "all_reduce"),
        ("P", "I", "all_reduce"),
        ("P", "V", "reduce_scatter"),
    ] {
        for call in ["convert", "convert(dim=0)"] {
            let Err(e) = build_rule(&rule_text(call, None, s, d)) else {
                panic!("{call} from {s} to {d} builds");
            };
            assert!(e.contains("communication") && e.contains(use_), "{e}");
            let Err(e) = spmd_check::transposes::search(
                spmd_check::semantics::Dialect::SpmdTypes,
                call,
                s,
                d,
                &Scope::default(),
            ) else {
                panic!("transposes {call} from {s} to {d} runs");
            };
            assert!(e.0.contains("communication"), "{}", e.0);
        }
    }
}

/// A good ppermute is sound; the same forward declared with a wrong meaning
/// is its twin (F3). The group size fixes the length of a permutation: a
/// rule is checked on the meshes whose group has that size, and one whose
/// meshes have none is bad input.
#[test]
fn ppermute_is_checked_on_its_group() {
    let (_, v) = verdict(&rule_text(
        "ppermute(perm=[1,0])",
        Some("ppermute(perm=[1,0])"),
        "V",
        "V",
    ))
    .expect("builds");
    assert!(v.is_sound(), "{}", v.name());
    // The inverse of a 3-cycle is the other 3-cycle; the cycle itself is
    // not its own transpose.
    let three = "mesh = { x = 3 }\n";
    let (_, v) = verdict(&format!(
        "{}{three}",
        rule_text(
            "ppermute(perm=[1,2,0])",
            Some("ppermute(perm=[2,0,1])"),
            "V",
            "V"
        )
    ))
    .expect("builds");
    assert!(v.is_sound(), "{}", v.name());
    let (_, v) = verdict(&format!(
        "{}{three}",
        rule_text(
            "ppermute(perm=[1,2,0])",
            Some("ppermute(perm=[1,2,0])"),
            "V",
            "V"
        )
    ))
    .expect("builds");
    assert_eq!(failed(&v), Some(Property::B3));
    let e = build_rule(&format!(
        "{}{three}",
        rule_text("ppermute(perm=[1,0])", None, "V", "V")
    ))
    .err()
    .unwrap_or_default();
    assert!(e.contains("needs a group of 2"), "{e}");
}

/// A collective built by hand (not through the catalogue) with parameters
/// that do not fit is an error when applied or given its meaning, not a
/// panic.
#[test]
fn applying_a_malformed_collective_is_an_error() {
    use spmd_check::interp::Collective;
    use spmd_check::semantics::perrank::Denot;
    use spmd_check::semantics::{PerRank, State, Tensor};
    let m = Mesh::line(2);
    let t = Tensor::zeros(&[2]);
    let x = PerRank {
        tensors: vec![t.clone(), t.clone()],
    };
    let d = Denot {
        family: vec![t.clone(), t],
    };
    let (v, r, p) = (State::Varying, State::Reduced, State::Partial);
    for (kind, src, dst) in [
        (
            Kind::PPermute {
                perm: vec![Some(5), Some(5)],
                pairs: false,
            },
            v,
            v,
        ),
        (
            Kind::PPermute {
                perm: vec![Some(0), Some(0)],
                pairs: false,
            },
            v,
            v,
        ),
        (
            Kind::PPermute {
                perm: vec![Some(0)],
                pairs: false,
            },
            v,
            v,
        ),
        (
            Kind::AllGather {
                dim: 3,
                stack: false,
            },
            v,
            r,
        ),
        (
            Kind::ReduceScatter {
                dim: 5,
                stack: true,
            },
            p,
            v,
        ),
        (
            Kind::Convert {
                dim: 0,
                stack: false,
            },
            v,
            r,
        ),
        (
            Kind::Convert {
                dim: 1,
                stack: true,
            },
            r,
            v,
        ),
    ] {
        let what = format!("{kind:?}");
        let op = Op::Collective(Collective {
            name: "hand".into(),
            kind,
            axes: vec![0],
            src,
            dst,
        });
        assert!(op.forward(&m, std::slice::from_ref(&x)).is_err(), "{what}");
        assert!(op.spec(&m, std::slice::from_ref(&d)).is_err(), "{what}");
    }
}

/// SPEC.md §13.2: under global types, reducing Varying pieces gives their
/// sum as the global tensor, laid out as the output type says, and ppermute
/// keeps the layout. Each sound typing has a twin whose layout contradicts
/// what the op does (F3).
#[test]
fn reductions_of_pieces_have_a_global_reading() {
    let sound = [
        ("psum_scatter(dim=1)", "S(0)", "S(1)"),
        ("psum_scatter(dim=0)", "S(1)", "S(0)"),
        ("psum", "S(0)", "R"),
        ("psum_invariant", "S(1)", "I"),
        ("pmean", "S(0)", "I"),
        ("ppermute(perm=[1,0])", "S(0)", "S(0)"),
    ];
    for (call, s, d) in sound {
        let (_, v) = verdict(&rule_text(call, None, s, d)).expect("builds");
        assert!(v.is_sound(), "{call} from {s} to {d}: {}", v.name());
    }
    let twins = [
        ("psum_scatter(dim=0)", "S(0)", "S(1)"),
        ("psum", "S(0)", "S(0)"),
        ("pmean", "S(1)", "S(1)"),
        ("ppermute(perm=[1,0])", "S(0)", "S(1)"),
    ];
    for (call, s, d) in twins {
        let (_, v) = verdict(&rule_text(call, None, s, d)).expect("builds");
        assert_eq!(failed(&v), Some(Property::F3), "{call} from {s} to {d}");
    }
}

/// Bad parameters in a rule file are exit 2 with one line naming the file,
/// line and column; the exhaustive test above covers the library path.
#[test]
fn bad_parameters_exit_2_with_one_line() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-catalogue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (i, call) in [
        "ppermute(perm=[5,5])",
        "ppermute(perm=[0,0])",
        "convert(dim=0)",
    ]
    .iter()
    .enumerate()
    {
        let (s, d) = if call.starts_with("convert") {
            ("V", "R")
        } else {
            ("V", "V")
        };
        let f = dir.join(format!("bad{i}.toml"));
        std::fs::write(&f, rule_text(call, None, s, d)).expect("write");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"))
            .args(["check", f.to_str().expect("utf-8 path")])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{call}: {err}");
        assert_eq!(common::error_lines(&err), 1, "{call}: {err}");
        assert!(err.contains("bad") && err.contains(":3:"), "{call}: {err}");
    }
}

/// JAX's own spellings (SPEC.md §10.1): `all_gather(axis=0)` names a tensor
/// dim, `perm` may be (source, destination) pairs, `pcast(to=...)` and
/// `pbroadcast` are casts, `all_to_all(tiled=True)` and `tiled=False`; each
/// builds the same collective as the catalogue's spelling (pairs: one that
/// moves the same data on a group of their size), and what is not in the
/// catalogue (pmax, axis_index) is refused by name.
#[test]
fn jax_spellings_build_the_same_collectives() {
    use spmd_interp::catalogue::collective;
    use spmd_semantics::State::*;
    let axes = vec!["x".to_string()];
    let same = |a: &str, b: &str, src, dst| {
        let x = collective(a, &[src], &[dst], &axes).unwrap_or_else(|e| panic!("{a}: {e}"));
        let y = collective(b, &[src], &[dst], &axes).unwrap_or_else(|e| panic!("{b}: {e}"));
        assert_eq!(x.kind, y.kind, "{a} vs {b}");
    };
    same(
        "all_gather(axis=1, tiled=True)",
        "all_gather(dim=1)",
        Varying,
        Reduced,
    );
    same(
        "all_gather(axis='x', tiled=True)",
        "all_gather(dim=0)",
        Varying,
        Reduced,
    );
    same(
        "all_to_all(split_axis=1, concat_axis=0, tiled=True)",
        "all_to_all(split=1, concat=0)",
        Varying,
        Varying,
    );
    same(
        "all_to_all(split_axis=1, concat_axis=0, tiled=False)",
        "all_to_all(split=1, concat=0, stack)",
        Varying,
        Varying,
    );
    // Pairs leave the group open (members past the largest named send
    // nothing), so they are compared by what they do on a group of 2.
    let moves = |text: &str| {
        let c = collective(text, &[Varying], &[Varying], &axes).unwrap();
        let m = Mesh::line(2);
        let t = |v: i64| spmd_check::semantics::Tensor::new(vec![1], vec![Q::int(v)]);
        let x = spmd_check::semantics::PerRank {
            tensors: vec![t(1), t(2)],
        };
        c.forward(&m, &x).tensors
    };
    for (pairs, list) in [
        ("ppermute(perm=[(0, 1), (1, 0)])", "ppermute(perm=[1, 0])"),
        ("ppermute(perm=[(0, 1)])", "ppermute(perm=[1, _])"),
    ] {
        assert_eq!(moves(pairs), moves(list), "{pairs} vs {list}");
    }
    same("pcast(to='varying')", "pvary", Invariant, Varying);
    same("pbroadcast", "pvary", Invariant, Varying);
    // Twins: a pcast whose `to` contradicts the destination, and what the
    // catalogue does not have.
    assert!(collective("pcast(to='reduced')", &[Invariant], &[Varying], &axes).is_err());
    for (text, want) in [
        ("pmax", "not linear"),
        ("axis_index", "no operand"),
        ("ppermute(perm=[(0, 1), (0, 1)])", "two destinations"),
        ("ppermute(perm=[(0, 1), (2, 1)])", "injective"),
        ("ppermute(perm=[(0, -1)])", "negative"),
    ] {
        let e = collective(text, &[Varying], &[Varying], &axes).unwrap_err();
        assert!(e.contains(want), "{text}: {e}");
    }
}

/// Issue 25: JAX's partial permutation (pairs naming some members; the
/// others send nothing and receive zeros) and its untiled all_to_all, each
/// with the transpose JAX's rule gives (the pairs reversed; split and
/// concat swapped), are sound under the oracle; their twins are refuted
/// with the property named, and a permutation naming a member no mesh
/// group has is bad input.
#[test]
fn partial_ppermute_and_untiled_all_to_all_are_checked() {
    let four = "mesh = { x = 4 }\n";
    let on = |fw: &str, bw: &str, mesh: &str| {
        verdict(&format!("{}{mesh}", rule_text(fw, Some(bw), "V", "V")))
            .unwrap_or_else(|e| panic!("{fw} / {bw}: {e}"))
            .1
    };
    for mesh in [four, ""] {
        let v = on("ppermute(perm=[(0, 1)])", "ppermute(perm=[(1, 0)])", mesh);
        assert!(v.is_sound(), "{mesh}: {}", v.name());
    }
    let v = on(
        "ppermute(perm=[(0, 2), (3, 1)])",
        "ppermute(perm=[(2, 0), (1, 3)])",
        four,
    );
    assert!(v.is_sound(), "{}", v.name());
    // Twins: the forward's own pairs, and the inverse of a full
    // permutation that extends it (cotangent reaches ranks JAX zeroes).
    for bw in [
        "ppermute(perm=[(0, 1)])",
        "ppermute(perm=[(1, 0), (0, 1), (2, 2), (3, 3)])",
    ] {
        let v = on("ppermute(perm=[(0, 1)])", bw, four);
        assert_eq!(failed(&v), Some(Property::B3), "{bw}: {}", v.name());
    }
    let e = build_rule(&format!(
        "{}{four}",
        rule_text("ppermute(perm=[(0, 5)])", None, "V", "V")
    ))
    .err()
    .unwrap_or_default();
    assert!(e.contains("names member 5"), "{e}");
    for (s, c) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let fw = format!("all_to_all(split_axis={s}, concat_axis={c}, tiled=False)");
        let bw = format!("all_to_all(split_axis={c}, concat_axis={s}, tiled=False)");
        let v = on(&fw, &bw, "");
        assert!(v.is_sound(), "{fw}: {}", v.name());
    }
    // Twins: split and concat not swapped (the wrong shape on the smallest
    // case: B1), and the right call then divided by n (B3).
    let v = on(
        "all_to_all(split=0, concat=1, stack)",
        "all_to_all(split=0, concat=1, stack)",
        "",
    );
    assert_eq!(failed(&v), Some(Property::B1), "{}", v.name());
    let v = on(
        "all_to_all(split=0, concat=0, stack)",
        "all_to_all(split=0, concat=0, stack) |> divide_by_group_size",
        "",
    );
    assert_eq!(failed(&v), Some(Property::B3), "{}", v.name());
}
