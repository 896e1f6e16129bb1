//! The process-wide measuring session: how allocations are counted here (under the
//! runner, in-process, or not at all), decided once and announced in one line on stderr,
//! and how one iteration of a routine is counted and saved as a result file.
//!
//! Shared by `memtrack-criterion` and `memtrack-divan` (each passes its own name), so
//! every harness picks its mode, counts, saves and prints the same way
//! ([`summary_line`], [`benchmark_table`]).
//!
//! Timings are never measured while probes are attached: in-process, each counted
//! iteration gets a tracker of its own, made just before it and closed
//! ([`Tracker::close`], which waits until the kernel has removed every probe) just after
//! it, so the harness times its iterations with nothing attached; under `memtrack run`
//! the runner's probes sit on the whole process for the whole run, so the harnesses skip
//! timing there ([`Mode::Runner`], [`RUNNER_LINE`]). The tracker is made, read and
//! closed, and result files are written, on a helper thread of the session's, so that
//! the benchmark's thread, which the harness times next, keeps the heap it would have
//! without memtrack (`helper.rs` says why).
#![warn(missing_docs)]

pub mod foreign;
mod helper;
mod human;
mod stacks_env;
pub mod stale;
pub use human::{benchmark_table, summary_line};
pub use stacks_env::{STACKS_ENV, stack_depth};

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard, OnceLock},
};

use fifo_protocol::{FifoClient, IntegrationMode, Marker, now_ns};
use memtrack::{
    BenchmarkStats, MemtrackResult, RESULT_FILE_SUFFIX, Scope, Stats, TrackedProcess, Tracker,
    stacks::{ProcessStacks, is_stacks_file_name, stacks_file_name},
    timeline::{EventKind, Timeline, TimelineEvent},
};

/// Runs `job` on the session's helper thread, where the in-process tracker is made, read
/// and closed, and returns what it returns (a panic in it is resumed here); in place when
/// called from such a job. For an integration's own bookkeeping around a count (printing
/// the counts, naming the result directory, dropping what the session returned): done
/// here, it allocates and frees in the helper's heap, not in that of the thread the
/// harness times next. The caller's side allocates nothing to hand the job over; when
/// this returns the helper is idle again, so a whole-process tracker started after it
/// counts nothing of the helper's.
///
/// Call it only when counting in-process ([`Mode::InProcess`]; the session starts the
/// helper before the first benchmark runs then). Elsewhere it would start the thread
/// late, and a new thread takes the stack that a thread the benchmark started and
/// joined left in glibc's cache: the benchmark's counted call, starting its thread
/// again, would then allocate a new stack's TLS (288 bytes more under the runner than
/// in-process).
pub fn on_helper_thread<R: Send>(job: impl FnOnce() -> R + Send) -> R {
    helper::run(job)
}

/// What an integration says on stderr, once, when it runs under `memtrack run`.
pub const RUNNER_LINE: &str = "memtrack: under `memtrack run`: memory only, timings skipped \
     (the runner's probes would slow every timed iteration); the runner counts one iteration \
     of each benchmark and reports it";

/// What an integration says on stderr, once, when it counts in-process.
pub const IN_PROCESS_LINE: &str = "memtrack: not under `memtrack run`: counting one iteration \
     of each benchmark in-process with eBPF (whole process); probes are attached for that \
     iteration only, so timings are not affected";

/// What an integration says on stderr, once, when it can neither reach a runner nor count
/// in-process for lack of privileges.
pub const DISABLED_LINE: &str = "memtrack: not under `memtrack run` and no \
     CAP_BPF/CAP_PERFMON: allocation counts disabled, timing only";

/// How this process counts allocations, decided once (on first use) and announced in
/// one line on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Running under `memtrack run`: the runner counts, in the kernel, one iteration of
    /// each benchmark, bracketed over its FIFO, in the whole process (every thread);
    /// this process sees no numbers and writes no result files (the runner reports and
    /// saves them). The runner's probes are attached to the whole process for the whole
    /// run, so every allocation call costs microseconds more: the integrations skip
    /// timing in this mode and say so ([`RUNNER_LINE`]).
    Runner,
    /// Not under the runner, but privileged (root, or CAP_BPF and CAP_PERFMON): each
    /// counted iteration gets a [`memtrack::Tracker`] of the whole process
    /// ([`Scope::Process`], every thread, so allocations on threads the benchmark starts
    /// count, as under the runner), made before the iteration and closed after it.
    /// Nothing is attached while the harness times.
    InProcess,
    /// Neither: allocations are not counted; benchmarks still run (timing only).
    Disabled,
}

/// Where the counting happens.
pub enum Backend {
    /// Connected to `memtrack run`.
    Runner(FifoClient),
    /// A tracker per counted iteration; `process` is this process's record from the
    /// last one (pid, command line, probes), for the result file.
    InProcess {
        /// The record of the first counted iteration's tracker, without its counters
        /// (boxed: it is large, and the session holds one backend); its `started_ns`
        /// is where the benchmarks' timelines count from.
        process: Option<Box<TrackedProcess>>,
    },
    /// Nothing counts.
    Disabled,
}

/// The one session of this process.
pub struct Session {
    /// How this process counts.
    pub backend: Backend,
    /// How many times each uri was measured in this process (to name repeats apart).
    measured: HashMap<String, u32>,
    /// The benchmarks counted in-process so far, in order.
    pub recorded: Vec<BenchmarkStats>,
    /// With [`STACKS_ENV`] set, in-process: the call stacks of each counted iteration,
    /// by uri, in order.
    stacks: Vec<(String, ProcessStacks)>,
    /// In-process: the timeline of the iteration counted last, until
    /// [`record`](Self::record) keeps it with its counters.
    timeline: Option<Timeline>,
}

static SESSION: OnceLock<Mutex<Session>> = OnceLock::new();

/// The session's mode, readable without taking the session's lock.
static MODE: OnceLock<Mode> = OnceLock::new();

/// The session, detected and announced on first use. Locked: measuring is serialised,
/// so two threads cannot count at once. Never call it from inside a measured routine
/// (the lock is not re-entrant).
pub fn session(integration: &str) -> MutexGuard<'static, Session> {
    SESSION
        .get_or_init(|| Mutex::new(Session::detect(integration)))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The [`Mode`] of the session (detecting it if needed). Once detected, it is read
/// without the session's lock, so it may be called from anywhere.
pub fn mode(integration: &str) -> Mode {
    match MODE.get() {
        Some(mode) => *mode,
        None => session(integration).mode(),
    }
}

/// Before `harness` (`criterion`, `divan`) times benchmark `uri`: says on stderr, once
/// per uri, when the allocator holds breakpoints that are not memtrack's
/// ([`foreign::foreign_breakpoints`]), since the timings are then not honest. Looked at
/// in-process (after the counted iteration's tracker was closed, so no probe of
/// memtrack's is left) and when not counting; never under `memtrack run`, where the
/// runner's own probes sit in the allocator and timing is skipped. Returns the warning
/// printed, if any.
pub fn check_timing(integration: &str, harness: &str, uri: &str) -> Option<String> {
    static CHECKED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let check = || {
        let mut checked = CHECKED.lock().unwrap_or_else(|p| p.into_inner());
        if checked.iter().any(|u| u == uri) {
            return None;
        }
        checked.push(uri.to_owned());
        let warning = foreign::warning(uri, harness, &foreign::foreign_breakpoints())?;
        eprintln!("{warning}");
        Some(warning)
    };
    match mode(integration) {
        Mode::Runner => None,
        // Its bookkeeping allocates in the helper's heap, not in the timed thread's.
        Mode::InProcess => on_helper_thread(check),
        Mode::Disabled => check(),
    }
}

/// Announces the protocol version and the integration, and checks that the runner
/// measures memory.
fn handshake(client: &mut FifoClient, integration: &str) -> Result<(), String> {
    client.set_version().map_err(|e| e.to_string())?;
    client
        .set_integration(integration, env!("CARGO_PKG_VERSION"))
        .map_err(|e| e.to_string())?;
    match client.integration_mode().map_err(|e| e.to_string())? {
        IntegrationMode::Memory => Ok(()),
        other => Err(format!("the runner measures {other:?}, not memory")),
    }
}

/// The start (`start`) or the end of region `uri` at `t_ns`.
fn region_event(t_ns: u64, uri: &str, start: bool) -> TimelineEvent {
    let uri = uri.to_string();
    TimelineEvent {
        t_ns,
        what: if start {
            EventKind::RegionStart { uri }
        } else {
            EventKind::RegionEnd {
                uri,
                unfinished: false,
            }
        },
    }
}

/// A tracker of this whole process, as every counted iteration uses, recording call
/// stacks when [`STACKS_ENV`] asks for them.
fn process_tracker() -> memtrack::Result<Tracker> {
    let builder = Tracker::builder();
    match stack_depth() {
        Some(depth) => builder.stacks(depth),
        None => builder,
    }
    .build(Scope::Process)
}

impl Session {
    fn detect(integration: &str) -> Session {
        let (backend, line) = Self::choose(integration);
        eprintln!("{line}");
        if let Some(line) = stacks_env::line(matches!(backend, Backend::InProcess { .. })) {
            eprintln!("{line}");
        }
        let session = Session {
            backend,
            measured: HashMap::new(),
            recorded: Vec::new(),
            stacks: Vec::new(),
            timeline: None,
        };
        let _ = MODE.set(session.mode());
        session
    }

    /// The backend and the one line that announces it.
    fn choose(integration: &str) -> (Backend, String) {
        let not_runner = match FifoClient::from_env() {
            None => "not under `memtrack run`".to_string(),
            Some(Ok(mut client)) => match handshake(&mut client, integration) {
                Ok(()) => return (Backend::Runner(client), RUNNER_LINE.to_string()),
                Err(e) => format!("`memtrack run` did not answer ({e})"),
            },
            Some(Err(e)) => format!("`memtrack run` is unreachable ({e})"),
        };
        // One trial tracker, closed at once, so the line says what really works here
        // (about 0.1 s, once per process), made and closed on the helper thread as every
        // counted iteration's is.
        match helper::run(|| process_tracker().map(Tracker::close)) {
            Ok(()) => {
                let line = if not_runner == "not under `memtrack run`" {
                    IN_PROCESS_LINE.to_string()
                } else {
                    IN_PROCESS_LINE.replacen("not under `memtrack run`", &not_runner, 1)
                };
                (Backend::InProcess { process: None }, line)
            }
            Err(memtrack::Error::MissingCapabilities { .. }) => (
                Backend::Disabled,
                if not_runner == "not under `memtrack run`" {
                    DISABLED_LINE.to_string()
                } else {
                    DISABLED_LINE.replacen("not under `memtrack run`", &not_runner, 1)
                },
            ),
            Err(e) => (
                Backend::Disabled,
                format!(
                    "memtrack: {not_runner} and in-process counting failed ({e}): allocation \
                     counts disabled, timing only"
                ),
            ),
        }
    }

    /// The mode of this session.
    pub fn mode(&self) -> Mode {
        match self.backend {
            Backend::Runner(_) => Mode::Runner,
            Backend::InProcess { .. } => Mode::InProcess,
            Backend::Disabled => Mode::Disabled,
        }
    }

    /// Counts one more measurement of `uri`; returns how many there were, this one
    /// included. In-process its bookkeeping runs on the helper thread.
    pub fn note(&mut self, uri: &str) -> u32 {
        let in_process = self.mode() == Mode::InProcess;
        let measured = &mut self.measured;
        let mut note = || {
            let count = measured.entry(uri.to_string()).or_insert(0);
            *count += 1;
            *count
        };
        // Only in-process: the helper thread is started there before any benchmark,
        // and must not be started later (see `on_helper_thread`).
        if in_process {
            helper::run(note)
        } else {
            note()
        }
    }

    /// `uri` the first time it is measured in this process, then `uri#2`, `uri#3`, ...
    pub fn unique_uri(&mut self, uri: &str) -> String {
        match self.note(uri) {
            1 => uri.to_string(),
            n => format!("{uri}#{n}"),
        }
    }

    /// Counts one iteration of `routine` as benchmark `uri` (see [`measure`](Self::measure)),
    /// drops its output after the count, and in-process appends the result to
    /// [`recorded`](Self::recorded) and returns its stats (there: borrowed, so that the
    /// caller's thread has nothing of the helper's to free).
    pub fn record<O>(&mut self, uri: &str, routine: impl FnOnce() -> O) -> Option<&Stats> {
        let (output, stats) = self.measure(uri, routine);
        drop(output);
        let stats = stats?;
        let (recorded, timeline) = (&mut self.recorded, self.timeline.take());
        helper::run(|| {
            let mut bench = BenchmarkStats::new(uri, stats);
            bench.timeline = timeline;
            recorded.push(bench);
        });
        self.recorded.last().map(|bench| &bench.stats)
    }

    /// Whether `uri` was measured already in this process.
    pub fn was_measured(&self, uri: &str) -> bool {
        self.measured.contains_key(uri)
    }

    /// Runs `routine` once as benchmark `uri`, counted in the whole process: a region of
    /// the runner, or in-process a tracker made for this call, started, stopped and
    /// closed (waiting until the kernel has removed its probes) before this returns
    /// (what attaching and closing take: BENCHMARKS.md). Returns the routine's output, not yet dropped (so the caller
    /// drops it outside the count), and in-process the stats.
    ///
    /// In-process, the calling thread only starts and stops counting and runs the
    /// routine: the tracker is made, read and closed, and the stats kept, on the
    /// session's helper thread, which waits, allocating nothing, while counting is on.
    ///
    /// Nothing here allocates between the start of counting and the end of the routine,
    /// nor between the routine's end and the stop of counting: the FIFO client's
    /// `start_benchmark`/`stop_benchmark` and the tracker's `start`/`stop` are
    /// allocation-free on their success paths. Whatever other threads of the process do
    /// meanwhile counts too: call it while the harness is quiescent (criterion and divan
    /// run one benchmark at a time). Failures are reported on stderr and leave the
    /// iteration uncounted.
    pub fn measure<O>(&mut self, uri: &str, routine: impl FnOnce() -> O) -> (O, Option<Stats>) {
        match &mut self.backend {
            Backend::Disabled => (routine(), None),
            Backend::Runner(client) => {
                let ready = client.current_benchmark(uri).and_then(|()| {
                    client.add_marker(Marker::BenchmarkStart {
                        timestamp_ns: now_ns(),
                    })
                });
                if let Err(e) = ready.and_then(|()| client.start_benchmark()) {
                    eprintln!("memtrack: {uri}: not counted: {e}");
                    return (routine(), None);
                }
                let output = routine();
                let stopped = client.stop_benchmark().and_then(|()| {
                    client.add_marker(Marker::BenchmarkEnd {
                        timestamp_ns: now_ns(),
                    })
                });
                if let Err(e) = stopped {
                    eprintln!("memtrack: {uri}: the runner did not confirm the end: {e}");
                }
                (output, None)
            }
            Backend::InProcess { process } => {
                let mut tracker = match helper::run(process_tracker) {
                    Ok(tracker) => tracker,
                    Err(e) => {
                        eprintln!("memtrack: {uri}: not counted: {e}");
                        return (routine(), None);
                    }
                };
                let start_ns = memtrack::monotonic_ns();
                if let Err(e) = tracker.start() {
                    eprintln!("memtrack: {uri}: not counted: {e}");
                    helper::run(|| tracker.close());
                    return (routine(), None);
                }
                let output = routine();
                let stopped = tracker.stop();
                let end_ns = memtrack::monotonic_ns();
                let (all_stacks, last_timeline) = (&mut self.stacks, &mut self.timeline);
                let counted = helper::run(|| {
                    let counted = stopped.and_then(|()| {
                        let stats = tracker.collect()?;
                        let timeline = tracker.timeline()?;
                        Ok((stats, tracker.process()?, tracker.stacks()?, timeline))
                    });
                    // Closed before anything else runs: the caller may time next.
                    tracker.close();
                    let (stats, record, stacks, timeline) = counted?;
                    // Every benchmark's times count from the first tracker's start (the
                    // process record kept), as a runner's regions count from the
                    // process's.
                    let started_ns = process.as_ref().map_or(record.started_ns, |p| p.started_ns);
                    *last_timeline = timeline.map(|mut t| {
                        t.shift(record.started_ns.saturating_sub(started_ns));
                        let since = |ns: u64| ns.saturating_sub(started_ns);
                        t.add_event(region_event(since(start_ns), uri, true));
                        t.add_event(region_event(since(end_ns), uri, false));
                        t
                    });
                    if process.is_none() {
                        *process = Some(Box::new(record));
                    }
                    if let Some(mut stacks) = stacks {
                        stacks.process.start_ns = start_ns;
                        stacks.process.end_ns = end_ns;
                        all_stacks.push((uri.to_string(), stacks));
                    }
                    Ok::<_, memtrack::Error>(stats)
                });
                match counted {
                    Ok(stats) => (output, Some(stats)),
                    Err(e) => {
                        eprintln!("memtrack: {uri}: not counted: {e}");
                        (output, None)
                    }
                }
            }
        }
    }

    /// Writes `benchmarks` as this process's result file in `dir`
    /// (`{pid}.MemtrackResult.msgpack`, its `stats` the sum of the benchmarks), after
    /// removing result files of earlier runs from `dir`. With [`STACKS_ENV`] set, the
    /// benchmarks' call stacks go beside it (`{pid}.MemtrackStacks.msgpack`, one region
    /// per benchmark, the process scope their sum; `memtrack report --stacks DIR
    /// [--benchmark URI]` reads it). In-process only, after at least one counted
    /// iteration (otherwise `Ok(None)`). The files, and directories created for them,
    /// belong to the invoking user when this runs as root through sudo
    /// ([`memtrack::sudo_invoker`]). Returns the result file's path. Runs on the
    /// session's helper thread, as the tracker's work does.
    pub fn write_result(
        &self,
        dir: &Path,
        benchmarks: &[BenchmarkStats],
    ) -> memtrack::Result<Option<PathBuf>> {
        if self.mode() != Mode::InProcess {
            return Ok(None);
        }
        helper::run(|| self.write_result_here(dir, benchmarks))
    }

    /// [`write_result`](Self::write_result), on the calling thread.
    fn write_result_here(
        &self,
        dir: &Path,
        benchmarks: &[BenchmarkStats],
    ) -> memtrack::Result<Option<PathBuf>> {
        let Backend::InProcess {
            process: Some(process),
        } = &self.backend
        else {
            return Ok(None);
        };
        let mut process = TrackedProcess::clone(process);
        let mut total = Stats::default();
        for bench in benchmarks {
            total.merge(&bench.stats);
        }
        process.stats = total;
        process.benchmarks = benchmarks.to_vec();
        let stacks = self.stacks_of(process.started_ns, benchmarks);
        let result = MemtrackResult::new(process);
        remove_earlier_results(dir, &result.file_name());
        // Run as root through sudo (`sudo cargo bench`), the results are the invoking
        // user's, readable and removable by them (files are mode 0600).
        let out = memtrack::OutputDir::create_all(dir, memtrack::sudo_invoker())?;
        let path = out.write_file(&result.file_name(), &result.to_bytes())?;
        if let Some(stacks) = stacks {
            out.write_file(&stacks_file_name(result.process.pid), &stacks.to_bytes())?;
        }
        Ok(Some(path))
    }

    /// At the end of a run that saved results in-process: keeps apart, below `base`,
    /// the results of this program that this process did not write ([`stale`]), and
    /// says so on stderr, one line per file. Nothing in the other modes, or when
    /// nothing was counted (a run that measured nothing makes nothing stale).
    pub fn keep_apart_stale(&self, base: &Path) {
        let Backend::InProcess {
            process: Some(process),
        } = &self.backend
        else {
            return;
        };
        if self.recorded.is_empty() {
            return;
        }
        let Some(program) = process.command.first() else {
            return;
        };
        let program = stale::program_name(program).to_owned();
        let pid = process.pid;
        helper::run(|| match stale::keep_apart(base, pid, &program) {
            Ok(renamed) => {
                for path in renamed {
                    eprintln!(
                        "memtrack: kept apart, as {}: the result of a benchmark this run of \
                         {program} did not measure (removed, renamed or filtered out); \
                         `memtrack report` leaves it out",
                        path.display()
                    );
                }
            }
            Err(e) => eprintln!(
                "memtrack: earlier results of {program} below {} not kept apart: {e}",
                base.display()
            ),
        });
    }

    /// The stacks file of `benchmarks` (None when no stacks were recorded for any):
    /// each benchmark a region, in order (the last recording of a uri, as the result
    /// holds the last count), the process scope their sum.
    fn stacks_of(&self, started_ns: u64, benchmarks: &[BenchmarkStats]) -> Option<ProcessStacks> {
        let mut all: Option<ProcessStacks> = None;
        for bench in benchmarks {
            let Some((_, stacks)) = self.stacks.iter().rev().find(|(uri, _)| *uri == bench.uri)
            else {
                continue;
            };
            let all = all.get_or_insert_with(ProcessStacks::default);
            all.add_scope(Some(&bench.uri), stacks);
            if all.process.start_ns == 0 {
                all.process.start_ns = started_ns.min(stacks.process.start_ns);
            }
            all.process.end_ns = stacks.process.end_ns;
        }
        all
    }
}

/// Removes `*.MemtrackResult.msgpack` files other than `keep` from `dir` (results of
/// earlier runs), and stacks files other than the one beside `keep`, so the directory
/// holds the latest run only.
fn remove_earlier_results(dir: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stacks_keep = keep
            .strip_suffix(RESULT_FILE_SUFFIX)
            .and_then(|pid| pid.parse().ok())
            .map(stacks_file_name);
        let earlier_stacks = is_stacks_file_name(name) && Some(name) != stacks_keep.as_deref();
        if (name.ends_with(RESULT_FILE_SUFFIX) && name != keep) || earlier_stacks {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Where result files go: `$MEMTRACK_OUTPUT_DIR`, else `memtrack/` in cargo's target
/// directory (`$CARGO_TARGET_DIR`, else the nearest directory above this executable
/// that holds cargo's `CACHEDIR.TAG`, else `./target`).
pub fn output_base() -> PathBuf {
    if let Some(dir) = std::env::var_os("MEMTRACK_OUTPUT_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("memtrack");
    }
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .find(|dir| dir.join("CACHEDIR.TAG").is_file())
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("memtrack")
}

/// A relative path made of `id`'s `/`-separated parts, each reduced to letters, digits,
/// `-`, `_` and `.` (anything else becomes `_`; empty, `.` and `..` parts become `_`).
pub fn id_path(id: &str) -> PathBuf {
    id.split('/')
        .map(|part| {
            let safe: String = part
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if safe.is_empty() || safe == "." || safe == ".." {
                "_".to_string()
            } else {
                safe
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_paths_are_safe_and_nested() {
        assert_eq!(id_path("alloc"), PathBuf::from("alloc"));
        assert_eq!(id_path("group/fn/10"), PathBuf::from("group/fn/10"));
        assert_eq!(id_path("a b:c"), PathBuf::from("a_b_c"));
        assert_eq!(id_path("../x//y"), PathBuf::from("_/x/_/y"));
    }

    /// In-process, counting a routine and saving its result allocates nothing on the
    /// calling thread but what the routine does: the tracker's work and the result file
    /// are the helper thread's, so the benchmark's thread keeps its heap as it was.
    #[test]
    fn in_process_the_calling_thread_allocates_only_what_the_routine_does() {
        let mut session = Session {
            backend: Backend::InProcess { process: None },
            measured: HashMap::new(),
            recorded: Vec::new(),
            stacks: Vec::new(),
            timeline: None,
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Started beforehand: starting the helper thread allocates on this one.
        helper::run(|| ());
        let counted = memtrack::testing::count_with(memtrack::testing::test_tracker(), || {
            session.note("routine");
            let counted = session
                .record("routine", || drop(std::hint::black_box(vec![0u8; 100])))
                .is_some();
            let saved = session.write_result(dir.path(), &session.recorded);
            (counted, saved)
        });
        let Some(((counted, saved), here)) = counted else {
            return; // no privileges: said on stderr
        };
        let here = (
            here.alloc_calls,
            here.bytes_allocated,
            here.free_calls,
            here.bytes_freed,
        );
        assert_eq!(here, (1, 100, 1, 100), "this thread's calls");
        assert!(counted, "counted in-process");
        let stats = &session.recorded[0].stats;
        let session_counts = (stats.alloc_calls, stats.bytes_allocated, stats.free_calls);
        assert_eq!(
            session_counts,
            (1, 100, 1),
            "the session's count of the routine"
        );
        assert_eq!(session.recorded.len(), 1);
        assert!(session.was_measured("routine"));
        let saved = saved.expect("saved").expect("a result file");
        assert!(saved.starts_with(dir.path()), "{saved:?}");
    }

    #[test]
    fn repeated_uris_are_numbered() {
        let mut s = Session {
            backend: Backend::Disabled,
            measured: HashMap::new(),
            recorded: Vec::new(),
            stacks: Vec::new(),
            timeline: None,
        };
        assert!(!s.was_measured("a"));
        assert_eq!(s.unique_uri("a"), "a");
        assert_eq!(s.unique_uri("a"), "a#2");
        assert_eq!(s.unique_uri("b"), "b");
        assert!(s.was_measured("a"));
    }
}
