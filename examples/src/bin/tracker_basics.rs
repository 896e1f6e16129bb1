//! In-process `memtrack::Tracker` basics: count a `Box` of 1000 bytes, then a `Vec` that
//! grows by 100 pushes, and print what was counted (blocks, their bytes in brackets).
//! Needs root (or CAP_BPF and CAP_PERFMON); as root:
//!
//! ```sh
//! cargo run -p memtrack-examples --bin tracker_basics
//! ```
//!
//! Expected:
//!
//! ```text
//! a Box<[u8; 1000]>, dropped:
//!   allocated: 1 (1000 B), freed: 1 (1000 B), peak: 1000 B live, live at end: 0 (0 B)
//!   calls: free 1, malloc 1
//! a Vec<u64> grown by 100 pushes, kept:
//!   allocated: 6 (2016 B), freed: 5 (992 B), peak: 1024 B live, live at end: 1 (1024 B)
//!   calls: malloc 1, realloc 5
//! ```
//!
//! The Vec's capacity goes 4, 8, 16, 32, 64, 128 (32 to 1024 bytes): one `malloc`, then
//! five `realloc`s, each of which counts as a new block and the release of the old one.

use std::{hint::black_box, process::ExitCode};

use memtrack::{Stats, Tracker};

fn print(title: &str, s: &Stats) {
    println!("{title}:");
    println!(
        "  allocated: {} ({} B), freed: {} ({} B), peak: {} B live, live at end: {} ({} B)",
        s.alloc_calls,
        s.bytes_allocated,
        s.free_calls,
        s.bytes_freed,
        s.peak_live_bytes,
        s.live_blocks,
        s.live_bytes
    );
    let calls: Vec<String> = s
        .functions
        .iter()
        .map(|(name, f)| format!("{name} {}", f.calls))
        .collect();
    println!("  calls: {}", calls.join(", "));
    if s.lost_events != 0 {
        println!("  {} LOST EVENTS: not exact", s.lost_events);
    }
}

fn run() -> memtrack::Result<()> {
    // This process, every thread; counting is off until start().
    let mut tracker = Tracker::new()?;

    tracker.start()?;
    let boxed = Box::new([7u8; 1000]);
    black_box(&boxed);
    drop(boxed);
    tracker.stop()?;
    print("a Box<[u8; 1000]>, dropped", &tracker.collect()?);

    // Start again from zero.
    tracker.reset()?;
    tracker.start()?;
    let mut v: Vec<u64> = Vec::new();
    for i in 0..100 {
        v.push(black_box(i));
    }
    tracker.stop()?;
    print("a Vec<u64> grown by 100 pushes, kept", &tracker.collect()?);
    drop(v);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tracker_basics: {e}");
            ExitCode::FAILURE
        }
    }
}
