//! Rigorous enclosures with rational endpoints (SPEC.md §19.3).
//!
//! An `Iv` is a closed interval `[lo, hi]` of rationals that is proved to
//! contain a real number. Every operation returns an interval containing
//! every result of its operands' members; endpoints are rounded outward to
//! multiples of 2^-bits so that they stay small. The transcendental
//! enclosures (exp, log, sin, cos, π) come from truncated series with an
//! explicit bound on the remainder, never from floats.

use crate::q::Q;
use std::cmp::Ordering;

trait Positive {
    fn is_positive_q(&self) -> bool;
}
impl Positive for Q {
    fn is_positive_q(&self) -> bool {
        !self.is_negative() && !self.is_zero()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iv {
    pub lo: Q,
    pub hi: Q,
}

/// 2^k, by squaring (log k products instead of k).
fn pow2(k: u32) -> Q {
    let (mut p, mut b, mut e) = (Q::one(), Q::int(2), k);
    while e > 0 {
        if e & 1 == 1 {
            p = p.mul(&b);
        }
        e >>= 1;
        if e > 0 {
            b = b.mul(&b);
        }
    }
    p
}

/// Which enclosure a memo entry holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Fun {
    Exp,
    Sqrt,
    Log,
}

/// The most entries the memo keeps; it is emptied when full.
const MEMO_CAP: usize = 1 << 12;

thread_local! {
    /// Enclosures already computed on this thread, by function, argument
    /// and precision. Each is a pure function of those, so a hit returns
    /// exactly the interval the series would (SPEC.md §19.3); the same few
    /// exponents recur in every sign a check reads.
    static MEMO: std::cell::RefCell<std::collections::HashMap<(Fun, Q, u32), Iv>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn memo(fun: Fun, q: &Q, bits: u32, compute: impl FnOnce() -> Iv) -> Iv {
    let key = (fun, q.clone(), bits);
    if let Some(iv) = MEMO.with(|m| m.borrow().get(&key).cloned()) {
        return iv;
    }
    let iv = compute();
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= MEMO_CAP {
            m.clear();
        }
        m.insert(key, iv.clone());
    });
    iv
}

fn down(q: &Q, bits: u32) -> Q {
    let s = pow2(bits);
    q.mul(&s).floor().div(&s).expect("2^bits is nonzero")
}

fn up(q: &Q, bits: u32) -> Q {
    down(&q.neg(), bits).neg()
}

impl Iv {
    pub fn point(q: Q) -> Iv {
        Iv {
            lo: q.clone(),
            hi: q,
        }
    }
    /// Round the endpoints outward to multiples of 2^-bits.
    pub fn round(&self, bits: u32) -> Iv {
        Iv {
            lo: down(&self.lo, bits),
            hi: up(&self.hi, bits),
        }
    }
    pub fn add(&self, o: &Iv) -> Iv {
        Iv {
            lo: self.lo.add(&o.lo),
            hi: self.hi.add(&o.hi),
        }
    }
    pub fn neg(&self) -> Iv {
        Iv {
            lo: self.hi.neg(),
            hi: self.lo.neg(),
        }
    }
    pub fn sub(&self, o: &Iv) -> Iv {
        self.add(&o.neg())
    }
    pub fn mul(&self, o: &Iv) -> Iv {
        let c = [
            self.lo.mul(&o.lo),
            self.lo.mul(&o.hi),
            self.hi.mul(&o.lo),
            self.hi.mul(&o.hi),
        ];
        Iv {
            lo: c.iter().min().expect("four").clone(),
            hi: c.iter().max().expect("four").clone(),
        }
    }
    /// `None` when `o` contains zero.
    pub fn div(&self, o: &Iv) -> Option<Iv> {
        if o.contains_zero() {
            return None;
        }
        let inv = Iv {
            lo: Q::one().div(&o.hi).ok()?,
            hi: Q::one().div(&o.lo).ok()?,
        };
        Some(self.mul(&inv))
    }
    pub fn contains_zero(&self) -> bool {
        !self.lo.is_positive_q() && !self.hi.is_negative()
    }
    /// The sign of every member, when they all share one.
    pub fn sign(&self) -> Option<Ordering> {
        if self.lo.is_positive_q() {
            Some(Ordering::Greater)
        } else if self.hi < Q::zero() {
            Some(Ordering::Less)
        } else if self.lo.is_zero() && self.hi.is_zero() {
            Some(Ordering::Equal)
        } else {
            None
        }
    }
    pub fn powi(&self, k: u32) -> Iv {
        let mut r = Iv::point(Q::one());
        for _ in 0..k {
            r = r.mul(self);
        }
        r
    }
    /// Whether the two enclosures share no point.
    pub fn disjoint(&self, o: &Iv) -> bool {
        self.hi < o.lo || o.hi < self.lo
    }
}

/// |y|^(n+1) / (n+1)! for the remainder bounds of the series below.
fn tail(y: &Q, n: u32) -> Q {
    let mut t = Q::one();
    let a = y.abs();
    for k in 1..=n + 1 {
        t = t.mul(&a).div(&Q::int(k as i64)).expect("k > 0");
    }
    t
}

/// Terms of the series: enough that the remainder is below 2^-bits for |y| <= 1/2.
fn terms(bits: u32) -> u32 {
    bits / 2 + 8
}

/// e^q, for rational q.
pub fn exp(q: &Q, bits: u32) -> Iv {
    if q.is_zero() {
        return Iv::point(Q::one());
    }
    memo(Fun::Exp, q, bits, || exp_series(q, bits))
}

fn exp_series(q: &Q, bits: u32) -> Iv {
    // Halve until |y| <= 1/2, sum the series, square back.
    let mut k = 0u32;
    let mut y = q.clone();
    let half = Q::frac(1, 2);
    while y.abs() > half && k < 4096 {
        y = y.mul(&half);
        k += 1;
    }
    let wb = bits + 2 * k + 8;
    let n = terms(wb);
    let mut s = Q::zero();
    let mut t = Q::one();
    for j in 0..=n {
        s = s.add(&t);
        t = t.mul(&y).div(&Q::int(j as i64 + 1)).expect("j+1>0");
    }
    // The terms are exact; the remainder of e^y after n+1 terms is at most
    // 2 |y|^(n+1)/(n+1)! (|y| <= 1/2, so e^|y| < 2).
    let err = tail(&y, n).mul(&Q::int(2));
    let mut iv = Iv {
        lo: s.sub(&err),
        hi: s.add(&err),
    }
    .round(wb);
    for _ in 0..k {
        iv = iv.mul(&iv).round(wb);
    }
    iv.round(bits)
}

/// √r for rational r >= 0, by bisection on multiples of 2^-bits.
pub fn sqrt(r: &Q, bits: u32) -> Iv {
    if r.is_zero() || r.is_negative() {
        return Iv::point(Q::zero());
    }
    memo(Fun::Sqrt, r, bits, || sqrt_bisect(r, bits))
}

fn sqrt_bisect(r: &Q, bits: u32) -> Iv {
    let mut lo = Q::zero();
    let mut hi = if *r > Q::one() { r.clone() } else { Q::one() };
    // Find the integer part fast, then bisect.
    let eps = Q::one().div(&pow2(bits)).expect("pow");
    for _ in 0..(bits + 4096) {
        if hi.sub(&lo) <= eps {
            break;
        }
        let mid = down(&lo.add(&hi).mul(&Q::frac(1, 2)), bits + 2);
        if mid.mul(&mid) <= *r {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Iv { lo, hi }
}

/// log q for rational q > 0: q = 2^k m with m in [1/2, 2], and
/// log m = 2 atanh((m-1)/(m+1)).
pub fn log(q: &Q, bits: u32) -> Iv {
    if q.is_one() {
        return Iv::point(Q::zero());
    }
    memo(Fun::Log, q, bits, || log_series(q, bits))
}

fn log_series(q: &Q, bits: u32) -> Iv {
    let two = Q::int(2);
    let half = Q::frac(1, 2);
    let mut m = q.clone();
    let mut k = 0i64;
    while m > two && k < 1 << 20 {
        m = m.mul(&half);
        k += 1;
    }
    while m < half && k > -(1 << 20) {
        m = m.mul(&two);
        k -= 1;
    }
    let lm = log_reduced(&m, bits + 8);
    let l2 = log_reduced(&two, bits + 8 + 64 - (k.unsigned_abs().leading_zeros()));
    l2.mul(&Iv::point(Q::int(k))).add(&lm).round(bits)
}

/// 2 atanh(z), z = (m-1)/(m+1), |z| <= 1/3 for m in [1/2, 2].
fn log_reduced(m: &Q, bits: u32) -> Iv {
    let z = m
        .sub(&Q::one())
        .div(&m.add(&Q::one()))
        .expect("m > 0, so m + 1 > 0");
    let z2 = z.mul(&z);
    let n = bits / 3 + 4;
    let mut s = Q::zero();
    let mut p = z.clone();
    for j in 0..n {
        s = s.add(&p.div(&Q::int(2 * j as i64 + 1)).expect("odd"));
        p = p.mul(&z2);
    }
    // The terms are exact; the remainder is
    // Σ_{j>=n} |z|^(2j+1)/(2j+1) <= |z|^(2n+1) / (1 - z^2), and p = z^(2n+1).
    let err = p.abs().div(&Q::one().sub(&z2)).expect("|z| < 1");
    Iv {
        lo: s.sub(&err).mul(&two_q()),
        hi: s.add(&err).mul(&two_q()),
    }
    .round(bits)
}

fn two_q() -> Q {
    Q::int(2)
}

/// sin q and cos q by their Taylor series, with the Lagrange remainder
/// |q|^(n+1)/(n+1)!.
pub fn sin_cos(q: &Q, bits: u32) -> (Iv, Iv) {
    let wb = bits + 16;
    let mut n = terms(wb);
    // Enough terms that |q|^(n+1)/(n+1)! < 2^-wb.
    let eps = Q::one().div(&pow2(wb)).expect("pow");
    while tail(q, n) > eps && n < 4096 {
        n += 8;
    }
    let (mut s, mut c) = (Q::zero(), Q::zero());
    let mut t = Q::one();
    for j in 0..=n {
        match j % 4 {
            0 => c = c.add(&t),
            1 => s = s.add(&t),
            2 => c = c.sub(&t),
            _ => s = s.sub(&t),
        }
        t = t.mul(q).div(&Q::int(j as i64 + 1)).expect("j+1>0");
    }
    let err = tail(q, n);
    let iv = |v: Q| {
        Iv {
            lo: v.sub(&err),
            hi: v.add(&err),
        }
        .round(bits)
    };
    (iv(s), iv(c))
}

/// π, from its first 40 decimal digits (the enclosure is proved by the
/// digits: 3.1415926535897932384626433832795028841971...).
pub fn pi() -> Iv {
    let lo = Q::parse("3.141592653589793238462643383279502884197").expect("literal");
    let hi = Q::parse("3.141592653589793238462643383279502884198").expect("literal");
    Iv { lo, hi }
}

/// tanh over an enclosure of its argument (tanh is increasing):
/// tanh y = 1 - 2 / (e^(2y) + 1).
pub fn tanh(y: &Iv, bits: u32) -> Iv {
    let at = |v: &Q| {
        let e = exp(&v.mul(&Q::int(2)), bits + 8);
        let one = Iv::point(Q::one());
        let r = Iv::point(Q::int(2))
            .div(&e.add(&one))
            .expect("e^2y + 1 > 0");
        one.sub(&r)
    };
    let (a, b) = (at(&y.lo), at(&y.hi));
    Iv { lo: a.lo, hi: b.hi }.round(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contains(iv: &Iv, lo: &str, hi: &str) -> bool {
        // The enclosure lies within a known bracket of the true value and
        // is narrow.
        let (l, h) = (Q::parse(lo).unwrap(), Q::parse(hi).unwrap());
        iv.lo >= l && iv.hi <= h && iv.lo <= iv.hi
    }

    #[test]
    fn enclosures_contain_the_known_values() {
        // e = 2.718281828459045235360287...
        assert!(contains(
            &exp(&Q::one(), 96),
            "2.7182818284590452353",
            "2.7182818284590452354"
        ));
        // e^-2 = 0.1353352832366126918939994949...
        assert!(contains(
            &exp(&Q::int(-2), 96),
            "0.13533528323661269189",
            "0.13533528323661269190"
        ));
        // log 3 = 1.0986122886681098...
        assert!(contains(
            &log(&Q::int(3), 96),
            "1.09861228866810969139",
            "1.09861228866810969140"
        ));
        // log(1/2) = -0.6931471805599453094172...
        assert!(contains(
            &log(&Q::frac(1, 2), 96),
            "-0.69314718055994530942",
            "-0.69314718055994530941"
        ));
        // √2 = 1.41421356237309504880...
        assert!(contains(
            &sqrt(&Q::int(2), 96),
            "1.4142135623730950488",
            "1.4142135623730950489"
        ));
        // sin 1 = 0.8414709848078965066525..., cos 1 = 0.5403023058681397174009...
        let (s, c) = sin_cos(&Q::one(), 96);
        assert!(contains(
            &s,
            "0.84147098480789650665",
            "0.84147098480789650666"
        ));
        assert!(contains(
            &c,
            "0.54030230586813971740",
            "0.54030230586813971741"
        ));
        // tanh(1/2) = 0.46211715726000975850...
        let t = tanh(&Iv::point(Q::frac(1, 2)), 96);
        assert!(contains(
            &t,
            "0.4621171572600097585",
            "0.4621171572600097586"
        ));
    }

    #[test]
    fn memoised_enclosures_are_the_series_own() {
        // A second call is answered by the memo: the same interval the
        // series computes, at every precision asked.
        for q in ["1", "-2", "1/2", "7/3", "-1/3"] {
            let q = Q::parse(q).unwrap();
            for bits in [64, 256, 64] {
                assert_eq!(exp(&q, bits), exp_series(&q, bits));
                assert_eq!(exp(&q, bits), exp_series(&q, bits));
                let a = q.abs();
                assert_eq!(sqrt(&a, bits), sqrt_bisect(&a, bits));
                assert_eq!(log(&a, bits), log_series(&a, bits));
            }
        }
        assert_eq!(pow2(0), Q::one());
        assert_eq!(pow2(77), Q::parse("151115727451828646838272").unwrap());
    }

    #[test]
    fn a_memo_without_the_precision_would_be_caught() {
        // The negative twin: the precision is part of the memo's key, and
        // it has to be; the enclosures at 64 and 256 bits differ, so a memo
        // keyed by the argument alone would hand back the wrong one, and
        // the test above would see it.
        let q = Q::one();
        assert_ne!(exp_series(&q, 64), exp_series(&q, 256));
        let _ = exp(&q, 64);
        assert_ne!(exp(&q, 256), exp_series(&q, 64));
    }

    #[test]
    fn a_wrong_bracket_is_rejected() {
        // The negative twin: the enclosure of e does not sit inside a
        // bracket that misses e.
        assert!(!contains(
            &exp(&Q::one(), 96),
            "2.7182818284590452354",
            "2.72"
        ));
    }
}
