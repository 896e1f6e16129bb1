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
//! exited.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicI32, Ordering},
    },
};

use fifo_protocol::{Command, FifoRunner, IntegrationMode, LogSummary, MarkerResult, Reply};

use memtrack::{
    BenchmarkStats, CommandSpec, ExitStatus, MemtrackResult, OutputDir, RunResults, Stats,
    TrackedProcess, Tracker, TrackerControl,
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
    /// Capacity of the kernel's live-block map (None: the default, 1,048,576 blocks; 1 to
    /// [`memtrack::MAX_LIVE_BLOCKS`]). More live blocks than this across the tracked
    /// processes show as `lost_events`.
    pub max_live_blocks: Option<u32>,
    /// When the results directory holds the results of an earlier run: remove them
    /// before the command starts (true), or refuse it (false: [`Error::EarlierResults`]).
    pub replace: bool,
    /// Do not count mmap/munmap/brk (see
    /// [`TrackerBuilder::count_syscalls`](memtrack::TrackerBuilder::count_syscalls)).
    pub no_syscalls: bool,
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
}

/// The pid signals are forwarded to (0: none yet).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // A terminal's Ctrl-C already reached the command (same process group); forward
    // only signals sent to memtrack by another process (kill), so none arrives twice.
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let from_process = unsafe { (*info).si_code } == libc::SI_USER;
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    if from_process && pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Keeps memtrack alive through SIGINT/SIGTERM/SIGHUP (forwarding them to the command),
/// so the results collected so far are still written when the command dies of them.
fn install_signal_forwarding() {
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
    /// The region being counted: (pid, uri).
    open: Option<(u32, String)>,
    /// The closed regions (shared with the writer of exited processes' results).
    regions: Arc<Mutex<Regions>>,
}

/// The benchmark regions counted so far.
#[derive(Default)]
struct Regions {
    seen: bool,
    /// Every closed region, in order: (pid, its counters).
    benchmarks: Vec<(u32, BenchmarkStats)>,
    /// Per process, the sum of its closed regions.
    per_process: HashMap<u32, Stats>,
}

impl Regions {
    /// `p` as its result reports it: once regions were marked, its counters are the sum
    /// of its regions (the closed ones, and what an open one counted), and its closed
    /// regions are listed.
    fn apply(&self, mut p: TrackedProcess) -> TrackedProcess {
        if self.seen {
            let mut total = self.per_process.get(&p.pid).cloned().unwrap_or_default();
            total.merge(&p.stats);
            p.stats = total;
        }
        p.benchmarks.extend(
            self.benchmarks
                .iter()
                .filter(|(pid, _)| *pid == p.pid)
                .map(|(_, bench)| bench.clone()),
        );
        p
    }
}

fn lock(regions: &Mutex<Regions>) -> MutexGuard<'_, Regions> {
    // A panic elsewhere leaves the data as it was: keep using it.
    regions
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes the result of each process as it exits, until the tracker stops following
/// (the channel ends); returns what it wrote, by pid. A failure is said on stderr: the
/// end of the run writes that result again, and reports a failure then as an error.
fn write_on_exit(
    exits: std::sync::mpsc::Receiver<TrackedProcess>,
    regions: &Mutex<Regions>,
    out: &OutputDir,
) -> HashMap<u32, TrackedProcess> {
    let mut written = HashMap::new();
    for process in exits {
        let process = lock(regions).apply(process);
        let result = MemtrackResult::new(process.clone());
        match out.write_file(&result.file_name(), &result.to_bytes()) {
            Ok(_) => {
                written.insert(process.pid, process);
            }
            Err(e) => eprintln!(
                "memtrack: cannot write the result of process {} as it exited: {e}",
                process.pid
            ),
        }
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
        if self.open.is_some() {
            return Ok(None); // the shared handling answers: a region is already open
        }
        let Some((pid, uri)) = self.current.clone() else {
            return Ok(Self::refuse(
                "StartBenchmark needs a CurrentBenchmark { pid, uri } first",
            ));
        };
        let mut regions = lock(&self.regions);
        if !regions.seen {
            // From now on only regions count: drop what the whole-command mode counted.
            regions.seen = true;
            self.control.set_all_enabled(false)?;
            for p in self.control.processes() {
                self.control.reset_process(p)?;
            }
        }
        self.control.reset_process(pid)?;
        self.control.set_process_enabled(pid, true)?;
        self.open = Some((pid, uri));
        Ok(None)
    }

    fn stop(&mut self) -> Result<Option<Reply>> {
        let Some((pid, uri)) = self.open.take() else {
            return Ok(None); // the shared handling answers: no region is open
        };
        self.control.set_process_enabled(pid, false)?;
        let stats = self.control.process_stats(pid)?;
        self.control.reset_process(pid)?;
        let mut regions = lock(&self.regions);
        regions.per_process.entry(pid).or_default().merge(&stats);
        regions
            .benchmarks
            .push((pid, BenchmarkStats::new(uri, stats)));
        Ok(None)
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
            Command::StopBenchmark => self.stop(),
            _ => Ok(None),
        };
        outcome.unwrap_or_else(|e| Self::refuse(format!("memtrack: {e}")))
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
    let tracker = builder.spawn(spec)?;
    FORWARD_TO.store(tracker.pid() as i32, Ordering::SeqCst);
    let regions = Arc::new(Mutex::new(Regions::default()));
    let exits = tracker.exited_processes();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_on_exit(exits, &regions, out));
        serve_and_wait(fifo, tracker, &regions, writer, out)
    })
}

/// Serves the FIFO protocol until the command has exited, then writes what the writer
/// of exited processes' results did not write.
fn serve_and_wait(
    fifo: FifoRunner,
    tracker: memtrack::ProcessTracker,
    regions: &Arc<Mutex<Regions>>,
    writer: std::thread::ScopedJoinHandle<'_, HashMap<u32, TrackedProcess>>,
    out: &OutputDir,
) -> Result<RunOutcome> {
    let handler = MemoryHandler {
        control: tracker.control(),
        current: None,
        open: None,
        regions: regions.clone(),
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
    write_all(out, &results, &written, &markers)?;
    Ok(RunOutcome {
        exit,
        results,
        markers,
        dir: out.path().to_path_buf(),
        unattributed_lost_events,
    })
}

/// Writes every file, going on past a failure (the others are still worth having), and
/// returns the first failure. A process's result that was written as it exited and has
/// not changed since is not written again (each file costs an fsync).
fn write_all(
    out: &OutputDir,
    results: &RunResults,
    written: &HashMap<u32, TrackedProcess>,
    markers: &MarkerResult,
) -> Result<()> {
    let mut first_failure = None;
    for process in &results.processes {
        if written.get(&process.pid) == Some(process) {
            continue;
        }
        let result = MemtrackResult::new(process.clone());
        if let Err(e) = out.write_file(&result.file_name(), &result.to_bytes()) {
            first_failure.get_or_insert(Error::Tracking(e));
        }
    }
    let name = fifo_protocol::MARKER_RESULT_FILE_NAME;
    let written = markers
        .to_bytes()
        .map_err(|e| Error::Write {
            path: out.path().join(name),
            source: Box::new(e),
        })
        .and_then(|bytes| Ok(out.write_file(name, &bytes)?));
    if let Err(e) = written {
        first_failure.get_or_insert(e);
    }
    first_failure.map_or(Ok(()), Err)
}
