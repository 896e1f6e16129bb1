//! Whether a uprobe sits in the allocator while a benchmark's routine runs.
//!
//! A uprobe is an `int3` the kernel writes into the probed process's own copy of the
//! code, so a process can see its probes: the first bytes of `malloc` and `free` in
//! memory differ from those in the C library's file. The `probe_watch_*` examples read
//! the file's bytes at the start of `main`, and every call of a watched routine compares
//! memory with them. A harness that times with nothing attached shows exactly one probed
//! call per benchmark (its counted iteration), however many iterations it timed; one
//! that left its probes attached, or runs under `memtrack run`, shows every call probed.

use std::{
    os::unix::fs::FileExt,
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

/// Bytes compared from the start of each function: the probes sit on one of a
/// function's first instructions (`memtrack report --probes` shows their offsets).
const WINDOW: usize = 64;

/// The functions watched: every tracker probes both.
const FUNCTIONS: [&std::ffi::CStr; 2] = [c"malloc", c"free"];

/// The watched functions' addresses and their first bytes as the file holds them.
struct Clean {
    functions: Vec<(*const u8, [u8; WINDOW])>,
}

// SAFETY: the pointers are code addresses, only read.
unsafe impl Send for Clean {}
// SAFETY: as above.
unsafe impl Sync for Clean {}

static CLEAN: OnceLock<Clean> = OnceLock::new();

/// The `WINDOW` bytes of code at `address`.
fn code_at(address: *const u8) -> [u8; WINDOW] {
    // SAFETY: `address` is a function's first byte in the C library's mapped, readable
    // text, checked by `file_bytes` to lie `WINDOW` bytes inside one mapping. Read
    // volatile: the kernel changes these bytes behind the compiler's back.
    std::array::from_fn(|i| unsafe { std::ptr::read_volatile(address.add(i)) })
}

/// The `WINDOW` bytes the file mapped at `address` holds there, found through
/// /proc/self/maps (start-end perms offset dev inode path).
fn file_bytes(address: usize) -> [u8; WINDOW] {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let hex = |s: &str| usize::from_str_radix(s, 16).expect("a hexadecimal field of maps");
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some((start, end)) = fields[0].split_once('-') else {
            continue;
        };
        let (start, end) = (hex(start), hex(end));
        if !(start..end).contains(&address) {
            continue;
        }
        assert!(
            address + WINDOW <= end,
            "{address:#x}: fewer than {WINDOW} bytes in {line}"
        );
        let path = fields
            .get(5)
            .unwrap_or_else(|| panic!("{address:#x}: no file in {line}"));
        let offset = (address - start + hex(fields[2])) as u64;
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        let mut bytes = [0u8; WINDOW];
        file.read_exact_at(&mut bytes, offset)
            .unwrap_or_else(|e| panic!("read {path} at {offset:#x}: {e}"));
        return bytes;
    }
    panic!("{address:#x} is in no mapping of /proc/self/maps:\n{maps}")
}

/// Finds the watched functions and reads their bytes from the C library's file. Call
/// first thing in `main`.
pub fn snapshot() {
    let functions = FUNCTIONS
        .iter()
        .map(|name| {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the
            // objects this process loaded, which include the C library.
            let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            assert!(!address.is_null(), "dlsym({name:?}) found nothing");
            (address as *const u8, file_bytes(address as usize))
        })
        .collect();
    assert!(
        CLEAN.set(Clean { functions }).is_ok(),
        "probe_watch::snapshot called twice"
    );
}

/// Whether any watched function's bytes in memory differ from its file's now: a probe
/// sits there.
fn probed_now() -> bool {
    let clean = CLEAN
        .get()
        .expect("probe_watch::snapshot was not called first");
    clean
        .functions
        .iter()
        .any(|(address, bytes)| code_at(*address) != *bytes)
}

/// Calls of one routine, and how many of them ran with a probe in the allocator.
pub struct Watch {
    /// The routine's name, as printed.
    pub name: &'static str,
    calls: AtomicU64,
    probed: AtomicU64,
}

impl Watch {
    /// A watch with no calls yet.
    pub const fn new(name: &'static str) -> Watch {
        Watch {
            name,
            calls: AtomicU64::new(0),
            probed: AtomicU64::new(0),
        }
    }

    /// Records one call of the routine (call it inside the routine).
    pub fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if probed_now() {
            self.probed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The line `NAME: probed P of C calls` the tests read (printed last by `main`).
    pub fn line(&self) -> String {
        format!(
            "{}: probed {} of {} calls",
            self.name,
            self.probed.load(Ordering::Relaxed),
            self.calls.load(Ordering::Relaxed)
        )
    }
}
