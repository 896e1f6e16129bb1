//! Finding result files in a tree of directories: `memtrack report target/memtrack` and
//! `memtrack diff` read what the benchmark integrations saved, one directory per suite
//! or benchmark (`target/memtrack/divan/BINARY/`, `target/memtrack/criterion/ID/`).
//!
//! The walk is bounded and never leaves the tree: every subdirectory is opened relative
//! to its parent's handle with `O_NOFOLLOW|O_DIRECTORY`, so a symbolic link is never
//! followed (a link to `/` cannot make it read the whole machine), and nothing deeper
//! than [`MAX_TREE_DEPTH`] levels below the root is searched (said in
//! [`ResultTree::refused`]). Each result file is read as
//! [`MemtrackResult::scan_dir`] reads one (regular files only, at most
//! [`MAX_RESULT_FILE_BYTES`](crate::MAX_RESULT_FILE_BYTES)).

use std::{
    os::fd::{AsFd, OwnedFd},
    path::{Path, PathBuf},
};

use rustix::{
    fs::{AtFlags, CWD, FileType, Mode, OFlags},
    io::Errno,
};

use crate::{
    bounded_read::{self, RESULT_FILES},
    error::{Error, Result, TreeRefused},
    results::{MemtrackResult, is_result_file_name},
};

/// How many directory levels below the root a tree walk descends: 16. The integrations
/// write two to four levels down (`criterion/GROUP/FUNCTION/PARAMETER`); a benchmark id
/// with more `/`-separated parts makes more.
pub const MAX_TREE_DEPTH: usize = 16;

/// The results of one directory of a tree.
#[derive(Debug)]
#[non_exhaustive]
pub struct ResultDir {
    /// Its path relative to the root of the walk (empty for the root itself).
    pub relative: PathBuf,
    /// The results read there, ordered by pid.
    pub results: Vec<MemtrackResult>,
}

/// What [`MemtrackResult::scan_tree`] found.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ResultTree {
    /// Every directory that holds at least one readable result, the root first, then in
    /// the order of their relative paths.
    pub dirs: Vec<ResultDir>,
    /// Result files that were not read or not understood, and directories that were
    /// not searched (unreadable, or deeper than [`MAX_TREE_DEPTH`]), each error naming
    /// its path and why.
    pub refused: Vec<Error>,
    /// How many directories were searched, the root included.
    pub dirs_searched: usize,
}

impl ResultTree {
    /// How many results were read, in all directories.
    pub fn result_count(&self) -> usize {
        self.dirs.iter().map(|d| d.results.len()).sum()
    }
}

impl MemtrackResult {
    /// Reads every result file in `root` and in the directories below it (at most
    /// [`MAX_TREE_DEPTH`] levels down), grouped by directory. Symbolic links are never
    /// followed below `root` (`root` itself is opened as named); other entries than
    /// result files and directories are passed over. Fails only if `root` itself cannot
    /// be read.
    pub fn scan_tree(root: &Path) -> Result<ResultTree> {
        let fd = rustix::fs::openat(
            CWD,
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io(root, e.into()))?;
        let mut tree = ResultTree::default();
        walk(&fd, root, Path::new(""), 0, &mut tree)?;
        tree.dirs.sort_by(|a, b| a.relative.cmp(&b.relative));
        Ok(tree)
    }
}

/// Searches the open directory `fd` (`path` for messages, `relative` to the root, at
/// `depth` below it), then its subdirectories. Fails only if `fd` cannot be listed.
fn walk(
    fd: &OwnedFd,
    path: &Path,
    relative: &Path,
    depth: usize,
    tree: &mut ResultTree,
) -> Result<()> {
    tree.dirs_searched += 1;
    let names = bounded_read::entry_names(fd, path, |_| true)?;
    let (files, others): (Vec<String>, Vec<String>) =
        names.into_iter().partition(|n| is_result_file_name(n));
    let mut results = Vec::new();
    for file in bounded_read::read_names(fd, path, files, RESULT_FILES) {
        match file.read_result() {
            Ok(result) => results.push(result),
            Err(e) => tree.refused.push(e),
        }
    }
    if !results.is_empty() {
        results.sort_by_key(|r| r.process.pid);
        tree.dirs.push(ResultDir {
            relative: relative.to_path_buf(),
            results,
        });
    }
    for name in others {
        if !is_directory(fd, &name) {
            continue;
        }
        let (sub_path, sub_relative) = (path.join(&name), relative.join(&name));
        if depth + 1 > MAX_TREE_DEPTH {
            tree.refused.push(Error::ResultTree {
                dir: sub_path,
                reason: TreeRefused::TooDeep(MAX_TREE_DEPTH),
            });
            continue;
        }
        let opened = rustix::fs::openat(
            fd,
            name.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let searched = match opened {
            // Swapped for a link (or a file) since it was looked at: not followed.
            Err(Errno::LOOP | Errno::NOTDIR) => continue,
            Err(e) => Err(Error::io(&sub_path, e.into())),
            Ok(sub) => walk(&sub, &sub_path, &sub_relative, depth + 1, tree),
        };
        if let Err(e) = searched {
            tree.refused.push(Error::ResultTree {
                dir: sub_path,
                reason: TreeRefused::Unsearchable(Box::new(e)),
            });
        }
    }
    Ok(())
}

/// Whether `name` in `dir` is a directory itself (not a link to one).
fn is_directory(dir: impl AsFd, name: &str) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::TrackedProcess;
    use std::os::unix::fs::symlink;

    fn write(dir: &Path, pid: u32) {
        MemtrackResult::new(TrackedProcess::new(pid, 1, vec![format!("p{pid}")]))
            .write_to_dir(dir)
            .unwrap();
    }

    fn found(tree: &ResultTree) -> Vec<(String, Vec<u32>)> {
        tree.dirs
            .iter()
            .map(|d| {
                (
                    d.relative.display().to_string(),
                    d.results.iter().map(|r| r.process.pid).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn finds_results_in_every_directory_with_their_relative_paths() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), 9);
        write(&root.path().join("divan/alloc"), 3);
        write(&root.path().join("criterion/group/b"), 2);
        write(&root.path().join("criterion/group/a"), 5);
        write(&root.path().join("criterion/group/a"), 4);
        std::fs::create_dir(root.path().join("empty")).unwrap();
        std::fs::write(root.path().join("notes.txt"), b"").unwrap();
        let tree = MemtrackResult::scan_tree(root.path()).unwrap();
        assert_eq!(
            found(&tree),
            [
                ("".to_owned(), vec![9]),
                ("criterion/group/a".to_owned(), vec![4, 5]),
                ("criterion/group/b".to_owned(), vec![2]),
                ("divan/alloc".to_owned(), vec![3]),
            ]
        );
        assert_eq!(tree.result_count(), 5);
        assert!(tree.refused.is_empty(), "{:?}", tree.refused);
        // root, criterion, criterion/group, its a and b, divan, divan/alloc, empty.
        assert_eq!(tree.dirs_searched, 8);
    }

    #[test]
    fn links_are_not_followed_and_depth_is_bounded() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        write(elsewhere.path(), 7);
        symlink(elsewhere.path(), root.path().join("link")).unwrap();
        symlink("/", root.path().join("slash")).unwrap();
        let mut deep = root.path().to_path_buf();
        for level in 0..=MAX_TREE_DEPTH {
            deep.push(format!("d{level}"));
        }
        write(&deep, 8);
        write(deep.parent().unwrap(), 6);
        let tree = MemtrackResult::scan_tree(root.path()).unwrap();
        let at_limit: PathBuf = (0..MAX_TREE_DEPTH).map(|l| format!("d{l}")).collect();
        assert_eq!(found(&tree), [(at_limit.display().to_string(), vec![6])]);
        assert_eq!(tree.refused.len(), 1);
        assert_eq!(
            tree.refused[0].to_string(),
            format!(
                "searching {} for results: is more than 16 directories below where the \
                 search began; not searched",
                deep.display()
            )
        );
    }

    #[test]
    fn an_unreadable_root_is_an_error() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("missing");
        let err = MemtrackResult::scan_tree(&missing).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
