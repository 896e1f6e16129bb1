//! The measurements and `measure_once` in this process, without criterion's loop: a
//! batch's value is exactly what its iterations allocate, nothing of memtrack's own
//! work, and `measure_once` returns and saves one iteration's full counts. Needs root or
//! CAP_BPF+CAP_PERFMON (skipped loudly otherwise, failed under
//! MEMTRACK_REQUIRE_PRIVILEGED=1).
//!
//! Both count the whole process, as benchmark harnesses run one benchmark at a time: so
//! this binary has one test, and the test harness has nothing else to do meanwhile.

use std::hint::black_box;

use criterion::measurement::Measurement;
use memtrack_criterion::{AllocatedBytes, AllocationCalls, Mode};

fn three_blocks() -> usize {
    let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|i| Box::new([i as u8; 64]));
    black_box(&blocks).len()
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn measurements_and_measure_once_count_exactly() {
    a_batch_measures_exactly_its_iterations();
    measure_once_returns_and_saves_one_iteration();
}

fn a_batch_measures_exactly_its_iterations() {
    assert_eq!(memtrack_criterion::mode(), Mode::InProcess);
    let bytes = AllocatedBytes::new();
    let calls = AllocationCalls::new();
    assert!(bytes.is_counting() && calls.is_counting());
    for iterations in [1, 10, 100] {
        let started = bytes.start();
        for _ in 0..iterations {
            black_box(three_blocks());
        }
        assert_eq!(bytes.end(started), 192 * iterations);

        let started = calls.start();
        for _ in 0..iterations {
            black_box(three_blocks());
        }
        assert_eq!(calls.end(started), 3 * iterations);
    }
    // Nothing allocated: exactly zero (memtrack's own work is not counted).
    let started = bytes.start();
    assert_eq!(bytes.end(started), 0);
    assert_eq!(bytes.to_f64(&192), 192.0);
    assert_eq!(bytes.formatter().format_value(192.0), "192.00 B");
    assert_eq!(calls.formatter().format_value(3.0), "3.0000 allocs");
}

fn measure_once_returns_and_saves_one_iteration() {
    let id = format!("in_process_test/vec_{}", std::process::id());
    let stats = memtrack_criterion::measure_once(&id, || vec![1u8; 1000]).expect("in-process");
    // The returned vector is dropped after the count: still live at its end.
    assert_eq!(
        (
            stats.alloc_calls,
            stats.bytes_allocated,
            stats.free_calls,
            stats.live_bytes,
            stats.peak_live_bytes,
            stats.lost_events
        ),
        (1, 1000, 0, 1000, 1000, 0)
    );
    let dir = memtrack_criterion::result_dir(&id);
    assert!(dir.ends_with(format!(
        "criterion/in_process_test/vec_{}",
        std::process::id()
    )));
    let saved = memtrack::MemtrackResult::read_dir(&dir).unwrap();
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].schema_version, memtrack::SCHEMA_VERSION);
    let process = &saved[0].process;
    assert_eq!(process.pid, std::process::id());
    assert_eq!(process.benchmarks.len(), 1);
    assert_eq!(process.benchmarks[0].uri, id);
    assert_eq!(process.benchmarks[0].stats, stats);
    assert_eq!(process.stats, stats, "the process sums its one benchmark");
    assert!(
        memtrack_criterion::results()
            .iter()
            .any(|b| b.uri == id && b.stats == stats)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
