//! Stops a followed thread each time its dynamic loader (ld.so) has mapped new objects,
//! so the follower can probe them before their code runs; and knows that stop when the
//! follower sees it.
//!
//! glibc's and musl's loaders call the empty function `_dl_debug_state` for debuggers
//! after mapping objects and before running their initializers, at startup and in every
//! `dlopen` (memtrack-targets finds it). The hook is a uprobe there, scoped to the
//! process like the allocator probes (its link is the process's, closed with them),
//! whose eBPF program (memtrack-ebpf's ld_hook.rs) records a signal under the thread's
//! id and sends the thread that signal; the traced thread stops at its delivery, and the
//! follower, finding the record, probes what was mapped and resumes the thread with the
//! signal suppressed. A signal without a record (or another signal) is the program's
//! own and is delivered. The protocol: `memtrack_common::ld_hook`.
//!
//! Why this and not a breakpoint written into the process: nothing of it lives in the
//! tracked program. If memtrack is killed, the kernel removes the uprobe when memtrack's
//! descriptors close, and a signal still pending is one whose default action is to
//! ignore it; no instruction is left behind and no return is half emulated (an `int3`
//! left over `_dl_debug_state` killed the program with SIGTRAP at its next `dlopen`).
//! Why a signal: a uprobe program cannot stop a thread itself (it runs in the probe's
//! trap and must not sleep), and SIGSTOP would keep the program stopped for good if
//! memtrack died with it pending. A thread that blocks all three ignorable signals is
//! not stopped: the hit is counted as a lost event of its process (the new objects'
//! allocator calls may then go uncounted until the next stop).
//!
//! The follower asks this module to [`install`](LdHooks::install) the hook after an
//! exec, an attach or a fork, hands it every signal stop of a traced thread
//! ([`stopped_at_hook`](LdHooks::stopped_at_hook)), and tells it of threads that are
//! gone ([`thread_gone`](LdHooks::thread_gone)).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{LazyLock, OnceLock},
};

use memtrack_common::ld_hook;
use nix::{
    sys::{ptrace, signal::Signal},
    unistd::Pid,
};
use parking_lot::Mutex;

use crate::engine::Engine;

/// `si_code` of a signal the kernel sent itself (`SI_KERNEL`): what
/// `bpf_send_signal_thread` leaves in the siginfo.
const SI_KERNEL: i32 = 0x80;

/// The `task_struct` field offsets the hook's program reads (`blocked`, `ptrace`), or
/// why there are none; read from the kernel's BTF once per process.
static OFFSETS: OnceLock<Result<(u32, u32), String>> = OnceLock::new();

/// Each loader's distance from `_dl_debug_state` to `_r_debug` (0: unknown), by file.
static R_DEBUG_DELTAS: LazyLock<Mutex<HashMap<PathBuf, i32>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn offsets() -> &'static Result<(u32, u32), String> {
    OFFSETS.get_or_init(|| memtrack_targets::task_signal_offsets().map_err(|e| e.to_string()))
}

/// The hook's cookie for the loader at `object` on this kernel: the field offsets, and
/// where the loader's `_r_debug` is (so the program lets the loader's "about to map"
/// calls go without a stop; without it every call stops, which is only dearer).
fn cookie(object: &Path) -> Result<u64, String> {
    let (blocked, ptrace) = *offsets().as_ref().map_err(Clone::clone)?;
    let delta = *R_DEBUG_DELTAS
        .lock()
        .entry(object.to_path_buf())
        .or_insert_with(|| {
            memtrack_targets::r_debug_delta(object)
                .ok()
                .flatten()
                .unwrap_or(0)
        });
    ld_hook::cookie(blocked, ptrace, delta).ok_or_else(|| {
        format!("task_struct offsets {blocked} and {ptrace} do not fit the hook's cookie")
    })
}

/// Starts reading the kernel's BTF on another thread (a few milliseconds where the
/// kernel lets it be mapped, up to tens under load where it is copied), so the first
/// [`LdHooks::install`] does not wait for it.
pub(crate) fn prefetch() {
    if OFFSETS.get().is_none() {
        let _ = std::thread::Builder::new()
            .name("memtrack-btf".into())
            .spawn(|| {
                offsets();
            });
    }
}

/// Starts the kernel's wait for the first uprobe registration of a run (see
/// `uprobe_multi::register_early`) the moment the spawned command `pid` is at its exec
/// stop, long before the tracker's programs are verified: a probe that does nothing, on
/// the loader's `_dl_debug_state` (where the hook will go), scoped to `pid`, then closed
/// with the other links. `site`: the command's `_dl_debug_state`. Nothing when the
/// kernel has no uprobe_multi links (perf-event links register otherwise).
pub(crate) fn start_registering(pid: u32, site: &memtrack_targets::DebugStateSite) {
    if crate::engine::uprobe_multi::forced_off() || !crate::engine::uprobe_multi::supported() {
        return;
    }
    if let Ok(link) =
        crate::engine::uprobe_multi::register_early(&site.object, site.file_offset, pid)
    {
        crate::engine::detach::close_later(vec![Box::new(link)]);
    }
}

/// A loader hook attached before the engine was handed to the follower ([`early`]).
pub(crate) struct EarlyHook {
    pid: u32,
    object: std::path::PathBuf,
    file_offset: u64,
    link: crate::engine::detach::Detachable,
}

/// Hooks the loader of `pid`, a command stopped at its exec, with the hook's program
/// alone, while the tracker's other programs are still being verified. The first
/// uprobe registration after an idle moment waits for an RCU grace period
/// (BENCHMARKS.md "Start-up overlapped"); made now, that wait overlaps the verification, and the command's
/// other probes, registered right after, find the grace period passed. None when it
/// cannot be done now (no cookie, an attach error): [`LdHooks::install`] then hooks it
/// the usual way, and says why if it cannot either. `site`: the command's
/// `_dl_debug_state`.
pub(crate) fn early(
    pid: u32,
    site: &memtrack_targets::DebugStateSite,
    program: &crate::engine::programs::HookProgram,
) -> Option<EarlyHook> {
    let cookie = cookie(&site.object).ok()?;
    let link = program
        .attach(&site.object, site.file_offset, cookie, pid)
        .ok()?;
    Some(EarlyHook {
        pid,
        object: site.object.clone(),
        file_offset: site.file_offset,
        link,
    })
}

impl EarlyHook {
    /// Hands the hook to the engine, which closes it with the process's other links.
    pub(crate) fn adopt(self, engine: &mut Engine) {
        engine.adopt_ld_hook(self.pid, &self.object, self.file_offset, self.link);
    }
}

/// A thread stopped for the loader hook.
pub(crate) struct HookStop {
    /// The signal to resume it with: None when the stop's signal was the hook's own
    /// (suppressed), the signal when the program got one of the same number from
    /// elsewhere that absorbed the hook's.
    pub(crate) deliver: Option<Signal>,
}

/// The follower's side of the loader hook.
#[derive(Default)]
pub(crate) struct LdHooks {
    /// Whether the "cannot hook" reason was said already (once per follower).
    warned: bool,
}

impl LdHooks {
    /// Hooks the dynamic loader of `pid` (stopped, or running under the follower).
    /// False when there is none memtrack can hook: no loader mapped (a static
    /// executable, or the loader has not been mapped yet), no `_dl_debug_state`, the
    /// kernel's BTF lacks the fields the hook reads, or the probe could not be attached.
    /// True as well when the process's loader is hooked already (an exec into a program
    /// with the same loader).
    pub(crate) fn install(&mut self, engine: &mut Engine, pid: u32) -> bool {
        let Ok(Some(site)) = memtrack_targets::debug_state_site(pid) else {
            return false;
        };
        let cookie = match cookie(&site.object) {
            Ok(cookie) => cookie,
            Err(reason) => {
                self.warn_once(format_args!(
                    "memtrack: cannot hook the dynamic loader ({reason}): libraries loaded \
                     with dlopen after an allocator may not be counted"
                ));
                return false;
            }
        };
        match engine.attach_ld_hook(pid, &site.object, site.file_offset, cookie) {
            Ok(_) => true,
            Err(e) => {
                self.warn_once(format_args!(
                    "memtrack: cannot hook the dynamic loader of process {pid}: {e}"
                ));
                false
            }
        }
    }

    /// Hooks the loader site (`object`, `file_offset`) in `pid`, as found in another
    /// process with the same mappings (its parent, at fork); false if it could not.
    pub(crate) fn install_at(
        &mut self,
        engine: &mut Engine,
        pid: u32,
        object: &Path,
        file_offset: u64,
    ) -> bool {
        let Ok(cookie) = cookie(object) else {
            return false;
        };
        engine
            .attach_ld_hook(pid, object, file_offset, cookie)
            .is_ok()
    }

    fn warn_once(&mut self, message: std::fmt::Arguments<'_>) {
        if !self.warned {
            self.warned = true;
            eprintln!("{message}");
        }
    }

    /// Whether thread `tid`, in a signal-delivery-stop with `signal`, stopped for the
    /// loader hook: the hook recorded that signal for it. Then the record is cleared,
    /// and the caller probes the process and resumes the thread with
    /// [`HookStop::deliver`]. None: the signal is the program's, to be delivered.
    pub(crate) fn stopped_at_hook(
        &self,
        engine: &mut Engine,
        tid: u32,
        signal: Signal,
    ) -> Option<HookStop> {
        if engine.ld_hook_stop(tid) != Some(signal as u32) {
            return None;
        }
        engine.clear_ld_hook_stop(tid);
        // The hook's signal carries the kernel's siginfo. One of the same number that
        // was pending already (a standard signal is queued once) carries its sender's:
        // the hook's merged into it, and it is delivered.
        let from_kernel = ptrace::getsiginfo(Pid::from_raw(tid as i32))
            .is_ok_and(|info| info.si_code == SI_KERNEL);
        Some(HookStop {
            deliver: (!from_kernel).then_some(signal),
        })
    }

    /// Thread `tid` exited or exec'd: a record the hook left for it is stale.
    pub(crate) fn thread_gone(&self, engine: &mut Engine, tid: u32) {
        engine.clear_ld_hook_stop(tid);
    }
}
