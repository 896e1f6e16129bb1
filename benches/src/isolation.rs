//! Benchmark 5: an unrelated process while this process has a tracker attached and
//! counting.
//!
//! memtrack scopes its uprobes to the tracked process, so another program mapping the
//! same libc must run at native speed (a probe that fired there, even one filtered out
//! in BPF, would cost it ~100x; ../shared/probe-costs.md). The unrelated loop runs
//! natively before the tracker exists and after it is gone, and in between while it
//! counts; the ratio is beside / native. The tracker's own latencies are kept for
//! benchmark 4 (one in-process tracker fewer to make and drop).

use crate::{
    BenchResult,
    lifecycle::{self, End},
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
}

/// Runs the unrelated loop natively, beside a counting tracker, and natively again.
pub fn run(session: &mut Session) -> BenchResult<IsolationResult> {
    let s = session.settings.clone();
    let program = session.programs.alloc_loops.clone();
    let args = ["malloc_free".to_string(), s.pairs.to_string()];
    let run_loop = || workload::run_native(&program, &args).map(|o| o.ns_per_op());
    let mut native = Samples::new();
    let half = s.isolation_runs.div_ceil(2);
    for _ in 0..half {
        native.push(run_loop()?);
    }
    eprintln!("  unrelated loop beside a counting in-process tracker");
    let ((beside, tracker_counted_allocs), timings) = lifecycle::drive(End::Close, |tracker| {
        let beside = (0..s.isolation_runs)
            .map(|_| run_loop())
            .collect::<BenchResult<Samples>>()?;
        Ok((beside, tracker.collect()?.alloc_calls))
    })?;
    session.tracker_timings.push(timings);
    for _ in half..s.isolation_runs {
        native.push(run_loop()?);
    }
    Ok(IsolationResult {
        pairs: s.pairs,
        native,
        beside,
        tracker_counted_allocs,
    })
}
