//! What a tracked command sends over the FIFO cannot make memtrack lose counts or flood
//! its stderr (issue 11): a `CurrentBenchmark` for a process memtrack does not track is
//! refused, and 100,000 malformed frames are told in one line.
//!
//! The command is this test binary again, running the same test under `memtrack run`
//! in its child role ([`CHILD_ENV`]).

use std::{io::Write, path::Path, process::Command};

use fifo_protocol::{CONTROL_FIFO_NAME, FIFO_DIR_ENV, FifoClient, MarkerResult, Reply};
/// Set (to 1) in the command a test runs under `memtrack run`: the test there plays its
/// child's role.
const CHILD_ENV: &str = "MEMTRACK_FIFO_INPUT_CHILD";

/// Whether this test process is a test's child under `memtrack run`.
fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// `memtrack run -o DIR -- <this test binary> --exact TEST` with [`CHILD_ENV`] set;
/// returns its stderr after asserting that it exited 0.
fn run_child(dir: &Path, test: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memtrack"))
        .arg("run")
        .arg("-o")
        .arg(dir)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--include-ignored",
            "--exact",
            test,
            "--test-threads=1",
            "--quiet",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stderr}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// The FIFO client of a child (it runs under `memtrack run`).
fn client() -> FifoClient {
    FifoClient::from_env()
        .expect("a child runs under memtrack run")
        .expect("the runner answers")
}

/// The child of `current_benchmark_of_an_untracked_process_is_refused`.
fn names_untracked_processes() {
    let mut client = client();
    client.set_version().unwrap();
    for pid in [1, u32::MAX] {
        let cmd = fifo_protocol::Command::CurrentBenchmark {
            pid,
            uri: format!("foreign-{pid}"),
        };
        match client.send(&cmd).unwrap() {
            Reply::Err { message } => assert_eq!(
                message,
                format!(
                    "CurrentBenchmark names process {pid}, which memtrack does not track (it \
                     tracks the command and the processes it starts, while they run); \
                     benchmark \"foreign-{pid}\" is not counted"
                )
            ),
            other => panic!("CurrentBenchmark for pid {pid} was answered {other:?}"),
        }
    }
    // Its own region still counts, exactly.
    client.current_benchmark("own").unwrap();
    client.start_benchmark().unwrap();
    drop(std::hint::black_box(Box::new([0u8; 1000])));
    client.stop_benchmark().unwrap();
}

/// A `CurrentBenchmark` naming pid 1 or 2^32-1 used to be acknowledged, and the command's
/// counts then vanished: now it is refused, not recorded, and the command's own region
/// is counted exactly.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn current_benchmark_of_an_untracked_process_is_refused() {
    if is_child() {
        return names_untracked_processes();
    }
    let dir = tempfile::tempdir().unwrap();
    run_child(
        dir.path(),
        "current_benchmark_of_an_untracked_process_is_refused",
    );
    let markers = MarkerResult::read_from(&dir.path().join("MarkerResult.msgpack")).unwrap();
    let uris: Vec<&str> = markers.benchmarks.iter().map(|b| b.uri.as_str()).collect();
    assert_eq!(uris, ["own"]);
    let child_pid = markers.benchmarks[0].pid;
    let results = memtrack::MemtrackResult::read_dir(dir.path()).unwrap();
    let child = results.iter().find(|r| r.process.pid == child_pid).unwrap();
    assert_eq!(child.process.benchmarks.len(), 1);
    let stats = &child.process.benchmarks[0].stats;
    assert_eq!(
        (
            stats.alloc_calls,
            stats.bytes_allocated,
            stats.free_calls,
            stats.bytes_freed
        ),
        (1, 1000, 1, 1000),
        "{stats:#?}"
    );
}

/// The child of `malformed_frames_are_told_in_one_line`.
fn writes_malformed_frames() {
    let dir = std::env::var_os(FIFO_DIR_ENV).expect("a child runs under memtrack run");
    // 100,000 frames whose 1-byte body (0xc1) is not MessagePack; the replies are not
    // read. The runner handles all of it before it stops, even what is still in the
    // pipe when this process exits.
    let mut control = std::fs::OpenOptions::new()
        .write(true)
        .open(Path::new(&dir).join(CONTROL_FIFO_NAME))
        .unwrap();
    control
        .write_all(&[1, 0, 0, 0, 0xc1].repeat(100_000))
        .unwrap();
}

/// 100,000 malformed frames used to print 100,000 lines on stderr.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn malformed_frames_are_told_in_one_line() {
    if is_child() {
        return writes_malformed_frames();
    }
    let dir = tempfile::tempdir().unwrap();
    let stderr = run_child(dir.path(), "malformed_frames_are_told_in_one_line");
    let fifo_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("memtrack: fifo:"))
        .collect();
    assert_eq!(fifo_lines.len(), 1, "{stderr}");
    assert!(
        fifo_lines[0].starts_with(
            "memtrack: fifo: 100000 problems; the first: skipped a malformed frame: cannot \
             decode 1-byte frame body as a Command"
        ),
        "{stderr}"
    );
    // Nothing else is lost: the child's result is written.
    let results = memtrack::MemtrackResult::read_dir(dir.path()).unwrap();
    assert_eq!(results.len(), 1, "{results:#?}");
}
