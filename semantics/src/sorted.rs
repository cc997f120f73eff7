//! The merge of two lists sorted by a key, which the normal forms of
//! `expoly` and `symbolic` share: their sums, products of monomials and
//! atoms all keep terms sorted by key and combine the terms of equal keys.

/// `a` and `b`, each sorted by `key` with distinct keys, merged into one
/// sorted list: an item of `a` alone is kept, one of `b` alone is kept as
/// `only_b` maps it, and two with equal keys are combined by `both`, which
/// may drop them (`None`) or fail.
pub(crate) fn merge<T: Clone, K: Ord, E>(
    a: &[T],
    b: &[T],
    key: impl Fn(&T) -> &K,
    only_b: impl Fn(&T) -> T,
    mut both: impl FnMut(&T, &T) -> Result<Option<T>, E>,
) -> Result<Vec<T>, E> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match key(&a[i]).cmp(key(&b[j])) {
            std::cmp::Ordering::Less => {
                out.push(a[i].clone());
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(only_b(&b[j]));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.extend(both(&a[i], &b[j])?);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend(b[j..].iter().map(only_b));
    Ok(out)
}

/// `merge` where no combination fails.
pub(crate) fn merge_total<T: Clone, K: Ord>(
    a: &[T],
    b: &[T],
    key: impl Fn(&T) -> &K,
    only_b: impl Fn(&T) -> T,
    mut both: impl FnMut(&T, &T) -> Option<T>,
) -> Vec<T> {
    match merge(a, b, key, only_b, |x, y| {
        Ok::<_, std::convert::Infallible>(both(x, y))
    }) {
        Ok(v) => v,
        Err(e) => match e {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal keys combined (or dropped), lone items kept in key order,
    /// `b`'s mapped; a failing combination fails the merge.
    #[test]
    fn merges_in_key_order() {
        let a = [(1, 10), (3, 30), (5, 50)];
        let b = [(2, 2), (3, -30), (6, 6)];
        let sum = merge_total(
            &a,
            &b,
            |t| &t.0,
            |t| (t.0, -t.1),
            |x, y| Some((x.0, x.1 + y.1)).filter(|t| t.1 != 0),
        );
        assert_eq!(sum, vec![(1, 10), (2, -2), (5, 50), (6, -6)]);
        let r: Result<Vec<(i32, i32)>, &str> =
            merge(&a, &b, |t| &t.0, |t| *t, |_, _| Err("equal keys"));
        assert_eq!(r, Err("equal keys"));
        assert_eq!(
            merge_total(&a, &[], |t| &t.0, |t| *t, |_, _| None),
            a.to_vec()
        );
    }
}
