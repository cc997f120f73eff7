//! Errors as a person reads them (SPEC.md §11.4): the one-line error, and
//! when it points into a file (`FILE:LINE:COL: ...`) that line of the file
//! with a caret under what is wrong, the way rustc shows it.
//!
//! The first line is always the whole error, so scripts that read one line
//! lose nothing; the snippet follows it, each of its lines starting with a
//! space or a line number and `|`.

use annotate_snippets::{AnnotationKind, Level, Renderer, Snippet};

/// Lines longer than this are not shown (a minified JSON file is one line).
const LONGEST_LINE: usize = 400;

/// `error: MSG`, then the snippet when MSG starts with a location in a file
/// that can still be read. Ends with a newline.
pub fn render_error(msg: &str) -> String {
    match snippet(msg) {
        Some(s) => format!("{s}\n"),
        None => format!("error: {msg}\n"),
    }
}

/// `FILE:LINE:COL` at the start of `msg`: the file, the line (1-based) and
/// the column (1-based, in characters).
fn location(msg: &str) -> Option<(&str, usize, usize)> {
    // The file may itself contain `:`; the location is the first `:L:C: `.
    let mut from = 0;
    while let Some(i) = msg[from..].find(':').map(|i| i + from) {
        let rest = &msg[i + 1..];
        let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
        let l = digits(rest);
        if l > 0 && rest[l..].starts_with(':') {
            let c = digits(&rest[l + 1..]);
            if c > 0 && rest[l + 1 + c..].starts_with(": ") && i > 0 {
                let line = rest[..l].parse().ok()?;
                let col = rest[l + 1..l + 1 + c].parse().ok()?;
                return Some((&msg[..i], line, col));
            }
        }
        from = i + 1;
    }
    None
}

fn snippet(msg: &str) -> Option<String> {
    let (file, line, col) = location(msg)?;
    let text = spmd_syntax::read_text(file).ok()?;
    let source = text.lines().nth(line.checked_sub(1)?)?;
    if source.chars().count() > LONGEST_LINE || col == 0 {
        return None;
    }
    let start = source
        .char_indices()
        .nth(col - 1)
        .map_or(source.len(), |(b, _)| b);
    let span = start..start + token_len(&source[start..]);
    let label = msg
        .split_once("did you mean ")
        .map(|(_, m)| format!("did you mean {}", m.split_once('?').map_or(m, |p| p.0)) + "?");
    let mut mark = AnnotationKind::Primary.span(span);
    if let Some(l) = &label {
        mark = mark.label(l);
    }
    let report = [Level::ERROR.primary_title(msg).element(
        Snippet::source(source)
            .line_start(line)
            .fold(false)
            .annotation(mark),
    )];
    Some(Renderer::plain().render(&report).to_string())
}

/// The length in bytes of the token `s` starts with: a quoted string up to
/// its closing quote, a word, or one character.
fn token_len(s: &str) -> usize {
    let mut chars = s.char_indices();
    match chars.next() {
        None => 0,
        Some((_, q @ ('"' | '\''))) => chars.find(|&(_, c)| c == q).map_or(s.len(), |(i, _)| i + 1),
        Some((_, c)) if c.is_alphanumeric() || c == '_' => s
            .char_indices()
            .find(|&(_, c)| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))
            .map_or(s.len(), |(i, _)| i),
        Some((_, c)) => c.len_utf8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_found_after_colons_in_the_path() {
        assert_eq!(location("a.toml:4:7: bad"), Some(("a.toml", 4, 7)));
        assert_eq!(
            location("c:/x:y.toml:12:1: bad"),
            Some(("c:/x:y.toml", 12, 1))
        );
        assert_eq!(location("a.toml: the file defines no rule"), None);
        assert_eq!(location("--expr `x`: column 3: bad"), None);
        assert_eq!(location(":4:7: bad"), None);
    }

    #[test]
    fn tokens() {
        assert_eq!(token_len("\"mull\"\n"), 6);
        assert_eq!(token_len("outptu = 1"), 6);
        assert_eq!(token_len("[\"V\"]"), 1);
        assert_eq!(token_len("\"unterminated"), 13);
        assert_eq!(token_len(""), 0);
    }

    #[test]
    fn a_file_location_gets_its_line_and_a_caret() {
        let dir = std::env::temp_dir().join(format!("spmd-diag-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("r.toml");
        std::fs::write(&f, "[[rule]]\nname = \"m\"\nop = \"mull\"\n").unwrap();
        let msg = format!(
            "{}:3:6: unknown op `mull`; did you mean `mul`? (...)",
            f.display()
        );
        let out = render_error(&msg);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], format!("error: {msg}"));
        assert!(out.contains("3 | op = \"mull\""), "{out}");
        assert!(out.contains("^^^^^^ did you mean `mul`?"), "{out}");
        // The twin: a location in no readable file is the one line alone.
        std::fs::remove_file(&f).unwrap();
        assert_eq!(render_error(&msg), format!("error: {msg}\n"));
    }
}
