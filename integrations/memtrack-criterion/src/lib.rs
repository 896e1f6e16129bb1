//! # memtrack-criterion: criterion, with exact heap allocation counts, in one line
//!
//! A drop-in for [criterion](https://docs.rs/criterion) 0.8: depend on it under
//! criterion's name and change nothing else.
//!
//! ```toml
//! [dev-dependencies]
//! # criterion = "0.8.2"                                           (before)
//! criterion = { package = "memtrack-criterion", version = "0.1" }  # (after: the one changed line)
//! ```
//!
//! The benchmarks stay as they are: `criterion_group!`, `criterion_main!`,
//! `Criterion` (its builder methods, `bench_function`, `bench_with_input`,
//! `benchmark_group`), `BenchmarkGroup`, `BenchmarkId`, `Bencher` (`iter`,
//! `iter_batched`, `iter_batched_ref`, `iter_custom`, `iter_with_large_drop`),
//! `Throughput`, `BatchSize`, `SamplingMode`, `black_box`, `measurement`, `profiler`:
//!
//! ```no_run
//! # extern crate memtrack_criterion as criterion;
//! // benches/alloc.rs, with `[[bench]] name = "alloc"` and `harness = false`.
//! use criterion::{Criterion, criterion_group, criterion_main};
//!
//! /// Three blocks of 64 bytes, freed before returning.
//! fn three_blocks() -> usize {
//!     let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|_| Box::new([0u8; 64]));
//!     std::hint::black_box(&blocks).len()
//! }
//!
//! fn benches(c: &mut Criterion) {
//!     c.bench_function("three_blocks", |b| b.iter(three_blocks));
//! }
//!
//! criterion_group!(alloc, benches);
//! criterion_main!(alloc);
//! ```
//!
//! `sudo cargo bench` (or with CAP_BPF and CAP_PERFMON): criterion's report, its timings
//! unchanged, and before each benchmark's, a line with memtrack's exact counts of one
//! iteration:
//!
//! ```text
//! memtrack three_blocks: 3 allocs, 192 B allocated, peak 192 B live, 0 B live at end (one iteration)
//! three_blocks            time:   [41.712 ns 41.925 ns 42.172 ns]
//! ```
//!
//! The full counts are saved as `{pid}.MemtrackResult.msgpack` in [`result_dir`]`(ID)`
//! (`target/memtrack/criterion/ID/`; `memtrack report DIR` reads them).
//!
//! **Call stacks** (where the memory goes): in-process, set `MEMTRACK_STACKS` (a depth
//! from 1 to [`memtrack::stacks::MAX_DEPTH`], or `max`) and each counted iteration also
//! records the call stack of every allocation, saved as `{pid}.MemtrackStacks.msgpack`
//! beside the result in [`result_dir`]`(ID)`, one region per benchmark (`memtrack report --stacks
//! DIR --benchmark URI`, with DHAT, pprof and flamegraph exports). Under the runner,
//! `memtrack run --stacks -- cargo bench` records them per benchmark region.
//!
//! ## How it counts, and why criterion's timings are unaffected
//!
//! The first time the process runs a benchmark, the `Bencher` runs the routine twice
//! outside criterion's timing: an uncounted warm-up, then one iteration counted with
//! memtrack (setup outside the count, the output dropped after it, so "live at end"
//! includes what one iteration returns or leaks). The [`Mode`], chosen once per process
//! and announced in one line on stderr, decides how:
//!
//! - [`Mode::InProcess`] (privileged, not under the runner): the iteration gets a
//!   tracker of the whole process (threads the routine starts count too), attached just
//!   before it and closed just after it (about 0.2 s per benchmark), so nothing is
//!   attached while criterion times.
//! - [`Mode::Runner`] (`sudo memtrack run -- cargo bench`): the iteration is a benchmark
//!   region of the runner, which counts the whole process inside it and reports and
//!   saves it. The runner's probes stay on the whole process for the whole run (every
//!   allocation call costs microseconds more), so a benchmarking run is memory only:
//!   criterion itself does not run, times nothing, and neither compares with nor writes
//!   its saved baselines (`target/criterion/` is untouched). criterion's filter still
//!   selects the benchmarks; `--test`, `--list` and `--profile-time` runs (which time
//!   nothing) go to criterion as usual.
//! - [`Mode::Disabled`]: criterion runs as usual; nothing is counted.
//!
//! The counts are the same in both counting modes, to the byte (the examples' tests
//! check it, a routine allocating on a thread it starts included). `to_async` (criterion's
//! async features) is not offered.
//!
//! ## Measuring bytes instead of time
//!
//! [`AllocatedBytes`] and [`AllocationCalls`] are criterion measurements: criterion then
//! reports bytes (or allocation calls) per iteration, with its statistics and baselines.
//! `config = AllocatedBytes::criterion()` in `criterion_group!`. Exact counts have zero
//! variance, which criterion's comparison plot cannot draw, so that configuration turns
//! plots off. They count in [`Mode::InProcess`] only and measure 0 otherwise (criterion
//! then refuses to analyse them and saves no baseline), never nanoseconds.

#![warn(missing_docs)]

mod cli;
mod compat;
mod count;
mod heap;

use memtrack_integration as session;

use memtrack::BenchmarkStats;

// `black_box` is criterion's, deprecated there as here.
#[allow(deprecated)]
pub use ::criterion::{
    AxisScale, Baseline, BatchSize, BenchmarkFilter, PlotConfiguration, PlottingBackend,
    SamplingMode, Throughput, async_executor, black_box, measurement, profiler,
};
pub use compat::{Bencher, BenchmarkGroup, BenchmarkId, Criterion, IntoBenchmarkId};
pub use count::{exit_if_not_saved, keep_apart_stale_results, measure_once, result_dir};
pub use heap::{AllocatedBytes, AllocationCalls, Started};
pub use session::Mode;

/// The integration's name, as announced to the runner.
const INTEGRATION: &str = "memtrack-criterion";

/// How this process counts allocations. Decided on first use of anything in this crate
/// (or by this call), and announced then in one line on stderr.
pub fn mode() -> Mode {
    session::mode(INTEGRATION)
}

/// Every benchmark counted in-process so far in this process, in order (empty in the
/// other modes).
pub fn results() -> Vec<BenchmarkStats> {
    session::session(INTEGRATION).recorded.clone()
}

/// Defines a function running a group of benchmarks (criterion's `criterion_group!`):
/// `criterion_group!(name, target, ...)` with `Criterion::default()`, or
/// `criterion_group! { name = NAME; config = EXPR; targets = target, ... }`.
#[macro_export]
macro_rules! criterion_group {
    (name = $name:ident; config = $config:expr; targets = $( $target:path ),+ $(,)*) => {
        #[doc = "The function which runs the benchmarks."]
        pub fn $name() {
            let mut criterion: $crate::Criterion<_> = $config.configure_from_args();
            $(
                $target(&mut criterion);
            )+
        }
    };
    ($name:ident, $( $target:path ),+ $(,)*) => {
        $crate::criterion_group! {
            name = $name;
            config = $crate::Criterion::default();
            targets = $( $target ),+
        }
    };
}

/// Defines `main`, running the groups (criterion's `criterion_main!`), then
/// [`keep_apart_stale_results`] (earlier results of benchmarks this run did not measure
/// renamed `*.stale`) and [`exit_if_not_saved`]: exit code 1 if a benchmark's
/// in-process result could not be saved.
#[macro_export]
macro_rules! criterion_main {
    ( $( $group:path ),+ $(,)* ) => {
        fn main() {
            $(
                $group();
            )+
            $crate::Criterion::default()
                .configure_from_args()
                .final_summary();
            $crate::keep_apart_stale_results();
            $crate::exit_if_not_saved();
        }
    };
}
