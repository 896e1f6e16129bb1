//! Every example prints something a reader can check by eye; these tests check it.
//! (criterion_alloc, divan_suite and marked_regions under the runner have their own
//! suites: integrations_*.rs and runner_e2e.rs.)

use std::process::Command;

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn tracker_basics_prints_the_exact_counts() {
    let out = Command::new(env!("CARGO_BIN_EXE_tracker_basics"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout,
        "a Box<[u8; 1000]>, dropped:\n\
         \x20 allocated: 1 (1000 B), freed: 1 (1000 B), peak: 1000 B live, live at end: 0 (0 B)\n\
         \x20 calls: free 1, malloc 1\n\
         a Vec<u64> grown by 100 pushes, kept:\n\
         \x20 allocated: 6 (2016 B), freed: 5 (992 B), peak: 1024 B live, live at end: 1 (1024 B)\n\
         \x20 calls: malloc 1, realloc 5\n"
    );
}

#[test]
fn marked_regions_runs_unmeasured_without_a_runner() {
    let out = Command::new(env!("CARGO_BIN_EXE_marked_regions"))
        .env_remove(fifo_protocol::FIFO_DIR_ENV)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "not running under `memtrack run`: running unmeasured"
    );
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[3].starts_with("marked_regions::thousand: done"));
}
