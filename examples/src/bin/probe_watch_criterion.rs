//! criterion benchmarks that watch for memtrack's probes in the allocator on every call
//! (memtrack_examples::probe_watch), with memtrack-criterion depended on as
//! `criterion`. Run in-process, each prints `NAME: probed 1 of C calls` at the end:
//! only the counted iteration ran with probes attached, every iteration criterion
//! warmed up or timed ran with none. As root:
//!
//! ```sh
//! cargo run --release -p memtrack-examples --bin probe_watch_criterion -- --bench
//! ```

use criterion::{BatchSize, Criterion, criterion_group};
use memtrack_examples::probe_watch::{self, Watch};
use memtrack_one_line_example::{spawned_thread, three_blocks};

static THREE_BLOCKS: Watch = Watch::new("three_blocks");
static THREAD_4K: Watch = Watch::new("thread_4k");

fn benches(c: &mut Criterion) {
    c.bench_function("three_blocks", |b| {
        b.iter(|| {
            THREE_BLOCKS.call();
            three_blocks()
        })
    });
    // Batched: criterion's other timing loop.
    c.bench_function("thread_4k", |b| {
        b.iter_batched(
            || (),
            |()| {
                THREAD_4K.call();
                spawned_thread()
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(suite, benches);

fn main() {
    probe_watch::snapshot();
    suite();
    Criterion::default().configure_from_args().final_summary();
    for watch in [&THREE_BLOCKS, &THREAD_4K] {
        println!("{}", watch.line());
    }
}
