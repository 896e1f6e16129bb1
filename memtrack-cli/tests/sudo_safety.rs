//! Started through sudo, memtrack runs as root and the command as the invoking user, who
//! can write the results directory. Nothing that user plants there may make root write
//! anywhere else (issue 11): each test runs memtrack as root with SUDO_UID/SUDO_GID set
//! to user nobody (65534), a simulated sudo, and checks that a root-only canary is
//! untouched and that the results are where they belong, owned by nobody, mode 0600.

use std::{
    os::unix::fs::{MetadataExt, PermissionsExt, lchown, symlink},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use memtrack_test_support::is_root;

const NOBODY: u32 = 65534;

fn memtrack() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memtrack"));
    command
        .env("SUDO_UID", NOBODY.to_string())
        .env("SUDO_GID", NOBODY.to_string());
    command
}

/// Fails unless this test runs as root (it hands files to user nobody).
fn need_root() {
    assert!(is_root(), "needs root: it hands files to user nobody");
}

/// A root-only directory (0700) holding a root-only file (0600): what a planted link
/// points at. [`Canary::assert_untouched`] checks that neither changed.
struct Canary {
    dir: tempfile::TempDir,
}

const CANARY_TEXT: &[u8] = b"root's secret, must not change\n";

impl Canary {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let canary = Canary { dir };
        std::fs::write(canary.file(), CANARY_TEXT).unwrap();
        std::fs::set_permissions(canary.file(), std::fs::Permissions::from_mode(0o600)).unwrap();
        canary
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("canary")
    }

    fn assert_untouched(&self) {
        assert_eq!(std::fs::read(self.file()).unwrap(), CANARY_TEXT);
        let meta = std::fs::symlink_metadata(self.file()).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
        assert_eq!(
            names(self.dir()),
            ["canary"],
            "something was written next to it"
        );
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Every result file and the marker file in `dir` are regular files of nobody's, mode
/// 0600; returns the results.
fn assert_results_are_nobodys(dir: &Path) -> Vec<memtrack::MemtrackResult> {
    let scan = memtrack::MemtrackResult::scan_dir(dir).unwrap();
    assert!(!scan.results.is_empty(), "no results in {}", dir.display());
    let mut files: Vec<String> = scan.results.iter().map(|r| r.file_name()).collect();
    files.push(fifo_protocol::MARKER_RESULT_FILE_NAME.to_owned());
    for name in files {
        let meta = std::fs::symlink_metadata(dir.join(&name)).unwrap();
        assert!(meta.file_type().is_file(), "{name}: {meta:?}");
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (NOBODY, NOBODY, 0o600),
            "{name}"
        );
    }
    scan.results
}

/// A directory of nobody's (0755) inside a root-only-writable temporary directory.
fn nobodys_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    lchown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    dir
}

/// The command, as nobody, plants a link to the canary at every name memtrack wrote
/// before (the final names for its own pid and the next ones, and the temporary names
/// `.{pid}.MemtrackResult.msgpack.tmp-{memtrack's pid}`), then moves the results
/// directory away and puts a link to the canary's directory in its place. memtrack must
/// write through none of them: the results land in the directory it opened, now moved.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn links_planted_at_every_name_memtrack_writes_are_not_followed() {
    need_root();
    let canary = Canary::new();
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = nobodys_dir(base.path(), "home");
    let out = home.join("out");
    let moved = home.join("out.moved");
    // memtrack's pid is the command's parent ($PPID).
    let script = r#"
        out=$1 canary=$2 canary_dir=$3
        for p in $(seq $$ $(($$ + 24))); do
            # A process that exited already (seq) has its result written there.
            ln -s "$canary" "$out/$p.MemtrackResult.msgpack" 2>/dev/null || true
            ln -s "$canary" "$out/.$p.MemtrackResult.msgpack.tmp-$PPID"
        done
        ln -s "$canary" "$out/MarkerResult.msgpack"
        mv "$out" "$out.moved"
        ln -s "$canary_dir" "$out"
    "#;
    std::fs::create_dir(&out).unwrap();
    lchown(&out, Some(NOBODY), Some(NOBODY)).unwrap();
    let output = memtrack()
        .arg("run")
        .arg("-o")
        .arg(&out)
        .args(["--", "sh", "-ec", script, "sh"])
        .arg(&out)
        .arg(canary.file())
        .arg(canary.dir())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");

    canary.assert_untouched();
    let results = assert_results_are_nobodys(&moved);
    let commands: Vec<&str> = results
        .iter()
        .map(|r| r.process.command[0].as_str())
        .collect();
    assert!(commands.contains(&"sh"), "{commands:?}");
    assert!(commands.iter().any(|c| c.ends_with("mv")), "{commands:?}");
    // What is left of the plants are links memtrack replaced or never touched; no
    // temporary file of memtrack's own is left behind.
    for name in names(&moved) {
        let meta = std::fs::symlink_metadata(moved.join(&name)).unwrap();
        assert!(
            meta.file_type().is_symlink() || !name.contains(".tmp-"),
            "{name} left behind"
        );
    }
    // Root's `memtrack report` refuses the plants left there (links at the names of
    // pids that were not tracked) instead of reading the canary through them.
    let report = Command::new(env!("CARGO_BIN_EXE_memtrack"))
        .arg("report")
        .arg(&moved)
        .output()
        .unwrap();
    let report_err = String::from_utf8_lossy(&report.stderr);
    for line in report_err
        .lines()
        .filter(|l| l.contains("skipped result file"))
    {
        assert!(
            line.ends_with("is a symbolic link, not a regular file; not read"),
            "{line}"
        );
    }
    assert!(!String::from_utf8_lossy(&report.stdout).contains("root's secret"));
    canary.assert_untouched();
}

/// memtrack used to pick `$TMPDIR/memtrack-{ms}-{pid}` and reuse it if it existed: a
/// user who pre-created the candidates (links to a root directory, or directories of
/// their own) had root write there. The test learns memtrack's pid before it starts (a
/// shell that stops itself and then execs memtrack keeps its pid), plants every
/// candidate for the next 20 s, and checks that memtrack made its own directory.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_precreated_default_directory_is_not_used() {
    need_root();
    let canary = Canary::new();
    // The temporary directory memtrack uses, sticky and world-writable like /tmp; in a
    // tmpfs when there is one (planting 20,000 names took 17 s on this disk, 0.5 s there).
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let child = Command::new("sh")
        .args(["-c", r#"kill -STOP $$; exec "$0" "$@""#])
        .arg(env!("CARGO_BIN_EXE_memtrack"))
        .args(["run", "--", "true"])
        .env("SUDO_UID", NOBODY.to_string())
        .env("SUDO_GID", NOBODY.to_string())
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stopped = nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(pid as i32),
        Some(nix::sys::wait::WaitPidFlag::WUNTRACED),
    )
    .unwrap();
    assert!(
        matches!(stopped, nix::sys::wait::WaitStatus::Stopped(..)),
        "{stopped:?}"
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut planted_dirs = Vec::new();
    for ms in now_ms..now_ms + 20_000 {
        let candidate = tmp.path().join(format!("memtrack-{ms}-{pid}"));
        if ms % 2 == 0 {
            symlink(canary.dir(), &candidate).unwrap();
            lchown(&candidate, Some(NOBODY), Some(NOBODY)).unwrap();
        } else {
            std::fs::create_dir(&candidate).unwrap();
            std::fs::set_permissions(&candidate, std::fs::Permissions::from_mode(0o777)).unwrap();
            lchown(&candidate, Some(NOBODY), Some(NOBODY)).unwrap();
            planted_dirs.push(candidate);
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");

    canary.assert_untouched();
    for dir in &planted_dirs {
        assert!(names(dir).is_empty(), "{} was used", dir.display());
    }
    // "memtrack: 1 result file and MarkerResult.msgpack in DIR"
    let dir = stderr
        .lines()
        .find_map(|l| l.split_once(" and MarkerResult.msgpack in "))
        .map(|(_, dir)| PathBuf::from(dir))
        .unwrap_or_else(|| panic!("no results directory in {stderr}"));
    assert_eq!(dir.parent(), Some(tmp.path()));
    let name = dir.file_name().unwrap().to_str().unwrap();
    assert!(
        !name.ends_with(&format!("-{pid}")),
        "a predictable name: {name}"
    );
    let meta = std::fs::symlink_metadata(&dir).unwrap();
    assert!(meta.file_type().is_dir(), "{meta:?}");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (NOBODY, NOBODY, 0o700)
    );
    let results = assert_results_are_nobodys(&dir);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].process.command, ["true"]);
}
