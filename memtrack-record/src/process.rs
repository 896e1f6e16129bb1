//! What memtrack knows about each tracked process: identity, lifetime, probes, and its
//! counters. The tracker fills it (memtrack-core's `ProcessTracker::collect_processes`
//! returns it).
//!
//! [`TrackedProcess`] (with its [`BenchmarkStats`] and [`ImageStats`]) is the one
//! record of a process: a result file ([`MemtrackResult`](crate::MemtrackResult)) wraps
//! it in a versioned envelope, and the JSON report ([`RunResults`](crate::RunResults))
//! lists it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{stats::Stats, timeline::Timeline};

/// Whether memtrack could probe a process's allocator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocatorStatus {
    /// Probes are attached; the counters are complete.
    Probed,
    /// No allocator memtrack knows was found: the counters are NOT a measurement of the
    /// process's heap (they stay zero because nothing was probed).
    NotRecognised {
        /// Why, for humans.
        reason: String,
    },
}

/// The counters of an image a process ran before it called `execve`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ImageStats {
    /// Command line of that image.
    pub command: Vec<String>,
    /// Its counters, from the process's start (or previous exec) to the exec. Blocks
    /// still live then were released by the exec, and stay live here.
    pub stats: Stats,
    /// Its memory over time (None: not recorded, or a file written before schema
    /// version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

impl ImageStats {
    /// The counters `stats` of an image that ran `command`.
    pub fn new(command: Vec<String>, stats: Stats) -> Self {
        ImageStats {
            command,
            stats,
            timeline: None,
        }
    }
}

/// One benchmark region's counters: the calls made inside the regions an integration
/// marked under this uri, in the process that holds this record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BenchmarkStats {
    /// The benchmark's uri, as the integration named it (e.g. `benches/alloc.rs::vec_push`).
    pub uri: String,
    /// Calls made inside the region only.
    pub stats: Stats,
    /// The region was still open when the process ended (a panic, a signal, an exit
    /// inside it) or when the run's results were written: `stats` are what it counted
    /// until then, not a whole iteration. Absent (false) in files written before
    /// 2026-12-05.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unfinished: bool,
    /// Its memory over time, from the region's start (None: not recorded, or a file
    /// written before schema version 3). Its times are the process's (ns since it
    /// started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

impl BenchmarkStats {
    /// The counters `stats` of benchmark `uri`.
    pub fn new(uri: impl Into<String>, stats: Stats) -> Self {
        BenchmarkStats {
            uri: uri.into(),
            stats,
            unfinished: false,
            timeline: None,
        }
    }

    /// The same, marked [`unfinished`](Self::unfinished).
    pub fn into_unfinished(self) -> Self {
        BenchmarkStats {
            unfinished: true,
            ..self
        }
    }
}

/// One tracked process and its counters: the record the tracker returns, the result
/// files hold and the JSON report lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TrackedProcess {
    /// Process id.
    pub pid: u32,
    /// Parent process id (0 if unknown).
    pub ppid: u32,
    /// Command line (argv) of the image it ran last.
    pub command: Vec<String>,
    /// When tracking of it began, `CLOCK_MONOTONIC` ns.
    pub started_ns: u64,
    /// When tracking of it began, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// When it exited, `CLOCK_MONOTONIC` ns (None: still running at collection).
    pub ended_ns: Option<u64>,
    /// Its exit code, if it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    pub exit_signal: Option<i32>,
    /// Whether its allocator could be probed.
    pub allocator: AllocatorStatus,
    /// The probes attached to it.
    pub probes: Vec<ProbeInfo>,
    /// Its counters, for the image it ran last (from its exec). When an integration
    /// marked benchmark regions, only the regions were counted and this is their sum.
    pub stats: Stats,
    /// The images it ran before its last exec, oldest first (e.g. a shell's child
    /// between fork and exec), each with its own counters: nothing is lost, nothing
    /// is mixed into the last image's numbers.
    #[serde(default)]
    pub earlier_images: Vec<ImageStats>,
    /// The benchmark regions counted in this process, in order (empty when no
    /// integration marked any; the tracker itself never fills it).
    #[serde(default)]
    pub benchmarks: Vec<BenchmarkStats>,
    /// Its memory over time, for the image it ran last (None: not recorded, or a file
    /// written before schema version 3). With benchmark regions, the regions' laid end
    /// to end, as `stats` are their sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

impl TrackedProcess {
    /// A record of process `pid` (parent `ppid`, running `command`) with nothing known
    /// yet: times 0, still running, nothing probed (allocator not recognised), zero
    /// counters, no earlier images and no benchmarks. Set the fields to fill it in.
    pub fn new(pid: u32, ppid: u32, command: Vec<String>) -> Self {
        TrackedProcess {
            pid,
            ppid,
            command,
            started_ns: 0,
            started_unix_ms: 0,
            ended_ns: None,
            exit_code: None,
            exit_signal: None,
            allocator: AllocatorStatus::NotRecognised {
                reason: "probes not attached yet".into(),
            },
            probes: Vec::new(),
            stats: Stats::default(),
            earlier_images: Vec::new(),
            benchmarks: Vec::new(),
            timeline: None,
        }
    }
}

impl TrackedProcess {
    /// Checks every timeline the record holds against its scope's peak
    /// ([`Timeline::validate`]), naming the scope that fails.
    pub fn validate_timelines(&self) -> Result<(), crate::FileRefused> {
        let scopes =
            std::iter::once(("the process".to_string(), &self.timeline, &self.stats))
                .chain(self.earlier_images.iter().enumerate().map(|(i, image)| {
                    (format!("earlier image {i}"), &image.timeline, &image.stats)
                }))
                .chain(
                    self.benchmarks
                        .iter()
                        .map(|b| (format!("benchmark {:?}", b.uri), &b.timeline, &b.stats)),
                );
        for (scope, timeline, stats) in scopes {
            if let Some(timeline) = timeline {
                timeline.validate(stats.peak_live_bytes).map_err(|cause| {
                    crate::FileRefused::Timeline {
                        scope,
                        cause: Box::new(cause),
                    }
                })?;
            }
        }
        Ok(())
    }
}

/// One probed function in one process, as recorded in results: what was measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeInfo {
    /// The function whose calls this probe counts (e.g. "malloc").
    pub function: String,
    /// Other functions at the same address, counted under `function` (glibc 2.36:
    /// `aligned_alloc` is `memalign`).
    pub aliases: Vec<String>,
    /// The ELF object probed.
    pub object: PathBuf,
    /// The symbol found in it.
    pub symbol: String,
    /// File offset of the function's first byte in `object`.
    pub file_offset: u64,
    /// Offset of the entry probe from the function's first byte, in bytes.
    pub entry_offset: u64,
    /// The instruction the entry probe sits on (AT&T syntax; empty if unknown).
    #[serde(default)]
    pub entry_instruction: String,
    /// Whether the kernel emulates that instruction (cheap) instead of single-stepping it.
    #[serde(default)]
    pub entry_emulated: bool,
    /// Whether a return probe is attached too.
    pub return_probe: bool,
    /// Offset of the return probe's breakpoint from the function's first byte, in bytes
    /// (equal to `entry_offset` when both share one breakpoint).
    #[serde(default)]
    pub return_offset: u64,
}
