//! The experiment behind BENCHMARKS.md's note on divan's `vec_grow` (issue 13): does
//! what a tracker allocates on a thread change how fast that thread's heap serves a
//! `Vec` grown by pushes afterwards? Times the one-line suites' `vec_grow_100` in
//! samples as divan does (each sample's vectors kept until the sample ends) after one of:
//!
//! - `none`: nothing;
//! - `same`: a tracker of the whole process made, started, stopped, read and closed on
//!   this thread (what the integrations did before each benchmark);
//! - `other`: the same on another thread, joined before timing;
//! - `thread`: a thread started and joined that does nothing (the process is then
//!   multi-threaded, which glibc's malloc notices, as in `other`).
//!
//! Needs root (or CAP_BPF and CAP_PERFMON) for `same` and `other`; as root:
//!
//! ```sh
//! cargo run --release -p memtrack-examples --bin heap_after_tracker -- same
//! ```
//!
//! Prints the median time per iteration over the samples (ns), then glibc's `mallinfo2`
//! of the process before timing: free chunks (`ordblks`), free bytes in them
//! (`fordblks`), and the main arena's top chunk (`keepcost`).

use std::{hint::black_box, process::ExitCode, time::Instant};

use memtrack::Tracker;
use memtrack_one_line_example::vec_grow_100;

/// Samples timed, and iterations per sample (about divan's for this routine here).
const SAMPLES: usize = 200;
const ITERS: usize = 256;

/// A tracker's whole life, around one counted call of the routine.
fn count_once() -> Result<(), memtrack::Error> {
    let mut tracker = Tracker::new()?;
    tracker.start()?;
    let v = black_box(vec_grow_100());
    tracker.stop()?;
    let stats = tracker.collect()?;
    tracker.close();
    drop(v);
    assert_eq!(stats.alloc_calls, 6, "the counted call allocates 6 times");
    Ok(())
}

/// The median nanoseconds per call of `vec_grow_100` over [`SAMPLES`] samples.
fn time_vec_grow() -> f64 {
    let mut kept: Vec<Vec<u64>> = Vec::with_capacity(ITERS);
    let mut per_iter: Vec<f64> = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        for _ in 0..ITERS {
            kept.push(black_box(vec_grow_100()));
        }
        per_iter.push(start.elapsed().as_nanos() as f64 / ITERS as f64);
        // Dropped outside the timing, as divan drops a sample's outputs.
        kept.clear();
    }
    per_iter.sort_by(f64::total_cmp);
    per_iter[SAMPLES / 2]
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let prepared = match mode.as_str() {
        "none" => Ok(()),
        "same" => count_once(),
        "other" => std::thread::spawn(count_once)
            .join()
            .expect("the counting thread does not panic"),
        "thread" => {
            std::thread::spawn(|| {}).join().expect("an empty thread");
            Ok(())
        }
        _ => {
            eprintln!("usage: heap_after_tracker none|same|other|thread");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = prepared {
        eprintln!("heap_after_tracker: {e}");
        return ExitCode::FAILURE;
    }
    // SAFETY: mallinfo2 only reads the allocator's bookkeeping.
    let info = unsafe { libc::mallinfo2() };
    let ns = time_vec_grow();
    println!(
        "{mode}: {ns:.1} ns per vec_grow_100; before timing: ordblks {} fordblks {} keepcost {} arena {}",
        info.ordblks, info.fordblks, info.keepcost, info.arena
    );
    ExitCode::SUCCESS
}
