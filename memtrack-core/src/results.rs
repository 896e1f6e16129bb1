//! Result files: one `{pid}.MemtrackResult.msgpack` per tracked process, MessagePack maps
//! with named fields (rmp-serde), written atomically, read back with clear errors.
//!
//! Compatibility: `schema_version` is checked before anything else; fields added in
//! later versions carry `#[serde(default)]` so older files stay readable; a file from a
//! newer memtrack is refused with [`Error::FutureSchema`] naming the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{
    bounded_read::{self, MAX_RESULT_FILE_BYTES},
    error::{Error, Result},
    loader::ProbeInfo,
    output_dir::OutputDir,
    process::{AllocatorStatus, ImageStats, TrackedProcess},
    stats::Stats,
};

/// The schema version this build writes, and the newest it reads. Version 2: the
/// `syscalls` of a `stats` map may be nil (mmap/munmap/brk not counted); version 1
/// files, which always have them, read the same.
pub const SCHEMA_VERSION: u32 = 2;

/// Suffix of result file names: `{pid}.MemtrackResult.msgpack`.
pub const RESULT_FILE_SUFFIX: &str = ".MemtrackResult.msgpack";

/// The result of tracking one process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemtrackResult {
    /// Version of this format ([`SCHEMA_VERSION`] when written by this build).
    pub schema_version: u32,
    /// Version of the memtrack that wrote it.
    pub memtrack_version: String,
    /// Process id.
    pub pid: u32,
    /// Parent process id (0 if unknown).
    pub ppid: u32,
    /// Command line of the image it ran last.
    pub command: Vec<String>,
    /// When tracking of it began, `CLOCK_MONOTONIC` ns.
    pub started_ns: u64,
    /// When tracking of it began, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// When it exited, `CLOCK_MONOTONIC` ns (None: still running when written).
    pub ended_ns: Option<u64>,
    /// Exit code, if it exited normally.
    pub exit_code: Option<i32>,
    /// Signal that killed it, if any.
    pub exit_signal: Option<i32>,
    /// Whether its allocator was probed; if not, `stats` is not a measurement.
    pub allocator: AllocatorStatus,
    /// What was probed.
    pub probes: Vec<ProbeInfo>,
    /// The counters. When an integration marked benchmark regions, only the regions
    /// were counted and this is their sum.
    pub stats: Stats,
    /// Images the process ran before its last exec, with their own counters.
    #[serde(default)]
    pub earlier_images: Vec<ImageStats>,
    /// The benchmark regions counted in this process, in order (empty when no
    /// integration marked any).
    #[serde(default)]
    pub benchmarks: Vec<BenchmarkStats>,
}

/// One benchmark region's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchmarkStats {
    /// The benchmark's uri, as the integration named it.
    pub uri: String,
    /// Calls made inside the region only.
    pub stats: Stats,
}

#[derive(Deserialize)]
struct VersionOnly {
    schema_version: u32,
}

impl MemtrackResult {
    /// The result of one tracked process.
    pub fn from_process(p: &TrackedProcess) -> Self {
        MemtrackResult {
            schema_version: SCHEMA_VERSION,
            memtrack_version: env!("CARGO_PKG_VERSION").to_string(),
            pid: p.pid,
            ppid: p.ppid,
            command: p.command.clone(),
            started_ns: p.started_ns,
            started_unix_ms: p.started_unix_ms,
            ended_ns: p.ended_ns,
            exit_code: p.exit_code,
            exit_signal: p.exit_signal,
            allocator: p.allocator.clone(),
            probes: p.probes.clone(),
            stats: p.stats.clone(),
            earlier_images: p.earlier_images.clone(),
            benchmarks: Vec::new(),
        }
    }

    /// `{pid}.MemtrackResult.msgpack`.
    pub fn file_name(&self) -> String {
        format!("{}{RESULT_FILE_SUFFIX}", self.pid)
    }

    /// The MessagePack encoding (a map with named fields).
    pub fn to_bytes(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("a MemtrackResult always serialises")
    }

    /// Decodes a file's bytes, which must be exactly one MessagePack value (trailing
    /// bytes are refused); `path` only names the file in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self> {
        let mut rest = bytes;
        let version: VersionOnly =
            rmp_serde::from_read(&mut rest).map_err(|e| Error::ResultFile {
                path: path.to_path_buf(),
                reason: format!("not a memtrack result (truncated or corrupt MessagePack): {e}"),
            })?;
        if !rest.is_empty() {
            return Err(Error::ResultFile {
                path: path.to_path_buf(),
                reason: format!(
                    "{} trailing bytes after the {}-byte result (a result file holds exactly \
                     one MessagePack value)",
                    rest.len(),
                    bytes.len() - rest.len()
                ),
            });
        }
        if version.schema_version > SCHEMA_VERSION {
            return Err(Error::FutureSchema {
                path: path.to_path_buf(),
                found: version.schema_version,
                supported: SCHEMA_VERSION,
            });
        }
        rmp_serde::from_slice(bytes).map_err(|e| Error::ResultFile {
            path: path.to_path_buf(),
            reason: format!("truncated or corrupt: {e}"),
        })
    }

    /// Writes `dir/{pid}.MemtrackResult.msgpack` atomically, creating `dir` if needed,
    /// through [`OutputDir`] (no link planted in `dir` is followed; mode 0600). Returns
    /// the path written.
    pub fn write_to_dir(&self, dir: &Path) -> Result<PathBuf> {
        OutputDir::create_all(dir, None)?.write_file(&self.file_name(), &self.to_bytes())
    }

    /// Reads one result file (a regular file of at most [`MAX_RESULT_FILE_BYTES`]).
    pub fn read_from(path: &Path) -> Result<Self> {
        Self::from_bytes(&bounded_read::read_path(path, MAX_RESULT_FILE_BYTES)?, path)
    }

    /// Reads every `*.MemtrackResult.msgpack` in `dir`, ordered by pid. Any file that
    /// cannot be read is an error naming it ([`scan_dir`](Self::scan_dir) reads the
    /// others anyway).
    pub fn read_dir(dir: &Path) -> Result<Vec<Self>> {
        let scan = Self::scan_dir(dir)?;
        match scan.refused.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(scan.results),
        }
    }

    /// Reads every `*.MemtrackResult.msgpack` in `dir` that is a regular file of at most
    /// [`MAX_RESULT_FILE_BYTES`] holding one result, and says why each other one was
    /// refused: symbolic links are not followed, FIFOs and devices not opened, larger
    /// files not read. Fails only if `dir` itself cannot be read.
    pub fn scan_dir(dir: &Path) -> Result<ResultScan> {
        let is_result = |name: &str| name.ends_with(RESULT_FILE_SUFFIX) && !name.starts_with('.');
        let mut scan = ResultScan::default();
        for file in bounded_read::read_files(dir, is_result, MAX_RESULT_FILE_BYTES)? {
            match file.bytes.and_then(|b| Self::from_bytes(&b, &file.path)) {
                Ok(result) => scan.results.push(result),
                Err(e) => scan.refused.push(e),
            }
        }
        scan.results.sort_by_key(|r| r.pid);
        Ok(scan)
    }
}

/// What [`MemtrackResult::scan_dir`] found in a directory.
#[derive(Debug, Default)]
pub struct ResultScan {
    /// The results read, ordered by pid.
    pub results: Vec<MemtrackResult>,
    /// Result files that were not read or not understood, each error naming its file and
    /// why ([`Error::ResultFile`], [`Error::FutureSchema`]).
    pub refused: Vec<Error>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sample() -> MemtrackResult {
        let mut functions = BTreeMap::new();
        functions.insert(
            "malloc".to_string(),
            crate::stats::FunctionStats {
                calls: 3,
                failures: 0,
                bytes: 300,
                grows: 0,
                shrinks: 0,
            },
        );
        MemtrackResult {
            schema_version: SCHEMA_VERSION,
            memtrack_version: "test".into(),
            pid: 42,
            ppid: 1,
            command: vec!["prog".into(), "arg".into()],
            started_ns: 10,
            started_unix_ms: 20,
            ended_ns: Some(30),
            exit_code: Some(0),
            exit_signal: None,
            allocator: AllocatorStatus::Probed,
            probes: vec![ProbeInfo {
                function: "malloc".into(),
                aliases: vec![],
                object: "/lib/libc.so.6".into(),
                symbol: "malloc".into(),
                file_offset: 0x1000,
                entry_offset: 0,
                entry_instruction: "push %r12".into(),
                entry_emulated: true,
                return_probe: true,
                return_offset: 0,
            }],
            stats: Stats {
                alloc_calls: 3,
                bytes_allocated: 300,
                functions,
                syscalls: Some(crate::stats::SyscallStats {
                    mmap_calls: 2,
                    mmap_bytes: 8192,
                    ..Default::default()
                }),
                ..Stats::default()
            },
            earlier_images: vec![],
            benchmarks: vec![BenchmarkStats {
                uri: "bench::one".into(),
                stats: Stats::default(),
            }],
        }
    }

    #[test]
    fn round_trips_through_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let result = sample();
        let path = result.write_to_dir(dir.path()).unwrap();
        assert_eq!(path.file_name().unwrap(), "42.MemtrackResult.msgpack");
        assert_eq!(MemtrackResult::read_from(&path).unwrap(), result);
        let mut other = sample();
        other.pid = 7;
        other.write_to_dir(dir.path()).unwrap();
        let all = MemtrackResult::read_dir(dir.path()).unwrap();
        assert_eq!(all.iter().map(|r| r.pid).collect::<Vec<_>>(), vec![7, 42]);
    }

    #[test]
    fn uses_named_fields() {
        // Any MessagePack reader sees a map keyed by field name.
        let value: rmpv::Value = rmpv::decode::read_value(&mut &sample().to_bytes()[..]).unwrap();
        let map = value.as_map().expect("a map");
        let keys: Vec<&str> = map.iter().filter_map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"schema_version"));
        assert!(keys.contains(&"stats"));
        assert!(keys.contains(&"pid"));
    }

    #[test]
    fn version_1_files_still_read() {
        // Version 1 differs only in that `syscalls` was always a map.
        let dir = tempfile::tempdir().unwrap();
        let mut old = sample();
        old.schema_version = 1;
        let path = old.write_to_dir(dir.path()).unwrap();
        let read = MemtrackResult::read_from(&path).unwrap();
        assert_eq!(read.schema_version, 1);
        assert_eq!(read.stats.syscalls.unwrap().mmap_calls, 2);
        // Not counted is nil, and reads back as None.
        assert_eq!(read.benchmarks[0].stats.syscalls, None);
    }

    #[test]
    fn truncated_file_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample().write_to_dir(dir.path()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let err = MemtrackResult::read_from(&path).unwrap_err();
        assert!(matches!(err, Error::ResultFile { .. }), "{err:?}");
        assert!(
            err.to_string().contains("42.MemtrackResult.msgpack"),
            "{err}"
        );
        // read_dir reports it too.
        assert!(MemtrackResult::read_dir(dir.path()).is_err());
    }

    #[test]
    fn future_schema_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut future = sample();
        future.schema_version = 999;
        let path = future.write_to_dir(dir.path()).unwrap();
        let err = MemtrackResult::read_from(&path).unwrap_err();
        match &err {
            Error::FutureSchema {
                found, supported, ..
            } => {
                assert_eq!((*found, *supported), (999, SCHEMA_VERSION));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("schema_version 999"), "{err}");
        assert!(
            err.to_string().contains("42.MemtrackResult.msgpack"),
            "{err}"
        );
    }

    #[test]
    fn trailing_bytes_are_refused_by_name() {
        let mut bytes = sample().to_bytes();
        let len = bytes.len();
        bytes.extend_from_slice(b"junk");
        let err = MemtrackResult::from_bytes(&bytes, Path::new("x.msgpack")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "result file x.msgpack: 4 trailing bytes after the {len}-byte result (a result \
                 file holds exactly one MessagePack value)"
            )
        );
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let err = MemtrackResult::from_bytes(b"\xc1garbage", Path::new("x.msgpack")).unwrap_err();
        assert!(err.to_string().contains("x.msgpack"), "{err}");
    }
}
