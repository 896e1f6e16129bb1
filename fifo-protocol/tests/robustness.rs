//! Hostile or broken peers: garbage in the control FIFO, runners that are gone or never
//! answer, and other users trying to reach the FIFOs.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fifo_protocol::{
    ACK_FIFO_NAME, CONTROL_FIFO_NAME, Command, Error, FIFO_DIR_ENV, FifoClient, FifoRunner,
    IntegrationMode, Reply, SharedHandling,
};

/// A runner serving on a thread, whose log lines are collected.
fn serving_runner() -> (
    fifo_protocol::RunnerThread<SharedHandling>,
    std::ffi::OsString,
    Arc<Mutex<Vec<String>>>,
) {
    let mut runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    runner.set_partial_frame_timeout(Duration::from_millis(200));
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    runner.set_logger(move |line| sink.lock().unwrap().push(line.to_owned()));
    let (_, dir) = runner.env_var();
    (runner.spawn(SharedHandling).unwrap(), dir, log)
}

fn expect_err_reply(reply: Reply, needle: &str) {
    match reply {
        Reply::Err { message } => assert!(message.contains(needle), "{message:?} lacks {needle:?}"),
        other => panic!("expected Err containing {needle:?}, got {other:?}"),
    }
}

#[test]
fn garbage_is_answered_with_err_and_serving_continues() {
    let (serving, dir, log) = serving_runner();
    let mut client = FifoClient::connect(&dir).unwrap();

    // Plain text: its first 4 bytes read as a length of ~1.9 GB.
    expect_err_reply(
        client.send_raw(b"this is not a frame at all\n").unwrap(),
        "exceeds the limit",
    );
    client.ping().unwrap();

    // A 4 GiB length prefix, followed by some bytes.
    expect_err_reply(
        client.send_raw(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).unwrap(),
        "4294967295 bytes exceeds the limit of 1048576 bytes",
    );
    client.ping().unwrap();

    // Valid length, invalid MessagePack.
    expect_err_reply(
        client.send_raw(&[3, 0, 0, 0, 0xc1, 0xc1, 0xc1]).unwrap(),
        "cannot decode 3-byte frame body as a Command",
    );
    client.ping().unwrap();

    // Valid length, valid MessagePack, but not a command.
    expect_err_reply(
        client.send_raw(&[1, 0, 0, 0, 0x2a]).unwrap(),
        "as a Command",
    );
    // A command followed by junk inside the same body.
    expect_err_reply(
        client
            .send_raw(&[6, 0, 0, 0, 0xa4, b'P', b'i', b'n', b'g', 0x00])
            .unwrap(),
        "trailing bytes",
    );
    // An empty body.
    expect_err_reply(client.send_raw(&[0, 0, 0, 0]).unwrap(), "0-byte frame body");

    // A frame that never completes: dropped after the partial-frame timeout.
    let started = Instant::now();
    expect_err_reply(
        client.send_raw(&[10, 0, 0, 0, 1, 2]).unwrap(),
        "incomplete frame: need 14 bytes, only 6 available",
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    // Same for a header cut short.
    expect_err_reply(client.send_raw(&[1, 0]).unwrap(), "need 4 bytes");

    // Two valid frames written at once get two replies, in order; the client returns the
    // first, and the next exchange skips the second, stale, one.
    let mut two = fifo_protocol::encode_frame(&Command::GetIntegrationMode).unwrap();
    two.extend(fifo_protocol::encode_frame(&Command::StopBenchmark).unwrap());
    assert_eq!(
        client.send_raw(&two).unwrap(),
        Reply::IntegrationMode(IntegrationMode::Memory)
    );
    assert_eq!(client.integration_mode().unwrap(), IntegrationMode::Memory);

    // Everything malformed was reported to the logger.
    assert_eq!(log.lock().unwrap().len(), 8, "{:#?}", log.lock().unwrap());
    let (result, _) = serving.stop().unwrap();
    assert!(result.markers.is_empty() && result.benchmarks.is_empty());
}

#[test]
fn garbage_from_a_writer_that_does_not_wait_cannot_confuse_the_next_client() {
    let (serving, dir, log) = serving_runner();
    let control = Path::new(&dir).join(CONTROL_FIFO_NAME);

    // Write junk straight into the FIFO and leave without reading any reply; each time,
    // let the runner answer into the ack FIFO, where nobody reads.
    let junk: [&[u8]; 3] = [
        b"\xff\xff\xff\xffjunk",
        &[2, 0, 0, 0, 0xc1, 0xc1],
        &[5, 0, 0, 0, 0xa4, b'P', b'i', b'n', b'g'], // a valid Ping: its Ack is stale too
    ];
    for (i, bytes) in junk.iter().enumerate() {
        let mut raw = OpenOptions::new().write(true).open(&control).unwrap();
        raw.write_all(bytes).unwrap();
        drop(raw);
        // The two malformed ones are logged once handled; the Ping is given time.
        let logged = (i + 1).min(2);
        let deadline = Instant::now() + Duration::from_secs(5);
        while log.lock().unwrap().len() < logged {
            assert!(Instant::now() < deadline, "runner never handled junk #{i}");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut client = FifoClient::connect(&dir).unwrap();
    assert_eq!(client.send(&Command::Ping).unwrap(), Reply::Ack);
    assert_eq!(client.integration_mode().unwrap(), IntegrationMode::Memory);
    serving.stop().unwrap();
}

#[test]
fn missing_directory_or_fifos_fail_at_once() {
    let scratch = tempfile::tempdir().unwrap();

    let nowhere = scratch.path().join("no-such-dir");
    let err = FifoClient::connect(&nowhere).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-dir"), "{err}");

    // A directory without FIFOs.
    let err = FifoClient::connect(scratch.path()).unwrap_err();
    assert!(err.to_string().contains(ACK_FIFO_NAME), "{err}");

    // Regular files where the FIFOs should be.
    std::fs::write(scratch.path().join(ACK_FIFO_NAME), b"").unwrap();
    std::fs::write(scratch.path().join(CONTROL_FIFO_NAME), b"").unwrap();
    let err = FifoClient::connect(scratch.path()).unwrap_err();
    assert!(
        matches!(err, Error::NoRunner { reason, .. } if reason.contains("not a FIFO")),
        "{err:?}"
    );
    // ... and nothing was written into them.
    assert_eq!(
        std::fs::metadata(scratch.path().join(CONTROL_FIFO_NAME))
            .unwrap()
            .len(),
        0
    );
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn fifos_without_a_runner_fail_at_once() {
    let scratch = tempfile::tempdir().unwrap();
    mkfifo(&scratch.path().join(CONTROL_FIFO_NAME));
    mkfifo(&scratch.path().join(ACK_FIFO_NAME));
    let started = Instant::now();
    let err = FifoClient::connect(scratch.path()).unwrap_err();
    assert!(
        matches!(&err, Error::NoRunner { path, .. } if path.ends_with(CONTROL_FIFO_NAME)),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("no runner is serving "),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_runner_that_does_not_serve_times_out() {
    // Created (FIFOs open) but never serving: like a runner that hangs.
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let timeout = Duration::from_millis(300);
    let mut client = FifoClient::connect(&dir).unwrap().with_timeout(timeout);
    assert_eq!(client.timeout(), timeout);

    let started = Instant::now();
    let err = client.ping().unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&err, Error::Timeout { waiting_for, timeout: t, .. }
            if *waiting_for == "receive the reply" && *t == timeout),
        "{err:?}"
    );
    assert!(err.to_string().contains("300ms"), "{err}");
    assert!(took >= timeout && took < timeout * 5, "took {took:?}");
    drop(runner);
}

#[test]
fn a_runner_that_went_away_is_an_error_not_a_hang() {
    let (serving, dir, _) = serving_runner();
    let mut client = FifoClient::connect(&dir)
        .unwrap()
        .with_timeout(Duration::from_secs(30));
    client.ping().unwrap();
    serving.stop().unwrap(); // closes the FIFOs and removes the directory

    let started = Instant::now();
    let err = client.ping().unwrap_err();
    assert!(matches!(err, Error::NoRunner { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    // Reconnecting fails too, at once.
    assert!(FifoClient::connect(&dir).is_err());
}

#[test]
fn directory_is_private_and_fifos_are_owner_only() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let other = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (name, value) = runner.env_var();
    assert_eq!(name, FIFO_DIR_ENV);
    assert_eq!(Path::new(&value), runner.dir());
    assert_ne!(runner.dir(), other.dir(), "directory names must be random");
    assert!(runner.dir().is_absolute());

    let meta = std::fs::metadata(runner.dir()).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
    // SAFETY: geteuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });

    for path in [runner.control_path(), runner.ack_path()] {
        assert_eq!(path.parent(), Some(runner.dir()));
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert!(
            meta.file_type().is_fifo(),
            "{} is not a FIFO",
            path.display()
        );
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            0o600,
            "{}",
            path.display()
        );
    }
    // Nothing else in the directory.
    assert_eq!(std::fs::read_dir(runner.dir()).unwrap().count(), 2);

    let dir = runner.dir().to_owned();
    drop(runner);
    assert!(!dir.exists(), "directory not removed on drop");
}

#[test]
fn new_in_places_the_directory_in_the_given_base() {
    let base = tempfile::tempdir().unwrap();
    let runner = FifoRunner::new_in(IntegrationMode::Memory, base.path()).unwrap();
    assert_eq!(runner.dir().parent(), Some(base.path()));
    assert!(
        runner
            .dir()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("memtrack-fifo-")
    );
    let err =
        FifoRunner::new_in(IntegrationMode::Memory, &base.path().join("missing")).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

/// Runs `sh -c script` as user `nobody` (uid/gid 65534) and returns whether it succeeded
/// and its stderr. Needs root (and setpriv, which util-linux has).
fn as_nobody(script: &str, arg: &Path) -> (bool, String) {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "needs root to run as user nobody"
    );
    let out = std::process::Command::new("timeout")
        .args([
            "10",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(arg)
        .output()
        .expect("timeout and setpriv run (scripts/bootstrap.sh installs util-linux)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root (runs as user nobody): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn another_user_cannot_reach_the_fifos() {
    // Under the system temp dir (world-traversable), so only our directory's 0700 mode
    // stands between user nobody and the FIFOs.
    let runner = FifoRunner::new_in(IntegrationMode::Memory, &std::env::temp_dir()).unwrap();
    let control = runner.control_path().to_owned();
    let ack = runner.ack_path().to_owned();

    let (ok, stderr) = as_nobody(r#"printf 'xxxx' > "$1""#, &control);
    assert!(!ok, "user nobody could write into {}", control.display());
    assert!(stderr.contains("Permission denied"), "{stderr}");
    let (ok, stderr) = as_nobody(r#"cat "$1""#, &ack);
    assert!(!ok, "user nobody could open {}", ack.display());
    assert!(stderr.contains("Permission denied"), "{stderr}");
    let (ok, _) = as_nobody(r#"ls "$1""#, runner.dir());
    assert!(!ok, "user nobody could list {}", runner.dir().display());

    // Control: handed over to nobody, the same write goes through, so the refusals above
    // came from the permissions and not from a broken command.
    runner.set_owner(65534, 65534).unwrap();
    assert_eq!(std::fs::metadata(&control).unwrap().uid(), 65534);
    let (ok, stderr) = as_nobody(r#"printf 'xxxx' > "$1""#, &control);
    assert!(ok, "owner could not write: {stderr}");
}

/// A handler that takes `delay` to answer `GetIntegrationMode`, like a runner busy
/// attaching probes.
fn slow_mode_runner(
    delay: Duration,
) -> (
    fifo_protocol::RunnerThread<impl fifo_protocol::Handler>,
    std::ffi::OsString,
) {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let handler = move |cmd: &Command| {
        assert!(
            !matches!(cmd, Command::Sync { .. }),
            "Sync reached the handler"
        );
        if matches!(cmd, Command::GetIntegrationMode) {
            std::thread::sleep(delay);
        }
        None
    };
    (runner.spawn(handler).unwrap(), dir)
}

#[test]
fn a_late_reply_is_not_taken_for_the_next_commands_answer() {
    let (serving, dir) = slow_mode_runner(Duration::from_millis(400));
    let mut client = FifoClient::connect(&dir)
        .unwrap()
        .with_timeout(Duration::from_millis(100));
    let err = client.integration_mode().unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");

    // The IntegrationMode reply arrives while this exchange waits: it must be skipped.
    client.set_timeout(Duration::from_secs(5));
    assert_eq!(client.send(&Command::Ping).unwrap(), Reply::Ack);
    assert_eq!(client.send(&Command::Ping).unwrap(), Reply::Ack);
    serving.stop().unwrap();
}

#[test]
fn a_late_reply_meant_for_another_client_is_not_taken_either() {
    let (serving, dir) = slow_mode_runner(Duration::from_millis(400));
    let mut impatient = FifoClient::connect(&dir)
        .unwrap()
        .with_timeout(Duration::from_millis(100));
    assert!(impatient.integration_mode().is_err());

    let mut other = FifoClient::connect(&dir).unwrap();
    assert_eq!(other.send(&Command::Ping).unwrap(), Reply::Ack);
    serving.stop().unwrap();
}
