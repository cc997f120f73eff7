//! Small straight-line program skeletons (SPEC.md §17), enumerated
//! exhaustively and in a fixed order, valid by construction: every argument
//! is an earlier value, every program input is used, and every step's value
//! reaches the output. A skeleton says which op each step runs and on which
//! values, but not the types: a system's typing function fills those in
//! (the root package's `generated` module), and a collective step is a slot
//! the system's collective table fills.

use proptest::prelude::*;
use spmd_semantics::{State, ALL_STATES};

/// The local ops a step may run, one or more per op class. All polynomial,
/// so that a sound check is a proof (SPEC.md §8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocalOp {
    /// `-a` (linear).
    Neg,
    /// `2 * a` (a constant factor).
    Scale,
    /// `sum(a, 0)` (a reduction over tensor dim 0).
    Sum,
    /// `a * a` (nonlinear elementwise).
    Square,
    /// `a + b` (linear in both jointly).
    Add,
    /// `a * b` (multilinear, elementwise).
    Mul,
    /// `matmul(a, b)` (multilinear, 2-D).
    Matmul,
}

impl LocalOp {
    /// Every op, simplest first (unary before binary).
    pub const ALL: [LocalOp; 7] = [
        LocalOp::Neg,
        LocalOp::Scale,
        LocalOp::Sum,
        LocalOp::Square,
        LocalOp::Add,
        LocalOp::Mul,
        LocalOp::Matmul,
    ];
    pub fn arity(self) -> usize {
        match self {
            LocalOp::Neg | LocalOp::Scale | LocalOp::Sum | LocalOp::Square => 1,
            LocalOp::Add | LocalOp::Mul | LocalOp::Matmul => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            LocalOp::Neg => "neg",
            LocalOp::Scale => "scale",
            LocalOp::Sum => "sum",
            LocalOp::Square => "square",
            LocalOp::Add => "add",
            LocalOp::Mul => "mul",
            LocalOp::Matmul => "matmul",
        }
    }
    /// The expression over the argument names.
    pub fn expr(self, args: &[&str]) -> String {
        match self {
            LocalOp::Neg => format!("-{}", args[0]),
            LocalOp::Scale => format!("2 * {}", args[0]),
            LocalOp::Sum => format!("sum({}, 0)", args[0]),
            LocalOp::Square => format!("{0} * {0}", args[0]),
            LocalOp::Add => format!("{} + {}", args[0], args[1]),
            LocalOp::Mul => format!("{} * {}", args[0], args[1]),
            LocalOp::Matmul => format!("matmul({}, {})", args[0], args[1]),
        }
    }
}

/// One step of a skeleton: value numbers as in `interp::Program` (inputs
/// 0..k, step j defines value k + j).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SlotStep {
    Local {
        op: LocalOp,
        args: Vec<usize>,
    },
    /// A collective from the system's table, chosen by the typing.
    Collective {
        arg: usize,
    },
}

impl SlotStep {
    pub fn args(&self) -> Vec<usize> {
        match self {
            SlotStep::Local { args, .. } => args.clone(),
            SlotStep::Collective { arg } => vec![*arg],
        }
    }
}

/// A program's shape: how many inputs, and its steps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Skeleton {
    pub inputs: usize,
    pub steps: Vec<SlotStep>,
}

/// A skeleton with a state for each input (one mesh axis).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub skeleton: Skeleton,
    pub states: Vec<State>,
}

/// The step choices over values `0..n`, in order: unary ops on each value,
/// binary ops on each pair `i <= j` (a value used twice included), then a
/// collective slot on each value.
fn step_choices(n: usize) -> Vec<SlotStep> {
    let mut out = Vec::new();
    for op in LocalOp::ALL {
        if op.arity() == 1 {
            for a in 0..n {
                out.push(SlotStep::Local { op, args: vec![a] });
            }
        } else {
            for j in 0..n {
                for i in 0..=j {
                    out.push(SlotStep::Local {
                        op,
                        args: vec![i, j],
                    });
                }
            }
        }
    }
    for a in 0..n {
        out.push(SlotStep::Collective { arg: a });
    }
    out
}

/// Whether every input and every step's value but the last is used.
fn all_used(s: &Skeleton) -> bool {
    let n = s.inputs + s.steps.len();
    let mut used = vec![false; n];
    for st in &s.steps {
        for a in st.args() {
            used[a] = true;
        }
    }
    used[..n - 1].iter().all(|&u| u)
}

/// Every skeleton of 1 to `depth` steps on 1 or 2 inputs, fewest steps
/// first, then fewest inputs, then step choices in `step_choices` order.
pub fn skeletons(depth: usize) -> Vec<Skeleton> {
    let mut out = Vec::new();
    for len in 1..=depth {
        for inputs in 1..=2 {
            let mut acc = Vec::new();
            extend(inputs, len, &mut acc, &mut out);
        }
    }
    out
}

fn extend(inputs: usize, len: usize, acc: &mut Vec<SlotStep>, out: &mut Vec<Skeleton>) {
    if acc.len() == len {
        let s = Skeleton {
            inputs,
            steps: acc.clone(),
        };
        if all_used(&s) {
            out.push(s);
        }
        return;
    }
    let n = inputs + acc.len();
    for st in step_choices(n) {
        // Prune early: a value that can no longer be used makes the skeleton
        // invalid (steps left can use at most 2 values each, the last step
        // must use the value before it).
        acc.push(st);
        let left = len - acc.len();
        let unused = {
            let total = inputs + acc.len();
            let mut used = vec![false; total];
            for s in acc.iter() {
                for a in s.args() {
                    used[a] = true;
                }
            }
            used[..total - 1].iter().filter(|&&u| !u).count()
        };
        if left == 0 || unused <= 2 * left {
            extend(inputs, len, acc, out);
        }
        acc.pop();
    }
}

/// Every skeleton with every assignment of states to its inputs, in the
/// order of `skeletons`, then states in `ALL_STATES` order.
pub fn candidates(depth: usize) -> Vec<Candidate> {
    let mut out = Vec::new();
    for s in skeletons(depth) {
        let k = s.inputs;
        for code in 0..4usize.pow(k as u32) {
            let states: Vec<State> = (0..k)
                .map(|i| ALL_STATES[(code / 4usize.pow((k - 1 - i) as u32)) % 4])
                .collect();
            out.push(Candidate {
                skeleton: s.clone(),
                states,
            });
        }
    }
    out
}

/// Random skeletons beyond the exhaustive depth (SPEC.md §17.5): one or two
/// inputs with states, and 1 to `max_steps` raw steps, each an op choice
/// (an index into `LocalOp::ALL`, or one past it for a collective slot) and
/// two argument picks (taken modulo the number of values before the step). `from_raw` turns them into a valid candidate, so no
/// draw is rejected, and proptest's shrinking (fewer steps first, then
/// smaller choices and picks) stays within valid programs.
pub fn candidate_strategy(max_steps: usize) -> impl Strategy<Value = Candidate> {
    // The steps come first so that proptest shrinks them first: the fewest
    // steps, then the fewest inputs and the earliest states.
    (
        prop::collection::vec(
            (0..=LocalOp::ALL.len(), any::<u16>(), any::<u16>()),
            1..=max_steps.max(1),
        ),
        1usize..=2,
        prop::collection::vec(prop::sample::select(ALL_STATES.to_vec()), 2),
    )
        .prop_map(|(raw, k, states)| from_raw(k, &states, &raw))
}

/// A candidate from raw steps: step j picks its arguments among the
/// `k + j` values before it (a binary op's in order), then every step and
/// input that does not reach the last step is dropped and the rest
/// renumbered. What remains uses every input and every value but the
/// last, as `skeletons` requires.
pub fn from_raw(k: usize, states: &[State], raw: &[(usize, u16, u16)]) -> Candidate {
    let mut steps = Vec::with_capacity(raw.len());
    for (j, (choice, a, b)) in raw.iter().enumerate() {
        let n = k + j;
        let (a, b) = (usize::from(*a) % n, usize::from(*b) % n);
        steps.push(match LocalOp::ALL.get(*choice) {
            None => SlotStep::Collective { arg: a },
            Some(&op) if op.arity() == 1 => SlotStep::Local { op, args: vec![a] },
            Some(&op) => SlotStep::Local {
                op,
                args: vec![a.min(b), a.max(b)],
            },
        });
    }
    prune(k, states, &steps)
}

/// Keep only the steps and inputs that reach the last step, renumbered.
fn prune(k: usize, states: &[State], steps: &[SlotStep]) -> Candidate {
    let total = k + steps.len();
    let mut live = vec![false; total];
    live[total - 1] = true;
    for j in (0..steps.len()).rev() {
        if live[k + j] {
            for a in steps[j].args() {
                live[a] = true;
            }
        }
    }
    let mut new_index = vec![usize::MAX; total];
    let mut next = 0;
    for (v, &l) in live.iter().enumerate() {
        if l {
            new_index[v] = next;
            next += 1;
        }
    }
    let inputs = (0..k).filter(|&i| live[i]).count();
    let kept: Vec<SlotStep> = steps
        .iter()
        .enumerate()
        .filter(|(j, _)| live[k + j])
        .map(|(_, st)| match st {
            SlotStep::Local { op, args } => SlotStep::Local {
                op: *op,
                args: args.iter().map(|&a| new_index[a]).collect(),
            },
            SlotStep::Collective { arg } => SlotStep::Collective {
                arg: new_index[*arg],
            },
        })
        .collect();
    Candidate {
        skeleton: Skeleton {
            inputs,
            steps: kept,
        },
        states: (0..k).filter(|&i| live[i]).map(|i| states[i]).collect(),
    }
}

/// Candidates one simplification smaller than `c`, valid by construction
/// (SPEC.md §17.5): a step other than the last removed, its uses reading
/// one of its arguments instead; or, with two inputs, one input read as
/// the other. Shrinking tries them after proptest's own, whose order can
/// stop at a local minimum.
pub fn smaller(c: &Candidate) -> Vec<Candidate> {
    let k = c.skeleton.inputs;
    let steps = &c.skeleton.steps;
    let mut out = Vec::new();
    // Value `v` read as `by`, with value `gone` (if any) removed.
    let remap = |steps: &[SlotStep], by: usize, from: usize, gone: Option<usize>| {
        let f = |a: usize| {
            let a = if a == from { by } else { a };
            match gone {
                Some(g) if a > g => a - 1,
                _ => a,
            }
        };
        steps
            .iter()
            .map(|st| match st {
                SlotStep::Local { op, args } => {
                    let mut a: Vec<usize> = args.iter().map(|&x| f(x)).collect();
                    a.sort_unstable();
                    SlotStep::Local { op: *op, args: a }
                }
                SlotStep::Collective { arg } => SlotStep::Collective { arg: f(*arg) },
            })
            .collect::<Vec<_>>()
    };
    for j in 0..steps.len().saturating_sub(1) {
        let mut args = steps[j].args();
        args.dedup();
        for r in args {
            let mut rest = steps.clone();
            rest.remove(j);
            let rest = remap(&rest, r, k + j, Some(k + j));
            out.push(prune(k, &c.states, &rest));
        }
    }
    if k == 2 {
        // Input 1 read as input 0, or input 0 as input 1.
        let s1 = remap(steps, 0, 1, Some(1));
        out.push(prune(1, &c.states[..1], &s1));
        let s0 = remap(steps, 1, 0, None);
        let s0 = remap(&s0, 0, usize::MAX, Some(0));
        out.push(prune(1, &c.states[1..], &s0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest! {
        /// Valid by construction: every random candidate is a skeleton
        /// `skeletons` could list (bar its depth), with a state per input.
        #[test]
        fn random_candidates_are_valid(c in candidate_strategy(6)) {
            let s = &c.skeleton;
            prop_assert!(!s.steps.is_empty() && s.steps.len() <= 6);
            prop_assert!(s.inputs >= 1 && s.inputs <= 2);
            prop_assert_eq!(c.states.len(), s.inputs);
            prop_assert!(all_used(s), "{:?}", s);
            for (j, st) in s.steps.iter().enumerate() {
                prop_assert!(st.args().iter().all(|&a| a < s.inputs + j));
            }
        }
    }

    /// Every simplification is valid and has fewer steps or inputs.
    #[test]
    fn simplifications_are_valid_and_smaller() {
        for c in candidates(3) {
            for d in smaller(&c) {
                let (s, t) = (&d.skeleton, &c.skeleton);
                assert!(all_used(s), "{c:?} -> {d:?}");
                assert_eq!(d.states.len(), s.inputs);
                assert!(s.steps.len() + s.inputs < t.steps.len() + t.inputs);
            }
        }
        // t1 = -x, t2 = x * t1 becomes x * x.
        let c = Candidate {
            skeleton: Skeleton {
                inputs: 1,
                steps: vec![
                    SlotStep::Local {
                        op: LocalOp::Neg,
                        args: vec![0],
                    },
                    SlotStep::Local {
                        op: LocalOp::Mul,
                        args: vec![0, 1],
                    },
                ],
            },
            states: vec![State::Partial],
        };
        assert!(smaller(&c).iter().any(|d| d.skeleton.steps
            == vec![SlotStep::Local {
                op: LocalOp::Mul,
                args: vec![0, 0]
            }]));
    }

    /// Negative twin of the pruning: a raw program whose first step is dead
    /// loses it, and an unused input is dropped.
    #[test]
    fn dead_steps_and_unused_inputs_are_dropped() {
        // t1 = -x (dead), t2 = 2 * y.
        let raw = [(0, 0, 0), (1, 1, 1)];
        let c = from_raw(2, &[State::Varying, State::Partial], &raw);
        assert_eq!(c.skeleton.inputs, 1);
        assert_eq!(c.states, vec![State::Partial]);
        assert_eq!(
            c.skeleton.steps,
            vec![SlotStep::Local {
                op: LocalOp::Scale,
                args: vec![0]
            }]
        );
    }

    #[test]
    fn every_skeleton_is_valid_and_unique() {
        for depth in 1..=3 {
            let all = skeletons(depth);
            let set: std::collections::HashSet<_> = all.iter().collect();
            assert_eq!(set.len(), all.len());
            for s in &all {
                assert!(!s.steps.is_empty() && s.steps.len() <= depth);
                assert!(all_used(s), "{s:?}");
                for (j, st) in s.steps.iter().enumerate() {
                    assert!(st.args().iter().all(|&a| a < s.inputs + j));
                }
            }
            // Fewest steps first.
            assert!(all.windows(2).all(|w| w[0].steps.len() <= w[1].steps.len()));
        }
        // One step on one input: 4 unary ops, 3 binary ops on (x, x), one slot.
        let one: Vec<_> = skeletons(1).into_iter().filter(|s| s.inputs == 1).collect();
        assert_eq!(one.len(), 8);
    }

    #[test]
    fn fan_out_and_fan_in_occur() {
        let all = skeletons(2);
        // A value used twice by one step, and by two steps.
        assert!(all.iter().any(|s| s.steps.iter().any(
            |st| matches!(st, SlotStep::Local { args, .. } if args.len() == 2 && args[0] == args[1])
        )));
        assert!(all.iter().any(|s| s.steps.len() == 2
            && s.steps[1].args().contains(&0)
            && s.steps[0].args().contains(&0)));
        let c = candidates(1);
        assert_eq!(c.len(), 8 * 4 + 3 * 16);
    }
}
