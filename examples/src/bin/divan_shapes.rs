//! Every form of divan benchmark, written as for divan, with memtrack-divan depended on
//! as `divan`: `args` (with and without a `Bencher`), generic `types` and `consts`,
//! `with_inputs` with `input_counter` and `count_inputs_as`, `bench_local_values`,
//! `threads`, `#[divan::bench_group]` and `#[ignore]`. Each benchmark's allocations are
//! exactly known; the tests check memtrack's counts and names of every one. As root:
//!
//! ```sh
//! cargo run --release -p memtrack-examples --bin divan_shapes -- --bench
//! ```

use divan::{
    Bencher,
    counter::{BytesCount, ItemsCount},
};

fn main() {
    divan::main();
}

/// `args`, no `Bencher`: one block of `n` bytes, returned.
#[divan::bench(args = [10, 1000])]
fn fill(n: usize) -> Vec<u8> {
    vec![1u8; n]
}

/// `args` of `&str`: one block of the string's length, returned.
#[divan::bench(args = ["ab", "abcd"])]
fn owned(s: &str) -> String {
    s.to_string()
}

/// A `Bencher` and `args`, inputs by reference with an input counter: the clone of `n`
/// three-byte strings is one block of `n` * 24 bytes and `n` blocks of 3, returned.
#[divan::bench(args = [4, 8])]
fn clone_strings(bencher: Bencher, n: usize) {
    bencher
        .with_inputs(|| vec![String::from("abc"); n])
        .input_counter(|v: &Vec<String>| ItemsCount::new(v.len()))
        .bench_refs(|v| v.clone());
}

/// Generic `types`: one block of the type's size, returned.
#[divan::bench(types = [u16, u64])]
fn boxed<T: From<u8>>() -> Box<T> {
    Box::new(T::from(7))
}

/// Generic `consts`: one block of `N` bytes, returned.
#[divan::bench(consts = [16, 32])]
fn array<const N: usize>() -> Box<[u8; N]> {
    Box::new([7u8; N])
}

/// `count_inputs_as` and `bench_local_values`: `vec![n; n]` of `usize`, returned.
#[divan::bench]
fn local_values(bencher: Bencher) {
    bencher
        .with_inputs(|| 3usize)
        .count_inputs_as::<ItemsCount>()
        .bench_local_values(|n| vec![n; n]);
}

/// `threads`: divan runs it once per thread count; memtrack counts it once. A block of
/// 100 bytes, freed.
#[divan::bench(threads = [1, 2])]
fn threaded(bencher: Bencher) {
    bencher
        .counter(BytesCount::new(100usize))
        .bench(|| std::hint::black_box(vec![1u8; 100]).len());
}

#[divan::bench_group(sample_count = 5)]
mod group {
    /// In a group: a block of 5 bytes, returned.
    #[divan::bench]
    fn inner() -> String {
        String::from("hello")
    }

    /// Ignored: neither run nor counted.
    #[divan::bench]
    #[ignore]
    fn skipped() -> Vec<u8> {
        vec![1; 7]
    }
}
