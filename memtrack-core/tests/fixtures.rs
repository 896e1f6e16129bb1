//! Every C fixture of tests/fixtures runs under the tracker (spawned, followed across
//! fork) and every counter is compared exactly with tests/fixtures/expected.json, whose
//! numbers were cross-checked with valgrind DHAT (see tests/fixtures/README.md).
//! Each single-process fixture runs three times: with the cheapest probe sites (the
//! default), with every probe at its function's first byte, and with perf-event uprobe
//! links instead of uprobe_multi links (the path for kernels before 6.6); the counts
//! must not differ.

mod support;

use std::{io::Read, os::fd::AsRawFd};

use memtrack::{CommandSpec, ProbePlacement, Tracker, UprobeLinks};
use support::{diff, expected, fixture, require_privileges};

/// Runs a single-process fixture from exec to exit and checks it.
fn check_single(name: &str, placement: ProbePlacement, links: UprobeLinks) {
    if !require_privileges(name) {
        return;
    }
    let tracker = Tracker::builder()
        .probe_placement(placement)
        .uprobe_links(links)
        .spawn(CommandSpec::new(fixture(name)))
        .unwrap();
    let status = tracker.wait().unwrap();
    let spec = &expected()["fixtures"][name];
    assert_eq!(
        status.code,
        spec["exit_code"].as_i64().map(|c| c as i32),
        "{name} exit status"
    );
    let processes = tracker.collect_processes().unwrap();
    assert_eq!(processes.len(), 1, "{name}: {processes:#?}");
    let differences = diff(&processes[0].stats, &spec["processes"]["main"]);
    assert!(
        differences.is_empty(),
        "{name}: {differences:#?}\n{:#?}",
        processes[0].stats
    );
}

/// One test per fixture and setting: `cheapest::NAME`, `function_entry::NAME` and
/// `perf_links::NAME`.
macro_rules! exact {
    ($($name:ident => $fixture:literal),* $(,)?) => {
        mod cheapest {
            use memtrack::{ProbePlacement, UprobeLinks};
            $(#[test]
            fn $name() {
                super::check_single($fixture, ProbePlacement::Cheapest, UprobeLinks::Auto);
            })*
        }
        mod function_entry {
            use memtrack::{ProbePlacement, UprobeLinks};
            $(#[test]
            fn $name() {
                super::check_single($fixture, ProbePlacement::FunctionEntry, UprobeLinks::Auto);
            })*
        }
        mod perf_links {
            use memtrack::{ProbePlacement, UprobeLinks};
            $(#[test]
            fn $name() {
                super::check_single($fixture, ProbePlacement::Cheapest, UprobeLinks::PerfEvent);
            })*
        }
    };
}

exact! {
    malloc_free => "malloc_free",
    calloc => "calloc",
    realloc => "realloc",
    reallocarray => "reallocarray",
    aligned => "aligned",
    aligned_small => "aligned_small",
    leak => "leak",
    peak => "peak",
    threads_8x100k_exact_no_loss => "threads",
    mmap_brk_heap_counters_stay_zero => "mmap_brk",
}

#[test]
fn mmap_brk_syscalls_are_counted() {
    if !require_privileges("mmap_brk_syscalls_are_counted") {
        return;
    }
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new(fixture("mmap_brk")))
        .unwrap();
    tracker.wait().unwrap();
    let stats = tracker.collect().unwrap();
    let own = &expected()["fixtures"]["mmap_brk"]["processes"]["main"]["own_syscalls_not_exact"];
    // The loader maps libraries too, so the fixture's own calls are a lower bound.
    let s = stats.syscalls.as_ref().expect("counted by default");
    assert!(s.mmap_calls >= own["mmap_calls"].as_u64().unwrap(), "{s:?}");
    assert!(s.mmap_bytes >= own["mmap_bytes"].as_u64().unwrap(), "{s:?}");
    assert!(
        s.munmap_calls >= own["munmap_calls"].as_u64().unwrap(),
        "{s:?}"
    );
    assert!(
        s.munmap_bytes >= own["munmap_bytes"].as_u64().unwrap(),
        "{s:?}"
    );
    assert!(
        s.brk_grown_bytes >= 8192 && s.brk_shrunk_bytes >= 8192,
        "{s:?}"
    );
}

#[test]
fn fork_parent_and_child_each_exact() {
    if !require_privileges("fork") {
        return;
    }
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new(fixture("fork")))
        .unwrap();
    let status = tracker.wait().unwrap();
    assert_eq!(status.code, Some(0));
    let processes = tracker.collect_processes().unwrap();
    assert_eq!(processes.len(), 2, "{processes:#?}");
    let parent = processes.iter().find(|p| p.pid == tracker.pid()).unwrap();
    let child = processes.iter().find(|p| p.pid != tracker.pid()).unwrap();
    assert_eq!(child.ppid, parent.pid);
    assert_eq!(parent.ppid, std::process::id());
    let spec = &expected()["fixtures"]["fork"]["processes"];
    let d = diff(&parent.stats, &spec["parent"]);
    assert!(d.is_empty(), "parent: {d:#?}");
    let d = diff(&child.stats, &spec["child"]);
    assert!(d.is_empty(), "child: {d:#?}");
}

/// Runs prestart_free through its ready/go protocol (tests/fixtures/fixture.h):
/// `launch` starts it with the ready pipe's write end and the go pipe's read end (to
/// become its fds 3 and 4); once it says ready, `at_ready` turns what `launch` returned
/// into a counting tracker; then "go", and the counters must be the protocol mode's.
fn prestart_protocol<L>(
    launch: impl FnOnce(std::os::fd::RawFd, std::os::fd::RawFd) -> L,
    at_ready: impl FnOnce(L) -> Tracker,
) {
    let (ready_r, ready_w) = nix::unistd::pipe().unwrap();
    let (go_r, go_w) = nix::unistd::pipe().unwrap();
    let launched = launch(ready_w.as_raw_fd(), go_r.as_raw_fd());
    drop(ready_w);
    drop(go_r);
    let mut byte = [0u8; 1];
    std::fs::File::from(ready_r).read_exact(&mut byte).unwrap();
    assert_eq!(&byte, b"R");
    let tracker = at_ready(launched);
    nix::unistd::write(&go_w, b"G").unwrap();
    drop(go_w);
    let status = tracker.wait().unwrap();
    assert_eq!(status.code, Some(0));
    let stats = tracker.collect().unwrap();
    let d = diff(
        &stats,
        &expected()["fixtures"]["prestart_free"]["processes"]["main"],
    );
    assert!(d.is_empty(), "{d:#?}\n{stats:#?}");
}

/// A block allocated before tracking starts and freed after: an unmatched free.
#[test]
fn prestart_free_is_unmatched() {
    if !require_privileges("prestart_free") {
        return;
    }
    prestart_protocol(
        |ready_w, go_r| {
            let spec = CommandSpec::new(fixture("prestart_free"))
                .fd(3, ready_w)
                .fd(4, go_r);
            Tracker::builder().start_enabled(false).spawn(spec).unwrap()
        },
        |mut tracker| {
            tracker.start().unwrap();
            tracker
        },
    );
}

/// The same fixture with nothing held back: the whole run is tracked.
#[test]
fn prestart_free_without_protocol() {
    if !require_privileges("prestart_free_without_protocol") {
        return;
    }
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new(fixture("prestart_free")))
        .unwrap();
    assert_eq!(tracker.wait().unwrap().code, Some(0));
    let stats = tracker.collect().unwrap();
    let d = diff(
        &stats,
        &expected()["fixtures"]["prestart_free"]["without_protocol"]["processes"]["main"],
    );
    assert!(d.is_empty(), "{d:#?}\n{stats:#?}");
}

/// Tracking a process that is already running (`attach_pid`): the same numbers as when
/// tracking starts at the protocol's "go". (The tracker reaps its own process's child:
/// the `Child` is not waited for.)
#[test]
fn attach_to_a_running_process() {
    if !require_privileges("attach_pid") {
        return;
    }
    use std::os::unix::process::CommandExt;
    prestart_protocol(
        |ready_w, go_r| {
            let mut cmd = std::process::Command::new(fixture("prestart_free"));
            // SAFETY: only dup2 between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::dup2(ready_w, 3) < 0 || libc::dup2(go_r, 4) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.spawn().unwrap()
        },
        |child| Tracker::builder().attach_pid(child.id()).unwrap(),
    );
}
