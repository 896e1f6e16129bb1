//! Per-benchmark limits, checked by `memtrack run` and `memtrack report`:
//!
//! ```text
//! --limit 'URI_GLOB:COUNTER<=VALUE'            benchmarks whose uri matches
//! --limit 'process:CMD_GLOB:COUNTER<=VALUE'    whole processes, by command line
//! ```
//!
//! `URI_GLOB` is a glob over a benchmark's uri (`*` matches anything, `/` and `::`
//! included; `?` one character; `[abc]`, `{a,b}`; `\` escapes); `CMD_GLOB` one over a
//! process's command line, its arguments joined with spaces. `COUNTER` is a counter's
//! name ([`Counter`]: `peak_live_bytes`, `bytes_allocated`, `alloc_calls`, ...). `VALUE`
//! is a number, for byte counters with an optional unit (`1MiB` = 1,048,576, `1MB` =
//! 1,000,000, `512KiB`, `1.5GiB`; `B` or none: bytes). The glob is everything before the
//! last `:` ahead of the counter, so uris with `::` need no quoting. A limit that matches
//! nothing is an error: a typo must not pass as a limit kept.
//!
//! `--limits FILE` reads limits from a file, one per line in the same syntax; blank
//! lines and lines starting with `#` are passed over.

use std::{fmt, path::Path, str::FromStr};

use globset::{GlobBuilder, GlobMatcher};
use memtrack_record::{Stats, TrackedProcess};

use crate::counter::Counter;

/// What a limit applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Benchmarks (regions an integration marked), by uri.
    Benchmarks,
    /// Whole processes (their totals), by command line.
    Processes,
}

/// One limit: `COUNTER <= max` for every benchmark (or process) the glob matches.
#[derive(Clone, Debug)]
pub struct Limit {
    /// As written.
    pub text: String,
    /// Benchmarks or processes.
    pub target: Target,
    /// The glob, as written.
    pub pattern: String,
    glob: GlobMatcher,
    /// The counter bounded.
    pub counter: Counter,
    /// Its largest allowed value (bytes, or a count).
    pub max: u64,
}

impl FromStr for Limit {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let syntax = "a limit is URI_GLOB:COUNTER<=VALUE or process:CMD_GLOB:COUNTER<=VALUE, \
                      e.g. '*:peak_live_bytes<=1MiB'";
        let invalid = |why: String| format!("invalid limit {text:?}: {why} ({syntax})");
        let (left, value) = text
            .rsplit_once("<=")
            .ok_or_else(|| invalid("no `<=`".into()))?;
        let (pattern, counter) = left
            .rsplit_once(':')
            .ok_or_else(|| invalid("no `:` between the glob and the counter".into()))?;
        let counter = Counter::from_name(counter.trim()).map_err(invalid)?;
        let (target, pattern) = match pattern.strip_prefix("process:") {
            Some(rest) => (Target::Processes, rest),
            None => (Target::Benchmarks, pattern),
        };
        if pattern.is_empty() {
            return Err(invalid("the glob is empty (`*` matches everything)".into()));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(false)
            .build()
            .map_err(|e| invalid(format!("the glob {pattern:?}: {e}")))?
            .compile_matcher();
        let max = parse_value(counter, value.trim()).map_err(invalid)?;
        Ok(Limit {
            text: text.to_owned(),
            target,
            pattern: pattern.to_owned(),
            glob,
            counter,
            max,
        })
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The bound of a limit on `counter`: a plain number, or for bytes a size with a unit.
fn parse_value(counter: Counter, value: &str) -> Result<u64, String> {
    if counter.is_bytes() {
        parse_size::parse_size(value).map_err(|e| {
            format!("{value:?} is not a size in bytes ({e}; e.g. 1048576, 1MiB, 512KiB, 1.5GB)")
        })
    } else {
        value.parse::<u64>().map_err(|_| {
            format!(
                "{} is a count, and {value:?} is not a whole number",
                counter.name()
            )
        })
    }
}

/// Reads limits from `path`, one per line (blank lines and `#` comments passed over);
/// errors name the file and the line.
pub fn read_file(path: &Path) -> Result<Vec<Limit>, crate::LimitsFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| crate::LimitsFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(n, line)| {
            line.parse().map_err(|reason| crate::LimitsFileError::Line {
                path: path.to_path_buf(),
                line: n,
                reason,
            })
        })
        .collect()
}

/// The results of one directory: its path relative to what was given (empty: that
/// directory itself) and its processes.
pub type DirResults<'a> = (&'a Path, &'a [TrackedProcess]);

/// What checking limits found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// One line per counter over its limit, naming the benchmark (or process), where it
    /// ran, the value and the limit.
    pub exceeded: Vec<String>,
    /// The limits that matched no benchmark (or process).
    pub unmatched: Vec<String>,
    /// How many (limit, benchmark or process) pairs were checked.
    pub checks: usize,
}

/// ` in DIR` for a directory below the one given, nothing for that one.
fn place(dir: &Path) -> String {
    if dir.as_os_str().is_empty() {
        String::new()
    } else {
        format!(" in {}", dir.display())
    }
}

/// Checks every limit against every benchmark (or process) it matches in `dirs`.
pub fn check(limits: &[Limit], dirs: &[DirResults]) -> Checked {
    let mut checked = Checked::default();
    for limit in limits {
        let mut matched = false;
        // `unfinished`: a benchmark region the process ended inside. Its partial
        // counters would pass a limit the whole iteration may exceed: it fails instead.
        let mut check = |what: String, stats: &Stats, unfinished: bool| {
            matched = true;
            checked.checks += 1;
            let value = limit.counter.of(stats);
            if unfinished {
                checked.exceeded.push(format!(
                    "{what}: did not finish (the process ended inside it), so its counters \
                     are partial (limit {:?})",
                    limit.text
                ));
            } else if value > limit.max {
                checked.exceeded.push(format!(
                    "{what}: {} is {}, more than {} (limit {:?})",
                    limit.counter.name(),
                    limit.counter.show(value),
                    limit.counter.show(limit.max),
                    limit.text
                ));
            }
        };
        for (dir, processes) in dirs {
            for p in processes.iter() {
                match limit.target {
                    Target::Benchmarks => {
                        for b in p.benchmarks.iter().filter(|b| limit.glob.is_match(&b.uri)) {
                            let what =
                                format!("benchmark {}{} (process {})", b.uri, place(dir), p.pid);
                            check(what, &b.stats, b.unfinished);
                        }
                    }
                    Target::Processes => {
                        let command = p.command.join(" ");
                        if limit.glob.is_match(&command) {
                            let what = format!("process {} ({command}){}", p.pid, place(dir));
                            check(what, &p.stats, false);
                        }
                    }
                }
            }
        }
        if !matched {
            let no_regions = dirs
                .iter()
                .all(|(_, processes)| processes.iter().all(|p| p.benchmarks.is_empty()));
            checked.unmatched.push(match (limit.target, no_regions) {
                (Target::Benchmarks, true) => format!(
                    "limit {:?} is on benchmarks, and the results have no benchmark \
                         region (a limit on whole processes is written 'process:CMD_GLOB:...')",
                    limit.text
                ),
                (Target::Benchmarks, false) => format!(
                    "limit {:?} matches no benchmark uri (check the glob {:?})",
                    limit.text, limit.pattern
                ),
                (Target::Processes, _) => format!(
                    "limit {:?} matches no process's command line (check the glob {:?})",
                    limit.text, limit.pattern
                ),
            });
        }
    }
    checked
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::BenchmarkStats;

    fn limit(text: &str) -> Limit {
        text.parse().unwrap()
    }

    #[test]
    fn limits_parse_with_units_and_globs_containing_colons() {
        let l = limit("marked_regions::*:peak_live_bytes<=1MiB");
        assert_eq!(
            (l.target, l.pattern.as_str(), l.counter, l.max),
            (
                Target::Benchmarks,
                "marked_regions::*",
                Counter::PeakLiveBytes,
                1 << 20
            )
        );
        assert_eq!(limit("*:bytes_allocated<=1.5KB").max, 1500);
        assert_eq!(limit("*:bytes_allocated <= 512").max, 512);
        let p = limit("process:*/leak*:alloc_calls<=10");
        assert_eq!((p.target, p.max), (Target::Processes, 10));
    }

    #[test]
    fn bad_limits_say_what_is_wrong() {
        let err = |text: &str| text.parse::<Limit>().unwrap_err();
        assert!(err("*:peak_live_bytes=1").contains("no `<=`"));
        assert!(err("peak_live_bytes<=1").contains("no `:` between"));
        assert!(err("*:peak<=1").contains("no counter named \"peak\""));
        assert!(err(":alloc_calls<=1").contains("the glob is empty"));
        assert!(err("*:alloc_calls<=1KiB").contains("alloc_calls is a count"));
        assert!(err("*:live_bytes<=lots").contains("\"lots\" is not a size in bytes"));
        assert!(err("a[:alloc_calls<=1").contains("the glob \"a[\""));
        assert!(
            err("*:alloc_calls<=x").starts_with("invalid limit \"*:alloc_calls<=x\": "),
            "{}",
            err("*:alloc_calls<=x")
        );
    }

    fn process(pid: u32, command: &str, benchmarks: &[(&str, u64)]) -> TrackedProcess {
        let mut p = TrackedProcess::new(pid, 1, command.split(' ').map(String::from).collect());
        for (uri, peak) in benchmarks {
            let mut stats = Stats::default();
            stats.peak_live_bytes = *peak;
            p.stats.peak_live_bytes = p.stats.peak_live_bytes.max(*peak);
            p.benchmarks.push(BenchmarkStats::new(*uri, stats));
        }
        p
    }

    #[test]
    fn every_matching_benchmark_is_checked_and_unmatched_limits_are_said() {
        let processes = [
            process(10, "bench --bench", &[("a::small", 100), ("a::big", 2000)]),
            process(11, "sh -c x", &[]),
        ];
        let sub = [process(12, "other", &[("b::big", 5000)])];
        let dirs: [DirResults; 2] = [
            (Path::new(""), &processes),
            (Path::new("criterion/b"), &sub),
        ];
        let limits = [
            limit("*::big:peak_live_bytes<=1KiB"),
            limit("a::*:peak_live_bytes<=2000"),
            limit("process:sh *:peak_live_bytes<=0"),
            limit("nothing*:alloc_calls<=1"),
        ];
        let checked = check(&limits, &dirs);
        assert_eq!(
            checked.exceeded,
            [
                "benchmark a::big (process 10): peak_live_bytes is 2.0 KiB (2,000 B), more than \
                 1 KiB (1,024 B) (limit \"*::big:peak_live_bytes<=1KiB\")",
                "benchmark b::big in criterion/b (process 12): peak_live_bytes is 4.9 KiB \
                 (5,000 B), more than 1 KiB (1,024 B) (limit \"*::big:peak_live_bytes<=1KiB\")",
            ]
        );
        assert_eq!(
            checked.unmatched,
            [
                "limit \"nothing*:alloc_calls<=1\" matches no benchmark uri (check the glob \
              \"nothing*\")"
            ]
        );
        assert_eq!(checked.checks, 5);
        // Results without any benchmark region: the glob is not what is wrong.
        let plain: [DirResults; 1] = [(Path::new(""), &processes[1..])];
        assert_eq!(
            check(&limits[..1], &plain).unmatched,
            [
                "limit \"*::big:peak_live_bytes<=1KiB\" is on benchmarks, and the results have \
                 no benchmark region (a limit on whole processes is written \
                 'process:CMD_GLOB:...')"
            ]
        );
    }

    #[test]
    fn a_limits_file_names_the_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits");
        std::fs::write(
            &path,
            "# peaks\n*:peak_live_bytes<=1MiB\n\n*:alloc_calls<=1MiB\n",
        )
        .unwrap();
        let err = read_file(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}, line 4: invalid limit", path.display())),
            "{err}"
        );
        std::fs::write(&path, "# peaks\n*:peak_live_bytes<=1MiB\n").unwrap();
        assert_eq!(read_file(&path).unwrap().len(), 1);
    }
}
