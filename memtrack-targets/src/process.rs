//! Putting maps and symbols together: every allocator function of a running
//! process.
//!
//! This module exists to hold the policy decisions that neither `/proc` nor
//! ELF parsing make on their own: which mapped objects are skipped (deleted
//! files, unreadable ones) and when a process counts as having no allocator
//! memtrack can see.

use std::path::PathBuf;

use crate::{AllocFn, Error, ProbeTarget, allocator_targets, mapped_objects};

/// The allocator functions of one process.
///
/// When several objects define `malloc` (libc and, say, `libjemalloc.so`
/// preloaded or linked in), [`ProcessTargets::targets`] holds the functions of
/// all of them: the tracker attaches to every one, and the in-kernel
/// accounting handles nesting (an allocator that calls another one's `malloc`
/// is counted once, at the outermost call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessTargets {
    /// The objects whose symbol tables were read, in address order.
    pub objects_scanned: Vec<PathBuf>,
    /// The functions to probe, grouped by object in the order of
    /// [`ProcessTargets::objects_scanned`].
    pub targets: Vec<ProbeTarget>,
    /// Mapped executable objects that were not scanned, and why.
    pub skipped: Vec<SkippedObject>,
}

impl ProcessTargets {
    /// The targets that stand for `function` (one per defining object).
    pub fn targets_for(&self, function: AllocFn) -> impl Iterator<Item = &ProbeTarget> {
        self.targets.iter().filter(move |t| t.covers(function))
    }
}

/// A mapped executable object that [`process_targets`] did not scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedObject {
    /// The path from `/proc/PID/maps`.
    pub path: PathBuf,
    /// Why it was skipped: the file was deleted or replaced after it was
    /// mapped, or reading its symbols failed (the error message).
    pub reason: String,
}

/// The allocator functions of every ELF object mapped executable by process
/// `pid`.
///
/// Errors: [`Error::ProcessGone`] if the process does not exist;
/// [`Error::ThirtyTwoBit`] if it runs a 32-bit program; [`Error::NoAllocator`] if
/// no scanned object defines `malloc` (e.g. a static binary whose symbols were
/// stripped). Objects that cannot be read do not fail the call; they are listed in
/// [`ProcessTargets::skipped`].
pub fn process_targets(pid: u32) -> Result<ProcessTargets, Error> {
    let mut result = ProcessTargets {
        objects_scanned: Vec::new(),
        targets: Vec::new(),
        skipped: Vec::new(),
    };
    for object in mapped_objects(pid)? {
        if object.deleted {
            result.skipped.push(SkippedObject {
                path: object.path,
                reason: "deleted or replaced since it was mapped; its path names another file"
                    .to_owned(),
            });
            continue;
        }
        match object_targets(&object) {
            Ok(targets) => {
                result.objects_scanned.push(object.path);
                result.targets.extend(targets);
            }
            Err(e) => result.skipped.push(SkippedObject {
                path: object.path,
                reason: e.to_string(),
            }),
        }
    }
    if !result
        .targets
        .iter()
        .any(|t| t.functions().any(|f| f.has_return_probe()))
    {
        // Looked at only here, where it explains why nothing was found: a 32-bit
        // program's objects are all skipped as not x86_64, which says nothing useful.
        if let Some(exe) = thirty_two_bit_executable(pid) {
            return Err(Error::ThirtyTwoBit { pid, exe });
        }
        return Err(Error::NoAllocator {
            pid,
            objects_scanned: result.objects_scanned,
        });
    }
    Ok(result)
}

/// The probe targets of one mapped object: its allocator functions, less the C++
/// operators that only forward to `malloc`/`free` ([`forwards_cxx_operators`]).
fn object_targets(object: &crate::MappedObject) -> Result<Vec<ProbeTarget>, Error> {
    let forwards = forwards_cxx_operators(&object.path);
    let mut targets = cached_targets(object)?;
    targets.retain(|t| !(forwards && t.function.is_cxx_operator()));
    Ok(targets)
}

/// The allocator functions a process stopped at its exec will most likely map once
/// its dynamic loader has run: when that loader is the file this process (memtrack)
/// runs under, the C library this process maps. A program finds `libc.so.6` through
/// the same loader and the same search path in nearly every case, and probing it
/// before the loader maps it lets the kernel register all of the exec's uprobes at
/// once: the first registration after an idle moment waits for an RCU grace period,
/// later ones in the same moment do not. A wrong
/// guess costs an unused probe and nothing else: uprobes belong to a file, and a
/// file the process never maps never fires. Empty when nothing can be guessed (a
/// static executable, another loader, a process in another mount namespace).
pub fn expected_targets(pid: u32) -> Vec<ProbeTarget> {
    let Some(own) = own_runtime() else {
        return Vec::new();
    };
    let Ok(objects) = mapped_objects(pid) else {
        return Vec::new();
    };
    if !objects
        .iter()
        .any(|o| !o.deleted && (o.dev, o.inode) == own.loader)
    {
        return Vec::new();
    }
    own.libraries
        .iter()
        .filter_map(|o| object_targets(o).ok())
        .flatten()
        .collect()
}

/// Reads this process's loader and C library, parses the library's allocator
/// functions (what [`expected_targets`] returns) and decodes their first instructions
/// once (which builds the instruction decoder's and formatter's tables), so that the
/// first exec stop does not wait for any of it: for a thread started while the tracker
/// loads.
pub fn prefetch_expected_targets() {
    if let Some(own) = own_runtime() {
        for object in &own.libraries {
            for target in object_targets(object).unwrap_or_default() {
                let _ = crate::entry_site(&target.object, &target);
            }
        }
    }
}

/// This process's dynamic loader (device and inode) and C library.
struct OwnRuntime {
    loader: ((u32, u32), u64),
    libraries: Vec<crate::MappedObject>,
}

fn own_runtime() -> Option<&'static OwnRuntime> {
    static OWN: std::sync::OnceLock<Option<OwnRuntime>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let objects = mapped_objects(std::process::id()).ok()?;
        let named = |o: &crate::MappedObject, prefix: &str| {
            !o.deleted
                && o.path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix))
        };
        let loader = objects.iter().find(|o| named(o, "ld-"))?;
        let libraries: Vec<_> = objects
            .iter()
            .filter(|o| named(o, "libc.so"))
            .cloned()
            .collect();
        Some(OwnRuntime {
            loader: (loader.dev, loader.inode),
            libraries,
        })
    })
    .as_ref()
}

/// The executable of `pid` if it is a 32-bit ELF file (`ELFCLASS32` in its header).
fn thirty_two_bit_executable(pid: u32) -> Option<PathBuf> {
    use std::io::Read;
    let link = PathBuf::from(format!("/proc/{pid}/exe"));
    let mut ident = [0u8; 5];
    std::fs::File::open(&link)
        .and_then(|mut f| f.read_exact(&mut ident))
        .ok()?;
    let is_32 = ident[..4] == *b"\x7fELF" && ident[4] == object::elf::ELFCLASS32;
    is_32.then(|| std::fs::read_link(&link).unwrap_or(link))
}

/// Whether an object's C++ `operator new`/`delete` only forward to `malloc`/`free`
/// (GNU libstdc++): those are not probed, their calls are counted at `malloc`/`free`.
///
/// Why: an `operator new` is probed with a return probe, which replaces the return
/// address with the kernel's uretprobe trampoline; that address has no unwind
/// information, so a `std::bad_alloc` thrown from inside the probed `operator new`
/// (an allocation failure; libstdc++'s nothrow `new` throws and catches internally)
/// cannot unwind and the program terminates. Where `new` forwards to `malloc`, probing
/// `malloc` alone counts every block exactly and lets exceptions through. Allocators
/// that implement `operator new` themselves (jemalloc, tcmalloc, mimalloc) must be
/// probed there; a failing `new` under them terminates the program (documented).
fn forwards_cxx_operators(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libstdc++"))
}

/// [`allocator_targets`] of a mapped object, remembered by (path, device, inode): a
/// tracker that follows many processes (a shell script, `cargo bench`) sees the same
/// libraries again and again, and the follower rescans mappings while a new image's
/// loader works.
fn cached_targets(object: &crate::MappedObject) -> Result<Vec<crate::ProbeTarget>, Error> {
    type Key = (std::path::PathBuf, (u32, u32), u64);
    static CACHE: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<Key, Vec<crate::ProbeTarget>>>,
    > = std::sync::LazyLock::new(Default::default);
    let key = (object.path.clone(), object.dev, object.inode);
    if let Some(found) = CACHE.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(found);
    }
    let found = allocator_targets(&object.path)?;
    if let Ok(mut cache) = CACHE.lock() {
        cache.insert(key, found.clone());
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_has_libc_malloc() {
        let found = process_targets(std::process::id()).unwrap();
        let malloc: Vec<_> = found.targets_for(AllocFn::Malloc).collect();
        assert!(
            malloc
                .iter()
                .any(|t| t.object.to_string_lossy().contains("libc.so")),
            "{found:#?}"
        );
        for t in &found.targets {
            assert!(found.objects_scanned.contains(&t.object));
        }
    }

    #[test]
    fn missing_process_is_gone() {
        let pid = 0x7fff_fff0;
        let err = process_targets(pid).unwrap_err();
        assert!(
            matches!(err, Error::ProcessGone { pid: p } if p == pid),
            "{err}"
        );
        assert!(err.to_string().contains(&pid.to_string()));
    }
}
