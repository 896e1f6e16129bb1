//! uprobe_multi links (Linux 6.6+): one BPF link carries every probe site of one
//! program in one file for one process, and detaching it waits for the kernel's RCU
//! grace periods once for all of them, outside any global lock. A perf-event uprobe link
//! (perf_uprobe.rs) waits once per site, serialised under the kernel's `event_mutex`
//! (BENCHMARKS.md compares closing both kinds).
//!
//! aya supports these links from 0.15, which needs rustc 1.98; this workspace is pinned
//! to the toolchain the machines have (1.95). The programs are loaded with the
//! `BPF_TRACE_UPROBE_MULTI` expected attach type (the kernel checks it when the link is
//! made) by bpf_object.rs; this module makes the links.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
    sync::OnceLock,
};

use aya_obj::generated::{
    BPF_ALU64, BPF_EXIT, BPF_F_UPROBE_MULTI_RETURN, BPF_JMP, BPF_K, BPF_MOV, bpf_attach_type,
    bpf_cmd, bpf_insn, bpf_prog_type,
};

use crate::engine::object::{ProgramLoad, load_program, sys_bpf, zeroed_attr};

/// One link: `program` on every `offsets[i]` (file offsets in `path`, each with
/// `cookies[i]`), for process `pid` only; a return probe if `return_probe`.
pub(crate) fn attach(
    program: BorrowedFd<'_>,
    path: &Path,
    offsets: &[u64],
    cookies: &[u64],
    pid: u32,
    return_probe: bool,
) -> io::Result<OwnedFd> {
    assert_eq!(offsets.len(), cookies.len(), "one cookie per offset");
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the link-create member of the union.
    let link = unsafe { &mut attr.link_create };
    link.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
    link.attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    // SAFETY: as above, the uprobe_multi member of the inner union.
    let multi = unsafe { &mut link.__bindgen_anon_3.uprobe_multi };
    multi.path = path.as_ptr() as u64;
    multi.offsets = offsets.as_ptr() as u64;
    multi.cookies = cookies.as_ptr() as u64;
    multi.cnt = offsets.len() as u32;
    multi.flags = if return_probe {
        BPF_F_UPROBE_MULTI_RETURN
    } else {
        0
    };
    multi.pid = pid;
    sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)
}

/// Whether `MEMTRACK_UPROBE_LINKS=perf` asks for perf-event links even where the kernel
/// has uprobe_multi (to test that path, or to get around a kernel problem). Read when
/// each tracker loads.
pub(crate) fn forced_off() -> bool {
    std::env::var_os("MEMTRACK_UPROBE_LINKS").is_some_and(|v| v == "perf")
}

/// Whether this kernel makes uprobe_multi links, decided once per process by asking it
/// for one on a path that cannot be probed (a directory): a kernel that knows the link
/// type rejects the path (EBADF), one that does not rejects the type (EINVAL), one
/// without uprobes says EOPNOTSUPP. The question is asked with a program of its own
/// (`return 0`), not one of the object's: loading the entry program gives the
/// `UNWIND_PROGS` array its owner's expected attach type for good, so the object's
/// programs are loaded only once the link kind is known (the unwind program must match).
pub(crate) fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let Ok(program) = return_zero() else {
            return false;
        };
        match attach(program.as_fd(), Path::new("/"), &[0], &[0], 0, false) {
            Ok(_) => true,
            Err(e) => e.raw_os_error() == Some(libc::EBADF),
        }
    })
}

/// A uprobe_multi program of its own that does nothing (`r0 = 0; exit`).
fn return_zero() -> io::Result<OwnedFd> {
    let mut insns: [bpf_insn; 2] = [
        // SAFETY: bpf_insn is plain integers (with bitfields); zero is register 0.
        unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        unsafe { std::mem::zeroed() },
    ];
    insns[0].code = (BPF_ALU64 | BPF_MOV | BPF_K) as u8;
    insns[1].code = (BPF_JMP | BPF_EXIT) as u8;
    load_program(&ProgramLoad {
        name: "memtrack_probe",
        prog_type: bpf_prog_type::BPF_PROG_TYPE_KPROBE,
        expected_attach_type: Some(bpf_attach_type::BPF_TRACE_UPROBE_MULTI),
        insns: &insns,
        license: c"Dual MIT/GPL",
        btf: None,
    })
    .map_err(io::Error::other)
}

/// Registers a uprobe that does nothing at `offset` of `path`, scoped to `pid`, and
/// returns its link (for closing). What it is for: the kernel makes the first uprobe
/// registration after an idle moment wait for an RCU grace period (later
/// registrations within about a grace period of it do not wait; BENCHMARKS.md
/// "Start-up overlapped"), so registering this one while the tracker's programs are still being created
/// and verified moves that wait off the start-up's critical path.
pub(crate) fn register_early(path: &Path, offset: u64, pid: u32) -> io::Result<OwnedFd> {
    let program = return_zero()?;
    attach(program.as_fd(), path, &[offset], &[0], pid, false)
}
