//! The decoder must judge a frame's announced length before allocating for it.
//!
//! This test binary installs a global allocator that records the largest single allocation
//! and feeds the decoders frames announcing huge lengths. It holds a single test so that no
//! other test's allocations blur the measurement.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Cursor;
use std::sync::atomic::{AtomicUsize, Ordering};

use fifo_protocol::frame::{SyncSearch, find_sync, read_frame, split_frame};
use fifo_protocol::{Command, Error, Reply, decode_frame};

struct LargestAllocation;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers every operation to the system allocator; only records sizes.
unsafe impl GlobalAlloc for LargestAllocation {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: LargestAllocation = LargestAllocation;

/// Runs `f` and returns the largest single allocation it (or anything else meanwhile) made.
fn largest_allocation_during(f: impl FnOnce()) -> usize {
    LARGEST.store(0, Ordering::SeqCst);
    f();
    LARGEST.load(Ordering::SeqCst)
}

#[test]
fn huge_announced_lengths_allocate_nothing_big() {
    const SMALL: usize = 64 * 1024;

    // Sanity check of the probe itself: a 1 MiB allocation is seen.
    let seen = largest_allocation_during(|| drop(std::hint::black_box(vec![0u8; 1 << 20])));
    assert!(seen >= 1 << 20, "allocation probe does not work: {seen}");

    let four_gib = [0xff, 0xff, 0xff, 0xff];
    let just_over = (fifo_protocol::MAX_FRAME_LEN + 1).to_le_bytes();
    for header in [four_gib, just_over] {
        let largest = largest_allocation_during(|| {
            assert!(matches!(
                decode_frame::<Command>(&header),
                Err(Error::FrameTooLarge { .. })
            ));
            assert!(matches!(
                split_frame(&header),
                Err(Error::FrameTooLarge { .. })
            ));
            let mut stream = Cursor::new(header.to_vec());
            assert!(matches!(
                read_frame::<Reply, _>(&mut stream),
                Err(Error::FrameTooLarge { .. })
            ));
        });
        assert!(
            largest < SMALL,
            "header {header:?} led to a {largest}-byte allocation"
        );
    }

    // Searching a full buffer of garbage for a Sync frame (as the runner does after a bad
    // header), whether no offset has a plausible header or every one does: the candidate
    // bodies claim a 4 GiB string.
    let ones = vec![0xffu8; 1 << 20];
    let mut candidates = Vec::with_capacity(1 << 20);
    while candidates.len() < 1 << 20 {
        candidates.extend_from_slice(&[0x06, 0, 0, 0, 0x81, 0xdb, 0xff, 0xff, 0xff, 0xff]);
    }
    for buf in [&ones, &candidates] {
        let largest = largest_allocation_during(|| {
            assert!(!matches!(
                find_sync(buf, 0..buf.len()),
                SyncSearch::Found(_)
            ));
        });
        assert!(
            largest < SMALL,
            "searching led to a {largest}-byte allocation"
        );
    }

    // A small frame whose MessagePack body claims a 4 GiB string and a 4-billion-entry map.
    let mut body = vec![0x81, 0xae];
    body.extend_from_slice(b"SetIntegration");
    body.extend_from_slice(&[0x81, 0xa4]);
    body.extend_from_slice(b"name");
    body.extend_from_slice(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'x']);
    let huge_map = [0xdf, 0xff, 0xff, 0xff, 0xff, 0xa4];
    for body in [&body[..], &huge_map[..]] {
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(body);
        let largest = largest_allocation_during(|| {
            assert!(matches!(
                decode_frame::<Command>(&frame),
                Err(Error::Decode { .. })
            ));
        });
        assert!(
            largest < SMALL,
            "body {body:?} led to a {largest}-byte allocation"
        );
    }
}
