//! Choosing the instruction inside an allocator function where the entry
//! probe is cheapest.
//!
//! This module exists because where a uprobe sits decides what it costs. The
//! kernel replaces the probed instruction with `int3`; after the handlers ran
//! it must still execute the original instruction. A few instructions it
//! *emulates* in the trap handler (measured here, kernel 6.18: ~0.7 us per
//! hit); every other one it copies to an out-of-line slot and single-steps,
//! which takes a second trap (~9 us per hit). glibc 2.36's `free` begins with
//! `test %rdi,%rdi`, which is single-stepped, followed by `je`, which is
//! emulated: probing the `je` makes every `free` ~8 us cheaper, and the
//! arguments are still in their registers there.
//!
//! # Which instructions the kernel emulates (x86_64)
//!
//! From `arch/x86/kernel/uprobes.c`, `arch_uprobe_analyze_insn()`, which tries
//! `branch_setup_xol_ops()` and then `push_setup_xol_ops()` before falling
//! back to `default_xol_ops` (single-step):
//!
//! - `branch_setup_xol_ops()` (emulated by `branch_emulate_op()`):
//!   `jmp rel8` (`eb`), `jmp rel32` (`e9`), `call rel32` (`e8`), `jcc rel8`
//!   (`70`..`7f`) and `jcc rel32` (`0f 80`..`0f 8f`, mapped onto the short
//!   opcodes via `OPCODE2 - 0x10` and accepted by `is_cond_jmp_opcode()`). A
//!   branch with an operand-size prefix `66` is rejected with `-ENOTSUPP` (the
//!   probe cannot be attached at all), and `is_prefix_bad()` rejects the
//!   segment prefixes `26 2e 36 3e` and `lock` for every instruction. We
//!   therefore accept branches with no prefix or only `f2` (`bnd`).
//! - NOPs, also in `branch_setup_xol_ops()` ("same as jmp with .offs = 0"):
//!   `90` since the first x86 uprobes; since Linux 6.16 (commit 610f6e14c29d,
//!   "uprobes/x86: Add support to emulate NOP instructions") also every
//!   `x86_nops[len]` pattern, i.e. the P6 NOPs `0f 1f /0` of 3 to 8 bytes; and
//!   since the unified `insn_is_nop()` (tip commit 8a5c6cbfe4a3, queued after
//!   6.18) more NOP forms. We accept `90` and the P6 `0f 1f` patterns. `66 90`
//!   is an `x86_nops` entry too, but kernels before 6.16 refuse to probe it
//!   (the `66` rule above), so it is never chosen.
//! - `push_setup_xol_ops()` (emulated by `push_emulate_op()`): `push reg`,
//!   opcodes `50`..`57`, one byte, or two bytes with exactly the REX prefix
//!   `41` for `r8`..`r15`.
//!
//! `endbr64` (`f3 0f 1e fa`, at the start of every function built with
//! `-fcf-protection`) is none of these: it is single-stepped. It writes no
//! register, so the scan steps over it.
//!
//! # The rule
//!
//! Scan the first [`DEFAULT_SCAN_LIMIT`] instructions. The site is the first
//! instruction the kernel emulates, provided that
//! - no instruction before it writes a register the probe reads (the
//!   arguments, e.g. `rdi` for `malloc`),
//! - no instruction before it transfers control (the probe fires before the
//!   site executes, so an emulated branch is itself a valid site, but a
//!   branch before it could skip it), and changes `rsp` other than by
//!   `push`/`pop`/`sub rsp, imm`/`add rsp, imm`,
//! - no direct branch elsewhere in the given code lands after the function's
//!   first byte and at or before the site (the probe would fire again, or not
//!   at all, for one call).
//!
//! Otherwise the probe stays at offset 0.

use iced_x86::{
    Decoder, DecoderOptions, Formatter, GasFormatter, Instruction, InstructionInfoFactory,
    Mnemonic, OpAccess, OpKind, Register,
};
use std::path::Path;

use crate::{Error, ProbeTarget, function_bytes};

/// How many instructions from the function's start are considered.
pub const DEFAULT_SCAN_LIMIT: usize = 16;

/// How many bytes of a function [`entry_site`] reads (the whole function up
/// to this size, so that branch targets inside the prologue are seen).
pub const ENTRY_SITE_READ_LIMIT: usize = 64 * 1024;

/// Where to put the entry probe of one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSite {
    /// Offset of the probed instruction from the function's first byte. Add
    /// it to [`ProbeTarget::file_offset`] to get the offset to attach at.
    pub offset_in_function: u64,
    /// The probed instruction in AT&T syntax (empty if there was no code).
    pub instruction: String,
    /// Whether the kernel emulates the probed instruction (cheap) rather than
    /// single-stepping it (expensive).
    pub emulated: bool,
    /// Why this site was chosen, for logs.
    pub reason: String,
    /// Bytes the instructions before the site moved `rsp` down (e.g. a
    /// `sub $0x18,%rsp`); 0 at offset 0. The return address is at
    /// `rsp + stack_adjust` when the probe fires. A return probe (uretprobe)
    /// reads the return address at `rsp`, so it can share this site only
    /// when this is 0; otherwise attach it at offset 0.
    pub stack_adjust: u64,
}

/// The kinds of instruction the kernel's x86 uprobe code emulates instead of
/// single-stepping. See the module documentation for the kernel functions
/// each comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulation {
    /// `push reg` (`push_setup_xol_ops`).
    Push,
    /// `jmp rel8`/`jmp rel32` (`branch_setup_xol_ops`).
    Jump,
    /// `jcc rel8`/`jcc rel32` (`branch_setup_xol_ops`).
    ConditionalJump,
    /// `call rel32` (`branch_setup_xol_ops`).
    Call,
    /// `nop` and the P6 multi-byte NOPs (`branch_setup_xol_ops`).
    Nop,
}

impl std::fmt::Display for Emulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Emulation::Push => "push",
            Emulation::Jump => "jmp",
            Emulation::ConditionalJump => "jcc",
            Emulation::Call => "call",
            Emulation::Nop => "nop",
        })
    }
}

/// The NOPs the kernel emulates, from `x86_nops[]` (`BYTES_NOP1`..`BYTES_NOP8`
/// in `arch/x86/include/asm/nops.h`), without `66 90` (see the module
/// documentation). `0f 1f` forms are emulated since Linux 6.16 and
/// single-stepped (but probeable) before.
const EMULATED_NOPS: [&[u8]; 7] = [
    &[0x90],
    &[0x0f, 0x1f, 0x00],
    &[0x0f, 0x1f, 0x40, 0x00],
    &[0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
    &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
];

/// Whether the kernel emulates the single instruction encoded by `insn`
/// (exactly its bytes), and as what.
pub fn kernel_emulation(insn: &[u8]) -> Option<Emulation> {
    if EMULATED_NOPS.contains(&insn) {
        return Some(Emulation::Nop);
    }
    // push_setup_xol_ops(): opcode 50..57, length 1, or length 2 with the
    // single REX prefix 0x41.
    match insn {
        [0x50..=0x57] | [0x41, 0x50..=0x57] => return Some(Emulation::Push),
        _ => {}
    }
    // branch_setup_xol_ops(): no 66 prefix (-ENOTSUPP), no is_prefix_bad()
    // prefix; we allow nothing but an optional bnd (f2).
    let body = match insn {
        [0xf2, rest @ ..] => rest,
        _ => insn,
    };
    match body {
        [0xeb, _] | [0xe9, _, _, _, _] => Some(Emulation::Jump),
        [0xe8, _, _, _, _] => Some(Emulation::Call),
        [0x70..=0x7f, _] | [0x0f, 0x80..=0x8f, _, _, _, _] => Some(Emulation::ConditionalJump),
        _ => None,
    }
}

/// Chooses the entry-probe site in `code`, the bytes of a function starting
/// at virtual address `function_vaddr`, for a probe that reads the registers
/// `reads`, scanning at most [`DEFAULT_SCAN_LIMIT`] instructions.
///
/// Pass the whole function (see [`function_bytes`]) so that branches into its
/// first instructions are seen; the scan itself only looks at the first few.
pub fn choose_entry_site(code: &[u8], function_vaddr: u64, reads: &[Register]) -> ProbeSite {
    choose_entry_site_within(code, function_vaddr, reads, DEFAULT_SCAN_LIMIT)
}

/// [`choose_entry_site`] with an explicit limit on the instructions scanned.
pub fn choose_entry_site_within(
    code: &[u8],
    function_vaddr: u64,
    reads: &[Register],
    max_instructions: usize,
) -> ProbeSite {
    let instructions = decode_all(code, function_vaddr);
    let Some(first) = instructions.first() else {
        return ProbeSite {
            offset_in_function: 0,
            instruction: String::new(),
            emulated: false,
            reason: "no code to inspect; probing the function's first byte".to_owned(),
            stack_adjust: 0,
        };
    };
    let first_text = format_instruction(first);
    let fallback = |why: String| ProbeSite {
        offset_in_function: 0,
        instruction: first_text.clone(),
        emulated: first.code() != iced_x86::Code::INVALID
            && kernel_emulation(bytes_of(code, function_vaddr, first)).is_some(),
        reason: format!("offset 0 (single-stepped): {why}"),
        stack_adjust: 0,
    };

    let reads: Vec<Register> = reads.iter().map(|r| r.full_register()).collect();
    let mut info = InstructionInfoFactory::new();
    let mut stack_adjust: i64 = 0;
    for (n, instr) in instructions.iter().take(max_instructions).enumerate() {
        let offset = instr.ip() - function_vaddr;
        let text = format_instruction(instr);
        if instr.code() == iced_x86::Code::INVALID {
            return fallback(format!("cannot decode the instruction at +{offset}"));
        }
        if let Some(kind) = kernel_emulation(bytes_of(code, function_vaddr, instr)) {
            if let Some(target) = branch_target_into(&instructions, function_vaddr, offset) {
                return fallback(format!(
                    "the {kind} at +{offset} is emulated, but a branch lands at +{target}, \
                     inside the instructions before it"
                ));
            }
            let reason = if n == 0 {
                format!("{kind} at +0 is emulated by the kernel")
            } else {
                format!(
                    "{kind} at +{offset} is emulated by the kernel; the {n} instruction(s) \
                     before it write none of {}",
                    register_list(&reads)
                )
            };
            return ProbeSite {
                offset_in_function: offset,
                instruction: text,
                emulated: true,
                reason,
                // Non-negative: a pop below the entry rsp stops the scan.
                stack_adjust: stack_adjust as u64,
            };
        }
        if instr.flow_control() != iced_x86::FlowControl::Next {
            return fallback(format!(
                "`{text}` at +{offset} transfers control and is not emulated"
            ));
        }
        let used = info.info(instr);
        let mut writes_rsp = false;
        for reg in used.used_registers() {
            if !matches!(
                reg.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            ) {
                continue;
            }
            let full = reg.register().full_register();
            if reads.contains(&full) {
                return fallback(format!(
                    "`{text}` at +{offset} writes {}, which the probe reads",
                    register_name(full)
                ));
            }
            writes_rsp |= full == Register::RSP;
        }
        if writes_rsp {
            match rsp_change(instr) {
                Some(down) if stack_adjust + down >= 0 => stack_adjust += down,
                _ => {
                    return fallback(format!(
                        "`{text}` at +{offset} changes rsp in a way the scan does not follow"
                    ));
                }
            }
        }
    }
    fallback(format!(
        "none of the first {} instruction(s) is emulated by the kernel",
        instructions.len().min(max_instructions)
    ))
}

/// The entry-probe site of `target`, reading its code from `elf_path` and
/// taking the registers read by the entry probe of its function and aliases
/// from [`crate::AllocFn::argument_registers`].
pub fn entry_site(elf_path: &Path, target: &ProbeTarget) -> Result<ProbeSite, Error> {
    let code = function_bytes(elf_path, target, ENTRY_SITE_READ_LIMIT)?;
    let mut reads: Vec<Register> = Vec::new();
    for f in target.functions() {
        for r in f.argument_registers() {
            if !reads.contains(r) {
                reads.push(*r);
            }
        }
    }
    Ok(choose_entry_site(&code, target.symbol_address, &reads))
}

fn decode_all(code: &[u8], ip: u64) -> Vec<Instruction> {
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut out = Vec::new();
    while decoder.can_decode() {
        out.push(decoder.decode());
    }
    out
}

fn bytes_of<'a>(code: &'a [u8], function_vaddr: u64, instr: &Instruction) -> &'a [u8] {
    let start = (instr.ip() - function_vaddr) as usize;
    let end = (start + instr.len()).min(code.len());
    &code[start..end]
}

/// The offset of a direct branch target in `(0, offset]`, if any instruction
/// of the function branches there.
fn branch_target_into(
    instructions: &[Instruction],
    function_vaddr: u64,
    offset: u64,
) -> Option<u64> {
    instructions
        .iter()
        .filter(|i| i.op0_kind() == OpKind::NearBranch64)
        .map(|i| i.near_branch_target().wrapping_sub(function_vaddr))
        .find(|&t| t > 0 && t <= offset)
}

/// How many bytes `instr` moves rsp down (negative: up), for the forms the
/// scan follows.
fn rsp_change(instr: &Instruction) -> Option<i64> {
    match instr.mnemonic() {
        Mnemonic::Push | Mnemonic::Pop => Some(-i64::from(instr.stack_pointer_increment())),
        Mnemonic::Sub | Mnemonic::Add
            if instr.op0_kind() == OpKind::Register
                && instr.op0_register() == Register::RSP
                && matches!(
                    instr.op1_kind(),
                    OpKind::Immediate8to64 | OpKind::Immediate32to64
                ) =>
        {
            let imm = instr.immediate(1) as i64;
            Some(if instr.mnemonic() == Mnemonic::Sub {
                imm
            } else {
                -imm
            })
        }
        _ => None,
    }
}

fn format_instruction(instr: &Instruction) -> String {
    let mut formatter = GasFormatter::new();
    formatter.options_mut().set_uppercase_hex(false);
    formatter.options_mut().set_branch_leading_zeros(false);
    let mut out = String::new();
    formatter.format(instr, &mut out);
    out
}

fn register_name(reg: Register) -> String {
    format!("{reg:?}").to_lowercase()
}

fn register_list(regs: &[Register]) -> String {
    if regs.is_empty() {
        return "the probe's registers (none)".to_owned();
    }
    regs.iter()
        .map(|r| register_name(*r))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x1000;
    const RDI: &[Register] = &[Register::RDI];
    const RDI_RSI: &[Register] = &[Register::RDI, Register::RSI];
    const RDI_RSI_RDX: &[Register] = &[Register::RDI, Register::RSI, Register::RDX];

    fn site(code: &[u8], reads: &[Register]) -> ProbeSite {
        choose_entry_site(code, BASE, reads)
    }

    #[test]
    fn classifies_kernel_emulated_instructions() {
        assert_eq!(kernel_emulation(&[0x55]), Some(Emulation::Push));
        assert_eq!(kernel_emulation(&[0x41, 0x54]), Some(Emulation::Push));
        // REX.W push and 16-bit push are not emulated.
        assert_eq!(kernel_emulation(&[0x48, 0x55]), None);
        assert_eq!(kernel_emulation(&[0x66, 0x55]), None);
        assert_eq!(
            kernel_emulation(&[0x74, 0x05]),
            Some(Emulation::ConditionalJump)
        );
        assert_eq!(
            kernel_emulation(&[0x0f, 0x84, 0xbf, 0, 0, 0]),
            Some(Emulation::ConditionalJump)
        );
        assert_eq!(kernel_emulation(&[0xeb, 0x10]), Some(Emulation::Jump));
        assert_eq!(
            kernel_emulation(&[0xf2, 0xe9, 1, 2, 3, 4]),
            Some(Emulation::Jump)
        );
        assert_eq!(kernel_emulation(&[0xe8, 1, 2, 3, 4]), Some(Emulation::Call));
        // 66-prefixed and segment-prefixed branches are refused.
        assert_eq!(kernel_emulation(&[0x66, 0xe8, 1, 2]), None);
        assert_eq!(kernel_emulation(&[0x3e, 0x74, 0x05]), None);
        assert_eq!(kernel_emulation(&[0x90]), Some(Emulation::Nop));
        assert_eq!(
            kernel_emulation(&[0x0f, 0x1f, 0x44, 0x00, 0x00]),
            Some(Emulation::Nop)
        );
        assert_eq!(kernel_emulation(&[0x66, 0x90]), None);
        // pause, endbr64, test, ret.
        assert_eq!(kernel_emulation(&[0xf3, 0x90]), None);
        assert_eq!(kernel_emulation(&[0xf3, 0x0f, 0x1e, 0xfa]), None);
        assert_eq!(kernel_emulation(&[0x48, 0x85, 0xff]), None);
        assert_eq!(kernel_emulation(&[0xc3]), None);
    }

    #[test]
    fn test_then_jcc_probes_the_jcc() {
        // test %rdi,%rdi ; je +5 ; push %rbp ; ret
        let s = site(&[0x48, 0x85, 0xff, 0x74, 0x05, 0x55, 0xc3], RDI);
        assert_eq!(s.offset_in_function, 3, "{s:?}");
        assert!(s.emulated);
        assert!(s.instruction.starts_with("je"), "{s:?}");
        assert_eq!(s.stack_adjust, 0);
    }

    #[test]
    fn push_at_entry_probes_entry() {
        // push %r12 ; push %rbp ; ret
        let s = site(&[0x41, 0x54, 0x55, 0xc3], RDI);
        assert_eq!(s.offset_in_function, 0);
        assert!(s.emulated);
        assert_eq!(s.instruction, "push %r12");
    }

    #[test]
    fn writing_a_read_register_keeps_offset_zero() {
        // mov %rdi,%rsi ; push %rbx ; ret
        let code = [0x48, 0x89, 0xfe, 0x53, 0xc3];
        let s = site(&code, RDI_RSI);
        assert_eq!(s.offset_in_function, 0, "{s:?}");
        assert!(!s.emulated);
        assert!(s.reason.contains("rsi"), "{s:?}");
        // The same code for a probe that reads only rdi: the push qualifies.
        let s = site(&code, RDI);
        assert_eq!(s.offset_in_function, 3, "{s:?}");
        assert!(s.emulated);
    }

    #[test]
    fn partial_register_writes_count() {
        // xor %esi,%esi ; push %rbx
        let s = site(&[0x31, 0xf6, 0x53, 0xc3], RDI_RSI);
        assert_eq!(s.offset_in_function, 0, "{s:?}");
        // mul %rdx writes rdx (and rax).
        let s = site(&[0x48, 0xf7, 0xe2, 0x53], RDI_RSI_RDX);
        assert_eq!(s.offset_in_function, 0, "{s:?}");
        let s = site(&[0x48, 0xf7, 0xe2, 0x53], RDI_RSI);
        assert_eq!(s.offset_in_function, 3, "{s:?}");
    }

    #[test]
    fn endbr64_is_stepped_over() {
        // endbr64 ; push %rbp
        let s = site(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xc3], RDI);
        assert_eq!(s.offset_in_function, 4, "{s:?}");
        assert!(s.emulated);
    }

    #[test]
    fn non_emulated_control_flow_stops_the_scan() {
        // test %rdi,%rdi ; ret ; push %rbp
        let s = site(&[0x48, 0x85, 0xff, 0xc3, 0x55], RDI);
        assert_eq!(s.offset_in_function, 0);
        assert!(!s.emulated);
        assert!(s.reason.contains("ret"), "{s:?}");
        // test %rdi,%rdi ; jmp *%rax ; push %rbp
        let s = site(&[0x48, 0x85, 0xff, 0xff, 0xe0, 0x55], RDI);
        assert_eq!(s.offset_in_function, 0);
    }

    #[test]
    fn branch_into_the_prologue_keeps_offset_zero() {
        // The je at +6 would qualify, but the jmp at +8 goes back to +3,
        // between the function's start and the je.
        let code = [
            0x48, 0x85, 0xff, // test %rdi,%rdi
            0x48, 0x89, 0xc3, // mov %rax,%rbx
            0x74, 0x00, // je .+2
            0xeb, 0xf9, // jmp back to +3
        ];
        let s = site(&code, RDI);
        assert_eq!(s.offset_in_function, 0, "{s:?}");
        assert!(s.reason.contains("+3"), "{s:?}");
        // A branch to the very start is fine.
        let code = [
            0x48, 0x85, 0xff, // test %rdi,%rdi
            0x74, 0x00, // je .+2
            0xeb, 0xf9, // jmp to +0
        ];
        let s = site(&code, RDI);
        assert_eq!(s.offset_in_function, 3, "{s:?}");
    }

    #[test]
    fn stack_adjustment_is_tracked() {
        // sub $0x18,%rsp ; cmpb $0,(%rip) ; je
        let code = [
            0x48, 0x83, 0xec, 0x18, // sub $0x18,%rsp
            0x80, 0x3d, 0, 0, 0, 0, 0x00, // cmpb $0,0(%rip)
            0x74, 0x07, // je
        ];
        let s = site(&code, RDI_RSI);
        assert_eq!(s.offset_in_function, 11, "{s:?}");
        assert_eq!(s.stack_adjust, 0x18);
        // and $-16,%rsp is not followed.
        let s = site(&[0x48, 0x83, 0xe4, 0xf0, 0x55], RDI);
        assert_eq!(s.offset_in_function, 0, "{s:?}");
        assert!(s.reason.contains("rsp"), "{s:?}");
    }

    #[test]
    fn scan_limit_and_degenerate_input() {
        // 20 x `mov %rax,%rbx` then push: beyond the limit.
        let mut code: Vec<u8> = std::iter::repeat_n([0x48, 0x89, 0xc3], 20)
            .flatten()
            .collect();
        code.push(0x55);
        let s = site(&code, RDI);
        assert_eq!(s.offset_in_function, 0);
        assert!(s.reason.contains("16"), "{s:?}");
        let s = choose_entry_site_within(&code, BASE, RDI, 21);
        assert_eq!(s.offset_in_function, 60);

        let s = site(&[], RDI);
        assert_eq!((s.offset_in_function, s.emulated), (0, false));
        // Undecodable: a lone 0x0f.
        let s = site(&[0x0f], RDI);
        assert_eq!((s.offset_in_function, s.emulated), (0, false));
    }
}
