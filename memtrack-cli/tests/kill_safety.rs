//! Killing memtrack never harms the tracked program (issue 11): `memtrack run` is
//! SIGKILLed at 24 moments of a program that dlopens and forks
//! (tests/programs/dlopen_fork.c), and the program, its children and what it does after
//! memtrack died (more dlopens, a fork) must all succeed, every time; no uprobe may leak
//! in the kernel before a process exited (after that, a known limit: said on stderr). Also
//! `python3 -c 'import _ctypes'` after memtrack was killed.
//!
//! The moments are exact, not timed: the program reports phases on fd 3 and waits for a
//! byte on fd 4 after each (end of file: go on freely), and memtrack's follower holds for
//! good at a chosen ptrace stop when `MEMTRACK_TEST_HOLD` asks it to (memtrack-core's
//! hold.rs), saying so on stderr. The test kills memtrack right there, waits until it is
//! dead, then lets the program run to its end, and takes the program's exit status as its
//! subreaper (memtrack's orphans become the test's children).

use std::{
    ffi::OsString,
    io::{BufRead, BufReader, Write},
    os::fd::{AsRawFd, OwnedFd},
    os::unix::process::CommandExt,
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
};

use memtrack_test_support::{compile_c, repo_dir};

/// Where memtrack is killed.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// When the follower holds at `MEMTRACK_TEST_HOLD=<this>` (a ptrace stop, or before
    /// the command's exec).
    Hold(&'static str),
    /// When the program reports this phase (it waits on its pipe meanwhile).
    Phase(&'static str),
}

use Moment::{Hold, Phase};

/// In the order they happen in dlopen_fork.c. Loader hook stops (glibc: one per new
/// image and per dlopen of a new library, where the loader says its objects are
/// consistent; its "about to add" call stops nothing): 1 the program's startup, 2 its
/// dlopen of libm, 3 child 1's dlopen, 4 the program's second dlopen, 5 the startup of
/// child 2's exec'd image, 6 its dlopen.
const MOMENTS: [Moment; 22] = [
    Hold("spawn"),  // forked, waiting before its exec, not traced yet
    Hold("seized"), // traced, not let go to its exec yet
    Hold("exec:1"), // at its exec stop, not probed
    Hold("hook:1"), // in the startup's loader stop
    Phase("main"),
    Hold("hook:2"),   // in the stop of its first dlopen
    Phase("dlopen1"), // between its dlopens
    Hold("fork:1"),   // child 1 in its fork stop
    Phase("child1"),
    Hold("hook:3"), // child 1's dlopen stop
    Phase("child1-dlopen"),
    Hold("exit:1"),         // child 1 has exited
    Phase("child1-exited"), // ... and the program knows it (its result is on disk)
    Hold("hook:4"),         // the program's second dlopen
    Phase("dlopen2"),
    Hold("fork:2"), // child 2 in its fork stop
    Hold("exec:2"), // child 2 at its exec stop
    Hold("hook:5"), // the exec'd image's startup
    Phase("exec-child"),
    Hold("hook:6"), // the exec'd image's dlopen
    Phase("child2-exited"),
    Phase("done"),
];

/// The index in [`MOMENTS`] of the first moment after a tracked process exited (child 1):
/// from then on memtrack may be killed while it closes that process's links.
const FIRST_EXIT: usize = 11;

/// What the readers of the program's phases and of memtrack's stderr report.
enum Event {
    Phase { name: String, pid: i32 },
    PhasesEnded,
    Stderr(String),
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe2")
}

/// Held by each test of this file for its whole run. The kernel log is the machine's, so
/// one test's count of "leaking uprobe" lines must not include another's: a memtrack
/// killed while it closes the links of a process that exited (the python test's pyenv
/// shim runs a dozen short processes before the interpreter, and a known limit, below)
/// made the other test see 82 lines it did not cause (a CI run on b8291a9).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`ONE_AT_A_TIME`] (a test that failed while holding it does not stop the other).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Lines of the kernel log that report a leaked uprobe.
fn leaked_uprobe_lines() -> usize {
    let out = Command::new("dmesg").output().expect("run dmesg");
    assert!(out.status.success(), "dmesg failed (as root it should not)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("leaking uprobe"))
        .count()
}

/// Makes this test process the reaper of its orphaned descendants, so the tracked
/// program's exit status can be taken once memtrack (its parent) is dead.
fn become_subreaper() {
    // SAFETY: a prctl without pointers.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(r, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
}

/// What one killed run showed.
struct Killed {
    /// The program's wait status.
    status: i32,
    /// memtrack's and the program's stderr.
    stderr: Vec<String>,
}

/// Runs `command` under `memtrack run -o out`, kills memtrack at `moment`, lets the
/// program finish and returns its exit status. Panics if the moment never came.
fn run_and_kill(command: &[OsString], moment: Moment, out: &Path) -> Killed {
    let (phase_read, phase_write) = pipe();
    let (go_read, go_write) = pipe();
    let mut memtrack = Command::new(env!("CARGO_BIN_EXE_memtrack"));
    memtrack
        .arg("run")
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Hold(point) = moment {
        memtrack.env("MEMTRACK_TEST_HOLD", point);
    }
    let (phase_fd, go_fd) = (phase_write.as_raw_fd(), go_read.as_raw_fd());
    // SAFETY: dup2 is async-signal-safe; it makes fds 3 and 4 of memtrack (and so of the
    // command it starts) the ends of the pipes, without close-on-exec.
    unsafe {
        memtrack.pre_exec(move || {
            if libc::dup2(phase_fd, 3) < 0 || libc::dup2(go_fd, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut memtrack = memtrack.spawn().expect("start memtrack");
    drop((phase_write, go_read));

    let (tx, events) = mpsc::channel();
    let stderr = memtrack.stderr.take().unwrap();
    let stderr_tx = tx.clone();
    let stderr_reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = stderr_tx.send(Event::Stderr(line));
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(std::fs::File::from(phase_read))
            .lines()
            .map_while(Result::ok)
        {
            let (name, pid) = line.rsplit_once(' ').expect("a phase line is 'NAME PID'");
            let _ = tx.send(Event::Phase {
                name: name.to_string(),
                pid: pid.parse().expect("a pid"),
            });
        }
        let _ = tx.send(Event::PhasesEnded);
    });

    let mut go = Some(std::fs::File::from(go_write));
    let mut root: Option<i32> = None;
    let mut child1: Option<i32> = None;
    let mut stderr_lines = Vec::new();
    let mut killed = false;
    for event in &events {
        match event {
            Event::Phase { name, pid } => {
                match name.as_str() {
                    "main" => root = Some(pid),
                    "child1" => child1 = Some(pid),
                    _ => {}
                }
                if killed {
                    continue;
                }
                if matches!(moment, Phase(p) if p == name) {
                    if name == "child1-exited" {
                        // The result of a process that exited is on disk before memtrack
                        // dies (written as it exited, by memtrack's writer thread).
                        let pid = child1.expect("child 1 reported its pid");
                        let file = out.join(format!("{pid}.MemtrackResult.msgpack"));
                        // A liveness bound, not a speed check: the write takes
                        // milliseconds; without it a regression would hang the test.
                        let waited = std::time::Instant::now();
                        while !file.exists() {
                            assert!(
                                waited.elapsed() < std::time::Duration::from_secs(60),
                                "memtrack did not write the result of exited process {pid}"
                            );
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                    }
                    kill(&mut memtrack, &mut go);
                    killed = true;
                } else if let Some(go) = go.as_mut() {
                    go.write_all(&[1]).expect("let the program go on");
                }
            }
            Event::Stderr(line) => {
                if !killed
                    && let Hold(point) = moment
                    && let Some(held) = line.strip_prefix("memtrack: test hold: ")
                {
                    let (name, n) = point.split_once(':').unwrap_or((point, "1"));
                    assert!(
                        held.starts_with(&format!("{name} {n} ")),
                        "held at {held:?}, asked {point}"
                    );
                    kill(&mut memtrack, &mut go);
                    killed = true;
                }
                stderr_lines.push(line);
            }
            Event::PhasesEnded => break,
        }
    }
    // Every writer of the phases is gone: memtrack and the whole program.
    // Reaped already when killed (wait() then returns the status it took).
    let _ = memtrack.wait();
    let _ = stderr_reader.join();
    // Lines that came after the phases ended.
    stderr_lines.extend(events.try_iter().filter_map(|e| match e {
        Event::Stderr(line) => Some(line),
        _ => None,
    }));
    assert!(
        killed,
        "{moment:?} never came; stderr:\n{}",
        stderr_lines.join("\n")
    );
    let root = root.unwrap_or_else(|| {
        panic!(
            "the program never reported its main phase; stderr:\n{}",
            stderr_lines.join("\n")
        )
    });
    let mut status = 0;
    // SAFETY: waiting for a process that is ours (as subreaper) by now.
    let waited = unsafe { libc::waitpid(root, &mut status, 0) };
    assert_eq!(
        waited,
        root,
        "waitpid({root}): {}",
        std::io::Error::last_os_error()
    );
    Killed {
        status,
        stderr: stderr_lines,
    }
}

/// SIGKILLs memtrack, waits until it is dead, and closes the program's go pipe (from
/// then on it runs freely).
fn kill(memtrack: &mut std::process::Child, go: &mut Option<std::fs::File>) {
    memtrack.kill().expect("SIGKILL memtrack");
    let status = memtrack.wait().expect("wait for memtrack");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "memtrack ended otherwise: {status}"
    );
    drop(go.take());
}

fn assert_exited_zero(what: &str, killed: &Killed) {
    let status = killed.status;
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what}: the program ended with wait status {status:#x} (exit {}, signal {}); \
         stderr:\n{}",
        libc::WEXITSTATUS(status),
        if libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            0
        },
        killed.stderr.join("\n")
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn sigkill_of_memtrack_at_any_moment_never_harms_the_program() {
    let _alone = one_at_a_time();
    become_subreaper();
    let build = tempfile::tempdir().unwrap();
    let program = compile_c(
        &repo_dir().join("tests/programs/dlopen_fork.c"),
        build.path(),
        &[],
    );
    for (index, moment) in MOMENTS.into_iter().enumerate() {
        let leaked_before = leaked_uprobe_lines();
        let out = tempfile::tempdir().unwrap();
        let killed = run_and_kill(&[program.clone().into()], moment, out.path());
        assert_exited_zero(&format!("killed at {moment:?}"), &killed);
        let leaked = leaked_uprobe_lines() - leaked_before;
        if index < FIRST_EXIT {
            assert_eq!(
                leaked, 0,
                "killed at {moment:?}: the kernel logged {leaked} 'leaking uprobe' line(s)"
            );
        } else if leaked > 0 {
            // Known limit (docs/ARCHITECTURE.md): after a process exits, memtrack's
            // detach threads close its links, and a SIGKILL during the kernel's
            // unregistering makes it leak them. Said, not asserted.
            eprintln!("killed at {moment:?}: the kernel logged {leaked} 'leaking uprobe' line(s)");
        }
        if let Phase("child1-exited") = moment {
            let results = memtrack::MemtrackResult::read_dir(out.path()).unwrap();
            let child1: Vec<_> = results
                .iter()
                .filter(|r| r.process.exit_code == Some(0))
                .collect();
            assert_eq!(
                child1.len(),
                1,
                "exactly the exited child 1 has a result: {results:?}"
            );
            assert_eq!(
                child1[0].process.allocator,
                memtrack::AllocatorStatus::Probed
            );
        }
    }
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn python_imports_ctypes_after_memtrack_was_killed() {
    // The interpreter itself, not a wrapper on PATH (pyenv's shim is a bash script
    // that runs a dozen processes first): memtrack is killed in its main.
    let interpreter = Command::new("python3")
        .args(["-c", "import _ctypes, sys; print(sys.executable)"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|path| !path.is_empty());
    let Some(interpreter) = interpreter else {
        eprintln!(
            "SKIPPED python_imports_ctypes_after_memtrack_was_killed: no python3 with _ctypes"
        );
        return;
    };
    let _alone = one_at_a_time();
    become_subreaper();
    let leaked_before = leaked_uprobe_lines();
    let out = tempfile::tempdir().unwrap();
    let script =
        "import os; os.write(3, b'main %d\\n' % os.getpid()); os.read(4, 1); import _ctypes";
    let killed = run_and_kill(
        &[interpreter.into(), "-c".into(), script.into()],
        Phase("main"),
        out.path(),
    );
    assert_exited_zero("python3 -c 'import _ctypes'", &killed);
    // Killed before any process exited: no link was being closed.
    let leaked = leaked_uprobe_lines() - leaked_before;
    assert_eq!(
        leaked, 0,
        "the kernel logged {leaked} 'leaking uprobe' line(s)"
    );
}
