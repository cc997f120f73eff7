//! The sections of `conform` whose rules each carry a pinned verdict
//! (uneven shards, SPEC.md §23.12; transforms, §24.5): every rule of the
//! section's file is checked, its computed verdict compared with its pin,
//! and a twin (a rule named `twin: ...`) must come out unsound.

use serde_json::{json, Value};
use spmd_semantics::Dialect;

/// What a section needs of a rule's report.
pub trait Verdicted {
    /// The verdict as pinned: `sound`, `vacuous` or `unsound <property>`.
    fn key(&self) -> String;
    /// The verdict in words.
    fn word(&self) -> String;
    /// The rule's `--json` entry (without name and file).
    fn json(&self) -> Value;
    /// The counterexample in one line, if any.
    fn line(&self) -> Option<String>;
    /// Whether a counterexample was found.
    fn failed(&self) -> bool;
    /// Whether nothing was decided (vacuous).
    fn inconclusive(&self) -> bool;
    /// The counterexample, one line per value (empty when sound).
    fn report(&self) -> String;
}

/// One rule of a section, checked.
pub struct Row<R> {
    pub name: String,
    pub dialect: Dialect,
    pub report: R,
    pub pinned: Option<&'static str>,
}

impl<R: Verdicted> Row<R> {
    pub fn as_pinned(&self) -> bool {
        self.pinned == Some(self.report.key().as_str())
    }
    pub fn twin(&self) -> bool {
        self.name.starts_with("twin:")
    }
}

/// Checks every rule of a section's file (`file`, its text `toml`) whose
/// system is `dialect` (all when `None`) with `check`, which gives `None`
/// for a rule that is not of the section's kind; each with its pin.
pub fn rows<R: Send>(
    file: &str,
    toml: &str,
    dialect: Option<&str>,
    pins: &[(&str, &'static str)],
    check: impl Fn(&crate::rules::Rule) -> Option<R> + Sync,
) -> Result<Vec<Row<R>>, crate::run::UsageError> {
    let specs = crate::rules::parse_file(file, toml)?;
    let rules = crate::rules::build(file, toml, &specs, &spmd_generators::Scope::default())?;
    use rayon::prelude::*;
    Ok(rules
        .par_iter()
        .filter(|r| dialect.is_none_or(|d| r.dialect.name() == d))
        .filter_map(|r| {
            Some(Row {
                name: r.name.clone(),
                dialect: r.dialect,
                report: check(r)?,
                pinned: pins.iter().find(|(n, _)| *n == r.name).map(|p| p.1),
            })
        })
        .collect())
}

/// A section: its text, its JSON, whether every verdict is as pinned,
/// and its rows (for the Markdown and JUnit tables).
pub struct Section<R> {
    pub text: String,
    pub json: Value,
    pub ok: bool,
    pub rows: Vec<Row<R>>,
}

/// The section of these rows: a heading line, a line per rule, and a
/// closing count whose middle part `counts` writes (after the number of
/// rules).
pub fn section<R: Verdicted>(
    heading: &str,
    rows: Vec<Row<R>>,
    counts: impl Fn(&[Row<R>]) -> String,
) -> Section<R> {
    let ok = rows.iter().all(Row::as_pinned);
    let mut text = format!("\n{heading}\n");
    for r in &rows {
        let mark = match (r.as_pinned(), r.twin()) {
            (true, true) => "twin rejected",
            (true, false) => "as pinned",
            (false, _) => "NOT as pinned",
        };
        text.push_str(&format!(
            "  [{}] {}: {} [{mark}]\n",
            r.dialect.name(),
            r.name,
            r.report.word()
        ));
    }
    text.push_str(&format!(
        "  {} rules: {}; {}\n",
        rows.len(),
        counts(&rows),
        if ok {
            "every verdict as pinned"
        } else {
            "NOT every verdict as pinned"
        }
    ));
    let json = json!({
        "rules": rows.iter().map(|r| {
            let mut j = r.report.json();
            j["name"] = json!(r.name);
            j["dialect"] = json!(r.dialect.name());
            j["pinned"] = json!(r.pinned);
            j["as_pinned"] = json!(r.as_pinned());
            j
        }).collect::<Vec<_>>(),
        "as_pinned": ok,
    });
    Section {
        text,
        json,
        ok,
        rows,
    }
}
