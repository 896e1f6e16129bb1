//! The accounting steps every probe shares, as BPF global functions, which the verifier
//! checks once, on their own, against the types of their arguments, instead of once per
//! path of every program that calls them (an inlined step is verified again for every
//! combination of branches before it). That is most of memtrack's start-up time spent
//! in the verifier: docs/ARCHITECTURE.md ("Verification").
//!
//! The kernel's rules for a global function: at most five arguments, each a scalar or a
//! pointer to a sized type, which the verifier treats as possibly NULL (each is checked
//! here before use); a scalar return value. Map value pointers passed in keep pointing
//! into their maps for the whole program run, as they do for inlined code. The
//! functions are `extern "C"`, unmangled and never inlined, which gives them global
//! linkage in the object's BTF; each wrapper below is the one way the programs call
//! its function.

use memtrack_common::{LiveBlock, Pending, PidStats, ThreadState, pending_flags};

use crate::{account, live_maps, thread::Thread};

/// The calling thread as its program saw it: the state, slot and `pid_tgid` that
/// `Thread::current` found and wrote there in this program run, counted (a
/// global function is only called for a counted call).
#[inline(always)]
fn thread(state: *mut ThreadState) -> Thread {
    // SAFETY (whole block): the caller checked that state is not NULL; it is this
    // thread's own.
    unsafe {
        Thread {
            pid_tgid: (*state).pid_tgid,
            state,
            slot: (*state).slot,
            counted: true,
        }
    }
}

/// Records a block of `size` bytes handed out at `addr`: `account::new_block`,
/// [`make_live`], `account::count_alloc`; `func_stack` holds the function's counter slot
/// in its low half and the stack id in its high half (a global function takes at most
/// five arguments). Returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_record_alloc(
    state: *mut ThreadState,
    stats: *mut PidStats,
    func_stack: u64,
    addr: u64,
    size: u64,
) -> i32 {
    if state.is_null() || stats.is_null() {
        return 0;
    }
    let t = thread(state);
    let func = func_stack as u32;
    let block = account::new_block(&t, stats, (func_stack >> 32) as u32, size);
    make_live(&t, stats, addr, &block);
    if let Some(after) = account::count_alloc(stats, func, size) {
        crate::timeline::heap(t.slot, t.tgid(), stats, after.wrapping_sub(size), after);
    }
    0
}

/// See [`memtrack_record_alloc`].
#[inline(always)]
pub fn record_alloc(t: &Thread, stats: *mut PidStats, func: u32, stack: u32, addr: u64, size: u64) {
    memtrack_record_alloc(
        t.state,
        stats,
        u64::from(func) | u64::from(stack) << 32,
        addr,
        size,
    );
}

/// `live_maps::make_live`: puts `block` into the live maps at `addr` (an allocation's new
/// block, or the old block of a realloc that failed). Its own global function because
/// both [`memtrack_record_alloc`] and [`memtrack_realloc_return`] need it: inlined, the
/// verifier walked its tries twice in the return program. Returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_make_live(
    state: *mut ThreadState,
    stats: *mut PidStats,
    addr: u64,
    block: *const LiveBlock,
) -> i32 {
    if state.is_null() || stats.is_null() || block.is_null() {
        return 0;
    }
    // SAFETY: block is not NULL and points to a whole LiveBlock (the verifier checked
    // its size at the call).
    let block = unsafe { *block };
    live_maps::make_live(&thread(state), stats, addr, &block);
    0
}

/// See [`memtrack_make_live`].
#[inline(always)]
fn make_live(t: &Thread, stats: *mut PidStats, addr: u64, block: &LiveBlock) {
    memtrack_make_live(t.state, stats, addr, block);
}

/// `account::release` of the non-NULL `ptr` by `func`, whose entry stack pointer is
/// `entry_sp`. Returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_release(
    state: *mut ThreadState,
    stats: *mut PidStats,
    func: u32,
    ptr: u64,
    entry_sp: u64,
) -> i32 {
    if state.is_null() || stats.is_null() {
        return 0;
    }
    account::release(&thread(state), stats, func, ptr, entry_sp);
    0
}

/// See [`memtrack_release`].
#[inline(always)]
pub fn release(t: &Thread, stats: *mut PidStats, func: u32, ptr: u64, entry_sp: u64) {
    memtrack_release(t.state, stats, func, ptr, entry_sp);
}

/// `account::take_old_block`: a realloc of `ptr` takes its old block out of the live
/// map into the thread's pending call. Returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_take_old_block(state: *mut ThreadState, ptr: u64) -> i32 {
    if state.is_null() {
        return 0;
    }
    account::take_old_block(&thread(state), ptr);
    0
}

/// See [`memtrack_take_old_block`].
#[inline(always)]
pub fn take_old_block(t: &Thread, ptr: u64) {
    memtrack_take_old_block(t.state, ptr);
}

/// [`realloc_return_body`] of the ended call `p`, which returned `ret`.
/// Returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_realloc_return(
    state: *mut ThreadState,
    stats: *mut PidStats,
    p: *const Pending,
    ret: u64,
) -> i32 {
    if state.is_null() || stats.is_null() || p.is_null() {
        return 0;
    }
    // SAFETY: p is not NULL and points to a whole Pending (the verifier checked its
    // size at the call).
    let p = unsafe { *p };
    realloc_return_body(&thread(state), stats, &p, ret);
    0
}

/// See [`memtrack_realloc_return`].
#[inline(always)]
pub fn realloc_return(t: &Thread, stats: *mut PidStats, p: &Pending, ret: u64) {
    memtrack_realloc_return(t.state, stats, p, ret);
}

/// The return of the realloc-family call `p`, which returned `ret`: realloc(NULL, n)
/// allocates; a non-NULL result for a non-NULL pointer is a resize (release + new
/// block, even at the same address); realloc(p, 0) returning NULL is a free (glibc);
/// any other NULL result is a failure that leaves the old block alive.
#[inline(always)]
fn realloc_return_body(t: &Thread, stats: *mut PidStats, p: &Pending, ret: u64) {
    let tgid = t.tgid();
    let known = p.flags & pending_flags::OLD_KNOWN != 0;
    if p.ptr == 0 {
        if ret == 0 {
            account::count_failure(stats, p.func);
        } else {
            record_alloc(t, stats, p.func, p.stack, ret, p.size);
        }
    } else if ret != 0 {
        if known {
            crate::unwind::charge_release(stats, tgid, &old_block(p));
            account::record_release(t, stats, None, p.old_size);
            account::record_resize_direction(stats, p.func, p.old_size, p.size);
        } else {
            account::record_unmatched(stats);
        }
        record_alloc(t, stats, p.func, p.stack, ret, p.size);
    } else if p.size == 0 && p.flags & pending_flags::OVERFLOW == 0 {
        if known {
            crate::unwind::charge_release(stats, tgid, &old_block(p));
            account::record_release(t, stats, None, p.old_size);
        } else {
            account::record_unmatched(stats);
        }
    } else {
        account::count_failure(stats, p.func);
        if known {
            // Back into the live maps; its stack's counters were never changed.
            make_live(t, stats, p.ptr, &old_block(p));
        }
    }
}

/// The old block of a realloc whose entry took it out of the live map.
#[inline(always)]
fn old_block(p: &Pending) -> LiveBlock {
    LiveBlock {
        size: p.old_size,
        stack: p.old_stack,
        _pad: 0,
    }
}
