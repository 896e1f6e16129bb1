//! A results directory (`memtrack run -o DIR`) that holds the results of an earlier run:
//! refused, or emptied of them first with `--replace`, so that a report of the directory
//! is always one run's, never two mixed.

use memtrack::OutputDir;

use crate::error::{Error, Result};

/// Whether `name` is a file `memtrack run` writes into a results directory: a result
/// (`{pid}.MemtrackResult.msgpack`), a process's stacks (`{pid}.MemtrackStacks.msgpack`)
/// or the markers of the integrations (`MarkerResult.msgpack`).
pub fn is_memtrack_file(name: &str) -> bool {
    memtrack::is_result_file_name(name)
        || memtrack::stacks::is_stacks_file_name(name)
        || name == fifo_protocol::MARKER_RESULT_FILE_NAME
}

/// Makes `out` ready for a new run: with no files of memtrack's in it, nothing to do;
/// with some, [`Error::EarlierResults`] unless `replace`, in which case exactly those are
/// removed, through the directory's handle (a symbolic link among them is removed
/// itself, never followed; nothing else in the directory is touched). Returns how many
/// were removed.
pub fn prepare(out: &OutputDir, replace: bool) -> Result<usize> {
    let earlier = out.names(is_memtrack_file)?;
    if earlier.is_empty() {
        return Ok(0);
    }
    if !replace {
        return Err(Error::EarlierResults {
            dir: out.path().to_path_buf(),
            count: earlier.len(),
            first: earlier[0].clone(),
        });
    }
    for name in &earlier {
        out.remove_file(name)?;
    }
    Ok(earlier.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earlier_results_are_refused_or_removed_alone() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutputDir::open(dir.path(), None).unwrap();
        assert_eq!(prepare(&out, false).unwrap(), 0);
        for name in [
            "7.MemtrackResult.msgpack",
            "7.MemtrackStacks.msgpack",
            "MarkerResult.msgpack",
            "notes.txt",
        ] {
            out.write_file(name, b"x").unwrap();
        }
        let err = prepare(&out, false).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "results directory {} already holds the results of an earlier run (3 files, \
                 7.MemtrackResult.msgpack first): give a new directory, or --replace to \
                 remove them first",
                dir.path().display()
            )
        );
        assert_eq!(prepare(&out, true).unwrap(), 3);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["notes.txt"]);
    }
}
