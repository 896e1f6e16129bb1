//! The timeline charts, as plotly.js figures (traces and layout, made with the `plotly`
//! crate and handed to the page as JSON): the heap envelope (the band between each
//! bucket's lowest and highest live bytes, and the bytes at each bucket's end), the
//! resident memory and the mapped bytes, all as steps (`hv`: a value holds until the
//! next one, never interpolated), the events as marks, the benchmark regions as bands.
//!
//! Timelines are sparse (memtrack-record's `timeline`): a bucket not listed holds the
//! end values of the listed one before it, so each listed bucket that is not followed
//! by the next bucket of the grid gets a second point, one width later, at its end
//! values.

use memtrack_record::timeline::{Bucket, EventKind, Timeline, TimelineEvent};
use plotly::{
    Layout, Plot, Scatter,
    common::{DashType, Fill, Line, LineShape, Marker, MarkerSymbol, Mode, Title},
    layout::{Axis, HoverMode, Margin, Shape, ShapeLayer, ShapeLine, ShapeType},
};

use super::escape;

/// The colours of one run's series (the report has one run, the comparison two).
#[derive(Clone, Copy, Debug)]
pub struct Palette {
    /// The heap's band (with transparency) and its end line.
    pub band: &'static str,
    /// The heap's end line.
    pub heap: &'static str,
    /// Resident memory.
    pub rss: &'static str,
    /// Mapped bytes.
    pub mapped: &'static str,
}

/// The report's colours (and BASE's in a comparison).
pub const BLUE: Palette = Palette {
    band: "rgba(31,119,180,0.25)",
    heap: "rgb(31,119,180)",
    rss: "rgb(44,160,44)",
    mapped: "rgb(148,103,189)",
};

/// NEW's colours in a comparison.
pub const ORANGE: Palette = Palette {
    band: "rgba(255,127,14,0.25)",
    heap: "rgb(255,127,14)",
    rss: "rgb(214,39,40)",
    mapped: "rgb(140,86,75)",
};

/// One series as step points: times (ms from the chart's zero) and bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Steps {
    /// Times, ms.
    pub x_ms: Vec<f64>,
    /// Bytes at each time, held until the next.
    pub y: Vec<u64>,
}

/// The step points of one series of `t`: each listed bucket's `value` at its start, and
/// its `carried` value one width later when the grid's next bucket is not listed (and
/// after the last one, so it has its width). None when a bucket lacks the series (it
/// was not recorded). Times are ms after `zero_ns` (ns since the process started).
pub fn steps(
    t: &Timeline,
    zero_ns: u64,
    value: impl Fn(&Bucket) -> Option<u64>,
    carried: impl Fn(&Bucket) -> Option<u64>,
) -> Option<Steps> {
    let ms = |ns: u64| ns.saturating_sub(zero_ns) as f64 / 1e6;
    let mut out = Steps::default();
    for (i, b) in t.buckets.iter().enumerate() {
        out.x_ms.push(ms(b.t_ns));
        out.y.push(value(b)?);
        let next_at = b.t_ns.saturating_add(t.bucket_ns);
        if t.buckets.get(i + 1).is_none_or(|n| n.t_ns != next_at) {
            out.x_ms.push(ms(next_at));
            out.y.push(carried(b)?);
        }
    }
    (!out.y.is_empty()).then_some(out)
}

/// The heap's lowest, highest and end step series of `t`.
pub fn heap_steps(t: &Timeline, zero_ns: u64) -> [Steps; 3] {
    let end = |b: &Bucket| Some(b.end_bytes);
    [
        steps(t, zero_ns, |b| Some(b.min_bytes), end),
        steps(t, zero_ns, |b| Some(b.max_bytes), end),
        steps(t, zero_ns, end, end),
    ]
    .map(Option::unwrap_or_default)
}

/// What an event says, for people (escaped for plotly's text, which reads a few tags).
pub fn event_text(what: &EventKind) -> String {
    let text = match what {
        EventKind::RegionStart { uri } => format!("benchmark {uri} starts"),
        EventKind::RegionEnd { uri, unfinished } => {
            let how = if *unfinished { " (unfinished)" } else { "" };
            format!("benchmark {uri} ends{how}")
        }
        EventKind::Exec { command } => format!("exec {}", command.join(" ")),
        EventKind::Child { pid } => format!("child process {pid} started"),
        EventKind::Peak { bytes } => format!("peak: {bytes} B live"),
        _ => "event".to_string(),
    };
    escape::text(&text)
}

/// Where an event's mark sits: a peak at its bytes, any other at the live heap bytes
/// at the end of the bucket holding it.
fn mark_at(t: &Timeline, e: &TimelineEvent) -> u64 {
    match e.what {
        EventKind::Peak { bytes } => bytes,
        _ => heap_at(t, e.t_ns),
    }
}

/// The live heap bytes at the end of the bucket holding `t_ns` (the end of the last
/// listed bucket at or before it).
fn heap_at(t: &Timeline, t_ns: u64) -> u64 {
    let i = t.buckets.partition_point(|b| b.t_ns <= t_ns);
    i.checked_sub(1).map_or(0, |i| t.buckets[i].end_bytes)
}

/// The benchmark regions of `t`'s events as (start, end) ns pairs: each start matched
/// with the next end of the same uri; a region still open at the end runs to the
/// timeline's end.
pub fn regions(t: &Timeline) -> Vec<(u64, u64)> {
    let mut open: Vec<(&str, u64)> = Vec::new();
    let mut out = Vec::new();
    for e in &t.events {
        match &e.what {
            EventKind::RegionStart { uri } => open.push((uri, e.t_ns)),
            EventKind::RegionEnd { uri, .. } => {
                if let Some(i) = open.iter().rposition(|(u, _)| u == uri) {
                    out.push((open.remove(i).1, e.t_ns));
                }
            }
            _ => {}
        }
    }
    out.extend(open.into_iter().map(|(_, start)| (start, t.end_ns())));
    out.sort_unstable();
    out
}

/// A step trace.
fn step_trace(s: Steps, name: &str, color: &'static str) -> Box<Scatter<f64, u64>> {
    Scatter::new(s.x_ms, s.y)
        .name(name)
        .mode(Mode::Lines)
        .line(Line::new().shape(LineShape::Hv).color(color).width(1.5))
        .hover_template("%{y:,} B")
}

/// The traces of one run's timeline `t`, names prefixed by `label` (empty in the
/// report, `BASE `/`NEW ` in a comparison), times from `zero_ns`.
pub fn traces(plot: &mut Plot, t: &Timeline, zero_ns: u64, label: &str, colors: Palette) {
    let [min, max, end] = heap_steps(t, zero_ns);
    let group = format!("{label}heap");
    plot.add_trace(
        Scatter::new(min.x_ms, min.y)
            .name(format!("{label}heap lowest"))
            .mode(Mode::Lines)
            .legend_group(&group)
            .show_legend(false)
            .line(
                Line::new()
                    .shape(LineShape::Hv)
                    .width(0.0)
                    .color(colors.band),
            )
            .hover_template("lowest %{y:,} B"),
    );
    plot.add_trace(
        Scatter::new(max.x_ms, max.y)
            .name(format!("{label}heap lowest to highest"))
            .mode(Mode::Lines)
            .legend_group(&group)
            .fill(Fill::ToNextY)
            .fill_color(colors.band)
            .line(
                Line::new()
                    .shape(LineShape::Hv)
                    .width(0.0)
                    .color(colors.band),
            )
            .hover_template("highest %{y:,} B"),
    );
    plot.add_trace(
        step_trace(end, &format!("{label}heap at bucket end"), colors.heap).legend_group(&group),
    );
    let rss = steps(t, zero_ns, |b| b.rss_max_bytes, |b| b.rss_end_bytes);
    if let Some(rss) = rss {
        plot.add_trace(
            step_trace(rss, &format!("{label}resident (RSS)"), colors.rss).line(
                Line::new()
                    .shape(LineShape::Hv)
                    .color(colors.rss)
                    .width(1.5)
                    .dash(DashType::Dot),
            ),
        );
    }
    let mapped = steps(t, zero_ns, |b| b.mapped_max_bytes, |b| b.mapped_end_bytes);
    if let Some(mapped) = mapped {
        plot.add_trace(
            step_trace(mapped, &format!("{label}mapped (mmap/brk)"), colors.mapped).line(
                Line::new()
                    .shape(LineShape::Hv)
                    .color(colors.mapped)
                    .width(1.5)
                    .dash(DashType::Dash),
            ),
        );
    }
    if !t.events.is_empty() {
        let ms = |ns: u64| ns.saturating_sub(zero_ns) as f64 / 1e6;
        let x: Vec<f64> = t.events.iter().map(|e| ms(e.t_ns)).collect();
        let y: Vec<u64> = t.events.iter().map(|e| mark_at(t, e)).collect();
        let text: Vec<String> = t.events.iter().map(|e| event_text(&e.what)).collect();
        plot.add_trace(
            Scatter::new(x, y)
                .name(format!("{label}events"))
                .mode(Mode::Markers)
                .marker(
                    Marker::new()
                        .symbol(MarkerSymbol::DiamondOpen)
                        .size(9)
                        .color(colors.heap),
                )
                .text_array(text)
                .hover_template("%{text}"),
        );
    }
}

/// The layout: time axis in ms from the chart's zero (`zero` says what that is), bytes,
/// drag to zoom on a time range, hover on the time, the regions of `bands` (ns from
/// `zero_ns`) shaded.
pub fn layout(zero: &str, bands: &[(u64, u64)], zero_ns: u64) -> Layout {
    let ms = |ns: u64| ns.saturating_sub(zero_ns) as f64 / 1e6;
    let shapes: Vec<Shape> = bands
        .iter()
        .map(|&(start, end)| {
            Shape::new()
                .shape_type(ShapeType::Rect)
                .x_ref("x")
                .y_ref("paper")
                .x0(ms(start))
                .x1(ms(end))
                .y0(0)
                .y1(1)
                .fill_color("rgba(255,200,0,0.15)")
                .line(ShapeLine::new().width(0.0))
                .layer(ShapeLayer::Below)
        })
        .collect();
    Layout::new()
        .height(360)
        .margin(Margin::new().left(80).right(20).top(20).bottom(50))
        // The legend on the right, as plotly places it: one entry a line.
        .hover_mode(HoverMode::X)
        .x_axis(
            Axis::new()
                .title(Title::with_text(format!("ms since {zero}")))
                .zero_line(false),
        )
        .y_axis(
            Axis::new()
                .title(Title::with_text("bytes"))
                .tick_format("~s")
                .tick_suffix("B")
                .range_mode(plotly::layout::RangeMode::ToZero),
        )
        .shapes(shapes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(t_ns: u64, min: u64, max: u64, end: u64) -> Bucket {
        Bucket {
            t_ns,
            min_bytes: min,
            max_bytes: max,
            end_bytes: end,
            ..Bucket::default()
        }
    }

    #[test]
    fn quiet_buckets_carry_the_end_values_and_the_last_keeps_its_width() {
        const W: u64 = 1 << 20;
        let t = Timeline {
            bucket_ns: W,
            buckets: vec![
                bucket(0, 0, 100, 50),
                bucket(W, 50, 900, 200),
                bucket(4 * W, 0, 200, 0),
            ],
            ..Timeline::default()
        };
        let [min, max, end] = heap_steps(&t, 0);
        let at =
            |widths: &[u64]| -> Vec<f64> { widths.iter().map(|k| (k * W) as f64 / 1e6).collect() };
        // Bucket 0 is followed by bucket 1: one point; bucket 1 by a gap: two (its end
        // values carried from its end); the last two, so it has its width.
        assert_eq!(max.x_ms, at(&[0, 1, 2, 4, 5]));
        assert_eq!(max.y, [100, 900, 200, 200, 0]);
        assert_eq!(min.y, [0, 50, 200, 0, 0]);
        assert_eq!(end.y, [50, 200, 200, 0, 0]);
        // No resident memory recorded: no series.
        assert_eq!(steps(&t, 0, |b| b.rss_max_bytes, |b| b.rss_end_bytes), None);
        // From a later zero (a benchmark's start): earlier times are clamped to it.
        let [_, from_one, _] = heap_steps(&t, W);
        assert_eq!(from_one.x_ms, at(&[0, 0, 1, 3, 4]));
    }

    #[test]
    fn regions_pair_starts_and_ends_by_uri() {
        let mut t = Timeline {
            bucket_ns: 1024,
            buckets: vec![bucket(0, 0, 0, 0), bucket(10 * 1024, 0, 0, 0)],
            ..Timeline::default()
        };
        let at = |t_ns, what| TimelineEvent { t_ns, what };
        let start = |uri: &str| EventKind::RegionStart { uri: uri.into() };
        let end = |uri: &str| EventKind::RegionEnd {
            uri: uri.into(),
            unfinished: false,
        };
        t.events = vec![
            at(100, start("a")),
            at(200, start("b")),
            at(300, end("a")),
            at(400, end("b")),
            at(500, EventKind::Child { pid: 7 }),
            at(600, start("c")),
        ];
        assert_eq!(regions(&t), [(100, 300), (200, 400), (600, 11 * 1024)]);
        assert_eq!(
            event_text(&start("</script>\"'")),
            "benchmark &lt;/script&gt;&quot;&#39; starts"
        );
        assert_eq!(heap_at(&t, 5000), 0);
        assert_eq!(mark_at(&t, &at(9, EventKind::Peak { bytes: 77 })), 77);
    }
}
