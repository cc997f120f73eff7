//! `spmd-check registry SYSTEM` (SPEC.md §22): what an installed library
//! registers, checked against its own kernel.
//!
//! A registry file (recorded by `peers/record_registry_*.py`, pruned by
//! `--record`) holds, per op and variant of its scalar arguments, the
//! placements the library claims on one mesh dim (`[output, inputs...]`)
//! and the real kernel's values on a dyadic grid. Each claim is checked by
//! the oracle's pending-placement check (`pending::check_places`, SPEC.md
//! §21.2) with the op evaluated from that table, so the verdict is about
//! the recorded kernel, never a model of it. Every other input placement
//! is searched for output placements that hold but are not claimed
//! (`missing`).

use crate::partial_kinds::{check_places, Scope, Verdict};
use crate::run::UsageError;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use spmd_interp::expr::{Expr, LocalFn};
use spmd_interp::table::{Cell, Domain, KernelTable, Outcome, Table};
use spmd_semantics::pending::{PartialKind, Place, ALL_KINDS};
use spmd_semantics::Q;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

mod backward;
mod collective;
mod file;
mod mesh2d;
mod repro;
pub use file::*;
pub use repro::*;

/// The schema name a registry file carries.
pub const SCHEMA: &str = "spmd-check-registry/1";
/// The largest registry file read (a raw recording is about 35 MB).
pub const MAX_FILE: u64 = 256 << 20;

/// The systems `registry` knows, with the peer script that records each.
pub const SYSTEMS: &[(&str, &str)] = &[
    ("dtensor", "peers/record_registry_dtensor.py"),
    ("spmd_types", "peers/record_registry_spmd_types.py"),
    ("jax", "peers/record_registry_jax.py"),
];

/// How a claim or a placement combination came out (SPEC.md §22.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Correct,
    Incorrect,
    Missing,
    Undetermined,
    /// Wrong as registered (an exact counterexample), but the framework's
    /// eager dispatch does not use the rule there: its repro script ran and
    /// the library chose another placement.
    Latent,
}

impl Class {
    pub fn word(self) -> &'static str {
        match self {
            Class::Correct => "correct",
            Class::Incorrect => "incorrect",
            Class::Missing => "missing",
            Class::Undetermined => "undetermined",
            Class::Latent => "latent",
        }
    }
}

/// One row of the report.
#[derive(Clone, Debug)]
pub struct Row {
    pub op: String,
    pub args: String,
    pub inputs: Vec<String>,
    pub output: String,
    pub class: Class,
    /// The verdict in words: the bounded scope, the counterexample, or why
    /// nothing was decided.
    pub detail: String,
    pub verdict: Option<Value>,
    pub millis: u128,
    /// The counterexample of an incorrect or latent claim.
    pub cex: Option<crate::partial_kinds::Counterexample>,
    /// What its repro script did in the framework, if it was run.
    pub repro: Option<ReproOutcome>,
}

impl Row {
    /// The op with its scalar arguments, as `shown` writes an entry.
    pub fn shown_op(&self) -> String {
        with_args(&self.op, &self.args)
    }
    pub fn placements(&self) -> String {
        format!("{} -> {}", self.inputs.join(", "), self.output)
    }
}

pub struct Options {
    pub op_glob: Option<String>,
    /// Search unclaimed input placements for sound outputs.
    pub missing: bool,
    /// Record which kernel rows were looked up.
    pub record: bool,
}

pub struct Report {
    pub file: File,
    pub source: String,
    pub rows: Vec<Row>,
    /// The library's backward of its claims, on recorded instances
    /// (SPEC.md §22.6): a row per claim.
    pub backward: Vec<Row>,
    /// Claims with no backward recorded: torch has no derivative of the
    /// op on the global tensors.
    pub backward_skipped: usize,
    /// The claims run on a 2x2 mesh, on recorded instances (SPEC.md
    /// §22.7): a row per claim and mesh dim(s).
    pub mesh2d: Vec<Row>,
    pub scope: Scope,
    /// Entries left out by `--op`.
    pub filtered: usize,
    pub pruned: Option<File>,
    /// Shapes and calls of kernels recorded call by call that the run
    /// needed and the file lacks (the recorder fills them in, §22.4).
    pub wanted: Vec<Wanted>,
    /// Claims of the chosen entries on placements the checker does not
    /// model (listed in the file, not checked).
    pub unmodelled: usize,
}

/// The op as the report shows it: `aten.threshold.default(threshold=0.0, value=2.0)`.
pub fn shown(e: &Entry) -> String {
    with_args(&e.op, &e.args)
}

fn with_args(op: &str, args: &str) -> String {
    if args.is_empty() {
        op.to_string()
    } else {
        format!("{op}({args})")
    }
}

/// The system's name, or the nearest one `registry` knows.
pub fn system(name: &str) -> Result<&'static str, UsageError> {
    SYSTEMS
        .iter()
        .find(|(s, _)| *s == name)
        .map(|(s, _)| *s)
        .ok_or_else(|| {
            let known: Vec<&str> = SYSTEMS.iter().map(|(s, _)| *s).collect();
            UsageError(format!(
                "`registry` does not know the system `{}`{} (it knows {})",
                crate::words::excerpt(name),
                spmd_semantics::names::did_you_mean(name, known.iter().copied()),
                known.join(", ")
            ))
        })
}

/// The recorded registry file of `system` in this checkout.
/// The recording is stored gzipped (`SYSTEM.json.gz`); a plain
/// `SYSTEM.json` is read when there is no gzipped one.
pub fn default_file(system: &str) -> String {
    let base = format!("{}/registry/{system}.json", crate::fidelity::default_dir());
    let gz = format!("{base}.gz");
    if std::path::Path::new(&gz).is_file() {
        gz
    } else {
        base
    }
}

/// Run the system's peer script against the installed library (`python`,
/// else the Python of `SPMD_CHECK_TORCH_PYTHON`, else `python3`) and read
/// what it wrote. The script is this checkout's `peers/`.
/// With `only`, the script records just the ops that glob matches.
pub fn record_live(
    system: &str,
    python: Option<&str>,
    only: Option<&str>,
) -> Result<(File, String), UsageError> {
    let script = SYSTEMS
        .iter()
        .find(|(s, _)| *s == system)
        .map(|(_, p)| *p)
        .ok_or_else(|| UsageError(format!("no peer script for `{system}`")))?;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(std::path::Path::new("."));
    let script = root.join(script);
    if !script.is_file() {
        return Err(UsageError(format!(
            "--live: {} is missing (--live runs the peer script of a checkout of spmd-check)",
            script.display()
        )));
    }
    let python = match python {
        Some(p) => p.to_string(),
        None => std::env::var("SPMD_CHECK_TORCH_PYTHON").unwrap_or_else(|_| "python3".into()),
    };
    let out = std::env::temp_dir().join(format!("spmd-check-registry-{}.json", std::process::id()));
    // Run one peer script on the file `out` (its stderr dropped).
    let run = |script: &std::path::Path| -> Result<bool, UsageError> {
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(script).arg(&out);
        if let Some(g) = only {
            cmd.arg(g);
        }
        let status = cmd
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(|e| UsageError(format!("--live: cannot run {python}: {e}")))?;
        Ok(status.success())
    };
    if !run(&script)? {
        return Err(UsageError(format!(
            "--live: {python} {} failed; is the library installed there? (SPMD_CHECK_TORCH_PYTHON names the Python)",
            script.display()
        )));
    }
    // The backward of the claims (and DTensor's of from_local/to_local,
    // and its claims on a 2x2 mesh; SPEC.md §22.6, §22.7) are added to the
    // file by more scripts.
    let more: &[&str] = match system {
        "dtensor" => &[
            "peers/registry_backward_dtensor.py",
            "peers/registry_local_dtensor.py",
            "peers/registry_mesh2d_dtensor.py",
        ],
        "spmd_types" => &["peers/registry_backward_spmd_types.py"],
        "jax" => &["peers/registry_backward_jax.py"],
        _ => &[],
    };
    for step in more {
        let step = root.join(step);
        if !run(&step)? {
            let _ = std::fs::remove_file(&out);
            return Err(UsageError(format!(
                "--live: {python} {} failed",
                step.display()
            )));
        }
    }
    let path = out.to_string_lossy().into_owned();
    let f = read(&path);
    let _ = std::fs::remove_file(&out);
    Ok((f?, format!("the installed library ({python})")))
}

/// The registry a command checks: recorded by the system's peer script
/// now (`live`, under `python`, only the ops `only` matches) or read from
/// `file` (default: this checkout's recording), with where it came from.
/// A file that records another system is bad input.
pub fn load(
    system: &str,
    file: Option<String>,
    live: bool,
    python: Option<&str>,
    only: Option<&str>,
) -> Result<(File, String), UsageError> {
    let system = self::system(system)?;
    let (f, source) = if live {
        record_live(system, python, only)?
    } else {
        let path = file.unwrap_or_else(|| default_file(system));
        (read(&path)?, path)
    };
    if f.system != system {
        return Err(UsageError(format!(
            "{source}: a registry of `{}`, not `{system}`",
            f.system
        )));
    }
    Ok((f, source))
}

/// Write the pruned registry of a `--record` run to `out`.
pub fn write_pruned(rep: &Report, out: &str) -> Result<(), UsageError> {
    let Some(p) = &rep.pruned else {
        return Ok(());
    };
    let text =
        serde_json::to_string(p).map_err(|e| UsageError(format!("{out}: cannot encode: {e}")))?;
    write_maybe_gz(out, &(text + "\n"))
}

/// Write what the run needed and the file lacks (`Report::wanted`) to
/// `out`: `{"wanted": [...], "shapes": N, "calls": N}`.
pub fn write_wanted(rep: &Report, out: &str) -> Result<(), UsageError> {
    let shapes: usize = rep.wanted.iter().map(|w| w.shapes.len()).sum();
    let calls: usize = rep.wanted.iter().map(|w| w.calls.len()).sum();
    let doc = json!({"wanted": rep.wanted, "shapes": shapes, "calls": calls});
    std::fs::write(out, doc.to_string() + "\n")
        .map_err(|e| UsageError(format!("{out}: cannot write: {e}")))
}

/// Whether `name` matches a glob of `*` and `?` (no other syntax).
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with one backtrack point: linear in practice,
    // never exponential.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

/// The scope every claim is checked on: one mesh dim of 2, 3 and 4 ranks,
/// the default local shapes and values, cases of at most 6^5 points
/// (50,000 for an op of three tensor inputs).
pub fn scope() -> Scope {
    Scope {
        ranks: vec![2, 3, 4],
        ..Scope::conform()
    }
}

/// The placements tried for an input or an output when searching for
/// missing rules: those the system has (spmd_types' local types have one
/// pending kind, sum, and its elementwise functions are typed in local
/// mode, where a Varying value has no shard layout).
fn all_places(system: &str) -> Vec<Place> {
    if system == "spmd_types" {
        return vec![Place::Inv, Place::Part(PartialKind::Sum)];
    }
    // JAX's states on one mesh axis: invariant, varying (per-rank values,
    // whose global meaning under `out_specs=P(axis)` is their
    // concatenation) and unreduced (a pending sum).
    if system == "jax" {
        return vec![Place::Inv, Place::Shard(0), Place::Part(PartialKind::Sum)];
    }
    let mut v = vec![Place::Inv, Place::Shard(0)];
    v.extend(ALL_KINDS.iter().map(|&k| Place::Part(k)));
    v
}

/// The placements of a tensor of rank `r` (a scalar has no dim to shard).
/// spmd_types' kernels recorded call by call are typed in its global mode,
/// where a Varying input carries a shard dim (`S(d)`, its PartitionSpec):
/// R, S(d) and P(sum) are its states there.
fn places_of_rank(system: &str, r: usize) -> Vec<Place> {
    let mut v = vec![Place::Inv];
    v.extend((0..r).map(Place::Shard));
    if system == "spmd_types" {
        v.push(Place::Part(PartialKind::Sum));
        return v;
    }
    if system == "jax" {
        v.push(Place::Part(PartialKind::Sum));
    } else {
        v.extend(ALL_KINDS.iter().map(|&k| Place::Part(k)));
    }
    v
}

fn lib_name(p: Place) -> String {
    match p {
        Place::Inv => "R".into(),
        Place::Shard(d) => format!("S({d})"),
        Place::Part(k) => format!("P({})", k.name()),
    }
}

/// Check every entry of `file` (read from `source`).
pub fn run(file: File, source: &str, opts: &Options) -> Result<Report, UsageError> {
    let sc = scope();
    let total = file.entries.len();
    let (index, chosen): (Vec<usize>, Vec<&Entry>) = file
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| opts.op_glob.as_deref().is_none_or(|g| glob(g, &e.op)))
        .unzip();
    let filtered = total - chosen.len();
    let tables: Vec<Option<Arc<KernelTable>>> = chosen
        .iter()
        .map(|e| table(source, e, opts.record))
        .collect::<Result<_, _>>()?;
    let per_entry: Vec<Result<Vec<Row>, UsageError>> = chosen
        .par_iter()
        .zip(tables.par_iter())
        .map(|(e, t)| entry_rows(e, t.as_ref(), &sc, opts.missing, &file.system))
        .collect();
    let mut rows = Vec::new();
    for r in per_entry {
        rows.extend(r?);
    }
    for r in rows.iter_mut().filter(|r| r.class == Class::Incorrect) {
        r.repro = file
            .repros
            .iter()
            .find(|o| {
                o.op == r.op && o.args == r.args && o.inputs == r.inputs && o.output == r.output
            })
            .cloned();
        if let Some(o) = &r.repro {
            if !o.reproduced {
                r.class = Class::Latent;
                r.detail = format!("{}; not what eager runs: {}", r.detail, o.says);
            } else {
                r.detail = format!("{}; reproduced in the framework: {}", r.detail, o.says);
            }
        }
    }
    let pruned = opts.record.then(|| {
        let mut f = file.clone();
        f.entries = chosen
            .iter()
            .zip(&tables)
            .map(|(e, t)| {
                let mut e = (*e).clone();
                if let (Some(k), Some(t)) = (&mut e.tensor_kernel, t) {
                    let (shapes, calls) = t.visited_calls();
                    k.shapes = shapes
                        .into_iter()
                        .map(|(ins, out)| ShapeRecord {
                            ins,
                            out: out.as_ref().ok().cloned(),
                            refused: out.err(),
                        })
                        .collect();
                    k.calls = calls
                        .into_iter()
                        .map(|((ins, vals), out)| {
                            let mut row = Vec::with_capacity(ins.len() + 1);
                            let mut at = 0;
                            for s in ins {
                                let n: usize = s.iter().product();
                                let t = spmd_semantics::Tensor::new(s, vals[at..at + n].to_vec());
                                at += n;
                                row.push(Some(tensor_text(&t)));
                            }
                            row.push(match out {
                                Outcome::Exact(t) => Some(tensor_text(&t)),
                                Outcome::Inexact => None,
                                Outcome::NonFinite => Some("nan".to_string()),
                            });
                            row
                        })
                        .collect();
                }
                if let (Some(k), Some(t)) = (&mut e.kernel, t) {
                    k.rows = t
                        .visited_rows()
                        .into_iter()
                        .map(|(args, out)| {
                            let out = match out {
                                Cell::Exact(q) => Some(q.to_string()),
                                Cell::Inexact => None,
                                Cell::NonFinite => Some("nan".to_string()),
                            };
                            args.iter()
                                .map(|q| Some(q.to_string()))
                                .chain(std::iter::once(out))
                                .collect()
                        })
                        .collect();
                }
                e
            })
            .collect();
        f
    });
    let unmodelled = chosen.iter().map(|e| e.unmodelled.len()).sum();
    let wanted = index
        .iter()
        .zip(&chosen)
        .zip(&tables)
        .filter_map(|((&i, e), t)| {
            let (shapes, calls) = t.as_ref()?.wanted();
            if shapes.is_empty() && calls.is_empty() {
                return None;
            }
            Some(Wanted {
                index: i,
                op: e.op.clone(),
                args: e.args.clone(),
                shapes,
                calls: calls
                    .into_iter()
                    .map(|(ins, vals)| {
                        let mut at = 0;
                        ins.into_iter()
                            .map(|s| {
                                let n: usize = s.iter().product();
                                let t = spmd_semantics::Tensor::new(s, vals[at..at + n].to_vec());
                                at += n;
                                tensor_text(&t)
                            })
                            .collect()
                    })
                    .collect(),
            })
        })
        .collect();
    let mut backward: Vec<Row> = chosen.par_iter().flat_map(|e| backward::rows(e)).collect();
    // A backward counterexample that its script did not reproduce in the
    // framework decides nothing: no false "incorrect".
    for r in backward.iter_mut().filter(|r| r.class == Class::Incorrect) {
        let Some(o) = file.backward_repros.iter().find(|o| {
            o.op == r.op && o.args == r.args && o.inputs == r.inputs && o.output == r.output
        }) else {
            continue;
        };
        if o.reproduced {
            r.detail = format!("{}; reproduced in the framework: {}", r.detail, o.says);
        } else {
            r.class = Class::Undetermined;
            r.detail = format!(
                "{}; but its repro script did not reproduce it in the framework: {}",
                r.detail, o.says
            );
        }
        r.repro = Some(o.clone());
    }
    let mesh2d: Vec<Row> = chosen.par_iter().flat_map(|e| mesh2d::rows(e)).collect();
    let backward_skipped = chosen
        .iter()
        .map(|e| e.backward_skipped.values().sum::<usize>())
        .sum();
    Ok(Report {
        file,
        source: source.to_string(),
        rows,
        backward,
        backward_skipped,
        mesh2d,
        scope: sc,
        filtered,
        pruned,
        wanted,
        unmodelled,
    })
}

fn entry_rows(
    e: &Entry,
    t: Option<&Arc<KernelTable>>,
    sc: &Scope,
    missing: bool,
    system: &str,
) -> Result<Vec<Row>, UsageError> {
    if let Some(cases) = &e.collective {
        return Ok(collective::rows(system, e, cases));
    }
    let claims: Vec<(Vec<Place>, Place)> = e
        .claims
        .iter()
        .flatten()
        .map(|c| {
            let ps: Vec<Place> = c
                .iter()
                .map(|p| place(p).expect("checked on read"))
                .collect();
            (ps[1..].to_vec(), ps[0])
        })
        // The all-Replicate strategy holds for every op and is not a
        // claim about sharding (DTensor's strategy_validation drops it too).
        .filter(|(ins, out)| !(ins.iter().all(|p| *p == Place::Inv) && *out == Place::Inv))
        .collect();
    let row = |ins: &[Place], out: Place, class: Class, detail: String, v: Option<Value>, ms| Row {
        op: e.op.clone(),
        args: e.args.clone(),
        inputs: ins.iter().map(|p| lib_name(*p)).collect(),
        output: lib_name(out),
        class,
        detail,
        verdict: v,
        millis: ms,
        cex: None,
        repro: None,
    };
    let why_none = match (&e.strategy_error, t, &e.kernel_error) {
        (Some(s), _, _) => Some(format!("the library's strategy raised: {s}")),
        _ if e.shape_dependent.is_some() => Some(format!(
            "the library's claims depend on the input shapes ({}), and they were asked for one shape only",
            e.shape_dependent.as_deref().unwrap_or_default()
        )),
        (_, None, Some(k)) => Some(format!("the kernel raised on every dtype tried: {k}")),
        (_, None, None) => Some("no kernel values were recorded".to_string()),
        _ => None,
    };
    if let Some(why) = why_none {
        return Ok(claims
            .iter()
            .map(|(ins, out)| row(ins, *out, Class::Undetermined, why.clone(), None, 0))
            .collect());
    }
    let t = t.expect("a table when nothing is missing");
    let vars: Vec<String> = ["x", "y", "z"][..e.inputs]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let f = LocalFn {
        expr: Expr::Table(Table(t.clone()), (0..e.inputs).map(Expr::Var).collect()),
        vars,
        text: shown(e),
    };
    let out_dtype = e
        .kernel
        .as_ref()
        .map(|k| k.output_dtype.as_str())
        .or(e.tensor_kernel.as_ref().map(|k| k.output_dtype.as_str()))
        .unwrap_or_default();
    let int_out = out_dtype.starts_with("int") || out_dtype.starts_with("uint");
    // The placements tried per input and for the output: a kernel recorded
    // call by call may be sharded on any dim of its inputs' ranks and of
    // its output's.
    let (in_places, out_places): (Vec<Vec<Place>>, Vec<Place>) = match &e.tensor_kernel {
        Some(k) => {
            let out_rank = k
                .shapes
                .iter()
                .find_map(|r| r.out.as_ref().map(Vec::len))
                .unwrap_or(0);
            (
                k.ranks.iter().map(|&r| places_of_rank(system, r)).collect(),
                places_of_rank(system, out_rank),
            )
        }
        None => (vec![all_places(system); e.inputs], all_places(system)),
    };
    let mut rows = Vec::new();
    // Each combination of input placements is checked once, against every
    // output placement it needs: the claimed ones, and with `missing` all.
    let mut combos: Vec<Vec<Place>> = Vec::new();
    for (ins, _) in &claims {
        if !combos.contains(ins) {
            combos.push(ins.clone());
        }
    }
    if missing && e.inputs <= 2 {
        let mut all: Vec<Vec<Place>> = vec![vec![]];
        for ps in &in_places {
            all = all
                .into_iter()
                .flat_map(|c| {
                    ps.iter().map(move |p| {
                        let mut c = c.clone();
                        c.push(*p);
                        c
                    })
                })
                .collect();
        }
        for c in all {
            if !c.iter().all(|p| *p == Place::Inv) && !combos.contains(&c) {
                combos.push(c);
            }
        }
    }
    // Outputs the library gives that the checker does not hold it to (a
    // JAX varying output; DTensor's _StridedShard does not parse): never
    // reported missing.
    let unmodelled: Vec<(Vec<Place>, Place)> = e
        .unmodelled
        .iter()
        .filter_map(|c| {
            let ps: Vec<Place> = c.iter().map(|p| place(p).ok()).collect::<Option<_>>()?;
            (ps.len() == e.inputs + 1).then(|| (ps[1..].to_vec(), ps[0]))
        })
        .collect();
    for ins in combos {
        let claimed: Vec<Place> = claims
            .iter()
            .filter(|(i, _)| *i == ins)
            .map(|(_, o)| *o)
            .collect();
        let outs: Vec<Place> = if missing && e.inputs <= 2 {
            out_places.clone()
        } else {
            claimed.clone()
        };
        let start = Instant::now();
        let (before, _) = t.misses();
        let before_u = t.unrepresentable();
        // Three inputs on two ranks hold at least 6 free scalars (6^6
        // points): the cap of §21.2's default scope takes them.
        let wide;
        let sc = if e.inputs == 3 {
            wide = Scope {
                max_points: Scope::default().max_points,
                ..sc.clone()
            };
            &wide
        } else {
            sc
        };
        let vs = check_places(&f, &ins, &outs, sc)
            .map_err(|why| UsageError(format!("{}: {why}", shown(e))))?;
        let (after, first) = t.misses();
        let inexact = after - before;
        let unrep = t.unrepresentable() - before_u;
        let ms = start.elapsed().as_millis();
        // Where the kernel gave no exact value at a float64 point, the
        // instances there are unchecked: no verdict but a counterexample
        // stands (SPEC.md §22.3).
        let gap = first.as_ref().filter(|_| inexact > 0).map(|w| {
            format!("the kernel has no exact value at {inexact} looked-up points (first: {w})")
        });
        for (out, v) in outs.iter().zip(vs) {
            let is_claim = claimed.contains(out);
            if int_out && *out == Place::Part(PartialKind::Avg) {
                // An average of integer tensors is no integer tensor: what
                // the library's reduction makes of it is not modelled.
                if is_claim {
                    rows.push(row(
                        &ins,
                        *out,
                        Class::Undetermined,
                        format!(
                            "the output is {out_dtype}: an average of integers is not one, and how the library rounds it is not modelled"
                        ),
                        None,
                        ms,
                    ));
                }
                continue;
            }
            let (class, detail) = match (&v, is_claim, &gap) {
                (Verdict::Unsound { violation, .. }, true, _) => (
                    Class::Incorrect,
                    format!("{} {violation}", violation.property()),
                ),
                (Verdict::Sound { .. }, true, None) => (Class::Correct, bounded(&v, unrep)),
                (Verdict::Sound { .. }, true, Some(g)) => (
                    Class::Undetermined,
                    format!("no violation on {} instances, but {g}", v.decided()),
                ),
                (_, true, _) => (
                    Class::Undetermined,
                    format!(
                        "{}{}",
                        v.reason().unwrap_or_default(),
                        gap.as_ref().map(|g| format!("; {g}")).unwrap_or_default()
                    ),
                ),
                (Verdict::Sound { .. }, false, None)
                    if unmodelled.contains(&(ins.clone(), *out)) =>
                {
                    continue
                }
                (Verdict::Sound { .. }, false, None) => (
                    Class::Missing,
                    format!(
                        "holds but is not registered{}; {}",
                        if claimed.is_empty() {
                            " (the library redistributes these inputs)"
                        } else {
                            ""
                        },
                        bounded(&v, unrep)
                    ),
                ),
                _ => continue,
            };
            let mut json = v.json();
            json["kernel_inexact"] = json!(inexact);
            json["not_float64"] = json!(unrep);
            let mut r = row(&ins, *out, class, detail, Some(json), ms);
            if let Verdict::Unsound { violation, .. } = &v {
                if class == Class::Incorrect {
                    r.cex = Some((**violation).clone());
                }
            }
            rows.push(r);
        }
    }
    Ok(rows)
}

fn bounded(v: &Verdict, unrep: u64) -> String {
    let c = v.tally();
    let mut s = format!(
        "bounded: {} instances on {} cases, {} on more than one rank",
        v.decided(),
        c.cases,
        c.distributed_cases
    );
    if c.outside_domain > 0 {
        s += &format!(
            "; {} instances left out where a value is no float64 (an average over 3 ranks) or no value of the kernel's input dtype (1/2 for int64), or the kernel's value is not finite ({unrep} such points)",
            c.outside_domain
        );
    }
    s
}

/// Counts per class.
pub fn totals(rows: &[Row]) -> BTreeMap<Class, usize> {
    let mut t = BTreeMap::new();
    for r in rows {
        *t.entry(r.class).or_insert(0) += 1;
    }
    t
}

pub fn summary(rep: &Report) -> String {
    let t = totals(&rep.rows);
    let ops: std::collections::BTreeSet<&str> = rep.rows.iter().map(|r| r.op.as_str()).collect();
    format!(
        "{} rows over {} ops: {} correct, {} incorrect, {} latent, {} missing, {} undetermined",
        rep.rows.len(),
        ops.len(),
        t.get(&Class::Correct).unwrap_or(&0),
        t.get(&Class::Incorrect).unwrap_or(&0),
        t.get(&Class::Latent).unwrap_or(&0),
        t.get(&Class::Missing).unwrap_or(&0),
        t.get(&Class::Undetermined).unwrap_or(&0)
    )
}

/// Which rows the text report lists one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// A line per op with its counts and time (as DTensor's
    /// strategy_validation prints), then the incorrect and latent claims.
    PerOp,
    /// Every row.
    All,
    /// The incorrect and latent claims only.
    IncorrectOnly,
}

/// One line per op: its count in each class and the time its claims took.
fn per_op(rep: &Report) -> String {
    let mut ops: Vec<(&str, [usize; 5], u128)> = Vec::new();
    for r in &rep.rows {
        let i = match ops.iter().position(|(o, ..)| *o == r.op) {
            Some(i) => i,
            None => {
                ops.push((r.op.as_str(), [0; 5], 0));
                ops.len() - 1
            }
        };
        let c = match r.class {
            Class::Correct => 0,
            Class::Incorrect => 1,
            Class::Latent => 2,
            Class::Missing => 3,
            Class::Undetermined => 4,
        };
        ops[i].1[c] += 1;
        ops[i].2 += r.millis;
    }
    let w = ops.iter().map(|(o, ..)| o.len()).max().unwrap_or(2).max(2);
    let mut s = format!(
        "  {:<w$}  {:>7} {:>9} {:>6} {:>7} {:>12} {:>8}\n",
        "op", "correct", "incorrect", "latent", "missing", "undetermined", "ms"
    );
    for (o, c, ms) in ops {
        s += &format!(
            "  {o:<w$}  {:>7} {:>9} {:>6} {:>7} {:>12} {:>8}\n",
            c[0], c[1], c[2], c[3], c[4], ms
        );
    }
    s
}

pub fn text(rep: &Report, listing: Listing, show_repro: bool) -> String {
    let f = &rep.file;
    let versions: Vec<String> = f.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut s = format!(
        "registry {} ({}), from {}\nclaims: {}\nscope: {}\n",
        f.system,
        versions.join(", "),
        rep.source,
        f.mesh,
        rep.scope.describe()
    );
    if listing == Listing::PerOp {
        s += &per_op(rep);
        if rep
            .rows
            .iter()
            .any(|r| matches!(r.class, Class::Incorrect | Class::Latent))
        {
            s += "incorrect and latent claims (--all lists every row):\n";
        }
    }
    let shown: Vec<&Row> = rep
        .rows
        .iter()
        .filter(|r| listing == Listing::All || matches!(r.class, Class::Incorrect | Class::Latent))
        .collect();
    s += &row_lines(&shown);
    s += &format!("{}\n", summary(rep));
    if !rep.backward.is_empty() {
        s += &backward_text(rep, listing);
    }
    if !rep.mesh2d.is_empty() {
        s += &mesh2d_text(rep, listing);
    }
    if show_repro {
        for (r, script) in repros(rep).into_iter().chain(backward_repros(rep)) {
            match script {
                Ok(t) => s += &format!("\n{t}"),
                Err(e) => s += &format!("\n# {} {}: no script ({e})\n", r.op, r.placements()),
            }
        }
    }
    let skipped = f.skipped.len();
    let others: usize = f.not_recorded.values().sum();
    if skipped > 0 || rep.filtered > 0 || others > 0 || rep.unmodelled > 0 {
        s += &format!(
            "not checked: {skipped} registrations the recording skipped (the file's `skipped` says why of each); {others} registered ops of families not recorded yet (`not_recorded`){}{}\n",
            if rep.unmodelled > 0 {
                format!(
                    "; {} claims not modelled (`unmodelled`: DTensor's _StridedShard and Partial(product), JAX's varying outputs of reductions, contractions and shape ops)",
                    rep.unmodelled
                )
            } else {
                String::new()
            },
            if rep.filtered > 0 {
                format!("; {} entries outside --op", rep.filtered)
            } else {
                String::new()
            }
        );
    }
    s
}

/// One line per row: op with its arguments, placements, class, time and
/// detail, in columns as wide as these rows need.
fn row_lines(shown: &[&Row]) -> String {
    let w_op = shown
        .iter()
        .map(|r| r.op.len() + r.args.len() + 2)
        .max()
        .unwrap_or(2)
        .min(60);
    let w_pl = shown
        .iter()
        .map(|r| r.placements().len())
        .max()
        .unwrap_or(2);
    let mut s = String::new();
    for r in shown {
        s += &format!(
            "  {:<w_op$}  {:<w_pl$}  {:<12} {:>6} ms  {}\n",
            r.shown_op(),
            r.placements(),
            r.class.word(),
            r.millis,
            r.detail
        );
    }
    s
}

/// A section of rows checked on recorded instances (the backward of
/// §22.6, the 2x2 mesh of §22.7): its heading, the incorrect rows (every
/// one with `--all`) and a totals line, `label: N WHAT over M ops …`
/// followed by `tail`.
fn instance_section(
    rows: &[Row],
    listing: Listing,
    heading: &str,
    label: &str,
    what: &str,
    tail: &str,
) -> String {
    let shown: Vec<&Row> = rows
        .iter()
        .filter(|r| listing == Listing::All || r.class == Class::Incorrect)
        .collect();
    let mut s = String::new();
    if !shown.is_empty() {
        s += &format!("{heading}:\n");
    }
    s += &row_lines(&shown);
    let t = totals(rows);
    let ops: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.op.as_str()).collect();
    s += &format!(
        "{label}: {} {what} over {} ops on recorded instances: {} correct, {} incorrect, {} undetermined{tail}\n",
        rows.len(),
        ops.len(),
        t.get(&Class::Correct).unwrap_or(&0),
        t.get(&Class::Incorrect).unwrap_or(&0),
        t.get(&Class::Undetermined).unwrap_or(&0),
    );
    s
}

/// The backward rows (SPEC.md §22.6).
fn backward_text(rep: &Report, listing: Listing) -> String {
    let tail = if rep.backward_skipped > 0 {
        format!(
            "; {} not recorded (torch has no derivative of the op on the global tensors)",
            rep.backward_skipped
        )
    } else {
        String::new()
    };
    instance_section(
        &rep.backward,
        listing,
        "backward (the library's gradients of its claims, on recorded instances)",
        "backward",
        "claims",
        &tail,
    )
}

/// The 2x2 rows (SPEC.md §22.7).
fn mesh2d_text(rep: &Report, listing: Listing) -> String {
    instance_section(
        &rep.mesh2d,
        listing,
        "2x2 mesh (each claim on mesh dim 0, dim 1 and both, on recorded instances)",
        "2x2",
        "rows",
        "",
    )
}

/// A section of rows checked on recorded instances, for `--json`.
fn instance_json(rows: &[Row], incorrect_only: bool) -> Value {
    let t = totals(rows);
    json!({
        "rows": rows.iter().filter(|r| !incorrect_only || r.class == Class::Incorrect).map(|r| json!({
            "op": r.op, "args": r.args, "inputs": r.inputs, "output": r.output,
            "class": r.class.word(), "detail": r.detail, "millis": r.millis as u64,
        })).collect::<Vec<_>>(),
        "totals": {
            "correct": t.get(&Class::Correct).unwrap_or(&0),
            "incorrect": t.get(&Class::Incorrect).unwrap_or(&0),
            "undetermined": t.get(&Class::Undetermined).unwrap_or(&0),
        },
    })
}

/// Whether some claim, forward, backward or on 2x2, is incorrect (exit
/// code 1).
pub fn any_incorrect(rep: &Report) -> bool {
    rep.rows
        .iter()
        .chain(&rep.backward)
        .chain(&rep.mesh2d)
        .any(|r| r.class == Class::Incorrect)
}

pub fn to_json(rep: &Report, incorrect_only: bool, show_repro: bool) -> Value {
    let t = totals(&rep.rows);
    let scripts: Vec<(&Row, Result<String, String>)> =
        if show_repro { repros(rep) } else { vec![] };
    let script = |r: &Row| {
        scripts
            .iter()
            .find(|(x, _)| std::ptr::eq(*x, r))
            .map(|(_, s)| match s {
                Ok(s) => json!({"script": s}),
                Err(e) => json!({"error": e}),
            })
    };
    let mut out = json!({
        "system": rep.file.system,
        "versions": rep.file.versions,
        "source": rep.source,
        "scope": rep.scope.describe(),
        "rows": rep.rows.iter().filter(|r| !incorrect_only || matches!(r.class, Class::Incorrect | Class::Latent)).map(|r| json!({
            "op": r.op, "args": r.args, "inputs": r.inputs, "output": r.output,
            "class": r.class.word(), "detail": r.detail, "millis": r.millis as u64,
            "verdict": r.verdict,
            "reproduced": r.repro.as_ref().map(|o| o.reproduced),
            "repro": script(r),
        })).collect::<Vec<_>>(),
        "totals": {
            "correct": t.get(&Class::Correct).unwrap_or(&0),
            "incorrect": t.get(&Class::Incorrect).unwrap_or(&0),
            "missing": t.get(&Class::Missing).unwrap_or(&0),
            "undetermined": t.get(&Class::Undetermined).unwrap_or(&0),
            "latent": t.get(&Class::Latent).unwrap_or(&0),
        },
        "skipped": rep.file.skipped.len(),
        "not_recorded": rep.file.not_recorded.values().sum::<usize>(),
        "unmodelled": rep.unmodelled,
    });
    if !rep.mesh2d.is_empty() {
        out["mesh2d"] = instance_json(&rep.mesh2d, incorrect_only);
    }
    if !rep.backward.is_empty() {
        out["backward"] = instance_json(&rep.backward, incorrect_only);
        out["backward"]["not_recorded"] = json!(rep.backward_skipped);
        // With --show-repro an incorrect row carries its script (SPEC.md
        // §22.6), as the forward rows do.
        if show_repro {
            let scripts = backward_repros(rep);
            if let Some(rows) = out["backward"]["rows"].as_array_mut() {
                for row in rows {
                    let found = scripts.iter().find(|(r, _)| {
                        row["op"] == r.op.as_str()
                            && row["args"] == r.args.as_str()
                            && row["output"] == r.output.as_str()
                            && row["inputs"] == json!(r.inputs)
                    });
                    if let Some((_, s)) = found {
                        row["repro"] = match s {
                            Ok(s) => json!({"script": s}),
                            Err(e) => json!({"error": e}),
                        };
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs() {
        assert!(glob("aten.threshold*", "aten.threshold.default"));
        assert!(glob("*relu*", "aten.relu.default"));
        assert!(glob("aten.?ul.Tensor", "aten.mul.Tensor"));
        assert!(!glob("aten.mul*", "aten.add.Tensor"));
        assert!(!glob("a", "ab"));
        assert!(glob("*", ""));
        assert!(!glob(&"*a".repeat(30), &"a".repeat(29)));
    }
}
