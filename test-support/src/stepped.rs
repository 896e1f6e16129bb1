//! The programs of tests/programs, built once per test binary, and the driver of those
//! that stop at each step of their work for the test to act in between.
//!
//! The step protocol (the programs' side is in each program): at each step the program
//! writes one byte to fd 3 and waits for one on fd 4 before it goes on; its exit ends
//! the steps. It prints `name=value` pairs on stdout.

use std::{
    collections::HashMap,
    io::{Read, Write},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    sync::{LazyLock, Mutex},
};

use memtrack::{CommandSpec, ExitStatus, ProcessTracker, TrackerBuilder};

use crate::{compile_c, repo_dir, scratch_dir};

/// tests/programs/`name`.c, compiled with the fixtures' flags ([`compile_c`]) once per
/// test binary, into a [`scratch_dir`] removed when it exits.
pub fn program(name: &str) -> PathBuf {
    static BUILT: LazyLock<Mutex<HashMap<String, PathBuf>>> = LazyLock::new(Mutex::default);
    let mut built = BUILT.lock().expect("the built programs");
    built
        .entry(name.to_owned())
        .or_insert_with(|| {
            let dir = scratch_dir(&format!("memtrack-{name}-"));
            compile_c(
                &repo_dir().join("tests/programs").join(format!("{name}.c")),
                &dir,
                &[],
            )
        })
        .clone()
}

/// A stepped program's run: its tracker (waited for), pid, steps, exit and stdout.
pub struct Stepped {
    /// The tracker the program ran under, waited for (its results not yet collected).
    pub tracker: ProcessTracker,
    /// The program's pid.
    pub pid: u32,
    /// The steps it made.
    pub steps: u32,
    /// How it ended.
    pub status: ExitStatus,
    /// What it printed on stdout.
    pub stdout: String,
}

impl Stepped {
    /// The number the program printed as `name=N`; panics when there is none.
    pub fn field(&self, name: &str) -> u64 {
        self.stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.stdout))
            .parse()
            .unwrap()
    }
}

/// A new pipe, both ends close-on-exec: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: a plain pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are new and ours.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Runs the stepped program `program` (with what `command` adds to its command: its
/// arguments, environment) under a tracker from `builder`, and calls `at_step` with
/// the tracker, the program's pid and the step's number (from 1) at each step, before
/// the program goes on.
pub fn run_stepped(
    program: &Path,
    command: impl FnOnce(CommandSpec) -> CommandSpec,
    builder: TrackerBuilder,
    mut at_step: impl FnMut(&ProcessTracker, u32, u32),
) -> Stepped {
    let (steps_read, steps_write) = pipe();
    let (go_read, go_write) = pipe();
    let out_dir = tempfile::tempdir().unwrap();
    let out_path = out_dir.path().join("out");
    let out = std::fs::File::create(&out_path).unwrap();
    let spec = command(CommandSpec::new(program))
        .fd(1, out.as_raw_fd())
        .fd(3, steps_write.as_raw_fd())
        .fd(4, go_read.as_raw_fd());
    let tracker = builder.spawn(spec).unwrap();
    let pid = tracker.pid();
    // Only the program holds these ends now: its exit ends the steps.
    drop((steps_write, go_read));
    let mut steps_in = std::fs::File::from(steps_read);
    let mut go = std::fs::File::from(go_write);
    let mut byte = [0u8; 1];
    let mut steps = 0;
    while steps_in.read(&mut byte).unwrap() == 1 {
        steps += 1;
        at_step(&tracker, pid, steps);
        go.write_all(b"g").unwrap();
    }
    let status = tracker.wait().unwrap();
    let stdout = std::fs::read_to_string(&out_path).unwrap();
    Stepped {
        tracker,
        pid,
        steps,
        status,
        stdout,
    }
}
