//! The user-space half of in-kernel stacks: loads each object's unwind rows into the
//! shared `UNWIND_ROWS` array (each object once per tracker), writes each process's
//! executable mappings into `MAPPINGS`, and reads the interned stacks and per-stack
//! counters back as [`ProcessStacks`].

use std::{
    collections::{BTreeMap, HashMap as StdHashMap},
    sync::Arc,
};

use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use memtrack_common::{
    PidStats,
    stacks::{
        KernelStackCounts, LOST_STACK, MAX_MAPPINGS, MappingEntry, ProcessMappings, StackKey, frame,
    },
    unwind::UnwindRow,
};
use memtrack_targets::unwind::{UnwindCache, UnwindObject};

use crate::{
    engine::maps::{map_err, take_map},
    error::Result,
    stacks::{
        Frame, ProcessStacks, Stack, StackCounts, StackEnd, StackEntry, StackObject, StackWalks,
    },
};

/// Capacity of `UNWIND_ROWS` with stacks on, in rows of 8 bytes (16 MiB: libc has about
/// 24,000 rows, a large C++ program a few hundred thousand).
pub(crate) const MAX_ROWS: u32 = 1 << 21;
/// Capacity of `STACK_IDS` with stacks on: distinct stacks across all processes (each
/// entry holds a 512-byte key, preallocated: about 8.5 MiB).
pub(crate) const MAX_STACKS: u32 = 1 << 14;
/// Capacity of `STACK_COUNTS` with stacks on: (process, stack) pairs.
pub(crate) const MAX_STACK_COUNTS: u32 = 1 << 16;

/// Where one object's rows are in `UNWIND_ROWS`.
#[derive(Clone, Copy, Debug)]
struct Loaded {
    object: u32,
    first_row: u32,
    rows: u32,
}

/// Stack state of one tracker (stacks on).
pub(crate) struct KernelStacks {
    depth: u32,
    cache: UnwindCache,
    /// Objects by the address of their shared table (the cache hands out one `Arc` per
    /// table), with where their rows went.
    loaded: StdHashMap<usize, Loaded>,
    /// Keeps every loaded table alive, so the addresses above stay unique.
    tables: Vec<Arc<UnwindObject>>,
    objects: Vec<StackObject>,
    next_row: u32,
    /// The stamp of the last `MAPPINGS` value written (`ProcessMappings::generation`):
    /// each write takes the next one, so the unwinder's per-CPU cache of frame lookups
    /// never answers from an older list of mappings.
    generation: u32,
    rows: Array<MapData, UnwindRow>,
    mappings: HashMap<MapData, u32, ProcessMappings>,
    ids: HashMap<MapData, StackKey, u32>,
    counts: HashMap<MapData, u64, KernelStackCounts>,
    walks: PerCpuArray<MapData, u64>,
    /// Stacks of processes that ended (read before their counters left the kernel).
    finished: BTreeMap<u32, ProcessStacks>,
    /// The stacks of the images each live process ran before its last exec, read at
    /// each exec ([`close_image`](Self::close_image)): their scopes in
    /// `earlier_images`, oldest first, sharing one table (the process scope unused).
    earlier: BTreeMap<u32, ProcessStacks>,
}

impl KernelStacks {
    /// Takes the stack maps out of an object loaded with its depth global set to `depth`.
    pub(crate) fn new(
        object: &mut crate::engine::object::Object,
        depth: u32,
    ) -> Result<KernelStacks> {
        use memtrack_common::map_names as n;
        Ok(KernelStacks {
            depth,
            cache: UnwindCache::new(),
            loaded: StdHashMap::new(),
            tables: Vec::new(),
            objects: Vec::new(),
            next_row: 0,
            generation: 0,
            rows: take_map(object, n::UNWIND_ROWS)?,
            mappings: take_map(object, n::MAPPINGS)?,
            ids: take_map(object, n::STACK_IDS)?,
            counts: take_map(object, n::STACK_COUNTS)?,
            walks: take_map(object, n::STACK_WALKS)?,
            finished: BTreeMap::new(),
            earlier: BTreeMap::new(),
        })
    }

    /// The kernel's counts of walked and reused stacks, summed over the CPUs (0 where
    /// a counter cannot be read).
    pub(crate) fn walks(&self) -> StackWalks {
        use memtrack_common::stack_cache::walks;
        let sum = |i: u32| -> u64 {
            self.walks
                .get(&i, 0)
                .map(|per_cpu| per_cpu.iter().sum())
                .unwrap_or(0)
        };
        StackWalks {
            walked: sum(walks::WALKED),
            reused: sum(walks::REUSED),
        }
    }

    /// Loads the tables of every executable mapping of `pid` (new objects only) and
    /// replaces its mapping entry. Called at start, after each exec and each `dlopen`.
    pub(crate) fn refresh(&mut self, pid: u32) -> Result<()> {
        let (found, _skipped) = self.cache.process_mappings(pid)?;
        let mut entries: Vec<MappingEntry> = Vec::with_capacity(found.len());
        for m in &found {
            let loaded = self.load(&m.object)?;
            entries.push(MappingEntry {
                start: m.start,
                end: m.end,
                bias: m.bias,
                first_row: loaded.first_row,
                rows: loaded.rows,
                object: loaded.object,
                _pad: 0,
            });
        }
        entries.sort_by_key(|e| e.start);
        let mut value = Box::new(ProcessMappings::EMPTY);
        for (slot, e) in value.entries.iter_mut().zip(entries.iter()) {
            *slot = *e;
        }
        value.count = entries.len().min(MAX_MAPPINGS) as u32;
        // Never 0 (an empty slot's stamp); wrapping takes 2^32 refreshes of one tracker.
        self.generation = self.generation.checked_add(1).unwrap_or(1);
        value.generation = self.generation;
        self.mappings
            .insert(pid, *value, 0)
            .map_err(map_err(memtrack_common::map_names::MAPPINGS))
    }

    /// Gives `child`, just forked from `parent`, its parent's mapping entry (the same
    /// mappings; their objects' rows are loaded already); reads its maps when the
    /// parent has no entry.
    pub(crate) fn inherit(&mut self, child: u32, parent: u32) -> Result<()> {
        match self.mappings.get(&parent, 0) {
            Ok(value) => self
                .mappings
                .insert(child, value, 0)
                .map_err(map_err(memtrack_common::map_names::MAPPINGS)),
            Err(_) => self.refresh(child),
        }
    }

    /// The extent of `object`'s rows, loading them if new. A table that does not fit
    /// gets no rows (its frames end stacks as unknown, counted in the stacks).
    fn load(&mut self, object: &Arc<UnwindObject>) -> Result<Loaded> {
        let key = Arc::as_ptr(object) as usize;
        if let Some(l) = self.loaded.get(&key) {
            return Ok(*l);
        }
        let id = self.objects.len() as u32;
        self.objects.push(StackObject {
            path: object.info.path.clone(),
            build_id: object.info.build_id_hex(),
        });
        let rows = object.table.rows();
        let fits = id < frame::MAX_OBJECTS
            && u64::from(self.next_row) + rows.len() as u64 <= u64::from(MAX_ROWS);
        let loaded = if fits {
            let first_row = self.next_row;
            for (i, row) in rows.iter().enumerate() {
                self.rows
                    .set(first_row + i as u32, *row, 0)
                    .map_err(map_err(memtrack_common::map_names::UNWIND_ROWS))?;
            }
            self.next_row += rows.len() as u32;
            Loaded {
                object: id,
                first_row,
                rows: rows.len() as u32,
            }
        } else {
            Loaded {
                object: id,
                first_row: 0,
                rows: 0,
            }
        };
        self.loaded.insert(key, loaded);
        self.tables.push(Arc::clone(object));
        Ok(loaded)
    }

    /// The stacks of `pid`: kept from its end, or read from the kernel now, given its
    /// raw counters `stats`, with those of the images it ran before its last exec.
    pub(crate) fn read(&self, pid: u32, stats: Option<&PidStats>) -> ProcessStacks {
        if let Some(done) = self.finished.get(&pid) {
            return done.clone();
        }
        let mut out = self.read_image(pid, stats);
        if let Some(earlier) = self.earlier.get(&pid) {
            out.push_earlier_images_of(earlier);
        }
        out
    }

    /// `pid` just exec'd (it is stopped at the exec event): keeps the stacks of the
    /// image it left, read from the kernel with that image's raw counters `stats`, as
    /// its next earlier image, from its start (the previous exec's end, or
    /// `process_start_ns` for the first image) to now. Its per-stack counters stay in
    /// the kernel until [`reset`](Self::reset).
    ///
    /// Nothing of the old image's address space is needed: each frame was stored by
    /// the kernel as an address inside an object (its ELF virtual address, resolved
    /// through `MAPPINGS` when the allocation happened), and the objects' paths and
    /// build ids are in this tracker's table, so the image's stacks are symbolized
    /// after the run from the files, as any image's are.
    pub(crate) fn close_image(&mut self, pid: u32, stats: &PidStats, process_start_ns: u64) {
        let mut image = self.read_image(pid, Some(stats));
        let kept = self.earlier.entry(pid).or_default();
        image.process.start_ns = kept
            .earlier_images
            .last()
            .map_or(process_start_ns, |previous| previous.end_ns);
        kept.push_earlier_image(&image, &image.process);
    }

    /// The stacks the kernel holds for `pid`'s current image now, given its raw
    /// counters `stats`.
    fn read_image(&self, pid: u32, stats: Option<&PidStats>) -> ProcessStacks {
        let epoch = stats.map_or(0, |s| s.peak_epoch);
        let raw: Vec<(u64, KernelStackCounts)> = self
            .counts
            .iter()
            .filter_map(|r| r.ok())
            .filter(|(key, _)| (key >> 32) as u32 == pid)
            .collect();
        // The allocation clock now: the process's bytes allocated, which the blocks with
        // a stack add up to (at least: blocks whose stack's counters could not even be
        // created move it too), read after them so that no block read was born later.
        let stacks_clock = raw
            .iter()
            .fold(0u64, |sum, (_, c)| sum.wrapping_add(c.alloc_bytes));
        let clock = stats.map_or(stacks_clock, |s| s.bytes_allocated.max(stacks_clock));
        let mut by_id: BTreeMap<u32, StackCounts> = BTreeMap::new();
        let mut lost = StackCounts {
            total_lifetime: Some(0),
            ..StackCounts::default()
        };
        for (key, c) in raw {
            let counts = to_counts(&c, epoch, clock);
            if key as u32 == LOST_STACK {
                lost = counts;
            } else {
                by_id.insert(key as u32, counts);
            }
        }
        let mut frames_of: StdHashMap<u32, StackKey> = StdHashMap::new();
        for (key, id) in self.ids.iter().filter_map(|r| r.ok()) {
            if by_id.contains_key(&id) {
                frames_of.insert(id, key);
            }
        }
        let mut out = ProcessStacks {
            depth_limit: self.depth,
            ..ProcessStacks::default()
        };
        let mut object_ids: BTreeMap<u32, u32> = BTreeMap::new();
        for (id, counts) in by_id {
            let Some(key) = frames_of.get(&id) else {
                lost.add(&counts);
                continue;
            };
            let stack = decode(key, |o| {
                let next = object_ids.len() as u32;
                *object_ids.entry(o).or_insert_with(|| {
                    out.objects
                        .push(self.objects.get(o as usize).cloned().unwrap_or_default());
                    next
                })
            });
            out.process.entries.push(StackEntry {
                stack: out.stacks.len() as u32,
                counts,
            });
            out.stacks.push(stack);
        }
        out.process.lost = lost;
        // The caller moves the end to the process's exit or the region's end
        // (`ScopeStacks::set_end`); the lifetimes of the blocks live now run to `clock`,
        // which only allocations move.
        out.process.end_ns = crate::monotonic_ns();
        out.process.peak_ns = stats.and_then(|s| (s.peak_time_ns != 0).then_some(s.peak_time_ns));
        out.process.peak_bytes_allocated =
            stats.and_then(|s| (s.peak_time_ns != 0).then_some(s.peak_bytes_allocated));
        out.process.bytes_allocated = Some(clock);
        out
    }

    /// Keeps `pid`'s stacks (it ended), its earlier images' with them, and removes its
    /// entries from the kernel.
    pub(crate) fn finish(&mut self, pid: u32, stats: Option<&PidStats>) {
        let stacks = self.read(pid, stats);
        self.earlier.remove(&pid);
        self.finished.insert(pid, stacks);
        let _ = self.mappings.remove(&pid);
        self.purge(pid);
    }

    /// Removes `pid`'s per-stack counters and live-block stack ids from the kernel.
    fn purge(&mut self, pid: u32) {
        let keys: Vec<u64> = self
            .counts
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| (k >> 32) as u32 == pid)
            .collect();
        for k in keys {
            let _ = self.counts.remove(&k);
        }
    }

    /// Zeroes `pid`'s per-stack counters (with its process counters). The stacks of
    /// its earlier images are kept, as the record keeps their counters.
    pub(crate) fn reset(&mut self, pid: u32) {
        self.finished.remove(&pid);
        self.purge(pid);
    }
}

/// A stack's counters as read when the process's allocation clock (its bytes
/// allocated) was at `clock`, given the process's final peak epoch.
fn to_counts(c: &KernelStackCounts, epoch: u64, clock: u64) -> StackCounts {
    let (at_peak_blocks, at_peak_bytes) = c.at_peak(epoch);
    StackCounts {
        alloc_blocks: c.alloc_blocks,
        alloc_bytes: c.alloc_bytes,
        freed_blocks: c.freed_blocks,
        freed_bytes: c.freed_bytes,
        live_blocks: c.live_blocks(),
        live_bytes: c.live_bytes(),
        at_peak_blocks,
        at_peak_bytes,
        max_live_bytes: c.max_live_bytes,
        max_live_blocks: c.max_live_blocks,
        total_lifetime: Some(c.total_lifetime(clock)),
    }
}

/// A kernel stack key as a [`Stack`]; `object` maps a tracker object id to the
/// process's object index.
fn decode(key: &StackKey, mut object: impl FnMut(u32) -> u32) -> Stack {
    let mut frames = Vec::new();
    let mut end = StackEnd::Unknown;
    for &slot in key.frames.iter() {
        if slot == 0 {
            break;
        }
        let end_bits = slot >> frame::END_SHIFT;
        let tag = (slot >> frame::OBJECT_SHIFT) & frame::OBJECT_MASK;
        if slot & !(3 << frame::END_SHIFT) != frame::NO_FRAME {
            frames.push(Frame {
                object: (tag != 0).then(|| object(tag as u32 - 1)),
                address: slot & frame::ADDRESS_MASK,
                interrupted: slot & frame::INTERRUPTED != 0,
            });
        }
        if end_bits != frame::end::NONE {
            end = match end_bits {
                frame::end::COMPLETE => StackEnd::Complete,
                frame::end::TRUNCATED => StackEnd::Truncated,
                _ => StackEnd::Unknown,
            };
            break;
        }
    }
    Stack { frames, end }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The book's table of limits (docs/src/reference/limits.md) gives these private
    /// capacities under their names here (memtrack-examples' tests/book.rs checks the
    /// public ones).
    #[test]
    fn the_limits_chapter_gives_the_stack_maps_capacities() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/src/reference/limits.md"
        );
        if !std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).exists() {
            // The published crate, outside memtrack's repository: no book beside it.
            return;
        }
        let chapter = std::fs::read_to_string(path).expect("the limits chapter reads");
        for (name, value) in [
            ("engine::kernel_stacks::MAX_ROWS", MAX_ROWS),
            ("engine::kernel_stacks::MAX_STACKS", MAX_STACKS),
            ("engine::kernel_stacks::MAX_STACK_COUNTS", MAX_STACK_COUNTS),
        ] {
            let row = chapter
                .lines()
                .find(|l| l.contains(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("no row of {name} in {path}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert_eq!(
                cells[2].replace(',', "").parse::<u32>().ok(),
                Some(value),
                "{name} in {path}"
            );
        }
    }

    #[test]
    fn keys_decode_to_frames_and_ends() {
        let mut key = StackKey::ZERO;
        key.frames[0] = (1 << frame::OBJECT_SHIFT) | 0x11c9;
        key.frames[1] = (3 << frame::OBJECT_SHIFT) | 0x1201 | frame::INTERRUPTED;
        key.frames[2] = 0x7fff_0000_1234 | (frame::end::UNKNOWN << frame::END_SHIFT);
        let stack = decode(&key, |o| o * 10);
        assert_eq!(
            stack,
            Stack {
                frames: vec![
                    Frame::returning_to(Some(0), 0x11c9),
                    Frame {
                        object: Some(20),
                        address: 0x1201,
                        interrupted: true
                    },
                    Frame::returning_to(None, 0x7fff_0000_1234),
                ],
                end: StackEnd::Unknown,
            }
        );
        let mut empty = StackKey::ZERO;
        empty.frames[0] = frame::NO_FRAME | (frame::end::COMPLETE << frame::END_SHIFT);
        assert_eq!(
            decode(&empty, |o| o),
            Stack {
                frames: vec![],
                end: StackEnd::Complete
            }
        );
    }

    #[test]
    fn at_peak_is_the_live_value_when_a_peak_came_after_the_last_change() {
        let c = KernelStackCounts {
            alloc_blocks: 5,
            alloc_bytes: 50,
            freed_blocks: 3,
            freed_bytes: 30,
            epoch: 3,
            peak_blocks: 1,
            peak_bytes: 7,
            ..KernelStackCounts::default()
        };
        let counts = to_counts(&c, 4, 0);
        assert_eq!((counts.at_peak_blocks, counts.at_peak_bytes), (2, 20));
        let counts = to_counts(&c, 3, 0);
        assert_eq!((counts.at_peak_blocks, counts.at_peak_bytes), (1, 7));
    }

    /// Released blocks' lifetimes plus the live ones' up to the read, from the wrapping
    /// sum of their allocation times: exact even when that sum wrapped. Times are on
    /// the allocation clock (bytes allocated).
    #[test]
    fn total_lifetime_adds_the_live_blocks_up_to_the_read() {
        // Released: born at 10 and 20, released at 25 and 35 (30 bytes allocated in
        // all). Live: born at 100 and 250, read at 1000.
        let c = KernelStackCounts {
            alloc_blocks: 4,
            freed_blocks: 2,
            born_at_sum: 10 + 20 + 100 + 250,
            freed_at_sum: 25 + 35,
            ..KernelStackCounts::default()
        };
        assert_eq!(to_counts(&c, 0, 1000).total_lifetime, Some(30 + 900 + 750));
        // Born near the end of the clock's range: the sums wrapped. Released: born at
        // MAX - 20, released at MAX - 15 (5 bytes). Live: born at MAX - 10 and MAX - 4.
        let born = [u64::MAX - 20, u64::MAX - 10, u64::MAX - 4];
        let c = KernelStackCounts {
            alloc_blocks: 3,
            freed_blocks: 1,
            born_at_sum: born[0].wrapping_add(born[1]).wrapping_add(born[2]),
            freed_at_sum: u64::MAX - 15,
            ..KernelStackCounts::default()
        };
        assert_eq!(
            to_counts(&c, 0, u64::MAX - 1).total_lifetime,
            Some(5 + 9 + 3)
        );
    }
}
