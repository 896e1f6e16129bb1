//! Benchmark 9's Markdown table and JSON (see short.rs).

use std::fmt::Write as _;

use crate::{
    render::{Align, Json, markdown_table, obj, samples_json, text},
    samples::Samples,
    short::ShortResult,
};

/// "median (best)" in ms.
fn ms(s: &Samples) -> String {
    format!("{:.1} ({:.1})", s.median(), s.min())
}

/// The section as Markdown.
pub fn markdown(r: &ShortResult, out: &mut String) {
    let _ = writeln!(
        out,
        "### Short processes: `memtrack run -- /bin/true`, and a shell loop starting \
         `/bin/true` {} times (wall ms, median of {} rounds, best in brackets; the setups \
         alternate)\n",
        r.processes,
        r.true_native.len()
    );
    let rows = vec![
        vec![
            "`/bin/true`".to_string(),
            ms(&r.true_native),
            ms(&r.true_tracked),
            format!("{:.1}", r.true_tracked.median() - r.true_native.median()),
        ],
        vec![
            format!("`sh -c` loop of {} `/bin/true`", r.processes),
            ms(&r.loop_native.0),
            ms(&r.loop_tracked.0),
            format!(
                "{:.1}",
                r.loop_tracked.0.median() - r.loop_native.0.median()
            ),
        ],
        vec![
            "the same loop, no iteration".to_string(),
            ms(&r.loop_native.1),
            ms(&r.loop_tracked.1),
            format!(
                "{:.1}",
                r.loop_tracked.1.median() - r.loop_native.1.median()
            ),
        ],
    ];
    out.push_str(&markdown_table(
        &["command", "untracked", "memtrack run", "added (medians)"],
        &[Align::Left, Align::Right, Align::Right, Align::Right],
        rows,
    ));
    let _ = writeln!(
        out,
        "\nEach process the tracked command started cost {:.2} ms more than untracked \
         ((loop - empty loop) tracked less the same untracked, over {} processes, from \
         the medians). Tracked loops whose results held all {} processes, each probed: \
         {} of {}. memtrack binary: `{}`.\n",
        r.per_process_ms(),
        r.processes,
        r.processes + 1,
        r.complete_runs.0,
        r.complete_runs.1,
        r.memtrack.display()
    );
}

/// The section as JSON (every sample, ms).
pub fn json(r: &ShortResult) -> Json {
    obj([
        ("memtrack", text(r.memtrack.display().to_string())),
        ("processes", Json::from(r.processes)),
        ("true_native_ms", samples_json(&r.true_native)),
        ("true_tracked_ms", samples_json(&r.true_tracked)),
        ("loop_native_ms", samples_json(&r.loop_native.0)),
        ("empty_loop_native_ms", samples_json(&r.loop_native.1)),
        ("loop_tracked_ms", samples_json(&r.loop_tracked.0)),
        ("empty_loop_tracked_ms", samples_json(&r.loop_tracked.1)),
        ("per_process_ms", Json::from(r.per_process_ms())),
        ("complete_runs", Json::from(r.complete_runs.0)),
        ("tracked_loops", Json::from(r.complete_runs.1)),
    ])
}
