//! divan benchmarks that watch for memtrack's probes in the allocator on every call
//! (memtrack_examples::probe_watch), with memtrack-divan depended on as `divan`. Run
//! in-process, each prints `NAME: probed 1 of C calls` at the end: only the counted
//! iteration ran with probes attached, every iteration divan timed ran with none. As
//! root:
//!
//! ```sh
//! cargo run --release -p memtrack-examples --bin probe_watch_divan -- --bench
//! ```

use divan::Bencher;
use memtrack_examples::probe_watch::{self, Watch};
use memtrack_one_line_example::{spawned_thread, three_blocks};

static THREE_BLOCKS: Watch = Watch::new("three_blocks");
static THREAD_4K: Watch = Watch::new("thread_4k");

fn main() {
    probe_watch::snapshot();
    divan::main();
    for watch in [&THREE_BLOCKS, &THREAD_4K] {
        println!("{}", watch.line());
    }
}

/// The plain form: the function is the routine.
#[divan::bench]
fn three_blocks_watched() -> usize {
    THREE_BLOCKS.call();
    three_blocks()
}

/// The `Bencher` form (memtrack-divan's `Bencher`), allocating on a thread it starts.
#[divan::bench]
fn thread_4k_watched(bencher: Bencher) {
    bencher.bench(|| {
        THREAD_4K.call();
        spawned_thread()
    });
}
