//! Result files: one `{pid}.MemtrackResult.msgpack` per tracked process, MessagePack maps
//! with named fields (rmp-serde), written atomically, read back with clear errors; and
//! [`RunResults`], every process of one run, which the JSON report serialises.
//!
//! A file is a thin versioned envelope, [`MemtrackResult`], around the process's
//! [`TrackedProcess`] record; [`SCHEMA_VERSION`] says what each version differs in.
//! Real files written by each version are checked in under `tests/data/` and read by
//! memtrack-core's tests.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{
    bounded_read::{self, RESULT_FILES},
    error::{Error, FileRefused, Result},
    output_dir::OutputDir,
    process::{BenchmarkStats, TrackedProcess},
};

/// The schema version this build writes, and the newest it reads. The JSON report
/// ([`RunResults`]) carries the same number: its processes are the same records.
///
/// - **1**: `stats.syscalls` is always a map.
/// - **2** (since `count_syscalls(false)` / `--no-syscalls`): `stats.syscalls` is nil
///   when the syscalls were not counted. Nothing else differs, so version 1 files read
///   as version 2 with `syscalls` present.
/// - **3**: the process, each earlier image and each benchmark region may carry a
///   `timeline` (memory over time, [`crate::timeline`]); files of versions 1 and 2 read
///   without one. A timeline that does not hold together (buckets out of order, a
///   minimum above its maximum, a maximum above the scope's peak) refuses its file.
///
/// `schema_version` is checked before anything else; fields added in later versions
/// carry `#[serde(default)]` so older files stay readable; a file from a newer memtrack
/// is refused with [`Error::FutureSchema`] naming the file. The version changes only
/// with the layout.
pub const SCHEMA_VERSION: u32 = 3;

/// Suffix of result file names: `{pid}.MemtrackResult.msgpack`.
pub const RESULT_FILE_SUFFIX: &str = ".MemtrackResult.msgpack";

/// Whether `name` is the name of a result file memtrack writes
/// (`{anything}.MemtrackResult.msgpack`, not hidden: the temporary files memtrack writes
/// before renaming them into place start with `.`).
pub fn is_result_file_name(name: &str) -> bool {
    name.ends_with(RESULT_FILE_SUFFIX) && !name.starts_with('.')
}

/// The version of the memtrack library of this build (`memtrack_version` in what it
/// writes).
fn this_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// One result file: the record of one tracked process in a versioned envelope. On
/// disk the envelope's fields and the process's sit side by side in one MessagePack map
/// with named fields: `schema_version`, `memtrack_version`, `pid`, `ppid`, `command`,
/// `started_ns`, `started_unix_ms`, `ended_ns`, `exit_code`, `exit_signal`,
/// `allocator`, `probes`, `stats`, `earlier_images`, `benchmarks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemtrackResult {
    /// Version of this format ([`SCHEMA_VERSION`] when written by this build; an older
    /// one when read from an older file).
    pub schema_version: u32,
    /// Version of the memtrack that wrote it.
    pub memtrack_version: String,
    /// The process, its counters and its benchmarks.
    #[serde(flatten)]
    pub process: TrackedProcess,
}

#[derive(Deserialize)]
struct VersionOnly {
    schema_version: u32,
}

impl MemtrackResult {
    /// The result file of `process`, in this build's schema version.
    pub fn new(process: TrackedProcess) -> Self {
        MemtrackResult {
            schema_version: SCHEMA_VERSION,
            memtrack_version: this_version(),
            process,
        }
    }

    /// `{pid}.MemtrackResult.msgpack`.
    pub fn file_name(&self) -> String {
        format!("{}{RESULT_FILE_SUFFIX}", self.process.pid)
    }

    /// The MessagePack encoding (a map with named fields).
    pub fn to_bytes(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("a MemtrackResult always serialises")
    }

    /// Decodes a file's bytes, which must be exactly one MessagePack value (trailing
    /// bytes are refused); `path` only names the file in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self> {
        let mut rest = bytes;
        let refused = |cause| Error::ResultFile {
            path: path.to_path_buf(),
            cause,
        };
        let version: VersionOnly =
            rmp_serde::from_read(&mut rest).map_err(|e| refused(FileRefused::NotMessagePack(e)))?;
        if !rest.is_empty() {
            return Err(refused(FileRefused::TrailingBytes {
                trailing: rest.len(),
                length: bytes.len() - rest.len(),
            }));
        }
        if version.schema_version > SCHEMA_VERSION {
            return Err(Error::FutureSchema {
                path: path.to_path_buf(),
                found: version.schema_version,
                supported: SCHEMA_VERSION,
            });
        }
        let result: MemtrackResult =
            rmp_serde::from_slice(bytes).map_err(|e| refused(FileRefused::Corrupt(e)))?;
        result.process.validate_timelines().map_err(refused)?;
        Ok(result)
    }

    /// Writes `dir/{pid}.MemtrackResult.msgpack` atomically, creating `dir` if needed,
    /// through [`OutputDir`] (no link planted in `dir` is followed; mode 0600). Returns
    /// the path written.
    pub fn write_to_dir(&self, dir: &Path) -> Result<PathBuf> {
        OutputDir::create_all(dir, None)?.write_file(&self.file_name(), &self.to_bytes())
    }

    /// Reads one result file (a regular file of at most
    /// [`MAX_RESULT_FILE_BYTES`](crate::MAX_RESULT_FILE_BYTES)).
    pub fn read_from(path: &Path) -> Result<Self> {
        let bytes =
            bounded_read::read_path(path, RESULT_FILES)?.map_err(|cause| Error::ResultFile {
                path: path.to_path_buf(),
                cause,
            })?;
        Self::from_bytes(&bytes, path)
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
    /// [`MAX_RESULT_FILE_BYTES`](crate::MAX_RESULT_FILE_BYTES) holding one result, and says why each other one was
    /// refused: symbolic links are not followed, FIFOs and devices not opened, larger
    /// files not read. Fails only if `dir` itself cannot be read.
    pub fn scan_dir(dir: &Path) -> Result<ResultScan> {
        let mut scan = ResultScan::default();
        for file in bounded_read::read_files(dir, is_result_file_name, RESULT_FILES)? {
            match file.read_result() {
                Ok(result) => scan.results.push(result),
                Err(e) => scan.refused.push(e),
            }
        }
        scan.results.sort_by_key(|r| r.process.pid);
        Ok(scan)
    }
}

/// Every tracked process of one run, versioned: what `memtrack run` collects and
/// `memtrack report` reads back from a directory, and, serialised, the JSON report
/// (`{"schema_version": 2, "memtrack_version": "0.1.0", "processes": [...]}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunResults {
    /// Version of the process records' format: [`SCHEMA_VERSION`] when made by this
    /// build (files of older versions are read into today's records).
    pub schema_version: u32,
    /// Version of the memtrack that made this (not of the files it was read from).
    pub memtrack_version: String,
    /// The processes, ordered by pid.
    pub processes: Vec<TrackedProcess>,
}

impl RunResults {
    /// The results of `processes` (sorted by pid here), in this build's schema version.
    pub fn new(mut processes: Vec<TrackedProcess>) -> Self {
        processes.sort_by_key(|p| p.pid);
        RunResults {
            schema_version: SCHEMA_VERSION,
            memtrack_version: this_version(),
            processes,
        }
    }

    /// Reads every result file in `dir` ([`MemtrackResult::read_dir`]).
    pub fn read_dir(dir: &Path) -> Result<Self> {
        let files = MemtrackResult::read_dir(dir)?;
        Ok(Self::new(files.into_iter().map(|f| f.process).collect()))
    }

    /// Writes one result file per process into `dir` ([`MemtrackResult::write_to_dir`]);
    /// returns the paths written, in pid order.
    pub fn write_to_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.processes
            .iter()
            .map(|p| MemtrackResult::new(p.clone()).write_to_dir(dir))
            .collect()
    }

    /// The process with this pid, if it was tracked.
    pub fn process(&self, pid: u32) -> Option<&TrackedProcess> {
        self.processes.iter().find(|p| p.pid == pid)
    }

    /// Every benchmark of every process with the process it ran in: in pid order, then
    /// in the order the regions were counted.
    pub fn benchmarks(&self) -> impl Iterator<Item = (&TrackedProcess, &BenchmarkStats)> {
        self.processes
            .iter()
            .flat_map(|p| p.benchmarks.iter().map(move |b| (p, b)))
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
    use crate::{
        process::AllocatorStatus,
        process::ProbeInfo,
        stats::{FunctionStats, Stats, SyscallStats},
    };

    fn sample() -> MemtrackResult {
        let malloc = FunctionStats {
            calls: 3,
            bytes: 300,
            ..FunctionStats::default()
        };
        let mut stats = Stats {
            alloc_calls: 3,
            bytes_allocated: 300,
            syscalls: Some(SyscallStats {
                mmap_calls: 2,
                mmap_bytes: 8192,
                ..SyscallStats::default()
            }),
            ..Stats::default()
        };
        stats.functions.insert("malloc".to_string(), malloc);
        let mut process = TrackedProcess::new(42, 1, vec!["prog".into(), "arg".into()]);
        process.started_ns = 10;
        process.started_unix_ms = 20;
        process.ended_ns = Some(30);
        process.exit_code = Some(0);
        process.allocator = AllocatorStatus::Probed;
        process.probes = vec![ProbeInfo {
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
        }];
        process.stats = stats;
        process.benchmarks = vec![BenchmarkStats::new("bench::one", Stats::default())];
        let mut result = MemtrackResult::new(process);
        result.memtrack_version = "test".into();
        result
    }

    #[test]
    fn round_trips_through_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let result = sample();
        let path = result.write_to_dir(dir.path()).unwrap();
        assert_eq!(path.file_name().unwrap(), "42.MemtrackResult.msgpack");
        assert_eq!(MemtrackResult::read_from(&path).unwrap(), result);
        let mut other = sample();
        other.process.pid = 7;
        other.write_to_dir(dir.path()).unwrap();
        let all = MemtrackResult::read_dir(dir.path()).unwrap();
        assert_eq!(
            all.iter().map(|r| r.process.pid).collect::<Vec<_>>(),
            vec![7, 42]
        );
        // The same directory as the results of one run.
        let run = RunResults::read_dir(dir.path()).unwrap();
        assert_eq!(run.schema_version, SCHEMA_VERSION);
        assert_eq!(run.processes, vec![other.process, result.process]);
        let benchmarks: Vec<(u32, &str)> = run
            .benchmarks()
            .map(|(p, b)| (p.pid, b.uri.as_str()))
            .collect();
        assert_eq!(benchmarks, vec![(7, "bench::one"), (42, "bench::one")]);
        assert_eq!(run.process(42).map(|p| p.pid), Some(42));
        assert_eq!(run.process(43), None);
    }

    #[test]
    fn run_results_write_one_file_per_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut second = sample().process;
        second.pid = 43;
        let run = RunResults::new(vec![second, sample().process]);
        let paths = run.write_to_dir(dir.path()).unwrap();
        assert_eq!(
            paths,
            vec![
                dir.path().join("42.MemtrackResult.msgpack"),
                dir.path().join("43.MemtrackResult.msgpack")
            ]
        );
        assert_eq!(RunResults::read_dir(dir.path()).unwrap(), run);
    }

    #[test]
    fn is_one_flat_map_with_named_fields() {
        // Any MessagePack reader sees one map keyed by field name: the envelope's fields
        // beside the process's, in this order.
        let value: rmpv::Value = rmpv::decode::read_value(&mut &sample().to_bytes()[..]).unwrap();
        let map = value.as_map().expect("a map");
        let keys: Vec<&str> = map.iter().filter_map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "schema_version",
                "memtrack_version",
                "pid",
                "ppid",
                "command",
                "started_ns",
                "started_unix_ms",
                "ended_ns",
                "exit_code",
                "exit_signal",
                "allocator",
                "probes",
                "stats",
                "earlier_images",
                "benchmarks"
            ]
        );
        assert_eq!(map[0].1.as_u64(), Some(u64::from(SCHEMA_VERSION)));
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
        assert!(RunResults::read_dir(dir.path()).is_err());
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
