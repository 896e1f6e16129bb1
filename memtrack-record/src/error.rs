//! The errors of reading and writing memtrack's record: result and stacks files, the
//! results directory, the tree of result directories. Each says which file or directory,
//! and what the cause was, typed.

use std::path::PathBuf;

/// What went wrong reading or writing a part of the record. New kinds of failure may be
/// added (`#[non_exhaustive]`): match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A result file that is unreadable, not a memtrack result, truncated or corrupt.
    #[error("result file {}: {cause}", .path.display())]
    ResultFile {
        /// The file.
        path: PathBuf,
        /// Why it was not read.
        #[source]
        cause: FileRefused,
    },

    /// A result file written by a newer memtrack.
    #[error(
        "result file {} has schema_version {found}, but this memtrack reads versions up \
         to {supported}; upgrade memtrack to read it",
        .path.display()
    )]
    FutureSchema {
        /// The file.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },

    /// A stacks file that is unreadable, truncated, corrupt or inconsistent.
    #[error("reading stacks from {}: {cause}", .path.display())]
    StacksFile {
        /// The file.
        path: PathBuf,
        /// Why it was not read.
        #[source]
        cause: FileRefused,
    },

    /// An I/O error on a path (a directory that cannot be listed, say).
    #[error("{}: {source}", .path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The results directory cannot be used, or writing a file in it failed.
    #[error("results directory {}: cannot {what}: {source}", .dir.display())]
    OutputDir {
        /// The directory (or the file in it) concerned.
        dir: PathBuf,
        /// What memtrack was doing, e.g. "create a file in".
        what: OutputStep,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The results directory is not one memtrack writes into (a symbolic link, not a
    /// directory, no parent, ...).
    #[error("results directory {}: {reason}", .dir.display())]
    OutputDirRefused {
        /// The directory (or the file in it) concerned.
        dir: PathBuf,
        /// Why.
        reason: DirRefused,
    },

    /// A directory below the one searched for results was not searched
    /// ([`MemtrackResult::scan_tree`](crate::MemtrackResult::scan_tree)).
    #[error("searching {} for results: {reason}", .dir.display())]
    ResultTree {
        /// The directory not searched.
        dir: PathBuf,
        /// Why.
        reason: TreeRefused,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// The file or directory the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            Error::ResultFile { path, .. }
            | Error::FutureSchema { path, .. }
            | Error::StacksFile { path, .. }
            | Error::Io { path, .. } => path,
            Error::OutputDir { dir, .. }
            | Error::OutputDirRefused { dir, .. }
            | Error::ResultTree { dir, .. } => dir,
        }
    }
}

/// Why a file of the record was not read, or not understood.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileRefused {
    /// Not a regular file (a symbolic link, a FIFO, a device, a directory): not opened,
    /// or not read once opened.
    #[error("is {kind}, not a regular file; not read")]
    NotRegular {
        /// What it is instead, in words ("a symbolic link").
        kind: &'static str,
    },
    /// Larger than a file of its kind may be.
    #[error("is {size} bytes, more than the {limit} bytes a {kind} file may have; not read")]
    TooLarge {
        /// Its size, in bytes.
        size: u64,
        /// The limit, in bytes.
        limit: u64,
        /// "result" or "stacks".
        kind: &'static str,
    },
    /// It grew beyond the limit while it was read.
    #[error(
        "grew while it was read: is {size} bytes, more than the {limit} bytes a {kind} file \
         may have; not read"
    )]
    Grew {
        /// The bytes read, in bytes (the limit plus one).
        size: u64,
        /// The limit, in bytes.
        limit: u64,
        /// "result" or "stacks".
        kind: &'static str,
    },
    /// A system call on it failed.
    #[error("cannot {op} it: {source}")]
    Io {
        /// What was done: "look at", "open", "read".
        op: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The path names no file (it ends in `/` or `..`, or is not UTF-8).
    #[error("not a file name memtrack reads")]
    BadName,
    /// Not one MessagePack value memtrack wrote.
    #[error("not a memtrack result (truncated or corrupt MessagePack): {0}")]
    NotMessagePack(#[source] rmp_serde::decode::Error),
    /// Bytes after the one MessagePack value a file holds.
    #[error(
        "{trailing} trailing bytes after the {length}-byte result (a result file holds \
         exactly one MessagePack value)"
    )]
    TrailingBytes {
        /// How many, in bytes.
        trailing: usize,
        /// The value's length, in bytes.
        length: usize,
    },
    /// MessagePack that does not decode as the record's fields.
    #[error("truncated or corrupt: {0}")]
    Corrupt(#[source] rmp_serde::decode::Error),
    /// A stacks file that is not the MessagePack of stacks.
    #[error("truncated or corrupt MessagePack: {0}")]
    CorruptStacks(#[source] rmp_serde::decode::Error),
    /// A stacks file of a later format.
    #[error(
        "stacks file version {found}, newer than this memtrack reads ({supported}): \
         written by a later memtrack"
    )]
    FutureStacks {
        /// The version found.
        found: u32,
        /// The newest this build reads.
        supported: u32,
    },
    /// A timeline that does not hold together.
    #[error("the timeline of {scope}: {cause}")]
    Timeline {
        /// "the process", "earlier image N" or "benchmark \"URI\"".
        scope: String,
        /// What is wrong.
        #[source]
        cause: Box<crate::timeline::InvalidTimeline>,
    },
    /// Stacks whose references do not hold together.
    #[error(transparent)]
    Inconsistent(#[from] InvalidStacks),
    /// A stacks file whose earlier images are not those of the result file beside it
    /// (one of them from another run).
    #[error(
        "holds the stacks of {} run before an exec, but the result file of its process \
         names {result}: not from the same run",
        images(*.stacks)
    )]
    OtherImages {
        /// Earlier images in the stacks file.
        stacks: usize,
        /// Earlier images in the result file.
        result: usize,
    },
}

/// What writing into the results directory was doing when it failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputStep {
    /// Opening a directory (the one named, its parent, or one just created).
    Open,
    /// Opening the directory to create a new one in it.
    OpenBase,
    /// Opening the parent directory.
    OpenParent,
    /// Creating the directory.
    Create,
    /// Creating a file in it.
    CreateFile,
    /// Writing a file's bytes.
    Write,
    /// Looking at a directory just created.
    Stat,
    /// Giving a directory or file its mode.
    SetMode(u32),
    /// Handing a file or directory to the command's user.
    HandOver,
    /// Renaming a temporary file to its name.
    Rename {
        /// The temporary name.
        from: String,
        /// The final name.
        to: String,
    },
    /// Removing a file.
    Remove,
}

impl std::fmt::Display for OutputStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputStep::Open => f.write_str("open"),
            OutputStep::OpenBase => f.write_str("open the directory to create it in"),
            OutputStep::OpenParent => f.write_str("open the parent directory"),
            OutputStep::Create => f.write_str("create"),
            OutputStep::CreateFile => f.write_str("create a file in"),
            OutputStep::Write => f.write_str("write"),
            OutputStep::Stat => f.write_str("stat"),
            OutputStep::SetMode(mode) => write!(f, "set mode {mode:04o} on"),
            OutputStep::HandOver => f.write_str("hand over"),
            OutputStep::Rename { from, to } => write!(f, "rename {from} to {to}"),
            OutputStep::Remove => f.write_str("remove"),
        }
    }
}

/// Why a directory is not one memtrack writes results into.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirRefused {
    /// Its parent does not exist (memtrack creates the directory, not its parents).
    #[error("its parent directory {} does not exist", .0.display())]
    NoParent(PathBuf),
    /// A symbolic link where memtrack does not follow one.
    #[error(
        "is a symbolic link, which memtrack does not follow here; give the directory it \
         points to"
    )]
    SymbolicLink,
    /// Something else than a directory.
    #[error("is not a directory (it is {0})")]
    NotADirectory(&'static str),
    /// A directory memtrack created belonged to someone else when it opened it.
    #[error("was replaced while memtrack created it (it belongs to uid {owner}, not {euid})")]
    Replaced {
        /// Its owner then.
        owner: u32,
        /// memtrack's effective user.
        euid: u32,
    },
    /// Every random name tried was taken (someone plants names there).
    #[error("{attempts} random names for a {what} were all taken")]
    NamesTaken {
        /// How many names were tried.
        attempts: usize,
        /// "new directory" or "temporary file".
        what: &'static str,
    },
    /// A file name with a `/`, or `.`, `..`, or empty.
    #[error("not a plain file name")]
    NotPlainName,
}

/// Why a directory below the root of a search was not searched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TreeRefused {
    /// Deeper than a search goes.
    #[error("is more than {0} directories below where the search began; not searched")]
    TooDeep(usize),
    /// Opening or listing it failed.
    #[error("cannot be searched: {0}")]
    Unsearchable(#[source] Box<Error>),
}

/// What is wrong with a process's stacks (a reference out of range, a stack listed
/// twice): found by `ProcessStacks::validate`. Objects and stacks are named by their
/// index in the stacks' tables.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidStacks {
    /// A frame names an object the stacks do not list.
    #[error("stack {stack}, frame {depth}: object {object} does not exist ({})", objects_there(*.objects))]
    NoSuchObject {
        /// The stack's index.
        stack: usize,
        /// The frame's index, innermost first.
        depth: usize,
        /// The object it names.
        object: u32,
        /// How many objects there are.
        objects: usize,
    },
    /// Two stacks with the same frames and end.
    #[error("stacks {0} and {1} are the same stack")]
    Duplicate(usize, usize),
    /// A scope's entry names a stack the stacks do not list.
    #[error("{scope}: stack {stack} does not exist ({stacks} stacks)")]
    NoSuchStack {
        /// "the process", or "region \"URI\"".
        scope: String,
        /// The stack it names.
        stack: u32,
        /// How many stacks there are.
        stacks: usize,
    },
    /// A scope lists one stack twice.
    #[error("{scope}: stack {stack} is listed twice")]
    ListedTwice {
        /// "the process", or "region \"URI\"".
        scope: String,
        /// The stack.
        stack: u32,
    },
}

fn images(n: usize) -> String {
    match n {
        1 => "1 image".to_string(),
        n => format!("{n} images"),
    }
}

fn objects_there(objects: usize) -> String {
    match objects {
        0 => "there are none".to_string(),
        n => format!("objects are numbered from 0 to {}", n - 1),
    }
}
