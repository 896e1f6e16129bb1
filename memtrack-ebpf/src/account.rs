//! The accounting rules, in one place: what a call does to a process's counters.
//!
//! Blocks are counted as valgrind's DHAT counts them, so numbers can be cross-checked:
//! every successful allocation hands out one block of its requested size; a successful
//! `realloc(p, n)` (p != NULL, n > 0) releases p's block and hands out a new one of n bytes;
//! frees of pointers never seen are counted apart and never subtracted.

use aya_ebpf::helpers::bpf_ktime_get_ns;
use memtrack_common::{
    HISTOGRAM_BUCKETS, LiveBlock, NUM_FUNCS, Pending, PidStats, ReleaseMark, pending_flags,
};

use crate::{atomics, live_maps::take_live, thread::Thread};

/// What an entry probe found about calls already in progress on its thread.
pub enum Nesting {
    /// Called by another probed function: part of that call, not accounted again.
    Nested,
    /// The outermost probed call on the thread.
    Outermost,
}

/// Decides whether a call whose entry stack pointer is `entry_sp` is nested in a probed
/// call in progress on this thread. A pending call at a deeper stack level never
/// returned normally (a C++ `operator new` that threw): it is dropped and counted
/// as a failed allocation. With `count_depth`, a nested call adds a nesting level (its
/// return probe will remove it); free-like functions have no return probe.
#[inline(always)]
pub fn nesting(t: &Thread, entry_sp: u64, count_depth: bool) -> Nesting {
    // SAFETY (whole block): the entry is this thread's own.
    unsafe {
        let p = &raw mut (*t.state).pending;
        if (*p).depth == 0 {
            return Nesting::Outermost;
        }
        // Equal: a tail call (the callee reuses the caller's frame). The return address
        // cannot tell a tail call from a new call at the same level, because the outer
        // call's return probe has replaced it with the uretprobe trampoline; so a call
        // that threw and was caught in the very frame that calls again is taken for
        // nested (rare: an out-of-memory exception, retried in place).
        if entry_sp <= (*p).entry_sp {
            if count_depth {
                (*p).depth += 1;
            }
            return Nesting::Nested;
        }
        (*p).depth = 0;
        if let Some(stats) = t.stats() {
            count_failure(stats, (*p).func);
        }
    }
    Nesting::Outermost
}

/// The stack pointer at the probed function's entry: `rsp` at the probed instruction
/// plus the adjustment carried in the probe's cookie.
#[inline(always)]
pub fn entry_sp(rsp: u64, cookie: u64) -> u64 {
    rsp.wrapping_add(memtrack_common::cookie::stack_adjust(cookie))
}

/// Records the arguments of an outermost call for its return probe.
#[inline(always)]
pub fn begin_call(t: &Thread, pending: &Pending) {
    // SAFETY: the entry is this thread's own.
    unsafe { (*t.state).pending = *pending };
}

/// At a return probe: leaves one nesting level; returns the outermost call's arguments
/// when this return ends it.
#[inline(always)]
pub fn end_call(t: &Thread) -> Option<Pending> {
    // SAFETY (whole block): the entry is this thread's own.
    unsafe {
        let p = &raw mut (*t.state).pending;
        match (*p).depth {
            0 => None,
            1 => {
                (*p).depth = 0;
                Some(*p)
            }
            _ => {
                (*p).depth -= 1;
                None
            }
        }
    }
}

/// Counts one call of function `func` (entry side).
#[inline(always)]
pub fn count_call(stats: *mut PidStats, func: u32) {
    if let Some(slot) = slot(func) {
        // SAFETY: index checked; stats points into a live map value.
        atomics::add(unsafe { &raw mut (*stats).funcs[slot].calls }, 1);
    }
}

/// The per-function counter slot of `func`, if it has one. The volatile read makes the
/// compiler compare and index with one and the same register: otherwise it may index
/// with another copy of the value, whose bound the verifier does not know.
#[inline(always)]
fn slot(func: u32) -> Option<usize> {
    // SAFETY: reading a local.
    let func = unsafe { core::ptr::read_volatile(&func) } as usize;
    if func < NUM_FUNCS { Some(func) } else { None }
}

/// Counts a failed call of `func`.
#[inline(always)]
pub fn count_failure(stats: *mut PidStats, func: u32) {
    // SAFETY: stats points into a live map value.
    unsafe {
        atomics::add(&raw mut (*stats).failed_allocs, 1);
        if let Some(slot) = slot(func) {
            atomics::add(&raw mut (*stats).funcs[slot].failures, 1);
        }
    }
}

/// The histogram bucket of a size: 0 for 0, else floor(log2(size)) + 1, so at most 64:
/// below `HISTOGRAM_BUCKETS` for every size (the bucket counts are the count of blocks
/// handed out, `PidStats::alloc_calls`).
#[inline(always)]
fn size_bucket(size: u64) -> usize {
    if size == 0 {
        return 0;
    }
    let mut v = size;
    let mut n = 0usize;
    if v >= 1 << 32 {
        v >>= 32;
        n += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        n += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        n += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        n += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        n += 2;
    }
    if v >= 1 << 1 {
        n += 1;
    }
    n + 1
}

/// A block of `size` requested bytes handed out from stack `stack`
/// (`memtrack_common::stacks::NO_STACK` with stacks off), charged to its stack's
/// counters: what its live-map entry holds (see `live_maps::make_live` and
/// [`count_alloc`], the other two steps of recording an allocation).
#[inline(always)]
pub fn new_block(t: &Thread, stats: *mut PidStats, stack: u32, size: u64) -> LiveBlock {
    // The stack the block is charged to, and released from: lost when its counters
    // could not be created.
    let stack = crate::unwind::charge_alloc(stats, t.tgid(), stack, size);
    LiveBlock {
        size,
        stack,
        _pad: 0,
    }
}

/// Counts a block of `size` requested bytes handed out by `func` (after [`new_block`]
/// and `live_maps::make_live`), and raises the peak. The blocks handed out are counted in their
/// size's histogram bucket alone, and the live blocks not at all: user space derives
/// both (`PidStats::alloc_calls`, `PidStats::live_blocks`). Returns the live bytes after
/// it (None: the update could not read them back, a lost event).
#[inline(always)]
pub fn count_alloc(stats: *mut PidStats, func: u32, size: u64) -> Option<u64> {
    // SAFETY (whole block): stats points into a live map value; indexes are checked.
    unsafe {
        // Before `live_bytes`: `bytes_freed` is the one less the other (PidStats), so a
        // reader never sees this block released before it was handed out.
        atomics::add(&raw mut (*stats).bytes_allocated, size);
        if let Some(slot) = slot(func) {
            atomics::add(&raw mut (*stats).funcs[slot].bytes, size);
        }
        let bucket = size_bucket(size);
        if bucket < HISTOGRAM_BUCKETS {
            atomics::add(&raw mut (*stats).size_histogram[bucket], 1);
        }
        let live = &raw mut (*stats).live_bytes;
        let after = atomics::add_fetch(live, size);
        match after {
            Some(now_live) => {
                match atomics::raise_to(&raw mut (*stats).peak_live_bytes, now_live) {
                    Some(true) => {
                        core::ptr::write_volatile(
                            &raw mut (*stats).peak_time_ns,
                            bpf_ktime_get_ns(),
                        );
                        // Read only by the per-stack at-peak counters (unwind.rs
                        // `snapshot`) and the stacks' t-gmax: with stacks off the
                        // verifier prunes both.
                        if crate::unwind::depth() != 0 {
                            atomics::add(&raw mut (*stats).peak_epoch, 1);
                            core::ptr::write_volatile(
                                &raw mut (*stats).peak_bytes_allocated,
                                atomics::load(&raw const (*stats).bytes_allocated),
                            );
                        }
                    }
                    Some(false) => {}
                    None => atomics::add(&raw mut (*stats).lost_events, 1),
                }
            }
            None => {
                atomics::add(live, size);
                atomics::add(&raw mut (*stats).lost_events, 1);
            }
        }
        after
    }
}

/// A realloc-family call of the non-NULL `ptr`, outermost and just recorded as the
/// thread's pending call: its old block leaves the live map now (see
/// `memtrack_common::Pending::old_size`), its size, stack and birth kept in the pending
/// call, and comes back if the call fails.
#[inline(always)]
pub fn take_old_block(t: &Thread, ptr: u64) {
    if let Some(old) = take_live(t, ptr) {
        // SAFETY: the entry is this thread's own.
        unsafe {
            let p = &raw mut (*t.state).pending;
            (*p).old_size = old.size;
            (*p).old_stack = old.stack;
            (*p).flags |= pending_flags::OLD_KNOWN;
        }
    }
}

/// A known block of `size` bytes was released by thread `t`; `credit` is the
/// free-like function's counter slot to credit the bytes to (None for realloc's
/// release). The live blocks and the bytes released are not counted: user space
/// derives them (`PidStats`). The live bytes' new value goes into the timeline.
#[inline(always)]
pub fn record_release(t: &Thread, stats: *mut PidStats, credit: Option<u32>, size: u64) {
    // SAFETY: stats points into a live map value; index checked.
    unsafe {
        atomics::add(&raw mut (*stats).free_calls, 1);
        let live = &raw mut (*stats).live_bytes;
        if crate::timeline::on() {
            match atomics::add_fetch(live, size.wrapping_neg()) {
                Some(after) => {
                    crate::timeline::heap(t.slot, t.tgid(), stats, after.wrapping_add(size), after)
                }
                None => {
                    atomics::sub(live, size);
                    atomics::add(&raw mut (*stats).lost_events, 1);
                }
            }
        } else {
            atomics::sub(live, size);
        }
        if let Some(slot) = credit.and_then(slot) {
            atomics::add(&raw mut (*stats).funcs[slot].bytes, size);
        }
    }
}

/// A free-like call of `func` on `ptr` (non-NULL), outermost on its thread, whose entry
/// stack pointer is `entry_sp`.
///
/// Layered allocators forward one release through several probed functions (libstdc++'s
/// sized `operator delete` calls the unsized one, which jumps to `free`; mimalloc's
/// `free` calls `mi_free`), and free-like functions have no return probe to mark the
/// nesting. So each thread remembers its last release (`ThreadState::mark`): a release
/// of that same pointer, no longer live, through *another* function at the same or a
/// deeper stack level (a forward is a call or a tail jump from inside the first
/// function) is the forward, neither a call of its own nor an unmatched free; the mark
/// then moves to it, so a chain of any length counts once. Anything else is a call and
/// an unmatched free: a double free (`free(p); free(p)` is the same function again), and
/// glibc's per-thread cache releasing, at thread exit, the chunk the thread released
/// last.
#[inline(always)]
pub fn release(t: &Thread, stats: *mut PidStats, func: u32, ptr: u64, entry_sp: u64) {
    let mark = ReleaseMark {
        ptr,
        func,
        _pad: 0,
        entry_sp,
    };
    // SAFETY (whole function): the mark is this thread's own.
    let m = unsafe { &raw mut (*t.state).mark };
    match take_live(t, ptr) {
        Some(block) => {
            count_call(stats, func);
            crate::unwind::charge_release(stats, t.tgid(), &block);
            record_release(t, stats, Some(func), block.size);
        }
        None => {
            let forward =
                unsafe { (*m).ptr == ptr && (*m).func != func && entry_sp <= (*m).entry_sp };
            if !forward {
                count_call(stats, func);
                record_unmatched(stats);
            }
        }
    }
    unsafe { *m = mark };
}

/// A pointer we never saw allocated was released.
#[inline(always)]
pub fn record_unmatched(stats: *mut PidStats) {
    // SAFETY: stats points into a live map value.
    atomics::add(unsafe { &raw mut (*stats).unmatched_frees }, 1);
}

/// A resize to `new_size` of a block whose old size was `old_size`.
#[inline(always)]
pub fn record_resize_direction(stats: *mut PidStats, func: u32, old_size: u64, new_size: u64) {
    let Some(slot) = slot(func) else {
        return;
    };
    // SAFETY: index checked; stats points into a live map value.
    unsafe {
        if new_size > old_size {
            atomics::add(&raw mut (*stats).funcs[slot].grows, 1);
        } else if new_size < old_size {
            atomics::add(&raw mut (*stats).funcs[slot].shrinks, 1);
        }
    }
}
