//! [`Bencher`]: criterion's `Bencher`, counting one iteration first.

use ::criterion::{BatchSize, measurement::Measurement, measurement::WallTime};

use crate::{INTEGRATION, count, session};

/// Hands criterion's bencher of the current sample to an operation (criterion's
/// bencher has two lifetimes; this keeps [`Bencher`] at criterion's one).
pub(crate) type Give<'a, M> = &'a mut dyn FnMut(&mut dyn FnMut(&mut ::criterion::Bencher<'_, M>));

/// Times a routine, like criterion's `Bencher` (which it wraps): the closures given to
/// `bench_function` and `bench_with_input` receive this one.
///
/// Every method does what criterion's does (and calls it), and the first time this
/// process runs the benchmark, first runs the routine twice outside criterion's timing:
/// an uncounted warm-up, then one iteration counted by memtrack (setup outside the
/// count; output, and a by-reference input, dropped after it). Under `memtrack run`
/// (memory only) it runs those two and nothing else.
pub struct Bencher<'a, M: Measurement = WallTime> {
    uri: &'a str,
    criterion: Option<Give<'a, M>>,
}

impl<'a, M: Measurement> Bencher<'a, M> {
    /// A bencher for benchmark `uri`, driving criterion's through `give`, or (`None`)
    /// only counting.
    pub(crate) fn new(uri: &'a str, criterion: Option<Give<'a, M>>) -> Self {
        Bencher { uri, criterion }
    }

    /// Runs `op` on criterion's bencher, if there is one, after saying (once per
    /// benchmark) when another tracer's breakpoints in the allocator make its timings
    /// dishonest ([`session::check_timing`]). Not for a heap measurement: it times
    /// nothing, and measures with memtrack's own probes in the allocator.
    fn criterion(&mut self, op: &mut dyn FnMut(&mut ::criterion::Bencher<'_, M>)) {
        if let Some(give) = &mut self.criterion {
            if !crate::heap::is_heap::<M>() {
                session::check_timing(INTEGRATION, "criterion", self.uri);
            }
            give(op);
        }
    }

    /// Times `routine` (criterion's `Bencher::iter`).
    pub fn iter<O, R>(&mut self, mut routine: R)
    where
        R: FnMut() -> O,
    {
        if count::wanted(self.uri) {
            drop(routine());
            count::once(self.uri, &mut routine);
        }
        self.criterion(&mut |b| b.iter(&mut routine));
    }

    /// Times `routine`, which measures itself (criterion's `Bencher::iter_custom`); the
    /// counted iteration is `routine(1)`.
    pub fn iter_custom<R>(&mut self, mut routine: R)
    where
        R: FnMut(u64) -> M::Value,
    {
        if count::wanted(self.uri) {
            drop(routine(1));
            count::once(self.uri, || routine(1));
        }
        self.criterion(&mut |b| b.iter_custom(&mut routine));
    }

    /// criterion's hidden `Bencher::iter_with_setup`: `iter_batched` with one input per
    /// batch.
    #[doc(hidden)]
    pub fn iter_with_setup<I, O, S, R>(&mut self, setup: S, routine: R)
    where
        S: FnMut() -> I,
        R: FnMut(I) -> O,
    {
        self.iter_batched(setup, routine, BatchSize::PerIteration);
    }

    /// Times `routine`, dropping its outputs outside the timing (criterion's
    /// `Bencher::iter_with_large_drop`).
    pub fn iter_with_large_drop<O, R>(&mut self, mut routine: R)
    where
        R: FnMut() -> O,
    {
        if count::wanted(self.uri) {
            drop(routine());
            count::once(self.uri, &mut routine);
        }
        self.criterion(&mut |b| b.iter_with_large_drop(&mut routine));
    }

    /// Times `routine` over inputs made by `setup` outside the timing (criterion's
    /// `Bencher::iter_batched`).
    pub fn iter_batched<I, O, S, R>(&mut self, mut setup: S, mut routine: R, size: BatchSize)
    where
        S: FnMut() -> I,
        R: FnMut(I) -> O,
    {
        if count::wanted(self.uri) {
            drop(routine(setup()));
            let input = setup();
            count::once(self.uri, || routine(input));
        }
        self.criterion(&mut |b| b.iter_batched(&mut setup, &mut routine, size));
    }

    /// Times `routine` over inputs made by `setup`, by reference (criterion's
    /// `Bencher::iter_batched_ref`).
    pub fn iter_batched_ref<I, O, S, R>(&mut self, mut setup: S, mut routine: R, size: BatchSize)
    where
        S: FnMut() -> I,
        R: FnMut(&mut I) -> O,
    {
        if count::wanted(self.uri) {
            drop(routine(&mut setup()));
            let mut input = setup();
            count::once(self.uri, || routine(&mut input));
            drop(input);
        }
        self.criterion(&mut |b| b.iter_batched_ref(&mut setup, &mut routine, size));
    }
}
