//! Runner and client talking through real FIFOs: the full command sequence, the shared
//! bookkeeping, handler precedence, versions, shutdown, and several clients at once.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fifo_protocol::{
    BenchmarkSpan, Command, Error, FIFO_DIR_ENV, FifoClient, FifoRunner, IntegrationInfo,
    IntegrationMode, MIN_SUPPORTED_VERSION, MarkerEntry, MarkerResult, PROTOCOL_VERSION, Reply,
    SharedHandling, now_ns,
};

fn client_for(env: &(&'static str, std::ffi::OsString)) -> FifoClient {
    assert_eq!(env.0, FIFO_DIR_ENV);
    FifoClient::connect(&env.1).expect("connect to the runner")
}

#[test]
fn full_session_is_answered_and_recorded() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let env = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    let mut client = client_for(&env);
    let pid = std::process::id();

    let t0 = now_ns();
    let m1 = fifo_protocol::Marker::BenchmarkStart {
        timestamp_ns: now_ns(),
    };
    let m2 = fifo_protocol::Marker::SampleStart {
        timestamp_ns: now_ns(),
    };
    let m3 = fifo_protocol::Marker::SampleEnd {
        timestamp_ns: now_ns(),
    };
    let m4 = fifo_protocol::Marker::BenchmarkEnd {
        timestamp_ns: now_ns(),
    };
    let session = [
        (Command::SetVersion(PROTOCOL_VERSION), Reply::Ack),
        (
            Command::SetIntegration {
                name: "test-harness".into(),
                version: "1.2.3".into(),
            },
            Reply::Ack,
        ),
        (
            Command::CurrentBenchmark {
                pid,
                uri: "tests/end_to_end.rs::bench".into(),
            },
            Reply::Ack,
        ),
        (Command::AddMarker { pid, marker: m1 }, Reply::Ack),
        (Command::StartBenchmark, Reply::Ack),
        (Command::AddMarker { pid, marker: m2 }, Reply::Ack),
        (Command::AddMarker { pid, marker: m3 }, Reply::Ack),
        (Command::StopBenchmark, Reply::Ack),
        (
            Command::AddMarker {
                pid: pid + 1,
                marker: m4,
            },
            Reply::Ack,
        ),
        (Command::Ping, Reply::Ack),
        (
            Command::GetIntegrationMode,
            Reply::IntegrationMode(IntegrationMode::Memory),
        ),
    ];
    for (cmd, expected) in &session {
        assert_eq!(&client.send(cmd).unwrap(), expected, "reply to {cmd:?}");
    }
    // The convenience methods speak the same protocol.
    client.current_benchmark("second").unwrap();
    client.ping().unwrap();
    assert_eq!(client.integration_mode().unwrap(), IntegrationMode::Memory);
    let t1 = now_ns();

    let (result, SharedHandling) = serving.stop().unwrap();
    assert!(
        !std::path::Path::new(&env.1).exists(),
        "FIFO directory left behind"
    );

    assert_eq!(
        result.schema_version,
        fifo_protocol::MARKER_RESULT_SCHEMA_VERSION
    );
    assert_eq!(result.protocol_version, Some(PROTOCOL_VERSION));
    assert_eq!(
        result.integration,
        Some(IntegrationInfo {
            name: "test-harness".into(),
            version: "1.2.3".into()
        })
    );
    let uris: Vec<(u32, &str)> = result
        .benchmarks
        .iter()
        .map(|b| (b.pid, b.uri.as_str()))
        .collect();
    assert_eq!(uris, [(pid, "tests/end_to_end.rs::bench"), (pid, "second")]);
    assert!(
        result
            .benchmarks
            .iter()
            .all(|b| (t0..=t1).contains(&b.since_ns))
    );
    assert!(result.benchmarks[0].since_ns <= result.benchmarks[1].since_ns);
    assert_eq!(
        result.markers,
        [
            MarkerEntry { pid, marker: m1 },
            MarkerEntry { pid, marker: m2 },
            MarkerEntry { pid, marker: m3 },
            MarkerEntry {
                pid: pid + 1,
                marker: m4
            },
        ]
    );
    assert_eq!(result.measurements.len(), 1);
    let window = result.measurements[0];
    let stop = window.stop_ns.expect("window closed by StopBenchmark");
    assert!(t0 <= window.start_ns && window.start_ns <= stop && stop <= t1);
    assert_eq!(
        result.benchmark_at(pid, stop),
        Some("tests/end_to_end.rs::bench")
    );
    assert_eq!(result.benchmark_at(pid, t1), Some("second"));
    assert_eq!(result.benchmark_at(pid + 1, t1), None);
}

#[test]
fn unsupported_versions_are_refused_with_the_supported_range() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    assert_eq!(
        runner.supported_versions(),
        MIN_SUPPORTED_VERSION..=PROTOCOL_VERSION
    );
    let env = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    let mut client = client_for(&env);

    let range = format!("{MIN_SUPPORTED_VERSION}..={PROTOCOL_VERSION}");
    for bad in [PROTOCOL_VERSION + 1, 0, u64::MAX] {
        match client.send(&Command::SetVersion(bad)).unwrap() {
            Reply::Err { message } => {
                assert!(message.contains(&range), "{message}");
                assert!(message.contains(&bad.to_string()), "{message}");
            }
            other => panic!("SetVersion({bad}) answered {other:?}"),
        }
    }
    // The runner still serves, and accepts the current version afterwards.
    client.set_version().unwrap();
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.protocol_version, Some(PROTOCOL_VERSION));
}

#[test]
fn convenience_methods_report_refusals_as_errors() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let env = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    let mut client = client_for(&env);

    match client.stop_benchmark() {
        Err(Error::Rejected { command, message }) => {
            assert_eq!(command, "StopBenchmark");
            assert!(message.contains("without a preceding StartBenchmark"));
        }
        other => panic!("{other:?}"),
    }
    client.start_benchmark().unwrap();
    let err = client.start_benchmark().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("runner rejected StartBenchmark: "),
        "{err}"
    );
    client.stop_benchmark().unwrap();
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.measurements.len(), 1);
}

#[test]
fn the_handler_answers_first_and_falls_back_to_shared_handling() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let env = runner.env_var();
    let starts = Arc::new(Mutex::new(0));
    let seen = Arc::clone(&starts);
    let handler = move |cmd: &Command| match cmd {
        Command::Ping => Some(Reply::Err {
            message: "handled by the mode".into(),
        }),
        Command::StartBenchmark => {
            // Side effect only; the shared bookkeeping must still run.
            *seen.lock().unwrap() += 1;
            None
        }
        Command::CurrentBenchmark { .. } => Some(Reply::Ack), // swallowed: not recorded
        _ => None,
    };
    let serving = runner.spawn(handler).unwrap();
    let mut client = client_for(&env);

    assert_eq!(
        client.send(&Command::Ping).unwrap(),
        Reply::Err {
            message: "handled by the mode".into()
        }
    );
    client.start_benchmark().unwrap();
    client.current_benchmark("not recorded").unwrap();
    assert_eq!(client.integration_mode().unwrap(), IntegrationMode::Memory);
    let (result, _handler) = serving.stop().unwrap();

    assert_eq!(*starts.lock().unwrap(), 1);
    assert_eq!(result.measurements.len(), 1);
    assert_eq!(result.benchmarks, Vec::<BenchmarkSpan>::new());
}

#[test]
fn blocking_serve_stops_promptly_on_shutdown() {
    let mut runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let env = runner.env_var();
    let shutdown = runner.shutdown_handle();
    let server = std::thread::spawn(move || {
        let outcome = runner.serve(&mut SharedHandling);
        (outcome, runner)
    });
    let mut client = client_for(&env);
    client.ping().unwrap();
    // Leave half a frame behind, so the runner is waiting on its partial-frame timer.
    client.set_timeout(Duration::from_millis(50));
    assert!(client.send_raw(&[100, 0, 0, 0, 1]).is_err());

    let asked = Instant::now();
    shutdown.shutdown();
    shutdown.shutdown(); // idempotent
    assert!(shutdown.is_requested());
    let (outcome, runner) = server.join().unwrap();
    outcome.unwrap();
    assert!(
        asked.elapsed() < Duration::from_millis(500),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(runner.into_marker_result(), MarkerResult::new());
}

#[test]
fn concurrent_clients_each_get_their_own_reply() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let env = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();

    let workers: Vec<_> = (0..4)
        .map(|i| {
            let mut client = client_for(&env);
            std::thread::spawn(move || {
                for round in 0..100 {
                    if (i + round) % 2 == 0 {
                        // Ack is the only correct answer to Ping ...
                        assert_eq!(client.send(&Command::Ping).unwrap(), Reply::Ack);
                    } else {
                        // ... and IntegrationMode to GetIntegrationMode: a reply delivered
                        // to the wrong client would be caught.
                        assert_eq!(client.integration_mode().unwrap(), IntegrationMode::Memory);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    serving.stop().unwrap();
}

#[test]
fn clients_may_close_and_reconnect() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let env = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    for i in 0..5 {
        let mut client = client_for(&env);
        client.current_benchmark(&format!("bench-{i}")).unwrap();
        drop(client); // closes both FIFO ends
    }
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.benchmarks.len(), 5);
    assert_eq!(result.benchmarks[4].uri, "bench-4");
}

/// Set (to 1) in the child process `runner_serves_a_child_process` starts.
const CHILD_ENV: &str = "FIFO_PROTOCOL_TEST_CHILD";

/// Child half of `runner_serves_a_child_process`: this test binary re-executes itself with
/// the runner's environment and runs only that test, which then plays this part.
fn child_integration() {
    let mut client = FifoClient::from_env()
        .expect("MEMTRACK_FIFO_DIR must be set by the parent test")
        .expect("connect from the child");
    client.set_version().unwrap();
    client.set_integration("child", "0.0.1").unwrap();
    client.current_benchmark("child::bench").unwrap();
    client.start_benchmark().unwrap();
    client.stop_benchmark().unwrap();
}

#[test]
fn runner_serves_a_child_process() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return child_integration();
    }
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (name, value) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();

    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "runner_serves_a_child_process", "--quiet"])
        .env(name, &value)
        .env(CHILD_ENV, "1")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "child failed: {status}");

    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.integration.unwrap().name, "child");
    assert_eq!(result.benchmarks.len(), 1);
    assert_eq!(result.benchmarks[0].uri, "child::bench");
    assert_ne!(result.benchmarks[0].pid, std::process::id());
    assert!(result.measurements[0].stop_ns.is_some());
}
