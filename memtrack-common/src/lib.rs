//! Types shared by memtrack's eBPF programs (`memtrack-ebpf`) and its user-space loader
//! (`memtrack`).
//!
//! This is the contract between the two sides of the kernel boundary: the map keys and
//! values (`#[repr(C)]` plain data with explicit padding, because the same bytes are
//! written by one side and read by the other), the argument kinds ([`Kind`], a
//! `#[repr(u32)]` enum) and the probe cookie that carries them, and the names of the
//! maps and programs ([`map_names`], [`program_names`]). The crate is `no_std` so the
//! eBPF side can use it; the `user` feature adds `aya::Pod` impls for the loader.
//!
//! Units: every `*_bytes` field is in bytes, every `*_ns` field in nanoseconds of
//! `CLOCK_MONOTONIC` (what `bpf_ktime_get_ns` returns), every `*_calls`/`*_blocks` field a
//! plain count.
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

/// Number of per-function counter slots in [`PidStats::funcs`]: one per function name
/// memtrack reports (the user-space table `memtrack_targets::AllocFn` numbers them).
pub const NUM_FUNCS: usize = 32;

/// The name each per-function counter slot of [`PidStats::funcs`] is reported under, by
/// slot (`memtrack_targets::AllocFn`'s discriminants; its test checks the two agree):
/// the one place both the probe table and the reports take the names from.
pub const FUNCTION_NAMES: [&str; 24] = [
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "aligned_alloc",
    "posix_memalign",
    "memalign",
    "valloc",
    "pvalloc",
    "operator new",
    "operator new[]",
    "operator delete",
    "operator delete[]",
    "mallocx",
    "rallocx",
    "dallocx",
    "mi_malloc",
    "mi_calloc",
    "mi_realloc",
    "mi_reallocn",
    "mi_free",
    "mi_aligned_alloc",
    "mi_posix_memalign",
];

/// Number of buckets of the log2 size histogram: bucket 0 holds 0-byte blocks, bucket `i`
/// (1..=64) holds sizes in `[2^(i-1), 2^i)`.
pub const HISTOGRAM_BUCKETS: usize = 65;

/// Indexes of the functions the eBPF side names itself (the rest are only known to
/// user space, which passes each probe's index in its attach cookie).
pub mod func {
    /// `free(ptr)`: the slot credited with bytes released by free-like functions.
    pub const FREE: u32 = 4;
}

/// How a probed function takes its arguments and hands out or releases memory (argument
/// order of the System V x86-64 ABI). User space picks the kind of each probed symbol
/// (`memtrack_targets::AllocFn::kind`) and carries it in the probe's [`cookie`]; the one
/// entry program reads the arguments by it, and the one return program reads the result
/// by the kind it kept in [`Pending::kind`].
///
/// The discriminants are what crosses the kernel boundary: never renumber them. The eBPF
/// side turns a number back into a `Kind` only with [`Kind::from_id`], which refuses
/// numbers that name no kind.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `f(size, ...)` returns a block: malloc, valloc, operator new, mallocx, mi_malloc...
    SizeFirst = 0,
    /// `f(alignment, size)` returns a block: aligned_alloc, memalign.
    SizeSecond = 1,
    /// `f(nmemb, size, ...)` returns a block of nmemb*size bytes: calloc.
    Calloc = 2,
    /// `f(ptr, size, ...)` resizes: realloc, rallocx, mi_realloc.
    Realloc = 3,
    /// `f(ptr, nmemb, size)` resizes to nmemb*size bytes: reallocarray.
    Reallocarray = 4,
    /// `int f(void **memptr, alignment, size)`: posix_memalign.
    PosixMemalign = 5,
    /// `f(ptr, ...)` releases: free, operator delete, sdallocx, mi_free.
    Free = 6,
}

impl Kind {
    /// Every kind, in discriminant order.
    pub const ALL: [Kind; 7] = [
        Kind::SizeFirst,
        Kind::SizeSecond,
        Kind::Calloc,
        Kind::Realloc,
        Kind::Reallocarray,
        Kind::PosixMemalign,
        Kind::Free,
    ];

    /// The number that stands for this kind in cookies and in [`Pending::kind`].
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The kind numbered `id`, or `None` for a number that names no kind (a cookie or
    /// map value written by a mismatched other side). A `match`, never a transmute: every
    /// `u32` is a valid argument.
    pub const fn from_id(id: u32) -> Option<Kind> {
        match id {
            0 => Some(Kind::SizeFirst),
            1 => Some(Kind::SizeSecond),
            2 => Some(Kind::Calloc),
            3 => Some(Kind::Realloc),
            4 => Some(Kind::Reallocarray),
            5 => Some(Kind::PosixMemalign),
            6 => Some(Kind::Free),
            _ => None,
        }
    }

    /// Whether a function of this kind gets a return probe: every kind that hands out
    /// memory (the block is only known on return); free-like functions do not.
    pub const fn has_return_probe(self) -> bool {
        !matches!(self, Kind::Free)
    }
}

/// Layout of a probe's attach cookie: the function's counter slot in bits 0-15, its
/// argument layout ([`Kind::id`]) in bits 16-23, and in the high 32 bits how many bytes
/// the stack pointer has moved at the probed instruction (so `rsp + adjust` is the
/// function's entry stack pointer).
pub mod cookie {
    use super::Kind;

    /// The cookie of a probe of counter slot `func` (below 2^16), of argument layout
    /// `kind`, whose instruction is `stack_adjust` bytes of stack below the entry.
    pub const fn make(func: u32, kind: Kind, stack_adjust: u32) -> u64 {
        ((func & 0xffff) as u64) | ((kind.id() as u64 & 0xff) << 16) | ((stack_adjust as u64) << 32)
    }
    /// The counter slot of a cookie.
    pub const fn func(cookie: u64) -> u32 {
        (cookie & 0xffff) as u32
    }
    /// The argument layout of a cookie; `None` when its bits name no [`Kind`].
    pub const fn kind(cookie: u64) -> Option<Kind> {
        Kind::from_id(((cookie >> 16) & 0xff) as u32)
    }
    /// The stack adjustment of a cookie, in bytes.
    pub const fn stack_adjust(cookie: u64) -> u64 {
        cookie >> 32
    }
}

/// Names of the maps in the eBPF object. The eBPF side declares each map under its name
/// (aya-ebpf's `#[map]` names a map after its static, and takes no constant), the loader
/// looks maps up by these constants; memtrack-core's loader.rs tests `ebpf_object_*`
/// check the shipped object against them (name, map type, key and value sizes).
pub mod map_names {
    /// Array, slot -> [`ProcessSlot`](super::ProcessSlot): which process owns the slot
    /// and whether it is counted.
    pub const TRACKED: &str = "TRACKED";
    /// tgid -> its slot in [`TRACKED`] and [`STATS`] (a thread looks it up once and
    /// keeps it in its [`ThreadState`](super::ThreadState)).
    pub const SLOTS: &str = "SLOTS";
    /// Array, slot -> [`PidStats`](super::PidStats).
    pub const STATS: &str = "STATS";
    /// [`LiveKey`](super::LiveKey) -> [`LiveBlock`](super::LiveBlock): a live block's
    /// requested size and stack id. Preallocated: the first live blocks (all the
    /// preallocated ones, or the part of them reserved at load when the rest is
    /// reserved later in [`LIVE_MORE`]).
    pub const LIVE: &str = "LIVE";
    /// Array of maps with one slot, empty until user space puts in it a preallocated
    /// hash map like [`LIVE`] (`LiveKey` -> `LiveBlock`): the preallocated entries
    /// reserved after load, when the tracked processes first need more than `LIVE`
    /// holds.
    pub const LIVE_MORE: &str = "LIVE_MORE";
    /// The same as [`LIVE`], not preallocated: the live blocks beyond the preallocated
    /// maps' capacity (entries allocated as blocks go live). An address is in at most
    /// one of the three.
    pub const LIVE_ON_DEMAND: &str = "LIVE_ON_DEMAND";
    /// Array, [`live_slot::index`](super::live_slot::index) -> [`LiveSlot`](super::LiveSlot):
    /// the direct-mapped slots in front of the live-block maps (`BPF_F_MMAPABLE`: user
    /// space purges them through a mapping).
    pub const LIVE_SLOTS: &str = "LIVE_SLOTS";
    /// Task storage, thread -> [`ThreadState`](super::ThreadState) (the eBPF side's own).
    pub const THREADS: &str = "THREADS";
    /// [`global`](super::global) slot -> count.
    pub const GLOBAL: &str = "GLOBAL";
    /// [`UnwindRow`](super::unwind::UnwindRow)s of every object's table, one array.
    pub const UNWIND_ROWS: &str = "UNWIND_ROWS";
    /// tgid -> [`ProcessMappings`](super::stacks::ProcessMappings).
    pub const MAPPINGS: &str = "MAPPINGS";
    /// [`StackKey`](super::stacks::StackKey) -> stack id.
    pub const STACK_IDS: &str = "STACK_IDS";
    /// [`stack_counts_key`](super::stacks::stack_counts_key) ->
    /// [`KernelStackCounts`](super::stacks::KernelStackCounts).
    pub const STACK_COUNTS: &str = "STACK_COUNTS";
    /// Per-CPU scratch [`StackKey`](super::stacks::StackKey) of the unwinder.
    pub const STACK_SCRATCH: &str = "STACK_SCRATCH";
    /// Per-CPU [`LastStack`](super::stacks::LastStack): the stack the scratch holds.
    pub const LAST_STACK: &str = "LAST_STACK";
    /// Per-CPU [`StackWindow`](super::stacks::StackWindow): part of the stack being
    /// unwound, copied by one helper call.
    pub const STACK_WINDOW: &str = "STACK_WINDOW";
    /// Per-CPU [`RowCache`](super::stacks::RowCache): the unwinder's last frame
    /// lookups, so a repeated call site skips the mapping and row searches.
    pub const ROW_CACHE: &str = "ROW_CACHE";
    /// Per-CPU [`WalkState`](super::stacks::WalkState): the walk handed from one program
    /// of the unwinding chain to the next.
    pub const UNWIND_STATE: &str = "UNWIND_STATE";
    /// Per-CPU array of [`StackCacheSlot`](super::stack_cache::StackCacheSlot): walks
    /// remembered by the words they read, so an allocation from a stack walked before
    /// skips the walk.
    pub const STACK_CACHE: &str = "STACK_CACHE";
    /// Per-CPU [`CacheWindow`](super::stack_cache::CacheWindow): the copy of the stack a
    /// cache check compares.
    pub const CACHE_WINDOW: &str = "CACHE_WINDOW";
    /// Per-CPU [`WalkTrace`](super::stack_cache::WalkTrace): what the walk in progress
    /// read, step by step, for the cache.
    pub const WALK_TRACE: &str = "WALK_TRACE";
    /// Per-CPU array, [`stack_cache::walks`](super::stack_cache::walks) index -> count:
    /// stacks walked and stacks reused from the cache.
    pub const STACK_WALKS: &str = "STACK_WALKS";
    /// Program array holding the unwind program
    /// ([`program_names::UNWIND`](super::program_names::UNWIND)) at
    /// [`UNWIND_PROG_SLOT`](super::stacks::UNWIND_PROG_SLOT), for its tail calls; filled
    /// by the loader with stacks on.
    pub const UNWIND_PROGS: &str = "UNWIND_PROGS";
    /// thread id -> the signal the loader hook sent that thread to stop it (see
    /// [`ld_hook`](super::ld_hook)); the follower deletes the entry at the stop.
    pub const LD_HOOK_STOPS: &str = "LD_HOOK_STOPS";
    /// tgid -> times the loader hook fired in that process without stopping the thread
    /// (see [`ld_hook`](super::ld_hook)): lost events of that process.
    pub const LD_HOOK_MISSES: &str = "LD_HOOK_MISSES";
    /// Per-CPU array, slot -> [`TimelineCpu`](super::timeline::TimelineCpu): the
    /// bucket each CPU fills of each process.
    pub const TIMELINE: &str = "TIMELINE";
    /// Ring buffer of finished buckets ([`TimelineRecord`](super::timeline::TimelineRecord)).
    pub const TIMELINE_RING: &str = "TIMELINE_RING";
    /// Array, slot -> [`RssNow`](super::timeline::RssNow): each process's resident
    /// memory now, by kind.
    pub const RSS_NOW: &str = "RSS_NOW";
    /// `rss_stat`'s `mm_id` -> slot: the process an address space belongs to, for
    /// changes of it made by another task (reclaim, exit).
    pub const MM_SLOTS: &str = "MM_SLOTS";
}

/// Names of the programs in the eBPF object (aya-ebpf names a program after its
/// function), and what they attach to; tied to the object as [`map_names`] are.
pub mod program_names {
    /// The uprobe every probed function's entry shares; it reads the arguments by the
    /// cookie's [`Kind`](super::Kind).
    pub const ENTRY: &str = "alloc_entry_prog";
    /// The uretprobe every allocating function shares.
    pub const RETURN: &str = "alloc_return_prog";
    /// The raw tracepoint program counting mmap, munmap and brk.
    pub const SYS_EXIT: &str = "sys_exit";
    /// The raw tracepoint [`SYS_EXIT`] attaches to.
    pub const SYS_EXIT_TRACEPOINT: &str = "sys_exit";
    /// The uprobe on the dynamic loader's `_dl_debug_state` that stops the thread for
    /// the follower (see [`ld_hook`](super::ld_hook)).
    pub const LD_HOOK: &str = "ld_hook_prog";
    /// The unwind program: tail-called by [`ENTRY`] (stacks on) to walk the next batch
    /// of frames, and by itself until the walk ends (see
    /// [`WalkState`](super::stacks::WalkState)). Attached to nothing; loaded like
    /// [`ENTRY`] (same program type and expected attach type, which tail calls require).
    pub const UNWIND: &str = "unwind_prog";
    /// The program that remembers a finished walk in the cache of walks
    /// ([`stack_cache`](super::stack_cache)): tail-called by the program that ends a
    /// walk, through `UNWIND_PROGS` at
    /// [`REMEMBER_PROG_SLOT`](super::stacks::REMEMBER_PROG_SLOT); attached to nothing.
    pub const REMEMBER: &str = "remember_prog";
    /// The tracepoint program that follows the tracked processes' resident memory.
    pub const RSS_STAT: &str = "rss_stat";
    /// The tracepoint [`RSS_STAT`] attaches to (system `kmem`, event `rss_stat`).
    pub const RSS_STAT_TRACEPOINT: (&str, &str) = ("kmem", "rss_stat");
}

/// The loader hook: a uprobe on the dynamic loader's `_dl_debug_state` (called after
/// the loader mapped objects and before their initializers run) whose program makes the
/// thread stop for memtrack's ptrace follower by sending it a signal whose default
/// action is to ignore it. The program records the signal in `LD_HOOK_STOPS` under the
/// thread id first, so the follower can tell its own signal from one the program got
/// from elsewhere; it suppresses its own and delivers any other. Nothing of this lives
/// in the tracked process: if memtrack dies, the kernel removes the uprobe with its
/// link, and a signal still pending is ignored by default.
///
/// The program needs two fields of the kernel's `struct task_struct` (byte offsets that
/// user space reads from the kernel's BTF and passes in the probe's cookie): `blocked`,
/// so it never picks a signal the thread blocks (it would stay pending and the thread
/// would not stop before the new objects' code runs), and `ptrace`, so it sends nothing
/// to a thread no tracer would stop.
pub mod ld_hook {
    /// SIGURG, SIGWINCH, SIGCHLD (x86_64 numbers): the signals whose default action is
    /// to ignore them, in the order the program tries them (the one a program is least
    /// likely to receive from elsewhere first). Never SIGSTOP (a thread would stay
    /// stopped forever if memtrack died with it pending) nor a terminating signal.
    pub const SIGNALS: [u32; 3] = [23, 28, 17];

    /// The cookie of the hook's probe: the byte offsets of `task_struct.blocked` (bits
    /// 0-15) and `task_struct.ptrace` (bits 16-31), and the distance in bytes from
    /// `_dl_debug_state` to the loader's `_r_debug` (bits 32-63, signed; 0: unknown).
    /// None when an offset does not fit in 16 bits.
    pub const fn cookie(
        blocked_offset: u32,
        ptrace_offset: u32,
        r_debug_delta: i32,
    ) -> Option<u64> {
        if blocked_offset > 0xffff || ptrace_offset > 0xffff {
            return None;
        }
        Some(
            blocked_offset as u64
                | (ptrace_offset as u64) << 16
                | (r_debug_delta as u32 as u64) << 32,
        )
    }

    /// The byte offset of `task_struct.blocked` in a hook cookie.
    pub const fn blocked_offset(cookie: u64) -> u32 {
        (cookie & 0xffff) as u32
    }

    /// The byte offset of `task_struct.ptrace` in a hook cookie.
    pub const fn ptrace_offset(cookie: u64) -> u32 {
        ((cookie >> 16) & 0xffff) as u32
    }

    /// The distance in bytes from `_dl_debug_state` to `_r_debug` in a hook cookie (0:
    /// unknown, the hook then stops the thread at every call).
    pub const fn r_debug_delta(cookie: u64) -> i32 {
        (cookie >> 32) as u32 as i32
    }

    /// `struct r_debug` (glibc's and musl's `<link.h>`, x86_64): `r_brk` (the address of
    /// `_dl_debug_state`) is at byte 16, `r_state` at byte 24; what the hook reads.
    pub const R_DEBUG_BRK: usize = 2;
    /// The index of `r_state` in `struct r_debug` read as four u64 words (see
    /// [`R_DEBUG_BRK`]).
    pub const R_DEBUG_STATE: usize = 3;
    /// `RT_ADD`: the loader is about to map objects (`r_state` 1). The hook lets such a
    /// call go: nothing new is mapped yet, and the loader calls `_dl_debug_state` again
    /// with `RT_CONSISTENT` (0) once the objects are mapped, before their initializers
    /// run. `RT_DELETE` (2) and `RT_CONSISTENT` stop the thread.
    pub const RT_ADD: u32 = 1;

    /// The first of [`SIGNALS`] that `blocked` (a thread's blocked mask: bit `n - 1`
    /// stands for signal `n`) does not block; `None` when it blocks them all.
    pub const fn pick_signal(blocked: u64) -> Option<u32> {
        let mut i = 0;
        while i < SIGNALS.len() {
            if blocked & (1u64 << (SIGNALS[i] - 1)) == 0 {
                return Some(SIGNALS[i]);
            }
            i += 1;
        }
        None
    }

    /// Capacity of the `LD_HOOK_STOPS` map (threads stopped at the hook at once).
    pub const MAX_STOPS: u32 = 4096;
}

/// Value of the `TRACKED` map (key: tgid, i.e. the process id).
///
/// A process is probed only while it has an entry; its calls are counted only while
/// `enabled != 0`, and, when `tid != 0`, only on that one thread (or, with
/// [`TrackState::ALL_BUT`] set in it, on every thread but that one).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackState {
    /// Non-zero: count this process's calls.
    pub enabled: u32,
    /// Zero: all threads. Otherwise the only thread id whose calls are counted, or,
    /// with [`TrackState::ALL_BUT`] set, the one thread id whose calls are not (the
    /// thread doing a tracker's own work while the others are counted).
    pub tid: u32,
}

impl TrackState {
    /// The bit of `tid` that turns "only this thread" into "every thread but this one".
    /// Thread ids stay below 2^22 (the kernel's `PID_MAX_LIMIT`), so it is never part of
    /// one.
    pub const ALL_BUT: u32 = 1 << 31;

    /// Whether the calls of thread `tid` are counted.
    #[inline(always)]
    pub fn counts(&self, tid: u32) -> bool {
        self.enabled != 0
            && (self.tid == 0
                || self.tid == tid
                || (self.tid & Self::ALL_BUT != 0 && self.tid != tid | Self::ALL_BUT))
    }
}

/// Value of the `TRACKED` array (index: the slot user space gives each tracked process;
/// the `STATS` array holds the process's counters at the same index).
///
/// A process is probed only while it owns a slot. Its threads find the slot once
/// through the `SLOTS` hash map and keep it, with its `generation`, in their
/// [`ThreadState`]: a slot whose `tgid` is no longer theirs sends them back to `SLOTS`,
/// and a new `generation` (user space bumps it at every reset of the counters) makes
/// them forget their call in progress and their last release.
///
/// Arrays because the verifier inlines an array lookup (a bounds check and an add),
/// where a hash lookup is a kernel function call, dear with this CPU's return-thunk
/// mitigations (BENCHMARKS.md).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessSlot {
    /// The process (tgid) owning the slot; 0: free.
    pub tgid: u32,
    /// Changes whenever the slot's counters are reset (never 0 for an owned slot).
    pub generation: u32,
    /// Whether and which threads are counted.
    pub state: TrackState,
    /// When the slot's counters were last zeroed (the process's start, or its benchmark
    /// region's), `CLOCK_MONOTONIC` ns: the origin of its timeline's buckets
    /// ([`timeline`]).
    pub origin_ns: u64,
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
///
/// The programs keep no counter that others determine, because each is one more locked
/// add on every call (about 3.5 ns on the Intel Xeon host, BENCHMARKS.md "The
/// accounting against the uprobe floor"): the blocks handed out are
/// [`alloc_calls`](Self::alloc_calls), the sum of `size_histogram` (every block is
/// counted in one bucket); those live now are [`live_blocks`](Self::live_blocks), the
/// blocks handed out less `free_calls`; the bytes released are
/// [`bytes_freed`](Self::bytes_freed), `bytes_allocated` less `live_bytes`. Each is
/// exactly what a counter of its own held (the same wrapping sums). A value read while
/// the process runs is a copy of the fields one after another, never one instant, as it
/// always was; the field a derivation subtracts comes first in memory (`free_calls`
/// before the histogram, `live_bytes` before `bytes_allocated`), so a copy made in
/// address order never shows more released than handed out.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidStats {
    /// Blocks released (free of a known pointer, realloc's release of the old block).
    pub free_calls: u64,
    /// Bytes of the live blocks: requested bytes of the blocks handed out less those of
    /// the blocks released (wrapping).
    pub live_bytes: u64,
    /// Requested bytes of the blocks handed out.
    pub bytes_allocated: u64,
    /// Highest `live_bytes` seen.
    pub peak_live_bytes: u64,
    /// `bpf_ktime_get_ns()` when `live_bytes` last reached `peak_live_bytes` (the latest
    /// of equal peaks, as valgrind DHAT's t-gmax; 0: never).
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
    /// Log2 histogram of the requested sizes of the blocks handed out: every block
    /// handed out is counted in exactly one bucket (its sum is
    /// [`alloc_calls`](Self::alloc_calls)).
    pub size_histogram: [u64; HISTOGRAM_BUCKETS],
    /// Times `live_bytes` reached `peak_live_bytes` (the peak epoch of the per-stack
    /// at-peak counters, `stacks::KernelStackCounts`); counted with stacks on only, the
    /// one case it is read in (0 with stacks off).
    pub peak_epoch: u64,
    /// `bytes_allocated` when `live_bytes` last reached `peak_live_bytes`: the peak's
    /// time on the allocation clock the per-stack lifetimes are measured on
    /// (`stacks::KernelStackCounts`, valgrind DHAT's "tg"). Kept with stacks on only,
    /// the one case it is read in (0 with stacks off).
    pub peak_bytes_allocated: u64,
    /// Finished timeline buckets of the process that the ring buffer had no room for
    /// ([`timeline`]): its timeline may miss an extreme around them.
    pub timeline_lost_buckets: u64,
}

impl PidStats {
    /// All counters zero.
    pub const ZERO: PidStats = PidStats {
        free_calls: 0,
        live_bytes: 0,
        bytes_allocated: 0,
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
        peak_epoch: 0,
        peak_bytes_allocated: 0,
        timeline_lost_buckets: 0,
    };
}

impl PidStats {
    /// Blocks handed out: the sum of `size_histogram` (wrapping, as the counter the
    /// programs kept before was).
    pub const fn alloc_calls(&self) -> u64 {
        let mut sum = 0u64;
        let mut i = 0;
        while i < HISTOGRAM_BUCKETS {
            sum = sum.wrapping_add(self.size_histogram[i]);
            i += 1;
        }
        sum
    }

    /// Blocks handed out and not released: `alloc_calls() - free_calls` (wrapping, as
    /// the counter the programs kept before was).
    pub const fn live_blocks(&self) -> u64 {
        self.alloc_calls().wrapping_sub(self.free_calls)
    }

    /// Requested bytes of the blocks released: `bytes_allocated - live_bytes`
    /// (wrapping). Every release subtracts its block's bytes from `live_bytes`, and
    /// nothing else changes either field but an allocation, which adds its bytes to both.
    pub const fn bytes_freed(&self) -> u64 {
        self.bytes_allocated.wrapping_sub(self.live_bytes)
    }
}

impl Default for PidStats {
    fn default() -> Self {
        Self::ZERO
    }
}

/// One entry of the `LIVE_SLOTS` array: a live block of one process held outside the
/// live-block hash maps, or an empty or released slot (see [`live_slot`]). 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveSlot {
    /// [`live_slot::EMPTY`], [`live_slot::BUSY`], [`live_slot::FREE`], or the
    /// [`live_slot::tag`] of the block it holds. Changed only by compare-and-swap, but
    /// for the store that publishes a block after its fields.
    pub tag: u64,
    /// Process id (tgid) of the block's process.
    pub tgid: u32,
    /// The process slot's [`ProcessSlot::generation`] when the block was recorded: a
    /// block of an earlier generation (before a reset) is not the process's any more.
    pub generation: u32,
    /// Requested size in bytes.
    pub size: u64,
    /// The stack id of the allocation (as [`LiveBlock::stack`]).
    pub stack: u32,
    /// Always zero.
    pub _pad: u32,
}

/// The direct-mapped slots of live blocks (`LIVE_SLOTS`), both sides' rules.
///
/// A block goes into the slot of its (tgid, address) when that slot is free, else into
/// the live-block hash maps; a release looks at the slot first. A slot's `tag` says
/// what it holds: a block's [`tag`](live_slot::tag), or one of the states below. Every
/// slot that holds a block or is [`FREE`](live_slot::FREE) holds one unit of the
/// live-block capacity beyond `LIVE`'s,
/// counted in `global::LIVE_BEYOND_COUNT` (with the overflow maps' entries): the slots
/// and the maps together hold exactly the configured capacity.
pub mod live_slot {
    /// Slots in `LIVE_SLOTS` (a power of two: [`index`] masks): 128 KiB of entries.
    pub const LEN: u32 = 1 << 12;
    /// `tag` of a slot that holds nothing and no unit of capacity.
    pub const EMPTY: u64 = 0;
    /// `tag` of a slot being written by the thread that claimed it (a block's fields
    /// are not read while it is busy).
    pub const BUSY: u64 = 1;
    /// `tag` of a slot whose block was released: it still holds its unit of capacity,
    /// so the next block of the slot (glibc's per-thread cache hands the same address
    /// out again) takes it without touching the shared count. The releasing thread
    /// empties it at its next call about another slot (`ThreadState::released`), or
    /// user space does when it purges.
    pub const FREE: u64 = 2;
    /// Bit of `ThreadState::released` saying that it holds a slot index (the thread's
    /// [`FREE`] slot), not the address of a hash-map tombstone.
    pub const RELEASED_SLOT: u64 = 1 << 63;
    /// Addresses at or above this never go into a slot (their tag would not fit).
    pub const ADDR_LIMIT: u64 = 1 << 48;

    /// The tag of the block at `addr` of a process whose slot generation is
    /// `generation`: the address, with the generation's low 16 bits above it, so that a
    /// compare-and-swap of a tag made before a reset never matches a block recorded
    /// after it at the same address. `None` for an address that cannot be tagged: 0, not
    /// a multiple of 4 (a tag must differ from the states), or at or above
    /// [`ADDR_LIMIT`]; such a block goes into the hash maps.
    #[inline(always)]
    pub const fn tag(addr: u64, generation: u32) -> Option<u64> {
        if addr == 0 || addr & 3 != 0 || addr >= ADDR_LIMIT {
            return None;
        }
        Some(addr | ((generation as u64) & 0xffff) << 48)
    }

    /// The slot of the block at `addr` of process `tgid`: the top bits of a
    /// multiplicative hash of both (allocations are 16-byte aligned, so the low bits of
    /// an address say little), below [`LEN`].
    #[inline(always)]
    pub const fn index(tgid: u32, addr: u64) -> u32 {
        let mixed = addr ^ (tgid as u64).rotate_right(16);
        (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - LEN.trailing_zeros())) as u32
    }
}

/// Key of the `LIVE` and `LIVE_ON_DEMAND` maps: one live block of one process.
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

/// Value of the `LIVE` and `LIVE_ON_DEMAND` maps: one live block. The stack id lives beside the size, so a
/// release finds both in the one lookup it makes anyway (a second map keyed by the block
/// cost every free a second lookup and delete with stacks on).
///
/// A released block's entry is not deleted at once: its `size` becomes
/// [`LiveBlock::RELEASED`], and the thread that released it deletes it later, unless the
/// address is handed out again first (memtrack-ebpf's live_maps.rs says why). Readers of
/// the map skip entries that are not [`LiveBlock::is_live`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LiveBlock {
    /// Requested size in bytes, or [`LiveBlock::RELEASED`] / [`LiveBlock::DELETING`].
    pub size: u64,
    /// The stack id of the allocation (`stacks::NO_STACK` with stacks off,
    /// `stacks::LOST_STACK` when its stack was lost).
    pub stack: u32,
    /// Always zero (explicit padding, so every value byte is initialised).
    pub _pad: u32,
}

impl LiveBlock {
    /// `size` of an entry whose block was released and whose deletion is deferred.
    pub const RELEASED: u64 = u64::MAX;
    /// `size` of a released entry a thread is deleting now.
    pub const DELETING: u64 = u64::MAX - 1;

    /// Whether the entry is a live block (not released).
    pub const fn is_live(&self) -> bool {
        self.size < Self::DELETING
    }
}

/// The arguments of an allocator call between its entry and its return probe, kept in
/// the calling thread's [`ThreadState`].
///
/// `depth` counts nested probed calls on the thread (glibc's `realloc(NULL, n)` calls
/// `malloc`, `realloc(p, 0)` calls `free`, `reallocarray` calls `realloc`): only the
/// outermost call is accounted, so a block is counted once. `depth == 0`: no call in
/// progress.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// Number of probed calls in progress on this thread (the outermost included).
    pub depth: u32,
    /// Outermost function's counter slot.
    pub func: u32,
    /// Outermost function's [`Kind::id`]. A plain number, not a `Kind`, because user
    /// space reads this map as raw bytes (`aya::Pod`), where any bit pattern must be
    /// valid; the return program decodes it with [`Kind::from_id`].
    pub kind: u32,
    /// The call's stack id (`stacks::NO_STACK` when stacks are off, `stacks::LOST_STACK`
    /// when it could not be interned, and until the unwinding chain that ends the walk
    /// writes it: see `stacks::WalkState`).
    pub stack: u32,
    /// Requested size in bytes (calloc/reallocarray: nmemb*size, saturated at u64::MAX).
    pub size: u64,
    /// realloc/reallocarray: the old pointer; posix_memalign: the `memptr` out-pointer.
    pub ptr: u64,
    /// realloc/reallocarray: the old block's size in bytes, when it was known (see
    /// [`pending_flags::OLD_KNOWN`]); the old block is taken out of the live map at entry
    /// so that another thread reusing its address cannot be confused with it.
    pub old_size: u64,
    /// realloc/reallocarray: the old block's stack id, with `old_size` (its release is
    /// charged to that stack, or it is put back under it if the call fails).
    pub old_stack: u32,
    /// Always zero (explicit padding).
    pub _pad: u32,
    /// Bit set of [`pending_flags`].
    pub flags: u64,
    /// The outermost call's stack pointer at function entry. A later probed call on the
    /// thread is nested if its entry stack pointer is lower (deeper) or equal (a tail
    /// call: glibc's `realloc(NULL, n)` jumps to `malloc`); if it is higher, the
    /// outermost call never returned normally (a C++ `operator new` that threw, caught
    /// further up) and its entry is stale.
    pub entry_sp: u64,
}

/// A thread's last release: the pointer, the free-like function's counter slot, and the
/// stack pointer at that function's entry (an address). See memtrack-ebpf's
/// `account::release`: a release of the same pointer through another function, no
/// higher on the stack, is that release forwarded, not one of its own.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReleaseMark {
    /// The released pointer (0: none).
    pub ptr: u64,
    /// Counter slot of the function that released it (`cookie::func`).
    pub func: u32,
    /// Always zero (explicit padding).
    pub _pad: u32,
    /// Stack pointer at the function's entry.
    pub entry_sp: u64,
}

/// Value of the `THREADS` task storage: one thread's own state, which only that thread
/// reads and writes (no atomics needed), created at its first probed call and freed by
/// the kernel with the thread. Replaces a hash insert and delete per allocation (the
/// call in progress) and an LRU insert per release (the last release).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadState {
    /// The thread's process's slot in `TRACKED`/`STATS`, as last looked up.
    pub slot: u32,
    /// The slot's [`ProcessSlot::generation`] when `pending` and `mark` were written.
    pub generation: u32,
    /// The outermost allocator call in progress (`depth == 0`: none).
    pub pending: Pending,
    /// The last release.
    pub mark: ReleaseMark,
    /// Address of the block this thread released last whose `LIVE` entry it left as a
    /// tombstone ([`LiveBlock::RELEASED`]) to delete later, or
    /// [`live_slot::RELEASED_SLOT`] | the index of the slot it left [`live_slot::FREE`]
    /// to empty later; 0: none.
    pub released: u64,
    /// The thread's `pid_tgid` (tgid in the high half), written by every program run
    /// that finds the thread's process tracked: the accounting steps the programs call
    /// as global functions read it here rather than ask the kernel again (a helper call
    /// each, three per malloc+free pair).
    pub pid_tgid: u64,
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
    /// Threads whose `THREADS` entry could not be created (the kernel's allocation
    /// failed): their calls were not counted.
    pub const THREAD_STATE_FAILED: u32 = 1;
    /// The last stack id handed out (ids start at 1).
    pub const LAST_STACK_ID: u32 = 2;
    /// Allocations whose per-stack counters could not be stored (`STACK_COUNTS` full).
    pub const STACK_COUNTS_FULL: u32 = 3;
    /// Entries the programs inserted into the overflow maps (the map in `LIVE_MORE`
    /// and `LIVE_ON_DEMAND`) less those they deleted, counted before an insert (after
    /// its unit of capacity was taken in [`LIVE_BEYOND_COUNT`]) and after a deletion,
    /// so never below what the maps hold (with [`LIVE_OVERFLOW_PURGED`]): not a loss.
    pub const LIVE_OVERFLOW_COUNT: u32 = 4;
    /// Entries user space deleted from the overflow maps (a process forgotten or
    /// reset), written by user space only, after deleting them. The programs look into
    /// those maps only while `LIVE_OVERFLOW_COUNT - LIVE_OVERFLOW_PURGED` is not 0.
    pub const LIVE_OVERFLOW_PURGED: u32 = 5;
    /// Entries the programs inserted into `LIVE_ON_DEMAND` less those they deleted
    /// (also in [`LIVE_OVERFLOW_COUNT`]), raised before an insert and lowered after a
    /// deletion: the programs look into that map only while this less
    /// [`LIVE_ON_DEMAND_PURGED`] is not 0 (a lookup into an empty map of a million
    /// buckets still costs a cache miss).
    pub const LIVE_ON_DEMAND_COUNT: u32 = 6;
    /// Entries user space deleted from `LIVE_ON_DEMAND` (also in
    /// [`LIVE_OVERFLOW_PURGED`]), written by user space only, after deleting them.
    pub const LIVE_ON_DEMAND_PURGED: u32 = 7;
    /// Units of the live-block capacity beyond `LIVE`'s that the programs took, less
    /// those they gave back: one per entry of the overflow maps (also in
    /// [`LIVE_OVERFLOW_COUNT`]) and one per `LIVE_SLOTS` slot holding a block or
    /// released (`live_slot::FREE`). Raised by a compare-and-swap that refuses to go
    /// beyond the capacity ([`LIVE_OVERFLOW_CAPACITY_GLOBAL`](super::LIVE_OVERFLOW_CAPACITY_GLOBAL))
    /// less [`LIVE_BEYOND_PURGED`]: the slots and the three maps together hold exactly
    /// the configured capacity.
    pub const LIVE_BEYOND_COUNT: u32 = 8;
    /// Units user space gave back (overflow entries it deleted and slots it emptied),
    /// written by user space only, after the deletions.
    pub const LIVE_BEYOND_PURGED: u32 = 9;
    /// Number of slots in the `GLOBAL` map.
    pub const LEN: u32 = 10;
}

/// Default capacity for live blocks across all tracked processes (`LIVE`, the map in
/// `LIVE_MORE` and `LIVE_ON_DEMAND` together).
pub const DEFAULT_MAX_LIVE_BLOCKS: u32 = 1 << 20;
/// Default number of live blocks whose entries are preallocated (`LIVE`, and the map
/// in `LIVE_MORE` when part of them is reserved later); the rest of the capacity is
/// `LIVE_ON_DEMAND`'s.
pub const DEFAULT_PREALLOCATED_LIVE_BLOCKS: u32 = 1 << 19;
/// Name of the eBPF object's read-only global (`u32`) that says whether `LIVE_ON_DEMAND`
/// has any capacity (1) or not (0: all capacity is preallocated in `LIVE`, and the
/// programs never touch it), set by the loader before the programs are verified.
pub const LIVE_ON_DEMAND_GLOBAL: &str = "HAS_LIVE_ON_DEMAND";
/// Name of the eBPF object's read-only global (`u32`): 1 when user space may put a map
/// in `LIVE_MORE` (part of the preallocated entries is reserved after load), 0 when it
/// never will (the programs never look there).
pub const LIVE_MORE_GLOBAL: &str = "HAS_LIVE_MORE";
/// Name of the eBPF object's read-only global (`u64`): how many live blocks the overflow
/// maps (the map in `LIVE_MORE` and `LIVE_ON_DEMAND`) and the `LIVE_SLOTS` slots may
/// hold together, the capacity beyond `LIVE`'s. With it the three maps and the slots
/// hold exactly the configured capacity; with 0 no slot is used.
pub const LIVE_OVERFLOW_CAPACITY_GLOBAL: &str = "LIVE_OVERFLOW_CAPACITY";
/// Name of the eBPF object's read-only global (`u32`) that turns the timeline on (1) or
/// off (0: the verifier prunes every timeline step, as with the stacks' depth at 0).
pub const TIMELINE_GLOBAL: &str = "TIMELINE_ON";
/// Capacity of the `TRACKED`, `SLOTS` and `STATS` maps (processes tracked at once).
pub const MAX_TRACKED_PROCESSES: u32 = 4096;

pub mod stack_cache;
pub mod stacks;
pub mod timeline;
pub mod unwind;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] with only integer fields and explicit padding,
    // so every bit pattern is valid and there are no uninitialised bytes.
    unsafe impl aya::Pod for super::TrackState {}
    unsafe impl aya::Pod for super::PidStats {}
    unsafe impl aya::Pod for super::LiveKey {}
    unsafe impl aya::Pod for super::LiveBlock {}
    unsafe impl aya::Pod for super::LiveSlot {}
    unsafe impl aya::Pod for super::ProcessSlot {}
    unsafe impl aya::Pod for super::Pending {}
    unsafe impl aya::Pod for super::ReleaseMark {}
    unsafe impl aya::Pod for super::ThreadState {}
    unsafe impl aya::Pod for super::FuncCounters {}
    unsafe impl aya::Pod for super::unwind::UnwindRow {}
    unsafe impl aya::Pod for super::stacks::StackKey {}
    unsafe impl aya::Pod for super::stacks::MappingEntry {}
    unsafe impl aya::Pod for super::stacks::ProcessMappings {}
    unsafe impl aya::Pod for super::stacks::KernelStackCounts {}
    unsafe impl aya::Pod for super::stack_cache::StackCacheSlot {}
    unsafe impl aya::Pod for super::timeline::TimelineCpu {}
    unsafe impl aya::Pod for super::timeline::TimelineRecord {}
    unsafe impl aya::Pod for super::timeline::RssNow {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which threads a state counts: off, all, one, all but one (the tracker's own
    /// work on its thread while the others are counted).
    #[test]
    fn track_states_count_the_threads_they_name() {
        let state = |enabled, tid| TrackState { enabled, tid };
        let all_but_7 = 7 | TrackState::ALL_BUT;
        for (s, counted) in [
            (state(0, 0), [false, false]),
            (state(0, all_but_7), [false, false]),
            (state(1, 0), [true, true]),
            (state(1, 7), [true, false]),
            (state(1, 8), [false, true]),
            (state(1, all_but_7), [false, true]),
            (state(1, 8 | TrackState::ALL_BUT), [true, false]),
        ] {
            assert_eq!([s.counts(7), s.counts(8)], counted, "{s:?}");
        }
    }

    #[test]
    fn kind_ids_round_trip_and_unknown_ids_are_refused() {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(kind.id(), i as u32, "{kind:?}");
            assert_eq!(Kind::from_id(i as u32), Some(kind));
        }
        assert_eq!(Kind::from_id(7), None);
        assert_eq!(Kind::from_id(0xff), None);
        assert_eq!(Kind::from_id(u32::MAX), None);
    }

    #[test]
    fn only_free_has_no_return_probe() {
        let without: std::vec::Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| !k.has_return_probe())
            .collect();
        assert_eq!(without, [Kind::Free]);
    }

    #[test]
    fn cookie_fields_round_trip() {
        let c = cookie::make(23, Kind::PosixMemalign, 0x28);
        assert_eq!(c, 23 | 5 << 16 | 0x28 << 32);
        assert_eq!(cookie::func(c), 23);
        assert_eq!(cookie::kind(c), Some(Kind::PosixMemalign));
        assert_eq!(cookie::stack_adjust(c), 0x28);
        // The slot is cut to 16 bits and cannot spill into the kind.
        let c = cookie::make(0x1_0004, Kind::Free, u32::MAX);
        assert_eq!(cookie::func(c), 4);
        assert_eq!(cookie::kind(c), Some(Kind::Free));
        assert_eq!(cookie::stack_adjust(c), u32::MAX as u64);
        // Kind bits that name no kind decode to None.
        assert_eq!(cookie::kind(7 << 16), None);
        assert_eq!(cookie::kind(0xff << 16 | 4), None);
    }

    #[test]
    fn ld_hook_cookie_round_trips() {
        let c = ld_hook::cookie(0x8f0, 0x2c, -0x31f48).unwrap();
        assert_eq!(ld_hook::blocked_offset(c), 0x8f0);
        assert_eq!(ld_hook::ptrace_offset(c), 0x2c);
        assert_eq!(ld_hook::r_debug_delta(c), -0x31f48);
        let c = ld_hook::cookie(0xffff, 0, 0x7fff_ffff).unwrap();
        assert_eq!(ld_hook::blocked_offset(c), 0xffff);
        assert_eq!(ld_hook::ptrace_offset(c), 0);
        assert_eq!(ld_hook::r_debug_delta(c), 0x7fff_ffff);
        // Offsets beyond 16 bits have no cookie.
        assert_eq!(ld_hook::cookie(0x1_0000, 0x2c, 0), None);
    }

    #[test]
    fn ld_hook_picks_the_first_unblocked_ignorable_signal() {
        let bit = |sig: u32| 1u64 << (sig - 1);
        assert_eq!(ld_hook::pick_signal(0), Some(23));
        assert_eq!(ld_hook::pick_signal(bit(23)), Some(28));
        assert_eq!(ld_hook::pick_signal(bit(23) | bit(28)), Some(17));
        assert_eq!(ld_hook::pick_signal(bit(23) | bit(28) | bit(17)), None);
        assert_eq!(ld_hook::pick_signal(u64::MAX), None);
        // Other blocked signals do not matter.
        assert_eq!(ld_hook::pick_signal(!bit(17)), Some(17));
    }
}
