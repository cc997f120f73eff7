//! Exact dense tensors (SPEC.md §2 "Values").

use crate::q::Q;
use std::fmt;

pub type Shape = Vec<usize>;

/// A dense row-major tensor of exact rationals. Rank 0 is a scalar.
#[derive(Eq)]
pub struct Tensor {
    pub shape: Shape,
    pub data: Vec<Q>,
}

// Written out so that `clone_from` reuses both buffers (workspaces in the
// oracle are overwritten in place, SPEC.md §18).
impl Clone for Tensor {
    fn clone(&self) -> Tensor {
        Tensor {
            shape: self.shape.clone(),
            data: self.data.clone(),
        }
    }
    /// In place: a buffer of the same shape, the oracle's usual case, is
    /// overwritten entry by entry without the vector's general path (a
    /// truncate, a slice clone and an extend per call).
    fn clone_from(&mut self, o: &Tensor) {
        if !same_shape(&self.shape, &o.shape) {
            self.shape.clone_from(&o.shape);
        }
        if self.data.len() == o.data.len() {
            for (a, b) in self.data.iter_mut().zip(&o.data) {
                a.clone_from(b);
            }
        } else {
            self.data.clone_from(&o.data);
        }
    }
}

// Written out rather than derived so shape comparison avoids `memcmp` (hot in
// the oracle); Hash stays consistent with this equality.
impl PartialEq for Tensor {
    fn eq(&self, o: &Tensor) -> bool {
        same_shape(&self.shape, &o.shape) && self.data == o.data
    }
}
impl std::hash::Hash for Tensor {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.shape.hash(h);
        self.data.hash(h);
    }
}

/// Shape equality written as a loop: shapes have a handful of dims, and the
/// slice comparison's call into `memcmp` showed up in profiles.
#[inline]
pub fn same_shape(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

#[inline]
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides of a shape.
#[inline]
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Multi-index of a flat row-major offset.
#[inline]
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for i in (0..shape.len()).rev() {
        idx[i] = flat % shape[i];
        flat /= shape[i];
    }
    idx
}

impl Tensor {
    /// A tensor with no shape and no entries that holds no buffers: a slot
    /// of a workspace or a swap, overwritten before it is read.
    pub const fn placeholder() -> Tensor {
        Tensor {
            shape: Vec::new(),
            data: Vec::new(),
        }
    }
    pub fn new(shape: Shape, data: Vec<Q>) -> Tensor {
        assert_eq!(
            numel(&shape),
            data.len(),
            "Tensor::new: shape/data mismatch (interpreter bug)"
        );
        Tensor { shape, data }
    }
    #[inline]
    pub fn zeros(shape: &[usize]) -> Tensor {
        Tensor {
            shape: shape.to_vec(),
            data: vec![Q::zero(); numel(shape)],
        }
    }
    /// Turn this into `Tensor::zeros(shape)`, keeping both buffers. A
    /// tensor of that shape already has only its nonzero entries rewritten
    /// (a backward's results at unit cotangents are mostly zeros).
    #[inline]
    pub fn zero_as(&mut self, shape: &[usize]) {
        if same_shape(&self.shape, shape) && self.data.len() == numel(shape) {
            for q in &mut self.data {
                if !q.is_zero() {
                    *q = Q::zero();
                }
            }
            return;
        }
        self.shape.clear();
        self.shape.extend_from_slice(shape);
        self.data.clear();
        self.data.resize(numel(shape), Q::zero());
    }
    pub fn scalar(v: Q) -> Tensor {
        Tensor {
            shape: vec![],
            data: vec![v],
        }
    }
    /// The tensor with a single 1 at flat offset `at`.
    pub fn unit(shape: &[usize], at: usize) -> Tensor {
        let mut t = Tensor::zeros(shape);
        t.data[at] = Q::one();
        t
    }
    #[inline]
    pub fn numel(&self) -> usize {
        self.data.len()
    }
    #[inline]
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn map(&self, f: impl Fn(&Q) -> Q) -> Tensor {
        Tensor {
            shape: self.shape.clone(),
            data: self.data.iter().map(f).collect(),
        }
    }
    /// Elementwise combination of two tensors of the same shape.
    pub fn zip(&self, o: &Tensor, f: impl Fn(&Q, &Q) -> Q) -> Tensor {
        assert!(
            same_shape(&self.shape, &o.shape),
            "Tensor::zip: shape mismatch {:?} vs {:?} (interpreter bug)",
            self.shape,
            o.shape
        );
        Tensor {
            shape: self.shape.clone(),
            data: self
                .data
                .iter()
                .zip(&o.data)
                .map(|(a, b)| f(a, b))
                .collect(),
        }
    }
    pub fn add(&self, o: &Tensor) -> Tensor {
        self.zip(o, Q::add)
    }
    /// `self += h * o` in place; zero entries of `o` cost nothing.
    pub fn add_scaled(&mut self, h: &Q, o: &Tensor) {
        assert!(
            same_shape(&self.shape, &o.shape),
            "Tensor::add_scaled: shape mismatch {:?} vs {:?} (interpreter bug)",
            self.shape,
            o.shape
        );
        let one = h.is_one();
        for (a, b) in self.data.iter_mut().zip(&o.data) {
            if b.is_zero() {
                continue;
            }
            *a = if one { a.add(b) } else { a.add(&b.mul(h)) };
        }
    }
    pub fn sub(&self, o: &Tensor) -> Tensor {
        self.zip(o, Q::sub)
    }
    pub fn scale(&self, c: &Q) -> Tensor {
        self.map(|a| a.mul(c))
    }
    /// Frobenius inner product.
    pub fn dot(&self, o: &Tensor) -> Q {
        assert!(
            same_shape(&self.shape, &o.shape),
            "Tensor::dot: shape mismatch {:?} vs {:?} (interpreter bug)",
            self.shape,
            o.shape
        );
        self.data
            .iter()
            .zip(&o.data)
            .filter(|(a, b)| !a.is_zero() && !b.is_zero())
            .fold(Q::zero(), |acc, (a, b)| acc.add(&a.mul(b)))
    }
    #[inline]
    pub fn is_zero(&self) -> bool {
        self.data.iter().all(Q::is_zero)
    }
    pub fn nonzeros(&self) -> usize {
        self.data.iter().filter(|q| !q.is_zero()).count()
    }
    /// Concatenate along an existing dim.
    pub fn concat(parts: &[Tensor], dim: usize) -> Tensor {
        let first = &parts[0];
        let outer: usize = first.shape[..dim].iter().product();
        let mut shape = first.shape.clone();
        shape[dim] = parts.iter().map(|p| p.shape[dim]).sum();
        let mut data = Vec::with_capacity(numel(&shape));
        for o in 0..outer {
            for p in parts {
                let inner: usize = p.shape[dim..].iter().product();
                data.extend_from_slice(&p.data[o * inner..(o + 1) * inner]);
            }
        }
        Tensor { shape, data }
    }
    /// Stack along a new leading-at-`dim` axis.
    pub fn stack(parts: &[Tensor], dim: usize) -> Tensor {
        let expanded: Vec<Tensor> = parts
            .iter()
            .map(|p| {
                let mut s = p.shape.clone();
                s.insert(dim, 1);
                Tensor {
                    shape: s,
                    data: p.data.clone(),
                }
            })
            .collect();
        Tensor::concat(&expanded, dim)
    }
    /// Split into `n` equal chunks along `dim` (the dim must divide evenly).
    pub fn chunk(&self, n: usize, dim: usize) -> Vec<Tensor> {
        let len = self.shape[dim] / n;
        (0..n)
            .map(|k| self.slice(dim, k * len, (k + 1) * len))
            .collect()
    }
    /// Elements `start..end` along `dim`.
    pub fn slice(&self, dim: usize, start: usize, end: usize) -> Tensor {
        let outer: usize = self.shape[..dim].iter().product();
        let inner: usize = self.shape[dim + 1..].iter().product();
        let mut shape = self.shape.clone();
        shape[dim] = end - start;
        let mut data = Vec::with_capacity(numel(&shape));
        for o in 0..outer {
            let base = o * self.shape[dim] * inner;
            data.extend_from_slice(&self.data[base + start * inner..base + end * inner]);
        }
        Tensor { shape, data }
    }
}

impl fmt::Display for Tensor {
    /// Nested brackets, rationals as `n/d`: `[[1, 1/2], [0, -2]]`; a scalar prints bare.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn go(f: &mut fmt::Formatter<'_>, shape: &[usize], data: &[Q]) -> fmt::Result {
            if shape.is_empty() {
                return write!(f, "{}", data[0]);
            }
            let inner: usize = shape[1..].iter().product();
            write!(f, "[")?;
            for i in 0..shape[0] {
                if i > 0 {
                    write!(f, ", ")?;
                }
                go(f, &shape[1..], &data[i * inner..(i + 1) * inner])?;
            }
            write!(f, "]")
        }
        go(f, &self.shape, &self.data)
    }
}
impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn t(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), v.iter().map(|&x| Q::int(x)).collect())
    }

    /// `clone_from` gives a copy of the source whatever the buffer held:
    /// the same shape (the in-place path), another shape of the same size,
    /// another size, a placeholder, and big values both ways.
    #[test]
    fn clone_from_copies_into_any_buffer() {
        let big = Q::int(i64::MAX).add(&Q::one());
        let mut src = t(&[2, 2], &[1, 0, -3, 4]);
        src.data[1] = big.clone();
        let buffers = [
            t(&[2, 2], &[9, 9, 9, 9]),
            t(&[4], &[5, 6, 7, 8]),
            t(&[3], &[1, 2, 3]),
            t(&[2, 2], &[0, 0, 0, 0]).map(|_| big.clone()),
            Tensor::placeholder(),
        ];
        for mut b in buffers {
            b.clone_from(&src);
            assert_eq!(b, src);
        }
        // Into a buffer of the source's shape that held other values: every
        // entry is written, the big one included.
        let mut b = src.map(|q| q.add(&Q::one()));
        b.clone_from(&src);
        assert_eq!(b.data, src.data);
    }

    /// `zero_as` gives `Tensor::zeros` from any start: the same shape with
    /// values (only the nonzero ones rewritten), another shape, a
    /// placeholder. The twin is the trap of the first path: a placeholder
    /// has shape [] like a scalar but no entry, so a path keyed on the
    /// shape alone would leave it empty.
    #[test]
    fn zero_as_gives_zeros_from_any_start() {
        let big = Q::int(i64::MAX).add(&Q::one());
        let starts = [
            t(&[2, 3], &[1, 0, -2, 0, 0, 5]),
            Tensor::new(
                vec![2, 3],
                vec![
                    big.clone(),
                    Q::frac(1, 3),
                    Q::zero(),
                    big,
                    Q::one(),
                    Q::zero(),
                ],
            ),
            t(&[3, 2], &[1, 2, 3, 4, 5, 6]),
            t(&[], &[7]),
            t(&[4], &[0, 0, 0, 0]),
            Tensor::placeholder(),
        ];
        for shape in [&[2, 3][..], &[], &[6], &[0]] {
            for (i, st) in starts.iter().enumerate() {
                let mut z = st.clone();
                z.zero_as(shape);
                assert!(
                    z.shape == shape && z.data.len() == numel(shape),
                    "start {i} as {shape:?}"
                );
                assert!(z.data.iter().all(Q::is_zero), "start {i} as {shape:?}");
            }
        }
    }
    #[test]
    fn concat_chunk_roundtrip() {
        let a = t(&[2, 2], &[1, 2, 3, 4]);
        let b = t(&[2, 1], &[5, 6]);
        let c = Tensor::concat(&[a.clone(), b], 1);
        assert_eq!(c, t(&[2, 3], &[1, 2, 5, 3, 4, 6]));
        let s = Tensor::stack(&[a.clone(), a.clone()], 0);
        assert_eq!(s.shape, vec![2, 2, 2]);
        assert_eq!(Tensor::concat(&a.chunk(2, 0), 0), a);
        assert_eq!(a.to_string(), "[[1, 2], [3, 4]]");
    }
}
