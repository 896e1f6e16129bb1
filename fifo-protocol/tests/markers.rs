//! `MarkerResult.msgpack`: atomic writes, faithful reads, and clear errors for files that
//! are missing, truncated, corrupt or from a newer memtrack.

use std::os::unix::fs::PermissionsExt;

use fifo_protocol::{
    BenchmarkSpan, Error, IntegrationInfo, MARKER_RESULT_FILE_NAME, MARKER_RESULT_SCHEMA_VERSION,
    Marker, MarkerEntry, MarkerResult, MeasurementWindow,
};

fn sample() -> MarkerResult {
    MarkerResult {
        protocol_version: Some(1),
        integration: Some(IntegrationInfo {
            name: "divan".into(),
            version: "0.1.17".into(),
        }),
        benchmarks: vec![
            BenchmarkSpan {
                pid: 10,
                uri: "a".into(),
                since_ns: 100,
            },
            BenchmarkSpan {
                pid: 11,
                uri: "b".into(),
                since_ns: 150,
            },
            BenchmarkSpan {
                pid: 10,
                uri: "c".into(),
                since_ns: 200,
            },
        ],
        markers: vec![
            MarkerEntry {
                pid: 10,
                marker: Marker::SampleStart { timestamp_ns: 120 },
            },
            MarkerEntry {
                pid: 10,
                marker: Marker::SampleEnd { timestamp_ns: 130 },
            },
        ],
        measurements: vec![
            MeasurementWindow {
                start_ns: 110,
                stop_ns: Some(140),
            },
            MeasurementWindow {
                start_ns: 210,
                stop_ns: None,
            },
        ],
        ..MarkerResult::new()
    }
}

#[test]
fn written_file_reads_back_identically_and_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let result = sample();
    let path = result.write_to_dir(dir.path()).unwrap();
    assert_eq!(path, dir.path().join(MARKER_RESULT_FILE_NAME));
    assert_eq!(MarkerResult::read_from(&path).unwrap(), result);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );

    // Overwriting replaces the file and leaves no temporary files behind.
    let mut second = result.clone();
    second.markers.clear();
    second.write_to_dir(dir.path()).unwrap();
    assert_eq!(MarkerResult::read_from(&path).unwrap(), second);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [MARKER_RESULT_FILE_NAME]);
}

#[test]
fn file_uses_named_fields_and_a_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = MarkerResult::new().write_to_dir(dir.path()).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let value: SchemaOnly = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(value.schema_version, MARKER_RESULT_SCHEMA_VERSION);
    assert!(bytes.windows(14).any(|w| w == b"schema_version"));
    assert!(bytes.windows(12).any(|w| w == b"measurements"));
}

/// A minimal independent view of the file: only `schema_version`, by name.
#[derive(serde::Deserialize)]
struct SchemaOnly {
    schema_version: u32,
}

#[test]
fn truncated_and_corrupt_files_are_reported_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample().write_to_dir(dir.path()).unwrap();
    let full = std::fs::read(&path).unwrap();

    for cut in [0, 1, full.len() / 2, full.len() - 1] {
        std::fs::write(&path, &full[..cut]).unwrap();
        let err = MarkerResult::read_from(&path).unwrap_err();
        assert!(
            matches!(&err, Error::CorruptMarkerFile { path: p, .. } if p == &path),
            "cut at {cut}: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("truncated or corrupt"), "{msg}");
    }

    let mut appended = full.clone();
    appended.extend_from_slice(b"junk");
    std::fs::write(&path, &appended).unwrap();
    let err = MarkerResult::read_from(&path).unwrap_err();
    assert!(err.to_string().contains("4 trailing bytes"), "{err}");

    std::fs::write(&path, b"\xc1not msgpack").unwrap();
    assert!(matches!(
        MarkerResult::read_from(&path),
        Err(Error::CorruptMarkerFile { .. })
    ));
}

#[test]
fn newer_schema_versions_are_refused_by_name() {
    // What a future memtrack might write: a newer schema with a different layout.
    #[derive(serde::Serialize)]
    struct Future {
        schema_version: u32,
        windows: Vec<(u64, u64)>,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(MARKER_RESULT_FILE_NAME);
    let future = Future {
        schema_version: MARKER_RESULT_SCHEMA_VERSION + 1,
        windows: vec![(1, 2)],
    };
    std::fs::write(&path, rmp_serde::to_vec_named(&future).unwrap()).unwrap();
    let err = MarkerResult::read_from(&path).unwrap_err();
    match &err {
        Error::UnsupportedSchema {
            path: p,
            found,
            supported,
        } => {
            assert_eq!(p, &path);
            assert_eq!(*found, MARKER_RESULT_SCHEMA_VERSION + 1);
            assert_eq!(*supported, MARKER_RESULT_SCHEMA_VERSION);
        }
        other => panic!("expected UnsupportedSchema, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("schema_version 2"),
        "{msg}"
    );
}

#[test]
fn missing_files_and_directories_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope").join(MARKER_RESULT_FILE_NAME);
    let err = MarkerResult::read_from(&missing).unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );

    let err = sample().write_to_dir(&dir.path().join("nope")).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn benchmark_at_picks_the_latest_span_of_that_pid() {
    let r = sample();
    assert_eq!(r.benchmark_at(10, 99), None);
    assert_eq!(r.benchmark_at(10, 100), Some("a"));
    assert_eq!(r.benchmark_at(10, 199), Some("a"));
    assert_eq!(r.benchmark_at(10, 200), Some("c"));
    assert_eq!(r.benchmark_at(11, 1_000), Some("b"));
    assert_eq!(r.benchmark_at(12, 1_000), None);
}
