//! A thread-scoped tracker counts only the thread that started it, while other threads
//! of the same process allocate as fast as they can.

mod support;

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use memtrack::{Scope, Tracker};
use support::require_privileges;

#[test]
fn counts_only_the_calling_thread() {
    if !require_privileges("thread_scope") {
        return;
    }
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

    let mut tracker = Tracker::builder().scope(Scope::Thread).build().unwrap();
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
