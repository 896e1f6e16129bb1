//! Perf-event uprobe links, for kernels without uprobe_multi (before Linux 6.6) and
//! `UprobeLinks::PerfEvent`: one perf event of the kernel's `uprobe` PMU per probe site,
//! scoped to one process, with the program attached through a BPF link that carries the
//! site's cookie (Linux 5.15+). This is what aya 0.14's `UProbe::attach` does for a
//! program it loaded; the programs here are loaded by bpf_object.rs instead. Detaching
//! one waits for the kernel's RCU grace periods under a global mutex, about 110 ms per
//! site here (uprobe_multi.rs).

use std::{
    ffi::CString,
    fs, io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
    sync::OnceLock,
};

use aya_obj::generated::{PERF_FLAG_FD_CLOEXEC, bpf_attach_type, bpf_cmd, perf_event_attr};

use crate::engine::object::{sys_bpf, zeroed_attr};

/// One attached site. Dropping it detaches the program (the link, first: fields drop in
/// order), then closes the event.
pub(crate) struct PerfLink {
    link: OwnedFd,
    event: OwnedFd,
}

impl crate::engine::detach::Link for PerfLink {
    fn fds(&self) -> Vec<RawFd> {
        vec![self.link.as_raw_fd(), self.event.as_raw_fd()]
    }
}

/// The `uprobe` PMU's type and the bit of `config` that makes a probe a return probe,
/// read once per process from sysfs.
fn uprobe_pmu() -> io::Result<(u32, u32)> {
    static PMU: OnceLock<Result<(u32, u32), String>> = OnceLock::new();
    PMU.get_or_init(|| {
        let dir = Path::new("/sys/bus/event_source/devices/uprobe");
        let read = |name: &str| {
            fs::read_to_string(dir.join(name))
                .map_err(|e| format!("reading {}: {e}", dir.join(name).display()))
        };
        let ty = read("type")?;
        let ty = ty
            .trim()
            .parse::<u32>()
            .map_err(|e| format!("{}/type holds {ty:?}: {e}", dir.display()))?;
        let format = read("format/retprobe")?;
        let bit = format
            .trim()
            .strip_prefix("config:")
            .and_then(|b| b.parse::<u32>().ok())
            .ok_or_else(|| format!("{}/format/retprobe holds {format:?}", dir.display()))?;
        Ok((ty, bit))
    })
    .clone()
    .map_err(io::Error::other)
}

/// Attaches `program` at file offset `offset` of `path` for process `pid` only (a return
/// probe if `return_probe`), its runs seeing `cookie`.
pub(crate) fn attach(
    program: BorrowedFd<'_>,
    path: &Path,
    offset: u64,
    pid: u32,
    return_probe: bool,
    cookie: u64,
) -> io::Result<PerfLink> {
    let (pmu, retprobe_bit) = uprobe_pmu()?;
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: perf_event_attr is plain integers; all-zero means "unset".
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = pmu;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.config = if return_probe { 1 << retprobe_bit } else { 0 };
    attr.__bindgen_anon_3.config1 = path.as_ptr() as u64;
    attr.__bindgen_anon_4.config2 = offset;
    // SAFETY: attr is valid and outlives the call, as does the path it points to.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const perf_event_attr,
            pid as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor we own.
    let event = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the link-create member of the union.
    let link = unsafe { &mut attr.link_create };
    link.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
    link.__bindgen_anon_2.target_fd = event.as_raw_fd() as u32;
    link.attach_type = bpf_attach_type::BPF_PERF_EVENT as u32;
    link.__bindgen_anon_3.perf_event.bpf_cookie = cookie;
    let link = sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?;
    Ok(PerfLink { link, event })
}
