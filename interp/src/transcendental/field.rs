//! The scalars the transcendental evaluator runs on (SPEC.md §19.2,
//! §19.4, §19.8): the exact field `X`, dual numbers over a field (the
//! oracle's forward-mode derivative) and the symbolic domain `Sym` of the
//! identity cases, behind one trait, `Field`, with the shortcuts each
//! answers exactly (zeros, products by one, a memo of elementwise
//! functions of rationals).

use super::{apply_fun_plain, R};
use crate::expr::Fun;
use spmd_semantics::expoly::{gelu_c, XErr, X};
use spmd_semantics::symbolic::Sym;
use spmd_semantics::Q;
use std::cmp::Ordering;

/// A scalar the evaluator can run on: the field itself, or dual numbers
/// over it.
pub trait Field: Clone + std::fmt::Debug {
    fn q(q: &Q) -> Self;
    fn add(&self, o: &Self) -> R<Self>;
    fn sub(&self, o: &Self) -> R<Self>;
    fn mul(&self, o: &Self) -> R<Self>;
    fn div(&self, o: &Self) -> R<Self>;
    fn neg(&self) -> Self;
    fn exp(&self) -> R<Self>;
    fn log(&self) -> R<Self>;
    fn sqrt(&self) -> R<Self>;
    fn sin(&self) -> R<Self>;
    fn cos(&self) -> R<Self>;
    /// tanh(√(2/π)(x + 0.044715 x³)).
    fn gelu_t(&self) -> R<Self>;
    /// The sign of the value (the primal part of a dual number).
    fn sign(&self) -> R<Ordering>;
    /// The rational value, where the value is rational.
    fn value_q(&self) -> Option<Q>;
    /// The value with a zero derivative (piecewise constants).
    fn constant(&self) -> Self;
    fn zero() -> Self {
        Self::q(&Q::zero())
    }
    /// `1 · self`, as `mul` computes it (a field may answer without
    /// building the 1).
    fn one_times(&self) -> R<Self> {
        Self::q(&Q::one()).mul(self)
    }
    /// Whether the value is the field's zero in its normal form, so that a
    /// product with it is zero and a sum with it is the other term,
    /// exactly and without an error. `false` where that is not known.
    fn is_zero(&self) -> bool {
        false
    }
    /// Whether `zero()` answers `is_zero`, without building it.
    fn zero_is_zero() -> bool {
        false
    }
    /// `apply_fun`: a field may answer it from a memo.
    fn fun(&self, f: Fun) -> R<Self> {
        apply_fun_plain(f, self)
    }
    /// √(2/π), the constant inside gelu's tanh form.
    fn sqrt_two_over_pi() -> R<Self>;
    /// Whether two values are equal: `Ok(false)` only where they are shown
    /// to differ. The symbolic domain answers "not an identity" with
    /// `Undecided`, since two functions that differ somewhere may agree at
    /// every point of a grid.
    fn same(&self, o: &Self) -> R<bool>;
}

/// The most entries `FUN_MEMO` keeps; it is emptied when full.
const FUN_MEMO_CAP: usize = 1 << 14;

thread_local! {
    /// Elementwise functions of rational arguments already computed on this
    /// thread, by function and argument. `apply_fun_plain` is a pure
    /// function of those, so a hit is exactly what it would compute; a
    /// check evaluates the same few values on every instance of its grid
    /// (SPEC.md §21.2).
    static FUN_MEMO: std::cell::RefCell<std::collections::HashMap<(Fun, Q), R<X>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

impl Field for X {
    fn q(q: &Q) -> X {
        X::q(q.clone())
    }
    fn is_zero(&self) -> bool {
        self.num.is_zero()
    }
    fn zero_is_zero() -> bool {
        true
    }
    /// `X::mul(1, self)` branch by branch: zero, a rational k as `X::q(k)`
    /// (1 scaled by k over 1), anything else scaled by 1, which is itself.
    fn one_times(&self) -> R<X> {
        if self.num.is_zero() {
            return Ok(X::zero());
        }
        Ok(match self.as_q() {
            Some(k) => X::q(k),
            None => self.clone(),
        })
    }
    fn add(&self, o: &X) -> R<X> {
        X::add(self, o)
    }
    fn sub(&self, o: &X) -> R<X> {
        X::sub(self, o)
    }
    fn mul(&self, o: &X) -> R<X> {
        X::mul(self, o)
    }
    fn div(&self, o: &X) -> R<X> {
        X::div(self, o)
    }
    fn neg(&self) -> X {
        X::neg(self)
    }
    fn exp(&self) -> R<X> {
        X::exp(self)
    }
    fn log(&self) -> R<X> {
        X::log(self)
    }
    fn sqrt(&self) -> R<X> {
        X::sqrt(self)
    }
    fn sin(&self) -> R<X> {
        X::sin(self)
    }
    fn cos(&self) -> R<X> {
        X::cos(self)
    }
    fn gelu_t(&self) -> R<X> {
        X::gelu_tanh(self)
    }
    fn sign(&self) -> R<Ordering> {
        X::sign(self)
    }
    fn value_q(&self) -> Option<Q> {
        self.as_q()
    }
    fn constant(&self) -> X {
        self.clone()
    }
    fn sqrt_two_over_pi() -> R<X> {
        Ok(X::sqrt_two_over_pi())
    }
    fn same(&self, o: &X) -> R<bool> {
        self.eq_exact(o)
    }
    fn fun(&self, f: Fun) -> R<X> {
        // Only rational arguments are memoised: the transcendental
        // functions take no other (§19.2), and their key hashes cheaply.
        let Some(q) = self.as_q() else {
            return apply_fun_plain(f, self);
        };
        let key = (f, q);
        if let Some(v) = FUN_MEMO.with(|m| m.borrow().get(&key).cloned()) {
            return v;
        }
        let v = apply_fun_plain(f, self);
        FUN_MEMO.with(|m| {
            let mut m = m.borrow_mut();
            if m.len() >= FUN_MEMO_CAP {
                m.clear();
            }
            m.insert(key, v.clone());
        });
        v
    }
}

/// The derivative rules of forward mode, shared by `DualOf` and `DualsOf`
/// so that both form each derivative by the same operations in the same
/// order (each component of a `DualsOf` is then exactly the `DualOf` of
/// its tangent alone).
///
/// How a unary operation's derivative follows from its argument's, d:
/// the operand order of each formula is kept.
enum Chain<S> {
    /// f · d (sin: cos x; cos: −sin x; gelu's tanh: its slope).
    Times(S),
    /// d / g (√: 2√x).
    Over(S),
    /// value · d (exp).
    TimesValue,
    /// d / x (log).
    OverArg,
}

impl<S: Field> Chain<S> {
    fn apply(&self, value: &S, arg: &S, d: &S) -> R<S> {
        match self {
            Chain::Times(f) => f.mul(d),
            Chain::Over(g) => d.div(g),
            Chain::TimesValue => value.mul(d),
            Chain::OverArg => d.div(arg),
        }
    }
}

/// The unary operations of the field that have a derivative.
#[derive(Clone, Copy)]
enum Unary {
    Exp,
    Log,
    Sqrt,
    Sin,
    Cos,
    GeluT,
}

/// The value of `u` at x, and its chain rule.
fn chain<S: Field>(u: Unary, x: &S) -> R<(S, Chain<S>)> {
    Ok(match u {
        Unary::Exp => (x.exp()?, Chain::TimesValue),
        Unary::Log => (x.log()?, Chain::OverArg),
        Unary::Sqrt => {
            let v = x.sqrt()?;
            if v.value_q().is_some_and(|q| q.is_zero()) {
                // √ has no derivative at 0: outside the domain of B3.
                return Err(XErr::Domain);
            }
            let two_v = v.mul(&S::q(&Q::int(2)))?;
            (v, Chain::Over(two_v))
        }
        Unary::Sin => {
            let v = x.sin()?;
            (v, Chain::Times(x.cos()?))
        }
        Unary::Cos => {
            let v = x.cos()?;
            (v, Chain::Times(x.sin()?.neg()))
        }
        Unary::GeluT => {
            let t = x.gelu_t()?;
            // d/dx tanh(s(x + c x³)) = (1 - T²) s (1 + 3 c x²)
            let one = S::q(&Q::one());
            let inner = one.add(&S::q(&gelu_c().mul(&Q::int(3))).mul(x)?.mul(x)?)?;
            let f = one
                .sub(&t.mul(&t)?)?
                .mul(&S::sqrt_two_over_pi()?)?
                .mul(&inner)?;
            (t, Chain::Times(f))
        }
    })
}

/// (a b)' = a' b + a b'; a zero derivative's product is zero and adds
/// nothing (`Field::is_zero`): the same value and form.
fn mul_d<S: Field>(a: &S, b: &S, da: &S, db: &S) -> R<S> {
    if da.is_zero() {
        a.mul(db)
    } else if db.is_zero() {
        da.mul(b)
    } else {
        da.mul(b)?.add(&a.mul(db)?)
    }
}

/// (a/b)' = (a' - (a/b) b') / b, with q = a/b.
fn div_d<S: Field>(q: &S, b: &S, da: &S, db: &S) -> R<S> {
    da.sub(&q.mul(db)?)?.div(b)
}

/// A dual number v + d ε over the field: forward-mode differentiation.
#[derive(Clone, Debug)]
pub struct DualOf<S> {
    pub v: S,
    pub d: S,
}

/// Dual numbers over the exact field: the oracle's derivative at a point.
pub type Dual = DualOf<X>;

impl<S: Field> DualOf<S> {
    fn unary(&self, u: Unary) -> R<Self> {
        let (v, c) = chain(u, &self.v)?;
        let d = c.apply(&v, &self.v, &self.d)?;
        Ok(DualOf { v, d })
    }
}

impl<S: Field> Field for DualOf<S> {
    fn q(q: &Q) -> Self {
        DualOf {
            v: S::q(q),
            d: S::zero(),
        }
    }
    /// Zero value and zero derivative: a product with it is both parts'
    /// zero, and a sum with it is the other dual, part by part.
    fn is_zero(&self) -> bool {
        self.v.is_zero() && self.d.is_zero()
    }
    fn zero_is_zero() -> bool {
        S::zero_is_zero()
    }
    /// `mul(q(1), self)`: 1 times the value, and (1's derivative being
    /// zero) 1 times the derivative.
    fn one_times(&self) -> R<Self> {
        if !S::zero_is_zero() {
            return Self::q(&Q::one()).mul(self);
        }
        Ok(DualOf {
            v: self.v.one_times()?,
            d: self.d.one_times()?,
        })
    }
    fn add(&self, o: &Self) -> R<Self> {
        Ok(DualOf {
            v: self.v.add(&o.v)?,
            d: self.d.add(&o.d)?,
        })
    }
    fn sub(&self, o: &Self) -> R<Self> {
        Ok(DualOf {
            v: self.v.sub(&o.v)?,
            d: self.d.sub(&o.d)?,
        })
    }
    fn mul(&self, o: &Self) -> R<Self> {
        let v = self.v.mul(&o.v)?;
        let d = mul_d(&self.v, &o.v, &self.d, &o.d)?;
        Ok(DualOf { v, d })
    }
    fn div(&self, o: &Self) -> R<Self> {
        let v = self.v.div(&o.v)?;
        let d = div_d(&v, &o.v, &self.d, &o.d)?;
        Ok(DualOf { v, d })
    }
    fn neg(&self) -> Self {
        DualOf {
            v: self.v.neg(),
            d: self.d.neg(),
        }
    }
    fn exp(&self) -> R<Self> {
        self.unary(Unary::Exp)
    }
    fn log(&self) -> R<Self> {
        self.unary(Unary::Log)
    }
    fn sqrt(&self) -> R<Self> {
        self.unary(Unary::Sqrt)
    }
    fn sin(&self) -> R<Self> {
        self.unary(Unary::Sin)
    }
    fn cos(&self) -> R<Self> {
        self.unary(Unary::Cos)
    }
    fn gelu_t(&self) -> R<Self> {
        self.unary(Unary::GeluT)
    }
    fn sign(&self) -> R<Ordering> {
        self.v.sign()
    }
    fn value_q(&self) -> Option<Q> {
        self.v.value_q()
    }
    fn constant(&self) -> Self {
        DualOf {
            v: self.v.clone(),
            d: S::zero(),
        }
    }
    fn sqrt_two_over_pi() -> R<Self> {
        Ok(DualOf {
            v: S::sqrt_two_over_pi()?,
            d: S::zero(),
        })
    }
    fn same(&self, o: &Self) -> R<bool> {
        Ok(self.v.same(&o.v)? && self.d.same(&o.d)?)
    }
}

/// v + Σₖ dₖ εₖ: forward mode along several tangents at once, the value
/// computed once for all of them (the oracle's B3 columns of one input).
/// Each derivative is formed by the rules `DualOf` uses (`chain`, `mul_d`,
/// `div_d`), so component k is exactly what `DualOf` computes with
/// tangent k. An empty `d` stands for every tangent zero (a constant, or a
/// value that does not read the moved input): an operation on such values
/// forms its derivative once on explicit zeros, so that any error it would
/// raise is raised, and refuses (`Unsupported`) if that derivative is not
/// zero, which a caller answers by running the tangents one at a time.
#[derive(Clone, Debug)]
pub struct DualsOf<S> {
    pub v: S,
    pub d: Vec<S>,
}

impl<S: Field> DualsOf<S> {
    /// Component k of the derivative (zero where `d` is empty).
    pub fn d_at(&self, k: usize) -> S {
        self.d.get(k).cloned().unwrap_or_else(S::zero)
    }
    fn none(v: S) -> Self {
        DualsOf { v, d: Vec::new() }
    }
    fn unary(&self, u: Unary) -> R<Self> {
        let (v, c) = chain(u, &self.v)?;
        let d = each_d(&self.d, |d| c.apply(&v, &self.v, d))?;
        Ok(DualsOf { v, d })
    }
}

/// The derivatives of a binary operation, by `f` on each component of the
/// two operands' derivatives (an empty side being zeros).
fn both_d<S: Field>(a: &[S], b: &[S], f: impl Fn(&S, &S) -> R<S>) -> R<Vec<S>> {
    match (a.len(), b.len()) {
        (0, 0) => {
            let z = S::zero();
            all_zero(f(&z, &z)?)
        }
        (n, 0) => {
            let z = S::zero();
            (0..n).map(|k| f(&a[k], &z)).collect()
        }
        (0, n) => {
            let z = S::zero();
            (0..n).map(|k| f(&z, &b[k])).collect()
        }
        (n, m) if n == m => a.iter().zip(b).map(|(x, y)| f(x, y)).collect(),
        _ => Err(XErr::Unsupported("tangents of different counts".into())),
    }
}

/// The derivatives of a unary operation, by `f` on each component.
fn each_d<S: Field>(a: &[S], f: impl Fn(&S) -> R<S>) -> R<Vec<S>> {
    if a.is_empty() {
        return all_zero(f(&S::zero())?);
    }
    a.iter().map(f).collect()
}

/// A derivative computed on zeros: none if it is zero, else refused.
fn all_zero<S: Field>(d: S) -> R<Vec<S>> {
    if d.is_zero() {
        Ok(Vec::new())
    } else {
        Err(XErr::Unsupported(
            "a nonzero derivative of zero tangents".into(),
        ))
    }
}

impl<S: Field> Field for DualsOf<S> {
    fn q(q: &Q) -> Self {
        DualsOf::none(S::q(q))
    }
    fn is_zero(&self) -> bool {
        self.v.is_zero() && self.d.iter().all(Field::is_zero)
    }
    fn zero_is_zero() -> bool {
        S::zero_is_zero()
    }
    fn one_times(&self) -> R<Self> {
        if !S::zero_is_zero() {
            return Self::q(&Q::one()).mul(self);
        }
        Ok(DualsOf {
            v: self.v.one_times()?,
            d: self.d.iter().map(|d| d.one_times()).collect::<R<_>>()?,
        })
    }
    fn add(&self, o: &Self) -> R<Self> {
        Ok(DualsOf {
            v: self.v.add(&o.v)?,
            d: both_d(&self.d, &o.d, |a, b| a.add(b))?,
        })
    }
    fn sub(&self, o: &Self) -> R<Self> {
        Ok(DualsOf {
            v: self.v.sub(&o.v)?,
            d: both_d(&self.d, &o.d, |a, b| a.sub(b))?,
        })
    }
    fn mul(&self, o: &Self) -> R<Self> {
        let v = self.v.mul(&o.v)?;
        let d = both_d(&self.d, &o.d, |da, db| mul_d(&self.v, &o.v, da, db))?;
        Ok(DualsOf { v, d })
    }
    fn div(&self, o: &Self) -> R<Self> {
        let v = self.v.div(&o.v)?;
        let d = both_d(&self.d, &o.d, |da, db| div_d(&v, &o.v, da, db))?;
        Ok(DualsOf { v, d })
    }
    fn neg(&self) -> Self {
        DualsOf {
            v: self.v.neg(),
            d: self.d.iter().map(Field::neg).collect(),
        }
    }
    fn exp(&self) -> R<Self> {
        self.unary(Unary::Exp)
    }
    fn log(&self) -> R<Self> {
        self.unary(Unary::Log)
    }
    fn sqrt(&self) -> R<Self> {
        self.unary(Unary::Sqrt)
    }
    fn sin(&self) -> R<Self> {
        self.unary(Unary::Sin)
    }
    fn cos(&self) -> R<Self> {
        self.unary(Unary::Cos)
    }
    fn gelu_t(&self) -> R<Self> {
        self.unary(Unary::GeluT)
    }
    fn sign(&self) -> R<Ordering> {
        self.v.sign()
    }
    fn value_q(&self) -> Option<Q> {
        self.v.value_q()
    }
    fn constant(&self) -> Self {
        DualsOf::none(self.v.clone())
    }
    fn sqrt_two_over_pi() -> R<Self> {
        Ok(DualsOf::none(S::sqrt_two_over_pi()?))
    }
    fn same(&self, o: &Self) -> R<bool> {
        if !self.v.same(&o.v)? {
            return Ok(false);
        }
        let n = self.d.len().max(o.d.len());
        for k in 0..n {
            if !self.d_at(k).same(&o.d_at(k))? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The symbolic domain of SPEC.md §19.8: exp, log of a positive sum of
/// exponentials, √ of a polynomial, gelu's tanh (with √(2/π) a symbol)
/// and the field operations on fractions of exponential polynomials in
/// the case's variables; sin and cos are refused, and so is a sign the value's form does not
/// fix (a kink or a comparison would split the case).
impl Field for Sym {
    fn q(q: &Q) -> Sym {
        Sym::q(q.clone())
    }
    fn is_zero(&self) -> bool {
        Sym::is_zero(self)
    }
    fn zero_is_zero() -> bool {
        true
    }
    fn add(&self, o: &Sym) -> R<Sym> {
        Sym::add(self, o)
    }
    fn sub(&self, o: &Sym) -> R<Sym> {
        Sym::sub(self, o)
    }
    fn mul(&self, o: &Sym) -> R<Sym> {
        Sym::mul(self, o)
    }
    fn div(&self, o: &Sym) -> R<Sym> {
        Sym::div(self, o)
    }
    fn neg(&self) -> Sym {
        Sym::neg(self)
    }
    fn exp(&self) -> R<Sym> {
        Sym::exp(self)
    }
    fn log(&self) -> R<Sym> {
        Sym::log(self)
    }
    fn sqrt(&self) -> R<Sym> {
        Sym::sqrt(self)
    }
    fn sin(&self) -> R<Sym> {
        Err(symbolic_refused("sin"))
    }
    fn cos(&self) -> R<Sym> {
        Err(symbolic_refused("cos"))
    }
    fn gelu_t(&self) -> R<Sym> {
        // tanh(a (x + c x³)) = (e^{2a(x + c x³)} − 1) / (e^{2a(x + c x³)} + 1),
        // a = √(2/π) a symbol: the exponent stays a polynomial.
        let cube = self.mul(self)?.mul(self)?;
        let inner = self.add(&Sym::q(gelu_c()).mul(&cube)?)?;
        let e = Sym::sqrt_two_over_pi()
            .mul(&inner)?
            .mul(&Sym::q(Q::int(2)))?
            .exp()?;
        let one = Sym::q(Q::one());
        e.sub(&one)?.div(&e.add(&one)?)
    }
    fn sign(&self) -> R<Ordering> {
        Sym::sign(self)
    }
    fn value_q(&self) -> Option<Q> {
        self.as_q()
    }
    fn constant(&self) -> Sym {
        self.clone()
    }
    fn sqrt_two_over_pi() -> R<Sym> {
        Ok(Sym::sqrt_two_over_pi())
    }
    fn same(&self, o: &Sym) -> R<bool> {
        match self.identical(o) {
            Some(true) => Ok(true),
            _ => Err(XErr::Undecided("not an identity".into())),
        }
    }
}

fn symbolic_refused(what: &str) -> XErr {
    XErr::Unsupported(format!("{what} in the symbolic domain"))
}
