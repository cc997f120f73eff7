//! SPEC.md §17.3 and §18.3 for generated programs: the canonical form
//! (renaming, input order, a sum's or product's arguments, independent
//! steps reordered) merges only programs the oracle cannot tell apart, with
//! twins that must stay apart; depth 3 is typed and classified; and a run
//! split with --partition merges into exactly the single run's JSON.

use spmd_check::dialects::{jax, ltensor, nabla};
use spmd_check::generated::ASSEMBLE;
use spmd_check::generated::{
    canonical_form, canonical_key, classify, merged_json, part_json, run, run_with, RunOptions,
};
use spmd_check::generators::Scope;
use spmd_check::partition::{merge, Partition};
use spmd_check::rules::{parse_file, RuleSpec};

/// A two-input program from its steps, each `name = expr : type`.
fn program(a: &str, b: &str, steps: &[(&str, &str, &str)]) -> RuleSpec {
    let mut text = format!(
        "[[rule]]\nname = \"p\"\nnames = [\"x\", \"y\"]\ninputs = [\"{a}\", \"{b}\"]\noutput = \"{}\"\n",
        steps.last().unwrap().2
    );
    for (n, e, t) in steps {
        text.push_str(&format!(
            "\n[[rule.step]]\nname = \"{n}\"\nexpr = \"{e}\"\noutput = \"{t}\"\n"
        ));
    }
    parse_file("<test>", &text).unwrap().remove(0)
}

fn small_scope() -> Scope {
    let mut scope = Scope::default();
    scope.meshes.retain(|m| m.axes.iter().all(|a| a.size <= 2));
    scope
}

fn verdict_of(spec: &RuleSpec, scope: &Scope) -> (String, Option<String>) {
    let rule = spmd_check::generated::build_spec(spec, scope).unwrap();
    let cfg = spmd_check::check::CheckConfig {
        scope: scope.clone(),
        cases: 0,
        seed: 0,
    };
    let v = spmd_check::check::check_rule(&rule, &cfg, &[], &|_| {}).verdict;
    (
        v.name().to_string(),
        v.violation().map(|x| format!("{:?}", x.property)),
    )
}

/// Two independent steps in either order, with their values renamed, are
/// one class; the oracle agrees (both unsound, same property: an I + R -> I
/// sum double-counts the R cotangent). The twins stay apart: a matmul whose
/// arguments' producers are swapped computes another function, and one
/// negation used twice is not two negations.
#[test]
fn reordered_independent_steps_share_a_class_and_twins_do_not() {
    let one = program(
        "I",
        "R",
        &[
            ("t1", "2 * x", "I"),
            ("t2", "-y", "R"),
            ("t3", "t1 + t2", "I"),
        ],
    );
    let two = program(
        "I",
        "R",
        &[
            ("t1", "-y", "R"),
            ("t2", "2 * x", "I"),
            ("t3", "t1 + t2", "I"),
        ],
    );
    assert_eq!(canonical_key(&one), canonical_key(&two));
    // Without reordering they are two classes.
    assert_ne!(canonical_form(&one, false), canonical_form(&two, false));
    let scope = small_scope();
    let (v1, v2) = (verdict_of(&one, &scope), verdict_of(&two, &scope));
    assert_eq!(v1.0, "unsound");
    assert_eq!(v1, v2);
    // The same with the inputs swapped as well.
    let three = program(
        "R",
        "I",
        &[
            ("t1", "-x", "R"),
            ("t2", "2 * y", "I"),
            ("t3", "t2 + t1", "I"),
        ],
    );
    assert_eq!(canonical_key(&one), canonical_key(&three));

    // Twin: matmul does not commute, so swapping which step feeds which
    // argument is another program.
    let m1 = program(
        "V",
        "R",
        &[
            ("t1", "-x", "V"),
            ("t2", "2 * y", "R"),
            ("t3", "matmul(t1, t2)", "V"),
        ],
    );
    let m2 = program(
        "V",
        "R",
        &[
            ("t1", "2 * y", "R"),
            ("t2", "-x", "V"),
            ("t3", "matmul(t1, t2)", "V"),
        ],
    );
    assert_ne!(canonical_key(&m1), canonical_key(&m2));
    // Twin: a shared value against two copies of its computation.
    let shared = program(
        "V",
        "V",
        &[
            ("t1", "-x", "V"),
            ("t2", "t1 * t1", "V"),
            ("t3", "t2 + y", "V"),
        ],
    );
    let copies = program(
        "V",
        "V",
        &[
            ("t1", "-x", "V"),
            ("t2", "-x", "V"),
            ("t3", "t1 * t2", "V"),
            ("t4", "t3 + y", "V"),
        ],
    );
    assert_ne!(canonical_key(&shared), canonical_key(&copies));
    // Twin: the same steps on other types are another program.
    let other = program(
        "I",
        "P",
        &[
            ("t1", "2 * x", "I"),
            ("t2", "-y", "P"),
            ("t3", "t1 + t2", "P"),
        ],
    );
    assert_ne!(canonical_key(&one), canonical_key(&other));
}

/// Depth 3 is typed and classified for every system; the counts add up,
/// every class's first member is its earliest, and reordering independent
/// steps saves checks there.
#[test]
fn depth_3_is_typed_and_classified() {
    let t = classify(&nabla::SYSTEM, 3);
    let rejected: usize = t.reasons.values().sum();
    assert_eq!(t.generated, t.accepted.len() + rejected);
    assert_eq!(
        t.classes.iter().map(Vec::len).sum::<usize>(),
        t.accepted.len()
    );
    for c in &t.classes {
        assert!(c.windows(2).all(|w| w[0] < w[1]));
    }
    let without: std::collections::HashSet<String> = t
        .accepted
        .iter()
        .map(|(_, p)| canonical_form(&p.spec, false))
        .collect();
    eprintln!(
        "nabla depth 3: generated {}, accepted {}, classes {} ({} without reordering)",
        t.generated,
        t.accepted.len(),
        t.classes.len(),
        without.len()
    );
    assert!(t.classes.len() < without.len());
    assert!(without.len() < t.accepted.len());
}

/// A run split into 3 parts merges into exactly the single run's JSON, and
/// `merge` refuses a missing part.
#[test]
fn partitioned_programs_merge_into_the_single_run() {
    let scope = small_scope();
    for sys in [&ltensor::SYSTEM, &jax::SYSTEM] {
        let single = run(sys, 1, &scope);
        assert!(!single.findings.is_empty(), "{}", sys.name);
        let parts: Vec<(String, serde_json::Value)> = (1..=3)
            .map(|k| {
                let p = Partition { k, n: 3 };
                let r = run_with(
                    sys,
                    1,
                    &scope,
                    &RunOptions {
                        partition: Some(p),
                        progress: None,
                    },
                );
                (format!("part{k}"), part_json(&r, p, &scope))
            })
            .collect();
        let merged = merge(
            &[parts[2].clone(), parts[0].clone(), parts[1].clone()],
            ASSEMBLE,
        )
        .unwrap();
        let doc = spmd_check::words::document(
            "programs",
            spmd_check::generated::exhaustive_body(&single),
        );
        assert_eq!(merged, doc, "{}", sys.name);
        assert!(merge(&parts[..2], ASSEMBLE).is_err());
        // The classes section alone, without the typing, is refused.
        let mut sections = serde_json::Map::new();
        sections.insert("classes".into(), serde_json::json!([]));
        assert!(merged_json(&sections).is_err());
    }
}
