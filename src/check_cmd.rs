//! The `check` command: rule files read, each rule checked (replaying its
//! regression file first), reported in the chosen format, counterexamples
//! emitted as tests or scripts on request.

use crate::{bar, print_json, OwnReport, EXIT_INCONCLUSIVE};
use rayon::prelude::*;
use spmd_check::report;
use spmd_check::run::UsageError;
use spmd_generators::Scope;
use std::process::ExitCode;

/// The options of `check` beside its files and scope.
pub(crate) struct CheckOpts {
    pub(crate) seed: u64,
    pub(crate) cases: u32,
    pub(crate) format: report::Format,
    pub(crate) emit: Option<String>,
    pub(crate) emit_dir: String,
    pub(crate) allow_vacuous: bool,
    pub(crate) partition: Option<spmd_check::partition::Partition>,
}

/// `check FILES`: every rule of every file, with its regression file,
/// reported in the chosen format (SPEC.md §11).
pub(crate) fn check_files(
    files: &[String],
    o: &CheckOpts,
    scope: &Scope,
) -> Result<ExitCode, UsageError> {
    use spmd_check::check::{
        check_rule, load_regressions, regression_path, save_regressions, CheckConfig, Stored,
    };
    use std::sync::atomic::Ordering;
    // Read everything first, regression files too: bad input stops before
    // any checking, and a regression file that cannot be read is never
    // overwritten.
    let mut loaded = Vec::new();
    for f in files {
        let text = spmd_check::rules::read_text(f)?;
        let specs = spmd_check::rules::parse_file(f, &text)?;
        let rules = spmd_check::rules::build(f, &text, &specs, scope)?;
        let rpath = regression_path(f);
        let regs = load_regressions(&rpath)?;
        loaded.push((f.clone(), specs, rules, rpath, regs));
    }
    let cfg = CheckConfig {
        scope: scope.clone(),
        cases: o.cases,
        seed: o.seed,
    };
    let interrupted = || spmd_check::run::INTERRUPTED.load(Ordering::SeqCst);
    let total: usize = loaded.iter().map(|l| l.2.len()).sum();
    let b = bar(0, o.format.quiet());
    b.set_message(format!("{total} rules: instances"));
    let json = o.format == report::Format::Json;
    let text = o.format == report::Format::Text;
    let mut out_json = Vec::new();
    // Per file, the rows of --format markdown and junit.
    let mut tables: Vec<(String, Vec<report::table::Row>)> = Vec::new();
    let (mut failed, mut inconclusive) = (false, false);
    // Each rule's index over all files, for --partition (SPEC.md §18.3).
    let mut first_index = 0;
    let mut indices = Vec::new();
    for (f, specs, rules, rpath, regs) in &mut loaded {
        let (f, specs, rules, rpath) = (&*f, &*specs, &*rules, &*rpath);
        let at = first_index;
        first_index += rules.len();
        let owned = |i: usize| o.partition.is_none_or(|p| p.owns(at + i));
        let reports: Vec<_> = rules
            .par_iter()
            .enumerate()
            .filter(|(i, _)| owned(*i) && !interrupted())
            .map(|(i, r)| {
                let stored = regs.get(&r.name).cloned().unwrap_or_default();
                (at + i, check_rule(r, &cfg, &stored, &|n| b.inc(n)))
            })
            .collect();
        if interrupted() {
            b.suspend(|| {
                eprintln!(
                    "interrupted: {} of {} rules of {f} started; those are reported below",
                    reports.len(),
                    rules.len()
                )
            });
        }
        let mut changed = false;
        let mut rows = Vec::new();
        for (index, rep) in &reports {
            indices.push(*index);
            rows.push(report::table::check_row(rep));
            let spec = specs
                .iter()
                .find(|s| s.name == rep.name)
                .expect("a spec per rule");
            // Batching (SPEC.md §24.4) and uneven shards (§23.10): their own
            // verdict and report.
            if let Some((r, what)) = rep.outside_core() {
                failed |= r.failed();
                inconclusive |= r.inconclusive();
                let body = r.report();
                let own = OwnReport {
                    file: f,
                    word: r.word(),
                    body: &body,
                    failed: r.failed(),
                    what,
                };
                own.print(rep, json, text, o.emit.as_deref(), &mut out_json);
                continue;
            }
            // Pending kinds (SPEC.md §21.7): their own verdict and report.
            if let Some(p) = &rep.pending {
                failed |= p.failed();
                inconclusive |= p.inconclusive();
                if let Some(s) = p.stored() {
                    let list = regs.entry(rep.name.clone()).or_default();
                    if !list.contains(&s) {
                        list.push(s);
                        changed = true;
                    }
                }
                let body = p.report(rep.dialect);
                let own = OwnReport {
                    file: f,
                    word: p.word(),
                    body: &body,
                    failed: p.failed(),
                    what: "pending kinds",
                };
                own.print(rep, json, text, o.emit.as_deref(), &mut out_json);
                continue;
            }
            let v = &rep.verdict;
            if let Some(x) = v.violation() {
                failed = true;
                let s = Stored::from_violation(x);
                let list = regs.entry(rep.name.clone()).or_default();
                if !list.contains(&s) {
                    list.push(s);
                    changed = true;
                }
            } else if !v.is_sound() {
                inconclusive = true;
            }
            if json {
                let emitted = match (v.violation(), o.emit.as_deref()) {
                    (Some(x), Some(lang)) => {
                        Some(emit_one(lang, &o.emit_dir, spec, rules, rep, x)?.1)
                    }
                    _ => None,
                };
                out_json.push(report::check_rule_json(f, rep, emitted));
            } else if text {
                println!(
                    "{f}: rule \"{}\": {}",
                    report::quoted_name(&rep.name),
                    report::rule_word(rep)
                );
                // What was checked: the rule as its system elaborated it.
                for n in &rep.elaboration {
                    println!("  elaborated: {n}");
                }
                if let Some(x) = v.violation() {
                    print!("{}", x.report_in(rep.dialect));
                    if let Some(lang) = o.emit.as_deref() {
                        println!("{}", emit_one(lang, &o.emit_dir, spec, rules, rep, x)?.0);
                    }
                }
            }
        }
        if !rows.is_empty() {
            tables.push((f.clone(), rows));
        }
        if changed {
            save_regressions(rpath, regs)?;
        }
        if interrupted() {
            break;
        }
    }
    b.finish_and_clear();
    match (o.format, o.partition) {
        (report::Format::Json, Some(p)) => {
            let key = report::check_key(files, o.seed, o.cases, scope);
            let doc = report::document("check", serde_json::json!({ "rules": out_json }));
            let entries = indices.into_iter().zip(out_json).collect();
            let sec = spmd_check::partition::Section {
                name: "rules",
                total: first_index,
                entries,
            };
            let partition = spmd_check::partition::envelope(p, key, vec![sec]);
            print_json(&spmd_check::partition::part_document(doc, partition));
        }
        (report::Format::Json, None) => print_json(&report::document(
            "check",
            serde_json::json!({ "rules": out_json }),
        )),
        (report::Format::Markdown | report::Format::Junit, _) => {
            report::print_tables(o.format, &report::table::check_tables(tables))
        }
        (report::Format::Text, _) => {}
    }
    Ok(if failed {
        ExitCode::from(1)
    } else if inconclusive && !o.allow_vacuous {
        ExitCode::from(EXIT_INCONCLUSIVE)
    } else {
        ExitCode::SUCCESS
    })
}

/// `--emit rstest|jax|pytorch` for one counterexample: the rstest test, or
/// the script written (or why there is none), as a text line and as the
/// `emitted` object of `--json` (SPEC.md §20.2).
fn emit_one(
    lang: &str,
    dir: &str,
    spec: &spmd_check::rules::RuleSpec,
    rules: &[spmd_check::rules::Rule],
    rep: &spmd_check::check::RuleReport,
    x: &spmd_check::oracle::Violation,
) -> Result<(String, serde_json::Value), UsageError> {
    use serde_json::json;
    use spmd_check::emit::{emit_script, Lang};
    let toml = spmd_check::rules::to_toml(spec);
    if lang == "rstest" {
        let test = spmd_check::check::emit_rstest(&toml, &rep.name, x);
        let j = json!({"kind": "rstest", "test": test});
        return Ok((test, j));
    }
    let lang = Lang::parse(lang).expect("clap checked --emit");
    let rule = rules
        .iter()
        .find(|r| r.name == rep.name)
        .expect("a rule per report");
    match emit_script(lang, rule, &toml, x) {
        Ok(script) => {
            let h = spmd_check::check::Stored::from_violation(x).hash(&rep.name);
            let path = std::path::Path::new(dir).join(format!("repro_{}_{h}.py", lang.name()));
            std::fs::write(&path, script)
                .map_err(|e| UsageError(format!("{}: cannot write: {e}", path.display())))?;
            let shown = path.display().to_string();
            Ok((
                format!("  {} repro written to {shown}", lang.name()),
                json!({"kind": lang.name(), "path": shown}),
            ))
        }
        Err(why) => Ok((
            format!("  no {} repro: {why}", lang.name()),
            json!({"kind": lang.name(), "path": null, "why": why}),
        )),
    }
}
