//! memtrack's own performance benchmarks: what the probes add to each allocator call,
//! under threads, what the tracker's operations cost, and that unrelated processes are
//! untouched. Prints Markdown tables (the figures in BENCHMARKS.md come from here) and
//! optionally writes JSON.
//!
//! ```text
//! cargo run --release -p memtrack-benches -- [--quick] [--json FILE] [--only LIST]
//! ```
//!
//! Needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE), gcc and g++. The workloads
//! are small C/C++ programs (benches/programs) that time their own loops, so figures
//! never include attaching or detaching. Benchmarks only report: apart from a tracked
//! run that counted inexactly (exit status 1: that is a correctness failure, not a
//! performance one), nothing here fails on a figure.

mod in_process;
mod isolation;
mod lifecycle;
mod probe_cost;
mod programs;
mod render;
mod report;
mod samples;
mod session;
mod settings;
mod short;
mod short_report;
mod stacks;
mod stacks_report;
mod threads;
mod timeline;
mod timeline_report;
mod workload;

use std::{path::PathBuf, process::ExitCode};

use programs::Programs;
use report::{Machine, Report};
use session::Session;
use settings::Settings;

/// Every fallible step returns this; the message says what failed.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The benchmark sections, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Section {
    /// 5. An unrelated process beside a tracker.
    Isolation,
    /// 4. Tracker latency.
    Lifecycle,
    /// 1. malloc+free pairs.
    Pairs,
    /// 2. calloc, realloc, posix_memalign, C++ new/delete.
    Functions,
    /// 3. Threads.
    Threads,
    /// 6. In-kernel call stacks: depths 8, 32, 64, and 32 walking every stack, against none.
    Stacks,
    /// 7. Live blocks in preallocated entries against entries allocated on demand.
    Live,
    /// 8. The timeline: off, without RSS, with RSS.
    Timeline,
    /// 9. Short processes: `memtrack run -- /bin/true`, and the processes it starts.
    Short,
}

/// memtrack's own benchmarks. Prints the results as Markdown on stdout, progress on
/// stderr. Needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE) and gcc/g++. Exit
/// status: 0, or 1 if something failed or a tracked run counted inexactly, 2 for a
/// usage error.
#[derive(clap::Parser, Debug)]
#[command(name = "memtrack-benches")]
struct Cli {
    /// Small loops and few runs (a smoke run: seconds).
    #[arg(long)]
    quick: bool,
    /// Also write every sample as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run only these sections (comma-separated; default: all).
    #[arg(long, value_delimiter = ',', value_name = "SECTION")]
    only: Vec<Section>,
    /// The `memtrack` binary benchmark 9 runs (default: the one beside this program,
    /// built by `cargo build --release -p memtrack-cli`).
    #[arg(long, value_name = "PATH")]
    memtrack: Option<PathBuf>,
}

impl Cli {
    /// Whether `section` is to run.
    fn wants(&self, section: Section) -> bool {
        self.only.is_empty() || self.only.contains(&section)
    }
}

/// The 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The git commit of the checkout this runner was built from, "+ local changes" when the
/// memtrack crates differ from it (read-only git commands; "unknown" without git).
fn revision() -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let crates = [
        "memtrack-core",
        "memtrack-ebpf",
        "memtrack-common",
        "memtrack-targets",
    ];
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(crates);
    match git(&status) {
        Some(changes) if !changes.is_empty() => format!("{commit} + local changes"),
        _ => commit,
    }
}

/// Describes this machine for the report header.
fn machine(load_at_start: f64) -> Machine {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpu_model = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let libc = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown libc".into());
    Machine {
        date: time::OffsetDateTime::now_utc().date().to_string(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        arch: std::env::consts::ARCH,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        libc,
        revision: revision(),
        load: (load_at_start, load_average()),
    }
}

/// Builds the workloads and runs the selected benchmarks in order.
fn run(cli: &Cli) -> BenchResult<Report> {
    let settings = if cli.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    let load_at_start = load_average();
    eprintln!("compiling the workloads");
    let mut session = Session::new(settings.clone(), Programs::build()?);
    // The in-process trackers first: a spawned tracker that is dropped rather than
    // closed (--quick) leaves detaching work that a later close() would wait for.
    let isolation = if cli.wants(Section::Isolation) {
        eprintln!("5. an unrelated process beside a tracker");
        Some(isolation::run(&mut session)?)
    } else {
        None
    };
    let lifecycle = if cli.wants(Section::Lifecycle) {
        eprintln!("4. in-process tracker latency");
        lifecycle::in_process(&mut session)?
    } else {
        Vec::new()
    };
    let mut operations = Vec::new();
    if cli.wants(Section::Pairs) {
        eprintln!("1. malloc+free pairs: untracked, Cheapest, FunctionEntry, counting off");
        operations.extend(probe_cost::malloc_free(&mut session)?);
    }
    if cli.wants(Section::Functions) {
        eprintln!("2. calloc, realloc, posix_memalign, C++ new/delete");
        operations.extend(probe_cost::functions(&mut session)?);
    }
    if cli.wants(Section::Live) {
        eprintln!("7. live blocks in preallocated and in on-demand entries");
        operations.extend(probe_cost::live_on_demand(&mut session)?);
    }
    let threads = if cli.wants(Section::Threads) {
        eprintln!("3. threads");
        Some(threads::run(&mut session)?)
    } else {
        None
    };
    let stacks = if cli.wants(Section::Stacks) {
        eprintln!("6. in-kernel call stacks");
        Some(stacks::run(&mut session)?)
    } else {
        None
    };
    let timeline = if cli.wants(Section::Timeline) {
        eprintln!("8. the timeline");
        Some(timeline::run(&mut session)?)
    } else {
        None
    };
    let short = if cli.wants(Section::Short) {
        eprintln!("9. short processes");
        let memtrack = cli.memtrack.clone().unwrap_or_else(short::default_memtrack);
        Some(short::run(
            &memtrack,
            session.settings.short_rounds,
            session.settings.short_processes,
        )?)
    } else {
        None
    };
    let mut command = String::from("cargo run --release -p memtrack-benches --");
    for arg in std::env::args().skip(1) {
        command.push(' ');
        command.push_str(&arg);
    }
    Ok(Report {
        machine: machine(load_at_start),
        settings,
        command,
        operations,
        threads,
        lifecycle,
        spawn_latency: lifecycle::spawned(&session),
        isolation,
        stacks,
        timeline,
        short,
        checks: session.checks,
        probe_sites: session.probe_sites,
    })
}

/// Prints the report; exit 1 on errors or inexact counts, 2 on usage errors.
fn main() -> ExitCode {
    // Usage errors exit with 2 (clap's convention), --help with 0.
    let cli = <Cli as clap::Parser>::parse();
    let report = match run(&cli) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("memtrack-benches: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", report.markdown());
    if let Some(path) = &cli.json
        && let Err(e) = std::fs::write(path, format!("{}\n", report.json()))
    {
        eprintln!("memtrack-benches: cannot write {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    if !report.all_exact() {
        eprintln!("memtrack-benches: a tracked run did not count exactly (see the counts table)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn sections_parse() {
        let cli = Cli::try_parse_from(["b", "--only", "pairs,threads"]).unwrap();
        assert!(cli.wants(Section::Pairs) && cli.wants(Section::Threads));
        assert!(!cli.wants(Section::Isolation));
        assert!(
            Cli::try_parse_from(["b"])
                .unwrap()
                .wants(Section::Lifecycle)
        );
        assert!(Cli::try_parse_from(["b", "--only", "nope"]).is_err());
    }
}
