//! Rendering verdicts for people and for tools.

use crate::conform::{Claim, RowResult};
use crate::derive::DerivedRow;
use crate::jvps::{JvpOp, JvpResult, WrongJvp};
use crate::pinned::Verdicted as _;
use crate::programs::ProgramResult;
use serde_json::{json, Value};

pub use crate::check::rule_word;
pub use crate::words::*;

pub mod junit;
pub mod markdown;
pub mod table;

/// A report's format (`--format`, SPEC.md §11.4): text for people, JSON
/// for tools, Markdown tables for pull requests and docs, JUnit XML for CI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Markdown,
    Junit,
}

impl Format {
    pub const NAMES: [&'static str; 4] = ["text", "json", "markdown", "junit"];
    /// The format of `--format NAME`, with `--json` as `--format json`.
    pub fn parse(name: Option<&str>, json: bool) -> Result<Format, crate::run::UsageError> {
        Ok(match (name, json) {
            (None, false) | (Some("text"), false) => Format::Text,
            (None, true) | (Some("json"), _) => Format::Json,
            (Some("markdown"), false) => Format::Markdown,
            (Some("junit"), false) => Format::Junit,
            (Some(f), true) => {
                return Err(crate::run::UsageError(format!(
                    "--json is --format json; it does not go with --format {}",
                    excerpt(f)
                )))
            }
            (Some(f), false) => {
                return Err(crate::run::UsageError(format!(
                    "--format {}: expected one of text, json, markdown, junit",
                    excerpt(f)
                )))
            }
        })
    }
    /// Whether the report is for a tool (no progress bar on stderr).
    pub fn quiet(self) -> bool {
        self != Format::Text
    }
}

/// The scope of a run as JSON: what a part's key holds (SPEC.md §18.3).
/// `--format markdown` or `junit` of a command's tables, on stdout.
pub fn print_tables(format: Format, t: &table::Tables) {
    match format {
        Format::Junit => print!("{}", junit::render(t)),
        _ => print!("{}", markdown::render(t)),
    }
}

pub fn scope_json(s: &spmd_generators::Scope) -> Value {
    json!({
        "meshes": s.meshes.iter().map(mesh_json).collect::<Vec<_>>(),
        "max_rank": s.max_rank,
        "max_dim": s.max_dim,
        "values": s.values.iter().map(|q| q.to_string()).collect::<Vec<_>>(),
        "max_free": s.max_free,
        "max_points": s.max_points,
        "max_instances": s.max_instances,
        "mesh_dims": s.mesh_dims,
    })
}

/// One rule's entry in `check --json`'s `rules` (SPEC.md §11.4), with the
/// `emitted` object of `--emit` where one was made.
pub fn check_rule_json(
    file: &str,
    rep: &crate::check::RuleReport,
    emitted: Option<Value>,
) -> Value {
    if let Some(b) = &rep.batching {
        let mut j = b.json();
        j["name"] = json!(rep.name);
        j["file"] = json!(file);
        j["random_requested"] = json!(rep.random_requested);
        j["elaboration"] = json!(rep.elaboration);
        if let Some(e) = emitted {
            j["emitted"] = e;
        }
        return j;
    }
    if let Some(u) = &rep.uneven {
        let mut j = u.json();
        j["name"] = json!(rep.name);
        j["file"] = json!(file);
        j["random_requested"] = json!(rep.random_requested);
        if let Some(e) = emitted {
            j["emitted"] = e;
        }
        return j;
    }
    if let Some(p) = &rep.pending {
        let mut j = p.json(rep.dialect);
        j["name"] = json!(rep.name);
        j["file"] = json!(file);
        j["random_requested"] = json!(rep.random_requested);
        if let Some(e) = emitted {
            j["emitted"] = e;
        }
        return j;
    }
    let v = &rep.verdict;
    let mut j = verdict_json(v);
    j["name"] = json!(rep.name);
    j["file"] = json!(file);
    j["summary"] = json!(rule_word(rep));
    j["backward_checked"] = json!(rep.backward_checked);
    j["no_grad"] = json!(rep.no_grad);
    j["random_cases"] = json!(rep.random_cases);
    j["random_requested"] = json!(rep.random_requested);
    j["random_note"] = json!(rep.random_note);
    j["replayed"] = json!(rep.replayed);
    if !rep.elaboration.is_empty() {
        j["elaboration"] = json!(rep.elaboration);
    }
    if let Some(e) = emitted {
        j["emitted"] = e;
    }
    if let Some(x) = v.violation() {
        j["counterexample"]["inputs"] = json!(x
            .inputs()
            .iter()
            .map(|s| json!({
                "label": s.label,
                "type": s.ty.display_in(&x.mesh, rep.dialect),
                "per_rank": s.value.tensors.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>());
    }
    j
}

/// The key of a partitioned `check` run: what must be equal for parts to
/// merge (SPEC.md §18.3).
pub fn check_key(files: &[String], seed: u64, cases: u32, scope: &spmd_generators::Scope) -> Value {
    json!({"files": files, "seed": seed, "cases": cases, "scope": scope_json(scope)})
}

/// The derived table as text: one line per typing.
pub fn derive_text(rows: &[DerivedRow]) -> String {
    let mut s = String::new();
    let (mut sound, mut proof) = (0, 0);
    for r in rows {
        let m = spmd_semantics::Mesh::line(1);
        let sig = r.op.signature(&m);
        let word = verdict_word(&r.verdict);
        match r.verdict.violation() {
            Some(v) => s.push_str(&format!("  {sig:<14} {word:<16} {}\n", v.one_line())),
            None => s.push_str(&format!("  {sig:<14} {word}\n")),
        }
        if r.verdict.is_sound() {
            sound += 1;
            proof += r.verdict.proof() as usize;
        }
    }
    s.push_str(&format!(
        "{} typings: {} sound ({} proofs), {} not\n",
        rows.len(),
        sound,
        proof,
        rows.len() - sound
    ));
    let capped = rows
        .iter()
        .filter(|r| {
            matches!(
                r.verdict.vacuous_reason(),
                Some("no multi-rank case within the caps" | "every case is beyond the caps")
            )
        })
        .count();
    if capped > 0 {
        s.push_str(&format!(
            "{capped} typings were not checked on more than one rank: raise --max-points or --max-free (SPEC.md §8.1)\n"
        ));
    }
    s
}

/// `derive --json`'s body (SPEC.md §9.1): the op, whether under global
/// types, the system with `--dialect`, and the typings (`derive_json` or
/// `dialect_json`).
pub fn derive_body(op: &str, global: bool, system: Option<&str>, typings: Value) -> Value {
    json!({
        "mode": if system.is_some() { "dialect" } else { "table" },
        "op": op,
        "global": global,
        "system": system,
        "typings": typings,
    })
}

/// The typings of a derived table as JSON, one object per typing.
pub fn derive_json(rows: &[DerivedRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let mut v = verdict_json(&r.verdict);
                // Canonical letters, with S(d) for a Varying axis with a layout.
                let ins: Vec<String> = r.op.inputs.iter().map(|t| t.to_string()).collect();
                v["inputs"] = json!(ins);
                v["output"] = json!(r.op.output.to_string());
                v
            })
            .collect(),
    )
}

fn claim_word(c: Claim) -> &'static str {
    match c {
        Claim::Allowed => "allowed",
        Claim::Forbidden => "forbidden",
        Claim::Unlisted => "unlisted",
    }
}

pub fn row_json(r: &RowResult) -> Value {
    let mut v = verdict_json(&r.verdict);
    v["id"] = json!(r.rule.id);
    v["system"] = json!(r.rule.system);
    v["rule"] = json!(r.rule.rule);
    v["op"] = json!(r.rule.op);
    v["inputs"] = json!(r.rule.inputs);
    v["output"] = json!(r.rule.output);
    v["claim"] = json!(claim_word(r.rule.claim));
    v["agrees"] = json!(r.agrees());
    v["finding"] = json!(r.finding());
    if let (Some(t), Some(tv)) = (&r.rule.twin, &r.twin) {
        v["twin"] = json!({
            "op": t.op, "inputs": t.inputs, "output": t.output,
            "must_fail": t.fails.code(),
            "verdict": tv.name(),
            "property": tv.violation().map(|x| x.property.code()),
            "rejected": r.twin_rejected(),
        });
    }
    v
}

pub fn row_line(r: &RowResult) -> String {
    let sig = format!(
        "{}: {} -> {}",
        r.rule.op,
        r.rule.inputs.join(", "),
        r.rule.output
    );
    let twin = match r.twin_rejected() {
        Some(true) => format!(
            "  [twin rejected: {}]",
            r.rule.twin.as_ref().map(|t| t.fails.code()).unwrap_or("")
        ),
        Some(false) => "  [TWIN NOT REJECTED: checker defect]".into(),
        None => String::new(),
    };
    format!(
        "  {:<12} {:<28} {:<44} {}{}",
        r.rule.system,
        r.rule.id,
        sig,
        verdict_word(&r.verdict),
        twin
    )
}

fn jvp_op_text(op: &JvpOp) -> &str {
    match op {
        JvpOp::Local(e) | JvpOp::Collective(e) => e,
    }
}

fn wrong_jvp_text(w: &WrongJvp) -> String {
    match w {
        WrongJvp::Text(t) => t.to_string(),
        WrongJvp::ReduceAgain => "reduce the tangent again".into(),
    }
}

pub fn jvp_json(j: &JvpResult) -> Value {
    let mut v = verdict_json(&j.verdict);
    v["id"] = json!(j.row.id);
    v["system"] = json!(j.row.system);
    v["rule"] = json!(j.row.rule);
    v["op"] = json!(jvp_op_text(&j.row.op));
    v["inputs"] = json!(j.row.inputs);
    v["output"] = json!(j.row.output);
    v["jvp"] = json!(j.row.jvp);
    v["as_expected"] = json!(j.as_expected());
    v["twin"] = json!({
        "jvp": wrong_jvp_text(&j.row.twin),
        "must_fail": "J1",
        "verdict": j.twin.name(),
        "property": j.twin.violation().map(|x| x.property.code()),
        "rejected": j.twin_rejected(),
    });
    v
}

pub fn jvp_line(j: &JvpResult) -> String {
    let sig = format!(
        "{}: {} -> {}, jvp {}",
        jvp_op_text(&j.row.op),
        j.row.inputs.join(", "),
        j.row.output,
        j.row.jvp
    );
    let twin = if j.twin_rejected() {
        format!("  [twin rejected: J1, jvp {}]", wrong_jvp_text(&j.row.twin))
    } else {
        "  [TWIN NOT REJECTED: checker defect]".into()
    };
    format!(
        "  {:<12} {:<32} {:<44} {}{}",
        j.row.system,
        j.row.id,
        sig,
        verdict_word(&j.verdict),
        twin
    )
}

pub fn program_json(p: &ProgramResult) -> Value {
    let mut v = verdict_json(&p.verdict);
    v["name"] = json!(p.name);
    v["steps"] = json!(p.program.op.describe());
    v["expect"] = json!(p.expect.map(|x| x.code()).unwrap_or("sound"));
    v["as_expected"] = json!(p.as_expected());
    v["forward_cost"] = json!(p.forward_cost.to_string());
    v["backward_cost"] = json!(p.backward_cost.to_string());
    v
}

pub fn program_line(p: &ProgramResult) -> String {
    let mark = if p.as_expected() {
        ""
    } else {
        "  [NOT AS EXPECTED]"
    };
    let mut s = format!(
        "  {:<54} {:<16} forward {:>4}  backward {:>4}{mark}",
        p.name,
        verdict_word(&p.verdict),
        p.forward_cost.to_string(),
        p.backward_cost.to_string()
    );
    if let Some(v) = p.verdict.violation() {
        s.push_str(&format!("\n      {}", v.one_line()));
    }
    s
}

/// `spmd-check fidelity`'s report: per system and version, the count of each
/// class, then every case that is not an agreement (all with `all`).
pub fn fidelity(results: &[crate::fidelity::CaseResult], json: bool, all: bool) -> String {
    use crate::fidelity::CLASSES;
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in results {
        let g = (r.system.clone(), r.version.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    // Versions in numeric order (0.10.2 before 0.12.0.1).
    let key = |v: &str| -> Vec<u64> {
        v.split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    groups.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| key(&a.1).cmp(&key(&b.1))));
    let count = |g: &(String, String), k: &str| {
        results
            .iter()
            .filter(|r| r.system == g.0 && r.version == g.1 && r.class.key() == k)
            .count()
    };
    if json {
        let v = json!({
            "systems": groups.iter().map(|g| {
                let mut o = json!({"system": g.0, "version": g.1,
                    "cases": results.iter().filter(|r| r.system == g.0 && r.version == g.1).count()});
                for k in CLASSES {
                    o[*k] = json!(count(g, k));
                }
                o
            }).collect::<Vec<_>>(),
            "cases": results.iter().map(|r| json!({
                "file": r.file, "system": r.system, "version": r.version, "id": r.id,
                "class": r.class.key(), "detail": r.class.detail(), "note": r.note,
                "dialect": r.dialect.as_ref().map(|d| d.line()),
            })).collect::<Vec<_>>(),
            "dialect": crate::fidelity::dialect_json(results),
        });
        let v = document("fidelity", v);
        return format!("{}\n", serde_json::to_string_pretty(&v).expect("json"));
    }
    let mut s = String::from(
        "the real systems, recorded by peers/ and replayed through the model (SPEC.md §16):\n",
    );
    s.push_str(&format!(
        "  {:<12} {:<14} {:>6} {:>6} {:>8} {:>8} {:>9} {:>9} {:>7}\n",
        "system",
        "version",
        "cases",
        "agree",
        "sound-rej",
        "defect",
        "mismatch",
        "not-expr",
        "undet"
    ));
    for g in &groups {
        s.push_str(&format!(
            "  {:<12} {:<14} {:>6} {:>6} {:>8} {:>8} {:>9} {:>9} {:>7}\n",
            g.0,
            g.1,
            results
                .iter()
                .filter(|r| r.system == g.0 && r.version == g.1)
                .count(),
            count(g, "agree"),
            count(g, "sound_rejection"),
            count(g, "real_defect"),
            count(g, "model_mismatch"),
            count(g, "not_expressible"),
            count(g, "undetermined"),
        ));
    }
    s.push_str(&crate::fidelity::dialect_text(results));
    for k in CLASSES.iter().filter(|k| all || **k != "agree") {
        let rows: Vec<_> = results.iter().filter(|r| r.class.key() == *k).collect();
        if rows.is_empty() {
            continue;
        }
        s.push_str(&format!("\n{k} ({}):\n", rows.len()));
        for r in rows {
            s.push_str(&format!("  {} {}: {}", r.system, r.id, r.note));
            if let Some(d) = r.class.detail() {
                s.push_str(&format!("\n      {d}"));
            }
            s.push('\n');
        }
    }
    s
}

/// `derive OP --dialect SYSTEM` as text: per typing, the oracle's verdict,
/// what the system does, and the class (SPEC.md §15.3), then the counts.
pub fn dialect_text(rows: &[crate::derive::DialectRow], sys: &spmd_dialects::System) -> String {
    let mut s = String::new();
    let m = spmd_semantics::Mesh::line(1);
    for r in rows {
        let sig = r.row.op.signature(&m);
        let word = verdict_word(&r.row.verdict);
        s.push_str(&format!(
            "  {sig:<14} {word:<16} {:<20} {}",
            r.class.word(),
            sys.describe(&r.outcome)
        ));
        match &r.class {
            crate::derive::Class::UnsoundAcceptance(c) => s.push_str(&format!("\n      {c}")),
            crate::derive::Class::Unknown(c) if !c.starts_with("seed silent") => {
                s.push_str(&format!("\n      {c}"))
            }
            _ => {}
        }
        s.push('\n');
    }
    s.push_str(&dialect_counts(rows));
    s
}

/// The classes' counts, e.g. `64 typings: 20 agrees, 3 unsound acceptance, ...`.
pub fn dialect_counts(rows: &[crate::derive::DialectRow]) -> String {
    let parts: Vec<String> = crate::derive::Class::WORDS
        .iter()
        .map(|w| {
            let n = rows.iter().filter(|r| r.class.word() == *w).count();
            format!("{n} {w}")
        })
        .collect();
    format!("{} typings: {}\n", rows.len(), parts.join(", "))
}

pub fn dialect_json(rows: &[crate::derive::DialectRow], sys: &spmd_dialects::System) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let mut v = verdict_json(&r.row.verdict);
                let ins: Vec<String> = r.row.op.inputs.iter().map(|t| t.to_string()).collect();
                v["inputs"] = json!(ins);
                v["output"] = json!(r.row.op.output.to_string());
                v["system"] = json!(sys.name);
                v["class"] = json!(r.class.word());
                match &r.class {
                    crate::derive::Class::UnsoundAcceptance(c) => {
                        v["acceptance_counterexample"] = json!(c)
                    }
                    crate::derive::Class::Unknown(why) => v["unknown_because"] = json!(why),
                    _ => {}
                }
                v["system_does"] = match &r.outcome {
                    spmd_dialects::Outcome::Infers { output, casts } => json!({
                        "infers": output.iter().map(|&s| sys.state_name(s)).collect::<Vec<_>>(),
                        "casts": casts.iter().map(|c| json!({
                            "name": c.name,
                            "input": c.input,
                            "axis": c.axis,
                            "from": sys.state_name(c.from),
                            "to": sys.state_name(c.to),
                        })).collect::<Vec<_>>(),
                    }),
                    spmd_dialects::Outcome::Error(e) => json!({ "error": e }),
                    spmd_dialects::Outcome::Unknown(r) => json!({ "unknown": r }),
                };
                v
            })
            .collect(),
    )
}

/// Per-system totals of the seed tables (computed from the results): rows,
/// rows where claim and oracle agree, findings, twins rejected.
pub fn conform_totals(results: &[RowResult]) -> String {
    let mut s = String::from("per system (local-op rows):\n");
    for sys in spmd_dialects::tables::SYSTEMS {
        let rs: Vec<&RowResult> = results.iter().filter(|r| r.rule.system == *sys).collect();
        if rs.is_empty() {
            continue;
        }
        let agree = rs.iter().filter(|r| r.agrees()).count();
        let twins = rs.iter().filter(|r| r.rule.twin.is_some()).count();
        let rejected = rs
            .iter()
            .filter(|r| r.twin_rejected() == Some(true))
            .count();
        let typed: Vec<_> = rs
            .iter()
            .filter_map(|r| crate::conform::typing_of_row(r.rule))
            .collect();
        let same = typed
            .iter()
            .filter(|t| t.matches_claim == Some(true))
            .count();
        let unknown = typed.iter().filter(|t| t.matches_claim.is_none()).count();
        s.push_str(&format!(
            "  {sys:<11} {} rows, {agree} agree, {} findings, {rejected}/{twins} twins rejected; its typing function matches {same} of the {} rows it can type ({unknown} unknown)\n",
            rs.len(),
            rs.len() - agree,
            typed.len()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_oracle::{Tally, Verdict};

    /// A bounded-sound verdict with undecided instances says how many; its
    /// twin without any says plain "sound (bounded)".
    #[test]
    fn undecided_instances_are_named_in_the_verdict() {
        let with = Verdict::Sound {
            proof: false,
            tally: Tally {
                passed: 3,
                undecided: 2,
                ..Tally::default()
            },
        };
        assert_eq!(
            verdict_word(&with),
            "sound (bounded; 2 of 5 instances undecided)"
        );
        let without = Verdict::Sound {
            proof: false,
            tally: Tally {
                passed: 5,
                ..Tally::default()
            },
        };
        assert_eq!(verdict_word(&without), "sound (bounded)");
    }

    /// Long user text is quoted by its head and length; short text whole.
    #[test]
    fn long_text_is_quoted_by_its_head() {
        let long = "x+".repeat(100) + "x";
        let e = excerpt(&long);
        assert!(
            e.starts_with(&long[..60]) && e.ends_with("(201 characters)"),
            "{e}"
        );
        assert_eq!(excerpt("x * y"), "x * y");
    }
}

#[cfg(test)]
mod name_tests {
    use super::quoted_name;

    #[test]
    fn a_name_keeps_its_apostrophe_and_stays_on_one_quoted_line() {
        assert_eq!(quoted_name("DTensor's rule"), "DTensor's rule");
        // The twin: what could break the line or the quotes is escaped.
        assert_eq!(quoted_name("a\"b\nc\\d\u{1b}"), "a\\\"b\\nc\\\\d\\u{1b}");
    }
}
