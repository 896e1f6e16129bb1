//! The live blocks the kernel keeps (memtrack-ebpf's live_maps.rs and live_slots.rs):
//! the preallocated `LIVE` map, the map reserved later and put in `LIVE_MORE`
//! (growth.rs), `LIVE_ONDEMAND`, and the direct-mapped slots in front of them
//! (slots.rs). User space never adds a block; it empties a process's entries when the
//! process is forgotten or reset, and gives the capacity they held back to the programs.
//! sizing.rs splits the capacity between the maps.

pub(crate) mod growth;
pub(crate) mod sizing;
pub(crate) mod slots;

use aya::maps::{HashMap, MapData};
use memtrack_common::{LiveBlock, LiveKey, global, map_names};

use self::{growth::LiveMore, slots::LiveSlots};
use super::{
    global::Global,
    maps::{map_err, no_such_map, take_map},
    object::Object,
};
use crate::error::Result;

/// The live-block maps and slots, and what this side purged from them.
pub(crate) struct LiveBlocks {
    /// The live blocks, the first ones (`LIVE`, preallocated at load)...
    live: HashMap<MapData, LiveKey, LiveBlock>,
    /// ... the next ones (the map in `LIVE_MORE`, preallocated later) once made...
    pub(crate) more: LiveMore,
    /// ... and the rest (`LIVE_ON_DEMAND`; see memtrack-ebpf's maps.rs).
    on_demand: HashMap<MapData, LiveKey, LiveBlock>,
    /// The live slots in front of the live maps (memtrack-ebpf's live_slots.rs).
    slots: LiveSlots,
    /// Entries this side deleted from the overflow maps (`more`'s and `on_demand`), as
    /// last written to `global::LIVE_OVERFLOW_PURGED`.
    overflow_purged: u64,
    /// Those of them from `on_demand`, as last written to
    /// `global::LIVE_ON_DEMAND_PURGED`.
    on_demand_purged: u64,
    /// Units of the capacity beyond `LIVE`'s this side gave back (overflow entries it
    /// deleted, slots it emptied), as last written to `global::LIVE_BEYOND_PURGED`.
    beyond_purged: u64,
}

impl LiveBlocks {
    /// Takes the live-block maps out of `object`; `more` is what will reserve the later
    /// entries.
    pub(crate) fn take(object: &mut Object, more: LiveMore) -> Result<Self> {
        let slots = object
            .map_fd(map_names::LIVE_SLOTS)
            .ok_or_else(|| no_such_map(map_names::LIVE_SLOTS))
            .and_then(|fd| {
                LiveSlots::map(fd)
                    .map_err(|e| map_err(map_names::LIVE_SLOTS)(aya::maps::MapError::IoError(e)))
            })?;
        Ok(LiveBlocks {
            live: take_map(object, map_names::LIVE)?,
            more,
            on_demand: take_map(object, map_names::LIVE_ON_DEMAND)?,
            slots,
            overflow_purged: 0,
            on_demand_purged: 0,
            beyond_purged: 0,
        })
    }

    /// Deletes every live-block entry of `pid`, from every map (the overflow maps only
    /// while they may hold entries), and empties its live slots but those of generation
    /// `keep` (see [`LiveSlots::purge`]).
    pub(crate) fn purge(&mut self, global: &mut Global, pid: u32, keep: Option<u32>) {
        fn of_pid(map: &HashMap<MapData, LiveKey, LiveBlock>, pid: u32) -> Vec<LiveKey> {
            map.keys()
                .filter_map(|k| k.ok())
                .filter(|k| k.tgid == pid)
                .collect()
        }
        fn purge(map: &mut HashMap<MapData, LiveKey, LiveBlock>, pid: u32) -> u64 {
            let mut deleted = 0;
            for key in of_pid(map, pid) {
                if map.remove(&key).is_ok() {
                    deleted += 1;
                }
            }
            deleted
        }
        purge(&mut self.live, pid);
        let slots = self.slots.purge(pid, keep);
        if !self.overflow_in_use(global) {
            self.give_back(global, slots);
            return;
        }
        let on_demand = purge(&mut self.on_demand, pid);
        let more = self.more.map.as_mut().map_or(0, |more| purge(more, pid));
        // After the deletions, so that the programs' counts less these are never below
        // what the maps hold (memtrack-ebpf's live_maps.rs).
        global.count_purged(
            &mut self.on_demand_purged,
            global::LIVE_ON_DEMAND_PURGED,
            on_demand,
        );
        global.count_purged(
            &mut self.overflow_purged,
            global::LIVE_OVERFLOW_PURGED,
            on_demand + more,
        );
        self.give_back(global, slots + on_demand + more);
    }

    /// Gives `units` of the capacity beyond `LIVE`'s back to the programs (after the
    /// deletions that freed them: their count less these is never below what the slots
    /// and overflow maps hold).
    fn give_back(&mut self, global: &mut Global, units: u64) {
        global.count_purged(&mut self.beyond_purged, global::LIVE_BEYOND_PURGED, units);
    }

    /// Whether the overflow maps may hold entries: the programs counted entries that
    /// this side did not delete.
    fn overflow_in_use(&self, global: &Global) -> bool {
        match global.get(global::LIVE_OVERFLOW_COUNT) {
            Some(count) => count.wrapping_sub(self.overflow_purged) != 0,
            None => true,
        }
    }
}
