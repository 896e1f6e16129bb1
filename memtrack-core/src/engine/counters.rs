//! The processes' counters in the kernel: which slot of `TRACKED` and `STATS` each
//! tracked process owns (slots.rs hands them out), whether its calls are counted now
//! (`TRACKED`'s state), and its raw counters (`STATS`).

use aya::maps::{Array, HashMap, MapData};
use memtrack_common::{PidStats, ProcessSlot, TrackState, map_names};

use super::{
    maps::{map_err, take_map},
    object::Object,
    slots::{OwnedSlot, Slots},
};
use crate::error::Result;

/// `TRACKED`, `SLOTS` and `STATS`, and which process owns which slot.
pub(crate) struct Counters {
    tracked: Array<MapData, ProcessSlot>,
    slot_map: HashMap<MapData, u32, u32>,
    stats: Array<MapData, PidStats>,
    slots: Slots,
}

impl Counters {
    /// Takes the counting maps out of `object`.
    pub(crate) fn take(object: &mut Object) -> Result<Self> {
        Ok(Counters {
            tracked: take_map(object, map_names::TRACKED)?,
            slot_map: take_map(object, map_names::SLOTS)?,
            stats: take_map(object, map_names::STATS)?,
            slots: Slots::new(),
        })
    }

    /// The slot of `pid`, given one (with its counters zeroed, counting off) if it has
    /// none yet.
    fn slot(&mut self, pid: u32) -> Result<OwnedSlot> {
        if let Some(slot) = self.slots.owned.get(&pid) {
            return Ok(*slot);
        }
        let slot = self.slots.take(pid)?;
        let index = slot.index;
        // Counters first, then the owner, then the way to it: a thread that finds the
        // slot finds it zeroed and owned.
        let written = self
            .stats
            .set(index, PidStats::ZERO, 0)
            .map_err(map_err(map_names::STATS))
            .and_then(|()| {
                self.tracked
                    .set(index, slot.value, 0)
                    .map_err(map_err(map_names::TRACKED))
            })
            .and_then(|()| {
                self.slot_map
                    .insert(pid, index, 0)
                    .map_err(map_err(map_names::SLOTS))
            });
        if let Err(e) = written {
            let _ = self.tracked.set(index, ProcessSlot::default(), 0);
            self.slots.free.push(index);
            return Err(e);
        }
        self.slots.owned.insert(pid, slot);
        Ok(slot)
    }

    /// Writes the TRACKED entry of `slot` and remembers it.
    fn write_slot(&mut self, pid: u32, slot: OwnedSlot) -> Result<()> {
        self.tracked
            .set(slot.index, slot.value, 0)
            .map_err(map_err(map_names::TRACKED))?;
        self.slots.owned.insert(pid, slot);
        Ok(())
    }

    /// Sets whether (and which threads of) `pid` are counted. Allocates nothing for a
    /// process that has a slot (start and stop come here).
    pub(crate) fn set_state(&mut self, pid: u32, state: TrackState) -> Result<()> {
        let mut slot = self.slot(pid)?;
        slot.value.state = state;
        self.write_slot(pid, slot)
    }

    /// Turns counting off for every process that has a slot (before its links close).
    pub(crate) fn stop_all(&mut self) {
        let owned: Vec<(u32, OwnedSlot)> = self.slots.owned.iter().map(|(p, s)| (*p, *s)).collect();
        for (pid, mut slot) in owned {
            slot.value.state = TrackState::default();
            let _ = self.write_slot(pid, slot);
        }
    }

    /// Zeroes the counters of `pid` and gives its slot a new generation, so that its
    /// threads forget their call in progress and last release. Returns the generation.
    pub(crate) fn reset(&mut self, pid: u32) -> Result<u32> {
        let mut slot = self.slot(pid)?;
        self.stats
            .set(slot.index, PidStats::ZERO, 0)
            .map_err(map_err(map_names::STATS))?;
        slot.value.generation = self.slots.next_generation();
        slot.value.origin_ns = crate::monotonic_ns();
        self.write_slot(pid, slot)?;
        Ok(slot.value.generation)
    }

    /// Gives up the slot of `pid` (it exited: none of its calls can be counted any
    /// more).
    pub(crate) fn release(&mut self, pid: u32) {
        if let Some(slot) = self.slots.owned.remove(&pid) {
            // Owner first: a thread still running sees a free slot, not another's.
            let _ = self.tracked.set(slot.index, ProcessSlot::default(), 0);
            let _ = self.slot_map.remove(&pid);
            self.slots.free.push(slot.index);
        }
    }

    /// The raw counters of `pid` (zero for a process without a slot).
    pub(crate) fn read(&self, pid: u32) -> Result<PidStats> {
        match self.slots.owned.get(&pid) {
            Some(slot) => self
                .stats
                .get(&slot.index, 0)
                .map_err(map_err(map_names::STATS)),
            None => Ok(PidStats::ZERO),
        }
    }

    /// Whether the live-block maps may hold entries of `pid`, so that forgetting them
    /// needs a walk of the whole maps (every bucket, even when empty; a short process
    /// is forgotten at its start and at its end). No when its counters say no block is
    /// live, none was released (a release leaves its entry behind for a while,
    /// `LiveBlock::RELEASED`) and nothing was lost, and no call can add one meanwhile
    /// (its counting is off, or it is `gone`: it exited; a short process that never
    /// released a block, `/bin/true`, then costs no walk at its end).
    pub(crate) fn may_have_live_blocks(&self, pid: u32, gone: bool) -> bool {
        let Some(slot) = self.slots.owned.get(&pid) else {
            return false;
        };
        let counting = !gone && slot.value.state.enabled != 0;
        let Ok(stats) = self.stats.get(&slot.index, 0) else {
            return true;
        };
        counting || stats.live_blocks() != 0 || stats.free_calls != 0 || stats.lost_events != 0
    }

    /// The slot `pid` owns, if it has one.
    pub(crate) fn slot_of(&self, pid: u32) -> Option<OwnedSlot> {
        self.slots.owned.get(&pid).copied()
    }

    /// How many processes own a slot.
    pub(crate) fn processes(&self) -> usize {
        self.slots.owned.len()
    }

    /// The live blocks of `count` processes, from the `start`th (by pid, in a cycle).
    pub(crate) fn live_blocks_of(&self, start: usize, count: usize) -> u64 {
        self.slots
            .owned
            .values()
            .cycle()
            .skip(start)
            .take(count)
            .filter_map(|slot| self.stats.get(&slot.index, 0).ok())
            .map(|s| s.live_blocks())
            .sum()
    }
}
