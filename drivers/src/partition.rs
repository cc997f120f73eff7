//! `--partition K/N` and `spmd-check merge` (SPEC.md §18.3): N runs, each
//! given the same scope, check the items whose index i (0-based, in the
//! order of a single run) has i mod N = K - 1; merging their JSON outputs
//! gives exactly the JSON of the single run.
//!
//! A part's JSON is the command's own document for its items with a
//! `partition` object added: K and N, a key naming everything that fixes
//! the run's inputs and scope, and per section of the report the total
//! count and the entries it owns, each with its index.

use crate::run::UsageError;
use serde_json::{json, Map, Value};

/// One part of N.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// 1-based.
    pub k: usize,
    pub n: usize,
}

/// The most parts a run may be split into.
pub const MAX_PARTS: usize = 100_000;
/// The most entries a section of a merged run may have (a check of this
/// many rules or programs classes is far beyond any run).
pub const MAX_ENTRIES: usize = 10_000_000;

impl Partition {
    /// Parse `K/N`, 1 ≤ K ≤ N ≤ `MAX_PARTS`; a one-line error otherwise.
    pub fn parse(s: &str) -> Result<Partition, UsageError> {
        let bad = |why: &str| UsageError(format!("--partition {s:?}: {why}"));
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| bad("expected K/N, e.g. 1/3"))?;
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| bad("K and N must be positive integers"))
        };
        let (k, n) = (num(k)?, num(n)?);
        if n == 0 || n > MAX_PARTS {
            return Err(bad(&format!("N must be between 1 and {MAX_PARTS}")));
        }
        if k == 0 || k > n {
            return Err(bad("K must be between 1 and N"));
        }
        Ok(Partition { k, n })
    }
    /// Whether item `i` (0-based) is this part's.
    pub fn owns(&self, i: usize) -> bool {
        i % self.n == self.k - 1
    }
}

/// One section of a report: its name, the number of entries a single run
/// has, and the entries this part owns with their indices.
pub struct Section {
    pub name: &'static str,
    pub total: usize,
    pub entries: Vec<(usize, Value)>,
}

/// The `partition` object of a part's `--json` document (SPEC.md §18.3):
/// K and N, the key (the command's inputs and scope, as JSON; parts merge
/// only when their keys are equal) and per section the number of entries a
/// single run has and this part's entries, each with its index.
pub fn envelope(p: Partition, key: Value, sections: Vec<Section>) -> Value {
    let mut secs = Map::new();
    for s in sections {
        secs.insert(
            s.name.to_string(),
            json!({
                "total": s.total,
                "entries": s.entries.into_iter().map(|(i, v)| json!([i, v])).collect::<Vec<_>>(),
            }),
        );
    }
    json!({"k": p.k, "n": p.n, "key": key, "sections": Value::Object(secs)})
}

/// A part's whole document: the command's own document for this part's
/// items (`doc`, from `words::document`) with the `partition` object added.
pub fn part_document(mut doc: Value, partition: Value) -> Value {
    if let Value::Object(o) = &mut doc {
        o.insert("partition".into(), partition);
    }
    doc
}

/// How a command's merged sections become its single run's JSON, where
/// that is more than the sections themselves (a `programs` run's report
/// over all its classes, SPEC.md §17.3): the body of its document.
pub type Assemble = fn(&Map<String, Value>) -> Result<Value, String>;

/// Merge the envelopes of parts 1..=N of one run into the single run's
/// JSON. Every part must be present once, with the same command, key and
/// N, and together they must hold every entry exactly once. `assemble`
/// names the commands whose sections are assembled further.
pub fn merge(docs: &[(String, Value)], assemble: &[(&str, Assemble)]) -> Result<Value, UsageError> {
    let first = docs
        .first()
        .ok_or_else(|| UsageError("merge: no files given".into()))?;
    let head = |file: &str, v: &Value| -> Result<(usize, usize, String, Value), UsageError> {
        let not_part = || {
            UsageError(format!(
                "{file}: not a part of a partitioned run (run with --partition K/N --json)"
            ))
        };
        match v.get("schema").and_then(Value::as_str) {
            Some(s) if s == crate::words::SCHEMA => {}
            Some(s) => {
                return Err(UsageError(format!(
                    "{file}: schema `{}`, not `{}`: made by another version of spmd-check; run the parts again with this one",
                    crate::words::excerpt(s),
                    crate::words::SCHEMA
                )))
            }
            None => return Err(not_part()),
        }
        let command = v
            .get("command")
            .and_then(Value::as_str)
            .ok_or_else(not_part)?;
        let p = v.get("partition").ok_or_else(not_part)?;
        let get_n = |k: &str| {
            p.get(k)
                .and_then(Value::as_u64)
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| UsageError(format!("{file}: partition has no `{k}`")))
        };
        let key = p
            .get("key")
            .cloned()
            .ok_or_else(|| UsageError(format!("{file}: partition has no `key`")))?;
        Ok((get_n("k")?, get_n("n")?, command.to_string(), key))
    };
    let (_, n, command, key) = head(&first.0, &first.1)?;
    // Parts are files and untrusted: N is checked before anything is
    // allocated for it, and entries are kept by index as they come, so a
    // part claiming a huge total allocates nothing for it.
    if n == 0 || n > MAX_PARTS {
        return Err(UsageError(format!(
            "{}: partition into {n} parts; N is between 1 and {MAX_PARTS}",
            first.0
        )));
    }
    let mut seen = vec![false; n];
    // Per section: total and the entries found, by index.
    type Entries = std::collections::BTreeMap<usize, Value>;
    let mut sections: Vec<(String, usize, Entries)> = Vec::new();
    for (file, v) in docs {
        let (k, n2, c2, key2) = head(file, v)?;
        if n2 != n || c2 != command || key2 != key {
            return Err(UsageError(format!(
                "{file}: part {k}/{n2} of `{c2}` is not from the same run as {} (command, scope and inputs must match)",
                first.0
            )));
        }
        if k == 0 || k > n {
            return Err(UsageError(format!(
                "{file}: partition {k}/{n} is out of range"
            )));
        }
        if std::mem::replace(&mut seen[k - 1], true) {
            return Err(UsageError(format!("{file}: part {k}/{n} given twice")));
        }
        let secs = v["partition"]
            .get("sections")
            .and_then(Value::as_object)
            .ok_or_else(|| UsageError(format!("{file}: no `sections`")))?;
        for (name, s) in secs {
            let total = s
                .get("total")
                .and_then(Value::as_u64)
                .and_then(|t| usize::try_from(t).ok())
                .ok_or_else(|| UsageError(format!("{file}: section `{name}` has no total")))?;
            if total > MAX_ENTRIES {
                return Err(UsageError(format!(
                    "{file}: section `{name}`: total {total} is too large (at most {MAX_ENTRIES})"
                )));
            }
            let at = match sections.iter().position(|x| x.0 == *name) {
                Some(i) => i,
                None => {
                    sections.push((name.clone(), total, Entries::new()));
                    sections.len() - 1
                }
            };
            if sections[at].1 != total {
                return Err(UsageError(format!(
                    "{file}: section `{name}` has {total} entries, another part says {}",
                    sections[at].1
                )));
            }
            for e in s
                .get("entries")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(i), Some(val)) = (e.get(0).and_then(Value::as_u64), e.get(1)) else {
                    return Err(UsageError(format!(
                        "{file}: section `{name}`: a malformed entry"
                    )));
                };
                let i = usize::try_from(i)
                    .ok()
                    .filter(|&i| i < total)
                    .ok_or_else(|| {
                        UsageError(format!(
                            "{file}: section `{name}`: entry {i} beyond its total {total}"
                        ))
                    })?;
                if sections[at].2.insert(i, val.clone()).is_some() {
                    return Err(UsageError(format!(
                        "{file}: section `{name}`: entry {i} appears in two parts"
                    )));
                }
            }
        }
    }
    if let Some(k) = seen.iter().position(|s| !s) {
        return Err(UsageError(format!("merge: part {}/{n} is missing", k + 1)));
    }
    let mut out = Map::new();
    for (name, total, entries) in sections {
        // Indices are below `total` and distinct: all are there when as many.
        if entries.len() != total {
            let i = (0..total).find(|i| !entries.contains_key(i)).unwrap_or(0);
            return Err(UsageError(format!(
                "merge: section `{name}`: no part holds entry {i}"
            )));
        }
        out.insert(name, Value::Array(entries.into_values().collect()));
    }
    let body = match assemble.iter().find(|(c, _)| *c == command) {
        Some((_, f)) => f(&out).map_err(|e| UsageError(format!("merge: {e}")))?,
        None => Value::Object(out),
    };
    Ok(crate::words::document(&command, body))
}

/// The exit code a single run would have given, read from its merged
/// JSON: 1 for a counterexample (`check`) or a negative twin not rejected
/// (`conform`), 3 for a rule left vacuous or undetermined (`check`, unless
/// `allow_vacuous`), else 0.
pub fn exit_code(command: &str, merged: &Value, allow_vacuous: bool) -> u8 {
    let entries: Vec<&Value> = match merged {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => o.values().filter_map(Value::as_array).flatten().collect(),
        _ => vec![],
    };
    if command == "programs" {
        // `programs` reports what it found and exits 0, as a single run does.
        return 0;
    }
    if command == "check" {
        if entries.iter().any(|e| !e["counterexample"].is_null()) {
            return 1;
        }
        if !allow_vacuous && entries.iter().any(|e| e["verdict"] != json!("sound")) {
            return 3;
        }
        return 0;
    }
    let defect = entries
        .iter()
        .any(|e| e["twin"]["rejected"] == json!(false));
    // FSDP strategies and layers must come out as this suite expects.
    let wrong = ["fsdp", "programs"].iter().any(|s| {
        merged[*s]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["as_expected"] == json!(false))
    });
    // The pending-kind section must come out as pinned (SPEC.md §21.6).
    let pending = merged["pending_kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["ok"] == json!(false));
    // The uneven and transforms sections must come out as pinned (SPEC.md
    // §23.12, §24.5).
    let pinned = ["uneven", "transforms"].iter().any(|s| {
        merged[*s]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["as_pinned"] == json!(false))
    });
    u8::from(defect || wrong || pending || pinned)
}

/// The command of a `--json` document.
pub fn command_of(v: &Value) -> Option<&str> {
    v.get("command")?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_parsed_and_bad_ones_refused() {
        assert_eq!(Partition::parse("2/3").unwrap(), Partition { k: 2, n: 3 });
        for bad in ["0/3", "4/3", "1/0", "x/3", "3", "-1/2", "1/200000"] {
            assert!(Partition::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_item_has_exactly_one_part() {
        let n = 4;
        for i in 0..20 {
            let owners = (1..=n).filter(|&k| Partition { k, n }.owns(i)).count();
            assert_eq!(owners, 1);
        }
    }

    #[test]
    fn merge_refuses_a_missing_or_repeated_part() {
        let part = |k| {
            let p = Partition { k, n: 2 };
            let entries: Vec<(usize, Value)> = (0..3)
                .filter(|&i| p.owns(i))
                .map(|i| (i, json!(i)))
                .collect();
            let own: Vec<Value> = entries.iter().map(|e| e.1.clone()).collect();
            let doc = crate::words::document("check", json!({ "rules": own }));
            let sections = vec![Section {
                name: "rules",
                total: 3,
                entries,
            }];
            part_document(doc, envelope(p, json!({"files": ["a"]}), sections))
        };
        let ok = merge(&[("a".into(), part(2)), ("b".into(), part(1))], &[]).unwrap();
        assert_eq!(
            ok,
            json!({"schema": "spmd-check/1", "command": "check", "rules": [0, 1, 2]})
        );
        assert!(merge(&[("a".into(), part(1))], &[]).is_err());
        assert!(merge(&[("a".into(), part(1)), ("b".into(), part(1))], &[]).is_err());
        // A part without the schema, or of another version, is refused.
        let mut old = part(1);
        old["schema"] = json!("spmd-check/0");
        let e = merge(&[("a".into(), old), ("b".into(), part(2))], &[]).unwrap_err();
        assert!(
            e.0.contains("spmd-check/0") && !e.0.contains('\n'),
            "{}",
            e.0
        );
        let mut bare = part(1);
        bare.as_object_mut().unwrap().remove("schema");
        assert!(merge(&[("a".into(), bare), ("b".into(), part(2))], &[]).is_err());
    }
}
