//! After the first two instances of a case, an instance allocates nothing
//! once the case has met an instance of the same outcome, unless the one
//! before it failed (SPEC.md §18.1): local rational ops (pointwise, quotients
//! with zero divisors, a kink, an einsum) and every program of the layer
//! and FSDP tables (collective steps, chains of collectives, einsum powers
//! and their transposes) on one- and two-axis meshes. The count is every
//! allocation of the process while one instance runs (one test in this
//! binary, so nothing else runs beside it). The twin: the first instance of
//! every case allocates its buffers, so the counter does see the checker's
//! allocations; and a failing instance, which builds its counterexample's
//! text, allocates too.

mod common;

use common::{random_inputs, Lcg};
use spmd_check::generators::{shape_table, Scope};
use spmd_check::interp::{parse_with_vars, TypedOp};
use spmd_check::oracle::check::{Checker, Outcome, Phase};
use spmd_check::rules::{build, parse_file};
use spmd_check::semantics::{Mesh, State, Type};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, size)
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn local(src: &str, ins: &[State], out: State) -> TypedOp {
    let vars = ["x".to_string(), "y".to_string()];
    let f = parse_with_vars(src, &vars[..ins.len()]).expect("parses");
    TypedOp::local(
        f,
        ins.iter().map(|s| Type::one(*s)).collect(),
        Type::one(out),
    )
}

/// What the instances of the cases showed.
#[derive(Default, Debug)]
struct Seen {
    /// Instances past the second of their case and after the first of
    /// their outcome there, and the descriptions of those that allocated.
    repeats: usize,
    allocating: Vec<String>,
    /// Cases whose first instance allocated nothing, and failing instances
    /// that allocated.
    silent_first: usize,
    failing_allocating: usize,
}

/// Runs `count` random instances of `op` at `shapes` on `m` through one
/// checker, recording each one's allocations.
fn run_case(
    op: &TypedOp,
    m: &Mesh,
    shapes: &[Vec<usize>],
    count: usize,
    what: &str,
    seen: &mut Seen,
) {
    let Ok(c) = Checker::new(op, m, shapes.to_vec()) else {
        return;
    };
    let mut rng = Lcg(7);
    let xss: Vec<_> = (0..count)
        .map(|_| random_inputs(op, m, shapes, &mut rng, Lcg::int))
        .collect();
    let mut met = Vec::new();
    let mut after_failure = false;
    for (k, xs) in xss.iter().enumerate() {
        let before = ALLOCS.load(Ordering::Relaxed);
        let o = c.check(xs, Phase::All);
        let n = ALLOCS.load(Ordering::Relaxed) - before;
        let kind = match o {
            Outcome::Pass(p) if p.b3_undetermined => "undetermined",
            Outcome::Pass(_) => "pass",
            Outcome::OutsideDomain => "domain",
            Outcome::Fail(_) => {
                seen.failing_allocating += usize::from(n > 0);
                after_failure = true;
                continue;
            }
        };
        // A failure may take buffers into its report (a forward failure
        // ends the case; after a backward one the driver reads only the
        // forward), so the instance after it makes them again.
        if std::mem::take(&mut after_failure) {
            continue;
        }
        if k == 0 && n == 0 {
            seen.silent_first += 1;
        }
        // The pools fill over the first two instances.
        if k >= 2 && met.contains(&kind) {
            seen.repeats += 1;
            if n > 0 {
                seen.allocating.push(format!(
                    "{what} on {m} at {shapes:?}: instance {k} ({kind}) made {n}"
                ));
            }
        } else if !met.contains(&kind) {
            met.push(kind);
        }
    }
}

#[test]
fn an_instance_allocates_nothing_once_its_case_has_met_its_outcome() {
    use State::*;
    let mut seen = Seen::default();
    let rules: &[(&str, &[State], State)] = &[
        ("x * y", &[Varying, Varying], Varying),
        ("x + y", &[Partial, Partial], Partial),
        ("x * y", &[Partial, Reduced], Partial),
        ("x / y", &[Varying, Varying], Varying),
        ("x / y", &[Invariant, Invariant], Invariant),
        ("relu(x) * y", &[Varying, Varying], Varying),
        ("matmul(x, y)", &[Varying, Invariant], Varying),
    ];
    for m in [Mesh::line(2), Mesh::line(4)] {
        for (src, ins, o) in rules {
            let op = local(src, ins, *o);
            let shapes: Vec<Vec<usize>> = if src.starts_with("matmul") {
                vec![vec![2, 2], vec![2, 2]]
            } else {
                ins.iter().map(|_| vec![2]).collect()
            };
            run_case(&op, &m, &shapes, 12, src, &mut seen);
        }
    }
    let scope = Scope::default();
    for (file, text) in [
        ("examples/programs.toml", spmd_check::programs::LAYERS_TOML),
        ("examples/fsdp.toml", spmd_check::fsdp::FSDP_TOML),
    ] {
        let specs = parse_file(file, text).expect("parses");
        for r in build(file, text, &specs, &scope).expect("builds") {
            for m in [Mesh::line(2), Mesh::new(&[("a", 2), ("b", 2)])] {
                if m.axes.len() != r.op.output.states.len() {
                    continue;
                }
                for (shapes, ..) in shape_table(&r.op, &scope, &m).iter().take(2) {
                    let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
                    run_case(&r.op, &m, &shapes, 8, &r.name, &mut seen);
                }
            }
        }
    }
    assert!(seen.allocating.is_empty(), "{:#?}", seen.allocating);
    assert!(seen.repeats > 150, "{seen:?}");
    // The twin: the counter sees the checker's own allocations.
    assert_eq!(seen.silent_first, 0, "{seen:?}");
    assert!(seen.failing_allocating > 10, "{seen:?}");
}
