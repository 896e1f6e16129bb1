//! The maps shared with user space. `#[map]` names each map after its static, and the
//! loader looks maps up by `memtrack_common::map_names`: a static is renamed only with
//! its constant (memtrack-core's loader.rs tests `ebpf_object_*` fail otherwise).
//!
//! What a call costs is mostly how many map operations it makes (each a kernel function
//! call, dear with this CPU's return-thunk mitigations; BENCHMARKS.md): the per-thread
//! state is task storage (no hash, no lock, no insert or delete per call) and the
//! per-process state is in arrays, whose lookups the verifier inlines.

use aya_ebpf::{
    bindings::{BPF_F_MMAPABLE, BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type},
    btf_maps::ArrayOfMaps,
    helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_get},
    macros::{btf_map, map},
    maps::{Array, HashMap, PerCpuArray, ProgramArray, RingBuf},
};
use memtrack_common::{
    DEFAULT_MAX_LIVE_BLOCKS, DEFAULT_PREALLOCATED_LIVE_BLOCKS, LiveBlock, LiveKey, LiveSlot,
    MAX_TRACKED_PROCESSES, PidStats, ProcessSlot, ThreadState, global, ld_hook,
    stack_cache::{CacheWindow, StackCacheSlot, WalkTrace, walks},
    stacks::{
        KernelStackCounts, LastStack, ProcessMappings, RowCache, StackKey, StackWindow,
        UNWIND_PROGS_SLOTS, WalkState,
    },
    timeline::{RING_BYTES, RssNow, TimelineCpu},
    unwind::UnwindRow,
};

/// `BPF_F_NO_PREALLOC`: entries are allocated when inserted. For maps only user space
/// inserts into: creating a preallocated map costs start-up time, and lookups, the only
/// thing the programs do with these, cost the same (and for `LIVE_ON_DEMAND`, below).
const NO_PREALLOC: u32 = BPF_F_NO_PREALLOC;

/// slot -> the process owning it and whether it is counted. Written by user space.
#[map]
pub static TRACKED: Array<ProcessSlot> = Array::with_max_entries(MAX_TRACKED_PROCESSES, 0);

/// tgid -> slot. Written by user space; a thread reads it once (its `ThreadState` keeps
/// the slot).
#[map]
pub static SLOTS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TRACKED_PROCESSES, NO_PREALLOC);

/// slot -> counters. Zeroed by user space when a process gets the slot or is reset;
/// only updated here.
#[map]
pub static STATS: Array<PidStats> = Array::with_max_entries(MAX_TRACKED_PROCESSES, 0);

/// (tgid, address) -> requested size in bytes and stack id of every live block allocated
/// while tracked (and, briefly, the last block each thread released: see
/// `live_maps::flush_released`), in up to three maps: this one, preallocated, holds the
/// first blocks (`memtrack_common::DEFAULT_PREALLOCATED_LIVE_BLOCKS` unless user space
/// resizes it before loading); the map user space puts in [`LIVE_MORE`], preallocated
/// too, the next ones; [`LIVE_ON_DEMAND`] the rest. An address is in at most one of them
/// (`live_maps::put_live` says why).
///
/// Why several: a preallocated map's entries are all reserved and zeroed when it is
/// created, 80 bytes a block, about 40 ns a block here (21 ms for half a million), on
/// the path of every tracker's start-up; without preallocation (the kernel's BPF
/// allocator) malloc and free cost 30-70% more per call with blocks live (measured,
/// BENCHMARKS.md), and calls outnumber trackers by far. So a tracker of other processes
/// reserves only the first 65,536 entries at load (`LIVE`), and the rest of the
/// preallocated ones once its processes spill past them (`LIVE_MORE`), while the
/// blocks that arrive before that wait in `LIVE_ON_DEMAND`: a short process pays for
/// no entries it does not use, and a program holding many blocks gets cheap entries
/// for nearly all of them.
#[map]
pub static LIVE: HashMap<LiveKey, LiveBlock> =
    HashMap::with_max_entries(DEFAULT_PREALLOCATED_LIVE_BLOCKS, 0);

/// The shape of the map in [`LIVE_MORE`]: `LIVE`'s (the kernel checks an inner map
/// against it: type, key and value sizes and flags; a hash map's `max_entries` may
/// differ).
pub type LiveMore = aya_ebpf::btf_maps::HashMap<LiveKey, LiveBlock, 1, 0>;

/// One slot, empty until user space puts a preallocated map of the live blocks beyond
/// `LIVE`'s there (memtrack-core's live_growth.rs), after load. The programs look into
/// it only while the `HAS_LIVE_MORE` global (live_capacity.rs) is 1 and the overflow maps may
/// hold entries.
#[btf_map]
pub static LIVE_MORE: ArrayOfMaps<LiveMore, 1> = ArrayOfMaps::new();

/// The live blocks the preallocated maps have no room for (or, before user space has
/// filled [`LIVE_MORE`], the blocks beyond `LIVE`'s): inserted only when an insert
/// into the preallocated ones finds them full, and looked up only while the overflow
/// maps may hold entries (counted in `GLOBAL`,
/// `memtrack_common::global::LIVE_OVERFLOW_COUNT`), so that a program with fewer live
/// blocks than `LIVE` holds makes no extra lookup. Not preallocated: only its bucket
/// array is made at load (16 bytes per bucket), each entry when a block goes live.
/// Sized by user space to the capacity beyond `LIVE`'s; the overflow count keeps it
/// and the map in `LIVE_MORE` together within that, so that the maps hold exactly the
/// configured capacity. With nothing left it keeps one entry and the
/// `HAS_LIVE_ON_DEMAND` global (live_capacity.rs) is 0: no program touches it.
#[map]
pub static LIVE_ON_DEMAND: HashMap<LiveKey, LiveBlock> = HashMap::with_max_entries(
    DEFAULT_MAX_LIVE_BLOCKS - DEFAULT_PREALLOCATED_LIVE_BLOCKS,
    NO_PREALLOC,
);

/// The direct-mapped slots in front of the live-block maps (live_slots.rs): a block
/// whose slot is free goes here, and a malloc+free pair then makes no hash-map lookup
/// (each a kernel function call: hashing the key, walking the bucket). An array, so
/// the verifier inlines every lookup; `BPF_F_MMAPABLE`, so that user space empties a
/// process's slots with one scan of a mapping rather than a syscall per slot.
#[map]
pub static LIVE_SLOTS: Array<LiveSlot> =
    Array::with_max_entries(memtrack_common::live_slot::LEN, BPF_F_MMAPABLE);

/// Counters not attributable to one process, indexed by `memtrack_common::global`.
#[map]
pub static GLOBAL: Array<u64> = Array::with_max_entries(global::LEN, 0);

/// A BPF task storage map definition (aya-ebpf 0.2 has none): the layout libbpf and
/// aya read from BTF, `type`, `key`, `value`, `max_entries` and `map_flags` encoded as
/// pointers to arrays of that many elements. Task storage must be created without
/// preallocation and with `max_entries` 0; its key is a thread (a pidfd from user space,
/// which does not use it).
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders that are never dereferenced; the kernel owns the
// storage, and each thread touches only its own entry.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    /// The definition the loader fills in.
    pub const fn new() -> Self {
        TaskStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The calling thread's entry, created zeroed at its first use when `create`;
    /// `None` when it has none (or the kernel could not allocate it).
    #[inline(always)]
    pub fn current(&self, create: bool) -> Option<*mut T> {
        let flags = if create {
            BPF_LOCAL_STORAGE_GET_F_CREATE as u64
        } else {
            0
        };
        // SAFETY: the helper takes the map definition's address and the current task
        // (a trusted pointer from bpf_get_current_task_btf); a NULL value pointer with
        // F_CREATE creates a zeroed entry.
        let p = unsafe {
            bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                bpf_get_current_task_btf(),
                core::ptr::null_mut(),
                flags,
            )
        };
        if p.is_null() { None } else { Some(p.cast()) }
    }
}

/// thread -> its call in progress, last release and cached slot (see
/// `memtrack_common::ThreadState`).
#[btf_map]
pub static THREADS: TaskStorage<ThreadState> = TaskStorage::new();

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

/// This CPU's remembered frame lookups (see `RowCache`): a frame whose call site a walk
/// on this CPU looked up before, under the same mappings, skips both searches.
#[map]
pub static ROW_CACHE: PerCpuArray<RowCache> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's remembered walks (`memtrack_common::stack_cache`): an allocation whose
/// stack still holds every word a remembered walk read takes that walk's stack id
/// without walking. One entry here; user space sizes it to
/// `memtrack_common::stack_cache::STACK_CACHE_SLOTS` with stacks on.
#[map]
pub static STACK_CACHE: PerCpuArray<StackCacheSlot> = PerCpuArray::with_max_entries(1, 0);

/// What the walk in progress on this CPU read, step by step, for the cache of walks
/// (`memtrack_common::stack_cache::WalkTrace`).
#[map]
pub static WALK_TRACE: PerCpuArray<WalkTrace> = PerCpuArray::with_max_entries(1, 0);

/// The copy of the stack a cache check compares (stack_cache.rs).
#[map]
pub static CACHE_WINDOW: PerCpuArray<CacheWindow> = PerCpuArray::with_max_entries(1, 0);

/// Stacks walked and stacks reused from the cache, per CPU
/// (`memtrack_common::stack_cache::walks`).
#[map]
pub static STACK_WALKS: PerCpuArray<u64> = PerCpuArray::with_max_entries(walks::LEN, 0);

/// The walk in progress on this CPU, handed from one program of the unwinding chain to
/// the next (unwind.rs).
#[map]
pub static UNWIND_STATE: PerCpuArray<WalkState> = PerCpuArray::with_max_entries(1, 0);

/// The unwind program, at `memtrack_common::stacks::UNWIND_PROG_SLOT`, for the chain's
/// tail calls, and the program that remembers a finished walk, at `REMEMBER_PROG_SLOT`.
/// Filled by user space with stacks on; empty otherwise (and then never called: the
/// verifier prunes the walk with the depth global at 0).
#[map]
pub static UNWIND_PROGS: ProgramArray = ProgramArray::with_max_entries(UNWIND_PROGS_SLOTS, 0);

/// thread id -> the signal the loader hook sent it to stop it (ld_hook.rs); the follower
/// deletes the entry when the thread stops with that signal. Preallocated: the hook
/// inserts into it.
#[map]
pub static LD_HOOK_STOPS: HashMap<u32, u32> = HashMap::with_max_entries(ld_hook::MAX_STOPS, 0);

/// slot -> the bucket this CPU fills of that process's timeline (timeline.rs). Per CPU,
/// so no two CPUs write one entry; user space reads every CPU's at the end.
#[map]
pub static TIMELINE: PerCpuArray<TimelineCpu> =
    PerCpuArray::with_max_entries(MAX_TRACKED_PROCESSES, 0);

/// Finished timeline buckets (`memtrack_common::timeline::TimelineRecord`), read by
/// user space as they come.
#[map]
pub static TIMELINE_RING: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// slot -> the process's resident memory now, by kind (rss.rs).
#[map]
pub static RSS_NOW: Array<RssNow> = Array::with_max_entries(MAX_TRACKED_PROCESSES, 0);

/// `rss_stat`'s `mm_id` -> slot, for a tracked process's address space, learnt from its
/// own threads' changes, so that changes another task makes to it (reclaim, the
/// process's exit) are its too. Preallocated: the tracepoint inserts into it, in
/// contexts that must not allocate. Deleted by user space when the process is forgotten.
#[map]
pub static MM_SLOTS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TRACKED_PROCESSES, 0);

/// tgid -> times the loader hook fired in the process without stopping the thread
/// (ld_hook.rs). Inserted (zeroed) by user space when it hooks a process.
#[map]
pub static LD_HOOK_MISSES: HashMap<u32, u64> =
    HashMap::with_max_entries(MAX_TRACKED_PROCESSES, NO_PREALLOC);
