//! Bad input never panics (the standards; SPEC.md §6.1, §11.1): random rule
//! files assembled from the fields and values a rule designer might write,
//! and random expression and type text, are either accepted or rejected with
//! an error, and building and checking an accepted rule does not panic.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use spmd_check::generators::Scope;
use spmd_check::interp::parse;
use spmd_check::semantics::Dialect;
use spmd_check::types::parse_types;

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(pool)
}

const OPS: &[&str] = &[
    "op = \"mul\"",
    "op = \"add\"",
    "op = \"matmul\"",
    "op = \"nope\"",
    "op = { expr = \"x * y\" }",
    "op = { expr = \"sum(x, 1)\" }",
    "op = { expr = \"x / \" }",
    "forward = \"all_gather(R, dim=0)\"\nbackward = \"reduce_scatter(dim=0)\"",
    "forward = \"all_reduce\"",
    "forward = \"pvary\"\nbackward = \"psum\"",
    "forward = \"all_gather(dim=9)\"",
    "forward = \"reinterpret(V,P)\"\nbackward = \"local\"",
    "op = \"mul\"\nforward = \"all_reduce\"",
];
const INPUTS: &[&str] = &[
    "[\"P\", \"P\"]",
    "[\"V\", \"R\"]",
    "[\"V\"]",
    "[\"P\"]",
    "[\"S(0)\", \"S(1)\"]",
    "[\"S(0)\"]",
    "[\"S(7)\", \"S(7)\"]",
    "[\"P('x', None)\", \"P(None, 'x')\"]",
    "[\"P('x', 'x')\"]",
    "[{ dp = \"S(0)\", tp = \"R\" }, { dp = \"V\", tp = \"R\" }]",
    "[\"Replicate()\", \"Shard(0)\"]",
    "[]",
    "[\"Q\"]",
];
const OUTPUTS: &[&str] = &[
    "\"P\"",
    "\"V\"",
    "\"R\"",
    "\"I\"",
    "\"S(0)\"",
    "\"S(1)\"",
    "\"P(None, None, unreduced={'x'})\"",
    "{ dp = \"S(0)\", tp = \"R\" }",
    "\"Shard(0)\"",
];
const EXTRAS: &[&str] = &[
    "",
    "",
    "jvp = \"dx * y + x * dy\"",
    "jvp = \"dq\"",
    "jvp = \"all_reduce\"",
    "dialect = \"jax\"",
    "dialect = \"dtensor\"",
    "dialect = \"klingon\"",
    "mesh = { x = 2 }",
    "mesh = { x = 0 }",
    "mesh = { dp = 2, tp = 2 }",
    "bogus = 3",
    "names = [\"x\", \"w\"]\n\n[[rule.step]]\nname = \"s\"\nexpr = \"x * w\"\noutput = \"V\"",
    "names = [\"x\"]\n\n[[rule.step]]\nname = \"s\"\nforward = \"all_reduce\"\ninput = \"x\"\noutput = \"R\"",
];

/// Rules that build, as a base for single-field changes.
const GOOD: &[&str] = &[
    "op = \"mul\"\ninputs = [\"P\", \"R\"]\noutput = \"P\"",
    "op = \"matmul\"\ninputs = [\"S(1)\", \"S(0)\"]\noutput = \"P\"",
    "op = { expr = \"sum(x, 0)\" }\ninputs = [\"V\"]\noutput = \"V\"",
    "forward = \"all_gather(R, dim=0)\"\nbackward = \"reduce_scatter(dim=0)\"\ninputs = [\"V\"]\noutput = \"R\"",
    "forward = \"all_reduce\"\ninputs = [\"P\"]\noutput = \"R\"",
    "dialect = \"jax\"\nop = \"matmul\"\ninputs = [\"P(None, 'x')\", \"P('x', None)\"]\noutput = \"P(None, None, unreduced={'x'})\"",
    "op = \"add\"\ninputs = [{ dp = \"S(0)\", tp = \"R\" }, { dp = \"S(0)\", tp = \"R\" }]\noutput = { dp = \"S(0)\", tp = \"R\" }",
];

/// A rule with a name, an op, inputs and output drawn from good and bad
/// values, or a rule that builds; either with maybe one more field.
fn rule_file() -> impl Strategy<Value = String> {
    let mixed = (pick(OPS), pick(INPUTS), pick(OUTPUTS))
        .prop_map(|(op, i, o)| format!("{op}\ninputs = {i}\noutput = {o}"));
    let good = pick(GOOD).prop_map(String::from);
    (prop_oneof![mixed, good], pick(EXTRAS))
        .prop_map(|(body, x)| format!("[[rule]]\nname = \"r\"\n{body}\n{x}\n"))
}

#[test]
fn some_generated_rule_files_build() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let scope = Scope::default();
    let mut built = 0;
    for _ in 0..200 {
        let text = rule_file().new_tree(&mut runner).unwrap().current();
        if let Ok(specs) = spmd_check::rules::parse_file("fuzz.toml", &text) {
            built += spmd_check::rules::build("fuzz.toml", &text, &specs, &scope).is_ok() as usize;
        }
    }
    assert!(
        built >= 20,
        "only {built} of 200 generated rule files build"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn rule_files_never_panic(text in rule_file()) {
        // Meshes of at most 2 ranks per axis, as `--scope small`.
        let mut scope = Scope::default();
        scope.meshes.retain(|m| m.axes.iter().all(|a| a.size <= 2));
        if let Ok(specs) = spmd_check::rules::parse_file("fuzz.toml", &text) {
            if let Ok(rules) = spmd_check::rules::build("fuzz.toml", &text, &specs, &scope) {
                let cfg = spmd_check::check::CheckConfig { scope: scope.clone(), cases: 4, seed: 1 };
                for r in &rules {
                    let _ = spmd_check::check::check_rule(r, &cfg, &[], &|_| {});
                }
            }
        }
    }

    #[test]
    fn expressions_never_panic(src in "[xy0-9 +*/()\\-^,a-z\\[\\]\"]{0,24}") {
        let _ = parse(&src);
    }

    #[test]
    fn types_never_panic(src in "[PSVIR(){}:,='x0-9 a-zA-Z\\[\\]]{0,24}") {
        for d in [Dialect::SpmdTypes, Dialect::Jax, Dialect::Dtensor] {
            let _ = parse_types(d, &[src.as_str()]);
        }
    }
}
