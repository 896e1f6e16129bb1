//! Builds the unwind table of each ELF file given and prints its size and build time
//! (the fastest of `--runs N` builds, default 5: the cost on the attach path).
//!
//! ```sh
//! cargo run --release -p memtrack-targets --example unwind_tables -- \
//!     /usr/lib/x86_64-linux-gnu/libc.so.6 /usr/lib/x86_64-linux-gnu/libstdc++.so.6
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use memtrack_targets::unwind::read_object;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut runs = 5usize;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--runs" {
            let n = args.next().ok_or("--runs needs a number")?;
            runs = n.parse().map_err(|e| format!("--runs {n}: {e}"))?;
        } else {
            files.push(arg.into());
        }
    }
    if files.is_empty() {
        return Err("usage: unwind_tables [--runs N] ELF-FILE...".into());
    }
    for file in files {
        let mut fastest = Duration::MAX;
        let mut fastest_read = Duration::MAX;
        let mut object = None;
        for _ in 0..runs.max(1) {
            let began = Instant::now();
            let built = read_object(&file)?;
            fastest_read = fastest_read.min(began.elapsed());
            fastest = fastest.min(built.table.stats().build_time);
            object = Some(built);
        }
        let object = object.expect("at least one run");
        let stats = object.table.stats();
        println!(
            "{}: {} FDEs, {} CFI rows -> {} table rows, {} bytes; table build {:.2} ms, \
             with reading the file {:.2} ms (fastest of {runs}); build id {}",
            file.display(),
            stats.fdes,
            stats.cfi_rows_by_rule.iter().sum::<u64>(),
            object.table.rows().len(),
            object.table.size_bytes(),
            fastest.as_secs_f64() * 1e3,
            fastest_read.as_secs_f64() * 1e3,
            object.info.build_id_hex().as_deref().unwrap_or("none"),
        );
        println!(
            "  CFI rows by rule (rsp, rbp, plt, signal, end, unrepresentable): {:?}; \
             unrepresentable by reason: {:?}",
            &stats.cfi_rows_by_rule[1..],
            &stats.unrepresentable_by_reason[1..]
        );
    }
    Ok(())
}
