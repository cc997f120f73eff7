//! `Collective::forward_into` (offset runs straight from the inputs into
//! reused buffers) against `Collective::forward_reference` (whole-tensor
//! gathers, sums and chunks): every kind, every state pair, several dims,
//! meshes, axis sets and shapes, each written over a buffer that held
//! another result. The twins: a fast path that keeps the buffer's old data,
//! and one that shares a group's result by rank offset rather than by
//! group, are both caught, at the case named. `Collective::spec_into`
//! (the meaning written into reused buffers) is compared with `spec` over
//! the same cases; its twin keeps old buffer data.

use spmd_interp::collective::SpecBufs;
use spmd_interp::{Collective, Kind};
use spmd_semantics::state::State;
use spmd_semantics::tensor::Tensor;
use spmd_semantics::{Denot, Mesh, PerRank, Q};

fn meshes() -> Vec<Mesh> {
    vec![
        Mesh::line(1),
        Mesh::line(2),
        Mesh::line(3),
        Mesh::new(&[("x", 2), ("y", 3)]),
        Mesh::new(&[("x", 3), ("y", 2)]),
        Mesh::new(&[("x", 2), ("y", 2), ("z", 2)]),
    ]
}

/// Every nonempty ordered set of distinct axes.
fn axis_sets(m: &Mesh) -> Vec<Vec<usize>> {
    fn rec(m: &Mesh, pre: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        for a in 0..m.ndim() {
            if !pre.contains(&a) {
                pre.push(a);
                out.push(pre.clone());
                rec(m, pre, out);
                pre.pop();
            }
        }
    }
    let mut out = vec![];
    rec(m, &mut vec![], &mut out);
    out
}

const STATES: [State; 4] = [
    State::Reduced,
    State::Invariant,
    State::Varying,
    State::Partial,
];

/// Every kind with dims up to 2 and, for a group of `n`, a rotation and a
/// permutation that leaves a member without a sender.
fn kinds(n: usize) -> Vec<Kind> {
    let mut out = vec![
        Kind::AllReduce,
        Kind::PMean,
        Kind::Reinterpret,
        Kind::DivideByGroupSize,
        Kind::PPermute {
            perm: (0..n).map(|k| Some((k + 1) % n)).collect(),
            pairs: false,
        },
        Kind::PPermute {
            perm: (0..n).map(|k| (k + 1 < n).then_some(k + 1)).collect(),
            pairs: false,
        },
    ];
    for dim in 0..3 {
        for stack in [false, true] {
            out.push(Kind::AllGather { dim, stack });
            out.push(Kind::ReduceScatter { dim, stack });
            out.push(Kind::Convert { dim, stack });
        }
        for concat in 0..3 {
            out.push(Kind::AllToAll {
                split: dim,
                concat,
                stack: false,
            });
        }
    }
    // Added last, so the cases before them meet the same buffers as before.
    // JAX's partial form: only member 0 sends (to member 1); the rest of the
    // group is past the end of `perm`.
    out.push(Kind::PPermute {
        perm: vec![Some(1 % n)],
        pairs: true,
    });
    // The untiled all_to_all (split dim of the group size, a new dim at
    // concat).
    for split in 0..3 {
        for concat in 0..3 {
            out.push(Kind::AllToAll {
                split,
                concat,
                stack: true,
            });
        }
    }
    out
}

fn shapes(n: usize) -> Vec<Vec<usize>> {
    vec![
        vec![],
        vec![n],
        vec![2 * n],
        vec![n, 2],
        vec![3, n],
        vec![2, n, 2 * n],
        vec![n, 0],
    ]
}

/// A small deterministic generator (no dependency needed).
struct Lcg(u64);
impl Lcg {
    fn q(&mut self) -> Q {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = (self.0 >> 33) as i64;
        Q::frac(v % 19 - 9, v % 5 + 1)
    }
}

fn input(m: &Mesh, shape: &[usize], rng: &mut Lcg) -> PerRank {
    PerRank {
        tensors: (0..m.num_ranks())
            .map(|_| {
                let n = shape.iter().product();
                Tensor::new(shape.to_vec(), (0..n).map(|_| rng.q()).collect())
            })
            .collect(),
    }
}

type Into<'a> = &'a dyn Fn(&Collective, &Mesh, &PerRank, &mut PerRank) -> Result<(), String>;

/// `visit(c, m, shape, x, new_mesh)` at every case above, `new_mesh` on a
/// mesh's first; the first error, or how many cases there were. With
/// `all_states` every kind takes every state pair (the meanings read the
/// source state of reductions too), else only casts do.
type Visit<'a> = dyn FnMut(&Collective, &Mesh, &[usize], &PerRank, bool) -> Result<(), String> + 'a;

fn each_case(all_states: bool, visit: &mut Visit) -> Result<usize, String> {
    let mut rng = Lcg(7);
    let mut cases = 0;
    for m in meshes() {
        let mut new_mesh = true;
        for axes in axis_sets(&m) {
            let n: usize = axes.iter().map(|&a| m.axes[a].size).product();
            for kind in kinds(n) {
                // Only casts read the states in the forward.
                let cast = all_states || matches!(kind, Kind::Convert { .. } | Kind::Reinterpret);
                for src in STATES {
                    for dst in STATES {
                        if !cast && (src, dst) != (State::Varying, State::Invariant) {
                            continue;
                        }
                        let c = Collective {
                            name: "t".into(),
                            kind: kind.clone(),
                            axes: axes.clone(),
                            src,
                            dst,
                        };
                        for s in shapes(n) {
                            if c.infer(&m, &s).is_err() {
                                continue;
                            }
                            let x = input(&m, &s, &mut rng);
                            visit(&c, &m, &s, &x, new_mesh)?;
                            new_mesh = false;
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    Ok(cases)
}

/// The first case where `run` differs from the reference, or how many
/// cases were compared.
fn check(run: Into) -> Result<usize, String> {
    // One buffer per mesh, written over by every case.
    let mut buf = PerRank { tensors: vec![] };
    each_case(false, &mut |c, m, s, x, new_mesh| {
        if new_mesh {
            buf = PerRank { tensors: vec![] };
        }
        let want = c.forward_reference(m, x);
        run(c, m, x, &mut buf).map_err(|e| format!("{e} on {s:?}"))?;
        let plain = c.forward(m, x);
        if buf != want || plain != want {
            return Err(format!(
                "mesh {m} axes {:?} {:?} {}->{} shape {s:?}",
                c.axes, c.kind, c.src, c.dst
            ));
        }
        Ok(())
    })
}

type SpecInto<'a> = &'a dyn Fn(&Collective, &Mesh, &Denot, &mut Denot, &mut SpecBufs);

/// `Collective::spec_into` (`run`) against `spec` at every case, each
/// written over the last case's result and group buffers: the first case
/// that differs, or how many were compared.
fn check_spec(run: SpecInto) -> Result<usize, String> {
    let mut out = Denot { family: vec![] };
    let mut w = SpecBufs::default();
    each_case(true, &mut |c, m, s, x, _| {
        let d = Denot {
            family: x.tensors.clone(),
        };
        run(c, m, &d, &mut out, &mut w);
        if out != c.spec(m, &d) {
            return Err(format!(
                "mesh {m} axes {:?} {:?} {}->{} shape {s:?}",
                c.axes, c.kind, c.src, c.dst
            ));
        }
        Ok(())
    })
}

#[test]
fn spec_into_equals_spec() {
    let cases = check_spec(&|c, m, d, out, w| c.spec_into(m, d, out, w)).unwrap();
    assert!(cases > 5000, "{cases}");
}

#[test]
fn a_spec_into_that_keeps_old_buffer_data_is_caught() {
    // Writes the right meaning, then appends what the buffer held before.
    let stale = |c: &Collective, m: &Mesh, d: &Denot, out: &mut Denot, w: &mut SpecBufs| {
        let old = out.clone();
        c.spec_into(m, d, out, w);
        for (t, o) in out.family.iter_mut().zip(&old.family) {
            if t.shape == o.shape && !t.shape.is_empty() {
                t.data.extend_from_slice(&o.data);
                t.shape[0] *= 2;
            }
        }
    };
    assert!(check_spec(&stale).is_err());
}

#[test]
fn forward_into_equals_the_reference_forward() {
    let cases = check(&|c, m, x, out| c.forward_into(m, x, out)).unwrap();
    // Enough cases that every kind met several meshes and shapes.
    eprintln!("{cases} cases");
    assert!(cases > 5000, "{cases}");
}

#[test]
fn forward_into_refuses_what_infer_refuses() {
    let m = Mesh::line(2);
    let c = Collective {
        name: "t".into(),
        kind: Kind::ReduceScatter {
            dim: 0,
            stack: false,
        },
        axes: vec![0],
        src: State::Partial,
        dst: State::Varying,
    };
    let x = input(&m, &[3], &mut Lcg(1));
    let mut out = PerRank { tensors: vec![] };
    let e = c.forward_into(&m, &x, &mut out).unwrap_err();
    assert!(e.contains("not divisible by 2"), "{e}");
    assert!(out.tensors.is_empty());
}

#[test]
fn a_fast_path_that_keeps_old_buffer_data_is_caught() {
    // Writes the right result, then appends what the buffer held before.
    let stale = |c: &Collective, m: &Mesh, x: &PerRank, out: &mut PerRank| {
        let old = out.clone();
        c.forward_into(m, x, out)?;
        for (t, o) in out.tensors.iter_mut().zip(&old.tensors) {
            if t.shape == o.shape && !t.shape.is_empty() {
                t.data.extend_from_slice(&o.data);
                t.shape[0] *= 2;
            }
        }
        Ok(())
    };
    let e = check(&stale).unwrap_err();
    assert_eq!(
        e,
        "mesh {x: 1} axes [0] AllGather { dim: 2, stack: false } V->I shape [2, 1, 2]"
    );
}

#[test]
fn sharing_a_result_by_rank_offset_instead_of_group_is_caught() {
    // Rank r takes rank (r - k)'s result, as if groups were runs of
    // consecutive ranks: wrong when the group's axes are not the last.
    let shifted = |c: &Collective, m: &Mesh, x: &PerRank, out: &mut PerRank| {
        c.forward_into(m, x, out)?;
        let groups = m.groups(&c.axes);
        if matches!(c.kind, Kind::AllReduce) {
            for r in 0..m.num_ranks() {
                let k = groups.index(r);
                out.tensors[r] = out.tensors[r - k].clone();
            }
        }
        Ok(())
    };
    let e = check(&shifted).unwrap_err();
    assert_eq!(e, "mesh {x: 2, y: 3} axes [0] AllReduce V->I shape []");
}

/// `Op::collectives_into` of a chain of `len` copies of each case's
/// collective (where the shapes allow) against `Op::forward`, written over
/// the last case's buffer: the first case that differs, or how many were
/// compared. `links` is how many links `collectives_into` is given.
fn check_chains(len: usize, links: usize) -> Result<usize, String> {
    use spmd_interp::Op;
    let mut buf = PerRank { tensors: vec![] };
    let mut compared = 0;
    each_case(false, &mut |c, m, s, x, _| {
        let chain = |k: usize| Op::Compose(vec![Op::Collective(c.clone()); k]);
        if chain(len).infer(m, &[s.to_vec()]).is_err() {
            return Ok(());
        }
        let want = chain(len).forward(m, std::slice::from_ref(x)).map(|f| f.y);
        let got = chain(links)
            .collectives_into(m, x, &mut buf)
            .expect("a chain of collectives")
            .map(|()| buf.clone());
        if got != want {
            return Err(format!(
                "mesh {m} axes {:?} {:?} {}->{} shape {s:?}",
                c.axes, c.kind, c.src, c.dst
            ));
        }
        compared += 1;
        Ok(())
    })?;
    Ok(compared)
}

#[test]
fn a_chain_of_collectives_into_buffers_is_its_forward() {
    for len in 1..=3 {
        let n = check_chains(len, len).unwrap();
        assert!(n > 1000, "{len} links: {n} compared");
    }
}

#[test]
fn a_chain_missing_a_link_is_caught() {
    assert!(check_chains(3, 2).is_err());
}
