//! The f64 floor of the bench (SPEC.md §18.4): the exact checker's
//! per-instance algorithm for an elementwise op on one mesh axis, ported
//! to f64 on flat preallocated buffers, which `ratio_exact_to_f64` measures
//! the exact checker against. A build of it with `COUNT` counts the
//! arithmetic on values it performs, and `arith_ns` times the same number
//! of multiply-adds in a plain loop, for `ratio_f64_to_arith`.

use spmd_generators::{cases, Scope};
use spmd_interp::{builtin, TypedOp};
use spmd_semantics::{Mesh, State, Type, Q};
use std::ops::ControlFlow;

// ---------------------------------------------------------------------
// The f64 floor: the oracle's per-instance algorithm (SPEC.md §4, §5) for an
// elementwise op on one mesh axis, on flat preallocated buffers.

/// The elementwise ops the floor covers.
#[derive(Clone, Copy, Debug)]
pub(super) enum Elem {
    Add,
    Mul,
    Div,
    Relu,
}

impl Elem {
    fn f(self, a: &[f64]) -> Option<f64> {
        match self {
            Elem::Add => Some(a[0] + a[1]),
            Elem::Mul => Some(a[0] * a[1]),
            Elem::Div => (a[1] != 0.0).then(|| a[0] / a[1]),
            Elem::Relu => Some(a[0].max(0.0)),
        }
    }
    /// Arithmetic operations on values in one `f`.
    fn f_ops(self) -> usize {
        usize::from(!matches!(self, Elem::Relu))
    }
    /// ... and in one `grad` along input i.
    fn grad_ops(self, i: usize) -> usize {
        match (self, i) {
            (Elem::Div, 0) => 1,
            (Elem::Div, _) => 3,
            _ => 0,
        }
    }
    fn kink(self, a: &[f64]) -> bool {
        matches!(self, Elem::Relu) && a[0] == 0.0
    }
    /// ∂f/∂a_i (the local VJP's factor).
    fn grad(self, a: &[f64], i: usize) -> Option<f64> {
        match (self, i) {
            (Elem::Add, _) => Some(1.0),
            (Elem::Mul, 0) => Some(a[1]),
            (Elem::Mul, _) => Some(a[0]),
            (Elem::Div, 0) => (a[1] != 0.0).then(|| 1.0 / a[1]),
            (Elem::Div, _) => (a[1] != 0.0).then(|| -a[0] / (a[1] * a[1])),
            (Elem::Relu, _) => Some(if a[0] > 0.0 { 1.0 } else { 0.0 }),
        }
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs() + b.abs())
}

/// `q` as the nearest-ish f64: a small value's parts divided, which is
/// what an f64 program reading these values would hold. Computed per grid
/// point, as the exact side builds its inputs per point (SPEC.md §18.4).
fn q64(q: &Q) -> f64 {
    match q {
        Q::Small(r) => *r.numer() as f64 / *r.denom() as f64,
        Q::Big(_) => {
            let s = q.to_string();
            match s.split_once('/') {
                Some((n, d)) => n.parse::<f64>().unwrap_or(0.0) / d.parse::<f64>().unwrap_or(1.0),
                None => s.parse().unwrap_or(0.0),
            }
        }
    }
}

/// What the floor ran: instances and typings it found failing.
pub(super) struct Floor {
    pub(super) instances: u64,
    pub(super) failing: u64,
    /// The arithmetic operations on values (+, −, ×, ÷) it performed, when
    /// counted (`COUNT`); 0 otherwise.
    pub(super) arith: u64,
}

/// The f64 `derive`: every one-axis typing, the same cases and grid
/// points, the same stopping rule (first forward failure ends a typing; a
/// backward failure ends it after the case's forward scan).
pub(super) fn floor_derive<const COUNT: bool>(name: &str, e: Elem, scope: &Scope) -> Floor {
    let f = builtin(name).expect("builtin");
    let types = spmd_generators::all_types(1);
    let meshes = scope.meshes_with(1);
    let mut out = Floor {
        instances: 0,
        failing: 0,
        arith: 0,
    };
    // As `derive` does: the one-rank cases once, shared by every typing
    // whose multi-rank cases pass (their instances counted in each).
    let (single, multi): (Vec<Mesh>, Vec<Mesh>) =
        meshes.iter().cloned().partition(|m| m.num_ranks() == 1);
    let mut first = true;
    let mut shared = 0;
    let mut shared_arith = 0;
    for ins in spmd_generators::tuples(&types, f.arity()) {
        for o in &types {
            let op = TypedOp::local(f.clone(), ins.clone(), o.clone());
            // The one-rank run is counted in each typing that takes it, as
            // `derive`'s rows count it, and not once more for the run
            // itself: both sides do the same work and must count it alike.
            if first {
                first = false;
                let (n, failed, a) = floor_op::<COUNT>(e, &op, scope, &single);
                shared = if failed { 0 } else { n };
                shared_arith = if failed { 0 } else { a };
            }
            let (n, failed, a) = floor_op::<COUNT>(e, &op, scope, &multi);
            out.instances += n + if failed { 0 } else { shared };
            out.arith += a + if failed { 0 } else { shared_arith };
            out.failing += u64::from(failed);
        }
    }
    out
}

/// One typed op on `meshes`: instances run, whether it failed, and the
/// arithmetic it performed (counted with `COUNT`).
fn floor_op<const COUNT: bool>(
    e: Elem,
    op: &TypedOp,
    scope: &Scope,
    meshes: &[Mesh],
) -> (u64, bool, u64) {
    let (cs, _) = cases(op, scope, meshes);
    let mut n = 0u64;
    let mut arith = 0u64;
    for c in &cs {
        // As the exact side (`spmd_drivers::run`): what is implied is left
        // out, and a case that fails is run again in full, its instances
        // counted from the second run.
        let (mut k, mut failed, a) = floor_case::<COUNT>(e, op, c, true);
        arith += a;
        // Something was left out: B2's primal half, or units of a P
        // cotangent on more than one rank.
        let left_out = c.b2_implied
            || (op.output.cot().states.contains(&State::Partial) && c.mesh.num_ranks() > 1);
        if failed && left_out {
            let (k2, f2, a2) = floor_case::<COUNT>(e, op, c, false);
            (k, failed) = (k2, f2);
            arith += a2;
        }
        n += k;
        if failed {
            return (n, true, arith);
        }
    }
    (n, false, arith)
}

/// One case of `floor_op`, leaving out what is implied when `lighter`:
/// instances run, whether it failed, and the arithmetic.
fn floor_case<const COUNT: bool>(
    e: Elem,
    op: &TypedOp,
    c: &spmd_generators::Case,
    lighter: bool,
) -> (u64, bool, u64) {
    let (_, deg) = op.op.infer(&c.mesh, &c.shapes).expect("fits");
    let mut ws = Ws::<COUNT>::new(e, op, &c.mesh, &c.shapes, &deg);
    ws.groups = c.lanes.clone();
    ws.b2_implied = lighter && c.b2_implied;
    // The ops the floor ports have built-in VJPs, linear in g.
    ws.reduce_g = lighter;
    let scalars: usize = c.lists.iter().map(|(k, _)| k).sum();
    let mut held = false;
    let mut n = 0u64;
    let mut pt = vec![0.0; scalars];
    // The same points as the exact side: the case's own grid (the lower
    // set of SPEC.md §8.3 for a polynomial op).
    let r = c.for_each_point(&mut |p| {
        for (a, q) in pt.iter_mut().zip(p) {
            *a = q64(q);
        }
        // The same properties as the exact side: at a point of a lane
        // case, only the nonzero group's items (SPEC.md §8.5); else an
        // input whose value indices use up its budget here leaves out
        // its properties of one degree less (SPEC.md §8.3).
        ws.lane = c.lanes.as_ref().and_then(|l| l.lane_at(p));
        let skip = if c.per_input && ws.lane.is_none() {
            c.saturated_inputs(p)
        } else {
            0
        };
        ws.skip = skip;
        let all_skipped = skip.count_ones() as usize == c.lists.len();
        match ws.check(&pt, !held && !all_skipped) {
            Err(Fail::Forward) => ControlFlow::Break(()),
            Err(Fail::Backward) => {
                held = true;
                ControlFlow::Continue(())
            }
            Ok(()) => {
                n += 1;
                ControlFlow::Continue(())
            }
        }
    });
    (n, r.is_break() || held, ws.arith)
}

enum Fail {
    Forward,
    Backward,
}

/// One case's workspace: per-rank flat buffers, allocated once. With
/// `COUNT` it also counts the arithmetic on values it performs (`arith`);
/// the timed floor is compiled without it.
struct Ws<const COUNT: bool> {
    arith: u64,
    e: Elem,
    /// Inputs whose properties this point leaves out (bit i), decided at
    /// other points (SPEC.md §8.3).
    skip: u64,
    /// The case's lane groups, and the group this point checks alone.
    groups: Option<spmd_generators::LaneGroups>,
    lane: Option<u32>,
    /// As the exact side leaves them out (SPEC.md §8.3, §4.7): B2's primal
    /// half where the grid implies it, and B1 and B3 at unit cotangents
    /// other than the first of each denotation (B1 then also at the
    /// cotangents that denote zero).
    b2_implied: bool,
    reduce_g: bool,
    r: usize,
    n: usize,
    ins: Vec<State>,
    out: State,
    /// Per input: numel (n or 1).
    ni: Vec<usize>,
    deg_num: Vec<u32>,
    deg_den: Vec<u32>,
    poly: bool,
    step: f64,
    /// Per input: polynomial finite-difference weights (derivative, check).
    weights: Vec<Option<(Vec<f64>, Vec<f64>)>>,
    x: Vec<Vec<f64>>,
    y: Vec<f64>,
    y2: Vec<f64>,
    dy: Vec<f64>,
    den: Vec<f64>,
    args: Vec<f64>,
    /// Samples for finite differences: (k, R·n).
    samples: Vec<Vec<f64>>,
    /// Per cotangent unit: the backward's results per input, and their
    /// denotations.
    bs: Vec<Vec<Vec<f64>>>,
    dbs: Vec<Vec<f64>>,
    b2: Vec<Vec<f64>>,
    g: Vec<f64>,
    dgs: Vec<Vec<f64>>,
    cols: Vec<Vec<f64>>,
    kink: bool,
    /// Per input: the steps along its kernel lines (`line_steps`).
    lines: Vec<Vec<f64>>,
    /// Per input: its denotation (F3), and the basis of its denotation.
    dx: Vec<Vec<f64>>,
    basis: Vec<Vec<(usize, usize)>>,
    /// A denotation of an input's cotangent, and the one expected (B2, B3).
    d: Vec<f64>,
    want: Vec<f64>,
    /// The ranks a direction moves, and its steps h.
    ranks: Vec<usize>,
    hs: Vec<f64>,
    /// Which unit cotangents this instance checks, and the buffers of the
    /// rational fits.
    kept_g: Vec<bool>,
    fit: Fit64,
    /// The support of the unit cotangent being run (`backward_on`).
    supp: Vec<(usize, usize)>,
}

fn reps(s: State, r: usize) -> usize {
    if s.replicated() {
        1
    } else {
        r
    }
}

impl<const COUNT: bool> Ws<COUNT> {
    /// Count `k` arithmetic operations on values (only with `COUNT`).
    #[inline(always)]
    fn count(&mut self, k: usize) {
        if COUNT {
            self.arith += k as u64;
        }
    }

    fn new(
        e: Elem,
        op: &TypedOp,
        m: &Mesh,
        shapes: &[Vec<usize>],
        deg: &spmd_interp::Degree,
    ) -> Ws<COUNT> {
        let r = m.num_ranks();
        let ni: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
        let n = ni.iter().copied().max().unwrap_or(1);
        let ins: Vec<State> = op.inputs.iter().map(|t: &Type| t.states[0]).collect();
        let out = op.output.states[0];
        let poly = deg.is_polynomial();
        let step = if deg.piecewise { 1.0 / 65536.0 } else { 1.0 };
        // As the exact side: interpolation weights for a polynomial, and
        // for a piecewise op along an input it does not divide by, at the
        // small step (SPEC.md §18.1); the general fit otherwise.
        let step_q = if deg.piecewise {
            Q::frac(1, 65536)
        } else {
            Q::one()
        };
        let weights = deg
            .num
            .iter()
            .zip(&deg.den)
            .map(|(&d, &den)| {
                (poly || den == 0).then(|| {
                    let w = spmd_oracle::fd::PolyWeights::new(d, &step_q);
                    let s = |v: &[Q]| v.iter().map(q64).collect::<Vec<_>>();
                    (s(&w.deriv), s(&w.check))
                })
            })
            .collect();
        let tc = out.cot();
        let ng = reps(tc, r) * n;
        let mut ws = Ws {
            e,
            skip: 0,
            groups: None,
            lane: None,
            b2_implied: false,
            reduce_g: false,
            arith: 0,
            r,
            n,
            ins: ins.clone(),
            out,
            ni: ni.clone(),
            deg_num: deg.num.clone(),
            deg_den: deg.den.clone(),
            poly,
            step,
            weights,
            x: ni.iter().map(|&k| vec![0.0; r * k]).collect(),
            y: vec![0.0; r * n],
            y2: vec![0.0; r * n],
            dy: vec![0.0; r * n],
            den: vec![0.0; r * n],
            args: vec![0.0; ni.len()],
            samples: vec![vec![0.0; r * n]; 40],
            bs: vec![ni.iter().map(|&k| vec![0.0; r * k]).collect(); ng],
            dbs: ni.iter().map(|&k| vec![0.0; r * k]).collect(),
            b2: ni.iter().map(|&k| vec![0.0; r * k]).collect(),
            g: vec![0.0; r * n],
            dgs: Vec::new(),
            cols: Vec::new(),
            kink: false,
            lines: Vec::new(),
            dx: ni.iter().map(|&k| vec![0.0; r * k]).collect(),
            basis: ins
                .iter()
                .zip(&ni)
                .map(|(s, &k)| match s {
                    State::Varying => (0..r).flat_map(|q| (0..k).map(move |e| (q, e))).collect(),
                    _ => (0..k).map(|e| (0, e)).collect(),
                })
                .collect(),
            d: Vec::with_capacity(r * n),
            want: Vec::with_capacity(r * n),
            ranks: Vec::with_capacity(r),
            hs: Vec::with_capacity(40),
            kept_g: Vec::new(),
            fit: Fit64::default(),
            supp: Vec::with_capacity(r),
        };
        ws.lines = (0..ni.len()).map(|i| ws.line_steps(i)).collect();
        let nb = ws.basis.iter().map(Vec::len).max().unwrap_or(0);
        ws.cols = vec![vec![0.0; r * n]; nb];
        // The cotangent units and their denotations, once per case.
        ws.dgs = (0..ng)
            .map(|k| {
                ws.unit_g(k);
                let mut d = vec![0.0; r * n];
                denote_into(tc, r, n, &ws.g, &mut d);
                d
            })
            .collect();
        ws
    }

    fn unit_g(&mut self, k: usize) {
        let tc = self.out.cot();
        self.g.iter_mut().for_each(|v| *v = 0.0);
        let n = self.n;
        if tc.replicated() {
            for rr in 0..self.r {
                self.g[rr * n + k] = 1.0;
            }
        } else {
            self.g[k] = 1.0;
        }
    }

    fn idx(&self, i: usize, e: usize) -> usize {
        if self.ni[i] == self.n {
            e
        } else {
            0
        }
    }

    /// Forward on ranks `ranks` (all when None) into `y2`, or into `y`.
    fn forward(&mut self, into_y: bool, only: Option<(usize, usize)>) -> Option<()> {
        let (n, r) = (self.n, self.r);
        for rr in 0..r {
            if let Some((a, b)) = only {
                if rr != a && rr != b {
                    continue;
                }
            }
            for e in 0..n {
                for i in 0..self.args.len() {
                    self.args[i] = self.x[i][rr * self.ni[i] + self.idx(i, e)];
                }
                if into_y && self.e.kink(&self.args) {
                    self.kink = true;
                }
                self.count(self.e.f_ops());
                let v = self.e.f(&self.args)?;
                if into_y {
                    self.y[rr * n + e] = v;
                } else {
                    self.y2[rr * n + e] = v;
                }
            }
        }
        Some(())
    }

    /// The flat coordinates of the output's denotation at entry `e` that
    /// read one of `ranks`.
    fn cover<'a>(&self, ranks: &'a [usize], e: usize) -> impl Iterator<Item = usize> + 'a {
        let (r, n, out) = (self.r, self.n, self.out);
        (0..r)
            .filter(move |m| match out {
                State::Varying => ranks.contains(m),
                State::Invariant | State::Reduced => ranks.contains(&0),
                State::Partial => true,
            })
            .map(move |m| m * n + e)
    }

    /// Output entry `e` on `ranks` into `y2`.
    fn forward_entry(&mut self, ranks: &[usize], e: usize) -> Option<()> {
        let n = self.n;
        for &rr in ranks {
            for i in 0..self.args.len() {
                self.args[i] = self.x[i][rr * self.ni[i] + self.idx(i, e)];
            }
            self.count(self.e.f_ops());
            self.y2[rr * n + e] = self.e.f(&self.args)?;
        }
        Some(())
    }

    /// Backward with cotangent `self.g` into `out` (per input).
    fn backward(&mut self, out_b2: bool, k: usize) -> Option<()> {
        let (n, r) = (self.n, self.r);
        for i in 0..self.ni.len() {
            let buf = if out_b2 {
                &mut self.b2[i]
            } else {
                &mut self.bs[k][i]
            };
            buf.iter_mut().for_each(|v| *v = 0.0);
        }
        for rr in 0..r {
            for e in 0..n {
                let g = self.g[rr * n + e];
                if g == 0.0 {
                    continue;
                }
                self.add_shares(out_b2, k, rr, e, g)?;
            }
        }
        Some(())
    }

    /// Output entry `e` of rank `rr`'s shares at cotangent entry `g`, added
    /// into each input's result (`bs[k]`, or `b2` with `out_b2`).
    fn add_shares(&mut self, out_b2: bool, k: usize, rr: usize, e: usize, g: f64) -> Option<()> {
        for i in 0..self.args.len() {
            self.args[i] = self.x[i][rr * self.ni[i] + self.idx(i, e)];
        }
        for i in 0..self.ni.len() {
            self.count(self.e.grad_ops(i) + 2);
            let d = g * self.e.grad(&self.args, i)?;
            let at = rr * self.ni[i] + self.idx(i, e);
            if out_b2 {
                self.b2[i][at] += d;
            } else {
                self.bs[k][i][at] += d;
            }
        }
        Some(())
    }

    /// `backward` at a cotangent `self.g` that is zero off `supp` (rank,
    /// entry), as the exact side's backward at a unit cotangent or kernel
    /// direction writes only where the cotangent is nonzero
    /// (`TypedOp::backward_unit_into_kept`): only those entries are put
    /// back to zero and recomputed. With `out_b2` the shared buffer, which
    /// another cotangent wrote last, is zeroed whole first.
    fn backward_on(&mut self, out_b2: bool, k: usize, supp: &[(usize, usize)]) -> Option<()> {
        let n = self.n;
        if out_b2 {
            for b in &mut self.b2 {
                b.iter_mut().for_each(|v| *v = 0.0);
            }
        }
        for &(rr, e) in supp {
            for i in 0..self.ni.len() {
                let at = rr * self.ni[i] + self.idx(i, e);
                if out_b2 {
                    self.b2[i][at] = 0.0;
                } else {
                    self.bs[k][i][at] = 0.0;
                }
            }
        }
        for &(rr, e) in supp {
            let g = self.g[rr * n + e];
            if g == 0.0 {
                continue;
            }
            self.add_shares(out_b2, k, rr, e, g)?;
        }
        Some(())
    }

    fn line_steps(&self, i: usize) -> Vec<f64> {
        let d = self.deg_num[i] + self.deg_den[i];
        if self.poly {
            return (1..=d).map(f64::from).collect();
        }
        let mut t: Vec<f64> = (1..=d.max(1) + 1).map(f64::from).collect();
        t.extend([0.25, 1.0 / 3.0]);
        t
    }

    /// Whether input i's value-free properties are left out here.
    fn skips(&self, i: usize) -> bool {
        i < 64 && (self.skip >> i) & 1 == 1
    }

    /// Whether this point checks the item at flat index `at` (rank times
    /// numel plus entry) of input `i`, or of the output with `None`: all,
    /// or those of its lane group.
    fn keeps(&self, i: Option<usize>, at: usize) -> bool {
        match (&self.groups, self.lane) {
            (Some(l), Some(a)) => {
                let gs = match i {
                    Some(i) => &l.inputs[i],
                    None => &l.out,
                };
                gs.get(at).is_none_or(|&g| g == a || l.is_core(g))
            }
            _ => true,
        }
    }

    /// One instance; `all`: the backward properties too.
    fn check(&mut self, free: &[f64], all: bool) -> Result<(), Fail> {
        let (r, n) = (self.r, self.n);
        // From free scalars, replicated along I and R.
        let mut at = 0;
        for i in 0..self.ni.len() {
            let k = self.ni[i];
            for rr in 0..r {
                let src = if self.ins[i].replicated() { 0 } else { rr };
                for e in 0..k {
                    self.x[i][rr * k + e] = free[at + src * k + e];
                }
            }
            at += reps(self.ins[i], r) * k;
        }
        self.kink = false;
        if self.forward(true, None).is_none() {
            return Ok(()); // outside the domain
        }
        // F1.
        if self.out.replicated() && (1..r).any(|rr| (0..n).any(|e| self.y[rr * n + e] != self.y[e]))
        {
            return Err(Fail::Forward);
        }
        denote_into(self.out, r, n, &self.y, &mut self.dy);
        self.count(denote_ops(self.out, r, n));
        // F2 along kernel lines.
        for i in 0..self.ni.len() {
            if self.ins[i] != State::Partial || self.skips(i) {
                continue;
            }
            let k = self.ni[i];
            for rr in 1..r {
                for e in 0..k {
                    if !self.keeps(Some(i), rr * k + e) {
                        continue;
                    }
                    for ti in 0..self.lines[i].len() {
                        let t = self.lines[i][ti];
                        // x + t·z on its two entries (putting x back is
                        // bookkeeping, not counted).
                        self.count(2);
                        self.x[i][rr * k + e] += t;
                        self.x[i][e] -= t;
                        self.y2.copy_from_slice(&self.y);
                        let ok = self.forward(false, Some((0, rr)));
                        self.x[i][rr * k + e] -= t;
                        self.x[i][e] += t;
                        if ok.is_none() {
                            continue;
                        }
                        if self.out.replicated()
                            && (1..r).any(|q| (0..n).any(|e| self.y2[q * n + e] != self.y2[e]))
                        {
                            if self.poly {
                                continue;
                            }
                            return Err(Fail::Forward);
                        }
                        denote_into(self.out, r, n, &self.y2, &mut self.den);
                        self.count(denote_ops(self.out, r, n));
                        if !self.den.iter().zip(&self.dy).all(|(a, b)| close(*a, *b)) {
                            return Err(Fail::Forward);
                        }
                    }
                }
            }
        }
        // F3: f on the denotations.
        for i in 0..self.ni.len() {
            denote_into(self.ins[i], r, self.ni[i], &self.x[i], &mut self.dx[i]);
            self.count(denote_ops(self.ins[i], r, self.ni[i]));
        }
        for rr in 0..r {
            for e in 0..n {
                for i in 0..self.args.len() {
                    self.args[i] = self.dx[i][rr * self.ni[i] + self.idx(i, e)];
                }
                self.count(self.e.f_ops());
                match self.e.f(&self.args) {
                    Some(v) if close(v, self.dy[rr * n + e]) => {}
                    Some(_) => return Err(Fail::Forward),
                    None => return Ok(()),
                }
            }
        }
        if !all {
            return Ok(());
        }
        self.backward_props().map_err(|_| Fail::Backward)
    }

    fn backward_props(&mut self) -> Result<(), ()> {
        let (r, n) = (self.r, self.n);
        let tc = self.out.cot();
        let ng = self.dgs.len();
        self.kept_g.clear();
        self.kept_g.resize(ng, true);
        // A P cotangent's units on ranks other than 0 share their
        // denotation with rank 0's.
        let firsts_only = self.reduce_g && tc == State::Partial && r > 1;
        for k in 0..ng {
            self.unit_g(k);
            let at = self.g.iter().position(|v| *v != 0.0).unwrap_or(0);
            self.kept_g[k] = self.keeps(None, at) && !(firsts_only && at >= n);
            if !self.kept_g[k] {
                continue;
            }
            // The unit's support: entry k on every rank, or one entry.
            let mut supp = std::mem::take(&mut self.supp);
            supp.clear();
            if tc.replicated() {
                supp.extend((0..r).map(|rr| (rr, k)));
            } else {
                supp.push((k / n.max(1), k % n.max(1)));
            }
            let done = self.backward_on(false, k, &supp);
            self.supp = supp;
            done.ok_or(())?;
            for i in 0..self.ni.len() {
                let ci = self.ins[i].cot();
                let ki = self.ni[i];
                if !self.skips(i)
                    && ci.replicated()
                    && (1..r)
                        .any(|q| (0..ki).any(|e| self.bs[k][i][q * ki + e] != self.bs[k][i][e]))
                {
                    return Err(()); // B1
                }
                let mut d = std::mem::take(&mut self.dbs[i]);
                denote_into(ci, r, ki, &self.bs[k][i], &mut d);
                self.count(denote_ops(ci, r, ki));
                self.dbs[i] = d;
            }
            // B2, primal half.
            for j in 0..self.ni.len() {
                if self.ins[j] != State::Partial || self.skips(j) || self.b2_implied {
                    continue;
                }
                let kj = self.ni[j];
                for rr in 1..r {
                    for e in 0..kj {
                        if !self.keeps(Some(j), rr * kj + e) {
                            continue;
                        }
                        for ti in 0..self.lines[j].len() {
                            let t = self.lines[j][ti];
                            self.count(2);
                            self.x[j][rr * kj + e] += t;
                            self.x[j][e] -= t;
                            let ok = self.backward(true, 0);
                            self.x[j][rr * kj + e] -= t;
                            self.x[j][e] += t;
                            if ok.is_none() {
                                continue;
                            }
                            for i in 0..self.ni.len() {
                                let ci = self.ins[i].cot();
                                let ki = self.ni[i];
                                self.d.resize(r * ki, 0.0);
                                denote_into(ci, r, ki, &self.b2[i], &mut self.d);
                                self.count(denote_ops(ci, r, ki));
                                if !self.d.iter().zip(&self.dbs[i]).all(|(a, b)| close(*a, *b)) {
                                    return Err(());
                                }
                            }
                        }
                    }
                }
            }
        }
        // B2, cotangent half: g in the kernel of the output cotangent type.
        if tc == State::Partial {
            for rr in 1..r {
                for e in 0..n {
                    if !self.keeps(None, rr * n + e) {
                        continue;
                    }
                    self.g.iter_mut().for_each(|v| *v = 0.0);
                    self.g[rr * n + e] = 1.0;
                    self.g[e] = -1.0;
                    self.backward_on(true, 0, &[(0, e), (rr, e)]).ok_or(())?;
                    for i in 0..self.ni.len() {
                        if self.skips(i) {
                            continue;
                        }
                        let ki = self.ni[i];
                        if firsts_only
                            && self.ins[i].cot().replicated()
                            && (1..r)
                                .any(|q| (0..ki).any(|e| self.b2[i][q * ki + e] != self.b2[i][e]))
                        {
                            return Err(()); // B1
                        }
                        self.d.resize(r * ki, 0.0);
                        denote_into(self.ins[i].cot(), r, ki, &self.b2[i], &mut self.d);
                        self.count(denote_ops(self.ins[i].cot(), r, ki));
                        if self.d.iter().any(|v| !close(*v, 0.0)) {
                            return Err(());
                        }
                    }
                }
            }
        }
        if self.kink {
            return Ok(());
        }
        // B3: columns by finite differences, then pairings with each unit g.
        for i in 0..self.ni.len() {
            if self.skips(i) {
                continue;
            }
            let s = self.ins[i];
            let ki = self.ni[i];
            for b in 0..self.basis[i].len() {
                let (q, e) = self.basis[i][b];
                if self.keeps(Some(i), q * ki + e) {
                    self.directional(i, q, e, b).ok_or(())?;
                }
            }
            let rep = if self.out.replicated() || self.out == State::Partial {
                r as f64
            } else {
                1.0
            };
            let ci = s.cot();
            for k in 0..ng {
                if !self.kept_g[k] {
                    continue;
                }
                self.want.clear();
                self.want.resize(r * ki, 0.0);
                for (b, &(q, e)) in self.basis[i].iter().enumerate() {
                    if !self.keeps(Some(i), q * ki + e) {
                        continue;
                    }
                    let v: f64 = self.cols[b]
                        .iter()
                        .zip(&self.dgs[k])
                        .map(|(a, g)| a * g)
                        .sum::<f64>()
                        / rep;
                    // A multiply-add per coordinate and the division.
                    if COUNT {
                        self.arith += 2 * self.cols[b].len() as u64 + 1;
                    }
                    for rr in 0..r {
                        let home = if s == State::Varying { rr } else { 0 };
                        if home == q {
                            self.want[rr * ki + e] = v;
                        }
                    }
                }
                self.d.resize(r * ki, 0.0);
                denote_into(ci, r, ki, &self.bs[k][i], &mut self.d);
                self.count(denote_ops(ci, r, ki));
                // Only the lane's coordinates were sampled; the others pair
                // to 0 with a unit of this lane, as at the point 0.
                let lane = self.lane.is_some();
                let ok = (0..r * ki).all(|t| {
                    let (a, b) = (self.d[t], self.want[t]);
                    (lane && !self.keeps(Some(i), t)) || close(a, b)
                });
                if !ok {
                    return Err(());
                }
            }
        }
        Ok(())
    }

    /// d/dh of the output's denotation moving input i along the unit at
    /// (rank q, element e), replicated along I and R, into column `b`.
    fn directional(&mut self, i: usize, q: usize, e: usize, b: usize) -> Option<()> {
        let mut ranks = std::mem::take(&mut self.ranks);
        let mut hs = std::mem::take(&mut self.hs);
        let mut out = std::mem::take(&mut self.cols[b]);
        let r = self.directional_into(i, q, e, &mut ranks, &mut hs, &mut out);
        self.ranks = ranks;
        self.hs = hs;
        self.cols[b] = out;
        r
    }

    #[allow(clippy::needless_range_loop)]
    fn directional_into(
        &mut self,
        i: usize,
        q: usize,
        e: usize,
        ranks: &mut Vec<usize>,
        hs: &mut Vec<f64>,
        out: &mut Vec<f64>,
    ) -> Option<()> {
        let (r, n) = (self.r, self.n);
        let ki = self.ni[i];
        ranks.clear();
        if self.ins[i].replicated() {
            ranks.extend(0..r);
        } else {
            ranks.push(q);
        }
        let need = match &self.weights[i] {
            Some((w, _)) => w.len() + 1,
            None => (self.deg_num[i] + self.deg_den[i] + 2) as usize,
        };
        hs.clear();
        let mut kk = 0;
        while hs.len() < need {
            if kk > 4 * need + 8 {
                return None;
            }
            let h = kk as f64 * self.step;
            self.count(1 + ranks.len());
            for &rr in ranks.iter() {
                self.x[i][rr * ki + e] += h;
            }
            self.y2.copy_from_slice(&self.y);
            let only = if ranks.len() == 1 {
                Some((ranks[0], ranks[0]))
            } else {
                None
            };
            // As the exact side does (SPEC.md §18.8): an input with the
            // output's entries moves only output entry e on its ranks.
            let ok = if ki == n {
                self.forward_entry(ranks, e)
            } else {
                self.forward(false, only)
            };
            for &rr in ranks.iter() {
                self.x[i][rr * ki + e] -= h;
            }
            kk += 1;
            if ok.is_none() {
                if self.weights[i].is_some() || kk == 1 {
                    return None;
                }
                continue;
            }
            let at = hs.len();
            if ki == n && self.weights[i].is_some() {
                // As the exact side (SPEC.md §18.8): only the denotation's
                // entries e that read a moved rank can change.
                let covered = self.cover(ranks, e).count();
                if self.out == State::Partial {
                    self.count(covered * (r - 1));
                }
                let cov = self.cover(ranks, e);
                for (j, c) in cov.enumerate() {
                    let m = c / n;
                    self.samples[at][j] = match self.out {
                        State::Varying => self.y2[m * n + e],
                        State::Invariant | State::Reduced => self.y2[e],
                        State::Partial => (0..r).map(|rr| self.y2[rr * n + e]).sum(),
                    };
                }
            } else {
                denote_into(self.out, r, n, &self.y2, &mut self.samples[at]);
                self.count(denote_ops(self.out, r, n));
            }
            hs.push(h);
        }
        out.clear();
        out.resize(r * n, 0.0);
        // Sample column j's derivative by the weights, `None` where its
        // check sample disagrees.
        let interpolate = |w: &[f64], c: &[f64], j: usize| -> Option<f64> {
            let m = w.len();
            let (mut d, mut p) = (0.0, 0.0);
            for s in 0..m {
                d += w[s] * self.samples[s][j];
                p += c[s] * self.samples[s][j];
            }
            close(p, self.samples[m][j]).then_some(d)
        };
        // Two multiply-adds per weight and coordinate.
        let mut fit_ops = 0;
        if let (true, Some((w, c))) = (ki == n, &self.weights[i]) {
            for (j, cc) in self.cover(ranks, e).enumerate() {
                out[cc] = interpolate(w, c, j)?;
                fit_ops += 4 * w.len();
            }
            self.count(fit_ops);
            return Some(());
        }
        match &self.weights[i] {
            Some((w, c)) => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = interpolate(w, c, j)?;
                    fit_ops += 4 * w.len();
                }
            }
            None => {
                let (a, b) = (self.deg_num[i] as usize, self.deg_den[i] as usize);
                let fit = need - 1;
                let cols = a + 1 + b;
                let mut f = std::mem::take(&mut self.fit);
                for (j, o) in out.iter_mut().enumerate() {
                    // As the exact fit does (oracle/src/fd.rs): a constant
                    // coordinate has derivative 0 without elimination.
                    let y0 = self.samples[0][j];
                    if (1..need).all(|s| self.samples[s][j] == y0) {
                        *o = 0.0;
                        continue;
                    }
                    f.a.clear();
                    f.a.resize(fit * cols, 0.0);
                    f.rhs.clear();
                    f.rhs.resize(fit, 0.0);
                    for s in 0..fit {
                        let (h, y) = (hs[s], self.samples[s][j]);
                        for k in 0..=a {
                            f.a[s * cols + k] = h.powi(k as i32);
                        }
                        for k in 1..=b {
                            f.a[s * cols + a + k] = -h.powi(k as i32) * y;
                        }
                        f.rhs[s] = y;
                    }
                    if !solve64(&mut f, fit, cols, &mut fit_ops) {
                        self.fit = f;
                        return None;
                    }
                    let z = &f.z;
                    let h = hs[fit];
                    let ph: f64 = (0..=a).map(|k| z[k] * h.powi(k as i32)).sum();
                    let qh: f64 = 1.0 + (1..=b).map(|k| z[a + k] * h.powi(k as i32)).sum::<f64>();
                    if !close(ph, self.samples[fit][j] * qh) {
                        self.fit = f;
                        return None;
                    }
                    let p1 = if a >= 1 { z[1] } else { 0.0 };
                    let q1 = if b >= 1 { z[a + 1] } else { 0.0 };
                    *o = p1 - z[0] * q1;
                    // The matrix's powers and products, the check at the
                    // last step, and the derivative.
                    fit_ops += fit * (a + 2 * b) + 2 * (a + b) + 3;
                }
                self.fit = f;
            }
        }
        self.count(fit_ops);
        Some(())
    }
}

/// The arithmetic of `denote_into`: a sum over ranks per entry of a Partial
/// value.
fn denote_ops(s: State, r: usize, k: usize) -> usize {
    if s == State::Partial {
        k * r.saturating_sub(1)
    } else {
        0
    }
}

/// The denotation of one-axis per-rank data of state `s` as a full-rank
/// family (SPEC.md §2.4), into `out`.
fn denote_into(s: State, r: usize, k: usize, x: &[f64], out: &mut [f64]) {
    match s {
        State::Varying => out.copy_from_slice(&x[..r * k]),
        State::Invariant | State::Reduced => {
            for rr in 0..r {
                out[rr * k..(rr + 1) * k].copy_from_slice(&x[..k]);
            }
        }
        State::Partial => {
            for e in 0..k {
                let v: f64 = (0..r).map(|rr| x[rr * k + e]).sum();
                for rr in 0..r {
                    out[rr * k + e] = v;
                }
            }
        }
    }
}

/// The buffers of one rational fit (`solve64`), kept per case: the
/// matrix row after row, the right-hand side, the solution and the pivot
/// columns.
#[derive(Default)]
struct Fit64 {
    a: Vec<f64>,
    rhs: Vec<f64>,
    z: Vec<f64>,
    piv: Vec<usize>,
}

/// Gaussian elimination with partial pivoting on `f.a` (`rows` × `cols`)
/// and `f.rhs`, the solution into `f.z`; free variables 0; false when
/// inconsistent.
#[allow(clippy::needless_range_loop)]
fn solve64(f: &mut Fit64, rows: usize, cols: usize, ops: &mut usize) -> bool {
    let Fit64 { a, rhs, z, piv } = f;
    piv.clear();
    let mut r = 0;
    for c in 0..cols {
        let Some(p) = (r..rows)
            .filter(|&i| a[i * cols + c].abs() > 1e-12)
            .max_by(|&i, &j| a[i * cols + c].abs().total_cmp(&a[j * cols + c].abs()))
        else {
            continue;
        };
        if p != r {
            for k in 0..cols {
                a.swap(r * cols + k, p * cols + k);
            }
        }
        rhs.swap(r, p);
        let inv = 1.0 / a[r * cols + c];
        for k in c..cols {
            a[r * cols + k] *= inv;
        }
        rhs[r] *= inv;
        *ops += 2 + cols - c;
        for i in 0..rows {
            if i != r && a[i * cols + c] != 0.0 {
                let f = a[i * cols + c];
                for k in c..cols {
                    a[i * cols + k] -= f * a[r * cols + k];
                }
                rhs[i] -= f * rhs[r];
                *ops += 2 * (cols - c + 1);
            }
        }
        piv.push(c);
        r += 1;
        if r == rows {
            break;
        }
    }
    if (r..rows).any(|i| rhs[i].abs() > 1e-9) {
        return false;
    }
    z.clear();
    z.resize(cols, 0.0);
    for (i, &c) in piv.iter().enumerate() {
        z[c] = rhs[i];
    }
    true
}

/// Nanoseconds per arithmetic operation of a plain loop of multiply-adds
/// over f64 data in cache: with `sums` = 1 one running sum, the operations
/// one after another as a scalar program does them; with 4, four sums at
/// a time, which the compiler turns into vector instructions. The fastest
/// of 5 runs.
pub(super) fn arith_ns(sums: usize) -> f64 {
    const N: usize = 4096;
    const REPS: usize = 2000;
    let a: Vec<f64> = (0..N).map(|k| 1.0 + k as f64 * 1e-6).collect();
    let b: Vec<f64> = (0..N).map(|k| 1.0 - k as f64 * 1e-6).collect();
    fastest_ns_per_op(2 * N * REPS, || {
        let mut acc = [0.0f64; 4];
        for _ in 0..REPS {
            let (a, b) = (std::hint::black_box(&a), std::hint::black_box(&b));
            if sums == 1 {
                for (x, y) in a.iter().zip(b) {
                    acc[0] += x * y;
                }
            } else {
                for (x, y) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
                    for j in 0..4 {
                        acc[j] += x[j] * y[j];
                    }
                }
            }
        }
        std::hint::black_box(acc);
    })
}

/// Nanoseconds per operation of `run`, which performs `ops` operations:
/// the fastest of 5 runs.
fn fastest_ns_per_op(ops: usize, mut run: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        run();
        best = best.min(t.elapsed().as_secs_f64() * 1e9 / ops as f64);
    }
    best
}

/// The operands of `rational_ns`'s loop: integers, dyadic values (an
/// integer moved by a step of a piecewise op, k/65536, SPEC.md §5.3), and
/// fractions of small denominators (quotients of small values, as `div`'s).
#[derive(Clone, Copy, Debug)]
pub(super) enum Operands {
    Integers,
    Dyadic,
    Fractions,
}

impl Operands {
    fn pair(self, k: usize) -> (Q, Q) {
        let (i, j) = ((k % 7) as i64 - 3, (k % 5) as i64 - 2);
        match self {
            Operands::Integers => (Q::int(i), Q::int(j)),
            Operands::Dyadic => (
                Q::int(i).add(&Q::frac((k % 3) as i64 + 1, 65536)),
                Q::int(j).add(&Q::frac((k % 2) as i64 + 1, 65536)),
            ),
            Operands::Fractions => (
                Q::frac(i, (k % 4) as i64 + 1),
                Q::frac(j, (k % 3) as i64 + 1),
            ),
        }
    }
}

/// `arith_ns(1)`'s loop in the exact field: the time per operation of a
/// rational multiply-add into one running sum (`Q::add_mul`), on operands
/// of one kind. What exact arithmetic itself costs, before any algorithm.
pub(super) fn rational_ns(kind: Operands) -> f64 {
    const N: usize = 4096;
    const REPS: usize = 50;
    let (a, b): (Vec<Q>, Vec<Q>) = (0..N).map(|k| kind.pair(k)).unzip();
    fastest_ns_per_op(2 * N * REPS, || {
        for _ in 0..REPS {
            let (a, b) = (std::hint::black_box(&a), std::hint::black_box(&b));
            // A fresh sum per pass, so its numerator stays small.
            let mut acc = Q::zero();
            for (x, y) in a.iter().zip(b) {
                acc.add_mul(x, y);
            }
            std::hint::black_box(acc);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::derive_instances;
    use super::*;
    use crate::derive::derive;

    /// The floor is the same algorithm: on `derive mul` it must find the
    /// same typings failing as the exact derive (in f64, on a grid where
    /// every value is exact).
    #[test]
    fn the_floor_fails_the_same_typings_as_the_exact_derive() {
        let sc = Scope {
            meshes: vec![Mesh::line(1), Mesh::line(2)],
            max_rank: 1,
            max_dim: 2,
            ..Scope::default()
        };
        let f = builtin("mul").unwrap();
        let exact = derive(&f, &sc, &|_| {}).unwrap();
        let failing = exact
            .iter()
            .filter(|r| r.verdict.violation().is_some())
            .count();
        let fl = floor_derive::<false>("mul", Elem::Mul, &sc);
        assert_eq!(fl.failing as usize, failing);
    }

    /// The ratio divides each side's time by its own instance count, so
    /// the two must count the same work alike: on the default scope, the
    /// floor's count is the sum of the exact derive's rows.
    #[test]
    fn the_floor_counts_instances_as_the_exact_derive() {
        let sc = Scope::default();
        for (name, e) in [("relu", Elem::Relu), ("mul", Elem::Mul), ("div", Elem::Div)] {
            let fl = floor_derive::<false>(name, e, &sc);
            assert_eq!(fl.instances, derive_instances(name, &sc), "{name}");
        }
    }

    /// The counting build runs the same algorithm: the same instances and
    /// failing typings, and no count without it. Every instance of mul
    /// forms at least its products (one per output entry), so the count is
    /// at least the instances.
    #[test]
    fn the_counting_floor_runs_the_same_instances() {
        let sc = Scope::default();
        for (name, e) in [("mul", Elem::Mul), ("div", Elem::Div)] {
            let plain = floor_derive::<false>(name, e, &sc);
            let counted = floor_derive::<true>(name, e, &sc);
            assert_eq!(plain.instances, counted.instances, "{name}");
            assert_eq!(plain.failing, counted.failing, "{name}");
            assert_eq!(plain.arith, 0, "{name}");
            assert!(counted.arith >= counted.instances, "{name}");
        }
    }
}
