//! Result files written by earlier versions of memtrack, checked in under tests/data/
//! (tests/data/README.md says which commit and command wrote each), read with today's
//! code: every field, and the fixtures' exact numbers. No privileges needed.
//!
//! - `results-v1/`: schema version 1 (`stats.syscalls` always a map);
//! - `results-v2/`: schema version 2 (`stats.syscalls` nil when not counted).

use std::path::{Path, PathBuf};

use memtrack::{AllocatorStatus, MemtrackResult, RunResults, Stats, TrackedProcess};
use memtrack_test_support::{diff, expected, repo_dir};

/// tests/data/results-v{version}/{run}.
fn data(version: u32, run: &str) -> PathBuf {
    repo_dir()
        .join("tests/data")
        .join(format!("results-v{version}"))
        .join(run)
}

/// Every run directory of every version: (version, run).
const RUNS: [(u32, &str); 8] = [
    (1, "exec"),
    (1, "fork"),
    (1, "leak"),
    (1, "marked_regions"),
    (2, "exec"),
    (2, "fork"),
    (2, "leak_no_syscalls"),
    (2, "marked_regions"),
];

/// The result files of one run, read with today's code, each checked to carry the
/// version it was written with.
fn read(version: u32, run: &str) -> Vec<MemtrackResult> {
    let files = MemtrackResult::read_dir(&data(version, run)).unwrap();
    assert!(!files.is_empty(), "no result files in {version}/{run}");
    for file in &files {
        assert_eq!(
            (file.schema_version, file.memtrack_version.as_str()),
            (version, "0.1.0"),
            "{run}"
        );
    }
    files
}

/// Every result file of every run.
fn every_file() -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for (version, run) in RUNS {
        for entry in std::fs::read_dir(data(version, run)).unwrap() {
            let path = entry.unwrap().path();
            if path
                .to_string_lossy()
                .ends_with(memtrack::RESULT_FILE_SUFFIX)
            {
                paths.push(path);
            }
        }
    }
    assert_eq!(paths.len(), 12, "{paths:#?}");
    paths
}

/// Asserts that `stats` are exactly the expected numbers of a fixture's process.
fn assert_exact(stats: &Stats, fixture: &str, process: &str) {
    let want = &expected()["fixtures"][fixture]["processes"][process];
    assert!(want.is_object(), "no expectation for {fixture}/{process}");
    let differences = diff(stats, want);
    assert!(
        differences.is_empty(),
        "{fixture}/{process}: {differences:#?}"
    );
}

/// A probed process of a fixture in /tmp/memtrack-fixtures that exited 0, with probes
/// on malloc, free, calloc and realloc in libc, no benchmarks, and `images` images
/// before its last exec.
fn assert_fixture_process(p: &TrackedProcess, fixture: &str, images: usize) {
    assert_eq!(
        p.command,
        [format!("/tmp/memtrack-fixtures/{fixture}")],
        "{p:#?}"
    );
    assert_eq!((p.exit_code, p.exit_signal), (Some(0), None));
    assert!(p.ended_ns.is_some_and(|end| end > p.started_ns), "{p:#?}");
    assert_eq!(p.allocator, AllocatorStatus::Probed);
    for function in ["malloc", "free", "calloc", "realloc"] {
        let probe = p.probes.iter().find(|probe| probe.function == function);
        let probe = probe.unwrap_or_else(|| panic!("no {function} probe: {:#?}", p.probes));
        assert!(probe.object.ends_with("libc.so.6"), "{probe:#?}");
    }
    assert_eq!(p.earlier_images.len(), images, "{p:#?}");
    assert!(p.benchmarks.is_empty(), "{p:#?}");
}

#[test]
fn fork_fixture_reads_exactly_in_every_version() {
    for version in [1, 2] {
        let files = read(version, "fork");
        let [parent, child] = &files[..] else {
            panic!("two processes expected: {files:#?}");
        };
        let (parent, child) = (&parent.process, &child.process);
        assert_eq!(child.ppid, parent.pid, "v{version}");
        assert_fixture_process(parent, "fork", 0);
        assert_fixture_process(child, "fork", 0);
        assert_exact(&parent.stats, "fork", "parent");
        assert_exact(&child.stats, "fork", "child");
        // Both versions counted the syscalls: the parent mapped its libraries; the child
        // only ran fork.c's code after the fork (no mmap, munmap or brk).
        let parent_syscalls = parent.stats.syscalls.as_ref().expect("counted");
        assert!(parent_syscalls.mmap_calls > 0, "{parent_syscalls:#?}");
        assert_eq!(
            child.stats.syscalls,
            Some(memtrack::SyscallStats::default()),
            "v{version}"
        );
    }
}

#[test]
fn exec_reads_with_the_image_before_it_in_every_version() {
    // `sh -c 'FIXTURE & wait'`: the shell forks a child that execs the fixture; the
    // child's shell image before the exec is kept apart, with its own counters.
    let shell_command = ["sh", "-c", "/tmp/memtrack-fixtures/malloc_free & wait"];
    for version in [1, 2] {
        let files = read(version, "exec");
        let [shell, child] = &files[..] else {
            panic!("two processes expected: {files:#?}");
        };
        let (shell, child) = (&shell.process, &child.process);
        assert_eq!(shell.command, shell_command);
        assert_eq!((shell.exit_code, child.ppid), (Some(0), shell.pid));
        assert!(shell.earlier_images.is_empty());
        assert_fixture_process(child, "malloc_free", 1);
        assert_exact(&child.stats, "malloc_free", "main");
        let [image] = &child.earlier_images[..] else {
            panic!("one earlier image expected: {child:#?}");
        };
        assert_eq!(image.command, shell_command);
        // What dash allocated between the fork and the exec, as the file holds it.
        let s = &image.stats;
        assert_eq!(
            (s.alloc_calls, s.bytes_allocated, s.free_calls, s.live_bytes),
            (2, 528, 0, 528),
            "v{version}"
        );
    }
}

#[test]
fn leak_fixture_reads_exactly() {
    let files = read(1, "leak");
    assert_eq!(files.len(), 1);
    let leak = &files[0].process;
    assert_fixture_process(leak, "leak", 0);
    assert_exact(&leak.stats, "leak", "main");
    assert!(leak.stats.syscalls.as_ref().unwrap().mmap_calls > 0);
}

#[test]
fn version_2_reads_syscalls_not_counted_as_none() {
    // Written by `memtrack run --no-syscalls`: nil in the file, None here, the heap
    // numbers exact all the same.
    let files = read(2, "leak_no_syscalls");
    assert_eq!(files.len(), 1);
    let leak = &files[0].process;
    assert_fixture_process(leak, "leak", 0);
    assert_exact(&leak.stats, "leak", "main");
    assert_eq!(leak.stats.syscalls, None);
}

/// (uri, alloc_calls, bytes_allocated, free_calls, bytes_freed, live_blocks,
/// peak_live_bytes)
type Region<'a> = (&'a str, u64, u64, u64, u64, u64, u64);

#[test]
fn marked_regions_read_with_their_benchmarks_in_every_version() {
    for version in [1, 2] {
        let files = read(version, "marked_regions");
        assert_eq!(files.len(), 1, "v{version}");
        let p = &files[0].process;
        assert!(
            p.command[0].ends_with("/target/release/marked_regions"),
            "{:?}",
            p.command
        );
        assert_eq!(
            (p.exit_code, p.allocator.clone()),
            (Some(0), AllocatorStatus::Probed)
        );
        let regions: Vec<Region> = p
            .benchmarks
            .iter()
            .map(|b| {
                let s = &b.stats;
                assert_eq!(
                    (s.failed_allocs, s.unmatched_frees, s.lost_events),
                    (0, 0, 0),
                    "{}",
                    b.uri
                );
                (
                    b.uri.as_str(),
                    s.alloc_calls,
                    s.bytes_allocated,
                    s.free_calls,
                    s.bytes_freed,
                    s.live_blocks,
                    s.peak_live_bytes,
                )
            })
            .collect();
        assert_eq!(
            regions,
            [
                ("marked_regions::ten", 10, 1000, 10, 1000, 0, 1000),
                ("marked_regions::hundred", 100, 6400, 100, 6400, 0, 6400),
                ("marked_regions::thousand", 1000, 32000, 0, 0, 1000, 32000),
            ],
            "v{version}"
        );
        // The process is the sum of its regions, none of the noise around them.
        let s = &p.stats;
        assert_eq!(
            (
                s.alloc_calls,
                s.bytes_allocated,
                s.free_calls,
                s.bytes_freed,
                s.live_blocks,
                s.live_bytes,
                s.peak_live_bytes
            ),
            (1110, 39400, 110, 7400, 1000, 32000, 32000),
            "v{version}"
        );
        assert_eq!(s.function("malloc").map(|f| f.calls), Some(1110));
        assert_eq!(s.function("free").map(|f| f.calls), Some(110));
        // The same, read as one run.
        let run = RunResults::read_dir(&data(version, "marked_regions")).unwrap();
        assert_eq!(run.benchmarks().count(), 3);
        assert_eq!(run.processes, std::slice::from_ref(p));
    }
}

/// The file decoded as plain MessagePack (no memtrack types), as JSON.
fn generic(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap();
    let value = rmpv::decode::read_value(&mut &bytes[..]).unwrap();
    serde_json::to_value(value).unwrap()
}

#[test]
fn every_field_of_every_file_is_read() {
    // Independently of memtrack's types: every key and value a generic MessagePack
    // reader finds in the file is in what today's code read, and nothing else is.
    for path in every_file() {
        let read = MemtrackResult::read_from(&path).unwrap();
        assert_eq!(
            serde_json::to_value(&read).unwrap(),
            generic(&path),
            "{}",
            path.display()
        );
    }
}

#[test]
fn the_layout_is_unchanged_byte_for_byte() {
    // Today's code writes what it read back exactly as the old version wrote it: the
    // on-disk layout of both versions is today's (SCHEMA_VERSION only changes with it).
    for path in every_file() {
        let read = MemtrackResult::read_from(&path).unwrap();
        assert_eq!(
            read.to_bytes(),
            std::fs::read(&path).unwrap(),
            "{}",
            path.display()
        );
    }
    assert_eq!(memtrack::SCHEMA_VERSION, 3);
}
