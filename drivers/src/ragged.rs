//! `run` of a `ragged_all_to_all` job (SPEC.md §23.19): read the call's
//! buffers and layout, elaborate it as JAX does (its transpose and its JVP
//! rule, `dialects::jax`), execute it (`interp::ragged`), and with
//! `--check` decide B3 of the transpose and J1 of the JVP on the job's
//! shapes and layout (`oracle::ragged`).

use crate::job::{err, job_mesh, one_axis_text, read_pieces};
use crate::run::UsageError;
use serde_json::{json, Value};
use spmd_interp::ragged::{row_width, Layout};
use spmd_oracle::ragged::{check_jvp, check_transpose, exact_vjp, JvpMismatch, Mismatch};
use spmd_semantics::{Dialect, State, Tensor};
use spmd_syntax::job::Job;

/// The collective's name in a job's `forward`.
pub const NAME: &str = "ragged_all_to_all";

/// The most entries (operand and output, every rank) whose derivative is
/// taken column by column: each column is one forward call, so the cost
/// grows with the square of this.
pub const MAX_ENTRIES: usize = 2048;

/// What `--check` found: B3 of JAX's transpose and J1 of its JVP rule.
pub struct RaggedCheck {
    pub transpose: Result<usize, Mismatch>,
    pub jvp: Result<usize, JvpMismatch>,
}

/// A run of one `ragged_all_to_all` call.
pub struct RaggedRun {
    pub axis: String,
    pub layout: Layout,
    pub operand: Vec<Tensor>,
    pub output: Vec<Tensor>,
    pub result: Vec<Tensor>,
    pub cotangent: Option<Vec<Tensor>>,
    /// JAX's transpose of the cotangent: (operand's, output's).
    pub backward: Option<(Vec<Tensor>, Vec<Tensor>)>,
    /// The exact cotangents, from the forward alone (`None` beyond
    /// [`MAX_ENTRIES`]).
    pub exact: Option<(Vec<Tensor>, Vec<Tensor>)>,
    /// Entries of both buffers on every rank.
    pub entries: usize,
    /// Entries of the buffers sent from one rank to another, forward (the
    /// backward call sends as many back).
    pub traffic: usize,
    pub check: Option<RaggedCheck>,
    /// `--check` was asked for (it is not run beyond [`MAX_ENTRIES`]).
    pub check_asked: bool,
}

/// The job as a `ragged_all_to_all` call, or `None` when it is not one.
pub fn run(job: &Job, check: bool) -> Result<Option<RaggedRun>, UsageError> {
    let named = job.forward.as_deref().map(str::trim) == Some(NAME);
    let layout = match (&job.layout, named) {
        (None, false) => return Ok(None),
        (Some(_), false) => {
            return Err(err(format!(
                "layout: only `forward = \"{NAME}\"` takes a layout"
            )))
        }
        (None, true) => {
            return Err(err(format!(
                "layout: `{NAME}` needs its layout: input_offsets, send_sizes, output_offsets and recv_sizes, one list per rank"
            )))
        }
        (Some(l), true) => Layout {
            input_offsets: l.input_offsets.clone(),
            send_sizes: l.send_sizes.clone(),
            output_offsets: l.output_offsets.clone(),
            recv_sizes: l.recv_sizes.clone(),
        },
    };
    match job.dialect.as_deref() {
        None | Some("jax") => {}
        Some(d) => {
            return Err(err(format!(
                "dialect: `{NAME}` is JAX's collective (dialect `jax`), not {d}'s"
            )))
        }
    }
    let unsupported = [
        (job.op.is_some(), "`op`"),
        (
            job.backward.is_some(),
            "`backward` (the transpose is JAX's own)",
        ),
        (job.jvp.is_some(), "`jvp` (the JVP is JAX's own)"),
        (!job.steps.is_empty() || !job.names.is_empty(), "a program"),
        (job.meaning.is_some(), "`meaning`"),
        (!job.no_grad.is_empty(), "`no_grad`"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|u| u.0) {
        return Err(err(format!(
            "{what} does not go with `{NAME}` (SPEC.md §23.19)"
        )));
    }
    if job.mesh.0.len() != 1 {
        return Err(err(format!("mesh: `{NAME}` runs over one mesh axis")));
    }
    let m = job_mesh(&job.mesh)?;
    let (axis, n) = (m.axes[0].name.clone(), m.axes[0].size);
    if job.inputs.len() != 2 {
        return Err(err(format!(
            "inputs: `{NAME}` takes two inputs, `operand` and `output`; {} given",
            job.inputs.len()
        )));
    }
    let mut bufs = Vec::new();
    for (i, (x, name)) in job.inputs.iter().zip(["operand", "output"]).enumerate() {
        let what = format!("inputs[{i}] ({name})");
        let text = one_axis_text(&x.ty, &axis, &format!("{what}.type"))?;
        match Dialect::Jax.parse_state(&text) {
            Ok((State::Varying, _)) => {}
            Ok(_) => {
                return Err(err(format!(
                    "{what}.type: `{}`: each rank's buffer is its own, so the type is Varying",
                    text.trim()
                )))
            }
            Err(e) => return Err(err(format!("{what}.type: {e}"))),
        }
        let xs = read_pieces(&x.per_rank, n, &format!("{what}.per_rank"))?;
        if let Some(r) = xs.iter().position(|t| t.shape != xs[0].shape) {
            return Err(err(format!(
                "{what}.per_rank: rank {r} has shape {:?}, rank 0 {:?}; JAX gives every rank one shape",
                xs[r].shape, xs[0].shape
            )));
        }
        if xs[0].shape.is_empty() {
            return Err(err(format!(
                "{what}.per_rank: a buffer has a leading dim of rows, not a scalar"
            )));
        }
        bufs.push(xs);
    }
    let output = bufs.pop().expect("two inputs");
    let operand = bufs.pop().expect("two inputs");
    if operand[0].shape[1..] != output[0].shape[1..] {
        return Err(err(format!(
            "inputs: rows of the operand (shape {:?}) and of the output (shape {:?}) differ",
            operand[0].shape, output[0].shape
        )));
    }
    let (op_rows, out_rows) = (operand[0].shape[0], output[0].shape[0]);
    if layout.ranks() != n {
        return Err(err(format!(
            "layout: lists for {} ranks, the mesh has {n}",
            layout.ranks()
        )));
    }
    layout
        .validate(op_rows, out_rows)
        .map_err(|e| err(format!("layout: {e}")))?;
    let result = layout.forward(&operand, &output);
    let cotangent = match &job.cotangent {
        None => None,
        Some(c) => {
            let g = read_pieces(c, n, "cotangent")?;
            if let Some(r) = g.iter().position(|t| t.shape != result[0].shape) {
                return Err(err(format!(
                    "cotangent: rank {r} has shape {:?}, the result {:?}",
                    g[r].shape, result[0].shape
                )));
            }
            Some(g)
        }
    };
    let backward = cotangent
        .as_ref()
        .map(|g| spmd_dialects::jax::ragged_all_to_all_transpose(&layout, g, op_rows));
    let width = row_width(&operand[0]);
    let traffic = layout
        .segments()
        .iter()
        .filter(|g| g.src != g.dst)
        .map(|g| g.rows * width)
        .sum();
    let entries = n * (operand[0].numel() + output[0].numel());
    let small = entries <= MAX_ENTRIES;
    let exact = match (&cotangent, small) {
        (Some(g), true) => Some(exact_vjp(&layout, &operand[0].shape, &output[0].shape, g)),
        _ => None,
    };
    let asked = check;
    let check = (check && small).then(|| {
        let l = layout.clone();
        let transpose = check_transpose(&layout, &operand[0].shape, &output[0].shape, &|c| {
            spmd_dialects::jax::ragged_all_to_all_transpose(&l, c, op_rows)
        })
        .map(|()| entries * n * output[0].numel());
        // JAX's JVP rule (`_ragged_all_to_all_jvp`): the op itself on the
        // tangents, with the primal's sizes and offsets.
        let jvp = check_jvp(&layout, &operand, &output, &|_, _, dop, dout| {
            l.forward(dop, dout)
        })
        .map(|()| entries);
        RaggedCheck { transpose, jvp }
    });
    Ok(Some(RaggedRun {
        axis,
        layout,
        operand,
        output,
        result,
        cotangent,
        backward,
        exact,
        entries,
        traffic,
        check,
        check_asked: asked,
    }))
}

fn per_rank(xs: &[Tensor]) -> String {
    xs.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

fn strings(xs: &[Tensor]) -> Vec<String> {
    xs.iter().map(|t| t.to_string()).collect()
}

/// A B3 mismatch in one line.
fn mismatch_line(m: &Mismatch) -> String {
    format!(
        "with the cotangent 1 at rank {}, row {}, element {} of the result, the cotangent of `{}` at rank {}, row {}, element {} is {}, the derivative gives {}",
        m.cot_rank,
        m.cot_row,
        m.cot_elem,
        m.input,
        m.rank,
        m.row,
        m.elem,
        m.got.as_ref().map_or("missing".to_string(), |q| q.to_string()),
        m.want
    )
}

/// A J1 mismatch in one line.
fn jvp_line(m: &JvpMismatch) -> String {
    format!(
        "along the tangent 1 at `{}` rank {}, element {}, the result's tangent at rank {}, element {} is {}, the derivative gives {}",
        m.input,
        m.rank,
        m.elem,
        m.out_rank,
        m.out_elem,
        m.got.as_ref().map_or("missing".to_string(), |q| q.to_string()),
        m.want
    )
}

impl RaggedRun {
    pub fn exit_code(&self) -> u8 {
        u8::from(
            self.check
                .as_ref()
                .is_some_and(|c| c.transpose.is_err() || c.jvp.is_err()),
        )
    }

    pub fn to_text(&self) -> String {
        let n = self.layout.ranks();
        let mut s = format!(
            "{NAME} on axis `{}` of {n} ranks (JAX, SPEC.md §23.19)\n",
            self.axis
        );
        s.push_str("segments (sender's rows -> receiver's rows):\n");
        for g in self.layout.segments() {
            s.push_str(&format!(
                "  rank {} rows {}..{} -> rank {} rows {}..{}{}\n",
                g.src,
                g.from,
                g.from + g.rows,
                g.dst,
                g.to,
                g.to + g.rows,
                if g.rows == 0 { " (empty)" } else { "" }
            ));
        }
        s.push_str(&format!(
            "inputs:\n  operand : Varying   per rank {}\n  output  : Varying   per rank {}\n",
            per_rank(&self.operand),
            per_rank(&self.output)
        ));
        s.push_str(&format!(
            "result:\n  y : Varying   per rank {}\n",
            per_rank(&self.result)
        ));
        if let (Some(g), Some((dop, dout))) = (&self.cotangent, &self.backward) {
            s.push_str(&format!(
                "cotangent:\n  dy : Varying   per rank {}\nbackward (JAX's transpose, jax 0.12.0.1 parallel.py):\n  d operand : per rank {}\n  d output  : per rank {}\n",
                per_rank(g),
                per_rank(dop),
                per_rank(dout)
            ));
            match &self.exact {
                Some((a, b)) => s.push_str(&format!(
                    "exact (the derivative, from the forward alone):\n  d operand : per rank {}\n  d output  : per rank {}\n",
                    per_rank(a),
                    per_rank(b)
                )),
                None => s.push_str(&format!(
                    "exact: not computed ({} entries; at most {MAX_ENTRIES})\n",
                    self.entries
                )),
            }
        }
        s.push_str(&format!(
            "traffic: forward {} entries between ranks, backward {} (the offsets' all_to_all not counted)\n",
            self.traffic, self.traffic
        ));
        if self.check_asked && self.check.is_none() {
            s.push_str(&format!(
                "check: not run: the buffers hold {} entries, and B3 and J1 are decided on at most {MAX_ENTRIES}\n",
                self.entries
            ));
        }
        if let Some(c) = &self.check {
            match &c.transpose {
                Ok(k) => s.push_str(&format!(
                    "check B3: JAX's transpose equals the derivative on every basis cotangent of this layout and these shapes ({k} entries)\n"
                )),
                Err(m) => s.push_str(&format!(
                    "check B3: violated by JAX's transpose: {}\n",
                    mismatch_line(m)
                )),
            }
            match &c.jvp {
                Ok(k) => s.push_str(&format!(
                    "check J1: JAX's JVP equals the derivative along every unit tangent at these values ({k} tangents)\n"
                )),
                Err(m) => s.push_str(&format!(
                    "check J1: violated by JAX's JVP: {}\n",
                    jvp_line(m)
                )),
            }
        }
        s
    }

    pub fn to_json(&self) -> Value {
        let ty = |xs: &[Tensor]| json!({"type": "Varying", "per_rank": strings(xs)});
        json!({
            "mesh": {self.axis.clone(): self.layout.ranks()},
            "op": NAME,
            "signature": "Varying, Varying -> Varying",
            "ragged": {
                "input_offsets": self.layout.input_offsets,
                "send_sizes": self.layout.send_sizes,
                "output_offsets": self.layout.output_offsets,
                "recv_sizes": self.layout.recv_sizes,
            },
            "inputs": [ty(&self.operand), ty(&self.output)],
            "output": ty(&self.result),
            "cotangent": self.cotangent.as_deref().map(ty),
            "backward": self.backward.as_ref().map(|(a, b)| json!({
                "transpose": "jax",
                "operand": strings(a),
                "output": strings(b),
            })),
            "exact": self.exact.as_ref().map(|(a, b)| json!({
                "operand": strings(a),
                "output": strings(b),
            })),
            "traffic": {"forward": self.traffic, "backward": self.traffic},
            "check": if self.check_asked && self.check.is_none() {
                Some(json!({"result": "not_run", "entries": self.entries, "at_most": MAX_ENTRIES}))
            } else { self.check.as_ref().map(|c| json!({
                "result": if c.transpose.is_ok() && c.jvp.is_ok() { "pass" } else { "violation" },
                "B3": match &c.transpose {
                    Ok(k) => json!({"result": "pass", "entries": k}),
                    Err(m) => json!({"result": "violation", "summary": mismatch_line(m)}),
                },
                "J1": match &c.jvp {
                    Ok(k) => json!({"result": "pass", "tangents": k}),
                    Err(m) => json!({"result": "violation", "summary": jvp_line(m)}),
                },
            }))},
        })
    }
}
