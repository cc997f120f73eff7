//! `cargo bench`: the same measurements as `spmd-check bench`.

fn main() {
    spmd_check::bench::run();
}
