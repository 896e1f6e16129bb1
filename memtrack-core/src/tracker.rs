//! [`Tracker`]: the in-process API. It tracks the calling process (all its threads, or
//! one), decides when its calls are counted, and turns the kernel's counters into
//! [`Stats`]. [`TrackerBuilder`] (builder.rs) makes it.

use std::sync::Arc;

use memtrack_common::TrackState;

#[cfg(doc)]
use crate::ProcessTracker;
use crate::{
    AllocatorStatus, OutputDir, ProbeInfo, Stats, TrackedProcess, TrackerBuilder,
    error::{Error, Result},
    follow::registry::ProcessRecord,
    shared::Shared,
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
            let started_ns = engine.scope_origin_ns(pid);
            let mut record =
                ProcessRecord::new(pid, std::os::unix::process::parent_id(), started_ns);
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
    /// work. Not to be nested (the lock is not reentrant). Fails, without running
    /// `work`, when counting cannot be paused, and with
    /// [`Error::CountingNotRestored`] (`work`'s result then dropped) when it cannot be
    /// switched back.
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
        self.shared
            .set_all_states(state)
            .map_err(|e| Error::CountingNotRestored {
                source: Box::new(e),
            })?;
        Ok(out)
    }

    /// The counters since the tracker was made or last [`reset`](Self::reset).
    pub fn collect(&self) -> Result<Stats> {
        self.shared.collect(self.pid)
    }

    /// This process as a tracked process: pid, command line, probes and the counters
    /// of [`collect`](Self::collect) (what a result file holds).
    pub fn process(&self) -> Result<TrackedProcess> {
        self.uncounted(|| {
            let timeline = self.shared.timeline(self.pid)?;
            Ok(self.record().report(self.collect()?, timeline))
        })?
    }

    /// This process's memory over time since the tracker was made or last
    /// [`reset`](Self::reset), up to now (`None`: built with
    /// [`TrackerBuilder::timeline`]`(false)`). Not counted, as
    /// [`probes`](Self::probes).
    pub fn timeline(&self) -> Result<Option<crate::record::timeline::Timeline>> {
        self.uncounted(|| self.shared.timeline(self.pid))?
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
    /// [`TrackerBuilder::stacks`]. Not counted, as [`probes`](Self::probes), and fails
    /// as it does.
    pub fn stacks(&self) -> Result<Option<crate::stacks::ProcessStacks>> {
        self.uncounted(|| self.shared.engine.lock().stacks(self.pid))
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
            Ok(Some(stacks.write_to(out, self.pid)?))
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
    /// while counting is on. Fails when counting cannot be switched off for the call
    /// (as [`start`](Self::start) would fail), and with [`Error::CountingNotRestored`]
    /// when it cannot be switched back after it: a failure never passes silently as a
    /// count that goes on without this thread.
    pub fn probes(&self) -> Result<Vec<ProbeInfo>> {
        self.uncounted(|| self.shared.probes(self.pid))
    }

    /// Events that could not be attributed to any process (see
    /// [`Stats::lost_events`] for this process's losses). 0 means nothing was lost.
    pub fn unattributed_lost_events(&self) -> u64 {
        self.shared.unattributed_lost_events()
    }

    /// Detaches every probe and waits until the kernel has removed them: an RCU grace
    /// period or so with uprobe_multi links, one per probed function with perf-event
    /// links (BENCHMARKS.md measures both). The links are closed on the calling thread, and no thread
    /// is started, so code that runs after `close` (a benchmark counted by the next
    /// tracker, say) finds the thread history it would have without memtrack. Dropping
    /// the tracker also detaches everything, but returns at once and lets a background
    /// thread wait (the process's exit waits for it).
    pub fn close(self) {
        self.shared.detach_all_here();
    }
}
