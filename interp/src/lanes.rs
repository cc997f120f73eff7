//! Lanes of a local function (SPEC.md §8.5): output dims along which the
//! function is a family of independent functions. A dim j of the output is
//! a lane dim when output entry c reads, of every input it reads at all,
//! only entries whose coordinate along one fixed dim of that input equals
//! cⱼ. Softmax along dim 1 has lane dim 0 (rows); attention
//! `einsum(softmax(einsum(q, k)), v)` has the batch label of both einsums.
//!
//! An input a scalar subexpression reads (`x * sum(y)`, `a * b` with b of
//! rank 0) is read whole by every output entry: it is *shared*, the core
//! every lane reads beside its own entries, and carries no lane.
//!
//! The analysis is structural: it reads the expression and the shapes,
//! never values, and answers per node. Each rule below only keeps a lane
//! where the node's definition reads along it coordinate by coordinate;
//! anything it does not know drops every lane.

use crate::eval::infer;
use crate::expr::{DimOp, Expr, Fun, Mask};
use spmd_semantics::tensor::{numel, strides};
use spmd_semantics::Shape;
use std::collections::{BTreeMap, BTreeSet};

/// The lanes of a function at given input shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lanes {
    /// The output's lane dims, in order.
    pub out_dims: Vec<usize>,
    /// Per input: for each lane (in the order of `out_dims`), the input's
    /// dim that carries it; `None` for an input the function does not read,
    /// or reads whole at every output entry (`shared`).
    pub in_dims: Vec<Option<Vec<usize>>>,
    /// Per input: whether every output entry may read all of it (a shared
    /// input, the lanes' common core).
    pub shared: Vec<bool>,
}

/// Per node: for each of its dims, `Some(map)` when it is a lane dim, the
/// map giving, for every input the node reads, the input dim that carries
/// the lane.
type Map = BTreeMap<usize, usize>;

struct Node {
    shape: Shape,
    lanes: Vec<Option<Map>>,
    /// The inputs the node reads at all.
    reads: BTreeSet<usize>,
    /// Inputs that any entry of the node may read whole.
    shared: BTreeSet<usize>,
}

/// Two maps for one lane joined: `None` when an input would carry the lane
/// along two different dims.
fn join(a: &Map, b: &Map) -> Option<Map> {
    let mut out = a.clone();
    for (&i, &d) in b {
        match out.get(&i) {
            Some(&d0) if d0 != d => return None,
            _ => {
                out.insert(i, d);
            }
        }
    }
    Some(out)
}

fn join_all<'a>(maps: impl IntoIterator<Item = Option<&'a Map>>) -> Option<Map> {
    let mut acc = Map::new();
    for m in maps {
        acc = join(&acc, m?)?;
    }
    Some(acc)
}

/// Elementwise combination of equal shapes, or of a scalar with anything:
/// a scalar that reads inputs is read by every entry, so every input it
/// reads is shared.
fn elementwise(nodes: &[Node]) -> Node {
    let shape = nodes
        .iter()
        .map(|n| &n.shape)
        .max_by_key(|s| s.len())
        .cloned()
        .unwrap_or_default();
    let reads = union(nodes.iter().map(|n| &n.reads));
    let mut shared = union(nodes.iter().map(|n| &n.shared));
    for n in nodes.iter().filter(|n| n.shape != shape) {
        shared.extend(n.reads.iter().copied());
    }
    let lanes = (0..shape.len())
        .map(|j| {
            join_all(
                nodes
                    .iter()
                    .filter(|n| n.shape == shape)
                    .map(|n| n.lanes[j].as_ref()),
            )
        })
        .collect();
    Node {
        shape,
        lanes,
        reads,
        shared,
    }
}

fn union<'a>(sets: impl IntoIterator<Item = &'a BTreeSet<usize>>) -> BTreeSet<usize> {
    sets.into_iter().flatten().copied().collect()
}

fn without(mut n: Node, d: usize) -> Node {
    n.lanes[d] = None;
    n
}

fn removed(mut n: Node, d: usize) -> Node {
    n.lanes.remove(d);
    n.shape.remove(d);
    n
}

fn node(e: &Expr, shapes: &[Shape]) -> Option<Node> {
    let shape = infer(e, shapes).ok()?.0;
    // A node without lanes that may read `reads` anywhere.
    let none = |reads: BTreeSet<usize>| Node {
        lanes: vec![None; shape.len()],
        shape: shape.clone(),
        shared: reads.clone(),
        reads,
    };
    Some(match e {
        Expr::Var(i) => Node {
            lanes: (0..shape.len())
                .map(|j| Some(Map::from([(*i, j)])))
                .collect(),
            shape,
            reads: BTreeSet::from([*i]),
            shared: BTreeSet::new(),
        },
        Expr::Const(_) => none(BTreeSet::new()),
        Expr::Neg(a)
        | Expr::Pow(a, _)
        | Expr::Abs(a)
        | Expr::Relu(a)
        | Expr::Floor(a)
        | Expr::Cast(a, _)
        | Expr::Round(_, a)
        | Expr::Unary(_, a) => node(a, shapes)?,
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) => {
            elementwise(&[node(a, shapes)?, node(b, shapes)?])
        }
        Expr::Where(m, a, b) => {
            let mut parts = vec![node(a, shapes)?, node(b, shapes)?];
            if let Mask::Input(me) = m {
                parts.push(node(me, shapes)?);
            }
            elementwise(&parts)
        }
        Expr::Sum(a, d) | Expr::Mean(a, d) | Expr::Max(a, d) => removed(node(a, shapes)?, *d),
        Expr::Dimwise(op, a, d, _) => match op {
            DimOp::LogSumExp => removed(node(a, shapes)?, *d),
            _ => without(node(a, shapes)?, *d),
        },
        Expr::CrossEntropy(a, t, d) => {
            removed(elementwise(&[node(a, shapes)?, node(t, shapes)?]), *d)
        }
        Expr::Cumsum(a, d) | Expr::Slice(a, d, _, _) | Expr::Take(a, d, _) => {
            without(node(a, shapes)?, *d)
        }
        Expr::Concat(args, d) => {
            let parts: Vec<Node> = args
                .iter()
                .map(|a| node(a, shapes))
                .collect::<Option<_>>()?;
            let lanes = (0..shape.len())
                .map(|j| {
                    if j == *d {
                        return None;
                    }
                    join_all(parts.iter().map(|p| p.lanes[j].as_ref()))
                })
                .collect();
            Node {
                shape,
                lanes,
                reads: union(parts.iter().map(|p| &p.reads)),
                shared: union(parts.iter().map(|p| &p.shared)),
            }
        }
        Expr::UpdateSlice(a, u, start) => {
            let (na, nu) = (node(a, shapes)?, node(u, shapes)?);
            let lanes = (0..shape.len())
                .map(|j| {
                    if start[j] != 0 || nu.shape[j] != na.shape[j] {
                        return None;
                    }
                    join(na.lanes[j].as_ref()?, nu.lanes[j].as_ref()?)
                })
                .collect();
            Node {
                shape,
                lanes,
                reads: union([&na.reads, &nu.reads]),
                shared: union([&na.shared, &nu.shared]),
            }
        }
        Expr::Reshape(a, _) => {
            // Row-major: the leading coordinates are kept as far as the
            // leading sizes agree.
            let na = node(a, shapes)?;
            let keep = shape
                .iter()
                .zip(&na.shape)
                .take_while(|(x, y)| x == y)
                .count();
            let lanes = (0..shape.len())
                .map(|j| if j < keep { na.lanes[j].clone() } else { None })
                .collect();
            Node {
                shape,
                lanes,
                reads: na.reads,
                shared: na.shared,
            }
        }
        Expr::Einsum(spec, args) => {
            let parts: Vec<Node> = args
                .iter()
                .map(|a| node(a, shapes))
                .collect::<Option<_>>()?;
            let reads = union(parts.iter().map(|p| &p.reads));
            // An operand of rank 0 is read whole by every output entry.
            let mut shared = union(parts.iter().map(|p| &p.shared));
            for p in parts.iter().filter(|p| p.shape.is_empty()) {
                shared.extend(p.reads.iter().copied());
            }
            let lanes = spec
                .output
                .iter()
                .map(|l| {
                    let mut acc = Map::new();
                    for (labels, p) in spec.inputs.iter().zip(&parts) {
                        match labels.iter().position(|x| x == l) {
                            Some(k) => acc = join(&acc, p.lanes[k].as_ref()?)?,
                            // An operand without the label is read by every
                            // coordinate along it: unless it is a shared
                            // scalar, the lane goes.
                            None if p.shape.is_empty() || p.reads.is_empty() => {}
                            None => return None,
                        }
                    }
                    Some(acc)
                })
                .collect();
            Node {
                shape,
                lanes,
                reads,
                shared,
            }
        }
        // A recorded kernel: its reads are not known.
        Expr::Table(..) => none(reads(e).into_iter().collect()),
    })
}

/// The lanes of `e` at input shapes `shapes`; `None` when `e` does not
/// infer there. An output with no lane dim gets an empty `out_dims`.
pub fn lanes(e: &Expr, shapes: &[Shape]) -> Option<Lanes> {
    let n = node(e, shapes)?;
    let out_dims: Vec<usize> = (0..n.lanes.len())
        .filter(|&j| n.lanes[j].is_some())
        .collect();
    let mut shared: Vec<bool> = (0..shapes.len()).map(|i| n.shared.contains(&i)).collect();
    let in_dims = (0..shapes.len())
        .map(|i| {
            if shared[i] || !n.reads.contains(&i) {
                return None;
            }
            let dims: Vec<Option<usize>> = out_dims
                .iter()
                .map(|&j| n.lanes[j].as_ref().and_then(|m| m.get(&i).copied()))
                .collect();
            // Every lane of a node maps every input the node reads and does
            // not share; an input read otherwise is taken as shared, which
            // claims nothing about how it is read.
            if dims.iter().all(Option::is_some) {
                Some(dims.into_iter().flatten().collect())
            } else {
                shared[i] = true;
                None
            }
        })
        .collect();
    Some(Lanes {
        out_dims,
        in_dims,
        shared,
    })
}

fn reads(e: &Expr) -> Vec<usize> {
    let mut out = Vec::new();
    fn go(e: &Expr, out: &mut Vec<usize>) {
        if let Expr::Var(i) = e {
            if !out.contains(i) {
                out.push(*i);
            }
        }
        for c in e.children() {
            go(c, out);
        }
    }
    go(e, &mut out);
    out
}

impl Lanes {
    /// The lane key of each entry (row-major) of a tensor of `shape` whose
    /// lane dims are `dims`: its coordinates along them, as one number.
    pub fn keys(dims: &[usize], shape: &[usize]) -> Vec<u64> {
        let st = strides(shape);
        (0..numel(shape))
            .map(|e| {
                dims.iter().fold(0u64, |k, &d| {
                    k * shape[d] as u64 + ((e / st[d]) % shape[d]) as u64
                })
            })
            .collect()
    }
}

/// Whether `e` meets neither a domain error, nor a kink, nor a value the
/// exact field cannot decide, at any input (SPEC.md §8.5): polynomial
/// operations, division by a nonzero constant, and exp, tanh, sigmoid and
/// softmax of rational values.
pub fn total(e: &Expr) -> bool {
    fn rational(e: &Expr) -> bool {
        match e {
            Expr::Var(_) | Expr::Const(_) => true,
            Expr::Unary(..) | Expr::Dimwise(..) => false,
            _ => same(e, rational),
        }
    }
    // The operations allowed on top of either kind of value.
    fn same(e: &Expr, kid: fn(&Expr) -> bool) -> bool {
        match e {
            Expr::Var(_) | Expr::Const(_) => true,
            Expr::Div(a, b) => matches!(**b, Expr::Const(ref q) if !q.is_zero()) && kid(a),
            Expr::Where(Mask::Const(_), a, b) => kid(a) && kid(b),
            Expr::Neg(_)
            | Expr::Add(..)
            | Expr::Sub(..)
            | Expr::Mul(..)
            | Expr::Pow(..)
            | Expr::Sum(..)
            | Expr::Mean(..)
            | Expr::Einsum(..)
            | Expr::Reshape(..)
            | Expr::Slice(..)
            | Expr::Concat(..)
            | Expr::Take(..)
            | Expr::UpdateSlice(..)
            | Expr::Cumsum(..) => e.children().into_iter().all(kid),
            _ => false,
        }
    }
    fn any(e: &Expr) -> bool {
        match e {
            Expr::Unary(Fun::Exp | Fun::Tanh | Fun::Sigmoid, a) => rational(a),
            Expr::Dimwise(DimOp::Softmax, a, _, _) => rational(a),
            _ => same(e, any),
        }
    }
    any(e)
}
