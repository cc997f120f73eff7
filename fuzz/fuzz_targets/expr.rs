//! An expression, as `spmd-check derive --expr TEXT` reads it: parsed, then
//! its table of typings derived in a tiny scope, local and global, and
//! printed (a transcendental one: one typing checked, the exact path
//! being slow under instrumentation); also as a rule's `op = { expr = ... }` with declared `vars`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spmd_drivers::{derive, report};

fuzz_target!(|data: &[u8]| {
    spmd_fuzz::init();
    // A command-line argument is UTF-8 (clap refuses the rest).
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = spmd_interp::parse_with_vars(text, &["x".into(), "y".into(), "g".into()]);
    let Ok(f) = spmd_interp::parse(text) else {
        return;
    };
    let _ = report::excerpt(&f.text);
    if spmd_interp::transcendental::is_transcendental(&f.expr) {
        // The exact path costs tens of milliseconds an instance here: one
        // typing (every input and the output Varying) on 1 and 2 ranks.
        let v = spmd_semantics::Type::new(vec![spmd_semantics::State::Varying]);
        let op = spmd_interp::TypedOp::local(f.clone(), vec![v.clone(); f.arity()], v);
        let cfg = spmd_fuzz::transcendental_config();
        let meshes = &cfg.scope.meshes[..2];
        if spmd_drivers::run::degree_guard(&op, &cfg.scope).is_ok()
            && spmd_drivers::run::guard(spmd_drivers::run::estimate(&op, &cfg.scope), &cfg.scope)
                .is_ok()
        {
            let v = spmd_drivers::run::check_op(&op, &cfg.scope, meshes, &|_| {});
            let w = report::verdict_word(&v);
            spmd_fuzz::show(|| format!("V -> V: {w}"));
            let _ = report::verdict_json(&v);
        }
        return;
    }
    // A derived table is 4^(inputs + 1) typings: more instances than a
    // rule, so tensors of rank 0 and 1 only.
    let scope = spmd_generators::Scope {
        max_rank: 1,
        max_instances: 10_000,
        ..spmd_fuzz::tiny_scope()
    };
    match derive::derive(&f, &scope, &|_| {}) {
        Ok(rows) => {
            let t = report::derive_text(&rows);
            spmd_fuzz::show(|| t.clone());
            let _ = report::derive_json(&rows);
        }
        Err(e) => spmd_fuzz::show(|| format!("derive: {e}")),
    }
    if let Ok(rows) = derive::derive_global(&f, &scope, &|_| {}) {
        let _ = (report::derive_text(&rows), report::derive_json(&rows));
    }
});
