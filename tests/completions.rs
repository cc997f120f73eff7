//! `spmd-check completions SHELL` and `spmd-check man`, run as a user would
//! (issue 26). Every command and flag having help text is checked on clap's
//! command tree itself, in src/main.rs's tests.

mod common;
use common::run;

/// The subcommands `spmd-check --help` lists (clap's own `help` aside).
fn subcommands() -> Vec<String> {
    let (code, out, err) = run(&["--help"]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<String> = out
        .split("Commands:\n")
        .nth(1)
        .expect("a Commands section")
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    for n in ["check", "conform", "derive", "completions", "man"] {
        assert!(names.iter().any(|m| m == n), "{n} not in {names:?}");
    }
    names
}

#[test]
fn bash_completions_mention_every_subcommand() {
    let (code, bash, err) = run(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    // The words offered after `spmd-check `: the top level's opts.
    let top: Vec<&str> = bash
        .split("\n        spmd__check)\n")
        .nth(1)
        .and_then(|s| s.split("opts=\"").nth(1))
        .and_then(|s| s.split('"').next())
        .expect("the top level's opts")
        .split_whitespace()
        .collect();
    for n in subcommands() {
        assert!(
            top.contains(&n.as_str()),
            "bash completions lack `{n}`: {top:?}"
        );
    }
    // Flags of a subcommand are completed too.
    assert!(bash.contains("--allow-vacuous"), "no flags of `check`");
}

#[test]
fn every_listed_shell_gives_a_script_and_an_unknown_one_is_refused() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, out, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains("spmd-check"), "{shell}: {out}");
    }
    let (code, out, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("possible values"), "{err}");
}

/// The roff text after the apostrophe preamble every roff page from the
/// `roff` crate starts with (`.ie \n(.g .ds Aq \(aq` / `.el .ds Aq '`).
fn after_preamble(page: &str) -> &str {
    let mut rest = page;
    while rest.starts_with(".ie ") || rest.starts_with(".el ") {
        rest = rest.split_once('\n').map_or("", |(_, r)| r);
    }
    rest
}

#[test]
fn man_page_is_roff_with_a_title_and_every_subcommand() {
    let (code, page, err) = run(&["man"]);
    assert_eq!(code, 0, "{err}");
    let body = after_preamble(&page);
    assert!(body.starts_with(".TH spmd-check 1"), "{page}");
    assert!(body.contains("\n.SH NAME\n"), "{page}");
    assert!(body.contains("\n.SH SUBCOMMANDS\n"), "{page}");
    for n in subcommands() {
        // The page names each subcommand's own page, spmd-check-NAME(1).
        assert!(
            body.contains(&format!("spmd\\-check\\-{}(1)", n.replace('-', "\\-"))),
            "no {n} in {page}"
        );
    }
}

#[test]
fn man_dir_writes_a_page_per_subcommand() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spmd-check-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (code, out, err) = run(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty(), "{out}");
    let mut names = vec!["spmd-check".to_string()];
    names.extend(subcommands().iter().map(|n| format!("spmd-check-{n}")));
    for n in names {
        let page = std::fs::read_to_string(dir.join(format!("{n}.1")))
            .unwrap_or_else(|e| panic!("{n}.1: {e}"));
        assert!(
            after_preamble(&page).starts_with(&format!(".TH {n} 1")),
            "{page}"
        );
    }
    // A subcommand's page has its flags and their help.
    let check = std::fs::read_to_string(dir.join("spmd-check-check.1")).unwrap();
    assert!(check.contains("\\-\\-json"), "{check}");
    assert!(check.contains("Print the result as JSON"), "{check}");
    // A directory that cannot be written is bad input: one line, exit 2.
    let (code, _, err) = run(&["man", "--dir", dir.join("no/such").to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: ") && common::error_lines(&err) == 1,
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
