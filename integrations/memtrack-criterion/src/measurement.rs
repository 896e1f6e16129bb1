//! criterion [`Measurement`]s that count heap allocations instead of time:
//! [`AllocatedBytes`] (bytes requested per iteration) and [`AllocationCalls`] (blocks
//! handed out per iteration), counted exactly by memtrack's in-process tracker.
//!
//! criterion calls [`Measurement::start`] before a batch of iterations and
//! [`Measurement::end`] after it, then divides by the iteration count; the tracker counts
//! the measuring thread only, between the two. Without in-process counting (under the
//! runner, or without privileges; see [`Mode`]) both fall back to wall-clock time, with
//! criterion's own time formatting, so benchmarks still run.

use std::{sync::MutexGuard, time::Instant};

use criterion::{
    Criterion, Throughput,
    measurement::{Measurement, ValueFormatter, WallTime},
};

use crate::{
    INTEGRATION,
    session::{self, Backend, Mode, Session},
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
    /// Counting: the session stays locked until `end`.
    Counting(MutexGuard<'static, Session>),
    /// The tracker could not start: the batch is not counted.
    Failed,
    /// Fallback: wall-clock time.
    Timing(Instant),
}

/// The shared implementation of [`AllocatedBytes`] and [`AllocationCalls`].
struct Heap {
    counting: bool,
    formatter: HeapFormatter,
    wall: WallTime,
}

impl Heap {
    fn new(quantity: Quantity) -> Heap {
        Heap {
            counting: session::mode(INTEGRATION) == Mode::InProcess,
            formatter: HeapFormatter { quantity },
            wall: WallTime,
        }
    }

    fn start(&self) -> Start {
        if !self.counting {
            return Start::Timing(Instant::now());
        }
        let mut session = session::session(INTEGRATION);
        let Backend::InProcess(tracker) = &mut session.backend else {
            return Start::Failed;
        };
        match tracker.reset().and_then(|()| tracker.start()) {
            // From here to `end`, nothing but the benchmark's iterations runs on this
            // thread: criterion calls `end` right after the loop.
            Ok(()) => Start::Counting(session),
            Err(e) => {
                eprintln!("memtrack: cannot start counting: {e}");
                Start::Failed
            }
        }
    }

    fn end(&self, start: Start) -> u64 {
        match start {
            Start::Timing(began) => began.elapsed().as_nanos() as u64,
            Start::Failed => 0,
            Start::Counting(mut session) => {
                let Backend::InProcess(tracker) = &mut session.backend else {
                    return 0;
                };
                match tracker.stop().and_then(|()| tracker.collect()) {
                    Ok(stats) => match self.formatter.quantity {
                        Quantity::Bytes => stats.bytes_allocated,
                        Quantity::Calls => stats.alloc_calls,
                    },
                    Err(e) => {
                        eprintln!("memtrack: cannot collect the counts: {e}");
                        0
                    }
                }
            }
        }
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        if self.counting {
            &self.formatter
        } else {
            self.wall.formatter()
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
                "A measurement of ", $unit, " per iteration. Decides the [`Mode`] of this ",
                "process if it is not decided yet (announcing it in one line on stderr); ",
                "without in-process counting it measures wall-clock time instead."
            )]
            pub fn new() -> Self {
                $name {
                    heap: Heap::new($quantity),
                }
            }

            /// Whether this measurement counts allocations (in-process mode) rather than
            /// falling back to wall-clock time.
            pub fn is_counting(&self) -> bool {
                self.heap.counting
            }

            /// `Criterion::default()` measuring with this, plots disabled.
            ///
            /// Plots are off because exact counts are identical in every sample: on a
            /// repeated run criterion 0.8's t-test of "new against base" then has no
            /// finite resample, and plotting that empty distribution panics
            /// (`index out of bounds` in `criterion/src/kde.rs`). The text report,
            /// the saved estimates and the comparison with the previous run work.
            /// Building `Criterion` yourself? Add `.without_plots()` (or pass
            /// `--noplot`).
            pub fn criterion() -> Criterion<$name> {
                Criterion::default()
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
                self.heap.formatter()
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
    /// use criterion::Criterion;
    /// use memtrack_criterion::AllocatedBytes;
    ///
    /// let mut c = Criterion::default()
    ///     .with_measurement(AllocatedBytes::new())
    ///     .without_plots(); // or simply: AllocatedBytes::criterion()
    /// c.bench_function("vec_1000", |b| b.iter(|| vec![0u8; 1000]));
    /// ```
    ///
    /// Counts only in [`Mode::InProcess`], on the thread that runs the iterations; in
    /// the other modes it measures wall-clock time (nanoseconds). A sample that
    /// allocates nothing measures 0, which criterion 0.8 refuses to analyse ("took zero
    /// time per iteration"): it prints that error for the benchmark and goes on. No
    /// stand-in value is invented; the exact zero shows in the line that
    /// [`bench_memtrack`](crate::CriterionMemtrackExt::bench_memtrack) prints.
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
