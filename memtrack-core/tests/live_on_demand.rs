//! Live blocks beyond the preallocated ones (`TrackerBuilder::preallocated_live_blocks`)
//! go to the kernel's on-demand live-block map, and a tracker of other processes keeps
//! part of its preallocated ones in a map it makes only once its processes need it:
//! counted exactly all the same, through releases, reallocs and failed reallocs of
//! blocks in any map, and the capacity stays exactly `max_live_blocks`.

use memtrack::{Scope, Stats, Tracker, testing::test_tracker};
use memtrack_test_support::check_single_fixture;

/// Blocks held live at once by the in-process tests, against 1,024 preallocated.
const LIVE: usize = 5000;
const PREALLOCATED: u32 = 1024;

/// The size of the `i`-th block.
fn size_of_block(i: usize) -> usize {
    16 + i % 100
}

/// What the workload of [`hold_then_churn`] must count.
#[derive(Debug, Default, PartialEq, Eq)]
struct Expected {
    alloc_calls: u64,
    free_calls: u64,
    bytes_allocated: u64,
    bytes_freed: u64,
    failed_allocs: u64,
    peak_live_bytes: u64,
}

/// Allocates [`LIVE`] blocks (the first ones fill the preallocated map, the rest go on
/// demand), then: frees every third; grows every fifth of those left by realloc (a new
/// address, the old block released) and shrinks every seventh (often in place: the
/// same address comes back); a realloc that fails (the old block stays live, restored
/// to its map); allocates 500 new blocks (at freed addresses, whose entries may still
/// be tombstones in either map); then frees everything. Only libc calls between start
/// and stop: the pointers live in `slots`, allocated before. Returns what it must count.
fn hold_then_churn(slots: &mut Vec<(*mut libc::c_void, usize)>) -> Expected {
    let mut e = Expected::default();
    let mut live = 0u64;
    let grow_live = |live: &mut u64, e: &mut Expected, by: u64| {
        *live += by;
        e.peak_live_bytes = e.peak_live_bytes.max(*live);
    };
    // A malloc of `n` bytes kept in `slots`, counted.
    let malloc_held = |n: usize, slots: &mut Vec<_>, live: &mut u64, e: &mut Expected| {
        // SAFETY: plain libc allocation.
        let p = unsafe { libc::malloc(n) };
        assert!(!p.is_null());
        slots.push((p, n));
        e.alloc_calls += 1;
        e.bytes_allocated += n as u64;
        grow_live(live, e, n as u64);
    };
    for i in 0..LIVE {
        malloc_held(size_of_block(i), slots, &mut live, &mut e);
    }
    for (i, slot) in slots.iter_mut().enumerate() {
        if i % 3 == 0 {
            // SAFETY: a block from malloc above, freed once.
            unsafe { libc::free(slot.0) };
            e.free_calls += 1;
            e.bytes_freed += slot.1 as u64;
            live -= slot.1 as u64;
            *slot = (std::ptr::null_mut(), 0);
        }
    }
    for (i, slot) in slots.iter_mut().enumerate() {
        if slot.0.is_null() {
            continue;
        }
        let new = if i % 5 == 1 {
            slot.1 + 4096
        } else if i % 7 == 2 {
            slot.1 / 2 + 1
        } else {
            continue;
        };
        // A resize: the old block released, a new one handed out (DHAT's rules).
        e.free_calls += 1;
        e.bytes_freed += slot.1 as u64;
        live -= slot.1 as u64;
        // SAFETY: a live block from malloc or realloc.
        let q = unsafe { libc::realloc(slot.0, new) };
        assert!(!q.is_null());
        *slot = (q, new);
        e.alloc_calls += 1;
        e.bytes_allocated += new as u64;
        grow_live(&mut live, &mut e, new as u64);
    }
    // A realloc that fails keeps its old block: the last one, which went on demand.
    let last = slots.iter().rev().find(|s| !s.0.is_null()).unwrap().0;
    // SAFETY: a live block; the size is refused (above PTRDIFF_MAX), the block kept.
    let failed = unsafe { libc::realloc(last, usize::MAX / 2 + 1) };
    assert!(failed.is_null());
    e.failed_allocs += 1;
    for i in 0..500 {
        malloc_held(size_of_block(i) + 8, slots, &mut live, &mut e);
    }
    for slot in slots.iter_mut() {
        if !slot.0.is_null() {
            // SAFETY: a live block, freed once.
            unsafe { libc::free(slot.0) };
            e.free_calls += 1;
            e.bytes_freed += slot.1 as u64;
            live -= slot.1 as u64;
            *slot = (std::ptr::null_mut(), 0);
        }
    }
    assert_eq!(live, 0);
    e
}

/// The counters of [`Expected`] in `stats`.
fn measured(stats: &Stats) -> Expected {
    Expected {
        alloc_calls: stats.alloc_calls,
        free_calls: stats.free_calls,
        bytes_allocated: stats.bytes_allocated,
        bytes_freed: stats.bytes_freed,
        failed_allocs: stats.failed_allocs,
        peak_live_bytes: stats.peak_live_bytes,
    }
}

/// Counts [`hold_then_churn`] on this thread with a tracker holding `max` live blocks,
/// `PREALLOCATED` of them preallocated.
fn count_churn(max: u32) -> (Expected, Stats) {
    let mut tracker = test_tracker()
        .max_live_blocks(max)
        .preallocated_live_blocks(PREALLOCATED)
        .build(Scope::Thread)
        .unwrap();
    let mut slots = Vec::with_capacity(LIVE + 500);
    tracker.start().unwrap();
    let expected = hold_then_churn(&mut slots);
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    assert_eq!(tracker.unattributed_lost_events(), 0);
    (expected, stats)
}

/// 5,000 blocks live at once with 1,024 preallocated: every counter exact, none lost,
/// through frees, reallocs (grown, shrunk, failed) and new blocks at freed addresses.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn blocks_beyond_the_preallocated_ones_count_exactly() {
    let (expected, stats) = count_churn(65_536);
    assert_eq!(measured(&stats), expected, "{stats:#?}");
    assert_eq!(
        (stats.live_blocks, stats.live_bytes, stats.unmatched_frees),
        (0, 0, 0),
        "{stats:#?}"
    );
    assert_eq!(stats.lost_events, 0, "{stats:#?}");
}

/// The capacity is exactly `max_live_blocks`, preallocated part and on-demand part
/// together: with room for 4,000 of the 5,000 blocks, exactly 1,000 are lost, and their
/// frees are the unmatched ones; everything else is exact.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_full_live_map_with_blocks_on_demand_loses_exactly_the_excess() {
    let (expected, stats) = count_churn(4000);
    let lost = (LIVE - 4000) as u64;
    assert_eq!(stats.lost_events, lost, "{stats:#?}");
    assert_eq!(stats.unmatched_frees, lost, "{stats:#?}");
    assert_eq!(stats.alloc_calls, expected.alloc_calls, "{stats:#?}");
    assert_eq!(stats.bytes_allocated, expected.bytes_allocated);
    assert_eq!(stats.failed_allocs, expected.failed_allocs);
    // A lost block's release is unmatched, so neither freed nor live, whatever the
    // later churn did with its address.
    assert_eq!(stats.free_calls, expected.free_calls - lost, "{stats:#?}");
    assert_eq!(stats.bytes_freed + stats.live_bytes, expected.bytes_freed);
    assert_eq!(stats.live_blocks, lost, "{stats:#?}");
    // The lost blocks' bytes stay live (their releases are unmatched): a higher peak.
    assert!(
        stats.peak_live_bytes > expected.peak_live_bytes,
        "{stats:#?}"
    );
}

/// The DHAT-checked fixtures, with a single preallocated block: every block they keep
/// live beyond their first goes on demand, across threads too.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn every_fixture_is_exact_with_one_preallocated_block() {
    for name in [
        "malloc_free",
        "calloc",
        "realloc",
        "reallocarray",
        "aligned",
        "aligned_small",
        "leak",
        "peak",
        "double_free",
        "thread_exit",
        "threads",
    ] {
        check_single_fixture(Tracker::builder().preallocated_live_blocks(1), name);
    }
}

/// 0 preallocated blocks is refused before anything is loaded; more than the capacity
/// counts as all of it.
#[test]
fn the_preallocated_part_is_checked_and_clamped() {
    let err = Tracker::builder()
        .preallocated_live_blocks(0)
        .build(Scope::Thread)
        .err()
        .expect("0 preallocated blocks must be refused");
    assert_eq!(
        err.to_string(),
        "0 preallocated live blocks is impossible: the number must be 1 to 134217728 (more \
         than the live-block capacity counts as all of it)"
    );
    let bytes = memtrack::live_map_bytes(1000, 1 << 20);
    assert_eq!(bytes, memtrack::live_map_bytes(1000, 1000));
    assert_eq!((bytes.later, bytes.on_demand), (0, 0));
    // The default, for a tracker of other processes: 65,536 preallocated entries (80
    // bytes each, 16 per bucket) and the buckets of the other 983,040 blocks (2^20 of
    // them) at load; the other 458,752 preallocated entries and their 2^19 buckets
    // later; the last 524,288 blocks' entries on demand.
    let default = memtrack::live_map_bytes(1 << 20, 1 << 19);
    assert_eq!(default.at_load, (1 << 16) * (80 + 16) + (1 << 20) * 16);
    assert_eq!(default.later, 458_752 * 80 + (1 << 19) * 16);
    assert_eq!(default.on_demand, 524_288 * 96);
}

/// The preallocated entries a tracker of other processes reserves after load, by
/// default.
const LATER: u32 =
    memtrack_common::DEFAULT_PREALLOCATED_LIVE_BLOCKS - memtrack::LIVE_BLOCKS_AT_LOAD;

/// What tests/programs/hold_blocks.c says one of its children must count.
#[derive(Debug)]
struct ChildExpected {
    pid: u32,
    counts: Expected,
}

/// Runs `hold_blocks BLOCKS PROCESSES` under a tracker of other processes made by
/// `builder`; returns the tracker (waited for) and what each child says it must count.
fn run_hold_blocks(
    builder: memtrack::TrackerBuilder,
    blocks: u32,
    processes: u32,
) -> (memtrack::ProcessTracker, Vec<ChildExpected>) {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let program = memtrack_test_support::program("hold_blocks");
    let out_path = dir.path().join("out");
    let out = std::fs::File::create(&out_path).unwrap();
    let tracker = builder
        .spawn(
            memtrack::CommandSpec::new(&program)
                .args([blocks.to_string(), processes.to_string()])
                .fd(1, out.as_raw_fd()),
        )
        .unwrap();
    let status = tracker.wait().unwrap();
    assert_eq!(status.code, Some(0), "hold_blocks {blocks} {processes}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    let children: Vec<ChildExpected> = text
        .lines()
        .map(|line| {
            let field = |name: &str| -> u64 {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or_else(|| panic!("no {name} in {line:?}"))
                    .parse()
                    .unwrap()
            };
            ChildExpected {
                pid: field("pid") as u32,
                counts: Expected {
                    alloc_calls: field("allocs"),
                    free_calls: field("frees"),
                    bytes_allocated: field("bytes_allocated"),
                    bytes_freed: field("bytes_freed"),
                    failed_allocs: field("failed"),
                    peak_live_bytes: field("peak"),
                },
            }
        })
        .collect();
    assert_eq!(children.len(), processes as usize, "{text}");
    (tracker, children)
}

/// Asserts that `child` counted exactly what it says it must, and released everything:
/// none live, unmatched or lost.
fn assert_child_exact(processes: &[memtrack::TrackedProcess], child: &ChildExpected) {
    let stats = stats_of(processes, child.pid);
    assert_eq!(
        measured(stats),
        child.counts,
        "pid {}: {stats:#?}",
        child.pid
    );
    assert_eq!(
        (
            stats.live_blocks,
            stats.live_bytes,
            stats.unmatched_frees,
            stats.lost_events
        ),
        (0, 0, 0, 0),
        "{stats:#?}"
    );
}

/// The counters of `pid` among `processes`.
fn stats_of(processes: &[memtrack::TrackedProcess], pid: u32) -> &Stats {
    &processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("process {pid} was not tracked: {processes:#?}"))
        .stats
}

/// A tracker of other processes reserves 65,536 preallocated entries at load
/// (`memtrack::LIVE_BLOCKS_AT_LOAD`) and the rest of the preallocated ones once its
/// processes keep more blocks live; the blocks that go live meanwhile wait in the
/// on-demand map. Three processes holding 60,000 blocks each at once, churning them
/// through frees, reallocs in place and moved, a failed realloc and new blocks at freed
/// addresses, in all three maps: every counter of every process exact, nothing lost.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn blocks_in_every_live_map_count_exactly_across_processes() {
    let (tracker, children) = run_hold_blocks(Tracker::builder(), 180_000, 3);
    let processes = tracker.collect_processes().unwrap();
    for child in &children {
        assert_child_exact(&processes, child);
    }
    assert_eq!(tracker.unattributed_lost_events(), 0);
    assert_eq!(
        tracker.later_live_blocks(),
        memtrack::LaterLiveBlocks::Reserved { blocks: LATER }
    );
}

/// A process that never keeps `memtrack::GROW_AT_LIVE_BLOCKS` blocks live makes the
/// tracker reserve no more entries than those reserved at load.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_small_program_reserves_no_more_entries() {
    let blocks = memtrack::GROW_AT_LIVE_BLOCKS - 1_000;
    let (tracker, children) = run_hold_blocks(Tracker::builder(), blocks, 1);
    assert_child_exact(&tracker.collect_processes().unwrap(), &children[0]);
    assert_eq!(
        tracker.later_live_blocks(),
        memtrack::LaterLiveBlocks::Waiting { blocks: LATER }
    );
}

/// The capacity stays exactly `max_live_blocks` with blocks in all three maps: 120,000
/// blocks live at once with room for 100,000 (80,000 preallocated) lose exactly the
/// excess (less what the parent process holds), whether the blocks beyond `LIVE` went
/// on demand or into the entries reserved later; the lost blocks' releases are the
/// unmatched ones; everything else is exact.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_capacity_is_exact_across_the_three_live_maps() {
    let builder = Tracker::builder()
        .max_live_blocks(100_000)
        .preallocated_live_blocks(80_000);
    let (tracker, children) = run_hold_blocks(builder, 120_000, 1);
    let processes = tracker.collect_processes().unwrap();
    let child = &children[0];
    let parent = processes
        .iter()
        .find(|p| p.pid != child.pid)
        .expect("the parent is tracked");
    // The parent's blocks stay live while the child holds its own: they take room.
    let lost = 120_000 - (100_000 - parent.stats.live_blocks);
    let stats = stats_of(&processes, child.pid);
    assert_eq!(stats.lost_events, lost, "{stats:#?}");
    assert_eq!(stats.unmatched_frees, lost, "{stats:#?}");
    assert_eq!(stats.alloc_calls, child.counts.alloc_calls, "{stats:#?}");
    assert_eq!(stats.bytes_allocated, child.counts.bytes_allocated);
    assert_eq!(stats.failed_allocs, child.counts.failed_allocs);
    assert_eq!(
        stats.free_calls,
        child.counts.free_calls - lost,
        "{stats:#?}"
    );
    assert_eq!(stats.live_blocks, lost, "{stats:#?}");
    assert_eq!(
        tracker.later_live_blocks(),
        memtrack::LaterLiveBlocks::Reserved {
            blocks: 80_000 - memtrack::LIVE_BLOCKS_AT_LOAD
        }
    );
}

/// tests/programs/live_shadow.c under a tracker of other processes, its steps driven
/// over two pipes (`memtrack_test_support::run_stepped`; `at_step` runs at each step,
/// with the program's pid); returns the tracker (waited for), the program's pid and what
/// it printed: (reused, allocs, frees).
fn run_live_shadow(
    mode: &str,
    env: &[(&str, &str)],
    mut at_step: impl FnMut(&memtrack::ProcessTracker, u32),
) -> (memtrack::ProcessTracker, u32, (u64, u64, u64)) {
    let run = memtrack_test_support::run_stepped(
        &memtrack_test_support::program("live_shadow"),
        |spec| {
            env.iter()
                .fold(spec.args([mode]), |spec, (k, v)| spec.env(k, v))
        },
        Tracker::builder(),
        |tracker, pid, _| at_step(tracker, pid),
    );
    assert_eq!(run.status.code, Some(0), "live_shadow {mode}");
    let printed = (run.field("reused"), run.field("allocs"), run.field("frees"));
    (run.tracker, run.pid, printed)
}

/// Once the later preallocated entries exist, a new block goes straight into them,
/// without looking for an older entry of its address in the first map ("Newest first",
/// memtrack-ebpf's live_maps.rs). A block released while counting was off leaves its
/// entry in the first map; the allocator hands its address out again with counting on:
/// the new block is counted and released exactly (found before the older entry), and
/// the old one stays live in the counts, as a block released while not counting does.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_new_block_hides_an_older_entry_of_its_address() {
    let mut steps = 0;
    let (tracker, pid, (reused, allocs, frees)) = run_live_shadow("stale", &[], |t, pid| {
        steps += 1;
        // Off for the free of the first block, on again for the malloc after it.
        t.control().set_process_enabled(pid, steps == 2).unwrap();
    });
    assert_eq!(steps, 2);
    assert_eq!(reused, 1, "the allocator did not hand the address back");
    let stats = tracker.collect().unwrap();
    assert_eq!(
        (stats.alloc_calls, stats.free_calls),
        (allocs, frees),
        "{stats:#?}"
    );
    assert_eq!(allocs, 70_002);
    assert_eq!(
        (stats.bytes_allocated, stats.bytes_freed),
        (40 + 70_000 * 48 + 36, 70_000 * 48 + 36),
        "{stats:#?}"
    );
    // The block released while counting was off.
    assert_eq!((stats.live_blocks, stats.live_bytes), (1, 40), "{stats:#?}");
    assert_eq!(
        (stats.unmatched_frees, stats.lost_events),
        (0, 0),
        "{stats:#?}"
    );
    assert!(matches!(
        tracker.later_live_blocks(),
        memtrack::LaterLiveBlocks::Reserved { .. }
    ));
    let _ = pid;
}

/// The same across threads: thread A's last release stays a tombstone in the first map,
/// and thread B gets its address from the shared arena (glibc.malloc.arena_max=1): B's
/// block goes into the later entries, B's free finds it (not A's tombstone), and A's
/// next call leaves both maps right: no free is unmatched, nothing is lost.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_block_another_thread_released_last_counts_exactly() {
    let (tracker, _, (reused, allocs, frees)) = run_live_shadow(
        "thread",
        &[("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")],
        |_, _| {},
    );
    assert_eq!(reused, 1, "thread B did not get thread A's last address");
    let stats = tracker.collect().unwrap();
    assert_eq!(
        (stats.unmatched_frees, stats.lost_events),
        (0, 0),
        "{stats:#?}"
    );
    // Creating the two threads allocates too (glibc's per-thread structures): those
    // come on top of the program's own calls, all of which were released but the
    // threads' own, which stay live (the process ends with the threads running).
    assert!(stats.alloc_calls >= allocs, "{stats:#?}");
    assert_eq!(stats.free_calls, frees, "{stats:#?}");
    assert_eq!(
        stats.live_blocks,
        stats.alloc_calls - allocs,
        "only the threads' own blocks stay live: {stats:#?}"
    );
    assert!(matches!(
        tracker.later_live_blocks(),
        memtrack::LaterLiveBlocks::Reserved { .. }
    ));
}
