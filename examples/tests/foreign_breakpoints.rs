//! Another tracer's breakpoints are named (issue 35): with a uprobe on `malloc` that is
//! not memtrack's (a perf-event uprobe this test opens on the benchmark process, as a
//! tracer that probes every process would put one there), criterion and divan in-process say beside their timings that the timings are
//! not honest, naming the breakpoint, and the probe watch sees every timed call probed.
//! The timing tests (timing_unprobed.rs) tell this cause apart from a probe memtrack
//! left attached.

use std::{
    os::fd::{FromRawFd, OwnedFd},
    process::{Command, Stdio},
};

mod common;
use common::text;

const DIVAN: &str = env!("CARGO_BIN_EXE_probe_watch_divan");
const CRITERION: &str = env!("CARGO_BIN_EXE_probe_watch_criterion");

/// `malloc` of this process: the C library's path and the function's offset in it.
fn malloc_in_file() -> (String, u64) {
    // SAFETY: dlsym with a NUL-terminated name.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) } as u64;
    assert_ne!(address, 0);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = fields[0].split_once('-').unwrap();
        if (hex(start)..hex(end)).contains(&address) {
            return (fields[5].to_owned(), address - hex(start) + hex(fields[2]));
        }
    }
    panic!("malloc at {address:#x} is in no mapping:\n{maps}");
}

/// linux/perf_event.h's PERF_FLAG_FD_CLOEXEC (the libc crate does not define it).
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// A uprobe on `path` at `offset` in process `pid` (perf_event_open, as another tracer
/// opens one; not memtrack's): the kernel puts its breakpoint into that process's memory
/// wherever it maps the file, also after an exec. Closed (the breakpoint removed) when
/// dropped.
fn foreign_uprobe(pid: libc::pid_t, path: &str, offset: u64) -> OwnedFd {
    let kind: u32 = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let path = std::ffi::CString::new(path).unwrap();
    // struct perf_event_attr (linux/perf_event.h), 128 bytes (PERF_ATTR_SIZE_VER7): type
    // at 0, size at 4, config at 8 (0: an entry probe), the flag bits at 40 (all clear:
    // enabled at once, not inherited), uprobe_path at 56 and probe_offset at 64.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&kind.to_ne_bytes());
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    attr[56..64].copy_from_slice(&(path.as_ptr() as u64).to_ne_bytes());
    attr[64..72].copy_from_slice(&offset.to_ne_bytes());
    // SAFETY: a perf_event_attr of the size it says (its path read during the call);
    // process `pid`, any CPU, no group, close-on-exec.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            pid,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    assert!(
        fd >= 0,
        "perf_event_open of a uprobe: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a new file descriptor of ours.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Runs `bin` in-process (no runner) with `args`, with another tracer's uprobe on
/// `malloc` in it from its exec on when `foreign`: (stdout, stderr). For the probe, a
/// shell stops itself (SIGSTOP) before it execs `bin` in the same process, until the
/// probe is open.
fn run(bin: &str, args: &[&str], foreign: bool) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = if foreign {
        let mut sh = Command::new("sh");
        sh.args(["-c", "kill -STOP $$; exec \"$0\" \"$@\"", bin]);
        sh
    } else {
        Command::new(bin)
    };
    command
        .args(args)
        .env("CRITERION_HOME", dir.path().join("criterion"))
        .env("MEMTRACK_OUTPUT_DIR", dir.path().join("memtrack"))
        .env_remove("MEMTRACK_FIFO_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap_or_else(|e| panic!("run {bin}: {e}"));
    let pid = child.id() as libc::pid_t;
    let _probe = foreign.then(|| {
        let mut status = 0;
        // SAFETY: waits for our own child to stop (not reaped: WUNTRACED).
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
        assert!(
            waited == pid && libc::WIFSTOPPED(status),
            "{bin} did not stop"
        );
        let (path, offset) = malloc_in_file();
        let probe = foreign_uprobe(pid, &path, offset);
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        probe
    });
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// A harness's binary, its name, its arguments, and the uri of a watch's benchmark.
type Case<'a> = (&'a str, &'a str, &'a [&'a str], &'a dyn Fn(&str) -> String);

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn another_tracers_breakpoints_are_named_beside_the_timings() {
    let (libc_path, _) = malloc_in_file();
    // (binary, harness, its arguments, the uri of a watch's benchmark)
    let criterion_uri = |name: &str| name.to_owned();
    let divan_uri = |name: &str| format!("probe_watch_divan::{name}_watched");
    let cases: [Case; 2] = [
        (
            CRITERION,
            "criterion",
            &[
                "--bench",
                "--warm-up-time",
                "0.1",
                "--measurement-time",
                "0.2",
                "--sample-size",
                "10",
            ],
            &criterion_uri,
        ),
        (
            DIVAN,
            "divan",
            &["--bench", "--sample-count", "3", "--sample-size", "10"],
            &divan_uri,
        ),
    ];
    for (bin, harness, args, uri) in cases {
        let (stdout, stderr) = run(bin, args, true);
        for name in ["three_blocks", "thread_4k"] {
            let uri = uri(name);
            let warning = format!(
                "memtrack {uri}: timings not honest: the allocator holds breakpoints that \
                 are not memtrack's (malloc+0x0 in {libc_path}): another tracer's uprobes \
                 or a debugger's; each call traps into the kernel while {harness} times"
            );
            assert_eq!(
                stderr.lines().filter(|l| *l == warning).count(),
                1,
                "{warning:?} once in:\n{stderr}"
            );
            // Every timed call ran with the breakpoint: P of C with P == C.
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{name}: probed ")))
                .unwrap_or_else(|| panic!("no watch line for {name}:\n{stdout}"));
            let (probed, calls) = line
                .split_once(": probed ")
                .and_then(|(_, r)| r.strip_suffix(" calls"))
                .and_then(|r| r.split_once(" of "))
                .unwrap();
            assert_eq!(probed, calls, "{line}");
        }
    }
    // Without it: not a word.
    let (_, stderr) = run(
        DIVAN,
        &["--bench", "--sample-count", "3", "--sample-size", "10"],
        false,
    );
    assert!(!stderr.contains("timings not honest"), "{stderr}");
}
