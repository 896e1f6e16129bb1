//! [`Tracker`]: the in-process API. It tracks the calling process (all its threads, or
//! one), decides when its calls are counted, and turns the kernel's counters into
//! [`Stats`]. And [`TrackerBuilder`]: the settings both kinds of tracker share (the
//! kernel side: map size, probe placement, link kind, syscall counting), which builds a
//! [`Tracker`] or, for other processes, a [`ProcessTracker`].

use std::sync::Arc;

use memtrack_common::{DEFAULT_MAX_LIVE_BLOCKS, DEFAULT_PREALLOCATED_LIVE_BLOCKS, TrackState};

use crate::{
    error::{Error, Result},
    follow::{Follower, Root},
    live_sizing::MAX_LIVE_BLOCKS,
    loader::{Engine, StackSettings},
    output_dir::OutputDir,
    process::{AllocatorStatus, ProcessRecord, TrackedProcess},
    process_tracker::ProcessTracker,
    shared::Shared,
    spawn::CommandSpec,
    stats::Stats,
    uprobe_programs::{Loading, ProbeInfo, ProbePlacement, UprobeLinks},
};

/// Which calls of the calling process a [`Tracker`] counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every thread of the process.
    #[default]
    Process,
    /// Only the thread that called [`Tracker::start`] (for trackers inside a
    /// multi-threaded test harness).
    Thread,
}

/// Configures a [`Tracker`] or a [`ProcessTracker`]. Start with [`Tracker::builder`].
#[derive(Clone, Debug)]
pub struct TrackerBuilder {
    max_live_blocks: u32,
    preallocated_live_blocks: u32,
    start_enabled: Option<bool>,
    placement: ProbePlacement,
    links: UprobeLinks,
    count_syscalls: bool,
    stacks: Option<u32>,
    stack_cache: bool,
}

impl Default for TrackerBuilder {
    fn default() -> Self {
        TrackerBuilder {
            max_live_blocks: DEFAULT_MAX_LIVE_BLOCKS,
            preallocated_live_blocks: DEFAULT_PREALLOCATED_LIVE_BLOCKS,
            start_enabled: None,
            placement: ProbePlacement::default(),
            links: UprobeLinks::default(),
            count_syscalls: true,
            stacks: None,
            stack_cache: true,
        }
    }
}

impl TrackerBuilder {
    /// How many blocks can be live at once in the kernel's live-block maps, shared by all
    /// tracked processes: 1 to [`MAX_LIVE_BLOCKS`] blocks (default 1,048,576). The first
    /// [`preallocated_live_blocks`](Self::preallocated_live_blocks) of them have
    /// preallocated entries; the others' entries are allocated as blocks go live, their
    /// hash buckets (16 bytes a block) reserved at load ([`live_map_bytes`](crate::live_map_bytes)
    /// says how much). More live blocks than this are counted in `lost_events`, never
    /// silent. A capacity out of range makes building the tracker fail with
    /// [`Error::MaxLiveBlocks`].
    pub fn max_live_blocks(mut self, blocks: u32) -> Self {
        self.max_live_blocks = blocks;
        self
    }

    /// How many of the [`max_live_blocks`](Self::max_live_blocks) have their kernel
    /// entries preallocated, in blocks (default 524,288; at least 1; more than
    /// `max_live_blocks` counts as all of them). Preallocated entries are reserved and
    /// zeroed when they are made, 80 bytes per block and 16 per hash bucket (about 40 ns
    /// per block here: 21 ms for the default), and are the cheapest per allocator call;
    /// the blocks live beyond them get entries the kernel allocates on demand, which
    /// cost more per allocation and release of such a block (BENCHMARKS.md), and no
    /// memory until used. A [`Tracker`] of the calling process reserves them all when it
    /// loads. A [`ProcessTracker`] reserves the first
    /// [`LIVE_BLOCKS_AT_LOAD`](crate::LIVE_BLOCKS_AT_LOAD) (65,536) when it loads and the
    /// others on a thread of its own once its processes keep
    /// [`GROW_AT_LIVE_BLOCKS`](crate::GROW_AT_LIVE_BLOCKS) (16,384) blocks live
    /// (blocks that go live before they are ready get entries allocated on demand,
    /// counted exactly all the same; [`ProcessTracker::later_live_blocks`] says what
    /// became of them): a short command pays for none of them. 0 makes building the
    /// tracker fail with [`Error::PreallocatedLiveBlocks`].
    pub fn preallocated_live_blocks(mut self, blocks: u32) -> Self {
        self.preallocated_live_blocks = blocks;
        self
    }

    /// For [`spawn`](Self::spawn) and [`attach_pid`](Self::attach_pid): whether counting
    /// is on from the start (default) or waits for [`ProcessTracker::start`]. A
    /// [`Tracker`] of the calling process always waits for [`Tracker::start`] (counting
    /// from its construction would count the caller's own setup): with this set,
    /// [`build`](Self::build) fails with [`Error::Usage`] rather than ignore it.
    pub fn start_enabled(mut self, enabled: bool) -> Self {
        self.start_enabled = Some(enabled);
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

    /// Records the call stack of every counted allocation, unwound in the kernel from
    /// the objects' `.eh_frame`, at most `depth` frames (1 to
    /// [`stacks::MAX_DEPTH`](crate::stacks::MAX_DEPTH) = 64: another depth makes
    /// building the tracker fail with [`Error::StackDepth`]; a deeper stack is cut there
    /// and marked truncated; `memtrack run --stacks` uses
    /// [`stacks::DEFAULT_DEPTH`](crate::stacks::DEFAULT_DEPTH) = 64), with per-stack
    /// counters read by
    /// [`Tracker::stacks`] and [`ProcessTracker::stacks`]. Off by default. With stacks
    /// on the tracker reserves about 16 MiB for unwind rows and 8.5 MiB for distinct
    /// stacks (each live block's stack id is kept in its live-block entry).
    pub fn stacks(mut self, depth: u32) -> Self {
        self.stacks = Some(depth);
        self
    }

    /// With [`stacks`](Self::stacks): whether an allocation whose stack still holds
    /// every word an earlier walk from the same registers read reuses that walk's stack
    /// instead of walking again (exact either way: docs/ARCHITECTURE.md, "Call stacks").
    /// On by default; off, every stack is walked, which only measuring the walk itself
    /// needs. [`Tracker::stack_walks`] counts both kinds.
    pub fn stack_cache(mut self, enabled: bool) -> Self {
        self.stack_cache = enabled;
        self
    }

    /// The settings' range checks, and whether this process and kernel can track at
    /// all: what fails before anything is started.
    fn check(&self) -> Result<()> {
        if !(1..=MAX_LIVE_BLOCKS).contains(&self.max_live_blocks) {
            return Err(Error::MaxLiveBlocks {
                requested: self.max_live_blocks,
                max: MAX_LIVE_BLOCKS,
            });
        }
        if self.preallocated_live_blocks == 0 {
            return Err(Error::PreallocatedLiveBlocks {
                max: MAX_LIVE_BLOCKS,
            });
        }
        if let Some(depth) = self.stacks
            && !(1..=crate::stacks::MAX_DEPTH).contains(&depth)
        {
            return Err(Error::StackDepth {
                requested: depth,
                max: crate::stacks::MAX_DEPTH,
            });
        }
        crate::privileges::check()?;
        crate::privileges::check_kernel()
    }

    /// Loads the eBPF programs with these settings, on the calling thread or with
    /// threads of its own (`loading`). The caller has [`check`](Self::check)ed them.
    fn shared(&self, enabled: bool, loading: Loading<'_>) -> Result<Arc<Shared>> {
        let engine = Engine::load(
            self.max_live_blocks,
            self.preallocated_live_blocks,
            self.placement,
            self.links,
            self.count_syscalls,
            self.stacks.map(|depth| StackSettings {
                depth,
                cache: self.stack_cache,
            }),
            loading,
        )?;
        Ok(Arc::new(Shared::new(engine, self.count_syscalls, enabled)))
    }

    /// A tracker of the calling process: all its threads ([`Scope::Process`], what
    /// [`Tracker::new`] builds), or only the thread that calls [`Tracker::start`]
    /// ([`Scope::Thread`]). Counting is off until [`Tracker::start`].
    pub fn build(self, scope: Scope) -> Result<Tracker> {
        if self.start_enabled.is_some() {
            return Err(Error::Usage(
                "start_enabled applies to spawn and attach_pid; a Tracker of the calling \
                 process counts from Tracker::start",
            ));
        }
        self.check()?;
        Tracker::attach_self(self.shared(false, Loading::Here)?, scope)
    }

    /// Starts `command` held stopped before its exec, probes it, and lets it run; every
    /// process it starts is followed and tracked with its own counters. Counting starts
    /// at the command's first instruction unless [`start_enabled(false)`](Self::start_enabled).
    pub fn spawn(self, command: impl Into<CommandSpec>) -> Result<ProcessTracker> {
        crate::ld_hook::prefetch();
        self.check()?;
        let _ = std::thread::Builder::new()
            .name("memtrack-libc".into())
            .spawn(memtrack_targets::prefetch_expected_targets);
        // The command's fork and exec overlap the loading (the kernel holds it at its
        // exec stop until the probes are in place); a failed load kills it there.
        let starting = Follower::begin(Root::Spawn(command.into()))?;
        let on_hook = starting.hook_handoff();
        let enabled = self.start_enabled.unwrap_or(true);
        let shared = self.shared(enabled, Loading::Parallel { on_hook: &on_hook })?;
        crate::hold::load_gate();
        ProcessTracker::follow(shared, starting)
    }

    /// Tracks a running process and every process it starts from now on. Calls made
    /// before the probes are attached are not counted (frees of those blocks show as
    /// `unmatched_frees`). Needs CAP_SYS_PTRACE over the process (root, or the same user
    /// with a permissive `kernel.yama.ptrace_scope`). If `pid` is a child of the calling
    /// process, the tracker reaps it when it exits: take its exit status from
    /// [`ProcessTracker::wait`], not from your own `wait`. The calling process itself is
    /// refused ([`Error::Usage`]): a process cannot trace itself; use [`Tracker::new`].
    pub fn attach_pid(self, pid: u32) -> Result<ProcessTracker> {
        if pid == std::process::id() {
            return Err(Error::Usage(
                "attach_pid cannot track the calling process; use Tracker::new",
            ));
        }
        crate::ld_hook::prefetch();
        self.check()?;
        let enabled = self.start_enabled.unwrap_or(true);
        let shared = self.shared(enabled, Loading::Parallel { on_hook: &|_| {} })?;
        ProcessTracker::follow(shared, Follower::begin(Root::Attach(pid))?)
    }
}

/// Counts the heap allocations of the calling process, in the kernel, exactly.
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
/// To track a command or another running process, and the processes they start, use
/// [`Tracker::builder`]`().spawn(..)` or `.attach_pid(..)`, which return a
/// [`ProcessTracker`]: that one has a root process to
/// [`wait`](ProcessTracker::wait) for and several processes to collect, this one
/// neither.
///
/// It has no [`wait`](ProcessTracker::wait) or
/// [`collect_processes`](ProcessTracker::collect_processes): there is no other process
/// to wait for or collect.
///
/// ```compile_fail
/// let tracker = memtrack::Tracker::new()?;
/// let exit = tracker.wait()?; // a ProcessTracker's method
/// # Ok::<(), memtrack::Error>(())
/// ```
///
/// The tracker's own work is not counted: [`start`](Self::start),
/// [`stop`](Self::stop) and [`collect`](Self::collect) allocate nothing, and the
/// methods that do ([`reset`](Self::reset), [`probes`](Self::probes),
/// [`process`](Self::process), [`stacks`](Self::stacks),
/// [`write_stacks`](Self::write_stacks)), called while counting, stop counting the
/// calling thread for their duration (the other threads of a [`Scope::Process`]
/// tracker are counted meanwhile). What they return is the caller's: dropped while
/// counting, its frees count (as unmatched frees, their allocations having not).
///
/// Dropping the tracker detaches every probe.
pub struct Tracker {
    shared: Arc<Shared>,
    pid: u32,
    scope: Scope,
    /// The state `start`/`stop` last set (counting off until the first `start`).
    state: TrackState,
    /// Held while [`uncounted`](Self::uncounted) has the calling thread left out: one
    /// thread at a time (a futex: waiting for it allocates nothing, even counted).
    pausing: std::sync::Mutex<()>,
}

impl Tracker {
    /// A tracker of the calling process, all threads; counting is off until
    /// [`start`](Self::start). Needs CAP_BPF and CAP_PERFMON (or root).
    pub fn new() -> Result<Tracker> {
        Tracker::builder().build(Scope::Process)
    }

    /// Configure a tracker: map size, probe placement, link kind, syscall counting; then
    /// [`build`](TrackerBuilder::build) one of this process, or
    /// [`spawn`](TrackerBuilder::spawn) a command or
    /// [`attach_pid`](TrackerBuilder::attach_pid) to a process.
    pub fn builder() -> TrackerBuilder {
        TrackerBuilder::default()
    }

    /// Probes the calling process with the loaded programs of `shared`, counting off.
    pub(crate) fn attach_self(shared: Arc<Shared>, scope: Scope) -> Result<Tracker> {
        let pid = std::process::id();
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
            scope,
            state: TrackState::default(),
            pausing: std::sync::Mutex::new(()),
        })
    }

    /// Turns counting on: for every thread, or with [`Scope::Thread`] for the calling
    /// thread only. Nothing is allocated on the way out of this call, so the tracker's
    /// own work is never counted.
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
        let state = TrackState {
            enabled: enabled as u32,
            tid,
        };
        self.shared.set_all_states(state)?;
        self.state = state;
        Ok(())
    }

    /// Runs `work`, the tracker's own, without counting the calling thread: if it is
    /// counted now, it is left out for the duration (with [`Scope::Process`], the other
    /// threads are still counted meanwhile). Switching allocates nothing, as
    /// [`start`](Self::start) and [`stop`](Self::stop) do not. Threads calling it at
    /// once take turns: the kernel keeps one state, and a second thread's pause would
    /// otherwise replace the first's, the first's restore then counting the second's
    /// work. Not to be nested (the lock is not reentrant).
    fn uncounted<T>(&self, work: impl FnOnce() -> T) -> Result<T> {
        let state = self.state;
        let me = nix::unistd::gettid().as_raw() as u32;
        let paused = match state {
            TrackState { enabled: 0, .. } => None,
            TrackState { tid: 0, .. } => Some(TrackState {
                enabled: 1,
                tid: me | TrackState::ALL_BUT,
            }),
            TrackState { tid, .. } if tid == me => Some(TrackState { enabled: 0, tid }),
            // Only another thread is counted: this one is not.
            _ => None,
        };
        let Some(paused) = paused else {
            return Ok(work());
        };
        let _turn = self
            .pausing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.shared.set_all_states(paused)?;
        let out = work();
        self.shared.set_all_states(state)?;
        Ok(out)
    }

    /// The counters since the tracker was made or last [`reset`](Self::reset).
    pub fn collect(&self) -> Result<Stats> {
        self.shared.collect(self.pid)
    }

    /// This process as a tracked process: pid, command line, probes and the counters
    /// of [`collect`](Self::collect) (what a result file holds).
    pub fn process(&self) -> Result<TrackedProcess> {
        self.uncounted(|| Ok(self.record().report(self.collect()?)))?
    }

    /// This process's record (registered when the tracker was made).
    fn record(&self) -> ProcessRecord {
        let record = self.shared.registry.lock().get(&self.pid).cloned();
        record.expect("the calling process is registered when the tracker is made")
    }

    /// Zeroes the counters. Blocks allocated before the reset are forgotten: their
    /// frees count as `unmatched_frees`. The reset's own allocations are not counted,
    /// even while counting is on.
    pub fn reset(&mut self) -> Result<()> {
        self.uncounted(|| self.shared.reset_live())?
    }

    /// The per-stack counters of this process so far; `None` unless built with
    /// [`TrackerBuilder::stacks`]. Not counted, as [`probes`](Self::probes).
    pub fn stacks(&self) -> Option<crate::stacks::ProcessStacks> {
        let read = || self.shared.engine.lock().stacks(self.pid);
        self.uncounted(read).unwrap_or_else(|_| read())
    }

    /// Writes this process's stacks file into `out` (`{pid}.MemtrackStacks.msgpack`,
    /// [`stacks_file_name`](crate::stacks::stacks_file_name), beside where its result
    /// file goes), as result files are written: a temporary file created through the
    /// directory's handle, renamed into place. Returns its path; `None`, writing
    /// nothing, unless built with [`TrackerBuilder::stacks`]. The stacks' scope spans
    /// from the tracker's start to now (`CLOCK_MONOTONIC` ns).
    pub fn write_stacks(&self, out: &OutputDir) -> Result<Option<std::path::PathBuf>> {
        self.uncounted(|| {
            let Some(mut stacks) = self.shared.engine.lock().stacks(self.pid) else {
                return Ok(None);
            };
            stacks.process.start_ns = self.record().process.started_ns;
            stacks.process.set_end(crate::monotonic_ns());
            out.write_file(
                &crate::stacks::stacks_file_name(self.pid),
                &stacks.to_bytes(),
            )
            .map(Some)
        })?
    }

    /// How the stacks so far were found, across every process of the tracker: walked,
    /// or reused from the in-kernel cache of walks (docs/ARCHITECTURE.md, "Call
    /// stacks"). `None` unless built with
    /// [`TrackerBuilder::stacks`](crate::TrackerBuilder::stacks).
    pub fn stack_walks(&self) -> Option<crate::stacks::StackWalks> {
        self.shared.stack_walks()
    }

    /// The probes attached to this process (what was measured). Not counted, even
    /// while counting is on (unless counting could not be switched off for the call,
    /// which fails only as `start` would).
    pub fn probes(&self) -> Vec<ProbeInfo> {
        let read = || self.shared.probes(self.pid);
        self.uncounted(read).unwrap_or_else(|_| read())
    }

    /// Events that could not be attributed to any process (see
    /// [`Stats::lost_events`] for this process's losses). 0 means nothing was lost.
    pub fn unattributed_lost_events(&self) -> u64 {
        self.shared.unattributed_lost_events()
    }

    /// Detaches every probe and waits until the kernel has removed them: about 70 ms
    /// here with uprobe_multi links, about 110 ms per probed function with perf-event
    /// links (BENCHMARKS.md). The links are closed on the calling thread, and no thread
    /// is started, so code that runs after `close` (a benchmark counted by the next
    /// tracker, say) finds the thread history it would have without memtrack. Dropping
    /// the tracker also detaches everything, but returns at once and lets a background
    /// thread wait (the process's exit waits for it).
    pub fn close(self) {
        self.shared.detach_all_here();
    }
}
