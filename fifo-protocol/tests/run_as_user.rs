//! A root runner hands the FIFO directory to the user it runs the command as (memtrack
//! started through `sudo` runs the command as `SUDO_UID`/`SUDO_GID`), and that user's
//! process connects with `FifoClient::from_env`.
//!
//! The test that needs root (changing owners, running a process as user `nobody`) is
//! the one test of its kind in this binary, because it changes the process environment.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use fifo_protocol::{Error, FifoClient, FifoRunner, IntegrationMode, SharedHandling};

const NOBODY: u32 = 65534;

/// Set (to 1) in the child `fifo_directory_is_handed_to_the_commands_user` starts.
const CHILD_ENV: &str = "FIFO_PROTOCOL_TEST_CHILD";

/// Child half of `fifo_directory_is_handed_to_the_commands_user`: this test binary,
/// re-executed as user `nobody` with the runner's environment.
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

/// Handing the directory to oneself always works, root or not.
#[test]
fn the_fifo_directory_can_be_handed_to_its_own_user() {
    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    runner.set_owner(euid, egid).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    FifoClient::connect(&dir).unwrap().ping().unwrap();
    serving.stop().unwrap();
}

#[test]
#[ignore = "needs root (runs as user nobody): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn fifo_directory_is_handed_to_the_commands_user() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return child_as_nobody();
    }
    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!(euid, 0, "needs root: it hands the FIFOs to user nobody");

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
    // A copy nobody can execute (the build directory may be closed to other users).
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("run_as_user");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let status = std::process::Command::new(&bin)
        .args([
            "--include-ignored",
            "--exact",
            "fifo_directory_is_handed_to_the_commands_user",
            "--quiet",
        ])
        .env(name, &value)
        .env(CHILD_ENV, "1")
        .uid(NOBODY)
        .gid(NOBODY)
        .current_dir("/")
        .stdout(Stdio::null())
        .status();
    let (result, _) = serving.stop().unwrap();
    let status = status.unwrap();
    assert!(status.success(), "child as nobody failed: {status}");
    assert_eq!(result.benchmarks.len(), 1);
    assert_eq!(result.benchmarks[0].uri, "as_nobody");
    assert!(result.measurements[0].stop_ns.is_some());

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
