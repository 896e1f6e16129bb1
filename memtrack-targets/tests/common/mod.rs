//! Helpers of the unwind-table tests: compiling fixtures and naming addresses from
//! symbol tables (independently of the code under test).

#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `program args...` in `dir` and panics with its stderr if it fails.
pub fn run(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `source` to `dir/name.EXT` and compiles it with `compiler` (gcc, g++) and
/// `flags` into `dir/name`.
pub fn compile(
    dir: &Path,
    compiler: &str,
    name: &str,
    ext: &str,
    source: &str,
    flags: &[&str],
) -> PathBuf {
    let src = format!("{name}.{ext}");
    std::fs::write(dir.join(&src), source).unwrap();
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["-o", name, &src]);
    run(dir, compiler, &args);
    dir.join(name)
}

/// A function symbol: `[start, start + size)`.
#[derive(Debug, Clone)]
pub struct Symbol {
    pub name: String,
    pub start: u64,
    pub size: u64,
}

/// The sized function symbols of an ELF file (`.symtab` and `.dynsym`), sorted by
/// address, then name.
pub fn function_symbols(path: &Path) -> Vec<Symbol> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file = object::File::parse(&*data).unwrap();
    let mut symbols: Vec<Symbol> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.is_definition())
        .filter_map(|s| {
            Some(Symbol {
                name: s.name().ok()?.to_owned(),
                start: s.address(),
                size: s.size(),
            })
        })
        .collect();
    symbols.sort_by(|a, b| (a.start, &a.name).cmp(&(b.start, &b.name)));
    symbols.dedup_by(|a, b| (a.start, &a.name) == (b.start, &b.name));
    symbols
}

/// The symbol containing `vaddr`; of several at one address (aliases such as `raise`
/// and `gsignal`), the one with the smallest name.
pub fn symbol_at(symbols: &[Symbol], vaddr: u64) -> Option<&Symbol> {
    let i = symbols.partition_point(|s| s.start <= vaddr);
    let start = symbols[..i].last()?.start;
    let first = symbols.partition_point(|s| s.start < start);
    Some(&symbols[first]).filter(|s| vaddr < s.start + s.size)
}

/// The address of the function symbol `name`.
pub fn address_of(symbols: &[Symbol], name: &str) -> u64 {
    symbols
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no function symbol {name}"))
        .start
}

/// The address of symbol `name` in `path`, sized or not.
pub fn any_symbol_address(path: &Path, name: &str) -> u64 {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name} in {}", path.display()))
        .address()
}
