//! `--format junit` (SPEC.md §11.4): JUnit XML for CI test reports, one
//! `testsuite` per table and one `testcase` per row; a failing row has a
//! `failure` whose message is the one-line counterexample, a skipped
//! (vacuous) row a `skipped` with its reason.

use super::table::{Outcome, Tables};

/// Text for an XML attribute or element: the five special characters as
/// entities, tab and line breaks as character references (kept in
/// attributes), and the characters XML 1.0 cannot hold at all (other
/// controls, U+FFFE, U+FFFF) written as `\u{..}`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// The report as a JUnit XML document.
pub fn render(t: &Tables) -> String {
    let count = |o| t.count(o);
    let total: usize = t.tables.iter().map(|x| x.rows.len()).sum();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&format!(
        "<testsuites name=\"{}\" tests=\"{total}\" failures=\"{}\" skipped=\"{}\">\n",
        escape(&format!("spmd-check {}", t.command)),
        count(Outcome::Fail),
        count(Outcome::Skip)
    ));
    for table in &t.tables {
        let n = |o| table.rows.iter().filter(|r| r.outcome == o).count();
        s.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">\n",
            escape(&table.title),
            table.rows.len(),
            n(Outcome::Fail),
            n(Outcome::Skip)
        ));
        for r in &table.rows {
            let open = format!(
                "    <testcase classname=\"{}\" name=\"{}\"",
                escape(&table.title),
                escape(&r.name)
            );
            // The row's cells, column by column, as the test's output.
            let out: Vec<String> = table
                .columns
                .iter()
                .zip(&r.cells)
                .filter(|(_, v)| !v.is_empty())
                .map(|(c, v)| format!("{c}: {v}"))
                .chain(r.note.iter().map(|n| format!("note: {n}")))
                .collect();
            let out = escape(&out.join("\n"));
            let msg = escape(r.message.as_deref().unwrap_or(""));
            match r.outcome {
                Outcome::Pass => s.push_str(&format!(
                    "{open}>\n      <system-out>{out}</system-out>\n    </testcase>\n"
                )),
                Outcome::Fail => s.push_str(&format!(
                    "{open}>\n      <failure message=\"{msg}\" type=\"{}\">{msg}</failure>\n      <system-out>{out}</system-out>\n    </testcase>\n",
                    escape(
                        table
                            .columns
                            .iter()
                            .position(|c| *c == "verdict")
                            .and_then(|i| r.cells.get(i))
                            .map_or("", String::as_str)
                    )
                )),
                Outcome::Skip => s.push_str(&format!(
                    "{open}>\n      <skipped message=\"{msg}\"/>\n      <system-out>{out}</system-out>\n    </testcase>\n"
                )),
            }
        }
        s.push_str("  </testsuite>\n");
    }
    s.push_str("</testsuites>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Markup, quotes and line breaks cannot end an attribute or open an
    /// element; a control character XML cannot hold is spelled out. The
    /// twin: plain text is left as it is.
    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(
            escape("a<b>&\"c\"'\n\u{1}"),
            "a&lt;b&gt;&amp;&quot;c&quot;&apos;&#10;\\u{1}"
        );
        assert_eq!(
            escape("unsound F2 on mesh {x: 2}"),
            "unsound F2 on mesh {x: 2}"
        );
    }
}
