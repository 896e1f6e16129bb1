//! counting_fixture: the workload (src/lib.rs) under a recording GlobalAlloc
//! that wraps System. It logs every GlobalAlloc call from the first one (so it
//! also sees std's own start-up allocations, if any) into a static array -
//! never allocating itself - and after main's work prints the log to stderr,
//! one line per call, with "main-begin"/"main-end" markers. The printing
//! happens after the snapshot, so its own allocations (if any) are not listed.
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

const MAX: usize = 4096;
// op: 1 alloc, 2 alloc_zeroed, 3 dealloc, 4 realloc (size = old, new = new size)
static OPS: [AtomicUsize; MAX * 4] = [const { AtomicUsize::new(0) }; MAX * 4];
static N: AtomicUsize = AtomicUsize::new(0);

fn record(op: usize, size: usize, align: usize, new: usize) {
    let i = N.fetch_add(1, Ordering::SeqCst);
    if i < MAX {
        OPS[i * 4].store(op, Ordering::SeqCst);
        OPS[i * 4 + 1].store(size, Ordering::SeqCst);
        OPS[i * 4 + 2].store(align, Ordering::SeqCst);
        OPS[i * 4 + 3].store(new, Ordering::SeqCst);
    }
}

struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        record(1, l.size(), l.align(), 0);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        record(2, l.size(), l.align(), 0);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        record(3, l.size(), l.align(), 0);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        record(4, l.size(), l.align(), new);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() {
    let begin = N.load(Ordering::SeqCst);
    let ok = memtrack_allocator_fixtures::workload();
    let end = N.load(Ordering::SeqCst);
    let mut err = std::io::stderr().lock();
    for i in 0..end.min(MAX) {
        if i == begin {
            let _ = writeln!(err, "main-begin");
        }
        let op = OPS[i * 4].load(Ordering::SeqCst);
        let (size, align, new) = (
            OPS[i * 4 + 1].load(Ordering::SeqCst),
            OPS[i * 4 + 2].load(Ordering::SeqCst),
            OPS[i * 4 + 3].load(Ordering::SeqCst),
        );
        let _ = match op {
            1 => writeln!(err, "alloc {size} {align}"),
            2 => writeln!(err, "alloc_zeroed {size} {align}"),
            3 => writeln!(err, "dealloc {size} {align}"),
            _ => writeln!(err, "realloc {size} {align} {new}"),
        };
    }
    let _ = writeln!(err, "main-end calls={} ok={}", end - begin, ok);
    drop(err);
    if !ok {
        std::process::exit(86);
    }
}
