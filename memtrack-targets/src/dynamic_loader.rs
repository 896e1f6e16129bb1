//! Where the dynamic loader tells debuggers that its list of loaded objects changed.
//!
//! This module exists because a new image's libraries are mapped by the dynamic loader
//! in user space after `execve`, and `dlopen` maps more later: a tracker must probe
//! each new allocator after it is mapped and before its code runs. glibc's and musl's
//! loaders call the empty function `_dl_debug_state` (the `r_brk` of `struct r_debug`,
//! the hook debuggers break on) after mapping and before running initializers, both at
//! startup and in `dlopen`. A probe there gives exactly that moment.

use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, Sym};
use object::{Endianness, ReadCache};

use crate::{Error, MappingKind, maps::read_maps};

/// The loader hook's name.
pub const DEBUG_STATE_SYMBOL: &str = "_dl_debug_state";

/// Where `_dl_debug_state` is in one process: the loader's file and the function's
/// file offset (what a uprobe attaches to), and its runtime address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugStateSite {
    /// The dynamic loader's file, as memtrack reads it (below `/proc/PID/root` when the
    /// process's path names another file here; see [`read_maps`]).
    pub object: PathBuf,
    /// File offset of the function's first byte in `object`.
    pub file_offset: u64,
    /// The function's address in the process.
    pub address: u64,
}

/// Where `_dl_debug_state` is in process `pid`, if a dynamic loader that defines it is
/// mapped (None for static executables and unknown loaders).
pub fn debug_state_site(pid: u32) -> Result<Option<DebugStateSite>, Error> {
    let lines = read_maps(pid)?;
    let mut seen: Vec<&Path> = Vec::new();
    for line in &lines {
        let MappingKind::File {
            path,
            deleted: false,
        } = &line.kind
        else {
            continue;
        };
        let is_loader = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("ld-"));
        if !is_loader || seen.contains(&path.as_path()) {
            continue;
        }
        seen.push(path);
        let Some(file_offset) = symbol_file_offset(path, DEBUG_STATE_SYMBOL)? else {
            continue;
        };
        // The mapping of this file that covers that offset gives the runtime address.
        let covering = lines.iter().find(|l| {
            matches!(&l.kind, MappingKind::File { path: p, .. } if p == path)
                && l.offset <= file_offset
                && file_offset < l.offset + (l.end - l.start)
        });
        if let Some(l) = covering {
            return Ok(Some(DebugStateSite {
                object: path.clone(),
                file_offset,
                address: l.start + (file_offset - l.offset),
            }));
        }
    }
    Ok(None)
}

/// The runtime address of `_dl_debug_state` in process `pid` (see [`debug_state_site`]).
pub fn debug_state_address(pid: u32) -> Result<Option<u64>, Error> {
    Ok(debug_state_site(pid)?.map(|site| site.address))
}

/// The file offset of a defined function symbol of the ELF file at `path`, looked up in
/// `.dynsym` and then `.symtab`.
pub fn symbol_file_offset(path: &Path, name: &str) -> Result<Option<u64>, Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let data = ReadCache::new(file);
    let header = elf::FileHeader64::<Endianness>::parse(&data).map_err(|e| Error::elf(path, e))?;
    let endian = header.endian().map_err(|e| Error::elf(path, e))?;
    let Some(vaddr) = symbol_value(path, &data, name, Some(elf::STT_FUNC))? else {
        return Ok(None);
    };
    let segments = header
        .program_headers(endian, &data)
        .map_err(|e| Error::elf(path, e))?;
    Ok(segments
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .find(|ph| {
            let start = ph.p_vaddr(endian);
            start <= vaddr && vaddr < start + ph.p_filesz(endian)
        })
        .map(|ph| vaddr - ph.p_vaddr(endian) + ph.p_offset(endian)))
}

/// The loader's `struct r_debug` (the symbol debuggers read its state from).
pub const R_DEBUG_SYMBOL: &str = "_r_debug";

/// How many bytes after `_dl_debug_state` the loader at `path` has its `_r_debug`
/// (negative: before it): the same in every process, whatever the loader's load
/// address. None when the loader defines either symbol not, or they lie more than 2 GiB
/// apart.
pub fn r_debug_delta(path: &Path) -> Result<Option<i32>, Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let data = ReadCache::new(file);
    let hook = symbol_value(path, &data, DEBUG_STATE_SYMBOL, Some(elf::STT_FUNC))?;
    let r_debug = symbol_value(path, &data, R_DEBUG_SYMBOL, Some(elf::STT_OBJECT))?;
    Ok(match (hook, r_debug) {
        (Some(hook), Some(r_debug)) => i32::try_from(r_debug.wrapping_sub(hook) as i64).ok(),
        _ => None,
    })
}

/// The value (virtual address) of the defined symbol `name` (of type `kind`, if given)
/// of the ELF file `data` (read from `path`), looked up in `.dynsym` and then `.symtab`;
/// a versioned name (`name@@VERSION`) matches its plain name.
fn symbol_value(
    path: &Path,
    data: &ReadCache<std::fs::File>,
    name: &str,
    kind: Option<u8>,
) -> Result<Option<u64>, Error> {
    let header = elf::FileHeader64::<Endianness>::parse(data).map_err(|e| Error::elf(path, e))?;
    let endian = header.endian().map_err(|e| Error::elf(path, e))?;
    let sections = header
        .sections(endian, data)
        .map_err(|e| Error::elf(path, e))?;
    for table_kind in [elf::SHT_DYNSYM, elf::SHT_SYMTAB] {
        let table = sections
            .symbols(endian, data, table_kind)
            .map_err(|e| Error::elf(path, e))?;
        for sym in table.iter() {
            if sym.st_shndx(endian) == elf::SHN_UNDEF || kind.is_some_and(|k| sym.st_type() != k) {
                continue;
            }
            let sym_name = table
                .symbol_name(endian, sym)
                .map_err(|e| Error::elf(path, e))?;
            let plain = sym_name.split(|&b| b == b'@').next().unwrap_or(sym_name);
            if plain == name.as_bytes() {
                return Ok(Some(sym.st_value(endian)));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test process was started by the dynamic loader: its hook must be found,
    /// and the byte there must be the loader's code (`ret`, or `endbr64; ret`).
    #[test]
    fn finds_the_loader_hook_of_this_process() {
        let address = debug_state_address(std::process::id())
            .unwrap()
            .expect("a dynamically linked test binary has a loader");
        // SAFETY: the address is in this process's mapped, readable loader text.
        let first = unsafe { std::ptr::read_volatile(address as *const u8) };
        assert!(
            first == 0xc3 || first == 0xf3,
            "byte {first:#x} at {address:#x}"
        );
        // The file offset a uprobe attaches at holds the same byte in the file.
        let site = debug_state_site(std::process::id()).unwrap().unwrap();
        assert_eq!(site.address, address);
        let file = std::fs::read(&site.object).unwrap();
        assert_eq!(
            file[site.file_offset as usize],
            first,
            "{} at {:#x}",
            site.object.display(),
            site.file_offset
        );
    }

    /// The distance to `_r_debug` points at this process's own loader state: its
    /// `r_brk` is the hook's address (the check the hook's program makes).
    #[test]
    fn r_debug_lies_where_the_delta_says() {
        let site = debug_state_site(std::process::id()).unwrap().unwrap();
        let delta = r_debug_delta(&site.object)
            .unwrap()
            .expect("glibc's loader defines _r_debug");
        let r_debug = site.address.wrapping_add(delta as i64 as u64) as *const [u64; 4];
        // SAFETY: the loader's r_debug, mapped and readable in this process.
        let words = unsafe { std::ptr::read_volatile(r_debug) };
        assert_eq!(words[memtrack_common::ld_hook::R_DEBUG_BRK], site.address);
        // Consistent: nothing is being loaded while this test runs.
        assert_eq!(words[memtrack_common::ld_hook::R_DEBUG_STATE] as u32, 0);
    }

    #[test]
    fn a_missing_process_is_process_gone() {
        assert!(matches!(
            debug_state_address(u32::MAX - 1),
            Err(Error::ProcessGone { .. })
        ));
    }
}
