//! The one error type of the `memtrack` crate. Each variant says what failed, with which
//! argument, and, where the user can do something about it, what to do next.

use std::path::PathBuf;

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
        /// The missing capabilities, e.g. "CAP_BPF and CAP_PERFMON".
        missing: String,
    },

    /// The kernel lacks something memtrack needs (BTF, uprobes, the BPF syscall).
    #[error("this kernel cannot run memtrack: {0}")]
    Unsupported(String),

    /// None of the process's mapped objects defines an allocator function memtrack knows.
    #[error(
        "process {pid} has no allocator memtrack can probe (no `malloc` in any of its \
         mapped objects: {objects}); a static binary without symbols or a custom allocator \
         cannot be tracked"
    )]
    NoAllocator {
        /// The process.
        pid: u32,
        /// The objects that were searched, comma-separated.
        objects: String,
    },

    /// The process does not exist (any more).
    #[error("process {pid} does not exist (it exited, or never existed)")]
    ProcessGone {
        /// The process id asked for.
        pid: u32,
    },

    /// Loading the eBPF object into the kernel failed (parsing it, its BTF, creating
    /// one of its maps, relocating its code).
    #[error("loading memtrack's eBPF object failed while {step}: {source}")]
    Load {
        /// The step that failed, with its argument (e.g. "creating map `STATS` with 4096
        /// entries").
        step: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Loading or attaching one program failed.
    #[error("eBPF program `{program}`: {source}")]
    Program {
        /// Program name.
        program: String,
        /// The cause (for a program the kernel's verifier rejects, the end of its log).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Attaching uprobes to allocator functions failed.
    #[error(
        "attaching `{program}` to {path} at file offsets {offsets:#x?} (pid {pid}) failed: {source}"
    )]
    Attach {
        /// Program name.
        program: String,
        /// The ELF object probed.
        path: PathBuf,
        /// File offsets of the probe sites (one link may carry several).
        offsets: Vec<u64>,
        /// Process the probes are scoped to.
        pid: u32,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
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
    #[error("cannot start {command}: {reason}")]
    Spawn {
        /// The program name as given.
        command: String,
        /// Why.
        reason: String,
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

    /// A result file is unreadable, truncated or corrupt.
    #[error("result file {path}: {reason}")]
    ResultFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: String,
    },

    /// A result file was written by a newer memtrack.
    #[error(
        "result file {path} has schema_version {found}, but this memtrack reads versions up \
         to {supported}; upgrade memtrack to read it"
    )]
    FutureSchema {
        /// The file.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },

    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// A system call memtrack needs for its own work (a pipe, a thread, a fork) failed.
    #[error("memtrack cannot {what}: {source}")]
    Os {
        /// What memtrack was doing, e.g. "start the follower thread".
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The results directory cannot be used, or writing a file in it failed.
    #[error("results directory {}: cannot {what}: {source}", .dir.display())]
    OutputDir {
        /// The directory (or the file in it) concerned.
        dir: PathBuf,
        /// What memtrack was doing, e.g. "create a file in".
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// memtrack's follower thread, which follows the tracked processes with ptrace,
    /// ended while it was still needed: the processes are no longer followed, and the
    /// root's exit cannot be seen. Not expected: the reason says what ended it (a panic,
    /// or `waitpid` failing).
    #[error(
        "memtrack's ptrace follower thread ended unexpectedly ({reason}): the tracked \
         processes are no longer followed"
    )]
    FollowerEnded {
        /// Why it ended, e.g. "it panicked" or the `waitpid` error.
        reason: String,
    },

    /// The results directory is not one memtrack writes into (a symbolic link, not a
    /// directory, no parent, ...).
    #[error("results directory {}: {reason}", .dir.display())]
    OutputDirRefused {
        /// The directory (or the file in it) concerned.
        dir: PathBuf,
        /// Why, for humans.
        reason: String,
    },

    /// A directory below the one searched for results was not searched
    /// ([`MemtrackResult::scan_tree`](crate::MemtrackResult::scan_tree)).
    #[error("searching {} for results: {reason}", .dir.display())]
    ResultTree {
        /// The directory not searched.
        dir: PathBuf,
        /// Why, for humans.
        reason: String,
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
    /// made: a
    /// map filling the cgroup to its limit makes the cgroup's OOM killer kill a process
    /// in it, usually memtrack.
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
        cgroup: std::path::PathBuf,
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

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
