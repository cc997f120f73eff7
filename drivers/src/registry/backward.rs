//! The library's backward of its claims (SPEC.md §22.6), on recorded
//! instances.
//!
//! For each claim the recording holds instances: per-rank inputs in the
//! claim's placements, a cotangent in its output placement (and one in
//! Replicate, named `cotangent=R` in the row's arguments), the gradients
//! the library's own autograd gave (a placement and per-rank values per
//! input), and the gradient of the op on the global tensors, which is the
//! real kernel's own derivative. Each gradient must be well formed for its
//! placement (B1) and denote that global gradient (B3). The verdict is
//! computed here from the per-rank values: nothing of the library's
//! backward is trusted.

use super::{parse_tensor, place, BackwardCase, Class, Entry, Row};
use spmd_semantics::pending::{denote, Place};
use spmd_semantics::Tensor;
use std::time::Instant;

/// How the per-rank tensors of one input, output or gradient are read as
/// one value: a placement, or `local` (the plain tensors of
/// `DTensor.from_local`/`to_local`, independent per rank: their stack
/// along a new dim 0, SPEC.md §22.6).
#[derive(Clone, Copy)]
pub(super) enum Reading {
    Placed(Place),
    Local,
}

pub(super) fn reading(s: &str) -> Result<Reading, String> {
    if s == "local" {
        Ok(Reading::Local)
    } else {
        place(s).map(Reading::Placed)
    }
}

/// What `xs` (one tensor per rank) mean under `r`; `None` where they are
/// not well formed for it.
fn denote_reading(r: Reading, xs: &[Tensor]) -> Option<Tensor> {
    match r {
        Reading::Placed(p) => denote(p, xs),
        Reading::Local => xs
            .iter()
            .all(|x| x.shape == xs[0].shape)
            .then(|| Tensor::stack(xs, 0)),
    }
}

/// How one recorded instance came out.
enum Outcome {
    /// Every gradient is well formed and denotes the global gradient
    /// (and, where `true`, the output denotes the op's global value).
    Holds(bool),
    /// The first gradient that does not, in words.
    Fails(String),
    /// Not checked, and why.
    Unchecked(String),
}

fn tensors(xs: &[Option<String>]) -> Option<Vec<Tensor>> {
    xs.iter()
        .map(|x| x.as_deref().and_then(|t| parse_tensor(t).ok()))
        .collect()
}

fn shown(ts: &[Option<String>]) -> String {
    let v: Vec<&str> = ts.iter().map(|t| t.as_deref().unwrap_or("?")).collect();
    format!("[{}]", v.join(" | "))
}

fn judge(c: &BackwardCase) -> Outcome {
    if let Some(e) = &c.error {
        return Outcome::Unchecked(format!("the library raised: {e}"));
    }
    let claimed = &c.claim[0];
    match c.chose.as_deref() {
        Some(p) if p == claimed => {}
        Some(p) => {
            return Outcome::Unchecked(format!(
                "eager dispatch chose {p}, not the claimed {claimed}"
            ))
        }
        None => return Outcome::Unchecked("no output placement recorded".into()),
    }
    let Some(grads) = &c.grads else {
        return Outcome::Unchecked("no gradients recorded".into());
    };
    let Some(ins) = c
        .inputs
        .iter()
        .map(|x| tensors(x))
        .collect::<Option<Vec<_>>>()
    else {
        return Outcome::Unchecked("an input is not exact in float64".into());
    };
    if ins.iter().any(|x| x.len() != c.n) || (c.expected_output.is_some() && c.output.len() != c.n)
    {
        return Outcome::Unchecked(format!(
            "the recording has a value per rank missing on {} ranks",
            c.n
        ));
    }
    if grads.len() != ins.len() || c.expected.len() != ins.len() || ins.len() + 1 != c.claim.len() {
        return Outcome::Unchecked("the recording has a gradient per input missing".into());
    }
    let where_ = || {
        format!(
            "on {} ranks, inputs per rank {}, cotangent {} per rank {}",
            c.n,
            c.inputs
                .iter()
                .zip(&c.claim[1..])
                .map(|(x, p)| format!("{p} {}", shown(x)))
                .collect::<Vec<_>>()
                .join(", "),
            c.cotangent_placement,
            shown(&c.cotangent)
        )
    };
    // Where the output was kept, it must denote the op on the global
    // inputs (F1, F3 on this instance); an instance whose global value is
    // not exact is not checked at all, so that "F1, F3, B1, B3 hold"
    // counts only instances where all four were.
    if !c.output.is_empty() && c.expected_output.is_none() {
        return Outcome::Unchecked("the op's global value is not exact in float64".into());
    }
    if let Some(want) = &c.expected_output {
        let (Some(outs), Ok(want)) = (tensors(&c.output), parse_tensor(want)) else {
            return Outcome::Unchecked("the output is not exact in float64".into());
        };
        let Ok(p) = place(claimed) else {
            return Outcome::Unchecked(format!("placement {claimed} is not modelled"));
        };
        match denote(p, &outs) {
            None => {
                return Outcome::Fails(format!(
                    "F1 {}: the output is {claimed} per rank {}, not well formed for it",
                    where_(),
                    shown(&c.output)
                ))
            }
            Some(got) if got != want => {
                return Outcome::Fails(format!(
                    "F3 {}: the output is {claimed} per rank {} and denotes {}; the op on the global inputs gives {}",
                    where_(),
                    shown(&c.output),
                    super::tensor_text(&got),
                    super::tensor_text(&want)
                ))
            }
            Some(_) => {}
        }
    }
    for (i, g) in grads.iter().enumerate() {
        let global_shape = match reading(&c.claim[i + 1]) {
            Ok(r) => denote_reading(r, &ins[i]).map(|t| t.shape),
            Err(_) => None,
        };
        let Some(global_shape) = global_shape else {
            return Outcome::Unchecked(format!("input {i} is not well formed for its placement"));
        };
        let want = if c.expected_zero.get(i).copied().unwrap_or(false) {
            Tensor::zeros(&global_shape)
        } else {
            match c.expected[i].as_deref().map(parse_tensor) {
                Some(Ok(t)) => t,
                _ => {
                    return Outcome::Unchecked(format!(
                        "the global gradient of input {i} is not exact in float64"
                    ))
                }
            }
        };
        let (p_text, got, per_rank) = match g {
            // No gradient: zero on every rank, whatever the placement.
            None => ("none".to_string(), Tensor::zeros(&global_shape), None),
            Some(g) => {
                let Ok(p) = reading(&g.placement) else {
                    return Outcome::Unchecked(format!(
                        "the gradient of input {i} has placement {}, which is not modelled",
                        g.placement
                    ));
                };
                let Some(ts) = tensors(&g.per_rank) else {
                    return Outcome::Unchecked(format!(
                        "the gradient of input {i} is not exact in float64"
                    ));
                };
                if ts.len() != c.n {
                    return Outcome::Unchecked(format!(
                        "the gradient of input {i} has {} ranks",
                        ts.len()
                    ));
                }
                match denote_reading(p, &ts) {
                    Some(t) => (g.placement.clone(), t, Some(shown(&g.per_rank))),
                    None => {
                        return Outcome::Fails(format!(
                            "B1 {}: the gradient of input {i} is {} per rank {}, not well formed for {}",
                            where_(),
                            g.placement,
                            shown(&g.per_rank),
                            g.placement
                        ))
                    }
                }
            }
        };
        if got != want {
            return Outcome::Fails(format!(
                "B3 {}: the library's gradient of input {i} is {p_text}{} and denotes {}; the gradient of the op on the global tensors is {}",
                where_(),
                per_rank.map(|r| format!(" per rank {r}")).unwrap_or_default(),
                super::tensor_text(&got),
                super::tensor_text(&want)
            ));
        }
    }
    Outcome::Holds(c.expected_output.is_some())
}

/// The first recorded instance of `claim` with cotangent `cot` that
/// fails (the row's counterexample), if any.
pub(super) fn first_failure<'a>(
    e: &'a Entry,
    claim: &[String],
    cot: &str,
) -> Option<&'a BackwardCase> {
    e.backward
        .iter()
        .filter(|c| c.claim == claim && c.cotangent_placement == cot)
        .find(|c| matches!(judge(c), Outcome::Fails(_)))
}

/// One row per claim with recorded instances: incorrect at the first
/// instance that fails, correct when some instance was checked and none
/// failed, undetermined otherwise.
pub(super) fn rows(e: &Entry) -> Vec<Row> {
    let mut claims: Vec<(&Vec<String>, &str)> = Vec::new();
    for c in &e.backward {
        let key = (&c.claim, c.cotangent_placement.as_str());
        if !claims.contains(&key) {
            claims.push(key);
        }
    }
    claims
        .into_iter()
        .map(|(claim, cot)| {
            let t0 = Instant::now();
            let mut held = 0usize;
            let mut forward = 0usize;
            let mut sizes: Vec<usize> = Vec::new();
            let mut skipped: Vec<String> = Vec::new();
            let mut failed = None;
            for c in e
                .backward
                .iter()
                .filter(|c| &c.claim == claim && c.cotangent_placement == cot)
            {
                match judge(c) {
                    Outcome::Holds(f) => {
                        held += 1;
                        forward += usize::from(f);
                        if !sizes.contains(&c.n) {
                            sizes.push(c.n);
                        }
                    }
                    Outcome::Fails(why) => {
                        failed = Some(why);
                        break;
                    }
                    Outcome::Unchecked(why) => {
                        if !skipped.contains(&why) {
                            skipped.push(why);
                        }
                    }
                }
            }
            let (class, detail) = match failed {
                Some(why) => (Class::Incorrect, why),
                None if held > 0 => (
                    Class::Correct,
                    format!(
                        "{} hold on {held} recorded instance{} (meshes of {} ranks){}",
                        match forward {
                            0 => "B1, B3".to_string(),
                            f if f == held => "F1, F3, B1, B3".to_string(),
                            f => format!("B1, B3 (F1, F3 on {f} of them)"),
                        },
                        if held == 1 { "" } else { "s" },
                        sizes
                            .iter()
                            .map(usize::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        if skipped.is_empty() {
                            String::new()
                        } else {
                            format!("; others not checked: {}", skipped.join("; "))
                        }
                    ),
                ),
                None => (
                    Class::Undetermined,
                    if skipped.is_empty() {
                        "no instance was recorded".to_string()
                    } else {
                        format!("no instance checked: {}", skipped.join("; "))
                    },
                ),
            };
            // A cotangent other than the output's placement is named in the
            // row's arguments.
            let args = if cot == claim[0] {
                e.args.clone()
            } else if e.args.is_empty() {
                format!("cotangent={cot}")
            } else {
                format!("{}, cotangent={cot}", e.args)
            };
            Row {
                op: e.op.clone(),
                args,
                inputs: claim[1..].to_vec(),
                output: claim[0].clone(),
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
