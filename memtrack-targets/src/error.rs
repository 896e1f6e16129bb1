//! The one error type of this crate.
//!
//! Every variant names the process or the file it is about, so that a message
//! printed by the tracker tells the user what to look at without a backtrace.

use std::path::PathBuf;

/// Everything that can go wrong while deciding what to probe.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `/proc/PID/maps` does not exist: the process never existed or has
    /// exited (and been reaped) since its pid was chosen.
    #[error("process {pid} does not exist (no /proc/{pid}/maps)")]
    ProcessGone {
        /// The pid that was asked about.
        pid: u32,
    },

    /// None of the ELF objects mapped by the process defines `malloc`: it is,
    /// for example, a static binary whose allocator symbols were stripped, or
    /// it uses a custom allocator that does not export the C allocator API.
    #[error(
        "process {pid} maps no ELF object that defines malloc (scanned {}): \
         a static binary stripped of its symbols, or an allocator that does \
         not export the C allocator functions",
        display_paths(.objects_scanned)
    )]
    NoAllocator {
        /// The pid that was asked about.
        pid: u32,
        /// The objects whose symbol tables were read.
        objects_scanned: Vec<PathBuf>,
    },

    /// The process runs a 32-bit program (i386, or x32): its allocator calls follow
    /// another calling convention, which memtrack's probes do not read.
    #[error(
        "process {pid} runs a 32-bit program ({}): 32-bit processes are not supported",
        .exe.display()
    )]
    ThirtyTwoBit {
        /// The pid that was asked about.
        pid: u32,
        /// Its executable, as `/proc/PID/exe` names it.
        exe: PathBuf,
    },

    /// A file could not be read (open, read or seek failed).
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file (or `/proc` entry) that failed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A file is not an ELF file, or its ELF structures are malformed.
    #[error("{} is not a readable ELF file: {reason}", .path.display())]
    Elf {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },

    /// A well-formed ELF file that memtrack cannot probe: not 64-bit
    /// little-endian x86_64.
    #[error("{} is not an x86_64 ELF file ({reason})", .path.display())]
    UnsupportedElf {
        /// The file.
        path: PathBuf,
        /// What kind of ELF it is instead.
        reason: String,
    },

    /// The kernel's BTF could not be parsed, or lacks a structure field memtrack needs.
    #[error("BTF {}: {reason}", .path.display())]
    Btf {
        /// The BTF file (`/sys/kernel/btf/vmlinux`).
        path: PathBuf,
        /// What was wrong or missing.
        reason: String,
    },

    /// A symbol's address lies in no `PT_LOAD` segment that has file data, so
    /// it has no file offset a uprobe could be attached at.
    #[error(
        "{symbol} in {}: address {vaddr:#x} lies in no PT_LOAD segment backed by the file",
        .path.display()
    )]
    AddressNotInFile {
        /// The file.
        path: PathBuf,
        /// The symbol whose address could not be converted.
        symbol: String,
        /// Its virtual address (`st_value`).
        vaddr: u64,
    },

    /// An object's `.eh_frame` could not be turned into an unwind table (it does not
    /// parse, or the table would not fit the format).
    #[error("{}: cannot build its unwind table: {reason}", .path.display())]
    UnwindInfo {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps a parse error of the `object` crate with the path it happened on.
    pub(crate) fn elf(path: impl Into<PathBuf>, reason: impl ToString) -> Self {
        Error::Elf {
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "no objects".to_owned();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
