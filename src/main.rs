//! The `spmd-check` command line. Exit codes: 0 all sound / agreed, 1 a
//! finding or counterexample, 2 bad input.

use clap::{CommandFactory, Parser};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use spmd_check::collectives::{check_pair, pair_rows, PairResult};
use spmd_check::conform::{check_row, rows, RowResult};
use spmd_check::derive::{derive, derive_global};
use spmd_check::jvps::{check_jvp, jvp_rows, JvpResult};
use spmd_check::programs::ProgramResult;
use spmd_check::report;
use spmd_check::run::UsageError;
use std::io::IsTerminal;
use std::process::ExitCode;

// Checking allocates many small tensors; mimalloc makes that markedly faster.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod check_cmd;
mod cli;
use check_cmd::{check_files, CheckOpts};
use cli::{Cli, Cmd};

/// A `--json` document, pretty-printed.
fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).expect("json"));
}

fn bar(len: u64, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(if len > 0 {
            "{spinner} {msg} [{bar:30}] {pos}/{len} ({per_sec})"
        } else {
            "{spinner} {msg} {pos} ({per_sec})"
        })
        .expect("valid template")
        .progress_chars("=> "),
    );
    b
}

fn run() -> Result<ExitCode, UsageError> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Derive {
            op,
            expr,
            global,
            dialect,
            partial,
            uneven,
            json,
            format,
            scope,
        } => {
            let format = report::Format::parse(format.as_deref(), json)?;
            if let Some(rule) = uneven {
                spmd_check::uneven::derive_cmd(
                    op.as_deref(),
                    expr.as_deref(),
                    &rule,
                    global || dialect.is_some() || partial.is_some(),
                    format,
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(k) = partial {
                return spmd_check::derive::derive_partial_cmd(
                    op.as_deref(),
                    expr.as_deref(),
                    &k,
                    global || dialect.is_some(),
                    format,
                    scope.partial_scope(),
                );
            }
            let sys = spmd_check::derive::dialect_for(dialect.as_deref(), op.as_deref(), global)?;
            let f = spmd_check::derive::op_or_expr(
                op.as_deref(),
                expr.as_deref(),
                "give an OP (e.g. `derive mul`) or --expr \"x * y\"",
                "give either OP or --expr, not both",
            )?;
            let b = bar(0, format.quiet());
            b.set_message("instances");
            let rows = if global {
                derive_global(&f, &scope.scope(), &|n| b.inc(n))?
            } else {
                derive(&f, &scope.scope(), &|n| b.inc(n))?
            };
            b.finish_and_clear();
            let classified = match sys {
                Some((sys, class)) => {
                    Some((spmd_check::derive::classify_rows(&rows, sys, class)?, sys))
                }
                None => None,
            };
            match (format, &classified) {
                (report::Format::Json, _) => {
                    let typings = match &classified {
                        Some((rs, sys)) => report::dialect_json(rs, sys),
                        None => report::derive_json(&rows),
                    };
                    let system = classified.as_ref().map(|c| c.1.name);
                    let body = report::derive_body(&f.text, global, system, typings);
                    print_json(&report::document("derive", body));
                }
                (report::Format::Markdown | report::Format::Junit, _) => {
                    let dialect = classified.as_ref().map(|(rs, sys)| (rs.as_slice(), *sys));
                    let t = report::table::derive_tables(&f.text, &rows, dialect);
                    report::print_tables(format, &t);
                }
                (report::Format::Text, Some((rs, sys))) => {
                    println!("`{}` under {} (SPEC.md §15.3):", f.text, sys.name);
                    print!("{}", report::dialect_text(rs, sys));
                }
                (report::Format::Text, None) => {
                    println!("typings of `{}` on one mesh axis (SPEC.md §9.1):", f.text);
                    print!("{}", report::derive_text(&rows));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Patterns {
            dialect,
            json,
            scope,
        } => {
            let systems: Vec<&'static spmd_check::dialects::System> = match &dialect {
                Some(d) => vec![spmd_check::dialects::system(d).map_err(UsageError)?],
                None => spmd_check::dialects::SYSTEMS.iter().collect(),
            };
            let res = spmd_check::patterns::run(&systems, &scope.scope())?;
            if json {
                let v = spmd_check::patterns::json(&res);
                print_json(&report::document(
                    "patterns",
                    serde_json::json!({ "patterns": v }),
                ));
            } else {
                print!("{}", spmd_check::patterns::text(&res));
            }
            Ok(if res.iter().all(|r| r.as_expected()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Cmd::Programs {
            dialect,
            depth,
            random,
            seed,
            max_steps,
            partition,
            dry_run,
            uneven,
            vmap,
            json,
            scope,
        } => {
            let sys = spmd_check::dialects::system(&dialect).map_err(UsageError)?;
            if vmap {
                if random.is_some() || partition.is_some() || dry_run || uneven.is_some() {
                    return Err(UsageError(
                        "--vmap is a mode of its own: it does not go with --random, --partition, --dry-run or --uneven".into(),
                    ));
                }
                let failed = spmd_check::vmap_program::programs_cmd(sys, depth as usize, json)?;
                return Ok(ExitCode::from(u8::from(failed)));
            }
            if let Some(rule) = uneven {
                if random.is_some() || partition.is_some() || dry_run {
                    return Err(UsageError(
                        "--uneven is a mode of its own: it does not go with --random, --partition or --dry-run".into(),
                    ));
                }
                let failed =
                    spmd_check::uneven::programs_cmd(sys.dialect, &rule, depth as usize, json)?;
                return Ok(ExitCode::from(u8::from(failed)));
            }
            if dry_run {
                let t = std::time::Instant::now();
                let s = spmd_check::generated::TypingSummary::of(&spmd_check::generated::classify(
                    sys,
                    depth as usize,
                ));
                if json {
                    let body = serde_json::json!({"mode": "dry_run", "typing": s.json()});
                    print_json(&report::document("programs", body));
                } else {
                    println!(
                        "{} depth {} (typing only, nothing checked): generated {}, accepted {}, rejected {}, classes to check {} ({:.1} s)",
                        s.system,
                        s.depth,
                        s.generated,
                        s.accepted,
                        s.generated - s.accepted,
                        s.distinct,
                        t.elapsed().as_secs_f64()
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            let part = partition
                .as_deref()
                .map(spmd_check::partition::Partition::parse)
                .transpose()?;
            if part.is_some() && random.is_some() {
                return Err(UsageError(
                    "--partition splits the exhaustive run; it does not go with --random".into(),
                ));
            }
            if let Some(n) = random {
                let rep =
                    spmd_check::generated::random(sys, n, seed, max_steps as usize, &scope.scope());
                if json {
                    let body = serde_json::json!({"mode": "random", "report": rep.json()});
                    print_json(&report::document("programs", body));
                } else {
                    print!("{}", rep.text());
                }
                return Ok(ExitCode::SUCCESS);
            }
            let b = bar(1, false);
            let opts = spmd_check::generated::RunOptions {
                partition: part,
                progress: Some(&b),
            };
            let scope = scope.scope();
            let r = spmd_check::generated::run_with(sys, depth as usize, &scope, &opts);
            b.finish_and_clear();
            eprintln!("{}", r.timings.line());
            match (json, part) {
                (true, Some(p)) => print_json(&spmd_check::generated::part_json(&r, p, &scope)),
                (true, None) => print_json(&report::document(
                    "programs",
                    spmd_check::generated::exhaustive_body(&r.report),
                )),
                (false, Some(p)) => print!(
                    "part {}/{}: the oracle checked {} of the {} classes (those whose index i has i mod {} = {}); the counts below are theirs\n{}",
                    p.k, p.n, r.classes.len(), r.summary.distinct, p.n, p.k - 1, r.report.text()
                ),
                (false, None) => print!("{}", r.report.text()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Conform {
            transformer: true,
            json,
            format,
            ..
        } => {
            if report::Format::parse(format.as_deref(), json)? != report::Format::Text {
                return Err(UsageError(
                    "--transformer has a text report only (no --json or --format)".into(),
                ));
            }
            let rows =
                spmd_check::conform::transformer_table(&spmd_check::conform::transformer_scope())?;
            print!("{}", spmd_check::conform::transformer_text(&rows));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Conform {
            dialect,
            json,
            format,
            partition,
            scope,
            ..
        } => {
            use spmd_check::partition::{Partition, Section};
            let format = report::Format::parse(format.as_deref(), json)?;
            let json = format == report::Format::Json;
            let part = partition.as_deref().map(Partition::parse).transpose()?;
            let scope = scope.scope();
            let rs = rows(dialect.as_deref())?;
            let prs = pair_rows(dialect.as_deref());
            let jrs = jvp_rows(dialect.as_deref());
            let with_programs = dialect.is_none();
            // Items in a single run's order: rows, collectives, JVP rules,
            // FSDP strategies, layers; a part owns index i when i mod N = K - 1.
            let layers: &[spmd_check::programs::Expected] = if with_programs {
                spmd_check::programs::LAYERS
            } else {
                &[]
            };
            let strategies = spmd_check::fsdp::STRATEGIES;
            // Generated programs at depth 1, one line per system (SPEC.md §17.3).
            let only = dialect
                .as_deref()
                .map(spmd_check::dialects::system)
                .transpose()
                .map_err(UsageError)?;
            let gen_systems: Vec<&spmd_check::dialects::System> = spmd_check::dialects::SYSTEMS
                .iter()
                .filter(|s| only.is_none_or(|o| o.name == s.name))
                .collect();
            let starts = [
                0,
                rs.len(),
                rs.len() + prs.len(),
                rs.len() + prs.len() + jrs.len(),
                rs.len() + prs.len() + jrs.len() + strategies.len(),
                rs.len() + prs.len() + jrs.len() + strategies.len() + layers.len(),
                rs.len()
                    + prs.len()
                    + jrs.len()
                    + strategies.len()
                    + layers.len()
                    + gen_systems.len(),
                rs.len()
                    + prs.len()
                    + jrs.len()
                    + strategies.len()
                    + layers.len()
                    + gen_systems.len()
                    + usize::from(with_pending_kinds(dialect.as_deref())),
                rs.len()
                    + prs.len()
                    + jrs.len()
                    + strategies.len()
                    + layers.len()
                    + gen_systems.len()
                    + usize::from(with_pending_kinds(dialect.as_deref()))
                    + 1,
            ];
            // Pending reductions beyond sums (SPEC.md §21.6): with every
            // system, or with dtensor or jax, whose rules it holds; one entry.
            let with_pending = with_pending_kinds(dialect.as_deref());
            let owned = |sec: usize, len: usize| -> Vec<usize> {
                (0..len)
                    .filter(|i| part.is_none_or(|p| p.owns(starts[sec] + i)))
                    .collect()
            };
            let own = [
                owned(0, rs.len()),
                owned(1, prs.len()),
                owned(2, jrs.len()),
                owned(3, strategies.len()),
                owned(4, layers.len()),
                owned(5, gen_systems.len()),
                owned(6, usize::from(with_pending)),
                owned(7, 1),
                owned(8, 1),
            ];
            let rs: Vec<_> = own[0].iter().map(|&i| rs[i]).collect();
            let prs: Vec<_> = own[1].iter().map(|&i| prs[i]).collect();
            let jrs: Vec<_> = own[2].iter().map(|&i| jrs[i]).collect();
            let copy = |e: &spmd_check::programs::Expected| spmd_check::programs::Expected {
                name: e.name,
                expect: e.expect,
                shapes: e.shapes,
            };
            let my_strategies: Vec<_> = own[3].iter().map(|&i| copy(&strategies[i])).collect();
            let my_layers: Vec<_> = own[4].iter().map(|&i| copy(&layers[i])).collect();
            // One step per table row; FSDP and the programs count one each.
            let steps = rs.len() + prs.len() + jrs.len() + 1 + usize::from(with_programs);
            let b = bar(steps as u64, format.quiet());
            // The sections run side by side, not one after another, so that
            // one section's slowest row does not leave the other cores idle.
            b.set_message("checking");
            let seed_rows = || -> Result<Vec<RowResult>, UsageError> {
                rs.par_iter()
                    .map(|r| {
                        let res = check_row(r, &scope, &|_| {});
                        b.inc(1);
                        res
                    })
                    .collect()
            };
            let pair_rows = || -> Result<Vec<PairResult>, UsageError> {
                prs.par_iter()
                    .map(|r| {
                        let res = check_pair(r, &scope);
                        b.inc(1);
                        res
                    })
                    .collect()
            };
            let jvp_rows = || -> Result<Vec<JvpResult>, UsageError> {
                jrs.par_iter()
                    .map(|r| {
                        let res = check_jvp(r, &scope);
                        b.inc(1);
                        res
                    })
                    .collect()
            };
            let fsdp_rows = || {
                let r = spmd_check::programs::check_table(
                    "examples/fsdp.toml",
                    spmd_check::fsdp::FSDP_TOML,
                    &my_strategies,
                    &scope,
                );
                b.inc(1);
                r
            };
            let layer_rows = || {
                if !with_programs {
                    return Ok(vec![]);
                }
                let r = spmd_check::programs::check_table(
                    "examples/programs.toml",
                    spmd_check::programs::LAYERS_TOML,
                    &my_layers,
                    &scope,
                );
                b.inc(1);
                r
            };
            let generated_rows = || -> Vec<spmd_check::generated::Report> {
                let systems: Vec<_> = own[5].iter().map(|&i| gen_systems[i]).collect();
                spmd_check::generated::run_many(&systems, 1, &scope)
            };
            let pending_rows = || match own[6].is_empty() {
                true => Ok(None),
                false => spmd_check::conform::partial_kinds_section().map(Some),
            };
            // Uneven shards (SPEC.md §23.12): one entry, the rules of the
            // systems asked for.
            let uneven_rows = || match own[7].is_empty() {
                true => Ok(None),
                false => spmd_check::uneven::conform_section(dialect.as_deref()).map(Some),
            };
            // Transforms (SPEC.md §24.5): one entry, the rules of the
            // systems asked for.
            let transforms_rows = || match own[8].is_empty() {
                true => Ok(None),
                false => spmd_check::batching::conform_section(dialect.as_deref()).map(Some),
            };
            let (
                (results, pairs),
                ((jvps, fsdp), ((progs, generated), (pending, (uneven, transforms)))),
            ) = rayon::join(
                || rayon::join(seed_rows, pair_rows),
                || {
                    rayon::join(
                        || rayon::join(jvp_rows, fsdp_rows),
                        || {
                            rayon::join(
                                || rayon::join(layer_rows, generated_rows),
                                || {
                                    rayon::join(pending_rows, || {
                                        rayon::join(uneven_rows, transforms_rows)
                                    })
                                },
                            )
                        },
                    )
                },
            );
            let (results, pairs, jvps) = (results?, pairs?, jvps?);
            let (fsdp, progs, pending, uneven, transforms) =
                (fsdp?, progs?, pending?, uneven?, transforms?);
            b.finish_and_clear();
            let wrong = fsdp.iter().chain(&progs).any(|p| !p.as_expected())
                || pending.as_ref().is_some_and(|p| !p.2)
                || uneven.as_ref().is_some_and(|u| !u.ok)
                || transforms.as_ref().is_some_and(|t| !t.ok);
            if let (true, Some(p)) = (json, part) {
                let sec = |name, sec: usize, total, vals: Vec<serde_json::Value>| Section {
                    name,
                    total,
                    entries: own[sec].iter().copied().zip(vals).collect(),
                };
                let key = serde_json::json!({
                    "dialect": dialect,
                    "scope": report::scope_json(&scope),
                });
                let partition = spmd_check::partition::envelope(
                    p,
                    key,
                    vec![
                        sec(
                            "local_rules",
                            0,
                            starts[1],
                            results.iter().map(report::row_json).collect(),
                        ),
                        sec(
                            "collectives",
                            1,
                            starts[2] - starts[1],
                            pairs.iter().map(PairResult::json).collect(),
                        ),
                        sec(
                            "jvps",
                            2,
                            starts[3] - starts[2],
                            jvps.iter().map(report::jvp_json).collect(),
                        ),
                        sec(
                            "fsdp",
                            3,
                            strategies.len(),
                            fsdp.iter().map(report::program_json).collect(),
                        ),
                        sec(
                            "programs",
                            4,
                            layers.len(),
                            progs.iter().map(report::program_json).collect(),
                        ),
                        sec(
                            "generated_programs",
                            5,
                            gen_systems.len(),
                            generated
                                .iter()
                                .map(spmd_check::generated::summary_json)
                                .collect(),
                        ),
                        sec(
                            "pending_kinds",
                            6,
                            usize::from(with_pending),
                            pending.iter().map(|p| p.1.clone()).collect(),
                        ),
                        sec(
                            "uneven",
                            7,
                            1,
                            uneven.iter().map(|u| u.json.clone()).collect(),
                        ),
                        sec(
                            "transforms",
                            8,
                            1,
                            transforms.iter().map(|t| t.json.clone()).collect(),
                        ),
                    ],
                );
                let doc = conform_json(
                    &results,
                    &pairs,
                    &jvps,
                    &fsdp,
                    &progs,
                    &generated,
                    pending.as_ref().map(|p| &p.1),
                    uneven.as_ref().map(|u| &u.json),
                    transforms.as_ref().map(|t| &t.json),
                );
                print_json(&spmd_check::partition::part_document(doc, partition));
                let defect = results.iter().any(|r| r.twin_rejected() == Some(false))
                    || pairs.iter().any(|p| !p.twin_rejected())
                    || jvps.iter().any(|j| !j.twin_rejected());
                return Ok(ExitCode::from(u8::from(defect || wrong)));
            }
            if matches!(format, report::Format::Markdown | report::Format::Junit) {
                let t = report::table::conform_tables(
                    &results,
                    &pairs,
                    &jvps,
                    &fsdp,
                    &progs,
                    &generated,
                    pending.as_ref().map(|p| p.2),
                    uneven.as_ref().map(|u| u.rows.as_slice()),
                    transforms.as_ref().map(|t| t.rows.as_slice()),
                );
                report::print_tables(format, &t);
            }
            let code = conform_output(
                &results,
                &pairs,
                &jvps,
                &fsdp,
                &progs,
                &generated,
                pending.as_ref().map(|p| &p.1),
                uneven.as_ref().map(|u| &u.json),
                transforms.as_ref().map(|t| &t.json),
                format,
            );
            if format == report::Format::Text {
                fsdp_output(&fsdp);
                programs_output(&progs);
                println!("\ngenerated programs, depth 1 (SPEC.md §17; `spmd-check programs` goes deeper):");
                for r in &generated {
                    println!("  {}", spmd_check::generated::summary_line(r));
                }
                if let Some((text, _, _)) = &pending {
                    print!("{text}");
                }
                if let Some(u) = &uneven {
                    print!("{}", u.text);
                }
                if let Some(t) = &transforms {
                    print!("{}", t.text);
                }
                // One summary line, last (issue 26).
                let sound = results.iter().filter(|r| r.verdict.is_sound()).count();
                let ok = !wrong && code == ExitCode::SUCCESS;
                println!(
                    "\nconform: {} seed rules ({sound} sound, {} not), {} collective pairs, {} JVP rules, {} FSDP strategies, {} programs, generated programs of {} systems{}{}{}; {}",
                    results.len(),
                    results.len() - sound,
                    pairs.len(),
                    jvps.len(),
                    fsdp.len(),
                    progs.len(),
                    generated.len(),
                    match &pending {
                        Some((_, _, true)) => ", pending kinds as pinned",
                        Some((_, _, false)) => ", pending kinds NOT as pinned",
                        None => "",
                    },
                    match &uneven {
                        Some(u) if u.ok => ", uneven shards as pinned",
                        Some(_) => ", uneven shards NOT as pinned",
                        None => "",
                    },
                    match &transforms {
                        Some(t) if t.ok => ", transforms as pinned",
                        Some(_) => ", transforms NOT as pinned",
                        None => "",
                    },
                    if ok {
                        "every twin rejected and every result as expected (exit 0)"
                    } else {
                        "NOT as expected (exit 1)"
                    }
                );
            }
            Ok(if wrong { ExitCode::from(1) } else { code })
        }
        Cmd::Transposes {
            op,
            from,
            to,
            dialect,
            json,
            scope,
        } => {
            let d = spmd_semantics::Dialect::parse(&dialect).map_err(UsageError)?;
            let found = spmd_check::transposes::search(d, &op, &from, &to, &scope.scope())?;
            let (m, shape) = spmd_check::transposes::reference();
            if json {
                let v: Vec<serde_json::Value> = found
                    .iter()
                    .map(|f| {
                        serde_json::json!({
                            "backward": spmd_check::transposes::describe_typed(&f.backward, d),
                            "cost": f.cost.to_string(),
                            "proof": f.verdict.proof(),
                        })
                    })
                    .collect();
                let body = serde_json::json!({
                    "forward": op, "from": from, "to": to, "dialect": d.name(), "transposes": v,
                });
                print_json(&report::document("transposes", body));
            } else {
                println!("correct transposes of `{op}` : {from} -> {to}, cheapest first (elements per rank on {m}, input {shape:?}; SPEC.md §10.5):");
                for f in &found {
                    println!(
                        "  {:>6}  {:<60} {}",
                        f.cost.to_string(),
                        spmd_check::transposes::describe_typed(&f.backward, d),
                        report::verdict_word(&f.verdict)
                    );
                }
                if found.is_empty() {
                    println!("  none in the catalogue or its compositions of two");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check {
            files,
            seed,
            cases,
            json,
            format,
            emit,
            emit_dir,
            allow_vacuous,
            time_limit,
            partition,
            scope,
        } => {
            let partition = partition
                .as_deref()
                .map(spmd_check::partition::Partition::parse)
                .transpose()?;
            if let Some(secs) = time_limit {
                spmd_check::run::set_deadline(
                    std::time::Instant::now() + std::time::Duration::from_secs(secs),
                );
            }
            let format = report::Format::parse(format.as_deref(), json)?;
            if emit.is_some() && matches!(format, report::Format::Markdown | report::Format::Junit)
            {
                return Err(UsageError(
                    "--emit goes with the text or the JSON report, not with --format markdown or junit"
                        .into(),
                ));
            }
            let opts = CheckOpts {
                seed,
                cases,
                format,
                emit,
                emit_dir,
                allow_vacuous,
                partition,
            };
            check_files(&files, &opts, &scope.scope())
        }
        Cmd::Merge {
            files,
            allow_vacuous,
        } => {
            let mut docs = Vec::new();
            for f in &files {
                let text = spmd_check::rules::read_text(f)?;
                let v: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| UsageError(format!("{f}: not JSON: {e}")))?;
                docs.push((f.clone(), v));
            }
            let merged = spmd_check::partition::merge(&docs, spmd_check::generated::ASSEMBLE)?;
            let command = spmd_check::partition::command_of(&docs[0].1).unwrap_or("");
            println!("{}", serde_json::to_string_pretty(&merged).expect("json"));
            Ok(ExitCode::from(spmd_check::partition::exit_code(
                command,
                &merged,
                allow_vacuous,
            )))
        }
        Cmd::Fidelity { dir, json, all } => {
            let dir = dir.unwrap_or_else(spmd_check::fidelity::default_dir);
            let results = spmd_check::fidelity::run(&dir)?;
            print!("{}", report::fidelity(&results, json, all));
            let mismatches = results.iter().any(|r| r.class.key() == "model_mismatch");
            Ok(if mismatches {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Cmd::Registry {
            system,
            op,
            incorrect_only,
            all,
            no_missing,
            file,
            live,
            record,
            want,
            show_repro,
            repro_dir,
            json,
            format,
        } => {
            use spmd_check::registry as reg;
            let format = report::Format::parse(format.as_deref(), json)?;
            let (f, source) = reg::load(&system, file, live, None, op.as_deref())?;
            let opts = reg::Options {
                op_glob: op,
                missing: !no_missing,
                record: record.is_some(),
            };
            let rep = reg::run(f, &source, &opts)?;
            if let Some(out) = &record {
                reg::write_pruned(&rep, out)?;
            }
            if let Some(out) = &want {
                reg::write_wanted(&rep, out)?;
            }
            if let Some(dir) = &repro_dir {
                reg::write_repros(&rep, dir)?;
            }
            match format {
                report::Format::Json => {
                    let doc = reg::to_json(&rep, incorrect_only, show_repro);
                    println!("{}", report::document("registry", doc));
                }
                report::Format::Text => {
                    let listing = match (all, incorrect_only) {
                        (true, _) => reg::Listing::All,
                        (_, true) => reg::Listing::IncorrectOnly,
                        _ => reg::Listing::PerOp,
                    };
                    print!("{}", reg::text(&rep, listing, show_repro))
                }
                f => report::print_tables(f, &report::table::registry_tables(&rep, incorrect_only)),
            }
            let incorrect = reg::any_incorrect(&rep);
            Ok(if incorrect {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Cmd::Bench {
            json,
            scopes: true,
            only,
        } => {
            spmd_check::bench_scopes::print(json, only.as_deref()).map_err(UsageError)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench { json, only, .. } => {
            spmd_check::bench::print(json, only.as_deref()).map_err(UsageError)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "spmd-check", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Man { dir } => {
            let cmd = Cli::command();
            match dir {
                Some(d) => clap_mangen::generate_to(cmd, &d)
                    .map_err(|e| UsageError(format!("{d}: cannot write the manual pages: {e}")))?,
                None => clap_mangen::Man::new(cmd)
                    .render(&mut std::io::stdout())
                    .map_err(|e| UsageError(format!("cannot print the manual page: {e}")))?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { job, json, check } => {
            let r = spmd_check::job::run_any(&job, check)?;
            if json {
                println!("{}", report::document("run", r.to_json()));
            } else {
                print!("{}", r.to_text());
            }
            Ok(ExitCode::from(r.exit_code()))
        }
    }
}

/// A rule `check` reports with its own words (pending kinds, uneven
/// shards): no test or script is emitted for it yet.
struct OwnReport<'a> {
    file: &'a str,
    word: String,
    body: &'a str,
    failed: bool,
    /// What it is, for the note that nothing is emitted.
    what: &'a str,
}

impl OwnReport<'_> {
    fn print(
        &self,
        rep: &spmd_check::check::RuleReport,
        json: bool,
        text: bool,
        emit: Option<&str>,
        out_json: &mut Vec<serde_json::Value>,
    ) {
        if json {
            let emitted = match (self.failed, emit) {
                (true, Some(lang)) => Some(serde_json::json!({"kind": lang, "path": null,
                    "why": format!("no test or script is emitted for {} yet", self.what)})),
                _ => None,
            };
            out_json.push(report::check_rule_json(self.file, rep, emitted));
        } else if text {
            let name = report::quoted_name(&rep.name);
            println!("{}: rule \"{name}\": {}", self.file, self.word);
            for n in &rep.elaboration {
                println!("  elaborated: {n}");
            }
            print!("{}", self.body);
            if self.failed && emit.is_some() {
                println!(
                    "  (--emit: no test or script is emitted for {} yet)",
                    self.what
                );
            }
        }
    }
}

/// Whether `conform` runs the pending-kind section for this dialect
/// filter: with every system, or with dtensor or jax, whose rules it holds.
fn with_pending_kinds(dialect: Option<&str>) -> bool {
    matches!(dialect, None | Some("dtensor") | Some("jax"))
}

/// `conform --json`'s document: one array per section (SPEC.md §18.3
/// lists them), for a part its own entries.
#[allow(clippy::too_many_arguments)] // one slice per conform section
fn conform_json(
    results: &[RowResult],
    pairs: &[PairResult],
    jvps: &[JvpResult],
    fsdp: &[ProgramResult],
    progs: &[ProgramResult],
    generated: &[spmd_check::generated::Report],
    pending: Option<&serde_json::Value>,
    uneven: Option<&serde_json::Value>,
    transforms: Option<&serde_json::Value>,
) -> serde_json::Value {
    report::document(
        "conform",
        serde_json::json!({
            "local_rules": results.iter().map(report::row_json).collect::<Vec<_>>(),
            "collectives": pairs.iter().map(PairResult::json).collect::<Vec<_>>(),
            "jvps": jvps.iter().map(report::jvp_json).collect::<Vec<_>>(),
            "fsdp": fsdp.iter().map(report::program_json).collect::<Vec<_>>(),
            "programs": progs.iter().map(report::program_json).collect::<Vec<_>>(),
            "generated_programs": generated.iter().map(spmd_check::generated::summary_json).collect::<Vec<_>>(),
            "pending_kinds": pending.into_iter().cloned().collect::<Vec<_>>(),
            "uneven": uneven.into_iter().cloned().collect::<Vec<_>>(),
            "transforms": transforms.into_iter().cloned().collect::<Vec<_>>(),
        }),
    )
}

#[allow(clippy::too_many_arguments)] // one slice per conform section
fn conform_output(
    results: &[RowResult],
    pairs: &[PairResult],
    jvps: &[JvpResult],
    fsdp: &[ProgramResult],
    progs: &[ProgramResult],
    generated: &[spmd_check::generated::Report],
    pending: Option<&serde_json::Value>,
    uneven: Option<&serde_json::Value>,
    transforms: Option<&serde_json::Value>,
    format: report::Format,
) -> ExitCode {
    let defects = results
        .iter()
        .filter(|r| r.twin_rejected() == Some(false))
        .count()
        + pairs.iter().filter(|p| !p.twin_rejected()).count()
        + jvps.iter().filter(|j| !j.twin_rejected()).count();
    if format == report::Format::Json {
        print_json(&conform_json(
            results, pairs, jvps, fsdp, progs, generated, pending, uneven, transforms,
        ));
    } else if format == report::Format::Text {
        println!("seed rule tables (SPEC.md §9.2):");
        for r in results {
            println!("{}", report::row_line(r));
        }
        let sound: Vec<&RowResult> = results.iter().filter(|r| r.verdict.is_sound()).collect();
        let proofs = sound.iter().filter(|r| r.verdict.proof()).count();
        let twins = results
            .iter()
            .filter(|r| r.twin_rejected() == Some(true))
            .count();
        println!(
            "\n{} rules checked: {} sound ({} proof, {} bounded), {} unsound; {} negative twins rejected",
            results.len(),
            sound.len(),
            proofs,
            sound.len() - proofs,
            results.len() - sound.len(),
            twins
        );
        println!("\nunsound rules, one counterexample each:");
        for r in results.iter().filter(|r| !r.verdict.is_sound()) {
            if let Some(v) = r.verdict.violation() {
                println!("  {}: {}", r.rule.id, v.one_line());
            }
        }
        let findings: Vec<&RowResult> = results.iter().filter(|r| r.finding().is_some()).collect();
        println!(
            "\nfindings: the seed's claim and the oracle disagree ({}):",
            findings.len()
        );
        for r in &findings {
            println!(
                "  {} [{}] \"{}\": {}",
                r.rule.id,
                r.rule.system,
                r.rule.rule,
                r.finding().unwrap_or_default()
            );
        }
        print!("\n{}", report::conform_totals(results));
        collectives_output(pairs);
        if !jvps.is_empty() {
            println!("\nforward-mode rules, declared JVP checked by J1 (SPEC.md §9.4):");
            for j in jvps {
                println!("{}", report::jvp_line(j));
            }
        }
        if defects > 0 {
            println!("\n{defects} negative twins were NOT rejected: the checker is defective");
        }
    }
    if defects > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Exit code of `check` for a vacuous or undetermined rule (SPEC.md §11.2).
const EXIT_INCONCLUSIVE: u8 = 3;
/// Exit code after Ctrl-C, as a shell reports SIGINT.
const EXIT_INTERRUPTED: u8 = 130;
/// How long a command has after Ctrl-C to stop and print what it found.
const INTERRUPT_GRACE: std::time::Duration = std::time::Duration::from_millis(700);

/// Ctrl-C, for every command: the stop flag is set, so that every running
/// enumeration ends at its next instance and the command prints what it
/// found, then exits 130 (see `main`). A command still running after
/// `INTERRUPT_GRACE` (a part that does not look at the flag) is ended with
/// exit 130 and a line saying so; a second Ctrl-C ends it at once.
fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        use std::io::Write;
        use std::sync::atomic::Ordering;
        if spmd_check::run::INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        }
        std::thread::spawn(|| {
            std::thread::sleep(INTERRUPT_GRACE);
            // Holding stdout's lock, no line the command prints is cut.
            let mut out = std::io::stdout().lock();
            let _ = out.flush();
            eprintln!(
                "interrupted: stopped before the report was complete; exit {EXIT_INTERRUPTED}"
            );
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        });
    });
}

fn fsdp_output(strategies: &[ProgramResult]) {
    println!(
        "\nFSDP weight gather, checked end to end; traffic per rank in elements on mesh {}, weight shard {:?} (SPEC.md §10.4):",
        spmd_check::programs::reference(),
        spmd_check::fsdp::weight_shard()
    );
    for s in strategies {
        println!("{}", report::program_line(s));
    }
    if let [a, b, ..] = strategies {
        if let Ok(r) = b.backward_cost.div(&a.backward_cost) {
            println!("  backward traffic, naive / fsdp = {r}");
        }
    }
}

fn programs_output(progs: &[ProgramResult]) {
    if progs.is_empty() {
        return;
    }
    println!(
        "\nwhole layers as programs, checked end to end; traffic per rank in elements on mesh {} (SPEC.md §12):",
        spmd_check::programs::reference()
    );
    for p in progs {
        println!("{}", report::program_line(p));
    }
}

fn collectives_output(pairs: &[PairResult]) {
    if pairs.is_empty() {
        return;
    }
    println!("\ncollectives and casts, forward / declared backward (SPEC.md §10.3):");
    for p in pairs {
        println!("{}", p.line());
    }
    let sound = pairs.iter().filter(|p| p.verdict.is_sound()).count();
    println!(
        "\n{} rows: {} sound, {} unsound",
        pairs.len(),
        sound,
        pairs.len() - sound
    );
    for p in pairs.iter().filter(|p| !p.verdict.is_sound()) {
        if let Some(v) = p.verdict.violation() {
            println!("  {} [{}]: {}", p.row.id, p.params, v.one_line());
        }
    }
    println!("\ntraffic per rank in elements, forward / backward, at 4 ranks per group axis and a local 4 x 4 input (SPEC.md §10.4):");
    for p in pairs {
        if let Some((f, b)) = p.costs() {
            println!(
                "  {:<28} {:>5} / {:<5}",
                p.row.id,
                f.to_string(),
                b.to_string()
            );
        }
    }
    println!("\ntranspose pairs (T1) and completeness gaps:");
    for p in pairs {
        println!("  {:<28} {}", p.row.id, p.t1_word());
    }
}

fn main() -> ExitCode {
    // Output piped into `head` ends quietly instead of panicking on a closed pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    install_interrupt_handler();
    let result = run();
    let interrupted = spmd_check::run::INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst);
    match result {
        Ok(_) if interrupted => {
            eprintln!(
                "interrupted: what was found before is printed above; exit {EXIT_INTERRUPTED}"
            );
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Ok(c) => c,
        Err(e) => {
            eprint!("{}", spmd_check::diagnostic::render_error(&e.to_string()));
            ExitCode::from(if interrupted { EXIT_INTERRUPTED } else { 2 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::builder::StyledStr;
    use clap::{Arg, Command, CommandFactory, Parser};

    /// Every command and argument of `cmd`, its subcommands' too, that has
    /// no help text, as a path: `spmd-check check --json`, `spmd-check merge`.
    fn missing_help(cmd: &Command) -> Vec<String> {
        fn blank(s: Option<&StyledStr>) -> bool {
            s.is_none_or(|s| s.to_string().trim().is_empty())
        }
        fn walk(cmd: &Command, path: &str, out: &mut Vec<String>) {
            if blank(cmd.get_about()) && blank(cmd.get_long_about()) {
                out.push(path.to_string());
            }
            for a in cmd.get_arguments() {
                if blank(a.get_help()) && blank(a.get_long_help()) {
                    let name = match a.get_long() {
                        Some(l) => format!("--{l}"),
                        None => a.get_id().to_string().to_uppercase(),
                    };
                    out.push(format!("{path} {name}"));
                }
            }
            for s in cmd.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), out);
            }
        }
        // Built, so that the generated `help` subcommand and the --help and
        // --version flags are walked too.
        let mut cmd = cmd.clone();
        cmd.build();
        let mut out = Vec::new();
        walk(&cmd, cmd.get_name(), &mut out);
        out
    }

    /// `--help` of every command explains every argument (issue 26: `--json`
    /// had no help, `programs` none at all, `patterns` showed programs').
    #[test]
    fn every_command_and_argument_has_help() {
        assert_eq!(missing_help(&Cli::command()), Vec::<String>::new());
        // Each subcommand's text is its own.
        let cmd = Cli::command();
        let about = |name: &str| {
            cmd.find_subcommand(name)
                .and_then(|c| c.get_about())
                .map(|a| a.to_string())
                .unwrap_or_default()
        };
        assert!(about("patterns").starts_with("Check the named patterns"));
        assert!(about("programs").starts_with("Generate every small program"));
    }

    /// The negative twin: the walker does report a command or an argument
    /// without help, in the real tree and in a bare one.
    #[test]
    fn the_help_walker_reports_what_is_missing() {
        let cut = Cli::command().mut_subcommand("check", |c| {
            c.mut_arg("json", |a| a.help(None::<&str>).long_help(None::<&str>))
        });
        assert_eq!(missing_help(&cut), ["spmd-check check --json"]);
        let bare = Command::new("t").about("a tool").subcommand(
            Command::new("sub")
                .arg(Arg::new("flag").long("flag"))
                .arg(Arg::new("file")),
        );
        // `t help sub` is clap's generated help entry, which copies sub's
        // (missing) text.
        assert_eq!(
            missing_help(&bare),
            ["t sub", "t sub --flag", "t sub FILE", "t help sub"]
        );
    }

    /// The `spmd-check ...` commands of README.md's code blocks, each as its
    /// words (double quotes grouped, the shell's `#` comment, redirection and
    /// `;`/`&&` ending a command).
    fn readme_commands(readme: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut in_code = false;
        for line in readme.lines() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            if !in_code {
                continue;
            }
            let mut words: Vec<String> = Vec::new();
            let (mut cur, mut quoted, mut any) = (String::new(), false, false);
            let mut taking = false;
            let flush = |cur: &mut String, any: &mut bool, words: &mut Vec<String>| {
                if *any {
                    words.push(std::mem::take(cur));
                    *any = false;
                }
            };
            for c in line.chars().chain([' ']) {
                match c {
                    '"' => (quoted, any) = (!quoted, true),
                    c if quoted => cur.push(c),
                    ' ' | '\t' => flush(&mut cur, &mut any, &mut words),
                    '#' | '>' | ';' | '&' | '|' if !any => {
                        flush(&mut cur, &mut any, &mut words);
                        if taking {
                            out.push(std::mem::take(&mut words));
                        }
                        taking = false;
                        words.clear();
                        if c == '#' {
                            break;
                        }
                    }
                    c => (cur, any) = (cur + &c.to_string(), true),
                }
                if words.first().is_some_and(|w| w != "spmd-check") {
                    words.clear();
                }
                taking = words.first().is_some_and(|w| w == "spmd-check");
            }
            if taking {
                out.push(words);
            }
        }
        out
    }

    /// Every `spmd-check` command README.md shows is one the command line
    /// accepts as written (issue 26: README commands that no longer ran).
    #[test]
    fn readme_commands_parse() {
        let readme = include_str!("../README.md");
        let cmds = readme_commands(readme);
        assert!(cmds.len() >= 30, "{}", cmds.len());
        for c in &cmds {
            // `$k` from a shell loop stands for a part number.
            let c: Vec<String> = c.iter().map(|w| w.replace("$k", "1")).collect();
            if let Err(e) = Cli::try_parse_from(&c) {
                panic!("README: `{}` does not parse: {e}", c.join(" "));
            }
        }
        // The twin: a stale flag is caught.
        let stale = readme_commands("```\nspmd-check derive mul --no-such-flag  # x\n```\n");
        assert_eq!(stale, [["spmd-check", "derive", "mul", "--no-such-flag"]]);
        assert!(Cli::try_parse_from(&stale[0]).is_err());
        assert_eq!(
            readme_commands("```\nfor k in 1 2; do spmd-check check \"a b\" > p.json; done\n```"),
            [["spmd-check", "check", "a b"]]
        );
    }

    /// The bash completions offer every subcommand.
    #[test]
    fn bash_completions_name_every_subcommand() {
        let mut cmd = Cli::command();
        let mut out = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "spmd-check", &mut out);
        let bash = String::from_utf8(out).expect("utf-8");
        for s in Cli::command().get_subcommands() {
            assert!(bash.contains(s.get_name()), "{} missing", s.get_name());
        }
    }
}
