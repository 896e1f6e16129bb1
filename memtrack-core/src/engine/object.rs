//! Loads the shipped eBPF object with aya-obj (the object-file half of aya) and plain
//! `bpf()` calls: the object's BTF, every map it defines, and its programs, relocated
//! against those maps.
//!
//! Why not aya's `EbpfLoader`: aya 0.14's `EbpfLoader::new()` reads and parses the
//! kernel's whole BTF (`/sys/kernel/btf/vmlinux`, 5 MiB) before it can be told not to
//! use it, and `load()` probes a dozen kernel features with test programs; that was about
//! a fifth of the CPU time of `memtrack run -- /bin/true` here, for type information the
//! programs do not use (they have no CO-RE relocations, a test in loader.rs checks).
//!
//! Nothing here knows memtrack's maps: every map in the object is created as the object
//! defines it (legacy `maps` section, BTF-defined `.maps`, and the `.rodata`/`.data`/
//! `.bss` globals, whose contents are written and, for `.rodata`, frozen), with only the
//! caller's `max_entries` overrides; each is an aya [`MapData`], so aya's typed maps read
//! and write them. Map types aya has no typed map for (task storage) are created all
//! the same from their BTF definition. An array of maps is created empty, checked
//! against its BTF-defined inner map (aya 0.14 does not let its users create maps of
//! maps: [`create_map_of_maps`]); what goes in it is the caller's ([`create_plain_map`]).

use std::{
    collections::{HashMap, HashSet},
    ffi::{CStr, CString},
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
};

use aya::maps::{Map, MapData, MapError};
use aya_obj::{
    EbpfSectionKind,
    btf::BtfFeatures,
    generated::{
        BPF_ANY, bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_map_type, bpf_prog_type,
    },
};

/// Bytes of verifier log kept when a program is rejected (1 MiB).
const VERIFIER_LOG_BYTES: usize = 1 << 20;

/// Why loading memtrack's eBPF object failed: the step, and the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The object is not an eBPF object aya-obj can read.
    #[error("parsing the eBPF object: {0}")]
    Parse(#[source] aya_obj::ParseError),
    /// Writing the loader's values into the object's globals failed.
    #[error("setting the globals {names:?}: {source}")]
    Globals {
        /// The globals written.
        names: Vec<String>,
        /// The cause.
        #[source]
        source: aya_obj::ParseError,
    },
    /// The object's BTF could not be fixed up for this kernel.
    #[error("preparing the object's BTF: {0}")]
    BtfFixup(#[source] aya_obj::btf::BtfError),
    /// The kernel refused the object's BTF, sanitized either way.
    #[error(
        "loading the object's BTF into the kernel: {with_all} (with every BTF feature); \
         {with_none} (sanitized for none)"
    )]
    Btf {
        /// The kernel's answer to the BTF with every feature.
        with_all: io::Error,
        /// Its answer to the BTF sanitized for a kernel with none.
        #[source]
        with_none: io::Error,
    },
    /// The kernel refused to create map `name` with `max_entries` entries.
    #[error("creating map `{name}` with {max_entries} entries: {source}")]
    CreateMap {
        /// The map.
        name: String,
        /// Its capacity, in entries.
        max_entries: u32,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// aya refused map `name` (a definition it cannot make).
    #[error("creating map `{name}`: {source}")]
    Map {
        /// The map.
        name: String,
        /// The cause.
        #[source]
        source: MapError,
    },
    /// Map `name` is of a kind this loader does not make (a hash of maps).
    #[error("creating map `{name}`: hashes of maps are not supported by this loader")]
    HashOfMaps {
        /// The map.
        name: String,
    },
    /// The array of maps `name` defines no inner map in its BTF.
    #[error("creating the array of maps `{name}`: its BTF definition names no inner map")]
    NoInnerMap {
        /// The map.
        name: String,
    },
    /// Writing a global section's contents, or freezing `.rodata`, failed.
    #[error("{step} map `{name}`: {source}")]
    GlobalSection {
        /// "writing the contents of" or "freezing".
        step: &'static str,
        /// The map.
        name: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The thread creating map `name` panicked.
    #[error("creating map `{name}`: its thread panicked")]
    ThreadPanicked {
        /// The map.
        name: String,
    },
    /// Relocating the code against the maps, or its calls, failed.
    #[error("relocating {what}: {source}")]
    Relocate {
        /// "map references" or "calls".
        what: &'static str,
        /// The cause.
        #[source]
        source: aya_obj::relocation::EbpfRelocationError,
    },
}

/// Why one program could not be loaded or put in place.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProgramError {
    /// The eBPF object has no program of that name.
    #[error("the eBPF object has no such program")]
    NotInObject,
    /// The eBPF object has no code for the program.
    #[error("the eBPF object has no code for the program")]
    NoCode,
    /// The kernel's verifier rejected it.
    #[error("{source}; verifier log (end):\n{log_tail}")]
    Rejected {
        /// The kernel's answer.
        #[source]
        source: io::Error,
        /// The last 20 lines of the verifier's log.
        log_tail: String,
    },
    /// Another call about it failed in the kernel.
    #[error(transparent)]
    Kernel(#[from] io::Error),
    /// It was not loaded (asked for after a load without it).
    #[error("it was not loaded")]
    NotLoaded,
    /// The thread loading it panicked.
    #[error("its loading thread panicked")]
    ThreadPanicked,
    /// Putting it into the unwinder's program array failed.
    #[error(
        "putting it into the program array {array} at slot {slot} (needed for stacks) \
         failed: {source}"
    )]
    ProgramArray {
        /// The array.
        array: &'static str,
        /// The slot.
        slot: u32,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// `bpf(cmd, attr)`; its non-negative return value.
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

/// `bpf(cmd, attr)` for a command that returns a new file descriptor (loads, creates).
pub(crate) fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    let ret = sys_bpf_raw(cmd, attr)?;
    // SAFETY: on success these commands return a new file descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// An all-zero `bpf_attr`, the starting point of every `bpf()` call.
pub(crate) fn zeroed_attr() -> bpf_attr {
    // SAFETY: bpf_attr is a plain C union of integers; all-zero is its documented
    // "unset" value for every field.
    unsafe { std::mem::zeroed() }
}

/// Writes `value` at `key` of the map `map` (`BPF_MAP_UPDATE_ELEM`, `BPF_ANY`). The
/// caller passes pointers to buffers of exactly the map's key and value sizes.
pub(crate) fn update_elem(map: BorrowedFd<'_>, key: *const u8, value: *const u8) -> io::Result<()> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the map-element member of the union.
    unsafe {
        let elem = &mut attr.__bindgen_anon_2;
        elem.map_fd = map.as_raw_fd() as u32;
        elem.key = key as u64;
        elem.__bindgen_anon_1.value = value as u64;
        elem.flags = u64::from(BPF_ANY);
    }
    sys_bpf_raw(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// The parsed object, its BTF and maps in the kernel, and its code relocated against
/// those maps: ready for loading programs. The maps not taken out stay here (a program
/// array must stay open in user space: the kernel empties it when its last descriptor
/// closes).
pub(crate) struct Object {
    obj: aya_obj::Object,
    maps: HashMap<String, MapData>,
    /// The object's BTF in the kernel (BTF-defined maps' key and value types, the
    /// programs' function and line information); None if the object has none.
    btf: Option<OwnedFd>,
}

impl Object {
    /// Parses `object`, sets its globals (`globals`: symbol name and the bytes it
    /// holds), loads its BTF into the kernel, creates every map it defines
    /// (`max_entries`: overrides by map name), and relocates its code against them.
    /// `parallel`: the two largest maps are created on threads of their own (see
    /// `uprobe_programs::Loading` for when not).
    pub(crate) fn load(
        object: &[u8],
        globals: &[(&str, &[u8])],
        max_entries: &[(&str, u32)],
        parallel: bool,
    ) -> Result<Self, LoadError> {
        let mut obj = aya_obj::Object::parse(object).map_err(LoadError::Parse)?;
        obj.patch_map_data(globals.iter().map(|&(n, v)| (n, (v, true))).collect())
            .map_err(|source| LoadError::Globals {
                names: globals.iter().map(|(n, _)| n.to_string()).collect(),
                source,
            })?;
        let btf = load_btf(&mut obj, object)?;
        // relocate_maps needs each map's definition, which MapData keeps private: a copy.
        let mut defs: Vec<(String, aya_obj::Map)> = obj
            .maps
            .drain()
            .map(|(name, mut def)| {
                if let Some(&(_, n)) = max_entries.iter().find(|(m, _)| *m == name) {
                    def.set_max_entries(n);
                }
                (name, def)
            })
            .collect();
        // The two maps with the most entries are created on threads of their own, the
        // others meanwhile: the kernel allocates, zeroes and initialises a map's memory
        // inside the creating call (about 25 ns per preallocated hash entry and 12 ns
        // per hash bucket on the hosts measured: 12 ms for a million buckets), and the
        // calls do not wait for each other. The live-block maps are those two.
        defs.sort_by_key(|(_, def)| std::cmp::Reverse(def.max_entries()));
        let btf_fd = btf.as_ref().map(|b| b.as_fd());
        let mut maps = HashMap::new();
        std::thread::scope(|scope| -> Result<(), LoadError> {
            let split = if parallel { defs.len().min(2) } else { 0 };
            let threads: Vec<_> = defs[..split]
                .iter()
                .map(|(name, def)| {
                    let thread = std::thread::Builder::new()
                        .name("memtrack-maps".into())
                        .spawn_scoped(scope, move || create_map(name, def, btf_fd));
                    (name, def, thread)
                })
                .collect();
            for (name, def) in &defs[split..] {
                maps.insert(name.clone(), create_map(name, def, btf_fd)?);
            }
            for (name, def, thread) in threads {
                let map = match thread {
                    Ok(thread) => thread.join().unwrap_or_else(|_| {
                        Err(LoadError::ThreadPanicked { name: name.clone() })
                    })?,
                    // No thread: create it here.
                    Err(_) => create_map(name, def, btf_fd)?,
                };
                maps.insert(name.clone(), map);
            }
            Ok(())
        })?;
        let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
        obj.relocate_maps(
            defs.iter()
                .map(|(name, def)| (name.as_str(), maps[name].fd().as_fd().as_raw_fd(), def)),
            &text_sections,
        )
        .map_err(|source| LoadError::Relocate {
            what: "map references",
            source,
        })?;
        obj.relocate_calls(&text_sections)
            .map_err(|source| LoadError::Relocate {
                what: "calls",
                source,
            })?;
        // aya would also sanitize helper calls here (bpf_probe_read_{kernel,user} into
        // bpf_probe_read for kernels before 5.5); every kernel with the BPF cookies the
        // probes need (5.15+) has them.
        Ok(Object { obj, maps, btf })
    }

    /// The descriptor of map `name`, while it is still here.
    pub(crate) fn map_fd(&self, name: &str) -> Option<BorrowedFd<'_>> {
        self.maps.get(name).map(|m| m.fd().as_fd())
    }

    /// Takes map `name` out, as aya's [`Map`] of its type (None: no such map, or taken).
    pub(crate) fn take_map(&mut self, name: &str) -> Option<Result<Map, MapError>> {
        self.maps.remove(name).map(Map::from_map_data)
    }

    /// Loads program `name` as `prog_type` with `expected_attach_type` (the kernel checks
    /// it when a link is made: uprobe_multi links need theirs).
    pub(crate) fn load_program(
        &self,
        name: &str,
        prog_type: bpf_prog_type,
        expected_attach_type: Option<bpf_attach_type>,
    ) -> Result<OwnedFd, ProgramError> {
        let program = self
            .obj
            .programs
            .get(name)
            .ok_or(ProgramError::NotInObject)?;
        let function = self
            .obj
            .functions
            .get(&program.function_key())
            .ok_or(ProgramError::NoCode)?;
        let btf = self.btf.as_ref().map(|fd| ProgramBtf {
            fd: fd.as_fd(),
            func_info: function.func_info.func_info_bytes(),
            func_info_count: function.func_info.len() as u32,
            func_info_rec_size: function.func_info_rec_size as u32,
            line_info: function.line_info.line_info_bytes(),
            line_info_count: function.line_info.len() as u32,
            line_info_rec_size: function.line_info_rec_size as u32,
        });
        load_program(&ProgramLoad {
            name,
            prog_type,
            expected_attach_type,
            insns: &function.instructions,
            license: &program.license,
            btf,
        })
    }
}

/// Creates map `name` from its definition; `.rodata`, `.data` and `.bss` maps get their
/// contents written, and `.rodata` is frozen (the verifier then treats its values as
/// constants: that is how a global such as the stack depth prunes code).
fn create_map(
    name: &str,
    def: &aya_obj::Map,
    btf: Option<BorrowedFd<'_>>,
) -> Result<MapData, LoadError> {
    let map_type = def.map_type();
    if map_type == bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS as u32 {
        return create_map_of_maps(name, def, btf);
    }
    if map_type == bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS as u32 {
        return Err(LoadError::HashOfMaps {
            name: name.to_string(),
        });
    }
    let map = MapData::create(def.clone(), name, btf).map_err(|e| match e {
        MapError::CreateError { io_error, .. } => LoadError::CreateMap {
            name: name.to_string(),
            max_entries: def.max_entries(),
            source: io_error,
        },
        source => LoadError::Map {
            name: name.to_string(),
            source,
        },
    })?;
    let kind = def.section_kind();
    if matches!(
        kind,
        EbpfSectionKind::Rodata | EbpfSectionKind::Data | EbpfSectionKind::Bss
    ) && !def.data().is_empty()
    {
        // A global section is an array of one element holding the whole section.
        let key: u32 = 0;
        update_elem(
            map.fd().as_fd(),
            (&raw const key).cast(),
            def.data().as_ptr(),
        )
        .map_err(|source| LoadError::GlobalSection {
            step: "writing the contents of",
            name: name.to_string(),
            source,
        })?;
    }
    if kind == EbpfSectionKind::Rodata {
        let mut attr = zeroed_attr();
        attr.__bindgen_anon_2.map_fd = map.fd().as_fd().as_raw_fd() as u32;
        sys_bpf_raw(bpf_cmd::BPF_MAP_FREEZE, &mut attr).map_err(|source| {
            LoadError::GlobalSection {
                step: "freezing",
                name: name.to_string(),
                source,
            }
        })?;
    }
    Ok(map)
}

/// Creates the array of maps `name`, empty: the kernel checks every map put in it, and
/// every program's use of what it holds, against a template made from the inner map
/// definition (`values` of its BTF definition), which is closed again once the array
/// exists.
fn create_map_of_maps(
    name: &str,
    def: &aya_obj::Map,
    btf: Option<BorrowedFd<'_>>,
) -> Result<MapData, LoadError> {
    let aya_err = |source| LoadError::Map {
        name: name.to_string(),
        source,
    };
    let inner = def.inner().ok_or_else(|| LoadError::NoInnerMap {
        name: name.to_string(),
    })?;
    let template = MapData::create(inner, &format!("{name}.inner"), btf).map_err(aya_err)?;
    let fd = create_plain_map(&PlainMap {
        name,
        map_type: bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS,
        key_size: def.key_size(),
        value_size: def.value_size(),
        max_entries: def.max_entries(),
        map_flags: def.map_flags(),
        inner_map: Some(template.fd().as_fd()),
    })
    .map_err(|source| LoadError::CreateMap {
        name: name.to_string(),
        max_entries: def.max_entries(),
        source,
    })?;
    MapData::from_fd(fd).map_err(aya_err)
}

/// A map [`create_plain_map`] makes: no BTF, no contents.
pub(crate) struct PlainMap<'a> {
    /// Its name (the kernel keeps the first 15 bytes).
    pub(crate) name: &'a str,
    pub(crate) map_type: bpf_map_type,
    /// Bytes of a key.
    pub(crate) key_size: u32,
    /// Bytes of a value.
    pub(crate) value_size: u32,
    pub(crate) max_entries: u32,
    pub(crate) map_flags: u32,
    /// For a map of maps: the map its inner maps must be like.
    pub(crate) inner_map: Option<BorrowedFd<'a>>,
}

/// `BPF_MAP_CREATE` of `map`.
pub(crate) fn create_plain_map(map: &PlainMap<'_>) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the map-create member of the union.
    let u = unsafe { &mut attr.__bindgen_anon_1 };
    u.map_type = map.map_type as u32;
    u.key_size = map.key_size;
    u.value_size = map.value_size;
    u.max_entries = map.max_entries;
    u.map_flags = map.map_flags;
    if let Some(inner) = map.inner_map {
        u.inner_map_fd = inner.as_raw_fd() as u32;
    }
    for (dst, src) in u.map_name.iter_mut().zip(map.name.bytes().take(15)) {
        *dst = src as libc::c_char;
    }
    sys_bpf(bpf_cmd::BPF_MAP_CREATE, &mut attr)
}

/// Loads the object's BTF into the kernel (None: the object has none): fixed up and
/// sanitized for a kernel with every BTF feature (Linux 6.0+), or, if the kernel refuses
/// that, from a fresh parse of `object` sanitized for one with none (older kernels: the
/// sanitizer replaces what they lack). `obj` keeps the first fix-up either way (it only
/// fills in section sizes and offsets, which are the same).
fn load_btf(obj: &mut aya_obj::Object, object: &[u8]) -> Result<Option<OwnedFd>, LoadError> {
    let all = BtfFeatures::new(true, true, true, true, true, true, true, true);
    let bytes = match obj.fixup_and_sanitize_btf(&all) {
        Ok(Some(btf)) => btf.to_bytes(),
        Ok(None) => return Ok(None),
        Err(e) => return Err(LoadError::BtfFixup(e)),
    };
    let with_all = match btf_load(&bytes) {
        Ok(fd) => return Ok(Some(fd)),
        Err(e) => e,
    };
    let none = BtfFeatures::new(false, false, false, false, false, false, false, false);
    let mut fresh = aya_obj::Object::parse(object).map_err(LoadError::Parse)?;
    let bytes = match fresh.fixup_and_sanitize_btf(&none) {
        Ok(Some(btf)) => btf.to_bytes(),
        Ok(None) => return Ok(None),
        Err(e) => return Err(LoadError::BtfFixup(e)),
    };
    btf_load(&bytes)
        .map(Some)
        .map_err(|with_none| LoadError::Btf {
            with_all,
            with_none,
        })
}

/// `BPF_BTF_LOAD` of `bytes`.
fn btf_load(bytes: &[u8]) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the BTF-load member of the union; `bytes`
    // outlives the call.
    let load = unsafe { &mut attr.__bindgen_anon_7 };
    load.btf = bytes.as_ptr() as u64;
    load.btf_size = bytes.len() as u32;
    sys_bpf(bpf_cmd::BPF_BTF_LOAD, &mut attr)
}

/// A program's BTF: the object's, with the program's function and line records.
pub(crate) struct ProgramBtf<'a> {
    pub(crate) fd: BorrowedFd<'a>,
    pub(crate) func_info: Vec<u8>,
    pub(crate) func_info_count: u32,
    pub(crate) func_info_rec_size: u32,
    pub(crate) line_info: Vec<u8>,
    pub(crate) line_info_count: u32,
    pub(crate) line_info_rec_size: u32,
}

/// What `BPF_PROG_LOAD` is given.
pub(crate) struct ProgramLoad<'a> {
    /// The program's name (the kernel keeps its first 15 bytes).
    pub(crate) name: &'a str,
    pub(crate) prog_type: bpf_prog_type,
    pub(crate) expected_attach_type: Option<bpf_attach_type>,
    pub(crate) insns: &'a [bpf_insn],
    /// The object's license section, which the kernel checks (GPL-only helpers need a
    /// GPL-compatible license).
    pub(crate) license: &'a CStr,
    pub(crate) btf: Option<ProgramBtf<'a>>,
}

/// The environment variable that makes [`load_program`] print each program's verifier
/// statistics (time in µs, instructions processed, states) on stderr: a developer's
/// view of what the verifier costs memtrack's start-up (docs/ARCHITECTURE.md).
pub(crate) const DEBUG_VERIFIER_ENV: &str = "MEMTRACK_DEBUG_VERIFIER";

/// `log_level` bit 4 of `BPF_PROG_LOAD`: the verifier's statistics only.
const LOG_LEVEL_STATS: u32 = 4;

/// Bytes of log that hold the statistics line.
const STATS_LOG_BYTES: usize = 1024;

/// Whether [`DEBUG_VERIFIER_ENV`] is set to a non-empty value other than `0`.
fn verifier_stats_wanted() -> bool {
    std::env::var_os(DEBUG_VERIFIER_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The text of a NUL-terminated verifier log buffer.
fn log_text(log: &[u8]) -> String {
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).into_owned()
}

/// Loads one program. A rejected program is loaded again with the verifier's log, whose
/// last 20 lines the error carries.
pub(crate) fn load_program(load: &ProgramLoad<'_>) -> Result<OwnedFd, ProgramError> {
    let attempt = |log: Option<(&mut Vec<u8>, u32)>| {
        let mut attr = zeroed_attr();
        // SAFETY: writing plain integers into the prog-load member of the union; every
        // buffer it points to (instructions, license, BTF records, log) outlives the call.
        let u = unsafe { &mut attr.__bindgen_anon_3 };
        u.prog_type = load.prog_type as u32;
        u.expected_attach_type = load.expected_attach_type.map_or(0, |t| t as u32);
        u.insns = load.insns.as_ptr() as u64;
        u.insn_cnt = load.insns.len() as u32;
        u.license = load.license.as_ptr() as u64;
        for (dst, src) in u.prog_name.iter_mut().zip(load.name.bytes().take(15)) {
            *dst = src as libc::c_char;
        }
        if let Some(btf) = &load.btf {
            u.prog_btf_fd = btf.fd.as_raw_fd() as u32;
            if btf.func_info_rec_size > 0 {
                u.func_info = btf.func_info.as_ptr() as u64;
                u.func_info_cnt = btf.func_info_count;
                u.func_info_rec_size = btf.func_info_rec_size;
            }
            if btf.line_info_rec_size > 0 {
                u.line_info = btf.line_info.as_ptr() as u64;
                u.line_info_cnt = btf.line_info_count;
                u.line_info_rec_size = btf.line_info_rec_size;
            }
        }
        if let Some((log, level)) = log {
            u.log_level = level;
            u.log_buf = log.as_mut_ptr() as u64;
            u.log_size = log.len() as u32;
        }
        sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr)
    };
    let first = if verifier_stats_wanted() {
        let mut log = vec![0u8; STATS_LOG_BYTES];
        let loaded = attempt(Some((&mut log, LOG_LEVEL_STATS)));
        let text = log_text(&log);
        let stats: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        eprintln!("memtrack: verifier: {}: {}", load.name, stats.join("; "));
        loaded
    } else {
        attempt(None)
    };
    match first {
        Ok(fd) => Ok(fd),
        Err(first) => {
            let mut log = vec![0u8; VERIFIER_LOG_BYTES];
            match attempt(Some((&mut log, 1))) {
                Ok(fd) => Ok(fd),
                Err(_) => {
                    let text = log_text(&log);
                    let lines: Vec<&str> = text.lines().collect();
                    Err(ProgramError::Rejected {
                        source: first,
                        log_tail: lines[lines.len().saturating_sub(20)..].join("\n"),
                    })
                }
            }
        }
    }
}

/// Attaches a raw tracepoint program to `tracepoint`; closing the returned descriptor
/// detaches it.
pub(crate) fn attach_raw_tracepoint(
    program: BorrowedFd<'_>,
    tracepoint: &str,
) -> io::Result<OwnedFd> {
    let name = CString::new(tracepoint)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "tracepoint contains NUL"))?;
    let mut attr = zeroed_attr();
    attr.raw_tracepoint.name = name.as_ptr() as u64;
    attr.raw_tracepoint.prog_fd = program.as_raw_fd() as u32;
    sys_bpf(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}
