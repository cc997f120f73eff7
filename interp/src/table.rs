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
//!
//! A kernel that is not elementwise (a reduction, a view) is recorded call
//! by call instead: for each tuple of input shapes, the output shape or the
//! kernel's refusal, and for each tuple of whole input tensors the output
//! tensor. Its table is built by iteration: a run over a table that lacks
//! calls lists them (`wanted`), the recorder calls the kernel there, and
//! the next run gets further, until nothing is wanted.

use spmd_semantics::{Shape, Tensor, Q};
use std::collections::{BTreeSet, HashMap, HashSet};
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

/// The values one input of a recorded kernel can hold: those of the dtype
/// the kernel was called on. A point outside it (1/2 for an int64 input, 2
/// for a bool) is one where no real call could be made, as 1/3 is for a
/// float64 input: outside the scope, never unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    Float64,
    Integer,
    Bool,
}

impl Domain {
    /// The domain of a dtype as a registry file names it (`float64`,
    /// `int64`, `bool`, ...); a float dtype is called on float64 values.
    pub fn of_dtype(dtype: &str) -> Domain {
        if dtype == "bool" {
            Domain::Bool
        } else if dtype.starts_with("int") || dtype.starts_with("uint") {
            Domain::Integer
        } else {
            Domain::Float64
        }
    }

    fn holds(self, q: &Q) -> bool {
        crate::external::to_f64(q).is_some()
            && match self {
                Domain::Float64 => true,
                Domain::Integer => q.is_integer(),
                Domain::Bool => q.is_zero() || *q == Q::one(),
            }
    }
}

/// What a whole-tensor kernel gave on one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every output value is one float64 holds exactly.
    Exact(Tensor),
    /// Some output value is finite but not exact in float64.
    Inexact,
    /// Some output value is NaN or infinite.
    NonFinite,
}

/// A call of a whole-tensor kernel: its input shapes and their values,
/// one after the other in row-major order.
pub type CallKey = (Vec<Shape>, Vec<Q>);

/// The recorded calls of a kernel that is not elementwise.
#[derive(Debug, Default)]
struct Calls {
    /// The tensor rank of each input the library's claims were asked for:
    /// other ranks are not in the op's scope.
    ranks: Vec<usize>,
    /// Per tuple of input shapes: the output shape, or why the kernel
    /// refused those shapes.
    shapes: HashMap<Vec<Shape>, Result<Shape, String>>,
    values: HashMap<CallKey, Outcome>,
    wanted_shapes: Mutex<BTreeSet<Vec<Shape>>>,
    wanted_calls: Mutex<BTreeSet<CallKey>>,
    visited_shapes: Option<Mutex<HashSet<Vec<Shape>>>>,
    visited_calls: Option<Mutex<HashSet<CallKey>>>,
}

/// One kernel's recorded values.
#[derive(Debug)]
pub struct KernelTable {
    /// How the op is shown: `aten.threshold.default(threshold=0.0, value=2.0)`.
    pub name: String,
    pub arity: usize,
    /// Each input's domain (all float64 unless set by `with_domains`).
    domains: Vec<Domain>,
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
    /// For a kernel that is not elementwise: its recorded calls.
    calls: Option<Calls>,
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
            domains: vec![Domain::Float64; arity],
            values,
            misses: AtomicU64::new(0),
            first_miss: Mutex::new(None),
            unrepresentable: AtomicU64::new(0),
            visited: record_visits.then(|| Mutex::new(HashSet::new())),
            calls: None,
        })
    }

    /// A kernel that is not elementwise, from its recorded calls: per
    /// tuple of input shapes the output shape or a refusal, and per call
    /// the outcome. Inputs of another tensor rank than `ranks` are outside
    /// the op's scope. Conflicting records, a call whose shapes have no
    /// recorded output shape, or an output of another shape are refused.
    pub fn calls(
        name: &str,
        ranks: Vec<usize>,
        shapes: Vec<(Vec<Shape>, Result<Shape, String>)>,
        calls: Vec<(CallKey, Outcome)>,
        record_visits: bool,
    ) -> Result<KernelTable, String> {
        let arity = ranks.len();
        if arity == 0 {
            return Err(format!("{name}: a kernel of no inputs"));
        }
        if shapes.len() + calls.len() > MAX_ROWS {
            return Err(format!(
                "{name}: {} records, more than {MAX_ROWS}",
                shapes.len() + calls.len()
            ));
        }
        let mut sm = HashMap::with_capacity(shapes.len());
        for (ins, out) in shapes {
            if ins.len() != arity {
                return Err(format!(
                    "{name}: a shape record of {} inputs for a kernel of {arity}",
                    ins.len()
                ));
            }
            if let Some(old) = sm.insert(ins.clone(), out.clone()) {
                if old != out {
                    return Err(format!(
                        "{name}: two output shapes recorded for inputs {ins:?}"
                    ));
                }
            }
        }
        let mut vm = HashMap::with_capacity(calls.len());
        for ((ins, vals), out) in calls {
            let n: usize = ins.iter().map(|s| s.iter().product::<usize>()).sum();
            if ins.len() != arity || vals.len() != n {
                return Err(format!(
                    "{name}: a call of {} inputs and {} values for {arity} inputs of shapes {ins:?}",
                    ins.len(),
                    vals.len()
                ));
            }
            match sm.get(&ins) {
                Some(Ok(s)) => {
                    if let Outcome::Exact(t) = &out {
                        if t.shape != *s || t.data.len() != s.iter().product::<usize>() {
                            return Err(format!(
                                "{name}: a call on shapes {ins:?} gave shape {:?}, recorded as {s:?}",
                                t.shape
                            ));
                        }
                    }
                }
                _ => {
                    return Err(format!(
                        "{name}: a call on shapes {ins:?}, for which no output shape is recorded"
                    ))
                }
            }
            let key = (ins, vals);
            if let Some(old) = vm.insert(key.clone(), out.clone()) {
                if old != out {
                    return Err(format!(
                        "{name}: two different outputs recorded for one call on shapes {:?}",
                        key.0
                    ));
                }
            }
        }
        Ok(KernelTable {
            name: name.to_string(),
            arity,
            domains: vec![Domain::Float64; arity],
            values: HashMap::new(),
            misses: AtomicU64::new(0),
            first_miss: Mutex::new(None),
            unrepresentable: AtomicU64::new(0),
            visited: None,
            calls: Some(Calls {
                ranks,
                shapes: sm,
                values: vm,
                visited_shapes: record_visits.then(|| Mutex::new(HashSet::new())),
                visited_calls: record_visits.then(|| Mutex::new(HashSet::new())),
                ..Calls::default()
            }),
        })
    }

    /// The table with each input's domain given (one per input).
    pub fn with_domains(mut self, domains: Vec<Domain>) -> Result<KernelTable, String> {
        if domains.len() != self.arity {
            return Err(format!(
                "{}: {} input dtypes for a kernel of {}",
                self.name,
                domains.len(),
                self.arity
            ));
        }
        self.domains = domains;
        Ok(self)
    }

    /// Whether the kernel is elementwise (a table of points) rather than
    /// recorded call by call.
    pub fn elementwise(&self) -> bool {
        self.calls.is_none()
    }

    fn miss(&self, why: impl FnOnce() -> String) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.first_miss.lock() {
            if m.is_none() {
                *m = Some(why());
            }
        }
    }

    /// The output shape of a kernel recorded call by call, for these input
    /// shapes: `Err` when the shapes are outside its scope, the kernel
    /// refused them, or nothing was recorded for them (then they are
    /// wanted, and counted as a miss). `None` for an elementwise kernel.
    pub fn shape(&self, ins: &[Shape]) -> Option<Result<Shape, String>> {
        let c = self.calls.as_ref()?;
        if ins.len() != self.arity {
            return Some(Err(format!(
                "{}: {} inputs for a kernel of {}",
                self.name,
                ins.len(),
                self.arity
            )));
        }
        if let Some((i, s)) = ins
            .iter()
            .zip(&c.ranks)
            .enumerate()
            .find_map(|(i, (s, &r))| (s.len() != r).then_some((i, r)))
        {
            return Some(Err(format!(
                "{}: input {} has rank {}; the library was asked about rank {s}",
                self.name,
                i + 1,
                ins[i].len()
            )));
        }
        if let Some(v) = &c.visited_shapes {
            if let Ok(mut v) = v.lock() {
                v.insert(ins.to_vec());
            }
        }
        Some(match c.shapes.get(ins) {
            Some(Ok(s)) => Ok(s.clone()),
            Some(Err(why)) => Err(format!("{} refuses shapes {ins:?}: {why}", self.name)),
            None => {
                if let Ok(mut w) = c.wanted_shapes.lock() {
                    w.insert(ins.to_vec());
                }
                self.miss(|| format!("no output shape was recorded for inputs {ins:?}"));
                Err(format!(
                    "{}: no output shape recorded for {ins:?}",
                    self.name
                ))
            }
        })
    }

    fn apply_calls(&self, c: &Calls, args: &[&Tensor]) -> Result<Option<Tensor>, String> {
        let shapes: Vec<Shape> = args.iter().map(|t| t.shape.clone()).collect();
        match self.shape(&shapes) {
            Some(Ok(_)) => {}
            Some(Err(why)) => return Err(why),
            None => unreachable!("a kernel recorded call by call"),
        }
        let outside = args
            .iter()
            .zip(&self.domains)
            .any(|(t, d)| t.data.iter().any(|v| !d.holds(v)));
        let vals: Vec<Q> = args.iter().flat_map(|t| t.data.iter().cloned()).collect();
        let key = (shapes, vals);
        if let Some(v) = &c.visited_calls {
            if let Ok(mut v) = v.lock() {
                v.insert(key.clone());
            }
        }
        match c.values.get(&key) {
            Some(Outcome::Exact(t)) => Ok(Some(t.clone())),
            Some(Outcome::NonFinite) => {
                self.unrepresentable.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            None if outside => {
                self.unrepresentable.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            found => {
                let inexact = found.is_some();
                let call = || format!("{:?} = ({})", key.0, show(&key.1));
                self.miss(|| {
                    if inexact {
                        format!("the kernel's output on {} is not exact in float64", call())
                    } else {
                        format!("no kernel output was recorded for {}", call())
                    }
                });
                if !inexact {
                    if let Ok(mut w) = c.wanted_calls.lock() {
                        w.insert(key);
                    }
                }
                Ok(None)
            }
        }
    }

    /// What a run needed and the table lacks: input shape tuples and calls
    /// (for the recorder to fill in).
    pub fn wanted(&self) -> (Vec<Vec<Shape>>, Vec<CallKey>) {
        let Some(c) = &self.calls else {
            return (Vec::new(), Vec::new());
        };
        let s = c.wanted_shapes.lock().map(|w| w.iter().cloned().collect());
        let v = c.wanted_calls.lock().map(|w| w.iter().cloned().collect());
        (s.unwrap_or_default(), v.unwrap_or_default())
    }

    /// The recorded shapes and calls a run looked up (for `--record`),
    /// sorted.
    #[allow(clippy::type_complexity)]
    pub fn visited_calls(
        &self,
    ) -> (
        Vec<(Vec<Shape>, Result<Shape, String>)>,
        Vec<(CallKey, Outcome)>,
    ) {
        let Some(c) = &self.calls else {
            return (Vec::new(), Vec::new());
        };
        let seen_s = c
            .visited_shapes
            .as_ref()
            .and_then(|v| v.lock().ok().map(|s| s.clone()))
            .unwrap_or_default();
        let seen_c = c
            .visited_calls
            .as_ref()
            .and_then(|v| v.lock().ok().map(|s| s.clone()))
            .unwrap_or_default();
        let mut shapes: Vec<_> = seen_s
            .into_iter()
            .filter_map(|k| c.shapes.get(&k).map(|o| (k, o.clone())))
            .collect();
        shapes.sort();
        let mut calls: Vec<_> = seen_c
            .into_iter()
            .filter_map(|k| c.values.get(&k).map(|o| (k, o.clone())))
            .collect();
        calls.sort_by(|a, b| a.0.cmp(&b.0));
        (shapes, calls)
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
            None if args.iter().zip(&self.domains).any(|(a, d)| !d.holds(a)) => {
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
        if let Some(c) = &self.calls {
            return self.apply_calls(c, args);
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
    fn whole_tensor_calls_are_looked_up_and_missing_ones_wanted() {
        let t2 = |v: [i64; 2]| Tensor::new(vec![2], vec![q(v[0]), q(v[1])]);
        let sum = |v: i64| Tensor::new(vec![], vec![q(v)]);
        let t = KernelTable::calls(
            "sum",
            vec![1],
            vec![
                (vec![vec![2]], Ok(vec![])),
                (vec![vec![3]], Err("refused".into())),
            ],
            vec![
                ((vec![vec![2]], vec![q(1), q(2)]), Outcome::Exact(sum(3))),
                ((vec![vec![2]], vec![q(0), q(4)]), Outcome::Inexact),
                ((vec![vec![2]], vec![q(0), q(8)]), Outcome::NonFinite),
            ],
            true,
        )
        .unwrap();
        assert!(!t.elementwise());
        assert_eq!(t.shape(&[vec![2]]), Some(Ok(vec![])));
        assert!(t
            .shape(&[vec![3]])
            .unwrap()
            .unwrap_err()
            .contains("refused"));
        assert!(
            t.shape(&[vec![1, 1]])
                .unwrap()
                .unwrap_err()
                .contains("rank 1"),
            "another rank is outside the scope, not a miss"
        );
        assert_eq!(t.misses().0, 0);
        assert_eq!(t.apply(&[&t2([1, 2])]).unwrap(), Some(sum(3)));
        assert_eq!(t.apply(&[&t2([0, 4])]).unwrap(), None, "inexact");
        assert_eq!(t.apply(&[&t2([0, 8])]).unwrap(), None, "not finite");
        assert_eq!(t.unrepresentable(), 1);
        assert_eq!(t.apply(&[&t2([5, 6])]).unwrap(), None, "never recorded");
        assert_eq!(t.shape(&[vec![4]]).unwrap().ok(), None, "never recorded");
        assert_eq!(t.misses().0, 3);
        let (shapes, calls) = t.wanted();
        assert_eq!(shapes, vec![vec![vec![4]]]);
        assert_eq!(
            calls,
            vec![(vec![vec![2]], vec![q(5), q(6)])],
            "the inexact call is not wanted"
        );
        let (vs, vc) = t.visited_calls();
        assert_eq!(vs.len(), 2, "[2] and [3]: recorded and looked up");
        assert_eq!(vc.len(), 3);
    }

    #[test]
    fn refuses_inconsistent_call_records() {
        let ok = |s: Vec<usize>| Outcome::Exact(Tensor::new(s, vec![q(1)]));
        // A call whose shapes have no recorded output shape.
        let e = KernelTable::calls(
            "f",
            vec![1],
            vec![],
            vec![((vec![vec![1]], vec![q(1)]), ok(vec![1]))],
            false,
        );
        assert!(e.unwrap_err().contains("no output shape"));
        // An output of another shape than recorded.
        let e = KernelTable::calls(
            "f",
            vec![1],
            vec![(vec![vec![1]], Ok(vec![]))],
            vec![((vec![vec![1]], vec![q(1)]), ok(vec![1]))],
            false,
        );
        assert!(e.unwrap_err().contains("gave shape"));
        // Values that do not fill the shapes.
        let e = KernelTable::calls(
            "f",
            vec![1],
            vec![(vec![vec![2]], Ok(vec![]))],
            vec![((vec![vec![2]], vec![q(1)]), Outcome::Inexact)],
            false,
        );
        assert!(e.unwrap_err().contains("1 values"));
    }

    #[test]
    fn a_point_off_the_input_dtype_is_outside_the_domain_not_a_miss() {
        let rows = vec![(vec![q(1), q(0)], Cell::Exact(q(1)))];
        let t = KernelTable::new("and", 2, rows.clone(), false)
            .unwrap()
            .with_domains(vec![Domain::Integer, Domain::Bool])
            .unwrap();
        assert_eq!(t.at(&[q(1), q(0)]), Some(q(1)));
        assert_eq!(t.at(&[Q::frac(1, 2), q(0)]), None);
        assert_eq!(t.at(&[q(1), q(2)]), None, "2 is no bool");
        assert_eq!((t.unrepresentable(), t.misses().0), (2, 0));
        // Twin: read as float64 inputs, the same points are unchecked.
        let f = KernelTable::new("and", 2, rows, false).unwrap();
        assert_eq!(f.at(&[Q::frac(1, 2), q(0)]), None);
        assert_eq!((f.unrepresentable(), f.misses().0), (0, 1));
        assert!(KernelTable::new("f", 1, vec![], false)
            .unwrap()
            .with_domains(vec![])
            .is_err());
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
