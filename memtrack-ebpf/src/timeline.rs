//! The timeline's kernel half (memtrack-common's `timeline` says the design): each
//! change of a tracked process's live heap bytes, mapped bytes or resident memory goes
//! into the bucket of its time on this CPU; an event in a later bucket hands the
//! finished one to user space through `TIMELINE_RING` first.
//!
//! Off (`TIMELINE_ON` 0, a read-only global the loader sets), the verifier prunes all of
//! it. On, an event costs one clock read and one per-CPU array lookup (both inlined or
//! a plain helper), plus a ring buffer write once per bucket.

use aya_ebpf::helpers::bpf_ktime_get_ns;
use memtrack_common::{
    PidStats,
    timeline::{TimelineCpu, TimelineRecord, seen, shift_of},
};

use crate::{
    atomics,
    maps::{TIMELINE, TIMELINE_RING, TRACKED},
};

/// 1 when the timeline is kept, else 0 (`memtrack_common::TIMELINE_GLOBAL`).
#[unsafe(no_mangle)]
static TIMELINE_ON: u32 = 0;

/// Whether the timeline is kept (see [`TIMELINE_ON`]).
#[inline(always)]
pub fn on() -> bool {
    // SAFETY: reading a global; volatile keeps the compiler from folding the 0.
    unsafe { core::ptr::read_volatile(&TIMELINE_ON) != 0 }
}

/// This CPU's bucket of the process in `slot` (owned by `tgid`) for now, opened if the
/// one it holds is of another bucket or generation (a finished one of the same
/// generation is handed to user space first, its loss counted in `stats`), and how far
/// into the scope now is, in ns.
#[inline(always)]
fn bucket(slot: u32, tgid: u32, stats: *mut PidStats) -> Option<(*mut TimelineCpu, u64)> {
    let owner = TRACKED.get(slot)?;
    if owner.tgid != tgid {
        return None;
    }
    let (generation, origin) = (owner.generation, owner.origin_ns);
    // SAFETY: a helper without arguments.
    let age = unsafe { bpf_ktime_get_ns() }.saturating_sub(origin);
    let shift = shift_of(age);
    let index = age >> shift;
    let cpu = TIMELINE.get_ptr_mut(slot)?;
    // SAFETY (whole block): cpu points into this CPU's entry of a live map value (uprobe
    // and tracepoint programs run with migration disabled).
    unsafe {
        if (*cpu).generation != generation || (*cpu).shift != shift || (*cpu).index != index {
            if (*cpu).generation == generation && (*cpu).seen != 0 {
                // Written in place in the ring buffer: a record built on the stack
                // would not fit beside the global functions' frames (512 bytes).
                match TIMELINE_RING.reserve::<TimelineRecord>(0) {
                    Some(mut entry) => {
                        let record = entry.as_mut_ptr();
                        (*record).tgid = tgid;
                        (*record)._pad = 0;
                        core::ptr::copy_nonoverlapping(cpu, &raw mut (*record).bucket, 1);
                        entry.submit(0);
                    }
                    None => atomics::add(&raw mut (*stats).timeline_lost_buckets, 1),
                }
            }
            (*cpu).generation = generation;
            (*cpu).seen = 0;
            (*cpu).shift = shift;
            (*cpu).index = index;
        }
    }
    Some((cpu, age))
}

/// The process in `slot` (of `tgid`, counters `stats`) went from `before` to `after`
/// live heap bytes.
#[inline(always)]
pub fn heap(slot: u32, tgid: u32, stats: *mut PidStats, before: u64, after: u64) {
    if !on() {
        return;
    }
    let Some((cpu, age)) = bucket(slot, tgid, stats) else {
        return;
    };
    let (low, high) = if before < after {
        (before, after)
    } else {
        (after, before)
    };
    // SAFETY (whole block): as in `bucket`.
    unsafe {
        if (*cpu).seen & seen::HEAP == 0 {
            (*cpu).heap_min = low;
            (*cpu).heap_max = high;
            (*cpu).seen |= seen::HEAP;
        } else {
            if low < (*cpu).heap_min {
                (*cpu).heap_min = low;
            }
            if high > (*cpu).heap_max {
                (*cpu).heap_max = high;
            }
        }
        (*cpu).heap_end = after;
        (*cpu).heap_end_ns = age;
    }
}

/// The process in `slot` now has `mapped` bytes mapped by `mmap`/`brk`.
#[inline(always)]
pub fn mapped(slot: u32, tgid: u32, stats: *mut PidStats, mapped: u64) {
    if !on() {
        return;
    }
    let Some((cpu, age)) = bucket(slot, tgid, stats) else {
        return;
    };
    // SAFETY (whole block): as in `bucket`.
    unsafe {
        if (*cpu).seen & seen::MAPPED == 0 || mapped > (*cpu).mapped_max {
            (*cpu).mapped_max = mapped;
        }
        (*cpu).seen |= seen::MAPPED;
        (*cpu).mapped_end = mapped;
        (*cpu).mapped_end_ns = age;
    }
}

/// The process in `slot` now has these resident bytes: file-backed, anonymous and
/// shared-memory pages'.
#[inline(always)]
pub fn rss(slot: u32, tgid: u32, stats: *mut PidStats, file: u64, anon: u64, shmem: u64) {
    if !on() {
        return;
    }
    let Some((cpu, age)) = bucket(slot, tgid, stats) else {
        return;
    };
    let total = file.wrapping_add(anon).wrapping_add(shmem);
    // SAFETY (whole block): as in `bucket`.
    unsafe {
        if (*cpu).seen & seen::RSS == 0 || total > (*cpu).rss_max {
            (*cpu).rss_max = total;
        }
        (*cpu).seen |= seen::RSS;
        (*cpu).rss_file = file;
        (*cpu).rss_anon = anon;
        (*cpu).rss_shmem = shmem;
        (*cpu).rss_end_ns = age;
    }
}
