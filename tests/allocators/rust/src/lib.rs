//! The workload shared by every Rust allocator fixture (see ../README.md).
//!
//! Exactly this sequence of `GlobalAlloc` calls (size, align), whatever the
//! global allocator is; `counting_fixture` records and prints it:
//!
//! | # | call | size | align |
//! |---|---|---|---|
//! | 1 | alloc (Vec<Box<[u8;100]>>::with_capacity(10)) | 80 | 8 |
//! | 2-11 | alloc (10 x Box<[u8; 100]>) | 100 | 1 |
//! | 12-21 | dealloc (the 10 boxes, in push order) | 100 | 1 |
//! | 22 | dealloc (the Vec's buffer) | 80 | 8 |
//! | 23 | alloc (Vec<u64>, first push: capacity 4) | 32 | 8 |
//! | 24 | realloc 32 -> 64 (fifth push: capacity 8) | 64 | 8 |
//! | 25 | realloc 64 -> 24 (truncate(3) + shrink_to_fit) | 24 | 8 |
//! | 26 | dealloc (the Vec<u64>) | 24 | 8 |
//! | 27 | alloc (Box<Align64>, over-aligned) | 64 | 64 |
//! | 28 | dealloc | 64 | 64 |
//! | 29 | alloc_zeroed (vec![0u8; 65536]) | 65536 | 1 |
//! | 30 | dealloc | 65536 | 1 |
//! | 31 | alloc (Box<[u8; 48]>, leaked with Box::leak) | 48 | 1 |
//!
//! Before main, Rust std (1.95) itself makes two more calls, alloc(4, 1) (the
//! main thread's name) and alloc(544, 8) (a BTreeMap node), and after main
//! dealloc(4, 1); glibc's pthread_getattr_np adds glibc-level calls. See
//! ../README.md.
//!
//! No printing, no env/args access; every pointer goes through `black_box`.
//! Returns false if something did not behave as expected (the bins then exit 86).
use std::hint::black_box;

#[repr(C, align(64))]
pub struct Align64(pub [u8; 64]);

pub fn workload() -> bool {
    let mut ok = true;

    // 1-22: ten 100-byte boxes held in a Vec with exact capacity
    let mut boxes: Vec<Box<[u8; 100]>> = Vec::with_capacity(10);
    for i in 0..10u8 {
        // the fill byte is opaque: with a constant 0 LLVM turns the first
        // Box::new into alloc_zeroed
        let fill = black_box(i);
        boxes.push(black_box(Box::new([fill; 100])));
    }
    ok &= boxes.capacity() == 10;
    black_box(&boxes);
    drop(black_box(boxes));

    // 23-26: Vec<u64> grown by 8 pushes (capacity 0 -> 4 -> 8), then shrunk to 3
    let mut v: Vec<u64> = Vec::new();
    for i in 0..8u64 {
        v.push(black_box(i));
        black_box(v.as_ptr());
    }
    ok &= v.capacity() == 8;
    v.truncate(3);
    v.shrink_to_fit();
    ok &= v.capacity() == 3;
    black_box(v.as_ptr());
    drop(black_box(v));

    // 27-28: over-aligned box
    let a = black_box(Box::new(Align64([1; 64])));
    ok &= (&*a as *const Align64 as usize) % 64 == 0;
    drop(black_box(a));

    // 29-30: zeroed allocation, large enough to set the peak (see README.md:
    // glibc's pthread_getattr_np at std start-up briefly holds 1736 bytes)
    let z = black_box(vec![0u8; 65536]);
    ok &= z.capacity() == 65536 && z[65535] == 0;
    drop(black_box(z));

    // 31: the leak
    let leaked: &'static mut [u8; 48] = Box::leak(Box::new([7u8; 48]));
    black_box(leaked as *mut [u8; 48]);

    ok
}
