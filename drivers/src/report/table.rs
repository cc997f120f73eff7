//! The rows of `--format markdown` and `--format junit` (SPEC.md §11.4):
//! one row per rule (`check`), per seed row, pair, JVP rule, strategy and
//! layer (`conform`), per typing (`derive`), each with its outcome
//! computed from the verdict. `markdown` and `junit` render the same rows.

use crate::check::RuleReport;
use crate::collectives::PairResult;
use crate::conform::RowResult;
use crate::derive::{DerivedRow, DialectRow};
use crate::jvps::JvpResult;
use crate::pinned::Verdicted as _;
use crate::programs::ProgramResult;
use crate::words::{vacuous_hint, verdict_word};
use spmd_oracle::Verdict;

/// What a row comes to: a JUnit testcase that passes, fails or is skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

/// One row: its name, its cells (one per column), its outcome, the one-line
/// message of a failure or skip, and a note shown beside a row that passes
/// (an unsound seed rule the suite expects to be unsound, say).
pub struct Row {
    pub name: String,
    pub cells: Vec<String>,
    pub outcome: Outcome,
    pub message: Option<String>,
    pub note: Option<String>,
}

/// A table: a title (a JUnit testsuite), its columns and rows.
pub struct Table {
    pub title: String,
    pub columns: Vec<&'static str>,
    pub rows: Vec<Row>,
}

/// A command's report as tables.
pub struct Tables {
    /// `check`, `conform` or `derive`.
    pub command: &'static str,
    /// One line saying what was checked.
    pub heading: String,
    pub tables: Vec<Table>,
}

impl Tables {
    /// Rows of every table with this outcome.
    pub fn count(&self, o: Outcome) -> usize {
        self.tables
            .iter()
            .flat_map(|t| &t.rows)
            .filter(|r| r.outcome == o)
            .count()
    }
}

/// A verdict's outcome: sound passes, vacuous is skipped, anything else
/// (unsound, undetermined) fails; the message is the one-line
/// counterexample, or the words of the verdict.
fn verdict_row<C: std::fmt::Debug>(
    v: &Verdict<C>,
    word: String,
    one_line: Option<String>,
    hint: Option<String>,
) -> (Outcome, Option<String>) {
    if v.is_sound() {
        (Outcome::Pass, None)
    } else if matches!(v, Verdict::Vacuous { .. }) {
        (Outcome::Skip, Some(hint.unwrap_or(word)))
    } else {
        (Outcome::Fail, Some(one_line.unwrap_or(word)))
    }
}

/// `check`'s row of one rule.
pub fn check_row(rep: &RuleReport) -> Row {
    let (word, outcome, message) = match &rep.pending {
        _ if rep.batching.is_some() => {
            let b = rep.batching.as_ref().expect("checked");
            let word = b.word();
            let outcome = if b.failed() {
                Outcome::Fail
            } else if b.inconclusive() {
                Outcome::Skip
            } else {
                Outcome::Pass
            };
            let message = match outcome {
                Outcome::Pass => None,
                _ => b.line().or(Some(word.clone())),
            };
            (word, outcome, message)
        }
        _ if rep.uneven.is_some() => {
            let u = rep.uneven.as_ref().expect("checked");
            let word = u.word();
            let outcome = if u.failed() {
                Outcome::Fail
            } else if u.inconclusive() {
                Outcome::Skip
            } else {
                Outcome::Pass
            };
            let first = u.report().lines().next().map(|l| l.trim().to_string());
            let message = match outcome {
                Outcome::Pass => None,
                _ => first.or(Some(word.clone())),
            };
            (word, outcome, message)
        }
        Some(p) => {
            let word = p.word();
            let first = p
                .report(rep.dialect)
                .lines()
                .next()
                .map(|l| l.trim().to_string());
            let (o, m) = verdict_row(&p.verdict, word.clone(), first, None);
            (word, o, m)
        }
        None => {
            let v = &rep.verdict;
            let word = crate::check::rule_word(rep);
            let one = v.violation().map(|x| x.one_line_in(rep.dialect));
            let hint = vacuous_hint(v, rep.one_rank_mesh);
            let (o, m) = verdict_row(v, word.clone(), one, hint);
            (word, o, m)
        }
    };
    Row {
        name: rep.name.clone(),
        cells: vec![
            rep.name.clone(),
            word,
            match outcome {
                Outcome::Fail => message.clone().unwrap_or_default(),
                _ => String::new(),
            },
        ],
        outcome,
        message,
        note: None,
    }
}

/// `check`'s tables: one per rule file, one row per rule checked.
pub fn check_tables(files: Vec<(String, Vec<Row>)>) -> Tables {
    let n: usize = files.iter().map(|f| f.1.len()).sum();
    Tables {
        command: "check",
        heading: format!(
            "spmd-check check: {n} {} of {} {}",
            if n == 1 { "rule" } else { "rules" },
            files.len(),
            if files.len() == 1 { "file" } else { "files" }
        ),
        tables: files
            .into_iter()
            .map(|(f, rows)| Table {
                title: f,
                columns: vec!["rule", "verdict", "counterexample"],
                rows,
            })
            .collect(),
    }
}

/// `derive`'s table (SPEC.md §9.1): one row per typing; with `--dialect`,
/// what the system does and the class (SPEC.md §15.3).
pub fn derive_tables(
    op: &str,
    rows: &[DerivedRow],
    dialect: Option<(&[DialectRow], &spmd_dialects::System)>,
) -> Tables {
    let m = spmd_semantics::Mesh::line(1);
    let row = |r: &DerivedRow| {
        let sig = r.op.signature(&m);
        let one = r.verdict.violation().map(|x| x.one_line());
        let (outcome, message) = verdict_row(
            &r.verdict,
            verdict_word(&r.verdict),
            one,
            vacuous_hint(&r.verdict, false),
        );
        let cex = r
            .verdict
            .violation()
            .map(|x| x.one_line())
            .unwrap_or_default();
        Row {
            name: sig.clone(),
            cells: vec![sig, verdict_word(&r.verdict), cex],
            outcome,
            message,
            note: None,
        }
    };
    let (title, columns, rows): (String, Vec<&'static str>, Vec<Row>) = match dialect {
        None => (
            format!("typings of `{op}` on one mesh axis"),
            vec!["typing", "verdict", "counterexample"],
            rows.iter().map(row).collect(),
        ),
        Some((drs, sys)) => (
            format!("`{op}` under {}", sys.name),
            vec![
                "typing",
                "verdict",
                "counterexample",
                "class",
                "system does",
            ],
            drs.iter()
                .map(|d| {
                    let mut r = row(d.row);
                    r.cells.push(d.class.word().to_string());
                    r.cells.push(sys.describe(&d.outcome));
                    r
                })
                .collect(),
        ),
    };
    Tables {
        command: "derive",
        heading: format!("spmd-check derive: {title}"),
        tables: vec![Table {
            title,
            columns,
            rows,
        }],
    }
}

/// `derive --uneven`'s table (SPEC.md §23.14): one row per typing; a sound
/// typing passes, a vacuous one is skipped with its reason, an unsound one
/// fails with its counterexample.
pub fn uneven_derive_tables(
    op: &str,
    split: &spmd_semantics::uneven::Split,
    rows: &[crate::uneven::Derived],
) -> Tables {
    let title = format!("typings of `{op}` on one mesh axis, shards split by `{split}`");
    Tables {
        command: "derive",
        heading: format!("spmd-check derive: {title} (forward only)"),
        tables: vec![Table {
            title,
            columns: vec!["typing", "verdict", "counterexample"],
            rows: rows
                .iter()
                .map(|r| {
                    let sig = r.signature();
                    let cex = r.report.failure.as_deref().map(crate::uneven::failure_line);
                    let (outcome, message) = match (&cex, r.report.inconclusive()) {
                        (Some(c), _) => (Outcome::Fail, Some(c.clone())),
                        (None, true) => (Outcome::Skip, Some(r.report.word())),
                        (None, false) => (Outcome::Pass, None),
                    };
                    Row {
                        name: sig.clone(),
                        cells: vec![sig, crate::uneven::key(&r.report), cex.unwrap_or_default()],
                        outcome,
                        message,
                        note: None,
                    }
                })
                .collect(),
        }],
    }
}

fn twin_cell(t: Option<bool>) -> &'static str {
    match t {
        Some(true) => "rejected",
        Some(false) => "NOT REJECTED",
        None => "",
    }
}

/// A `conform` row that fails exactly when it makes `conform` exit 1: a
/// negative twin not rejected, or a result not as expected. An unsound
/// verdict the suite expects is a note, not a failure.
fn conform_row(
    name: String,
    cells: Vec<String>,
    bad: Option<String>,
    one_line: Option<String>,
) -> Row {
    Row {
        name,
        cells,
        outcome: if bad.is_some() {
            Outcome::Fail
        } else {
            Outcome::Pass
        },
        message: bad,
        note: one_line,
    }
}

/// `conform`'s tables (SPEC.md §9.2-9.4, §10.3, §12, §17.3, §21.6).
#[allow(clippy::too_many_arguments)] // one slice per conform section
pub fn conform_tables(
    results: &[RowResult],
    pairs: &[PairResult],
    jvps: &[JvpResult],
    fsdp: &[ProgramResult],
    progs: &[ProgramResult],
    generated: &[crate::generated::Report],
    pending: Option<bool>,
    uneven: Option<&[crate::uneven::ConformRow]>,
    transforms: Option<&[crate::batching::ConformRow]>,
) -> Tables {
    let defect = "negative twin not rejected: the checker is defective".to_string();
    let mut tables = vec![Table {
        title: "seed rule tables".into(),
        columns: vec![
            "system", "id", "typing", "claim", "verdict", "twin", "finding",
        ],
        rows: results
            .iter()
            .map(|r| {
                let claim = match r.rule.claim {
                    crate::conform::Claim::Allowed => "allowed",
                    crate::conform::Claim::Forbidden => "forbidden",
                    crate::conform::Claim::Unlisted => "unlisted",
                };
                conform_row(
                    r.rule.id.to_string(),
                    vec![
                        r.rule.system.to_string(),
                        r.rule.id.to_string(),
                        format!(
                            "{}: {} -> {}",
                            r.rule.op,
                            r.rule.inputs.join(", "),
                            r.rule.output
                        ),
                        claim.into(),
                        verdict_word(&r.verdict),
                        twin_cell(r.twin_rejected()).into(),
                        r.finding().unwrap_or_default(),
                    ],
                    (r.twin_rejected() == Some(false)).then(|| defect.clone()),
                    r.verdict.violation().map(|x| x.one_line()),
                )
            })
            .collect(),
    }];
    tables.push(Table {
        title: "collectives and casts".into(),
        columns: vec!["system", "id", "params", "verdict", "twin"],
        rows: pairs
            .iter()
            .map(|p| {
                conform_row(
                    p.row.id.to_string(),
                    vec![
                        p.row.system.to_string(),
                        p.row.id.to_string(),
                        p.params.to_string(),
                        verdict_word(&p.verdict),
                        twin_cell(Some(p.twin_rejected())).into(),
                    ],
                    (!p.twin_rejected()).then(|| defect.clone()),
                    p.verdict.violation().map(|x| x.one_line()),
                )
            })
            .collect(),
    });
    tables.push(Table {
        title: "forward-mode rules".into(),
        columns: vec!["system", "id", "jvp", "verdict", "twin"],
        rows: jvps
            .iter()
            .map(|j| {
                conform_row(
                    j.row.id.to_string(),
                    vec![
                        j.row.system.to_string(),
                        j.row.id.to_string(),
                        j.row.jvp.to_string(),
                        verdict_word(&j.verdict),
                        twin_cell(Some(j.twin_rejected())).into(),
                    ],
                    (!j.twin_rejected()).then(|| defect.clone()),
                    j.verdict.violation().map(|x| x.one_line()),
                )
            })
            .collect(),
    });
    let programs = |title: &str, ps: &[ProgramResult]| Table {
        title: title.into(),
        columns: vec!["name", "verdict", "expected", "forward", "backward"],
        rows: ps
            .iter()
            .map(|p| {
                let expect = p.expect.map(|x| x.code()).unwrap_or("sound");
                conform_row(
                    p.name.to_string(),
                    vec![
                        p.name.to_string(),
                        verdict_word(&p.verdict),
                        expect.into(),
                        p.forward_cost.to_string(),
                        p.backward_cost.to_string(),
                    ],
                    (!p.as_expected()).then(|| {
                        format!(
                            "expected {expect}, got {}{}",
                            verdict_word(&p.verdict),
                            p.verdict
                                .violation()
                                .map(|x| format!(": {}", x.one_line()))
                                .unwrap_or_default()
                        )
                    }),
                    p.verdict.violation().map(|x| x.one_line()),
                )
            })
            .collect(),
    };
    tables.push(programs("FSDP strategies", fsdp));
    if !progs.is_empty() {
        tables.push(programs("whole layers as programs", progs));
    }
    tables.push(Table {
        title: "generated programs, depth 1".into(),
        columns: vec!["system", "summary"],
        rows: generated
            .iter()
            .map(|r| {
                conform_row(
                    r.system.to_string(),
                    vec![r.system.to_string(), crate::generated::summary_line(r)],
                    None,
                    None,
                )
            })
            .collect(),
    });
    if let Some(ok) = pending {
        tables.push(Table {
            title: "pending reductions beyond sums".into(),
            columns: vec!["section", "result"],
            rows: vec![conform_row(
                "pending kinds".into(),
                vec![
                    "pending kinds".into(),
                    if ok { "as pinned" } else { "NOT as pinned" }.into(),
                ],
                (!ok).then(|| "the pending-kind results are not as pinned".to_string()),
                None,
            )],
        });
    }
    if let Some(rows) = uneven {
        tables.push(pinned_table("uneven shards", rows));
    }
    if let Some(rows) = transforms {
        tables.push(pinned_table("transforms", rows));
    }
    Tables {
        command: "conform",
        heading: format!(
            "spmd-check conform: {} seed rules, {} collective pairs, {} JVP rules, {} FSDP strategies, {} programs",
            results.len(),
            pairs.len(),
            jvps.len(),
            fsdp.len(),
            progs.len()
        ),
        tables,
    }
}

/// A section of pinned verdicts (uneven shards, SPEC.md §23.12;
/// transforms, §24.5): one row per rule, failing where its verdict is not
/// the pinned one (a twin that is not rejected included), with the
/// counterexample beside a row that is unsound as pinned.
fn pinned_table<R: crate::pinned::Verdicted>(title: &str, rows: &[crate::pinned::Row<R>]) -> Table {
    Table {
        title: title.into(),
        columns: vec!["system", "rule", "verdict", "pinned", "twin"],
        rows: rows
            .iter()
            .map(|r| {
                let pinned = r.pinned.unwrap_or("(none)");
                let got = r.report.key();
                conform_row(
                    r.name.clone(),
                    vec![
                        r.dialect.name().to_string(),
                        r.name.clone(),
                        r.report.word(),
                        pinned.to_string(),
                        if r.twin() {
                            twin_cell(Some(r.as_pinned())).into()
                        } else {
                            String::new()
                        },
                    ],
                    (!r.as_pinned())
                        .then(|| format!("pinned {pinned}, got {got}: {}", r.report.word())),
                    r.report.line(),
                )
            })
            .collect(),
    }
}

/// `registry`'s rows (SPEC.md §22.3): an incorrect claim fails; latent and
/// undetermined ones are skipped with their reason; correct ones pass, and
/// a missing combination passes with a note (nothing registered is wrong).
pub fn registry_tables(rep: &crate::registry::Report, incorrect_only: bool) -> Tables {
    use crate::registry::Class;
    let versions: Vec<String> = rep
        .file
        .versions
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let rows = rep
        .rows
        .iter()
        .filter(|r| !incorrect_only || matches!(r.class, Class::Incorrect | Class::Latent))
        .map(|r| {
            let op = r.shown_op();
            let (outcome, message, note) = match r.class {
                Class::Correct => (Outcome::Pass, None, None),
                Class::Missing => (Outcome::Pass, None, Some(r.detail.clone())),
                Class::Incorrect => (Outcome::Fail, Some(r.detail.clone()), None),
                Class::Latent | Class::Undetermined => {
                    (Outcome::Skip, Some(r.detail.clone()), None)
                }
            };
            Row {
                name: format!("{op} {}", r.placements()),
                cells: vec![
                    op,
                    r.placements(),
                    r.class.word().to_string(),
                    r.detail.clone(),
                ],
                outcome,
                message,
                note,
            }
        })
        .collect();
    Tables {
        command: "registry",
        heading: format!(
            "registry {} ({}): {}",
            rep.file.system,
            versions.join(", "),
            crate::registry::summary(rep)
        ),
        tables: vec![Table {
            title: format!("{} registry", rep.file.system),
            columns: vec!["op", "placements", "class", "detail"],
            rows,
        }],
    }
}
