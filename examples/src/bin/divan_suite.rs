//! divan benchmarks with memtrack-divan: three benchmarks with known allocations, each
//! one line away from plain divan (`.with_memtrack()`), and `memtrack_divan::main()`
//! instead of `divan::main()`. A plain binary, so tests can run it; divan's options work
//! (`--bench` benchmarks, as `cargo bench` would pass; without it divan runs each
//! benchmark once as a test, and memtrack still counts). As root (counts in-process):
//!
//! ```sh
//! cargo run --release -p memtrack-examples --bin divan_suite -- --bench
//! ```
//!
//! Expected after divan's own table:
//!
//! ```text
//! memtrack: one iteration per benchmark, after one warm-up iteration (exact)
//! benchmark                  allocs  allocated  peak live  live at end
//! divan_suite::boxed_kib          1    1,024 B    1,024 B      1,024 B
//! divan_suite::three_blocks       3      192 B      192 B          0 B
//! divan_suite::vec_grow_100       6    2,016 B    1,024 B      1,024 B
//! memtrack: saved in target/memtrack/divan/divan_suite (read it with `memtrack report ...`)
//! ```
//!
//! `boxed_kib` and `vec_grow_100` return what they allocate, so it is still live when
//! the iteration ends (divan drops outputs outside its timing, memtrack outside its
//! count). Under the runner (`cargo build --release -p memtrack-cli -p memtrack-examples`,
//! then `sudo target/release/memtrack run -- target/release/divan_suite --bench`) the
//! runner reports the same numbers per benchmark.
//! Without root and without the runner, one line on stderr says counting is disabled
//! and divan runs as usual.

use divan::{Bencher, black_box};
use memtrack_divan::BencherMemtrackExt;

fn main() {
    memtrack_divan::main();
}

/// Three blocks of 64 bytes, freed inside the iteration: 3 allocs, 192 B, peak 192 B.
#[divan::bench]
fn three_blocks(bencher: Bencher) {
    bencher.with_memtrack().bench(|| {
        let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|i| Box::new([i as u8; 64]));
        black_box(&blocks).len()
    });
}

/// One block of 1 KiB, returned: 1 alloc, 1,024 B, still live at the end.
#[divan::bench]
fn boxed_kib(bencher: Bencher) {
    bencher
        .with_memtrack()
        .bench(|| Box::new(black_box([1u8; 1024])));
}

/// A `Vec<u64>` grown by 100 pushes, returned: one `malloc` and five `realloc`s
/// (capacities 4 to 128), 32 + 64 + ... + 1024 = 2,016 B, 1,024 B live at the end.
#[divan::bench]
fn vec_grow_100(bencher: Bencher) {
    bencher.with_memtrack().bench(|| {
        let mut v: Vec<u64> = Vec::new();
        for i in 0..100 {
            v.push(black_box(i));
        }
        v
    });
}
