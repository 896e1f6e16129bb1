//! The `GLOBAL` array: counters of the whole tracker, not of a process (memtrack-common's
//! `global` slots): events no process's counters could take, and the counts of live-block
//! capacity user space deleted or gave back, which the programs read.

use aya::maps::{Array, MapData};
use memtrack_common::{global, map_names};

use super::{maps::take_map, object::Object};
use crate::error::Result;

/// `GLOBAL`.
pub(crate) struct Global {
    map: Array<MapData, u64>,
}

impl Global {
    /// Takes `GLOBAL` out of `object`.
    pub(crate) fn take(object: &mut Object) -> Result<Self> {
        Ok(Global {
            map: take_map(object, map_names::GLOBAL)?,
        })
    }

    /// The counter at `slot` (None: it could not be read).
    pub(crate) fn get(&self, slot: u32) -> Option<u64> {
        self.map.get(&slot, 0).ok()
    }

    /// Adds `n` to `purged`, this side's count of what it deleted or gave back, and
    /// writes the new count at `slot` (the programs read it there), unless `n` is 0.
    pub(crate) fn count_purged(&mut self, purged: &mut u64, slot: u32, n: u64) {
        if n != 0 {
            *purged += n;
            let _ = self.map.set(slot, *purged, 0);
        }
    }

    /// Events that could not be attributed to any tracked process (a tracked process
    /// with no counters, a thread whose state could not be created) or to a stack (a
    /// full stack counts map). `GLOBAL` also holds the last stack id handed out, which
    /// counts stacks, not losses: it is left out.
    pub(crate) fn unattributed_losses(&self) -> u64 {
        [
            global::MISSING_STATS,
            global::THREAD_STATE_FAILED,
            global::STACK_COUNTS_FULL,
        ]
        .iter()
        .filter_map(|&i| self.get(i))
        .sum()
    }
}
