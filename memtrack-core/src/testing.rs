//! Heap assertions for tests: count exactly what a closure allocates, on the calling
//! thread, from `#[test]`s that run in parallel.
//!
//! ```no_run
//! #[test]
//! fn a_vec_of_1000_bytes_is_one_block() {
//!     let Some(stats) = memtrack::testing::count(|| vec![0u8; 1000]) else {
//!         return; // skipped: no privileges (said on stderr)
//!     };
//!     assert_eq!((stats.alloc_calls, stats.bytes_allocated), (1, 1000));
//! }
//!
//! #[test]
//! fn parsing_stays_small() {
//!     // Every condition is checked; a failure lists all that failed, with the numbers.
//!     memtrack::assert_heap!(|| "1,2,3".split(',').count(), alloc_calls == 0, peak_live_bytes <= 1024);
//! }
//! ```
//!
//! Each count makes its own thread-scoped [`Tracker`] ([`Scope::Thread`]): it loads its
//! own programs and maps and counts only the thread that calls it, so tests running on
//! other threads of the same test binary (cargo runs them in parallel) are never counted,
//! and several counts can run at once. **Threads the closure spawns are not counted.**
//! Making that tracker (loading, probing the process's allocator) is most of what a
//! count costs (tens of milliseconds; the book's "Several trackers in one
//! process", docs/src/how-it-works/heap-tests.md); dropping it returns at once (the probes are detached in the background). While N counts run at once, each allocation call of the process runs N
//! probe programs.
//!
//! Without CAP_BPF and CAP_PERFMON (or root), a count says on stderr
//! `TEST: skipped: no CAP_BPF/CAP_PERFMON (run as root, or see the memtrack book: Heap
//! tests without root)` and returns `None`, so the test passes without asserting; with
//! `MEMTRACK_REQUIRE_PRIVILEGED=1` in the environment (for CI) it panics instead, since
//! there a skipped test would hide a failure. [`privileged_or_skip`] is that check alone,
//! for tests that make their own trackers.

use std::io::Write;

use crate::{Scope, Stats, Tracker, TrackerBuilder};

/// The environment variable that turns a skip for lack of privileges into a failure:
/// `MEMTRACK_REQUIRE_PRIVILEGED=1`.
pub const REQUIRE_PRIVILEGED_ENV: &str = "MEMTRACK_REQUIRE_PRIVILEGED";

/// The live-block capacity of a test's tracker: 65,536 blocks, about 6.5 MiB of kernel
/// memory per tracker ([`live_map_bytes`](crate::live_map_bytes)), so that many tests
/// at once stay cheap. A closure that keeps more blocks live at once makes
/// [`count`] panic (its numbers would not be exact); give [`count_with`] a builder with a
/// larger [`max_live_blocks`](TrackerBuilder::max_live_blocks).
pub const TEST_LIVE_BLOCKS: u32 = 1 << 16;

/// The tracker settings [`count`] uses: [`TEST_LIVE_BLOCKS`] live blocks, and no
/// mmap/munmap/brk counting (which would put a probe on every system call of the
/// machine; [`Stats::syscalls`] is then `None`).
pub fn test_tracker() -> TrackerBuilder {
    Tracker::builder()
        .max_live_blocks(TEST_LIVE_BLOCKS)
        .count_syscalls(false)
}

/// Whether this process may count (root, or CAP_BPF and CAP_PERFMON). If not, says
/// `TEST: skipped: no CAP_BPF/CAP_PERFMON (run as root, or see the memtrack book: Heap tests
/// without root)` on stderr (straight to file descriptor 2, which the test harness does not
/// capture, so it is seen) and returns false; with [`REQUIRE_PRIVILEGED_ENV`]`=1` it
/// panics with that message instead.
#[track_caller]
pub fn privileged_or_skip(test: &str) -> bool {
    if crate::privileges::can_track() {
        return true;
    }
    let message = format!(
        "{test}: skipped: no CAP_BPF/CAP_PERFMON (run as root, or see the memtrack book: \
         Heap tests without root)"
    );
    if std::env::var_os(REQUIRE_PRIVILEGED_ENV).is_some_and(|v| v == "1") {
        panic!("{message}; {REQUIRE_PRIVILEGED_ENV}=1 makes this a failure");
    }
    let _ = writeln!(std::io::stderr(), "{message}");
    false
}

/// The name of the running test: the test harness names each test's thread after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("heap test")
        .to_owned()
}

/// Counts the heap calls `f` makes on the calling thread, exactly; `None` when skipped
/// for lack of privileges (see the module docs). What `f` returns is dropped after
/// counting stopped, so its frees are not counted (its blocks show as live); use
/// [`count_with`] to keep it.
///
/// # Panics
/// If the tracker cannot be made (with privileges), or if events were lost (more than
/// [`TEST_LIVE_BLOCKS`] blocks live at once): the numbers would not be exact.
#[track_caller]
pub fn count<R>(f: impl FnOnce() -> R) -> Option<Stats> {
    count_with(test_tracker(), f).map(|(_, stats)| stats)
}

/// [`count`] with a tracker built from `builder` (which [`build`](TrackerBuilder::build)s
/// it with [`Scope::Thread`]), returning what `f` returned with the counters.
///
/// # Panics
/// As [`count`].
///
/// Its panics point at the caller's line (`#[track_caller]`), the test's own.
#[track_caller]
pub fn count_with<R>(builder: TrackerBuilder, f: impl FnOnce() -> R) -> Option<(R, Stats)> {
    let test = test_name();
    if !privileged_or_skip(&test) {
        return None;
    }
    let mut tracker = match builder.build(Scope::Thread) {
        Ok(tracker) => tracker,
        Err(e) => panic!("{test}: memtrack cannot count: {e}"),
    };
    if let Err(e) = tracker.start() {
        panic!("{test}: memtrack cannot start counting: {e}");
    }
    let value = f();
    if let Err(e) = tracker.stop() {
        panic!("{test}: memtrack cannot stop counting: {e}");
    }
    let stats = match tracker.collect() {
        Ok(stats) => stats,
        Err(e) => panic!("{test}: memtrack cannot read its counters: {e}"),
    };
    assert_eq!(
        stats.lost_events, 0,
        "{test}: memtrack lost events ({}), so the counts are not exact (more live blocks \
         than the tracker's map holds?): {stats:#?}",
        stats.lost_events
    );
    Some((value, stats))
}

/// Counts what a closure allocates on this thread ([`testing::count`](crate::testing::count))
/// and checks conditions on the counters ([`Stats`] fields), reporting every condition
/// that failed, with the values, in one panic. Skipped (nothing checked, a line on
/// stderr) without privileges, as `count` is.
///
/// ```no_run
/// memtrack::assert_heap!(|| vec![0u8; 1000], alloc_calls == 1, bytes_allocated == 1000);
/// // In the spirit of a memory limit: the peak of live bytes stays under 1 MiB.
/// memtrack::assert_heap!(|| (0..100).map(|i| vec![0u8; i]).count(), peak_live_bytes <= 1 << 20);
/// ```
#[macro_export]
macro_rules! assert_heap {
    ($body:expr, $($field:ident $op:tt $value:expr),+ $(,)?) => {
        if let Some(stats) = $crate::testing::count($body) {
            let mut failed: ::std::vec::Vec<::std::string::String> = ::std::vec::Vec::new();
            $(
                if !(stats.$field $op $value) {
                    failed.push(::std::format!(
                        "{} {} {} (it is {})",
                        ::std::stringify!($field),
                        ::std::stringify!($op),
                        ::std::stringify!($value),
                        stats.$field
                    ));
                }
            )+
            if !failed.is_empty() {
                ::std::panic!(
                    "heap assertion failed: {}\n{:#?}",
                    failed.join("; "),
                    stats
                );
            }
        }
    };
}
