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
        let read = ProcessStacks::read_from(&path).and_then(|stacks| {
            stacks
                .check_images(process.earlier_images.len())
                .map_err(|cause| memtrack_record::Error::StacksFile {
                    path: path.clone(),
                    cause,
                })?;
            Ok(stacks)
        });
        match read {
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
    /// Each process's whole-process counters: one profile per image it ran (a process
    /// that called `execve` ran several: see [`StackProfile::image`]), oldest first.
    /// A process that never exec'd has one, as do those whose stacks file was written
    /// before memtrack kept each image's stacks (its last image's).
    Process,
    /// Image `n` of each process (1 for the first image it ran, the one it started
    /// with; its last is [`ProcessStacks::image_count`]). A process that ran fewer
    /// images is left out, with why.
    Image(usize),
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
    /// Its command line (that of the image shown).
    pub command: Vec<String>,
    /// Which image of the process is shown: 1 for the first it ran, up to
    /// [`images`](Self::images) for the last (a benchmark region's profile is always
    /// of the last).
    pub image: usize,
    /// How many images the process ran (1 plus the times it called `execve`).
    pub images: usize,
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
    /// The images the process ran before its last exec whose stacks are not kept, with
    /// their counters, on the last image's whole-process profile: those of a stacks
    /// file written before memtrack kept each image's stacks (empty otherwise, every
    /// image then having its own profile).
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
    /// "process 123", "process 123, image 1 of 2" (a process that exec'd), or
    /// "benchmark URI in process 123".
    pub fn title(&self) -> String {
        match &self.benchmark {
            None if self.images > 1 => {
                format!("process {}, {}", self.pid, self.image_text())
            }
            None => format!("process {}", self.pid),
            Some(uri) => format!("benchmark {uri} in process {}", self.pid),
        }
    }

    /// "image 1 of 2".
    pub fn image_text(&self) -> String {
        format!("image {} of {}", self.image, self.images)
    }

    /// Whether it shows the last image the process ran (the one the exports take
    /// unless told another).
    pub fn is_last_image(&self) -> bool {
        self.image == self.images
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

/// One scope chosen for a profile, before symbolization.
struct Chosen<'a> {
    process: &'a TrackedProcess,
    stacks: &'a ProcessStacks,
    scope: &'a ScopeStacks,
    /// The scope's counters from the result file.
    counters: Option<Stats>,
    /// The command of the image shown.
    command: &'a [String],
    /// Which image, of how many.
    image: usize,
    images: usize,
    /// The earlier images without stacks, named on this profile.
    unkept: &'a [memtrack_record::ImageStats],
}

/// The scopes `choice` takes from process `p` (its stacks `stacks`), or why none.
fn choose<'a>(
    p: &'a LoadedProcess,
    stacks: &'a ProcessStacks,
    choice: &ScopeChoice,
) -> std::result::Result<Vec<Chosen<'a>>, String> {
    let process = &p.process;
    let images = process.earlier_images.len() + 1;
    // The stacks file holds every image's, or (written before they were kept) the last's.
    let kept_all = stacks.earlier_images.len() == process.earlier_images.len();
    let image = |n: usize| -> Option<Chosen<'a>> {
        let scope = if kept_all {
            stacks.image(n)?
        } else if n == images {
            &stacks.process
        } else {
            return None;
        };
        let (command, counters) = match process.earlier_images.get(n - 1) {
            Some(earlier) => (earlier.command.as_slice(), earlier.stats.clone()),
            None => (process.command.as_slice(), process.stats.clone()),
        };
        Some(Chosen {
            process,
            stacks,
            scope,
            counters: Some(counters),
            command,
            image: n,
            images,
            unkept: if kept_all || n != images {
                &[]
            } else {
                &process.earlier_images
            },
        })
    };
    match choice {
        ScopeChoice::Process => Ok((1..=images).filter_map(image).collect()),
        ScopeChoice::Image(n) if (1..=images).contains(n) => {
            image(*n).map(|c| vec![c]).ok_or_else(|| {
                format!(
                    "the stacks of image {n} of {images} were not kept (its stacks file was \
                 written before memtrack kept each image's stacks)"
                )
            })
        }
        ScopeChoice::Image(n) => Err(format!(
            "ran {}, no image {n}",
            crate::units::count(images as u64, "image")
        )),
        ScopeChoice::Benchmark(uri) => stacks
            .region(uri)
            .map(|scope| {
                let counters = process.benchmarks.iter().find(|b| &b.uri == uri);
                vec![Chosen {
                    process,
                    stacks,
                    scope,
                    counters: counters.map(|b| b.stats.clone()),
                    command: &process.command,
                    image: images,
                    images,
                    unkept: &[],
                }]
            })
            .ok_or_else(|| "did not run that benchmark".to_string()),
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
        match choose(p, stacks, choice) {
            Ok(scopes) => chosen.extend(scopes),
            Err(why) => skipped.push((p.process.pid, why)),
        }
    }
    let wanted = chosen.iter().flat_map(|c| {
        c.scope.entries.iter().flat_map(move |entry| {
            c.stacks.stacks[entry.stack as usize]
                .frames
                .iter()
                .filter_map(move |frame| {
                    let object = &c.stacks.objects[frame.object? as usize];
                    Some((object, frame.lookup_address()))
                })
        })
    });
    let symbols = Symbols::resolve(wanted);
    let profiles = chosen
        .into_iter()
        .map(|c| profile(c, choice, &symbols))
        .collect();
    (profiles, skipped)
}

fn profile(chosen: Chosen<'_>, choice: &ScopeChoice, symbols: &Symbols) -> StackProfile {
    let Chosen {
        process,
        stacks,
        scope,
        counters,
        command,
        image,
        images,
        unkept,
    } = chosen;
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
        command: command.to_vec(),
        image,
        images,
        benchmark: match choice {
            ScopeChoice::Process | ScopeChoice::Image(_) => None,
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
        earlier_images: unkept.to_vec(),
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
