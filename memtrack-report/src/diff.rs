//! `memtrack diff BASE NEW`: two runs' results compared, per directory (as `memtrack
//! report` finds them, recursively), per process and per benchmark, per counter:
//! absolute and relative change, and whether it is above `--max-increase`.
//!
//! What is compared with what is [`crate::pairing`]'s: benchmarks by uri, processes by
//! command line, with a cargo hash, a moved checkout and harness flags left out, then by
//! their place in the process tree. The text says how each pair was matched;
//! `--max-increase` applies to every pair, however matched. Processes and benchmarks
//! found in one run only are listed, and fail nothing.

use std::path::Path;

use memtrack_record::timeline::Timeline;
use tabled::{builder::Builder, settings::Style};

use crate::{
    counter::Counter,
    limits::DirResults,
    pairing::{self, MatchedBy},
    units,
};

/// The largest allowed increase of a counter, as a fraction `numerator / denominator`
/// (`5%` is 5/100; `2.5%` is 25/1000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxIncrease {
    numerator: u64,
    denominator: u64,
}

impl std::str::FromStr for MaxIncrease {
    type Err = String;

    /// `5%`, `0%`, `2.5%` (at most 6 decimals).
    fn from_str(text: &str) -> Result<Self, String> {
        let invalid =
            |why: &str| format!("invalid --max-increase {text:?}: {why} (e.g. 5%, 0.5%, 0%)");
        if text.trim().starts_with('-') {
            return Err(invalid(
                "a negative increase cannot be allowed; 0% allows none",
            ));
        }
        let number = text
            .trim()
            .strip_suffix('%')
            .ok_or_else(|| invalid("give a percentage, ending in %"))?;
        let (whole, decimals) = match number.split_once('.') {
            Some((whole, decimals)) => (whole, Some(decimals)),
            None => (number, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let decimals = decimals.unwrap_or("0");
        if !digits(whole) || !digits(decimals) || decimals.len() > 6 {
            return Err(invalid("not a number of percent with at most 6 decimals"));
        }
        let scale = 10u64.pow(decimals.len() as u32);
        let too_big = || invalid("too large");
        let whole: u64 = whole.parse().map_err(|_| too_big())?;
        let decimals: u64 = decimals.parse().map_err(|_| too_big())?;
        let numerator = whole
            .checked_mul(scale)
            .and_then(|w| w.checked_add(decimals))
            .ok_or_else(too_big)?;
        Ok(MaxIncrease {
            numerator,
            denominator: 100 * scale,
        })
    }
}

impl MaxIncrease {
    /// Whether going from `base` to `new` is a larger increase than this, exactly (no
    /// floating point): `new > base * (1 + fraction)`. Any increase from 0 is.
    pub fn exceeded(self, base: u64, new: u64) -> bool {
        let (n, d) = (u128::from(self.numerator), u128::from(self.denominator));
        u128::from(new) * d > u128::from(base) * (d + n)
    }

    /// `+5%`, `+2.5%`.
    pub fn show(self) -> String {
        let percent = self.numerator as f64 * 100.0 / self.denominator as f64;
        format!("+{}%", format_number(percent))
    }
}

/// `5`, `2.5`, `0.125`: a percentage without trailing zeros.
fn format_number(x: f64) -> String {
    let text = format!("{x:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_owned()
}

/// How to compare.
#[derive(Clone, Debug)]
pub struct DiffOptions {
    /// The counters compared (and checked against `max_increase`).
    pub counters: Vec<Counter>,
    /// The largest increase allowed for each of them (None: none checked).
    pub max_increase: Option<MaxIncrease>,
}

/// One counter of one process or benchmark, in both runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The counter.
    pub counter: Counter,
    /// Its value in BASE.
    pub base: u64,
    /// Its value in NEW.
    pub new: u64,
    /// Whether the increase is above `--max-increase`.
    pub exceeded: bool,
}

impl Change {
    /// `+100 (+10.0%)`, `-3 (-0.5%)`, `0 (0.0%)`, `+5 (from 0)`.
    pub fn show(&self) -> String {
        let delta = i128::from(self.new) - i128::from(self.base);
        let absolute = if self.counter.is_bytes() {
            format!("{} B", signed(delta))
        } else {
            signed(delta)
        };
        if self.base == 0 {
            return if delta == 0 {
                format!("{absolute} (0.0%)")
            } else {
                format!("{absolute} (from 0)")
            };
        }
        let percent = delta as f64 * 100.0 / self.base as f64;
        // One decimal, or as many as a change shows as a change (+0.027%, never +0.0%
        // next to a limit of 0% it broke), up to 6.
        let mut decimals = 1;
        while delta != 0
            && decimals < 6
            && format!("{:.*}", decimals, percent.abs())
                .trim_matches(['0', '.'])
                .is_empty()
        {
            decimals += 1;
        }
        format!(
            "{absolute} ({}{percent:.decimals$}%)",
            if delta > 0 { "+" } else { "" }
        )
    }
}

/// `+1,234`, `-5`, `0`.
fn signed(delta: i128) -> String {
    let magnitude = units::exact(delta.unsigned_abs() as u64);
    match delta.signum() {
        1 => format!("+{magnitude}"),
        -1 => format!("-{magnitude}"),
        _ => magnitude,
    }
}

/// A process or benchmark found in both runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compared {
    /// BASE's: `benchmark URI` or `process COMMAND` (`#2` after it for the second of that
    /// uri or command line), with ` in DIR` for a directory below the one given
    /// ([`pairing::Entry::what`]).
    pub what: String,
    /// NEW's, named alike (the same as `what` when matched by uri or command line).
    pub new_what: String,
    /// How the two were paired.
    pub matched_by: MatchedBy,
    /// Whether it is a benchmark (else a whole process).
    pub benchmark: bool,
    /// One per counter compared.
    pub changes: Vec<Change>,
    /// A benchmark that did not finish in either run (`BenchmarkStats::unfinished`): its
    /// counters are partial, so with `--max-increase` every one of them fails.
    pub unfinished: bool,
    /// Its memory over time in BASE (None: not recorded), for the HTML comparison.
    pub base_timeline: Option<Timeline>,
    /// Its memory over time in NEW.
    pub new_timeline: Option<Timeline>,
}

/// The comparison of two runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// What both runs have: benchmarks first, then processes, each in order of
    /// directory and name.
    pub compared: Vec<Compared>,
    /// What only BASE has (`benchmark URI`, `process COMMAND`, as in `compared`).
    pub only_in_base: Vec<String>,
    /// What only NEW has.
    pub only_in_new: Vec<String>,
}

impl Diff {
    /// How many counters are above `--max-increase`.
    pub fn exceeded(&self) -> usize {
        self.compared
            .iter()
            .flat_map(|c| &c.changes)
            .filter(|c| c.exceeded)
            .count()
    }

    /// How many counters were compared.
    pub fn changes(&self) -> usize {
        self.compared.iter().map(|c| c.changes.len()).sum()
    }
}

/// Compares two runs (each: its directories' results), paired by [`pairing::pair`].
pub fn diff(base: &[DirResults], new: &[DirResults], options: &DiffOptions) -> Diff {
    compare(&pairing::pair(base, new), options)
}

/// Compares the pairs of two runs, counter by counter.
pub fn compare(pairs: &pairing::Pairing, options: &DiffOptions) -> Diff {
    let compared = pairs
        .pairs
        .iter()
        .map(|pair| {
            let unfinished = pair.base.unfinished() || pair.new.unfinished();
            let (base_stats, new_stats) = (pair.base.stats(), pair.new.stats());
            let changes = options
                .counters
                .iter()
                .map(|&counter| {
                    let (b, n) = (counter.of(base_stats), counter.of(new_stats));
                    Change {
                        counter,
                        base: b,
                        new: n,
                        exceeded: options
                            .max_increase
                            .is_some_and(|m| unfinished || m.exceeded(b, n)),
                    }
                })
                .collect();
            Compared {
                what: pair.base.what(),
                new_what: pair.new.what(),
                matched_by: pair.matched_by.clone(),
                benchmark: pair.base.is_benchmark(),
                changes,
                unfinished,
                base_timeline: pair.base.timeline().cloned(),
                new_timeline: pair.new.timeline().cloned(),
            }
        })
        .collect();
    Diff {
        compared,
        only_in_base: pairs.only_in_base.iter().map(|e| e.what()).collect(),
        only_in_new: pairs.only_in_new.iter().map(|e| e.what()).collect(),
    }
}

/// The rows of the comparison table: what, counter, base, new, change, verdict.
fn rows(diff: &Diff, options: &DiffOptions, markdown: bool) -> Vec<Vec<String>> {
    let code = |s: &str| {
        if markdown {
            format!("`{}`", s.replace('`', "'").replace('|', "\\|"))
        } else {
            s.to_owned()
        }
    };
    let mut rows = vec![
        ["", "counter", "base", "new", "change", ""]
            .map(String::from)
            .to_vec(),
    ];
    for compared in &diff.compared {
        for (i, change) in compared.changes.iter().enumerate() {
            let verdict = match (change.exceeded, options.max_increase) {
                (true, Some(_)) if compared.unfinished && markdown => "**unfinished**".to_string(),
                (true, Some(_)) if compared.unfinished => "UNFINISHED".to_string(),
                (true, Some(max)) if markdown => format!("**above {}**", max.show()),
                (true, Some(max)) => format!("ABOVE {}", max.show()),
                _ => String::new(),
            };
            let what = if compared.unfinished {
                format!("{} (unfinished: partial counters)", compared.what)
            } else {
                compared.what.clone()
            };
            rows.push(vec![
                if i == 0 { code(&what) } else { String::new() },
                change.counter.name().to_owned(),
                change.counter.show(change.base),
                change.counter.show(change.new),
                change.show(),
                verdict,
            ]);
        }
    }
    rows
}

/// One line saying what was compared and what was found.
pub(crate) fn summary(diff: &Diff, options: &DiffOptions) -> String {
    let names: Vec<&str> = options.counters.iter().map(|c| c.name()).collect();
    let verdict = match options.max_increase {
        None => "no --max-increase given".to_owned(),
        Some(max) => {
            let unfinished = diff.compared.iter().filter(|c| c.unfinished).count();
            let above = diff
                .compared
                .iter()
                .filter(|c| !c.unfinished)
                .flat_map(|c| &c.changes)
                .filter(|c| c.exceeded)
                .count();
            let mut verdict = match above {
                0 => format!("none above {}", max.show()),
                n => format!("{n} above {}", max.show()),
            };
            if unfinished != 0 {
                verdict.push_str(&format!(
                    "; {} unfinished (partial counters: failed)",
                    units::count(unfinished as u64, "benchmark")
                ));
            }
            verdict
        }
    };
    let benchmarks = diff.compared.iter().filter(|c| c.benchmark).count();
    let processes = diff.compared.len() - benchmarks;
    let mut what = Vec::new();
    if processes != 0 || benchmarks == 0 {
        what.push(of(processes, "process", "processes"));
    }
    if benchmarks != 0 {
        what.push(of(benchmarks, "benchmark", "benchmarks"));
    }
    format!(
        "{} compared ({}) in {}: {verdict}",
        of(diff.changes(), "counter", "counters"),
        names.join(", "),
        what.join(" and ")
    )
}

/// `1 process`, `2 processes`.
fn of(n: usize, one: &str, many: &str) -> String {
    format!(
        "{} {}",
        units::exact(n as u64),
        if n == 1 { one } else { many }
    )
}

/// How each pair was matched: one line for those named alike on both sides (`matched
/// by same uri: 3 benchmarks`), one for each other pair, both sides named.
fn matched_lines(diff: &Diff, bullet: &str, code: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    for (how, one, many) in [
        (MatchedBy::Uri, "benchmark", "benchmarks"),
        (MatchedBy::Command, "process", "processes"),
    ] {
        let n = diff.compared.iter().filter(|c| c.matched_by == how).count();
        if n != 0 {
            out.push_str(&format!("{bullet}matched by {how}: {}\n", of(n, one, many)));
        }
    }
    for c in diff.compared.iter().filter(|c| !c.matched_by.is_exact()) {
        out.push_str(&format!(
            "{bullet}matched by {}: {} ↔ {}\n",
            c.matched_by,
            code(&c.what),
            code(&c.new_what)
        ));
    }
    out
}

fn only_lines(diff: &Diff, bullet: &str, code: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    for (side, list) in [("BASE", &diff.only_in_base), ("NEW", &diff.only_in_new)] {
        for what in list {
            out.push_str(&format!("{bullet}only in {side}: {}\n", code(what)));
        }
    }
    out
}

/// The comparison for people: a summary line, an aligned table, what only one run has.
pub fn render_text(diff: &Diff, options: &DiffOptions) -> String {
    let mut table = Builder::from(rows(diff, options, false)).build();
    table.with(Style::blank());
    let mut out = format!("memtrack diff: {}\n", summary(diff, options));
    for line in table.to_string().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(&matched_lines(diff, "", |s| s.to_owned()));
    out.push_str(&only_lines(diff, "", |s| s.to_owned()));
    out
}

/// The comparison as Markdown, for a CI job summary (`$GITHUB_STEP_SUMMARY`): a heading
/// naming both runs, the summary line, a table, what only one run has.
pub fn render_markdown(diff: &Diff, options: &DiffOptions, base: &Path, new: &Path) -> String {
    let mut table = Builder::from(rows(diff, options, true)).build();
    table.with(Style::markdown());
    let code = |s: &str| format!("`{}`", s.replace('`', "'"));
    let mut out = format!(
        "### memtrack diff: {} → {}\n\n{}\n\n{table}\n",
        code(&base.display().to_string()),
        code(&new.display().to_string()),
        summary(diff, options)
    );
    let lines = matched_lines(diff, "- ", code) + &only_lines(diff, "- ", code);
    if !lines.is_empty() {
        out.push('\n');
        out.push_str(&lines);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::{BenchmarkStats, Stats, TrackedProcess};

    fn max(text: &str) -> MaxIncrease {
        text.parse().unwrap()
    }

    #[test]
    fn max_increase_is_exact() {
        assert!(!max("10%").exceeded(1000, 1100));
        assert!(max("10%").exceeded(1000, 1101));
        assert!(max("9.99%").exceeded(1000, 1100));
        assert!(!max("0%").exceeded(7, 7));
        assert!(max("0%").exceeded(7, 8));
        assert!(max("1000%").exceeded(0, 1));
        assert!(!max("5%").exceeded(u64::MAX, u64::MAX));
        assert_eq!(max("2.5%").show(), "+2.5%");
        assert_eq!(max("5%").show(), "+5%");
        for bad in [
            "5",
            "x%",
            "1.%",
            "-5%",
            "1.1234567%",
            "99999999999999999999%",
        ] {
            let err = bad.parse::<MaxIncrease>().unwrap_err();
            assert!(
                err.starts_with(&format!("invalid --max-increase {bad:?}")),
                "{err}"
            );
        }
        let negative = "-5%".parse::<MaxIncrease>().unwrap_err();
        assert!(
            negative.contains("a negative increase cannot be allowed"),
            "{negative}"
        );
    }

    #[test]
    fn changes_are_shown_absolute_and_relative() {
        let change = |counter, base, new| Change {
            counter,
            base,
            new,
            exceeded: false,
        };
        assert_eq!(
            change(Counter::AllocCalls, 1000, 1100).show(),
            "+100 (+10.0%)"
        );
        assert_eq!(
            change(Counter::BytesAllocated, 6400, 6000).show(),
            "-400 B (-6.2%)"
        );
        assert_eq!(change(Counter::AllocCalls, 0, 0).show(), "0 (0.0%)");
        // A change too small for one decimal still shows as one.
        assert_eq!(
            change(Counter::BytesAllocated, 73_260, 73_280).show(),
            "+20 B (+0.03%)"
        );
        assert_eq!(
            change(Counter::AllocCalls, 1_000_000, 999_999).show(),
            "-1 (-0.0001%)"
        );
        assert_eq!(change(Counter::AllocCalls, 0, 5).show(), "+5 (from 0)");
    }

    fn process(
        pid: u32,
        started: u64,
        command: &str,
        benchmarks: &[(&str, u64)],
    ) -> TrackedProcess {
        let mut p = TrackedProcess::new(pid, 1, command.split(' ').map(String::from).collect());
        p.started_ns = started;
        for (uri, calls) in benchmarks {
            let mut stats = Stats::default();
            stats.alloc_calls = *calls;
            p.stats.alloc_calls += calls;
            p.benchmarks.push(BenchmarkStats::new(*uri, stats));
        }
        p
    }

    /// A benchmark that did not finish in either run fails every counter compared (its
    /// counters are partial: fewer allocations would pass), and says why.
    #[test]
    fn an_unfinished_benchmark_fails_the_comparison() {
        let base = [process(10, 1, "bench", &[("a", 100), ("b", 10)])];
        let mut new = [process(11, 1, "bench", &[("a", 50), ("b", 10)])];
        new[0].benchmarks[0] = new[0].benchmarks[0].clone().into_unfinished();
        let options = DiffOptions {
            counters: vec![Counter::AllocCalls],
            max_increase: Some(max("5%")),
        };
        let d = diff(
            &[(Path::new(""), &base)],
            &[(Path::new(""), &new)],
            &options,
        );
        let got: Vec<(&str, bool, bool)> = d
            .compared
            .iter()
            .map(|c| (c.what.as_str(), c.unfinished, c.changes[0].exceeded))
            .collect();
        assert_eq!(
            got,
            [
                ("benchmark a", true, true),
                ("benchmark b", false, false),
                ("process bench", false, false),
            ]
        );
        let text = render_text(&d, &options);
        assert!(
            text.starts_with(
                "memtrack diff: 3 counters compared (alloc_calls) in 1 process and 2 \
                 benchmarks: none above +5%; 1 benchmark unfinished (partial counters: failed)\n"
            ),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("benchmark a"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            row.trim_start()
                .starts_with("benchmark a (unfinished: partial counters)")
                && row.ends_with("UNFINISHED"),
            "{row:?}"
        );
    }

    #[test]
    fn processes_match_by_command_and_position_benchmarks_by_uri() {
        // Pids differ, and the second `sh` started first in NEW's pid order.
        let base = [
            process(10, 1, "bench-0123456789abcdef", &[("a", 100), ("b", 10)]),
            process(11, 2, "sh -c x", &[]),
            process(12, 3, "sh -c x", &[]),
            process(13, 4, "gone", &[("old", 1)]),
        ];
        let mut new = [
            process(90, 1, "bench-fedcba9876543210", &[("a", 110), ("b", 10)]),
            process(80, 2, "sh -c x", &[]),
            process(85, 3, "sh -c x", &[]),
            process(70, 4, "fresh", &[]),
        ];
        new[1].stats.alloc_calls = 5;
        let options = DiffOptions {
            counters: vec![Counter::AllocCalls],
            max_increase: Some(max("5%")),
        };
        let d = diff(
            &[(Path::new(""), &base)],
            &[(Path::new(""), &new)],
            &options,
        );
        let got: Vec<(&str, u64, u64, bool)> = d
            .compared
            .iter()
            .map(|c| {
                let ch = &c.changes[0];
                (c.what.as_str(), ch.base, ch.new, ch.exceeded)
            })
            .collect();
        assert_eq!(
            got,
            [
                ("benchmark a", 100, 110, true),
                ("benchmark b", 10, 10, false),
                ("process bench-0123456789abcdef", 110, 120, true),
                ("process sh -c x", 0, 5, true),
                ("process sh -c x #2", 0, 0, false),
            ]
        );
        assert_eq!(d.only_in_base, ["benchmark old", "process gone"]);
        assert_eq!(d.only_in_new, ["process fresh"]);
        assert_eq!(d.exceeded(), 3);

        let text = render_text(&d, &options);
        assert!(
            text.starts_with(
                "memtrack diff: 5 counters compared (alloc_calls) in 3 processes and 2 \
                 benchmarks: 3 above +5%\n"
            ),
            "{text}"
        );
        let line = text.lines().find(|l| l.contains("benchmark a ")).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words,
            [
                "benchmark",
                "a",
                "alloc_calls",
                "100",
                "110",
                "+10",
                "(+10.0%)",
                "ABOVE",
                "+5%"
            ]
        );
        assert!(
            text.ends_with(
                "matched by same uri: 2 benchmarks\nmatched by same command line: 3 processes\n\
                 only in BASE: benchmark old\nonly in BASE: process gone\nonly in NEW: process fresh\n"
            ),
            "{text}"
        );

        let markdown = render_markdown(&d, &options, Path::new("base"), Path::new("new"));
        assert!(
            markdown.starts_with("### memtrack diff: `base` → `new`\n\n5 counters compared"),
            "{markdown}"
        );
        let row = markdown
            .lines()
            .find(|l| l.starts_with("| `benchmark a`"))
            .unwrap();
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(
            cells,
            [
                "",
                "`benchmark a`",
                "alloc_calls",
                "100",
                "110",
                "+10 (+10.0%)",
                "**above +5%**",
                ""
            ]
        );
        assert!(
            markdown.contains("\n- only in NEW: `process fresh`\n"),
            "{markdown}"
        );
    }

    /// Two checkouts: the pair is compared and checked like any other, and the text
    /// says how it was matched; one process is `1 process`.
    #[test]
    fn a_pair_from_two_checkouts_is_checked_and_says_how_it_matched() {
        let mut base = [process(10, 1, "/ci/base/target/release/prog", &[])];
        let mut new = [process(20, 1, "/ci/new/target/release/prog", &[])];
        base[0].stats.alloc_calls = 100;
        new[0].stats.alloc_calls = 106;
        let options = DiffOptions {
            counters: vec![Counter::AllocCalls],
            max_increase: Some(max("5%")),
        };
        let d = diff(
            &[(Path::new(""), &base)],
            &[(Path::new(""), &new)],
            &options,
        );
        assert_eq!(d.exceeded(), 1);
        assert_eq!(
            d.compared[0].new_what,
            "process /ci/new/target/release/prog"
        );
        let text = render_text(&d, &options);
        assert!(
            text.starts_with(
                "memtrack diff: 1 counter compared (alloc_calls) in 1 process: 1 above +5%\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "matched by command line with the checkout moved (/ci/base → /ci/new): \
                 process /ci/base/target/release/prog ↔ process /ci/new/target/release/prog\n"
            ),
            "{text}"
        );
        let markdown = render_markdown(&d, &options, Path::new("b"), Path::new("n"));
        assert!(
            markdown.ends_with(
                "\n- matched by command line with the checkout moved (/ci/base → /ci/new): \
                 `process /ci/base/target/release/prog` ↔ `process /ci/new/target/release/prog`\n"
            ),
            "{markdown}"
        );
    }
}
