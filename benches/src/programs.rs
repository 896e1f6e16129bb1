//! The C and C++ workload programs, compiled once per benchmark run.
//!
//! Their sources are embedded in the runner, so the binary works from any directory, and
//! compiled with gcc/g++ -O2 into a private temporary directory that is removed when the
//! runner ends. Each program times its own loop (CLOCK_MONOTONIC), so nothing the tracker
//! does before or after the loop (attaching, detaching) is in the figures.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::BenchResult;

/// Shared by every program: arguments, clock, result line.
const TIMING_H: &str = include_str!("../programs/timing.h");
/// Single-threaded loops, one mode per allocation function.
const ALLOC_LOOPS_C: &str = include_str!("../programs/alloc_loops.c");
/// C++ `new[]` / `delete[]` pairs.
const NEW_DELETE_CC: &str = include_str!("../programs/new_delete.cc");
/// N threads of malloc/free pairs.
const THREADS_C: &str = include_str!("../programs/threads.c");
/// Loops at the bottom of a deep recursion (benchmark 6, stacks).
const DEEP_LOOPS_C: &str = include_str!("../programs/deep_loops.c");

/// The compiled workloads; dropping it removes the temporary directory.
pub struct Programs {
    /// Made with a random name, exclusively, mode 0700 (the runner runs as root: a
    /// predictable name under /tmp could be planted in advance).
    dir: tempfile::TempDir,
    /// `alloc_loops MODE OPS`.
    pub alloc_loops: PathBuf,
    /// `new_delete OPS`.
    pub new_delete: PathBuf,
    /// `threads THREADS OPS_PER_THREAD`.
    pub threads: PathBuf,
    /// `deep_loops MODE LEVELS OPS`.
    pub deep_loops: PathBuf,
}

impl Programs {
    /// Writes the sources into a fresh temporary directory and compiles them.
    pub fn build() -> BenchResult<Programs> {
        let dir = tempfile::Builder::new()
            .prefix("memtrack-benches-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let programs = Programs {
            alloc_loops: dir.path().join("alloc_loops"),
            new_delete: dir.path().join("new_delete"),
            threads: dir.path().join("threads"),
            deep_loops: dir.path().join("deep_loops"),
            dir,
        };
        programs.write("timing.h", TIMING_H)?;
        programs.compile("gcc", "alloc_loops.c", ALLOC_LOOPS_C, &[])?;
        programs.compile("g++", "new_delete.cc", NEW_DELETE_CC, &[])?;
        programs.compile("gcc", "threads.c", THREADS_C, &["-pthread"])?;
        programs.compile("gcc", "deep_loops.c", DEEP_LOOPS_C, &[])?;
        Ok(programs)
    }

    /// Where tracked runs' stdout goes (one run at a time; overwritten by each).
    pub fn stdout_file(&self) -> PathBuf {
        self.dir.path().join("stdout.txt")
    }

    /// Writes `text` into the temporary directory as `name`.
    fn write(&self, name: &str, text: &str) -> BenchResult<PathBuf> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Compiles `source` (named `file`) into an executable named after its stem.
    fn compile(&self, compiler: &str, file: &str, source: &str, extra: &[&str]) -> BenchResult<()> {
        let src = self.write(file, source)?;
        let out = self
            .dir
            .path()
            .join(Path::new(file).file_stem().unwrap_or_default());
        let status = Command::new(compiler)
            .args(["-O2", "-Wall", "-o"])
            .arg(&out)
            .arg(&src)
            .args(extra)
            .status()
            .map_err(|e| format!("cannot run {compiler} (is build-essential installed?): {e}"))?;
        if !status.success() {
            return Err(format!("{compiler} failed to compile {file} ({status})").into());
        }
        Ok(())
    }
}
