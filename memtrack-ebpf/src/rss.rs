//! The tracked processes' resident memory, from the kernel's `kmem:rss_stat` tracepoint:
//! the kernel emits it whenever one of a process's RSS counters changes (a page faulted
//! in, unmapped, swapped), with that counter's exact new value in bytes (the kernel sums
//! its per-CPU parts for the tracepoint). The program keeps each tracked process's
//! values (`RSS_NOW`) and puts their sum into the timeline (timeline.rs).
//!
//! The tracepoint fires for every process on the machine while it is attached; for one
//! that is not tracked the program returns after one hash lookup. A change the process
//! makes itself (`curr`) names it by the current task; one another task makes (reclaim,
//! the process's exit) only by its address space's `mm_id`, which the program learns
//! from the process's own changes (`MM_SLOTS`).

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use memtrack_common::timeline::rss_member;

use crate::{
    maps::{MM_SLOTS, RSS_NOW, TRACKED},
    thread::{self, current},
    timeline,
};

/// Byte offsets of `rss_stat`'s fields in its trace record (its `format` in tracefs:
/// after the 8 bytes of common fields).
mod field {
    pub const MM_ID: usize = 8;
    pub const CURR: usize = 12;
    pub const MEMBER: usize = 16;
    pub const SIZE: usize = 24;
}

/// `kmem:rss_stat(mm_id, curr, member, size)`. Its name is
/// `memtrack_common::program_names::RSS_STAT`.
#[tracepoint]
pub fn rss_stat(ctx: TracePointContext) -> u32 {
    if !timeline::on() {
        return 0;
    }
    // SAFETY (the reads): the offsets are the record's own fields, read with the helper.
    let read = unsafe {
        (
            ctx.read_at::<u32>(field::MM_ID),
            ctx.read_at::<u32>(field::CURR),
            ctx.read_at::<i32>(field::MEMBER),
            ctx.read_at::<i64>(field::SIZE),
        )
    };
    let (Ok(mm_id), Ok(curr), Ok(member), Ok(size)) = read else {
        return 0;
    };
    let member = member as u32 as usize;
    if member > rss_member::SHMEM {
        return 0;
    }
    let (slot, tgid, stats) = if curr != 0 {
        let tgid = thread::tgid_of(current());
        let Some((slot, stats)) = thread::counted_slot(tgid) else {
            return 0;
        };
        (slot, tgid, stats)
    } else {
        // SAFETY: a plain u32 value read once.
        let Some(slot) = (unsafe { MM_SLOTS.get(&mm_id) }).copied() else {
            return 0;
        };
        let Some(owner) = TRACKED.get(slot) else {
            return 0;
        };
        let Some((slot, stats)) = thread::counted_at(slot, *owner) else {
            return 0;
        };
        (slot, owner.tgid, stats)
    };
    let Some(now) = RSS_NOW.get_ptr_mut(slot) else {
        return 0;
    };
    // SAFETY (whole block): now points into a live map value; the stores are plain (the
    // tracepoint of one address space runs under its page table lock or for its own
    // thread, and a value written twice at once is one of the two).
    let (file, anon, shmem) = unsafe {
        if (*now).tgid != tgid {
            (*now).tgid = tgid;
            (*now).mm_id = 0;
            (*now).bytes = [0; 4];
        }
        if curr != 0 && (*now).mm_id != mm_id {
            (*now).mm_id = mm_id;
            let _ = MM_SLOTS.insert(&mm_id, &slot, 0);
        }
        let bytes = &raw mut (*now).bytes;
        if member < 4 {
            (*bytes)[member] = size.max(0) as u64;
        }
        (
            (*bytes)[rss_member::FILE],
            (*bytes)[rss_member::ANON],
            (*bytes)[rss_member::SHMEM],
        )
    };
    timeline::rss(slot, tgid, stats, file, anon, shmem);
    0
}
