//! Benchmark 9: short processes. What `memtrack run` costs a command that does nearly
//! nothing (`/bin/true`: memtrack's fixed cost, from its start to its exit), and what
//! each process a tracked command starts costs beyond its untracked run (a shell loop
//! starting `/bin/true` N times against the same loop with no iteration, tracked and
//! untracked: the difference of differences over N).
//!
//! The `memtrack` binary measured is the one built beside this program
//! (`cargo build --release -p memtrack-cli`), or `--memtrack PATH`. Every setup runs in
//! turn within one round, so all see the same load. Each tracked loop's results must
//! hold every process it started, each with its allocator probed: a cheaper run that
//! missed a process would not count.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use memtrack::{AllocatorStatus, RunResults};

use crate::{BenchResult, samples::Samples};

/// The loop a tracked command runs: `n` processes of `/bin/true`, started by `sh`.
fn loop_script(n: usize) -> String {
    format!("i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done")
}

/// Benchmark 9's measurements (wall ms per run).
#[derive(Clone, Debug)]
pub struct ShortResult {
    /// The `memtrack` binary measured.
    pub memtrack: PathBuf,
    /// `/bin/true` alone, untracked.
    pub true_native: Samples,
    /// `memtrack run -o DIR -- /bin/true`.
    pub true_tracked: Samples,
    /// Processes the loop starts.
    pub processes: usize,
    /// The loop of `processes` untracked, and with no iteration.
    pub loop_native: (Samples, Samples),
    /// The same under `memtrack run`.
    pub loop_tracked: (Samples, Samples),
    /// Tracked loops whose results held every process, probed (of the tracked loops
    /// run).
    pub complete_runs: (usize, usize),
}

impl ShortResult {
    /// Whether every tracked loop recorded every process it started.
    pub fn all_exact(&self) -> bool {
        self.complete_runs.0 == self.complete_runs.1
    }

    /// The added wall time per extra process, ms: from the medians.
    pub fn per_process_ms(&self) -> f64 {
        let tracked = self.loop_tracked.0.median() - self.loop_tracked.1.median();
        let native = self.loop_native.0.median() - self.loop_native.1.median();
        (tracked - native) / self.processes as f64
    }
}

/// The `memtrack` binary beside this benchmark program (the same cargo profile).
pub fn default_memtrack() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("memtrack")))
        .unwrap_or_else(|| PathBuf::from("memtrack"))
}

/// Runs `command` to its end, its output discarded: wall ms. Fails when it does.
fn timed(command: &mut Command) -> BenchResult<f64> {
    let start = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        return Err(format!("{command:?} failed ({status})").into());
    }
    Ok(ms)
}

/// `memtrack run -o dir --replace -- args`.
fn tracked(memtrack: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(memtrack);
    command
        .args(["run", "-o"])
        .arg(dir)
        .args(["--replace", "--"])
        .args(args);
    command
}

/// Whether the results in `dir` hold `expected` processes, each with its allocator
/// probed.
fn complete(dir: &Path, expected: usize) -> BenchResult<bool> {
    let results = RunResults::read_dir(dir)?;
    Ok(results.processes.len() == expected
        && results
            .processes
            .iter()
            .all(|p| matches!(p.allocator, AllocatorStatus::Probed)))
}

/// Runs benchmark 9: `rounds` rounds of every setup, loops of `processes`.
pub fn run(memtrack: &Path, rounds: usize, processes: usize) -> BenchResult<ShortResult> {
    if !memtrack.is_file() {
        return Err(format!(
            "no memtrack binary at {}: build it first (cargo build --release -p \
             memtrack-cli) or pass --memtrack PATH",
            memtrack.display()
        )
        .into());
    }
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("results");
    let mut r = ShortResult {
        memtrack: memtrack.to_path_buf(),
        true_native: Samples::new(),
        true_tracked: Samples::new(),
        processes,
        loop_native: (Samples::new(), Samples::new()),
        loop_tracked: (Samples::new(), Samples::new()),
        complete_runs: (0, 0),
    };
    let (full, empty) = (loop_script(processes), loop_script(0));
    for _ in 0..rounds {
        r.true_native.push(timed(&mut Command::new("/bin/true"))?);
        r.true_tracked
            .push(timed(&mut tracked(memtrack, &out, &["/bin/true"]))?);
        r.loop_native
            .0
            .push(timed(Command::new("sh").args(["-c", &full]))?);
        r.loop_native
            .1
            .push(timed(Command::new("sh").args(["-c", &empty]))?);
        r.loop_tracked
            .0
            .push(timed(&mut tracked(memtrack, &out, &["sh", "-c", &full]))?);
        r.complete_runs.1 += 1;
        if complete(&out, processes + 1)? {
            r.complete_runs.0 += 1;
        }
        r.loop_tracked
            .1
            .push(timed(&mut tracked(memtrack, &out, &["sh", "-c", &empty]))?);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_starts_n_processes() {
        let out = Command::new("sh")
            .args(["-c", &format!("{}; echo $i", loop_script(3))])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3");
    }
}
