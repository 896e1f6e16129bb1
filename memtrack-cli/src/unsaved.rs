//! A file of a run that could not be saved (a full disk, a quota, an I/O error): named
//! with its final path, not the temporary one it was written under, and its cause, so
//! that `memtrack run` can say which results are missing and why, one line per file,
//! after printing the report it still holds.

use std::path::PathBuf;

/// One file not saved.
#[derive(Debug)]
pub struct Unsaved {
    /// The file's path as it would have been (`DIR/123.MemtrackResult.msgpack`,
    /// `run.json`).
    pub path: PathBuf,
    /// What it holds: `the result of process 123`, `the JSON report`.
    pub what: String,
    /// Why it was not saved.
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl Unsaved {
    /// The deepest cause of the failure (`No space left on device (os error 28)`): the
    /// error chain's last source, which names what the system said rather than which
    /// temporary file it said it of.
    pub fn cause(&self) -> String {
        let mut error: &dyn std::error::Error = self.source.as_ref();
        while let Some(next) = error.source() {
            error = next;
        }
        error.to_string()
    }
}

impl std::fmt::Display for Unsaved {
    /// `not saved: DIR/123.MemtrackResult.msgpack (the result of process 123): No space
    /// left on device (os error 28)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not saved: {} ({}): {}",
            self.path.display(),
            self.what,
            self.cause()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line names the final file and the system's words, not the error's outer
    /// layers (which name a temporary file).
    #[test]
    fn the_line_names_the_result_file_and_the_cause() {
        let io = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let outer = memtrack::Error::from(memtrack_record::Error::OutputDir {
            dir: PathBuf::from("/r/.123.MemtrackResult.msgpack.tmp-x"),
            what: memtrack_record::OutputStep::Write,
            source: io,
        });
        let unsaved = Unsaved {
            path: PathBuf::from("/r/123.MemtrackResult.msgpack"),
            what: "the result of process 123".into(),
            source: Box::new(outer),
        };
        assert_eq!(
            unsaved.to_string(),
            "not saved: /r/123.MemtrackResult.msgpack (the result of process 123): No \
             space left on device (os error 28)"
        );
    }
}
