//! Results of benchmarks that the latest run of their program did not measure (removed,
//! renamed, or filtered out): kept, but apart from the current run's, so that `memtrack
//! report` neither reports them as current nor checks them against limits.
//!
//! In-process, each benchmark's result lands in a directory of its own
//! (`target/memtrack/criterion/ID/`), replacing that benchmark's earlier one; a
//! benchmark that is gone leaves its directory behind. At the end of a run that saved
//! results, every result file below the base that the same program (its executable's
//! file name, cargo's hash left out) wrote in another process is renamed with
//! [`STALE_SUFFIX`] (its stacks file too): `memtrack report` reads only
//! `*.MemtrackResult.msgpack`, and the file stays for whoever wants it.

use std::path::{Path, PathBuf};

use memtrack::{MemtrackResult, stacks::stacks_file_name};

/// Appended to a stale result's (and stacks file's) name: `123.MemtrackResult.msgpack.stale`.
pub const STALE_SUFFIX: &str = ".stale";

/// A program's file name, cargo's `-` and 16 hex digits left out:
/// `target/release/deps/alloc-1a2b3c4d5e6f7a8b` is `alloc`.
pub fn program_name(program: &str) -> &str {
    let name = program.rsplit('/').next().unwrap_or(program);
    match name.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            stem
        }
        _ => name,
    }
}

/// Renames, below `base`, the result files of program `program` ([`program_name`]) not
/// written by process `pid`, and their stacks files, adding [`STALE_SUFFIX`]. Returns
/// the new paths of the result files renamed, in the tree's order. Files that cannot be
/// read are left alone (`memtrack report` names them); a rename that fails is returned
/// as an error after the others were tried.
pub fn keep_apart(base: &Path, pid: u32, program: &str) -> std::io::Result<Vec<PathBuf>> {
    let tree = match MemtrackResult::scan_tree(base) {
        Ok(tree) => tree,
        // Nothing saved there yet.
        Err(_) if !base.exists() => return Ok(Vec::new()),
        Err(e) => return Err(std::io::Error::other(e)),
    };
    let mut renamed = Vec::new();
    let mut failed = None;
    for dir in &tree.dirs {
        for result in &dir.results {
            let p = &result.process;
            let same_program = p
                .command
                .first()
                .is_some_and(|c| program_name(c) == program);
            if p.pid == pid || !same_program {
                continue;
            }
            let here = base.join(&dir.relative);
            for name in [result.file_name(), stacks_file_name(p.pid)] {
                let from = here.join(&name);
                if name != result.file_name() && !from.exists() {
                    continue;
                }
                let to = here.join(format!("{name}{STALE_SUFFIX}"));
                match std::fs::rename(&from, &to) {
                    Ok(()) if name == result.file_name() => renamed.push(to),
                    Ok(()) => {}
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(renamed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack::{BenchmarkStats, Stats, TrackedProcess};

    fn save(dir: &Path, pid: u32, program: &str) -> PathBuf {
        let mut p = TrackedProcess::new(pid, 1, vec![program.into(), "--bench".into()]);
        p.benchmarks
            .push(BenchmarkStats::new("some::bench", Stats::default()));
        std::fs::create_dir_all(dir).unwrap();
        MemtrackResult::new(p).write_to_dir(dir).unwrap()
    }

    #[test]
    fn only_the_same_programs_other_results_are_kept_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let bench = "/ci/target/release/deps/alloc-1a2b3c4d5e6f7a8b";
        let current = save(&base.join("criterion/kept"), 100, bench);
        let gone = save(&base.join("criterion/removed"), 90, bench);
        std::fs::write(
            base.join("criterion/removed/90.MemtrackStacks.msgpack"),
            b"x",
        )
        .unwrap();
        let other = save(
            &base.join("criterion/other"),
            80,
            "/ci/target/release/deps/other",
        );
        let renamed = keep_apart(base, 100, "alloc").unwrap();
        assert_eq!(
            renamed,
            [base.join("criterion/removed/90.MemtrackResult.msgpack.stale")]
        );
        assert!(current.exists() && other.exists() && !gone.exists());
        assert!(
            base.join("criterion/removed/90.MemtrackStacks.msgpack.stale")
                .exists()
        );
        // What report reads now: the current run's and the other program's.
        let tree = MemtrackResult::scan_tree(base).unwrap();
        let pids: Vec<u32> = tree
            .dirs
            .iter()
            .flat_map(|d| d.results.iter().map(|r| r.process.pid))
            .collect();
        assert_eq!(pids, [100, 80]);
        // Nothing saved yet: nothing to do.
        assert!(
            keep_apart(&base.join("none"), 1, "alloc")
                .unwrap()
                .is_empty()
        );
        assert_eq!(program_name("alloc"), "alloc");
        assert_eq!(program_name("a/my-prog"), "my-prog");
    }
}
