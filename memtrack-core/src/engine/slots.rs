//! Which process owns which slot of the `TRACKED` and `STATS` arrays, and the
//! generation each slot was last given (`memtrack_common::ProcessSlot`).

use std::collections::BTreeMap;

use memtrack_common::{MAX_TRACKED_PROCESSES, ProcessSlot, TrackState};

use crate::error::{Error, Result};

/// The slots of the TRACKED and STATS arrays (see `memtrack_common::ProcessSlot`): which
/// process owns which, and the generation each was last given.
pub(crate) struct Slots {
    pub(crate) owned: BTreeMap<u32, OwnedSlot>,
    /// Free slots, taken from the end.
    pub(crate) free: Vec<u32>,
    /// The last generation handed out (generations are never 0).
    generation: u32,
}

/// One process's slot.
#[derive(Clone, Copy)]
pub(crate) struct OwnedSlot {
    /// Its index in `TRACKED` and `STATS`.
    pub(crate) index: u32,
    /// What `TRACKED` holds there.
    pub(crate) value: ProcessSlot,
}

impl Slots {
    /// Every slot free.
    pub(crate) fn new() -> Self {
        Slots {
            owned: BTreeMap::new(),
            free: (0..MAX_TRACKED_PROCESSES).rev().collect(),
            generation: 0,
        }
    }

    /// A new generation (never 0).
    pub(crate) fn next_generation(&mut self) -> u32 {
        self.generation = self.generation.wrapping_add(1).max(1);
        self.generation
    }

    /// A free slot for `pid`, owned by it with a new generation, its timeline's origin
    /// now and counting off (not yet in `owned`: the caller records it once the
    /// kernel's maps hold it).
    pub(crate) fn take(&mut self, pid: u32) -> Result<OwnedSlot> {
        let index = self.free.pop().ok_or(Error::TooManyProcesses {
            pid,
            max: MAX_TRACKED_PROCESSES,
        })?;
        Ok(OwnedSlot {
            index,
            value: ProcessSlot {
                tgid: pid,
                generation: self.next_generation(),
                state: TrackState::default(),
                origin_ns: crate::monotonic_ns(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    /// Slots run out after MAX_TRACKED_PROCESSES processes, with an error naming the
    /// process and the limit; a slot given back is taken again, with a new generation
    /// (never 0), so its threads forget what they kept from the last owner.
    #[test]
    fn slots_run_out_with_a_clear_error_and_are_reused_with_a_new_generation() {
        let mut slots = super::Slots::new();
        let mut generations = std::collections::BTreeSet::new();
        let mut indexes = std::collections::BTreeSet::new();
        for pid in 1..=memtrack_common::MAX_TRACKED_PROCESSES {
            let slot = slots.take(pid).unwrap();
            assert_eq!(slot.value.tgid, pid);
            assert_eq!(slot.value.state, memtrack_common::TrackState::default());
            assert!(generations.insert(slot.value.generation));
            assert!(indexes.insert(slot.index));
        }
        assert_eq!(indexes.len(), 4096);
        assert_eq!(indexes.last(), Some(&4095));
        assert!(!generations.contains(&0));
        let err = slots
            .take(5000)
            .err()
            .expect("a 4097th process gets no slot");
        assert_eq!(
            err.to_string(),
            "cannot track process 5000: 4096 processes are tracked at once already (the \
             most one tracker can track)"
        );
        slots.free.push(17);
        let again = slots.take(5000).unwrap();
        assert_eq!(again.index, 17);
        assert!(!generations.contains(&again.value.generation));
        // Generations wrap past u32::MAX to 1, never to 0.
        slots.generation = u32::MAX;
        assert_eq!(slots.next_generation(), 1);
    }
}
