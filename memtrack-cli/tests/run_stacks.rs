//! `memtrack run --stacks` end to end: tests/stacks/call_tree.c (built at -O2 without
//! frame pointers) runs under the runner with stacks on; its stacks file is read back by
//! `memtrack report --stacks` and exported as valgrind DHAT's JSON, and every per-stack
//! number is checked against the program's known allocations and against the process's
//! counters in its result file. tests/stacks/deep.c checks that a stack deeper than the
//! depth limit is cut, marked truncated and counted, in the file and in what `run` says
//! (benchmark regions: run_stacks_regions.rs).

mod stack_fixtures;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use memtrack::{
    MemtrackResult,
    stacks::{StackEnd, stacks_file_name},
};
use memtrack_cli::stack_profile::read_stacks;
use memtrack_test_support::{dhat_function_names, require_privileges};
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
    let (out, _, stderr) = output(
        memtrack()
            .args(["run", "--stacks", "-o"])
            .arg(&results)
            .arg("--")
            .arg(exe),
    );
    assert!(out.status.success(), "memtrack run failed: {stderr}");
    let read = MemtrackResult::read_dir(&results).unwrap();
    assert_eq!(read.len(), 1, "{read:#?}");
    (results, read[0].process.pid, stderr)
}

#[test]
fn run_stacks_report_and_dhat_export_have_the_exact_per_stack_counts() {
    if !require_privileges("run_stacks_report_and_dhat_export_have_the_exact_per_stack_counts") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "call_tree.c");
    let (results, pid, stderr) = run_with_stacks(dir.path(), &exe);
    let said = format!(
        "memtrack: stacks of process {pid}: 2 stack(s) (depth limit 16) in \
         {pid}.MemtrackStacks.msgpack; blocks with an incomplete stack: 0 cut at the depth \
         limit, 0 at a frame without unwind information, 0 lost (stack map full)\n"
    );
    assert!(stderr.contains(&said), "{said:?} not in {stderr}");

    // The stacks file, written through the results directory's handle, as results are.
    let stacks = read_stacks(&results.join(stacks_file_name(pid))).unwrap();
    assert_eq!(stacks.depth_limit, 16);
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
        "  2 stacks (depth limit 16): allocated 1.4 KiB (1,460 B) in 13 blocks; at peak \
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

#[test]
fn a_stack_deeper_than_the_limit_is_cut_marked_and_counted() {
    if !require_privileges("a_stack_deeper_than_the_limit_is_cut_marked_and_counted") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "deep.c");
    let (results, pid, stderr) = run_with_stacks(dir.path(), &exe);
    let said = format!(
        "memtrack: stacks of process {pid}: 1 stack(s) (depth limit 16) in \
         {pid}.MemtrackStacks.msgpack; blocks with an incomplete stack: 3 cut at the depth \
         limit, 0 at a frame without unwind information, 0 lost (stack map full)\n"
    );
    assert!(stderr.contains(&said), "{said:?} not in {stderr}");
    let stacks = read_stacks(&results.join(stacks_file_name(pid))).unwrap();
    assert_eq!(stacks.stacks.len(), 1, "{stacks:#?}");
    assert_eq!(stacks.stacks[0].end, StackEnd::Truncated);
    assert_eq!(stacks.stacks[0].frames.len(), 16);
    let c = &stacks.process.entries[0].counts;
    assert_eq!(
        (c.alloc_blocks, c.alloc_bytes, c.freed_blocks, c.freed_bytes),
        (3, 192, 3, 192)
    );

    let dhat_path = dir.path().join("deep.dhat.json");
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
    // 16 frames and the truncation marker: the allocating one shown, 15 + 1 outer.
    let line = site_line("deep.c", "descend calls malloc");
    let shown = format!(
        "         descend (deep.c:{line})\n         + 16 outer frames: descend < descend < "
    );
    assert!(report.contains(&shown), "{shown:?} not in\n{report}");
    assert!(
        report.contains("  the stacks add up exactly to the counters"),
        "{report}"
    );
    let file: Value = serde_json::from_slice(&std::fs::read(&dhat_path).unwrap()).unwrap();
    let pps = file["pps"].as_array().unwrap();
    assert_eq!(pps.len(), 1, "{file}");
    let names = dhat_function_names(&file, &pps[0]);
    let mut expected = vec!["descend".to_string(); 16];
    expected.push("[truncated]".to_string());
    assert_eq!(names, expected);
    assert_eq!(
        (pps[0]["tb"].as_u64(), pps[0]["tbk"].as_u64()),
        (Some(192), Some(3))
    );
}
