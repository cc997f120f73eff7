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

fn typing(ins: &[Place], out: Place) -> String {
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

/// The per-rank gradients of the linear kinds, by the oracle itself
/// (SPEC.md §21.4): a Partial(sum) or Partial(avg) value's per-rank tensors
/// are independent per-rank data, which the core reads as Varying, so the
/// reduction collective is `psum` or `pmean` from Varying to Invariant and
/// B1–B3 of §4 check a backward of it. DTensor's backward puts the
/// cotangent on every rank (`pvary`). Each row: name, rule file, and
/// whether the oracle must find it sound.
pub const ORACLE_ROWS: &[(&str, &str, bool)] = &[
    (
        "all_reduce(sum) read per rank (psum V -> I), DTensor's backward: g on every rank",
        "[[rule]]\nname = \"a\"\ndialect = \"jax\"\nforward = \"psum\"\nbackward = \"pvary\"\ninputs = [\"Varying\"]\noutput = \"Invariant\"\n",
        true,
    ),
    (
        "all_reduce(avg) read per rank (pmean V -> I), DTensor's backward: g on every rank",
        "[[rule]]\nname = \"b\"\ndialect = \"jax\"\nforward = \"pmean\"\nbackward = \"pvary\"\ninputs = [\"Varying\"]\noutput = \"Invariant\"\n",
        false,
    ),
    (
        "all_reduce(avg) read per rank (pmean V -> I), the transpose g / n",
        "[[rule]]\nname = \"c\"\ndialect = \"jax\"\nforward = \"pmean\"\nbackward = \"divide_by_group_size |> pvary\"\ninputs = [\"Varying\"]\noutput = \"Invariant\"\n",
        true,
    ),
];

/// Runs one of `ORACLE_ROWS` through the oracle: `Ok(verdict words)` when
/// sound, `Err(counterexample)` otherwise.
pub fn check_oracle_row(toml_text: &str) -> Result<String, String> {
    let rules = crate::rules::load_str("<partial_kinds>", toml_text).map_err(|e| e.0)?;
    let cfg = crate::check::CheckConfig {
        scope: spmd_generators::Scope::default(),
        cases: 0,
        seed: 0,
    };
    let r = crate::check::check_rule(&rules[0], &cfg, &[], &|_| {});
    match r.verdict.violation() {
        Some(v) => Err(v.one_line_in(rules[0].dialect)),
        None => Ok(crate::report::verdict_word(&r.verdict)),
    }
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

/// The `conform` section (SPEC.md §21.6): every system rule, its verdict,
/// its twin; the collectives and their twins; the gradient rows. Returns
/// the text and whether everything came out as pinned.
pub fn conform_section(scope: &Scope) -> Result<(String, serde_json::Value, bool), String> {
    let mut s = String::from("\npending reductions beyond sums (SPEC.md §21):\n");
    let mut ok = true;
    // The same lines for --json: (group, name, result, as pinned).
    let mut entries: Vec<serde_json::Value> = Vec::new();
    let mut entry = |group: &str, name: String, result: String, pinned: bool| {
        entries.push(serde_json::json!({"group": group, "name": name, "result": result, "as_pinned": pinned}));
    };
    let rules = read_rules(RULES_TOML)?;
    let results = check_rules(&rules, scope)?;
    for r in &results {
        let t = typing(&r.rule.inputs, r.rule.output);
        let mark = if r.is_finding() { "FINDING " } else { "" };
        s += &format!(
            "  {mark}[{}] {}: `{}` {t}: {}\n",
            r.rule.system,
            r.rule.name,
            r.rule.op.text,
            r.verdict.text()
        );
        if let (Some((ins, out)), Some(tv)) = (&r.rule.twin, &r.twin) {
            s += &format!(
                "      twin {}: {}\n",
                typing(ins, *out),
                if tv.key() == "refuted" {
                    "refuted (as it must be)".into()
                } else {
                    format!("NOT refuted: {}", tv.text())
                }
            );
        }
        ok &= r.as_expected() && r.twin_rejected();
        entry(
            "rule",
            format!("[{}] {}", r.rule.system, r.rule.name),
            r.verdict.text(),
            r.as_expected() && r.twin_rejected(),
        );
    }
    let findings = results.iter().filter(|r| r.is_finding()).count();
    s += &format!(
        "  {} system rules: {} as pinned, {findings} refuted by the oracle (findings), {} twins refuted\n",
        results.len(),
        results.iter().filter(|r| r.as_expected()).count(),
        results.iter().filter(|r| r.twin.is_some() && r.twin_rejected()).count()
    );
    for row in collective_rows() {
        let res = check_collective(&row, scope);
        let line = match (&res, row.expect_fail) {
            (Ok(c), None) => format!(
                "F1, F3 hold ({} instances, {} cases)",
                c.instances(),
                c.cases
            ),
            (Err((p, w)), Some(want)) if p == want => format!("fails {p} as it must: {w}"),
            (Ok(_), Some(want)) => {
                ok = false;
                format!("NOT rejected (should fail {want})")
            }
            (Err((p, w)), _) => {
                ok = false;
                format!("fails {p}: {w}")
            }
        };
        let pinned = match (&res, row.expect_fail) {
            (Ok(_), None) => true,
            (Err((p, _)), Some(want)) => *p == want,
            _ => false,
        };
        entry(
            "collective",
            format!("[{}] {}", row.system, row.name),
            line.clone(),
            pinned,
        );
        s += &format!("  [{}] {}: {line}\n", row.system, row.name);
    }
    for k in ALL_KINDS {
        for (who, bw, must_hold) in [
            (
                "dtensor from_local backward (Replicate grad)",
                dtensor_from_local_backward as LocalBackward,
                k == PartialKind::Sum,
            ),
            (
                "transpose of the denotation",
                exact_from_local_backward as LocalBackward,
                true,
            ),
        ] {
            let res = check_from_local(k, bw, scope);
            let line = match &res {
                Ok((c, u)) => format!("B3 holds ({c} instances, {u} at a tie undetermined)"),
                Err(e) => e.clone(),
            };
            ok &= res.is_ok() == must_hold;
            entry(
                "from_local",
                format!("P({k}), {who}"),
                line.clone(),
                res.is_ok() == must_hold,
            );
            s += &format!("  from_local P({k}), {who}: {line}\n");
        }
    }
    for (name, text, must_hold) in ORACLE_ROWS {
        let res = check_oracle_row(text);
        ok &= res.is_ok() == *must_hold;
        let pinned = res.is_ok() == *must_hold;
        let line = match res {
            Ok(w) => w,
            Err(e) => format!("unsound {e}"),
        };
        entry("gradient", name.to_string(), line.clone(), pinned);
        s += &format!("  {name}: {line}\n");
    }
    for k in [PartialKind::Max, PartialKind::Min] {
        for (who, j, must_hold) in [
            ("tangent at the extremum", argext_jvp as CollJvp, true),
            ("psum of tangents (twin)", psum_jvp as CollJvp, false),
            (
                "same reduction of tangents (twin)",
                same_kind_jvp as CollJvp,
                false,
            ),
        ] {
            let res = check_all_reduce_jvp(k, j, scope);
            let line = match &res {
                Ok((c, u)) => format!("J1 holds ({c} instances, {u} at a tie undetermined)"),
                Err(e) => e.clone(),
            };
            ok &= res.is_ok() == must_hold;
            entry(
                "jvp",
                format!("all_reduce({k}), {who}"),
                line.clone(),
                res.is_ok() == must_hold,
            );
            s += &format!("  all_reduce({k}) JVP, {who}: {line}\n");
        }
    }
    Ok((s, serde_json::json!({"ok": ok, "entries": entries}), ok))
}
