//! Tests on small programs and libraries compiled with `gcc` at test time: a
//! static binary (stripped and not), a library with two versions of `malloc`,
//! and a process with two objects that define `malloc`.
//!
//! A test whose toolchain piece is missing (no `gcc`, no static libc) prints
//! why and passes.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use memtrack_targets::{AllocFn, Error, allocator_targets, function_bytes, process_targets};

/// Says it is running (once `main` runs, the dynamic loader has mapped every
/// library) by writing one byte to stdout, then waits on stdin, so that the
/// test controls how long it lives.
const WAIT_ON_STDIN: &str = r#"
#include <stdlib.h>
#include <unistd.h>
int main(void) {
    char c;
    void *p = malloc(10);
    free(p);
    if (write(1, "r", 1) != 1)
        return 1;
    return read(0, &c, 1) < 0;
}
"#;

/// Runs `gcc args...` in `dir`; the error is gcc's stderr.
fn gcc(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("gcc")
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run gcc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Writes `source` to `dir/name` and compiles it with `args` (after the
/// source file name, so that libraries in `args` resolve its symbols).
fn compile(dir: &Path, name: &str, source: &str, args: &[&str]) -> Result<(), String> {
    std::fs::write(dir.join(name), source).unwrap();
    let mut all: Vec<&str> = vec![name];
    all.extend_from_slice(args);
    gcc(dir, &all)
}

/// A child process that is killed and reaped when dropped.
struct Running {
    child: Child,
}

impl Running {
    /// Starts `program` and waits until its `main` runs.
    fn start(program: &Path) -> Self {
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let mut ready = [0u8; 1];
        child
            .stdout
            .take()
            .unwrap()
            .read_exact(&mut ready)
            .unwrap_or_else(|e| panic!("{} did not start: {e}", program.display()));
        Running { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"x");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Compiles a static binary, or says why it cannot.
fn static_binary(dir: &Path, name: &str, extra: &[&str]) -> Option<PathBuf> {
    let mut args = vec!["-O1", "-static", "-o", name];
    args.extend_from_slice(extra);
    match compile(dir, &format!("{name}.c"), WAIT_ON_STDIN, &args) {
        Ok(()) => Some(dir.join(name)),
        Err(e) => {
            println!("SKIPPED: `gcc -static` does not work here (no static libc?): {e}");
            None
        }
    }
}

#[test]
fn stripped_static_binary_has_no_allocator() {
    let dir = tempfile::tempdir().unwrap();
    let Some(program) = static_binary(dir.path(), "stripped", &["-s"]) else {
        return;
    };
    assert!(allocator_targets(&program).unwrap().is_empty());

    let running = Running::start(&program);
    let err = process_targets(running.pid()).unwrap_err();
    match &err {
        Error::NoAllocator {
            pid,
            objects_scanned,
        } => {
            assert_eq!(*pid, running.pid());
            assert_eq!(objects_scanned, &vec![program.clone()], "{err}");
        }
        other => panic!("expected NoAllocator, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(&running.pid().to_string()), "{message}");
    assert!(message.contains("stripped"), "{message}");
}

#[test]
fn unstripped_static_binary_defines_malloc_in_symtab() {
    let dir = tempfile::tempdir().unwrap();
    let Some(program) = static_binary(dir.path(), "unstripped", &["-no-pie"]) else {
        return;
    };
    let targets = allocator_targets(&program).unwrap();
    let malloc = targets
        .iter()
        .find(|t| t.covers(AllocFn::Malloc))
        .unwrap_or_else(|| panic!("no malloc in {targets:#?}"));
    assert_eq!(malloc.symbol_version, None, "{malloc:?}");
    // A non-PIE executable is linked at 0x400000: address and file offset
    // differ, so the PT_LOAD translation is exercised.
    assert_ne!(malloc.file_offset, malloc.symbol_address, "{malloc:?}");

    // The bytes at the file offset are the bytes at the address, read
    // independently through the section table.
    use object::{Object, ObjectSection};
    let data = std::fs::read(&program).unwrap();
    let file = object::File::parse(&*data).unwrap();
    for t in &targets {
        let section = file
            .sections()
            .find(|s| s.address() <= t.symbol_address && t.symbol_address < s.address() + s.size())
            .unwrap();
        let start = (t.symbol_address - section.address()) as usize;
        let want = &section.data().unwrap()[start..][..16];
        assert_eq!(function_bytes(&program, t, 16).unwrap(), want, "{t:?}");
    }

    let running = Running::start(&program);
    let found = process_targets(running.pid()).unwrap();
    assert_eq!(found.objects_scanned, vec![program.clone()]);
    assert!(
        found.targets_for(AllocFn::Malloc).count() == 1,
        "{found:#?}"
    );
}

const TWO_VERSIONS_OLD_FIRST: &str = r#"
#include <stddef.h>
void *old_malloc(size_t n) { (void)n; return NULL; }
void *new_malloc(size_t n) { (void)n; return (void *)16; }
__asm__(".symver old_malloc, malloc@VER_1");
__asm__(".symver new_malloc, malloc@@VER_2");
"#;

const TWO_VERSIONS_NEW_FIRST: &str = r#"
#include <stddef.h>
void *new_malloc(size_t n) { (void)n; return (void *)16; }
void *old_malloc(size_t n) { (void)n; return NULL; }
__asm__(".symver new_malloc, malloc@@VER_2");
__asm__(".symver old_malloc, malloc@VER_1");
"#;

#[test]
fn default_symbol_version_wins_over_compat_version() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("v.map"),
        "VER_1 { };\nVER_2 { local: old_malloc; new_malloc; } VER_1;\n",
    )
    .unwrap();
    for (i, source) in [TWO_VERSIONS_OLD_FIRST, TWO_VERSIONS_NEW_FIRST]
        .into_iter()
        .enumerate()
    {
        let lib = format!("libv{i}.so");
        if let Err(e) = compile(
            dir.path(),
            &format!("v{i}.c"),
            source,
            &["-shared", "-fPIC", "-Wl,--version-script=v.map", "-o", &lib],
        ) {
            println!("SKIPPED: cannot build a versioned library: {e}");
            return;
        }
        let lib = dir.path().join(lib);

        // Where the two versions are, independently from the .symtab names.
        use object::{Object, ObjectSymbol};
        let data = std::fs::read(&lib).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let address_of = |name: &str| {
            file.symbols()
                .find(|s| s.name() == Ok(name))
                .unwrap_or_else(|| panic!("{name} in {}", lib.display()))
                .address()
        };
        let new = address_of("new_malloc");
        let old = address_of("old_malloc");
        assert_ne!(new, old);

        let targets = allocator_targets(&lib).unwrap();
        assert_eq!(targets.len(), 1, "{targets:#?}");
        let malloc = &targets[0];
        assert_eq!(malloc.function, AllocFn::Malloc);
        assert_eq!(malloc.symbol_address, new, "{malloc:#?}");
        assert_eq!(malloc.symbol_version.as_deref(), Some("VER_2"));
    }
}

const FORWARDING_MALLOC: &str = r#"
#include <stddef.h>
extern void *__libc_malloc(size_t);
void *malloc(size_t n) { return __libc_malloc(n); }
"#;

#[test]
fn every_object_defining_malloc_is_a_target() {
    let dir = tempfile::tempdir().unwrap();
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    let built = compile(
        dir.path(),
        "mymalloc.c",
        FORWARDING_MALLOC,
        &["-shared", "-fPIC", "-o", "libmymalloc.so"],
    )
    .and_then(|()| {
        compile(
            dir.path(),
            "prog.c",
            WAIT_ON_STDIN,
            &["-o", "prog", "-L.", "-lmymalloc", &rpath],
        )
    });
    if let Err(e) = built {
        println!("SKIPPED: cannot build the two-allocator program: {e}");
        return;
    }
    let running = Running::start(&dir.path().join("prog"));
    let found = process_targets(running.pid()).unwrap();
    let objects: Vec<String> = found
        .targets_for(AllocFn::Malloc)
        .map(|t| t.object.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(objects.iter().any(|o| o == "libmymalloc.so"), "{objects:?}");
    assert!(
        objects.iter().any(|o| o.starts_with("libc.so")),
        "{objects:?}"
    );
    // libmymalloc.so defines nothing else.
    let mine: Vec<_> = found
        .targets
        .iter()
        .filter(|t| t.object.ends_with("libmymalloc.so"))
        .collect();
    assert_eq!(mine.len(), 1, "{mine:#?}");
}
