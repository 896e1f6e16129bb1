//! What the runner remembers of a session, and the `MarkerResult.msgpack` file it writes.
//!
//! The runner only receives markers; turning them into per-benchmark memory figures
//! happens later, in another process, from this file. Keeping the record's type here,
//! next to the messages that feed it, keeps the producer and the consumer in one crate
//! with one schema version.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::message::Marker;

/// File name the runner writes a session's [`MarkerResult`] under.
pub const MARKER_RESULT_FILE_NAME: &str = "MarkerResult.msgpack";

/// Schema version written into [`MarkerResult::schema_version`]; also the newest version
/// [`MarkerResult::read_from`] accepts.
pub const MARKER_RESULT_SCHEMA_VERSION: u32 = 1;

/// Everything the shared handling of a runner recorded during one session, in arrival
/// order. Timestamps are `CLOCK_MONOTONIC` nanoseconds ([`now_ns`](crate::now_ns)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerResult {
    /// Layout version of this record; [`MARKER_RESULT_SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    /// Protocol version the integration announced and the runner accepted, if any.
    pub protocol_version: Option<u64>,
    /// Integration that announced itself, if any.
    pub integration: Option<IntegrationInfo>,
    /// Which benchmark became current for which process, and when.
    pub benchmarks: Vec<BenchmarkSpan>,
    /// Markers in the order the runner received them.
    pub markers: Vec<MarkerEntry>,
    /// Measurement windows opened by `StartBenchmark` and closed by `StopBenchmark`.
    pub measurements: Vec<MeasurementWindow>,
}

/// Name and version from a `SetIntegration` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntegrationInfo {
    /// Integration name.
    pub name: String,
    /// Integration version string.
    pub version: String,
}

/// A `CurrentBenchmark` command: `uri` is current for `pid` from `since_ns` until the next
/// entry for the same pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchmarkSpan {
    /// Process id of the benchmarked process.
    pub pid: u32,
    /// Benchmark identifier.
    pub uri: String,
    /// `CLOCK_MONOTONIC` time in ns at which the runner received the command.
    pub since_ns: u64,
}

/// An `AddMarker` command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerEntry {
    /// Process id that emitted the marker.
    pub pid: u32,
    /// The marker, with the integration's own timestamp.
    pub marker: Marker,
}

/// A span between `StartBenchmark` and `StopBenchmark`, stamped by the runner on receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasurementWindow {
    /// `CLOCK_MONOTONIC` ns at which `StartBenchmark` was received.
    pub start_ns: u64,
    /// `CLOCK_MONOTONIC` ns at which `StopBenchmark` was received; `None` while open.
    pub stop_ns: Option<u64>,
}

impl Default for MarkerResult {
    fn default() -> Self {
        Self::new()
    }
}

impl MarkerResult {
    /// An empty record with the current schema version.
    pub fn new() -> Self {
        MarkerResult {
            schema_version: MARKER_RESULT_SCHEMA_VERSION,
            protocol_version: None,
            integration: None,
            benchmarks: Vec::new(),
            markers: Vec::new(),
            measurements: Vec::new(),
        }
    }

    /// The benchmark uri that was current for `pid` at `timestamp_ns` (`CLOCK_MONOTONIC`
    /// ns), i.e. the latest [`BenchmarkSpan`] of that pid that started at or before it.
    pub fn benchmark_at(&self, pid: u32, timestamp_ns: u64) -> Option<&str> {
        self.benchmarks
            .iter()
            .filter(|b| b.pid == pid && b.since_ns <= timestamp_ns)
            .max_by_key(|b| b.since_ns)
            .map(|b| b.uri.as_str())
    }

    /// Opens a measurement window at `now_ns`.
    ///
    /// # Errors
    /// A message for the integration if a window is already open.
    pub(crate) fn start_measurement(&mut self, now_ns: u64) -> std::result::Result<(), String> {
        if let Some(open) = self.measurements.last().filter(|w| w.stop_ns.is_none()) {
            return Err(format!(
                "StartBenchmark while a measurement started at {} ns is still running",
                open.start_ns
            ));
        }
        self.measurements.push(MeasurementWindow {
            start_ns: now_ns,
            stop_ns: None,
        });
        Ok(())
    }

    /// Closes the open measurement window at `now_ns`.
    ///
    /// # Errors
    /// A message for the integration if no window is open.
    pub(crate) fn stop_measurement(&mut self, now_ns: u64) -> std::result::Result<(), String> {
        match self.measurements.last_mut() {
            Some(w) if w.stop_ns.is_none() => {
                w.stop_ns = Some(now_ns);
                Ok(())
            }
            _ => Err("StopBenchmark without a preceding StartBenchmark".to_owned()),
        }
    }

    /// The record's MessagePack encoding (a map with named fields), as
    /// [`write_to_dir`](Self::write_to_dir) writes it; for writers that create the file
    /// themselves (memtrack's runner writes it through a directory handle, as the user it
    /// runs the command as).
    ///
    /// # Errors
    /// [`Error::Encode`].
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec_named(self).map_err(|source| Error::Encode {
            what: "MarkerResult",
            source,
        })
    }

    /// Writes the record as `dir/MarkerResult.msgpack` (mode 0644) atomically: to a
    /// temporary file in `dir`, then renamed over the final name, so a reader never
    /// sees a half-written file. Returns the final path.
    ///
    /// # Errors
    /// [`Error::Encode`], or [`Error::Io`] naming the path that could not be written.
    pub fn write_to_dir(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(MARKER_RESULT_FILE_NAME);
        let bytes = self.to_bytes()?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".MarkerResult.")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io("create a temporary file in", dir, e))?;
        let tmp_path = tmp.path().to_owned();
        tmp.write_all(&bytes)
            .and_then(|()| {
                tmp.as_file()
                    .set_permissions(fs::Permissions::from_mode(0o644))
            })
            .map_err(|e| Error::io("write", &tmp_path, e))?;
        tmp.persist(&path)
            .map_err(|e| Error::io("rename a temporary file to", &path, e.error))?;
        Ok(path)
    }

    /// Reads a record written by [`write_to_dir`](Self::write_to_dir) (pass the file's
    /// path, not the directory).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read, [`Error::CorruptMarkerFile`] if it is
    /// truncated or malformed, [`Error::UnsupportedSchema`] if a newer memtrack wrote it.
    pub fn read_from(path: &Path) -> Result<Self> {
        #[derive(Deserialize)]
        struct SchemaProbe {
            schema_version: u32,
        }

        let bytes = fs::read(path).map_err(|e| Error::io("read", path, e))?;
        let corrupt = |source| Error::CorruptMarkerFile {
            path: path.to_owned(),
            source,
        };
        // Check the version first: a newer layout may not decode as this one at all.
        let probe: SchemaProbe = decode_whole(&bytes).map_err(corrupt)?;
        if probe.schema_version > MARKER_RESULT_SCHEMA_VERSION {
            return Err(Error::UnsupportedSchema {
                path: path.to_owned(),
                found: probe.schema_version,
                supported: MARKER_RESULT_SCHEMA_VERSION,
            });
        }
        decode_whole(&bytes).map_err(corrupt)
    }
}

/// Decodes `bytes` as exactly one `T`, rejecting trailing bytes (a file with garbage
/// appended is as corrupt as a truncated one).
fn decode_whole<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> std::result::Result<T, rmp_serde::decode::Error> {
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(bytes));
    let value = T::deserialize(&mut de)?;
    let used = de.position() as usize;
    if used != bytes.len() {
        return Err(rmp_serde::decode::Error::Syntax(format!(
            "{} trailing bytes after the {used}-byte record",
            bytes.len() - used
        )));
    }
    Ok(value)
}
