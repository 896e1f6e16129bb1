//! `memtrack`: track a command's heap exactly, print saved results, compare two runs.
//!
//! ```text
//! memtrack run [-o DIR [--replace]] [--json FILE|-] [--probes] [--max-live-blocks N]
//!              [--no-syscalls] [--stacks[=DEPTH] [--no-stack-cache]] [--limit LIMIT]...
//!              [--limits FILE] [--fail-on-lost]
//!              -- CMD [ARGS...]
//! memtrack report DIR [--json] [--probes] [--limit LIMIT]... [--limits FILE] [--fail-on-lost]
//! memtrack report --stacks DIR [--top N] [--benchmark URI | --image N] [--dhat FILE]
//!                 [--pprof FILE] [--flamegraph-dir DIR]
//! memtrack diff BASE NEW [--counter LIST] [--max-increase PCT] [--markdown FILE]
//! ```
//!
//! `run` keeps the command's stdout the command's: its human report and progress go to
//! stderr, its JSON report to a file (`--json FILE`), or to stdout with `--json -`, and
//! then the command's stdout goes to stderr too. `report` and `diff` print on stdout,
//! errors on stderr. The exit codes are [`memtrack_cli::exit_code`]'s (`--help` lists
//! them). Each command is a module of [`cli`].

mod cli;
mod help;

use std::{path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand};
use memtrack_cli::{
    Error,
    exit_code::{self, MEMTRACK_FAILED},
    runner::RunOptions,
};
use memtrack_report::{
    counter::Counter,
    diff::{DiffOptions, MaxIncrease},
    limits::Limit,
};

use cli::stacks::{StacksRequest, report_stacks};

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

impl Checks {
    /// The checks, the limits file read.
    fn resolve(&self) -> Result<cli::Checks, Error> {
        cli::Checks::new(
            self.limits.clone(),
            self.limits_file.as_deref(),
            self.fail_on_lost,
        )
    }
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
        /// Live blocks the kernel maps hold across all tracked processes.
        // The long help texts with numbers are made from the constants that hold them
        // (help.rs).
        #[arg(
            long,
            value_name = "BLOCKS",
            long_help = help::max_live_blocks(),
            value_parser = clap::value_parser!(u32).range(1..=i64::from(memtrack::MAX_LIVE_BLOCKS))
        )]
        max_live_blocks: Option<u32>,
        /// How many of the --max-live-blocks have preallocated kernel entries.
        #[arg(
            long,
            value_name = "BLOCKS",
            long_help = help::preallocated_live_blocks(),
            value_parser = clap::value_parser!(u32).range(1..=i64::from(memtrack::MAX_LIVE_BLOCKS))
        )]
        preallocated_live_blocks: Option<u32>,
        /// Do not count mmap/munmap/brk. Counting them adds a probe to every system
        /// call on the machine while the command runs (BENCHMARKS.md measures it).
        #[arg(long)]
        no_syscalls: bool,
        /// Record the call stack of every allocation, unwound in the kernel.
        #[arg(
            long,
            value_name = "DEPTH",
            long_help = help::stacks(),
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
        /// Show and export image N of each process (1: the image it started with; a
        /// process that called execve ran several, each with its own stacks). Without
        /// it the report shows every image under its own heading and the exports take
        /// each process's last image.
        #[arg(
            long,
            value_name = "N",
            requires = "stacks",
            conflicts_with = "benchmark",
            value_parser = clap::value_parser!(u32).range(1..)
        )]
        image: Option<u32>,
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
fn stack_depth(value: &str) -> Result<u32, memtrack::stacks::BadDepth> {
    memtrack::stacks::parse_depth(value)
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
    ExitCode::from(dispatch(cli.command).unwrap_or_else(|e| {
        eprintln!("memtrack: {e}");
        e.exit_code()
    }))
}

/// Runs the command asked for: its exit code, or the error memtrack reports.
fn dispatch(command: Command) -> Result<u8, Error> {
    match command {
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
            let checks = checks.resolve()?;
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
            cli::run::run(options, json.as_deref(), probes, &checks, cmd)
        }
        Command::Report {
            dir,
            stacks: true,
            top,
            benchmark,
            image,
            dhat,
            pprof,
            flamegraph_dir,
            ..
        } => {
            let request = StacksRequest {
                top: top as usize,
                benchmark,
                image: image.map(|n| n as usize),
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
        } => cli::report::report(&dir, json, probes, &checks.resolve()?),
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
            cli::diff::diff(&base, &new, &options, markdown.as_deref())
        }
    }
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
        assert_eq!(max, 64);
        assert_eq!(max, 64);
        assert_eq!(depth(&[]), Ok(None));
        assert_eq!(depth(&["--stacks"]), Ok(Some(max)));
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
        use memtrack_report::{limits::DirResults, report};
        // The JSON of `run` is a RunResults, the same as `report` of its directory.
        let results =
            memtrack::RunResults::new(vec![memtrack::TrackedProcess::new(1, 0, vec!["x".into()])]);
        let dirs: [DirResults; 1] = [(std::path::Path::new(""), &results.processes)];
        assert_eq!(
            report::render_json_tree(&dirs),
            report::render_json(&results)
        );
    }
}
