//! The reference unwinder on real stacks: a program compiled without frame pointers
//! (`main -> a -> b -> c`, and `c` stops itself with `raise(SIGSTOP)`) runs as this
//! test's ptrace child (no root needed: a process may trace its own child); at the stop
//! its registers are read with `PTRACE_GETREGS` and its stack with
//! `process_vm_readv`, and the tables unwind it as the eBPF unwinder will. Every return
//! address must name, through the symbol tables, the expected function, in order, down
//! to `_start`, where `.eh_frame` says the stack ends.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};

use memtrack_targets::unwind::{ProcessMapping, Registers, Stack, StackEnd, UnwindCache, unwind};

/// A ptrace child, killed and reaped when dropped.
struct Traced {
    child: Child,
}

impl Traced {
    /// Starts `program` traced and lets it run until it stops with SIGSTOP.
    fn until_stopped(program: &Path) -> Traced {
        let mut command = Command::new(program);
        // SAFETY: ptrace(PTRACE_TRACEME) is async-signal-safe and touches no memory.
        unsafe {
            command.pre_exec(|| {
                if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let traced = Traced { child };
        // The exec stop, then the program's own SIGSTOP; other signals it raises are
        // delivered (ptrace stops the tracee before each).
        assert_eq!(
            traced.wait_stop(),
            libc::SIGTRAP,
            "exec stop of {}",
            program.display()
        );
        let mut deliver = 0;
        loop {
            // SAFETY: plain ptrace request on our stopped tracee.
            let rc = unsafe { libc::ptrace(libc::PTRACE_CONT, traced.pid(), 0, deliver) };
            assert_eq!(rc, 0, "PTRACE_CONT: {}", std::io::Error::last_os_error());
            match traced.wait_stop() {
                libc::SIGSTOP => return traced,
                signal => deliver = signal,
            }
        }
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Waits for the next stop and returns its signal.
    fn wait_stop(&self) -> libc::c_int {
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let rc = unsafe { libc::waitpid(self.pid(), &mut status, 0) };
        assert_eq!(
            rc,
            self.pid(),
            "waitpid: {}",
            std::io::Error::last_os_error()
        );
        assert!(
            libc::WIFSTOPPED(status),
            "child did not stop: status {status:#x}"
        );
        libc::WSTOPSIG(status)
    }

    fn registers(&self) -> Registers {
        // SAFETY: user_regs_struct is plain data; PTRACE_GETREGS fills it.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, self.pid(), 0, &mut regs) };
        assert_eq!(rc, 0, "PTRACE_GETREGS: {}", std::io::Error::last_os_error());
        Registers {
            rip: regs.rip,
            rsp: regs.rsp,
            rbp: regs.rbp,
        }
    }

    /// 8 bytes of the child's memory at `addr`.
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut value = 0u64;
        let local = libc::iovec {
            iov_base: (&raw mut value).cast(),
            iov_len: 8,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: 8,
        };
        // SAFETY: one local buffer of 8 bytes, one remote range; the kernel checks it.
        let n = unsafe { libc::process_vm_readv(self.pid(), &local, 1, &remote, 1, 0) };
        (n == 8).then_some(value)
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The function each frame is in, `file+0xvaddr` where no symbol covers it.
fn frame_names(stack: &Stack, mappings: &[ProcessMapping]) -> Vec<String> {
    stack
        .frames
        .iter()
        .map(|frame| {
            let pc = if frame.is_return_address {
                frame.pc - 1
            } else {
                frame.pc
            };
            let Some(mapping) = mappings.iter().find(|m| m.contains(pc)) else {
                return format!("[unmapped {pc:#x}]");
            };
            let path = &mapping.object.info.path;
            let vaddr = mapping.vaddr(pc);
            match common::symbol_at(&common::function_symbols(path), vaddr) {
                Some(symbol) => symbol.name.clone(),
                None => format!("{}+{vaddr:#x}", path.file_name().unwrap().to_string_lossy()),
            }
        })
        .collect()
}

/// Runs `program` to its stop and unwinds it with the tables: (frame names, how the
/// unwind ended).
fn unwind_stopped(program: &Path) -> (Vec<String>, StackEnd) {
    let traced = Traced::until_stopped(program);
    let mut cache = UnwindCache::new();
    let (mappings, skipped) = cache.process_mappings(traced.pid() as u32).unwrap();
    assert!(skipped.is_empty(), "{skipped:#?}");
    let stack = unwind(
        traced.registers(),
        &mappings,
        |addr| traced.read_u64(addr),
        64,
    );
    let names = frame_names(&stack, &mappings);
    println!("{}: {names:?}, {:?}", program.display(), stack.end);
    (names, stack.end)
}

const ABC: &str = r#"
#include <signal.h>
#include <stdio.h>
int salt;
__attribute__((noinline, noclone)) int opaque(int x) { return x ^ salt; }
__attribute__((noinline, noclone)) int c(int x) { raise(SIGSTOP); return x * 3 + 1; }
// Five values live across the call to c: b saves every callee-saved register, rbp
// among them, and keeps one of them in rbp.
__attribute__((noinline, noclone)) int b(int x) {
    int v0 = opaque(x), v1 = opaque(x + 1), v2 = opaque(x + 2), v3 = opaque(x + 3);
    int v4 = opaque(x + 4);
    int r = c(x + 1);
    return r * 5 + v0 * v1 + v2 * v3 + v4 + x;
}
// With a frame pointer, so its CFA is rbp-based: unwinding it needs the rbp that b's
// frame restores.
__attribute__((noinline, noclone, optimize("no-omit-frame-pointer"))) int a(int x) {
    int r = b(x + 2);
    return r * 7 + x;
}
int main(int argc, char **argv) {
    (void)argv;
    printf("%d\n", a(argc));
    return 0;
}
"#;

/// A frame in Debian 12's libc.so.6 that no exported symbol covers (glibc 2.36 keeps its
/// local symbols in the separate debug file): `__pthread_kill_implementation`, which
/// makes the kill system call, and `__libc_start_call_main`, which calls `main`.
const LIBC_LOCAL: &str = "libc.so.6+?";

/// The names with every `libc.so.6+0x...` written [`LIBC_LOCAL`].
fn libc_locals_hidden(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            if n.starts_with("libc.so.6+") {
                LIBC_LOCAL.to_owned()
            } else {
                n.clone()
            }
        })
        .collect()
}

#[test]
fn c_without_frame_pointers_unwinds_to_start() {
    let dir = tempfile::tempdir().unwrap();
    for (name, flags) in [
        ("abc_pie", &["-O2", "-fomit-frame-pointer"][..]),
        ("abc_nopie", &["-O2", "-fomit-frame-pointer", "-no-pie"][..]),
    ] {
        let program = common::compile(dir.path(), "gcc", name, "c", ABC, flags);
        let (names, end) = unwind_stopped(&program);
        assert_eq!(end, StackEnd::EndOfStack, "{name}: {names:?}");
        // `gsignal` is `raise` (one address, the smaller name).
        assert_eq!(
            libc_locals_hidden(&names),
            [
                LIBC_LOCAL,
                "gsignal",
                "c",
                "b",
                "a",
                "main",
                LIBC_LOCAL,
                "__libc_start_main",
                "_start"
            ],
            "{name}"
        );
    }
}

#[test]
fn static_c_unwinds_through_its_own_libc() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["-O2", "-fomit-frame-pointer", "-static"];
    let program = common::compile(dir.path(), "gcc", "abc_static", "c", ABC, &flags);
    let (names, end) = unwind_stopped(&program);
    assert_eq!(end, StackEnd::EndOfStack, "{names:?}");
    // The static binary keeps .symtab: every frame has its name.
    assert_eq!(
        names,
        [
            "__pthread_kill_implementation.constprop.0",
            "gsignal",
            "c",
            "b",
            "a",
            "main",
            "__libc_start_call_main",
            "__libc_start_main",
            "_start"
        ]
    );
}

const SIGNAL_HANDLER: &str = r#"
#include <signal.h>
#include <stdio.h>
__attribute__((noinline, noclone)) int c(int x) { raise(SIGSTOP); return x * 3 + 1; }
int result;
__attribute__((noinline, noclone)) void handler(int signal) { result = c(signal); }
__attribute__((noinline, noclone)) int b(int x) { raise(SIGUSR1); return result * 5 + x; }
__attribute__((noinline, noclone)) int a(int x) { int r = b(x + 2); return r * 7 + x; }
int main(int argc, char **argv) {
    (void)argv;
    signal(SIGUSR1, handler);
    printf("%d\n", a(argc));
    return 0;
}
"#;

#[test]
fn signal_frames_unwind_into_the_interrupted_code() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["-O2", "-fomit-frame-pointer"];
    let program = common::compile(dir.path(), "gcc", "handler", "c", SIGNAL_HANDLER, &flags);
    let (names, end) = unwind_stopped(&program);
    assert_eq!(end, StackEnd::EndOfStack, "{names:?}");
    // handler returns into __restore_rt (a local symbol), whose signal frame holds the
    // registers of the code SIGUSR1 interrupted: raise's system call, called by b.
    assert_eq!(
        libc_locals_hidden(&names),
        [
            LIBC_LOCAL,
            "gsignal",
            "c",
            "handler",
            LIBC_LOCAL,
            LIBC_LOCAL,
            "gsignal",
            "b",
            "a",
            "main",
            LIBC_LOCAL,
            "__libc_start_main",
            "_start"
        ]
    );

    let flags = ["-O2", "-fomit-frame-pointer", "-static"];
    let program = common::compile(
        dir.path(),
        "gcc",
        "handler_static",
        "c",
        SIGNAL_HANDLER,
        &flags,
    );
    let (names, end) = unwind_stopped(&program);
    assert_eq!(end, StackEnd::EndOfStack, "{names:?}");
    let kill = "__pthread_kill_implementation.constprop.0";
    // The return address into the trampoline is __restore_rt itself; the byte before
    // it, where a return address's call would be, is a nop that glibc's FDE covers
    // (the FDE begins one byte early for this) and no symbol does.
    let restore_rt = common::any_symbol_address(&program, "__restore_rt");
    let before_restore_rt = format!("handler_static+{:#x}", restore_rt - 1);
    assert_eq!(
        names,
        [
            kill,
            "gsignal",
            "c",
            "handler",
            &before_restore_rt,
            kill,
            "gsignal",
            "b",
            "a",
            "main",
            "__libc_start_call_main",
            "__libc_start_main",
            "_start"
        ]
    );
}

const STREAMBUF: &str = r#"
#include <csignal>
#include <cstdio>
#include <ostream>
#include <streambuf>
__attribute__((noinline, noclone)) int c(int x) { std::raise(SIGSTOP); return x * 3 + 1; }
__attribute__((noinline, noclone)) int b(int x) { int r = c(x + 1); return r * 5 + x; }
int result;
// std::ostream::flush (compiled into libstdc++.so.6) calls this back: the stack
// crosses libstdc++.
struct Buf : std::streambuf {
    int x;
    int sync() override { result = b(x + 2); return 0; }
};
__attribute__((noinline, noclone)) int a(int x) {
    Buf buf;
    buf.x = x;
    std::ostream out(&buf);
    out.flush();
    return result * 7 + x;
}
int main(int argc, char **) {
    std::printf("%d\n", a(argc));
    return 0;
}
"#;

#[test]
fn cxx_unwinds_through_libstdcxx() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["-O2", "-fomit-frame-pointer"];
    let program = common::compile(dir.path(), "g++", "streambuf", "cc", STREAMBUF, &flags);
    let (names, end) = unwind_stopped(&program);
    assert_eq!(end, StackEnd::EndOfStack, "{names:?}");
    assert_eq!(
        libc_locals_hidden(&names),
        [
            LIBC_LOCAL,
            "gsignal",
            "_Z1ci",
            "_Z1bi",
            "_ZN3Buf4syncEv",
            "_ZNSo5flushEv",
            "_Z1ai",
            "main",
            LIBC_LOCAL,
            "__libc_start_main",
            "_start"
        ]
    );
}

const RUST_ABC: &str = r#"
use std::hint::black_box;
extern "C" {
    fn raise(signal: i32) -> i32;
}
#[inline(never)]
fn c(x: u64) -> u64 {
    unsafe { raise(19) }; // SIGSTOP
    black_box(x) * 3 + 1
}
#[inline(never)]
fn b(x: u64) -> u64 {
    black_box(c(x + 1)) * 5 + x
}
#[inline(never)]
fn a(x: u64) -> u64 {
    black_box(b(x + 2)) * 7 + x
}
fn main() {
    println!("{}", a(std::env::args().count() as u64));
}
"#;

/// Rust's legacy mangling of `prog::NAME` without the hash.
fn rust_fn(mangled: &str) -> Option<&str> {
    let rest = mangled.strip_prefix("_ZN4prog")?;
    let (len, rest) = rest.split_at(rest.find(|c: char| !c.is_ascii_digit())?);
    let len: usize = len.parse().ok()?;
    rest.get(..len).filter(|_| rest[len..].starts_with("17h"))
}

#[test]
fn rust_release_binary_unwinds_to_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("prog.rs"), RUST_ABC).unwrap();
    common::run(
        dir.path(),
        "rustc",
        &[
            "--edition=2021",
            "-C",
            "opt-level=3",
            "-C",
            "force-frame-pointers=no",
            "-o",
            "prog",
            "prog.rs",
        ],
    );
    let program = dir.path().join("prog");
    let object = memtrack_targets::unwind::read_object(&program).unwrap();
    println!(
        "{}: {} rows ({} bytes), built in {:?}, {:?}",
        program.display(),
        object.table.rows().len(),
        object.table.size_bytes(),
        object.table.stats().build_time,
        object.table.stats()
    );
    let (names, end) = unwind_stopped(&program);
    assert_eq!(end, StackEnd::EndOfStack, "{names:?}");
    let shown: Vec<String> = names
        .iter()
        .map(|n| rust_fn(n).map_or_else(|| n.clone(), |f| format!("prog::{f}")))
        .collect();
    assert_eq!(
        libc_locals_hidden(&shown[..6]),
        [
            LIBC_LOCAL,
            "gsignal",
            "prog::c",
            "prog::b",
            "prog::a",
            "prog::main"
        ]
    );
    // Between the program's main and the C main rustc generates: std's runtime start.
    let c_main = shown.iter().position(|n| n == "main").expect("the C main");
    assert!(
        shown[6..c_main]
            .iter()
            .any(|n| n.contains("lang_start_internal")),
        "{shown:?}"
    );
    assert_eq!(
        libc_locals_hidden(&shown[c_main..]),
        ["main", LIBC_LOCAL, "__libc_start_main", "_start"]
    );
}

#[test]
fn tables_are_shared_by_file_and_by_build_id() {
    let dir = tempfile::tempdir().unwrap();
    let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let copy = dir.path().join("libc-copy.so.6");
    std::fs::copy(libc, &copy).unwrap();
    let mut cache = UnwindCache::new();
    let key = memtrack_targets::unwind::FileKey::of_path(libc).unwrap();
    let first = cache.get_or_build(key, libc).unwrap();
    let again = cache.get_or_build(key, libc).unwrap();
    let copy_key = memtrack_targets::unwind::FileKey::of_path(&copy).unwrap();
    assert_ne!(key, copy_key);
    let copied = cache.get_or_build(copy_key, &copy).unwrap();
    assert!(std::sync::Arc::ptr_eq(&first, &again));
    assert!(
        std::sync::Arc::ptr_eq(&first, &copied),
        "same build id, one table"
    );
    assert_eq!((cache.files(), cache.tables_built()), (2, 1));
    cache.remove(copy_key);
    assert!(cache.get(copy_key).is_none() && cache.get(key).is_some());
    assert_eq!(cache.files(), 1);

    // This very process: its libc mapping's bias turns malloc's runtime address into
    // its symbol's st_value.
    let (mappings, _) = cache.process_mappings(std::process::id()).unwrap();
    let malloc = libc::malloc as *const () as u64;
    let mapping = mappings
        .iter()
        .find(|m| m.contains(malloc))
        .expect("a mapping holds malloc");
    let symbols = common::function_symbols(&mapping.object.info.path);
    assert_eq!(
        mapping.vaddr(malloc),
        common::address_of(&symbols, "malloc")
    );
    let mut objects: Vec<*const _> = mappings
        .iter()
        .map(|m| std::sync::Arc::as_ptr(&m.object))
        .collect();
    objects.sort();
    objects.dedup();
    assert!(objects.contains(&std::sync::Arc::as_ptr(&first)));
    assert_eq!(
        cache.tables_built(),
        objects.len() as u64,
        "libc's table was not built again"
    );
}
