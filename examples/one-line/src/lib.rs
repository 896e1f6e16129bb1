//! The workloads both suites benchmark, each with exactly known allocations (the
//! examples' tests check memtrack's counts of them to the byte). Plain Rust: nothing
//! here knows about memtrack.

use std::hint::black_box;

/// Three blocks of 64 bytes, freed before returning: 3 allocations, 192 bytes, peak 192
/// bytes live, nothing live at the end.
pub fn three_blocks() -> usize {
    let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|i| Box::new([i as u8; 64]));
    black_box(&blocks).len()
}

/// A `Vec<u64>` grown by 100 pushes and returned: capacities 4 to 128, so one `malloc`
/// and five `realloc`s: 6 allocations, 32 + 64 + ... + 1024 = 2,016 bytes, 1,024 bytes
/// live at the end (the vector returned).
pub fn vec_grow_100() -> Vec<u64> {
    let mut v = Vec::new();
    for i in 0..100 {
        v.push(black_box(i));
    }
    v
}

/// Starts a thread that allocates 4,096 bytes and sums them, and joins it: the
/// allocations of the spawned thread (and of starting it) belong to the benchmark.
pub fn spawned_thread() -> u64 {
    std::thread::spawn(|| {
        let buffer = black_box(vec![1u8; 4096]);
        buffer.iter().map(|&b| u64::from(b)).sum::<u64>()
    })
    .join()
    .expect("the spawned thread does not panic")
}
