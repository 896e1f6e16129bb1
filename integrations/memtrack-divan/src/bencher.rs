//! [`Bencher`]: divan's `Bencher` with the same methods, counting one iteration of the
//! benchmarked function with memtrack before divan times it.
//!
//! Every method does what divan's does (and calls it). Before divan's loop runs, the
//! first time this process runs a benchmark, one uncounted warm-up call and one counted
//! call of the benchmarked function run (inputs made, and outputs and by-reference
//! inputs dropped, outside the count, as divan does outside its timing); see
//! [`crate::count`].
//!
//! divan's builder types after `with_inputs` cannot be named outside divan, so this
//! `Bencher` does not hold one: `with_inputs` keeps the generator and the input counters
//! here, and divan's `with_inputs(..).input_counter(..).bench_*(..)` chain is made at the
//! end, in one expression (`divan_with_inputs!`). Input counters are kept per counter
//! kind, so setting one of a kind again replaces it, as in divan.

use std::any::{Any, TypeId};

use divan::counter::{BytesCount, CharsCount, Counter, CyclesCount, IntoCounter, ItemsCount};

use crate::count;

/// The configuration of a [`Bencher`] before [`Bencher::with_inputs`]: none.
#[derive(Debug)]
#[non_exhaustive]
pub struct NoInputs;

/// The configuration of a [`Bencher`] after [`Bencher::with_inputs`]: the input
/// generator, and the input counters `K` ([`NoInputCounters`] or [`InputCounters`]),
/// handed to divan when the benchmark runs.
pub struct Inputs<G, K = NoInputCounters> {
    gen_input: G,
    counters: K,
}

/// No input counter set.
#[derive(Debug)]
#[non_exhaustive]
pub struct NoInputCounters;

/// One input counter of a kind, boxed (divan calls it outside its timing).
type InputCounter<I, K> = Option<Box<dyn Fn(&I) -> K + Sync>>;

/// The input counters set, one per counter kind (setting one of a kind again replaces
/// it, as in divan). Boxed, so the input type must be `'static` once an input counter is
/// set.
pub struct InputCounters<I> {
    bytes: InputCounter<I, BytesCount>,
    chars: InputCounter<I, CharsCount>,
    cycles: InputCounter<I, CyclesCount>,
    items: InputCounter<I, ItemsCount>,
}

/// Benchmarks a function, like divan's `Bencher`, which it wraps: the benchmark
/// functions of `#[divan::bench]` receive this one. See the [crate docs](crate).
#[must_use = "a benchmark function must be registered"]
pub struct Bencher<'a, 'b, C = NoInputs> {
    inner: divan::Bencher<'a, 'b>,
    uri: String,
    config: C,
}

impl<C> std::fmt::Debug for Bencher<'_, '_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bencher")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

/// divan's bencher `$inner` configured with `$config`'s generator and (`counted`) input
/// counters: `$inner.with_inputs(gen).input_counter(..)...`, an expression of divan's
/// unnamed type.
macro_rules! divan_with_inputs {
    (plain, $inner:expr, $config:expr) => {
        $inner.with_inputs($config.gen_input)
    };
    (counted, $inner:expr, $config:expr) => {{
        let InputCounters {
            bytes,
            chars,
            cycles,
            items,
        } = $config.counters;
        let mut divan = $inner.with_inputs($config.gen_input);
        if let Some(counter) = bytes {
            divan = divan.input_counter(counter);
        }
        if let Some(counter) = chars {
            divan = divan.input_counter(counter);
        }
        if let Some(counter) = cycles {
            divan = divan.input_counter(counter);
        }
        if let Some(counter) = items {
            divan = divan.input_counter(counter);
        }
        divan
    }};
}

/// The four `bench_*` methods over generated inputs, divan's chain made by
/// `divan_with_inputs!($kind, ..)`.
macro_rules! input_bench_methods {
    ($kind:ident) => {
        /// Benchmarks a function over generated inputs, by value (divan's
        /// `Bencher::bench_values`), after counting one call on a fresh input.
        pub fn bench_values<O, B>(self, benched: B)
        where
            B: Fn(I) -> O + Sync,
            G: Fn() -> I + Sync,
        {
            if count::wanted(&self.uri) {
                let make = &self.config.gen_input;
                drop(benched(make()));
                let input = make();
                count::once(&self.uri, || benched(input));
            }
            if count::time_with_divan(&self.uri) {
                divan_with_inputs!($kind, self.inner, self.config).bench_values(benched);
            }
        }

        /// Benchmarks a function over generated inputs, by value, on the current thread
        /// (divan's `Bencher::bench_local_values`), after counting one call on a fresh
        /// input.
        pub fn bench_local_values<O, B>(mut self, mut benched: B)
        where
            B: FnMut(I) -> O,
        {
            if count::wanted(&self.uri) {
                drop(benched((self.config.gen_input)()));
                let input = (self.config.gen_input)();
                count::once(&self.uri, || benched(input));
            }
            if count::time_with_divan(&self.uri) {
                divan_with_inputs!($kind, self.inner, self.config).bench_local_values(benched);
            }
        }

        /// Benchmarks a function over generated inputs, by reference (divan's
        /// `Bencher::bench_refs`), after counting one call on a fresh input (dropped
        /// after the count).
        pub fn bench_refs<O, B>(self, benched: B)
        where
            B: Fn(&mut I) -> O + Sync,
            G: Fn() -> I + Sync,
        {
            if count::wanted(&self.uri) {
                let make = &self.config.gen_input;
                drop(benched(&mut make()));
                let mut input = make();
                count::once(&self.uri, || benched(&mut input));
                drop(input);
            }
            if count::time_with_divan(&self.uri) {
                divan_with_inputs!($kind, self.inner, self.config).bench_refs(benched);
            }
        }

        /// Benchmarks a function over generated inputs, by reference, on the current
        /// thread (divan's `Bencher::bench_local_refs`), after counting one call on a
        /// fresh input (dropped after the count).
        pub fn bench_local_refs<O, B>(mut self, mut benched: B)
        where
            B: FnMut(&mut I) -> O,
        {
            if count::wanted(&self.uri) {
                drop(benched(&mut (self.config.gen_input)()));
                let mut input = (self.config.gen_input)();
                count::once(&self.uri, || benched(&mut input));
                drop(input);
            }
            if count::time_with_divan(&self.uri) {
                divan_with_inputs!($kind, self.inner, self.config).bench_local_refs(benched);
            }
        }
    };
}

impl<'a, 'b> Bencher<'a, 'b> {
    /// Wraps divan's bencher for benchmark `uri` (what `#[divan::bench]` generates).
    pub(crate) fn new(inner: divan::Bencher<'a, 'b>, uri: String) -> Self {
        Bencher {
            inner,
            uri,
            config: NoInputs,
        }
    }

    /// Benchmarks a function (divan's `Bencher::bench`), after counting one call.
    pub fn bench<O, B>(self, benched: B)
    where
        B: Fn() -> O + Sync,
    {
        if count::wanted(&self.uri) {
            drop(benched());
            count::once(&self.uri, &benched);
        }
        if count::time_with_divan(&self.uri) {
            self.inner.bench(benched);
        }
    }

    /// Benchmarks a function on the current thread (divan's `Bencher::bench_local`),
    /// after counting one call.
    pub fn bench_local<O, B>(self, mut benched: B)
    where
        B: FnMut() -> O,
    {
        if count::wanted(&self.uri) {
            drop(benched());
            count::once(&self.uri, &mut benched);
        }
        if count::time_with_divan(&self.uri) {
            self.inner.bench_local(benched);
        }
    }

    /// Generates inputs for the benchmarked function (divan's `Bencher::with_inputs`).
    /// (No bound on `G` here, as in divan: a bound would make the compiler infer a
    /// closure given here as `FnMut` even where it could be `Fn`.)
    pub fn with_inputs<G>(self, gen_input: G) -> Bencher<'a, 'b, Inputs<G>> {
        Bencher {
            inner: self.inner,
            uri: self.uri,
            config: Inputs {
                gen_input,
                counters: NoInputCounters,
            },
        }
    }
}

impl<C> Bencher<'_, '_, C> {
    /// Assigns a counter for all iterations of the benchmarked function (divan's
    /// `Bencher::counter`).
    pub fn counter<K>(mut self, counter: K) -> Self
    where
        K: IntoCounter,
    {
        self.inner = self.inner.counter(counter);
        self
    }
}

/// `counter` converted to the known counter type `K` (its [`IntoCounter::Counter`] is
/// `K`, checked by the caller).
fn known<K: Counter + Copy, X: Any>(counter: X) -> K {
    *(&counter as &dyn Any)
        .downcast_ref::<K>()
        .expect("the counter's type was checked")
}

impl<'a, 'b, I, G> Bencher<'a, 'b, Inputs<G>>
where
    G: FnMut() -> I,
{
    /// Calls `make_counter` to create a counter for each input (divan's
    /// `Bencher::input_counter`). Needs a `'static` input type (the counter is kept
    /// boxed until the benchmark runs).
    pub fn input_counter<K, F>(
        self,
        make_counter: F,
    ) -> Bencher<'a, 'b, Inputs<G, InputCounters<I>>>
    where
        F: Fn(&I) -> K + Sync + 'static,
        K: IntoCounter,
        I: 'static,
    {
        self.counted().input_counter(make_counter)
    }

    /// Creates a counter of kind `K` from each input (divan's
    /// `Bencher::count_inputs_as`): the input is an integer (`u8` to `u64`, `usize`), or
    /// a reference to one.
    pub fn count_inputs_as<K>(self) -> Bencher<'a, 'b, Inputs<G, InputCounters<I>>>
    where
        K: Counter,
        I: 'static,
        for<'x> BytesCount: From<&'x I>,
        for<'x> CharsCount: From<&'x I>,
        for<'x> CyclesCount: From<&'x I>,
        for<'x> ItemsCount: From<&'x I>,
    {
        self.counted().count_inputs_as::<K>()
    }

    /// The same bencher, with an empty set of input counters.
    fn counted(self) -> Bencher<'a, 'b, Inputs<G, InputCounters<I>>> {
        Bencher {
            inner: self.inner,
            uri: self.uri,
            config: Inputs {
                gen_input: self.config.gen_input,
                counters: InputCounters {
                    bytes: None,
                    chars: None,
                    cycles: None,
                    items: None,
                },
            },
        }
    }

    input_bench_methods!(plain);
}

impl<I, G> Bencher<'_, '_, Inputs<G, InputCounters<I>>>
where
    G: FnMut() -> I,
    I: 'static,
{
    /// Calls `make_counter` to create a counter for each input (divan's
    /// `Bencher::input_counter`); one of the same kind replaces it.
    pub fn input_counter<K, F>(mut self, make_counter: F) -> Self
    where
        F: Fn(&I) -> K + Sync + 'static,
        K: IntoCounter,
    {
        let kind = TypeId::of::<K::Counter>();
        let c = &mut self.config.counters;
        if kind == TypeId::of::<BytesCount>() {
            c.bytes = Some(Box::new(move |i| known(make_counter(i).into_counter())));
        } else if kind == TypeId::of::<CharsCount>() {
            c.chars = Some(Box::new(move |i| known(make_counter(i).into_counter())));
        } else if kind == TypeId::of::<CyclesCount>() {
            c.cycles = Some(Box::new(move |i| known(make_counter(i).into_counter())));
        } else if kind == TypeId::of::<ItemsCount>() {
            c.items = Some(Box::new(move |i| known(make_counter(i).into_counter())));
        } else {
            unreachable!("divan has four counter types, and `Counter` is sealed");
        }
        self
    }

    /// Creates a counter of kind `K` from each input (divan's
    /// `Bencher::count_inputs_as`): the input is an integer (`u8` to `u64`, `usize`), or
    /// a reference to one.
    pub fn count_inputs_as<K>(self) -> Self
    where
        K: Counter,
        for<'x> BytesCount: From<&'x I>,
        for<'x> CharsCount: From<&'x I>,
        for<'x> CyclesCount: From<&'x I>,
        for<'x> ItemsCount: From<&'x I>,
    {
        let kind = TypeId::of::<K>();
        if kind == TypeId::of::<BytesCount>() {
            self.input_counter(|i| BytesCount::from(i))
        } else if kind == TypeId::of::<CharsCount>() {
            self.input_counter(|i| CharsCount::from(i))
        } else if kind == TypeId::of::<CyclesCount>() {
            self.input_counter(|i| CyclesCount::from(i))
        } else {
            self.input_counter(|i| ItemsCount::from(i))
        }
    }

    input_bench_methods!(counted);
}
