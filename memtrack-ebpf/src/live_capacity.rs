//! What user space configured, before loading, about the live blocks beyond the
//! preallocated `LIVE` map: read-only globals the verifier reads as constants, so that
//! with 0 every use of the maps they enable is pruned from the programs. Read by the
//! live-block maps (live_maps.rs) and the live slots (live_slots.rs).

use crate::maps::{LIVE_MORE, LiveMore};

/// 1 when `LIVE_ON_DEMAND` has capacity (user space asked for more live blocks than
/// `LIVE` preallocates), else 0. A read-only global that user space sets before loading
/// (`memtrack_common::LIVE_ON_DEMAND_GLOBAL`): the verifier reads it as a constant, so
/// with 0 every use of `LIVE_ON_DEMAND` is pruned from the programs.
#[unsafe(no_mangle)]
static HAS_LIVE_ON_DEMAND: u32 = 0;

/// 1 when user space may put a preallocated map in `LIVE_MORE` (it reserves part of the
/// preallocated entries after load), else 0: with 0 the verifier prunes every use of
/// it. Set like [`HAS_LIVE_ON_DEMAND`] (`memtrack_common::LIVE_MORE_GLOBAL`).
#[unsafe(no_mangle)]
static HAS_LIVE_MORE: u32 = 0;

/// How many live blocks the overflow maps (the map in `LIVE_MORE` and `LIVE_ON_DEMAND`)
/// and the live slots (live_slots.rs) may hold together: the capacity beyond `LIVE`'s
/// (`memtrack_common::LIVE_OVERFLOW_CAPACITY_GLOBAL`).
#[unsafe(no_mangle)]
static LIVE_OVERFLOW_CAPACITY: u64 = 0;

/// [`LIVE_OVERFLOW_CAPACITY`]: 0 when every live block must be in `LIVE`.
#[inline(always)]
pub fn beyond_capacity() -> u64 {
    // SAFETY: reading a global; volatile keeps the compiler from folding the 0.
    unsafe { core::ptr::read_volatile(&LIVE_OVERFLOW_CAPACITY) }
}

/// Whether `LIVE_ON_DEMAND` has any capacity (see [`HAS_LIVE_ON_DEMAND`]).
#[inline(always)]
pub fn has_on_demand() -> bool {
    // SAFETY: reading a global; volatile keeps the compiler from folding the 0.
    unsafe { core::ptr::read_volatile(&HAS_LIVE_ON_DEMAND) != 0 }
}

/// The map in `LIVE_MORE`, once user space has put it there (see [`HAS_LIVE_MORE`]).
#[inline(always)]
pub fn more_map() -> Option<&'static LiveMore> {
    // SAFETY: reading a global; volatile keeps the compiler from folding the 0.
    if unsafe { core::ptr::read_volatile(&HAS_LIVE_MORE) } == 0 {
        return None;
    }
    LIVE_MORE.get(0)
}
