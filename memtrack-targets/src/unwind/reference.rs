//! The user-space reference unwinder: walks a stack with the tables exactly as the
//! eBPF unwinder does at allocation entry (same lookups, same rules, same ends), so
//! tests can check the tables on real stacks and later compare both unwinders.

use memtrack_common::unwind::{OFFSET_UNIT, PLT_PUSHED_FROM, cfa_rule, sigframe};

use crate::unwind::ProcessMapping;

/// The registers the unwinder starts from (the uprobe's `pt_regs`) and carries from
/// frame to frame. Every other register is unknown in a caller's frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registers {
    /// Instruction pointer.
    pub rip: u64,
    /// Stack pointer.
    pub rsp: u64,
    /// Frame pointer (callee-saved; only needed where a CFA is `rbp`-based).
    pub rbp: u64,
}

/// One frame of an unwound stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The frame's instruction address: the interrupted instruction for the first frame
    /// and for a frame a signal interrupted, a return address otherwise.
    pub pc: u64,
    /// `pc` is a return address: the call is the instruction before it, and
    /// symbolization should look up `pc - 1`.
    pub is_return_address: bool,
}

/// Why an unwind stopped. Only [`StackEnd::EndOfStack`] means the stack is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackEnd {
    /// The last frame is the outermost one (`.eh_frame` says it has no caller).
    EndOfStack,
    /// The last frame's address lies in no mapping with a table (JIT code, `[vdso]`).
    NotMapped {
        /// The address looked up.
        pc: u64,
    },
    /// The last frame's object has no unwind info at its address.
    NoUnwindInfo {
        /// The address looked up.
        pc: u64,
    },
    /// The last frame's object describes its address with a rule the tables cannot
    /// express.
    Unrepresentable {
        /// The address looked up.
        pc: u64,
        /// One of `memtrack_common::unwind::unrepresentable`.
        reason: u16,
    },
    /// A stack read failed.
    UnreadableMemory {
        /// The address of the 8 bytes that could not be read.
        addr: u64,
    },
    /// The rule gave a CFA not above the frame's stack pointer (a corrupt stack, or an
    /// `rbp` that held no frame address): following it could loop.
    CfaNotAbove {
        /// The address looked up.
        pc: u64,
        /// The CFA computed.
        cfa: u64,
    },
    /// `max_frames` frames were unwound and the stack goes on (truncated).
    DepthLimit,
}

/// An unwound stack: innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// The frames, innermost first.
    pub frames: Vec<Frame>,
    /// Why the unwind stopped after the last frame.
    pub end: StackEnd,
}

/// Unwinds from `regs` through `mappings` (a process's executable mappings with their
/// tables), reading the stack with `read_u64` (8 bytes at an address, `None` if
/// unreadable), for at most `max_frames` frames.
///
/// Per frame: look up the frame's address (minus 1 for a return address) in the
/// mapping that holds it, at ELF virtual address `address - bias`; then apply the row
/// as `memtrack_common::unwind` says.
pub fn unwind(
    regs: Registers,
    mappings: &[ProcessMapping],
    mut read_u64: impl FnMut(u64) -> Option<u64>,
    max_frames: usize,
) -> Stack {
    let mut frames = Vec::new();
    let mut regs = regs;
    let mut is_return_address = false;
    let end = loop {
        if frames.len() == max_frames {
            break StackEnd::DepthLimit;
        }
        frames.push(Frame {
            pc: regs.rip,
            is_return_address,
        });
        let pc = if is_return_address {
            regs.rip.wrapping_sub(1)
        } else {
            regs.rip
        };
        let Some(mapping) = mappings.iter().find(|m| m.contains(pc)) else {
            break StackEnd::NotMapped { pc };
        };
        let Some(row) = mapping.object.table.lookup(mapping.vaddr(pc)) else {
            break StackEnd::NoUnwindInfo { pc };
        };
        let unit = OFFSET_UNIT;
        let offset = u64::from(row.cfa_offset) * unit;
        let cfa = match row.cfa_rule {
            cfa_rule::RSP => regs.rsp.wrapping_add(offset),
            cfa_rule::RBP => regs.rbp.wrapping_add(offset),
            cfa_rule::PLT => {
                let pushed = if regs.rip & 15 >= PLT_PUSHED_FROM {
                    8
                } else {
                    0
                };
                regs.rsp.wrapping_add(offset).wrapping_add(pushed)
            }
            cfa_rule::SIGNAL_FRAME => {
                let saved = |at: u64| regs.rsp.wrapping_add(at);
                let (Some(rip), Some(rsp), Some(rbp)) = (
                    read_u64(saved(sigframe::RIP)),
                    read_u64(saved(sigframe::RSP)),
                    read_u64(saved(sigframe::RBP)),
                ) else {
                    break StackEnd::UnreadableMemory {
                        addr: saved(sigframe::RIP),
                    };
                };
                regs = Registers { rip, rsp, rbp };
                is_return_address = false;
                continue;
            }
            cfa_rule::END_OF_STACK => break StackEnd::EndOfStack,
            cfa_rule::UNREPRESENTABLE => {
                break StackEnd::Unrepresentable {
                    pc,
                    reason: row.cfa_offset,
                };
            }
            _ => break StackEnd::NoUnwindInfo { pc },
        };
        if cfa <= regs.rsp {
            break StackEnd::CfaNotAbove { pc, cfa };
        }
        let ra_at = cfa.wrapping_sub(8);
        let Some(ra) = read_u64(ra_at) else {
            break StackEnd::UnreadableMemory { addr: ra_at };
        };
        let rbp = if row.rbp_rule < 0 {
            let at = cfa.wrapping_sub(u64::from(row.rbp_rule.unsigned_abs()) * unit);
            match read_u64(at) {
                Some(rbp) => rbp,
                None => break StackEnd::UnreadableMemory { addr: at },
            }
        } else {
            regs.rbp
        };
        regs = Registers {
            rip: ra,
            rsp: cfa,
            rbp,
        };
        is_return_address = true;
    };
    Stack { frames, end }
}
