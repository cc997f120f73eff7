//! `rule_tests!`: one `#[test]` per rule of a rule file (SPEC.md §11.4).
//!
//! ```ignore
//! mod rules {
//!     spmd_check::rule_tests!("examples/rules.toml");
//! }
//! mod twins {
//!     // These rules are deliberately wrong: each test passes when the
//!     // checker finds the rule unsound.
//!     spmd_check::rule_tests!("tests/twins.toml", unsound = ["p times p as p"]);
//! }
//! ```
//!
//! The path is relative to the manifest directory of the crate being
//! compiled. The file is read when the macro expands, only for the rules'
//! names; each test then checks its rule with
//! `spmd_check::check::assert_rule_in_file_sound` (or `..._unsound`), which
//! reads the file again with spmd-check's own reader, replays and saves
//! `FILE.regressions.json` as `spmd-check check` does. A test's name is the
//! rule's name with every character other than a letter or digit as `_`.
//! The file is also `include_str!`ed, so editing it recompiles the tests.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

/// One `#[test]` per rule of a rule file; see the crate documentation.
#[proc_macro]
pub fn rule_tests(input: TokenStream) -> TokenStream {
    match expand(input) {
        Ok(ts) => ts,
        Err((span, msg)) => compile_error(span, &msg),
    }
}

type Error = (Span, String);

fn expand(input: TokenStream) -> Result<TokenStream, Error> {
    let (path, unsound, span) = parse_args(input)?;
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let full = format!("{root}/{path}");
    let text = std::fs::read_to_string(&full)
        .map_err(|e| (span, format!("rule_tests!: cannot read {full}: {e}")))?;
    let names = rule_names(&text).map_err(|e| (span, format!("rule_tests!: {path}: {e}")))?;
    for u in &unsound {
        if !names.contains(u) {
            return Err((span, format!("rule_tests!: {path} has no rule named {u:?}")));
        }
    }
    let mut used: Vec<String> = Vec::new();
    let mut code = format!("const _: &str = include_str!({full:?});\n");
    for n in &names {
        let mut id = ident_of(n);
        let base = id.clone();
        let mut k = 2;
        while used.contains(&id) {
            id = format!("{base}_{k}");
            k += 1;
        }
        used.push(id.clone());
        let which = if unsound.contains(n) {
            "unsound"
        } else {
            "sound"
        };
        code.push_str(&format!(
            "#[test]\nfn {id}() {{ ::spmd_check::check::assert_rule_in_file_{which}({full:?}, {n:?}); }}\n"
        ));
    }
    code.parse::<TokenStream>()
        .map_err(|e| (span, format!("rule_tests!: {e}")))
}

/// `"PATH"` or `"PATH", unsound = ["NAME", ...]`.
fn parse_args(input: TokenStream) -> Result<(String, Vec<String>, Span), Error> {
    let usage = "rule_tests! takes \"PATH\" or \"PATH\", unsound = [\"NAME\", ...]";
    let tokens: Vec<TokenTree> = input.into_iter().collect();
    let span = tokens.first().map_or_else(Span::call_site, |t| t.span());
    let path = match tokens.first() {
        Some(TokenTree::Literal(l)) => string_of(l).ok_or((span, usage.to_string()))?,
        _ => return Err((span, usage.to_string())),
    };
    let mut unsound = Vec::new();
    match &tokens[1..] {
        [] => {}
        [TokenTree::Punct(c), TokenTree::Ident(k), TokenTree::Punct(eq), TokenTree::Group(g), rest @ ..]
            if c.as_char() == ','
                && k.to_string() == "unsound"
                && eq.as_char() == '='
                && g.delimiter() == Delimiter::Bracket
                && rest
                    .iter()
                    .all(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ',')) =>
        {
            for t in g.stream() {
                match t {
                    TokenTree::Literal(l) => {
                        unsound.push(string_of(&l).ok_or((l.span(), usage.to_string()))?)
                    }
                    TokenTree::Punct(p) if p.as_char() == ',' => {}
                    t => return Err((t.span(), usage.to_string())),
                }
            }
        }
        _ => return Err((span, usage.to_string())),
    }
    Ok((path, unsound, span))
}

/// The value of a plain string literal.
fn string_of(l: &Literal) -> Option<String> {
    let s = l.to_string();
    serde_json::from_str::<String>(&s).ok()
}

/// The names of the rules of a rule file (TOML, or JSON when it starts with `{`).
fn rule_names(text: &str) -> Result<Vec<String>, String> {
    let rules: Vec<serde_json::Value> = if text.trim_start().starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        v.get("rule")
            .and_then(|r| r.as_array())
            .cloned()
            .unwrap_or_default()
    } else {
        let v: toml::Value = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let v = serde_json::to_value(v).map_err(|e| e.to_string())?;
        v.get("rule")
            .and_then(|r| r.as_array())
            .cloned()
            .unwrap_or_default()
    };
    let names: Vec<String> = rules
        .iter()
        .map(|r| {
            r.get("name")
                .and_then(|n| n.as_str())
                .map(str::to_string)
                .ok_or_else(|| "a rule without a name".to_string())
        })
        .collect::<Result<_, _>>()?;
    if names.is_empty() {
        return Err("the file defines no rule".into());
    }
    Ok(names)
}

/// A test function's name for a rule: letters and digits kept (lower-case),
/// everything else `_`, runs of `_` joined, never starting with a digit.
fn ident_of(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        if !(c == '_' && s.ends_with('_')) {
            s.push(c);
        }
    }
    let s = s.trim_matches('_').to_string();
    match s.chars().next() {
        None => "rule".into(),
        Some(c) if c.is_ascii_digit() => format!("rule_{s}"),
        _ if is_keyword(&s) => format!("rule_{s}"),
        _ => s,
    }
}

fn is_keyword(s: &str) -> bool {
    matches!(
        s,
        "as" | "break"
            | "const"
            | "continue"
            | "crate"
            | "else"
            | "enum"
            | "extern"
            | "false"
            | "fn"
            | "for"
            | "if"
            | "impl"
            | "in"
            | "let"
            | "loop"
            | "match"
            | "mod"
            | "move"
            | "mut"
            | "pub"
            | "ref"
            | "return"
            | "self"
            | "static"
            | "struct"
            | "super"
            | "trait"
            | "true"
            | "type"
            | "unsafe"
            | "use"
            | "where"
            | "while"
            | "async"
            | "await"
            | "dyn"
            | "abstract"
            | "become"
            | "box"
            | "do"
            | "final"
            | "macro"
            | "override"
            | "priv"
            | "typeof"
            | "unsized"
            | "virtual"
            | "yield"
            | "try"
            | "gen"
            | "union"
    )
}

fn compile_error(span: Span, msg: &str) -> TokenStream {
    let mut lit = Literal::string(msg);
    lit.set_span(span);
    let mut bang = Punct::new('!', Spacing::Alone);
    bang.set_span(span);
    let mut args = Group::new(Delimiter::Parenthesis, TokenTree::Literal(lit).into());
    args.set_span(span);
    let mut semi = Punct::new(';', Spacing::Alone);
    semi.set_span(span);
    [
        TokenTree::Ident(Ident::new("compile_error", span)),
        TokenTree::Punct(bang),
        TokenTree::Group(args),
        TokenTree::Punct(semi),
    ]
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names() {
        assert_eq!(ident_of("partial times partial"), "partial_times_partial");
        assert_eq!(ident_of("fsdp: all_gather to R"), "fsdp_all_gather_to_r");
        assert_eq!(ident_of("2 axes"), "rule_2_axes");
        assert_eq!(ident_of("match"), "rule_match");
        assert_eq!(ident_of("--"), "rule");
        assert_eq!(ident_of("Σ é"), "rule");
    }

    #[test]
    fn names_from_toml_and_json() {
        let toml = "[[rule]]\nname = \"a\"\nop = \"neg\"\n[[rule]]\nname = 'b c'\n";
        assert_eq!(rule_names(toml).unwrap(), ["a", "b c"]);
        let json = r#"{"rule": [{"name": "x"}]}"#;
        assert_eq!(rule_names(json).unwrap(), ["x"]);
        // The twins: what is not a rule file is an error, not zero tests.
        assert!(rule_names("").is_err());
        assert!(rule_names("[[rule]]\nop = \"neg\"\n").is_err());
        assert!(rule_names("[[rule]\n").is_err());
    }
}
