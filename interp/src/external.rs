//! External kernels: a local op whose forward (and optionally backward) is a
//! closure — a user's real kernel, a JAX or PyTorch function called from
//! Python — with a declared degree (SPEC.md §20.4).
//!
//! The closure computes in float64, so it is called only where float64 is
//! exact: every argument must be a dyadic rational in the float64 window
//! (`to_f64`), and every returned value must lie in it too (`from_f64`).
//! A call refused for either reason, or a kernel that fails, is counted in
//! `refused` and reported to the oracle as outside the domain, so that case
//! is skipped; whoever reads the verdict must then say it is undetermined
//! (`External::refused`). The verdict is exact for the real kernel on the
//! points where it was called.

use crate::eval::{Degree, EvalError};
use crate::op::Forward;
use spmd_semantics::perrank::Denot;
use spmd_semantics::{Mesh, PerRank, Shape, Tensor, Q};
use std::sync::{Arc, Mutex};

/// Why a kernel call gave no exact value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// An argument or a result is not exactly a float64 in the window.
    Inexact(String),
    /// The kernel raised or returned the wrong shape.
    Failed(String),
    /// The run is stopping (Ctrl-C, a time limit) and the kernel was not
    /// called, or was interrupted: the case is left unchecked, and this is
    /// not counted as a refusal (the verdict says why the run stopped).
    Stopped,
}

/// Whether the run is stopping: checked before every kernel call.
pub type StopFn = dyn Fn() -> bool + Send + Sync;

/// The forward on one rank's local tensors.
pub type ForwardFn = dyn Fn(&[&Tensor]) -> Result<Tensor, KernelError> + Send + Sync;
/// The backward on one rank: the primals and the output cotangent give one
/// cotangent per input.
pub type BackwardFn = dyn Fn(&[&Tensor], &Tensor) -> Result<Vec<Tensor>, KernelError> + Send + Sync;
/// The output shape for these input shapes (`Err`: the shapes do not fit).
pub type ShapeFn = dyn Fn(&[Shape]) -> Result<Shape, String> + Send + Sync;

/// Values the kernels are called on and may return: |v| < 2^30 with at most
/// 24 binary digits after the point. A float64 holds all of these exactly,
/// and sums and products of a few of them stay exact, while a value rounded
/// by float64 (1/3, say) has 52 binary digits and is caught.
pub const MAX_MAGNITUDE_BITS: u32 = 30;
pub const MAX_FRACTION_BITS: u32 = 24;

/// The largest output a kernel's shape function may give: in dims, and in
/// elements (far beyond any shape in a checking scope).
pub const MAX_KERNEL_RANK: usize = 8;
pub const MAX_KERNEL_ELEMENTS: usize = 1 << 16;

/// `q` as a float64, if it is in the exact window.
pub fn to_f64(q: &Q) -> Option<f64> {
    let s = q.to_string();
    let (p, d) = match s.split_once('/') {
        Some((p, d)) => (p.parse::<i64>().ok()?, d.parse::<i64>().ok()?),
        None => (s.parse::<i64>().ok()?, 1),
    };
    if d <= 0 || d & (d - 1) != 0 || d > 1 << MAX_FRACTION_BITS {
        return None;
    }
    if p.unsigned_abs() >= (1u64 << MAX_MAGNITUDE_BITS) * d as u64 {
        return None;
    }
    Some(p as f64 / d as f64)
}

/// The exact rational a float64 holds, if it is in the window.
pub fn from_f64(x: f64) -> Option<Q> {
    if !x.is_finite() || x.abs() >= (1u64 << MAX_MAGNITUDE_BITS) as f64 {
        return None;
    }
    let scale = (1u64 << MAX_FRACTION_BITS) as f64;
    let scaled = x * scale; // exact: a power of two, far from overflow
    if scaled.fract() != 0.0 {
        return None;
    }
    Some(Q::frac(scaled as i64, 1i64 << MAX_FRACTION_BITS))
}

/// A local op computed by a closure.
#[derive(Clone)]
pub struct External {
    pub name: String,
    /// Input names, as a rule's variables.
    pub vars: Vec<String>,
    /// Declared degree per input: along any direction moving one input the
    /// kernel is a polynomial of at most this degree (SPEC.md §5.2). The
    /// exact derivative rests on it.
    pub degree: Vec<u32>,
    forward: Arc<ForwardFn>,
    backward: Option<Arc<BackwardFn>>,
    shape: Arc<ShapeFn>,
    stop: Option<Arc<StopFn>>,
    refused: Arc<Mutex<(u64, Option<String>)>>,
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "External({})", self.name)
    }
}

// A panic inside a kernel call leaves nothing half-updated: the closures are
// only called, and the refusal count sits behind a mutex. So a rule holding
// an external may cross `catch_unwind` as any other rule does.
impl std::panic::UnwindSafe for External {}
impl std::panic::RefUnwindSafe for External {}

/// Two externals are the same op only if they share their closure.
impl PartialEq for External {
    fn eq(&self, o: &External) -> bool {
        self.name == o.name && Arc::ptr_eq(&self.forward, &o.forward)
    }
}
impl Eq for External {}
impl std::hash::Hash for External {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name.hash(h);
    }
}

/// Element-wise shapes: every input has the output's shape.
fn same_shape(shapes: &[Shape]) -> Result<Shape, String> {
    match shapes.split_first() {
        Some((s, rest)) if rest.iter().all(|r| r == s) => Ok(s.clone()),
        Some(_) => Err("an element-wise kernel takes inputs of one shape".into()),
        None => Err("a kernel takes at least one input".into()),
    }
}

impl External {
    /// An element-wise kernel of `vars.len()` inputs with the given degree
    /// per input; `with_backward` and `with_shape` add the rest.
    pub fn new(
        name: &str,
        vars: Vec<String>,
        degree: Vec<u32>,
        forward: impl Fn(&[&Tensor]) -> Result<Tensor, KernelError> + Send + Sync + 'static,
    ) -> External {
        External {
            name: name.to_string(),
            vars,
            degree,
            forward: Arc::new(forward),
            backward: None,
            shape: Arc::new(same_shape),
            stop: None,
            refused: Arc::new(Mutex::new((0, None))),
        }
    }
    pub fn with_backward(
        mut self,
        b: impl Fn(&[&Tensor], &Tensor) -> Result<Vec<Tensor>, KernelError> + Send + Sync + 'static,
    ) -> External {
        self.backward = Some(Arc::new(b));
        self
    }
    /// Make no more kernel calls once `stop` says the run is stopping: a
    /// case may call the kernel many times (every rank, every member of a
    /// denotation, every finite-difference point), and a slow kernel would
    /// otherwise run on for the whole case after Ctrl-C or a time limit.
    pub fn with_stop(mut self, stop: impl Fn() -> bool + Send + Sync + 'static) -> External {
        self.stop = Some(Arc::new(stop));
        self
    }
    fn stopping(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s())
    }
    pub fn with_shape(
        mut self,
        s: impl Fn(&[Shape]) -> Result<Shape, String> + Send + Sync + 'static,
    ) -> External {
        self.shape = Arc::new(s);
        self
    }
    pub fn has_backward(&self) -> bool {
        self.backward.is_some()
    }
    pub fn arity(&self) -> usize {
        self.vars.len()
    }
    pub fn describe(&self) -> String {
        format!("external {}({})", self.name, self.vars.join(", "))
    }
    /// Calls refused so far (an argument or result outside the exact
    /// window, or a failing kernel), and the first reason.
    pub fn refused(&self) -> (u64, Option<String>) {
        self.refused.lock().map(|g| g.clone()).unwrap_or((1, None))
    }
    fn refuse(&self, why: String) -> EvalError {
        if let Ok(mut g) = self.refused.lock() {
            g.0 += 1;
            g.1.get_or_insert(why);
        }
        EvalError::DivByZero
    }
    pub fn infer(&self, shapes: &[Shape]) -> Result<(Shape, Degree), String> {
        if shapes.len() != self.arity() {
            return Err(format!("{} takes {} inputs", self.name, self.arity()));
        }
        let s = (self.shape)(shapes)?;
        // The shape comes from the kernel's author: a result of 10^9
        // elements would be allocated at every rank and instance.
        if s.len() > MAX_KERNEL_RANK
            || s.iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .is_none_or(|n| n > MAX_KERNEL_ELEMENTS)
        {
            return Err(format!(
                "{}'s shape function gave {s:?}: at most {MAX_KERNEL_RANK} dims and {MAX_KERNEL_ELEMENTS} elements",
                self.name
            ));
        }
        Ok((
            s,
            Degree {
                num: self.degree.clone(),
                den: vec![0; self.degree.len()],
                piecewise: false,
                // A kernel's degree is claimed per coordinate: no bound on
                // the total (its cases keep the product grid).
                total: u32::MAX,
            },
        ))
    }
    fn check_args(&self, args: &[&Tensor]) -> Result<(), EvalError> {
        for (i, t) in args.iter().enumerate() {
            if let Some(q) = t.data.iter().find(|q| to_f64(q).is_none()) {
                return Err(self.refuse(format!(
                    "argument {} holds {q}, not exact in float64's window",
                    i + 1
                )));
            }
        }
        Ok(())
    }
    fn call(&self, args: &[&Tensor]) -> Result<Tensor, EvalError> {
        if self.stopping() {
            return Err(EvalError::DivByZero);
        }
        self.check_args(args)?;
        let want = (self.shape)(&args.iter().map(|t| t.shape.clone()).collect::<Vec<_>>());
        match (self.forward)(args) {
            Ok(t) if want.as_ref().is_ok_and(|w| *w == t.shape) => Ok(t),
            Ok(t) => Err(self.refuse(format!(
                "{} returned shape {:?} where {:?} was expected",
                self.name, t.shape, want
            ))),
            Err(KernelError::Inexact(w)) | Err(KernelError::Failed(w)) => Err(self.refuse(w)),
            Err(KernelError::Stopped) => Err(EvalError::DivByZero),
        }
    }
    /// The forward, rank by rank.
    pub fn forward(&self, m: &Mesh, xs: &[PerRank]) -> Result<Forward, EvalError> {
        let y = (0..m.num_ranks())
            .map(|r| self.call(&xs.iter().map(|x| &x.tensors[r]).collect::<Vec<_>>()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Forward {
            y: PerRank { tensors: y },
            at_kink: false,
        })
    }
    /// The meaning: the kernel applied to the denotations, member by member.
    pub fn spec(&self, ds: &[Denot]) -> Result<Denot, EvalError> {
        let n = ds.first().map_or(0, |d| d.family.len());
        let family = (0..n)
            .map(|r| self.call(&ds.iter().map(|d| &d.family[r]).collect::<Vec<_>>()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Denot { family })
    }
    /// The declared backward, rank by rank.
    pub fn backward(
        &self,
        m: &Mesh,
        xs: &[PerRank],
        g: &PerRank,
    ) -> Result<Vec<PerRank>, EvalError> {
        let b = self
            .backward
            .as_ref()
            .ok_or_else(|| EvalError::Shape(format!("{} declares no backward", self.name)))?;
        let mut out: Vec<PerRank> = xs
            .iter()
            .map(|_| PerRank {
                tensors: Vec::new(),
            })
            .collect();
        for r in 0..m.num_ranks() {
            let args: Vec<&Tensor> = xs.iter().map(|x| &x.tensors[r]).collect();
            self.check_args(&args)?;
            self.check_args(&[&g.tensors[r]])?;
            if self.stopping() {
                return Err(EvalError::DivByZero);
            }
            let gs = match b(&args, &g.tensors[r]) {
                Ok(gs) => gs,
                Err(KernelError::Inexact(w)) | Err(KernelError::Failed(w)) => {
                    return Err(self.refuse(w))
                }
                Err(KernelError::Stopped) => return Err(EvalError::DivByZero),
            };
            if gs.len() != xs.len() || gs.iter().zip(&args).any(|(a, b)| a.shape != b.shape) {
                return Err(self.refuse(format!(
                    "{}'s backward returned {} cotangents or wrong shapes for {} inputs",
                    self.name,
                    gs.len(),
                    xs.len()
                )));
            }
            for (i, gi) in gs.into_iter().enumerate() {
                out[i].tensors.push(gi);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_window() {
        assert_eq!(to_f64(&Q::frac(3, 4)), Some(0.75));
        assert_eq!(to_f64(&Q::frac(1, 3)), None);
        assert_eq!(to_f64(&Q::int(1 << 30)), None);
        assert_eq!(from_f64(-0.125), Some(Q::frac(-1, 8)));
        assert_eq!(from_f64(1.0 / 3.0), None);
        assert_eq!(from_f64(f64::NAN), None);
        assert_eq!(from_f64((1u64 << 31) as f64), None);
    }
}
