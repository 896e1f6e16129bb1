//! When the memory goes: a process's (or a benchmark region's) memory over time, in
//! buckets of one width, each with the lowest, highest and last live heap bytes in it,
//! the resident memory and the bytes mapped by `mmap`/`brk`, and the events that explain
//! the shape (regions, exec, children, the peak).
//!
//! How it is exact: the kernel keeps, per CPU and process, the lowest and highest value
//! each event left behind in the bucket it fell in (memtrack-common's `timeline`), so a
//! spike shorter than a bucket shows at its full height, and the largest maximum of a
//! timeline is its scope's `peak_live_bytes`. The kernel's buckets start narrow (1 µs)
//! and double as the scope ages; [`TimelineBuilder`] lays them on one grid of at most
//! [`MAX_BUCKETS`] buckets, merging neighbours (the width doubles again) as needed, so a
//! 2 ms process and a 2 hour one both get a fine, bounded timeline.
//!
//! Only the buckets where something changed are listed (and always the first and the
//! last): a bucket of the grid that is not listed had no event, so every series stayed
//! at the value the listed bucket before it ended with (its minimum, maximum and end all
//! that value). A short or quiet process keeps a few buckets, not 1,024.
//!
//! Times are ns since the process started (its `started_ns`): a benchmark region's
//! timeline starts where the region did.

use serde::{Deserialize, Serialize};

/// The most buckets a timeline has.
pub const MAX_BUCKETS: usize = memtrack_common::timeline::LEVEL_BUCKETS as usize;

/// The narrowest bucket, ns.
pub const MIN_BUCKET_NS: u64 = 1 << memtrack_common::timeline::MIN_SHIFT;

/// Memory over time of one scope (a process, an image, a benchmark region).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// Width of every bucket, ns: a power of two, at least [`MIN_BUCKET_NS`].
    pub bucket_ns: u64,
    /// The buckets where something changed, in time order, on one grid from the scope's
    /// start (each `t_ns` a whole number of widths after the first's): the first and
    /// the last always, a bucket not listed holding the end values of the one before
    /// it; at most
    /// [`MAX_BUCKETS`].
    pub buckets: Vec<Bucket>,
    /// What happened, in time order.
    #[serde(default)]
    pub events: Vec<TimelineEvent>,
    /// Finished buckets the kernel could not hand over (its ring buffer was full): the
    /// buckets around them may miss an extreme. 0: nothing lost.
    #[serde(default)]
    pub lost_buckets: u64,
}

/// One bucket: `[t_ns, t_ns + bucket_ns)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// The bucket's start, ns since the process started.
    pub t_ns: u64,
    /// Lowest live heap bytes in the bucket.
    pub min_bytes: u64,
    /// Highest live heap bytes in the bucket.
    pub max_bytes: u64,
    /// Live heap bytes at the bucket's end.
    pub end_bytes: u64,
    /// Highest resident bytes (file, anonymous and shared pages) in the bucket; None
    /// when resident memory was not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_max_bytes: Option<u64>,
    /// Resident bytes at the bucket's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_end_bytes: Option<u64>,
    /// Of them, anonymous pages' bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_anon_bytes: Option<u64>,
    /// Of them, file-backed pages' bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_file_bytes: Option<u64>,
    /// Of them, shared-memory pages' bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_shmem_bytes: Option<u64>,
    /// Highest bytes mapped by `mmap`/`brk` (mapped less unmapped, the program break's
    /// growth less its shrinking) in the bucket; None when the syscalls were not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapped_max_bytes: Option<u64>,
    /// Bytes mapped at the bucket's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapped_end_bytes: Option<u64>,
}

/// Something that happened at `t_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEvent {
    /// When, ns since the process started.
    pub t_ns: u64,
    /// What.
    pub what: EventKind,
}

/// What a [`TimelineEvent`] is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A benchmark region began.
    RegionStart {
        /// Its uri.
        uri: String,
    },
    /// A benchmark region ended (or the process ended inside it: `unfinished`).
    RegionEnd {
        /// Its uri.
        uri: String,
        /// The process ended inside it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unfinished: bool,
    },
    /// The process called `execve`: the image before it ends here.
    Exec {
        /// The new image's command line.
        command: Vec<String>,
    },
    /// The process started a child process.
    Child {
        /// The child's pid.
        pid: u32,
    },
    /// The live heap bytes reached the scope's peak (the latest of equal peaks).
    Peak {
        /// The peak, in bytes.
        bytes: u64,
    },
}

/// What is wrong with a timeline (found by [`Timeline::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidTimeline {
    /// The bucket width is not a power of two of at least [`MIN_BUCKET_NS`].
    #[error("bucket width {0} ns is not a power of two of at least {MIN_BUCKET_NS} ns")]
    Width(u64),
    /// More buckets than a timeline has.
    #[error("{0} buckets, more than the {MAX_BUCKETS} a timeline has")]
    TooMany(usize),
    /// A bucket does not start one width after the one before it.
    #[error("bucket {index} starts at {t_ns} ns, not one bucket after the one before it")]
    NotIncreasing {
        /// The bucket's index.
        index: usize,
        /// Its start.
        t_ns: u64,
    },
    /// A bucket's minimum is above its maximum, or its end outside them.
    #[error("bucket {index} (at {t_ns} ns): minimum {min} B, maximum {max} B, end {end} B")]
    Envelope {
        /// The bucket's index.
        index: usize,
        /// Its start.
        t_ns: u64,
        /// Its minimum.
        min: u64,
        /// Its maximum.
        max: u64,
        /// Its end.
        end: u64,
    },
    /// A bucket's maximum is above the scope's peak.
    #[error("bucket {index} (at {t_ns} ns) reaches {max} B, above the peak of {peak} B")]
    AbovePeak {
        /// The bucket's index.
        index: usize,
        /// Its start.
        t_ns: u64,
        /// Its maximum.
        max: u64,
        /// The scope's `peak_live_bytes`.
        peak: u64,
    },
    /// The events are not in time order.
    #[error("event {index} at {t_ns} ns comes before the one ahead of it")]
    EventOrder {
        /// The event's index.
        index: usize,
        /// Its time.
        t_ns: u64,
    },
}

impl Timeline {
    /// The highest live heap bytes of any bucket (0 without buckets).
    pub fn max_bytes(&self) -> u64 {
        self.buckets.iter().map(|b| b.max_bytes).max().unwrap_or(0)
    }

    /// The live heap bytes at the end of the last bucket (0 without buckets).
    pub fn end_bytes(&self) -> u64 {
        self.buckets.last().map_or(0, |b| b.end_bytes)
    }

    /// When the timeline starts, ns since the process started.
    pub fn start_ns(&self) -> u64 {
        self.buckets.first().map_or(0, |b| b.t_ns)
    }

    /// When it ends, ns since the process started.
    pub fn end_ns(&self) -> u64 {
        self.buckets
            .last()
            .map_or(0, |b| b.t_ns.saturating_add(self.bucket_ns))
    }

    /// Checks that the buckets are in time order on one grid of their width, each with
    /// its minimum at most its end and maximum, no maximum above `peak` (the scope's
    /// `peak_live_bytes`), and that the events are in time order.
    pub fn validate(&self, peak: u64) -> Result<(), InvalidTimeline> {
        if self.buckets.is_empty() && self.events.is_empty() {
            return Ok(());
        }
        if !self.bucket_ns.is_power_of_two() || self.bucket_ns < MIN_BUCKET_NS {
            return Err(InvalidTimeline::Width(self.bucket_ns));
        }
        if self.buckets.len() > MAX_BUCKETS {
            return Err(InvalidTimeline::TooMany(self.buckets.len()));
        }
        for (index, b) in self.buckets.iter().enumerate() {
            let first = self.buckets[0].t_ns;
            let on_grid = (b.t_ns - first.min(b.t_ns)).is_multiple_of(self.bucket_ns);
            if index > 0 && (b.t_ns <= self.buckets[index - 1].t_ns || !on_grid) {
                return Err(InvalidTimeline::NotIncreasing {
                    index,
                    t_ns: b.t_ns,
                });
            }
            if b.min_bytes > b.max_bytes || !(b.min_bytes..=b.max_bytes).contains(&b.end_bytes) {
                return Err(InvalidTimeline::Envelope {
                    index,
                    t_ns: b.t_ns,
                    min: b.min_bytes,
                    max: b.max_bytes,
                    end: b.end_bytes,
                });
            }
            if b.max_bytes > peak {
                return Err(InvalidTimeline::AbovePeak {
                    index,
                    t_ns: b.t_ns,
                    max: b.max_bytes,
                    peak,
                });
            }
        }
        for (index, pair) in self.events.windows(2).enumerate() {
            if pair[1].t_ns < pair[0].t_ns {
                return Err(InvalidTimeline::EventOrder {
                    index: index + 1,
                    t_ns: pair[1].t_ns,
                });
            }
        }
        Ok(())
    }

    /// Moves every bucket and event `ns` later: for a timeline whose times count from a
    /// later start than the process's (an in-process tracker made after the first).
    pub fn shift(&mut self, ns: u64) {
        for bucket in &mut self.buckets {
            bucket.t_ns = bucket.t_ns.saturating_add(ns);
        }
        for event in &mut self.events {
            event.t_ns = event.t_ns.saturating_add(ns);
        }
    }

    /// Adds `event`, keeping the events in time order (after those at the same time).
    pub fn add_event(&mut self, event: TimelineEvent) {
        let at = self.events.partition_point(|e| e.t_ns <= event.t_ns);
        self.events.insert(at, event);
    }

    /// At most `points` (min, max) pairs of the live heap bytes, each covering an equal
    /// share of the timeline's time (for a sparkline or a thumbnail): a share no listed
    /// bucket falls in holds the value the timeline had then.
    pub fn envelope(&self, points: usize) -> Vec<(u64, u64)> {
        if self.buckets.is_empty() || points == 0 {
            return Vec::new();
        }
        let (start, end) = (self.start_ns(), self.end_ns());
        let grid = (end - start) / self.bucket_ns;
        let points = points.min(grid.max(1) as usize);
        let mut out = Vec::with_capacity(points);
        let mut next = 0;
        let mut carried = 0;
        for i in 0..points as u64 {
            let until = start + (end - start) * (i + 1) / points as u64;
            let mut range: Option<(u64, u64)> = None;
            while next < self.buckets.len() && self.buckets[next].t_ns < until {
                let b = &self.buckets[next];
                range = Some(match range {
                    None => (b.min_bytes, b.max_bytes),
                    Some((lo, hi)) => (lo.min(b.min_bytes), hi.max(b.max_bytes)),
                });
                carried = b.end_bytes;
                next += 1;
            }
            out.push(range.unwrap_or((carried, carried)));
        }
        out
    }
}

/// What one kernel bucket said, as user space read it: `[start_ns, start_ns + width_ns)`
/// since the scope's origin, the width a power of two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// The bucket's start, ns since the scope's origin.
    pub start_ns: u64,
    /// Its width, ns (a power of two).
    pub width_ns: u64,
    /// Live heap bytes: (lowest, highest, last, when the last was set in ns since the
    /// origin), if an allocation or release fell in it.
    pub heap: Option<(u64, u64, u64, u64)>,
    /// Bytes mapped: (highest, last, when), if an `mmap`/`munmap`/`brk` fell in it.
    pub mapped: Option<(u64, u64, u64)>,
    /// Resident memory: (highest, last (anonymous, file, shared memory), when), if it
    /// changed in it.
    pub rss: Option<(u64, [u64; 3], u64)>,
}

/// Lays kernel buckets ([`Sample`]s, any number, any order, several per bucket from
/// several CPUs) on one grid of at most [`MAX_BUCKETS`] buckets.
#[derive(Clone, Debug, Default)]
pub struct TimelineBuilder {
    samples: Vec<Sample>,
    /// Where the scope's origin is, ns since the process started.
    origin_ns: u64,
    lost_buckets: u64,
    /// The resident memory at the origin (anonymous, file, shared memory), in bytes.
    rss_start: [u64; 3],
}

/// The combined values of one grid bucket.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    heap: Option<(u64, u64, u64, u64)>,
    mapped: Option<(u64, u64, u64)>,
    rss: Option<(u64, [u64; 3], u64)>,
}

impl Cell {
    fn add(&mut self, s: &Sample) {
        if let Some((min, max, end, at)) = s.heap {
            self.heap = Some(match self.heap {
                None => (min, max, end, at),
                Some((m, x, e, a)) => {
                    let (e, a) = if at >= a { (end, at) } else { (e, a) };
                    (m.min(min), x.max(max), e, a)
                }
            });
        }
        if let Some((max, end, at)) = s.mapped {
            self.mapped = Some(match self.mapped {
                None => (max, end, at),
                Some((x, e, a)) => {
                    let (e, a) = if at >= a { (end, at) } else { (e, a) };
                    (x.max(max), e, a)
                }
            });
        }
        if let Some((max, end, at)) = s.rss {
            self.rss = Some(match self.rss {
                None => (max, end, at),
                Some((x, e, a)) => {
                    let (e, a) = if at >= a { (end, at) } else { (e, a) };
                    (x.max(max), e, a)
                }
            });
        }
    }
}

impl TimelineBuilder {
    /// A timeline whose origin (its t = 0, where the kernel's buckets start) is
    /// `origin_ns` ns after the process started.
    pub fn new(origin_ns: u64) -> Self {
        TimelineBuilder {
            origin_ns,
            ..TimelineBuilder::default()
        }
    }

    /// Adds one kernel bucket.
    pub fn add(&mut self, sample: Sample) {
        self.samples.push(sample);
    }

    /// Sets the resident memory at the origin (anonymous, file, shared memory bytes):
    /// the resident memory before the scope's first change of it (0 unless set).
    pub fn rss_start(&mut self, start: [u64; 3]) {
        self.rss_start = start;
    }

    /// Counts `n` kernel buckets that were lost.
    pub fn lose(&mut self, n: u64) {
        self.lost_buckets += n;
    }

    /// The timeline of a scope that lasted `duration_ns` from its origin, ending with
    /// `live_end` live heap bytes (its counters' `live_bytes`), starting from 0. With
    /// `mapped`/`rss`, those series are kept (None where they were not recorded):
    /// before their first sample, the mapped bytes are 0 and the resident memory is
    /// [`rss_start`](Self::rss_start)'s; after its last sample, a series keeps its last
    /// value.
    pub fn finish(self, duration_ns: u64, live_end: u64, mapped: bool, rss: bool) -> Timeline {
        let widest = self.samples.iter().map(|s| s.width_ns).max().unwrap_or(0);
        let spans = self
            .samples
            .iter()
            .map(|s| s.start_ns.saturating_add(s.width_ns))
            .max()
            .unwrap_or(0)
            .max(duration_ns)
            .max(1);
        // The narrowest power of two wide enough for every sample and for the whole
        // span in MAX_BUCKETS buckets.
        let mut width = MIN_BUCKET_NS.max(widest.next_power_of_two());
        while spans.div_ceil(width) > MAX_BUCKETS as u64 {
            width *= 2;
        }
        let count = spans.div_ceil(width) as usize;
        let mut cells = vec![Cell::default(); count];
        for s in &self.samples {
            let i = ((s.start_ns / width) as usize).min(count - 1);
            cells[i].add(s);
        }
        let (mut heap, mut mapped_now, mut rss_now) = (0u64, 0u64, self.rss_start);
        let mut buckets = Vec::new();
        for (i, cell) in cells.iter().enumerate() {
            let listed = i == 0
                || i == count - 1
                || cell.heap.is_some()
                || cell.mapped.is_some()
                || cell.rss.is_some();
            let t_ns = self.origin_ns + i as u64 * width;
            let start = heap;
            let (min, max, end) = match cell.heap {
                Some((min, max, end, _)) => (min.min(start), max.max(start), end),
                None => (start, start, start),
            };
            heap = end;
            let mut b = Bucket {
                t_ns,
                min_bytes: min,
                max_bytes: max,
                end_bytes: end,
                ..Bucket::default()
            };
            if mapped {
                let start = mapped_now;
                let (max, end) = match cell.mapped {
                    Some((max, end, _)) => (max.max(start), end),
                    None => (start, start),
                };
                mapped_now = end;
                b.mapped_max_bytes = Some(max);
                b.mapped_end_bytes = Some(end);
            }
            if rss {
                let start: u64 = rss_now.iter().sum();
                let (max, end) = match cell.rss {
                    Some((max, end, _)) => (max.max(start), end),
                    None => (start, rss_now),
                };
                rss_now = end;
                b.rss_max_bytes = Some(max);
                b.rss_end_bytes = Some(end.iter().sum());
                b.rss_anon_bytes = Some(end[0]);
                b.rss_file_bytes = Some(end[1]);
                b.rss_shmem_bytes = Some(end[2]);
            }
            // Unlisted, it changed nothing: its values are the end of the one before.
            if listed {
                buckets.push(b);
            }
        }
        // The last bucket ends where the scope's counters do (a block released by a
        // late event on another CPU is in them).
        if let Some(last) = buckets.last_mut() {
            last.end_bytes = live_end;
            last.min_bytes = last.min_bytes.min(live_end);
            last.max_bytes = last.max_bytes.max(live_end);
        }
        Timeline {
            bucket_ns: width,
            buckets,
            events: Vec::new(),
            lost_buckets: self.lost_buckets,
        }
    }
}

/// Appends the timeline of a later scope of the same process (its next benchmark
/// region) to `into`, on the wider of the two grids. Between them nothing was counted:
/// a bucket at the end of `into` (when the gap is a bucket or more) says so, its heap
/// and mapped bytes 0 (the next scope counts from 0), its resident memory as `into`
/// ended.
pub fn concat(into: &mut Timeline, next: &Timeline) {
    if next.buckets.is_empty() {
        into.events.extend(next.events.iter().cloned());
        into.lost_buckets += next.lost_buckets;
        return;
    }
    if into.buckets.is_empty() {
        let events = std::mem::take(&mut into.events);
        let lost = into.lost_buckets;
        *into = next.clone();
        into.lost_buckets += lost;
        for e in events {
            into.add_event(e);
        }
        return;
    }
    let start = into.start_ns();
    let end = next.end_ns().max(into.end_ns());
    let mut width = into.bucket_ns.max(next.bucket_ns);
    while (end - start).div_ceil(width) > MAX_BUCKETS as u64 {
        width *= 2;
    }
    let gap = into.end_ns() < next.start_ns();
    let gap_bucket = gap.then(|| {
        let last = into.buckets.last().cloned().unwrap_or_default();
        let zero_if = |o: Option<u64>| o.map(|_| 0);
        Bucket {
            t_ns: into.end_ns(),
            min_bytes: 0,
            max_bytes: 0,
            end_bytes: 0,
            rss_max_bytes: last.rss_end_bytes,
            mapped_max_bytes: zero_if(last.mapped_end_bytes),
            mapped_end_bytes: zero_if(last.mapped_end_bytes),
            ..last
        }
    });
    let mut cells: Vec<Bucket> = Vec::new();
    let mut last_cell = None;
    let parts = into
        .buckets
        .iter()
        .chain(gap_bucket.as_ref())
        .chain(&next.buckets);
    for b in parts {
        let i = (b.t_ns - start) / width;
        if last_cell == Some(i)
            && let Some(c) = cells.last_mut()
        {
            c.min_bytes = c.min_bytes.min(b.min_bytes);
            c.max_bytes = c.max_bytes.max(b.max_bytes);
            c.end_bytes = b.end_bytes;
            c.rss_max_bytes = max_opt(c.rss_max_bytes, b.rss_max_bytes);
            c.mapped_max_bytes = max_opt(c.mapped_max_bytes, b.mapped_max_bytes);
            c.rss_end_bytes = b.rss_end_bytes.or(c.rss_end_bytes);
            c.rss_anon_bytes = b.rss_anon_bytes.or(c.rss_anon_bytes);
            c.rss_file_bytes = b.rss_file_bytes.or(c.rss_file_bytes);
            c.rss_shmem_bytes = b.rss_shmem_bytes.or(c.rss_shmem_bytes);
            c.mapped_end_bytes = b.mapped_end_bytes.or(c.mapped_end_bytes);
        } else {
            cells.push(Bucket {
                t_ns: start + i * width,
                ..b.clone()
            });
            last_cell = Some(i);
        }
    }
    into.bucket_ns = width;
    into.buckets = cells;
    into.lost_buckets += next.lost_buckets;
    for e in &next.events {
        into.add_event(e.clone());
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap(start_ns: u64, width_ns: u64, min: u64, max: u64, end: u64) -> Sample {
        Sample {
            start_ns,
            width_ns,
            heap: Some((min, max, end, start_ns)),
            ..Sample::default()
        }
    }

    #[test]
    fn a_spike_shorter_than_a_bucket_shows_at_its_full_height() {
        let mut b = TimelineBuilder::new(0);
        // A ramp in 1 µs buckets, a spike to 1 MB and back inside one bucket, a drop.
        b.add(heap(0, 1024, 0, 100, 100));
        b.add(heap(1024, 1024, 100, 1_000_000, 200));
        b.add(heap(4096, 1024, 50, 200, 50));
        let t = b.finish(5000, 50, false, false);
        assert_eq!(t.bucket_ns, 1024);
        // Listed: the buckets with events (the first and last among them).
        let starts: Vec<u64> = t.buckets.iter().map(|b| b.t_ns).collect();
        assert_eq!(starts, [0, 1024, 4096]);
        assert_eq!(t.max_bytes(), 1_000_000);
        assert_eq!(t.buckets[1].max_bytes, 1_000_000);
        assert_eq!((t.start_ns(), t.end_ns()), (0, 5120));
        // Buckets without events keep the value before them: 200 from 2,048 to 4,096.
        assert_eq!(
            t.envelope(5),
            [
                (0, 100),
                (100, 1_000_000),
                (200, 200),
                (200, 200),
                (50, 200)
            ]
        );
        assert_eq!(t.end_bytes(), 50);
        t.validate(1_000_000).unwrap();
        assert!(matches!(
            t.validate(999_999),
            Err(InvalidTimeline::AbovePeak { index: 1, .. })
        ));
    }

    #[test]
    fn long_scopes_are_merged_to_at_most_max_buckets_and_keep_every_extreme() {
        let mut b = TimelineBuilder::new(500);
        // 4,000 narrow buckets, one with a peak in the middle.
        for i in 0..4000u64 {
            let max = if i == 2345 { 77_777 } else { i };
            b.add(heap(i * 1024, 1024, i.saturating_sub(1), max, i));
        }
        let t = b.finish(4000 * 1024, 3999, false, false);
        assert!(t.buckets.len() <= MAX_BUCKETS, "{}", t.buckets.len());
        assert_eq!(t.bucket_ns, 4096);
        assert_eq!(t.max_bytes(), 77_777);
        assert_eq!(t.buckets[0].t_ns, 500);
        t.validate(77_777).unwrap();
    }

    #[test]
    fn the_last_value_of_a_bucket_is_the_latest_events_on_any_cpu() {
        let mut b = TimelineBuilder::new(0);
        b.add(Sample {
            heap: Some((0, 10, 10, 900)),
            ..heap(0, 1024, 0, 0, 0)
        });
        b.add(Sample {
            heap: Some((0, 30, 5, 400)),
            ..heap(0, 1024, 0, 0, 0)
        });
        let t = b.finish(1024, 10, false, false);
        assert_eq!(
            (
                t.buckets[0].min_bytes,
                t.buckets[0].max_bytes,
                t.buckets[0].end_bytes
            ),
            (0, 30, 10)
        );
    }

    #[test]
    fn inconsistent_timelines_are_refused() {
        let good = Timeline {
            bucket_ns: 1024,
            buckets: vec![
                Bucket {
                    t_ns: 0,
                    max_bytes: 5,
                    end_bytes: 5,
                    ..Bucket::default()
                },
                Bucket {
                    t_ns: 1024,
                    min_bytes: 5,
                    max_bytes: 5,
                    end_bytes: 5,
                    ..Bucket::default()
                },
            ],
            ..Timeline::default()
        };
        good.validate(5).unwrap();
        let mut t = good.clone();
        t.buckets[1].t_ns = 1000;
        assert!(matches!(
            t.validate(5),
            Err(InvalidTimeline::NotIncreasing { index: 1, .. })
        ));
        // Buckets may be left out (nothing changed), but stay on the grid, in order.
        let mut t = good.clone();
        t.buckets[1].t_ns = 5 * 1024;
        t.validate(5).unwrap();
        t.buckets[1].t_ns = 5 * 1024 + 1;
        assert!(t.validate(5).is_err());
        t.buckets[1].t_ns = 0;
        assert!(t.validate(5).is_err());
        let mut t = good.clone();
        t.buckets[1].min_bytes = 6;
        assert!(matches!(
            t.validate(5),
            Err(InvalidTimeline::Envelope { index: 1, .. })
        ));
        let mut t = good;
        t.bucket_ns = 1000;
        assert!(matches!(t.validate(5), Err(InvalidTimeline::Width(1000))));
    }

    #[test]
    fn regions_laid_end_to_end_keep_both_and_the_gap_between() {
        let region = |origin: u64, peak: u64| {
            let mut b = TimelineBuilder::new(origin);
            b.add(heap(0, 1024, 0, peak, 0));
            b.finish(2048, 0, false, false)
        };
        let mut all = region(0, 100);
        concat(&mut all, &region(10_240, 300));
        let starts: Vec<u64> = all.buckets.iter().map(|b| b.t_ns).collect();
        // The first region's two, the gap's start, the second region's two.
        assert_eq!(starts, [0, 1024, 2048, 10_240, 11_264]);
        assert_eq!(all.buckets[0].max_bytes, 100);
        assert_eq!(all.buckets[3].max_bytes, 300);
        assert_eq!(all.buckets[2].max_bytes, 0);
        assert_eq!(all.end_ns(), 12_288);
        all.validate(300).unwrap();
    }
}
