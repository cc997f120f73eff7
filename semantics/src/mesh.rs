//! Device meshes and ranks (SPEC.md §2.1).

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Axis {
    pub name: String,
    pub size: usize,
}

/// An ordered list of named axes. Ranks are numbered row-major over the
/// axes' coordinates (the last axis varies fastest).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mesh {
    pub axes: Vec<Axis>,
}

impl Mesh {
    pub fn new(axes: &[(&str, usize)]) -> Mesh {
        Mesh {
            axes: axes
                .iter()
                .map(|&(n, s)| Axis {
                    name: n.to_string(),
                    size: s,
                })
                .collect(),
        }
    }
    /// A one-axis mesh named `x`.
    pub fn line(n: usize) -> Mesh {
        Mesh::new(&[("x", n)])
    }
    #[inline]
    pub fn ndim(&self) -> usize {
        self.axes.len()
    }
    #[inline]
    pub fn num_ranks(&self) -> usize {
        self.axes.iter().map(|a| a.size).product()
    }
    pub fn sizes(&self) -> Vec<usize> {
        self.axes.iter().map(|a| a.size).collect()
    }
    pub fn axis_index(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|a| a.name == name)
    }
    /// Every coordinate of `rank`, one per axis.
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        let mut c = vec![0; self.axes.len()];
        let mut rest = rank;
        for (ci, a) in c.iter_mut().zip(&self.axes).rev() {
            *ci = rest % a.size;
            rest /= a.size;
        }
        c
    }
    /// Coordinate `axis` of `rank` (entry `axis` of [`Mesh::coords`]),
    /// without building the others.
    #[inline]
    pub fn coord(&self, rank: usize, axis: usize) -> usize {
        rank / self.stride(axis) % self.axes[axis].size
    }
    /// How far apart two ranks are that differ by one along `axis` (the
    /// product of the later axes' sizes).
    #[inline]
    pub fn stride(&self, axis: usize) -> usize {
        self.axes[axis + 1..].iter().map(|a| a.size).product()
    }
    #[inline]
    pub fn rank(&self, coords: &[usize]) -> usize {
        coords
            .iter()
            .zip(&self.axes)
            .fold(0, |acc, (&c, a)| acc * a.size + c)
    }
    /// The ranks that differ from `rank` only along `axes`, row-major over
    /// those axes (a flattened group, SPEC.md §10.1).
    pub fn group(&self, rank: usize, axes: &[usize]) -> Vec<usize> {
        let sizes: Vec<usize> = axes.iter().map(|&a| self.axes[a].size).collect();
        let base = self.coords(rank);
        (0..sizes.iter().product::<usize>())
            .map(|j| {
                let off = crate::tensor::unravel(j, &sizes);
                let mut c = base.clone();
                for (i, &a) in axes.iter().enumerate() {
                    c[a] = off[i];
                }
                self.rank(&c)
            })
            .collect()
    }
    /// Every rank's group over `axes` (what [`Mesh::group`] gives, for all
    /// ranks at once) and its index in it, from a small per-thread cache
    /// keyed by the axes' sizes and the axes: collectives ask for the same
    /// groups on every call, and computing them allocates per rank and
    /// member. The groups depend on the sizes alone (ranks are row-major
    /// over the coordinates), so the names are not compared.
    pub fn groups(&self, axes: &[usize]) -> Rc<RankGroups> {
        GROUP_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            let same_sizes = |sizes: &[usize]| {
                sizes.len() == self.axes.len()
                    && sizes.iter().zip(&self.axes).all(|(s, a)| *s == a.size)
            };
            if let Some(i) = c
                .iter()
                .position(|(sizes, a, _)| crate::tensor::same_shape(a, axes) && same_sizes(sizes))
            {
                // Move to the front: a case asks for a few groups again
                // and again.
                c[..=i].rotate_right(1);
                return c[0].2.clone();
            }
            let g = Rc::new(RankGroups::compute(self, axes));
            if c.len() >= GROUP_CACHE_CAP {
                c.clear();
            }
            let sizes = self.axes.iter().map(|a| a.size).collect();
            c.insert(0, (sizes, axes.to_vec(), g.clone()));
            g
        })
    }
    /// The rank reached from `rank` by setting coordinate `axis` to `c`.
    #[inline]
    pub fn with_coord(&self, rank: usize, axis: usize, c: usize) -> usize {
        let st = self.stride(axis);
        rank - (rank / st % self.axes[axis].size) * st + c * st
    }
}

/// How many (sizes, axes) entries a thread keeps before starting afresh.
const GROUP_CACHE_CAP: usize = 64;

type GroupCacheEntries = Vec<(Vec<usize>, Vec<usize>, Rc<RankGroups>)>;

thread_local! {
    static GROUP_CACHE: RefCell<GroupCacheEntries> = const { RefCell::new(Vec::new()) };
}

/// The groups of one set of mesh axes: for each rank, the ranks of its
/// group (row-major over the axes, as [`Mesh::group`]) and its index there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankGroups {
    /// The group size.
    pub n: usize,
    /// Rank r's group is `members[r * n..(r + 1) * n]`.
    members: Vec<usize>,
    index: Vec<usize>,
}

impl RankGroups {
    /// Computed afresh from [`Mesh::group`] and [`Mesh::coords`] (no cache).
    pub fn compute(m: &Mesh, axes: &[usize]) -> RankGroups {
        let n = axes.iter().map(|&a| m.axes[a].size).product();
        let mut members = Vec::with_capacity(m.num_ranks() * n);
        let mut index = Vec::with_capacity(m.num_ranks());
        for r in 0..m.num_ranks() {
            members.extend(m.group(r, axes));
            let c = m.coords(r);
            index.push(axes.iter().fold(0, |acc, &a| acc * m.axes[a].size + c[a]));
        }
        RankGroups { n, members, index }
    }
    /// The ranks of `r`'s group.
    #[inline]
    pub fn members(&self, r: usize) -> &[usize] {
        &self.members[r * self.n..(r + 1) * self.n]
    }
    /// `r`'s index in its group.
    #[inline]
    pub fn index(&self, r: usize) -> usize {
        self.index[r]
    }
}

impl fmt::Display for Mesh {
    /// `{x: 2}` or `{dp: 2, tp: 3}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{")?;
        for (i, a) in self.axes.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{}: {}", a.name, a.size)?;
        }
        write!(f, "}}")
    }
}
