//! Repro scripts (SPEC.md §22.3): a counterexample of an incorrect claim
//! as a PyTorch script that runs it in DTensor.

use super::*;

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
