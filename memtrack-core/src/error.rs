//! The error type of the `memtrack` crate. Each variant says what failed, with which
//! argument, and, where the user can do something about it, what to do next; each
//! cause is typed: the engine's ([`LoadError`], [`ProgramError`]), the follower's
//! ([`SpawnFailure`], [`FollowerEnd`]), the record's ([`memtrack_record::Error`]), the
//! kernel's (`std::io::Error`, `nix::Error`, aya's `MapError`).

use std::{fmt, path::PathBuf};

pub use crate::engine::{LoadError, ProgramError};

/// Everything that can go wrong while tracking or reading results. New kinds of
/// failure may be added (`#[non_exhaustive]`): match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The process lacks the capabilities needed to load eBPF programs and attach uprobes.
    #[error(
        "memtrack needs {missing} to load eBPF programs and attach uprobes (or \
         CAP_SYS_ADMIN, which it lacks too); run it as root (e.g. with sudo), or grant \
         the binary the capabilities: sudo setcap cap_bpf,cap_perfmon+ep <binary>"
    )]
    MissingCapabilities {
        /// The missing capabilities.
        missing: Capabilities,
    },

    /// The kernel lacks something memtrack needs (BTF, uprobes).
    #[error("this kernel cannot run memtrack: {0}")]
    Unsupported(KernelLacks),

    /// None of the process's mapped objects defines an allocator function memtrack knows.
    #[error(
        "process {pid} has no allocator memtrack can probe (no `malloc` in any of its \
         mapped objects: {}); a static binary without symbols or a custom allocator \
         cannot be tracked",
        paths(.objects)
    )]
    NoAllocator {
        /// The process.
        pid: u32,
        /// The objects that were searched.
        objects: Vec<PathBuf>,
    },

    /// The process does not exist (any more).
    #[error("process {pid} does not exist (it exited, or never existed)")]
    ProcessGone {
        /// The process id asked for.
        pid: u32,
    },

    /// Loading the eBPF object into the kernel failed (parsing it, its BTF, creating
    /// one of its maps, relocating its code).
    #[error("loading memtrack's eBPF object failed while {0}")]
    Load(#[source] LoadError),

    /// Loading or attaching one program failed.
    #[error("eBPF program `{program}`: {source}")]
    Program {
        /// Program name.
        program: &'static str,
        /// The cause (for a program the kernel's verifier rejects, the end of its log).
        #[source]
        source: ProgramError,
    },

    /// Attaching uprobes to allocator functions failed.
    #[error(
        "attaching `{program}` to {} at file offsets {offsets:#x?} (pid {pid}) failed: {source}",
        .path.display()
    )]
    Attach {
        /// Program name.
        program: &'static str,
        /// The ELF object probed.
        path: PathBuf,
        /// File offsets of the probe sites (one link may carry several).
        offsets: Vec<u64>,
        /// Process the probes are scoped to.
        pid: u32,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },

    /// A map operation failed.
    #[error("eBPF map `{map}`: {source}")]
    Map {
        /// Map name.
        map: &'static str,
        /// The cause.
        #[source]
        source: Box<aya::maps::MapError>,
    },

    /// Finding what to probe in a process failed.
    #[error(transparent)]
    Targets(#[from] memtrack_targets::Error),

    /// The command to run was not found.
    #[error("{command}: command not found")]
    CommandNotFound {
        /// The program name as given.
        command: String,
    },

    /// The command names a file that is not an executable one (no execute permission,
    /// or a directory).
    #[error("cannot start {command}: permission denied (not an executable file)")]
    NotExecutable {
        /// The program name as given.
        command: String,
    },

    /// The command could not be started.
    #[error("cannot start {command}: {cause}")]
    Spawn {
        /// The program name as given.
        command: String,
        /// Why.
        cause: SpawnFailure,
    },

    /// A ptrace request failed (following children, holding a process stopped).
    #[error("following process {pid} with ptrace failed ({what}): {source}")]
    Ptrace {
        /// The process.
        pid: u32,
        /// The request that failed.
        what: &'static str,
        /// The cause.
        #[source]
        source: nix::Error,
    },

    /// A call that leaves the calling thread out of the count for its duration
    /// ([`Tracker::probes`](crate::Tracker::probes), `stacks`, `process`, `reset`, ...)
    /// did its work but could not switch counting back as it was: the kernel still has
    /// it paused for this thread (or off). Counting is what [`Tracker::start`](crate::Tracker::start) or
    /// [`Tracker::stop`](crate::Tracker::stop) sets next; until then, allocations of this thread are not
    /// counted.
    #[error(
        "counting could not be switched back on after the tracker's own work: {source};          this thread's allocations are not counted until Tracker::start or stop is          called again"
    )]
    CountingNotRestored {
        /// Why the kernel's state could not be set.
        #[source]
        source: Box<Error>,
    },

    /// Reading or writing the record failed: a result or stacks file, the results
    /// directory, the tree of result directories.
    #[error(transparent)]
    Record(#[from] memtrack_record::Error),

    /// A system call memtrack needs for its own work (a pipe, a thread, a fork) failed.
    #[error("memtrack cannot {what}: {source}")]
    Os {
        /// What memtrack was doing, e.g. "start the follower thread".
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// memtrack's follower thread, which follows the tracked processes with ptrace,
    /// ended while it was still needed: the processes are no longer followed, and the
    /// root's exit cannot be seen. Not expected: the reason says what ended it.
    #[error(
        "memtrack's ptrace follower thread ended unexpectedly ({reason}): the tracked \
         processes are no longer followed"
    )]
    FollowerEnded {
        /// Why it ended.
        reason: FollowerEnd,
    },

    /// Every slot for tracked processes is taken.
    #[error(
        "cannot track process {pid}: {max} processes are tracked at once already (the \
         most one tracker can track)"
    )]
    TooManyProcesses {
        /// The process that got no slot.
        pid: u32,
        /// How many processes one tracker tracks at once.
        max: u32,
    },

    /// A live-block capacity outside what the kernel can make a map of.
    #[error(
        "a live-block map of {requested} blocks is impossible: the capacity must be 1 to \
         {max} (the kernel's largest hash map)"
    )]
    MaxLiveBlocks {
        /// The capacity asked for.
        requested: u32,
        /// [`MAX_LIVE_BLOCKS`](crate::MAX_LIVE_BLOCKS).
        max: u32,
    },

    /// A call-stack depth outside what the unwinder records.
    #[error(
        "a call-stack depth of {requested} frames is impossible: the depth must be 1 to \
         {max} frames"
    )]
    StackDepth {
        /// The depth asked for, in frames.
        requested: u32,
        /// [`stacks::MAX_DEPTH`](crate::stacks::MAX_DEPTH), in frames.
        max: u32,
    },

    /// No preallocated live blocks were asked for (the preallocated map needs at least
    /// one entry).
    #[error(
        "0 preallocated live blocks is impossible: the number must be 1 to {max} (more than \
         the live-block capacity counts as all of it)"
    )]
    PreallocatedLiveBlocks {
        /// [`MAX_LIVE_BLOCKS`](crate::MAX_LIVE_BLOCKS).
        max: u32,
    },

    /// The kernel could not make the live-block maps (usually: not enough memory for
    /// the preallocated entries, or a capacity whose bucket array is too large).
    #[error(
        "creating the kernel maps for {blocks} live blocks ({preallocated} of them \
         preallocated; about {} MiB of kernel memory reserved when memtrack starts, the \
         other blocks' entries allocated as they go live) failed: {source}; ask for fewer \
         blocks (--max-live-blocks, TrackerBuilder::max_live_blocks) or fewer \
         preallocated ones (--preallocated-live-blocks, \
         TrackerBuilder::preallocated_live_blocks)",
        .kernel_bytes >> 20
    )]
    LiveMap {
        /// The capacity asked for.
        blocks: u32,
        /// How many of them have preallocated entries.
        preallocated: u32,
        /// Kernel memory, in bytes, the maps reserve when they are made
        /// ([`live_map_bytes`](crate::live_map_bytes)'s `at_load`).
        kernel_bytes: u64,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },

    /// The kernel maps memtrack makes (when it starts, and the preallocated live-block
    /// entries a tracker of other processes reserves later) do not fit in what the
    /// limit of its memory cgroup (or of an ancestor) leaves. Checked before any is
    /// made: a map filling the cgroup to its limit makes the cgroup's OOM killer kill a
    /// process in it, usually memtrack.
    #[error(
        "the kernel maps for {blocks} live blocks ({preallocated} of them preallocated) \
         need about {} MiB of kernel memory, reserved when memtrack starts or once its \
         processes keep many blocks live, but the memory cgroup \
         {} leaves about {} MiB of its {} MiB limit (its file cache counted as free); \
         ask for fewer preallocated blocks (--preallocated-live-blocks, \
         TrackerBuilder::preallocated_live_blocks) or fewer blocks (--max-live-blocks, \
         TrackerBuilder::max_live_blocks), or raise the cgroup's limit",
        .kernel_bytes >> 20,
        .cgroup.display(),
        .free_bytes >> 20,
        .limit_bytes >> 20
    )]
    CgroupMemory {
        /// The live-block capacity asked for.
        blocks: u32,
        /// How many of them have preallocated entries.
        preallocated: u32,
        /// Kernel memory, in bytes, the maps reserve when they are made (the live-block
        /// maps' [`live_map_bytes`](crate::live_map_bytes) `at_load` and `later`, and
        /// the unwind rows with stacks on).
        kernel_bytes: u64,
        /// The directory of the cgroup whose limit is the tightest.
        cgroup: PathBuf,
        /// Its limit, in bytes.
        limit_bytes: u64,
        /// What it leaves, in bytes: the limit less the usage other than file cache.
        free_bytes: u64,
    },

    /// The API was called with an argument it refuses (e.g.
    /// [`attach_pid`](crate::TrackerBuilder::attach_pid) with the calling process's own
    /// pid). What the types can rule out, they do: this is for the rest.
    #[error("{0}")]
    Usage(&'static str),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Paths joined with ", " for a message.
fn paths(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// The capabilities a process lacks for loading eBPF programs and attaching uprobes
/// (it has neither CAP_SYS_ADMIN nor the two below).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// CAP_BPF is missing.
    pub bpf: bool,
    /// CAP_PERFMON is missing.
    pub perfmon: bool,
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.bpf, self.perfmon) {
            (true, true) => f.write_str("CAP_BPF and CAP_PERFMON"),
            (true, false) => f.write_str("CAP_BPF"),
            (false, true) => f.write_str("CAP_PERFMON"),
            (false, false) => f.write_str("no capability"),
        }
    }
}

/// What the kernel lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelLacks {
    /// Its BTF (the loader hook reads `task_struct` offsets from it).
    #[error(
        "no BTF at /sys/kernel/btf/vmlinux (a kernel built with CONFIG_DEBUG_INFO_BTF is \
         needed)"
    )]
    Btf,
    /// The uprobe PMU.
    #[error(
        "no uprobe PMU at /sys/bus/event_source/devices/uprobe (a kernel built with \
         CONFIG_UPROBE_EVENTS is needed)"
    )]
    Uprobes,
}

/// Why a command could not be started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnFailure {
    /// An argument, the program's path, the directory or the environment holds a NUL
    /// byte, which no C string can carry.
    #[error("{0} contains a NUL byte")]
    NulByte(&'static str),
    /// More file descriptors to hand over than memtrack passes.
    #[error("at most {0} file descriptors can be handed over")]
    TooManyFds(usize),
    /// A system call of the start-up failed (a pipe, the fork).
    #[error("{what}: {source}")]
    Os {
        /// Which call.
        what: &'static str,
        /// The cause.
        #[source]
        source: nix::Error,
    },
    /// `execve` (or what the child does before it: the directory, the user) failed.
    #[error("{0}")]
    Exec(#[source] nix::Error),
    /// The child exited before its exec, saying nothing.
    #[error("it exited before exec")]
    ExitedBeforeExec,
}

/// Why the follower thread ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FollowerEnd {
    /// It panicked.
    #[error("it panicked")]
    Panicked,
    /// It panicked while starting to follow the process.
    #[error("it panicked while starting to follow the process")]
    PanickedStarting,
    /// `waitpid` failed.
    #[error("waitpid: {0}")]
    Wait(#[source] nix::Error),
    /// The tracker stopped following (it was closed).
    #[error("the tracker stopped following")]
    Stopped,
}
