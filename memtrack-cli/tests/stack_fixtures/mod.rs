//! The programs of tests/stacks, built once per test binary, and what binutils says
//! about them (independent of the code under test): where a call returns to (objdump),
//! the build id (readelf), what a call site symbolizes to (addr2line), and the line of
//! each marked call site in the sources. Plus a profile made of real return addresses of
//! tests/stacks/call_tree.c with the counts valgrind DHAT reports for it.

#![allow(dead_code)] // each test binary uses its own part

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use memtrack::{
    AllocatorStatus, Stats, TrackedProcess,
    stacks::{
        Frame, ProcessStacks, ScopeStacks, Stack, StackCounts, StackEnd, StackEntry, StackObject,
    },
};
use memtrack_report::stack_profile::LoadedProcess;

/// tests/stacks.
pub fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("tests/stacks")
}

/// The built programs.
pub struct Built {
    pub dir: PathBuf,
    /// call_tree.c, -O2 -g -fomit-frame-pointer.
    pub call_tree: PathBuf,
    /// The same, with every symbol and all debug information stripped.
    pub call_tree_stripped: PathBuf,
    /// codec.cpp, -O2 -g -fomit-frame-pointer.
    pub codec: PathBuf,
    /// decode.rs, rustc -O -g with the v0 symbol mangling.
    pub decode_v0: PathBuf,
    /// decode.rs, rustc -O -g with the default (legacy) mangling.
    pub decode_legacy: PathBuf,
}

fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Builds every program once (into a temporary directory kept until the test binary
/// exits: `memtrack_test_support::scratch_dir`).
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = memtrack_test_support::scratch_dir("memtrack-stacks-");
        let src = sources();
        let flags = ["-O2", "-g", "-fomit-frame-pointer"];
        let call_tree = dir.join("call_tree");
        run(Command::new("gcc")
            .args(flags)
            .arg("-o")
            .arg(&call_tree)
            .arg(src.join("call_tree.c")));
        let call_tree_stripped = dir.join("call_tree_stripped");
        run(Command::new("objcopy")
            .arg("--strip-all")
            .arg(&call_tree)
            .arg(&call_tree_stripped));
        let codec = dir.join("codec");
        run(Command::new("g++")
            .args(flags)
            .arg("-o")
            .arg(&codec)
            .arg(src.join("codec.cpp")));
        let rust = |out: &Path, mangling: &[&str]| {
            run(Command::new("rustc")
                .args(["-O", "-g", "--crate-name", "fixture"])
                .args(mangling)
                .arg("-o")
                .arg(out)
                .arg(src.join("decode.rs")));
        };
        let decode_v0 = dir.join("decode_v0");
        rust(&decode_v0, &["-C", "symbol-mangling-version=v0"]);
        let decode_legacy = dir.join("decode_legacy");
        rust(&decode_legacy, &[]);
        Built {
            dir,
            call_tree,
            call_tree_stripped,
            codec,
            decode_v0,
            decode_legacy,
        }
    })
}

/// The return address of the first call in `function` (its symbol, as objdump labels
/// it) whose target mentions `callee`: the address of the instruction after the call.
pub fn return_address(binary: &Path, function: &str, callee: &str) -> u64 {
    let listing = run(Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(binary));
    let label = format!("<{function}>:");
    let body: Vec<&str> = listing
        .lines()
        .skip_while(|l| !l.ends_with(&label))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(
        !body.is_empty(),
        "no function {function} in {}",
        binary.display()
    );
    let call = body
        .iter()
        .position(|l| l.contains("call") && l.contains(callee))
        .unwrap_or_else(|| panic!("{function} has no call to {callee}: {body:#?}"));
    let next = body[call + 1];
    u64::from_str_radix(next.split(':').next().unwrap().trim(), 16).unwrap()
}

/// The GNU build id of `binary` (readelf), lowercase hex.
pub fn build_id(binary: &Path) -> Option<String> {
    let notes = run(Command::new("readelf").arg("-n").arg(binary));
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .map(str::to_string)
}

/// What `addr2line -f -i -C` says about `address`: (function, file name, line) per
/// logical frame, innermost first.
pub fn addr2line(binary: &Path, address: u64) -> Vec<(String, String, Option<u32>)> {
    let out = run(Command::new("addr2line")
        .args(["-f", "-i", "-C", "-e"])
        .arg(binary)
        .arg(format!("{address:#x}")));
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .map(|pair| {
            // "path/file.c:12" or "path/file.c:12 (discriminator 1)" or "??:?"
            let place = pair[1].split(" (").next().unwrap();
            let (file, line) = place.rsplit_once(':').unwrap();
            let file = Path::new(file)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (pair[0].to_string(), file, line.parse().ok())
        })
        .collect()
}

/// The line of the call site marked `site: {what}` in `source` (a tests/stacks file).
pub fn site_line(source: &str, what: &str) -> u32 {
    let text = std::fs::read_to_string(sources().join(source)).unwrap();
    let marker = format!("site: {what}");
    let matches: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            // The whole marker: "main calls load" is not "main calls load_other".
            l.match_indices(&marker).any(|(at, _)| {
                !l[at + marker.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
        })
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        matches.len(),
        1,
        "{source} must mark `{marker}` exactly once"
    );
    matches[0] as u32
}

/// The object of `binary` as the kernel side records it.
pub fn object(binary: &Path) -> StackObject {
    StackObject {
        path: binary.to_path_buf(),
        build_id: build_id(binary),
    }
}

/// The two stacks of call_tree.c, innermost first: through load (parse_header inlined)
/// and through load_other. Each ends at main's caller in libc, which the test leaves
/// out: the stack ends [unknown] after main in the first, complete in the second.
pub fn call_tree_stacks(binary: &Path) -> [Vec<u64>; 2] {
    let decode = return_address(binary, "decode", "malloc");
    [
        vec![
            decode,
            return_address(binary, "load", "<decode>"),
            return_address(binary, "main", "<load>"),
        ],
        vec![
            decode,
            return_address(binary, "load_other", "<decode>"),
            return_address(binary, "main", "<load_other>"),
        ],
    ]
}

/// A profile of call_tree (`binary`) with valgrind DHAT's numbers for it: 10 blocks of
/// 116 bytes through load (9 freed; the peak of 216 bytes has one of them and one of
/// load_other's), 3 of 100 bytes through load_other (all freed), and 2 lost blocks of
/// 8 bytes (1 live at the end). Times: start 1 ms, peak 3 ms, end 10 ms (monotonic);
/// on the allocation clock, the peak after 532 of the 1,476 bytes allocated.
pub fn call_tree_profile(binary: &Path) -> LoadedProcess {
    let [first, second] = call_tree_stacks(binary);
    let frames = |addresses: &[u64]| {
        addresses
            .iter()
            .map(|&address| Frame::returning_to(Some(0), address))
            .collect()
    };
    let stacks = ProcessStacks {
        depth_limit: 64,
        objects: vec![object(binary)],
        stacks: vec![
            Stack {
                frames: frames(&first),
                end: StackEnd::Unknown,
            },
            Stack {
                frames: frames(&second),
                end: StackEnd::Complete,
            },
        ],
        process: ScopeStacks {
            start_ns: 1_000_000,
            end_ns: 10_000_000,
            peak_ns: Some(3_000_000),
            peak_bytes_allocated: Some(532),
            bytes_allocated: Some(1476),
            entries: vec![
                StackEntry {
                    stack: 0,
                    counts: StackCounts {
                        alloc_blocks: 10,
                        alloc_bytes: 1160,
                        freed_blocks: 9,
                        freed_bytes: 1044,
                        live_blocks: 1,
                        live_bytes: 116,
                        at_peak_blocks: 1,
                        at_peak_bytes: 116,
                        max_live_bytes: 116,
                        max_live_blocks: 1,
                        total_lifetime: Some(2_500),
                    },
                },
                StackEntry {
                    stack: 1,
                    counts: StackCounts {
                        alloc_blocks: 3,
                        alloc_bytes: 300,
                        freed_blocks: 3,
                        freed_bytes: 300,
                        live_blocks: 0,
                        live_bytes: 0,
                        at_peak_blocks: 1,
                        at_peak_bytes: 100,
                        max_live_bytes: 100,
                        max_live_blocks: 1,
                        total_lifetime: Some(400),
                    },
                },
            ],
            lost: StackCounts {
                alloc_blocks: 2,
                alloc_bytes: 16,
                freed_blocks: 1,
                freed_bytes: 8,
                live_blocks: 1,
                live_bytes: 8,
                ..StackCounts::default()
            },
        },
        regions: vec![],
        earlier_images: vec![],
    };
    let mut stats = Stats::default();
    stats.alloc_calls = 15;
    stats.free_calls = 13;
    stats.bytes_allocated = 1476;
    stats.bytes_freed = 1352;
    stats.live_blocks = 2;
    stats.live_bytes = 124;
    stats.peak_live_bytes = 216;
    stats.peak_time_ns = 3_000_000;
    LoadedProcess {
        process: process(4242, &["./call_tree"], stats),
        stacks: Some(stacks),
    }
}

/// The record of an exited process.
pub fn process(pid: u32, command: &[&str], stats: Stats) -> TrackedProcess {
    let mut p = TrackedProcess::new(pid, 1, command.iter().map(|s| s.to_string()).collect());
    p.started_ns = 1_000_000;
    p.started_unix_ms = 1_700_000_000_000;
    p.ended_ns = Some(10_000_000);
    p.exit_code = Some(0);
    p.allocator = AllocatorStatus::Probed;
    p.stats = stats;
    p
}
