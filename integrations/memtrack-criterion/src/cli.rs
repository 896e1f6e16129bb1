//! What criterion's command line asks for, as far as memtrack needs to know under
//! `memtrack run`: whether criterion would benchmark (and time) or only test, list or
//! profile, and which benchmarks its filter selects. Read with the same rules as
//! criterion 0.8.2's `Criterion::configure_from_args`.

use criterion::BenchmarkFilter;
use regex::Regex;

/// What criterion does with the benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Warm up, sample, analyse, save and compare baselines (the timing run).
    Benchmark,
    /// Run each benchmark once, untimed (`--test`, or no `--bench`: `cargo test --benches`).
    Test,
    /// Print the benchmarks' names (`--list`).
    List,
    /// Iterate for a while, untimed and unanalysed (`--profile-time`).
    Profile,
}

/// criterion's action and filter.
#[derive(Clone, Debug)]
pub(crate) struct Cli {
    pub(crate) action: Action,
    pub(crate) filter: BenchmarkFilter,
}

/// criterion 0.8.2's options that take a value (`--name VALUE` or `--name=VALUE`).
const WITH_VALUE: &[&str] = &[
    "-c",
    "--color",
    "--colour",
    "-s",
    "--save-baseline",
    "-b",
    "--baseline",
    "--baseline-lenient",
    "--format",
    "--profile-time",
    "--load-baseline",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--plotting-backend",
    "--output-format",
];

impl Default for Cli {
    /// `Criterion::default()` without `configure_from_args`: benchmark everything.
    fn default() -> Self {
        Cli {
            action: Action::Benchmark,
            filter: BenchmarkFilter::AcceptAll,
        }
    }
}

/// criterion's regex filter for `filter` (criterion panics on a bad one, so does this).
pub(crate) fn regex_filter(filter: &str) -> BenchmarkFilter {
    BenchmarkFilter::Regex(
        Regex::new(filter).unwrap_or_else(|err| {
            panic!("Unable to parse '{filter}' as a regular expression: {err}")
        }),
    )
}

impl Cli {
    /// What `args` (the command line after the program name) ask criterion for.
    pub(crate) fn from_args(args: impl IntoIterator<Item = String>) -> Cli {
        let (mut bench, mut test, mut list, mut profile) = (false, false, false, false);
        let (mut ignored, mut exact) = (false, false);
        let mut filter = None;
        let mut args = args.into_iter();
        let mut positional_only = false;
        while let Some(arg) = args.next() {
            if positional_only || !arg.starts_with('-') || arg == "-" {
                filter.get_or_insert(arg);
                continue;
            }
            let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
            match name {
                "--" => positional_only = true,
                "--bench" => bench = true,
                "--test" => test = true,
                "--list" => list = true,
                "--ignored" => ignored = true,
                "--exact" => exact = true,
                "--profile-time" => profile = true,
                _ => {}
            }
            if WITH_VALUE.contains(&name) && !arg.contains('=') {
                args.next();
            }
        }
        let action = if list {
            Action::List
        } else if test || !bench {
            Action::Test
        } else if profile {
            Action::Profile
        } else {
            Action::Benchmark
        };
        let filter = match (ignored, filter) {
            (true, _) => BenchmarkFilter::RejectAll,
            (false, Some(f)) if exact => BenchmarkFilter::Exact(f),
            (false, Some(f)) => regex_filter(&f),
            (false, None) => BenchmarkFilter::AcceptAll,
        };
        Cli { action, filter }
    }

    /// Whether criterion's filter selects the benchmark with full id `id`.
    pub(crate) fn selects(&self, id: &str) -> bool {
        match &self.filter {
            BenchmarkFilter::AcceptAll => true,
            BenchmarkFilter::Regex(regex) => regex.is_match(id),
            BenchmarkFilter::Exact(exact) => id == exact,
            BenchmarkFilter::RejectAll => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::from_args(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn cargo_bench_benchmarks_and_cargo_test_tests() {
        assert_eq!(cli(&["--bench"]).action, Action::Benchmark);
        assert_eq!(cli(&[]).action, Action::Test);
        assert_eq!(cli(&["--bench", "--test"]).action, Action::Test);
        assert_eq!(cli(&["--bench", "--list"]).action, Action::List);
        assert_eq!(
            cli(&["--bench", "--profile-time", "5"]).action,
            Action::Profile
        );
    }

    #[test]
    fn the_filter_is_the_first_free_argument() {
        let c = cli(&[
            "--bench",
            "--save-baseline",
            "base",
            "vec",
            "--sample-size=10",
        ]);
        assert!(c.selects("vec/grow_100") && !c.selects("three_blocks"));
        let c = cli(&["--bench", "-b", "old", "--exact", "three_blocks"]);
        assert!(c.selects("three_blocks") && !c.selects("three_blocks_2"));
        let c = cli(&["--bench", "--ignored", "vec"]);
        assert!(!c.selects("vec"));
        let c = cli(&["--bench", "--color", "never", "--warm-up-time", "0.1"]);
        assert!(c.selects("anything"));
        let c = cli(&["--bench", "^thr"]);
        assert!(c.selects("three_blocks") && !c.selects("spawned/three"));
    }
}
