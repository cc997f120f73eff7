//! The names of the properties a typed operation must have (SPEC.md §4):
//! what a verdict, a table's expectation or a report refers to. The oracle
//! decides them; this module only names them.

use serde::Serialize;
use std::fmt;

/// The properties of SPEC.md §4, in the order they are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Property {
    F1,
    F2,
    F3,
    B1,
    B2,
    B3,
    J1,
    T1,
    V1,
}

impl Property {
    /// Name and SPEC.md section, e.g. `F2 well-defined (SPEC.md §4.3)`.
    pub fn title(self) -> &'static str {
        match self {
            Property::F1 => "F1 closure (SPEC.md §4.2)",
            Property::F2 => "F2 well-defined (SPEC.md §4.3)",
            Property::F3 => "F3 spec (SPEC.md §4.4)",
            Property::B1 => "B1 backward closure (SPEC.md §4.5)",
            Property::B2 => "B2 backward well-defined (SPEC.md §4.6)",
            Property::B3 => "B3 gradient (SPEC.md §4.7)",
            Property::J1 => "J1 tangent (SPEC.md §4.8)",
            Property::T1 => "T1 involution (SPEC.md §4.9)",
            Property::V1 => "V1 batching (SPEC.md §24.2)",
        }
    }
    pub fn code(self) -> &'static str {
        match self {
            Property::F1 => "F1",
            Property::F2 => "F2",
            Property::F3 => "F3",
            Property::B1 => "B1",
            Property::B2 => "B2",
            Property::B3 => "B3",
            Property::J1 => "J1",
            Property::T1 => "T1",
            Property::V1 => "V1",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}
