//! Benchmark 6: what in-kernel call stacks add (issue 12's "Cost, measured").
//!
//! The same loops at the bottom of a recursion deeper than any depth limit
//! (benches/programs/deep_loops.c), tracked with stacks off, at depths 8, 32 and 64, and
//! at depth 32 with the cache of walks off (every allocation walked, as a stack seen for
//! the first time is), the setups alternating round by round, so every figure compares
//! with "stacks off" measured in the same conditions. Then the 8 threads x 1,000,000 pairs run with stacks
//! on. Every run's counters are checked like every tracked run (`Session::tracked`), and
//! its stacks too ([`StackCheck`]): the loop's blocks all under the one stack of the
//! expected depth, the per-stack totals adding up to the process's (its bytes at peak
//! too), nothing lost.

use memtrack::{
    Stats,
    stacks::{ProcessStacks, StackEnd},
};

use crate::{
    BenchResult,
    probe_cost::{PerOp, pairs, record},
    session::Session,
    workload::{Counts, Output, StackSetup, Workload},
};

/// Recursion levels below `main` in the deep workload: with malloc's caller, main and
/// the C library's start-up frames, more than the deepest limit (64), so each depth
/// limit is walked whole.
pub const LEVELS: u64 = 70;

/// The depth limits measured, in frames, with the cache of walks on.
pub const DEPTHS: [u32; 3] = [8, 32, 64];

/// The depth limit also measured with the cache of walks off, in frames.
pub const UNCACHED_DEPTH: u32 = 32;

/// One setup's figures: ns per operation of each loop.
#[derive(Clone, Debug, Default)]
pub struct SetupRow {
    /// The stacks; None: stacks off.
    pub stacks: Option<StackSetup>,
    /// malloc+free pairs.
    pub pair: PerOp,
    /// malloc alone, in batches of 1000.
    pub malloc: PerOp,
    /// free alone, in batches of 1000.
    pub free: PerOp,
}

/// One tracked run's stacks against what they had to be.
#[derive(Clone, Debug)]
pub struct StackCheck {
    /// The workload's name.
    pub workload: String,
    /// The depth limit of the run.
    pub depth: u32,
    /// Blocks (and their bytes) the loop allocated and freed, all from one stack.
    pub expected: Counts,
    /// The frames and end the loop's stack must have.
    pub expected_shape: (usize, StackEnd),
    /// The stack with the most blocks: its (allocated, freed) blocks and allocated bytes.
    pub loop_stack: Counts,
    /// Its frames and end.
    pub loop_shape: Option<(usize, StackEnd)>,
    /// The process's counters.
    pub process: Counts,
    /// Sums over every stack and the lost ones.
    pub sums: Counts,
    /// Blocks whose stack was lost.
    pub lost_blocks: u64,
    /// Bytes live at the process's peak: (the stacks' shares summed, the process's
    /// `peak_live_bytes`).
    pub at_peak_bytes: (u64, u64),
    /// Whether several threads allocate at once: the at-peak shares may then miss (or
    /// add) a block another thread was charging at the instant of the peak (the book,
    /// "At peak, with threads racing"), so they are shown, not required to be equal.
    pub concurrent: bool,
}

impl StackCheck {
    /// Checks `stacks` of a run whose process counted `stats`.
    pub fn new(
        workload: &Workload,
        depth: u32,
        expected_shape: (usize, StackEnd),
        stats: &Stats,
        stacks: &ProcessStacks,
        concurrent: bool,
    ) -> StackCheck {
        let scope = &stacks.process;
        let top = scope.entries.iter().max_by_key(|e| e.counts.alloc_blocks);
        let counts = |c: &memtrack::stacks::StackCounts| Counts {
            alloc_calls: c.alloc_blocks,
            free_calls: c.freed_blocks,
            bytes_allocated: c.alloc_bytes,
        };
        let mut sums = counts(&scope.lost);
        for e in &scope.entries {
            let c = counts(&e.counts);
            sums.alloc_calls += c.alloc_calls;
            sums.free_calls += c.free_calls;
            sums.bytes_allocated += c.bytes_allocated;
        }
        StackCheck {
            workload: workload.name.clone(),
            depth,
            expected: workload.expected,
            expected_shape,
            loop_stack: top.map(|e| counts(&e.counts)).unwrap_or_default(),
            loop_shape: top.and_then(|e| {
                let s = stacks.stacks.get(e.stack as usize)?;
                Some((s.frames.len(), s.end))
            }),
            process: Counts::of(stats),
            sums,
            lost_blocks: scope.lost.alloc_blocks,
            at_peak_bytes: (scope.total().at_peak_bytes, stats.peak_live_bytes),
            concurrent,
        }
    }

    /// True when the loop's blocks are all under one stack of the expected shape, the
    /// stacks add up to the process's counters (at its peak too, unless
    /// [`concurrent`](Self::concurrent)) and none was lost.
    pub fn exact(&self) -> bool {
        self.loop_stack == self.expected
            && self.loop_shape == Some(self.expected_shape)
            && self.sums == self.process
            && (self.concurrent || self.at_peak_bytes.0 == self.at_peak_bytes.1)
            && self.lost_blocks == 0
    }
}

/// "stacks off", "stacks, depth N", or "stacks, depth N, every stack walked" (the
/// cache of walks off).
pub fn setup_name(stacks: Option<StackSetup>) -> String {
    match stacks {
        None => "stacks off".to_string(),
        Some(StackSetup { depth, cache: true }) => format!("stacks, depth {depth}"),
        Some(StackSetup {
            depth,
            cache: false,
        }) => format!("stacks, depth {depth}, every stack walked (cache off)"),
    }
}

/// Everything benchmark 6 measured.
#[derive(Clone, Debug)]
pub struct StacksResult {
    /// Recursion levels of the deep workload.
    pub levels: u64,
    /// Operations per run of the deep loops.
    pub ops: u64,
    /// Stacks off, then each depth of [`DEPTHS`].
    pub setups: Vec<SetupRow>,
    /// Threads and pairs per thread of the threaded run.
    pub threads: (u64, u64),
    /// The threaded run with stacks on: CPU time of all threads per pair, ns, and wall
    /// time per pair.
    pub threads_per_pair: PerOp,
    /// The threaded run with stacks off, the same.
    pub threads_off_per_pair: PerOp,
    /// Every run's stacks check.
    pub checks: Vec<StackCheck>,
}

impl StacksResult {
    /// True when every run's stacks were exact.
    pub fn all_exact(&self) -> bool {
        self.checks.iter().all(StackCheck::exact)
    }
}

/// A `deep_loops MODE LEVELS OPS` workload.
fn deep(session: &Session, name: &str, mode: &str, ops: u64) -> Workload {
    Workload {
        name: name.to_string(),
        program: session.programs.deep_loops.clone(),
        args: vec![mode.to_string(), LEVELS.to_string(), ops.to_string()],
        baseline_args: vec![mode.to_string(), LEVELS.to_string(), "0".to_string()],
        expected: pairs(ops),
    }
}

/// Runs `workload` once in `setup` (stacks off, or a depth), checking its stacks.
fn run_once(
    session: &mut Session,
    workload: &Workload,
    setup: Option<StackSetup>,
    checks: &mut Vec<StackCheck>,
) -> BenchResult<Output> {
    let Some(setup) = setup else {
        return session.tracked(workload, memtrack::ProbePlacement::Cheapest);
    };
    let depth = setup.depth;
    let (out, stats, stacks) = session.tracked_stacks(workload, setup)?;
    // Below `depth` frames of 70 levels the walk is always cut at the limit.
    let shape = (depth as usize, StackEnd::Truncated);
    checks.push(StackCheck::new(
        workload, depth, shape, &stats, &stacks, false,
    ));
    Ok(out)
}

/// Benchmark 6.
pub fn run(session: &mut Session) -> BenchResult<StacksResult> {
    let s = session.settings.clone();
    let ops = s.stack_ops;
    let pair = deep(session, "deep malloc+free", "malloc_free", ops);
    let split = deep(session, "deep malloc, free batched", "malloc_split", ops);
    let cached = |depth| Some(StackSetup { depth, cache: true });
    let uncached = Some(StackSetup {
        depth: UNCACHED_DEPTH,
        cache: false,
    });
    let mut setups: Vec<SetupRow> = std::iter::once(None)
        .chain(DEPTHS.map(cached))
        .chain([uncached])
        .map(|stacks| SetupRow {
            stacks,
            ..SetupRow::default()
        })
        .collect();
    let mut checks = Vec::new();
    for round in 0..s.tracked_runs {
        for row in &mut setups {
            eprintln!(
                "  deep loops, {}: round {}/{}",
                setup_name(row.stacks),
                round + 1,
                s.tracked_runs
            );
            let out = run_once(session, &pair, row.stacks, &mut checks)?;
            record(&mut row.pair, &out, "ns_per_op")?;
            let out = run_once(session, &split, row.stacks, &mut checks)?;
            record(&mut row.malloc, &out, "ns_per_malloc")?;
            record(&mut row.free, &out, "ns_per_free")?;
        }
    }
    let (t, n) = (s.threads, s.thread_ops);
    let threads = crate::threads::workload(session);
    let pairs = (t * n) as f64;
    let mut threads_per_pair = PerOp::default();
    let mut threads_off_per_pair = PerOp::default();
    let depth = memtrack::stacks::MAX_DEPTH;
    for round in 0..s.stack_thread_runs {
        eprintln!(
            "  {}, stacks off and {depth}: round {}/{}",
            threads.name,
            round + 1,
            s.stack_thread_runs
        );
        let out = session.tracked(&threads, memtrack::ProbePlacement::Cheapest)?;
        threads_off_per_pair.wall.push(out.elapsed_ns() / pairs);
        threads_off_per_pair.cpu.push(out.cpu_ns() / pairs);
        let (out, stats, stacks) =
            session.tracked_stacks(&threads, StackSetup { depth, cache: true })?;
        threads_per_pair.wall.push(out.elapsed_ns() / pairs);
        threads_per_pair.cpu.push(out.cpu_ns() / pairs);
        // worker -> start_thread -> clone3: the whole stack, shorter than the limit.
        let shape = (3, StackEnd::Complete);
        checks.push(StackCheck::new(
            &threads, depth, shape, &stats, &stacks, true,
        ));
    }
    Ok(StacksResult {
        levels: LEVELS,
        ops,
        setups,
        threads: (t, n),
        threads_per_pair,
        threads_off_per_pair,
        checks,
    })
}
