//! `memtrack`: track a command's heap exactly, or print saved results.
//!
//! ```text
//! memtrack run [-o DIR] [--json] [--probes] [--max-live-blocks N] [--no-syscalls] -- CMD [ARGS...]
//! memtrack report DIR [--json] [--probes]
//! memtrack report --stacks DIR [--top N] [--benchmark URI] [--dhat FILE] [--pprof FILE]
//!                 [--flamegraph-dir DIR]
//! ```
//! Progress and errors go to stderr; the report (text or JSON) to stdout. `run` exits
//! with the command's own exit code (128 + signal if a signal killed it), 127 if the
//! command was not found, and 2 for memtrack's own errors (a results directory that
//! cannot take the results among them, found before the command starts). `report` exits
//! 0 when it read every result file in the directory, and 2 when the directory holds
//! none it can read, or when it refused some (each is named on stderr with the reason;
//! the others are reported).

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use memtrack::{CommandSpec, RunResults};
use memtrack_cli::{
    Error, export,
    report::{self, TextOptions},
    runner::RunOptions,
    stack_profile::{self, ScopeChoice},
    stacks_report::{self, StacksOptions},
};

#[derive(Parser)]
#[command(
    name = "memtrack",
    version,
    about = "Exact heap memory tracking for Linux, counted in the kernel with eBPF"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command and track the heap of it and every process it starts.
    Run {
        /// Directory for the result files (default: a new directory, printed).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print one JSON object on stdout instead of the human report.
        #[arg(long)]
        json: bool,
        /// List where each process's probes sit (the JSON report always has them).
        #[arg(long)]
        probes: bool,
        /// Live blocks the kernel map holds across all tracked processes: 1 to 134217728
        /// (default 1048576); beyond it, blocks are counted as lost events. The kernel
        /// reserves about 88 bytes per block when memtrack starts (11 GiB for the most).
        #[arg(
            long,
            value_name = "BLOCKS",
            value_parser = clap::value_parser!(u32).range(1..=i64::from(memtrack::MAX_LIVE_BLOCKS))
        )]
        max_live_blocks: Option<u32>,
        /// Do not count mmap/munmap/brk. Counting them adds a probe to every system
        /// call on the machine while the command runs (about 27 ns each here).
        #[arg(long)]
        no_syscalls: bool,
        /// The command and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Print the results saved in a directory by `memtrack run`.
    ///
    /// Reads the regular `*.MemtrackResult.msgpack` files of at most 64 MiB; symbolic
    /// links, FIFOs, devices and larger files are refused unread and named on stderr.
    Report {
        /// The results directory.
        dir: PathBuf,
        /// Print one JSON object instead of the human report.
        #[arg(long)]
        json: bool,
        /// List where each process's probes sit (the JSON report always has them).
        #[arg(long)]
        probes: bool,
        /// Show where the memory goes: the top allocation call stacks of each process
        /// by bytes allocated, at peak and leaked, symbolized.
        #[arg(long, conflicts_with_all = ["json", "probes"])]
        stacks: bool,
        /// How many stacks each ranking of --stacks lists.
        #[arg(long, value_name = "N", default_value_t = 10, requires = "stacks")]
        top: usize,
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
}

/// What `memtrack report --stacks` shows and writes.
struct StacksRequest {
    top: usize,
    benchmark: Option<String>,
    dhat: Option<PathBuf>,
    pprof: Option<PathBuf>,
    flamegraph_dir: Option<PathBuf>,
}

/// Exit code for memtrack's own failures (not the command's).
const MEMTRACK_FAILURE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            output,
            json,
            probes,
            max_live_blocks,
            no_syscalls,
            cmd,
        } => run(output, json, probes, max_live_blocks, no_syscalls, cmd),
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
                top,
                benchmark,
                dhat,
                pprof,
                flamegraph_dir,
            };
            match report_stacks(&dir, &request) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("memtrack: {e}");
                    ExitCode::from(MEMTRACK_FAILURE)
                }
            }
        }
        Command::Report {
            dir, json, probes, ..
        } => report(&dir, json, probes),
    }
}

/// `memtrack report DIR`: reports what can be read, names on stderr what was refused.
fn report(dir: &std::path::Path, json: bool, probes: bool) -> ExitCode {
    let scan = match memtrack::MemtrackResult::scan_dir(dir) {
        Ok(scan) => scan,
        Err(e) => {
            eprintln!("memtrack: {e}");
            return ExitCode::from(MEMTRACK_FAILURE);
        }
    };
    for refused in &scan.refused {
        eprintln!("memtrack: skipped {refused}");
    }
    if scan.results.is_empty() {
        if scan.refused.is_empty() {
            eprintln!(
                "memtrack: {} holds no result files (*{}): nothing to report",
                dir.display(),
                memtrack::RESULT_FILE_SUFFIX
            );
        } else {
            eprintln!(
                "memtrack: none of the {} result file(s) in {} could be read: nothing to \
                 report",
                scan.refused.len(),
                dir.display()
            );
        }
        return ExitCode::from(MEMTRACK_FAILURE);
    }
    let results = RunResults::new(scan.results.into_iter().map(|r| r.process).collect());
    print_report(&results, json, probes);
    if scan.refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "memtrack: reported {} result file(s) of {} in {}; {} skipped (above)",
            results.processes.len(),
            results.processes.len() + scan.refused.len(),
            dir.display(),
            scan.refused.len()
        );
        ExitCode::from(MEMTRACK_FAILURE)
    }
}

fn print_report(results: &RunResults, json: bool, probe_sites: bool) {
    if json {
        println!("{}", report::render_json(results));
    } else {
        let options = TextOptions::with_probe_sites(probe_sites);
        print!("{}", report::render_text_with(&results.processes, options));
    }
}

/// `memtrack report --stacks`: symbolize, print the top stacks, write the exports.
fn report_stacks(dir: &std::path::Path, request: &StacksRequest) -> memtrack_cli::Result<()> {
    let processes = stack_profile::load_dir(dir)?;
    let choice = match &request.benchmark {
        None => ScopeChoice::Process,
        Some(uri) => ScopeChoice::Benchmark(uri.clone()),
    };
    let (profiles, skipped) = stack_profile::resolve(&processes, &choice);
    let exporting =
        request.dhat.is_some() || request.pprof.is_some() || request.flamegraph_dir.is_some();
    if profiles.is_empty() && exporting {
        return Err(Error::Stacks {
            path: dir.to_path_buf(),
            reason: match &request.benchmark {
                None => "no process there has stacks to export".to_string(),
                Some(uri) => format!("no process there has stacks of benchmark {uri}"),
            },
        });
    }
    let options = StacksOptions { top: request.top };
    print!("{}", stacks_report::render(&profiles, &skipped, options));
    let mut written = Vec::new();
    if let Some(path) = &request.dhat {
        written.extend(export::dhat::write_all(&profiles, path)?);
    }
    if let Some(path) = &request.pprof {
        export::pprof::write(&profiles, path)?;
        written.push(path.clone());
    }
    if let Some(dir) = &request.flamegraph_dir {
        written.extend(export::flamegraph::write_all(&profiles, dir)?);
    }
    for path in written {
        eprintln!("memtrack: wrote {}", path.display());
    }
    Ok(())
}

fn run(
    output: Option<PathBuf>,
    json: bool,
    probes: bool,
    max_live_blocks: Option<u32>,
    no_syscalls: bool,
    cmd: Vec<std::ffi::OsString>,
) -> ExitCode {
    let mut argv = cmd.into_iter();
    let program = argv.next().expect("clap requires the command");
    let spec = CommandSpec::new(program).args(argv);
    let options = RunOptions {
        output,
        // Started through sudo: the command, and its results, are the invoking user's.
        run_as: memtrack::sudo_invoker(),
        max_live_blocks,
        no_syscalls,
    };
    let outcome = match memtrack_cli::runner::run(spec, &options) {
        Ok(outcome) => outcome,
        Err(e @ Error::Tracking(memtrack::Error::CommandNotFound { .. })) => {
            eprintln!("memtrack: {e}");
            return ExitCode::from(127);
        }
        Err(e) => {
            eprintln!("memtrack: {e}");
            return ExitCode::from(MEMTRACK_FAILURE);
        }
    };
    eprintln!(
        "memtrack: {} result file(s) and {} in {}",
        outcome.results.processes.len(),
        fifo_protocol::MARKER_RESULT_FILE_NAME,
        outcome.dir.display()
    );
    if outcome.unattributed_lost_events != 0 {
        eprintln!(
            "memtrack: {} event(s) could not be attributed to a process",
            outcome.unattributed_lost_events
        );
    }
    print_report(&outcome.results, json, probes);
    ExitCode::from(outcome.exit.shell_code().clamp(0, 255) as u8)
}
