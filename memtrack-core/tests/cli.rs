//! The `memtrack` binary: JSON output, exit codes, signals forwarded with results kept,
//! the sudo identity, `memtrack report`.

mod support;

use std::{
    os::unix::fs::PermissionsExt,
    process::{Command, Stdio},
    time::Duration,
};

use support::{expected, fixture, require_privileges};

fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

#[test]
fn json_report_has_processes_with_exact_stats() {
    if !require_privileges("json_report") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = memtrack()
        .args(["run", "--json", "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(fixture("leak"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let processes = json["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1);
    let stats = &processes[0]["stats"];
    let want = &expected()["fixtures"]["leak"]["processes"]["main"]["totals"];
    for field in [
        "alloc_calls",
        "free_calls",
        "bytes_allocated",
        "live_bytes",
        "peak_live_bytes",
    ] {
        assert_eq!(stats[field], want[field], "{field}");
    }
    assert_eq!(json["benchmarks"], serde_json::json!([]));
    // `memtrack report` prints the same from the files.
    let report = memtrack()
        .arg("report")
        .arg(dir.path())
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(0));
    let again: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(again, json);
    assert!(dir.path().join("MarkerResult.msgpack").exists());
}

#[test]
fn exit_code_is_the_commands() {
    if !require_privileges("exit_code") {
        return;
    }
    let status = memtrack()
        .args(["run", "--", "sh", "-c", "exit 7"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    let status = memtrack()
        .args(["run", "--", "sh", "-c", "kill -TERM $$"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(128 + 15));
}

#[test]
fn no_command_is_a_usage_error() {
    let out = memtrack().arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
}

#[test]
fn report_of_a_corrupt_file_names_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("42.MemtrackResult.msgpack"), b"\x85garbage").unwrap();
    let out = memtrack().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("42.MemtrackResult.msgpack"), "{stderr}");
}

/// SIGINT sent to memtrack reaches the command; the command's death is reported (exit
/// 130) and the results collected so far are written.
#[test]
fn sigint_is_forwarded_and_results_are_kept() {
    if !require_privileges("sigint") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = memtrack()
        .args(["run", "-o"])
        .arg(dir.path())
        .args(["--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the command runs: memtrack's follower thread (not its main thread)
    // is the command's parent, so look at the children of every thread.
    let pid = child.id();
    let started = std::time::Instant::now();
    let has_child = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|task| {
                std::fs::read_to_string(task.path().join("children"))
                    .is_ok_and(|c| c.split_whitespace().count() >= 2)
            })
    };
    loop {
        // Two children: the follower's sentinel and the command.
        if has_child() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "sleep never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let results = memtrack::MemtrackResult::read_dir(dir.path()).unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].exit_signal, Some(2));
}

/// Started through sudo (SUDO_UID/SUDO_GID set, running as root), the command runs as
/// that user.
#[test]
fn sudo_user_runs_the_command() {
    if !require_privileges("sudo_user") || !nix::unistd::Uid::effective().is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let id_file = dir.path().join("id");
    let out = memtrack()
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .args(["run", "-o"])
        .arg(dir.path().join("results"))
        .args(["--", "sh", "-c"])
        .arg(format!("id -u > {0}; id -g >> {0}", id_file.display()))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&id_file).unwrap(), "65534\n65534\n");
}

/// A live-block map too small for the program: the loss is counted and shown, never
/// silent.
#[test]
fn a_full_live_map_is_reported_as_lost_events() {
    if !require_privileges("full_live_map") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = memtrack()
        .args(["run", "--max-live-blocks", "2", "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(fixture("leak"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("LOST EVENTS"), "{text}");
    let results = memtrack::MemtrackResult::read_dir(dir.path()).unwrap();
    assert!(results[0].stats.lost_events > 0, "{:#?}", results[0].stats);
}
