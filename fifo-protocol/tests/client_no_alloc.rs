//! `FifoClient` must not allocate or free heap memory inside a benchmark region.
//!
//! memtrack counts every `malloc`/`free` of the benchmarked process between the moment the
//! runner handles `StartBenchmark` (it enables counting before it replies) and the moment
//! it handles `StopBenchmark`. Whatever the client itself allocates or frees in that window
//! (reading the `Ack` to `StartBenchmark`; encoding, writing and awaiting
//! `StopBenchmark`; markers sent in between) would be blamed on the benchmark.
//!
//! This binary installs a global allocator that counts allocations, frees and reallocations
//! made by *the current thread* while that thread has armed it, so tests running in
//! parallel (and the runner threads, which stand for the separate runner process) do not
//! disturb each other. The window armed in the tests is wider than memtrack's: it spans
//! all of `start_benchmark()` and all of `stop_benchmark()`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use fifo_protocol::{
    Command, FifoClient, FifoRunner, IntegrationMode, Marker, Reply, RunnerThread, SharedHandling,
    now_ns,
};

/// Calls made on one thread while it was armed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    allocs: u64,
    deallocs: u64,
    reallocs: u64,
}

thread_local! {
    // Const-initialised and without destructors: accessing them never allocates, so the
    // allocator itself may use them.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static FOLLOWS_RUNNER: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static DEALLOCS: Cell<u64> = const { Cell::new(0) };
    static REALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// memtrack's own window, opened and closed by the runner's handler in
/// `the_runners_window_sees_only_the_benchmarks_allocations`: threads that set
/// `FOLLOWS_RUNNER` count while it is up.
static RUNNER_WINDOW: AtomicBool = AtomicBool::new(false);

/// Adds one to `counter` if this thread is counting (and still has its thread-locals).
fn count(counter: &'static std::thread::LocalKey<Cell<u64>>) {
    let armed = ARMED.try_with(Cell::get).unwrap_or(false)
        || (FOLLOWS_RUNNER.try_with(Cell::get).unwrap_or(false)
            && RUNNER_WINDOW.load(Ordering::SeqCst));
    if armed {
        let _ = counter.try_with(|c| c.set(c.get() + 1));
    }
}

struct CountingAllocator;

// SAFETY: defers every operation to the system allocator; only counts calls.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(&ALLOCS);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(&ALLOCS);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(&DEALLOCS);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(&REALLOCS);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn reset_counts() {
    for counter in [&ALLOCS, &DEALLOCS, &REALLOCS] {
        counter.set(0);
    }
}

fn counts() -> Counts {
    Counts {
        allocs: ALLOCS.get(),
        deallocs: DEALLOCS.get(),
        reallocs: REALLOCS.get(),
    }
}

/// Runs `f` with this thread's counter armed and returns what it counted.
fn counted<T>(f: impl FnOnce() -> T) -> (T, Counts) {
    reset_counts();
    ARMED.set(true);
    let out = f();
    ARMED.set(false);
    (out, counts())
}

const NOTHING: Counts = Counts {
    allocs: 0,
    deallocs: 0,
    reallocs: 0,
};

fn serving_runner() -> (RunnerThread<SharedHandling>, FifoClient) {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    let mut client = FifoClient::connect(&dir).unwrap();
    client.set_version().unwrap();
    client.set_integration("no-alloc-test", "0").unwrap();
    client
        .current_benchmark("tests/client_no_alloc.rs::bench")
        .unwrap();
    (serving, client)
}

/// Start, run `region`, stop, all armed; the exchanges must succeed.
fn counted_region(client: &mut FifoClient, region: impl FnOnce(&mut FifoClient)) -> Counts {
    let (outcome, counts) = counted(|| {
        client.start_benchmark()?;
        region(client);
        client.stop_benchmark()
    });
    outcome.unwrap();
    counts
}

#[test]
fn counting_allocator_sees_this_threads_calls() {
    let ((), counts) = counted(|| drop(std::hint::black_box(Box::new([0u8; 64]))));
    assert_eq!(
        counts,
        Counts {
            allocs: 1,
            deallocs: 1,
            reallocs: 0
        }
    );
    let ((), counts) = counted(|| {
        let mut v = std::hint::black_box(Vec::<u8>::with_capacity(1));
        v.extend_from_slice(&[1, 2, 3]);
        drop(v);
    });
    assert_eq!(
        counts,
        Counts {
            allocs: 1,
            deallocs: 1,
            reallocs: 1
        }
    );
}

#[test]
fn an_empty_region_costs_no_allocation_and_no_free() {
    let (serving, mut client) = serving_runner();
    // The first region of a fresh client, then many more: nothing is allocated lazily on
    // first use, and nothing accumulates.
    for round in 0..200 {
        let counts = counted_region(&mut client, |_| {});
        assert_eq!(counts, NOTHING, "round {round}");
    }
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.measurements.len(), 200);
    assert!(result.measurements.iter().all(|m| m.stop_ns.is_some()));
}

#[test]
fn a_region_allocating_one_box_counts_exactly_that_box() {
    let (serving, mut client) = serving_runner();
    for round in 0..20 {
        let counts = counted_region(&mut client, |_| {
            drop(std::hint::black_box(Box::new([0u8; 64])));
        });
        assert_eq!(
            counts,
            Counts {
                allocs: 1,
                deallocs: 1,
                reallocs: 0
            },
            "round {round}"
        );
    }
    serving.stop().unwrap();
}

#[test]
fn sample_markers_inside_a_region_allocate_nothing() {
    let (serving, mut client) = serving_runner();
    for round in 0..20 {
        let counts = counted_region(&mut client, |client| {
            for _ in 0..3 {
                client
                    .add_marker(Marker::SampleStart {
                        timestamp_ns: now_ns(),
                    })
                    .unwrap();
                client
                    .add_marker(Marker::SampleEnd {
                        timestamp_ns: now_ns(),
                    })
                    .unwrap();
            }
        });
        assert_eq!(counts, NOTHING, "round {round}");
    }
    let (result, _) = serving.stop().unwrap();
    assert_eq!(result.markers.len(), 20 * 6);
}

#[test]
fn other_small_commands_allocate_nothing_either() {
    let (serving, mut client) = serving_runner();
    let (outcome, counts) = counted(|| {
        client.ping()?;
        let mode = client.integration_mode()?;
        client.set_version()?;
        let reply = client.send(&Command::Ping)?;
        Ok::<_, fifo_protocol::Error>((mode, reply))
    });
    assert_eq!(
        outcome.unwrap(),
        (IntegrationMode::Memory, Reply::Ack),
        "replies"
    );
    assert_eq!(counts, NOTHING);
    serving.stop().unwrap();
}

/// A client inherited through `fork()` reopens its FIFOs on its first exchange in the
/// child, which may be `start_benchmark` or even `stop_benchmark`: without allocating.
#[test]
fn a_forked_client_reopens_its_fifos_without_allocating() {
    let (serving, mut client) = serving_runner();
    client.ping().unwrap();
    for first_in_child in ["start", "stop"] {
        if first_in_child == "stop" {
            // The child stops what the parent started.
            client.start_benchmark().unwrap();
        }
        // SAFETY: the child only uses the client and this thread's counters (glibc's malloc
        // is fork-safe) and leaves with _exit, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let (outcome, counts) = counted(|| {
                if first_in_child == "start" {
                    client.start_benchmark()?;
                }
                client.stop_benchmark()
            });
            let code = match outcome {
                Ok(()) if counts == NOTHING => 0,
                Ok(()) => 1,
                Err(_) => 2,
            };
            // SAFETY: terminates the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child crashed: status {status}");
        match libc::WEXITSTATUS(status) {
            0 => {}
            1 => panic!("the forked client allocated ({first_in_child} first)"),
            code => panic!("the forked client failed to talk to the runner: exit code {code}"),
        }
    }
    // The parent's descriptors still work.
    let counts = counted_region(&mut client, |_| {});
    assert_eq!(counts, NOTHING);
    serving.stop().unwrap();
}

/// memtrack's actual window: the runner enables counting when it handles `StartBenchmark`,
/// before replying, and disables it when it handles `StopBenchmark`, before replying. Here
/// its handler raises and lowers `RUNNER_WINDOW`, and this thread counts while it is up.
#[test]
fn the_runners_window_sees_only_the_benchmarks_allocations() {
    let handler = |cmd: &Command| {
        match cmd {
            Command::StartBenchmark => RUNNER_WINDOW.store(true, Ordering::SeqCst),
            Command::StopBenchmark => RUNNER_WINDOW.store(false, Ordering::SeqCst),
            _ => {}
        }
        None
    };
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(handler).unwrap();
    let mut client = FifoClient::connect(&dir).unwrap();
    client.current_benchmark("window").unwrap();

    FOLLOWS_RUNNER.set(true);
    for boxes in [0, 1, 0, 3] {
        reset_counts();
        client.start_benchmark().unwrap();
        assert!(RUNNER_WINDOW.load(Ordering::SeqCst), "counting must be on");
        for _ in 0..boxes {
            drop(std::hint::black_box(Box::new([0u8; 64])));
        }
        client.stop_benchmark().unwrap();
        assert!(
            !RUNNER_WINDOW.load(Ordering::SeqCst),
            "counting must be off"
        );
        assert_eq!(
            counts(),
            Counts {
                allocs: boxes,
                deallocs: boxes,
                reallocs: 0
            },
            "{boxes} boxes"
        );
    }
    FOLLOWS_RUNNER.set(false);
    let (result, _handler) = serving.stop().unwrap();
    assert_eq!(result.measurements.len(), 4);
}

/// A handler that keeps counters, as memtrack's runner does: each closed region gets the
/// next id and counters derived from it, which `StopWithCounters` returns.
struct CountingRegions {
    closed: u64,
    last: Option<fifo_protocol::RegionCounters>,
}

impl fifo_protocol::Handler for CountingRegions {
    fn handle(&mut self, cmd: &Command) -> Option<Reply> {
        if matches!(cmd, Command::StopWithCounters) {
            let mut c = fifo_protocol::RegionCounters::default();
            c.region = self.closed;
            c.alloc_calls = 1000 + self.closed;
            c.peak_live_bytes = u64::MAX - self.closed;
            self.last = Some(c);
            self.closed += 1;
        }
        None
    }

    fn region_counters(&mut self) -> Option<fifo_protocol::RegionCounters> {
        self.last.take()
    }
}

/// Protocol version 2's stop carries the region's counters in its reply, still without
/// allocating or freeing; so does reading a refusal through `send_with`.
#[test]
fn stop_with_counters_and_refusals_read_in_place_allocate_nothing() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner
        .spawn(CountingRegions {
            closed: 0,
            last: None,
        })
        .unwrap();
    let mut client = FifoClient::connect(&dir).unwrap();
    client.set_version().unwrap();
    client.current_benchmark("v2").unwrap();
    for round in 0..50u64 {
        let (outcome, counts) = counted(|| {
            client.start_benchmark()?;
            client.stop_with_counters()
        });
        let counters = outcome.unwrap();
        assert_eq!(counts, NOTHING, "round {round}");
        assert_eq!(
            (
                counters.region,
                counters.alloc_calls,
                counters.peak_live_bytes
            ),
            (round, 1000 + round, u64::MAX - round)
        );
    }
    // A stop without a start is refused; read in place, the refusal allocates nothing.
    let (outcome, counts) = counted(|| {
        client.send_with(&Command::StopWithCounters, |reply| match reply {
            fifo_protocol::ReplyRef::Err { message } => {
                message == "StopBenchmark without a preceding StartBenchmark"
            }
            _ => false,
        })
    });
    assert!(outcome.unwrap(), "the refusal's message");
    assert_eq!(counts, NOTHING);
    serving.stop().unwrap();
}
