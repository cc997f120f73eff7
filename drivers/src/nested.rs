//! `run` of a job whose types place a value over several mesh axes, with
//! uneven shards (SPEC.md §23.20): read the nested placements, elaborate
//! DTensor's plan for `redistribute`, run it step by step on the job's
//! pieces, and with `--check` decide F1 and B3 of the plan and DTensor's
//! backward on the job's shape.

use crate::job::{err, job_mesh, read_pieces};
use crate::run::UsageError;
use serde_json::{json, Value};
use spmd_dialects::dtensor::{
    held_nested, plan, redistribute_nested, redistribute_nested_backward, PlanStep,
};
use spmd_dialects::uneven::{parse_placement, show, StepFn};
use spmd_oracle::uneven::{check_step, Failure, Impl, Tally};
use spmd_semantics::uneven::{Nested, Placed};
use spmd_semantics::{Dialect, Tensor};
use spmd_syntax::job::Job;
use spmd_syntax::rule::TypeSpec;

/// The most ranks of a nested job (the product of its axis sizes).
pub const MAX_RANKS: usize = 16;

/// A run of `redistribute` over several mesh axes.
pub struct NestedRun {
    pub axes: Vec<(String, usize)>,
    pub input: Nested,
    pub output: Nested,
    pub pieces: Vec<Tensor>,
    pub result: Vec<Tensor>,
    pub steps: Vec<PlanStep>,
    pub cotangent: Option<Vec<Tensor>>,
    /// DTensor's backward of the cotangent: its plan and its result.
    pub backward: Option<(Vec<PlanStep>, Vec<Tensor>)>,
    pub traffic: usize,
    pub check: Option<Result<Tally, Box<Failure>>>,
}

/// The job as a nested `redistribute`, or `None` when its mesh has one
/// axis.
pub fn run(job: &Job, check: bool) -> Result<Option<NestedRun>, UsageError> {
    if job.mesh.0.len() < 2 {
        return Ok(None);
    }
    match job.dialect.as_deref() {
        Some("dtensor") => {}
        _ => {
            return Err(err(
                "dialect: a job on uneven shards over several mesh axes is a DTensor redistribute (`dialect = \"dtensor\"`, SPEC.md §23.20)",
            ))
        }
    }
    if job.forward.as_deref().map(str::trim) != Some("redistribute") {
        return Err(err(
            "forward: over several mesh axes a job on uneven shards runs `redistribute` (SPEC.md §23.20)",
        ));
    }
    let unsupported = [
        (job.op.is_some(), "`op`"),
        (
            job.backward.is_some(),
            "`backward` (the backward is DTensor's)",
        ),
        (job.jvp.is_some(), "`jvp`"),
        (!job.steps.is_empty() || !job.names.is_empty(), "a program"),
        (job.meaning.is_some(), "`meaning`"),
        (!job.no_grad.is_empty(), "`no_grad`"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|u| u.0) {
        return Err(err(format!(
            "{what} does not go with a nested redistribute (SPEC.md §23.20)"
        )));
    }
    let m = job_mesh(&job.mesh)?;
    let axes: Vec<(String, usize)> = m.axes.iter().map(|a| (a.name.clone(), a.size)).collect();
    let n: usize = axes.iter().map(|a| a.1).product();
    if n > MAX_RANKS {
        return Err(err(format!(
            "mesh: {n} ranks; a nested job runs on at most {MAX_RANKS}"
        )));
    }
    let nested = |t: &TypeSpec, what: &str| -> Result<Nested, UsageError> {
        let TypeSpec::Axes(map) = t else {
            return Err(err(format!(
                "{what}: over several mesh axes, write one placement per axis, e.g. {{\"{}\": \"Shard(0)\", \"{}\": \"Shard(0)\"}}",
                axes[0].0, axes[1].0
            )));
        };
        if let Some(k) = map.keys().find(|k| !axes.iter().any(|a| &a.0 == *k)) {
            return Err(err(format!("{what}: `{k}` is not an axis of the mesh")));
        }
        let ps = axes
            .iter()
            .map(|(a, size)| {
                let text = map.get(a).map(String::as_str).unwrap_or("Replicate()");
                parse_placement(Dialect::Dtensor, text)
                    .map(|p| (*size, p))
                    .map_err(|e| err(format!("{what}.{a}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nested { axes: ps })
    };
    if job.inputs.len() != 1 {
        return Err(err("inputs: redistribute takes one input"));
    }
    let input = nested(&job.inputs[0].ty, "inputs[0].type")?;
    let out_spec = job
        .output
        .as_ref()
        .ok_or_else(|| err("output: a nested redistribute writes its output type"))?;
    let output = nested(out_spec, "output")?;
    let pieces = read_pieces(&job.inputs[0].per_rank, n, "inputs[0].per_rank")?;
    if input.denote(&pieces).is_none() {
        let shapes: Vec<String> = pieces.iter().map(|t| format!("{:?}", t.shape)).collect();
        return Err(err(format!(
            "inputs[0].per_rank: pieces of shapes {} are not well formed for {} (DTensor splits mesh dim 0 first, then each piece)",
            shapes.join(", "),
            shown(&input)
        )));
    }
    let (src, dst) = (held_nested(&input), held_nested(&output));
    let sizes: Vec<usize> = axes.iter().map(|a| a.1).collect();
    let f = redistribute_nested(&sizes, &src, &dst).map_err(|e| err(format!("forward: {e}")))?;
    let steps = plan(&src, &dst);
    let (result, traffic) = traced(&sizes, &steps, &pieces)
        .map_err(|e| err(format!("the forward does not run: {e}")))?;
    let b = redistribute_nested_backward(&sizes, &input, &output).ok();
    let cotangent = match &job.cotangent {
        None => None,
        Some(c) => {
            let g = read_pieces(c, n, "cotangent")?;
            if output.cot().denote(&g).is_none() {
                return Err(err(format!(
                    "cotangent: pieces not well formed for {}",
                    shown(&output.cot())
                )));
            }
            Some(g)
        }
    };
    let backward = match (&cotangent, &b) {
        (Some(g), Some((b, back))) => Some((
            back.clone(),
            b(g).map_err(|e| err(format!("the backward does not run: {e}")))?,
        )),
        _ => None,
    };
    let check = check.then(|| {
        let shape = input.denote(&pieces).expect("checked").shape;
        let mut t = Tally::default();
        check_step(
            &input,
            &output,
            &*f,
            b.as_ref().map(|(b, _): &(StepFn, _)| &**b as &Impl),
            n,
            &shape,
            &mut t,
        )
        .map(|()| t)
    });
    Ok(Some(NestedRun {
        axes,
        input,
        output,
        pieces,
        result,
        steps,
        cotangent,
        backward,
        traffic,
        check,
    }))
}

/// The plan run step by step, with the entries it sends (each step's
/// one-dim traffic on each group of ranks, SPEC.md §23.9).
fn traced(
    sizes: &[usize],
    steps: &[PlanStep],
    xs: &[Tensor],
) -> Result<(Vec<Tensor>, usize), String> {
    let mut cur = xs.to_vec();
    let mut traffic = 0usize;
    for s in steps {
        let f = spmd_dialects::dtensor::redistribute(&s.from, &s.to)?;
        for g in spmd_dialects::dtensor::groups(sizes, s.mesh_dim) {
            let pieces: Vec<Tensor> = g.iter().map(|&r| cur[r].clone()).collect();
            traffic = traffic.saturating_add(spmd_dialects::uneven::traffic(
                Dialect::Dtensor,
                "redistribute",
                &s.from,
                &s.to,
                &pieces,
            ));
            for (&r, t) in g.iter().zip(f(&pieces)?) {
                cur[r] = t;
            }
        }
    }
    Ok((cur, traffic))
}

/// `[Shard(0, chunk), Replicate()]`, DTensor's names axis by axis.
fn shown(p: &Nested) -> String {
    let ps: Vec<String> = p
        .axes
        .iter()
        .map(|(_, q)| show(Dialect::Dtensor, q))
        .collect();
    format!("[{}]", ps.join(", "))
}

fn step_words(steps: &[PlanStep]) -> Vec<String> {
    steps
        .iter()
        .map(|s| {
            format!(
                "mesh dim {}: {} -> {}",
                s.mesh_dim,
                show(Dialect::Dtensor, &s.from),
                show(Dialect::Dtensor, &s.to)
            )
        })
        .collect()
}

fn per_rank(xs: &[Tensor]) -> String {
    xs.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

fn denotes(p: &Nested, xs: &[Tensor]) -> String {
    p.denote(xs)
        .map_or("nothing (not well formed)".into(), |t| t.to_string())
}

impl NestedRun {
    pub fn exit_code(&self) -> u8 {
        u8::from(matches!(self.check, Some(Err(_))))
    }

    pub fn to_text(&self) -> String {
        let mesh: Vec<String> = self.axes.iter().map(|(a, n)| format!("{a}={n}")).collect();
        let mut s = format!(
            "redistribute on mesh {} (nested placements, uneven shards, SPEC.md §23.20)\n",
            mesh.join(", ")
        );
        let steps = step_words(&self.steps);
        s.push_str(&format!(
            "  elaborated: DTensor's plan: {}\n",
            if steps.is_empty() {
                "nothing to move".to_string()
            } else {
                steps.join(", then ")
            }
        ));
        s.push_str(&format!(
            "input:\n  x : {}   denotes {}\n      per rank {}\n",
            shown(&self.input),
            denotes(&self.input, &self.pieces),
            per_rank(&self.pieces)
        ));
        s.push_str(&format!(
            "output:\n  y : {}   denotes {}\n      per rank {}\n",
            shown(&self.output),
            denotes(&self.output, &self.result),
            per_rank(&self.result)
        ));
        if let (Some(g), Some((bsteps, b))) = (&self.cotangent, &self.backward) {
            let oc = self.output.cot();
            let ic = self.input.cot();
            s.push_str(&format!(
                "cotangent:\n  dy : {}   denotes {}\n      per rank {}\n",
                shown(&oc),
                denotes(&oc, g),
                per_rank(g)
            ));
            s.push_str(&format!(
                "backward (DTensor's plan back: {}):\n  dx : {}   denotes {}\n      per rank {}\n",
                step_words(bsteps).join(", then "),
                shown(&ic),
                denotes(&ic, b),
                per_rank(b)
            ));
        }
        s.push_str(&format!("traffic: forward {} entries\n", self.traffic));
        match &self.check {
            None => {}
            Some(Ok(t)) => s.push_str(&format!(
                "check: passed on every value of this shape ({} instances, F1 and B3)\n",
                t.instances
            )),
            Some(Err(f)) => s.push_str(&format!(
                "check: violates {} on this shape: {}\n",
                f.property(),
                crate::uneven::failure_line(f)
            )),
        }
        s
    }

    pub fn to_json(&self) -> Value {
        let typed = |p: &Nested, xs: &[Tensor]| {
            json!({
                "type": shown(p),
                "per_rank": xs.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                "denotes": p.denote(xs).map(|t| t.to_string()),
            })
        };
        let mesh: serde_json::Map<String, Value> = self
            .axes
            .iter()
            .map(|(a, n)| (a.clone(), json!(n)))
            .collect();
        json!({
            "mesh": mesh,
            "op": "redistribute",
            "signature": format!("{} -> {}", shown(&self.input), shown(&self.output)),
            "nested": true,
            "plan": step_words(&self.steps),
            "inputs": [typed(&self.input, &self.pieces)],
            "output": typed(&self.output, &self.result),
            "cotangent": self.cotangent.as_ref().map(|g| typed(&self.output.cot(), g)),
            "backward": self.backward.as_ref().map(|(st, b)| {
                let mut j = typed(&self.input.cot(), b);
                j["plan"] = json!(step_words(st));
                j
            }),
            "traffic": {"forward": self.traffic},
            "check": match &self.check {
                None => Value::Null,
                Some(Ok(t)) => json!({"result": "pass", "instances": t.instances}),
                Some(Err(f)) => json!({"result": "violation", "property": f.property(),
                    "summary": crate::uneven::failure_line(f)}),
            },
        })
    }
}
