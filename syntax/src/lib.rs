//! The read phase (SPEC.md §11.1, §14): rule files and jobs as their authors
//! wrote them, in a system's own names. Nothing here parses a state or
//! builds an op: elaboration (`spmd-dialects`) reads these structures next.

pub mod job;
pub mod rule;

pub use job::{parse_job, parse_scalar, InputSpec, Job, MeshSpec, Nest, MAX_LITERAL};
pub use rule::{
    locate, parse_file, read_text, read_text_limit, to_toml, BackwardSpec, OpSpec, RuleSpec,
    StepSpec, TypeSpec, MAX_FILE_BYTES,
};

/// A user error in what was asked or written (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A name as quoted in a one-line error: control characters, quotes and
/// backslashes escaped, so the line stays one line.
pub fn quoted_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '\'' => c.to_string(),
            c if c.is_control() || c == '"' || c == '\\' => c.escape_debug().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// A serde message about an unknown field or variant (``unknown field `outptu`,
/// expected one of `name`, `output` ``) with the nearest expected name offered
/// right after the bad one; other messages are returned as they are.
pub fn with_suggestion(msg: &str) -> String {
    let Some(k) = ["unknown field `", "unknown variant `"]
        .iter()
        .find_map(|p| msg.find(p).map(|i| i + p.len()))
    else {
        return msg.to_string();
    };
    let Some(len) = msg[k..].find('`') else {
        return msg.to_string();
    };
    let (bad, rest) = (&msg[k..k + len], &msg[k + len + 1..]);
    let Some(expected) = rest.strip_prefix(", expected ") else {
        return msg.to_string();
    };
    // The expected names are the backquoted words after "expected".
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match spmd_semantics::names::closest(bad, names) {
        Some(n) => format!(
            "{}; did you mean `{n}`? (expected {expected})",
            &msg[..k + len + 1]
        ),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::with_suggestion;

    #[test]
    fn serde_messages_get_the_nearest_name() {
        assert_eq!(
            with_suggestion("unknown field `outptu`, expected one of `name`, `output`, `op`"),
            "unknown field `outptu`; did you mean `output`? (expected one of `name`, `output`, `op`)"
        );
        assert_eq!(
            with_suggestion("unknown variant `sumx`, expected `sum` or `max`"),
            "unknown variant `sumx`; did you mean `sum`? (expected `sum` or `max`)"
        );
    }

    /// The twin: nothing near, or not such a message: unchanged.
    #[test]
    fn other_messages_are_unchanged() {
        for m in [
            "unknown field `zzzzzz`, expected one of `name`, `output`",
            "invalid type: integer `1`, expected a string",
            "unknown field `",
            "unknown field `x`",
        ] {
            assert_eq!(with_suggestion(m), m);
        }
    }
}
