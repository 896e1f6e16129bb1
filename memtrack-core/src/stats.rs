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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Blocks handed out (see the module docs for what counts as one).
    pub alloc_calls: u64,
    /// Blocks released: `free` of a known non-NULL pointer, and `realloc`'s release of
    /// the old block. `free(NULL)` is not a release.
    pub free_calls: u64,
    /// Sum of the requested sizes of the blocks handed out, in bytes.
    pub bytes_allocated: u64,
    /// Sum of the requested sizes of the blocks released, in bytes.
    pub bytes_freed: u64,
    /// Blocks handed out and not released (at collection time), a count.
    pub live_blocks: u64,
    /// Bytes of those blocks.
    pub live_bytes: u64,
    /// Highest `live_bytes` at any instant since tracking began (or the last reset), in
    /// bytes. Relative to tracking's start: blocks allocated before do not count.
    pub peak_live_bytes: u64,
    /// `CLOCK_MONOTONIC` time in ns at which `peak_live_bytes` was reached; 0 if no block
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
/// seen at syscall exit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// Counters of one allocator function.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    memtrack_targets::AllocFn::from_u32(i as u32).map(|f| f.name())
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
            alloc_calls: raw.alloc_calls,
            free_calls: raw.free_calls,
            bytes_allocated: raw.bytes_allocated,
            bytes_freed: raw.bytes_freed,
            live_blocks: raw.live_blocks,
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
        if other.peak_live_bytes > self.peak_live_bytes {
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

/// Formats a byte count for humans: `512 B`, `1.5 KiB`, `3.0 MiB`, `2.00 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_every_field() {
        let mut raw = PidStats::ZERO;
        raw.alloc_calls = 3;
        raw.free_calls = 2;
        raw.bytes_allocated = 300;
        raw.bytes_freed = 200;
        raw.live_blocks = 1;
        raw.live_bytes = 100;
        raw.peak_live_bytes = 250;
        raw.failed_allocs = 4;
        raw.unmatched_frees = 5;
        raw.lost_events = 6;
        raw.mmap_calls = 7;
        raw.funcs[2].calls = 9;
        raw.funcs[2].grows = 1;
        raw.size_histogram[0] = 1;
        raw.size_histogram[7] = 2;
        let s = Stats::from(&raw);
        assert_eq!(
            (
                s.alloc_calls,
                s.free_calls,
                s.bytes_allocated,
                s.bytes_freed
            ),
            (3, 2, 300, 200)
        );
        assert_eq!(
            (s.live_blocks, s.live_bytes, s.peak_live_bytes),
            (1, 100, 250)
        );
        assert_eq!(
            (s.failed_allocs, s.unmatched_frees, s.lost_events),
            (4, 5, 6)
        );
        assert_eq!(s.syscalls.as_ref().unwrap().mmap_calls, 7);
        assert_eq!(s.functions.len(), 1);
        assert_eq!(s.function("realloc").unwrap().calls, 9);
        assert_eq!(s.function("realloc").unwrap().grows, 1);
        assert_eq!(
            s.size_histogram,
            vec![
                SizeBucket {
                    min_bytes: 0,
                    max_bytes: 0,
                    blocks: 1
                },
                SizeBucket {
                    min_bytes: 64,
                    max_bytes: 127,
                    blocks: 2
                }
            ]
        );
    }

    #[test]
    fn merge_adds_counts_and_keeps_the_higher_peak() {
        let mut a = PidStats::ZERO;
        a.alloc_calls = 2;
        a.bytes_allocated = 200;
        a.peak_live_bytes = 150;
        a.peak_time_ns = 5;
        a.funcs[0].calls = 2;
        a.size_histogram[8] = 2;
        let mut b = PidStats::ZERO;
        b.alloc_calls = 1;
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

    #[test]
    fn formats_bytes() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(format_bytes(2 * 1024 * 1024 * 1024), "2.00 GiB");
    }
}
