//! A criterion suite, exactly as written for criterion: three benchmarks (one
//! allocating on a thread it starts), a group with a throughput. With memtrack-criterion
//! depended on as `criterion` (the one changed line, see README.md), each benchmark also
//! gets one counted iteration; nothing here changes.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memtrack_one_line_example::{spawned_thread, three_blocks, vec_grow_100};

fn benches(c: &mut Criterion) {
    c.bench_function("three_blocks", |b| b.iter(three_blocks));

    let mut group = c.benchmark_group("vec");
    group.throughput(Throughput::Elements(100));
    group.bench_function("grow_100", |b| b.iter(vec_grow_100));
    group.finish();

    c.bench_function("thread_4k", |b| b.iter(spawned_thread));
}

criterion_group!(suite, benches);
criterion_main!(suite);
