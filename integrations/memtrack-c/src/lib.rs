//! memtrack's C ABI (`include/memtrack.h`): benchmark regions of `memtrack run` for any
//! language that can call C.
//!
//! A program running under `memtrack run -- PROGRAM` names its current benchmark, starts
//! a region, runs the code to measure and stops the region; memtrack counts every
//! allocation call of the whole process in between, exactly, and the stop returns those
//! counters (the same ones memtrack writes into the process's result file). Outside
//! `memtrack run` every call returns [`MEMTRACK_INACTIVE`] at once and allocates nothing.
//!
//! Built as `libmemtrack.so` and `libmemtrack.a` and installed with a pkg-config file by
//! `scripts/install-c-api.sh PREFIX`; the header documents every call. This crate speaks
//! fifo-protocol's version 2 through one [`fifo_protocol::FifoClient`] per process.
//!
//! Allocation: `memtrack_region_start` and `memtrack_region_stop` allocate and free
//! nothing on success, nor when refused (messages go to a fixed per-thread buffer), so
//! neither the calls of the thread that measures nor those of other threads meanwhile are
//! counted; the first call of the process (which connects) and the calls that carry text
//! (`memtrack_set_integration`, `memtrack_current_benchmark`, `memtrack_name_region`) do
//! allocate: make them outside regions.
#![warn(missing_docs)]

mod session;
mod status;

use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use fifo_protocol::RegionCounters;

pub use status::Status;

/// Done ([`Status::Ok`]).
pub const MEMTRACK_OK: c_int = Status::Ok as c_int;
/// Not under `memtrack run`: nothing done ([`Status::Inactive`]).
pub const MEMTRACK_INACTIVE: c_int = Status::Inactive as c_int;

/// What memtrack counted in one region, as `struct memtrack_counters` in `memtrack.h`.
/// Sizes are requested sizes in bytes, the rest counts; see
/// [`fifo_protocol::RegionCounters`] for each field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemtrackCounters {
    /// The region's id, for `memtrack_name_region`.
    pub region: u64,
    /// Blocks handed out.
    pub alloc_calls: u64,
    /// Blocks released (only blocks allocated inside the region).
    pub free_calls: u64,
    /// Bytes of the blocks handed out.
    pub bytes_allocated: u64,
    /// Bytes of the blocks released.
    pub bytes_freed: u64,
    /// Blocks still live at the region's end.
    pub live_blocks: u64,
    /// Bytes of those blocks (the region's net heap growth).
    pub live_bytes: u64,
    /// Highest live bytes at any instant of the region.
    pub peak_live_bytes: u64,
    /// Allocation calls that failed.
    pub failed_allocs: u64,
    /// Releases of blocks not allocated inside the region.
    pub unmatched_frees: u64,
    /// Events not accounted exactly; 0 means the counters are exact.
    pub lost_events: u64,
}

// memtrack.h's struct: eleven uint64_t, nothing else.
const _: () = assert!(std::mem::size_of::<MemtrackCounters>() == 11 * 8);

impl From<RegionCounters> for MemtrackCounters {
    fn from(c: RegionCounters) -> Self {
        MemtrackCounters {
            region: c.region,
            alloc_calls: c.alloc_calls,
            free_calls: c.free_calls,
            bytes_allocated: c.bytes_allocated,
            bytes_freed: c.bytes_freed,
            live_blocks: c.live_blocks,
            live_bytes: c.live_bytes,
            peak_live_bytes: c.peak_live_bytes,
            failed_allocs: c.failed_allocs,
            unmatched_frees: c.unmatched_frees,
            lost_events: c.lost_events,
        }
    }
}

/// Runs `f`, turning a panic (a bug) into [`Status::Runner`] instead of an abort of the
/// host program; clears the thread's message on success.
fn guarded(f: impl FnOnce() -> Status) -> c_int {
    let status = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        status::fail(
            Status::Runner,
            format_args!("internal error in libmemtrack (a panic); please report it"),
        )
    });
    if status == Status::Ok {
        status::clear();
    }
    status.code()
}

/// Whether this process runs under `memtrack run` and its runner answers: 1 if so, 0 if
/// not (outside `memtrack run`, or the runner could not be reached or speaks another
/// protocol version: `memtrack_last_error` says which).
#[unsafe(no_mangle)]
pub extern "C" fn memtrack_is_tracked() -> c_int {
    let status = guarded(|| session::with_session(|_| Status::Ok));
    c_int::from(status == MEMTRACK_OK)
}

/// Names the integration (e.g. "memtrack-google-benchmark") and its version, recorded in
/// memtrack's `MarkerResult.msgpack`. Optional.
///
/// # Safety
/// `name` and `version` are NULL or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memtrack_set_integration(
    name: *const c_char,
    version: *const c_char,
) -> c_int {
    guarded(|| {
        session::with_session(|s| {
            // SAFETY: the caller's contract.
            let texts = unsafe {
                (
                    session::utf8(name, "name"),
                    session::utf8(version, "version"),
                )
            };
            match texts {
                (Ok(name), Ok(version)) => s.set_integration(name, version),
                (Err(status), _) | (_, Err(status)) => status,
            }
        })
    })
}

/// Names the benchmark the next region measures.
///
/// # Safety
/// `uri` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memtrack_current_benchmark(uri: *const c_char) -> c_int {
    guarded(|| {
        session::with_session(|s| {
            // SAFETY: the caller's contract.
            match unsafe { session::utf8(uri, "uri") } {
                Ok(uri) => s.current_benchmark(uri),
                Err(status) => status,
            }
        })
    })
}

/// Starts a region: memtrack counts the process's allocations from the runner's handling
/// of this call on.
#[unsafe(no_mangle)]
pub extern "C" fn memtrack_region_start() -> c_int {
    guarded(|| session::with_session(session::Session::start))
}

/// Stops the region this thread started and writes its counters to `*out` (if `out` is
/// not NULL).
///
/// # Safety
/// `out` is NULL or points to a writable `struct memtrack_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memtrack_region_stop(out: *mut MemtrackCounters) -> c_int {
    guarded(|| {
        session::with_session(|s| {
            let mut counters = RegionCounters::default();
            let status = s.stop(&mut counters);
            if status == Status::Ok && !out.is_null() {
                // SAFETY: the caller's contract.
                unsafe { out.write(counters.into()) };
            }
            status
        })
    })
}

/// Renames closed region `region` (from its counters) of this process to `uri`.
///
/// # Safety
/// `uri` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memtrack_name_region(region: u64, uri: *const c_char) -> c_int {
    guarded(|| {
        session::with_session(|s| {
            // SAFETY: the caller's contract.
            match unsafe { session::utf8(uri, "uri") } {
                Ok(uri) => s.name_region(region, uri),
                Err(status) => status,
            }
        })
    })
}

/// The calling thread's message about its last call that did not return `MEMTRACK_OK`
/// ("" after one that did), NUL-terminated UTF-8, valid until the thread's next call.
#[unsafe(no_mangle)]
pub extern "C" fn memtrack_last_error() -> *const c_char {
    status::last_message()
}

/// The name of status `status` ("MEMTRACK_ERR_REJECTED", ...), a static string.
#[unsafe(no_mangle)]
pub extern "C" fn memtrack_status_name(status: c_int) -> *const c_char {
    Status::name(status).as_ptr()
}

/// The protocol version this library speaks with memtrack's runner.
#[unsafe(no_mangle)]
pub extern "C" fn memtrack_protocol_version() -> u64 {
    fifo_protocol::PROTOCOL_VERSION
}
