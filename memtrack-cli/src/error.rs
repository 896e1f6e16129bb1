//! The errors of the `memtrack` command: everything it reports on stderr as
//! `memtrack: ...` when it fails, with the exit code each one gets
//! ([`Error::exit_code`]). Tracking failures are the library's ([`memtrack::Error`]),
//! reading results the record's, reports and exports the report crate's; the runner's
//! own work and the commands' findings are here.

use std::path::PathBuf;

use crate::exit_code;

/// Everything that makes `memtrack` fail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Tracking the command failed (loading, attaching, following).
    #[error("{}{}", .0, command_hint(.0))]
    Tracking(#[from] memtrack::Error),

    /// Reading or writing results failed.
    #[error(transparent)]
    Record(#[from] memtrack_record::Error),

    /// A report or an export failed, or a limits file was refused.
    #[error(transparent)]
    Report(#[from] memtrack_report::Error),

    /// The FIFO server for benchmark integrations failed.
    #[error("the FIFO server for benchmark integrations: {what}: {source}")]
    Fifo {
        /// What it was doing, e.g. "creating its directory".
        what: &'static str,
        /// The cause.
        #[source]
        source: fifo_protocol::Error,
    },

    /// The results directory holds the results of an earlier run (and `--replace` was
    /// not given): the reports would mix both runs.
    #[error(
        "results directory {} already holds the results of an earlier run ({}, {first} \
         first): give a new directory, or --replace to remove them first",
        .dir.display(),
        memtrack_report::units::count(*.count as u64, "file")
    )]
    EarlierResults {
        /// The directory.
        dir: PathBuf,
        /// How many files of memtrack's it holds.
        count: usize,
        /// The first of them, by name.
        first: String,
    },

    /// `--json FILE` cannot be written.
    #[error("--json {}: {problem}", .path.display())]
    Json {
        /// The file asked for.
        path: PathBuf,
        /// Why not.
        problem: JsonProblem,
    },

    /// `--markdown FILE` cannot be appended to.
    #[error("--markdown {}: {source}", .path.display())]
    Markdown {
        /// The file asked for.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// Limits that match no benchmark or process (each line says which, and why).
    #[error("{}", .0.join("; "))]
    UnmatchedLimits(Vec<String>),

    /// A directory with nothing `memtrack report`, `diff` or `report --stacks` can read.
    #[error(transparent)]
    NothingToReport(NoResults),

    /// `memtrack report --stacks DIR`: no process there has the stacks asked for.
    #[error("no process in {} has stacks{cause}", .dir.display())]
    NoStacks {
        /// The directory.
        dir: PathBuf,
        /// Which stacks were asked for.
        cause: NoStacks,
    },

    /// `memtrack diff` of two runs with nothing to compare.
    #[error(
        "{} and {} have no process or benchmark in common: nothing to compare",
        .base.display(),
        .new.display()
    )]
    NothingInCommon {
        /// The base run's directory.
        base: PathBuf,
        /// The new run's.
        new: PathBuf,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The exit code `memtrack` exits with for this error: a shell's for a command that
    /// could not be started (127 not found, 126 not executable), else
    /// [`MEMTRACK_FAILED`](exit_code::MEMTRACK_FAILED).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Tracking(memtrack::Error::CommandNotFound { .. }) => {
                exit_code::COMMAND_NOT_FOUND
            }
            Error::Tracking(memtrack::Error::NotExecutable { .. }) => exit_code::CANNOT_EXECUTE,
            _ => exit_code::MEMTRACK_FAILED,
        }
    }
}

/// `--stacks 8 -- CMD`: the depth was taken for the command (clap gives the flag's
/// value only with `=`).
fn command_hint(e: &memtrack::Error) -> String {
    match e {
        memtrack::Error::CommandNotFound { command } if command.parse::<u32>().is_ok() => {
            format!(" (a depth of --stacks is written --stacks={command})")
        }
        _ => String::new(),
    }
}

/// Why `--json FILE` cannot be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonProblem {
    /// The path names no file.
    #[error("not a file name")]
    NotAFileName,
    /// A directory is there.
    #[error("is a directory (give a file name)")]
    Directory,
    /// Its directory cannot take it.
    #[error("its directory: {0}")]
    Dir(#[source] memtrack_record::Error),
    /// Writing it failed.
    #[error("writing the JSON report: {0}")]
    Write(#[source] memtrack_record::Error),
}

/// Why a directory has nothing to report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NoResults {
    /// No result file in `dir`, nor in the directories below it.
    #[error(
        "{} holds no result files (*{}){}: nothing to report",
        .dir.display(),
        memtrack::RESULT_FILE_SUFFIX,
        below(*.searched_below)
    )]
    None {
        /// The directory.
        dir: PathBuf,
        /// Directories searched below it.
        searched_below: usize,
    },
    /// The result files in and below `dir` could not be read.
    #[error("{}", unreadable(.dir, *.count))]
    Unreadable {
        /// The directory.
        dir: PathBuf,
        /// How many were refused.
        count: usize,
    },
    /// `report --stacks DIR` (which reads DIR alone): no result file in `dir`; `below`
    /// are the first few of the `count` directories under it that hold results.
    #[error(
        "{} holds no result files (*{}): nothing to report{}",
        .dir.display(),
        memtrack::RESULT_FILE_SUFFIX,
        stacks_below(.below, *.count)
    )]
    NoneHere {
        /// The directory.
        dir: PathBuf,
        /// Result directories below it (the first few).
        below: Vec<PathBuf>,
        /// How many there are in all.
        count: usize,
    },
    /// `report --stacks DIR`: nothing in `dir` could be read.
    #[error(
        "nothing in {} could be read ({} skipped, above): nothing to report",
        .dir.display(),
        memtrack_report::units::count(*.skipped as u64, "file")
    )]
    NothingReadable {
        /// The directory.
        dir: PathBuf,
        /// How many files were skipped.
        skipped: usize,
    },
}

fn below(searched_below: usize) -> String {
    match searched_below {
        0 => String::new(),
        n => format!(" nor do the {n} directories below it"),
    }
}

fn unreadable(dir: &std::path::Path, refused: usize) -> String {
    match refused {
        1 => format!(
            "the one result file in {} could not be read: nothing to report",
            dir.display()
        ),
        n => format!(
            "none of the {} result files in {} could be read: nothing to report",
            memtrack_report::units::exact(n as u64),
            dir.display()
        ),
    }
}

fn stacks_below(below: &[PathBuf], count: usize) -> String {
    if below.is_empty() {
        return String::new();
    }
    let names: Vec<String> = below.iter().map(|p| p.display().to_string()).collect();
    let more = match count.saturating_sub(below.len()) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "; --stacks reads one results directory, and these below it hold results: {}{more}",
        names.join(", ")
    )
}

/// Which stacks `report --stacks` found none of.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NoStacks {
    /// No stacks at all.
    #[error(
        " (they are recorded by memtrack run --stacks, or MEMTRACK_STACKS for the \
         benchmark integrations)"
    )]
    Any,
    /// None of image `image` (`--image`): the processes with stacks there ran at most
    /// `most` images.
    #[error(
        " of image {image} (images are numbered from 1, the image a process started \
         with; the processes with stacks there ran at most {most})"
    )]
    Image {
        /// The image asked for (1 for the first).
        image: usize,
        /// The most images any process with stacks there ran.
        most: usize,
    },
    /// None of benchmark `uri`; `regions` are the benchmarks that have stacks there.
    #[error(" of benchmark {uri} (the exact uri; {})", regions_there(.regions))]
    Benchmark {
        /// The uri asked for.
        uri: String,
        /// The benchmarks with stacks there.
        regions: Vec<String>,
    },
}

fn regions_there(regions: &[String]) -> String {
    if regions.is_empty() {
        "none has stacks of any benchmark".to_string()
    } else {
        format!("benchmarks with stacks there: {}", regions.join(", "))
    }
}
