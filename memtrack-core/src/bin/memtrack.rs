//! `memtrack`: track a command's heap exactly, or print saved results.
//!
//! ```text
//! memtrack run [-o DIR] [--json] -- CMD [ARGS...]
//! memtrack report DIR [--json]
//! ```
//! Progress and errors go to stderr; the report (text or JSON) to stdout. `run` exits
//! with the command's own exit code (128 + signal if a signal killed it), 127 if the
//! command was not found, and 2 for memtrack's own errors.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use memtrack::{CommandSpec, Error, MemtrackResult, Tracker, report};

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
        /// The command and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Print the results saved in a directory by `memtrack run`.
    Report {
        /// The results directory.
        dir: PathBuf,
        /// Print one JSON object instead of the human report.
        #[arg(long)]
        json: bool,
    },
}

/// Exit code for memtrack's own failures (not the command's).
const MEMTRACK_FAILURE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { output, json, cmd } => run(output, json, cmd),
        Command::Report { dir, json } => match MemtrackResult::read_dir(&dir) {
            Ok(results) => {
                print_report(&results, json);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("memtrack: {e}");
                ExitCode::from(MEMTRACK_FAILURE)
            }
        },
    }
}

fn print_report(results: &[MemtrackResult], json: bool) {
    if json {
        println!("{}", report::render_json(results, &[]));
    } else {
        print!("{}", report::render_text(results, &[]));
    }
}

/// The invoking user when started through sudo, so the command's files are theirs.
fn sudo_identity() -> Option<(u32, u32)> {
    if !nix::unistd::Uid::effective().is_root() {
        return None;
    }
    let uid = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    let gid = std::env::var("SUDO_GID").ok()?.parse().ok()?;
    Some((uid, gid))
}

fn default_output_dir() -> PathBuf {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("memtrack-{stamp}-{}", std::process::id()))
}

fn run(output: Option<PathBuf>, json: bool, cmd: Vec<std::ffi::OsString>) -> ExitCode {
    let mut argv = cmd.into_iter();
    let program = argv.next().expect("clap requires the command");
    let mut spec = CommandSpec::new(program).args(argv);
    spec.run_as = sudo_identity();

    let tracker = match Tracker::builder().spawn(spec) {
        Ok(t) => t,
        Err(e @ Error::CommandNotFound { .. }) => {
            eprintln!("memtrack: {e}");
            return ExitCode::from(127);
        }
        Err(e) => {
            eprintln!("memtrack: {e}");
            return ExitCode::from(MEMTRACK_FAILURE);
        }
    };
    let status = match tracker.wait() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("memtrack: {e}");
            return ExitCode::from(MEMTRACK_FAILURE);
        }
    };
    let processes = match tracker.collect_processes() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("memtrack: collecting results failed: {e}");
            return ExitCode::from(MEMTRACK_FAILURE);
        }
    };
    let unattributed = tracker.unattributed_lost_events();
    drop(tracker);

    let dir = output.unwrap_or_else(default_output_dir);
    let results: Vec<MemtrackResult> = processes.iter().map(MemtrackResult::from_process).collect();
    for result in &results {
        if let Err(e) = result.write_to_dir(&dir) {
            eprintln!("memtrack: {e}");
            return ExitCode::from(MEMTRACK_FAILURE);
        }
    }
    eprintln!(
        "memtrack: {} result file(s) in {}",
        results.len(),
        dir.display()
    );
    if unattributed != 0 {
        eprintln!("memtrack: {unattributed} event(s) could not be attributed to a process");
    }
    print_report(&results, json);
    ExitCode::from(status.shell_code().clamp(0, 255) as u8)
}
