//! The preallocated live-block entries a tracker of other processes reserves after load
//! ([`LIVE_BLOCKS_AT_LOAD`] says why): a thread watches until the tracked processes keep
//! [`GROW_AT_LIVE_BLOCKS`] blocks live (or spill past `LIVE`), then makes the map of the
//! other preallocated entries and puts it in `LIVE_MORE`, where the programs look for it
//! (memtrack-ebpf's live_maps.rs). Blocks that go live beyond `LIVE` before that are kept
//! in `LIVE_ON_DEMAND`, which has room for all of them: no call waits for the map, and
//! none is lost for want of it.

use std::{os::fd::AsFd, sync::Weak, time::Duration};

use aya::maps::{Array, ArrayOfMaps, HashMap, MapData};
use aya_obj::generated::bpf_map_type;
use memtrack_common::{LiveBlock, LiveKey, global, map_names};

use crate::{
    engine::maps::map_from_fd,
    engine::object::{PlainMap, create_plain_map},
};

/// The preallocated live-block entries a tracker of other processes
/// ([`TrackerBuilder::spawn`](crate::TrackerBuilder::spawn),
/// [`attach_pid`](crate::TrackerBuilder::attach_pid)) reserves when it loads, in
/// blocks. The rest of its
/// [`preallocated_live_blocks`](crate::TrackerBuilder::preallocated_live_blocks) are
/// reserved once its processes keep [`GROW_AT_LIVE_BLOCKS`] blocks live (this module), so
/// that a short process pays for none of them: reserving the default all at load was a
/// large part of the start-up, on its critical path (BENCHMARKS.md "Preallocated
/// entries reserved when needed"). A tracker of the
/// calling process reserves them all at load (it starts no threads).
pub const LIVE_BLOCKS_AT_LOAD: u32 = 1 << 16;

/// The live blocks of its processes at which a tracker of other processes reserves its
/// other preallocated entries: a quarter of [`LIVE_BLOCKS_AT_LOAD`]. Making half a
/// million entries and putting them in place takes about as long as a program
/// allocating as fast as uprobes allow needs to go from a quarter of
/// [`LIVE_BLOCKS_AT_LOAD`] live blocks to all of them (BENCHMARKS.md); what it allocates
/// beyond those before the entries are ready gets entries allocated on demand. A
/// program that never keeps that many blocks live pays for none of them.
pub const GROW_AT_LIVE_BLOCKS: u32 = LIVE_BLOCKS_AT_LOAD / 4;

/// What the thread asks of the tracker it works for (its shared state, which it must not
/// keep alive).
pub(crate) trait Host: Send + Sync {
    /// The live blocks of the tracked processes now (of at most
    /// [`MAX_PROCESSES_SUMMED`] of them, the next ones at each call).
    fn live_blocks_now(&self) -> u64;
    /// Runs `f` on the engine's [`LiveMore`].
    fn with_live_more(&self, f: &mut dyn FnMut(&mut LiveMore));
}

/// A live-block map as user space reads it.
pub(crate) type LiveMap = HashMap<MapData, LiveKey, LiveBlock>;

/// How often the thread looks whether the tracked processes spilled past `LIVE`: one
/// `bpf()` lookup each time.
const POLL: Duration = Duration::from_millis(2);

/// Every how many polls the thread also adds up the tracked processes' live blocks
/// (one lookup per process, at most [`MAX_PROCESSES_SUMMED`]), to reserve the entries
/// before `LIVE` is full: making half a million takes tens of milliseconds, and a
/// program allocating as fast as uprobes allow would put tens of thousands of blocks on
/// demand meanwhile.
const SUM_EVERY: u32 = 5;

/// The processes whose live blocks one sum reads at most: with more, each sum reads the
/// next ones in turn (a process that keeps many blocks live is read within a few sums,
/// and the spill check sees every process at every poll). A read copies a process's 2
/// KB of counters: at most 3,200 reads a second, for as long as a run never gets to
/// reserve the entries.
pub(crate) const MAX_PROCESSES_SUMMED: usize = 32;

/// What became of the preallocated live-block entries a tracker reserves after load
/// ([`ProcessTracker::later_live_blocks`](crate::ProcessTracker::later_live_blocks)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaterLiveBlocks {
    /// None are reserved after load: all the preallocated entries were reserved then (a
    /// tracker of the calling process, or no more preallocated blocks than
    /// [`LIVE_BLOCKS_AT_LOAD`]).
    None,
    /// Not reserved yet: the tracked processes never kept
    /// [`GROW_AT_LIVE_BLOCKS`] blocks live, nor more than the
    /// entries reserved at load.
    Waiting {
        /// Entries that will be reserved, in blocks.
        blocks: u32,
    },
    /// Reserved and in use.
    Reserved {
        /// Entries reserved, in blocks.
        blocks: u32,
    },
    /// The kernel could not make them (usually: not enough memory). The blocks beyond
    /// the entries reserved at load live in entries allocated on demand instead:
    /// counted exactly all the same, at a higher cost per call (BENCHMARKS.md).
    Failed {
        /// Entries that were asked for, in blocks.
        blocks: u32,
        /// What the kernel said.
        reason: String,
    },
}

/// The engine's side: `LIVE_MORE`, the map put in it, and what became of it.
pub(crate) struct LiveMore {
    /// `LIVE_MORE` and a second handle to `GLOBAL`, until the thread takes them.
    growth: Option<LiveGrowth>,
    /// The map put in `LIVE_MORE` (for purging a process's entries), once made.
    pub(crate) map: Option<LiveMap>,
    status: LaterLiveBlocks,
    /// Where the next sum of the processes' live blocks starts (the engine's
    /// `live_blocks_now`).
    pub(crate) sum_cursor: usize,
}

impl LiveMore {
    /// `blocks` preallocated entries to reserve after load (0: none) in `slot`
    /// (`LIVE_MORE`); `global` is a handle of `GLOBAL` the thread may read.
    pub(crate) fn new(
        slot: ArrayOfMaps<MapData, LiveMap>,
        global: Option<Array<MapData, u64>>,
        blocks: u32,
    ) -> LiveMore {
        let growth = match global {
            Some(global) if blocks > 0 => Some(LiveGrowth {
                slot,
                global,
                blocks,
            }),
            _ => None,
        };
        let status = match growth {
            Some(_) => LaterLiveBlocks::Waiting { blocks },
            None => LaterLiveBlocks::None,
        };
        LiveMore {
            growth,
            map: None,
            status,
            sum_cursor: 0,
        }
    }

    /// What became of the entries.
    pub(crate) fn status(&self) -> LaterLiveBlocks {
        self.status.clone()
    }

    /// What the thread needs, once (None: nothing to reserve, or taken).
    pub(crate) fn take_growth(&mut self) -> Option<LiveGrowth> {
        self.growth.take()
    }

    /// The map is made: from now on purges cover it (before the programs can put
    /// anything in it).
    fn made(&mut self, map: LiveMap, blocks: u32) {
        self.map = Some(map);
        self.status = LaterLiveBlocks::Reserved { blocks };
    }

    fn failed(&mut self, blocks: u32, reason: String) {
        self.status = LaterLiveBlocks::Failed { blocks, reason };
    }
}

/// What the thread needs: no engine lock while it waits, makes the map (tens of ms for
/// half a million entries) or puts it in place (the kernel waits for an RCU grace
/// period there).
pub(crate) struct LiveGrowth {
    slot: ArrayOfMaps<MapData, LiveMap>,
    global: Array<MapData, u64>,
    blocks: u32,
}

impl LiveGrowth {
    /// Whether the overflow maps hold entries now: some process keeps a block live
    /// beyond `LIVE`.
    fn spilled(&self) -> bool {
        let read = |slot| self.global.get(&slot, 0).unwrap_or(0);
        read(global::LIVE_OVERFLOW_COUNT).wrapping_sub(read(global::LIVE_OVERFLOW_PURGED)) != 0
    }

    /// The map of the preallocated entries, as the kernel makes it; one handle for the
    /// slot, one for the engine.
    fn make(&self) -> std::io::Result<(LiveMap, LiveMap)> {
        let fd = create_plain_map(&PlainMap {
            name: map_names::LIVE_MORE,
            map_type: bpf_map_type::BPF_MAP_TYPE_HASH,
            key_size: size_of::<LiveKey>() as u32,
            value_size: size_of::<LiveBlock>() as u32,
            max_entries: self.blocks,
            map_flags: 0,
            inner_map: None,
        })?;
        let second = fd.as_fd().try_clone_to_owned()?;
        let live_map = |fd| map_from_fd::<LiveMap>(fd).map_err(std::io::Error::other);
        Ok((live_map(fd)?, live_map(second)?))
    }

    /// Waits until the tracked processes keep [`GROW_AT_LIVE_BLOCKS`] blocks live, or
    /// spill past `LIVE` (or the tracker is gone), then reserves the entries.
    fn run(mut self, host: Weak<dyn Host>) {
        let threshold = u64::from(GROW_AT_LIVE_BLOCKS);
        // Counted in a cycle: a count that only grows would run out after 99 days of
        // polls, and the loop end with it.
        for poll in (1..=SUM_EVERY).cycle() {
            std::thread::sleep(POLL);
            if self.spilled() {
                break;
            }
            if poll == SUM_EVERY {
                let Some(host) = host.upgrade() else {
                    return;
                };
                if host.live_blocks_now() >= threshold {
                    break;
                }
            } else if host.strong_count() == 0 {
                return;
            }
        }
        let made = self.make();
        let Some(host) = host.upgrade() else {
            return;
        };
        let blocks = self.blocks;
        let (for_slot, for_engine) = match made {
            Ok(maps) => maps,
            Err(e) => {
                host.with_live_more(&mut |more| more.failed(blocks, e.to_string()));
                return;
            }
        };
        // The engine first, so that a process forgotten from now on has its entries in
        // the new map purged too; the programs use the map once it is in the slot.
        let mut for_engine = Some(for_engine);
        host.with_live_more(&mut |more| {
            if let Some(map) = for_engine.take() {
                more.made(map, blocks);
            }
        });
        if let Err(e) = self.slot.set(0, &for_slot, 0) {
            // Nothing was put in the map: the blocks stay on demand.
            host.with_live_more(&mut |more| {
                more.map = None;
                more.failed(blocks, format!("putting the map in `LIVE_MORE`: {e}"));
            });
        }
    }
}

/// Starts the thread that reserves `growth` for the tracker of `host`.
pub(crate) fn start(growth: LiveGrowth, host: Weak<dyn Host>) {
    // Without a thread the entries are never reserved: the blocks beyond `LIVE` stay
    // on demand, exact all the same.
    let _ = std::thread::Builder::new()
        .name("memtrack-live".into())
        .spawn(move || growth.run(host));
}
