//! Exact transcendental scalars (SPEC.md §19.2).
//!
//! A value `X` is a fraction `num / den` of generalised exponential
//! polynomials: finite sums of monomials `c · √r · e^q · Π atomᵏ` with
//! rational `c` and `q`, a squarefree positive integer `r`, and atoms that
//! stand for numbers the field does not contain (log, sin, cos, the tanh of
//! gelu, √(2/π)).
//!
//! Zero test. A polynomial with no atom is zero exactly when its normal form
//! (equal monomials collected) has no term: by Lindemann–Weierstrass, e^q
//! for distinct rationals q are linearly independent over the algebraic
//! numbers, and √r for distinct squarefree r are linearly independent over
//! Q (Besicovitch). Such a test is exact. A polynomial with atoms whose
//! normal form is empty is zero (the identity holds term by term); otherwise
//! its sign comes from a rigorous enclosure (`interval`), and where the
//! enclosure contains zero the answer is `Undecided`, never a guess.

use crate::interval::{self, Iv};
use crate::q::Q;
use num_integer::Integer;
use std::cmp::Ordering;
use std::fmt;

/// A number outside the field, kept as a symbol with an enclosure.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Atom {
    /// log of a positive rational other than 1 (and greater than 1).
    LogQ(Q),
    /// log of a positive polynomial of more than one term, scaled so that
    /// its first coefficient is 1.
    Log(Poly),
    Sin(Q),
    Cos(Q),
    /// tanh(√(2/π) (q + 0.044715 q³)): the tanh inside gelu's tanh form.
    GeluTanh(Q),
    SqrtTwoOverPi,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mono {
    pub exp: Q,
    pub rad: u64,
    pub atoms: Vec<(Atom, u32)>,
}

impl Mono {
    pub fn one() -> Mono {
        Mono {
            exp: Q::zero(),
            rad: 1,
            atoms: vec![],
        }
    }
    fn is_one(&self) -> bool {
        self.exp.is_zero() && self.rad == 1 && self.atoms.is_empty()
    }
    /// The product and the rational factor it releases (√r √s = g √(rs/g²)).
    fn mul(&self, o: &Mono) -> Result<(Mono, u64), XErr> {
        let g = self.rad.gcd(&o.rad);
        let rad = (self.rad / g)
            .checked_mul(o.rad / g)
            .filter(|&r| r <= MAX_RAD)
            .ok_or_else(|| XErr::Unsupported("a square root of a number too large".into()))?;
        let mut atoms = self.atoms.clone();
        for (a, k) in &o.atoms {
            match atoms.iter_mut().find(|(b, _)| b == a) {
                Some((_, j)) => *j += k,
                None => atoms.push((a.clone(), *k)),
            }
        }
        atoms.sort();
        Ok((
            Mono {
                exp: self.exp.add(&o.exp),
                rad,
                atoms,
            },
            g,
        ))
    }
}

/// Largest radicand kept (products of two fit in u64 checks).
const MAX_RAD: u64 = 1 << 40;

/// The largest |q| whose e^q, sin q or cos q an enclosure is computed for
/// (SPEC.md §19.2): beyond it the value is left undecided, in bounded time,
/// rather than summed with numbers of unbounded size.
pub const MAX_ENCLOSED_ARG: i64 = 1024;

/// A sum of monomials with nonzero rational coefficients, in normal form:
/// the terms sorted by monomial, each monomial once. A sorted vector, not a
/// map: the fields' sums and products build small polynomials by the
/// million, and a map's nodes were most of their cost.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Poly {
    pub terms: Vec<(Mono, Q)>,
}

/// Why an operation has no exact result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XErr {
    /// Outside the domain (division by zero, log or sqrt of a non-positive
    /// number): SPEC.md §5.4.
    Domain,
    /// The value would leave what this field represents (exp of an
    /// irrational number, say).
    Unsupported(String),
    /// An enclosure could not decide a sign.
    Undecided(String),
}

impl fmt::Display for XErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XErr::Domain => write!(f, "outside the domain"),
            XErr::Unsupported(s) => write!(f, "not representable exactly: {s}"),
            XErr::Undecided(s) => write!(f, "undecided by enclosures: {s}"),
        }
    }
}

impl Poly {
    pub fn zero() -> Poly {
        Poly::default()
    }
    pub fn constant(q: Q) -> Poly {
        Poly::mono(Mono::one(), q)
    }
    pub fn mono(m: Mono, c: Q) -> Poly {
        let terms = if c.is_zero() { vec![] } else { vec![(m, c)] };
        Poly { terms }
    }
    /// The normal form of a sum of terms in any order, repeats allowed.
    fn from_terms(mut ts: Vec<(Mono, Q)>) -> Poly {
        ts.sort_by(|a, b| a.0.cmp(&b.0));
        let mut terms: Vec<(Mono, Q)> = Vec::with_capacity(ts.len());
        for (m, c) in ts {
            match terms.last_mut() {
                Some((lm, lc)) if *lm == m => *lc = lc.add(&c),
                _ => terms.push((m, c)),
            }
        }
        terms.retain(|(_, c)| !c.is_zero());
        Poly { terms }
    }
    /// The monomials, in order.
    fn monos(&self) -> impl Iterator<Item = &Mono> {
        self.terms.iter().map(|(m, _)| m)
    }
    /// The coefficients, in the order of their monomials.
    fn coefs(&self) -> impl Iterator<Item = &Q> {
        self.terms.iter().map(|(_, c)| c)
    }
    pub fn is_zero(&self) -> bool {
        self.terms.is_empty()
    }
    fn is_one(&self) -> bool {
        matches!(&self.terms[..], [(m, c)] if m.is_one() && c.is_one())
    }
    pub fn has_atoms(&self) -> bool {
        self.monos().any(|m| !m.atoms.is_empty())
    }
    /// The sum: the two sorted term lists merged.
    pub fn add(&self, o: &Poly) -> Poly {
        let terms = crate::sorted::merge_total(
            &self.terms,
            &o.terms,
            |t| &t.0,
            Clone::clone,
            |(m, x), (_, y)| {
                let c = x.add(y);
                (!c.is_zero()).then(|| (m.clone(), c))
            },
        );
        Poly { terms }
    }
    pub fn neg(&self) -> Poly {
        Poly {
            terms: self
                .terms
                .iter()
                .map(|(m, c)| (m.clone(), c.neg()))
                .collect(),
        }
    }
    pub fn scale(&self, k: &Q) -> Poly {
        if k.is_zero() {
            return Poly::zero();
        }
        Poly {
            terms: self
                .terms
                .iter()
                .map(|(m, c)| (m.clone(), c.mul(k)))
                .collect(),
        }
    }
    pub fn mul(&self, o: &Poly) -> Result<Poly, XErr> {
        if self.is_one() {
            return Ok(o.clone());
        }
        if o.is_one() {
            return Ok(self.clone());
        }
        let mut ts = Vec::with_capacity(self.terms.len() * o.terms.len());
        for (m1, c1) in &self.terms {
            for (m2, c2) in &o.terms {
                let (m, g) = m1.mul(m2)?;
                let c = c1.mul(c2);
                ts.push((m, if g == 1 { c } else { c.mul(&Q::int(g as i64)) }));
            }
        }
        Ok(Poly::from_terms(ts))
    }
    /// The single term, if there is exactly one.
    fn single(&self) -> Option<(&Mono, &Q)> {
        match &self.terms[..] {
            [(m, c)] => Some((m, c)),
            _ => None,
        }
    }
    /// An enclosure of the value at `bits` of precision; `None` where an
    /// atom's argument could not be enclosed away from a pole.
    pub fn enclose(&self, bits: u32) -> Option<Iv> {
        let mut acc = Iv::point(Q::zero());
        for (m, c) in &self.terms {
            let mut v = Iv::point(c.clone());
            if m.exp.abs() > Q::int(MAX_ENCLOSED_ARG) {
                // e^q for |q| beyond the cap has thousands of bits before the
                // point; the caller says undetermined instead of working on.
                return None;
            }
            if !m.exp.is_zero() {
                v = v.mul(&interval::exp(&m.exp, bits + 8));
            }
            if m.rad != 1 {
                v = v.mul(&interval::sqrt(&Q::int(m.rad as i64), bits + 8));
            }
            for (a, k) in &m.atoms {
                v = v.mul(&a.enclose(bits + 8)?.powi(*k));
            }
            acc = acc.add(&v).round(bits + 4);
        }
        Some(acc)
    }
    /// Whether the value is zero: exact for polynomials without atoms (a
    /// nonempty normal form is nonzero), by enclosure otherwise.
    pub fn is_zero_decided(&self) -> Result<bool, XErr> {
        if self.is_zero() {
            return Ok(true);
        }
        if !self.has_atoms() {
            return Ok(false);
        }
        self.sign().map(|s| s == Ordering::Equal)
    }
    /// The sign: exact for polynomials without atoms, by enclosure otherwise.
    pub fn sign(&self) -> Result<Ordering, XErr> {
        if self.is_zero() {
            return Ok(Ordering::Equal);
        }
        if let Some((m, c)) = self.single() {
            if m.atoms.is_empty() {
                // c √r e^q has the sign of c.
                return Ok(c.cmp(&Q::zero()));
            }
        }
        for bits in [64, 256, 1024] {
            if let Some(s) = self.enclose(bits).and_then(|iv| iv.sign()) {
                if s != Ordering::Equal {
                    return Ok(s);
                }
            }
        }
        Err(XErr::Undecided(format!(
            "the sign of {self} (its enclosure contains 0{})",
            if self.has_atoms() {
                ""
            } else {
                "; it is nonzero"
            }
        )))
    }
}

impl Atom {
    fn enclose(&self, bits: u32) -> Option<Iv> {
        Some(match self {
            Atom::LogQ(q) => interval::log(q, bits),
            Atom::Log(p) => {
                let iv = p.enclose(bits + 8)?;
                if iv.lo.is_negative() || iv.lo.is_zero() {
                    return None;
                }
                Iv {
                    lo: interval::log(&iv.lo, bits).lo,
                    hi: interval::log(&iv.hi, bits).hi,
                }
            }
            Atom::Sin(q) | Atom::Cos(q) if q.abs() > Q::int(MAX_ENCLOSED_ARG) => return None,
            Atom::Sin(q) => interval::sin_cos(q, bits).0,
            Atom::Cos(q) => interval::sin_cos(q, bits).1,
            Atom::GeluTanh(q) => {
                let s = sqrt_two_over_pi(bits + 8);
                let inner = q.add(&gelu_c().mul(q).mul(q).mul(q));
                if inner.abs() > Q::int(MAX_ENCLOSED_ARG) {
                    return None;
                }
                interval::tanh(&s.mul(&Iv::point(inner)), bits)
            }
            Atom::SqrtTwoOverPi => sqrt_two_over_pi(bits),
        })
    }
}

/// 0.044715, the cubic coefficient of gelu's tanh form.
pub fn gelu_c() -> Q {
    Q::frac(44715, 1_000_000)
}

fn sqrt_two_over_pi(bits: u32) -> Iv {
    let pi = interval::pi();
    let two = Q::int(2);
    let lo = two.div(&pi.hi).expect("pi > 0");
    let hi = two.div(&pi.lo).expect("pi > 0");
    Iv {
        lo: interval::sqrt(&lo, bits).lo,
        hi: interval::sqrt(&hi, bits).hi,
    }
}

/// num / den, den nonzero.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct X {
    pub num: Poly,
    pub den: Poly,
}

/// Squarefree decomposition n = s² r, by trial division (n <= 2^40).
fn squarefree(n: u64) -> Option<(u64, u64)> {
    if n > MAX_RAD {
        return None;
    }
    let (mut s, mut r, mut m) = (1u64, 1u64, n);
    let mut p = 2u64;
    while p * p <= m {
        let mut k = 0;
        while m % p == 0 {
            m /= p;
            k += 1;
        }
        for _ in 0..k / 2 {
            s *= p;
        }
        if k % 2 == 1 {
            r *= p;
        }
        p += 1;
    }
    Some((s, r * m))
}

impl X {
    pub fn q(q: Q) -> X {
        X {
            num: Poly::constant(q),
            den: Poly::constant(Q::one()),
        }
    }
    pub fn zero() -> X {
        X::q(Q::zero())
    }
    pub fn one() -> X {
        X::q(Q::one())
    }
    fn poly(num: Poly) -> X {
        X {
            num,
            den: Poly::constant(Q::one()),
        }
    }
    fn atom(a: Atom) -> X {
        X::poly(Poly::mono(
            Mono {
                exp: Q::zero(),
                rad: 1,
                atoms: vec![(a, 1)],
            },
            Q::one(),
        ))
    }
    /// e^q for rational q.
    pub fn exp_q(q: Q) -> X {
        X::poly(Poly::mono(
            Mono {
                exp: q,
                rad: 1,
                atoms: vec![],
            },
            Q::one(),
        ))
    }
    /// The rational value, if the value is rational.
    pub fn as_q(&self) -> Option<Q> {
        if self.num.is_zero() {
            return Some(Q::zero());
        }
        let (m, c) = self.num.single()?;
        let (md, cd) = self.den.single()?;
        (m.is_one() && md.is_one()).then(|| c.div(cd).expect("den nonzero"))
    }
    /// Canonical enough: a monomial denominator is folded into the
    /// numerator, and a numerator proportional to the denominator becomes
    /// the rational ratio.
    fn norm(mut self) -> Result<X, XErr> {
        if self.num.is_zero() {
            return Ok(X::zero());
        }
        if let Some((m, c)) = self.den.single() {
            if m.atoms.is_empty() {
                // 1 / (c √r e^q) = √r / (c r) e^(-q)
                let inv = Mono {
                    exp: m.exp.neg(),
                    rad: m.rad,
                    atoms: vec![],
                };
                let k = Q::one()
                    .div(&c.mul(&Q::int(m.rad as i64)))
                    .expect("nonzero");
                let num = self.num.mul(&Poly::mono(inv, k))?;
                return Ok(X::poly(num));
            }
        }
        if self.num.terms.len() == self.den.terms.len() && self.num.monos().eq(self.den.monos()) {
            let (n0, d0) = (
                self.num.coefs().next().expect("nonempty"),
                self.den.coefs().next().expect("nonempty"),
            );
            let k = n0.div(d0).expect("nonzero");
            if self
                .num
                .coefs()
                .zip(self.den.coefs())
                .all(|(n, d)| *n == d.mul(&k))
            {
                return Ok(X::q(k));
            }
        }
        // Keep the denominator's first coefficient 1.
        let d0 = self.den.coefs().next().expect("nonempty").clone();
        if !d0.is_one() {
            let inv = Q::one().div(&d0).expect("nonzero");
            self.num = self.num.scale(&inv);
            self.den = self.den.scale(&inv);
        }
        Ok(self)
    }
    pub fn add(&self, o: &X) -> Result<X, XErr> {
        if o.num.is_zero() {
            return Ok(self.clone());
        }
        if self.num.is_zero() {
            return Ok(o.clone());
        }
        if self.den == o.den {
            return X {
                num: self.num.add(&o.num),
                den: self.den.clone(),
            }
            .norm();
        }
        X {
            num: self.num.mul(&o.den)?.add(&o.num.mul(&self.den)?),
            den: self.den.mul(&o.den)?,
        }
        .norm()
    }
    pub fn neg(&self) -> X {
        X {
            num: self.num.neg(),
            den: self.den.clone(),
        }
    }
    pub fn sub(&self, o: &X) -> Result<X, XErr> {
        self.add(&o.neg())
    }
    pub fn mul(&self, o: &X) -> Result<X, XErr> {
        if self.num.is_zero() || o.num.is_zero() {
            return Ok(X::zero());
        }
        if let Some(k) = o.as_q() {
            return Ok(X {
                num: self.num.scale(&k),
                den: self.den.clone(),
            });
        }
        if let Some(k) = self.as_q() {
            return Ok(X {
                num: o.num.scale(&k),
                den: o.den.clone(),
            });
        }
        X {
            num: self.num.mul(&o.num)?,
            den: self.den.mul(&o.den)?,
        }
        .norm()
    }
    pub fn inv(&self) -> Result<X, XErr> {
        if self.num.is_zero_decided()? {
            return Err(XErr::Domain);
        }
        X {
            num: self.den.clone(),
            den: self.num.clone(),
        }
        .norm()
    }
    pub fn div(&self, o: &X) -> Result<X, XErr> {
        if let Some(k) = o.as_q() {
            if k.is_zero() {
                return Err(XErr::Domain);
            }
            return Ok(X {
                num: self.num.scale(&Q::one().div(&k).expect("nonzero")),
                den: self.den.clone(),
            });
        }
        self.mul(&o.inv()?)
    }
    /// Exact equality where decidable (SPEC.md §19.2).
    pub fn eq_exact(&self, o: &X) -> Result<bool, XErr> {
        if self == o {
            return Ok(true);
        }
        self.sub(o)?.num.is_zero_decided()
    }
    pub fn sign(&self) -> Result<Ordering, XErr> {
        let (a, b) = (self.num.sign()?, self.den.sign()?);
        Ok(if b == Ordering::Less { a.reverse() } else { a })
    }
    /// An enclosure of the value.
    pub fn enclose(&self, bits: u32) -> Option<Iv> {
        let n = self.num.enclose(bits)?;
        let d = self.den.enclose(bits)?;
        n.div(&d).map(|v| v.round(bits))
    }
    fn needs_q(&self, what: &str) -> Result<Q, XErr> {
        self.as_q()
            .ok_or_else(|| XErr::Unsupported(format!("{what} of the irrational number {self}")))
    }
    pub fn exp(&self) -> Result<X, XErr> {
        Ok(X::exp_q(self.needs_q("exp")?))
    }
    /// √x: exact for rationals (q = s² r / d², √q = s √r / d) and for
    /// c e^q with rational c > 0.
    pub fn sqrt(&self) -> Result<X, XErr> {
        if let Some(q) = self.as_q() {
            if q.is_negative() {
                return Err(XErr::Domain);
            }
            if q.is_zero() {
                return Ok(X::zero());
            }
            let Q::Small(r) = &q else {
                return Err(XErr::Unsupported(format!("√ of the large rational {q}")));
            };
            let (n, d) = (*r.numer() as u64, *r.denom() as u64);
            let nd = n.checked_mul(d).ok_or_else(|| {
                XErr::Unsupported(format!("√ of {q}: numerator times denominator too large"))
            })?;
            let (s, rad) = squarefree(nd)
                .ok_or_else(|| XErr::Unsupported(format!("√ of {q}: too large to factor")))?;
            let c = Q::frac(s as i64, d as i64);
            return Ok(X::poly(Poly::mono(
                Mono {
                    exp: Q::zero(),
                    rad,
                    atoms: vec![],
                },
                c,
            )));
        }
        if self.den.is_one() {
            if let Some((m, c)) = self.num.single() {
                if m.rad == 1 && m.atoms.is_empty() && !c.is_negative() {
                    let root = X::q(c.clone()).sqrt()?;
                    return root.mul(&X::exp_q(m.exp.mul(&Q::frac(1, 2))));
                }
            }
        }
        Err(XErr::Unsupported(format!("√ of {self}")))
    }
    /// log x for x > 0: exact where x = c √r e^q (q + log c + ½ log r, the
    /// logs of rationals as atoms), an atom otherwise.
    pub fn log(&self) -> Result<X, XErr> {
        if self.sign()? != Ordering::Greater {
            return Err(XErr::Domain);
        }
        let log_poly = |p: &Poly| -> Result<X, XErr> {
            if let Some((m, c)) = p.single() {
                if m.atoms.is_empty() {
                    let c = c.abs();
                    let mut v = X::q(m.exp.clone()).add(&log_q(&c))?;
                    if m.rad != 1 {
                        v = v.add(&log_q(&Q::int(m.rad as i64)).mul(&X::q(Q::frac(1, 2)))?)?;
                    }
                    return Ok(v);
                }
            }
            let c0 = p.coefs().next().expect("nonzero").abs();
            let unit = p.scale(&Q::one().div(&c0).expect("nonzero"));
            log_q(&c0).add(&X::atom(Atom::Log(unit)))
        };
        // num/den > 0; log|num| - log|den|.
        log_poly(&self.num)?.sub(&log_poly(&self.den)?)
    }
    pub fn sin(&self) -> Result<X, XErr> {
        let q = self.needs_q("sin")?;
        Ok(if q.is_zero() {
            X::zero()
        } else {
            X::atom(Atom::Sin(q))
        })
    }
    pub fn cos(&self) -> Result<X, XErr> {
        let q = self.needs_q("cos")?;
        Ok(if q.is_zero() {
            X::one()
        } else {
            X::atom(Atom::Cos(q))
        })
    }
    /// tanh(√(2/π)(x + 0.044715 x³)), for rational x.
    pub fn gelu_tanh(&self) -> Result<X, XErr> {
        let q = self.needs_q("gelu")?;
        Ok(if q.is_zero() {
            X::zero()
        } else {
            X::atom(Atom::GeluTanh(q))
        })
    }
    pub fn sqrt_two_over_pi() -> X {
        X::atom(Atom::SqrtTwoOverPi)
    }
    /// Whether the value involves an atom (so that decisions about it may
    /// rest on enclosures).
    pub fn has_atoms(&self) -> bool {
        self.num.has_atoms() || self.den.has_atoms()
    }
}

/// log q for rational q > 0, as ±LogQ(q') with q' > 1.
fn log_q(q: &Q) -> X {
    if q.is_one() {
        return X::zero();
    }
    if *q < Q::one() {
        let inv = Q::one().div(q).expect("q > 0");
        return X::atom(Atom::LogQ(inv)).neg();
    }
    X::atom(Atom::LogQ(q.clone()))
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::LogQ(q) => write!(f, "log({q})"),
            Atom::Log(p) => write!(f, "log({p})"),
            Atom::Sin(q) => write!(f, "sin({q})"),
            Atom::Cos(q) => write!(f, "cos({q})"),
            Atom::GeluTanh(q) => write!(f, "tanh_gelu({q})"),
            Atom::SqrtTwoOverPi => write!(f, "√(2/π)"),
        }
    }
}

impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return write!(f, "0");
        }
        for (i, (m, c)) in self.terms.iter().enumerate() {
            let mut parts: Vec<String> = Vec::new();
            let neg = c.is_negative();
            let a = c.abs();
            if !a.is_one() || m.is_one() {
                parts.push(a.to_string());
            }
            if m.rad != 1 {
                parts.push(format!("√{}", m.rad));
            }
            if !m.exp.is_zero() {
                parts.push(format!("e^({})", m.exp));
            }
            for (at, k) in &m.atoms {
                if *k == 1 {
                    parts.push(at.to_string());
                } else {
                    parts.push(format!("{at}^{k}"));
                }
            }
            let sep = match (i, neg) {
                (0, false) => "",
                (0, true) => "-",
                (_, false) => " + ",
                (_, true) => " - ",
            };
            write!(f, "{sep}{}", parts.join("·"))?;
        }
        Ok(())
    }
}

impl fmt::Display for X {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den.is_one() {
            if self.num.terms.len() > 1 {
                write!(f, "({})", self.num)
            } else {
                write!(f, "{}", self.num)
            }
        } else {
            write!(f, "({}) / ({})", self.num, self.den)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: i64, d: i64) -> X {
        X::q(Q::frac(n, d))
    }

    #[test]
    fn exponential_polynomials_are_decided_exactly() {
        // e^1 e^(1/2) = e^(3/2); softmax of (0, 1) sums to 1.
        let e1 = q(1, 1).exp().unwrap();
        let eh = q(1, 2).exp().unwrap();
        assert!(e1
            .mul(&eh)
            .unwrap()
            .eq_exact(&q(3, 2).exp().unwrap())
            .unwrap());
        let den = X::one().add(&e1).unwrap();
        let s0 = X::one().div(&den).unwrap();
        let s1 = e1.div(&den).unwrap();
        assert_eq!(s0.add(&s1).unwrap().as_q(), Some(Q::one()));
        // The twin: e^1 + e^(1/2) is not e^(3/2) (distinct exponents).
        assert!(!e1
            .add(&eh)
            .unwrap()
            .eq_exact(&q(3, 2).exp().unwrap())
            .unwrap());
        // Its sign is proved positive without an enclosure question.
        assert_eq!(e1.sub(&eh).unwrap().sign().unwrap(), Ordering::Greater);
    }

    #[test]
    fn huge_exponents_are_left_undecided_quickly() {
        // e^1000 - e^999 > 0 is read from an enclosure (|q| <= 1024) ...
        let d = q(1000, 1)
            .exp()
            .unwrap()
            .sub(&q(999, 1).exp().unwrap())
            .unwrap();
        assert_eq!(d.sign().unwrap(), Ordering::Greater);
        // ... its twin beyond the cap is undecided, without computing e^2000.
        let big = q(2000, 1)
            .exp()
            .unwrap()
            .sub(&q(1999, 1).exp().unwrap())
            .unwrap();
        assert!(matches!(big.sign(), Err(XErr::Undecided(_))));
    }

    #[test]
    fn square_roots_are_exact() {
        // √8 = 2√2, √(1/2) = √2/2, (√6)² = 6, √2 √3 = √6.
        let r8 = q(8, 1).sqrt().unwrap();
        let r2 = q(2, 1).sqrt().unwrap();
        assert!(r8.eq_exact(&r2.mul(&q(2, 1)).unwrap()).unwrap());
        assert!(q(1, 2)
            .sqrt()
            .unwrap()
            .eq_exact(&r2.div(&q(2, 1)).unwrap())
            .unwrap());
        let r6 = q(6, 1).sqrt().unwrap();
        assert_eq!(r6.mul(&r6).unwrap().as_q(), Some(Q::int(6)));
        let r3 = q(3, 1).sqrt().unwrap();
        assert!(r2.mul(&r3).unwrap().eq_exact(&r6).unwrap());
        // 1/√2 is √2/2; √2 + √3 is not √5.
        assert!(r2
            .inv()
            .unwrap()
            .eq_exact(&r2.div(&q(2, 1)).unwrap())
            .unwrap());
        assert!(!r2
            .add(&r3)
            .unwrap()
            .eq_exact(&q(5, 1).sqrt().unwrap())
            .unwrap());
        assert_eq!(q(-1, 1).sqrt(), Err(XErr::Domain));
    }

    #[test]
    fn logs_are_atoms_decided_by_enclosures() {
        // log(e^2) = 2 exactly; log 2 + log 3 vs log 6: equal, but only an
        // identity between atoms, which enclosures cannot prove: undecided.
        assert_eq!(
            q(2, 1).exp().unwrap().log().unwrap().as_q(),
            Some(Q::int(2))
        );
        let l = |n| q(n, 1).log().unwrap();
        let lhs = l(2).add(&l(3)).unwrap();
        assert!(matches!(lhs.eq_exact(&l(6)), Err(XErr::Undecided(_))));
        // log 2 + log 3 is not log 5: the enclosures are disjoint.
        assert!(!lhs.eq_exact(&l(5)).unwrap());
        // The same atom on both sides is equal structurally.
        assert!(l(5).eq_exact(&l(5)).unwrap());
        // log(1/2) = -log 2.
        assert!(q(1, 2).log().unwrap().eq_exact(&l(2).neg()).unwrap());
    }
}
