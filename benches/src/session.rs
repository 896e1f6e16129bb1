//! The state one benchmark run shares across its benchmarks: settings, the compiled
//! programs, each program's baseline counts, every count check and every spawned
//! tracker's latencies.
//!
//! Tracked runs go through [`Session::tracked`], which checks each run's counters
//! against "baseline + what the loop must add" so no figure is reported from a run that
//! did not count exactly.

use std::collections::HashMap;

use memtrack::{ProbeInfo, ProbePlacement, Stats, stacks::ProcessStacks, timeline::Timeline};

use crate::{
    BenchResult,
    in_process::TrackerTimings,
    programs::Programs,
    settings::Settings,
    workload::{self, Counts, Output, SpawnPhases, StackSetup, Workload},
};

/// One tracked run's counters against what they had to be.
#[derive(Clone, Debug)]
pub struct CountCheck {
    /// The workload's name.
    pub workload: String,
    /// The probe placement of the run.
    pub placement: ProbePlacement,
    /// What the loop had to add above the baseline.
    pub expected: Counts,
    /// What the tracker counted above the baseline.
    pub measured: Counts,
    /// `Stats::lost_events` of the run.
    pub lost_events: u64,
    /// Events the tracker could not attribute to a process.
    pub unattributed_lost_events: u64,
    /// Processes the tracker saw (must be 1).
    pub processes: usize,
}

impl CountCheck {
    /// True when every counter is exact and nothing was lost.
    pub fn exact(&self) -> bool {
        self.expected == self.measured
            && self.lost_events == 0
            && self.unattributed_lost_events == 0
            && self.processes == 1
    }
}

/// Shared state of one benchmark run.
pub struct Session {
    /// Sizes and repetitions.
    pub settings: Settings,
    /// The compiled workloads.
    pub programs: Programs,
    baselines: HashMap<(std::path::PathBuf, Vec<String>), Counts>,
    /// Every tracked run's count check, in order.
    pub checks: Vec<CountCheck>,
    /// Every spawned tracker's latencies, in order.
    pub spawn_phases: Vec<SpawnPhases>,
    /// Every in-process tracker's latencies, in order.
    pub tracker_timings: Vec<TrackerTimings>,
    /// The probe sites of every function a tracked workload called, per placement
    /// (first seen; the same site in every run).
    pub probe_sites: Vec<(ProbePlacement, ProbeInfo)>,
    /// `TrackerBuilder::preallocated_live_blocks` of the tracked runs (None: the
    /// default).
    pub preallocated_live_blocks: Option<u32>,
    /// What the tracked runs keep of the memory over time (the default: everything).
    pub timeline: workload::TimelineSetup,
}

impl Session {
    /// A session with nothing measured yet.
    pub fn new(settings: Settings, programs: Programs) -> Session {
        Session {
            settings,
            programs,
            baselines: HashMap::new(),
            checks: Vec::new(),
            spawn_phases: Vec::new(),
            tracker_timings: Vec::new(),
            probe_sites: Vec::new(),
            preallocated_live_blocks: None,
            timeline: workload::TimelineSetup::On,
        }
    }

    /// Runs the workload without a tracker.
    pub fn native(&self, workload: &Workload) -> BenchResult<Output> {
        workload::run_native(&workload.program, &workload.args)
    }

    /// Runs the workload's program with `args` under a spawned tracker (see
    /// [`workload::run_tracked`]) and keeps the tracker's latencies.
    fn run(
        &mut self,
        workload: &Workload,
        args: &[String],
        placement: ProbePlacement,
        counting: bool,
        stacks: Option<StackSetup>,
    ) -> BenchResult<workload::TrackedRun> {
        let setup = workload::TrackerSetup {
            placement,
            counting,
            stacks,
            preallocated_live_blocks: self.preallocated_live_blocks,
            timeline: self.timeline,
        };
        let run = workload::run_tracked(
            &workload.program,
            args,
            setup,
            &self.programs.stdout_file(),
            self.settings.close_spawned,
        )?;
        self.spawn_phases.push(run.phases);
        Ok(run)
    }

    /// The counters of the workload's program doing everything but its loop (measured
    /// once per program and argument list, with the default placement: counts do not
    /// depend on placement, and the checks of both placements against one baseline
    /// confirm that).
    fn baseline(&mut self, workload: &Workload) -> BenchResult<Counts> {
        let key = (workload.program.clone(), workload.baseline_args.clone());
        if let Some(counts) = self.baselines.get(&key) {
            return Ok(*counts);
        }
        let run = self.run(
            workload,
            &workload.baseline_args,
            ProbePlacement::Cheapest,
            true,
            None,
        )?;
        if run.stats.lost_events != 0 || run.unattributed_lost_events != 0 {
            return Err(format!("the baseline run of {} lost events", workload.name).into());
        }
        let counts = Counts::of(&run.stats);
        self.baselines.insert(key, counts);
        Ok(counts)
    }

    /// Runs the workload under a spawned tracker whose counting stays off (probes
    /// attached, programs returning at once), checks that it counted nothing, and
    /// returns the program's output.
    pub fn tracked_counting_off(&mut self, workload: &Workload) -> BenchResult<Output> {
        let run = self.run(
            workload,
            &workload.args,
            ProbePlacement::Cheapest,
            false,
            None,
        )?;
        let s = &run.stats;
        if s.alloc_calls + s.free_calls + s.failed_allocs + s.unmatched_frees + s.lost_events != 0 {
            return Err(format!("{} counted while counting was off: {s:?}", workload.name).into());
        }
        Ok(run.output)
    }

    /// Runs the workload under a spawned tracker with `placement`, records its count
    /// check and latencies, and returns what it printed.
    pub fn tracked(
        &mut self,
        workload: &Workload,
        placement: ProbePlacement,
    ) -> BenchResult<Output> {
        Ok(self.tracked_run(workload, placement, None)?.output)
    }

    /// [`Session::tracked`] (Cheapest) with stacks on as `stacks` says: also returns
    /// the command's counters and per-stack counters.
    pub fn tracked_stacks(
        &mut self,
        workload: &Workload,
        stacks: StackSetup,
    ) -> BenchResult<(Output, Stats, ProcessStacks)> {
        let run = self.tracked_run(workload, ProbePlacement::Cheapest, Some(stacks))?;
        let stacks = run
            .stacks
            .ok_or_else(|| format!("{}: the tracker kept no stacks", workload.name))?;
        Ok((run.output, run.stats, stacks))
    }

    /// [`Session::tracked`] (Cheapest) with the timeline as `setup` says: also returns
    /// the command's counters and its timeline (None when `setup` keeps none).
    pub fn tracked_timeline(
        &mut self,
        workload: &Workload,
        setup: workload::TimelineSetup,
    ) -> BenchResult<(Output, Stats, Option<Timeline>)> {
        let before = std::mem::replace(&mut self.timeline, setup);
        let run = self.tracked_run(workload, ProbePlacement::Cheapest, None);
        self.timeline = before;
        let run = run?;
        Ok((run.output, run.stats, run.timeline))
    }

    /// A tracked run of the workload, with its count check recorded.
    fn tracked_run(
        &mut self,
        workload: &Workload,
        placement: ProbePlacement,
        stacks: Option<StackSetup>,
    ) -> BenchResult<workload::TrackedRun> {
        let baseline = self.baseline(workload)?;
        let run = self.run(workload, &workload.args, placement, true, stacks)?;
        for probe in &run.probes {
            let called = run
                .stats
                .functions
                .get(&probe.function)
                .is_some_and(|f| f.calls > 0);
            let known = self.probe_sites.iter().any(|(p, known)| {
                *p == placement
                    && known.object == probe.object
                    && known.file_offset == probe.file_offset
            });
            if called && !known {
                self.probe_sites.push((placement, probe.clone()));
            }
        }
        self.checks.push(CountCheck {
            workload: workload.name.clone(),
            placement,
            expected: workload.expected,
            measured: Counts::of(&run.stats).minus(&baseline),
            lost_events: run.stats.lost_events,
            unattributed_lost_events: run.unattributed_lost_events,
            processes: run.processes,
        });
        Ok(run)
    }
}
