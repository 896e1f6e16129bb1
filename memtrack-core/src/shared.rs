//! The state a tracker and its follower thread share: the loaded eBPF [`Engine`], the
//! registry of tracked processes, whether counting is on, and how the root process
//! exited. The trackers ([`Tracker`](crate::Tracker),
//! [`ProcessTracker`](crate::ProcessTracker)) read and steer tracking through it; the
//! follower (follow.rs) registers, probes and retires processes in it. Neither knows
//! the other: both know this.

use std::sync::{
    Arc, Weak,
    atomic::{AtomicBool, Ordering},
};

use memtrack_common::{PidStats, TrackState};
use parking_lot::{Condvar, Mutex};

use crate::{
    ProbeInfo, Stats, TrackedProcess,
    engine::{
        Engine,
        live::growth::{self as live_growth, LiveMore},
    },
    error::{Error, FollowerEnd, Result},
    follow::registry::{ProcessRecord, Registry},
};

/// How often a tracker of other processes drains the timeline's ring buffer: at the
/// fastest, a busy process hands over a bucket per CPU every few microseconds at the
/// start and ever fewer as it ages (at most 1,024 per doubling of its age), so the ring
/// buffer's thirty thousand records last far longer than this.
const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

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

/// State shared by a tracker and its follower thread.
pub(crate) struct Shared {
    pub(crate) engine: Mutex<Engine>,
    /// Whether mmap/munmap/brk are counted (the syscall tracepoint is attached).
    count_syscalls: bool,
    pub(crate) registry: Mutex<Registry>,
    /// Whether processes that start being tracked now count from their start.
    enabled: AtomicBool,
    root_end: Mutex<RootEnd>,
    root_end_cv: Condvar,
    /// Where each exited process goes (see [`exits`](Self::exits)).
    exits: Mutex<Option<std::sync::mpsc::Sender<TrackedProcess>>>,
}

/// What is known of the root process's end.
#[derive(Clone, Debug)]
enum RootEnd {
    /// Still running (or not started yet).
    Running,
    /// It exited.
    Exited(ExitStatus),
    /// The follower ended first, for this reason: no exit will be seen.
    Unfollowed(FollowerEnd),
}

impl Shared {
    /// Tracking state around a loaded `engine`, with no process registered yet.
    pub(crate) fn new(engine: Engine, count_syscalls: bool, enabled: bool) -> Shared {
        Shared {
            engine: Mutex::new(engine),
            count_syscalls,
            registry: Mutex::new(Registry::new()),
            enabled: AtomicBool::new(enabled),
            root_end: Mutex::new(RootEnd::Running),
            root_end_cv: Condvar::new(),
            exits: Mutex::new(None),
        }
    }

    /// A channel that receives every tracked process as it exits, with its final
    /// counters; it ends when the follower ends. One at a time: a new call replaces
    /// (and so ends) the earlier channel.
    pub(crate) fn exits(&self) -> std::sync::mpsc::Receiver<TrackedProcess> {
        let (tx, rx) = std::sync::mpsc::channel();
        *self.exits.lock() = Some(tx);
        rx
    }

    /// Process `pid` exited and its record holds its final counters: hands it to the
    /// [`exits`](Self::exits) channel, if one is open.
    pub(crate) fn process_exited(&self, pid: u32) {
        let exits = self.exits.lock();
        let Some(tx) = exits.as_ref() else {
            return;
        };
        let Some(mut record) = self.registry.lock().get(&pid).cloned() else {
            return;
        };
        let stats = record
            .final_stats
            .map(|raw| self.stats(&raw))
            .unwrap_or_default();
        let timeline = record.final_timeline.take();
        // A receiver that is gone wants no more.
        let _ = tx.send(record.report(stats, timeline));
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Applies `state` to every tracked process still running (and, through the
    /// `enabled` flag, to processes that start later). Allocates nothing: `start` and
    /// `stop` go through here.
    pub(crate) fn set_all_states(&self, state: TrackState) -> Result<()> {
        self.enabled.store(state.enabled != 0, Ordering::SeqCst);
        let mut engine = self.engine.lock();
        let registry = self.registry.lock();
        for record in registry.values().filter(|r| r.process.ended_ns.is_none()) {
            engine.set_state(record.process.pid, state)?;
        }
        Ok(())
    }

    /// Starts reserving the tracker's later preallocated live-block entries
    /// (live_growth.rs), if it has any: once its processes run.
    pub(crate) fn start_live_growth(self: &Arc<Self>) {
        let Some(growth) = self.engine.lock().live_more().take_growth() else {
            return;
        };
        let host: Weak<dyn live_growth::Host> = Arc::downgrade(self) as Weak<Shared>;
        live_growth::start(growth, host);
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

    /// The counters of `pid` now (or when it exited).
    pub(crate) fn collect(&self, pid: u32) -> Result<Stats> {
        Ok(self.stats(&self.raw_stats(pid)?))
    }

    /// Every tracked process with its counters and timeline, ordered by pid.
    pub(crate) fn collect_processes(&self) -> Result<Vec<TrackedProcess>> {
        let records: Vec<ProcessRecord> = self.registry.lock().values().cloned().collect();
        records
            .iter()
            .map(|record| {
                let stats = self.collect(record.process.pid)?;
                Ok(record.report(stats, self.timeline_of(record)?))
            })
            .collect()
    }

    /// The timeline of `pid`'s current image (or of its benchmark region, since the last
    /// reset) up to now, or as it was when it exited; None when timelines are off.
    pub(crate) fn timeline(&self, pid: u32) -> Result<Option<crate::record::timeline::Timeline>> {
        let Some(record) = self.registry.lock().get(&pid).cloned() else {
            return Ok(None);
        };
        Ok(self.timeline_of(&record)?.map(|mut t| {
            for event in &record.events {
                t.add_event(event.clone());
            }
            t
        }))
    }

    /// The timeline of `record`'s process, without its events.
    fn timeline_of(
        &self,
        record: &ProcessRecord,
    ) -> Result<Option<crate::record::timeline::Timeline>> {
        if record.final_stats.is_some() {
            return Ok(record.final_timeline.clone());
        }
        self.engine
            .lock()
            .timeline(record.process.pid, record.process.started_ns)
            .transpose()
    }

    /// Files the finished timeline buckets the kernel handed over so far.
    pub(crate) fn drain_timelines(&self) {
        self.engine.lock().drain_timelines();
    }

    /// Starts the thread that drains the timeline's ring buffer every
    /// [`DRAIN_EVERY`] while the tracker exists (its processes may run for hours; the
    /// ring buffer holds a few thousand finished buckets).
    pub(crate) fn start_timeline_drain(self: &Arc<Self>) {
        let host = Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("memtrack-timeline".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(DRAIN_EVERY);
                    let Some(shared) = host.upgrade() else {
                        return;
                    };
                    shared.drain_timelines();
                }
            });
    }

    /// Zeroes the counters of every tracked process still running.
    pub(crate) fn reset_live(&self) -> Result<()> {
        let pids: Vec<u32> = self
            .registry
            .lock()
            .values()
            .filter(|r| r.process.ended_ns.is_none())
            .map(|r| r.process.pid)
            .collect();
        let mut engine = self.engine.lock();
        for pid in pids {
            engine.reset_stats(pid)?;
        }
        Ok(())
    }

    /// Zeroes one process's counters, whether it still runs or has exited.
    pub(crate) fn reset_process(&self, pid: u32) -> Result<()> {
        let mut registry = self.registry.lock();
        if let Some(record) = registry.get_mut(&pid)
            && record.final_stats.is_some()
        {
            record.final_stats = Some(PidStats::ZERO);
            return Ok(());
        }
        drop(registry);
        self.engine.lock().reset_stats(pid)
    }

    /// The probes attached to `pid`.
    pub(crate) fn probes(&self, pid: u32) -> Vec<ProbeInfo> {
        self.engine.lock().probes_of(pid)
    }

    /// How the stacks so far were found (None: stacks are off).
    pub(crate) fn stack_walks(&self) -> Option<crate::stacks::StackWalks> {
        self.engine.lock().stack_walks()
    }

    /// Events the kernel side could not attribute to any process.
    pub(crate) fn unattributed_lost_events(&self) -> u64 {
        self.engine.lock().unattributed_losses()
    }

    /// Detaches every probe now and waits until the kernel has removed them.
    pub(crate) fn detach_all_now(&self) {
        self.engine.lock().detach_all_now();
    }

    /// Detaches every probe on the calling thread, starting no thread.
    pub(crate) fn detach_all_here(&self) {
        self.engine.lock().detach_all_here();
    }

    /// Records how the root process exited and wakes [`wait_root`](Self::wait_root).
    pub(crate) fn root_exited(&self, code: Option<i32>, signal: Option<i32>) {
        *self.root_end.lock() = RootEnd::Exited(ExitStatus { code, signal });
        self.root_end_cv.notify_all();
    }

    /// The follower thread ended (for `reason`): if the root was still running, a
    /// waiter learns that its exit will not be seen.
    pub(crate) fn follower_ended(&self, reason: FollowerEnd) {
        drop(self.exits.lock().take());
        let mut end = self.root_end.lock();
        if matches!(*end, RootEnd::Running) {
            *end = RootEnd::Unfollowed(reason);
            self.root_end_cv.notify_all();
        }
    }

    /// Waits until the root process has exited, or its follower has ended.
    pub(crate) fn wait_root(&self) -> Result<ExitStatus> {
        let mut end = self.root_end.lock();
        loop {
            match &*end {
                RootEnd::Running => self.root_end_cv.wait(&mut end),
                RootEnd::Exited(status) => return Ok(*status),
                RootEnd::Unfollowed(reason) => {
                    return Err(Error::FollowerEnded { reason: *reason });
                }
            }
        }
    }

    /// How the root process exited, if it has.
    pub(crate) fn root_exit(&self) -> Option<ExitStatus> {
        match &*self.root_end.lock() {
            RootEnd::Exited(status) => Some(*status),
            RootEnd::Running | RootEnd::Unfollowed(_) => None,
        }
    }
}

impl live_growth::Host for Shared {
    fn live_blocks_now(&self) -> u64 {
        self.engine.lock().live_blocks_now()
    }

    fn with_live_more(&self, f: &mut dyn FnMut(&mut LiveMore)) {
        f(self.engine.lock().live_more());
    }
}
