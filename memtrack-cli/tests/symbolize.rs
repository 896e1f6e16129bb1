//! Symbolization of real programs built without frame pointers (tests/stacks): C with
//! an inlined function, C++ with a namespaced template, Rust with v0 and legacy
//! mangling. The return addresses come from objdump (the instruction after a known
//! call), the expected lines from the sources' `site:` markers, and every frame is
//! compared with binutils' addr2line as an independent reference.

mod stack_fixtures;

use std::path::Path;

use memtrack::stacks::{Frame, StackObject};
use memtrack_report::{
    stack_profile::{self, Place, ScopeChoice},
    symbolize::{LogicalFrame, ObjectStatus, Symbols},
};
use stack_fixtures::{addr2line, built, call_tree_profile, object, return_address, site_line};

/// (function, file name, line) of each logical frame.
fn summary(frames: &[LogicalFrame]) -> Vec<(String, String, Option<u32>)> {
    frames
        .iter()
        .map(|f| {
            let location = f.location.as_ref().expect("debug info has lines");
            let file = Path::new(&location.file)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (f.function.clone(), file, location.line)
        })
        .collect()
}

/// Symbolizes the return address `address` of `binary` (at the call: address - 1, as
/// the stacks views look it up) and checks it against addr2line.
fn symbolize(binary: &Path, address: u64) -> Vec<LogicalFrame> {
    let object = object(binary);
    let call = Frame::returning_to(Some(0), address).lookup_address();
    assert_eq!(call, address - 1);
    let symbols = Symbols::resolve([(&object, call)]);
    assert_eq!(symbols.status(&object), Some(&ObjectStatus::Verified));
    let frames = symbols.frames(&object, call).to_vec();
    assert_eq!(
        summary(&frames),
        addr2line(binary, call),
        "memtrack and addr2line disagree about {call:#x} in {}",
        binary.display()
    );
    frames
}

fn frame(function: &str, file: &str, line: u32) -> (String, String, Option<u32>) {
    (function.to_string(), file.to_string(), Some(line))
}

#[test]
fn c_frames_have_functions_lines_and_the_inlined_function() {
    let bin = &built().call_tree;
    let decode = symbolize(bin, return_address(bin, "decode", "malloc"));
    assert_eq!(
        summary(&decode),
        [frame(
            "decode",
            "call_tree.c",
            site_line("call_tree.c", "decode calls malloc")
        )]
    );
    assert!(!decode[0].inlined);
    // One return address, two logical frames: parse_header was inlined into load.
    let load = symbolize(bin, return_address(bin, "load", "<decode>"));
    assert_eq!(
        summary(&load),
        [
            frame(
                "parse_header",
                "call_tree.c",
                site_line("call_tree.c", "parse_header calls decode")
            ),
            frame(
                "load",
                "call_tree.c",
                site_line("call_tree.c", "load calls parse_header")
            ),
        ]
    );
    assert_eq!(
        load.iter().map(|f| f.inlined).collect::<Vec<_>>(),
        [true, false]
    );
    let main = symbolize(bin, return_address(bin, "main", "<load_other>"));
    assert_eq!(
        summary(&main),
        [frame(
            "main",
            "call_tree.c",
            site_line("call_tree.c", "main calls load_other")
        )]
    );
    // The file is also given with its directory.
    let location = main[0].location.as_ref().unwrap();
    assert_eq!(
        location.path,
        stack_fixtures::sources().join("call_tree.c"),
        "{location:?}"
    );
}

#[test]
fn cpp_names_are_demangled() {
    let bin = &built().codec;
    let frames = symbolize(
        bin,
        return_address(bin, "_ZN5codec11make_bufferIiEEPT_m", "_Znam"),
    );
    assert_eq!(
        summary(&frames),
        [frame(
            "int* codec::make_buffer<int>(unsigned long)",
            "codec.cpp",
            site_line("codec.cpp", "make_buffer calls operator new[]")
        )]
    );
}

/// The symbol objdump labels a Rust function with (its mangled name), found by
/// `nm` from the part of it that does not depend on the mangling's hashes.
fn rust_symbol(binary: &Path, contains: &str) -> String {
    let out = std::process::Command::new("nm")
        .arg(binary)
        .output()
        .unwrap();
    let symbols: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.contains(contains))
        .map(str::to_string)
        .collect();
    assert_eq!(
        symbols.len(),
        1,
        "{contains} in {}: {symbols:?}",
        binary.display()
    );
    symbols[0].clone()
}

fn check_rust(binary: &Path, load_name: &str) {
    let decode_symbol = rust_symbol(binary, "5codec6decode");
    let decode = symbolize(binary, return_address(binary, &decode_symbol, "<malloc"));
    assert_eq!(
        summary(&decode),
        [frame(
            "fixture::codec::decode",
            "decode.rs",
            site_line("decode.rs", "decode calls malloc")
        )]
    );
    let load_symbol = rust_symbol(binary, "4load");
    let load = symbolize(binary, return_address(binary, &load_symbol, "codec6decode"));
    assert_eq!(
        summary(&load),
        [frame(
            load_name,
            "decode.rs",
            site_line("decode.rs", "load calls decode")
        )]
    );
}

#[test]
fn rust_v0_names_are_demangled() {
    check_rust(&built().decode_v0, "<fixture::codec::Parser<u8>>::load");
}

#[test]
fn rust_legacy_names_are_demangled_without_the_hash() {
    check_rust(&built().decode_legacy, "fixture::codec::Parser<T>::load");
}

#[test]
fn objects_without_symbols_show_object_plus_address_and_build_id() {
    let b = built();
    let address = return_address(&b.call_tree, "decode", "malloc");
    // The stripped copy has the same code at the same addresses, and no symbols at all.
    let stripped = object(&b.call_tree_stripped);
    assert!(stripped.build_id.is_some());
    let symbols = Symbols::resolve([(&stripped, address)]);
    assert_eq!(symbols.status(&stripped), Some(&ObjectStatus::Verified));
    assert!(symbols.frames(&stripped, address).is_empty());

    let mut profile = call_tree_profile(&b.call_tree);
    let stacks = profile.stacks.as_mut().unwrap();
    stacks.objects[0] = stripped.clone();
    stacks.stacks.truncate(1);
    stacks.process.entries.truncate(1);
    let (profiles, _) = stack_profile::resolve(&[profile], &ScopeChoice::Process);
    let first = &profiles[0].stacks[0].frames[0];
    assert!(!first.symbolized);
    assert_eq!(
        first.logical[0].function,
        format!("call_tree_stripped+{:#x}", address - 1)
    );
    assert!(
        profiles[0].problems.is_empty(),
        "{:?}",
        profiles[0].problems
    );
}

#[test]
fn a_file_changed_since_the_run_is_not_trusted() {
    let b = built();
    let address = return_address(&b.call_tree, "decode", "malloc");
    let real = object(&b.call_tree);
    let changed = StackObject {
        build_id: Some("0123456789abcdef0123456789abcdef01234567".into()),
        ..real.clone()
    };
    let gone = StackObject {
        path: b.dir.join("no-such-binary"),
        build_id: real.build_id.clone(),
    };
    let unverified = StackObject {
        build_id: None,
        ..real.clone()
    };
    let symbols = Symbols::resolve([
        (&changed, address),
        (&gone, address),
        (&unverified, address),
    ]);
    assert_eq!(
        symbols.status(&changed),
        Some(&ObjectStatus::Changed {
            found: real.build_id.clone()
        })
    );
    assert!(symbols.frames(&changed, address).is_empty());
    assert_eq!(
        symbols.status(&gone),
        Some(&ObjectStatus::Missing("not found".into()))
    );
    // Without a recorded build id there is nothing to check against: used as it is.
    assert_eq!(symbols.status(&unverified), Some(&ObjectStatus::Unverified));
    assert_eq!(symbols.frames(&unverified, address)[0].function, "decode");
    // Only the usable object's address went to the symbolizer.
    assert_eq!(symbols.addresses_looked_up(), 1);

    let mut profile = call_tree_profile(&b.call_tree);
    profile.stacks.as_mut().unwrap().objects[0] = changed.clone();
    let (profiles, _) = stack_profile::resolve(&[profile], &ScopeChoice::Process);
    assert_eq!(
        profiles[0].problems,
        [format!(
            "{} changed since the run (build id {} then, {} now); its frames are shown as \
             object+address",
            b.call_tree.display(),
            changed.build_id.as_deref().unwrap(),
            real.build_id.as_deref().unwrap()
        )]
    );
    assert_eq!(
        profiles[0].stacks[0].frames[0].logical[0].function,
        format!("call_tree+{:#x}", address - 1)
    );
}

#[test]
fn each_distinct_address_is_symbolized_once() {
    let b = built();
    let profile = call_tree_profile(&b.call_tree);
    let stacks = profile.stacks.as_ref().unwrap();
    // Both stacks start at the same return address in decode: 6 frames, 5 addresses.
    let wanted: Vec<(&StackObject, u64)> = stacks
        .stacks
        .iter()
        .flat_map(|s| s.frames.iter())
        .map(|f| (&stacks.objects[0], f.address))
        .collect();
    assert_eq!(wanted.len(), 6);
    let symbols = Symbols::resolve(wanted.iter().copied());
    assert_eq!(symbols.addresses_looked_up(), 5);
    // Two processes with the same object share the lookups too.
    let mut other = profile.clone();
    other.process.pid = 4243;
    let (profiles, skipped) = stack_profile::resolve(&[profile, other], &ScopeChoice::Process);
    assert!(skipped.is_empty());
    assert_eq!(profiles.len(), 2);
    assert_eq!(profiles[0].stacks, profiles[1].stacks);
    // The first stack: decode, parse_header inlined into load, main, then [unknown].
    let names: Vec<(&str, bool)> = profiles[0].stacks[0]
        .logical()
        .map(|(_, l)| (l.function.as_str(), l.inlined))
        .collect();
    assert_eq!(
        names,
        [
            ("decode", false),
            ("parse_header", true),
            ("load", false),
            ("main", false),
            ("[unknown]", false)
        ]
    );
    assert_eq!(
        profiles[0].stacks[2].frames[0].place,
        Place::Marker(stack_profile::LOST_FRAME)
    );
}
