//! Unwind tables built once per file and shared: by the mapped file's (device, inode),
//! and, across copies of one file (a container's libc, a file replaced by an identical
//! one), by build id.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Error;
use crate::maps::{MappingKind, MapsLine, read_maps};
use crate::unwind::{UnwindObject, read_object_with};

/// A file as the kernel identifies it: what `/proc/PID/maps` prints for each mapping,
/// and what `stat` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// Device as (major, minor).
    pub dev: (u32, u32),
    /// Inode number.
    pub inode: u64,
}

impl FileKey {
    /// The key of the file a maps line maps.
    pub fn of_maps_line(line: &MapsLine) -> FileKey {
        FileKey {
            dev: line.dev,
            inode: line.inode,
        }
    }

    /// The key of the file at `path` (following symlinks).
    pub fn of_path(path: &Path) -> Result<FileKey, Error> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        let dev = meta.dev();
        Ok(FileKey {
            dev: (libc::major(dev), libc::minor(dev)),
            inode: meta.ino(),
        })
    }
}

/// The unwind tables built so far, each shared (`Arc`) by every process and mapping
/// that uses its file. Not synchronised: a loader shared between threads wraps it in a
/// mutex.
#[derive(Debug, Default)]
pub struct UnwindCache {
    by_file: HashMap<FileKey, Arc<UnwindObject>>,
    by_build_id: HashMap<Vec<u8>, Arc<UnwindObject>>,
    built: u64,
}

/// One executable mapping of a process, with its object's unwind table: what the
/// loader hands the kernel for each mapping, and what the user-space reference unwinder
/// ([`crate::unwind::unwind`]) reads.
#[derive(Debug, Clone)]
pub struct ProcessMapping {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// Runtime address minus ELF virtual address for this mapping
    /// ([`crate::unwind::ObjectInfo::load_bias`]).
    pub bias: u64,
    /// The mapped object and its table.
    pub object: Arc<UnwindObject>,
}

impl ProcessMapping {
    /// Whether runtime address `addr` lies in the mapping.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// The ELF virtual address of runtime address `addr`.
    pub fn vaddr(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.bias)
    }
}

/// An executable mapping whose table could not be had.
#[derive(Debug)]
pub struct SkippedMapping {
    /// The maps line.
    pub line: MapsLine,
    /// Why.
    pub error: Error,
}

impl UnwindCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The table of the file `key`, reading it from `path` if it is not cached yet. A
    /// file whose build id matches an object already read shares that object's table
    /// (its [`ObjectInfo::path`](crate::unwind::ObjectInfo::path) stays the first path).
    pub fn get_or_build(&mut self, key: FileKey, path: &Path) -> Result<Arc<UnwindObject>, Error> {
        if let Some(found) = self.by_file.get(&key) {
            return Ok(Arc::clone(found));
        }
        let by_build_id = &self.by_build_id;
        let (object, built) = read_object_with(path, |info| {
            info.build_id
                .as_ref()
                .and_then(|id| by_build_id.get(id))
                .map(Arc::clone)
        })?;
        if built {
            self.built += 1;
            if let Some(id) = &object.info.build_id {
                self.by_build_id.insert(id.clone(), Arc::clone(&object));
            }
        }
        self.by_file.insert(key, Arc::clone(&object));
        Ok(object)
    }

    /// The cached table of file `key`, if any.
    pub fn get(&self, key: FileKey) -> Option<Arc<UnwindObject>> {
        self.by_file.get(&key).map(Arc::clone)
    }

    /// Forgets file `key` (its table lives on while anything holds it).
    pub fn remove(&mut self, key: FileKey) {
        if let Some(object) = self.by_file.remove(&key)
            && let Some(id) = &object.info.build_id
            && !self.by_file.values().any(|o| Arc::ptr_eq(o, &object))
        {
            self.by_build_id.remove(id);
        }
    }

    /// Files cached (several files can share one table).
    pub fn files(&self) -> usize {
        self.by_file.len()
    }

    /// Tables built since the cache was made (each file read without a build id match
    /// counts one).
    pub fn tables_built(&self) -> u64 {
        self.built
    }

    /// The executable file mappings of process `pid`, each with its object's table.
    /// Mappings of deleted files are read through `/proc/PID/map_files/` (root only);
    /// pseudo mappings (`[vdso]`) are left out (the unwinder finds no table for them).
    /// Mappings whose object cannot be read or parsed are returned apart, with why.
    pub fn process_mappings(
        &mut self,
        pid: u32,
    ) -> Result<(Vec<ProcessMapping>, Vec<SkippedMapping>), Error> {
        let mut mappings = Vec::new();
        let mut skipped = Vec::new();
        for line in read_maps(pid)? {
            let MappingKind::File { path, deleted } = &line.kind else {
                continue;
            };
            if !line.perms.execute {
                continue;
            }
            let path = if *deleted {
                PathBuf::from(format!(
                    "/proc/{pid}/map_files/{:x}-{:x}",
                    line.start, line.end
                ))
            } else {
                path.clone()
            };
            let found = self.get_or_build(FileKey::of_maps_line(&line), &path);
            let object = match found {
                Ok(object) => object,
                Err(error) => {
                    skipped.push(SkippedMapping { line, error });
                    continue;
                }
            };
            let Some(bias) = object.info.load_bias(line.start, line.offset, line.perms) else {
                let error = Error::Elf {
                    path,
                    reason: format!(
                        "no PT_LOAD segment holds file offset {:#x}, mapped at {:#x}",
                        line.offset, line.start
                    ),
                };
                skipped.push(SkippedMapping { line, error });
                continue;
            };
            mappings.push(ProcessMapping {
                start: line.start,
                end: line.end,
                bias,
                object,
            });
        }
        Ok((mappings, skipped))
    }
}
