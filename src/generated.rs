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

/// How a system's inserted cast is spelled as a step: forward and backward.
/// JAX's are rows of its table (pvary by psum_invariant, reduced_vary_cast by
/// vary_unreduced_cast). LTensor's `mark_varying`, whose body seed 001
/// elides, is read as pvary with pvary's transpose; Nabla's forced
/// `all_reduce` of a partial input is `all_reduce(I)` with seed 003's
/// transpose of it, `reinterpret(I,R)`.
pub fn cast_spelling(system: &str, name: &str, from: State, to: State) -> Option<(String, String)> {
    if let Some((r, _, _)) = slot_rows(system)
        .into_iter()
        .find(|(r, s, d)| r.forward == name && *s == from && *d == to)
    {
        return Some((fill(r.forward), fill(r.backward.expect("has a backward"))));
    }
    // DTensor's moves and its grad-placement hook, as seed 003's calls with
    // seed 003's transposes (dialects/src/dtensor.rs says which).
    if system == "dtensor" {
        let fwd = spmd_dialects::dtensor::cast_as_catalogue(name, from, to)?;
        let (r, _, _) = slot_rows("spmd_types")
            .into_iter()
            .find(|(r, _, _)| r.forward == fwd)?;
        return Some((fill(r.forward), fill(r.backward.expect("has a backward"))));
    }
    match (name, from, to) {
        ("mark_varying", State::Invariant, State::Varying) => {
            Some(("pvary".into(), "psum_invariant".into()))
        }
        ("all_reduce", State::Partial, State::Invariant) => {
            Some(("all_reduce(I)".into(), "reinterpret(I,R)".into()))
        }
        _ => None,
    }
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
                Outcome::Error(e) => {
                    out.push(Typing::Rejected(format!(
                        "step {}: {} on ({}): error: {e}",
                        j + 1,
                        op.name(),
                        letters(&ins)
                    )));
                    return;
                }
                Outcome::Unknown(r) => {
                    out.push(Typing::Rejected(format!(
                        "step {}: {} on ({}): unknown: {r}",
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
                    let Some((fw, bw)) = cast_spelling(sys.name, cast.name, cast.from, cast.to)
                    else {
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

/// A checked program.
#[derive(Clone, Debug)]
pub struct Checked {
    pub index: usize,
    pub typed: Typed,
    /// `Err`: the rule could not be built in scope (the reason).
    pub verdict: Result<Verdict, String>,
}

/// An unsound program's blame: the first step unsound alone, or `None`
/// (composition).
#[derive(Clone, Debug)]
pub struct Blame {
    pub step: Option<(usize, Origin)>,
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
    /// Classes of checked programs equal up to renaming (§17.3): how many
    /// times the oracle ran.
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

/// Type every skeleton of `depth` with `sys`, check every accepted program
/// in `scope` (no random cases), and blame each unsound one.
pub fn run(sys: &System, depth: usize, scope: &Scope) -> Report {
    let items = generate(sys, depth);
    let accepted: Vec<(usize, Typed)> = items
        .iter()
        .filter_map(|i| match &i.typing {
            Typing::Accepted(t) => Some((i.index, (**t).clone())),
            Typing::Rejected(_) => None,
        })
        .collect();
    let mut reasons = BTreeMap::new();
    let mut unknown = 0;
    for i in &items {
        if let Typing::Rejected(r) = &i.typing {
            // Grouped by the system's words, without the step and states.
            let key = r
                .split_once("): ")
                .or_else(|| r.split_once(": "))
                .map_or(r.as_str(), |x| x.1)
                .to_string();
            if key.starts_with("unknown: ") {
                unknown += 1;
            }
            *reasons.entry(key).or_insert(0) += 1;
        }
    }
    // Programs equal up to renaming the two inputs and the order of a sum's
    // or product's arguments have the same verdict (SPEC.md §17.3): the
    // oracle checks the first of each class once.
    let keys: Vec<String> = accepted
        .par_iter()
        .map(|(_, t)| canonical_key(&t.spec))
        .collect();
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, key) in keys.iter().enumerate() {
        first.entry(key.as_str()).or_insert(k);
    }
    let reps: Vec<usize> = first.values().copied().collect();
    let rep_verdicts: BTreeMap<usize, Result<Verdict, String>> = reps
        .par_iter()
        .map(|&k| {
            let t = &accepted[k].1;
            (k, build_spec(&t.spec, scope).map(|r| verdict(&r, scope)))
        })
        .collect();
    let distinct = reps.len();
    let checked: Vec<Checked> = accepted
        .iter()
        .zip(&keys)
        .map(|((index, t), key)| Checked {
            index: *index,
            typed: t.clone(),
            verdict: rep_verdicts[&first[key.as_str()]].clone(),
        })
        .collect();
    let mut rep = Report {
        system: sys.name,
        depth,
        generated: items.len(),
        accepted: accepted.len(),
        rejected: items.len() - accepted.len(),
        unknown,
        checked: 0,
        distinct,
        sound: 0,
        unsound: 0,
        vacuous: 0,
        other: 0,
        not_checked: vec![],
        findings: vec![],
        reasons,
        covered: BTreeSet::new(),
        uncovered: vec![],
    };
    let mut unsound: Vec<&Checked> = vec![];
    for c in &checked {
        match &c.verdict {
            Err(e) => rep.not_checked.push((c.index, e.clone())),
            Ok(v) => {
                rep.checked += 1;
                for o in &c.typed.origins {
                    match o {
                        Origin::Row(id) => {
                            rep.covered.insert((*id).to_string());
                        }
                        Origin::Cast { name, .. } => {
                            rep.covered.insert(format!("inserted {name}"));
                        }
                        Origin::Typing { .. } => {}
                    }
                }
                if v.is_sound() {
                    rep.sound += 1;
                } else if v.violation().is_some() {
                    rep.unsound += 1;
                    unsound.push(c);
                } else if matches!(v, Verdict::Vacuous { .. }) {
                    rep.vacuous += 1;
                } else {
                    rep.other += 1;
                }
            }
        }
    }
    rep.uncovered = slot_rows(sys.name)
        .iter()
        .map(|(r, _, _)| r.id.to_string())
        .filter(|id| !rep.covered.contains(id))
        .collect();
    // Blame: each distinct step checked alone once.
    let cache = std::sync::Mutex::new(std::collections::HashMap::new());
    let blames: Vec<Blame> = unsound
        .par_iter()
        .map(|c| blame_cached(&c.typed, scope, &cache))
        .collect();
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for (c, b) in unsound.iter().zip(blames) {
        // One finding per blamed origin (typing rule, cast or row).
        let key = match &b.step {
            Some((_, o)) => o.describe(),
            None => b.text.clone(),
        };
        if let Some(&k) = by_key.get(&key) {
            rep.findings[k].count += 1;
            continue;
        }
        by_key.insert(key, rep.findings.len());
        // The verdict may be its class's; the counterexample printed is
        // this program's own.
        let own = build_spec(&c.typed.spec, scope).map(|r| verdict(&r, scope));
        let v = match &own {
            Ok(v) if v.violation().is_some() => v,
            _ => c.verdict.as_ref().expect("checked"),
        };
        rep.findings.push(Finding {
            index: c.index,
            toml: to_toml(&c.typed.spec),
            counterexample: v.violation().map(|x| x.one_line()).unwrap_or_default(),
            blame: b,
            count: 1,
        });
    }
    rep.findings.sort_by_key(|f| f.index);
    rep
}

/// A key equal for programs that differ only by swapping the names of the
/// two inputs (with their types) and the order of the arguments of `+` and
/// `*`: the least rule text over both namings, with every sum and product's
/// arguments sorted. The oracle's verdict does not depend on either.
pub fn canonical_key(spec: &RuleSpec) -> String {
    let mut variants = vec![spec.clone()];
    if let [a, b] = spec.names.as_slice() {
        let mut w = spec.clone();
        w.inputs.swap(0, 1);
        let swap = |n: &str| {
            if n == a {
                b.clone()
            } else if n == b {
                a.clone()
            } else {
                n.to_string()
            }
        };
        for st in &mut w.step {
            if let Some(e) = &mut st.expr {
                *e = swap_names(e, a, b);
            }
            if let Some(i) = &mut st.input {
                *i = swap(i);
            }
        }
        variants.push(w);
    }
    variants
        .into_iter()
        .map(|mut v| {
            v.name.clear();
            for st in &mut v.step {
                if let Some(e) = &mut st.expr {
                    for op in [" + ", " * "] {
                        if let Some((l, r)) = e.split_once(op) {
                            if !l.contains(' ') && !r.contains(' ') && r < l {
                                *e = format!("{r}{op}{l}");
                            }
                        }
                    }
                }
            }
            to_toml(&v)
        })
        .min()
        .expect("one naming")
}

/// An expression with the identifiers `a` and `b` swapped.
fn swap_names(e: &str, a: &str, b: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |w: &mut String, out: &mut String| {
        out.push_str(if w == a {
            b
        } else if w == b {
            a
        } else {
            w
        });
        w.clear();
    };
    for ch in e.chars() {
        if ch.is_ascii_alphanumeric() || ch == '_' {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
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
                step: Some((k, o)),
            };
        }
    }
    Blame {
        step: None,
        text: "composition: every step is sound alone".into(),
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
                "blamed_step": f.blame.step.as_ref().map(|(k, _)| k),
                "programs": f.count,
            })).collect::<Vec<_>>(),
            "rejections": self.reasons,
            "covered": self.covered,
            "uncovered": self.uncovered,
        })
    }

    pub fn text(&self) -> String {
        let mut s = format!(
            "generated programs of {} (depth {}, SPEC.md §17):\n  generated {}, accepted {}, rejected {} ({} unknown), checked {} ({} distinct up to renaming), sound {}, unsound {}, vacuous {}, undetermined {}\n",
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
                "blamed_step": f.blame.step.as_ref().map(|(k, _)| k),
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
