//! JAX sharding in types, seed 000 (`000_6bb2a9a5771a72de.txt`), as the
//! real JAX 0.10.2 behaves (`shard_map`, `check_vma=True`, recorded in
//! `tests/fixtures/jax_typing.json`). Names: `Invariant` (no annotation),
//! `Varying` (axis in `vma`), `Unreduced` (`spec.unreduced`), `Reduced`
//! (`spec.reduced`).
//!
//! The typing function speaks for JAX as it actually behaves. Every recorded
//! typing case (op neg, abs, `2.0 * a`, add, sub, mul, div, sum, dot on one
//! axis) is reproduced exactly: accepted or refused, the output state, and
//! the casts JAX inserts (`pvary`, `reduced_vary_cast`). `spmd-check
//! fidelity` computes that comparison. Where seed 000 says otherwise, the
//! rule below cites both the seed sentence and the recorded case; both are
//! reported (SPEC.md §15.2, §16.3). Ops with no recorded case keep the
//! seed's rule, or `Unknown` where the seed is silent.
//!
//! Per mesh axis:
//! 1. `vma`: if some operand is Varying, every other operand is cast to
//!    Varying first: Invariant by `pvary`, Reduced by `reduced_vary_cast`,
//!    and Unreduced is refused by the inserted `pvary` (`add_V_U`). The
//!    output is Varying.
//! 2. Otherwise an Unreduced operand follows the op's unreduced rule.
//! 3. Otherwise a Reduced operand follows the op's reduced rule.
//! 4. Otherwise every operand is Invariant and so is the output.
//!
//! A Python scalar operand is a weakly typed Invariant value (`mul_const_R`
//! is refused with the I + R error; `mul_const_V` pvaries the constant).

use crate::{columns, malformed, Cast, OpClass, Operand, Outcome, System};
use spmd_interp::Collective;
use spmd_semantics::{Dialect, State, Type};

/// The newest JAX on the registry (0.12.0.1). Older recorded versions are
/// asked for by name: `jax@0.11`, `jax@0.10`.
pub const SYSTEM: System = System {
    name: "jax",
    dialect: Dialect::Jax,
    seeds: "000",
    typing,
    cast,
    collective,
};

/// JAX 0.11.2: as 0.10.2, and `div` of an Unreduced numerator by a Reduced
/// denominator (`div_U_R`).
pub const SYSTEM_0_11: System = System {
    name: "jax@0.11",
    typing: typing_0_11,
    ..SYSTEM
};

/// JAX 0.10.2, recorded in `tests/fixtures/jax_typing.json`.
pub const SYSTEM_0_10: System = System {
    name: "jax@0.10",
    typing: typing_0_10,
    ..SYSTEM
};

/// JAX 0.12.0.1 with `jax.config.update('jax_auto_pcast', False)`
/// (`shard_map` still checks vma), recorded in
/// `peers/recorded/jax_options_0.12.0.1.json`: JAX inserts no `pvary` and
/// no `reduced_vary_cast` of its own. Where the default inserts one, before
/// a local op or a collective, this reading refuses with JAX's error; the
/// author writes `pcast(x, to='varying')`. Everything else is the default.
/// (Floating-point values: for integer dtypes JAX 0.12 still inserts the
/// cast, and this tool's values are float64's.)
pub const SYSTEM_NO_AUTO_PCAST: System = System {
    name: "jax(auto_pcast=False)",
    typing: typing_no_auto_pcast,
    collective: collective_no_auto_pcast,
    ..SYSTEM
};

/// The name `shard_map(..., check_vma=False)` would have, refused where a
/// dialect is read: without vma checking JAX types nothing inside the body
/// and binds other primitives (psum transposes to psum, pcast to varying is
/// no primitive at all), and its gradients come out right only through
/// shard_map's own transpose at the boundary (the cotangent of a `P()`
/// output divided by the axis size, the gradient of a `P()` input summed),
/// recorded in `peers/recorded/jax_options_0.12.0.1.json`. A typed rule of
/// this tool cannot say that.
pub const NO_CHECK_VMA: &str = "jax(check_vma=False)";

/// Why `jax(check_vma=False)` is not a dialect here.
pub fn no_check_vma_reason() -> String {
    format!(
        "dialect `{NO_CHECK_VMA}` is not modelled: with check_vma=False JAX tracks no types inside shard_map (every op and collective is accepted, no cast is inserted, psum transposes to psum) and gradients come out right only through shard_map's boundary transpose (a P() output's cotangent divided by the axis size, a P() input's gradient summed), which a typed rule does not describe; check the program with dialect `jax` (check_vma=True), whose gradients through shard_map are the same wherever both accept (recorded, JAX 0.12.0.1)"
    )
}

/// JAX's typing with `jax_auto_pcast=False`: operands whose varying axes
/// differ are refused, not cast (see [`SYSTEM_NO_AUTO_PCAST`]).
pub fn typing_no_auto_pcast(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    let varying = |t: &Vec<State>| -> Vec<usize> {
        (0..t.len()).filter(|&a| t[a] == State::Varying).collect()
    };
    let differ = inputs.windows(2).any(|w| varying(&w[0]) != varying(&w[1]));
    match typing(op, inputs) {
        Outcome::Infers { casts, .. } if !casts.is_empty() => refuse_mismatch(op),
        // The default's own refusal of a Varying beside an Unreduced
        // operand comes from the pvary it would insert; without auto_pcast
        // JAX refuses the mismatch first.
        Outcome::Error(_) if differ => refuse_mismatch(op),
        o => o,
    }
}

fn refuse_mismatch(op: OpClass) -> Outcome {
    Outcome::Error(format!(
        "Primitive {} requires varying manual axes to match (jax_auto_pcast=False: JAX inserts no pvary; write pcast(x, to='varying'))",
        op.name()
    ))
}

/// JAX's reading of a collective with `jax_auto_pcast=False`: the default
/// reading, refused where it starts with a cast JAX would insert.
pub fn collective_no_auto_pcast(
    call: &str,
    t: &Type,
    axes: &[String],
    want: Option<&Type>,
) -> Result<crate::elaborate::Reading, String> {
    let r = collective(call, t, axes, want)?;
    if r.casts.is_empty() {
        return Ok(r);
    }
    let name = crate::elaborate::base_name(call);
    Err(match name {
        "psum" | "pmean" => "psum is a variant->invariant collective: the axes passed to it must be varying in its input (jax_auto_pcast=False: JAX inserts no pvary; write pcast(x, to='varying'))".to_string(),
        _ => format!(
            "Collective {} must be applied to a device-varying type (jax_auto_pcast=False: JAX inserts no pvary; write pcast(x, to='varying'))",
            r.call.name
        ),
    })
}

/// The recorded JAX versions whose typing of local ops differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V0_10,
    V0_11,
    V0_12,
}

impl Version {
    /// The version a recorded `x.y.z` follows (the newest at or below it).
    pub fn of(recorded: &str) -> Version {
        let mut it = recorded.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        match (it.next().unwrap_or(0), it.next().unwrap_or(0)) {
            (0, m) if m <= 10 => Version::V0_10,
            (0, 11) => Version::V0_11,
            _ => Version::V0_12,
        }
    }
    /// The dialect that follows this version.
    pub fn system(self) -> &'static System {
        match self {
            Version::V0_10 => &SYSTEM_0_10,
            Version::V0_11 => &SYSTEM_0_11,
            Version::V0_12 => &SYSTEM,
        }
    }
    fn text(self) -> &'static str {
        match self {
            Version::V0_10 => "jax 0.10.2",
            Version::V0_11 => "jax 0.11.2",
            Version::V0_12 => "jax 0.12.0.1",
        }
    }
}

/// The casts JAX inserts, and the no-op casts and collectives of seed 000's
/// "State Transition Primitives" (the catalogue holds their meanings).
pub const PVARY: &str = "pvary";
pub const REDUCED_VARY_CAST: &str = "reduced_vary_cast";
pub const CASTS: &[&str] = &[
    "pvary",
    "preduced",
    "vary_unreduced_cast",
    "reduced_vary_cast",
];

/// The version of JAX `SYSTEM` follows where it departs from seed 000.
pub const REAL_VERSION: &str = "jax 0.12.0.1";

/// How an op treats `reduced` on an axis where no operand is Varying.
enum ReducedRule {
    /// `unop_reduced_rule`: the output's `reduced` is the input's. Seed 000
    /// and real JAX agree (`neg_R`, `abs_R`, `sum_R` stay Reduced).
    Unary,
    /// Element-wise n-ary ops. Seed 000: "n-ary ops: the non-empty `reduced`
    /// sets must be equal; inputs without `reduced` are skipped" (so I + R
    /// -> R). Real JAX refuses an Invariant operand beside a Reduced one:
    /// `ShardingTypeError: Inputs cannot be replicated on the same axes that
    /// another input is reduced on` (`add_I_R`, `add_R_I`, `sub_I_R`,
    /// `mul_I_R`, `div_R_I`, `mul_const_R`); all Reduced stays Reduced
    /// (`add_R_R`, `mul_R_R`, `div_R_R`).
    Nary,
    /// `_dot_general_reduced_rule`: the output gets no `reduced`. Seed 000
    /// and real JAX agree: I·R, R·I and R·R give Invariant (`dot_I_R`,
    /// `dot_R_I`, `dot_R_R`).
    DotGeneral,
    /// No `reduced_rule` (seed 000: reduce_max): NotImplementedError if any
    /// input is Reduced. No recorded case.
    None,
    /// The seed's table does not list the op, and no case is recorded.
    Unlisted,
}

fn reduced_rule(op: OpClass, arity: usize) -> ReducedRule {
    use OpClass::*;
    match op {
        // Unary ops (sin, exp, neg, ...), convert_element_type, transpose,
        // squeeze, dynamic_slice, reduce_sum: "Propagates from input".
        Neg | Nonlinear | NarrowingCast | View | Sum | Cumsum if arity == 1 => ReducedRule::Unary,
        // Binary ops (add, mul, sub, div), concatenate,
        // dynamic_update_slice: "All inputs must match, then propagates".
        // A constant factor is an Invariant operand (`mul_const_R`).
        Add | Sub | Mul | Division | FloorDivision | Concat | Nonlinear | NarrowingCast | View
        | Sum | Neg | ScalarMul | Cumsum => ReducedRule::Nary,
        Matmul | Einsum => ReducedRule::DotGeneral,
        // reduce_max has no reduced_rule in the seed's list.
        Max => ReducedRule::None,
        // jnp.mean is not in the list (reduce_sum is).
        Mean => ReducedRule::Unlisted,
    }
}

/// How an op treats an Unreduced operand on an axis where no operand is
/// Varying. Seed 000 states no rule for local ops on Unreduced inputs; these
/// are real JAX's, one per primitive and version, from the recorded cases
/// (0.10.2, 0.11.2, 0.12.0.1).
enum UnreducedRule {
    /// add (and sub from 0.12): every operand Unreduced gives Unreduced
    /// (`add_U_U`, `sub_U_U`); Unreduced beside anything else is refused
    /// (`add_U_I`, `add_U_R`: "lhs is unreduced while rhs is not").
    Add,
    /// mul: one Unreduced factor beside Reduced ones gives Unreduced
    /// (`mul_U_R`, `mul_R_U`); two Unreduced factors are refused ("mul is
    /// bilinear", `mul_U_U`); an Invariant factor is refused ("should be
    /// reduced along the same axes", `mul_U_I`, `mul_const_U`).
    Mul,
    /// div from 0.11: an Unreduced numerator over a Reduced denominator
    /// stays Unreduced (`div_U_R`); an Unreduced denominator is refused
    /// (`div_U_U`, `div_R_U`, `div_I_U`), and so is an Invariant one under an
    /// Unreduced numerator (`div_U_I`).
    Div,
    /// dot_general: any Unreduced operand is refused (`dot_U_R`, `dot_U_U`,
    /// `dot_I_U`), even where mul accepts it.
    DotGeneral,
    /// reduce_sum, and neg from 0.12: Unreduced stays Unreduced (`sum_U`,
    /// `neg_U`).
    Keep,
    /// abs from 0.12: "abs is a non-linear operation and cannot accept
    /// input that is unreduced" (`abs_U`).
    NonLinear,
    /// neg, sub, div, abs before the versions above: `NotImplementedError:
    /// unreduced rule for <op> is not implemented` (`neg_U`, `sub_U_U`,
    /// `div_U_R`, `abs_U`).
    NotImplemented,
    /// No recorded case and no seed rule.
    Unknown,
}

fn unreduced_rule(op: OpClass, v: Version) -> UnreducedRule {
    use OpClass::*;
    match op {
        Add => UnreducedRule::Add,
        Sub if v >= Version::V0_12 => UnreducedRule::Add,
        Mul | ScalarMul => UnreducedRule::Mul,
        Division if v >= Version::V0_11 => UnreducedRule::Div,
        Matmul | Einsum => UnreducedRule::DotGeneral,
        Sum => UnreducedRule::Keep,
        Neg if v >= Version::V0_12 => UnreducedRule::Keep,
        Nonlinear if v >= Version::V0_12 => UnreducedRule::NonLinear,
        Neg | Sub | Division | Nonlinear | FloorDivision => UnreducedRule::NotImplemented,
        Mean | Max | View | Concat | NarrowingCast | Cumsum => UnreducedRule::Unknown,
    }
}

/// [`typing`] as JAX 0.11.2 types local ops.
pub fn typing_0_11(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_in(Version::V0_11, op, inputs)
}

/// [`typing`] as JAX 0.10.2 types local ops.
pub fn typing_0_10(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_in(Version::V0_10, op, inputs)
}

/// JAX's typing of a local op on plain tensors. A constant factor
/// (`ScalarMul`) is typed as JAX types `2.0 * a`: a product with an
/// Invariant scalar (`mul_const_*`). A cast JAX puts on the constant itself
/// (`pvary` in `mul_const_V`) is left out here: the constant is no input of
/// the typing.
pub fn typing(op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    typing_in(Version::V0_12, op, inputs)
}

fn typing_in(v: Version, op: OpClass, inputs: &[Vec<State>]) -> Outcome {
    if op == OpClass::ScalarMul && inputs.len() == 1 {
        let mut operands = vec![Operand::Scalar];
        operands.extend(Operand::tensors(inputs));
        return match typing_operands_in(v, OpClass::Mul, &operands) {
            Outcome::Infers { output, casts } => Outcome::Infers {
                output,
                casts: casts
                    .into_iter()
                    .filter(|c| c.input > 0)
                    .map(|c| Cast {
                        input: c.input - 1,
                        ..c
                    })
                    .collect(),
            },
            o => o,
        };
    }
    typing_operands_in(v, op, &Operand::tensors(inputs))
}

/// JAX's typing of a local op whose operands may be Python scalars (each an
/// Invariant value; `no_grad` means nothing to JAX's typing). Cast inputs
/// index `operands`.
pub fn typing_operands(op: OpClass, operands: &[Operand]) -> Outcome {
    typing_operands_in(Version::V0_12, op, operands)
}

/// [`typing_operands`] as JAX version `v` types them.
pub fn typing_operands_in(v: Version, op: OpClass, operands: &[Operand]) -> Outcome {
    let axes = operands.iter().find_map(|o| match o {
        Operand::Tensor { types, .. } => Some(types.len()),
        Operand::Scalar => None,
    });
    let Some(axes) = axes else {
        return malformed();
    };
    let inputs: Vec<Vec<State>> = operands
        .iter()
        .map(|o| match o {
            Operand::Tensor { types, .. } => types.clone(),
            Operand::Scalar => vec![State::Invariant; axes],
        })
        .collect();
    let Some(cols) = columns(&inputs) else {
        return malformed();
    };
    let mut output = Vec::new();
    let mut casts = Vec::new();
    for (a, col) in cols.iter().enumerate() {
        match axis(v, op, a, col, &mut casts) {
            Ok(s) => output.push(s),
            Err(o) => return o,
        }
    }
    Outcome::Infers { output, casts }
}

/// One mesh axis: the output state, or the outcome that ends the typing.
fn axis(
    v: Version,
    op: OpClass,
    a: usize,
    col: &[State],
    casts: &mut Vec<Cast>,
) -> Result<State, Outcome> {
    use State::*;
    let any = |s: State| col.contains(&s);
    let err = |e: String| Err(Outcome::Error(e));
    if any(Varying) {
        // Seed 000 names `pvary` (Invariant -> Varying, "mark replicated as
        // varying") but does not spell out its insertion, and says nothing
        // of Reduced meeting Varying. Real JAX inserts pvary on an Invariant
        // operand (`add_I_V`, `dot_V_I`) and reduced_vary_cast on a Reduced
        // one (`add_V_R`, `mul_R_V`, `dot_R_V`); an Unreduced one makes the
        // inserted pvary fail (`add_V_U`, `dot_U_V`).
        if any(Partial) {
            return err(format!(
                "ValueError: pvary cannot accept args which are unreduced (mesh axis {a})"
            ));
        }
        for (i, &s) in col.iter().enumerate() {
            let name = match s {
                Invariant => PVARY,
                Reduced => REDUCED_VARY_CAST,
                _ => continue,
            };
            casts.push(Cast {
                input: i,
                axis: a,
                name,
                from: s,
                to: Varying,
            });
        }
        return Ok(Varying);
    }
    if any(Partial) {
        // Seed 000: no rule for local ops on Unreduced. Real JAX has one
        // per primitive and version (UnreducedRule).
        let all_u = col.iter().all(|&s| s == Partial);
        let units = col.iter().filter(|&&s| s == Partial).count();
        return match unreduced_rule(op, v) {
            UnreducedRule::Keep if col.len() == 1 => Ok(Partial),
            UnreducedRule::Add if all_u => Ok(Partial),
            UnreducedRule::Add => err(format!(
                "ShardingTypeError: an operand is unreduced on mesh axis {a} while another is not; `{}` does not allow this",
                if op == OpClass::Sub { "sub" } else { "add" }
            )),
            UnreducedRule::Div if col.len() == 2 && col[1] == Partial => err(format!(
                "ValueError: the denominator cannot be unreduced passed to `div` (mesh axis {a})"
            )),
            UnreducedRule::Div if col.len() == 2 && col[1] == Reduced => Ok(Partial),
            UnreducedRule::Div => err(format!(
                "ValueError: the denominator should be reduced along mesh axis {a}, where the numerator is unreduced"
            )),
            UnreducedRule::NonLinear => err(format!(
                "ShardingTypeError: {} is a non-linear operation and cannot accept input that is unreduced (mesh axis {a})",
                op.name()
            )),
            UnreducedRule::Mul if units > 1 => err(format!(
                "ShardingTypeError: operands of `mul` cannot both be unreduced on mesh axis {a} since mul is bilinear"
            )),
            UnreducedRule::Mul if any(Invariant) => err(format!(
                "ShardingTypeError: a factor of `mul` should be reduced along mesh axis {a}, where another is unreduced"
            )),
            UnreducedRule::Mul => Ok(Partial),
            UnreducedRule::DotGeneral => err(format!(
                "ShardingTypeError: lhs or rhs passed to dot_general cannot be unreduced (mesh axis {a})"
            )),
            UnreducedRule::NotImplemented => err(format!(
                "NotImplementedError: unreduced rule for {} is not implemented",
                op.name()
            )),
            UnreducedRule::Keep | UnreducedRule::Unknown => Err(Outcome::Unknown(format!(
                "neither seed 000 nor a recorded {} case gives {} a rule for Unreduced inputs",
                v.text(),
                op.name()
            ))),
        };
    }
    if any(Reduced) {
        return match reduced_rule(op, col.len()) {
            ReducedRule::Unary => Ok(Reduced),
            ReducedRule::Nary if any(Invariant) => err(format!(
                "ShardingTypeError: Inputs cannot be replicated on the same axes that another input is reduced on (mesh axis {a})"
            )),
            ReducedRule::Nary => Ok(Reduced),
            ReducedRule::DotGeneral => Ok(Invariant),
            ReducedRule::None => err(format!(
                "NotImplementedError: reduced rule for {} not implemented",
                op.name()
            )),
            ReducedRule::Unlisted => Err(Outcome::Unknown(format!(
                "seed 000 does not list {} among the ops with a reduced rule",
                op.name()
            ))),
        };
    }
    Ok(Invariant)
}

/// JAX's primitive name for a catalogue collective at its states (seed 000,
/// and jax 0.10.2's pmean, ppermute and all_to_all), where JAX has one:
/// how `transposes --dialect jax` spells a backward.
pub fn primitive_name(c: &Collective) -> Option<&'static str> {
    use spmd_interp::Kind;
    use State::*;
    Some(match (&c.kind, c.src, c.dst) {
        (Kind::Reinterpret, Invariant, Varying) => "pvary",
        (Kind::Reinterpret, Invariant, Reduced) => "preduced",
        (Kind::Reinterpret, Varying, Partial) => "vary_unreduced_cast",
        (Kind::Reinterpret, Reduced, Varying) => "reduced_vary_cast",
        (Kind::AllGather { .. }, Varying, Reduced) => "all_gather_reduced",
        (Kind::AllGather { .. }, Varying, Invariant) => "all_gather_invariant",
        (Kind::AllGather { .. }, Varying, Varying) => "all_gather",
        (Kind::AllReduce, Varying, Invariant) => "psum_invariant",
        (Kind::AllReduce, Partial, Invariant) => "unreduced_psum",
        (Kind::ReduceScatter { .. }, Varying, Varying) => "psum_scatter",
        (Kind::ReduceScatter { .. }, Partial, Varying) => "unreduced_psum_scatter",
        (Kind::PMean, _, _) => "pmean",
        (Kind::PPermute { .. }, _, _) => "ppermute",
        (Kind::AllToAll { .. }, _, _) => "all_to_all",
        _ => return None,
    })
}

/// How JAX runs a cast its typing inserts (or `pcast` names): the catalogue
/// call and JAX's transpose of it (`jax/_src/lax/parallel.py` in 0.12:
/// pvary and psum_invariant, preduced and unreduced_psum,
/// vary_unreduced_cast and reduced_vary_cast transpose to each other).
pub fn cast(name: &str, from: State, to: State) -> Option<(String, String)> {
    use State::*;
    let (f, b) = match (name, from, to) {
        (PVARY, Invariant, Varying) => (PVARY, "psum_invariant"),
        (REDUCED_VARY_CAST, Reduced, Varying) => (REDUCED_VARY_CAST, "vary_unreduced_cast"),
        ("preduced", Invariant, Reduced) => ("preduced", "unreduced_psum"),
        ("vary_unreduced_cast", Varying, Partial) => ("vary_unreduced_cast", REDUCED_VARY_CAST),
        _ => return None,
    };
    Some((f.into(), b.into()))
}

/// JAX's word for a state in `pcast` errors.
fn word(s: State) -> &'static str {
    match s {
        State::Invariant => "invarying",
        State::Varying => "varying",
        State::Partial => "unreduced",
        State::Reduced => "reduced",
    }
}

/// JAX's `pcast` legality (`_pcast_funcs` in 0.12): the cast it runs from
/// `from` to the destination named `to`, or its error.
pub fn pcast(from: State, to: &str) -> Result<&'static str, String> {
    use State::*;
    match (from, to) {
        (Invariant, "varying") => Ok(PVARY),
        (Invariant, "reduced") => Ok("preduced"),
        (Varying, "unreduced") => Ok("vary_unreduced_cast"),
        (Reduced, "varying") => Ok(REDUCED_VARY_CAST),
        (_, "varying" | "reduced" | "unreduced") => Err(format!(
            "ValueError: Unsupported pcast from={}, to='{to}'",
            word(from)
        )),
        _ => Err(format!(
            "ValueError: Got unexpected `to` value '{to}'. Allowed `to` values are: {{'varying', 'unreduced', 'reduced'}}"
        )),
    }
}

/// A call's keyword argument, unquoted.
fn kwarg(call: &str, key: &str) -> Option<String> {
    crate::elaborate::call_args(call).into_iter().find_map(|a| {
        let (k, v) = a.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
    })
}

/// The call with its name replaced and the keywords in `drop` removed.
fn respell(call: &str, name: &str, drop: &[&str]) -> String {
    let args: Vec<String> = crate::elaborate::call_args(call)
        .into_iter()
        .filter(|a| {
            !a.split_once('=')
                .is_some_and(|(k, _)| drop.contains(&k.trim()))
        })
        .collect();
    if args.is_empty() {
        name.to_string()
    } else {
        format!("{name}({})", args.join(", "))
    }
}

/// The inverse of a `perm` argument: pairs `(s, d)` become `(d, s)`; a list
/// `perm[s] = d` (with `_` for none) is inverted.
fn inverse_perm(call: &str) -> Option<String> {
    let p = crate::elaborate::call_args(call)
        .into_iter()
        .find_map(|a| {
            a.split_once('=')
                .filter(|(k, _)| k.trim() == "perm")
                .map(|(_, v)| v.trim().to_string())
        })?;
    let inner = p.strip_prefix('[')?.strip_suffix(']')?;
    if inner.contains('(') {
        let pairs: Vec<String> = inner
            .split(')')
            .filter_map(|x| {
                let x = x.trim_start_matches([',', ' ']).trim().strip_prefix('(')?;
                let (a, b) = x.split_once(',')?;
                Some(format!("({}, {})", b.trim(), a.trim()))
            })
            .collect();
        return Some(format!("[{}]", pairs.join(", ")));
    }
    let entries: Vec<&str> = inner.split(',').map(str::trim).collect();
    let mut inv = vec!["_".to_string(); entries.len()];
    for (s, d) in entries.iter().enumerate() {
        if let Ok(d) = d.parse::<usize>() {
            *inv.get_mut(d)? = s.to_string();
        }
    }
    Some(format!("[{}]", inv.join(",")))
}

/// JAX's reading of a collective call inside `shard_map(check_vma=True)`,
/// as jax 0.12 behaves (tests/fixtures/jax_pipeline_0.12.0.1.json): the
/// `pvary` it inserts on Invariant axes before a collective that needs
/// Varying ones (`insert_collective_pvary`), the primitive it binds for the
/// input's states (psum of Unreduced is `unreduced_psum`, `all_gather(...,
/// to='reduced')` is `all_gather_reduced`, ...), the output type and JAX's
/// transpose; or JAX's error.
pub fn collective(
    call: &str,
    t: &Type,
    axes: &[String],
    want: Option<&Type>,
) -> Result<crate::elaborate::Reading, String> {
    use crate::elaborate::{acting_axes, base_name, collective_by_table, Call, Reading};
    use State::*;
    let name = base_name(call);
    let varying_family = [
        "psum",
        "pmean",
        "all_gather",
        "psum_scatter",
        "ppermute",
        "all_to_all",
    ];
    if !varying_family.contains(&name) && name != "pcast" && name != PVARY {
        return collective_by_table(&SYSTEM, call, t, axes, want);
    }
    let at = acting_axes(call, t, axes, &[Varying, Invariant, Partial, Reduced])?;
    let named = |a: usize| -> String {
        if axes.len() == 1 {
            String::new()
        } else {
            format!("axis={}", axes[a])
        }
    };
    let with_axis = |f: &str, a: usize| -> String {
        let n = named(a);
        if n.is_empty() {
            f.to_string()
        } else {
            format!("{f}({n})")
        }
    };
    let mut cur = t.clone();
    let mut casts = Vec::new();
    let set = |t: &Type, s: State| {
        let mut o = t.clone();
        for &a in &at {
            o.states[a] = s;
            o.layout[a] = None;
        }
        o
    };
    if name == "pcast" || name == PVARY {
        let to = match name {
            "pcast" => {
                kwarg(call, "to").ok_or("pcast: give its destination, e.g. pcast(to='varying')")?
            }
            _ => "varying".to_string(),
        };
        let src = cur.states[at[0]];
        if at.iter().any(|&a| cur.states[a] != src) {
            return Err(format!("`{call}` acts on mesh axes in different states"));
        }
        let f = pcast(src, &to)?;
        let (fw, bw) = cast(
            f,
            src,
            match f {
                PVARY | REDUCED_VARY_CAST => Varying,
                "preduced" => Reduced,
                _ => Partial,
            },
        )
        .expect("every pcast has a cast");
        let out = set(
            &cur,
            match f {
                PVARY | REDUCED_VARY_CAST => Varying,
                "preduced" => Reduced,
                _ => Partial,
            },
        );
        let axis = at.iter().map(|&a| axes[a].as_str()).collect::<Vec<_>>();
        let tail = if axes.len() > 1 {
            format!("(axes=[{}])", axis.join(", "))
        } else {
            String::new()
        };
        return Ok(Reading {
            casts: vec![],
            call: Call {
                forward: format!("{fw}{tail}"),
                output: out,
                backward: Some(format!("{bw}{tail}")),
                name: format!("pcast to {to} ({f})"),
            },
        });
    }
    let any = |t: &Type, s: State| at.iter().any(|&a| t.states[a] == s);
    let to = kwarg(call, "to");
    if name != "all_gather" && to.is_some() {
        return Err(format!(
            "TypeError: {name}() got an unexpected keyword argument 'to'"
        ));
    }
    // Unreduced inputs: psum and psum_scatter have their own primitives.
    if any(&cur, Partial) {
        if at.iter().all(|&a| cur.states[a] == Partial) {
            match name {
                "psum" => {
                    return Ok(Reading {
                        casts,
                        call: Call {
                            forward: respell(call, "unreduced_psum", &[]),
                            output: set(&cur, Invariant),
                            backward: Some(respell(call, "preduced", &[])),
                            name: "unreduced_psum".into(),
                        },
                    })
                }
                "psum_scatter" => {
                    return Ok(Reading {
                        casts,
                        call: Call {
                            forward: respell(call, "unreduced_psum_scatter", &[]),
                            output: set(&cur, Varying),
                            backward: Some(respell(call, "all_gather_reduced", &[])),
                            name: "unreduced_psum_scatter".into(),
                        },
                    })
                }
                _ => {}
            }
        }
        return Err("ValueError: pvary cannot accept args which are unreduced".into());
    }
    if name == "all_gather" && to.as_deref() == Some("reduced") {
        if any(&cur, Invariant) || any(&cur, Reduced) {
            return Err(
                "ValueError: all_gather_reduced only accepts inputs that are varying".into(),
            );
        }
        return Ok(Reading {
            casts,
            call: Call {
                forward: respell(call, "all_gather_reduced", &["to"]),
                output: set(&cur, Reduced),
                backward: Some(respell(call, "unreduced_psum_scatter", &["to"])),
                name: "all_gather_reduced".into(),
            },
        });
    }
    if any(&cur, Reduced) {
        return Err("ValueError: pvary cannot accept args which are reduced".into());
    }
    // Invariant axes are pvaried first (jax_auto_pcast).
    for &a in &at {
        if cur.states[a] == Invariant {
            let mut o = cur.clone();
            o.states[a] = Varying;
            casts.push(Call {
                forward: with_axis(PVARY, a),
                output: o.clone(),
                backward: Some(with_axis("psum_invariant", a)),
                name: PVARY.into(),
            });
            cur = o;
        }
    }
    let (fw, out, bw, prim) = match (name, to.as_deref()) {
        ("psum", _) => (
            respell(call, "psum_invariant", &[]),
            set(&cur, Invariant),
            respell(call, PVARY, &[]),
            "psum_invariant",
        ),
        ("pmean", _) => (
            call.to_string(),
            set(&cur, Invariant),
            "divide_by_group_size |> pvary".to_string(),
            "pmean",
        ),
        ("all_gather", None | Some("varying")) => (
            respell(call, "all_gather", &["to"]),
            set(&cur, Varying),
            respell(call, "psum_scatter", &["to"]),
            "all_gather",
        ),
        ("all_gather", Some("invarying")) => {
            let d = kwarg(call, "dim").unwrap_or("0".into());
            // The untiled gather's transpose takes this rank's entry of the
            // stacked dim and drops the dim.
            let untiled = crate::elaborate::call_args(call)
                .iter()
                .any(|a| a.trim() == "stack");
            (
                respell(call, "all_gather_invariant", &["to"]),
                set(&cur, Invariant),
                if untiled {
                    format!("convert(I,V, dim={d}, stack)")
                } else {
                    format!("convert(I,V, dim={d})")
                },
                "all_gather_invariant",
            )
        }
        ("all_gather", Some(v)) => {
            return Err(format!(
            "ValueError: all_gather's `to` is one of 'varying', 'reduced', 'invarying'; got '{v}'"
        ))
        }
        ("psum_scatter", _) => (
            call.to_string(),
            set(&cur, Varying),
            respell(call, "all_gather", &[]),
            "psum_scatter",
        ),
        ("ppermute", _) => {
            let inv = inverse_perm(call).ok_or("ppermute: give `perm`")?;
            let args: Vec<String> = crate::elaborate::call_args(call)
                .into_iter()
                .map(|a| match a.split_once('=') {
                    Some((k, _)) if k.trim() == "perm" => format!("perm={inv}"),
                    _ => a,
                })
                .collect();
            (
                call.to_string(),
                set(&cur, Varying),
                format!("ppermute({})", args.join(", ")),
                "ppermute",
            )
        }
        ("all_to_all", _) => {
            let args: Vec<String> = crate::elaborate::call_args(call)
                .into_iter()
                .map(|a| match a.split_once('=') {
                    Some((k, v)) if matches!(k.trim(), "split" | "split_axis") => {
                        format!("concat={}", v.trim())
                    }
                    Some((k, v)) if matches!(k.trim(), "concat" | "concat_axis") => {
                        format!("split={}", v.trim())
                    }
                    _ => a,
                })
                .collect();
            // jax 0.12.0.1's own vjp of an untiled all_to_all whose split and
            // concat differ raises (a cotangent shape error: its transpose
            // rule inserts the new dim a second time); the backward here is
            // the transpose that rule means, and the note says so.
            let arg = |k: &[&str]| k.iter().find_map(|k| kwarg(call, k));
            let untiled = arg(&["tiled"]).is_some_and(|t| t.eq_ignore_ascii_case("false"))
                || arg(&["stack"]).is_some_and(|t| t.eq_ignore_ascii_case("true"))
                || crate::elaborate::call_args(call)
                    .iter()
                    .any(|a| a.trim() == "stack");
            let moved = arg(&["split", "split_axis"]) != arg(&["concat", "concat_axis"]);
            (
                call.to_string(),
                set(&cur, Varying),
                format!("all_to_all({})", args.join(", ")),
                if untiled && moved {
                    "all_to_all (real jax 0.12.0.1 raises on this vjp)"
                } else {
                    "all_to_all"
                },
            )
        }
        _ => unreachable!("names of the varying family"),
    };
    Ok(Reading {
        casts,
        call: Call {
            forward: fw,
            output: out,
            backward: Some(bw),
            name: prim.into(),
        },
    })
}

/// One primitive of a jaxpr JAX recorded (SPEC.md §22.5): its name, its
/// parameters in JAX's spelling, its literal or constant operands (`None`
/// for a traced one), its operands' shapes, and its result's state
/// (`Varying`, ...) where recorded.
#[derive(Clone, Debug, Default)]
pub struct Prim {
    pub name: String,
    pub params: Vec<(String, String)>,
    pub operands: Vec<Option<String>>,
    pub shapes: Vec<Vec<usize>>,
    pub out: Option<String>,
}

/// The catalogue composition (`a |> b`) that reads a recorded jaxpr of a
/// collective or its transpose on one mesh axis of `n` devices, or why
/// there is none. A composition names the state each step ends in, as JAX
/// typed it, so that it reads one way only.
///
/// One local pattern is read as a whole: `axis_index`, index arithmetic on
/// it, and a `dynamic_slice` that keeps one n-th of a dim (then, untiled, a
/// `squeeze` of it) is each rank taking its own block: `convert(dim=d)`,
/// the transpose JAX gives `all_gather(..., to='invarying')`. The reading
/// is confirmed on the recorded values before anything is judged.
pub fn read_jaxpr(eqns: &[Prim], n: usize) -> Result<String, String> {
    if eqns.is_empty() {
        return Err("the call binds no primitive".into());
    }
    // Steps: a catalogue call and the state it ends in.
    let mut steps: Vec<(String, Option<String>)> = Vec::with_capacity(eqns.len());
    let mut rest = eqns;
    if let Some((own, used)) = own_block(eqns, n) {
        steps.push((own, eqns[used - 1].out.clone()));
        rest = &eqns[used..];
    }
    for e in rest {
        let param = |k: &str| {
            e.params
                .iter()
                .find(|(p, _)| p == k)
                .map(|(_, v)| v.clone())
        };
        let literal = |i: usize| e.operands.get(i).cloned().flatten();
        steps.push((catalogue_call(&e.name, &param, &literal, n)?, e.out.clone()));
    }
    if steps.len() == 1 {
        return Ok(steps.remove(0).0);
    }
    let letter = |s: &str| match s {
        "Invariant" => Some("I"),
        "Varying" => Some("V"),
        "Unreduced" => Some("P"),
        "Reduced" => Some("R"),
        _ => None,
    };
    let named: Vec<String> = steps
        .iter()
        .map(|(c, out)| match out.as_deref().and_then(letter) {
            None => c.clone(),
            Some(l) => match c.strip_suffix(')') {
                Some(open) => format!("{open}, {l})"),
                None => format!("{c}({l})"),
            },
        })
        .collect();
    Ok(named.join(" |> "))
}

/// A leading `axis_index … dynamic_slice [squeeze]` keeping this rank's
/// n-th of one dim, read as `convert(dim=d)` (`, stack` when the kept dim
/// of size 1 is squeezed away), with the number of primitives it spans.
fn own_block(eqns: &[Prim], n: usize) -> Option<(String, usize)> {
    const INDEX_ARITHMETIC: &[&str] = &[
        "axis_index",
        "pvary",
        "convert_element_type",
        "mul",
        "add",
        "sub",
        "lt",
        "select_n",
    ];
    if !eqns.iter().any(|e| e.name == "axis_index") {
        return None;
    }
    let at = eqns.iter().position(|e| e.name == "dynamic_slice")?;
    // Before the slice: index arithmetic only (a pvary there casts a
    // literal index, not the data).
    if !eqns[..at]
        .iter()
        .all(|e| INDEX_ARITHMETIC.contains(&e.name.as_str()))
    {
        return None;
    }
    let slice = &eqns[at];
    let full = slice.shapes.first()?;
    let sizes_text = slice
        .params
        .iter()
        .find(|(k, _)| k == "slice_sizes")?
        .1
        .clone();
    let sizes: Vec<usize> = sizes_text
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|x| x.trim().parse().ok())
        .collect::<Option<_>>()?;
    if sizes.len() != full.len() {
        return None;
    }
    let cut: Vec<usize> = (0..full.len()).filter(|&i| sizes[i] != full[i]).collect();
    let [d] = cut[..] else { return None };
    if full[d] != n * sizes[d] {
        return None;
    }
    match eqns.get(at + 1) {
        Some(sq) if sq.name == "squeeze" && sizes[d] == 1 => {
            let dims = sq.params.iter().find(|(k, _)| k == "dimensions")?.1.clone();
            (dims.trim_matches(|c| c == '[' || c == ']').trim() == d.to_string())
                .then(|| (format!("convert(dim={d}, stack)"), at + 2))
        }
        _ => Some((format!("convert(dim={d})"), at + 1)),
    }
}

/// The catalogue call (SPEC.md §10.1) that reads one primitive of a jaxpr
/// JAX recorded for a collective on one mesh axis of `n` devices
/// (SPEC.md §22.5): `prim` with its parameters (`param(name)`, in JAX's
/// spelling: `0`, `True`, `[(0, 1), (1, 0)]`) and its literal operands
/// (`literal(i)`, `None` for a traced one). Axis parameters are dropped:
/// the group is the one axis. `Err` says why no catalogue op reads it.
pub fn catalogue_call(
    prim: &str,
    param: &dyn Fn(&str) -> Option<String>,
    literal: &dyn Fn(usize) -> Option<String>,
    n: usize,
) -> Result<String, String> {
    let need = |k: &str| param(k).ok_or_else(|| format!("`{prim}` without its `{k}` parameter"));
    let tiled = |name: &str, dim_key: &str| -> Result<String, String> {
        let d = need(dim_key)?;
        Ok(match need("tiled")?.as_str() {
            "True" | "true" => format!("{name}(dim={d})"),
            "False" | "false" => format!("{name}(dim={d}, stack)"),
            t => return Err(format!("`{prim}`: tiled={t}")),
        })
    };
    match prim {
        "psum" | "psum_invariant" | "unreduced_psum" | "preduced" | "vary_unreduced_cast"
        | "reduced_vary_cast" => Ok(prim.to_string()),
        "pvary" => Ok(PVARY.to_string()),
        "all_gather" | "all_gather_invariant" | "all_gather_reduced" => {
            tiled(prim, "all_gather_dimension")
        }
        "reduce_scatter" => tiled("reduce_scatter", "scatter_dimension"),
        "unreduced_reduce_scatter" => tiled("unreduced_psum_scatter", "scatter_dimension"),
        "all_to_all" => {
            let (s, c) = (need("split_axis")?, need("concat_axis")?);
            Ok(match need("tiled")?.as_str() {
                "True" | "true" => format!("all_to_all(split={s}, concat={c})"),
                _ => format!("all_to_all(split={s}, concat={c}, stack)"),
            })
        }
        "ppermute" => Ok(format!("ppermute(perm={})", need("perm")?)),
        // pmean's division by the group size, forward and transposed.
        "div" => match literal(1) {
            Some(v) if v.parse::<f64>().ok() == Some(n as f64) => {
                Ok("divide_by_group_size".to_string())
            }
            Some(v) => Err(format!("`div` by {v}, not by the group size {n}")),
            None => Err("`div` by a traced value".to_string()),
        },
        "pmax" | "pmin" => Err(format!(
            "`{prim}` reduces by {}, which no linear collective of the catalogue does",
            &prim[1..]
        )),
        "pbroadcast" => Err(format!(
            "`pbroadcast(source={})` copies one rank's value to all; the catalogue's `pbroadcast` is JAX's former name for pvary",
            param("source").unwrap_or_default()
        )),
        other => Err(format!("`{other}` is not a collective the catalogue reads")),
    }
}

/// JAX's transpose of `ragged_all_to_all` (SPEC.md §23), as jax 0.12.0.1
/// writes it (`_ragged_all_to_all_transpose`, jax/_src/lax/parallel.py
/// lines 1858–1877): the cotangents of `operand` and of `output` from the
/// result's cotangent `cot` (per rank), on a validated layout, for an
/// operand of `operand_rows` rows.
///
/// - `operand`: the call run backwards into zeros: each rank sends the
///   cotangent rows where it received a segment back to the rows the
///   sender took it from (its offsets exchanged by a tiled all_to_all).
/// - `output`: the cotangent with the rows a segment wrote zeroed, those
///   rows found by a running sum of +1 *set* at each received segment's
///   start and −1 *added* at its end (indices past the buffer dropped); a
///   row whose sum is below 1 keeps its cotangent. Several segments that
///   start on one row set it to 1 once, while each subtracts at its end.
pub fn ragged_all_to_all_transpose(
    layout: &spmd_interp::ragged::Layout,
    cot: &[spmd_semantics::Tensor],
    operand_rows: usize,
) -> (Vec<spmd_semantics::Tensor>, Vec<spmd_semantics::Tensor>) {
    use spmd_interp::ragged::{row_width, Layout};
    use spmd_semantics::Tensor;
    let n = layout.ranks();
    let m = layout.input_offsets[0].len() / n;
    // all_to_all(x, 0, 0, tiled=True) of a per-rank vector of K entries:
    // rank d gets chunk d of every rank, in rank order.
    let exchanged = |x: &[Vec<usize>]| -> Vec<Vec<usize>> {
        (0..n)
            .map(|d| {
                (0..n)
                    .flat_map(|j| x[j][d * m..(d + 1) * m].to_vec())
                    .collect()
            })
            .collect()
    };
    let out_off = exchanged(&layout.output_offsets);
    let in_off = exchanged(&layout.input_offsets);
    let back = Layout {
        input_offsets: out_off.clone(),
        send_sizes: layout.recv_sizes.clone(),
        output_offsets: in_off,
        recv_sizes: layout.send_sizes.clone(),
    };
    let zeros: Vec<Tensor> = cot
        .iter()
        .map(|t| {
            let mut s = t.shape.clone();
            s[0] = operand_rows;
            Tensor::zeros(&s)
        })
        .collect();
    let operand_t = back.forward(cot, &zeros);
    let output_t = (0..n)
        .map(|d| {
            let rows = cot[d].shape[0];
            let mut mark = vec![0i64; rows];
            for &o in &out_off[d] {
                if o < rows {
                    mark[o] = 1;
                }
            }
            for (&o, &sz) in out_off[d].iter().zip(&layout.recv_sizes[d]) {
                if let Some(e) = o.checked_add(sz).filter(|&e| e < rows) {
                    mark[e] -= 1;
                }
            }
            let width = row_width(&cot[d]);
            let mut t = cot[d].clone();
            let mut run = 0i64;
            for (row, step) in mark.iter().enumerate() {
                run += step;
                if run >= 1 {
                    for v in &mut t.data[row * width..(row + 1) * width] {
                        *v = spmd_semantics::Q::zero();
                    }
                }
            }
            t
        })
        .collect();
    (operand_t, output_t)
}

/// JAX's `shard_map` boundary (SPEC.md §23.9): every argument's sharded
/// dims must divide evenly by the mesh axes, so per-rank pieces of
/// different shapes are refused before the body runs.
pub fn boundary(xs: &[spmd_semantics::Tensor]) -> Result<(), String> {
    match xs.iter().find(|x| x.shape != xs[0].shape) {
        Some(x) => Err(format!(
            "shard_map refuses the argument: its pieces have shapes {:?} and {:?}, and JAX splits only dims that divide evenly",
            xs[0].shape, x.shape
        )),
        None => Ok(()),
    }
}

/// JAX 0.12.0.1's batching rule for a collective inside `shard_map`
/// whose input is batched at dim `d` by a `vmap` over no mesh axis
/// (SPEC.md §24.3), transcribed from `jax/_src/lax/parallel.py`: the
/// batched collective and the dim its output is batched at.
///
/// - all_gather (`_all_gather_batcher`, line 2127): when d ≤ the gather
///   dim, the gather dim moves up one; otherwise the untiled form (which
///   inserts a dim) moves d up one;
/// - psum_scatter (`_reduce_scatter_batcher`, line 2360): the same code:
///   d ≤ the scatter dim moves the scatter dim up one; otherwise the
///   untiled form moves d up one, although the untiled form removes the
///   scatter dim;
/// - all_to_all (`_all_to_all_batcher`, line 1650): each of the split and
///   concat dims moves up one where d ≤ it; d is kept. The untiled form is
///   a wrapper of three steps (expand_dims, the primitive, squeeze), each
///   batched by its own rule: no single batched form is given for it;
/// - psum, pmean, ppermute and pvary (`_batched_reduction_collective`,
///   `_ppermute_batcher`, `_pvary_batcher`): unchanged, d kept.
pub fn batch_collective(
    kind: &spmd_interp::collective::Kind,
    d: usize,
) -> Result<(spmd_interp::collective::Kind, usize), String> {
    use spmd_interp::collective::Kind;
    Ok(match kind {
        Kind::AllGather { dim, stack } => {
            if d <= *dim {
                (
                    Kind::AllGather {
                        dim: dim + 1,
                        stack: *stack,
                    },
                    d,
                )
            } else {
                (kind.clone(), if *stack { d + 1 } else { d })
            }
        }
        Kind::ReduceScatter { dim, stack } => {
            if d <= *dim {
                (
                    Kind::ReduceScatter {
                        dim: dim + 1,
                        stack: *stack,
                    },
                    d,
                )
            } else {
                (kind.clone(), if *stack { d + 1 } else { d })
            }
        }
        Kind::AllToAll {
            split,
            concat,
            stack: false,
        } => (
            Kind::AllToAll {
                split: split + usize::from(d <= *split),
                concat: concat + usize::from(d <= *concat),
                stack: false,
            },
            d,
        ),
        Kind::AllToAll { stack: true, .. } => {
            return Err(
                "JAX's untiled all_to_all is a wrapper (parallel.py, l. 608-643): expand_dims, the primitive on a dim of size 1, squeeze; vmap batches each of them by its own rule, and no single batched collective is transcribed"
                    .into(),
            )
        }
        Kind::AllReduce
        | Kind::PMean
        | Kind::PPermute { .. }
        | Kind::Reinterpret
        | Kind::DivideByGroupSize => (kind.clone(), d),
        Kind::Convert { .. } => {
            return Err("JAX has no primitive for this conversion, so no batching rule".into())
        }
    })
}

/// JAX 0.12.0.1's transpose of a collective inside `shard_map`, as its
/// transpose rules in `jax/_src/lax/parallel.py` bind it (SPEC.md §24.8):
/// all_gather ↔ psum_scatter with the same dim and tiling, psum ↔ pvary,
/// all_to_all with split and concat swapped, ppermute with the inverse
/// permutation. JAX transposes whatever primitive it is given, so under
/// `grad(vmap(f))` it transposes the batched primitive with its batched
/// parameters.
pub fn transpose_collective(
    kind: &spmd_interp::collective::Kind,
) -> Result<spmd_interp::collective::Kind, String> {
    use spmd_interp::collective::Kind;
    Ok(match kind {
        Kind::AllGather { dim, stack } => Kind::ReduceScatter {
            dim: *dim,
            stack: *stack,
        },
        Kind::ReduceScatter { dim, stack } => Kind::AllGather {
            dim: *dim,
            stack: *stack,
        },
        Kind::AllReduce => Kind::Reinterpret,
        Kind::Reinterpret => Kind::AllReduce,
        Kind::AllToAll {
            split,
            concat,
            stack: false,
        } => Kind::AllToAll {
            split: *concat,
            concat: *split,
            stack: false,
        },
        Kind::PPermute { perm, pairs } => {
            let mut inv = vec![None; perm.len()];
            for (k, p) in perm.iter().enumerate() {
                if let Some(j) = p {
                    if let Some(slot) = inv.get_mut(*j) {
                        *slot = Some(k);
                    }
                }
            }
            Kind::PPermute {
                perm: inv,
                pairs: *pairs,
            }
        }
        other => return Err(format!("no transpose of {other:?} is transcribed")),
    })
}
