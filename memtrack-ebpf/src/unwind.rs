//! The in-kernel unwinder and the per-stack counters: at a counted allocation's entry,
//! walks the thread's stack with the `.eh_frame` rows user space loaded
//! (`memtrack_common::unwind` gives the step, memtrack-targets' `unwind::reference`
//! is the same walk in user space), interns the frames as a stack id, and charges the
//! block to it; a free is charged to the stack that allocated the block.
//!
//! The walk is a chain of programs (see `memtrack_common::stacks::WalkState`): the
//! entry program walks the first [`UNWIND_BATCH`] frames ([`start`]), then tail-calls
//! [`unwind_prog`] through `UNWIND_PROGS`, which walks the next batch and tail-calls
//! itself until the walk ends; the program that ends it interns the stack and writes
//! its id into the thread's pending call. One program walking all 64 frames exceeds
//! the verifier's budget; each program of the chain is verified once, for one batch.
//!
//! Every loop has a constant bound the verifier can count: frames per program
//! ([`UNWIND_BATCH`]), mapping search steps ([`MAPPING_SEARCH_STEPS`]) and row search
//! steps ([`MAX_SEARCH_STEPS`]).

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::uprobe,
    programs::ProbeContext,
};
use memtrack_common::{
    LiveKey, PidStats, global,
    stacks::{
        KernelStackCounts, LOST_STACK, MAPPING_SEARCH_STEPS, MAX_MAPPINGS, MAX_STACK_DEPTH,
        MAX_UNWIND_DEPTH, MappingEntry, NO_STACK, ProcessMappings, StackKey, UNWIND_BATCH,
        UNWIND_PROG_SLOT, WalkState, frame, stack_counts_key,
    },
    unwind::{MAX_SEARCH_STEPS, OFFSET_UNIT, PLT_PUSHED_FROM, UnwindRow, cfa_rule, sigframe},
};

use crate::{
    atomics,
    global_count::global_bump,
    maps::{
        GLOBAL, LIVE_STACK, MAPPINGS, PENDING, STACK_COUNTS, STACK_IDS, STACK_SCRATCH,
        UNWIND_PROGS, UNWIND_ROWS, UNWIND_STATE,
    },
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

/// The stack id a call's pending entry starts with: [`NO_STACK`] when stacks are off,
/// else [`LOST_STACK`] until the walk that [`start`] begins writes the real one (a
/// walk cut short leaves it lost, never wrong).
#[inline(always)]
pub fn initial_stack() -> u32 {
    if depth() == 0 { NO_STACK } else { LOST_STACK }
}

/// Walks the stack of the counted call whose pending entry thread `pid_tgid` has just
/// recorded (at `entry_sp`), from the probe's registers `ip`, `sp`, `bp`: the first
/// batch here, the rest by tail calls. Call it last: after a tail call the entry
/// program does not resume.
#[inline(always)]
pub fn start(ctx: &ProbeContext, pid_tgid: u64, entry_sp: u64, ip: u64, sp: u64, bp: u64) {
    let depth = depth();
    if depth == 0 {
        return;
    }
    let (Some(key), Some(state)) = (STACK_SCRATCH.get_ptr_mut(0), UNWIND_STATE.get_ptr_mut(0))
    else {
        return;
    };
    // SAFETY: the scratch is this CPU's own for the program's run.
    let frames = unsafe { &mut (*key).frames };
    for slot in frames.iter_mut() {
        *slot = 0;
    }
    let mut s = WalkState {
        owner: pid_tgid,
        entry_sp,
        ip,
        sp,
        bp,
        stored: 0,
        is_return_address: 0,
    };
    // SAFETY: plain data read in place.
    let end = match unsafe { MAPPINGS.get(&((pid_tgid >> 32) as u32)) } {
        // The allocation function's own frame is walked, not stored.
        Some(m) => match step(frames, m, depth as usize, &mut s, false) {
            Some(end) => Some(end),
            None => walk_batch(frames, m, depth as usize, &mut s),
        },
        None => Some(frame::end::UNKNOWN),
    };
    // SAFETY: both point into this CPU's map values.
    unsafe { continue_or_finish(ctx, &mut *key, &mut *state, s, end) };
}

/// The unwind program: walks the next batch of the walk `UNWIND_STATE` holds, then
/// tail-calls itself or ends the walk. Reached only by tail calls (attached to
/// nothing), and loaded like the entry program (tail calls need the same program type
/// and expected attach type).
#[uprobe]
pub fn unwind_prog(ctx: ProbeContext) -> u32 {
    let depth = depth();
    if depth == 0 {
        return 0;
    }
    let (Some(key), Some(state)) = (STACK_SCRATCH.get_ptr_mut(0), UNWIND_STATE.get_ptr_mut(0))
    else {
        return 0;
    };
    // SAFETY: this CPU's map value, copied out.
    let mut s = unsafe { *state };
    if s.owner != bpf_get_current_pid_tgid() {
        // Another thread's walk took this CPU's state over: this one's pending call
        // keeps LOST_STACK.
        return 0;
    }
    // SAFETY: the scratch is this CPU's own for the program's run.
    let frames = unsafe { &mut (*key).frames };
    // SAFETY: plain data read in place.
    let end = match unsafe { MAPPINGS.get(&((s.owner >> 32) as u32)) } {
        Some(m) => walk_batch(frames, m, depth as usize, &mut s),
        None => Some(frame::end::UNKNOWN),
    };
    // SAFETY: both point into this CPU's map values.
    unsafe { continue_or_finish(&ctx, &mut *key, &mut *state, s, end) };
    0
}

/// After a batch: ends the walk when it has an end, else saves its state and
/// tail-calls the unwind program. A tail call that fails returns here, and the pending
/// call keeps LOST_STACK.
#[inline(always)]
fn continue_or_finish(
    ctx: &ProbeContext,
    key: &mut StackKey,
    state: &mut WalkState,
    s: WalkState,
    end: Option<u64>,
) {
    let Some(end) = end else {
        *state = s;
        // SAFETY: the context is the probe's own, passed on unchanged.
        unsafe { UNWIND_PROGS.tail_call(ctx, UNWIND_PROG_SLOT) };
        return;
    };
    let end_bits = end << frame::END_SHIFT;
    let stored = s.stored as usize;
    if stored == 0 {
        key.frames[0] = frame::NO_FRAME | end_bits;
    } else if let Some(last) = key.frames.get_mut(index(stored - 1)) {
        *last |= end_bits;
    }
    let id = intern(key);
    if let Some(p) = PENDING.get_ptr_mut(&s.owner) {
        // SAFETY: only this thread touches its own entry; the entry_sp check makes sure
        // it is still the call the walk began for.
        unsafe {
            if (*p).entry_sp == s.entry_sp && (*p).stack == LOST_STACK {
                (*p).stack = id;
            }
        }
    }
}

/// Makes the verifier see the bound of an index (see `account::slot`).
#[inline(always)]
fn index(i: usize) -> usize {
    // SAFETY: reading a local.
    unsafe { core::ptr::read_volatile(&i) }
}

/// Walks up to [`UNWIND_BATCH`] frames into `frames`; the end (`frame::end`) when the
/// walk ended, None when it goes on.
#[inline(always)]
fn walk_batch(
    frames: &mut [u64; MAX_STACK_DEPTH],
    mappings: &ProcessMappings,
    depth: usize,
    s: &mut WalkState,
) -> Option<u64> {
    for _ in 0..UNWIND_BATCH {
        if let Some(end) = step(frames, mappings, depth, s, true) {
            return Some(end);
        }
    }
    None
}

/// One frame: stores it when `store` (else it is the allocation function's own),
/// then moves `s` to its caller. The end (`frame::end`) when there is none to move to.
#[inline(always)]
fn step(
    frames: &mut [u64; MAX_STACK_DEPTH],
    mappings: &ProcessMappings,
    depth: usize,
    s: &mut WalkState,
    store: bool,
) -> Option<u64> {
    let ip = s.ip;
    let sp = s.sp;
    let is_return_address = s.is_return_address != 0;
    if store && s.stored as usize >= depth {
        return Some(frame::end::TRUNCATED);
    }
    let pc = if is_return_address {
        ip.wrapping_sub(1)
    } else {
        ip
    };
    let mapping = find_mapping(mappings, pc);
    if store {
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
        let Some(slot) = frames.get_mut(index(s.stored as usize)) else {
            return Some(frame::end::UNKNOWN);
        };
        *slot = value;
        s.stored += 1;
    }
    let Some(m) = mapping else {
        return Some(frame::end::UNKNOWN);
    };
    let Some(row) = find_row(m, pc.wrapping_sub(m.bias)) else {
        return Some(frame::end::UNKNOWN);
    };
    let offset = u64::from(row.cfa_offset) * OFFSET_UNIT;
    let cfa = match row.cfa_rule {
        cfa_rule::RSP => sp.wrapping_add(offset),
        cfa_rule::RBP => s.bp.wrapping_add(offset),
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
                return Some(frame::end::UNKNOWN);
            };
            s.ip = r_ip;
            s.sp = r_sp;
            s.bp = r_bp;
            s.is_return_address = 0;
            return None;
        }
        cfa_rule::END_OF_STACK => return Some(frame::end::COMPLETE),
        _ => return Some(frame::end::UNKNOWN),
    };
    if cfa <= sp {
        return Some(frame::end::UNKNOWN);
    }
    let Some(ra) = read(cfa.wrapping_sub(8)) else {
        return Some(frame::end::UNKNOWN);
    };
    if row.rbp_rule < 0 {
        let at = cfa.wrapping_sub(u64::from(row.rbp_rule.unsigned_abs()) * OFFSET_UNIT);
        match read(at) {
            Some(v) => s.bp = v,
            None => return Some(frame::end::UNKNOWN),
        }
    }
    s.ip = ra;
    s.sp = cfa;
    s.is_return_address = 1;
    None
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
fn intern(key: &StackKey) -> u32 {
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
