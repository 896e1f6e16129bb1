//! A timeline's heap envelope in one line of text, for the terminal reports: one column
//! per equal share of the timeline's time, each a Unicode block as high as the highest
//! live heap bytes in it (its maximum, so a spike shorter than a column still shows),
//! the column holding the exact peak a full block and no other.

use memtrack_record::timeline::Timeline;

/// Columns of the sparkline in the text reports.
pub const WIDTH: usize = 40;

/// The blocks below a full one, lowest first (`▁` to `▇`).
const BLOCKS: [char; 7] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇'];

/// The full block: the column where the timeline reaches its peak.
pub const FULL: char = '█';

/// The column of a share whose highest live heap bytes are `max`, in a timeline whose
/// peak is `peak`: a space for 0, the full block for the peak, else `▁` to `▇` in
/// proportion (`max * 7 / peak`, rounded down).
pub fn column(max: u64, peak: u64) -> char {
    if max == 0 || peak == 0 {
        ' '
    } else if max >= peak {
        FULL
    } else {
        let level = u128::from(max) * BLOCKS.len() as u128 / u128::from(peak);
        BLOCKS[level as usize]
    }
}

/// The heap envelope of `timeline` in at most `width` columns (fewer for a timeline of
/// fewer buckets; empty without buckets), each from the highest live heap bytes of its
/// share of the time ([`Timeline::envelope`]).
pub fn sparkline(timeline: &Timeline, width: usize) -> String {
    let columns = timeline.envelope(width);
    let peak = columns.iter().map(|&(_, max)| max).max().unwrap_or(0);
    columns.iter().map(|&(_, max)| column(max, peak)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::timeline::Bucket;

    fn bucket(t_ns: u64, min: u64, max: u64, end: u64) -> Bucket {
        Bucket {
            t_ns,
            min_bytes: min,
            max_bytes: max,
            end_bytes: end,
            ..Bucket::default()
        }
    }

    #[test]
    fn columns_scale_to_the_peak_and_only_the_peak_is_full() {
        assert_eq!(column(0, 100), ' ');
        assert_eq!(column(1, 100), '▁');
        assert_eq!(column(14, 100), '▁');
        assert_eq!(column(15, 100), '▂');
        assert_eq!(column(99, 100), '▇');
        assert_eq!(column(100, 100), FULL);
        assert_eq!(column(0, 0), ' ');
        assert_eq!(column(u64::MAX - 1, u64::MAX), '▇');
    }

    #[test]
    fn a_spike_inside_one_bucket_is_the_full_column_and_quiet_buckets_carry_on() {
        // 8 buckets of 1 µs: a ramp, a spike to 800 in bucket 3 (back to 200 in it), 3
        // quiet buckets holding 200 (not listed), a drop to 0 in the last.
        let t = Timeline {
            bucket_ns: 1024,
            buckets: vec![
                bucket(0, 0, 100, 100),
                bucket(1024, 100, 200, 200),
                bucket(2048, 200, 200, 200),
                bucket(3072, 200, 800, 200),
                bucket(7168, 0, 200, 0),
            ],
            ..Timeline::default()
        };
        // 100 * 7 / 800 = 0 (▁), 200 * 7 / 800 = 1 (▂).
        assert_eq!(sparkline(&t, 8), "▁▂▂█▂▂▂▂");
        // More columns than buckets: one per bucket.
        assert_eq!(sparkline(&t, 40).chars().count(), 8);
        // Two buckets a column: the spike's column is full, the quiet ones carry 200.
        assert_eq!(sparkline(&t, 4), "▂█▂▂");
        assert_eq!(sparkline(&Timeline::default(), 40), "");
        let flat = Timeline {
            bucket_ns: 1024,
            buckets: vec![bucket(0, 0, 0, 0), bucket(2048, 0, 0, 0)],
            ..Timeline::default()
        };
        assert_eq!(sparkline(&flat, 3), "   ");
    }
}
