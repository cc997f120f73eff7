//! The seeds' local-op typing rules as data, and the conformance run
//! (SPEC.md §9.2, §9.3).
//!
//! Each row states what a seed system says of one typing (`claim`), and what
//! this suite expects the oracle to derive (`expect`: `None` for sound, or the
//! property that fails). Where claim and oracle disagree, that is a finding
//! about the seed system; `expect` records the findings we know of so the test
//! suite notices if the oracle's answer ever changes. Every row the seed
//! allows carries a negative twin: a deliberately wrong variant the oracle
//! must reject for the named property. The rows live in the dialects crate,
//! one TOML file per system (`dialects/tables/<system>.toml`, SPEC.md §15).

use crate::run::{check_op, UsageError};
use crate::types::{meshes_named, parse_types};
use spmd_generators::Scope;
use spmd_interp::{parse, TypedOp};
use spmd_oracle::{Property, Verdict};
use spmd_semantics::Dialect;

pub use spmd_dialects::tables::{seed_rules, Claim, SeedRule, Twin, SYSTEMS};

/// Build the typed op of a row's parts, with the meshes it is checked on.
pub fn typed(
    dialect: Dialect,
    op: &str,
    inputs: &[&str],
    output: &str,
    scope: &Scope,
) -> Result<(TypedOp, Vec<spmd_semantics::Mesh>), UsageError> {
    let f = parse(op)
        .map_err(|e| UsageError(format!("expression `{}`: {e}", crate::words::excerpt(op))))?;
    if f.arity() != inputs.len() {
        return Err(UsageError(format!(
            "`{op}` takes {} inputs, {} types given",
            f.arity(),
            inputs.len()
        )));
    }
    let mut all: Vec<&str> = inputs.to_vec();
    all.push(output);
    let (axes, mut types) = parse_types(dialect, &all)?;
    let out = types.pop().expect("output type");
    let meshes = meshes_named(&scope.meshes, &axes);
    if meshes.is_empty() {
        return Err(UsageError(format!("no mesh in scope has axes {axes:?}")));
    }
    Ok((TypedOp::local(f, types, out), meshes))
}

/// The result of one row.
pub struct RowResult {
    pub rule: &'static SeedRule,
    pub verdict: Verdict,
    /// The twin's verdict, when the row has one.
    pub twin: Option<Verdict>,
}

impl RowResult {
    /// The property the oracle found violated, if any.
    pub fn derived(&self) -> Option<Property> {
        self.verdict.violation().map(|v| v.property)
    }
    /// Whether the seed's claim and the oracle agree.
    pub fn agrees(&self) -> bool {
        match self.rule.claim {
            Claim::Allowed => self.verdict.is_sound(),
            Claim::Forbidden | Claim::Unlisted => !self.verdict.is_sound(),
        }
    }
    /// Whether the twin was rejected for its named property.
    pub fn twin_rejected(&self) -> Option<bool> {
        let t = self.rule.twin.as_ref()?;
        let v = self.twin.as_ref()?;
        Some(v.violation().map(|x| x.property) == Some(t.fails))
    }
    /// A finding about the seed system, when claim and oracle disagree.
    pub fn finding(&self) -> Option<String> {
        if self.agrees() {
            return None;
        }
        Some(match self.rule.claim {
            Claim::Allowed => format!(
                "published rule is unsound: {}",
                self.verdict
                    .violation()
                    .map(|v| v.one_line())
                    .unwrap_or_else(|| self.verdict.name().into())
            ),
            Claim::Forbidden => {
                "forbidden, yet the oracle finds it sound (permissiveness gap)".into()
            }
            Claim::Unlisted => {
                "no rule admits it, yet the oracle finds it sound (permissiveness gap)".into()
            }
        })
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Check one row and its twin. The two are independent, so they run side
/// by side on the rayon pool (a row and its twin are often the two largest
/// items of a table; SPEC.md §18.2).
pub fn check_row(
    r: &'static SeedRule,
    scope: &Scope,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RowResult, UsageError> {
    let (op, meshes) = typed(r.dialect, &r.op, &strs(&r.inputs), &r.output, scope)?;
    let twin_op = match &r.twin {
        Some(t) => Some(typed(r.dialect, &t.op, &strs(&t.inputs), &t.output, scope)?),
        None => None,
    };
    let (verdict, twin) = rayon::join(
        || check_op(&op, scope, &meshes, progress),
        || {
            twin_op
                .as_ref()
                .map(|(op, meshes)| check_op(op, scope, meshes, progress))
        },
    );
    Ok(RowResult {
        rule: r,
        verdict,
        twin,
    })
}

/// The rows of one system, or all.
pub fn rows(system: Option<&str>) -> Result<Vec<&'static SeedRule>, UsageError> {
    if let Some(s) = system {
        if !SYSTEMS.contains(&s) {
            return Err(UsageError(format!(
                "unknown dialect `{s}`{} (expected one of: {})",
                spmd_semantics::names::did_you_mean(s, SYSTEMS.iter().copied()),
                SYSTEMS.join(", ")
            )));
        }
    }
    Ok(seed_rules()
        .iter()
        .filter(|r| system.is_none_or(|s| r.system == s))
        .collect())
}

/// What a row's own system's typing function (SPEC.md §15.2) says of the
/// row's inputs, when the row's op is a built-in with an op class and its
/// types carry no layout; and whether that answer matches the row's claim
/// (allowed: the function infers the row's output, casts or not; forbidden
/// or unlisted: it does not). `None` in the second place: the function
/// answers `Unknown`.
pub struct TypingOfRow {
    pub outcome: spmd_dialects::Outcome,
    pub matches_claim: Option<bool>,
}

/// The typing function's answer for a seed row, or `None` when the row's op
/// has no class (an expression that is no built-in) or its types are global.
pub fn typing_of_row(r: &SeedRule) -> Option<TypingOfRow> {
    let name = spmd_interp::BUILTINS
        .iter()
        .find(|(_, src)| *src == r.op)?
        .0;
    let class = spmd_dialects::OpClass::of_builtin(name)?;
    let sys = spmd_dialects::system(&r.system).ok()?;
    let mut all = strs(&r.inputs);
    all.push(&r.output);
    let (_, types) = parse_types(r.dialect, &all).ok()?;
    if types.iter().any(|t| t.is_global()) {
        return None;
    }
    let states: Vec<Vec<spmd_semantics::State>> = types.iter().map(|t| t.states.clone()).collect();
    let (out, ins) = states.split_last()?;
    let outcome = (sys.typing)(class, ins);
    let matches_claim = match &outcome {
        spmd_dialects::Outcome::Unknown(_) => None,
        spmd_dialects::Outcome::Infers { output, .. } => {
            Some((output == out) == (r.claim == Claim::Allowed))
        }
        spmd_dialects::Outcome::Error(_) => Some(r.claim != Claim::Allowed),
    };
    Some(TypingOfRow {
        outcome,
        matches_claim,
    })
}

/// The transformer block's ops (SPEC.md §19.7), each checked on each
/// one-axis type, the output typed like the input.
pub const TRANSFORMER_OPS: &[&str] = &[
    "exp(x)",
    "tanh(x)",
    "sigmoid(x)",
    "gelu(x)",
    "silu(x)",
    "softmax(x, 1)",
    "layernorm(x, 1)",
    "rmsnorm(x, 1)",
    "cumsum(x, 1)",
];

/// The types of the transformer table: local states, rows sharded (dim 0)
/// and the normalised dim sharded (dim 1).
pub const TRANSFORMER_TYPES: &[&str] = &["I", "V", "S(0)", "S(1)", "P", "R"];

/// One cell of the transformer table.
pub struct TransformerRow {
    pub op: &'static str,
    pub ty: &'static str,
    pub verdict: Verdict,
}

impl TransformerRow {
    /// `sound`, the failing property, or the verdict's name.
    pub fn cell(&self) -> String {
        match self.verdict.violation() {
            Some(v) => v.property.code().to_string(),
            None => self.verdict.name().to_string(),
        }
    }
}

/// The table's scope: meshes of one and two ranks, and enough points for a
/// normalised dim of 2 on two ranks (SPEC.md §19.6).
pub fn transformer_scope() -> Scope {
    Scope {
        meshes: vec![spmd_semantics::Mesh::line(1), spmd_semantics::Mesh::line(2)],
        max_points: 1296,
        ..Scope::default()
    }
}

/// Every op of `TRANSFORMER_OPS` on every type of `TRANSFORMER_TYPES`, each
/// verdict computed by the oracle.
pub fn transformer_table(scope: &Scope) -> Result<Vec<TransformerRow>, UsageError> {
    use rayon::prelude::*;
    let cells: Vec<(&'static str, &'static str)> = TRANSFORMER_OPS
        .iter()
        .flat_map(|op| TRANSFORMER_TYPES.iter().map(move |ty| (*op, *ty)))
        .collect();
    cells
        .par_iter()
        .map(|&(op, ty)| {
            let (top, meshes) = typed(Dialect::SpmdTypes, op, &[ty], ty, scope)?;
            Ok(TransformerRow {
                op,
                ty,
                verdict: check_op(&top, scope, &meshes, &|_| {}),
            })
        })
        .collect()
}

/// The table as text: one line per op, one column per type.
pub fn transformer_text(rows: &[TransformerRow]) -> String {
    let mut out = format!(
        "transformer block (SPEC.md §19.7): each op on each type, output typed like the input\n{:<18}",
        "op"
    );
    for ty in TRANSFORMER_TYPES {
        out.push_str(&format!("{ty:<10}"));
    }
    out.push('\n');
    for op in TRANSFORMER_OPS {
        out.push_str(&format!("{op:<18}"));
        for ty in TRANSFORMER_TYPES {
            let cell = rows
                .iter()
                .find(|r| r.op == *op && r.ty == *ty)
                .map(TransformerRow::cell)
                .unwrap_or_default();
            out.push_str(&format!("{cell:<10}"));
        }
        out.push('\n');
    }
    // Which ops' sound cells are proofs, read from the verdicts.
    let (mut proved, mut bounded) = (Vec::new(), Vec::new());
    for op in TRANSFORMER_OPS {
        let sound: Vec<&TransformerRow> = rows
            .iter()
            .filter(|r| r.op == *op && r.verdict.is_sound())
            .collect();
        if sound.is_empty() {
            continue;
        }
        if sound.iter().all(|r| r.verdict.proof()) {
            proved.push(*op);
        } else {
            bounded.push(*op);
        }
    }
    let list = |v: &[&str]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    out.push_str(&format!(
        "sound = a proof for {} (by identity, SPEC.md §19.8; cumsum by its polynomial grid), bounded for {}; F1-B3 = the first property that fails\n",
        list(&proved),
        list(&bounded)
    ));
    out
}

/// The pending-kind section of `conform` (SPEC.md §21.6): the systems'
/// rules for Partial(avg | max | min) from `dialects/tables/partial_kinds.toml`
/// with their twins, the collectives of the kinds and their gradients and
/// JVPs. Returns the text and whether every verdict came out as pinned.
pub fn partial_kinds_section() -> Result<(String, serde_json::Value, bool), UsageError> {
    conform_section(&crate::partial_kinds::Scope::conform()).map_err(UsageError)
}

// ---------------------------------------------------------------------------
// Pending reductions beyond sums (SPEC.md §21.6)

pub use pending::{check_oracle_row, conform_section, ORACLE_ROWS};

mod pending {
    use crate::partial_kinds::*;
    use spmd_semantics::pending::{PartialKind, ALL_KINDS};

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
            None => Ok(crate::words::verdict_word(&r.verdict)),
        }
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
}
