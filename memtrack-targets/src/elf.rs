//! Finding the allocator functions in one ELF file and the file offsets that
//! uprobes attach at.
//!
//! This module exists because the kernel's uprobe API takes `(file, offset)`,
//! while an ELF symbol gives a *virtual address*: the address has to be
//! translated through the `PT_LOAD` program header that contains it, the right
//! symbol has to be picked when a library exports several versions of one name
//! (glibc's `.dynsym` holds `realloc@@GLIBC_2.2.5`-style entries), and symbols
//! that are the same function (glibc 2.36: `aligned_alloc` and `memalign`)
//! must get one probe, not two.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, Sym, SymbolTable, VersionTable};
use object::{Endianness, ReadCache, ReadRef, SymbolIndex};

use crate::{AllocFn, Error};

/// A function to probe, resolved to a place the kernel's uprobe API accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The allocator function this probe stands for. When several functions
    /// are one piece of code (see [`ProbeTarget::aliases`]) it is the first of
    /// them in [`AllocFn::ALL`] order.
    pub function: AllocFn,
    /// The ELF file, by the path it was read from (for
    /// [`crate::process_targets`], the path in `/proc/PID/maps`).
    pub object: PathBuf,
    /// The symbol name found (e.g. `malloc`), without version.
    pub symbol: String,
    /// The symbol's version if the object has symbol versioning (e.g.
    /// `GLIBC_2.2.5`); `None` for unversioned symbols and `.symtab` entries.
    pub symbol_version: Option<String>,
    /// `st_value`: the function's virtual address in the ELF file.
    pub symbol_address: u64,
    /// `st_size`: the function's length in bytes (0 when the symbol does not
    /// say).
    pub symbol_size: u64,
    /// File offset of the function's first byte, translated through the
    /// `PT_LOAD` program header containing [`ProbeTarget::symbol_address`].
    /// This is the offset `uprobe` attachment takes.
    pub file_offset: u64,
    /// Other allocator functions whose symbols resolve to the same address in
    /// this object, e.g. [`AllocFn::Memalign`] beside
    /// [`AllocFn::AlignedAlloc`] in glibc 2.36. Exactly one probe is attached
    /// per address; calls through an alias are reported as
    /// [`ProbeTarget::function`], since the probe cannot tell which name the
    /// caller used.
    pub aliases: Vec<AllocFn>,
}

impl ProbeTarget {
    /// The function and its aliases.
    pub fn functions(&self) -> impl Iterator<Item = AllocFn> + '_ {
        std::iter::once(self.function).chain(self.aliases.iter().copied())
    }

    /// Whether this target stands for `function`, directly or as an alias.
    pub fn covers(&self, function: AllocFn) -> bool {
        self.functions().any(|f| f == function)
    }
}

/// The part of one `PT_LOAD` program header needed to map addresses to file
/// offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_offset`.
    pub offset: u64,
    /// `p_filesz`: bytes backed by the file. The rest of `p_memsz` is
    /// zero-filled (`.bss`) and has no file offset.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_flags` (`PF_X` = 1, `PF_W` = 2, `PF_R` = 4).
    pub flags: u32,
}

impl LoadSegment {
    /// Whether the segment is mapped executable.
    pub fn is_executable(&self) -> bool {
        self.flags & elf::PF_X != 0
    }
}

/// The file offset of virtual address `vaddr`: `vaddr - p_vaddr + p_offset`
/// for the segment whose file-backed range `[p_vaddr, p_vaddr + p_filesz)`
/// contains it. `None` if no segment's file data covers it.
pub fn vaddr_to_file_offset(segments: &[LoadSegment], vaddr: u64) -> Option<u64> {
    segments.iter().find_map(|s| {
        let delta = vaddr.checked_sub(s.vaddr)?;
        (delta < s.filesz).then(|| s.offset + delta)
    })
}

/// Every allocator entry point `elf_path` defines (see [`AllocFn::from_symbol`] for the
/// names), one target per distinct address: symbols at one address (glibc's
/// `aligned_alloc` and `memalign`; tcmalloc's `tc_malloc` and `malloc`) become one
/// target whose `function` is the first in [`AllocFn::ALL`] order and whose `aliases`
/// list the others. `.dynsym` is searched first; `.symtab` (static executables) only
/// for names `.dynsym` lacks. For a name with several versions the default (`@@`) one
/// wins.
pub fn allocator_targets(elf_path: &Path) -> Result<Vec<ProbeTarget>, Error> {
    let mut file = File::open(elf_path).map_err(|e| Error::io(elf_path, e))?;
    match whole_file(&mut file, elf_path)? {
        Some(bytes) => targets_in(&bytes[..], elf_path),
        None => targets_in(&ReadCache::new(file), elf_path),
    }
}

/// Files up to this size are read whole before parsing (libc is 2 MiB): object's
/// `ReadCache` reads every symbol name with its own small reads, thousands of system
/// calls for libc's symbol tables, a few ms of each process's attaching. Larger files
/// (executables with debug information) are read piecewise. Read, not mapped: a file
/// another user can write could be truncated under a mapping, and reading the mapping
/// then kills memtrack with SIGBUS.
const READ_WHOLE_MAX: u64 = 64 << 20;

/// The whole of `file` if it is at most [`READ_WHOLE_MAX`] bytes, else None.
fn whole_file(file: &mut File, path: &Path) -> Result<Option<Vec<u8>>, Error> {
    use std::io::Read;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > READ_WHOLE_MAX {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // Bounded even if the file grows meanwhile.
    file.take(READ_WHOLE_MAX)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(Some(bytes))
}

/// [`allocator_targets`] of the ELF file `data` (read from `elf_path`).
fn targets_in<'data, R: ReadRef<'data>>(
    data: R,
    elf_path: &'data Path,
) -> Result<Vec<ProbeTarget>, Error> {
    let elf = ElfReader::parse(data, elf_path)?;

    let mut by_name = elf.matching_symbols(&elf.dynsym, elf.versions.as_ref())?;
    for (name, found) in elf.matching_symbols(&elf.symtab, None)? {
        by_name.entry(name).or_insert(found);
    }
    let mut named: Vec<(String, AllocFn, Candidate)> = by_name
        .into_iter()
        .map(|(name, (function, candidate))| (name, function, candidate))
        .collect();
    // Per address the first function in AllocFn order wins, and its canonical name
    // (`free`, not its alias `cfree`) when the object has it.
    named.sort_by(|a, b| (a.1, a.0 != a.1.name(), &a.0).cmp(&(b.1, b.0 != b.1.name(), &b.0)));

    let mut by_address: BTreeMap<u64, ProbeTarget> = BTreeMap::new();
    for (name, function, candidate) in named {
        let found = candidate.found;
        if let Some(existing) = by_address.get_mut(&found.address) {
            if existing.function != function && !existing.aliases.contains(&function) {
                existing.aliases.push(function);
            }
            continue;
        }
        let file_offset = vaddr_to_file_offset(&elf.segments, found.address).ok_or_else(|| {
            Error::AddressNotInFile {
                path: elf_path.to_owned(),
                symbol: name.clone(),
                vaddr: found.address,
            }
        })?;
        by_address.insert(
            found.address,
            ProbeTarget {
                function,
                object: elf_path.to_owned(),
                symbol: name,
                symbol_version: found.version,
                symbol_address: found.address,
                symbol_size: found.size,
                file_offset,
                aliases: Vec::new(),
            },
        );
    }
    let mut targets: Vec<ProbeTarget> = by_address.into_values().collect();
    targets.sort_by(|a, b| (a.function, &a.symbol).cmp(&(b.function, &b.symbol)));
    Ok(targets)
}

/// Whether the executable at `path` names a dynamic loader (`PT_INTERP`): if so, its
/// libraries are mapped after `execve`, by that loader, in user space.
pub fn has_interpreter(path: &Path) -> Result<bool, Error> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let cache = ReadCache::new(file);
    check_x86_64(&cache, path)?;
    let header = elf::FileHeader64::<Endianness>::parse(&cache).map_err(|e| Error::elf(path, e))?;
    let endian = header.endian().map_err(|e| Error::elf(path, e))?;
    let headers = header
        .program_headers(endian, &cache)
        .map_err(|e| Error::elf(path, e))?;
    Ok(headers.iter().any(|ph| ph.p_type(endian) == elf::PT_INTERP))
}

/// The `PT_LOAD` segments of the ELF file at `elf_path`.
pub fn load_segments(elf_path: &Path) -> Result<Vec<LoadSegment>, Error> {
    let file = File::open(elf_path).map_err(|e| Error::io(elf_path, e))?;
    let cache = ReadCache::new(file);
    Ok(ElfReader::parse(&cache, elf_path)?.segments)
}

/// The first bytes of `target`'s function, read from the file at `elf_path`
/// at [`ProbeTarget::file_offset`]: `min(symbol_size, max_len)` bytes, or
/// `max_len` when the symbol has no size (fewer if the file ends first).
///
/// `elf_path` is separate from [`ProbeTarget::object`] so that the same file
/// can be read through another path, e.g. `/proc/PID/root/...` for a process
/// in another mount namespace.
pub fn function_bytes(
    elf_path: &Path,
    target: &ProbeTarget,
    max_len: usize,
) -> Result<Vec<u8>, Error> {
    let len = match usize::try_from(target.symbol_size) {
        Ok(0) | Err(_) => max_len,
        Ok(size) => size.min(max_len),
    };
    let mut file = File::open(elf_path).map_err(|e| Error::io(elf_path, e))?;
    file.seek(SeekFrom::Start(target.file_offset))
        .map_err(|e| Error::io(elf_path, e))?;
    let mut bytes = Vec::with_capacity(len);
    file.take(len as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(elf_path, e))?;
    Ok(bytes)
}

/// A symbol chosen for one function.
struct FoundSymbol {
    address: u64,
    size: u64,
    version: Option<String>,
}

/// A candidate symbol and whether its version is a default one.
struct Candidate {
    found: FoundSymbol,
    default_version: bool,
}

/// The parts of one x86_64 ELF file this module reads.
struct ElfReader<'data, R: ReadRef<'data>> {
    path: &'data Path,
    endian: Endianness,
    dynsym: SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
    symtab: SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
    versions: Option<VersionTable<'data, elf::FileHeader64<Endianness>>>,
    segments: Vec<LoadSegment>,
}

impl<'data, R: ReadRef<'data>> ElfReader<'data, R> {
    fn parse(data: R, path: &'data Path) -> Result<Self, Error> {
        check_x86_64(data, path)?;
        let header =
            elf::FileHeader64::<Endianness>::parse(data).map_err(|e| Error::elf(path, e))?;
        let endian = header.endian().map_err(|e| Error::elf(path, e))?;
        let sections = header
            .sections(endian, data)
            .map_err(|e| Error::elf(path, e))?;
        let dynsym = sections
            .symbols(endian, data, elf::SHT_DYNSYM)
            .map_err(|e| Error::elf(path, e))?;
        let symtab = sections
            .symbols(endian, data, elf::SHT_SYMTAB)
            .map_err(|e| Error::elf(path, e))?;
        let versions = sections
            .versions(endian, data)
            .map_err(|e| Error::elf(path, e))?;
        let segments = pt_loads(
            header
                .program_headers(endian, data)
                .map_err(|e| Error::elf(path, e))?,
            endian,
        );
        Ok(ElfReader {
            path,
            endian,
            dynsym,
            symtab,
            versions,
            segments,
        })
    }

    /// The allocator symbols of one table, best candidate per name.
    fn matching_symbols(
        &self,
        table: &SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
        versions: Option<&VersionTable<'data, elf::FileHeader64<Endianness>>>,
    ) -> Result<BTreeMap<String, (AllocFn, Candidate)>, Error> {
        let mut best: BTreeMap<String, (AllocFn, Candidate)> = BTreeMap::new();
        for (index, sym) in table.enumerate() {
            let Some((name, function, candidate)) = self.candidate(table, versions, index, sym)?
            else {
                continue;
            };
            // The first default-version symbol wins; a compatibility version
            // only until a default one shows up.
            match best.get(&name) {
                Some((_, b)) if b.default_version || !candidate.default_version => {}
                _ => {
                    best.insert(name, (function, candidate));
                }
            }
        }
        Ok(best)
    }

    fn candidate(
        &self,
        table: &SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
        versions: Option<&VersionTable<'data, elf::FileHeader64<Endianness>>>,
        index: SymbolIndex,
        sym: &elf::Sym64<Endianness>,
    ) -> Result<Option<(String, AllocFn, Candidate)>, Error> {
        let endian = self.endian;
        if sym.st_shndx(endian) == elf::SHN_UNDEF
            || sym.st_type() != elf::STT_FUNC
            || !matches!(sym.st_bind(), elf::STB_GLOBAL | elf::STB_WEAK)
            || sym.st_value(endian) == 0
        {
            return Ok(None);
        }
        let raw_name = table
            .symbol_name(endian, sym)
            .map_err(|e| Error::elf(self.path, e))?;
        // `.symtab` may spell versions into the name: `name@@VER` (default)
        // or `name@VER` (compatibility). `.dynsym` names never contain '@';
        // their versions live in `.gnu.version`.
        let (name, mut version, mut default_version) = split_versioned_name(raw_name);
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(None);
        };
        let Some(function) = AllocFn::from_symbol(name) else {
            return Ok(None);
        };
        if let Some(versions) = versions {
            let version_index = versions.version_index(endian, index);
            default_version = !version_index.is_hidden();
            version = versions
                .version(version_index)
                .map_err(|e| Error::elf(self.path, e))?
                .map(|v| String::from_utf8_lossy(v.name()).into_owned());
        }
        Ok(Some((
            name.to_string(),
            function,
            Candidate {
                found: FoundSymbol {
                    address: sym.st_value(endian),
                    size: sym.st_size(endian),
                    version,
                },
                default_version,
            },
        )))
    }
}

/// The `PT_LOAD` entries of a program header table, in order.
pub(crate) fn pt_loads(
    headers: &[elf::ProgramHeader64<Endianness>],
    endian: Endianness,
) -> Vec<LoadSegment> {
    headers
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| LoadSegment {
            vaddr: ph.p_vaddr(endian),
            offset: ph.p_offset(endian),
            filesz: ph.p_filesz(endian),
            memsz: ph.p_memsz(endian),
            flags: ph.p_flags(endian),
        })
        .collect()
}

/// Splits `name@@VERSION` / `name@VERSION` into (name, version, is_default).
fn split_versioned_name(raw: &[u8]) -> (&[u8], Option<String>, bool) {
    let Some(at) = raw.iter().position(|&b| b == b'@') else {
        return (raw, None, true);
    };
    let (name, rest) = raw.split_at(at);
    let (version, default) = match rest.strip_prefix(b"@@") {
        Some(v) => (v, true),
        None => (&rest[1..], false),
    };
    (
        name,
        Some(String::from_utf8_lossy(version).into_owned()),
        default,
    )
}

/// Index of the class byte in `e_ident`.
const EI_CLASS: usize = 4;
/// Index of the data-encoding byte in `e_ident`.
const EI_DATA: usize = 5;

/// Rejects anything but 64-bit little-endian x86_64 ELF with a clear error.
pub(crate) fn check_x86_64<'data, R: ReadRef<'data>>(data: R, path: &Path) -> Result<(), Error> {
    let ident: &[u8] = data
        .read_bytes_at(0, 20)
        .map_err(|()| Error::elf(path, "file is shorter than an ELF header"))?;
    if ident[..4] != elf::ELFMAG {
        return Err(Error::elf(path, "no ELF magic number"));
    }
    let class = ident[EI_CLASS];
    let data_encoding = ident[EI_DATA];
    if class != elf::ELFCLASS64 {
        return Err(Error::UnsupportedElf {
            path: path.to_owned(),
            reason: format!("ELF class {class}, not 64-bit"),
        });
    }
    if data_encoding != elf::ELFDATA2LSB {
        return Err(Error::UnsupportedElf {
            path: path.to_owned(),
            reason: "big-endian".to_owned(),
        });
    }
    let machine = u16::from_le_bytes([ident[18], ident[19]]);
    if machine != elf::EM_X86_64 {
        return Err(Error::UnsupportedElf {
            path: path.to_owned(),
            reason: format!("e_machine {machine}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

    fn segments() -> Vec<LoadSegment> {
        vec![
            LoadSegment {
                vaddr: 0,
                offset: 0,
                filesz: 0x1000,
                memsz: 0x1000,
                flags: elf::PF_R,
            },
            LoadSegment {
                vaddr: 0x401000,
                offset: 0x1000,
                filesz: 0x2345,
                memsz: 0x2345,
                flags: elf::PF_R | elf::PF_X,
            },
            LoadSegment {
                vaddr: 0x405e10,
                offset: 0x4e10,
                filesz: 0x100,
                memsz: 0x900,
                flags: elf::PF_R | elf::PF_W,
            },
        ]
    }

    #[test]
    fn vaddr_translates_through_the_containing_segment() {
        let s = segments();
        assert_eq!(vaddr_to_file_offset(&s, 0x10), Some(0x10));
        assert_eq!(vaddr_to_file_offset(&s, 0x401000), Some(0x1000));
        assert_eq!(vaddr_to_file_offset(&s, 0x401234), Some(0x1234));
        assert_eq!(vaddr_to_file_offset(&s, 0x403344), Some(0x3344));
        assert_eq!(vaddr_to_file_offset(&s, 0x405e20), Some(0x4e20));
        assert!(s[1].is_executable() && !s[2].is_executable());
    }

    #[test]
    fn addresses_outside_file_data_have_no_offset() {
        let s = segments();
        // One past the end of the text segment's file data.
        assert_eq!(vaddr_to_file_offset(&s, 0x403345), None);
        // In .bss: inside p_memsz but beyond p_filesz.
        assert_eq!(vaddr_to_file_offset(&s, 0x405f10), None);
        assert_eq!(vaddr_to_file_offset(&s, 0x9999_9999), None);
        assert_eq!(vaddr_to_file_offset(&[], 0), None);
    }

    #[test]
    fn versioned_names_split() {
        assert_eq!(
            split_versioned_name(b"malloc@@GLIBC_2.2.5"),
            (&b"malloc"[..], Some("GLIBC_2.2.5".to_owned()), true)
        );
        assert_eq!(
            split_versioned_name(b"cfree@GLIBC_2.2.5"),
            (&b"cfree"[..], Some("GLIBC_2.2.5".to_owned()), false)
        );
        assert_eq!(split_versioned_name(b"free"), (&b"free"[..], None, true));
    }

    #[test]
    fn rejects_non_elf_and_non_x86_64() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let text = dir.join("not-elf");
        std::fs::write(&text, b"#!/bin/sh\necho hello, this is not an ELF file\n").unwrap();
        assert!(matches!(allocator_targets(&text), Err(Error::Elf { .. })));

        // A 64-bit little-endian ELF header for AArch64 (e_machine 183).
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(&elf::ELFMAG);
        header[EI_CLASS] = elf::ELFCLASS64;
        header[EI_DATA] = elf::ELFDATA2LSB;
        header[6] = 1; // EI_VERSION
        header[18..20].copy_from_slice(&elf::EM_AARCH64.to_le_bytes());
        let arm = dir.join("arm64");
        std::fs::write(&arm, &header).unwrap();
        let err = allocator_targets(&arm).unwrap_err();
        assert!(matches!(err, Error::UnsupportedElf { .. }), "{err}");
        assert!(err.to_string().contains("arm64"), "{err}");

        let missing = dir.join("missing");
        assert!(matches!(
            allocator_targets(&missing),
            Err(Error::Io { path, .. }) if path == missing
        ));
    }

    fn libc_targets() -> Vec<ProbeTarget> {
        allocator_targets(Path::new(LIBC)).expect("read libc")
    }

    #[test]
    fn libc_defines_every_function_once_per_address() {
        let targets = libc_targets();
        // The standard C functions (glibc has no C++ or jemalloc/mimalloc API).
        for f in &AllocFn::ALL[..10] {
            let f = *f;
            let n = targets.iter().filter(|t| t.covers(f)).count();
            assert_eq!(n, 1, "{f} covered {n} times: {targets:#?}");
        }
        let mut addresses: Vec<_> = targets.iter().map(|t| t.symbol_address).collect();
        addresses.dedup();
        assert_eq!(addresses.len(), targets.len());
        for t in &targets {
            assert_eq!(t.object, Path::new(LIBC));
            assert_eq!(t.symbol, t.function.symbol());
            assert!(t.symbol_size > 0, "{t:?}");
            assert!(
                t.symbol_version
                    .as_deref()
                    .is_some_and(|v| v.starts_with("GLIBC_")),
                "{t:?}"
            );
        }
    }

    #[test]
    fn libc_aligned_alloc_and_memalign_share_one_target() {
        let targets = libc_targets();
        let aligned = targets
            .iter()
            .find(|t| t.covers(AllocFn::AlignedAlloc))
            .unwrap();
        assert!(aligned.covers(AllocFn::Memalign), "{aligned:#?}");
        assert_eq!(aligned.function, AllocFn::AlignedAlloc);
        assert_eq!(aligned.aliases, vec![AllocFn::Memalign]);
    }

    #[test]
    fn libc_file_offsets_point_at_the_function_bytes() {
        use object::{Object, ObjectSection};
        let data = std::fs::read(LIBC).unwrap();
        let file = object::File::parse(&*data).unwrap();
        for t in libc_targets() {
            // Independently: the section containing the address, and the
            // bytes at that address through the section's data.
            let section = file
                .sections()
                .find(|s| {
                    s.address() <= t.symbol_address && t.symbol_address < s.address() + s.size()
                })
                .unwrap();
            let start = (t.symbol_address - section.address()) as usize;
            let expected = &section.data().unwrap()[start..start + 32];
            let (section_offset, _) = section.file_range().unwrap();
            assert_eq!(
                t.file_offset,
                section_offset + start as u64,
                "{}: file offset",
                t.function
            );
            let got = function_bytes(Path::new(LIBC), &t, 32).unwrap();
            assert_eq!(got, expected, "{}: bytes at file offset", t.function);
        }
    }

    #[test]
    fn function_bytes_stops_at_symbol_size() {
        let targets = libc_targets();
        let valloc = targets
            .iter()
            .find(|t| t.function == AllocFn::Valloc)
            .unwrap();
        let all = function_bytes(Path::new(LIBC), valloc, usize::MAX).unwrap();
        assert_eq!(all.len() as u64, valloc.symbol_size);
        let few = function_bytes(Path::new(LIBC), valloc, 3).unwrap();
        assert_eq!(few, all[..3]);
    }
}
