//! What memtrack knows about each tracked process: identity, lifetime, probes, and the
//! final counters of those that exited. Shared by the ptrace follower (which fills it)
//! and the [`Tracker`](crate::Tracker) (which reads it).
//!
//! [`TrackedProcess`] (with its [`BenchmarkStats`] and [`ImageStats`]) is the one
//! record of a process:
//! [`ProcessTracker::collect_processes`](crate::ProcessTracker::collect_processes)
//! returns it, a result file ([`MemtrackResult`](crate::MemtrackResult)) wraps it in a
//! versioned envelope, and the JSON report ([`RunResults`](crate::RunResults)) lists it.

use std::{collections::BTreeMap, path::Path};

use memtrack_common::PidStats;
use serde::{Deserialize, Serialize};

use crate::{stats::Stats, uprobe_programs::ProbeInfo};

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
}

impl ImageStats {
    /// The counters `stats` of an image that ran `command`.
    pub fn new(command: Vec<String>, stats: Stats) -> Self {
        ImageStats { command, stats }
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
}

impl BenchmarkStats {
    /// The counters `stats` of benchmark `uri`.
    pub fn new(uri: impl Into<String>, stats: Stats) -> Self {
        BenchmarkStats {
            uri: uri.into(),
            stats,
            unfinished: false,
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
        }
    }
}

/// The follower's record of a process: what will be reported, and the counters
/// captured when it exited (its map entries are then released).
#[derive(Clone, Debug)]
pub(crate) struct ProcessRecord {
    /// Identity, lifetime, probes (its `stats` stay empty here).
    pub process: TrackedProcess,
    /// Counters captured when it exited.
    pub final_stats: Option<PidStats>,
}

impl ProcessRecord {
    pub(crate) fn new(pid: u32, ppid: u32) -> Self {
        let mut process = TrackedProcess::new(pid, ppid, read_cmdline(pid));
        process.started_ns = monotonic_ns();
        process.started_unix_ms = unix_ms();
        ProcessRecord {
            process,
            final_stats: None,
        }
    }

    /// The process with these counters.
    pub(crate) fn report(&self, stats: Stats) -> TrackedProcess {
        TrackedProcess {
            stats,
            ..self.process.clone()
        }
    }
}

/// Processes by pid.
pub(crate) type Registry = BTreeMap<u32, ProcessRecord>;

/// `/proc/PID/cmdline` as strings (empty if unreadable).
pub(crate) fn read_cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// (Tgid, PPid) of a task from `/proc/TID/status`.
pub(crate) fn tgid_and_ppid(tid: u32) -> Option<(u32, u32)> {
    let status =
        std::fs::read_to_string(Path::new("/proc").join(tid.to_string()).join("status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    Some((field("Tgid:")?, field("PPid:")?))
}

/// Now, in `CLOCK_MONOTONIC` ns (the clock of `bpf_ktime_get_ns` and of markers).
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
