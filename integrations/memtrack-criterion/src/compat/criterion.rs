//! [`Criterion`]: criterion's `Criterion`, wrapped.

use std::{path::Path, time::Duration};

use ::criterion::{
    BenchmarkFilter, PlottingBackend,
    measurement::{Measurement, WallTime},
    profiler::Profiler,
};

use super::{Bencher, BenchmarkGroup, BenchmarkId, bencher::Give};
use crate::{
    Mode,
    cli::{Action, Cli, regex_filter},
};

/// The benchmark manager (criterion's `Criterion`, which it wraps): the same builder
/// methods, `benchmark_group`, `bench_function` and `bench_with_input`, and one counted
/// iteration of each benchmark (see the [crate docs](crate)).
pub struct Criterion<M: Measurement = WallTime> {
    pub(crate) inner: ::criterion::Criterion<M>,
    /// What the command line asked for, as far as memory-only runs need it.
    pub(crate) cli: Cli,
}

impl Default for Criterion<WallTime> {
    /// criterion's `Criterion::default()`.
    fn default() -> Self {
        Criterion {
            inner: ::criterion::Criterion::default(),
            cli: Cli::default(),
        }
    }
}

/// Runs `f` with a [`Bencher`] for benchmark `uri` that drives criterion's `b`.
pub(crate) fn drive<M, T, F>(uri: &str, b: &mut ::criterion::Bencher<'_, M>, input: &T, f: &mut F)
where
    M: Measurement,
    T: ?Sized,
    F: FnMut(&mut Bencher<'_, M>, &T),
{
    let mut give = |op: &mut dyn FnMut(&mut ::criterion::Bencher<'_, M>)| op(b);
    let give: Give<'_, M> = &mut give;
    f(&mut Bencher::new(uri, Some(give)), input);
}

impl<M: Measurement> Criterion<M> {
    /// Whether this run only counts memory: under `memtrack run`, when criterion would
    /// time (its probes would inflate every timing). criterion's test, list and profile
    /// runs time nothing, so criterion runs them as usual.
    pub(crate) fn memory_only(&self) -> bool {
        crate::mode() == Mode::Runner && self.cli.action == Action::Benchmark
    }

    fn map(self, f: impl FnOnce(::criterion::Criterion<M>) -> ::criterion::Criterion<M>) -> Self {
        Criterion {
            inner: f(self.inner),
            cli: self.cli,
        }
    }

    /// Measures with `m` instead (criterion's `Criterion::with_measurement`).
    pub fn with_measurement<M2: Measurement>(self, m: M2) -> Criterion<M2> {
        Criterion {
            inner: self.inner.with_measurement(m),
            cli: self.cli,
        }
    }

    /// criterion's `Criterion::with_profiler`.
    pub fn with_profiler<P: Profiler + 'static>(self, p: P) -> Self {
        self.map(|c| c.with_profiler(p))
    }

    /// criterion's `Criterion::plotting_backend`.
    pub fn plotting_backend(self, backend: PlottingBackend) -> Self {
        self.map(|c| c.plotting_backend(backend))
    }

    /// criterion's `Criterion::sample_size`.
    pub fn sample_size(self, n: usize) -> Self {
        self.map(|c| c.sample_size(n))
    }

    /// criterion's `Criterion::warm_up_time`.
    pub fn warm_up_time(self, dur: Duration) -> Self {
        self.map(|c| c.warm_up_time(dur))
    }

    /// criterion's `Criterion::measurement_time`.
    pub fn measurement_time(self, dur: Duration) -> Self {
        self.map(|c| c.measurement_time(dur))
    }

    /// criterion's `Criterion::nresamples`.
    pub fn nresamples(self, n: usize) -> Self {
        self.map(|c| c.nresamples(n))
    }

    /// criterion's `Criterion::noise_threshold`.
    pub fn noise_threshold(self, threshold: f64) -> Self {
        self.map(|c| c.noise_threshold(threshold))
    }

    /// criterion's `Criterion::confidence_level`.
    pub fn confidence_level(self, cl: f64) -> Self {
        self.map(|c| c.confidence_level(cl))
    }

    /// criterion's `Criterion::significance_level`.
    pub fn significance_level(self, sl: f64) -> Self {
        self.map(|c| c.significance_level(sl))
    }

    /// criterion's `Criterion::with_plots`.
    pub fn with_plots(self) -> Self {
        self.map(|c| c.with_plots())
    }

    /// criterion's `Criterion::without_plots`.
    pub fn without_plots(self) -> Self {
        self.map(|c| c.without_plots())
    }

    /// criterion's `Criterion::save_baseline`.
    pub fn save_baseline(self, baseline: String) -> Self {
        self.map(|c| c.save_baseline(baseline))
    }

    /// criterion's `Criterion::retain_baseline`.
    pub fn retain_baseline(self, baseline: String, strict: bool) -> Self {
        self.map(|c| c.retain_baseline(baseline, strict))
    }

    /// criterion's `Criterion::with_filter`: only benchmarks whose id matches the
    /// regular expression `filter` run.
    pub fn with_filter<S: Into<String>>(mut self, filter: S) -> Self {
        let filter = filter.into();
        self.cli.filter = regex_filter(&filter);
        self.map(|c| c.with_filter(filter))
    }

    /// criterion's `Criterion::with_benchmark_filter`.
    pub fn with_benchmark_filter(mut self, filter: BenchmarkFilter) -> Self {
        self.cli.filter = filter.clone();
        self.map(|c| c.with_benchmark_filter(filter))
    }

    /// criterion's `Criterion::with_output_color`.
    pub fn with_output_color(self, enabled: bool) -> Self {
        self.map(|c| c.with_output_color(enabled))
    }

    /// criterion's hidden `Criterion::output_directory`.
    #[doc(hidden)]
    pub fn output_directory(self, path: &Path) -> Self {
        self.map(|c| c.output_directory(path))
    }

    /// criterion's hidden `Criterion::profile_time`.
    #[doc(hidden)]
    pub fn profile_time(mut self, profile_time: Option<Duration>) -> Self {
        self.cli.action = match profile_time {
            Some(_) => Action::Profile,
            None => Action::Benchmark,
        };
        self.map(|c| c.profile_time(profile_time))
    }

    /// criterion's hidden `Criterion::final_summary` (nothing in a memory-only run).
    #[doc(hidden)]
    pub fn final_summary(&self) {
        if !self.memory_only() {
            self.inner.final_summary();
        }
    }

    /// Configures this from the command line (criterion's
    /// `Criterion::configure_from_args`), noting what it asks for.
    #[must_use]
    pub fn configure_from_args(self) -> Self {
        Criterion {
            inner: self.inner.configure_from_args(),
            cli: Cli::from_args(std::env::args().skip(1)),
        }
    }

    /// A group of benchmarks (criterion's `Criterion::benchmark_group`). Panics if
    /// `group_name` is empty.
    pub fn benchmark_group<S: Into<String>>(&mut self, group_name: S) -> BenchmarkGroup<'_, M> {
        let name = group_name.into();
        assert!(!name.is_empty(), "Group name must not be empty.");
        let memory_only = self.memory_only();
        let Criterion { inner, cli } = self;
        let inner = (!memory_only).then(|| inner.benchmark_group(name.clone()));
        BenchmarkGroup::new(inner, name, cli)
    }
}

impl<M: Measurement + 'static> Criterion<M> {
    /// Benchmarks a function (criterion's `Criterion::bench_function`).
    pub fn bench_function<F>(&mut self, id: &str, mut f: F) -> &mut Self
    where
        F: FnMut(&mut Bencher<'_, M>),
    {
        if self.memory_only() {
            if self.cli.selects(id) {
                f(&mut Bencher::new(id, None));
            }
            return self;
        }
        if let Some(measurement) = crate::heap::cannot_measure::<M>() {
            if self.cli.selects(id) {
                crate::heap::not_measured(id, measurement);
            }
            return self;
        }
        let mut f = |b: &mut Bencher<'_, M>, _: &()| f(b);
        self.inner.bench_function(id, |b| drive(id, b, &(), &mut f));
        self
    }

    /// Benchmarks a function with an input (criterion's `Criterion::bench_with_input`):
    /// `id` needs a function name.
    pub fn bench_with_input<F, I>(&mut self, id: BenchmarkId, input: &I, f: F) -> &mut Self
    where
        F: FnMut(&mut Bencher<'_, M>, &I),
    {
        let group = id.function.expect(
            "Cannot use BenchmarkId::from_parameter with Criterion::bench_with_input. \
             Consider using a BenchmarkGroup or BenchmarkId::new instead.",
        );
        let parameter = id.parameter.expect("BenchmarkId::new sets a parameter");
        self.benchmark_group(group).bench_with_input(
            BenchmarkId::from_parameter(parameter),
            input,
            f,
        );
        self
    }
}
