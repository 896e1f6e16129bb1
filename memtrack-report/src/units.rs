//! How numbers read in memtrack's text output: counts with thousands separated, byte
//! counts rounded in binary units with the exact figure beside them.

use humansize::{BINARY, format_size};
use num_format::{Locale, ToFormattedString};

/// A count with thousands separated: `1,048,576`.
pub fn exact(n: u64) -> String {
    n.to_formatted_string(&Locale::en)
}

/// A count and its noun, in the plural but for one: `1 block`, `1,024 blocks`.
pub fn count(n: u64, noun: &str) -> String {
    let plural = if n == 1 { "" } else { "s" };
    format!("{} {noun}{plural}", exact(n))
}

/// A byte count rounded in binary units: `512 B`, `1.5 KiB`, `1 MiB`.
pub fn size(n: u64) -> String {
    format_size(n, BINARY.decimal_places(1))
}

/// `1.5 KiB (1,536 B)`: rounded for reading, exact for checking (`512 B` alone below
/// 1 KiB, where both are the same).
pub fn bytes(n: u64) -> String {
    if n < 1024 {
        return size(n);
    }
    format!("{} ({} B)", size(n), exact(n))
}

/// A duration for reading: `12.3 ms`, `2.50 s` (from 1 s on).
pub fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_rounded_and_exact() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB (1,536 B)");
        assert_eq!(bytes(104_000), "101.6 KiB (104,000 B)");
        assert_eq!(bytes(1_048_576), "1 MiB (1,048,576 B)");
        assert_eq!(bytes(3 << 30 | 1 << 29), "3.5 GiB (3,758,096,384 B)");
        assert_eq!(size(8192), "8 KiB");
        assert_eq!(count(0, "block"), "0 blocks");
        assert_eq!(count(1, "block"), "1 block");
        assert_eq!(count(12_345, "stack"), "12,345 stacks");
        assert_eq!(duration(12_345_678), "12.3 ms");
        assert_eq!(duration(2_500_000_000), "2.50 s");
    }
}
