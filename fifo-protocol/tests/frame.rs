//! Frame codec: round trips of every message, the exact wire layout, and what untrusted
//! bytes produce (property tests included).

use std::io::{Cursor, Read};

use fifo_protocol::frame::{
    MAX_SYNC_BODY_LEN, SyncSearch, body_len, decode_body, find_sync, read_frame, split_frame,
    write_frame,
};
use fifo_protocol::{
    Command, Error, HEADER_LEN, IntegrationMode, MAX_FRAME_LEN, Marker, Reply, decode_frame,
    encode_frame,
};
use proptest::prelude::*;

fn all_commands() -> Vec<Command> {
    vec![
        Command::SetVersion(1),
        Command::SetVersion(u64::MAX),
        Command::SetIntegration {
            name: "codspeed-divan-compat".into(),
            version: "2.3.4-beta.1".into(),
        },
        Command::CurrentBenchmark {
            pid: 4242,
            uri: "benches/alloc.rs::vec_push[1000]".into(),
        },
        Command::StartBenchmark,
        Command::StopBenchmark,
        Command::AddMarker {
            pid: 1,
            marker: Marker::SampleStart { timestamp_ns: 1 },
        },
        Command::AddMarker {
            pid: 2,
            marker: Marker::SampleEnd { timestamp_ns: 2 },
        },
        Command::AddMarker {
            pid: 3,
            marker: Marker::BenchmarkStart {
                timestamp_ns: 1 << 40,
            },
        },
        Command::AddMarker {
            pid: u32::MAX,
            marker: Marker::BenchmarkEnd {
                timestamp_ns: u64::MAX,
            },
        },
        Command::Ping,
        Command::GetIntegrationMode,
        Command::Sync { nonce: 0 },
        Command::Sync { nonce: u64::MAX },
    ]
}

fn all_replies() -> Vec<Reply> {
    vec![
        Reply::Ack,
        Reply::Err {
            message: "protocol version 9 is not supported".into(),
        },
        Reply::Err {
            message: String::new(),
        },
        Reply::IntegrationMode(IntegrationMode::Memory),
        Reply::Synced {
            nonce: 0x0123_4567_89ab_cdef,
        },
    ]
}

#[test]
fn every_command_round_trips() {
    for cmd in all_commands() {
        let frame = encode_frame(&cmd).unwrap();
        assert_eq!(
            body_len(frame[..HEADER_LEN].try_into().unwrap()).unwrap(),
            frame.len() - HEADER_LEN
        );
        assert_eq!(decode_frame::<Command>(&frame).unwrap(), cmd, "{cmd:?}");
        assert_eq!(read_frame::<Command, _>(&mut &frame[..]).unwrap(), cmd);
    }
}

#[test]
fn every_reply_round_trips() {
    for reply in all_replies() {
        let frame = encode_frame(&reply).unwrap();
        assert_eq!(decode_frame::<Reply>(&frame).unwrap(), reply, "{reply:?}");
        let mut stream = Vec::new();
        write_frame(&mut stream, &reply).unwrap();
        assert_eq!(stream, frame);
    }
}

#[test]
fn a_stream_of_frames_splits_back_into_the_same_messages() {
    let mut stream = Vec::new();
    for cmd in all_commands() {
        write_frame(&mut stream, &cmd).unwrap();
    }
    let mut rest = &stream[..];
    let mut decoded = Vec::new();
    while let Some((body, used)) = split_frame(rest).unwrap() {
        decoded.push(decode_body::<Command>(body).unwrap());
        rest = &rest[used..];
    }
    assert!(rest.is_empty());
    assert_eq!(decoded, all_commands());

    // read_frame consumes exactly one frame at a time from a reader.
    let mut reader = Cursor::new(&stream);
    for cmd in all_commands() {
        assert_eq!(read_frame::<Command, _>(&mut reader).unwrap(), cmd);
    }
    assert!(matches!(
        read_frame::<Command, _>(&mut reader),
        Err(Error::IncompleteFrame {
            needed: 4,
            available: 0
        })
    ));
}

#[test]
fn wire_layout_is_le_length_then_named_msgpack() {
    // A unit variant is its name as a MessagePack fixstr.
    let frame = encode_frame(&Command::Ping).unwrap();
    assert_eq!(frame, [5, 0, 0, 0, 0xa4, b'P', b'i', b'n', b'g']);

    // Struct variants carry their field names (rmp-serde named representation):
    // {"CurrentBenchmark": {"pid": 7, "uri": "u"}}.
    let frame = encode_frame(&Command::CurrentBenchmark {
        pid: 7,
        uri: "u".into(),
    })
    .unwrap();
    let mut expected = vec![0x81, 0xb0];
    expected.extend_from_slice(b"CurrentBenchmark");
    expected.extend_from_slice(&[0x82, 0xa3]);
    expected.extend_from_slice(b"pid");
    expected.push(0x07);
    expected.push(0xa3);
    expected.extend_from_slice(b"uri");
    expected.extend_from_slice(&[0xa1, b'u']);
    assert_eq!(&frame[HEADER_LEN..], &expected[..]);
    assert_eq!(
        u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize,
        expected.len()
    );
}

#[test]
fn unknown_integration_modes_from_newer_runners_decode_as_unknown() {
    #[derive(serde::Serialize)]
    enum FutureMode {
        #[allow(dead_code)]
        Memory,
        Walltime,
    }
    #[derive(serde::Serialize)]
    enum FutureReply {
        IntegrationMode(FutureMode),
    }
    let body =
        rmp_serde::to_vec_named(&FutureReply::IntegrationMode(FutureMode::Walltime)).unwrap();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    assert_eq!(
        decode_frame::<Reply>(&frame).unwrap(),
        Reply::IntegrationMode(IntegrationMode::Unknown)
    );
}

#[test]
fn four_gib_header_is_rejected_from_the_header_alone() {
    let header = [0xff; 4];
    let expect_too_large = |err: Error| match err {
        Error::FrameTooLarge { len, max } => {
            assert_eq!(len, u64::from(u32::MAX));
            assert_eq!(max, MAX_FRAME_LEN);
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    };
    expect_too_large(decode_frame::<Command>(&header).unwrap_err());
    expect_too_large(split_frame(&header).unwrap_err());
    expect_too_large(body_len(header).unwrap_err());

    // A reader that has nothing after the header, and fails the test if asked for more:
    // the length is judged before the body is read (or a buffer reserved for it).
    struct HeaderOnly(usize);
    impl Read for HeaderOnly {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            assert!(self.0 < 4, "read past the header of an oversized frame");
            buf[0] = 0xff;
            self.0 += 1;
            Ok(1)
        }
    }
    expect_too_large(read_frame::<Command, _>(&mut HeaderOnly(0)).unwrap_err());

    let msg = decode_frame::<Command>(&header).unwrap_err().to_string();
    assert!(
        msg.contains("4294967295") && msg.contains("1048576"),
        "{msg}"
    );
}

#[test]
fn limit_is_inclusive_one_mib() {
    assert_eq!(MAX_FRAME_LEN, 1 << 20);
    assert_eq!(
        body_len(MAX_FRAME_LEN.to_le_bytes()).unwrap(),
        MAX_FRAME_LEN as usize
    );
    assert!(matches!(
        body_len((MAX_FRAME_LEN + 1).to_le_bytes()),
        Err(Error::FrameTooLarge { len, .. }) if len == u64::from(MAX_FRAME_LEN) + 1
    ));
}

#[test]
fn oversized_messages_are_not_encoded() {
    let cmd = Command::SetIntegration {
        name: "x".repeat(MAX_FRAME_LEN as usize),
        version: String::new(),
    };
    match encode_frame(&cmd) {
        Err(Error::FrameTooLarge { len, max }) => {
            assert!(len > u64::from(max));
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
}

#[test]
fn malformed_frames_give_specific_errors() {
    // Not even a header.
    assert!(matches!(
        decode_frame::<Command>(&[1, 0]),
        Err(Error::IncompleteFrame {
            needed: 4,
            available: 2
        })
    ));
    // Header promises 10 bytes, 3 present.
    assert!(matches!(
        decode_frame::<Command>(&[10, 0, 0, 0, 1, 2, 3]),
        Err(Error::IncompleteFrame {
            needed: 14,
            available: 7
        })
    ));
    // A complete frame followed by a stray byte.
    let mut frame = encode_frame(&Command::Ping).unwrap();
    frame.push(0);
    assert!(matches!(
        decode_frame::<Command>(&frame),
        Err(Error::TrailingBytes {
            what: "frame",
            used: 9,
            extra: 1
        })
    ));
    // A body holding a message plus a stray byte.
    let err = decode_frame::<Command>(&[6, 0, 0, 0, 0xa4, b'P', b'i', b'n', b'g', 0xc0]);
    assert!(matches!(
        err,
        Err(Error::TrailingBytes {
            what: "message",
            used: 5,
            extra: 1
        })
    ));
    // 0xc1 is never valid MessagePack.
    let err = decode_frame::<Command>(&[3, 0, 0, 0, 0xc1, 0xc1, 0xc1]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Decode {
                what: "Command",
                len: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("3-byte"), "{err}");
    // Valid MessagePack that is not a Command: the integer 5, an unknown variant.
    assert!(matches!(
        decode_frame::<Command>(&[1, 0, 0, 0, 0x05]),
        Err(Error::Decode { .. })
    ));
    let mut unknown = vec![0xa4];
    unknown.extend_from_slice(b"Nope");
    let mut frame = (unknown.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&unknown);
    assert!(matches!(
        decode_frame::<Command>(&frame),
        Err(Error::Decode { .. })
    ));
    // An empty body is not a message either.
    assert!(matches!(
        decode_frame::<Reply>(&[0, 0, 0, 0]),
        Err(Error::Decode { len: 0, .. })
    ));
}

#[test]
fn body_claiming_a_huge_string_fails_cleanly() {
    // {"SetIntegration": {"name": <str32 of 4 GiB>}} inside a 20-byte body.
    let mut body = vec![0x81, 0xae];
    body.extend_from_slice(b"SetIntegration");
    body.extend_from_slice(&[0x81, 0xa4]);
    body.extend_from_slice(b"name");
    body.extend_from_slice(&[0xdb, 0xff, 0xff, 0xff, 0xff]);
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    assert!(matches!(
        decode_frame::<Command>(&frame),
        Err(Error::Decode { .. })
    ));
}

fn sync_frame(nonce: u64) -> Vec<u8> {
    encode_frame(&Command::Sync { nonce }).unwrap()
}

/// A frame of the given body, whatever it holds.
fn raw_frame(body: &[u8]) -> Vec<u8> {
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

#[test]
fn find_sync_recognises_sync_frames_and_their_prefixes() {
    // Other encoders' Sync frames: a variant index instead of the name, the struct as an
    // array, a str8 name.
    let mut other_encodings = vec![
        raw_frame(&[0x81, 0x08, 0x91, 0x05]),
        raw_frame(&[0x81, 0xa4, b'S', b'y', b'n', b'c', 0x91, 0xcc, 0x80]),
    ];
    let mut str8 = vec![0x81, 0xd9, 4];
    str8.extend_from_slice(b"Sync");
    str8.extend_from_slice(&[0x81, 0xa5]);
    str8.extend_from_slice(b"nonce");
    str8.push(0x05);
    other_encodings.push(raw_frame(&str8));

    let nonces = [0, 127, 128, 255, 256, 65_535, 65_536, 1 << 40, u64::MAX];
    for sync in nonces.map(sync_frame).into_iter().chain(other_encodings) {
        assert!(sync.len() - HEADER_LEN <= MAX_SYNC_BODY_LEN);
        assert_eq!(find_sync(&sync, 0..sync.len()), SyncSearch::Found(0));
        // Every proper prefix may still become one: only more bytes can tell.
        for cut in 1..sync.len() {
            assert_eq!(
                find_sync(&sync[..cut], 0..cut),
                SyncSearch::Undecided(0),
                "{sync:02x?} cut after {cut} bytes"
            );
        }
        // Behind garbage, and behind a frame claiming to go past it.
        for garbage in [
            &b"\xff\xff\xff\xffjunk"[..],
            &[3, 0, 0, 0, 0xc1],
            &[0x40, 0, 0, 0],
        ] {
            let mut buf = garbage.to_vec();
            buf.extend_from_slice(&sync);
            assert_eq!(
                find_sync(&buf, 0..buf.len()),
                SyncSearch::Found(garbage.len())
            );
            // Offsets outside the range are not searched.
            assert_eq!(find_sync(&buf, 0..garbage.len()), SyncSearch::Absent);
            assert!(!matches!(
                find_sync(&buf, garbage.len() + 1..buf.len()),
                SyncSearch::Found(_)
            ));
        }
    }
}

#[test]
fn find_sync_rejects_what_cannot_be_a_sync_frame() {
    let sync = sync_frame(42);
    let body = &sync[HEADER_LEN..];
    // Other commands, a Sync body with a trailing byte, an empty body, a length above the
    // bound (even with a valid Sync body behind it).
    let mut trailing = body.to_vec();
    trailing.push(0);
    let mut padded_len = sync.clone();
    padded_len[0] = (MAX_SYNC_BODY_LEN + 1) as u8;
    for bytes in [
        encode_frame(&Command::Ping).unwrap(),
        encode_frame(&Command::SetVersion(1)).unwrap(),
        raw_frame(&trailing),
        vec![0, 0, 0, 0],
        padded_len,
        b"\xff\xff\xff\xffjunk".to_vec(),
    ] {
        let found = find_sync(&bytes, 0..bytes.len());
        assert!(
            !matches!(found, SyncSearch::Found(_)),
            "{bytes:02x?}: {found:?}"
        );
    }
    // Tails that cannot begin a Sync header, and tails that can.
    assert_eq!(find_sync(b"junk", 0..4), SyncSearch::Absent);
    assert_eq!(find_sync(&[0x0e, 0x01, 0xff], 0..3), SyncSearch::Absent);
    assert_eq!(find_sync(&[0x0e, 0x00], 0..2), SyncSearch::Undecided(0));
    assert_eq!(
        find_sync(&[0xff, 0x0e, 0x00, 0x00], 0..4),
        SyncSearch::Undecided(1)
    );
    // A cut body whose bytes already rule out a Sync: an unknown variant, a message that
    // ends before the claimed length.
    let pong = [0x10, 0, 0, 0, 0x81, 0xa4, b'P', b'o', b'n', b'g'];
    assert_eq!(find_sync(&pong, 0..1), SyncSearch::Absent);
    let mut finished_early = sync.clone();
    finished_early[0] += 1;
    assert_eq!(find_sync(&finished_early, 0..1), SyncSearch::Absent);
    // (A cut string cannot be judged before it is complete, even where no Sync could
    // start: the search waits rather than guess.)
    assert_eq!(find_sync(&pong[..7], 0..1), SyncSearch::Undecided(0));
}

#[test]
fn find_sync_prefers_a_complete_sync_frame_to_an_earlier_undecided_candidate() {
    // A candidate claiming 64 bytes, whose body begins like a Sync (with an unknown
    // 44-byte string field, which decoding would skip), then a real Sync frame: the
    // candidate cannot be judged yet, the real frame can.
    let mut body = vec![0x81, 0xa4];
    body.extend_from_slice(b"Sync");
    body.extend_from_slice(&[0x82, 0xa5]);
    body.extend_from_slice(b"nonce");
    body.extend_from_slice(&[0x00, 0xa1, b'x', 0xd9, 44]);
    let mut buf = (MAX_SYNC_BODY_LEN as u32).to_le_bytes().to_vec();
    buf.extend_from_slice(&body);
    let at = buf.len();
    buf.extend_from_slice(&sync_frame(7));
    assert_eq!(find_sync(&buf, 0..at), SyncSearch::Undecided(0));
    assert_eq!(find_sync(&buf, 0..buf.len()), SyncSearch::Found(at));
}

fn arb_marker() -> impl Strategy<Value = Marker> {
    prop_oneof![
        any::<u64>().prop_map(|timestamp_ns| Marker::SampleStart { timestamp_ns }),
        any::<u64>().prop_map(|timestamp_ns| Marker::SampleEnd { timestamp_ns }),
        any::<u64>().prop_map(|timestamp_ns| Marker::BenchmarkStart { timestamp_ns }),
        any::<u64>().prop_map(|timestamp_ns| Marker::BenchmarkEnd { timestamp_ns }),
    ]
}

fn arb_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        any::<u64>().prop_map(Command::SetVersion),
        (".*", ".*").prop_map(|(name, version)| Command::SetIntegration { name, version }),
        (any::<u32>(), ".*").prop_map(|(pid, uri)| Command::CurrentBenchmark { pid, uri }),
        Just(Command::StartBenchmark),
        Just(Command::StopBenchmark),
        (any::<u32>(), arb_marker()).prop_map(|(pid, marker)| Command::AddMarker { pid, marker }),
        Just(Command::Ping),
        Just(Command::GetIntegrationMode),
        any::<u64>().prop_map(|nonce| Command::Sync { nonce }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_commands_round_trip(cmd in arb_command()) {
        let frame = encode_frame(&cmd).unwrap();
        prop_assert_eq!(decode_frame::<Command>(&frame).unwrap(), cmd);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_errors_explain(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let announced = bytes.first_chunk::<4>().map(|h| u32::from_le_bytes(*h));
        for result in [
            decode_frame::<Command>(&bytes).map(|_| ()),
            decode_frame::<Reply>(&bytes).map(|_| ()),
            read_frame::<Command, _>(&mut &bytes[..]).map(|_| ()),
        ] {
            match (result, announced) {
                (Ok(()), _) => {}
                (Err(Error::FrameTooLarge { len, .. }), Some(n)) => {
                    prop_assert!(n > MAX_FRAME_LEN);
                    prop_assert_eq!(len, u64::from(n));
                }
                (Err(e @ (Error::IncompleteFrame { .. } | Error::TrailingBytes { .. } | Error::Decode { .. })), _) => {
                    prop_assert!(!e.to_string().is_empty());
                }
                (Err(other), _) => prop_assert!(false, "unexpected error kind {other:?}"),
            }
        }
        // The streaming splitter agrees with the length check.
        match split_frame(&bytes) {
            Ok(Some((body, used))) => {
                prop_assert_eq!(used, HEADER_LEN + body.len());
                prop_assert_eq!(Some(body.len() as u32), announced);
            }
            Ok(None) => prop_assert!(announced.is_none_or(|n| n as usize > bytes.len() - HEADER_LEN)),
            Err(Error::FrameTooLarge { .. }) => prop_assert!(announced.unwrap() > MAX_FRAME_LEN),
            Err(other) => prop_assert!(false, "unexpected split error {other:?}"),
        }
    }

    #[test]
    fn arbitrary_bodies_behind_a_valid_header_fail_cleanly(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        match decode_frame::<Command>(&frame) {
            Ok(cmd) => {
                // Whatever decoded must re-encode to a frame that decodes the same way.
                let again = encode_frame(&cmd).unwrap();
                prop_assert_eq!(decode_frame::<Command>(&again).unwrap(), cmd);
            }
            Err(Error::Decode { len, .. }) => prop_assert_eq!(len, body.len()),
            Err(Error::TrailingBytes { what, .. }) => prop_assert_eq!(what, "message"),
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    /// A Sync frame behind garbage is found where it starts.
    #[test]
    fn find_sync_finds_a_sync_frame_behind_garbage(
        garbage in proptest::collection::vec(any::<u8>(), 0..300),
        nonce in any::<u64>(),
    ) {
        let mut buf = garbage.clone();
        buf.extend_from_slice(&sync_frame(nonce));
        prop_assert_eq!(find_sync(&buf, 0..buf.len()), SyncSearch::Found(garbage.len()));
        // Whatever the bytes, searching never panics, and a hit is a Sync frame.
        if let SyncSearch::Found(at) = find_sync(&garbage, 0..garbage.len()) {
            let (body, _) = split_frame(&garbage[at..]).unwrap().unwrap();
            let is_sync = matches!(decode_body::<Command>(body), Ok(Command::Sync { .. }));
            prop_assert!(is_sync);
        }
    }

    /// The runner trusts that no command frame holds a Sync frame: its strings cannot
    /// (the Sync header followed by a map marker is not UTF-8), and numbers only for
    /// contrived values.
    #[test]
    fn command_frames_hold_no_sync_frame(cmd in arb_command()) {
        let frame = encode_frame(&cmd).unwrap();
        let found = find_sync(&frame, 1..frame.len());
        prop_assert!(!matches!(found, SyncSearch::Found(_)), "{:?}: {:?}", cmd, found);
    }

    #[test]
    fn oversized_headers_are_always_rejected(len in (MAX_FRAME_LEN + 1)..=u32::MAX, tail in proptest::collection::vec(any::<u8>(), 0..16)) {
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(&tail);
        let is_too_large = matches!(
            decode_frame::<Command>(&bytes),
            Err(Error::FrameTooLarge { len: l, .. }) if l == u64::from(len)
        );
        prop_assert!(is_too_large);
    }
}
