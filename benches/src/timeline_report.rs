//! Benchmark 8's Markdown tables and JSON (see timeline.rs).

use std::fmt::Write as _;

use crate::{
    probe_cost::PerOp,
    render::{
        Align, Json, fmt_duration, fmt_ns, fmt_ratio, markdown_table, obj, samples_json, text,
        thousands,
    },
    timeline::{TimelineCheck, TimelineResult, setup_name},
};

/// "CPU (wall)" of the best run.
fn cell(p: &PerOp) -> String {
    format!("{} ({})", fmt_ns(p.cpu.min()), fmt_ns(p.wall.min()))
}

/// The section as Markdown.
pub fn markdown(r: &TimelineResult, out: &mut String) {
    let _ = writeln!(
        out,
        "### The timeline: malloc and free with the timeline off, on without RSS, and on \
         ({} operations a run, {} page faults a run; CPU ns per operation, best of runs, \
         wall in brackets; the setups alternate)\n",
        thousands(r.ops),
        thousands(r.faults)
    );
    let off = &r.setups[0];
    let added = |p: &PerOp, base: &PerOp| fmt_ns(p.cpu.min() - base.cpu.min());
    let rows = r
        .setups
        .iter()
        .map(|row| {
            vec![
                setup_name(row.setup).to_string(),
                cell(&row.pair),
                fmt_ratio(row.pair.cpu.min() / off.pair.cpu.min()),
                added(&row.pair, &off.pair),
                cell(&row.malloc),
                added(&row.malloc, &off.malloc),
                cell(&row.free),
                added(&row.free, &off.free),
                cell(&row.fault),
                fmt_ratio(row.fault.cpu.min() / off.fault.cpu.min()),
            ]
        })
        .collect();
    out.push_str(&markdown_table(
        &[
            "setup",
            "malloc+free pair",
            "pair / timeline off",
            "pair: added ns",
            "malloc alone",
            "malloc: added ns",
            "free alone",
            "free: added ns",
            "page fault",
            "fault / timeline off",
        ],
        &[
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
        ],
        rows,
    ));
    checks_md(&r.checks, out);
}

/// One line per timeline check.
fn checks_md(checks: &[TimelineCheck], out: &mut String) {
    let _ = writeln!(
        out,
        "Timeline checks: a timeline exactly when the setup keeps one, valid, its highest \
         bucket the process's peak, its end the bytes live at exit, RSS exactly when kept, \
         mapped bytes present, no bucket lost. One row per workload and setup: its first \
         run's figures (a failing run's, if one failed).\n"
    );
    // One row per workload and setup: the first run's figures, and how many of its
    // runs were exact (a failing run is shown in full instead).
    let mut groups: Vec<(&TimelineCheck, usize, usize)> = Vec::new();
    for c in checks {
        match groups
            .iter_mut()
            .find(|(first, _, _)| first.workload == c.workload && first.setup == c.setup)
        {
            Some((first, runs, exact)) => {
                *runs += 1;
                if c.exact() {
                    *exact += 1;
                } else if first.exact() {
                    *first = c;
                }
            }
            None => groups.push((c, 1, usize::from(c.exact()))),
        }
    }
    let rows = groups
        .iter()
        .map(|&(c, runs, exact)| {
            vec![
                c.workload.clone(),
                setup_name(c.setup).to_string(),
                if c.present {
                    format!(
                        "{} x {}",
                        thousands(c.buckets.0 as u64),
                        fmt_duration(c.buckets.1 as f64)
                    )
                } else {
                    "-".to_string()
                },
                format!(
                    "{} / {}",
                    thousands(c.max_and_peak.0),
                    thousands(c.max_and_peak.1)
                ),
                format!(
                    "{} / {}",
                    thousands(c.end_and_live.0),
                    thousands(c.end_and_live.1)
                ),
                match (c.rss, c.mapped) {
                    (true, true) => "RSS, mapped",
                    (true, false) => "RSS",
                    (false, true) => "mapped",
                    (false, false) => "-",
                }
                .to_string(),
                c.lost_buckets.to_string(),
                match &c.invalid {
                    Some(why) => format!("**NO** ({exact}/{runs} runs): {why}"),
                    None if exact == runs => format!("yes ({exact}/{runs} runs)"),
                    None => format!("**NO** ({exact}/{runs} runs)"),
                },
            ]
        })
        .collect();
    out.push_str(&markdown_table(
        &[
            "workload",
            "setup",
            "buckets",
            "highest bucket / peak bytes",
            "end / live at exit",
            "series",
            "lost",
            "exact",
        ],
        &[
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
            Align::Right,
            Align::Left,
        ],
        rows,
    ));
}

/// The section as JSON.
pub fn json(r: &TimelineResult) -> Json {
    let per_op = |p: &PerOp| {
        obj([
            ("wall_ns", samples_json(&p.wall)),
            ("cpu_ns", samples_json(&p.cpu)),
        ])
    };
    let setups = r
        .setups
        .iter()
        .map(|row| {
            obj([
                ("setup", text(setup_name(row.setup))),
                ("pair", per_op(&row.pair)),
                ("malloc", per_op(&row.malloc)),
                ("free", per_op(&row.free)),
                ("page_fault", per_op(&row.fault)),
            ])
        })
        .collect();
    let checks = r
        .checks
        .iter()
        .map(|c| {
            obj([
                ("workload", text(&c.workload)),
                ("setup", text(setup_name(c.setup))),
                ("buckets", Json::from(c.buckets.0 as u64)),
                ("bucket_ns", Json::from(c.buckets.1)),
                ("max_bytes", Json::from(c.max_and_peak.0)),
                ("peak_live_bytes", Json::from(c.max_and_peak.1)),
                ("end_bytes", Json::from(c.end_and_live.0)),
                ("live_bytes", Json::from(c.end_and_live.1)),
                ("lost_buckets", Json::from(c.lost_buckets)),
                ("exact", Json::from(c.exact())),
            ])
        })
        .collect();
    obj([
        ("ops", Json::from(r.ops)),
        ("page_faults", Json::from(r.faults)),
        ("setups", Json::Array(setups)),
        ("checks", Json::Array(checks)),
    ])
}
