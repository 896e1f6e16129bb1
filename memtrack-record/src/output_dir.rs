//! The directory result files are written into, held open as a handle from the moment it
//! is chosen, so that nothing done to the names in or above it while memtrack works can
//! redirect a write.
//!
//! Why: `memtrack run` runs as root while the command it tracks runs as the invoking user,
//! who may write the results directory (it is theirs, or memtrack hands it to them). A
//! write by path would follow whatever that user planted there: a symbolic link at the
//! temporary or the final name, a directory swapped for a link. So:
//!
//! - the directory is opened once, `O_DIRECTORY|O_NOFOLLOW` (its last component is never
//!   a symbolic link), and every file is created relative to that handle;
//! - each file is created under a fresh random name with `O_CREAT|O_EXCL|O_NOFOLLOW`, so
//!   no planted name is ever opened, then written, given mode [`FILE_MODE`] and handed to
//!   the owner (`fchown` on the descriptor), and renamed into place with `renameat`, which
//!   replaces whatever the final name was (a planted link included) without following it;
//! - a directory memtrack chooses itself ([`OutputDir::create_private`]) gets an
//!   unpredictable name and is created exclusively (`mkdirat` never reuses an existing
//!   name), mode [`DIR_MODE`].

use std::{
    io::Write,
    os::fd::{AsFd, OwnedFd},
    path::{Path, PathBuf},
};

use rustix::{
    fs::{AtFlags, CWD, FileType, Mode, OFlags},
    io::Errno,
};

use crate::{
    bounded_read::describe,
    error::{DirRefused, Error, OutputStep, Result},
};

/// Mode of every file memtrack writes: readable and writable by its owner only (a result
/// holds the full command line, which is not everyone's business).
pub const FILE_MODE: u32 = 0o600;

/// Mode of every directory memtrack creates.
pub const DIR_MODE: u32 = 0o700;

/// How many random names are tried before giving up (a clash means someone planted that
/// very name; 16 in a row cannot happen by chance with 62 random bits each).
const NAME_ATTEMPTS: usize = 16;

/// A results directory, held open.
#[derive(Debug)]
pub struct OutputDir {
    fd: OwnedFd,
    path: PathBuf,
    owner: Option<(u32, u32)>,
    /// Set when memtrack created the directory: its parent and its name there, so that an
    /// unused one can be removed again.
    created: Option<(OwnedFd, PathBuf)>,
}

impl OutputDir {
    /// Creates a new directory `memtrack-XXXXXXXXXXXX` (random) in the system temporary
    /// directory, mode [`DIR_MODE`], handed to `owner` (uid, gid) when given.
    pub fn create_private(owner: Option<(u32, u32)>) -> Result<Self> {
        Self::create_private_in(&std::env::temp_dir(), owner)
    }

    /// [`create_private`](Self::create_private) in `base` instead of the temporary
    /// directory.
    pub fn create_private_in(base: &Path, owner: Option<(u32, u32)>) -> Result<Self> {
        let base_fd =
            open_dir(CWD, base, true).map_err(|e| output_err(base, OutputStep::OpenBase, e))?;
        for _ in 0..NAME_ATTEMPTS {
            let name = format!("memtrack-{}", random_name());
            match rustix::fs::mkdirat(&base_fd, name.as_str(), Mode::from_raw_mode(DIR_MODE)) {
                Ok(()) => {
                    return Self::adopt_created(base_fd, base.join(&name), name.into(), owner);
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(output_err(&base.join(&name), OutputStep::Create, e)),
            }
        }
        Err(refused(
            base,
            DirRefused::NamesTaken {
                attempts: NAME_ATTEMPTS,
                what: "new directory",
            },
        ))
    }

    /// Uses `path` as the results directory, checked now, before anything runs: an
    /// existing directory, or a new one (mode [`DIR_MODE`], handed to `owner`) created in
    /// its parent, which must exist. Its last component must not be a symbolic link
    /// (memtrack does not follow one there). Fails unless memtrack can create files in it
    /// and hand them to `owner`, which it tries with a temporary file.
    pub fn open(path: &Path, owner: Option<(u32, u32)>) -> Result<Self> {
        let dir = match split_last(path) {
            None => Self::whole(path, owner)?,
            Some((parent, name)) => {
                let parent_fd = open_dir(CWD, parent, true).map_err(|e| match e {
                    Errno::NOENT => refused(path, DirRefused::NoParent(parent.to_path_buf())),
                    e => output_err(parent, OutputStep::OpenParent, e),
                })?;
                Self::in_parent(parent_fd, name, path, owner)?
            }
        };
        dir.check_writable()?;
        Ok(dir)
    }

    /// Opens `path` as the results directory, creating it and any missing parents first
    /// (mode [`DIR_MODE`], handed to `owner`), for a process writing its own results (the
    /// benchmark integrations, in cargo's target directory). The last component must not
    /// be a symbolic link.
    pub fn create_all(path: &Path, owner: Option<(u32, u32)>) -> Result<Self> {
        match split_last(path) {
            None => Self::whole(path, owner),
            Some((parent, name)) => {
                let parent_fd = create_dirs(parent, owner)?;
                Self::in_parent(parent_fd, name, path, owner)
            }
        }
    }

    /// `path` that is `/`, `.` or ends in `..`: no name a link could be planted at.
    fn whole(path: &Path, owner: Option<(u32, u32)>) -> Result<Self> {
        let fd = open_dir(CWD, path, true).map_err(|e| output_err(path, OutputStep::Open, e))?;
        Ok(OutputDir {
            fd,
            path: path.to_path_buf(),
            owner,
            created: None,
        })
    }

    /// The directory `name` in `parent` (`path` for messages), created if missing.
    fn in_parent(
        parent: OwnedFd,
        name: &Path,
        path: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<Self> {
        match open_dir(&parent, name, false) {
            Ok(fd) => Ok(OutputDir {
                fd,
                path: path.to_path_buf(),
                owner,
                created: None,
            }),
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(DIR_MODE)) {
                    Ok(()) => Self::adopt_created(parent, path.to_path_buf(), name.into(), owner),
                    // Made by someone else meanwhile: used as any existing directory is.
                    Err(Errno::EXIST) => Ok(OutputDir {
                        fd: open_dir(&parent, name, false)
                            .map_err(|e| explain_open_failure(&parent, name, path, e))?,
                        path: path.to_path_buf(),
                        owner,
                        created: None,
                    }),
                    Err(e) => Err(output_err(path, OutputStep::Create, e)),
                }
            }
            Err(e) => Err(explain_open_failure(&parent, name, path, e)),
        }
    }

    /// The directory's path, as given (or as chosen), for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `name` in the directory atomically (see the module documentation): a
    /// reader sees the old file or the complete new one, never part of one, and no name
    /// anyone planted in the directory is followed. The file gets mode [`FILE_MODE`] and
    /// belongs to the owner given when the directory was opened. Returns its path.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.path.join(name);
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(refused(&path, DirRefused::NotPlainName));
        }
        let (file, tmp) = self.create_temp(name)?;
        let written = (|| {
            let mut file = std::fs::File::from(file);
            file.write_all(bytes).map_err(|source| Error::OutputDir {
                dir: self.path.join(&tmp),
                what: OutputStep::Write,
                source,
            })?;
            self.finish(&file, &tmp)?;
            // No fsync: the rename is atomic for every reader and survives memtrack
            // being killed (the page cache is the kernel's); syncing guards only against
            // a crash of the machine, and cost 10-70 ms per file here, more than the
            // whole run of a short command.
            rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(|e| {
                output_err(
                    &self.path,
                    OutputStep::Rename {
                        from: tmp.clone(),
                        to: name.to_owned(),
                    },
                    e,
                )
            })
        })();
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        Ok(path)
    }

    /// The names of the directory's entries that `wanted` accepts, sorted (names that
    /// are not UTF-8 are passed over), read through the handle: e.g. the results of an
    /// earlier run, before writing new ones beside them.
    pub fn names(&self, wanted: impl Fn(&str) -> bool) -> Result<Vec<String>> {
        crate::bounded_read::entry_names(&self.fd, &self.path, wanted)
    }

    /// Removes the entry `name` of the directory through the handle (`unlinkat`): a
    /// symbolic link is removed itself, never what it points to; a directory is refused.
    pub fn remove_file(&self, name: &str) -> Result<()> {
        let path = self.path.join(name);
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(refused(&path, DirRefused::NotPlainName));
        }
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
            .map_err(|e| output_err(&path, OutputStep::Remove, e))
    }

    /// Removes the directory again if memtrack created it and it is still empty (a run
    /// that failed before writing anything leaves no litter). Never removes anything else.
    pub fn remove_if_unused(self) {
        if let Some((parent, name)) = &self.created {
            let _ = rustix::fs::unlinkat(parent, name.as_path(), AtFlags::REMOVEDIR);
        }
    }

    /// Takes over a directory memtrack just created as `name` in `parent` (`path` is the
    /// same, for messages), see [`adopt`].
    fn adopt_created(
        parent: OwnedFd,
        path: PathBuf,
        name: PathBuf,
        owner: Option<(u32, u32)>,
    ) -> Result<Self> {
        let fd = adopt(&parent, &name, &path, owner)?;
        Ok(OutputDir {
            fd,
            path,
            owner,
            created: Some((parent, name)),
        })
    }

    /// Creates an empty temporary file for `name` under a fresh random name, never
    /// opening an existing one. Returns it and its name.
    fn create_temp(&self, name: &str) -> Result<(OwnedFd, String)> {
        for _ in 0..NAME_ATTEMPTS {
            let tmp = format!(".{name}.tmp-{}", random_name());
            let flags = OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC
                | OFlags::NOCTTY;
            match rustix::fs::openat(
                &self.fd,
                tmp.as_str(),
                flags,
                Mode::from_raw_mode(FILE_MODE),
            ) {
                Ok(fd) => return Ok((fd, tmp)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(output_err(&self.path, OutputStep::CreateFile, e)),
            }
        }
        Err(refused(
            &self.path,
            DirRefused::NamesTaken {
                attempts: NAME_ATTEMPTS,
                what: "temporary file",
            },
        ))
    }

    /// Gives a file memtrack created mode [`FILE_MODE`] exactly and hands it to the
    /// owner.
    fn finish(&self, file: &impl AsFd, tmp: &str) -> Result<()> {
        rustix::fs::fchmod(file, Mode::from_raw_mode(FILE_MODE))
            .map_err(|e| output_err(&self.path.join(tmp), OutputStep::SetMode(FILE_MODE), e))?;
        if let Some((uid, gid)) = self.owner {
            fchown(file, uid, gid)
                .map_err(|e| output_err(&self.path.join(tmp), OutputStep::HandOver, e))?;
        }
        Ok(())
    }

    /// Does what writing a result does, with a temporary file that is removed again, so
    /// that a directory that cannot take results fails before the command runs.
    fn check_writable(&self) -> Result<()> {
        let (file, tmp) = self.create_temp("check")?;
        let finished = self.finish(&file, &tmp);
        drop(file);
        let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        finished
    }
}

/// Opens a directory memtrack just created as `name` in `parent` (`path` is the same, for
/// messages): it must still be a directory of the effective user (not swapped meanwhile
/// by someone who may write `parent`); it then gets mode [`DIR_MODE`] exactly (whatever
/// the umask) and goes to `owner`.
fn adopt(parent: &OwnedFd, name: &Path, path: &Path, owner: Option<(u32, u32)>) -> Result<OwnedFd> {
    let fd = open_dir(parent, name, false).map_err(|e| output_err(path, OutputStep::Open, e))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| output_err(path, OutputStep::Stat, e))?;
    let euid = rustix::process::geteuid().as_raw();
    if stat.st_uid != euid {
        return Err(refused(
            path,
            DirRefused::Replaced {
                owner: stat.st_uid,
                euid,
            },
        ));
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(DIR_MODE))
        .map_err(|e| output_err(path, OutputStep::SetMode(DIR_MODE), e))?;
    if let Some((uid, gid)) = owner {
        fchown(&fd, uid, gid).map_err(|e| output_err(path, OutputStep::HandOver, e))?;
    }
    Ok(fd)
}

/// Opens the directory `path`, creating it and its missing parents (each as [`adopt`]
/// takes it over) first. Existing components are followed as the path names them.
fn create_dirs(path: &Path, owner: Option<(u32, u32)>) -> Result<OwnedFd> {
    match open_dir(CWD, path, true) {
        Ok(fd) => return Ok(fd),
        Err(Errno::NOENT) => {}
        Err(e) => return Err(output_err(path, OutputStep::Open, e)),
    }
    let Some((parent, name)) = split_last(path) else {
        return Err(output_err(path, OutputStep::Open, Errno::NOENT));
    };
    let parent_fd = create_dirs(parent, owner)?;
    match rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(DIR_MODE)) {
        Ok(()) => adopt(&parent_fd, name, path, owner),
        // Made by someone else meanwhile: used as it is, like any existing directory.
        Err(Errno::EXIST) => open_dir(&parent_fd, name, false)
            .map_err(|e| explain_open_failure(&parent_fd, name, path, e)),
        Err(e) => Err(output_err(path, OutputStep::Create, e)),
    }
}

/// Opens `path` relative to `dirfd` as a directory; `follow`: whether a symbolic link as
/// its last component is followed (only for paths the user named, never for a name in a
/// directory someone else may write).
fn open_dir(
    dirfd: impl AsFd,
    path: impl AsRef<Path>,
    follow: bool,
) -> std::result::Result<OwnedFd, Errno> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    rustix::fs::openat(dirfd, path.as_ref(), flags, Mode::empty())
}

/// Why `name` in `parent` could not be opened as a directory, in words.
fn explain_open_failure(parent: &OwnedFd, name: &Path, path: &Path, e: Errno) -> Error {
    let kind = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .map(|s| FileType::from_raw_mode(s.st_mode));
    match kind {
        Some(FileType::Symlink) => refused(path, DirRefused::SymbolicLink),
        Some(kind) if kind != FileType::Directory => {
            refused(path, DirRefused::NotADirectory(describe(kind)))
        }
        _ => output_err(path, OutputStep::Open, e),
    }
}

/// `path` split into its parent (`.` when it has none) and its last component (trailing
/// slashes and `.` components aside); `None` for `/`, `.` and paths ending in `..`.
fn split_last(path: &Path) -> Option<(&Path, &Path)> {
    let name = path.file_name()?;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Some((parent, Path::new(name)))
}

/// 12 random characters from `[0-9a-z]` (62 bits), from the kernel's random source.
fn random_name() -> String {
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut bytes = [0u8; 12];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            // getrandom(2) exists since Linux 3.17; memtrack needs far newer kernels.
            Err(e) => panic!("getrandom failed: {e}"),
        }
    }
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// `fchown(2)`; uid or gid `u32::MAX` (-1, "leave unchanged" to the kernel) is refused.
fn fchown(fd: impl AsFd, uid: u32, gid: u32) -> std::result::Result<(), Errno> {
    if uid == u32::MAX || gid == u32::MAX {
        return Err(Errno::INVAL);
    }
    rustix::fs::fchown(
        fd,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    )
}

fn output_err(dir: &Path, what: OutputStep, e: Errno) -> Error {
    Error::OutputDir {
        dir: dir.to_path_buf(),
        what,
        source: e.into(),
    }
}

fn refused(dir: &Path, reason: DirRefused) -> Error {
    Error::OutputDirRefused {
        dir: dir.to_path_buf(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_file_is_written_whole_with_mode_0600_and_no_temporary_left() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutputDir::open(dir.path(), None).unwrap();
        let path = out.write_file("1.r", b"hello").unwrap();
        assert_eq!(path, dir.path().join("1.r"));
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
        assert_eq!(mode(&path), 0o600);
        // Rewriting replaces it; the write check at open left nothing either.
        out.write_file("1.r", b"again").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"again");
        assert_eq!(names(dir.path()), ["1.r"]);
    }

    #[test]
    fn a_link_at_the_final_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let canary = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(canary.path(), b"canary").unwrap();
        symlink(canary.path(), dir.path().join("1.r")).unwrap();
        let out = OutputDir::open(dir.path(), None).unwrap();
        out.write_file("1.r", b"result").unwrap();
        assert_eq!(std::fs::read(canary.path()).unwrap(), b"canary");
        let meta = std::fs::symlink_metadata(dir.path().join("1.r")).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(std::fs::read(dir.path().join("1.r")).unwrap(), b"result");
    }

    #[test]
    fn writes_go_to_the_directory_opened_even_after_it_was_moved() {
        let base = tempfile::tempdir().unwrap();
        let (dir, moved, elsewhere) = (
            base.path().join("out"),
            base.path().join("moved"),
            base.path().join("elsewhere"),
        );
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        let out = OutputDir::open(&dir, None).unwrap();
        std::fs::rename(&dir, &moved).unwrap();
        symlink(&elsewhere, &dir).unwrap();
        out.write_file("1.r", b"x").unwrap();
        assert_eq!(names(&moved), ["1.r"]);
        assert!(names(&elsewhere).is_empty());
    }

    #[test]
    fn entries_are_listed_and_removed_through_the_handle_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let canary = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(canary.path(), b"canary").unwrap();
        let out = OutputDir::open(dir.path(), None).unwrap();
        out.write_file("1.r", b"x").unwrap();
        out.write_file("other", b"y").unwrap();
        symlink(canary.path(), dir.path().join("2.r")).unwrap();
        std::fs::create_dir(dir.path().join("3.r")).unwrap();
        let wanted = out.names(|n| n.ends_with(".r")).unwrap();
        assert_eq!(wanted, ["1.r", "2.r", "3.r"]);
        out.remove_file("1.r").unwrap();
        out.remove_file("2.r").unwrap();
        let err = out.remove_file("3.r").unwrap_err().to_string();
        assert!(err.contains("3.r: cannot remove"), "{err}");
        assert!(out.remove_file("../x").is_err());
        assert_eq!(names(dir.path()), ["3.r", "other"]);
        assert_eq!(std::fs::read(canary.path()).unwrap(), b"canary");
    }

    #[test]
    fn open_refuses_files_links_and_missing_parents_by_name() {
        let base = tempfile::tempdir().unwrap();
        let file = base.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let link = base.path().join("link");
        symlink(base.path(), &link).unwrap();
        let missing = base.path().join("missing/out");
        for (path, needle) in [
            (&file, "is not a directory (it is a regular file)"),
            (
                &link,
                "is a symbolic link, which memtrack does not follow here",
            ),
            (&missing, "its parent directory"),
        ] {
            let err = OutputDir::open(path, None).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
            assert!(err.contains(&path.display().to_string()), "{err}");
        }
        assert!(!base.path().join("missing").exists());
    }

    #[test]
    fn open_creates_a_missing_last_component_with_mode_0700() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("new");
        let out = OutputDir::open(&dir, None).unwrap();
        assert_eq!(mode(&dir), 0o700);
        // Unused, it goes again; a directory memtrack did not create stays.
        out.remove_if_unused();
        assert!(!dir.exists());
        OutputDir::open(base.path(), None)
            .unwrap()
            .remove_if_unused();
        assert!(base.path().exists());
        // Used, it stays.
        let out = OutputDir::open(&dir, None).unwrap();
        out.write_file("1.r", b"x").unwrap();
        out.remove_if_unused();
        assert_eq!(names(&dir), ["1.r"]);
    }

    #[test]
    fn create_all_makes_the_missing_directories_and_refuses_a_final_link() {
        let base = tempfile::tempdir().unwrap();
        let deep = base.path().join("a/b/c");
        let out = OutputDir::create_all(&deep, None).unwrap();
        out.write_file("1.r", b"x").unwrap();
        for dir in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&base.path().join(dir)), 0o700, "{dir}");
        }
        assert_eq!(names(&deep), ["1.r"]);
        // Existing: used as it is.
        OutputDir::create_all(&deep, None).unwrap();
        symlink(&deep, base.path().join("a/link")).unwrap();
        let err = OutputDir::create_all(&base.path().join("a/link"), None).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
    }

    #[test]
    fn private_directories_are_new_random_and_0700() {
        let base = tempfile::tempdir().unwrap();
        let a = OutputDir::create_private_in(base.path(), None).unwrap();
        let b = OutputDir::create_private_in(base.path(), None).unwrap();
        assert_ne!(a.path(), b.path());
        for dir in [a.path(), b.path()] {
            let name = dir.file_name().unwrap().to_str().unwrap();
            assert!(name.starts_with("memtrack-") && name.len() == 21, "{name}");
            assert_eq!(mode(dir), 0o700);
        }
    }

    #[test]
    fn an_unwritable_directory_fails_at_open() {
        if rustix::process::geteuid().is_root() {
            // Root writes through mode bits; the command-line tests cover a read-only
            // file system instead.
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
        let err = OutputDir::open(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("cannot create a file in"), "{err}");
    }

    #[test]
    fn files_and_created_directories_go_to_the_owner() {
        if !rustix::process::geteuid().is_root() {
            return; // only root can give files away
        }
        let base = tempfile::tempdir().unwrap();
        let out = OutputDir::create_private_in(base.path(), Some((65534, 65534))).unwrap();
        let file = out.write_file("1.r", b"x").unwrap();
        for path in [out.path(), file.as_path()] {
            let meta = std::fs::symlink_metadata(path).unwrap();
            assert_eq!(
                (meta.uid(), meta.gid()),
                (65534, 65534),
                "{}",
                path.display()
            );
        }
        assert_eq!(mode(&file), 0o600);
        // Directories create_all makes go to the owner too; existing ones stay as they are.
        let deep = base.path().join("x/y");
        OutputDir::create_all(&deep, Some((65534, 65534))).unwrap();
        for (path, owner) in [
            (base.path().to_path_buf(), 0),
            (base.path().join("x"), 65534),
            (deep, 65534),
        ] {
            assert_eq!(
                std::fs::metadata(&path).unwrap().uid(),
                owner,
                "{}",
                path.display()
            );
        }
        // uid -1 would mean "unchanged" to the kernel: refused instead.
        let err = OutputDir::open(base.path(), Some((u32::MAX, 0))).unwrap_err();
        assert!(err.to_string().contains("cannot hand over"), "{err}");
    }
}
