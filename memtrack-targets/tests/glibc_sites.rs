//! Entry-probe sites in this machine's glibc. Run with `--nocapture` to see
//! the site chosen for every allocator function.
//!
//! The expectations are those of glibc 2.36 (Debian 12) on x86_64, where they
//! were measured: `malloc` starts with an emulated `push %r12` (site 0) and
//! `free` with `test %rdi,%rdi; je` (site 3, the `je`). Other glibc builds
//! only get the generic checks.

use std::path::Path;

use memtrack_targets::{AllocFn, allocator_targets, entry_site, function_bytes};

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

#[test]
fn glibc_entry_sites() {
    let libc = Path::new(LIBC);
    if !libc.exists() {
        println!("SKIPPED: no {LIBC}");
        return;
    }
    let targets = allocator_targets(libc).unwrap();
    let mut sites = Vec::new();
    for t in &targets {
        let site = entry_site(libc, t).unwrap();
        let names: Vec<_> = t.functions().map(|f| f.symbol()).collect();
        println!(
            "{:<28} {:#08x} +{:<2} {:<8} {:<40} {}",
            names.join("="),
            t.file_offset,
            site.offset_in_function,
            if site.emulated { "emulated" } else { "stepped" },
            site.instruction,
            site.reason
        );
        // The site is an instruction boundary inside the function, and the
        // bytes there are what the site says.
        assert!(site.offset_in_function < t.symbol_size.max(1), "{site:?}");
        let code = function_bytes(libc, t, 64).unwrap();
        assert!((site.offset_in_function as usize) < code.len());
        sites.push((t.function, site));
    }

    if !is_glibc_2_36() {
        println!("not glibc 2.36: only generic checks");
        return;
    }
    let site = |f: AllocFn| {
        &sites
            .iter()
            .find(|(g, _)| *g == f)
            .unwrap_or_else(|| panic!("no target for {f}"))
            .1
    };
    let malloc = site(AllocFn::Malloc);
    assert_eq!((malloc.offset_in_function, malloc.emulated), (0, true));
    let free = site(AllocFn::Free);
    assert_eq!((free.offset_in_function, free.emulated), (3, true));
    assert!(free.instruction.starts_with("je"), "{free:?}");
}

/// Whether the running libc reports version 2.36.
fn is_glibc_2_36() -> bool {
    // SAFETY: gnu_get_libc_version returns a pointer to a static,
    // NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
    version.to_bytes() == b"2.36"
}

unsafe extern "C" {
    fn gnu_get_libc_version() -> *const std::ffi::c_char;
}
