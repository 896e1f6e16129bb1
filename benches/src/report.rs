//! Turns the measurements into the Markdown tables printed on stdout (and pasted into
//! BENCHMARKS.md) and the `--json` document.
//!
//! All ratios of bests are computed here, from the bests of runs of the same benchmark
//! run, so a table never mixes figures from different runs or machines. The per-round
//! ratios of the pair against its counting-off floor are each of two runs of one round
//! (probe_cost.rs); they are summarised here.

use std::fmt::Write;

use memtrack::{ProbeInfo, ProbePlacement};

use crate::{
    isolation::IsolationResult,
    lifecycle::LatencyRow,
    probe_cost::{FloorRounds, OpRow, PerOp},
    render::{
        Align::{Left, Right},
        Json, fmt_duration, fmt_ns, fmt_ratio, markdown_table, obj, samples_json, text, thousands,
    },
    samples::Samples,
    session::CountCheck,
    settings::Settings,
    short::ShortResult,
    stacks::StacksResult,
    threads::ThreadsResult,
    timeline::TimelineResult,
};

/// Picks one clock's samples (wall or CPU) of a setup.
type Clock = fn(&PerOp) -> &Samples;

/// Where and when the figures were measured.
#[derive(Clone, Debug)]
pub struct Machine {
    /// UTC date, YYYY-MM-DD.
    pub date: String,
    /// CPUs available to this process.
    pub cpus: usize,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// e.g. "x86_64".
    pub arch: &'static str,
    /// Kernel release.
    pub kernel: String,
    /// e.g. "glibc 2.36".
    pub libc: String,
    /// The memtrack source measured: git commit, "+ local changes" when dirty.
    pub revision: String,
    /// /proc/loadavg's 1-minute load when the run began and when it ended (other work
    /// on the machine disturbs the figures; the bests are the least disturbed).
    pub load: (f64, f64),
}

/// Everything one benchmark run measured; sections not run are `None` / empty.
pub struct Report {
    /// Where and when.
    pub machine: Machine,
    /// Sizes and repetitions used.
    pub settings: Settings,
    /// The command line that produced it.
    pub command: String,
    /// Benchmarks 1 and 2.
    pub operations: Vec<OpRow>,
    /// Benchmark 3.
    pub threads: Option<ThreadsResult>,
    /// Benchmark 4, in-process trackers.
    pub lifecycle: Vec<LatencyRow>,
    /// Benchmark 4, spawned trackers (from every tracked run).
    pub spawn_latency: Vec<LatencyRow>,
    /// Benchmark 5.
    pub isolation: Option<IsolationResult>,
    /// Benchmark 6.
    pub stacks: Option<StacksResult>,
    /// Benchmark 8.
    pub timeline: Option<TimelineResult>,
    /// Benchmark 9.
    pub short: Option<ShortResult>,
    /// Every tracked run's count check.
    pub checks: Vec<CountCheck>,
    /// The probe sites of the functions the workloads called, per placement.
    pub probe_sites: Vec<(ProbePlacement, ProbeInfo)>,
}

/// "best (median)" of a sample set of ns figures.
fn best_and_median(s: &Samples) -> String {
    if s.len() < 2 {
        return fmt_ns(s.min());
    }
    format!("{} ({})", fmt_ns(s.min()), fmt_ns(s.median()))
}

/// "median (min-max)" of ratios: "1.10x (1.07x-1.12x)".
fn ratio_median_and_range(s: &Samples) -> String {
    if s.len() < 2 {
        return fmt_ratio(s.median());
    }
    format!(
        "{} ({}-{})",
        fmt_ratio(s.median()),
        fmt_ratio(s.min()),
        fmt_ratio(s.max())
    )
}

/// The counting-off table's row of the per-round ratios counting / counting off.
fn floor_rounds_row(floor: &FloorRounds) -> Vec<String> {
    vec![
        "counting / counting off, median of the per-round ratios (min-max)".to_string(),
        ratio_median_and_range(&floor.ratio.wall),
        ratio_median_and_range(&floor.ratio.cpu),
        floor.ratio.wall.len().to_string(),
    ]
}

/// The placement's name as in the API.
fn placement_name(p: ProbePlacement) -> &'static str {
    match p {
        ProbePlacement::Cheapest => "Cheapest",
        ProbePlacement::FunctionEntry => "FunctionEntry",
    }
}

/// The per-round ratios counting / counting off of a row, with each round's order.
fn floor_rounds_json(floor: &FloorRounds) -> Json {
    obj([
        ("rounds", Json::from(floor.counting_first.len())),
        (
            "counting_first",
            Json::Array(
                floor
                    .counting_first
                    .iter()
                    .map(|&f| Json::from(f))
                    .collect(),
            ),
        ),
        ("counting_over_off_wall", samples_json(&floor.ratio.wall)),
        ("counting_over_off_cpu", samples_json(&floor.ratio.cpu)),
    ])
}

/// One table of benchmark 5: an unrelated loop natively and beside trackers, with the
/// ratio of each to native.
fn unrelated_table(
    out: &mut String,
    what: &str,
    unit: &str,
    native: &Samples,
    besides: &[(&str, &Samples)],
) {
    let mut rows = vec![vec![
        "no tracker anywhere".to_string(),
        best_and_median(native),
        native.len().to_string(),
    ]];
    for (label, beside) in besides {
        rows.push(vec![
            label.to_string(),
            best_and_median(beside),
            beside.len().to_string(),
        ]);
        rows.push(vec![
            "ratio to native".to_string(),
            format!(
                "{} ({})",
                fmt_ratio(beside.min() / native.min()),
                fmt_ratio(beside.median() / native.median())
            ),
            String::new(),
        ]);
    }
    out.push_str(&markdown_table(
        &[
            &format!("unrelated {what}"),
            &format!("ns per {unit}, best (median)"),
            "runs",
        ],
        &[Left, Right, Right],
        rows,
    ));
}

/// The checks of one (workload, placement), in order of first appearance.
fn grouped_checks(checks: &[CountCheck]) -> Vec<Vec<&CountCheck>> {
    let mut groups: Vec<Vec<&CountCheck>> = Vec::new();
    for check in checks {
        match groups
            .iter_mut()
            .find(|g| g[0].workload == check.workload && g[0].placement == check.placement)
        {
            Some(group) => group.push(check),
            None => groups.push(vec![check]),
        }
    }
    groups
}

impl Report {
    /// True when every tracked run counted exactly and lost nothing.
    pub fn all_exact(&self) -> bool {
        self.checks.iter().all(CountCheck::exact)
            && self.stacks.as_ref().is_none_or(StacksResult::all_exact)
            && self.timeline.as_ref().is_none_or(TimelineResult::all_exact)
            && self.short.as_ref().is_none_or(ShortResult::all_exact)
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let s = &self.settings;
        let _ = writeln!(out, "## memtrack benchmark results\n");
        let _ = writeln!(
            out,
            "{} UTC; {} CPUs {} ({}), Linux {}, {}; memtrack {}; load average {:.1} at \
             the start, {:.1} at the end; `{}`{}.\n",
            m.date,
            m.cpus,
            m.arch,
            m.cpu_model,
            m.kernel,
            m.libc,
            m.revision,
            m.load.0,
            m.load.1,
            self.command,
            if s.quick {
                " (quick: small loops, few runs; for CI, not for quoting)"
            } else {
                ""
            }
        );
        self.operations_md(&mut out);
        self.counting_off_md(&mut out);
        self.threads_md(&mut out);
        if let Some(stacks) = &self.stacks {
            crate::stacks_report::markdown(stacks, &mut out);
        }
        if let Some(timeline) = &self.timeline {
            crate::timeline_report::markdown(timeline, &mut out);
        }
        if let Some(short) = &self.short {
            crate::short_report::markdown(short, &mut out);
        }
        self.checks_md(&mut out);
        self.probe_sites_md(&mut out);
        self.lifecycle_md(&mut out);
        self.isolation_md(&mut out);
        out
    }

    /// Benchmark 1, counting off: the probes' cost without the accounting.
    fn counting_off_md(&self, out: &mut String) {
        let Some((row, off)) = self
            .operations
            .iter()
            .find_map(|r| Some((r, r.counting_off.as_ref()?)))
        else {
            return;
        };
        let _ = writeln!(
            out,
            "### {} with the Cheapest probes attached but counting off \
             (`start_enabled(false)`), ns, best of runs (median in brackets)\n",
            row.name
        );
        let mut rows: Vec<Vec<String>> = [
            ("untracked", &row.untracked),
            ("Cheapest, counting", &row.cheapest),
            ("Cheapest, counting off", off),
        ]
        .into_iter()
        .map(|(name, p)| {
            vec![
                name.to_string(),
                best_and_median(&p.wall),
                best_and_median(&p.cpu),
                p.wall.len().to_string(),
            ]
        })
        .collect();
        let share = |p: &PerOp| {
            (p.wall.min() - row.untracked.wall.min())
                / (row.cheapest.wall.min() - row.untracked.wall.min())
        };
        rows.push(vec![
            "counting off / counting, probe cost only (untracked subtracted)".to_string(),
            format!("{:.0}%", 100.0 * share(off)),
            String::new(),
            String::new(),
        ]);
        if let Some(floor) = &row.floor_rounds {
            rows.push(floor_rounds_row(floor));
        }
        out.push_str(&markdown_table(
            &["setup", "wall", "CPU", "runs"],
            &[Left, Right, Right, Right],
            rows,
        ));
    }

    /// Benchmarks 1 and 2: one table per clock.
    fn operations_md(&self, out: &mut String) {
        if self.operations.is_empty() {
            return;
        }
        let clocks: [(&str, Clock); 2] = [
            ("wall time (CLOCK_MONOTONIC)", |p| &p.wall),
            (
                "CPU time of the process (CLOCK_PROCESS_CPUTIME_ID: user + kernel, \
                 where the probe handlers run)",
                |p| &p.cpu,
            ),
        ];
        for (clock, pick) in clocks {
            let _ = writeln!(
                out,
                "### Cost per operation, {clock}: ns, best of runs (median in brackets); \
                 ratios of the bests\n"
            );
            let rows = self
                .operations
                .iter()
                .map(|row| {
                    let untracked = pick(&row.untracked);
                    let cheapest = pick(&row.cheapest);
                    let entry = row.function_entry.as_ref().map(pick);
                    let (u, c) = (untracked.min(), cheapest.min());
                    let fe = entry.map(Samples::min);
                    vec![
                        row.name.clone(),
                        thousands(row.ops),
                        best_and_median(untracked),
                        best_and_median(cheapest),
                        entry.map_or("-".into(), best_and_median),
                        fmt_ratio(c / u),
                        fe.map_or("-".into(), |fe| fmt_ratio(fe / u)),
                        fe.map_or("-".into(), |fe| fmt_ratio(fe / c)),
                        format!(
                            "{}/{}/{}",
                            untracked.len(),
                            cheapest.len(),
                            entry.map_or(0, Samples::len)
                        ),
                    ]
                })
                .collect();
            out.push_str(&markdown_table(
                &[
                    "operation",
                    "ops/run",
                    "untracked",
                    "Cheapest",
                    "FunctionEntry",
                    "Cheapest / untracked",
                    "FunctionEntry / untracked",
                    "FunctionEntry / Cheapest",
                    "runs (u/C/FE)",
                ],
                &[Left, Right, Right, Right, Right, Right, Right, Right, Right],
                rows,
            ));
        }
    }

    /// Benchmark 3.
    fn threads_md(&self, out: &mut String) {
        let Some(t) = &self.threads else { return };
        let pairs = (t.threads * t.ops_per_thread) as f64;
        let (u, c) = (&t.untracked_wall_ns, &t.tracked_wall_ns);
        let _ = writeln!(
            out,
            "### {} threads x {} malloc+free pairs at once (wall time, best of runs; median \
             in brackets)\n",
            t.threads,
            thousands(t.ops_per_thread)
        );
        let mut rows: Vec<Vec<String>> = [
            ("untracked", u, &t.untracked_cpu_ns),
            ("tracked (Cheapest)", c, &t.tracked_cpu_ns),
        ]
        .into_iter()
        .map(|(name, wall, cpu)| {
            vec![
                name.to_string(),
                format!(
                    "{} ({})",
                    fmt_duration(wall.min()),
                    fmt_duration(wall.median())
                ),
                fmt_ns(wall.min() / pairs),
                fmt_ns(cpu.min() / pairs),
                wall.len().to_string(),
            ]
        })
        .collect();
        if let Some(single) = self.operations.first() {
            rows.push(vec![
                format!(
                    "for comparison: 1 thread, tracked (Cheapest), the {} benchmark",
                    single.name
                ),
                String::new(),
                fmt_ns(single.cheapest.wall.min()),
                fmt_ns(single.cheapest.cpu.min()),
                single.cheapest.wall.len().to_string(),
            ]);
        }
        rows.push(vec![
            "ratio tracked / untracked".to_string(),
            format!(
                "{} ({})",
                fmt_ratio(c.min() / u.min()),
                fmt_ratio(c.median() / u.median())
            ),
            String::new(),
            fmt_ratio(t.tracked_cpu_ns.min() / t.untracked_cpu_ns.min()),
            String::new(),
        ]);
        out.push_str(&markdown_table(
            &[
                "setup",
                "wall time",
                "ns per pair (wall / pairs)",
                "CPU ns per pair (all threads)",
                "runs",
            ],
            &[Left, Right, Right, Right, Right],
            rows,
        ));
    }

    /// The count checks, one line per workload and placement.
    fn checks_md(&self, out: &mut String) {
        if self.checks.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "### Counts of the tracked runs, above each program's baseline run (same \
             program, 0 operations)\n"
        );
        let rows = grouped_checks(&self.checks)
            .into_iter()
            .map(|group| {
                let first = group[0];
                let exact = group.iter().filter(|c| c.exact()).count();
                // Show a failing run's numbers when there is one.
                let shown = group.iter().find(|c| !c.exact()).unwrap_or(&first);
                let lost: u64 = group
                    .iter()
                    .map(|c| c.lost_events + c.unattributed_lost_events)
                    .sum();
                let e = &first.expected;
                let m = &shown.measured;
                vec![
                    first.workload.clone(),
                    placement_name(first.placement).to_string(),
                    format!(
                        "{} / {} / {}",
                        thousands(e.alloc_calls),
                        thousands(e.free_calls),
                        thousands(e.bytes_allocated)
                    ),
                    format!(
                        "{} / {} / {}",
                        thousands(m.alloc_calls),
                        thousands(m.free_calls),
                        thousands(m.bytes_allocated)
                    ),
                    lost.to_string(),
                    format!("{exact}/{} runs", group.len()),
                ]
            })
            .collect();
        out.push_str(&markdown_table(
            &[
                "workload",
                "placement",
                "expected allocs / frees / bytes",
                "counted",
                "lost_events",
                "exact",
            ],
            &[Left, Left, Right, Right, Right, Right],
            rows,
        ));
    }

    /// Where each called function's probes sat, per placement.
    fn probe_sites_md(&self, out: &mut String) {
        if self.probe_sites.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "### Where the probes sat (every probed symbol of each function the workloads called)\n"
        );
        let mut sites = self.probe_sites.clone();
        sites.sort_by(|a, b| {
            (&a.1.function, placement_name(a.0)).cmp(&(&b.1.function, placement_name(b.0)))
        });
        let rows = sites
            .iter()
            .map(|(placement, p)| {
                let object = p.object.file_name().unwrap_or_default().to_string_lossy();
                let instruction = if p.entry_instruction.is_empty() {
                    String::new()
                } else {
                    format!(" `{}`", p.entry_instruction)
                };
                let ret = if p.return_probe {
                    format!("+{}", p.return_offset)
                } else {
                    "none".into()
                };
                let emulated = if p.entry_emulated {
                    "yes"
                } else if p.entry_instruction.is_empty() {
                    "not decoded"
                } else {
                    "no (single-stepped)"
                };
                vec![
                    p.function.clone(),
                    object.into_owned(),
                    placement_name(*placement).to_string(),
                    format!("+{}{instruction}", p.entry_offset),
                    emulated.to_string(),
                    ret,
                ]
            })
            .collect();
        out.push_str(&markdown_table(
            &[
                "function",
                "object",
                "placement",
                "entry probe",
                "kernel emulates it",
                "return probe",
            ],
            &[Left, Left, Left, Left, Right, Left],
            rows,
        ));
    }

    /// Benchmark 4, in-process and spawned trackers.
    fn lifecycle_md(&self, out: &mut String) {
        if self.lifecycle.is_empty() && self.spawn_latency.is_empty() {
            return;
        }
        let _ = writeln!(out, "### Tracker latency\n");
        let rows = self
            .lifecycle
            .iter()
            .chain(&self.spawn_latency)
            .filter(|row| !row.samples_ns.is_empty())
            .map(|row| {
                let s = &row.samples_ns;
                vec![
                    row.name.clone(),
                    fmt_duration(s.median()),
                    fmt_duration(s.min()),
                    fmt_duration(s.max()),
                    s.len().to_string(),
                ]
            })
            .collect();
        out.push_str(&markdown_table(
            &["operation", "median", "min", "max", "samples"],
            &[Left, Right, Right, Right, Right],
            rows,
        ));
    }

    /// Benchmark 5.
    fn isolation_md(&self, out: &mut String) {
        let Some(i) = &self.isolation else { return };
        let _ = writeln!(
            out,
            "### An unrelated process beside a counting in-process tracker ({} \
             operations per run)\n",
            thousands(i.pairs)
        );
        let counted = format!(
            "beside a counting tracker (it counted {} allocations of its own process \
             meanwhile)",
            thousands(i.tracker_counted_allocs)
        );
        unrelated_table(
            out,
            "malloc+free loop",
            "pair",
            &i.native,
            &[(&counted, &i.beside)],
        );
        unrelated_table(
            out,
            "`syscall(SYS_getppid)` loop",
            "call",
            &i.syscall_native,
            &[
                ("beside a counting tracker", &i.syscall_beside),
                (
                    "beside a counting tracker made with `count_syscalls(false)`",
                    &i.syscall_beside_uncounted,
                ),
            ],
        );
        unrelated_table(
            out,
            &format!("page-fault loop ({} pages a run)", thousands(i.faults)),
            "fault",
            &i.faults_native,
            &[
                (
                    "beside a counting tracker (RSS kept: `kmem:rss_stat` attached)",
                    &i.faults_beside,
                ),
                (
                    "beside a counting tracker made with `rss(false)`",
                    &i.faults_beside_no_rss,
                ),
            ],
        );
    }

    /// The report as one JSON document (all samples, not only medians).
    pub fn json(&self) -> Json {
        let m = &self.machine;
        let s = &self.settings;
        let machine = obj([
            ("date", text(&m.date)),
            ("cpus", Json::from(m.cpus)),
            ("cpu_model", text(&m.cpu_model)),
            ("arch", text(m.arch)),
            ("kernel", text(&m.kernel)),
            ("libc", text(&m.libc)),
            ("memtrack_revision", text(&m.revision)),
            ("load_average_start", Json::from(m.load.0)),
            ("load_average_end", Json::from(m.load.1)),
        ]);
        let settings = obj([
            ("quick", Json::from(s.quick)),
            ("pairs", Json::from(s.pairs)),
            ("split_ops", Json::from(s.split_ops)),
            ("function_ops", Json::from(s.function_ops)),
            ("threads", Json::from(s.threads)),
            ("thread_ops", Json::from(s.thread_ops)),
            ("native_runs", Json::from(s.native_runs)),
            ("tracked_runs", Json::from(s.tracked_runs)),
            ("function_entry_runs", Json::from(s.function_entry_runs)),
            ("floor_rounds", Json::from(s.floor_rounds)),
            ("lifecycle_iterations", Json::from(s.lifecycle_iterations)),
            ("isolation_runs", Json::from(s.isolation_runs)),
            ("close_spawned", Json::from(s.close_spawned)),
        ]);
        let per_op = |p: &PerOp| {
            obj([
                ("wall", samples_json(&p.wall)),
                ("cpu", samples_json(&p.cpu)),
            ])
        };
        let operations = self
            .operations
            .iter()
            .map(|row| {
                let ratios = |pick: Clock| {
                    let (u, c) = (pick(&row.untracked).min(), pick(&row.cheapest).min());
                    let fe = row.function_entry.as_ref().map(|p| pick(p).min());
                    let off = row.counting_off.as_ref().map(|p| pick(p).min());
                    obj([
                        ("cheapest_over_untracked", Json::from(c / u)),
                        ("cheapest_over_counting_off", Json::from(off.map(|o| c / o))),
                        (
                            "function_entry_over_untracked",
                            Json::from(fe.map(|f| f / u)),
                        ),
                        (
                            "function_entry_over_cheapest",
                            Json::from(fe.map(|f| f / c)),
                        ),
                    ])
                };
                obj([
                    ("name", text(&row.name)),
                    ("ops_per_run", Json::from(row.ops)),
                    ("untracked_ns", per_op(&row.untracked)),
                    ("cheapest_ns", per_op(&row.cheapest)),
                    (
                        "function_entry_ns",
                        row.function_entry.as_ref().map_or(Json::Null, per_op),
                    ),
                    (
                        "counting_off_ns",
                        row.counting_off.as_ref().map_or(Json::Null, per_op),
                    ),
                    (
                        "counting_off_rounds",
                        row.floor_rounds
                            .as_ref()
                            .map_or(Json::Null, floor_rounds_json),
                    ),
                    ("ratios_of_best_wall", ratios(|p| &p.wall)),
                    ("ratios_of_best_cpu", ratios(|p| &p.cpu)),
                ])
            })
            .collect();
        let threads = self.threads.as_ref().map_or(Json::Null, |t| {
            obj([
                ("threads", Json::from(t.threads)),
                ("ops_per_thread", Json::from(t.ops_per_thread)),
                ("untracked_wall_ns", samples_json(&t.untracked_wall_ns)),
                ("tracked_wall_ns", samples_json(&t.tracked_wall_ns)),
                ("untracked_cpu_ns", samples_json(&t.untracked_cpu_ns)),
                ("tracked_cpu_ns", samples_json(&t.tracked_cpu_ns)),
                (
                    "tracked_over_untracked",
                    Json::from(t.tracked_wall_ns.median() / t.untracked_wall_ns.median()),
                ),
            ])
        });
        let latency = |rows: &[LatencyRow]| {
            Json::Array(
                rows.iter()
                    .map(|r| {
                        obj([
                            ("operation", text(&r.name)),
                            ("ns", samples_json(&r.samples_ns)),
                        ])
                    })
                    .collect(),
            )
        };
        let isolation = self.isolation.as_ref().map_or(Json::Null, |i| {
            obj([
                ("pairs", Json::from(i.pairs)),
                ("native_ns_per_pair", samples_json(&i.native)),
                ("beside_ns_per_pair", samples_json(&i.beside)),
                (
                    "beside_over_native",
                    Json::from(i.beside.median() / i.native.median()),
                ),
                (
                    "tracker_counted_allocs",
                    Json::from(i.tracker_counted_allocs),
                ),
                ("native_ns_per_getppid", samples_json(&i.syscall_native)),
                ("beside_ns_per_getppid", samples_json(&i.syscall_beside)),
                (
                    "beside_uncounted_ns_per_getppid",
                    samples_json(&i.syscall_beside_uncounted),
                ),
                ("page_faults", Json::from(i.faults)),
                ("native_ns_per_fault", samples_json(&i.faults_native)),
                ("beside_ns_per_fault", samples_json(&i.faults_beside)),
                (
                    "beside_no_rss_ns_per_fault",
                    samples_json(&i.faults_beside_no_rss),
                ),
            ])
        });
        let counts = |c: &crate::workload::Counts| {
            obj([
                ("alloc_calls", Json::from(c.alloc_calls)),
                ("free_calls", Json::from(c.free_calls)),
                ("bytes_allocated", Json::from(c.bytes_allocated)),
            ])
        };
        let checks = self
            .checks
            .iter()
            .map(|c| {
                obj([
                    ("workload", text(&c.workload)),
                    ("placement", text(placement_name(c.placement))),
                    ("expected_above_baseline", counts(&c.expected)),
                    ("counted_above_baseline", counts(&c.measured)),
                    ("lost_events", Json::from(c.lost_events)),
                    (
                        "unattributed_lost_events",
                        Json::from(c.unattributed_lost_events),
                    ),
                    ("processes", Json::from(c.processes)),
                    ("exact", Json::from(c.exact())),
                ])
            })
            .collect();
        obj([
            ("command", text(&self.command)),
            ("machine", machine),
            ("settings", settings),
            ("operations", Json::Array(operations)),
            ("threads", threads),
            ("lifecycle", latency(&self.lifecycle)),
            ("spawn_latency", latency(&self.spawn_latency)),
            ("isolation", isolation),
            (
                "stacks",
                self.stacks
                    .as_ref()
                    .map_or(Json::Null, crate::stacks_report::json),
            ),
            (
                "timeline",
                self.timeline
                    .as_ref()
                    .map_or(Json::Null, crate::timeline_report::json),
            ),
            (
                "short",
                self.short
                    .as_ref()
                    .map_or(Json::Null, crate::short_report::json),
            ),
            ("count_checks", Json::Array(checks)),
            (
                "probe_sites",
                Json::Array(
                    self.probe_sites
                        .iter()
                        .map(|(placement, p)| {
                            obj([
                                ("function", text(&p.function)),
                                ("object", text(p.object.display().to_string())),
                                ("placement", text(placement_name(*placement))),
                                ("entry_offset", Json::from(p.entry_offset)),
                                ("entry_instruction", text(&p.entry_instruction)),
                                ("entry_emulated", Json::from(p.entry_emulated)),
                                ("return_probe", Json::from(p.return_probe)),
                                ("return_offset", Json::from(p.return_offset)),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("all_counts_exact", Json::from(self.all_exact())),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(values: &[f64]) -> Samples {
        values.iter().copied().collect()
    }

    #[test]
    fn floor_rounds_row_gives_the_median_and_range_of_the_ratios() {
        let floor = FloorRounds {
            ratio: PerOp {
                wall: samples(&[1.12, 1.07, 1.10]),
                cpu: samples(&[1.09, 1.11, 1.08]),
            },
            counting_first: vec![true, false, true],
        };
        assert_eq!(
            floor_rounds_row(&floor),
            [
                "counting / counting off, median of the per-round ratios (min-max)",
                "1.10x (1.07x-1.12x)",
                "1.09x (1.08x-1.11x)",
                "3",
            ]
        );
        let json = floor_rounds_json(&floor);
        assert_eq!(json["rounds"], 3);
        assert_eq!(
            json["counting_first"],
            serde_json::json!([true, false, true])
        );
        assert_eq!(json["counting_over_off_cpu"]["median"], 1.09);
        // One round: no range.
        assert_eq!(ratio_median_and_range(&samples(&[1.05])), "1.05x");
    }
}
