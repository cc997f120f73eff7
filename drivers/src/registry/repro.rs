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

/// The Python arguments of an aten entry's recorded call (`x0`, `x1`, …
/// for its tensors), or why there are none.
fn py_call(e: &Entry) -> Result<Vec<String>, String> {
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
    Ok(args.into_iter().chain(kwargs).collect())
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
    let all = py_call(e)?;
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
/// exist) as `NNN.py`, and `index.json` naming the claim of each; then the
/// script of each incorrect backward row, marked `"backward": true`.
pub fn write_repros(rep: &Report, dir: &str) -> Result<(), UsageError> {
    if !std::path::Path::new(dir).is_dir() {
        return Err(UsageError(format!("{dir}: not a directory")));
    }
    let mut index = Vec::new();
    let kinds = [(repros(rep), "", false), (backward_repros(rep), "b", true)];
    for (scripts, prefix, backward) in kinds {
        for (i, (r, script)) in scripts.into_iter().enumerate() {
            let name = format!("{prefix}{i:03}.py");
            let Ok(text) = script else { continue };
            let path = std::path::Path::new(dir).join(&name);
            std::fs::write(&path, text)
                .map_err(|e| UsageError(format!("{}: cannot write: {e}", path.display())))?;
            let mut item = json!({"file": name, "op": r.op, "args": r.args,
                "inputs": r.inputs, "output": r.output});
            if backward {
                item["backward"] = json!(true);
            }
            index.push(item);
        }
    }
    let path = std::path::Path::new(dir).join("index.json");
    std::fs::write(&path, Value::Array(index).to_string())
        .map_err(|e| UsageError(format!("{}: cannot write: {e}", path.display())))
}

/// The script of a backward counterexample (SPEC.md §22.6): what differs
/// between the kinds of entry is how the leaves are made, how the op is
/// called on them and the function the reference differentiates.
const BACKWARD_SCRIPT: &str = r#"# spmd-check registry --show-repro: @SHOWN@, @PLACEMENTS@, cotangent @COT@ (backward)
# The library's gradient on a recorded instance of @N@ ranks, against torch's
# gradient of the same function of the global tensors. Exit 0: reproduced.
import sys
import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

N = @N@
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=N)
mesh = init_device_mesh("cpu", (N,))
per_rank = [@PER_RANK@]
readings = [@READINGS@]
cot_per_rank = @COT_PER_RANK@
cot_reading = @COT_READING@
claimed = @CLAIMED@


def placement(s):
    if s == "R":
        return Replicate()
    if s.startswith("S("):
        return Shard(int(s[2:-1]))
    return Partial(s[2:-1])


def reading_of(p):
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    return f"P({p.reduce_op})"


def meaning(ts, s):
    """What per-rank tensors mean under a reading (None: not well formed)."""
    if s == "local":
        return torch.stack(ts)
    if s == "R":
        return ts[0] if all(torch.equal(t, ts[0]) for t in ts) else None
    if s.startswith("S("):
        return torch.cat(ts, int(s[2:-1]))
    st = torch.stack(ts)
    return {"sum": st.sum(0), "avg": st.mean(0), "max": st.amax(0), "min": st.amin(0)}[s[2:-1]]


def dtensor(mode, ts, s):
    return DTensor.from_local(mode.rank_map(lambda r: ts[r].clone()), mesh, [placement(s)], run_check=False)


@FUNCTIONS@

xs = [meaning(ts, s).clone().requires_grad_() for ts, s in zip(per_rank, readings)]
want = torch.autograd.grad(reference(*xs), xs, meaning(cot_per_rank, cot_reading), allow_unused=True)
with LocalTensorMode(N) as mode:
    leaves, y, ct = run(mode)
    if claimed is not None and reading_of(y.placements[0]) != claimed:
        print("not reproduced: DTensor chose", y.placements[0], "here, not the claimed", claimed)
        sys.exit(1)
    gs = torch.autograd.grad(y, leaves, ct, allow_unused=True)
    got = []
    for g, s in zip(gs, readings):
        if g is None:
            got.append((None, "none"))
        elif isinstance(g, DTensor):
            got.append(([g._local_tensor._local_tensors[r] for r in range(N)], reading_of(g.placements[0])))
        else:
            got.append(([g._local_tensors[r] for r in range(N)], s))
reproduced = []
for i, ((locs, s), w) in enumerate(zip(got, want)):
    w = torch.zeros_like(xs[i]) if w is None else w
    value = torch.zeros_like(w) if locs is None else meaning(locs, s)
    shown = "none" if locs is None else f"{s} per rank {[t.tolist() for t in locs]}"
    if value is None:
        print(f"the gradient of input {i} is {shown}, not well formed for {s}")
        reproduced.append(f"input {i}'s gradient is not well formed (B1)")
    elif not torch.equal(value.to(w.dtype), w):
        print(f"the gradient of input {i} is {shown}, denoting {value.tolist()}; "
              f"torch's gradient of the global function is {w.tolist()}")
        reproduced.append(f"input {i}'s gradient denotes {value.tolist()}, not {w.tolist()} (B3)")
    else:
        print(f"the gradient of input {i} agrees: {w.tolist()}")
print("reproduced: " + "; ".join(reproduced) if reproduced else "not reproduced: every gradient agrees")
sys.exit(0 if reproduced else 1)
"#;

fn py_str_list(xs: &[String]) -> String {
    xs.iter()
        .map(|x| format!("{x:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn py_tensors(ts: &[Option<String>]) -> Result<String, String> {
    let v = ts
        .iter()
        .map(|t| {
            let t = t.as_deref().ok_or("a value that is not exact in float64")?;
            py_tensor(&parse_tensor(t)?)
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(format!("[{}]", v.join(", ")))
}

/// A PyTorch script that runs one failing instance of an incorrect
/// backward row (SPEC.md §22.6) in DTensor and exits 0 when the library's
/// gradient is not well formed or does not denote torch's gradient of the
/// same function on the global tensors, 1 otherwise.
pub fn backward_repro(e: &Entry, c: &BackwardCase) -> Result<String, String> {
    let readings = &c.claim[1..];
    let good = |s: &str| {
        s == "local"
            || place(s).is_ok_and(|p| matches!(p, Place::Inv | Place::Shard(_) | Place::Part(_)))
    };
    if let Some(bad) = c
        .claim
        .iter()
        .chain(std::iter::once(&c.cotangent_placement))
        .find(|s| !good(s))
    {
        return Err(format!(
            "placement `{}` has no DTensor reading",
            crate::words::excerpt(bad)
        ));
    }
    let params: Vec<String> = (0..readings.len()).map(|i| format!("x{i}")).collect();
    let (claimed, functions) = match (e.family.as_str(), e.op.as_str()) {
        ("local", "DTensor.from_local") => {
            let p = &c.claim[0];
            (
                "None".to_string(),
                format!(
                    r#"def reference(x):
    return meaning(list(x.unbind(0)), {p:?}) * 1 if {p:?} != "R" else x * 1


def run(mode):
    leaf = mode.rank_map(lambda r: per_rank[0][r].clone()).requires_grad_()
    return [leaf], DTensor.from_local(leaf, mesh, [placement({p:?})], run_check=False), dtensor(mode, cot_per_rank, cot_reading)"#
                ),
            )
        }
        ("local", "DTensor.to_local") => {
            let gp = match e.args.as_str() {
                "" => "None",
                "grad_placements=[Partial(sum)]" => "[Partial(\"sum\")]",
                other => return Err(format!("to_local with `{}`", crate::words::excerpt(other))),
            };
            (
                "None".to_string(),
                format!(
                    r#"def reference(x):
    return torch.stack([x] * N) if cot_reading == "local" else x * 1


def run(mode):
    leaf = dtensor(mode, per_rank[0], readings[0]).requires_grad_()
    ct = mode.rank_map(lambda r: cot_per_rank[r].clone())
    return [leaf], leaf.to_local(grad_placements={gp}), ct"#
                ),
            )
        }
        ("redistribute", _) => (
            format!("{:?}", c.claim[0]),
            format!(
                r#"def reference(x):
    return x.clone()


def run(mode):
    leaf = dtensor(mode, per_rank[0], readings[0]).requires_grad_()
    return [leaf], leaf.redistribute(mesh, [placement({:?})]), dtensor(mode, cot_per_rank, cot_reading)"#,
                c.claim[0]
            ),
        ),
        _ if e.op.starts_with("aten.") => (
            format!("{:?}", c.claim[0]),
            format!(
                r#"def reference({params}):
    return torch.ops.{op}({all})


def run(mode):
    leaves = [dtensor(mode, ts, s).requires_grad_() for ts, s in zip(per_rank, readings)]
    return leaves, reference(*leaves), dtensor(mode, cot_per_rank, cot_reading)"#,
                params = params.join(", "),
                op = e.op,
                all = py_call(e)?.join(", ")
            ),
        ),
        _ => return Err("backward repro scripts are written for DTensor only, so far".into()),
    };
    let per_rank = c
        .inputs
        .iter()
        .map(|ts| py_tensors(ts))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BACKWARD_SCRIPT
        .replace("@SHOWN@", &shown(e))
        .replace(
            "@PLACEMENTS@",
            &format!("{} -> {}", readings.join(", "), c.claim[0]),
        )
        .replace("@COT@", &c.cotangent_placement)
        .replace("@N@", &c.n.to_string())
        .replace("@PER_RANK@", &per_rank.join(", "))
        .replace("@READINGS@", &py_str_list(readings))
        .replace("@COT_PER_RANK@", &py_tensors(&c.cotangent)?)
        .replace("@COT_READING@", &format!("{:?}", c.cotangent_placement))
        .replace("@CLAIMED@", &claimed)
        .replace("@FUNCTIONS@", &functions))
}

/// The scripts of every incorrect backward row (SPEC.md §22.6), with the
/// row each belongs to.
pub fn backward_repros(rep: &Report) -> Vec<(&Row, Result<String, String>)> {
    rep.backward
        .iter()
        .filter(|r| r.class == Class::Incorrect)
        .map(|r| {
            // A row's arguments are its entry's, with `cotangent=…` after
            // them where the cotangent is not in the output's placement.
            let (args, cot) = match r.args.rsplit_once("cotangent=") {
                Some((a, c)) => (a.strip_suffix(", ").unwrap_or(a), c.to_string()),
                None => (r.args.as_str(), r.output.clone()),
            };
            let mut claim = vec![r.output.clone()];
            claim.extend(r.inputs.iter().cloned());
            // Several entries may share the op and arguments (one per pair
            // of DTensor.redistribute): the instance is in one of them.
            let failing = rep
                .file
                .entries
                .iter()
                .filter(|e| e.op == r.op && e.args == args)
                .find_map(|e| super::backward::first_failure(e, &claim, &cot).map(|c| (e, c)));
            let script = match failing {
                Some((e, c)) if rep.file.system == "dtensor" => backward_repro(e, c),
                Some(_) => {
                    Err("backward repro scripts are written for DTensor only, so far".into())
                }
                None => Err("no failing instance".into()),
            };
            (r, script)
        })
        .collect()
}
