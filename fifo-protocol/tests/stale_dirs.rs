//! FIFO directories of runners that died (SIGKILL leaves them behind) are removed by the
//! next runner in the same place, and nothing else is: not a live runner's, not one whose
//! lock is held, not one holding anything but the two FIFOs, not what a link points to.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use fifo_protocol::{ACK_FIFO_NAME, CONTROL_FIFO_NAME, FifoClient, FifoRunner, IntegrationMode};

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "{}",
        path.display()
    );
}

/// A directory as a runner with pid `pid` leaves it: `memtrack-fifo-{pid}-{tag}` with
/// the two FIFOs.
fn leftover(base: &Path, pid: u32, tag: &str) -> PathBuf {
    with_fifos(base.join(format!("memtrack-fifo-{pid}-{tag}")))
}

/// Creates `dir` holding the two FIFOs.
fn with_fifos(dir: PathBuf) -> PathBuf {
    std::fs::create_dir(&dir).unwrap();
    mkfifo(&dir.join(CONTROL_FIFO_NAME));
    mkfifo(&dir.join(ACK_FIFO_NAME));
    dir
}

/// A pid no process has now: a child that was started and reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn only_directories_of_dead_runners_are_removed() {
    let base = tempfile::tempdir().unwrap();
    let dead = dead_pid();

    let stale = leftover(base.path(), dead, "stale1");
    // A root runner hands its directory to the user it runs the command as: root removes
    // such a leftover too.
    // SAFETY: geteuid has no preconditions.
    let handed_over = (unsafe { libc::geteuid() } == 0).then(|| {
        let dir = leftover(base.path(), dead, "nobody");
        for path in [
            dir.join(CONTROL_FIFO_NAME),
            dir.join(ACK_FIFO_NAME),
            dir.clone(),
        ] {
            std::os::unix::fs::lchown(&path, Some(65534), Some(65534)).unwrap();
        }
        dir
    });
    let alive = leftover(base.path(), std::process::id(), "alive1");
    let locked = leftover(base.path(), dead, "locked");
    // As a live runner in another pid namespace would hold it.
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(locked.join(CONTROL_FIFO_NAME))
        .unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let extra = leftover(base.path(), dead, "extra1");
    std::fs::write(extra.join("notes.txt"), b"keep me").unwrap();
    // A link named like a leftover, to a directory that looks like one.
    let target = with_fifos(base.path().join("real-target"));
    let link = base.path().join(format!("memtrack-fifo-{dead}-link01"));
    symlink(&target, &link).unwrap();
    // Names from before runners put their pid in them: nobody can tell whose they are.
    let unnamed = base.path().join("memtrack-fifo-Ab3dEf");
    std::fs::create_dir(&unnamed).unwrap();
    mkfifo(&unnamed.join(CONTROL_FIFO_NAME));

    let runner = FifoRunner::new_in(IntegrationMode::Memory, base.path()).unwrap();

    assert!(
        !stale.exists(),
        "the dead runner's directory is still there"
    );
    if let Some(dir) = &handed_over {
        assert!(
            !dir.exists(),
            "the directory handed to nobody is still there"
        );
    }
    for kept in [&alive, &locked, &extra, &target, &unnamed] {
        assert!(kept.is_dir(), "{} was removed", kept.display());
    }
    assert!(extra.join(CONTROL_FIFO_NAME).exists());
    assert_eq!(std::fs::read(extra.join("notes.txt")).unwrap(), b"keep me");
    assert!(target.join(CONTROL_FIFO_NAME).exists());
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // The new runner's own directory carries its pid, is locked, and is not taken by
    // another runner starting next to it.
    let name = runner
        .dir()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        name.starts_with(&format!("memtrack-fifo-{}-", std::process::id())),
        "{name}"
    );
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(fifo_protocol::SharedHandling).unwrap();
    let second = FifoRunner::new_in(IntegrationMode::Memory, base.path()).unwrap();
    FifoClient::connect(&dir).unwrap().ping().unwrap();
    drop(second);
    serving.stop().unwrap();
    drop(holder);
}
