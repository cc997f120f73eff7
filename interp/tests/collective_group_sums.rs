//! The collectives' forwards and specs share each group's sum (and gather)
//! among the group's members (computed once per group); here they are
//! compared with a per-rank sum (gather) written out from `Mesh::group`, on several meshes and
//! axis sets. The twin: sharing the sum by the rank's index in its group
//! (rather than by its group) is caught.

use spmd_interp::{Collective, Kind};
use spmd_semantics::state::State;
use spmd_semantics::tensor::Tensor;
use spmd_semantics::{Denot, Mesh, PerRank, Q};

fn meshes() -> Vec<Mesh> {
    vec![
        Mesh::line(3),
        Mesh::new(&[("x", 2), ("y", 3)]),
        Mesh::new(&[("x", 2), ("y", 2), ("z", 2)]),
    ]
}

fn axis_sets(m: &Mesh) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (0..m.ndim()).map(|a| vec![a]).collect();
    if m.ndim() > 1 {
        out.push(vec![1, 0]);
    }
    out
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind::AllReduce,
        Kind::PMean,
        Kind::ReduceScatter {
            dim: 0,
            stack: false,
        },
        Kind::AllGather {
            dim: 0,
            stack: false,
        },
        Kind::AllGather {
            dim: 0,
            stack: true,
        },
    ]
}

fn collective(kind: Kind, axes: &[usize]) -> Collective {
    Collective {
        name: "t".into(),
        kind,
        axes: axes.to_vec(),
        src: State::Varying,
        dst: State::Invariant,
    }
}

/// Per rank r, a tensor of shape [n * 2] with entries unique to r.
fn input(m: &Mesh, n: usize) -> Vec<Tensor> {
    (0..m.num_ranks())
        .map(|r| {
            let data = (0..n * 2)
                .map(|i| Q::frac((r * 100 + i) as i64 + 1, (i % 3) as i64 + 1))
                .collect();
            Tensor::new(vec![n * 2], data)
        })
        .collect()
}

/// What rank r gets: its group's sum, written out, then the kind's step.
fn reference(c: &Collective, m: &Mesh, ts: &[Tensor], r: usize) -> Tensor {
    let g = m.group(r, &c.axes);
    let co = m.coords(r);
    let k = c
        .axes
        .iter()
        .fold(0, |acc, &a| acc * m.axes[a].size + co[a]);
    let n = g.len();
    if let Kind::AllGather { stack, .. } = c.kind {
        let parts: Vec<Tensor> = g.iter().map(|&q| ts[q].clone()).collect();
        return if stack {
            Tensor::stack(&parts, 0)
        } else {
            Tensor::concat(&parts, 0)
        };
    }
    let mut s = ts[g[0]].clone();
    for &q in &g[1..] {
        s = s.add(&ts[q]);
    }
    match c.kind {
        Kind::AllReduce => s,
        Kind::PMean => s.scale(&Q::frac(1, n as i64)),
        _ => s.chunk(n, 0)[k].clone(),
    }
}

type Run<'a> = &'a dyn Fn(&Collective, &Mesh, &[Tensor]) -> Vec<Tensor>;

fn check(run: Run) -> Result<(), String> {
    for m in meshes() {
        for axes in axis_sets(&m) {
            for kind in kinds() {
                let c = collective(kind, &axes);
                let ts = input(&m, c.group_size(&m));
                let got = run(&c, &m, &ts);
                for (r, t) in got.iter().enumerate() {
                    if *t != reference(&c, &m, &ts, r) {
                        return Err(format!("mesh {m} axes {axes:?} {:?}: rank {r}", c.kind));
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn shared_group_sums_equal_per_rank_sums() {
    check(&|c, m, ts| {
        c.forward(
            m,
            &PerRank {
                tensors: ts.to_vec(),
            },
        )
        .tensors
    })
    .unwrap();
    check(&|c, m, ts| {
        c.spec(
            m,
            &Denot {
                family: ts.to_vec(),
            },
        )
        .family
    })
    .unwrap();
}

#[test]
fn sums_shared_by_index_instead_of_group_are_caught() {
    // Rank r's result taken from the first rank with r's index in its group.
    let wrong = |c: &Collective, m: &Mesh, ts: &[Tensor]| {
        let right = c.forward(
            m,
            &PerRank {
                tensors: ts.to_vec(),
            },
        );
        let index = |r: usize| {
            let co = m.coords(r);
            c.axes
                .iter()
                .fold(0, |acc, &a| acc * m.axes[a].size + co[a])
        };
        (0..m.num_ranks())
            .map(|r| {
                let first = (0..m.num_ranks()).find(|&q| index(q) == index(r)).unwrap();
                right.tensors[first].clone()
            })
            .collect()
    };
    let e = check(&wrong).unwrap_err();
    // On one group (line 3) the index names the group member: no harm; the
    // 2x3 mesh's second group is answered from the first.
    assert_eq!(e, "mesh {x: 2, y: 3} axes [0] AllReduce: rank 1");
}
