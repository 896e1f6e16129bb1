//! criterion [`Measurement`]s that count heap allocations instead of time:
//! [`AllocatedBytes`] (bytes requested per iteration) and [`AllocationCalls`] (blocks
//! handed out per iteration), counted exactly by memtrack's in-process tracker.
//!
//! criterion calls [`Measurement::start`] before a batch of iterations and
//! [`Measurement::end`] after it, then divides by the iteration count; a tracker of the
//! whole process counts between the two. The tracker is made at the first batch and
//! closed (its probes removed) when the last of these measurements is dropped, with the
//! [`Criterion`] that holds it: benchmarks measured in bytes are not
//! timed, so its probes slow nothing that is.
//!
//! A byte measurement never measures anything but bytes. Without privileges (and not
//! under `memtrack run`), a benchmark measured with one is not run through criterion:
//! one line on stderr says it is not measured and why, and `criterion_main!` exits 1 at
//! the end ([`crate::exit_if_not_saved`]). Where it still meets criterion without
//! counting (criterion used directly), every batch measures 0, which criterion refuses
//! to analyse ("took zero time per iteration"), so it neither saves nor compares a
//! baseline of wrong units, and one line on stderr says why.

use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use criterion::{
    Throughput,
    measurement::{Measurement, ValueFormatter},
};
use memtrack::{Scope, Tracker};

use crate::{
    Criterion, INTEGRATION,
    session::{self, Mode},
};

/// What a measurement counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quantity {
    /// Requested bytes of the blocks handed out.
    Bytes,
    /// Blocks handed out (allocation calls, DHAT's convention).
    Calls,
}

/// What a measurement's [`Measurement::start`] hands to its [`Measurement::end`]
/// (criterion's `Intermediate`): opaque.
pub struct Started(Start);

/// What [`Heap::start`] hands to [`Heap::end`].
enum Start {
    /// Counting: the tracker stays locked until `end`.
    Counting(MutexGuard<'static, Option<Tracker>>),
    /// Not counting (the tracker failed, or this mode cannot count): the batch is 0.
    Off,
}

/// The tracker all heap measurements of this process share (made at their first
/// batch), and how many counting measurements exist (the last one dropped closes it).
static TRACKER: Mutex<Option<Tracker>> = Mutex::new(None);
static COUNTING: AtomicUsize = AtomicUsize::new(0);

/// Whether the "cannot count here" line was printed.
static TOLD: AtomicBool = AtomicBool::new(false);

/// How many benchmarks were not measured because they measure the heap and this
/// process cannot count ([`not_measured`]).
static NOT_MEASURED: AtomicUsize = AtomicUsize::new(0);

/// The name of measurement `M` when it counts the heap ([`AllocatedBytes`],
/// [`AllocationCalls`]) and this process can count neither in-process nor through a
/// runner ([`Mode::Disabled`]: no CAP_BPF/CAP_PERFMON, not under `memtrack run`): such a
/// benchmark is not handed to criterion at all, whose analysis of all-zero samples
/// would say "took zero time per iteration", which is not what happened.
pub(crate) fn cannot_measure<M: 'static>() -> Option<&'static str> {
    use std::any::TypeId;
    if crate::mode() != Mode::Disabled {
        return None;
    }
    let m = TypeId::of::<M>();
    if m == TypeId::of::<AllocatedBytes>() {
        Some("AllocatedBytes")
    } else if m == TypeId::of::<AllocationCalls>() {
        Some("AllocationCalls")
    } else {
        None
    }
}

/// Whether measurement `M` counts the heap ([`AllocatedBytes`], [`AllocationCalls`]):
/// criterion then measures with memtrack's own probes attached, times nothing, and
/// breakpoints in the allocator are memtrack's.
pub(crate) fn is_heap<M>() -> bool {
    let m = std::any::type_name::<M>();
    m == std::any::type_name::<AllocatedBytes>() || m == std::any::type_name::<AllocationCalls>()
}

/// Says on stderr that benchmark `id`, measured with `measurement`, is not measured and
/// why, and counts it for [`not_measured_count`].
pub(crate) fn not_measured(id: &str, measurement: &str) {
    NOT_MEASURED.fetch_add(1, Ordering::SeqCst);
    eprintln!(
        "{INTEGRATION} {}: not measured: {measurement} counts heap allocations with \
         memtrack's eBPF probes, and this process cannot attach them (no \
         CAP_BPF/CAP_PERFMON, and not under `memtrack run`); run it as root (sudo cargo \
         bench), or under `memtrack run`",
        memtrack::record::escape_control(id)
    );
}

/// How many benchmarks [`not_measured`] left out.
pub(crate) fn not_measured_count() -> usize {
    NOT_MEASURED.load(Ordering::SeqCst)
}

/// The shared implementation of [`AllocatedBytes`] and [`AllocationCalls`].
struct Heap {
    counting: bool,
    formatter: HeapFormatter,
}

impl Heap {
    fn new(quantity: Quantity) -> Heap {
        let counting = crate::mode() == Mode::InProcess;
        if counting {
            COUNTING.fetch_add(1, Ordering::SeqCst);
        }
        Heap {
            counting,
            formatter: HeapFormatter { quantity },
        }
    }

    fn start(&self) -> Start {
        if !self.counting {
            // Said once, when criterion first measures with one (a memory-only run under
            // `memtrack run` never does).
            if !TOLD.swap(true, Ordering::SeqCst) {
                let why = match crate::mode() {
                    Mode::Runner => "under `memtrack run` the runner counts, not this process",
                    _ => "this process cannot count (no CAP_BPF/CAP_PERFMON)",
                };
                eprintln!(
                    "{INTEGRATION}: AllocatedBytes/AllocationCalls measure 0 here ({why}): \
                     criterion reports those benchmarks as taking zero time and saves no \
                     baseline"
                );
            }
            return Start::Off;
        }
        let mut tracker = TRACKER.lock().unwrap_or_else(|p| p.into_inner());
        if tracker.is_none() {
            // Made (and read, and closed) on the session's helper thread, so that
            // criterion's thread keeps its heap for any benchmark timed after these.
            match session::on_helper_thread(|| Tracker::builder().build(Scope::Process)) {
                Ok(made) => *tracker = Some(made),
                Err(e) => {
                    eprintln!("memtrack: cannot start counting: {e}");
                    return Start::Off;
                }
            }
        }
        let started = tracker.as_mut().map(|t| t.reset().and_then(|()| t.start()));
        match started {
            // From here to `end`, nothing but the benchmark's iterations runs:
            // criterion calls `end` right after the loop.
            Some(Ok(())) => Start::Counting(tracker),
            Some(Err(e)) => {
                eprintln!("memtrack: cannot start counting: {e}");
                Start::Off
            }
            None => Start::Off,
        }
    }

    fn end(&self, start: Start) -> u64 {
        let Start::Counting(mut tracker) = start else {
            return 0;
        };
        let Some(tracker) = tracker.as_mut() else {
            return 0;
        };
        let quantity = self.formatter.quantity;
        let counted = tracker.stop().and_then(|()| {
            session::on_helper_thread(|| {
                let stats = tracker.collect()?;
                Ok(match quantity {
                    Quantity::Bytes => stats.bytes_allocated,
                    Quantity::Calls => stats.alloc_calls,
                })
            })
        });
        match counted {
            Ok(value) => value,
            Err(e) => {
                eprintln!("memtrack: cannot collect the counts: {e}");
                0
            }
        }
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        if self.counting && COUNTING.fetch_sub(1, Ordering::SeqCst) == 1 {
            let tracker = TRACKER.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(tracker) = tracker {
                session::on_helper_thread(|| tracker.close());
            }
        }
    }
}

/// Formats byte counts (B, KiB, MiB, GiB) or allocation counts ("allocs").
struct HeapFormatter {
    quantity: Quantity,
}

impl ValueFormatter for HeapFormatter {
    fn scale_values(&self, typical_value: f64, values: &mut [f64]) -> &'static str {
        match self.quantity {
            Quantity::Calls => "allocs",
            Quantity::Bytes => {
                const KIB: f64 = 1024.0;
                let (divisor, unit) = if typical_value < KIB {
                    (1.0, "B")
                } else if typical_value < KIB * KIB {
                    (KIB, "KiB")
                } else if typical_value < KIB * KIB * KIB {
                    (KIB * KIB, "MiB")
                } else {
                    (KIB * KIB * KIB, "GiB")
                };
                for value in values {
                    *value /= divisor;
                }
                unit
            }
        }
    }

    fn scale_throughputs(
        &self,
        _typical_value: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let (per, unit) = match (self.quantity, throughput) {
            (Quantity::Bytes, Throughput::Bytes(n) | Throughput::BytesDecimal(n)) => {
                (*n, "B/input byte")
            }
            (Quantity::Bytes, Throughput::Bits(n)) => (*n, "B/input bit"),
            (
                Quantity::Bytes,
                Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. },
            ) => (*n, "B/elem"),
            (Quantity::Calls, Throughput::Bytes(n) | Throughput::BytesDecimal(n)) => {
                (*n, "allocs/input byte")
            }
            (Quantity::Calls, Throughput::Bits(n)) => (*n, "allocs/input bit"),
            (
                Quantity::Calls,
                Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. },
            ) => (*n, "allocs/elem"),
        };
        if per != 0 {
            for value in values {
                *value /= per as f64;
            }
        }
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        match self.quantity {
            Quantity::Bytes => "bytes",
            Quantity::Calls => "allocs",
        }
    }
}

macro_rules! heap_measurement {
    ($(#[$doc:meta])* $name:ident, $quantity:expr, $unit:literal) => {
        $(#[$doc])*
        pub struct $name {
            heap: Heap,
        }

        impl $name {
            #[doc = concat!(
                "A measurement of ", $unit, " per iteration. Decides the [`Mode`](crate::Mode) ",
                "of this process if it is not decided yet (announcing it in one line on ",
                "stderr); without in-process counting it measures 0 (see the module docs)."
            )]
            pub fn new() -> Self {
                $name {
                    heap: Heap::new($quantity),
                }
            }

            /// Whether this measurement counts allocations (in-process mode); otherwise
            /// every batch measures 0.
            pub fn is_counting(&self) -> bool {
                self.heap.counting
            }

            /// [`Criterion::default()`](crate::Criterion) measuring with this, plots
            /// disabled.
            ///
            /// Plots are off because exact counts are identical in every sample: on a
            /// repeated run criterion 0.8's t-test of "new against base" then has no
            /// finite resample, and plotting that empty distribution panics
            /// (`index out of bounds` in `criterion/src/kde.rs`). The text report,
            /// the saved estimates and the comparison with the previous run work.
            /// Building `Criterion` yourself? Add `.without_plots()` (or pass
            /// `--noplot`).
            pub fn criterion() -> Criterion<$name> {
                crate::Criterion::default()
                    .with_measurement($name::new())
                    .without_plots()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name::new()
            }
        }

        impl Measurement for $name {
            type Intermediate = Started;
            type Value = u64;

            fn start(&self) -> Started {
                Started(self.heap.start())
            }

            fn end(&self, started: Started) -> u64 {
                self.heap.end(started.0)
            }

            fn add(&self, v1: &u64, v2: &u64) -> u64 {
                v1 + v2
            }

            fn zero(&self) -> u64 {
                0
            }

            fn to_f64(&self, value: &u64) -> f64 {
                *value as f64
            }

            fn formatter(&self) -> &dyn ValueFormatter {
                &self.heap.formatter
            }
        }
    };
}

heap_measurement!(
    /// A criterion [`Measurement`]: bytes allocated per iteration (the requested sizes of
    /// the blocks handed out by `malloc`, `calloc`, `realloc`, ..., summed), printed in
    /// B, KiB, MiB or GiB.
    ///
    /// ```no_run
    /// use memtrack_criterion::{AllocatedBytes, Criterion};
    ///
    /// let mut c = Criterion::default()
    ///     .with_measurement(AllocatedBytes::new())
    ///     .without_plots(); // or simply: AllocatedBytes::criterion()
    /// c.bench_function("vec_1000", |b| b.iter(|| vec![0u8; 1000]));
    /// ```
    ///
    /// Counts only in [`Mode::InProcess`], in the whole process;
    /// in the other modes it measures 0 (see the module docs). A sample that allocates
    /// nothing measures 0, which criterion 0.8 refuses to analyse ("took zero time per
    /// iteration"): it prints that error for the benchmark and goes on. No stand-in
    /// value is invented; the exact zero shows in memtrack's line for the benchmark.
    AllocatedBytes,
    Quantity::Bytes,
    "bytes allocated"
);

heap_measurement!(
    /// A criterion [`Measurement`]: allocation calls per iteration (blocks handed out,
    /// DHAT's convention: a successful `realloc` of a non-NULL pointer is one), printed
    /// as "allocs".
    ///
    /// ```no_run
    /// use memtrack_criterion::AllocationCalls;
    ///
    /// let mut c = AllocationCalls::criterion();
    /// c.bench_function("vec_1000", |b| b.iter(|| vec![0u8; 1000]));
    /// ```
    ///
    /// Same modes and caveats as [`AllocatedBytes`].
    AllocationCalls,
    Quantity::Calls,
    "allocation calls"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_scale_by_the_typical_value() {
        let f = HeapFormatter {
            quantity: Quantity::Bytes,
        };
        let mut values = [192.0];
        assert_eq!(f.scale_values(192.0, &mut values), "B");
        assert_eq!(values, [192.0]);
        let mut values = [1536.0, 2048.0];
        assert_eq!(f.scale_values(1536.0, &mut values), "KiB");
        assert_eq!(values, [1.5, 2.0]);
        let mut values = [3.0 * 1024.0 * 1024.0];
        assert_eq!(f.scale_values(values[0], &mut values), "MiB");
        assert_eq!(values, [3.0]);
        assert_eq!(f.scale_for_machines(&mut []), "bytes");
    }

    #[test]
    fn calls_are_allocs() {
        let f = HeapFormatter {
            quantity: Quantity::Calls,
        };
        let mut values = [3.0];
        assert_eq!(f.scale_values(3.0, &mut values), "allocs");
        assert_eq!(values, [3.0]);
        assert_eq!(f.format_value(3.0), "3.0000 allocs");
    }

    #[test]
    fn throughput_divides_per_element() {
        let f = HeapFormatter {
            quantity: Quantity::Bytes,
        };
        let mut values = [800.0];
        let unit = f.scale_throughputs(800.0, &Throughput::Elements(100), &mut values);
        assert_eq!((unit, values), ("B/elem", [8.0]));
        let mut values = [5.0];
        let unit = f.scale_throughputs(5.0, &Throughput::Elements(0), &mut values);
        assert_eq!((unit, values), ("B/elem", [5.0]));
    }
}
