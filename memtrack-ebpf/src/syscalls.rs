//! mmap/munmap/brk, counted as their own counters (never mixed into the heap numbers),
//! by one raw tracepoint program on `sys_exit`, which sees the saved user registers
//! (the syscall number and arguments) and the result, so nothing is kept between a
//! syscall's entry and exit.
//!
//! Why a raw tracepoint: detaching the per-syscall tracepoints' perf events waits for
//! RCU grace periods under the kernel's global `event_mutex`, about 70 ms each (5 links:
//! 0.36 s per tracker, measured on Linux 6.18); a raw tracepoint link detaches in under
//! 20 ms. fexit on `__x64_sys_mmap` would run only for these syscalls, but tracing
//! programs are refused (EPERM) on the machines memtrack is built on. The cost: this
//! program runs at every syscall exit on the machine while a tracker exists, and returns
//! after one register read and compare for any other syscall. (Any syscall tracepoint,
//! including the per-syscall ones, already sends every syscall through the kernel's
//! slow exit path.) Register names are x86_64's, as in uprobes.rs.

use aya_ebpf::{
    bindings::pt_regs, helpers::bpf_probe_read_kernel, macros::raw_tracepoint,
    programs::RawTracePointContext,
};

use crate::{
    atomics,
    thread::{self, current},
    timeline,
};

/// x86_64 syscall numbers.
const SYS_MMAP: u64 = 9;
const SYS_MUNMAP: u64 = 11;
const SYS_BRK: u64 = 12;

/// Reads one saved register.
#[inline(always)]
fn reg(field: *const u64) -> u64 {
    // SAFETY: the helper reads kernel memory safely; a fault yields Err.
    unsafe { bpf_probe_read_kernel(field) }.unwrap_or(u64::MAX)
}

/// `sys_exit(struct pt_regs *regs, long ret)`. The program's name and its tracepoint are
/// `memtrack_common::program_names::{SYS_EXIT, SYS_EXIT_TRACEPOINT}` (the macro takes
/// only a literal; memtrack-core's loader.rs tests `ebpf_object_*` tie them).
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> i32 {
    let regs: *const pt_regs = ctx.arg(0);
    // SAFETY: only the field's address is taken; `reg` reads it with the helper.
    let nr = reg(unsafe { &raw const (*regs).orig_rax });
    if nr != SYS_MMAP && nr != SYS_MUNMAP && nr != SYS_BRK {
        return 0;
    }
    let pid_tgid = current();
    let Some((slot, stats)) = thread::counted_process(pid_tgid) else {
        return 0;
    };
    let ret: i64 = ctx.arg(1);
    match nr {
        // A failed mmap returns -errno (page-aligned addresses are never that high).
        SYS_MMAP if !(-4095..0).contains(&ret) => {
            // SAFETY: as above; rsi holds the length.
            let len = reg(unsafe { &raw const (*regs).rsi });
            // SAFETY: stats points into a live map value.
            unsafe {
                atomics::add(&raw mut (*stats).mmap_calls, 1);
                atomics::add(&raw mut (*stats).mmap_bytes, len);
            }
        }
        SYS_MUNMAP if ret == 0 => {
            // SAFETY: as above.
            let len = reg(unsafe { &raw const (*regs).rsi });
            // SAFETY: stats points into a live map value.
            unsafe {
                atomics::add(&raw mut (*stats).munmap_calls, 1);
                atomics::add(&raw mut (*stats).munmap_bytes, len);
            }
        }
        SYS_BRK => brk(stats, ret as u64),
        _ => return 0,
    }
    // SAFETY: stats points into a live map value.
    let mapped = unsafe {
        atomics::load(&raw const (*stats).mmap_bytes)
            .wrapping_sub(atomics::load(&raw const (*stats).munmap_bytes))
            .wrapping_add(atomics::load(&raw const (*stats).brk_grown_bytes))
            .wrapping_sub(atomics::load(&raw const (*stats).brk_shrunk_bytes))
    };
    timeline::mapped(slot, thread::tgid_of(pid_tgid), stats, mapped);
    0
}

/// brk returns the (new or unchanged) program break; the difference to the previous one
/// this process reported is its growth or shrinkage.
#[inline(always)]
fn brk(stats: *mut memtrack_common::PidStats, brk: u64) {
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
}
