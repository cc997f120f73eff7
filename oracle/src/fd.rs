//! Exact finite differences (SPEC.md §5).
//!
//! Along a direction v, h ↦ f(x + h v) is, for each output scalar, a ratio of
//! polynomials in h with known degree bounds (a, b). Sampling it at a + b + 1
//! points determines it exactly; its derivative at h = 0 is then read off the
//! coefficients. One further sample checks the reconstruction, so a wrong
//! degree bound or a kink between samples is detected instead of trusted.
//!
//! The linear algebra indexes rows and columns the way it is written on
//! paper.
#![allow(clippy::needless_range_loop)]

use spmd_semantics::Q;

/// A map sampled along a direction: the value at step `h`, `None` outside
/// its domain.
pub type Sampler<'a> = dyn FnMut(&Q) -> Result<Option<Vec<Q>>, FdFail> + 'a;

/// Why no derivative was determined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FdFail {
    /// A sample met a kink, left the domain, or the check sample disagreed.
    Undetermined(String),
}

/// Solve `A z = rhs` over Q by Gaussian elimination, in place; `a` is
/// `rows × cols`, row-major. Free variables are set to zero in `z`. `false`
/// when inconsistent.
fn solve(
    a: &mut [Q],
    rhs: &mut [Q],
    rows: usize,
    cols: usize,
    z: &mut [Q],
    pivots: &mut Vec<usize>,
) -> bool {
    // The system is exactly `rows × cols`: a caller that sizes a buffer
    // wrongly is caught here in tests, not by a stale entry read later.
    debug_assert_eq!((a.len(), rhs.len(), z.len()), (rows * cols, rows, cols));
    if rows == 1 && cols == 1 {
        // One equation a·z = r, as the elimination below solves it: z = r/a,
        // or, when a = 0, z = 0 if r = 0 and no solution otherwise.
        if a[0].is_zero() {
            z[0] = Q::zero();
            return rhs[0].is_zero();
        }
        z[0] = rhs[0].div(&a[0]).expect("a nonzero pivot");
        return true;
    }
    pivots.clear();
    let mut r = 0;
    for c in 0..cols {
        let Some(p) = (r..rows).find(|&i| !a[i * cols + c].is_zero()) else {
            continue;
        };
        if p != r {
            for k in 0..cols {
                a.swap(r * cols + k, p * cols + k);
            }
            rhs.swap(r, p);
        }
        let inv = Q::one().div(&a[r * cols + c]).expect("pivot is nonzero");
        for k in c..cols {
            a[r * cols + k] = a[r * cols + k].mul(&inv);
        }
        rhs[r] = rhs[r].mul(&inv);
        for i in 0..rows {
            if i != r && !a[i * cols + c].is_zero() {
                let f = a[i * cols + c].clone();
                for k in c..cols {
                    let v = a[r * cols + k].mul(&f);
                    a[i * cols + k] = a[i * cols + k].sub(&v);
                }
                let v = rhs[r].mul(&f);
                rhs[i] = rhs[i].sub(&v);
            }
        }
        pivots.push(c);
        r += 1;
        if r == rows {
            break;
        }
    }
    if (r..rows).any(|i| !rhs[i].is_zero()) {
        return false;
    }
    z.iter_mut().for_each(|v| *v = Q::zero());
    for (i, &c) in pivots.iter().enumerate() {
        z[c] = rhs[i].clone();
    }
    true
}

/// For a polynomial of degree ≤ d sampled at h = k·step, k = 0..=d+1: the
/// weights `w` with p'(0) = Σ_{k≤d} w_k p(h_k), and `c` with
/// p(h_{d+1}) = Σ_{k≤d} c_k p(h_k) (the check sample). Lagrange forms.
/// `hs` keeps the sample points h_k, which every sampling reads.
#[derive(Clone, Debug)]
pub struct PolyWeights {
    pub deriv: Vec<Q>,
    pub check: Vec<Q>,
    pub hs: Vec<Q>,
}

impl PolyWeights {
    /// `new(d, step)`, built once per thread and shared: every case of a
    /// run asks for the same few (degrees up to the cap, steps 1 and the
    /// piecewise step of §5.3).
    pub fn shared(d: u32, step: &Q) -> std::sync::Arc<PolyWeights> {
        type Kept = Vec<(u32, Q, std::sync::Arc<PolyWeights>)>;
        thread_local! {
            static KEPT: std::cell::RefCell<Kept> = const { std::cell::RefCell::new(Vec::new()) };
        }
        const MOST: usize = 64;
        let hit = KEPT.with(|k| {
            k.borrow()
                .iter()
                .find(|(d2, s2, _)| *d2 == d && s2 == step)
                .map(|e| e.2.clone())
        });
        if let Some(w) = hit {
            return w;
        }
        let w = std::sync::Arc::new(PolyWeights::new(d, step));
        KEPT.with(|k| {
            let mut k = k.borrow_mut();
            if k.len() >= MOST {
                k.clear();
            }
            k.push((d, step.clone(), w.clone()));
        });
        w
    }

    pub fn new(d: u32, step: &Q) -> PolyWeights {
        let hs: Vec<Q> = (0..=d as i64 + 1).map(|k| Q::int(k).mul(step)).collect();
        let n = d as usize + 1;
        let denom = |j: usize| {
            (0..n)
                .filter(|&k| k != j)
                .fold(Q::one(), |a, k| a.mul(&hs[j].sub(&hs[k])))
        };
        let mut deriv = Vec::with_capacity(n);
        let mut check = Vec::with_capacity(n);
        for j in 0..n {
            let dj = denom(j);
            // L_j'(0) = Σ_{m≠j} Π_{k≠j,m} (0 - h_k) / Π_{k≠j} (h_j - h_k)
            let mut num = Q::zero();
            for mm in (0..n).filter(|&mm| mm != j) {
                num = num.add(
                    &(0..n)
                        .filter(|&k| k != j && k != mm)
                        .fold(Q::one(), |a, k| a.mul(&hs[k].neg())),
                );
            }
            deriv.push(num.div(&dj).expect("distinct samples"));
            let at = &hs[n];
            let l = (0..n)
                .filter(|&k| k != j)
                .fold(Q::one(), |a, k| a.mul(&at.sub(&hs[k])));
            check.push(l.div(&dj).expect("distinct samples"));
        }
        PolyWeights { deriv, check, hs }
    }
}

/// Derivative at 0 of every coordinate of a polynomial map of degree ≤ d,
/// from samples at h = k·step, k = 0..=d+1 (the last one checks).
pub fn poly_derivative(f: &mut Sampler<'_>, w: &PolyWeights, step: &Q) -> Result<Vec<Q>, FdFail> {
    let n = w.deriv.len();
    let mut ys: Vec<Vec<Q>> = Vec::with_capacity(n + 1);
    for k in 0..=n {
        match f(&Q::int(k as i64).mul(step))? {
            Some(y) => ys.push(y),
            None => {
                return Err(FdFail::Undetermined(
                    "a polynomial map left its domain (interpreter bug)".into(),
                ))
            }
        }
    }
    let dim = ys[0].len();
    let mut out = Vec::with_capacity(dim);
    for c in 0..dim {
        let mut d = Q::zero();
        let mut p = Q::zero();
        for j in 0..n {
            if !ys[j][c].is_zero() {
                d = d.add(&w.deriv[j].mul(&ys[j][c]));
                p = p.add(&w.check[j].mul(&ys[j][c]));
            }
        }
        if p != ys[n][c] {
            return Err(FdFail::Undetermined(
                "a check sample disagrees with the interpolation (wrong degree bound)".into(),
            ));
        }
        out.push(d);
    }
    Ok(out)
}

/// Derivative at 0 of every coordinate of `f`, a vector-valued map of the
/// step whose coordinates are ratios of polynomials of degree at most
/// `(num, den)` in h. Samples are `h = k·step` for k = 0, 1, 2, ...; samples
/// where `f` is undefined (`None`) are passed over. SPEC.md §5.2. The
/// oracle's own columns use `derivative_into`, which this wraps.
pub fn derivative(f: &mut Sampler<'_>, num: u32, den: u32, step: &Q) -> Result<Vec<Q>, FdFail> {
    let mut into = |h: &Q, dst: &mut Vec<Q>| -> Result<bool, FdFail> {
        Ok(match f(h)? {
            Some(y) => {
                *dst = y;
                true
            }
            None => false,
        })
    };
    let mut out = Vec::new();
    derivative_into(&mut into, num, den, step, &mut FitBufs::default(), &mut out)?;
    Ok(out)
}

/// A map sampled along a direction into a kept buffer: writes the value at
/// step `h` and returns `true`, or returns `false` outside its domain.
pub type SamplerInto<'a> = dyn FnMut(&Q, &mut Vec<Q>) -> Result<bool, FdFail> + 'a;

/// `derivative_into`'s buffers, kept from call to call so a column
/// allocates nothing once they have grown (SPEC.md §18.9).
#[derive(Default)]
pub struct FitBufs {
    hs: Vec<Q>,
    ys: Vec<Vec<Q>>,
    /// `pw[j][k]` = h_j^k.
    pw: Vec<Vec<Q>>,
    a: Vec<Q>,
    rhs: Vec<Q>,
    z: Vec<Q>,
    pivots: Vec<usize>,
}

/// `derivative` with the samples written by `f` into kept buffers and the
/// derivative into `out`; the same values and the same failures.
///
/// The first sample is h = 0, where every power of h but h⁰ vanishes: its
/// equation reads p₀ = y₀. That row is the elimination's first pivot, and
/// eliminating it from the others only subtracts y₀ from their right sides,
/// so the fit solves the remaining unknowns p₁..p_num, q₁..q_den from the
/// other samples directly (the same pivots, the same solution, one row and
/// one column fewer).
pub fn derivative_into(
    f: &mut SamplerInto<'_>,
    num: u32,
    den: u32,
    step: &Q,
    bufs: &mut FitBufs,
    out: &mut Vec<Q>,
) -> Result<(), FdFail> {
    let need = (num + den + 2) as usize; // a+b+1 to fit, one to check
    let FitBufs {
        hs,
        ys,
        pw,
        a,
        rhs,
        z,
        pivots,
    } = bufs;
    hs.clear();
    let mut k = 0i64;
    while hs.len() < need {
        if k > 4 * need as i64 + 8 {
            return Err(FdFail::Undetermined(
                "too many samples outside the domain".into(),
            ));
        }
        let h = Q::int(k).mul(step);
        let at = hs.len();
        if ys.len() <= at {
            ys.push(Vec::new());
        }
        if f(&h, &mut ys[at])? {
            hs.push(h);
        } else if k == 0 {
            return Err(FdFail::Undetermined(
                "the point itself is outside the domain".into(),
            ));
        }
        k += 1;
    }
    let fit = need - 1;
    let ys = &ys[..need];
    let dim = ys[0].len();
    let (a_n, b_n) = (num as usize, den as usize);
    // The unknowns left once p₀ = y₀: p₁..p_num, then q₁..q_den (q₀ = 1).
    let cols = a_n + b_n;
    // h_j^k for every sample and k ≤ max(num, den), shared by all
    // coordinates; the fit's matrix and right side are reused.
    let kmax = a_n.max(b_n);
    if pw.len() < need {
        pw.resize_with(need, Vec::new);
    }
    for (h, v) in hs.iter().zip(pw.iter_mut()) {
        v.clear();
        let mut acc = Q::one();
        for _ in 0..=kmax {
            let next = acc.mul(h);
            v.push(acc);
            acc = next;
        }
    }
    a.clear();
    a.resize((fit - 1) * cols, Q::zero());
    rhs.clear();
    rhs.resize(fit - 1, Q::zero());
    z.clear();
    z.resize(cols, Q::zero());
    out.clear();
    out.reserve(dim);
    for c in 0..dim {
        // A coordinate whose samples are all equal has derivative 0 and
        // passes the check: any p/q of the degree bounds through the fit
        // samples has p − y·q (degree ≤ max(num, den) < fit) vanishing at
        // fit points, so p = y·q everywhere, and p₁ − p₀q₁ = y·q₁ − y·q₁.
        // So skipping the elimination gives exactly what it would.
        let y0 = &ys[0][c];
        if ys[1..].iter().all(|y| y[c] == *y0) {
            out.push(Q::zero());
            continue;
        }
        // Per sample j ≥ 1:
        // Σ_{k≥1} p_k h^k − y Σ_{k≥1} q_k h^k = y − y₀.
        for j in 1..fit {
            let y = &ys[j][c];
            let row = &mut a[(j - 1) * cols..j * cols];
            row[..a_n].clone_from_slice(&pw[j][1..=a_n]);
            for k in 1..=b_n {
                row[a_n + k - 1] = pw[j][k].mul(y).neg();
            }
            rhs[j - 1] = y.sub(y0);
        }
        if !solve(a, rhs, fit - 1, cols, z, pivots) {
            return Err(FdFail::Undetermined(
                "samples fit no function of the degree bound".into(),
            ));
        }
        let (p, q) = z.split_at(a_n);
        // Check the last sample: p(h) = y q(h).
        let ph = p
            .iter()
            .enumerate()
            .fold(y0.clone(), |s, (k, pk)| s.add(&pk.mul(&pw[fit][k + 1])));
        let qh = q
            .iter()
            .enumerate()
            .fold(Q::one(), |s, (k, qk)| s.add(&qk.mul(&pw[fit][k + 1])));
        if ph != ys[fit][c].mul(&qh) {
            return Err(FdFail::Undetermined(
                "a check sample disagrees with the reconstruction (a kink between samples, or a wrong degree bound)".into(),
            ));
        }
        // (p/q)'(0) with q(0) = 1: p_1 - p_0 q_1.
        let p1 = p.first().cloned().unwrap_or_else(Q::zero);
        match q.first() {
            Some(q1) => out.push(p1.sub(&y0.mul(q1))),
            None => out.push(p1),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant's derivative is 0 and its extrapolation itself: the
    /// weights sum to exactly 0 and 1, which lets the oracle skip the
    /// coordinates a direction cannot move (SPEC.md §18.8).
    #[test]
    fn weights_of_a_constant_sum_to_zero_and_one() {
        for step in [Q::one(), Q::frac(1, 1 << 16)] {
            for d in 0..=16 {
                let w = PolyWeights::new(d, &step);
                let sum = |v: &[Q]| v.iter().fold(Q::zero(), |a, b| a.add(b));
                assert!(sum(&w.deriv).is_zero(), "degree {d}");
                assert!(sum(&w.check).is_one(), "degree {d}");
                // The twin: a coordinate that moves is not skipped. Along
                // h ↦ h the same weights give the derivative 1, not 0.
                if d >= 1 {
                    let moved = w.deriv.iter().enumerate().fold(Q::zero(), |a, (k, c)| {
                        a.add(&c.mul(&Q::int(k as i64).mul(&step)))
                    });
                    assert!(moved.is_one(), "degree {d}");
                }
            }
        }
    }

    fn run(f: impl Fn(&Q) -> Option<Q>, num: u32, den: u32, step: Q) -> Result<Q, FdFail> {
        let mut g = |h: &Q| Ok(f(h).map(|v| vec![v]));
        derivative(&mut g, num, den, &step).map(|v| v[0].clone())
    }

    #[test]
    fn polynomial_derivatives_are_exact() {
        // f(h) = (3 + h)^3 at h = 0: 27.
        let d = run(
            |h| {
                let x = Q::int(3).add(h);
                Some(x.mul(&x).mul(&x))
            },
            3,
            0,
            Q::one(),
        )
        .unwrap();
        assert_eq!(d, Q::int(27));
    }

    #[test]
    fn rational_derivatives_are_exact() {
        // f(h) = 1 / (h - 2): f'(0) = -1/4; the sample h = 2 is a pole.
        let d = run(|h| Q::one().div(&h.sub(&Q::int(2))).ok(), 0, 1, Q::one()).unwrap();
        assert_eq!(d, Q::frac(-1, 4));
    }

    #[test]
    fn precomputed_weights_agree_with_the_general_solver() {
        for d in 0..4u32 {
            let w = PolyWeights::new(d, &Q::one());
            let f = |h: &Q| {
                let x = Q::int(2).add(h);
                Some(vec![(0..d).fold(Q::int(3), |a, _| a.mul(&x))])
            };
            let mut g1 = |h: &Q| Ok(f(h));
            let mut g2 = |h: &Q| Ok(f(h));
            assert_eq!(
                poly_derivative(&mut g1, &w, &Q::one()).unwrap(),
                derivative(&mut g2, d, 0, &Q::one()).unwrap()
            );
        }
    }

    /// The piecewise ops' fast path (SPEC.md §18.1): weights at the small
    /// step give what the general fit gives with no denominator, and both
    /// reject samples that straddle a kink.
    #[test]
    fn small_step_weights_agree_with_the_fit_and_reject_a_kink() {
        let step = Q::frac(1, 1 << 16);
        let via_weights = |f: &dyn Fn(&Q) -> Q, d: u32| -> Option<Q> {
            let w = PolyWeights::new(d, &step);
            let ys: Vec<Q> = (0..=d as i64 + 1)
                .map(|k| f(&Q::int(k).mul(&step)))
                .collect();
            let at = |ws: &[Q]| {
                ws.iter()
                    .zip(&ys)
                    .fold(Q::zero(), |a, (w, y)| a.add(&w.mul(y)))
            };
            (at(&w.check) == ys[d as usize + 1]).then(|| at(&w.deriv))
        };
        for d in 0..4u32 {
            // (x0 + h)^d times 3, at a few x0.
            for x0 in [Q::int(-2), Q::frac(1, 3), Q::int(5)] {
                let f = |h: &Q| {
                    let x = x0.add(h);
                    (0..d).fold(Q::int(3), |a, _| a.mul(&x))
                };
                let fit = run(|h| Some(f(h)), d, 0, step.clone()).ok();
                assert!(fit.is_some());
                assert_eq!(via_weights(&f, d), fit, "degree {d} at {x0}");
            }
        }
        // relu(x0 + h) with the kink between the samples: x0 = -3/2 steps.
        let x0 = Q::frac(-3, 1 << 17);
        let relu = |h: &Q| {
            let x = x0.add(h);
            if x.is_negative() {
                Q::zero()
            } else {
                x
            }
        };
        assert!(run(|h| Some(relu(h)), 1, 0, step.clone()).is_err());
        assert_eq!(via_weights(&relu, 1), None);
    }

    /// The fit as first written: every sample's equation, h = 0's
    /// included, in one elimination over p₀..p_num, q₁..q_den; `None` where
    /// it fails. With `drop_first` the h = 0 row is left out: the twin.
    fn full_fit(
        hs: &[Q],
        ys: &[Vec<Q>],
        num: usize,
        den: usize,
        drop_first: bool,
    ) -> Option<Vec<Q>> {
        let fit = num + den + 1;
        let cols = num + 1 + den;
        let pow = |h: &Q, k: usize| (0..k).fold(Q::one(), |a, _| a.mul(h));
        let rows: Vec<usize> = (usize::from(drop_first)..fit).collect();
        let mut out = Vec::new();
        for c in 0..ys[0].len() {
            if ys.iter().all(|y| y[c] == ys[0][c]) {
                out.push(Q::zero());
                continue;
            }
            let mut a = Vec::new();
            let mut rhs = Vec::new();
            for &j in &rows {
                let y = &ys[j][c];
                a.extend((0..=num).map(|k| pow(&hs[j], k)));
                a.extend((1..=den).map(|k| pow(&hs[j], k).mul(y).neg()));
                rhs.push(y.clone());
            }
            let mut z = vec![Q::zero(); cols];
            if !solve(&mut a, &mut rhs, rows.len(), cols, &mut z, &mut Vec::new()) {
                return None;
            }
            let h = &hs[fit];
            let ph = (0..=num).fold(Q::zero(), |s, k| s.add(&z[k].mul(&pow(h, k))));
            let qh = (1..=den).fold(Q::one(), |s, k| s.add(&z[num + k].mul(&pow(h, k))));
            if ph != ys[fit][c].mul(&qh) {
                return None;
            }
            let p1 = if num >= 1 { z[1].clone() } else { Q::zero() };
            let q1 = if den >= 1 {
                z[num + 1].clone()
            } else {
                Q::zero()
            };
            out.push(p1.sub(&z[0].mul(&q1)));
        }
        Some(out)
    }

    /// `derivative_into` solves without the h = 0 row (p₀ = y₀ taken
    /// directly): it agrees with the full elimination on ratios of every
    /// degree up to the bounds, on bounds too low (both fail), on lower
    /// degrees than the bounds (free unknowns) and across poles. The twin,
    /// a fit that loses the h = 0 equation instead, disagrees.
    #[test]
    fn the_reduced_fit_agrees_with_the_full_elimination() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut small = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % 7) as i64 - 3
        };
        let (mut cases, mut failed, mut twin_differs) = (0, 0, false);
        for num in 0..=3usize {
            for den in 0..=2usize {
                for step in [Q::one(), Q::frac(1, 3)] {
                    for _ in 0..12 {
                        // Three coordinates, each p/q of degrees up to
                        // (num + 1, den): sometimes beyond the bounds.
                        let coefs: Vec<(Vec<i64>, Vec<i64>)> = (0..3)
                            .map(|_| {
                                let p = (0..=num + 1).map(|_| small()).collect();
                                let q = (0..=den)
                                    .map(|k| if k == 0 { 1 } else { small() })
                                    .collect();
                                (p, q)
                            })
                            .collect();
                        let eval = |h: &Q| -> Option<Vec<Q>> {
                            coefs
                                .iter()
                                .map(|(p, q)| {
                                    let at = |cs: &[i64]| {
                                        cs.iter()
                                            .rev()
                                            .fold(Q::zero(), |a, &c| a.mul(h).add(&Q::int(c)))
                                    };
                                    at(p).div(&at(q)).ok()
                                })
                                .collect()
                        };
                        let mut f = |h: &Q| Ok(eval(h));
                        let got = derivative(&mut f, num as u32, den as u32, &step).ok();
                        // The full elimination on the same samples.
                        let (mut hs, mut ys) = (Vec::new(), Vec::new());
                        let mut k = 0;
                        while hs.len() < num + den + 2 && k < 64 {
                            let h = Q::int(k).mul(&step);
                            if let Some(y) = eval(&h) {
                                hs.push(h);
                                ys.push(y);
                            } else if k == 0 {
                                break;
                            }
                            k += 1;
                        }
                        let want = (hs.len() == num + den + 2 && hs[0].is_zero())
                            .then(|| full_fit(&hs, &ys, num, den, false))
                            .flatten();
                        assert_eq!(got, want, "bounds ({num}, {den}), step {step}, {coefs:?}");
                        cases += 1;
                        failed += usize::from(got.is_none());
                        if want.is_some() && full_fit(&hs, &ys, num, den, true) != want {
                            twin_differs = true;
                        }
                    }
                }
            }
        }
        // Both outcomes were exercised, and the twin was caught.
        assert!(failed > 0 && failed < cases, "{failed} of {cases} failed");
        assert!(twin_differs);
    }

    #[test]
    fn a_wrong_degree_bound_is_detected() {
        let r = run(|h| Some(h.mul(h).mul(h)), 2, 0, Q::one());
        assert!(matches!(r, Err(FdFail::Undetermined(_))));
    }

    #[test]
    fn a_constant_coordinate_has_derivative_zero_beside_a_moving_one() {
        // (5, 1/(h - 2)) with bounds (0, 1): the first coordinate is constant.
        let mut g = |h: &Q| {
            Ok(Some(vec![
                Q::int(5),
                Q::one().div(&h.sub(&Q::int(2))).unwrap(),
            ]))
        };
        let d = derivative(&mut g, 0, 1, &Q::frac(1, 3)).unwrap();
        assert_eq!(d, vec![Q::zero(), Q::frac(-1, 4)]);
    }

    #[test]
    fn a_coordinate_constant_only_on_the_fitted_samples_is_not_skipped() {
        // Twin of the shortcut: equal on h = 0, 1 (bounds (0, 1) fit
        // two samples) but not at the check sample h = 2, so the
        // derivative is undetermined, never 0.
        let mut g = |h: &Q| {
            let v = if *h == Q::int(2) {
                Q::int(8)
            } else {
                Q::int(7)
            };
            Ok(Some(vec![v]))
        };
        let r = derivative(&mut g, 0, 1, &Q::one());
        assert!(
            matches!(r, Err(FdFail::Undetermined(ref m)) if m.contains("check sample")),
            "{r:?}"
        );
    }

    /// `solve` on any `rows × cols` system (its contract), not only the
    /// square ones `derivative_into` builds: a solution exists exactly when
    /// the system is consistent, and the `z` it gives satisfies every
    /// equation, and when it reports none the augmented matrix has the
    /// larger rank. On every system with entries in -1..=2 of shapes one by
    /// one, two by one, one by two and two by two, so the one-equation
    /// shortcut must be taken for 1 × 1 only.
    #[test]
    fn solve_answers_every_small_system_exactly() {
        let vals = [-1i64, 0, 1, 2];
        // Every system of the shape with entries from `vals`.
        let systems = |rows: usize, cols: usize| -> Vec<(Vec<Q>, Vec<Q>)> {
            let n = rows * cols + rows;
            (0..vals.len().pow(n as u32))
                .map(|code| {
                    let e: Vec<Q> = (0..n)
                        .map(|j| Q::int(vals[code / vals.len().pow(j as u32) % vals.len()]))
                        .collect();
                    (e[..rows * cols].to_vec(), e[rows * cols..].to_vec())
                })
                .collect()
        };
        // The rank of a matrix of at most two rows: 2 with a nonzero 2 × 2
        // minor, else 1 with a nonzero entry.
        let rank = |m: &[Q], rows: usize, cols: usize| -> usize {
            let minor = |c: usize, d: usize| m[c].mul(&m[cols + d]).sub(&m[d].mul(&m[cols + c]));
            if rows == 2 && (0..cols).any(|c| (c + 1..cols).any(|d| !minor(c, d).is_zero())) {
                2
            } else {
                usize::from(m.iter().any(|v| !v.is_zero()))
            }
        };
        let satisfies = |a: &[Q], rhs: &[Q], z: &[Q], cols: usize| {
            rhs.iter().enumerate().all(|(i, r)| {
                let lhs = (0..cols).fold(Q::zero(), |s, c| s.add(&a[i * cols + c].mul(&z[c])));
                lhs == *r
            })
        };
        for (rows, cols) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
            let (mut consistent, mut inconsistent) = (0, 0);
            for (a0, r0) in systems(rows, cols) {
                let (mut a, mut rhs) = (a0.clone(), r0.clone());
                let mut z = vec![Q::int(9); cols];
                let ok = solve(&mut a, &mut rhs, rows, cols, &mut z, &mut Vec::new());
                if ok {
                    assert!(
                        satisfies(&a0, &r0, &z, cols),
                        "{rows}x{cols} {a0:?} z = {r0:?}: {z:?}"
                    );
                    consistent += 1;
                } else {
                    // Inconsistent: the augmented matrix has the larger rank.
                    let aug: Vec<Q> = (0..rows)
                        .flat_map(|i| a0[i * cols..(i + 1) * cols].iter().chain([&r0[i]]))
                        .cloned()
                        .collect();
                    assert!(
                        rank(&aug, rows, cols + 1) > rank(&a0, rows, cols),
                        "{rows}x{cols} {a0:?} z = {r0:?} has a solution"
                    );
                    inconsistent += 1;
                }
            }
            assert!(consistent > 0 && inconsistent > 0, "{rows}x{cols}");
        }
    }

    /// The sampling budget of `derivative_into` (SPEC.md §5.2): with bounds
    /// (a, b) it asks for h = 0, s, 2s, ... until it has a + b + 2 samples
    /// in the domain, passing over the others, and gives up once it has
    /// asked for h = (4(a + b + 2) + 8)·s without enough. Exactly these
    /// points are asked, in order.
    #[test]
    fn derivative_asks_for_exactly_the_samples_it_needs() {
        let step = Q::frac(1, 3);
        for (num, den) in [(0u32, 0u32), (1, 0), (0, 1), (2, 1)] {
            let need = (num + den + 2) as i64;
            // Defined everywhere: the first `need` points, no more.
            let mut asked = Vec::new();
            let mut f = |h: &Q| {
                asked.push(h.clone());
                Ok(Some(vec![Q::int(4)]))
            };
            assert_eq!(derivative(&mut f, num, den, &step), Ok(vec![Q::zero()]));
            let want: Vec<Q> = (0..need).map(|k| Q::int(k).mul(&step)).collect();
            assert_eq!(asked, want, "bounds ({num}, {den})");
            // Defined at 0 and from k = K on: the samples in between are
            // passed over, and the last point the budget allows still
            // counts ...
            let last = 4 * need + 8;
            let mut asked = 0i64;
            let from = last - need + 2;
            let mut f = |h: &Q| {
                asked += 1;
                let k = h.div(&step).unwrap();
                Ok((k.is_zero() || k >= Q::int(from)).then(|| vec![Q::int(4)]))
            };
            assert_eq!(derivative(&mut f, num, den, &step), Ok(vec![Q::zero()]));
            assert_eq!(asked, last + 1, "bounds ({num}, {den})");
            // ... and one point later is beyond it.
            let mut asked = 0i64;
            let mut f = |h: &Q| {
                asked += 1;
                let k = h.div(&step).unwrap();
                Ok((k.is_zero() || k >= Q::int(from + 1)).then(|| vec![Q::int(4)]))
            };
            let r = derivative(&mut f, num, den, &step);
            assert!(
                matches!(r, Err(FdFail::Undetermined(ref m)) if m.contains("too many samples")),
                "bounds ({num}, {den}): {r:?}"
            );
            assert_eq!(asked, last + 1, "bounds ({num}, {den})");
        }
    }
}
