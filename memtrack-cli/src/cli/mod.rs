//! The `memtrack` binary's commands, one module each, and what they share: the limits
//! and lost events checked after a run or a report, the tree of results read for a
//! report or a diff. Each command returns the exit code it ends with, or the
//! [`Error`] the binary reports.

pub mod diff;
pub mod out_file;
pub mod report;
pub mod run;
pub mod stacks;

use std::path::{Path, PathBuf};

use memtrack::{MemtrackResult, TrackedProcess};
use memtrack_cli::{Error, NoResults, exit_code::Outcome};
use memtrack_report::{
    limits::{self, DirResults, Limit},
    units,
};

/// What `run` and `report` check in the results besides printing them.
pub struct Checks {
    /// The limits of `--limit` and `--limits FILE`.
    pub limits: Vec<Limit>,
    /// `--fail-on-lost`.
    pub fail_on_lost: bool,
}

impl Checks {
    /// The limits given with `--limit`, and those of `--limits FILE`.
    pub fn new(
        mut limits: Vec<Limit>,
        file: Option<&Path>,
        fail_on_lost: bool,
    ) -> Result<Self, Error> {
        if let Some(file) = file {
            limits.extend(limits::read_file(file).map_err(memtrack_report::Error::from)?);
        }
        Ok(Checks {
            limits,
            fail_on_lost,
        })
    }

    /// Checks the limits and lost events in `dirs`, saying on stderr what it found: the
    /// exit code for a command that exited `command` (with results `not_saved`: some
    /// file could not be written), or an error for a limit that matches nothing.
    pub fn check(
        &self,
        dirs: &[DirResults],
        unattributed_lost: u64,
        command: u8,
        not_saved: bool,
    ) -> Result<u8, Error> {
        let lost: u64 = dirs
            .iter()
            .flat_map(|(_, processes)| processes.iter())
            .map(|p| p.stats.lost_events)
            .sum::<u64>()
            + unattributed_lost;
        if lost != 0 {
            eprintln!(
                "memtrack: {} lost: some numbers are not exact",
                units::count(lost, "event")
            );
        }
        let checked = limits::check(&self.limits, dirs);
        for line in &checked.exceeded {
            eprintln!("memtrack: limit exceeded: {line}");
        }
        if !checked.unmatched.is_empty() {
            return Err(Error::UnmatchedLimits(checked.unmatched));
        }
        if !self.limits.is_empty() && checked.exceeded.is_empty() {
            eprintln!(
                "memtrack: {} held ({})",
                units::count(self.limits.len() as u64, "limit"),
                units::count(checked.checks as u64, "check")
            );
        }
        Ok(Outcome {
            command,
            limit_exceeded: !checked.exceeded.is_empty(),
            lost_is_failure: self.fail_on_lost && lost != 0,
            not_saved,
        }
        .code())
    }
}

/// A tree's results, by directory, and how many files were skipped.
pub struct Found {
    /// The processes of each directory (relative to the one read).
    pub dirs: Vec<(PathBuf, Vec<TrackedProcess>)>,
    /// Files or directories refused (each named on stderr).
    pub refused: usize,
}

impl Found {
    /// The directories as the reports take them.
    pub fn dir_results(&self) -> Vec<DirResults<'_>> {
        self.dirs
            .iter()
            .map(|(dir, processes)| (dir.as_path(), processes.as_slice()))
            .collect()
    }

    /// How many result files were read.
    pub fn results(&self) -> usize {
        self.dirs.iter().map(|(_, p)| p.len()).sum()
    }
}

/// Reads the results in `dir` and below, naming on stderr each file or directory
/// refused. No results at all is an error.
pub fn read_tree(dir: &Path) -> Result<Found, Error> {
    let tree = MemtrackResult::scan_tree(dir)?;
    for refused in &tree.refused {
        eprintln!("memtrack: skipped {refused}");
    }
    if tree.dirs.is_empty() {
        let dir = dir.to_path_buf();
        return Err(Error::NothingToReport(if tree.refused.is_empty() {
            NoResults::None {
                dir,
                searched_below: tree.dirs_searched.saturating_sub(1),
            }
        } else {
            NoResults::Unreadable {
                dir,
                count: tree.refused.len(),
            }
        }));
    }
    Ok(Found {
        refused: tree.refused.len(),
        dirs: tree
            .dirs
            .into_iter()
            .map(|d| {
                let processes = d.results.into_iter().map(|r| r.process).collect();
                (d.relative, processes)
            })
            .collect(),
    })
}
