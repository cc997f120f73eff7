//! `spmd-check check --emit jax|pytorch`: a counterexample as a script that
//! runs in the real framework (SPEC.md §20.2).
//!
//! The script carries the rule, the per-rank inputs of the counterexample
//! (exact, and exactly representable in float64) and every value the oracle
//! computed for the rule's implementation (outputs, cotangents, gradients).
//! It runs the rule's local function in the framework — JAX inside
//! `shard_map` on forced host CPU devices, or PyTorch under `LocalTensorMode`
//! on a fake process group laid out as a `DeviceMesh` of the counterexample's
//! axes, with spmd_types' types per axis — and reports one outcome:
//! `reproduced` (the framework types the op as the rule does and computes
//! exactly the oracle's values, so the oracle's violation is the
//! framework's), `error` (the framework refuses, with its first line),
//! `typed_otherwise` (it infers another output type, so the rule is not its
//! rule), `values_differ`, or `accepted` (it types the op as the rule does
//! and the oracle has no rational value to set beside its float64 ones).
//! `--expect OUTCOME[:TEXT]` or `--expect error=TYPE[|TYPE]` sets which
//! outcome exits 0.

use spmd_interp::expr::{DimOp, Fun, Mask, Rounding};
use spmd_interp::{Backward, Collective, Expr, Kind, Op};
use spmd_oracle::{Property, Violation};
use spmd_semantics::pending::PartialKind;
use spmd_semantics::{State, Type, Q};

use crate::rules::Rule;

/// The framework a script is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Jax,
    Pytorch,
}

impl Lang {
    pub fn parse(s: &str) -> Option<Lang> {
        match s {
            "jax" => Some(Lang::Jax),
            "pytorch" => Some(Lang::Pytorch),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Lang::Jax => "jax",
            Lang::Pytorch => "pytorch",
        }
    }
}

/// A rational as a Python float literal, only if float64 holds it exactly
/// (a dyadic rational with a small numerator and denominator).
fn float_lit(q: &Q) -> Result<String, String> {
    let s = q.to_string();
    let (p, d) = match s.split_once('/') {
        Some((p, d)) => (p.to_string(), d.to_string()),
        None => (s.clone(), "1".to_string()),
    };
    let p: i64 = p
        .parse()
        .map_err(|_| format!("constant {s} is too large"))?;
    let d: i64 = d
        .parse()
        .map_err(|_| format!("constant {s} is too large"))?;
    if p.unsigned_abs() >= 1 << 53 || d <= 0 || (d & (d - 1)) != 0 || d > 1 << 30 {
        return Err(format!("constant {s} is not exact in float64"));
    }
    Ok(if d == 1 {
        format!("{p}.0")
    } else {
        format!("({p}.0 / {d}.0)")
    })
}

/// The local function as Python over the framework's array module.
fn py_expr(e: &Expr, lang: Lang) -> Result<String, String> {
    let m = match lang {
        Lang::Jax => "jnp",
        Lang::Pytorch => "torch",
    };
    let r = |x: &Expr| py_expr(x, lang);
    let dim_kw = match lang {
        Lang::Jax => "axis",
        Lang::Pytorch => "dim",
    };
    Ok(match e {
        Expr::Var(i) => format!("a{i}"),
        Expr::Const(q) => float_lit(q)?,
        Expr::Table(t, _) => {
            return Err(format!(
                "{} is a recorded kernel: `spmd-check registry --show-repro` writes its script",
                t.0.name
            ))
        }
        Expr::Neg(a) => format!("(-{})", r(a)?),
        Expr::Add(a, b) => format!("({} + {})", r(a)?, r(b)?),
        Expr::Sub(a, b) => format!("({} - {})", r(a)?, r(b)?),
        Expr::Mul(a, b) => format!("({} * {})", r(a)?, r(b)?),
        Expr::Div(a, b) => format!("({} / {})", r(a)?, r(b)?),
        Expr::Pow(a, k) => format!("({} ** {k})", r(a)?),
        Expr::Sum(a, d) => format!("{m}.sum({}, {dim_kw}={d})", r(a)?),
        Expr::Mean(a, d) => format!("{m}.mean({}, {dim_kw}={d})", r(a)?),
        Expr::Max(a, d) => match lang {
            Lang::Jax => format!("jnp.max({}, axis={d})", r(a)?),
            Lang::Pytorch => format!("torch.amax({}, dim={d})", r(a)?),
        },
        Expr::Einsum(spec, args) => {
            let ins: Vec<String> = spec.inputs.iter().map(|l| l.iter().collect()).collect();
            let out: String = spec.output.iter().collect();
            let args = args.iter().map(r).collect::<Result<Vec<_>, _>>()?;
            format!(
                "{m}.einsum(\"{}->{out}\", {})",
                ins.join(","),
                args.join(", ")
            )
        }
        Expr::Abs(a) => format!("{m}.abs({})", r(a)?),
        Expr::Relu(a) => match lang {
            Lang::Jax => format!("jax.nn.relu({})", r(a)?),
            Lang::Pytorch => format!("torch.relu({})", r(a)?),
        },
        // Floor division is spelled as each framework's own floor division.
        Expr::Floor(inner) => match (&**inner, lang) {
            (Expr::Div(a, b), Lang::Pytorch) => {
                format!("torch.div({}, {}, rounding_mode=\"floor\")", r(a)?, r(b)?)
            }
            (Expr::Div(a, b), Lang::Jax) => format!("jnp.floor_divide({}, {})", r(a)?, r(b)?),
            _ => format!("{m}.floor({})", r(inner)?),
        },
        Expr::Reshape(a, shape) => {
            let s: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!("{m}.reshape({}, ({},))", r(a)?, s.join(", "))
        }
        Expr::Slice(a, d, s, t) => {
            let mut idx = vec![":".to_string(); *d];
            idx.push(format!("{s}:{t}"));
            format!("{}[{}]", r(a)?, idx.join(", "))
        }
        Expr::Concat(xs, d) => {
            let xs = xs.iter().map(r).collect::<Result<Vec<_>, _>>()?;
            match lang {
                Lang::Jax => format!("jnp.concatenate([{}], axis={d})", xs.join(", ")),
                Lang::Pytorch => format!("torch.cat([{}], dim={d})", xs.join(", ")),
            }
        }
        Expr::Take(a, d, idx) => {
            let idx: Vec<String> = idx.iter().map(|i| i.to_string()).collect();
            match lang {
                Lang::Jax => format!(
                    "jnp.take({}, jnp.array([{}]), axis={d})",
                    r(a)?,
                    idx.join(", ")
                ),
                Lang::Pytorch => format!(
                    "torch.index_select({}, {d}, torch.tensor([{}]))",
                    r(a)?,
                    idx.join(", ")
                ),
            }
        }
        // Transcendental and normalising ops (SPEC.md §19.1), each as the
        // framework's own op where it has one with the same meaning, else
        // written with its ops as §19.1 defines it.
        Expr::Unary(fun, a) => {
            let a = r(a)?;
            match (fun, lang) {
                (Fun::Rsqrt, Lang::Jax) => format!("lax.rsqrt({a})"),
                (Fun::Sigmoid, Lang::Jax) => format!("jax.nn.sigmoid({a})"),
                (Fun::Gelu, Lang::Jax) => format!("jax.nn.gelu({a}, approximate=True)"),
                (Fun::Silu, Lang::Jax) => format!("jax.nn.silu({a})"),
                (Fun::Gelu, Lang::Pytorch) => {
                    format!("torch.nn.functional.gelu({a}, approximate=\"tanh\")")
                }
                (Fun::Silu, Lang::Pytorch) => format!("torch.nn.functional.silu({a})"),
                (f, _) => format!("{m}.{}({a})", f.name()),
            }
        }
        Expr::Dimwise(op, a, d, eps) => {
            let a = r(a)?;
            let eps = float_lit(eps)?;
            match (op, lang) {
                (DimOp::Softmax, Lang::Jax) => format!("jax.nn.softmax({a}, axis={d})"),
                (DimOp::Softmax, Lang::Pytorch) => format!("torch.softmax({a}, dim={d})"),
                (DimOp::LogSumExp, Lang::Jax) => format!("jax.nn.logsumexp({a}, axis={d})"),
                (DimOp::LogSumExp, Lang::Pytorch) => format!("torch.logsumexp({a}, dim={d})"),
                // jax.nn.standardize is (x - mean) / sqrt(var + eps) over an axis.
                (DimOp::LayerNorm, Lang::Jax) => {
                    format!("jax.nn.standardize({a}, axis={d}, epsilon={eps})")
                }
                // torch's layer_norm normalises the last dims only; over
                // any dim it is written out (population variance).
                (DimOp::LayerNorm, Lang::Pytorch) => format!("layernorm({a}, {d}, {eps})"),
                (DimOp::RmsNorm, Lang::Jax) => format!(
                    "({a} * lax.rsqrt(jnp.mean({a} * {a}, axis={d}, keepdims=True) + {eps}))"
                ),
                (DimOp::RmsNorm, Lang::Pytorch) => format!(
                    "({a} * torch.rsqrt(torch.mean({a} * {a}, dim={d}, keepdim=True) + {eps}))"
                ),
            }
        }
        Expr::CrossEntropy(a, t, d) => {
            let (a, t) = (r(a)?, r(t)?);
            match lang {
                Lang::Jax => {
                    format!("(jax.nn.logsumexp({a}, axis={d}) - jnp.sum({a} * {t}, axis={d}))")
                }
                Lang::Pytorch => {
                    format!("(torch.logsumexp({a}, dim={d}) - torch.sum({a} * {t}, dim={d}))")
                }
            }
        }
        Expr::Cumsum(a, d) => format!("{m}.cumsum({}, {dim_kw}={d})", r(a)?),
        Expr::Round(k, a) => {
            let f = match k {
                Rounding::Trunc => "trunc",
                // Both frameworks round half to even, as `round` does.
                Rounding::Round => "round",
                Rounding::Ceil => "ceil",
            };
            format!("{m}.{f}({})", r(a)?)
        }
        Expr::Where(Mask::Input(c), a, b) => {
            format!("{m}.where({} > 0, {}, {})", r(c)?, r(a)?, r(b)?)
        }
        Expr::Where(Mask::Const(bits), a, b) => {
            let bits: Vec<String> = bits.iter().map(|b| format!("{b}.0")).collect();
            let mask = match lang {
                Lang::Jax => format!("jnp.array([{}])", bits.join(", ")),
                Lang::Pytorch => {
                    format!("torch.tensor([{}], dtype=torch.float64)", bits.join(", "))
                }
            };
            format!("{m}.where({mask} > 0, {}, {})", r(a)?, r(b)?)
        }
        Expr::Cast(_, k) => {
            return Err(format!(
            "`cast(e, {k})` rounds to multiples of 2^-{k}, which no {} dtype cast does for every k",
            lang.name()
        ))
        }
        Expr::UpdateSlice(..) => {
            return Err(format!(
                "the emitter has no {} spelling for dynamic_update_slice",
                lang.name()
            ))
        }
    })
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("json")
}

/// A type's states as one letter per mesh axis (`"VI"`); a layout `S(d)`
/// reads as V (its local pieces are what both frameworks hold) and is
/// carried beside it. A pending kind other than the sum is refused: neither
/// script can make one (SPEC.md §20.2).
fn state_letters(t: &Type, lang: Lang) -> Result<String, String> {
    if let Some(k) = t
        .states
        .iter()
        .zip(&t.kinds)
        .find(|(s, k)| **s == State::Partial && **k != PartialKind::Sum)
        .map(|(_, k)| k.name())
    {
        return Err(match lang {
            Lang::Pytorch => format!(
                "a pending {k} (Partial({k})) has no spmd_types 0.3.1 type: its P is a pending sum only"
            ),
            Lang::Jax => format!(
                "a pending {k} (Partial({k})) is not emitted for JAX: inside shard_map the script makes Partial values with lax.pcast(to='unreduced'), which is always a pending sum (jax's max/min kinds arise from reduce_max/reduce_min of an unreduced array under jit, see peers/repro_unreduced_max.py; avg is no JAX kind)"
            ),
        });
    }
    Ok(t.states.iter().map(|s| s.letter()).collect())
}

/// Whether spmd_types 0.3.1 gates a reinterpret or convert from `src` to
/// `dst` (Shard sides read as V) behind `expert_mode=True`: it raises
/// `ValueError: ... requires expert_mode=True` otherwise (`_local.py`).
fn spmd_types_expert(convert: bool, src: State, dst: State) -> bool {
    use State::{Invariant as I, Partial as P, Reduced as R, Varying as V};
    if convert {
        matches!((src, dst), (R, I) | (I, P) | (V, P))
    } else {
        matches!((src, dst), (R, I) | (R, P) | (I, R) | (R, V))
    }
}

/// A catalogue collective as the spmd_types 0.3.1 call that performs it, on
/// the script's process group `PG`, the group of the collective's mesh axes
/// (several axes flattened, SPEC.md §20.2): seed 003's names are
/// spmd_types' own; a Varying side read as concatenation along `dim` is
/// `S(dim)`, a stacking one `V` with the dim as spmd_types' `gather_dim`,
/// `scatter_dim` or `split_dim`/`concat_dim`. What spmd_types has no call
/// for is refused with the reason.
fn spmd_types_call(c: &Collective) -> Result<String, String> {
    use State::{Invariant as I, Partial as P, Reduced as R, Varying as V};
    let st = |s: State| s.letter().to_string();
    let expert = |convert: bool| {
        if spmd_types_expert(convert, c.src, c.dst) {
            ", expert_mode=True"
        } else {
            ""
        }
    };
    Ok(match (&c.kind, c.src, c.dst) {
        (Kind::AllReduce, P | V, R | I) => {
            format!("all_reduce(a0, PG, src={}, dst={})", st(c.src), st(c.dst))
        }
        (Kind::AllGather { dim, stack }, V, R | I) => {
            let src = if *stack {
                format!("V, gather_dim={dim}")
            } else {
                format!("S({dim})")
            };
            format!("all_gather(a0, PG, src={src}, dst={})", st(c.dst))
        }
        (Kind::AllGather { .. }, _, dst) => {
            return Err(format!(
                "spmd_types 0.3.1's all_gather goes from V or S(i) to R or I only (dst={} raises ValueError); a gather that stays {dst} is JAX's lax.all_gather",
                dst.letter()
            ))
        }
        (Kind::ReduceScatter { dim, stack }, P | V, V) => {
            let dst = if *stack {
                format!("V, scatter_dim={dim}")
            } else {
                format!("S({dim})")
            };
            format!("reduce_scatter(a0, PG, src={}, dst={dst})", st(c.src))
        }
        (
            Kind::AllToAll {
                split,
                concat,
                stack: false,
            },
            V,
            V,
        ) => format!("all_to_all(a0, PG, src=S({concat}), dst=S({split}))"),
        (
            Kind::AllToAll {
                split,
                concat,
                stack: true,
            },
            V,
            V,
        ) => format!(
            "all_to_all(a0, PG, src=V, dst=V, split_dim={split}, concat_dim={concat})"
        ),
        (Kind::Reinterpret, _, _) => format!(
            "reinterpret(a0, PG, src={}, dst={}{})",
            st(c.src),
            st(c.dst),
            expert(false)
        ),
        (Kind::Convert { dim, stack }, _, _) => {
            if *stack && *dim != 0 {
                return Err(format!(
                    "spmd_types 0.3.1's convert stacks V on dim 0 only; a convert stacking on dim {dim} has no spmd_types call"
                ));
            }
            let side = |s: State| match (s, stack) {
                (V, true) => "V".to_string(),
                (V, false) => format!("S({dim})"),
                (s, _) => st(s),
            };
            format!(
                "convert(a0, PG, src={}, dst={}{})",
                side(c.src),
                side(c.dst),
                expert(true)
            )
        }
        _ => {
            return Err(format!(
                "`{}` from {} to {} has no spmd_types call in spmd_types 0.3.1 (ppermute, pmean and divide_by_group_size are JAX's)",
                c.describe(),
                c.src,
                c.dst
            ))
        }
    })
}

/// Whether a PyTorch script can run `c` on its group: torch orders a
/// process group's members by rank (`new_group` sorts them, and
/// `DeviceMesh._flatten` flattens in mesh order), which is row-major over
/// the group's axes in mesh order. A group naming its axes in another
/// order is ordered otherwise by the oracle (SPEC.md §10.1); that matters
/// where a member's place in the group does (gathers, scatters,
/// all-to-alls, converts that split or place a Varying value), and is
/// refused there. A sum or a cast is the same in any order, so it runs on
/// the mesh-ordered group.
fn torch_group_order(c: &Collective, mesh: &spmd_semantics::Mesh) -> Result<(), String> {
    use State::Varying as V;
    if c.axes.windows(2).all(|w| w[0] < w[1]) {
        return Ok(());
    }
    let order_free = match c.kind {
        Kind::AllReduce | Kind::Reinterpret => true,
        Kind::Convert { .. } => c.src != V && c.dst != V,
        _ => false,
    };
    if order_free {
        return Ok(());
    }
    let names: Vec<&str> = c
        .axes
        .iter()
        .filter_map(|&i| mesh.axes.get(i).map(|a| a.name.as_str()))
        .collect();
    Err(format!(
        "`{}` runs over the axes [{}] in that order, which is not the mesh's; torch orders a process group by rank (row-major in mesh order: new_group sorts its ranks, DeviceMesh slices dims in ascending order only), so no torch group has this member order",
        c.describe(),
        names.join(", ")
    ))
}

/// A catalogue collective as the JAX call that performs it inside
/// `shard_map` on the script's axis (SPEC.md §20.2), as jax 0.10.2 spells
/// it in `tests/fixtures/jax_collectives.json` (an Unreduced operand makes
/// psum and psum_scatter JAX's unreduced forms).
fn jax_call(c: &Collective) -> Result<String, String> {
    use State::{Invariant as I, Partial as P, Reduced as R, Varying as V};
    let ax = "AX";
    Ok(match (&c.kind, c.src, c.dst) {
        (Kind::AllReduce, V | P, I) => format!("lax.psum(a0, {ax})"),
        (Kind::PMean, V, I) => format!("lax.pmean(a0, {ax})"),
        (Kind::AllGather { dim, stack }, V, V) => {
            let tiled = if *stack { "False" } else { "True" };
            format!("lax.all_gather(a0, {ax}, axis={dim}, tiled={tiled})")
        }
        (Kind::AllGather { dim, stack: false }, V, I) => {
            format!("lax.all_gather(a0, {ax}, axis={dim}, tiled=True, to='invarying')")
        }
        (Kind::AllGather { dim, stack: false }, V, R) => {
            format!("lax.all_gather(a0, {ax}, axis={dim}, tiled=True, to='reduced')")
        }
        (Kind::ReduceScatter { dim, stack: false }, V | P, V) => {
            format!("lax.psum_scatter(a0, {ax}, scatter_dimension={dim}, tiled=True)")
        }
        (
            Kind::AllToAll {
                split,
                concat,
                stack,
            },
            V,
            V,
        ) => {
            let tiled = if *stack { "False" } else { "True" };
            format!("lax.all_to_all(a0, {ax}, {split}, {concat}, tiled={tiled})")
        }
        (Kind::PPermute { perm, .. }, V, V) => {
            let pairs: Vec<String> = perm
                .iter()
                .enumerate()
                .filter_map(|(i, d)| d.map(|d| format!("({i}, {d})")))
                .collect();
            format!("lax.ppermute(a0, {ax}, perm=[{}])", pairs.join(", "))
        }
        (Kind::Reinterpret, I | R, V) => format!("lax.pcast(a0, {ax}, to='varying')"),
        (Kind::Reinterpret, I, R) => format!("lax.pcast(a0, {ax}, to='reduced')"),
        (Kind::Reinterpret, V, P) => format!("lax.pcast(a0, {ax}, to='unreduced')"),
        _ => {
            return Err(format!(
            "`{}` from {} to {} has no JAX call recorded in tests/fixtures/jax_collectives.json",
            c.describe(),
            c.src,
            c.dst
        ))
        }
    })
}

/// The script reproducing `v`, a counterexample of `rule`, or why none can
/// be written (the reason is one line).
pub fn emit_script(
    lang: Lang,
    rule: &Rule,
    rule_toml: &str,
    v: &Violation,
) -> Result<String, String> {
    use serde_json::json;
    // The function the script runs: a local op's expression, or (PyTorch)
    // a collective as its spmd_types call, whose own transpose the
    // framework then uses in place of the rule's declared backward.
    let (vars, body, text): (Vec<String>, String, String) = match (&rule.op.op, lang) {
        (Op::Local(f), _) => {
            if !matches!(rule.op.backward, Backward::LocalVjp) {
                return Err(
                    "the rule declares its own backward; the framework would use its autodiff instead"
                        .into(),
                );
            }
            (f.vars.clone(), py_expr(&f.expr, lang)?, f.text.clone())
        }
        (Op::Collective(c), Lang::Pytorch) => (
            vec![rule.op.input_name(0)],
            spmd_types_call(c)?,
            c.describe(),
        ),
        (Op::Collective(c), Lang::Jax) => (vec![rule.op.input_name(0)], jax_call(c)?, c.describe()),
        _ => return Err(
            "only local ops and collectives are emitted (compositions and programs are not yet)"
                .into(),
        ),
    };
    if matches!(v.property, Property::J1 | Property::T1 | Property::V1) {
        return Err(format!("{} is not emitted", v.property.code()));
    }
    if let (Op::Collective(c), Lang::Pytorch) = (&rule.op.op, lang) {
        torch_group_order(c, &v.mesh)?;
    }
    let ranks: usize = v.mesh.axes.iter().map(|a| a.size).product();
    let group: Vec<&str> = match &rule.op.op {
        Op::Collective(c) => c
            .axes
            .iter()
            .map(|&i| v.mesh.axes.get(i).map(|a| a.name.as_str()))
            .collect::<Option<Vec<_>>>()
            .ok_or("the collective's group names an axis the counterexample's mesh lacks")?,
        _ => v.mesh.axes.iter().map(|a| a.name.as_str()).collect(),
    };
    let value = |s: &spmd_oracle::Shown| -> Result<serde_json::Value, String> {
        Ok(json!({
            "label": s.label,
            "state": state_letters(&s.ty, lang)?,
            "layout": s.ty.layout,
            "shape": s.value.shape().to_vec(),
            "per_rank": s.value.tensors.iter()
                .map(|t| t.data.iter().map(|q| q.to_string()).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
        }))
    };
    let inputs = v
        .shown
        .iter()
        .filter(|s| s.input)
        .map(value)
        .collect::<Result<Vec<_>, _>>()?;
    let alternatives = v
        .shown
        .iter()
        .filter(|s| s.alternative)
        .map(value)
        .collect::<Result<Vec<_>, _>>()?;
    let oracle = v
        .shown
        .iter()
        .filter(|s| !s.input && !s.alternative)
        .map(value)
        .collect::<Result<Vec<_>, _>>()?;
    let data = json!({
        "rule": rule.name,
        "rule_toml": rule_toml.trim(),
        "property": v.property.code(),
        "title": v.property.title(),
        "what": v.what,
        "expected": v.expected,
        "actual": v.actual,
        "report": v.report_in(rule.dialect),
        "ranks": ranks,
        "axes": v.mesh.axes.iter().map(|a| json!([a.name, a.size])).collect::<Vec<_>>(),
        // The axes a collective's call names (its group), else every axis.
        "group": group,
        "vars": vars,
        "expr": text,
        "inputs": inputs,
        "alternatives": alternatives,
        "oracle": oracle,
        "output": state_letters(&rule.op.output, lang)?,
        "backward": !matches!(v.property, Property::F1 | Property::F2 | Property::F3),
        // A collective's declared backward, which the framework does not
        // run (it uses its own transpose).
        "declared_backward": match (&rule.op.op, &rule.op.backward) {
            (Op::Collective(_), Backward::Transpose(b)) => {
                Some(crate::transposes::describe_typed(b, rule.dialect))
            }
            _ => None,
        },
        "no_grad": rule.op.no_grad,
    });
    let data = json_str(&data.to_string());
    let args: Vec<String> = (0..vars.len()).map(|i| format!("a{i}")).collect();
    let head = format!(
        "#!/usr/bin/env python3\n\"\"\"{} repro of a spmd-check counterexample (SPEC.md §20.2).\n\nRule: {}\nOracle: {}\n\nRun: python3 THIS_FILE [--expect reproduced|accepted|error[:TEXT]|error=TYPE|typed_otherwise|values_differ]\n\"\"\"\n",
        lang.name(),
        rule.name.escape_debug(),
        v.one_line_in(rule.dialect).escape_debug(),
    );
    let (prelude, harness) = match lang {
        Lang::Jax => (
            format!(
                "import os\nos.environ[\"XLA_FLAGS\"] = \"--xla_force_host_platform_device_count={ranks}\"\nos.environ.setdefault(\"JAX_PLATFORMS\", \"cpu\")\nimport jax  # noqa: E402\nimport jax.numpy as jnp  # noqa: E402\njax.config.update(\"jax_enable_x64\", True)\n"
            ),
            JAX_HARNESS,
        ),
        Lang::Pytorch => (
            "import torch  # noqa: E402\n".to_string(),
            TORCH_HARNESS,
        ),
    };
    Ok(format!(
        "{head}{prelude}import json  # noqa: E402\nimport sys  # noqa: E402\nfrom fractions import Fraction  # noqa: E402\n\nDATA = json.loads({data})\n\n\ndef f({}):\n    return {body}\n\n{COMMON}{harness}",
        args.join(", ")
    ))
}

/// The judgement both frameworks share: exact comparison of what the
/// framework computed with what the oracle computed.
const COMMON: &str = r#"
def exact(per_rank, shape):
    """Oracle values ("p/q" strings) as float64 lists, refusing any value
    float64 does not hold exactly."""
    out = []
    for rank in per_rank:
        qs = [Fraction(s) for s in rank]
        for q in qs:
            if Fraction(float(q)) != q:
                print(json.dumps({"outcome": "not_exact", "detail": f"{q} is not a float64"}))
                sys.exit(3)
        out.append(nest([float(q) for q in qs], shape))
    return out


def nest(flat, shape):
    if not shape:
        return flat[0]
    step = len(flat) // shape[0]
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def flat(x):
    if isinstance(x, (list, tuple)):
        return [y for z in x for y in flat(z)]
    return [x]


def same_values(got, want):
    """Exact: every float64 the framework returned equals the oracle's rational."""
    g = [Fraction(float(x)) for r in got for x in flat(r)]
    w = [Fraction(s) for r in want for s in r]
    return g == w


def instances():
    """The counterexample's instance, and its equivalent twin (F2, B2)."""
    base = [(i["state"], exact(i["per_rank"], i["shape"])) for i in DATA["inputs"]]
    alt = list(base)
    for a in DATA["alternatives"]:
        k = [i["label"] for i in DATA["inputs"]].index(a["label"].rstrip("'"))
        alt[k] = (a["state"], exact(a["per_rank"], a["shape"]))
    oracle = {o["label"]: o for o in DATA["oracle"]}
    ct = oracle.get("g")
    ct_alt = oracle.get("g'", ct)
    mk = (lambda c: (c["state"], exact(c["per_rank"], c["shape"]))) if DATA["backward"] else (lambda c: None)
    runs = [("", base, mk(ct) if ct else None)]
    if DATA["alternatives"] or "g'" in oracle:
        runs.append(("'", alt, mk(ct_alt) if ct_alt else None))
    return runs, oracle


def same_state(got, want):
    """The framework's letters are the rule's, one per axis; "-" is an axis
    the framework keeps no type on (a singleton), where any state holds."""
    return len(got) == len(want) and all(g in ("-", w) for g, w in zip(got, want))


def judge(results, oracle):
    """results: [(suffix, result dict)]. Returns (outcome, detail)."""
    for sfx, r in results:
        if r.get("error"):
            return "error", r["error"]
    for sfx, r in results:
        if not same_state(r["out_state"], DATA["output"]):
            return "typed_otherwise", (f"{FRAMEWORK} types the output {r['out_state']}; "
                                       f"the rule says {DATA['output']}")
    for sfx, r in results:
        if DATA["backward"] and r.get("grad_error"):
            return "error", r["grad_error"]
    diffs = []
    grads_compared = 0
    compared = 0
    for sfx, r in results:
        got = {"out" + sfx: r["out"]}
        for i, g in enumerate(r.get("grads") or []):
            got["d" + DATA["inputs"][i]["label"] + sfx] = g
        for label, vals in got.items():
            if label in oracle and vals is not None:
                grads_compared += label.startswith("d")
                compared += 1
                if not same_values(vals, oracle[label]["per_rank"]):
                    diffs.append(f"{label}: {FRAMEWORK} {vals}, oracle {oracle[label]['per_rank']}")
    if diffs:
        return "values_differ", "; ".join(diffs)
    decl = DATA.get("declared_backward")
    if DATA["backward"] and decl and grads_compared == 0:
        # The violation is the declared backward's; the framework runs its
        # own transpose, and the oracle shows no gradient to set beside it.
        grads = [r.get("grads") for _, r in results if r.get("grads") is not None]
        what = f"its gradients {grads}" if grads else "the oracle shows no cotangent to run it on"
        return "values_differ", (f"{FRAMEWORK} runs its own transpose, not the rule's declared "
                                 f"backward `{decl}`; {what}")
    if compared == 0:
        # The oracle's values here are not rationals (SPEC.md §19: exp,
        # softmax, ...), so there is nothing exact to set the framework's
        # float64 values beside: it accepted the rule's typing, no more.
        return "accepted", (f"{FRAMEWORK} accepts the rule's typing (output {DATA['output']}); the oracle's "
                            f"values are not rational, so its float64 values are shown, not compared")
    return "reproduced", (f"{FRAMEWORK} computes exactly the oracle's values, which violate "
                          f"{DATA['title']}: {DATA['what']}; expected {DATA['expected']}, got {DATA['actual']}")


def main():
    expect = "reproduced"
    if "--expect" in sys.argv:
        expect = sys.argv[sys.argv.index("--expect") + 1]
    runs, oracle = instances()
    results = [(sfx, run(ins, ct)) for sfx, ins, ct in runs]
    outcome, detail = judge(results, oracle)
    print(f"rule: {DATA['rule']}")
    mesh = ", ".join(f"{a}: {n}" for a, n in DATA["axes"])
    print(f"oracle: {DATA['property']} on {{{mesh}}}: {DATA['what']}")
    for sfx, r in results:
        print(f"{FRAMEWORK} instance{sfx or ''}: output {r.get('out_state')} {r.get('out')}")
        if DATA["backward"]:
            print(f"  gradient {FRAMEWORK} computes: {r.get('grads')} {r.get('grad_error') or ''}")
    if DATA["backward"]:
        print(f"  exact gradient (oracle): {DATA['expected']}; the rule's backward gives {DATA['actual']}")
    # A refusal is compared by the exception's type (`--expect error=TYPE`);
    # its message is shown, and matched only where asked (`error:TEXT`).
    error_type = detail.split(":", 1)[0] if outcome == "error" else None
    print(json.dumps({"outcome": outcome, "detail": detail, "error_type": error_type,
                      "framework": FRAMEWORK_VERSION()}))
    if expect.startswith("error="):
        ok = outcome == "error" and error_type in expect[len("error="):].split("|")
    else:
        kind, _, text = expect.partition(":")
        ok = outcome == kind and (not text or text in detail)
    sys.exit(0 if ok else 1)
"#;

const JAX_HARNESS: &str = r#"
import itertools  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

FRAMEWORK = "jax"
lax = jax.lax


def FRAMEWORK_VERSION():
    return f"jax {jax.__version__}"


def first_line(e):
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


AXES = [a for a, _ in DATA["axes"]]
SIZES = dict(DATA["axes"])
# The axes a collective names: one name, or a tuple for a group of several.
AX = DATA["group"][0] if len(DATA["group"]) == 1 else tuple(DATA["group"])


def letter(v):
    """The value's state on each mesh axis, one letter per axis ("VI")."""
    t = jax.typeof(v)
    m = getattr(t, "mat", None)
    varying = getattr(m, "varying", None) if m is not None else getattr(t, "vma", ())
    unreduced = getattr(m, "unreduced", ()) if m is not None else ()
    reduced = getattr(m, "reduced", ()) if m is not None else ()
    out = ""
    for ax in AXES:
        if ax in (varying or ()):
            out += "V"
        elif ax in unreduced:
            out += "P"
        elif ax in reduced:
            out += "R"
        else:
            out += "I"
    return out


def axes_in(state, letters):
    return tuple(ax for ax, s in zip(AXES, state) if s in letters)


def spec(state):
    """The out_spec of a value (with a leading dim of one per device)."""
    vs = axes_in(state, "V")
    return P(vs or None, unreduced=set(axes_in(state, "P")), reduced=set(axes_in(state, "R")))


def rank_of(coords):
    r = 0
    for ax in AXES:
        r = r * SIZES[ax] + coords.get(ax, 0)
    return r


def enter(mesh, state, per_rank):
    """A value enters split over its Varying and Partial axes (one leading
    dim, one entry per device of those axes, mesh order) and replicated over
    the others, on whose ranks it must agree."""
    a = [np.asarray(r, dtype=np.float64) for r in per_rank]
    split = axes_in(state, "VP")
    rest = [ax for ax in AXES if ax not in split]
    pieces = []
    for combo in itertools.product(*[range(SIZES[ax]) for ax in split]):
        at = dict(zip(split, combo))
        piece = a[rank_of(at)]
        for other in itertools.product(*[range(SIZES[ax]) for ax in rest]):
            assert (a[rank_of({**at, **dict(zip(rest, other))})] == piece).all(), \
                "a replicated input differs between ranks"
        pieces.append(piece)
    if split:
        sp = P(split)
        return jax.device_put(np.stack(pieces), NamedSharding(mesh, sp)), sp, True
    return jax.device_put(pieces[0], NamedSharding(mesh, P())), P(), False


def cast(v, state):
    ps, rs = axes_in(state, "P"), axes_in(state, "R")
    if ps:
        v = lax.pcast(v, ps, to="unreduced")
    if rs:
        v = lax.pcast(v, rs, to="reduced")
    return v


def run(ins, ct):
    n = DATA["ranks"]
    mesh = Mesh(np.array(jax.devices()[:n]).reshape([SIZES[ax] for ax in AXES]), tuple(AXES),
                axis_types=(AxisType.Explicit,) * len(AXES))
    entered = [enter(mesh, s, pr) for s, pr in ins] + ([enter(mesh, ct[0], ct[1])] if ct else [])
    args = [e[0] for e in entered]
    seen = {}

    def body(*xs):
        vals = [cast(x[0] if e[2] else x, s) for x, e, (s, _) in zip(xs, entered, ins)]
        seen.clear()
        if ct is None:
            y = f(*vals)
            seen["types"] = [letter(y)]
            return (y[None],)
        y, pullback = jax.vjp(f, *vals)
        seen["types"] = [letter(y)]
        c = cast(xs[-1][0] if entered[-1][2] else xs[-1], ct[0])
        try:
            gs = pullback(c)
        except Exception as e:  # noqa: BLE001  the framework's own refusal
            seen["grad_error"] = first_line(e)
            return (y[None],)
        seen["types"] += [letter(g) for g in gs]
        return (y[None], *[g[None] for g in gs])

    def sm(outs):
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=tuple(e[1] for e in entered), out_specs=outs))

    try:
        jax.eval_shape(sm(P()), *args)
    except Exception as e:  # noqa: BLE001
        if "types" not in seen:
            return {"error": first_line(e)}
    try:
        res = sm(tuple(spec(t) for t in seen["types"]))(*args)
    except Exception as e:  # noqa: BLE001
        return {"error": first_line(e)}

    def ranks(arr):
        shards = sorted(arr.addressable_shards, key=lambda s: s.device.id)
        return [np.asarray(s.data)[0].tolist() for s in shards]

    out = {"out_state": seen["types"][0], "out": ranks(res[0]), "grad_error": seen.get("grad_error")}
    if len(res) > 1:
        out["grads"] = [ranks(g) for g in res[1:]]
        out["grad_states"] = seen["types"][1:]
    return out


if __name__ == "__main__":
    main()
"#;

const TORCH_HARNESS: &str = r#"
from torch.distributed._local_tensor import LocalTensorMode  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from spmd_types import (I, P, R, V, S, MeshAxis, PartitionSpec, all_gather, all_reduce,  # noqa: E402,F401
                        all_to_all, assert_type, convert, get_local_type, reduce_scatter, reinterpret)
from spmd_types._checker import typecheck  # noqa: E402
from spmd_types._testing import fake_pg  # noqa: E402

FRAMEWORK = "pytorch"
ST = {"R": R, "I": I, "V": V, "P": P}
AXES = [a for a, _ in DATA["axes"]]
SIZES = dict(DATA["axes"])


def FRAMEWORK_VERSION():
    import importlib.metadata as md
    return f"torch {torch.__version__}, spmd-types {md.version('spmd-types')}"


def first_line(e):
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


MESH = None  # the DeviceMesh of the counterexample's axes, ranks row-major
GROUPS = {}  # each mesh axis's process group
PG = None  # the process group a collective runs on


def group_of(names):
    """The process group of a collective over the mesh axes `names`: one
    axis's group, or those axes flattened into one group. torch orders a
    group's members by rank, which is row-major in mesh order, as the
    oracle orders a group of axes given in mesh order (the emitter refuses
    a collective whose result depends on another order)."""
    names = sorted(names, key=AXES.index)
    if len(names) == 1:
        return GROUPS[names[0]]
    return MESH[tuple(names)]._flatten().get_group()


def letter(t):
    """The value's state on each mesh axis, one letter per axis ("VI"); "-"
    where spmd_types keeps no type (a singleton axis: any state holds)."""
    ty = get_local_type(t)
    out = ""
    for ax in AXES:
        s = ty.get(MeshAxis.of(GROUPS[ax]))
        out += "-" if s is None else next((k for k, v in ST.items() if s is v), repr(s))
    return out


def annotate(t, state, layout):
    """assert_type with the state on each mesh axis; a layout is S(d), or,
    where several axes shard one dim, a PartitionSpec naming them in mesh
    order, the first major (spmd_types refuses S(d) on two axes of a dim)."""
    layout = layout or [None] * len(AXES)
    laid = [(ax, d) for ax, d in zip(AXES, layout) if d is not None and SIZES[ax] > 1]
    dims = [d for _, d in laid]
    if all(dims.count(d) == 1 for d in dims):
        assert_type(t, {GROUPS[ax]: ST[s] if d is None else S(d) for ax, s, d in zip(AXES, state, layout)})
        return
    spec = [[] for _ in range(t.ndim)]
    for ax, d in laid:
        spec[d].append(GROUPS[ax])
    assert_type(t, {GROUPS[ax]: ST[s] for ax, s in zip(AXES, state)},
                partition_spec=PartitionSpec(*[None if not e else e[0] if len(e) == 1 else tuple(e) for e in spec]))


def layernorm(a, d, eps):
    """layernorm over dim d (SPEC.md §19.1) with torch's ops: torch's own
    layer_norm normalises the last dims only."""
    mu = torch.mean(a, dim=d, keepdim=True)
    return (a - mu) / torch.sqrt(torch.var(a, dim=d, correction=0, keepdim=True) + eps)


def run(ins, ct):
    """The op on a fake process group of every rank, its mesh a DeviceMesh
    of the counterexample's axes, each rank a local tensor."""
    global PG, MESH
    n = DATA["ranks"]
    with fake_pg(n):
        MESH = init_device_mesh("cpu", tuple(SIZES[ax] for ax in AXES), mesh_dim_names=tuple(AXES))
        GROUPS.clear()
        GROUPS.update({ax: MESH.get_group(ax) for ax in AXES})
        PG = group_of(DATA["group"])
        mode = LocalTensorMode(n)
        with mode:
            ts = []
            for i, (s, pr) in enumerate(ins):
                t = mode.rank_map(lambda r, pr=pr: torch.tensor(pr[r], dtype=torch.float64))
                t.requires_grad_(i not in DATA["no_grad"])
                annotate(t, s, DATA["inputs"][i]["layout"])
                ts.append(t)
            try:
                with typecheck():
                    y = f(*ts)
                state = letter(y)
            except Exception as e:  # noqa: BLE001  the framework's own refusal
                return {"error": first_line(e)}
            out = {"out_state": state, "out": [y._local_tensors[r].detach().tolist() for r in range(n)]}
            if ct is not None:
                c = mode.rank_map(lambda r: torch.tensor(ct[1][r], dtype=torch.float64))
                annotate(c, ct[0], None)
                try:
                    with typecheck():
                        y.backward(c)
                    out["grads"] = [None if t.grad is None else
                                    [t.grad._local_tensors[r].detach().tolist() for r in range(n)] for t in ts]
                except Exception as e:  # noqa: BLE001
                    out["grad_error"] = first_line(e)
            return out


if __name__ == "__main__":
    main()
"#;
