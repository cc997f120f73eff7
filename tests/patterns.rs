//! SPEC.md §17.4: the named patterns of examples/patterns/ are checked end
//! to end by the oracle, each with a wrong twin that must fail a named
//! property, costed forward and backward, and retyped by every system. The
//! verdicts are the oracle's; the only expectation written here is which
//! property each twin fails.

use spmd_check::dialects::{system, OpClass, Outcome, System, SYSTEMS};
use spmd_check::generators::Scope;
use spmd_check::oracle::Property;
use spmd_check::patterns::{run, run_pattern, SystemOutcome, PATTERNS};
use spmd_check::semantics::State;

/// The property each wrong twin must fail, by pattern file.
const TWINS: &[(&str, Property)] = &[
    ("examples/patterns/fsdp.toml", Property::B3),
    ("examples/patterns/zero.toml", Property::B2),
    ("examples/patterns/ddp.toml", Property::B1),
    ("examples/patterns/megatron.toml", Property::B3),
    ("examples/patterns/sequence_parallel.toml", Property::B3),
    ("examples/patterns/moe.toml", Property::B1),
    ("examples/patterns/fsdp_tp.toml", Property::B3),
];

#[test]
fn every_pattern_is_sound_its_twin_fails_and_each_system_is_heard() {
    let systems: Vec<&'static System> = SYSTEMS.iter().collect();
    let res = run(&systems, &Scope::default()).expect("the patterns build");
    assert_eq!(res.len(), PATTERNS.len());
    assert_eq!(res.len(), TWINS.len());
    for r in &res {
        let want = TWINS.iter().find(|(f, _)| *f == r.file).expect("listed").1;
        assert!(
            r.pattern.verdict.is_sound(),
            "{}: {}",
            r.pattern.name,
            r.pattern.words
        );
        // Sound on more than one rank, not just on the trivial mesh.
        let t = r.pattern.verdict.tally();
        assert!(t.distributed_cases + t.random_distributed > 0, "{}", r.file);
        assert_eq!(
            r.twin_property(),
            Some(want),
            "{}: {}",
            r.twin.name,
            r.twin.words
        );
        assert!(r.as_expected());
        // Traffic is computed at the reference shapes, forward and backward.
        let (f, b) = r.pattern.traffic.clone().expect("pattern traffic");
        assert!(r.twin.traffic.is_ok(), "{}", r.file);
        assert!(
            !(f.is_zero() && b.is_zero()),
            "{}: no traffic at all",
            r.file
        );
        // Every system answers: it types the pattern (and the oracle checks
        // its program) or says which step it cannot type.
        assert_eq!(r.systems.len(), SYSTEMS.len());
        let mut typed = 0;
        for s in &r.systems {
            match &s.outcome {
                SystemOutcome::CannotType(why) => assert!(why.contains("step `"), "{why}"),
                SystemOutcome::Typed { verdict, blame, .. } => {
                    typed += 1;
                    assert_eq!(verdict.violation().is_some(), blame.is_some());
                    assert!(
                        verdict.is_sound() || verdict.violation().is_some(),
                        "{} under {}: neither sound nor unsound",
                        r.file,
                        s.system
                    );
                }
            }
        }
        assert!(typed > 0, "{}: no system types it", r.file);
    }
}

/// spmd_types' typing with matmul (V, R) -> P, as if the product of a
/// batch shard and a gathered weight were a partial sum.
fn wrong_typing(c: OpClass, ins: &[Vec<State>]) -> Outcome {
    if c == OpClass::Matmul && ins == [vec![State::Varying], vec![State::Reduced]] {
        return Outcome::infers(vec![State::Partial]);
    }
    (system("spmd_types").unwrap().typing)(c, ins)
}

/// Negative twin of the retyping: a system whose typing of matmul is wrong
/// types FSDP into an unsound program, and the blame names that typing.
#[test]
fn a_wrong_typing_makes_a_pattern_unsound_and_is_blamed() {
    let sys: &'static System = Box::leak(Box::new(System {
        name: "spmd_types",
        typing: wrong_typing,
        ..*system("spmd_types").unwrap()
    }));
    let fsdp = PATTERNS
        .iter()
        .find(|p| p.file.ends_with("/fsdp.toml"))
        .unwrap();
    let r = run_pattern(fsdp, &[sys], &Scope::default()).unwrap();
    let SystemOutcome::Typed { verdict, blame, .. } = &r.systems[0].outcome else {
        panic!(
            "the wrong typing still types FSDP: {:?}",
            r.systems[0].outcome
        );
    };
    assert!(verdict.violation().is_some(), "{}", verdict.name());
    let blame = blame.as_deref().unwrap();
    assert!(
        blame.contains("step `y`") && blame.contains("matmul"),
        "{blame}"
    );
    // The real spmd_types types the same pattern soundly.
    let real = run_pattern(fsdp, &[system("spmd_types").unwrap()], &Scope::default()).unwrap();
    assert!(
        matches!(&real.systems[0].outcome, SystemOutcome::Typed { verdict, .. } if verdict.is_sound())
    );
}
