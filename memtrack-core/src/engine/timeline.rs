//! The timeline's user-space half: the finished buckets the programs hand over through
//! `TIMELINE_RING` (kept by process and scope until asked for), the buckets each CPU
//! still fills (`TIMELINE`, read at the end of a scope), each process's resident memory
//! (`RSS_NOW`, seeded from `/proc/PID/status` when a process or image is first seen), and
//! the address spaces the RSS tracepoint learnt (`MM_SLOTS`). memtrack-record's
//! `TimelineBuilder` lays the buckets on one grid.

use std::collections::HashMap as StdHashMap;

use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use memtrack_common::{
    PidStats, map_names,
    timeline::{RssNow, TimelineCpu, TimelineRecord, seen},
};

use super::{
    maps::{map_err, take_map},
    object::Object,
    slots::OwnedSlot,
};
use crate::{
    error::Result,
    record::timeline::{EventKind, Sample, Timeline, TimelineBuilder, TimelineEvent},
};

/// Which series a tracker's timelines have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimelineSettings {
    /// Bytes mapped by `mmap`/`brk` (the syscall counter is attached).
    pub(crate) mapped: bool,
    /// Resident memory (the `rss_stat` tracepoint is attached).
    pub(crate) rss: bool,
}

/// The timeline maps, and the finished buckets read so far.
pub(crate) struct Timelines {
    cpu: PerCpuArray<MapData, TimelineCpu>,
    ring: RingBuf<MapData>,
    rss_now: Array<MapData, RssNow>,
    mm_slots: HashMap<MapData, u32, u32>,
    /// Finished buckets by (tgid, slot generation), in the order they came.
    finished: StdHashMap<(u32, u32), Vec<TimelineCpu>>,
    settings: TimelineSettings,
}

impl Timelines {
    /// Takes the timeline maps out of `object`.
    pub(crate) fn take(object: &mut Object, settings: TimelineSettings) -> Result<Self> {
        Ok(Timelines {
            cpu: take_map(object, map_names::TIMELINE)?,
            ring: take_map(object, map_names::TIMELINE_RING)?,
            rss_now: take_map(object, map_names::RSS_NOW)?,
            mm_slots: take_map(object, map_names::MM_SLOTS)?,
            finished: StdHashMap::new(),
            settings,
        })
    }

    /// Files every finished bucket the ring buffer holds by its process and scope.
    pub(crate) fn drain(&mut self) {
        while let Some(item) = self.ring.next() {
            if item.len() < size_of::<TimelineRecord>() {
                continue;
            }
            // SAFETY: the programs write whole TimelineRecords (plain integers; any bit
            // pattern is valid), and the item holds at least that many bytes.
            let record: TimelineRecord = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            self.finished
                .entry((record.tgid, record.bucket.generation))
                .or_default()
                .push(record.bucket);
        }
    }

    /// The timeline of `pid`'s current scope (its slot `slot`, whose counters are
    /// `stats`) up to now, its times ns since `process_start_ns` (the process's start,
    /// `CLOCK_MONOTONIC`).
    pub(crate) fn read(
        &mut self,
        pid: u32,
        slot: OwnedSlot,
        stats: &PidStats,
        process_start_ns: u64,
    ) -> Result<Timeline> {
        self.drain();
        let generation = slot.value.generation;
        let origin = slot.value.origin_ns;
        let mut builder = TimelineBuilder::new(origin.saturating_sub(process_start_ns));
        for bucket in self.finished.get(&(pid, generation)).into_iter().flatten() {
            builder.add(sample(bucket));
        }
        let open = self
            .cpu
            .get(&slot.index, 0)
            .map_err(map_err(map_names::TIMELINE))?;
        for bucket in open.iter() {
            if bucket.generation == generation && bucket.seen != 0 {
                builder.add(sample(bucket));
            }
        }
        builder.lose(stats.timeline_lost_buckets);
        if self.settings.rss {
            builder.rss_start(self.rss_before(slot.index, pid, generation));
        }
        let now = crate::monotonic_ns();
        let mut timeline = builder.finish(
            now.saturating_sub(origin),
            stats.live_bytes,
            self.settings.mapped,
            self.settings.rss,
        );
        if stats.peak_time_ns != 0 && stats.peak_live_bytes != 0 {
            timeline.add_event(TimelineEvent {
                t_ns: stats.peak_time_ns.saturating_sub(process_start_ns),
                what: EventKind::Peak {
                    bytes: stats.peak_live_bytes,
                },
            });
        }
        Ok(timeline)
    }

    /// The resident memory of `pid` (in slot `index`) before the first change of it in
    /// its scope `generation` (anonymous, file, shared memory): the values the first
    /// finished bucket ended with, or with none, what it has now (`RSS_NOW`: then it did
    /// not change in the scope, or only in the buckets still open, whose ends are as
    /// near).
    fn rss_before(&self, index: u32, pid: u32, generation: u32) -> [u64; 3] {
        let first = self
            .finished
            .get(&(pid, generation))
            .into_iter()
            .flatten()
            .filter(|b| b.seen & seen::RSS != 0)
            .min_by_key(|b| b.rss_end_ns);
        if let Some(b) = first {
            return [b.rss_anon, b.rss_file, b.rss_shmem];
        }
        match self.rss_now.get(&index, 0) {
            Ok(now) if now.tgid == pid => [now.bytes[1], now.bytes[0], now.bytes[3]],
            _ => [0; 3],
        }
    }

    /// Forgets the finished buckets of `pid`'s scopes other than `generation` (its
    /// counters were just reset).
    pub(crate) fn reset(&mut self, pid: u32, generation: u32) {
        self.finished
            .retain(|&(tgid, g), _| tgid != pid || g == generation);
    }

    /// Sets what `pid` (in slot `index`) has resident now from `/proc/PID/status`
    /// (its new image, or a process first seen): the tracepoint says only what changes.
    pub(crate) fn seed_rss(&mut self, pid: u32, index: u32) {
        if !self.settings.rss {
            return;
        }
        let Some(bytes) = proc_rss(pid) else {
            return;
        };
        let _ = self.rss_now.set(
            index,
            RssNow {
                tgid: pid,
                mm_id: 0,
                bytes,
            },
            0,
        );
    }

    /// Forgets `pid` (in slot `index`): its address space's entry in `MM_SLOTS` and its
    /// finished buckets.
    pub(crate) fn forget(&mut self, pid: u32, index: u32) {
        if let Ok(now) = self.rss_now.get(&index, 0)
            && now.tgid == pid
            && now.mm_id != 0
        {
            let _ = self.mm_slots.remove(&now.mm_id);
        }
        self.finished.retain(|&(tgid, _), _| tgid != pid);
    }
}

/// A kernel bucket as the record's builder takes it.
fn sample(b: &TimelineCpu) -> Sample {
    let width = 1u64 << b.shift.min(63);
    Sample {
        start_ns: b.index.saturating_mul(width),
        width_ns: width,
        heap: (b.seen & seen::HEAP != 0).then_some((
            b.heap_min,
            b.heap_max,
            b.heap_end,
            b.heap_end_ns,
        )),
        mapped: (b.seen & seen::MAPPED != 0).then_some((
            b.mapped_max,
            b.mapped_end,
            b.mapped_end_ns,
        )),
        rss: (b.seen & seen::RSS != 0).then_some((
            b.rss_max,
            [b.rss_anon, b.rss_file, b.rss_shmem],
            b.rss_end_ns,
        )),
    }
}

/// `pid`'s resident bytes by `rss_stat` member (file, anonymous, swap, shared memory)
/// from `/proc/PID/status` (`RssFile`, `RssAnon`, `VmSwap`, `RssShmem`, in kB).
fn proc_rss(pid: u32) -> Option<[u64; 4]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Some([
        kb("RssFile:"),
        kb("RssAnon:"),
        kb("VmSwap:"),
        kb("RssShmem:"),
    ])
}
