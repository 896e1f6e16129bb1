//! Helpers shared by memtrack's own test suites (memtrack-core, the examples, the
//! integrations), so every suite builds fixtures and runs things as user `nobody` the
//! same way. Tests that need eBPF are marked `#[ignore = "needs root (eBPF): ..."]`:
//! cargo lists them as ignored where they cannot run, and `scripts/test.sh` runs them
//! all as root (`cargo test -- --include-ignored`).

mod fixtures;
mod scratch;
mod stepped;

pub use fixtures::{check_single_fixture, diff, expected, fixture};
pub use scratch::scratch_dir;
pub use stepped::{Stepped, program, run_stepped};

use std::{
    io::Write,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

/// Whether this test process runs as root (tests that switch to user `nobody` need it).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The repository's root directory.
pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support lives in the workspace root")
        .to_path_buf()
}

/// tests/fixtures in the repository.
pub fn fixtures_dir() -> PathBuf {
    repo_dir().join("tests/fixtures")
}

/// Compiles one C source with gcc into `out_dir` (named after the source) with the
/// fixtures' flags (`-O0 -fno-builtin -pthread`: gcc must not remove or merge
/// allocator calls) plus `extra`, and returns the binary's path.
pub fn compile_c(source: &Path, out_dir: &Path, extra: &[&str]) -> PathBuf {
    let out = out_dir.join(source.file_stem().expect("a source file name"));
    let status = Command::new("gcc")
        .args(["-O0", "-fno-builtin", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(source)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "compiling {} failed", source.display());
    out
}

/// `bin` as user `nobody` with no capabilities (`setpriv`; this process must be root).
pub fn as_nobody(bin: &Path) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(bin);
    command
}

/// Gate for tests that run something without memtrack's privileges ([`unprivileged`]):
/// impossible for a process that has CAP_BPF/CAP_PERFMON but is not root (it can neither
/// drop them for a child nor become `nobody`), which says so and gets false.
pub fn can_run_unprivileged(test: &str) -> bool {
    if is_root() || !memtrack::can_track() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: has CAP_BPF/CAP_PERFMON but is not root, so cannot become user \
         nobody"
    );
    false
}

/// `bin` without memtrack's privileges: [`as_nobody`] when this process is root, else
/// `bin` itself (this process then has none to pass on).
pub fn unprivileged(bin: &Path) -> Command {
    if is_root() {
        as_nobody(bin)
    } else {
        Command::new(bin)
    }
}

/// Copies `bin` into `dir` so that user `nobody` can run it (the build directory may not
/// be reachable for other users): the directory and the copy get mode 0755.
pub fn copy_for_nobody(bin: &Path, dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join(bin.file_name().expect("a binary file name"));
    std::fs::copy(bin, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// Builds, in `dir`, a static 32-bit (i386) program that only exits with `code`, with
/// binutils (`as --32`, `ld -m elf_i386`; no 32-bit C library needed). Returns its path.
pub fn i386_exit_program(dir: &Path, code: u8) -> PathBuf {
    let source = dir.join("exit32.s");
    std::fs::write(
        &source,
        format!(
            ".globl _start\n_start:\n    movl $1, %eax\n    movl ${code}, %ebx\n    int $0x80\n"
        ),
    )
    .unwrap();
    let object = dir.join("exit32.o");
    let program = dir.join("exit32");
    for (tool, args) in [
        (
            "as",
            vec![
                "--32".as_ref(),
                "-o".as_ref(),
                object.as_os_str(),
                source.as_os_str(),
            ],
        ),
        (
            "ld",
            vec![
                "-m".as_ref(),
                "elf_i386".as_ref(),
                "-o".as_ref(),
                program.as_os_str(),
                object.as_os_str(),
            ],
        ),
    ] {
        let status = Command::new(tool)
            .args(&args)
            .status()
            .expect("binutils run");
        assert!(status.success(), "{tool} {args:?} failed");
    }
    program
}

/// A stack's (or a scope's total) counters as (alloc blocks, alloc bytes, freed blocks,
/// freed bytes, live blocks, live bytes, at-peak blocks, at-peak bytes), to compare with
/// [`stats_flows`] of the counters they must add up to.
pub fn stack_flows(c: &memtrack::stacks::StackCounts) -> [u64; 8] {
    [
        c.alloc_blocks,
        c.alloc_bytes,
        c.freed_blocks,
        c.freed_bytes,
        c.live_blocks,
        c.live_bytes,
        c.at_peak_blocks,
        c.at_peak_bytes,
    ]
}

/// The same of a process's or benchmark's counters. `Stats` has no blocks at peak:
/// `at_peak_blocks` fills that place (the stacks' own, or a known value).
pub fn stats_flows(s: &memtrack::Stats, at_peak_blocks: u64) -> [u64; 8] {
    [
        s.alloc_calls,
        s.bytes_allocated,
        s.free_calls,
        s.bytes_freed,
        s.live_blocks,
        s.live_bytes,
        at_peak_blocks,
        s.peak_live_bytes,
    ]
}

/// The function names of the frames of program point `pp` in DHAT JSON file `file`
/// (valgrind's or memtrack's export), innermost first: each frame's `ftbl` entry
/// `"0x1091C8: decode (a.c:4)"` gives `decode`.
pub fn dhat_function_names(file: &serde_json::Value, pp: &serde_json::Value) -> Vec<String> {
    let ftbl = file["ftbl"].as_array().unwrap();
    pp["fs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let frame = ftbl[i.as_u64().unwrap() as usize].as_str().unwrap();
            let name = frame.split_once(": ").map_or(frame, |(_, rest)| rest);
            name.split(" (").next().unwrap().to_string()
        })
        .collect()
}
