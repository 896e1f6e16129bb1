//! `memtrack`: track a command's heap exactly, print saved results, compare two runs.
//!
//! ```text
//! memtrack run [-o DIR [--replace]] [--json FILE|-] [--probes] [--max-live-blocks N]
//!              [--no-syscalls] [--stacks[=DEPTH] [--no-stack-cache]] [--limit LIMIT]...
//!              [--limits FILE] [--fail-on-lost]
//!              -- CMD [ARGS...]
//! memtrack report DIR [--json] [--probes] [--limit LIMIT]... [--limits FILE] [--fail-on-lost]
//! memtrack report --stacks DIR [--top N] [--benchmark URI] [--dhat FILE] [--pprof FILE]
//!                 [--flamegraph-dir DIR]
//! memtrack diff BASE NEW [--counter LIST] [--max-increase PCT] [--markdown FILE]
//! ```
//!
//! `run` keeps the command's stdout the command's: its human report and progress go to
//! stderr, its JSON report to a file (`--json FILE`), or to stdout with `--json -`, and
//! then the command's stdout goes to stderr too. `report` and `diff` print on stdout,
//! errors on stderr. The exit codes are [`memtrack_cli::exit_code`]'s (`--help` lists
//! them).

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::{Args, Parser, Subcommand};
use memtrack::{CommandSpec, MemtrackResult, OutputDir, ResultTree, TrackedProcess};
use memtrack_cli::{
    Error,
    counter::Counter,
    diff::{self, DiffOptions, MaxIncrease},
    exit_code::{self, COMMAND_NOT_FOUND, MEMTRACK_FAILED, Outcome},
    limits::{self, DirResults, Limit},
    report::{self, TextOptions},
    runner::RunOptions,
    stacks_command::{StacksRequest, report_stacks},
    units,
};

#[derive(Parser)]
#[command(
    name = "memtrack",
    version,
    about = "Exact heap memory tracking for Linux, counted in the kernel with eBPF",
    after_help = exit_code::HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What `run` and `report` check in the results besides printing them.
#[derive(Args)]
struct Checks {
    /// A limit on a counter of the benchmarks whose uri matches a glob,
    /// `URI_GLOB:COUNTER<=VALUE` (e.g. '*:peak_live_bytes<=1MiB'), or of whole processes,
    /// `process:CMD_GLOB:COUNTER<=VALUE`; repeatable. Exceeded: exit 203. A limit that
    /// matches nothing: exit 201.
    #[arg(long = "limit", value_name = "LIMIT")]
    limits: Vec<Limit>,
    /// Limits from a file, one per line as for --limit (# starts a comment line).
    #[arg(long = "limits", value_name = "FILE")]
    limits_file: Option<PathBuf>,
    /// Exit 202 when events were lost (some numbers are not exact), unless a failing
    /// command or an exceeded limit decides the exit code.
    #[arg(long)]
    fail_on_lost: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command and track the heap of it and every process it starts.
    ///
    /// The command's stdout stays the command's: memtrack's report and progress go to
    /// stderr, the JSON report to --json FILE.
    #[command(after_help = exit_code::HELP)]
    Run {
        /// Directory for the result files (default: a new directory, printed). One that
        /// holds results of an earlier run is refused, unless --replace.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Remove the result files of an earlier run from the -o directory first (only
        /// memtrack's own: *.MemtrackResult.msgpack, *.MemtrackStacks.msgpack and
        /// MarkerResult.msgpack).
        #[arg(long, requires = "output")]
        replace: bool,
        /// Write the JSON report to FILE (mode 0600), or with `-` to stdout; with `-`,
        /// the command's own stdout goes to stderr, so stdout holds the JSON alone.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// List where each process's probes sit (the JSON report always has them).
        #[arg(long)]
        probes: bool,
        /// Live blocks the kernel maps hold across all tracked processes: 1 to 134217728
        /// (default 1048576); beyond it, blocks are counted as lost events. The first
        /// --preallocated-live-blocks have preallocated entries; the others' entries are
        /// allocated as blocks go live (about 96 bytes each), and 16 bytes per block are
        /// reserved for their hash buckets when memtrack starts.
        #[arg(
            long,
            value_name = "BLOCKS",
            value_parser = clap::value_parser!(u32).range(1..=i64::from(memtrack::MAX_LIVE_BLOCKS))
        )]
        max_live_blocks: Option<u32>,
        /// How many of the --max-live-blocks have preallocated kernel entries: 1 to
        /// 134217728 (default 524288; more than --max-live-blocks means all), about 96
        /// bytes per block, the cheapest per allocator call (blocks live beyond them cost
        /// more per call). The first 65536 are reserved when memtrack starts, the others
        /// once the tracked processes keep 16384 blocks live, in the background (blocks
        /// that go live before that are kept in entries allocated on demand).
        #[arg(
            long,
            value_name = "BLOCKS",
            value_parser = clap::value_parser!(u32).range(1..=i64::from(memtrack::MAX_LIVE_BLOCKS))
        )]
        preallocated_live_blocks: Option<u32>,
        /// Do not count mmap/munmap/brk. Counting them adds a probe to every system
        /// call on the machine while the command runs (about 27 ns each here).
        #[arg(long)]
        no_syscalls: bool,
        /// Record the call stack of every allocation, unwound in the kernel, at most
        /// DEPTH frames (1 to 64, or max: 64, the default; deeper stacks are cut and
        /// marked truncated). Each process's stacks go beside its result
        /// ({pid}.MemtrackStacks.msgpack), for `memtrack report --stacks`.
        #[arg(
            long,
            value_name = "DEPTH",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "max",
            value_parser = stack_depth
        )]
        stacks: Option<u32>,
        /// With --stacks: walk every allocation's stack, even one the kernel walked
        /// before and can reuse exactly (the stacks are the same; only for measuring
        /// the walk itself).
        #[arg(long, requires = "stacks")]
        no_stack_cache: bool,
        #[command(flatten)]
        checks: Checks,
        /// The command and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true)]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Print the results saved in a directory and the directories below it.
    ///
    /// Reads the regular `*.MemtrackResult.msgpack` files of at most 64 MiB in DIR and
    /// up to 16 levels below it (e.g. target/memtrack, where the benchmark integrations
    /// save theirs), each directory's under its path relative to DIR. Symbolic links are
    /// not followed; FIFOs, devices and larger files are refused unread and named on
    /// stderr. No results at all: exit 201.
    #[command(after_help = exit_code::HELP)]
    Report {
        /// The results directory.
        dir: PathBuf,
        /// Print one JSON object instead of the human report.
        #[arg(long)]
        json: bool,
        /// List where each process's probes sit (the JSON report always has them).
        #[arg(long)]
        probes: bool,
        #[command(flatten)]
        checks: Checks,
        /// Show where the memory goes: the top allocation call stacks of each process
        /// by bytes allocated, at peak and leaked, symbolized.
        #[arg(long, conflicts_with_all = ["json", "probes"])]
        stacks: bool,
        /// How many stacks each ranking of --stacks lists.
        #[arg(
            long,
            value_name = "N",
            default_value_t = 10,
            requires = "stacks",
            value_parser = clap::value_parser!(u32).range(1..)
        )]
        top: u32,
        /// Show one benchmark region's stacks (by its uri) instead of whole processes.
        #[arg(long, value_name = "URI", requires = "stacks")]
        benchmark: Option<String>,
        /// Also write the stacks in valgrind DHAT's JSON format (dh_view.html opens it);
        /// with several processes, one file each, named FILE with the pid inserted.
        #[arg(long, value_name = "FILE", requires = "stacks")]
        dhat: Option<PathBuf>,
        /// Also write the stacks as a gzipped pprof profile.proto.
        #[arg(long, value_name = "FILE", requires = "stacks")]
        pprof: Option<PathBuf>,
        /// Also write flamegraph SVGs (allocated.svg, peak.svg, leaked.svg) into DIR.
        #[arg(long, value_name = "DIR", requires = "stacks")]
        flamegraph_dir: Option<PathBuf>,
    },
    /// Compare the results of two runs: per process, per benchmark, per counter.
    ///
    /// Both directories are read as `memtrack report` reads them (recursively).
    /// Processes are matched by command line and position, benchmarks by uri; each
    /// counter is shown in both runs with its absolute and relative change.
    #[command(after_help = exit_code::HELP)]
    Diff {
        /// The results of the run compared against (e.g. the main branch's).
        base: PathBuf,
        /// The results of the new run.
        new: PathBuf,
        /// The counters compared and checked, comma-separated (default
        /// alloc_calls,bytes_allocated,peak_live_bytes; also free_calls, bytes_freed,
        /// live_blocks, live_bytes, failed_allocs, unmatched_frees, lost_events).
        #[arg(long, value_name = "LIST", value_parser = parse_counters)]
        counter: Option<Counters>,
        /// The largest increase allowed for each counter compared, in percent (e.g. 5%,
        /// 0%); above it in any process or benchmark: exit 203. Any increase from 0 is
        /// above it.
        #[arg(long, value_name = "PERCENT", allow_hyphen_values = true)]
        max_increase: Option<MaxIncrease>,
        /// Append the comparison as Markdown to FILE (e.g. "$GITHUB_STEP_SUMMARY").
        #[arg(long, value_name = "FILE")]
        markdown: Option<PathBuf>,
    },
}

/// The counters of `diff --counter` (one value, a comma-separated list).
#[derive(Clone)]
struct Counters(Vec<Counter>);

fn parse_counters(list: &str) -> Result<Counters, String> {
    Counter::parse_list(list).map(Counters)
}

/// A `--stacks` depth: 1 to [`memtrack::stacks::MAX_DEPTH`] frames, or `max` for that
/// (as `MEMTRACK_STACKS` takes).
fn stack_depth(value: &str) -> Result<u32, String> {
    let max = memtrack::stacks::MAX_DEPTH;
    if value == "max" {
        return Ok(max);
    }
    match value.parse::<u32>() {
        Ok(depth) if (1..=max).contains(&depth) => Ok(depth),
        _ => Err(format!("{value} is not in 1..={max} (or max)")),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // A usage error is memtrack's failure (not a command's exit 2); --help and
            // --version are not errors.
            return ExitCode::from(if e.use_stderr() {
                MEMTRACK_FAILED
            } else {
                exit_code::SUCCESS
            });
        }
    };
    let code = match cli.command {
        Command::Run {
            output,
            replace,
            json,
            probes,
            max_live_blocks,
            preallocated_live_blocks,
            no_syscalls,
            stacks,
            no_stack_cache,
            checks,
            cmd,
        } => {
            let options = RunOptions {
                output,
                // Started through sudo: the command, and its results, are the invoking
                // user's.
                run_as: memtrack::sudo_invoker(),
                max_live_blocks,
                preallocated_live_blocks,
                no_syscalls,
                replace,
                stacks,
                no_stack_cache,
            };
            run(options, json.as_deref(), probes, &checks, cmd)
        }
        Command::Report {
            dir,
            stacks: true,
            top,
            benchmark,
            dhat,
            pprof,
            flamegraph_dir,
            ..
        } => {
            let request = StacksRequest {
                top: top as usize,
                benchmark,
                dhat,
                pprof,
                flamegraph_dir,
            };
            report_stacks(&dir, &request)
        }
        Command::Report {
            dir,
            json,
            probes,
            checks,
            ..
        } => report(&dir, json, probes, &checks),
        Command::Diff {
            base,
            new,
            counter,
            max_increase,
            markdown,
        } => {
            let options = DiffOptions {
                counters: counter.map_or_else(|| Counter::DEFAULT_DIFF.to_vec(), |c| c.0),
                max_increase,
            };
            diff(&base, &new, &options, markdown.as_deref())
        }
    };
    ExitCode::from(code.unwrap_or_else(|message| {
        eprintln!("memtrack: {message}");
        MEMTRACK_FAILED
    }))
}

/// The limits of `--limit` and `--limits FILE`.
fn all_limits(checks: &Checks) -> Result<Vec<Limit>, String> {
    let mut limits = checks.limits.clone();
    if let Some(file) = &checks.limits_file {
        limits.extend(limits::read_file(file)?);
    }
    Ok(limits)
}

/// Checks limits and lost events in `dirs`, saying on stderr what it found: the
/// outcome for a command that exited `command`, or an error for a limit that matches
/// nothing.
fn check(
    checks: &Checks,
    limits: &[Limit],
    dirs: &[DirResults],
    unattributed_lost: u64,
    command: u8,
) -> Result<u8, String> {
    let lost: u64 = dirs
        .iter()
        .flat_map(|(_, processes)| processes.iter())
        .map(|p| p.stats.lost_events)
        .sum::<u64>()
        + unattributed_lost;
    if lost != 0 {
        eprintln!(
            "memtrack: {} lost: some numbers are not exact",
            units::count(lost, "event")
        );
    }
    let checked = limits::check(limits, dirs);
    for line in &checked.exceeded {
        eprintln!("memtrack: limit exceeded: {line}");
    }
    if !checked.unmatched.is_empty() {
        return Err(checked.unmatched.join("; "));
    }
    if !limits.is_empty() && checked.exceeded.is_empty() {
        eprintln!(
            "memtrack: {} held ({})",
            units::count(limits.len() as u64, "limit"),
            units::count(checked.checks as u64, "check")
        );
    }
    Ok(Outcome {
        command,
        limit_exceeded: !checked.exceeded.is_empty(),
        lost_is_failure: checks.fail_on_lost && lost != 0,
    }
    .code())
}

/// Where `--json` goes.
enum JsonOut {
    Stdout,
    /// The file's directory, opened before the command runs, and its name there.
    File(OutputDir, String),
}

impl JsonOut {
    fn open(path: &Path, owner: Option<(u32, u32)>) -> Result<Self, String> {
        if path == Path::new("-") {
            return Ok(JsonOut::Stdout);
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("--json {}: not a file name", path.display()))?;
        let parent = memtrack_cli::export::directory_of(path);
        if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            return Err(format!(
                "--json {}: is a directory (give a file name)",
                path.display()
            ));
        }
        let dir = OutputDir::open(parent, owner)
            .map_err(|e| format!("--json {}: its directory: {e}", path.display()))?;
        Ok(JsonOut::File(dir, name.to_owned()))
    }

    fn write(&self, json: &str) -> Result<(), String> {
        match self {
            JsonOut::Stdout => {
                println!("{json}");
                Ok(())
            }
            JsonOut::File(dir, name) => dir
                .write_file(name, format!("{json}\n").as_bytes())
                .map(|_| ())
                .map_err(|e| format!("writing the JSON report: {e}")),
        }
    }
}

/// `memtrack run`.
fn run(
    options: RunOptions,
    json: Option<&Path>,
    probes: bool,
    checks: &Checks,
    cmd: Vec<std::ffi::OsString>,
) -> Result<u8, String> {
    let limits = all_limits(checks)?;
    let json = json.map(|p| JsonOut::open(p, options.run_as)).transpose()?;
    let mut argv = cmd.into_iter();
    let program = argv.next().expect("clap requires the command");
    let mut spec = CommandSpec::new(program).args(argv);
    if matches!(json, Some(JsonOut::Stdout)) {
        // stdout is the JSON report's: the command writes its own to stderr.
        spec = spec.fd(1, 2);
    }
    // This process ends right after the run: the kernel's detaching of the probes
    // (20-60 ms of grace periods) is left to a helper at exit instead of waited for.
    // The results are written and the report printed before that.
    memtrack::hand_off_links_at_exit();
    let outcome = match memtrack_cli::runner::run(spec, &options) {
        Ok(outcome) => outcome,
        Err(e @ Error::Tracking(memtrack::Error::CommandNotFound { .. })) => {
            // `--stacks 8 -- CMD`: the depth was taken for the command.
            let hint = match &e {
                Error::Tracking(memtrack::Error::CommandNotFound { command })
                    if options.stacks.is_some() && command.parse::<u32>().is_ok() =>
                {
                    format!(" (a depth of --stacks is written --stacks={command})")
                }
                _ => String::new(),
            };
            eprintln!("memtrack: {e}{hint}");
            return Ok(COMMAND_NOT_FOUND);
        }
        Err(e @ Error::Tracking(memtrack::Error::NotExecutable { .. })) => {
            eprintln!("memtrack: {e}");
            return Ok(exit_code::CANNOT_EXECUTE);
        }
        Err(e) => return Err(e.to_string()),
    };
    eprintln!(
        "memtrack: {} and {} in {}",
        units::count(outcome.results.processes.len() as u64, "result file"),
        fifo_protocol::MARKER_RESULT_FILE_NAME,
        outcome.dir.display()
    );
    if outcome.unattributed_lost_events != 0 {
        eprintln!(
            "memtrack: {} could not be attributed to a process",
            units::count(outcome.unattributed_lost_events, "event")
        );
    }
    if let memtrack::LaterLiveBlocks::Failed { blocks, reason } = &outcome.later_live_blocks {
        eprintln!(
            "memtrack: the kernel could not reserve {blocks} more preallocated live-block \
             entries ({reason}): the blocks beyond the first {} kept live had entries \
             allocated on demand instead (counted exactly, at a higher cost per call)",
            memtrack::LIVE_BLOCKS_AT_LOAD
        );
    }
    for (pid, stacks) in &outcome.stacks {
        eprintln!("memtrack: {}", stacks_line(*pid, stacks));
    }
    if let Some(walks) = outcome.stack_walks {
        eprintln!(
            "memtrack: stacks walked: {}, reused from the cache of walks: {}",
            walks.walked, walks.reused
        );
    }
    let options = TextOptions::with_probe_sites(probes);
    eprint!(
        "{}",
        report::render_text_with(&outcome.results.processes, options)
    );
    if let Some(json) = &json {
        json.write(&report::render_json(&outcome.results))?;
    }
    let command = outcome.exit.shell_code().clamp(0, 255) as u8;
    let dirs: [DirResults; 1] = [(Path::new(""), &outcome.results.processes)];
    check(
        checks,
        &limits,
        &dirs,
        outcome.unattributed_lost_events,
        command,
    )
}

/// What `memtrack run --stacks` says of one process's stacks: how many, where, and how
/// many blocks have an incomplete stack (always said, zeros too, so that a stack cut
/// short is never silent).
fn stacks_line(pid: u32, stacks: &memtrack::stacks::ProcessStacks) -> String {
    let incomplete = stacks.incomplete();
    format!(
        "stacks of process {pid}: {} (depth limit {}) in {}; blocks with an \
         incomplete stack: {} cut at the depth limit, {} at a frame without unwind \
         information, {} lost (stack map full, or the walk cut short)",
        units::count(stacks.stacks.len() as u64, "stack"),
        stacks.depth_limit,
        memtrack::stacks::stacks_file_name(pid),
        units::exact(incomplete.truncated_blocks),
        units::exact(incomplete.unknown_blocks),
        units::exact(incomplete.lost_blocks),
    )
}

/// A tree's results, by directory.
type Found = Vec<(PathBuf, Vec<TrackedProcess>)>;

/// Reads the results in `dir` and below, naming on stderr each file or directory
/// refused. Returns them and how many were refused; no results at all is an error.
fn read_tree(dir: &Path) -> Result<(Found, usize), String> {
    let tree: ResultTree = MemtrackResult::scan_tree(dir).map_err(|e| e.to_string())?;
    for refused in &tree.refused {
        eprintln!("memtrack: skipped {refused}");
    }
    if tree.dirs.is_empty() {
        let below = match tree.dirs_searched {
            1 => String::new(),
            n => format!(" nor do the {} directories below it", n - 1),
        };
        return Err(if tree.refused.is_empty() {
            format!(
                "{} holds no result files (*{}){below}: nothing to report",
                dir.display(),
                memtrack::RESULT_FILE_SUFFIX
            )
        } else {
            match tree.refused.len() {
                1 => format!(
                    "the one result file in {} could not be read: nothing to report",
                    dir.display()
                ),
                n => format!(
                    "none of the {} result files in {} could be read: nothing to report",
                    units::exact(n as u64),
                    dir.display()
                ),
            }
        });
    }
    let refused = tree.refused.len();
    let found = tree
        .dirs
        .into_iter()
        .map(|d| {
            let processes = d.results.into_iter().map(|r| r.process).collect();
            (d.relative, processes)
        })
        .collect();
    Ok((found, refused))
}

fn as_dir_results(found: &Found) -> Vec<DirResults<'_>> {
    found
        .iter()
        .map(|(dir, processes)| (dir.as_path(), processes.as_slice()))
        .collect()
}

/// `memtrack report DIR`: reports what can be read, names on stderr what was refused.
fn report(dir: &Path, json: bool, probes: bool, checks: &Checks) -> Result<u8, String> {
    let limits = all_limits(checks)?;
    let (found, refused) = read_tree(dir)?;
    let dirs = as_dir_results(&found);
    if json {
        println!("{}", report::render_json_tree(&dirs));
    } else {
        let options = TextOptions::with_probe_sites(probes);
        print!("{}", report::render_text_tree(&dirs, options));
    }
    let code = check(checks, &limits, &dirs, 0, exit_code::SUCCESS)?;
    if refused != 0 {
        let reported: usize = found.iter().map(|(_, p)| p.len()).sum();
        return Err(format!(
            "reported {} of {} in {}; {refused} skipped (above)",
            units::count(reported as u64, "result file"),
            units::exact((reported + refused) as u64),
            dir.display()
        ));
    }
    Ok(code)
}

/// `memtrack diff BASE NEW`.
fn diff(
    base: &Path,
    new: &Path,
    options: &DiffOptions,
    markdown: Option<&Path>,
) -> Result<u8, String> {
    let (base_found, base_refused) = read_tree(base)?;
    let (new_found, new_refused) = read_tree(new)?;
    let compared = diff::diff(
        &as_dir_results(&base_found),
        &as_dir_results(&new_found),
        options,
    );
    if compared.compared.is_empty() {
        return Err(format!(
            "{} and {} have no process or benchmark in common: nothing to compare",
            base.display(),
            new.display()
        ));
    }
    print!("{}", diff::render_text(&compared, options));
    if let Some(path) = markdown {
        append(path, &diff::render_markdown(&compared, options, base, new))?;
    }
    if base_refused + new_refused != 0 {
        return Err("some result files were skipped (above): the comparison is incomplete".into());
    }
    Ok(if compared.exceeded() != 0 {
        exit_code::LIMIT_EXCEEDED
    } else {
        exit_code::SUCCESS
    })
}

/// Appends `text` to `path` (created if missing, mode 0600; never through a symbolic
/// link), as a CI job summary file wants.
fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("--markdown {}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("--markdown {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent_and_lists_the_exit_codes() {
        Cli::command().debug_assert();
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("201  memtrack itself failed"), "{help}");
    }

    /// `--stacks` alone is the documented default depth; `--stacks=N` takes 1 to the
    /// most and refuses 0 and one more.
    #[test]
    fn stacks_depth_defaults_to_the_most_and_is_bounded() {
        use clap::error::ErrorKind;
        let depth = |args: &[&str]| -> Result<Option<u32>, ErrorKind> {
            let argv = ["memtrack", "run"]
                .iter()
                .chain(args)
                .chain(&["--", "true"]);
            match Cli::try_parse_from(argv) {
                Ok(Cli {
                    command: Command::Run { stacks, .. },
                }) => Ok(stacks),
                Ok(_) => panic!("{args:?} parsed as another command than run"),
                Err(e) => Err(e.kind()),
            }
        };
        let max = memtrack::stacks::MAX_DEPTH;
        assert_eq!(memtrack::stacks::DEFAULT_DEPTH, 64);
        assert_eq!(max, 64);
        assert_eq!(depth(&[]), Ok(None));
        assert_eq!(
            depth(&["--stacks"]),
            Ok(Some(memtrack::stacks::DEFAULT_DEPTH))
        );
        assert_eq!(depth(&["--stacks=1"]), Ok(Some(1)));
        assert_eq!(depth(&["--stacks=64"]), Ok(Some(64)));
        assert_eq!(depth(&["--stacks=max"]), Ok(Some(max)));
        assert_eq!(depth(&["--stacks=0"]), Err(ErrorKind::ValueValidation));
        assert_eq!(depth(&["--stacks=65"]), Err(ErrorKind::ValueValidation));
    }

    /// `diff --max-increase -5%` reaches the percentage's parser, which says why it is
    /// refused (clap took `-5` for an option: "unexpected argument '-5' found").
    #[test]
    fn a_negative_max_increase_is_refused_by_its_parser() {
        let argv = ["memtrack", "diff", "a", "b", "--max-increase", "-5%"];
        let err = Cli::try_parse_from(argv)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("a negative increase cannot be allowed"),
            "{err}"
        );
    }

    /// `report --stacks --top N` lists at least one stack per ranking.
    #[test]
    fn top_is_at_least_one() {
        use clap::error::ErrorKind;
        let top = |n: &str| -> Result<u32, ErrorKind> {
            let argv = ["memtrack", "report", "--stacks", "--top", n, "dir"];
            match Cli::try_parse_from(argv) {
                Ok(Cli {
                    command: Command::Report { top, .. },
                }) => Ok(top),
                Ok(_) => panic!("parsed as another command than report"),
                Err(e) => Err(e.kind()),
            }
        };
        assert_eq!(top("1"), Ok(1));
        assert_eq!(top("0"), Err(ErrorKind::ValueValidation));
    }

    #[test]
    fn run_results_are_one_run() {
        // The JSON of `run` is a RunResults, the same as `report` of its directory.
        let results = memtrack::RunResults::new(vec![TrackedProcess::new(1, 0, vec!["x".into()])]);
        let dirs: [DirResults; 1] = [(Path::new(""), &results.processes)];
        assert_eq!(
            report::render_json_tree(&dirs),
            report::render_json(&results)
        );
    }
}
