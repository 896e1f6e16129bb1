//! uprobe_multi links (Linux 6.6+): one BPF link carries every probe site of one
//! program in one file for one process, and detaching it waits for the kernel's RCU
//! grace periods once for all of them, outside any global lock. A perf-event uprobe link
//! (what aya 0.14 creates) waits once per site, serialised under the kernel's
//! `event_mutex`. Measured here (Linux 6.18, 2 cores): 8 perf-event links take 0.7-0.9 s
//! to close, 8 uprobe_multi links closed concurrently 36 ms.
//!
//! aya supports these links from 0.15, which needs rustc 1.98; this workspace is pinned
//! to the toolchain the machines have (1.95). Until then this module does the two steps
//! aya 0.14 cannot: loading a program with the `BPF_TRACE_UPROBE_MULTI` expected attach
//! type (the kernel checks it when the link is made), and creating the link. The object
//! file is parsed and relocated by aya-obj, the library aya itself uses, against the maps
//! aya already created, so both halves share one set of maps. When aya can be upgraded,
//! `UProbe::attach` with several locations replaces this file.

use std::{
    collections::{HashMap, HashSet},
    ffi::{CStr, CString},
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
    sync::OnceLock,
};

use aya::{Ebpf, maps::Map};
use aya_obj::generated::{
    BPF_ALU64, BPF_EXIT, BPF_F_UPROBE_MULTI_RETURN, BPF_JMP, BPF_K, BPF_MOV, bpf_attach_type,
    bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type,
};

use crate::error::{Error, Result};

/// Bytes of verifier log kept when a program is rejected.
const VERIFIER_LOG_BYTES: usize = 1 << 20;

/// One `bpf()` call that returns a new file descriptor (program load, link create).
fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    let ret = sys_bpf_raw(cmd, attr)?;
    // SAFETY: on success these commands return a new file descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// One `bpf()` call; its non-negative return value.
pub(crate) fn sys_bpf_raw(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<libc::c_long> {
    // SAFETY: attr is a valid, fully initialised bpf_attr for `cmd`; the kernel reads at
    // most size_of::<bpf_attr>() bytes and writes only into buffers it points to, which
    // the caller keeps alive for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// An all-zero `bpf_attr`, the starting point of every `bpf()` call.
pub(crate) fn zeroed_attr() -> bpf_attr {
    // SAFETY: bpf_attr is a plain C union of integers; all-zero is its documented
    // "unset" value for every field.
    unsafe { std::mem::zeroed() }
}

/// The file descriptor of a map aya created (only the map kinds memtrack uses).
pub(crate) fn map_fd(map: &Map) -> Option<BorrowedFd<'_>> {
    let data = match map {
        Map::HashMap(d)
        | Map::Array(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::LruHashMap(d)
        | Map::ProgramArray(d)
        // aya 0.14 has no type for task storage (THREADS), which it creates all the same.
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(data.fd().as_fd())
}

/// Loads the programs `names` of `object` for uprobe_multi links, relocated against the
/// maps of `ebpf` (which must still hold every map: call before taking any out).
pub(crate) fn load_programs(
    ebpf: &Ebpf,
    object: &[u8],
    names: &[&'static str],
) -> Result<HashMap<&'static str, OwnedFd>> {
    let parse_err = |what: &str, e: &dyn std::fmt::Display| Error::Program {
        program: names.join(", "),
        source: Box::new(io::Error::other(format!("{what}: {e}"))),
    };
    let mut obj = aya_obj::Object::parse(object).map_err(|e| parse_err("parsing", &e))?;
    // relocate_maps borrows the map definitions while it mutates `obj`: it gets copies.
    let mut defs: Vec<(&str, RawFd, aya_obj::Map)> = Vec::new();
    for (name, map) in ebpf.maps() {
        let fd = map_fd(map).ok_or_else(|| parse_err("unexpected map type", &name))?;
        if let Some(def) = obj.maps.get(name) {
            defs.push((name, fd.as_raw_fd(), def.clone()));
        }
    }
    let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    obj.relocate_maps(defs.iter().map(|(n, fd, m)| (*n, *fd, m)), &text_sections)
        .map_err(|e| parse_err("relocating maps", &e))?;
    obj.relocate_calls(&text_sections)
        .map_err(|e| parse_err("relocating calls", &e))?;

    let mut loaded = HashMap::new();
    for &name in names {
        let program = obj
            .programs
            .get(name)
            .ok_or_else(|| parse_err("no such program", &name))?;
        let function = obj
            .functions
            .get(&program.function_key())
            .ok_or_else(|| parse_err("no code for program", &name))?;
        let fd = load_one(name, &function.instructions, &program.license).map_err(|source| {
            Error::Program {
                program: name.to_string(),
                source: Box::new(source),
            }
        })?;
        loaded.insert(name, fd);
    }
    Ok(loaded)
}

/// Loads one program; `license` is the object's license section, which the kernel checks
/// (GPL-only helpers need a GPL-compatible license), passed as aya passes it for the
/// programs it loads.
fn load_one(name: &str, insns: &[bpf_insn], license: &CStr) -> io::Result<OwnedFd> {
    let attempt = |log: Option<&mut Vec<u8>>| {
        let mut attr = zeroed_attr();
        // SAFETY: writing plain integers into the prog-load member of the union.
        let load = unsafe { &mut attr.__bindgen_anon_3 };
        load.prog_type = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
        load.expected_attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
        load.insns = insns.as_ptr() as u64;
        load.insn_cnt = insns.len() as u32;
        load.license = license.as_ptr() as u64;
        for (dst, src) in load.prog_name.iter_mut().zip(name.bytes().take(15)) {
            *dst = src as libc::c_char;
        }
        if let Some(log) = log {
            load.log_level = 1;
            load.log_buf = log.as_mut_ptr() as u64;
            load.log_size = log.len() as u32;
        }
        sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr)
    };
    match attempt(None) {
        Ok(fd) => Ok(fd),
        Err(first) => {
            // Load again with the verifier's log, to say why.
            let mut log = vec![0u8; VERIFIER_LOG_BYTES];
            match attempt(Some(&mut log)) {
                Ok(fd) => Ok(fd),
                Err(_) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let text = String::from_utf8_lossy(&log[..end]);
                    let lines: Vec<&str> = text.lines().collect();
                    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
                    Err(io::Error::new(
                        first.kind(),
                        format!("{first}; verifier log (end):\n{tail}"),
                    ))
                }
            }
        }
    }
}

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
        // r0 = 0; exit
        let mut insns: [bpf_insn; 2] = [
            // SAFETY: bpf_insn is plain integers (with bitfields); zero is register 0.
            unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            unsafe { std::mem::zeroed() },
        ];
        insns[0].code = (BPF_ALU64 | BPF_MOV | BPF_K) as u8;
        insns[1].code = (BPF_JMP | BPF_EXIT) as u8;
        let Ok(program) = load_one("memtrack_probe", &insns, c"Dual MIT/GPL") else {
            return false;
        };
        match attach(program.as_fd(), Path::new("/"), &[0], &[0], 0, false) {
            Ok(_) => true,
            Err(e) => e.raw_os_error() == Some(libc::EBADF),
        }
    })
}
