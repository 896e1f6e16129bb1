//! The timeline against programs whose memory over time is known: tests/programs/
//! timeline_shape.c (a ramp, a spike far shorter than a bucket, a drop, 64 MiB of
//! pages touched and unmapped, a slow leak, each phase's times written down by the
//! program) and the fork fixture (a parent and its child). Each bucket is compared with
//! what the program did in it: the heap exactly, the mapped bytes exactly, the resident
//! memory by the pages the program touched. The shape program pins itself to the last
//! CPU, away from the CPU the resident-memory tracepoint's event was opened on.

use std::{collections::BTreeMap, path::Path};

use memtrack::{
    CommandSpec, TrackedProcess, Tracker, TrackerBuilder,
    timeline::{Bucket, EventKind, MAX_BUCKETS, MIN_BUCKET_NS, Timeline},
};
use memtrack_test_support::{fixture, program, scratch_dir};

/// The program's phases: name -> (start, end), ns since the process started.
type Phases = BTreeMap<String, (u64, u64)>;

/// Runs timeline_shape under a tracker made by `builder`; returns its record and phases.
fn run_shape(builder: TrackerBuilder) -> (TrackedProcess, Phases) {
    let dir = scratch_dir("memtrack-timeline-");
    let times = dir.join("times");
    let tracker = builder
        .spawn(CommandSpec::new(program("timeline_shape")).args([&times]))
        .unwrap();
    let status = tracker.wait().unwrap();
    assert_eq!(status.code, Some(0), "timeline_shape: {status:?}");
    let mut processes = tracker.collect_processes().unwrap();
    assert_eq!(processes.len(), 1);
    let process = processes.remove(0);
    let phases = read_phases(&times, process.started_ns);
    (process, phases)
}

/// The phases the program wrote to `path`, relative to `started_ns`.
fn read_phases(path: &Path, started_ns: u64) -> Phases {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let at = |s: &str| s.parse::<u64>().unwrap() - started_ns;
            (f[0].to_string(), (at(f[1]), at(f[2])))
        })
        .collect()
}

/// The buckets wholly inside `[from, to)` ns.
fn within(t: &Timeline, from: u64, to: u64) -> Vec<&Bucket> {
    t.buckets
        .iter()
        .filter(|b| b.t_ns >= from && b.t_ns + t.bucket_ns <= to)
        .collect()
}

/// The buckets overlapping `[from, to]` ns.
fn overlapping(t: &Timeline, from: u64, to: u64) -> Vec<&Bucket> {
    t.buckets
        .iter()
        .filter(|b| b.t_ns <= to && b.t_ns + t.bucket_ns > from)
        .collect()
}

/// The bucket whose end values hold just before `ns`, when nothing changes between
/// the end of a bucket and `ns`: the last listed one ending at or before it (a bucket
/// not listed changed nothing).
fn before(t: &Timeline, ns: u64) -> &Bucket {
    t.buckets
        .iter()
        .rev()
        .find(|b| b.t_ns + t.bucket_ns <= ns)
        .expect("a bucket before")
}

/// The grid: a power-of-two width of at least the narrowest bucket, at most
/// MAX_BUCKETS buckets, in order on the grid from the start, the whole run covered.
fn check_grid(t: &Timeline, phases: &Phases) {
    assert!(t.bucket_ns.is_power_of_two() && t.bucket_ns >= MIN_BUCKET_NS);
    assert!(!t.buckets.is_empty() && t.buckets.len() <= MAX_BUCKETS);
    for pair in t.buckets.windows(2) {
        assert!(pair[0].t_ns < pair[1].t_ns);
        assert_eq!((pair[1].t_ns - t.buckets[0].t_ns) % t.bucket_ns, 0);
    }
    for b in &t.buckets {
        assert!(
            b.min_bytes <= b.end_bytes && b.end_bytes <= b.max_bytes,
            "{b:?}"
        );
    }
    assert_eq!(t.buckets[0].t_ns, 0);
    assert!(
        t.end_ns() >= phases["leak"].1,
        "the timeline stops before the leak ends"
    );
    assert_eq!(t.lost_buckets, 0);
}

/// The heap series, exactly: the ramp climbs in 10,000-byte steps to 1,000,000, the
/// spike reaches 6,000,000 in the bucket(s) holding it and nowhere else, the drop goes
/// to 0, the leak climbs in 1,000-byte steps to 50,000.
fn check_heap(t: &Timeline, p: &Phases, stats: &memtrack::Stats) {
    assert_eq!(
        (stats.peak_live_bytes, stats.live_bytes),
        (6_000_000, 50_000)
    );
    assert_eq!(t.max_bytes(), stats.peak_live_bytes);
    assert_eq!(t.end_bytes(), 50_000);
    let (ramp, spike, drop, leak) = (p["ramp"], p["spike"], p["drop"], p["leak"]);
    let spiked: Vec<&Bucket> = t
        .buckets
        .iter()
        .filter(|b| b.max_bytes == 6_000_000)
        .collect();
    assert!(!spiked.is_empty());
    for b in &spiked {
        assert!(
            b.t_ns <= spike.1 && b.t_ns + t.bucket_ns > spike.0,
            "a bucket at the peak outside the spike: {b:?}, spike {spike:?}"
        );
        assert_eq!(b.end_bytes, 1_000_000, "the spike is freed in its bucket");
    }
    for b in t.buckets.iter().filter(|b| b.max_bytes > 1_000_000) {
        assert_eq!(b.max_bytes, 6_000_000, "{b:?}");
    }
    // Before the ramp: nothing live; in it, steps of one block; after it, the plateau.
    for b in within(t, 0, ramp.0) {
        assert_eq!((b.min_bytes, b.max_bytes), (0, 0), "{b:?}");
    }
    let climbing = within(t, ramp.0, ramp.1);
    assert!(climbing.len() >= 2, "the ramp spans several buckets");
    for pair in climbing.windows(2) {
        assert!(pair[0].end_bytes <= pair[1].end_bytes);
    }
    for b in &climbing {
        assert_eq!(b.end_bytes % 10_000, 0, "{b:?}");
        assert!(b.max_bytes <= 1_000_000);
    }
    for b in within(t, ramp.1, spike.0)
        .into_iter()
        .chain(within(t, spike.1, drop.0))
    {
        assert_eq!((b.min_bytes, b.max_bytes), (1_000_000, 1_000_000), "{b:?}");
    }
    assert_eq!(before(t, spike.0).end_bytes, 1_000_000);
    assert_eq!(before(t, drop.0).end_bytes, 1_000_000);
    for b in within(t, drop.1, leak.0) {
        assert_eq!((b.min_bytes, b.max_bytes), (0, 0), "{b:?}");
    }
    assert_eq!(before(t, leak.0).end_bytes, 0);
    let leaking = within(t, leak.0, leak.1);
    for pair in leaking.windows(2) {
        assert!(pair[0].end_bytes <= pair[1].end_bytes);
    }
    for b in &leaking {
        assert_eq!(b.end_bytes % 1_000, 0);
        assert!(b.max_bytes <= 50_000);
    }
    let peak = t
        .events
        .iter()
        .find_map(|e| match e.what {
            EventKind::Peak { bytes } => Some((e.t_ns, bytes)),
            _ => None,
        })
        .expect("a peak event");
    assert_eq!(peak.1, 6_000_000);
    assert!(
        spike.0 <= peak.0 && peak.0 <= spike.1,
        "peak at {peak:?}, spike {spike:?}"
    );
}

/// The mapped series, exactly: the 64 MiB mapping adds its bytes from its mmap to its
/// munmap; the last bucket ends at what the syscall counters say is mapped.
fn check_mapped(t: &Timeline, p: &Phases, stats: &memtrack::Stats) {
    const PAGES: u64 = 64 << 20;
    let (pages, unmap, leak) = (p["pages"], p["unmap"], p["leak"]);
    let mapped_end = |b: &Bucket| b.mapped_end_bytes.expect("mapped bytes in every bucket");
    let base = mapped_end(before(t, pages.0));
    for b in within(t, pages.1, unmap.0) {
        assert_eq!(mapped_end(b), base + PAGES, "{b:?}");
    }
    assert_eq!(mapped_end(before(t, unmap.0)), base + PAGES);
    for b in within(t, unmap.1, leak.0) {
        assert_eq!(mapped_end(b), base, "{b:?}");
    }
    assert_eq!(mapped_end(before(t, leak.0)), base);
    let s = stats.syscalls.as_ref().expect("syscalls counted");
    let now = s.mmap_bytes + s.brk_grown_bytes - s.munmap_bytes - s.brk_shrunk_bytes;
    assert_eq!(t.buckets.last().map(mapped_end), Some(now));
}

/// The resident series: the pages phase makes at least 64 MiB more anonymous memory
/// resident, and the munmap gives it back.
fn check_rss(t: &Timeline, p: &Phases) {
    const PAGES: u64 = 64 << 20;
    let (pages, unmap, leak) = (p["pages"], p["unmap"], p["leak"]);
    let anon = |b: &Bucket| b.rss_anon_bytes.expect("RSS in every bucket");
    let base = anon(before(t, pages.0));
    assert!(base > 0);
    let touched = anon(before(t, unmap.0));
    assert!(touched >= base + PAGES, "{touched} over {base}");
    for b in within(t, pages.1, unmap.0) {
        assert!(anon(b) >= base + PAGES, "{b:?} over {base}");
    }
    for b in &t.buckets {
        let (end, max) = (b.rss_end_bytes.unwrap(), b.rss_max_bytes.unwrap());
        assert!(end >= b.rss_anon_bytes.unwrap() + b.rss_file_bytes.unwrap());
        assert!(max >= end, "{b:?}");
    }
    for b in within(t, unmap.1, leak.0) {
        assert!(anon(b) + PAGES <= touched, "{b:?}");
    }
    assert!(anon(before(t, leak.0)) + PAGES <= touched);
    let rising = overlapping(t, pages.0, pages.1);
    let highest = rising
        .iter()
        .map(|b| b.rss_max_bytes.unwrap())
        .max()
        .unwrap();
    assert!(highest >= base + PAGES);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_buckets_follow_the_programs_heap_mappings_and_resident_memory() {
    let (process, phases) = run_shape(Tracker::builder());
    let t = process.timeline.as_ref().expect("a timeline by default");
    check_grid(t, &phases);
    check_heap(t, &phases, &process.stats);
    check_mapped(t, &phases, &process.stats);
    check_rss(t, &phases);
    t.validate(process.stats.peak_live_bytes).unwrap();
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn without_rss_the_heap_and_mappings_are_the_same_and_no_bucket_has_rss() {
    let (process, phases) = run_shape(Tracker::builder().rss(false));
    let t = process.timeline.as_ref().expect("a timeline");
    check_grid(t, &phases);
    check_heap(t, &phases, &process.stats);
    check_mapped(t, &phases, &process.stats);
    assert!(
        t.buckets
            .iter()
            .all(|b| b.rss_max_bytes.is_none() && b.rss_end_bytes.is_none())
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn timeline_off_keeps_none_and_counts_the_same() {
    let (process, _) = run_shape(Tracker::builder().timeline(false));
    assert!(process.timeline.is_none());
    assert_eq!(process.stats.peak_live_bytes, 6_000_000);
    assert_eq!(process.stats.live_bytes, 50_000);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_fork_gives_the_parent_a_child_event_and_the_child_a_timeline_of_its_own() {
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new(fixture("fork")))
        .unwrap();
    assert_eq!(tracker.wait().unwrap().code, Some(0));
    let processes = tracker.collect_processes().unwrap();
    assert_eq!(processes.len(), 2, "{processes:#?}");
    let (parent, child) = (&processes[0], &processes[1]);
    assert_eq!(child.ppid, parent.pid);
    let pt = parent.timeline.as_ref().expect("the parent's timeline");
    let ct = child.timeline.as_ref().expect("the child's timeline");
    let child_at = pt
        .events
        .iter()
        .find_map(|e| match e.what {
            EventKind::Child { pid } if pid == child.pid => Some(e.t_ns),
            _ => None,
        })
        .expect("a Child event for the child");
    // Noted as the follower registered the child, just after its timeline began.
    assert!(child_at >= child.started_ns - parent.started_ns);
    assert!(child_at < pt.end_ns());
    assert_eq!((pt.max_bytes(), pt.end_bytes()), (9_600, 5_400));
    assert_eq!((ct.max_bytes(), ct.end_bytes()), (3_100, 2_100));
    pt.validate(parent.stats.peak_live_bytes).unwrap();
    ct.validate(child.stats.peak_live_bytes).unwrap();
}
