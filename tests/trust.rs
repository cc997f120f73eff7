//! Verdicts that say exactly what was checked, and input that can never
//! crash or hang the tool (SPEC.md §1.2, §6.1, §7.1, §11.1-11.2).

mod common;
use common::run;
use std::io::Write;

/// A rule file in a temporary directory of its own (regressions land beside it).
fn rules(name: &str, text: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-trust-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("rules.toml");
    let _ = std::fs::remove_file(dir.join("rules.toml.regressions.json"));
    std::fs::File::create(&p)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    p.to_string_lossy().into_owned()
}

/// Gathering one of two axes that shard dim 0: the minor axis keeps the
/// global tensor, the major one permutes it. Which is which comes from the
/// mesh as written, whatever order a type names the axes in.
fn gather_rules(mesh: &str) -> String {
    let mut s = String::new();
    for (name, input, output) in [
        (
            "table",
            r#"{ z = "S(0)", a = "S(0)" }"#,
            r#"{ z = "S(0)", a = "R" }"#,
        ),
        ("string", r#""{a: S(0), z: S(0)}""#, r#""{z: S(0), a: R}""#),
        ("pspec", r#""P(('z', 'a'))""#, r#""P('z', reduced={'a'})""#),
    ] {
        s.push_str(&format!(
            "[[rule]]\nname = \"{name}\"\nmesh = {mesh}\nforward = \"all_gather(dim=0)\"\nbackward = \"reduce_scatter(dim=0)\"\ninputs = [{input}]\noutput = {output}\n\n"
        ));
    }
    s
}

#[test]
fn axis_order_is_the_mesh_order_whatever_the_spelling() {
    let f = rules("axes", &gather_rules("{ z = 2, a = 2 }"));
    let (code, out, err) = run(&["check", &f, "--cases", "0", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for r in v["rules"].as_array().unwrap() {
        assert_eq!(r["verdict"], "sound", "{r}");
    }
    // Twin: with `a` major the same gather moves the wrong blocks (F3). The
    // partition spec is then against the mesh order: bad input.
    let twin = gather_rules("{ a = 2, z = 2 }");
    let twin: String = twin.split("\n\n").take(2).collect::<Vec<_>>().join("\n\n");
    let f = rules("axes-twin", &twin);
    let (code, out, err) = run(&["check", &f, "--cases", "0", "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for r in v["rules"].as_array().unwrap() {
        assert_eq!(r["property"], "F3", "{r}");
    }
    let f = rules("axes-pspec", &gather_rules("{ a = 2, z = 2 }"));
    let (code, _, err) = run(&["check", &f]);
    assert_eq!(code, 2);
    assert!(err.contains("mesh order"), "{err}");
}

#[test]
fn inputs_bind_in_order_of_first_appearance() {
    // y / x with y Partial and x Reduced: a pending sum divided by a
    // replicated value is sound. Alphabetical binding would divide by the
    // Partial value instead.
    let sound = "[[rule]]\nname = \"d\"\nop = { expr = \"y / x\" }\ninputs = [\"P\", \"R\"]\noutput = \"P\"\n";
    let (code, out, _) = run(&["check", &rules("order", sound), "--cases", "0"]);
    assert_eq!(code, 0, "{out}");
    // Twin: the Partial value in the denominator.
    let twin = sound.replace("[\"P\", \"R\"]", "[\"R\", \"P\"]");
    let (code, out, _) = run(&["check", &rules("order-twin", &twin), "--cases", "0"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unsound F2"), "{out}");
    // The report names the user's variables.
    assert!(out.contains("x and x' are equivalent"), "{out}");
    // An explicit order overrides it: x is now the Partial input.
    let listed = sound.replace("op = {", "vars = [\"x\", \"y\"]\nop = {");
    let (code, out, _) = run(&["check", &rules("order-vars", &listed), "--cases", "0"]);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn a_rule_without_a_backward_says_so() {
    let r = "[[rule]]\nname = \"g\"\nforward = \"all_gather(dim=0)\"\ninputs = [\"V\"]\noutput = \"R\"\n";
    let f = rules("nobwd", r);
    let (code, out, _) = run(&["check", &f, "--cases", "8"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("forward sound (proof); backward not checked (none declared)"),
        "{out}"
    );
    let (_, out, _) = run(&["check", &f, "--cases", "8", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rules"][0]["backward_checked"], false);
    // With a backward the same words would overstate nothing: it is checked.
    let with = r.replace("output", "backward = \"reduce_scatter(dim=0)\"\noutput");
    let (_, out, _) = run(&["check", &rules("bwd", &with), "--cases", "8", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rules"][0]["backward_checked"], true);
    assert_eq!(
        v["rules"][0]["summary"],
        "sound (proof), and 8 random cases beyond it"
    );
}

/// A long rule for the stop tests: a rational op takes every value in
/// every combination (SPEC.md §8.3), 6^8 points for a 2-element V input on
/// 4 ranks, so unstopped it runs for minutes. (A collective no longer
/// does: its lower-set grids are tiny.)
const LONG: &str = "[[rule]]\nname = \"rational on 4\"\nmesh = { x = 4 }\nop = { expr = \"x / (x * x + 1)\" }\ninputs = [\"V\"]\noutput = \"V\"\n";

const SCATTER4: &str = "[[rule]]\nname = \"scatter on 4\"\nmesh = { x = 4 }\nforward = \"reduce_scatter(dim=0)\"\nbackward = \"all_gather(dim=0)\"\ninputs = [\"P\"]\noutput = \"V\"\n";

#[test]
fn vacuous_is_not_success_and_random_cases_are_counted() {
    let f = rules("vacuous", SCATTER4);
    // No dim of 4 in the default scope: nothing is checked at all.
    let (code, out, _) = run(&["check", &f, "--cases", "0"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("vacuous (no shape in scope fits; try --mesh-dims"),
        "{out}"
    );
    let (code, _, _) = run(&["check", &f, "--cases", "0", "--allow-vacuous"]);
    assert_eq!(code, 0);
    // Random cases decide it on four ranks; the verdict says how.
    let (code, out, _) = run(&["check", &f, "--cases", "20"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("sound (bounded: 0 exhaustive, 20 random)"),
        "{out}"
    );
    // Twin: the wrong backward is caught by the random part alone.
    // (keeping the local tensors is no transpose of a reduce-scatter).
    let twin = SCATTER4.replace(
        "backward = \"all_gather(dim=0)\"",
        "backward = \"reinterpret\"",
    );
    let (code, out, _) = run(&["check", &rules("vacuous-twin", &twin), "--cases", "20"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unsound B1"), "{out}");
}

#[test]
fn a_time_limit_stops_a_long_rule_as_undetermined() {
    let f = rules("timelimit", LONG);
    let t = std::time::Instant::now();
    let (code, out, _) = run(&[
        "check",
        &f,
        "--mesh-dims",
        "--max-free",
        "16",
        "--max-points",
        "10000000",
        "--time-limit",
        "1",
    ]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("undetermined (time limit reached)"), "{out}");
    // A hang guard, not a speed claim: unstopped, the run takes minutes.
    assert!(t.elapsed().as_secs() < 25);
}

#[test]
fn ctrl_c_stops_within_a_second_and_exits_130() {
    let f = rules("sigint", LONG);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_spmd-check"))
        .args([
            "check",
            &f,
            "--mesh-dims",
            "--max-free",
            "16",
            "--max-points",
            "10000000",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let t = std::time::Instant::now();
    // SAFETY: sending SIGINT to our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    // A hang guard, not a speed claim (the latency is measured, not
    // asserted): unstopped, the run takes minutes.
    assert!(t.elapsed().as_secs() < 15, "{:?}", t.elapsed());
    assert_eq!(out.status.code(), Some(130));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("undetermined (interrupted)"), "{text}");
}

#[test]
fn bad_rule_files_are_one_line_errors() {
    let one = "[[rule]]\nname = \"a\"\nop = \"neg\"\ninputs = [\"V\"]\noutput = \"V\"\n";
    let dup = format!("{one}\n{one}");
    for (name, text, want) in [
        ("dup", dup.as_str(), "used twice"),
        ("empty", "", "defines no rule"),
        ("empty2", "rule = []\n", "defines no rule"),
        (
            "number",
            r#"{"rule": [{"name": "a", "op": "neg", "inputs": [1.5], "output": "V"}]}"#,
            "`1.5` is a number",
        ),
    ] {
        let (code, _, err) = run(&["check", &rules(name, text)]);
        assert_eq!(code, 2, "{name}");
        assert_eq!(common::error_lines(&err), 1, "{err}");
        assert!(err.contains(want), "{name}: {err}");
    }
    let (code, _, err) = run(&["check", "/dev/zero"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn huge_or_deep_expressions_are_errors_not_crashes() {
    let deep = format!("{}x{}", "(".repeat(6000), ")".repeat(6000));
    let flat = vec!["x"; 10_000].join("+");
    let negs = format!("{}x", "-".repeat(10_000));
    let digits = format!("x * {}", "7".repeat(100_000));
    for e in [&deep, &flat, &negs, &digits] {
        let (code, _, err) = run(&["derive", "--expr", e]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(common::error_lines(&err), 1);
    }
    // Seven inputs: refused at once instead of exhausting memory.
    let t = std::time::Instant::now();
    let seven = "a + b + c + d + e + f + g";
    let (code, _, err) = run(&["derive", "--expr", seven]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("typings"), "{err}");
    let r = format!(
        "[[rule]]\nname = \"seven\"\nop = {{ expr = \"{seven}\" }}\ninputs = [\"V\", \"V\", \"V\", \"V\", \"V\", \"V\", \"V\"]\noutput = \"V\"\n"
    );
    // As a rule it is checked: the pruned search keeps 1,525 of the 13^7
    // shape tuples (SPEC.md §18.9).
    let (code, _, err) = run(&["check", &rules("seven", &r), "--cases", "8"]);
    assert_eq!(code, 0, "{err}");
    // Seven matrices contracted to a scalar keep 9^7 of them: refused at
    // once, by the search's own limit.
    let wide = "einsum(\\\"ij,kl,mn,op,qr,st,uv->\\\", a, b, c, d, e, f, g)";
    let r = format!(
        "[[rule]]\nname = \"wide\"\nop = {{ expr = \"{wide}\" }}\ninputs = [\"V\", \"V\", \"V\", \"V\", \"V\", \"V\", \"V\"]\noutput = \"V\"\n"
    );
    let (code, _, err) = run(&["check", &rules("wide", &r)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("shape tuples"), "{err}");
    // Four inputs in derive: 1024 typings x 181 shape tuples, refused by
    // the instance estimate, which stops as soon as it passes the limit
    // (the full estimate took 48 s). A product: a sum of four now fits,
    // its joint budget keeping each case small (SPEC.md §8.3).
    let (code, _, err) = run(&["derive", "--expr", "a * b * c * d"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("instances"), "{err}");
    // A hang guard: building the tuples used to exhaust memory.
    assert!(t.elapsed().as_secs() < 30);
}

#[test]
fn literals_and_leading_minus_are_read_as_written() {
    for e in [
        "--expr=-x",
        "--expr=0.5 * x",
        "--expr=2 * 3",
        "--expr=1e-3 * x",
    ] {
        let (code, _, err) = run(&["derive", e]);
        assert_eq!(code, 0, "{e}: {err}");
    }
    let (_, a, _) = run(&["derive", "--expr", "-x", "--json"]);
    let (_, b, _) = run(&["derive", "--expr=-x", "--json"]);
    assert_eq!(a, b);
    // 0.5 * x and x / 2 are the same function: the same table.
    let (_, a, _) = run(&["derive", "--expr", "0.5 * x", "--json"]);
    let (_, b, _) = run(&["derive", "--expr", "x / 2", "--json"]);
    let verdicts = |s: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(s).unwrap();
        v["typings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["verdict"].to_string())
            .collect()
    };
    assert_eq!(verdicts(&a), verdicts(&b));
}

/// SPEC.md §12.3, §13.2: a rule and the same op as a one-step program get
/// the same verdict, global types included. Computed over the global
/// examples and the transpose pair below (sound and unsound).
#[test]
fn a_one_step_program_gets_the_verdict_of_its_rule() {
    use spmd_check::check::{check_rule, CheckConfig};
    use spmd_check::rules::{build, parse_file, OpSpec, RuleSpec, StepSpec};
    let extra = r#"
[[rule]]
name = "transpose S(0) -> S(1)"
op = "transpose"
inputs = ["S(0)"]
output = "S(1)"

[[rule]]
name = "transpose S(0) -> S(0)"
op = "transpose"
inputs = ["S(0)"]
output = "S(0)"
"#;
    let global = std::fs::read_to_string("examples/global.toml").unwrap();
    let text = format!("{global}\n{extra}");
    let specs = parse_file("<global>", &text).unwrap();
    let scope = spmd_check::generators::Scope::default();
    let cfg = CheckConfig {
        scope: scope.clone(),
        cases: 0,
        seed: 0,
    };
    let (mut compared, mut unsound) = (0, 0);
    for s in &specs {
        if !s.step.is_empty() || s.jvp.is_some() {
            continue;
        }
        let (names, step) = match (&s.op, &s.forward) {
            (Some(op), None) => {
                let f = match op {
                    OpSpec::Name(n) => spmd_check::interp::builtin(n).unwrap(),
                    OpSpec::Expr { expr } => spmd_check::interp::parse(expr).unwrap(),
                };
                let body = f.text.split(" = ").last().unwrap().to_string();
                let step = StepSpec {
                    name: "out".into(),
                    expr: Some(body),
                    forward: None,
                    input: None,
                    backward: None,
                    output: s.output.clone(),
                };
                (f.vars.clone(), step)
            }
            (None, Some(fw)) => (
                vec!["x".into()],
                StepSpec {
                    name: "out".into(),
                    expr: None,
                    forward: Some(fw.clone()),
                    input: Some("x".into()),
                    backward: match &s.backward {
                        Some(spmd_check::rules::BackwardSpec::One(b)) => Some(b.clone()),
                        _ => None,
                    },
                    output: s.output.clone(),
                },
            ),
            _ => continue,
        };
        let program = RuleSpec {
            name: format!("{} (program)", s.name),
            op: None,
            forward: None,
            backward: None,
            names,
            step: vec![step],
            ..s.clone()
        };
        let rules = build("<t>", &text, &[s.clone(), program], &scope).unwrap();
        let a = check_rule(&rules[0], &cfg, &[], &|_| {});
        let b = check_rule(&rules[1], &cfg, &[], &|_| {});
        assert_eq!(a.verdict.name(), b.verdict.name(), "{}", s.name);
        assert_eq!(
            a.verdict.violation().map(|v| v.property),
            b.verdict.violation().map(|v| v.property),
            "{}",
            s.name
        );
        compared += 1;
        unsound += usize::from(a.verdict.violation().is_some());
    }
    // Both kinds were compared: the test can fail either way.
    assert!(
        compared >= 8 && unsound >= 2,
        "{compared} compared, {unsound} unsound"
    );
}

fn verdict_of(name: &str, text: &str) -> (i32, String) {
    let (code, out, err) = run(&["check", &rules(name, text), "--cases", "16"]);
    (code, format!("{out}{err}"))
}

#[test]
fn a_hand_written_local_backward_is_what_b1_to_b3_check() {
    // A matrix product and its VJP (shapes are strict: no broadcasting, so
    // the hand-written backward fits every case).
    let r = r#"[[rule]]
name = "matmul"
op = { expr = "einsum(\"ij,jk->ik\", x, y)" }
backward = ["einsum(\"ik,jk->ij\", g, y)", "einsum(\"ij,ik->jk\", x, g)"]
inputs = ["V", "R"]
output = "V"
"#;
    let (code, out) = verdict_of("lbwd", r);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("sound (proof)"), "{out}");
    // Twin: the backward for x off by a factor of 2.
    let (code, out) = verdict_of("lbwd-twin", &r.replace("[\"einsum", "[\"2 * einsum"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unsound B3"), "{out}");
    assert!(out.contains("cotangent for x is not the gradient"), "{out}");
    // A list of the wrong length, or a `g` that shadows the cotangent.
    let (code, out) = verdict_of(
        "lbwd-bad",
        &r.replace(", \"einsum(\\\"ij,ik->jk\\\", x, g)\"]", "]"),
    );
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("has 1 expressions"), "{out}");
    let shadow = "[[rule]]\nname = \"s\"\nop = { expr = \"g * y\" }\nbackward = [\"y\", \"g\"]\ninputs = [\"V\", \"V\"]\noutput = \"V\"\n";
    let (code, out) = verdict_of("lbwd-shadow", shadow);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn no_grad_inputs_are_skipped_and_the_report_says_so() {
    // y's backward is wrong (zero), but y gets no gradient.
    let r = r#"[[rule]]
name = "matmul"
op = { expr = "einsum(\"ij,jk->ik\", x, y)" }
backward = ["einsum(\"ik,jk->ij\", g, y)", "0 * einsum(\"ij,ik->jk\", x, g)"]
no_grad = [1]
inputs = ["V", "R"]
output = "V"
"#;
    let (code, out) = verdict_of("nograd", r);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no gradient checked for y (no_grad)"), "{out}");
    // Twin: without no_grad the same backward fails for y.
    let (code, out) = verdict_of("nograd-twin", &r.replace("no_grad = [1]\n", ""));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("cotangent for y"), "{out}");
    let (code, out) = verdict_of("nograd-bad", &r.replace("[1]", "[2]"));
    assert_eq!(code, 2, "{out}");
}

#[test]
fn a_declared_meaning_is_what_f3_compares() {
    let r = "[[rule]]\nname = \"double\"\nop = { expr = \"2 * x\" }\nmeaning = \"x + x\"\ninputs = [\"P\"]\noutput = \"P\"\n";
    let (code, out) = verdict_of("meaning", r);
    assert_eq!(code, 0, "{out}");
    let (code, out) = verdict_of("meaning-twin", &r.replace("x + x", "3 * x"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unsound F3"), "{out}");
    // Global: a row-sharded transpose whose declared meaning is the
    // identity on the global tensor is wrong; transpose itself is right.
    let g = "[[rule]]\nname = \"t\"\nop = \"transpose\"\nmeaning = \"transpose(x)\"\ninputs = [\"S(0)\"]\noutput = \"S(1)\"\n";
    let (code, out) = verdict_of("meaning-global", g);
    assert_eq!(code, 0, "{out}");
    let (code, out) = verdict_of(
        "meaning-global-twin",
        &g.replace("meaning = \"transpose(x)\"", "meaning = \"x\""),
    );
    assert_ne!(code, 0, "{out}");
}

#[test]
fn the_library_names_the_callers_line_and_why() {
    use spmd_check::rules::Rule;
    let sound = Rule::from_toml_str(
        "[[rule]]\nname = \"add\"\nop = \"add\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n",
    )
    .unwrap();
    spmd_check::check::assert_rule_sound(&sound);
    // Vacuous is not sound, and the panic says why.
    let vacuous = Rule::from_toml_str(SCATTER4).unwrap();
    let caught = std::panic::catch_unwind(|| {
        let cfg = spmd_check::check::CheckConfig {
            scope: spmd_check::generators::Scope::default(),
            cases: 0,
            seed: 0,
        };
        let r = spmd_check::check::check_rule(&vacuous, &cfg, &[], &|_| {});
        assert!(!r.verdict.is_sound());
        spmd_check::report::rule_word(&r)
    })
    .unwrap();
    assert!(
        caught.contains("vacuous (no shape in scope fits"),
        "{caught}"
    );
    // An unsound rule: the panic carries the verdict and the caller's line.
    let unsound = Rule::from_toml_str(
        "[[rule]]\nname = \"pp\"\nop = \"mul\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n",
    )
    .unwrap();
    let hook = std::panic::take_hook();
    let at = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let at2 = at.clone();
    std::panic::set_hook(Box::new(move |info| {
        *at2.lock().unwrap() = info
            .location()
            .map(|l| l.file().to_string())
            .unwrap_or_default();
    }));
    let r = std::panic::catch_unwind(|| spmd_check::check::assert_rule_sound(&unsound));
    std::panic::set_hook(hook);
    let msg = *r.expect_err("P * P fails").downcast::<String>().unwrap();
    assert!(msg.contains("is unsound F2"), "{msg}");
    assert!(
        at.lock().unwrap().ends_with("trust.rs"),
        "{}",
        at.lock().unwrap()
    );
    // Two rules are not one.
    let two = format!("{SCATTER4}\n{}", SCATTER4.replace("scatter on 4", "again"));
    assert!(Rule::from_toml_str(&two).is_err());
}

#[test]
fn the_library_saves_and_replays_regressions_as_the_cli_does() {
    let f = rules(
        "libregs",
        "[[rule]]\nname = \"pp\"\nop = \"mul\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n",
    );
    let reg = format!("{f}.regressions.json");
    let _ = std::fs::remove_file(&reg);
    let r = std::panic::catch_unwind(|| spmd_check::check::assert_rules_sound(&f));
    assert!(r.is_err());
    let saved = std::fs::read_to_string(&reg).expect("a regression file");
    assert!(saved.contains("\"pp\""), "{saved}");
    // The CLI replays what the library saved.
    let (code, out, _) = run(&["check", &f]);
    assert_eq!(code, 1);
    assert!(out.contains("replayed from the regression file"), "{out}");
}

#[test]
fn reports_use_the_rules_own_dialect_names() {
    let dt = "[[rule]]\nname = \"dt\"\ndialect = \"dtensor\"\nmesh = { dp = 2 }\nop = \"matmul\"\ninputs = [\"Shard(0)\", \"Replicate()\"]\noutput = \"Shard(0)\"\n";
    let (code, out) = verdict_of("dialect-dt", dt);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("y : Replicate()"), "{out}");
    assert!(out.contains("x : Shard(0)"), "{out}");
    // JAX refuses U * U itself (bilinear), with its reason and exit 2.
    let uu = "[[rule]]\nname = \"jx\"\ndialect = \"jax\"\nop = \"mul\"\ninputs = [\"Unreduced\", \"Unreduced\"]\noutput = \"Unreduced\"\n";
    let (code, _, err) = run(&["check", &rules("dialect-jax-uu", uu)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bilinear"), "{err}");
    // What JAX accepts, U * R, with a wrong hand-written backward: refuted,
    // and reported in JAX's names.
    let jax = "[[rule]]\nname = \"jx\"\ndialect = \"jax\"\nop = \"mul\"\nbackward = [\"g * y\", \"g\"]\ninputs = [\"Unreduced\", \"Reduced\"]\noutput = \"Unreduced\"\n";
    let (code, out) = verdict_of("dialect-jax", jax);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("x : Unreduced"), "{out}");
    // The same rule in canonical letters prints letters.
    let canon = jax
        .replace("\"jax\"", "\"canonical\"")
        .replace("Unreduced", "P")
        .replace("Reduced", "R");
    let (_, out) = verdict_of("dialect-canon", &canon);
    assert!(out.contains("x : P"), "{out}");
}

#[test]
fn deeply_nested_files_are_short_one_line_errors() {
    let deep = format!("a = {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let (code, _, err) = run(&["check", &rules("deep-rule", &deep)]);
    assert_eq!(code, 2);
    assert_eq!(common::error_lines(&err), 1);
    assert!(err.len() < 300, "{}", &err[..300]);
    let job = format!(
        "mesh = {{x = 2}}\nop = \"neg\"\n[[inputs]]\ntype = \"V\"\nper_rank = {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let f = rules("deep-job", &job);
    let (code, _, err) = run(&["run", &f]);
    assert_eq!(code, 2);
    assert_eq!(common::error_lines(&err), 1);
    assert!(err.len() < 300, "{}", &err[..300]);
    let json = format!(
        "{{\"mesh\": {{\"x\": 2}}, \"op\": \"neg\", \"inputs\": [{{\"type\": \"V\", \"per_rank\": {}{}}}]}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (code, _, err) = run(&["run", &rules("deep-json", &json)]);
    assert_eq!(code, 2);
    assert!(err.len() < 300, "{}", &err[..300]);
}

/// A program step whose declared backward cannot take its cotangent's shape
/// fails B1 with the step named; it used to panic the oracle ("interpreter
/// bug: shape error"), found by the generated programs.
#[test]
fn a_program_step_backward_of_the_wrong_shape_fails_b1() {
    let r = r#"[[rule]]
name = "a2a step"
names = ["x"]
inputs = ["V"]
output = "V"
[[rule.step]]
name = "y"
forward = "all_to_all(split=0, concat=1)"
input = "x"
backward = "all_to_all(split=0, concat=1)"
output = "V"
[[rule.step]]
name = "z"
expr = "y * y"
output = "V"
"#;
    let (code, out) = verdict_of("a2a-step", r);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unsound B1"), "{out}");
    assert!(out.contains("step `y = all_to_all"), "{out}");
    // Twin: the transpose with split and concat swapped fits and is sound.
    let ok = r.replace(
        "backward = \"all_to_all(split=0, concat=1)\"",
        "backward = \"all_to_all(split=1, concat=0)\"",
    );
    let (code, out) = verdict_of("a2a-step-ok", &ok);
    assert_eq!(code, 0, "{out}");
}

/// A rule on a one-rank mesh it writes is vacuous, and its hint names no
/// flag (none widens a written mesh); exit 3.
#[test]
fn a_written_one_rank_mesh_names_no_flag() {
    let f = common::temp_rule_file(
        "one_rank",
        "[[rule]]\nname = \"one\"\nop = \"add\"\ninputs = [\"V\", \"V\"]\noutput = \"V\"\nmesh = { x = 1 }\n",
    );
    let (code, out, err) = common::run(&["check", &f]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("the rule's mesh has one rank, so no flag widens it"),
        "{out}"
    );
    assert!(!out.contains("--mesh-dims"), "{out}");
}

/// `assert_rules_sound` names every rule that is not sound, not only the
/// first, and the sound rule between them is not named; a file whose rules
/// are all sound does not panic (the twin).
#[test]
fn assert_rules_sound_reports_every_failing_rule() {
    let f = rules(
        "libmany",
        "[[rule]]\nname = \"pp\"\nop = \"mul\"\ninputs = [\"P\", \"P\"]\noutput = \"P\"\n\n\
         [[rule]]\nname = \"ok\"\nop = \"add\"\ninputs = [\"V\", \"V\"]\noutput = \"V\"\n\n\
         [[rule]]\nname = \"vi\"\nop = \"add\"\ninputs = [\"V\", \"V\"]\noutput = \"I\"\n",
    );
    let _ = std::fs::remove_file(format!("{f}.regressions.json"));
    let e = std::panic::catch_unwind(|| spmd_check::check::assert_rules_sound(&f)).unwrap_err();
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.starts_with("2 of 3 rules of"), "{msg}");
    assert!(
        msg.contains("rule `pp`") && msg.contains("rule `vi`"),
        "{msg}"
    );
    assert!(!msg.contains("rule `ok`"), "{msg}");
    let g = rules(
        "libsound",
        "[[rule]]\nname = \"ok\"\nop = \"add\"\ninputs = [\"V\", \"V\"]\noutput = \"V\"\n",
    );
    spmd_check::check::assert_rules_sound(&g);
}
