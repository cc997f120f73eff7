//! The seeds' collective tables as data (SPEC.md §10.3): seed 003's
//! comms-by-state-transition and forward/backward tables, and seed 000's
//! primitives and transpose pairs. Each forward/backward row is checked for
//! F1-F3, B1-B3 and J1, its transpose pair for T1, for every parameter choice
//! in scope.

use crate::run::{check_op, UsageError};
use crate::types::{meshes_named, parse_types};
use spmd_generators::Scope;
use spmd_interp::catalogue::collective_typed;
use spmd_interp::{Backward, Op, TypedOp};
use spmd_oracle::{check_involution, Outcome, Property, Verdict, Violation};
use spmd_semantics::{Dialect, Mesh};
use std::ops::ControlFlow;
use std::sync::LazyLock;

/// A forward collective of a seed table with its declared transpose.
#[derive(Clone, Copy, Debug)]
pub struct PairRow {
    pub id: &'static str,
    pub system: &'static str,
    pub dialect: Dialect,
    /// The forward, with parameter slots `{d}` (a dim), `{s}` and `{c}`
    /// (split and concat dims) filled for every choice in scope.
    pub forward: &'static str,
    pub src: &'static str,
    pub dst: &'static str,
    /// The declared transpose; `None`: the seed lists none (a completeness gap).
    pub backward: Option<&'static str>,
    /// What this suite expects the oracle to derive (`None`: sound).
    pub expect: Option<Property>,
}

/// Every system's collective table, read from `dialects/tables/<system>.toml`
/// (`[[collective]]`, SPEC.md §10.3) once per process. The rows live for the
/// whole run (the dialects crate keeps them in a static), so rows borrow
/// their text.
pub static PAIR_ROWS: LazyLock<Vec<PairRow>> = LazyLock::new(|| {
    spmd_dialects::tables::collective_rows()
        .iter()
        .map(|r| PairRow {
            id: &r.id,
            system: &r.system,
            dialect: r.dialect,
            forward: &r.forward,
            src: &r.src,
            dst: &r.dst,
            backward: r.backward.as_deref(),
            expect: r.expect,
        })
        .collect()
});

/// Fill the parameter slots of a template.
fn fill(t: &str, d: usize, s: usize, c: usize) -> String {
    t.replace("{d}", &d.to_string())
        .replace("{s}", &s.to_string())
        .replace("{c}", &c.to_string())
}

/// Every parameter choice of a row: (d, s, c).
fn choices(r: &PairRow) -> Vec<(usize, usize, usize)> {
    let text = format!("{}{}", r.forward, r.backward.unwrap_or(""));
    let ds: Vec<usize> = if text.contains("{d}") {
        vec![0, 1]
    } else {
        vec![0]
    };
    let ss: Vec<usize> = if text.contains("{s}") {
        vec![0, 1]
    } else {
        vec![0]
    };
    let cs: Vec<usize> = if text.contains("{c}") {
        vec![0, 1]
    } else {
        vec![0]
    };
    let mut out = Vec::new();
    for &d in &ds {
        for &s in &ss {
            for &c in &cs {
                out.push((d, s, c));
            }
        }
    }
    out
}

/// The typed ops of one parameter choice: forward (with its backward) and,
/// when declared, the backward as a typed op of its own.
pub fn instantiate(
    r: &PairRow,
    (d, s, c): (usize, usize, usize),
    scope: &Scope,
) -> Result<(TypedOp, Option<TypedOp>, Vec<Mesh>), UsageError> {
    let (axes, types) = parse_types(r.dialect, &[r.src, r.dst])?;
    let (src, dst) = (types[0].clone(), types[1].clone());
    let fwd = collective_typed(&fill(r.forward, d, s, c), &src, &dst, &axes).map_err(UsageError)?;
    let bwd = match r.backward {
        // A backward may be a composition (`divide_by_group_size |> pvary`).
        Some(b) => Some(
            crate::rules::compose(&fill(b, d, s, c), &dst.cot(), &src.cot(), &axes)
                .map_err(|e| UsageError(format!("{}: backward: {e}", r.id)))?,
        ),
        None => None,
    };
    let op = TypedOp {
        op: Op::Collective(fwd),
        inputs: vec![src.clone()],
        output: dst.clone(),
        backward: match &bwd {
            Some(b) => Backward::Transpose(b.clone()),
            None => Backward::LocalVjp,
        },
        jvp: None,
        no_grad: vec![],
    };
    let bop = bwd.map(|b| TypedOp {
        op: b,
        inputs: vec![dst.cot()],
        output: src.cot(),
        backward: Backward::LocalVjp,
        jvp: None,
        no_grad: vec![],
    });
    let meshes = meshes_named(&scope.meshes, &axes);
    Ok((op, bop, meshes))
}

/// The result of one row: the worst parameter choice.
pub struct PairResult {
    pub row: &'static PairRow,
    /// The parameter choice the verdict is for, e.g. `d=1`.
    pub params: String,
    pub choice: (usize, usize, usize),
    /// Forward and backward, or without one the forward (F1-F3) and J1.
    pub verdict: Verdict,
    /// T1: the table's transpose of the backward, compared with the forward.
    pub involution: Involution,
    /// The negative twin (SPEC.md §10.3): the row with its backward (or,
    /// without one, its forward) followed by `2 * x`; it must fail B3 (or F3).
    pub twin: Verdict,
}

/// The property the negative twin of a row must fail.
pub fn twin_must_fail(r: &PairRow) -> Property {
    if r.backward.is_some() {
        Property::B3
    } else {
        Property::F3
    }
}

fn doubled(op: &Op) -> Op {
    let two = spmd_interp::parse("2 * x").expect("valid expression");
    Op::Compose(vec![op.clone(), Op::Local(two)])
}

/// What T1 found for a row.
pub enum Involution {
    /// The row declares no backward.
    NoBackward,
    /// The table lists no transpose for the backward (a completeness gap).
    NotListed(String),
    /// Checked over the scope.
    Checked(Option<Box<Violation>>),
}

/// The row of the table whose forward is the backward `bwd_text` of `r`:
/// same system, same name, and the states of `r`'s group axes swapped to
/// their cotangents (one-axis rows serve 2-D uses on the group axes).
fn table_transpose(
    r: &PairRow,
    bwd: &spmd_interp::Collective,
    bwd_text: &str,
) -> Option<&'static PairRow> {
    let name = |t: &str| t.split('(').next().unwrap_or(t).trim().to_string();
    // A row whose forward is exactly this backward (parameters included) first.
    let exact = PAIR_ROWS
        .iter()
        .find(|x| x.system == r.system && x.backward.is_some() && x.forward == bwd_text);
    exact.or_else(|| {
        PAIR_ROWS.iter().find(|x| {
            x.system == r.system
                && x.backward.is_some()
                && name(x.forward) == name(bwd_text)
                && x.forward.contains("stack") == bwd_text.contains("stack")
                && parse_types(x.dialect, &[x.src, x.dst]).is_ok_and(|(_, ts)| {
                    ts[0].states.iter().all(|s| *s == bwd.src)
                        && ts[1].states.iter().all(|s| *s == bwd.dst)
                })
        })
    })
}

fn t1(op: &TypedOp, tt: &TypedOp, meshes: &[Mesh], scope: &Scope) -> Option<Box<Violation>> {
    // The case's own grid: T1 compares two linear maps, so the lower set
    // of degree 1 decides it (SPEC.md §8.3), as the case's check does.
    for c in spmd_generators::cases(op, scope, meshes).0 {
        let (m, shapes) = (&c.mesh, &c.shapes);
        if tt.op.infer(m, shapes).is_err() {
            continue;
        }
        let r = c.for_each_point(&mut |p| {
            let x = spmd_semantics::perrank::from_free(m, &op.inputs[0], &shapes[0], p);
            match check_involution(op, tt, m, std::slice::from_ref(&x)) {
                Outcome::Fail(v) => ControlFlow::Break(v),
                _ => ControlFlow::Continue(()),
            }
        });
        if let ControlFlow::Break(v) = r {
            return Some(v);
        }
    }
    None
}

/// Check one row over every parameter choice.
pub fn check_pair(r: &'static PairRow, scope: &Scope) -> Result<PairResult, UsageError> {
    let mut worst: Option<PairResult> = None;
    for ch in choices(r) {
        let (op, bop, meshes) = instantiate(r, ch, scope)?;
        let params = format!("d={}, split={}, concat={}", ch.0, ch.1, ch.2);
        let verdict = if bop.is_some() {
            check_op(&op, scope, &meshes, &|_| {})
        } else {
            crate::run::check_forward(&op, scope, &meshes)
        };
        let involution = match (&r.backward, &bop) {
            // A composed backward is no row's forward: T1 has no table entry
            // to check it against.
            (Some(b), Some(bop)) if !matches!(bop.op, Op::Collective(_)) => {
                Involution::NotListed(fill(b, ch.0, ch.1, ch.2))
            }
            (Some(b), Some(bop)) => {
                let Op::Collective(bc) = &bop.op else {
                    unreachable!("matched above")
                };
                match table_transpose(r, bc, &fill(b, ch.0, ch.1, ch.2)) {
                    None => Involution::NotListed(fill(b, ch.0, ch.1, ch.2)),
                    Some(back) => {
                        // The transpose of the backward, as the table declares
                        // it, at this row's own types and parameters.
                        let text = fill(back.backward.expect("has a backward"), ch.0, ch.1, ch.2);
                        let (axes, _) = parse_types(r.dialect, &[r.src, r.dst])?;
                        let tt = collective_typed(&text, &op.inputs[0], &op.output, &axes)
                            .map_err(UsageError)?;
                        let tt = TypedOp {
                            op: Op::Collective(tt),
                            inputs: op.inputs.clone(),
                            output: op.output.clone(),
                            backward: Backward::LocalVjp,
                            jvp: None,
                            no_grad: vec![],
                        };
                        Involution::Checked(t1(&op, &tt, &meshes, scope))
                    }
                }
            }
            _ => Involution::NoBackward,
        };
        let twin = match &op.backward {
            Backward::Transpose(b) => {
                let t = TypedOp {
                    backward: Backward::Transpose(doubled(b)),
                    ..op.clone()
                };
                check_op(&t, scope, &meshes, &|_| {})
            }
            Backward::LocalVjp | Backward::Steps | Backward::Local(_) => {
                let wrong = Op::Declared {
                    forward: Box::new(doubled(&op.op)),
                    meaning: Box::new(op.op.clone()),
                };
                let t = TypedOp {
                    op: wrong,
                    ..op.clone()
                };
                crate::run::check_forward(&t, scope, &meshes)
            }
        };
        let bad = !verdict.is_sound() || matches!(involution, Involution::Checked(Some(_)));
        let res = PairResult {
            row: r,
            params,
            choice: ch,
            verdict,
            involution,
            twin,
        };
        if bad {
            return Ok(res);
        }
        if worst.is_none() {
            worst = Some(res);
        }
    }
    worst.ok_or_else(|| UsageError(format!("{}: no parameter choice", r.id)))
}

/// The rows of one system, or all.
pub fn pair_rows(system: Option<&str>) -> Vec<&'static PairRow> {
    PAIR_ROWS
        .iter()
        .filter(|r| system.is_none_or(|s| r.system == s))
        .collect()
}

impl PairResult {
    /// Whether the oracle's verdict is the one this suite expects.
    pub fn as_expected(&self) -> bool {
        self.verdict.violation().map(|v| v.property) == self.row.expect
            && self.row.expect.is_some() != self.verdict.is_sound()
    }
    /// Whether the negative twin was rejected for its property.
    pub fn twin_rejected(&self) -> bool {
        self.twin.violation().map(|v| v.property) == Some(twin_must_fail(self.row))
    }
    pub fn t1_word(&self) -> String {
        match &self.involution {
            Involution::NoBackward => "no backward listed (completeness gap)".into(),
            Involution::NotListed(b) => format!(
                "T1 not checkable: the table lists no transpose of `{b}` (completeness gap)"
            ),
            Involution::Checked(None) => "T1 holds".into(),
            Involution::Checked(Some(v)) => format!("T1 fails: {}", v.one_line()),
        }
    }
    /// A completeness gap, if any.
    pub fn gap(&self) -> Option<String> {
        match &self.involution {
            Involution::NoBackward => Some(format!(
                "`{}` ({} -> {}) has no listed backward",
                self.row.forward, self.row.src, self.row.dst
            )),
            Involution::NotListed(b) => Some(format!(
                "the backward `{b}` of `{}` has no listed transpose",
                self.row.forward
            )),
            Involution::Checked(_) => None,
        }
    }
    /// Forward and backward traffic per rank at the reference size of
    /// SPEC.md §10.4 (4 ranks on each group axis, a local 4 x 4 input).
    pub fn costs(&self) -> Option<(spmd_semantics::Q, spmd_semantics::Q)> {
        let (op, _, _) = instantiate(self.row, self.choice, &Scope::default()).ok()?;
        let axes = parse_types(self.row.dialect, &[self.row.src]).ok()?.0;
        let m = Mesh::new(&axes.iter().map(|a| (a.as_str(), 4)).collect::<Vec<_>>());
        let shape = vec![4usize, 4];
        let f = op.op.cost(&m, std::slice::from_ref(&shape));
        let out = op.op.infer(&m, std::slice::from_ref(&shape)).ok()?.0;
        let b = match &op.backward {
            Backward::Transpose(t) => t.cost(&m, &[out]),
            _ => spmd_semantics::Q::zero(),
        };
        Some((f, b))
    }
    pub fn line(&self) -> String {
        let sig = format!(
            "{} : {} -> {}",
            self.row.forward, self.row.src, self.row.dst
        );
        let back = self
            .row
            .backward
            .map(|b| format!(" / bwd {b}"))
            .unwrap_or_default();
        let twin = if self.twin_rejected() {
            format!("  [twin rejected: {}]", twin_must_fail(self.row))
        } else {
            "  [TWIN NOT REJECTED: checker defect]".into()
        };
        format!(
            "  {:<11} {:<28} {:<58} {}{twin}",
            self.row.system,
            self.row.id,
            format!("{sig}{back}"),
            crate::words::verdict_word(&self.verdict)
        )
    }
    pub fn json(&self) -> serde_json::Value {
        let mut v = crate::words::verdict_json(&self.verdict);
        v["id"] = serde_json::json!(self.row.id);
        v["system"] = serde_json::json!(self.row.system);
        v["forward"] = serde_json::json!(self.row.forward);
        v["backward"] = serde_json::json!(self.row.backward);
        v["src"] = serde_json::json!(self.row.src);
        v["dst"] = serde_json::json!(self.row.dst);
        v["params"] = serde_json::json!(self.params);
        v["t1"] = serde_json::json!(self.t1_word());
        v["completeness_gap"] = serde_json::json!(self.gap());
        if let Some((f, b)) = self.costs() {
            v["cost_forward"] = serde_json::json!(f.to_string());
            v["cost_backward"] = serde_json::json!(b.to_string());
        }
        v["twin"] = serde_json::json!({
            "must_fail": twin_must_fail(self.row).code(),
            "verdict": self.twin.name(),
            "property": self.twin.violation().map(|x| x.property.code()),
            "rejected": self.twin_rejected(),
        });
        v
    }
}
