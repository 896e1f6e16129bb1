//! Renders results for people (aligned tables, sizes in B/KiB/MiB) and for programs
//! (one JSON object), for `memtrack run` and `memtrack report`.

use serde::Serialize;

use memtrack::{AllocatorStatus, MemtrackResult, ProbeInfo, Stats, format_bytes};

/// What the human report shows besides the numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextOptions {
    /// List where each process's probes sit (`memtrack run --probes`): function,
    /// object, file offset, the entry probe's offset and instruction, the return probe.
    pub probe_sites: bool,
}

/// One benchmark region's counters, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BenchmarkReport {
    /// The benchmark's uri (e.g. `benches/alloc.rs::vec_push`).
    pub uri: String,
    /// The process it ran in.
    pub pid: u32,
    /// Its counters (only calls made inside the benchmark's regions).
    pub stats: Stats,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_sites_say_where_and_how() {
        let probe = ProbeInfo {
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
        };
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

    #[test]
    fn bytes_are_rounded_and_exact() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(104_000), "101.6 KiB (104,000 B)");
        assert_eq!(bytes(1_048_576), "1.0 MiB (1,048,576 B)");
    }
}

#[derive(Serialize)]
struct JsonProcess<'a> {
    pid: u32,
    ppid: u32,
    command: &'a [String],
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    allocator_recognised: bool,
    stats: &'a Stats,
    probes: &'a [ProbeInfo],
}

#[derive(Serialize)]
struct JsonReport<'a> {
    processes: Vec<JsonProcess<'a>>,
    benchmarks: &'a [BenchmarkReport],
}

/// Every benchmark region of every result, in pid order then region order.
pub fn benchmarks_of(results: &[MemtrackResult]) -> Vec<BenchmarkReport> {
    results
        .iter()
        .flat_map(|r| {
            r.benchmarks.iter().map(|b| BenchmarkReport {
                uri: b.uri.clone(),
                pid: r.pid,
                stats: b.stats.clone(),
            })
        })
        .collect()
}

/// The JSON report: `{"processes": [{pid, ppid, command, stats, ..}], "benchmarks":
/// [{uri, pid, stats}]}`, with `stats` using [`Stats`]'s field names.
pub fn render_json(results: &[MemtrackResult]) -> String {
    let benchmarks = benchmarks_of(results);
    let report = JsonReport {
        processes: results
            .iter()
            .map(|r| JsonProcess {
                pid: r.pid,
                ppid: r.ppid,
                command: &r.command,
                exit_code: r.exit_code,
                exit_signal: r.exit_signal,
                allocator_recognised: r.allocator == AllocatorStatus::Probed,
                stats: &r.stats,
                probes: &r.probes,
            })
            .collect(),
        benchmarks: &benchmarks,
    };
    serde_json::to_string_pretty(&report).expect("reports always serialise")
}

/// `1.5 KiB (1,536 B)`: rounded for reading, exact for checking.
pub(crate) fn bytes(n: u64) -> String {
    if n < 1024 {
        return format_bytes(n);
    }
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{} ({grouped} B)", format_bytes(n))
}

fn stats_lines(stats: &Stats, indent: &str) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("{indent}{label:<18} {value}\n"));
    };
    line(
        "allocations",
        format!(
            "{} blocks, {}",
            stats.alloc_calls,
            bytes(stats.bytes_allocated)
        ),
    );
    line(
        "frees",
        format!("{} blocks, {}", stats.free_calls, bytes(stats.bytes_freed)),
    );
    line(
        "live at end",
        format!("{} blocks, {}", stats.live_blocks, bytes(stats.live_bytes)),
    );
    line("peak live", bytes(stats.peak_live_bytes));
    if stats.failed_allocs != 0 {
        line("failed allocs", stats.failed_allocs.to_string());
    }
    if stats.unmatched_frees != 0 {
        line(
            "unmatched frees",
            format!(
                "{} (pointers memtrack did not see allocated)",
                stats.unmatched_frees
            ),
        );
    }
    if stats.lost_events != 0 {
        line(
            "LOST EVENTS",
            format!("{} (numbers above are not exact)", stats.lost_events),
        );
    }
    match &stats.syscalls {
        Some(s) if s.mmap_calls + s.munmap_calls + s.brk_calls != 0 => line(
            "mmap/munmap/brk",
            format!(
                "{} mmap ({}), {} munmap ({}), {} brk (+{} / -{})",
                s.mmap_calls,
                format_bytes(s.mmap_bytes),
                s.munmap_calls,
                format_bytes(s.munmap_bytes),
                s.brk_calls,
                format_bytes(s.brk_grown_bytes),
                format_bytes(s.brk_shrunk_bytes)
            ),
        ),
        Some(_) => {}
        None => line("mmap/munmap/brk", "not counted".to_string()),
    }
    if !stats.functions.is_empty() {
        let calls: Vec<String> = stats
            .functions
            .iter()
            .map(|(name, f)| format!("{name} {}", f.calls))
            .collect();
        line("calls", calls.join(", "));
    }
    out
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
pub fn render_text(results: &[MemtrackResult]) -> String {
    render_text_with(results, TextOptions::default())
}

/// The human report, with what `options` adds.
pub fn render_text_with(results: &[MemtrackResult], options: TextOptions) -> String {
    let benchmarks = benchmarks_of(results);
    let mut out = String::new();
    for r in results {
        let exit = match (r.exit_code, r.exit_signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "still running".to_string(),
        };
        out.push_str(&format!(
            "process {} (parent {}): {} [{exit}]\n",
            r.pid,
            r.ppid,
            r.command.join(" ")
        ));
        for image in &r.earlier_images {
            out.push_str(&format!(
                "  before exec, as {}: {} blocks, {} allocated, {} live at exec\n",
                image.command.join(" "),
                image.stats.alloc_calls,
                bytes(image.stats.bytes_allocated),
                bytes(image.stats.live_bytes)
            ));
        }
        match &r.allocator {
            AllocatorStatus::Probed => out.push_str(&stats_lines(&r.stats, "  ")),
            AllocatorStatus::NotRecognised { reason } => {
                out.push_str(&format!(
                    "  allocator not recognised: heap not measured ({reason})\n"
                ));
            }
        }
        if options.probe_sites {
            for probe in &r.probes {
                out.push_str(&format!("  {}\n", probe_line(probe)));
            }
        }
    }
    for b in &benchmarks {
        out.push_str(&format!("benchmark {} (process {})\n", b.uri, b.pid));
        out.push_str(&stats_lines(&b.stats, "  "));
    }
    out
}
