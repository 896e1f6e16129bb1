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

use crate::error::{Error, FileRefused, Result};

/// The largest result file `memtrack report` reads: 64 MiB. Real ones are a few KiB (a
/// process with ten thousand benchmark regions is about 10 MiB); anything bigger is not a
/// result memtrack wrote.
pub const MAX_RESULT_FILE_BYTES: u64 = 64 << 20;

/// The largest stacks file `memtrack report --stacks` reads: 1 GiB (a million distinct
/// stacks of 64 frames are about 800 MiB).
pub const MAX_STACKS_FILE_BYTES: u64 = 1 << 30;

/// A kind of file the record reads, with its size limit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounded {
    /// "result" or "stacks", for messages.
    pub kind: &'static str,
    /// The most bytes such a file may have.
    pub limit: u64,
}

/// Result files: at most [`MAX_RESULT_FILE_BYTES`].
pub(crate) const RESULT_FILES: Bounded = Bounded {
    kind: "result",
    limit: MAX_RESULT_FILE_BYTES,
};

/// Stacks files: at most [`MAX_STACKS_FILE_BYTES`].
pub(crate) const STACKS_FILES: Bounded = Bounded {
    kind: "stacks",
    limit: MAX_STACKS_FILE_BYTES,
};

/// One file of a directory, as read by [`read_files`].
#[derive(Debug)]
pub(crate) struct DirFile {
    /// Its path (the directory joined with its name).
    pub path: PathBuf,
    /// Its bytes, or why it was refused.
    pub bytes: std::result::Result<Vec<u8>, FileRefused>,
}

impl DirFile {
    /// The result file this is, or why it is not one.
    pub(crate) fn read_result(self) -> Result<crate::MemtrackResult> {
        let path = self.path;
        match self.bytes {
            Ok(bytes) => crate::MemtrackResult::from_bytes(&bytes, &path),
            Err(cause) => Err(Error::ResultFile { path, cause }),
        }
    }
}

/// Reads every entry of `dir` whose name `wanted` accepts (names that are not UTF-8 are
/// passed over), each as [`read_at`] does. Fails only if `dir` itself cannot be read.
pub(crate) fn read_files(
    dir: &Path,
    wanted: impl Fn(&str) -> bool,
    bound: Bounded,
) -> Result<Vec<DirFile>> {
    let fd = rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(dir, e.into()))?;
    let names = entry_names(&fd, dir, wanted)?;
    Ok(read_names(&fd, dir, names, bound))
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
    bound: Bounded,
) -> Vec<DirFile> {
    names
        .into_iter()
        .map(|name| DirFile {
            path: dir.join(&name),
            bytes: read_at(&fd, &name, bound),
        })
        .collect()
}

/// The bytes of the file at `path`, as [`read_at`] reads them: the cause when it was
/// refused, or `Err(Error)` when its directory cannot be opened.
pub(crate) fn read_path(
    path: &Path,
    bound: Bounded,
) -> Result<std::result::Result<Vec<u8>, FileRefused>> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(Err(FileRefused::BadName));
    };
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
    Ok(read_at(&fd, name, bound))
}

/// The bytes of `name` in the directory `dir` if it is a regular file of at most
/// `bound.limit` bytes, else why not.
pub(crate) fn read_at(
    dir: impl AsFd,
    name: &str,
    bound: Bounded,
) -> std::result::Result<Vec<u8>, FileRefused> {
    let io = |op| {
        move |e: rustix::io::Errno| FileRefused::Io {
            op,
            source: e.into(),
        }
    };
    let not_regular = |mode| FileRefused::NotRegular {
        kind: describe(FileType::from_raw_mode(mode)),
    };
    let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io("look at"))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(not_regular(stat.st_mode));
    }
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open"))?;
    let stat = rustix::fs::fstat(&fd).map_err(io("look at"))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(not_regular(stat.st_mode));
    }
    let Bounded { kind, limit } = bound;
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > limit {
        return Err(FileRefused::TooLarge { size, limit, kind });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| FileRefused::Io { op: "read", source })?;
    if bytes.len() as u64 > limit {
        return Err(FileRefused::Grew {
            size: bytes.len() as u64,
            limit,
            kind,
        });
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
        read_at(
            &fd,
            name,
            Bounded {
                kind: "result",
                limit,
            },
        )
        .map_err(|e| e.to_string())
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
            read_at(&fd, "zero", RESULT_FILES).unwrap_err().to_string(),
            "is a character device, not a regular file; not read"
        );
    }

    #[test]
    fn a_directory_scan_keeps_going_past_refusals() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.r"), b"a").unwrap();
        symlink("/dev/zero", dir.path().join("b.r")).unwrap();
        std::fs::write(dir.path().join("c.other"), b"c").unwrap();
        let bound = Bounded {
            kind: "result",
            limit: 10,
        };
        let mut files = read_files(dir.path(), |n| n.ends_with(".r"), bound).unwrap();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].bytes.as_ref().unwrap(), b"a");
        assert_eq!(files[1].path, dir.path().join("b.r"));
        let refusal = files[1].bytes.as_ref().unwrap_err().to_string();
        assert!(refusal.starts_with("is a symbolic link"), "{refusal}");
    }
}
