//! A thread-scoped tracker counts only the thread that started it, while other threads
//! of the same process allocate as fast as they can.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use memtrack::{Scope, Tracker};

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn counts_only_the_calling_thread() {
    let stop = Arc::new(AtomicBool::new(false));
    let noise: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let v = vec![1u8; 100 + (n % 50) as usize];
                    std::hint::black_box(&v);
                    n += 1;
                }
                n
            })
        })
        .collect();

    let mut tracker = Tracker::builder().build(Scope::Thread).unwrap();
    for _ in 0..20 {
        tracker.reset().unwrap();
        tracker.start().unwrap();
        let b = Box::new([0u8; 1000]);
        std::hint::black_box(&b);
        drop(b);
        tracker.stop().unwrap();
        let stats = tracker.collect().unwrap();
        assert_eq!(
            (
                stats.alloc_calls,
                stats.bytes_allocated,
                stats.free_calls,
                stats.bytes_freed
            ),
            (1, 1000, 1, 1000),
            "{stats:#?}"
        );
        assert_eq!(stats.lost_events, 0);
    }
    stop.store(true, Ordering::Relaxed);
    let allocated_elsewhere: u64 = noise.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(allocated_elsewhere > 0, "the noise threads did allocate");
}

const BIG: usize = 1 << 20;
const SMALL: usize = 3 * 4096;

/// Maps BIG and SMALL bytes, fails a zero-length mmap and an unaligned munmap, and
/// unmaps both mappings, with `tracker` counting this thread only.
fn map_and_unmap(tracker: &mut Tracker) -> memtrack::Stats {
    tracker.start().unwrap();
    let map = |len: usize| {
        // SAFETY: an anonymous private mapping; no memory is touched.
        unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        }
    };
    let big = map(BIG);
    let small = map(SMALL);
    assert_ne!(big, libc::MAP_FAILED);
    assert_ne!(small, libc::MAP_FAILED);
    // A zero length fails with EINVAL.
    assert_eq!(map(0), libc::MAP_FAILED);
    // SAFETY: unmapping exactly what was mapped above; the unaligned address fails with
    // EINVAL and unmaps nothing.
    unsafe {
        assert_eq!(libc::munmap(small.cast::<u8>().add(1).cast(), 4096), -1);
        assert_eq!(libc::munmap(big, BIG), 0);
        assert_eq!(libc::munmap(small, SMALL), 0);
    }
    tracker.stop().unwrap();
    tracker.collect().unwrap()
}

/// mmap and munmap of this thread, counted exactly (their own counters, not heap
/// numbers); failed calls are not counted.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn mmap_and_munmap_are_counted_exactly() {
    let mut tracker = Tracker::builder().build(Scope::Thread).unwrap();
    let stats = map_and_unmap(&mut tracker);
    let s = stats.syscalls.as_ref().expect("counted by default");
    assert_eq!(s.mmap_calls, 2, "{s:?}");
    assert_eq!(s.mmap_bytes, (BIG + SMALL) as u64, "{s:?}");
    assert_eq!(s.munmap_calls, 2, "{s:?}");
    assert_eq!(s.munmap_bytes, (BIG + SMALL) as u64, "{s:?}");
    assert_eq!(s.brk_calls, 0, "{s:?}");
    assert_eq!(stats.alloc_calls, 0, "{stats:?}");
}

/// With `count_syscalls(false)` the syscall counters say "not counted" (None), not 0.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn syscalls_not_counted_are_none() {
    let mut tracker = Tracker::builder()
        .count_syscalls(false)
        .build(Scope::Thread)
        .unwrap();
    let stats = map_and_unmap(&mut tracker);
    assert_eq!(stats.syscalls, None, "{stats:?}");
    assert_eq!(stats.alloc_calls, 0, "{stats:?}");
}
