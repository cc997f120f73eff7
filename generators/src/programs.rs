//! Small straight-line program skeletons (SPEC.md §17), enumerated
//! exhaustively and in a fixed order, valid by construction: every argument
//! is an earlier value, every program input is used, and every step's value
//! reaches the output. A skeleton says which op each step runs and on which
//! values, but not the types: a system's typing function fills those in
//! (the root package's `generated` module), and a collective step is a slot
//! the system's collective table fills.

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

#[cfg(test)]
mod tests {
    use super::*;

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
