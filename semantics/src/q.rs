//! Exact rational scalars (SPEC.md §2 "Values").
//!
//! `Q` keeps values as `Ratio<i64>` while they fit and moves to a big
//! rational on the first operation that would overflow, so arithmetic is
//! exact and never wraps. The representation is canonical: small whenever it
//! fits, in lowest terms with a positive denominator. So two values are
//! equal exactly when their parts are, and `Eq` and `Hash` compare and hash
//! the parts (num-rational's own compare a continued-fraction expansion,
//! with divisions, which the oracle's inner loops cannot afford).
//!
//! The big rational is boxed so that a `Q` is three words: vectors of
//! values are copied and compared in the oracle's inner loops (SPEC.md §18).
//! Sums and products of small values are formed in `i128`, where they
//! cannot overflow, reduced by a binary gcd, and kept small when the
//! reduced parts fit in `i64`; otherwise the result is the big rational.

use num_bigint::BigInt;
use num_integer::Integer;
use num_rational::{BigRational, Ratio};
use num_traits::{One, Signed, ToPrimitive, Zero};
use std::cmp::Ordering;
use std::fmt;

#[derive(Clone)]
pub enum Q {
    Small(Ratio<i64>),
    Big(Box<BigRational>),
}

/// Error of a partial arithmetic operation (division by zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DivByZero;

impl Q {
    #[inline]
    pub fn int(n: i64) -> Q {
        Q::Small(Ratio::from_integer(n))
    }
    #[inline]
    pub fn zero() -> Q {
        Q::int(0)
    }
    #[inline]
    pub fn one() -> Q {
        Q::int(1)
    }
    /// `n / d`; `d` must be nonzero.
    pub fn frac(n: i64, d: i64) -> Q {
        assert!(d != 0, "Q::frac: zero denominator (interpreter bug)");
        Q::Small(Ratio::new(n, d))
    }
    fn big(&self) -> BigRational {
        match self {
            Q::Small(r) => BigRational::new(BigInt::from(*r.numer()), BigInt::from(*r.denom())),
            Q::Big(b) => (**b).clone(),
        }
    }
    /// Numerator and (positive) denominator, in lowest terms.
    pub(crate) fn parts(&self) -> (BigInt, BigInt) {
        match self {
            Q::Small(r) => (BigInt::from(*r.numer()), BigInt::from(*r.denom())),
            Q::Big(b) => (b.numer().clone(), b.denom().clone()),
        }
    }
    /// `n / d`, `d` nonzero, reduced.
    pub(crate) fn from_parts(n: BigInt, d: BigInt) -> Q {
        assert!(
            !d.is_zero(),
            "Q::from_parts: zero denominator (interpreter bug)"
        );
        if d.is_negative() {
            big_reduced(-n, -d)
        } else {
            big_reduced(n, d)
        }
    }
    fn from_big(b: BigRational) -> Q {
        match (b.numer().to_i64(), b.denom().to_i64()) {
            (Some(n), Some(d)) => Q::Small(Ratio::new_raw(n, d)),
            _ => Q::Big(Box::new(b)),
        }
    }
    #[inline]
    pub fn is_zero(&self) -> bool {
        match self {
            Q::Small(r) => r.is_zero(),
            Q::Big(b) => b.is_zero(),
        }
    }
    #[inline]
    pub fn is_one(&self) -> bool {
        match self {
            Q::Small(r) => *r.numer() == 1 && *r.denom() == 1,
            Q::Big(b) => b.is_one(),
        }
    }
    pub fn is_integer(&self) -> bool {
        match self {
            Q::Small(r) => r.is_integer(),
            Q::Big(b) => b.is_integer(),
        }
    }
    pub fn is_negative(&self) -> bool {
        match self {
            Q::Small(r) => r.is_negative(),
            Q::Big(b) => b.is_negative(),
        }
    }
    /// `self + o`. The integer and zero cases are inlined at the caller
    /// (the oracle's inner loops live in other crates); the rest is
    /// `add_general`.
    #[inline]
    pub fn add(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if *a.denom() == 1 && *b.denom() == 1 {
                if let Some(n) = i64::checked_add(*a.numer(), *b.numer()) {
                    return Q::Small(Ratio::new_raw(n, 1));
                }
            }
        }
        self.add_general(o)
    }
    #[inline(never)]
    fn add_general(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            // Zeros need no gcd.
            if *b.numer() == 0 {
                return self.clone();
            }
            if *a.numer() == 0 {
                return o.clone();
            }
            if let Some(r) = small_add(a, *b.numer(), *b.denom()) {
                return r;
            }
        }
        big_add(self, o, false)
    }
    pub fn sub(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if *a.denom() == 1 && *b.denom() == 1 {
                if let Some(n) = i64::checked_sub(*a.numer(), *b.numer()) {
                    return Q::Small(Ratio::new_raw(n, 1));
                }
            }
            // -b's numerator is formed in i128 inside `small_add`, so
            // i64::MIN needs no special case.
            if let Some(r) = small_add_neg(a, *b.numer(), *b.denom()) {
                return r;
            }
        }
        big_add(self, o, true)
    }
    /// `self · o`, split like `add`: integers inlined, the rest in
    /// `mul_general`.
    #[inline]
    pub fn mul(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if *a.denom() == 1 && *b.denom() == 1 {
                if let Some(n) = i64::checked_mul(*a.numer(), *b.numer()) {
                    return Q::Small(Ratio::new_raw(n, 1));
                }
            }
        }
        self.mul_general(o)
    }
    /// `self += a · b` in place: the sum of products of an einsum or a
    /// weighted fold. Integers that fit are added into `self` without a
    /// new value; anything else is `self.add(&a.mul(b))`.
    #[inline]
    pub fn add_mul(&mut self, a: &Q, b: &Q) {
        if let (Q::Small(s), Q::Small(x), Q::Small(y)) = (&mut *self, a, b) {
            if *s.denom() == 1 && *x.denom() == 1 && *y.denom() == 1 {
                if let Some(n) = x
                    .numer()
                    .checked_mul(*y.numer())
                    .and_then(|p| s.numer().checked_add(p))
                {
                    *s = Ratio::new_raw(n, 1);
                    return;
                }
            }
        }
        *self = self.add(&a.mul(b));
    }
    #[inline(never)]
    fn mul_general(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if *a.numer() == 0 || *b.numer() == 0 {
                return Q::zero();
            }
            // A unit factor (a direction's entry, a weight) needs no gcd.
            if *b.numer() == 1 && *b.denom() == 1 {
                return self.clone();
            }
            if *a.numer() == 1 && *a.denom() == 1 {
                return o.clone();
            }
            if let Some(r) = small_mul(a, b) {
                return r;
            }
        }
        big_mul(self.parts(), o.parts())
    }
    pub fn div(&self, o: &Q) -> Result<Q, DivByZero> {
        if o.is_zero() {
            return Err(DivByZero);
        }
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if *a.numer() == 0 {
                return Ok(Q::zero());
            }
            // a / (bn/bd) = a · (bd/bn), the sign kept apart.
            if let Some(r) = mul_parts(
                *a.numer() < 0,
                a.numer().unsigned_abs(),
                *a.denom() as u64,
                *b.numer() < 0,
                *b.denom() as u64,
                b.numer().unsigned_abs(),
            ) {
                return Ok(r);
            }
        }
        let (n, d) = o.parts();
        // o is nonzero: its reciprocal d/n, the sign moved to the top.
        let inv = if n.is_negative() { (-d, -n) } else { (d, n) };
        Ok(big_mul(self.parts(), inv))
    }
    pub fn neg(&self) -> Q {
        match self {
            Q::Small(r) if *r.numer() != i64::MIN => Q::Small(-r),
            _ => Q::from_big(-self.big()),
        }
    }
    pub fn abs(&self) -> Q {
        if self.is_negative() {
            self.neg()
        } else {
            self.clone()
        }
    }
    pub fn floor(&self) -> Q {
        match self {
            Q::Small(r) => Q::Small(r.floor()),
            Q::Big(b) => Q::from_big(b.floor()),
        }
    }
    /// Round to the nearest multiple of 2^-bits, ties to even (the rounding of
    /// a narrowing float cast, SPEC.md §6.4).
    pub fn round_to_bits(&self, bits: u32) -> Q {
        let scale = Q::from_big(BigRational::from_integer(BigInt::one() << bits));
        let y = self.mul(&scale);
        let f = y.floor();
        let frac = y.sub(&f);
        let half = Q::frac(1, 2);
        let up = match frac.cmp(&half) {
            Ordering::Less => false,
            Ordering::Greater => true,
            Ordering::Equal => !f.is_even_integer(),
        };
        let r = if up { f.add(&Q::one()) } else { f };
        r.div(&scale).expect("2^bits is nonzero")
    }
    fn is_even_integer(&self) -> bool {
        match self {
            Q::Small(r) => r.is_integer() && r.numer().is_even(),
            Q::Big(b) => b.is_integer() && b.numer().is_even(),
        }
    }
    /// Integer value if this is an integer that fits in i64.
    pub fn to_i64(&self) -> Option<i64> {
        match self {
            Q::Small(r) if r.is_integer() => Some(*r.numer()),
            _ => None,
        }
    }
    /// Parse `n`, `-n`, `n/d`, and decimals `-1.25`, `1e-3`, `2.5E+2`, all
    /// exactly (`0.1` is 1/10). `None` for anything else, for a text longer
    /// than `MAX_TEXT` characters or an exponent beyond ±`MAX_EXP`.
    pub fn parse(s: &str) -> Option<Q> {
        let s = s.trim();
        if s.len() > Self::MAX_TEXT {
            return None;
        }
        match s.split_once('/') {
            Some((n, d)) => {
                let (n, d) = (
                    Self::parse_decimal(n.trim())?,
                    Self::parse_decimal(d.trim())?,
                );
                if d.is_zero() {
                    return None;
                }
                n.div(&d).ok()
            }
            None => Self::parse_decimal(s),
        }
    }
    /// The longest text `parse` reads.
    pub const MAX_TEXT: usize = 2048;
    /// The largest decimal exponent `parse` reads.
    pub const MAX_EXP: u32 = 1000;
    fn parse_decimal(s: &str) -> Option<Q> {
        let (neg, body) = match s.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (mantissa, exp) = match body.find(['e', 'E']) {
            Some(k) => (&body[..k], body[k + 1..].parse::<i64>().ok()?),
            None => (body, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if (int.is_empty() && frac.is_empty())
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let digits: BigInt = format!("{int}{frac}").parse().ok()?;
        let e = exp.checked_sub(frac.len() as i64)?;
        if e.unsigned_abs() > u64::from(Self::MAX_EXP) + Self::MAX_TEXT as u64 {
            return None;
        }
        if exp.unsigned_abs() > u64::from(Self::MAX_EXP) {
            return None;
        }
        let ten = BigInt::from(10);
        let pow = num_traits::pow(ten, e.unsigned_abs() as usize);
        let r = if e >= 0 {
            BigRational::from_integer(digits * pow)
        } else {
            BigRational::new(digits, pow)
        };
        Some(Q::from_big(if neg { -r } else { r }))
    }
}

/// Binary gcd of two nonnegative integers; `gcd(0, b) = b`.
#[inline]
/// gcd of two big integers' magnitudes. num-bigint's is binary: it walks a
/// big number bit by bit even against a small one (every operation on a
/// 2,000-bit constant cost ~100 µs, and `derive --expr "3^1000-x-y-z"` ran
/// for minutes). Here the common power of two comes off first (the
/// enclosures' denominators are powers of two), and against an odd part
/// that fits 64 bits one division brings the pair to `gcd_u64`; two big
/// odd parts keep num-bigint's.
fn gcd_big(a: &BigInt, b: &BigInt) -> BigInt {
    let (x, y) = (a.magnitude(), b.magnitude());
    let (Some(tx), Some(ty)) = (x.trailing_zeros(), y.trailing_zeros()) else {
        // gcd(0, y) = |y|.
        return BigInt::from(if x.is_zero() { y.clone() } else { x.clone() });
    };
    let (x, y) = (x >> tx, y >> ty);
    let (big, small) = if x >= y { (&x, &y) } else { (&y, &x) };
    let odd = match small.to_u64() {
        Some(s) => {
            let r = (big % s).to_u64().expect("a remainder mod a u64 fits");
            num_bigint::BigUint::from(gcd_u64(s, r))
        }
        None => x.gcd(&y),
    };
    BigInt::from(odd << tx.min(ty))
}

/// `n / d` in canonical form, d > 0.
fn big_reduced(mut n: BigInt, mut d: BigInt) -> Q {
    let g = gcd_big(&n, &d);
    if !g.is_one() {
        n /= &g;
        d /= &g;
    }
    Q::from_big(BigRational::new_raw(n, d))
}

/// `a + b`, or `a - b` with `sub`, beyond the small paths.
fn big_add(a: &Q, b: &Q, sub: bool) -> Q {
    let ((an, ad), (bn, bd)) = (a.parts(), b.parts());
    let bn = if sub { -bn } else { bn };
    if ad == bd {
        big_reduced(an + bn, ad)
    } else {
        big_reduced(an * &bd + bn * &ad, ad * bd)
    }
}

/// `(an/ad) · (bn/bd)` of canonical parts (ad, bd > 0): cross-reduced, so
/// the product is in lowest terms without a gcd of the products.
fn big_mul((an, ad): (BigInt, BigInt), (bn, bd): (BigInt, BigInt)) -> Q {
    let (g1, g2) = (gcd_big(&an, &bd), gcd_big(&bn, &ad));
    let n = (an / &g1) * (bn / &g2);
    let d = (ad / &g2) * (bd / &g1);
    Q::from_big(BigRational::new_raw(n, d))
}

fn gcd_u64(mut a: u64, mut b: u64) -> u64 {
    if a == 0 {
        return b;
    }
    if b == 0 {
        return a;
    }
    // An integer's denominator, a unit numerator: the loop would take one
    // step per bit of the other value to find 1.
    if a == 1 || b == 1 {
        return 1;
    }
    let k = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        // Odd parts with a 1 among them share nothing more. A power of two
        // against an odd number (a dyadic step's denominator against a
        // numerator) gets here in one step instead of one per bit.
        if a == 1 {
            return 1 << k;
        }
        b -= a;
        if b == 0 {
            return a << k;
        }
    }
}

/// `gcd_u64` for 128-bit values; falls to the 64-bit loop once both fit.
fn gcd_u128(mut a: u128, mut b: u128) -> u128 {
    if a == 0 {
        return b;
    }
    if b == 0 {
        return a;
    }
    let k = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        if b <= u64::MAX as u128 {
            return (gcd_u64(a as u64, b as u64) as u128) << k;
        }
        b -= a;
        if b == 0 {
            return a << k;
        }
    }
}

/// `x / g` for a `g` that divides `x`: a shift when `g` is a power of two
/// (the gcds of dyadic values always are), a division otherwise.
#[inline(always)]
fn exact_div(x: u64, g: u64) -> u64 {
    if g.is_power_of_two() {
        x >> g.trailing_zeros()
    } else {
        x / g
    }
}

/// `n / d` reduced (d > 0), as a small `Q` when both parts fit in `i64`.
#[inline]
fn reduced(n: i128, d: u128) -> Option<Q> {
    let (nu, neg) = (n.unsigned_abs(), n < 0);
    let (nu, d) = match (u64::try_from(nu), u64::try_from(d)) {
        // The common case: 64-bit gcd and divisions.
        (Ok(a), Ok(b)) => match gcd_u64(a, b) {
            1 => (a as u128, b as u128),
            g => (exact_div(a, g) as u128, exact_div(b, g) as u128),
        },
        _ => {
            let g = gcd_u128(nu, d);
            (nu / g, d / g)
        }
    };
    small_of(neg, nu, d)
}

/// The small `Q` with sign `neg`, magnitude `n` and denominator `d` (in
/// lowest terms), when both fit in `i64`.
#[inline]
fn small_of(neg: bool, n: u128, d: u128) -> Option<Q> {
    let d = i64::try_from(d).ok()?;
    let n = if neg {
        // -2^63 fits; its magnitude does not fit in i64.
        i64::try_from(-(i128::try_from(n).ok()?)).ok()?
    } else {
        i64::try_from(n).ok()?
    };
    Some(Q::Small(Ratio::new_raw(n, d)))
}

/// `an/ad + bn/bd` for lowest-terms parts (denominators positive, `bn` a
/// possibly negated `i64`), by Knuth's method (TAOCP 4.5.1): the gcd of the
/// denominators first, so the result needs at most one more small gcd.
/// Every product of two parts fits in `i128`; `None` when the result does
/// not fit in `i64`.
#[inline(always)]
fn add_parts(an: i64, ad: i64, bn: i128, bd: i64) -> Option<Q> {
    let (an, adu, bdu) = (an as i128, ad as u64, bd as u64);
    if adu.is_power_of_two() && bdu.is_power_of_two() {
        // Dyadic parts (a piecewise op's steps k/2^16 and what they make):
        // over the larger power of two, reduced by the numerator's factors
        // of two; shifts, no gcd and no division. Denominators are below
        // 2^63 and |bn| at most 2^63, so each shifted term is below 2^125.
        let (p, q) = (adu.trailing_zeros(), bdu.trailing_zeros());
        let m = p.max(q);
        let t = (an << (m - p)) + (bn << (m - q));
        if t == 0 {
            return Some(Q::zero());
        }
        let tu = t.unsigned_abs();
        let s = tu.trailing_zeros().min(m);
        return small_of(t < 0, tu >> s, 1u128 << (m - s));
    }
    if ad == bd {
        return reduced(an + bn, adu as u128);
    }
    let g = gcd_u64(adu, bdu);
    if g == 1 {
        // Coprime denominators: the sum is already in lowest terms.
        let t = an * bd as i128 + bn * ad as i128;
        return small_of(t < 0, t.unsigned_abs(), adu as u128 * bdu as u128);
    }
    let (ad1, bd1) = (adu / g, bdu / g);
    let t = an * bd1 as i128 + bn * ad1 as i128;
    let tu = t.unsigned_abs();
    // The remainder in 64 bits when the numerator fits (a 128-bit one is a
    // library call).
    let (r, t64) = match u64::try_from(tu) {
        Ok(t64) => (t64 % g, Some(t64)),
        Err(_) => ((tu % g as u128) as u64, None),
    };
    let g2 = gcd_u64(r, g);
    if g2 == 1 {
        return small_of(t < 0, tu, ad1 as u128 * bdu as u128);
    }
    let n = match t64 {
        Some(t64) => (t64 / g2) as u128,
        None => tu / g2 as u128,
    };
    small_of(t < 0, n, ad1 as u128 * (bdu / g2) as u128)
}

/// `a + n/d` for canonical small parts.
#[inline]
fn small_add(a: &Ratio<i64>, n: i64, d: i64) -> Option<Q> {
    add_parts(*a.numer(), *a.denom(), n as i128, d)
}

/// `a - n/d`: the numerator negated in `i128`, so i64::MIN needs no care.
#[inline]
fn small_add_neg(a: &Ratio<i64>, n: i64, d: i64) -> Option<Q> {
    add_parts(*a.numer(), *a.denom(), -(n as i128), d)
}

/// `a · b` for canonical small parts: cross-cancel first (Knuth), so the
/// product is already in lowest terms; `None` when it does not fit.
#[inline]
fn small_mul(a: &Ratio<i64>, b: &Ratio<i64>) -> Option<Q> {
    mul_parts(
        *a.numer() < 0,
        a.numer().unsigned_abs(),
        *a.denom() as u64,
        *b.numer() < 0,
        b.numer().unsigned_abs(),
        *b.denom() as u64,
    )
}

/// `(±an/ad) · (±bn/bd)` for lowest-terms magnitudes and positive
/// denominators, all below 2^64: 64-bit gcds and divisions, one 128-bit
/// product each.
#[inline(always)]
fn mul_parts(an_neg: bool, an: u64, ad: u64, bn_neg: bool, bn: u64, bd: u64) -> Option<Q> {
    let g1 = gcd_u64(an, bd);
    let g2 = gcd_u64(bn, ad);
    // Most factors share nothing: no 64-bit divisions then.
    let (an, bd) = if g1 == 1 {
        (an, bd)
    } else {
        (exact_div(an, g1), exact_div(bd, g1))
    };
    let (bn, ad) = if g2 == 1 {
        (bn, ad)
    } else {
        (exact_div(bn, g2), exact_div(ad, g2))
    };
    let (n, d) = (an as u128 * bn as u128, ad as u128 * bd as u128);
    small_of(an_neg != bn_neg && n != 0, n, d)
}

impl PartialEq for Q {
    /// Numeric equality: the parts, since both sides are canonical.
    #[inline]
    fn eq(&self, o: &Q) -> bool {
        match (self, o) {
            (Q::Small(a), Q::Small(b)) => a.numer() == b.numer() && a.denom() == b.denom(),
            (Q::Big(a), Q::Big(b)) => a.numer() == b.numer() && a.denom() == b.denom(),
            // A canonical big value does not fit in i64 parts.
            _ => false,
        }
    }
}
impl Eq for Q {}

impl std::hash::Hash for Q {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        match self {
            Q::Small(r) => {
                r.numer().hash(h);
                r.denom().hash(h);
            }
            Q::Big(b) => {
                b.numer().hash(h);
                b.denom().hash(h);
            }
        }
    }
}

impl PartialOrd for Q {
    fn partial_cmp(&self, o: &Q) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Q {
    fn cmp(&self, o: &Q) -> Ordering {
        match (self, o) {
            (Q::Small(a), Q::Small(b)) => {
                // Cross-multiplication in i128 cannot overflow for i64 parts.
                let l = *a.numer() as i128 * *b.denom() as i128;
                let r = *b.numer() as i128 * *a.denom() as i128;
                l.cmp(&r)
            }
            // Denominators are positive: cross-multiply, as above.
            _ => {
                let (a, b) = (self.big(), o.big());
                (a.numer() * b.denom()).cmp(&(b.numer() * a.denom()))
            }
        }
    }
}

impl fmt::Display for Q {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Q::Small(r) => write!(f, "{}", r),
            Q::Big(b) => write!(f, "{}", b),
        }
    }
}
impl fmt::Debug for Q {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

impl From<i64> for Q {
    fn from(n: i64) -> Q {
        Q::int(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_promotes_instead_of_wrapping() {
        let big = Q::int(i64::MAX);
        let s = big.add(&Q::one());
        assert!(matches!(s, Q::Big(_)));
        assert_eq!(s.sub(&Q::one()), Q::int(i64::MAX));
        let sq = big.mul(&big);
        assert_eq!(sq.div(&big).unwrap(), big);
        assert_eq!(Q::int(i64::MIN).neg().neg(), Q::int(i64::MIN));
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        assert_eq!(Q::frac(3, 8).round_to_bits(2), Q::frac(1, 2)); // 1.5 quarters -> 2
        assert_eq!(Q::frac(1, 8).round_to_bits(2), Q::zero()); // 0.5 quarters -> 0
        assert_eq!(Q::frac(-5, 8).round_to_bits(2), Q::frac(-1, 2));
        assert_eq!(Q::frac(1, 3).round_to_bits(0), Q::zero());
    }

    #[test]
    fn parse_and_print() {
        assert_eq!(Q::parse("-6/4").unwrap(), Q::frac(-3, 2));
        assert_eq!(Q::frac(-3, 2).to_string(), "-3/2");
        assert!(Q::parse("1/0").is_none());
        assert!(Q::parse("x").is_none());
    }
    /// The i128 fast paths against the big rationals they stand in for:
    /// edge values (i64::MIN and MAX, large coprime denominators) whose sums
    /// and products overflow i64 must come back big and exact, and results
    /// that fit must come back small (the canonical form `Eq` relies on).
    #[test]
    fn small_paths_agree_with_big_rationals() {
        let parts: [i64; 15] = [
            0,
            65537,
            -3 << 20,
            1,
            -1,
            3,
            -7,
            6,
            -10,
            45,
            i64::MAX,
            i64::MIN,
            i64::MAX - 1,
            (1 << 40) + 1,
            -(1 << 33) - 5,
        ];
        // Powers of two among them, for the dyadic path (k/2^16 steps).
        let dens: [i64; 11] = [
            1,
            2,
            3,
            4,
            9,
            10,
            i64::MAX,
            (1 << 40) + 7,
            1 << 62,
            1 << 16,
            3 << 16,
        ];
        let mut vals = Vec::new();
        for &n in &parts {
            for &d in &dens {
                vals.push(Q::from_big(BigRational::new(
                    BigInt::from(n),
                    BigInt::from(d),
                )));
            }
        }
        let canon = |b: BigRational| Q::from_big(b);
        let mut went_big = 0;
        for a in &vals {
            for b in &vals {
                let (ba, bb) = (a.big(), b.big());
                for (got, want) in [
                    (a.add(b), canon(&ba + &bb)),
                    (a.sub(b), canon(&ba - &bb)),
                    (a.mul(b), canon(&ba * &bb)),
                ] {
                    assert_eq!(got, want, "{a} and {b}");
                    assert_eq!(matches!(got, Q::Small(_)), matches!(want, Q::Small(_)));
                    went_big += usize::from(matches!(got, Q::Big(_)));
                }
                if !b.is_zero() {
                    assert_eq!(a.div(b).unwrap(), canon(&ba / &bb), "{a} / {b}");
                }
            }
        }
        // The twin: the overflow path was really taken.
        assert!(went_big > 100, "only {went_big} results overflowed i64");
        assert_eq!(
            Q::frac(1, i64::MAX).add(&Q::frac(1, i64::MAX - 1)),
            canon(
                BigRational::new(1.into(), i64::MAX.into())
                    + BigRational::new(1.into(), (i64::MAX - 1).into())
            )
        );
    }

    /// The big paths (`gcd_big`, `big_add`, `big_mul`) against num-rational
    /// on values of hundreds of bits, with odd, even, power-of-two and
    /// shared denominators: the same value, in canonical form.
    #[test]
    fn big_paths_agree_with_num_rational() {
        let b = |n: BigInt, d: BigInt| BigRational::new(n, d);
        let two = |k: u32| -> BigInt { BigInt::one() << k };
        let three = |k: u32| -> BigInt { num_traits::pow(BigInt::from(3), k as usize) };
        let raw = [
            b(two(639) - BigInt::from(7), BigInt::one()),
            b(three(1000), BigInt::from(2)),
            b(BigInt::one(), two(200)),
            b(two(130) + BigInt::one(), three(50)),
            b(-(two(70) + BigInt::from(3)), two(66)),
            b(three(60), two(90) * BigInt::from(5)),
            b(BigInt::from(5), BigInt::from(7)),
            b(BigInt::from(-1), BigInt::from(i64::MAX)),
            b(BigInt::zero(), BigInt::one()),
            b(two(64), BigInt::one()),
            b(-(three(45) * BigInt::from(6)), three(44) * BigInt::from(4)),
        ];
        let vals: Vec<Q> = raw.iter().map(|r| Q::from_big(r.clone())).collect();
        for a in &vals {
            assert!(canonical(a), "{a}");
            for c in &vals {
                let (ba, bc) = (a.big(), c.big());
                for (got, want) in [
                    (a.add(c), &ba + &bc),
                    (a.sub(c), &ba - &bc),
                    (a.mul(c), &ba * &bc),
                ] {
                    assert!(canonical(&got), "{a} and {c}: {got}");
                    assert_eq!(got, Q::from_big(want), "{a} and {c}");
                }
                if !c.is_zero() {
                    let got = a.div(c).unwrap();
                    assert!(canonical(&got), "{a} / {c}: {got}");
                    assert_eq!(got, Q::from_big(&ba / &bc), "{a} / {c}");
                }
            }
        }
        // from_parts reduces, and moves the sign to the numerator.
        let q = Q::from_parts(-(two(100) * BigInt::from(6)), -(two(99) * BigInt::from(4)));
        assert_eq!(q, Q::int(3));
        assert!(canonical(&Q::from_parts(
            two(300) + BigInt::one(),
            -two(301)
        )));
        // The twin: gcd_big is the gcd, not a divisor of it.
        assert_eq!(
            gcd_big(
                &(three(80) * BigInt::from(12)),
                &(three(70) * BigInt::from(8))
            ),
            three(70) * BigInt::from(4)
        );
        assert_eq!(gcd_big(&two(500), &(two(300) * BigInt::from(3))), two(300));
        assert_eq!(gcd_big(&BigInt::zero(), &three(90)), three(90));
    }

    /// Lowest terms, a positive denominator, small whenever it fits: what
    /// `Eq` and `Hash` rely on.
    fn canonical(q: &Q) -> bool {
        match q {
            Q::Small(r) => {
                *r.denom() > 0 && gcd_u64(r.numer().unsigned_abs(), *r.denom() as u64) == 1
            }
            Q::Big(b) => {
                b.denom().is_positive()
                    && b.numer().gcd(b.denom()).is_one()
                    && (b.numer().to_i64().is_none() || b.denom().to_i64().is_none())
            }
        }
    }

    /// Every way of making a value gives its canonical form, so equality
    /// of parts is numeric equality and agrees with `cmp`; the twin, a
    /// value left in non-lowest terms, equals its reduced form numerically
    /// but not by parts, and fails `canonical`.
    #[test]
    fn values_are_canonical_and_equality_is_numeric() {
        let half_ways = [
            Q::frac(1, 2),
            Q::frac(-2, -4),
            Q::parse("0.5").unwrap(),
            Q::parse("3/6").unwrap(),
            Q::frac(1, 4).add(&Q::frac(1, 4)),
            Q::frac(3, 4).sub(&Q::frac(1, 4)),
            Q::frac(2, 3).mul(&Q::frac(3, 4)),
            Q::int(3).div(&Q::int(6)).unwrap(),
            Q::frac(1, 2).round_to_bits(4),
        ];
        for h in &half_ways {
            assert!(canonical(h), "{h}");
            assert_eq!(h, &half_ways[0]);
            assert_eq!(h.cmp(&half_ways[0]), Ordering::Equal);
        }
        let big = Q::int(i64::MAX).add(&Q::one());
        let vals = [
            Q::zero(),
            Q::int(-3),
            Q::frac(7, 3),
            Q::frac(-7, 3),
            big.clone(),
            big.neg(),
            big.div(&Q::int(3)).unwrap(),
            Q::frac(1, i64::MAX).mul(&Q::frac(1, 3)),
        ];
        for a in &vals {
            assert!(canonical(a), "{a}");
            for b in &vals {
                let numeric = a.big() == b.big();
                assert_eq!(a == b, numeric, "{a} vs {b}");
                assert_eq!(a.cmp(b), a.big().cmp(&b.big()), "{a} vs {b}");
            }
        }
        let raw = Q::Small(Ratio::new_raw(2, 4));
        assert!(!canonical(&raw));
        assert_eq!(raw.big(), Q::frac(1, 2).big());
        assert_ne!(raw, Q::frac(1, 2));
    }

    /// `add_mul` is `self + a · b` on every pair of small and big values,
    /// the integer path's overflows included; the twin, `self + a` alone,
    /// differs wherever b is not 1.
    #[test]
    fn add_mul_is_add_of_mul() {
        let vals = [
            Q::zero(),
            Q::one(),
            Q::int(-3),
            Q::int(i64::MAX),
            Q::int(i64::MIN),
            Q::int(1 << 32),
            Q::frac(2, 3),
            Q::int(i64::MAX).add(&Q::one()),
        ];
        let mut twin_differs = 0;
        for s in &vals {
            for a in &vals {
                for b in &vals {
                    let mut got = s.clone();
                    got.add_mul(a, b);
                    assert_eq!(got, s.add(&a.mul(b)), "{s} + {a} * {b}");
                    twin_differs += usize::from(got != s.add(a));
                }
            }
        }
        assert!(twin_differs > 300, "{twin_differs}");
    }

    #[test]
    fn gcds() {
        assert_eq!(gcd_u64(0, 5), 5);
        assert_eq!(gcd_u64(12, 18), 6);
        assert_eq!(gcd_u64(1, 1 << 40), 1);
        assert_eq!(gcd_u64(u64::MAX, 1), 1);
        assert_eq!(gcd_u64(1, 1), 1);
        assert_eq!(gcd_u64(7, 7), 7);
        assert_eq!(gcd_u128(1 << 100, 3 << 70), 1 << 70);
        assert_eq!(gcd_u128(u128::MAX, 5), 5);
        assert_eq!(gcd_u128(0, 0), 0);
    }

    /// The binary gcd, with its early exit at an odd part of 1, against
    /// Euclid's on powers of two times odd numbers (dyadic denominators
    /// against numerators), neighbours of powers and large values.
    #[test]
    fn the_binary_gcd_is_euclids() {
        fn euclid(mut a: u64, mut b: u64) -> u64 {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        }
        let mut vals: Vec<u64> = vec![0, 1, 2, 3, 5, 6, 9, 12, 15, 255, 65535, 65536, 65537];
        for k in [1u32, 7, 16, 31, 40, 62, 63] {
            for m in [1u64, 3, 5, 7, 45] {
                vals.push(m.wrapping_shl(k));
                vals.push((1u64 << k).wrapping_mul(m).wrapping_add(1));
            }
        }
        vals.extend([u64::MAX, u64::MAX - 1, 1 << 63, 6_700_417, (641 * 3) << 20]);
        let mut shared = 0;
        for &a in &vals {
            for &b in &vals {
                assert_eq!(gcd_u64(a, b), euclid(a, b), "gcd({a}, {b})");
                shared += usize::from(euclid(a, b) > 1);
            }
        }
        // The pairs are not all coprime, so a gcd that always answered 1
        // (or the odd parts' 1 shifted) would be caught.
        assert!(shared > 500, "{shared}");
    }
}
