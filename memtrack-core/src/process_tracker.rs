//! [`ProcessTracker`]: tracks other processes, a command it started or a process it
//! attached to, and every process they start (followed with ptrace, follow.rs), each
//! with its own counters; and [`TrackerControl`], its handle for other threads.

use std::sync::Arc;

use memtrack_common::TrackState;

use crate::{
    ProbeInfo, Stats, TrackedProcess,
    error::Result,
    follow::{Follower, Starting},
    shared::{ExitStatus, Shared},
};

/// Counts the heap allocations of a process tree: a command started by
/// [`Tracker::builder`](crate::Tracker::builder)`().spawn(..)`, or a running process
/// joined by `.attach_pid(..)`, and every process started in it from then on.
///
/// ```no_run
/// use memtrack::{CommandSpec, Tracker};
///
/// let tracker = Tracker::builder().spawn(CommandSpec::new("ls").args(["-l"]))?;
/// let exit = tracker.wait()?;
/// for process in tracker.collect_processes()? {
///     println!("{} {:?}: {} blocks", process.pid, process.command, process.stats.alloc_calls);
/// }
/// assert_eq!(exit.code, Some(0));
/// # Ok::<(), memtrack::Error>(())
/// ```
///
/// Dropping the tracker stops following (processes still running go on, untracked) and
/// detaches every probe.
pub struct ProcessTracker {
    shared: Arc<Shared>,
    pid: u32,
    follower: Follower,
}

impl ProcessTracker {
    /// Starts following from `root` with the loaded programs of `shared`; returns once
    /// the root process is probed and running.
    pub(crate) fn follow(shared: Arc<Shared>, starting: Starting) -> Result<ProcessTracker> {
        let (follower, pid) = starting.finish(shared.clone())?;
        shared.start_live_growth();
        shared.start_timeline_drain();
        Ok(ProcessTracker {
            shared,
            pid,
            follower,
        })
    }

    /// A handle to per-process controls, for another thread.
    pub fn control(&self) -> TrackerControl {
        TrackerControl {
            shared: self.shared.clone(),
        }
    }

    /// The pid of the root process (the spawned command, or the attached process).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Turns counting on in every tracked process, and in processes that start later.
    pub fn start(&mut self) -> Result<()> {
        self.control().set_all_enabled(true)
    }

    /// Turns counting off in every tracked process, and in processes that start later.
    pub fn stop(&mut self) -> Result<()> {
        self.control().set_all_enabled(false)
    }

    /// The counters of the root process since it was first tracked or last
    /// [`reset`](Self::reset) (until its exec, see
    /// [`TrackedProcess::earlier_images`], the counters of its last image).
    pub fn collect(&self) -> Result<Stats> {
        self.shared.collect(self.pid)
    }

    /// Every tracked process (the root and its descendants) with its own counters,
    /// ordered by pid.
    pub fn collect_processes(&self) -> Result<Vec<TrackedProcess>> {
        self.shared.collect_processes()
    }

    /// Zeroes the counters of every tracked process still running. Blocks allocated
    /// before the reset are forgotten: their frees count as `unmatched_frees`.
    pub fn reset(&mut self) -> Result<()> {
        self.shared.reset_live()
    }

    /// The per-stack counters of process `pid` (a tracked process, running or ended);
    /// `None` unless built with [`TrackerBuilder::stacks`](crate::TrackerBuilder::stacks).
    pub fn stacks(&self, pid: u32) -> Option<crate::stacks::ProcessStacks> {
        self.shared.engine.lock().stacks(pid)
    }

    /// How the stacks so far were found, across every process of the tracker: walked,
    /// or reused from the in-kernel cache of walks (docs/ARCHITECTURE.md, "Call
    /// stacks"). `None` unless built with
    /// [`TrackerBuilder::stacks`](crate::TrackerBuilder::stacks).
    pub fn stack_walks(&self) -> Option<crate::stacks::StackWalks> {
        self.shared.stack_walks()
    }

    /// The memory over time of process `pid` (a tracked process, running or ended):
    /// since its last image began (or its counters' last reset), up to now or to its
    /// exit. `None` when built with
    /// [`TrackerBuilder::timeline`](crate::TrackerBuilder::timeline)`(false)`, or for a
    /// process it does not track.
    pub fn timeline(&self, pid: u32) -> Result<Option<crate::record::timeline::Timeline>> {
        self.shared.timeline(pid)
    }

    /// The probes attached to the root process (what was measured).
    pub fn probes(&self) -> Vec<ProbeInfo> {
        self.shared.probes(self.pid)
    }

    /// What became of the preallocated live-block entries this tracker reserves after
    /// load, once its processes hold more blocks live than
    /// [`LIVE_BLOCKS_AT_LOAD`](crate::LIVE_BLOCKS_AT_LOAD)
    /// ([`TrackerBuilder::preallocated_live_blocks`](crate::TrackerBuilder::preallocated_live_blocks)).
    pub fn later_live_blocks(&self) -> crate::LaterLiveBlocks {
        self.shared.engine.lock().later_live_blocks()
    }

    /// Events that could not be attributed to any process (see
    /// [`Stats::lost_events`] for per-process losses). 0 means nothing was lost.
    pub fn unattributed_lost_events(&self) -> u64 {
        self.shared.unattributed_lost_events()
    }

    /// Waits until the root process exits and returns how it exited. Its descendants
    /// may still run (and stay tracked). Fails with [`Error::FollowerEnded`] if
    /// memtrack's follower thread ended before the root did (a bug: no exit can be seen
    /// then, and waiting would never end).
    ///
    /// [`Error::FollowerEnded`]: crate::Error::FollowerEnded
    pub fn wait(&self) -> Result<ExitStatus> {
        self.shared.wait_root()
    }

    /// Every tracked process as it exits, with its final counters (what
    /// [`collect_processes`](Self::collect_processes) will report for it), e.g. to save
    /// each result as soon as there is one. The channel ends when the tracker stops
    /// following (it is closed or dropped). One channel at a time: calling this again
    /// ends the earlier one. Processes that exited before the call are not sent.
    pub fn exited_processes(&self) -> std::sync::mpsc::Receiver<TrackedProcess> {
        self.shared.exits()
    }

    /// The root's exit status if it has exited.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        self.shared.root_exit()
    }

    /// Stops following, detaches every probe and waits until the kernel has removed
    /// them (see [`Tracker::close`](crate::Tracker::close) for how long that takes).
    /// Dropping the tracker returns at once and lets a background thread wait.
    pub fn close(mut self) {
        self.follower.shutdown();
        self.shared.detach_all_now();
    }
}

impl Drop for ProcessTracker {
    fn drop(&mut self) {
        // Stop following first (the follower uses the engine); the engine's drop, with
        // the last reference to the shared state, detaches every probe.
        self.follower.shutdown();
    }
}

/// A cheap, cloneable handle to a [`ProcessTracker`]'s per-process controls, usable
/// from another thread while the tracker waits (the runner's FIFO handler uses it to
/// count only inside benchmark regions).
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

    /// The stacks of `pid` now (or when it exited): `None` unless built with
    /// [`TrackerBuilder::stacks`](crate::TrackerBuilder::stacks). Each process's
    /// stacks stay readable after it exited, so the receiver of
    /// [`ProcessTracker::exited_processes`] can write them.
    pub fn stacks(&self, pid: u32) -> Option<crate::stacks::ProcessStacks> {
        self.shared.engine.lock().stacks(pid)
    }

    /// The memory over time of `pid` now (or when it exited), as in
    /// [`ProcessTracker::timeline`]: read it before
    /// [`reset_process`](Self::reset_process) ends its scope.
    pub fn timeline(&self, pid: u32) -> Result<Option<crate::record::timeline::Timeline>> {
        self.shared.timeline(pid)
    }

    /// Zeroes one process's counters and forgets its live blocks.
    pub fn reset_process(&self, pid: u32) -> Result<()> {
        self.shared.reset_process(pid)
    }

    /// One process's counters now (or when it exited).
    pub fn process_stats(&self, pid: u32) -> Result<Stats> {
        self.shared.collect(pid)
    }

    /// When tracking of `pid` began (`TrackedProcess::started_ns`, `CLOCK_MONOTONIC`
    /// ns): the origin of its timeline's times.
    pub fn started_ns(&self, pid: u32) -> Option<u64> {
        self.shared
            .registry
            .lock()
            .get(&pid)
            .map(|r| r.process.started_ns)
    }

    /// Whether `pid` is a tracked process that has not exited.
    pub fn is_running(&self, pid: u32) -> bool {
        self.shared
            .registry
            .lock()
            .get(&pid)
            .is_some_and(|r| r.process.ended_ns.is_none())
    }

    /// Every tracked process, as in [`ProcessTracker::collect_processes`].
    pub fn processes(&self) -> Vec<u32> {
        self.shared.registry.lock().keys().copied().collect()
    }
}
