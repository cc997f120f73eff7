//! "Did you mean": the known name nearest to a misspelt one, for error
//! messages (issue 26). Only names a person could have meant are offered: the
//! edit distance (optimal string alignment, on lower-cased text) is at most a
//! third of the longer name's length, and at least one edit is always allowed,
//! so `mull` finds `mul` and `psm` finds `psum`, while `x` finds nothing in a
//! list of op names.

/// Names longer than this are not compared (the distance is quadratic in
/// the lengths, and a name from an untrusted file may be megabytes long).
const LONGEST: usize = 64;

/// The known name nearest to `name`, if one is near enough; ties go to the
/// first in `known`'s order.
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > LONGEST {
        return None;
    }
    let lower = n.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for k in known {
        if k == n || k.chars().count() > LONGEST {
            continue;
        }
        let d = strsim::osa_distance(&lower, &k.to_lowercase());
        let longer = lower.chars().count().max(k.chars().count());
        if d <= (longer / 3).max(1) && d < longer && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

/// `"; did you mean `mul`?"` when a known name is near `name`, else `""`:
/// to append right after the part of a message that quotes the bad name.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, known)
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPS: [&str; 6] = ["neg", "add", "mul", "matmul", "psum", "all_gather"];

    #[test]
    fn near_names_are_offered() {
        assert_eq!(closest("mull", OPS), Some("mul"));
        assert_eq!(closest("psm", OPS), Some("psum"));
        assert_eq!(closest("all_gathr", OPS), Some("all_gather"));
        assert_eq!(closest("MatMul", OPS), Some("matmul"));
        assert_eq!(closest("allgather", OPS), Some("all_gather"));
        assert_eq!(did_you_mean("mull", OPS), "; did you mean `mul`?");
    }

    /// The twin: names nobody could have meant get no suggestion.
    #[test]
    fn far_names_are_not() {
        assert_eq!(closest("x", OPS), None);
        // A one-letter name is not offered for another one-letter name.
        assert_eq!(closest("y", ["x", "z"]), None);
        assert_eq!(closest("reduce_scatter", OPS), None);
        assert_eq!(closest("", OPS), None);
        assert_eq!(closest(&"m".repeat(10_000), OPS), None);
        assert_eq!(did_you_mean("softmax", OPS), "");
    }
}
