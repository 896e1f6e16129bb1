//! A divan suite, exactly as written for divan: three benchmarks (one allocating on a
//! thread it starts), a counter, an attribute option. With memtrack-divan depended on
//! as `divan` (the one changed line, see README.md), each benchmark also gets one
//! counted iteration; nothing here changes.

use divan::{Bencher, counter::ItemsCount};
use memtrack_one_line_example::{spawned_thread, three_blocks, vec_grow_100};

fn main() {
    divan::main();
}

/// Three blocks of 64 bytes, freed inside the iteration.
#[divan::bench]
fn three_blocks_64() -> usize {
    three_blocks()
}

/// A vector grown by 100 pushes, returned (dropped by divan outside its timing), with
/// divan's throughput counter.
#[divan::bench(min_time = 0.01)]
fn vec_grow(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(100usize))
        .bench(vec_grow_100);
}

/// A thread started, allocating 4 KiB, joined.
#[divan::bench]
fn thread_4k() -> u64 {
    spawned_thread()
}
