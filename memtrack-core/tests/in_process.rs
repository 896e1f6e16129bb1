//! The in-process Tracker on this test process, all threads. One test function only, so
//! no other test thread allocates while it measures.

use memtrack::Tracker;

/// One block of 1000 bytes from `malloc`. Not zeroes: an optimised build turns the
/// allocation of a zeroed array into `calloc` (`alloc_zeroed`).
#[inline(never)]
fn boxed_thousand() {
    let b = Box::new([1u8; 1000]);
    std::hint::black_box(&b);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn process_scope() {
    let mut tracker = Tracker::new().unwrap();

    // Nothing between start and stop: exactly zero, every time (syscalls counted, 0).
    let mut zero = memtrack::Stats::default();
    zero.syscalls = Some(memtrack::SyscallStats::default());
    for round in 0..100 {
        tracker.reset().unwrap();
        tracker.start().unwrap();
        tracker.stop().unwrap();
        let stats = tracker.collect().unwrap();
        assert_eq!(stats, zero, "round {round}: {stats:#?}");
    }

    // Box::new([1u8; 1000]): one block of 1000 bytes, freed.
    tracker.reset().unwrap();
    tracker.start().unwrap();
    boxed_thousand();
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    assert_eq!(stats.alloc_calls, 1, "{stats:#?}");
    assert_eq!(stats.bytes_allocated, 1000);
    assert_eq!(stats.free_calls, 1);
    assert_eq!(stats.bytes_freed, 1000);
    assert_eq!((stats.live_blocks, stats.live_bytes), (0, 0));
    assert_eq!(stats.peak_live_bytes, 1000);
    assert_eq!(stats.function("malloc").unwrap().calls, 1);
    assert_eq!(stats.function("free").unwrap().calls, 1);
    assert!(stats.peak_time_ns > 0);
    assert_eq!(tracker.unattributed_lost_events(), 0);

    // What was probed: this process's libc, malloc with a return probe, free without.
    let probes = tracker.probes().unwrap();
    let probe = |function: &str| {
        probes
            .iter()
            .find(|p| p.function == function)
            .unwrap_or_else(|| panic!("no probe on {function}: {probes:#?}"))
    };
    for (function, return_probe) in [("malloc", true), ("free", false)] {
        let p = probe(function);
        assert_eq!(p.return_probe, return_probe, "{p:#?}");
        assert!(
            p.object.to_string_lossy().contains("libc.so"),
            "{function} probed in {}",
            p.object.display()
        );
    }

    // A Vec<u64> grown by pushes: 8 pushes reallocate at capacities 4 -> 8 (the first
    // push allocates 4 elements = 32 bytes with malloc, the fifth grows to 64 bytes
    // with realloc), then dropping it frees the last block.
    tracker.reset().unwrap();
    tracker.start().unwrap();
    let mut v: Vec<u64> = Vec::new();
    for i in 0..8 {
        v.push(i);
    }
    std::hint::black_box(&v);
    drop(v);
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    let malloc = stats.function("malloc").unwrap();
    let realloc = stats.function("realloc").unwrap();
    assert_eq!((malloc.calls, malloc.bytes), (1, 32), "{stats:#?}");
    assert_eq!(
        (realloc.calls, realloc.bytes, realloc.grows),
        (1, 64, 1),
        "{stats:#?}"
    );
    assert_eq!(stats.alloc_calls, 2);
    assert_eq!(stats.bytes_allocated, 96);
    assert_eq!(stats.free_calls, 2, "realloc's release and the final free");
    assert_eq!(stats.bytes_freed, 96);
    assert_eq!(stats.peak_live_bytes, 64);
    assert_eq!(stats.lost_events, 0);

    // start/stop repeat; collect accumulates until reset.
    tracker.reset().unwrap();
    for _ in 0..3 {
        tracker.start().unwrap();
        boxed_thousand();
        tracker.stop().unwrap();
        boxed_thousand(); // not counted
    }
    let stats = tracker.collect().unwrap();
    assert_eq!((stats.alloc_calls, stats.bytes_allocated), (3, 3000));
    assert_eq!((stats.free_calls, stats.bytes_freed), (3, 3000));

    // The tracker's own work while counting is not counted: probes, process and
    // stacks allocate, and reset does too (its frees after the zeroing would be
    // unmatched). Before 2026-12-04: 39 blocks for probes(), 1 unmatched free for reset.
    // What they return is the caller's: dropped while counting, its frees would count
    // (as unmatched), so it is kept until after stop.
    tracker.reset().unwrap();
    tracker.start().unwrap();
    let probes = tracker.probes().unwrap();
    let process = tracker.process().unwrap();
    let stacks = tracker.stacks().unwrap();
    tracker.reset().unwrap();
    let probes_again = tracker.probes().unwrap();
    tracker.stop().unwrap();
    assert_eq!(tracker.collect().unwrap(), zero);
    assert!(!probes.is_empty() && stacks.is_none());
    assert_eq!(
        (process.pid, probes_again.len()),
        (std::process::id(), probes.len())
    );

    // A block allocated before a reset made while counting: its free is the one
    // unmatched free, as reset's docs say, and nothing else counts.
    tracker.reset().unwrap();
    tracker.start().unwrap();
    let kept = std::hint::black_box(Box::new([1u8; 1000]));
    tracker.reset().unwrap();
    drop(kept);
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    assert_eq!(
        (stats.alloc_calls, stats.free_calls, stats.unmatched_frees),
        (0, 0, 1),
        "{stats:#?}"
    );

    // Two threads using the tracker at once while counting: neither one's tracker work
    // is counted. (Before 2026-12-05 the second thread's pause replaced the first's,
    // and the first restore turned counting back on while the other still worked.)
    // The threads exist before counting starts; the lock is a futex, and what they get
    // is kept until counting stops: nothing of theirs allocates while counting.
    const CALLS: usize = 200;
    let shared = std::sync::RwLock::new(tracker);
    let ready = std::sync::Barrier::new(3);
    let go = std::sync::Barrier::new(3);
    let done = std::sync::Barrier::new(3);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut kept = Vec::with_capacity(CALLS);
                    ready.wait();
                    go.wait();
                    for _ in 0..CALLS {
                        kept.push(shared.read().unwrap().probes().unwrap());
                    }
                    done.wait();
                    done.wait();
                    kept
                })
            })
            .collect();
        ready.wait();
        {
            let mut tracker = shared.write().unwrap();
            tracker.reset().unwrap();
            tracker.start().unwrap();
        }
        go.wait();
        done.wait();
        shared.write().unwrap().stop().unwrap();
        done.wait();
        for worker in workers {
            let kept = worker.join().unwrap();
            assert!(kept.iter().all(|probes| probes.len() == kept[0].len()));
        }
    });
    let stats = shared.read().unwrap().collect().unwrap();
    assert_eq!(stats, zero, "{stats:#?}");
}
