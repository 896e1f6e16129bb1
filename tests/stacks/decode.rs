//! A Rust release binary for the stacks tests (memtrack-cli/tests/stacks.rs), built with
//! `rustc -O -g` twice, with the legacy and with the v0 symbol mangling: symbolization
//! must give the demangled names (`fixture::codec::decode`,
//! `<fixture::codec::Parser<u8>>::load` in v0, `fixture::codec::Parser<T>::load` in
//! legacy). `black_box` keeps the calls from being tail calls.

use std::hint::black_box;

unsafe extern "C" {
    fn malloc(n: usize) -> *mut u8;
    fn free(p: *mut u8);
}

mod codec {
    use std::hint::black_box;

    #[inline(never)]
    pub fn decode(n: usize) -> *mut u8 {
        let p = unsafe { super::malloc(n) }; // site: decode calls malloc
        black_box(p)
    }

    pub struct Parser<T>(pub T);

    impl<T: Copy + Into<usize>> Parser<T> {
        #[inline(never)]
        pub fn load(&self) -> *mut u8 {
            let p = decode(self.0.into() + 16); // site: load calls decode
            black_box(p)
        }
    }
}

fn main() {
    let parser = codec::Parser(black_box(100u8));
    let p = parser.load(); // site: main calls load
    unsafe { free(black_box(p)) };
}
