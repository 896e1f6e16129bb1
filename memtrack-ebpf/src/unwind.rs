//! The in-kernel unwinder and the per-stack counters: at a counted allocation's entry,
//! walks the thread's stack with the `.eh_frame` rows user space loaded
//! (`memtrack_common::unwind` gives the step, memtrack-targets' `unwind::reference`
//! is the same walk in user space), interns the frames as a stack id, and charges the
//! block to it; a free is charged to the stack that allocated the block.
//!
//! Every loop has a constant bound the verifier can count: frames
//! ([`MAX_UNWIND_DEPTH`] + 1, the allocation function's own frame is walked but not
//! stored), mapping search steps ([`MAPPING_SEARCH_STEPS`]) and row search steps
//! ([`MAX_SEARCH_STEPS`]).

use aya_ebpf::helpers::bpf_probe_read_user;
use memtrack_common::{
    LiveKey, PidStats, global,
    stacks::{
        KernelStackCounts, LOST_STACK, MAPPING_SEARCH_STEPS, MAX_MAPPINGS, MAX_STACK_DEPTH,
        MAX_UNWIND_DEPTH, MappingEntry, NO_STACK, ProcessMappings, frame, stack_counts_key,
    },
    unwind::{MAX_SEARCH_STEPS, OFFSET_UNIT, PLT_PUSHED_FROM, UnwindRow, cfa_rule, sigframe},
};

use crate::{
    atomics,
    global_count::global_bump,
    maps::{GLOBAL, LIVE_STACK, MAPPINGS, STACK_COUNTS, STACK_IDS, STACK_SCRATCH, UNWIND_ROWS},
};

/// `BPF_NOEXIST`: insert only if the key is new.
const NOEXIST: u64 = 1;

/// The frames to store at most; 0 when stacks are off. A read-only global that user
/// space sets before loading (`memtrack_common::stacks::DEPTH_GLOBAL`): the verifier
/// reads it as a constant, so with stacks off it never walks the unwinder at all.
#[unsafe(no_mangle)]
static STACK_DEPTH: u32 = 0;

/// The frames to store at most; 0 when stacks are off.
#[inline(always)]
pub fn depth() -> u32 {
    // SAFETY: reading a global; volatile keeps the compiler from folding the 0.
    let d = unsafe { core::ptr::read_volatile(&STACK_DEPTH) };
    if d < MAX_UNWIND_DEPTH {
        d
    } else {
        MAX_UNWIND_DEPTH
    }
}

/// The stack id of the allocation whose entry probe sees registers `ip`, `sp`, `bp`
/// in process `tgid`: [`NO_STACK`] when stacks are off, [`LOST_STACK`] when it could not
/// be interned.
#[inline(never)]
pub fn stack_of(tgid: u32, ip: u64, sp: u64, bp: u64) -> u32 {
    let depth = depth();
    if depth == 0 {
        return NO_STACK;
    }
    let Some(key) = STACK_SCRATCH.get_ptr_mut(0) else {
        return LOST_STACK;
    };
    // SAFETY: the scratch is this CPU's own for the program's run.
    let frames = unsafe { &mut (*key).frames };
    for slot in frames.iter_mut() {
        *slot = 0;
    }
    // SAFETY: plain data read in place.
    let (stored, end) = match unsafe { MAPPINGS.get(&tgid) } {
        Some(mappings) => walk(frames, mappings, depth as usize, ip, sp, bp),
        None => (0, frame::end::UNKNOWN),
    };
    let end_bits = end << frame::END_SHIFT;
    if stored == 0 {
        frames[0] = frame::NO_FRAME | end_bits;
    } else if let Some(last) = frames.get_mut(index(stored - 1)) {
        *last |= end_bits;
    }
    // SAFETY: key points into the scratch map value.
    intern(unsafe { &*key })
}

/// Makes the verifier see the bound of an index (see `account::slot`).
#[inline(always)]
fn index(i: usize) -> usize {
    // SAFETY: reading a local.
    unsafe { core::ptr::read_volatile(&i) }
}

/// Walks the stack into `frames`; returns how many were stored and the end
/// (`frame::end`).
#[inline(always)]
fn walk(
    frames: &mut [u64; MAX_STACK_DEPTH],
    mappings: &ProcessMappings,
    depth: usize,
    mut ip: u64,
    mut sp: u64,
    mut bp: u64,
) -> (usize, u64) {
    let mut is_return_address = false;
    let mut stored = 0usize;
    for i in 0..=MAX_UNWIND_DEPTH as usize {
        let pc = if is_return_address {
            ip.wrapping_sub(1)
        } else {
            ip
        };
        let mapping = find_mapping(mappings, pc);
        if i > 0 {
            if i - 1 >= depth {
                return (stored, frame::end::TRUNCATED);
            }
            let mut value = match mapping {
                Some(m) => {
                    (ip.wrapping_sub(m.bias) & frame::ADDRESS_MASK)
                        | ((u64::from(m.object) + 1) & frame::OBJECT_MASK) << frame::OBJECT_SHIFT
                }
                None => ip & frame::ADDRESS_MASK,
            };
            if !is_return_address {
                value |= frame::INTERRUPTED;
            }
            let Some(slot) = frames.get_mut(index(i - 1)) else {
                return (stored, frame::end::UNKNOWN);
            };
            *slot = value;
            stored = i;
        }
        let Some(m) = mapping else {
            return (stored, frame::end::UNKNOWN);
        };
        let Some(row) = find_row(m, pc.wrapping_sub(m.bias)) else {
            return (stored, frame::end::UNKNOWN);
        };
        let offset = u64::from(row.cfa_offset) * OFFSET_UNIT;
        let cfa = match row.cfa_rule {
            cfa_rule::RSP => sp.wrapping_add(offset),
            cfa_rule::RBP => bp.wrapping_add(offset),
            cfa_rule::PLT => {
                let pushed = if ip & 15 >= PLT_PUSHED_FROM { 8 } else { 0 };
                sp.wrapping_add(offset).wrapping_add(pushed)
            }
            cfa_rule::SIGNAL_FRAME => {
                let (Some(r_ip), Some(r_sp), Some(r_bp)) = (
                    read(sp.wrapping_add(sigframe::RIP)),
                    read(sp.wrapping_add(sigframe::RSP)),
                    read(sp.wrapping_add(sigframe::RBP)),
                ) else {
                    return (stored, frame::end::UNKNOWN);
                };
                ip = r_ip;
                sp = r_sp;
                bp = r_bp;
                is_return_address = false;
                continue;
            }
            cfa_rule::END_OF_STACK => return (stored, frame::end::COMPLETE),
            _ => return (stored, frame::end::UNKNOWN),
        };
        if cfa <= sp {
            return (stored, frame::end::UNKNOWN);
        }
        let Some(ra) = read(cfa.wrapping_sub(8)) else {
            return (stored, frame::end::UNKNOWN);
        };
        if row.rbp_rule < 0 {
            let at = cfa.wrapping_sub(u64::from(row.rbp_rule.unsigned_abs()) * OFFSET_UNIT);
            match read(at) {
                Some(v) => bp = v,
                None => return (stored, frame::end::UNKNOWN),
            }
        }
        ip = ra;
        sp = cfa;
        is_return_address = true;
    }
    (stored, frame::end::TRUNCATED)
}

/// 8 bytes of the thread's stack.
#[inline(always)]
fn read(addr: u64) -> Option<u64> {
    // SAFETY: the helper checks the address.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}

/// 1 if `a <= b`, else 0, without a branch: both searches below are branch-free, so
/// the verifier walks each step once instead of once per path (a branching search
/// exceeds its budget within a few frames).
#[inline(always)]
fn le(a: u64, b: u64) -> u64 {
    // Both are below 2^63 (u32 values, user-space addresses), so the difference's top
    // bit is the comparison.
    (b.wrapping_sub(a) >> 63) ^ 1
}

/// The mapping holding runtime address `pc`: the last one starting at or below it
/// (branch-free search over the sorted entries, [`MAPPING_SEARCH_STEPS`] halvings).
#[inline(always)]
fn find_mapping(m: &ProcessMappings, pc: u64) -> Option<&MappingEntry> {
    let count = if (m.count as usize) < MAX_MAPPINGS {
        m.count as u64
    } else {
        MAX_MAPPINGS as u64
    };
    if count == 0 {
        return None;
    }
    let pc = pc & ((1 << 63) - 1);
    // Invariant: the answer, if any, is in [base, base + n).
    let mut base = 0u64;
    let mut n = count;
    for _ in 0..MAPPING_SEARCH_STEPS {
        let half = n / 2;
        let e = &m.entries[((base + half) as usize) & (MAX_MAPPINGS - 1)];
        base += le(e.start & ((1 << 63) - 1), pc) * half;
        n -= half;
    }
    let e = &m.entries[(base as usize) & (MAX_MAPPINGS - 1)];
    if e.start <= pc && pc < e.end {
        Some(e)
    } else {
        None
    }
}

/// The row of ELF virtual address `vaddr` in mapping `m`'s object: the last row with
/// `pc <= vaddr` (branch-free search, [`MAX_SEARCH_STEPS`] halvings).
#[inline(always)]
fn find_row(m: &MappingEntry, vaddr: u64) -> Option<UnwindRow> {
    if vaddr > u64::from(u32::MAX) || m.rows == 0 {
        return None;
    }
    let first = m.first_row;
    let mut base = 0u32;
    let mut n = m.rows;
    for _ in 0..MAX_SEARCH_STEPS {
        let half = n / 2;
        let row = UNWIND_ROWS.get(first.wrapping_add(base + half))?;
        base += (le(u64::from(row.pc), vaddr) as u32) * half;
        n -= half;
    }
    let row = UNWIND_ROWS.get(first.wrapping_add(base)).copied()?;
    if u64::from(row.pc) <= vaddr {
        Some(row)
    } else {
        None
    }
}

/// The id of the stack in the scratch `key`, interning it if new.
#[inline(always)]
fn intern(key: &memtrack_common::stacks::StackKey) -> u32 {
    // SAFETY: plain u32 value.
    if let Some(&id) = unsafe { STACK_IDS.get(key) } {
        return id;
    }
    let Some(last) = GLOBAL.get_ptr_mut(global::LAST_STACK_ID) else {
        return LOST_STACK;
    };
    let Some(id) = atomics::add_fetch(last, 1) else {
        return LOST_STACK;
    };
    if id >= u64::from(LOST_STACK) {
        return LOST_STACK;
    }
    let id = id as u32;
    if STACK_IDS.insert(key, &id, NOEXIST).is_ok() {
        return id;
    }
    // Another CPU interned the same stack meanwhile (its id wins), or the map is full.
    // SAFETY: plain u32 value.
    unsafe { STACK_IDS.get(key) }.copied().unwrap_or(LOST_STACK)
}

/// The counters of `stack` in `tgid`, created zeroed if new.
#[inline(always)]
fn counts_of(tgid: u32, stack: u32) -> Option<*mut KernelStackCounts> {
    let key = stack_counts_key(tgid, stack);
    if let Some(c) = STACK_COUNTS.get_ptr_mut(&key) {
        return Some(c);
    }
    let _ = STACK_COUNTS.insert(&key, &ZERO_COUNTS, NOEXIST);
    let c = STACK_COUNTS.get_ptr_mut(&key);
    if c.is_none() {
        global_bump(global::STACK_COUNTS_FULL);
    }
    c
}

const ZERO_COUNTS: KernelStackCounts = KernelStackCounts {
    alloc_blocks: 0,
    alloc_bytes: 0,
    freed_blocks: 0,
    freed_bytes: 0,
    live_blocks: 0,
    live_bytes: 0,
    epoch: 0,
    peak_blocks: 0,
    peak_bytes: 0,
    max_live_bytes: 0,
    max_live_blocks: 0,
};

/// Saves the stack's live counters as its share of the last peak when a peak came since
/// their last change (see `KernelStackCounts`). Runs before every change of them.
#[inline(always)]
fn snapshot(c: *mut KernelStackCounts, stats: *mut PidStats) {
    // SAFETY: both point into live map values.
    unsafe {
        let epoch = atomics::load(&raw const (*stats).peak_epoch);
        if (*c).epoch < epoch {
            (*c).peak_blocks = (*c).live_blocks;
            (*c).peak_bytes = (*c).live_bytes;
            (*c).epoch = epoch;
        }
    }
}

/// A block of `size` bytes at `addr` allocated from `stack` (before the process's live
/// counters change, so a peak this block reaches includes it).
#[inline(always)]
pub fn charge_alloc(stats: *mut PidStats, tgid: u32, stack: u32, addr: u64, size: u64) {
    if stack == NO_STACK {
        return;
    }
    let Some(c) = counts_of(tgid, stack) else {
        return;
    };
    snapshot(c, stats);
    // SAFETY: c points into a live map value.
    unsafe {
        atomics::add(&raw mut (*c).alloc_blocks, 1);
        atomics::add(&raw mut (*c).alloc_bytes, size);
        atomics::add(&raw mut (*c).live_blocks, 1);
        atomics::add(&raw mut (*c).live_bytes, size);
        let live = atomics::load(&raw const (*c).live_bytes);
        if live > (*c).max_live_bytes {
            (*c).max_live_bytes = live;
            (*c).max_live_blocks = atomics::load(&raw const (*c).live_blocks);
        }
    }
    let key = LiveKey {
        tgid,
        _pad: 0,
        addr,
    };
    if LIVE_STACK.insert(&key, &stack, 0).is_err() {
        global_bump(global::STACK_COUNTS_FULL);
    }
}

/// A block of `size` bytes at `addr` was released: charged to the stack that
/// allocated it.
#[inline(always)]
pub fn charge_release(stats: *mut PidStats, tgid: u32, addr: u64, size: u64) {
    if depth() == 0 {
        return;
    }
    let key = LiveKey {
        tgid,
        _pad: 0,
        addr,
    };
    // SAFETY: plain u32 value.
    let Some(&stack) = (unsafe { LIVE_STACK.get(&key) }) else {
        return;
    };
    let _ = LIVE_STACK.remove(&key);
    let Some(c) = counts_of(tgid, stack) else {
        return;
    };
    snapshot(c, stats);
    // SAFETY: c points into a live map value.
    unsafe {
        atomics::add(&raw mut (*c).freed_blocks, 1);
        atomics::add(&raw mut (*c).freed_bytes, size);
        atomics::sub(&raw mut (*c).live_blocks, 1);
        atomics::sub(&raw mut (*c).live_bytes, size);
    }
}
