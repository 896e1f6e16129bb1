//! While an in-process Tracker is attached (and counting) in this process, an unrelated
//! process's malloc/free loop must run at native speed: the probes are scoped to the
//! tracked process. Measured as a ratio within one run, generously bounded; the precise
//! figures are in BENCHMARKS.md.

use std::process::Command;

use memtrack::Tracker;
use memtrack_test_support::require_privileges;

fn build_loop() -> std::path::PathBuf {
    let src = memtrack_test_support::fixtures_dir().join("../programs/malloc_loop.c");
    let out = std::env::temp_dir().join(format!("memtrack-malloc-loop-{}", std::process::id()));
    let status = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    out
}

/// Best of three runs, in ns per malloc+free pair.
fn ns_per_pair(bin: &std::path::Path) -> f64 {
    (0..3)
        .map(|_| {
            let out = Command::new(bin).arg("2000000").output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse::<f64>()
                .unwrap()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn unrelated_process_runs_at_native_speed() {
    if !require_privileges("isolation") {
        return;
    }
    let bin = build_loop();
    let native = ns_per_pair(&bin);
    let mut tracker = Tracker::new().unwrap();
    tracker.start().unwrap();
    let beside = ns_per_pair(&bin);
    tracker.stop().unwrap();
    drop(tracker);
    let ratio = beside / native;
    let _ = std::fs::remove_file(&bin);
    // A probe that fired in the unrelated process would cost ~100x (probe-costs.md).
    assert!(
        ratio < 1.5,
        "unrelated loop slowed down: {native:.1} ns native, {beside:.1} ns beside a tracker"
    );
}
