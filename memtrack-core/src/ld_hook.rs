//! Stops a followed process each time its dynamic loader (ld.so) has mapped new
//! objects, so the follower can probe them before their code runs; and lets it go on.
//!
//! glibc's and musl's loaders call the empty function `_dl_debug_state` for debuggers
//! after mapping objects and before running their initializers, at startup and in every
//! `dlopen` (memtrack-targets finds its address). Today the stop is a software
//! breakpoint: an `int3` written over the function's first byte through
//! `/proc/PID/mem`, the byte it replaced kept to be written back when the follower
//! stops, and the function's `ret` emulated for the stopped thread (so the breakpoint
//! never has to be stepped over). The int3 lives in the tracee's memory: if memtrack
//! is killed before it writes the byte back, the process dies of SIGTRAP at its next
//! `dlopen`.
//!
//! This module is the only code that knows how the stop is made. The follower asks it
//! to [`install`](LdHooks::install) a hook after an exec or an attach, tells it of forks
//! ([`inherit`](LdHooks::inherit)) and of images that went away
//! ([`forget`](LdHooks::forget)), hands it every signal stop of a traced thread
//! ([`stopped_at_hook`](LdHooks::stopped_at_hook)), lets a thread that stopped there
//! [`resume`](LdHooks::resume) once probed, and takes every hook out when it stops
//! ([`remove_all`](LdHooks::remove_all)). A uprobe on `_dl_debug_state` whose eBPF
//! program stops the thread (removed by the kernel with its link, so nothing is left to
//! undo when memtrack dies) replaces the breakpoint behind the same calls.

use std::collections::HashMap;

use libc::user_regs_struct;
use nix::{
    sys::{ptrace, signal::Signal},
    unistd::Pid,
};

/// `int3`, the breakpoint instruction.
const INT3: u8 = 0xcc;

/// `ret`.
const RET: u8 = 0xc3;

/// `endbr64; ret`: the function's code when built with CET.
const ENDBR64_RET: [u8; 5] = [0xf3, 0x0f, 0x1e, 0xfa, RET];

/// The breakpoint on the loader's `_dl_debug_state` in one process.
#[derive(Clone, Copy)]
struct Breakpoint {
    /// Runtime address of the function.
    address: u64,
    /// The byte the breakpoint replaced (written back by [`LdHooks::remove_all`]).
    original: u8,
}

/// A thread stopped at its loader's hook, held until [`LdHooks::resume`].
pub(crate) struct HookStop {
    tid: u32,
    /// The thread's registers once `_dl_debug_state` has returned.
    after_return: user_regs_struct,
}

/// The loader hooks of every followed process, by pid.
#[derive(Default)]
pub(crate) struct LdHooks {
    hooks: HashMap<u32, Breakpoint>,
}

impl LdHooks {
    /// Hooks the dynamic loader of `pid` (stopped, or running under the follower).
    /// False when there is none memtrack can hook: no loader mapped (a static
    /// executable, or the loader has not been mapped yet), no `_dl_debug_state`, or a
    /// function body other than the bare `ret` (or `endbr64; ret`) whose return can be
    /// emulated.
    pub(crate) fn install(&mut self, pid: u32) -> bool {
        let Ok(Some(address)) = memtrack_targets::debug_state_address(pid) else {
            return false;
        };
        let mut code = [0u8; ENDBR64_RET.len()];
        if read_mem(pid, address, &mut code).is_err() {
            return false;
        }
        let emulatable = code[0] == RET || code == ENDBR64_RET;
        if !emulatable || write_mem(pid, address, &[INT3]).is_err() {
            return false;
        }
        self.hooks.insert(
            pid,
            Breakpoint {
                address,
                original: code[0],
            },
        );
        true
    }

    /// `child` was just forked from `parent`: it has a copy of its parent's memory, and
    /// with it the parent's hook.
    pub(crate) fn inherit(&mut self, child: u32, parent: u32) {
        if let Some(hook) = self.hooks.get(&parent).copied() {
            self.hooks.insert(child, hook);
        }
    }

    /// The image of `pid` went away (it exec'd or exited), and its hook with it.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.hooks.remove(&pid);
    }

    /// Whether thread `tid` of process `tgid`, stopped with `signal`, stopped at its
    /// loader's hook: then it stays stopped until [`resume`](Self::resume). None: the
    /// stop is not the hook's (the signal is the program's, to be delivered).
    pub(crate) fn stopped_at_hook(&self, tid: u32, tgid: u32, signal: Signal) -> Option<HookStop> {
        if signal != Signal::SIGTRAP {
            return None;
        }
        let hook = self.hooks.get(&tgid)?;
        let mut regs = ptrace::getregs(Pid::from_raw(tid as i32)).ok()?;
        if regs.rip != hook.address + 1 {
            return None;
        }
        // Emulate `ret`: the function does nothing else.
        let mut return_address = [0u8; 8];
        read_mem(tid, regs.rsp, &mut return_address).ok()?;
        regs.rip = u64::from_ne_bytes(return_address);
        regs.rsp += 8;
        Some(HookStop {
            tid,
            after_return: regs,
        })
    }

    /// Lets a thread stopped at the hook go on, past `_dl_debug_state`.
    pub(crate) fn resume(&self, stop: HookStop) {
        let p = Pid::from_raw(stop.tid as i32);
        // Errors: the thread was killed meanwhile; its exit is reported next.
        let _ = ptrace::setregs(p, stop.after_return);
        let _ = ptrace::cont(p, None);
    }

    /// Takes every hook out again (the follower is stopping: a breakpoint left behind
    /// would kill the process at its next `dlopen`).
    pub(crate) fn remove_all(&mut self) {
        for (pid, hook) in self.hooks.drain() {
            let _ = write_mem(pid, hook.address, &[hook.original]);
        }
    }
}

/// Reads `buf.len()` bytes of process `pid`'s memory at `address` (/proc/PID/mem: works
/// while the tracee runs, since the follower is its tracer).
fn read_mem(pid: u32, address: u64, buf: &mut [u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    mem.read_exact_at(buf, address)
}

/// Writes `bytes` into process `pid`'s memory at `address`; the kernel copies read-only
/// text pages on write for the tracer, as for a debugger's breakpoint.
fn write_mem(pid: u32, address: u64, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))?;
    mem.write_all_at(bytes, address)
}
