//! Every C fixture of tests/fixtures runs under the tracker (spawned, followed across
//! fork) and every counter is compared exactly with tests/fixtures/expected.json, whose
//! numbers were cross-checked with valgrind DHAT (see tests/fixtures/README.md).
//! Each single-process fixture runs three times: with the cheapest probe sites (the
//! default), with every probe at its function's first byte, and with perf-event uprobe
//! links instead of uprobe_multi links (the path for kernels before 6.6); the counts
//! must not differ.

use std::{io::Read, os::fd::AsRawFd};

use memtrack::{CommandSpec, ProbePlacement, ProcessTracker, Stats, Tracker, UprobeLinks};
use memtrack_test_support::{check_single_fixture, diff, expected, fixture};

/// Runs a single-process fixture from exec to exit and checks it.
fn check_single(name: &str, placement: ProbePlacement, links: UprobeLinks) {
    check_single_fixture(
        Tracker::builder()
            .probe_placement(placement)
            .uprobe_links(links),
        name,
    );
}

/// One test per fixture and setting: `cheapest::NAME`, `function_entry::NAME` and
/// `perf_links::NAME`.
macro_rules! exact {
    ($($name:ident => $fixture:literal),* $(,)?) => {
        mod cheapest {
            use memtrack::{ProbePlacement, UprobeLinks};
            $(#[test]
            #[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
            fn $name() {
                super::check_single($fixture, ProbePlacement::Cheapest, UprobeLinks::Auto);
            })*
        }
        mod function_entry {
            use memtrack::{ProbePlacement, UprobeLinks};
            $(#[test]
            #[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
            fn $name() {
                super::check_single($fixture, ProbePlacement::FunctionEntry, UprobeLinks::Auto);
            })*
        }
        mod perf_links {
            use memtrack::{ProbePlacement, UprobeLinks};
            $(#[test]
            #[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
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
    double_free => "double_free",
    thread_exit => "thread_exit",
    threads_8x100k_exact_no_loss => "threads",
}

/// The syscall counters of `stats` under the names expected.json uses (SyscallStats's).
fn syscalls_of(stats: &Stats) -> serde_json::Map<String, serde_json::Value> {
    let syscalls = stats
        .syscalls
        .as_ref()
        .expect("syscalls are counted by default");
    match serde_json::to_value(syscalls).unwrap() {
        serde_json::Value::Object(fields) => fields,
        other => panic!("SyscallStats serialised as {other}"),
    }
}

/// mmap_brk from exec to exit, in each probe setting of the `exact!` tests: no heap
/// counter moves, and every syscall counter holds at least the fixture's own calls
/// (ld.so's start-up mappings come on top). A tracker counting nothing fails.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn mmap_brk_from_exec_heap_zero_syscalls_at_least_its_own() {
    let spec = &expected()["fixtures"]["mmap_brk"]["without_protocol"]["processes"]["main"];
    let at_least = spec["syscalls_at_least"].as_object().unwrap();
    for (placement, links) in [
        (ProbePlacement::Cheapest, UprobeLinks::Auto),
        (ProbePlacement::FunctionEntry, UprobeLinks::Auto),
        (ProbePlacement::Cheapest, UprobeLinks::PerfEvent),
    ] {
        let setting = format!("{placement:?}, {links:?}");
        let tracker = Tracker::builder()
            .probe_placement(placement)
            .uprobe_links(links)
            .spawn(CommandSpec::new(fixture("mmap_brk")))
            .unwrap();
        assert_eq!(tracker.wait().unwrap().code, Some(0), "{setting}");
        let processes = tracker.collect_processes().unwrap();
        assert_eq!(processes.len(), 1, "{setting}: {processes:#?}");
        let stats = &processes[0].stats;
        let d = diff(stats, spec);
        assert!(d.is_empty(), "{setting}: {d:#?}\n{stats:#?}");
        let got = syscalls_of(stats);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            at_least.keys().collect::<Vec<_>>(),
            "{setting}: the expectation names every syscall counter"
        );
        for (name, want) in at_least {
            let (got, want) = (got[name].as_u64().unwrap(), want.as_u64().unwrap());
            assert!(
                got >= want,
                "{setting}: {name} = {got}, expected at least {want}"
            );
        }
    }
}

/// mmap_brk from the protocol's "go" to exit: exactly the fixture's own mmap, munmap
/// and brk calls (lengths in bytes, the break's growth and shrinkage), and no heap
/// counter moves.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn mmap_brk_from_go_exact_syscalls_heap_zero() {
    let stats = run_protocol(
        |ready_w, go_r| {
            let spec = CommandSpec::new(fixture("mmap_brk"))
                .fd(3, ready_w)
                .fd(4, go_r);
            Tracker::builder().start_enabled(false).spawn(spec).unwrap()
        },
        |mut tracker| {
            tracker.start().unwrap();
            tracker
        },
    );
    let spec = &expected()["fixtures"]["mmap_brk"]["processes"]["main"];
    let d = diff(&stats, spec);
    assert!(d.is_empty(), "{d:#?}\n{stats:#?}");
    assert_eq!(
        serde_json::Value::Object(syscalls_of(&stats)),
        spec["syscalls"],
        "{stats:#?}"
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn fork_parent_and_child_each_exact() {
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

/// Runs a fixture through its ready/go protocol (tests/fixtures/fixture.h): `launch`
/// starts it with the ready pipe's write end and the go pipe's read end (to become its
/// fds 3 and 4); once it says ready, `at_ready` turns what `launch` returned into a
/// counting tracker; then "go". Returns the counters from "go" to exit (exit status 0).
fn run_protocol<L>(
    launch: impl FnOnce(std::os::fd::RawFd, std::os::fd::RawFd) -> L,
    at_ready: impl FnOnce(L) -> ProcessTracker,
) -> Stats {
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
    tracker.collect().unwrap()
}

/// prestart_free run through the protocol: the counters must be the protocol mode's.
fn prestart_protocol<L>(
    launch: impl FnOnce(std::os::fd::RawFd, std::os::fd::RawFd) -> L,
    at_ready: impl FnOnce(L) -> ProcessTracker,
) {
    let stats = run_protocol(launch, at_ready);
    let d = diff(
        &stats,
        &expected()["fixtures"]["prestart_free"]["processes"]["main"],
    );
    assert!(d.is_empty(), "{d:#?}\n{stats:#?}");
}

/// A block allocated before tracking starts and freed after: an unmatched free.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn prestart_free_is_unmatched() {
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
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn prestart_free_without_protocol() {
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
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn attach_to_a_running_process() {
    use std::os::unix::process::CommandExt;
    prestart_protocol(
        |ready_w, go_r| {
            let mut cmd = std::process::Command::new(fixture("prestart_free"));
            // SAFETY: only fcntl and dup2 between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    // Both out of the way first: with tests running in parallel the
                    // pipes can be fds 3 and 4 themselves, and dup2(ready_w, 3) would
                    // then replace go_r before it is moved (the child, reading "go" from
                    // the wrong pipe, exited at once, and attaching to it failed with
                    // EPERM: it was a zombie).
                    let ready = libc::fcntl(ready_w, libc::F_DUPFD, 10);
                    let go = libc::fcntl(go_r, libc::F_DUPFD, 10);
                    if ready < 0 || go < 0 || libc::dup2(ready, 3) < 0 || libc::dup2(go, 4) < 0 {
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

/// Fails unless this test runs as root (chroot and mount need it).
fn need_root() {
    assert!(
        memtrack_test_support::is_root(),
        "chroot and mount need root"
    );
}

/// Copies the libraries `exe` loads (by the paths `ldd` gives) below `root`.
fn copy_libraries(exe: &std::path::Path, root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let ldd = std::process::Command::new("ldd").arg(exe).output().unwrap();
    assert!(ldd.status.success());
    let libs: Vec<std::path::PathBuf> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(std::path::PathBuf::from)
        .collect();
    assert!(
        libs.iter().any(|l| l.to_string_lossy().contains("libc.so")),
        "{libs:?}"
    );
    for lib in &libs {
        let dst = root.join(lib.strip_prefix("/").unwrap());
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(lib, &dst).unwrap();
    }
    libs
}

/// Copies `exe`'s libraries below `root` ([`copy_libraries`]); returns the C library's
/// path as `ldd` names it and the path of its copy.
fn copy_libc(
    exe: &std::path::Path,
    root: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let libc = copy_libraries(exe, root)
        .into_iter()
        .find(|l| l.to_string_lossy().contains("libc.so"))
        .unwrap();
    let copy = root.join(libc.strip_prefix("/").unwrap());
    (libc, copy)
}

/// The one tracked process running `exe` at the end, checked against `name`'s expected
/// numbers; returns it.
fn check_final_image(tracker: &ProcessTracker, exe: &str, name: &str) -> memtrack::TrackedProcess {
    let processes = tracker.collect_processes().unwrap();
    let process = processes
        .iter()
        .find(|p| p.command.first().is_some_and(|c| c == exe))
        .unwrap_or_else(|| panic!("no process ran {exe}: {processes:#?}"))
        .clone();
    let spec = &expected()["fixtures"][name];
    let differences = diff(&process.stats, &spec["processes"]["main"]);
    assert!(
        differences.is_empty(),
        "{differences:#?}\n{:#?}",
        process.stats
    );
    process
}

/// A chrooted process (another root directory): the kernel prints its mapped files with
/// their full paths as seen from here. Its libraries are copies inside the new root
/// (other files than the host's at the same relative paths), so probing the host's
/// would count nothing.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_chrooted_process_is_probed_in_its_own_root() {
    need_root();
    let name = "malloc_free";
    let root = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(name), root.path().join(name)).unwrap();
    copy_libraries(&fixture(name), root.path());
    let inside = format!("/{name}");
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new("chroot").args([root.path().as_os_str(), inside.as_ref()]))
        .unwrap();
    assert_eq!(tracker.wait().unwrap().code, Some(0));
    check_final_image(&tracker, &inside, name);
}

/// A process in another mount namespace (as in a container) where libc's path names a
/// different file than here (a copy bind-mounted over it): its maps show paths of its
/// namespace, so memtrack reads and probes the file through `/proc/PID/root`.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_process_in_another_mount_namespace_is_probed_there() {
    need_root();
    let name = "malloc_free";
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(name);
    let (libc, copy) = copy_libc(&exe, dir.path());
    let script = format!(
        "mount --bind '{}' '{}' && exec '{}'",
        copy.display(),
        std::fs::canonicalize(&libc).unwrap().display(),
        exe.display()
    );
    let tracker = Tracker::builder()
        .spawn(
            CommandSpec::new("unshare")
                .args(["--mount", "--propagation", "private", "sh", "-c"])
                .args([script.as_str()]),
        )
        .unwrap();
    assert_eq!(tracker.wait().unwrap().code, Some(0));
    let process = check_final_image(&tracker, &exe.to_string_lossy(), name);
    let below_root = format!("/proc/{}/root/", process.pid);
    assert!(
        process
            .probes
            .iter()
            .any(|p| p.object.to_string_lossy().starts_with(&below_root)),
        "{:#?}",
        process.probes
    );
}

/// At a command's exec stop memtrack probes the C library it runs with itself, before
/// the loader maps it (memtrack_targets::expected_targets: one uprobe registration wait
/// per exec instead of two). A program that loads another copy of the library
/// (LD_LIBRARY_PATH) must be probed in that copy, counted exactly once per call, and the
/// unused guess never reported as a probe.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_program_loading_another_copy_of_libc_is_probed_in_the_copy_alone() {
    need_root();
    let name = "malloc_free";
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(name);
    let (_, copy) = copy_libc(&exe, dir.path());
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new(&exe).env("LD_LIBRARY_PATH", copy.parent().unwrap()))
        .unwrap();
    assert_eq!(tracker.wait().unwrap().code, Some(0));
    let process = check_final_image(&tracker, &exe.to_string_lossy(), name);
    let libc_probes: Vec<_> = process
        .probes
        .iter()
        .filter(|p| {
            p.object
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
        })
        .collect();
    let copy = std::fs::canonicalize(&copy).unwrap();
    assert!(!libc_probes.is_empty(), "{:#?}", process.probes);
    for probe in &libc_probes {
        assert_eq!(
            std::fs::canonicalize(&probe.object).unwrap(),
            copy,
            "{:#?}",
            process.probes
        );
    }
    // One probe per function: the guess was not reported beside the copy's.
    let mut functions: Vec<_> = libc_probes.iter().map(|p| &p.function).collect();
    let count = functions.len();
    functions.sort();
    functions.dedup();
    assert_eq!(functions.len(), count, "{:#?}", process.probes);
}
