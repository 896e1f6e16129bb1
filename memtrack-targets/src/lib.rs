//! Decides **what** memtrack probes in a process: which mapped ELF objects
//! define allocator functions, at which file offsets the kernel's uprobe API
//! must attach, and at which instruction inside each function the entry probe
//! is cheapest.
//!
//! The crate is pure parsing (`/proc/PID/maps`, ELF symbol tables and program
//! headers, x86_64 machine code); it attaches nothing and needs no privileges
//! beyond reading the files involved, so everything here is testable without
//! root.
//!
//! - [`maps`]: which ELF files a process has mapped executable.
//! - [`elf`]: the allocator symbols of one ELF file and their file offsets.
//! - [`process`]: both together for a running process.
//! - [`probe_site`]: the cheapest instruction for the entry probe.
//! - [`unwind`]: unwind tables from `.eh_frame` for the in-kernel stack unwinder.
//! - [`dynamic_loader`]: where the loader's hook for debuggers (`_dl_debug_state`) is.
//! - [`btf`]: offsets of the kernel's structure fields an eBPF program reads.
//!
//! # Example
//!
//! ```
//! use memtrack_targets::{AllocFn, entry_site, process_targets};
//!
//! // The allocator functions of this very process (its libc, at least).
//! let found = process_targets(std::process::id())?;
//! for target in found.targets_for(AllocFn::Malloc) {
//!     let site = entry_site(&target.object, target)?;
//!     println!(
//!         "{}: {} at file offset {:#x}; entry probe at +{} ({}): {}",
//!         target.object.display(),
//!         target.symbol,
//!         target.file_offset,
//!         site.offset_in_function,
//!         site.instruction,
//!         site.reason,
//!     );
//!     // uprobe attach offset for the entry probe:
//!     let _offset = target.file_offset + site.offset_in_function;
//! }
//! # Ok::<(), memtrack_targets::Error>(())
//! ```

#![warn(missing_docs)]

pub mod alloc_fn;
pub mod btf;
pub mod dynamic_loader;
pub mod elf;
mod error;
pub mod maps;
pub mod probe_site;
pub mod process;
pub mod unwind;

pub use alloc_fn::{AllocFn, Kind};
pub use btf::task_signal_offsets;
pub use dynamic_loader::{DebugStateSite, debug_state_address, debug_state_site, r_debug_delta};
pub use elf::{
    LoadSegment, ProbeTarget, allocator_targets, function_bytes, has_interpreter, load_segments,
    vaddr_to_file_offset,
};
pub use error::Error;
/// The register type of [`choose_entry_site`] and
/// [`AllocFn::argument_registers`], re-exported from `iced-x86`.
pub use iced_x86::Register;
pub use maps::{MappedObject, MappingKind, MapsLine, Perms, mapped_objects, parse_maps, read_maps};
pub use probe_site::{ProbeSite, choose_entry_site, entry_site};
pub use process::{
    ProcessTargets, SkippedObject, expected_targets, prefetch_expected_targets, process_targets,
};
