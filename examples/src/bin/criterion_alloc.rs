//! criterion benchmarks measured in heap allocations: bytes allocated per iteration
//! ([`AllocatedBytes`]) and allocation calls per iteration ([`AllocationCalls`]), with
//! memtrack-criterion depended on as `criterion` (so `criterion::Criterion` is its
//! wrapper, and every benchmark also gets memtrack's full counts of one iteration). A
//! plain binary driving criterion's API (short runs: 10 samples, 0.3 s), so tests can run
//! it. As root (counts in-process):
//!
//! ```sh
//! cargo run --release -p memtrack-examples --bin criterion_alloc
//! ```
//!
//! Expected (criterion's lines, trimmed):
//!
//! ```text
//! memtrack three_blocks: 3 allocs, 192 B allocated, peak 192 B live, 0 B live at end (one iteration)
//! three_blocks            time:   [192.00 B 192.00 B 192.00 B]
//! memtrack vec_grow_100: 6 allocs, 2,016 B allocated, peak 1,024 B live, 1,024 B live at end (one iteration)
//! vec_grow_100            time:   [1.9688 KiB 1.9688 KiB 1.9688 KiB]
//! three_blocks_calls      time:   [3.0000 allocs 3.0000 allocs 3.0000 allocs]
//! vec_grow_100_calls      time:   [6.0000 allocs 6.0000 allocs 6.0000 allocs]
//! ```
//!
//! ("time" is criterion's fixed label.) The full counts are saved in
//! `target/memtrack/criterion/three_blocks/` and so on; show them with
//! `memtrack report target/memtrack/criterion/three_blocks`. Under the runner
//! (`sudo target/release/memtrack run -- target/release/criterion_alloc`) the run is
//! memory only: the runner counts one iteration of each benchmark, criterion does not
//! run. Without root and without the runner the measurements measure 0, which criterion
//! reports as errors, saving nothing (one line on stderr says why).

use std::{hint::black_box, time::Duration};

use criterion::{AllocatedBytes, AllocationCalls, Criterion, measurement::Measurement};

/// Three blocks of 64 bytes, freed before returning: 3 allocs, 192 B, peak 192 B.
fn three_blocks() -> usize {
    let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|i| Box::new([i as u8 + 1; 64]));
    black_box(&blocks).len()
}

/// A `Vec<u64>` grown by 100 pushes and returned: capacities 4 to 128, so one `malloc`
/// and five `realloc`s: 6 allocs, 32 + 64 + ... + 1024 = 2016 B, 1024 B live at the end.
fn vec_grow_100() -> Vec<u64> {
    let mut v = Vec::new();
    for i in 0..100 {
        v.push(black_box(i));
    }
    v
}

/// Short runs: exact counts are the same in every sample, so few samples suffice and
/// the bootstrap needs no precision.
fn short<M: Measurement>(c: Criterion<M>) -> Criterion<M> {
    c.sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300))
        .nresamples(2_000)
}

fn main() {
    let mut bytes = short(AllocatedBytes::criterion());
    bytes.bench_function("three_blocks", |b| b.iter(three_blocks));
    bytes.bench_function("vec_grow_100", |b| b.iter(vec_grow_100));

    let mut calls = short(AllocationCalls::criterion());
    calls.bench_function("three_blocks_calls", |b| b.iter(three_blocks));
    calls.bench_function("vec_grow_100_calls", |b| b.iter(vec_grow_100));

    // What `criterion_main!` does last: exit code 1 if a result could not be saved.
    criterion::exit_if_not_saved();
}
