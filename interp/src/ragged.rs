//! Ragged all-to-all (SPEC.md §23): JAX's `ragged_all_to_all`, exactly.
//!
//! Every rank holds an `operand` and an `output` buffer whose leading dims
//! count rows (the other dims make one row). Each rank has K = n·m slices:
//! slice i of sender s is `send_sizes[s][i]` rows of its operand from row
//! `input_offsets[s][i]`, sent to rank i / m and written there from row
//! `output_offsets[s][i]` of a copy of that rank's `output`. The receiver
//! lists what it receives in `recv_sizes`: entry j of rank d is what sender
//! j / m sends it as its slice d·m + j mod m. Rows no segment writes keep
//! `output`'s values. The map is linear in (operand, output) jointly.
//!
//! A layout is read from untrusted input: [`Layout::validate`] refuses one
//! whose sizes disagree or whose segments leave the buffers, or whose
//! received segments overlap (then the result would depend on the order of
//! the writes, which JAX leaves unspecified).

use spmd_semantics::Tensor;

/// The integer arguments of one call, per rank (`[rank][slice]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub input_offsets: Vec<Vec<usize>>,
    pub send_sizes: Vec<Vec<usize>>,
    pub output_offsets: Vec<Vec<usize>>,
    pub recv_sizes: Vec<Vec<usize>>,
}

/// One segment: `rows` rows of `src`'s operand from row `from`, written
/// into `dst`'s result from row `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub src: usize,
    pub dst: usize,
    pub from: usize,
    pub to: usize,
    pub rows: usize,
}

impl Layout {
    pub fn ranks(&self) -> usize {
        self.input_offsets.len()
    }

    /// Slices per destination (m = K / n).
    fn per_dst(&self) -> usize {
        self.input_offsets[0].len() / self.ranks()
    }

    /// Why this layout cannot be run on buffers of `operand_rows` and
    /// `output_rows` rows, if it cannot.
    pub fn validate(&self, operand_rows: usize, output_rows: usize) -> Result<(), String> {
        let n = self.ranks();
        if n == 0 {
            return Err("no ranks".into());
        }
        let k = self.input_offsets[0].len();
        for (name, v) in [
            ("input_offsets", &self.input_offsets),
            ("send_sizes", &self.send_sizes),
            ("output_offsets", &self.output_offsets),
            ("recv_sizes", &self.recv_sizes),
        ] {
            if v.len() != n {
                return Err(format!("{name} has {} ranks, not {n}", v.len()));
            }
            if let Some(r) = v.iter().position(|s| s.len() != k) {
                return Err(format!(
                    "{name} of rank {r} has {} entries, not {k}",
                    v[r].len()
                ));
            }
        }
        if k == 0 || !k.is_multiple_of(n) {
            return Err(format!(
                "{k} slices per rank is not a positive multiple of {n} ranks"
            ));
        }
        let m = k / n;
        for d in 0..n {
            for j in 0..k {
                let (s, i) = (j / m, d * m + j % m);
                if self.recv_sizes[d][j] != self.send_sizes[s][i] {
                    return Err(format!(
                        "rank {d} expects {} rows as its entry {j}, rank {s} sends {} as its slice {i}",
                        self.recv_sizes[d][j], self.send_sizes[s][i]
                    ));
                }
            }
        }
        let mut written = vec![vec![false; output_rows]; n];
        for g in self.segments() {
            let end = |start: usize| start.checked_add(g.rows);
            if end(g.from).is_none_or(|e| e > operand_rows) {
                return Err(format!(
                    "rank {}'s segment of {} rows from row {} leaves its operand of {operand_rows} rows",
                    g.src, g.rows, g.from
                ));
            }
            if end(g.to).is_none_or(|e| e > output_rows) {
                return Err(format!(
                    "the segment of {} rows rank {} sends to row {} of rank {} leaves its output of {output_rows} rows",
                    g.rows, g.src, g.to, g.dst
                ));
            }
            for (row, w) in written[g.dst]
                .iter_mut()
                .enumerate()
                .skip(g.to)
                .take(g.rows)
            {
                if std::mem::replace(w, true) {
                    return Err(format!(
                        "row {row} of rank {} is written by two segments",
                        g.dst
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every segment, sender by sender.
    pub fn segments(&self) -> Vec<Segment> {
        let m = self.per_dst();
        let mut out = Vec::new();
        for (s, sizes) in self.send_sizes.iter().enumerate() {
            for (i, &rows) in sizes.iter().enumerate() {
                out.push(Segment {
                    src: s,
                    dst: i / m,
                    from: self.input_offsets[s][i],
                    to: self.output_offsets[s][i],
                    rows,
                });
            }
        }
        out
    }

    /// The forward on a validated layout: each rank's result is a copy of
    /// its `output` with every received segment written in.
    pub fn forward(&self, operand: &[Tensor], output: &[Tensor]) -> Vec<Tensor> {
        let mut res: Vec<Tensor> = output.to_vec();
        for g in self.segments() {
            let width = row_width(&operand[g.src]);
            let from = &operand[g.src].data[g.from * width..(g.from + g.rows) * width];
            res[g.dst].data[g.to * width..(g.to + g.rows) * width].clone_from_slice(from);
        }
        res
    }
}

/// Elements per row (the product of the dims after the first).
pub fn row_width(t: &Tensor) -> usize {
    t.shape.iter().skip(1).product()
}
