//! # memtrack-divan: exact heap allocation counts for divan benchmarks
//!
//! ```no_run
//! // benches/alloc.rs, with `[[bench]] name = "alloc"` and `harness = false` in Cargo.toml,
//! // divan = "0.1" and memtrack-divan in [dev-dependencies].
//! use divan::Bencher;
//! use memtrack_divan::BencherMemtrackExt;
//!
//! fn main() {
//!     // Instead of divan::main(): runs divan, then prints memtrack's table.
//!     memtrack_divan::main();
//! }
//!
//! /// Three blocks of 64 bytes, freed before returning.
//! #[divan::bench]
//! fn three_blocks(bencher: Bencher) {
//!     bencher.with_memtrack().bench(|| {
//!         let blocks: [Box<[u8; 64]>; 3] = std::array::from_fn(|_| Box::new([0u8; 64]));
//!         divan::black_box(&blocks).len()
//!     });
//! }
//!
//! /// A vector of 1000 bytes, returned (so still live when the iteration ends).
//! #[divan::bench]
//! fn vec_1000(bencher: Bencher) {
//!     bencher.with_memtrack().bench(|| vec![0u8; 1000]);
//! }
//! ```
//!
//! `cargo bench` as root (or with CAP_BPF and CAP_PERFMON): after divan's own output it
//! prints:
//!
//! ```text
//! memtrack: one iteration per benchmark, after one warm-up iteration (exact)
//! benchmark            allocs  allocated  peak live  live at end
//! alloc::three_blocks       3      192 B      192 B          0 B
//! alloc::vec_1000           1    1,000 B    1,000 B      1,000 B
//! memtrack: saved in /path/to/target/memtrack/divan/alloc (read it with `memtrack report ...`)
//! ```
//!
//! ## How it counts
//!
//! `bencher.with_memtrack()` wraps divan's [`Bencher`]: before divan's timing runs, one
//! uncounted warm-up iteration runs, then one counted iteration. Inputs from
//! [`MemtrackBencher::with_inputs`] are made before the count; the benchmark's return
//! value (and a by-reference input) is dropped after it, as divan does outside its
//! timing, so "live at end" includes what one iteration returns or leaks. The count
//! depends on the [`Mode`], chosen once per process and announced in one line on stderr:
//!
//! - [`Mode::InProcess`] (privileged, not under the runner): a tracker in this process
//!   counts the iteration's thread; [`main`] prints the table above, and every counted
//!   benchmark is saved (after each one) as this process's
//!   `{pid}.MemtrackResult.msgpack` in [`result_dir`]
//!   (`target/memtrack/divan/BINARY/`), readable by `memtrack report DIR` and
//!   [`memtrack::MemtrackResult::read_dir`]. Earlier runs' files there are removed.
//! - [`Mode::Runner`] (`memtrack run -- cargo bench`): the iteration is a benchmark
//!   region of the runner, which counts the whole process inside it, and reports and saves
//!   it; [`main`] says so instead of printing a table.
//! - [`Mode::Disabled`]: divan runs as usual; nothing is counted.
//!
//! ## Names
//!
//! A benchmark is named by the path of the closure given to `bench` (the benchmark
//! function's path, crate name first: `alloc::three_blocks`), or by
//! [`MemtrackBencher::named`]. A function divan runs several times (several `args`,
//! `consts` or `threads`) is counted each time: `name`, `name#2`, `name#3`, ... unless
//! named per run: `bencher.with_memtrack().named(format!("fill/{n}"))`.
//! Benchmarks without a `Bencher` argument are not counted: take a `Bencher` and call
//! `bench`.

#![warn(missing_docs)]

use memtrack_integration as session;

use std::path::PathBuf;

use divan::Bencher;
use memtrack::BenchmarkStats;

pub use session::Mode;

/// The integration's name, as announced to the runner.
const INTEGRATION: &str = "memtrack-divan";

/// How this process counts allocations. Decided on first use of anything in this crate
/// (or by this call), and announced then in one line on stderr.
pub fn mode() -> Mode {
    session::mode(INTEGRATION)
}

/// Runs divan like `divan::main()` (command-line options included), then [`finish`].
/// Decides the [`Mode`] first, so its one line comes before divan's output.
pub fn main() {
    mode();
    divan::main();
    finish();
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
            println!("memtrack: no benchmark used `with_memtrack()`: nothing counted");
        }
        Mode::InProcess => {
            println!();
            print!("{}", render_table(&session.recorded));
            let dir = result_dir();
            println!(
                "memtrack: saved in {} (read it with `memtrack report {}`)",
                dir.display(),
                dir.display()
            );
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
        "memtrack: one iteration per benchmark, after one warm-up iteration (exact)\n",
    );
    out.push_str(&session::benchmark_table(benchmarks));
    out
}

/// The path of closure type `F` without its `::{{closure}}` parts: the function that
/// defines it (`crate::module::function`).
fn closure_uri<F>() -> String {
    let mut name = std::any::type_name::<F>();
    while let Some(outer) = name.strip_suffix("::{{closure}}") {
        name = outer;
    }
    name.to_string()
}

/// Counts one iteration: `warm_up` uncounted, then `counted` as benchmark `uri` (made
/// unique in this process), saving the result in-process.
fn count<O>(uri: &str, warm_up: impl FnOnce(), counted: impl FnOnce() -> O) {
    warm_up();
    let mut session = session::session(INTEGRATION);
    let uri = session.unique_uri(uri);
    if session.record(&uri, counted).is_some() {
        let dir = result_dir();
        if let Err(e) = session.write_result(&dir, &session.recorded) {
            eprintln!("memtrack {uri}: result not saved: {e}");
        }
    }
}

/// Adds memtrack to divan's [`Bencher`].
pub trait BencherMemtrackExt<'a, 'b> {
    /// A [`Bencher`] that counts one iteration with memtrack before divan times the
    /// benchmark: `bencher.with_memtrack().bench(|| ...)`.
    fn with_memtrack(self) -> MemtrackBencher<'a, 'b>;
}

impl<'a, 'b> BencherMemtrackExt<'a, 'b> for Bencher<'a, 'b> {
    fn with_memtrack(self) -> MemtrackBencher<'a, 'b> {
        MemtrackBencher {
            bencher: self,
            name: None,
        }
    }
}

/// divan's [`Bencher`], counting one iteration with memtrack first (see the crate docs).
/// Made by [`BencherMemtrackExt::with_memtrack`].
#[must_use = "a benchmark function must be registered"]
pub struct MemtrackBencher<'a, 'b> {
    bencher: Bencher<'a, 'b>,
    name: Option<String>,
}

impl std::fmt::Debug for MemtrackBencher<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemtrackBencher")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<'a, 'b> MemtrackBencher<'a, 'b> {
    /// Names the benchmark in memtrack's results (default: the path of the closure given
    /// to `bench`, i.e. of the benchmark function).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Counts one iteration of `benched`, then [`Bencher::bench`]`(benched)`.
    pub fn bench<O, B>(self, benched: B)
    where
        B: Fn() -> O + Sync,
    {
        let uri = self.name.unwrap_or_else(closure_uri::<B>);
        count(&uri, || drop(benched()), &benched);
        self.bencher.bench(benched);
    }

    /// Counts one iteration of `benched`, then [`Bencher::bench_local`]`(benched)`.
    pub fn bench_local<O, B>(self, mut benched: B)
    where
        B: FnMut() -> O,
    {
        let uri = self.name.unwrap_or_else(closure_uri::<B>);
        drop(benched());
        count(&uri, || {}, &mut benched);
        self.bencher.bench_local(benched);
    }

    /// Benchmarks over inputs from `gen_input`, like [`Bencher::with_inputs`]; inputs are
    /// made outside the count.
    pub fn with_inputs<G>(self, gen_input: G) -> MemtrackInputBencher<'a, 'b, G> {
        MemtrackInputBencher {
            bencher: self.bencher,
            name: self.name,
            gen_input,
        }
    }
}

/// divan's [`Bencher`] with an input generator, counting one iteration with memtrack
/// first. Made by [`MemtrackBencher::with_inputs`].
#[must_use = "a benchmark function must be registered"]
pub struct MemtrackInputBencher<'a, 'b, G> {
    bencher: Bencher<'a, 'b>,
    name: Option<String>,
    gen_input: G,
}

impl<G> std::fmt::Debug for MemtrackInputBencher<'_, '_, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemtrackInputBencher")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<I, G> MemtrackInputBencher<'_, '_, G>
where
    G: FnMut() -> I,
{
    /// The name in memtrack's results: [`MemtrackBencher::named`]'s, or `B`'s path.
    fn uri<B>(&mut self) -> String {
        self.name.take().unwrap_or_else(closure_uri::<B>)
    }

    /// Counts one call of `benched` on a fresh input, then divan's
    /// `with_inputs(gen_input).bench_values(benched)`.
    pub fn bench_values<O, B>(mut self, benched: B)
    where
        B: Fn(I) -> O + Sync,
        G: Fn() -> I + Sync,
    {
        let uri = self.uri::<B>();
        let gen_input = &self.gen_input;
        let input = gen_input();
        count(&uri, || drop(benched(gen_input())), || benched(input));
        self.bencher
            .with_inputs(self.gen_input)
            .bench_values(benched);
    }

    /// Counts one call of `benched` on a fresh input, then divan's
    /// `with_inputs(gen_input).bench_local_values(benched)`.
    pub fn bench_local_values<O, B>(mut self, mut benched: B)
    where
        B: FnMut(I) -> O,
    {
        let uri = self.uri::<B>();
        drop(benched((self.gen_input)()));
        let input = (self.gen_input)();
        count(&uri, || {}, || benched(input));
        self.bencher
            .with_inputs(self.gen_input)
            .bench_local_values(benched);
    }

    /// Counts one call of `benched` on a fresh input (dropped after the count), then
    /// divan's `with_inputs(gen_input).bench_refs(benched)`.
    pub fn bench_refs<O, B>(mut self, benched: B)
    where
        B: Fn(&mut I) -> O + Sync,
        G: Fn() -> I + Sync,
    {
        let uri = self.uri::<B>();
        let gen_input = &self.gen_input;
        let mut input = gen_input();
        count(
            &uri,
            || drop(benched(&mut gen_input())),
            || benched(&mut input),
        );
        drop(input);
        self.bencher.with_inputs(self.gen_input).bench_refs(benched);
    }

    /// Counts one call of `benched` on a fresh input (dropped after the count), then
    /// divan's `with_inputs(gen_input).bench_local_refs(benched)`.
    pub fn bench_local_refs<O, B>(mut self, mut benched: B)
    where
        B: FnMut(&mut I) -> O,
    {
        let uri = self.uri::<B>();
        drop(benched(&mut (self.gen_input)()));
        let mut input = (self.gen_input)();
        count(&uri, || {}, || benched(&mut input));
        drop(input);
        self.bencher
            .with_inputs(self.gen_input)
            .bench_local_refs(benched);
    }
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
            "memtrack: one iteration per benchmark, after one warm-up iteration (exact)\n\
             benchmark  allocs  allocated  peak live  live at end\n\
             a::three        3      192 B      192 B          0 B\n"
        );
    }

    #[test]
    fn closures_are_named_by_their_function() {
        fn make() -> String {
            fn uri_of<F>(_: &F) -> String {
                closure_uri::<F>()
            }
            uri_of(&|| 1)
        }
        assert_eq!(
            make(),
            "memtrack_divan::tests::closures_are_named_by_their_function::make"
        );
    }
}
