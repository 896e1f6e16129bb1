//! How much memory the memory cgroup memtrack runs in leaves for the kernel maps it is
//! about to make, read before they are made.
//!
//! The kernel charges an eBPF map's memory to the memory cgroup of the process that
//! creates it. A map larger than what the cgroup's limit leaves is not always refused
//! cleanly: while the kernel fills the cgroup to its limit with the map's pages, a page
//! fault of any process in the cgroup (memtrack's other threads, the command it holds)
//! finds no room and the cgroup's OOM killer kills one of them, usually memtrack, which
//! then dies without a word. So the tracker compares the maps' size with the room left
//! first, and refuses with [`Error::CgroupMemory`](crate::Error::CgroupMemory) when they
//! cannot fit.
//!
//! The room left is the tightest over the cgroup and its ancestors: limit less usage,
//! the usage not counting the file cache (the kernel reclaims it to make room). Both
//! hierarchies are read: cgroup v1's memory controller (`memory.limit_in_bytes`,
//! `memory.usage_in_bytes`, `memory.stat`'s `total_*_file`) and cgroup v2
//! (`memory.max`, `memory.current`, `memory.stat`'s `*_file`). When nothing can be read
//! (no cgroup file system mounted, a container that hides it), nothing is refused here:
//! the kernel still refuses what it cannot allocate.

use std::path::{Path, PathBuf};

/// The room a limit leaves, at the tightest level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Headroom {
    /// The cgroup's directory whose limit is the tightest.
    pub cgroup: PathBuf,
    /// Its limit, in bytes.
    pub limit_bytes: u64,
    /// Limit less the usage other than the file cache, in bytes.
    pub free_bytes: u64,
}

/// Which cgroup hierarchy holds the memory controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    V1,
    V2,
}

impl Hierarchy {
    /// The files of one level: (limit, usage, hierarchical file-cache counters).
    fn files(self) -> (&'static str, &'static str, [&'static str; 2]) {
        match self {
            Hierarchy::V1 => (
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                ["total_active_file", "total_inactive_file"],
            ),
            Hierarchy::V2 => (
                "memory.max",
                "memory.current",
                ["active_file", "inactive_file"],
            ),
        }
    }
}

/// The calling process's memory cgroup's tightest room, or None when no level of it has
/// a limit (or nothing could be read).
pub(crate) fn headroom() -> Option<Headroom> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (hierarchy, mount, dir) = memory_cgroup_dir(&cgroups, &mountinfo)?;
    let (limit_file, usage_file, file_keys) = hierarchy.files();
    let mut tightest: Option<Headroom> = None;
    let mut level = dir.as_path();
    loop {
        if let Some(room) = level_room(level, limit_file, usage_file, file_keys)
            && tightest
                .as_ref()
                .is_none_or(|t| room.free_bytes < t.free_bytes)
        {
            tightest = Some(room);
        }
        if level == mount {
            break;
        }
        match level.parent() {
            Some(parent) if parent.starts_with(&mount) => level = parent,
            _ => break,
        }
    }
    tightest
}

/// One level's room, None when it has no limit (or its files cannot be read).
fn level_room(
    dir: &Path,
    limit_file: &str,
    usage_file: &str,
    file_keys: [&str; 2],
) -> Option<Headroom> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let limit_bytes = parse_limit(&read(limit_file)?)?;
    let usage: u64 = read(usage_file)?.trim().parse().ok()?;
    let file_cache = read("memory.stat").map_or(0, |stat| stat_sum(&stat, file_keys));
    Some(Headroom {
        cgroup: dir.to_path_buf(),
        limit_bytes,
        free_bytes: limit_bytes.saturating_sub(usage.saturating_sub(file_cache)),
    })
}

/// A limit file's value in bytes; None for no limit (cgroup v2's `max`, v1's largest
/// page count in bytes, anything from 2^62 up).
fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|&n| n < 1 << 62)
}

/// The sum of `keys`' values in a `memory.stat` file (`name value` lines).
fn stat_sum(stat: &str, keys: [&str; 2]) -> u64 {
    stat.lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(name, _)| keys.contains(name))
        .filter_map(|(_, value)| value.trim().parse::<u64>().ok())
        .fold(0, u64::saturating_add)
}

/// The hierarchy, its mount point and the directory of the process's memory cgroup, from
/// `/proc/self/cgroup` and `/proc/self/mountinfo`. The v1 memory controller when it is
/// mounted, the v2 hierarchy otherwise.
fn memory_cgroup_dir(cgroups: &str, mountinfo: &str) -> Option<(Hierarchy, PathBuf, PathBuf)> {
    // "ID:controllers:path"; v2's line is "0::path".
    let v1_path = cgroups.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    let v2_path = cgroups.lines().find_map(|line| line.strip_prefix("0::"));
    let mount = |hierarchy: Hierarchy| {
        mountinfo.lines().find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let (root, point) = (*left.get(3)?, *left.get(4)?);
            let (fstype, options) = (*right.first()?, right.get(2).copied().unwrap_or(""));
            let matches = match hierarchy {
                Hierarchy::V1 => fstype == "cgroup" && options.split(',').any(|o| o == "memory"),
                Hierarchy::V2 => fstype == "cgroup2",
            };
            matches.then(|| (root.to_owned(), PathBuf::from(point)))
        })
    };
    let (hierarchy, path, (root, point)) = match (v1_path, mount(Hierarchy::V1)) {
        (Some(path), Some(m)) => (Hierarchy::V1, path, m),
        _ => (Hierarchy::V2, v2_path?, mount(Hierarchy::V2)?),
    };
    // A mount of a subtree (a container without its own cgroup namespace) has that
    // subtree as its root: the process's path is below it.
    let relative = Path::new(path)
        .strip_prefix(&root)
        .unwrap_or(Path::new(path));
    let relative = relative.strip_prefix("/").unwrap_or(relative);
    let dir = point.join(relative);
    Some((hierarchy, point, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_CGROUPS: &str = "12:pids:/\n7:memory:/memtrack-test-7\n1:name=systemd:/\n0::/\n";
    const HYBRID_MOUNTS: &str = "\
24 1 0:21 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
25 24 0:22 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
30 24 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
31 24 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
";

    #[test]
    fn the_v1_memory_controller_is_preferred_when_mounted() {
        let (hierarchy, mount, dir) = memory_cgroup_dir(HYBRID_CGROUPS, HYBRID_MOUNTS).unwrap();
        assert_eq!(hierarchy, Hierarchy::V1);
        assert_eq!(mount, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(dir, Path::new("/sys/fs/cgroup/memory/memtrack-test-7"));
    }

    #[test]
    fn v2_alone_is_read_from_its_mount() {
        let cgroups = "0::/user.slice/session-3.scope\n";
        let mounts = "40 1 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let (hierarchy, mount, dir) = memory_cgroup_dir(cgroups, mounts).unwrap();
        assert_eq!(hierarchy, Hierarchy::V2);
        assert_eq!(mount, Path::new("/sys/fs/cgroup"));
        assert_eq!(dir, Path::new("/sys/fs/cgroup/user.slice/session-3.scope"));
    }

    #[test]
    fn a_mounted_subtree_is_stripped_from_the_path() {
        let cgroups = "0::/docker/abc\n";
        let mounts = "40 1 0:30 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        let (_, _, dir) = memory_cgroup_dir(cgroups, mounts).unwrap();
        assert_eq!(dir, Path::new("/sys/fs/cgroup"));
    }

    #[test]
    fn no_cgroup_file_system_is_no_answer() {
        assert_eq!(
            memory_cgroup_dir("0::/\n", "22 1 0:5 / / rw - ext4 /dev/vda rw\n"),
            None
        );
    }

    #[test]
    fn limits_parse_and_no_limit_is_none() {
        assert_eq!(parse_limit("419430400\n"), Some(419_430_400));
        assert_eq!(parse_limit("max\n"), None);
        // cgroup v1's "no limit": the largest page count, in bytes.
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("garbage"), None);
    }

    #[test]
    fn the_file_cache_is_summed_from_memory_stat() {
        let stat =
            "cache 100\nrss 5\ntotal_active_file 30\ntotal_inactive_file 12\nactive_file 1\n";
        assert_eq!(
            stat_sum(stat, ["total_active_file", "total_inactive_file"]),
            42
        );
    }

    /// One level's files, as cgroup v2 writes them, in a directory of their own.
    #[test]
    fn a_level_with_a_limit_has_room_below_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("memory.max"), "1000000\n").unwrap();
        std::fs::write(dir.path().join("memory.current"), "300000\n").unwrap();
        std::fs::write(
            dir.path().join("memory.stat"),
            "anon 100000\nactive_file 50000\ninactive_file 50000\n",
        )
        .unwrap();
        let (limit, usage, keys) = Hierarchy::V2.files();
        let room = level_room(dir.path(), limit, usage, keys).unwrap();
        assert_eq!((room.limit_bytes, room.free_bytes), (1_000_000, 800_000));
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(level_room(dir.path(), limit, usage, keys), None);
    }
}
