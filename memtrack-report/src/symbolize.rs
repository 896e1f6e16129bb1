//! Symbolization of stack frames after the run, with blazesym: function names
//! (demangled: Rust legacy and v0, C++), source file, line and column from DWARF where
//! the object has debug information, inlined functions expanded (one return address can
//! stand for several logical frames).
//!
//! Each object is looked up by the path recorded while the process lived, and used only
//! if its build id is still the recorded one: a file rebuilt or replaced since the run
//! would give wrong names, so its frames stay `object+0xaddress` and the object is
//! reported as changed. Every distinct (object, address) is symbolized once, however
//! many stacks and processes share it; each object's addresses go to blazesym in one
//! batch. The addresses are the ones to look up ([`Frame::lookup_address`]: a return
//! address minus one).
//!
//! [`Frame::lookup_address`]: memtrack_record::stacks::Frame::lookup_address

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt,
    path::PathBuf,
};

use blazesym::symbolize::{
    self, Input, Symbolized,
    source::{Elf, Source},
};
use memtrack_record::stacks::StackObject;

/// A place in the source code.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct SourceLocation {
    /// The file as the debug information names it (often relative to the compilation
    /// directory, e.g. `src/main.rs` or `a.c`).
    pub file: String,
    /// The file joined to its compilation directory, when the debug information has
    /// one (otherwise the same as `file`).
    pub path: PathBuf,
    /// Line number (1-based), if known.
    pub line: Option<u32>,
    /// Column number (1-based), if known.
    pub column: Option<u32>,
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        Ok(())
    }
}

/// One logical frame: a function, possibly inlined into the next (outer) one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct LogicalFrame {
    /// The function's name, demangled.
    pub function: String,
    /// Where in it the call is, if the object has line information.
    pub location: Option<SourceLocation>,
    /// Whether this function was inlined into the next logical frame of the same
    /// address (false for the last one, the function the code belongs to).
    pub inlined: bool,
}

/// Whether an object's file could be used for symbols.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ObjectStatus {
    /// Found at its recorded path with the recorded build id.
    Verified,
    /// Found, but no build id was recorded, so it cannot be checked: used as it is.
    Unverified,
    /// Not usable: not found or not readable (the reason).
    Missing(String),
    /// Found, but with another build id (`None`: now has none): it changed since the
    /// run, so its frames are not symbolized.
    Changed {
        /// The build id the file has now, lowercase hex.
        found: Option<String>,
    },
}

impl ObjectStatus {
    /// Whether its symbols can be trusted.
    pub fn usable(&self) -> bool {
        matches!(self, ObjectStatus::Verified | ObjectStatus::Unverified)
    }

    /// Why its frames are shown as `object+0xaddress` (None if they are not).
    pub fn problem(&self, object: &StackObject) -> Option<String> {
        let recorded = object.build_id.as_deref().unwrap_or("none");
        match self {
            ObjectStatus::Verified | ObjectStatus::Unverified => None,
            ObjectStatus::Missing(reason) => Some(format!(
                "{} (build id {recorded}): {reason}; its frames are shown as object+address",
                object.path.display()
            )),
            ObjectStatus::Changed { found } => Some(format!(
                "{} changed since the run (build id {recorded} then, {} now); its frames \
                 are shown as object+address",
                object.path.display(),
                found.as_deref().unwrap_or("none")
            )),
        }
    }
}

/// The lowercase hex of a build id.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The symbols of every (object, address) asked for.
#[derive(Debug, Default)]
pub struct Symbols {
    objects: BTreeMap<StackObject, ObjectStatus>,
    /// Logical frames per object and address, innermost first; empty when the address
    /// has no symbol (or the object is not usable).
    frames: HashMap<StackObject, HashMap<u64, Vec<LogicalFrame>>>,
    looked_up: usize,
}

impl Symbols {
    /// Symbolizes every address in `wanted` (object and address to look up; duplicates
    /// are looked up once).
    pub fn resolve<'a>(wanted: impl IntoIterator<Item = (&'a StackObject, u64)>) -> Symbols {
        let mut by_object: BTreeMap<&StackObject, BTreeSet<u64>> = BTreeMap::new();
        for (object, address) in wanted {
            by_object.entry(object).or_default().insert(address);
        }
        let symbolizer = symbolize::Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(true)
            .build();
        let mut symbols = Symbols::default();
        for (object, addresses) in by_object {
            let mut status = check_object(object);
            let addresses: Vec<u64> = addresses.into_iter().collect();
            let mut resolved = HashMap::new();
            if status.usable() {
                symbols.looked_up += addresses.len();
                match lookup(&symbolizer, object, &addresses) {
                    Ok(frames) => resolved = addresses.into_iter().zip(frames).collect(),
                    Err(reason) => status = ObjectStatus::Missing(reason),
                }
            }
            symbols.frames.insert(object.clone(), resolved);
            symbols.objects.insert(object.clone(), status);
        }
        symbols
    }

    /// The logical frames at an address, innermost first (empty: no symbol). Addresses
    /// that were not asked for have none either.
    pub fn frames(&self, object: &StackObject, address: u64) -> &[LogicalFrame] {
        self.frames
            .get(object)
            .and_then(|frames| frames.get(&address))
            .map_or(&[], Vec::as_slice)
    }

    /// Whether an object's file was usable (None: never asked for).
    pub fn status(&self, object: &StackObject) -> Option<&ObjectStatus> {
        self.objects.get(object)
    }

    /// Every object asked for, with its status, ordered by path.
    pub fn objects(&self) -> impl Iterator<Item = (&StackObject, &ObjectStatus)> {
        self.objects.iter()
    }

    /// How many addresses were handed to the symbolizer (each distinct one once).
    pub fn addresses_looked_up(&self) -> usize {
        self.looked_up
    }
}

fn check_object(object: &StackObject) -> ObjectStatus {
    if !object.path.is_file() {
        return ObjectStatus::Missing("not found".to_string());
    }
    match blazesym::helper::read_elf_build_id(&object.path) {
        Err(e) => ObjectStatus::Missing(format!("not a readable ELF file: {e}")),
        Ok(found) => {
            let found = found.map(|id| hex(&id));
            match &object.build_id {
                None => ObjectStatus::Unverified,
                Some(recorded) if found.as_deref() == Some(recorded.as_str()) => {
                    ObjectStatus::Verified
                }
                Some(_) => ObjectStatus::Changed { found },
            }
        }
    }
}

/// The logical frames at each address of one object, in `addresses` order, or why the
/// object could not be read for symbols.
fn lookup(
    symbolizer: &symbolize::Symbolizer,
    object: &StackObject,
    addresses: &[u64],
) -> Result<Vec<Vec<LogicalFrame>>, String> {
    let source = Source::Elf(Elf::new(&object.path));
    // An object that cannot be read leaves its own frames unsymbolized (and says why),
    // not the whole report.
    symbolizer
        .symbolize(&source, Input::VirtOffset(addresses))
        .map(|results| results.into_iter().map(logical_frames).collect())
        .map_err(|e| format!("reading its symbols failed: {e}"))
}

/// blazesym gives the outer function with the location of the call in it, and the
/// functions inlined into it outermost first, each with the location in it of the next
/// call (the last: of the address). Innermost first is the order stacks use.
fn logical_frames(symbolized: Symbolized<'_>) -> Vec<LogicalFrame> {
    let Symbolized::Sym(sym) = symbolized else {
        return Vec::new();
    };
    let location = |info: Option<&symbolize::CodeInfo<'_>>| {
        info.map(|info| SourceLocation {
            file: info.file.to_string_lossy().into_owned(),
            path: info.to_path().into_owned(),
            line: info.line,
            column: info.column.map(u32::from),
        })
    };
    let mut frames: Vec<LogicalFrame> = sym
        .inlined
        .iter()
        .rev()
        .map(|inlined| LogicalFrame {
            function: inlined.name.to_string(),
            location: location(inlined.code_info.as_ref()),
            inlined: true,
        })
        .collect();
    frames.push(LogicalFrame {
        function: sym.name.to_string(),
        location: location(sym.code_info.as_deref()),
        inlined: false,
    });
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_changed_objects_say_so() {
        let missing = StackObject {
            path: "/nonexistent/libgone.so".into(),
            build_id: Some("ab".into()),
        };
        let this = StackObject {
            path: std::env::current_exe().unwrap(),
            build_id: Some("00".into()),
        };
        let symbols = Symbols::resolve([(&missing, 0x1000), (&this, 0x1000), (&this, 0x1000)]);
        assert_eq!(
            symbols.status(&missing),
            Some(&ObjectStatus::Missing("not found".into()))
        );
        assert_eq!(
            ObjectStatus::Missing("not found".into()).problem(&missing),
            Some(
                "/nonexistent/libgone.so (build id ab): not found; its frames are shown \
                 as object+address"
                    .into()
            )
        );
        // The test binary has some other build id (or none): never "00".
        assert!(matches!(
            symbols.status(&this),
            Some(ObjectStatus::Changed { .. })
        ));
        assert!(symbols.frames(&this, 0x1000).is_empty());
        assert_eq!(symbols.addresses_looked_up(), 0);
        assert_eq!(
            ObjectStatus::Changed {
                found: Some("cd".into())
            }
            .problem(&this),
            Some(format!(
                "{} changed since the run (build id 00 then, cd now); its frames are shown \
                 as object+address",
                this.path.display()
            ))
        );
    }

    #[test]
    fn hex_is_lowercase_two_digits_per_byte() {
        assert_eq!(hex(&[0x0a, 0xbc, 0x00]), "0abc00");
    }
}
