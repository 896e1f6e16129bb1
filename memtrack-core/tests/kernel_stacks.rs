//! Stacks unwound in the kernel: tests/stacks/call_tree.c (built at -O2 without frame
//! pointers) runs under a tracker with stacks on, and every stack of its allocations is
//! checked: its frames (symbolized with the executable's symbol table), its end, and its
//! counters, exactly; the per-stack counters must add up to the process's counters.

use std::{path::Path, process::Command};

use memtrack::{
    CommandSpec, OutputDir, ProcessTracker, Scope, Tracker, TrackerBuilder, UprobeLinks,
    stacks::{ProcessStacks, StackCounts, StackEnd, stacks_file_name},
};
use memtrack_test_support::repo_dir;
use object::{Object, ObjectSymbol};

/// Builds call_tree.c as the stacks fixtures are built.
fn build(dir: &Path) -> std::path::PathBuf {
    build_fixture(dir, "call_tree")
}

/// Builds tests/stacks/`name`.c as the stacks fixtures are built.
fn build_fixture(dir: &Path, name: &str) -> std::path::PathBuf {
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&out)
        .arg(repo_dir().join(format!("tests/stacks/{name}.c")))
        .status()
        .expect("gcc runs");
    assert!(status.success(), "compiling {name}.c failed");
    out
}

/// Runs `exe` with `args` under a spawn tracker with stacks at `depth` through `links`,
/// checks that it exited 0, and returns the tracker (for its counters) and the
/// process's stacks.
fn run_with_stacks(
    exe: &Path,
    args: &[&str],
    depth: u32,
    links: UprobeLinks,
) -> (ProcessTracker, ProcessStacks) {
    let builder = Tracker::builder().stacks(depth).uprobe_links(links);
    run_under(builder, exe, args, &format!("depth {depth}, {links:?}"))
}

/// Runs `exe` with `args` under a spawn tracker made by `builder` (with stacks on),
/// checks that it exited 0 (`case` says which run failed), and returns the tracker and
/// the process's stacks.
fn run_under(
    builder: TrackerBuilder,
    exe: &Path,
    args: &[&str],
    case: &str,
) -> (ProcessTracker, ProcessStacks) {
    let tracker = builder
        .spawn(CommandSpec::new(exe).args(args.iter().copied()))
        .unwrap();
    let status = tracker.wait().unwrap();
    assert_eq!(status.code, Some(0), "{exe:?} {args:?}, {case}");
    let stacks = tracker.stacks(tracker.pid()).expect("stacks are on");
    (tracker, stacks)
}

/// The function symbol of `exe` holding ELF virtual address `addr`.
fn symbol_at(exe: &Path, addr: u64) -> Option<String> {
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
        .find(|s| s.address() <= addr && addr < s.address() + s.size())
        .map(|s| s.name().unwrap().to_string())
}

/// The frames of each stack as function names of the executable (`?` for a frame in
/// another object), with the stack's counters.
fn named(stacks: &ProcessStacks, exe: &Path) -> Vec<(Vec<String>, StackEnd, StackCounts)> {
    let exe_canonical = exe.canonicalize().unwrap();
    let mut out: Vec<_> = stacks
        .process
        .entries
        .iter()
        .map(|e| {
            let stack = &stacks.stacks[e.stack as usize];
            let names: Vec<String> = stack
                .frames
                .iter()
                .map(|f| {
                    let in_exe = f.object.is_some_and(|o| {
                        stacks.objects[o as usize]
                            .path
                            .canonicalize()
                            .ok()
                            .as_deref()
                            == Some(exe_canonical.as_path())
                    });
                    if in_exe {
                        symbol_at(exe, f.lookup_address()).unwrap_or_else(|| "??".into())
                    } else {
                        "?".into()
                    }
                })
                .collect();
            // Lifetimes are checked apart (`total_lifetimes_*`, and call_tree's).
            let counts = e.counts.clone();
            assert!(
                counts.total_lifetime.is_some(),
                "no total lifetime: {counts:?}"
            );
            let counts = StackCounts {
                total_lifetime: None,
                ..counts
            };
            (names, stack.end, counts)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn call_tree_stacks_and_counts_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let (tracker, stacks) = run_with_stacks(&exe, &[], 64, UprobeLinks::default());
    let stats = tracker.collect().unwrap();
    let got = named(&stacks, &exe);
    let counts =
        |alloc_blocks, alloc_bytes, freed_blocks, freed_bytes, at_peak: (u64, u64)| StackCounts {
            alloc_blocks,
            alloc_bytes,
            freed_blocks,
            freed_bytes,
            live_blocks: alloc_blocks - freed_blocks,
            live_bytes: alloc_bytes - freed_bytes,
            at_peak_blocks: at_peak.0,
            at_peak_bytes: at_peak.1,
            max_live_bytes: if alloc_bytes == 1160 { 116 } else { 100 },
            max_live_blocks: 1,
            total_lifetime: None,
        };
    // Past main: glibc's __libc_start_call_main and __libc_start_main (in libc), then
    // the executable's _start, whose rule ends the stack.
    let path = |f: &str| vec![f.to_string()];
    let expected = vec![
        (
            [
                path("decode"),
                path("load"),
                path("main"),
                path("?"),
                path("?"),
                path("_start"),
            ]
            .concat(),
            StackEnd::Complete,
            counts(10, 1160, 9, 1044, (1, 116)),
        ),
        (
            [
                path("decode"),
                path("load_other"),
                path("main"),
                path("?"),
                path("?"),
                path("_start"),
            ]
            .concat(),
            StackEnd::Complete,
            counts(3, 300, 3, 300, (1, 100)),
        ),
    ];
    assert_eq!(got, expected, "{stacks:#?}");
    // On the allocation clock: load's 9 freed blocks were freed before anything else
    // was allocated (0 each) and its kept one lived through load_other's 300 bytes;
    // load_other's were freed at once.
    let lifetimes: Vec<Option<u64>> = {
        let mut by_bytes: Vec<_> = stacks
            .process
            .entries
            .iter()
            .map(|e| (e.counts.alloc_bytes, e.counts.total_lifetime))
            .collect();
        by_bytes.sort();
        by_bytes.into_iter().map(|(_, tl)| tl).collect()
    };
    assert_eq!(lifetimes, [Some(0), Some(300)]);
    assert_eq!(stacks.process.bytes_allocated, Some(1460));
    assert!(stacks.process.lost.is_zero(), "{:?}", stacks.process.lost);
    let total = stacks.process.total();
    assert_eq!(total.alloc_blocks, stats.alloc_calls, "{stats:#?}");
    assert_eq!(total.alloc_bytes, stats.bytes_allocated);
    assert_eq!(total.freed_blocks, stats.free_calls);
    assert_eq!(total.freed_bytes, stats.bytes_freed);
    assert_eq!(total.at_peak_bytes, stats.peak_live_bytes);
    assert_eq!(stacks.depth_limit, 64);
    assert!(
        stacks.objects.iter().any(|o| o.build_id.is_some()),
        "{:#?}",
        stacks.objects
    );
}

/// Each stack's total lifetime (valgrind DHAT's "tl") on the allocation clock, exactly:
/// a freed block's is the bytes the process allocated while it was live, a block live
/// at exit's runs to the process's last allocation, and a realloc's new block is not
/// in its old block's lifetime (tests/stacks/lifetimes.c says which is which). The
/// scope's clock and its peak's time on it are exact too.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn total_lifetimes_are_the_bytes_allocated_while_each_block_lived() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "lifetimes");
    let (tracker, stacks) = run_with_stacks(&exe, &[], 64, UprobeLinks::default());
    let stats = tracker.collect().unwrap();
    assert_eq!(stats.bytes_allocated, 1271, "{stats:#?}");
    assert_eq!(stacks.process.bytes_allocated, Some(1271));
    assert_eq!(stacks.process.peak_bytes_allocated, Some(1015));
    // Each stack by its two innermost frames: the wrapper that called malloc or
    // realloc, and the function that called the wrapper.
    let mut got: Vec<(String, String, u64, Option<u64>)> = stacks
        .process
        .entries
        .iter()
        .map(|e| {
            let frames = &stacks.stacks[e.stack as usize].frames;
            let name = |i: usize| {
                frames
                    .get(i)
                    .and_then(|f| symbol_at(&exe, f.lookup_address()))
                    .unwrap_or_else(|| "?".into())
            };
            (
                name(0),
                name(1),
                e.counts.alloc_blocks,
                e.counts.total_lifetime,
            )
        })
        .collect();
    got.sort();
    // between's loop, if unrolled, calls alloc from three sites: three stacks.
    let between: Vec<_> = got.iter().filter(|r| r.1 == "between").collect();
    assert!(
        between.iter().map(|r| r.2).sum::<u64>() == 3 && between.iter().all(|r| r.3 == Some(0)),
        "{between:?}"
    );
    got.retain(|r| r.1 != "between");
    let row = |wrapper: &str, caller: &str, blocks, lifetime| {
        (
            wrapper.to_string(),
            caller.to_string(),
            blocks,
            Some(lifetime),
        )
    };
    let mut expected = vec![
        row("alloc", "keep_freed", 1, 21),
        row("alloc", "short_lived", 5, 0),
        row("alloc", "grow", 1, 0),
        row("resize", "grow", 1, 80),
        row("alloc", "keep_live", 1, 30),
        row("alloc", "tail", 1, 0),
    ];
    expected.sort();
    assert_eq!(got, expected, "{stacks:#?}");
    assert!(stacks.process.lost.is_zero(), "{:?}", stacks.process.lost);
}

/// Stacks deeper than the entry program's first batch are walked on by the unwind
/// program's tail calls, with either kind of uprobe link (the unwind program is loaded
/// the way the entry program is): tests/stacks/deep.c's recursion, whole within the
/// limit, cut at exactly the limit beyond it, never lost. Each case: (depth limit,
/// levels of recursion, end, descend frames).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn deep_stacks_are_walked_by_the_tail_call_chain_with_either_link_kind() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "deep");
    let cases = [
        (64, 40, StackEnd::Complete, 41),
        (64, 70, StackEnd::Truncated, 64),
        (20, 40, StackEnd::Truncated, 20),
        (9, 40, StackEnd::Truncated, 9),
    ];
    for links in [UprobeLinks::Auto, UprobeLinks::PerfEvent] {
        for (depth, levels, end, descend) in cases {
            let case = format!("{links:?}, depth {depth}, {levels} levels");
            let (_tracker, stacks) = run_with_stacks(&exe, &[&levels.to_string()], depth, links);
            let mut frames = vec!["descend".to_string(); descend];
            if end == StackEnd::Complete {
                // main, glibc's two start-up frames (in libc), _start.
                frames.extend(["main", "?", "?", "_start"].map(String::from));
            }
            let counts = StackCounts {
                alloc_blocks: 3,
                alloc_bytes: 192,
                freed_blocks: 3,
                freed_bytes: 192,
                max_live_bytes: 64,
                max_live_blocks: 1,
                at_peak_blocks: 1,
                at_peak_bytes: 64,
                ..StackCounts::default()
            };
            assert_eq!(
                named(&stacks, &exe),
                vec![(frames, end, counts)],
                "{case}: {stacks:#?}"
            );
            assert!(
                stacks.process.lost.is_zero(),
                "{case}: {:?}",
                stacks.process.lost
            );
            assert_eq!(stacks.depth_limit, depth, "{case}");
        }
    }
}

/// Consecutive stacks of different lengths on one thread (tests/stacks/deep.c with
/// several depths, in turn): each walk overwrites the previous stack's frames in place
/// and reuses its id only for the very same frames, so a shorter stack after a longer
/// one, and the longer one again, are each their own stack with their own counts. At a
/// limit of 20: 30 levels are cut at 20 descend frames; 5 levels are 6 descend frames
/// and the 4 start-up frames, whole; 15 levels are exactly 20 frames, whole.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn stacks_of_different_lengths_in_turn_keep_their_own_ids() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "deep");
    let (tracker, stacks) = run_with_stacks(&exe, &["30", "5", "15"], 20, UprobeLinks::default());
    let stats = tracker.collect().unwrap();
    let counts = StackCounts {
        alloc_blocks: 3,
        alloc_bytes: 192,
        freed_blocks: 3,
        freed_bytes: 192,
        max_live_bytes: 64,
        max_live_blocks: 1,
        ..StackCounts::default()
    };
    let whole = |descend: usize| {
        let mut frames = vec!["descend".to_string(); descend];
        frames.extend(["main", "?", "?", "_start"].map(String::from));
        frames
    };
    let mut expected = vec![
        (vec!["descend".to_string(); 20], StackEnd::Truncated),
        (whole(6), StackEnd::Complete),
        (whole(16), StackEnd::Complete),
    ];
    expected.sort();
    let got: Vec<_> = named(&stacks, &exe)
        .into_iter()
        .map(|(frames, end, mut c)| {
            // The peak (one 64-byte block) is one block's: checked below.
            let at_peak = (c.at_peak_blocks, c.at_peak_bytes);
            c.at_peak_blocks = 0;
            c.at_peak_bytes = 0;
            assert_eq!(c, counts, "{frames:?}: {stacks:#?}");
            (frames, end, at_peak)
        })
        .collect();
    let shapes: Vec<_> = got.iter().map(|(f, e, _)| (f.clone(), *e)).collect();
    assert_eq!(shapes, expected, "{stacks:#?}");
    // The process's peak is one live block of 64 bytes, reached again by every
    // allocation: t-gmax is the latest (as valgrind DHAT's), in the last run, 15 levels.
    let mut peaks: Vec<_> = got.iter().map(|(_, _, p)| *p).collect();
    peaks.sort();
    assert_eq!(peaks, vec![(0, 0), (0, 0), (1, 64)], "{stacks:#?}");
    let last = got
        .iter()
        .find(|(f, e, _)| *f == whole(16) && *e == StackEnd::Complete);
    assert_eq!(last.map(|(_, _, p)| *p), Some((1, 64)), "{stacks:#?}");
    assert!(stacks.process.lost.is_zero(), "{:?}", stacks.process.lost);
    let total = stacks.process.total();
    assert_eq!(total.alloc_blocks, stats.alloc_calls, "{stats:#?}");
    assert_eq!(total.freed_blocks, stats.free_calls);
    assert_eq!(total.alloc_bytes, stats.bytes_allocated);
}

/// Stacks off (the default): no stacks are kept.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn stacks_are_off_by_default() {
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new("/bin/true"))
        .unwrap();
    tracker.wait().unwrap();
    assert!(tracker.stacks(tracker.pid()).is_none());
}

/// The in-process tracker writes its stacks file through an `OutputDir`: what it holds
/// is what `Tracker::stacks` reads, and it adds up to the counters (one block of 1,000
/// bytes, freed).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn in_process_tracker_writes_its_stacks_file() {
    let mut tracker = Tracker::builder().stacks(64).build(Scope::Thread).unwrap();
    tracker.start().unwrap();
    let v: Vec<u8> = Vec::with_capacity(std::hint::black_box(1000));
    drop(std::hint::black_box(v));
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    assert_eq!(
        (stats.alloc_calls, stats.bytes_allocated, stats.free_calls),
        (1, 1000, 1)
    );
    let dir = tempfile::tempdir().unwrap();
    let out = OutputDir::open(dir.path(), None).unwrap();
    let path = tracker.write_stacks(&out).unwrap().expect("stacks are on");
    assert_eq!(path, dir.path().join(stacks_file_name(std::process::id())));
    let written: ProcessStacks = rmp_serde::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut read = tracker.stacks().unwrap().unwrap();
    assert!(written.process.start_ns > 0 && written.process.end_ns > written.process.start_ns);
    read.process.start_ns = written.process.start_ns;
    read.process.end_ns = written.process.end_ns;
    assert_eq!(written, read);
    assert_eq!(written.process.entries.len(), 1, "{written:#?}");
    let total = written.process.total();
    assert_eq!(
        (
            total.alloc_blocks,
            total.alloc_bytes,
            total.freed_blocks,
            total.freed_bytes
        ),
        (1, 1000, 1, 1000)
    );
    let without = Tracker::builder().build(Scope::Thread).unwrap();
    assert_eq!(without.write_stacks(&out).unwrap(), None);
}

/// Two threads allocating from one stack at the same moment (tests/stacks/racing_max.c):
/// each of its 40 stacks (`take` recursing 1 to 40 deep) gets 4 blocks of 24 bytes from
/// each thread, which both raise the stack's maximum at once, and main frees them all
/// after joining the threads. Every stack's most bytes live at once must be all 8
/// blocks' 192 bytes, and its blocks then all 8. Plain writes of the two failed here:
/// 4 runs in 100 had a maximum lowered to 168 bytes by the other thread's late write,
/// and with the bytes raised by a compare-and-swap, 6 to 11 runs in 300 still had 7
/// blocks beside 192 bytes.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_most_bytes_live_on_a_stack_are_kept_when_threads_race() {
    const THREADS: u64 = 2;
    const ROUNDS: usize = 40;
    const PER: u64 = 4;
    const SIZE: u64 = 24;
    const BLOCKS: u64 = THREADS * PER;
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "racing_max");
    let (tracker, stacks) = run_with_stacks(&exe, &[], 64, UprobeLinks::default());
    let stats = tracker.collect().unwrap();
    assert_eq!(stats.lost_events, 0, "{stats:#?}");
    assert!(stacks.process.lost.is_zero(), "{:?}", stacks.process.lost);
    let mut depths = Vec::new();
    for (frames, end, c) in named(&stacks, &exe) {
        if frames.first().map(String::as_str) != Some("take") {
            continue;
        }
        let depth = frames.iter().take_while(|f| *f == "take").count();
        assert_eq!(end, StackEnd::Complete, "{frames:?}");
        assert_eq!(frames[depth], "worker", "{frames:?}");
        assert_eq!(
            (c.alloc_blocks, c.alloc_bytes, c.freed_blocks, c.freed_bytes),
            (BLOCKS, BLOCKS * SIZE, BLOCKS, BLOCKS * SIZE),
            "depth {depth}"
        );
        assert_eq!(c.max_live_bytes, BLOCKS * SIZE, "depth {depth}: {c:?}");
        assert_eq!(c.max_live_blocks, BLOCKS, "depth {depth}: {c:?}");
        depths.push(depth);
    }
    depths.sort();
    assert_eq!(depths, (1..=ROUNDS).collect::<Vec<_>>());
}

/// The in-kernel cache of walks (memtrack_common::stack_cache) against stacks that
/// look alike where it looks first (tests/stacks/twins.c): left, right and same reach
/// malloc through leaf with the same stack pointer and return address, so they share a
/// cache slot and differ only further up; the fp_ functions do the same with frame
/// pointers, so the walk depends on rbp values; big's 20,000-byte frame puts a return
/// address beyond the cache's reach. Every stack must be exact with the cache on and
/// off; with it on, the alternating calls and big's are all walked (the slot's words
/// differ each time; a word out of reach is not remembered) and the repeated ones
/// reused.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_cache_of_walks_tells_alike_stacks_apart_and_reuses_repeated_ones() {
    const ROUNDS: u64 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "twins");
    let path = |leaf: &str, caller: &str| {
        [leaf, caller, "main", "?", "?", "_start"]
            .map(String::from)
            .to_vec()
    };
    let counts = |size: u64| StackCounts {
        alloc_blocks: ROUNDS,
        alloc_bytes: ROUNDS * size,
        freed_blocks: ROUNDS,
        freed_bytes: ROUNDS * size,
        max_live_bytes: size,
        max_live_blocks: 1,
        ..StackCounts::default()
    };
    let mut expected = vec![
        (path("leaf", "big"), counts(256)),
        (path("fp_leaf", "fp_left"), counts(160)),
        (path("fp_leaf", "fp_right"), counts(192)),
        (path("fp_leaf", "fp_same"), counts(224)),
        (path("leaf", "left"), counts(64)),
        (path("leaf", "right"), counts(96)),
        (path("leaf", "same"), counts(128)),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    for cache in [true, false] {
        let builder = Tracker::builder().stacks(64).stack_cache(cache);
        let rounds = ROUNDS.to_string();
        let (tracker, stacks) = run_under(builder, &exe, &[&rounds], &format!("cache {cache}"));
        let walks = tracker.stack_walks().expect("stacks are on");
        let stats = tracker.collect().unwrap();
        let got: Vec<_> = named(&stacks, &exe)
            .into_iter()
            .map(|(frames, end, mut c)| {
                assert_eq!(end, StackEnd::Complete, "cache {cache}: {frames:?}");
                // The one block of the process's peak (256 bytes) is checked below.
                c.at_peak_blocks = 0;
                c.at_peak_bytes = 0;
                (frames, c)
            })
            .collect();
        assert_eq!(got, expected, "cache {cache}: {stacks:#?}");
        let total = stacks.process.total();
        assert_eq!(total.at_peak_bytes, 256, "cache {cache}");
        assert_eq!(total.alloc_blocks, stats.alloc_calls, "cache {cache}");
        assert_eq!(total.alloc_bytes, stats.bytes_allocated, "cache {cache}");
        assert!(stacks.process.lost.is_zero(), "{:?}", stacks.process.lost);
        assert_eq!(
            walks.walked + walks.reused,
            7 * ROUNDS,
            "cache {cache}: every allocation's stack was found once: {walks:?}"
        );
        if cache {
            // The alternating calls find each other's walk in their shared slot, and
            // big's walk is not remembered: all walked. The repeated ones are reused but
            // for the first on each CPU (the process may move between CPUs a few times).
            assert!(walks.walked >= 5 * ROUNDS, "{walks:?}");
            assert!(walks.reused >= 2 * ROUNDS - 50, "{walks:?}");
        } else {
            assert_eq!(walks.reused, 0, "{walks:?}");
        }
    }
}
