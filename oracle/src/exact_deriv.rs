//! The properties of SPEC.md §4 for local ops with transcendental functions
//! (SPEC.md §19.4). Values live in the exact field of
//! `spmd_semantics::expoly`; equalities are decided exactly there, or by
//! disjoint enclosures (a counterexample), and are otherwise undecided.
//!
//! B3's derivative is forward mode over dual numbers of that field, applied
//! to the meaning (the local function on the denotation family) along each
//! coordinate, and paired with the cotangent: ⟨ḡ, J e_k⟩ must equal the k-th
//! coordinate of the backward's result. It never runs the backward.

use crate::outcome::{Outcome, Pass, Phase, Property, Shown, Violation};
use spmd_interp::transcendental::{
    eval, is_transcendental, vjp, DualOf, DualsOf, Field, XCtx, XEvalError, XT,
};
use spmd_interp::{Backward, Jvp, Op, TypedOp};
use spmd_semantics::expoly::{XErr, X};
use spmd_semantics::perrank::{denot_basis, free_unit, kernel_basis, num_free, Projection};
use spmd_semantics::symbolic::{watch_partial, Sym};
use spmd_semantics::{Mesh, PerRank, Shape, State, Tensor, Type, Q};

/// Whether the op is checked here: a local op whose function (or
/// hand-written backward) needs the exact transcendental path.
pub fn applies(op: &TypedOp) -> bool {
    let Op::Local(f) = &op.op else {
        return false;
    };
    is_transcendental(&f.expr)
        || matches!(&op.backward, Backward::Local(fs) if fs.iter().any(|b| is_transcendental(&b.expr)))
        || matches!(&op.jvp, Some(Jvp::Local(j)) if is_transcendental(&j.expr))
}

/// Why an instance stops.
enum Stop {
    Domain,
    /// Not decidable here (an enclosure straddles, or a value leaves the
    /// field): the instance is counted as undetermined.
    Undecided,
    Fail(Box<Violation>),
}

impl From<XErr> for Stop {
    fn from(e: XErr) -> Stop {
        match e {
            XErr::Domain => Stop::Domain,
            XErr::Unsupported(_) | XErr::Undecided(_) => Stop::Undecided,
        }
    }
}

impl From<XEvalError> for Stop {
    fn from(e: XEvalError) -> Stop {
        match e {
            XEvalError::X(x) => x.into(),
            XEvalError::Shape(s) => {
                panic!("interpreter bug: shape error on an inferred instance: {s}")
            }
        }
    }
}

/// A per-rank value over a field: a tensor per rank.
type Fam<S = X> = Vec<XT<S>>;

/// A scalar domain the properties are decided in: the exact field at a
/// point, or the symbolic domain over a whole case (SPEC.md §19.8).
trait Exact: Field {
    /// The value for a failure's message.
    fn show(&self) -> String;
}

impl Exact for X {
    fn show(&self) -> String {
        show_x(self)
    }
}

impl Exact for Sym {
    fn show(&self) -> String {
        format!("{self:?}")
    }
}

/// A case's lane groups (SPEC.md §8.5): per input and for the output, a
/// group per entry of each rank (rank r, entry e at r·numel + e); per
/// group, whether it is a core.
#[derive(Clone, Debug)]
pub struct LaneSets {
    pub inputs: Vec<Vec<u32>>,
    pub out: Vec<u32>,
    pub core: Vec<bool>,
}

impl LaneSets {
    /// Whether lane `a` keeps an item of group `x`: its own and the cores'.
    pub(crate) fn keeps(&self, a: u32, x: u32) -> bool {
        x == a || self.core.get(x as usize) == Some(&true)
    }
    /// The group of input `i`'s entry at `flat` (rank r, entry e at
    /// r·numel + e), or of the output's with `None`.
    pub(crate) fn group(&self, i: Option<usize>, flat: usize) -> Option<u32> {
        match i {
            Some(i) => self.inputs.get(i)?.get(flat).copied(),
            None => self.out.get(flat).copied(),
        }
    }
    /// Whether lane `a` keeps the item at `flat` of input `i` (or of the
    /// output): one of no group is kept.
    fn keeps_at(&self, a: u32, i: Option<usize>, flat: usize) -> bool {
        self.group(i, flat).is_none_or(|x| self.keeps(a, x))
    }
}

/// Which items a phase keeps: all, or those of one lane group.
#[derive(Clone, Copy)]
struct Keep<'a> {
    lane: Option<(u32, &'a LaneSets)>,
}

impl Keep<'_> {
    /// The flat index of a per-rank value's first nonzero entry (every
    /// item of a case lies in one group, read there); `None` for an item
    /// of no entry, which is kept.
    fn first(v: &PerRank) -> Option<usize> {
        let mut at = 0;
        for t in &v.tensors {
            if let Some(e) = t.data.iter().position(|q| !q.is_zero()) {
                return Some(at + e);
            }
            at += t.data.len();
        }
        None
    }
    fn keeps(&self, i: Option<usize>, flat: Option<usize>) -> bool {
        match (self.lane, flat) {
            (Some((g, l)), Some(flat)) => l.keeps_at(g, i, flat),
            _ => true,
        }
    }
    fn input(&self, i: usize, v: &PerRank) -> bool {
        self.keeps(Some(i), Self::first(v))
    }
    fn output(&self, v: &PerRank) -> bool {
        self.keeps(None, Self::first(v))
    }
    fn coord(&self, i: usize, rank: usize, elem: usize, n: usize) -> bool {
        self.keeps(Some(i), Some(rank * n + elem))
    }
}

/// Check one instance (SPEC.md §19.4), with `Phase::Lane` restricted to
/// one of `lanes`' groups.
pub fn check(
    op: &TypedOp,
    m: &Mesh,
    xs: &[PerRank],
    phase: Phase,
    lanes: Option<&LaneSets>,
) -> Outcome {
    let keep = Keep {
        lane: match (phase, lanes) {
            (Phase::Lane(g), Some(l)) => Some((g, l)),
            _ => None,
        },
    };
    let lifted: Vec<Fam> = xs.iter().map(lift_all).collect();
    match run(op, m, &lifted, Some(xs), phase, keep, &|| false) {
        Ok(p) => Outcome::Pass(p),
        Err(Stop::Domain) => Outcome::OutsideDomain,
        Err(Stop::Undecided) => Outcome::Pass(Pass {
            undecided: true,
            ..Pass::default()
        }),
        Err(Stop::Fail(v)) => Outcome::Fail(v),
    }
}

/// What running a case on symbolic values showed (SPEC.md §19.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Not decided: a comparison that is not an identity, a refused
    /// operation (a function other than exp, log and √, a sign, a
    /// division by the zero function) or a product beyond the cap. This
    /// says nothing about the rule; the case is left to the grid.
    No,
    /// Every comparison is an identity wherever the computation is
    /// defined; a division or a root may be undefined at some points.
    WhereDefined,
    /// Every comparison is an identity, and every value is defined at
    /// every point.
    Everywhere,
}

/// Whether every property of SPEC.md §4 that `check` decides holds at
/// every point of the case (mesh `m`, input `shapes`) as an identity
/// (SPEC.md §19.8), the forward ones alone without `backward`: each free
/// scalar is a variable, the instance is run in the symbolic domain, and
/// every comparison must be an identity there. `stop` is read between the
/// long loops; a stop decides nothing.
pub fn case_identity(
    op: &TypedOp,
    m: &Mesh,
    shapes: &[Shape],
    backward: bool,
    stop: &dyn Fn() -> bool,
) -> Identity {
    if !applies(op) || op.jvp.is_some() {
        return Identity::No;
    }
    let mut next: u32 = 0;
    let mut xs: Vec<Fam<Sym>> = Vec::with_capacity(shapes.len());
    for (t, s) in op.inputs.iter().zip(shapes) {
        let mut fam: Fam<Sym> = (0..m.num_ranks()).map(|_| XT::zeros(s)).collect();
        for k in 0..num_free(m, t, s) {
            let u = free_unit(m, t, s, k);
            for (f, ut) in fam.iter_mut().zip(&u.tensors) {
                for (x, q) in f.data.iter_mut().zip(&ut.data) {
                    if !q.is_zero() {
                        *x = Sym::var(next);
                    }
                }
            }
            next += 1;
        }
        xs.push(fam);
    }
    let (r, partial) = watch_partial(|| {
        run(
            op,
            m,
            &xs,
            None,
            Phase::full(backward),
            Keep { lane: None },
            stop,
        )
    });
    match r {
        Ok(p) if !p.undecided && !p.b3_undetermined => {
            if partial {
                Identity::WhereDefined
            } else {
                Identity::Everywhere
            }
        }
        _ => Identity::No,
    }
}

fn lift<S: Field>(t: &Tensor) -> XT<S> {
    XT::from_q(t)
}

fn lift_all<S: Field>(x: &PerRank) -> Fam<S> {
    x.tensors.iter().map(lift).collect()
}

/// `x + t z` over the field.
fn axpy<S: Field>(x: &Fam<S>, t: &Q, z: &PerRank) -> Result<Fam<S>, XErr> {
    x.iter()
        .zip(&z.tensors)
        .map(|(a, b)| {
            let data = a
                .data
                .iter()
                .zip(&b.data)
                .map(|(u, v)| u.add(&S::q(&t.mul(v))))
                .collect::<Result<_, _>>()?;
            Ok(XT {
                shape: a.shape.clone(),
                data,
            })
        })
        .collect()
}

/// `denote` of a family the caller is done with: where every rank is its
/// own one source (a type Varying on every axis), the denotation is the
/// family itself, taken as it is instead of copied rank by rank.
fn denote_owned<S: Field>(m: &Mesh, t: &Type, y: Fam<S>) -> Result<Fam<S>, XErr> {
    let proj = Projection::new(m, t);
    if (0..m.num_ranks()).all(|r| proj.sources(r) == [r]) && y.len() == m.num_ranks() {
        return Ok(y);
    }
    denote_by(m, &proj, &y)
}

fn denote<S: Field>(m: &Mesh, t: &Type, y: &Fam<S>) -> Result<Fam<S>, XErr> {
    denote_by(m, &Projection::new(m, t), y)
}

/// The family's denotation under `proj`: the same projection as exact
/// values' (SPEC.md §2.4), in the field.
fn denote_by<S: Field>(m: &Mesh, proj: &Projection, y: &Fam<S>) -> Result<Fam<S>, XErr> {
    (0..m.num_ranks())
        .map(|r| {
            let src = proj.sources(r);
            let mut acc = y[src[0]].clone();
            for &s in &src[1..] {
                for (a, b) in acc.data.iter_mut().zip(&y[s].data) {
                    *a = a.add(b)?;
                }
            }
            Ok(acc)
        })
        .collect()
}

fn eq_t<S: Field>(a: &XT<S>, b: &XT<S>) -> Result<bool, XErr> {
    if a.shape != b.shape {
        return Ok(false);
    }
    for (x, y) in a.data.iter().zip(&b.data) {
        if !x.same(y)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn eq_fam<S: Field>(a: &Fam<S>, b: &Fam<S>) -> Result<bool, XErr> {
    for (x, y) in a.iter().zip(b) {
        if !eq_t(x, y)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A replicated axis along which two ranks differ, if any (SPEC.md §2.3).
fn misfit<S: Field>(m: &Mesh, t: &Type, y: &Fam<S>) -> Result<Option<(usize, usize, usize)>, XErr> {
    for (a, s) in t.states.iter().enumerate() {
        if !s.replicated() {
            continue;
        }
        for r in 0..m.num_ranks() {
            let r0 = m.with_coord(r, a, 0);
            if r0 != r && !eq_t(&y[r], &y[r0])? {
                return Ok(Some((a, r0, r)));
            }
        }
    }
    Ok(None)
}

/// A value with a short decimal reading from its enclosure.
fn show_x(v: &X) -> String {
    match v.as_q() {
        Some(q) => q.to_string(),
        None => match v.enclose(40) {
            Some(iv) => {
                let mid = iv.lo.add(&iv.hi).mul(&Q::frac(1, 2));
                let scaled = mid.mul(&Q::int(1_000_000)).floor();
                let k = scaled.to_i64().unwrap_or(0);
                let sign = if k < 0 { "-" } else { "" };
                let k = k.unsigned_abs();
                format!("{v} ≈ {sign}{}.{:06}", k / 1_000_000, k % 1_000_000)
            }
            None => v.to_string(),
        },
    }
}

fn show_t<S: Exact>(t: &XT<S>) -> String {
    fn nest<S: Exact>(shape: &[usize], data: &[S]) -> String {
        match shape {
            [] => data[0].show(),
            [_, rest @ ..] => {
                let step: usize = rest.iter().product();
                let parts: Vec<String> = data.chunks(step.max(1)).map(|c| nest(rest, c)).collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
    if t.data.is_empty() {
        return format!("empty {:?}", t.shape);
    }
    nest(&t.shape, &t.data)
}

/// A family at its representative ranks (coordinate 0 off the Varying axes).
fn show_fam<S: Exact>(m: &Mesh, t: &Type, d: &Fam<S>) -> String {
    let reps: Vec<usize> = (0..m.num_ranks())
        .filter(|&r| {
            let c = m.coords(r);
            t.states
                .iter()
                .enumerate()
                .all(|(a, s)| *s == State::Varying || c[a] == 0)
        })
        .collect();
    if reps.len() == 1 {
        return show_t(&d[reps[0]]);
    }
    let parts: Vec<String> = reps.iter().map(|&r| show_t(&d[r])).collect();
    format!("<{}>", parts.join(" | "))
}

/// An instance's context. `xs`: the point's rational values, shown in a
/// failure; `None` in the symbolic domain, where a property that fails to
/// be an identity is undecided rather than failed (no point shows it).
struct Ctx<'a> {
    op: &'a TypedOp,
    m: &'a Mesh,
    xs: Option<&'a [PerRank]>,
    /// Whether to stop now (Ctrl-C, a time limit): read between the
    /// backward's cotangents and B3's coordinates, the long loops of a
    /// symbolic case; a stop leaves the instance undecided.
    stop: &'a dyn Fn() -> bool,
}

impl Ctx<'_> {
    fn shown(&self, xs: &[PerRank], extra: Vec<Shown>) -> Vec<Shown> {
        let mut s: Vec<Shown> = xs
            .iter()
            .enumerate()
            .map(|(i, x)| Shown {
                label: self.op.input_name(i),
                input: true,
                alternative: false,
                ty: self.op.inputs[i].clone(),
                value: x.clone(),
            })
            .collect();
        s.extend(extra);
        s
    }
    fn fail(&self, p: Property, what: String, extra: Vec<Shown>, e: String, a: String) -> Stop {
        let Some(xs) = self.xs else {
            return Stop::Undecided;
        };
        Stop::Fail(Box::new(Violation {
            property: p,
            mesh: self.m.clone(),
            what,
            shown: self.shown(xs, extra),
            expected: e,
            actual: a,
        }))
    }
}

fn local_fn(op: &TypedOp) -> &spmd_interp::LocalFn {
    match &op.op {
        Op::Local(f) => f,
        _ => unreachable!("applies() admits local ops only"),
    }
}

/// The forward on every rank, with whether a kink was met.
fn forward<S: Field>(op: &TypedOp, m: &Mesh, xs: &[Fam<S>]) -> Result<(Fam<S>, bool), Stop> {
    let f = local_fn(op);
    let mut ctx = XCtx::default();
    let y = (0..m.num_ranks())
        .map(|r| {
            let args: Vec<XT<S>> = xs.iter().map(|x| x[r].clone()).collect();
            eval(&f.expr, &args, &mut ctx)
        })
        .collect::<Result<Fam<S>, _>>()?;
    Ok((y, ctx.at_kink))
}

/// The backward on every rank for cotangent `g`.
fn backward<S: Field>(
    op: &TypedOp,
    m: &Mesh,
    xs: &[Fam<S>],
    g: &PerRank,
) -> Result<Vec<Fam<S>>, Stop> {
    let mut out: Vec<Fam<S>> = vec![Vec::with_capacity(m.num_ranks()); xs.len()];
    for r in 0..m.num_ranks() {
        // The rank's arguments, copied only where an expression reads
        // them: a zero cotangent's rank gives exact zeros.
        let args = || -> Vec<XT<S>> { xs.iter().map(|x| x[r].clone()).collect() };
        let bs: Vec<XT<S>> = match &op.backward {
            Backward::Local(fs) => {
                let mut all = args();
                all.push(lift(&g.tensors[r]));
                fs.iter()
                    .map(|f| eval(&f.expr, &all, &mut XCtx::default()))
                    .collect::<Result<_, _>>()?
            }
            _ if g.tensors[r].is_zero() => xs.iter().map(|x| XT::zeros(&x[r].shape)).collect(),
            _ => vjp(&local_fn(op).expr, &args(), &lift(&g.tensors[r]))?,
        };
        for (i, b) in bs.into_iter().enumerate() {
            let b = if op.no_grad.contains(&i) {
                XT::zeros(&xs[i][r].shape)
            } else {
                b
            };
            out[i].push(b);
        }
    }
    Ok(out)
}

/// Rank r's arguments over another scalar: entry `el` of input j, of
/// value v, becomes `make(j, el, v)`.
fn rank_args<S: Field, T>(
    xs: &[Fam<S>],
    r: usize,
    make: impl Fn(usize, usize, &S) -> T,
) -> Vec<XT<T>> {
    xs.iter()
        .enumerate()
        .map(|(j, x)| XT {
            shape: x[r].shape.clone(),
            data: x[r]
                .data
                .iter()
                .enumerate()
                .map(|(el, v)| make(j, el, v))
                .collect(),
        })
        .collect()
}

/// The derivative of every rank's output along one tangent of input i
/// (its unit representative `e`), by forward mode on dual numbers; with
/// whether a kink was met.
fn tangent_alone<S: Field>(
    op: &TypedOp,
    m: &Mesh,
    xs: &[Fam<S>],
    i: usize,
    e: &PerRank,
    total: bool,
    out_shape: &[usize],
) -> Result<(Fam<S>, bool), Stop> {
    let f = local_fn(op);
    let mut per_rank: Fam<S> = Vec::with_capacity(m.num_ranks());
    let mut kctx = XCtx::default();
    for r in 0..m.num_ranks() {
        // A total function (no domain error, no kink) has a zero
        // derivative on a rank whose tangent is zero: a local op reads its
        // own rank only (SPEC.md §19.4).
        if total && e.tensors[r].is_zero() {
            per_rank.push(XT::zeros(out_shape));
            continue;
        }
        let args = rank_args(xs, r, |j, k, v| DualOf {
            v: v.clone(),
            d: if j == i {
                S::q(&e.tensors[r].data[k])
            } else {
                S::zero()
            },
        });
        let t = eval(&f.expr, &args, &mut kctx)?;
        per_rank.push(XT {
            shape: t.shape,
            data: t.data.into_iter().map(|d| d.d).collect(),
        });
    }
    Ok((per_rank, kctx.at_kink))
}

/// `tangent_alone` for every tangent of `coords` at once: per rank one
/// forward pass on `DualsOf`, carrying the tangents that rank evaluates
/// (those `tangent_alone` would; a total function skips a rank where a
/// tangent is zero, and that tangent's derivative there is zeros). The
/// value is computed once per rank instead of once per tangent, and each
/// derivative by the same operations as `tangent_alone`'s, so each family
/// is exactly what it would give. `None` where the pass meets an error, a
/// kink or a refusal: the caller then runs the tangents one at a time,
/// which meets the same thing at the same tangent as before.
fn tangents_at_once<S: Field>(
    op: &TypedOp,
    m: &Mesh,
    xs: &[Fam<S>],
    i: usize,
    coords: &[(spmd_semantics::perrank::DenotCoord, PerRank)],
    total: bool,
    out_shape: &[usize],
) -> Option<Vec<Fam<S>>> {
    let f = local_fn(op);
    let mut out: Vec<Fam<S>> = coords
        .iter()
        .map(|_| Vec::with_capacity(m.num_ranks()))
        .collect();
    let mut kctx = XCtx::default();
    for r in 0..m.num_ranks() {
        let carried: Vec<usize> = (0..coords.len())
            .filter(|&k| !(total && coords[k].1.tensors[r].is_zero()))
            .collect();
        if carried.is_empty() && total {
            for fam in out.iter_mut() {
                fam.push(XT::zeros(out_shape));
            }
            continue;
        }
        let args = rank_args(xs, r, |j, el, v| DualsOf {
            v: v.clone(),
            d: if j == i {
                carried
                    .iter()
                    .map(|&k| S::q(&coords[k].1.tensors[r].data[el]))
                    .collect()
            } else {
                Vec::new()
            },
        });
        let t = eval(&f.expr, &args, &mut kctx).ok()?;
        if kctx.at_kink {
            return None;
        }
        // `carried` is increasing: tangent k is component `next` of the
        // derivatives where it is carried.
        let mut next = 0;
        for (k, fam) in out.iter_mut().enumerate() {
            if carried.get(next) == Some(&k) {
                fam.push(XT {
                    shape: t.shape.clone(),
                    data: t.data.iter().map(|d| d.d_at(next)).collect(),
                });
                next += 1;
            } else {
                fam.push(XT::zeros(out_shape));
            }
        }
    }
    Some(out)
}

/// The global tensor of a family under a type with layouts (SPEC.md
/// §13.1), placed by the same map as `perrank::global` (run on indices).
fn global_x<S: Field>(m: &Mesh, t: &Type, d: &Fam<S>) -> Option<XT<S>> {
    let (shape, src) = spmd_semantics::perrank::global_sources(m, t, &d.first()?.shape)?;
    let data = src
        .iter()
        .map(|&(r, e)| d.get(r)?.data.get(e).cloned())
        .collect::<Option<Vec<S>>>()?;
    Some(XT { shape, data })
}

fn steps() -> Vec<Q> {
    vec![
        Q::int(1),
        Q::int(2),
        Q::int(3),
        Q::frac(1, 4),
        Q::frac(1, 3),
    ]
}

/// The inputs with one of them moved: over the field, and (at a point) as
/// rationals.
type Moved<S> = (Vec<Fam<S>>, Option<Vec<PerRank>>);

/// The properties of one instance over `xs`, a point's values lifted to
/// the field (with the point as `pts`) or the case's variables (`pts`
/// `None`: a property that is not an identity stops as undecided).
fn run<S: Exact>(
    op: &TypedOp,
    m: &Mesh,
    xs: &[Fam<S>],
    pts: Option<&[PerRank]>,
    phase: Phase,
    keep: Keep,
    stop: &dyn Fn() -> bool,
) -> Result<Pass, Stop> {
    let c = Ctx {
        op,
        m,
        xs: pts,
        stop,
    };
    let alt = |label: String, ty: &Type, v: Option<&Vec<PerRank>>, i: usize| {
        v.map(|v| Shown {
            label,
            input: false,
            alternative: true,
            ty: ty.clone(),
            value: v[i].clone(),
        })
    };
    // Input `i` moved by t z, over the field and (at a point) as rationals.
    let moved = |i: usize, t: &Q, z: &PerRank| -> Result<Moved<S>, Stop> {
        let mut xs2 = xs.to_vec();
        xs2[i] = axpy(&xs[i], t, z)?;
        let p2 = pts.map(|p| {
            let mut p2 = p.to_vec();
            p2[i] = p[i].axpy(t, z);
            p2
        });
        Ok((xs2, p2))
    };
    let (y, at_kink) = forward(op, m, xs)?;
    // F1
    if let Some((a, r0, r)) = misfit(m, &op.output, &y)? {
        return Err(c.fail(
            Property::F1,
            format!(
                "the output differs between ranks along {} axis `{}`",
                op.output.states[a], m.axes[a].name
            ),
            vec![],
            format!("rank {r} equal to rank {r0}"),
            format!("{} vs {}", show_t(&y[r]), show_t(&y[r0])),
        ));
    }
    let dy = denote(m, &op.output, &y)?;
    // F2
    let shapes: Vec<Shape> = xs.iter().map(|x| x[0].shape.clone()).collect();
    for (i, ti) in op.inputs.iter().enumerate() {
        for z in kernel_basis(m, ti, &shapes[i]) {
            if !keep.input(i, &z) {
                continue;
            }
            for t in steps() {
                let (xs2, p2) = moved(i, &t, &z)?;
                let y2 = match forward(op, m, &xs2) {
                    Ok((y2, _)) => y2,
                    Err(Stop::Domain) => continue,
                    Err(e) => return Err(e),
                };
                if misfit(m, &op.output, &y2)?.is_some() {
                    // F1 off the grid, reported at that point.
                    return match &p2 {
                        Some(p2) => run(
                            op,
                            m,
                            &xs2,
                            Some(p2),
                            Phase::Forward,
                            Keep { lane: None },
                            stop,
                        ),
                        None => Err(Stop::Undecided),
                    };
                }
                let dy2 = denote(m, &op.output, &y2)?;
                if !eq_fam(&dy, &dy2)? {
                    return Err(c.fail(
                        Property::F2,
                        format!(
                            "{0} and {0}' are equivalent (same denotation) but the outputs are not",
                            op.input_name(i)
                        ),
                        alt(format!("{}'", op.input_name(i)), ti, p2.as_ref(), i)
                            .into_iter()
                            .collect(),
                        show_fam(m, &op.output, &dy),
                        show_fam(m, &op.output, &dy2),
                    ));
                }
            }
        }
    }
    // F3: the local function on the denotation family, rank by rank.
    let f = local_fn(op);
    let dxs: Vec<Fam<S>> = xs
        .iter()
        .zip(&op.inputs)
        .map(|(x, t)| denote(m, t, x))
        .collect::<Result<_, _>>()?;
    if op.is_global() {
        // Global SPMD (SPEC.md §13.2): the function of the global tensors.
        let gs: Option<Vec<XT<S>>> = dxs
            .iter()
            .zip(&op.inputs)
            .map(|(d, t)| global_x(m, t, d))
            .collect();
        let (Some(gs), Some(have)) = (gs, global_x(m, &op.output, &dy)) else {
            return Err(c.fail(
                Property::F3,
                "a layout does not fit the shapes".into(),
                vec![],
                "global tensors".into(),
                "no global tensor".into(),
            ));
        };
        let want = eval(&f.expr, &gs, &mut XCtx::default())?;
        if !eq_t(&want, &have)? {
            return Err(c.fail(
                Property::F3,
                format!(
                    "the output's global tensor is not `{}` of the inputs' global tensors",
                    f.text
                ),
                vec![],
                show_t(&want),
                show_t(&have),
            ));
        }
    }
    let mut want: Fam<S> = Vec::with_capacity(m.num_ranks());
    for r in 0..m.num_ranks() {
        let args: Vec<XT<S>> = dxs.iter().map(|d| d[r].clone()).collect();
        want.push(eval(&f.expr, &args, &mut XCtx::default())?);
    }
    if !op.is_global() && !eq_fam(&want, &dy)? {
        return Err(c.fail(
            Property::F3,
            format!(
                "the output does not denote `{}` of the inputs' denotations",
                f.text
            ),
            vec![],
            show_fam(m, &op.output, &want),
            show_fam(m, &op.output, &dy),
        ));
    }
    // A declared JVP of a transcendental op is not checked on this path
    // (SPEC.md §19.4): the instance is left undetermined, never passed.
    let j1_open = op.jvp.is_some();
    match phase {
        Phase::Forward | Phase::Values => return Ok(Pass::default()),
        Phase::Tangent => {
            return Ok(Pass {
                b3_undetermined: j1_open,
                ..Pass::default()
            })
        }
        Phase::All | Phase::AllBut(_) | Phase::Lane(_) => {}
    }
    // B1, B2 for every cotangent of the free basis.
    let tc = op.output.cot();
    let out_shape = y[0].shape.clone();
    let cot_in: Vec<Type> = op.inputs.iter().map(Type::cot).collect();
    // Only the unit cotangents of the phase's lane group, if any.
    let gs: Vec<PerRank> = (0..num_free(m, &tc, &out_shape))
        .map(|k| free_unit(m, &tc, &out_shape, k))
        .filter(|g| keep.output(g))
        .collect();
    if let Err(why) = op.backward_accepts(m, &out_shape, &shapes) {
        return Err(c.fail(
            Property::B1,
            format!("the backward does not fit the cotangent: {why}"),
            vec![],
            format!("a cotangent of the output's shape {out_shape:?}"),
            "no well-formed result".into(),
        ));
    }
    let mut results: Vec<Vec<Fam<S>>> = Vec::with_capacity(gs.len());
    let g_shown = |g: &PerRank| Shown {
        label: "g".into(),
        input: false,
        alternative: false,
        ty: tc.clone(),
        value: g.clone(),
    };
    for g in &gs {
        if (c.stop)() {
            return Err(Stop::Undecided);
        }
        let bs = backward(op, m, xs, g)?;
        let mut dbs = Vec::with_capacity(bs.len());
        for (i, b) in bs.iter().enumerate() {
            if op.no_grad.contains(&i) {
                dbs.push(vec![]);
                continue;
            }
            if b[0].shape != shapes[i] {
                return Err(c.fail(
                    Property::B1,
                    format!(
                        "the backward's cotangent for {} has the wrong shape",
                        op.input_name(i)
                    ),
                    vec![g_shown(g)],
                    format!("shape {:?}", shapes[i]),
                    format!("shape {:?}", b[0].shape),
                ));
            }
            if let Some((a, r0, r)) = misfit(m, &cot_in[i], b)? {
                return Err(c.fail(
                    Property::B1,
                    format!(
                        "the backward's cotangent for {} differs between ranks along {} axis `{}`",
                        op.input_name(i),
                        cot_in[i].states[a],
                        m.axes[a].name
                    ),
                    vec![g_shown(g)],
                    format!("rank {r} equal to rank {r0}"),
                    format!("{} vs {}", show_t(&b[r]), show_t(&b[r0])),
                ));
            }
            dbs.push(denote(m, &cot_in[i], b)?);
        }
        for (j, tj) in op.inputs.iter().enumerate() {
            for z in kernel_basis(m, tj, &shapes[j]) {
                if !keep.input(j, &z) {
                    continue;
                }
                for t in steps() {
                    let (xs2, p2) = moved(j, &t, &z)?;
                    let bs2 = match backward(op, m, &xs2, g) {
                        Ok(b) => b,
                        Err(Stop::Domain) => continue,
                        Err(e) => return Err(e),
                    };
                    for (i, b2) in bs2.iter().enumerate() {
                        if op.no_grad.contains(&i) {
                            continue;
                        }
                        let d2 = denote(m, &cot_in[i], b2)?;
                        if misfit(m, &cot_in[i], b2)?.is_some() || !eq_fam(&dbs[i], &d2)? {
                            return Err(c.fail(
                                Property::B2,
                                format!(
                                    "{0} and {0}' are equivalent but the backward's cotangents for {1} are not",
                                    op.input_name(j),
                                    op.input_name(i)
                                ),
                                alt(format!("{}'", op.input_name(j)), tj, p2.as_ref(), j)
                                    .into_iter()
                                    .chain([g_shown(g)])
                                    .collect(),
                                show_fam(m, &cot_in[i], &dbs[i]),
                                show_fam(m, &cot_in[i], &d2),
                            ));
                        }
                    }
                }
            }
        }
        results.push(dbs);
    }
    for z in kernel_basis(m, &tc, &out_shape) {
        if !keep.output(&z) {
            continue;
        }
        let bs = backward(op, m, xs, &z)?;
        for (i, b) in bs.iter().enumerate() {
            if op.no_grad.contains(&i) {
                continue;
            }
            let d = denote(m, &cot_in[i], b)?;
            let zero: Fam<S> = d.iter().map(|t| XT::zeros(&t.shape)).collect();
            if !eq_fam(&d, &zero)? {
                return Err(c.fail(
                    Property::B2,
                    "the cotangent g denotes zero but the backward's result does not".into(),
                    vec![g_shown(&z)],
                    "0".into(),
                    show_fam(m, &cot_in[i], &d),
                ));
            }
        }
    }
    // B3: forward mode on the meaning, paired with the cotangent. A kink
    // of this instance's forward (above, on the same values) leaves it
    // undetermined.
    if at_kink {
        return Ok(Pass {
            b3_undetermined: true,
            ..Pass::default()
        });
    }
    let repeat: usize = op
        .output
        .states
        .iter()
        .zip(&m.axes)
        .filter(|(s, _)| **s != State::Varying)
        .map(|(_, ax)| ax.size)
        .product();
    let inv_repeat = S::q(&Q::frac(1, repeat as i64));
    let dgs: Vec<Fam<S>> = gs
        .iter()
        .map(|g| denote(m, &tc, &lift_all(g)))
        .collect::<Result<_, _>>()?;
    let total = spmd_interp::lanes::total(&f.expr);
    for (i, ti) in op.inputs.iter().enumerate() {
        if op.no_grad.contains(&i) {
            continue;
        }
        let n_i = shapes[i].iter().product::<usize>();
        let coords: Vec<_> = denot_basis(m, ti, &shapes[i])
            .into_iter()
            .filter(|(coord, _)| keep.coord(i, coord.rank, coord.elem, n_i))
            .collect();
        // Every column of input i by one forward pass per rank over all its
        // tangents at once (`tangents_at_once`); where that pass meets
        // anything but plain values, the columns one at a time as before.
        let mut at_once =
            tangents_at_once(op, m, xs, i, &coords, total, &out_shape).map(Vec::into_iter);
        for (coord, e) in &coords {
            if (c.stop)() {
                return Err(Stop::Undecided);
            }
            // d/dh ⟦f(x + h e)⟧ at 0 (SPEC.md §5.1), by forward mode on
            // every rank with the unit representative e as tangent.
            let (per_rank, kink) = match at_once.as_mut().and_then(Iterator::next) {
                Some(t) => (t, false),
                None => tangent_alone(op, m, xs, i, e, total, &out_shape)?,
            };
            let tangent = denote_owned(m, &op.output, per_rank)?;
            if kink {
                return Ok(Pass {
                    b3_undetermined: true,
                    ..Pass::default()
                });
            }
            for ((g, dg), dbs) in gs.iter().zip(&dgs).zip(&results) {
                // A zero factor adds nothing: its product is zero and the
                // sum keeps the other term as it is (`Field::is_zero`), so
                // a unit cotangent's pairing is a sum over its support.
                let mut pair = S::zero();
                for (tr, gr) in tangent.iter().zip(dg) {
                    for (a, b) in tr.data.iter().zip(&gr.data) {
                        if a.is_zero() || b.is_zero() {
                            continue;
                        }
                        pair = pair.add(&a.mul(b)?)?;
                    }
                }
                let pair = pair.mul(&inv_repeat)?;
                let got = &dbs[i][coord.rank].data[coord.elem];
                if !pair.same(got)? {
                    return Err(c.fail(
                        Property::B3,
                        format!(
                            "the backward's cotangent for {} is not the gradient (element {} of rank {}'s piece)",
                            op.input_name(i),
                            coord.elem,
                            coord.rank
                        ),
                        vec![g_shown(g)],
                        pair.show(),
                        got.show(),
                    ));
                }
            }
        }
    }
    Ok(Pass {
        b3_undetermined: j1_open,
        ..Pass::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_interp::builtin;

    /// A family's shapes and entries, for structural comparison.
    fn parts(f: &Fam<X>) -> Vec<(Vec<usize>, Vec<X>)> {
        f.iter()
            .map(|t| (t.shape.clone(), t.data.clone()))
            .collect()
    }

    /// B3's columns of one input at once (`tangents_at_once`) are, tangent
    /// by tangent and in the same normal form, the columns one at a time
    /// (`tangent_alone`): on total ops (a rank whose tangent is zero is
    /// skipped) and ops with a domain (every rank evaluated), with Varying,
    /// Invariant and Partial inputs on two ranks. Where a pass meets a
    /// domain error the columns at once give none, and one at a time the
    /// error. The twin: each family set beside the next tangent's differs.
    #[test]
    fn the_columns_at_once_are_the_columns_one_at_a_time() {
        let m = Mesh::line(2);
        let v = Type::one(State::Varying);
        let mut compared = 0;
        let mut twins_differ = 0;
        for (name, ins, out) in [
            ("softmax", vec![v.clone()], v.clone()),
            (
                "exp",
                vec![Type::one(State::Invariant)],
                Type::one(State::Invariant),
            ),
            ("log", vec![v.clone()], v.clone()),
            ("layernorm", vec![v.clone()], v.clone()),
            (
                "gelu",
                vec![Type::one(State::Partial)],
                Type::one(State::Partial),
            ),
        ] {
            let f = builtin(name).expect("a built-in");
            let op = TypedOp::local(f, ins.clone(), out);
            let total = spmd_interp::lanes::total(&local_fn(&op).expr);
            let shape = vec![3];
            let xs: Vec<Fam<X>> = ins
                .iter()
                .map(|t| {
                    let k = num_free(&m, t, &shape);
                    let free: Vec<Q> = (0..k).map(|j| Q::int(j as i64 + 1)).collect();
                    lift_all(&spmd_semantics::perrank::from_free(&m, t, &shape, &free))
                })
                .collect();
            let (y, _) = forward(&op, &m, &xs).ok().expect("the forward runs");
            let out_shape = y[0].shape.clone();
            let coords = denot_basis(&m, &ins[0], &shape);
            let many = tangents_at_once(&op, &m, &xs, 0, &coords, total, &out_shape)
                .expect("no error at these values");
            assert_eq!(many.len(), coords.len());
            for (k, (_, e)) in coords.iter().enumerate() {
                let (one, kink) = tangent_alone(&op, &m, &xs, 0, e, total, &out_shape)
                    .ok()
                    .expect("runs");
                assert!(!kink);
                assert_eq!(parts(&many[k]), parts(&one), "{name}: tangent {k}");
                compared += 1;
                if let Some(next) = many.get(k + 1) {
                    twins_differ += usize::from(parts(next) != parts(&one));
                }
            }
        }
        assert!(compared >= 20, "{compared}");
        assert!(twins_differ >= 10, "{twins_differ}");
        // log at 0: outside its domain, at once and one at a time.
        let op = TypedOp::local(builtin("log").unwrap(), vec![v.clone()], v.clone());
        let zero = PerRank {
            tensors: vec![Tensor::zeros(&[2]); 2],
        };
        let xs = vec![lift_all::<X>(&zero)];
        let coords = denot_basis(&m, &v, &[2]);
        assert!(tangents_at_once(&op, &m, &xs, 0, &coords, false, &[2]).is_none());
        assert!(tangent_alone(&op, &m, &xs, 0, &coords[0].1, false, &[2]).is_err());
    }
}
