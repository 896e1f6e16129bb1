//! Reading `/proc/PID/maps`: which files a process has mapped executable.
//!
//! This module exists because uprobes are attached to *files* (an inode and a
//! file offset), not to addresses in a process: to probe a running process we
//! first need the list of ELF files whose code it has mapped. The parser is a
//! pure function over the text so that the awkward cases (paths with spaces,
//! `(deleted)` files, pseudo-mappings such as `[vdso]`) are unit-tested
//! without a process.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::Error;

/// The permission bits of one mapping (`r-xp` and the like).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Perms {
    /// `r`: readable.
    pub read: bool,
    /// `w`: writable.
    pub write: bool,
    /// `x`: executable.
    pub execute: bool,
    /// `s`: shared (`p`, private copy-on-write, otherwise).
    pub shared: bool,
}

/// What backs one mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingKind {
    /// No pathname: anonymous memory (heap arenas, thread stacks, JIT code).
    Anonymous,
    /// A kernel-named pseudo mapping such as `[vdso]`, `[vvar]`, `[heap]`,
    /// `[stack]`, `[anon:name]`, or `anon_inode:...`.
    Pseudo(String),
    /// A file, by the absolute path the kernel printed.
    File {
        /// The path, with the ` (deleted)` suffix removed and the kernel's
        /// `\012` escape for newlines decoded.
        path: PathBuf,
        /// The kernel marked the file ` (deleted)`: it was unlinked (or
        /// replaced, e.g. by a package upgrade) after being mapped, so the
        /// path no longer names the mapped file.
        deleted: bool,
    },
}

/// One parsed line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsLine {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// Its permissions.
    pub perms: Perms,
    /// Offset in the file of the mapping's first byte (0 for anonymous).
    pub offset: u64,
    /// Device of the file as (major, minor).
    pub dev: (u32, u32),
    /// Inode of the file (0 for anonymous and most pseudo mappings).
    pub inode: u64,
    /// What backs the mapping.
    pub kind: MappingKind,
}

/// One executable mapping of `/proc/PID/maps` backed by an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedObject {
    /// The file, as the kernel printed it in `/proc/PID/maps`. It is a path in
    /// the *process's* mount namespace.
    pub path: PathBuf,
    /// First address of the (first) executable mapping of the file.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// File offset of that mapping's first byte.
    pub file_offset: u64,
    /// Inode of the mapped file.
    pub inode: u64,
    /// Device of the mapped file as (major, minor).
    pub dev: (u32, u32),
    /// The file was deleted or replaced after it was mapped (the maps line
    /// ends in ` (deleted)`): its path now names another file or nothing, so
    /// it cannot be probed by path. Such objects are listed so that the
    /// caller can report them; [`crate::process_targets`] skips them.
    pub deleted: bool,
}

/// Parses the text of a `/proc/PID/maps` file. Lines that do not have the
/// kernel's format are skipped.
pub fn parse_maps(text: &str) -> Vec<MapsLine> {
    parse_maps_bytes(text.as_bytes())
}

/// Like [`parse_maps`], for the raw bytes of the file: file names need not be
/// UTF-8.
pub fn parse_maps_bytes(text: &[u8]) -> Vec<MapsLine> {
    text.split(|&b| b == b'\n')
        .filter_map(parse_maps_line)
        .collect()
}

/// Parses one line of `/proc/PID/maps` (without its newline), e.g.
/// `7f1c0a828000-7f1c0a97d000 r-xp 00026000 08:01 1835094    /usr/lib/x86_64-linux-gnu/libc.so.6`.
pub fn parse_maps_line(line: &[u8]) -> Option<MapsLine> {
    // The first five fields are separated by single spaces; the pathname, if
    // any, follows after padding and runs to the end of the line, spaces
    // included.
    let mut rest = line;
    let range = next_field(&mut rest)?;
    let perms = next_field(&mut rest)?;
    let offset = next_field(&mut rest)?;
    let dev = next_field(&mut rest)?;
    let inode = next_field(&mut rest)?;
    let pathname = trim_start(rest);

    let (start, end) = split_once(range, b'-')?;
    let start = parse_hex(start)?;
    let end = parse_hex(end)?;
    let perms = parse_perms(perms)?;
    let offset = parse_hex(offset)?;
    let (major, minor) = split_once(dev, b':')?;
    let dev = (
        u32::try_from(parse_hex(major)?).ok()?,
        u32::try_from(parse_hex(minor)?).ok()?,
    );
    let inode = std::str::from_utf8(inode).ok()?.parse().ok()?;

    Some(MapsLine {
        start,
        end,
        perms,
        offset,
        dev,
        inode,
        kind: mapping_kind(pathname, inode),
    })
}

fn next_field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let s = trim_start(rest);
    if s.is_empty() {
        return None;
    }
    let end = s.iter().position(|&b| b == b' ').unwrap_or(s.len());
    let (field, tail) = s.split_at(end);
    *rest = tail;
    Some(field)
}

fn trim_start(s: &[u8]) -> &[u8] {
    let skip = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[skip..]
}

fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|&b| b == sep)?;
    Some((&s[..i], &s[i + 1..]))
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

fn parse_perms(s: &[u8]) -> Option<Perms> {
    let [r, w, x, p] = <[u8; 4]>::try_from(s).ok()?;
    Some(Perms {
        read: r == b'r',
        write: w == b'w',
        execute: x == b'x',
        shared: p == b's',
    })
}

const DELETED_SUFFIX: &[u8] = b" (deleted)";

fn mapping_kind(pathname: &[u8], inode: u64) -> MappingKind {
    if pathname.is_empty() {
        return MappingKind::Anonymous;
    }
    if pathname[0] != b'/' {
        return MappingKind::Pseudo(String::from_utf8_lossy(pathname).into_owned());
    }
    // The kernel appends " (deleted)" to unlinked files; a file whose real
    // name ends in " (deleted)" is indistinguishable, and rare enough.
    let (name, deleted) = match pathname.strip_suffix(DELETED_SUFFIX) {
        Some(name) if inode != 0 || name.starts_with(b"/memfd:") => (name, true),
        _ => (pathname, false),
    };
    MappingKind::File {
        path: PathBuf::from(OsStr::from_bytes(&unescape_newlines(name))),
        deleted,
    }
}

/// The kernel prints file names with `seq_file_path(.., "\n")`, which escapes
/// only newlines, as the octal `\012`.
fn unescape_newlines(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i..].starts_with(b"\\012") {
            out.push(b'\n');
            i += 4;
        } else {
            out.push(name[i]);
            i += 1;
        }
    }
    out
}

/// The executable, file-backed ELF objects that process `pid` has mapped,
/// one per path (the first executable mapping of each file), in address
/// order.
///
/// Skipped: anonymous and pseudo mappings (`[vdso]`, `[heap]`, ...),
/// non-executable mappings, and files that can be opened but are not ELF.
/// Files that cannot be opened are kept (the error surfaces when their symbols
/// are read), and so are deleted files, flagged [`MappedObject::deleted`].
///
/// Returns [`Error::ProcessGone`] if `/proc/PID/maps` does not exist.
pub fn mapped_objects(pid: u32) -> Result<Vec<MappedObject>, Error> {
    Ok(executable_objects(&read_maps(pid)?, |path| {
        is_elf_or_unreadable(path)
    }))
}

/// Every line of `/proc/PID/maps`, parsed; [`Error::ProcessGone`] if the process does
/// not exist (any more).
///
/// File paths are made to name the mapped files from *this* process. The kernel prints
/// them from the reader's root where it can (a chrooted process's files show with their
/// full path here), but a file mounted only in another mount namespace (a container)
/// shows with its path in that namespace, which here names another file or none. When
/// a path does not name the mapped inode here, the path below `/proc/PID/root` (the
/// process's root, in its own mount namespace), through which memtrack reads and probes
/// the right file, is used instead if it does.
pub fn read_maps(pid: u32) -> Result<Vec<MapsLine>, Error> {
    let maps_path = PathBuf::from(format!("/proc/{pid}/maps"));
    match std::fs::read(&maps_path) {
        Ok(text) => {
            let mut lines = parse_maps_bytes(&text);
            reach_through_root(&mut lines, &PathBuf::from(format!("/proc/{pid}/root")));
            Ok(lines)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::ProcessGone { pid }),
        // Reading the maps of a process that exits meanwhile can fail with ESRCH.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(Error::ProcessGone { pid }),
        Err(e) => Err(Error::io(maps_path, e)),
    }
}

/// Rewrites the file paths of `lines` that do not name their mapped inode here but do
/// below `root` (see [`read_maps`]).
fn reach_through_root(lines: &mut [MapsLine], root: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let inode_of = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| m.ino());
    let mut decided: Vec<(PathBuf, PathBuf)> = Vec::new();
    for line in lines.iter_mut() {
        let MappingKind::File {
            path,
            deleted: false,
        } = &mut line.kind
        else {
            continue;
        };
        if let Some((_, to)) = decided.iter().find(|(from, _)| from == path) {
            *path = to.clone();
            continue;
        }
        let original = path.clone();
        if inode_of(path) != Some(line.inode) {
            let below = under_root(root, path);
            if inode_of(&below) == Some(line.inode) {
                *path = below;
            }
        }
        decided.push((original, path.clone()));
    }
}

/// `path` (absolute, in a process's view) below `root`.
fn under_root(root: &std::path::Path, path: &std::path::Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// The selection of [`mapped_objects`] over parsed lines; `keep_file` says
/// whether an existing (not deleted) file should be kept.
fn executable_objects(
    lines: &[MapsLine],
    mut keep_file: impl FnMut(&std::path::Path) -> bool,
) -> Vec<MappedObject> {
    let mut out: Vec<MappedObject> = Vec::new();
    for line in lines {
        let MappingKind::File { path, deleted } = &line.kind else {
            continue;
        };
        if !line.perms.execute || out.iter().any(|o| &o.path == path) {
            continue;
        }
        if !*deleted && !keep_file(path) {
            continue;
        }
        out.push(MappedObject {
            path: path.clone(),
            start: line.start,
            end: line.end,
            file_offset: line.offset,
            inode: line.inode,
            dev: line.dev,
            deleted: *deleted,
        });
    }
    out
}

fn is_elf_or_unreadable(path: &std::path::Path) -> bool {
    let mut magic = [0u8; 4];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) => magic == *b"\x7fELF",
        // A file shorter than the magic is not ELF.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_go_below_a_foreign_root() {
        let root = std::path::Path::new("/proc/42/root");
        assert_eq!(
            super::under_root(root, std::path::Path::new("/usr/lib/libc.so.6")),
            std::path::Path::new("/proc/42/root/usr/lib/libc.so.6")
        );
        // This process's paths name its files: nothing is rewritten.
        let lines = super::read_maps(std::process::id()).unwrap();
        assert!(lines.iter().all(|l| !matches!(&l.kind,
            super::MappingKind::File { path, .. } if path.starts_with("/proc/"))));
    }

    use super::*;

    const SAMPLE: &str = "\
55d0c5a00000-55d0c5a02000 r--p 00000000 fd:01 1311        /usr/bin/my prog
55d0c5a02000-55d0c5a06000 r-xp 00002000 fd:01 1311        /usr/bin/my prog
55d0c6b1e000-55d0c6b3f000 rw-p 00000000 00:00 0           [heap]
7f1c0a802000-7f1c0a828000 r--p 00000000 08:01 1835094     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c0a828000-7f1c0a97d000 r-xp 00026000 08:01 1835094     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c0a9d0000-7f1c0a9d4000 rw-p 00000000 00:00 0 
7f1c0aa00000-7f1c0aa10000 r-xp 00001000 08:01 99          /opt/old/libjemalloc.so.2 (deleted)
7f1c0aa20000-7f1c0aa30000 r-xp 00000000 00:01 4242        /memfd:jit (deleted)
7f1c0aa40000-7f1c0aa41000 r-xp 00000000 08:01 77          /tmp/new\\012line.so
7ffd1e5b4000-7ffd1e5d5000 rw-p 00000000 00:00 0           [stack]
7ffd1e5f8000-7ffd1e5fc000 r--p 00000000 00:00 0           [vvar]
7ffd1e5fc000-7ffd1e5fe000 r-xp 00000000 00:00 0           [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0   [vsyscall]
garbage line
";

    #[test]
    fn parses_every_well_formed_line() {
        let lines = parse_maps(SAMPLE);
        assert_eq!(lines.len(), 13);

        let first = &lines[0];
        assert_eq!(first.start, 0x55d0c5a00000);
        assert_eq!(first.end, 0x55d0c5a02000);
        assert_eq!(
            first.perms,
            Perms {
                read: true,
                write: false,
                execute: false,
                shared: false
            }
        );
        assert_eq!(first.dev, (0xfd, 0x01));
        assert_eq!(first.inode, 1311);
        assert_eq!(
            first.kind,
            MappingKind::File {
                path: PathBuf::from("/usr/bin/my prog"),
                deleted: false
            }
        );

        let text = &lines[4];
        assert!(text.perms.execute);
        assert_eq!(text.offset, 0x26000);
        assert_eq!(text.dev, (8, 1));
    }

    #[test]
    fn classifies_anonymous_pseudo_and_deleted() {
        let lines = parse_maps(SAMPLE);
        assert_eq!(lines[2].kind, MappingKind::Pseudo("[heap]".into()));
        assert_eq!(lines[5].kind, MappingKind::Anonymous);
        assert_eq!(
            lines[6].kind,
            MappingKind::File {
                path: PathBuf::from("/opt/old/libjemalloc.so.2"),
                deleted: true
            }
        );
        assert_eq!(
            lines[7].kind,
            MappingKind::File {
                path: PathBuf::from("/memfd:jit"),
                deleted: true
            }
        );
        assert_eq!(
            lines[8].kind,
            MappingKind::File {
                path: PathBuf::from("/tmp/new\nline.so"),
                deleted: false
            }
        );
        assert_eq!(lines[11].kind, MappingKind::Pseudo("[vdso]".into()));
        assert!(lines[12].perms.execute && !lines[12].perms.read);
    }

    #[test]
    fn shared_mappings_and_no_path() {
        let line = parse_maps_line(b"7f0000000000-7f0000001000 rw-s 00000000 00:05 123").unwrap();
        assert!(line.perms.shared && line.perms.write);
        assert_eq!(line.kind, MappingKind::Anonymous);
        assert!(parse_maps_line(b"").is_none());
        assert!(parse_maps_line(b"zz-10 r-xp 0 0:0 0").is_none());
        assert!(parse_maps_line(b"10-20 r-x 0 0:0 0").is_none());
    }

    #[test]
    fn selects_executable_files_once_each() {
        let lines = parse_maps(SAMPLE);
        let objects = executable_objects(&lines, |_| true);
        let paths: Vec<_> = objects.iter().map(|o| o.path.clone()).collect();
        assert_eq!(
            paths,
            vec![
                PathBuf::from("/usr/bin/my prog"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/opt/old/libjemalloc.so.2"),
                PathBuf::from("/memfd:jit"),
                PathBuf::from("/tmp/new\nline.so"),
            ]
        );
        let prog = &objects[0];
        assert_eq!(
            (prog.start, prog.end, prog.file_offset),
            (0x55d0c5a02000, 0x55d0c5a06000, 0x2000)
        );
        assert!(!prog.deleted);
        assert!(objects[2].deleted && objects[3].deleted);
    }

    #[test]
    fn non_elf_files_are_dropped_but_deleted_ones_kept() {
        let lines = parse_maps(SAMPLE);
        let objects = executable_objects(&lines, |_| false);
        let paths: Vec<_> = objects.iter().map(|o| o.path.clone()).collect();
        assert_eq!(
            paths,
            vec![
                PathBuf::from("/opt/old/libjemalloc.so.2"),
                PathBuf::from("/memfd:jit")
            ]
        );
    }

    #[test]
    fn own_process_maps_libc() {
        let objects = mapped_objects(std::process::id()).unwrap();
        assert!(
            objects
                .iter()
                .any(|o| o.path.to_string_lossy().contains("libc.so")),
            "{objects:#?}"
        );
        assert!(objects.iter().all(|o| o.path.is_absolute()));
    }

    #[test]
    fn missing_process_is_gone() {
        // Above the largest possible pid_max (2^22).
        let pid = 0x7fff_fff0;
        assert!(matches!(
            mapped_objects(pid),
            Err(Error::ProcessGone { pid: p }) if p == pid
        ));
    }
}
