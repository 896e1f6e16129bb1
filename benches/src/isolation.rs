//! Benchmark 5: an unrelated process while this process has a tracker attached and
//! counting.
//!
//! memtrack scopes its uprobes to the tracked process, so another program mapping the
//! same libc must run at native speed (a probe that fired there, even one filtered out
//! in BPF, would cost it ~100x; docs/probe-costs.md). The unrelated loops run
//! natively before the tracker exists and after it is gone, and in between while it
//! counts; the ratio is beside / native. Two loops: malloc+free pairs (the uprobes), and
//! a system call (`getppid`), which every process pays for while any tracker exists:
//! the mmap/munmap/brk counter is a raw tracepoint on every syscall's exit. The
//! tracker's own latencies are kept for benchmark 4 (one in-process tracker fewer to
//! make and drop).

use memtrack::{Scope, Tracker};

use crate::{
    BenchResult,
    in_process::{self, End},
    samples::Samples,
    session::Session,
    workload,
};

/// The unrelated loop's ns per malloc+free pair.
#[derive(Clone, Debug)]
pub struct IsolationResult {
    /// Pairs per run.
    pub pairs: u64,
    /// Without any tracker (runs before and after).
    pub native: Samples,
    /// While an in-process tracker was attached and counting in the benchmark process.
    pub beside: Samples,
    /// Allocations the tracker counted in the benchmark process meanwhile (proof that
    /// it was live).
    pub tracker_counted_allocs: u64,
    /// The unrelated syscall loop's ns per `getppid`, without any tracker.
    pub syscall_native: Samples,
    /// The same beside the counting tracker.
    pub syscall_beside: Samples,
    /// The same beside a counting tracker made with `count_syscalls(false)`.
    pub syscall_beside_uncounted: Samples,
    /// Page faults per run of the unrelated fault loop.
    pub faults: u64,
    /// The unrelated fault loop's ns per page fault, without any tracker.
    pub faults_native: Samples,
    /// The same beside the counting tracker (its timeline's `kmem:rss_stat` program runs
    /// at every fault of every process).
    pub faults_beside: Samples,
    /// The same beside a counting tracker made with `rss(false)`.
    pub faults_beside_no_rss: Samples,
}

/// Runs the unrelated loop natively, beside a counting tracker, and natively again.
pub fn run(session: &mut Session) -> BenchResult<IsolationResult> {
    let s = session.settings.clone();
    let program = session.programs.alloc_loops.clone();
    let pairs = ["malloc_free".to_string(), s.pairs.to_string()];
    let syscalls = ["getppid".to_string(), s.pairs.to_string()];
    let faults = ["page_faults".to_string(), s.isolation_faults.to_string()];
    let run_loop = |args: &[String]| workload::run_native(&program, args).map(|o| o.ns_per_op());
    let (mut native, mut syscall_native, mut faults_native) =
        (Samples::new(), Samples::new(), Samples::new());
    let half = s.isolation_runs.div_ceil(2);
    let mut run_native = || -> BenchResult<()> {
        native.push(run_loop(&pairs)?);
        syscall_native.push(run_loop(&syscalls)?);
        faults_native.push(run_loop(&faults)?);
        Ok(())
    };
    for _ in 0..half {
        run_native()?;
    }
    eprintln!("  unrelated loops beside a counting in-process tracker");
    let ((beside, syscall_beside, faults_beside, tracker_counted_allocs), timings) =
        in_process::drive(End::Close, |tracker| {
            let (mut beside, mut syscall_beside, mut faults_beside) =
                (Samples::new(), Samples::new(), Samples::new());
            for _ in 0..s.isolation_runs {
                beside.push(run_loop(&pairs)?);
                syscall_beside.push(run_loop(&syscalls)?);
                faults_beside.push(run_loop(&faults)?);
            }
            let counted = tracker.collect()?.alloc_calls;
            Ok((beside, syscall_beside, faults_beside, counted))
        })?;
    session.tracker_timings.push(timings);
    eprintln!("  unrelated syscall loop beside a tracker that does not count syscalls");
    let syscall_beside_uncounted = {
        let mut tracker = Tracker::builder()
            .count_syscalls(false)
            .build(Scope::Process)?;
        tracker.start()?;
        let samples = (0..s.isolation_runs)
            .map(|_| run_loop(&syscalls))
            .collect::<BenchResult<Samples>>()?;
        tracker.stop()?;
        tracker.close();
        samples
    };
    eprintln!("  unrelated page faults beside a tracker made with rss(false)");
    let faults_beside_no_rss = {
        let mut tracker = Tracker::builder().rss(false).build(Scope::Process)?;
        tracker.start()?;
        let samples = (0..s.isolation_runs)
            .map(|_| run_loop(&faults))
            .collect::<BenchResult<Samples>>()?;
        tracker.stop()?;
        tracker.close();
        samples
    };
    let mut run_native = || -> BenchResult<()> {
        native.push(run_loop(&pairs)?);
        syscall_native.push(run_loop(&syscalls)?);
        faults_native.push(run_loop(&faults)?);
        Ok(())
    };
    for _ in half..s.isolation_runs {
        run_native()?;
    }
    Ok(IsolationResult {
        pairs: s.pairs,
        native,
        beside,
        tracker_counted_allocs,
        syscall_native,
        syscall_beside,
        syscall_beside_uncounted,
        faults: s.isolation_faults,
        faults_native,
        faults_beside,
        faults_beside_no_rss,
    })
}
