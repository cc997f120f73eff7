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
    /// Whether every enumerated case used a grid that makes it a proof.
    pub proof_grid: bool,
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
        self.proof_grid &= o.proof_grid;
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
            None if tally.passed + tally.b3_undetermined + tally.random == 0
                && tally.undecided > 0 =>
            {
                Verdict::Undetermined { tally }
            }
            None if tally.passed + tally.b3_undetermined + tally.random == 0 => {
                Verdict::Vacuous { tally }
            }
            None if (tally.cases > 0 || tally.random > 0) && !distributed => {
                Verdict::Vacuous { tally }
            }
            None if tally.passed == 0 && tally.random == 0 => Verdict::Undetermined { tally },
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
}
