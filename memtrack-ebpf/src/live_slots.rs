//! The direct-mapped slots in front of the live-block hash maps (`LIVE_SLOTS`; the
//! rules both sides share are `memtrack_common::live_slot`).
//!
//! Why: a malloc+free pair kept in the hash maps makes two hash lookups (kernel function
//! calls that hash the key and walk its bucket), most of what the accounting costs above
//! the uprobes themselves. A block whose slot is free goes into the slot instead: an
//! array element the verifier inlines, found with a multiply and a mask. Only a block
//! whose slot is taken (by another live block) goes into the hash maps, as before.
//!
//! The protocol of a slot's `tag` (compare-and-swap on x86_64, whose stores are seen in
//! program order, so a plain store publishes the fields written before it):
//! - claim: `EMPTY` (taking a unit of capacity) or `FREE` (the unit it holds) or the
//!   block's own tag (an entry of this address whose release was not seen: replaced, as
//!   a hash insert would) -> `BUSY`; write tgid, generation, size, stack; store the tag;
//! - release: tag equal to the block's and tgid and generation the thread's ->
//!   compare-and-swap tag -> `FREE`: of two threads releasing one block at once, one
//!   wins, the other finds it gone (a double free, unmatched as before);
//! - the releasing thread empties its `FREE` slot (and gives its unit back) at its next
//!   call about another slot, as it deletes a hash-map tombstone (`live_maps::
//!   flush_released`); user space empties a process's slots when it forgets or resets
//!   it, and every `FREE` one.
//!
//! An address is in a slot or in the hash maps, never live in both: a claim happens at
//! the allocation's return, before the caller has the address, and replaces an entry of
//! the address in the slot; a block goes to the hash maps only when its slot holds
//! something else, which no release of that address will take. A hash-map entry of an
//! address whose block is now in its slot is a released one (a tombstone, deleted by
//! its thread) or one whose release was never seen (released while not counting): a
//! release looks at the slot first, so it finds the newer block, as the hash maps'
//! "newest first" rule does (live_maps.rs).

use memtrack_common::{LiveBlock, LiveSlot, global, live_slot};

use crate::{
    atomics,
    live_capacity::beyond_capacity,
    maps::{GLOBAL, LIVE_SLOTS},
    thread::Thread,
};

/// What a release found in the slot of its block.
pub enum Taken {
    /// The block was in its slot, and this thread released it, leaving the slot (this
    /// index) `FREE`.
    Block(LiveBlock, u32),
    /// The block was in its slot, and another thread released it first (a double free
    /// racing with the first free): nothing to release.
    Gone,
    /// The slot holds something else: the block, if live, is in the hash maps.
    NotHere,
}

/// The calling thread's slot generation (its process slot's, written this program run).
#[inline(always)]
fn generation(t: &Thread) -> u32 {
    // SAFETY: the thread state is this thread's own.
    unsafe { (*t.state).generation }
}

/// The slot of the block at `addr` of the thread's process, and the block's tag; `None`
/// when such a block never goes into a slot (no capacity beyond `LIVE`'s, or an
/// address that cannot be tagged).
#[inline(always)]
fn slot_of(t: &Thread, addr: u64) -> Option<(u32, *mut LiveSlot, u64)> {
    if beyond_capacity() == 0 {
        return None;
    }
    let tag = live_slot::tag(addr, generation(t))?;
    let index = live_slot::index(t.tgid(), addr);
    let slot = LIVE_SLOTS.get_ptr_mut(index)?;
    Some((index, slot, tag))
}

/// Whether the block in `slot` belongs to the thread's process in its current
/// generation (the tag alone holds only 16 bits of the generation, and the slot is
/// shared by every process).
#[inline(always)]
fn owned(t: &Thread, slot: *const LiveSlot) -> bool {
    // SAFETY: the slot pointer is valid for the program's run.
    unsafe {
        core::ptr::read_volatile(&raw const (*slot).tgid) == t.tgid()
            && core::ptr::read_volatile(&raw const (*slot).generation) == generation(t)
    }
}

/// Takes one unit of the capacity beyond `LIVE`'s (`global::LIVE_BEYOND_COUNT`, below
/// the capacity less what user space gave back); false when none is left.
#[inline(always)]
pub fn take_unit() -> bool {
    memtrack_take_unit() == 1
}

/// [`take_unit`], as a BPF global function (verified once, see verified_once.rs): its
/// compare-and-swap loop was walked again at each of its callers' paths, and a pair
/// whose slot is `FREE` never calls it. Returns 1 when it took a unit, else 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_take_unit() -> i32 {
    let capacity = beyond_capacity();
    if capacity == 0 {
        return 0;
    }
    let (Some(count), Some(purged)) = (
        GLOBAL.get_ptr_mut(global::LIVE_BEYOND_COUNT),
        GLOBAL.get_ptr(global::LIVE_BEYOND_PURGED),
    ) else {
        return 0;
    };
    // `None`: contended beyond the tries; the caller goes on as with none left.
    i32::from(atomics::add_below(count, atomics::load(purged), capacity) == Some(true))
}

/// Gives back one unit taken by [`take_unit`].
#[inline(always)]
pub fn give_unit() {
    if let Some(count) = GLOBAL.get_ptr_mut(global::LIVE_BEYOND_COUNT) {
        atomics::sub(count, 1);
    }
}

/// Claims the slot for the block tagged `tag`: true when the caller now owns it
/// (`BUSY`) and must publish the block.
#[inline(always)]
fn claim(t: &Thread, slot: *mut LiveSlot, tag: u64) -> bool {
    // SAFETY: the slot pointer is valid for the program's run.
    let word = unsafe { &raw mut (*slot).tag };
    match atomics::load(word) {
        live_slot::FREE => atomics::swap(word, live_slot::FREE, live_slot::BUSY),
        live_slot::EMPTY => {
            if !take_unit() {
                return false;
            }
            let claimed = atomics::swap(word, live_slot::EMPTY, live_slot::BUSY);
            if !claimed {
                give_unit();
            }
            claimed
        }
        // This process's entry of the address whose release was not seen (released
        // while not counting): the new block replaces it, keeping its unit.
        now if now == tag && owned(t, slot) => atomics::swap(word, tag, live_slot::BUSY),
        _ => false,
    }
}

/// Records `block` at `addr` in its slot when the slot is free: true when it did (the
/// caller then puts it in no hash map). Called after `live_maps::flush_released`, so a
/// `FREE` slot the thread left behind elsewhere has given its unit back. Inlined (in
/// `memtrack_make_live`): as a global function of its own it verified no fewer
/// instructions, and cost every allocation a BPF-to-BPF call, whose return goes
/// through this CPU's return thunk.
#[inline(always)]
pub fn put(t: &Thread, addr: u64, block: &LiveBlock) -> bool {
    let Some((index, slot, tag)) = slot_of(t, addr) else {
        return false;
    };
    if !claim(t, slot, tag) {
        return false;
    }
    // SAFETY (whole block): the slot is this thread's while it is BUSY; the thread
    // state is this thread's own.
    unsafe {
        core::ptr::write_volatile(&raw mut (*slot).tgid, t.tgid());
        core::ptr::write_volatile(&raw mut (*slot).generation, generation(t));
        core::ptr::write_volatile(&raw mut (*slot).size, block.size);
        core::ptr::write_volatile(&raw mut (*slot).stack, block.stack);
        // Published last: a reader that sees the tag sees the fields.
        core::ptr::write_volatile(&raw mut (*slot).tag, tag);
        // The FREE slot this thread left is taken again (its unit with it).
        if (*t.state).released == live_slot::RELEASED_SLOT | u64::from(index) {
            (*t.state).released = 0;
        }
    }
    true
}

/// Releases the block at `addr` from its slot, if it is there: its size and stack are
/// read before the compare-and-swap that decides which of two racing releases wins.
/// The slot is left `FREE`, for the caller to remember as the thread's last release.
#[inline(always)]
pub fn take(t: &Thread, addr: u64) -> Taken {
    let Some((index, slot, tag)) = slot_of(t, addr) else {
        return Taken::NotHere;
    };
    // SAFETY (whole block): the slot pointer is valid for the program's run.
    unsafe {
        let word = &raw mut (*slot).tag;
        if atomics::load(word) != tag || !owned(t, slot) {
            return Taken::NotHere;
        }
        let size = core::ptr::read_volatile(&raw const (*slot).size);
        let stack = core::ptr::read_volatile(&raw const (*slot).stack);
        if !atomics::swap(word, tag, live_slot::FREE) {
            return Taken::Gone;
        }
        let block = LiveBlock {
            size,
            stack,
            _pad: 0,
        };
        Taken::Block(block, index)
    }
}

/// Whether the block at `addr` of the thread's process belongs in the slot that
/// `released` (a `ThreadState::released` with `RELEASED_SLOT`) names.
#[inline(always)]
pub fn same_slot(t: &Thread, released: u64, addr: u64) -> bool {
    u64::from(live_slot::index(t.tgid(), addr)) == released & u64::from(live_slot::LEN - 1)
}

/// Empties the `FREE` slot that `released` (a `ThreadState::released` with
/// `RELEASED_SLOT`) names, which this thread left: its unit goes back. Another thread
/// may have taken the slot meanwhile (then it is not `FREE`, or `FREE` again holding
/// the unit this swap gives back: one unit, one give-back, whoever empties it).
#[inline(always)]
pub fn empty(released: u64) {
    let index = (released & u64::from(live_slot::LEN - 1)) as u32;
    if let Some(slot) = LIVE_SLOTS.get_ptr_mut(index) {
        // SAFETY: the slot pointer is valid for the program's run.
        let word = unsafe { &raw mut (*slot).tag };
        if atomics::swap(word, live_slot::FREE, live_slot::EMPTY) {
            give_unit();
        }
    }
}
