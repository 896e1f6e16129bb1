//! [`Stats`]: what memtrack counted for one process (or one benchmark region), in the
//! user's words. Converted from the kernel's raw per-process counters.
//!
//! The counting convention is valgrind DHAT's (blocks), so numbers can be cross-checked:
//!
//! * Every successful `malloc`, `calloc`, `realloc`, `reallocarray`, `aligned_alloc`,
//!   `posix_memalign`, `memalign`, `valloc` and `pvalloc` hands out one block of the
//!   **requested** size (calloc: `nmemb * size`; pvalloc/valloc: the argument, not
//!   rounded up to pages; `malloc(0)`: a block of 0 bytes).
//! * A successful `realloc(p, n)` with `p != NULL` and `n > 0` releases `p`'s block and
//!   hands out a new block of `n` bytes (even when the address does not change).
//!   `realloc(NULL, n)` is a plain allocation; `realloc(p, 0)` (glibc frees `p` and
//!   returns NULL) is a release.
//! * Releases of pointers memtrack never saw allocated (allocated before tracking began,
//!   or while it was stopped) are counted in `unmatched_frees` and never subtracted.
//! * Only calls that begin while tracking is enabled count. A block allocated while
//!   tracking and freed while stopped stays live in the numbers.

use memtrack_common::{HISTOGRAM_BUCKETS, PidStats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Heap counters of one process or region. Sizes in bytes, times in nanoseconds of
/// `CLOCK_MONOTONIC`, the rest plain counts.
///
/// New counters may be added (it is `#[non_exhaustive]`): make one with
/// `Stats::default()` and set the fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Stats {
    /// Blocks handed out (see the module docs for what counts as one); from the kernel's
    /// counters: the sum of their size histogram, where every block is counted once.
    pub alloc_calls: u64,
    /// Blocks released: `free` of a known non-NULL pointer, and `realloc`'s release of
    /// the old block. `free(NULL)` is not a release.
    pub free_calls: u64,
    /// Sum of the requested sizes of the blocks handed out, in bytes.
    pub bytes_allocated: u64,
    /// Sum of the requested sizes of the blocks released, in bytes (from the kernel's
    /// counters: `bytes_allocated - live_bytes`, which is exactly that sum).
    pub bytes_freed: u64,
    /// Blocks handed out and not released (at collection time), a count (from the
    /// kernel's counters: `alloc_calls - free_calls`).
    pub live_blocks: u64,
    /// Bytes of those blocks.
    pub live_bytes: u64,
    /// Highest `live_bytes` at any instant since tracking began (or the last reset), in
    /// bytes. Relative to tracking's start: blocks allocated before do not count.
    pub peak_live_bytes: u64,
    /// `CLOCK_MONOTONIC` time in ns at which `peak_live_bytes` was reached; if it was
    /// reached more than once, the latest time (as valgrind DHAT's t-gmax); 0 if no block
    /// was ever live.
    pub peak_time_ns: u64,
    /// Allocation calls that failed (NULL result, non-zero `posix_memalign` return,
    /// `realloc(p, n > 0)` returning NULL). They hand out no block.
    pub failed_allocs: u64,
    /// Releases of pointers memtrack never saw allocated. Never subtracted from the live
    /// numbers.
    pub unmatched_frees: u64,
    /// Events that could not be accounted exactly (full live map, lost call state,
    /// contended update). Non-zero means the other numbers may be off; 0 means exact.
    pub lost_events: u64,
    /// Memory-mapping syscalls, counted apart from the heap numbers; `None` when they
    /// were not counted (`TrackerBuilder::count_syscalls(false)`, `--no-syscalls`).
    #[serde(default)]
    pub syscalls: Option<SyscallStats>,
    /// Per allocator function (by symbol name), only functions that were called.
    pub functions: BTreeMap<String, FunctionStats>,
    /// Requested sizes of the blocks handed out, by power of two (non-empty buckets only).
    pub size_histogram: Vec<SizeBucket>,
}

/// The `mmap`, `munmap` (successful calls) and `brk` system calls of the process, as
/// seen at syscall exit. Made with `SyscallStats::default()` outside this crate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SyscallStats {
    /// Successful `mmap` calls.
    pub mmap_calls: u64,
    /// Bytes requested by those calls (their `length` argument).
    pub mmap_bytes: u64,
    /// Successful `munmap` calls.
    pub munmap_calls: u64,
    /// Bytes released by those calls (their `length` argument).
    pub munmap_bytes: u64,
    /// `brk` calls (including queries with `brk(0)`).
    pub brk_calls: u64,
    /// Sum of the increases of the program break between consecutive `brk` calls, in
    /// bytes. The first call seen sets the baseline.
    pub brk_grown_bytes: u64,
    /// Sum of the decreases of the program break, in bytes.
    pub brk_shrunk_bytes: u64,
}

/// Counters of one allocator function. Made with `FunctionStats::default()` outside
/// this crate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FunctionStats {
    /// Calls made while tracking (including failed calls and `free(NULL)`); calls made by
    /// another probed function (glibc's `realloc(NULL, n)` calling `malloc`) are not
    /// counted again.
    pub calls: u64,
    /// Calls that failed.
    pub failures: u64,
    /// For allocating functions: requested bytes of the blocks handed out. For `free`:
    /// bytes of the known blocks released.
    pub bytes: u64,
    /// `realloc`/`reallocarray` only: resizes to a larger size than the old block's.
    pub grows: u64,
    /// `realloc`/`reallocarray` only: resizes to a smaller size than the old block's.
    pub shrinks: u64,
}

/// Blocks whose requested size fell in `[min_bytes, max_bytes]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeBucket {
    /// Smallest size in the bucket, in bytes.
    pub min_bytes: u64,
    /// Largest size in the bucket, in bytes (inclusive).
    pub max_bytes: u64,
    /// Blocks handed out with a size in the bucket.
    pub blocks: u64,
}

/// The reported name of counter slot `i` (None for unused slots).
fn function_name(i: usize) -> Option<&'static str> {
    memtrack_common::FUNCTION_NAMES.get(i).copied()
}

fn bucket_bounds(index: usize) -> (u64, u64) {
    match index {
        0 => (0, 0),
        64 => (1 << 63, u64::MAX),
        i => (1 << (i - 1), (1 << i) - 1),
    }
}

impl From<&PidStats> for Stats {
    fn from(raw: &PidStats) -> Self {
        let functions = raw
            .funcs
            .iter()
            .enumerate()
            .filter(|(_, f)| f.calls != 0 || f.bytes != 0 || f.failures != 0)
            .filter_map(|(i, f)| Some((function_name(i)?, f)))
            .map(|(name, f)| {
                (
                    name.to_string(),
                    FunctionStats {
                        calls: f.calls,
                        failures: f.failures,
                        bytes: f.bytes,
                        grows: f.grows,
                        shrinks: f.shrinks,
                    },
                )
            })
            .collect();
        let size_histogram = (0..HISTOGRAM_BUCKETS)
            .filter(|&i| raw.size_histogram[i] != 0)
            .map(|i| {
                let (min_bytes, max_bytes) = bucket_bounds(i);
                SizeBucket {
                    min_bytes,
                    max_bytes,
                    blocks: raw.size_histogram[i],
                }
            })
            .collect();
        Stats {
            alloc_calls: raw.alloc_calls(),
            free_calls: raw.free_calls,
            bytes_allocated: raw.bytes_allocated,
            bytes_freed: raw.bytes_freed(),
            live_blocks: raw.live_blocks(),
            live_bytes: raw.live_bytes,
            peak_live_bytes: raw.peak_live_bytes,
            peak_time_ns: raw.peak_time_ns,
            failed_allocs: raw.failed_allocs,
            unmatched_frees: raw.unmatched_frees,
            lost_events: raw.lost_events,
            syscalls: Some(SyscallStats {
                mmap_calls: raw.mmap_calls,
                mmap_bytes: raw.mmap_bytes,
                munmap_calls: raw.munmap_calls,
                munmap_bytes: raw.munmap_bytes,
                brk_calls: raw.brk_calls,
                brk_grown_bytes: raw.brk_grown_bytes,
                brk_shrunk_bytes: raw.brk_shrunk_bytes,
            }),
            functions,
            size_histogram,
        }
    }
}

impl Stats {
    /// Adds `other`'s counters to these, as if both had been counted together one after
    /// the other (several benchmark regions of one process): counts, bytes, live blocks,
    /// functions and histogram add up; the peak is the higher one (with its time).
    pub fn merge(&mut self, other: &Stats) {
        self.alloc_calls += other.alloc_calls;
        self.free_calls += other.free_calls;
        self.bytes_allocated += other.bytes_allocated;
        self.bytes_freed += other.bytes_freed;
        self.live_blocks += other.live_blocks;
        self.live_bytes += other.live_bytes;
        // The latest of equal peaks, as within one scope.
        if other.peak_live_bytes > self.peak_live_bytes
            || (other.peak_live_bytes == self.peak_live_bytes && other.peak_time_ns != 0)
        {
            self.peak_live_bytes = other.peak_live_bytes;
            self.peak_time_ns = other.peak_time_ns;
        }
        self.failed_allocs += other.failed_allocs;
        self.unmatched_frees += other.unmatched_frees;
        self.lost_events += other.lost_events;
        // Not counted (None) adds nothing.
        match (&mut self.syscalls, &other.syscalls) {
            (Some(a), Some(b)) => {
                a.mmap_calls += b.mmap_calls;
                a.mmap_bytes += b.mmap_bytes;
                a.munmap_calls += b.munmap_calls;
                a.munmap_bytes += b.munmap_bytes;
                a.brk_calls += b.brk_calls;
                a.brk_grown_bytes += b.brk_grown_bytes;
                a.brk_shrunk_bytes += b.brk_shrunk_bytes;
            }
            (mine @ None, Some(b)) => *mine = Some(b.clone()),
            (_, None) => {}
        }
        for (name, f) in &other.functions {
            let mine = self.functions.entry(name.clone()).or_default();
            mine.calls += f.calls;
            mine.failures += f.failures;
            mine.bytes += f.bytes;
            mine.grows += f.grows;
            mine.shrinks += f.shrinks;
        }
        for bucket in &other.size_histogram {
            match self
                .size_histogram
                .iter_mut()
                .find(|b| b.min_bytes == bucket.min_bytes)
            {
                Some(mine) => mine.blocks += bucket.blocks,
                None => self.size_histogram.push(bucket.clone()),
            }
        }
        self.size_histogram.sort_by_key(|b| b.min_bytes);
    }

    /// The counters of one function, if it was called.
    pub fn function(&self, name: &str) -> Option<&FunctionStats> {
        self.functions.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_common::FuncCounters;

    /// Every field of the kernel's counters, each with its own value, lands in its own
    /// field of [`Stats`]: a dropped or swapped field fails this.
    #[test]
    fn converts_every_field() {
        // Destructured without `..`: a field added to the kernel's counters fails to
        // compile here until this test gives it a value and checks it.
        let PidStats {
            free_calls: _,
            live_bytes: _,
            bytes_allocated: _,
            peak_live_bytes: _,
            peak_time_ns: _,
            failed_allocs: _,
            unmatched_frees: _,
            lost_events: _,
            mmap_calls: _,
            mmap_bytes: _,
            munmap_calls: _,
            munmap_bytes: _,
            brk_calls: _,
            brk_grown_bytes: _,
            brk_shrunk_bytes: _,
            // The kernel's own state for the next brk, not a counter: not reported.
            last_brk: _,
            // The per-stack at-peak bookkeeping (stacks.rs reads it), not a counter.
            peak_epoch: _,
            // The peak's time on the stacks' allocation clock (stacks.rs reads it).
            peak_bytes_allocated: _,
            // The timeline's losses (timeline.rs reports them), not a heap counter.
            timeline_lost_buckets: _,
            funcs,
            size_histogram: _,
        } = PidStats::ZERO;
        let FuncCounters {
            calls: _,
            failures: _,
            bytes: _,
            grows: _,
            shrinks: _,
        } = funcs[0];
        let mut raw = PidStats::ZERO;
        raw.free_calls = 2;
        raw.bytes_allocated = 10;
        raw.live_bytes = 6;
        raw.peak_live_bytes = 7;
        raw.peak_time_ns = 8;
        raw.failed_allocs = 9;
        raw.unmatched_frees = 10;
        raw.lost_events = 11;
        raw.mmap_calls = 12;
        raw.mmap_bytes = 13;
        raw.munmap_calls = 14;
        raw.munmap_bytes = 15;
        raw.brk_calls = 16;
        raw.brk_grown_bytes = 17;
        raw.brk_shrunk_bytes = 18;
        // Every counter slot, each counter of it distinct (slot i: 100*i + 1..=5).
        for (i, f) in raw.funcs.iter_mut().enumerate() {
            let base = 100 * i as u64;
            f.calls = base + 1;
            f.failures = base + 2;
            f.bytes = base + 3;
            f.grows = base + 4;
            f.shrinks = base + 5;
        }
        // Every histogram bucket, each with its own count.
        for (i, blocks) in raw.size_histogram.iter_mut().enumerate() {
            *blocks = 1000 + i as u64;
        }
        // The blocks handed out: the histogram's sum.
        let alloc_calls: u64 = (0..HISTOGRAM_BUCKETS as u64).map(|i| 1000 + i).sum();
        assert_eq!(alloc_calls, 67_080);

        let s = Stats::from(&raw);
        let mut want = Stats {
            alloc_calls,
            free_calls: 2,
            bytes_allocated: 10,
            // Derived: 10 - 6 and 67,080 - 2.
            bytes_freed: 4,
            live_blocks: 67_078,
            live_bytes: 6,
            peak_live_bytes: 7,
            peak_time_ns: 8,
            failed_allocs: 9,
            unmatched_frees: 10,
            lost_events: 11,
            syscalls: Some(SyscallStats {
                mmap_calls: 12,
                mmap_bytes: 13,
                munmap_calls: 14,
                munmap_bytes: 15,
                brk_calls: 16,
                brk_grown_bytes: 17,
                brk_shrunk_bytes: 18,
            }),
            functions: BTreeMap::new(),
            size_histogram: Vec::new(),
        };
        // Every slot that names a function is reported under that name; unused slots
        // are not.
        for i in 0..raw.funcs.len() {
            if let Some(name) = function_name(i) {
                let base = 100 * i as u64;
                want.functions.insert(
                    name.to_string(),
                    FunctionStats {
                        calls: base + 1,
                        failures: base + 2,
                        bytes: base + 3,
                        grows: base + 4,
                        shrinks: base + 5,
                    },
                );
            }
        }
        assert!(want.functions.len() >= 10, "{:?}", want.functions.keys());
        for i in 0..HISTOGRAM_BUCKETS {
            let (min_bytes, max_bytes) = bucket_bounds(i);
            want.size_histogram.push(SizeBucket {
                min_bytes,
                max_bytes,
                blocks: 1000 + i as u64,
            });
        }
        assert_eq!(s, want);
        // The names are the reported ones, in slot order of memtrack-targets.
        assert_eq!(s.function("malloc").unwrap().calls, 1);
        assert_eq!(s.function("realloc").unwrap().grows, 204);
    }

    /// A function slot with only failures, or only bytes, is still reported; an empty
    /// slot or bucket is left out.
    #[test]
    fn leaves_out_only_empty_slots() {
        let mut raw = PidStats::ZERO;
        raw.funcs[0].failures = 1;
        raw.funcs[1].bytes = 2;
        raw.size_histogram[7] = 3;
        let s = Stats::from(&raw);
        assert_eq!(
            (function_name(0), function_name(1)),
            (Some("malloc"), Some("calloc"))
        );
        let reported: Vec<(&str, u64, u64)> = s
            .functions
            .iter()
            .map(|(name, f)| (name.as_str(), f.failures, f.bytes))
            .collect();
        assert_eq!(reported, vec![("calloc", 0, 2), ("malloc", 1, 0)]);
        assert_eq!(
            s.size_histogram,
            vec![SizeBucket {
                min_bytes: 64,
                max_bytes: 127,
                blocks: 3
            }]
        );
    }

    /// The kernel's counters after a sequence of events, updated as the programs update
    /// them (memtrack-ebpf account.rs `count_alloc`, `record_release`), beside one
    /// wrapping counter for every reported number, as the programs kept them before
    /// some were derived.
    struct Counted {
        raw: PidStats,
        alloc_calls: u64,
        free_calls: u64,
        bytes_allocated: u64,
        bytes_freed: u64,
        live_blocks: u64,
        live_bytes: u64,
    }

    impl Counted {
        fn new() -> Counted {
            Counted {
                raw: PidStats::ZERO,
                alloc_calls: 0,
                free_calls: 0,
                bytes_allocated: 0,
                bytes_freed: 0,
                live_blocks: 0,
                live_bytes: 0,
            }
        }

        fn alloc(&mut self, size: u64) {
            let raw = &mut self.raw;
            // account.rs size_bucket: 0 for 0 bytes, else floor(log2(size)) + 1.
            let bucket = (u64::BITS - size.leading_zeros()) as usize;
            raw.size_histogram[bucket] = raw.size_histogram[bucket].wrapping_add(1);
            raw.bytes_allocated = raw.bytes_allocated.wrapping_add(size);
            raw.live_bytes = raw.live_bytes.wrapping_add(size);
            self.alloc_calls = self.alloc_calls.wrapping_add(1);
            self.bytes_allocated = self.bytes_allocated.wrapping_add(size);
            self.live_blocks = self.live_blocks.wrapping_add(1);
            self.live_bytes = self.live_bytes.wrapping_add(size);
        }

        fn release(&mut self, size: u64) {
            let raw = &mut self.raw;
            raw.free_calls = raw.free_calls.wrapping_add(1);
            raw.live_bytes = raw.live_bytes.wrapping_sub(size);
            self.free_calls = self.free_calls.wrapping_add(1);
            self.bytes_freed = self.bytes_freed.wrapping_add(size);
            self.live_blocks = self.live_blocks.wrapping_sub(1);
            self.live_bytes = self.live_bytes.wrapping_sub(size);
        }

        /// What the kernel's counters report.
        fn stats(&self) -> Stats {
            Stats::from(&self.raw)
        }

        /// Every reported number derived from the kernel's counters equals its own
        /// counter.
        fn check(&self, what: &str) {
            let s = self.stats();
            assert_eq!(
                (
                    s.alloc_calls,
                    s.free_calls,
                    s.bytes_allocated,
                    s.bytes_freed,
                    s.live_blocks,
                    s.live_bytes
                ),
                (
                    self.alloc_calls,
                    self.free_calls,
                    self.bytes_allocated,
                    self.bytes_freed,
                    self.live_blocks,
                    self.live_bytes
                ),
                "{what}"
            );
        }
    }

    /// The blocks handed out, the live blocks and the bytes released, which the kernel
    /// does not count, come out of the counters it keeps exactly as counters of their
    /// own would have: after
    /// allocations, releases and resizes, with blocks of 0 bytes and of sizes near
    /// 2^64 whose sums wrap, and with releases of blocks allocated before a reset of the
    /// counters (a race the old counters also showed, wrapped below 0).
    #[test]
    fn derived_counts_equal_counters_of_their_own() {
        let mut c = Counted::new();
        c.check("nothing");
        c.alloc(24);
        c.alloc(0);
        c.alloc(4096);
        c.check("three blocks");
        assert_eq!(c.stats().live_blocks, 3);
        c.release(0);
        c.release(24);
        // A realloc: the old block released, a new one handed out.
        c.release(4096);
        c.alloc(8192);
        c.check("after releases and a resize");
        let s = c.stats();
        assert_eq!((s.live_blocks, s.bytes_freed), (1, 4120));
        // Sums that wrap.
        c.alloc(u64::MAX - 5);
        c.alloc(u64::MAX);
        c.release(u64::MAX - 5);
        c.check("wrapped sums");
        c.release(u64::MAX);
        c.release(8192);
        c.check("everything released");
        let s = c.stats();
        assert_eq!((s.live_blocks, s.live_bytes), (0, 0));
        // Counters zeroed by a reset; a block allocated before it is released before
        // its live-map entry is purged: more released than handed out since.
        let mut c = Counted::new();
        c.release(100);
        c.check("a release without its allocation");
        assert_eq!(c.stats().live_blocks, u64::MAX);
        assert_eq!(c.stats().bytes_freed, 100);
        c.alloc(100);
        c.check("and one allocation");
        for size in 0..1000 {
            c.alloc(size * 7);
            if size % 3 != 0 {
                c.release(size * 7);
            }
        }
        c.check("many");
    }

    #[test]
    fn merge_adds_counts_and_keeps_the_higher_peak() {
        let mut a = PidStats::ZERO;
        a.bytes_allocated = 200;
        a.peak_live_bytes = 150;
        a.peak_time_ns = 5;
        a.funcs[0].calls = 2;
        a.size_histogram[8] = 2;
        let mut b = PidStats::ZERO;
        b.bytes_allocated = 50;
        b.peak_live_bytes = 50;
        b.peak_time_ns = 9;
        b.funcs[0].calls = 1;
        b.funcs[4].calls = 3;
        b.size_histogram[6] = 1;
        let mut merged = Stats::from(&a);
        merged.merge(&Stats::from(&b));
        assert_eq!((merged.alloc_calls, merged.bytes_allocated), (3, 250));
        assert_eq!((merged.peak_live_bytes, merged.peak_time_ns), (150, 5));
        // An equal peak later: its time (the latest of equal peaks, as DHAT's t-gmax).
        let mut c = PidStats::ZERO;
        c.peak_live_bytes = 150;
        c.peak_time_ns = 12;
        merged.merge(&Stats::from(&c));
        assert_eq!((merged.peak_live_bytes, merged.peak_time_ns), (150, 12));
        // A scope where nothing was ever live changes nothing.
        merged.merge(&Stats::from(&PidStats::ZERO));
        assert_eq!((merged.peak_live_bytes, merged.peak_time_ns), (150, 12));
        assert_eq!(merged.function("malloc").unwrap().calls, 3);
        assert_eq!(merged.function("free").unwrap().calls, 3);
        let buckets: Vec<(u64, u64)> = merged
            .size_histogram
            .iter()
            .map(|b| (b.min_bytes, b.blocks))
            .collect();
        assert_eq!(buckets, vec![(32, 1), (128, 2)]);
    }

    #[test]
    fn bucket_bounds_cover_u64() {
        assert_eq!(bucket_bounds(1), (1, 1));
        assert_eq!(bucket_bounds(2), (2, 3));
        assert_eq!(bucket_bounds(11), (1024, 2047));
        assert_eq!(bucket_bounds(64), (1 << 63, u64::MAX));
    }
}
