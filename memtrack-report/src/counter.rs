//! The counters `memtrack diff` compares and `--limit` bounds, by the names they have in
//! the JSON report and the result files (`alloc_calls`, `peak_live_bytes`, ...).

use memtrack_record::Stats;

/// One counter of [`Stats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Counter {
    /// [`Stats::alloc_calls`], blocks handed out.
    AllocCalls,
    /// [`Stats::bytes_allocated`].
    BytesAllocated,
    /// [`Stats::free_calls`], blocks released.
    FreeCalls,
    /// [`Stats::bytes_freed`].
    BytesFreed,
    /// [`Stats::live_blocks`], at the end.
    LiveBlocks,
    /// [`Stats::live_bytes`], at the end.
    LiveBytes,
    /// [`Stats::peak_live_bytes`].
    PeakLiveBytes,
    /// [`Stats::failed_allocs`].
    FailedAllocs,
    /// [`Stats::unmatched_frees`].
    UnmatchedFrees,
    /// [`Stats::lost_events`].
    LostEvents,
}

impl Counter {
    /// Every counter, in the order reports list them.
    pub const ALL: [Counter; 10] = [
        Counter::AllocCalls,
        Counter::BytesAllocated,
        Counter::FreeCalls,
        Counter::BytesFreed,
        Counter::LiveBlocks,
        Counter::LiveBytes,
        Counter::PeakLiveBytes,
        Counter::FailedAllocs,
        Counter::UnmatchedFrees,
        Counter::LostEvents,
    ];

    /// The counters `memtrack diff` compares unless told otherwise: allocation calls,
    /// allocated bytes, peak live bytes.
    pub const DEFAULT_DIFF: [Counter; 3] = [
        Counter::AllocCalls,
        Counter::BytesAllocated,
        Counter::PeakLiveBytes,
    ];

    /// Its name, as in the JSON report: `alloc_calls`, `peak_live_bytes`, ...
    pub fn name(self) -> &'static str {
        match self {
            Counter::AllocCalls => "alloc_calls",
            Counter::BytesAllocated => "bytes_allocated",
            Counter::FreeCalls => "free_calls",
            Counter::BytesFreed => "bytes_freed",
            Counter::LiveBlocks => "live_blocks",
            Counter::LiveBytes => "live_bytes",
            Counter::PeakLiveBytes => "peak_live_bytes",
            Counter::FailedAllocs => "failed_allocs",
            Counter::UnmatchedFrees => "unmatched_frees",
            Counter::LostEvents => "lost_events",
        }
    }

    /// The counter named `name`, or an error listing the names there are.
    pub fn from_name(name: &str) -> Result<Counter, String> {
        Counter::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
                format!("no counter named {name:?} (there are {})", names.join(", "))
            })
    }

    /// A comma-separated list of counter names (`alloc_calls,peak_live_bytes`), each once.
    pub fn parse_list(list: &str) -> Result<Vec<Counter>, String> {
        let mut counters = Vec::new();
        for name in list.split(',').map(str::trim) {
            let counter = Counter::from_name(name)?;
            if !counters.contains(&counter) {
                counters.push(counter);
            }
        }
        Ok(counters)
    }

    /// Whether it counts bytes (else blocks, calls or events).
    pub fn is_bytes(self) -> bool {
        matches!(
            self,
            Counter::BytesAllocated
                | Counter::BytesFreed
                | Counter::LiveBytes
                | Counter::PeakLiveBytes
        )
    }

    /// Its value in `stats`.
    pub fn of(self, stats: &Stats) -> u64 {
        match self {
            Counter::AllocCalls => stats.alloc_calls,
            Counter::BytesAllocated => stats.bytes_allocated,
            Counter::FreeCalls => stats.free_calls,
            Counter::BytesFreed => stats.bytes_freed,
            Counter::LiveBlocks => stats.live_blocks,
            Counter::LiveBytes => stats.live_bytes,
            Counter::PeakLiveBytes => stats.peak_live_bytes,
            Counter::FailedAllocs => stats.failed_allocs,
            Counter::UnmatchedFrees => stats.unmatched_frees,
            Counter::LostEvents => stats.lost_events,
        }
    }

    /// `value` of this counter for people: `1.5 KiB (1,536 B)` for bytes, `1,536` else.
    pub fn show(self, value: u64) -> String {
        if self.is_bytes() {
            crate::units::bytes(value)
        } else {
            crate::units::exact(value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_listed() {
        for c in Counter::ALL {
            assert_eq!(Counter::from_name(c.name()), Ok(c));
        }
        let mut stats = Stats::default();
        stats.peak_live_bytes = 5;
        assert_eq!(Counter::PeakLiveBytes.of(&stats), 5);
        assert_eq!(
            Counter::parse_list("peak_live_bytes, alloc_calls,peak_live_bytes"),
            Ok(vec![Counter::PeakLiveBytes, Counter::AllocCalls])
        );
        assert_eq!(
            Counter::from_name("peak").unwrap_err(),
            "no counter named \"peak\" (there are alloc_calls, bytes_allocated, free_calls, \
             bytes_freed, live_blocks, live_bytes, peak_live_bytes, failed_allocs, \
             unmatched_frees, lost_events)"
        );
        assert_eq!(Counter::PeakLiveBytes.show(1536), "1.5 KiB (1,536 B)");
        assert_eq!(Counter::AllocCalls.show(1536), "1,536");
    }
}
