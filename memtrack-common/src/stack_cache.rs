//! Walks remembered by what they read: a per-CPU cache that lets an allocation whose
//! stack was walked before skip the walk, exactly.
//!
//! # Why a remembered walk is exact
//!
//! The in-kernel walk (memtrack-ebpf unwind.rs) is a function of the probe's registers
//! (`ip`, `sp`, `rbp`), the process's mappings (one `ProcessMappings` value, named by
//! its stamp `generation`), the unwind rows (never rewritten while a tracker runs) and
//! the stack words it reads. Each step's rule depends only on the frame's address, which
//! is the word the step before read; each address read is `sp` plus constants, a
//! register value, or a word read before. So a walk from the same `ip`, `sp`, the same
//! `rbp` when a rule used the register's value, under the same mappings, that finds the
//! same value in every word the first walk read, takes every step the same way and ends
//! with the same frames: the same stack id.
//!
//! A [`StackCacheSlot`] keeps that: the starting registers, the stamp, and each word the
//! walk depended on, as (offset from `sp`, value). The words are the return addresses,
//! the saved `rbp` values that a later rule used as a frame base (an `rbp` saved and
//! never used so does not change the walk, so a loop counter kept in `rbp` does not
//! defeat the cache), and the probe's own `rbp` when a rule used it. A walk is
//! remembered only when it ended normally (not cut short, no read failed, no signal
//! frame crossed), every word it depended on lies within [`CACHE_SPAN_BYTES`] above
//! `sp`, there are at most [`MAX_CACHED_READS`] of them, and its stack was interned (not
//! lost).
//!
//! The walk itself only notes, per step, what it read where and which rule it used, in
//! this CPU's [`WalkTrace`]: stores at the index it already uses for the frame, so the
//! verifier's work on the walk barely grows. When the walk ends, it tail-calls a program
//! of its own (`program_names::REMEMBER`) that works out from the trace which words the
//! walk depended on and fills the slot.
//!
//! An allocation looks up the slot of its `ip` and `sp` ([`StackCacheSlot::index`]);
//! when the tags match, it copies the stack from `sp` up to the last word the slot
//! names, in one helper call, and compares every word. All equal: the slot's stack id,
//! no walk. Any difference: the walk runs and may fill the slot anew.
//!
//! # Preemption
//!
//! The slots and the trace are per CPU, and a program runs on one CPU, but a program
//! can be preempted by another thread's program on the same CPU. A slot's
//! [`StackCacheSlot::seq`] is odd while a walk fills it; filling starts only from an even
//! sequence, by compare-and-swap, and ends with the next even value, so a reader sees a
//! complete slot or a changed sequence. The trace carries the [`WalkTrace::nonce`] of
//! the walk writing it: a walk that finds another nonce there at its end (another walk
//! began on this CPU meanwhile) remembers nothing.

/// Slots of each CPU's cache (a power of two). Each is a little over 1 KiB
/// ([`StackCacheSlot`]); a per-CPU array reserves them for every possible CPU.
pub const STACK_CACHE_SLOTS: u32 = 64;

const _: () = assert!(STACK_CACHE_SLOTS.is_power_of_two());

/// Most stack words one remembered walk may depend on (a power of two): a return
/// address per frame, plus the saved `rbp` values used as frame bases.
pub const MAX_CACHED_READS: usize = 128;

const _: () = assert!(MAX_CACHED_READS.is_power_of_two());

/// Bytes above `sp` a remembered walk's words may lie in (a power of two), and the size
/// of the per-CPU buffer the check copies the stack into ([`CacheWindow`]): 64 frames of
/// 128 bytes (six saved registers and a few locals each: the stack benchmark's frames)
/// fill half of it.
pub const CACHE_SPAN_BYTES: u64 = 16384;

const _: () = assert!(CACHE_SPAN_BYTES.is_power_of_two());

/// Words of a [`CacheWindow`].
pub const CACHE_SPAN_WORDS: usize = (CACHE_SPAN_BYTES / 8) as usize;

const _: () = assert!(CACHE_SPAN_WORDS.is_power_of_two());
const _: () = assert!(CACHE_SPAN_WORDS <= u16::MAX as usize);

/// One remembered walk (see the module's docs): the value of the per-CPU
/// `STACK_CACHE` array.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackCacheSlot {
    /// Even: the fields below describe one complete walk (or the slot is empty, with
    /// `stack` 0); odd: a walk is filling them.
    pub seq: u64,
    /// The walk's stack id; 0 ([`crate::stacks::NO_STACK`]): empty.
    pub stack: u32,
    /// The [`crate::stacks::ProcessMappings::generation`] the walk used.
    pub generation: u32,
    /// Words in `offsets` and `values`.
    pub reads: u32,
    /// Bytes from `sp` to the end of the highest word.
    pub span: u32,
    /// 1: a rule of the walk used the probe's own `rbp` as a frame base.
    pub uses_bp: u32,
    /// Always zero (explicit padding).
    pub _pad: u32,
    /// The probe's instruction pointer (an address: the allocation function's entry).
    pub ip: u64,
    /// The probe's stack pointer (an address).
    pub sp: u64,
    /// The probe's `rbp`, compared only when `uses_bp` is 1.
    pub bp: u64,
    /// Each word's offset from `sp`, in words.
    pub offsets: [u16; MAX_CACHED_READS],
    /// Each word's value.
    pub values: [u64; MAX_CACHED_READS],
}

/// The multiplier of the slot index (2^64 / the golden ratio, odd).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl StackCacheSlot {
    /// The slot of a walk from `ip` and `sp` in a cache of [`STACK_CACHE_SLOTS`].
    #[inline(always)]
    pub const fn index(ip: u64, sp: u64) -> u32 {
        let h = (sp ^ ip.rotate_left(29)).wrapping_mul(MIX);
        (h >> 58) as u32 & (STACK_CACHE_SLOTS - 1)
    }
}

const _: () = assert!(STACK_CACHE_SLOTS == 1 << (64 - 58));

/// Steps a [`WalkTrace`] holds (a power of two): one per stored frame, at the frame's
/// index, and the allocation function's own at [`OWN_STEP`].
pub const TRACE_STEPS: usize = 128;

/// The trace index of the allocation function's own frame (walked, not stored).
pub const OWN_STEP: usize = TRACE_STEPS - 1;

const _: () = assert!(TRACE_STEPS.is_power_of_two());
const _: () = assert!(crate::stacks::MAX_STACK_DEPTH < OWN_STEP);

/// [`WalkTrace::rule`] of a step that ended before it had a frame-base rule (no row,
/// not mapped, the outermost frame).
pub const NO_RULE: u8 = u8::MAX;

/// Value of the per-CPU `WALK_TRACE` map: what the walk in progress on this CPU read,
/// step by step (see the module's docs). Entries past the walk's last step are left
/// from earlier walks and never read.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkTrace {
    /// The last nonce handed out on this CPU.
    pub next_nonce: u64,
    /// The walk writing the trace.
    pub nonce: u64,
    /// Equal to `nonce`: a read of that walk failed or it crossed a signal frame, and it
    /// is not remembered.
    pub failed: u64,
    /// The probe's instruction pointer (an address).
    pub ip: u64,
    /// The probe's stack pointer (an address).
    pub sp: u64,
    /// The probe's `rbp`.
    pub bp: u64,
    /// The [`crate::stacks::ProcessMappings::generation`] of the walk.
    pub generation: u32,
    /// For the remembering program, of the walk that just ended: its stack id.
    pub done_stack: u32,
    /// Its nonce.
    pub done_nonce: u64,
    /// Its frames stored.
    pub done_stored: u32,
    /// 1: it ended truncated.
    pub done_truncated: u32,
    /// Each step's frame-base rule (`crate::unwind::cfa_rule`), or [`NO_RULE`].
    pub rule: [u8; TRACE_STEPS],
    /// Where the step read the caller's saved `rbp` (an address; 0: it read none).
    pub bp_at: [u64; TRACE_STEPS],
    /// The value read there.
    pub bp_value: [u64; TRACE_STEPS],
    /// Where the step read the return address (an address).
    pub ra_at: [u64; TRACE_STEPS],
    /// The return address read.
    pub ra_value: [u64; TRACE_STEPS],
}

/// Value of the per-CPU `CACHE_WINDOW` map: the copy of the stack a cache check
/// compares, from the probe's `sp` on.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheWindow {
    /// The stack's words, the first at `sp`.
    pub words: [u64; CACHE_SPAN_WORDS],
}

/// Indexes of the per-CPU `STACK_WALKS` array: what became of the allocations whose
/// stack was wanted (diagnostics, not losses).
pub mod walks {
    /// Stacks found by walking.
    pub const WALKED: u32 = 0;
    /// Stacks found in the cache, without a walk.
    pub const REUSED: u32 = 1;
    /// Number of counters.
    pub const LEN: u32 = 2;
}

/// Name of the eBPF object's read-only global (`u32`) that turns the cache on (1, the
/// default) or off (0), set by the loader before verification.
pub const CACHE_GLOBAL: &str = "STACK_CACHE_ON";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_stay_in_the_cache_and_spread() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000u64 {
            let idx = StackCacheSlot::index(0x7f00_1234_5670, 0x7ffd_0000_0000 - i * 16);
            assert!(idx < STACK_CACHE_SLOTS);
            seen.insert(idx);
        }
        assert!(seen.len() as u32 > STACK_CACHE_SLOTS / 2, "{}", seen.len());
    }

    #[test]
    fn a_slot_fits_a_per_cpu_array() {
        // The kernel's per-CPU values are at most 32 KiB (PCPU_MIN_UNIT_SIZE).
        assert!(core::mem::size_of::<StackCacheSlot>() <= 32 << 10);
        assert!(core::mem::size_of::<CacheWindow>() <= 32 << 10);
        assert!(core::mem::size_of::<WalkTrace>() <= 32 << 10);
    }
}
