//! Local functions as expressions, and their parser (SPEC.md §6.1).
//!
//! Every built-in local op is an `Expr` node; a user expression such as
//! `x * y + 1` parses to the same tree, so evaluation, shape and degree
//! inference and the local VJP each have exactly one arm per op.

use spmd_semantics::Q;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    /// Input number `i` (variables are numbered in order of first appearance,
    /// or as a rule's `vars` lists them).
    Var(usize),
    Const(Q),
    Neg(Box<Expr>),
    Add(Box<Expr>, Box<Expr>),
    Sub(Box<Expr>, Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    Div(Box<Expr>, Box<Expr>),
    Pow(Box<Expr>, u32),
    Sum(Box<Expr>, usize),
    Mean(Box<Expr>, usize),
    Max(Box<Expr>, usize),
    /// `einsum("ij,jk->ik", a, b)`; matmul and transpose are spelled with it.
    Einsum(Einsum, Vec<Expr>),
    Reshape(Box<Expr>, Vec<usize>),
    /// `slice(x, dim, start, end)`.
    Slice(Box<Expr>, usize, usize, usize),
    /// `concat(a, b, ..., dim)`.
    Concat(Vec<Expr>, usize),
    /// `take(x, dim, [i, ...])`: gather along `dim` with a constant index tensor.
    Take(Box<Expr>, usize, Vec<usize>),
    /// `dynamic_update_slice(x, u, [start, ...])`.
    UpdateSlice(Box<Expr>, Box<Expr>, Vec<usize>),
    Abs(Box<Expr>),
    Relu(Box<Expr>),
    Floor(Box<Expr>),
    /// Narrowing cast: round to the nearest multiple of 2^-bits, ties to even.
    Cast(Box<Expr>, u32),
    /// An elementwise transcendental function (SPEC.md §19.1).
    Unary(Fun, Box<Expr>),
    /// softmax, logsumexp, layernorm or rmsnorm over a dim; the rational is
    /// the norms' epsilon (0 unless declared).
    Dimwise(DimOp, Box<Expr>, usize, Q),
    /// `cross_entropy(x, t, d)`: logsumexp(x, d) - sum(x * t, d), with `t`
    /// the targets (one-hot rows, an index written as an input).
    CrossEntropy(Box<Expr>, Box<Expr>, usize),
    /// `cumsum(x, d)`: inclusive prefix sums along `d`.
    Cumsum(Box<Expr>, usize),
    /// `where(m, a, b)`: `a` where the mask is positive, else `b`. A mask
    /// written as a list is a constant along the last dim.
    Where(Mask, Box<Expr>, Box<Expr>),
    /// Rounding to an integer: trunc (integer casts, truncating division),
    /// round (half to even), ceil. floor is `Floor`.
    Round(Rounding, Box<Expr>),
    /// A recorded kernel applied elementwise (SPEC.md §22.2): known only
    /// on the grid points its table holds. Never parsed from text.
    Table(crate::table::Table, Vec<Expr>),
}

/// Elementwise transcendental functions (SPEC.md §19.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fun {
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Sin,
    Cos,
    /// gelu, tanh form: x/2 (1 + tanh(√(2/π)(x + 0.044715 x³))).
    Gelu,
    /// silu: x sigmoid(x).
    Silu,
}

impl Fun {
    pub const ALL: [(&'static str, Fun); 10] = [
        ("exp", Fun::Exp),
        ("log", Fun::Log),
        ("sqrt", Fun::Sqrt),
        ("rsqrt", Fun::Rsqrt),
        ("tanh", Fun::Tanh),
        ("sigmoid", Fun::Sigmoid),
        ("sin", Fun::Sin),
        ("cos", Fun::Cos),
        ("gelu", Fun::Gelu),
        ("silu", Fun::Silu),
    ];
    pub fn name(self) -> &'static str {
        Fun::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
            .expect("every function is listed")
    }
}

/// Ops over one dim that need the exact transcendental path (SPEC.md §19.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimOp {
    Softmax,
    LogSumExp,
    LayerNorm,
    RmsNorm,
}

/// The mask of `where`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Mask {
    Input(Box<Expr>),
    /// 0/1 constants along the last dim of `a`.
    Const(Vec<usize>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    Trunc,
    Round,
    Ceil,
}

/// A parsed einsum spec: labels of each operand and of the output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Einsum {
    pub inputs: Vec<Vec<char>>,
    pub output: Vec<char>,
}

impl Einsum {
    pub fn parse(s: &str) -> Result<Einsum, String> {
        let (lhs, rhs) = s
            .split_once("->")
            .ok_or_else(|| format!("einsum spec `{s}` has no `->`"))?;
        let inputs: Vec<Vec<char>> = lhs.split(',').map(|p| p.trim().chars().collect()).collect();
        let output: Vec<char> = rhs.trim().chars().collect();
        for labels in inputs.iter().chain(std::iter::once(&output)) {
            for (i, c) in labels.iter().enumerate() {
                if !c.is_ascii_lowercase() {
                    return Err(format!(
                        "einsum label `{c}` in `{s}` is not a lowercase letter"
                    ));
                }
                if labels[..i].contains(c) {
                    return Err(format!(
                        "einsum spec `{s}` repeats label `{c}` in one operand"
                    ));
                }
            }
        }
        for c in &output {
            if !inputs.iter().any(|l| l.contains(c)) {
                return Err(format!(
                    "einsum output label `{c}` in `{s}` appears in no operand"
                ));
            }
        }
        Ok(Einsum { inputs, output })
    }
}

impl fmt::Display for Einsum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ins: Vec<String> = self.inputs.iter().map(|l| l.iter().collect()).collect();
        write!(
            f,
            "{}->{}",
            ins.join(","),
            self.output.iter().collect::<String>()
        )
    }
}

/// A parse error with the 1-based column where it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

/// A parsed local function: its tree and the names of its inputs in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalFn {
    pub expr: Expr,
    pub vars: Vec<String>,
    pub text: String,
}

impl LocalFn {
    pub fn arity(&self) -> usize {
        self.vars.len()
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(Q),
    Ident(String),
    Str(String),
    Sym(char),
    Arrow,
}

/// The longest expression text accepted, in characters.
pub const MAX_EXPR_LEN: usize = 20_000;
/// The deepest expression tree accepted (nesting and chains of `+`, `*`).
pub const MAX_DEPTH: usize = 256;
/// The longest number literal accepted, in characters.
pub const MAX_LITERAL: usize = 64;
/// The longest list of indices, starts or dims accepted (`take(x, 0, [..])`):
/// each index is a slice and a concatenation at every instance.
pub const MAX_LIST: usize = 64;
/// The largest exponent accepted, also as the product of nested powers
/// (`(x^32)^32`). Beyond `MAX_DEGREE` (16) a power of an input is refused by
/// the degree check anyway; the cap keeps `run`, which has no degree check,
/// and powers of constants from multiplying for ever, and keeps the
/// exponent far inside `u32` so that it can never wrap.
pub const MAX_EXPONENT: u64 = 1024;
/// The largest power of a constant accepted, in bits of its numerator and
/// denominator (an upper estimate): `3^1100` would otherwise be rebuilt by
/// 1100 big-integer products at every instance.
pub const MAX_CONST_BITS: u64 = 4096;

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let cs: Vec<char> = src.chars().collect();
    if cs.len() > MAX_EXPR_LEN {
        return Err(ParseError {
            column: MAX_EXPR_LEN + 1,
            message: format!(
                "an expression of {} characters; at most {MAX_EXPR_LEN}",
                cs.len()
            ),
        });
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit()
            || (c == '.' && cs.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // Integers, decimals and exponents, read exactly: `0.5` is 1/2.
            let s = i;
            while i < cs.len() && cs[i].is_ascii_digit() {
                i += 1;
            }
            if i < cs.len() && cs[i] == '.' {
                i += 1;
                while i < cs.len() && cs[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < cs.len() && (cs[i] == 'e' || cs[i] == 'E') {
                let sign = usize::from(matches!(cs.get(i + 1), Some('+' | '-')));
                if cs.get(i + 1 + sign).is_some_and(char::is_ascii_digit) {
                    i += 1 + sign;
                    while i < cs.len() && cs[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text: String = cs[s..i].iter().collect();
            if text.len() > MAX_LITERAL {
                return Err(ParseError {
                    column: col,
                    message: format!(
                        "a number of {} characters; literals take at most {MAX_LITERAL}",
                        text.len()
                    ),
                });
            }
            let q = Q::parse(&text).ok_or(ParseError {
                column: col,
                message: format!("bad number `{text}`"),
            })?;
            out.push((Tok::Num(q), col));
        } else if c.is_alphabetic() || c == '_' {
            let s = i;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(cs[s..i].iter().collect()), col));
        } else if c == '"' {
            let s = i + 1;
            i += 1;
            while i < cs.len() && cs[i] != '"' {
                i += 1;
            }
            if i == cs.len() {
                return Err(ParseError {
                    column: col,
                    message: "unterminated string".into(),
                });
            }
            out.push((Tok::Str(cs[s..i].iter().collect()), col));
            i += 1;
        } else if c == '-' && cs.get(i + 1) == Some(&'>') {
            out.push((Tok::Arrow, col));
            i += 2;
        } else if "+-*/^(),[]".contains(c) {
            out.push((Tok::Sym(c), col));
            i += 1;
        } else {
            return Err(ParseError {
                column: col,
                message: format!("unexpected character `{c}`"),
            });
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    end_col: usize,
    vars: Vec<String>,
    /// Current recursion depth; bounded by `MAX_DEPTH`, so no input can
    /// overflow the stack here or in the recursive passes over the tree.
    nest: usize,
}

/// Names that are functions, never variables.
const FUNCTIONS: &[&str] = &[
    "sum",
    "mean",
    "max",
    "matmul",
    "einsum",
    "transpose",
    "reshape",
    "slice",
    "concat",
    "take",
    "gather",
    "dynamic_update_slice",
    "abs",
    "relu",
    "floor",
    "cast",
    "pow",
    "neg",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "sin",
    "cos",
    "gelu",
    "silu",
    "softmax",
    "logsumexp",
    "layernorm",
    "rmsnorm",
    "cross_entropy",
    "cumsum",
    "where",
    "trunc",
    "round",
    "ceil",
    "int",
    "floordiv",
    "truncdiv",
];

impl Parser {
    fn col(&self) -> usize {
        self.toks.get(self.pos).map(|t| t.1).unwrap_or(self.end_col)
    }
    fn err<T>(&self, msg: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            column: self.col(),
            message: msg.into(),
        })
    }
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Sym(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            match self.peek() {
                Some(t) => self.err(format!("expected `{c}`, found {}", describe(t))),
                None => self.err(format!("expected `{c}`, found end of input")),
            }
        }
    }
    fn deeper(&mut self) -> Result<(), ParseError> {
        self.nest += 1;
        if self.nest > MAX_DEPTH {
            return self.err(format!(
                "the expression nests more than {MAX_DEPTH} deep (parentheses, calls, unary minus, or a chain of + or *)"
            ));
        }
        Ok(())
    }
    // expr := term (('+'|'-') term)*
    fn expr(&mut self) -> Result<Expr, ParseError> {
        let base = self.nest;
        let mut e = self.term()?;
        loop {
            if self.peek() == Some(&Tok::Sym('+')) || self.peek() == Some(&Tok::Sym('-')) {
                // Each operator of a chain adds a level to the tree.
                self.deeper()?;
            }
            if self.eat('+') {
                e = Expr::Add(Box::new(e), Box::new(self.term()?));
            } else if self.eat('-') {
                e = Expr::Sub(Box::new(e), Box::new(self.term()?));
            } else {
                self.nest = base;
                return Ok(e);
            }
        }
    }
    // term := unary (('*'|'/') unary)*
    fn term(&mut self) -> Result<Expr, ParseError> {
        let base = self.nest;
        let mut e = self.unary()?;
        loop {
            if self.peek() == Some(&Tok::Sym('*')) || self.peek() == Some(&Tok::Sym('/')) {
                self.deeper()?;
            }
            if self.eat('*') {
                e = Expr::Mul(Box::new(e), Box::new(self.unary()?));
            } else if self.eat('/') {
                e = Expr::Div(Box::new(e), Box::new(self.unary()?));
            } else {
                self.nest = base;
                return Ok(e);
            }
        }
    }
    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat('-') {
            self.deeper()?;
            let e = self.unary()?;
            self.nest -= 1;
            return Ok(Expr::Neg(Box::new(e)));
        }
        let base = self.atom()?;
        if self.eat('^') {
            let col = self.col();
            let n = self.uint("exponent")?;
            return power(base, n, col);
        }
        Ok(base)
    }
    fn uint(&mut self, what: &str) -> Result<usize, ParseError> {
        match self.peek().cloned() {
            Some(Tok::Num(q)) if q.is_integer() && !q.is_negative() => {
                self.pos += 1;
                q.to_i64().map(|v| v as usize).ok_or(ParseError {
                    column: self.col(),
                    message: format!("{what} too large"),
                })
            }
            Some(t) => self.err(format!(
                "expected a non-negative integer {what}, found {}",
                describe(&t)
            )),
            None => self.err(format!(
                "expected a non-negative integer {what}, found end of input"
            )),
        }
    }
    fn uint_list(&mut self, what: &str) -> Result<Vec<usize>, ParseError> {
        self.expect('[')?;
        let mut v = Vec::new();
        if !self.eat(']') {
            loop {
                if v.len() == MAX_LIST {
                    return self.err(format!("more than {MAX_LIST} entries in a list ({what})"));
                }
                v.push(self.uint(what)?);
                if self.eat(']') {
                    break;
                }
                self.expect(',')?;
            }
        }
        Ok(v)
    }
    fn atom(&mut self) -> Result<Expr, ParseError> {
        let col = self.col();
        match self.peek().cloned() {
            Some(Tok::Num(q)) => {
                self.pos += 1;
                Ok(Expr::Const(q))
            }
            Some(Tok::Sym('(')) => {
                self.pos += 1;
                self.deeper()?;
                let e = self.expr()?;
                self.nest -= 1;
                self.expect(')')?;
                Ok(e)
            }
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                if self.peek() == Some(&Tok::Sym('(')) {
                    self.pos += 1;
                    self.deeper()?;
                    let e = self.call(&name, col)?;
                    self.nest -= 1;
                    self.expect(')')?;
                    Ok(e)
                } else if FUNCTIONS.contains(&name.as_str()) {
                    self.err(format!("`{name}` is a function: write `{name}(...)`"))
                } else {
                    let i = match self.vars.iter().position(|v| *v == name) {
                        Some(i) => i,
                        None => {
                            self.vars.push(name);
                            self.vars.len() - 1
                        }
                    };
                    Ok(Expr::Var(i))
                }
            }
            Some(t) => self.err(format!("expected an expression, found {}", describe(&t))),
            None => self.err("expected an expression, found end of input"),
        }
    }
    fn call(&mut self, name: &str, col: usize) -> Result<Expr, ParseError> {
        let b = |e: Expr| Box::new(e);
        Ok(match name {
            "sum" | "mean" | "max" => {
                let e = self.expr()?;
                self.expect(',')?;
                let d = self.uint("dim")?;
                match name {
                    "sum" => Expr::Sum(b(e), d),
                    "mean" => Expr::Mean(b(e), d),
                    _ => Expr::Max(b(e), d),
                }
            }
            "matmul" => {
                let a = self.expr()?;
                self.expect(',')?;
                let c = self.expr()?;
                Expr::Einsum(Einsum::parse("ij,jk->ik").expect("valid spec"), vec![a, c])
            }
            "transpose" => {
                let a = self.expr()?;
                Expr::Einsum(Einsum::parse("ij->ji").expect("valid spec"), vec![a])
            }
            "einsum" => {
                let spec =
                    match self.peek().cloned() {
                        Some(Tok::Str(s)) => {
                            self.pos += 1;
                            s
                        }
                        _ => return self.err(
                            "einsum takes a quoted spec first, e.g. einsum(\"ij,jk->ik\", x, y)",
                        ),
                    };
                let es = Einsum::parse(&spec).map_err(|m| ParseError {
                    column: col,
                    message: m,
                })?;
                let mut args = Vec::new();
                while self.eat(',') {
                    args.push(self.expr()?);
                }
                if args.len() != es.inputs.len() {
                    return Err(ParseError {
                        column: col,
                        message: format!(
                            "einsum spec `{spec}` names {} operands, got {}",
                            es.inputs.len(),
                            args.len()
                        ),
                    });
                }
                Expr::Einsum(es, args)
            }
            "reshape" => {
                let a = self.expr()?;
                self.expect(',')?;
                Expr::Reshape(b(a), self.uint_list("dim size")?)
            }
            "slice" => {
                let a = self.expr()?;
                self.expect(',')?;
                let d = self.uint("dim")?;
                self.expect(',')?;
                let s = self.uint("start")?;
                self.expect(',')?;
                let e = self.uint("end")?;
                Expr::Slice(b(a), d, s, e)
            }
            "concat" => {
                let mut args = vec![self.expr()?];
                self.expect(',')?;
                loop {
                    // The last argument is the dim: an integer literal not followed by an operator.
                    if let (Some(Tok::Num(_)), Some(Tok::Sym(')'))) = (
                        self.peek().cloned(),
                        self.toks.get(self.pos + 1).map(|t| t.0.clone()),
                    ) {
                        let d = self.uint("dim")?;
                        return Ok(Expr::Concat(args, d));
                    }
                    args.push(self.expr()?);
                    self.expect(',')?;
                }
            }
            "take" | "gather" => {
                let a = self.expr()?;
                self.expect(',')?;
                let d = self.uint("dim")?;
                self.expect(',')?;
                let idx = self.uint_list("index")?;
                if idx.is_empty() {
                    return Err(ParseError {
                        column: col,
                        message: format!("{name} needs at least one index"),
                    });
                }
                Expr::Take(b(a), d, idx)
            }
            "dynamic_update_slice" => {
                let a = self.expr()?;
                self.expect(',')?;
                let u = self.expr()?;
                self.expect(',')?;
                Expr::UpdateSlice(b(a), b(u), self.uint_list("start")?)
            }
            "abs" | "relu" | "floor" | "neg" => {
                let a = b(self.expr()?);
                match name {
                    "abs" => Expr::Abs(a),
                    "relu" => Expr::Relu(a),
                    "neg" => Expr::Neg(a),
                    _ => Expr::Floor(a),
                }
            }
            _ if Fun::ALL.iter().any(|(n, _)| *n == name) => {
                let f = Fun::ALL
                    .iter()
                    .find(|(n, _)| *n == name)
                    .expect("just found")
                    .1;
                Expr::Unary(f, b(self.expr()?))
            }
            "softmax" | "logsumexp" | "layernorm" | "rmsnorm" => {
                let a = self.expr()?;
                self.expect(',')?;
                let d = self.uint("dim")?;
                let op = match name {
                    "softmax" => DimOp::Softmax,
                    "logsumexp" => DimOp::LogSumExp,
                    "layernorm" => DimOp::LayerNorm,
                    _ => DimOp::RmsNorm,
                };
                let mut eps = Q::zero();
                if matches!(op, DimOp::LayerNorm | DimOp::RmsNorm) && self.eat(',') {
                    match self.peek().cloned() {
                        Some(Tok::Num(q)) if !q.is_negative() => {
                            self.pos += 1;
                            eps = q;
                        }
                        _ => return self.err("expected a non-negative number epsilon"),
                    }
                }
                Expr::Dimwise(op, b(a), d, eps)
            }
            "cross_entropy" => {
                let x = self.expr()?;
                self.expect(',')?;
                let t = self.expr()?;
                self.expect(',')?;
                let d = self.uint("dim")?;
                Expr::CrossEntropy(b(x), b(t), d)
            }
            "cumsum" => {
                let a = self.expr()?;
                self.expect(',')?;
                Expr::Cumsum(b(a), self.uint("dim")?)
            }
            "where" => {
                let m = if self.peek() == Some(&Tok::Sym('[')) {
                    let v = self.uint_list("mask entry")?;
                    if v.iter().any(|&k| k > 1) {
                        return Err(ParseError {
                            column: col,
                            message: "a constant mask holds only 0 and 1".into(),
                        });
                    }
                    Mask::Const(v)
                } else {
                    Mask::Input(b(self.expr()?))
                };
                self.expect(',')?;
                let x = self.expr()?;
                self.expect(',')?;
                let y = self.expr()?;
                Expr::Where(m, b(x), b(y))
            }
            "trunc" | "round" | "ceil" | "int" => {
                let a = b(self.expr()?);
                let k = match name {
                    "round" => Rounding::Round,
                    "ceil" => Rounding::Ceil,
                    _ => Rounding::Trunc,
                };
                Expr::Round(k, a)
            }
            "floordiv" | "truncdiv" => {
                let x = self.expr()?;
                self.expect(',')?;
                let y = self.expr()?;
                let q = Expr::Div(b(x), b(y));
                if name == "floordiv" {
                    Expr::Floor(b(q))
                } else {
                    Expr::Round(Rounding::Trunc, b(q))
                }
            }
            "cast" => {
                let a = self.expr()?;
                self.expect(',')?;
                let bits = self.uint("number of fractional bits")?;
                if bits > 32 {
                    return Err(ParseError {
                        column: col,
                        message: "cast keeps at most 32 fractional bits".into(),
                    });
                }
                Expr::Cast(b(a), bits as u32)
            }
            "pow" => {
                let a = self.expr()?;
                self.expect(',')?;
                let col = self.col();
                let n = self.uint("exponent")?;
                power(a, n, col)?
            }
            _ => {
                return Err(ParseError {
                    column: col,
                    message: format!(
                        "unknown function `{name}`{} (known: {})",
                        spmd_semantics::names::did_you_mean(name, FUNCTIONS.iter().copied()),
                        FUNCTIONS.join(", ")
                    ),
                })
            }
        })
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Num(q) => format!("number `{q}`"),
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Str(s) => format!("string \"{s}\""),
        Tok::Sym(c) => format!("`{c}`"),
        Tok::Arrow => "`->`".into(),
    }
}

/// `base^n`, refused where the exponent, the product of nested exponents,
/// or the size of a power of a constant is beyond its cap.
fn power(base: Expr, n: usize, column: usize) -> Result<Expr, ParseError> {
    let refuse = |message: String| Err(ParseError { column, message });
    let n64 = u64::try_from(n).unwrap_or(u64::MAX);
    let nested = n64.saturating_mul(nested_power(&base).max(1));
    if n64 > MAX_EXPONENT {
        return refuse(format!(
            "exponent {n} is too large (at most {MAX_EXPONENT}; exact finite differences take degree 16 at most)"
        ));
    }
    if nested > MAX_EXPONENT {
        return refuse(format!(
            "nested powers multiply to exponent {nested}; at most {MAX_EXPONENT}"
        ));
    }
    if !has_var(&base) {
        let folded = fold_const(&base);
        let bits = folded
            .as_ref()
            .map_or_else(|| const_bits(&base), q_bits)
            .saturating_mul(n64);
        if bits > MAX_CONST_BITS {
            return refuse(format!(
                "a power of a constant of about {bits} bits; at most {MAX_CONST_BITS}"
            ));
        }
        // Computed once here, not again at every instance: `3^100 * x` took
        // seconds, `3^400 * x` minutes.
        if let Some(q) = folded {
            return Ok(Expr::Const((0..n).fold(Q::one(), |acc, _| acc.mul(&q))));
        }
    }
    // Both caps keep `n` far below u32::MAX.
    Ok(Expr::Pow(Box::new(base), n as u32))
}

/// The value of a constant made of numbers and arithmetic, if it is one.
fn fold_const(e: &Expr) -> Option<Q> {
    Some(match e {
        Expr::Const(q) => q.clone(),
        Expr::Neg(a) => fold_const(a)?.neg(),
        Expr::Add(a, b) => fold_const(a)?.add(&fold_const(b)?),
        Expr::Sub(a, b) => fold_const(a)?.sub(&fold_const(b)?),
        Expr::Mul(a, b) => fold_const(a)?.mul(&fold_const(b)?),
        Expr::Div(a, b) => fold_const(a)?.div(&fold_const(b)?).ok()?,
        Expr::Pow(a, k) => {
            let q = fold_const(a)?;
            (0..*k).fold(Q::one(), |acc, _| acc.mul(&q))
        }
        _ => return None,
    })
}

/// An upper estimate of the bits of a rational's numerator and denominator
/// (a decimal digit is under 10/3 bits).
fn q_bits(q: &Q) -> u64 {
    (q.to_string().len() as u64).saturating_mul(10) / 3 + 1
}

/// The product of the exponents of nested powers, the largest over the tree.
fn nested_power(e: &Expr) -> u64 {
    match e {
        Expr::Pow(a, k) => u64::from(*k).saturating_mul(nested_power(a).max(1)),
        _ => e
            .children()
            .into_iter()
            .map(nested_power)
            .max()
            .unwrap_or(0),
    }
}

fn has_var(e: &Expr) -> bool {
    matches!(e, Expr::Var(_)) || e.children().into_iter().any(has_var)
}

/// An upper estimate of the bits of a constant expression's exact value.
fn const_bits(e: &Expr) -> u64 {
    let sum = |extra: u64| {
        e.children()
            .into_iter()
            .map(const_bits)
            .fold(extra, u64::saturating_add)
    };
    match e {
        Expr::Const(q) => q_bits(q),
        Expr::Pow(a, k) => const_bits(a).saturating_mul(u64::from(*k)),
        Expr::Neg(_) | Expr::Abs(_) | Expr::Relu(_) => sum(0),
        Expr::Add(..) | Expr::Sub(..) | Expr::Mul(..) | Expr::Div(..) => sum(1),
        // Functions of constants (exp(1), floor(1/3)): their own terms.
        _ => sum(64),
    }
}

impl Expr {
    /// The subexpressions one level down.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Var(_) | Expr::Const(_) => vec![],
            Expr::Neg(a)
            | Expr::Pow(a, _)
            | Expr::Sum(a, _)
            | Expr::Mean(a, _)
            | Expr::Max(a, _)
            | Expr::Reshape(a, _)
            | Expr::Slice(a, ..)
            | Expr::Take(a, ..)
            | Expr::Abs(a)
            | Expr::Relu(a)
            | Expr::Floor(a)
            | Expr::Cast(a, _)
            | Expr::Unary(_, a)
            | Expr::Dimwise(_, a, ..)
            | Expr::Cumsum(a, _)
            | Expr::Round(_, a) => vec![a],
            Expr::Add(a, b)
            | Expr::Sub(a, b)
            | Expr::Mul(a, b)
            | Expr::Div(a, b)
            | Expr::UpdateSlice(a, b, _)
            | Expr::CrossEntropy(a, b, _) => vec![a, b],
            Expr::Einsum(_, xs) | Expr::Concat(xs, _) | Expr::Table(_, xs) => xs.iter().collect(),
            Expr::Where(m, a, b) => match m {
                Mask::Input(e) => vec![e, a, b],
                Mask::Const(_) => vec![a, b],
            },
        }
    }
}

/// Renumber variables: variable `i` becomes `map[i]`.
fn renumber(e: &Expr, map: &[usize]) -> Expr {
    let r = |x: &Expr| Box::new(renumber(x, map));
    match e {
        Expr::Var(i) => Expr::Var(map[*i]),
        Expr::Const(q) => Expr::Const(q.clone()),
        Expr::Neg(a) => Expr::Neg(r(a)),
        Expr::Add(a, b) => Expr::Add(r(a), r(b)),
        Expr::Sub(a, b) => Expr::Sub(r(a), r(b)),
        Expr::Mul(a, b) => Expr::Mul(r(a), r(b)),
        Expr::Div(a, b) => Expr::Div(r(a), r(b)),
        Expr::Pow(a, k) => Expr::Pow(r(a), *k),
        Expr::Sum(a, d) => Expr::Sum(r(a), *d),
        Expr::Mean(a, d) => Expr::Mean(r(a), *d),
        Expr::Max(a, d) => Expr::Max(r(a), *d),
        Expr::Einsum(s, args) => {
            Expr::Einsum(s.clone(), args.iter().map(|a| renumber(a, map)).collect())
        }
        Expr::Reshape(a, s) => Expr::Reshape(r(a), s.clone()),
        Expr::Slice(a, d, s, t) => Expr::Slice(r(a), *d, *s, *t),
        Expr::Concat(args, d) => Expr::Concat(args.iter().map(|a| renumber(a, map)).collect(), *d),
        Expr::Take(a, d, idx) => Expr::Take(r(a), *d, idx.clone()),
        Expr::UpdateSlice(a, u, s) => Expr::UpdateSlice(r(a), r(u), s.clone()),
        Expr::Abs(a) => Expr::Abs(r(a)),
        Expr::Relu(a) => Expr::Relu(r(a)),
        Expr::Floor(a) => Expr::Floor(r(a)),
        Expr::Cast(a, k) => Expr::Cast(r(a), *k),
        Expr::Unary(f, a) => Expr::Unary(*f, r(a)),
        Expr::Dimwise(o, a, d, eps) => Expr::Dimwise(*o, r(a), *d, eps.clone()),
        Expr::CrossEntropy(a, t, d) => Expr::CrossEntropy(r(a), r(t), *d),
        Expr::Cumsum(a, d) => Expr::Cumsum(r(a), *d),
        Expr::Where(m, a, c) => Expr::Where(
            match m {
                Mask::Input(e) => Mask::Input(r(e)),
                Mask::Const(v) => Mask::Const(v.clone()),
            },
            r(a),
            r(c),
        ),
        Expr::Round(k, a) => Expr::Round(*k, r(a)),
        Expr::Table(t, args) => {
            Expr::Table(t.clone(), args.iter().map(|a| renumber(a, map)).collect())
        }
    }
}

/// Parse a local function such as `x * y + 1`. Its inputs are its variables
/// in order of first appearance (`matmul(q, transpose(k))` takes q, then k);
/// an expression without variables (`2 * 3`) takes no input.
pub fn parse(src: &str) -> Result<LocalFn, ParseError> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        end_col: src.chars().count() + 1,
        vars: Vec::new(),
        nest: 0,
    };
    let e = p.expr()?;
    if p.pos < p.toks.len() {
        let t = p.toks[p.pos].0.clone();
        return p.err(format!(
            "unexpected {} after a complete expression",
            describe(&t)
        ));
    }
    if let Err(message) = representable(&e) {
        return Err(ParseError { column: 1, message });
    }
    Ok(LocalFn {
        expr: e,
        vars: p.vars,
        text: src.trim().to_string(),
    })
}

/// Parse an expression whose inputs are the variables `order`, numbered in
/// that order (not alphabetically); a variable outside it is an error at its
/// column. Used for declared JVPs, whose inputs are the primals and then
/// their tangents (`x, y, dx, dy`), and for rules that list their `vars`.
pub fn parse_with_vars(src: &str, order: &[String]) -> Result<LocalFn, ParseError> {
    let f = parse(src)?;
    let mut map = Vec::with_capacity(f.vars.len());
    for v in &f.vars {
        match order.iter().position(|o| o == v) {
            Some(k) => map.push(k),
            None => {
                let column = lex(src)?
                    .into_iter()
                    .find(|(t, _)| *t == Tok::Ident(v.clone()))
                    .map(|(_, c)| c)
                    .unwrap_or(1);
                return Err(ParseError {
                    column,
                    message: format!(
                        "unknown variable `{v}`{} (the inputs are {})",
                        spmd_semantics::names::did_you_mean(v, order.iter().map(|s| s.as_str())),
                        order.join(", ")
                    ),
                });
            }
        }
    }
    Ok(LocalFn {
        expr: renumber(&f.expr, &map),
        vars: order.to_vec(),
        text: f.text,
    })
}

/// Whether an expression needs the exact transcendental path.
pub fn is_transcendental(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Unary(..) | Expr::Dimwise(..) | Expr::CrossEntropy(..)
    ) || e.children().into_iter().any(is_transcendental)
}

/// Why `e` would leave the exact field (SPEC.md §19.2), if it would: exp,
/// tanh, sigmoid, silu, sin, cos, gelu, √ and the dim ops take only
/// arguments that are rational on rational inputs, and so does rounding.
/// log, comparisons and arithmetic take any value.
pub fn representable(e: &Expr) -> Result<(), String> {
    let irr = is_transcendental;
    let bad = |what: &str| {
        Err(format!(
            "{what} of a transcendental value has no exact representation (SPEC.md §19.2); write its argument without transcendental ops"
        ))
    };
    match e {
        Expr::Unary(f, a) if *f != Fun::Log && irr(a) => return bad(f.name()),
        Expr::Dimwise(op, a, ..) if irr(a) => return bad(&format!("{op:?}").to_lowercase()),
        Expr::CrossEntropy(a, ..) if irr(a) => return bad("cross_entropy"),
        Expr::Floor(a) | Expr::Cast(a, _) | Expr::Round(_, a) if irr(a) => return bad("rounding"),
        _ => {}
    }
    match e {
        Expr::Var(_) | Expr::Const(_) => Ok(()),
        Expr::Neg(a)
        | Expr::Pow(a, _)
        | Expr::Sum(a, _)
        | Expr::Mean(a, _)
        | Expr::Max(a, _)
        | Expr::Reshape(a, _)
        | Expr::Slice(a, ..)
        | Expr::Take(a, ..)
        | Expr::Abs(a)
        | Expr::Relu(a)
        | Expr::Floor(a)
        | Expr::Cast(a, _)
        | Expr::Round(_, a)
        | Expr::Cumsum(a, _)
        | Expr::Unary(_, a)
        | Expr::Dimwise(_, a, ..) => representable(a),
        Expr::Add(a, b)
        | Expr::Sub(a, b)
        | Expr::Mul(a, b)
        | Expr::Div(a, b)
        | Expr::UpdateSlice(a, b, _)
        | Expr::CrossEntropy(a, b, _) => representable(a).and(representable(b)),
        Expr::Einsum(_, args) | Expr::Concat(args, _) | Expr::Table(_, args) => {
            args.iter().try_for_each(representable)
        }
        Expr::Where(m, a, b) => {
            if let Mask::Input(me) = m {
                representable(me)?;
            }
            representable(a).and(representable(b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_never_wrap() {
        // 2^32 and 2^32 + 1 once wrapped to x^0 and x^1.
        for e in [
            "x^4294967296",
            "x^4294967297",
            "pow(x, 4294967296)",
            "x^1025",
        ] {
            let err = parse(e).unwrap_err();
            assert!(err.message.contains("exponent"), "{e}: {err}");
        }
        let err = parse("x^99999999999999999999999").unwrap_err();
        assert!(err.message.contains("too large"), "{err}");
        // Nested powers multiply.
        assert!(parse("(x^64)^64").is_err());
        assert!(parse("(x^32)^32").is_ok());
        assert_eq!(
            parse("x^17").unwrap().expr,
            Expr::Pow(Box::new(Expr::Var(0)), 17)
        );
    }

    #[test]
    fn powers_of_constants_are_capped_and_computed_once() {
        for e in [
            "3^1100/2*x",
            "(10^500)^3 * x",
            "(1/3)^1024 * x",
            "exp(1)^100 * x",
        ] {
            let err = parse(e).unwrap_err();
            assert!(err.message.contains("at most"), "{e}: {err}");
        }
        let f = parse("(1/3)^3 * x").unwrap();
        let Expr::Mul(c, _) = &f.expr else { panic!() };
        assert_eq!(**c, Expr::Const(Q::frac(1, 27)));
        assert!(parse("2^30 * x").is_ok());
        assert!(parse("exp(1)^2 * x").is_ok());
        assert_eq!(parse("0^0").unwrap().expr, Expr::Const(Q::one()));
    }

    #[test]
    fn a_reshape_whose_size_wraps_is_refused() {
        let f = parse("reshape(x, [4, 4611686018427387905])").unwrap();
        assert!(crate::eval::infer(&f.expr, &[vec![4]]).is_err());
        let f = parse("reshape(x, [2, 2])").unwrap();
        assert!(crate::eval::infer(&f.expr, &[vec![4]]).is_ok());
    }

    #[test]
    fn index_lists_are_bounded_and_nonempty() {
        assert!(parse("take(x, 0, [])")
            .unwrap_err()
            .message
            .contains("at least one"));
        assert!(parse("gather(x, 0, [])").is_err());
        let many = vec!["0"; 9000].join(",");
        let err = parse(&format!("take(x,0,[{many}])")).unwrap_err();
        assert!(err.message.contains("more than"), "{err}");
        assert!(parse("take(x, 0, [0, 1, 0])").is_ok());
    }

    #[test]
    fn explicit_variable_order() {
        let order: Vec<String> = ["x", "y", "dx", "dy"].map(String::from).to_vec();
        let f = parse_with_vars("dx * y + x * dy", &order).unwrap();
        assert_eq!(f.arity(), 4);
        // dx is input 2 and y input 1, whatever the alphabet says.
        let Expr::Add(a, _) = &f.expr else { panic!() };
        assert_eq!(
            **a,
            Expr::Mul(Box::new(Expr::Var(2)), Box::new(Expr::Var(1)))
        );
        let e = parse_with_vars("dx * z", &order).unwrap_err();
        assert_eq!(e.column, 6);
        assert!(e.message.contains("unknown variable `z`"));
    }

    #[test]
    fn parses_the_documented_examples() {
        for s in [
            "x * y + 1",
            "2 * x",
            "x / (y + 1)",
            "sum(x, 0)",
            "einsum(\"ij,jk->ik\", a, b)",
            "concat(x, y, 0)",
        ] {
            parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        // Inputs in order of first appearance, not alphabetical.
        let f = parse("y * x").unwrap();
        assert_eq!(f.vars, vec!["y", "x"]);
        assert_eq!(
            f.expr,
            Expr::Mul(Box::new(Expr::Var(0)), Box::new(Expr::Var(1)))
        );
        let f = parse("matmul(q, transpose(k))").unwrap();
        assert_eq!(f.vars, vec!["q", "k"]);
    }

    #[test]
    fn literals_are_exact_and_expressions_may_have_no_input() {
        let c = |s: &str| match parse(s).unwrap().expr {
            Expr::Const(q) => q,
            e => panic!("{s}: {e:?}"),
        };
        assert_eq!(c("0.5"), Q::parse("1/2").unwrap());
        assert_eq!(c("1e-3"), Q::parse("1/1000").unwrap());
        assert_eq!(c("2.5E+2"), Q::int(250));
        assert_eq!(c(".25"), Q::parse("1/4").unwrap());
        assert_eq!(parse("2 * 3").unwrap().arity(), 0);
        // `2e` is not an exponent: the number 2 times... nothing.
        assert!(parse("2e").is_err());
    }

    #[test]
    fn deep_long_or_huge_input_is_an_error_not_a_crash() {
        let deep = format!("{}x{}", "(".repeat(6000), ")".repeat(6000));
        assert!(parse(&deep)
            .unwrap_err()
            .message
            .contains("nests more than"));
        let flat = vec!["x"; 10_000].join("+");
        assert!(parse(&flat)
            .unwrap_err()
            .message
            .contains("nests more than"));
        let negs = format!("{}x", "-".repeat(10_000));
        assert!(parse(&negs)
            .unwrap_err()
            .message
            .contains("nests more than"));
        let long = format!("x * {}", "1".repeat(100_000));
        assert!(parse(&long).unwrap_err().message.contains("characters"));
        let big = format!("x * {}", "1".repeat(100));
        assert!(parse(&big)
            .unwrap_err()
            .message
            .contains("literals take at most"));
        // Within the limits all is well: 200 nested parentheses, 200 terms.
        parse(&format!("{}x{}", "(".repeat(200), ")".repeat(200))).unwrap();
        parse(&vec!["x"; 200].join(" + ")).unwrap();
    }

    #[test]
    fn errors_point_at_the_column() {
        assert_eq!(parse("x * ").unwrap_err().column, 5);
        assert_eq!(parse("x + )").unwrap_err().column, 5);
        assert_eq!(parse("x $ y").unwrap_err().column, 3);
        let e = parse("foo(x)").unwrap_err();
        assert!(e.message.contains("unknown function"), "{e}");
    }
}
