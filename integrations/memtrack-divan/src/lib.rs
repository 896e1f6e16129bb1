//! # memtrack-divan: divan, with exact heap allocation counts, in one line
//!
//! A drop-in for [divan](https://docs.rs/divan): depend on it under divan's name and
//! change nothing else.
//!
//! ```toml
//! [dev-dependencies]
//! # divan = "0.1.21"                                       (before)
//! divan = { package = "memtrack-divan", version = "0.1" }  # (after: the one changed line)
//! ```
//!
//! The benchmarks stay as they are: `#[divan::bench]` (every option: `args`, `types`,
//! `consts`, `threads`, `counters`, `sample_count`, ...), `#[divan::bench_group]`,
//! `divan::Bencher` (`bench`, `bench_local`, `with_inputs`, `bench_values`, `bench_refs`,
//! `counter`, `input_counter`, `count_inputs_as`), `divan::counter::*`,
//! `divan::black_box`, `divan::main()`:
//!
//! ```no_run
//! # extern crate memtrack_divan as divan;
//! use divan::{Bencher, counter::ItemsCount};
//!
//! fn main() {
//!     divan::main(); // divan's run, then memtrack's table
//! }
//!
//! /// Three blocks of 64 bytes, freed before returning.
//! #[divan::bench]
//! fn three_blocks() -> usize {
//!     let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|_| Box::new([0u8; 64]));
//!     divan::black_box(&blocks).len()
//! }
//!
//! /// A vector of 1000 bytes, returned (so still live when the iteration ends).
//! #[divan::bench]
//! fn vec_1000(bencher: Bencher) {
//!     bencher.counter(ItemsCount::new(1000usize)).bench(|| vec![0u8; 1000]);
//! }
//! ```
//!
//! `cargo bench` as root (or with CAP_BPF and CAP_PERFMON): divan's table, with its
//! timings, then:
//!
//! ```text
//! memtrack: one iteration per benchmark, after one warm-up iteration, whole process (exact)
//! benchmark            allocs  allocated  peak live  live at end
//! alloc::three_blocks       3      192 B      192 B          0 B
//! alloc::vec_1000           1    1,000 B    1,000 B      1,000 B
//! memtrack: saved in /path/to/target/memtrack/divan/alloc (read it with `memtrack report ...`)
//! ```
//!
//! ## How it counts, and why divan's timings are unaffected
//!
//! `#[divan::bench]` registers the benchmark with divan's own attribute, through a
//! wrapper that hands the function this crate's [`Bencher`] (see
//! `memtrack-divan-macros`). The first time the process runs a benchmark, before divan's
//! loop, one uncounted warm-up call and one counted call of the benchmarked function run;
//! inputs are made before the count, and the return value (and a by-reference input)
//! dropped after it, as divan does outside its timing, so "live at end" includes what
//! one iteration returns or leaks. Then divan runs and times the benchmark as usual.
//! The count depends on the [`Mode`], chosen once per process and announced in one line
//! on stderr:
//!
//! - [`Mode::InProcess`] (privileged, not under the runner): the counted call gets a
//!   tracker of its own, of the whole process (threads the benchmark starts count too),
//!   attached just before it and closed just after it (about 0.2 s per benchmark), so
//!   nothing is attached while divan times. [`main`] prints the table above, and every
//!   counted benchmark is saved (after each one) as this process's
//!   `{pid}.MemtrackResult.msgpack` in [`result_dir`] (`target/memtrack/divan/BINARY/`),
//!   readable by `memtrack report DIR` and [`memtrack::MemtrackResult::read_dir`].
//!   Earlier runs' files there are removed.
//! - [`Mode::Runner`] (`memtrack run -- cargo bench`): the counted call is a benchmark
//!   region of the runner, which counts the whole process inside it, and reports and
//!   saves it. The runner's probes stay attached to the whole process for the whole run
//!   (every allocation call costs microseconds more), so timings would be wrong: [`main`]
//!   runs divan in its test mode instead (each benchmark once, nothing timed) and the
//!   mode line says "memory only, timings skipped".
//! - [`Mode::Disabled`]: divan runs as usual; nothing is counted.
//!
//! The counts are the same in both counting modes, to the byte (the examples' tests
//! check it, a benchmark allocating on a thread it starts included).
//!
//! **Call stacks** (where the memory goes): in-process, set `MEMTRACK_STACKS` (a depth
//! from 1 to [`memtrack::stacks::MAX_DEPTH`], or `max`) and each counted iteration also
//! records the call stack of every allocation, saved as `{pid}.MemtrackStacks.msgpack`
//! beside the result in [`result_dir`], one region per benchmark (`memtrack report --stacks
//! DIR --benchmark URI`, with DHAT, pprof and flamegraph exports). Under the runner,
//! `memtrack run --stacks -- cargo bench` records them per benchmark region.
//!
//! ## Names
//!
//! A benchmark is named as divan shows it, crate name first: `alloc::three_blocks`, and
//! for `types`, `consts` and `args` the type (without its module path), the constant or
//! the argument after it: `alloc::fill::1000`. A function divan runs several times for
//! its `threads` values is counted once.
//!
//! ## Harnesses that run divan themselves
//!
//! `divan::Divan` is divan's own. A `main` that calls `Divan::from_args()...main()`
//! still gets every benchmark counted and saved, but no table unless it calls [`finish`]
//! afterwards; under `memtrack run` its benchmarks are not timed (divan then warns "No
//! benchmark function registered" for each).

#![warn(missing_docs)]

mod bencher;
mod count;

// `#[bench]` names this crate `::memtrack_divan` inside its own package (doctests).
extern crate self as memtrack_divan;

use memtrack_integration as session;

use std::path::PathBuf;

use memtrack::BenchmarkStats;

pub use bencher::{Bencher, InputCounters, Inputs, NoInputCounters, NoInputs};
pub use divan::{AllocProfiler, Divan, black_box, black_box_drop, counter};
pub use memtrack_divan_macros::{bench, bench_group};
pub use session::Mode;

/// divan itself, for the code `#[divan::bench]` generates.
#[doc(hidden)]
pub use divan as __divan;

/// divan's prelude, with this crate's `Bencher` and attributes.
pub mod prelude {
    pub use crate::{AllocProfiler, Bencher, Divan, bench, bench_group, black_box, black_box_drop};
}

/// What `#[divan::bench]` generates calls.
#[doc(hidden)]
pub mod __private {
    /// Wraps divan's bencher for benchmark `uri`.
    pub fn bencher<'a, 'b>(inner: divan::Bencher<'a, 'b>, uri: String) -> crate::Bencher<'a, 'b> {
        crate::Bencher::new(inner, uri)
    }

    /// Names a value the way divan names `args` and `consts`: with `ToString` if it has
    /// it, else with `Debug` (`ArgName(&x).to_string()`: the inherent method wins when
    /// `T: ToString`). divan's own helper needs `T: 'static`, which a borrowed argument
    /// (`&str`) is not.
    pub struct ArgName<'a, T: ?Sized>(pub &'a T);

    impl<T: std::fmt::Debug + ?Sized> std::fmt::Display for ArgNameDebug<'_, T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0)
        }
    }

    /// [`ArgName`] through `Debug`.
    pub struct ArgNameDebug<'a, T: ?Sized>(&'a T);

    /// `ArgName(&x).to_string()` for `T: Debug` without `ToString`.
    pub trait DebugName {
        /// The `Debug` form.
        fn to_string(&self) -> String;
    }

    impl<T: std::fmt::Debug + ?Sized> DebugName for ArgName<'_, T> {
        fn to_string(&self) -> String {
            ArgNameDebug(self.0).to_string()
        }
    }

    impl<T: ToString + ?Sized> ArgName<'_, T> {
        /// The `ToString` form.
        #[allow(clippy::inherent_to_string)]
        pub fn to_string(&self) -> String {
            ToString::to_string(self.0)
        }
    }

    /// `std::any::type_name::<T>()`.
    pub fn type_name<T: ?Sized>() -> &'static str {
        std::any::type_name::<T>()
    }

    /// A benchmark's name as divan shows its path: `module::name`, then each generic
    /// type (without its module path, as divan shows it), constant and argument.
    pub fn uri(
        module_path: &str,
        name: &str,
        types: &[&str],
        consts: &[String],
        arg: Option<String>,
    ) -> String {
        let mut uri = format!("{module_path}::{name}");
        for ty in types {
            uri.push_str("::");
            uri.push_str(short_type_name(ty));
        }
        for value in consts.iter().chain(arg.as_ref()) {
            uri.push_str("::");
            uri.push_str(value);
        }
        uri
    }

    /// `ty` without its leading module path (`alloc::string::String` -> `String`),
    /// stopping at the first generic argument list, as divan does.
    pub(crate) fn short_type_name(mut ty: &str) -> &str {
        while let Some((prev, next)) = ty.split_once("::") {
            if prev.contains('<') {
                break;
            }
            ty = next;
        }
        ty
    }
}

/// The integration's name, as announced to the runner.
const INTEGRATION: &str = "memtrack-divan";

/// How this process counts allocations. Decided on first use of anything in this crate
/// (or by this call), and announced then in one line on stderr.
pub fn mode() -> Mode {
    session::mode(INTEGRATION)
}

/// Runs divan like `divan::main()` (its command-line options included), then [`finish`];
/// exits with code 1 if the in-process result could not be saved (said on stderr).
/// Decides the [`Mode`] first, so its one line comes before divan's output. Under
/// `memtrack run`, runs divan's test mode instead (each benchmark once, untimed: the
/// runner's probes would inflate every timing).
pub fn main() {
    if mode() == Mode::Runner {
        count::divan_runs_tests();
        Divan::from_args().test_benches();
    } else {
        Divan::from_args().main();
    }
    finish();
    if count::not_saved() {
        // A CI job reading the results must not pass on missing or stale ones.
        std::process::exit(1);
    }
}

/// Prints, to stdout, the counts of the benchmarks counted in-process (the table of
/// [`render_table`] and where they are saved), or under the runner one line saying the
/// runner has them. Prints nothing in [`Mode::Disabled`]. For harnesses that run divan
/// themselves (`divan::Divan::from_args()...main()`), call it afterwards.
pub fn finish() {
    let session = session::session(INTEGRATION);
    match session.mode() {
        Mode::Disabled => {}
        Mode::Runner => println!(
            "memtrack: `memtrack run` counted one iteration of each benchmark: see its report"
        ),
        Mode::InProcess if session.recorded.is_empty() => {
            println!("memtrack: no benchmark ran: nothing counted");
        }
        Mode::InProcess => {
            println!();
            print!("{}", render_table(&session.recorded));
            let dir = result_dir();
            if count::not_saved() {
                println!(
                    "memtrack: NOT saved in {} (the error is above); a result file there \
                     is from an earlier run",
                    dir.display()
                );
            } else {
                println!(
                    "memtrack: saved in {} (read it with `memtrack report {}`)",
                    dir.display(),
                    dir.display()
                );
            }
        }
    }
}

/// Every benchmark counted in-process so far, in order (empty in the other modes).
pub fn results() -> Vec<BenchmarkStats> {
    session::session(INTEGRATION).recorded.clone()
}

/// The directory where this process saves its result in-process:
/// `$MEMTRACK_OUTPUT_DIR/divan/BINARY`, by default `target/memtrack/divan/BINARY` in
/// cargo's target directory, where BINARY is the executable's name without cargo's
/// `-hash` suffix.
pub fn result_dir() -> PathBuf {
    session::output_base()
        .join("divan")
        .join(session::id_path(&binary_name()))
}

/// This executable's name, without the `-0123456789abcdef` cargo adds to benchmarks.
fn binary_name() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "benchmarks".to_string());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    }
}

/// The table [`finish`] prints: a title line, then
/// [`memtrack_integration::benchmark_table`]: a header and one row per benchmark with
/// its allocation calls, bytes allocated, peak live bytes and bytes live at the end of
/// the iteration, all exact (bytes with `,` between thousands). A row whose counts are
/// not exact (lost events) says so after its last column.
pub fn render_table(benchmarks: &[BenchmarkStats]) -> String {
    let mut out = String::from(
        "memtrack: one iteration per benchmark, after one warm-up iteration, whole process \
         (exact)\n",
    );
    out.push_str(&session::benchmark_table(benchmarks));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack::Stats;

    #[test]
    fn table_has_a_title_and_the_shared_table() {
        let mut stats = Stats::default();
        stats.alloc_calls = 3;
        stats.bytes_allocated = 192;
        stats.peak_live_bytes = 192;
        let table = render_table(&[BenchmarkStats::new("a::three", stats)]);
        assert_eq!(
            table,
            "memtrack: one iteration per benchmark, after one warm-up iteration, whole process \
             (exact)\n\
             benchmark  allocs  allocated  peak live  live at end\n\
             a::three        3      192 B      192 B          0 B\n"
        );
    }

    #[test]
    fn uris_follow_divans_paths() {
        use super::__private::{short_type_name, uri};
        assert_eq!(uri("suite", "three", &[], &[], None), "suite::three");
        assert_eq!(
            uri(
                "suite::group",
                "fill",
                &["alloc::string::String"],
                &["4".into()],
                Some("10".into())
            ),
            "suite::group::fill::String::4::10"
        );
        assert_eq!(
            short_type_name("alloc::vec::Vec<alloc::string::String>"),
            "Vec<alloc::string::String>"
        );
        assert_eq!(short_type_name("u8"), "u8");
    }
}
