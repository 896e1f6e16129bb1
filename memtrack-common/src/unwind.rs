//! The unwind-table format shared by user space (which builds the tables from each ELF
//! object's `.eh_frame`, `memtrack_targets::unwind`) and the eBPF unwinder (which walks
//! a thread's stack with them at allocation entry). x86_64 only.
//!
//! # One object's table
//!
//! A table is an array of [`UnwindRow`]s sorted by strictly increasing [`UnwindRow::pc`],
//! where no two consecutive rows hold the same rule. A row's rule holds from its `pc` up
//! to (not including) the next row's `pc`. Addresses below the first row, and from the
//! last row on (the last row is always a [`cfa_rule::NO_UNWIND_INFO`] row that ends the
//! last function), have no unwind information. Addresses between two functions that
//! `.eh_frame` does not describe are covered by explicit `NO_UNWIND_INFO` rows, so a
//! lookup never silently uses the rule of the function before.
//!
//! Lookup of ELF virtual address `v` (how a runtime address becomes `v`:
//! `memtrack_targets::unwind::ObjectInfo::load_bias`): the last row with `pc <= v`, by
//! binary search, at most [`MAX_SEARCH_STEPS`] halvings (tables hold at most
//! [`MAX_ROWS_PER_TABLE`] rows). For a caller's frame (every frame but the interrupted
//! one and one interrupted by a signal) look up `return address - 1`: a call can be a
//! function's last instruction (a call to a `noreturn` function), and its return address
//! then is the first byte of the next function.
//!
//! # One unwinding step
//!
//! From a frame's registers `rip`, `rsp`, `rbp` and its row:
//!
//! 1. `cfa` from [`UnwindRow::cfa_rule`] and [`UnwindRow::cfa_offset`] (see [`cfa_rule`]).
//! 2. The caller's `rip` (the return address) is the 8 bytes at `cfa - 8`
//!    ([`RETURN_ADDRESS_CFA_OFFSET`]): user space only builds rows where `.eh_frame` says
//!    so, and marks every other row [`cfa_rule::UNREPRESENTABLE`].
//! 3. The caller's `rsp` is `cfa`.
//! 4. The caller's `rbp` from [`UnwindRow::rbp_rule`].
//!
//! Every offset in a row is in units of [`OFFSET_UNIT`] (8) bytes, which keeps a row at
//! 8 bytes while covering stack frames up to 512 KiB.

/// One row of an object's unwind table: the rule for finding the caller's frame from
/// every instruction from `pc` up to the next row's `pc`. 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UnwindRow {
    /// ELF virtual address (the address space of the object's `p_vaddr` and `st_value`,
    /// before any load bias) of the first instruction the row covers. Objects whose code
    /// lies above 4 GiB in that space are refused by the builder.
    pub pc: u32,
    /// For [`cfa_rule::RSP`], [`cfa_rule::RBP`] and [`cfa_rule::PLT`]: the CFA's offset
    /// from its base register, in units of [`OFFSET_UNIT`] bytes (the CFA is always above
    /// its base). For [`cfa_rule::UNREPRESENTABLE`]: why, one of [`unrepresentable`].
    /// Zero otherwise.
    pub cfa_offset: u16,
    /// How to compute the canonical frame address (the caller's `rsp` after the call
    /// returns): one of [`cfa_rule`].
    pub cfa_rule: u8,
    /// Where the caller's `rbp` is, for [`cfa_rule::RSP`] and [`cfa_rule::RBP`] rows:
    /// 0 means this frame has not changed `rbp` (the caller's `rbp` is the current one);
    /// a negative `n` means the caller's `rbp` is saved in the 8 bytes at
    /// `cfa + n * OFFSET_UNIT`. Never positive. Zero in every other kind of row (a PLT
    /// stub does not touch `rbp`).
    pub rbp_rule: i8,
}

impl UnwindRow {
    /// A row saying that the code from `pc` on has no unwind information.
    pub const fn no_unwind_info(pc: u32) -> UnwindRow {
        UnwindRow {
            pc,
            cfa_offset: 0,
            cfa_rule: cfa_rule::NO_UNWIND_INFO,
            rbp_rule: 0,
        }
    }
}

/// The kinds of [`UnwindRow::cfa_rule`]. Zero is "no unwind information", so zeroed map
/// memory never reads as a usable rule.
pub mod cfa_rule {
    /// No `.eh_frame` entry covers this address: the stack ends here with an explicit
    /// unknown frame (counted).
    pub const NO_UNWIND_INFO: u8 = 0;
    /// `cfa = rsp + cfa_offset * 8`.
    pub const RSP: u8 = 1;
    /// `cfa = rbp + cfa_offset * 8`.
    pub const RBP: u8 = 2;
    /// A PLT stub (the `.plt` section's well-known CFA expression):
    /// `cfa = rsp + cfa_offset * 8 + (((rip & 15) >= PLT_PUSHED_FROM) ? 8 : 0)`, with
    /// `rip` the frame's exact instruction pointer ([`super::PLT_PUSHED_FROM`]: in each
    /// 16-byte lazy-binding stub, the instructions from byte 11 on run after a `push`).
    pub const PLT: u8 = 3;
    /// A signal trampoline (`__restore_rt`; its CIE has the `S` augmentation): the
    /// interrupted frame's registers were saved by the kernel in the signal frame at
    /// `rsp`, at the offsets of [`super::sigframe`]. The restored `rip` is exact (the
    /// interrupted instruction, not a return address): look it up without subtracting 1.
    pub const SIGNAL_FRAME: u8 = 4;
    /// The outermost frame (`.eh_frame` says the return address is undefined: `_start`,
    /// a new thread's first function): the stack is complete.
    pub const END_OF_STACK: u8 = 5;
    /// `.eh_frame` describes this address with a rule this format cannot express (the
    /// reason is in [`super::UnwindRow::cfa_offset`], one of [`super::unrepresentable`]):
    /// the stack ends here with an explicit unknown frame (counted).
    pub const UNREPRESENTABLE: u8 = 6;
}

/// Why a row is [`cfa_rule::UNREPRESENTABLE`] (stored in [`UnwindRow::cfa_offset`]).
/// When several apply, the first in this order is given.
pub mod unrepresentable {
    /// A signal trampoline whose rules are not the kernel's signal frame layout.
    pub const SIGNAL_FRAME: u16 = 1;
    /// The return address is not saved at `cfa - 8` (e.g. `vfork` keeps it in a register).
    pub const RETURN_ADDRESS: u16 = 2;
    /// The caller's `rsp` is not the CFA (e.g. `__longjmp`, `setcontext`).
    pub const RSP_RULE: u16 = 3;
    /// The CFA is computed from a register other than `rsp` and `rbp` (e.g. a stack
    /// realignment prologue's `r10`, `longjmp`'s `rdi`).
    pub const CFA_REGISTER: u16 = 4;
    /// The CFA is a DWARF expression other than the PLT's (e.g. `*(rbp - 8)` after a
    /// stack realignment).
    pub const CFA_EXPRESSION: u16 = 5;
    /// The CFA's offset is negative, not a multiple of 8, or above `u16::MAX * 8`.
    pub const CFA_OFFSET: u16 = 6;
    /// The caller's `rbp` is in another register, given by an expression, or saved at
    /// an offset that is positive, not a multiple of 8, or below `-128 * 8`.
    pub const RBP_RULE: u16 = 7;
}

/// Bytes per unit of [`UnwindRow::cfa_offset`] and [`UnwindRow::rbp_rule`].
pub const OFFSET_UNIT: u64 = 8;

/// Where the return address is saved, in bytes from the CFA (x86_64: the `call`
/// instruction pushed it just below the caller's stack pointer).
pub const RETURN_ADDRESS_CFA_OFFSET: i64 = -8;

/// [`cfa_rule::PLT`]: instructions at `rip & 15 >= PLT_PUSHED_FROM` in a 16-byte PLT
/// entry run after its `push` of the relocation index (8 more bytes on the stack).
pub const PLT_PUSHED_FROM: u64 = 11;

/// Offsets, in bytes from `rsp` at the signal trampoline (where the kernel's
/// `struct rt_sigframe` begins after the handler returned into it: its `ucontext`), of
/// the interrupted frame's registers in `uc_mcontext` (x86_64 Linux ABI: `uc_mcontext`
/// at 40, then `gregs[REG_RBP = 10]`, `gregs[REG_RSP = 15]`, `gregs[REG_RIP = 16]`).
pub mod sigframe {
    /// The interrupted frame's `rbp`.
    pub const RBP: u64 = 120;
    /// The interrupted frame's `rsp`.
    pub const RSP: u64 = 160;
    /// The interrupted frame's `rip`.
    pub const RIP: u64 = 168;
}

/// Most rows one object's table may hold (16,777,215; libc has about 24,000).
pub const MAX_ROWS_PER_TABLE: u32 = (1 << 24) - 1;

/// Halvings a binary search over a table of at most [`MAX_ROWS_PER_TABLE`] rows needs
/// (`ceil(log2(MAX_ROWS_PER_TABLE + 1))`): the bound of the eBPF search loop.
pub const MAX_SEARCH_STEPS: u32 = 24;

#[cfg(test)]
mod tests {
    #[test]
    fn a_row_is_eight_bytes() {
        assert_eq!(core::mem::size_of::<super::UnwindRow>(), 8);
        assert_eq!(core::mem::align_of::<super::UnwindRow>(), 4);
    }
}
