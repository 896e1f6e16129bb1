//! The stacks exports, each made from the same [`StackProfile`]s
//! (`memtrack report --stacks DIR --dhat FILE --pprof FILE --flamegraph-dir DIR`):
//!
//! - [`dhat`]: valgrind DHAT's JSON format, which `dh_view.html` opens;
//! - [`pprof`]: pprof's `profile.proto`, gzipped (pprof, speedscope, the Firefox
//!   profiler read it);
//! - [`flamegraph`]: flamegraph SVGs of the bytes allocated, at peak and leaked
//!   (inferno).
//!
//! [`StackProfile`]: crate::stack_profile::StackProfile

pub mod dhat;
pub mod flamegraph;
pub mod pprof;

use std::path::{Path, PathBuf};

use crate::{Error, NotWritten, Result};

/// Writes `bytes` to `path`, naming the file in the error. The file is made with mode
/// 0600 (its stacks name the command's files and functions, as result files do, which
/// are 0600 too) and opened without following a symbolic link, nor blocking on a FIFO:
/// `memtrack report` may run as root, and a link planted at the path must not steer
/// the write. An existing regular file is replaced.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let failed = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => not_written(path, NotWritten::SymbolicLink),
            _ => failed(e),
        })?;
    if !file.metadata().map_err(failed)?.is_file() {
        return Err(not_written(path, NotWritten::NotRegular));
    }
    file.set_len(0).map_err(failed)?;
    file.write_all(bytes).map_err(failed)
}

fn not_written(path: &Path, reason: NotWritten) -> Error {
    Error::NotWritten {
        path: path.to_path_buf(),
        reason,
    }
}

/// Checks, before anything is shown, that an export can be written to `path`: a
/// regular file or nothing there (not a directory, not a symbolic link), in a directory
/// that exists.
pub fn check_file_target(path: &Path) -> Result<()> {
    match path.symlink_metadata() {
        Ok(m) if m.file_type().is_symlink() => Err(not_written(path, NotWritten::SymbolicLink)),
        Ok(m) if m.is_dir() => Err(not_written(path, NotWritten::Directory)),
        Ok(m) if !m.is_file() => Err(not_written(path, NotWritten::NotRegular)),
        Ok(_) => Ok(()),
        Err(_) => check_parent(path, "its directory"),
    }
}

/// The directory `path` goes in must exist: exports make no directories above their
/// own.
fn check_parent(path: &Path, named: &'static str) -> Result<()> {
    let dir = directory_of(path).to_path_buf();
    match dir.metadata() {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(not_written(path, NotWritten::DirectoryIsNot { named, dir })),
        Err(_) => Err(not_written(path, NotWritten::NoDirectory { named, dir })),
    }
}

/// Fails when two of the export `targets` (each the flag that named it, and the file)
/// are one file: the second would silently replace the first.
pub fn check_distinct_targets(targets: &[(&str, PathBuf)]) -> Result<()> {
    // The same file: the same name in the same directory (compared once resolved, so
    // `./a.json` and `a.json` are one; a directory not there yet was refused before).
    let keys: Vec<PathBuf> = targets
        .iter()
        .map(|(_, path)| {
            let dir = directory_of(path);
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            dir.join(path.file_name().unwrap_or_default())
        })
        .collect();
    for (i, &(flag, ref path)) in targets.iter().enumerate() {
        if let Some(j) = keys[..i].iter().position(|k| *k == keys[i]) {
            let other = targets[j].0;
            let why = if other == flag {
                NotWritten::NamedTwice(flag.to_string())
            } else {
                NotWritten::NamedByTwo {
                    first: other.to_string(),
                    second: flag.to_string(),
                }
            };
            return Err(not_written(path, why));
        }
    }
    Ok(())
}

/// The directory a file `path` names goes in: its parent, or `.` for a bare name.
pub fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Checks, before anything is shown, that `dir` is a directory or can be made one (in
/// a directory that exists): not a file, not a symbolic link.
pub fn check_dir_target(dir: &Path) -> Result<()> {
    match dir.symlink_metadata() {
        Ok(m) if m.file_type().is_symlink() => Err(not_written(dir, NotWritten::SymbolicLink)),
        Ok(m) if !m.is_dir() => Err(not_written(dir, NotWritten::NotADirectory)),
        Ok(_) => Ok(()),
        Err(_) => check_parent(dir, "its parent directory"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_private_and_never_written_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        write_file(&path, b"first, longer").unwrap();
        write_file(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let target = dir.path().join("target");
        std::fs::write(&target, b"kept").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = write_file(&link, b"x").unwrap_err().to_string();
        assert!(e.contains("is a symbolic link: not written"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"kept");
        let e = check_file_target(&link).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
    }

    #[test]
    fn targets_are_checked_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        check_file_target(&file).unwrap();
        check_file_target(&dir.path().join("new.json")).unwrap();
        let e = check_file_target(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = check_file_target(&dir.path().join("missing/x.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing does not exist"), "{e}");
        check_dir_target(dir.path()).unwrap();
        check_dir_target(&dir.path().join("new")).unwrap();
        let e = check_dir_target(&file).unwrap_err().to_string();
        assert!(e.contains("exists and is not a directory"), "{e}");
    }
}
