//! The drivers of spmd-check (every command: scope runs, conform, derive,
//! programs, patterns, fidelity, partitions) and their reports, above the
//! pipeline crates; re-exported by the `spmd_check` facade.

pub mod batching;
pub mod bench;
pub mod bench_scopes;
pub mod check;
pub mod collectives;
pub mod conform;
pub mod derive;
pub mod diagnostic;
pub mod emit;
pub mod fidelity;
pub mod fsdp;
pub mod generated;
pub mod job;
pub mod jvps;
pub mod nested;
pub mod partial_kinds;
pub mod partition;
pub mod patterns;
pub mod pinned;
pub mod programs;
pub mod ragged;
pub mod registry;
pub mod report;
pub mod rules;
pub mod run;
pub mod transposes;
pub mod types;
pub mod uneven;
pub mod vmap_program;
pub mod words;

pub use spmd_dialects as dialects;
pub use spmd_generators as generators;
pub use spmd_interp as interp;
pub use spmd_oracle as oracle;
pub use spmd_semantics as semantics;

/// Check an external kernel typed as `inputs -> output` (written in
/// `dialect`'s names) like a rule (SPEC.md §20.4). Calls the kernel refused
/// (a value outside float64's exact window, or a failing kernel) leave their
/// case unchecked, so a verdict that is not a counterexample becomes
/// undetermined, naming the first refusal.
pub fn check_external(
    ext: interp::external::External,
    inputs: &[&str],
    output: &str,
    dialect: semantics::Dialect,
    cfg: &check::CheckConfig,
) -> Result<check::RuleReport, run::UsageError> {
    let mut texts = inputs.to_vec();
    texts.push(output);
    let (axes, mut types) = types::parse_types(dialect, &texts)?;
    let out = types.pop().expect("the output type");
    if types.len() != ext.arity() {
        return Err(run::UsageError(format!(
            "{}: {} input types for {} inputs",
            ext.name,
            types.len(),
            ext.arity()
        )));
    }
    // After Ctrl-C or past the time limit no kernel is called again: the
    // case in progress ends at once instead of after all its calls.
    let ext = ext.with_stop(|| run::stop_reason().is_some());
    let meshes = types::meshes_named(&cfg.scope.meshes, &axes);
    let rule = rules::Rule {
        name: ext.name.clone(),
        has_backward: ext.has_backward(),
        op: interp::TypedOp {
            op: interp::Op::External(ext.clone()),
            inputs: types,
            output: out,
            backward: interp::Backward::LocalVjp,
            jvp: None,
            no_grad: vec![],
        },
        meshes,
        mesh_written: false,
        dialect,
        pending: None,
        uneven: None,
        batching: None,
        elaboration: Vec::new(),
    };
    let mut rep = check::check_rule(&rule, cfg, &[], &|_| {});
    if let (n @ 1.., why) = ext.refused() {
        if rep.verdict.violation().is_none() {
            let mut tally = rep.verdict.tally().clone();
            let refused = format!(
                "{n} kernel calls refused, their cases unchecked; the first: {}",
                why.unwrap_or_default()
            );
            // A run that stopped (Ctrl-C, time limit) says so first.
            tally.stopped = Some(match tally.stopped.take() {
                Some(s) => format!("{s}; {refused}"),
                None => refused,
            });
            rep.verdict = oracle::Verdict::Undetermined { tally };
        }
    }
    Ok(rep)
}
