//! `memtrack run --stacks` end to end: tests/stacks/call_tree.c (built at -O2 without
//! frame pointers) runs under the runner with stacks on; its stacks file is read back by
//! `memtrack report --stacks` and exported as valgrind DHAT's JSON, and every per-stack
//! number is checked against the program's known allocations and against the process's
//! counters in its result file. tests/stacks/deep.c (a recursion of a chosen depth)
//! checks the depth limit: a stack within it is whole, one deeper is cut at exactly the
//! limit, marked truncated and counted, in the file and in what `run` says (benchmark
//! regions: run_stacks_regions.rs).

mod stack_fixtures;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use memtrack::stacks::ProcessStacks;
use memtrack::{
    MemtrackResult,
    stacks::{StackEnd, stacks_file_name},
};
use memtrack_test_support::dhat_function_names;
use serde_json::Value;
use stack_fixtures::{site_line, sources};

fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

/// Builds tests/stacks/`source` with gcc as the stacks fixtures are built.
fn build(dir: &Path, source: &str) -> PathBuf {
    let out = dir.join(source.trim_end_matches(".c"));
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&out)
        .arg(sources().join(source))
        .status()
        .expect("gcc runs");
    assert!(status.success(), "compiling {source} failed");
    out
}

fn output(command: &mut Command) -> (Output, String, String) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// Runs `exe` under `memtrack run -o DIR --stacks`, returning DIR's path, the pid of the
/// program (its only result) and what memtrack said on stderr.
fn run_with_stacks(dir: &Path, exe: &Path) -> (PathBuf, u32, String) {
    let results = dir.join("results");
    let (pid, stderr) = run_into(&results, &["--stacks"], exe, &[]);
    (results, pid, stderr)
}

/// Runs `memtrack run FLAGS -o RESULTS -- EXE ARGS`, checks that it succeeded with one
/// result, and returns the program's pid and what memtrack said on stderr.
fn run_into(results: &Path, flags: &[&str], exe: &Path, args: &[&str]) -> (u32, String) {
    let (out, _, stderr) = output(
        memtrack()
            .arg("run")
            .args(flags)
            .arg("-o")
            .arg(results)
            .arg("--")
            .arg(exe)
            .args(args),
    );
    assert!(out.status.success(), "memtrack run failed: {stderr}");
    let read = MemtrackResult::read_dir(results).unwrap();
    assert_eq!(read.len(), 1, "{read:#?}");
    (read[0].process.pid, stderr)
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn run_stacks_report_and_dhat_export_have_the_exact_per_stack_counts() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "call_tree.c");
    let (results, pid, stderr) = run_with_stacks(dir.path(), &exe);
    let said = format!(
        "memtrack: stacks of process {pid}: 2 stacks (depth limit 64) in \
         {pid}.MemtrackStacks.msgpack; blocks with an incomplete stack: 0 cut at the depth \
         limit, 0 at a frame without unwind information, 0 lost (stack map full, or the \
         walk cut short)\n"
    );
    assert!(stderr.contains(&said), "{said:?} not in {stderr}");

    // The stacks file, written through the results directory's handle, as results are.
    let stacks = ProcessStacks::read_from(&results.join(stacks_file_name(pid))).unwrap();
    assert_eq!(stacks.depth_limit, 64);
    assert_eq!(stacks.stacks.len(), 2);
    assert!(stacks.stacks.iter().all(|s| s.end == StackEnd::Complete));
    let result = &MemtrackResult::read_dir(&results).unwrap()[0].process;
    let total = stacks.process.total();
    let stats = &result.stats;
    assert_eq!(
        (
            total.alloc_blocks,
            total.alloc_bytes,
            total.freed_blocks,
            total.freed_bytes,
            total.live_blocks,
            total.live_bytes,
            total.at_peak_bytes,
        ),
        (13, 1460, 12, 1344, 1, 116, 216)
    );
    assert_eq!(
        (
            stats.alloc_calls,
            stats.bytes_allocated,
            stats.free_calls,
            stats.bytes_freed,
            stats.live_blocks,
            stats.live_bytes,
            stats.peak_live_bytes,
        ),
        (13, 1460, 12, 1344, 1, 116, 216)
    );
    assert_eq!(stacks.process.start_ns, result.started_ns);
    assert_eq!(Some(stacks.process.end_ns), result.ended_ns);

    // memtrack report --stacks, with the DHAT export.
    let dhat_path = dir.path().join("call_tree.dhat.json");
    let (out, report, stderr) = output(
        memtrack()
            .args(["report", "--stacks"])
            .arg(&results)
            .arg("--dhat")
            .arg(&dhat_path),
    );
    assert!(
        out.status.success(),
        "memtrack report --stacks failed: {stderr}"
    );
    let decode = site_line("call_tree.c", "decode calls malloc");
    let header = site_line("call_tree.c", "parse_header calls decode");
    let other = site_line("call_tree.c", "load_other calls decode");
    for line in [
        "  2 stacks (depth limit 64): allocated 1.4 KiB (1,460 B) in 13 blocks; at peak \
         216 B in 2 blocks"
            .to_string(),
        "  the stacks add up exactly to the counters".to_string(),
        "    1.  79.5%  allocated 1.1 KiB (1,160 B) in 10 blocks, at peak 116 B in 1 block, \
         live at end 116 B in 1 block"
            .to_string(),
        format!("         decode (call_tree.c:{decode})"),
        format!("         parse_header (call_tree.c:{header}) [inlined]"),
        // The shortest distinguishing frames first, then the callers' names.
        "         + 5 outer frames: load < main < ".to_string(),
        "    2.  20.5%  allocated 300 B in 3 blocks, at peak 100 B in 1 block, live at end \
         0 B in 0 blocks"
            .to_string(),
        format!("         load_other (call_tree.c:{other})"),
        "         + 4 outer frames: main < ".to_string(),
    ] {
        assert!(report.contains(&line), "{line:?} not in\n{report}");
    }
    assert!(!report.contains("MISMATCH"), "{report}");

    let file: Value = serde_json::from_slice(&std::fs::read(&dhat_path).unwrap()).unwrap();
    let mut pps: Vec<(Vec<String>, [u64; 8])> = file["pps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pp| {
            let n = |k: &str| pp[k].as_u64().unwrap_or_else(|| panic!("{k} in {pp}"));
            let names = dhat_function_names(&file, pp);
            (
                names[..3].to_vec(),
                [
                    n("tb"),
                    n("tbk"),
                    n("mb"),
                    n("mbk"),
                    n("gb"),
                    n("gbk"),
                    n("eb"),
                    n("ebk"),
                ],
            )
        })
        .collect();
    pps.sort();
    let names = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        pps,
        vec![
            (
                names(&["decode", "load_other", "main"]),
                [300, 3, 100, 1, 100, 1, 0, 0]
            ),
            (
                names(&["decode", "parse_header", "load"]),
                [1160, 10, 116, 1, 116, 1, 116, 1]
            ),
        ]
    );
    // The program points add up to the process's counters.
    let sum = |i: usize| pps.iter().map(|(_, c)| c[i]).sum::<u64>();
    assert_eq!(
        (sum(0), sum(1), sum(4), sum(6), sum(7)),
        (
            stats.bytes_allocated,
            stats.alloc_calls,
            stats.peak_live_bytes,
            stats.live_bytes,
            stats.live_blocks
        )
    );
}

/// What one run of tests/stacks/deep.c under `memtrack run` gave.
struct DeepRun {
    pid: u32,
    /// What memtrack said on stderr.
    stderr: String,
    stacks: memtrack::stacks::ProcessStacks,
    /// `memtrack report --stacks` of the run.
    report: String,
    /// The run's DHAT export.
    dhat: Value,
}

/// Runs deep.c (built in `dir`) with a recursion `levels` deep under `memtrack run
/// <stacks_arg>` (`--stacks` or `--stacks=N`), then `memtrack report --stacks` with a
/// DHAT export.
fn run_deep(dir: &Path, stacks_arg: &str, levels: u32) -> DeepRun {
    let exe = dir.join("deep");
    if !exe.exists() {
        build(dir, "deep.c");
    }
    let results = dir.join(format!("results{stacks_arg}-{levels}"));
    let (pid, stderr) = run_into(&results, &[stacks_arg], &exe, &[&levels.to_string()]);
    let stacks = ProcessStacks::read_from(&results.join(stacks_file_name(pid))).unwrap();
    let dhat_path = dir.join(format!("deep{stacks_arg}-{levels}.dhat.json"));
    let (out, report, report_err) = output(
        memtrack()
            .args(["report", "--stacks"])
            .arg(&results)
            .arg("--dhat")
            .arg(&dhat_path),
    );
    assert!(
        out.status.success(),
        "memtrack report --stacks failed: {report_err}"
    );
    assert!(
        report.contains("  the stacks add up exactly to the counters"),
        "{report}"
    );
    let dhat = serde_json::from_slice(&std::fs::read(&dhat_path).unwrap()).unwrap();
    DeepRun {
        pid,
        stderr,
        stacks,
        report,
        dhat,
    }
}

impl DeepRun {
    /// Checks what `run` said of the stacks: one stack, the depth limit, `cut` blocks
    /// cut at it, none unknown or lost.
    fn assert_said(&self, depth_limit: u32, cut: u64) {
        let pid = self.pid;
        let said = format!(
            "memtrack: stacks of process {pid}: 1 stack (depth limit {depth_limit}) in \
             {pid}.MemtrackStacks.msgpack; blocks with an incomplete stack: {cut} cut at the \
             depth limit, 0 at a frame without unwind information, 0 lost (stack map full, \
             or the walk cut short)\n"
        );
        assert!(
            self.stderr.contains(&said),
            "{said:?} not in {}",
            self.stderr
        );
        assert_eq!(self.stacks.depth_limit, depth_limit);
    }

    /// The one stack's end and frame count, and its 3 blocks of 64 bytes, all freed, in
    /// the stacks file and the DHAT export.
    fn assert_one_stack(&self, end: StackEnd, frames: usize) {
        assert_eq!(self.stacks.stacks.len(), 1, "{:#?}", self.stacks);
        assert_eq!(self.stacks.stacks[0].end, end);
        assert_eq!(self.stacks.stacks[0].frames.len(), frames);
        let c = &self.stacks.process.entries[0].counts;
        assert_eq!(
            (c.alloc_blocks, c.alloc_bytes, c.freed_blocks, c.freed_bytes),
            (3, 192, 3, 192)
        );
        let pps = self.dhat["pps"].as_array().unwrap();
        assert_eq!(pps.len(), 1, "{}", self.dhat);
        assert_eq!(
            (pps[0]["tb"].as_u64(), pps[0]["tbk"].as_u64()),
            (Some(192), Some(3))
        );
    }

    /// The DHAT frames of the one program point, innermost first: `function
    /// (file:line)` (the `ftbl` entry without its address).
    fn dhat_frames(&self) -> Vec<String> {
        let ftbl = self.dhat["ftbl"].as_array().unwrap();
        self.dhat["pps"][0]["fs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let frame = ftbl[i.as_u64().unwrap() as usize].as_str().unwrap();
                frame
                    .split_once(": ")
                    .map_or(frame, |(_, rest)| rest)
                    .to_string()
            })
            .collect()
    }
}

/// deep.c's frames of a recursion `levels` deep, innermost first: descend calling
/// malloc, then `levels` times descend calling descend, then main calling descend.
fn descend_frames(levels: usize) -> Vec<String> {
    let malloc = site_line("deep.c", "descend calls malloc");
    let descend = site_line("deep.c", "descend calls descend");
    let main = site_line("deep.c", "main calls descend");
    let mut frames = vec![format!("descend (deep.c:{malloc})")];
    frames.extend(std::iter::repeat_n(
        format!("descend (deep.c:{descend})"),
        levels,
    ));
    frames.push(format!("main (deep.c:{main})"));
    frames
}

/// The C library's start-up frames below main (Debian's glibc), outermost last.
const START_UP: [&str; 3] = ["__libc_start_call_main", "__libc_start_main_impl", "_start"];

/// At the default depth (64), deep.c's 41-deep recursion is whole: every frame, from
/// the allocating call to `_start`, and the stack is complete.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_41_deep_recursion_is_complete_at_the_default_depth() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_deep(dir.path(), "--stacks", 40);
    run.assert_said(64, 0);
    run.assert_one_stack(StackEnd::Complete, 41 + 1 + START_UP.len());
    let frames = run.dhat_frames();
    assert_eq!(frames[..42], descend_frames(40)[..]);
    let outer = dhat_function_names(&run.dhat, &run.dhat["pps"][0]);
    assert_eq!(outer[42..], START_UP.map(String::from)[..]);
}

/// A stack of exactly 64 frames (a 60-deep recursion, main and the 3 start-up frames)
/// is complete at the limit; one frame more is cut at 64 and marked truncated.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_stack_of_exactly_the_limit_is_complete_and_one_more_frame_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_deep(dir.path(), "--stacks", 59);
    run.assert_said(64, 0);
    run.assert_one_stack(StackEnd::Complete, 64);
    assert_eq!(run.dhat_frames()[..61], descend_frames(59)[..]);
    let names = dhat_function_names(&run.dhat, &run.dhat["pps"][0]);
    assert_eq!(names[61..], START_UP.map(String::from)[..]);

    let run = run_deep(dir.path(), "--stacks", 60);
    run.assert_said(64, 3);
    run.assert_one_stack(StackEnd::Truncated, 64);
    assert_eq!(run.dhat_frames()[..62], descend_frames(60)[..]);
    let names = dhat_function_names(&run.dhat, &run.dhat["pps"][0]);
    assert_eq!(
        names[62..],
        [
            "__libc_start_call_main",
            "__libc_start_main_impl",
            "[truncated]"
        ]
    );
}

/// A 71-deep recursion is cut at the default limit, 64 frames, marked truncated and
/// counted, in the stacks file, in what `run` and `report --stacks` say, and in the
/// DHAT export.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_stack_deeper_than_the_limit_is_cut_at_64_marked_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_deep(dir.path(), "--stacks", 70);
    run.assert_said(64, 3);
    run.assert_one_stack(StackEnd::Truncated, 64);
    // 64 frames and the truncation marker: the allocating one shown, 63 outer, and the
    // marker always at the end of that line (it is not a frame).
    let line = site_line("deep.c", "descend calls malloc");
    let shown = format!(
        "         descend (deep.c:{line})\n         + 63 outer frames: descend < descend < \
         descend < descend < ... < [truncated]\n"
    );
    assert!(
        run.report.contains(&shown),
        "{shown:?} not in\n{}",
        run.report
    );
    let mut expected = descend_frames(70)[..64].to_vec();
    expected.push("[truncated]".to_string());
    assert_eq!(run.dhat_frames(), expected);
}

/// A depth in the middle, past the first batch of the kernel's walk (20 frames: the
/// entry program walks 8, the unwind program 8 per tail call), gives exactly that many
/// frames, marked truncated.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_depth_across_a_batch_boundary_gives_exactly_that_many_frames() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_deep(dir.path(), "--stacks=20", 40);
    run.assert_said(20, 3);
    run.assert_one_stack(StackEnd::Truncated, 20);
    let mut expected = descend_frames(40)[..20].to_vec();
    expected.push("[truncated]".to_string());
    assert_eq!(run.dhat_frames(), expected);
}

/// `memtrack run --stacks` says how many stacks were walked and how many the kernel's
/// cache of walks gave, and `--no-stack-cache` walks every one: tests/stacks/twins.c
/// (1,400 allocations, 600 of them repeats of the stack before) gives the same stacks
/// and counts either way.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn no_stack_cache_walks_every_stack_and_changes_no_stack() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "twins.c");
    let run = |flags: &[&str]| {
        let results = dir.path().join(format!("results{}", flags.len()));
        let (pid, stderr) = run_into(&results, flags, &exe, &["200"]);
        let said = stderr
            .lines()
            .find_map(|l| l.strip_prefix("memtrack: stacks walked: "))
            .unwrap_or_else(|| panic!("no 'stacks walked' line in {stderr}"));
        let (walked, reused) = said
            .split_once(", reused from the cache of walks: ")
            .unwrap_or_else(|| panic!("{said:?}"));
        let stacks = ProcessStacks::read_from(&results.join(stacks_file_name(pid))).unwrap();
        let mut entries: Vec<_> = stacks
            .process
            .entries
            .iter()
            .map(|e| {
                let frames: Vec<u64> = stacks.stacks[e.stack as usize]
                    .frames
                    .iter()
                    .map(|f| f.address)
                    .collect();
                (frames, e.counts.alloc_blocks, e.counts.alloc_bytes)
            })
            .collect();
        entries.sort();
        let parse = |n: &str| n.parse::<u64>().unwrap_or_else(|e| panic!("{n:?}: {e}"));
        (parse(walked), parse(reused), entries)
    };
    let (walked, reused, cached) = run(&["--stacks"]);
    assert_eq!(walked + reused, 1400, "walked {walked}, reused {reused}");
    assert!(reused >= 350, "walked {walked}, reused {reused}");
    let (walked, reused, uncached) = run(&["--stacks", "--no-stack-cache"]);
    assert_eq!((walked, reused), (1400, 0));
    assert_eq!(cached, uncached);
    assert_eq!(cached.len(), 7, "{cached:?}");
    assert!(
        cached.iter().all(|(_, blocks, _)| *blocks == 200),
        "{cached:?}"
    );
}

/// A process that ran `exec` keeps the stacks of each image it ran (bash allocates
/// before it execs): the report shows each under its own heading, each adding up to
/// its image's counters exactly (tests/run_stacks_exec.rs checks them stack by stack).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn allocations_before_an_exec_have_their_own_stacks_in_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let (pid, stderr) = run_into(
        &results,
        &["--stacks"],
        Path::new("bash"),
        &["-c", "exec /bin/true"],
    );
    let read = MemtrackResult::read_dir(&results).unwrap();
    let earlier = &read[0].process.earlier_images;
    assert_eq!(earlier.len(), 1, "{stderr}");
    let stats = &earlier[0].stats;
    assert!(stats.alloc_calls > 0, "bash allocated nothing? {stats:#?}");
    let stacks = ProcessStacks::read_from(&results.join(stacks_file_name(pid))).unwrap();
    assert_eq!(stacks.earlier_images.len(), 1);
    let total = stacks.earlier_images[0].total();
    assert_eq!(
        (total.alloc_blocks, total.alloc_bytes, total.live_bytes),
        (stats.alloc_calls, stats.bytes_allocated, stats.live_bytes)
    );
    let (out, report, report_err) = output(memtrack().args(["report", "--stacks"]).arg(&results));
    assert!(out.status.success(), "{report_err}");
    let heading = format!("process {pid}, image 1 of 2: bash -c exec /bin/true\n");
    assert!(report.contains(&heading), "{heading:?} not in\n{report}");
    let allocated = format!(
        "allocated {} in {} blocks;",
        memtrack_report::units::bytes(stats.bytes_allocated),
        memtrack_report::units::exact(stats.alloc_calls),
    );
    assert!(
        report.contains(&allocated),
        "{allocated:?} not in\n{report}"
    );
    assert!(
        report.contains(&format!("process {pid}, image 2 of 2: /bin/true\n")),
        "{report}"
    );
    assert_eq!(
        report
            .matches("  the stacks add up exactly to the counters\n")
            .count(),
        2,
        "{report}"
    );
    assert!(!report.contains("were not kept"), "{report}");
}
