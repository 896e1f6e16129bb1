//! The user-space half of the live slots (`LIVE_SLOTS`, memtrack-ebpf's live_slots.rs;
//! the shared rules are `memtrack_common::live_slot`): a mapping of the array, through
//! which the engine empties a process's slots when it forgets or resets the process.
//!
//! Why a mapping: the array holds 4,096 slots, and reading them with one syscall each
//! would cost milliseconds; a scan of the mapping costs tens of microseconds. The
//! programs change a slot's tag only by compare-and-swap (and the store that publishes a
//! claimed slot), so this side empties a slot with a compare-and-swap too: one that the
//! programs changed meanwhile is left alone.

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd},
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
};

use memtrack_common::{LiveSlot, live_slot};

/// The kernel's `LIVE_SLOTS` array, mapped shared and writable.
pub(crate) struct LiveSlots {
    /// The first slot.
    base: NonNull<LiveSlot>,
    /// Slots mapped ([`live_slot::LEN`]).
    len: usize,
}

// SAFETY: the mapping is shared memory that the kernel keeps for as long as it is
// mapped; every access goes through atomics or volatile reads.
unsafe impl Send for LiveSlots {}

impl LiveSlots {
    /// Maps the array whose descriptor is `fd` (made `BPF_F_MMAPABLE`, of
    /// [`live_slot::LEN`] slots). The mapping keeps the map alive by itself.
    pub(crate) fn map(fd: BorrowedFd<'_>) -> io::Result<Self> {
        let len = live_slot::LEN as usize;
        let bytes = len * size_of::<LiveSlot>();
        // SAFETY: a new shared mapping of the map's whole value area (a page multiple:
        // 128 KiB), which the kernel allows for a BPF_F_MMAPABLE array.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(addr.cast()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(LiveSlots { base, len })
    }

    /// Slot `i`'s tag, as an atomic (the programs change it with locked instructions).
    fn tag(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.len);
        // SAFETY: i is below len; the tag is the first, 8-byte aligned field of a slot
        // of the live mapping, only changed atomically.
        unsafe { AtomicU64::from_ptr(&raw mut (*self.base.as_ptr().add(i)).tag) }
    }

    /// Slot `i`'s (tgid, generation), as written before its tag was published.
    fn owner(&self, i: usize) -> (u32, u32) {
        // SAFETY: as for `tag`; plain reads of fields the programs write before the tag.
        unsafe {
            let slot = self.base.as_ptr().add(i);
            (
                std::ptr::read_volatile(&raw const (*slot).tgid),
                std::ptr::read_volatile(&raw const (*slot).generation),
            )
        }
    }

    /// Empties every slot holding a block of `pid` (but those of generation `keep`: the
    /// blocks recorded since a reset) and every released slot (`FREE`) of any process:
    /// those a thread left behind and forgot (its process was reset) would otherwise
    /// keep their unit of capacity until a block takes the slot again. Returns the
    /// units given back, which the caller adds to `global::LIVE_BEYOND_PURGED`.
    pub(crate) fn purge(&self, pid: u32, keep: Option<u32>) -> u64 {
        let mut emptied = 0;
        for i in 0..self.len {
            let tag = self.tag(i).load(Ordering::Acquire);
            let ours = match tag {
                live_slot::EMPTY | live_slot::BUSY => continue,
                live_slot::FREE => true,
                _ => {
                    let (tgid, generation) = self.owner(i);
                    tgid == pid && Some(generation) != keep
                }
            };
            // A tag changed meanwhile is a slot the programs took or released: theirs.
            if ours
                && self
                    .tag(i)
                    .compare_exchange(tag, live_slot::EMPTY, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                emptied += 1;
            }
        }
        emptied
    }
}

impl Drop for LiveSlots {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of that size, unmapped once.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len * size_of::<LiveSlot>());
        }
    }
}
