//! Tracepoint links: a program of type `BPF_PROG_TYPE_TRACEPOINT` attached to a kernel
//! tracepoint (`kmem:rss_stat`) through a perf event and a BPF link. The kernel keeps a
//! tracepoint's programs with the tracepoint, not with the event: one event (on the
//! first online CPU) makes the program run wherever the tracepoint fires, on every CPU
//! (attaching it to a second CPU's event is refused, EEXIST). Unlike a raw tracepoint,
//! a tracepoint program sees the event's record, with the fields the kernel computes
//! for it (`rss_stat`'s exact counter value).
//!
//! The tracepoint's id is read from tracefs (`events/SYSTEM/EVENT/id`); where tracefs is
//! not mounted at /sys/kernel/tracing (nor below /sys/kernel/debug), it is mounted there,
//! as systemd does at boot.

use std::{
    fs, io,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
    path::{Path, PathBuf},
};

use aya_obj::generated::{PERF_FLAG_FD_CLOEXEC, bpf_attach_type, bpf_cmd, perf_event_attr};

use crate::engine::object::{sys_bpf, zeroed_attr};

/// `PERF_TYPE_TRACEPOINT` (linux/perf_event.h).
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// The tracepoint's link and event. Dropping it detaches the program (the link first:
/// fields drop in order), then closes the event.
pub(crate) struct TracepointLink {
    link: OwnedFd,
    event: OwnedFd,
}

impl crate::engine::detach::Link for TracepointLink {
    fn fds(&self) -> Vec<RawFd> {
        vec![self.link.as_raw_fd(), self.event.as_raw_fd()]
    }
}

/// Where tracefs is mounted, mounting it at /sys/kernel/tracing if it is nowhere.
fn tracefs() -> io::Result<PathBuf> {
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(dir).join("events").is_dir() {
            return Ok(PathBuf::from(dir));
        }
    }
    let dir = PathBuf::from("/sys/kernel/tracing");
    rustix::mount::mount(
        "nodev",
        &dir,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("mounting tracefs at {}: {e}", dir.display()),
        )
    })?;
    Ok(dir)
}

/// The id of tracepoint `system:event` (read from tracefs, mounted if need be).
pub(crate) fn tracepoint_id(system: &str, event: &str) -> io::Result<u64> {
    let path = tracefs()?
        .join("events")
        .join(system)
        .join(event)
        .join("id");
    let text = fs::read_to_string(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} holds {text:?}, not a tracepoint id", path.display()),
        )
    })
}

/// The CPUs online now (`/sys/devices/system/cpu/online`, e.g. `0-3,5`).
fn online_cpus() -> io::Result<Vec<u32>> {
    let text = fs::read_to_string("/sys/devices/system/cpu/online")?;
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("online CPUs {text:?}"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(cpus)
}

/// A perf event of tracepoint `id` on `cpu`, disabled if `disabled`.
fn open_event(id: u64, cpu: u32, disabled: bool) -> io::Result<OwnedFd> {
    // SAFETY: perf_event_attr is plain integers; all-zero means "unset".
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = PERF_TYPE_TRACEPOINT;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.config = id;
    attr.__bindgen_anon_1.sample_period = 1;
    attr.set_disabled(u64::from(disabled));
    // SAFETY: attr is valid and outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const perf_event_attr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Keeps tracepoint `id` registered with perf for the rest of this process (see
/// [`attach`]): a disabled event without a program, opened once.
fn keep_registered(id: u64, cpu: u32) {
    static KEEPERS: std::sync::Mutex<Vec<(u64, OwnedFd)>> = std::sync::Mutex::new(Vec::new());
    let mut keepers = KEEPERS.lock().unwrap_or_else(|e| e.into_inner());
    if keepers.iter().any(|(kept, _)| *kept == id) {
        return;
    }
    // Without it, detaching costs a wait; nothing else depends on it.
    if let Ok(fd) = open_event(id, cpu, true) {
        keepers.push((id, fd));
    }
}

/// Attaches `program` to tracepoint `system:event` (wherever it fires: see the module
/// comment), through an event on the first online CPU.
///
/// When the last perf event of a tracepoint closes, the kernel unregisters perf's
/// handler from it and waits for every CPU to be past it (`perf_trace_event_unreg`). So
/// that each tracker's close does not wait for that too, a disabled event without a
/// program keeps the tracepoint registered for the rest of the process, opened with the
/// first link: perf's handler then returns at once where no event is enabled, and that
/// wait happens once, at the process's exit. (Measured here: closing an in-process
/// tracker keeping RSS took 84-96 ms at best with it, 104 ms without, against 47 ms
/// for one with `rss(false)`; the rest is the link's own detaching.)
pub(crate) fn attach(program: BorrowedFd<'_>, id: u64) -> io::Result<TracepointLink> {
    let cpu = online_cpus()?.into_iter().next().unwrap_or(0);
    keep_registered(id, cpu);
    let event = open_event(id, cpu, false)?;
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the link-create member of the union.
    let link = unsafe { &mut attr.link_create };
    link.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
    link.__bindgen_anon_2.target_fd = event.as_raw_fd() as u32;
    link.attach_type = bpf_attach_type::BPF_PERF_EVENT as u32;
    let link = sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?;
    Ok(TracepointLink { link, event })
}

#[cfg(test)]
mod tests {
    #[test]
    fn online_cpus_are_read() {
        let cpus = super::online_cpus().unwrap();
        assert!(!cpus.is_empty());
        assert_eq!(cpus[0], 0);
    }
}
