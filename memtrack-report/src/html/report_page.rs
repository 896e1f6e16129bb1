//! `memtrack report --html`: the page of a run (or a tree of runs).

use std::{collections::BTreeMap, fmt::Write as _, path::PathBuf};

use base64::Engine as _;
use memtrack_record::TrackedProcess;
use plotly::Plot;

use super::{
    FRAMES_SHOWN, MAX_FLAMEGRAPHS, MAX_LISTED, MAX_SECTIONS, MAX_STACK_SECTIONS, Scope, ScopeKind,
    TOP_STACKS, chart, escape, page, scopes, scopes_left_out,
};
use crate::{
    Result,
    export::flamegraph::{self, FlameMetric},
    limits::DirResults,
    report, sparkline,
    stack_profile::StackProfile,
    stacks_report,
    units::{bytes, count, duration},
};

/// The stacks of each image of the processes that have them (as
/// [`ScopeChoice::Process`](crate::stack_profile::ScopeChoice::Process) resolves them),
/// by (results directory relative to the one given, pid, image: 1 for the first).
pub type StacksByPlace = BTreeMap<(PathBuf, u32, usize), StackProfile>;

/// The flamegraphs' width, pixels (their frame scrolls when narrower).
const FLAME_WIDTH: usize = 1200;

/// The narrowest frame the page's flamegraphs draw, percent of their width (the
/// exports' is inferno's 0.1%): at most 200 frames a level, which bounds each SVG.
const FLAME_MIN_WIDTH: f64 = 0.5;

/// Columns of the list's sparklines.
const LIST_SPARK: usize = 24;

/// The page of the results in `dirs` (found in `source`), with the stacks of
/// `stacks`.
pub fn render_report(
    source: &std::path::Path,
    dirs: &[DirResults],
    stacks: &StacksByPlace,
) -> Result<String> {
    let all = scopes(dirs);
    let kinds = |kind| all.iter().filter(|s| s.kind == kind).count() as u64;
    let mut header = format!(
        "<p>{}, {}, {} from <code>{}</code> (memtrack {}). Pick one in the list (biggest \
         first); drag over the chart to zoom on a time range, double-click to zoom out.</p>\n",
        processes(kinds(ScopeKind::Process)),
        count(kinds(ScopeKind::EarlierImage), "earlier image"),
        count(kinds(ScopeKind::Benchmark), "benchmark"),
        escape::text(&source.display().to_string()),
        env!("CARGO_PKG_VERSION"),
    );
    let mut notes = scopes_left_out(all.len());
    let with_stacks: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, s)| stacks_of(stacks, s).is_some())
        .map(|(i, _)| i)
        .collect();
    let shown_stacks: Vec<usize> = with_stacks
        .iter()
        .copied()
        .filter(|&i| i < MAX_SECTIONS)
        .take(MAX_STACK_SECTIONS)
        .collect();
    if shown_stacks.len() < with_stacks.len() {
        notes.push(format!(
            "Stacks are shown for the {} biggest of the {} processes and images with \
             stacks (`memtrack report --stacks` shows each directory's).",
            shown_stacks.len(),
            with_stacks.len()
        ));
    }
    if shown_stacks.len() > MAX_FLAMEGRAPHS {
        notes.push(format!(
            "Flamegraphs are drawn for the {MAX_FLAMEGRAPHS} biggest of them \
             (`memtrack report --stacks --flamegraph-dir` writes any)."
        ));
    }
    for note in &notes {
        let _ = writeln!(header, "<p class=\"note\">{}</p>", escape::text(note));
    }

    let mut rows = String::new();
    for (i, s) in all.iter().enumerate().take(MAX_LISTED) {
        let spark = s
            .timeline
            .map(|t| sparkline::sparkline(t, LIST_SPARK))
            .unwrap_or_default();
        let full = escape::text(&place_title(s));
        let name = escape::text(&short(&list_title(s), LIST_TITLE));
        let (open, cell) = if i < MAX_SECTIONS {
            (
                format!("<tr data-scope=\"s{i}\" title=\"{full}\">"),
                format!("<a href=\"#s{i}\">{name}</a>"),
            )
        } else {
            (format!("<tr title=\"{full}\">"), name)
        };
        let _ = writeln!(
            rows,
            "{open}<td class=\"cmd\">{cell}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"spark\">{}</td></tr>",
            escape::text(&crate::units::size(s.stats.peak_live_bytes)),
            escape::text(&crate::units::size(s.stats.bytes_allocated)),
            escape::text(&spark),
        );
    }

    let mut sections = String::new();
    let mut charts = Vec::new();
    for (i, s) in all.iter().enumerate().take(MAX_SECTIONS) {
        let id = format!("s{i}");
        let _ = writeln!(
            sections,
            "{}<h2>{}</h2>",
            page::section_open(&id),
            escape::text(&s.title)
        );
        let _ = writeln!(sections, "<p>{}</p>", escape::text(&facts(s)));
        if let Some(t) = s.timeline.filter(|t| !t.buckets.is_empty()) {
            let mut plot = Plot::new();
            chart::traces(&mut plot, t, 0, "", chart::BLUE);
            plot.set_layout(chart::layout("the process started", &chart::regions(t), 0));
            charts.push((id.clone(), plot.to_json()));
            sections.push_str(&page::chart_div(&id));
        } else {
            sections.push_str("<p>No timeline was recorded.</p>\n");
        }
        sections.push_str(&page::rows_table(
            "counters",
            &report::scope_rows(s.stats, s.timeline),
        ));
        if let Some(position) = shown_stacks.iter().position(|&j| j == i)
            && let Some(profile) = stacks_of(stacks, s)
        {
            stacks_html(&mut sections, profile);
            if position < MAX_FLAMEGRAPHS {
                flamegraphs_html(&mut sections, profile)?;
            }
        }
        sections.push_str("</section>\n");
    }
    Ok(page::Page {
        title: "memtrack report".to_string(),
        header,
        list_head: "<th>pid and command, image or benchmark</th><th class=\"n\">peak</th>\
                    <th class=\"n\">allocated</th><th>heap over time</th>"
            .to_string(),
        list_rows: rows,
        sections,
        charts,
    }
    .render())
}

/// `1 process`, `2 processes`.
pub(super) fn processes(n: u64) -> String {
    let noun = if n == 1 { "process" } else { "processes" };
    format!("{} {noun}", crate::units::exact(n))
}

/// Characters of a scope's name in the list (the whole name is its row's tooltip and
/// its section's heading).
const LIST_TITLE: usize = 64;

/// `text` cut to `max` characters, `…` ending a cut one.
pub(super) fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A scope's name in the list: its title with the program's directory left out
/// (`process 12: python3 -c ...` for `/usr/bin/python3 -c ...`), and its directory.
fn list_title(s: &Scope) -> String {
    let program = |command: &[String]| {
        let mut parts = command.to_vec();
        if let Some(first) = parts.first_mut()
            && let Some((_, name)) = first.rsplit_once('/')
        {
            *first = name.to_string();
        }
        parts.join(" ")
    };
    let pid = s.process.pid;
    let title = match s.kind {
        ScopeKind::Process => format!("{pid} {}", program(s.command)),
        ScopeKind::EarlierImage => format!("{pid} before exec: {}", program(s.command)),
        ScopeKind::Benchmark => s.title.clone(),
    };
    if s.dir.as_os_str().is_empty() {
        title
    } else {
        format!("{title} in {}", s.dir.display())
    }
}

/// The scope's title, with its directory when it is below the one given.
fn place_title(s: &Scope) -> String {
    if s.dir.as_os_str().is_empty() {
        s.title.clone()
    } else {
        format!("{} in {}", s.title, s.dir.display())
    }
}

/// The stacks of a process or an earlier image (a benchmark's are not shown).
fn stacks_of<'a>(stacks: &'a StacksByPlace, s: &Scope) -> Option<&'a StackProfile> {
    if s.kind == ScopeKind::Benchmark {
        return None;
    }
    stacks.get(&(s.dir.to_path_buf(), s.process.pid, s.image))
}

/// How the process ended, for people.
fn exit_text(p: &TrackedProcess) -> String {
    match (p.exit_code, p.exit_signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "still running when its results were saved".to_string(),
    }
}

/// The scope's facts in one line: where, parent, exit, how long its timeline lasts.
fn facts(s: &Scope) -> String {
    let p = s.process;
    let mut out = format!("pid {}, parent {}, {}", p.pid, p.ppid, exit_text(p));
    if !s.dir.as_os_str().is_empty() {
        let _ = write!(out, "; results in {}", s.dir.display());
    }
    if let Some(t) = s.timeline.filter(|t| !t.buckets.is_empty()) {
        let _ = write!(
            out,
            "; timeline {} to {} after the process started, {} buckets of {} ns",
            duration(t.start_ns()),
            duration(t.end_ns()),
            t.end_ns().saturating_sub(t.start_ns()) / t.bucket_ns,
            t.bucket_ns
        );
        if t.lost_buckets != 0 {
            let _ = write!(out, " ({} lost: an extreme may be missing)", t.lost_buckets);
        }
    }
    if s.unfinished {
        out.push_str("; UNFINISHED: the process ended inside it, the counters are partial");
    }
    if !s.measured() {
        out.push_str("; allocator not recognised: heap not measured");
    }
    out
}

/// What a ranking of stacks sorts by: (bytes, blocks) of a stack's counters.
type Ranked = fn(&memtrack_record::stacks::StackCounts) -> (u64, u64);

/// The top stacks of a process: totals, then the stacks at the peak and by bytes
/// allocated.
fn stacks_html(out: &mut String, p: &StackProfile) {
    let t = &p.total;
    let real = p.stacks.iter().filter(|s| s.id.is_some()).count() as u64;
    let _ = writeln!(
        out,
        "<h3>Allocation stacks</h3>\n<p>{}</p>",
        escape::text(&format!(
            "{} (depth limit {}): allocated {} in {}; at peak {} in {}; live at end {} in {}",
            count(real, "stack"),
            p.depth_limit,
            bytes(t.alloc_bytes),
            count(t.alloc_blocks, "block"),
            bytes(t.at_peak_bytes),
            count(t.at_peak_blocks, "block"),
            bytes(t.live_bytes),
            count(t.live_blocks, "block"),
        ))
    );
    for mismatch in p.mismatches() {
        let _ = writeln!(
            out,
            "<p class=\"note\">differs from the counters: {}</p>",
            escape::text(&mismatch)
        );
    }
    let texts = stacks_report::frame_texts(&p.stacks);
    let rankings: [(&str, Ranked, u64); 2] = [
        (
            "at the peak (t-gmax)",
            |c| (c.at_peak_bytes, c.at_peak_blocks),
            t.at_peak_bytes,
        ),
        (
            "by bytes allocated",
            |c| (c.alloc_bytes, c.alloc_blocks),
            t.alloc_bytes,
        ),
    ];
    for (heading, metric, total) in rankings {
        let mut order: Vec<usize> = (0..p.stacks.len())
            .filter(|&i| metric(&p.stacks[i].counts).0 != 0)
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(metric(&p.stacks[i].counts).0));
        let _ = writeln!(
            out,
            "<h4>Top stacks {heading}: {} of {}</h4>",
            order.len().min(TOP_STACKS),
            order.len()
        );
        if order.is_empty() {
            continue;
        }
        out.push_str(
            "<table class=\"stacks\"><tr><th>bytes</th><th>blocks</th><th>share</th>\
             <th>stack (the allocation first)</th></tr>\n",
        );
        for &i in order.iter().take(TOP_STACKS) {
            let (b, blocks) = metric(&p.stacks[i].counts);
            let share = if total == 0 {
                0.0
            } else {
                b as f64 * 100.0 / total as f64
            };
            let frames = &texts[i];
            let mut cell: Vec<String> = frames
                .iter()
                .take(FRAMES_SHOWN)
                .map(|f| escape::text(f))
                .collect();
            if frames.len() > FRAMES_SHOWN {
                cell.push(format!(
                    "… {} more",
                    count((frames.len() - FRAMES_SHOWN) as u64, "frame")
                ));
            }
            let _ = writeln!(
                out,
                "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{share:.1}%</td>\
                 <td class=\"frames\">{}</td></tr>",
                escape::text(&bytes(b)),
                escape::text(&crate::units::exact(blocks)),
                cell.join("<br>")
            );
        }
        out.push_str("</table>\n");
    }
}

/// The flamegraphs of bytes allocated and at the peak, inferno's SVGs in sandboxed
/// frames (from `data:` URLs: their own script zooms and searches, inside the frame),
/// loaded by the page's script when they can be seen.
fn flamegraphs_html(out: &mut String, p: &StackProfile) -> Result<()> {
    out.push_str("<h3>Flamegraphs</h3>\n");
    for (metric, open) in [(FlameMetric::Allocated, " open"), (FlameMetric::AtPeak, "")] {
        let svg = flamegraph::render_sized(
            std::slice::from_ref(p),
            metric,
            Some(FLAME_WIDTH),
            FLAME_MIN_WIDTH,
        )?;
        let _ = writeln!(
            out,
            "<details{open}><summary>{}</summary><iframe class=\"flame\" sandbox=\"allow-scripts\" \
             title=\"{}\" style=\"height: {}px\" data-src=\"data:image/svg+xml;base64,{}\">\
             </iframe></details>",
            escape::text(metric.title()),
            escape::text(metric.title()),
            svg_height(&svg).map_or(520, |h| h + 24),
            base64::engine::general_purpose::STANDARD.encode(&svg)
        );
    }
    Ok(())
}

/// The height of an SVG (its root's `height="N"`), pixels.
fn svg_height(svg: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(svg).ok()?;
    let root = &text[text.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let at = root.find(" height=\"")? + " height=\"".len();
    let digits: String = root[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        stack_profile::{Place, ShownFrame, ShownStack},
        symbolize::LogicalFrame,
    };
    use memtrack_record::{
        AllocatorStatus, BenchmarkStats, Stats,
        stacks::StackCounts,
        timeline::{Bucket, EventKind, MAX_BUCKETS, Timeline, TimelineEvent},
    };
    use std::path::Path;

    const HOSTILE: &str = r#"</script><img src=x onerror="alert('x')">'"#;

    /// A full timeline: every one of the most buckets listed, with resident memory,
    /// mapped bytes and an event every 16 buckets, its peak `peak`.
    fn full_timeline(peak: u64) -> Timeline {
        let buckets = (0..MAX_BUCKETS as u64)
            .map(|i| {
                let v = peak * (i % 97) / 96;
                Bucket {
                    t_ns: i << 20,
                    min_bytes: v / 2,
                    max_bytes: v.min(peak),
                    end_bytes: v / 2,
                    rss_max_bytes: Some(3 * v + 123_456_789),
                    rss_end_bytes: Some(3 * v + 123_456_789),
                    rss_anon_bytes: Some(3 * v),
                    rss_file_bytes: Some(123_456_789),
                    rss_shmem_bytes: Some(0),
                    mapped_max_bytes: Some(5 * v + 987_654_321),
                    mapped_end_bytes: Some(5 * v + 987_654_321),
                }
            })
            .collect();
        let events = (0..MAX_BUCKETS as u64 / 16)
            .map(|i| TimelineEvent {
                t_ns: (i * 16) << 20,
                what: EventKind::Child { pid: i as u32 },
            })
            .collect();
        Timeline {
            bucket_ns: 1 << 20,
            buckets,
            events,
            lost_buckets: 0,
        }
    }

    fn process(pid: u32, peak: u64) -> TrackedProcess {
        let mut p =
            TrackedProcess::new(pid, 1, vec![format!("/usr/bin/prog{pid}"), HOSTILE.into()]);
        p.allocator = AllocatorStatus::Probed;
        p.exit_code = Some(0);
        p.stats.peak_live_bytes = peak;
        p.stats.bytes_allocated = 2 * peak;
        p.timeline = Some(full_timeline(peak));
        p
    }

    /// A profile of `n` distinct stacks of 8 frames each.
    fn profile(pid: u32, n: u64) -> StackProfile {
        let stacks: Vec<ShownStack> = (0..n)
            .map(|i| ShownStack {
                id: Some(i as u32),
                frames: (0..8)
                    .map(|depth| ShownFrame {
                        place: Place::Anonymous {
                            address: 0x1000 + i * 8 + depth,
                            interrupted: false,
                        },
                        logical: vec![LogicalFrame {
                            function: format!("f{}_{depth}{HOSTILE}", i % (1000 >> depth).max(1)),
                            location: None,
                            inlined: false,
                        }],
                        symbolized: true,
                    })
                    .collect(),
                counts: StackCounts {
                    alloc_blocks: 1,
                    alloc_bytes: 100 + i,
                    at_peak_blocks: 1,
                    at_peak_bytes: i % 1000,
                    ..StackCounts::default()
                },
            })
            .collect();
        let mut total = StackCounts::default();
        for s in &stacks {
            total.alloc_blocks += s.counts.alloc_blocks;
            total.alloc_bytes += s.counts.alloc_bytes;
            total.at_peak_blocks += s.counts.at_peak_blocks;
            total.at_peak_bytes += s.counts.at_peak_bytes;
        }
        StackProfile {
            pid,
            command: vec!["prog".into()],
            image: 1,
            images: 1,
            benchmark: None,
            started_unix_ms: 0,
            start_ns: 0,
            end_ns: 1 << 30,
            peak_ns: None,
            peak_bytes_allocated: None,
            bytes_allocated: None,
            depth_limit: 64,
            stacks,
            total,
            counters: None,
            problems: Vec::new(),
            regions: Vec::new(),
            earlier_images: Vec::new(),
        }
    }

    /// The page without plotly.js (its fixed 4.6 MB).
    fn own_part(page: &str) -> String {
        page.replace(&page::plotly_js(), "")
    }

    #[test]
    fn a_thousand_processes_and_100000_stacks_stay_bounded_and_say_what_is_left_out() {
        let mut processes: Vec<TrackedProcess> = (1..=1000)
            .map(|pid| process(pid, u64::from(pid) * 1000))
            .collect();
        let mut region = Stats::default();
        region.peak_live_bytes = 10;
        processes[0].benchmarks = vec![BenchmarkStats::new(HOSTILE, region)];
        let dirs: [DirResults; 1] = [(Path::new(""), &processes)];
        // The biggest process has 100,000 stacks, 29 others 1,000 each.
        let mut stacks = StacksByPlace::new();
        stacks.insert((PathBuf::new(), 1000, 1), profile(1000, 100_000));
        for pid in 970..1000 - 1 {
            stacks.insert((PathBuf::new(), pid, 1), profile(pid, 1_000));
        }
        let started = std::time::Instant::now();
        let page = render_report(Path::new("results"), &dirs, &stacks).unwrap();
        let took = started.elapsed();
        if let Some(path) = std::env::var_os("MEMTRACK_HTML_SAMPLE") {
            std::fs::write(path, &page).unwrap();
        }
        let flames: usize = page
            .split("data-src=\"")
            .skip(1)
            .map(|rest| rest.find('"').unwrap_or(0))
            .sum();
        let charts = page
            .split("id=\"memtrack-charts\">")
            .nth(1)
            .and_then(|rest| rest.find("</script>"))
            .unwrap_or(0);
        eprintln!(
            "1,000 processes, 100,000 stacks: {} bytes in {took:?} ({flames} of flamegraphs, \
             {charts} of charts' data)",
            page.len()
        );
        // Bounded: the sections, the stacks and the flamegraphs.
        assert!(page.len() < 16 << 20, "{} bytes", page.len());
        assert_eq!(
            page.matches("<section class=\"scope\"").count(),
            MAX_SECTIONS
        );
        assert_eq!(page.matches("<tr data-scope=").count(), MAX_SECTIONS);
        assert_eq!(page.matches("<tr title=").count(), 1001 - MAX_SECTIONS);
        assert_eq!(
            page.matches("<h3>Allocation stacks</h3>").count(),
            MAX_STACK_SECTIONS
        );
        assert_eq!(
            page.matches("<iframe class=\"flame\"").count(),
            2 * MAX_FLAMEGRAPHS
        );
        assert!(page.contains("<h4>Top stacks at the peak (t-gmax): 10 of 99900</h4>"));
        assert!(page.contains("<h4>Top stacks by bytes allocated: 10 of 100000</h4>"));
        // Said on the page.
        assert!(page.contains(
            "<p class=\"note\">Only the 50 biggest of the 1001 processes, images and benchmarks"
        ));
        assert!(page.contains(
            "<p class=\"note\">Stacks are shown for the 20 biggest of the 30 processes and \
             images with stacks"
        ));
        assert!(page.contains("<p class=\"note\">Flamegraphs are drawn for the 5 biggest of them"));
        // No name comes through as markup.
        let own = own_part(&page);
        assert_eq!(own.matches("</script>").count(), 3);
        assert!(!own.contains("<img"));
    }

    #[test]
    fn sections_hold_the_counters_the_sparkline_and_the_chart_of_each_scope() {
        let mut p = process(7, 96_000);
        p.ppid = 3;
        let processes = [p];
        let dirs: [DirResults; 1] = [(Path::new("criterion/a"), &processes)];
        let page =
            render_report(Path::new("target/memtrack"), &dirs, &StacksByPlace::new()).unwrap();
        let own = own_part(&page);
        assert!(own.contains(
            "<p>1 process, 0 earlier images, 0 benchmarks from <code>target/memtrack</code>"
        ));
        assert!(own.contains(
            "<p>pid 7, parent 3, exit 0; results in criterion/a; timeline 0.0 ms to 1.07 s \
             after the process started, 1024 buckets of 1048576 ns</p>"
        ));
        assert!(own.contains("<tr><th>peak live</th><td>93.8 KiB (96,000 B)</td></tr>"));
        let spark = sparkline::sparkline(processes[0].timeline.as_ref().unwrap(), sparkline::WIDTH);
        assert!(own.contains(&format!(
            "<tr><th>over time</th><td>[{spark}] 1.07 s</td></tr>"
        )));
        assert!(own.contains("<div class=\"chart\" id=\"chart-s0\"></div>"));
        assert_eq!(own.matches("\"s0\":{\"data\":[").count(), 1);
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(short("abc", 4), "abc");
        assert_eq!(
            svg_height(b"<?xml?><svg version=\"1.1\" width=\"1200\" height=\"262\" x=\"1\">"),
            Some(262)
        );
        assert_eq!(svg_height(b"<svg width=\"1\">"), None);
    }
}
