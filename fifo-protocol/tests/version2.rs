//! Protocol version 2: the region's counters in the reply to `StopWithCounters`, regions
//! named after the fact (`NameRegion`), uris refused before any handler sees them, and
//! version 1 integrations unchanged.

use fifo_protocol::{
    Command, Error, FifoClient, FifoRunner, IntegrationMode, MAX_URI_LEN, PROTOCOL_VERSION,
    RegionCounters, Reply, SharedHandling, encode_frame, frame,
};

fn runner_with<H: fifo_protocol::Handler + Send + 'static>(
    handler: H,
) -> (fifo_protocol::RunnerThread<H>, FifoClient) {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(handler).unwrap();
    let client = FifoClient::connect(&dir).unwrap();
    (serving, client)
}

#[test]
fn version_2_is_announced_and_version_1_still_accepted() {
    assert_eq!(PROTOCOL_VERSION, 2);
    let (serving, mut client) = runner_with(SharedHandling);
    // A version-1 integration: its whole vocabulary is answered as before.
    assert_eq!(client.send(&Command::SetVersion(1)).unwrap(), Reply::Ack);
    client.current_benchmark("v1").unwrap();
    client.start_benchmark().unwrap();
    assert_eq!(client.send(&Command::StopBenchmark).unwrap(), Reply::Ack);
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.protocol_version, Some(1));
    assert_eq!(result.measurements.len(), 1);
}

#[test]
fn a_runner_without_counters_refuses_stop_with_counters_but_closes_the_window() {
    let (serving, mut client) = runner_with(SharedHandling);
    client.set_version().unwrap();
    client.current_benchmark("no-counters").unwrap();
    client.start_benchmark().unwrap();
    match client.stop_with_counters() {
        Err(Error::Rejected { command, message }) => {
            assert_eq!(command, "StopWithCounters");
            assert_eq!(
                message,
                "the measurement stopped, but this runner keeps no counters"
            );
        }
        other => panic!("{other:?}"),
    }
    // Closed: a second stop is refused as a stop without a start.
    match client.stop_with_counters() {
        Err(Error::Rejected { message, .. }) => {
            assert_eq!(message, "StopBenchmark without a preceding StartBenchmark");
        }
        other => panic!("{other:?}"),
    }
    match client.name_region(0, "renamed") {
        Err(Error::Rejected { message, .. }) => {
            assert_eq!(message, "this runner keeps no regions to name");
        }
        other => panic!("{other:?}"),
    }
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.measurements.len(), 1);
    assert!(result.measurements[0].stop_ns.is_some());
}

#[test]
fn bad_uris_are_refused_before_the_handler_sees_them() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let handler = move |cmd: &Command| {
        if let Command::CurrentBenchmark { uri, .. } | Command::NameRegion { uri, .. } = cmd {
            log.lock().unwrap().push(uri.clone());
        }
        None
    };
    let (serving, mut client) = runner_with(handler);
    client.set_version().unwrap();
    let longest = "u".repeat(MAX_URI_LEN);
    let too_long = "u".repeat(MAX_URI_LEN + 1);
    let cases: [(&str, String); 4] = [
        ("", "the benchmark uri is empty".to_owned()),
        (
            "a\nb",
            "the benchmark uri \"a\\nb\" holds a control character ('\\n' \
             at byte 1); a uri is one line of text"
                .to_owned(),
        ),
        (
            "nul\0",
            "the benchmark uri \"nul\\0\" holds a control character \
             ('\\0' at byte 3); a uri is one line of text"
                .to_owned(),
        ),
        (
            &too_long,
            "the benchmark uri is 4097 bytes long, more than the limit of \
             4096 bytes"
                .to_owned(),
        ),
    ];
    for (uri, expected) in &cases {
        match client.current_benchmark(uri) {
            Err(Error::Rejected { message, .. }) => assert_eq!(&message, expected),
            other => panic!("{uri:?}: {other:?}"),
        }
    }
    // A uri of 1 MiB does not fit a frame: the client refuses to send it.
    match client.current_benchmark(&"m".repeat(1 << 20)) {
        Err(Error::FrameTooLarge { len, max }) => {
            assert!(len > u64::from(max), "{len}");
        }
        other => panic!("{other:?}"),
    }
    match client.name_region(0, "x\ny") {
        Err(Error::Rejected { message, .. }) => {
            assert!(
                message.starts_with("the benchmark uri \"x\\ny\""),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    // The longest accepted uri, and a non-ASCII one, go through.
    client.current_benchmark(&longest).unwrap();
    client.current_benchmark("bench/größe·∑").unwrap();
    let (result, _) = serving.stop().unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [longest.clone(), "bench/größe·∑".into()]
    );
    let uris: Vec<&str> = result.benchmarks.iter().map(|b| b.uri.as_str()).collect();
    assert_eq!(uris, [longest.as_str(), "bench/größe·∑"]);
}

/// A runner built before version 2 answers `SetVersion(2)` as this crate's runner answers
/// any version it does not speak; the client's error then says which ones it does.
#[test]
fn an_older_runner_refuses_version_2_with_a_clear_error() {
    let old_runner = |cmd: &Command| match cmd {
        Command::SetVersion(v) if *v != 1 => Some(Reply::Err {
            message: Error::UnsupportedVersion {
                requested: *v,
                min: 1,
                max: 1,
            }
            .to_string(),
        }),
        _ => None,
    };
    let (serving, mut client) = runner_with(old_runner);
    let err = client.set_version().unwrap_err();
    assert_eq!(
        err.to_string(),
        "runner rejected SetVersion: protocol version 2 is not supported; this runner \
         supports versions 1..=1"
    );
    let (_result, _handler) = serving.stop().unwrap();
}

/// `ReplyRef` reads exactly what `Reply` writes, for every variant.
#[test]
fn reply_ref_decodes_every_reply_as_reply_does() {
    let mut counters = RegionCounters::default();
    counters.region = 7;
    counters.alloc_calls = 1;
    counters.free_calls = 2;
    counters.bytes_allocated = 3;
    counters.bytes_freed = 4;
    counters.live_blocks = 5;
    counters.live_bytes = 6;
    counters.peak_live_bytes = u64::MAX;
    counters.failed_allocs = 8;
    counters.unmatched_frees = 9;
    counters.lost_events = 10;
    let replies = [
        Reply::Ack,
        Reply::Err {
            message: "why ∑".into(),
        },
        Reply::Err {
            message: "x".repeat(70_000),
        },
        Reply::IntegrationMode(IntegrationMode::Memory),
        Reply::Synced { nonce: u64::MAX },
        Reply::Counters(counters),
    ];
    for reply in replies {
        let frame = encode_frame(&reply).unwrap();
        let decoded = frame::decode_reply_ref(&frame[4..]).unwrap();
        assert_eq!(decoded.to_reply(), reply);
        assert_eq!(fifo_protocol::decode_frame::<Reply>(&frame).unwrap(), reply);
    }
    // Trailing bytes are refused as by decode_body.
    let mut frame = encode_frame(&Reply::Ack).unwrap();
    frame.push(0xc0);
    assert!(matches!(
        frame::decode_reply_ref(&frame[4..]),
        Err(Error::TrailingBytes { .. })
    ));
    assert!(matches!(
        frame::decode_reply_ref(&[0xc1]),
        Err(Error::Decode { .. })
    ));
}

/// Counters sent by a newer runner with a field this build does not know, or without
/// one it knows, still decode (unknown fields ignored, missing ones 0).
#[test]
fn counters_tolerate_added_and_missing_fields() {
    // {"Counters": {"alloc_calls": 3, "future_counter": 9}}
    let mut body = vec![0x81, 0xa8];
    body.extend_from_slice(b"Counters");
    body.extend_from_slice(&[0x82, 0xab]);
    body.extend_from_slice(b"alloc_calls");
    body.push(0x03);
    body.push(0xae);
    body.extend_from_slice(b"future_counter");
    body.push(0x09);
    let mut expected = RegionCounters::default();
    expected.alloc_calls = 3;
    assert_eq!(
        fifo_protocol::frame::decode_body::<Reply>(&body).unwrap(),
        Reply::Counters(expected)
    );
}
