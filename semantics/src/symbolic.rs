//! Symbolic values for deciding a case by identity (SPEC.md §19.8): every
//! free scalar of a case is a variable, and the ops are run on fractions of
//! exponential polynomials in those variables. A comparison that holds as
//! an identity of such fractions holds at every point of the case; one
//! that does not is left undecided here (the grid, or nothing, decides it).
//!
//! The ring is Q[x][e^p : p ∈ Q[x]]: finite sums of terms c · m(x) · e^{p(x)}
//! with rational c, a monomial m and a polynomial exponent p (its constant
//! term included), equal (m, p) collected and zero coefficients dropped.
//! Those terms are linearly independent over Q as functions, so a sum is
//! the zero function exactly when its normal form is empty (the argument
//! is in SPEC.md §19.8). A value is num / den with den a sum of terms
//! c · e^p, all c of one sign: positive or negative everywhere, never zero,
//! so a/b = c/d as functions exactly when ad − cb is the zero function. A
//! division by anything else, and every function other than exp, is
//! refused (`XErr::Unsupported`): what this domain cannot keep exact is
//! never approximated.

use crate::expoly::XErr;
use crate::Q;
use std::cmp::Ordering;

/// A variable: a free scalar of the case, numbered in order.
pub type Var = u32;

/// A monomial: (variable, power ≥ 1), sorted by variable.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mono(Vec<(Var, u32)>);

impl Mono {
    fn is_one(&self) -> bool {
        self.0.is_empty()
    }
    fn mul(&self, o: &Mono) -> Result<Mono, XErr> {
        if o.is_one() {
            return Ok(self.clone());
        }
        if self.is_one() {
            return Ok(o.clone());
        }
        let (a, b) = (&self.0, &o.0);
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                Ordering::Less => {
                    out.push(a[i]);
                    i += 1;
                }
                Ordering::Greater => {
                    out.push(b[j]);
                    j += 1;
                }
                Ordering::Equal => {
                    let k = a[i].1.checked_add(b[j].1).ok_or_else(too_big)?;
                    out.push((a[i].0, k));
                    i += 1;
                    j += 1;
                }
            }
        }
        out.extend_from_slice(&a[i..]);
        out.extend_from_slice(&b[j..]);
        Ok(Mono(out))
    }
}

fn too_big() -> XErr {
    XErr::Unsupported("a symbolic power beyond u32".into())
}

/// Terms sorted by key with nonzero coefficients: the normal form both
/// levels share (a polynomial in the exponent, a ring element outside).
fn merge<K: Ord + Clone>(a: &[(K, Q)], b: &[(K, Q)], negate_b: bool) -> Vec<(K, Q)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    let nb = |c: &Q| if negate_b { c.neg() } else { c.clone() };
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            Ordering::Less => {
                out.push(a[i].clone());
                i += 1;
            }
            Ordering::Greater => {
                out.push((b[j].0.clone(), nb(&b[j].1)));
                j += 1;
            }
            Ordering::Equal => {
                let c = if negate_b {
                    a[i].1.sub(&b[j].1)
                } else {
                    a[i].1.add(&b[j].1)
                };
                if !c.is_zero() {
                    out.push((a[i].0.clone(), c));
                }
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend(b[j..].iter().map(|(k, c)| (k.clone(), nb(c))));
    out
}

/// Sort terms by key, add equal keys, drop zeros.
fn collect<K: Ord>(mut v: Vec<(K, Q)>) -> Vec<(K, Q)> {
    v.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<(K, Q)> = Vec::with_capacity(v.len());
    for (k, c) in v {
        match out.last_mut() {
            Some((l, s)) if *l == k => *s = s.add(&c),
            _ => out.push((k, c)),
        }
    }
    out.retain(|(_, c)| !c.is_zero());
    out
}

/// A polynomial in the variables: an exponent.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Poly(Vec<(Mono, Q)>);

impl Poly {
    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }
    fn add(&self, o: &Poly) -> Poly {
        if o.is_zero() {
            return self.clone();
        }
        if self.is_zero() {
            return o.clone();
        }
        Poly(merge(&self.0, &o.0, false))
    }
    fn neg(&self) -> Poly {
        Poly(self.0.iter().map(|(m, c)| (m.clone(), c.neg())).collect())
    }
}

/// A term's key: the monomial and the exponent of its e^p.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    mono: Mono,
    exp: Poly,
}

impl Key {
    fn mul(&self, o: &Key) -> Result<Key, XErr> {
        Ok(Key {
            mono: self.mono.mul(&o.mono)?,
            exp: self.exp.add(&o.exp),
        })
    }
}

/// An element of the ring Q[x][e^p], in normal form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Ring(Vec<(Key, Q)>);

/// Above this many terms a product is refused rather than built: the
/// identity check is a shortcut, never a reason to run out of memory.
const MAX_TERMS: usize = 1 << 16;

impl Ring {
    fn constant(q: Q) -> Ring {
        if q.is_zero() {
            Ring::default()
        } else {
            Ring(vec![(Key::default(), q)])
        }
    }
    fn one() -> Ring {
        Ring::constant(Q::one())
    }
    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }
    fn is_one(&self) -> bool {
        matches!(self.0.as_slice(), [(k, c)] if k.mono.is_one() && k.exp.is_zero() && c.is_one())
    }
    /// The rational value of a constant.
    fn as_q(&self) -> Option<Q> {
        match self.0.as_slice() {
            [] => Some(Q::zero()),
            [(k, c)] if k.mono.is_one() && k.exp.is_zero() => Some(c.clone()),
            _ => None,
        }
    }
    fn add(&self, o: &Ring) -> Ring {
        if o.is_zero() {
            return self.clone();
        }
        if self.is_zero() {
            return o.clone();
        }
        Ring(merge(&self.0, &o.0, false))
    }
    fn neg(&self) -> Ring {
        Ring(self.0.iter().map(|(k, c)| (k.clone(), c.neg())).collect())
    }
    fn mul(&self, o: &Ring) -> Result<Ring, XErr> {
        if self.is_zero() || o.is_zero() {
            return Ok(Ring::default());
        }
        if o.is_one() {
            return Ok(self.clone());
        }
        if self.is_one() {
            return Ok(o.clone());
        }
        if self.0.len().saturating_mul(o.0.len()) > MAX_TERMS {
            return Err(XErr::Unsupported("a symbolic product too large".into()));
        }
        let mut v = Vec::with_capacity(self.0.len() * o.0.len());
        for (ka, ca) in &self.0 {
            for (kb, cb) in &o.0 {
                v.push((ka.mul(kb)?, ca.mul(cb)));
            }
        }
        Ok(Ring(collect(v)))
    }
    /// The sign of a ring element that has one everywhere by its form: a
    /// sum of c · e^p (no polynomial factor) with every c of one sign.
    fn definite(&self) -> Option<Ordering> {
        let first = self.0.first()?.1.is_negative();
        self.0
            .iter()
            .all(|(k, c)| k.mono.is_one() && c.is_negative() == first)
            .then_some(if first {
                Ordering::Less
            } else {
                Ordering::Greater
            })
    }
}

/// A fraction num / den of the ring, den positive everywhere by its form
/// (`Ring::definite`). A value of one term c · e^p in the denominator is
/// moved into the numerator as (1/c) e^{−p}, so a polynomial has den 1.
#[derive(Clone, Debug)]
pub struct Sym {
    num: Ring,
    den: Ring,
}

impl Sym {
    pub fn q(q: Q) -> Sym {
        Sym {
            num: Ring::constant(q),
            den: Ring::one(),
        }
    }
    pub fn zero() -> Sym {
        Sym::q(Q::zero())
    }
    /// The variable `v`.
    pub fn var(v: Var) -> Sym {
        Sym {
            num: Ring(vec![(
                Key {
                    mono: Mono(vec![(v, 1)]),
                    exp: Poly::default(),
                },
                Q::one(),
            )]),
            den: Ring::one(),
        }
    }
    /// num / den in the form above; den is sign-definite.
    fn make(num: Ring, den: Ring) -> Result<Sym, XErr> {
        if num.is_zero() {
            return Ok(Sym::zero());
        }
        let (num, den) = match den.definite() {
            Some(Ordering::Less) => (num.neg(), den.neg()),
            Some(_) => (num, den),
            None => {
                return Err(XErr::Unsupported(
                    "a symbolic denominator of no sign".into(),
                ))
            }
        };
        if let [(k, c)] = den.0.as_slice() {
            // One term c e^p: multiply through by (1/c) e^{-p}.
            let inv = Q::one()
                .div(c)
                .map_err(|_| XErr::Unsupported("a zero coefficient".into()))?;
            let r = Ring(vec![(
                Key {
                    mono: Mono::default(),
                    exp: k.exp.neg(),
                },
                inv,
            )]);
            return Ok(Sym {
                num: num.mul(&r)?,
                den: Ring::one(),
            });
        }
        if num == den {
            return Ok(Sym::q(Q::one()));
        }
        Ok(Sym { num, den })
    }
    pub fn is_zero(&self) -> bool {
        self.num.is_zero()
    }
    /// The rational value of a constant.
    pub fn as_q(&self) -> Option<Q> {
        if self.den.is_one() {
            self.num.as_q()
        } else {
            None
        }
    }
    pub fn add(&self, o: &Sym) -> Result<Sym, XErr> {
        if o.is_zero() {
            return Ok(self.clone());
        }
        if self.is_zero() {
            return Ok(o.clone());
        }
        if self.den == o.den {
            return Sym::make(self.num.add(&o.num), self.den.clone());
        }
        let n = self.num.mul(&o.den)?.add(&o.num.mul(&self.den)?);
        Sym::make(n, self.den.mul(&o.den)?)
    }
    pub fn neg(&self) -> Sym {
        Sym {
            num: self.num.neg(),
            den: self.den.clone(),
        }
    }
    pub fn sub(&self, o: &Sym) -> Result<Sym, XErr> {
        self.add(&o.neg())
    }
    pub fn mul(&self, o: &Sym) -> Result<Sym, XErr> {
        if self.is_zero() || o.is_zero() {
            return Ok(Sym::zero());
        }
        Sym::make(self.num.mul(&o.num)?, self.den.mul(&o.den)?)
    }
    /// Division by a value of one sign everywhere; anything else is refused
    /// (it may vanish at a point of the case, which the grid would find
    /// outside the domain).
    pub fn div(&self, o: &Sym) -> Result<Sym, XErr> {
        if o.num.definite().is_none() {
            return Err(XErr::Unsupported(
                "division by a symbolic value that may vanish".into(),
            ));
        }
        if self.is_zero() {
            return Ok(Sym::zero());
        }
        Sym::make(self.num.mul(&o.den)?, self.den.mul(&o.num)?)
    }
    /// e^v of a polynomial v (no exponential in it, no denominator).
    pub fn exp(&self) -> Result<Sym, XErr> {
        if !self.den.is_one() || self.num.0.iter().any(|(k, _)| !k.exp.is_zero()) {
            return Err(XErr::Unsupported("exp of a non-polynomial".into()));
        }
        let p = Poly(
            self.num
                .0
                .iter()
                .map(|(k, c)| (k.mono.clone(), c.clone()))
                .collect(),
        );
        Ok(Sym {
            num: Ring(vec![(
                Key {
                    mono: Mono::default(),
                    exp: p,
                },
                Q::one(),
            )]),
            den: Ring::one(),
        })
    }
    /// The sign where it is the same everywhere by the value's form.
    pub fn sign(&self) -> Result<Ordering, XErr> {
        if self.is_zero() {
            return Ok(Ordering::Equal);
        }
        self.num
            .definite()
            .ok_or_else(|| XErr::Unsupported("the sign of a symbolic value".into()))
    }
    /// Whether the two are the same function: `Some(true)` for an
    /// identity, `Some(false)` where they differ somewhere, `None` where a
    /// product grew beyond the cap.
    pub fn identical(&self, o: &Sym) -> Option<bool> {
        if self.den == o.den {
            return Some(self.num == o.num);
        }
        let a = self.num.mul(&o.den).ok()?;
        let b = o.num.mul(&self.den).ok()?;
        Some(a == b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(i: Var) -> Sym {
        Sym::var(i)
    }
    fn c(n: i64) -> Sym {
        Sym::q(Q::int(n))
    }

    /// softmax of two entries sums to 1, and (1 − s₀) is s₁: identities
    /// across fractions with a common and with different denominators.
    #[test]
    fn softmax_identities() {
        let (e0, e1) = (v(0).exp().unwrap(), v(1).exp().unwrap());
        let z = e0.add(&e1).unwrap();
        let s0 = e0.div(&z).unwrap();
        let s1 = e1.div(&z).unwrap();
        assert_eq!(s0.add(&s1).unwrap().as_q(), Some(Q::one()));
        assert_eq!(c(1).sub(&s0).unwrap().identical(&s1), Some(true));
        // The twin: s₀ is not s₁.
        assert_eq!(s0.identical(&s1), Some(false));
        // e^{x+y} = e^x e^y, e^x / e^x = 1.
        let exy = v(0).add(&v(1)).unwrap().exp().unwrap();
        assert_eq!(exy.identical(&e0.mul(&e1).unwrap()), Some(true));
        assert_eq!(e0.div(&e0).unwrap().as_q(), Some(Q::one()));
        // e^{x+1} is not e · e^x written with e as 1: the constants stay.
        let ex1 = v(0).add(&c(1)).unwrap().exp().unwrap();
        assert_eq!(ex1.identical(&e0), Some(false));
        assert_eq!(
            ex1.mul(&c(-1).exp().unwrap()).unwrap().identical(&e0),
            Some(true)
        );
    }

    /// The derivative of a quotient two ways: (a/b)' with the quotient rule
    /// against a'/b − a b'/b², over different denominators.
    #[test]
    fn different_denominators() {
        let e = v(0).exp().unwrap();
        let b = c(1).add(&e).unwrap(); // 1 + e^x > 0
        let a = v(1).mul(&e).unwrap();
        let q1 = a
            .div(&b)
            .unwrap()
            .sub(&a.mul(&e).unwrap().div(&b.mul(&b).unwrap()).unwrap());
        let q2 = a.div(&b.mul(&b).unwrap()).unwrap();
        // a/b − a e/b² = a (b − e)/b² = a/b².
        assert_eq!(q1.unwrap().identical(&q2), Some(true));
        assert_eq!(q2.identical(&a.div(&b).unwrap()), Some(false));
    }

    /// What may vanish is never a denominator, and only polynomials are
    /// exponentiated; signs are known only where the form fixes them.
    #[test]
    fn refusals() {
        assert!(c(1).div(&v(0)).is_err());
        assert!(c(1).div(&v(0).exp().unwrap().sub(&c(1)).unwrap()).is_err());
        assert!(c(1).div(&c(0)).is_err());
        assert!(v(0).exp().unwrap().exp().is_err());
        assert!(v(0).sign().is_err());
        assert_eq!(v(0).exp().unwrap().neg().sign(), Ok(Ordering::Less));
        assert_eq!(c(-3).sign(), Ok(Ordering::Less));
        assert_eq!(c(2).div(&c(4)).unwrap().as_q(), Some(Q::frac(1, 2)));
    }

    /// Polynomial identities: (x + y)² = x² + 2xy + y², and not x² + y².
    #[test]
    fn polynomials() {
        let s = v(0).add(&v(1)).unwrap();
        let sq = s.mul(&s).unwrap();
        let expanded = v(0)
            .mul(&v(0))
            .unwrap()
            .add(&c(2).mul(&v(0)).unwrap().mul(&v(1)).unwrap())
            .unwrap()
            .add(&v(1).mul(&v(1)).unwrap())
            .unwrap();
        assert_eq!(sq.identical(&expanded), Some(true));
        let wrong = v(0)
            .mul(&v(0))
            .unwrap()
            .add(&v(1).mul(&v(1)).unwrap())
            .unwrap();
        assert_eq!(sq.identical(&wrong), Some(false));
        assert!(sq.sub(&expanded).unwrap().is_zero());
    }
}
