//! The calling thread of a tracked process, as one program run sees it: its process's
//! slot (found from the thread's cached hint or the `SLOTS` map), its own state (task
//! storage), and whether its calls are counted now.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use memtrack_common::{PidStats, ProcessSlot, ThreadState, global};

use crate::{
    global_count::global_bump,
    maps::{SLOTS, STATS, THREADS, TRACKED},
};

/// The calling thread's `pid_tgid` (tgid in the high half, thread id in the low half).
#[inline(always)]
pub fn current() -> u64 {
    bpf_get_current_pid_tgid()
}

/// The process id (tgid) of a `pid_tgid`.
#[inline(always)]
pub fn tgid_of(pid_tgid: u64) -> u32 {
    (pid_tgid >> 32) as u32
}

/// The slot of process `tgid` and what it holds, when the process is tracked: `hint`
/// first (a thread's cached slot; an array read, no map call), else [`find_slot`].
#[inline(always)]
fn slot_of(tgid: u32, hint: u32) -> Option<(u32, ProcessSlot)> {
    if let Some(owner) = TRACKED.get(hint)
        && owner.tgid == tgid
    {
        return Some((hint, *owner));
    }
    find_slot(tgid)
}

/// The slot of process `tgid` from the `SLOTS` map, and what it holds, when the process
/// owns it.
#[inline(always)]
fn find_slot(tgid: u32) -> Option<(u32, ProcessSlot)> {
    // SAFETY: plain u32 value read once.
    let slot = unsafe { *SLOTS.get(&tgid)? };
    let owner = *TRACKED.get(slot)?;
    if owner.tgid == tgid {
        Some((slot, owner))
    } else {
        None
    }
}

/// One program run's view of the calling thread of a tracked process.
pub struct Thread {
    /// The thread's `pid_tgid`.
    pub pid_tgid: u64,
    /// Its own state (task storage: only this thread reads or writes it).
    pub state: *mut ThreadState,
    /// Its process's slot in `TRACKED` and `STATS`.
    pub slot: u32,
    /// Whether its calls are counted now.
    pub counted: bool,
}

impl Thread {
    /// The calling thread, if its process is tracked; with `create`, its state is made
    /// at its first call (return probes and the unwinder never create: a thread without
    /// state has no call in progress). A new slot generation (the counters were reset)
    /// clears the call in progress, the last release and the deferred deletion.
    #[inline(always)]
    pub fn current(pid_tgid: u64, create: bool) -> Option<Thread> {
        let state = THREADS.current(create);
        if create && state.is_none() {
            global_bump(global::THREAD_STATE_FAILED);
        }
        let state = state?;
        // SAFETY (whole block): the entry is this thread's own, valid for the run.
        unsafe {
            let (slot, owner) = slot_of(tgid_of(pid_tgid), (*state).slot)?;
            (*state).slot = slot;
            (*state).pid_tgid = pid_tgid;
            if (*state).generation != owner.generation {
                (*state).generation = owner.generation;
                (*state).pending.depth = 0;
                // Field by field: a whole-struct store compiles to a byte-wise memset
                // subprogram, which the verifier walks again at every call site.
                let m = &raw mut (*state).mark;
                core::ptr::write_volatile(&raw mut (*m).ptr, 0);
                core::ptr::write_volatile(&raw mut (*m).func, 0);
                core::ptr::write_volatile(&raw mut (*m).entry_sp, 0);
                core::ptr::write_volatile(&raw mut (*state).released, 0);
            }
            Some(Thread {
                pid_tgid,
                state,
                slot,
                counted: owner.state.counts(pid_tgid as u32),
            })
        }
    }

    /// The process id.
    #[inline(always)]
    pub fn tgid(&self) -> u32 {
        tgid_of(self.pid_tgid)
    }

    /// The process's counters (`None`, counted in GLOBAL, cannot happen for a slot
    /// below the array's size).
    #[inline(always)]
    pub fn stats(&self) -> Option<*mut PidStats> {
        let stats = STATS.get_ptr_mut(self.slot);
        if stats.is_none() {
            global_bump(global::MISSING_STATS);
        }
        stats
    }

    /// The counters when the thread's calls are counted now.
    #[inline(always)]
    pub fn counted_stats(&self) -> Option<*mut PidStats> {
        if self.counted { self.stats() } else { None }
    }
}

/// Whether a process that is not known per thread (the syscall counter runs for every
/// thread on the machine, and must not create state for them) is counted now, and its
/// counters.
#[inline(always)]
pub fn counted_process_stats(pid_tgid: u64) -> Option<*mut PidStats> {
    counted_process(pid_tgid).map(|(_, stats)| stats)
}

/// [`counted_process_stats`] with the process's slot.
#[inline(always)]
pub fn counted_process(pid_tgid: u64) -> Option<(u32, *mut PidStats)> {
    let (slot, owner) = find_slot(tgid_of(pid_tgid))?;
    if !owner.state.counts(pid_tgid as u32) {
        return None;
    }
    Some((slot, STATS.get_ptr_mut(slot)?))
}

/// The slot of process `tgid` and its counters, when the process is tracked and
/// counted now (any of its threads: for events no thread of it caused, as the
/// resident memory's).
#[inline(always)]
pub fn counted_slot(tgid: u32) -> Option<(u32, *mut PidStats)> {
    let (slot, owner) = find_slot(tgid)?;
    counted_at(slot, owner)
}

/// The counters of the process in `slot` (owned as `owner` says) when it is counted
/// now.
#[inline(always)]
pub fn counted_at(slot: u32, owner: ProcessSlot) -> Option<(u32, *mut PidStats)> {
    if owner.state.enabled == 0 {
        return None;
    }
    Some((slot, STATS.get_ptr_mut(slot)?))
}
