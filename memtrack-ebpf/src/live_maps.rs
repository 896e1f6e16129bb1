//! The live-block hash maps: where a block handed out is recorded until its release
//! (`LIVE`, and beyond it the overflow maps), the tombstones a release leaves for the
//! thread to delete later, and the live slots in front of them all (live_slots.rs) as a
//! block's first place. What the blocks count for is account.rs's.

use memtrack_common::{LiveBlock, LiveKey, PidStats, global, live_slot};

use crate::{
    atomics,
    live_capacity::{beyond_capacity, has_on_demand, more_map},
    live_slots::{self, Taken},
    maps::{GLOBAL, LIVE, LIVE_ON_DEMAND},
    thread::Thread,
};

/// `BPF_NOEXIST`: insert only if the key is absent.
const BPF_NOEXIST: u64 = 1;
/// `EEXIST`, which a refused `BPF_NOEXIST` insert returns negated.
const EEXIST: i32 = 17;
/// `E2BIG`, which an insert into a full hash map returns negated.
const E2BIG: i32 = 7;

/// The `LIVE` (and `LIVE_ON_DEMAND`) key of the block at `addr` of process `tgid`.
#[inline(always)]
fn live_key(tgid: u32, addr: u64) -> LiveKey {
    LiveKey {
        tgid,
        _pad: 0,
        addr,
    }
}

// The live blocks are in up to three maps (maps.rs says why): `LIVE`, preallocated; the
// map user space may put in `LIVE_MORE`, preallocated, once the blocks spill past
// `LIVE`; and `LIVE_ON_DEMAND`. The last two are the overflow maps: a block goes there
// only when an insert into `LIVE` finds it full, into the map in `LIVE_MORE` if there is
// one and it has room, else into `LIVE_ON_DEMAND`.
//
// Before the map in `LIVE_MORE` exists, an address is never in two maps. Entries of one
// key are only made by `put_live` for that key, which first looks in every map (in the
// overflow maps whenever they may hold an entry: `overflow_in_use`), revives or
// replaces what it finds there, inserts into `LIVE` only when none has the key, and
// into an overflow map only when `LIVE` refused that insert for being full. No two
// `put_live` calls for one key overlap: an allocation's return program runs before the
// allocator's caller sees the address, so before any release of the block and before
// the allocator can hand the address to another thread (a failed realloc restores a
// block its caller still owns). The one thing that can run on the same key meanwhile
// is the deletion of a tombstone by the thread that released it last
// (`flush_released`), which only removes, and which `put_live` waits for
// (`LiveBlock::DELETING`). So every lookup may stop at the first map that has the key.
//
// Newest first, once the map in `LIVE_MORE` exists: a program that keeps more blocks
// live than `LIVE` holds would otherwise look into two or three maps, each lookup a
// cache miss, for every new block (measured: 10% more CPU for a C++ std::map program of
// 400,000 blocks). So then a new block goes straight into the overflow maps with an
// insert that refuses an existing key (`BPF_NOEXIST`), without looking into `LIVE`
// first; `LIVE` gets a block only when the overflow maps are full. An address may then
// be in more than one map, and the maps are always searched newest first: the map in
// `LIVE_MORE`, then `LIVE_ON_DEMAND`, then `LIVE`. That order is the order of
// creation for the entries of one key: an insert into the map in `LIVE_MORE` refuses a
// key it holds, and any entry of the key in another map is older; an insert into
// `LIVE_ON_DEMAND` happens only when the map in `LIVE_MORE` does not hold the key
// (full, or `put_live` looked there), and one into `LIVE` only when no map holds it.
// So a lookup stops at the key's newest entry, which is the block the program holds
// now; an older one is hidden by it. An older entry is a tombstone (a released block
// whose deletion lost the race, harmless: its thread's deletion finds the newer entry,
// which is not its own, and leaves both) or an entry whose release was never seen
// (released while not counting, which stays live in the counts in any case). It is
// deleted with its process's entries (user space purges every map). What this changes
// for a program: a free of the address after the newer entry is gone, that is a double
// free, finds the older entry: released, it is unmatched as before; never released,
// that old block is released (counted as a free instead of an unmatched one).

// Looking into an overflow map costs a hash lookup, so they are skipped while they are
// empty: the programs count their entries in GLOBAL (`LIVE_OVERFLOW_COUNT`, raised
// before an insert and lowered after a deletion; user space counts its own deletions
// apart in `LIVE_OVERFLOW_PURGED`), so the difference is never below what they hold.
// An entry of a key was inserted before the allocator handed the key out again, so the
// `put_live` or release of that later block sees it counted. A program with fewer live
// blocks than `LIVE` holds, or one whose extra blocks were all released again, makes no
// extra lookup; a malloc+free pair never does (both find the entry in `LIVE`). The same
// count, raised by compare-and-swap only while below `LIVE_OVERFLOW_CAPACITY`, keeps
// the two overflow maps together within the capacity beyond `LIVE`'s: the maps hold
// exactly the configured number of blocks.

/// Which live-block map holds an entry (see "Newest first" above).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Home {
    /// `LIVE`.
    Live,
    /// The map in `LIVE_MORE`.
    More,
    /// `LIVE_ON_DEMAND`.
    OnDemand,
}

/// Whether either overflow map may hold entries now (two array reads, which the
/// verifier inlines; no map call).
#[inline(always)]
fn overflow_in_use() -> bool {
    beyond_capacity() != 0
        && holds_entries(global::LIVE_OVERFLOW_COUNT, global::LIVE_OVERFLOW_PURGED)
}

/// Whether the entries the programs counted in the GLOBAL slot `count`, less those user
/// space deleted (counted in the slot `purged`), are not 0: two array reads the verifier
/// inlines.
#[inline(always)]
fn holds_entries(count: u32, purged: u32) -> bool {
    let (Some(count), Some(purged)) = (GLOBAL.get_ptr(count), GLOBAL.get_ptr(purged)) else {
        // Cannot happen (the slots are below the array's size); looking is always safe.
        return true;
    };
    atomics::load(count).wrapping_sub(atomics::load(purged)) != 0
}

/// The entry of `key`, and which map holds it: the newest entry of the key, when
/// there are several (see "Newest first" above [`Home`]). Before the map in `LIVE_MORE`
/// exists: `LIVE`, then `LIVE_ON_DEMAND`; after: that map, then `LIVE_ON_DEMAND`, then
/// `LIVE`. The overflow maps only while they may hold entries.
#[inline(always)]
fn find_live(key: &LiveKey) -> Option<(*mut LiveBlock, Home)> {
    // The slot first: one array read the verifier inlines, where `overflow_in_use` is
    // two; most lookups are made before any later map exists, or with none to come.
    if let Some(more) = more_map()
        && overflow_in_use()
    {
        if let Some(v) = more.get_ptr_mut(key) {
            return Some((v, Home::More));
        }
        if let Some(v) = find_on_demand(key) {
            return Some((v, Home::OnDemand));
        }
        return LIVE.get_ptr_mut(key).map(|v| (v, Home::Live));
    }
    if let Some(v) = LIVE.get_ptr_mut(key) {
        return Some((v, Home::Live));
    }
    // No later map: the overflow entries are all `LIVE_ON_DEMAND`'s, and its own count
    // says whether it holds any (`overflow_in_use` would read two more slots to say less).
    if let Some(v) = find_on_demand(key) {
        return Some((v, Home::OnDemand));
    }
    None
}

/// The entry of `key` in `LIVE_ON_DEMAND`, while it may hold entries.
#[inline(always)]
fn find_on_demand(key: &LiveKey) -> Option<*mut LiveBlock> {
    if on_demand_in_use() {
        LIVE_ON_DEMAND.get_ptr_mut(key)
    } else {
        None
    }
}

/// Whether `LIVE_ON_DEMAND` may hold entries now (see
/// `memtrack_common::global::LIVE_ON_DEMAND_COUNT`).
#[inline(always)]
fn on_demand_in_use() -> bool {
    has_on_demand() && holds_entries(global::LIVE_ON_DEMAND_COUNT, global::LIVE_ON_DEMAND_PURGED)
}

/// Inserts `value` at `key` into `LIVE` or, when it is full, into an overflow map;
/// once the map in `LIVE_MORE` exists, into the overflow maps first (they are the
/// newest: see "Newest first" above [`Home`]) and into `LIVE` only when they are full.
#[inline(always)]
fn insert_live(key: &LiveKey, value: &LiveBlock) -> Result<(), i32> {
    let overflow = || match memtrack_insert_overflow(key, value) {
        0 => Ok(()),
        e => Err(e),
    };
    if more_map().is_some() {
        return match overflow() {
            Err(e) if e == -E2BIG => LIVE.insert(key, value, BPF_NOEXIST),
            other => other,
        };
    }
    match LIVE.insert(key, value, BPF_NOEXIST) {
        Err(e) if e == -E2BIG => overflow(),
        other => other,
    }
}

/// Inserts `value` at `key` into an overflow map (`LIVE` is full): the map in
/// `LIVE_MORE` while it has room, else `LIVE_ON_DEMAND`; counted first, within the
/// capacity beyond `LIVE`'s, which the live slots share (`-E2BIG` beyond it, as from a
/// full map). A BPF global function
/// (verified once, see verified_once.rs): inlined, its compare-and-swap loop was walked
/// again in every try of [`put_live`], which doubled the return program's verification.
/// Returns 0, or the failed insert's negative error.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_insert_overflow(key: *const LiveKey, value: *const LiveBlock) -> i32 {
    if key.is_null() || value.is_null() {
        return -E2BIG;
    }
    // SAFETY: both point to whole values (the verifier checked their sizes at the call).
    let (key, value) = unsafe { (&*key, &*value) };
    match insert_overflow(key, value) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// See [`memtrack_insert_overflow`].
#[inline(always)]
fn insert_overflow(key: &LiveKey, value: &LiveBlock) -> Result<(), i32> {
    // No unit left (or contended beyond the tries): counted as a lost event by the
    // caller, as a full map is.
    if !live_slots::take_unit() {
        return Err(-E2BIG);
    }
    let Some(count) = GLOBAL.get_ptr_mut(global::LIVE_OVERFLOW_COUNT) else {
        live_slots::give_unit();
        return Err(-E2BIG);
    };
    atomics::add(count, 1);
    let mut inserted = Err(-E2BIG);
    if let Some(more) = more_map() {
        inserted = more.insert(key, value, BPF_NOEXIST);
    }
    if matches!(inserted, Err(e) if e == -E2BIG) && has_on_demand() {
        let on_demand = GLOBAL.get_ptr_mut(global::LIVE_ON_DEMAND_COUNT);
        if let Some(c) = on_demand {
            atomics::add(c, 1);
        }
        inserted = LIVE_ON_DEMAND.insert(key, value, BPF_NOEXIST);
        if inserted.is_err()
            && let Some(c) = on_demand
        {
            atomics::sub(c, 1);
        }
    }
    if inserted.is_err() {
        atomics::sub(count, 1);
        live_slots::give_unit();
    }
    inserted
}

/// Deletes the entry of `key` from `home` (an overflow map's entry uncounted after the
/// deletion).
#[inline(always)]
fn delete_live(key: &LiveKey, home: Home) {
    let deleted = match home {
        Home::Live => {
            let _ = LIVE.remove(key);
            return;
        }
        Home::More => match more_map() {
            Some(more) => more.remove(key),
            None => return,
        },
        Home::OnDemand => {
            let deleted = LIVE_ON_DEMAND.remove(key);
            if deleted.is_ok()
                && let Some(c) = GLOBAL.get_ptr_mut(global::LIVE_ON_DEMAND_COUNT)
            {
                atomics::sub(c, 1);
            }
            deleted
        }
    };
    if deleted.is_ok()
        && let Some(c) = GLOBAL.get_ptr_mut(global::LIVE_OVERFLOW_COUNT)
    {
        atomics::sub(c, 1);
        live_slots::give_unit();
    }
}

/// Attempts to record a block whose entry another CPU is deleting (a few hundred ns)
/// before a lost event is counted. The verifier walks every iteration of every bounded
/// loop: more attempts cost start-up time.
const PUT_TRIES: usize = 4;

/// Deletes the live-map entry this thread released last and left behind as a tombstone
/// (in whichever live-block map holds it), or empties the live slot it left `FREE`
/// (live_slots.rs), unless that is where the block at `keep` is or goes (about to be
/// handed out again, or released again; `None`: whatever it is).
///
/// Why deletions are deferred: a hash map insert and delete are the dearest part of a
/// call (kernel functions taking the bucket's lock and the element free list), and most
/// programs hand the block they just released straight out again (glibc's per-thread
/// cache is last-in first-out). A release therefore only marks its entry
/// [`LiveBlock::RELEASED`] in place, and the next allocation at that address revives it
/// in place: a malloc+free pair then makes two map lookups and no insert or delete. The
/// entry is deleted when the thread's next allocation or release is about another
/// address. Another thread may revive the tombstone meanwhile (the allocator handed the
/// address out there): the swap to [`LiveBlock::DELETING`] then fails and the entry
/// stays; one that finds an entry being deleted retries until it is gone and inserts
/// anew.
#[inline(always)]
fn flush_released(t: &Thread, keep: Option<u64>) {
    // SAFETY (whole block): the thread state is this thread's own; the value pointer
    // is valid for the program's run.
    unsafe {
        let addr = (*t.state).released;
        if addr == 0 {
            return;
        }
        if addr & live_slot::RELEASED_SLOT != 0 {
            if let Some(keep) = keep
                && live_slots::same_slot(t, addr, keep)
            {
                return;
            }
            (*t.state).released = 0;
            live_slots::empty(addr);
            return;
        }
        if Some(addr) == keep {
            return;
        }
        (*t.state).released = 0;
        memtrack_delete_tombstone(t.tgid(), addr);
    }
}

/// Deletes the tombstone of the block at `addr` of process `tgid` (a released entry,
/// in whichever live-block map holds it), unless another thread revived it. A BPF global
/// function (verified once, see verified_once.rs): [`flush_released`] is inlined at
/// every release and allocation, and its lookups into up to three maps were walked again
/// at each. Returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_delete_tombstone(tgid: u32, addr: u64) -> i32 {
    let key = live_key(tgid, addr);
    if let Some((v, home)) = find_live(&key)
        // SAFETY: the value pointer is valid for the program's run.
        && atomics::swap(
            unsafe { &raw mut (*v).size },
            LiveBlock::RELEASED,
            LiveBlock::DELETING,
        )
    {
        delete_live(&key, home);
    }
    0
}

/// Makes `block` live at `addr`: revives its tombstone in place (in whichever map holds
/// it), or inserts it into `LIVE`, or into an overflow map when `LIVE` is full. False
/// when it could not be recorded (all full). The invariant it keeps, an address in at
/// most one map, is explained above [`Home`].
#[inline(always)]
fn put_live(t: &Thread, addr: u64, block: &LiveBlock, own_tombstone: bool) -> bool {
    let key = live_key(t.tgid(), addr);
    // Sizes that large cannot be handed out; they would read as a state.
    let size = block.size.min(LiveBlock::DELETING - 1);
    let value = LiveBlock { size, ..*block };
    // Newest first (above [`Home`]): a new block straight into the overflow maps, unless
    // it comes back where this thread released it last (a tombstone to revive: found
    // below, newest first); any refusal (the key is there, or they are full) goes the
    // way below.
    if !own_tombstone && more_map().is_some() && memtrack_insert_overflow(&key, &value) == 0 {
        return true;
    }
    for _ in 0..PUT_TRIES {
        match find_live(&key) {
            // SAFETY: the value pointer is valid for the program's run. The stack is
            // written after the size's swap: no release of the block can come before
            // this call returns to the program.
            Some((v, _)) => unsafe {
                let word = &raw mut (*v).size;
                let old = atomics::load(word);
                if old == LiveBlock::DELETING {
                    continue;
                }
                if old != LiveBlock::RELEASED {
                    // A live entry at this address: its release was not seen (made
                    // while not counting). The new block replaces it, as an insert
                    // would.
                    core::ptr::write_volatile(word, size);
                    core::ptr::write_volatile(&raw mut (*v).stack, block.stack);
                    return true;
                }
                if atomics::swap(word, LiveBlock::RELEASED, size) {
                    core::ptr::write_volatile(&raw mut (*v).stack, block.stack);
                    return true;
                }
            },
            None => {
                match insert_live(&key, &value) {
                    Ok(()) => return true,
                    // Inserted meanwhile (a deletion ended between the lookup and
                    // here): look again.
                    Err(e) if e == -EEXIST => {}
                    Err(_) => return false,
                }
            }
        }
    }
    false
}

/// Makes the block at `addr` live (see [`put_live`]) after deleting this thread's
/// tombstone of another address; counts a lost event when the live maps are full (this
/// block's free will then show as unmatched: never silent). Called only through the
/// global function `verified_once::make_live` (verified once: [`put_live`]'s tries are
/// the largest part of what the verifier walks).
#[inline(always)]
pub fn make_live(t: &Thread, stats: *mut PidStats, addr: u64, block: &LiveBlock) {
    flush_released(t, Some(addr));
    // SAFETY: the thread state is this thread's own.
    let own_tombstone = unsafe {
        let own = (*t.state).released == addr;
        if own {
            (*t.state).released = 0;
        }
        own
    };
    // A tombstone of this address is revived in place (one lookup, no insert), so that
    // no entry of it is left behind; any other block goes into its slot if it is free.
    if !own_tombstone && live_slots::put(t, addr, block) {
        return;
    }
    if !put_live(t, addr, block, own_tombstone) {
        // SAFETY: stats points into a live map value.
        atomics::add(unsafe { &raw mut (*stats).lost_events }, 1);
    }
}

/// Takes the block at `addr` out of its live slot or the live map (leaving a `FREE`
/// slot or a tombstone this thread empties later, see [`flush_released`]); its size
/// and stack when it was live. The slot first: a block there is newer than any entry
/// of its address in the maps (live_slots.rs).
#[inline(always)]
pub fn take_live(t: &Thread, addr: u64) -> Option<LiveBlock> {
    flush_released(t, Some(addr));
    match live_slots::take(t, addr) {
        Taken::Block(block, index) => {
            remember_release(t, live_slot::RELEASED_SLOT | u64::from(index));
            return Some(block);
        }
        Taken::Gone => return None,
        Taken::NotHere => {}
    }
    let (v, _) = find_live(&live_key(t.tgid(), addr))?;
    // SAFETY (whole block): the value pointer is valid for the program's run; the
    // thread state is this thread's own.
    unsafe {
        let word = &raw mut (*v).size;
        // A swap, not a store: two threads releasing one block at once (a double free)
        // release it once. The one whose swap fails finds the entry released on its
        // second look: two looks suffice.
        for _ in 0..2 {
            let size = atomics::load(word);
            if size >= LiveBlock::DELETING {
                return None;
            }
            let stack = core::ptr::read_volatile(&raw const (*v).stack);
            if atomics::swap(word, size, LiveBlock::RELEASED) {
                remember_release(t, addr);
                return Some(LiveBlock {
                    size,
                    stack,
                    _pad: 0,
                });
            }
        }
    }
    None
}

/// Makes `released` (a tombstone's address, or a `FREE` slot) the thread's last
/// release, after emptying the one before if [`flush_released`] kept it (it was where
/// this block was): a thread remembers one, and one it forgot would hold its map entry
/// or unit of capacity until its process is purged.
#[inline(always)]
fn remember_release(t: &Thread, released: u64) {
    // SAFETY: the thread state is this thread's own.
    unsafe {
        let before = (*t.state).released;
        if before != 0 && before != released {
            flush_released(t, None);
        }
        (*t.state).released = released;
    }
}
