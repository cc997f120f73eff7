//! Forward-mode rules (JVPs) the seeds state, as data, checked by J1
//! (SPEC.md §4.8, §9.4).
//!
//! Each row is a rule as a rule file would write it, with the JVP the seed
//! system uses, what this suite expects the oracle to derive, and a negative
//! twin: the same rule with a wrong JVP, which J1 must reject. The rows live
//! in the dialects crate (`dialects/tables/<system>.toml`, `[[jvp]]`).

use crate::rules::{build, OpSpec, Rule, RuleSpec, TypeSpec};
use crate::run::{check_forward, check_op, UsageError};
use spmd_generators::Scope;
use spmd_interp::{Collective, Jvp, Kind, Op};
use spmd_oracle::{Property, Verdict};
use spmd_semantics::State;

pub use spmd_dialects::tables::{jvp_rows as all_jvp_rows, JvpOp, JvpRow, WrongJvp};

/// The rule a row states, or with `jvp` in place of its JVP.
fn spec(r: &JvpRow, jvp: &str) -> RuleSpec {
    let (op, forward) = match &r.op {
        JvpOp::Local(e) => (Some(OpSpec::Expr { expr: e.clone() }), None),
        JvpOp::Collective(c) => (None, Some(c.to_string())),
    };
    RuleSpec {
        name: r.id.clone(),
        dialect: None,
        op,
        forward,
        backward: None,
        inputs: r
            .inputs
            .iter()
            .map(|s| TypeSpec::One(s.to_string()))
            .collect(),
        output: TypeSpec::One(r.output.clone()),
        jvp: Some(jvp.into()),
        ..RuleSpec::default()
    }
}

fn one(r: &JvpRow, jvp: &str, scope: &Scope) -> Result<Rule, UsageError> {
    let mut rules = build(&r.id, "", &[spec(r, jvp)], scope)?;
    Ok(rules.pop().expect("one rule"))
}

/// The row's rule with its JVP's tangent reduced once more.
fn reduce_again(rule: &mut Rule) -> Result<(), UsageError> {
    let Some(Jvp::Tangent(op)) = &rule.op.jvp else {
        return Err(UsageError(format!(
            "{}: ReduceAgain needs a collective's JVP",
            rule.name
        )));
    };
    let again = Collective {
        name: "all_reduce".into(),
        kind: Kind::AllReduce,
        axes: (0..rule.op.output.states.len()).collect(),
        src: State::Reduced,
        dst: State::Reduced,
    };
    rule.op.jvp = Some(Jvp::Tangent(Op::Compose(vec![
        op.clone(),
        Op::Collective(again),
    ])));
    Ok(())
}

/// The result of one row.
pub struct JvpResult {
    pub row: &'static JvpRow,
    pub verdict: Verdict,
    pub twin: Verdict,
}

impl JvpResult {
    /// Whether the oracle derived what the suite expects.
    pub fn as_expected(&self) -> bool {
        self.verdict.violation().map(|v| v.property) == self.row.expect
    }
    /// Whether the twin was rejected, for J1.
    pub fn twin_rejected(&self) -> bool {
        self.twin.violation().map(|v| v.property) == Some(Property::J1)
    }
}

fn verdict_of(rule: &Rule, scope: &Scope) -> Verdict {
    if rule.has_backward {
        check_op(&rule.op, scope, &rule.meshes, &|_| {})
    } else {
        check_forward(&rule.op, scope, &rule.meshes)
    }
}

/// Check a row and its twin.
pub fn check_jvp(r: &'static JvpRow, scope: &Scope) -> Result<JvpResult, UsageError> {
    let rule = one(r, &r.jvp, scope)?;
    let verdict = verdict_of(&rule, scope);
    let twin_rule = match &r.twin {
        WrongJvp::Text(t) => one(r, t, scope)?,
        WrongJvp::ReduceAgain => {
            let mut t = rule.clone();
            reduce_again(&mut t)?;
            t
        }
    };
    let twin = verdict_of(&twin_rule, scope);
    Ok(JvpResult {
        row: r,
        verdict,
        twin,
    })
}

/// The rows of one system, or all.
pub fn jvp_rows(system: Option<&str>) -> Vec<&'static JvpRow> {
    all_jvp_rows()
        .iter()
        .filter(|r| system.is_none_or(|s| r.system == s))
        .collect()
}
