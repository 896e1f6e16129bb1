//! A tracker's probes live in the tracked process only, and only until it closes.
//!
//! A uprobe is an `int3` (0xCC) the kernel writes into the probed process's copy of the
//! code page; a process whose code shows the original byte at every probe site cannot
//! trap there, so it runs at native speed (what that costs otherwise, and the unrelated
//! process's loop timed beside a tracker: BENCHMARKS.md, docs/probe-costs.md). This test
//! reads the bytes at each probe site, which is exact where a timing ratio is noise:
//!
//! - in this process while the tracker is attached: 0xCC at every site;
//! - in two unrelated processes mapping the same library, one started before the tracker
//!   (the kernel's registration walks existing processes) and one after (its exec maps
//!   the library while the probes exist): the file's own byte at every site;
//! - in this process after [`Tracker::close`]: the file's byte again. The benchmark
//!   harnesses time their loops after `close`, so nothing traps in a timed iteration.

use std::{
    fs::File,
    io::{BufRead, BufReader, Write},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
};

use memtrack::Tracker;

/// The byte x86's `int3` is: what a uprobe puts at its site.
const INT3: u8 = 0xCC;

/// One breakpoint of a probe: a file offset in an ELF object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Site {
    object: PathBuf,
    /// Offset in `object`, in bytes.
    file_offset: u64,
}

/// Every breakpoint of the tracker's probes (entry, and return where the return probe
/// has its own), each once (aliases share their function's).
fn sites(tracker: &Tracker) -> Vec<Site> {
    let mut sites: Vec<Site> = tracker
        .probes()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let entry = Some(p.file_offset + p.entry_offset);
            let ret = p.return_probe.then_some(p.file_offset + p.return_offset);
            [entry, ret].into_iter().flatten().map(|file_offset| Site {
                object: std::fs::canonicalize(&p.object)
                    .unwrap_or_else(|e| panic!("canonicalize {}: {e}", p.object.display())),
                file_offset,
            })
        })
        .collect();
    sites.sort();
    sites.dedup();
    sites
}

/// The byte at `site` in the object's file: what the code holds without a probe.
fn file_byte(site: &Site) -> u8 {
    let file =
        File::open(&site.object).unwrap_or_else(|e| panic!("open {}: {e}", site.object.display()));
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, site.file_offset)
        .unwrap_or_else(|e| {
            panic!(
                "read {} at {:#x}: {e}",
                site.object.display(),
                site.file_offset
            )
        });
    byte[0]
}

/// Where `site` is mapped in process `pid`, from its /proc/PID/maps.
fn address_in(pid: u32, site: &Site) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/maps: {e}"));
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || Path::new(fields[5]) != site.object {
            continue;
        }
        let (start, end) = fields[0].split_once('-').expect("maps range");
        let hex = |s: &str| u64::from_str_radix(s, 16).expect("maps hex");
        let (start, end, offset) = (hex(start), hex(end), hex(fields[2]));
        if (offset..offset + (end - start)).contains(&site.file_offset) {
            return start + (site.file_offset - offset);
        }
    }
    panic!("process {pid} does not map {site:?}:\n{maps}")
}

/// The byte process `pid` holds at `site` now (through /proc/PID/mem).
fn byte_in(pid: u32, site: &Site) -> u8 {
    let address = address_in(pid, site);
    let mem = File::open(format!("/proc/{pid}/mem"))
        .unwrap_or_else(|e| panic!("open /proc/{pid}/mem: {e}"));
    let mut byte = [0u8];
    mem.read_exact_at(&mut byte, address)
        .unwrap_or_else(|e| panic!("read /proc/{pid}/mem at {address:#x} ({site:?}): {e}"));
    byte[0]
}

/// An unrelated process (`cat`) that is past its loader: it echoed a line.
struct Unrelated {
    child: Child,
    _stdout: BufReader<ChildStdout>,
}

impl Unrelated {
    fn start() -> Unrelated {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start cat");
        child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"ready\n")
            .expect("write to cat");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read from cat");
        assert_eq!(line, "ready\n", "cat echoed something else");
        Unrelated {
            child,
            _stdout: stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes its input and waits: it exits 0.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait for cat");
        assert!(status.success(), "cat: {status}");
    }
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn probes_are_in_the_tracked_process_only_and_gone_after_close() {
    let me = std::process::id();
    let before = Unrelated::start();
    let mut tracker = Tracker::new().expect("tracker of this process");
    tracker.start().expect("start");
    let after = Unrelated::start();

    let sites = sites(&tracker);
    assert!(
        !sites.is_empty(),
        "the tracker reports no probe: {:#?}",
        tracker.probes().unwrap()
    );
    for site in &sites {
        let original = file_byte(site);
        assert_ne!(original, INT3, "{site:?}: the file itself holds an int3");
        assert_eq!(
            byte_in(me, site),
            INT3,
            "{site:?}: no breakpoint in the tracked process"
        );
        for (which, unrelated) in [("started before", &before), ("started after", &after)] {
            assert_eq!(
                byte_in(unrelated.pid(), site),
                original,
                "{site:?}: the unrelated process {which} the tracker has code changed there"
            );
        }
    }
    before.finish();
    after.finish();

    tracker.stop().expect("stop");
    tracker.close();
    for site in &sites {
        assert_eq!(
            byte_in(me, site),
            file_byte(site),
            "{site:?}: a breakpoint is left in this process after Tracker::close"
        );
    }
}
