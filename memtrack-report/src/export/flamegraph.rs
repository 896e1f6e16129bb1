//! Flamegraph SVGs with inferno: `allocated.svg` (bytes allocated), `peak.svg` (bytes
//! live at the peak, t-gmax) and `leaked.svg` (bytes live at the end), each from the
//! same stacks as the other views.
//!
//! The stacks go to inferno collapsed (`root;...;leaf bytes`): the root frame is the
//! process (`pid 123: command`, `pid 123 (image 1 of 2): command` for an image of a
//! process that called `execve`, or the benchmark), then the stack outermost first, one
//! frame per logical frame (inlined functions are frames of their own), named by the
//! function alone so the same function merges across call sites. A graph with nothing
//! to show (nothing leaked, say) is a small SVG that says so: inferno refuses empty
//! input.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use inferno::flamegraph::{self, Options, color::BasicPalette, color::Palette};
use memtrack_record::stacks::StackCounts;

use crate::{Error, Result, stack_profile::StackProfile};

/// Which bytes a flamegraph shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlameMetric {
    /// Bytes allocated.
    Allocated,
    /// Bytes live at the peak (t-gmax).
    AtPeak,
    /// Bytes live at the end.
    Leaked,
}

impl FlameMetric {
    /// Every metric, in file order.
    pub const ALL: [FlameMetric; 3] = [
        FlameMetric::Allocated,
        FlameMetric::AtPeak,
        FlameMetric::Leaked,
    ];

    /// The SVG's file name.
    pub fn file_name(self) -> &'static str {
        match self {
            FlameMetric::Allocated => "allocated.svg",
            FlameMetric::AtPeak => "peak.svg",
            FlameMetric::Leaked => "leaked.svg",
        }
    }

    /// The graph's title.
    pub fn title(self) -> &'static str {
        match self {
            FlameMetric::Allocated => "memtrack: bytes allocated",
            FlameMetric::AtPeak => "memtrack: bytes live at the peak (t-gmax)",
            FlameMetric::Leaked => "memtrack: bytes leaked (live at the end)",
        }
    }

    fn bytes(self, c: &StackCounts) -> u64 {
        match self {
            FlameMetric::Allocated => c.alloc_bytes,
            FlameMetric::AtPeak => c.at_peak_bytes,
            FlameMetric::Leaked => c.live_bytes,
        }
    }
}

/// A frame name as inferno reads it: `;` separates frames, so it cannot appear in one
/// (Rust array types `[u8; 8]` have one).
fn frame_name(name: &str) -> String {
    name.replace(';', ",")
}

/// The collapsed stacks of `metric`: `root;...;leaf bytes`, sorted, equal stacks summed,
/// stacks with 0 bytes left out.
pub fn collapsed(profiles: &[StackProfile], metric: FlameMetric) -> Vec<String> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for profile in profiles {
        let root = match &profile.benchmark {
            None if profile.images > 1 => format!(
                "pid {} ({}): {}",
                profile.pid,
                profile.image_text(),
                profile.command.join(" ")
            ),
            None => format!("pid {}: {}", profile.pid, profile.command.join(" ")),
            Some(uri) => format!("benchmark {uri} (pid {})", profile.pid),
        };
        for stack in &profile.stacks {
            let bytes = metric.bytes(&stack.counts);
            if bytes == 0 {
                continue;
            }
            let mut names: Vec<String> = vec![frame_name(&root)];
            let logical: Vec<_> = stack.logical().collect();
            names.extend(logical.iter().rev().map(|(_, l)| frame_name(&l.function)));
            *lines.entry(names.join(";")).or_default() += bytes;
        }
    }
    lines
        .into_iter()
        .map(|(stack, bytes)| format!("{stack} {bytes}"))
        .collect()
}

/// The SVG of `metric`.
pub fn render(profiles: &[StackProfile], metric: FlameMetric) -> Result<Vec<u8>> {
    let lines = collapsed(profiles, metric);
    if lines.is_empty() {
        return Ok(empty_svg(metric).into_bytes());
    }
    let mut options = Options::default();
    options.title = metric.title().to_string();
    options.count_name = "bytes".to_string();
    options.colors = Palette::Basic(BasicPalette::Mem);
    // The same input always gives the same SVG (colours from the names, not random).
    options.deterministic = true;
    options.hash = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg).map_err(
        |source| Error::Write {
            path: PathBuf::from(metric.file_name()),
            source,
        },
    )?;
    Ok(svg)
}

fn empty_svg(metric: FlameMetric) -> String {
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"60\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <text x=\"600\" y=\"24\" text-anchor=\"middle\" font-family=\"Verdana\" \
         font-size=\"17\">{}</text>\n\
         <text x=\"600\" y=\"48\" text-anchor=\"middle\" font-family=\"Verdana\" \
         font-size=\"12\">no bytes: nothing to show</text>\n</svg>\n",
        metric.title()
    )
}

/// Writes the three SVGs into `dir` (created if needed, mode 0700, in a directory that
/// exists) and returns their paths.
pub fn write_all(profiles: &[StackProfile], dir: &Path) -> Result<Vec<PathBuf>> {
    use std::os::unix::fs::DirBuilderExt;
    super::check_dir_target(dir)?;
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|source| Error::Write {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    FlameMetric::ALL
        .iter()
        .map(|&metric| {
            let path = dir.join(metric.file_name());
            super::write_file(&path, &render(profiles, metric)?)?;
            Ok(path)
        })
        .collect()
}
