//! The maps shared with user space. `#[map]` names each map after its static, and the
//! loader looks maps up by `memtrack_common::map_names`: a static is renamed only with
//! its constant (memtrack-core's loader.rs tests `ebpf_object_*` fail otherwise).

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray},
};
use memtrack_common::{
    DEFAULT_MAX_LIVE_BLOCKS, LiveBlock, LiveKey, MAX_PENDING_CALLS, MAX_TRACKED_PROCESSES, Pending,
    PidStats, TrackState, global, ld_hook,
    stacks::{KernelStackCounts, LastStack, ProcessMappings, StackKey, StackWindow, WalkState},
    unwind::UnwindRow,
};

/// `BPF_F_NO_PREALLOC`: entries are allocated when inserted. For maps only user space
/// inserts into: creating a preallocated map costs start-up time (STATS: 8 MiB, about
/// 15 ms), and lookups, the only thing the programs do with these, cost the same.
const NO_PREALLOC: u32 = 1;

/// tgid -> whether and which threads of the process are counted. Written by user space.
#[map]
pub static TRACKED: HashMap<u32, TrackState> =
    HashMap::with_max_entries(MAX_TRACKED_PROCESSES, NO_PREALLOC);

/// tgid -> counters. Inserted (zeroed) by user space; only updated here.
#[map]
pub static STATS: HashMap<u32, PidStats> =
    HashMap::with_max_entries(MAX_TRACKED_PROCESSES, NO_PREALLOC);

/// (tgid, address) -> requested size in bytes and stack id of every live block allocated
/// while tracked.
/// User space may resize it before loading. Preallocated: creating it costs about 40 ms
/// of the tracker's start-up for a million entries, but without preallocation (the
/// kernel's BPF allocator) malloc and free cost 30-70% more per call with blocks live
/// (measured, BENCHMARKS.md); calls outnumber trackers by far.
#[map]
pub static LIVE: HashMap<LiveKey, LiveBlock> =
    HashMap::with_max_entries(DEFAULT_MAX_LIVE_BLOCKS, 0);

/// pid_tgid -> arguments of the allocator call in progress on that thread.
#[map]
pub static PENDING: HashMap<u64, Pending> = HashMap::with_max_entries(MAX_PENDING_CALLS, 0);

/// Counters not attributable to one process, indexed by `memtrack_common::global`.
#[map]
pub static GLOBAL: Array<u64> = Array::with_max_entries(global::LEN, 0);

/// pid_tgid -> the last release that thread made (see `account::release`). LRU: an
/// entry outlives its thread (nothing removes it at thread exit), so a plain hash map
/// would fill after that many threads had released something, and every forwarded
/// release after that would count twice. The least recently written entries are those
/// of threads that ended or released nothing for longest; a mark is read right after it
/// is written (the forward happens within the same release), so evicting it would take
/// that many other threads' releases in between.
#[map]
pub static FREE_MARK: LruHashMap<u64, FreeMark> =
    LruHashMap::with_max_entries(MAX_PENDING_CALLS, 0);

/// A thread's last release: the pointer, the free-like function's counter slot, and the
/// stack pointer at that function's entry (bytes, an address).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FreeMark {
    /// The released pointer.
    pub ptr: u64,
    /// Counter slot of the function that released it (`memtrack_common::cookie::func`).
    pub func: u32,
    /// Unused; keeps `entry_sp` aligned.
    pub _pad: u32,
    /// Stack pointer at the function's entry.
    pub entry_sp: u64,
}

/// Every loaded object's unwind rows, one array shared by all objects and processes
/// (each mapping names its object's extent). Sized by user space (1 entry with stacks
/// off).
#[map]
pub static UNWIND_ROWS: Array<UnwindRow> = Array::with_max_entries(1, 0);

/// tgid -> the process's executable mappings. Written by user space.
#[map]
pub static MAPPINGS: HashMap<u32, ProcessMappings> =
    HashMap::with_max_entries(MAX_TRACKED_PROCESSES, NO_PREALLOC);

/// A stack's frames -> its id. Sized by user space.
#[map]
pub static STACK_IDS: HashMap<StackKey, u32> = HashMap::with_max_entries(1, 0);

/// (tgid, stack id) -> that stack's counters in that process. Sized by user space.
#[map]
pub static STACK_COUNTS: HashMap<u64, KernelStackCounts> = HashMap::with_max_entries(1, 0);

/// The stack being unwound on this CPU (too large for the 512-byte BPF stack).
#[map]
pub static STACK_SCRATCH: PerCpuArray<StackKey> = PerCpuArray::with_max_entries(1, 0);

/// The stack `STACK_SCRATCH` holds as a complete key, if any (see `LastStack`).
#[map]
pub static LAST_STACK: PerCpuArray<LastStack> = PerCpuArray::with_max_entries(1, 0);

/// A copy of part of the stack being unwound on this CPU (see `StackWindow`).
#[map]
pub static STACK_WINDOW: PerCpuArray<StackWindow> = PerCpuArray::with_max_entries(1, 0);

/// The walk in progress on this CPU, handed from one program of the unwinding chain to
/// the next (unwind.rs).
#[map]
pub static UNWIND_STATE: PerCpuArray<WalkState> = PerCpuArray::with_max_entries(1, 0);

/// The unwind program, at `memtrack_common::stacks::UNWIND_PROG_SLOT`, for the chain's
/// tail calls. Filled by user space with stacks on; empty otherwise (and then never
/// called: the verifier prunes the walk with the depth global at 0).
#[map]
pub static UNWIND_PROGS: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// thread id -> the signal the loader hook sent it to stop it (ld_hook.rs); the follower
/// deletes the entry when the thread stops with that signal. Preallocated: the hook
/// inserts into it.
#[map]
pub static LD_HOOK_STOPS: HashMap<u32, u32> = HashMap::with_max_entries(ld_hook::MAX_STOPS, 0);

/// tgid -> times the loader hook fired in the process without stopping the thread
/// (ld_hook.rs). Inserted (zeroed) by user space when it hooks a process.
#[map]
pub static LD_HOOK_MISSES: HashMap<u32, u64> =
    HashMap::with_max_entries(MAX_TRACKED_PROCESSES, NO_PREALLOC);
