//! Generated programs (SPEC.md §17): every small program skeleton of
//! `generators::programs`, typed by one system's typing function (local
//! steps) and its seed collective table (collective slots), then checked end
//! to end like any program rule: the composed backward against the exact
//! derivative of the composed meaning.
//!
//! A skeleton with input states becomes one program per choice of table row
//! at each collective slot, or a rejection with the system's reason. A cast
//! the system inserts before a local op is its own step, with the system's
//! backward for it.

use crate::check::{check_rule, CheckConfig};
use crate::collectives::{PairRow, PAIR_ROWS};
use crate::rules::{build, to_toml, BackwardSpec, OpSpec, Rule, RuleSpec, StepSpec, TypeSpec};
use crate::types::parse_types;
use rayon::prelude::*;
use spmd_dialects::{OpClass, Outcome, System};
use spmd_generators::programs::{candidates, Candidate, LocalOp, SlotStep};
use spmd_generators::Scope;
use spmd_oracle::Verdict;
use spmd_semantics::State;
use std::collections::{BTreeMap, BTreeSet};

/// The op class a system's typing function sees for a skeleton's op.
pub fn class_of(op: LocalOp) -> OpClass {
    match op {
        LocalOp::Neg => OpClass::Neg,
        LocalOp::Scale => OpClass::ScalarMul,
        LocalOp::Sum => OpClass::Sum,
        LocalOp::Square => OpClass::Nonlinear,
        LocalOp::Add => OpClass::Add,
        LocalOp::Mul => OpClass::Mul,
        LocalOp::Matmul => OpClass::Matmul,
    }
}

/// Where a step of a typed program came from: what to blame if it is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// The system's typing of a local op on these input states.
    Typing {
        op: &'static str,
        ins: Vec<State>,
        out: State,
    },
    /// A cast the system inserted, spelled with its backward.
    Cast {
        name: String,
        forward: String,
        backward: String,
    },
    /// A collective table row (its id).
    Row(&'static str),
}

impl Origin {
    pub fn describe(&self) -> String {
        let letters = |v: &[State]| {
            v.iter()
                .map(|s| s.letter().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Origin::Typing { op, ins, out } => {
                format!(
                    "the typing of {op} on ({}) -> {}",
                    letters(ins),
                    out.letter()
                )
            }
            Origin::Cast {
                name,
                forward,
                backward,
            } => format!("the inserted cast {name} (`{forward}`, backward `{backward}`)"),
            Origin::Row(id) => format!("the collective table row {id}"),
        }
    }
}

/// One typed program: the rule file entry, and each step's origin.
#[derive(Clone, Debug)]
pub struct Typed {
    pub spec: RuleSpec,
    pub origins: Vec<Origin>,
}

/// What typing one skeleton (with one choice of rows) gave.
#[derive(Clone, Debug)]
pub enum Typing {
    Accepted(Box<Typed>),
    /// The system's reason.
    Rejected(String),
}

/// One generated item, in enumeration order.
#[derive(Clone, Debug)]
pub struct Item {
    /// Its place in the enumeration (0: first).
    pub index: usize,
    pub candidate: Candidate,
    pub typing: Typing,
}

/// The one-axis rows of the system's collective table that declare a
/// backward, with source and destination states. Rows spelled
/// `redistribute` are left out: each is a route through a kind another row
/// lists on its own. So is the literal all_to_all row (below).
pub fn slot_rows(system: &str) -> Vec<(&'static PairRow, State, State)> {
    PAIR_ROWS
        .iter()
        .filter(|r| r.system == system && r.backward.is_some())
        .filter(|r| !r.forward.starts_with("redistribute"))
        // The literal reading of seed 003's all_to_all (same split and
        // concat both ways) is left out: in a program its backward meets a
        // cotangent whose split dim does not divide, which the oracle treats
        // as an interpreter bug (a panic) instead of a violation.
        .filter(|r| r.id != "st_all_to_all_literal")
        .filter_map(|r| {
            let (_, ts) = parse_types(r.dialect, &[r.src, r.dst]).ok()?;
            (ts[0].states.len() == 1 && !ts[0].is_global() && !ts[1].is_global())
                .then(|| (r, ts[0].states[0], ts[1].states[0]))
        })
        .collect()
}

/// A row's template with its parameters filled: dim 0, split 0, concat 1.
pub fn fill(t: &str) -> String {
    t.replace("{d}", "0")
        .replace("{s}", "0")
        .replace("{c}", "1")
}

/// How a system's inserted cast is spelled as a step: forward and backward,
/// as the system runs it (`System::cast`: JAX's pvary by psum_invariant,
/// LTensor's `mark_varying` as pvary, Nabla's forced `all_reduce` of a
/// partial input as `all_reduce(I)` with `reinterpret(I,R)`, ...).
pub fn cast_spelling(
    sys: &spmd_dialects::System,
    name: &str,
    from: State,
    to: State,
) -> Option<(String, String)> {
    (sys.cast)(name, from, to)
}

fn value_name(inputs: usize, v: usize) -> String {
    match (inputs, v) {
        (_, 0) => "x".into(),
        (2, 1) => "y".into(),
        _ => format!("t{}", v + 1 - inputs),
    }
}

fn ty(s: State) -> TypeSpec {
    TypeSpec::One(s.letter().to_string())
}

/// Type one candidate with a system: one item per choice of table rows at
/// its collective slots, or one rejection where a step has no typing.
pub fn type_candidate(sys: &System, c: &Candidate) -> Vec<Typing> {
    let rows = slot_rows(sys.name);
    let mut out = Vec::new();
    let sk = &c.skeleton;
    // Per skeleton value: its name in the program and its state.
    let vals: Vec<(String, State)> = (0..sk.inputs)
        .map(|i| (value_name(sk.inputs, i), c.states[i]))
        .collect();
    let state = Partial {
        vals,
        steps: vec![],
        origins: vec![],
        next: 0,
    };
    go(sys, &rows, c, 0, state, &mut out);
    out
}

#[derive(Clone)]
struct Partial {
    vals: Vec<(String, State)>,
    steps: Vec<StepSpec>,
    origins: Vec<Origin>,
    /// Steps named so far (cast steps included).
    next: usize,
}

impl Partial {
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("t{}", self.next)
    }
}

fn go(
    sys: &System,
    rows: &[(&'static PairRow, State, State)],
    c: &Candidate,
    j: usize,
    mut p: Partial,
    out: &mut Vec<Typing>,
) {
    let sk = &c.skeleton;
    let Some(step) = sk.steps.get(j) else {
        let names: Vec<String> = (0..sk.inputs).map(|i| p.vals[i].0.clone()).collect();
        let last = p.steps.last().expect("a step").output.clone();
        out.push(Typing::Accepted(Box::new(Typed {
            spec: RuleSpec {
                name: String::new(),
                names,
                inputs: c.states.iter().map(|&s| ty(s)).collect(),
                output: last,
                step: p.steps,
                ..RuleSpec::default()
            },
            origins: p.origins,
        })));
        return;
    };
    match step {
        SlotStep::Local { op, args } => {
            let ins: Vec<State> = args.iter().map(|&a| p.vals[a].1).collect();
            let per_axis: Vec<Vec<State>> = ins.iter().map(|&s| vec![s]).collect();
            let (output, casts) = match (sys.typing)(class_of(*op), &per_axis) {
                Outcome::Infers { output, casts } => (output, casts),
                o => {
                    let (word, why) = match o {
                        Outcome::Error(e) => ("error", e),
                        Outcome::Unknown(r) => ("unknown", r),
                        Outcome::Infers { .. } => unreachable!("matched above"),
                    };
                    out.push(Typing::Rejected(format!(
                        "step {}: {} on ({}): {word}: {why}",
                        j + 1,
                        op.name(),
                        letters(&ins)
                    )));
                    return;
                }
            };
            // The casts, each its own step (one per value and destination).
            let mut arg_names: Vec<String> = args.iter().map(|&a| p.vals[a].0.clone()).collect();
            let mut eff = ins.clone();
            let mut done: Vec<(usize, State, String)> = vec![];
            for cast in &casts {
                let a = args[cast.input];
                let name = if let Some((_, _, n)) =
                    done.iter().find(|(v, to, _)| *v == a && *to == cast.to)
                {
                    n.clone()
                } else {
                    let Some((fw, bw)) = cast_spelling(sys, cast.name, cast.from, cast.to) else {
                        out.push(Typing::Rejected(format!(
                            "step {}: the inserted cast {} ({} -> {}) has no known spelling",
                            j + 1,
                            cast.name,
                            cast.from.letter(),
                            cast.to.letter()
                        )));
                        return;
                    };
                    let n = p.fresh();
                    p.steps.push(StepSpec {
                        name: n.clone(),
                        expr: None,
                        forward: Some(fw.clone()),
                        input: Some(p.vals[a].0.clone()),
                        backward: Some(bw.clone()),
                        output: ty(cast.to),
                    });
                    p.origins.push(Origin::Cast {
                        name: cast.name.to_string(),
                        forward: fw,
                        backward: bw,
                    });
                    done.push((a, cast.to, n.clone()));
                    n
                };
                arg_names[cast.input] = name;
                eff[cast.input] = cast.to;
            }
            let [o] = output.as_slice() else {
                out.push(Typing::Rejected(format!(
                    "step {}: the typing gave {} states on one axis",
                    j + 1,
                    output.len()
                )));
                return;
            };
            let refs: Vec<&str> = arg_names.iter().map(String::as_str).collect();
            let n = p.fresh();
            p.steps.push(StepSpec {
                name: n.clone(),
                expr: Some(op.expr(&refs)),
                forward: None,
                input: None,
                backward: None,
                output: ty(*o),
            });
            p.origins.push(Origin::Typing {
                op: op.name(),
                ins: eff,
                out: *o,
            });
            p.vals.push((n, *o));
            go(sys, rows, c, j + 1, p, out);
        }
        SlotStep::Collective { arg } => {
            let (src_name, src) = p.vals[*arg].clone();
            let fits: Vec<_> = rows.iter().filter(|(_, s, _)| *s == src).collect();
            if fits.is_empty() {
                out.push(Typing::Rejected(format!(
                    "step {}: no collective of {}'s table (with a backward) starts from {}",
                    j + 1,
                    sys.name,
                    src.letter()
                )));
                return;
            }
            for (r, _, dst) in fits {
                let mut q = p.clone();
                let n = q.fresh();
                q.steps.push(StepSpec {
                    name: n.clone(),
                    expr: None,
                    forward: Some(fill(r.forward)),
                    input: Some(src_name.clone()),
                    backward: r.backward.map(fill),
                    output: ty(*dst),
                });
                q.origins.push(Origin::Row(r.id));
                q.vals.push((n, *dst));
                go(sys, rows, c, j + 1, q, out);
            }
        }
    }
}

fn letters(v: &[State]) -> String {
    v.iter()
        .map(|s| s.letter().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every item of `depth`, typed by `sys`, in enumeration order, each
/// accepted program named `SYSTEM program N`.
pub fn generate(sys: &System, depth: usize) -> Vec<Item> {
    let mut out = Vec::new();
    for c in candidates(depth) {
        for t in type_candidate(sys, &c) {
            let index = out.len();
            let typing = match t {
                Typing::Accepted(mut p) => {
                    p.spec.name = format!("{} program {index}", sys.name);
                    Typing::Accepted(p)
                }
                r => r,
            };
            out.push(Item {
                index,
                candidate: c.clone(),
                typing,
            });
        }
    }
    out
}

/// A rule spec built into a checkable rule in `scope`.
pub fn build_spec(spec: &RuleSpec, scope: &Scope) -> Result<Rule, String> {
    let text = to_toml(spec);
    build("<generated>", &text, std::slice::from_ref(spec), scope)
        .map(|mut v| v.remove(0))
        .map_err(|e| e.0)
}

/// Check one rule in `scope` with no random cases.
fn verdict(rule: &Rule, scope: &Scope) -> Verdict {
    let cfg = CheckConfig {
        scope: scope.clone(),
        cases: 0,
        seed: 0,
    };
    check_rule(rule, &cfg, &[], &|_| {}).verdict
}

/// The step `k` of a program, alone, as a rule: a local step's expression
/// over its arguments' types, or a collective with its backward.
pub fn step_rule(t: &Typed, k: usize) -> RuleSpec {
    let spec = &t.spec;
    let mut types: BTreeMap<String, TypeSpec> = spec
        .names
        .iter()
        .cloned()
        .zip(spec.inputs.iter().cloned())
        .collect();
    for st in &spec.step[..k] {
        types.insert(st.name.clone(), st.output.clone());
    }
    let st = &spec.step[k];
    let name = format!("{} step {}", spec.name, st.name);
    match (&st.expr, &st.forward) {
        (Some(e), _) => {
            let f = spmd_interp::parse(e).expect("generated expressions parse");
            RuleSpec {
                name,
                op: Some(OpSpec::Expr { expr: e.clone() }),
                inputs: f.vars.iter().map(|v| types[v].clone()).collect(),
                output: st.output.clone(),
                ..RuleSpec::default()
            }
        }
        _ => RuleSpec {
            name,
            forward: st.forward.clone(),
            backward: st.backward.clone().map(BackwardSpec::One),
            inputs: vec![types[st.input.as_deref().expect("input")].clone()],
            output: st.output.clone(),
            ..RuleSpec::default()
        },
    }
}

/// An unsound program's blame: the first step unsound alone, or `None`
/// (composition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blame {
    /// The blamed step's position in the program.
    pub step: Option<usize>,
    /// What findings are grouped by: the blamed origin (typing rule, cast or
    /// row), or "composition".
    pub key: String,
    /// The blamed step and its origin, or "composition".
    pub text: String,
    /// The blamed step's own counterexample, checked alone.
    pub alone: Option<String>,
}

/// The counts and findings for one system.
#[derive(Clone, Debug)]
pub struct Report {
    pub system: &'static str,
    pub depth: usize,
    pub generated: usize,
    pub accepted: usize,
    pub rejected: usize,
    /// Rejections where the system's answer is `Unknown` (also in `rejected`).
    pub unknown: usize,
    pub checked: usize,
    /// Classes of accepted programs with the same canonical form (§17.3):
    /// how many times the oracle runs.
    pub distinct: usize,
    pub sound: usize,
    pub unsound: usize,
    pub vacuous: usize,
    /// Checked, neither sound, unsound nor vacuous (undetermined).
    pub other: usize,
    /// Accepted but not checkable in scope (refused by a guard).
    pub not_checked: Vec<(usize, String)>,
    /// The first unsound program per blame (in enumeration order), its
    /// counterexample, the blame, and how many unsound programs share it.
    pub findings: Vec<Finding>,
    /// Rejection reasons, with counts (reason text without the step number).
    pub reasons: BTreeMap<String, usize>,
    /// Table rows (with backward) used by at least one checked program, and
    /// the inserted casts.
    pub covered: BTreeSet<String>,
    /// Table rows that can fill a slot but appear in no checked program.
    pub uncovered: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Finding {
    pub index: usize,
    pub toml: String,
    pub counterexample: String,
    pub blame: Blame,
    pub count: usize,
}

/// Pass 1 of a run (SPEC.md §17.2, §17.3): every program of `depth` typed
/// by one system, the rejections counted, and the accepted programs sorted
/// into classes by their canonical form.
pub struct Typings {
    pub system: &'static str,
    pub depth: usize,
    pub generated: usize,
    pub unknown: usize,
    /// Rejection reasons, with counts.
    pub reasons: BTreeMap<String, usize>,
    /// The accepted programs in enumeration order: index and program.
    pub accepted: Vec<(usize, Typed)>,
    /// Per class, in order of first appearance: its members' positions in
    /// `accepted`, first member (the one the oracle checks) first.
    pub classes: Vec<Vec<u32>>,
}

/// A rejection reason grouped by the system's words, without the step and
/// states.
fn reason_key(r: &str) -> &str {
    r.split_once("): ")
        .or_else(|| r.split_once(": "))
        .map_or(r, |x| x.1)
}

/// Type every program of `depth` with `sys` and sort the accepted ones
/// into classes. Only the typed programs are kept, not the skeletons.
pub fn classify(sys: &System, depth: usize) -> Typings {
    let mut t = Typings {
        system: sys.name,
        depth,
        generated: 0,
        unknown: 0,
        reasons: BTreeMap::new(),
        accepted: vec![],
        classes: vec![],
    };
    let mut class_of: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    for c in candidates(depth) {
        for typing in type_candidate(sys, &c) {
            let index = t.generated;
            t.generated += 1;
            match typing {
                Typing::Accepted(mut p) => {
                    p.spec.name = format!("{} program {index}", sys.name);
                    let next = t.classes.len() as u32;
                    let k = *class_of.entry(canonical_key(&p.spec)).or_insert(next);
                    if k == next {
                        t.classes.push(vec![]);
                    }
                    t.classes[k as usize].push(t.accepted.len() as u32);
                    t.accepted.push((index, *p));
                }
                Typing::Rejected(r) => {
                    let key = reason_key(&r);
                    if key.starts_with("unknown: ") {
                        t.unknown += 1;
                    }
                    *t.reasons.entry(key.to_string()).or_insert(0) += 1;
                }
            }
        }
    }
    t
}

/// What the oracle said about a class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassVerdict {
    Sound,
    Unsound,
    Vacuous,
    Undetermined,
    /// The rule could not be built in scope (the reason).
    NotChecked(String),
}

/// Unsound members of a class that share a blame: the first (enumeration
/// index), how many, and, for the first of its blame among the classes a run
/// checked, the finding's rule text and own counterexample.
#[derive(Clone, Debug)]
pub struct BlameGroup {
    pub blame: Blame,
    pub first: usize,
    pub count: usize,
    pub finding: Option<(String, String)>,
}

/// One class checked: the unit a partitioned run splits (SPEC.md §18.3).
#[derive(Clone, Debug)]
pub struct ClassResult {
    pub class: usize,
    pub members: usize,
    pub verdict: ClassVerdict,
    /// The members' enumeration indices, kept only when not checked.
    pub not_checked: Vec<usize>,
    /// Table rows and inserted casts of its members (when checked).
    pub covered: BTreeSet<String>,
    /// Unsound classes: the members grouped by blame.
    pub blames: Vec<BlameGroup>,
}

/// Seconds spent in each phase of a run.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    pub typing: f64,
    pub checks: f64,
    pub blame: f64,
    pub findings: f64,
}

impl Timings {
    pub fn line(&self) -> String {
        format!(
            "time: typing and classes {:.1} s, oracle checks {:.1} s, blame {:.1} s, findings {:.1} s",
            self.typing, self.checks, self.blame, self.findings
        )
    }
}

/// Check the classes `owns` picks (every one in a single run): the oracle
/// checks each class's first member once; every unsound member is blamed
/// (steps checked alone, once each); and per blame, the first unsound
/// member among these classes gets its own counterexample (a second check
/// only when it is not the member the oracle checked).
pub fn check_classes(
    t: &Typings,
    scope: &Scope,
    owns: &(dyn Fn(usize) -> bool + Sync),
    bar: Option<&indicatif::ProgressBar>,
    times: &mut Timings,
) -> Vec<ClassResult> {
    let mine: Vec<usize> = (0..t.classes.len()).filter(|&c| owns(c)).collect();
    let clock = std::time::Instant::now();
    if let Some(b) = bar {
        b.set_length(mine.len() as u64);
        b.set_position(0);
        b.set_message(format!("{} depth {}: oracle checks", t.system, t.depth));
    }
    let verdicts: Vec<Result<Verdict, String>> = mine
        .par_iter()
        .map(|&c| {
            let v = class_verdict(&t.accepted[t.classes[c][0] as usize].1.spec, scope);
            if let Some(b) = bar {
                b.inc(1);
            }
            v
        })
        .collect();
    times.checks += clock.elapsed().as_secs_f64();
    assemble_classes(t, scope, &mine, verdicts, bar, times)
}

/// The oracle's verdict on one class representative's program.
fn class_verdict(spec: &RuleSpec, scope: &Scope) -> Result<Verdict, String> {
    build_spec(spec, scope).map(|r| verdict(&r, scope))
}

/// What decides a class representative's verdict: its program text with
/// the rule's name left out (a name is only a label; SPEC.md §17.3).
fn verdict_key(spec: &RuleSpec) -> String {
    let mut s = spec.clone();
    s.name.clear();
    to_toml(&s)
}

/// Several systems' runs at one depth, each distinct program checked once
/// across all of them (SPEC.md §17.3): the systems share many programs
/// (a product of two Varying inputs is one program in every system), and a
/// verdict depends only on the program and the scope. Each report is the
/// one `run` gives for its system alone.
pub fn run_many(systems: &[&System], depth: usize, scope: &Scope) -> Vec<Report> {
    let ts: Vec<Typings> = systems.par_iter().map(|s| classify(s, depth)).collect();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    let mut distinct: Vec<&RuleSpec> = vec![];
    let keys: Vec<Vec<usize>> = ts
        .iter()
        .map(|t| {
            t.classes
                .iter()
                .map(|members| {
                    let spec = &t.accepted[members[0] as usize].1.spec;
                    *index.entry(verdict_key(spec)).or_insert_with(|| {
                        distinct.push(spec);
                        distinct.len() - 1
                    })
                })
                .collect()
        })
        .collect();
    let verdicts: Vec<Result<Verdict, String>> = distinct
        .par_iter()
        .map(|spec| class_verdict(spec, scope))
        .collect();
    ts.par_iter()
        .zip(keys)
        .map(|(t, ks)| {
            let mine: Vec<usize> = (0..t.classes.len()).collect();
            let vs = ks.iter().map(|&k| verdicts[k].clone()).collect();
            let classes = assemble_classes(t, scope, &mine, vs, None, &mut Timings::default());
            TypingSummary::of(t).report(&classes)
        })
        .collect()
}

/// The class results from the verdicts of the classes `mine` (in order):
/// members, coverage, and for unsound classes the blamed steps and the
/// findings' counterexamples.
fn assemble_classes(
    t: &Typings,
    scope: &Scope,
    mine: &[usize],
    verdicts: Vec<Result<Verdict, String>>,
    bar: Option<&indicatif::ProgressBar>,
    times: &mut Timings,
) -> Vec<ClassResult> {
    let clock = std::time::Instant::now();
    let mut out: Vec<ClassResult> = Vec::with_capacity(mine.len());
    // Unsound members: (class position in `out`, accepted position).
    let mut unsound: Vec<(usize, u32)> = vec![];
    for (&c, v) in mine.iter().zip(&verdicts) {
        let members = &t.classes[c];
        let verdict = match v {
            Err(e) => ClassVerdict::NotChecked(e.clone()),
            Ok(v) if v.is_sound() => ClassVerdict::Sound,
            Ok(v) if v.violation().is_some() => ClassVerdict::Unsound,
            Ok(Verdict::Vacuous { .. }) => ClassVerdict::Vacuous,
            Ok(_) => ClassVerdict::Undetermined,
        };
        let mut covered = BTreeSet::new();
        let mut not_checked = vec![];
        for &m in members {
            let (index, typed) = &t.accepted[m as usize];
            if matches!(verdict, ClassVerdict::NotChecked(_)) {
                not_checked.push(*index);
                continue;
            }
            for o in &typed.origins {
                match o {
                    Origin::Row(id) => {
                        covered.insert((*id).to_string());
                    }
                    Origin::Cast { name, .. } => {
                        covered.insert(format!("inserted {name}"));
                    }
                    Origin::Typing { .. } => {}
                }
            }
            if verdict == ClassVerdict::Unsound {
                unsound.push((out.len(), m));
            }
        }
        out.push(ClassResult {
            class: c,
            members: members.len(),
            verdict,
            not_checked,
            covered,
            blames: vec![],
        });
    }
    // Blame: each distinct step checked alone once.
    if let Some(b) = bar {
        b.set_length(unsound.len() as u64);
        b.set_position(0);
        b.set_message(format!("{} depth {}: blame", t.system, t.depth));
    }
    let cache = std::sync::Mutex::new(std::collections::HashMap::new());
    let blames: Vec<Blame> = unsound
        .par_iter()
        .map(|&(_, m)| {
            let b = blame_cached(&t.accepted[m as usize].1, scope, &cache);
            if let Some(bar) = bar {
                bar.inc(1);
            }
            b
        })
        .collect();
    // Per blame: the first member over these classes (enumeration order).
    let mut first_of: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (&(at, m), b) in unsound.iter().zip(blames) {
        let index = t.accepted[m as usize].0;
        let groups = &mut out[at].blames;
        let g = match groups.iter().position(|g| g.blame.key == b.key) {
            Some(g) => g,
            None => {
                groups.push(BlameGroup {
                    blame: b.clone(),
                    first: index,
                    count: 0,
                    finding: None,
                });
                groups.len() - 1
            }
        };
        groups[g].count += 1;
        let e = first_of.entry(b.key).or_insert((index, at, m as usize));
        if index < e.0 {
            *e = (index, at, m as usize);
        }
    }
    times.blame += clock.elapsed().as_secs_f64();
    let clock = std::time::Instant::now();
    // The finding's counterexample is its own program's. Where that program
    // is the one the oracle checked, its verdict is reused.
    let firsts: Vec<(String, usize, usize)> = first_of
        .into_iter()
        .map(|(k, (_, at, m))| (k, at, m))
        .collect();
    let texts: Vec<(String, String)> = firsts
        .par_iter()
        .map(|(_, at, m)| {
            let pos = mine.binary_search(&out[*at].class).expect("mine");
            let class_v = verdicts[pos].as_ref().expect("checked");
            let typed = &t.accepted[*m].1;
            let rep = t.classes[out[*at].class][0] as usize;
            let line = if rep == *m {
                class_v.violation().map(|x| x.one_line())
            } else {
                let own = build_spec(&typed.spec, scope).map(|r| verdict(&r, scope));
                match &own {
                    Ok(v) if v.violation().is_some() => v.violation().map(|x| x.one_line()),
                    _ => class_v.violation().map(|x| x.one_line()),
                }
            };
            (to_toml(&typed.spec), line.unwrap_or_default())
        })
        .collect();
    for ((key, at, _), text) in firsts.into_iter().zip(texts) {
        let g = out[at]
            .blames
            .iter_mut()
            .find(|g| g.blame.key == key)
            .expect("group");
        g.finding = Some(text);
    }
    times.findings += clock.elapsed().as_secs_f64();
    out
}

/// The report of a run from its typings and checked classes (all of them,
/// or one part's).
pub fn aggregate(t: &Typings, classes: &[ClassResult]) -> Report {
    let summary = TypingSummary::of(t);
    summary.report(classes)
}

/// What pass 1 counted, without the programs: all a merge needs besides
/// the classes.
#[derive(Clone, Debug)]
pub struct TypingSummary {
    pub system: &'static str,
    pub depth: usize,
    pub generated: usize,
    pub accepted: usize,
    pub unknown: usize,
    pub distinct: usize,
    pub reasons: BTreeMap<String, usize>,
    /// The slot rows of the system's table (for coverage).
    pub rows: Vec<String>,
}

impl TypingSummary {
    pub fn of(t: &Typings) -> TypingSummary {
        TypingSummary {
            system: t.system,
            depth: t.depth,
            generated: t.generated,
            accepted: t.accepted.len(),
            unknown: t.unknown,
            distinct: t.classes.len(),
            reasons: t.reasons.clone(),
            rows: slot_rows(t.system)
                .iter()
                .map(|(r, _, _)| r.id.to_string())
                .collect(),
        }
    }

    /// The report: counts summed over the classes, and per blame the first
    /// unsound program (enumeration order) with the number sharing it.
    pub fn report(&self, classes: &[ClassResult]) -> Report {
        let mut rep = Report {
            system: self.system,
            depth: self.depth,
            generated: self.generated,
            accepted: self.accepted,
            rejected: self.generated - self.accepted,
            unknown: self.unknown,
            checked: 0,
            distinct: self.distinct,
            sound: 0,
            unsound: 0,
            vacuous: 0,
            other: 0,
            not_checked: vec![],
            findings: vec![],
            reasons: self.reasons.clone(),
            covered: BTreeSet::new(),
            uncovered: vec![],
        };
        let mut findings: BTreeMap<&str, Finding> = BTreeMap::new();
        for c in classes {
            match &c.verdict {
                ClassVerdict::NotChecked(e) => {
                    rep.not_checked
                        .extend(c.not_checked.iter().map(|&i| (i, e.clone())));
                    continue;
                }
                ClassVerdict::Sound => rep.sound += c.members,
                ClassVerdict::Unsound => rep.unsound += c.members,
                ClassVerdict::Vacuous => rep.vacuous += c.members,
                ClassVerdict::Undetermined => rep.other += c.members,
            }
            rep.checked += c.members;
            rep.covered.extend(c.covered.iter().cloned());
            for g in &c.blames {
                let f = findings.entry(&g.blame.key).or_insert_with(|| Finding {
                    index: usize::MAX,
                    toml: String::new(),
                    counterexample: String::new(),
                    blame: g.blame.clone(),
                    count: 0,
                });
                f.count += g.count;
                if g.first < f.index {
                    f.index = g.first;
                    f.blame = g.blame.clone();
                    let (toml, cx) = g.finding.clone().unwrap_or_default();
                    f.toml = toml;
                    f.counterexample = cx;
                }
            }
        }
        rep.not_checked.sort();
        rep.findings = findings.into_values().collect();
        rep.findings.sort_by_key(|f| f.index);
        rep.uncovered = self
            .rows
            .iter()
            .filter(|id| !rep.covered.contains(*id))
            .cloned()
            .collect();
        rep
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "system": self.system,
            "depth": self.depth,
            "generated": self.generated,
            "accepted": self.accepted,
            "unknown": self.unknown,
            "distinct": self.distinct,
            "rejections": self.reasons,
            "rows": self.rows,
        })
    }

    pub fn from_json(v: &serde_json::Value) -> Result<TypingSummary, String> {
        let n = |k: &str| {
            v[k].as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| format!("typing: no `{k}`"))
        };
        let name = v["system"].as_str().ok_or("typing: no `system`")?;
        let sys = crate::dialects::system(name)?;
        let reasons = v["rejections"]
            .as_object()
            .ok_or("typing: no `rejections`")?
            .iter()
            .map(|(k, c)| {
                c.as_u64()
                    .map(|c| (k.clone(), c as usize))
                    .ok_or_else(|| format!("typing: rejection count of {k:?}"))
            })
            .collect::<Result<_, String>>()?;
        let rows = strings(&v["rows"]).ok_or("typing: no `rows`")?;
        let s = TypingSummary {
            system: sys.name,
            depth: n("depth")?,
            generated: n("generated")?,
            accepted: n("accepted")?,
            unknown: n("unknown")?,
            distinct: n("distinct")?,
            reasons,
            rows,
        };
        if s.accepted > s.generated {
            return Err("typing: more accepted than generated".into());
        }
        Ok(s)
    }
}

fn strings(v: &serde_json::Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect()
}

impl ClassResult {
    pub fn json(&self) -> serde_json::Value {
        let (verdict, reason) = match &self.verdict {
            ClassVerdict::Sound => ("sound", None),
            ClassVerdict::Unsound => ("unsound", None),
            ClassVerdict::Vacuous => ("vacuous", None),
            ClassVerdict::Undetermined => ("undetermined", None),
            ClassVerdict::NotChecked(e) => ("not_checked", Some(e)),
        };
        serde_json::json!({
            "class": self.class,
            "members": self.members,
            "verdict": verdict,
            "reason": reason,
            "not_checked": self.not_checked,
            "covered": self.covered,
            "blames": self.blames.iter().map(|g| serde_json::json!({
                "key": g.blame.key,
                "blame": g.blame.text,
                "blamed_step": g.blame.step,
                "blamed_step_alone": g.blame.alone,
                "first": g.first,
                "programs": g.count,
                "finding": g.finding.as_ref().map(|(r, c)| serde_json::json!({"rule": r, "counterexample": c})),
            })).collect::<Vec<_>>(),
        })
    }

    pub fn from_json(v: &serde_json::Value) -> Result<ClassResult, String> {
        let bad = |what: &str| format!("class entry: bad or missing `{what}`");
        let n = |x: &serde_json::Value, k: &str| {
            x[k].as_u64().map(|x| x as usize).ok_or_else(|| bad(k))
        };
        let verdict = match v["verdict"].as_str().ok_or_else(|| bad("verdict"))? {
            "sound" => ClassVerdict::Sound,
            "unsound" => ClassVerdict::Unsound,
            "vacuous" => ClassVerdict::Vacuous,
            "undetermined" => ClassVerdict::Undetermined,
            "not_checked" => ClassVerdict::NotChecked(
                v["reason"]
                    .as_str()
                    .ok_or_else(|| bad("reason"))?
                    .to_string(),
            ),
            other => return Err(format!("class entry: unknown verdict {other:?}")),
        };
        let not_checked = v["not_checked"]
            .as_array()
            .ok_or_else(|| bad("not_checked"))?
            .iter()
            .map(|x| {
                x.as_u64()
                    .map(|x| x as usize)
                    .ok_or_else(|| bad("not_checked"))
            })
            .collect::<Result<_, _>>()?;
        let covered = strings(&v["covered"]).ok_or_else(|| bad("covered"))?;
        let blames = v["blames"]
            .as_array()
            .ok_or_else(|| bad("blames"))?
            .iter()
            .map(|g| {
                let s = |k: &str| g[k].as_str().map(str::to_string).ok_or_else(|| bad(k));
                let finding = match &g["finding"] {
                    serde_json::Value::Null => None,
                    f => Some((
                        f["rule"].as_str().ok_or_else(|| bad("rule"))?.to_string(),
                        f["counterexample"]
                            .as_str()
                            .ok_or_else(|| bad("counterexample"))?
                            .to_string(),
                    )),
                };
                Ok(BlameGroup {
                    blame: Blame {
                        step: g["blamed_step"].as_u64().map(|x| x as usize),
                        key: s("key")?,
                        text: s("blame")?,
                        alone: g["blamed_step_alone"].as_str().map(str::to_string),
                    },
                    first: n(g, "first")?,
                    count: n(g, "programs")?,
                    finding,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(ClassResult {
            class: n(v, "class")?,
            members: n(v, "members")?,
            verdict,
            not_checked,
            covered: covered.into_iter().collect(),
            blames,
        })
    }
}

/// How `merge` assembles a partitioned `programs` run: its parts hold its
/// classes, and the single run's JSON is the report over all of them
/// (SPEC.md §17.3).
pub const ASSEMBLE: &[(&str, crate::partition::Assemble)] = &[("programs", merged_json)];

/// The single run's JSON from the merged sections of a partitioned
/// `programs` run: `typing` (one entry) and `classes` (one per class).
pub fn merged_json(
    sections: &serde_json::Map<String, serde_json::Value>,
) -> Result<serde_json::Value, String> {
    let typing = sections
        .get("typing")
        .and_then(|v| v.as_array())
        .and_then(|v| v.first())
        .ok_or("programs: no `typing` section")?;
    let summary = TypingSummary::from_json(typing)?;
    let classes = sections
        .get("classes")
        .and_then(|v| v.as_array())
        .ok_or("programs: no `classes` section")?
        .iter()
        .map(ClassResult::from_json)
        .collect::<Result<Vec<_>, String>>()?;
    if classes.len() != summary.distinct {
        return Err(format!(
            "programs: {} classes for {} distinct",
            classes.len(),
            summary.distinct
        ));
    }
    // The report adds these counts up: parts read from files must not make
    // the sums wrap. Programs of a class are at most its members, members of
    // all classes at most the accepted programs.
    let mut members = 0usize;
    for c in &classes {
        members = members
            .checked_add(c.members)
            .filter(|&m| m <= summary.accepted)
            .ok_or("programs: the classes have more members than programs were accepted")?;
        c.blames
            .iter()
            .try_fold(0usize, |n, g| n.checked_add(g.count))
            .filter(|&n| n <= c.members)
            .ok_or_else(|| {
                format!(
                    "programs: class {} blames more programs than it has",
                    c.class
                )
            })?;
    }
    Ok(exhaustive_body(&summary.report(&classes)))
}

/// The body of `programs --json` for an exhaustive run (SPEC.md §17.3):
/// the mode and the report.
pub fn exhaustive_body(r: &Report) -> serde_json::Value {
    serde_json::json!({"mode": "exhaustive", "report": r.json()})
}

/// Options of a run beyond its system, depth and scope.
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Check only the classes this part owns (SPEC.md §18.3).
    pub partition: Option<crate::partition::Partition>,
    /// Progress (a hidden bar draws nothing).
    pub progress: Option<&'a indicatif::ProgressBar>,
}

/// A run's results: the typings' summary, the classes it checked, and the
/// report over them.
pub struct Run {
    pub summary: TypingSummary,
    pub classes: Vec<ClassResult>,
    pub report: Report,
    pub timings: Timings,
}

/// Type every skeleton of `depth` with `sys`, check the classes `opts`
/// picks in `scope` (no random cases), and blame each unsound program.
pub fn run_with(sys: &System, depth: usize, scope: &Scope, opts: &RunOptions) -> Run {
    let mut timings = Timings::default();
    let clock = std::time::Instant::now();
    if let Some(b) = opts.progress {
        b.set_message(format!("{} depth {depth}: typing", sys.name));
    }
    let t = classify(sys, depth);
    timings.typing = clock.elapsed().as_secs_f64();
    let part = opts.partition;
    let classes = check_classes(
        &t,
        scope,
        &|c| part.is_none_or(|p| p.owns(c)),
        opts.progress,
        &mut timings,
    );
    let summary = TypingSummary::of(&t);
    let report = summary.report(&classes);
    Run {
        summary,
        classes,
        report,
        timings,
    }
}

/// Type every skeleton of `depth` with `sys`, check every accepted program
/// in `scope` (no random cases, one check per class), and blame each
/// unsound one.
pub fn run(sys: &System, depth: usize, scope: &Scope) -> Report {
    run_with(sys, depth, scope, &RunOptions::default()).report
}

/// A part's `--json` (SPEC.md §18.3): the envelope with two sections,
/// `typing` (pass 1's counts, one entry, which part 1 holds) and `classes`
/// (one entry per class this part checked).
pub fn part_json(r: &Run, p: crate::partition::Partition, scope: &Scope) -> serde_json::Value {
    use crate::partition::{envelope, part_document, Section};
    let key = serde_json::json!({
        "system": r.summary.system,
        "depth": r.summary.depth,
        "scope": crate::report::scope_json(scope),
    });
    let typing = Section {
        name: "typing",
        total: 1,
        entries: if p.owns(0) {
            vec![(0, r.summary.json())]
        } else {
            vec![]
        },
    };
    let classes = Section {
        name: "classes",
        total: r.summary.distinct,
        entries: r.classes.iter().map(|c| (c.class, c.json())).collect(),
    };
    let doc = crate::words::document("programs", exhaustive_body(&r.report));
    part_document(doc, envelope(p, key, vec![typing, classes]))
}

/// The canonical form of a typed program (SPEC.md §17.3), equal for
/// programs that differ only by
/// - the names of their values (inputs and steps),
/// - the order of the two inputs (with their types),
/// - the order of the arguments of a two-argument `+` or `*`,
/// - the order of steps that do not depend on each other.
///
/// Steps are put in a canonical order that respects their dependencies:
/// among the steps whose arguments are all defined, the one whose
/// expression tree (its op, output type and, recursively, its arguments'
/// trees, a sum's or product's two sorted, the inputs by type only) is
/// least comes first, ties kept in program order. Values are then numbered
/// in that order, and the program is printed with each step's op, its
/// arguments' numbers (a sum's or product's sorted) and its output type,
/// under both orders of the inputs; the lesser text is the key. The text
/// keeps every argument, so a value shared by two steps and two copies of
/// one computation print differently. Any other field of the rule is
/// appended as it is.
pub fn canonical_key(spec: &RuleSpec) -> String {
    canonical_form(spec, true)
}

/// `canonical_key`, or with `reorder` false the same form with the steps
/// kept in program order (equal only up to renaming, the inputs' order and
/// a sum's or product's arguments): the two count how many checks
/// reordering saves.
pub fn canonical_form(spec: &RuleSpec, reorder: bool) -> String {
    let k = spec.names.len();
    let ty = |t: &TypeSpec| match t {
        TypeSpec::One(s) => s.clone(),
        t => format!("{t:?}"),
    };
    let mut id: std::collections::HashMap<&str, usize> = spec
        .names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    // Per step: op text with `{i}` for its i-th distinct argument, the
    // arguments' value numbers, whether the two commute, and its type.
    struct Node {
        head: String,
        args: Vec<usize>,
        commutes: bool,
        ty: String,
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(spec.step.len());
    for st in &spec.step {
        let mut args: Vec<usize> = vec![];
        let head = match (&st.expr, &st.forward) {
            (Some(e), _) => {
                let mut head = String::new();
                let mut word = String::new();
                let flush = |w: &mut String, head: &mut String, args: &mut Vec<usize>| {
                    if let Some(&v) = id.get(w.as_str()) {
                        let i = args.iter().position(|&a| a == v).unwrap_or_else(|| {
                            args.push(v);
                            args.len() - 1
                        });
                        head.push_str(&format!("{{{i}}}"));
                    } else {
                        head.push_str(w);
                    }
                    w.clear();
                };
                for ch in e.chars() {
                    if ch.is_ascii_alphanumeric() || ch == '_' {
                        word.push(ch);
                    } else {
                        flush(&mut word, &mut head, &mut args);
                        head.push(ch);
                    }
                }
                flush(&mut word, &mut head, &mut args);
                format!("expr {head}")
            }
            (None, f) => {
                if let Some(&v) = st.input.as_deref().and_then(|n| id.get(n)) {
                    args.push(v);
                }
                format!(
                    "collective {:?} input {:?} backward {:?}",
                    f,
                    st.input.as_deref().map(|n| id.contains_key(n)),
                    st.backward
                )
            }
        };
        let commutes = args.len() == 2 && (head == "expr {0} + {1}" || head == "expr {0} * {1}");
        id.insert(st.name.as_str(), k + nodes.len());
        nodes.push(Node {
            head,
            args,
            commutes,
            ty: ty(&st.output),
        });
    }
    // Expression trees, inputs by type only.
    let mut tree: Vec<String> = spec
        .inputs
        .iter()
        .map(|t| format!("in {}", ty(t)))
        .collect();
    for n in &nodes {
        let mut a: Vec<&str> = n.args.iter().map(|&v| tree[v].as_str()).collect();
        if n.commutes {
            a.sort_unstable();
        }
        let t = format!("({} : {} ; {})", n.head, n.ty, a.join(" , "));
        tree.push(t);
    }
    // Canonical order: the least ready tree first.
    let mut placed = vec![false; k + nodes.len()];
    placed[..k].iter_mut().for_each(|p| *p = true);
    let mut order: Vec<usize> = Vec::with_capacity(nodes.len());
    for _ in 0..nodes.len() {
        let next = (0..nodes.len())
            .filter(|&j| !placed[k + j] && nodes[j].args.iter().all(|&a| placed[a]))
            .min_by(|&a, &b| {
                if reorder {
                    tree[k + a].cmp(&tree[k + b]).then(a.cmp(&b))
                } else {
                    a.cmp(&b)
                }
            });
        let Some(j) = next else {
            break; // an argument never defined: printed as it is below
        };
        placed[k + j] = true;
        order.push(j);
    }
    let rest: Vec<usize> = (0..nodes.len()).filter(|&j| !placed[k + j]).collect();
    order.extend(rest);
    let perms: Vec<Vec<usize>> = if k == 2 {
        vec![vec![0, 1], vec![1, 0]]
    } else {
        vec![(0..k).collect()]
    };
    let mut best: Option<String> = None;
    for perm in perms {
        // new number of each old value
        let mut num = vec![usize::MAX; k + nodes.len()];
        for (new, &old) in perm.iter().enumerate() {
            num[old] = new;
        }
        for (pos, &j) in order.iter().enumerate() {
            num[k + j] = k + pos;
        }
        let mut s = String::new();
        for &old in &perm {
            s.push_str(&format!("in {};", ty(&spec.inputs[old])));
        }
        for &j in &order {
            let n = &nodes[j];
            let mut a: Vec<usize> = n.args.iter().map(|&v| num[v]).collect();
            if n.commutes {
                a.sort_unstable();
            }
            s.push_str(&format!("|{} {:?} : {}", n.head, a, n.ty));
        }
        if best.as_ref().is_none_or(|b| s < *b) {
            best = Some(s);
        }
    }
    let mut key = best.unwrap_or_default();
    key.push_str(&format!(" => {}", ty(&spec.output)));
    let rest = RuleSpec {
        name: String::new(),
        names: vec![],
        inputs: vec![],
        output: TypeSpec::default(),
        step: vec![],
        ..spec.clone()
    };
    if format!("{rest:?}") != format!("{:?}", RuleSpec::default()) {
        key.push_str(&format!(" + {}", to_toml(&rest)));
    }
    key
}

/// The first step of a program that is unsound alone, or "composition".
pub fn blame(t: &Typed, scope: &Scope) -> Blame {
    blame_cached(
        t,
        scope,
        &std::sync::Mutex::new(std::collections::HashMap::new()),
    )
}

/// Steps checked alone, by their rule text without the name: the
/// counterexample, if unsound.
type StepCache = std::sync::Mutex<std::collections::HashMap<String, Option<String>>>;

fn blame_cached(t: &Typed, scope: &Scope, cache: &StepCache) -> Blame {
    for k in 0..t.spec.step.len() {
        let mut spec = step_rule(t, k);
        let key = {
            let named = std::mem::take(&mut spec.name);
            let key = to_toml(&spec);
            spec.name = named;
            key
        };
        let hit = cache.lock().expect("cache").get(&key).cloned();
        let found = match hit {
            Some(f) => f,
            None => {
                let f = build_spec(&spec, scope)
                    .ok()
                    .and_then(|rule| verdict(&rule, scope).violation().map(|x| x.one_line()));
                cache.lock().expect("cache").insert(key, f.clone());
                f
            }
        };
        if let Some(x) = found {
            let o = t.origins[k].clone();
            return Blame {
                text: format!("step `{}`: {}", t.spec.step[k].name, o.describe()),
                alone: Some(x),
                key: o.describe(),
                step: Some(k),
            };
        }
    }
    let text = "composition: every step is sound alone".to_string();
    Blame {
        step: None,
        key: text.clone(),
        text,
        alone: None,
    }
}
impl Report {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "system": self.system,
            "depth": self.depth,
            "generated": self.generated,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "unknown": self.unknown,
            "checked": self.checked,
            "distinct": self.distinct,
            "sound": self.sound,
            "unsound": self.unsound,
            "vacuous": self.vacuous,
            "undetermined": self.other,
            "not_checked": self.not_checked.iter().map(|(i, e)| serde_json::json!({"index": i, "reason": e})).collect::<Vec<_>>(),
            "findings": self.findings.iter().map(|f| serde_json::json!({
                "index": f.index,
                "rule": f.toml,
                "counterexample": f.counterexample,
                "blame": f.blame.text,
                "blamed_step_alone": f.blame.alone,
                "blamed_step": f.blame.step,
                "programs": f.count,
            })).collect::<Vec<_>>(),
            "rejections": self.reasons,
            "covered": self.covered,
            "uncovered": self.uncovered,
        })
    }

    pub fn text(&self) -> String {
        let mut s = format!(
            "generated programs of {} (depth {}, SPEC.md §17):\n  generated {}, accepted {}, rejected {} ({} unknown), checked {} ({} classes, one oracle check each, §17.3), sound {}, unsound {}, vacuous {}, undetermined {}\n",
            self.system,
            self.depth,
            self.generated,
            self.accepted,
            self.rejected,
            self.unknown,
            self.checked,
            self.distinct,
            self.sound,
            self.unsound,
            self.vacuous,
            self.other
        );
        for (i, e) in &self.not_checked {
            s.push_str(&format!("  program {i} not checked: {e}\n"));
        }
        if !self.reasons.is_empty() {
            s.push_str("rejections:\n");
            for (r, n) in &self.reasons {
                s.push_str(&format!("  {n:>5}  {r}\n"));
            }
        }
        for f in &self.findings {
            s.push_str(&format!(
                "\nunsound: program {} (first of {} with this blame)\n  counterexample: {}\n  blame: {}\n",
                f.index, f.count, f.counterexample, f.blame.text
            ));
            if let Some(a) = &f.blame.alone {
                s.push_str(&format!("  that step alone: {a}\n"));
            }
            s.push_str(&f.toml);
        }
        s.push_str("\ncoverage (table rows and inserted casts in at least one checked program):\n");
        for c in &self.covered {
            s.push_str(&format!("  covered    {c}\n"));
        }
        for c in &self.uncovered {
            s.push_str(&format!("  uncovered  {c}\n"));
        }
        s
    }
}

/// One compact line per system for `conform` (SPEC.md §17.3): the counts of
/// `run` at `depth`, with its findings' blames.
pub fn summary_line(r: &Report) -> String {
    let blames: Vec<String> = r
        .findings
        .iter()
        .map(|f| format!("{} ({})", f.blame.text, f.count))
        .collect();
    format!(
        "{:<11} depth {}: {} generated, {} accepted, {} checked, {} sound, {} unsound, {} vacuous, {} undetermined{}",
        r.system,
        r.depth,
        r.generated,
        r.accepted,
        r.checked,
        r.sound,
        r.unsound,
        r.vacuous,
        r.other,
        if blames.is_empty() {
            String::new()
        } else {
            format!("; blamed: {}", blames.join("; "))
        }
    )
}

/// The summary's numbers for tools.
pub fn summary_json(r: &Report) -> serde_json::Value {
    serde_json::json!({
        "system": r.system,
        "depth": r.depth,
        "generated": r.generated,
        "accepted": r.accepted,
        "checked": r.checked,
        "sound": r.sound,
        "unsound": r.unsound,
        "vacuous": r.vacuous,
        "undetermined": r.other,
        "blames": r.findings.iter().map(|f| serde_json::json!({"blame": f.blame.text, "programs": f.count})).collect::<Vec<_>>(),
    })
}

/// The random mode (SPEC.md §17.5): proptest-drawn programs beyond the
/// exhaustive depth, each typed and checked; the first unsound one is
/// shrunk to the fewest steps (then the smallest choices), and printed with
/// its counterexample and blame.
#[derive(Clone, Debug)]
pub struct RandomReport {
    pub system: &'static str,
    pub cases: u32,
    pub seed: u64,
    pub max_steps: usize,
    /// Drawn programs run before the first failure (or all of them).
    pub ran: usize,
    pub accepted: usize,
    pub rejected: usize,
    pub sound: usize,
    pub unsound: usize,
    pub vacuous: usize,
    pub other: usize,
    /// The shrunk unsound program: its rule text, its per-rank
    /// counterexample (the oracle's smallest mesh, shape and values for it),
    /// and the blame.
    pub minimal: Option<Finding>,
    /// The shrunk program's counterexample in full, rank by rank.
    pub report: Option<String>,
}

/// Draw `cases` programs of 1 to `max_steps` steps with `seed`, type each
/// with `sys`, check every typing end to end in `scope`, and shrink the
/// first unsound one.
pub fn random(
    sys: &System,
    cases: u32,
    seed: u64,
    max_steps: usize,
    scope: &Scope,
) -> RandomReport {
    use proptest::test_runner::{
        Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner,
    };
    use std::cell::{Cell, RefCell};
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let mut rep = RandomReport {
        system: sys.name,
        cases,
        seed,
        max_steps,
        ran: 0,
        accepted: 0,
        rejected: 0,
        sound: 0,
        unsound: 0,
        vacuous: 0,
        other: 0,
        minimal: None,
        report: None,
    };
    // Verdicts by class (§17.3), shared by drawing and shrinking.
    let cache: RefCell<std::collections::HashMap<String, Result<Verdict, String>>> =
        RefCell::new(std::collections::HashMap::new());
    let check = |t: &Typed| -> Result<Verdict, String> {
        let key = canonical_key(&t.spec);
        if let Some(v) = cache.borrow().get(&key) {
            return v.clone();
        }
        let v = build_spec(&t.spec, scope).map(|r| verdict(&r, scope));
        cache.borrow_mut().insert(key, v.clone());
        v
    };
    let counts = RefCell::new((0usize, 0usize, 0usize, 0usize, 0usize, 0usize, 0usize));
    let failed = Cell::new(false);
    let result = runner.run(
        &spmd_generators::programs::candidate_strategy(max_steps),
        |c| {
            let mut k = counts.borrow_mut();
            let counting = !failed.get();
            if counting {
                k.0 += 1;
            }
            for t in type_candidate(sys, &c) {
                let Typing::Accepted(t) = t else {
                    if counting {
                        k.2 += 1;
                    }
                    continue;
                };
                if counting {
                    k.1 += 1;
                }
                match check(&t) {
                    Ok(v) if v.is_sound() => {
                        if counting {
                            k.3 += 1;
                        }
                    }
                    Ok(v) if v.violation().is_some() => {
                        if counting {
                            k.4 += 1;
                        }
                        failed.set(true);
                        return Err(TestCaseError::fail("unsound"));
                    }
                    Ok(Verdict::Vacuous { .. }) => {
                        if counting {
                            k.5 += 1;
                        }
                    }
                    _ => {
                        if counting {
                            k.6 += 1;
                        }
                    }
                }
            }
            Ok(())
        },
    );
    let k = counts.into_inner();
    (
        rep.ran,
        rep.accepted,
        rep.rejected,
        rep.sound,
        rep.unsound,
        rep.vacuous,
        rep.other,
    ) = k;
    if let Err(TestError::Fail(_, mut c)) = result {
        // Proptest shrinks one component at a time and can stop at a local
        // minimum; finish greedily with `smaller` (at most 64 rounds).
        let unsound = |d: &Candidate| {
            type_candidate(sys, d).iter().any(|t| match t {
                Typing::Accepted(t) => check(t).is_ok_and(|v| v.violation().is_some()),
                Typing::Rejected(_) => false,
            })
        };
        for _ in 0..64 {
            match spmd_generators::programs::smaller(&c)
                .into_iter()
                .find(|d| unsound(d))
            {
                Some(d) => c = d,
                None => break,
            }
        }
        let typings = type_candidate(sys, &c);
        let found = typings.into_iter().find_map(|t| match t {
            Typing::Accepted(t) => {
                let rule = build_spec(&t.spec, scope).ok()?;
                let v = verdict(&rule, scope);
                let x = v.violation()?;
                Some((t, x.one_line(), x.report()))
            }
            Typing::Rejected(_) => None,
        });
        if let Some((mut t, line, full)) = found {
            t.spec.name = format!("{} random program (seed {seed})", sys.name);
            let b = blame(&t, scope);
            rep.minimal = Some(Finding {
                index: 0,
                toml: to_toml(&t.spec),
                counterexample: line,
                blame: b,
                count: 1,
            });
            rep.report = Some(full);
        }
    }
    rep
}

impl RandomReport {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "system": self.system,
            "mode": "random",
            "cases": self.cases,
            "seed": self.seed,
            "max_steps": self.max_steps,
            "ran": self.ran,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "sound": self.sound,
            "unsound": self.unsound,
            "vacuous": self.vacuous,
            "undetermined": self.other,
            "minimal": self.minimal.as_ref().map(|f| serde_json::json!({
                "rule": f.toml,
                "counterexample": f.counterexample,
                "report": self.report,
                "blame": f.blame.text,
                "blamed_step_alone": f.blame.alone,
                "blamed_step": f.blame.step,
            })),
        })
    }

    pub fn text(&self) -> String {
        let mut s = format!(
            "random programs of {} (proptest: {} cases, seed {}, 1 to {} steps, SPEC.md §17.5):\n  ran {} programs{}, typings accepted {}, rejected {}; sound {}, unsound {}, vacuous {}, undetermined {}\n",
            self.system,
            self.cases,
            self.seed,
            self.max_steps,
            self.ran,
            if self.minimal.is_some() { " (stopped at the first unsound one)" } else { "" },
            self.accepted,
            self.rejected,
            self.sound,
            self.unsound,
            self.vacuous,
            self.other
        );
        match &self.minimal {
            None => s.push_str("  no unsound program found (a bounded search, not a proof)\n"),
            Some(f) => {
                s.push_str(&format!(
                    "\nminimal unsound program (shrunk to the fewest steps, then the smallest choices; the oracle's counterexample is its smallest mesh, shape and values):\n{}\ncounterexample:\n{}\nblame: {}\n",
                    f.toml,
                    self.report.clone().unwrap_or_default(),
                    f.blame.text
                ));
                if let Some(a) = &f.blame.alone {
                    s.push_str(&format!("that step alone: {a}\n"));
                }
            }
        }
        s
    }
}
