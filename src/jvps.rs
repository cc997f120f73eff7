//! Forward-mode rules (JVPs) the seeds state, as data, checked by J1
//! (SPEC.md §4.8, §9.4).
//!
//! Each row is a rule as a rule file would write it, with the JVP the seed
//! system uses, what this suite expects the oracle to derive, and a negative
//! twin: the same rule with a wrong JVP, which J1 must reject.

use crate::rules::{build, OpSpec, Rule, RuleSpec, TypeSpec};
use crate::run::{check_forward, check_op, UsageError};
use spmd_generators::Scope;
use spmd_interp::{Collective, Jvp, Kind, Op};
use spmd_oracle::{Property, Verdict};
use spmd_semantics::State;

/// How a row's op is written.
#[derive(Clone, Copy, Debug)]
pub enum JvpOp {
    /// A local op: an expression of its inputs.
    Local(&'static str),
    /// A collective from the catalogue.
    Collective(&'static str),
}

/// A deliberately wrong JVP.
#[derive(Clone, Copy, Debug)]
pub enum WrongJvp {
    /// Another JVP in rule-file syntax.
    Text(&'static str),
    /// The row's JVP followed by a second all_reduce of the already reduced
    /// tangent: the double count seed 004's guard exists to prevent. It
    /// cannot be written in rule-file syntax (the catalogue refuses an
    /// all_reduce that starts from R), so it is built here.
    ReduceAgain,
}

/// One forward-mode rule of a seed system.
#[derive(Clone, Copy, Debug)]
pub struct JvpRow {
    pub id: &'static str,
    pub system: &'static str,
    /// The seed's rule, briefly.
    pub rule: &'static str,
    pub op: JvpOp,
    pub inputs: &'static [&'static str],
    pub output: &'static str,
    pub jvp: &'static str,
    /// `None`: sound.
    pub expect: Option<Property>,
    pub twin: WrongJvp,
}

/// The JVP rules of the seeds. Seed 004 (Nabla) states the collectives' ones
/// and the double-count guard; the product rule on deferred partials is what
/// its partial propagation relies on for mul.
pub const JVP_ROWS: &[JvpRow] = &[
    JvpRow {
        id: "nabla_all_reduce_jvp",
        system: "nabla",
        rule: "AllReduceOp.jvp_rule: all_reduce of the tangent",
        op: JvpOp::Collective("all_reduce"),
        inputs: &["P"],
        output: "R",
        jvp: "all_reduce",
        expect: None,
        twin: WrongJvp::ReduceAgain,
    },
    JvpRow {
        id: "nabla_all_reduce_invariant_jvp",
        system: "nabla",
        rule: "AllReduceOp.jvp_rule: all_reduce of the tangent",
        op: JvpOp::Collective("all_reduce"),
        inputs: &["V"],
        output: "I",
        jvp: "all_reduce",
        expect: None,
        twin: WrongJvp::ReduceAgain,
    },
    JvpRow {
        id: "nabla_pmean_jvp",
        system: "nabla",
        rule: "PMeanOp.jvp_rule: pmean of the tangent",
        op: JvpOp::Collective("pmean"),
        inputs: &["V"],
        output: "I",
        jvp: "pmean",
        expect: None,
        // psum for pmean: the tangent is n times too large.
        twin: WrongJvp::Text("psum"),
    },
    JvpRow {
        id: "jax_mul_jvp",
        system: "jax",
        rule: "mul's JVP is the product rule, per rank",
        op: JvpOp::Local("x * y"),
        inputs: &["V", "V"],
        output: "V",
        jvp: "dx * y + x * dy",
        expect: None,
        twin: WrongJvp::Text("dx * y"),
    },
    JvpRow {
        id: "nabla_mul_partial_jvp",
        system: "nabla",
        rule: "a deferred partial times a replicated value stays partial, tangent too",
        op: JvpOp::Local("x * y"),
        inputs: &["P", "R"],
        output: "P",
        jvp: "dx * y + x * dy",
        expect: None,
        // Forgetting the replicated factor's tangent.
        twin: WrongJvp::Text("dx * y"),
    },
];

/// The rule a row states, or with `jvp` in place of its JVP.
fn spec(r: &JvpRow, jvp: &str) -> RuleSpec {
    let (op, forward) = match r.op {
        JvpOp::Local(e) => (Some(OpSpec::Expr { expr: e.into() }), None),
        JvpOp::Collective(c) => (None, Some(c.to_string())),
    };
    RuleSpec {
        name: r.id.into(),
        dialect: None,
        op,
        forward,
        backward: None,
        inputs: r
            .inputs
            .iter()
            .map(|s| TypeSpec::One(s.to_string()))
            .collect(),
        output: TypeSpec::One(r.output.into()),
        jvp: Some(jvp.into()),
        ..RuleSpec::default()
    }
}

fn one(r: &JvpRow, jvp: &str, scope: &Scope) -> Result<Rule, UsageError> {
    let mut rules = build(r.id, "", &[spec(r, jvp)], scope)?;
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
    let rule = one(r, r.jvp, scope)?;
    let verdict = verdict_of(&rule, scope);
    let twin_rule = match r.twin {
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
    JVP_ROWS
        .iter()
        .filter(|r| system.is_none_or(|s| r.system == s))
        .collect()
}
