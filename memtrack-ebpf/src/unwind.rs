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
//! steps ([`MAX_SEARCH_STEPS`]). The two searches are branch-free but for their end:
//! each stops once one candidate is left, so it takes `ceil(log2(n))` steps of the
//! entries it searches. Their dependent loads were most of a frame's cost, so a frame
//! first looks its call site up in this CPU's `ROW_CACHE` ([`lookup`]): a call site
//! walked before under the same mappings costs one slot read instead of both searches.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user, generated},
    macros::uprobe,
    programs::ProbeContext,
};
use memtrack_common::{
    LiveBlock, PidStats, global,
    stack_cache::{OWN_STEP, WalkTrace, walks},
    stacks::{
        KernelStackCounts, LOST_STACK, LastStack, MAPPING_SEARCH_STEPS, MAX_MAPPINGS,
        MAX_STACK_DEPTH, MAX_UNWIND_DEPTH, MappingEntry, NO_STACK, ProcessMappings, RowCache,
        RowCacheSlot, StackKey, StackWindow, UNWIND_BATCH, UNWIND_PROG_SLOT, WINDOW_BYTES,
        WINDOW_WORDS, WalkState, frame, stack_counts_key,
    },
    unwind::{MAX_SEARCH_STEPS, OFFSET_UNIT, PLT_PUSHED_FROM, UnwindRow, cfa_rule, sigframe},
};

use crate::{
    atomics,
    global_count::global_bump,
    maps::{
        GLOBAL, LAST_STACK, MAPPINGS, ROW_CACHE, STACK_COUNTS, STACK_IDS, STACK_SCRATCH,
        STACK_WINDOW, THREADS, UNWIND_PROGS, UNWIND_ROWS, UNWIND_STATE,
    },
    stack_cache,
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

/// This CPU's buffers of a walk: the frames (the scratch key), the copy of part of the
/// stack, what the scratch held before, the walk's state and the remembered lookups.
struct Buffers {
    key: *mut StackKey,
    window: *mut StackWindow,
    last: *mut LastStack,
    state: *mut WalkState,
    cache: *mut RowCache,
    trace: *mut WalkTrace,
}

/// This CPU's [`Buffers`], None only if a per-CPU map has no entry 0.
#[inline(always)]
fn buffers() -> Option<Buffers> {
    Some(Buffers {
        key: STACK_SCRATCH.get_ptr_mut(0)?,
        window: STACK_WINDOW.get_ptr_mut(0)?,
        last: LAST_STACK.get_ptr_mut(0)?,
        state: UNWIND_STATE.get_ptr_mut(0)?,
        cache: ROW_CACHE.get_ptr_mut(0)?,
        trace: stack_cache::trace()?,
    })
}

/// Finds the stack of the counted call whose pending entry thread `pid_tgid` has just
/// recorded (at `entry_sp`), from the probe's registers `ip`, `sp`, `bp`: from this
/// CPU's cache of walks when it remembers this one (stack_cache.rs), else by walking
/// it, the first batch here, the rest by tail calls. Call it last: after a tail call
/// the entry program does not resume.
#[inline(always)]
pub fn start(ctx: &ProbeContext, pid_tgid: u64, entry_sp: u64, ip: u64, sp: u64, bp: u64) {
    let depth = depth();
    if depth == 0 {
        return;
    }
    let Some(b) = buffers() else {
        return;
    };
    // SAFETY: plain data read in place.
    let mappings = unsafe { MAPPINGS.get(&((pid_tgid >> 32) as u32)) };
    if let Some(m) = mappings {
        let id = stack_cache::cached(ip, sp, bp, m.generation);
        if id != NO_STACK {
            stack_cache::count(walks::REUSED);
            set_pending_stack(entry_sp, id);
            return;
        }
    }
    stack_cache::count(walks::WALKED);
    // SAFETY: the buffers are this CPU's own for the program's run.
    let (frames, window, last, cache) = unsafe {
        (
            &mut (*b.key).frames,
            &mut *b.window,
            &mut *b.last,
            &mut *b.cache,
        )
    };
    // The scratch is overwritten from here on: until this walk ends it holds no
    // complete key.
    let prev = *last;
    last.id = NO_STACK;
    let mut s = WalkState {
        owner: pid_tgid,
        entry_sp,
        ip,
        sp,
        bp,
        stored: 0,
        is_return_address: 0,
        window: 0,
        diff: 0,
        prev,
        nonce: 0,
    };
    let end = match mappings {
        // The allocation function's own frame is walked, not stored.
        Some(mappings) => {
            stack_cache::begin(b.trace, &mut s, mappings.generation);
            let mut w = Walk {
                frames,
                window,
                cache,
                trace: b.trace,
                mappings,
                depth: depth as usize,
            };
            match step(&mut w, &mut s, false) {
                Some(end) => Some(end),
                None => walk_batch(&mut w, &mut s),
            }
        }
        None => Some(frame::end::UNKNOWN),
    };
    continue_or_finish(ctx, &b, s, end);
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
    let Some(b) = buffers() else {
        return 0;
    };
    // SAFETY: this CPU's map value, copied out.
    let mut s = unsafe { *b.state };
    if s.owner != bpf_get_current_pid_tgid() {
        // Another thread's walk took this CPU's state over: this one's pending call
        // keeps LOST_STACK.
        return 0;
    }
    // SAFETY: the buffers are this CPU's own for the program's run.
    let (frames, window, cache) = unsafe { (&mut (*b.key).frames, &mut *b.window, &mut *b.cache) };
    // SAFETY: plain data read in place.
    let end = match unsafe { MAPPINGS.get(&((s.owner >> 32) as u32)) } {
        Some(mappings) => walk_batch(
            &mut Walk {
                frames,
                window,
                cache,
                trace: b.trace,
                mappings,
                depth: depth as usize,
            },
            &mut s,
        ),
        None => Some(frame::end::UNKNOWN),
    };
    continue_or_finish(&ctx, &b, s, end);
    0
}

/// After a batch: ends the walk when it has an end, else saves its state and
/// tail-calls the unwind program. A tail call that fails returns here, and the pending
/// call keeps LOST_STACK.
#[inline(always)]
fn continue_or_finish(ctx: &ProbeContext, b: &Buffers, s: WalkState, end: Option<u64>) {
    let Some(end) = end else {
        // SAFETY: this CPU's map value.
        unsafe { *b.state = s };
        // SAFETY: the context is the probe's own, passed on unchanged.
        unsafe { UNWIND_PROGS.tail_call(ctx, UNWIND_PROG_SLOT) };
        return;
    };
    if end == CUT_SHORT {
        return;
    }
    // SAFETY: the buffers are this CPU's own for the program's run.
    let (key, last) = unsafe { (&mut *b.key, &mut *b.last) };
    let id = finish(key, &s, end);
    if id != LOST_STACK {
        *last = LastStack {
            id,
            len: s.stored.max(1),
            end,
        };
    }
    set_pending_stack(s.entry_sp, id);
    stack_cache::remember(ctx, b.trace, &s, end, id);
}

/// Writes stack `id` into the calling thread's pending call, if that is still the call
/// made at `entry_sp` and it has no stack yet.
#[inline(always)]
fn set_pending_stack(entry_sp: u64, id: u32) {
    if let Some(state) = THREADS.current(false) {
        // SAFETY: only this thread touches its own entry (the walk's thread: the entry
        // program's, or `unwind_prog` checked the owner); the depth and entry_sp checks
        // make sure it is still the call the walk began for.
        unsafe {
            let p = &raw mut (*state).pending;
            if (*p).depth != 0 && (*p).entry_sp == entry_sp && (*p).stack == LOST_STACK {
                (*p).stack = id;
            }
        }
    }
}

/// Completes the key in the scratch for a walk that ended with `end` (the end bits on
/// the last slot, every later slot zero) and returns its id: the previous stack's when
/// the walk wrote the very frames the scratch held (see `LastStack`), else interned.
#[inline(always)]
fn finish(key: &mut StackKey, s: &WalkState, end: u64) -> u32 {
    let end_bits = end << frame::END_SHIFT;
    let stored = s.stored as usize;
    if stored == 0 {
        key.frames[0] = frame::NO_FRAME | end_bits;
    } else if let Some(last) = key.frames.get_mut(index(stored - 1)) {
        *last |= end_bits;
    }
    let prev = &s.prev;
    if stored != 0
        && prev.id != NO_STACK
        && s.diff == 0
        && prev.len as usize == stored
        && prev.end == end
    {
        // Every slot up to `stored` holds what it held, and the later ones were zero.
        return prev.id;
    }
    // Slots past this stack may hold a longer earlier stack's frames.
    let used = stored.max(1);
    for (i, slot) in key.frames.iter_mut().enumerate() {
        if i >= used {
            // SAFETY: a slot of the scratch; volatile so that no memset call (which
            // BPF lacks) is made of the loop.
            unsafe { core::ptr::write_volatile(slot, 0) };
        }
    }
    intern(key)
}

/// Makes the verifier see the bound of an index (see `account::slot`).
#[inline(always)]
fn index(i: usize) -> usize {
    // SAFETY: reading a local.
    unsafe { core::ptr::read_volatile(&i) }
}

/// What one program of the walk works with: this CPU's buffers and the process's
/// mappings.
struct Walk<'a> {
    /// The scratch key's frames.
    frames: &'a mut [u64; MAX_STACK_DEPTH],
    /// The copy of part of the stack.
    window: &'a mut StackWindow,
    /// The remembered frame lookups.
    cache: &'a mut RowCache,
    /// This CPU's trace of the walk, for the cache of walks (stack_cache.rs).
    trace: *mut WalkTrace,
    /// The process's executable mappings.
    mappings: &'a ProcessMappings,
    /// The frames to store at most.
    depth: usize,
}

/// Walks up to [`UNWIND_BATCH`] frames into the scratch; the end (`frame::end`) when
/// the walk ended, None when it goes on. A walk that has stored its `depth` frames and
/// found a caller beyond them ends there, truncated (no program of the chain is called
/// only to say so).
#[inline(always)]
fn walk_batch(w: &mut Walk, s: &mut WalkState) -> Option<u64> {
    for _ in 0..UNWIND_BATCH {
        if let Some(end) = step(w, s, true) {
            return Some(end);
        }
        if s.stored as usize >= w.depth {
            return Some(frame::end::TRUNCATED);
        }
    }
    None
}

/// The end bits of a frame slot.
const END_MASK: u64 = 3 << frame::END_SHIFT;

/// One frame: stores it when `store` (else it is the allocation function's own),
/// then moves `s` to its caller. The end (`frame::end`) when there is none to move to.
#[inline(always)]
fn step(w: &mut Walk, s: &mut WalkState, store: bool) -> Option<u64> {
    // The step's index in the trace: its frame's, or the allocation function's own.
    let k = if store { s.stored as usize } else { OWN_STEP };
    stack_cache::step_begins(w.trace, k);
    let ip = s.ip;
    let sp = s.sp;
    let is_return_address = s.is_return_address != 0;
    let pc = if is_return_address {
        ip.wrapping_sub(1)
    } else {
        ip
    };
    let Some(found) = lookup(w.cache, w.mappings, pc) else {
        return Some(CUT_SHORT);
    };
    if store {
        let mut value = match found {
            Found::Row { bias, object, .. } | Found::NoRow { bias, object } => {
                (ip.wrapping_sub(bias) & frame::ADDRESS_MASK)
                    | ((u64::from(object) + 1) & frame::OBJECT_MASK) << frame::OBJECT_SHIFT
            }
            Found::NotMapped => ip & frame::ADDRESS_MASK,
        };
        if !is_return_address {
            value |= frame::INTERRUPTED;
        }
        let Some(slot) = w.frames.get_mut(index(s.stored as usize)) else {
            return Some(frame::end::UNKNOWN);
        };
        // The previous stack's end bits are compared apart (`finish`).
        s.diff |= (*slot & !END_MASK) ^ value;
        *slot = value;
        s.stored += 1;
    }
    let Found::Row { row, .. } = found else {
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
            // A walk through a signal frame is not remembered (rare; its registers
            // would be more words to compare).
            stack_cache::unrememberable(w.trace, s);
            let (Some(r_bp), Some(r_sp), Some(r_ip)) = (
                read(w, s, sp.wrapping_add(sigframe::RBP)),
                read(w, s, sp.wrapping_add(sigframe::RSP)),
                read(w, s, sp.wrapping_add(sigframe::RIP)),
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
    stack_cache::step_rule(w.trace, k, row.cfa_rule);
    if cfa <= sp {
        return Some(frame::end::UNKNOWN);
    }
    // The saved rbp lies below the return address: read it first, so one window copied
    // from the lower address holds both.
    let mut bp = s.bp;
    let mut bp_at = 0;
    if row.rbp_rule < 0 {
        let at = cfa.wrapping_sub(u64::from(row.rbp_rule.unsigned_abs()) * OFFSET_UNIT);
        match read(w, s, at) {
            Some(v) => bp = v,
            None => return Some(frame::end::UNKNOWN),
        }
        bp_at = at;
    }
    stack_cache::step_bp(w.trace, k, bp_at, bp);
    let Some(ra) = read(w, s, cfa.wrapping_sub(8)) else {
        return Some(frame::end::UNKNOWN);
    };
    stack_cache::step_return(w.trace, k, cfa.wrapping_sub(8), ra);
    s.bp = bp;
    s.ip = ra;
    s.sp = cfa;
    s.is_return_address = 1;
    None
}

/// 8 bytes of the thread's stack at `addr`: from this walk's copy of the stack when it
/// holds them, else from a new copy of [`WINDOW_BYTES`] from `addr` on, else (the copy
/// failed: its end is not mapped) read alone.
#[inline(always)]
fn read(w: &mut Walk, s: &mut WalkState, addr: u64) -> Option<u64> {
    let window = &mut *w.window;
    let offset = addr.wrapping_sub(s.window);
    if s.window != 0 && offset <= WINDOW_BYTES - 8 && offset & 7 == 0 {
        return Some(window.words[(offset / 8) as usize & (WINDOW_WORDS - 1)]);
    }
    if addr != 0 && addr & 7 == 0 {
        // SAFETY: the helper checks the address; the destination is this CPU's buffer
        // of WINDOW_BYTES.
        let copied = unsafe {
            generated::bpf_probe_read_user(
                window.words.as_mut_ptr().cast(),
                WINDOW_BYTES as u32,
                addr as *const core::ffi::c_void,
            )
        };
        if copied == 0 {
            s.window = addr;
            return Some(window.words[0]);
        }
    }
    s.window = 0;
    // SAFETY: the helper checks the address.
    let word = unsafe { bpf_probe_read_user(addr as *const u64) }.ok();
    if word.is_none() {
        // The walk ends here as unknown, which a later one finding the word readable
        // would not: it is not remembered.
        stack_cache::unrememberable(w.trace, s);
    }
    word
}

/// What the lookup of a frame's call site found.
#[derive(Clone, Copy)]
enum Found {
    /// The mapping holding it (its load bias and object) and the row covering it.
    Row {
        bias: u64,
        object: u32,
        row: UnwindRow,
    },
    /// The mapping, but no row covers the address (the frame ends the walk as unknown).
    NoRow { bias: u64, object: u32 },
    /// No executable mapping of the process holds it.
    NotMapped,
}

/// The end a walk cut short returns instead of a `frame::end`: its call keeps
/// [`LOST_STACK`] (see [`lookup`]).
const CUT_SHORT: u64 = u64::MAX;

/// The mapping and row of runtime address `pc`: from this CPU's cache when a slot holds
/// them for the process's current mappings (no search), else by the two searches, whose
/// answer fills the slot. Either way the answer is read from the slot and checked
/// ([`RowCacheSlot::check`]), so the verifier sees one path on from there, whichever
/// way the slot was filled. None when the slot changed under this walk (another walk
/// on this CPU preempted it and took the slot): the walk is cut short and its stack
/// counts as lost.
#[inline(always)]
fn lookup(cache: &mut RowCache, mappings: &ProcessMappings, pc: u64) -> Option<Found> {
    let generation = mappings.generation;
    if generation == 0 {
        // Only ProcessMappings::EMPTY has stamp 0, and it maps nothing.
        return Some(Found::NotMapped);
    }
    let slot = &mut cache.slots[RowCacheSlot::index(pc, generation)];
    if slot.pc != pc || slot.generation != generation {
        let Some(m) = find_mapping(mappings, pc) else {
            return Some(Found::NotMapped);
        };
        let (bias, object) = (m.bias, m.object);
        let Some(row) = find_row(m, pc.wrapping_sub(bias)) else {
            return Some(Found::NoRow { bias, object });
        };
        *slot = RowCacheSlot {
            pc,
            bias,
            generation,
            object,
            row,
            check: RowCacheSlot::check_of(pc, bias, generation, object, &row),
        };
    }
    // Each field read once, and the check covers exactly the values used.
    let (c_pc, c_bias, c_generation, c_object, c_row, c_check) = (
        slot.pc,
        slot.bias,
        slot.generation,
        slot.object,
        slot.row,
        slot.check,
    );
    if c_pc != pc
        || c_generation != generation
        || c_check != RowCacheSlot::check_of(c_pc, c_bias, c_generation, c_object, &c_row)
    {
        // Half written by a walk this one preempted, or taken over since the check
        // above: emptied, so the next walk through it fills it again.
        slot.generation = 0;
        return None;
    }
    Some(Found::Row {
        bias: c_bias,
        object: c_object,
        row: c_row,
    })
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
/// (search over the sorted entries, branch-free but for its end: at most
/// [`MAPPING_SEARCH_STEPS`] halvings, fewer while fewer entries are left).
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
        // Done once one candidate is left: a process with 12 mappings takes 4 steps,
        // not all 9. Every early exit reaches the same point with the same live
        // registers, so the verifier prunes them there instead of walking on per exit.
        if n <= 1 {
            break;
        }
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
/// `pc <= vaddr` (search branch-free but for its end: `ceil(log2(m.rows))` halvings, at
/// most [`MAX_SEARCH_STEPS`]).
#[inline(always)]
fn find_row(m: &MappingEntry, vaddr: u64) -> Option<UnwindRow> {
    if vaddr > u64::from(u32::MAX) || m.rows == 0 {
        return None;
    }
    let first = m.first_row;
    let mut base = 0u32;
    let mut n = m.rows;
    for _ in 0..MAX_SEARCH_STEPS {
        // Done once one candidate is left: ceil(log2(rows)) steps (15 for the C
        // library's ~24k rows, a handful for a small executable), not always 24.
        if n <= 1 {
            break;
        }
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
    epoch: 0,
    peak_blocks: 0,
    peak_bytes: 0,
    max_live_bytes: 0,
    max_live_blocks: 0,
    born_at_sum: 0,
    freed_at_sum: 0,
};

/// The stack's live blocks now: allocated less freed (`KernelStackCounts::live_blocks`,
/// read from the map value).
#[inline(always)]
fn live_blocks(c: *const KernelStackCounts) -> u64 {
    // SAFETY: c points into a live map value.
    unsafe {
        atomics::load(&raw const (*c).alloc_blocks)
            .wrapping_sub(atomics::load(&raw const (*c).freed_blocks))
    }
}

/// Their bytes (`KernelStackCounts::live_bytes`).
#[inline(always)]
fn live_bytes(c: *const KernelStackCounts) -> u64 {
    // SAFETY: c points into a live map value.
    unsafe {
        atomics::load(&raw const (*c).alloc_bytes)
            .wrapping_sub(atomics::load(&raw const (*c).freed_bytes))
    }
}

/// Saves the stack's live counters as its share of the last peak when a peak came since
/// their last change (see `KernelStackCounts`). Runs before every change of them.
#[inline(always)]
fn snapshot(c: *mut KernelStackCounts, stats: *mut PidStats) {
    // SAFETY: both point into live map values.
    unsafe {
        let epoch = atomics::load(&raw const (*stats).peak_epoch);
        if (*c).epoch < epoch {
            (*c).peak_blocks = live_blocks(c);
            (*c).peak_bytes = live_bytes(c);
            (*c).epoch = epoch;
        }
    }
}

/// A block of `size` bytes allocated from `stack` (before the process's live counters
/// change, so a peak this block reaches includes it). Returns the stack the block is
/// charged to, which the live map keeps with the block for its release: `stack`, or
/// [`LOST_STACK`] when `stack`'s counters could not be created, or [`NO_STACK`] (stacks
/// off, or not even the lost counters could be created: counted as
/// `global::STACK_COUNTS_FULL`). Its allocation time goes into the stack's
/// `born_at_sum`, so the block needs no note of it: the time on the process's
/// allocation clock (`PidStats::bytes_allocated`, read from the counters the call
/// already holds: no clock read) just after this block, whose bytes `count_alloc`
/// adds to it next.
#[inline(always)]
pub fn charge_alloc(stats: *mut PidStats, tgid: u32, stack: u32, size: u64) -> u32 {
    if depth() == 0 || stack == NO_STACK {
        return NO_STACK;
    }
    let (stack, c) = match counts_of(tgid, stack) {
        Some(c) => (stack, c),
        None => match counts_of(tgid, LOST_STACK) {
            Some(c) => (LOST_STACK, c),
            None => return NO_STACK,
        },
    };
    // SAFETY: stats points into a live map value.
    let born = unsafe { atomics::load(&raw const (*stats).bytes_allocated) }.wrapping_add(size);
    snapshot(c, stats);
    // SAFETY: c points into a live map value.
    unsafe {
        atomics::add(&raw mut (*c).alloc_blocks, 1);
        atomics::add(&raw mut (*c).alloc_bytes, size);
        atomics::add(&raw mut (*c).born_at_sum, born);
        // Both with compare-and-swaps, for threads allocating from one stack at once:
        // a plain write could put a smaller maximum over a larger one another thread
        // had just written, or the blocks of an overtaken maximum over the newer one's
        // (a store can land after another CPU's later one: tests/stacks/racing_max.c).
        // Strictly above, as valgrind DHAT keeps the blocks of the first time the
        // maximum was reached.
        let now_live = live_bytes(c);
        let max = &raw mut (*c).max_live_bytes;
        if now_live > atomics::load(max) {
            let stored = match atomics::raise_to(max, now_live) {
                Some(true) => atomics::store_while(
                    &raw mut (*c).max_live_blocks,
                    live_blocks(c),
                    max,
                    now_live,
                ),
                other => other,
            };
            if stored.is_none() {
                atomics::add(&raw mut (*stats).lost_events, 1);
            }
        }
    }
    stack
}

/// A live `block` was released: charged to the stack the live map kept with it, its
/// release time on the allocation clock added to the stack's (its lifetime is that
/// less its allocation time, which `charge_alloc` added: the bytes the process
/// allocated while it was live). A realloc releases its old block before counting the
/// new one, which is not in the old block's lifetime.
#[inline(always)]
pub fn charge_release(stats: *mut PidStats, tgid: u32, block: &LiveBlock) {
    if depth() == 0 || block.stack == NO_STACK {
        return;
    }
    let Some(c) = counts_of(tgid, block.stack) else {
        return;
    };
    // SAFETY: stats points into a live map value.
    let now = unsafe { atomics::load(&raw const (*stats).bytes_allocated) };
    snapshot(c, stats);
    // SAFETY: c points into a live map value.
    unsafe {
        atomics::add(&raw mut (*c).freed_blocks, 1);
        atomics::add(&raw mut (*c).freed_bytes, block.size);
        atomics::add(&raw mut (*c).freed_at_sum, now);
    }
}
