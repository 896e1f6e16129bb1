//! What the kernel and the symbolizer need to know about one ELF object besides its
//! unwind table: its build id, whether it is position-dependent, and its `PT_LOAD`
//! segments, from which a mapping's load bias follows.
//!
//! # From a runtime address to an ELF virtual address
//!
//! A `/proc/PID/maps` line `start-end perms offset ...` of the object maps file offset
//! `offset` at address `start`. The `PT_LOAD` segment whose file range contains
//! `offset` maps file offset `f` to virtual address `f - p_offset + p_vaddr`. So a
//! runtime address `a` in that mapping is the ELF virtual address
//!
//! ```text
//! vaddr = a - bias,   bias = start - offset + p_offset - p_vaddr   (mod 2^64)
//! ```
//!
//! The loader maps every segment at one bias, so it is the same for every mapping of
//! the object: 0 for a position-dependent executable (`ET_EXEC`, static or not), the
//! load address for a PIE executable, a static PIE or a shared library (`ET_DYN`).
//!
//! Which segment a mapping is must be decided with its permissions, not its offset
//! alone: one file page can belong to two segments at virtual addresses a page apart
//! (rust-lld, rustc's default linker, starts the text segment in the page where the
//! read-only segment ends, one page higher in memory), and the page is then mapped
//! twice, read-only and executable.

use std::path::{Path, PathBuf};

use object::Object;

use crate::elf::LoadSegment;
use crate::maps::Perms;

/// How the object was linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElfType {
    /// `ET_EXEC`: a position-dependent executable (static or dynamic), mapped at its
    /// link-time addresses (bias 0).
    Executable,
    /// `ET_DYN`: a PIE executable, a static PIE or a shared library, mapped at a bias
    /// chosen at load time.
    Dynamic,
}

/// One ELF object's identity and layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The path the object was read from.
    pub path: PathBuf,
    /// The `NT_GNU_BUILD_ID` note's bytes (usually 20: a SHA-1), if the object has one.
    pub build_id: Option<Vec<u8>>,
    /// Position-dependent or not.
    pub elf_type: ElfType,
    /// The `PT_LOAD` segments, in program-header order.
    pub segments: Vec<LoadSegment>,
}

/// The page size the kernel maps files with on x86_64, in bytes: a mapping's file
/// offset is a segment's `p_offset` rounded down to it.
const PAGE_SIZE: u64 = 4096;

impl ObjectInfo {
    /// Reads the identity and layout of an already parsed object.
    pub(crate) fn of<'data, R: object::ReadRef<'data>>(
        file: &object::read::elf::ElfFile64<'data, object::Endianness, R>,
        path: &Path,
        segments: Vec<LoadSegment>,
    ) -> Result<Self, crate::Error> {
        use object::read::elf::FileHeader;
        let build_id = file
            .build_id()
            .map_err(|e| crate::Error::elf(path, format!("build id note: {e}")))?
            .map(<[u8]>::to_vec);
        let e_type = file.elf_header().e_type(file.endian());
        let elf_type = match e_type {
            object::elf::ET_EXEC => ElfType::Executable,
            object::elf::ET_DYN => ElfType::Dynamic,
            other => {
                return Err(crate::Error::UnsupportedElf {
                    path: path.to_owned(),
                    reason: format!("e_type {other}, neither an executable nor a shared object"),
                });
            }
        };
        Ok(ObjectInfo {
            path: path.to_owned(),
            build_id,
            elf_type,
            segments,
        })
    }

    /// The build id in lowercase hex (how `file`, `readelf -n` and debuginfod spell it).
    pub fn build_id_hex(&self) -> Option<String> {
        use std::fmt::Write;
        self.build_id.as_ref().map(|id| {
            id.iter().fold(String::new(), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            })
        })
    }

    /// The load bias of the mapping of this object that maps file offset
    /// `mapping_offset` at address `mapping_start` with permissions `perms` (the first
    /// three fields of a `/proc/PID/maps` line): runtime address minus ELF virtual
    /// address, modulo 2^64 (see the module docs). `None` if no `PT_LOAD` segment's file
    /// data contains that offset.
    pub fn load_bias(&self, mapping_start: u64, mapping_offset: u64, perms: Perms) -> Option<u64> {
        load_bias(&self.segments, mapping_start, mapping_offset, perms)
    }
}

/// [`ObjectInfo::load_bias`] over the segments alone. Of the segments whose file data
/// (from `p_offset` rounded down to a page) holds `mapping_offset`, the one whose
/// executable and writable flags are the mapping's wins, and among those one the mapping
/// begins at (a mapping can also begin inside a segment: `mprotect` of part of it, as
/// for RELRO, splits it); if no segment has the mapping's flags, the first that holds
/// the offset.
pub fn load_bias(
    segments: &[LoadSegment],
    mapping_start: u64,
    mapping_offset: u64,
    perms: Perms,
) -> Option<u64> {
    let page_start = |s: &LoadSegment| s.offset & !(PAGE_SIZE - 1);
    let holding: Vec<&LoadSegment> = segments
        .iter()
        .filter(|s| page_start(s) <= mapping_offset && mapping_offset < s.offset + s.filesz)
        .collect();
    let same_flags = |s: &&&LoadSegment| {
        s.is_executable() == perms.execute && (s.flags & object::elf::PF_W != 0) == perms.write
    };
    let segment = holding
        .iter()
        .filter(same_flags)
        .find(|s| page_start(s) == mapping_offset)
        .or_else(|| holding.iter().find(same_flags))
        .or_else(|| holding.first())?;
    Some(
        mapping_start
            .wrapping_sub(mapping_offset)
            .wrapping_add(segment.offset)
            .wrapping_sub(segment.vaddr),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::elf::{PF_R, PF_W, PF_X};

    fn segment(vaddr: u64, offset: u64, filesz: u64, flags: u32) -> LoadSegment {
        LoadSegment {
            vaddr,
            offset,
            filesz,
            memsz: filesz,
            flags,
        }
    }

    fn perms(spec: &str) -> Perms {
        Perms {
            read: spec.contains('r'),
            write: spec.contains('w'),
            execute: spec.contains('x'),
            shared: false,
        }
    }

    #[test]
    fn position_dependent_executables_have_bias_zero() {
        // gcc -no-pie: text at 0x401000 from file offset 0x1000.
        let segments = [
            segment(0x400000, 0, 0x600, PF_R),
            segment(0x401000, 0x1000, 0x1d5, PF_R | PF_X),
        ];
        assert_eq!(
            load_bias(&segments, 0x401000, 0x1000, perms("r-x")),
            Some(0)
        );
        assert_eq!(load_bias(&segments, 0x400000, 0, perms("r--")), Some(0));
    }

    #[test]
    fn shared_objects_are_biased_by_their_load_address() {
        // libc.so.6-like: the text segment's p_vaddr equals its p_offset...
        let libc = [
            segment(0, 0, 0x26000, PF_R),
            segment(0x26000, 0x26000, 0x155000, PF_R | PF_X),
            segment(0x1d5f10, 0x1d4f10, 0x5000, PF_R | PF_W),
        ];
        let base = 0x7f1c_0a80_2000;
        assert_eq!(
            load_bias(&libc, base + 0x26000, 0x26000, perms("r-x")),
            Some(base)
        );
        // ...the data segment's does not (one page apart), and its mapping starts at
        // its p_offset rounded down to a page; RELRO's mprotect splits it.
        assert_eq!(
            load_bias(&libc, base + 0x1d5000, 0x1d4000, perms("rw-")),
            Some(base)
        );
        assert_eq!(
            load_bias(&libc, base + 0x1d5000, 0x1d4000, perms("r--")),
            Some(base)
        );
        assert_eq!(
            load_bias(&libc, base + 0x1d6000, 0x1d5000, perms("rw-")),
            Some(base)
        );
        // An offset no segment's file data covers.
        assert_eq!(load_bias(&libc, base, 0x1e0000, perms("r--")), None);
    }

    #[test]
    fn a_file_page_shared_by_two_segments_is_told_apart_by_permissions() {
        // rust-lld: the read-only segment ends at 0x13060 in the file, the text
        // segment begins there but one page higher in memory.
        let rust = [
            segment(0, 0, 0x13060, PF_R),
            segment(0x14060, 0x13060, 0x3dae0, PF_R | PF_X),
            segment(0x52b40, 0x50b40, 0x27a0, PF_R | PF_W),
        ];
        let base = 0x5618_0000_0000;
        // The text mapping: file offset 0x13000 at base + 0x14000.
        assert_eq!(
            load_bias(&rust, base + 0x14000, 0x13000, perms("r-x")),
            Some(base)
        );
        // The read-only mapping of the same page, at base + 0x13000.
        assert_eq!(load_bias(&rust, base, 0, perms("r--")), Some(base));
        assert_eq!(
            load_bias(&rust, base + 0x52000, 0x50000, perms("rw-")),
            Some(base)
        );
    }
}
