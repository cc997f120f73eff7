//! A registry file (SPEC.md §22.2): its format, reading it (untrusted,
//! gzipped or plain), and the kernel table each entry gives.

use super::*;

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
    /// The same for the incorrect backward rows (SPEC.md §22.6), keyed by
    /// the row's op, arguments (cotangent included) and placements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backward_repros: Vec<ReproOutcome>,
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
    /// A collective (family `collective`, SPEC.md §22.5): what the library
    /// did for an input of each state on each mesh size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<Vec<CollectiveCase>>,
    /// The library's backward of the claims (SPEC.md §22.6), on recorded
    /// instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backward: Vec<BackwardCase>,
    /// Claims whose backward was not recorded, counted per reason (torch
    /// has no derivative of the op on the global tensors).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub backward_skipped: BTreeMap<String, usize>,
    /// The claims run on a 2x2 mesh (SPEC.md §22.7), on recorded instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mesh2d: Vec<Mesh2dCase>,
}

/// One recorded instance of a claim on a 2x2 mesh (SPEC.md §22.7): the
/// claim's input placements on mesh dim 0, dim 1 or both (Replicate on
/// the other), per-rank inputs (rank 2i + j at coordinate (i, j)), the
/// output placements eager DTensor chose, its per-rank output, and the op
/// on the global inputs.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Mesh2dCase {
    /// `[output, inputs...]` of the single-dim claim.
    pub claim: Vec<String>,
    /// `dim 0`, `dim 1` or `both`.
    #[serde(rename = "where")]
    pub at: String,
    /// The output placements the claim gives on the two mesh dims.
    pub claimed: Vec<String>,
    /// Per input, its placements on the two mesh dims.
    pub placements: Vec<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub inputs: Vec<Vec<Option<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chose: Option<Vec<String>>,
    #[serde(default)]
    pub output: Vec<Option<String>>,
}

/// One recorded instance of a claim's backward (SPEC.md §22.6): per-rank
/// inputs in the claim's placements, a cotangent in its output placement,
/// the gradients the library gave, and the gradient of the op on the
/// global tensors. Tensors are written as in `TensorKernel::calls`
/// (`null`: not exact in float64).
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct BackwardCase {
    /// `[output, inputs...]`, as in `claims`.
    pub claim: Vec<String>,
    pub n: usize,
    /// The cotangent's placement (the claimed output's, or Replicate).
    pub cotangent_placement: String,
    /// The library raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Per input, per rank.
    #[serde(default)]
    pub inputs: Vec<Vec<Option<String>>>,
    /// Per rank, in the claimed output placement.
    #[serde(default)]
    pub cotangent: Vec<Option<String>>,
    /// The gradient of the op on the global inputs, per input.
    #[serde(default)]
    pub expected: Vec<Option<String>>,
    /// Per input: the global gradient is zero (the input does not reach
    /// the output).
    #[serde(default)]
    pub expected_zero: Vec<bool>,
    /// The output placement eager dispatch chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chose: Option<String>,
    /// The output's per-rank values, where kept (`DTensor.redistribute`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<Option<String>>,
    /// The op on the global inputs, which the output must denote, where kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output: Option<String>,
    /// Per input: the gradient's placement and per-rank values, `null` for
    /// no gradient (zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grads: Option<Vec<Option<GradRecord>>>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct GradRecord {
    pub placement: String,
    pub per_rank: Vec<Option<String>>,
}

/// What JAX did for a collective call on an input of one state on one
/// mesh axis of `n` devices (SPEC.md §22.5).
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct CollectiveCase {
    /// The input's state: `Invariant`, `Varying`, `Unreduced`, `Reduced`.
    pub input: String,
    pub n: usize,
    /// The output's state; absent when the library refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The recorder failed after the call was typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The primitives the call binds.
    #[serde(default)]
    pub forward: Vec<Eqn>,
    /// The primitives its transpose binds; absent when it raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<Vec<Eqn>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_error: Option<String>,
    /// The gradient's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad: Option<String>,
    /// Typed, but the backend could not run it: no values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_per_rank: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_per_rank: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cotangent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cotangent_per_rank: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_per_rank: Option<Value>,
}

/// One primitive of a recorded jaxpr: its name, parameters, and literal
/// or constant operands (`null` for a traced one).
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Eqn {
    pub prim: String,
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
    #[serde(default)]
    pub operands: Vec<Value>,
    /// The shapes of its operands.
    #[serde(default)]
    pub shapes: Vec<Vec<usize>>,
    /// The state of its result (`Varying`, ...), where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
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
        if let Some(why) = instance_problem(&f.system, e) {
            return Err(UsageError(format!(
                "{path}: entry {i} ({}): {why}",
                crate::words::excerpt(&e.op)
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

/// What is wrong with an entry's collective, backward or 2x2 instances
/// (SPEC.md §22.5-§22.7), if anything: a bad state or placement, a mesh
/// out of range, an instance of the wrong shape.
fn instance_problem(system: &str, e: &Entry) -> Option<String> {
    for b in &e.backward {
        let bad = if b.claim.len() != e.inputs + 1 {
            Some(format!("a backward claim of {} placements", b.claim.len()))
        } else if !(2..=8).contains(&b.n) {
            Some(format!("a backward instance on {} ranks (2 to 8)", b.n))
        } else {
            b.claim
                .iter()
                .chain(std::iter::once(&b.cotangent_placement))
                .find(|p| super::backward::reading(p).is_err())
                .map(|p| format!("placement `{}`", crate::words::excerpt(p)))
        };
        if bad.is_some() {
            return bad;
        }
    }
    for m in &e.mesh2d {
        let two = |ps: &[String]| ps.len() == 2 && ps.iter().all(|p| place(p).is_ok());
        let bad = if !matches!(m.at.as_str(), "dim 0" | "dim 1" | "both") {
            Some(format!(
                "a 2x2 instance on `{}`",
                crate::words::excerpt(&m.at)
            ))
        } else if !two(&m.claimed)
            || !m.placements.iter().all(|p| two(p))
            || m.chose.as_deref().is_some_and(|p| !two(p))
        {
            Some("a 2x2 instance whose placements are not two of R, S(d), P(kind)".into())
        } else if m.placements.len() != e.inputs || m.inputs.len() > e.inputs {
            Some(format!(
                "a 2x2 instance of {} inputs for {}",
                m.placements.len(),
                e.inputs
            ))
        } else {
            None
        };
        if bad.is_some() {
            return bad;
        }
    }
    for c in e.collective.iter().flatten() {
        let state = |s: &str| super::collective::valid_state(system, s);
        let bad = if !state(&c.input) {
            Some(format!("input state `{}`", crate::words::excerpt(&c.input)))
        } else if let Some(o) = c.output.as_deref().filter(|o| !state(o)) {
            Some(format!("output state `{}`", crate::words::excerpt(o)))
        } else if !(2..=8).contains(&c.n) {
            Some(format!("a mesh of {} devices (2 to 8 are checked)", c.n))
        } else {
            None
        };
        if bad.is_some() {
            return bad;
        }
    }
    None
}

/// A registry file's text, inflated first when it is gzipped (its first
/// bytes say so, whatever its name). Neither the file nor what it inflates
/// to may exceed `MAX_FILE`.
pub fn read_maybe_gz(path: &str) -> Result<String, UsageError> {
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
pub(super) fn write_maybe_gz(out: &str, text: &str) -> Result<(), UsageError> {
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
pub(super) fn place(s: &str) -> Result<Place, String> {
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

pub(super) fn table(
    path: &str,
    e: &Entry,
    record: bool,
) -> Result<Option<Arc<KernelTable>>, UsageError> {
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
