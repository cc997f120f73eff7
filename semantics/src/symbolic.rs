//! Symbolic values for deciding a case by identity (SPEC.md §19.8): every
//! free scalar of a case is a variable, and the ops are run on fractions of
//! exponential polynomials in those variables. A comparison that holds as
//! an identity of such fractions holds at every point of the case where
//! the computation is defined; one that does not is left undecided here
//! (the grid, or nothing, decides it).
//!
//! The ring: finite sums of terms c · m(x) · e^{p(x)} · Π (log r)^k · Π √s
//! with rational c, a monomial m, a polynomial exponent p (its constant
//! term included), log atoms (r a positive sum of exponentials) and root
//! atoms (s a polynomial, each at most once: √s · √s = s); equal keys
//! collected, zero coefficients dropped. Every operation computes a
//! representation of the function its arguments denote, so equal normal
//! forms are equal functions; without atoms the converse holds too (the
//! argument is in SPEC.md §19.8). A value is num / den, den not the zero
//! function, and a/b = c/d wherever b and d do not vanish exactly when
//! ad − cb is the zero function. exp takes polynomials, log positive sums
//! of exponentials, √ polynomials (gelu's √(2/π) is a symbol of its own,
//! `sqrt_two_over_pi`); sin, cos, a sign the form does not fix and a
//! division by the zero function are refused
//! (`XErr::Unsupported`): what this domain cannot keep exact is never
//! approximated. `watch_partial` says whether a computation divided by
//! what may vanish or took a root of what may be negative.

use crate::expoly::XErr;
use crate::sorted;
use crate::Q;
use std::cmp::Ordering;

/// A variable: a free scalar of the case, numbered in order.
pub type Var = u32;

thread_local! {
    /// Whether an operation since `watch_partial` began may be undefined
    /// at some point: a division by what may vanish, a root of what may
    /// be negative.
    static PARTIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` on this thread, and say whether any operation it made on
/// symbolic values may be undefined somewhere (SPEC.md §19.8): `false`
/// means every value it computed is defined at every point.
pub fn watch_partial<T>(f: impl FnOnce() -> T) -> (T, bool) {
    let before = PARTIAL.with(|p| p.replace(false));
    let out = f();
    let partial = PARTIAL.with(|p| p.replace(before));
    (out, partial)
}

fn partial() {
    PARTIAL.with(|p| p.set(true));
}

/// A monomial: (variable, power ≥ 1), sorted by variable.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mono(Vec<(Var, u32)>);

impl Mono {
    fn is_one(&self) -> bool {
        self.0.is_empty()
    }
    fn mul(&self, o: &Mono) -> Result<Mono, XErr> {
        Ok(Mono(merge_powers(&self.0, &o.0)?))
    }
}

fn too_big() -> XErr {
    XErr::Unsupported("a symbolic power beyond u32".into())
}

/// Terms sorted by key with nonzero coefficients: the normal form both
/// levels share (a polynomial in the exponent, a ring element outside).
fn merge<K: Ord + Clone>(a: &[(K, Q)], b: &[(K, Q)], negate_b: bool) -> Vec<(K, Q)> {
    let nb = |c: &Q| if negate_b { c.neg() } else { c.clone() };
    sorted::merge_total(
        a,
        b,
        |t| &t.0,
        |(k, c)| (k.clone(), nb(c)),
        |(k, x), (_, y)| {
            let c = if negate_b { x.sub(y) } else { x.add(y) };
            (!c.is_zero()).then(|| (k.clone(), c))
        },
    )
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

/// A term's key: the monomial, the exponent of its e^p, its log atoms
/// with their powers (an atom log r, r a positive sum of exponentials,
/// kept by r's normal form) and its root atoms (√r, r a polynomial, each
/// at most once: √r · √r is r), both sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    mono: Mono,
    exp: Poly,
    logs: Vec<(Ring, u32)>,
    roots: Vec<Ring>,
}

impl Key {
    /// The product, and the radicands whose roots met (each such pair
    /// multiplies the term by its radicand).
    fn mul(&self, o: &Key) -> Result<(Key, Vec<Ring>), XErr> {
        let mut met = Vec::new();
        // A root met twice leaves the key: its square is its radicand.
        let roots = sorted::merge_total(
            &self.roots,
            &o.roots,
            |r| r,
            Clone::clone,
            |r, _| {
                met.push(r.clone());
                None
            },
        );
        Ok((
            Key {
                mono: self.mono.mul(&o.mono)?,
                exp: self.exp.add(&o.exp),
                logs: merge_powers(&self.logs, &o.logs)?,
                roots,
            },
            met,
        ))
    }
    /// Whether the key has no atom.
    fn plain(&self) -> bool {
        self.logs.is_empty() && self.roots.is_empty()
    }
    /// Whether the key is 1: no monomial, no exponential, no atom.
    fn is_one(&self) -> bool {
        self.mono.is_one() && self.exp.is_zero() && self.plain()
    }
}

/// The product of two sorted lists of (factor, power): a monomial's
/// variables, a term's log atoms.
fn merge_powers<K: Ord + Clone>(a: &[(K, u32)], b: &[(K, u32)]) -> Result<Vec<(K, u32)>, XErr> {
    sorted::merge(
        a,
        b,
        |t| &t.0,
        Clone::clone,
        |(k, x), (_, y)| Ok(Some((k.clone(), x.checked_add(*y).ok_or_else(too_big)?))),
    )
}

/// An element of the ring Q[x][e^p][log r], in normal form.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }
    /// The rational value of a constant.
    fn as_q(&self) -> Option<Q> {
        match self.0.as_slice() {
            [] => Some(Q::zero()),
            [(k, c)] if k.is_one() => Some(c.clone()),
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
        if self.0.len().saturating_mul(o.0.len()) > MAX_TERMS {
            return Err(XErr::Unsupported("a symbolic product too large".into()));
        }
        let mut v = Vec::with_capacity(self.0.len() * o.0.len());
        for (ka, ca) in &self.0 {
            for (kb, cb) in &o.0 {
                let (k, met) = ka.mul(kb)?;
                let c = ca.mul(cb);
                if met.is_empty() {
                    v.push((k, c));
                    continue;
                }
                // √r √r = r: the term times each radicand (polynomials, so
                // no root meets another here).
                let mut t = Ring(vec![(k, c)]);
                for r in &met {
                    t = t.mul(r)?;
                }
                if v.len().saturating_add(t.0.len()) > MAX_TERMS {
                    return Err(XErr::Unsupported("a symbolic product too large".into()));
                }
                v.extend(t.0);
            }
        }
        Ok(Ring(collect(v)))
    }
    /// The sign of a ring element that has one everywhere by its form: a
    /// sum of c · e^p (no polynomial factor, no atom) with every c of one
    /// sign.
    fn definite(&self) -> Option<Ordering> {
        let first = self.0.first()?.1.is_negative();
        self.0
            .iter()
            .all(|(k, c)| k.mono.is_one() && k.plain() && c.is_negative() == first)
            .then_some(if first {
                Ordering::Less
            } else {
                Ordering::Greater
            })
    }
}

/// A fraction num / den of the ring, den not the zero function (positive
/// where it is a sum of exponentials with positive coefficients). A
/// denominator of one term c · e^p is moved into the numerator as
/// (1/c) e^{−p}, so a polynomial has den 1, which is kept as the empty ring
/// (a denominator is never zero, so that cannot be read otherwise) and
/// costs no allocation.
#[derive(Clone, Debug)]
pub struct Sym {
    num: Ring,
    den: Ring,
}

/// `r · d` for a denominator `d` (empty: 1).
fn times_den(r: &Ring, d: &Ring) -> Result<Ring, XErr> {
    if d.is_zero() {
        Ok(r.clone())
    } else {
        r.mul(d)
    }
}

/// The product of two denominators (empty: 1).
fn den_times(a: &Ring, b: &Ring) -> Result<Ring, XErr> {
    if a.is_zero() {
        Ok(b.clone())
    } else {
        times_den(a, b)
    }
}

impl Sym {
    pub fn q(q: Q) -> Sym {
        Sym {
            num: Ring::constant(q),
            den: Ring::default(),
        }
    }
    pub fn zero() -> Sym {
        Sym::q(Q::zero())
    }
    /// √(2/π), gelu's constant, kept as a symbol of its own (the last
    /// variable, never a case's): an identity that holds for every value
    /// of the symbol holds for √(2/π).
    pub fn sqrt_two_over_pi() -> Sym {
        Sym::var(Var::MAX)
    }
    /// The variable `v`.
    pub fn var(v: Var) -> Sym {
        Sym::of(Key {
            mono: Mono(vec![(v, 1)]),
            ..Key::default()
        })
    }
    /// The term of key `k` with coefficient 1.
    fn of(k: Key) -> Sym {
        Sym {
            num: Ring(vec![(k, Q::one())]),
            den: Ring::default(),
        }
    }
    /// num / den in the form above; den (not empty) is sign-definite.
    fn make(num: Ring, den: Ring) -> Result<Sym, XErr> {
        if num.is_zero() {
            return Ok(Sym::zero());
        }
        if den.is_zero() {
            return Ok(Sym {
                num,
                den: Ring::default(),
            });
        }
        let (num, den) = match den.definite() {
            Some(Ordering::Less) => (num.neg(), den.neg()),
            _ => (num, den),
        };
        if let [(k, c)] = den.0.as_slice() {
            if k.mono.is_one() && k.plain() {
                // One term c e^p: multiply through by (1/c) e^{-p}.
                let inv = Q::one()
                    .div(c)
                    .map_err(|_| XErr::Unsupported("a zero coefficient".into()))?;
                let r = Ring(vec![(
                    Key {
                        exp: k.exp.neg(),
                        ..Key::default()
                    },
                    inv,
                )]);
                return Ok(Sym {
                    num: num.mul(&r)?,
                    den: Ring::default(),
                });
            }
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
        if self.den.is_zero() {
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
        let n = times_den(&self.num, &o.den)?.add(&times_den(&o.num, &self.den)?);
        Sym::make(n, den_times(&self.den, &o.den)?)
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
        Sym::make(self.num.mul(&o.num)?, den_times(&self.den, &o.den)?)
    }
    /// Division by any value other than the zero function. Where the
    /// divisor vanishes at a point, the computation is undefined there and
    /// the grid finds that point outside the domain (SPEC.md §19.8).
    pub fn div(&self, o: &Sym) -> Result<Sym, XErr> {
        if o.is_zero() {
            return Err(XErr::Unsupported("division by the zero function".into()));
        }
        if o.num.definite().is_none() {
            partial();
        }
        if self.is_zero() {
            return Ok(Sym::zero());
        }
        Sym::make(times_den(&self.num, &o.den)?, times_den(&o.num, &self.den)?)
    }
    /// Whether the value is a polynomial: den 1, no exponential, no atom.
    fn polynomial(&self) -> Option<Poly> {
        if !self.den.is_zero()
            || self
                .num
                .0
                .iter()
                .any(|(k, _)| !k.exp.is_zero() || !k.plain())
        {
            return None;
        }
        Some(Poly(
            self.num
                .0
                .iter()
                .map(|(k, c)| (k.mono.clone(), c.clone()))
                .collect(),
        ))
    }
    /// e^v of a polynomial v (no exponential or atom in it, no
    /// denominator).
    pub fn exp(&self) -> Result<Sym, XErr> {
        let p = self
            .polynomial()
            .ok_or_else(|| XErr::Unsupported("exp of a non-polynomial".into()))?;
        Ok(Sym::of(Key {
            exp: p,
            ..Key::default()
        }))
    }
    /// log v of a positive sum of exponentials v (den 1): e^p gives p, any
    /// other sum the atom log v, kept by v's normal form.
    pub fn log(&self) -> Result<Sym, XErr> {
        if !self.den.is_zero() || self.num.definite() != Some(Ordering::Greater) {
            return Err(XErr::Unsupported(
                "log of a symbolic value not positive by its form".into(),
            ));
        }
        if let [(k, c)] = self.num.0.as_slice() {
            if c.is_one() {
                return Ok(Sym {
                    num: Ring(collect(
                        k.exp
                            .0
                            .iter()
                            .map(|(m, c)| {
                                (
                                    Key {
                                        mono: m.clone(),
                                        ..Key::default()
                                    },
                                    c.clone(),
                                )
                            })
                            .collect(),
                    )),
                    den: Ring::default(),
                });
            }
        }
        Ok(Sym::of(Key {
            logs: vec![(self.num.clone(), 1)],
            ..Key::default()
        }))
    }
    /// √v of a polynomial v: 0 and 1 themselves, any other the atom √v,
    /// kept by v's normal form. Where v is negative at a point the
    /// computation is undefined there, as the grid finds it.
    pub fn sqrt(&self) -> Result<Sym, XErr> {
        if self.polynomial().is_none() {
            return Err(XErr::Unsupported(
                "a square root of a non-polynomial".into(),
            ));
        }
        if self.is_zero() || self.as_q().is_some_and(|q| q.is_one()) {
            return Ok(self.clone());
        }
        match self.as_q() {
            Some(q) if q.is_negative() => {
                return Err(XErr::Unsupported(
                    "a square root of a negative constant".into(),
                ))
            }
            Some(_) => {}
            // A radicand with a variable may be negative somewhere.
            None => partial(),
        }
        Ok(Sym::of(Key {
            roots: vec![self.num.clone()],
            ..Key::default()
        }))
    }
    /// The sign where it is the same everywhere by the value's form.
    pub fn sign(&self) -> Result<Ordering, XErr> {
        if self.is_zero() {
            return Ok(Ordering::Equal);
        }
        let unknown = || XErr::Unsupported("the sign of a symbolic value".into());
        let n = self.num.definite().ok_or_else(unknown)?;
        if self.den.is_zero() {
            return Ok(n);
        }
        let d = self.den.definite().ok_or_else(unknown)?;
        Ok(if n == d {
            Ordering::Greater
        } else {
            Ordering::Less
        })
    }
    /// Whether the two are the same function: `Some(true)` for an
    /// identity, `Some(false)` where their normal forms differ, `None`
    /// where a product grew beyond the cap.
    pub fn identical(&self, o: &Sym) -> Option<bool> {
        if self.den == o.den {
            return Some(self.num == o.num);
        }
        let a = times_den(&self.num, &o.den).ok()?;
        let b = times_den(&o.num, &self.den).ok()?;
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

    /// The zero function is never a divisor, and only polynomials are
    /// exponentiated; signs are known only where the form fixes them.
    #[test]
    fn refusals() {
        assert!(c(1).div(&c(0)).is_err());
        assert!(c(1).div(&v(0).sub(&v(0)).unwrap()).is_err());
        assert!(v(0).exp().unwrap().exp().is_err());
        assert!(v(0).sign().is_err());
        assert_eq!(v(0).exp().unwrap().neg().sign(), Ok(Ordering::Less));
        assert_eq!(c(-3).sign(), Ok(Ordering::Less));
        assert_eq!(c(2).div(&c(4)).unwrap().as_q(), Some(Q::frac(1, 2)));
    }

    /// log of a positive sum of exponentials is an atom kept by its
    /// argument: the same argument gives the same atom, log e^p is p, and
    /// log of what may be negative or zero is refused.
    #[test]
    fn log_atoms() {
        let (e0, e1) = (v(0).exp().unwrap(), v(1).exp().unwrap());
        let z = e0.add(&e1).unwrap();
        let l1 = z.log().unwrap();
        let l2 = e1.add(&e0).unwrap().log().unwrap();
        assert_eq!(l1.identical(&l2), Some(true));
        assert_eq!(l1.sub(&l2).unwrap().as_q(), Some(Q::zero()));
        assert_eq!(e0.log().unwrap().identical(&v(0)), Some(true));
        // The twin: log(e^x + e^y) is not x, nor log(e^x + 2 e^y).
        assert_eq!(l1.identical(&v(0)), Some(false));
        let z2 = e0.add(&c(2).mul(&e1).unwrap()).unwrap();
        assert_eq!(l1.identical(&z2.log().unwrap()), Some(false));
        assert!(v(0).log().is_err());
        assert!(e0.neg().log().is_err());
        assert!(l1.exp().is_err());
        assert!(l1.sign().is_err());
    }

    /// Only a division by what may vanish, or a root of what may be
    /// negative, makes a computation partial.
    #[test]
    fn partial_operations_are_watched() {
        let e = v(0).exp().unwrap();
        let z = e.add(&c(1)).unwrap();
        let ((), p) = watch_partial(|| {
            let _ = e.div(&z).unwrap();
            let _ = c(2).sqrt().unwrap();
        });
        assert!(!p);
        let ((), p) = watch_partial(|| {
            let _ = e.div(&v(1)).unwrap();
        });
        assert!(p);
        let ((), p) = watch_partial(|| {
            let _ = v(0).sqrt().unwrap();
        });
        assert!(p);
        assert!(c(-2).sqrt().is_err());
    }

    /// Roots of polynomials: √r √r is r, so 1/√r · 1/√r is 1/r and
    /// x/√r squared is x²/r; a root of what is not a polynomial is refused,
    /// and √(x²) is not x (it is |x|).
    #[test]
    fn root_atoms() {
        let r = v(0).mul(&v(0)).unwrap().add(&c(1)).unwrap(); // x² + 1
        let s = r.sqrt().unwrap();
        assert_eq!(s.mul(&s).unwrap().identical(&r), Some(true));
        let inv = c(1).div(&s).unwrap();
        assert_eq!(
            inv.mul(&inv).unwrap().identical(&c(1).div(&r).unwrap()),
            Some(true)
        );
        let y = v(1).div(&s).unwrap();
        let y2 = v(1).mul(&v(1)).unwrap().div(&r).unwrap();
        assert_eq!(y.mul(&y).unwrap().identical(&y2), Some(true));
        // The twins.
        assert_eq!(s.identical(&r), Some(false));
        let sq = v(0).mul(&v(0)).unwrap().sqrt().unwrap();
        assert_eq!(sq.identical(&v(0)), Some(false));
        assert!(v(0).exp().unwrap().sqrt().is_err());
        assert!(s.sign().is_err());
        assert_eq!(c(4).sqrt().unwrap().identical(&c(2)), Some(false));
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
