//! The loader hook's two maps (memtrack-ebpf's ld_hook.rs): the stops it made, which the
//! follower looks up when a thread stops with one of the hook's signals, and the hits
//! that stopped nothing (a thread that blocks all the hook's signals), counted as each
//! process's lost events.

use aya::maps::{HashMap, MapData};
use memtrack_common::map_names;

use super::{
    maps::{map_err, take_map},
    object::Object,
};
use crate::error::Result;

/// `LD_HOOK_STOPS` and `LD_HOOK_MISSES`.
pub(crate) struct HookMaps {
    /// Thread id -> the signal the loader hook stopped it with.
    stops: HashMap<MapData, u32, u32>,
    /// tgid -> loader hook hits that did not stop the thread.
    misses: HashMap<MapData, u32, u64>,
}

impl HookMaps {
    /// Takes the hook's maps out of `object`.
    pub(crate) fn take(object: &mut Object) -> Result<Self> {
        Ok(HookMaps {
            stops: take_map(object, map_names::LD_HOOK_STOPS)?,
            misses: take_map(object, map_names::LD_HOOK_MISSES)?,
        })
    }

    /// A hook was attached in `pid`: its misses are counted from now on, into an entry
    /// that exists (`BPF_NOEXIST`: one the hook made already is kept).
    pub(crate) fn hooked(&mut self, pid: u32) {
        let _ = self.misses.insert(pid, 0, 1);
    }

    /// The signal the loader hook sent thread `tid` to stop it, if it did and the
    /// follower has not seen that stop yet.
    pub(crate) fn stop(&self, tid: u32) -> Option<u32> {
        self.stops.get(&tid, 0).ok()
    }

    /// Forgets the loader hook's stop of thread `tid` (seen, or the thread is gone).
    pub(crate) fn clear_stop(&mut self, tid: u32) {
        let _ = self.stops.remove(&tid);
    }

    /// Loader hook hits in `pid` that did not stop it.
    pub(crate) fn misses(&self, pid: u32) -> Result<u64> {
        match self.misses.get(&pid, 0) {
            Ok(misses) => Ok(misses),
            Err(aya::maps::MapError::KeyNotFound) => Ok(0),
            Err(source) => Err(map_err(map_names::LD_HOOK_MISSES)(source)),
        }
    }

    /// Zeroes the misses of `pid`, if it is hooked.
    pub(crate) fn reset(&mut self, pid: u32) -> Result<()> {
        if self.misses.get(&pid, 0).is_ok() {
            self.misses
                .insert(pid, 0, 0)
                .map_err(map_err(map_names::LD_HOOK_MISSES))?;
        }
        Ok(())
    }

    /// Forgets `pid` (it exited).
    pub(crate) fn forget(&mut self, pid: u32) {
        let _ = self.misses.remove(&pid);
    }
}
