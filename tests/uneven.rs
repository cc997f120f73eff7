//! Uneven shards (SPEC.md §23.4): the split rules against DTensor's own
//! split (recorded by peers/record_split_sizes.py), and what pieces of
//! different lengths denote. Twins: a piece missing a row (a wrong unpad)
//! and pieces laid out by another rule are not well formed.

use spmd_check::semantics::uneven::Split;
use spmd_check::semantics::{Tensor, Q};

#[derive(serde::Deserialize)]
struct Row {
    len: usize,
    n: usize,
    sizes: Vec<usize>,
    offsets: Vec<usize>,
}

#[derive(serde::Deserialize)]
struct Recorded {
    rows: Vec<Row>,
}

fn rows(len: usize, width: usize) -> Tensor {
    Tensor::new(
        vec![len, width],
        (0..len * width).map(|i| Q::int(i as i64 + 1)).collect(),
    )
}

#[test]
fn chunk_splits_as_dtensor_does() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/dtensor_split_sizes.json"
    ))
    .expect("the recording reads");
    let rec: Recorded = serde_json::from_str(&text).expect("the recording parses");
    assert_eq!(rec.rows.len(), 50);
    for r in &rec.rows {
        assert_eq!(
            Split::Chunk.sizes(r.len, r.n).unwrap(),
            r.sizes,
            "len {} over {}",
            r.len,
            r.n
        );
        let offsets: Vec<usize> = r
            .sizes
            .iter()
            .scan(0, |at, s| {
                let o = *at;
                *at += s;
                Some(o)
            })
            .collect();
        assert_eq!(offsets, r.offsets, "len {} over {}", r.len, r.n);
    }
}

#[test]
fn every_rule_covers_the_dim_and_round_trips() {
    for len in 0..12 {
        for n in 1..6 {
            let d = Split::Divmod.sizes(len, n).unwrap();
            assert_eq!(d.iter().sum::<usize>(), len);
            assert!(d.iter().max().unwrap() - d.iter().min().unwrap() <= 1);
            assert!(d.windows(2).all(|w| w[0] >= w[1]));
            let c = Split::Chunk.sizes(len, n).unwrap();
            assert_eq!(c.iter().sum::<usize>(), len);
            let t = rows(len, 2);
            for rule in [Split::Chunk, Split::Divmod, Split::Sizes(d.clone())] {
                let pieces = rule.split(&t, 0, n).unwrap();
                assert_eq!(pieces.len(), n);
                assert_eq!(
                    rule.denote(&pieces, 0),
                    Some(t.clone()),
                    "{rule:?} {len} over {n}"
                );
            }
        }
    }
    assert_eq!(Split::Chunk.sizes(5, 4).unwrap(), [2, 2, 1, 0]);
    assert_eq!(Split::Divmod.sizes(5, 4).unwrap(), [2, 1, 1, 1]);
    assert_eq!(Split::Chunk.sizes(1, 4).unwrap(), [1, 0, 0, 0]);
}

#[test]
fn given_sizes_are_checked() {
    let bad = |s: Vec<usize>, len, n| Split::Sizes(s).sizes(len, n).unwrap_err();
    assert!(bad(vec![3, 2], 5, 3).contains("2 sizes for 3 ranks"));
    assert!(bad(vec![3, 1], 5, 2).contains("summing to 4"));
    assert!(bad(vec![usize::MAX, 1], 5, 2).contains("overflow"));
    assert!(Split::Chunk.sizes(3, 0).is_err());
    assert!(Split::Chunk.split(&rows(3, 1), 2, 2).is_err());
}

/// A wrong unpad drops a row of the last non-empty piece: the pieces no
/// longer fit the split of any length, so they denote nothing (not a
/// shorter tensor). Pieces split by one rule are not well formed under
/// another where the sizes differ (DTensor's chunk against an even
/// divmod split, the mismatch `from_local` accepts).
#[test]
fn pieces_that_do_not_fit_the_split_denote_nothing() {
    let t = rows(5, 1);
    let mut pieces = Split::Chunk.split(&t, 0, 4).unwrap();
    assert_eq!(
        pieces.iter().map(|p| p.shape[0]).collect::<Vec<_>>(),
        [2, 2, 1, 0]
    );
    assert_eq!(Split::Chunk.denote(&pieces, 0), Some(t.clone()));
    let divmod = Split::Divmod.split(&t, 0, 4).unwrap();
    assert_eq!(Split::Chunk.denote(&divmod, 0), None);
    assert_eq!(Split::Divmod.denote(&pieces, 0), None);
    pieces[2] = pieces[2].slice(0, 0, 0);
    assert_eq!(Split::Chunk.denote(&pieces, 0), None);
    // Pieces that disagree off the split dim are not one tensor.
    let odd = vec![rows(2, 1), rows(2, 2)];
    assert_eq!(Split::Chunk.denote(&odd, 0), None);
}
