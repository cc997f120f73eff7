//! States, types, cotangent types and the dialect translation table
//! (SPEC.md §1 "States and dialects", §3 "Cotangents").

use crate::pending::{PartialKind, Place};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The state of a tensor along one mesh axis. Only these canonical names are
/// used inside the core crates; dialects translate at the edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum State {
    Invariant,
    Varying,
    Partial,
    Reduced,
}

pub const ALL_STATES: [State; 4] = [
    State::Invariant,
    State::Varying,
    State::Partial,
    State::Reduced,
];

impl State {
    /// SPEC.md §3: cot(I)=I, cot(V)=V, cot(P)=R, cot(R)=P.
    pub fn cot(self) -> State {
        match self {
            State::Invariant => State::Invariant,
            State::Varying => State::Varying,
            State::Partial => State::Reduced,
            State::Reduced => State::Partial,
        }
    }
    /// Canonical letter I, V, P or R.
    pub fn letter(self) -> char {
        match self {
            State::Invariant => 'I',
            State::Varying => 'V',
            State::Partial => 'P',
            State::Reduced => 'R',
        }
    }
    /// Every rank along the axis holds the same local tensor (SPEC.md §2.3).
    pub fn replicated(self) -> bool {
        match self {
            State::Invariant | State::Reduced => true,
            State::Varying | State::Partial => false,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

/// The systems whose state names are understood (SPEC.md §1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// Invariant, Varying, Partial, Reduced (and the letters I V P R).
    Canonical,
    /// PyTorch local/global SPMD types (seed 003): I, V, P, R, S(d). Its R
    /// ("Replicate") is the canonical Reduced.
    SpmdTypes,
    /// JAX sharding in types (seed 000): Invariant, Varying, Unreduced, Reduced.
    Jax,
    /// PyTorch DTensor (seed 001): Replicate(), Shard(d), Partial(), Reduced().
    /// Its Replicate() is the canonical Invariant.
    Dtensor,
    /// Nabla (seeds 002, 004): replicated, sharded, partial.
    Nabla,
}

pub const ALL_DIALECTS: [Dialect; 5] = [
    Dialect::Canonical,
    Dialect::SpmdTypes,
    Dialect::Jax,
    Dialect::Dtensor,
    Dialect::Nabla,
];

/// One row per canonical state: its name in each dialect, in the order of
/// `ALL_DIALECTS`. `None`: the dialect has no such state. This is the table of
/// SPEC.md §1.2 as data; parsing and printing both read it.
pub const DIALECT_TABLE: [(State, [Option<&str>; 5]); 4] = [
    (
        State::Invariant,
        [
            Some("Invariant"),
            Some("I"),
            Some("Invariant"),
            Some("Replicate()"),
            Some("replicated"),
        ],
    ),
    (
        State::Varying,
        [
            Some("Varying"),
            Some("V"),
            Some("Varying"),
            Some("Shard"),
            Some("sharded"),
        ],
    ),
    (
        State::Partial,
        [
            Some("Partial"),
            Some("P"),
            Some("Unreduced"),
            Some("Partial()"),
            Some("partial"),
        ],
    ),
    (
        State::Reduced,
        [
            Some("Reduced"),
            Some("R"),
            Some("Reduced"),
            Some("Reduced()"),
            None,
        ],
    ),
];

impl Dialect {
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Canonical => "canonical",
            Dialect::SpmdTypes => "spmd_types",
            Dialect::Jax => "jax",
            Dialect::Dtensor => "dtensor",
            Dialect::Nabla => "nabla",
        }
    }
    pub fn parse(s: &str) -> Result<Dialect, String> {
        ALL_DIALECTS
            .iter()
            .copied()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown dialect `{s}`{} (expected one of: canonical, spmd_types, jax, dtensor, nabla)",
                    crate::names::did_you_mean(s, ALL_DIALECTS.iter().map(|d| d.name()))
                )
            })
    }
    fn column(self) -> usize {
        ALL_DIALECTS
            .iter()
            .position(|&d| d == self)
            .expect("every dialect has a column")
    }
    /// The dialect's name for a state, if it has one.
    pub fn state_name(self, s: State) -> Option<&'static str> {
        DIALECT_TABLE
            .iter()
            .find(|(st, _)| *st == s)
            .and_then(|(_, names)| names[self.column()])
    }
    /// Parse one state name of this dialect. Returns the state and, for the
    /// sharded forms `S(d)` / `Shard(d)`, the tensor dim it shards.
    pub fn parse_state(self, text: &str) -> Result<(State, Option<usize>), String> {
        let t = text.trim();
        // Sharded forms with a dim: S(d) in spmd_types, Shard(d) in dtensor.
        let shard_prefix = match self {
            Dialect::SpmdTypes => Some("S("),
            Dialect::Dtensor => Some("Shard("),
            _ => None,
        };
        if let Some(p) = shard_prefix {
            if let Some(rest) = t.strip_prefix(p).and_then(|r| r.strip_suffix(')')) {
                let d = rest
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| format!("bad shard dim in `{t}`"))?;
                return Ok((State::Varying, Some(d)));
            }
        }
        for (s, names) in DIALECT_TABLE.iter() {
            if let Some(n) = names[self.column()] {
                // DTensor placements may be written with or without `()`.
                let bare = self == Dialect::Dtensor && n.strip_suffix("()") == Some(t);
                if n == t
                    || bare
                    || (self == Dialect::Canonical && t.len() == 1 && s.letter().to_string() == t)
                {
                    return Ok((*s, None));
                }
            }
        }
        let known: Vec<&str> = DIALECT_TABLE
            .iter()
            .filter_map(|(_, n)| n[self.column()])
            .collect();
        // A near name of this dialect, else this dialect's name of the state
        // whose long name is near (`Vary` in spmd_types: `V`).
        let near = crate::names::closest(t, known.iter().copied()).or_else(|| {
            let long = ["Invariant", "Varying", "Partial", "Reduced"];
            let k = long
                .iter()
                .position(|&l| crate::names::closest(t, long) == Some(l))?;
            self.state_name(ALL_STATES[k])
        });
        let mut msg = format!(
            "`{t}` is not a state of dialect {}{} (expected one of: {})",
            self.name(),
            near.map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_default(),
            known.join(", ")
        );
        // Point at the famous trap: the same word in another dialect.
        for d in ALL_DIALECTS {
            if d != self {
                if let Ok((s, _)) = d.parse_state_plain(t) {
                    msg.push_str(&format!("; in dialect {} it means {:?}", d.name(), s));
                    break;
                }
            }
        }
        Err(msg)
    }
    fn parse_state_plain(self, t: &str) -> Result<(State, Option<usize>), ()> {
        DIALECT_TABLE
            .iter()
            .find(|(_, names)| names[self.column()] == Some(t))
            .map(|(s, _)| (*s, None))
            .ok_or(())
    }
}

/// A type: one state per mesh axis, refined where known by the tensor dim
/// a Varying axis shards (its layout, SPEC.md §13) and by the reduction a
/// Partial axis owes (its pending kind, SPEC.md §21.1). A type without
/// layouts is a local SPMD type; one whose Partial axes all owe a sum is
/// what the core checks (§7); the other kinds are checked as §21 says.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Type {
    pub states: Vec<State>,
    /// `layout[a] = Some(d)`: axis `a` shards tensor dim `d` (only for Varying
    /// axes; used by global SPMD, ignored by local SPMD checks).
    pub layout: Vec<Option<usize>>,
    /// `kinds[a]`: the reduction Partial axis `a` owes; `Sum` on every other
    /// axis (so that equal types compare equal).
    pub kinds: Vec<PartialKind>,
}

impl Type {
    pub fn new(states: Vec<State>) -> Type {
        let n = states.len();
        Type::laid(states, vec![None; n])
    }
    /// A type with layouts and every Partial axis a pending sum.
    pub fn laid(states: Vec<State>, layout: Vec<Option<usize>>) -> Type {
        let n = states.len();
        Type {
            states,
            layout,
            kinds: vec![PartialKind::Sum; n],
        }
    }
    pub fn one(s: State) -> Type {
        Type::new(vec![s])
    }
    /// Sets the pending kind of Partial axis `a` (other axes keep `Sum`).
    pub fn set_kind(&mut self, a: usize, k: PartialKind) {
        if self.states.get(a) == Some(&State::Partial) {
            self.kinds[a] = k;
        }
    }
    /// `set_kind`, by value.
    pub fn with_kind(mut self, a: usize, k: PartialKind) -> Type {
        self.set_kind(a, k);
        self
    }
    /// The kind a Partial axis owes (`Sum` for every other axis).
    pub fn kind(&self, a: usize) -> PartialKind {
        self.kinds.get(a).copied().unwrap_or(PartialKind::Sum)
    }
    /// Whether some Partial axis owes a reduction other than a sum: then
    /// the type is checked by the pending-kind checks of SPEC.md §21.
    pub fn has_kinds(&self) -> bool {
        self.kinds.iter().any(|k| *k != PartialKind::Sum)
    }
    /// What axis `a` contributes to the global value (SPEC.md §21.1):
    /// Invariant and Reduced axes hold one value, a Partial axis owes its
    /// kind, a Varying axis with a layout is a shard of it. `None`: a
    /// Varying axis without a layout has no global value.
    pub fn place(&self, a: usize) -> Option<Place> {
        match (self.states[a], self.layout.get(a).copied().flatten()) {
            (State::Invariant | State::Reduced, _) => Some(Place::Inv),
            (State::Varying, Some(d)) => Some(Place::Shard(d)),
            (State::Varying, None) => None,
            (State::Partial, _) => Some(Place::Part(self.kind(a))),
        }
    }
    /// The one-axis type of a placement (Replicate is Invariant).
    pub fn of_place(p: Place) -> Type {
        match p {
            Place::Inv => Type::one(State::Invariant),
            Place::Part(k) => Type::one(State::Partial).with_kind(0, k),
            Place::Shard(d) => Type::laid(vec![State::Varying], vec![Some(d)]),
        }
    }
    /// SPEC.md §3: the cotangent type, axis by axis (a pending kind has no
    /// cotangent of its own: the cotangent's axes owe sums).
    pub fn cot(&self) -> Type {
        Type::laid(
            self.states.iter().map(|s| s.cot()).collect(),
            self.layout.clone(),
        )
    }
    /// Print with the letters of the canonical dialect: `V` or `{dp: V, tp: P}`;
    /// a Varying axis with a layout prints as `S(d)`.
    pub fn display(&self, m: &crate::mesh::Mesh) -> String {
        if self.states.len() == 1 {
            return self.axis_letter(0);
        }
        let parts: Vec<String> = (0..self.states.len())
            .zip(&m.axes)
            .map(|(i, a)| format!("{}: {}", a.name, self.axis_letter(i)))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }
    /// As `display`, in a dialect's own names (`Replicate()`, `Unreduced`,
    /// `Shard(0)`); canonical letters for the canonical dialect and for a
    /// state the dialect has no name for.
    pub fn display_in(&self, m: &crate::mesh::Mesh, d: Dialect) -> String {
        if d == Dialect::Canonical {
            return self.display(m);
        }
        let name = |i: usize| match (self.states[i], self.layout.get(i).copied().flatten()) {
            (State::Varying, Some(k)) if d == Dialect::Dtensor => format!("Shard({k})"),
            (State::Varying, Some(k)) => format!("S({k})"),
            (State::Partial, _) if self.kind(i) != PartialKind::Sum => match d {
                Dialect::Dtensor => self.kind(i).dtensor(),
                Dialect::Jax => format!("Unreduced({})", self.kind(i)),
                _ => format!("P({})", self.kind(i)),
            },
            (s, _) => d
                .state_name(s)
                .map_or_else(|| s.letter().to_string(), str::to_string),
        };
        if self.states.len() == 1 {
            return name(0);
        }
        let parts: Vec<String> = (0..self.states.len())
            .zip(&m.axes)
            .map(|(i, a)| format!("{}: {}", a.name, name(i)))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }
    /// The letter of axis `a`, or `S(d)` for a Varying axis sharding dim d,
    /// `P(k)` for a Partial axis owing a kind other than sum.
    pub fn axis_letter(&self, a: usize) -> String {
        match (self.states[a], self.layout.get(a).copied().flatten()) {
            (State::Varying, Some(d)) => format!("S({d})"),
            (State::Partial, _) if self.kind(a) != PartialKind::Sum => {
                format!("P({})", self.kind(a))
            }
            (s, _) => s.letter().to_string(),
        }
    }
    /// Whether any axis carries a layout: the type is read with global SPMD
    /// semantics (SPEC.md §13).
    pub fn is_global(&self) -> bool {
        self.layout.iter().any(Option::is_some)
    }
    /// The global shape of a value whose local shape is `local`: each dim
    /// times the sizes of the Varying axes sharding it. `None` when a layout
    /// names a dim the tensor lacks.
    pub fn global_shape(&self, m: &crate::mesh::Mesh, local: &[usize]) -> Option<Vec<usize>> {
        let mut g = local.to_vec();
        for (a, s) in self.states.iter().enumerate() {
            if let (State::Varying, Some(d)) = (s, self.layout.get(a).copied().flatten()) {
                *g.get_mut(d)? *= m.axes[a].size;
            }
        }
        Some(g)
    }
    /// A Varying axis without a layout, which a global type may not have.
    pub fn unlaid_varying_axis(&self) -> Option<usize> {
        (0..self.states.len()).find(|&a| {
            self.states[a] == State::Varying && self.layout.get(a).copied().flatten().is_none()
        })
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for a in 0..self.states.len() {
            write!(f, "{}", self.axis_letter(a))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cot_is_an_involution() {
        for s in ALL_STATES {
            assert_eq!(s.cot().cot(), s);
        }
    }

    #[test]
    fn replicate_means_different_states_in_different_dialects() {
        assert_eq!(
            Dialect::Dtensor.parse_state("Replicate()").unwrap().0,
            State::Invariant
        );
        assert_eq!(
            Dialect::SpmdTypes.parse_state("R").unwrap().0,
            State::Reduced
        );
        assert_eq!(
            Dialect::Jax.parse_state("Unreduced").unwrap().0,
            State::Partial
        );
        assert_eq!(
            Dialect::Dtensor.parse_state("Shard(1)").unwrap(),
            (State::Varying, Some(1))
        );
        assert_eq!(
            Dialect::Dtensor.parse_state("Replicate").unwrap().0,
            State::Invariant
        );
        assert_eq!(
            Dialect::Dtensor.parse_state("Reduced").unwrap().0,
            State::Reduced
        );
        assert_eq!(
            Dialect::SpmdTypes.parse_state("S(0)").unwrap(),
            (State::Varying, Some(0))
        );
        let e = Dialect::SpmdTypes.parse_state("Unreduced").unwrap_err();
        assert!(e.contains("dialect jax"), "{e}");
        assert!(Dialect::Nabla.parse_state("Reduced").is_err());
    }

    #[test]
    fn every_named_state_round_trips() {
        for d in ALL_DIALECTS {
            for s in ALL_STATES {
                if let Some(n) = d.state_name(s) {
                    let text = if n == "Shard" {
                        "Shard(0)".to_string()
                    } else {
                        n.to_string()
                    };
                    assert_eq!(d.parse_state(&text).unwrap().0, s, "{} {n}", d.name());
                }
            }
        }
    }
}
