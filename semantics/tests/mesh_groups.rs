//! The per-thread cache behind `Mesh::groups` gives what computing the groups
//! afresh gives, on several meshes asked in turn (meshes that differ only in
//! their names share an entry: the groups depend on the sizes alone); and
//! the check used here catches a cache keyed wrongly (on the axes only,
//! forgetting the sizes).

use spmd_semantics::mesh::RankGroups;
use spmd_semantics::Mesh;
use std::collections::HashMap;

fn meshes() -> Vec<Mesh> {
    vec![
        Mesh::line(2),
        Mesh::line(3),
        Mesh::new(&[("x", 2), ("y", 2)]),
        Mesh::new(&[("x", 2), ("y", 3)]),
        Mesh::new(&[("x", 3), ("y", 2)]),
        // Same sizes as above, other names: the same groups.
        Mesh::new(&[("dp", 2), ("tp", 3)]),
        Mesh::new(&[("x", 2), ("y", 2), ("z", 2)]),
        Mesh::line(1),
    ]
}

fn axis_sets(m: &Mesh) -> Vec<Vec<usize>> {
    let d = m.ndim();
    let mut out = vec![vec![]];
    for a in 0..d {
        out.push(vec![a]);
        for b in 0..d {
            if b != a {
                out.push(vec![a, b]);
            }
        }
    }
    if d == 3 {
        out.push(vec![0, 1, 2]);
        out.push(vec![2, 0, 1]);
    }
    out
}

/// Asks `get` for every (mesh, axes), twice, interleaving the meshes, and
/// compares each answer with the groups computed afresh, and entry by entry
/// with `Mesh::group` and the rank's coordinates.
fn check(mut get: impl FnMut(&Mesh, &[usize]) -> RankGroups) -> Result<(), String> {
    let ms = meshes();
    for _round in 0..2 {
        for ai in 0..8 {
            for m in &ms {
                let sets = axis_sets(m);
                let Some(axes) = sets.get(ai) else { continue };
                let g = get(m, axes);
                if g != RankGroups::compute(m, axes) {
                    return Err(format!("mesh {m} axes {axes:?}: cached != computed"));
                }
                let n: usize = axes.iter().map(|&a| m.axes[a].size).product();
                if g.n != n {
                    return Err(format!("mesh {m} axes {axes:?}: group size {} != {n}", g.n));
                }
                for r in 0..m.num_ranks() {
                    let fresh = m.group(r, axes);
                    let c = m.coords(r);
                    let k = axes.iter().fold(0, |acc, &a| acc * m.axes[a].size + c[a]);
                    if g.members(r) != fresh.as_slice() || g.index(r) != k {
                        return Err(format!("mesh {m} axes {axes:?}: rank {r} group differs"));
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn cached_groups_equal_fresh_ones() {
    check(|m, axes| (*m.groups(axes)).clone()).unwrap();
    // A known group, written out: {x: 2, y: 3} over y, rank 4 = (1, 1).
    let m = Mesh::new(&[("x", 2), ("y", 3)]);
    let g = m.groups(&[1]);
    assert_eq!((g.members(4), g.index(4)), (&[3, 4, 5][..], 1));
    // Over (y, x), flattened row-major: rank 4 is at 1 * 2 + 1.
    let g = m.groups(&[1, 0]);
    assert_eq!((g.members(4), g.index(4)), (&[0, 3, 1, 4, 2, 5][..], 3));
    // And on another thread (the cache is per thread).
    std::thread::spawn(|| check(|m, axes| (*m.groups(axes)).clone()).unwrap())
        .join()
        .unwrap();
}

#[test]
fn cache_keyed_on_axes_only_is_caught() {
    let mut wrong: HashMap<Vec<usize>, RankGroups> = HashMap::new();
    let e = check(|m, axes| {
        wrong
            .entry(axes.to_vec())
            .or_insert_with(|| RankGroups::compute(m, axes))
            .clone()
    })
    .unwrap_err();
    // The second mesh is answered from the first one's entry.
    assert_eq!(e, "mesh {x: 3} axes []: cached != computed");
}
