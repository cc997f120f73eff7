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
        "/tests/fixtures/uneven/dtensor_split_sizes.json"
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

#[derive(serde::Deserialize)]
struct Case {
    mesh: Vec<usize>,
    shape: Vec<usize>,
    src: Vec<String>,
    dst: Vec<String>,
    before: Option<Vec<Option<String>>>,
    after: Option<Vec<Option<String>>>,
    refused: Option<String>,
}

#[derive(serde::Deserialize)]
struct UnevenFile {
    cases: Vec<Case>,
}

/// The recorded local tensors, if each is exact in float64.
fn tensors(ls: &Option<Vec<Option<String>>>) -> Option<Vec<Tensor>> {
    ls.as_ref()?
        .iter()
        .map(|l| spmd_check::registry::parse_tensor(l.as_deref()?).ok())
        .collect()
}

/// What pieces on one mesh dim denote under a DTensor placement, with
/// Shard split as DTensor splits (chunk).
fn denote_one(pieces: &[Tensor], p: &str) -> Option<Tensor> {
    match p {
        "R" => pieces
            .iter()
            .all(|t| t == &pieces[0])
            .then(|| pieces[0].clone()),
        "P(sum)" => {
            let first = &pieces[0];
            pieces
                .iter()
                .all(|t| t.shape == first.shape)
                .then(|| pieces[1..].iter().fold(first.clone(), |a, t| a.add(t)))
        }
        s => {
            let d: usize = s.strip_prefix("S(")?.strip_suffix(')')?.parse().ok()?;
            Split::Chunk.denote(pieces, d)
        }
    }
}

/// What the per-rank tensors of a 1-D or 2x2 mesh denote: DTensor splits
/// mesh dim 0 first and each piece again over mesh dim 1, so the inner
/// pieces (ranks differing in the last mesh coordinate) are combined
/// first.
fn denote(mesh: &[usize], locals: &[Tensor], placements: &[String]) -> Option<Tensor> {
    match mesh {
        [_] => denote_one(locals, &placements[0]),
        [a, b] => {
            let inner: Option<Vec<Tensor>> = (0..*a)
                .map(|i| denote_one(&locals[i * b..(i + 1) * b], &placements[1]))
                .collect();
            denote_one(&inner?, &placements[0])
        }
        _ => None,
    }
}

/// DTensor's redistribute on uneven shards (peers/record_uneven_dtensor.py,
/// torch 2.14.1 and 2.15.0): every recorded case, 1-D meshes of 2 to 4 ranks and 2x2,
/// lengths from empty to past twice the ranks. The shards DTensor makes
/// denote the global tensor under its placement, nested shards on 2x2
/// split dim by dim (for 5 rows over [S(0), S(0)]: 2, 1, 1, 1, where one
/// split over 4 ranks gives 2, 2, 1, 0), and redistribute keeps the
/// global value (42 cases with a Partial(sum) piece over 3 ranks are not
/// exact in float64 and are left out). Its only refusals are Replicate to
/// Partial. The twin: an output with a row lost is caught.
#[test]
fn dtensor_redistributes_uneven_shards_keeping_the_value() {
    for name in ["dtensor_uneven.json", "dtensor_uneven_2.15.0.json"] {
        check_uneven_recording(name);
    }
}

fn check_uneven_recording(name: &str) {
    let path = format!(
        "{}/tests/fixtures/uneven/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("the recording reads");
    let file: UnevenFile = serde_json::from_str(&text).expect("the recording parses");
    assert_eq!(file.cases.len(), 1440, "{name}");
    let (mut checked, mut inexact) = (0, 0);
    for c in &file.cases {
        if let Some(why) = &c.refused {
            assert!(
                c.src == ["R"] && c.dst == ["P(sum)"] && why.contains("Can not redistribute"),
                "{:?} -> {:?} {:?}: {why}",
                c.src,
                c.dst,
                c.shape
            );
            continue;
        }
        let n: usize = c.shape.iter().product();
        let global = Tensor::new(c.shape.clone(), (1..=n as i64).map(Q::int).collect());
        let (Some(before), Some(after)) = (tensors(&c.before), tensors(&c.after)) else {
            // A Partial(sum) piece of a value split over 3 ranks.
            assert!(
                c.src.iter().chain(&c.dst).any(|p| p == "P(sum)"),
                "{:?}",
                c.shape
            );
            inexact += 1;
            continue;
        };
        assert_eq!(
            denote(&c.mesh, &before, &c.src).as_ref(),
            Some(&global),
            "{:?} {:?} {:?}",
            c.mesh,
            c.src,
            c.shape
        );
        assert_eq!(
            denote(&c.mesh, &after, &c.dst).as_ref(),
            Some(&global),
            "{:?} {:?} -> {:?} {:?}",
            c.mesh,
            c.src,
            c.dst,
            c.shape
        );
        checked += 1;
    }
    assert_eq!((checked, inexact), (1350, 42), "{name}");
    let nested = file
        .cases
        .iter()
        .find(|c| c.mesh == [2, 2] && c.src == ["S(0)", "S(0)"] && c.shape == [5, 3])
        .expect("the nested case");
    let rows: Vec<usize> = tensors(&nested.before)
        .expect("exact")
        .iter()
        .map(|t| t.shape[0])
        .collect();
    assert_eq!(rows, [2, 1, 1, 1]);
    assert_eq!(Split::Chunk.sizes(5, 4).unwrap(), [2, 2, 1, 0]);
    // The twin: a gathered output that lost a row denotes nothing.
    let c = file
        .cases
        .iter()
        .find(|c| c.mesh == [4] && c.src == ["S(0)"] && c.dst == ["R"] && c.shape == [5, 2])
        .expect("S(0) -> R of 5 rows");
    let mut after = tensors(&c.after).expect("exact");
    after[3] = after[3].slice(0, 0, 4);
    assert_eq!(denote(&c.mesh, &after, &c.dst), None);
}

/// The class of pytorch PR #194457 (SPEC.md §23.6): nested [S(0), S(0)]
/// shards of 5 rows on 2x2, as DTensor lays them out (2, 1, 1, 1 rows),
/// gathered in one step over the flattened mesh with pad-then-unpad by a
/// single chunk split (2, 2, 1, 0): the global tensor that comes out has
/// the last rank's row lost and a padding row in the second rank's place.
/// Pieces laid out by one chunk split over the flattened mesh (as Nabla
/// lays out a dim sharded over two axes) come out right.
#[test]
fn a_flattened_gather_of_nested_uneven_shards_loses_a_row() {
    let t = rows(5, 1);
    let outer = Split::Chunk.split(&t, 0, 2).unwrap();
    let nested: Vec<Tensor> = outer
        .iter()
        .flat_map(|p| Split::Chunk.split(p, 0, 2).unwrap())
        .collect();
    assert_eq!(
        nested.iter().map(|p| p.shape[0]).collect::<Vec<_>>(),
        [2, 1, 1, 1]
    );
    let out = spmd_check::semantics::uneven::flat_gather_padded(&nested, 0).unwrap();
    let got: Vec<String> = out.data.iter().map(|q| q.to_string()).collect();
    assert_eq!(got, ["1", "2", "3", "0", "4"]);
    assert_ne!(out, t);
    // The nested pieces are not a chunk split over 4 ranks at all.
    assert_eq!(Split::Chunk.denote(&nested, 0), None);
    // Laid out by one chunk split over the 4 ranks, the same gather is right.
    let flat = Split::Chunk.split(&t, 0, 4).unwrap();
    assert_eq!(
        spmd_check::semantics::uneven::flat_gather_padded(&flat, 0),
        Some(t)
    );
}

#[derive(serde::Deserialize)]
struct SpmdCase {
    op: String,
    n: usize,
    split_sizes: Vec<usize>,
    input: Vec<Option<String>>,
    output: Option<Vec<Option<String>>>,
    refused: Option<String>,
    backward_error: Option<String>,
}

#[derive(serde::Deserialize)]
struct SpmdFile {
    cases: Vec<SpmdCase>,
}

/// spmd_types' `all_gather(src=S(0), dst=R, split_sizes=…)`
/// (peers/record_uneven_spmd_types.py): on 2 to 4 ranks, every length up
/// to 2n+1 split as DTensor does, as divmod and all on the last rank, the
/// output on every rank is the concatenation of the pieces in the given
/// sizes. Its backward and `reduce_scatter` with split_sizes cannot run
/// under LocalTensorMode (they index a list by the symbolic rank); the
/// recording says so and nothing is concluded from them. The twin: pieces
/// read with other sizes denote nothing.
#[test]
fn spmd_types_gathers_uneven_pieces_in_the_given_sizes() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/uneven/spmd_types_uneven.json"
    ))
    .expect("the recording reads");
    let file: SpmdFile = serde_json::from_str(&text).expect("the recording parses");
    let mut gathered = 0;
    for c in &file.cases {
        let limit = |e: &Option<String>| e.as_deref().is_some_and(|e| e.contains("LocalIntNode"));
        if c.op == "reduce_scatter" {
            assert!(limit(&c.refused), "{:?}", c.refused);
            continue;
        }
        assert!(
            c.refused.is_none() && limit(&c.backward_error),
            "{:?}",
            c.backward_error
        );
        let pieces: Vec<Tensor> = c
            .input
            .iter()
            .map(|t| spmd_check::registry::parse_tensor(t.as_deref().expect("exact")).unwrap())
            .collect();
        let rule = Split::Sizes(c.split_sizes.clone());
        let global = rule.denote(&pieces, 0).expect("the pieces fit their sizes");
        for out in c.output.as_ref().expect("an output") {
            let out = spmd_check::registry::parse_tensor(out.as_deref().expect("exact")).unwrap();
            assert_eq!(out, global, "{:?} on {}", c.split_sizes, c.n);
        }
        if c.split_sizes.iter().filter(|&&s| s > 0).count() > 1 {
            let mut other = c.split_sizes.clone();
            other.rotate_left(1);
            if other != c.split_sizes {
                assert_eq!(Split::Sizes(other).denote(&pieces, 0), None);
            }
        }
        gathered += 1;
    }
    assert_eq!(gathered, 72);
}
