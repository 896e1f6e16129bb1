//! CI across checkouts (issue 35): the same program built in two directories, run under
//! memtrack in each, is compared by `memtrack diff` (matched by the moved checkout, its
//! benchmarks by uri, `--max-increase` checked), and its figures written for history
//! engines (`report --bmf`, `--github-benchmark`) have the same names from either
//! checkout and the shapes the formats document; `report --json FILE` writes what
//! `report --json DIR` prints.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use memtrack_cli::exit_code::LIMIT_EXCEEDED;
use serde_json::Value;

fn memtrack(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memtrack"));
    command.args(args);
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_code(out: &Output, code: u8) {
    assert_eq!(
        out.status.code(),
        Some(i32::from(code)),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A checkout: tests/programs/scaled_regions.c built into CHECKOUT/target/release.
fn checkout(root: &Path) -> PathBuf {
    let release = root.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    memtrack_test_support::compile_c(
        &memtrack_test_support::repo_dir().join("tests/programs/scaled_regions.c"),
        &release,
        &[],
    )
}

/// `memtrack run -o RESULTS -- PROGRAM CHECKOUT/input.txt` at SCALED_PERCENT=`percent`
/// (the program ignores its argument: it stands for a path the command is given).
fn run(program: &Path, checkout: &Path, results: &Path, percent: u32) {
    let out = memtrack(&["run", "-o"])
        .arg(results)
        .arg("--")
        .arg(program)
        .arg(checkout.join("input.txt"))
        .env("SCALED_PERCENT", percent.to_string())
        .output()
        .unwrap();
    assert_code(&out, 0);
}

/// Checks `json` against the BMF JSON schema (bencher.dev/docs/reference/
/// bencher-metric-format: an object of benchmarks, each an object of measures, each an
/// object with a number `value`, optional numbers `lower_value` and `upper_value`, and
/// nothing else), and returns it as benchmark -> measure -> value.
fn bmf(json: &str) -> Vec<(String, Vec<(String, u64)>)> {
    let value: Value = serde_json::from_str(json).unwrap();
    let benchmarks = value.as_object().expect("BMF is an object");
    benchmarks
        .iter()
        .map(|(name, measures)| {
            assert!(!name.is_empty(), "a benchmark name matches \".+\"");
            let measures = measures.as_object().expect("a benchmark is an object");
            let measures = measures
                .iter()
                .map(|(slug, metric)| {
                    let metric = metric.as_object().expect("a metric is an object");
                    for (key, v) in metric {
                        assert!(
                            ["value", "lower_value", "upper_value"].contains(&key.as_str()),
                            "{key} is not a BMF metric field"
                        );
                        assert!(v.is_number(), "{key} is a number");
                    }
                    let v = metric["value"].as_u64().expect("value, an exact count");
                    (slug.clone(), v)
                })
                .collect();
            (name.clone(), measures)
        })
        .collect()
}

/// Checks `json` against github-action-benchmark's custom benchmark shape (README.md,
/// custom benchmarks: an array of objects with strings `name` and `unit`, a number
/// `value`, optional strings `range` and `extra`, nothing else), and returns (name, unit,
/// value) of each.
fn github_benchmark(json: &str) -> Vec<(String, String, u64)> {
    let value: Value = serde_json::from_str(json).unwrap();
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|entry| {
            let entry = entry.as_object().expect("an entry is an object");
            for (key, v) in entry {
                match key.as_str() {
                    "name" | "unit" | "range" | "extra" => assert!(v.is_string(), "{key}"),
                    "value" => assert!(v.is_number()),
                    other => panic!("{other} is not a field of a custom benchmark"),
                }
            }
            (
                entry["name"].as_str().expect("name").to_owned(),
                entry["unit"].as_str().expect("unit").to_owned(),
                entry["value"].as_u64().expect("value"),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_same_program_in_two_checkouts_is_compared_and_named_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let (base, new) = (root.join("base"), root.join("new"));
    let (base_program, new_program) = (checkout(&base), checkout(&new));
    let (base_results, new_results) = (root.join("base-results"), root.join("new-results"));
    run(&base_program, &base, &base_results, 100);
    run(&new_program, &new, &new_results, 110);

    let out = memtrack(&["diff", "--max-increase", "5%"])
        .arg(&base_results)
        .arg(&new_results)
        .output()
        .unwrap();
    assert_code(&out, LIMIT_EXCEEDED);
    let table = text(&out.stdout);
    assert!(
        table.starts_with(
            "memtrack diff: 12 counters compared (alloc_calls, bytes_allocated, \
             peak_live_bytes) in 1 process and 3 benchmarks: 4 above +5%\n"
        ),
        "{table}"
    );
    let grown = table
        .lines()
        .find(|l| l.trim_start().starts_with("benchmark scaled::grown "))
        .unwrap_or_else(|| panic!("{table}"));
    let words: Vec<&str> = grown.split_whitespace().collect();
    assert_eq!(
        words,
        [
            "benchmark",
            "scaled::grown",
            "alloc_calls",
            "100",
            "110",
            "+10",
            "(+10.0%)",
            "ABOVE",
            "+5%"
        ]
    );
    let process = |checkout: &Path, program: &Path| {
        format!(
            "process {} {}",
            program.display(),
            checkout.join("input.txt").display()
        )
    };
    assert!(
        table.ends_with(&format!(
            "matched by same uri: 3 benchmarks\nmatched by command line with the checkout \
             moved ({} → {}): {} ↔ {}\n",
            base.display(),
            new.display(),
            process(&base, &base_program),
            process(&new, &new_program)
        )),
        "{table}"
    );

    // History: the same names from either checkout (run from it, as CI does), every
    // counter exact.
    let history = |checkout: &Path, results: &Path| {
        let (bmf_file, gh_file) = (root.join("bmf.json"), root.join("gh.json"));
        let out = memtrack(&["report", "--bmf"])
            .arg(&bmf_file)
            .arg("--github-benchmark")
            .arg(&gh_file)
            .arg(results)
            .current_dir(checkout)
            .output()
            .unwrap();
        assert_code(&out, 0);
        (
            bmf(&std::fs::read_to_string(&bmf_file).unwrap()),
            github_benchmark(&std::fs::read_to_string(&gh_file).unwrap()),
        )
    };
    let (base_bmf, _) = history(&base, &base_results);
    let (new_bmf, new_gh) = history(&new, &new_results);
    let measures = |allocations, bytes, peak, end| -> Vec<(String, u64)> {
        [
            ("allocations", allocations),
            ("bytes-allocated", bytes),
            ("live-bytes-at-end", end),
            ("peak-live-bytes", peak),
        ]
        .map(|(s, v)| (s.to_owned(), v))
        .to_vec()
    };
    let named = |name: &str, m| (name.to_owned(), m);
    let process_name = "process scaled_regions ./input.txt";
    assert_eq!(
        new_bmf,
        [
            named(process_name, measures(220, 21_640, 11_000, 640)),
            named("scaled::fixed", measures(100, 10_000, 10_000, 0)),
            named("scaled::grown", measures(110, 11_000, 11_000, 0)),
            named("scaled::kept", measures(10, 640, 640, 640)),
        ]
    );
    let names = |b: &[(String, Vec<(String, u64)>)]| -> Vec<String> {
        b.iter().map(|(n, _)| n.clone()).collect()
    };
    assert_eq!(names(&base_bmf), names(&new_bmf));
    assert_eq!(new_gh.len(), 16);
    assert_eq!(
        new_gh[4..8],
        [
            (
                "scaled::grown: allocations".into(),
                "allocations".into(),
                110
            ),
            ("scaled::grown: bytes allocated".into(), "B".into(), 11_000),
            ("scaled::grown: peak live bytes".into(), "B".into(), 11_000),
            ("scaled::grown: live bytes at end".into(), "B".into(), 0),
        ]
    );

    // `report --json FILE DIR` writes what `report --json DIR` prints, and prints the
    // human report.
    let json_file = root.join("report.json");
    let out = memtrack(&["report", "--json"])
        .arg(&json_file)
        .arg(&new_results)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert!(
        text(&out.stdout).contains("scaled::grown"),
        "{}",
        text(&out.stdout)
    );
    let printed = memtrack(&["report", "--json"])
        .arg(&new_results)
        .output()
        .unwrap();
    assert_code(&printed, 0);
    assert_eq!(
        std::fs::read_to_string(&json_file).unwrap(),
        text(&printed.stdout)
    );
}
