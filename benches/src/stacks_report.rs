//! Benchmark 6's Markdown tables and JSON (see stacks.rs).

use std::fmt::Write as _;

use crate::{
    render::{Align, Json, fmt_ns, fmt_ratio, markdown_table, obj, samples_json, text, thousands},
    stacks::{StackCheck, StacksResult, setup_name},
};

/// The section as Markdown.
pub fn markdown(r: &StacksResult, out: &mut String) {
    let _ = writeln!(
        out,
        "### In-kernel call stacks: malloc and free at the bottom of a {}-deep recursion \
         ({} operations a run; CPU ns per operation, best of runs, wall in brackets; the \
         setups alternate)\n",
        r.levels,
        thousands(r.ops)
    );
    let off = &r.setups[0];
    let rows = r
        .setups
        .iter()
        .map(|row| {
            let cell = |p: &crate::probe_cost::PerOp| {
                format!("{} ({})", fmt_ns(p.cpu.min()), fmt_ns(p.wall.min()))
            };
            vec![
                setup_name(row.stacks),
                cell(&row.pair),
                fmt_ratio(row.pair.cpu.min() / off.pair.cpu.min()),
                fmt_ns(row.pair.cpu.min() - off.pair.cpu.min()),
                cell(&row.malloc),
                fmt_ns(row.malloc.cpu.min() - off.malloc.cpu.min()),
                cell(&row.free),
                fmt_ns(row.free.cpu.min() - off.free.cpu.min()),
            ]
        })
        .collect();
    out.push_str(&markdown_table(
        &[
            "setup",
            "malloc+free pair",
            "pair / stacks off",
            "pair: added ns",
            "malloc alone",
            "malloc: added ns",
            "free alone",
            "free: added ns",
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
        ],
        rows,
    ));
    let (t, n) = r.threads;
    let pairs = |p: &crate::probe_cost::PerOp| {
        format!("{} ({})", fmt_ns(p.cpu.min()), fmt_ns(p.wall.min()))
    };
    let _ = writeln!(
        out,
        "{t} threads x {} malloc+free pairs, CPU ns per pair of all threads (wall in \
         brackets): stacks off {}, stacks at depth {} {} ({}).\n",
        thousands(n),
        pairs(&r.threads_off_per_pair),
        memtrack::stacks::MAX_DEPTH,
        pairs(&r.threads_per_pair),
        fmt_ratio(r.threads_per_pair.cpu.min() / r.threads_off_per_pair.cpu.min()),
    );
    checks_md(&r.checks, out);
}

/// One line per stacks check.
fn checks_md(checks: &[StackCheck], out: &mut String) {
    let _ = writeln!(
        out,
        "Stacks checks: the loop's blocks all under one stack of the expected frames, \
         per-stack totals equal to the process's (bytes at its peak too), no stack lost.\n"
    );
    let rows = checks
        .iter()
        .map(|c| {
            vec![
                c.workload.clone(),
                c.depth.to_string(),
                format!(
                    "{} / {}",
                    thousands(c.loop_stack.alloc_calls),
                    thousands(c.expected.alloc_calls)
                ),
                c.loop_shape
                    .map_or("-".to_string(), |(frames, end)| format!("{frames} {end:?}")),
                format!(
                    "{} / {}",
                    thousands(c.sums.alloc_calls),
                    thousands(c.process.alloc_calls)
                ),
                format!(
                    "{} / {}{}",
                    thousands(c.at_peak_bytes.0),
                    thousands(c.at_peak_bytes.1),
                    if c.concurrent && c.at_peak_bytes.0 != c.at_peak_bytes.1 {
                        " (threads racing at the peak)"
                    } else {
                        ""
                    }
                ),
                c.lost_blocks.to_string(),
                if c.exact() { "yes" } else { "**NO**" }.to_string(),
            ]
        })
        .collect();
    out.push_str(&markdown_table(
        &[
            "workload",
            "depth",
            "loop stack blocks / expected",
            "loop stack frames",
            "all stacks' blocks / process",
            "bytes at peak: stacks / process",
            "lost",
            "exact",
        ],
        &[
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
        ],
        rows,
    ));
}

/// The section as JSON.
pub fn json(r: &StacksResult) -> Json {
    let per_op = |p: &crate::probe_cost::PerOp| {
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
                (
                    "depth",
                    row.stacks
                        .map_or(Json::Null, |s| Json::from(u64::from(s.depth))),
                ),
                (
                    "cache",
                    row.stacks.map_or(Json::Null, |s| Json::from(s.cache)),
                ),
                ("pair", per_op(&row.pair)),
                ("malloc", per_op(&row.malloc)),
                ("free", per_op(&row.free)),
            ])
        })
        .collect();
    obj([
        ("levels", Json::from(r.levels)),
        ("ops", Json::from(r.ops)),
        ("setups", Json::Array(setups)),
        ("threads", Json::from(r.threads.0)),
        ("ops_per_thread", Json::from(r.threads.1)),
        (
            "threads_stacks_off_per_pair",
            per_op(&r.threads_off_per_pair),
        ),
        ("threads_stacks_per_pair", per_op(&r.threads_per_pair)),
        (
            "checks",
            Json::Array(
                r.checks
                    .iter()
                    .map(|c| {
                        obj([
                            ("workload", text(&c.workload)),
                            ("depth", Json::from(u64::from(c.depth))),
                            ("exact", Json::from(c.exact())),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}
