//! What the integrations print for people: one line per counted benchmark and a table
//! of benchmarks, every number exact (bytes in B, thousands separated by `,`).

use memtrack::{BenchmarkStats, Stats};
use num_format::{Locale, ToFormattedString};
use tabled::{
    builder::Builder,
    settings::{Alignment, Padding, Style, object::Columns},
};

/// `1234567` as `1,234,567`.
fn exact(n: u64) -> String {
    n.to_formatted_string(&Locale::en)
}

/// A byte count, exact: `1,024 B`.
fn exact_bytes(n: u64) -> String {
    format!("{} B", exact(n))
}

/// One line on one benchmark's counts, exact: `memtrack URI: 3 allocs, 192 B allocated,
/// peak 192 B live, 0 B live at end (one iteration)`.
pub fn summary_line(uri: &str, stats: &Stats) -> String {
    // A newline or escape sequence in the name must not break the line.
    let uri = memtrack::record::escape_control(uri);
    let mut line = format!(
        "memtrack {uri}: {} alloc{}, {} allocated, peak {} live, {} live at end (one \
         iteration)",
        exact(stats.alloc_calls),
        if stats.alloc_calls == 1 { "" } else { "s" },
        exact_bytes(stats.bytes_allocated),
        exact_bytes(stats.peak_live_bytes),
        exact_bytes(stats.live_bytes),
    );
    if stats.lost_events != 0 {
        line.push_str(&format!(" [{} lost events: not exact]", stats.lost_events));
    }
    line
}

/// A header and one row per benchmark: its uri (control characters escaped, so a
/// newline in it cannot break the table), allocation calls, bytes allocated, peak
/// live bytes and bytes live at the end, all exact, columns two spaces apart, the
/// numbers right-aligned. A row whose counts are not exact (lost events) says so after
/// its last column. Every line ends with `\n`, none with spaces.
pub fn benchmark_table(benchmarks: &[BenchmarkStats]) -> String {
    let mut builder = Builder::default();
    builder.push_record([
        "benchmark",
        "allocs",
        "allocated",
        "peak live",
        "live at end",
        "",
    ]);
    for b in benchmarks {
        let s = &b.stats;
        let note = if s.lost_events == 0 {
            String::new()
        } else {
            format!("({} lost events: not exact)", s.lost_events)
        };
        builder.push_record([
            memtrack::record::escape_control(&b.uri).into_owned(),
            exact(s.alloc_calls),
            exact_bytes(s.bytes_allocated),
            exact_bytes(s.peak_live_bytes),
            exact_bytes(s.live_bytes),
            note,
        ]);
    }
    let mut table = builder.build();
    table
        .with(Style::empty())
        .with(Padding::zero())
        .modify(Columns::new(1..5), Alignment::right())
        .modify(Columns::new(1..), Padding::new(2, 0, 0, 0));
    // The note column is padded to its widest note: rows without one end in spaces.
    let mut out = String::new();
    for line in table.to_string().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(uri: &str, allocs: u64, bytes: u64, peak: u64, live: u64) -> BenchmarkStats {
        let mut stats = Stats::default();
        stats.alloc_calls = allocs;
        stats.bytes_allocated = bytes;
        stats.peak_live_bytes = peak;
        stats.live_bytes = live;
        BenchmarkStats::new(uri, stats)
    }

    #[test]
    fn table_is_aligned_and_exact() {
        let mut lossy = bench("b::lossy", 2, 2_000_000, 1_000_000, 0);
        lossy.stats.lost_events = 3;
        let table = benchmark_table(&[bench("a::three", 3, 192, 192, 0), lossy]);
        assert_eq!(
            table,
            "benchmark  allocs    allocated    peak live  live at end\n\
             a::three        3        192 B        192 B          0 B\n\
             b::lossy        2  2,000,000 B  1,000,000 B          0 B  (3 lost events: not exact)\n"
        );
        assert_eq!(
            benchmark_table(&[]),
            "benchmark  allocs  allocated  peak live  live at end\n"
        );
    }

    #[test]
    fn summary_lines_are_exact() {
        let mut b = bench("x", 1234, 1_234_567, 1000, 999);
        assert_eq!(
            summary_line(&b.uri, &b.stats),
            "memtrack x: 1,234 allocs, 1,234,567 B allocated, peak 1,000 B live, 999 B live at \
             end (one iteration)"
        );
        b.stats.lost_events = 2;
        assert!(
            summary_line(&b.uri, &b.stats).ends_with("(one iteration) [2 lost events: not exact]")
        );
        let one = bench("y", 1, 8, 8, 8);
        assert!(
            summary_line(&one.uri, &one.stats).starts_with("memtrack y: 1 alloc, 8 B allocated"),
            "{}",
            summary_line(&one.uri, &one.stats)
        );
    }

    /// A newline or an escape sequence in a name stays in its row, escaped.
    #[test]
    fn control_characters_in_names_are_escaped() {
        let table = benchmark_table(&[
            bench("two\nlines", 1, 8, 8, 0),
            bench("\u{1b}[2J", 1, 8, 8, 0),
        ]);
        assert_eq!(
            table,
            "benchmark   allocs  allocated  peak live  live at end\n\
             two\\nlines       1        8 B        8 B          0 B\n\
             \\u{1b}[2J        1        8 B        8 B          0 B\n"
        );
        assert!(summary_line("a\tb", &Stats::default()).starts_with("memtrack a\\tb: 0 allocs"));
    }
}
