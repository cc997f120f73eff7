//! Uneven cases (SPEC.md §23.10), by construction: a mesh axis of `n`
//! ranks and a global shape per input whose sharded dims run over every
//! length from 0 to n + 1, so fewer rows than ranks, one short of even,
//! even and one past even all occur. A `sizes=[...]` split fixes both its
//! dim's length and the number of ranks.

use spmd_semantics::uneven::{Placement, Split};

/// One case: the axis size and the global shape of every input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub n: usize,
    pub shapes: Vec<Vec<usize>>,
}

/// The lengths a sharded dim takes over `n` ranks.
pub fn lengths(n: usize) -> Vec<usize> {
    (0..=n + 1).collect()
}

/// The axis sizes a placement allows out of `ns`: a `sizes=[...]` split
/// names one size per rank.
fn fits(p: &Placement, n: usize) -> bool {
    match p {
        Placement::Shard(_, Split::Sizes(s)) => s.len() == n,
        _ => true,
    }
}

/// The global shapes one value may have on `n` ranks when it is read
/// under every placement of `ps` (a step's input and output): ranks 1 to
/// `max_rank` (at least every sharded dim + 1), each sharded dim over
/// [`lengths`] (or its written sizes' total), every other dim 1 or 2.
pub fn shapes(ps: &[&Placement], n: usize, max_rank: usize) -> Vec<Vec<usize>> {
    let mut fixed: Vec<(usize, Option<usize>)> = Vec::new();
    for p in ps {
        match p {
            Placement::Shard(d, Split::Sizes(s)) => fixed.push((*d, Some(s.iter().sum()))),
            Placement::Shard(d, _) => fixed.push((*d, None)),
            _ => {}
        }
    }
    let lo = fixed.iter().map(|(d, _)| d + 1).max().unwrap_or(1);
    let mut out = Vec::new();
    for rank in lo..=max_rank.max(lo) {
        let mut acc: Vec<Vec<usize>> = vec![vec![]];
        for d in 0..rank {
            let here: Vec<Option<usize>> = fixed
                .iter()
                .filter(|(k, _)| *k == d)
                .map(|(_, f)| *f)
                .collect();
            let choices: Vec<usize> = match (here.is_empty(), here.iter().flatten().next()) {
                (true, _) => vec![1, 2],
                (false, Some(&len)) => {
                    // Two written sizes on one dim must agree.
                    if here.iter().flatten().any(|&l| l != len) {
                        return out;
                    }
                    vec![len]
                }
                (false, None) => lengths(n),
            };
            acc = acc
                .into_iter()
                .flat_map(|s| {
                    choices.iter().map(move |&c| {
                        let mut t = s.clone();
                        t.push(c);
                        t
                    })
                })
                .collect();
        }
        out.extend(acc);
    }
    out
}

/// Every case on the axis sizes `ns` for inputs read under these
/// placements (one group per input: a step's input is read under its
/// output placement too), up to `max_cases` (smallest axis first);
/// `accept` filters the shapes (an op decides which shapes it takes).
pub fn cases(
    placements: &[Vec<&Placement>],
    ns: &[usize],
    max_rank: usize,
    max_cases: usize,
    accept: &dyn Fn(&[Vec<usize>]) -> bool,
) -> Vec<Case> {
    let mut out = Vec::new();
    for &n in ns {
        if !placements.iter().flatten().all(|p| fits(p, n)) {
            continue;
        }
        let per: Vec<Vec<Vec<usize>>> = placements.iter().map(|p| shapes(p, n, max_rank)).collect();
        let mut idx = vec![0usize; per.len()];
        let mut more = true;
        while more {
            if out.len() >= max_cases {
                return out;
            }
            let pick: Vec<Vec<usize>> = idx.iter().zip(&per).map(|(&i, s)| s[i].clone()).collect();
            if accept(&pick) {
                out.push(Case { n, shapes: pick });
            }
            // The next index, the last input fastest.
            more = false;
            for k in (0..per.len()).rev() {
                idx[k] += 1;
                if idx[k] < per[k].len() {
                    more = true;
                    break;
                }
                idx[k] = 0;
            }
        }
    }
    out
}
