//! Atomic updates of counters that several threads of one process update at once.
//!
//! Measured pitfalls on bpfel-unknown-none (docs/ebpf-toolchain.md):
//! `core::sync::atomic` has no read-modify-write operations there; an `atomic_xadd` whose
//! result is used was miscompiled into a plain `lock +=` (no fetch), so xadd is only used
//! fire-and-forget; where the old value matters a `cmpxchg` loop is used (needs
//! `-C target-cpu=v3`); atomic loads crash bpf-linker, so loads are volatile reads.

use core::intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd};

/// Attempts of a compare-and-swap loop before giving up (and counting a lost event).
/// Contention is low: a uprobe hit costs about a microsecond, the swap a few nanoseconds.
const CAS_TRIES: usize = 32;

/// `*dst += v`, atomically, result discarded.
#[inline(always)]
pub fn add(dst: *mut u64, v: u64) {
    // SAFETY: dst points into a map value that stays valid for the program's run.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(dst, v);
    }
}

/// `*dst -= v`, atomically, result discarded.
#[inline(always)]
pub fn sub(dst: *mut u64, v: u64) {
    add(dst, v.wrapping_neg());
}

/// Reads `*src` (not torn: aligned 8-byte loads are single instructions).
#[inline(always)]
pub fn load(src: *const u64) -> u64 {
    // SAFETY: as for `add`.
    unsafe { core::ptr::read_volatile(src) }
}

/// `*dst = new` if `*dst == old`, atomically; true when it swapped.
#[inline(always)]
pub fn swap(dst: *mut u64, old: u64, new: u64) -> bool {
    // SAFETY: as for `add`.
    let (_, swapped) = unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(dst, old, new)
    };
    swapped
}

/// `*dst += v` with a compare-and-swap loop; returns the new value, or `None` when the
/// loop gave up (the caller applies the change with [`add`] and counts the loss).
#[inline(always)]
pub fn add_fetch(dst: *mut u64, v: u64) -> Option<u64> {
    for _ in 0..CAS_TRIES {
        let old = load(dst);
        let new = old.wrapping_add(v);
        // SAFETY: as for `add`.
        let (_, swapped) = unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
                dst, old, new,
            )
        };
        if swapped {
            return Some(new);
        }
    }
    None
}

/// `*dst = max(*dst, v)`; returns true when `*dst` is now `v` (raised to it, or equal
/// to it already: valgrind DHAT's t-gmax is the latest of equal peaks), `None` when the
/// loop gave up.
#[inline(always)]
pub fn raise_to(dst: *mut u64, v: u64) -> Option<bool> {
    for _ in 0..CAS_TRIES {
        let old = load(dst);
        if v < old {
            return Some(false);
        }
        if v == old {
            return Some(true);
        }
        // SAFETY: as for `add`.
        let (_, swapped) = unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(dst, old, v)
        };
        if swapped {
            return Some(true);
        }
    }
    None
}

/// `*dst = v` while `*guard` is still `expected`, with a compare-and-swap loop: Some(true)
/// when it stored, Some(false) when `guard` had changed, `None` when the loop gave up.
/// `dst` is read before `guard` is checked and swapped from that value, so a thread
/// that changes `guard` and then stores into `dst` the same way never has its store
/// overwritten by an older one (whose swap fails, and whose retry sees `guard` moved).
#[inline(always)]
pub fn store_while(dst: *mut u64, v: u64, guard: *const u64, expected: u64) -> Option<bool> {
    for _ in 0..CAS_TRIES {
        let old = load(dst);
        if load(guard) != expected {
            return Some(false);
        }
        if swap(dst, old, v) {
            return Some(true);
        }
    }
    None
}

/// `*dst += 1` if `*dst - base` (wrapping) is below `limit`, with a compare-and-swap
/// loop: Some(true) when it counted one more, Some(false) when the limit was reached,
/// `None` when the loop gave up.
#[inline(always)]
pub fn add_below(dst: *mut u64, base: u64, limit: u64) -> Option<bool> {
    for _ in 0..CAS_TRIES {
        let old = load(dst);
        if old.wrapping_sub(base) >= limit {
            return Some(false);
        }
        if swap(dst, old, old.wrapping_add(1)) {
            return Some(true);
        }
    }
    None
}
