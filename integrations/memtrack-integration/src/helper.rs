//! The session's helper thread: where the in-process tracker's allocating work runs
//! (making it, reading its counters, closing it, saving result files), so that the
//! benchmark's thread keeps the heap it would have without memtrack.
//!
//! Why: glibc serves each thread from its own cache (tcache) and, for threads other than
//! the first, its own arena. Making and closing a tracker allocates and frees megabytes
//! (the eBPF object, the maps' descriptions, the allocator library's symbols) and leaves
//! about 2 MB in use with dozens of free chunks between them; done on the benchmark's
//! thread, a `Vec` grown by pushes timed afterwards ran 10-20% slower there than without
//! memtrack (the experiment: `examples/src/bin/heap_after_tracker.rs`, BENCHMARKS.md).
//! On this thread it leaves the benchmark thread's arena alone.
//!
//! The thread is started once and never exits: a thread that exits leaves its stack in
//! glibc's stack cache, and a counted routine that starts a thread would then reuse it
//! and free a block it never saw allocated (docs/ARCHITECTURE.md, "Benchmark
//! harnesses"). It is started in-process only, before the first benchmark (by the
//! session's trial tracker): started later, it would take the stack a benchmark's joined
//! thread left in that cache, and the benchmark's counted call would allocate a new one
//! (its 288-byte TLS vector more than under the runner). Handing a job over allocates nothing on the caller's side (a borrowed
//! closure through a futex-based mutex and condition variable), and when [`run`]
//! returns the helper is back waiting, allocating nothing, so a tracker of the whole
//! process started right after counts only the caller's work.

use std::{
    any::Any,
    cell::Cell,
    panic::{AssertUnwindSafe, catch_unwind, resume_unwind},
    sync::{Condvar, Mutex, MutexGuard, OnceLock},
};

thread_local! {
    /// True on the helper thread, where [`run`] runs its job in place.
    static ON_HELPER: Cell<bool> = const { Cell::new(false) };
}

/// A job handed to the helper: a closure borrowed from the caller of [`run`], which
/// waits until the helper is done with it.
type Job = &'static mut (dyn FnMut() + Send);

/// What the caller and the helper share.
#[derive(Default)]
struct Slot {
    /// The job to run next, taken by the helper.
    job: Option<Job>,
    /// Set by the helper, under the lock, when the job has returned (or panicked).
    done: bool,
}

struct Helper {
    slot: Mutex<Slot>,
    /// Wakes the helper for a job and the caller when it is done.
    changed: Condvar,
    /// Serialises callers: one job at a time.
    turn: Mutex<()>,
}

static HELPER: OnceLock<Option<&'static Helper>> = OnceLock::new();

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The helper, started on first use; None if no thread could be started.
fn helper() -> Option<&'static Helper> {
    *HELPER.get_or_init(|| {
        let helper: &'static Helper = Box::leak(Box::new(Helper {
            slot: Mutex::new(Slot::default()),
            changed: Condvar::new(),
            turn: Mutex::new(()),
        }));
        std::thread::Builder::new()
            .name("memtrack-session".into())
            .spawn(move || serve(helper))
            .ok()
            .map(|_| helper)
    })
}

/// The helper's loop: wait for a job, run it, say so, wait again. Setting `done` and
/// going back to waiting happen under one lock, released only inside the wait, so a
/// caller that sees `done` finds the helper waiting.
fn serve(helper: &'static Helper) -> ! {
    ON_HELPER.set(true);
    let mut slot = lock(&helper.slot);
    loop {
        match slot.job.take() {
            Some(job) => {
                drop(slot);
                // The job catches its own panics (see `run`); this is the helper's
                // last guard, so that it keeps serving.
                let _ = catch_unwind(AssertUnwindSafe(job));
                slot = lock(&helper.slot);
                slot.done = true;
                helper.changed.notify_all();
            }
            None => slot = helper.changed.wait(slot).unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// Runs `job` on the helper thread and returns what it returns (a panic in it is
/// resumed here). Runs it in place when called on the helper thread (from a job), or if
/// the helper could not be started.
pub(crate) fn run<R: Send>(job: impl FnOnce() -> R + Send) -> R {
    if ON_HELPER.get() {
        return job();
    }
    let Some(helper) = helper() else {
        return job();
    };
    let _turn = lock(&helper.turn);
    let mut job = Some(job);
    let mut outcome: Option<Result<R, Box<dyn Any + Send>>> = None;
    let mut call = || {
        if let Some(job) = job.take() {
            outcome = Some(catch_unwind(AssertUnwindSafe(job)));
        }
    };
    let call: &mut (dyn FnMut() + Send) = &mut call;
    // SAFETY: only the lifetime is widened. The helper drops its reference to `call`
    // before it sets `done`, and this function does not return (nor unwind: nothing
    // below panics) before it has seen `done`, so `call` and what it borrows outlive
    // every use of the reference.
    let call: Job = unsafe { std::mem::transmute::<&mut (dyn FnMut() + Send), Job>(call) };
    let mut slot = lock(&helper.slot);
    slot.done = false;
    slot.job = Some(call);
    helper.changed.notify_all();
    while !slot.done {
        slot = helper.changed.wait(slot).unwrap_or_else(|p| p.into_inner());
    }
    drop(slot);
    match outcome.expect("the helper runs every job it takes") {
        Ok(value) => value,
        Err(panic) => resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tid() -> std::thread::ThreadId {
        std::thread::current().id()
    }

    #[test]
    fn jobs_run_on_one_other_thread_and_borrow_the_callers_locals() {
        let mut seen = Vec::new();
        let here = tid();
        let first = run(|| {
            seen.push(1);
            tid()
        });
        let second = run(|| {
            seen.push(2);
            tid()
        });
        assert_ne!(first, here);
        assert_eq!(first, second);
        assert_eq!(seen, [1, 2]);
    }

    #[test]
    fn a_panic_in_a_job_reaches_the_caller_and_the_helper_goes_on() {
        let caught = catch_unwind(|| run(|| panic!("job failed")));
        let message = caught.expect_err("the panic is resumed in the caller");
        assert_eq!(message.downcast_ref::<&str>(), Some(&"job failed"));
        assert_eq!(run(|| 6 * 7), 42);
    }

    #[test]
    fn a_job_may_hand_over_a_job_itself() {
        let (outer, inner) = run(|| (tid(), run(tid)));
        assert_eq!(outer, inner);
        assert_ne!(outer, tid());
    }
}
