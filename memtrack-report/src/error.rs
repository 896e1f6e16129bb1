//! The errors of the reports and exports: reading the record (the record's own errors),
//! writing an export or a report file, reading a limits file.

use std::path::PathBuf;

/// What went wrong making a report or an export.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the results or the stacks failed.
    #[error(transparent)]
    Record(#[from] memtrack_record::Error),

    /// Writing a file failed.
    #[error("writing {}: {source}", .path.display())]
    Write {
        /// The file (or directory).
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// A file is not written where it was asked for (checked before anything is shown).
    #[error("writing {}: {reason}: not written", .path.display())]
    NotWritten {
        /// The file (or directory) asked for.
        path: PathBuf,
        /// Why not.
        reason: NotWritten,
    },

    /// A limits file cannot be read, or one of its lines is not a limit.
    #[error("{0}")]
    LimitsFile(#[from] LimitsFileError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an export is not written where it was asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotWritten {
    /// A symbolic link is there (never written through).
    #[error("is a symbolic link")]
    SymbolicLink,
    /// A directory is there, where a file was asked for.
    #[error("is a directory (give a file name)")]
    Directory,
    /// Something that is not a regular file is there.
    #[error("is not a regular file")]
    NotRegular,
    /// A file is there, where a directory was asked for.
    #[error("exists and is not a directory")]
    NotADirectory,
    /// The directory it goes in does not exist (exports make no directories above
    /// their own).
    #[error("{named} {} does not exist", .dir.display())]
    NoDirectory {
        /// "its directory" or "its parent directory".
        named: &'static str,
        /// That directory.
        dir: PathBuf,
    },
    /// The directory it goes in is not a directory.
    #[error("{named} {} is not a directory", .dir.display())]
    DirectoryIsNot {
        /// "its directory" or "its parent directory".
        named: &'static str,
        /// That path.
        dir: PathBuf,
    },
    /// One flag names the file twice.
    #[error("{0} names it twice")]
    NamedTwice(String),
    /// Two flags name the same file.
    #[error("{first} and {second} both name it: give each export its own file")]
    NamedByTwo {
        /// The flag named first.
        first: String,
        /// The other.
        second: String,
    },
}

/// Why a limits file was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsFileError {
    /// The file cannot be read.
    #[error("cannot read limits file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a limit.
    #[error("{}, line {line}: {reason}", .path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it (as `--limit` says it).
        reason: String,
    },
}
