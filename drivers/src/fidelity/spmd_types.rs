//! spmd_types' recorded behaviour (SPEC.md §16.2): its typing of local ops
//! (and torch's own kernels') judged by the oracle, and the `spmd_types`
//! dialect against it.

use super::*;

/// spmd_types' per-axis typing function, replayed on one op per linearity
/// class: LINEAR sums its operands, MULTILINEAR multiplies them, NONLINEAR
/// is `abs` of their sum; a `Scalar` operand is the constant 3.
pub(super) fn spmd_types_typing(c: &Value) -> (Class, String) {
    if c["out_partial"] == true {
        return (
            Class::NotExpressible(
                "out_partial_axes declares the result Partial over a contraction the op does not show"
                    .into(),
            ),
            String::new(),
        );
    }
    let lin = c["op"].as_str().unwrap_or("");
    let ins = strings(&c["inputs"]);
    let names = ["a", "b", "c"];
    let mut terms = Vec::new();
    let mut types = Vec::new();
    let mut no_grad = Vec::new();
    let flags: Vec<bool> = c["no_grad"]
        .as_array()
        .map(|a| a.iter().map(|b| b == true).collect())
        .unwrap_or_default();
    for (k, s) in ins.iter().enumerate() {
        if s == "Scalar" {
            terms.push("3".to_string());
        } else {
            if flags.get(k) == Some(&true) {
                no_grad.push(types.len());
            }
            terms.push(names[k].to_string());
            types.push(s.clone());
        }
    }
    if types.is_empty() {
        return (
            Class::NotExpressible("only scalar operands: no tensor input to type".into()),
            String::new(),
        );
    }
    let expr = match lin {
        "linearity=LINEAR" => terms.join(" + "),
        "linearity=MULTILINEAR" => terms.join(" * "),
        "linearity=NONLINEAR" => format!("abs({})", terms.join(" + ")),
        _ => {
            return (
                Class::NotExpressible(format!("unknown class {lin}")),
                String::new(),
            )
        }
    };
    let real = &c["real"];
    let out = real["output"].as_str();
    judge_spmd_types(&expr, &types, &no_grad, real, out)
}

/// A real torch op under spmd_types' `typecheck()`: the op as an
/// expression; without `requires_grad` (or under `torch.no_grad()`) no
/// operand gets a gradient, so only the forward is at stake.
pub(super) fn torch_typing(c: &Value) -> (Class, String) {
    let op = c["op"].as_str().unwrap_or("");
    let expr = match op {
        "add" => "a + b",
        "sub" => "a - b",
        "mul" => "a * b",
        "div" => "a / b",
        "matmul" => "matmul(a, b)",
        // max(a, b) exactly, in the expression language.
        "maximum" => "(a + b + abs(a - b)) / 2",
        "neg" => "-a",
        "sum" => "sum(a, 0)",
        "mul_scalar" => "2 * a",
        "add_scalar" => "a + 2",
        "clone" => "a",
        _ => {
            return (
                Class::NotExpressible(format!(
                    "torch.{op} is not exact in rationals (transcendental)"
                )),
                String::new(),
            )
        }
    };
    let types = strings(&c["inputs"]);
    let no_grad: Vec<usize> = if c["requires_grad"] == true && c["torch_no_grad"] != true {
        vec![]
    } else {
        (0..types.len()).collect()
    };
    let real = &c["real"];
    let out = real["output"]
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_str);
    judge_spmd_types(expr, &types, &no_grad, real, out)
}

/// Classify what spmd_types did with `expr` on `types`: accepted with
/// output `out`, or refused.
pub(super) fn judge_spmd_types(
    expr: &str,
    types: &[String],
    no_grad: &[usize],
    real: &Value,
    out: Option<&str>,
) -> (Class, String) {
    let mesh = Mesh::new(&[("x", 2)]);
    let ng = if no_grad.is_empty() {
        String::new()
    } else {
        format!(" (no_grad {no_grad:?})")
    };
    if real["accepted"] == true {
        let out = out.unwrap_or("?");
        let rule = match local_rule("spmd_types", &mesh, expr, types, out, no_grad) {
            Ok(r) => r,
            Err(e) => {
                return (
                    Class::ModelMismatch(format!("cannot build: {e}")),
                    String::new(),
                )
            }
        };
        let note = format!("`{expr}` accepted as {} -> {out}{ng}", types.join(", "));
        oracle(&rule).accepted(note)
    } else {
        let what = format!("`{expr}` ");
        let ng = if no_grad.is_empty() {
            String::new()
        } else {
            format!(" (no_grad {no_grad:?})")
        };
        judge_refusal("spmd_types", expr, types, no_grad, real, &what, &ng)
    }
}

pub(super) fn spmd_types_dialect(c: &Value) -> Option<DialectCheck> {
    use spmd_dialects::{spmd_types, OpClass, Operand};
    let state = |s: &str| -> Option<spmd_semantics::State> {
        spmd_semantics::Dialect::SpmdTypes
            .parse_state(s)
            .ok()
            .map(|t| t.0)
    };
    let ins: Vec<&str> = c["inputs"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let r = &c["real"];
    let (op, flags, scalar, out_partial, real_out) = match c["source"].as_str()? {
        "infer_local_type_for_axis" => {
            let op = match c["op"].as_str()? {
                "linearity=LINEAR" if ins.len() == 1 => OpClass::Neg,
                "linearity=LINEAR" => OpClass::Add,
                "linearity=MULTILINEAR" => OpClass::Mul,
                "linearity=NONLINEAR" => OpClass::Nonlinear,
                _ => return None,
            };
            let flags: Vec<bool> = match c["no_grad"].as_array() {
                Some(a) => a.iter().map(|b| b == true).collect(),
                None => vec![false; ins.len()],
            };
            let out = r["output"].as_str().map(String::from);
            (op, flags, None, c["out_partial"] == true, out)
        }
        "torch" => {
            let (op, scalar) = match c["op"].as_str()? {
                "add" => (OpClass::Add, false),
                "sub" => (OpClass::Sub, false),
                "mul" => (OpClass::Mul, false),
                "div" => (OpClass::Division, false),
                "matmul" => (OpClass::Matmul, false),
                "neg" => (OpClass::Neg, false),
                "sum" => (OpClass::Sum, false),
                "clone" => (OpClass::View, false),
                "mul_scalar" => (OpClass::Mul, true),
                "add_scalar" => (OpClass::Add, true),
                // maximum, sin: not in the registry, NONLINEAR.
                "maximum" | "sin" => (OpClass::Nonlinear, false),
                _ => return None,
            };
            let ng = c["requires_grad"] != true || c["torch_no_grad"] == true;
            let out = r["output"]
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(Value::as_str)
                .map(String::from);
            (op, vec![ng; ins.len()], Some(scalar), false, out)
        }
        _ => return None,
    };
    let mut operands = Vec::new();
    for (k, s) in ins.iter().enumerate() {
        operands.push(if *s == "Scalar" {
            Operand::Scalar
        } else {
            Operand::Tensor {
                types: vec![state(s)?],
                no_grad: flags.get(k) == Some(&true),
            }
        });
    }
    if scalar == Some(true) {
        operands.push(Operand::Scalar);
    }
    let axes: &[usize] = if out_partial { &[0] } else { &[] };
    let o = if operands.iter().all(|o| *o == Operand::Scalar) {
        // Scalars alone: the real per-axis function types an empty column
        // of tensors; the dialect function needs the number of mesh axes.
        spmd_types::typing_scalars(op, operands.len(), 1, axes)
    } else {
        spmd_types::typing_operands(op, &operands, axes)
    };
    let ours = outcome_words(&o, &|s| s.letter().to_string());
    let real = if r["accepted"] == true {
        accepted_words(&real_out?, &[])
    } else {
        "refused".into()
    };
    Some(DialectCheck { ours, real })
}
