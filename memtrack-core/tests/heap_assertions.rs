//! `memtrack::testing` from the user's side: eight tests in one binary, run in parallel
//! by the test harness, each counting its own exact numbers while a thread of its own
//! allocates beside it; eight counts that overlap for certain (a barrier inside them);
//! the `assert_heap!` macro; and the same tests as user `nobody`, who has no privileges:
//! they say "skipped" and pass, or fail with `MEMTRACK_REQUIRE_PRIVILEGED=1`. With the
//! capabilities set on the binary (the book's "Heap tests without root"), `nobody` counts.

use std::{
    path::Path,
    process::Output,
    sync::{
        Arc, Barrier,
        atomic::{AtomicBool, Ordering},
    },
};

use memtrack::testing::count;
use memtrack_test_support::{as_nobody, copy_for_nobody, is_root};

/// Allocates `n` blocks of `n * 100` bytes and frees them, with `n` live at the peak.
#[allow(
    clippy::vec_box,
    reason = "each Box is one heap block: that is the point"
)]
fn blocks(n: usize) {
    let kept: Vec<Box<[u8]>> = Vec::with_capacity(n);
    let mut kept = std::hint::black_box(kept);
    for _ in 0..n {
        kept.push(vec![7u8; n * 100].into_boxed_slice());
    }
    drop(kept);
}

/// A thread that allocates until dropped: its calls must never be counted.
struct Noise {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Noise {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            while !flag.load(Ordering::Relaxed) {
                std::hint::black_box(vec![1u8; 64 + (n % 64) as usize]);
                n += 1;
            }
            n
        });
        Noise {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Noise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("joined once");
        let _ = thread.join();
    }
}

/// `n` blocks of `n * 100` bytes, plus the Vec holding them (`n` pointers): exactly.
fn assert_exact(n: usize) {
    let noise = Noise::start();
    let Some(stats) = count(|| blocks(n)) else {
        return;
    };
    drop(noise);
    let (n, size) = (n as u64, (n * 100) as u64);
    let holder = n * 16; // a Box<[u8]> is a pointer and a length
    assert_eq!(
        (
            stats.alloc_calls,
            stats.bytes_allocated,
            stats.free_calls,
            stats.bytes_freed,
            stats.live_blocks,
            stats.peak_live_bytes,
            stats.unmatched_frees,
        ),
        (
            n + 1,
            holder + n * size,
            n + 1,
            holder + n * size,
            0,
            holder + n * size,
            0
        ),
        "{stats:#?}"
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_1() {
    assert_exact(1);
}
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_2() {
    assert_exact(2);
}
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_3() {
    assert_exact(3);
}
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_4() {
    assert_exact(4);
}
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_5() {
    assert_exact(5);
}
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_6() {
    assert_exact(6);
}
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_7() {
    assert_exact(7);
}
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exact_count_8() {
    assert_exact(8);
}

/// Eight counts at once, for certain: each thread counts, waits inside its count until
/// all eight count, allocates its own pattern and waits again before it stops. (The
/// barrier waits on a futex and allocates nothing.)
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn eight_overlapping_counts_each_see_their_own_thread() {
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (1..=8)
        .map(|n| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let stats = count(|| {
                    barrier.wait();
                    blocks(n);
                    barrier.wait();
                })
                .expect("privileged");
                (n, stats)
            })
        })
        .collect();
    for thread in threads {
        let (n, stats) = thread.join().unwrap();
        let (n, size) = (n as u64, (n * 100) as u64);
        assert_eq!(
            (stats.alloc_calls, stats.bytes_allocated, stats.free_calls),
            (n + 1, n * 16 + n * size, n + 1),
            "thread {n}: {stats:#?}"
        );
    }
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn assert_heap_checks_every_condition() {
    memtrack::assert_heap!(
        || blocks(2),
        alloc_calls == 3,
        bytes_allocated == 32 + 400,
        peak_live_bytes <= 432,
        live_blocks == 0,
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn assert_heap_says_which_conditions_failed() {
    let failure = std::panic::catch_unwind(|| {
        memtrack::assert_heap!(|| blocks(2), alloc_calls == 3, peak_live_bytes < 100);
    })
    .expect_err("the peak is 432 bytes");
    let message = failure
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.starts_with("heap assertion failed: peak_live_bytes < 100 (it is 432)\n"),
        "{message}"
    );
}

/// Runs this test binary's `exact_count_*` tests as user nobody (a copy nobody can
/// execute, made by `prepare`), with MEMTRACK_REQUIRE_PRIVILEGED set to `require` or
/// unset.
fn exact_counts_as_nobody(prepare: impl FnOnce(&Path), require: Option<&str>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let bin = copy_for_nobody(&std::env::current_exe().unwrap(), dir.path());
    prepare(&bin);
    let mut command = as_nobody(&bin);
    command.args(["exact_count_", "--include-ignored", "--test-threads", "8"]);
    command.env_remove(memtrack::testing::REQUIRE_PRIVILEGED_ENV);
    if let Some(value) = require {
        command.env(memtrack::testing::REQUIRE_PRIVILEGED_ENV, value);
    }
    command.output().unwrap()
}

const SKIP: &str = "skipped: no CAP_BPF/CAP_PERFMON (run as root, or see the memtrack book: Heap tests without root)";

/// As nobody the eight tests pass with one "skipped" line each; with
/// MEMTRACK_REQUIRE_PRIVILEGED=1 all eight fail, saying why.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn as_nobody_heap_tests_say_skipped_or_fail_when_required() {
    assert!(is_root(), "needs root: it runs the tests as user nobody");
    let out = exact_counts_as_nobody(|_| {}, None);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("test result: ok. 8 passed; 0 failed"),
        "{stdout}"
    );
    let mut skipped: Vec<&str> = stderr.lines().filter(|l| l.ends_with(SKIP)).collect();
    skipped.sort();
    let want: Vec<String> = (1..=8)
        .map(|n| format!("exact_count_{n}: {SKIP}"))
        .collect();
    assert_eq!(skipped, want, "{stderr}");

    let out = exact_counts_as_nobody(|_| {}, Some("1"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(101), "{stdout}");
    assert!(
        stdout.contains("test result: FAILED. 0 passed; 8 failed"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "exact_count_3: {SKIP}; MEMTRACK_REQUIRE_PRIVILEGED=1 makes this a failure"
        )),
        "{stdout}"
    );
    // Each failure points at the test's own line (#[track_caller]), not at memtrack's.
    assert_eq!(
        stdout
            .matches("panicked at memtrack-core/tests/heap_assertions.rs:")
            .count(),
        8,
        "{stdout}"
    );
}

/// The setcap recipe of the book: CAP_BPF and CAP_PERFMON on the test binary, and user
/// nobody counts exactly (MEMTRACK_REQUIRE_PRIVILEGED=1: no test may skip).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn with_capabilities_on_the_binary_nobody_counts() {
    assert!(
        is_root(),
        "needs root: it sets capabilities and runs as user nobody"
    );
    let out = exact_counts_as_nobody(
        |bin| {
            let status = std::process::Command::new("setcap")
                .arg("cap_bpf,cap_perfmon+ep")
                .arg(bin)
                .status()
                .expect("setcap runs (package libcap2-bin)");
            assert!(status.success(), "setcap on {}", bin.display());
        },
        Some("1"),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("test result: ok. 8 passed; 0 failed"),
        "{stdout}"
    );
    assert!(!stderr.contains("skipped"), "{stderr}");
}
