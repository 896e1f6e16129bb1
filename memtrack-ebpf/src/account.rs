//! The accounting rules, in one place: what a call does to a process's counters.
//!
//! Blocks are counted as valgrind's DHAT counts them, so numbers can be cross-checked:
//! every successful allocation hands out one block of its requested size; a successful
//! `realloc(p, n)` (p != NULL, n > 0) releases p's block and hands out a new one of n bytes;
//! frees of pointers never seen are counted apart and never subtracted.

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use memtrack_common::{
    HISTOGRAM_BUCKETS, LiveBlock, LiveKey, NUM_FUNCS, Pending, PidStats, global,
};

use crate::{
    atomics,
    global_count::global_bump,
    maps::{FREE_MARK, FreeMark, LIVE, PENDING, STATS, TRACKED},
};

/// The calling thread's `pid_tgid` (tgid in the high half, thread id in the low half).
#[inline(always)]
pub fn current() -> u64 {
    bpf_get_current_pid_tgid()
}

/// The process id (tgid) of a `pid_tgid`.
#[inline(always)]
pub fn tgid_of(pid_tgid: u64) -> u32 {
    (pid_tgid >> 32) as u32
}

/// Whether calls of this thread are counted now: its process is tracked, enabled, and the
/// thread passes the thread filter.
#[inline(always)]
pub fn is_counted(pid_tgid: u64) -> bool {
    let tgid = tgid_of(pid_tgid);
    // SAFETY: the value is plain data read once.
    match unsafe { TRACKED.get(&tgid) } {
        Some(state) => state.enabled != 0 && (state.tid == 0 || state.tid == pid_tgid as u32),
        None => false,
    }
}

/// The counters of `tgid`, or `None` (counted in GLOBAL) when user space has none for it.
#[inline(always)]
pub fn stats_of(tgid: u32) -> Option<*mut PidStats> {
    let stats = STATS.get_ptr_mut(&tgid);
    if stats.is_none() {
        global_bump(global::MISSING_STATS);
    }
    stats
}

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
pub fn nesting(pid_tgid: u64, entry_sp: u64, count_depth: bool) -> Nesting {
    let Some(p) = PENDING.get_ptr_mut(&pid_tgid) else {
        return Nesting::Outermost;
    };
    // SAFETY: only this thread touches its own entry.
    unsafe {
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
        let stale = *p;
        let _ = PENDING.remove(&pid_tgid);
        if let Some(stats) = stats_of(tgid_of(pid_tgid)) {
            count_failure(stats, stale.func);
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
pub fn begin_call(pid_tgid: u64, pending: &Pending, stats: *mut PidStats) -> bool {
    if PENDING.insert(&pid_tgid, pending, 0).is_err() {
        global_bump(global::PENDING_FULL);
        // SAFETY: stats points into a live map value.
        atomics::add(unsafe { &raw mut (*stats).lost_events }, 1);
        return false;
    }
    true
}

/// At a return probe: leaves one nesting level; returns the outermost call's arguments
/// when this return ends it.
#[inline(always)]
pub fn end_call(pid_tgid: u64) -> Option<Pending> {
    let p = PENDING.get_ptr_mut(&pid_tgid)?;
    // SAFETY: only this thread touches its own entry.
    unsafe {
        if (*p).depth > 1 {
            (*p).depth -= 1;
            return None;
        }
        let pending = *p;
        let _ = PENDING.remove(&pid_tgid);
        Some(pending)
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

/// The histogram bucket of a size: 0 for 0, else floor(log2(size)) + 1.
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

/// A block of `size` requested bytes was handed out at `addr` by `func`, from stack
/// `stack` (`memtrack_common::stacks::NO_STACK` with stacks off).
#[inline(always)]
pub fn record_alloc(stats: *mut PidStats, tgid: u32, func: u32, stack: u32, addr: u64, size: u64) {
    // The stack the block is charged to, and released from: lost when its counters
    // could not be created.
    let stack = crate::unwind::charge_alloc(stats, tgid, stack, size);
    let key = LiveKey {
        tgid,
        _pad: 0,
        addr,
    };
    let block = LiveBlock {
        size,
        stack,
        _pad: 0,
    };
    // SAFETY (whole block): stats points into a live map value; indexes are checked.
    unsafe {
        if LIVE.insert(&key, &block, 0).is_err() {
            // Full live map: this block's free will show as unmatched. Never silent.
            atomics::add(&raw mut (*stats).lost_events, 1);
        }
        atomics::add(&raw mut (*stats).alloc_calls, 1);
        atomics::add(&raw mut (*stats).bytes_allocated, size);
        atomics::add(&raw mut (*stats).live_blocks, 1);
        if let Some(slot) = slot(func) {
            atomics::add(&raw mut (*stats).funcs[slot].bytes, size);
        }
        let bucket = size_bucket(size);
        if bucket < HISTOGRAM_BUCKETS {
            atomics::add(&raw mut (*stats).size_histogram[bucket], 1);
        }
        let live = &raw mut (*stats).live_bytes;
        match atomics::add_fetch(live, size) {
            Some(now_live) => {
                match atomics::raise_to(&raw mut (*stats).peak_live_bytes, now_live) {
                    Some(true) => {
                        core::ptr::write_volatile(
                            &raw mut (*stats).peak_time_ns,
                            bpf_ktime_get_ns(),
                        );
                        atomics::add(&raw mut (*stats).peak_epoch, 1);
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
    }
}

/// Takes the block at `addr` out of the live map; its size and stack when it was there.
#[inline(always)]
pub fn take_live(tgid: u32, addr: u64) -> Option<LiveBlock> {
    let key = LiveKey {
        tgid,
        _pad: 0,
        addr,
    };
    // SAFETY: read of a plain value.
    let block = unsafe { *LIVE.get(&key)? };
    let _ = LIVE.remove(&key);
    Some(block)
}

/// Puts a block back into the live map (a realloc that failed keeps its old block, and
/// its stack's counters were never changed).
#[inline(always)]
pub fn restore_live(stats: *mut PidStats, tgid: u32, addr: u64, block: &LiveBlock) {
    let key = LiveKey {
        tgid,
        _pad: 0,
        addr,
    };
    if LIVE.insert(&key, block, 0).is_err() {
        // SAFETY: stats points into a live map value.
        atomics::add(unsafe { &raw mut (*stats).lost_events }, 1);
    }
}

/// A known block of `size` bytes was released; `credit` is the free-like function's
/// counter slot to credit the bytes to (None for realloc's release).
#[inline(always)]
pub fn record_release(stats: *mut PidStats, credit: Option<u32>, size: u64) {
    // SAFETY: stats points into a live map value; index checked.
    unsafe {
        atomics::add(&raw mut (*stats).free_calls, 1);
        atomics::add(&raw mut (*stats).bytes_freed, size);
        atomics::sub(&raw mut (*stats).live_blocks, 1);
        atomics::sub(&raw mut (*stats).live_bytes, size);
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
/// nesting. So each thread remembers its last release (FREE_MARK): a release of that
/// same pointer, no longer live, through *another* function at the same or a deeper
/// stack level (a forward is a call or a tail jump from inside the first function) is
/// the forward, neither a call of its own nor an unmatched free; the mark then moves to
/// it, so a chain of any length counts once. Anything else is a call and an unmatched
/// free: a double free (`free(p); free(p)` is the same function again), and glibc's
/// per-thread cache releasing, at thread exit, the chunk the thread released last.
#[inline(always)]
pub fn release(stats: *mut PidStats, tgid: u32, pid_tgid: u64, func: u32, ptr: u64, entry_sp: u64) {
    let mark = FreeMark {
        ptr,
        func,
        _pad: 0,
        entry_sp,
    };
    match take_live(tgid, ptr) {
        Some(block) => {
            count_call(stats, func);
            crate::unwind::charge_release(stats, tgid, &block);
            record_release(stats, Some(func), block.size);
            let _ = FREE_MARK.insert(&pid_tgid, &mark, 0);
        }
        None => {
            let forwarded = FREE_MARK.get_ptr_mut(&pid_tgid).is_some_and(|m| {
                // SAFETY: only this thread reads or writes its own entry.
                unsafe {
                    let forward = (*m).ptr == ptr && (*m).func != func && entry_sp <= (*m).entry_sp;
                    if forward {
                        *m = mark;
                    }
                    forward
                }
            });
            if !forwarded {
                count_call(stats, func);
                record_unmatched(stats);
                let _ = FREE_MARK.insert(&pid_tgid, &mark, 0);
            }
        }
    }
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
