//! The protocol is the contract: the Rust client (fifo_protocol::FifoClient), the C
//! library (tests/c/protocol_driver.c through libmemtrack) and the Python client
//! (pytest_memtrack.protocol, integrations/python/pytest-memtrack/tests/protocol_driver.py)
//! run the same steps against one scripted runner (a FifoRunner whose handler gives each
//! region known counters) and must get the same answers: version negotiation (an older
//! runner, a newer client), framing, counters carried exactly, refusals (stop without
//! start, start twice, a uri with a newline, of 4,097 bytes, of 1 MiB), garbage in the
//! FIFO answered without costing a command, regions named after the fact, and a client
//! in a forked child. Needs no privileges: no eBPF, the runner is in this process.

mod common;

use std::io::Read;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use fifo_protocol::{
    Command as Cmd, Error, FifoClient, FifoRunner, Handler, IntegrationMode, MarkerResult,
    RegionCounters, Reply, RunnerThread,
};

/// The counters the scripted runner gives region `k`: every field distinct.
fn counters(k: u64) -> RegionCounters {
    let mut c = RegionCounters::default();
    c.region = k;
    c.alloc_calls = 100 + k;
    c.free_calls = 200 + k;
    c.bytes_allocated = 300 + k;
    c.bytes_freed = 400 + k;
    c.live_blocks = 500 + k;
    c.live_bytes = 600 + k;
    c.peak_live_bytes = 700 + k;
    c.failed_allocs = 800 + k;
    c.unmatched_frees = 900 + k;
    c.lost_events = 1000 + k;
    c
}

fn counters_text(c: &RegionCounters) -> String {
    format!(
        "region={} alloc_calls={} free_calls={} bytes_allocated={} bytes_freed={} \
         live_blocks={} live_bytes={} peak_live_bytes={} failed_allocs={} \
         unmatched_frees={} lost_events={}",
        c.region,
        c.alloc_calls,
        c.free_calls,
        c.bytes_allocated,
        c.bytes_freed,
        c.live_blocks,
        c.live_bytes,
        c.peak_live_bytes,
        c.failed_allocs,
        c.unmatched_frees,
        c.lost_events
    )
}

/// A runner that keeps counters as memtrack's does, with known values; `old` makes it a
/// runner of protocol version 1.
struct Scripted {
    old: bool,
    open: bool,
    closed: u64,
    last: Option<RegionCounters>,
    names: Arc<Mutex<Vec<(u32, u64, String)>>>,
}

impl Handler for Scripted {
    fn handle(&mut self, cmd: &Cmd) -> Option<Reply> {
        match cmd {
            Cmd::SetVersion(v) if self.old && *v != 1 => Some(Reply::Err {
                message: Error::UnsupportedVersion {
                    requested: *v,
                    min: 1,
                    max: 1,
                }
                .to_string(),
            }),
            Cmd::StartBenchmark => {
                self.open = true;
                None
            }
            Cmd::StopWithCounters | Cmd::StopBenchmark if self.open => {
                self.open = false;
                self.last = Some(counters(self.closed));
                self.closed += 1;
                None
            }
            Cmd::NameRegion { pid, region, uri } if *region < self.closed => {
                self.names
                    .lock()
                    .unwrap()
                    .push((*pid, *region, uri.clone()));
                Some(Reply::Ack)
            }
            Cmd::NameRegion { pid, region, .. } => Some(Reply::Err {
                message: format!("process {pid} has no closed region {region}"),
            }),
            _ => None,
        }
    }

    fn region_counters(&mut self) -> Option<RegionCounters> {
        self.last.take()
    }
}

type Names = Arc<Mutex<Vec<(u32, u64, String)>>>;

fn scripted(old: bool) -> (RunnerThread<Scripted>, std::ffi::OsString, Names) {
    let names = Names::default();
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner
        .spawn(Scripted {
            old,
            open: false,
            closed: 0,
            last: None,
            names: names.clone(),
        })
        .unwrap();
    (serving, dir, names)
}

/// One step's outcome as the drivers print it: "STEP CLASS | MESSAGE" or "STEP ok ...".
fn line(step: &str, outcome: Result<Option<RegionCounters>, Error>) -> String {
    match outcome {
        Ok(None) => format!("{step} ok"),
        Ok(Some(c)) => format!("{step} ok {}", counters_text(&c)),
        Err(
            e @ Error::Rejected {
                command: "SetVersion",
                ..
            },
        ) => format!("{step} version | {e}"),
        Err(e @ Error::Rejected { .. }) => format!("{step} rejected | {e}"),
        Err(e @ Error::FrameTooLarge { .. }) => format!("{step} invalid | {e}"),
        Err(e) => format!("{step} runner | {e}"),
    }
}

fn region(client: &mut FifoClient) -> Result<Option<RegionCounters>, Error> {
    client.start_benchmark()?;
    client.stop_with_counters().map(Some)
}

fn none(r: Result<(), Error>) -> Result<Option<RegionCounters>, Error> {
    r.map(|()| None)
}

/// The steps through the Rust client.
fn rust_driver(dir: &Path, mode: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut client = FifoClient::connect(dir).unwrap();
    if mode == "newer" {
        let reply = client.send(&Cmd::SetVersion(3)).unwrap();
        let Reply::Err { message } = reply else {
            panic!("{reply:?}")
        };
        out.push(format!("version version | {message}"));
        return out;
    }
    out.push(line("version", none(client.set_version())));
    if mode == "old" {
        return out;
    }
    out.push(line(
        "name",
        none(client.current_benchmark("conformance/a")),
    ));
    out.push(line("region", region(&mut client)));
    out.push(line(
        "stop-without-start",
        client.stop_with_counters().map(Some),
    ));
    client.start_benchmark().unwrap();
    out.push(line("start-twice", none(client.start_benchmark())));
    out.push(line(
        "start-twice-stop",
        client.stop_with_counters().map(Some),
    ));
    out.push(line(
        "uri-newline",
        none(client.current_benchmark("bad\nuri")),
    ));
    out.push(line(
        "uri-too-long",
        none(client.current_benchmark(&"u".repeat(4097))),
    ));
    out.push(line(
        "uri-1mib",
        none(client.current_benchmark(&"m".repeat(1 << 20))),
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("control.fifo"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"\xff\xff\xff\xffgarbage"))
        .unwrap();
    out.push(line(
        "garbage",
        none(client.current_benchmark("conformance/after-garbage")),
    ));
    out.push(line("region-after-garbage", region(&mut client)));
    out.push(line(
        "name-region",
        none(client.name_region(2, "conformance/renamed")),
    ));
    out.push(line(
        "name-missing-region",
        none(client.name_region(99, "x")),
    ));

    // The child tells its line through a pipe (this process has other threads; the
    // child touches nothing they may hold but the allocator, which is fork-safe).
    let mut fds = [0; 2];
    // SAFETY: pipe fills two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child uses the client and the pipe only, and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let text = match client.current_benchmark("conformance/child") {
            Ok(()) => line("fork-child", region(&mut client)),
            Err(e) => format!("fork-child error | {e}"),
        };
        // SAFETY: writes a buffer of ours into our pipe, then exits.
        unsafe {
            libc::write(fds[1], text.as_ptr().cast(), text.len());
            libc::_exit(0);
        }
    }
    // SAFETY: our write end, closed once; the read end becomes a File.
    unsafe { libc::close(fds[1]) };
    let mut child_line = String::new();
    // SAFETY: fds[0] is ours and owned by the File from here on.
    unsafe { std::fs::File::from_raw_fd(fds[0]) }
        .read_to_string(&mut child_line)
        .unwrap();
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    out.push(child_line);
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    out.push(format!("fork {}", if ok { "ok" } else { "child-failed" }));
    out.push(line(
        "name-parent",
        none(client.current_benchmark("conformance/a")),
    ));
    out.push(line("region-after-fork", region(&mut client)));
    out
}

/// A driver program's lines, run with `MEMTRACK_FIFO_DIR` = `dir`.
fn program_driver(mut command: Command, dir: &std::ffi::OsStr) -> Vec<String> {
    let out = command.env("MEMTRACK_FIFO_DIR", dir).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().map(str::to_owned).collect()
}

/// The expected answer to each step: (step, class, what its message or counters hold).
/// `local`: the C library refuses these itself, before the runner (MEMTRACK_ERR_STATE),
/// where the other clients send them and get the runner's refusal.
fn expected(c_library: bool) -> Vec<(String, String, String)> {
    let refused_locally = |runner_message: &str, c_message: &str| {
        if c_library {
            ("state".to_owned(), c_message.to_owned())
        } else {
            ("rejected".to_owned(), runner_message.to_owned())
        }
    };
    let ok = |s: &str| (s.to_owned(), "ok".to_owned(), String::new());
    let counted = |s: &str, k: u64| (s.to_owned(), "ok".to_owned(), counters_text(&counters(k)));
    let with = |s: &str, (class, message): (String, String)| (s.to_owned(), class, message);
    vec![
        ok("version"),
        ok("name"),
        counted("region", 0),
        with(
            "stop-without-start",
            refused_locally(
                "StopBenchmark without a preceding StartBenchmark",
                "memtrack_region_stop: no region is open (memtrack_region_start first)",
            ),
        ),
        with(
            "start-twice",
            refused_locally(
                "StartBenchmark while a measurement started at ",
                "memtrack_region_start: this thread's region is already open",
            ),
        ),
        counted("start-twice-stop", 1),
        with(
            "uri-newline",
            (
                "rejected".into(),
                "the benchmark uri \"bad\\nuri\" holds a control character ('\\n' at byte 3); \
                 a uri is one line of text"
                    .into(),
            ),
        ),
        with(
            "uri-too-long",
            (
                "rejected".into(),
                "the benchmark uri is 4097 bytes long, more than the limit of 4096 bytes".into(),
            ),
        ),
        with(
            "uri-1mib",
            (
                "invalid".into(),
                "frame body of 1048611 bytes exceeds the limit of 1048576 bytes".into(),
            ),
        ),
        ok("garbage"),
        counted("region-after-garbage", 2),
        ok("name-region"),
        with(
            "name-missing-region",
            ("rejected".into(), "has no closed region 99".into()),
        ),
        counted("fork-child", 3),
        ok("fork"),
        ok("name-parent"),
        counted("region-after-fork", 4),
    ]
}

/// Checks `lines` against `expected`: class exactly, message or counters contained
/// (counters exactly).
fn check(client: &str, lines: &[String], expected: &[(String, String, String)]) {
    let steps: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
    let want: Vec<&str> = expected.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(steps, want, "{client}: {lines:#?}");
    for (got, (step, class, detail)) in lines.iter().zip(expected) {
        let rest = &got[step.len() + 1..];
        let (got_class, got_detail) = match rest.split_once(' ') {
            Some((c, d)) => (c, d.trim_start_matches("| ")),
            None => (rest, ""),
        };
        assert_eq!(got_class, class, "{client}: {got}");
        if class == "ok" {
            assert_eq!(got_detail, detail, "{client}: {got}");
        } else {
            assert!(
                got_detail.contains(detail.as_str()),
                "{client}: {got}\nwanted: {detail}"
            );
        }
    }
}

/// What the runner recorded for a full run of the steps, the same for every client.
fn check_record(client: &str, result: &MarkerResult, names: &Names) {
    let uris: Vec<&str> = result.benchmarks.iter().map(|b| b.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "conformance/a",
            "conformance/after-garbage",
            "conformance/child",
            "conformance/a"
        ],
        "{client}"
    );
    assert_eq!(result.protocol_version, Some(2), "{client}");
    assert_eq!(result.measurements.len(), 5, "{client}");
    assert!(
        result.measurements.iter().all(|w| w.stop_ns.is_some()),
        "{client}"
    );
    let names = names.lock().unwrap();
    assert_eq!(names.len(), 1, "{client}: {names:?}");
    assert_eq!(
        (names[0].1, names[0].2.as_str()),
        (2, "conformance/renamed"),
        "{client}"
    );
}

fn python_driver() -> Command {
    let mut command = Command::new(common::pytest_venv());
    command
        .arg(common::repo().join("integrations/python/pytest-memtrack/tests/protocol_driver.py"));
    command
}

fn c_driver(prefix: &common::Prefix, work: &Path) -> Command {
    let exe = work.join("protocol_driver");
    prefix.compile(
        "cc",
        &common::repo().join("integrations/memtrack-c/tests/c/protocol_driver.c"),
        &exe,
        &["-std=c11", "-D_GNU_SOURCE"],
        &["memtrack"],
    );
    Command::new(exe)
}

#[test]
fn every_client_gets_the_same_answers() {
    let prefix = common::Prefix::install();
    let work = tempfile::tempdir().unwrap();
    let c_exe = c_driver(&prefix, work.path()).get_program().to_owned();
    for client in ["rust", "c", "python"] {
        let (serving, dir, names) = scripted(false);
        let lines = match client {
            "rust" => rust_driver(Path::new(&dir), ""),
            "c" => program_driver(Command::new(&c_exe), &dir),
            _ => program_driver(python_driver(), &dir),
        };
        check(client, &lines, &expected(client == "c"));
        let (result, _) = serving.stop().unwrap();
        check_record(client, &result, &names);
    }
}

#[test]
fn an_older_runner_gives_every_client_a_clear_version_error() {
    let prefix = common::Prefix::install();
    let work = tempfile::tempdir().unwrap();
    let c_exe = c_driver(&prefix, work.path()).get_program().to_owned();
    for client in ["rust", "c", "python"] {
        let (serving, dir, _) = scripted(true);
        let lines = match client {
            "rust" => rust_driver(Path::new(&dir), "old"),
            "c" => program_driver(
                {
                    let mut c = Command::new(&c_exe);
                    c.arg("old");
                    c
                },
                &dir,
            ),
            _ => program_driver(
                {
                    let mut c = python_driver();
                    c.arg("old");
                    c
                },
                &dir,
            ),
        };
        assert_eq!(lines.len(), 1, "{client}: {lines:?}");
        let line = &lines[0];
        assert!(line.starts_with("version version | "), "{client}: {line}");
        assert!(
            line.contains(
                "protocol version 2 is not supported; this runner supports versions 1..=1"
            ),
            "{client}: {line}"
        );
        let (result, _) = serving.stop().unwrap();
        assert_eq!(result.protocol_version, None, "{client}");
    }
}

/// A client announcing a version newer than the runner's gets the supported range (the
/// C library announces its own version only, so it has no such client).
#[test]
fn a_newer_client_is_told_the_versions_the_runner_speaks() {
    for client in ["rust", "python"] {
        let (serving, dir, _) = scripted(false);
        let lines = match client {
            "rust" => rust_driver(Path::new(&dir), "newer"),
            _ => program_driver(
                {
                    let mut c = python_driver();
                    c.arg("newer");
                    c
                },
                &dir,
            ),
        };
        assert_eq!(lines.len(), 1, "{client}: {lines:?}");
        assert!(
            lines[0].starts_with("version version | ")
                && lines[0].contains(
                    "protocol version 3 is not supported; this runner supports versions 1..=2"
                ),
            "{client}: {lines:?}"
        );
        serving.stop().unwrap();
    }
}

/// The Python client frames commands byte for byte as the Rust crate does.
#[test]
fn python_frames_commands_as_rust_does() {
    let script = r#"
from pytest_memtrack.protocol import encode_frame
for cmd in [
    {"SetVersion": 2},
    "StartBenchmark",
    "StopWithCounters",
    {"Sync": {"nonce": 2**64 - 1}},
    {"CurrentBenchmark": {"pid": 7, "uri": "größe/∑"}},
    {"NameRegion": {"pid": 1, "region": 300, "uri": "x"}},
    {"SetIntegration": {"name": "n", "version": "v"}},
]:
    print(encode_frame(cmd).hex())
"#;
    let out = Command::new(common::pytest_venv())
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rust: Vec<String> = [
        Cmd::SetVersion(2),
        Cmd::StartBenchmark,
        Cmd::StopWithCounters,
        Cmd::Sync { nonce: u64::MAX },
        Cmd::CurrentBenchmark {
            pid: 7,
            uri: "größe/∑".into(),
        },
        Cmd::NameRegion {
            pid: 1,
            region: 300,
            uri: "x".into(),
        },
        Cmd::SetIntegration {
            name: "n".into(),
            version: "v".into(),
        },
    ]
    .iter()
    .map(|c| {
        fifo_protocol::encode_frame(c)
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    })
    .collect();
    let python: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(python, rust);
}
