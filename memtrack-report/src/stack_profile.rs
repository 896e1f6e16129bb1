//! The aggregated, symbolized stacks that every stacks view is made from (the terminal
//! report and the DHAT, pprof and flamegraph exports): for one process and one scope (the
//! whole process or one benchmark region), each stack's counters and its frames,
//! innermost first, each return address expanded into its logical (inlined) frames.
//!
//! Where the stacks come from: each process's [`ProcessStacks`] is stored beside its
//! result file as `{pid}.MemtrackStacks.msgpack` (the record's
//! [`ProcessStacks::write_to`] and [`ProcessStacks::read_from`]); [`load_dir`] reads
//! both.

use std::path::Path;

use memtrack_record::{
    Stats, TrackedProcess,
    stacks::{Frame, ProcessStacks, ScopeStacks, StackCounts, StackEnd, StackId, StackObject},
};
use serde::Serialize;

use crate::{
    Result,
    symbolize::{LogicalFrame, Symbols},
};

pub use memtrack_record::stacks::STACKS_FILE_SUFFIX;

/// The frame shown for allocations whose stack was lost (the kernel's stack map full).
pub const LOST_FRAME: &str = "[stack lost: stack map full]";
/// The frame shown after the last frame of a stack that ended at a frame without unwind
/// information.
pub const UNKNOWN_FRAME: &str = "[unknown]";
/// The frame shown after the last frame of a stack cut at the depth limit.
pub const TRUNCATED_FRAME: &str = "[truncated]";

/// One process's saved record and, if they were recorded, its stacks.
#[derive(Clone, Debug)]
pub struct LoadedProcess {
    /// The process's record (from its result file).
    pub process: TrackedProcess,
    /// The stacks (None: none were recorded for it).
    pub stacks: Option<ProcessStacks>,
}

/// What [`load_dir`] read from a results directory.
#[derive(Debug, Default)]
pub struct LoadedDir {
    /// Every process whose result file (and stacks file, if it has one) was read,
    /// ordered by pid.
    pub processes: Vec<LoadedProcess>,
    /// The files that were not read, each error naming the file and why: result files,
    /// and the stacks files whose process is left out of `processes` for it. The others
    /// are reported all the same.
    pub refused: Vec<memtrack_record::Error>,
}

/// Reads every process's result in `dir` (ordered by pid) with the stacks saved beside
/// it. A result or stacks file that cannot be read is said in the answer, and the
/// others are read all the same; only a directory that cannot be listed is an error.
pub fn load_dir(dir: &Path) -> Result<LoadedDir> {
    let scan = memtrack_record::MemtrackResult::scan_dir(dir)?;
    let mut loaded = LoadedDir {
        processes: Vec::new(),
        refused: scan.refused,
    };
    for result in scan.results {
        let process = result.process;
        let path = dir.join(format!("{}{STACKS_FILE_SUFFIX}", process.pid));
        // symlink_metadata: a link named like a stacks file is refused, not followed.
        if path.symlink_metadata().is_err() {
            loaded.processes.push(LoadedProcess {
                process,
                stacks: None,
            });
            continue;
        }
        match ProcessStacks::read_from(&path) {
            Ok(stacks) => loaded.processes.push(LoadedProcess {
                process,
                stacks: Some(stacks),
            }),
            Err(e) => loaded.refused.push(e),
        }
    }
    Ok(loaded)
}

/// Which counters the views show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScopeChoice {
    /// Each process's whole-process counters.
    Process,
    /// The benchmark region with this uri, in each process that ran it.
    Benchmark(String),
}

/// Where a shown frame is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Place {
    /// An address inside an object file.
    Object {
        /// The object.
        object: StackObject,
        /// The frame's address, an ELF virtual address of the object (a return address
        /// unless `interrupted`).
        address: u64,
        /// `address` is an instruction a signal interrupted.
        interrupted: bool,
    },
    /// An address outside any file.
    Anonymous {
        /// The frame's runtime address (a return address unless `interrupted`).
        address: u64,
        /// `address` is an instruction a signal interrupted.
        interrupted: bool,
    },
    /// Not an address: `[unknown]`, `[truncated]`, or the lost stacks.
    Marker(&'static str),
}

/// One physical frame of a shown stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShownFrame {
    /// Where it is.
    pub place: Place,
    /// Its logical frames, innermost first; never empty: a frame without symbols has
    /// one, named `object+0xADDRESS` (or `0xADDRESS`, or the marker).
    pub logical: Vec<LogicalFrame>,
    /// Whether `logical` comes from symbols (false: a name made up from the place).
    pub symbolized: bool,
}

impl ShownFrame {
    /// The address shown for the frame and looked up in its object: for a return
    /// address the call before it (return address - 1: what valgrind shows, and what
    /// `addr2line` resolves to the call's line), else the address itself; None for
    /// markers.
    pub fn shown_address(&self) -> Option<u64> {
        match self.place {
            Place::Object {
                address,
                interrupted,
                ..
            }
            | Place::Anonymous {
                address,
                interrupted,
            } => Some(
                Frame {
                    object: None,
                    address,
                    interrupted,
                }
                .lookup_address(),
            ),
            Place::Marker(_) => None,
        }
    }

    /// The object it is in, if any.
    pub fn object(&self) -> Option<&StackObject> {
        match &self.place {
            Place::Object { object, .. } => Some(object),
            _ => None,
        }
    }
}

/// One stack with its counters in the scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShownStack {
    /// Its id in the process's stacks; None for the lost stacks.
    pub id: Option<StackId>,
    /// Its frames, innermost first, ending with a marker frame when unwinding did not
    /// reach the outermost frame.
    pub frames: Vec<ShownFrame>,
    /// Its counters.
    pub counts: StackCounts,
}

impl ShownStack {
    /// Every logical frame, innermost first.
    pub fn logical(&self) -> impl Iterator<Item = (&ShownFrame, &LogicalFrame)> {
        self.frames
            .iter()
            .flat_map(|f| f.logical.iter().map(move |l| (f, l)))
    }
}

/// One process's stacks in one scope, symbolized: what every view shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StackProfile {
    /// Process id.
    pub pid: u32,
    /// Its command line.
    pub command: Vec<String>,
    /// The benchmark region shown, None for the whole process.
    pub benchmark: Option<String>,
    /// When tracking of the process began, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// When the scope began, `CLOCK_MONOTONIC` ns.
    pub start_ns: u64,
    /// When it ended, `CLOCK_MONOTONIC` ns.
    pub end_ns: u64,
    /// When its live bytes were highest (t-gmax), `CLOCK_MONOTONIC` ns.
    pub peak_ns: Option<u64>,
    /// The same instant on the scope's allocation clock (the requested bytes allocated
    /// in the scope by then), the clock of the lifetimes; `None` when not recorded.
    pub peak_bytes_allocated: Option<u64>,
    /// The allocation clock at the scope's end (requested bytes allocated in the
    /// scope); `None` when not recorded (stacks files before version 2).
    pub bytes_allocated: Option<u64>,
    /// The unwinder's depth limit, in frames.
    pub depth_limit: u32,
    /// The stacks with allocations in the scope, and the lost stacks (if any) last.
    pub stacks: Vec<ShownStack>,
    /// The sum of all of them.
    pub total: StackCounts,
    /// The scope's counters from the result file, to check the stacks against.
    pub counters: Option<Stats>,
    /// Objects whose frames could not be symbolized, and why.
    pub problems: Vec<String>,
    /// The uris of the process's benchmark regions that have stacks.
    pub regions: Vec<String>,
    /// The images the process ran before its last exec, with their counters (the whole
    /// process's scope only): their allocations have no stacks here, as the kernel's
    /// per-stack counters start again at each exec, with the process's.
    pub earlier_images: Vec<memtrack_record::ImageStats>,
}

/// Why the stacks' bytes at peak can differ from the process's peak (said with the
/// difference): a block's stack and its process are charged one after the other, so a
/// block another thread was allocating or freeing at the instant of the peak counts on
/// one side only. Exact when no other thread allocates or frees at that instant (every
/// single-threaded program).
pub const AT_PEAK_RACE: &str = " (a block another thread was allocating or freeing at \
     the instant of the peak counts on one side only)";

impl StackProfile {
    /// "process 123" or "benchmark URI in process 123".
    pub fn title(&self) -> String {
        match &self.benchmark {
            None => format!("process {}", self.pid),
            Some(uri) => format!("benchmark {uri} in process {}", self.pid),
        }
    }

    /// Where the per-stack totals differ from the scope's counters (empty: exact, or no
    /// counters to compare with).
    pub fn mismatches(&self) -> Vec<String> {
        let Some(stats) = &self.counters else {
            return Vec::new();
        };
        let t = &self.total;
        [
            ("blocks allocated", t.alloc_blocks, stats.alloc_calls),
            ("bytes allocated", t.alloc_bytes, stats.bytes_allocated),
            ("blocks freed", t.freed_blocks, stats.free_calls),
            ("bytes freed", t.freed_bytes, stats.bytes_freed),
            ("blocks live at end", t.live_blocks, stats.live_blocks),
            ("bytes live at end", t.live_bytes, stats.live_bytes),
            ("bytes at peak", t.at_peak_bytes, stats.peak_live_bytes),
        ]
        .into_iter()
        .filter(|(_, stacks, counters)| stacks != counters)
        .map(|(what, stacks, counters)| {
            let why = if what == "bytes at peak" {
                AT_PEAK_RACE
            } else {
                ""
            };
            format!("{what}: {stacks} in the stacks, {counters} in the counters{why}")
        })
        .collect()
    }
}

/// The processes that have stacks for the chosen scope, symbolized (every distinct
/// object and address once, across all of them), and the pids left out with why.
pub fn resolve(
    processes: &[LoadedProcess],
    choice: &ScopeChoice,
) -> (Vec<StackProfile>, Vec<(u32, String)>) {
    let mut chosen = Vec::new();
    let mut skipped = Vec::new();
    for p in processes {
        let Some(stacks) = &p.stacks else {
            skipped.push((p.process.pid, "no stacks recorded".to_string()));
            continue;
        };
        let scope = match choice {
            ScopeChoice::Process => Some((&stacks.process, Some(p.process.stats.clone()))),
            ScopeChoice::Benchmark(uri) => stacks.region(uri).map(|scope| {
                let counters = p.process.benchmarks.iter().find(|b| &b.uri == uri);
                (scope, counters.map(|b| b.stats.clone()))
            }),
        };
        match scope {
            Some((scope, counters)) => chosen.push((p, stacks, scope, counters)),
            None => skipped.push((p.process.pid, "did not run that benchmark".to_string())),
        }
    }
    let wanted = chosen.iter().flat_map(|(_, stacks, scope, _)| {
        scope.entries.iter().flat_map(move |entry| {
            stacks.stacks[entry.stack as usize]
                .frames
                .iter()
                .filter_map(move |frame| {
                    let object = &stacks.objects[frame.object? as usize];
                    Some((object, frame.lookup_address()))
                })
        })
    });
    let symbols = Symbols::resolve(wanted);
    let profiles = chosen
        .into_iter()
        .map(|(p, stacks, scope, counters)| {
            profile(&p.process, stacks, scope, counters, choice, &symbols)
        })
        .collect();
    (profiles, skipped)
}

fn profile(
    process: &TrackedProcess,
    stacks: &ProcessStacks,
    scope: &ScopeStacks,
    counters: Option<Stats>,
    choice: &ScopeChoice,
    symbols: &Symbols,
) -> StackProfile {
    let mut shown: Vec<ShownStack> = scope
        .entries
        .iter()
        .map(|entry| {
            let stack = &stacks.stacks[entry.stack as usize];
            let mut frames: Vec<ShownFrame> = stack
                .frames
                .iter()
                .map(|frame| match frame.object {
                    Some(object) => shown_frame(&stacks.objects[object as usize], frame, symbols),
                    None => made_up(
                        Place::Anonymous {
                            address: frame.address,
                            interrupted: frame.interrupted,
                        },
                        format!("{:#x}", frame.lookup_address()),
                    ),
                })
                .collect();
            match stack.end {
                StackEnd::Complete => {}
                StackEnd::Unknown => frames.push(marker(UNKNOWN_FRAME)),
                StackEnd::Truncated => frames.push(marker(TRUNCATED_FRAME)),
            }
            ShownStack {
                id: Some(entry.stack),
                frames,
                counts: entry.counts.clone(),
            }
        })
        .collect();
    if !scope.lost.is_zero() {
        shown.push(ShownStack {
            id: None,
            frames: vec![marker(LOST_FRAME)],
            counts: scope.lost.clone(),
        });
    }
    let mut objects: Vec<&StackObject> = shown
        .iter()
        .flat_map(|s| s.frames.iter().filter_map(ShownFrame::object))
        .collect();
    objects.sort();
    objects.dedup();
    let problems = objects
        .into_iter()
        .filter_map(|o| symbols.status(o).and_then(|status| status.problem(o)))
        .collect();
    StackProfile {
        pid: process.pid,
        command: process.command.clone(),
        benchmark: match choice {
            ScopeChoice::Process => None,
            ScopeChoice::Benchmark(uri) => Some(uri.clone()),
        },
        started_unix_ms: process.started_unix_ms,
        start_ns: scope.start_ns,
        end_ns: scope.end_ns,
        peak_ns: scope.peak_ns,
        peak_bytes_allocated: scope.peak_bytes_allocated,
        bytes_allocated: scope.bytes_allocated,
        depth_limit: stacks.depth_limit,
        stacks: shown,
        total: scope.total(),
        counters,
        problems,
        regions: stacks.regions.iter().map(|r| r.uri.clone()).collect(),
        earlier_images: match choice {
            ScopeChoice::Process => process.earlier_images.clone(),
            ScopeChoice::Benchmark(_) => Vec::new(),
        },
    }
}

fn shown_frame(object: &StackObject, frame: &Frame, symbols: &Symbols) -> ShownFrame {
    let place = Place::Object {
        object: object.clone(),
        address: frame.address,
        interrupted: frame.interrupted,
    };
    let address = frame.lookup_address();
    let logical = symbols.frames(object, address);
    if logical.is_empty() {
        made_up(place, format!("{}+{address:#x}", object_name(object)))
    } else {
        ShownFrame {
            place,
            logical: logical.to_vec(),
            symbolized: true,
        }
    }
}

/// How frames name `object`: its file name (its whole path if it has none), as in
/// `libc.so.6+0x98ef0`.
pub fn object_name(object: &StackObject) -> String {
    object.path.file_name().map_or_else(
        || object.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn made_up(place: Place, name: String) -> ShownFrame {
    ShownFrame {
        place,
        logical: vec![LogicalFrame {
            function: name,
            location: None,
            inlined: false,
        }],
        symbolized: false,
    }
}

fn marker(name: &'static str) -> ShownFrame {
    made_up(Place::Marker(name), name.to_string())
}
