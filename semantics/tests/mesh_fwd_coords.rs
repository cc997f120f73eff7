//! `Mesh::coords`, `Mesh::coord` and `Mesh::with_coord` compute ranks'
//! coordinates by arithmetic, without temporary vectors; here they are
//! compared with the row-major unravelling of `tensor::unravel` and the
//! numbering of `Mesh::rank`, on every rank of several meshes. The twin:
//! strides taken column-major (the first axis fastest) are caught.

use spmd_semantics::tensor::unravel;
use spmd_semantics::Mesh;

fn meshes() -> Vec<Mesh> {
    vec![
        Mesh::line(1),
        Mesh::line(4),
        Mesh::new(&[("x", 2), ("y", 3)]),
        Mesh::new(&[("x", 3), ("y", 1), ("z", 2)]),
        Mesh::new(&[("a", 2), ("b", 2), ("c", 2), ("d", 3)]),
    ]
}

type WithCoord<'a> = &'a dyn Fn(&Mesh, usize, usize, usize) -> usize;

/// The first (mesh, rank, axis) where the arithmetic differs from the
/// unravelled coordinates.
fn check(with_coord: WithCoord) -> Result<usize, String> {
    let mut cases = 0;
    for m in meshes() {
        for r in 0..m.num_ranks() {
            let want = unravel(r, &m.sizes());
            if m.coords(r) != want || m.rank(&want) != r {
                return Err(format!("mesh {m} rank {r}: coords"));
            }
            for a in 0..m.ndim() {
                if m.coord(r, a) != want[a] {
                    return Err(format!("mesh {m} rank {r} axis {a}: coord"));
                }
                for c in 0..m.axes[a].size {
                    let mut co = want.clone();
                    co[a] = c;
                    if with_coord(&m, r, a, c) != m.rank(&co) {
                        return Err(format!("mesh {m} rank {r} axis {a} to {c}: with_coord"));
                    }
                    cases += 1;
                }
            }
        }
    }
    Ok(cases)
}

#[test]
fn coordinates_by_arithmetic_equal_unravelled_ones() {
    let cases = check(&|m, r, a, c| m.with_coord(r, a, c)).unwrap();
    assert!(cases > 100, "{cases}");
}

#[test]
fn column_major_strides_are_caught() {
    let wrong = |m: &Mesh, r: usize, a: usize, c: usize| {
        let st: usize = m.axes[..a].iter().map(|x| x.size).product();
        let cur = r / st % m.axes[a].size;
        r - cur * st + c * st
    };
    let e = check(&wrong).unwrap_err();
    assert_eq!(e, "mesh {x: 2, y: 3} rank 0 axis 0 to 1: with_coord");
}
