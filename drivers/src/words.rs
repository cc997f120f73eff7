//! Verdicts and a user's text in words and JSON, as every command puts
//! them: the leaf the commands share, depending on the oracle alone (the
//! reports of whole commands are `report`'s).

use serde_json::{json, Value};
use spmd_oracle::{Verdict, Violation};

pub use spmd_syntax::quoted_name;

/// A user's text as quoted in a one-line error: whole up to 80 characters,
/// else its first 60 and its length (the error's column still points into
/// the whole text).
pub fn excerpt(text: &str) -> String {
    let n = text.chars().count();
    if n <= 80 {
        return text.to_string();
    }
    let head: String = text.chars().take(60).collect();
    format!("{head}… ({n} characters)")
}

/// `sound (proof)`, `sound (bounded)`, `unsound F2`, `vacuous`, `undetermined`.
pub fn verdict_word(v: &Verdict) -> String {
    match v {
        Verdict::Sound { proof: true, tally } if tally.by_identity => {
            "sound (proof by identity)".into()
        }
        Verdict::Sound { proof: true, .. } => "sound (proof)".into(),
        Verdict::Sound { tally, .. } if tally.undecided > 0 => format!(
            "sound (bounded; {} of {} instances undecided)",
            tally.undecided,
            tally.instances()
        ),
        Verdict::Sound { .. } => "sound (bounded)".into(),
        Verdict::Unsound { violation, .. } => format!("unsound {}", violation.property.code()),
        Verdict::Vacuous { .. } => match v.vacuous_reason() {
            Some(r) => format!("vacuous ({r})"),
            None => "vacuous".into(),
        },
        Verdict::Undetermined { .. } => match v.undetermined_reason() {
            Some(r) => format!("undetermined ({r})"),
            None => "undetermined".into(),
        },
    }
}

/// A vacuous verdict's reason with the flag that widens the scope, where
/// one does: on a mesh the rule writes with one rank (`one_rank_mesh`)
/// nothing on more than one rank runs whatever the flags, and the hint
/// says so instead.
pub fn vacuous_hint(v: &Verdict, one_rank_mesh: bool) -> Option<String> {
    let r = v.vacuous_reason()?;
    let multi = matches!(
        r,
        "no multi-rank shapes fit" | "no multi-rank case within the caps"
    );
    if one_rank_mesh && multi {
        return Some(format!(
            "{r}; the rule's mesh has one rank, so no flag widens it: write a mesh with more ranks"
        ));
    }
    let flag = match r {
        "every case is beyond the caps" | "no multi-rank case within the caps" => {
            "; raise --max-points or --max-free"
        }
        "no shape in scope fits" | "no multi-rank shapes fit" => {
            "; try --mesh-dims, --max-dim or --max-rank"
        }
        _ => "",
    };
    Some(format!("{r}{flag}"))
}

/// The version of every `--json` document (SPEC.md §11.4): its top-level
/// `schema` field, and the `$id` of `schemas/spmd-check-1.schema.json`.
pub const SCHEMA: &str = "spmd-check/1";

/// A mesh as a JSON object, axis name to size, in the mesh's axis order
/// (which is part of its meaning, SPEC.md §1.2): `{"dp": 2, "tp": 2}`.
pub fn mesh_json(m: &spmd_semantics::Mesh) -> Value {
    Value::Object(
        m.axes
            .iter()
            .map(|a| (a.name.clone(), json!(a.size)))
            .collect(),
    )
}

/// A command's `--json` document: `schema` and `command` first, then the
/// fields of `body` (an object) in its order.
pub fn document(command: &str, body: Value) -> Value {
    let mut o = serde_json::Map::new();
    o.insert("schema".into(), json!(SCHEMA));
    o.insert("command".into(), json!(command));
    if let Value::Object(b) = body {
        o.extend(b);
    }
    Value::Object(o)
}

pub fn violation_json(v: &Violation) -> Value {
    let shown: Vec<Value> = v
        .shown
        .iter()
        .map(|s| {
            json!({
                "label": s.label,
                "type": s.ty.display(&v.mesh),
                "per_rank": s.value.tensors.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "property": v.property.code(),
        "mesh": mesh_json(&v.mesh),
        "what": v.what,
        "values": shown,
        "expected": v.expected,
        "actual": v.actual,
    })
}

pub fn verdict_json(v: &Verdict) -> Value {
    let t = v.tally();
    json!({
        "verdict": v.name(),
        "proof": v.proof(),
        "property": v.violation().map(|x| x.property.code()),
        "counterexample": v.violation().map(violation_json),
        "instances": t.instances(),
        "cases": t.cases,
        "distributed_cases": t.distributed_cases,
        "cases_beyond_cap": t.cases_beyond_cap,
        "identity_cases": t.identity_cases,
        "b3_undetermined": t.b3_undetermined,
        "undecided": t.undecided,
        "random_cases": t.random,
        "reason": v.vacuous_reason().map(String::from).or_else(|| v.undetermined_reason()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_oracle::Tally;

    /// The hint names a flag only where one widens the scope: not on a
    /// one-rank mesh the rule writes (twin: the same verdict on meshes the
    /// flags choose names them).
    #[test]
    fn the_vacuous_hint_names_a_flag_only_where_one_helps() {
        let v: Verdict = Verdict::Vacuous {
            tally: Tally {
                cases: 3,
                passed: 5,
                ..Tally::new()
            },
        };
        let fixed = vacuous_hint(&v, true).unwrap();
        assert!(
            fixed.contains("no flag widens it") && !fixed.contains("--"),
            "{fixed}"
        );
        let free = vacuous_hint(&v, false).unwrap();
        assert!(free.contains("--mesh-dims"), "{free}");
    }
}
