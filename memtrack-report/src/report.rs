//! Renders results for people (aligned columns, sizes in B/KiB/MiB beside the exact
//! bytes) and for programs (one JSON object), for `memtrack run` and `memtrack report`.
//!
//! Both are made from memtrack's own records: the text from [`TrackedProcess`]es, the
//! JSON by serialising [`RunResults`] (`{"schema_version", "memtrack_version",
//! "processes": [...]}`, each process with its `stats` and `benchmarks`), so the JSON
//! report has the same fields and the same schema version as the result files.

use tabled::{
    builder::Builder,
    settings::{Padding, Style, Width, object::Columns},
};

use memtrack_record::{
    AllocatorStatus, ProbeInfo, RunResults, Stats, TrackedProcess, escape_control,
    timeline::{EventKind, Timeline},
};

use crate::{
    limits::DirResults,
    sparkline,
    units::{bytes, count, duration, exact, size},
};

/// What the human report shows besides the numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TextOptions {
    /// List where each process's probes sit (`memtrack run --probes`): function,
    /// object, file offset, the entry probe's offset and instruction, the return probe.
    pub probe_sites: bool,
}

impl TextOptions {
    /// The default report, with probe sites listed or not.
    pub fn with_probe_sites(probe_sites: bool) -> Self {
        TextOptions { probe_sites }
    }
}

/// The JSON report: [`RunResults`] serialised, pretty-printed.
pub fn render_json(results: &RunResults) -> String {
    serde_json::to_string_pretty(results).expect("results always serialise")
}

/// The JSON report of results found in several directories (`memtrack report` of a
/// tree, e.g. `target/memtrack`): the same object as [`render_json`], its processes in
/// the order of `dirs`, each process found below the directory given carrying its
/// directory relative to it as `"result_dir"` (processes of the directory itself carry
/// none, so one directory's report is exactly [`render_json`]'s). [`RunResults`] reads
/// it back (passing over `result_dir`).
pub fn render_json_tree(dirs: &[DirResults]) -> String {
    /// A process of the report, with where it was found.
    #[derive(serde::Serialize)]
    struct Found<'a> {
        #[serde(flatten)]
        process: &'a TrackedProcess,
        #[serde(skip_serializing_if = "Option::is_none")]
        result_dir: Option<String>,
    }
    /// The report: [`RunResults`]'s fields, in its order.
    #[derive(serde::Serialize)]
    struct Report<'a> {
        schema_version: u32,
        memtrack_version: String,
        processes: Vec<Found<'a>>,
    }
    let versions = RunResults::new(Vec::new());
    let report = Report {
        schema_version: versions.schema_version,
        memtrack_version: versions.memtrack_version,
        processes: dirs
            .iter()
            .flat_map(|(dir, processes)| {
                let result_dir = (!dir.as_os_str().is_empty()).then(|| dir.display().to_string());
                processes.iter().map(move |process| Found {
                    process,
                    result_dir: result_dir.clone(),
                })
            })
            .collect(),
    };
    serde_json::to_string_pretty(&report).expect("results always serialise")
}

/// The human report of results found in several directories: each directory's
/// processes and benchmarks as [`render_text_with`] shows them, those below the
/// directory given headed by `results in DIR:` (DIR relative to it).
pub fn render_text_tree(dirs: &[DirResults], options: TextOptions) -> String {
    let mut out = String::new();
    for (dir, processes) in dirs {
        if !dir.as_os_str().is_empty() {
            out.push_str(&format!("results in {}:\n", dir.display()));
        }
        out.push_str(&render_text_with(processes, options));
    }
    out
}

/// What an unmatched free is, said beside their number. memtrack cannot tell one kind
/// from another per free (the kernel sees a release of a pointer it does not know), so
/// the kinds are named: blocks allocated before tracking began (or before a reset), a
/// second release of a block (a double free), and with glibc what an exiting thread
/// gives back: its per-thread cache (tcache), which glibc allocates inside the
/// allocator without a `malloc` call, and each chunk still cached in it, which the
/// program had released already. A thread that allocated adds 1 + one per size class
/// its cache holds a chunk of (2 for one size); the main thread and `exit()` add none.
pub const UNMATCHED_CAUSES: &str = "allocated before tracking, released twice, or glibc's \
     per-thread cache given back at a thread's exit (1 + its cached chunks per exiting \
     thread)";

/// The width of the widest label of [`stats_rows`] (`mmap/munmap/brk`, `unmatched
/// frees`): every block's values start in the same column, whichever rows it has.
const LABEL_WIDTH: usize = 15;

/// `rows` as two columns, labels left-aligned and at least [`LABEL_WIDTH`] wide, one
/// space between, each line indented.
fn aligned(rows: Vec<[String; 2]>, indent: &str) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut table = Builder::from(rows.into_iter().map(Vec::from).collect::<Vec<_>>()).build();
    table
        .with(Style::empty())
        .with(Padding::zero())
        .modify(Columns::one(1), Padding::new(1, 0, 0, 0))
        .modify(Columns::one(0), Width::increase(LABEL_WIDTH));
    let mut out = String::new();
    for line in table.to_string().lines() {
        // Values are padded to the widest one: no line ends in spaces.
        out.push_str(indent);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The label/value rows of a set of counters.
pub(crate) fn stats_rows(stats: &Stats) -> Vec<[String; 2]> {
    let mut rows = Vec::new();
    let mut row = |label: &str, value: String| rows.push([label.to_string(), value]);
    let blocks = |n: u64, b: u64| format!("{}, {}", count(n, "block"), bytes(b));
    row(
        "allocations",
        blocks(stats.alloc_calls, stats.bytes_allocated),
    );
    row("frees", blocks(stats.free_calls, stats.bytes_freed));
    row("live at end", blocks(stats.live_blocks, stats.live_bytes));
    row("peak live", bytes(stats.peak_live_bytes));
    if stats.failed_allocs != 0 {
        row("failed allocs", exact(stats.failed_allocs));
    }
    if stats.unmatched_frees != 0 {
        row(
            "unmatched frees",
            format!(
                "{} (pointers memtrack did not see allocated: {UNMATCHED_CAUSES})",
                exact(stats.unmatched_frees)
            ),
        );
    }
    if stats.lost_events != 0 {
        row(
            "LOST EVENTS",
            format!("{} (numbers above are not exact)", exact(stats.lost_events)),
        );
    }
    match &stats.syscalls {
        Some(s) if s.mmap_calls + s.munmap_calls + s.brk_calls != 0 => row(
            "mmap/munmap/brk",
            format!(
                "{} mmap ({}), {} munmap ({}), {} brk (+{} / -{})",
                exact(s.mmap_calls),
                size(s.mmap_bytes),
                exact(s.munmap_calls),
                size(s.munmap_bytes),
                exact(s.brk_calls),
                size(s.brk_grown_bytes),
                size(s.brk_shrunk_bytes)
            ),
        ),
        Some(_) => {}
        None => row("mmap/munmap/brk", "not counted".to_string()),
    }
    if !stats.functions.is_empty() {
        let calls: Vec<String> = stats
            .functions
            .iter()
            .map(|(name, f)| format!("{name} {}", exact(f.calls)))
            .collect();
        row("calls", calls.join(", "));
    }
    rows
}

/// The `over time` row of a scope with a timeline whose heap was ever above 0: its
/// sparkline ([`sparkline::sparkline`], [`sparkline::WIDTH`] columns) between brackets,
/// how long the timeline lasts and when the peak was (the timeline's peak event, if it
/// has one), both from the timeline's start.
fn timeline_row(timeline: Option<&Timeline>) -> Option<[String; 2]> {
    let t = timeline?;
    if t.max_bytes() == 0 {
        return None;
    }
    let peak_at = t
        .events
        .iter()
        .rev()
        .find(|e| matches!(e.what, EventKind::Peak { .. }))
        .map(|e| {
            format!(
                ", peak at {}",
                duration(e.t_ns.saturating_sub(t.start_ns()))
            )
        })
        .unwrap_or_default();
    Some([
        "over time".to_string(),
        format!(
            "[{}] {}{peak_at}",
            sparkline::sparkline(t, sparkline::WIDTH),
            duration(t.end_ns() - t.start_ns())
        ),
    ])
}

/// The rows of a scope: its counters, then its sparkline if it has one.
pub(crate) fn scope_rows(stats: &Stats, timeline: Option<&Timeline>) -> Vec<[String; 2]> {
    let mut rows = stats_rows(stats);
    rows.extend(timeline_row(timeline));
    rows
}

/// One probe site, for people.
fn probe_line(p: &ProbeInfo) -> String {
    let aliases = if p.aliases.is_empty() {
        String::new()
    } else {
        format!(" (also {})", p.aliases.join(", "))
    };
    let instruction = if p.entry_instruction.is_empty() {
        String::new()
    } else {
        format!(" `{}`", p.entry_instruction)
    };
    let how = if p.entry_emulated {
        "emulated"
    } else {
        "single-stepped"
    };
    let ret = if p.return_probe {
        format!("return +{}", p.return_offset)
    } else {
        "no return probe".to_string()
    };
    format!(
        "probe {}{aliases}: {} at {:#x}, entry +{}{instruction} ({how}), {ret}",
        p.function,
        p.object.display(),
        p.file_offset,
        p.entry_offset
    )
}

/// The human report: one block per process, then one per benchmark.
pub fn render_text(processes: &[TrackedProcess]) -> String {
    render_text_with(processes, TextOptions::default())
}

/// The human report, with what `options` adds.
pub fn render_text_with(processes: &[TrackedProcess], options: TextOptions) -> String {
    let mut out = String::new();
    for p in processes {
        let exit = match (p.exit_code, p.exit_signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "still running when its results were saved".to_string(),
        };
        let helper = crate::helpers::harness_helper(p, processes)
            .map(|what| format!(" (a harness helper: {what}; not a benchmark)"))
            .unwrap_or_default();
        out.push_str(&format!(
            "process {} (parent {}): {} [{exit}]{helper}\n",
            p.pid,
            p.ppid,
            escape_control(&p.command.join(" "))
        ));
        for image in &p.earlier_images {
            out.push_str(&format!(
                "  before exec, as {}: {}, {} allocated, {} live at exec\n",
                escape_control(&image.command.join(" ")),
                count(image.stats.alloc_calls, "block"),
                bytes(image.stats.bytes_allocated),
                bytes(image.stats.live_bytes)
            ));
        }
        match &p.allocator {
            AllocatorStatus::Probed => {
                out.push_str(&aligned(scope_rows(&p.stats, p.timeline.as_ref()), "  "))
            }
            AllocatorStatus::NotRecognised { reason } => {
                out.push_str(&format!(
                    "  allocator not recognised: heap not measured ({reason})\n"
                ));
            }
        }
        if options.probe_sites {
            for probe in &p.probes {
                out.push_str(&format!("  {}\n", probe_line(probe)));
            }
        }
    }
    for p in processes {
        for b in &p.benchmarks {
            let unfinished = if b.unfinished {
                " UNFINISHED: the process ended inside it (or was still in it at the end); \
                 the counters are what it counted until then"
            } else {
                ""
            };
            out.push_str(&format!(
                "benchmark {} (process {}){unfinished}\n",
                escape_control(&b.uri),
                p.pid
            ));
            out.push_str(&aligned(scope_rows(&b.stats, b.timeline.as_ref()), "  "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::{BenchmarkStats, ImageStats, SyscallStats};

    fn malloc_probe() -> ProbeInfo {
        ProbeInfo {
            function: "malloc".into(),
            aliases: vec![],
            object: "/lib/libc.so.6".into(),
            symbol: "malloc".into(),
            file_offset: 0x98930,
            entry_offset: 0,
            entry_instruction: "push %r12".into(),
            entry_emulated: true,
            return_probe: true,
            return_offset: 0,
        }
    }

    #[test]
    fn probe_sites_say_where_and_how() {
        let probe = malloc_probe();
        assert_eq!(
            probe_line(&probe),
            "probe malloc: /lib/libc.so.6 at 0x98930, entry +0 `push %r12` (emulated), \
             return +0"
        );
        let free = ProbeInfo {
            function: "free".into(),
            aliases: vec!["cfree".into()],
            symbol: "free".into(),
            file_offset: 0x98ef0,
            entry_offset: 3,
            entry_instruction: "je 0x98fb8".into(),
            return_probe: false,
            ..probe.clone()
        };
        assert_eq!(
            probe_line(&free),
            "probe free (also cfree): /lib/libc.so.6 at 0x98ef0, entry +3 `je 0x98fb8` \
             (emulated), no return probe"
        );
        let entry = ProbeInfo {
            entry_instruction: String::new(),
            entry_emulated: false,
            ..probe
        };
        assert_eq!(
            probe_line(&entry),
            "probe malloc: /lib/libc.so.6 at 0x98930, entry +0 (single-stepped), return +0"
        );
    }

    /// A process with counters of every kind, an earlier image and a benchmark, and one
    /// whose allocator was not recognised.
    fn sample() -> Vec<TrackedProcess> {
        let mut stats = Stats::default();
        stats.alloc_calls = 1110;
        stats.bytes_allocated = 39_400;
        stats.free_calls = 110;
        stats.bytes_freed = 7400;
        stats.live_blocks = 1000;
        stats.live_bytes = 32_000;
        stats.peak_live_bytes = 32_000;
        stats.failed_allocs = 1;
        stats.unmatched_frees = 2;
        stats.lost_events = 3;
        let mut syscalls = SyscallStats::default();
        syscalls.mmap_calls = 4;
        syscalls.mmap_bytes = 16_384;
        syscalls.brk_calls = 2;
        syscalls.brk_grown_bytes = 135_168;
        stats.syscalls = Some(syscalls);
        let mut malloc = memtrack_record::FunctionStats::default();
        malloc.calls = 1110;
        stats.functions.insert("malloc".into(), malloc);
        let mut free = memtrack_record::FunctionStats::default();
        free.calls = 112;
        stats.functions.insert("free".into(), free);

        let mut main = TrackedProcess::new(42, 1, vec!["prog".into(), "--fast".into()]);
        main.exit_code = Some(0);
        main.allocator = AllocatorStatus::Probed;
        main.probes = vec![malloc_probe()];
        let mut before = Stats::default();
        before.alloc_calls = 2;
        before.bytes_allocated = 2048;
        before.live_bytes = 1024;
        main.earlier_images = vec![ImageStats::new(vec!["sh".into()], before)];
        let mut region = Stats::default();
        region.alloc_calls = 10;
        region.bytes_allocated = 1000;
        region.free_calls = 10;
        region.bytes_freed = 1000;
        region.peak_live_bytes = 1000;
        main.benchmarks = vec![BenchmarkStats::new("bench::ten", region)];
        main.stats = stats;

        let mut other = TrackedProcess::new(43, 42, vec!["static".into()]);
        other.exit_signal = Some(9);
        other.allocator = AllocatorStatus::NotRecognised {
            reason: "no known allocator".into(),
        };
        vec![main, other]
    }

    #[test]
    fn text_report_is_exact() {
        let want = "\
process 42 (parent 1): prog --fast [exit 0]
  before exec, as sh: 2 blocks, 2 KiB (2,048 B) allocated, 1 KiB (1,024 B) live at exec
  allocations     1,110 blocks, 38.5 KiB (39,400 B)
  frees           110 blocks, 7.2 KiB (7,400 B)
  live at end     1,000 blocks, 31.2 KiB (32,000 B)
  peak live       31.2 KiB (32,000 B)
  failed allocs   1
  unmatched frees 2 (pointers memtrack did not see allocated: allocated before tracking, released twice, or glibc's per-thread cache given back at a thread's exit (1 + its cached chunks per exiting thread))
  LOST EVENTS     3 (numbers above are not exact)
  mmap/munmap/brk 4 mmap (16 KiB), 0 munmap (0 B), 2 brk (+132 KiB / -0 B)
  calls           free 112, malloc 1,110
process 43 (parent 42): static [killed by signal 9]
  allocator not recognised: heap not measured (no known allocator)
benchmark bench::ten (process 42)
  allocations     10 blocks, 1000 B
  frees           10 blocks, 1000 B
  live at end     0 blocks, 0 B
  peak live       1000 B
  mmap/munmap/brk not counted
";
        assert_eq!(render_text(&sample()), want);
        let with_probes = render_text_with(&sample(), TextOptions::with_probe_sites(true));
        let probes = "  calls           free 112, malloc 1,110\n  probe malloc: /lib/libc.so.6 \
                      at 0x98930, entry +0 `push %r12` (emulated), return +0\nprocess 43";
        assert!(with_probes.contains(probes), "{with_probes}");
        assert_eq!(with_probes.lines().count(), want.lines().count() + 1);
    }

    #[test]
    fn a_scope_with_a_timeline_shows_its_heap_as_a_sparkline() {
        use memtrack_record::timeline::{Bucket, TimelineEvent};
        let bucket = |t_ns, min, max, end| Bucket {
            t_ns,
            min_bytes: min,
            max_bytes: max,
            end_bytes: end,
            ..Bucket::default()
        };
        let mut processes = sample();
        processes[0].benchmarks[0].timeline = Some(Timeline {
            bucket_ns: 1 << 20,
            buckets: vec![
                bucket(0, 0, 500, 500),
                bucket(1 << 20, 0, 1000, 0),
                bucket(3 << 20, 0, 0, 0),
            ],
            events: vec![TimelineEvent {
                t_ns: (1 << 20) + 5,
                what: EventKind::Peak { bytes: 1000 },
            }],
            lost_buckets: 0,
        });
        // A timeline whose heap stayed at 0 gets no sparkline.
        processes[0].timeline = Some(Timeline {
            bucket_ns: 1 << 20,
            buckets: vec![bucket(0, 0, 0, 0)],
            ..Timeline::default()
        });
        let text = render_text(&processes);
        // One column a bucket: 500 of 1000 is ▄ (500 * 7 / 1000 = 3), the peak █, then
        // 0 (the third bucket of the grid, not listed, and the last).
        assert!(
            text.ends_with(
                "  peak live       1000 B\n  mmap/munmap/brk not counted\n  \
                 over time       [▄█  ] 4.2 ms, peak at 1.0 ms\n"
            ),
            "{text}"
        );
        assert_eq!(text.matches("over time").count(), 1, "{text}");
    }

    #[test]
    fn json_report_is_the_versioned_records() {
        let results = RunResults::new(sample());
        let json: serde_json::Value = serde_json::from_str(&render_json(&results)).unwrap();
        let top: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(top, ["memtrack_version", "processes", "schema_version"]);
        assert_eq!(json["schema_version"], memtrack_record::SCHEMA_VERSION);
        assert_eq!(json["memtrack_version"], env!("CARGO_PKG_VERSION"));
        let main = &json["processes"][0];
        assert_eq!(main["pid"], 42);
        assert_eq!(main["stats"]["alloc_calls"], 1110);
        assert_eq!(main["stats"]["syscalls"]["brk_grown_bytes"], 135_168);
        assert_eq!(main["benchmarks"][0]["uri"], "bench::ten");
        assert_eq!(
            main["benchmarks"][0]["stats"]["syscalls"],
            serde_json::Value::Null
        );
        assert_eq!(main["earlier_images"][0]["command"][0], "sh");
        assert_eq!(main["probes"][0]["file_offset"], 0x98930);
        assert_eq!(main["allocator"], "Probed");
        assert_eq!(
            json["processes"][1]["allocator"]["NotRecognised"]["reason"],
            "no known allocator"
        );
        // Programs read it back into the same records.
        let read: RunResults = serde_json::from_str(&render_json(&results)).unwrap();
        assert_eq!(read, results);
    }

    /// Each process's (and benchmark's) `"timeline"`: the bucket width, the buckets
    /// with the heap's lowest, highest and end bytes, resident memory and mapped bytes,
    /// and the events tagged by kind.
    #[test]
    fn json_timelines_name_every_series_of_each_bucket() {
        use memtrack_record::timeline::{Bucket, TimelineEvent};
        let mut processes = sample();
        let timeline = Timeline {
            bucket_ns: 1 << 20,
            buckets: vec![Bucket {
                t_ns: 0,
                min_bytes: 1,
                max_bytes: 3,
                end_bytes: 2,
                rss_max_bytes: Some(40_960),
                rss_end_bytes: Some(36_864),
                rss_anon_bytes: Some(8192),
                rss_file_bytes: Some(28_672),
                rss_shmem_bytes: Some(0),
                mapped_max_bytes: Some(135_168),
                mapped_end_bytes: Some(135_168),
            }],
            events: vec![TimelineEvent {
                t_ns: 7,
                what: EventKind::Child { pid: 43 },
            }],
            lost_buckets: 0,
        };
        processes[0].timeline = Some(timeline.clone());
        processes[0].benchmarks[0].timeline = Some(timeline);
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&RunResults::new(processes))).unwrap();
        for scope in [
            &json["processes"][0],
            &json["processes"][0]["benchmarks"][0],
        ] {
            let t = &scope["timeline"];
            assert_eq!(t["bucket_ns"], 1 << 20);
            let bucket = t["buckets"][0].as_object().unwrap();
            let fields: Vec<(&str, u64)> = bucket
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_u64().unwrap()))
                .collect();
            assert_eq!(
                fields,
                [
                    ("end_bytes", 2),
                    ("mapped_end_bytes", 135_168),
                    ("mapped_max_bytes", 135_168),
                    ("max_bytes", 3),
                    ("min_bytes", 1),
                    ("rss_anon_bytes", 8192),
                    ("rss_end_bytes", 36_864),
                    ("rss_file_bytes", 28_672),
                    ("rss_max_bytes", 40_960),
                    ("rss_shmem_bytes", 0),
                    ("t_ns", 0),
                ]
            );
            assert_eq!(
                t["events"][0],
                serde_json::json!({"t_ns": 7, "what": {"kind": "child", "pid": 43}})
            );
        }
    }

    #[test]
    fn a_tree_report_says_where_each_result_was_found() {
        let processes = sample();
        let (first, second) = processes.split_at(1);
        let dirs: [DirResults; 2] = [
            (std::path::Path::new(""), first),
            (std::path::Path::new("criterion/ten"), second),
        ];
        // One directory: exactly the run's report.
        assert_eq!(
            render_json_tree(&dirs[..1]),
            render_json(&RunResults::new(first.to_vec()))
        );
        let json: serde_json::Value = serde_json::from_str(&render_json_tree(&dirs)).unwrap();
        assert_eq!(json["processes"][0].get("result_dir"), None);
        assert_eq!(json["processes"][1]["result_dir"], "criterion/ten");
        let read: RunResults = serde_json::from_value(json).unwrap();
        assert_eq!(read.processes, processes);
        let text = render_text_tree(&dirs, TextOptions::default());
        assert!(
            text.contains(
                "  calls           free 112, malloc 1,110\nbenchmark bench::ten (process 42)\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "results in criterion/ten:\nprocess 43 (parent 42): static [killed by signal 9]\n  \
                 allocator not recognised: heap not measured (no known allocator)\n"
            ),
            "{text}"
        );
    }
}
