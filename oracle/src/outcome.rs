//! What checking one instance concludes (SPEC.md §4, §7.2): a pass, the
//! op's domain left, or a violation with the values that show it; and which
//! properties a check decides. Shared by the finite-difference check
//! (`check`) and the exact-derivative one (`exact_deriv`).

use spmd_semantics::perrank::{self, denote, Denot};
use spmd_semantics::{Dialect, Mesh, PerRank, Type};

pub use spmd_semantics::Property;

/// A typed per-rank value as shown in a counterexample.
#[derive(Clone, Debug)]
pub struct Shown {
    pub label: String,
    /// Whether this is one of the instance's inputs (not an alternative,
    /// a cotangent or an output).
    pub input: bool,
    /// Whether this is an equivalent alternative to an input (F2, B2).
    pub alternative: bool,
    pub ty: Type,
    pub value: PerRank,
}

/// A property violated by one instance: the counterexample.
#[derive(Clone, Debug)]
pub struct Violation {
    pub property: Property,
    pub mesh: Mesh,
    /// What went wrong, in one sentence.
    pub what: String,
    /// The values involved (inputs, an equivalent alternative, cotangent, outputs).
    pub shown: Vec<Shown>,
    /// The value the property requires and the one produced, as text.
    pub expected: String,
    pub actual: String,
}

impl Violation {
    /// The inputs of the instance, labelled with the rule's variable names.
    pub fn inputs(&self) -> Vec<&Shown> {
        self.shown.iter().filter(|s| s.input).collect()
    }
    /// One line: property, mesh, inputs (and an equivalent alternative)
    /// by rank, expected and actual.
    pub fn one_line(&self) -> String {
        self.one_line_in(Dialect::Canonical)
    }
    /// `one_line` with types in a dialect's names.
    pub fn one_line_in(&self, d: Dialect) -> String {
        let ins: Vec<String> = self
            .shown
            .iter()
            .filter(|s| s.input || s.alternative)
            .map(|s| {
                let vals: Vec<String> = s.value.tensors.iter().map(|t| t.to_string()).collect();
                format!(
                    "{}:{}=({})",
                    s.label,
                    s.ty.display_in(&self.mesh, d),
                    vals.join(", ")
                )
            })
            .collect();
        let ins = if ins.is_empty() {
            String::new()
        } else {
            format!("{}; ", ins.join(" "))
        };
        format!(
            "{} on mesh {}: {}; {ins}expected {}, got {}",
            self.property.code(),
            self.mesh,
            self.what,
            self.expected,
            self.actual
        )
    }
    /// Several lines, per-rank data drawn as in the seeds.
    pub fn report(&self) -> String {
        self.report_in(Dialect::Canonical)
    }
    /// `report` with types in a dialect's names.
    pub fn report_in(&self, dialect: Dialect) -> String {
        let mut s = format!(
            "violates {} on mesh {}\n  {}\n",
            self.property.title(),
            self.mesh,
            self.what
        );
        for v in &self.shown {
            let d = denote(&self.mesh, &v.ty, &v.value);
            s.push_str(&format!(
                "  {} : {}   denotes {}\n",
                v.label,
                v.ty.display_in(&self.mesh, dialect),
                show_denot(&self.mesh, &v.ty, &d)
            ));
            for line in perrank::draw(&self.mesh, &v.ty, &v.value) {
                s.push_str(&format!("      {line}\n"));
            }
        }
        s.push_str(&format!(
            "  expected: {}\n  actual:   {}\n",
            self.expected, self.actual
        ));
        s
    }
}

/// A denotation as text: the single tensor when the type has no Varying axis,
/// else the family over the Varying coordinates.
pub fn show_denot(m: &Mesh, t: &Type, d: &Denot) -> String {
    let reps: Vec<usize> = (0..m.num_ranks())
        .filter(|&r| {
            let c = m.coords(r);
            t.states
                .iter()
                .enumerate()
                .all(|(a, s)| *s == spmd_semantics::State::Varying || c[a] == 0)
        })
        .collect();
    // A family that varies where the type does not (a spec value that the
    // type cannot represent) is shown rank by rank.
    let constant = (0..m.num_ranks()).all(|r| {
        let mut c = m.coords(r);
        for (a, s) in t.states.iter().enumerate() {
            if *s != spmd_semantics::State::Varying {
                c[a] = 0;
            }
        }
        d.family[r] == d.family[m.rank(&c)]
    });
    let reps: Vec<usize> = if constant {
        reps
    } else {
        (0..m.num_ranks()).collect()
    };
    if reps.len() == 1 {
        return d.family[reps[0]].to_string();
    }
    let parts: Vec<String> = reps.iter().map(|&r| d.family[r].to_string()).collect();
    format!("<{}>", parts.join(" | "))
}

/// A passing instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// B3 could not be decided here (the point is at a kink of a piecewise op).
    pub b3_undetermined: bool,
    /// Some comparison could be neither proved equal nor shown to differ
    /// (overlapping enclosures, SPEC.md §19): nothing about this instance
    /// was decided, and it counts apart from passes.
    pub undecided: bool,
}

/// The outcome of one instance.
#[derive(Clone, Debug)]
pub enum Outcome {
    Pass(Pass),
    /// The op is undefined here (division by zero): no premise holds.
    OutsideDomain,
    Fail(Box<Violation>),
}

/// Which properties to check (SPEC.md §7.2: the forward properties are
/// decided over the whole scope before the backward ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// F1, F2, F3 only.
    Forward,
    /// F1 and F3 only: the points of a case after its first, when every
    /// other property is the same at every point (SPEC.md §8.3).
    Values,
    /// F1-F3 and J1: for ops with no backward to check.
    Tangent,
    /// Every property.
    All,
    /// Every property, except that for each input whose bit is set (input
    /// i: bit i) the properties decided at other points are left out: F2
    /// along it, B1, B3 and the cotangent half of B2 for its cotangent, the
    /// primal half of B2 along it. For an op made of local
    /// partials they have one degree less in that input than the forward,
    /// and were decided where its value indices sum to less than its budget
    /// (SPEC.md §8.3).
    AllBut(u64),
    /// Every property, restricted to the items of one lane group: F2 and
    /// the primal half of B2 along its directions, B1-B3 at its unit
    /// cotangents, B3's columns at its coordinates; F1 and F3 whole. A
    /// point where only that group is nonzero reads the other groups'
    /// items as at the point 0, where they were checked (SPEC.md §8.5).
    /// A checker without lane groups checks everything.
    Lane(u32),
}

impl Phase {
    /// Whether this phase leaves out input i's properties (`AllBut`).
    pub fn skips(self, i: usize) -> bool {
        matches!(self, Phase::AllBut(m) if i < 64 && (m >> i) & 1 == 1)
    }
}

impl Phase {
    /// Everything that can be checked: every property with a backward, F1-F3
    /// and J1 without.
    pub fn full(has_backward: bool) -> Phase {
        if has_backward {
            Phase::All
        } else {
            Phase::Tangent
        }
    }
}
