//! Processes a benchmark harness starts for its own purposes, not as part of a
//! benchmark: criterion's check for gnuplot (`gnuplot --version`) and its `cargo
//! metadata` (to find cargo's target directory). Under `memtrack run -- cargo bench`
//! they are tracked like any process; the reports label them so that nobody takes their
//! counts for a benchmark's, and the history exports leave them out.

use memtrack_record::TrackedProcess;

use crate::command::program_name;

/// What a harness helper is, if `p` is one: a known helper command whose parent (in
/// `all`, the processes of the same results directory) ran benchmark regions, i.e. is
/// the harness. `criterion's check for gnuplot`.
pub fn harness_helper(p: &TrackedProcess, all: &[TrackedProcess]) -> Option<&'static str> {
    let parent_is_harness = all
        .iter()
        .any(|q| q.pid == p.ppid && q.started_ns <= p.started_ns && !q.benchmarks.is_empty());
    if !parent_is_harness {
        return None;
    }
    let program = program_name(p.command.first()?);
    let args: Vec<&str> = p.command[1..].iter().map(String::as_str).collect();
    match (program.as_str(), args.as_slice()) {
        ("gnuplot", ["--version"]) => Some("criterion's check for gnuplot"),
        ("cargo", ["metadata", ..]) => {
            Some("criterion's `cargo metadata`, to find the target directory")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::{BenchmarkStats, Stats};

    fn process(pid: u32, ppid: u32, command: &str) -> TrackedProcess {
        TrackedProcess::new(pid, ppid, command.split(' ').map(String::from).collect())
    }

    #[test]
    fn a_harness_helper_is_a_known_command_of_a_process_that_ran_benchmarks() {
        let mut bench = process(10, 1, "/t/release/deps/alloc-1a2b3c4d5e6f7a8b --bench");
        bench
            .benchmarks
            .push(BenchmarkStats::new("alloc::grow", Stats::default()));
        let gnuplot = process(11, 10, "gnuplot --version");
        let metadata = process(12, 10, "/usr/bin/cargo metadata --format-version 1");
        let other = process(13, 10, "sh -c x");
        let all = [
            bench.clone(),
            gnuplot.clone(),
            metadata.clone(),
            other.clone(),
        ];
        assert_eq!(
            harness_helper(&gnuplot, &all),
            Some("criterion's check for gnuplot")
        );
        assert_eq!(
            harness_helper(&metadata, &all),
            Some("criterion's `cargo metadata`, to find the target directory")
        );
        assert_eq!(harness_helper(&other, &all), None);
        assert_eq!(harness_helper(&bench, &all), None);
        let text = crate::report::render_text(&all);
        assert!(
            text.contains(
                "\nprocess 11 (parent 10): gnuplot --version [still running when its results \
                 were saved] (a harness helper: criterion's check for gnuplot; not a \
                 benchmark)\n"
            ),
            "{text}"
        );
        let (series, omitted) = crate::history::series(&[(std::path::Path::new(""), &all)], None);
        assert!(series.iter().all(|s| !s.name.contains("gnuplot")));
        assert!(omitted.iter().any(|o| o.name == "process gnuplot --version"
            && o.why == "a harness helper (criterion's check for gnuplot), not a benchmark"));
        // The same command under a process that ran no benchmark is the user's own.
        let plain = [process(10, 1, "make"), gnuplot.clone()];
        assert_eq!(harness_helper(&gnuplot, &plain), None);
    }
}
