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

/// Solve `A z = rhs` over Q by Gaussian elimination; free variables are set
/// to zero. `None` when inconsistent.
fn solve(mut a: Vec<Vec<Q>>, mut rhs: Vec<Q>) -> Option<Vec<Q>> {
    let rows = a.len();
    let cols = if rows == 0 { 0 } else { a[0].len() };
    let mut pivots = Vec::new();
    let mut r = 0;
    for c in 0..cols {
        let Some(p) = (r..rows).find(|&i| !a[i][c].is_zero()) else {
            continue;
        };
        a.swap(r, p);
        rhs.swap(r, p);
        let inv = Q::one().div(&a[r][c]).expect("pivot is nonzero");
        for k in c..cols {
            a[r][k] = a[r][k].mul(&inv);
        }
        rhs[r] = rhs[r].mul(&inv);
        for i in 0..rows {
            if i != r && !a[i][c].is_zero() {
                let f = a[i][c].clone();
                for k in c..cols {
                    let v = a[r][k].mul(&f);
                    a[i][k] = a[i][k].sub(&v);
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
        return None;
    }
    let mut z = vec![Q::zero(); cols];
    for (i, &c) in pivots.iter().enumerate() {
        z[c] = rhs[i].clone();
    }
    Some(z)
}

fn pow(h: &Q, k: u32) -> Q {
    (0..k).fold(Q::one(), |acc, _| acc.mul(h))
}

/// For a polynomial of degree ≤ d sampled at h = k·step, k = 0..=d+1: the
/// weights `w` with p'(0) = Σ_{k≤d} w_k p(h_k), and `c` with
/// p(h_{d+1}) = Σ_{k≤d} c_k p(h_k) (the check sample). Lagrange forms.
#[derive(Clone, Debug)]
pub struct PolyWeights {
    pub deriv: Vec<Q>,
    pub check: Vec<Q>,
}

impl PolyWeights {
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
        PolyWeights { deriv, check }
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
/// where `f` is undefined (`None`) are passed over. SPEC.md §5.2.
pub fn derivative(f: &mut Sampler<'_>, num: u32, den: u32, step: &Q) -> Result<Vec<Q>, FdFail> {
    let need = (num + den + 2) as usize; // a+b+1 to fit, one to check
    let mut hs: Vec<Q> = Vec::new();
    let mut ys: Vec<Vec<Q>> = Vec::new();
    let mut k = 0i64;
    while hs.len() < need {
        if k > 4 * need as i64 + 8 {
            return Err(FdFail::Undetermined(
                "too many samples outside the domain".into(),
            ));
        }
        let h = Q::int(k).mul(step);
        match f(&h)? {
            Some(y) => {
                hs.push(h);
                ys.push(y);
            }
            None if k == 0 => {
                return Err(FdFail::Undetermined(
                    "the point itself is outside the domain".into(),
                ))
            }
            None => {}
        }
        k += 1;
    }
    let fit = need - 1;
    let dim = ys[0].len();
    let mut out = Vec::with_capacity(dim);
    for c in 0..dim {
        // Unknowns: p_0..p_num, q_1..q_den (q_0 = 1). Equation per sample:
        // Σ p_k h^k - y Σ_{k≥1} q_k h^k = y.
        let row = |j: usize| -> Vec<Q> {
            let h = &hs[j];
            let y = &ys[j][c];
            let mut r: Vec<Q> = (0..=num).map(|k| pow(h, k)).collect();
            r.extend((1..=den).map(|k| pow(h, k).mul(y).neg()));
            r
        };
        let a: Vec<Vec<Q>> = (0..fit).map(row).collect();
        let rhs: Vec<Q> = (0..fit).map(|j| ys[j][c].clone()).collect();
        let z = solve(a, rhs).ok_or_else(|| {
            FdFail::Undetermined("samples fit no function of the degree bound".into())
        })?;
        let (p, q) = z.split_at(num as usize + 1);
        // Check the last sample: p(h) = y q(h).
        let h = &hs[fit];
        let ph = p
            .iter()
            .enumerate()
            .fold(Q::zero(), |s, (k, pk)| s.add(&pk.mul(&pow(h, k as u32))));
        let qh = q
            .iter()
            .enumerate()
            .fold(Q::one(), |s, (k, qk)| s.add(&qk.mul(&pow(h, k as u32 + 1))));
        if ph != ys[fit][c].mul(&qh) {
            return Err(FdFail::Undetermined(
                "a check sample disagrees with the reconstruction (a kink between samples, or a wrong degree bound)".into(),
            ));
        }
        // (p/q)'(0) with q(0) = 1: p_1 - p_0 q_1.
        let p1 = p.get(1).cloned().unwrap_or_else(Q::zero);
        let q1 = q.first().cloned().unwrap_or_else(Q::zero);
        out.push(p1.sub(&p[0].mul(&q1)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_wrong_degree_bound_is_detected() {
        let r = run(|h| Some(h.mul(h).mul(h)), 2, 0, Q::one());
        assert!(matches!(r, Err(FdFail::Undetermined(_))));
    }
}
