//! The HTML pages: `memtrack report --html FILE DIR` (every process, earlier image and
//! benchmark of a run, or of a tree of runs) and `memtrack diff --html FILE BASE NEW`
//! (both runs' timelines overlaid per matched process and benchmark, with the counters'
//! changes).
//!
//! Each page is one self-contained file that opens from disk with no network: its
//! style, its script and the chart library (plotly.js, shipped in the `plotly` crate
//! and put inline) are in it, and its Content-Security-Policy lets it load nothing
//! else. A list of every scope, biggest first (by peak live bytes, then bytes
//! allocated), picks the one shown: its timeline chart (zoom by dragging over a time
//! range, values on hover; [`chart`]), its counters, and with stacks its top stacks at
//! the peak and by bytes allocated and its flamegraphs (inferno's SVGs, in sandboxed
//! frames).
//!
//! The page stays bounded whatever the run: at most [`MAX_SECTIONS`] scopes get a
//! section (the biggest), [`MAX_LISTED`] are listed, [`TOP_STACKS`] stacks per ranking
//! for at most [`MAX_STACK_SECTIONS`] processes or images, flamegraphs for
//! [`MAX_FLAMEGRAPHS`];
//! the page says what it left out. Every string from the results (commands, uris,
//! directories, function names) is escaped ([`escape`]): a name cannot add markup or
//! script to the page.

pub mod chart;
mod diff_page;
pub mod escape;
mod page;
mod report_page;

pub use diff_page::render_diff;
pub use report_page::{StacksByPlace, render_report};

use std::path::Path;

use memtrack_record::{AllocatorStatus, Stats, TrackedProcess, timeline::Timeline};

use crate::limits::DirResults;

/// The most scopes with a section of their own (chart, counters, stacks).
pub const MAX_SECTIONS: usize = 50;
/// The most scopes in the list to pick from.
pub const MAX_LISTED: usize = 2_000;
/// Stacks shown per ranking (at the peak, by bytes allocated).
pub const TOP_STACKS: usize = 10;
/// The most processes (or earlier images) whose top stacks are shown.
pub const MAX_STACK_SECTIONS: usize = 20;
/// The most processes whose flamegraphs are in the page.
pub const MAX_FLAMEGRAPHS: usize = 5;
/// Logical frames shown of each top stack (the allocation's first).
pub const FRAMES_SHOWN: usize = 12;

/// Writes a page to `path` (mode 0600, never through a symbolic link, an existing
/// regular file replaced), as the exports are written.
pub fn write(path: &Path, page: &str) -> crate::Result<()> {
    crate::export::write_file(path, page.as_bytes())
}

/// What a scope of the page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeKind {
    /// A process (the image it ran last).
    Process,
    /// An image a process ran before its last exec.
    EarlierImage,
    /// A benchmark region.
    Benchmark,
}

/// One process, earlier image or benchmark region of the page.
#[derive(Clone, Debug)]
pub struct Scope<'a> {
    /// What it is.
    pub kind: ScopeKind,
    /// `process 12: make -j2`, `process 12 before exec: sh -c ...`, `benchmark URI
    /// (process 12)` (unescaped).
    pub title: String,
    /// The results directory it was found in, relative to the one given.
    pub dir: &'a Path,
    /// Its process.
    pub process: &'a TrackedProcess,
    /// The command line of its image (the process's last for a benchmark).
    pub command: &'a [String],
    /// Which image of the process it is: 1 for the first it ran, up to its earlier
    /// images plus 1 for the last (a benchmark's is its process's last).
    pub image: usize,
    /// Its counters.
    pub stats: &'a Stats,
    /// Its memory over time, if recorded.
    pub timeline: Option<&'a Timeline>,
    /// A benchmark that did not finish.
    pub unfinished: bool,
}

impl Scope<'_> {
    /// Whether its counters measure the heap (its process's allocator was probed).
    pub fn measured(&self) -> bool {
        self.process.allocator == AllocatorStatus::Probed
    }
}

/// Every scope of `dirs`, biggest first: by peak live bytes, then bytes allocated,
/// then in the order found (directory, process, its earlier images, its benchmarks).
pub fn scopes<'a>(dirs: &[DirResults<'a>]) -> Vec<Scope<'a>> {
    let mut out = Vec::new();
    for &(dir, processes) in dirs {
        for p in processes {
            let command = p.command.join(" ");
            out.push(Scope {
                kind: ScopeKind::Process,
                title: format!("process {}: {command}", p.pid),
                dir,
                process: p,
                command: &p.command,
                image: p.earlier_images.len() + 1,
                stats: &p.stats,
                timeline: p.timeline.as_ref(),
                unfinished: false,
            });
            for (i, image) in p.earlier_images.iter().enumerate() {
                out.push(Scope {
                    kind: ScopeKind::EarlierImage,
                    title: format!("process {} before exec: {}", p.pid, image.command.join(" ")),
                    dir,
                    process: p,
                    command: &image.command,
                    image: i + 1,
                    stats: &image.stats,
                    timeline: image.timeline.as_ref(),
                    unfinished: false,
                });
            }
            for b in &p.benchmarks {
                out.push(Scope {
                    kind: ScopeKind::Benchmark,
                    title: format!("benchmark {} (process {})", b.uri, p.pid),
                    dir,
                    process: p,
                    command: &p.command,
                    image: p.earlier_images.len() + 1,
                    stats: &b.stats,
                    timeline: b.timeline.as_ref(),
                    unfinished: b.unfinished,
                });
            }
        }
    }
    // A stable sort: equal scopes keep the order found.
    out.sort_by_key(|s| std::cmp::Reverse((s.stats.peak_live_bytes, s.stats.bytes_allocated)));
    out
}

/// What a page of `total` scopes leaves out, in sentences (none when it shows all):
/// the scopes past [`MAX_SECTIONS`] (listed, without a section) and past
/// [`MAX_LISTED`] (not listed).
pub fn scopes_left_out(total: usize) -> Vec<String> {
    let mut out = Vec::new();
    if total > MAX_SECTIONS {
        out.push(format!(
            "Only the {MAX_SECTIONS} biggest of the {total} processes, images and \
             benchmarks have a chart and counters here; the others are listed with their \
             peak and bytes allocated (`memtrack report --json` has everything)."
        ));
    }
    if total > MAX_LISTED {
        out.push(format!(
            "The list stops at the {MAX_LISTED} biggest: {} smaller ones are left out.",
            total - MAX_LISTED
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::{BenchmarkStats, ImageStats};

    fn process(pid: u32, peak: u64, allocated: u64) -> TrackedProcess {
        let mut p = TrackedProcess::new(pid, 1, vec![format!("cmd{pid}")]);
        p.stats.peak_live_bytes = peak;
        p.stats.bytes_allocated = allocated;
        p
    }

    #[test]
    fn scopes_are_biggest_first_and_name_what_they_are() {
        let mut a = process(1, 100, 5000);
        let mut image = Stats::default();
        image.peak_live_bytes = 300;
        a.earlier_images = vec![ImageStats::new(vec!["sh".into()], image)];
        let mut region = Stats::default();
        region.peak_live_bytes = 100;
        region.bytes_allocated = 6000;
        a.benchmarks = vec![BenchmarkStats::new("b::one", region).into_unfinished()];
        let b = process(2, 100, 5000);
        let c = process(3, 200, 1);
        let found = [a, b, c];
        let dirs: [DirResults; 1] = [(Path::new("sub"), &found)];
        let got: Vec<(String, ScopeKind, bool)> = scopes(&dirs)
            .into_iter()
            .map(|s| (s.title, s.kind, s.unfinished))
            .collect();
        let want = [
            ("process 1 before exec: sh", ScopeKind::EarlierImage, false),
            ("process 3: cmd3", ScopeKind::Process, false),
            ("benchmark b::one (process 1)", ScopeKind::Benchmark, true),
            ("process 1: cmd1", ScopeKind::Process, false),
            ("process 2: cmd2", ScopeKind::Process, false),
        ]
        .map(|(t, k, u)| (t.to_string(), k, u));
        assert_eq!(got, want);
    }

    #[test]
    fn what_is_left_out_is_said() {
        assert!(scopes_left_out(MAX_SECTIONS).is_empty());
        let some = scopes_left_out(MAX_SECTIONS + 1);
        assert_eq!(some.len(), 1);
        assert!(
            some[0].starts_with("Only the 50 biggest of the 51 "),
            "{some:?}"
        );
        let many = scopes_left_out(MAX_LISTED + 5);
        assert_eq!(
            many[1],
            "The list stops at the 2000 biggest: 5 smaller ones are left out."
        );
    }
}
