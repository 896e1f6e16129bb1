//! `memtrack run`: tracks a command and its descendants, serves the FIFO protocol so
//! integrations inside the command can mark benchmark regions, and writes the results.
//!
//! Without an integration the whole command is counted. Once an integration sends its
//! first `StartBenchmark`, counting is on only inside regions: everything counted before
//! is discarded, each region is counted for the process named by the last
//! `CurrentBenchmark`, and reported under that benchmark's uri. A process's own result
//! is then the sum of its regions ([`Stats::merge`](memtrack::Stats::merge)).
//!
//! Exactness inside regions rests on two orderings: the runner enables counting before
//! it answers `StartBenchmark`, and the integration's client sends `StopBenchmark`
//! without allocating (fifo-protocol's `FifoClient` guarantees both ends).
//!
//! Each process's result file is written as soon as the process exits (the others at
//! the end), so a memtrack that is killed keeps the results of every process that had
//! exited. With [`RunOptions::stacks`], each process's stacks file
//! (`{pid}.MemtrackStacks.msgpack`, [`memtrack::stacks`]) is written beside its result,
//! at the same moments and through the same directory handle.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicI32, AtomicU64, Ordering},
    },
};

use fifo_protocol::{
    Command, FifoRunner, IntegrationMode, LogSummary, MarkerResult, RegionCounters, Reply,
};

use memtrack::{
    BenchmarkStats, CommandSpec, ExitStatus, MemtrackResult, OutputDir, RunResults, Stats,
    TrackedProcess, Tracker, TrackerControl,
    record::timeline::{EventKind, Timeline, TimelineEvent},
    stacks::ProcessStacks,
};

use crate::error::{Error, Result};

/// How `memtrack run` runs a command.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Where to write the result files (None: a new directory with a random name in the
    /// temporary directory). Checked before the command starts
    /// ([`OutputDir::open`]).
    pub output: Option<PathBuf>,
    /// Run the command as this (uid, gid), e.g. the invoking user of sudo; the result
    /// files, and a results directory memtrack creates, are handed to them.
    pub run_as: Option<(u32, u32)>,
    /// Capacity of the kernel's live-block maps (None: the default, 1,048,576 blocks; 1 to
    /// [`memtrack::MAX_LIVE_BLOCKS`]). More live blocks than this across the tracked
    /// processes show as `lost_events`.
    pub max_live_blocks: Option<u32>,
    /// How many of them have preallocated entries (None: the default, 524,288; see
    /// [`TrackerBuilder::preallocated_live_blocks`](memtrack::TrackerBuilder::preallocated_live_blocks)).
    pub preallocated_live_blocks: Option<u32>,
    /// When the results directory holds the results of an earlier run: remove them
    /// before the command starts (true), or refuse it (false: [`Error::EarlierResults`]).
    pub replace: bool,
    /// Do not count mmap/munmap/brk (see
    /// [`TrackerBuilder::count_syscalls`](memtrack::TrackerBuilder::count_syscalls)).
    pub no_syscalls: bool,
    /// Record every allocation's call stack, at most this many frames (1 to
    /// [`memtrack::stacks::MAX_DEPTH`]; see
    /// [`TrackerBuilder::stacks`](memtrack::TrackerBuilder::stacks)), and write each
    /// process's stacks file beside its result. None: no stacks.
    pub stacks: Option<u32>,
    /// With `stacks`: walk every stack, the kernel's cache of walks off (see
    /// [`TrackerBuilder::stack_cache`](memtrack::TrackerBuilder::stack_cache)).
    pub no_stack_cache: bool,
}

/// What a run produced.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunOutcome {
    /// How the command exited.
    pub exit: ExitStatus,
    /// Every tracked process, ordered by pid, each with its benchmark regions in order
    /// (also written to `dir`, one file per process; [`RunResults::benchmarks`] lists
    /// the regions of all processes).
    pub results: RunResults,
    /// What the integrations sent (also written to `dir` as `MarkerResult.msgpack`).
    pub markers: MarkerResult,
    /// The results directory.
    pub dir: PathBuf,
    /// Events no process could be charged with (0: none lost).
    pub unattributed_lost_events: u64,
    /// With [`RunOptions::stacks`]: each process's stacks as written to `dir`, by pid
    /// (empty without stacks). Once benchmark regions were marked, a process's stacks
    /// list its regions ([`ProcessStacks::regions`]) and its scope is their sum, as its
    /// result's counters are.
    pub stacks: Vec<(u32, ProcessStacks)>,
    /// With [`RunOptions::stacks`]: how the kernel found the stacks of all processes,
    /// walked or reused from its cache of walks.
    pub stack_walks: Option<memtrack::stacks::StackWalks>,
    /// What became of the preallocated live-block entries reserved after start-up
    /// ([`memtrack::ProcessTracker::later_live_blocks`]).
    pub later_live_blocks: memtrack::LaterLiveBlocks,
}

/// The pid signals are forwarded to (0: none yet).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

/// Signals sent to memtrack by another process and not forwarded yet, one bit per
/// signal number: those that came before the command's pid was known (while the
/// programs load and the command is held before or at its exec) are forwarded once it
/// is ([`forward_to`]), not lost.
static PENDING: AtomicU64 = AtomicU64::new(0);

/// Sends every signal in [`PENDING`] to `pid`, clearing each as it is taken (the swap
/// takes every bit exactly once, whether here or in the handler). Async-signal-safe.
fn forward_pending(pid: i32) {
    let pending = PENDING.swap(0, Ordering::SeqCst);
    for sig in 1..64 {
        if pending & (1 << sig) != 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
}

/// From now on signals go to `pid`, and those that came before do now.
fn forward_to(pid: i32) {
    FORWARD_TO.store(pid, Ordering::SeqCst);
    // A handler that saw no pid set its bit before looking: it is taken here.
    forward_pending(pid);
}

extern "C" fn forward_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // A terminal's Ctrl-C reaches the command too (same process group) once it runs;
    // forward it only while there is no command yet (memtrack still loading), and
    // signals sent to memtrack by another process (kill) always, so none arrives twice.
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let from_process = unsafe { (*info).si_code } == libc::SI_USER;
    if !(1..64).contains(&sig) || (!from_process && FORWARD_TO.load(Ordering::SeqCst) > 0) {
        return;
    }
    // The bit first, then the pid: either this handler sees the pid and forwards it,
    // or forward_to's store comes later and its own take finds the bit.
    PENDING.fetch_or(1 << sig, Ordering::SeqCst);
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    if pid > 0 {
        forward_pending(pid);
    }
}

/// Keeps memtrack alive through SIGINT/SIGTERM/SIGHUP (forwarding them to the command),
/// so the results collected so far are still written when the command dies of them.
fn install_signal_forwarding() {
    // Left from an earlier run in this process: not for this command.
    PENDING.store(0, Ordering::SeqCst);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only makes async-signal-safe calls; handlers
        // (unlike SIG_IGN) reset to the default across the command's exec.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// The FIFO handler of the memory mode: counts only inside benchmark regions once an
/// integration marks any.
struct MemoryHandler {
    control: TrackerControl,
    /// The last `CurrentBenchmark`: (pid, uri).
    current: Option<(u32, String)>,
    /// When the open region (`Regions::open`) began, `CLOCK_MONOTONIC` ns.
    opened_ns: u64,
    /// The regions, closed and open (shared with the writer of exited processes'
    /// results).
    regions: Arc<Mutex<Regions>>,
    /// The counters of the region the last stop closed, until the shared handling takes
    /// them to answer `StopWithCounters`.
    last_closed: Option<RegionCounters>,
}

/// The counters of region `region` as the protocol carries them.
fn region_counters(region: usize, stats: &Stats) -> RegionCounters {
    let mut c = RegionCounters::default();
    c.region = region as u64;
    c.alloc_calls = stats.alloc_calls;
    c.free_calls = stats.free_calls;
    c.bytes_allocated = stats.bytes_allocated;
    c.bytes_freed = stats.bytes_freed;
    c.live_blocks = stats.live_blocks;
    c.live_bytes = stats.live_bytes;
    c.peak_live_bytes = stats.peak_live_bytes;
    c.failed_allocs = stats.failed_allocs;
    c.unmatched_frees = stats.unmatched_frees;
    c.lost_events = stats.lost_events;
    c
}

/// The benchmark regions counted so far.
#[derive(Default)]
struct Regions {
    seen: bool,
    /// Every closed region, in order: (pid, its counters).
    benchmarks: Vec<(u32, BenchmarkStats)>,
    /// Per process, the sum of its closed regions.
    per_process: HashMap<u32, Stats>,
    /// Per process, with stacks on: the stacks of its closed regions (each listed, and
    /// their sum as the process scope).
    stacks: HashMap<u32, ProcessStacks>,
    /// Per process, its closed regions' timelines laid end to end (timelines on).
    timelines: HashMap<u32, Timeline>,
    /// The region being counted, (pid, uri): a process that ends inside it, or is still
    /// in it when the results are written, lists it as unfinished with what it counted.
    open: Option<(u32, String)>,
}

impl Regions {
    /// `p` as its result reports it: once regions were marked, its counters are the sum
    /// of its regions (the closed ones, and what an open one counted), and its regions
    /// are listed, an open one last, marked unfinished (the counters `p` has now are
    /// what it counted: they are zeroed at each region's start and end).
    fn apply(&self, mut p: TrackedProcess) -> TrackedProcess {
        let open = self.open_uri(p.pid).map(|uri| {
            let mut bench = BenchmarkStats::new(uri.to_string(), p.stats.clone()).into_unfinished();
            bench.timeline = p.timeline.clone();
            bench
        });
        if self.seen {
            let mut total = self.per_process.get(&p.pid).cloned().unwrap_or_default();
            total.merge(&p.stats);
            p.stats = total;
            // Its timeline is its regions', laid end to end (nothing counts between
            // them), with an open one's at the end.
            let current = p.timeline.take();
            let mut all = self.timelines.get(&p.pid).cloned();
            if let (Some(all), Some(open)) = (all.as_mut(), &open)
                && let Some(t) = &open.timeline
            {
                memtrack::record::timeline::concat(all, t);
            }
            p.timeline = match (all, current) {
                (Some(all), _) => Some(all),
                (None, current) if open.is_some() => current,
                (None, _) => None,
            };
        }
        p.benchmarks.extend(
            self.benchmarks
                .iter()
                .filter(|(pid, _)| *pid == p.pid)
                .map(|(_, bench)| bench.clone())
                .chain(open),
        );
        p
    }

    /// The uri of the region open in process `pid`, if any.
    fn open_uri(&self, pid: u32) -> Option<&str> {
        match &self.open {
            Some((open_pid, uri)) if *open_pid == pid => Some(uri),
            _ => None,
        }
    }

    /// The stacks of process `pid` as its stacks file holds them, given `now`, its
    /// stacks as the kernel has them now: once regions were marked, its closed regions'
    /// stacks and their sum with what an open one counted (the kernel's counters are
    /// zeroed at each region's start and end), over `now`'s time span.
    fn stacks_of(&self, pid: u32, now: ProcessStacks) -> ProcessStacks {
        if !self.seen {
            return now;
        }
        let mut all = self.stacks.get(&pid).cloned().unwrap_or_default();
        // An open region's stacks are listed with it, as its counters are.
        all.add_scope(self.open_uri(pid), &now);
        // The images before the last exec are kept whole, as the record keeps their
        // counters (regions are counted in the last image only).
        all.push_earlier_images_of(&now);
        all.process.start_ns = now.process.start_ns;
        all.process.end_ns = now.process.end_ns;
        all
    }
}

fn lock(regions: &Mutex<Regions>) -> MutexGuard<'_, Regions> {
    // A panic elsewhere leaves the data as it was: keep using it.
    regions
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the writer of exited processes wrote for one process.
struct WrittenAtExit {
    /// The result written.
    process: TrackedProcess,
    /// The stacks file written too (stacks on).
    stacks: Option<ProcessStacks>,
}

/// The stacks of `process` as its stacks file holds them, read through `control`
/// (None: stacks off). Its scope spans the image it ran last, from the process's start
/// or its last exec (where its last earlier image ended) to its end (or now).
fn process_stacks(control: &TrackerControl, process: &TrackedProcess) -> Option<ProcessStacks> {
    let mut stacks = control.stacks(process.pid)?;
    stacks.process.start_ns = stacks
        .earlier_images
        .last()
        .map_or(process.started_ns, |image| image.end_ns);
    stacks
        .process
        .set_end(process.ended_ns.unwrap_or_else(memtrack::monotonic_ns));
    Some(stacks)
}

/// Writes the stacks file of process `pid`.
fn write_stacks(out: &OutputDir, pid: u32, stacks: &ProcessStacks) -> memtrack::Result<()> {
    stacks.write_to(out, pid)?;
    Ok(())
}

/// Writes the result (and, with stacks, the stacks file) of each process as it exits,
/// until the tracker stops following (the channel ends); returns what it wrote, by pid.
/// A failure is said on stderr: the end of the run writes that file again, and reports
/// a failure then as an error.
fn write_on_exit(
    exits: std::sync::mpsc::Receiver<TrackedProcess>,
    regions: &Mutex<Regions>,
    control: &TrackerControl,
    out: &OutputDir,
) -> HashMap<u32, WrittenAtExit> {
    let mut written = HashMap::new();
    for process in exits {
        let now = process_stacks(control, &process);
        let (process, stacks) = {
            let regions = lock(regions);
            let stacks = now.map(|now| regions.stacks_of(process.pid, now));
            (regions.apply(process), stacks)
        };
        let result = MemtrackResult::new(process);
        let written_file = out.write_file(&result.file_name(), &result.to_bytes());
        let process = result.process;
        if let Err(e) = written_file {
            eprintln!(
                "memtrack: cannot write the result of process {} as it exited: {e}",
                process.pid
            );
            continue;
        }
        let stacks = stacks.and_then(|stacks| match write_stacks(out, process.pid, &stacks) {
            Ok(()) => Some(stacks),
            Err(e) => {
                eprintln!(
                    "memtrack: cannot write the stacks of process {} as it exited: {e}",
                    process.pid
                );
                None
            }
        });
        written.insert(process.pid, WrittenAtExit { process, stacks });
    }
    written
}

impl MemoryHandler {
    fn refuse(message: impl Into<String>) -> Option<Reply> {
        Some(Reply::Err {
            message: message.into(),
        })
    }

    fn start(&mut self) -> Result<Option<Reply>> {
        let mut regions = lock(&self.regions);
        if regions.open.is_some() {
            return Ok(None); // the shared handling answers: a region is already open
        }
        let Some((pid, uri)) = self.current.clone() else {
            return Ok(Self::refuse(
                "StartBenchmark needs a CurrentBenchmark { pid, uri } first",
            ));
        };
        if !regions.seen {
            // From now on only regions count: drop what the whole-command mode counted.
            regions.seen = true;
            self.control.set_all_enabled(false)?;
            for p in self.control.processes() {
                self.control.reset_process(p)?;
            }
        }
        self.control.reset_process(pid)?;
        self.opened_ns = memtrack::monotonic_ns();
        self.control.set_process_enabled(pid, true)?;
        regions.open = Some((pid, uri));
        Ok(None)
    }

    fn stop(&mut self) -> Result<Option<Reply>> {
        self.last_closed = None;
        let Some((pid, uri)) = lock(&self.regions).open.clone() else {
            return Ok(None); // the shared handling answers: no region is open
        };
        let closed = self.close(pid, uri);
        if closed.is_err() {
            // Not open any more for the protocol, as when it closes.
            lock(&self.regions).open = None;
        }
        closed
    }

    /// Closes the open region `uri` of process `pid`: counting off, its counters and
    /// stacks kept with the closed regions, the process's zeroed. It stays
    /// `Regions::open` until its counters are kept, so that an exit meanwhile lists it.
    fn close(&mut self, pid: u32, uri: String) -> Result<Option<Reply>> {
        self.control.set_process_enabled(pid, false)?;
        let closed_ns = memtrack::monotonic_ns();
        let stats = self.control.process_stats(pid)?;
        // Read before the reset zeroes them with the process's counters.
        let stacks = self.control.stacks(pid);
        let timeline = self.control.timeline(pid)?.map(|mut t| {
            let started = self.control.started_ns(pid).unwrap_or(0);
            t.add_event(TimelineEvent {
                t_ns: self.opened_ns.saturating_sub(started),
                what: EventKind::RegionStart { uri: uri.clone() },
            });
            t.add_event(TimelineEvent {
                t_ns: closed_ns.saturating_sub(started),
                what: EventKind::RegionEnd {
                    uri: uri.clone(),
                    unfinished: false,
                },
            });
            t
        });
        self.control.reset_process(pid)?;
        let mut regions = lock(&self.regions);
        regions.open = None;
        regions.per_process.entry(pid).or_default().merge(&stats);
        if let Some(mut stacks) = stacks {
            stacks.process.start_ns = self.opened_ns;
            stacks.process.set_end(closed_ns);
            regions
                .stacks
                .entry(pid)
                .or_default()
                .add_scope(Some(&uri), &stacks);
        }
        self.last_closed = Some(region_counters(regions.benchmarks.len(), &stats));
        if let Some(t) = &timeline {
            match regions.timelines.get_mut(&pid) {
                Some(all) => memtrack::record::timeline::concat(all, t),
                None => {
                    regions.timelines.insert(pid, t.clone());
                }
            }
        }
        let mut bench = BenchmarkStats::new(uri, stats);
        bench.timeline = timeline;
        regions.benchmarks.push((pid, bench));
        Ok(None)
    }

    /// Renames closed region `region` of process `pid` (its index in
    /// `Regions::benchmarks`), in its counters and its stacks.
    fn name_region(&mut self, pid: u32, region: u64, uri: &str) -> Reply {
        let mut regions = lock(&self.regions);
        let index = usize::try_from(region).unwrap_or(usize::MAX);
        let Some(k) = regions
            .benchmarks
            .get(index)
            .filter(|(owner, _)| *owner == pid)
            .map(|_| {
                regions.benchmarks[..index]
                    .iter()
                    .filter(|(p, _)| *p == pid)
                    .count()
            })
        else {
            return Reply::Err {
                message: format!("process {pid} has no closed region {region}"),
            };
        };
        let old = std::mem::replace(&mut regions.benchmarks[index].1.uri, uri.to_owned());
        let rename = |t: &mut Timeline| {
            for e in &mut t.events {
                if let EventKind::RegionStart { uri: u } | EventKind::RegionEnd { uri: u, .. } =
                    &mut e.what
                    && *u == old
                {
                    *u = uri.to_owned();
                }
            }
        };
        if let Some(t) = regions.benchmarks[index].1.timeline.as_mut() {
            rename(t);
        }
        if let Some(t) = regions.timelines.get_mut(&pid) {
            rename(t);
        }
        if let Some(stacks) = regions
            .stacks
            .get_mut(&pid)
            .and_then(|s| s.regions.get_mut(k))
        {
            stacks.uri = uri.to_owned();
        }
        Reply::Ack
    }
}

impl fifo_protocol::Handler for MemoryHandler {
    fn handle(&mut self, cmd: &Command) -> Option<Reply> {
        let outcome = match cmd {
            // A region for a process memtrack does not count would switch counting off
            // for the whole command (regions mode) and count nothing in its place.
            Command::CurrentBenchmark { pid, uri } if !self.control.is_running(*pid) => {
                return Self::refuse(format!(
                    "CurrentBenchmark names process {pid}, which memtrack does not track \
                     (it tracks the command and the processes it starts, while they run); \
                     benchmark {uri:?} is not counted"
                ));
            }
            Command::CurrentBenchmark { pid, uri } => {
                self.current = Some((*pid, uri.clone()));
                Ok(None)
            }
            Command::StartBenchmark => self.start(),
            Command::StopBenchmark | Command::StopWithCounters => self.stop(),
            Command::NameRegion { pid, region, uri } => {
                return Some(self.name_region(*pid, *region, uri));
            }
            _ => Ok(None),
        };
        outcome.unwrap_or_else(|e| Self::refuse(format!("memtrack: {e}")))
    }

    fn region_counters(&mut self) -> Option<RegionCounters> {
        self.last_closed.take()
    }
}

/// Runs `spec` to completion under the tracker, serving the FIFO protocol, and writes
/// `{pid}.MemtrackResult.msgpack` per process and `MarkerResult.msgpack` to the output
/// directory. Progress goes to stderr.
///
/// The output directory is opened (or created) and checked before anything else, so a
/// directory that cannot take the results (or holds an earlier run's, see
/// [`replace`](RunOptions::replace)) fails before the command runs, and every file
/// is written through that handle ([`OutputDir`]), owned by
/// [`run_as`](RunOptions::run_as) when given. A directory memtrack created is removed
/// again if the run fails before anything was written in it.
pub fn run(spec: CommandSpec, options: &RunOptions) -> Result<RunOutcome> {
    let out = match &options.output {
        Some(path) => OutputDir::open(path, options.run_as)?,
        None => OutputDir::create_private(options.run_as)?,
    };
    crate::output::prepare(&out, options.replace)?;
    match track(spec, options, &out) {
        Ok(outcome) => Ok(outcome),
        Err(e) => {
            out.remove_if_unused();
            Err(e)
        }
    }
}

fn track(mut spec: CommandSpec, options: &RunOptions, out: &OutputDir) -> Result<RunOutcome> {
    let fifo = FifoRunner::new(IntegrationMode::Memory).map_err(|source| Error::Fifo {
        what: "creating its directory",
        source,
    })?;
    if let Some((uid, gid)) = options.run_as {
        fifo.set_owner(uid, gid).map_err(|source| Error::Fifo {
            what: "handing its directory to the command's user",
            source,
        })?;
        spec.run_as = Some((uid, gid));
    }
    let (name, value) = fifo.env_var();
    spec.env.push((name.into(), Some(value)));

    install_signal_forwarding();
    let mut builder = Tracker::builder().count_syscalls(!options.no_syscalls);
    if let Some(blocks) = options.max_live_blocks {
        builder = builder.max_live_blocks(blocks);
    }
    if let Some(blocks) = options.preallocated_live_blocks {
        builder = builder.preallocated_live_blocks(blocks);
    }
    if let Some(depth) = options.stacks {
        builder = builder.stacks(depth).stack_cache(!options.no_stack_cache);
    }
    let tracker = builder.spawn(spec)?;
    forward_to(tracker.pid() as i32);
    let regions = Arc::new(Mutex::new(Regions::default()));
    let exits = tracker.exited_processes();
    let control = tracker.control();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_on_exit(exits, &regions, &control, out));
        serve_and_wait(fifo, tracker, &regions, writer, out)
    })
}

/// Serves the FIFO protocol until the command has exited, then writes what the writer
/// of exited processes' results did not write.
fn serve_and_wait(
    fifo: FifoRunner,
    tracker: memtrack::ProcessTracker,
    regions: &Arc<Mutex<Regions>>,
    writer: std::thread::ScopedJoinHandle<'_, HashMap<u32, WrittenAtExit>>,
    out: &OutputDir,
) -> Result<RunOutcome> {
    let handler = MemoryHandler {
        control: tracker.control(),
        current: None,
        opened_ns: 0,
        regions: regions.clone(),
        last_closed: None,
    };
    let mut fifo = fifo;
    // One line at the end, however much garbage the command writes into the FIFO.
    let fifo_log = LogSummary::new();
    fifo.set_logger(fifo_log.logger());
    let serving = fifo.spawn(handler).map_err(|source| Error::Fifo {
        what: "starting its thread",
        source,
    })?;

    let exit = tracker.wait();
    FORWARD_TO.store(0, Ordering::SeqCst);
    let stopped = serving.stop();
    if let Some(line) = fifo_log.line() {
        eprintln!("memtrack: fifo: {line}");
    }
    let (markers, _handler) = stopped.map_err(|source| Error::Fifo {
        what: "stopping",
        source,
    })?;
    let exit = exit?;
    let processes = tracker.collect_processes()?;
    let unattributed_lost_events = tracker.unattributed_lost_events();
    let stack_walks = tracker.stack_walks();
    let later_live_blocks = tracker.later_live_blocks();
    let control = tracker.control();
    let kernel_stacks: HashMap<u32, ProcessStacks> = processes
        .iter()
        .filter_map(|p| Some((p.pid, process_stacks(&control, p)?)))
        .collect();
    // Stopping to follow ends the stream of exits: the writer is done after that.
    drop(tracker);
    let written = writer.join().unwrap_or_default();

    let regions = std::mem::take(&mut *lock(regions));
    for (pid, bench) in &regions.benchmarks {
        // Regions are only opened for tracked processes (enabling counting of another
        // fails), so this does not happen; say so if it ever does.
        if !processes.iter().any(|p| p.pid == *pid) {
            eprintln!(
                "memtrack: benchmark {} ran in process {pid}, which was not tracked: dropped",
                bench.uri
            );
        }
    }
    let processes: Vec<TrackedProcess> = processes.into_iter().map(|p| regions.apply(p)).collect();
    let results = RunResults::new(processes);
    let mut stacks: Vec<(u32, ProcessStacks)> = kernel_stacks
        .into_iter()
        .map(|(pid, now)| (pid, regions.stacks_of(pid, now)))
        .collect();
    stacks.sort_by_key(|(pid, _)| *pid);
    write_all(out, &results, &stacks, &written, &markers)?;
    Ok(RunOutcome {
        exit,
        results,
        markers,
        dir: out.path().to_path_buf(),
        unattributed_lost_events,
        stacks,
        stack_walks,
        later_live_blocks,
    })
}

/// Writes every file, going on past a failure (the others are still worth having), and
/// returns the first failure. A process's result (or stacks file) that was written as it
/// exited and has not changed since is not written again (a process that exited before
/// the first benchmark region has changed: its counters were zeroed then).
fn write_all(
    out: &OutputDir,
    results: &RunResults,
    stacks: &[(u32, ProcessStacks)],
    written: &HashMap<u32, WrittenAtExit>,
    markers: &MarkerResult,
) -> Result<()> {
    let mut first_failure = None;
    for process in &results.processes {
        let at_exit = written.get(&process.pid);
        if at_exit.is_some_and(|w| &w.process == process) {
            continue;
        }
        let result = MemtrackResult::new(process.clone());
        if let Err(e) = out.write_file(&result.file_name(), &result.to_bytes()) {
            first_failure.get_or_insert(Error::Record(e));
        }
    }
    for (pid, process_stacks) in stacks {
        if written
            .get(pid)
            .is_some_and(|w| w.stacks.as_ref() == Some(process_stacks))
        {
            continue;
        }
        if let Err(e) = write_stacks(out, *pid, process_stacks) {
            first_failure.get_or_insert(Error::Tracking(e));
        }
    }
    let name = fifo_protocol::MARKER_RESULT_FILE_NAME;
    let written = markers
        .to_bytes()
        .map_err(|source| Error::Fifo {
            what: "encoding the markers",
            source,
        })
        .and_then(|bytes| Ok(out.write_file(name, &bytes)?));
    if let Err(e) = written {
        first_failure.get_or_insert(e);
    }
    first_failure.map_or(Ok(()), Err)
}
