//! A run's memory figures for the engines that keep benchmark history: Bencher
//! ([`render_bmf`]) and github-action-benchmark ([`render_github_benchmark`]).
//!
//! Each benchmark and each process of the run is one series, named so that the same
//! benchmark or process of another checkout has the same name ([`Series::name`]), with
//! one value per [`MEASURES`] counter, exact integers. Left out, and said so by
//! [`Omitted`]: a benchmark that did not finish (its counters are partial), a process
//! whose allocator memtrack did not probe (its counters are zeros, not a measurement)
//! and a harness's helper process ([`crate::helpers`]: criterion's gnuplot check).
//!
//! The formats, as their projects document them:
//!
//! - **Bencher Metric Format** (BMF, <https://bencher.dev/docs/reference/bencher-metric-format/>):
//!   a JSON object of benchmark names, each an object of measure slugs, each an object
//!   with a number `value` (and optional `lower_value`, `upper_value`, not written here);
//! - **github-action-benchmark**'s `customSmallerIsBetter` (its README.md, "Examples"
//!   of custom benchmarks, <https://github.com/benchmark-action/github-action-benchmark>):
//!   a JSON array of objects with a string `name`, a string `unit` and a number `value`
//!   (optional `range` and `extra`, strings; `extra` is shown in the chart's tooltip).

use std::collections::BTreeMap;

use memtrack_record::{AllocatorStatus, Stats, TrackedProcess};
use serde::Serialize;

use crate::{command, counter::Counter, limits::DirResults};

/// One counter as a history engine records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measure {
    /// Bencher's measure slug (kebab case, at most 64 characters): `bytes-allocated`.
    pub slug: &'static str,
    /// For people, and github-action-benchmark's names: `bytes allocated`.
    pub name: &'static str,
    /// The unit: `B` or `allocations`.
    pub unit: &'static str,
    /// The counter.
    pub counter: Counter,
}

/// The measures written, in order: allocator calls that allocated, bytes they
/// allocated, the peak of live bytes, the bytes still live at the end.
pub const MEASURES: [Measure; 4] = [
    Measure {
        slug: "allocations",
        name: "allocations",
        unit: "allocations",
        counter: Counter::AllocCalls,
    },
    Measure {
        slug: "bytes-allocated",
        name: "bytes allocated",
        unit: "B",
        counter: Counter::BytesAllocated,
    },
    Measure {
        slug: "peak-live-bytes",
        name: "peak live bytes",
        unit: "B",
        counter: Counter::PeakLiveBytes,
    },
    Measure {
        slug: "live-bytes-at-end",
        name: "live bytes at end",
        unit: "B",
        counter: Counter::LiveBytes,
    },
];

/// One benchmark or process of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series<'a> {
    /// The same from checkout to checkout: a benchmark's uri; `process ` and the
    /// process's [stable name](command::stable_name); ` #2` after it for the second of
    /// that name, ` in DIR` for a results directory below the one given.
    pub name: String,
    /// Its command line as it ran (for github-action-benchmark's `extra`).
    pub command: &'a [String],
    /// Its counters.
    pub stats: &'a Stats,
}

/// What was left out of the history, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Omitted {
    /// As [`Series::name`] would have named it.
    pub name: String,
    /// Why: `did not finish (partial counters)`, `allocator not probed: REASON`.
    pub why: String,
}

/// The series of a run's directories, benchmarks first, each kind in the order of its
/// results (directories in order, processes in the order they started), with what was
/// left out. Paths below `root` (an absolute directory, e.g. the checkout) in process
/// arguments are written relative to it.
pub fn series<'a>(dirs: &[DirResults<'a>], root: Option<&str>) -> (Vec<Series<'a>>, Vec<Omitted>) {
    let mut benchmarks = Vec::new();
    let mut processes = Vec::new();
    let mut omitted = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut named = |name: String, dir: &std::path::Path| {
        let n = seen
            .entry(format!("{}\0{name}", dir.display()))
            .or_insert(0);
        *n += 1;
        let nth = if *n == 1 {
            String::new()
        } else {
            format!(" #{n}")
        };
        let place = if dir.as_os_str().is_empty() {
            String::new()
        } else {
            format!(" in {}", dir.display())
        };
        format!("{name}{nth}{place}")
    };
    for &(dir, list) in dirs {
        let mut ordered: Vec<&'a TrackedProcess> = list.iter().collect();
        ordered.sort_by_key(|p| (p.started_ns, p.pid));
        for p in &ordered {
            for b in &p.benchmarks {
                let name = named(b.uri.clone(), dir);
                if b.unfinished {
                    omitted.push(Omitted {
                        name,
                        why: "did not finish (partial counters)".into(),
                    });
                } else {
                    benchmarks.push(Series {
                        name,
                        command: &p.command,
                        stats: &b.stats,
                    });
                }
            }
        }
        for p in &ordered {
            let name = named(
                format!("process {}", command::stable_name(&p.command, root)),
                dir,
            );
            if let Some(what) = crate::helpers::harness_helper(p, list) {
                omitted.push(Omitted {
                    name,
                    why: format!("a harness helper ({what}), not a benchmark"),
                });
                continue;
            }
            match &p.allocator {
                AllocatorStatus::Probed => processes.push(Series {
                    name,
                    command: &p.command,
                    stats: &p.stats,
                }),
                AllocatorStatus::NotRecognised { reason } => omitted.push(Omitted {
                    name,
                    why: format!("allocator not probed: {reason}"),
                }),
            }
        }
    }
    benchmarks.extend(processes);
    (benchmarks, omitted)
}

/// One measure's value in Bencher Metric Format.
#[derive(Serialize)]
struct BmfMetric {
    value: u64,
}

/// The series in Bencher Metric Format: `{NAME: {SLUG: {"value": N}}}`, pretty-printed.
pub fn render_bmf(series: &[Series]) -> String {
    let out: BTreeMap<&str, BTreeMap<&str, BmfMetric>> = series
        .iter()
        .map(|s| {
            let measures = MEASURES
                .iter()
                .map(|m| {
                    (
                        m.slug,
                        BmfMetric {
                            value: m.counter.of(s.stats),
                        },
                    )
                })
                .collect();
            (s.name.as_str(), measures)
        })
        .collect();
    serde_json::to_string_pretty(&out).expect("maps of strings and integers serialize")
}

/// One entry of github-action-benchmark's custom JSON.
#[derive(Serialize)]
struct GithubEntry {
    name: String,
    unit: &'static str,
    value: u64,
    extra: String,
}

/// The series as github-action-benchmark's `customSmallerIsBetter` JSON: one entry per
/// series and measure, named `NAME: MEASURE` (`process prog: peak live bytes`), its
/// `extra` the counter and the command line as it ran; pretty-printed.
pub fn render_github_benchmark(series: &[Series]) -> String {
    let out: Vec<GithubEntry> = series
        .iter()
        .flat_map(|s| {
            MEASURES.iter().map(move |m| GithubEntry {
                name: format!("{}: {}", s.name, m.name),
                unit: m.unit,
                value: m.counter.of(s.stats),
                extra: format!(
                    "memtrack counter {} of {}",
                    m.counter.name(),
                    s.command.join(" ")
                ),
            })
        })
        .collect();
    serde_json::to_string_pretty(&out).expect("strings and integers serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::BenchmarkStats;
    use serde::Deserialize;
    use std::{collections::HashMap, path::Path};

    // The formats' documented shapes as strict deserializers (unknown fields refused),
    // from the sources named in the module documentation.

    /// BMF: the JSON schema at bencher.dev/bmf.json has `value` (number, required),
    /// `lower_value` and `upper_value` (numbers).
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct BmfMetricShape {
        value: f64,
        #[allow(dead_code)]
        lower_value: Option<f64>,
        #[allow(dead_code)]
        upper_value: Option<f64>,
    }
    type Bmf = HashMap<String, HashMap<String, BmfMetricShape>>;

    /// github-action-benchmark's custom JSON: `name`, `unit` (strings) and `value`
    /// (number) required, `range` and `extra` (strings) optional.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct GithubShape {
        name: String,
        unit: String,
        value: f64,
        #[allow(dead_code)]
        range: Option<String>,
        extra: Option<String>,
    }

    fn run() -> Vec<TrackedProcess> {
        let mut bench = TrackedProcess::new(
            7,
            1,
            vec![
                "/ci/new/target/release/deps/alloc-1a2b3c4d5e6f7a8b".into(),
                "--bench".into(),
            ],
        );
        bench.allocator = AllocatorStatus::Probed;
        let mut stats = Stats::default();
        (
            stats.alloc_calls,
            stats.bytes_allocated,
            stats.peak_live_bytes,
            stats.live_bytes,
        ) = (3, 3072, 2048, 1024);
        bench
            .benchmarks
            .push(BenchmarkStats::new("alloc::grow", stats.clone()));
        bench
            .benchmarks
            .push(BenchmarkStats::new("alloc::cut", stats.clone()).into_unfinished());
        bench.stats = stats;
        let mut static_one = TrackedProcess::new(8, 7, vec!["/bin/static".into()]);
        static_one.started_ns = 5;
        static_one.allocator = AllocatorStatus::NotRecognised {
            reason: "statically linked".into(),
        };
        vec![bench, static_one]
    }

    #[test]
    fn bmf_has_the_documented_shape_and_every_counter_exactly() {
        let processes = run();
        let (series, omitted) = series(&[(Path::new(""), &processes)], Some("/ci/new"));
        let json = render_bmf(&series);
        let parsed: Bmf = serde_json::from_str(&json).unwrap();
        let mut names: Vec<&str> = parsed.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(names, ["alloc::grow", "process alloc"]);
        for name in names {
            let measures = &parsed[name];
            let got: BTreeMap<&str, f64> = measures
                .iter()
                .map(|(k, v)| (k.as_str(), v.value))
                .collect();
            assert_eq!(
                got,
                BTreeMap::from([
                    ("allocations", 3.0),
                    ("bytes-allocated", 3072.0),
                    ("live-bytes-at-end", 1024.0),
                    ("peak-live-bytes", 2048.0),
                ])
            );
        }
        // Slugs as Bencher wants them: kebab case, at most 64 characters.
        for m in MEASURES {
            assert!(m.slug.len() <= 64);
            assert!(m.slug.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'));
        }
        assert_eq!(
            omitted,
            [
                Omitted {
                    name: "alloc::cut".into(),
                    why: "did not finish (partial counters)".into()
                },
                Omitted {
                    name: "process static".into(),
                    why: "allocator not probed: statically linked".into()
                },
            ]
        );
    }

    #[test]
    fn github_benchmark_json_has_the_documented_shape() {
        let processes = run();
        let (series, _) = series(&[(Path::new("criterion"), &processes)], None);
        let json = render_github_benchmark(&series);
        let parsed: Vec<GithubShape> = serde_json::from_str(&json).unwrap();
        let got: Vec<(&str, &str, f64)> = parsed
            .iter()
            .map(|e| (e.name.as_str(), e.unit.as_str(), e.value))
            .collect();
        assert_eq!(
            got,
            [
                ("alloc::grow in criterion: allocations", "allocations", 3.0),
                ("alloc::grow in criterion: bytes allocated", "B", 3072.0),
                ("alloc::grow in criterion: peak live bytes", "B", 2048.0),
                ("alloc::grow in criterion: live bytes at end", "B", 1024.0),
                (
                    "process alloc in criterion: allocations",
                    "allocations",
                    3.0
                ),
                ("process alloc in criterion: bytes allocated", "B", 3072.0),
                ("process alloc in criterion: peak live bytes", "B", 2048.0),
                ("process alloc in criterion: live bytes at end", "B", 1024.0),
            ]
        );
        assert_eq!(
            parsed[0].extra.as_deref(),
            Some(
                "memtrack counter alloc_calls of \
                 /ci/new/target/release/deps/alloc-1a2b3c4d5e6f7a8b --bench"
            )
        );
    }

    #[test]
    fn repeated_names_are_numbered() {
        let mut a = TrackedProcess::new(1, 0, vec!["sh".into()]);
        a.allocator = AllocatorStatus::Probed;
        let mut b = a.clone();
        b.pid = 2;
        b.started_ns = 1;
        let processes = [a, b];
        let (series, _) = series(&[(Path::new(""), &processes)], None);
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["process sh", "process sh #2"]);
    }
}
