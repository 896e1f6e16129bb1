//! # memtrack-criterion: exact heap allocation counts for criterion benchmarks
//!
//! ```no_run
//! // benches/alloc.rs, with `[[bench]] name = "alloc"` and `harness = false` in Cargo.toml,
//! // criterion = "0.8" and memtrack-criterion in [dev-dependencies].
//! use criterion::{Criterion, criterion_group, criterion_main};
//! use memtrack_criterion::{AllocatedBytes, CriterionMemtrackExt};
//!
//! /// Three blocks of 64 bytes, freed before returning.
//! fn three_blocks() -> usize {
//!     let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|_| Box::new([0u8; 64]));
//!     std::hint::black_box(&blocks).len()
//! }
//!
//! fn benches(c: &mut Criterion<AllocatedBytes>) {
//!     // criterion reports "192.00 B" per iteration, and memtrack prints and saves the
//!     // full counts of one iteration: 3 allocs, 192 B, peak 192 B, 0 B live at end.
//!     c.bench_memtrack("three_blocks", three_blocks);
//!     // A plain criterion benchmark still works, measured in bytes allocated.
//!     c.bench_function("vec_1000", |b| b.iter(|| vec![0u8; 1000]));
//! }
//!
//! criterion_group! {
//!     name = alloc;
//!     config = AllocatedBytes::criterion(); // Criterion::default() + this measurement, no plots
//!     targets = benches
//! }
//! criterion_main!(alloc);
//! ```
//!
//! `sudo cargo bench` (or with CAP_BPF and CAP_PERFMON) counts in-process;
//! `sudo memtrack run -- cargo bench` lets the runner count; anything else runs the
//! benchmarks for timing only. The choice is made once per process and announced in one
//! line on stderr (see [`Mode`]).
//!
//! ## Two things to use, separately or together
//!
//! - **Measurements** [`AllocatedBytes`] and [`AllocationCalls`]: criterion measures
//!   bytes (or allocation calls) per iteration instead of time, with its usual
//!   statistics, reports and comparisons with the previous run. They count in
//!   [`Mode::InProcess`] only, and measure wall-clock time otherwise.
//! - **One counted iteration per benchmark**, with every number memtrack has
//!   ([`memtrack::Stats`]: calls, bytes, peak live bytes, live at end, per function, ...):
//!   [`CriterionMemtrackExt::bench_memtrack`] (one line instead of `bench_function`)
//!   or [`BencherMemtrackExt::iter_memtrack`] (inside any benchmark closure, groups
//!   included): the first time criterion runs the benchmark, one warm-up iteration runs
//!   uncounted, then one iteration is counted ([`measure_once`] counts one call, without
//!   warm-up, wherever you call it):
//!   - in-process, a line `memtrack ID: 3 allocs, 192 B allocated, peak 192 B live, 0 B
//!     live at end (one iteration)` goes to stdout and the result is saved as
//!     `{pid}.MemtrackResult.msgpack` in [`result_dir`]`(ID)`
//!     (`target/memtrack/criterion/ID/`, read it with `memtrack report DIR`);
//!   - under `memtrack run`, the iteration is a benchmark region named ID, and the
//!     runner reports and saves it (one region per benchmark).
//!
//!   The routine's return value is dropped after the count, so "live at end" includes
//!   what one iteration returns or leaks.
//!
//! ## Exact numbers and criterion's statistics
//!
//! Counts are deterministic: every sample of a benchmark gives the same bytes per
//! iteration, so the spread is zero. criterion 0.8.2 analyses such samples correctly
//! (its estimates are the exact value), but on a repeated run, its plot of the
//! "new against base" t-test has nothing to draw and panics; so plots must be off:
//! [`AllocatedBytes::criterion`] disables them, or add `.without_plots()` (`--noplot`).
//! A benchmark that allocates nothing measures exactly 0, which criterion refuses to
//! analyse ("took zero time per iteration"; it prints that and goes on): no stand-in value
//! is invented, and `bench_memtrack`'s line shows the exact 0.
//!
//! In-process, only the thread running the iterations is counted (criterion's own
//! threads are not); under the runner, the whole process is counted inside each region.
//! A benchmark baseline saved in one mode is compared with the next run's numbers even if
//! that run is in another mode (bytes against nanoseconds): keep one mode per output
//! directory.

#![warn(missing_docs)]

mod measurement;
use memtrack_integration as session;

use std::path::PathBuf;

use criterion::{Bencher, Criterion, measurement::Measurement};
use memtrack::{BenchmarkStats, Stats};

pub use measurement::{AllocatedBytes, AllocationCalls, Started};
pub use session::Mode;

/// The integration's name, as announced to the runner.
const INTEGRATION: &str = "memtrack-criterion";

/// How this process counts allocations. Decided on first use of anything in this crate
/// (or by this call), and announced then in one line on stderr.
pub fn mode() -> Mode {
    session::mode(INTEGRATION)
}

/// The directory where the result of benchmark `id` is saved in-process:
/// `$MEMTRACK_OUTPUT_DIR/criterion/ID`, by default `target/memtrack/criterion/ID` in
/// cargo's target directory. `/` in `id` makes subdirectories (like criterion's
/// `group/function`); characters other than letters, digits, `-`, `_` and `.` become `_`.
pub fn result_dir(id: &str) -> PathBuf {
    session::output_base()
        .join("criterion")
        .join(session::id_path(id))
}

/// Every benchmark counted in-process so far in this process, in order (empty in the
/// other modes).
pub fn results() -> Vec<BenchmarkStats> {
    session::session(INTEGRATION).recorded.clone()
}

/// Counts one call of `routine` as benchmark `id`, and returns its counts in-process.
///
/// - [`Mode::InProcess`]: prints one line with the exact counts to stdout, saves the
///   result as `{pid}.MemtrackResult.msgpack` in [`result_dir`]`(id)` (replacing
///   earlier runs' files there) and returns the [`Stats`].
/// - [`Mode::Runner`]: the call is a benchmark region named `id`, counted and reported
///   by the runner; returns `None`.
/// - [`Mode::Disabled`]: just calls `routine`; returns `None`.
///
/// No warm-up: lazily initialised state shows in the counts. The output is dropped after
/// the count. Do not call it from inside a routine that memtrack is counting.
pub fn measure_once<O>(id: &str, routine: impl FnOnce() -> O) -> Option<Stats> {
    let mut session = session::session(INTEGRATION);
    session.note(id);
    let stats = session.record(id, routine)?;
    println!("{}", session::summary_line(id, &stats));
    let bench = BenchmarkStats::new(id, stats.clone());
    let dir = result_dir(id);
    if let Err(e) = session.write_result(&dir, &[bench]) {
        eprintln!("memtrack {id}: result not saved: {e}");
    }
    Some(stats)
}

/// Counts one iteration of benchmark `id`, once per process: an uncounted warm-up call,
/// then [`measure_once`].
fn count_first_time<O>(id: &str, routine: &mut impl FnMut() -> O) {
    if session::session(INTEGRATION).was_measured(id) {
        return;
    }
    drop(routine());
    measure_once(id, routine);
}

/// Counts one iteration of a benchmark with memtrack, from inside a criterion
/// benchmark closure.
pub trait BencherMemtrackExt {
    /// [`Bencher::iter`]`(routine)`, and the first time this process runs benchmark `id`,
    /// one uncounted warm-up call and one counted call of `routine` first (see
    /// [`measure_once`]). `id` names the result: use criterion's id (`group/function`
    /// in a group).
    ///
    /// ```no_run
    /// use criterion::Criterion;
    /// use memtrack_criterion::BencherMemtrackExt;
    ///
    /// let mut c = Criterion::default();
    /// let mut group = c.benchmark_group("vec");
    /// for n in [10usize, 1000] {
    ///     let id = format!("vec/{n}");
    ///     group.bench_function(n.to_string(), |b| b.iter_memtrack(&id, || vec![0u8; n]));
    /// }
    /// group.finish();
    /// ```
    fn iter_memtrack<O, R>(&mut self, id: &str, routine: R)
    where
        R: FnMut() -> O;
}

impl<M: Measurement> BencherMemtrackExt for Bencher<'_, M> {
    fn iter_memtrack<O, R>(&mut self, id: &str, mut routine: R)
    where
        R: FnMut() -> O,
    {
        count_first_time(id, &mut routine);
        self.iter(routine);
    }
}

/// Benchmarks a routine with criterion and counts one iteration of it with memtrack.
pub trait CriterionMemtrackExt {
    /// Same as `bench_function(id, |b| b.iter(routine))`, plus the full counts of one
    /// iteration (see [`BencherMemtrackExt::iter_memtrack`]).
    fn bench_memtrack<O, R>(&mut self, id: &str, routine: R) -> &mut Self
    where
        R: FnMut() -> O;
}

impl<M: Measurement + 'static> CriterionMemtrackExt for Criterion<M> {
    fn bench_memtrack<O, R>(&mut self, id: &str, mut routine: R) -> &mut Self
    where
        R: FnMut() -> O,
    {
        let uri = id.to_string();
        self.bench_function(id, move |b| b.iter_memtrack(&uri, &mut routine))
    }
}
