//! `memtrack report --stacks DIR`: the top call stacks of each process by bytes
//! allocated, by bytes live at the peak (t-gmax) and by bytes leaked (live at the end),
//! readable in a terminal.
//!
//! Each stack is shown from the allocation outwards, and only as far as it takes to tell
//! it apart from every other stack of the process (its shortest distinguishing frames);
//! the frames beyond are summed up in one line of function names.

use std::fmt::Write as _;

use memtrack_record::stacks::StackCounts;

use crate::{
    stack_profile::{Place, ShownStack, StackProfile, object_name},
    symbolize::LogicalFrame,
    units::{bytes, count},
};

/// What the stacks report shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StacksOptions {
    /// How many stacks each ranking lists.
    pub top: usize,
}

impl Default for StacksOptions {
    fn default() -> Self {
        StacksOptions { top: 10 }
    }
}

/// The three rankings: what they sort by, their heading.
const RANKINGS: [(Metric, &str); 3] = [
    (Metric::Allocated, "bytes allocated"),
    (Metric::AtPeak, "bytes at peak (t-gmax)"),
    (Metric::Leaked, "bytes leaked (live at end)"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Metric {
    Allocated,
    AtPeak,
    Leaked,
}

impl Metric {
    fn bytes(self, c: &StackCounts) -> u64 {
        match self {
            Metric::Allocated => c.alloc_bytes,
            Metric::AtPeak => c.at_peak_bytes,
            Metric::Leaked => c.live_bytes,
        }
    }
}

/// At most this many function names in the line summing up a stack's outer frames.
const OUTER_NAMES: usize = 4;

/// The report: for each profile its totals, whether they match the counters, the
/// objects that could not be symbolized, then the three rankings; then the processes
/// without stacks.
pub fn render(
    profiles: &[StackProfile],
    skipped: &[(u32, String)],
    options: StacksOptions,
) -> String {
    let mut out = String::new();
    for profile in profiles {
        render_profile(&mut out, profile, options);
    }
    for (pid, why) in skipped {
        let _ = writeln!(out, "process {pid}: {why}");
    }
    out
}

fn counts_text(bytes_n: u64, blocks: u64) -> String {
    format!("{} in {}", bytes(bytes_n), count(blocks, "block"))
}

fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

fn render_profile(out: &mut String, p: &StackProfile, options: StacksOptions) {
    let t = &p.total;
    let _ = writeln!(out, "{}: {}", p.title(), p.command.join(" "));
    let peak_time = p
        .peak_ns
        .map(|ns| {
            format!(
                ", {} after the start",
                duration(ns.saturating_sub(p.start_ns))
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  {} (depth limit {}): allocated {}; at peak {}{peak_time}; live at end {}",
        count(
            p.stacks.iter().filter(|s| s.id.is_some()).count() as u64,
            "stack"
        ),
        p.depth_limit,
        counts_text(t.alloc_bytes, t.alloc_blocks),
        counts_text(t.at_peak_bytes, t.at_peak_blocks),
        counts_text(t.live_bytes, t.live_blocks),
    );
    if let Some(lost) = p.stacks.iter().find(|s| s.id.is_none()) {
        let _ = writeln!(
            out,
            "  LOST STACKS: {} allocated without a stack (the stack map was full)",
            counts_text(lost.counts.alloc_bytes, lost.counts.alloc_blocks)
        );
    }
    let mismatches = p.mismatches();
    if p.counters.is_some() && mismatches.is_empty() {
        let _ = writeln!(out, "  the stacks add up exactly to the counters");
    }
    for m in mismatches {
        let _ = writeln!(out, "  MISMATCH: {m}");
    }
    for problem in &p.problems {
        let _ = writeln!(out, "  note: {problem}");
    }
    for image in p.earlier_images.iter().filter(|i| i.stats.alloc_calls != 0) {
        let _ = writeln!(
            out,
            "  note: before exec, as {}: allocated {}, whose stacks were not kept (a \
             stacks file written before memtrack kept each image's; the stacks and the \
             counters above cover the image the process ran last)",
            image.command.join(" "),
            counts_text(image.stats.bytes_allocated, image.stats.alloc_calls),
        );
    }
    if p.benchmark.is_none() && !p.regions.is_empty() {
        let _ = writeln!(
            out,
            "  benchmark regions (--benchmark URI shows one): {}",
            p.regions.join(", ")
        );
    }
    let texts = frame_texts(&p.stacks);
    let shown = shortest_distinguishing(&texts);
    for (metric, heading) in RANKINGS {
        let total = metric.bytes(t);
        let mut ranked: Vec<usize> = (0..p.stacks.len())
            .filter(|&i| metric.bytes(&p.stacks[i].counts) != 0)
            .collect();
        // Largest first; equal ones in stack order, so the report is reproducible.
        ranked.sort_by_key(|&i| std::cmp::Reverse(metric.bytes(&p.stacks[i].counts)));
        let listed = ranked.len().min(options.top);
        let _ = writeln!(
            out,
            "\n  top {listed} of {} by {heading}:",
            count(ranked.len() as u64, "stack")
        );
        if ranked.is_empty() {
            let _ = writeln!(out, "    (none)");
        }
        for (rank, &i) in ranked.iter().take(options.top).enumerate() {
            let stack = &p.stacks[i];
            let share = 100.0 * metric.bytes(&stack.counts) as f64 / total as f64;
            render_stack(out, rank + 1, share, stack, &texts[i], shown[i]);
        }
    }
    out.push('\n');
}

/// One ranked stack: its counters, its first `shown` frames (`texts`, one per logical
/// frame), then the rest summed up in one line.
fn render_stack(
    out: &mut String,
    rank: usize,
    share: f64,
    stack: &ShownStack,
    texts: &[String],
    shown: usize,
) {
    let c = &stack.counts;
    let _ = writeln!(
        out,
        "  {rank:>3}. {share:5.1}%  allocated {}, at peak {}, live at end {}",
        counts_text(c.alloc_bytes, c.alloc_blocks),
        counts_text(c.at_peak_bytes, c.at_peak_blocks),
        counts_text(c.live_bytes, c.live_blocks),
    );
    let logical: Vec<_> = stack.logical().collect();
    for ((frame, _), text) in logical.iter().zip(texts).take(shown) {
        let mut line = format!("         {text}");
        if !frame.symbolized
            && let Some(object) = frame.object()
        {
            let _ = write!(
                line,
                " (in {}, build id {})",
                object.path.display(),
                object.build_id.as_deref().unwrap_or("none")
            );
        }
        let _ = writeln!(out, "{line}");
    }
    let mut rest = &logical[shown.min(logical.len())..];
    // The stack's end marker ([truncated], [unknown]) is not a frame: it is always
    // shown, last, however many frames the line leaves out.
    let end = match rest.split_last() {
        Some(((frame, l), before)) if matches!(frame.place, Place::Marker(_)) => {
            rest = before;
            Some(l.function.as_str())
        }
        _ => None,
    };
    if !rest.is_empty() {
        let mut names: Vec<&str> = rest
            .iter()
            .take(OUTER_NAMES)
            .map(|(_, l)| l.function.as_str())
            .collect();
        if rest.len() > OUTER_NAMES {
            names.push("...");
        }
        names.extend(end);
        let plural = if rest.len() == 1 { "" } else { "s" };
        let _ = writeln!(
            out,
            "         + {} outer frame{plural}: {}",
            rest.len(),
            names.join(" < ")
        );
    } else if let Some(end) = end {
        let _ = writeln!(out, "         {end}");
    }
}

/// `function (file:line)`, `[inlined]` when it was inlined into the next one.
pub fn frame_text(l: &LogicalFrame) -> String {
    let mut text = l.function.clone();
    if let Some(location) = &l.location {
        let _ = write!(text, " ({location})");
    }
    if l.inlined {
        text.push_str(" [inlined]");
    }
    text
}

/// The text of each logical frame of each stack, as the report shows it
/// ([`frame_text`]). A stack whose frames all read the same as another stack's (two
/// calls on one source line, an unrolled loop) also gets each symbolized frame's
/// address in its object (`at OBJECT+0xADDRESS`, on the frame's outermost logical
/// frame), so that no two stacks read alike.
pub fn frame_texts(stacks: &[ShownStack]) -> Vec<Vec<String>> {
    let plain: Vec<Vec<String>> = stacks
        .iter()
        .map(|s| s.logical().map(|(_, l)| frame_text(l)).collect())
        .collect();
    let mut alike: std::collections::HashMap<&[String], usize> = Default::default();
    for texts in &plain {
        *alike.entry(texts.as_slice()).or_default() += 1;
    }
    stacks
        .iter()
        .zip(&plain)
        .map(|(stack, texts)| {
            if alike[texts.as_slice()] == 1 {
                return texts.clone();
            }
            stack
                .logical()
                .zip(texts)
                .map(
                    |((frame, l), text)| match (frame.shown_address(), l.inlined) {
                        (Some(address), false) if frame.symbolized => {
                            let name = frame.object().map_or_else(String::new, object_name);
                            format!("{text} at {name}+{address:#x}")
                        }
                        _ => text.clone(),
                    },
                )
                .collect()
        })
        .collect()
}

/// For each stack (its frames' texts, innermost first), how many of its logical frames
/// it takes to tell it apart from every other stack: one more than its longest common
/// prefix with any other, at most all of them (a stack that is the beginning of another
/// one needs all). Sorting puts the stacks sharing the longest prefix with a stack next
/// to it, so the neighbours are the only ones to compare with.
pub fn shortest_distinguishing(keys: &[Vec<String>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    let common = |a: &[String], b: &[String]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let mut needed = vec![0; keys.len()];
    for (pos, &i) in order.iter().enumerate() {
        let before = pos
            .checked_sub(1)
            .map_or(0, |p| common(&keys[i], &keys[order[p]]));
        let after = order
            .get(pos + 1)
            .map_or(0, |&j| common(&keys[i], &keys[j]));
        let shared = if keys.len() > 1 {
            before.max(after) + 1
        } else {
            1
        };
        needed[i] = shared.min(keys[i].len());
    }
    needed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack_profile::ShownFrame;

    fn stack(functions: &[&str], alloc_bytes: u64) -> ShownStack {
        ShownStack {
            id: Some(0),
            frames: functions
                .iter()
                .map(|f| ShownFrame {
                    place: match *f {
                        "[truncated]" | "[unknown]" => Place::Marker("end"),
                        _ => Place::Anonymous {
                            address: 0x1000,
                            interrupted: false,
                        },
                    },
                    logical: vec![LogicalFrame {
                        function: f.to_string(),
                        location: None,
                        inlined: false,
                    }],
                    symbolized: true,
                })
                .collect(),
            counts: StackCounts {
                alloc_bytes,
                alloc_blocks: 1,
                ..StackCounts::default()
            },
        }
    }

    #[test]
    fn distinguishing_frames_stop_where_stacks_part() {
        let stacks = [
            stack(&["decode", "load", "main"], 1),
            stack(&["decode", "load_other", "main"], 1),
            stack(&["grow", "main"], 1),
            stack(&["decode", "load"], 1), // the beginning of the first one
        ];
        let texts = frame_texts(&stacks);
        assert_eq!(shortest_distinguishing(&texts), vec![3, 2, 1, 2]);
        assert_eq!(shortest_distinguishing(&texts[..1]), vec![1]);
        assert_eq!(shortest_distinguishing(&[]), Vec::<usize>::new());
    }

    /// Two calls of malloc on one source line (or an unrolled loop): their stacks read
    /// the same, so their frames are shown with their addresses, as far as those
    /// differ; a stack that reads differently keeps the plain text.
    #[test]
    fn stacks_that_read_alike_are_told_apart_by_their_addresses() {
        let object = memtrack_record::stacks::StackObject {
            path: "/usr/bin/ct".into(),
            build_id: None,
        };
        let at = |function: &str, address: u64| ShownFrame {
            place: Place::Object {
                object: object.clone(),
                address,
                interrupted: false,
            },
            logical: vec![LogicalFrame {
                function: function.to_string(),
                location: Some(crate::symbolize::SourceLocation {
                    file: "ct.c".to_string(),
                    path: "/src/ct.c".into(),
                    line: Some(5),
                    column: None,
                }),
                inlined: false,
            }],
            symbolized: true,
        };
        let with = |frames: Vec<ShownFrame>| ShownStack {
            frames,
            ..stack(&[], 1)
        };
        let stacks = [
            with(vec![at("load", 0x1198), at("main", 0x1050)]),
            with(vec![at("load", 0x11b0), at("main", 0x1050)]),
            with(vec![at("other", 0x1200), at("main", 0x1060)]),
        ];
        let texts = frame_texts(&stacks);
        assert_eq!(
            texts,
            [
                vec!["load (ct.c:5) at ct+0x1197", "main (ct.c:5) at ct+0x104f"],
                vec!["load (ct.c:5) at ct+0x11af", "main (ct.c:5) at ct+0x104f"],
                vec!["other (ct.c:5)", "main (ct.c:5)"],
            ]
        );
        assert_eq!(shortest_distinguishing(&texts), vec![1, 1, 1]);
    }

    #[test]
    fn stacks_show_their_distinguishing_frames_then_the_rest_in_one_line() {
        let mut out = String::new();
        let s = stack(&["decode", "load", "main", "a", "b", "c", "d"], 1160);
        render_stack(
            &mut out,
            1,
            79.45,
            &s,
            &frame_texts(std::slice::from_ref(&s))[0],
            2,
        );
        assert_eq!(
            out,
            "    1.  79.5%  allocated 1.1 KiB (1,160 B) in 1 block, at peak 0 B in 0 blocks, \
             live at end 0 B in 0 blocks\n\
             \x20        decode\n\
             \x20        load\n\
             \x20        + 5 outer frames: main < a < b < c < ...\n"
        );
    }
    #[test]
    fn the_end_marker_is_shown_last_and_is_not_counted_as_a_frame() {
        let render = |functions: &[&str], shown: usize| {
            let mut out = String::new();
            let s = stack(functions, 1);
            render_stack(
                &mut out,
                1,
                100.0,
                &s,
                &frame_texts(std::slice::from_ref(&s))[0],
                shown,
            );
            out.lines().skip(1).collect::<Vec<_>>().join("\n")
        };
        let deep = ["d", "d", "d", "d", "d", "d", "[truncated]"];
        assert_eq!(
            render(&deep, 1),
            "         d\n         + 5 outer frames: d < d < d < d < ... < [truncated]"
        );
        assert_eq!(
            render(&["a", "b", "[unknown]"], 1),
            "         a\n         + 1 outer frame: b < [unknown]"
        );
        assert_eq!(
            render(&["a", "[unknown]"], 1),
            "         a\n         [unknown]"
        );
        assert_eq!(
            render(&["a", "[unknown]"], 2),
            "         a\n         [unknown]"
        );
    }
}
