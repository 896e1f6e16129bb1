//! One object's `.eh_frame` turned into a table of [`UnwindRow`]s.
//!
//! Each FDE's call-frame program is evaluated (by `gimli`) into rows, each row's rules
//! are classified into the few the eBPF unwinder evaluates (the `memtrack_common::unwind`
//! format), and the rows of all FDEs are assembled into one sorted table: adjacent rows
//! with the same rule merged, gaps between FDEs filled with explicit "no unwind info"
//! rows.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, CommonInformationEntry, EhFrame, EhFrameHdr, EhFrameOffset,
    EndianSlice, LittleEndian, Operation, Register, RegisterRule, UnwindContext, UnwindExpression,
    UnwindSection, UnwindTableRow, X86_64,
};
use memtrack_common::unwind::{
    MAX_ROWS_PER_TABLE, MAX_SEARCH_STEPS, OFFSET_UNIT, PLT_PUSHED_FROM, RETURN_ADDRESS_CFA_OFFSET,
    UnwindRow, cfa_rule, sigframe, unrepresentable,
};
use object::{Object, ObjectSection};

use crate::Error;
use crate::elf::LoadSegment;

/// Number of [`cfa_rule`] kinds (the length of [`TableStats::cfi_rows_by_rule`]).
pub const CFA_RULE_KINDS: usize = 7;
/// One more than the largest [`unrepresentable`] reason code (the length of
/// [`TableStats::unrepresentable_by_reason`]; index 0 is unused).
pub const UNREPRESENTABLE_REASONS: usize = 8;

/// The unwind table of one ELF object: rows sorted by `pc` (see `memtrack_common::unwind`
/// for what a row means and how a lookup works), and what building it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwindTable {
    rows: Vec<UnwindRow>,
    stats: TableStats,
}

/// What building one table found. Every count is a number of entries or rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStats {
    /// FDEs in `.eh_frame` (0 when there is no `.eh_frame`).
    pub fdes: u64,
    /// FDEs covering no bytes (left out).
    pub empty_fdes: u64,
    /// FDEs whose range lies outside every executable `PT_LOAD` segment, e.g. for code
    /// the linker discarded (left out).
    pub fdes_outside_code: u64,
    /// FDEs `gimli` could not parse or evaluate (left out: their range has no unwind
    /// info).
    pub malformed_fdes: u64,
    /// FDEs that begin inside the previous FDE's range (by start address). The later one
    /// wins from its start; what the earlier one covered past it has no unwind info.
    pub overlapping_fdes: u64,
    /// Rows of the FDEs' call-frame programs (before merging), by the kind of rule each
    /// got, indexed by [`cfa_rule`] value (`NO_UNWIND_INFO`, index 0, stays 0).
    pub cfi_rows_by_rule: [u64; CFA_RULE_KINDS],
    /// The `UNREPRESENTABLE` rows of [`TableStats::cfi_rows_by_rule`] by reason, indexed
    /// by [`unrepresentable`] code.
    pub unrepresentable_by_reason: [u64; UNREPRESENTABLE_REASONS],
    /// Entries of `.eh_frame_hdr`'s binary-search table (`None`: no such section or
    /// table). A cross-check only: the table is built from `.eh_frame` itself.
    pub eh_frame_hdr_entries: Option<u64>,
    /// Wall-clock time the build took (parsing, evaluation and assembly; not the
    /// reading of the ELF headers), for the attach path's cost.
    pub build_time: Duration,
}

impl UnwindTable {
    /// The rows, sorted by strictly increasing `pc`.
    pub fn rows(&self) -> &[UnwindRow] {
        &self.rows
    }

    /// What building the table found.
    pub fn stats(&self) -> &TableStats {
        &self.stats
    }

    /// Size of the rows in bytes (what loading them into a BPF map takes).
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of_val(self.rows.as_slice())
    }

    /// The row whose rule holds at ELF virtual address `vaddr`: the last row with
    /// `pc <= vaddr`; `None` below the first row (no unwind info there).
    ///
    /// This is the eBPF unwinder's search, step for step: at most
    /// [`MAX_SEARCH_STEPS`] halvings of `[lo, hi)`.
    pub fn lookup(&self, vaddr: u64) -> Option<&UnwindRow> {
        let Ok(vaddr) = u32::try_from(vaddr) else {
            // Above every row: the last row (no unwind info) holds.
            return self.rows.last();
        };
        let (mut lo, mut hi) = (0usize, self.rows.len());
        for _ in 0..MAX_SEARCH_STEPS {
            if lo >= hi {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            if self.rows[mid].pc <= vaddr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1).map(|i| &self.rows[i])
    }
}

/// The rule part of a row (everything but `pc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) cfa_rule: u8,
    pub(crate) cfa_offset: u16,
    pub(crate) rbp_rule: i8,
}

impl Rule {
    const NO_UNWIND_INFO: Rule = Rule::simple(cfa_rule::NO_UNWIND_INFO);
    const END_OF_STACK: Rule = Rule::simple(cfa_rule::END_OF_STACK);
    const SIGNAL_FRAME: Rule = Rule::simple(cfa_rule::SIGNAL_FRAME);

    const fn simple(cfa_rule: u8) -> Rule {
        Rule {
            cfa_rule,
            cfa_offset: 0,
            rbp_rule: 0,
        }
    }

    const fn unrepresentable(reason: u16) -> Rule {
        Rule {
            cfa_rule: cfa_rule::UNREPRESENTABLE,
            cfa_offset: reason,
            rbp_rule: 0,
        }
    }

    fn at(self, pc: u32) -> UnwindRow {
        UnwindRow {
            pc,
            cfa_offset: self.cfa_offset,
            cfa_rule: self.cfa_rule,
            rbp_rule: self.rbp_rule,
        }
    }

    #[cfg(test)]
    fn of(row: &UnwindRow) -> Rule {
        Rule {
            cfa_rule: row.cfa_rule,
            cfa_offset: row.cfa_offset,
            rbp_rule: row.rbp_rule,
        }
    }
}

/// The classified rows of one FDE.
#[derive(Debug, Clone)]
pub(crate) struct FdeRows {
    /// First address covered.
    pub(crate) start: u64,
    /// One past the last address covered.
    pub(crate) end: u64,
    /// (start address, rule), by increasing address, all in `[start, end)`.
    pub(crate) rows: Vec<(u64, Rule)>,
}

type Slice<'data> = EndianSlice<'data, LittleEndian>;

/// gimli's row storage with room for 32 register rules instead of its default 192: rows
/// are copied at every `DW_CFA_remember_state` and row boundary, and x86_64 code saves
/// at most the 17 general registers and the return address (a row with more rules
/// makes its FDE count as malformed). Measured: libc's table builds in about half the
/// time.
struct Storage;

/// Register rules per row [`Storage`] holds.
const MAX_RULES_PER_ROW: usize = 32;
/// `DW_CFA_remember_state` nesting [`Storage`] holds (gimli's default).
const MAX_REMEMBERED_STATES: usize = 4;

impl<T: gimli::ReaderOffset> gimli::UnwindContextStorage<T> for Storage {
    type Rules = [(Register, RegisterRule<T>); MAX_RULES_PER_ROW];
    type Stack = Box<[UnwindTableRow<T, Self>; MAX_REMEMBERED_STATES]>;
}

type Context = UnwindContext<usize, Storage>;
type Row = UnwindTableRow<usize, Storage>;

/// Builds the table of the ELF object `file` (read from `path`, named in errors), whose
/// `PT_LOAD` segments are `segments`. An object without `.eh_frame` gets an empty table
/// (no unwind info anywhere).
pub(crate) fn build<'data, R: object::ReadRef<'data>>(
    file: &object::read::elf::ElfFile64<'data, object::Endianness, R>,
    path: &Path,
    segments: &[LoadSegment],
) -> Result<UnwindTable, Error> {
    let began = Instant::now();
    let mut stats = TableStats::default();
    let section_address = |name: &str| file.section_by_name(name).map(|s| s.address());
    let Some(eh_frame_section) = file.section_by_name(".eh_frame") else {
        stats.build_time = began.elapsed();
        return Ok(UnwindTable {
            rows: Vec::new(),
            stats,
        });
    };
    let data = eh_frame_section
        .data()
        .map_err(|e| unwind_error(path, format!(".eh_frame: {e}")))?;
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame_section.address());
    if let Some(text) = section_address(".text") {
        bases = bases.set_text(text);
    }
    if let Some(got) = section_address(".got") {
        bases = bases.set_got(got);
    }
    if let Some(hdr) = file.section_by_name(".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(hdr.address());
        stats.eh_frame_hdr_entries = hdr_entries(&hdr, &bases);
    }
    let mut eh_frame = EhFrame::new(data, LittleEndian);
    eh_frame.set_address_size(8);

    let code: Vec<(u64, u64)> = segments
        .iter()
        .filter(|s| s.is_executable())
        .map(|s| (s.vaddr, s.vaddr + s.memsz))
        .collect();
    let in_code = |start: u64, end: u64| code.iter().any(|&(s, e)| s <= start && end <= e);

    let mut fdes = Vec::new();
    let mut cies: HashMap<EhFrameOffset, CommonInformationEntry<Slice<'_>>> = HashMap::new();
    let mut ctx = Context::new_in();
    let mut entries = eh_frame.entries(&bases);
    loop {
        let entry = entries
            .next()
            .map_err(|e| unwind_error(path, format!(".eh_frame entries: {e}")))?;
        let Some(entry) = entry else { break };
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        stats.fdes += 1;
        let fde = partial.parse(|section, bases, offset| {
            if let Some(cie) = cies.get(&offset) {
                return Ok(cie.clone());
            }
            let cie = section.cie_from_offset(bases, offset)?;
            cies.insert(offset, cie.clone());
            Ok(cie)
        });
        let Ok(fde) = fde else {
            stats.malformed_fdes += 1;
            continue;
        };
        let (start, end) = (fde.initial_address(), fde.end_address());
        if start >= end {
            stats.empty_fdes += 1;
            continue;
        }
        if !in_code(start, end) {
            stats.fdes_outside_code += 1;
            continue;
        }
        match fde_rows(&eh_frame, &bases, &mut ctx, &fde, &mut stats) {
            Ok(rows) => fdes.push(FdeRows { start, end, rows }),
            Err(_) => stats.malformed_fdes += 1,
        }
    }
    let (rows, overlapping) = assemble(fdes);
    stats.overlapping_fdes = overlapping;
    let rows = rows
        .into_iter()
        .map(|(pc, rule)| {
            u32::try_from(pc)
                .map(|pc| rule.at(pc))
                .map_err(|_| unwind_error(path, format!("code at {pc:#x}, above 4 GiB")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if rows.len() > MAX_ROWS_PER_TABLE as usize {
        return Err(unwind_error(
            path,
            format!(
                "{} rows, more than the {MAX_ROWS_PER_TABLE} a table may hold",
                rows.len()
            ),
        ));
    }
    stats.build_time = began.elapsed();
    Ok(UnwindTable { rows, stats })
}

fn unwind_error(path: &Path, reason: String) -> Error {
    Error::UnwindInfo {
        path: path.to_owned(),
        reason,
    }
}

/// Entries of `.eh_frame_hdr`'s search table, if it has a readable one.
fn hdr_entries<'data, 'file, R: object::ReadRef<'data>>(
    hdr: &object::read::elf::ElfSection<
        'data,
        'file,
        object::elf::FileHeader64<object::Endianness>,
        R,
    >,
    bases: &BaseAddresses,
) -> Option<u64> {
    let data = hdr.data().ok()?;
    let parsed = EhFrameHdr::new(data, LittleEndian).parse(bases, 8).ok()?;
    let table = parsed.table()?;
    let mut iter = table.iter(bases);
    let mut n = 0;
    while let Ok(Some(_)) = iter.next() {
        n += 1;
    }
    Some(n)
}

/// The classified rows of one FDE (rows starting at or past its end are dropped).
fn fde_rows<'data>(
    eh_frame: &EhFrame<Slice<'data>>,
    bases: &BaseAddresses,
    ctx: &mut Context,
    fde: &gimli::FrameDescriptionEntry<Slice<'data>>,
    stats: &mut TableStats,
) -> gimli::Result<Vec<(u64, Rule)>> {
    let mut rows = Vec::new();
    let mut table = fde.rows(eh_frame, bases, ctx)?;
    while let Some(row) = table.next_row()? {
        if row.start_address() >= fde.end_address() {
            continue;
        }
        let rule = classify(row, fde, eh_frame);
        stats.cfi_rows_by_rule[usize::from(rule.cfa_rule)] += 1;
        if rule.cfa_rule == cfa_rule::UNREPRESENTABLE {
            stats.unrepresentable_by_reason[usize::from(rule.cfa_offset)] += 1;
        }
        rows.push((row.start_address(), rule));
    }
    Ok(rows)
}

/// The rule of one CFI row. The checks run in the order of the [`unrepresentable`]
/// codes, so a row with several problems gets the first.
fn classify(
    row: &Row,
    fde: &gimli::FrameDescriptionEntry<Slice<'_>>,
    eh_frame: &EhFrame<Slice<'_>>,
) -> Rule {
    let cie = fde.cie();
    let ops = |e: &UnwindExpression<usize>| operations(e, cie, eh_frame);
    if fde.is_signal_trampoline() {
        return if is_kernel_signal_frame(row, &ops) {
            Rule::SIGNAL_FRAME
        } else {
            Rule::unrepresentable(unrepresentable::SIGNAL_FRAME)
        };
    }
    if cie.return_address_register() != X86_64::RA {
        return Rule::unrepresentable(unrepresentable::RETURN_ADDRESS);
    }
    match row.register(X86_64::RA) {
        // readelf cannot tell these apart either: no rule at all for the return address
        // and an explicit DW_CFA_undefined both mean there is no caller.
        None | Some(RegisterRule::Undefined) => return Rule::END_OF_STACK,
        Some(RegisterRule::Offset(RETURN_ADDRESS_CFA_OFFSET)) => {}
        Some(_) => return Rule::unrepresentable(unrepresentable::RETURN_ADDRESS),
    }
    match row.register(X86_64::RSP) {
        None | Some(RegisterRule::Undefined) | Some(RegisterRule::ValOffset(0)) => {}
        Some(_) => return Rule::unrepresentable(unrepresentable::RSP_RULE),
    }
    let (kind, offset) = match row.cfa() {
        &CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RSP => {
            (cfa_rule::RSP, offset)
        }
        &CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RBP => {
            (cfa_rule::RBP, offset)
        }
        CfaRule::RegisterAndOffset { .. } => {
            return Rule::unrepresentable(unrepresentable::CFA_REGISTER);
        }
        CfaRule::Expression(e) => match ops(e).as_deref().and_then(plt_cfa_offset) {
            Some(offset) => (cfa_rule::PLT, offset),
            None => return Rule::unrepresentable(unrepresentable::CFA_EXPRESSION),
        },
    };
    let Some(cfa_offset) = offset_units::<u16>(offset) else {
        return Rule::unrepresentable(unrepresentable::CFA_OFFSET);
    };
    let rbp_rule = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::Undefined) | Some(RegisterRule::SameValue) => 0,
        Some(RegisterRule::Offset(n)) if n < 0 => match offset_units::<i8>(n) {
            Some(units) => units,
            None => return Rule::unrepresentable(unrepresentable::RBP_RULE),
        },
        Some(_) => return Rule::unrepresentable(unrepresentable::RBP_RULE),
    };
    if kind == cfa_rule::PLT && rbp_rule != 0 {
        return Rule::unrepresentable(unrepresentable::RBP_RULE);
    }
    Rule {
        cfa_rule: kind,
        cfa_offset,
        rbp_rule,
    }
}

/// `bytes / OFFSET_UNIT` as `T`, if `bytes` is a multiple of the unit and fits.
fn offset_units<T: TryFrom<i64>>(bytes: i64) -> Option<T> {
    let unit = OFFSET_UNIT as i64;
    if bytes % unit != 0 {
        return None;
    }
    T::try_from(bytes / unit).ok()
}

/// The operations of a DWARF expression; `None` if it does not parse.
fn operations<'data>(
    expression: &UnwindExpression<usize>,
    cie: &CommonInformationEntry<Slice<'data>>,
    eh_frame: &EhFrame<Slice<'data>>,
) -> Option<Vec<Operation<Slice<'data>>>> {
    let expression = expression.get(eh_frame).ok()?;
    let mut iter = expression.operations(cie.encoding());
    let mut ops = Vec::new();
    while let Some(op) = iter.next().ok()? {
        ops.push(op);
    }
    Some(ops)
}

/// `rsp + N`, for the PLT's CFA expression
/// `DW_OP_breg7 (rsp): N; DW_OP_breg16 (rip): 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11;
/// DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus`, i.e.
/// `rsp + N + (((rip & 15) >= 11) << 3)`; the offset N in bytes.
fn plt_cfa_offset(ops: &[Operation<Slice<'_>>]) -> Option<i64> {
    let [
        Operation::RegisterOffset {
            register: X86_64::RSP,
            offset,
            base_type: gimli::UnitOffset(0),
        },
        Operation::RegisterOffset {
            register: X86_64::RA,
            offset: 0,
            base_type: gimli::UnitOffset(0),
        },
        Operation::UnsignedConstant { value: 15 },
        Operation::And,
        Operation::UnsignedConstant {
            value: PLT_PUSHED_FROM,
        },
        Operation::Ge,
        Operation::UnsignedConstant { value: 3 },
        Operation::Shl,
        Operation::Plus,
    ] = ops
    else {
        return None;
    };
    Some(*offset)
}

/// Whether a signal trampoline's row restores `rip`, `rsp` and `rbp` from the kernel's
/// signal frame at `rsp` (the offsets of [`sigframe`]) with CFA `*(rsp + sigframe::RSP)`.
fn is_kernel_signal_frame<'data>(
    row: &Row,
    ops: &impl Fn(&UnwindExpression<usize>) -> Option<Vec<Operation<Slice<'data>>>>,
) -> bool {
    let at_rsp_plus = |ops: &[Operation<Slice<'_>>], want: u64| {
        matches!(ops, [Operation::RegisterOffset {
            register: X86_64::RSP,
            offset,
            base_type: gimli::UnitOffset(0),
        }] if *offset as u64 == want)
    };
    let saved_at = |register: Register, want: u64| match row.register(register) {
        Some(RegisterRule::Expression(e)) => ops(&e).is_some_and(|ops| at_rsp_plus(&ops, want)),
        _ => false,
    };
    let cfa_ok = match row.cfa() {
        CfaRule::Expression(e) => ops(e).is_some_and(|ops| match ops.as_slice() {
            [
                load,
                Operation::Deref {
                    base_type: gimli::UnitOffset(0),
                    size: 8,
                    space: false,
                },
            ] => at_rsp_plus(std::slice::from_ref(load), sigframe::RSP),
            _ => false,
        }),
        CfaRule::RegisterAndOffset { .. } => false,
    };
    cfa_ok
        && saved_at(X86_64::RA, sigframe::RIP)
        && saved_at(X86_64::RSP, sigframe::RSP)
        && saved_at(X86_64::RBP, sigframe::RBP)
}

/// Assembles the FDEs' rows into one sorted table of (start address, rule), in canonical
/// form: strictly increasing addresses, no two consecutive rows with the same rule, a
/// `NO_UNWIND_INFO` row wherever the code between two FDEs (or after the last) has none.
/// Returns it with the number of FDEs that began inside the previous one.
pub(crate) fn assemble(mut fdes: Vec<FdeRows>) -> (Vec<(u64, Rule)>, u64) {
    fdes.sort_by_key(|f| (f.start, f.end));
    let mut out: Vec<(u64, Rule)> = Vec::new();
    let mut overlapping = 0;
    let mut covered_until: Option<u64> = None;
    for fde in fdes {
        match covered_until {
            Some(end) if fde.start < end => {
                overlapping += 1;
                while out.last().is_some_and(|&(pc, _)| pc >= fde.start) {
                    out.pop();
                }
            }
            Some(end) if fde.start > end => push(&mut out, end, Rule::NO_UNWIND_INFO),
            _ => {}
        }
        // An FDE without rows (impossible from gimli, which always yields the initial
        // row) would leave its range to the previous rule: mark it.
        if fde.rows.is_empty() {
            push(&mut out, fde.start, Rule::NO_UNWIND_INFO);
        }
        for (pc, rule) in fde.rows {
            push(&mut out, pc, rule);
        }
        covered_until = Some(fde.end);
    }
    if let Some(end) = covered_until {
        push(&mut out, end, Rule::NO_UNWIND_INFO);
    }
    (out, overlapping)
}

/// Appends a row, keeping the table canonical: a row at the address of the last one
/// replaces it (the last one covered nothing); a row with the last one's rule adds
/// nothing.
fn push(out: &mut Vec<(u64, Rule)>, pc: u64, rule: Rule) {
    if out.last().is_some_and(|&(last_pc, _)| last_pc == pc) {
        out.pop();
    }
    if out.last().is_some_and(|&(_, last)| last == rule) {
        return;
    }
    out.push((pc, rule));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rsp(offset: u16) -> Rule {
        Rule {
            cfa_rule: cfa_rule::RSP,
            cfa_offset: offset,
            rbp_rule: 0,
        }
    }

    fn fde(start: u64, end: u64, rows: &[(u64, Rule)]) -> FdeRows {
        FdeRows {
            start,
            end,
            rows: rows.to_vec(),
        }
    }

    #[test]
    fn gaps_get_explicit_no_info_rows_and_equal_rules_merge() {
        let (rows, overlapping) = assemble(vec![
            // Out of order on purpose: assembly sorts.
            fde(0x200, 0x210, &[(0x200, rsp(1)), (0x201, rsp(2))]),
            fde(
                0x100,
                0x120,
                &[(0x100, rsp(1)), (0x104, rsp(2)), (0x110, rsp(2))],
            ),
            // Adjacent to the previous one, same first rule as its last: merged.
            fde(0x210, 0x220, &[(0x210, rsp(2)), (0x218, rsp(1))]),
        ]);
        assert_eq!(overlapping, 0);
        assert_eq!(
            rows,
            vec![
                (0x100, rsp(1)),
                (0x104, rsp(2)),
                (0x120, Rule::NO_UNWIND_INFO),
                (0x200, rsp(1)),
                (0x201, rsp(2)),
                (0x218, rsp(1)),
                (0x220, Rule::NO_UNWIND_INFO),
            ]
        );
    }

    #[test]
    fn a_later_overlapping_fde_wins_from_its_start() {
        let (rows, overlapping) = assemble(vec![
            fde(0x100, 0x140, &[(0x100, rsp(1)), (0x130, rsp(3))]),
            fde(0x120, 0x130, &[(0x120, rsp(2))]),
        ]);
        assert_eq!(overlapping, 1);
        assert_eq!(
            rows,
            vec![
                (0x100, rsp(1)),
                (0x120, rsp(2)),
                (0x130, Rule::NO_UNWIND_INFO),
            ]
        );
    }

    #[test]
    fn a_zero_length_row_is_replaced() {
        let (rows, _) = assemble(vec![fde(
            0x100,
            0x110,
            &[(0x100, rsp(1)), (0x108, rsp(2)), (0x108, rsp(1))],
        )]);
        assert_eq!(rows, vec![(0x100, rsp(1)), (0x110, Rule::NO_UNWIND_INFO)]);
    }

    #[test]
    fn offsets_convert_to_units_only_when_exact() {
        assert_eq!(offset_units::<u16>(16), Some(2));
        assert_eq!(offset_units::<u16>(12), None);
        assert_eq!(offset_units::<u16>(-8), None);
        assert_eq!(offset_units::<u16>(65535 * 8), Some(65535));
        assert_eq!(offset_units::<u16>(65536 * 8), None);
        assert_eq!(offset_units::<i8>(-1024), Some(-128));
        assert_eq!(offset_units::<i8>(-1032), None);
    }

    #[test]
    fn lookup_finds_the_last_row_at_or_below() {
        let table = UnwindTable {
            rows: vec![
                rsp(1).at(0x100),
                rsp(2).at(0x104),
                Rule::NO_UNWIND_INFO.at(0x120),
            ],
            stats: TableStats::default(),
        };
        assert_eq!(table.lookup(0xff), None);
        assert_eq!(table.lookup(0x100).map(|r| r.pc), Some(0x100));
        assert_eq!(table.lookup(0x103).map(|r| r.pc), Some(0x100));
        assert_eq!(table.lookup(0x104).map(|r| r.pc), Some(0x104));
        assert_eq!(table.lookup(0x11f).map(|r| r.pc), Some(0x104));
        assert_eq!(
            table.lookup(0x120).map(Rule::of),
            Some(Rule::NO_UNWIND_INFO)
        );
        assert_eq!(
            table.lookup(1 << 40).map(Rule::of),
            Some(Rule::NO_UNWIND_INFO)
        );
        let empty = UnwindTable {
            rows: Vec::new(),
            stats: TableStats::default(),
        };
        assert_eq!(empty.lookup(0x100), None);
    }
}
