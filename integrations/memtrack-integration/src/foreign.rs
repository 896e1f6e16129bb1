//! Breakpoints in this process's allocator that are not memtrack's: another tracer's
//! uprobes (a memory profiler that probes every process on the machine, `perf probe`,
//! bpftrace) or a debugger's. Each makes every call of the function trap into the
//! kernel, so a harness that times meanwhile times the trap too: its timings are not
//! honest, and it should say so beside them.
//!
//! A uprobe or a debugger's breakpoint is an `int3` (byte `0xcc`) written into the
//! process's own copy of the code, so the process can see it: the first bytes of
//! `malloc`, `free`, `calloc` and `realloc` in memory are compared with those the mapped
//! file holds. Only meaningful while memtrack itself has no probe in the process: the
//! integrations look after the counted iteration's tracker is closed (which waits until
//! the kernel removed its probes), or when they do not count at all.

use std::{os::unix::fs::FileExt, path::PathBuf, sync::OnceLock};

/// Bytes compared from the start of each function: memtrack's probes, like most
/// tracers', sit on one of a function's first instructions.
const WINDOW: usize = 64;

/// The functions looked at.
const FUNCTIONS: [(&str, &std::ffi::CStr); 4] = [
    ("malloc", c"malloc"),
    ("free", c"free"),
    ("calloc", c"calloc"),
    ("realloc", c"realloc"),
];

/// A breakpoint found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignBreakpoint {
    /// The function: `malloc`.
    pub function: &'static str,
    /// The object it lies in, as mapped: `/usr/lib/x86_64-linux-gnu/libc.so.6`.
    pub object: PathBuf,
    /// Its byte offset from the function's first byte.
    pub offset: usize,
}

impl std::fmt::Display for ForeignBreakpoint {
    /// `malloc+0x4 in /usr/lib/x86_64-linux-gnu/libc.so.6`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}+{:#x} in {}",
            self.function,
            self.offset,
            self.object.display()
        )
    }
}

/// One function: its address and what the file holds there.
struct Clean {
    function: &'static str,
    address: *const u8,
    object: PathBuf,
    bytes: [u8; WINDOW],
}

// SAFETY: the pointers are code addresses, only read.
unsafe impl Send for Clean {}
// SAFETY: as above.
unsafe impl Sync for Clean {}

/// The functions' file bytes, read once (None: a function not found or not readable).
fn clean() -> &'static [Clean] {
    static CLEAN: OnceLock<Vec<Clean>> = OnceLock::new();
    CLEAN.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        FUNCTIONS
            .iter()
            .filter_map(|(function, name)| {
                // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the
                // objects this process loaded.
                let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
                if address.is_null() {
                    return None;
                }
                let (object, bytes) = file_bytes(&maps, address as usize)?;
                Some(Clean {
                    function,
                    address: address as *const u8,
                    object,
                    bytes,
                })
            })
            .collect()
    })
}

/// The object mapped at `address` (from /proc/self/maps: start-end perms offset dev
/// inode path) and the `WINDOW` bytes it holds there; None when the window leaves the
/// mapping or the file cannot be read.
fn file_bytes(maps: &str, address: usize) -> Option<(PathBuf, [u8; WINDOW])> {
    let hex = |s: &str| usize::from_str_radix(s, 16).ok();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = fields.first()?.split_once('-')?;
        let (start, end) = (hex(start)?, hex(end)?);
        if !(start..end).contains(&address) {
            continue;
        }
        if address + WINDOW > end {
            return None;
        }
        let path = PathBuf::from(fields.get(5)?);
        let offset = (address - start + hex(fields.get(2)?)?) as u64;
        let mut bytes = [0u8; WINDOW];
        std::fs::File::open(&path)
            .ok()?
            .read_exact_at(&mut bytes, offset)
            .ok()?;
        return Some((path, bytes));
    }
    None
}

/// The breakpoints in the allocator now: each byte `0xcc` in memory where the file has
/// another, in the first 64 bytes of each function (the first of each function
/// only). Empty when none, or when the functions cannot be read.
pub fn foreign_breakpoints() -> Vec<ForeignBreakpoint> {
    clean()
        .iter()
        .filter_map(|c| {
            (0..WINDOW)
                .find(|&i| {
                    // SAFETY: `address` is a function's first byte in mapped, readable
                    // text, checked by `file_bytes` to lie WINDOW bytes inside one
                    // mapping. Volatile: the kernel changes these bytes behind the
                    // compiler's back.
                    let now = unsafe { std::ptr::read_volatile(c.address.add(i)) };
                    now == 0xcc && c.bytes[i] != 0xcc
                })
                .map(|offset| ForeignBreakpoint {
                    function: c.function,
                    object: c.object.clone(),
                    offset,
                })
        })
        .collect()
}

/// What a harness says beside benchmark `uri`'s timings when `found` is not empty:
/// `memtrack URI: timings not honest: the allocator holds breakpoints that are not
/// memtrack's (malloc+0x4 in ...): another tracer's uprobes or a debugger's; each
/// call traps into the kernel while HARNESS times`.
pub fn warning(uri: &str, harness: &str, found: &[ForeignBreakpoint]) -> Option<String> {
    if found.is_empty() {
        return None;
    }
    let list: Vec<String> = found.iter().map(ToString::to_string).collect();
    Some(format!(
        "memtrack {}: timings not honest: the allocator holds breakpoints that are not \
         memtrack's ({}): another tracer's uprobes or a debugger's; each call traps into \
         the kernel while {harness} times",
        memtrack::record::escape_control(uri),
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing traces this test's allocator: none found, and the functions were read.
    #[test]
    fn an_unprobed_allocator_has_no_foreign_breakpoints() {
        let names: Vec<&str> = clean().iter().map(|c| c.function).collect();
        assert_eq!(names, ["malloc", "free", "calloc", "realloc"]);
        assert_eq!(foreign_breakpoints(), []);
        assert_eq!(warning("x", "criterion", &[]), None);
        let found = [ForeignBreakpoint {
            function: "malloc",
            object: "/lib/libc.so.6".into(),
            offset: 4,
        }];
        assert_eq!(
            warning("a\nb", "criterion", &found).unwrap(),
            "memtrack a\\nb: timings not honest: the allocator holds breakpoints that are \
             not memtrack's (malloc+0x4 in /lib/libc.so.6): another tracer's uprobes or a \
             debugger's; each call traps into the kernel while criterion times"
        );
    }
}
