//! A known call tree in Rust for the stacks-versus-DHAT tests
//! (memtrack-cli/tests/stacks_vs_dhat.rs), a release build (`rustc -O -g`, no frame
//! pointers), allocating through the global allocator as Rust programs do:
//!
//!   main -> load -> decode -> Vec::with_capacity(n + 24)   10 blocks of 124 bytes, 1 kept
//!   main -> load_other -> decode -> Vec::with_capacity(4 n)  3 blocks of 100 bytes, freed
//!
//! `inline(never)` keeps the three functions real; `black_box` keeps the calls from
//! being tail calls, so every call leaves a return address.

use std::hint::black_box;

#[inline(never)]
fn decode(n: usize) -> Vec<u8> {
    let v = Vec::with_capacity(n); // site: decode calls the allocator
    black_box(v)
}

#[inline(never)]
fn load(n: usize) -> Vec<u8> {
    let v = decode(n + 24); // site: load calls decode
    black_box(v)
}

#[inline(never)]
fn load_other(n: usize) -> Vec<u8> {
    let v = decode(n * 4); // site: load_other calls decode
    black_box(v)
}

fn main() {
    let mut kept = None;
    for i in 0..10 {
        let v = load(black_box(100)); // site: main calls load
        if i == 9 {
            kept = Some(v);
        }
    }
    for _ in 0..3 {
        drop(black_box(load_other(black_box(25)))); // site: main calls load_other
    }
    // The last block stays live to the end.
    std::mem::forget(black_box(kept));
}
