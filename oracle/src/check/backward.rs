//! The backward properties of one instance, B1–B3 (SPEC.md §4.5–4.7),
//! and J1 (§4.8), which they check too and which alone is checked for ops
//! without a backward. All compare against exact finite-difference
//! columns: the forward differenced along each basis direction of an input
//! (§5), by polynomial interpolation where the op's degree allows, and for
//! an entrywise direction only over the output entries it moves (§18.8).

use super::{
    alternative, denote_all, hand_written_backward, show_per_rank, shown, Checker, ColBufs, Direct,
    FdBufs, Sparse, Stop, Work, MAX_ARGS,
};
use crate::fd::{derivative_into, FdFail, PolyWeights};
use crate::outcome::{show_denot, Pass, Phase};
use spmd_interp::{EvalError, Op};
use spmd_semantics::perrank::{self, denote, pair_denots, Denot};
use spmd_semantics::{Mesh, PerRank, Property, Tensor, Type, Q};

impl Checker<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward_props(
        &self,
        xs: &[PerRank],
        xs2: &mut [PerRank],
        y: &PerRank,
        yw: &mut Work,
        dy: &Denot,
        at_kink: bool,
        fd: &mut FdBufs,
        phase: Phase,
    ) -> Result<Pass, Stop> {
        let FdBufs {
            y0,
            cols,
            col,
            dbs,
            bws,
            bws_kept,
            spare,
            b2s,
            bks,
            bks_kept,
            ..
        } = fd;
        flat_into(dy, y0);
        let m = self.m;
        let op = self.op;
        let tc = &self.cot_out;
        let gs = &self.gs;
        let cot_in = &self.cot_in;
        if let Some(why) = &self.bwd_shape_err {
            return Err(self.fail(
                Property::B1,
                format!("the backward does not fit the cotangent: {why}"),
                self.inputs_shown(xs),
                format!("a cotangent of {}'s shape {:?}", self.nm(0), self.shapes[0]),
                "no well-formed result".into(),
            ));
        }
        // B1 and the primal half of B2, per cotangent basis direction.
        if bws.len() < gs.len() {
            bws.resize_with(gs.len(), Vec::new);
            bws_kept.resize(gs.len(), false);
        }
        let probe_linearity = hand_written_backward(op);
        for (gi, ((g, bs), kept)) in gs
            .iter()
            .zip(bws.iter_mut())
            .zip(bws_kept.iter_mut())
            .enumerate()
        {
            if !self.keeps(phase, |l| l.gs[gi]) || !self.runs_g(gi) {
                continue;
            }
            let supp = self.supps.as_ref().map(|s| &s.gs[gi][..]);
            self.backward_unit(xs, yw, g, supp, bs, spare, kept)?;
            let bs: &[PerRank] = bs;
            if probe_linearity {
                self.linear_in_g(xs, yw, g, bs)?;
            }
            for (i, b) in bs.iter().enumerate() {
                if op.no_grad.contains(&i) || phase.skips(i) {
                    continue; // no gradient flows to it (SPEC.md §4.5)
                }
                self.b1(xs, g, i, b)?;
            }
            // Only the primal half of B2 reads these: none without kernel
            // directions.
            if self.b2_implied {
                continue;
            }
            if !self.kernel_nz.iter().all(Vec::is_empty) {
                denote_all(&self.proj_cot_in, bs, dbs);
            }
            for (j, tj) in op.inputs.iter().enumerate() {
                if phase.skips(j) {
                    continue;
                }
                for (k, zs) in self.kernel_nz[j].iter().enumerate() {
                    if !self.keeps(phase, |l| l.kernel[j][k]) {
                        continue;
                    }
                    for t in &self.steps[j] {
                        zs.set(&mut xs2[j], &xs[j], t);
                        match self.backward_near(xs2, j, &zs.touched, yw, g, b2s, spare) {
                            Ok(()) => {}
                            Err(EvalError::DivByZero) => continue,
                            Err(e) => return Err(e.into()),
                        };
                        let bs2: &[PerRank] = b2s;
                        for (i, b2) in bs2.iter().enumerate() {
                            if op.no_grad.contains(&i) {
                                continue;
                            }
                            if perrank::well_formed(m, &cot_in[i], b2).is_err()
                                || !self.proj_cot_in[i].matches(b2, &dbs[i])
                            {
                                let mut s = self.inputs_shown(xs);
                                s.push(alternative(format!("{}'", self.nm(j)), tj, &xs2[j]));
                                s.push(shown("g", tc, g));
                                s.push(shown(format!("d{}", self.nm(i)), &cot_in[i], &bs[i]));
                                s.push(shown(format!("d{}'", self.nm(i)), &cot_in[i], b2));
                                return Err(self.fail(
                                    Property::B2,
                                    format!("{0} and {0}' are equivalent but the backward's cotangents for {1} are not", self.nm(j), self.nm(i)),
                                    s,
                                    show_denot(m, &cot_in[i], &dbs[i]),
                                    show_denot(m, &cot_in[i], &denote(m, &cot_in[i], b2)),
                                ));
                            }
                        }
                    }
                    zs.reset(&mut xs2[j], &xs[j]);
                }
            }
        }
        let results = &bws[..gs.len()];
        // The cotangent half of B2: a cotangent that denotes zero gives
        // results that denote zero (the backward is linear in g).
        // A pointwise op keeps each direction's result, as `bws` keeps the
        // units'; any other op writes them all into one buffer.
        let own = self.writes_supports(yw);
        if own && bks.len() < self.g_kernel.len() {
            bks.resize_with(self.g_kernel.len(), Vec::new);
            bks_kept.resize(self.g_kernel.len(), false);
        }
        for (k, z) in self.g_kernel.iter().enumerate() {
            if !self.keeps(phase, |l| l.g_kernel[k]) {
                continue;
            }
            let bk = if own {
                let supp = self.supps.as_ref().map(|s| &s.g_kernel[k][..]);
                self.backward_unit(xs, yw, z, supp, &mut bks[k], spare, &mut bks_kept[k])?;
                &bks[k]
            } else {
                self.backward_here_into(xs, yw, z, b2s, spare, &mut false)?;
                &*b2s
            };
            for (i, b) in bk.iter().enumerate() {
                if op.no_grad.contains(&i) || phase.skips(i) {
                    continue;
                }
                // With B1 run at one unit cotangent per denotation, the
                // others' B1 rests on this one's (`reduced_cotangents`).
                if self.g_reduced {
                    self.b1(xs, z, i, b)?;
                }
                if !self.proj_cot_in[i].denotes_zero(b) {
                    let d = self.proj_cot_in[i].denote(b);
                    let mut s = self.inputs_shown(xs);
                    s.push(shown("g", tc, z));
                    s.push(shown(format!("d{}", self.nm(i)), &cot_in[i], b));
                    return Err(self.fail(
                        Property::B2,
                        "the cotangent g denotes zero but the backward's result does not".into(),
                        s,
                        "0".into(),
                        show_denot(m, &cot_in[i], &d),
                    ));
                }
            }
        }
        if at_kink {
            return Ok(Pass {
                b3_undetermined: true,
                ..Pass::default()
            });
        }
        // B3: ⟦backward(x, g)⟧ = Df̄(⟦x⟧)ᵀ ⟦g⟧, with Df̄ from finite differences.
        for (i, ti) in op.inputs.iter().enumerate() {
            if (op.no_grad.contains(&i) && !op.has_jvp()) || phase.skips(i) {
                continue;
            }
            let basis = &self.bases[i];
            // Under `Phase::Lane` only the columns of the lane's
            // coordinates are sampled; a disagreement below samples the
            // rest before it is reported, as the full check would.
            let mut all_cols = !matches!(phase, Phase::Lane(_)) || self.lane_of.is_none();
            if !self.columns_flat(xs2, xs, y, yw, y0, i, cols, col, phase) {
                return Ok(Pass {
                    b3_undetermined: true,
                    ..Pass::default()
                });
            }
            if op.has_jvp() {
                let dcols: Vec<Denot> =
                    cols[..basis.len()].iter().map(|c| self.unflat(c)).collect();
                self.j1(xs, i, &dcols)?;
            }
            if op.no_grad.contains(&i) {
                continue;
            }
            // Entrywise: the Jacobian entry ⟨column b, ⟦g_k⟧⟩ against entry
            // b of the backward's denotation, a short sum per entry since
            // ⟦g_k⟧ is a unit vector's denotation (SPEC.md §18).
            // Only the basis coordinates of the result's denotation are
            // read, each as its own sum (`Projection::entry`); a missing
            // entry disagrees, and the full comparison below decides.
            let proj = &self.proj_cot_in[i];
            for (gi, (((g, dg), bs), supp)) in gs
                .iter()
                .zip(self.dgs.iter())
                .zip(results)
                .zip(self.dg_supp.iter())
                .enumerate()
            {
                if !self.keeps(phase, |l| l.gs[gi]) || !self.runs_g(gi) {
                    continue;
                }
                let agrees = basis.iter().zip(&cols[..basis.len()]).enumerate().all(
                    |(k, ((coord, _), col))| {
                        if !self.keeps(phase, |l| l.basis[i][k]) {
                            return true;
                        }
                        let Some(got) = proj.entry(&bs[i], coord.rank, coord.elem) else {
                            return false;
                        };
                        match &supp[..] {
                            // A unit cotangent that denotes a unit vector: the
                            // pairing is the column's entry itself.
                            [(k, w)] if w.is_one() => got == col[*k],
                            _ => {
                                let mut v = Q::zero();
                                for (k, w) in supp {
                                    v.add_mul(&col[*k], w);
                                }
                                got == v
                            }
                        }
                    },
                );
                if agrees {
                    continue;
                }
                if !all_cols {
                    if !self.columns_flat(xs2, xs, y, yw, y0, i, cols, col, Phase::All) {
                        return Ok(Pass {
                            b3_undetermined: true,
                            ..Pass::default()
                        });
                    }
                    all_cols = true;
                }
                let dcols: Vec<Denot> =
                    cols[..basis.len()].iter().map(|c| self.unflat(c)).collect();
                let vals: Vec<Q> = dcols
                    .iter()
                    .map(|c| pair_denots(m, &op.output, c, dg))
                    .collect();
                let want = expand_denot(m, ti, &self.shapes[i], basis, &vals);
                if !self.proj_cot_in[i].matches(&bs[i], &want) {
                    let got = self.proj_cot_in[i].denote(&bs[i]);
                    let mut s = self.inputs_shown(xs);
                    s.push(shown("g", tc, g));
                    s.push(shown(format!("d{}", self.nm(i)), &cot_in[i], &bs[i]));
                    return Err(self.fail(
                        Property::B3,
                        format!(
                            "the backward's cotangent for {} is not the gradient",
                            self.nm(i)
                        ),
                        s,
                        show_denot(m, &cot_in[i], &want),
                        show_denot(m, &cot_in[i], &got),
                    ));
                }
            }
        }
        Ok(Pass::default())
    }

    /// B1 (SPEC.md §4.5): the backward's result `b` for input i at
    /// cotangent `g` is a well-formed value of the input's cotangent type
    /// and shape.
    fn b1(&self, xs: &[PerRank], g: &PerRank, i: usize, b: &PerRank) -> Result<(), Stop> {
        let (m, ci) = (self.m, &self.cot_in[i]);
        let Some(why) = misfit(m, ci, b, &self.shapes[i], "input") else {
            return Ok(());
        };
        let mut s = self.inputs_shown(xs);
        s.push(shown("g", &self.cot_out, g));
        s.push(shown(format!("d{}", self.nm(i)), ci, b));
        Err(self.fail(
            Property::B1,
            format!("the backward's cotangent for {} {why}", self.nm(i)),
            s,
            format!("a well-formed value of type {}", ci.display(m)),
            show_per_rank(b),
        ))
    }

    /// A hand-written backward must be linear in g: B3 compares it at unit
    /// cotangents only (SPEC.md §4.7), where `g * g` or `relu(g)` equal `g`.
    /// So it must give −b at −g and 2b at 2g, exactly.
    fn linear_in_g(
        &self,
        xs: &[PerRank],
        yw: &Work,
        g: &PerRank,
        bs: &[PerRank],
    ) -> Result<(), Stop> {
        let op = self.op;
        for c in [Q::int(-1), Q::int(2)] {
            let gc = g.scale(&c);
            let bc = match self.backward_here(xs, yw, &gc) {
                Ok(b) => b,
                Err(EvalError::DivByZero) => continue,
                Err(e) => return Err(e.into()),
            };
            for (i, (b, b2)) in bs.iter().zip(&bc).enumerate() {
                if op.no_grad.contains(&i) || b2.tensors == b.scale(&c).tensors {
                    continue;
                }
                let tc = op.output.cot();
                let mut s = self.inputs_shown(xs);
                s.push(shown("g", &tc, g));
                s.push(shown(format!("d{}", self.nm(i)), &self.cot_in[i], b));
                s.push(shown("g'", &tc, &gc));
                return Err(self.fail(
                    Property::B3,
                    format!(
                        "the backward is not linear in g: at g' = {c}·g its cotangent for {} is not {c} times the one at g",
                        self.nm(i)
                    ),
                    s,
                    show_per_rank(&b.scale(&c)),
                    show_per_rank(b2),
                ));
            }
        }
        Ok(())
    }

    /// F1-F3 passed; J1 alone (SPEC.md §4.8), for ops checked without a
    /// backward.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tangent_props(
        &self,
        xs: &[PerRank],
        xs2: &mut [PerRank],
        y: &PerRank,
        yw: &mut Work,
        dy: &Denot,
        at_kink: bool,
        fd: &mut FdBufs,
    ) -> Result<Pass, Stop> {
        if !self.op.has_jvp() {
            return Ok(Pass::default());
        }
        if at_kink {
            return Ok(Pass {
                b3_undetermined: true,
                ..Pass::default()
            });
        }
        let FdBufs { y0, cols, col, .. } = fd;
        flat_into(dy, y0);
        for i in 0..self.op.inputs.len() {
            if !self.columns_flat(xs2, xs, y, yw, y0, i, cols, col, Phase::All) {
                return Ok(Pass {
                    b3_undetermined: true,
                    ..Pass::default()
                });
            }
            let dcols: Vec<Denot> = cols[..self.basis_nz[i].len()]
                .iter()
                .map(|c| self.unflat(c))
                .collect();
            self.j1(xs, i, &dcols)?;
        }
        Ok(Pass::default())
    }

    /// Column k: the derivative of ⟦f⟧ along the k-th unit of ⟦x_i⟧, from
    /// finite differences, flat (family member after member). `work`
    /// equals `xs` before and after. The columns are written to the first
    /// entries of `cols`; `false` where one cannot be determined (the rest
    /// are then unspecified). Under `Phase::Lane` only the columns of the
    /// lane's and the cores' coordinates are sampled; the others keep what
    /// they held.
    #[allow(clippy::too_many_arguments)]
    fn columns_flat(
        &self,
        work: &mut [PerRank],
        xs: &[PerRank],
        y: &PerRank,
        yw: &mut Work,
        y0: &[Q],
        i: usize,
        cols: &mut Vec<Vec<Q>>,
        cb: &mut ColBufs,
        phase: Phase,
    ) -> bool {
        let nb = self.basis_nz[i].len();
        if cols.len() < nb {
            cols.resize_with(nb, Vec::new);
        }
        for (k, (e, col)) in self.basis_nz[i].iter().zip(cols.iter_mut()).enumerate() {
            if !self.keeps(phase, |l| l.basis[i][k]) {
                continue;
            }
            if self
                .directional_flat(work, xs, y, yw, y0, i, e, col, cb)
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// J1 (SPEC.md §4.8): along every basis tangent of input i, the JVP's
    /// tangent is a well-formed value of the output type (tangent type =
    /// primal type) and denotes the derivative.
    fn j1(&self, xs: &[PerRank], i: usize, cols: &[Denot]) -> Result<(), Stop> {
        let (m, op) = (self.m, self.op);
        let ti = &op.inputs[i];
        if let Some(why) = &self.jvp_shape_err {
            return Err(self.fail(
                Property::J1,
                format!("the JVP does not fit the shapes: {why}"),
                self.inputs_shown(xs),
                format!("a tangent of the output's shape {:?}", self.out_shape),
                "no tangent".into(),
            ));
        }
        for ((_, e), col) in self.bases[i].iter().zip(cols) {
            let t = op.tangent(m, xs, i, e)?;
            let bad = misfit(m, &op.output, &t, &self.out_shape, "output");
            if let Some(why) = bad {
                let mut s = self.inputs_shown(xs);
                s.push(shown(format!("d{}", self.nm(i)), ti, e));
                s.push(shown("dy", &op.output, &t));
                return Err(self.fail(
                    Property::J1,
                    format!("the JVP's tangent {why}"),
                    s,
                    format!("a well-formed value of type {}", op.output.display(m)),
                    t.tensors
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(" | "),
                ));
            }
            if !self.proj_out.matches(&t, col) {
                let mut s = self.inputs_shown(xs);
                s.push(shown(format!("d{}", self.nm(i)), ti, e));
                s.push(shown("dy", &op.output, &t));
                return Err(self.fail(
                    Property::J1,
                    format!(
                        "the JVP's tangent along d{} is not the derivative",
                        self.nm(i)
                    ),
                    s,
                    show_denot(m, &op.output, col),
                    show_denot(m, &op.output, &self.den_out(&t)),
                ));
            }
        }
        Ok(())
    }

    /// d/dh ⟦f(x + h e)⟧ at h = 0, moving input `i` along `e` (SPEC.md
    /// §5.1), flat. The samples perturb `work` in place; it is reset before
    /// returning.
    #[allow(clippy::too_many_arguments)]
    fn directional_flat(
        &self,
        work: &mut [PerRank],
        xs: &[PerRank],
        y: &PerRank,
        yw: &mut Work,
        y0: &[Q],
        i: usize,
        e: &Sparse,
        out: &mut Vec<Q>,
        cb: &mut ColBufs,
    ) -> Result<(), FdFail> {
        let ColBufs {
            p,
            ys,
            fit,
            covered,
            direct,
        } = cb;
        // Samples computed off the workspace leave it as it was.
        let untouched = e.cover.is_some() && self.samples_direct(i, yw);
        if let Some(w) = &self.weights[i] {
            let r = self.poly_directional(work, xs, y, yw, y0, i, e, w, out, p, ys, direct);
            if !untouched {
                e.reset(&mut work[i], &xs[i]);
            }
            return match r? {
                true => Ok(()),
                false => Err(FdFail::Undetermined(
                    "a polynomial map left its domain (interpreter bug)".into(),
                )),
            };
        }
        if let Some(w) = &self.line_weights[i] {
            let r = self.poly_directional(work, xs, y, yw, y0, i, e, w, out, p, ys, direct);
            if !untouched {
                e.reset(&mut work[i], &xs[i]);
            }
            // A sample outside the domain: the general fit below passes
            // over it.
            if !matches!(r, Ok(false)) {
                return r.map(|_| ());
            }
        }
        // On an entrywise direction only the covered coordinates can move
        // (SPEC.md §18.8): the others' samples are all equal, which the fit
        // answers with 0 and no failure, so they are neither denoted nor
        // fitted.
        let cover = e.cover.as_deref();
        let n_out = y0.len() / self.m.num_ranks().max(1);
        let off_work = untouched;
        let mut f = |h: &Q, dst: &mut Vec<Q>| -> Result<bool, FdFail> {
            dst.clear();
            if h.is_zero() {
                match cover {
                    Some(cover) => dst.extend(cover.iter().map(|&c| y0[c].clone())),
                    None => dst.extend_from_slice(y0),
                }
                return Ok(true);
            }
            if let (Some(cover), true) = (cover, off_work) {
                return match self.sample_direct(xs, i, e, h, direct) {
                    Ok(true) => Err(FdFail::Undetermined("a sample meets a kink".into())),
                    Ok(false) => {
                        let vals = &direct.vals;
                        dst.extend(cover.iter().map(|&c| self.covered_at(y, e, vals, c, n_out)));
                        Ok(true)
                    }
                    Err(EvalError::DivByZero) => Ok(false),
                    Err(EvalError::Shape(s)) => {
                        panic!("interpreter bug: shape error on an inferred instance: {s}")
                    }
                };
            }
            e.set(&mut work[i], &xs[i], h);
            let r = self.sample(work, i, y, e, yw);
            let out = match r {
                Ok(true) => Err(FdFail::Undetermined("a sample meets a kink".into())),
                Ok(false) => {
                    match cover {
                        Some(cover) => {
                            let at = yw.out();
                            dst.extend(cover.iter().map(|&c| self.covered_entry(at, c, n_out)));
                        }
                        None => self.proj_out.denote_flat_into(yw.out(), dst),
                    }
                    Ok(true)
                }
                Err(EvalError::DivByZero) => Ok(false),
                Err(EvalError::Shape(s)) => {
                    panic!("interpreter bug: shape error on an inferred instance: {s}")
                }
            };
            self.unsample(y, i, e, yw);
            out
        };
        let (num, den) = (self.deg.num[i], self.deg.den[i]);
        let r = match cover {
            Some(cover) => derivative_into(&mut f, num, den, &self.step, fit, covered).map(|()| {
                out.clear();
                out.resize(y0.len(), Q::zero());
                for (&c, v) in cover.iter().zip(covered.drain(..)) {
                    out[c] = v;
                }
            }),
            None => derivative_into(&mut f, num, den, &self.step, fit, out),
        };
        if !untouched {
            e.reset(&mut work[i], &xs[i]);
        }
        r
    }

    /// Coordinate `c` of the output's flat denotation read off `out`:
    /// member c / n_out of the family at entry c % n_out, summed over its
    /// sources as `Projection::denote_flat_into` does.
    #[inline(always)]
    fn covered_entry(&self, out: &PerRank, c: usize, n_out: usize) -> Q {
        self.covered_by(c, n_out, |r, at| &out.tensors[r].data[at])
    }

    /// Coordinate `c` of the output's flat denotation with the output's
    /// entry `at` of rank `r` read by `read(r, at)`.
    #[inline(always)]
    fn covered_by<'q>(&self, c: usize, n_out: usize, read: impl Fn(usize, usize) -> &'q Q) -> Q {
        let (member, at) = (c / n_out, c % n_out);
        let srcs = self.proj_out.sources(member);
        let mut v = read(srcs[0], at).clone();
        for &r in &srcs[1..] {
            let b = read(r, at);
            if !b.is_zero() {
                v = v.add(b);
            }
        }
        v
    }

    /// Whether input `i`'s entrywise samples are computed off the
    /// workspace (`sample_direct`): a local op's, on the entrywise path.
    fn samples_direct(&self, i: usize, yw: &Work) -> bool {
        matches!(self.op.op, Op::Local(_))
            && yw.prog.is_none()
            && self.entrywise.get(i) == Some(&true)
            && self.op.inputs.len() <= MAX_ARGS
    }

    /// The output entries an entrywise direction `e` of input `i` moves, at
    /// the instance's inputs `xs` with input i moved by `h` along `e`,
    /// into `d.vals` (one per entry of `e`, in its order): what `sample`
    /// writes there after `Sparse::set`, computed without writing the
    /// moved inputs or the output. Entry k of a pointwise expression reads
    /// entry k of input i alone, so input i is read as one scalar, the
    /// moved entry (`eval_at` reads a one-entry tensor at every index).
    /// The kink flag and a division by zero are `sample`'s.
    fn sample_direct(
        &self,
        xs: &[PerRank],
        i: usize,
        e: &Sparse,
        h: &Q,
        d: &mut Direct,
    ) -> Result<bool, EvalError> {
        let Op::Local(f) = &self.op.op else {
            unreachable!("samples_direct admits local ops alone")
        };
        let one = d.one.get_or_insert_with(|| Tensor::scalar(Q::zero()));
        d.vals.clear();
        let mut ctx = spmd_interp::eval::Ctx::default();
        for (r, k, v) in e.entries.iter() {
            let b = &xs[i].tensors[*r].data[*k];
            one.data[0] = Sparse::moved(b, h, v);
            let mut args: [&Tensor; MAX_ARGS] = [&xs[0].tensors[*r]; MAX_ARGS];
            for (a, x) in args.iter_mut().zip(xs) {
                *a = &x.tensors[*r];
            }
            args[i] = one;
            let v = spmd_interp::eval::eval_at(&f.expr, &args[..xs.len()], *k, &mut ctx)?;
            d.vals.push(v);
        }
        Ok(ctx.at_kink)
    }

    /// `covered_entry` of the sample `sample_direct` left in `vals`: the
    /// moved entries of `e` read from `vals`, every other from the
    /// instance's output `y`.
    #[inline(always)]
    fn covered_at(&self, y: &PerRank, e: &Sparse, vals: &[Q], c: usize, n_out: usize) -> Q {
        self.covered_by(c, n_out, |r, at| {
            match e.entries.iter().position(|(q, k, _)| *q == r && *k == at) {
                Some(j) => &vals[j],
                None => &y.tensors[r].data[at],
            }
        })
    }

    /// `directional_flat` for a polynomial op: the samples are folded into
    /// the derivative and the check value as they come (the weights of
    /// `PolyWeights`), so no sample is kept. Leaves `work` perturbed; the
    /// caller resets it. `Ok(false)`: a sample was outside the domain (no
    /// derivative written).
    #[allow(clippy::too_many_arguments)]
    fn poly_directional(
        &self,
        work: &mut [PerRank],
        xs: &[PerRank],
        y: &PerRank,
        yw: &mut Work,
        y0: &[Q],
        i: usize,
        e: &Sparse,
        w: &PolyWeights,
        d: &mut Vec<Q>,
        p: &mut Vec<Q>,
        ys: &mut Vec<Q>,
        direct: &mut Direct,
    ) -> Result<bool, FdFail> {
        let n = w.deriv.len();
        d.clear();
        d.resize(y0.len(), Q::zero());
        if let Some(cover) = &e.cover {
            return self.poly_covered(work, xs, y, yw, y0, i, e, cover, w, d, p, direct);
        }
        p.clear();
        p.resize(y0.len(), Q::zero());
        let fold = |d: &mut [Q], p: &mut [Q], k: usize, ys: &[Q]| {
            for ((dc, pc), v) in d.iter_mut().zip(p.iter_mut()).zip(ys) {
                if !v.is_zero() {
                    *dc = dc.add(&w.deriv[k].mul(v));
                    *pc = pc.add(&w.check[k].mul(v));
                }
            }
        };
        fold(d, p, 0, y0);
        for k in 1..=n {
            let h = &w.hs[k];
            e.set(&mut work[i], &xs[i], h);
            let r = self.sample(work, i, y, e, yw);
            if let Ok(false) = r {
                self.proj_out.denote_flat_into(yw.out(), ys);
            }
            self.unsample(y, i, e, yw);
            if !in_domain(r)? {
                return Ok(false);
            }
            if k < n {
                fold(d, p, k, ys);
            } else if p != ys {
                return Err(FdFail::Undetermined(
                    "a check sample disagrees with the interpolation (wrong degree bound)".into(),
                ));
            }
        }
        Ok(true)
    }

    /// `poly_directional` for an entrywise direction (SPEC.md §18.8): every
    /// sample equals the instance's output off the output entries the
    /// direction moves, so every denotation coordinate outside `cover` has
    /// all its samples equal, its derivative 0 and its check met (the
    /// weights of a constant sum to 0 and 1, §5.2). Only the covered
    /// coordinates are denoted, folded and checked; `d` holds zeros on
    /// entry. The same values as the full fold.
    #[allow(clippy::too_many_arguments)]
    fn poly_covered(
        &self,
        work: &mut [PerRank],
        xs: &[PerRank],
        y: &PerRank,
        yw: &mut Work,
        y0: &[Q],
        i: usize,
        e: &Sparse,
        cover: &[usize],
        w: &PolyWeights,
        d: &mut [Q],
        p: &mut Vec<Q>,
        direct: &mut Direct,
    ) -> Result<bool, FdFail> {
        let n = w.deriv.len();
        let n_out = y0.len() / self.m.num_ranks().max(1);
        p.clear();
        p.resize(cover.len(), Q::zero());
        for (pc, &c) in p.iter_mut().zip(cover) {
            let v = &y0[c];
            if !v.is_zero() {
                d[c] = d[c].add(&w.deriv[0].mul(v));
                *pc = pc.add(&w.check[0].mul(v));
            }
        }
        let off_work = self.samples_direct(i, yw);
        for k in 1..=n {
            let h = &w.hs[k];
            let r = if off_work {
                self.sample_direct(xs, i, e, h, direct)
            } else {
                e.set(&mut work[i], &xs[i], h);
                self.sample(work, i, y, e, yw)
            };
            let mut agrees = true;
            if let Ok(false) = r {
                let out = yw.out();
                for (pc, &c) in p.iter_mut().zip(cover) {
                    let v = if off_work {
                        self.covered_at(y, e, &direct.vals, c, n_out)
                    } else {
                        self.covered_entry(out, c, n_out)
                    };
                    if k < n {
                        if !v.is_zero() {
                            d[c] = d[c].add(&w.deriv[k].mul(&v));
                            *pc = pc.add(&w.check[k].mul(&v));
                        }
                    } else if *pc != v {
                        agrees = false;
                    }
                }
            }
            if !off_work {
                self.unsample(y, i, e, yw);
            }
            if !in_domain(r)? {
                return Ok(false);
            }
            if !agrees {
                return Err(FdFail::Undetermined(
                    "a check sample disagrees with the interpolation (wrong degree bound)".into(),
                ));
            }
        }
        Ok(true)
    }
}

/// A polynomial column's sample (`Checker::sample`'s result): whether it is
/// in the domain; a kink makes the column undetermined.
fn in_domain(r: Result<bool, EvalError>) -> Result<bool, FdFail> {
    match r {
        Ok(true) => Err(FdFail::Undetermined("a sample meets a kink".into())),
        Ok(false) => Ok(true),
        Err(EvalError::DivByZero) => Ok(false),
        Err(EvalError::Shape(s)) => {
            panic!("interpreter bug: shape error on an inferred instance: {s}")
        }
    }
}

/// `out := d.flat()`, reusing `out`.
fn flat_into(d: &Denot, out: &mut Vec<Q>) {
    out.clear();
    for t in &d.family {
        out.extend_from_slice(&t.data);
    }
}

/// Why `v` is not a well-formed value of type `t` and shape `shape` (the
/// shape of the op's `what`, "input" or "output"), if it is not.
fn misfit(m: &Mesh, t: &Type, v: &PerRank, shape: &[usize], what: &str) -> Option<String> {
    // A loop, not `!=`: shapes have a handful of dims, and the slice
    // comparison calls memcmp (as `Tensor`'s equality avoids too).
    if !spmd_semantics::tensor::same_shape(v.shape(), shape) {
        return Some(format!(
            "has shape {:?}, the {what} has {shape:?}",
            v.shape()
        ));
    }
    perrank::well_formed(m, t, v).err().map(|e| {
        format!(
            "differs between ranks along {} axis `{}`",
            t.states[e.axis], m.axes[e.axis].name
        )
    })
}

/// The denotation (of type `t`'s cotangent, which has the same Varying axes)
/// whose coordinates in `basis` order are `vals`.
fn expand_denot(
    m: &Mesh,
    t: &Type,
    shape: &[usize],
    basis: &[(perrank::DenotCoord, PerRank)],
    vals: &[Q],
) -> Denot {
    let family = (0..m.num_ranks())
        .map(|r| {
            let mut c = m.coords(r);
            for (a, s) in t.states.iter().enumerate() {
                if *s != spmd_semantics::State::Varying {
                    c[a] = 0;
                }
            }
            let rep = m.rank(&c);
            let mut out = Tensor::zeros(shape);
            for ((coord, _), v) in basis.iter().zip(vals) {
                if coord.rank == rep {
                    out.data[coord.elem] = v.clone();
                }
            }
            out
        })
        .collect();
    Denot { family }
}
