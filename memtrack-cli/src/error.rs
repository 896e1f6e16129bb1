//! The errors of `memtrack run` and `memtrack report`: tracking failures (the library's
//! [`memtrack::Error`]), and the runner's own work (the FIFO server, the results
//! directory), each saying what failed.

use std::path::PathBuf;

/// Everything that can go wrong in the runner or the report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Tracking the command failed (loading, attaching, following, reading results).
    #[error(transparent)]
    Tracking(#[from] memtrack::Error),

    /// The FIFO server for benchmark integrations failed.
    #[error("the FIFO server for benchmark integrations: {what}: {source}")]
    Fifo {
        /// What it was doing, e.g. "creating its directory".
        what: &'static str,
        /// The cause.
        #[source]
        source: fifo_protocol::Error,
    },

    /// A stacks file could not be read or is inconsistent.
    #[error("reading stacks from {path}: {reason}")]
    Stacks {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// The results directory holds the results of an earlier run (and `--replace` was
    /// not given): the reports would mix both runs.
    #[error(
        "results directory {} already holds the results of an earlier run ({}, {first} \
         first): give a new directory, or --replace to remove them first",
        .dir.display(),
        crate::units::count(*.count as u64, "file")
    )]
    EarlierResults {
        /// The directory.
        dir: PathBuf,
        /// How many files of memtrack's it holds.
        count: usize,
        /// The first of them, by name.
        first: String,
    },

    /// Writing a result file or an export failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
