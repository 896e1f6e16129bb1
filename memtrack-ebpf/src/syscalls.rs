//! mmap/munmap/brk, counted from the syscall tracepoints as their own counters (never
//! mixed into the heap numbers). Field offsets are those of
//! /sys/kernel/tracing/events/syscalls/sys_{enter,exit}_*/format on x86_64.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    account::{self, current, tgid_of},
    atomics,
    maps::SYSCALL_PENDING,
};

/// Offset of `len` in sys_enter_mmap and sys_enter_munmap (after `addr` at 16).
const ENTER_LEN: usize = 24;
/// Offset of `ret` in every sys_exit_* record.
const EXIT_RET: usize = 16;

#[inline(always)]
fn remember_len(ctx: &TracePointContext) -> u32 {
    let id = current();
    if !account::is_counted(id) {
        return 0;
    }
    // SAFETY: the offset is inside the record (see the format files).
    let len: u64 = unsafe { ctx.read_at(ENTER_LEN) }.unwrap_or(0);
    let _ = SYSCALL_PENDING.insert(&id, &len, 0);
    0
}

/// Takes the remembered length and the syscall's return value.
#[inline(always)]
fn finish(ctx: &TracePointContext) -> Option<(u32, u64, i64)> {
    let id = current();
    // SAFETY: plain u64 value.
    let len = unsafe { *SYSCALL_PENDING.get(&id)? };
    let _ = SYSCALL_PENDING.remove(&id);
    // SAFETY: the offset is inside the record.
    let ret: i64 = unsafe { ctx.read_at(EXIT_RET) }.ok()?;
    Some((tgid_of(id), len, ret))
}

#[tracepoint]
pub fn mmap_enter(ctx: TracePointContext) -> u32 {
    remember_len(&ctx)
}

#[tracepoint]
pub fn mmap_exit(ctx: TracePointContext) -> u32 {
    if let Some((tgid, len, ret)) = finish(&ctx)
        && ret >= 0
        && let Some(stats) = account::stats_of(tgid)
    {
        // SAFETY: stats points into a live map value.
        unsafe {
            atomics::add(&raw mut (*stats).mmap_calls, 1);
            atomics::add(&raw mut (*stats).mmap_bytes, len);
        }
    }
    0
}

#[tracepoint]
pub fn munmap_enter(ctx: TracePointContext) -> u32 {
    remember_len(&ctx)
}

#[tracepoint]
pub fn munmap_exit(ctx: TracePointContext) -> u32 {
    if let Some((tgid, len, ret)) = finish(&ctx)
        && ret == 0
        && let Some(stats) = account::stats_of(tgid)
    {
        // SAFETY: stats points into a live map value.
        unsafe {
            atomics::add(&raw mut (*stats).munmap_calls, 1);
            atomics::add(&raw mut (*stats).munmap_bytes, len);
        }
    }
    0
}

/// brk returns the (new or unchanged) program break; the difference to the previous one
/// this process reported is its growth or shrinkage.
#[tracepoint]
pub fn brk_exit(ctx: TracePointContext) -> u32 {
    let id = current();
    if !account::is_counted(id) {
        return 0;
    }
    let Some(stats) = account::stats_of(tgid_of(id)) else {
        return 0;
    };
    // SAFETY: the offset is inside the record.
    let Ok(brk) = (unsafe { ctx.read_at::<u64>(EXIT_RET) }) else {
        return 0;
    };
    // SAFETY: stats points into a live map value.
    unsafe {
        atomics::add(&raw mut (*stats).brk_calls, 1);
        let last = atomics::load(&raw const (*stats).last_brk);
        if last != 0 {
            if brk > last {
                atomics::add(&raw mut (*stats).brk_grown_bytes, brk - last);
            } else if brk < last {
                atomics::add(&raw mut (*stats).brk_shrunk_bytes, last - brk);
            }
        }
        core::ptr::write_volatile(&raw mut (*stats).last_brk, brk);
    }
    0
}
