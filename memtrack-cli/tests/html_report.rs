//! `memtrack report --html` and `memtrack diff --html`, looked at the way a person does:
//! each page opened from disk in headless Chromium (scripts/html_report_check.py), with
//! no console message, the shown section's chart drawn (plotly's SVG), the names the
//! page must show, and no element a hostile benchmark name could have added. The pages
//! of made-up results need no privileges; those of timeline_shape.c and of a real
//! multi-process workload (a shell, CPython, the C compiler) are recorded as root.
//! Without Chromium the checks in it say SKIPPED, unless MEMTRACK_REQUIRE_CHROMIUM=1
//! makes that a failure.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use memtrack::{
    AllocatorStatus, BenchmarkStats, MemtrackResult, TrackedProcess,
    timeline::{Bucket, EventKind, Timeline, TimelineEvent},
};
use memtrack_test_support::{program, repo_dir};

fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

/// A name no page may turn into markup.
const HOSTILE: &str = r#"bench::</script><img src=x onerror="alert('x')">'"&amp;"#;

/// Whether Chromium can run here; without it a test says SKIPPED (or fails, with
/// MEMTRACK_REQUIRE_CHROMIUM set).
fn chromium_here(test: &str) -> bool {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    if Command::new(&chromium).arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("MEMTRACK_REQUIRE_CHROMIUM").is_none(),
        "MEMTRACK_REQUIRE_CHROMIUM is set but {chromium} cannot run"
    );
    eprintln!("SKIPPED {test}: no {chromium} (apt-get install chromium)");
    false
}

/// Opens `page` in headless Chromium (scripts/html_report_check.py) and asserts that it
/// rendered as said above, each of `expect` in its text; the screenshot goes to `png`.
fn check_in_chromium(page: &Path, png: &Path, expect: &[&str]) {
    let mut command = Command::new("python3");
    command
        .arg(repo_dir().join("scripts/html_report_check.py"))
        .arg(page)
        .arg(png)
        .args(["--no-element", "img"]);
    for text in expect {
        command.arg("--expect").arg(text);
    }
    let run = command.output().unwrap();
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&run.stdout));
}

/// Runs memtrack with `args`, asserting exit 0; returns its stderr.
fn succeed(args: &[&std::ffi::OsStr]) -> String {
    let out = memtrack().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "memtrack {args:?}: {stderr}");
    stderr
}

fn bucket(t_ns: u64, min: u64, max: u64, end: u64) -> Bucket {
    Bucket {
        t_ns,
        min_bytes: min,
        max_bytes: max,
        end_bytes: end,
        rss_max_bytes: Some(4 * max + 4096),
        rss_end_bytes: Some(4 * end + 4096),
        rss_anon_bytes: Some(4 * end),
        rss_file_bytes: Some(4096),
        rss_shmem_bytes: Some(0),
        mapped_max_bytes: Some(2 * max),
        mapped_end_bytes: Some(2 * end),
    }
}

/// A process of made-up results whose heap rises to `peak` and falls, with one
/// benchmark named `uri` inside it.
fn made_up(pid: u32, command: &str, peak: u64, uri: &str) -> TrackedProcess {
    const W: u64 = 1 << 20;
    let mut p = TrackedProcess::new(pid, 1, command.split(' ').map(String::from).collect());
    p.allocator = AllocatorStatus::Probed;
    p.exit_code = Some(0);
    p.stats.alloc_calls = 3;
    p.stats.bytes_allocated = peak + peak / 2;
    p.stats.free_calls = 3;
    p.stats.bytes_freed = peak + peak / 2;
    p.stats.peak_live_bytes = peak;
    let event = |t_ns, what| TimelineEvent { t_ns, what };
    let timeline = Timeline {
        bucket_ns: W,
        buckets: vec![
            bucket(0, 0, peak / 2, peak / 2),
            bucket(W, peak / 4, peak, peak / 4),
            bucket(5 * W, 0, peak / 4, 0),
        ],
        events: vec![
            event(W / 2, EventKind::RegionStart { uri: uri.into() }),
            event(W + 10, EventKind::Peak { bytes: peak }),
            event(
                3 * W,
                EventKind::RegionEnd {
                    uri: uri.into(),
                    unfinished: false,
                },
            ),
        ],
        lost_buckets: 0,
    };
    let mut region = p.stats.clone();
    region.peak_live_bytes = peak / 2;
    let mut benchmark = BenchmarkStats::new(uri, region);
    benchmark.timeline = Some(Timeline {
        buckets: vec![bucket(0, 0, peak / 2, 0)],
        events: Vec::new(),
        ..timeline.clone()
    });
    p.benchmarks = vec![benchmark];
    p.timeline = Some(timeline);
    p
}

fn write_results(dir: &Path, processes: Vec<TrackedProcess>) {
    for p in processes {
        MemtrackResult::new(p).write_to_dir(dir).unwrap();
    }
}

#[test]
fn the_page_of_made_up_results_escapes_every_name_and_draws_its_chart() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    write_results(
        &results,
        vec![
            made_up(10, "./small --x", 1000, "small::one"),
            made_up(11, "./big \"quoted\" '<b>'", 1 << 20, HOSTILE),
        ],
    );
    let page = dir.path().join("report.html");
    let stderr = succeed(&[
        "report".as_ref(),
        "--html".as_ref(),
        page.as_os_str(),
        results.as_os_str(),
    ]);
    assert!(stderr.contains("memtrack: wrote "), "{stderr}");
    let text = std::fs::read_to_string(&page).unwrap();
    // Neither name comes through as markup: the hostile uri only escaped (in HTML) or
    // as \u003c escapes (in the charts' JSON).
    assert!(!text.contains("<img src=x"), "a name became markup");
    assert!(!text.contains("</script><img"));
    assert!(text.contains(
        "bench::&lt;/script&gt;&lt;img src=x onerror=&quot;alert(&#39;x&#39;)&quot;&gt;"
    ));
    // Biggest first: the 1 MiB process is section s0, its list row the first.
    let first_row = text.find("<tr data-scope=\"s0\"").unwrap();
    let first_row = &text[first_row..first_row + 200];
    assert!(
        first_row.starts_with(
            "<tr data-scope=\"s0\" title=\"process 11: ./big &quot;quoted&quot; &#39;&lt;b&gt;&#39;\">\
             <td class=\"cmd\"><a href=\"#s0\">11 big &quot;quoted&quot; &#39;&lt;b&gt;&#39;</a>"
        ),
        "{first_row}"
    );
    if !chromium_here("the_page_of_made_up_results_escapes_every_name_and_draws_its_chart") {
        return;
    }
    check_in_chromium(
        &page,
        &dir.path().join("report.png"),
        &[
            "process 11: ./big \"quoted\" '<b>'",
            "process 10: ./small --x",
            &format!("benchmark {HOSTILE} (process 11)"),
            "heap at bucket end",
            "resident (RSS)",
            "mapped (mmap/brk)",
        ],
    );
}

#[test]
fn the_diff_page_overlays_both_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (base, new) = (dir.path().join("base"), dir.path().join("new"));
    std::fs::create_dir(&base).unwrap();
    std::fs::create_dir(&new).unwrap();
    write_results(&base, vec![made_up(10, "./prog", 1000, HOSTILE)]);
    write_results(&new, vec![made_up(20, "./prog", 3000, HOSTILE)]);
    let page = dir.path().join("diff.html");
    let args: [&std::ffi::OsStr; 5] = [
        "diff".as_ref(),
        base.as_os_str(),
        new.as_os_str(),
        "--html".as_ref(),
        page.as_os_str(),
    ];
    let stderr = succeed(&args);
    assert!(stderr.contains("memtrack: wrote "), "{stderr}");
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(!text.contains("<img src=x"), "a name became markup");
    // The most changed peak first: the process (+2,000 B) before the benchmark (+1,000).
    assert!(
        text.contains(
            "<tr data-scope=\"s0\"><td class=\"cmd\"><a href=\"#s0\">process ./prog</a></td>\
             <td class=\"n\"><span class=\"up\">peak_live_bytes +2,000 B (+200.0%)</span></td></tr>\n\
             <tr data-scope=\"s1\">"
        ),
        "{text:.3000}"
    );
    if !chromium_here("the_diff_page_overlays_both_runs") {
        return;
    }
    check_in_chromium(
        &page,
        &dir.path().join("diff.png"),
        &[
            "process ./prog",
            &format!("benchmark {HOSTILE}"),
            "BASE heap at bucket end",
            "NEW heap at bucket end",
            "+2,000 B (+200.0%)",
        ],
    );
}

/// Where a page and its screenshot of a recorded run go: MEMTRACK_HTML_SHOTS (to keep
/// them, for the docs) or a temporary directory.
fn shots(name: &str, temp: &Path) -> (PathBuf, PathBuf) {
    let dir = std::env::var_os("MEMTRACK_HTML_SHOTS").map_or(temp.to_path_buf(), PathBuf::from);
    (
        dir.join(format!("{name}.html")),
        dir.join(format!("{name}.png")),
    )
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_page_of_timeline_shape_shows_its_timeline_and_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let shape = program("timeline_shape");
    let times = dir.path().join("times");
    let args: [&std::ffi::OsStr; 7] = [
        "run".as_ref(),
        "--stacks".as_ref(),
        "-o".as_ref(),
        results.as_os_str(),
        "--".as_ref(),
        shape.as_os_str(),
        times.as_os_str(),
    ];
    let report = succeed(&args);
    // The terminal report's sparkline: the spike (the peak) is the one full column.
    let spark = report
        .lines()
        .find(|l| l.trim_start().starts_with("over time"))
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(spark.matches('█').count(), 1, "{spark}");
    let (page, png) = shots("timeline_shape", dir.path());
    succeed(&[
        "report".as_ref(),
        "--html".as_ref(),
        page.as_os_str(),
        results.as_os_str(),
    ]);
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(
        text.contains("Top stacks at the peak (t-gmax): 2 of 2"),
        "{text:.3000}"
    );
    if !chromium_here("the_page_of_timeline_shape_shows_its_timeline_and_stacks") {
        return;
    }
    let command = format!("timeline_shape {}", times.display());
    check_in_chromium(
        &page,
        &png,
        &[
            &command,
            "peak live",
            "5.7 MiB (6,000,000 B)",
            "Top stacks by bytes allocated",
            "heap lowest to highest",
        ],
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_page_of_a_shell_python_and_the_c_compiler_lists_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let source = dir.path().join("tiny.c");
    std::fs::write(&source, "int tiny(int x) { return x * 2; }\n").unwrap();
    let script = format!(
        "python3 -c 'x = [str(i) * 8 for i in range(200000)]' && cc -O2 -c {} -o {}",
        source.display(),
        dir.path().join("tiny.o").display()
    );
    let args: [&std::ffi::OsStr; 7] = [
        "run".as_ref(),
        "-o".as_ref(),
        results.as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        script.as_ref(),
    ];
    succeed(&args);
    let (page, png) = shots("workload", dir.path());
    succeed(&[
        "report".as_ref(),
        "--html".as_ref(),
        page.as_os_str(),
        results.as_os_str(),
    ]);
    if !chromium_here("the_page_of_a_shell_python_and_the_c_compiler_lists_every_process") {
        return;
    }
    check_in_chromium(
        &page,
        &png,
        &[
            "sh -c python3 -c",
            "python3 -c x = [str(i) * 8 for i in range(200000)]",
            "cc -O2 -c",
            "cc1",
            "heap at bucket end",
        ],
    );
}

/// A result file that cannot be read is named and passed over: the page of the others
/// is written, and the exit code says the report is incomplete (201). A symbolic link
/// where the page goes is refused before anything is read.
#[test]
fn the_page_is_written_without_the_unreadable_files_and_never_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    write_results(&results, vec![made_up(10, "./prog", 1000, "b")]);
    std::fs::write(results.join("99.MemtrackResult.msgpack"), b"not msgpack").unwrap();
    let page = dir.path().join("report.html");
    let out = memtrack()
        .args(["report", "--html"])
        .arg(&page)
        .arg(&results)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(201), "{stderr}");
    assert!(stderr.contains("skipped result file"), "{stderr}");
    assert!(stderr.contains("99.MemtrackResult.msgpack"), "{stderr}");
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(text.contains("<h2>process 10: ./prog</h2>"));
    assert!(!text.contains("process 99"));

    let target = dir.path().join("elsewhere.html");
    let link = dir.path().join("link.html");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = memtrack()
        .args(["report", "--html"])
        .arg(&link)
        .arg(&results)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(201), "{stderr}");
    assert!(stderr.contains("is a symbolic link"), "{stderr}");
    assert!(!target.exists());
}
