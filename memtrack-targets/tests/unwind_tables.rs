//! The unwind tables against binutils: for C fixtures compiled here, libc.so.6 and
//! libstdc++.so.6, every row `readelf -wF` prints (the CFA rule and the rbp rule of
//! every address range of every FDE), classified independently by this file into the
//! table format, must be the table memtrack builds, row for row; what the format cannot
//! express must be exactly the rows this file expects to be unrepresentable, by reason.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use memtrack_common::unwind::{UnwindRow, cfa_rule, unrepresentable};
use memtrack_targets::unwind::{ElfType, UnwindObject, read_object};

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
const LIBSTDCXX: &str = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";
const LD_SO: &str = "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";

/// One CIE or FDE as readelf prints it.
#[derive(Debug, Default)]
struct Entry {
    /// Offset in `.eh_frame`.
    offset: u64,
    /// A CIE (otherwise an FDE).
    is_cie: bool,
    /// CIE: its augmentation string. FDE: empty.
    augmentation: String,
    /// FDE: its CIE's offset.
    cie: u64,
    /// FDE: `pc=start..end`.
    start: u64,
    end: u64,
    /// `-wF` rows: address and (column name, value) pairs.
    rows: Vec<(u64, Vec<(String, String)>)>,
    /// `-wf`: the operand of each `DW_CFA_def_cfa_expression`.
    cfa_expressions: Vec<String>,
    /// `-wf`: register name -> the operand of its `DW_CFA_expression`.
    register_expressions: HashMap<String, String>,
}

fn readelf(path: &Path, option: &str) -> String {
    // -wN: the .eh_frame of this file, not of a separate debug file its
    // .gnu_debuglink names (libc6-dbg's has the section as NOBITS).
    let out = Command::new("readelf")
        .arg("-wN")
        .arg(option)
        .arg(path)
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "readelf {option} {}", path.display());
    String::from_utf8(out.stdout).unwrap()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap_or_else(|e| panic!("hex {s:?}: {e}"))
}

/// An entry header line: `OFFSET LENGTH ID CIE "aug" ...` or
/// `OFFSET LENGTH ID FDE cie=OFF pc=START..END`.
fn entry_header(line: &str) -> Option<Entry> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    match tokens.as_slice() {
        [offset, _, _, "CIE", aug, ..] => Some(Entry {
            offset: hex(offset),
            is_cie: true,
            augmentation: aug.trim_matches('"').to_owned(),
            ..Entry::default()
        }),
        [offset, _, _, "FDE", cie, pc, ..] => {
            let (start, end) = pc.strip_prefix("pc=")?.split_once("..")?;
            Some(Entry {
                offset: hex(offset),
                cie: hex(cie.strip_prefix("cie=")?),
                start: hex(start),
                end: hex(end),
                ..Entry::default()
            })
        }
        _ => None,
    }
}

/// Every CIE and FDE of `path`'s `.eh_frame`, with the `-wF` rows and `-wf` expressions.
fn readelf_entries(path: &Path) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    let mut in_eh_frame = false;
    let mut columns: Vec<String> = Vec::new();
    for line in readelf(path, "-wF").lines() {
        if line.starts_with("Contents of the ") {
            in_eh_frame = line.starts_with("Contents of the .eh_frame section");
            continue;
        }
        if !in_eh_frame {
            continue;
        }
        if let Some(entry) = entry_header(line) {
            entries.push(entry);
            columns.clear();
            continue;
        }
        let trimmed = line.trim_start();
        if let Some(header) = trimmed.strip_prefix("LOC") {
            columns = header.split_whitespace().map(str::to_owned).collect();
            continue;
        }
        let mut tokens = trimmed.split_whitespace();
        let Some(first) = tokens.next() else { continue };
        if first.len() != 16 || !first.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        // A register column prints as `r10 (r10)`: a token in parentheses belongs to
        // the one before.
        let mut values: Vec<String> = Vec::new();
        for token in tokens {
            match values.last_mut() {
                Some(last) if token.starts_with('(') => {
                    last.push(' ');
                    last.push_str(token);
                }
                _ => values.push(token.to_owned()),
            }
        }
        assert_eq!(
            values.len(),
            columns.len(),
            "{}: row {line:?} vs {columns:?}",
            path.display()
        );
        let entry = entries.last_mut().expect("a row belongs to an entry");
        entry
            .rows
            .push((hex(first), columns.iter().cloned().zip(values).collect()));
    }

    let by_offset: HashMap<u64, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.offset, i))
        .collect();
    let mut current: Option<usize> = None;
    in_eh_frame = false;
    for line in readelf(path, "-wf").lines() {
        if line.starts_with("Contents of the ") {
            in_eh_frame = line.starts_with("Contents of the .eh_frame section");
            continue;
        }
        if !in_eh_frame {
            continue;
        }
        if let Some(header) = entry_header(line) {
            current = Some(by_offset[&header.offset]);
            continue;
        }
        let Some(i) = current else { continue };
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("DW_CFA_def_cfa_expression (") {
            entries[i]
                .cfa_expressions
                .push(rest.strip_suffix(')').unwrap().to_owned());
        } else if let Some(rest) = trimmed.strip_prefix("DW_CFA_expression: ") {
            // `r16 (rip) (DW_OP_breg7 (rsp): 168)`
            let (_, rest) = rest.split_once(" (").unwrap();
            let (name, expr) = rest.split_once(") (").unwrap();
            entries[i]
                .register_expressions
                .insert(name.to_owned(), expr.strip_suffix(')').unwrap().to_owned());
        }
    }
    entries
}

/// The rule of one readelf row in the table format (the row's `pc` is 0).
fn expected_rule(fde: &Entry, cie: &Entry, row: &[(String, String)]) -> UnwindRow {
    let col = |name: &str| row.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let unrep = |reason: u16| UnwindRow {
        pc: 0,
        cfa_offset: reason,
        cfa_rule: cfa_rule::UNREPRESENTABLE,
        rbp_rule: 0,
    };
    let rule = |cfa_rule: u8, cfa_offset: u16, rbp_rule: i8| UnwindRow {
        pc: 0,
        cfa_offset,
        cfa_rule,
        rbp_rule,
    };
    if cie.augmentation.contains('S') {
        let saved = |reg: &str, at: u64| {
            fde.register_expressions.get(reg).map(String::as_str)
                == Some(&format!("DW_OP_breg7 (rsp): {at}"))
        };
        let kernel_frame = col("CFA") == Some("exp")
            && fde.cfa_expressions == ["DW_OP_breg7 (rsp): 160; DW_OP_deref"]
            && saved("rip", 168)
            && saved("rsp", 160)
            && saved("rbp", 120);
        return if kernel_frame {
            rule(cfa_rule::SIGNAL_FRAME, 0, 0)
        } else {
            unrep(unrepresentable::SIGNAL_FRAME)
        };
    }
    match col("ra") {
        None | Some("u") => return rule(cfa_rule::END_OF_STACK, 0, 0),
        Some("c-8") => {}
        Some(_) => return unrep(unrepresentable::RETURN_ADDRESS),
    }
    match col("rsp") {
        None | Some("u") | Some("v+0") => {}
        Some(_) => return unrep(unrepresentable::RSP_RULE),
    }
    let cfa = col("CFA").expect("a CFA column");
    let (kind, offset) = if cfa == "exp" {
        let [expression] = fde.cfa_expressions.as_slice() else {
            panic!(
                "FDE {:#x}: CFA expressions {:?}",
                fde.offset, fde.cfa_expressions
            );
        };
        let plt = expression
            .strip_prefix("DW_OP_breg7 (rsp): ")
            .and_then(|rest| {
                rest.strip_suffix(
                    "; DW_OP_breg16 (rip): 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge; \
                     DW_OP_lit3; DW_OP_shl; DW_OP_plus",
                )
            });
        match plt {
            Some(offset) => (cfa_rule::PLT, offset.parse::<i64>().unwrap()),
            None => return unrep(unrepresentable::CFA_EXPRESSION),
        }
    } else {
        let split = cfa
            .find(['+', '-'])
            .unwrap_or_else(|| panic!("CFA {cfa:?}"));
        let (register, offset) = cfa.split_at(split);
        let offset: i64 = offset.parse().unwrap();
        match register {
            "rsp" => (cfa_rule::RSP, offset),
            "rbp" => (cfa_rule::RBP, offset),
            _ => return unrep(unrepresentable::CFA_REGISTER),
        }
    };
    if offset < 0 || offset % 8 != 0 || offset / 8 > i64::from(u16::MAX) {
        return unrep(unrepresentable::CFA_OFFSET);
    }
    let rbp = match col("rbp") {
        None | Some("u") | Some("s") => 0,
        Some(saved) => match saved.strip_prefix("c-").and_then(|n| n.parse::<i64>().ok()) {
            Some(n) if n > 0 && n % 8 == 0 && n / 8 <= 128 => -(n / 8) as i8,
            _ => return unrep(unrepresentable::RBP_RULE),
        },
    };
    if kind == cfa_rule::PLT && rbp != 0 {
        return unrep(unrepresentable::RBP_RULE);
    }
    rule(kind, (offset / 8) as u16, rbp)
}

fn same_rule(a: &UnwindRow, b: &UnwindRow) -> bool {
    (a.cfa_rule, a.cfa_offset, a.rbp_rule) == (b.cfa_rule, b.cfa_offset, b.rbp_rule)
}

/// Appends to a canonical table (see `memtrack_common::unwind`).
fn push(rows: &mut Vec<UnwindRow>, pc: u64, rule: UnwindRow) {
    let pc = u32::try_from(pc).unwrap();
    if rows.last().is_some_and(|last| last.pc == pc) {
        rows.pop();
    }
    if rows.last().is_some_and(|last| same_rule(last, &rule)) {
        return;
    }
    rows.push(UnwindRow { pc, ..rule });
}

/// What readelf says the table must be, and the number of readelf rows per
/// (cfa_rule, unrepresentable reason or 0).
struct Expected {
    rows: Vec<UnwindRow>,
    fdes: u64,
    empty_fdes: u64,
    by_rule: [u64; 7],
    by_reason: [u64; 8],
}

fn expected_table(path: &Path) -> Expected {
    let entries = readelf_entries(path);
    let cies: HashMap<u64, &Entry> = entries
        .iter()
        .filter(|e| e.is_cie)
        .map(|e| (e.offset, e))
        .collect();
    let mut fdes: Vec<&Entry> = entries.iter().filter(|e| !e.is_cie).collect();
    let all_fdes = fdes.len() as u64;
    fdes.retain(|f| f.start < f.end);
    let empty_fdes = all_fdes - fdes.len() as u64;
    fdes.sort_by_key(|f| (f.start, f.end));
    let mut expected = Expected {
        rows: Vec::new(),
        fdes: all_fdes,
        empty_fdes,
        by_rule: [0; 7],
        by_reason: [0; 8],
    };
    let no_info = UnwindRow::no_unwind_info(0);
    let mut previous_end: Option<u64> = None;
    for fde in fdes {
        let cie = cies[&fde.cie];
        if let Some(end) = previous_end {
            assert!(
                fde.start >= end,
                "{}: FDE {:#x} overlaps the one before",
                path.display(),
                fde.offset
            );
            if fde.start > end {
                push(&mut expected.rows, end, no_info);
            }
        }
        // readelf prints no rows for an FDE whose program is only padding: the CIE's
        // initial rules hold for its whole range.
        let rows: Vec<(u64, &[(String, String)])> = if fde.rows.is_empty() {
            let (_, initial) = cie.rows.last().expect("the CIE's initial row");
            vec![(fde.start, initial.as_slice())]
        } else {
            fde.rows
                .iter()
                .map(|(pc, row)| (*pc, row.as_slice()))
                .collect()
        };
        for (pc, row) in rows {
            if pc >= fde.end {
                continue;
            }
            let rule = expected_rule(fde, cie, row);
            expected.by_rule[usize::from(rule.cfa_rule)] += 1;
            if rule.cfa_rule == cfa_rule::UNREPRESENTABLE {
                expected.by_reason[usize::from(rule.cfa_offset)] += 1;
            }
            push(&mut expected.rows, pc, rule);
        }
        previous_end = Some(fde.end);
    }
    if let Some(end) = previous_end {
        push(&mut expected.rows, end, no_info);
    }
    expected
}

const RULE_NAMES: [&str; 7] = [
    "no unwind info",
    "rsp-based",
    "rbp-based",
    "PLT",
    "signal frame",
    "end of stack",
    "unrepresentable",
];
const REASON_NAMES: [&str; 8] = [
    "-",
    "signal frame layout",
    "return address not at CFA-8",
    "rsp not the CFA",
    "CFA from another register",
    "CFA expression",
    "CFA offset",
    "rbp rule",
];

/// Builds `path`'s table and checks it against readelf row for row; prints what it
/// found. Returns the object.
fn check_against_readelf(path: &Path) -> UnwindObject {
    let object = read_object(path).unwrap_or_else(|e| panic!("{e}"));
    let expected = expected_table(path);
    let table = &object.table;
    let stats = table.stats();
    println!(
        "{}: {} FDEs, {} table rows ({} bytes), built in {:?}",
        path.display(),
        stats.fdes,
        table.rows().len(),
        table.size_bytes(),
        stats.build_time
    );
    for (kind, name) in RULE_NAMES.iter().enumerate().skip(1) {
        println!("  readelf rows {name}: {}", expected.by_rule[kind]);
    }
    for (reason, name) in REASON_NAMES.iter().enumerate().skip(1) {
        if expected.by_reason[reason] > 0 {
            println!(
                "    unrepresentable, {name}: {}",
                expected.by_reason[reason]
            );
        }
    }
    if let Some(i) = table
        .rows()
        .iter()
        .zip(&expected.rows)
        .position(|(a, b)| a != b)
    {
        let around =
            |rows: &[UnwindRow]| rows[i.saturating_sub(3)..(i + 4).min(rows.len())].to_vec();
        panic!(
            "{}: first difference at row {i}:\n  built:    {:x?}\n  readelf:  {:x?}",
            path.display(),
            around(table.rows()),
            around(&expected.rows)
        );
    }
    assert_eq!(
        table.rows().len(),
        expected.rows.len(),
        "{}: row count",
        path.display()
    );
    assert_eq!(stats.fdes, expected.fdes, "FDEs");
    assert_eq!(stats.empty_fdes, expected.empty_fdes, "empty FDEs");
    assert_eq!(
        (
            stats.fdes_outside_code,
            stats.malformed_fdes,
            stats.overlapping_fdes
        ),
        (0, 0, 0),
        "{stats:?}"
    );
    assert_eq!(stats.cfi_rows_by_rule, expected.by_rule, "rows by rule");
    assert_eq!(
        stats.unrepresentable_by_reason, expected.by_reason,
        "unrepresentable rows by reason"
    );
    // Static executables have no .eh_frame_hdr (gcc links them without one).
    assert!(
        stats.eh_frame_hdr_entries.is_none_or(|n| n == stats.fdes),
        ".eh_frame_hdr lists every FDE: {stats:?}"
    );
    object
}

fn rule_at(object: &UnwindObject, vaddr: u64) -> (u8, u16, i8) {
    let row = object
        .table
        .lookup(vaddr)
        .unwrap_or_else(|| panic!("no row at {vaddr:#x}"));
    (row.cfa_rule, row.cfa_offset, row.rbp_rule)
}

const FUNCTIONS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline, noclone)) int leaf(int x) { return x * 7 + 3; }
__attribute__((noinline, noclone)) int saves(int x) {
    int a = leaf(x), b = leaf(a);
    return a * b + leaf(b);
}
__attribute__((noinline, noclone)) void fill(char *buf, int n, int x) { memset(buf, x, n); }
__attribute__((noinline, noclone)) int big_frame(int x) {
    char buf[5000];
    fill(buf, sizeof buf, x);
    return saves(buf[x & 1023]) + buf[4999];
}
__attribute__((noinline, noclone)) void fail(const char *why) {
    fprintf(stderr, "%s\n", why);
    abort();
}
int main(int argc, char **argv) {
    if (argc > 5) fail(argv[0]);
    printf("%d\n", big_frame(argc));
    return 0;
}
"#;

#[test]
fn fixtures_without_and_with_frame_pointers_agree_with_readelf() {
    let dir = tempfile::tempdir().unwrap();
    for (name, flags, frame_pointer) in [
        ("omit_fp_pie", &["-O2", "-fomit-frame-pointer"][..], false),
        (
            "omit_fp_nopie",
            &["-O2", "-fomit-frame-pointer", "-no-pie"][..],
            false,
        ),
        ("fp_o0", &["-O0", "-fno-omit-frame-pointer"][..], true),
        (
            "omit_fp_static",
            &["-O2", "-fomit-frame-pointer", "-static"][..],
            false,
        ),
    ] {
        let program = common::compile(dir.path(), "gcc", name, "c", FUNCTIONS, flags);
        let object = check_against_readelf(&program);
        let pie = !flags.contains(&"-no-pie") && !flags.contains(&"-static");
        assert_eq!(
            object.info.elf_type,
            if pie {
                ElfType::Dynamic
            } else {
                ElfType::Executable
            },
            "{name}"
        );
        assert_eq!(
            object.info.build_id.as_ref().map(Vec::len),
            Some(20),
            "{name}: build id"
        );

        let symbols = common::function_symbols(&program);
        for function in ["leaf", "saves", "big_frame", "fail", "main"] {
            let start = common::address_of(&symbols, function);
            // At any function's first instruction the return address was just pushed.
            assert_eq!(
                rule_at(&object, start),
                (cfa_rule::RSP, 1, 0),
                "{name}: {function} entry"
            );
            let symbol = common::symbol_at(&symbols, start).unwrap();
            let middle = start + symbol.size / 2;
            if frame_pointer {
                // After `push rbp; mov rbp, rsp`: CFA = rbp + 16, rbp saved at CFA - 16.
                assert_eq!(
                    rule_at(&object, middle),
                    (cfa_rule::RBP, 2, -2),
                    "{name}: {function}"
                );
            } else {
                assert_eq!(
                    rule_at(&object, middle).0,
                    cfa_rule::RSP,
                    "{name}: {function}"
                );
            }
        }
        if !frame_pointer {
            // 5000 bytes of locals: the CFA is more than 5000 bytes above rsp inside.
            let start = common::address_of(&symbols, "big_frame");
            let size = common::symbol_at(&symbols, start).unwrap().size;
            let deepest = (start..start + size)
                .map(|a| rule_at(&object, a).1)
                .max()
                .unwrap();
            assert!(
                u64::from(deepest) * 8 > 5000,
                "{name}: big_frame's CFA offset {deepest}"
            );
        }
        // Bytes between functions (alignment padding) have no unwind info, explicitly.
        let leaf = common::symbol_at(&symbols, common::address_of(&symbols, "leaf")).unwrap();
        let after = leaf.start + leaf.size;
        let next = symbols.iter().find(|s| s.start >= after).unwrap().start;
        if next > after {
            assert_eq!(
                rule_at(&object, after).0,
                cfa_rule::NO_UNWIND_INFO,
                "{name}: after leaf"
            );
        }
    }
}

#[test]
fn libc_agrees_with_readelf() {
    let object = check_against_readelf(Path::new(LIBC));
    let stats = object.table.stats();
    // Debian 12's glibc 2.36, hand-written assembly: `__restore_rt` is a kernel signal
    // frame; the two thread start functions (clone, clone3) end the stack; the
    // lazy-binding PLT has its expression. Unrepresentable, and so ending a stack with
    // an unknown frame: the longjmp family (the return address is in rdx while the
    // registers are restored) and vfork (it pops its return address into rdi).
    assert_eq!(
        stats.cfi_rows_by_rule[usize::from(cfa_rule::SIGNAL_FRAME)],
        1
    );
    assert_eq!(stats.cfi_rows_by_rule[usize::from(cfa_rule::PLT)], 1);
    assert_eq!(
        stats.cfi_rows_by_rule[usize::from(cfa_rule::END_OF_STACK)],
        2
    );
    let mut unrepresentable = [0; 8];
    unrepresentable[usize::from(unrepresentable::RETURN_ADDRESS)] = 6;
    assert_eq!(
        stats.unrepresentable_by_reason, unrepresentable,
        "{stats:?}"
    );
    assert_eq!(object.info.elf_type, ElfType::Dynamic);
    assert_eq!(stats.eh_frame_hdr_entries, Some(stats.fdes));
    assert!(object.info.build_id_hex().is_some_and(|id| id.len() == 40));
}

#[test]
fn libstdcxx_agrees_with_readelf() {
    let object = check_against_readelf(Path::new(LIBSTDCXX));
    let stats = object.table.stats();
    assert_eq!(stats.unrepresentable_by_reason, [0; 8], "{stats:?}");
    assert_eq!(stats.cfi_rows_by_rule[usize::from(cfa_rule::PLT)], 1);
}

#[test]
fn dynamic_loader_agrees_with_readelf() {
    // In every dynamic program's stacks until main runs, and in lazy binding's.
    let object = check_against_readelf(Path::new(LD_SO));
    let stats = object.table.stats();
    assert_eq!(
        stats.cfi_rows_by_rule[usize::from(cfa_rule::SIGNAL_FRAME)],
        1
    );
    assert_eq!(stats.eh_frame_hdr_entries, Some(stats.fdes));
    // Unrepresentable: lazy binding's _dl_runtime_resolve_* and _dl_runtime_profile_*
    // realign the stack and compute their CFA from rbx (a register the unwinder does
    // not carry into callers); ld.so's own __longjmp.
    let mut unrepresentable = [0; 8];
    unrepresentable[usize::from(unrepresentable::CFA_REGISTER)] = 9;
    unrepresentable[usize::from(unrepresentable::RETURN_ADDRESS)] = 1;
    assert_eq!(
        stats.unrepresentable_by_reason, unrepresentable,
        "{stats:?}"
    );
}
