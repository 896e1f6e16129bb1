//! Counting one iteration per benchmark, the first time the process runs it.

use std::{
    path::PathBuf,
    sync::atomic::{AtomicUsize, Ordering},
};

use memtrack::Stats;

use crate::{INTEGRATION, Mode, session};

/// The directory where the result of benchmark `id` is saved in-process:
/// `$MEMTRACK_OUTPUT_DIR/criterion/ID`, by default `target/memtrack/criterion/ID` in
/// cargo's target directory. `/` in `id` makes subdirectories (like criterion's
/// `group/function`); characters other than letters, digits, `-`, `_` and `.` become `_`.
pub fn result_dir(id: &str) -> PathBuf {
    session::output_base()
        .join("criterion")
        .join(session::id_path(id))
}

/// Whether benchmark `uri` is to be counted now: counting is possible here and this
/// process has not counted it yet (criterion calls a benchmark's closure once per sample).
pub(crate) fn wanted(uri: &str) -> bool {
    session::mode(INTEGRATION) != Mode::Disabled && !session::session(INTEGRATION).was_measured(uri)
}

/// Counts one call of `counted` as benchmark `uri` (see [`measure_once`]), keeping
/// nothing: criterion times this thread next.
pub(crate) fn once<O>(uri: &str, counted: impl FnOnce() -> O) {
    count_and_save(uri, counted);
}

/// Counts one call of `routine` as benchmark `id`, and returns its counts in-process.
///
/// - [`Mode::InProcess`]: the call is counted by a tracker of the whole process, made
///   for it and closed before this returns; prints one line with the exact counts to
///   stdout, saves the result as `{pid}.MemtrackResult.msgpack` in [`result_dir`]`(id)`
///   (replacing earlier runs' files there) and returns the [`Stats`].
/// - [`Mode::Runner`]: the call is a benchmark region named `id`, counted and reported
///   by the runner; returns `None`.
/// - [`Mode::Disabled`]: just calls `routine`; returns `None`.
///
/// No warm-up: lazily initialised state shows in the counts. The output is dropped after
/// the count. Do not call it from inside a routine that memtrack is counting.
pub fn measure_once<O>(id: &str, routine: impl FnOnce() -> O) -> Option<Stats> {
    count_and_save(id, routine)?;
    let session = session::session(INTEGRATION);
    session.recorded.last().map(|bench| bench.stats.clone())
}

/// How many benchmarks' results could not be saved in-process (each said on stderr).
static NOT_SAVED: AtomicUsize = AtomicUsize::new(0);

/// Ends the process with exit code 1 if any benchmark's result could not be saved, or a
/// benchmark measured in heap allocations could not be measured (no privileges), so
/// that a CI job reading the results never passes on missing or stale ones (a file
/// left by an earlier run). [`criterion_main!`](crate::criterion_main) calls it last.
pub fn exit_if_not_saved() {
    let not_measured = crate::heap::not_measured_count();
    if not_measured != 0 {
        let benchmarks = if not_measured == 1 {
            "benchmark"
        } else {
            "benchmarks"
        };
        eprintln!(
            "memtrack: {not_measured} {benchmarks} not measured (they count heap allocations, \
             and this process cannot; above): exit code 1"
        );
        std::process::exit(1);
    }
    let n = NOT_SAVED.load(Ordering::SeqCst);
    if n != 0 {
        let results = if n == 1 { "result" } else { "results" };
        eprintln!(
            "memtrack: {n} benchmark {results} not saved (the errors are above): exit code 1"
        );
        std::process::exit(1);
    }
}

/// Keeps apart the in-process results below `target/memtrack/criterion` that an
/// earlier run of this benchmark binary saved for benchmarks this run did not measure
/// (a removed or renamed benchmark, or one a filter left out): renamed
/// `*.MemtrackResult.msgpack.stale`, so `memtrack report` neither reports them as
/// current nor checks them against limits; each named on stderr.
/// [`criterion_main!`](crate::criterion_main) calls it at the end of the run.
pub fn keep_apart_stale_results() {
    let base = session::output_base().join("criterion");
    session::session(INTEGRATION).keep_apart_stale(&base);
}

/// [`measure_once`] but for what it returns: whether the call was counted in-process.
/// Everything but starting and stopping the count and the routine itself (printing,
/// naming the directory, saving) runs on the session's helper thread, so this thread's
/// heap is left as it was.
fn count_and_save<O>(id: &str, routine: impl FnOnce() -> O) -> Option<()> {
    let mut session = session::session(INTEGRATION);
    let session = &mut *session;
    session.note(id);
    session.record(id, routine)?;
    session::on_helper_thread(|| {
        let bench = session.recorded.last().expect("just recorded").clone();
        println!("{}", session::summary_line(id, &bench.stats));
        let dir = result_dir(id);
        if let Err(e) = session.write_result(&dir, &[bench]) {
            NOT_SAVED.fetch_add(1, Ordering::SeqCst);
            eprintln!("memtrack {id}: result not saved: {e}");
        }
    });
    Some(())
}
