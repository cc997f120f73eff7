//! Verdicts: what a run over a scope concludes about a typed op (SPEC.md §7.1).

use crate::check::{Outcome, Violation};

/// Counts of instance outcomes over a run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Instances where every property held and B3 was decided.
    pub passed: u64,
    /// Instances where F1-B2 held but B3 was undetermined (at a kink).
    pub b3_undetermined: u64,
    /// Instances where some comparison was undecided (overlapping
    /// enclosures, SPEC.md §19): neither passed nor failed.
    pub undecided: u64,
    /// Instances outside the op's domain (division by zero).
    pub outside_domain: u64,
    /// Instances that violated a property, where a run goes on past its
    /// first violation (the pending-kind checks of SPEC.md §21, which find
    /// the smallest counterexample of every output at once); 0 elsewhere.
    pub failed: u64,
    /// Mesh × shape cases enumerated completely ...
    pub cases: u64,
    /// ... and how many of them were on a mesh of more than one rank.
    pub distributed_cases: u64,
    /// Mesh × shape cases left out for having more free scalars than the cap.
    pub cases_beyond_cap: u64,
    /// ... of which on a mesh of more than one rank.
    pub distributed_beyond_cap: u64,
    /// Cases over the caps decided whole by identity instead (SPEC.md
    /// §19.8); they count among `cases` (and `distributed_cases`), not
    /// among `cases_beyond_cap`, and add no instances.
    pub identity_cases: u64,
    /// Whether every enumerated case is proved: by a grid that makes it a
    /// proof (SPEC.md §8.3), or by an identity defined at every point
    /// (§19.8) ...
    pub proof_grid: bool,
    /// ... the latter for a transcendental op (its words then say so).
    pub by_identity: bool,
    /// Random cases run beyond the exhaustive scope (SPEC.md §8.4), all
    /// passed ...
    pub random: u64,
    /// ... and how many of them were on a mesh of more than one rank.
    pub random_distributed: u64,
    /// Why the run stopped before it was complete (interrupted, time limit).
    pub stopped: Option<String>,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            proof_grid: true,
            ..Tally::default()
        }
    }
    pub fn record(&mut self, o: &Outcome) {
        match o {
            Outcome::Pass(p) if p.undecided => self.undecided += 1,
            Outcome::Pass(p) if p.b3_undetermined => self.b3_undetermined += 1,
            Outcome::Pass(_) => self.passed += 1,
            Outcome::OutsideDomain => self.outside_domain += 1,
            Outcome::Fail(_) => {}
        }
    }
    /// Add the counts of another run over disjoint cases.
    pub fn absorb(&mut self, o: &Tally) {
        self.passed += o.passed;
        self.b3_undetermined += o.b3_undetermined;
        self.undecided += o.undecided;
        self.outside_domain += o.outside_domain;
        self.failed += o.failed;
        self.cases += o.cases;
        self.distributed_cases += o.distributed_cases;
        self.cases_beyond_cap += o.cases_beyond_cap;
        self.distributed_beyond_cap += o.distributed_beyond_cap;
        self.identity_cases += o.identity_cases;
        self.proof_grid &= o.proof_grid;
        self.by_identity |= o.by_identity;
        self.random += o.random;
        self.random_distributed += o.random_distributed;
        if self.stopped.is_none() {
            self.stopped.clone_from(&o.stopped);
        }
    }
    pub fn instances(&self) -> u64 {
        self.passed + self.b3_undetermined + self.undecided + self.outside_domain + self.failed
    }
}

/// The conclusion of a run. `C` is what a counterexample shows: a
/// `Violation` of the core's properties (SPEC.md §7), or the per-rank
/// values of a pending-kind check (`pending::Counterexample`, §21); every
/// check concludes through `conclude`.
#[derive(Clone, Debug)]
pub enum Verdict<C = Violation> {
    /// No instance violated anything. `proof`: the polynomial-grid argument
    /// (SPEC.md §8.3) makes this hold for all values on the cases checked.
    Sound { proof: bool, tally: Tally },
    /// The first violation in the order of SPEC.md §7.2.
    Unsound { violation: Box<C>, tally: Tally },
    /// No instance satisfied the premises (every case outside the domain, or
    /// no shape in scope fits the op), or every case that ran was on a
    /// one-rank mesh, where every state denotes the local value and nothing
    /// about distribution is tested.
    Vacuous { tally: Tally },
    /// No violation, but B3 was never decided (every point at a kink).
    Undetermined { tally: Tally },
}

impl<C> Verdict<C> {
    /// Conclude from a tally and the first violation, if any. Random cases
    /// can make a run bounded-sound when the exhaustive part tested nothing
    /// on more than one rank, never a proof; a stopped run without a
    /// violation is undetermined.
    pub fn conclude(tally: Tally, violation: Option<Box<C>>) -> Verdict<C> {
        let distributed = tally.distributed_cases > 0 || tally.random_distributed > 0;
        match violation {
            Some(v) => Verdict::Unsound {
                violation: v,
                tally,
            },
            None if tally.stopped.is_some() => Verdict::Undetermined { tally },
            None if tally.passed + tally.identity_cases + tally.b3_undetermined + tally.random
                == 0
                && tally.undecided > 0 =>
            {
                Verdict::Undetermined { tally }
            }
            None if tally.passed + tally.identity_cases + tally.b3_undetermined + tally.random
                == 0 =>
            {
                Verdict::Vacuous { tally }
            }
            None if (tally.cases > 0 || tally.random > 0) && !distributed => {
                Verdict::Vacuous { tally }
            }
            None if tally.passed + tally.identity_cases == 0 && tally.random == 0 => {
                Verdict::Undetermined { tally }
            }
            None => {
                let proof = tally.proof_grid
                    && tally.b3_undetermined == 0
                    && tally.undecided == 0
                    && tally.cases > 0
                    && tally.distributed_cases > 0;
                Verdict::Sound { proof, tally }
            }
        }
    }
    /// Why an undetermined verdict is undetermined.
    pub fn undetermined_reason(&self) -> Option<String> {
        match self {
            Verdict::Undetermined { tally } => Some(match &tally.stopped {
                Some(why) => why.clone(),
                None if tally.b3_undetermined == 0 && tally.undecided > 0 => format!(
                    "no instance decided: on all {} the enclosures overlapped",
                    tally.undecided
                ),
                None if tally.undecided > 0 => format!(
                    "nothing decided: {} instances with overlapping enclosures, {} with B3 at a kink",
                    tally.undecided, tally.b3_undetermined
                ),
                None => "B3 never decided: every instance is at a kink".into(),
            }),
            _ => None,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Sound { .. } => "sound",
            Verdict::Unsound { .. } => "unsound",
            Verdict::Vacuous { .. } => "vacuous",
            Verdict::Undetermined { .. } => "undetermined",
        }
    }
    /// Why a vacuous verdict is vacuous, in a few words.
    pub fn vacuous_reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Vacuous { tally } if tally.cases == 0 && tally.cases_beyond_cap > 0 => {
                Some("every case is beyond the caps")
            }
            Verdict::Vacuous { tally } if tally.cases == 0 => Some("no shape in scope fits"),
            Verdict::Vacuous { tally } if tally.passed + tally.b3_undetermined == 0 => {
                Some("every instance is outside the domain")
            }
            Verdict::Vacuous { tally } if tally.distributed_beyond_cap > 0 => {
                Some("no multi-rank case within the caps")
            }
            Verdict::Vacuous { .. } => Some("no multi-rank shapes fit"),
            _ => None,
        }
    }
    pub fn is_sound(&self) -> bool {
        matches!(self, Verdict::Sound { .. })
    }
    pub fn proof(&self) -> bool {
        matches!(self, Verdict::Sound { proof: true, .. })
    }
    pub fn violation(&self) -> Option<&C> {
        match self {
            Verdict::Unsound { violation, .. } => Some(violation),
            _ => None,
        }
    }
    pub fn tally(&self) -> &Tally {
        match self {
            Verdict::Sound { tally, .. }
            | Verdict::Unsound { tally, .. }
            | Verdict::Vacuous { tally }
            | Verdict::Undetermined { tally } => tally,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Pass;

    fn tally(outcomes: &[Outcome]) -> Tally {
        let mut t = Tally::new();
        t.cases = 1;
        t.distributed_cases = 1;
        for o in outcomes {
            t.record(o);
        }
        t
    }

    fn undecided() -> Outcome {
        Outcome::Pass(Pass {
            undecided: true,
            ..Pass::default()
        })
    }

    /// An instance no comparison could decide is neither a pass nor a
    /// kink: alone it makes the verdict undetermined, with its own reason.
    #[test]
    fn undecided_instances_are_never_passes() {
        let v: Verdict = Verdict::conclude(tally(&[undecided(), undecided()]), None);
        assert_eq!(v.name(), "undetermined");
        let why = v.undetermined_reason().unwrap();
        assert!(why.contains("enclosures overlapped"), "{why}");
        assert!(!why.contains("kink"), "{why}");
        assert_eq!(v.tally().undecided, 2);
        assert_eq!(v.tally().passed, 0);
    }

    /// Beside decided passes, undecided instances keep the verdict from
    /// being a proof (the twin: the same passes alone are one).
    #[test]
    fn undecided_instances_forbid_a_proof() {
        let pass = Outcome::Pass(Pass::default());
        let with: Verdict = Verdict::conclude(tally(&[pass.clone(), undecided()]), None);
        assert_eq!(with.name(), "sound");
        assert!(!with.proof());
        let without: Verdict = Verdict::conclude(tally(&[pass]), None);
        assert!(without.proof());
    }

    /// A tally set field by field, from `Tally::new()` (a proof grid).
    fn t(set: impl FnOnce(&mut Tally)) -> Tally {
        let mut t = Tally::new();
        set(&mut t);
        t
    }

    /// What a run concludes: the verdict's name and whether it is a proof.
    fn concluded(t: Tally) -> (&'static str, bool) {
        let v: Verdict = Verdict::conclude(t, None);
        (v.name(), v.proof())
    }

    /// SPEC.md §7.1, branch by branch of `Verdict::conclude`, each beside
    /// the tally one count away that concludes differently. Every tally
    /// here is one a run can produce: an instance counted as passed,
    /// undetermined or undecided belongs to a counted case, and a
    /// distributed case is a case.
    #[test]
    fn conclude_follows_the_kinds_of_spec_7_1() {
        let exhaustive = |t: &mut Tally| {
            t.cases = 1;
            t.distributed_cases = 1;
            t.passed = 2;
        };
        let table: Vec<(&str, Tally, (&str, bool))> = vec![
            // Passes on a grid that decides polynomial identities, on more
            // than one rank: a proof ...
            ("proof", t(exhaustive), ("sound", true)),
            // ... but not off the proof grid,
            (
                "off the grid",
                t(|t| {
                    exhaustive(t);
                    t.proof_grid = false;
                }),
                ("sound", false),
            ),
            // nor beside an instance whose B3 was at a kink,
            (
                "a kink",
                t(|t| {
                    exhaustive(t);
                    t.passed = 1;
                    t.b3_undetermined = 1;
                }),
                ("sound", false),
            ),
            // nor beside an undecided one (and one of each),
            (
                "undecided",
                t(|t| {
                    exhaustive(t);
                    t.passed = 1;
                    t.undecided = 1;
                }),
                ("sound", false),
            ),
            (
                "a kink and undecided",
                t(|t| {
                    exhaustive(t);
                    t.passed = 1;
                    t.b3_undetermined = 1;
                    t.undecided = 1;
                }),
                ("sound", false),
            ),
            // nor when only random cases were distributed.
            (
                "one-rank cases, distributed random ones",
                t(|t| {
                    exhaustive(t);
                    t.distributed_cases = 0;
                    t.random = 2;
                    t.random_distributed = 2;
                }),
                ("sound", false),
            ),
            // Everything on one rank is vacuous, exhaustive or random.
            (
                "one rank",
                t(|t| {
                    exhaustive(t);
                    t.distributed_cases = 0;
                }),
                ("vacuous", false),
            ),
            (
                "random cases on one rank",
                t(|t| {
                    t.random = 2;
                }),
                ("vacuous", false),
            ),
            // Random cases alone, distributed: bounded-sound, never a proof.
            (
                "random cases only",
                t(|t| {
                    t.random = 3;
                    t.random_distributed = 2;
                }),
                ("sound", false),
            ),
            (
                "undecided instances and random cases",
                t(|t| {
                    t.cases = 1;
                    t.distributed_cases = 1;
                    t.undecided = 2;
                    t.random = 3;
                    t.random_distributed = 2;
                }),
                ("sound", false),
            ),
            // B3 never decided: undetermined, and random passes decide it.
            (
                "every instance at a kink",
                t(|t| {
                    exhaustive(t);
                    t.passed = 0;
                    t.b3_undetermined = 2;
                }),
                ("undetermined", false),
            ),
            (
                "kinks and random cases",
                t(|t| {
                    exhaustive(t);
                    t.passed = 0;
                    t.b3_undetermined = 2;
                    t.random = 1;
                    t.random_distributed = 1;
                }),
                ("sound", false),
            ),
            (
                "nothing decided",
                t(|t| {
                    exhaustive(t);
                    t.passed = 0;
                    t.undecided = 2;
                }),
                ("undetermined", false),
            ),
            // No instance in the domain, or no case at all: vacuous.
            (
                "outside the domain",
                t(|t| {
                    exhaustive(t);
                    t.passed = 0;
                    t.outside_domain = 3;
                }),
                ("vacuous", false),
            ),
            ("no case", Tally::new(), ("vacuous", false)),
            // A stopped run is undetermined, whatever passed before.
            (
                "stopped",
                t(|t| {
                    exhaustive(t);
                    t.stopped = Some("interrupted".into());
                }),
                ("undetermined", false),
            ),
        ];
        for (what, tally, want) in table {
            assert_eq!(concluded(tally), want, "{what}");
        }
        // A violation is unsound, even in a stopped run with passes.
        let v: Verdict<u8> = Verdict::conclude(
            t(|t| {
                exhaustive(t);
                t.stopped = Some("interrupted".into());
            }),
            Some(Box::new(7)),
        );
        assert_eq!((v.name(), v.violation()), ("unsound", Some(&7)));
        assert!(!v.is_sound() && !v.proof());
        assert_eq!(v.tally().passed, 2);
    }

    /// The reasons printed with a vacuous or undetermined verdict (SPEC.md
    /// §7.1), one per way of getting there.
    #[test]
    fn each_vacuous_and_undetermined_verdict_says_why() {
        let vacuous = |t: Tally| {
            let v: Verdict = Verdict::conclude(t, None);
            assert_eq!(v.name(), "vacuous");
            assert_eq!(v.undetermined_reason(), None);
            v.vacuous_reason().unwrap()
        };
        assert_eq!(vacuous(Tally::new()), "no shape in scope fits");
        assert_eq!(
            vacuous(t(|t| t.cases_beyond_cap = 2)),
            "every case is beyond the caps"
        );
        assert_eq!(
            vacuous(t(|t| {
                t.cases = 1;
                t.distributed_cases = 1;
                t.outside_domain = 4;
            })),
            "every instance is outside the domain"
        );
        // On one rank: every instance decided there is a pass or a kink.
        for (passed, kinks) in [(1, 0), (0, 1)] {
            let one_rank = |t: &mut Tally| {
                t.cases = 1;
                t.passed = passed;
                t.b3_undetermined = kinks;
            };
            assert_eq!(vacuous(t(one_rank)), "no multi-rank shapes fit");
            assert_eq!(
                vacuous(t(|t| {
                    one_rank(t);
                    t.cases_beyond_cap = 1;
                    t.distributed_beyond_cap = 1;
                })),
                "no multi-rank case within the caps"
            );
        }
        let undetermined = |t: Tally| {
            let v: Verdict = Verdict::conclude(t, None);
            assert_eq!(v.name(), "undetermined");
            assert_eq!(v.vacuous_reason(), None);
            v.undetermined_reason().unwrap()
        };
        let case = |t: &mut Tally| {
            t.cases = 1;
            t.distributed_cases = 1;
        };
        assert_eq!(
            undetermined(t(|t| {
                case(t);
                t.b3_undetermined = 3;
            })),
            "B3 never decided: every instance is at a kink"
        );
        assert_eq!(
            undetermined(t(|t| {
                case(t);
                t.undecided = 2;
            })),
            "no instance decided: on all 2 the enclosures overlapped"
        );
        assert_eq!(
            undetermined(t(|t| {
                case(t);
                t.undecided = 2;
                t.b3_undetermined = 3;
            })),
            "nothing decided: 2 instances with overlapping enclosures, 3 with B3 at a kink"
        );
        assert_eq!(
            undetermined(t(|t| {
                case(t);
                t.passed = 5;
                t.stopped = Some("time limit".into());
            })),
            "time limit"
        );
        // A sound verdict has neither reason.
        let sound: Verdict = Verdict::conclude(
            t(|t| {
                case(t);
                t.passed = 1;
            }),
            None,
        );
        assert_eq!(sound.vacuous_reason(), None);
        assert_eq!(sound.undetermined_reason(), None);
        assert!(sound.is_sound() && sound.violation().is_none());
    }

    /// Each outcome counts once, in its own field, and `instances` is
    /// their sum; a failure counts nowhere in `record` (a run stops at it).
    #[test]
    fn record_counts_each_outcome_in_its_field() {
        let kink = Outcome::Pass(Pass {
            b3_undetermined: true,
            ..Pass::default()
        });
        let mut t = Tally::new();
        assert!(t.proof_grid);
        let outcomes = [
            (Outcome::Pass(Pass::default()), 3),
            (kink, 5),
            (undecided(), 7),
            (Outcome::OutsideDomain, 11),
        ];
        for (o, k) in &outcomes {
            for _ in 0..*k {
                t.record(o);
            }
        }
        let got = (t.passed, t.b3_undetermined, t.undecided, t.outside_domain);
        assert_eq!(got, (3, 5, 7, 11));
        t.failed = 13;
        assert_eq!(t.instances(), 3 + 5 + 7 + 11 + 13);
    }

    /// Absorbing a run over disjoint cases adds every count, keeps a proof
    /// grid only if both were, and keeps the first reason for stopping.
    #[test]
    fn absorb_adds_every_count() {
        // Distinct primes, so a sum is never a product or a difference.
        let numbered = |base: u64| {
            let mut t = Tally::new();
            let fields = [
                &mut t.passed,
                &mut t.b3_undetermined,
                &mut t.undecided,
                &mut t.outside_domain,
                &mut t.failed,
                &mut t.cases,
                &mut t.distributed_cases,
                &mut t.cases_beyond_cap,
                &mut t.distributed_beyond_cap,
                &mut t.random,
                &mut t.random_distributed,
            ];
            for (k, f) in fields.into_iter().enumerate() {
                *f = base + k as u64;
            }
            t
        };
        let counts = |t: &Tally| {
            vec![
                t.passed,
                t.b3_undetermined,
                t.undecided,
                t.outside_domain,
                t.failed,
                t.cases,
                t.distributed_cases,
                t.cases_beyond_cap,
                t.distributed_beyond_cap,
                t.random,
                t.random_distributed,
            ]
        };
        let (a, b) = (numbered(2), numbered(30));
        let mut ab = a.clone();
        ab.absorb(&b);
        let want: Vec<u64> = counts(&a)
            .iter()
            .zip(counts(&b))
            .map(|(x, y)| x + y)
            .collect();
        assert_eq!(counts(&ab), want);
        assert_eq!(ab.instances(), a.instances() + b.instances());
        assert!(ab.proof_grid);
        assert_eq!(ab.stopped, None);
        // A run off the proof grid makes the sum off it, either way round.
        let off = t(|t| t.proof_grid = false);
        let mut x = a.clone();
        x.absorb(&off);
        assert!(!x.proof_grid);
        let mut y = off.clone();
        y.absorb(&a);
        assert!(!y.proof_grid);
        // The first reason to stop is kept; a later one fills an empty one.
        let stopped = |why: &str| t(|t| t.stopped = Some(why.into()));
        let mut first = stopped("interrupted");
        first.absorb(&stopped("time limit"));
        assert_eq!(first.stopped.as_deref(), Some("interrupted"));
        let mut none = Tally::new();
        none.absorb(&stopped("time limit"));
        assert_eq!(none.stopped.as_deref(), Some("time limit"));
        let mut kept = stopped("interrupted");
        kept.absorb(&Tally::new());
        assert_eq!(kept.stopped.as_deref(), Some("interrupted"));
    }
}
