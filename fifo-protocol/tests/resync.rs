//! Garbage in front of a client's exchange: the runner answers the garbage with `Err` and
//! resynchronises on the client's `Sync` frame, so the client's commands are answered and
//! nothing times out.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fifo_protocol::frame::{decode_body, split_frame};
use fifo_protocol::{
    CONTROL_FIFO_NAME, Command, Error, FifoClient, FifoRunner, IntegrationMode, MAX_FRAME_LEN,
    Marker, Reply, SharedHandling, encode_frame,
};
use proptest::prelude::*;

/// Long enough that anything relying on it (instead of resynchronising on the `Sync`
/// frame) makes the client time out first.
const PARTIAL_FRAME_TIMEOUT: Duration = Duration::from_secs(10);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

type Log = Arc<Mutex<Vec<String>>>;

fn runner() -> (FifoRunner, Log) {
    let mut runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    runner.set_partial_frame_timeout(PARTIAL_FRAME_TIMEOUT);
    let log = Log::default();
    let sink = Arc::clone(&log);
    runner.set_logger(move |line| sink.lock().unwrap().push(line.to_owned()));
    (runner, log)
}

/// The control FIFO, opened read-write (so the open never blocks or fails) for raw writes
/// and for peeking at how many bytes wait in it.
fn open_control(dir: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(dir.join(CONTROL_FIFO_NAME))
        .unwrap()
}

/// The ack FIFO, opened for reading without blocking (replies are polled).
fn open_ack(dir: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(dir.join(fifo_protocol::ACK_FIFO_NAME))
        .unwrap()
}

/// Bytes waiting in a FIFO, without reading them.
fn queued(fifo: &File) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD stores one c_int through the pointer.
    assert_eq!(
        unsafe { libc::ioctl(fifo.as_raw_fd(), libc::FIONREAD, &mut n) },
        0
    );
    n as usize
}

/// A deterministic pseudo-random byte string (xorshift).
fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `frame` without its last `missing` bytes: what a writer that stopped mid-frame leaves.
fn truncated(cmd: &Command, missing: usize) -> Vec<u8> {
    let mut frame = encode_frame(cmd).unwrap();
    frame.truncate(frame.len() - missing);
    frame
}

/// Garbage, and how many `Err` replies the runner owes it when it arrives in one read
/// right in front of a client's exchange (`None`: at least one).
fn garbage_kinds() -> Vec<(&'static str, Vec<u8>, Option<usize>)> {
    let mut kinds = vec![
        ("a 4 GiB header", vec![0xff; 4], Some(1)),
        (
            "a 4 GiB header and junk",
            b"\xff\xff\xff\xffjunk".to_vec(),
            Some(1),
        ),
        ("text", b"this is not a frame\n".to_vec(), Some(1)),
        (
            "valid length, invalid body",
            vec![3, 0, 0, 0, 0xc1, 0xc1, 0xc1],
            Some(1),
        ),
        // The body's last byte (42) might start a Sync header until the next bytes come.
        (
            "valid length, not a command",
            vec![1, 0, 0, 0, 0x2a],
            Some(1),
        ),
        // The claimed length reaches past the client's Sync frame.
        (
            "a length past the Sync frame",
            vec![0x40, 0, 0, 0, 1, 2, 3],
            Some(1),
        ),
        ("a 64 KiB length alone", vec![0, 0, 1, 0], Some(1)),
        // Merged with the client's Sync header into a plausible or an oversized length.
        ("one stray byte", vec![0x10], Some(1)),
        ("two stray bytes", vec![0x05, 0x00], Some(1)),
        ("three stray bytes", vec![0x05, 0x00, 0x00], Some(1)),
        // Completed by the first bytes of the client's Sync frame, these decode (as a
        // Sync, as an AddMarker): only the Sync frame inside them gives them away.
        (
            "a Sync frame without its last byte",
            truncated(&Command::Sync { nonce: u64::MAX }, 1),
            Some(1),
        ),
        (
            "an AddMarker frame without its last 3 bytes",
            truncated(
                &Command::AddMarker {
                    pid: 7,
                    marker: Marker::SampleStart {
                        timestamp_ns: u64::MAX,
                    },
                },
                3,
            ),
            Some(1),
        ),
        (
            "a SetIntegration frame cut in its name",
            truncated(
                &Command::SetIntegration {
                    name: "a-long-integration-name".into(),
                    version: "1.0".into(),
                },
                20,
            ),
            Some(1),
        ),
    ];
    for seed in 1..=8 {
        kinds.push(("pseudo-random bytes", pseudo_random(seed, 300), None));
    }
    kinds
}

/// What an integration does first; every call must succeed.
fn session(dir: &Path) -> Result<(), Error> {
    let mut client = FifoClient::connect(dir)?.with_timeout(CLIENT_TIMEOUT);
    client.set_version()?;
    client.set_integration("resync-test", "0.0.0")?;
    assert_eq!(client.integration_mode()?, IntegrationMode::Memory);
    client.current_benchmark("tests/resync.rs::bench")?;
    client.add_marker(Marker::BenchmarkStart { timestamp_ns: 1 })?;
    client.start_benchmark()?;
    client.stop_benchmark()?;
    client.ping()
}

/// Waits until the runner has logged `n` lines.
fn wait_for_log(log: &Log, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while log.lock().unwrap().len() < n {
        assert!(Instant::now() < deadline, "runner logged {:?}", log.lock());
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn check_outcome(
    what: &str,
    outcome: Result<(), Error>,
    serving: fifo_protocol::RunnerThread<SharedHandling>,
    log: &Log,
    errs: Option<usize>,
) {
    if let Err(e) = outcome {
        panic!("garbage {what:?}: the client's session failed: {e}");
    }
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.benchmarks.len(), 1, "garbage {what:?}");
    assert_eq!(result.benchmarks[0].uri, "tests/resync.rs::bench");
    assert_eq!(
        result.markers.len(),
        1,
        "garbage {what:?} was executed: {:?}",
        result.markers
    );
    assert_eq!(result.integration.unwrap().name, "resync-test");
    let log = log.lock().unwrap();
    match errs {
        Some(n) => assert_eq!(log.len(), n, "garbage {what:?}: {log:#?}"),
        None => assert!(!log.is_empty(), "garbage {what:?} was not answered"),
    }
}

/// The client's first exchange is queued behind the garbage before the runner reads
/// anything, as when a program writes garbage and then at once uses `FifoClient`.
#[test]
fn garbage_queued_in_front_of_a_client_costs_it_nothing() {
    for (what, garbage, errs) in garbage_kinds() {
        let (runner, log) = runner();
        let dir = runner.dir().to_owned();
        let control = open_control(&dir);
        (&control).write_all(&garbage).unwrap();

        let client_dir = dir.clone();
        let client = std::thread::spawn(move || session(&client_dir));
        // The first exchange, Sync and command, arrives in one write.
        let deadline = Instant::now() + Duration::from_secs(5);
        while queued(&control) <= garbage.len() {
            assert!(Instant::now() < deadline, "the client never wrote");
            std::thread::sleep(Duration::from_millis(1));
        }
        let serving = runner.spawn(SharedHandling).unwrap();
        let outcome = client.join().unwrap();
        check_outcome(what, outcome, serving, &log, errs);
    }
}

/// The reported case, with a runner already serving: whether it reads the garbage
/// alone or together with the client's first exchange, the client is answered.
#[test]
fn garbage_written_just_before_a_client_session_costs_it_nothing() {
    for (what, garbage, errs) in garbage_kinds() {
        let (runner, log) = runner();
        let dir = runner.dir().to_owned();
        let serving = runner.spawn(SharedHandling).unwrap();
        let mut raw = OpenOptions::new()
            .write(true)
            .open(dir.join(CONTROL_FIFO_NAME))
            .unwrap();
        raw.write_all(&garbage).unwrap();
        drop(raw);
        let outcome = session(&dir);
        check_outcome(what, outcome, serving, &log, errs);
    }
}

/// Garbage that ends where a Sync frame might begin is kept only until the next bytes
/// decide; garbage written by itself is answered with one `Err`, and a raw writer that
/// comes later, without any Sync frame, is read in step again.
#[test]
fn after_garbage_the_runner_reads_in_step_again() {
    let (mut runner, log) = runner();
    runner.set_partial_frame_timeout(Duration::from_millis(300));
    let dir = runner.dir().to_owned();
    let serving = runner.spawn(SharedHandling).unwrap();
    let control = open_control(&dir);
    let mut ack = open_ack(&dir);

    let ping = encode_frame(&Command::Ping).unwrap();
    // Nothing buffered can start a Sync frame: dropped at once.
    (&control).write_all(b"\xff\xff\xff\xffjunk").unwrap();
    wait_for_log(&log, 1);
    (&control).write_all(&ping).unwrap();
    assert_eq!(read_replies(&mut ack, 2), [reply_err(), Reply::Ack]);

    // The last byte might start a Sync header: kept, then dropped at the partial-frame
    // timeout without another reply.
    (&control).write_all(b"\xff\xff\xff\xff\x0e").unwrap();
    wait_for_log(&log, 2);
    std::thread::sleep(Duration::from_millis(500));
    (&control).write_all(&ping).unwrap();
    assert_eq!(read_replies(&mut ack, 2), [reply_err(), Reply::Ack]);
    assert_eq!(log.lock().unwrap().len(), 2, "{:#?}", log.lock().unwrap());
    serving.stop().unwrap();
}

/// A Sync frame that reaches the runner in two pieces, right behind garbage, is waited
/// for (the pieces here are separate writes, as a writer of more than `PIPE_BUF` bytes may
/// produce) and still found.
#[test]
fn a_sync_frame_cut_across_writes_is_waited_for() {
    let (runner, log) = runner();
    let dir = runner.dir().to_owned();
    let serving = runner.spawn(SharedHandling).unwrap();
    let control = open_control(&dir);
    let mut ack = open_ack(&dir);
    let nonce = 0x0123_4567_89ab_cdef;
    let sync = encode_frame(&Command::Sync { nonce }).unwrap();
    let ping = encode_frame(&Command::Ping).unwrap();

    // Garbage with an oversized header (the runner resynchronises) or a malformed frame
    // whose last byte is the first of the Sync frame (the runner skips it whole unless a
    // Sync frame starts there), then part of the Sync frame.
    let oversized: &[u8] = b"\xff\xff\xff\xffjunk";
    let malformed: &[u8] = &[3, 0, 0, 0, 0xc1, 0xc1];
    for (i, garbage) in [oversized, malformed].into_iter().enumerate() {
        for cut in [1, 3, 4, 10, sync.len() - 1] {
            let mut first = garbage.to_vec();
            first.extend_from_slice(&sync[..cut]);
            (&control).write_all(&first).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            let mut second = sync[cut..].to_vec();
            second.extend_from_slice(&ping);
            (&control).write_all(&second).unwrap();
            assert_eq!(
                read_replies(&mut ack, 3),
                [reply_err(), Reply::Synced { nonce }, Reply::Ack],
                "garbage #{i}, Sync frame cut after {cut} bytes"
            );
        }
    }
    assert_eq!(log.lock().unwrap().len(), 10, "{:#?}", log.lock().unwrap());
    serving.stop().unwrap();
}

/// Stands for any `Reply::Err` in comparisons.
fn reply_err() -> Reply {
    Reply::Err {
        message: String::new(),
    }
}

/// Reads `n` replies from the ack FIFO, with `Err` messages blanked.
fn read_replies(ack: &mut File, n: usize) -> Vec<Reply> {
    let mut replies = Vec::new();
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while replies.len() < n {
        read_some(ack, &mut buf, deadline);
        while let Some((body, used)) = split_frame(&buf).unwrap() {
            let reply = match decode_body::<Reply>(body).unwrap() {
                Reply::Err { .. } => reply_err(),
                other => other,
            };
            replies.push(reply);
            buf.drain(..used);
        }
    }
    replies
}

/// Appends what the ack FIFO holds to `buf`, waiting for at least one byte until
/// `deadline` (then panics).
fn read_some(ack: &mut File, buf: &mut Vec<u8>, deadline: Instant) {
    let mut chunk = [0u8; 4096];
    loop {
        match ack.read(&mut chunk) {
            Ok(n) if n > 0 => {
                buf.extend_from_slice(&chunk[..n]);
                return;
            }
            Ok(_) => panic!("ack FIFO closed"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "no reply in time");
                let mut fd = libc::pollfd {
                    fd: ack.as_fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut fd, 1, left.as_millis().min(100) as libc::c_int) };
            }
            Err(e) => panic!("reading the ack FIFO: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Property test: garbage between raw exchanges.

fn arb_small_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        Just(Command::Ping),
        Just(Command::GetIntegrationMode),
        Just(Command::StartBenchmark),
        any::<u64>().prop_map(Command::SetVersion),
        (any::<u32>(), ".{0,40}").prop_map(|(pid, uri)| Command::CurrentBenchmark { pid, uri }),
        (any::<u32>(), any::<u64>()).prop_map(|(pid, timestamp_ns)| Command::AddMarker {
            pid,
            marker: Marker::SampleEnd { timestamp_ns }
        }),
        any::<u64>().prop_map(|nonce| Command::Sync { nonce }),
    ]
}

/// Bytes a misbehaving writer may produce.
fn arb_garbage() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Anything.
        proptest::collection::vec(any::<u8>(), 1..200),
        // An oversized header, then anything.
        (
            (MAX_FRAME_LEN + 1)..,
            proptest::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(len, tail)| {
                let mut bytes = len.to_le_bytes().to_vec();
                bytes.extend(tail);
                bytes
            }),
        // A plausible header, then a body shorter or longer than it claims.
        (0..300u32, proptest::collection::vec(any::<u8>(), 0..60)).prop_map(|(len, body)| {
            let mut bytes = len.to_le_bytes().to_vec();
            bytes.extend(body);
            bytes
        }),
        // A frame cut short (a Sync frame, say).
        (arb_small_command(), any::<prop::sample::Index>()).prop_map(|(cmd, cut)| {
            let frame = encode_frame(&cmd).unwrap();
            frame[..cut.index(frame.len())].to_vec()
        }),
        // Text.
        "[ -~]{1,40}".prop_map(String::into_bytes),
    ]
    .prop_filter("not empty", |bytes| !bytes.is_empty())
}

/// One client exchange: what it writes and the reply its command must get.
#[derive(Debug, Clone)]
struct Exchange {
    nonce: u64,
    cmd: Command,
    reply: Reply,
}

/// A command whose execution the runner records, so that running it twice shows.
fn exchange(i: usize, nonce: u64, kind: u8) -> Exchange {
    let (cmd, reply) = match kind % 4 {
        0 => (
            Command::AddMarker {
                pid: i as u32,
                marker: Marker::SampleStart {
                    timestamp_ns: nonce,
                },
            },
            Reply::Ack,
        ),
        1 => (
            Command::CurrentBenchmark {
                pid: i as u32,
                uri: format!("bench-{nonce:x}"),
            },
            Reply::Ack,
        ),
        2 => (
            Command::GetIntegrationMode,
            Reply::IntegrationMode(IntegrationMode::Memory),
        ),
        _ => (Command::Ping, Reply::Ack),
    };
    Exchange { nonce, cmd, reply }
}

/// Writes `pieces` into the control FIFO, one `write` per group of pieces (`joined[i]`:
/// piece `i` goes out with the next one), while the runner serves; returns every reply
/// it produced until each exchange was answered (or the deadline passed).
fn run_case(
    pieces: &[Vec<u8>],
    joined: &[bool],
    exchanges: &[Exchange],
) -> (Vec<Reply>, fifo_protocol::MarkerResult) {
    let (runner, _log) = runner();
    let dir = runner.dir().to_owned();
    let mut ack = open_ack(&dir);
    let serving = runner.spawn(SharedHandling).unwrap();
    let mut control = OpenOptions::new()
        .write(true)
        .open(dir.join(CONTROL_FIFO_NAME))
        .unwrap();

    let mut pending = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        pending.extend_from_slice(piece);
        if !joined.get(i).copied().unwrap_or(false) || i + 1 == pieces.len() {
            control.write_all(&pending).unwrap();
            pending.clear();
        }
    }

    // Read until every exchange's Synced and the reply after it are in.
    let mut replies = Vec::new();
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    let answered = |replies: &[Reply]| {
        exchanges.iter().all(|ex| {
            replies
                .iter()
                .position(|r| *r == Reply::Synced { nonce: ex.nonce })
                .is_some_and(|at| at + 1 < replies.len())
        })
    };
    while !answered(&replies) && Instant::now() < deadline {
        let mut chunk = [0u8; 4096];
        match ack.read(&mut chunk) {
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("reading the ack FIFO: {e}"),
        }
        while let Some((body, used)) = split_frame(&buf).unwrap() {
            replies.push(decode_body::<Reply>(body).unwrap());
            buf.drain(..used);
        }
    }
    // Panics in the runner thread resurface here.
    let (result, _) = serving.stop().unwrap();
    (replies, result)
}

proptest! {
    // A failing case costs the reply deadline, so shrinking is bounded in time.
    #![proptest_config(ProptestConfig {
        cases: 200,
        max_shrink_time: 30_000,
        ..ProptestConfig::default()
    })]

    /// Garbage before, between and after complete exchanges, written together or in
    /// back-to-back writes: every exchange is answered exactly once, with its own reply,
    /// and its command is carried out exactly once.
    #[test]
    fn garbage_between_exchanges_costs_no_exchange_its_reply(
        steps in proptest::collection::vec(
            (proptest::collection::vec(arb_garbage(), 0..3), any::<u64>(), any::<u8>()),
            1..6,
        ),
        trailing in proptest::collection::vec(arb_garbage(), 0..2),
        joined in proptest::collection::vec(any::<bool>(), 0..32),
    ) {
        let mut pieces = Vec::new();
        let mut exchanges = Vec::new();
        for (i, (garbage, nonce, kind)) in steps.iter().enumerate() {
            pieces.extend(garbage.iter().cloned());
            let ex = exchange(i, *nonce, *kind);
            // What FifoClient writes: Sync and the command, in one write.
            let mut bytes = encode_frame(&Command::Sync { nonce: ex.nonce }).unwrap();
            bytes.extend(encode_frame(&ex.cmd).unwrap());
            pieces.push(bytes);
            exchanges.push(ex);
        }
        pieces.extend(trailing);
        let nonces: std::collections::HashSet<u64> = exchanges.iter().map(|e| e.nonce).collect();
        prop_assume!(nonces.len() == exchanges.len());

        let (replies, result) = run_case(&pieces, &joined, &exchanges);
        for ex in &exchanges {
            let synced: Vec<usize> = replies
                .iter()
                .enumerate()
                .filter(|(_, r)| **r == Reply::Synced { nonce: ex.nonce })
                .map(|(at, _)| at)
                .collect();
            prop_assert_eq!(synced.len(), 1, "Sync {:x} answered {} times; replies {:?}",
                ex.nonce, synced.len(), replies);
            prop_assert_eq!(replies.get(synced[0] + 1), Some(&ex.reply),
                "wrong reply to {:?}; replies {:?}", ex.cmd, replies);
            // Carried out exactly once.
            match &ex.cmd {
                Command::AddMarker { pid, marker } => {
                    let times = result.markers.iter()
                        .filter(|m| m.pid == *pid && m.marker == *marker)
                        .count();
                    prop_assert_eq!(times, 1, "{:?}", ex.cmd);
                }
                Command::CurrentBenchmark { uri, .. } => {
                    let times = result.benchmarks.iter().filter(|b| b.uri == *uri).count();
                    prop_assert_eq!(times, 1, "{:?}", ex.cmd);
                }
                _ => {}
            }
        }
    }
}
