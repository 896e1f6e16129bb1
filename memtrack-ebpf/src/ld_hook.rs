//! The loader hook: a uprobe on the dynamic loader's `_dl_debug_state`, attached per
//! followed process, that makes the calling thread stop for memtrack's ptrace follower
//! (memtrack-core's ld_hook.rs) right after the loader mapped new objects and before
//! their initializers run. See `memtrack_common::ld_hook` for the protocol.
//!
//! The thread is stopped by a signal sent to itself (`bpf_send_signal_thread`, a plain
//! helper, no kfunc), one whose default action is to ignore it, picked among those the
//! thread does not block: the kernel delivers it as the thread returns to user space
//! from the probe, and a traced thread stops at the delivery. Nothing is written into
//! the process, no register is changed: after the follower suppresses the signal the
//! thread just goes on. If memtrack dies, its links close and the kernel removes the
//! probe; a signal pending then is ignored by default.

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel, bpf_probe_read_user,
        generated::{bpf_get_attach_cookie, bpf_send_signal_thread},
    },
    macros::uprobe,
    programs::ProbeContext,
};
use memtrack_common::ld_hook;

use crate::{
    atomics,
    maps::{LD_HOOK_MISSES, LD_HOOK_STOPS},
};

/// `BPF_NOEXIST`: insert only if the key is absent.
const NOEXIST: u64 = 1;

/// Reads a field of the current task at byte offset `offset`.
#[inline(always)]
fn task_field<T>(task: u64, offset: u32) -> Option<T> {
    let field = (task + offset as u64) as *const T;
    // SAFETY: the helper reads kernel memory safely; a fault yields Err.
    unsafe { bpf_probe_read_kernel(field) }.ok()
}

/// The hook fired without stopping the thread: one lost event of its process.
#[inline(always)]
fn missed(tgid: u32) -> u32 {
    match LD_HOOK_MISSES.get_ptr_mut(&tgid) {
        Some(count) => atomics::add(count, 1),
        None => {
            // User space inserts the entry when it hooks the process; if it is gone,
            // start it (and count into it if another thread just did).
            if LD_HOOK_MISSES.insert(&tgid, &1, NOEXIST).is_err()
                && let Some(count) = LD_HOOK_MISSES.get_ptr_mut(&tgid)
            {
                atomics::add(count, 1);
            }
        }
    }
    0
}

/// Whether this call of `_dl_debug_state` (at `ip`) announces objects about to be
/// mapped (`RT_ADD`): read from the loader's `_r_debug`, `delta` bytes from `ip`, and
/// believed only when its `r_brk` is `ip` (a wrong distance reads anything else).
#[inline(always)]
fn about_to_map(ip: u64, delta: i32) -> bool {
    if delta == 0 {
        return false;
    }
    let r_debug = ip.wrapping_add(delta as i64 as u64) as *const [u64; 4];
    // SAFETY: the helper reads user memory safely; a fault yields Err.
    match unsafe { bpf_probe_read_user(r_debug) } {
        Ok(words) => {
            words[ld_hook::R_DEBUG_BRK] == ip
                && words[ld_hook::R_DEBUG_STATE] as u32 == ld_hook::RT_ADD
        }
        Err(_) => false,
    }
}

/// `_dl_debug_state()`: stop this thread for the follower, unless the loader is only
/// about to map objects (it calls again once they are mapped).
#[uprobe]
pub fn ld_hook_prog(ctx: ProbeContext) -> u32 {
    // SAFETY: the context is the probe's own; the helper takes it as is.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.regs.cast()) };
    // SAFETY: the context's registers, read as the probe saw them (`rip`: the probed
    // instruction, i.e. `_dl_debug_state`).
    let ip = unsafe { (*ctx.regs).rip };
    if about_to_map(ip, ld_hook::r_debug_delta(cookie)) {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: returns the current task's address, read only through the helper.
    let task = unsafe { bpf_get_current_task() };
    let Some(traced) = task_field::<u32>(task, ld_hook::ptrace_offset(cookie)) else {
        return missed(tgid);
    };
    if traced == 0 {
        // No tracer would stop the thread (the follower is gone, or never seized this
        // thread): the signal would only reach the program.
        return missed(tgid);
    }
    let Some(blocked) = task_field::<u64>(task, ld_hook::blocked_offset(cookie)) else {
        return missed(tgid);
    };
    let Some(signal) = ld_hook::pick_signal(blocked) else {
        // Every candidate is blocked: it would stay pending past the initializers.
        return missed(tgid);
    };
    if LD_HOOK_STOPS.insert(&tid, &signal, 0).is_err() {
        return missed(tgid);
    }
    // SAFETY: a plain helper call; it signals the current thread only.
    if unsafe { bpf_send_signal_thread(signal) } != 0 {
        let _ = LD_HOOK_STOPS.remove(&tid);
        return missed(tgid);
    }
    0
}
