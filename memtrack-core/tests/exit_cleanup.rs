//! A process that drops its tracker and exits at once must not leave uprobes behind.
//! Links are closed on a background thread; if the exit killed that thread in the
//! middle, the kernel's unregistering would fail and leak the uprobes (it logs "failed
//! to unregister, leaking uprobe"). The test runs this binary again as a helper that
//! does exactly that, and compares the kernel log before and after; and the same with
//! the links handed to an exit helper (`memtrack::hand_off_links_at_exit`).

use std::process::Command;

const HELPER_ENV: &str = "MEMTRACK_EXIT_CLEANUP_HELPER";
/// Helper runs; run `i` exits `i` x 0.5 ms after dropping its tracker.
const RUNS: usize = 16;

/// What the test below runs this binary again for: tracks itself, drops the tracker
/// and exits `delay_us` microseconds later.
fn drop_then_exit(delay_us: u64) -> ! {
    let mut tracker = memtrack::Tracker::new().expect("tracker");
    tracker.start().expect("start");
    std::hint::black_box(vec![0u8; 100]);
    tracker.stop().expect("stop");
    drop(tracker);
    // The exit comes at a different moment of the background detaching in each run.
    std::thread::sleep(std::time::Duration::from_micros(delay_us));
    std::process::exit(0);
}

/// Runs this test binary's test `test` alone, with `value` in environment variable
/// `env` (the test then plays the role `value` names); its exit status.
fn run_helper(test: &str, env: &str, value: &str) -> std::process::ExitStatus {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--include-ignored", "--test-threads", "1"])
        .env(env, value)
        .status()
        .unwrap_or_else(|e| panic!("run the helper {test}: {e}"))
}

/// Lines of the kernel log that report a leaked uprobe, or None if the log cannot be
/// read.
fn leaked_uprobe_lines() -> Option<usize> {
    let out = Command::new("dmesg").output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("leaking uprobe"))
            .count(),
    )
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exiting_right_after_drop_leaks_no_uprobe() {
    if let Ok(delay) = std::env::var(HELPER_ENV) {
        drop_then_exit(delay.parse().expect("a delay in microseconds"));
    }
    let Some(before) = leaked_uprobe_lines() else {
        panic!("cannot read the kernel log with dmesg (as root it should be readable)");
    };
    // The window is short (the kernel unregisters a link's sites in microseconds, then
    // waits): several runs make hitting it likely if the exit does not wait.
    for run in 0..RUNS {
        let status = run_helper(
            "exiting_right_after_drop_leaks_no_uprobe",
            HELPER_ENV,
            &(run * 500).to_string(),
        );
        assert!(status.success(), "helper failed: {status}");
    }
    let after = leaked_uprobe_lines().unwrap();
    assert_eq!(
        after,
        before,
        "the kernel logged {} 'leaking uprobe' line(s) while the helper exited",
        after - before
    );
}

const HAND_OFF_ENV: &str = "MEMTRACK_EXIT_HAND_OFF_HELPER";
/// The test whose roles the hand-off runs.
const HAND_OFF_TEST: &str = "handing_links_off_at_exit_leaks_no_uprobe";

/// The `tracked` role of `handing_links_off_at_exit_leaks_no_uprobe`, run by its
/// supervisor: tracks itself with links handed off at exit, drops the tracker and
/// exits at once (well within the 200 ms the dropped links linger), so they go to an
/// exit helper.
fn hand_off_then_exit() -> ! {
    memtrack::hand_off_links_at_exit();
    let mut tracker = memtrack::Tracker::new().expect("tracker");
    tracker.start().expect("start");
    std::hint::black_box(vec![0u8; 100]);
    tracker.stop().expect("stop");
    drop(tracker);
    std::process::exit(0);
}

/// The `supervisor` role of `handing_links_off_at_exit_leaks_no_uprobe`: a child
/// subreaper (so the exit helper of its child becomes its own child when that child
/// exits) that runs the `tracked` role, then reaps every process left, and checks that
/// exactly one was: the exit helper holding the links.
fn hand_off_supervisor() {
    // SAFETY: a plain prctl on this process.
    let set = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(
        set,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
    let status = run_helper(HAND_OFF_TEST, HAND_OFF_ENV, "tracked");
    assert!(status.success(), "the tracked helper failed: {status}");
    let mut reaped = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child of this process (it has no other).
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::ECHILD), "waitpid: {e}");
            break;
        }
        reaped.push((pid, status));
    }
    assert_eq!(
        reaped.len(),
        1,
        "processes left behind (pid, status): {reaped:?}"
    );
    let (pid, status) = reaped[0];
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "exit helper {pid}: status {status:#x}"
    );
}

/// With links handed off at exit (what `memtrack run` asks for), the process exits
/// without closing the links it still holds: one exit helper is left holding them, and
/// the kernel unregisters the uprobes fully when it exits (no "leaking uprobe").
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn handing_links_off_at_exit_leaks_no_uprobe() {
    match std::env::var(HAND_OFF_ENV).as_deref() {
        Ok("tracked") => hand_off_then_exit(),
        Ok("supervisor") => return hand_off_supervisor(),
        _ => {}
    }
    let Some(before) = leaked_uprobe_lines() else {
        panic!("cannot read the kernel log with dmesg (as root it should be readable)");
    };
    let status = run_helper(HAND_OFF_TEST, HAND_OFF_ENV, "supervisor");
    assert!(status.success(), "the supervisor failed: {status}");
    // The supervisor reaped the exit helper: the links are closed by now.
    let after = leaked_uprobe_lines().unwrap();
    assert_eq!(
        after,
        before,
        "the kernel logged {} 'leaking uprobe' line(s) while the exit helper exited",
        after - before
    );
}

/// A child forked after a tracker was dropped inherits the exit handler that waits for
/// the closing thread, but not the thread: its `exit` must not wait (the handler would
/// otherwise give up only after a minute).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_forked_child_exits_without_waiting() {
    drop(memtrack::Tracker::new().expect("tracker"));
    let started = std::time::Instant::now();
    // SAFETY: the child only calls exit(3), which runs the atexit handlers under test.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: ends the child process.
        unsafe { libc::exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    let waited = started.elapsed();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    // Not a speed limit: 5 s separates "did not wait" (microseconds) from "waited for a
    // thread that does not exist" (the handler gives up after a minute), whatever the
    // machine's load.
    assert!(
        waited < std::time::Duration::from_secs(5),
        "the forked child's exit waited {waited:?}"
    );
}
