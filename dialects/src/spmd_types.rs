//! PyTorch local SPMD types, seed 003 (`003_1618fa7ef4a0a05c.txt`, "The
//! typing rules for non-comms ops"), as the real spmd-types 0.3.1 behaves
//! (its per-axis typing function `infer_local_type_for_axis`, recorded in
//! `tests/fixtures/spmd_types_typing.json`). Names: `I`, `V`, `P`, `R` (its
//! R, "Replicate", is the canonical Reduced), `S(d)` for a Varying axis that
//! shards tensor dim d. Local ops never communicate, so this system inserts
//! no casts: a typing either follows from its rules or is an error.
//!
//! The real library types an op by its linearity (its `_OP_REGISTRY`:
//! LINEAR, MULTILINEAR, NONLINEAR), one mesh axis at a time, with Python
//! scalars, `no_grad` operands and `out_partial_axes` (SPEC.md §15.2). Every
//! recorded case is reproduced (`spmd-check fidelity` computes that). Where
//! seed 003 says otherwise, the rule cites both the seed sentence and the
//! recorded case id.

use crate::uneven::StepFn;
use crate::{columns, malformed, OpClass, Operand, Outcome, System};
use spmd_interp::uneven::Coll;
use spmd_semantics::uneven::Placement;
use spmd_semantics::{Dialect, State};

pub const SYSTEM: System = System {
    name: "spmd_types",
    dialect: Dialect::SpmdTypes,
    seeds: "003",
    typing,
    cast,
    collective,
};

/// The explicit casts of seed 003, which local ops never insert.
pub const CASTS: &[&str] = &["reinterpret", "convert"];

/// The version this function follows where it departs from seed 003.
pub const REAL_VERSION: &str = "spmd-types 0.3.1";

/// How an op interacts with Partial: spmd_types' `OpLinearity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linearity {
    /// A linear map of all operands jointly (add, sub, neg, sum, mean,
    /// views, cat).
    Linear,
    /// Linear in each factor separately (mul, matmul, einsum, div in its
    /// dividend).
    Multilinear,
    /// Everything else, and any op the registry does not list.
    Nonlinear,
}

impl Linearity {
    /// The linearity the real registry gives an op of this class
    /// (`op_linearity` cases of the fixture: `torch.add`/`sub`/`neg`/`sum`/
    /// `mean`/`reshape`/`transpose`/`cat` LINEAR; `torch.mul`/`matmul`/
    /// `einsum`/`div` MULTILINEAR, `div` with its divisor nonlinear; an
    /// unregistered op is NONLINEAR). A constant factor is `torch.mul` with
    /// a scalar.
    pub fn of(op: OpClass) -> Linearity {
        use OpClass::*;
        match op {
            // `torch.cumsum` is registered LINEAR (the fixture's op_linearity
            // cases).
            Add | Sub | Neg | Sum | Mean | View | Concat | Cumsum => Linearity::Linear,
            // `x // y` is `torch.div(x, y, rounding_mode="floor")`: the
            // registry's `div` entry, MULTILINEAR with the divisor nonlinear,
            // so a Partial dividend stays Partial, which the floor makes
            // unsound (SPEC.md §15.5).
            Mul | Matmul | Einsum | ScalarMul | Division | FloorDivision => Linearity::Multilinear,
            Nonlinear | Max | NarrowingCast => Linearity::Nonlinear,
        }
    }
}

/// spmd_types' typing of a local op on plain tensors (every operand takes a
/// gradient, no `out_partial_axes`). A constant factor (`ScalarMul`) is a
/// product with a Python scalar.
pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    let mut operands = Operand::tensors(inputs);
    if op == OpClass::ScalarMul {
        operands.push(Operand::Scalar);
    }
    typing_operands(op, &operands, &[])
}

/// spmd_types' typing of a local op whose operands may be Python scalars or
/// `no_grad` tensors, with the mesh axes of `out_partial` declared Partial
/// in the output (`out_partial_axes`). Each axis is typed on its own.
pub fn typing_operands(op: OpClass, operands: &[Operand], out_partial: &[usize]) -> Outcome {
    let tensors: Vec<Vec<State>> = operands
        .iter()
        .filter_map(|o| match o {
            Operand::Tensor { types, .. } => Some(types.clone()),
            Operand::Scalar => None,
        })
        .collect();
    let Some(cols) = columns(&tensors) else {
        return malformed();
    };
    let lin = Linearity::of(op);
    let mut out = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        // The column again, with scalars and no_grad marks in place.
        let mut k = 0;
        let slots: Vec<Slot> = operands
            .iter()
            .map(|o| match o {
                Operand::Scalar => Slot::Scalar,
                Operand::Tensor { no_grad, .. } => {
                    k += 1;
                    Slot::Tensor(col[k - 1], *no_grad)
                }
            })
            .collect();
        // `torch.div`'s divisor is a nonlinear argument (`nonlinear_args =
        // [1]`): a Partial divisor is refused (`torch_div_R_P_plain`), a
        // Partial dividend is scaled (`torch_div_P_R_plain` -> P). Seed 003
        // has no rule for division.
        if matches!(op, OpClass::Division | OpClass::FloorDivision)
            && matches!(slots.get(1), Some(Slot::Tensor(State::Partial, _)))
        {
            return Outcome::Error(format!(
                "mesh axis {a}: Partial type cannot propagate through the nonlinear argument of div"
            ));
        }
        match axis(lin, &slots, out_partial.contains(&a)) {
            Ok(s) => out.push(s),
            Err(e) => return Outcome::Error(format!("mesh axis {a}: {e}")),
        }
    }
    Outcome::infers(out)
}

/// spmd_types' typing of an op whose `count` operands are all Python
/// scalars, on `axes` mesh axes: Replicate on each (`linear_Scalar_Scalar`),
/// or Partial where `out_partial` asks for it and the linearity allows.
pub fn typing_scalars(op: OpClass, count: usize, axes: usize, out_partial: &[usize]) -> Outcome {
    let slots = vec![Slot::Scalar; count];
    let mut out = Vec::new();
    for a in 0..axes {
        match axis(Linearity::of(op), &slots, out_partial.contains(&a)) {
            Ok(s) => out.push(s),
            Err(e) => return Outcome::Error(format!("mesh axis {a}: {e}")),
        }
    }
    Outcome::infers(out)
}

/// One operand on one mesh axis: a tensor's state and whether it is
/// `no_grad`, or a Python scalar.
#[derive(Clone, Copy)]
enum Slot {
    Tensor(State, bool),
    Scalar,
}

/// The real per-axis rule (`infer_local_type_for_axis`).
fn axis(lin: Linearity, slots: &[Slot], out_partial: bool) -> Result<State, String> {
    use State::*;
    let states: Vec<State> = slots
        .iter()
        .filter_map(|s| match s {
            Slot::Tensor(t, _) => Some(*t),
            Slot::Scalar => None,
        })
        .collect();
    let scalar = slots.iter().any(|s| matches!(s, Slot::Scalar));
    let mixed = states.iter().any(|&s| s != states[0]);
    // `no_grad` (seed 003 is silent): where the states differ, an operand
    // that takes no gradient and is Replicate or Invariant is coerced to
    // the flavour the others need: Invariant if an operand that takes a
    // gradient is Invariant, else Replicate. `linear_R_I_nograd10` -> I
    // (the no-grad R adopts I), `linear_R_I_nograd01` -> R,
    // `linear_I_V_nograd10` -> V; a no-grad V is never coerced
    // (`linear_I_V_nograd01` is refused).
    let col: Vec<State> = if mixed {
        let grad_i = slots
            .iter()
            .any(|s| matches!(s, Slot::Tensor(Invariant, false)));
        let to = if grad_i { Invariant } else { Reduced };
        slots
            .iter()
            .filter_map(|s| match *s {
                Slot::Tensor(Reduced | Invariant, true) => Some(to),
                Slot::Tensor(t, _) => Some(t),
                Slot::Scalar => None,
            })
            .collect()
    } else {
        states
    };
    let any = |s: State| col.contains(&s);
    let inferred = if col.is_empty() {
        // Python scalars alone are Replicate (`linear_Scalar`,
        // `linear_Scalar_Scalar`); seed 003 has no scalars. Otherwise a
        // scalar takes the flavour of the tensors beside it
        // (`nonlinear_Scalar_I` -> I, `linear_Scalar_V` -> V).
        Reduced
    } else if any(Invariant) && col.iter().any(|&s| s != Invariant) {
        // Seed 003: "Invariant not allowed to mix with other types".
        return Err("Invariant type cannot mix with other types".into());
    } else if any(Partial) {
        if any(Varying) {
            // Seed 003 lists no rule for P beside V; the real library
            // refuses it under every linearity (`linear_P_V`,
            // `multilinear_P_V`, `nonlinear_V_P`).
            return Err("Partial type cannot combine with Varying".into());
        }
        let partials = col.iter().filter(|&&s| s == Partial).count();
        match lin {
            // Seed 003: only linear ops keep Partial.
            Linearity::Nonlinear => {
                return Err("Partial type cannot propagate through non-linear ops".into())
            }
            // Seed 003: "Partial + Partial -> Partial", "linear_op(Partial)
            // -> Partial". Real: a linear op needs every operand Partial, a
            // scalar included: P + 3 is affine and refused
            // (`linear_P_Scalar`), as is P + R (`linear_P_R`).
            Linearity::Linear if partials == col.len() && !scalar => Partial,
            Linearity::Linear => {
                return Err(
                    "Partial type in a linear op requires all operands to be Partial".into(),
                )
            }
            // Seed 003: "Partial * Partial is forbidden", which it gives
            // precedence over "multilinear operations can accept multiple
            // Partial arguments"; the real library agrees
            // (`multilinear_P_P`).
            Linearity::Multilinear if partials > 1 => return Err(
                "Partial * Partial is forbidden: Partial in multiple factors of a multilinear op"
                    .into(),
            ),
            // One Partial factor beside Replicate factors or scalars: P
            // (`multilinear_P_R`, `multilinear_P_Scalar`, and a lone factor,
            // `multilinear_P`). Seed 003 reads so on two axes
            // (`st_2d_mul_rp`) but lists R * P -> P as unlisted on one
            // (`st_gap_rep_times_part`), and its linear_op sentence admits
            // no lone Partial factor of mul.
            Linearity::Multilinear => Partial,
        }
    } else if any(Varying) {
        // Seed 003: "op(Varying..) -> Varying", "op(Replicate, Varying) ->
        // Varying".
        Varying
    } else {
        // Seed 003: "op(Replicate..) -> Replicate", "op(Invariant..) ->
        // Invariant" (only one flavour is left here).
        col[0]
    };
    if !out_partial {
        return Ok(inferred);
    }
    // `out_partial_axes` (not in seed 003) declares the result Partial: a V
    // or P result becomes P (`linear_V_outpartial`); R and I are refused
    // (`linear_R_outpartial`, `linear_I_outpartial`).
    match inferred {
        Varying | Partial => Ok(Partial),
        s => Err(format!(
            "out_partial_axes cannot mark a {} result as Partial",
            s.letter()
        )),
    }
}

/// How spmd_types runs a cast its typing inserts: by its table.
pub fn cast(name: &str, from: State, to: State) -> Option<(String, String)> {
    crate::elaborate::cast_by_table("spmd_types", name, from, to)
}

crate::elaborate::table_collective_reader!("spmd_types");

/// How this dialect spells a call of one of spmd_types' collectives or
/// casts (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`,
/// `redistribute`, `convert`, `reinterpret`) from `src` to `dst` (R, I, V,
/// P or S(d)) on one mesh axis, for the registry (SPEC.md §22.5): the call
/// in its collective table's language, the input's local type and the
/// output's. A Varying source or destination with no dim is the stacked
/// form (a new leading dim). `Err` says why the table has no reading.
pub fn registry_call(fun: &str, src: &str, dst: &str) -> Result<(String, String, String), String> {
    let dim = |s: &str| -> Option<usize> { s.strip_prefix("S(")?.strip_suffix(')')?.parse().ok() };
    let local = |s: &str| {
        if dim(s).is_some() {
            "V".to_string()
        } else {
            s.to_string()
        }
    };
    let (l_src, l_dst) = (local(src), local(dst));
    // The dim a call acts on, and whether it stacks: from the sharded side.
    let laid = |s: &str| match dim(s) {
        Some(d) => format!("dim={d}"),
        None => "dim=0, stack".to_string(),
    };
    let none = |why: &str| Err(format!("{fun}(src={src}, dst={dst}): {why}"));
    if src == dst && fun != "all_to_all" {
        return none("the same type on both sides is no collective of the table");
    }
    let call = match fun {
        "all_reduce" if matches!(src, "P" | "V") && matches!(dst, "R" | "I") => {
            format!("all_reduce({dst})")
        }
        "all_gather" if l_src == "V" && matches!(dst, "R" | "I") => {
            format!("all_gather({dst}, {})", laid(src))
        }
        "reduce_scatter" if src == "P" && l_dst == "V" => format!("reduce_scatter({})", laid(dst)),
        "reduce_scatter" => return none("the table reduces and scatters a Partial source only"),
        "all_to_all" => match (dim(src), dim(dst)) {
            (Some(a), Some(b)) => format!("all_to_all(split={b}, concat={a})"),
            _ => return none("the table's all_to_all names both dims"),
        },
        "redistribute" => {
            if l_src == "V" && l_dst == "V" {
                return none("the table redistributes between different local types only");
            }
            match (dim(src).or(dim(dst)), src, dst) {
                (Some(d), ..) => format!("redistribute(dim={d})"),
                // A stacked Varying side: spmd_types routes to the stacked
                // collective or cast (its docstring's table).
                (None, "V", "R" | "I") => format!("all_gather({dst}, dim=0, stack)"),
                (None, "V", "P") => "convert(V,P, dim=0, stack)".to_string(),
                (None, "R" | "I", "V") => format!("convert({src},V, dim=0, stack)"),
                (None, "P", "V") => "reduce_scatter(dim=0, stack)".to_string(),
                (None, ..) => "redistribute".to_string(),
            }
        }
        "convert" => {
            let side = if dim(dst).is_some() || l_dst == "V" {
                dst
            } else {
                src
            };
            if l_src == "V" || l_dst == "V" {
                format!("convert({l_src},{l_dst}, {})", laid(side))
            } else {
                format!("convert({l_src},{l_dst})")
            }
        }
        "reinterpret" => format!("reinterpret({l_src},{l_dst})"),
        _ => return none("not a call of the table"),
    };
    Ok((call, l_src, l_dst))
}

// ---------------------------------------------------------------------------
// Uneven shards (SPEC.md §23.9), from spmd_types 0.3.1's `_collectives.py`:
// `_AllGatherUneven.backward` is `reduce_scatter(P -> S(i), split_sizes)`
// for dst=R and a split of the cotangent keeping the rank's piece for
// dst=I; `_ReduceScatterUneven.backward` is `all_gather(S(i) -> R,
// split_sizes)`.

/// The backward spmd_types picks for a collective with `split_sizes`.
pub fn uneven_backward(
    c: &Coll,
    input: &Placement,
    output: &Placement,
) -> Option<(StepFn, String)> {
    let back = match (c, input, output) {
        (Coll::AllGather { dim }, Placement::Shard(_, s), Placement::Red) => Coll::ReduceScatter {
            dim: *dim,
            split: s.clone(),
        },
        (Coll::AllGather { dim }, Placement::Shard(_, s), Placement::Inv) => Coll::Scatter {
            dim: *dim,
            split: s.clone(),
        },
        (Coll::ReduceScatter { dim, .. }, _, _) => Coll::AllGather { dim: *dim },
        // `_AllToAllSingle.backward`: the same exchange with the input and
        // output split sizes swapped, the transpose.
        (Coll::AllToAll { .. }, _, _) => crate::uneven::transpose(c, input, output)?,
        _ => return None,
    };
    let text = back.to_string();
    Some((crate::uneven::boxed(back), text))
}
