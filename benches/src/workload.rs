//! One run of one workload program: natively, or as a command under a spawned Tracker.
//!
//! This is the only place that starts workload processes, so native and tracked runs
//! see the same program, arguments and output parsing, and every tracked run records
//! how long the tracker took around it (spawn, reaching `main`, noticing the exit,
//! detaching) besides the program's own loop timing.

use std::{
    collections::BTreeMap,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use memtrack::{
    CommandSpec, ProbeInfo, ProbePlacement, Stats, Tracker, stacks::ProcessStacks,
    timeline::Timeline,
};

use crate::BenchResult;

/// What a workload's loop adds to a tracked process's counters, exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Blocks handed out (`Stats::alloc_calls`).
    pub alloc_calls: u64,
    /// Blocks released (`Stats::free_calls`).
    pub free_calls: u64,
    /// Requested bytes of those blocks (`Stats::bytes_allocated`).
    pub bytes_allocated: u64,
}

impl Counts {
    /// The counters of `stats`.
    pub fn of(stats: &Stats) -> Counts {
        Counts {
            alloc_calls: stats.alloc_calls,
            free_calls: stats.free_calls,
            bytes_allocated: stats.bytes_allocated,
        }
    }

    /// `self - baseline`, wrapping (a negative difference shows as a huge number, which
    /// can never match an expectation).
    pub fn minus(&self, baseline: &Counts) -> Counts {
        Counts {
            alloc_calls: self.alloc_calls.wrapping_sub(baseline.alloc_calls),
            free_calls: self.free_calls.wrapping_sub(baseline.free_calls),
            bytes_allocated: self.bytes_allocated.wrapping_sub(baseline.bytes_allocated),
        }
    }
}

/// Sum of `offset + i % 100` for i in 0..ops: the bytes the programs' loops request.
pub fn loop_bytes(ops: u64, offset: u64) -> u64 {
    let full = ops / 100;
    let rest = ops % 100;
    ops * offset + full * (99 * 100 / 2) + rest * rest.saturating_sub(1) / 2
}

/// A program with its arguments, the same program doing everything but its loop (the
/// baseline), and what the loop must add to the counters.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Short name for reports, e.g. "malloc+free".
    pub name: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments for the measured run.
    pub args: Vec<String>,
    /// Its arguments for the baseline run (zero operations).
    pub baseline_args: Vec<String>,
    /// What the loop adds above the baseline.
    pub expected: Counts,
}

/// The parsed result line of a workload (`key=value` fields, see programs/timing.h).
#[derive(Clone, Debug)]
pub struct Output {
    fields: BTreeMap<String, f64>,
}

impl Output {
    /// Parses the `key=value` fields of `text`, which must include `ns_per_op`.
    fn parse(program: &Path, text: &str) -> BenchResult<Output> {
        let mut fields = BTreeMap::new();
        for token in text.split_whitespace() {
            let (key, value) = token
                .split_once('=')
                .and_then(|(k, v)| Some((k, v.parse::<f64>().ok()?)))
                .ok_or_else(|| format!("{}: unexpected output {text:?}", program.display()))?;
            fields.insert(key.to_string(), value);
        }
        if !fields.contains_key("ns_per_op") {
            return Err(format!("{}: no result line in {text:?}", program.display()).into());
        }
        Ok(Output { fields })
    }

    /// A field the program printed.
    pub fn get(&self, key: &str) -> BenchResult<f64> {
        self.fields
            .get(key)
            .copied()
            .ok_or_else(|| format!("the workload printed no `{key}`").into())
    }

    /// Nanoseconds per operation of the timed loop.
    pub fn ns_per_op(&self) -> f64 {
        self.fields["ns_per_op"]
    }

    /// CPU time (all threads, user + kernel) of the timed region, in nanoseconds.
    pub fn cpu_ns(&self) -> f64 {
        self.fields.get("cpu_ns").copied().unwrap_or(f64::NAN)
    }

    /// Wall time of the timed region, in nanoseconds.
    pub fn elapsed_ns(&self) -> f64 {
        self.fields.get("elapsed_ns").copied().unwrap_or(f64::NAN)
    }
}

/// Runs `program args` without any tracker.
pub fn run_native(program: &Path, args: &[String]) -> BenchResult<Output> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {args:?} failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Output::parse(program, &String::from_utf8_lossy(&out.stdout))
}

/// How long a spawned tracker took around one command.
#[derive(Clone, Copy, Debug)]
pub struct SpawnPhases {
    /// `Tracker::builder().spawn(..)` until it returned (eBPF load, fork, probes).
    pub spawn_call: Duration,
    /// From before `spawn` until the command's `main` began (includes attaching the
    /// probes once the dynamic loader had mapped libc).
    pub to_main: Duration,
    /// From the command's last instruction of note (its result line) until `wait`
    /// returned.
    pub exit_to_wait: Duration,
    /// Ending the tracker: `ProcessTracker::close()` (detach every probe and wait until the
    /// kernel has removed them) when `closed`, else a plain drop (returns at once; a
    /// background thread does that work, overlapping whatever runs next).
    pub end: Duration,
    /// Whether the tracker was closed (true) or dropped.
    pub closed: bool,
}

/// A tracked run's result: the program's output and the tracker's view.
#[derive(Clone, Debug)]
pub struct TrackedRun {
    /// What the program printed.
    pub output: Output,
    /// The counters of the command's process.
    pub stats: Stats,
    /// How many processes the tracker saw (1 for these workloads).
    pub processes: usize,
    /// The probes attached to the command's process.
    pub probes: Vec<ProbeInfo>,
    /// Events the tracker could not attribute to any process.
    pub unattributed_lost_events: u64,
    /// Tracker latencies around the run.
    pub phases: SpawnPhases,
    /// The command's per-stack counters, when the run had stacks on.
    pub stacks: Option<ProcessStacks>,
    /// The command's timeline, when the run kept one.
    pub timeline: Option<Timeline>,
}

/// From the monotonic time `start_ns` to `end_ns` (a program's printed clock).
fn since(start_ns: u64, end_ns: f64) -> Duration {
    Duration::from_nanos((end_ns as u64).saturating_sub(start_ns))
}

/// Stacks in a tracked run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSetup {
    /// The depth limit, in frames.
    pub depth: u32,
    /// `TrackerBuilder::stack_cache`: whether a repeated stack may reuse a remembered
    /// walk (false: every stack is walked).
    pub cache: bool,
}

/// How a tracked run's tracker is set up.
#[derive(Clone, Copy, Debug)]
pub struct TrackerSetup {
    /// Where the entry probes go.
    pub placement: ProbePlacement,
    /// Counting from the command's first instruction (else probes attached, counting
    /// off throughout).
    pub counting: bool,
    /// Walk every allocation's stack (None: stacks off).
    pub stacks: Option<StackSetup>,
    /// `TrackerBuilder::preallocated_live_blocks` (None: the default).
    pub preallocated_live_blocks: Option<u32>,
    /// `TrackerBuilder::timeline` and `rss`.
    pub timeline: TimelineSetup,
}

/// What a tracked run keeps of each process's memory over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineSetup {
    /// No timeline (`TrackerBuilder::timeline(false)`).
    Off,
    /// The timeline without the RSS tracepoint (`rss(false)`).
    NoRss,
    /// The timeline with resident memory (the default).
    On,
}

/// Runs `program args` under a tracker set up as `setup`; its stdout goes to the file
/// `stdout_path` (overwritten). With `close` the tracker ends with
/// `ProcessTracker::close()`, else with a plain drop.
pub fn run_tracked(
    program: &Path,
    args: &[String],
    setup: TrackerSetup,
    stdout_path: &Path,
    close: bool,
) -> BenchResult<TrackedRun> {
    let stdout = std::fs::File::create(stdout_path)
        .map_err(|e| format!("cannot create {}: {e}", stdout_path.display()))?;
    let before_spawn_ns = memtrack::monotonic_ns();
    let before_spawn = Instant::now();
    let mut builder = Tracker::builder()
        .probe_placement(setup.placement)
        .start_enabled(setup.counting);
    if let Some(stacks) = setup.stacks {
        builder = builder.stacks(stacks.depth).stack_cache(stacks.cache);
    }
    if let Some(blocks) = setup.preallocated_live_blocks {
        builder = builder.preallocated_live_blocks(blocks);
    }
    builder = match setup.timeline {
        TimelineSetup::Off => builder.timeline(false),
        TimelineSetup::NoRss => builder.rss(false),
        TimelineSetup::On => builder,
    };
    let tracker = builder
        .spawn(
            CommandSpec::new(program)
                .args(args)
                .fd(1, stdout.as_raw_fd()),
        )
        .map_err(|e| format!("cannot track {}: {e}", program.display()))?;
    let spawn_call = before_spawn.elapsed();
    drop(stdout);
    let exit = tracker.wait()?;
    let waited_ns = memtrack::monotonic_ns();
    let processes = tracker.collect_processes()?;
    let unattributed_lost_events = tracker.unattributed_lost_events();
    let process_stacks = processes.first().and_then(|root| tracker.stacks(root.pid));
    let before_end = Instant::now();
    if close {
        tracker.close();
    } else {
        drop(tracker);
    }
    let end = before_end.elapsed();
    if exit.shell_code() != 0 {
        return Err(format!("{} {args:?} under the tracker: {exit:?}", program.display()).into());
    }
    let text = std::fs::read_to_string(stdout_path)
        .map_err(|e| format!("cannot read {}: {e}", stdout_path.display()))?;
    let output = Output::parse(program, &text)?;
    let root = processes
        .first()
        .ok_or_else(|| format!("the tracker saw no process for {}", program.display()))?;
    let phases = SpawnPhases {
        spawn_call,
        to_main: since(before_spawn_ns, output.get("start_ns")?),
        exit_to_wait: Duration::from_nanos(waited_ns.saturating_sub(output.get("end_ns")? as u64)),
        end,
        closed: close,
    };
    Ok(TrackedRun {
        stats: root.stats.clone(),
        processes: processes.len(),
        probes: root.probes.clone(),
        unattributed_lost_events,
        output,
        phases,
        stacks: process_stacks,
        timeline: root.timeline.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_bytes_matches_the_c_loop() {
        for ops in [0u64, 1, 2, 99, 100, 101, 250, 1_000_000] {
            let direct: u64 = (0..ops).map(|i| 64 + i % 100).sum();
            assert_eq!(loop_bytes(ops, 64), direct, "ops = {ops}");
        }
    }

    #[test]
    fn parses_result_lines() {
        let out = Output::parse(Path::new("p"), "ns_per_op=1.500 elapsed_ns=3.000\n").unwrap();
        assert_eq!((out.ns_per_op(), out.elapsed_ns()), (1.5, 3.0));
        assert!(Output::parse(Path::new("p"), "garbage").is_err());
        assert!(Output::parse(Path::new("p"), "elapsed_ns=3").is_err());
    }
}
