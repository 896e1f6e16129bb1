//! The clock shared by integrations and the runner.
//!
//! Marker timestamps are compared with timestamps taken by the runner and by memtrack's
//! eBPF programs (`bpf_ktime_get_ns`), which all read `CLOCK_MONOTONIC`; `std::time::Instant`
//! does not expose its raw value, so this module reads the clock directly.

/// The current `CLOCK_MONOTONIC` time in nanoseconds (time since an unspecified point,
/// typically boot, not counting suspend).
///
/// Use it for [`Marker`](crate::Marker) timestamps.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    // Both fields are non-negative for CLOCK_MONOTONIC.
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::now_ns;

    #[test]
    fn now_ns_is_monotonic_and_counts_nanoseconds() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = now_ns();
        assert!(b > a);
        let elapsed = b - a;
        assert!(
            (20_000_000..5_000_000_000).contains(&elapsed),
            "elapsed {elapsed} ns"
        );
    }
}
