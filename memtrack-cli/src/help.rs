//! The help texts that name a limit or a default, made from the constants that hold
//! them, so that `--help`, the errors and the docs never disagree.

use memtrack::{
    DEFAULT_MAX_LIVE_BLOCKS, DEFAULT_PREALLOCATED_LIVE_BLOCKS, GROW_AT_LIVE_BLOCKS,
    LIVE_BLOCKS_AT_LOAD, MAX_LIVE_BLOCKS, stacks::MAX_DEPTH,
};

/// `run --max-live-blocks`.
pub fn max_live_blocks() -> String {
    format!(
        "Live blocks the kernel maps hold across all tracked processes: 1 to \
         {MAX_LIVE_BLOCKS} (default {DEFAULT_MAX_LIVE_BLOCKS}); beyond it, blocks are \
         counted as lost events. The first --preallocated-live-blocks have preallocated \
         entries; the others' entries are allocated as blocks go live, and their hash \
         buckets are reserved when memtrack starts"
    )
}

/// `run --preallocated-live-blocks`.
pub fn preallocated_live_blocks() -> String {
    format!(
        "How many of the --max-live-blocks have preallocated kernel entries: 1 to \
         {MAX_LIVE_BLOCKS} (default {DEFAULT_PREALLOCATED_LIVE_BLOCKS}; more than \
         --max-live-blocks means all), the cheapest per allocator call (blocks live \
         beyond them cost more per call). The first {LIVE_BLOCKS_AT_LOAD} are reserved \
         when memtrack starts, the others once the tracked processes keep \
         {GROW_AT_LIVE_BLOCKS} blocks live, in the background (blocks that go live \
         before that are kept in entries allocated on demand)"
    )
}

/// `run --stacks`.
pub fn stacks() -> String {
    format!(
        "Record the call stack of every allocation, unwound in the kernel, at most DEPTH \
         frames (1 to {MAX_DEPTH}, or max, the default; deeper stacks are cut and marked \
         truncated). Each process's stacks go beside its result \
         ({{pid}}.MemtrackStacks.msgpack), for `memtrack report --stacks`"
    )
}
