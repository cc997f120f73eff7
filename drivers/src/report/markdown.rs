//! `--format markdown` (SPEC.md §11.4): the report as GitHub-flavoured
//! Markdown tables, for pull requests and docs. Every cell is escaped, so
//! that no name or counterexample can end a cell, open a link or HTML, or
//! break the table's line.

use super::table::{Outcome, Tables};

/// A cell's text, escaped: the punctuation that could end the cell (`|`)
/// or open emphasis, code, a link, HTML or an entity gets a backslash
/// (which GitHub's Markdown removes before any ASCII punctuation), line
/// breaks become `<br>`, other control characters are written as `\u{..}`.
pub fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '|' | '~' | '&' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("<br>"),
            '\r' => {}
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn mark(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "pass",
        Outcome::Fail => "**FAIL**",
        Outcome::Skip => "skipped",
    }
}

/// The tables, each under a heading, with a result column, and a totals
/// line.
pub fn render(t: &Tables) -> String {
    let mut s = format!("## {}\n", cell(&t.heading));
    for table in &t.tables {
        s.push_str(&format!("\n### {}\n\n", cell(&table.title)));
        if table.rows.is_empty() {
            s.push_str("(none)\n");
            continue;
        }
        let mut head: Vec<String> = table.columns.iter().map(|c| cell(c)).collect();
        head.push("result".into());
        s.push_str(&format!("| {} |\n", head.join(" | ")));
        s.push_str(&format!("|{}\n", "---|".repeat(head.len())));
        for r in &table.rows {
            let mut cells: Vec<String> = r.cells.iter().map(|c| cell(c)).collect();
            let mut result = mark(r.outcome).to_string();
            if r.outcome == Outcome::Skip {
                if let Some(m) = &r.message {
                    result.push_str(&format!(": {}", cell(m)));
                }
            }
            cells.push(result);
            s.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
    }
    let (p, f, k) = (
        t.count(Outcome::Pass),
        t.count(Outcome::Fail),
        t.count(Outcome::Skip),
    );
    s.push_str(&format!(
        "\n{} rows: {p} pass, {f} fail, {k} skipped\n",
        p + f + k
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What could end a cell, open markup or break the row is escaped; the
    /// twin: plain text is left as it is.
    #[test]
    fn cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc<br>`x`*y*"), "a\\|b<br>c\\<br>\\`x\\`\\*y\\*");
        assert_eq!(cell("\u{1b}"), "\\u{1b}");
        assert_eq!(cell("sound (proof) x: 2"), "sound (proof) x: 2");
    }
}
