//! SPEC.md §17: generated programs, typed by each system and checked end to
//! end. Every count is computed; the negative twin is a typing function
//! that accepts P * P -> P, which must make a generated program unsound
//! with that typing blamed.

use spmd_check::dialects::{spmd_types, OpClass, Outcome, System, SYSTEMS};
use spmd_check::generated::{build_spec, generate, run, slot_rows, Report, Typing};
use spmd_check::generators::programs::{candidates, skeletons};
use spmd_check::generators::Scope;
use spmd_check::semantics::State;

fn consistent(r: &Report) {
    assert_eq!(r.generated, r.accepted + r.rejected, "{}", r.system);
    assert_eq!(r.accepted, r.checked + r.not_checked.len(), "{}", r.system);
    assert_eq!(
        r.checked,
        r.sound + r.unsound + r.vacuous + r.other,
        "{}",
        r.system
    );
    assert_eq!(
        r.unsound,
        r.findings.iter().map(|f| f.count).sum::<usize>(),
        "{}",
        r.system
    );
    for f in &r.findings {
        assert!(!f.counterexample.is_empty());
        assert!(f.toml.contains("[[rule.step]]"), "{}", f.toml);
    }
}

/// The blames of each system's findings at depth 1, 2 and 3 in the
/// default scope (the same at every depth).
fn pinned(system: &str) -> &'static [&'static str] {
    match system {
        "jax" => &[
            "the typing of matmul on (R, R) -> I",
            "the typing of matmul on (I, R) -> I",
            "the typing of matmul on (R, I) -> I",
        ],
        "ltensor" => &[
            "the typing of add on (I, R) -> I",
            "the typing of add on (R, I) -> I",
            "the typing of mul on (I, R) -> I",
            "the typing of mul on (R, I) -> I",
            "the typing of matmul on (I, R) -> I",
            "the typing of matmul on (R, I) -> I",
        ],
        "nabla" => &[
            "the typing of add on (I, V) -> V",
            "the typing of add on (V, I) -> V",
            "the typing of mul on (I, V) -> V",
            "the typing of mul on (I, P) -> P",
            "the typing of mul on (V, I) -> V",
            "the typing of mul on (P, I) -> P",
            "the typing of matmul on (I, P) -> P",
            "the typing of matmul on (P, I) -> P",
        ],
        _ => &[],
    }
}

/// Depth 1 for every system in the default scope: the counts add up, and
/// every program a finding prints is a rule file that builds again.
#[test]
fn every_system_at_depth_1_in_the_default_scope() {
    for sys in &SYSTEMS {
        let t = std::time::Instant::now();
        let r = run(sys, 1, &Scope::default());
        consistent(&r);
        assert!(r.generated >= candidates(1).len(), "{}", sys.name);
        for f in &r.findings {
            spmd_check::rules::Rule::from_toml_str(&f.toml)
                .unwrap_or_else(|e| panic!("{}: {e}\n{}", sys.name, f.toml));
        }
        // The findings, pinned (SPEC.md §17.3): each is one typing rule,
        // and depths 2 and 3 find no other blame (measured; see §17.3).
        let mut blames: Vec<&str> = r
            .findings
            .iter()
            .map(|f| f.blame.text.split_once(": ").map_or("", |x| x.1))
            .collect();
        blames.sort_unstable();
        let mut want: Vec<&str> = pinned(sys.name).to_vec();
        want.sort_unstable();
        assert_eq!(blames, want, "{}", sys.name);
        eprintln!(
            "{} depth 1: generated {}, accepted {}, checked {}, sound {}, unsound {}, vacuous {} in {:?}",
            sys.name, r.generated, r.accepted, r.checked, r.sound, r.unsound, r.vacuous, t.elapsed()
        );
    }
}

/// Depth 2 for every system: typing only (checking takes minutes; see
/// SPEC.md §17 for timings). Every accepted program builds as a rule, and a
/// collective slot only ever gets a row of the system's own table.
#[test]
fn every_system_types_depth_2() {
    assert!(skeletons(2).len() > skeletons(1).len());
    for sys in &SYSTEMS {
        let items = generate(sys, 2);
        let rows = slot_rows(sys.name);
        let mut accepted = 0;
        for i in &items {
            if let Typing::Accepted(t) = &i.typing {
                accepted += 1;
                build_spec(&t.spec, &Scope::default())
                    .unwrap_or_else(|e| panic!("{}: {e}", sys.name));
                for st in &t.spec.step {
                    if st.expr.is_none() && !rows.is_empty() {
                        assert!(st.backward.is_some());
                    }
                }
            }
        }
        assert!(items.len() >= candidates(2).len());
        assert!(accepted > 0, "{} accepts nothing", sys.name);
        // Systems without collective rows reject every collective slot: a
        // collective step is one of their inserted casts (LTensor's and
        // Nabla's pvary and all_reduce; DTensor's redistribute moves and
        // grad-placement hook, spelled by dialects/src/dtensor.rs).
        if rows.is_empty() {
            let dtensor_casts: Vec<String> = {
                use spmd_check::semantics::State::*;
                let mut v = Vec::new();
                for name in spmd_check::dialects::dtensor::CASTS {
                    for a in [Invariant, Varying, Partial, Reduced] {
                        for b in [Invariant, Varying, Partial, Reduced] {
                            if let Some(f) =
                                spmd_check::dialects::dtensor::cast_as_catalogue(name, a, b)
                            {
                                v.push(spmd_check::generated::fill(f));
                            }
                        }
                    }
                }
                v
            };
            assert!(items.iter().all(|i| match &i.typing {
                Typing::Accepted(t) => t.spec.step.iter().all(|s| s.expr.is_some()
                    || s.forward.as_deref().is_some_and(|f| f == "pvary"
                        || f.starts_with("all_reduce")
                        || (sys.name == "dtensor" && dtensor_casts.iter().any(|c| c == f)))),
                Typing::Rejected(_) => true,
            }));
        }
    }
}

/// spmd_types' typing, except that P * P -> P.
fn wrong_typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    if op == OpClass::Mul && inputs.iter().all(|t| t == &[State::Partial]) {
        return Outcome::infers(vec![State::Partial]);
    }
    spmd_types::typing(op, inputs)
}

const WRONG: System = System {
    name: "spmd_types",
    dialect: spmd_check::semantics::Dialect::SpmdTypes,
    seeds: "003 (twin)",
    typing: wrong_typing,
    cast: spmd_check::dialects::spmd_types::cast,
    collective: spmd_check::dialects::spmd_types::collective,
};

#[test]
fn a_wrong_typing_makes_a_program_unsound_and_is_blamed() {
    let scope = Scope::default();
    let real = run(&spmd_types::SYSTEM, 1, &scope);
    let twin = run(&WRONG, 1, &scope);
    consistent(&real);
    consistent(&twin);
    let blamed = |r: &Report| {
        r.findings
            .iter()
            .any(|f| f.blame.text.contains("the typing of mul on (P, P) -> P"))
    };
    assert!(!blamed(&real));
    assert!(blamed(&twin), "{}", twin.text());
    assert!(twin.unsound > real.unsound);
    // mul(x, x) and mul(x, y) on P are now accepted.
    assert_eq!(twin.accepted, real.accepted + 2);
}

/// SPEC.md §17.3, across systems: `run_many` checks each distinct program
/// text once for all the systems and gives each system the report `run`
/// gives it alone. The twin types P * P as P: run together with the real
/// system (the same name, most programs shared), its unsound programs must
/// not pick up the real system's sound verdicts, nor the other way round.
#[test]
fn shared_checks_across_systems_give_each_system_its_own_report() {
    use spmd_check::generated::run_many;
    let scope = Scope::default();
    let systems: Vec<&System> = vec![&spmd_types::SYSTEM, &WRONG, &SYSTEMS[4]];
    let shared = run_many(&systems, 1, &scope);
    for (sys, got) in systems.iter().zip(&shared) {
        let alone = run(sys, 1, &scope);
        assert_eq!(got.json(), alone.json(), "{}", sys.name);
    }
    assert!(
        shared[1].unsound > shared[0].unsound,
        "{}",
        shared[1].text()
    );
    assert!(shared[1]
        .findings
        .iter()
        .any(|f| f.blame.text.contains("the typing of mul on (P, P) -> P")));
}

/// Depth 2, checked end to end, for one system without collectives, on
/// meshes of at most two ranks (the default caps kept).
#[test]
fn ltensor_at_depth_2_is_checked_end_to_end() {
    let mut scope = Scope::default();
    scope.meshes.retain(|m| m.axes.iter().all(|a| a.size <= 2));
    let t = std::time::Instant::now();
    let r = run(&spmd_check::dialects::ltensor::SYSTEM, 2, &scope);
    consistent(&r);
    assert!(r.checked > 0 && r.sound > 0);
    eprintln!(
        "ltensor depth 2 (small): {} checked in {:?}",
        r.checked,
        t.elapsed()
    );
}

/// SPEC.md §17.3: programs equal up to swapping the inputs' names or a sum's
/// or product's arguments share one check; a matmul's arguments do not
/// commute, so swapping its inputs' types gives another program (the
/// negative twin of the equivalence).
#[test]
fn equivalent_programs_share_a_key_and_others_do_not() {
    use spmd_check::generated::canonical_key;
    use spmd_check::rules::{parse_file, RuleSpec};
    let one = |expr: &str, a: &str, b: &str| -> RuleSpec {
        let text = format!(
            "[[rule]]\nname = \"p\"\nnames = [\"x\", \"y\"]\ninputs = [\"{a}\", \"{b}\"]\noutput = \"V\"\n\n[[rule.step]]\nname = \"t1\"\nexpr = \"{expr}\"\noutput = \"V\"\n"
        );
        parse_file("<test>", &text).unwrap().remove(0)
    };
    let k = |e: &str, a: &str, b: &str| canonical_key(&one(e, a, b));
    assert_eq!(k("x * y", "V", "R"), k("x * y", "R", "V"));
    assert_eq!(k("x + y", "V", "P"), k("y + x", "V", "P"));
    assert_eq!(k("matmul(x, y)", "V", "R"), k("matmul(y, x)", "R", "V"));
    assert_ne!(k("matmul(x, y)", "V", "R"), k("matmul(x, y)", "R", "V"));
    assert_ne!(k("x * y", "V", "R"), k("x * y", "V", "P"));
}

/// `conform`'s line per system says what `run` counted.
#[test]
fn the_summary_line_says_the_counts() {
    let r = run(&spmd_types::SYSTEM, 1, &Scope::default());
    let line = spmd_check::generated::summary_line(&r);
    assert!(line.starts_with("spmd_types"), "{line}");
    assert!(
        line.contains(&format!("{} generated", r.generated)),
        "{line}"
    );
    assert!(line.contains(&format!("{} unsound", r.unsound)), "{line}");
    let j = spmd_check::generated::summary_json(&r);
    assert_eq!(j["checked"], r.checked);
}

/// SPEC.md §17.5: random programs, valid by construction. The real
/// spmd_types typing yields no unsound program under this seed, and its
/// counts add up; the twin that types P * P as P is caught, and the failure
/// is shrunk to a single step, blamed on that typing, and printed as a rule
/// file that builds again.
#[test]
fn random_programs_find_and_shrink_a_wrong_typing() {
    use spmd_check::generated::random;
    let scope = Scope::default();
    let real = random(&spmd_types::SYSTEM, 64, 3, 4, &scope);
    let checked = real.sound + real.unsound + real.vacuous + real.other;
    assert_eq!(real.accepted, checked);
    if real.minimal.is_none() {
        assert_eq!(real.ran, 64);
    }
    let mut found = None;
    for seed in 0..20 {
        let r = random(&WRONG, 256, seed, 4, &scope);
        if r.minimal.is_some() {
            found = Some(r);
            break;
        }
    }
    let twin = found.expect("the P * P -> P twin is found within 20 seeds");
    let f = twin.minimal.as_ref().unwrap();
    assert!(
        f.blame.text.contains("the typing of mul on (P, P) -> P"),
        "{}",
        twin.text()
    );
    let rule = spmd_check::rules::Rule::from_toml_str(&f.toml).expect("builds again");
    let spmd_check::interp::Op::Program(p) = &rule.op.op else {
        panic!("not a program");
    };
    assert_eq!(p.steps.len(), 1, "shrunk to one step:\n{}", f.toml);
    assert!(twin.report.as_deref().unwrap().contains("rank 0"));
}
