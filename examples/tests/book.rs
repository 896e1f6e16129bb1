//! The book's Rust examples (docs/src/guide/*.md include them by their ANCHOR names),
//! compiled and run here so that an example that stops building or counting breaks the
//! build. As root (scripts/test.sh) every count is checked exactly.

use std::hint::black_box;

/// The in-process tracker of the guide and the README.
fn tracker_counts_one_vec() -> memtrack::Result<()> {
    // ANCHOR: tracker
    let mut tracker = memtrack::Tracker::new()?; // this process, all threads
    tracker.start()?;
    // the measured code; black_box keeps an optimised build from removing the unused Vec
    let v: Vec<u8> = black_box(Vec::with_capacity(1000));
    drop(v);
    tracker.stop()?;
    let stats = tracker.collect()?;
    assert_eq!(
        (stats.alloc_calls, stats.bytes_allocated, stats.free_calls),
        (1, 1000, 1)
    );
    // ANCHOR_END: tracker
    Ok(())
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_guides_tracker_counts_exactly() {
    tracker_counts_one_vec().expect("the tracker example");
}

/// What the heap-test example measures: the numbers of a comma-separated list.
fn parse(text: &str) -> Vec<u32> {
    text.split(',')
        .map(|n| n.parse().expect("a number"))
        .collect()
}

#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
// ANCHOR: heap_count
#[test]
fn a_vec_of_1000_bytes_is_one_block() {
    let Some(stats) = memtrack::testing::count(|| vec![0u8; 1000]) else {
        return; // no privileges: said on stderr
    };
    assert_eq!((stats.alloc_calls, stats.bytes_allocated), (1, 1000));
}
// ANCHOR_END: heap_count

#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
// ANCHOR: heap_assert
#[test]
fn parsing_stays_small() {
    // every condition is checked; a failure lists those that failed, with the values
    memtrack::assert_heap!(|| parse("1,2,3"), alloc_calls <= 3, peak_live_bytes <= 1024);
}
// ANCHOR_END: heap_assert

/// What `parsing_stays_small` bounds, exactly: `parse("1,2,3")` collects three u32 into a Vec whose first
/// allocation holds 4 of them (Rust's smallest capacity for 4-byte items), 16 bytes.
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
#[test]
fn parsing_allocates_one_block_of_16_bytes() {
    let Some(stats) = memtrack::testing::count(|| parse("1,2,3")) else {
        return;
    };
    assert_eq!(
        (
            stats.alloc_calls,
            stats.bytes_allocated,
            stats.peak_live_bytes
        ),
        (1, 16, 16)
    );
}

/// The book's table of limits (docs/src/reference/limits.md): every row names its
/// constant and gives its value, and each value is the constant's.
#[test]
fn the_limits_chapter_gives_each_constants_value() {
    let constants: &[(&str, u64)] = &[
        (
            "memtrack::DEFAULT_MAX_LIVE_BLOCKS",
            memtrack::DEFAULT_MAX_LIVE_BLOCKS.into(),
        ),
        (
            "memtrack::MAX_LIVE_BLOCKS",
            memtrack::MAX_LIVE_BLOCKS.into(),
        ),
        (
            "memtrack::DEFAULT_PREALLOCATED_LIVE_BLOCKS",
            memtrack::DEFAULT_PREALLOCATED_LIVE_BLOCKS.into(),
        ),
        (
            "memtrack::LIVE_BLOCKS_AT_LOAD",
            memtrack::LIVE_BLOCKS_AT_LOAD.into(),
        ),
        (
            "memtrack::GROW_AT_LIVE_BLOCKS",
            memtrack::GROW_AT_LIVE_BLOCKS.into(),
        ),
        (
            "memtrack_common::live_slot::LEN",
            memtrack_common::live_slot::LEN.into(),
        ),
        (
            "memtrack::testing::TEST_LIVE_BLOCKS",
            memtrack::testing::TEST_LIVE_BLOCKS.into(),
        ),
        (
            "memtrack_common::MAX_TRACKED_PROCESSES",
            memtrack_common::MAX_TRACKED_PROCESSES.into(),
        ),
        (
            "memtrack::stacks::MAX_DEPTH",
            memtrack::stacks::MAX_DEPTH.into(),
        ),
        (
            "memtrack_common::stacks::frame::MAX_OBJECTS",
            memtrack_common::stacks::frame::MAX_OBJECTS.into(),
        ),
        (
            "memtrack_common::stacks::UNWIND_BATCH",
            memtrack_common::stacks::UNWIND_BATCH.into(),
        ),
        (
            "memtrack_common::stacks::MAX_MAPPINGS",
            memtrack_common::stacks::MAX_MAPPINGS as u64,
        ),
        (
            "memtrack_common::unwind::MAX_ROWS_PER_TABLE",
            memtrack_common::unwind::MAX_ROWS_PER_TABLE.into(),
        ),
        (
            "memtrack::timeline::MAX_BUCKETS",
            memtrack::timeline::MAX_BUCKETS as u64,
        ),
        (
            "memtrack::timeline::MIN_BUCKET_NS",
            memtrack::timeline::MIN_BUCKET_NS,
        ),
        (
            "memtrack_common::timeline::RING_BYTES",
            memtrack_common::timeline::RING_BYTES.into(),
        ),
        (
            "memtrack_common::ld_hook::MAX_STOPS",
            memtrack_common::ld_hook::MAX_STOPS.into(),
        ),
        ("memtrack::MAX_TREE_DEPTH", memtrack::MAX_TREE_DEPTH as u64),
        (
            "memtrack::MAX_RESULT_FILE_BYTES",
            memtrack::MAX_RESULT_FILE_BYTES,
        ),
        (
            "memtrack::MAX_STACKS_FILE_BYTES",
            memtrack::MAX_STACKS_FILE_BYTES,
        ),
        (
            "fifo_protocol::MAX_URI_LEN",
            fifo_protocol::MAX_URI_LEN as u64,
        ),
        (
            "fifo_protocol::frame::MAX_FRAME_LEN",
            fifo_protocol::frame::MAX_FRAME_LEN.into(),
        ),
        (
            "fifo_protocol::DEFAULT_TIMEOUT",
            fifo_protocol::DEFAULT_TIMEOUT.as_secs(),
        ),
        (
            "fifo_protocol::DEFAULT_PARTIAL_FRAME_TIMEOUT",
            fifo_protocol::DEFAULT_PARTIAL_FRAME_TIMEOUT.as_secs(),
        ),
    ];
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/reference/limits.md"
    );
    let chapter = std::fs::read_to_string(path).expect("the limits chapter reads");
    // Rows of the table: | limit | value | `constant` | beyond it |
    let rows: Vec<(String, u64)> = chapter
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let constant = cells.get(3)?.strip_prefix('`')?.strip_suffix('`')?;
            let value = cells.get(2)?.replace(',', "").parse().ok()?;
            Some((constant.to_string(), value))
        })
        .collect();
    for (name, value) in constants {
        let found: Vec<u64> = rows
            .iter()
            .filter(|(n, _)| n == name)
            .map(|&(_, v)| v)
            .collect();
        assert_eq!(found, [*value], "{name} in {path}");
    }
    let known: Vec<&str> = constants.iter().map(|&(n, _)| n).collect();
    // memtrack-core's private constants: its engine::kernel_stacks unit test checks them.
    for (name, _) in rows.iter().filter(|(n, _)| !n.starts_with("engine::")) {
        assert!(
            known.contains(&name.as_str()),
            "{path} names {name}, which this test does not check"
        );
    }
}

/// The heading ids mdbook gives a chapter: each heading's text, lower-cased, spaces as
/// `-`, only letters, digits, `-` and `_` kept (inline code's backticks dropped), a
/// repeated id numbered `-1`, `-2`, ... Whole-file `{{#include FILE}}`s are expanded.
fn heading_ids(file: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut ids: Vec<String> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if let Some(inner) = line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|rest| rest.strip_suffix("}}"))
            .filter(|path| !path.contains(':'))
        {
            let included = file.parent().expect("a chapter's folder").join(inner);
            if included.extension().is_some_and(|e| e == "md") {
                ids.extend(heading_ids(&included));
            }
            continue;
        }
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !in_code) else {
            continue;
        };
        let title = title.trim_start_matches('#').trim();
        let base: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let repeats = ids
            .iter()
            .filter(|id| *id == &base || id.starts_with(&format!("{base}-")))
            .count();
        ids.push(if repeats == 0 {
            base
        } else {
            format!("{base}-{repeats}")
        });
    }
    ids
}

/// Every link between the book's chapters that names a heading (`chapter.md#heading`,
/// `#heading`) finds that heading (mdbook-linkcheck2, which scripts/test.sh runs,
/// checks that the files exist, not the headings).
#[test]
fn the_books_links_to_headings_resolve() {
    let src = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src"));
    let mut chapters = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("the book's folder reads") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                chapters.push(path);
            }
        }
    }
    assert!(
        chapters.len() > 10,
        "the book's chapters under {}",
        src.display()
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for chapter in &chapters {
        let text = std::fs::read_to_string(chapter).expect("a chapter reads");
        for (_, rest) in text.match_indices("](").map(|(i, _)| text.split_at(i + 2)) {
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            let Some((path, fragment)) = target.split_once('#') else {
                continue;
            };
            if target.contains("://") || fragment.is_empty() {
                continue;
            }
            let file = if path.is_empty() {
                chapter.clone()
            } else {
                chapter.parent().expect("a chapter's folder").join(path)
            };
            checked += 1;
            if !file.exists() || !heading_ids(&file).iter().any(|id| id == fragment) {
                broken.push(format!("{}: {target}", chapter.display()));
            }
        }
    }
    assert!(
        checked > 0,
        "no link to a heading found: the check checks nothing"
    );
    assert!(broken.is_empty(), "links to missing headings: {broken:#?}");
}
