//! Recorded kernels: an elementwise local op known only on the grid points
//! where a real library's kernel was called (SPEC.md §22.2).
//!
//! `spmd-check registry` replays what a library registers against the
//! values its own kernel gave, recorded once by `peers/` on a dyadic grid.
//! A table maps each tuple of input scalars to the kernel's output there,
//! or to nothing where float64 did not hold the output exactly. Evaluating
//! the table elsewhere (a point never recorded, or one recorded as inexact)
//! is outside its domain: the instance is skipped and counted here, so the
//! verdict can say how much of the scope the real kernel decided.

use spmd_semantics::{Tensor, Q};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The largest table accepted (rows), far above any recorded grid.
pub const MAX_ROWS: usize = 4_000_000;

/// What the kernel gave at one point.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cell {
    /// A value float64 holds exactly.
    Exact(Q),
    /// A finite value float64 may have rounded: unknown exactly.
    Inexact,
    /// NaN or an infinity (a division by zero, say): the op has no
    /// rational value there, so the point is outside its domain.
    NonFinite,
}

/// One kernel's recorded values.
#[derive(Debug)]
pub struct KernelTable {
    /// How the op is shown: `aten.threshold.default(threshold=0.0, value=2.0)`.
    pub name: String,
    pub arity: usize,
    values: HashMap<Vec<Q>, Cell>,
    /// Lookups at a point whose inputs are all float64 values, where the
    /// kernel gave no exact value or none was recorded ...
    misses: AtomicU64,
    first_miss: Mutex<Option<String>>,
    /// ... and lookups at a point some input of which is not a float64
    /// (1/3, say), where no real call could be made, or where the kernel's
    /// value is not finite.
    unrepresentable: AtomicU64,
    /// The points looked up, when recording which rows a run needs.
    visited: Option<Mutex<HashSet<Vec<Q>>>>,
}

impl KernelTable {
    /// A table from its rows: the inputs, then what the kernel gave. Rows
    /// of the wrong length or repeated points with different outputs are
    /// refused.
    pub fn new(
        name: &str,
        arity: usize,
        rows: Vec<(Vec<Q>, Cell)>,
        record_visits: bool,
    ) -> Result<KernelTable, String> {
        if rows.len() > MAX_ROWS {
            return Err(format!("{name}: {} rows, more than {MAX_ROWS}", rows.len()));
        }
        let mut values = HashMap::with_capacity(rows.len());
        for (args, out) in rows {
            if args.len() != arity {
                return Err(format!(
                    "{name}: a row with {} inputs for a kernel of {arity}",
                    args.len()
                ));
            }
            if let Some(old) = values.insert(args.clone(), out.clone()) {
                if old != out {
                    return Err(format!(
                        "{name}: two different outputs recorded at ({})",
                        show(&args)
                    ));
                }
            }
        }
        Ok(KernelTable {
            name: name.to_string(),
            arity,
            values,
            misses: AtomicU64::new(0),
            first_miss: Mutex::new(None),
            unrepresentable: AtomicU64::new(0),
            visited: record_visits.then(|| Mutex::new(HashSet::new())),
        })
    }

    /// The recorded output at one point.
    pub fn at(&self, args: &[Q]) -> Option<Q> {
        if let Some(v) = &self.visited {
            if let Ok(mut v) = v.lock() {
                v.insert(args.to_vec());
            }
        }
        match self.values.get(args) {
            Some(Cell::Exact(q)) => Some(q.clone()),
            Some(Cell::NonFinite) => {
                self.unrepresentable.fetch_add(1, Ordering::Relaxed);
                None
            }
            None if args.iter().any(|a| crate::external::to_f64(a).is_none()) => {
                self.unrepresentable.fetch_add(1, Ordering::Relaxed);
                None
            }
            found => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut m) = self.first_miss.lock() {
                    if m.is_none() {
                        *m = Some(match found {
                            Some(_) => format!(
                                "the kernel's output at ({}) is not exact in float64",
                                show(args)
                            ),
                            _ => format!("no kernel value was recorded at ({})", show(args)),
                        });
                    }
                }
                None
            }
        }
    }

    /// Elementwise application to tensors of one shape (the shapes the
    /// library was asked about: no broadcasting). `None`: some point has
    /// no exact value.
    pub fn apply(&self, args: &[&Tensor]) -> Result<Option<Tensor>, String> {
        if args.len() != self.arity || args.is_empty() {
            return Err(format!(
                "{}: {} arguments for {}",
                self.name,
                args.len(),
                self.arity
            ));
        }
        let shape = args[0].shape.clone();
        let n = args[0].data.len();
        if let Some(t) = args.iter().find(|t| t.shape != shape) {
            return Err(format!(
                "{}: elementwise over shapes {:?} and {:?}",
                self.name, shape, t.shape
            ));
        }
        let mut out = Vec::with_capacity(n);
        let mut point = Vec::with_capacity(self.arity);
        for i in 0..n {
            point.clear();
            point.extend(args.iter().map(|t| t.data[i].clone()));
            match self.at(&point) {
                Some(v) => out.push(v),
                None => return Ok(None),
            }
        }
        Ok(Some(Tensor::new(shape, out)))
    }

    /// Lookups at points with an input that is not a float64, or where the
    /// kernel's value is not finite.
    pub fn unrepresentable(&self) -> u64 {
        self.unrepresentable.load(Ordering::Relaxed)
    }

    /// Lookups at float64 points that found no exact value, and the first
    /// of them.
    pub fn misses(&self) -> (u64, Option<String>) {
        (
            self.misses.load(Ordering::Relaxed),
            self.first_miss.lock().ok().and_then(|m| m.clone()),
        )
    }

    /// The recorded rows at the points looked up (for `--record`), sorted.
    pub fn visited_rows(&self) -> Vec<(Vec<Q>, Cell)> {
        let Some(v) = &self.visited else {
            return Vec::new();
        };
        let seen = v.lock().map(|s| s.clone()).unwrap_or_default();
        let mut rows: Vec<(Vec<Q>, Cell)> = seen
            .into_iter()
            .filter_map(|p| self.values.get(&p).map(|o| (p, o.clone())))
            .collect();
        rows.sort();
        rows
    }
}

fn show(args: &[Q]) -> String {
    args.iter().map(Q::to_string).collect::<Vec<_>>().join(", ")
}

/// A shared table inside an expression; two are equal when they are the
/// same table.
#[derive(Clone, Debug)]
pub struct Table(pub Arc<KernelTable>);

impl PartialEq for Table {
    fn eq(&self, other: &Table) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Table {}

impl std::hash::Hash for Table {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.name.hash(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: i64) -> Q {
        Q::int(n)
    }

    #[test]
    fn looks_up_elementwise_and_counts_misses() {
        let t = KernelTable::new(
            "neg",
            1,
            vec![
                (vec![q(1)], Cell::Exact(q(-1))),
                (vec![q(2)], Cell::Inexact),
                (vec![q(4)], Cell::NonFinite),
            ],
            true,
        )
        .unwrap();
        let x = Tensor::new(vec![2], vec![q(1), q(1)]);
        assert_eq!(t.apply(&[&x]).unwrap().unwrap().data, vec![q(-1), q(-1)]);
        assert_eq!(t.misses().0, 0);
        let y = Tensor::new(vec![1], vec![q(2)]);
        assert_eq!(t.apply(&[&y]).unwrap(), None);
        let z = Tensor::new(vec![1], vec![q(3)]);
        assert_eq!(t.apply(&[&z]).unwrap(), None);
        let third = Tensor::new(vec![1], vec![Q::frac(1, 3)]);
        assert_eq!(t.apply(&[&third]).unwrap(), None);
        assert_eq!(
            t.unrepresentable(),
            1,
            "1/3 is no float64: no call was possible"
        );
        let four = Tensor::new(vec![1], vec![q(4)]);
        assert_eq!(t.apply(&[&four]).unwrap(), None);
        assert_eq!(
            t.unrepresentable(),
            2,
            "a NaN is outside the domain, not a gap"
        );
        let (n, first) = t.misses();
        assert_eq!(n, 2);
        assert!(
            first.unwrap().contains("not exact"),
            "the first miss names why"
        );
        assert_eq!(
            t.visited_rows().len(),
            3,
            "1, 2 and 4 were; 3 and 1/3 never"
        );
    }

    #[test]
    fn refuses_conflicting_rows() {
        let rows = vec![
            (vec![q(1)], Cell::Exact(q(1))),
            (vec![q(1)], Cell::Exact(q(2))),
        ];
        assert!(KernelTable::new("f", 1, rows, false).is_err());
        let short = vec![(vec![], Cell::Exact(q(1)))];
        assert!(KernelTable::new("f", 1, short, false).is_err());
    }
}
