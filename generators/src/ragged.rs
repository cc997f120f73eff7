//! Ragged all-to-all layouts (SPEC.md §23), enumerated smallest first: on
//! `n` ranks with one slice per destination, every send size up to
//! `max_rows` and every output offset inside a buffer of `rows` rows; the
//! input offsets either packed (each sender's slices back to back, as an
//! exclusive cumulative sum of its sizes, MoE dispatch's layout) or, with
//! [`Inputs::Any`], every offset inside the operand (so a row may be sent
//! twice); only layouts that [`Layout::validate`] accepts for buffers of
//! `rows` rows.

use spmd_interp::ragged::Layout;

/// Where the senders' slices start in their operands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Inputs {
    /// Back to back, in slice order.
    Packed,
    /// Anywhere in the operand.
    Any,
}

/// Every valid layout, ordered by total rows sent, then as enumerated.
pub fn layouts(n: usize, rows: usize, max_rows: usize, inputs: Inputs) -> Vec<Layout> {
    let k = n; // one slice per destination
    let cells = n * k;
    let starts = if inputs == Inputs::Any { rows } else { 1 };
    let choices: Vec<(usize, usize, usize)> = (0..=max_rows)
        .flat_map(|sz| (0..rows).flat_map(move |off| (0..starts).map(move |at| (sz, off, at))))
        .collect();
    let mut out: Vec<(usize, Layout)> = Vec::new();
    let mut idx = vec![0usize; cells];
    loop {
        let pick: Vec<(usize, usize, usize)> = idx.iter().map(|&i| choices[i]).collect();
        let send: Vec<Vec<usize>> = (0..n)
            .map(|s| (0..k).map(|i| pick[s * k + i].0).collect())
            .collect();
        let out_off: Vec<Vec<usize>> = (0..n)
            .map(|s| (0..k).map(|i| pick[s * k + i].1).collect())
            .collect();
        let in_off: Vec<Vec<usize>> = match inputs {
            Inputs::Any => (0..n)
                .map(|s| (0..k).map(|i| pick[s * k + i].2).collect())
                .collect(),
            Inputs::Packed => send
                .iter()
                .map(|sz| {
                    sz.iter()
                        .scan(0usize, |acc, &x| {
                            let at = *acc;
                            *acc += x;
                            Some(at)
                        })
                        .collect()
                })
                .collect(),
        };
        // The receiver's view: entry j of rank d is slice d of sender j.
        let recv: Vec<Vec<usize>> = (0..n)
            .map(|d| (0..n).map(|j| send[j][d]).collect())
            .collect();
        let l = Layout {
            input_offsets: in_off,
            send_sizes: send,
            output_offsets: out_off,
            recv_sizes: recv,
        };
        if l.validate(rows, rows).is_ok() {
            let total = l.send_sizes.iter().flatten().sum();
            out.push((total, l));
        }
        // The next choice, odometer-wise.
        let mut c = 0;
        loop {
            if c == cells {
                out.sort_by_key(|(t, _)| *t);
                return out.into_iter().map(|(_, l)| l).collect();
            }
            idx[c] += 1;
            if idx[c] < choices.len() {
                break;
            }
            idx[c] = 0;
            c += 1;
        }
    }
}
