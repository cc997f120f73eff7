//! The claims on a 2x2 mesh (SPEC.md §22.7), on recorded instances.
//!
//! A single-dim strategy is a claim about one mesh dim, which the library
//! expands to every dim of a larger mesh. The recording runs each claim
//! eagerly on a 2x2 mesh with its input placements on dim 0, on dim 1,
//! and on both; here the output's global value is computed from the
//! placements the library chose (mesh dim 1 within each coordinate of dim
//! 0, then dim 0) and compared with the op on the global inputs.

use super::{parse_tensor, place, tensor_text, Class, Entry, Mesh2dCase, Row};
use spmd_semantics::pending::denote;
use spmd_semantics::Tensor;
use std::time::Instant;

/// What four per-rank tensors (rank 2i + j) denote under the placements
/// of the two mesh dims; `None` where they are not well formed.
fn denote2d(places: &[String], ts: &[Tensor]) -> Option<Tensor> {
    let [p0, p1] = places else { return None };
    let (p0, p1) = (place(p0).ok()?, place(p1).ok()?);
    if ts.len() != 4 {
        return None;
    }
    let rows = [denote(p1, &ts[0..2])?, denote(p1, &ts[2..4])?];
    denote(p0, &rows)
}

enum Outcome {
    Holds,
    Fails(String),
    Unchecked(String),
}

fn judge(c: &Mesh2dCase) -> Outcome {
    if let Some(e) = &c.error {
        return Outcome::Unchecked(format!("raised: {e}"));
    }
    let Some(chose) = &c.chose else {
        return Outcome::Unchecked("no output recorded".into());
    };
    let Some(Ok(want)) = c.expected_output.as_deref().map(parse_tensor) else {
        return Outcome::Unchecked("the op's global value is not exact in float64".into());
    };
    let Some(outs) = c
        .output
        .iter()
        .map(|t| t.as_deref().and_then(|t| parse_tensor(t).ok()))
        .collect::<Option<Vec<_>>>()
    else {
        return Outcome::Unchecked("the output is not exact in float64".into());
    };
    if outs.len() != 4 {
        return Outcome::Unchecked(format!("an output of {} ranks on a 2x2 mesh", outs.len()));
    }
    let shown = |xs: &[Option<String>]| {
        xs.iter()
            .map(|t| t.as_deref().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let inputs = c
        .inputs
        .iter()
        .zip(&c.placements)
        .map(|(x, p)| format!("({}) [{}]", p.join(", "), shown(x)))
        .collect::<Vec<_>>()
        .join(", ");
    match denote2d(chose, &outs) {
        None => Outcome::Fails(format!(
            "F1 on 2x2, inputs per rank {inputs}: the output is ({}) per rank [{}], not well formed for it",
            chose.join(", "),
            shown(&c.output)
        )),
        Some(got) if got != want => Outcome::Fails(format!(
            "F3 on 2x2, inputs per rank {inputs}: the output is ({}) per rank [{}] and denotes {}; the op on the global inputs gives {}",
            chose.join(", "),
            shown(&c.output),
            tensor_text(&got),
            tensor_text(&want)
        )),
        Some(_) => Outcome::Holds,
    }
}

/// One row per claim and mesh dim(s): incorrect at the first instance
/// that fails, correct when one was checked and none failed, undetermined
/// otherwise. The output the row names is what the library chose.
pub(super) fn rows(e: &Entry) -> Vec<Row> {
    let mut keys: Vec<(&Vec<String>, &str)> = Vec::new();
    for c in &e.mesh2d {
        let k = (&c.claim, c.at.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(claim, at)| {
            let t0 = Instant::now();
            let mine: Vec<&Mesh2dCase> = e
                .mesh2d
                .iter()
                .filter(|c| &c.claim == claim && c.at == at)
                .collect();
            let (mut held, mut failed, mut skipped) = (0, None, Vec::<String>::new());
            for c in &mine {
                match judge(c) {
                    Outcome::Holds => held += 1,
                    Outcome::Fails(why) => {
                        failed = Some(why);
                        break;
                    }
                    Outcome::Unchecked(why) => {
                        if !skipped.contains(&why) {
                            skipped.push(why)
                        }
                    }
                }
            }
            let first = mine[0];
            let chose = first
                .chose
                .as_ref()
                .map(|p| format!("({})", p.join(", ")))
                .unwrap_or_else(|| "?".into());
            let claimed = format!("({})", first.claimed.join(", "));
            let note = if chose != claimed && chose != "?" {
                format!("; DTensor chose {chose} where the claim gives {claimed}")
            } else {
                String::new()
            };
            let (class, detail) = match failed {
                Some(why) => (Class::Incorrect, format!("{why}{note}")),
                None if held > 0 => (
                    Class::Correct,
                    format!(
                        "F1, F3 hold on {held} recorded instance{} on a 2x2 mesh{note}",
                        if held == 1 { "" } else { "s" }
                    ),
                ),
                None => (
                    Class::Undetermined,
                    format!("no instance checked: {}", skipped.join("; ")),
                ),
            };
            Row {
                op: e.op.clone(),
                args: if e.args.is_empty() {
                    format!("mesh {at}")
                } else {
                    format!("{}, mesh {at}", e.args)
                },
                inputs: first
                    .placements
                    .iter()
                    .map(|p| format!("({})", p.join(", ")))
                    .collect(),
                output: chose,
                class,
                detail,
                verdict: None,
                millis: t0.elapsed().as_millis(),
                cex: None,
                repro: None,
            }
        })
        .collect()
}
