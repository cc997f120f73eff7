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

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub schema: String,
    pub system: String,
    pub versions: BTreeMap<String, String>,
    pub recorded_by: String,
    pub mesh: String,
    pub entries: Vec<Entry>,
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Registered ops outside the recorded families, counted per strategy
    /// function: not checked yet.
    #[serde(default)]
    pub not_recorded: BTreeMap<String, usize>,
    /// What the repro scripts of the incorrect claims did when run in the
    /// real framework (peers/record_registry.sh runs them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repros: Vec<ReproOutcome>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReproOutcome {
    pub op: String,
    pub args: String,
    pub inputs: Vec<String>,
    pub output: String,
    /// The script ran, the library chose the claimed placement, and its
    /// value differs from the op on the global inputs.
    pub reproduced: bool,
    /// The script's last line.
    pub says: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub op: String,
    pub why: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub op: String,
    pub family: String,
    pub schema: String,
    /// The scalar arguments of this variant, as `name=value` text.
    pub args: String,
    /// Tensor inputs.
    pub inputs: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<Vec<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Kernel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_error: Option<String>,
    /// The call as data, for repro scripts: `{"args": [...], "kwargs":
    /// {...}}` with tensors as `{"tensor": i}` and dtypes as `{"dtype": name}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Value>,
    /// A kernel that is not elementwise (a reduction, a view), recorded
    /// call by call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_kernel: Option<TensorKernel>,
    /// Set when the library's claims for this entry differ between input
    /// shapes the scope visits: the claims were asked for one shape, so
    /// they are not checked (the text says where they differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape_dependent: Option<String>,
    /// Claims the checker does not model (DTensor's `_StridedShard`,
    /// written `_S(dim, split_factor)`, and `P(product)`; a JAX varying
    /// output, which promises no global value): listed, not checked, and
    /// never reported missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmodelled: Vec<Vec<String>>,
}

/// The calls of a kernel that is not elementwise (SPEC.md §22.2).
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct TensorKernel {
    pub input_dtype: String,
    pub output_dtype: String,
    /// The tensor rank of each input the library's claims were asked for.
    pub ranks: Vec<usize>,
    /// Per tuple of input shapes: the output shape or the kernel's refusal.
    #[serde(default)]
    pub shapes: Vec<ShapeRecord>,
    /// Per call: each input tensor as `"2x2:1,0,-1,1/2"` (`":5"` a
    /// scalar), then the output the same way, `null` (not exact in
    /// float64) or `"nan"` (not finite).
    #[serde(default)]
    pub calls: Vec<Vec<Option<String>>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShapeRecord {
    #[serde(rename = "in")]
    pub ins: Vec<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// What a run needed of one entry's kernel and the file lacks.
#[derive(Serialize, Clone, Debug)]
pub struct Wanted {
    /// The entry's position in the file.
    pub index: usize,
    pub op: String,
    pub args: String,
    pub shapes: Vec<Vec<Vec<usize>>>,
    /// Each call's input tensors, written as in `TensorKernel::calls`.
    pub calls: Vec<Vec<String>>,
}

/// The largest tensor in a recorded call: dims and elements.
const MAX_CALL_RANK: usize = 8;
const MAX_CALL_ELEMENTS: usize = 1 << 16;

/// A tensor as a registry file writes it: `"2x2:1,0,-1,1/2"`.
pub fn tensor_text(t: &spmd_semantics::Tensor) -> String {
    let dims: Vec<String> = t.shape.iter().map(usize::to_string).collect();
    let vals: Vec<String> = t.data.iter().map(Q::to_string).collect();
    format!("{}:{}", dims.join("x"), vals.join(","))
}

/// Parse `tensor_text`'s form (untrusted): the shape, then its values.
pub fn parse_tensor(s: &str) -> Result<spmd_semantics::Tensor, String> {
    let (dims, vals) = s
        .split_once(':')
        .ok_or_else(|| format!("`{}` is not SHAPE:VALUES", crate::words::excerpt(s)))?;
    let shape: Vec<usize> = if dims.is_empty() {
        Vec::new()
    } else {
        dims.split('x')
            .map(|d| {
                d.parse::<usize>()
                    .map_err(|_| format!("`{}`: a bad dim", crate::words::excerpt(d)))
            })
            .collect::<Result<_, _>>()?
    };
    if shape.len() > MAX_CALL_RANK {
        return Err(format!(
            "a tensor of {} dims (at most {MAX_CALL_RANK})",
            shape.len()
        ));
    }
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_CALL_ELEMENTS)
        .ok_or_else(|| format!("a tensor of shape {shape:?} is too large"))?;
    let data: Vec<Q> = if vals.is_empty() {
        Vec::new()
    } else {
        vals.split(',')
            .map(|v| {
                Q::parse(v).ok_or_else(|| format!("`{}` is not a number", crate::words::excerpt(v)))
            })
            .collect::<Result<_, _>>()?
    };
    if data.len() != n {
        return Err(format!("shape {shape:?} with {} values", data.len()));
    }
    Ok(spmd_semantics::Tensor::new(shape, data))
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    pub input_dtype: String,
    pub output_dtype: String,
    /// Each row: the inputs, then the output (`null`: not exact in float64;
    /// `"nan"`, `"inf"`, `"-inf"`: not finite).
    pub rows: Vec<Vec<Option<String>>>,
}

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

/// Read a registry file (untrusted): one line naming the file and what is
/// wrong, never a panic.
pub fn read(path: &str) -> Result<File, UsageError> {
    let text = read_maybe_gz(path)?;
    let f: File = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("{path}: not a registry file: {e}")))?;
    if f.schema != SCHEMA {
        return Err(UsageError(format!(
            "{path}: schema `{}`, expected `{SCHEMA}`",
            crate::words::excerpt(&f.schema)
        )));
    }
    if !SYSTEMS.iter().any(|(s, _)| *s == f.system) {
        return Err(UsageError(format!(
            "{path}: system `{}` is not one `registry` knows",
            crate::words::excerpt(&f.system)
        )));
    }
    for (i, e) in f.entries.iter().enumerate() {
        if e.inputs == 0 || e.inputs > 3 {
            return Err(UsageError(format!(
                "{path}: entry {i} ({}): {} tensor inputs (1 to 3 are checked)",
                crate::words::excerpt(&e.op),
                e.inputs
            )));
        }
        for c in e.claims.iter().flatten() {
            if c.len() != e.inputs + 1 {
                return Err(UsageError(format!(
                    "{path}: entry {i} ({}): a claim of {} placements for {} inputs and one output",
                    crate::words::excerpt(&e.op),
                    c.len(),
                    e.inputs
                )));
            }
            for p in c {
                place(p).map_err(|why| {
                    UsageError(format!(
                        "{path}: entry {i} ({}): placement `{}`: {why}",
                        crate::words::excerpt(&e.op),
                        crate::words::excerpt(p)
                    ))
                })?;
            }
        }
    }
    Ok(f)
}

/// A registry file's text, inflated first when it is gzipped (its first
/// bytes say so, whatever its name). Neither the file nor what it inflates
/// to may exceed `MAX_FILE`.
fn read_maybe_gz(path: &str) -> Result<String, UsageError> {
    use std::io::Read;
    let meta =
        std::fs::metadata(path).map_err(|e| UsageError(format!("{path}: cannot read: {e}")))?;
    if !meta.is_file() {
        return spmd_syntax::rule::read_text_limit(path, MAX_FILE);
    }
    let mut head = [0u8; 2];
    let gz = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head == [0x1f, 0x8b];
    if !gz {
        return spmd_syntax::rule::read_text_limit(path, MAX_FILE);
    }
    let f =
        std::fs::File::open(path).map_err(|e| UsageError(format!("{path}: cannot read: {e}")))?;
    let mut buf = Vec::new();
    flate2::read::MultiGzDecoder::new(f.take(MAX_FILE + 1))
        .take(MAX_FILE + 1)
        .read_to_end(&mut buf)
        .map_err(|e| UsageError(format!("{path}: not a readable gzip file: {e}")))?;
    if buf.len() as u64 > MAX_FILE {
        return Err(UsageError(format!(
            "{path}: inflates to more than {} MiB, the most read from one file",
            MAX_FILE >> 20
        )));
    }
    String::from_utf8(buf).map_err(|e| {
        UsageError(format!(
            "{path}: not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Write `text` to `out`, gzipped when the name ends in `.gz`.
fn write_maybe_gz(out: &str, text: &str) -> Result<(), UsageError> {
    use std::io::Write;
    let err = |e: std::io::Error| UsageError(format!("{out}: cannot write: {e}"));
    if !out.ends_with(".gz") {
        return std::fs::write(out, text).map_err(err);
    }
    let f = std::fs::File::create(out).map_err(err)?;
    // No name or time in the header: the same text gives the same bytes.
    let mut z = flate2::GzBuilder::new()
        .mtime(0)
        .write(f, flate2::Compression::best());
    z.write_all(text.as_bytes()).map_err(err)?;
    z.finish().map_err(err)?;
    Ok(())
}

/// A placement as the library writes it (`S(0)`, `R`, `P(sum)`, `P(avg)`,
/// `P(max)`, `P(min)`).
fn place(s: &str) -> Result<Place, String> {
    Place::parse(s)
}

/// Each input's domain from the recorded dtype: one for all (`int64`) or
/// one per input (`bool,float64,float64`).
fn domains(input_dtype: &str, inputs: usize) -> Result<Vec<Domain>, String> {
    let dts: Vec<&str> = input_dtype.split(',').map(str::trim).collect();
    match dts.len() {
        1 => Ok(vec![Domain::of_dtype(dts[0]); inputs]),
        n if n == inputs => Ok(dts.iter().map(|d| Domain::of_dtype(d)).collect()),
        n => Err(format!("input_dtype names {n} dtypes for {inputs} inputs")),
    }
}

fn tensor_table(
    path: &str,
    e: &Entry,
    k: &TensorKernel,
    record: bool,
) -> Result<Arc<KernelTable>, UsageError> {
    let bad = |why: String| UsageError(format!("{path}: {} ({}): {why}", e.op, e.args));
    if k.ranks.len() != e.inputs {
        return Err(bad(format!(
            "ranks for {} inputs, the entry has {}",
            k.ranks.len(),
            e.inputs
        )));
    }
    if let Some(r) = k.ranks.iter().find(|&&r| r > MAX_CALL_RANK) {
        return Err(bad(format!(
            "an input of rank {r} (at most {MAX_CALL_RANK})"
        )));
    }
    let mut shapes = Vec::with_capacity(k.shapes.len());
    for r in &k.shapes {
        let out = match (&r.out, &r.refused) {
            (Some(o), None) => Ok(o.clone()),
            (None, Some(w)) => Err(w.clone()),
            _ => {
                return Err(bad(
                    "a shape record needs exactly one of `out` and `refused`".into(),
                ))
            }
        };
        if r.ins.iter().chain(r.out.iter()).any(|s| {
            s.len() > MAX_CALL_RANK
                || s.iter()
                    .try_fold(1usize, |a, &d| a.checked_mul(d))
                    .is_none_or(|n| n > MAX_CALL_ELEMENTS)
        }) {
            return Err(bad(format!("a shape record too large: {:?}", r.ins)));
        }
        shapes.push((r.ins.clone(), out));
    }
    let mut calls = Vec::with_capacity(k.calls.len());
    for (i, c) in k.calls.iter().enumerate() {
        if c.len() != e.inputs + 1 {
            return Err(bad(format!(
                "call {i}: {} tensors for {} inputs and one output",
                c.len(),
                e.inputs
            )));
        }
        let mut ins = Vec::with_capacity(e.inputs);
        let mut vals = Vec::new();
        for x in &c[..e.inputs] {
            let x = x
                .as_deref()
                .ok_or_else(|| bad(format!("call {i}: an input is null")))?;
            let t = parse_tensor(x).map_err(|w| bad(format!("call {i}: {w}")))?;
            ins.push(t.shape);
            vals.extend(t.data);
        }
        let out = match c[e.inputs].as_deref() {
            None => Outcome::Inexact,
            Some("nan" | "inf" | "-inf") => Outcome::NonFinite,
            Some(x) => Outcome::Exact(parse_tensor(x).map_err(|w| bad(format!("call {i}: {w}")))?),
        };
        calls.push(((ins, vals), out));
    }
    let domains = domains(&k.input_dtype, e.inputs).map_err(bad)?;
    let t = KernelTable::calls(&shown(e), k.ranks.clone(), shapes, calls, record)
        .and_then(|t| t.with_domains(domains))
        .map_err(bad)?;
    Ok(Arc::new(t))
}

fn table(path: &str, e: &Entry, record: bool) -> Result<Option<Arc<KernelTable>>, UsageError> {
    if let Some(k) = &e.tensor_kernel {
        if e.kernel.is_some() {
            return Err(UsageError(format!(
                "{path}: {} ({}): both `kernel` and `tensor_kernel`",
                e.op, e.args
            )));
        }
        return tensor_table(path, e, k, record).map(Some);
    }
    let Some(k) = &e.kernel else {
        return Ok(None);
    };
    let bad = |why: String| UsageError(format!("{path}: {} ({}): {why}", e.op, e.args));
    let mut rows = Vec::with_capacity(k.rows.len());
    for r in &k.rows {
        if r.len() != e.inputs + 1 {
            return Err(bad(format!(
                "a kernel row of {} values for {} inputs and one output",
                r.len(),
                e.inputs
            )));
        }
        let num = |s: &Option<String>| -> Result<Q, UsageError> {
            let s = s
                .as_deref()
                .ok_or_else(|| bad("a kernel row with no input".into()))?;
            Q::parse(s)
                .ok_or_else(|| bad(format!("`{}` is not a number", crate::words::excerpt(s))))
        };
        let args = r[..e.inputs]
            .iter()
            .map(num)
            .collect::<Result<Vec<_>, _>>()?;
        let out = match r[e.inputs].as_deref() {
            None => Cell::Inexact,
            Some("nan" | "inf" | "-inf") => Cell::NonFinite,
            _ => Cell::Exact(num(&r[e.inputs])?),
        };
        rows.push((args, out));
    }
    let domains = domains(&k.input_dtype, e.inputs).map_err(bad)?;
    let t = KernelTable::new(&shown(e), e.inputs, rows, record)
        .and_then(|t| t.with_domains(domains))
        .map_err(bad)?;
    Ok(Some(Arc::new(t)))
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
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(&script).arg(&out);
    if let Some(g) = only {
        cmd.arg(g);
    }
    let status = cmd
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| UsageError(format!("--live: cannot run {python}: {e}")))?;
    if !status.success() {
        return Err(UsageError(format!(
            "--live: {python} {} failed ({status}); is the library installed there? (SPMD_CHECK_TORCH_PYTHON names the Python)",
            script.display()
        )));
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
    Ok(Report {
        file,
        source: source.to_string(),
        rows,
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

/// A value of the call spec as Python source, or why it cannot be one.
fn py_value(v: &Value, inputs: usize) -> Result<String, String> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.len() <= 40
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    Ok(match v {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f.is_finite() => format!("{f:?}"),
            _ => return Err(format!("number {n}")),
        },
        Value::String(s) if ident(s) => format!("{s:?}"),
        Value::Array(a) if a.len() <= 16 => format!(
            "[{}]",
            a.iter()
                .map(|v| py_value(v, inputs))
                .collect::<Result<Vec<_>, _>>()?
                .join(", ")
        ),
        Value::Object(o) => match (o.get("tensor"), o.get("dtype"), o.len()) {
            (Some(Value::Number(i)), None, 1) => match i.as_u64() {
                Some(i) if (i as usize) < inputs => format!("x{i}"),
                _ => return Err(format!("tensor {i}")),
            },
            (None, Some(Value::String(d)), 1) if ident(d) => format!("torch.{d}"),
            (None, None, 1) => match o.get("float").and_then(Value::as_str) {
                Some("inf") => "float(\"inf\")".into(),
                Some("-inf") => "float(\"-inf\")".into(),
                _ => return Err("an object that is neither a tensor nor a dtype".into()),
            },
            _ => return Err("an object that is neither a tensor nor a dtype".into()),
        },
        _ => {
            return Err(
                "a value that is not a number, None, a name, a list, a tensor or a dtype".into(),
            )
        }
    })
}

fn py_tensor(t: &spmd_semantics::Tensor) -> Result<String, String> {
    let vals = t
        .data
        .iter()
        .map(|q| {
            spmd_interp::external::to_f64(q)
                .map(|f| format!("{f:?}"))
                .ok_or_else(|| format!("{q} is not a float64"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    Ok(format!(
        "torch.tensor([{}], dtype=torch.float64).reshape([{}])",
        vals.join(", "),
        shape.join(", ")
    ))
}

fn py_place(p: &str) -> Result<String, String> {
    Ok(match place(p)? {
        Place::Inv => "Replicate()".into(),
        Place::Shard(d) => format!("Shard({d})"),
        Place::Part(k) => format!("Partial({:?})", k.name()),
    })
}

/// A PyTorch script that runs the counterexample of an incorrect claim in
/// DTensor (ranks simulated by LocalTensorMode on a fake process group) and
/// exits 0 when the library gives the claimed placement and a value other
/// than the op on the global inputs, 1 otherwise.
pub fn repro(e: &Entry, r: &Row) -> Result<String, String> {
    let cex = r.cex.as_ref().ok_or("no counterexample")?;
    if !e.op.starts_with("aten.") {
        return Err("repro scripts are written for DTensor's aten ops only, so far".into());
    }
    let call = e
        .call
        .as_ref()
        .ok_or("the recording has no call for this op")?;
    let segs: Vec<&str> = e.op.split('.').collect();
    if segs.len() != 3
        || !segs
            .iter()
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(format!(
            "`{}` is not an op name",
            crate::words::excerpt(&e.op)
        ));
    }
    let args = call["args"]
        .as_array()
        .ok_or("the call has no args")?
        .iter()
        .map(|v| py_value(v, e.inputs))
        .collect::<Result<Vec<_>, _>>()?;
    let mut kwargs = Vec::new();
    for (k, v) in call["kwargs"].as_object().ok_or("the call has no kwargs")? {
        if !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || k.is_empty() {
            return Err(format!("keyword `{}`", crate::words::excerpt(k)));
        }
        kwargs.push(format!("{k}={}", py_value(v, e.inputs)?));
    }
    let all: Vec<String> = args.into_iter().chain(kwargs).collect();
    let params: Vec<String> = (0..e.inputs).map(|i| format!("x{i}")).collect();
    let per_rank = cex
        .inputs
        .iter()
        .map(|ts| {
            ts.iter()
                .map(py_tensor)
                .collect::<Result<Vec<_>, _>>()
                .map(|v| format!("[{}]", v.join(", ")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let placements = r
        .inputs
        .iter()
        .map(|p| py_place(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!(
        r#"# spmd-check registry --show-repro: {shown}, {pl}
# The registered claim: inputs {ins} give output {out} on a mesh of {n} ranks.
import sys
import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

N = {n}
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=N)
mesh = init_device_mesh("cpu", (N,))
per_rank = [{per_rank}]
placements = [{placements}]
claimed = {claimed}


def call({params}):
    return torch.ops.{op}({all})


def global_value(ts, p):
    if isinstance(p, Replicate):
        return ts[0]
    if isinstance(p, Shard):
        return torch.cat(ts, p.dim)
    stacked = torch.stack(ts)
    return {{"sum": stacked.sum(0), "avg": stacked.mean(0),
            "max": stacked.amax(0), "min": stacked.amin(0)}}[p.reduce_op]


expected = call(*[global_value(ts, p) for ts, p in zip(per_rank, placements)])
with LocalTensorMode(N) as mode:
    xs = [DTensor.from_local(mode.rank_map(lambda r, k=k: per_rank[k][r].clone()), mesh, [p],
                             run_check=False) for k, p in enumerate(placements)]
    y = call(*xs)
    chosen = y.placements[0]
    full = y.full_tensor()
    got = full._local_tensors[0] if hasattr(full, "_local_tensors") else full
print("the library's output placement:", chosen, "(claimed:", claimed, ")")
print("DTensor gives", got.tolist(), "; the op on the global inputs gives", expected.tolist())
if chosen != claimed:
    print("not reproduced: eager DTensor chose", chosen, "here, not the claimed", claimed)
    sys.exit(1)
if torch.equal(got.to(expected.dtype), expected):
    print("not reproduced: the values agree")
    sys.exit(1)
print("reproduced: DTensor gives", got.tolist(), "where the op gives", expected.tolist())
"#,
        shown = shown(e),
        pl = r.placements(),
        ins = r.inputs.join(", "),
        out = r.output,
        n = cex.n,
        per_rank = per_rank.join(", "),
        placements = placements.join(", "),
        claimed = py_place(&r.output)?,
        params = params.join(", "),
        op = e.op,
        all = all.join(", "),
    ))
}

/// The scripts of every incorrect or latent row, with the entry each
/// belongs to.
pub fn repros(rep: &Report) -> Vec<(&Row, Result<String, String>)> {
    rep.rows
        .iter()
        .filter(|r| matches!(r.class, Class::Incorrect | Class::Latent))
        .map(|r| {
            let e = rep
                .file
                .entries
                .iter()
                .find(|e| e.op == r.op && e.args == r.args);
            (r, e.map_or(Err("no entry".into()), |e| repro(e, r)))
        })
        .collect()
}

/// Write each incorrect or latent row's script to `dir` (which must
/// exist) as `NNN.py`, and `index.json` naming the claim of each.
pub fn write_repros(rep: &Report, dir: &str) -> Result<(), UsageError> {
    if !std::path::Path::new(dir).is_dir() {
        return Err(UsageError(format!("{dir}: not a directory")));
    }
    let mut index = Vec::new();
    for (i, (r, script)) in repros(rep).into_iter().enumerate() {
        let name = format!("{i:03}.py");
        let Ok(text) = script else { continue };
        let path = std::path::Path::new(dir).join(&name);
        std::fs::write(&path, text)
            .map_err(|e| UsageError(format!("{}: cannot write: {e}", path.display())))?;
        index.push(json!({"file": name, "op": r.op, "args": r.args,
            "inputs": r.inputs, "output": r.output}));
    }
    let path = std::path::Path::new(dir).join("index.json");
    std::fs::write(&path, Value::Array(index).to_string())
        .map_err(|e| UsageError(format!("{}: cannot write: {e}", path.display())))
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
    for r in shown {
        let op = r.shown_op();
        s += &format!(
            "  {op:<w_op$}  {:<w_pl$}  {:<12} {:>6} ms  {}\n",
            r.placements(),
            r.class.word(),
            r.millis,
            r.detail
        );
    }
    s += &format!("{}\n", summary(rep));
    if show_repro {
        for (r, script) in repros(rep) {
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
    json!({
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
    })
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
