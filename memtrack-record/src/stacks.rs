//! Call stacks of allocations, aggregated per stack: the data model that the kernel side
//! fills while a process runs and that `memtrack report --stacks` symbolizes and shows
//! after the run (memtrack-cli: terminal view, DHAT JSON, pprof, flamegraphs).
//!
//! Everything needed to symbolize a stack after the process exited is recorded here
//! while it lives: each frame is an address **inside an object file** (executable or
//! shared library, named by path and GNU build id), not a runtime address, so neither the
//! process's memory map nor the process itself is needed later.
//!
//! The shape, for one process:
//!
//! - [`ProcessStacks::objects`]: the object files frames point into;
//! - [`ProcessStacks::stacks`]: every distinct stack seen, a [`StackId`] is its index;
//! - [`ProcessStacks::process`]: per-stack counters of the whole process;
//! - [`ProcessStacks::regions`]: the same per marked benchmark region;
//! - [`ProcessStacks::earlier_images`]: the same per image the process ran before its
//!   last `execve`, oldest first.
//!
//! All counts follow memtrack's counting convention (blocks, as valgrind DHAT counts
//! them; see [`Stats`](crate::Stats)), and a free is charged to the stack that allocated
//! the block. The per-stack numbers of a scope plus its [`ScopeStacks::lost`] add up
//! exactly to the scope's [`Stats`](crate::Stats).
//!
//! The data model depends on serde alone, so that the result files can carry it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::FileRefused;
pub use crate::error::InvalidStacks;

/// Index of a stack in [`ProcessStacks::stacks`].
pub type StackId = u32;

/// Index of an object in [`ProcessStacks::objects`].
pub type ObjectId = u32;

/// The stacks of one tracked process and their counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStacks {
    /// The most frames a stack holds (the unwinder's depth limit); a stack that reached
    /// it ends with [`StackEnd::Truncated`].
    pub depth_limit: u32,
    /// The object files the frames point into, recorded while the process lived.
    pub objects: Vec<StackObject>,
    /// Every distinct stack; a [`StackId`] is an index into this list. Two entries never
    /// have the same frames and end.
    pub stacks: Vec<Stack>,
    /// Per-stack counters of the whole process (or, when benchmark regions were marked,
    /// of all regions together, as the process's `stats` are).
    pub process: ScopeStacks,
    /// Per-stack counters of each marked benchmark region, in the order of the result's
    /// `benchmarks` (empty when no region was marked).
    #[serde(default)]
    pub regions: Vec<RegionStacks>,
    /// Per-stack counters of each image the process ran before its last `execve`,
    /// oldest first: the `i`-th is the image of the result's `earlier_images[i]`, and
    /// its totals equal that image's counters. [`process`](Self::process) then covers
    /// the last image only (from its exec), as the result's `stats` do. Every scope
    /// shares the one [`stacks`](Self::stacks) and [`objects`](Self::objects) tables.
    /// Empty for a process that never exec'd, and in files written before memtrack
    /// kept each image's stacks (2026-12-07): those name the earlier images' counters
    /// only. A field added without a new version: a reader that does not know it reads
    /// the last image, as it always did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_images: Vec<ScopeStacks>,
}

/// An object file (executable or shared library) that frames point into.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StackObject {
    /// Its path as the process mapped it (`/proc/PID/maps`).
    pub path: PathBuf,
    /// Its GNU build id (the `NT_GNU_BUILD_ID` note), lowercase hex; `None` if it has
    /// none. The symbolizer checks it, so a file replaced since the run is noticed.
    pub build_id: Option<String>,
}

/// One frame of a stack: an instruction address inside an object, normally a return
/// address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Frame {
    /// The object the address is in; `None` for code outside any file-backed mapping
    /// (JIT code, for example), whose `address` is then the runtime address.
    pub object: Option<ObjectId>,
    /// The address as an ELF virtual address of the object, i.e. the runtime address
    /// minus the object's load bias (see [`elf_address`]): a return address (just after
    /// the call instruction), unless `interrupted`.
    pub address: u64,
    /// `address` is the instruction a signal interrupted (the frame below a signal
    /// handler), not a return address.
    #[serde(default)]
    pub interrupted: bool,
}

impl Frame {
    /// The frame of a return address `address` in `object`.
    pub fn returning_to(object: Option<ObjectId>, address: u64) -> Frame {
        Frame {
            object,
            address,
            interrupted: false,
        }
    }

    /// The address to symbolize: the call instruction's last byte (`address - 1`) for a
    /// return address, since the return address may belong to the next line or even the
    /// next function; `address` itself for an interrupted instruction.
    pub fn lookup_address(&self) -> u64 {
        if self.interrupted {
            self.address
        } else {
            self.address.saturating_sub(1)
        }
    }
}

/// How unwinding ended after a stack's last (outermost) frame.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum StackEnd {
    /// The outermost frame was reached (its caller is undefined by the unwind rules,
    /// e.g. `_start` or a thread's start routine).
    #[default]
    Complete,
    /// The depth limit was reached; outer frames are missing.
    Truncated,
    /// The last frame had no unwind information (or its caller's frame could not be
    /// read), so its callers are unknown. Shown as an explicit `[unknown]` frame.
    Unknown,
}

/// A distinct call stack of allocations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Stack {
    /// Innermost first: the first frame is the return address into the function that
    /// called the allocation function (`malloc`, `operator new`, ...), the next one its
    /// caller's, and so on outwards.
    pub frames: Vec<Frame>,
    /// How unwinding ended after the last frame.
    pub end: StackEnd,
}

/// The per-stack counters of one scope: the whole process, or one benchmark region.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeStacks {
    /// When the scope began, `CLOCK_MONOTONIC` ns.
    pub start_ns: u64,
    /// When it ended (process exit, end of the region, or when the counters were read),
    /// `CLOCK_MONOTONIC` ns.
    pub end_ns: u64,
    /// When the scope's live bytes reached their highest value (its "t-gmax", the
    /// instant the `at_peak_*` counters describe), `CLOCK_MONOTONIC` ns; `None` if no
    /// block was ever live.
    pub peak_ns: Option<u64>,
    /// The same instant on the scope's allocation clock, the clock the lifetimes are
    /// measured on ([`StackCounts::total_lifetime`]): the requested bytes the scope
    /// had allocated then, in bytes; `None` if no block was ever live, or in a file
    /// written before version 2.
    #[serde(default)]
    pub peak_bytes_allocated: Option<u64>,
    /// The allocation clock at the scope's end: the requested bytes allocated in the
    /// scope (by every call, with a stack or not), in bytes; `None` in a file written
    /// before version 2.
    #[serde(default)]
    pub bytes_allocated: Option<u64>,
    /// Every stack with at least one allocation in this scope, each once.
    pub entries: Vec<StackEntry>,
    /// Allocations whose stack could not be stored (the kernel's stack map was full),
    /// with their frees: counted, never silently dropped.
    #[serde(default)]
    pub lost: StackCounts,
}

impl ScopeStacks {
    /// Moves the scope's end to `end_ns` (`CLOCK_MONOTONIC` ns): the kernel's counters
    /// are read a moment after a process exits or a region ends, and the scope ends at
    /// that exit or end. The lifetimes do not move: their clock, the bytes allocated,
    /// stands still while nothing is allocated.
    pub fn set_end(&mut self, end_ns: u64) {
        self.end_ns = end_ns;
    }
}

/// One stack's counters in a scope.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackEntry {
    /// The stack ([`ProcessStacks::stacks`] index).
    pub stack: StackId,
    /// Its counters in this scope.
    pub counts: StackCounts,
}

/// The counters of one stack (or of the lost stacks) in one scope. Sizes are requested
/// sizes in bytes; blocks are counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCounts {
    /// Blocks allocated from this stack.
    pub alloc_blocks: u64,
    /// Bytes of those blocks.
    pub alloc_bytes: u64,
    /// Blocks allocated from this stack and released (by any code).
    pub freed_blocks: u64,
    /// Bytes of those blocks.
    pub freed_bytes: u64,
    /// Blocks allocated from this stack still live at the scope's end ("t-end").
    pub live_blocks: u64,
    /// Bytes of those blocks.
    pub live_bytes: u64,
    /// Blocks of this stack live at the scope's global peak ("t-gmax": the instant its
    /// total live bytes were highest, [`ScopeStacks::peak_ns`]).
    pub at_peak_blocks: u64,
    /// Bytes of those blocks.
    pub at_peak_bytes: u64,
    /// The most bytes of this stack live at any one instant (DHAT's "max").
    pub max_live_bytes: u64,
    /// Blocks of this stack live at that instant.
    pub max_live_blocks: u64,
    /// Sum of the lifetimes of this stack's blocks, each measured in the requested
    /// bytes the process allocated while the block was live (from just after its own
    /// allocation to its release, or to the scope's end for blocks still live; a
    /// realloc's new block is not in its old block's lifetime), in bytes: the
    /// allocation clock, which memtrack's own cost per call does not stretch and which
    /// is the same in every run of a deterministic program. `None` when not recorded,
    /// and in files written before version 2 (their lifetimes were in ns).
    #[serde(default)]
    pub total_lifetime: Option<u64>,
}

/// One benchmark region's stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionStacks {
    /// The benchmark's uri, as in the result's `benchmarks`.
    pub uri: String,
    /// Its per-stack counters (only calls made inside the region).
    pub counters: ScopeStacks,
}

impl StackCounts {
    /// Adds `other`'s counters to these (saturating). Maxima add too, which is what a
    /// sum over stacks needs as an upper bound, not an exact maximum; a lifetime sum
    /// stays known only if both are, a side without blocks counting as known (zero).
    pub fn add(&mut self, other: &StackCounts) {
        // A sum over no blocks is known (zero) whether recorded or not.
        self.total_lifetime = match (self.total_lifetime, other.total_lifetime) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (None, b) if !self.has_blocks() => b,
            (a, None) if !other.has_blocks() => a,
            _ => None,
        };
        self.alloc_blocks = self.alloc_blocks.saturating_add(other.alloc_blocks);
        self.alloc_bytes = self.alloc_bytes.saturating_add(other.alloc_bytes);
        self.freed_blocks = self.freed_blocks.saturating_add(other.freed_blocks);
        self.freed_bytes = self.freed_bytes.saturating_add(other.freed_bytes);
        self.live_blocks = self.live_blocks.saturating_add(other.live_blocks);
        self.live_bytes = self.live_bytes.saturating_add(other.live_bytes);
        self.at_peak_blocks = self.at_peak_blocks.saturating_add(other.at_peak_blocks);
        self.at_peak_bytes = self.at_peak_bytes.saturating_add(other.at_peak_bytes);
        self.max_live_bytes = self.max_live_bytes.saturating_add(other.max_live_bytes);
        self.max_live_blocks = self.max_live_blocks.saturating_add(other.max_live_blocks);
    }

    /// Whether any block was counted here (allocated, released or live).
    fn has_blocks(&self) -> bool {
        self.alloc_blocks != 0 || self.freed_blocks != 0 || self.live_blocks != 0
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        let lifetime = self.total_lifetime.unwrap_or(0);
        [
            self.alloc_blocks,
            self.alloc_bytes,
            self.freed_blocks,
            self.freed_bytes,
            self.live_blocks,
            self.live_bytes,
            self.at_peak_blocks,
            self.at_peak_bytes,
            self.max_live_bytes,
            self.max_live_blocks,
            lifetime,
        ]
        .iter()
        .all(|&n| n == 0)
    }
}

impl ScopeStacks {
    /// The scope's totals: every entry plus [`lost`](Self::lost). Blocks, bytes,
    /// frees, live at end and at peak equal the scope's `Stats`; `max_live_*` is the
    /// sum of the per-stack maxima.
    pub fn total(&self) -> StackCounts {
        let mut total = self.lost.clone();
        for entry in &self.entries {
            total.add(&entry.counts);
        }
        total
    }
}

/// Suffix of the stacks files beside the result files: `{pid}.MemtrackStacks.msgpack`.
/// A file of its own, not a field of the result: result files are read by every report
/// and bounded at [`MAX_RESULT_FILE_BYTES`](crate::MAX_RESULT_FILE_BYTES), while a
/// process's stacks can be far larger and are read only by `memtrack report --stacks`.
pub const STACKS_FILE_SUFFIX: &str = ".MemtrackStacks.msgpack";

/// The stacks file format version this build writes, and the newest it reads (a
/// `schema_version` field beside [`ProcessStacks`]' own; files without it are version
/// 1). Fields added later carry `#[serde(default)]`, so older files stay readable.
///
/// Version 2 measures lifetimes in bytes allocated (`StackCounts::total_lifetime`) and
/// adds the scope's allocation clock (`ScopeStacks::bytes_allocated`,
/// `ScopeStacks::peak_bytes_allocated`); version 1's lifetimes, in ns, are not read
/// (a version 1 file reads with no lifetimes).
pub const STACKS_SCHEMA_VERSION: u32 = 2;

/// A stacks file as written: its version, then the stacks' fields.
#[derive(Serialize)]
struct StacksFileOut<'a> {
    schema_version: u32,
    #[serde(flatten)]
    stacks: &'a ProcessStacks,
}

/// The version of a stacks file, read before the rest.
#[derive(Deserialize)]
struct StacksFileVersion {
    #[serde(default)]
    schema_version: Option<u32>,
}

/// The most frames the kernel unwinds per stack (the largest depth
/// memtrack-core's `TrackerBuilder::stacks` takes): 64, all a kernel
/// stack key holds (512 bytes, the kernel's limit for hash map keys), walked by a chain
/// of tail calls. A deeper stack is cut there and marked [`StackEnd::Truncated`].
pub const MAX_DEPTH: u32 = memtrack_common::stacks::MAX_UNWIND_DEPTH;

/// The depth, in frames, that `memtrack run --stacks` uses without `=DEPTH`: the most,
/// [`MAX_DEPTH`].
#[deprecated(since = "0.1.0", note = "the default depth is the most: use MAX_DEPTH")]
pub const DEFAULT_DEPTH: u32 = MAX_DEPTH;

/// A stack depth out of range, or not a depth at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a stack depth from 1 to {MAX_DEPTH} (or max)")]
pub struct BadDepth {
    /// What was given.
    pub value: String,
}

/// A stack depth as people write it (`memtrack run --stacks=DEPTH`, the benchmark
/// integrations' `MEMTRACK_STACKS`): 1 to [`MAX_DEPTH`] frames, or `max` for
/// [`MAX_DEPTH`].
pub fn parse_depth(value: &str) -> Result<u32, BadDepth> {
    if value == "max" {
        return Ok(MAX_DEPTH);
    }
    match value.parse::<u32>() {
        Ok(depth) if is_depth(depth) => Ok(depth),
        _ => Err(BadDepth {
            value: value.to_string(),
        }),
    }
}

/// Whether stacks can be recorded to `depth` frames: 1 to [`MAX_DEPTH`].
pub fn is_depth(depth: u32) -> bool {
    (1..=MAX_DEPTH).contains(&depth)
}

/// The name of process `pid`'s stacks file: `{pid}.MemtrackStacks.msgpack`.
pub fn stacks_file_name(pid: u32) -> String {
    format!("{pid}{STACKS_FILE_SUFFIX}")
}

/// Whether `name` is a stacks file's name (`{pid}.MemtrackStacks.msgpack`, the pid in
/// decimal digits).
pub fn is_stacks_file_name(name: &str) -> bool {
    name.strip_suffix(STACKS_FILE_SUFFIX)
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// How the kernel found the stacks of the allocations it counted, across every process
/// of a tracker (diagnostics: neither is a loss). An allocation whose stack still holds
/// every word an earlier walk from the same registers read reuses that walk's stack,
/// exactly (docs/ARCHITECTURE.md, "Call stacks"); the others are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackWalks {
    /// Allocations whose stack was walked, in calls.
    pub walked: u64,
    /// Allocations whose stack was reused from the cache without a walk, in calls.
    pub reused: u64,
}

/// Allocations whose stack is not complete, in blocks allocated (see
/// [`ProcessStacks::incomplete`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IncompleteStacks {
    /// Blocks whose stack was cut at the depth limit ([`StackEnd::Truncated`]).
    pub truncated_blocks: u64,
    /// Blocks whose stack ended at a frame without unwind information
    /// ([`StackEnd::Unknown`]).
    pub unknown_blocks: u64,
    /// Blocks whose stack could not be stored ([`ScopeStacks::lost`]).
    pub lost_blocks: u64,
}

impl ProcessStacks {
    /// The stacks as a stacks file holds them: one MessagePack map with named fields,
    /// `schema_version` ([`STACKS_SCHEMA_VERSION`]) among them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let file = StacksFileOut {
            schema_version: STACKS_SCHEMA_VERSION,
            stacks: self,
        };
        rmp_serde::to_vec_named(&file).expect("stacks always serialise")
    }

    /// The stacks of a stacks file's bytes (references not checked: see
    /// [`validate`](Self::validate)), or why they are not: corrupt or truncated
    /// MessagePack, or a version newer than this build reads.
    pub fn from_bytes(bytes: &[u8]) -> Result<ProcessStacks, FileRefused> {
        let version: StacksFileVersion =
            rmp_serde::from_slice(bytes).map_err(FileRefused::CorruptStacks)?;
        let version = version.schema_version.unwrap_or(1);
        if version > STACKS_SCHEMA_VERSION {
            return Err(FileRefused::FutureStacks {
                found: version,
                supported: STACKS_SCHEMA_VERSION,
            });
        }
        rmp_serde::from_slice(bytes).map_err(FileRefused::CorruptStacks)
    }

    /// Reads a stacks file and checks its references: a regular file of at most
    /// [`MAX_STACKS_FILE_BYTES`](crate::MAX_STACKS_FILE_BYTES), read as result files are
    /// (never through a symbolic link, never blocking on a FIFO or a device).
    pub fn read_from(path: &Path) -> crate::Result<ProcessStacks> {
        let refused = |cause| crate::Error::StacksFile {
            path: path.to_path_buf(),
            cause,
        };
        let bytes = crate::bounded_read::read_path(path, crate::bounded_read::STACKS_FILES)?
            .map_err(refused)?;
        let stacks = ProcessStacks::from_bytes(&bytes).map_err(refused)?;
        stacks
            .validate()
            .map_err(|e| refused(FileRefused::Inconsistent(e)))?;
        Ok(stacks)
    }

    /// Writes `{pid}.MemtrackStacks.msgpack` ([`stacks_file_name`]) for process `pid`
    /// into `out`, as result files are written (a temporary file created through the
    /// directory's handle, renamed into place). Returns its path.
    pub fn write_to(&self, out: &crate::OutputDir, pid: u32) -> crate::Result<PathBuf> {
        out.write_file(&stacks_file_name(pid), &self.to_bytes())
    }

    /// How the stacks of the whole process ended, in blocks allocated, over every image
    /// it ran ([`earlier_images`](Self::earlier_images) and the last): those cut at the
    /// depth limit, those that reached a frame without unwind information, and those
    /// whose stack could not be stored (the kernel's stack map full).
    pub fn incomplete(&self) -> IncompleteStacks {
        let mut out = IncompleteStacks::default();
        for scope in self.earlier_images.iter().chain([&self.process]) {
            out.lost_blocks += scope.lost.alloc_blocks;
            for entry in &scope.entries {
                match self.stacks.get(entry.stack as usize).map(|s| s.end) {
                    Some(StackEnd::Truncated) => out.truncated_blocks += entry.counts.alloc_blocks,
                    Some(StackEnd::Unknown) => out.unknown_blocks += entry.counts.alloc_blocks,
                    _ => {}
                }
            }
        }
        out
    }

    /// How many images the process ran: its earlier ones and the last.
    pub fn image_count(&self) -> usize {
        self.earlier_images.len() + 1
    }

    /// The scope of image `number` (1 for the first image the process ran, up to
    /// [`image_count`](Self::image_count) for the last, which is
    /// [`process`](Self::process)), if it ran that many.
    pub fn image(&self, number: usize) -> Option<&ScopeStacks> {
        let index = number.checked_sub(1)?;
        match index.cmp(&self.earlier_images.len()) {
            std::cmp::Ordering::Less => self.earlier_images.get(index),
            std::cmp::Ordering::Equal => Some(&self.process),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// The scope of the benchmark region named `uri`, if there is one.
    pub fn region(&self, uri: &str) -> Option<&ScopeStacks> {
        self.regions
            .iter()
            .find(|r| r.uri == uri)
            .map(|r| &r.counters)
    }

    /// Whether these stacks can be those of a process whose result names
    /// `result_images` earlier images: the same number, or none at all (a file written
    /// before memtrack kept each image's stacks).
    pub fn check_images(&self, result_images: usize) -> Result<(), FileRefused> {
        let stacks = self.earlier_images.len();
        if stacks == 0 || stacks == result_images {
            Ok(())
        } else {
            Err(FileRefused::OtherImages {
                stacks,
                result: result_images,
            })
        }
    }

    /// Checks that every reference points at something: frames at objects, entries at
    /// stacks, each stack at most once per scope, and no stack listed twice.
    pub fn validate(&self) -> Result<(), InvalidStacks> {
        for (id, stack) in self.stacks.iter().enumerate() {
            for (depth, frame) in stack.frames.iter().enumerate() {
                if let Some(object) = frame.object
                    && object as usize >= self.objects.len()
                {
                    return Err(InvalidStacks::NoSuchObject {
                        stack: id,
                        depth,
                        object,
                        objects: self.objects.len(),
                    });
                }
            }
        }
        let mut sorted: Vec<(&Stack, usize)> = self
            .stacks
            .iter()
            .enumerate()
            .map(|(i, s)| (s, i))
            .collect();
        sorted.sort();
        for pair in sorted.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(InvalidStacks::Duplicate(pair[0].1, pair[1].1));
            }
        }
        let scopes = std::iter::once(("the process".to_string(), &self.process))
            .chain(
                self.regions
                    .iter()
                    .map(|r| (format!("region {:?}", r.uri), &r.counters)),
            )
            .chain(
                self.earlier_images
                    .iter()
                    .enumerate()
                    .map(|(i, scope)| (format!("earlier image {i}"), scope)),
            );
        for (name, scope) in scopes {
            let mut seen = vec![false; self.stacks.len()];
            for entry in &scope.entries {
                let Some(slot) = seen.get_mut(entry.stack as usize) else {
                    return Err(InvalidStacks::NoSuchStack {
                        scope: name,
                        stack: entry.stack,
                        stacks: self.stacks.len(),
                    });
                };
                if std::mem::replace(slot, true) {
                    return Err(InvalidStacks::ListedTwice {
                        scope: name,
                        stack: entry.stack,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The ELF virtual address of a runtime address `addr` inside a mapping of an object:
/// the mapping starts at `map_start` with file offset `map_offset` (`/proc/PID/maps`),
/// and comes from the `PT_LOAD` segment with file offset `segment_offset` and virtual
/// address `segment_vaddr`. That is `addr - map_start + map_offset - segment_offset +
/// segment_vaddr` (wrapping, as addresses do).
pub fn elf_address(
    addr: u64,
    map_start: u64,
    map_offset: u64,
    segment_offset: u64,
    segment_vaddr: u64,
) -> u64 {
    addr.wrapping_sub(map_start)
        .wrapping_add(map_offset)
        .wrapping_sub(segment_offset)
        .wrapping_add(segment_vaddr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(alloc_blocks: u64, alloc_bytes: u64) -> StackCounts {
        StackCounts {
            alloc_blocks,
            alloc_bytes,
            total_lifetime: Some(5),
            ..StackCounts::default()
        }
    }

    fn sample() -> ProcessStacks {
        let frame = |object, address| Frame::returning_to(Some(object), address);
        ProcessStacks {
            depth_limit: 64,
            objects: vec![StackObject {
                path: "/bin/prog".into(),
                build_id: Some("ab12".into()),
            }],
            stacks: vec![
                Stack {
                    frames: vec![frame(0, 0x11c9), frame(0, 0x1201)],
                    end: StackEnd::Complete,
                },
                Stack {
                    frames: vec![frame(0, 0x11c9)],
                    end: StackEnd::Unknown,
                },
            ],
            process: ScopeStacks {
                start_ns: 1,
                end_ns: 9,
                peak_ns: Some(4),
                peak_bytes_allocated: Some(1000),
                bytes_allocated: Some(1467),
                entries: vec![
                    StackEntry {
                        stack: 0,
                        counts: counts(10, 1160),
                    },
                    StackEntry {
                        stack: 1,
                        counts: counts(3, 300),
                    },
                ],
                lost: StackCounts {
                    alloc_blocks: 1,
                    alloc_bytes: 7,
                    ..StackCounts::default()
                },
            },
            regions: vec![],
            earlier_images: vec![],
        }
    }

    #[test]
    fn stacks_files_carry_their_version_and_newer_ones_are_refused() {
        let stacks = sample();
        let bytes = stacks.to_bytes();
        assert_eq!(ProcessStacks::from_bytes(&bytes).unwrap(), stacks);
        let version: StacksFileVersion = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(version.schema_version, Some(STACKS_SCHEMA_VERSION));
        // A file without the field (written before it existed) is version 1.
        let unversioned = rmp_serde::to_vec_named(&stacks).unwrap();
        assert_eq!(ProcessStacks::from_bytes(&unversioned).unwrap(), stacks);
        // A later memtrack's file is refused by version, not misread.
        let later = rmp_serde::to_vec_named(&StacksFileOut {
            schema_version: STACKS_SCHEMA_VERSION + 1,
            stacks: &stacks,
        })
        .unwrap();
        let err = ProcessStacks::from_bytes(&later).unwrap_err().to_string();
        assert!(
            err.contains("stacks file version 3, newer than this memtrack reads (2)"),
            "{err}"
        );
        let err = ProcessStacks::from_bytes(&bytes[..bytes.len() / 2]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("truncated or corrupt MessagePack"),
            "{err}"
        );
    }

    /// A version 1 file (lifetimes in ns under `total_lifetime_ns`, no allocation
    /// clock) reads with every counter but no lifetimes: ns are not bytes allocated.
    #[test]
    fn version_1_files_read_without_their_lifetimes() {
        fn to_v1(v: rmpv::Value) -> rmpv::Value {
            match v {
                rmpv::Value::Map(fields) => rmpv::Value::Map(
                    fields
                        .into_iter()
                        .filter(|(k, _)| {
                            !matches!(k.as_str(), Some("peak_bytes_allocated" | "bytes_allocated"))
                        })
                        .map(|(k, v)| match k.as_str() {
                            Some("schema_version") => (k, rmpv::Value::from(1)),
                            Some("total_lifetime") => ("total_lifetime_ns".into(), to_v1(v)),
                            _ => (k, to_v1(v)),
                        })
                        .collect(),
                ),
                rmpv::Value::Array(items) => {
                    rmpv::Value::Array(items.into_iter().map(to_v1).collect())
                }
                other => other,
            }
        }
        let stacks = sample();
        let value: rmpv::Value = rmp_serde::from_slice(&stacks.to_bytes()).unwrap();
        let v1 = rmp_serde::to_vec_named(&to_v1(value)).unwrap();
        let read = ProcessStacks::from_bytes(&v1).unwrap();
        let mut expected = stacks;
        expected.process.peak_bytes_allocated = None;
        expected.process.bytes_allocated = None;
        for entry in &mut expected.process.entries {
            entry.counts.total_lifetime = None;
        }
        assert_eq!(read, expected);
        assert_eq!(read.process.entries[0].counts.alloc_bytes, 1160);
    }

    #[test]
    fn stacks_file_names_are_pid_and_suffix() {
        assert_eq!(stacks_file_name(42), "42.MemtrackStacks.msgpack");
        assert!(is_stacks_file_name("42.MemtrackStacks.msgpack"));
        for name in [
            ".MemtrackStacks.msgpack",
            "x1.MemtrackStacks.msgpack",
            "42.MemtrackResult.msgpack",
            "42.MemtrackStacks.msgpack.tmp",
        ] {
            assert!(!is_stacks_file_name(name), "{name}");
        }
    }

    #[test]
    fn incomplete_counts_blocks_by_how_their_stack_ended() {
        let mut stacks = sample();
        stacks.stacks.push(Stack {
            frames: vec![Frame::returning_to(Some(0), 0x1300)],
            end: StackEnd::Truncated,
        });
        stacks.process.entries.push(StackEntry {
            stack: 2,
            counts: counts(4, 40),
        });
        assert_eq!(
            stacks.incomplete(),
            IncompleteStacks {
                truncated_blocks: 4,
                unknown_blocks: 3,
                lost_blocks: 1,
            }
        );
    }

    #[test]
    fn totals_add_entries_and_lost() {
        let total = sample().process.total();
        assert_eq!((total.alloc_blocks, total.alloc_bytes), (14, 1467));
        // The lost counters have no lifetimes, so the sum has none either.
        assert_eq!(total.total_lifetime, None);
        let mut two = counts(1, 2);
        two.add(&counts(3, 4));
        assert_eq!((two.alloc_blocks, two.alloc_bytes), (4, 6));
        assert_eq!(two.total_lifetime, Some(10));
        assert!(StackCounts::default().is_zero());
        assert!(!counts(0, 0).is_zero());
    }

    #[test]
    fn validate_finds_every_bad_reference() {
        assert_eq!(sample().validate(), Ok(()));
        let mut bad = sample();
        bad.stacks[1].frames[0].object = Some(3);
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "stack 1, frame 0: object 3 does not exist (objects are numbered from 0 to 0)"
        );
        let mut bad = sample();
        bad.stacks[1] = bad.stacks[0].clone();
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "stacks 0 and 1 are the same stack"
        );
        let mut bad = sample();
        bad.process.entries[1].stack = 2;
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "the process: stack 2 does not exist (2 stacks)"
        );
        let mut bad = sample();
        bad.regions.push(RegionStacks {
            uri: "b".into(),
            counters: ScopeStacks {
                entries: vec![StackEntry::default(), StackEntry::default()],
                ..ScopeStacks::default()
            },
        });
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "region \"b\": stack 0 is listed twice"
        );
        let mut bad = sample();
        bad.earlier_images.push(ScopeStacks {
            entries: vec![StackEntry {
                stack: 5,
                ..StackEntry::default()
            }],
            ..ScopeStacks::default()
        });
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "earlier image 0: stack 5 does not exist (2 stacks)"
        );
    }

    #[test]
    fn return_addresses_are_looked_up_at_the_call() {
        assert_eq!(
            Frame::returning_to(Some(0), 0x11c9).lookup_address(),
            0x11c8
        );
        let interrupted = Frame {
            interrupted: true,
            ..Frame::returning_to(None, 0x11c9)
        };
        assert_eq!(interrupted.lookup_address(), 0x11c9);
        assert_eq!(Frame::returning_to(None, 0).lookup_address(), 0);
    }

    #[test]
    fn elf_address_removes_the_load_bias() {
        // A PIE's text segment: p_offset 0x1000, p_vaddr 0x1000, mapped at
        // 0x5555_5555_5000 from file offset 0x1000.
        assert_eq!(
            elf_address(0x5555_5555_51c9, 0x5555_5555_5000, 0x1000, 0x1000, 0x1000),
            0x11c9
        );
        // A non-PIE executable: vaddr 0x401000 mapped at 0x401000 from offset 0x1000.
        assert_eq!(
            elf_address(0x4011c9, 0x401000, 0x1000, 0x1000, 0x401000),
            0x4011c9
        );
        // A segment whose vaddr and offset differ (libc's text: offset 0x26000,
        // vaddr 0x27000), mapped at 0x7f00_0002_6000 from offset 0x26000.
        assert_eq!(
            elf_address(
                0x7f00_0002_6010,
                0x7f00_0002_6000,
                0x26000,
                0x26000,
                0x27000
            ),
            0x27010
        );
    }
}
