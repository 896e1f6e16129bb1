//! One entry program and one return program for every probed symbol (malloc, operator
//! new, mallocx, mi_malloc, free, ...). Each probe's cookie (`memtrack_common::cookie`)
//! holds the function's counter slot, its argument layout (`memtrack_common::Kind`) and
//! the probe site's stack adjustment; the entry program dispatches on the layout. One
//! program each means one uprobe_multi link each per probed file and process, and
//! detaching a link costs the same for one site or a hundred (loader.rs). aya-ebpf names
//! each program after its function, and the loader attaches them by
//! `memtrack_common::program_names` (memtrack-core's loader.rs tests `ebpf_object_*`
//! tie the two).
//! Argument layouts follow the System V x86-64 ABI.

use aya_ebpf::{
    helpers::{bpf_probe_read_user, generated::bpf_get_attach_cookie},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use memtrack_common::{Kind, Pending, PidStats, cookie, pending_flags};

use crate::{
    account::{self, Nesting},
    atomics,
    thread::{self, Thread, current},
    unwind, verified_once,
};

/// What an entry probe knows about its call.
struct Call {
    pid_tgid: u64,
    func: u32,
    kind: Kind,
    entry_sp: u64,
    /// The probed instruction's `rip`, `rsp` and `rbp` (where unwinding starts).
    ip: u64,
    sp: u64,
    bp: u64,
}

/// The call an entry probe sits on, from its cookie; `None` when the cookie's kind bits
/// name no [`Kind`] (the loader and this object disagree).
#[inline(always)]
fn call(ctx: &ProbeContext) -> Option<Call> {
    // SAFETY: the context is the probe's own; the helper takes it as is.
    let c = unsafe { bpf_get_attach_cookie(ctx.regs.cast()) };
    // SAFETY: reading the saved registers of the probe context.
    let (rsp, rip, rbp) = unsafe { ((*ctx.regs).rsp, (*ctx.regs).rip, (*ctx.regs).rbp) };
    Some(Call {
        ip: rip,
        sp: rsp,
        bp: rbp,
        pid_tgid: current(),
        func: cookie::func(c),
        kind: cookie::kind(c)?,
        entry_sp: account::entry_sp(rsp, c),
    })
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

/// The thread and the counters to charge a call to, if it is the outermost probed call
/// on its thread and its process is counted (None: not tracked, nested, with its depth
/// noted when `count_depth`, or not counted).
#[inline(always)]
fn counted_outermost(c: &Call, count_depth: bool) -> Option<(Thread, *mut PidStats)> {
    let t = Thread::current(c.pid_tgid, true)?;
    if matches!(
        account::nesting(&t, c.entry_sp, count_depth),
        Nesting::Nested
    ) {
        return None;
    }
    let stats = t.counted_stats()?;
    Some((t, stats))
}

/// Entry of every allocating function: counts the call and records it as the thread's
/// pending call, with its requested `size`, the `ptr` argument (the old block of the
/// realloc family, posix_memalign's `memptr`) and its `pending_flags`. The realloc
/// family's old block leaves the live map now (see
/// `memtrack_common::Pending::old_size`) and comes back if the call fails.
#[inline(always)]
fn alloc_entry(c: &Call, t: &Thread, stats: *mut PidStats, size: u64, ptr: u64, flags: u64) {
    account::count_call(stats, c.func);
    let pending = Pending {
        depth: 1,
        func: c.func,
        kind: c.kind.id(),
        stack: unwind::initial_stack(),
        size,
        ptr,
        old_size: 0,
        old_stack: 0,
        _pad: 0,
        flags,
        entry_sp: c.entry_sp,
    };
    account::begin_call(t, &pending);
    if matches!(c.kind, Kind::Realloc | Kind::Reallocarray)
        && ptr != 0
        && flags & pending_flags::OVERFLOW == 0
    {
        verified_once::take_old_block(t, ptr);
    }
}

/// Walks the stack of a call the entry program just recorded as pending (stacks on:
/// the entry's stack id stays `LOST_STACK` unless the walk ends and writes it). Last in
/// the program: the walk may tail-call, after which the entry program does not resume.
#[inline(always)]
fn walk_stack(ctx: &ProbeContext, c: &Call) -> u32 {
    unwind::start(ctx, c.pid_tgid, c.entry_sp, c.ip, c.sp, c.bp);
    0
}

/// Return of every allocating function.
#[inline(always)]
fn alloc_return(ret: u64) -> u32 {
    let Some(t) = Thread::current(current(), false) else {
        return 0;
    };
    let Some(p) = account::end_call(&t) else {
        return 0;
    };
    // The call began counted; it is accounted even if counting stopped meanwhile, as
    // its entry was.
    let Some(stats) = t.stats() else {
        return 0;
    };
    match Kind::from_id(p.kind) {
        Some(Kind::Realloc | Kind::Reallocarray) => {
            verified_once::realloc_return(&t, stats, &p, ret)
        }
        Some(Kind::PosixMemalign) => {
            // posix_memalign returns an int error number; the block is in *memptr.
            if ret as u32 != 0 {
                account::count_failure(stats, p.func);
            } else {
                // SAFETY: reading user memory through the helper, which checks it.
                match unsafe { bpf_probe_read_user(p.ptr as *const u64) } {
                    Ok(addr) if addr != 0 => {
                        verified_once::record_alloc(&t, stats, p.func, p.stack, addr, p.size)
                    }
                    Ok(_) => {}
                    // SAFETY: stats points into a live map value.
                    Err(_) => atomics::add(unsafe { &raw mut (*stats).lost_events }, 1),
                }
            }
        }
        Some(Kind::SizeFirst | Kind::SizeSecond | Kind::Calloc) => {
            if ret == 0 || p.flags & pending_flags::OVERFLOW != 0 {
                account::count_failure(stats, p.func);
            } else {
                verified_once::record_alloc(&t, stats, p.func, p.stack, ret, p.size);
            }
        }
        // The entry program writes only the kinds above (free-like functions keep no
        // pending entry); anything else is a corrupt entry whose call cannot be
        // accounted.
        // SAFETY: stats points into a live map value.
        Some(Kind::Free) | None => atomics::add(unsafe { &raw mut (*stats).lost_events }, 1),
    }
    0
}

/// The entry of every probed function; the cookie's layout says how to read it:
/// - `f(size, ...)`: malloc, valloc, pvalloc, operator new (all variants), mallocx,
///   mi_malloc and relatives;
/// - `f(alignment, size)`: aligned_alloc, memalign, mi_aligned_alloc;
/// - `f(nmemb, size, ...)`: calloc, mi_calloc;
/// - `f(ptr, size, ...)`: realloc, rallocx, mi_realloc;
/// - `f(ptr, nmemb, size)`: reallocarray, mi_reallocn;
/// - `int f(void **memptr, alignment, size)`: posix_memalign, mi_posix_memalign;
/// - `f(ptr, ...)`: free and the other releasing functions (see [`free_entry`]).
#[uprobe]
pub fn alloc_entry_prog(ctx: ProbeContext) -> u32 {
    let Some(c) = call(&ctx) else {
        return unreadable_call();
    };
    // Free-like functions have no return probe: they add no nesting level.
    let Some((t, stats)) = counted_outermost(&c, c.kind != Kind::Free) else {
        return 0;
    };
    let (size, ptr, flags) = match c.kind {
        Kind::Free => return free_entry(&ctx, &c, &t, stats),
        Kind::SizeFirst => (arg(&ctx, 0), 0, 0),
        Kind::SizeSecond => (arg(&ctx, 1), 0, 0),
        Kind::Calloc => {
            let (size, overflow) = array_size(arg(&ctx, 0), arg(&ctx, 1));
            (size, 0, overflow_flag(overflow))
        }
        Kind::Realloc => (arg(&ctx, 1), arg(&ctx, 0), 0),
        Kind::Reallocarray => {
            let (size, overflow) = array_size(arg(&ctx, 1), arg(&ctx, 2));
            (size, arg(&ctx, 0), overflow_flag(overflow))
        }
        Kind::PosixMemalign => (arg(&ctx, 2), arg(&ctx, 0), 0),
    };
    alloc_entry(&c, &t, stats, size, ptr, flags);
    walk_stack(&ctx, &c)
}

/// The `pending_flags` of a call whose nmemb*size did (true) or did not overflow.
#[inline(always)]
fn overflow_flag(overflow: bool) -> u64 {
    if overflow { pending_flags::OVERFLOW } else { 0 }
}

/// A probe whose cookie names no argument layout: the call cannot be read, so it is a
/// lost event of its process when that process is counted (never silently dropped).
#[inline(always)]
fn unreadable_call() -> u32 {
    if let Some(stats) = thread::counted_process_stats(current()) {
        // SAFETY: stats points into a live map value.
        atomics::add(unsafe { &raw mut (*stats).lost_events }, 1);
    }
    0
}

/// The one return program every allocating function shares: the pending entry says
/// which function and kind it was.
#[uretprobe]
pub fn alloc_return_prog(ctx: RetProbeContext) -> u32 {
    alloc_return(ctx.ret::<u64>())
}

/// `f(ptr, ...)`: free, operator delete (all variants), dallocx, sdallocx, mi_free. No
/// return probe: a release inside another probed call (glibc's realloc(p, 0) calling
/// free) belongs to that call and is skipped; one forwarded by another free-like
/// function is recognised by `account::release`.
#[inline(always)]
fn free_entry(ctx: &ProbeContext, c: &Call, t: &Thread, stats: *mut PidStats) -> u32 {
    let ptr = arg(ctx, 0);
    if ptr == 0 {
        // Counted at every layer: a NULL release leaves no trace to recognise a
        // forward by (`operator delete(nullptr)` reaching `free(NULL)` counts 2 calls).
        account::count_call(stats, c.func);
    } else {
        verified_once::release(t, stats, c.func, ptr, c.entry_sp);
    }
    0
}
