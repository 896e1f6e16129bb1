//! [`BenchmarkGroup`]: criterion's `BenchmarkGroup`, wrapped.

use std::time::Duration;

use ::criterion::{
    PlotConfiguration, SamplingMode, Throughput,
    measurement::{Measurement, WallTime},
};

use super::{Bencher, IntoBenchmarkId, criterion::drive};
use crate::cli::Cli;

/// A group of related benchmarks (criterion's `BenchmarkGroup`, which it wraps). Made by
/// [`Criterion::benchmark_group`](super::Criterion::benchmark_group).
pub struct BenchmarkGroup<'a, M: Measurement = WallTime> {
    /// criterion's group; `None` in a memory-only run.
    inner: Option<::criterion::BenchmarkGroup<'a, M>>,
    name: String,
    cli: &'a Cli,
}

macro_rules! forward {
    ($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty)) => {
        $(#[$doc])*
        pub fn $name(&mut self, $arg: $ty) -> &mut Self {
            if let Some(group) = &mut self.inner {
                group.$name($arg);
            }
            self
        }
    };
}

impl<'a, M: Measurement> BenchmarkGroup<'a, M> {
    pub(crate) fn new(
        inner: Option<::criterion::BenchmarkGroup<'a, M>>,
        name: String,
        cli: &'a Cli,
    ) -> Self {
        BenchmarkGroup { inner, name, cli }
    }

    forward!(
        /// criterion's `BenchmarkGroup::sample_size`.
        sample_size(n: usize)
    );
    forward!(
        /// criterion's `BenchmarkGroup::warm_up_time`.
        warm_up_time(dur: Duration)
    );
    forward!(
        /// criterion's `BenchmarkGroup::measurement_time`.
        measurement_time(dur: Duration)
    );
    forward!(
        /// criterion's `BenchmarkGroup::nresamples`.
        nresamples(n: usize)
    );
    forward!(
        /// criterion's `BenchmarkGroup::noise_threshold`.
        noise_threshold(threshold: f64)
    );
    forward!(
        /// criterion's `BenchmarkGroup::confidence_level`.
        confidence_level(cl: f64)
    );
    forward!(
        /// criterion's `BenchmarkGroup::significance_level`.
        significance_level(sl: f64)
    );
    forward!(
        /// criterion's `BenchmarkGroup::plot_config`.
        plot_config(new_config: PlotConfiguration)
    );
    forward!(
        /// criterion's `BenchmarkGroup::throughput`.
        throughput(throughput: Throughput)
    );
    forward!(
        /// criterion's `BenchmarkGroup::sampling_mode`.
        sampling_mode(new_mode: SamplingMode)
    );
}

// 'static: a measurement of the heap is told apart by its type (`heap::cannot_measure`).
impl<M: Measurement + 'static> BenchmarkGroup<'_, M> {
    /// Benchmarks a function in this group (criterion's `BenchmarkGroup::bench_function`).
    pub fn bench_function<ID: IntoBenchmarkId, F>(&mut self, id: ID, mut f: F) -> &mut Self
    where
        F: FnMut(&mut Bencher<'_, M>),
    {
        self.bench_with_input(id, &(), |b, _| f(b))
    }

    /// Benchmarks a function with an input in this group (criterion's
    /// `BenchmarkGroup::bench_with_input`).
    pub fn bench_with_input<ID: IntoBenchmarkId, F, I>(
        &mut self,
        id: ID,
        input: &I,
        mut f: F,
    ) -> &mut Self
    where
        F: FnMut(&mut Bencher<'_, M>, &I),
        I: ?Sized,
    {
        let id = id.into_benchmark_id();
        let uri = id.full_id(&self.name);
        if let Some(measurement) = crate::heap::cannot_measure::<M>() {
            if self.cli.selects(&uri) {
                crate::heap::not_measured(&uri, measurement);
            }
            return self;
        }
        match &mut self.inner {
            None => {
                if self.cli.selects(&uri) {
                    f(&mut Bencher::new(&uri, None), input);
                }
            }
            Some(group) => {
                id.apply_with_input(group, input, |b, input| drive(&uri, b, input, &mut f));
            }
        }
        self
    }

    /// Ends the group and writes its summary (criterion's `BenchmarkGroup::finish`).
    pub fn finish(self) {
        if let Some(group) = self.inner {
            group.finish();
        }
    }
}
