//! A root runner hands the FIFO directory to the user it runs the command as (memtrack
//! started through `sudo` runs the command as `SUDO_UID`/`SUDO_GID`), and that user's
//! process connects with `FifoClient::from_env`.
//!
//! One test in its binary, because it changes the process environment; the parts that
//! need root (changing owners, running a process as user `nobody`) are skipped otherwise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use fifo_protocol::{Error, FifoClient, FifoRunner, IntegrationMode, SharedHandling};

const NOBODY: u32 = 65534;

/// Child half of `fifo_directory_is_handed_to_the_commands_user`: this test binary,
/// re-executed as user `nobody` with the runner's environment.
#[test]
#[ignore = "run as user nobody by fifo_directory_is_handed_to_the_commands_user"]
fn child_as_nobody() {
    // SAFETY: geteuid/getegid have no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, NOBODY);
    assert_eq!(unsafe { libc::getegid() }, NOBODY);
    let mut client = FifoClient::from_env()
        .expect("MEMTRACK_FIFO_DIR must be set by the parent test")
        .expect("user nobody connects to the runner");
    client.set_version().unwrap();
    client.current_benchmark("as_nobody").unwrap();
    client.start_benchmark().unwrap();
    client.stop_benchmark().unwrap();
}

fn owner(path: &Path) -> (u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.uid(), meta.gid())
}

#[test]
fn fifo_directory_is_handed_to_the_commands_user() {
    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };

    // Handing the directory to oneself always works, root or not.
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    runner.set_owner(euid, egid).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    FifoClient::connect(&dir).unwrap().ping().unwrap();
    serving.stop().unwrap();

    if euid != 0 {
        println!("SKIPPED: not running as root, cannot hand the FIFOs to another user");
        return;
    }

    // Root's own runtime directory is closed to everyone else: `new` must not use it.
    let root_runtime = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root_runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // SAFETY (set_var/remove_var): the only test in this binary runs here, and no other
    // thread reads the environment meanwhile.
    unsafe { std::env::set_var("XDG_RUNTIME_DIR", root_runtime.path()) };
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    unsafe { std::env::remove_var("XDG_RUNTIME_DIR") };
    assert!(
        !runner.dir().starts_with(root_runtime.path()),
        "a root runner put its FIFOs in root's runtime directory {}",
        runner.dir().display()
    );

    runner.set_owner(NOBODY, NOBODY).unwrap();
    for path in [runner.dir(), runner.control_path(), runner.ack_path()] {
        assert_eq!(owner(path), (NOBODY, NOBODY), "{}", path.display());
    }
    assert_eq!(
        std::fs::metadata(runner.dir()).unwrap().mode() & 0o7777,
        0o700
    );

    // The command runs as nobody (like memtrack's `run_as`) and talks to the runner.
    let (name, value) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_as_nobody", "--quiet"])
        .env(name, &value)
        .uid(NOBODY)
        .gid(NOBODY)
        .current_dir("/")
        .stdout(Stdio::null())
        .status();
    let (result, _) = serving.stop().unwrap();
    match status {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            println!("SKIPPED: user nobody cannot execute this test binary: {e}");
        }
        status => {
            let status = status.unwrap();
            assert!(status.success(), "child as nobody failed: {status}");
            assert_eq!(result.benchmarks.len(), 1);
            assert_eq!(result.benchmarks[0].uri, "as_nobody");
            assert!(result.measurements[0].stop_ns.is_some());
        }
    }

    // A FIFO directory created where the user cannot go is refused by name, untouched.
    let runner = FifoRunner::new_in(IntegrationMode::Memory, root_runtime.path()).unwrap();
    match runner.set_owner(NOBODY, NOBODY) {
        Err(Error::UnreachableForUser {
            uid,
            dir,
            blocked_at,
        }) => {
            assert_eq!(uid, NOBODY);
            assert_eq!(dir, runner.dir());
            assert_eq!(blocked_at, root_runtime.path());
        }
        other => panic!("expected UnreachableForUser, got {other:?}"),
    }
    for path in [runner.dir(), runner.control_path(), runner.ack_path()] {
        assert_eq!(owner(path), (0, egid), "{}", path.display());
    }
    // Group access or a world-traversable mode is enough to let the user through.
    std::fs::set_permissions(root_runtime.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    runner.set_owner(NOBODY, NOBODY).unwrap();
}
