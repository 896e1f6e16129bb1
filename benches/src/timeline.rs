//! Benchmark 8: what the timeline adds (issue 33's "Cost, measured").
//!
//! The same loops tracked with the timeline off (`TrackerBuilder::timeline(false)`),
//! on without resident memory (`rss(false)`) and on with it (the default), the setups
//! alternating round by round so each compares with "timeline off" measured in the same
//! conditions: malloc+free pairs and the batched malloc-then-free split (the heap
//! series: a clock read and a per-CPU bucket per event), and a loop of page faults
//! (the `kmem:rss_stat` tracepoint firing in the tracked process). Every tracked run's
//! counters are checked like every tracked run, and its timeline too ([`TimelineCheck`]):
//! its highest bucket is the process's peak, its last bucket ends at the bytes live at
//! exit, no bucket was lost. What the tracepoint costs processes memtrack does not
//! track is benchmark 5's (isolation.rs).

use memtrack::{Stats, timeline::Timeline};

use crate::{
    BenchResult,
    probe_cost::{PerOp, alloc_loop, pairs, record},
    session::Session,
    workload::{Counts, TimelineSetup, Workload},
};

/// The setups, in the order each round runs them.
pub const SETUPS: [TimelineSetup; 3] =
    [TimelineSetup::Off, TimelineSetup::NoRss, TimelineSetup::On];

/// One setup's figures: ns per operation of each loop.
#[derive(Clone, Debug)]
pub struct SetupRow {
    /// The setup.
    pub setup: TimelineSetup,
    /// malloc+free pairs.
    pub pair: PerOp,
    /// malloc alone, in batches of 1000.
    pub malloc: PerOp,
    /// free alone, in batches of 1000.
    pub free: PerOp,
    /// One page fault (a new page of an anonymous mapping touched).
    pub fault: PerOp,
}

/// One tracked run's timeline against its counters.
#[derive(Clone, Debug)]
pub struct TimelineCheck {
    /// The workload's name.
    pub workload: String,
    /// The run's setup.
    pub setup: TimelineSetup,
    /// Its buckets and their width, ns (0, 0 without a timeline).
    pub buckets: (usize, u64),
    /// The highest bucket's highest live heap bytes, and the process's
    /// `peak_live_bytes`.
    pub max_and_peak: (u64, u64),
    /// The last bucket's live heap bytes at its end, and the process's `live_bytes`.
    pub end_and_live: (u64, u64),
    /// Buckets the kernel could not hand over (ring buffer full).
    pub lost_buckets: u64,
    /// Whether the buckets carry resident memory.
    pub rss: bool,
    /// Whether they carry mapped bytes.
    pub mapped: bool,
    /// Whether there was a timeline at all.
    pub present: bool,
    /// What [`Timeline::validate`] said, if it refused the timeline.
    pub invalid: Option<String>,
}

impl TimelineCheck {
    /// Checks the `timeline` of a run in `setup` whose process counted `stats`.
    pub fn new(
        workload: &Workload,
        setup: TimelineSetup,
        stats: &Stats,
        timeline: Option<&Timeline>,
    ) -> TimelineCheck {
        let peak = stats.peak_live_bytes;
        let any = |f: fn(&memtrack::timeline::Bucket) -> bool| {
            timeline.is_some_and(|t| t.buckets.iter().any(f))
        };
        TimelineCheck {
            workload: workload.name.clone(),
            setup,
            buckets: timeline.map_or((0, 0), |t| (t.buckets.len(), t.bucket_ns)),
            max_and_peak: (timeline.map_or(0, Timeline::max_bytes), peak),
            end_and_live: (timeline.map_or(0, Timeline::end_bytes), stats.live_bytes),
            lost_buckets: timeline.map_or(0, |t| t.lost_buckets),
            rss: any(|b| b.rss_max_bytes.is_some()),
            mapped: any(|b| b.mapped_max_bytes.is_some()),
            present: timeline.is_some(),
            invalid: timeline.and_then(|t| t.validate(peak).err().map(|e| e.to_string())),
        }
    }

    /// True when the run has a timeline exactly if its setup keeps one, and that
    /// timeline is consistent with the counters: valid, its maximum the peak, its end
    /// the bytes live at exit, resident memory present exactly when the setup keeps it,
    /// mapped bytes present, nothing lost.
    pub fn exact(&self) -> bool {
        if self.setup == TimelineSetup::Off {
            return !self.present;
        }
        self.present
            && self.invalid.is_none()
            && self.max_and_peak.0 == self.max_and_peak.1
            && self.end_and_live.0 == self.end_and_live.1
            && self.lost_buckets == 0
            && self.rss == (self.setup == TimelineSetup::On)
            && self.mapped
    }
}

/// "timeline off", "timeline without RSS", "timeline (default)".
pub fn setup_name(setup: TimelineSetup) -> &'static str {
    match setup {
        TimelineSetup::Off => "timeline off",
        TimelineSetup::NoRss => "timeline, `rss(false)`",
        TimelineSetup::On => "timeline with RSS (the default)",
    }
}

/// Everything benchmark 8 measured.
#[derive(Clone, Debug)]
pub struct TimelineResult {
    /// Operations per run of the malloc loops.
    pub ops: u64,
    /// Page faults per run of the fault loop.
    pub faults: u64,
    /// One row per setup of [`SETUPS`].
    pub setups: Vec<SetupRow>,
    /// Every run's timeline check.
    pub checks: Vec<TimelineCheck>,
}

impl TimelineResult {
    /// True when every run's timeline was exact.
    pub fn all_exact(&self) -> bool {
        self.checks.iter().all(TimelineCheck::exact)
    }
}

/// Benchmark 8.
pub fn run(session: &mut Session) -> BenchResult<TimelineResult> {
    let s = session.settings.clone();
    let (ops, faults) = (s.timeline_ops, s.timeline_faults);
    let pair = alloc_loop(session, "malloc+free", "malloc_free", ops, pairs(ops));
    let split = alloc_loop(
        session,
        "malloc, free batched",
        "malloc_split",
        ops,
        pairs(ops),
    );
    // The loop maps, touches and unmaps pages itself: no allocator call.
    let fault = alloc_loop(
        session,
        "page faults",
        "page_faults",
        faults,
        Counts::default(),
    );
    let mut setups: Vec<SetupRow> = SETUPS
        .iter()
        .map(|&setup| SetupRow {
            setup,
            pair: PerOp::default(),
            malloc: PerOp::default(),
            free: PerOp::default(),
            fault: PerOp::default(),
        })
        .collect();
    let mut checks = Vec::new();
    for round in 0..s.timeline_runs {
        for row in &mut setups {
            eprintln!(
                "  {}: round {}/{}",
                setup_name(row.setup),
                round + 1,
                s.timeline_runs
            );
            let mut run = |workload: &Workload| -> BenchResult<_> {
                let (out, stats, timeline) = session.tracked_timeline(workload, row.setup)?;
                checks.push(TimelineCheck::new(
                    workload,
                    row.setup,
                    &stats,
                    timeline.as_ref(),
                ));
                Ok(out)
            };
            let out = run(&pair)?;
            record(&mut row.pair, &out, "ns_per_op")?;
            let out = run(&split)?;
            record(&mut row.malloc, &out, "ns_per_malloc")?;
            record(&mut row.free, &out, "ns_per_free")?;
            let out = run(&fault)?;
            record(&mut row.fault, &out, "ns_per_op")?;
        }
    }
    Ok(TimelineResult {
        ops,
        faults,
        setups,
        checks,
    })
}
