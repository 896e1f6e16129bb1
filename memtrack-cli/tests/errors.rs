//! Bad input gets a clear error and leaves everything else working: a missing command,
//! a vanished pid, a static binary with no allocator symbols, no privileges.

use std::{path::Path, process::Command};

use memtrack::{AllocatorStatus, CommandSpec, Error, Tracker};

fn memtrack_bin() -> &'static str {
    env!("CARGO_BIN_EXE_memtrack")
}

/// `memtrack run -- program` for a program that cannot be run: exit `code`, and one line
/// on stderr saying `says`.
fn refused_in_one_line(program: &Path, code: i32, says: &str) {
    let out = Command::new(memtrack_bin())
        .args(["run", "--"])
        .arg(program)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "{program:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn missing_command_exits_127_with_one_line() {
    refused_in_one_line(
        Path::new("/nonexistent/command"),
        127,
        "/nonexistent/command: command not found",
    );
}

/// A file that is there but not executable: 126, as a shell says it, not memtrack's
/// own failure (201).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn non_executable_command_exits_126_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.txt");
    std::fs::write(&file, "not a program\n").unwrap();
    for target in [file.as_path(), dir.path()] {
        refused_in_one_line(target, 126, "permission denied (not an executable file)");
    }
}

/// `--json` naming a directory fails before the command runs, saying so.
#[test]
fn json_to_a_directory_fails_before_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let out = Command::new(memtrack_bin())
        .args(["run", "--json"])
        .arg(dir.path())
        .args(["--", "touch"])
        .arg(&mark)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(201));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "memtrack: --json {}: is a directory (give a file name)\n",
            dir.path().display()
        )
    );
    assert!(!mark.exists());
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn missing_command_is_an_error_value() {
    let err = Tracker::builder()
        .spawn(CommandSpec::new("definitely-not-a-command-xyz"))
        .err()
        .expect("spawn must fail");
    assert!(matches!(err, Error::CommandNotFound { .. }), "{err:?}");
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn vanished_pid_is_process_gone() {
    // Spawn and reap a process, so its pid is (for now) free.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let err = Tracker::builder().attach_pid(pid).err().expect("must fail");
    assert!(
        matches!(err, Error::ProcessGone { pid: p } if p == pid),
        "{err:?}"
    );
    assert!(err.to_string().contains("does not exist"), "{err}");
}

/// The one misuse the types cannot rule out: a process cannot trace itself. Refused
/// before anything is loaded, so it needs no privileges.
#[test]
fn attaching_to_the_calling_process_is_a_usage_error() {
    let err = Tracker::builder()
        .attach_pid(std::process::id())
        .err()
        .expect("must fail");
    assert!(
        matches!(err, Error::Usage(message) if message.contains("use Tracker::new")),
        "{err:?}"
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn static_binary_without_symbols_is_reported_not_counted_as_zero() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("static.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\nint main(void){void *volatile p = malloc(100); free(p); return 0;}\n",
    )
    .unwrap();
    let bin = dir.path().join("static");
    let ok = Command::new("gcc")
        .args(["-O0", "-static", "-s", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "gcc -static must work (libc6-dev ships libc.a)");
    let tracker = Tracker::builder().spawn(CommandSpec::new(&bin)).unwrap();
    assert_eq!(tracker.wait().unwrap().code, Some(0));
    let processes = tracker.collect_processes().unwrap();
    assert_eq!(processes.len(), 1);
    match &processes[0].allocator {
        AllocatorStatus::NotRecognised { reason } => {
            assert!(reason.contains("no known allocator"), "{reason}")
        }
        other => panic!("expected NotRecognised, got {other:?}"),
    }
    let report = memtrack_report::report::render_text(&processes);
    assert!(
        report.contains("\n  allocator not recognised: heap not measured (no known allocator"),
        "{report}"
    );
}

/// As user `nobody` (no capabilities), memtrack says which capabilities are missing and
/// exits with its own error code instead of panicking.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn unprivileged_user_gets_the_capability_message() {
    // nobody must be able to execute the binary: copy it somewhere world-readable.
    let dir = tempfile::tempdir().unwrap();
    let bin = memtrack_test_support::copy_for_nobody(memtrack_bin().as_ref(), dir.path());
    let out = memtrack_test_support::as_nobody(&bin)
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(memtrack_cli::exit_code::MEMTRACK_FAILED)),
        "{stderr}"
    );
    assert!(stderr.contains("CAP_BPF and CAP_PERFMON"), "{stderr}");
    assert!(stderr.contains("sudo"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// What the capability message and the book's "Privileges" promise: `memtrack run`
/// needs CAP_BPF and CAP_PERFMON and nothing more (no CAP_SYS_PTRACE: it traces only the
/// processes it starts). User nobody runs a copy with just those two and gets its
/// command's exact result.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn two_capabilities_on_the_binary_are_enough_for_memtrack_run() {
    assert!(
        memtrack_test_support::is_root(),
        "needs root: it sets capabilities and runs as user nobody"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = memtrack_test_support::copy_for_nobody(memtrack_bin().as_ref(), dir.path());
    let status = Command::new("setcap")
        .arg("cap_bpf,cap_perfmon+ep")
        .arg(&bin)
        .status()
        .expect("setcap runs (package libcap2-bin)");
    assert!(status.success(), "setcap on {}", bin.display());
    let results = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        results.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out_dir = results.path().join("out");
    let out = memtrack_test_support::as_nobody(&bin)
        .args(["run", "-o"])
        .arg(&out_dir)
        .args(["--", "/bin/echo", "hi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n", "{stderr}");
    let results = memtrack::MemtrackResult::read_dir(&out_dir).unwrap();
    assert_eq!(results.len(), 1, "{stderr}");
    assert_eq!(results[0].process.exit_code, Some(0));
    assert_eq!(results[0].process.allocator, AllocatorStatus::Probed);
    assert!(
        results[0].process.stats.alloc_calls > 0,
        "{:?}",
        results[0].process.stats
    );
}
