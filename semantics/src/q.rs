//! Exact rational scalars (SPEC.md §2 "Values").
//!
//! `Q` keeps values as `Ratio<i64>` while they fit and moves to a big
//! rational on the first operation that would overflow, so arithmetic is
//! exact and never wraps. The representation is canonical (small whenever it
//! fits), which makes the derived `Eq` and `Hash` agree with numeric equality.

use num_bigint::BigInt;
use num_integer::Integer;
use num_rational::{BigRational, Ratio};
use num_traits::{CheckedAdd, CheckedDiv, CheckedMul, CheckedSub, One, Signed, ToPrimitive, Zero};
use std::cmp::Ordering;
use std::fmt;

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Q {
    Small(Ratio<i64>),
    Big(BigRational),
}

/// Error of a partial arithmetic operation (division by zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DivByZero;

impl Q {
    pub fn int(n: i64) -> Q {
        Q::Small(Ratio::from_integer(n))
    }
    pub fn zero() -> Q {
        Q::int(0)
    }
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
            Q::Big(b) => b.clone(),
        }
    }
    fn from_big(b: BigRational) -> Q {
        match (b.numer().to_i64(), b.denom().to_i64()) {
            (Some(n), Some(d)) => Q::Small(Ratio::new_raw(n, d)),
            _ => Q::Big(b),
        }
    }
    pub fn is_zero(&self) -> bool {
        match self {
            Q::Small(r) => r.is_zero(),
            Q::Big(b) => b.is_zero(),
        }
    }
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
    pub fn add(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            // Integers and zeros need no gcd.
            if *b.numer() == 0 {
                return self.clone();
            }
            if *a.numer() == 0 {
                return o.clone();
            }
            if *a.denom() == 1 && *b.denom() == 1 {
                if let Some(n) = i64::checked_add(*a.numer(), *b.numer()) {
                    return Q::Small(Ratio::new_raw(n, 1));
                }
            }
            if let Some(r) = a.checked_add(b) {
                return Q::Small(r);
            }
        }
        Q::from_big(self.big() + o.big())
    }
    pub fn sub(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if *a.denom() == 1 && *b.denom() == 1 {
                if let Some(n) = i64::checked_sub(*a.numer(), *b.numer()) {
                    return Q::Small(Ratio::new_raw(n, 1));
                }
            }
            if let Some(r) = a.checked_sub(b) {
                return Q::Small(r);
            }
        }
        Q::from_big(self.big() - o.big())
    }
    pub fn mul(&self, o: &Q) -> Q {
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if *a.numer() == 0 || *b.numer() == 0 {
                return Q::zero();
            }
            if *a.denom() == 1 && *b.denom() == 1 {
                if let Some(n) = i64::checked_mul(*a.numer(), *b.numer()) {
                    return Q::Small(Ratio::new_raw(n, 1));
                }
            }
            if let Some(r) = a.checked_mul(b) {
                return Q::Small(r);
            }
        }
        Q::from_big(self.big() * o.big())
    }
    pub fn div(&self, o: &Q) -> Result<Q, DivByZero> {
        if o.is_zero() {
            return Err(DivByZero);
        }
        if let (Q::Small(a), Q::Small(b)) = (self, o) {
            if let Some(r) = a.checked_div(b) {
                return Ok(Q::Small(r));
            }
        }
        Ok(Q::from_big(self.big() / o.big()))
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
            _ => self.big().cmp(&o.big()),
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
}
