//! Helpers of the registry tests (tests/registry*.rs): the committed
//! recordings, one entry of them, a check with the missing-rule search,
//! and the classes of a placement's rows.

use spmd_check::registry::{self, Class, Entry, File, Options, Report};

/// The committed recording of `system`.
pub fn recorded(system: &str) -> File {
    registry::read(&registry::default_file(system)).expect("the committed recording reads")
}

/// The recording of `system` with only the entry of `op` and `args`.
pub fn only(system: &str, op: &str, args: &str) -> File {
    let mut f = recorded(system);
    f.entries.retain(|e| e.op == op && e.args == args);
    assert_eq!(f.entries.len(), 1, "{op}({args}) is recorded once");
    f
}

/// Every claim of `f` (the ops `glob` matches) checked, with the search
/// for missing ones.
pub fn check_glob(f: File, glob: Option<&str>) -> Report {
    let opts = Options {
        op_glob: glob.map(str::to_string),
        missing: true,
        record: false,
    };
    registry::run(f, "test", &opts).expect("runs")
}

pub fn check(f: File) -> Report {
    check_glob(f, None)
}

/// `check` of the committed recording of `system`, untampered, run once
/// per test binary and shared by the tests that read it (a whole
/// registry takes seconds).
#[allow(dead_code)]
pub fn checked(system: &'static str) -> &'static Report {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static DONE: OnceLock<Mutex<HashMap<&'static str, &'static Report>>> = OnceLock::new();
    let mut done = DONE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    done.entry(system)
        .or_insert_with(|| Box::leak(Box::new(check(recorded(system)))))
}

/// The classes of the rows with these placements (`S(0) -> P(sum)`).
pub fn class_of(rep: &Report, placements: &str) -> Vec<Class> {
    rep.rows
        .iter()
        .filter(|r| r.placements() == placements)
        .map(|r| r.class)
        .collect()
}

/// The first entry, to tamper with.
pub fn entry(f: &mut File) -> &mut Entry {
    &mut f.entries[0]
}

/// The report's rows per class: (correct, incorrect, latent, missing,
/// undetermined).
pub fn totals(rep: &Report) -> (usize, usize, usize, usize, usize) {
    let t = registry::totals(&rep.rows);
    let n = |c| *t.get(&c).unwrap_or(&0);
    (
        n(Class::Correct),
        n(Class::Incorrect),
        n(Class::Latent),
        n(Class::Missing),
        n(Class::Undetermined),
    )
}

/// A section of rows checked on recorded instances (backward, 2x2): its
/// size, then (correct, incorrect, undetermined).
pub fn instance_totals(rows: &[spmd_check::registry::Row]) -> (usize, usize, usize, usize) {
    let t = registry::totals(rows);
    let n = |c| *t.get(&c).unwrap_or(&0);
    (
        rows.len(),
        n(Class::Correct),
        n(Class::Incorrect),
        n(Class::Undetermined),
    )
}

/// A recorded tensor's text with every value doubled: what a backward
/// that forgot a division would give, or a tampered output.
pub fn doubled(text: &str) -> String {
    let v = registry::parse_tensor(text).expect("a tensor");
    registry::tensor_text(&v.scale(&spmd_check::semantics::Q::from(2)))
}

/// Apply `how` to every recorded gradient of `f`'s backward instances of
/// `claim` (every claim if `None`), as a wrong backward would differ.
pub fn tamper_gradients(
    f: &mut File,
    claim: Option<&[&str]>,
    how: impl Fn(&mut spmd_check::registry::GradRecord),
) {
    for e in &mut f.entries {
        for c in e
            .backward
            .iter_mut()
            .filter(|c| claim.is_none_or(|want| c.claim == want))
        {
            for g in c.grads.iter_mut().flatten().flatten() {
                how(g);
            }
        }
    }
}

/// Every gradient value doubled (B3 must fail).
pub fn double_gradients(f: &mut File) {
    tamper_gradients(f, None, |g| {
        for t in g.per_rank.iter_mut().flatten() {
            *t = doubled(t);
        }
    });
}

/// The twin of a backward check: with every gradient of `f` doubled, every
/// backward row is incorrect, by B3.
pub fn assert_doubled_gradients_fail_b3(mut f: File) {
    double_gradients(&mut f);
    let rep = check(f);
    assert!(!rep.backward.is_empty());
    assert!(rep
        .backward
        .iter()
        .all(|r| r.class == Class::Incorrect && r.detail.starts_with("B3")));
}
