//! Device meshes and ranks (SPEC.md §2.1).

use std::fmt;

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
    pub fn ndim(&self) -> usize {
        self.axes.len()
    }
    pub fn num_ranks(&self) -> usize {
        self.axes.iter().map(|a| a.size).product()
    }
    pub fn sizes(&self) -> Vec<usize> {
        self.axes.iter().map(|a| a.size).collect()
    }
    pub fn axis_index(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|a| a.name == name)
    }
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        crate::tensor::unravel(rank, &self.sizes())
    }
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
    /// The rank reached from `rank` by setting coordinate `axis` to `c`.
    pub fn with_coord(&self, rank: usize, axis: usize, c: usize) -> usize {
        let mut co = self.coords(rank);
        co[axis] = c;
        self.rank(&co)
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
