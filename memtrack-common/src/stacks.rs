//! The kernel side of allocation call stacks: the maps the eBPF unwinder reads (each
//! process's executable mappings, the shared unwind rows) and writes (interned stacks,
//! per-stack counters), with the encoding of a stack's frames in a map key.
//!
//! # A stack in the kernel
//!
//! A [`StackKey`] holds up to [`MAX_STACK_DEPTH`] frames, innermost first, each a `u64`
//! (see [`frame`]); unused slots are zero. The first frame is the return address into
//! the caller of the allocation function (the allocation function's own frame is not
//! stored). The last frame carries how unwinding ended ([`frame::END_SHIFT`]); a stack
//! without any frame is a single [`frame::NO_FRAME`] slot with its end.

use crate::unwind::UnwindRow;

/// Most frames a stack can hold (512-byte map keys, the kernel's limit for hash keys).
pub const MAX_STACK_DEPTH: usize = 64;

/// Most frames the eBPF unwinder stores (the depth limit is clamped to it): all a
/// [`StackKey`] holds. No one program can walk that many within the verifier's budget
/// of 1,000,000 processed instructions (one program of 16 frames was the most that
/// fitted, measured on Linux 6.18), so the walk is split over a chain of tail calls,
/// [`UNWIND_BATCH`] frames per program (see [`WalkState`]).
pub const MAX_UNWIND_DEPTH: u32 = MAX_STACK_DEPTH as u32;

/// Frames each program of the unwinding chain walks: the entry program walks the
/// allocation function's own frame (not stored) and then this many, and each tail call
/// of the unwind program (`program_names::UNWIND`) this many more, until the walk ends.
/// Chosen by what the verifier accepts and how long it takes (docs/ARCHITECTURE.md).
pub const UNWIND_BATCH: u32 = 8;

/// Tail calls the kernel allows in one chain (`MAX_TAIL_CALL_CNT`); one more fails and
/// the program goes on after the call.
pub const MAX_TAIL_CALLS: u32 = 33;

/// Tail calls a walk to the deepest limit needs: [`MAX_UNWIND_DEPTH`] frames to store,
/// plus one more step that finds the stack goes on (truncated), in batches of
/// [`UNWIND_BATCH`], the first of which the entry program walks.
pub const UNWIND_TAIL_CALLS: u32 = (MAX_UNWIND_DEPTH + 1).div_ceil(UNWIND_BATCH) - 1;

const _: () = assert!(UNWIND_TAIL_CALLS <= MAX_TAIL_CALLS);
const _: () = assert!(MAX_UNWIND_DEPTH as usize <= MAX_STACK_DEPTH);

/// The slot of the unwind program in the `UNWIND_PROGS` program array.
pub const UNWIND_PROG_SLOT: u32 = 0;

/// The slot of the program that remembers a finished walk
/// (`program_names::REMEMBER`) in the `UNWIND_PROGS` program array.
pub const REMEMBER_PROG_SLOT: u32 = 1;

/// Slots of the `UNWIND_PROGS` program array.
pub const UNWIND_PROGS_SLOTS: u32 = 2;

// The walk's tail calls and the one to the remembering program.
const _: () = assert!(UNWIND_TAIL_CALLS < MAX_TAIL_CALLS);

/// Value of the per-CPU `UNWIND_STATE` map: the walk in progress on this CPU, handed
/// from one program of the chain to the next (a tail-called program starts with no
/// registers or stack of its caller). The frames stored so far are in `STACK_SCRATCH`.
///
/// The entry program records the call's `Pending` entry in the thread's `ThreadState`
/// (with stack id [`LOST_STACK`]) before it walks, since it does not resume after a tail
/// call; the program that ends the walk interns the stack and writes its id into that
/// entry. A chain cut short (a tail call that fails, or this state taken over by
/// another thread's walk) leaves the entry's [`LOST_STACK`]: the block counts as lost,
/// never under a wrong stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkState {
    /// `pid_tgid` of the thread whose stack this is (whose `ThreadState` holds the call).
    pub owner: u64,
    /// The pending call's stack pointer at function entry (an address): which call of
    /// the thread the stack id belongs to.
    pub entry_sp: u64,
    /// The next frame's instruction pointer (an address).
    pub ip: u64,
    /// Its stack pointer (an address).
    pub sp: u64,
    /// Its `rbp` (an address, or whatever the program kept in the register).
    pub bp: u64,
    /// Frames stored in `STACK_SCRATCH` so far.
    pub stored: u32,
    /// 1: `ip` is a return address (its call site is at `ip - 1`); 0: an instruction
    /// that was interrupted or probed.
    pub is_return_address: u32,
    /// The user address `STACK_WINDOW` holds a copy of [`WINDOW_BYTES`] from, read in
    /// this walk (0: none yet). Stack reads inside it need no helper call.
    pub window: u64,
    /// Non-zero when a frame stored in this walk differs from the one the scratch held
    /// in its slot before (end bits left out): see [`LastStack`].
    pub diff: u64,
    /// The [`LastStack`] of this CPU when the walk began.
    pub prev: LastStack,
    /// This walk's [`WalkTrace::nonce`](crate::stack_cache::WalkTrace::nonce): whether
    /// the trace is still its own when it ends.
    pub nonce: u64,
}

/// Value of the per-CPU `LAST_STACK` map: the stack the scratch (`STACK_SCRATCH`) holds
/// as a complete key, left there by the last walk on this CPU that ended. A walk
/// overwrites the scratch in place, noting whether any frame changed
/// ([`WalkState::diff`]); when none did and the length and end are the same, the stack
/// is the same one and its id is reused without hashing the 512-byte key again.
/// Exact: the ids compare whole keys, only the lookup is skipped. A walk invalidates it
/// (`id` = [`NO_STACK`]) when it begins, so a walk cut short leaves no stale id behind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastStack {
    /// The scratch's stack id; [`NO_STACK`] when the scratch holds no complete key.
    pub id: u32,
    /// Its frames (at least 1).
    pub len: u32,
    /// How its walk ended (`frame::end`).
    pub end: u64,
}

/// Bytes of the thread's stack one helper call copies into the per-CPU `STACK_WINDOW`
/// ([`StackWindow`]): the walk reads its return addresses and saved registers from that
/// copy while they lie inside it (frames of a few words take one helper call per
/// [`WINDOW_BYTES`] instead of one or two each), and reads one word at a time where the
/// copy fails (its end is not mapped). Each copy costs a fixed part (the kernel's
/// user-copy checks) that dwarfs copying the bytes, so one larger copy beats several.
pub const WINDOW_BYTES: u64 = 2048;

/// Words of a [`StackWindow`].
pub const WINDOW_WORDS: usize = (WINDOW_BYTES / 8) as usize;

const _: () = assert!(WINDOW_WORDS.is_power_of_two());

/// Value of the per-CPU `STACK_WINDOW` map: a copy of [`WINDOW_BYTES`] of the thread's
/// stack from [`WalkState::window`] on.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackWindow {
    /// The stack's words, the first at [`WalkState::window`].
    pub words: [u64; WINDOW_WORDS],
}

/// Most executable mappings of one process the unwinder knows (more are left out and
/// their frames end stacks as not mapped, counted as unknown ends).
pub const MAX_MAPPINGS: usize = 256;

/// Halvings of the search over a process's sorted mappings (`log2(MAX_MAPPINGS) + 1`).
pub const MAPPING_SEARCH_STEPS: u32 = 9;

/// The stack id of allocations whose stack could not be interned (the stack map was
/// full) or whose walk was cut short (see [`WalkState`]): their counters are kept under
/// it, as lost stacks. Interned ids start at 1.
pub const LOST_STACK: u32 = u32::MAX;

/// The stack id meaning "no stack recorded" (stacks are off).
pub const NO_STACK: u32 = 0;

/// Encoding of one frame slot of a [`StackKey`].
pub mod frame {
    /// Bits 0-47: the address. An ELF virtual address of the frame's object when the
    /// object bits are non-zero; the runtime address otherwise (code in no known mapping).
    pub const ADDRESS_MASK: u64 = (1 << 48) - 1;
    /// Bits 48-60: object id + 1 (0: no object). Object ids are below [`MAX_OBJECTS`].
    pub const OBJECT_SHIFT: u32 = 48;
    /// Mask of the object bits after shifting.
    pub const OBJECT_MASK: u64 = (1 << 13) - 1;
    /// Most objects (files) one tracker can load tables for.
    pub const MAX_OBJECTS: u32 = (1 << 13) - 2;
    /// Bit 61: the address is an interrupted instruction (below a signal frame), not a
    /// return address.
    pub const INTERRUPTED: u64 = 1 << 61;
    /// Bits 62-63 of a stack's last slot: how unwinding ended, one of [`end`].
    pub const END_SHIFT: u32 = 62;
    /// The slot of a stack with no frame: object bits all ones, address zero (plus the
    /// end bits).
    pub const NO_FRAME: u64 = OBJECT_MASK << OBJECT_SHIFT;

    /// Values of the end bits.
    pub mod end {
        /// Not the last frame.
        pub const NONE: u64 = 0;
        /// The outermost frame was reached.
        pub const COMPLETE: u64 = 1;
        /// The depth limit was reached.
        pub const TRUNCATED: u64 = 2;
        /// No unwind information, an unrepresentable rule, an unmapped address, an
        /// unreadable stack or a CFA not above the stack pointer: callers unknown.
        pub const UNKNOWN: u64 = 3;
    }
}

/// Key of the `STACK_IDS` map: one distinct stack's frames (see [`frame`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StackKey {
    /// Innermost first; unused slots zero.
    pub frames: [u64; MAX_STACK_DEPTH],
}

impl StackKey {
    /// No frame.
    pub const ZERO: StackKey = StackKey {
        frames: [0; MAX_STACK_DEPTH],
    };
}

/// One executable mapping of a process, in a [`ProcessMappings`] value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingEntry {
    /// First runtime address.
    pub start: u64,
    /// One past the last runtime address.
    pub end: u64,
    /// Runtime address minus ELF virtual address.
    pub bias: u64,
    /// Index of the object's first row in the shared `UNWIND_ROWS` array.
    pub first_row: u32,
    /// Number of rows of the object's table (0: no table; frames here end as unknown).
    pub rows: u32,
    /// The object's id (index into the tracker's object list).
    pub object: u32,
    /// Always zero (explicit padding).
    pub _pad: u32,
}

/// Value of the `MAPPINGS` map (key: tgid): the process's executable mappings sorted by
/// start address, not overlapping.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMappings {
    /// Entries in use (at most [`MAX_MAPPINGS`]).
    pub count: u32,
    /// This value's stamp: non-zero, and different for every value user space writes
    /// into `MAPPINGS` (any process, any time; a tracker's counter), so a
    /// [`RowCacheSlot`] filled from one value never matches a later one. 0 only in
    /// [`ProcessMappings::EMPTY`].
    pub generation: u32,
    /// The mappings, `count` of them first, sorted by `start`.
    pub entries: [MappingEntry; MAX_MAPPINGS],
}

impl ProcessMappings {
    /// No mapping.
    pub const EMPTY: ProcessMappings = ProcessMappings {
        count: 0,
        generation: 0,
        entries: [MappingEntry {
            start: 0,
            end: 0,
            bias: 0,
            first_row: 0,
            rows: 0,
            object: 0,
            _pad: 0,
        }; MAX_MAPPINGS],
    };
}

/// Slots of a CPU's [`RowCache`] (a power of two).
pub const ROW_CACHE_SLOTS: usize = 512;

const _: () = assert!(ROW_CACHE_SLOTS.is_power_of_two());

/// One remembered frame lookup: the mapping and unwind row the two searches found for
/// runtime address `pc` under the [`ProcessMappings`] value stamped `generation`.
/// Rows are never rewritten while a tracker runs (each object's rows are appended
/// once) and a changed mapping list gets a new stamp, so a slot whose `pc` and
/// `generation` match gives the searches' answer exactly.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowCacheSlot {
    /// The runtime address looked up (the call site, `return address - 1`).
    pub pc: u64,
    /// The mapping's load bias (runtime address minus ELF virtual address).
    pub bias: u64,
    /// The [`ProcessMappings::generation`] the answer came from; 0: empty slot.
    pub generation: u32,
    /// The mapping's object id ([`MappingEntry::object`]).
    pub object: u32,
    /// The row the search found.
    pub row: UnwindRow,
    /// [`RowCacheSlot::check_of`] the fields above: a slot half written by a walk that
    /// was preempted (another walk on the same CPU then writing it too) fails the
    /// check; the walk reading it is cut short (its stack counted as lost) and empties
    /// the slot, so the next walk through it fills it again.
    pub check: u64,
}

/// The multiplier of the row cache's hashes (2^64 / the golden ratio, odd).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl RowCacheSlot {
    /// The check value of a slot's fields (a multiplicative mix, so a mix of two
    /// slots' fields matches neither's check but by a 2^-64 chance).
    #[inline(always)]
    pub const fn check_of(
        pc: u64,
        bias: u64,
        generation: u32,
        object: u32,
        row: &UnwindRow,
    ) -> u64 {
        let row = row.pc as u64
            | (row.cfa_offset as u64) << 32
            | (row.cfa_rule as u64) << 48
            | (row.rbp_rule as u8 as u64) << 56;
        let mut h = pc.wrapping_mul(MIX) ^ bias;
        h = h.wrapping_mul(MIX) ^ ((generation as u64) << 32 | object as u64);
        h = h.wrapping_mul(MIX) ^ row;
        h.wrapping_mul(MIX) | 1
    }

    /// The slot of `pc` under `generation` in a cache of [`ROW_CACHE_SLOTS`].
    #[inline(always)]
    pub const fn index(pc: u64, generation: u32) -> usize {
        let h = (pc ^ ((generation as u64) << 40)).wrapping_mul(MIX);
        (h >> 55) as usize & (ROW_CACHE_SLOTS - 1)
    }
}

const _: () = assert!(ROW_CACHE_SLOTS == 1 << (64 - 55));

/// Value of the per-CPU `ROW_CACHE` map: the frame lookups this CPU's walks made last,
/// direct-mapped by [`RowCacheSlot::index`]. A walk whose frame hits a slot skips both
/// searches (the mapping's and the row's); a miss searches and fills the slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowCache {
    /// The slots.
    pub slots: [RowCacheSlot; ROW_CACHE_SLOTS],
}

/// Key of the `STACK_COUNTS` map: (tgid << 32) | stack id.
pub const fn stack_counts_key(tgid: u32, stack: u32) -> u64 {
    ((tgid as u64) << 32) | stack as u64
}

/// Value of the `STACK_COUNTS` map: one stack's counters in one process. Sizes are
/// requested sizes in bytes, blocks are counts. Times are read on the process's
/// allocation clock: its `PidStats::bytes_allocated` (requested bytes it allocated
/// since its counters were last zeroed), which only allocations move, so a block's
/// lifetime is the bytes the process allocated while the block was live.
///
/// Its counts are sums that only grow, so an allocation adds to three of them and a
/// release to three (`alloc_*` and `born_at_sum`; `freed_*` and `freed_at_sum`),
/// besides the at-peak snapshot and the maximum below: what is live is what was
/// allocated less what was freed ([`live_blocks`](Self::live_blocks),
/// [`live_bytes`](Self::live_bytes)), and the lifetimes are the release times less the
/// allocation times ([`total_lifetime`](Self::total_lifetime)).
///
/// The bytes at the process's global peak are kept lazily (O(1) per event): the process
/// bumps `PidStats::peak_epoch` each time its live bytes reach a new peak; before an
/// event changes this stack's counters, if `epoch` is older than the process's epoch (a
/// new peak came since the last change), the live counters then were this stack's share
/// of that peak and are saved into `peak_*`. When reading: if `epoch` is older than the
/// process's final epoch, the live counters are the share at the last peak, otherwise
/// `peak_*` are.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStackCounts {
    /// Blocks allocated from this stack.
    pub alloc_blocks: u64,
    /// Their bytes.
    pub alloc_bytes: u64,
    /// Blocks allocated from this stack and released.
    pub freed_blocks: u64,
    /// Their bytes.
    pub freed_bytes: u64,
    /// The process's peak epoch at the last change of the live counters.
    pub epoch: u64,
    /// Live blocks at the last peak before `epoch` was set (see the type's docs).
    pub peak_blocks: u64,
    /// Live bytes at that peak.
    pub peak_bytes: u64,
    /// Most bytes of this stack live at any one time.
    pub max_live_bytes: u64,
    /// Blocks live at that time.
    pub max_live_blocks: u64,
    /// Sum of the allocation times of every block allocated from this stack, on the
    /// allocation clock (bytes; a block's time is the clock just after it was
    /// allocated, its own bytes included), wrapping.
    pub born_at_sum: u64,
    /// Sum of the release times of the released ones, on the allocation clock (bytes),
    /// wrapping.
    pub freed_at_sum: u64,
}

impl KernelStackCounts {
    /// Blocks of this stack live now: allocated less released.
    pub const fn live_blocks(&self) -> u64 {
        self.alloc_blocks.wrapping_sub(self.freed_blocks)
    }

    /// Their bytes.
    pub const fn live_bytes(&self) -> u64 {
        self.alloc_bytes.wrapping_sub(self.freed_bytes)
    }

    /// Total lifetime of every block of this stack in bytes allocated (the requested
    /// bytes the process allocated while each block was live), the live ones counted
    /// up to the clock `end` (the process's `bytes_allocated` when read, not before
    /// their allocation), as valgrind DHAT's "tl" counts blocks live at exit up to the
    /// end: the released blocks' release times plus `end` for each live one, less every
    /// block's allocation time (exact in wrapping arithmetic whenever that total fits
    /// in 64 bits).
    pub const fn total_lifetime(&self, end: u64) -> u64 {
        self.freed_at_sum
            .wrapping_add(self.live_blocks().wrapping_mul(end))
            .wrapping_sub(self.born_at_sum)
    }

    /// (blocks, bytes) of this stack live at the process's last global peak, given the
    /// process's final peak epoch.
    pub const fn at_peak(&self, process_epoch: u64) -> (u64, u64) {
        if self.epoch < process_epoch {
            (self.live_blocks(), self.live_bytes())
        } else {
            (self.peak_blocks, self.peak_bytes)
        }
    }
}

/// Name of the eBPF object's read-only global (`u32`) holding the depth limit in frames
/// (0: stacks off), set by the loader before the programs are verified.
pub const DEPTH_GLOBAL: &str = "STACK_DEPTH";

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pc: u32) -> UnwindRow {
        UnwindRow {
            pc,
            cfa_offset: 2,
            cfa_rule: crate::unwind::cfa_rule::RSP,
            rbp_rule: -2,
        }
    }

    #[test]
    fn row_cache_index_stays_inside_the_cache_and_spreads_call_sites() {
        let mut used = [0u32; ROW_CACHE_SLOTS];
        for i in 0..4096u64 {
            let pc = 0x5555_5555_0000 + i * 13;
            let slot = RowCacheSlot::index(pc, 7);
            assert!(slot < ROW_CACHE_SLOTS);
            used[slot] += 1;
        }
        // 4096 addresses over 512 slots: none left empty, none crowded.
        assert!(used.iter().all(|&n| (1..=32).contains(&n)), "{used:?}");
        // The same address under another stamp is usually another slot.
        let moved = (0..512u64)
            .filter(|i| {
                let pc = 0x7f00_0000_1000 + i * 16;
                RowCacheSlot::index(pc, 1) != RowCacheSlot::index(pc, 2)
            })
            .count();
        assert!(moved > 400, "{moved}");
    }

    #[test]
    fn row_cache_check_changes_with_every_field() {
        let base = RowCacheSlot::check_of(0x1000, 0x4000, 3, 5, &row(0x900));
        assert_ne!(base, 0);
        let others = [
            RowCacheSlot::check_of(0x1001, 0x4000, 3, 5, &row(0x900)),
            RowCacheSlot::check_of(0x1000, 0x4001, 3, 5, &row(0x900)),
            RowCacheSlot::check_of(0x1000, 0x4000, 4, 5, &row(0x900)),
            RowCacheSlot::check_of(0x1000, 0x4000, 3, 6, &row(0x900)),
            RowCacheSlot::check_of(0x1000, 0x4000, 3, 5, &row(0x901)),
            RowCacheSlot::check_of(
                0x1000,
                0x4000,
                3,
                5,
                &UnwindRow {
                    rbp_rule: 0,
                    ..row(0x900)
                },
            ),
        ];
        for (i, c) in others.iter().enumerate() {
            assert_ne!(*c, base, "field {i}");
        }
        // An empty slot (all zero) never passes for a filled one.
        let empty = RowCacheSlot::default();
        assert_ne!(
            empty.check,
            RowCacheSlot::check_of(
                empty.pc,
                empty.bias,
                empty.generation,
                empty.object,
                &empty.row
            )
        );
    }
}
