//! Bad input gets a clear error in bounded time and memory, and loses nothing else (issue
//! 11): result directories holding links, FIFOs, junk and huge files; results
//! directories that cannot take results; live-block capacities the kernel cannot make;
//! 32-bit programs.

use std::{
    os::unix::{fs::symlink, process::CommandExt},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use memtrack_cli::exit_code::MEMTRACK_FAILED;
use memtrack_test_support::is_root;

fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

/// Runs `command` with at most 1 GiB of address space, so that reading something
/// unbounded (a link to /dev/zero) fails at once instead of taking the machine.
fn bounded_output(command: &mut Command) -> Output {
    // SAFETY: setrlimit is async-signal-safe and touches nothing of the parent's.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A directory holding one real result (of `true`), and its pid.
fn one_real_result() -> (tempfile::TempDir, u32) {
    let dir = tempfile::tempdir().unwrap();
    let out = memtrack()
        .arg("run")
        .arg("-o")
        .arg(dir.path())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = memtrack::MemtrackResult::read_dir(dir.path()).unwrap();
    assert_eq!(results.len(), 1);
    (dir, results[0].process.pid)
}

fn result_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}{}", memtrack::RESULT_FILE_SUFFIX))
}

/// Everything named like a result that is not one is refused, by name and reason, never
/// read past the limit; the real result next to them is still reported, and the exit
/// code says that something was skipped.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn report_refuses_what_is_not_a_result_and_reports_the_rest() {
    let (dir, pid) = one_real_result();
    let real = std::fs::read(result_path(dir.path(), &pid.to_string())).unwrap();
    symlink("/dev/zero", result_path(dir.path(), "1")).unwrap();
    nix::unistd::mkfifo(
        &result_path(dir.path(), "2"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let mut junk = real.clone();
    junk.extend_from_slice(b"junk");
    std::fs::write(result_path(dir.path(), "3"), &junk).unwrap();
    // 300 MB, sparse: a valid result followed by zeros.
    let huge = std::fs::File::create(result_path(dir.path(), "4")).unwrap();
    std::io::Write::write_all(&mut &huge, &real).unwrap();
    huge.set_len(300_000_000).unwrap();
    std::fs::create_dir(result_path(dir.path(), "5")).unwrap();
    std::fs::write(result_path(dir.path(), "6"), b"\xc1 not MessagePack").unwrap();

    let out = bounded_output(memtrack().arg("report").arg("--json").arg(dir.path()));
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(MEMTRACK_FAILED)),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pids: Vec<u64> = json["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, [u64::from(pid)]);

    let skipped = |name: &str, reason: &str| {
        format!(
            "memtrack: skipped result file {}: {reason}",
            result_path(dir.path(), name).display()
        )
    };
    let want = [
        skipped("1", "is a symbolic link, not a regular file; not read"),
        skipped("2", "is a FIFO, not a regular file; not read"),
        skipped(
            "3",
            &format!(
                "4 trailing bytes after the {}-byte result (a result file holds exactly one \
                 MessagePack value)",
                real.len()
            ),
        ),
        skipped(
            "4",
            "is 300000000 bytes, more than the 67108864 bytes a result file may have; not read",
        ),
        skipped("5", "is a directory, not a regular file; not read"),
        format!(
            "memtrack: reported 1 result file of 7 in {}; 6 skipped (above)",
            dir.path().display()
        ),
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 7, "{stderr}");
    for line in &want[..5] {
        assert!(
            lines.contains(&line.as_str()),
            "no line {line:?} in\n{stderr}"
        );
    }
    assert!(
        lines.iter().any(|l| l.starts_with(&skipped(
            "6",
            "not a memtrack result (truncated or corrupt MessagePack)"
        ))),
        "{stderr}"
    );
    assert_eq!(lines[6], want[5]);
}

/// A directory without results is an error, not an empty report.
#[test]
fn report_of_a_directory_without_results_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("MarkerResult.msgpack"), b"").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
    let out = memtrack().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(i32::from(MEMTRACK_FAILED)));
    assert_eq!(out.stdout, b"");
    assert_eq!(
        text(&out.stderr),
        format!(
            "memtrack: {} holds no result files (*.MemtrackResult.msgpack): nothing to report\n",
            dir.path().display()
        )
    );
    // Only unreadable ones: said so.
    symlink("/dev/zero", result_path(dir.path(), "1")).unwrap();
    let out = memtrack().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(i32::from(MEMTRACK_FAILED)));
    assert!(
        text(&out.stderr).ends_with(&format!(
            "memtrack: the one result file in {} could not be read: nothing to report\n",
            dir.path().display()
        )),
        "{}",
        text(&out.stderr)
    );
}

/// `memtrack run -o DIR -- touch MARK` where DIR cannot take results: memtrack exits 201
/// naming DIR and why, and the command never ran (MARK does not exist).
fn assert_refused_before_the_command(out_dir: &Path, wrap: Option<&[&str]>, reason: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let mark = scratch.path().join("MARK");
    let mut command = match wrap {
        Some(wrapper) => {
            let mut c = Command::new(wrapper[0]);
            c.args(&wrapper[1..]).arg(env!("CARGO_BIN_EXE_memtrack"));
            c
        }
        None => memtrack(),
    };
    let out = command
        .arg("run")
        .arg("-o")
        .arg(out_dir)
        .args(["--", "touch"])
        .arg(&mark)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(MEMTRACK_FAILED)),
        "{stderr}"
    );
    let want = format!(
        "memtrack: results directory {}: {reason}",
        out_dir.display()
    );
    assert!(
        stderr.starts_with(&want),
        "{stderr:?} does not start with {want:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!mark.exists(), "the command ran");
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn an_unusable_results_directory_fails_before_the_command_starts() {
    let base = tempfile::tempdir().unwrap();
    let file = base.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert_refused_before_the_command(&file, None, "is not a directory (it is a regular file)");
    let missing = base.path().join("missing/results");
    assert_refused_before_the_command(
        &missing,
        None,
        &format!(
            "its parent directory {} does not exist",
            base.path().join("missing").display()
        ),
    );
    let link = base.path().join("link");
    symlink(base.path(), &link).unwrap();
    assert_refused_before_the_command(
        &link,
        None,
        "is a symbolic link, which memtrack does not follow here",
    );
    assert_eq!(
        std::fs::read_dir(base.path()).unwrap().count(),
        2,
        "memtrack left something behind"
    );
}

/// Root may write everywhere but on a read-only file system: a tmpfs mounted read-only
/// in a private mount namespace (`unshare --mount`, so nothing leaks to the machine).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_read_only_results_directory_fails_before_the_command_starts() {
    assert!(is_root(), "needs root: it mounts a tmpfs");
    let base = tempfile::tempdir().unwrap();
    let script = r#"mount -t tmpfs -o ro memtrack-test "$0" && exec "$@""#;
    assert_refused_before_the_command(
        base.path(),
        Some(&[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            base.path().to_str().unwrap(),
        ]),
        "cannot create a file in: Read-only file system",
    );
}

/// `memtrack run FLAG N -- true` for block counts out of 1 to 2^27 (0, 2^27 + 1,
/// 2^32 - 1) fails before anything runs, naming the value and the range.
fn refuses_out_of_range_blocks(flag: &str) {
    for blocks in ["0", "134217729", "4294967295"] {
        let out = memtrack()
            .args(["run", flag, blocks, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(i32::from(MEMTRACK_FAILED)),
            "{flag} {blocks}"
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "invalid value '{blocks}' for '{flag} <BLOCKS>': {blocks} is not in 1..=134217728"
            )),
            "{stderr}"
        );
    }
}

/// 0 blocks used to be taken as 1, 2^32-1 ended in "failed to create map `LIVE`": the
/// capacity is checked against the range the kernel can make, 1 to 2^27.
#[test]
fn a_live_block_capacity_out_of_range_is_refused_with_the_range() {
    refuses_out_of_range_blocks("--max-live-blocks");
    // The library refuses it too, before loading anything.
    let err = memtrack::Tracker::builder()
        .max_live_blocks(0)
        .build(memtrack::Scope::Process)
        .err()
        .expect("0 blocks must be refused");
    assert_eq!(
        err.to_string(),
        "a live-block map of 0 blocks is impossible: the capacity must be 1 to 134217728 (the \
         kernel's largest hash map)"
    );
}

/// The preallocated part of the capacity has the same range, and the library refuses 0
/// too.
#[test]
fn a_preallocated_live_block_count_out_of_range_is_refused_with_the_range() {
    refuses_out_of_range_blocks("--preallocated-live-blocks");
    let err = memtrack::Tracker::builder()
        .preallocated_live_blocks(0)
        .build(memtrack::Scope::Process)
        .err()
        .expect("0 preallocated blocks must be refused");
    assert!(
        err.to_string()
            .starts_with("0 preallocated live blocks is impossible"),
        "{err}"
    );
}

/// A call-stack depth the unwinder cannot record (0, or beyond 64 frames) used to be
/// clamped into range silently; the library refuses it, before loading anything, and
/// the runner's `--stacks` does too.
#[test]
fn a_stack_depth_out_of_range_is_refused_with_the_range() {
    let max = memtrack::stacks::MAX_DEPTH;
    for depth in [0, max + 1, u32::MAX] {
        let err = memtrack::Tracker::builder()
            .stacks(depth)
            .build(memtrack::Scope::Process)
            .err()
            .expect("the depth must be refused");
        assert_eq!(
            err.to_string(),
            format!(
                "a call-stack depth of {depth} frames is impossible: the depth must be 1 to \
                 {max} frames"
            )
        );
    }
    for depth in ["0", "65"] {
        let out = memtrack()
            .args(["run", &format!("--stacks={depth}"), "--", "true"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(i32::from(MEMTRACK_FAILED)),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("\"{depth}\" is not a stack depth from 1 to {max}")),
            "{stderr}"
        );
    }
}

/// `start_enabled` applies to spawned and attached processes; a tracker of the calling
/// process counts from `Tracker::start`, so the builder refuses it there rather than
/// ignore it (it used to be ignored silently).
#[test]
fn start_enabled_on_a_tracker_of_this_process_is_refused() {
    for enabled in [true, false] {
        let err = memtrack::Tracker::builder()
            .start_enabled(enabled)
            .build(memtrack::Scope::Process)
            .err()
            .expect("refused");
        assert_eq!(
            err.to_string(),
            "start_enabled applies to spawn and attach_pid; a Tracker of the calling process \
             counts from Tracker::start"
        );
    }
}

/// A 32-bit program (here a static i386 one that only exits) is said to be unsupported,
/// not "allocator not recognised ... in: " with an empty list.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_32_bit_program_is_said_to_be_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let program = memtrack_test_support::i386_exit_program(dir.path(), 3);
    let out = memtrack()
        .args(["run", "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    // The human report is on stderr.
    let stdout = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "runs a 32-bit program ({}): 32-bit processes are not supported",
            program.display()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains(" in: "), "{stdout}");
}
