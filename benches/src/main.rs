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

mod isolation;
mod lifecycle;
mod probe_cost;
mod programs;
mod report;
mod samples;
mod session;
mod settings;
mod threads;
mod workload;

use std::{path::PathBuf, process::ExitCode};

use programs::Programs;
use report::{Machine, Report};
use session::Session;
use settings::Settings;

/// Every fallible step returns this; the message says what failed.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The benchmark sections, in the order they run.
const SECTIONS: [&str; 5] = ["isolation", "lifecycle", "pairs", "functions", "threads"];

/// `--help` text.
const USAGE: &str = "\
usage: memtrack-benches [--quick] [--json FILE] [--only SECTION[,SECTION...]]

  --quick        small loops and few runs (CI smoke run, well under a minute)
  --json FILE    also write every sample as JSON to FILE
  --only LIST    run only these sections: isolation, lifecycle, pairs, functions, threads

Prints the results as Markdown on stdout, progress on stderr. Needs root (or CAP_BPF,
CAP_PERFMON and CAP_SYS_PTRACE) and gcc/g++.";

/// The command line.
struct Cli {
    /// `--quick`: [`Settings::quick`].
    quick: bool,
    /// `--json FILE`.
    json: Option<PathBuf>,
    /// The sections to run (`--only`, default all).
    only: Vec<String>,
}

/// Parses the arguments; `Err("")` asks for the usage text alone.
fn parse_cli() -> Result<Cli, String> {
    let mut cli = Cli {
        quick: false,
        json: None,
        only: SECTIONS.iter().map(|s| s.to_string()).collect(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => cli.quick = true,
            "--json" => {
                cli.json = Some(args.next().ok_or("--json needs a file name")?.into());
            }
            "--only" => {
                let list = args.next().ok_or("--only needs a list of sections")?;
                cli.only = list.split(',').map(str::to_string).collect();
                if let Some(bad) = cli.only.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    return Err(format!("unknown section {bad:?}"));
                }
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(cli)
}

/// The UTC date of `unix_secs` as YYYY-MM-DD (proleptic Gregorian calendar).
fn utc_date(unix_secs: u64) -> String {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a 400-year era.
    let days = (unix_secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Machine {
        date: utc_date(now),
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
    let wants = |section: &str| cli.only.iter().any(|s| s == section);
    eprintln!("compiling the workloads");
    let mut session = Session::new(settings.clone(), Programs::build()?);
    // The in-process trackers first: a spawned tracker that is dropped rather than
    // closed (--quick) leaves detaching work that a later close() would wait for.
    let isolation = if wants("isolation") {
        eprintln!("5. an unrelated process beside a tracker");
        Some(isolation::run(&mut session)?)
    } else {
        None
    };
    let lifecycle = if wants("lifecycle") {
        eprintln!("4. in-process tracker latency");
        lifecycle::in_process(&mut session)?
    } else {
        Vec::new()
    };
    let mut operations = Vec::new();
    if wants("pairs") {
        eprintln!("1. malloc+free pairs: untracked, Cheapest, FunctionEntry");
        operations.extend(probe_cost::malloc_free(&mut session)?);
    }
    if wants("functions") {
        eprintln!("2. calloc, realloc, posix_memalign, C++ new/delete");
        operations.extend(probe_cost::functions(&mut session)?);
    }
    let threads = if wants("threads") {
        eprintln!("3. threads");
        Some(threads::run(&mut session)?)
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
        checks: session.checks,
        probe_sites: session.probe_sites,
    })
}

/// Prints the report; exit 1 on errors or inexact counts, 2 on usage errors.
fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("memtrack-benches: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
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
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_709_251_199), "2024-02-29");
        assert_eq!(utc_date(1_735_689_600), "2025-01-01");
    }
}
