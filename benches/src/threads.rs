//! Benchmark 3: many threads allocating at once, tracked (Cheapest) against untracked.
//!
//! The probes of all threads update the same per-process counters and live-block map;
//! this shows what that costs in wall time, and in CPU time per pair against the
//! single-threaded loop (contention shows there, and other load on the machine does
//! not), and that 8 million concurrent calls are still counted exactly (the check goes
//! through `Session::tracked`).

use memtrack::ProbePlacement;

use crate::{
    BenchResult,
    samples::Samples,
    session::Session,
    workload::{Counts, Workload, loop_bytes},
};

/// Wall times of the threaded workload.
#[derive(Clone, Debug)]
pub struct ThreadsResult {
    /// Threads.
    pub threads: u64,
    /// malloc+free pairs per thread.
    pub ops_per_thread: u64,
    /// Untracked wall time of the timed region, ns.
    pub untracked_wall_ns: Samples,
    /// Tracked (Cheapest) wall time, ns.
    pub tracked_wall_ns: Samples,
    /// Untracked CPU time of all threads over the timed region, ns.
    pub untracked_cpu_ns: Samples,
    /// Tracked (Cheapest) CPU time of all threads, ns.
    pub tracked_cpu_ns: Samples,
}

/// The `threads T N` workload of the session's settings: T threads of N malloc+free
/// pairs each (benchmark 5, and benchmark 6 with stacks).
pub(crate) fn workload(session: &Session) -> Workload {
    let (t, n) = (session.settings.threads, session.settings.thread_ops);
    Workload {
        name: format!("{t} threads x malloc+free"),
        program: session.programs.threads.clone(),
        args: vec![t.to_string(), n.to_string()],
        baseline_args: vec![t.to_string(), "0".to_string()],
        expected: Counts {
            alloc_calls: t * n,
            free_calls: t * n,
            bytes_allocated: t * loop_bytes(n, 64),
        },
    }
}

/// Runs `threads T N` untracked and tracked, alternating.
pub fn run(session: &mut Session) -> BenchResult<ThreadsResult> {
    let s = session.settings.clone();
    let (t, n) = (s.threads, s.thread_ops);
    let workload = workload(session);
    let mut result = ThreadsResult {
        threads: t,
        ops_per_thread: n,
        untracked_wall_ns: Samples::new(),
        tracked_wall_ns: Samples::new(),
        untracked_cpu_ns: Samples::new(),
        tracked_cpu_ns: Samples::new(),
    };
    let rounds = s.native_runs.max(s.tracked_runs);
    for round in 0..rounds {
        eprintln!("  {}: round {}/{rounds}", workload.name, round + 1);
        if round < s.native_runs {
            let out = session.native(&workload)?;
            result.untracked_wall_ns.push(out.elapsed_ns());
            result.untracked_cpu_ns.push(out.cpu_ns());
        }
        if round < s.tracked_runs {
            let out = session.tracked(&workload, ProbePlacement::Cheapest)?;
            result.tracked_wall_ns.push(out.elapsed_ns());
            result.tracked_cpu_ns.push(out.cpu_ns());
        }
    }
    Ok(result)
}
