//! One entry program (and, but for `free`, one return program) per allocator function.
//! Program names are `<function>_entry` / `<function>_return`; the loader attaches them
//! by these names. The argument layouts are the C prototypes' (System V x86-64 ABI).

use aya_ebpf::{
    helpers::bpf_probe_read_user,
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use memtrack_common::{Pending, PidStats, func, pending_flags};

use crate::{
    account::{self, current, tgid_of},
    atomics,
};

/// Entry of every allocating function but the realloc family.
#[inline(always)]
fn alloc_entry(f: u32, size: u64, ptr: u64, flags: u64) -> u32 {
    let id = current();
    if account::enter_nested(id) || !account::is_counted(id) {
        return 0;
    }
    let Some(stats) = account::stats_of(tgid_of(id)) else {
        return 0;
    };
    account::count_call(stats, f);
    let pending = Pending {
        depth: 1,
        func: f,
        size,
        ptr,
        old_size: 0,
        flags,
    };
    account::begin_call(id, &pending, stats);
    0
}

/// Entry of realloc/reallocarray: the old block leaves the live map now (see
/// `memtrack_common::Pending::old_size`) and comes back if the call fails.
#[inline(always)]
fn realloc_entry(f: u32, ptr: u64, size: u64, overflow: bool) -> u32 {
    let id = current();
    if account::enter_nested(id) || !account::is_counted(id) {
        return 0;
    }
    let tgid = tgid_of(id);
    let Some(stats) = account::stats_of(tgid) else {
        return 0;
    };
    account::count_call(stats, f);
    let mut pending = Pending {
        depth: 1,
        func: f,
        size,
        ptr,
        old_size: 0,
        flags: if overflow { pending_flags::OVERFLOW } else { 0 },
    };
    if ptr != 0
        && !overflow
        && let Some(old) = account::take_live(tgid, ptr)
    {
        pending.old_size = old;
        pending.flags |= pending_flags::OLD_KNOWN;
    }
    if !account::begin_call(id, &pending, stats) && pending.flags & pending_flags::OLD_KNOWN != 0 {
        account::restore_live(stats, tgid, ptr, pending.old_size);
    }
    0
}

/// Return of every allocating function.
#[inline(always)]
fn alloc_return(ret: u64) -> u32 {
    let id = current();
    let Some(p) = account::end_call(id) else {
        return 0;
    };
    let tgid = tgid_of(id);
    let Some(stats) = account::stats_of(tgid) else {
        return 0;
    };
    match p.func {
        func::REALLOC | func::REALLOCARRAY => realloc_return(stats, tgid, &p, ret),
        func::POSIX_MEMALIGN => {
            // posix_memalign returns an int error number; the block is in *memptr.
            if ret as u32 != 0 {
                account::count_failure(stats, p.func);
            } else {
                // SAFETY: reading user memory through the helper, which checks it.
                match unsafe { bpf_probe_read_user(p.ptr as *const u64) } {
                    Ok(addr) if addr != 0 => {
                        account::record_alloc(stats, tgid, p.func, addr, p.size)
                    }
                    Ok(_) => {}
                    // SAFETY: stats points into a live map value.
                    Err(_) => atomics::add(unsafe { &raw mut (*stats).lost_events }, 1),
                }
            }
        }
        _ => {
            if ret == 0 || p.flags & pending_flags::OVERFLOW != 0 {
                account::count_failure(stats, p.func);
            } else {
                account::record_alloc(stats, tgid, p.func, ret, p.size);
            }
        }
    }
    0
}

/// realloc(NULL, n) allocates; a non-NULL result for a non-NULL pointer is a resize
/// (release + new block, even at the same address); realloc(p, 0) returning NULL is a
/// free (glibc); any other NULL result is a failure that leaves the old block alive.
#[inline(always)]
fn realloc_return(stats: *mut PidStats, tgid: u32, p: &Pending, ret: u64) {
    let known = p.flags & pending_flags::OLD_KNOWN != 0;
    if p.ptr == 0 {
        if ret == 0 {
            account::count_failure(stats, p.func);
        } else {
            account::record_alloc(stats, tgid, p.func, ret, p.size);
        }
    } else if ret != 0 {
        if known {
            account::record_release(stats, p.func, p.old_size);
            account::record_resize_direction(stats, p.func, p.old_size, p.size);
        } else {
            account::record_unmatched(stats);
        }
        account::record_alloc(stats, tgid, p.func, ret, p.size);
    } else if p.size == 0 && p.flags & pending_flags::OVERFLOW == 0 {
        if known {
            account::record_release(stats, p.func, p.old_size);
        } else {
            account::record_unmatched(stats);
        }
    } else {
        account::count_failure(stats, p.func);
        if known {
            account::restore_live(stats, tgid, p.ptr, p.old_size);
        }
    }
}

#[inline(always)]
fn arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg::<u64>(n).unwrap_or(0)
}

/// nmemb * size, and whether it overflowed (the callee then fails with ENOMEM).
#[inline(always)]
fn array_size(nmemb: u64, size: u64) -> (u64, bool) {
    // checked_mul needs a 128-bit multiply (__multi3), which BPF lacks, and LLVM turns
    // the plain division test back into one; the volatile read keeps the division.
    if nmemb | size < 1 << 32 {
        return (nmemb * size, false);
    }
    let limit = u64::MAX / nmemb.max(1);
    // SAFETY: reading a local.
    let limit = unsafe { core::ptr::read_volatile(&limit) };
    if nmemb != 0 && size > limit {
        (u64::MAX, true)
    } else {
        (nmemb.wrapping_mul(size), false)
    }
}

#[uprobe]
pub fn malloc_entry(ctx: ProbeContext) -> u32 {
    alloc_entry(func::MALLOC, arg(&ctx, 0), 0, 0)
}

#[uprobe]
pub fn calloc_entry(ctx: ProbeContext) -> u32 {
    let (size, overflow) = array_size(arg(&ctx, 0), arg(&ctx, 1));
    let flags = if overflow { pending_flags::OVERFLOW } else { 0 };
    alloc_entry(func::CALLOC, size, 0, flags)
}

#[uprobe]
pub fn realloc_entry_prog(ctx: ProbeContext) -> u32 {
    realloc_entry(func::REALLOC, arg(&ctx, 0), arg(&ctx, 1), false)
}

#[uprobe]
pub fn reallocarray_entry(ctx: ProbeContext) -> u32 {
    let (size, overflow) = array_size(arg(&ctx, 1), arg(&ctx, 2));
    realloc_entry(func::REALLOCARRAY, arg(&ctx, 0), size, overflow)
}

#[uprobe]
pub fn aligned_alloc_entry(ctx: ProbeContext) -> u32 {
    alloc_entry(func::ALIGNED_ALLOC, arg(&ctx, 1), 0, 0)
}

#[uprobe]
pub fn posix_memalign_entry(ctx: ProbeContext) -> u32 {
    alloc_entry(func::POSIX_MEMALIGN, arg(&ctx, 2), arg(&ctx, 0), 0)
}

#[uprobe]
pub fn memalign_entry(ctx: ProbeContext) -> u32 {
    alloc_entry(func::MEMALIGN, arg(&ctx, 1), 0, 0)
}

#[uprobe]
pub fn valloc_entry(ctx: ProbeContext) -> u32 {
    alloc_entry(func::VALLOC, arg(&ctx, 0), 0, 0)
}

#[uprobe]
pub fn pvalloc_entry(ctx: ProbeContext) -> u32 {
    alloc_entry(func::PVALLOC, arg(&ctx, 0), 0, 0)
}

/// The one return program every allocating function shares: the pending entry says
/// which function it was.
#[uretprobe]
pub fn alloc_return_prog(ctx: RetProbeContext) -> u32 {
    alloc_return(ctx.ret::<u64>())
}

/// `free(ptr)`: no return probe needed. A free inside another probed call (glibc's
/// realloc(p, 0)) belongs to that call and is skipped.
#[uprobe]
pub fn free_entry(ctx: ProbeContext) -> u32 {
    let id = current();
    if account::inside_probed_call(id) || !account::is_counted(id) {
        return 0;
    }
    let tgid = tgid_of(id);
    let Some(stats) = account::stats_of(tgid) else {
        return 0;
    };
    account::count_call(stats, func::FREE);
    let ptr = arg(&ctx, 0);
    if ptr == 0 {
        return 0;
    }
    match account::take_live(tgid, ptr) {
        Some(size) => account::record_release(stats, func::FREE, size),
        None => account::record_unmatched(stats),
    }
    0
}
