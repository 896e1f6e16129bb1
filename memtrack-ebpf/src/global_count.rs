//! The GLOBAL map's counters: what happened that no process's counters can hold (no
//! counters for the process, a full map).

use crate::{atomics, maps::GLOBAL};

/// Adds 1 to slot `slot` of the GLOBAL map (`memtrack_common::global`).
#[inline(always)]
pub fn global_bump(slot: u32) {
    if let Some(p) = GLOBAL.get_ptr_mut(slot) {
        atomics::add(p, 1);
    }
}
