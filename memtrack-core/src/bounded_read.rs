//! Reading files that anyone may have put in a results directory (`memtrack report DIR`),
//! in bounded time and memory: regular files only, never through a symbolic link, never
//! blocking on a FIFO or a device, never more than a size limit.
//!
//! A directory's entries are looked at with `fstatat(AT_SYMLINK_NOFOLLOW)` first, so
//! links, FIFOs, sockets and devices are refused without being opened at all; a regular
//! file is then opened `O_NOFOLLOW|O_NONBLOCK|O_NOCTTY` relative to the directory's handle
//! and checked again with `fstat` (it may have been swapped in between), and at most
//! `limit + 1` bytes are read from it, so a file that grows while it is read is refused
//! too.

use std::{
    io::Read,
    os::fd::AsFd,
    path::{Path, PathBuf},
};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};

use crate::error::{Error, Result};

/// The largest result file `memtrack report` reads: 64 MiB. Real ones are a few KiB (a
/// process with ten thousand benchmark regions is about 10 MiB); anything bigger is not a
/// result memtrack wrote.
pub const MAX_RESULT_FILE_BYTES: u64 = 64 << 20;

/// One file of a directory, as read by [`read_files`].
#[derive(Debug)]
pub(crate) struct DirFile {
    /// Its path (the directory joined with its name).
    pub path: PathBuf,
    /// Its bytes, or why it was refused ([`Error::ResultFile`]).
    pub bytes: Result<Vec<u8>>,
}

/// Reads every entry of `dir` whose name `wanted` accepts (names that are not UTF-8 are
/// passed over), each as [`read_at`] does. Fails only if `dir` itself cannot be read.
pub(crate) fn read_files(
    dir: &Path,
    wanted: impl Fn(&str) -> bool,
    limit: u64,
) -> Result<Vec<DirFile>> {
    let fd = rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(dir, e.into()))?;
    let names = entry_names(&fd, dir, wanted)?;
    Ok(read_names(&fd, dir, names, limit))
}

/// The names of the entries of the open directory `fd` (`dir` for messages) that
/// `wanted` accepts, sorted (names that are not UTF-8 are passed over; `.` and `..`
/// never given).
pub(crate) fn entry_names(
    fd: impl AsFd,
    dir: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let dir_err = |e: rustix::io::Errno| Error::io(dir, e.into());
    let mut entries = rustix::fs::Dir::read_from(&fd).map_err(dir_err)?;
    let mut names = Vec::new();
    while let Some(entry) = entries.read() {
        let entry = entry.map_err(dir_err)?;
        if let Ok(name) = std::str::from_utf8(entry.file_name().to_bytes())
            && name != "."
            && name != ".."
            && wanted(name)
        {
            names.push(name.to_owned());
        }
    }
    // In a stable order, so that what is refused is said the same way every time.
    names.sort();
    Ok(names)
}

/// Reads `names` in the open directory `fd` (`dir` for messages), each as [`read_at`]
/// does.
pub(crate) fn read_names(
    fd: impl AsFd,
    dir: &Path,
    names: Vec<String>,
    limit: u64,
) -> Vec<DirFile> {
    names
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            let bytes = read_at(&fd, &name, limit).map_err(|reason| Error::ResultFile {
                path: path.clone(),
                reason,
            });
            DirFile { path, bytes }
        })
        .collect()
}

/// The bytes of the file at `path`, as [`read_at`] reads them ([`Error::ResultFile`] if
/// refused).
pub(crate) fn read_path(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let refused = |reason: String| Error::ResultFile {
        path: path.to_path_buf(),
        reason,
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| refused("not a file name memtrack reads".into()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let fd = rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(dir, e.into()))?;
    read_at(&fd, name, limit).map_err(refused)
}

/// The bytes of `name` in the directory `dir` if it is a regular file of at most `limit`
/// bytes, else why not (for messages: "is a symbolic link ...").
pub(crate) fn read_at(
    dir: impl AsFd,
    name: &str,
    limit: u64,
) -> std::result::Result<Vec<u8>, String> {
    let not_regular = |kind| {
        format!(
            "is {}, not a regular file; not read",
            describe(FileType::from_raw_mode(kind))
        )
    };
    let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| format!("cannot look at it: {e}"))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(not_regular(stat.st_mode));
    }
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open it: {e}"))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| format!("cannot look at it: {e}"))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(not_regular(stat.st_mode));
    }
    let too_big = |size: u64| {
        format!("is {size} bytes, more than the {limit} bytes a result file may have; not read")
    };
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > limit {
        return Err(too_big(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "grew while it was read: {}",
            too_big(bytes.len() as u64)
        ));
    }
    Ok(bytes)
}

/// What kind of file `kind` is, for messages.
pub(crate) fn describe(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of unknown type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn read(dir: &Path, name: &str, limit: u64) -> std::result::Result<Vec<u8>, String> {
        let fd = rustix::fs::openat(CWD, dir, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .unwrap();
        read_at(&fd, name, limit)
    }

    #[test]
    fn a_regular_file_within_the_limit_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"12345").unwrap();
        assert_eq!(read(dir.path(), "f", 5).unwrap(), b"12345");
        assert_eq!(
            read(dir.path(), "f", 4).unwrap_err(),
            "is 5 bytes, more than the 4 bytes a result file may have; not read"
        );
    }

    #[test]
    fn links_fifos_and_devices_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("target"), b"data").unwrap();
        symlink(dir.path().join("target"), dir.path().join("link")).unwrap();
        symlink("/dev/zero", dir.path().join("zero")).unwrap();
        rustix::fs::mknodat(
            CWD,
            dir.path().join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        for (name, kind) in [
            ("link", "a symbolic link"),
            ("zero", "a symbolic link"),
            ("fifo", "a FIFO"),
        ] {
            assert_eq!(
                read(dir.path(), name, MAX_RESULT_FILE_BYTES).unwrap_err(),
                format!("is {kind}, not a regular file; not read"),
                "{name}"
            );
        }
        // A device node itself (not a link to one) is refused before it is opened.
        let fd = rustix::fs::openat(
            CWD,
            "/dev",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        assert_eq!(
            read_at(&fd, "zero", MAX_RESULT_FILE_BYTES).unwrap_err(),
            "is a character device, not a regular file; not read"
        );
    }

    #[test]
    fn a_directory_scan_keeps_going_past_refusals() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.r"), b"a").unwrap();
        symlink("/dev/zero", dir.path().join("b.r")).unwrap();
        std::fs::write(dir.path().join("c.other"), b"c").unwrap();
        let mut files = read_files(dir.path(), |n| n.ends_with(".r"), 10).unwrap();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].bytes.as_ref().unwrap(), b"a");
        let refusal = files[1].bytes.as_ref().unwrap_err().to_string();
        assert!(refusal.contains("b.r: is a symbolic link"), "{refusal}");
    }
}
