//! Live blocks in the direct-mapped slots in front of the live-block maps
//! (memtrack-ebpf's live_slots.rs): a block whose slot is free goes there, one whose
//! slot is taken goes to the maps, and a release looks at the slot first. Counted
//! exactly all the same: across threads, for blocks sharing a slot, through a double
//! free and a reset.
//!
//! The in-process tests use a tracker with room beyond its preallocated entries (the
//! slots share that room; `memtrack::testing::test_tracker` has none, so it uses no
//! slot) and count on this thread alone.

use aya::maps::{Array, Map, MapData};
use memtrack::{Scope, Stats, Tracker};
use memtrack_common::{LiveSlot, live_slot, map_names};

/// A tracker of this thread whose blocks may go into the slots (the default capacity
/// is twice the preallocated entries).
fn slot_tracker() -> Tracker {
    Tracker::builder()
        .count_syscalls(false)
        .build(Scope::Thread)
        .unwrap()
}

/// The counters every exact test compares: (alloc_calls, free_calls, bytes_allocated,
/// bytes_freed, live_blocks, unmatched_frees, lost_events).
fn counters(stats: &Stats) -> (u64, u64, u64, u64, u64, u64, u64) {
    (
        stats.alloc_calls,
        stats.free_calls,
        stats.bytes_allocated,
        stats.bytes_freed,
        stats.live_blocks,
        stats.unmatched_frees,
        stats.lost_events,
    )
}

/// The slot of the block at `p` of this process.
fn slot_of(p: *mut libc::c_void) -> u32 {
    live_slot::index(std::process::id(), p as u64)
}

/// `owner` of a slot whose first block is in a pair already.
const PAIRED: u32 = u32::MAX - 1;

/// Blocks of 32 bytes allocated (on this thread, counting) until `pairs` pairs of live
/// blocks share a slot; returns every block and the pairs as indexes into them (the
/// first of a pair found its slot free, the second went to the live maps). Only libc
/// calls while counting: both tables are allocated before.
fn blocks_sharing_slots(
    blocks: &mut Vec<*mut libc::c_void>,
    owner: &mut [u32],
    pairs: &mut Vec<(usize, usize)>,
    wanted: usize,
) {
    while pairs.len() < wanted && blocks.len() < blocks.capacity() {
        // SAFETY: plain libc allocation.
        let p = unsafe { libc::malloc(32) };
        assert!(!p.is_null());
        let slot = slot_of(p) as usize;
        let i = blocks.len();
        blocks.push(p);
        match owner[slot] {
            u32::MAX => owner[slot] = i as u32,
            // A third block of a slot already paired: in the maps like the second.
            PAIRED => {}
            first => {
                pairs.push((first as usize, i));
                owner[slot] = PAIRED;
            }
        }
    }
}

/// Two blocks whose (tgid, address) share a slot: the first takes the slot, the second
/// goes to the live maps; both release exactly, whichever is released first, and so do
/// all the others.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn blocks_sharing_a_slot_release_exactly() {
    let mut tracker = slot_tracker();
    let mut blocks = Vec::with_capacity(60_000);
    let mut owner = vec![u32::MAX; live_slot::LEN as usize];
    let mut pairs = Vec::with_capacity(4);
    tracker.start().unwrap();
    blocks_sharing_slots(&mut blocks, &mut owner, &mut pairs, 4);
    // Half the pairs: the block in the maps first; the other half: the slot's first.
    for (k, &(first, second)) in pairs.iter().enumerate() {
        let order = if k % 2 == 0 {
            [second, first]
        } else {
            [first, second]
        };
        for i in order {
            // SAFETY: a live block from malloc above, freed once (nulled).
            unsafe { libc::free(blocks[i]) };
            blocks[i] = std::ptr::null_mut();
        }
    }
    for p in blocks.iter_mut().filter(|p| !p.is_null()) {
        // SAFETY: as above.
        unsafe { libc::free(*p) };
        *p = std::ptr::null_mut();
    }
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    assert_eq!(
        pairs.len(),
        4,
        "no blocks shared a slot among {}",
        blocks.len()
    );
    let n = blocks.len() as u64;
    assert_eq!(
        counters(&stats),
        (n, n, 32 * n, 32 * n, 0, 0, 0),
        "{stats:#?}"
    );
    assert_eq!(tracker.unattributed_lost_events(), 0);
}

/// Every `LIVE_SLOTS` array the kernel holds (one per loaded tracker, of any process;
/// this binary's tests run side by side, each with its own), found by name.
fn slot_arrays() -> Vec<Array<MapData, LiveSlot>> {
    aya::maps::loaded_maps()
        .filter_map(Result::ok)
        .filter(|info| info.name_as_str() == Some(map_names::LIVE_SLOTS))
        .filter_map(|info| MapData::from_id(info.id()).ok())
        .filter_map(|data| Array::try_from(Map::Array(data)).ok())
        .collect()
}

/// Whether the slot of this process's block at `p` in `array` holds that block (its tag
/// without the generation bits is the address). A lookup is a syscall with the value
/// on the stack: it allocates nothing.
fn holds(array: &Array<MapData, LiveSlot>, p: *mut libc::c_void) -> bool {
    array.get(&slot_of(p), 0).is_ok_and(|slot: LiveSlot| {
        slot.tgid == std::process::id() && slot.tag & (live_slot::ADDR_LIMIT - 1) == p as u64
    })
}

/// The slots are used: a block whose slot is free is held in it while it lives (not in
/// the hash maps), and its release leaves the slot. The other tests here count exactly
/// whichever way a block goes; this one fails if blocks stopped going into slots.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_block_whose_slot_is_free_is_held_in_it() {
    const BLOCKS: usize = 16;
    let mut tracker = slot_tracker();
    let arrays = slot_arrays();
    assert!(
        !arrays.is_empty(),
        "no {} map loaded",
        map_names::LIVE_SLOTS
    );
    let mut blocks = [std::ptr::null_mut(); BLOCKS];
    // Which array holds each block (index into `arrays`), read while it lives.
    let mut held_in = [None; BLOCKS];
    tracker.start().unwrap();
    for p in blocks.iter_mut() {
        // SAFETY: plain libc allocation.
        *p = unsafe { libc::malloc(48) };
        assert!(!p.is_null());
    }
    for (i, &p) in blocks.iter().enumerate() {
        held_in[i] = arrays.iter().position(|a| holds(a, p));
    }
    for p in blocks {
        // SAFETY: a live block from malloc above, freed once.
        unsafe { libc::free(p) };
    }
    let still_held = blocks
        .iter()
        .zip(held_in)
        .filter(|(p, array)| array.is_some_and(|a| holds(&arrays[a], **p)))
        .count();
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    let n = BLOCKS as u64;
    assert_eq!(
        counters(&stats),
        (n, n, 48 * n, 48 * n, 0, 0, 0),
        "{stats:#?}"
    );
    // 16 blocks in 4,096 slots: two sharing one (the second goes to the hash maps) is
    // rare; none held would mean the slots are not used.
    let held = held_in.iter().filter(|a| a.is_some()).count();
    assert!(
        held >= BLOCKS / 2,
        "only {held} of {BLOCKS} live blocks were in their slots: {held_in:?}"
    );
    assert_eq!(still_held, 0, "a released block still in its slot");
}

/// A reset (a benchmark region's start) forgets the blocks in the slots as it forgets
/// those in the maps: their later releases are unmatched, like blocks allocated before
/// tracking; blocks allocated after it count exactly, at the same addresses too.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_reset_forgets_slot_held_blocks() {
    const BEFORE: usize = 3_000;
    let mut tracker = slot_tracker();
    let mut blocks = Vec::with_capacity(BEFORE);
    tracker.start().unwrap();
    for i in 0..BEFORE {
        // SAFETY: plain libc allocation.
        let p = unsafe { libc::malloc(16 + i % 50) };
        assert!(!p.is_null());
        blocks.push(p);
    }
    // Not counting around the reset: it allocates on this thread.
    tracker.stop().unwrap();
    tracker.reset().unwrap();
    tracker.start().unwrap();
    for p in blocks.drain(..) {
        // SAFETY: a live block from malloc above, freed once.
        unsafe { libc::free(p) };
    }
    // The addresses just released come back (glibc's cache is last-in first-out).
    for _ in 0..10 {
        // SAFETY: plain libc calls.
        unsafe { libc::free(std::hint::black_box(libc::malloc(40))) };
    }
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    assert_eq!(
        counters(&stats),
        (10, 10, 400, 400, 0, BEFORE as u64, 0),
        "{stats:#?}"
    );
}

/// What tests/programs/slot_threads.c printed: its calls while counting.
struct Printed {
    allocs: u64,
    frees: u64,
    bytes: u64,
    unmatched: u64,
}

/// Runs tests/programs/slot_threads.c with `args` under a tracker of other processes,
/// counting from its first step to its second; returns its counters and what it
/// printed.
fn run_slot_threads(args: &[&str]) -> (Stats, Printed) {
    let builder = Tracker::builder()
        .count_syscalls(false)
        .start_enabled(false);
    let run = memtrack_test_support::run_stepped(
        &memtrack_test_support::program("slot_threads"),
        |spec| spec.args(args.iter().copied()),
        builder,
        // On for the work, off again after it.
        |tracker, pid, step| {
            tracker
                .control()
                .set_process_enabled(pid, step == 1)
                .unwrap();
        },
    );
    assert_eq!(run.steps, 2, "slot_threads {args:?}");
    assert_eq!(run.status.code, Some(0), "slot_threads {args:?}");
    assert_eq!(run.tracker.unattributed_lost_events(), 0);
    let printed = Printed {
        allocs: run.field("allocs"),
        frees: run.field("frees"),
        bytes: run.field("bytes"),
        unmatched: run.field("unmatched"),
    };
    (run.tracker.collect().unwrap(), printed)
}

/// Blocks allocated on one thread and released on another while in their slots, both
/// ways, then new blocks at the released addresses: every counter exact, nothing
/// unmatched or lost.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn blocks_released_on_another_thread_count_exactly() {
    let (stats, p) = run_slot_threads(&["threads", "2000"]);
    assert_eq!((p.allocs, p.frees), (2 * 2000 + 200, 2 * 2000 + 200));
    assert_eq!(
        counters(&stats),
        (p.allocs, p.frees, p.bytes, p.bytes, 0, 0, 0),
        "{stats:#?}"
    );
}

/// A block in its slot released twice: the second release finds the slot released
/// (right after the first) or emptied (after a call about another block), and no entry
/// in the maps: unmatched, as before the slots.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_double_free_of_a_slot_held_block_is_unmatched() {
    let (stats, p) = run_slot_threads(&["double"]);
    assert_eq!((p.allocs, p.frees, p.unmatched), (3, 3, 2));
    assert_eq!(
        counters(&stats),
        (p.allocs, p.frees, p.bytes, p.bytes, 0, p.unmatched, 0),
        "{stats:#?}"
    );
}
