//! How the live-block capacity is split between the kernel's three live-block maps
//! (memtrack-ebpf's maps.rs), and the kernel memory that takes: what a tracker reserves
//! at load and later, checked against memtrack's memory cgroup before any map is made.

use memtrack_common::{LiveBlock, LiveKey};

use crate::{
    engine::live::growth::LIVE_BLOCKS_AT_LOAD,
    error::{Error, Result},
};

/// The largest live-block capacity
/// ([`TrackerBuilder::max_live_blocks`](crate::TrackerBuilder::max_live_blocks)):
/// 134,217,728 (2^27) blocks. The kernel gives a hash map a power-of-two bucket array of at most 2^32
/// bytes, 16 bytes a bucket, so no larger map can be made (2^27 + 1 fails with E2BIG);
/// the capacity split between the preallocated map and the on-demand one stays within
/// what either could hold alone.
/// Measured on Linux 6.18 here, when an entry's value was 8 bytes (now 16) and every
/// entry was preallocated: 2^27 blocks took about 11 GiB of kernel memory and 18 s to
/// reserve ([`live_map_bytes`]); a machine without that much memory refuses
/// ([`Error::LiveMap`]).
pub const MAX_LIVE_BLOCKS: u32 = 1 << 27;

/// The kernel's `struct htab_elem` header before a hash map entry's key (Linux 6.x,
/// x86_64).
const ELEMENT_HEADER: u64 = 48;

/// Kernel memory of the live-block maps for `max_live_blocks` blocks of which
/// `preallocated` (at most `max_live_blocks`) have preallocated entries
/// ([`TrackerBuilder::preallocated_live_blocks`](crate::TrackerBuilder::preallocated_live_blocks)),
/// for a tracker of other processes (`spawn`, `attach_pid`).
///
/// Reserved when the tracker loads ([`LiveMapBytes::at_load`]): 80 bytes per
/// preallocated entry reserved then (the kernel's 48-byte element header, the 16-byte
/// key, the 16-byte value: size and stack id; at most [`LIVE_BLOCKS_AT_LOAD`] of them)
/// and 16 bytes per hash bucket (each map has its capacity rounded up to a power of two
/// of buckets: the preallocated entries', and the other blocks', whose entries are
/// allocated on demand). The other preallocated entries, and their buckets, are reserved
/// once the tracked processes hold more blocks live than those reserved at load
/// ([`LiveMapBytes::later`]). The entries of the blocks beyond the preallocated ones are
/// allocated as those blocks go live and freed when they are released, 96 bytes each
/// (the same 80 bytes and the allocator's 8-byte list node in the kernel's 96-byte size
/// class): at most [`LiveMapBytes::on_demand`] more. A tracker of the calling process
/// reserves every preallocated entry at load: its `at_load` is `at_load + later`.
pub fn live_map_bytes(max_live_blocks: u32, preallocated: u32) -> LiveMapBytes {
    live_map_bytes_of(LiveSplit::new(max_live_blocks, preallocated, true))
}

/// [`live_map_bytes`] of one split.
pub(crate) fn live_map_bytes_of(split: LiveSplit) -> LiveMapBytes {
    let entry = ELEMENT_HEADER + (size_of::<LiveKey>() + size_of::<LiveBlock>()) as u64;
    let buckets = |n: u32| u64::from(n).next_power_of_two() * 16;
    // The kernel's BPF allocator puts an 8-byte list node before each object and
    // serves 80 + 8 bytes from its 96-byte size class.
    const ON_DEMAND_ENTRY: u64 = 96;
    let later = if split.later == 0 {
        0
    } else {
        u64::from(split.later) * entry + buckets(split.later)
    };
    LiveMapBytes {
        at_load: u64::from(split.at_load) * entry
            + buckets(split.at_load)
            + buckets(split.on_demand_entries()),
        later,
        on_demand: u64::from(split.beyond_preallocated()) * ON_DEMAND_ENTRY,
    }
}

/// Refuses, before any map is made, maps that do not fit in what memtrack's memory
/// cgroup leaves (memory_cgroup.rs says why a map must not fill it): the live-block maps'
/// reservation, the one made later included, and, with stacks on, the unwind rows (the
/// other maps are a few MiB).
pub(crate) fn check_cgroup_room(
    split: LiveSplit,
    max_live_blocks: u32,
    stacks: bool,
) -> Result<()> {
    let rows = if stacks {
        u64::from(crate::engine::kernel_stacks::MAX_ROWS)
            * size_of::<memtrack_common::unwind::UnwindRow>() as u64
    } else {
        0
    };
    let bytes = live_map_bytes_of(split);
    let kernel_bytes = bytes.at_load + bytes.later + rows;
    match crate::engine::memory_cgroup::headroom() {
        Some(room) if room.free_bytes < kernel_bytes => Err(Error::CgroupMemory {
            blocks: max_live_blocks,
            preallocated: split.preallocated(),
            kernel_bytes,
            cgroup: room.cgroup,
            limit_bytes: room.limit_bytes,
            free_bytes: room.free_bytes,
        }),
        _ => Ok(()),
    }
}

/// What [`live_map_bytes`] says: kernel memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveMapBytes {
    /// Reserved when the tracker loads (the preallocated entries reserved then and the
    /// bucket arrays).
    pub at_load: u64,
    /// Reserved once the tracked processes hold more blocks live than the preallocated
    /// entries reserved at load (the other preallocated entries and their buckets); 0
    /// when there are none.
    pub later: u64,
    /// At most this much more, allocated while more blocks than the preallocated ones
    /// are live.
    pub on_demand: u64,
}

/// How the live-block capacity is split between the kernel maps (memtrack-ebpf's
/// maps.rs): `LIVE`, preallocated at load; the map put in `LIVE_MORE`, preallocated
/// later (live_growth.rs); `LIVE_ON_DEMAND`, entries allocated on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LiveSplit {
    /// `LIVE`'s capacity: the preallocated entries reserved at load.
    pub(crate) at_load: u32,
    /// The preallocated entries reserved later, in the map put in `LIVE_MORE` (0: none,
    /// and the programs never look there).
    pub(crate) later: u32,
    /// The capacity beyond `LIVE`'s, which the overflow maps (the map in `LIVE_MORE`
    /// and `LIVE_ON_DEMAND`) share (the programs' `LIVE_OVERFLOW_CAPACITY`).
    pub(crate) overflow: u32,
}

impl LiveSplit {
    /// `preallocated` of `max_live_blocks` (clamped to 1..=`max_live_blocks`); with
    /// `later`, at most [`LIVE_BLOCKS_AT_LOAD`] of them reserved at load.
    pub(crate) fn new(max_live_blocks: u32, preallocated: u32, later: bool) -> Self {
        let preallocated = preallocated.clamp(1, max_live_blocks.max(1));
        let at_load = if later {
            preallocated.min(LIVE_BLOCKS_AT_LOAD)
        } else {
            preallocated
        };
        let overflow = max_live_blocks.saturating_sub(at_load);
        LiveSplit {
            at_load,
            later: preallocated - at_load,
            overflow,
        }
    }

    /// `LIVE_ON_DEMAND`'s `max_entries`: the overflow capacity (all of which it holds
    /// until the map in `LIVE_MORE` is made), or 1 when there is none (the kernel makes
    /// no empty map; the programs then never use it).
    pub(crate) fn on_demand_entries(&self) -> u32 {
        self.overflow.max(1)
    }

    /// Entries preallocated, at load and later.
    pub(crate) fn preallocated(&self) -> u32 {
        self.at_load + self.later
    }

    /// Blocks whose entries are allocated on demand once all preallocated ones exist.
    pub(crate) fn beyond_preallocated(&self) -> u32 {
        self.overflow - self.later
    }
}

#[cfg(test)]
mod tests {
    /// How the live-block capacity is split: a tracker of the calling process reserves
    /// every preallocated entry at load; a tracker of other processes at most
    /// `LIVE_BLOCKS_AT_LOAD` of them, the rest later; the on-demand map has room for
    /// everything beyond `LIVE` (until the later entries exist they are its), and the
    /// overflow capacity keeps the total exact.
    #[test]
    fn the_live_capacity_is_split_exactly() {
        use super::LiveSplit;
        let at_load = crate::LIVE_BLOCKS_AT_LOAD;
        // The defaults, in-process and for other processes.
        let here = LiveSplit::new(1 << 20, 1 << 19, false);
        assert_eq!(
            (
                here.at_load,
                here.later,
                here.overflow,
                here.on_demand_entries()
            ),
            (1 << 19, 0, 1 << 19, 1 << 19)
        );
        let other = LiveSplit::new(1 << 20, 1 << 19, true);
        assert_eq!(
            (other.at_load, other.later, other.overflow),
            (at_load, (1 << 19) - at_load, (1 << 20) - at_load)
        );
        assert_eq!(other.on_demand_entries(), other.overflow);
        assert_eq!(other.preallocated(), 1 << 19);
        assert_eq!(other.beyond_preallocated(), 1 << 19);
        // Fewer preallocated than reserved at load: nothing later.
        let small = LiveSplit::new(1 << 20, 1000, true);
        assert_eq!((small.at_load, small.later), (1000, 0));
        // Everything preallocated: no on-demand capacity once the later map exists, but
        // room for all of it there until then.
        let all = LiveSplit::new(200_000, 200_000, true);
        assert_eq!((all.at_load, all.later), (at_load, 200_000 - at_load));
        assert_eq!(all.overflow, 200_000 - at_load);
        assert_eq!(all.beyond_preallocated(), 0);
        // No capacity beyond LIVE: the on-demand map keeps its one entry, unused.
        let none = LiveSplit::new(1000, 1000, false);
        assert_eq!((none.overflow, none.on_demand_entries()), (0, 1));
        // Clamped: 0 preallocated is 1, more than the capacity is all of it.
        assert_eq!(LiveSplit::new(10, 0, true).at_load, 1);
        assert_eq!(LiveSplit::new(10, 50, false).at_load, 10);
    }
}
