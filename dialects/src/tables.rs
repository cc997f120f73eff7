//! The seeds' rule tables as data (SPEC.md §9.2, §9.4, §15.2).
//!
//! `tables/<system>.toml` holds one system's local-op typing rules
//! (`[[rule]]`, in the rule-file format of SPEC.md §11.1 plus the seed's
//! `claim`, the verdict this suite expects, `expect`, and the negative
//! `twin`) and its declared JVPs (`[[jvp]]`). The files are compiled into the
//! binary with `include_str!` and deserialized on first use into owned rows.

use serde::Deserialize;
use spmd_semantics::Dialect;
use spmd_semantics::Property;
use std::sync::OnceLock;

/// What a seed system says of a typing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Claim {
    /// A rule of the seed admits it.
    Allowed,
    /// The seed forbids it explicitly.
    Forbidden,
    /// No rule of the seed admits it (forbidden by omission).
    Unlisted,
}

/// A deliberately wrong variant of an allowed rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Twin {
    pub op: String,
    pub inputs: Vec<String>,
    pub output: String,
    pub fails: Property,
}

/// One typing rule of a seed system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedRule {
    pub id: String,
    /// `spmd_types`, `jax`, `dtensor`, `ltensor` or `nabla`: the file it is in.
    pub system: String,
    /// The dialect its state names are written in.
    pub dialect: Dialect,
    /// The seed's rule, briefly; where the row has a `real` note, followed
    /// by it (`...; real <library version>: ...`), so every report that
    /// shows the seed's rule shows what the real library does beside it.
    pub rule: String,
    /// What the real library does with this typing where it is not what the
    /// seed says (SPEC.md §15.2): the version and the recorded fixture case.
    /// The claim stays the seed's.
    pub real: Option<String>,
    pub op: String,
    pub inputs: Vec<String>,
    pub output: String,
    pub claim: Claim,
    /// `None`: the oracle must find it sound; else the property that fails.
    pub expect: Option<Property>,
    pub twin: Option<Twin>,
}

/// How a JVP row's op is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JvpOp {
    /// A local op: an expression of its inputs.
    Local(String),
    /// A collective from the catalogue.
    Collective(String),
}

/// A deliberately wrong JVP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WrongJvp {
    /// Another JVP in rule-file syntax.
    Text(String),
    /// The row's JVP followed by a second all_reduce of the already reduced
    /// tangent: the double count seed 004's guard exists to prevent. It
    /// cannot be written in rule-file syntax (the catalogue refuses an
    /// all_reduce that starts from R), so the checker builds it.
    ReduceAgain,
}

/// One forward-mode rule of a seed system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JvpRow {
    pub id: String,
    pub system: String,
    /// The seed's rule, briefly.
    pub rule: String,
    pub op: JvpOp,
    pub inputs: Vec<String>,
    pub output: String,
    pub jvp: String,
    /// `None`: sound.
    pub expect: Option<Property>,
    pub twin: WrongJvp,
}

/// One forward/backward pair of a system's collective table (SPEC.md §10.3):
/// a collective or cast from `src` to `dst` and the transpose the system
/// declares for it. `forward` and `backward` may hold the parameter slots
/// `{d}` (a dim), `{s}` and `{c}` (split and concat dims), which the checker
/// fills with every choice in scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectiveRow {
    pub id: String,
    pub system: String,
    /// The dialect its state names are written in (the system's own).
    pub dialect: Dialect,
    pub forward: String,
    pub src: String,
    pub dst: String,
    /// `None`: the system lists no transpose (a completeness gap).
    pub backward: Option<String>,
    /// `None`: the oracle must find it sound; else the property that fails.
    pub expect: Option<Property>,
}

/// The systems, in the order their tables are read.
pub const SYSTEMS: &[&str] = &["spmd_types", "jax", "dtensor", "ltensor", "nabla"];

/// Each system's table file, as compiled in.
pub const TABLES: &[(&str, &str)] = &[
    ("spmd_types", include_str!("../tables/spmd_types.toml")),
    ("jax", include_str!("../tables/jax.toml")),
    ("dtensor", include_str!("../tables/dtensor.toml")),
    ("ltensor", include_str!("../tables/ltensor.toml")),
    ("nabla", include_str!("../tables/nabla.toml")),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    rule: Vec<RawRule>,
    #[serde(default)]
    jvp: Vec<RawJvp>,
    #[serde(default)]
    collective: Vec<RawCollective>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCollective {
    name: String,
    forward: String,
    inputs: Vec<String>,
    output: String,
    backward: Option<String>,
    expect: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expr {
    expr: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTwin {
    op: Expr,
    inputs: Vec<String>,
    output: String,
    fails: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    dialect: Dialect,
    seed_rule: String,
    real: Option<String>,
    op: Expr,
    inputs: Vec<String>,
    output: String,
    claim: Claim,
    expect: String,
    twin: Option<RawTwin>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWrong {
    jvp: Option<String>,
    #[serde(default)]
    reduce_again: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJvp {
    name: String,
    seed_rule: String,
    op: Option<Expr>,
    forward: Option<String>,
    inputs: Vec<String>,
    output: String,
    jvp: String,
    expect: String,
    twin: RawWrong,
}

/// A property by its code (`F1` … `T1`).
pub fn property(code: &str) -> Result<Property, String> {
    use Property::*;
    Ok(match code {
        "F1" => F1,
        "F2" => F2,
        "F3" => F3,
        "B1" => B1,
        "B2" => B2,
        "B3" => B3,
        "J1" => J1,
        "T1" => T1,
        _ => return Err(format!("unknown property `{code}`")),
    })
}

/// `sound` or the code of the property expected to fail.
fn expect(text: &str) -> Result<Option<Property>, String> {
    if text == "sound" {
        Ok(None)
    } else {
        property(text).map(Some)
    }
}

/// One system's rows: local typing rules, JVPs, collective pairs.
pub type Table = (Vec<SeedRule>, Vec<JvpRow>, Vec<CollectiveRow>);

/// The dialect a system's table writes its states in: the system's own.
pub fn system_dialect(system: &str) -> Option<Dialect> {
    crate::system(system).ok().map(|s| s.dialect)
}

/// Parse one system's table file.
pub fn parse_table(system: &str, text: &str) -> Result<Table, String> {
    let f: File = toml::from_str(text).map_err(|e| format!("tables/{system}.toml: {e}"))?;
    let at = |name: &str, e: String| format!("tables/{system}.toml, `{name}`: {e}");
    let mut rules = Vec::new();
    for r in f.rule {
        let twin = match r.twin {
            Some(t) => Some(Twin {
                op: t.op.expr,
                inputs: t.inputs,
                output: t.output,
                fails: property(&t.fails).map_err(|e| at(&r.name, e))?,
            }),
            None => None,
        };
        rules.push(SeedRule {
            expect: expect(&r.expect).map_err(|e| at(&r.name, e))?,
            id: r.name,
            system: system.to_string(),
            dialect: r.dialect,
            rule: match &r.real {
                Some(real) => format!("{}; real {real}", r.seed_rule),
                None => r.seed_rule,
            },
            real: r.real,
            op: r.op.expr,
            inputs: r.inputs,
            output: r.output,
            claim: r.claim,
            twin,
        });
    }
    let mut jvps = Vec::new();
    for j in f.jvp {
        let op = match (j.op, j.forward) {
            (Some(e), None) => JvpOp::Local(e.expr),
            (None, Some(c)) => JvpOp::Collective(c),
            _ => return Err(at(&j.name, "give exactly one of `op` and `forward`".into())),
        };
        let twin = match (j.twin.jvp, j.twin.reduce_again) {
            (Some(t), false) => WrongJvp::Text(t),
            (None, true) => WrongJvp::ReduceAgain,
            _ => {
                return Err(at(
                    &j.name,
                    "a twin is either `jvp = ...` or `reduce_again = true`".into(),
                ))
            }
        };
        jvps.push(JvpRow {
            expect: expect(&j.expect).map_err(|e| at(&j.name, e))?,
            id: j.name,
            system: system.to_string(),
            rule: j.seed_rule,
            op,
            inputs: j.inputs,
            output: j.output,
            jvp: j.jvp,
            twin,
        });
    }
    let mut pairs = Vec::new();
    for c in f.collective {
        let [src] = <[String; 1]>::try_from(c.inputs)
            .map_err(|_| at(&c.name, "a collective takes one input".into()))?;
        pairs.push(CollectiveRow {
            expect: expect(&c.expect).map_err(|e| at(&c.name, e))?,
            dialect: system_dialect(system)
                .ok_or_else(|| at(&c.name, format!("unknown system `{system}`")))?,
            id: c.name,
            system: system.to_string(),
            forward: c.forward,
            src,
            dst: c.output,
            backward: c.backward,
        });
    }
    Ok((rules, jvps, pairs))
}

fn all() -> &'static Table {
    static ALL: OnceLock<Table> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut rules = Vec::new();
        let mut jvps = Vec::new();
        let mut pairs = Vec::new();
        for (system, text) in TABLES {
            // The tables are compiled in and checked by the tests: a parse
            // error here is a bug in this crate, not bad user input.
            let (r, j, c) = parse_table(system, text).expect("compiled-in seed table");
            rules.extend(r);
            jvps.extend(j);
            pairs.extend(c);
        }
        (rules, jvps, pairs)
    })
}

/// Every system's collective forward/backward pairs, system by system.
pub fn collective_rows() -> &'static [CollectiveRow] {
    &all().2
}

/// Every system's local-op typing rows, system by system.
pub fn seed_rules() -> &'static [SeedRule] {
    &all().0
}

/// Every system's declared JVP rows.
pub fn jvp_rows() -> &'static [JvpRow] {
    &all().1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_parses_and_names_are_unique() {
        let mut names: Vec<&str> = seed_rules().iter().map(|r| r.id.as_str()).collect();
        names.extend(jvp_rows().iter().map(|r| r.id.as_str()));
        names.extend(collective_rows().iter().map(|r| r.id.as_str()));
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate row names");
    }

    #[test]
    fn a_bad_property_is_an_error() {
        let t = "[[jvp]]\nname = \"a\"\nseed_rule = \"\"\nforward = \"psum\"\ninputs = [\"V\"]\noutput = \"I\"\njvp = \"psum\"\nexpect = \"F9\"\ntwin = { reduce_again = true }\n";
        assert!(parse_table("x", t).unwrap_err().contains("F9"));
    }

    #[test]
    fn a_collective_row_takes_one_input_and_a_known_property() {
        let two = "[[collective]]\nname = \"a\"\nforward = \"psum\"\ninputs = [\"V\", \"V\"]\noutput = \"I\"\nexpect = \"sound\"\n";
        assert!(parse_table("jax", two).unwrap_err().contains("one input"));
        let bad = two
            .replace("[\"V\", \"V\"]", "[\"V\"]")
            .replace("sound", "F7");
        assert!(parse_table("jax", &bad).unwrap_err().contains("F7"));
        let ok = bad.replace("F7", "B3");
        let (_, _, c) = parse_table("jax", &ok).unwrap();
        assert_eq!(c[0].expect, Some(Property::B3));
        assert_eq!(c[0].dialect, Dialect::Jax);
    }
}
