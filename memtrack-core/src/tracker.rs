//! [`Tracker`]: the in-process API. It owns the loaded eBPF programs, decides which
//! processes are counted and when, and turns the kernel's counters into [`Stats`].

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use memtrack_common::{DEFAULT_MAX_LIVE_BLOCKS, PidStats, TrackState};
use parking_lot::{Condvar, Mutex};

use crate::{
    error::{Error, Result},
    follow::{Follower, Root},
    loader::{Engine, ProbeInfo, ProbePlacement, UprobeLinks},
    process::{AllocatorStatus, ProcessRecord, Registry, TrackedProcess},
    spawn::CommandSpec,
    stats::Stats,
};

/// The largest live-block capacity ([`TrackerBuilder::max_live_blocks`]): 134,217,728
/// (2^27) blocks. The kernel gives a hash map a power-of-two bucket array of at most 2^32
/// bytes, 16 bytes a bucket, so no larger map can be made (2^27 + 1 fails with E2BIG).
/// Measured on Linux 6.18 here: 2^27 blocks take about 11 GiB of kernel memory and 18 s
/// to reserve ([`live_map_bytes`]); a machine without that much memory refuses
/// ([`Error::LiveMap`]).
pub const MAX_LIVE_BLOCKS: u32 = 1 << 27;

/// Kernel memory, in bytes, that a live-block map of `blocks` blocks reserves when the
/// tracker loads: 72 bytes per preallocated entry (the kernel's element header, the
/// 16-byte key, the 8-byte size) and 16 per hash bucket, of which there are `blocks`
/// rounded up to a power of two. Measured here: 16,777,216 blocks, 1.49 GB.
pub fn live_map_bytes(blocks: u32) -> u64 {
    u64::from(blocks) * 72 + u64::from(blocks).next_power_of_two() * 16
}

/// Which calls of the tracked process count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every thread of the process.
    #[default]
    Process,
    /// Only the thread that called [`Tracker::start`] (for trackers inside a
    /// multi-threaded test harness).
    Thread,
}

/// How a process's exit was reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitStatus {
    /// Exit code, if it exited normally.
    pub code: Option<i32>,
    /// Signal number, if a signal killed it.
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// The shell convention: the code, or 128 + the signal number.
    pub fn shell_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            (None, None) => 1,
        }
    }
}

/// State shared by the tracker and its follower thread.
pub(crate) struct Shared {
    pub(crate) engine: Mutex<Engine>,
    /// Whether mmap/munmap/brk are counted (the syscall tracepoint is attached).
    count_syscalls: bool,
    pub(crate) registry: Mutex<Registry>,
    enabled: AtomicBool,
    root_exit: Mutex<Option<ExitStatus>>,
    root_exit_cv: Condvar,
}

impl Shared {
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Applies `state` to every tracked process still running (and, through the
    /// `enabled` flag, to processes that start later). Allocates nothing: `start` and
    /// `stop` go through here.
    fn set_all_states(&self, state: TrackState) -> Result<()> {
        self.enabled.store(state.enabled != 0, Ordering::SeqCst);
        let mut engine = self.engine.lock();
        let registry = self.registry.lock();
        for record in registry.values().filter(|r| r.process.ended_ns.is_none()) {
            engine.set_state(record.process.pid, state)?;
        }
        Ok(())
    }

    /// Raw counters as [`Stats`]; the syscall counters are `None` when not counted.
    pub(crate) fn stats(&self, raw: &PidStats) -> Stats {
        let mut stats = Stats::from(raw);
        if !self.count_syscalls {
            stats.syscalls = None;
        }
        stats
    }

    /// The raw counters of `pid`: captured at its exit, or read from the kernel now.
    fn raw_stats(&self, pid: u32) -> Result<PidStats> {
        if let Some(record) = self.registry.lock().get(&pid)
            && let Some(stats) = record.final_stats
        {
            return Ok(stats);
        }
        self.engine.lock().read_stats(pid)
    }

    /// The tracked processes still running.
    fn live_pids(&self) -> Vec<u32> {
        self.registry
            .lock()
            .values()
            .filter(|r| r.process.ended_ns.is_none())
            .map(|r| r.process.pid)
            .collect()
    }

    pub(crate) fn root_exited(&self, code: Option<i32>, signal: Option<i32>) {
        *self.root_exit.lock() = Some(ExitStatus { code, signal });
        self.root_exit_cv.notify_all();
    }
}

/// Configures a [`Tracker`]. Start with [`Tracker::builder`].
#[derive(Clone, Debug)]
pub struct TrackerBuilder {
    scope: Scope,
    max_live_blocks: u32,
    start_enabled: bool,
    placement: ProbePlacement,
    links: UprobeLinks,
    count_syscalls: bool,
}

impl Default for TrackerBuilder {
    fn default() -> Self {
        TrackerBuilder {
            scope: Scope::Process,
            max_live_blocks: DEFAULT_MAX_LIVE_BLOCKS,
            start_enabled: true,
            placement: ProbePlacement::default(),
            links: UprobeLinks::default(),
            count_syscalls: true,
        }
    }
}

impl TrackerBuilder {
    /// Which calls count (default: every thread of the process).
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Capacity of the kernel's live-block map, shared by all tracked processes: 1 to
    /// [`MAX_LIVE_BLOCKS`] blocks (default 1,048,576, which reserves about 88 MiB of kernel
    /// memory when the tracker loads, [`live_map_bytes`]). A full map is counted in
    /// `lost_events`, never silent. A capacity out of range makes building the tracker
    /// fail with [`Error::MaxLiveBlocks`].
    pub fn max_live_blocks(mut self, blocks: u32) -> Self {
        self.max_live_blocks = blocks;
        self
    }

    /// For [`spawn`](Self::spawn) and [`attach_pid`](Self::attach_pid): whether counting
    /// is on from the start (default) or waits for [`Tracker::start`].
    pub fn start_enabled(mut self, enabled: bool) -> Self {
        self.start_enabled = enabled;
        self
    }

    /// Where entry probes go (default: the cheapest exact site of each function).
    pub fn probe_placement(mut self, placement: ProbePlacement) -> Self {
        self.placement = placement;
        self
    }

    /// Which kind of kernel link attaches the uprobes (default: the cheapest to detach
    /// that the kernel has).
    pub fn uprobe_links(mut self, links: UprobeLinks) -> Self {
        self.links = links;
        self
    }

    /// Whether `mmap`, `munmap` and `brk` are counted (default: yes). Counting them
    /// puts a raw tracepoint on every syscall's exit, on the whole machine, for as long
    /// as the tracker exists: about 27 ns more per system call for every process here
    /// (BENCHMARKS.md). With `false` nothing is attached there and
    /// [`Stats::syscalls`](crate::Stats::syscalls) is `None`; the heap numbers are the
    /// same.
    pub fn count_syscalls(mut self, count: bool) -> Self {
        self.count_syscalls = count;
        self
    }

    fn shared(&self, enabled: bool) -> Result<Arc<Shared>> {
        if !(1..=MAX_LIVE_BLOCKS).contains(&self.max_live_blocks) {
            return Err(Error::MaxLiveBlocks {
                requested: self.max_live_blocks,
                max: MAX_LIVE_BLOCKS,
            });
        }
        Ok(Arc::new(Shared {
            engine: Mutex::new(Engine::load(
                self.max_live_blocks,
                self.placement,
                self.links,
                self.count_syscalls,
            )?),
            count_syscalls: self.count_syscalls,
            registry: Mutex::new(Registry::new()),
            enabled: AtomicBool::new(enabled),
            root_exit: Mutex::new(None),
            root_exit_cv: Condvar::new(),
        }))
    }

    /// A tracker of the calling process (all its threads, or with [`Scope::Thread`] the
    /// thread that calls `start`). Counting is off until [`Tracker::start`].
    pub fn build(self) -> Result<Tracker> {
        let pid = std::process::id();
        let shared = self.shared(false)?;
        {
            let mut engine = shared.engine.lock();
            engine.reset_stats(pid)?;
            engine.set_state(pid, TrackState::default())?;
            let probes = engine.attach_process(pid)?;
            let mut record = ProcessRecord::new(pid, std::os::unix::process::parent_id());
            record.process.probes = probes;
            record.process.allocator = AllocatorStatus::Probed;
            shared.registry.lock().insert(pid, record);
        }
        Ok(Tracker {
            shared,
            pid,
            scope: self.scope,
            follower: None,
        })
    }

    /// Starts `command` held stopped before its exec, probes it, and lets it run; every
    /// process it starts is followed and tracked with its own counters. Counting starts
    /// at the command's first instruction unless [`start_enabled(false)`](Self::start_enabled).
    pub fn spawn(self, command: impl Into<CommandSpec>) -> Result<Tracker> {
        if self.scope == Scope::Thread {
            return Err(Error::Usage(
                "Scope::Thread applies to the calling process only",
            ));
        }
        let shared = self.shared(self.start_enabled)?;
        let (follower, pid) = Follower::start(shared.clone(), Root::Spawn(command.into()))?;
        Ok(Tracker {
            shared,
            pid,
            scope: Scope::Process,
            follower: Some(follower),
        })
    }

    /// Tracks a running process and every process it starts from now on. Calls made
    /// before the probes are attached are not counted (frees of those blocks show as
    /// `unmatched_frees`). Needs CAP_SYS_PTRACE over the process (root, or the same user
    /// with a permissive `kernel.yama.ptrace_scope`). If `pid` is a child of the calling
    /// process, the tracker reaps it when it exits: take its exit status from
    /// [`Tracker::wait`], not from your own `wait`.
    pub fn attach_pid(self, pid: u32) -> Result<Tracker> {
        if self.scope == Scope::Thread {
            return Err(Error::Usage(
                "Scope::Thread applies to the calling process only",
            ));
        }
        if pid == std::process::id() {
            return Err(Error::Usage(
                "attach_pid cannot track the calling process; use Tracker::new",
            ));
        }
        let shared = self.shared(self.start_enabled)?;
        let (follower, pid) = Follower::start(shared.clone(), Root::Attach(pid))?;
        Ok(Tracker {
            shared,
            pid,
            scope: Scope::Process,
            follower: Some(follower),
        })
    }
}

/// A cheap, cloneable handle to a tracker's per-process controls, usable from another
/// thread while the tracker waits (the runner's FIFO handler uses it to count only
/// inside benchmark regions).
#[derive(Clone)]
pub struct TrackerControl {
    shared: Arc<Shared>,
}

impl TrackerControl {
    /// Turns counting on or off for one tracked process (all its threads).
    pub fn set_process_enabled(&self, pid: u32, enabled: bool) -> Result<()> {
        let mut engine = self.shared.engine.lock();
        engine.set_state(
            pid,
            TrackState {
                enabled: enabled as u32,
                tid: 0,
            },
        )
    }

    /// Turns counting on or off for every tracked process, and for processes that
    /// start later.
    pub fn set_all_enabled(&self, enabled: bool) -> Result<()> {
        self.shared.set_all_states(TrackState {
            enabled: enabled as u32,
            tid: 0,
        })
    }

    /// Zeroes one process's counters and forgets its live blocks.
    pub fn reset_process(&self, pid: u32) -> Result<()> {
        let mut registry = self.shared.registry.lock();
        if let Some(record) = registry.get_mut(&pid)
            && record.final_stats.is_some()
        {
            record.final_stats = Some(PidStats::ZERO);
            return Ok(());
        }
        drop(registry);
        self.shared.engine.lock().reset_stats(pid)
    }

    /// One process's counters now (or when it exited).
    pub fn process_stats(&self, pid: u32) -> Result<Stats> {
        Ok(self.shared.stats(&self.shared.raw_stats(pid)?))
    }

    /// Whether `pid` is a tracked process that has not exited.
    pub fn is_running(&self, pid: u32) -> bool {
        self.shared
            .registry
            .lock()
            .get(&pid)
            .is_some_and(|r| r.process.ended_ns.is_none())
    }

    /// Every tracked process, as in [`Tracker::collect_processes`].
    pub fn processes(&self) -> Vec<u32> {
        self.shared.registry.lock().keys().copied().collect()
    }
}

/// Counts the heap allocations of a process, in the kernel, exactly.
///
/// ```no_run
/// let mut tracker = memtrack::Tracker::new()?;
/// tracker.start()?;
/// let v = vec![0u8; 1000];
/// drop(v);
/// tracker.stop()?;
/// let stats = tracker.collect()?;
/// assert_eq!(stats.alloc_calls, 1);
/// assert_eq!(stats.bytes_allocated, 1000);
/// # Ok::<(), memtrack::Error>(())
/// ```
///
/// Dropping the tracker detaches every probe (and stops following processes).
pub struct Tracker {
    shared: Arc<Shared>,
    pid: u32,
    scope: Scope,
    follower: Option<Follower>,
}

impl Tracker {
    /// A tracker of the calling process, all threads; counting is off until
    /// [`start`](Self::start). Needs CAP_BPF and CAP_PERFMON (or root).
    pub fn new() -> Result<Tracker> {
        Tracker::builder().build()
    }

    /// Configure a tracker: scope, map size, another process or a command.
    pub fn builder() -> TrackerBuilder {
        TrackerBuilder::default()
    }

    /// A handle to per-process controls, for another thread.
    pub fn control(&self) -> TrackerControl {
        TrackerControl {
            shared: self.shared.clone(),
        }
    }

    /// The pid of the tracked (root) process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Turns counting on. Nothing is allocated on the way out of this call, so the
    /// tracker's own work is never counted.
    pub fn start(&mut self) -> Result<()> {
        self.set_enabled(true)
    }

    /// Turns counting off. Nothing is allocated on the way into this call.
    pub fn stop(&mut self) -> Result<()> {
        self.set_enabled(false)
    }

    fn set_enabled(&mut self, enabled: bool) -> Result<()> {
        let tid = match self.scope {
            Scope::Process => 0,
            Scope::Thread => nix::unistd::gettid().as_raw() as u32,
        };
        self.shared.set_all_states(TrackState {
            enabled: enabled as u32,
            tid,
        })
    }

    /// The counters of the tracked (root) process since it was first tracked or last
    /// [`reset`](Self::reset).
    pub fn collect(&self) -> Result<Stats> {
        Ok(self.shared.stats(&self.shared.raw_stats(self.pid)?))
    }

    /// Every tracked process (the root and its descendants) with its own counters,
    /// ordered by pid.
    pub fn collect_processes(&self) -> Result<Vec<TrackedProcess>> {
        let records: Vec<ProcessRecord> = self.shared.registry.lock().values().cloned().collect();
        records
            .iter()
            .map(|record| {
                let raw = self.shared.raw_stats(record.process.pid)?;
                Ok(record.report(self.shared.stats(&raw)))
            })
            .collect()
    }

    /// Zeroes the counters of every tracked process. Blocks allocated before the reset
    /// are forgotten: their frees count as `unmatched_frees`.
    pub fn reset(&mut self) -> Result<()> {
        let pids = self.shared.live_pids();
        let mut engine = self.shared.engine.lock();
        for pid in pids {
            engine.reset_stats(pid)?;
        }
        Ok(())
    }

    /// The probes attached to the root process (what was measured).
    pub fn probes(&self) -> Vec<ProbeInfo> {
        self.shared.engine.lock().probes_of(self.pid)
    }

    /// Events that could not be attributed to any process (see
    /// [`Stats::lost_events`] for per-process losses). 0 means nothing was lost.
    pub fn unattributed_lost_events(&self) -> u64 {
        self.shared.engine.lock().unattributed_losses()
    }

    /// For spawned or attached trackers: waits until the root process exits and returns
    /// how it exited. Its descendants may still run (and stay tracked).
    pub fn wait(&self) -> Result<ExitStatus> {
        if self.follower.is_none() {
            return Err(Error::Usage(
                "wait() is for trackers made with spawn() or attach_pid()",
            ));
        }
        let mut exit = self.shared.root_exit.lock();
        while exit.is_none() {
            self.shared.root_exit_cv.wait(&mut exit);
        }
        Ok(exit.expect("checked above"))
    }

    /// Detaches every probe and waits until the kernel has removed them: about 55 ms
    /// here with uprobe_multi links, about 110 ms per probed function with perf-event
    /// links (BENCHMARKS.md). Dropping the tracker also detaches everything, but returns
    /// at once and lets a background thread wait (the process's exit waits for it).
    pub fn close(mut self) {
        if let Some(mut follower) = self.follower.take() {
            follower.shutdown();
        }
        self.shared.engine.lock().detach_all_now();
    }

    /// The root's exit status if it has exited.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        *self.shared.root_exit.lock()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        // Stop following first (the follower uses the engine), then the engine's drop
        // detaches every probe and unloads the programs.
        if let Some(mut follower) = self.follower.take() {
            follower.shutdown();
        }
    }
}
