//! A regression file, as `spmd-check check FILE` reads the file beside
//! each rule file: loaded and validated, then every stored case replayed on
//! every example rule (those whose arity and mesh fit
//! it replay), then the rules checked with the cases as the command does.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spmd_drivers::check;
use std::sync::OnceLock;

/// The rule files whose rules the stored cases are replayed on: every
/// example.
const RULES: &[(&str, &str)] = &[
    (
        "examples/rules.toml",
        include_str!("../../examples/rules.toml"),
    ),
    (
        "examples/partial_kinds.toml",
        include_str!("../../examples/partial_kinds.toml"),
    ),
    (
        "examples/global.toml",
        include_str!("../../examples/global.toml"),
    ),
    (
        "examples/jvps.toml",
        include_str!("../../examples/jvps.toml"),
    ),
    (
        "examples/programs.toml",
        include_str!("../../examples/programs.toml"),
    ),
    (
        "examples/transformer.toml",
        include_str!("../../examples/transformer.toml"),
    ),
    (
        "examples/fsdp.toml",
        include_str!("../../examples/fsdp.toml"),
    ),
    (
        "examples/patterns/ddp.toml",
        include_str!("../../examples/patterns/ddp.toml"),
    ),
    (
        "examples/patterns/fsdp_tp.toml",
        include_str!("../../examples/patterns/fsdp_tp.toml"),
    ),
    (
        "examples/patterns/megatron.toml",
        include_str!("../../examples/patterns/megatron.toml"),
    ),
    (
        "examples/patterns/moe.toml",
        include_str!("../../examples/patterns/moe.toml"),
    ),
    (
        "examples/patterns/sequence_parallel.toml",
        include_str!("../../examples/patterns/sequence_parallel.toml"),
    ),
    (
        "examples/patterns/zero.toml",
        include_str!("../../examples/patterns/zero.toml"),
    ),
];

type Built = (spmd_drivers::rules::RuleSpec, spmd_drivers::rules::Rule);

/// Each example rule built in the tiny scope (those the estimate refuses
/// there are left out).
fn rules() -> &'static [Built] {
    static R: OnceLock<Vec<Built>> = OnceLock::new();
    R.get_or_init(|| {
        let mut out = Vec::new();
        for (file, text) in RULES {
            let specs = spmd_drivers::rules::parse_file(file, text).expect("the examples parse");
            for spec in specs {
                let built = spmd_drivers::rules::build(
                    file,
                    text,
                    std::slice::from_ref(&spec),
                    &spmd_fuzz::tiny_scope(),
                );
                if let Ok(mut rule) = built {
                    out.push((spec, rule.remove(0)));
                }
            }
        }
        assert!(out.len() > 20, "most examples build in the tiny scope");
        out
    })
}

fuzz_target!(|data: &[u8]| {
    spmd_fuzz::init();
    // `load_regressions` reads a path: the input is written to a file of
    // this process.
    let path =
        std::env::temp_dir().join(format!("spmd-fuzz-{}.regressions.json", std::process::id()));
    std::fs::write(&path, data).expect("a temporary file");
    let loaded = check::load_regressions(&path.display().to_string());
    let Ok(regs) = loaded else {
        return;
    };
    let rules = rules();
    for cases in regs.values() {
        for s in cases {
            for (_, rule) in rules {
                let t = std::time::Instant::now();
                let found = check::replay(rule, s).is_some();
                spmd_fuzz::show(|| {
                    format!(
                        "replay on \"{}\": {} ({:.2} s)",
                        rule.name,
                        if found {
                            "fails"
                        } else {
                            "passes or does not fit"
                        },
                        t.elapsed().as_secs_f64()
                    )
                });
            }
        }
    }
    // As `check` does: each rule with its stored cases; a rule whose
    // stored case still fails stops at the replay.
    for (name, cases) in &regs {
        if let Some((spec, rule)) = rules.iter().find(|(_, r)| &r.name == name) {
            spmd_fuzz::check_and_report(spec, rule, cases);
        }
    }
});
