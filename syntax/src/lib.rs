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
