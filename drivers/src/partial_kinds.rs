//! Pending reductions beyond sums (SPEC.md §21), as commands use them:
//! the derived table of `derive --partial k`, the oracle rows for the
//! linear kinds, and the real systems' rules from
//! `dialects/tables/partial_kinds.toml` checked for `conform`. The checks
//! themselves are the oracle's (`spmd_oracle::pending`, re-exported here).

pub use spmd_oracle::pending::*;

use crate::run::UsageError;
use serde_json::{json, Value};
use spmd_interp::expr::{parse, LocalFn};
use spmd_semantics::pending::{PartialKind, Place, ALL_KINDS};

/// One typing of the derived table.
#[derive(Clone, Debug)]
pub struct Row {
    pub inputs: Vec<Place>,
    pub output: Place,
    pub verdict: Verdict,
}

/// The output placements a derived table tries.
pub fn output_places() -> Vec<Place> {
    let mut v = vec![Place::Inv];
    v.extend(ALL_KINDS.iter().map(|&k| Place::Part(k)));
    v
}

/// `derive OP --partial k` (SPEC.md §21.2): every assignment of Invariant
/// or Partial(k) to the inputs (at least one Partial), against every output
/// placement Invariant or Partial(k') for each kind k'.
pub fn derive_partial(f: &LocalFn, k: PartialKind, scope: &Scope) -> Result<Vec<Row>, UsageError> {
    let m = f.arity();
    if m == 0 {
        return Err(UsageError(format!(
            "`{}` has no input to hold a pending reduction",
            f.text
        )));
    }
    if m > 3 {
        return Err(UsageError(format!(
            "`{}` has {m} inputs; --partial takes at most 3",
            f.text
        )));
    }
    use rayon::prelude::*;
    let outs = output_places();
    // The input assignments run in parallel; rows keep the mask order.
    let per_mask: Vec<Result<Vec<Row>, UsageError>> = (1u32..(1 << m))
        .into_par_iter()
        .map(|mask| {
            let ins: Vec<Place> = (0..m)
                .map(|i| {
                    if mask & (1 << i) != 0 {
                        Place::Part(k)
                    } else {
                        Place::Inv
                    }
                })
                .collect();
            let vs = check_places(f, &ins, &outs, scope).map_err(UsageError)?;
            Ok(outs
                .iter()
                .zip(vs)
                .map(|(out, verdict)| Row {
                    inputs: ins.clone(),
                    output: *out,
                    verdict,
                })
                .collect())
        })
        .collect();
    // The first error in mask order, whatever thread met it first.
    let mut rows = Vec::new();
    for r in per_mask {
        rows.extend(r?);
    }
    Ok(rows)
}

pub fn typing(ins: &[Place], out: Place) -> String {
    format!(
        "{} -> {out}",
        ins.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub fn derive_text(f: &LocalFn, k: PartialKind, scope: &Scope, rows: &[Row]) -> String {
    let mut s = format!(
        "`{}` with pending {k} inputs on one mesh axis (SPEC.md §21.2)\nscope: {}\n",
        f.text,
        scope.describe()
    );
    for r in rows {
        s += &format!(
            "  {:<34} {}\n",
            typing(&r.inputs, r.output),
            r.verdict.text()
        );
    }
    let defers = rows.iter().filter(|r| r.verdict.key() == "defers").count();
    let refuted = rows.iter().filter(|r| r.verdict.key() == "refuted").count();
    s += &format!(
        "{} typings: {defers} deferring, {refuted} refuted, {} vacuous\n",
        rows.len(),
        rows.len() - defers - refuted
    );
    s
}

pub fn derive_json(f: &LocalFn, k: PartialKind, scope: &Scope, rows: &[Row]) -> Value {
    json!({
        "op": f.text, "partial": k.name(), "scope": scope.describe(),
        "rows": rows.iter().map(|r| {
            let mut v = r.verdict.json();
            v["inputs"] = json!(r.inputs.iter().map(|p| p.to_string()).collect::<Vec<_>>());
            v["output"] = json!(r.output.to_string());
            v
        }).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------------------
// The real systems' rules, as data (SPEC.md §21.6)

/// The systems' rule lists for the pending kinds.
pub const RULES_TOML: &str = include_str!("../../dialects/tables/partial_kinds.toml");

/// One rule of `dialects/tables/partial_kinds.toml`.
#[derive(Clone, Debug)]
pub struct SystemRule {
    pub name: String,
    pub system: String,
    pub source: String,
    pub op: LocalFn,
    pub inputs: Vec<Place>,
    pub output: Place,
    /// What the oracle is expected to find: `defers` or `refuted`.
    pub expect: String,
    /// A typing of the same op that must be refuted.
    pub twin: Option<(Vec<Place>, Place)>,
}

fn places(v: &toml::Value, what: &str) -> Result<Vec<Place>, String> {
    v.as_array()
        .ok_or(format!("{what}: a list of placements"))?
        .iter()
        .map(|p| {
            Place::parse(
                p.as_str()
                    .ok_or(format!("{what}: placements are strings"))?,
            )
        })
        .collect()
}

/// Reads the rule table; every error names the row.
pub fn read_rules(text: &str) -> Result<Vec<SystemRule>, String> {
    let doc: toml::Value = toml::from_str(text).map_err(|e| format!("partial_kinds.toml: {e}"))?;
    let rows = doc
        .get("rule")
        .and_then(|r| r.as_array())
        .ok_or("partial_kinds.toml: no [[rule]] rows")?;
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let s = |k: &str| -> Result<String, String> {
            r.get(k)
                .and_then(|v| v.as_str())
                .map(str::to_string)
                .ok_or(format!("partial_kinds.toml rule {}: missing `{k}`", i + 1))
        };
        let name = s("name")?;
        let at = |e: String| format!("partial_kinds.toml rule `{name}`: {e}");
        let mut op = parse(&s("op")?).map_err(|e| at(e.to_string()))?;
        op.text = s("op")?;
        let inputs = places(
            r.get("inputs").ok_or(at("missing `inputs`".into()))?,
            "inputs",
        )
        .map_err(at)?;
        let output = Place::parse(&s("output")?).map_err(at)?;
        let expect = s("expect")?;
        if expect != "defers" && expect != "refuted" {
            return Err(at(format!(
                "expect is `defers` or `refuted`, not `{expect}`"
            )));
        }
        let twin = match r.get("twin") {
            None => None,
            Some(t) => Some((
                places(
                    t.get("inputs").ok_or(at("twin: missing `inputs`".into()))?,
                    "twin inputs",
                )
                .map_err(at)?,
                Place::parse(
                    t.get("output")
                        .and_then(|o| o.as_str())
                        .ok_or(at("twin: missing `output`".into()))?,
                )
                .map_err(at)?,
            )),
        };
        if inputs.len() != op.arity() {
            return Err(at(format!(
                "{} placements for {} inputs",
                inputs.len(),
                op.arity()
            )));
        }
        out.push(SystemRule {
            name,
            system: s("system")?,
            source: s("source")?,
            op,
            inputs,
            output,
            expect,
            twin,
        });
    }
    Ok(out)
}

/// One rule checked: the oracle's verdict on it and on its twin.
#[derive(Clone, Debug)]
pub struct RuleResult {
    pub rule: SystemRule,
    pub verdict: Verdict,
    pub twin: Option<Verdict>,
}

impl RuleResult {
    /// The oracle's verdict is the one the table pins.
    pub fn as_expected(&self) -> bool {
        self.verdict.key() == self.rule.expect
    }
    /// The twin, where there is one, was refuted.
    pub fn twin_rejected(&self) -> bool {
        self.twin.as_ref().is_none_or(|t| t.key() == "refuted")
    }
    /// A rule the system has and the oracle refutes.
    pub fn is_finding(&self) -> bool {
        self.verdict.key() == "refuted"
    }
}

/// Checks every rule and its twin. Rules of the same op share one memo of
/// per-rank outputs and run in order; different ops run in parallel; the
/// results keep the rules' order.
pub fn check_rules(rules: &[SystemRule], scope: &Scope) -> Result<Vec<RuleResult>, String> {
    use rayon::prelude::*;
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        match groups.iter_mut().find(|g| rules[g[0]].op == r.op) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    let done: Vec<Vec<(usize, Result<RuleResult, String>)>> = groups
        .par_iter()
        .map(|g| {
            let mut memo = LocalMemo::default();
            g.iter()
                .map(|&i| {
                    let r = &rules[i];
                    let mut one = || -> Result<RuleResult, String> {
                        let verdict =
                            check_places_memo(&r.op, &r.inputs, &[r.output], scope, &mut memo)?
                                .remove(0);
                        let twin = match &r.twin {
                            Some((ins, out)) => Some(
                                check_places_memo(&r.op, ins, &[*out], scope, &mut memo)?.remove(0),
                            ),
                            None => None,
                        };
                        Ok(RuleResult {
                            rule: r.clone(),
                            verdict,
                            twin,
                        })
                    };
                    (i, one())
                })
                .collect()
        })
        .collect();
    let mut out: Vec<Option<Result<RuleResult, String>>> = (0..rules.len()).map(|_| None).collect();
    for (i, r) in done.into_iter().flatten() {
        out[i] = Some(r);
    }
    // The first error in the rules' order.
    out.into_iter()
        .map(|r| r.expect("every rule ran"))
        .collect()
}
