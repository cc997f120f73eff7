//! A type or a backward written as something else is refused in plain words
//! (issue 26): what was written and what is wanted, never serde's "data did
//! not match any variant of untagged enum TypeSpec". The same rule with the
//! right kind of value is read (the twin).

use spmd_syntax::rule::{parse_file, BackwardSpec, TypeSpec};

fn toml_rule(inputs: &str, output: &str, extra: &str) -> String {
    format!("[[rule]]\nname = \"r\"\nop = \"neg\"\ninputs = {inputs}\noutput = {output}\n{extra}")
}

fn refused(file: &str, text: &str) -> String {
    let e = parse_file(file, text).expect_err("refused").0;
    assert!(!e.contains("untagged"), "{e}");
    assert!(!e.contains("variant"), "{e}");
    assert!(!e.contains("$serde_json"), "{e}");
    e
}

#[test]
fn a_number_as_a_type_says_what_a_type_is() {
    let e = refused("r.toml", &toml_rule("[5]", "\"V\"", ""));
    assert!(e.contains("r.toml:4:"), "{e}");
    assert!(
        e.contains("a state name like \"V\" or a table of axis → state"),
        "{e}"
    );
    assert!(e.contains("integer `5`"), "{e}");
    // In JSON too, and for a float (serde_json's arbitrary precision reads
    // numbers through a map of its own).
    for v in ["5", "2.5", "1e400", "[\"V\"]", "true", "null"] {
        let json = format!("{{\"rule\": [{{\"name\": \"r\", \"op\": \"neg\", \"inputs\": [{v}], \"output\": \"V\"}}]}}");
        let e = refused("r.json", &json);
        assert!(e.contains("a state name like \"V\""), "{v}: {e}");
    }
    // The twin: a state name and a table of axis → state are read.
    let ok = parse_file("r.toml", &toml_rule("[\"V\"]", "{ x = \"V\" }", "")).unwrap();
    assert!(matches!(&ok[0].inputs[0], TypeSpec::One(s) if s == "V"));
    assert!(matches!(&ok[0].output, TypeSpec::Axes(m) if m["x"] == "V"));
}

#[test]
fn a_table_with_a_non_state_names_the_axis_value() {
    let e = refused("r.toml", &toml_rule("[{ x = 1 }]", "\"V\"", ""));
    assert!(e.contains("a state name like \"V\" for this axis"), "{e}");
    let json = "{\"rule\": [{\"name\": \"r\", \"op\": \"neg\", \"inputs\": [{\"x\": \"V\", \"x\": \"R\"}], \"output\": \"V\"}]}";
    let e = refused("r.json", json);
    assert!(e.contains("axis `x` is given twice"), "{e}");
}

#[test]
fn a_backward_of_the_wrong_kind_says_what_a_backward_is() {
    let e = refused("r.toml", &toml_rule("[\"V\"]", "\"V\"", "backward = 3"));
    assert!(e.contains("a backward like \"all_reduce\""), "{e}");
    let e = refused(
        "r.toml",
        &toml_rule("[\"V\"]", "\"V\"", "backward = [\"g\", 2]"),
    );
    assert!(e.contains("invalid type: integer `2`"), "{e}");
    // The twin: a string and a list of strings are read.
    let ok = parse_file(
        "r.toml",
        &toml_rule("[\"V\"]", "\"V\"", "backward = [\"-g\"]"),
    )
    .unwrap();
    assert!(matches!(&ok[0].backward, Some(BackwardSpec::PerInput(v)) if v == &["-g"]));
    let ok = parse_file(
        "r.toml",
        &toml_rule("[\"V\"]", "\"V\"", "backward = \"local\""),
    )
    .unwrap();
    assert!(matches!(&ok[0].backward, Some(BackwardSpec::One(s)) if s == "local"));
}
