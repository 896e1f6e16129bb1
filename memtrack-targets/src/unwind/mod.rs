//! Unwind tables for the in-kernel stack unwinder, built from each ELF object's
//! `.eh_frame`.
//!
//! Debian's glibc and libstdc++ and Rust release builds have no frame pointers, so the
//! eBPF program that records an allocation's call stack cannot follow `rbp`; it follows
//! the call-frame information every x86_64 object carries for C++ exceptions and Rust
//! panics instead. That information is a program per function (an FDE) that a small
//! interpreter runs to learn, at an instruction, where the caller's frame is. Running it
//! in eBPF is out of the question; this module runs it here, once per file, and keeps
//! for each address range only what the kernel needs: how to compute the canonical frame
//! address (CFA) from `rsp` or `rbp`, and where the caller's `rbp` is saved. The row
//! format and the unwinding step are in `memtrack_common::unwind`; the user-space twin of
//! the eBPF unwinder is [`unwind`].
//!
//! - [`read_object`]: one file's [`UnwindTable`] and [`ObjectInfo`] (build id, `PT_LOAD`
//!   segments, hence the load bias of each of its mappings).
//! - [`UnwindCache`]: tables built once per file (by device and inode, and shared by
//!   build id), and a process's executable mappings with their tables.
//! - [`unwind`]: the reference unwinder.
//!
//! What `.eh_frame` says that the tables cannot express is kept as explicit
//! `UNREPRESENTABLE` rows (with a reason), and code no FDE covers as explicit
//! `NO_UNWIND_INFO` rows: the kernel ends the stack there with a counted unknown frame.
//! Objects with only `.debug_frame` (no `.eh_frame`) get an empty table.
//!
//! # Loading the tables into BPF maps
//!
//! Recommended: one big `BPF_MAP_TYPE_ARRAY` of rows for all objects, each object's
//! table a contiguous extent `(first index, row count)`, which the per-mapping entry
//! the kernel looks up (start, end, bias) carries. Why: aya-ebpf 0.2 has no
//! map-of-maps support (an `ARRAY_OF_MAPS` of per-object arrays would need hand-written
//! map definitions, and inner arrays of different sizes need `BPF_F_INNER_MAP`); one
//! array is one map to create, preallocated once, its size the only limit to report;
//! the binary search then runs over `[first, first + count)` with the same bounded
//! loop ([`memtrack_common::unwind::MAX_SEARCH_STEPS`] steps). Tables are shared: an
//! object mapped by many processes is loaded once. User space allocates extents
//! (first fit, freed when no tracked process maps the object). Sizes measured on
//! Debian 12 (8-byte rows; about one row in nine is an explicit `NO_UNWIND_INFO` row
//! for the padding between two functions):
//!
//! | object                     | FDEs  | table rows | bytes   | build (release) |
//! |----------------------------|-------|------------|---------|-----------------|
//! | libc.so.6 (glibc 2.36)     | 3,713 | 28,274     | 226,192 | 2.4 ms          |
//! | libstdc++.so.6 (GCC 12)    | 4,867 | 34,371     | 274,968 | 3.3 ms          |
//! | ld-linux-x86-64.so.2       | 293   | 2,397      | 19,176  | 0.2 ms          |
//! | small Rust release binary  | 526   | 2,641      | 21,128  | 0.3 ms          |
//!
//! so an array of 1,048,576 rows (8 MiB) holds the tables of a few dozen typical
//! objects. Build times are the fastest of 30 on a loaded 2-core VM
//! (`cargo run --release -p memtrack-targets --example unwind_tables -- FILE...`);
//! a process mapping libc and libstdc++ costs about 6 ms of table building on the
//! attach path the first time, nothing for later processes (the cache). Should that
//! matter, tables can be kept on disk keyed by build id.

mod cache;
mod object;
mod reference;
mod table;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use ::object::read::elf::ElfFile64;
use ::object::{Endianness, ReadCache};

use crate::Error;
use crate::elf::{check_x86_64, pt_loads};

pub use cache::{FileKey, ProcessMapping, SkippedMapping, UnwindCache};
pub use object::{ElfType, ObjectInfo, load_bias};
pub use reference::{Frame, Registers, Stack, StackEnd, unwind};
pub use table::{CFA_RULE_KINDS, TableStats, UNREPRESENTABLE_REASONS, UnwindTable};

/// One ELF object's unwind table with its identity and layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwindObject {
    /// Build id, type and segments (for the load bias of each mapping).
    pub info: ObjectInfo,
    /// The table.
    pub table: UnwindTable,
}

/// Reads the ELF file at `path` (x86_64 only) and builds its unwind table.
pub fn read_object(path: &Path) -> Result<UnwindObject, Error> {
    let (object, _) = read_object_with(path, |_| None)?;
    Ok(Arc::unwrap_or_clone(object))
}

/// Reads the ELF file at `path`; if `reuse` returns an object for its [`ObjectInfo`]
/// (e.g. one with the same build id), returns that with `false`, otherwise builds its
/// table and returns it with `true`.
pub(crate) fn read_object_with(
    path: &Path,
    reuse: impl FnOnce(&ObjectInfo) -> Option<Arc<UnwindObject>>,
) -> Result<(Arc<UnwindObject>, bool), Error> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let cache = ReadCache::new(file);
    check_x86_64(&cache, path)?;
    let elf = ElfFile64::<Endianness, _>::parse(&cache).map_err(|e| Error::elf(path, e))?;
    let segments = pt_loads(elf.elf_program_headers(), elf.endian());
    let info = ObjectInfo::of(&elf, path, segments)?;
    if let Some(found) = reuse(&info) {
        return Ok((found, false));
    }
    let table = table::build(&elf, path, &info.segments)?;
    Ok((Arc::new(UnwindObject { info, table }), true))
}
