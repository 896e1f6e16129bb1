//! Benchmarks 1 and 2: what the probes add to each allocator call.
//!
//! Each workload runs untracked and as a command under a spawned tracker; the runs of
//! the different setups alternate (untracked, Cheapest, FunctionEntry, untracked, ...)
//! so drift of the machine (frequency, neighbours) affects them alike. The malloc+free
//! pair also runs with counting off in the same rounds as its Cheapest runs, one of each
//! per round with the order alternating, so each round gives a ratio of two runs made
//! side by side. Every tracked run's counters are checked against the baseline (see
//! `Session::tracked`).

use memtrack::ProbePlacement;

use crate::{
    BenchResult,
    samples::Samples,
    session::Session,
    workload::{Counts, Output, Workload, loop_bytes},
};

/// ns per operation of one setup over its runs, by wall clock and by CPU time.
#[derive(Clone, Debug, Default)]
pub struct PerOp {
    /// Wall time (CLOCK_MONOTONIC) per operation.
    pub wall: Samples,
    /// CPU time of the process (user + kernel, where probe handlers run) per operation;
    /// unlike wall time, not inflated when other work shares the CPUs.
    pub cpu: Samples,
}

/// One line of the per-operation tables: ns per operation in each setup.
#[derive(Clone, Debug)]
pub struct OpRow {
    /// What one operation is, e.g. "malloc+free pair".
    pub name: String,
    /// Operations per run.
    pub ops: u64,
    /// Untracked.
    pub untracked: PerOp,
    /// Tracked with `ProbePlacement::Cheapest`.
    pub cheapest: PerOp,
    /// Tracked with `ProbePlacement::FunctionEntry`, when measured.
    pub function_entry: Option<PerOp>,
    /// Cheapest probes attached but counting off, when measured.
    pub counting_off: Option<PerOp>,
    /// The Cheapest runs against the counting-off runs round by round, when measured.
    pub floor_rounds: Option<FloorRounds>,
}

/// Cheapest counting against Cheapest with counting off, one run of each per round.
#[derive(Clone, Debug, Default)]
pub struct FloorRounds {
    /// Per round, the counting run's ns per operation over the counting-off run's, by
    /// wall clock and by CPU time, in the order measured.
    pub ratio: PerOp,
    /// Per round, whether the counting run went first.
    pub counting_first: Vec<bool>,
}

/// Whether round `round` (from 0) runs counting before counting off: every other round,
/// so neither setup always goes first.
pub(crate) fn counting_first(round: usize) -> bool {
    round.is_multiple_of(2)
}

/// An `alloc_loops MODE OPS` workload.
pub(crate) fn alloc_loop(
    session: &Session,
    name: &str,
    mode: &str,
    ops: u64,
    expected: Counts,
) -> Workload {
    Workload {
        name: name.to_string(),
        program: session.programs.alloc_loops.clone(),
        args: vec![mode.to_string(), ops.to_string()],
        // The mode only selects the loop; with 0 operations every mode does the same.
        baseline_args: vec!["malloc_free".to_string(), "0".to_string()],
        expected,
    }
}

/// `ops` blocks of 64 + i % 100 bytes, each freed.
pub(crate) fn pairs(ops: u64) -> Counts {
    Counts {
        alloc_calls: ops,
        free_calls: ops,
        bytes_allocated: loop_bytes(ops, 64),
    }
}

/// Adds one run's `key` field (wall) and `cpu_<key>` field (CPU) to `per_op`.
pub(crate) fn record(per_op: &mut PerOp, out: &Output, key: &str) -> BenchResult<()> {
    per_op.wall.push(out.get(key)?);
    per_op.cpu.push(out.get(&format!("cpu_{key}"))?);
    Ok(())
}

/// Runs `workload` untracked, with Cheapest and (if `function_entry`) FunctionEntry,
/// alternating, and returns one row per `(row name, output field)` of `fields`. With
/// `floor_rounds` > 0, the first `floor_rounds` rounds also run Cheapest with counting
/// off, next to the round's Cheapest run (the order alternating, see
/// [`counting_first`]); such a round always has a Cheapest run.
fn measure(
    session: &mut Session,
    workload: &Workload,
    ops: u64,
    fields: &[(&str, &str)],
    function_entry: bool,
    floor_rounds: usize,
) -> BenchResult<Vec<OpRow>> {
    let s = session.settings.clone();
    let fe_runs = if function_entry {
        s.function_entry_runs
    } else {
        0
    };
    let cheapest_runs = s.tracked_runs.max(floor_rounds);
    let rounds = s.native_runs.max(cheapest_runs).max(fe_runs);
    let paired = floor_rounds > 0;
    let mut rows: Vec<OpRow> = fields
        .iter()
        .map(|(name, _)| OpRow {
            name: name.to_string(),
            ops,
            untracked: PerOp::default(),
            cheapest: PerOp::default(),
            function_entry: function_entry.then(PerOp::default),
            counting_off: paired.then(PerOp::default),
            floor_rounds: paired.then(FloorRounds::default),
        })
        .collect();
    for round in 0..rounds {
        eprintln!("  {}: round {}/{rounds}", workload.name, round + 1);
        if round < s.native_runs {
            let out = session.native(workload)?;
            for (row, (_, key)) in rows.iter_mut().zip(fields) {
                record(&mut row.untracked, &out, key)?;
            }
        }
        if round < floor_rounds {
            let first = counting_first(round);
            eprintln!(
                "    Cheapest, counting and counting off ({} first)",
                if first { "counting" } else { "counting off" }
            );
            let (counting, off) = if first {
                let counting = session.tracked(workload, ProbePlacement::Cheapest)?;
                (counting, session.tracked_counting_off(workload)?)
            } else {
                let off = session.tracked_counting_off(workload)?;
                (session.tracked(workload, ProbePlacement::Cheapest)?, off)
            };
            for (row, (_, key)) in rows.iter_mut().zip(fields) {
                record(&mut row.cheapest, &counting, key)?;
                if let Some(per_op) = &mut row.counting_off {
                    record(per_op, &off, key)?;
                }
                if let Some(floor) = &mut row.floor_rounds {
                    let cpu_key = format!("cpu_{key}");
                    floor.ratio.wall.push(counting.get(key)? / off.get(key)?);
                    floor
                        .ratio
                        .cpu
                        .push(counting.get(&cpu_key)? / off.get(&cpu_key)?);
                    floor.counting_first.push(first);
                }
            }
        } else if round < cheapest_runs {
            let out = session.tracked(workload, ProbePlacement::Cheapest)?;
            for (row, (_, key)) in rows.iter_mut().zip(fields) {
                record(&mut row.cheapest, &out, key)?;
            }
        }
        if round < fe_runs {
            let out = session.tracked(workload, ProbePlacement::FunctionEntry)?;
            for (row, (_, key)) in rows.iter_mut().zip(fields) {
                if let Some(per_op) = &mut row.function_entry {
                    record(per_op, &out, key)?;
                }
            }
        }
    }
    Ok(rows)
}

/// Benchmark 1: malloc+free pairs in all three setups and with counting off (in
/// `floor_rounds` rounds beside the Cheapest runs), then (unless `split_ops` is 0) the
/// same calls batched (1000 mallocs, then 1000 frees) to show what each function's
/// probes cost.
pub fn malloc_free(session: &mut Session) -> BenchResult<Vec<OpRow>> {
    let n = session.settings.pairs;
    let pair = alloc_loop(session, "malloc+free", "malloc_free", n, pairs(n));
    // The same probes with counting off, in the same rounds as the Cheapest runs: what
    // the traps and the return probe cost without the BPF programs' accounting (e.g.
    // outside `memtrack run` regions).
    let floor_rounds = session.settings.floor_rounds;
    let mut rows = measure(
        session,
        &pair,
        n,
        &[("malloc+free pair", "ns_per_op")],
        true,
        floor_rounds,
    )?;
    let n = session.settings.split_ops;
    if n == 0 {
        return Ok(rows);
    }
    let split = alloc_loop(session, "malloc, free batched", "malloc_split", n, pairs(n));
    rows.extend(measure(
        session,
        &split,
        n,
        &[
            ("malloc alone (batches of 1000)", "ns_per_malloc"),
            ("free alone (batches of 1000)", "ns_per_free"),
        ],
        true,
        0,
    )?);
    Ok(rows)
}

/// Benchmark 2: the other allocation functions, untracked and with Cheapest.
pub fn functions(session: &mut Session) -> BenchResult<Vec<OpRow>> {
    let n = session.settings.function_ops;
    let workloads = [
        alloc_loop(session, "calloc+free", "calloc_free", n, pairs(n)),
        alloc_loop(
            session,
            "malloc+realloc+free",
            "realloc_grow",
            n,
            // realloc is one new block and one release of the old one.
            Counts {
                alloc_calls: 2 * n,
                free_calls: 2 * n,
                bytes_allocated: loop_bytes(n, 64) + loop_bytes(n, 64 + 448),
            },
        ),
        alloc_loop(session, "posix_memalign+free", "memalign_free", n, pairs(n)),
        Workload {
            name: "C++ new[]+delete[]".to_string(),
            program: session.programs.new_delete.clone(),
            args: vec![n.to_string()],
            baseline_args: vec!["0".to_string()],
            expected: pairs(n),
        },
    ];
    let names = [
        "calloc+free pair",
        "malloc + realloc (grow) + free",
        "posix_memalign(64)+free pair",
        "C++ new char[]+delete[] pair",
    ];
    let mut rows = Vec::new();
    for (workload, name) in workloads.iter().zip(names) {
        rows.extend(measure(
            session,
            workload,
            n,
            &[(name, "ns_per_op")],
            false,
            0,
        )?);
    }
    Ok(rows)
}

/// Blocks held live through the loops of [`live_on_demand`].
const HELD: u64 = 20_000;

/// Benchmark 7: the cost per call of blocks whose live-block entries are allocated on
/// demand (`TrackerBuilder::preallocated_live_blocks`). The pair loop and the batched
/// loop run with 20,000 blocks held live throughout, tracked twice: with the default
/// 524,288 preallocated entries (every block preallocated) and with 1,024 (the held
/// blocks and the loop's blocks in the on-demand map). Each row's tracked figure is one
/// setup's; the untracked runs are shared.
pub fn live_on_demand(session: &mut Session) -> BenchResult<Vec<OpRow>> {
    let held = |mut counts: Counts| {
        // HOLD blocks of 32 bytes, and the calloc'd array of their pointers.
        counts.alloc_calls += HELD + 1;
        counts.free_calls += HELD + 1;
        counts.bytes_allocated += HELD * 32 + HELD * 8;
        counts
    };
    let with_hold = |mut w: Workload| {
        w.args.push(HELD.to_string());
        w
    };
    let n = session.settings.pairs;
    let m = session.settings.split_ops.max(100_000);
    let workloads = [
        (
            with_hold(alloc_loop(
                session,
                "malloc+free, blocks held",
                "malloc_free",
                n,
                held(pairs(n)),
            )),
            n,
            vec![("malloc+free pair", "ns_per_op")],
        ),
        (
            with_hold(alloc_loop(
                session,
                "malloc, free batched, blocks held",
                "malloc_split",
                m,
                held(pairs(m)),
            )),
            m,
            vec![
                ("malloc alone (batches of 1000)", "ns_per_malloc"),
                ("free alone (batches of 1000)", "ns_per_free"),
            ],
        ),
    ];
    let setups = [
        (None, "preallocated (524,288)"),
        (Some(1024), "on demand (1,024 preallocated)"),
    ];
    let mut rows = Vec::new();
    for (workload, ops, fields) in &workloads {
        let mut by_setup: Vec<Vec<OpRow>> = Vec::new();
        for (round, (blocks, _)) in setups.iter().enumerate() {
            session.preallocated_live_blocks = *blocks;
            let mut measured = measure(session, workload, *ops, fields, false, 0);
            session.preallocated_live_blocks = None;
            if round > 0 {
                // One set of untracked runs is enough.
                if let Ok(rows) = &mut measured {
                    for (row, first) in rows.iter_mut().zip(&by_setup[0]) {
                        row.untracked = first.untracked.clone();
                    }
                }
            }
            by_setup.push(measured?);
        }
        for (i, (name, _)) in fields.iter().enumerate() {
            for (setup, (_, label)) in by_setup.iter().zip(&setups) {
                let mut row = setup[i].clone();
                row.name = format!("{name}, 20,000 blocks held, {label}");
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_rounds_alternate_which_run_goes_first() {
        let order: Vec<bool> = (0..5).map(counting_first).collect();
        assert_eq!(order, [true, false, true, false, true]);
    }
}
