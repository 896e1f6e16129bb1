//! The timeline's kernel half: what the programs keep of each process's memory over time
//! (live heap bytes, bytes mapped by `mmap`/`brk`, resident memory) and how they hand it
//! to user space.
//!
//! Time since the scope's origin (the process's start, or its benchmark region's:
//! [`crate::ProcessSlot::origin_ns`]) is cut into buckets whose width doubles as the
//! scope ages: at `age` ns the width is `2^shift_of(age)` ns, so a scope never has more
//! than [`LEVEL_BUCKETS`] buckets at one width, and a 2 ms process gets buckets of a few
//! microseconds while a 2 hour one gets buckets of seconds. Each CPU keeps the bucket its
//! last event of each process fell in ([`TimelineCpu`], a per-CPU array at the process's
//! slot): the lowest and highest values reached in it and the last one. When an event
//! falls in a later bucket, the CPU hands the finished one to user space
//! ([`TimelineRecord`], through a ring buffer) and starts the new one. User space reads
//! the buckets still open at the end. Every value the counter takes is one event's
//! result on some CPU, so the combined buckets miss no extreme: the largest maximum is
//! the process's peak exactly, however short the spike.

/// log2 of the narrowest bucket, ns: 2^10 = 1,024 ns.
pub const MIN_SHIFT: u32 = 10;

/// log2 of [`LEVEL_BUCKETS`].
pub const LEVEL_BUCKETS_SHIFT: u32 = 10;

/// Buckets at one width before the width doubles: a scope `age` ns old has its buckets
/// `2^shift_of(age)` ns wide and at most this many of them.
pub const LEVEL_BUCKETS: u64 = 1 << LEVEL_BUCKETS_SHIFT;

/// The bucket width's log2 at `age` ns after the origin: the smallest `shift` at least
/// [`MIN_SHIFT`] with `age >> shift` below [`LEVEL_BUCKETS`]. Branch-free but for the
/// five halvings (the verifier walks each).
#[inline(always)]
pub fn shift_of(age: u64) -> u32 {
    // Bit length of age >> (MIN_SHIFT + LEVEL_BUCKETS_SHIFT).
    let mut v = age >> (MIN_SHIFT + LEVEL_BUCKETS_SHIFT);
    let mut n = 0u32;
    if v >= 1 << 32 {
        v >>= 32;
        n += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        n += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        n += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        n += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        n += 2;
    }
    if v >= 1 << 1 {
        v >>= 1;
        n += 1;
    }
    n += v as u32;
    MIN_SHIFT + n
}

/// Which of a bucket's series an event touched ([`TimelineCpu::seen`]).
pub mod seen {
    /// Live heap bytes.
    pub const HEAP: u32 = 1;
    /// Bytes mapped by `mmap`/`brk`.
    pub const MAPPED: u32 = 2;
    /// Resident memory.
    pub const RSS: u32 = 4;
}

/// One CPU's bucket of one process (the value of the per-CPU `TIMELINE` array at the
/// process's slot).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineCpu {
    /// The slot's generation this bucket belongs to (`ProcessSlot::generation`): a
    /// bucket of an older generation (the process's counters were reset since: a new
    /// benchmark region, a new image) is not continued.
    pub generation: u32,
    /// [`seen`] bits: which of the series below hold values (0: the bucket is empty).
    pub seen: u32,
    /// log2 of the bucket's width, ns.
    pub shift: u32,
    /// Padding.
    pub _pad: u32,
    /// The bucket's index at that width: it covers `[index << shift, (index + 1) <<
    /// shift)` ns since the origin.
    pub index: u64,
    /// Lowest live heap bytes reached in the bucket (the values before and after each
    /// event on this CPU).
    pub heap_min: u64,
    /// Highest live heap bytes reached.
    pub heap_max: u64,
    /// Live heap bytes after this CPU's last event in the bucket.
    pub heap_end: u64,
    /// When that event was, ns since the origin.
    pub heap_end_ns: u64,
    /// Highest bytes mapped by `mmap`/`brk` (mapped less unmapped, brk's growth less its
    /// shrinking, since the origin).
    pub mapped_max: u64,
    /// Bytes mapped after this CPU's last `mmap`/`munmap`/`brk` in the bucket.
    pub mapped_end: u64,
    /// When that was, ns since the origin.
    pub mapped_end_ns: u64,
    /// Highest resident bytes (file, anonymous and shared pages).
    pub rss_max: u64,
    /// Resident file-backed bytes after this CPU's last change of the resident memory.
    pub rss_file: u64,
    /// Resident anonymous bytes then.
    pub rss_anon: u64,
    /// Resident shared-memory bytes then.
    pub rss_shmem: u64,
    /// When that change was, ns since the origin.
    pub rss_end_ns: u64,
}

/// A finished bucket, as the ring buffer hands it to user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineRecord {
    /// The process.
    pub tgid: u32,
    /// Padding.
    pub _pad: u32,
    /// The bucket.
    pub bucket: TimelineCpu,
}

/// The resident memory of one process now, by kind (the value of the `RSS_NOW` array
/// at the process's slot): as the kernel's `rss_stat` tracepoint last said it, or as
/// user space found it in `/proc/PID/status` when it started tracking the process (or
/// its new image) and no change was seen since.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RssNow {
    /// The process the values belong to (a new process in the slot starts from zero).
    pub tgid: u32,
    /// The `mm_id` of its address space last learnt (then in `MM_SLOTS`).
    pub mm_id: u32,
    /// By `rss_stat`'s member: file pages, anonymous pages, swap entries, shared-memory
    /// pages, in bytes.
    pub bytes: [u64; 4],
}

/// `rss_stat`'s members (`enum MM_*` of the kernel's mm_types.h).
pub mod rss_member {
    /// `MM_FILEPAGES`.
    pub const FILE: usize = 0;
    /// `MM_ANONPAGES`.
    pub const ANON: usize = 1;
    /// `MM_SWAPENTS` (not resident).
    pub const SWAP: usize = 2;
    /// `MM_SHMEMPAGES`.
    pub const SHMEM: usize = 3;
}

/// Entries of the ring buffer of finished buckets, in bytes (a power of two pages).
pub const RING_BYTES: u32 = 1 << 22;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_width_doubles_as_the_age_doubles_and_the_index_stays_below_a_level() {
        assert_eq!(shift_of(0), MIN_SHIFT);
        let level = LEVEL_BUCKETS << MIN_SHIFT;
        assert_eq!(shift_of(level - 1), MIN_SHIFT);
        assert_eq!(shift_of(level), MIN_SHIFT + 1);
        assert_eq!(shift_of(2 * level - 1), MIN_SHIFT + 1);
        assert_eq!(shift_of(2 * level), MIN_SHIFT + 2);
        for age in [
            0,
            1,
            1023,
            1 << 20,
            (1 << 20) + 5,
            1 << 40,
            u64::MAX >> 1,
            u64::MAX,
        ] {
            let shift = shift_of(age);
            assert!(age >> shift < LEVEL_BUCKETS, "{age}");
            if shift > MIN_SHIFT {
                assert!(
                    age >> (shift - 1) >= LEVEL_BUCKETS,
                    "{age}: not the narrowest"
                );
            }
        }
    }
}
