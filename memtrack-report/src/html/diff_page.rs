//! `memtrack diff --html`: the page of a comparison, one section per process or
//! benchmark found in both runs (as [`diff::diff`](crate::diff::diff) paired them): both
//! timelines overlaid, each from its own start (BASE blue, NEW orange), and the
//! counters' changes.

use std::{fmt::Write as _, path::Path};

use plotly::Plot;

use super::{MAX_LISTED, MAX_SECTIONS, chart, escape, page};
use crate::{
    counter::Counter,
    diff::{Change, Compared, Diff, DiffOptions, summary},
};

/// The change a comparison is listed and ordered by: its peak live bytes' if compared,
/// else its first counter's.
fn key_change(c: &Compared) -> Option<&Change> {
    c.changes
        .iter()
        .find(|ch| ch.counter == Counter::PeakLiveBytes)
        .or(c.changes.first())
}

/// The order of the page: the comparisons with a counter above `--max-increase` first,
/// then by the size of their [`key_change`], then as [`Diff`] has them.
fn order(diff: &Diff) -> Vec<usize> {
    let mut order: Vec<usize> = (0..diff.compared.len()).collect();
    let weight = |c: &Compared| {
        let above = c.changes.iter().filter(|ch| ch.exceeded).count();
        let size = key_change(c).map_or(0, |ch| ch.new.abs_diff(ch.base));
        std::cmp::Reverse((above, size))
    };
    order.sort_by_key(|&i| weight(&diff.compared[i]));
    order
}

/// The verdict on one change, as the text comparison says it.
fn verdict(c: &Compared, exceeded: bool, options: &DiffOptions) -> String {
    match (exceeded, options.max_increase) {
        (true, Some(_)) if c.unfinished => "UNFINISHED".to_string(),
        (true, Some(max)) => format!("ABOVE {}", max.show()),
        _ => String::new(),
    }
}

/// The page comparing `base` (BASE) with `new` (NEW).
pub fn render_diff(diff: &Diff, options: &DiffOptions, base: &Path, new: &Path) -> String {
    let mut header = format!(
        "<p>BASE <code>{}</code>, NEW <code>{}</code>: {}. Timelines from each one's start; \
         drag over the chart to zoom on a time range, double-click to zoom out.</p>\n",
        escape::text(&base.display().to_string()),
        escape::text(&new.display().to_string()),
        escape::text(&summary(diff, options)),
    );
    for (side, list) in [("BASE", &diff.only_in_base), ("NEW", &diff.only_in_new)] {
        if !list.is_empty() {
            let names: Vec<String> = list.iter().map(|w| escape::text(w)).collect();
            let _ = writeln!(
                header,
                "<p>Only in {side} ({}): {}</p>",
                list.len(),
                names.join("; ")
            );
        }
    }
    let total = diff.compared.len();
    if total > MAX_SECTIONS {
        let _ = writeln!(
            header,
            "<p class=\"note\">Only the {MAX_SECTIONS} most changed of the {total} compared \
             have a chart and their changes here; the others are listed (`memtrack diff` \
             prints every change).</p>"
        );
    }
    if total > MAX_LISTED {
        let _ = writeln!(
            header,
            "<p class=\"note\">The list stops at {MAX_LISTED}: {} less changed ones are \
             left out.</p>",
            total - MAX_LISTED
        );
    }
    let order = order(diff);
    let mut rows = String::new();
    for (rank, &i) in order.iter().enumerate().take(MAX_LISTED) {
        let c = &diff.compared[i];
        let name = escape::text(&c.what);
        let change = key_change(c).map_or(String::new(), |ch| {
            let class = match ch.new.cmp(&ch.base) {
                std::cmp::Ordering::Greater => "up",
                std::cmp::Ordering::Less => "down",
                std::cmp::Ordering::Equal => "same",
            };
            format!(
                "<span class=\"{class}\">{} {}</span>",
                escape::text(ch.counter.name()),
                escape::text(&ch.show())
            )
        });
        let (open, cell) = if rank < MAX_SECTIONS {
            (
                format!("<tr data-scope=\"s{rank}\">"),
                format!("<a href=\"#s{rank}\">{name}</a>"),
            )
        } else {
            ("<tr>".to_string(), name)
        };
        let _ = writeln!(
            rows,
            "{open}<td class=\"cmd\">{cell}</td><td class=\"n\">{change}</td></tr>"
        );
    }
    let mut sections = String::new();
    let mut charts = Vec::new();
    for (rank, &i) in order.iter().enumerate().take(MAX_SECTIONS) {
        let c = &diff.compared[i];
        let id = format!("s{rank}");
        let _ = writeln!(
            sections,
            "{}<h2>{}</h2>",
            page::section_open(&id),
            escape::text(&c.what)
        );
        if c.unfinished {
            sections.push_str(
                "<p class=\"note\">Unfinished in a run: its counters there are partial.</p>\n",
            );
        }
        sections.push_str(
            "<table class=\"stacks\"><tr><th>counter</th><th>BASE</th><th>NEW</th>\
             <th>change</th><th></th></tr>\n",
        );
        for ch in &c.changes {
            let _ = writeln!(
                sections,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td><td>{}</td></tr>",
                escape::text(ch.counter.name()),
                escape::text(&ch.counter.show(ch.base)),
                escape::text(&ch.counter.show(ch.new)),
                escape::text(&ch.show()),
                escape::text(&verdict(c, ch.exceeded, options)),
            );
        }
        sections.push_str("</table>\n");
        let timelines = [
            (c.base_timeline.as_ref(), "BASE ", chart::BLUE),
            (c.new_timeline.as_ref(), "NEW ", chart::ORANGE),
        ];
        let mut plot = Plot::new();
        let mut drawn = 0;
        for (timeline, label, colors) in timelines {
            if let Some(t) = timeline.filter(|t| !t.buckets.is_empty()) {
                chart::traces(&mut plot, t, t.start_ns(), label, colors);
                drawn += 1;
            }
        }
        if drawn == 0 {
            sections.push_str("<p>No timeline was recorded in either run.</p>\n");
        } else {
            if drawn == 1 {
                sections.push_str("<p>Only one run recorded a timeline.</p>\n");
            }
            plot.set_layout(chart::layout("its start", &[], 0));
            charts.push((id.clone(), plot.to_json()));
            sections.push_str(&page::chart_div(&id));
        }
        sections.push_str("</section>\n");
    }
    page::Page {
        title: "memtrack diff".to_string(),
        header,
        list_head: "<th>process or benchmark</th><th class=\"n\">change</th>".to_string(),
        list_rows: rows,
        sections,
        charts,
    }
    .render()
}
