//! Counting one iteration per benchmark, and whether divan times afterwards.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::{INTEGRATION, Mode, result_dir, session};

/// Set by [`crate::main`] under `memtrack run` before it runs divan in its test mode
/// (each benchmark once, nothing timed): divan's loop may then run.
static DIVAN_TESTS: AtomicBool = AtomicBool::new(false);

/// Whether the last save of this process's result file failed (each save writes every
/// benchmark counted so far: the last one is what is on disk).
static LAST_SAVE_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether this process's result, as counted so far, is not on disk: its last save
/// failed (said on stderr then).
pub(crate) fn not_saved() -> bool {
    LAST_SAVE_FAILED.load(Ordering::SeqCst)
}

/// Records that divan runs in test mode (one call per benchmark, no timing).
pub(crate) fn divan_runs_tests() {
    DIVAN_TESTS.store(true, Ordering::SeqCst);
}

/// Whether benchmark `uri` is to be counted now: counting is possible here and this
/// process has not counted it yet (divan runs a function once per `threads` value; one
/// count serves them all).
pub(crate) fn wanted(uri: &str) -> bool {
    if session::mode(INTEGRATION) == Mode::Disabled {
        return false;
    }
    !session::session(INTEGRATION).was_measured(uri)
}

/// Counts one call of `counted` as benchmark `uri` (its output dropped after the count)
/// and in-process saves every benchmark counted so far as this process's result file,
/// on the session's helper thread (divan times this thread next).
pub(crate) fn once<O>(uri: &str, counted: impl FnOnce() -> O) {
    let mut session = session::session(INTEGRATION);
    let session = &mut *session;
    session.note(uri);
    if session.record(uri, counted).is_some() {
        session::on_helper_thread(|| {
            let dir = result_dir();
            let saved = session.write_result(&dir, &session.recorded);
            LAST_SAVE_FAILED.store(saved.is_err(), Ordering::SeqCst);
            if let Err(e) = saved {
                eprintln!("memtrack {uri}: result not saved: {e}");
            }
        });
    }
}

/// Whether divan's loop may run after the count: always, except under `memtrack run`,
/// whose probes would inflate every timed iteration; there only when [`crate::main`]
/// runs divan in test mode (one untimed call). A harness that runs divan itself under the
/// runner therefore gets divan's "No benchmark function registered" warning for each
/// benchmark instead of inflated timings. Before divan times benchmark `uri`, says
/// (once) when another tracer's breakpoints in the allocator make its timings dishonest
/// ([`session::check_timing`]).
pub(crate) fn time_with_divan(uri: &str) -> bool {
    let time = session::mode(INTEGRATION) != Mode::Runner || DIVAN_TESTS.load(Ordering::SeqCst);
    if time {
        session::check_timing(INTEGRATION, "divan", uri);
    }
    time
}
