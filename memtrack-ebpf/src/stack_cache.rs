//! The per-CPU cache of walks (`memtrack_common::stack_cache` says why a remembered walk
//! is exact): [`cached`] checks an allocation's stack against the slot of its registers
//! before any walk (a BPF global function, verified once on its own); a walk notes what
//! it reads in this CPU's `WALK_TRACE` as it goes ([`begin`], then unwind.rs), and
//! [`remember`] hands the finished walk to [`remember_prog`], which fills its slot.
//!
//! The remembering is its own program, reached by a tail call, so that its stack does
//! not add to the walk's (the kernel allows 512 bytes for a program and the functions
//! it calls), and branch-free but for its end, so that its loop over the steps is one
//! path for the verifier rather than one per combination of rules.

use core::sync::atomic::{Ordering, compiler_fence};

use aya_ebpf::{helpers::generated, macros::uprobe, programs::ProbeContext};
use memtrack_common::{
    stack_cache::{
        CACHE_SPAN_BYTES, CACHE_SPAN_WORDS, MAX_CACHED_READS, NO_RULE, OWN_STEP, StackCacheSlot,
        TRACE_STEPS, WalkTrace,
    },
    stacks::{LOST_STACK, MAX_STACK_DEPTH, NO_STACK, REMEMBER_PROG_SLOT, WalkState, frame},
    unwind::cfa_rule,
};

use crate::{
    atomics,
    maps::{CACHE_WINDOW, STACK_CACHE, STACK_WALKS, UNWIND_PROGS, WALK_TRACE},
};

/// 1: the cache is on (the default); 0: every stack is walked. A read-only global that
/// user space sets before loading (`memtrack_common::stack_cache::CACHE_GLOBAL`).
#[unsafe(no_mangle)]
static STACK_CACHE_ON: u32 = 1;

/// Whether the cache is on.
#[inline(always)]
fn enabled() -> bool {
    // SAFETY: reading a global; volatile keeps the compiler from folding the 1.
    unsafe { core::ptr::read_volatile(&STACK_CACHE_ON) != 0 }
}

/// Adds 1 to this CPU's counter `which` (`memtrack_common::stack_cache::walks`).
#[inline(always)]
pub fn count(which: u32) {
    if let Some(p) = STACK_WALKS.get_ptr_mut(which) {
        atomics::add(p, 1);
    }
}

/// The stack id this CPU remembers for a walk from `ip`, `sp`, `bp` under the mappings
/// stamped `generation`, if the stack still holds every word that walk depended on;
/// else [`NO_STACK`].
#[inline(always)]
pub fn cached(ip: u64, sp: u64, bp: u64, generation: u32) -> u32 {
    if !enabled() || generation == 0 {
        return NO_STACK;
    }
    memtrack_cached_stack(ip, sp, bp, u64::from(generation)) as u32
}

/// [`cached`]'s check. Returns the stack id, or [`NO_STACK`].
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn memtrack_cached_stack(ip: u64, sp: u64, bp: u64, generation: u64) -> i32 {
    let (Some(slot), Some(window)) = (
        STACK_CACHE.get_ptr(StackCacheSlot::index(ip, sp)),
        CACHE_WINDOW.get_ptr_mut(0),
    ) else {
        return NO_STACK as i32;
    };
    // SAFETY: this CPU's map values; a preempting walk may fill the slot meanwhile,
    // which the sequence check below detects.
    unsafe {
        let seq = atomics::load(&raw const (*slot).seq);
        compiler_fence(Ordering::SeqCst);
        if seq & 1 != 0
            || (*slot).stack == NO_STACK
            || u64::from((*slot).generation) != generation
            || (*slot).ip != ip
            || (*slot).sp != sp
            || ((*slot).uses_bp != 0 && (*slot).bp != bp)
        {
            return NO_STACK as i32;
        }
        let (span, reads) = ((*slot).span, (*slot).reads);
        if span == 0 || u64::from(span) > CACHE_SPAN_BYTES {
            return NO_STACK as i32;
        }
        if generated::bpf_probe_read_user(window.cast(), span, sp as *const core::ffi::c_void) != 0
        {
            return NO_STACK as i32;
        }
        for i in 0..MAX_CACHED_READS {
            if i as u32 >= reads {
                break;
            }
            let i = opaque(i as u64) as usize & (MAX_CACHED_READS - 1);
            let at = (*slot).offsets[i] as usize & (CACHE_SPAN_WORDS - 1);
            if (*window).words[at] != (*slot).values[i] {
                return NO_STACK as i32;
            }
        }
        let id = (*slot).stack;
        compiler_fence(Ordering::SeqCst);
        if atomics::load(&raw const (*slot).seq) != seq {
            return NO_STACK as i32;
        }
        id as i32
    }
}

/// This CPU's trace, for a walk's programs to note their steps in.
#[inline(always)]
pub fn trace() -> Option<*mut WalkTrace> {
    WALK_TRACE.get_ptr_mut(0)
}

/// Starts the trace of a walk from `ip`, `sp`, `bp` under `generation`, with a new
/// nonce, which `s` keeps.
#[inline(always)]
pub fn begin(trace: *mut WalkTrace, s: &mut WalkState, generation: u32) {
    // SAFETY: this CPU's map value.
    unsafe {
        let nonce = match atomics::add_fetch(&raw mut (*trace).next_nonce, 1) {
            Some(n) => n,
            // Never on one CPU; a nonce of 0 still works, it only repeats.
            None => 0,
        };
        (*trace).nonce = nonce;
        (*trace).ip = s.ip;
        (*trace).sp = s.sp;
        (*trace).bp = s.bp;
        (*trace).generation = generation;
        s.nonce = nonce;
    }
}

/// The walk in `s` read a word it cannot be remembered by (a failed read, a signal
/// frame's registers).
#[inline(always)]
pub fn unrememberable(trace: *mut WalkTrace, s: &WalkState) {
    // SAFETY: this CPU's map value.
    unsafe { (*trace).failed = s.nonce };
}

/// The walk in `s` ended with stack `id` after storing `s.stored` frames, how
/// (`frame::end`) in `end`: tail-calls [`remember_prog`] to fill its slot from the
/// trace. Call it last: the program does not resume after the tail call (nor when it
/// fails: nothing is remembered then).
#[inline(always)]
pub fn remember(ctx: &ProbeContext, trace: *mut WalkTrace, s: &WalkState, end: u64, id: u32) {
    if !enabled() || id == NO_STACK || id == LOST_STACK {
        return;
    }
    // A walk that began no trace (its process had no mappings yet) has nonce 0, which
    // the trace never holds once a walk began on this CPU (nonces count from 1), and
    // whose `failed` matches it before: remember_walk refuses it either way. (Testing
    // the nonce here instead doubled the entry program's verified instructions.)
    // SAFETY: this CPU's map value.
    unsafe {
        (*trace).done_nonce = s.nonce;
        (*trace).done_stored = s.stored;
        (*trace).done_truncated = u32::from(end == frame::end::TRUNCATED);
        (*trace).done_stack = id;
    }
    // SAFETY: the context is the probe's own, passed on unchanged.
    unsafe { UNWIND_PROGS.tail_call(ctx, REMEMBER_PROG_SLOT) };
}

/// The remembering program: fills the slot of the walk this CPU's trace says just
/// ended ([`remember_walk`]). Reached only by the tail call of [`remember`].
#[uprobe]
pub fn remember_prog(_ctx: ProbeContext) -> u32 {
    let Some(trace) = trace() else {
        return 0;
    };
    // SAFETY: this CPU's map value, read before the walk it describes can be replaced
    // (remember_walk checks the nonce again after filling).
    let (nonce, stored, truncated, id) = unsafe {
        (
            (*trace).done_nonce,
            (*trace).done_stored,
            (*trace).done_truncated,
            (*trace).done_stack,
        )
    };
    remember_walk(
        trace,
        nonce,
        u64::from(stored),
        u64::from(truncated),
        u64::from(id),
    );
    0
}

/// `x`, hidden from the compiler: a 0-or-1 value it knows as such, it turns the
/// arithmetic below back into branches (selects), and a branch per word would make the
/// verifier walk every combination of them.
#[inline(always)]
fn opaque(mut x: u64) -> u64 {
    // SAFETY: an empty instruction sequence that claims to change the register: no
    // code, no memory, no stack.
    unsafe { core::arch::asm!("{0} = {0}", inout(reg) x, options(pure, nomem, nostack)) };
    x
}

/// 1 if `a != b`, else 0, without a branch. (The usual `(d | -d) >> 63` is a pattern
/// the compiler knows, and makes a branch of.)
#[inline(always)]
fn ne(a: u64, b: u64) -> u64 {
    let d = a ^ b;
    // Non-zero exactly when d is, and below 2^63, so adding 2^63 - 1 carries into the
    // top bit exactly when it is non-zero.
    let folded = opaque((d >> 1) | (d & 1));
    opaque(folded.wrapping_add((1 << 63) - 1) >> 63)
}

/// 1 if `a < b`, else 0, for `a`, `b` below 2^63, without a branch.
#[inline(always)]
fn lt(a: u64, b: u64) -> u64 {
    opaque(a.wrapping_sub(b) >> 63)
}

/// `a` if `c` is 1, else `b` (`c` is 0 or 1), without a branch.
#[inline(always)]
fn pick(c: u64, a: u64, b: u64) -> u64 {
    b ^ ((a ^ b) & c.wrapping_neg())
}

/// The words a slot is being filled with: how many, how far, and whether one could not
/// be kept.
struct Fill {
    slot: *mut StackCacheSlot,
    sp: u64,
    reads: u64,
    span: u64,
    bad: u64,
}

impl Fill {
    /// Adds the word at address `at` holding `value` when `keep` is 1 (0: writes past
    /// the last word, which stays unused).
    #[inline(always)]
    fn push(&mut self, at: u64, value: u64, keep: u64) {
        let off = at.wrapping_sub(self.sp);
        let i = self.reads as usize & (MAX_CACHED_READS - 1);
        // SAFETY: this CPU's map value; the index is masked into the arrays.
        unsafe {
            (*self.slot).offsets[i] = ((off / 8) & (CACHE_SPAN_WORDS as u64 - 1)) as u16;
            (*self.slot).values[i] = value;
        }
        // Inside: the whole word within CACHE_SPAN_BYTES above sp, aligned (an address
        // below sp wraps to a huge offset, outside too).
        let outside = ne(off >> CACHE_SPAN_BYTES.trailing_zeros(), 0) | ne(off & 7, 0);
        let full = 1 - lt(self.reads, MAX_CACHED_READS as u64);
        self.bad |= keep & (outside | full);
        self.reads += keep;
        let end = pick(keep & (1 - outside), off + 8, 0);
        self.span = pick(lt(self.span, end), end, self.span);
    }
}

/// Fills the slot of the walk with nonce `nonce` from this CPU's trace, that walk having
/// stored `stored` frames and ended truncated (`truncated` 1) or not, with stack `id`.
/// Nothing is remembered when the trace is no longer that walk's, a read failed, a word
/// lies out of reach, or the slot is being filled (a walk this one preempted).
///
/// The steps, in order: the allocation function's own ([`OWN_STEP`]), then one per
/// stored frame (at its index). Every step but the last moved on to its caller, so its
/// return address counts; the last moved on only when the walk ended truncated. A step
/// whose rule takes `rbp` as the frame base depends on where that `rbp` came from: the
/// last earlier step that read a saved `rbp` (that word counts), or the probe's own
/// register when none did.
#[inline(always)]
fn remember_walk(trace: *mut WalkTrace, nonce: u64, stored: u64, truncated: u64, id: u64) {
    // SAFETY: this CPU's map values; the nonce and sequence checks below stand for a
    // preempting walk's writes.
    unsafe {
        if (*trace).nonce != nonce || (*trace).failed == nonce || stored > MAX_STACK_DEPTH as u64 {
            return;
        }
        let (ip, sp, bp) = ((*trace).ip, (*trace).sp, (*trace).bp);
        let Some(slot) = STACK_CACHE.get_ptr_mut(StackCacheSlot::index(ip, sp)) else {
            return;
        };
        let seq = atomics::load(&raw const (*slot).seq);
        if seq & 1 != 0 || !atomics::swap(&raw mut (*slot).seq, seq, seq + 1) {
            return;
        }
        compiler_fence(Ordering::SeqCst);
        let mut fill = Fill {
            slot,
            sp,
            reads: 0,
            span: 0,
            bad: 0,
        };
        let mut uses_bp = 0u64;
        // The step whose saved rbp is the current one; TRACE_STEPS: the register's.
        let mut source = TRACE_STEPS as u64;
        let steps = stored + 1;
        for j in 0..=MAX_STACK_DEPTH {
            let j = j as u64;
            if j >= steps {
                break;
            }
            // OWN_STEP for j = 0, j - 1 after (arithmetic: a select would be a branch).
            let k = (j as usize).wrapping_add(OWN_STEP) & (TRACE_STEPS - 1);
            let rule = u64::from((*trace).rule[k]);
            let on_bp = 1 - ne(rule, u64::from(cfa_rule::RBP));
            let from_register = 1 - ne(source, TRACE_STEPS as u64);
            uses_bp |= on_bp & from_register;
            let s = source as usize & (TRACE_STEPS - 1);
            fill.push(
                (*trace).bp_at[s],
                (*trace).bp_value[s],
                on_bp & (1 - from_register),
            );
            let moved_on = ne(j, stored) | truncated;
            // A step that moved on had a rule; NO_RULE there means the trace is not
            // this walk's.
            fill.bad |= moved_on & (1 - ne(rule, u64::from(NO_RULE)));
            fill.push((*trace).ra_at[k], (*trace).ra_value[k], moved_on);
            source = pick(moved_on & ne((*trace).bp_at[k], 0), k as u64, source);
        }
        let keep = fill.bad == 0 && fill.span != 0;
        (*slot).stack = if keep { id as u32 } else { NO_STACK };
        (*slot).generation = (*trace).generation;
        (*slot).reads = fill.reads as u32;
        (*slot).span = fill.span as u32;
        (*slot).uses_bp = uses_bp as u32;
        (*slot).ip = ip;
        (*slot).sp = sp;
        (*slot).bp = bp;
        compiler_fence(Ordering::SeqCst);
        if (*trace).nonce != nonce {
            // Another walk began on this CPU while the slot was filled from the trace.
            (*slot).stack = NO_STACK;
        }
        compiler_fence(Ordering::SeqCst);
        core::ptr::write_volatile(&raw mut (*slot).seq, seq + 2);
    }
}

/// Notes the start of step `k` (trace index) of the walk: no rule yet.
#[inline(always)]
pub fn step_begins(trace: *mut WalkTrace, k: usize) {
    // SAFETY: this CPU's map value; the index is masked into the array.
    unsafe { (*trace).rule[k & (TRACE_STEPS - 1)] = NO_RULE };
}

/// Notes step `k`'s frame-base rule.
#[inline(always)]
pub fn step_rule(trace: *mut WalkTrace, k: usize, rule: u8) {
    // SAFETY: as for `step_begins`.
    unsafe { (*trace).rule[k & (TRACE_STEPS - 1)] = rule };
}

/// Notes where step `k` read the caller's saved `rbp` (`at` 0: it read none) and what.
#[inline(always)]
pub fn step_bp(trace: *mut WalkTrace, k: usize, at: u64, value: u64) {
    let k = k & (TRACE_STEPS - 1);
    // SAFETY: as for `step_begins`.
    unsafe {
        (*trace).bp_at[k] = at;
        (*trace).bp_value[k] = value;
    }
}

/// Notes where step `k` read the return address and what.
#[inline(always)]
pub fn step_return(trace: *mut WalkTrace, k: usize, at: u64, value: u64) {
    let k = k & (TRACE_STEPS - 1);
    // SAFETY: as for `step_begins`.
    unsafe {
        (*trace).ra_at[k] = at;
        (*trace).ra_value[k] = value;
    }
}
