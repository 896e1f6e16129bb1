//! Types shared by memtrack's eBPF programs (`memtrack-ebpf`) and its user-space loader
//! (`memtrack`).
//!
//! Everything here is `#[repr(C)]` plain data with explicit padding, because the same bytes
//! are written by one side of the kernel boundary and read by the other. The crate is
//! `no_std` so the eBPF side can use it; the `user` feature adds `aya::Pod` impls for the
//! loader.
//!
//! Units: every `*_bytes` field is in bytes, every `*_ns` field in nanoseconds of
//! `CLOCK_MONOTONIC` (what `bpf_ktime_get_ns` returns), every `*_calls`/`*_blocks` field a
//! plain count.
#![no_std]
#![warn(missing_docs)]

/// Number of per-function counter slots in [`PidStats::funcs`]: one per function name
/// memtrack reports (the user-space table `memtrack_targets::AllocFn` numbers them).
pub const NUM_FUNCS: usize = 32;

/// Number of buckets of the log2 size histogram: bucket 0 holds 0-byte blocks, bucket `i`
/// (1..=64) holds sizes in `[2^(i-1), 2^i)`.
pub const HISTOGRAM_BUCKETS: usize = 65;

/// Indexes of the functions the eBPF side names itself (the rest are only known to
/// user space, which passes each probe's index in its attach cookie).
pub mod func {
    /// `free(ptr)`: the slot credited with bytes released by free-like functions.
    pub const FREE: u32 = 4;
}

/// How a probed function takes its arguments and hands out or releases memory. The
/// eBPF side has one entry program per kind; user space picks it for each symbol.
pub mod kind {
    /// `f(size, ...)` returns a block: malloc, valloc, operator new, mallocx, mi_malloc...
    pub const SIZE_FIRST: u32 = 0;
    /// `f(alignment, size)` returns a block: aligned_alloc, memalign.
    pub const SIZE_SECOND: u32 = 1;
    /// `f(nmemb, size, ...)` returns a block of nmemb*size bytes: calloc.
    pub const CALLOC: u32 = 2;
    /// `f(ptr, size, ...)` resizes: realloc, rallocx, mi_realloc.
    pub const REALLOC: u32 = 3;
    /// `f(ptr, nmemb, size)` resizes to nmemb*size bytes: reallocarray.
    pub const REALLOCARRAY: u32 = 4;
    /// `int f(void **memptr, alignment, size)`: posix_memalign.
    pub const POSIX_MEMALIGN: u32 = 5;
    /// `f(ptr, ...)` releases: free, operator delete, sdallocx, mi_free.
    pub const FREE: u32 = 6;
}

/// Layout of a probe's attach cookie: the function's counter slot in bits 0-15, its
/// argument layout ([`kind`]) in bits 16-23, and in the high 32 bits how many bytes the
/// stack pointer has moved at the probed instruction (so `rsp + adjust` is the
/// function's entry stack pointer).
pub mod cookie {
    /// The cookie of a probe.
    pub const fn make(func: u32, kind: u32, stack_adjust: u32) -> u64 {
        ((func & 0xffff) as u64) | (((kind & 0xff) as u64) << 16) | ((stack_adjust as u64) << 32)
    }
    /// The counter slot of a cookie.
    pub const fn func(cookie: u64) -> u32 {
        (cookie & 0xffff) as u32
    }
    /// The argument layout of a cookie (a [`kind`](super::kind) id).
    pub const fn kind(cookie: u64) -> u32 {
        ((cookie >> 16) & 0xff) as u32
    }
    /// The stack adjustment of a cookie, in bytes.
    pub const fn stack_adjust(cookie: u64) -> u64 {
        cookie >> 32
    }
}

/// Value of the `TRACKED` map (key: tgid, i.e. the process id).
///
/// A process is probed only while it has an entry; its calls are counted only while
/// `enabled != 0`, and, when `tid != 0`, only on that one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackState {
    /// Non-zero: count this process's calls.
    pub enabled: u32,
    /// Zero: all threads. Otherwise the only thread id whose calls are counted.
    pub tid: u32,
}

/// Per-function counters inside [`PidStats`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncCounters {
    /// Calls that began while tracking was enabled (including failed ones and `free(NULL)`).
    pub calls: u64,
    /// Calls that failed (NULL result, or non-zero `posix_memalign` return).
    pub failures: u64,
    /// Requested bytes of the blocks this function handed out (for `free`: released).
    pub bytes: u64,
    /// `realloc`/`reallocarray` only: resizes to a larger size than the known old size.
    pub grows: u64,
    /// `realloc`/`reallocarray` only: resizes to a smaller size than the known old size.
    pub shrinks: u64,
}

/// Per-process counters, the value of the `STATS` map (key: tgid).
///
/// User space inserts a zeroed value before enabling a process; the eBPF programs only
/// update existing values, with atomic instructions (several threads of one process run
/// the programs concurrently).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidStats {
    /// Blocks handed out.
    pub alloc_calls: u64,
    /// Blocks released (free of a known pointer, realloc's release of the old block).
    pub free_calls: u64,
    /// Requested bytes of the blocks handed out.
    pub bytes_allocated: u64,
    /// Requested bytes of the blocks released.
    pub bytes_freed: u64,
    /// Blocks allocated and not yet released.
    pub live_blocks: u64,
    /// Bytes of the live blocks.
    pub live_bytes: u64,
    /// Highest `live_bytes` seen.
    pub peak_live_bytes: u64,
    /// `bpf_ktime_get_ns()` when `peak_live_bytes` was last raised (0: never).
    pub peak_time_ns: u64,
    /// Allocation calls that failed.
    pub failed_allocs: u64,
    /// Releases of pointers not in the live map (allocated before tracking began).
    pub unmatched_frees: u64,
    /// Anything that makes the numbers inexact: a full live map, a lost pending entry,
    /// a contended atomic update that gave up.
    pub lost_events: u64,
    /// Successful `mmap` syscalls.
    pub mmap_calls: u64,
    /// Bytes mapped by those `mmap` calls (the length argument).
    pub mmap_bytes: u64,
    /// Successful `munmap` syscalls.
    pub munmap_calls: u64,
    /// Bytes unmapped by those `munmap` calls (the length argument).
    pub munmap_bytes: u64,
    /// `brk` syscalls.
    pub brk_calls: u64,
    /// Sum of the increases of the program break seen between `brk` calls.
    pub brk_grown_bytes: u64,
    /// Sum of the decreases of the program break seen between `brk` calls.
    pub brk_shrunk_bytes: u64,
    /// The program break after the last `brk` call seen (0: none yet).
    pub last_brk: u64,
    /// Per-function counters, indexed by [`func`].
    pub funcs: [FuncCounters; NUM_FUNCS],
    /// Log2 histogram of the requested sizes of the blocks handed out.
    pub size_histogram: [u64; HISTOGRAM_BUCKETS],
    /// Keeps the size a multiple of 8 and leaves room for growth.
    pub _reserved: [u64; 3],
}

impl PidStats {
    /// All counters zero.
    pub const ZERO: PidStats = PidStats {
        alloc_calls: 0,
        free_calls: 0,
        bytes_allocated: 0,
        bytes_freed: 0,
        live_blocks: 0,
        live_bytes: 0,
        peak_live_bytes: 0,
        peak_time_ns: 0,
        failed_allocs: 0,
        unmatched_frees: 0,
        lost_events: 0,
        mmap_calls: 0,
        mmap_bytes: 0,
        munmap_calls: 0,
        munmap_bytes: 0,
        brk_calls: 0,
        brk_grown_bytes: 0,
        brk_shrunk_bytes: 0,
        last_brk: 0,
        funcs: [FuncCounters {
            calls: 0,
            failures: 0,
            bytes: 0,
            grows: 0,
            shrinks: 0,
        }; NUM_FUNCS],
        size_histogram: [0; HISTOGRAM_BUCKETS],
        _reserved: [0; 3],
    };
}

impl Default for PidStats {
    fn default() -> Self {
        Self::ZERO
    }
}

/// Key of the `LIVE` map: one live block of one process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LiveKey {
    /// Process id (tgid).
    pub tgid: u32,
    /// Always zero (explicit padding, so every key byte is initialised).
    pub _pad: u32,
    /// Address returned by the allocator.
    pub addr: u64,
}

/// Value of the `PENDING` map (key: `pid_tgid` of the calling thread): the arguments of
/// an allocator call between its entry and its return probe.
///
/// `depth` counts nested probed calls on the thread (glibc's `realloc(NULL, n)` calls
/// `malloc`, `realloc(p, 0)` calls `free`, `reallocarray` calls `realloc`): only the
/// outermost call is accounted, so a block is counted once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// Number of probed calls in progress on this thread (the outermost included).
    pub depth: u32,
    /// Outermost function's counter slot.
    pub func: u32,
    /// Outermost function's [`kind`].
    pub kind: u32,
    /// Always zero (explicit padding).
    pub _pad: u32,
    /// Requested size in bytes (calloc/reallocarray: nmemb*size, saturated at u64::MAX).
    pub size: u64,
    /// realloc/reallocarray: the old pointer; posix_memalign: the `memptr` out-pointer.
    pub ptr: u64,
    /// realloc/reallocarray: the old block's size in bytes, when it was known (see
    /// [`pending_flags::OLD_KNOWN`]); the old block is taken out of the live map at entry
    /// so that another thread reusing its address cannot be confused with it.
    pub old_size: u64,
    /// Bit set of [`pending_flags`].
    pub flags: u64,
    /// The outermost call's stack pointer at function entry. A later probed call on the
    /// thread is nested if its entry stack pointer is lower (deeper) or equal (a tail
    /// call: glibc's `realloc(NULL, n)` jumps to `malloc`); if it is higher, the
    /// outermost call never returned normally (a C++ `operator new` that threw, caught
    /// further up) and its entry is stale.
    pub entry_sp: u64,
}

/// Bits of [`Pending::flags`].
pub mod pending_flags {
    /// nmemb*size overflowed: the call must fail.
    pub const OVERFLOW: u64 = 1;
    /// `old_size` is the size of the old block, which was removed from the live map.
    pub const OLD_KNOWN: u64 = 2;
}

/// Indexes of the `GLOBAL` array map: counters not attributable to one tracked process.
pub mod global {
    /// Events of a tracked process whose `STATS` entry was missing.
    pub const MISSING_STATS: u32 = 0;
    /// `PENDING` inserts that failed (map full).
    pub const PENDING_FULL: u32 = 1;
    /// Number of slots in the `GLOBAL` map.
    pub const LEN: u32 = 4;
}

/// Default capacity of the `LIVE` map (live blocks across all tracked processes).
pub const DEFAULT_MAX_LIVE_BLOCKS: u32 = 1 << 20;
/// Capacity of the `TRACKED` and `STATS` maps (processes tracked at once).
pub const MAX_TRACKED_PROCESSES: u32 = 4096;
/// Capacity of the `PENDING` map (threads inside an allocator call at once).
pub const MAX_PENDING_CALLS: u32 = 16384;

pub mod unwind;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] with only integer fields and explicit padding,
    // so every bit pattern is valid and there are no uninitialised bytes.
    unsafe impl aya::Pod for super::TrackState {}
    unsafe impl aya::Pod for super::PidStats {}
    unsafe impl aya::Pod for super::LiveKey {}
    unsafe impl aya::Pod for super::Pending {}
    unsafe impl aya::Pod for super::FuncCounters {}
    unsafe impl aya::Pod for super::unwind::UnwindRow {}
}
