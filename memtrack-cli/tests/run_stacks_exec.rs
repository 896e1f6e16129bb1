//! `memtrack run --stacks` of a process that execs (tests/programs/exec_stacks.c: known
//! blocks from known functions in each of its two images): each image keeps its own
//! stacks, whose totals equal that image's counters exactly (the first image's live at
//! exit is what it had live at the exec), `memtrack report --stacks` shows each image
//! under its own heading, and the exports take the last image, or the one `--image N`
//! names (a clear error for one the process did not run).

use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use memtrack::{
    MemtrackResult,
    stacks::{ProcessStacks, stacks_file_name},
};
use memtrack_report::{
    export::pprof,
    stack_profile::{self, ScopeChoice, StackProfile},
};
use memtrack_test_support::{compile_c, dhat_function_names, repo_dir, stack_flows, stats_flows};
use prost::Message as _;
use serde_json::Value;

fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

fn output(command: &mut Command) -> (Output, String, String) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// Per function (the innermost frame's), a stack's flows ([`stack_flows`]): allocated,
/// freed, live at end and at peak, blocks and bytes.
type ByFunction = BTreeMap<String, [u64; 8]>;

/// What image 1 allocates: 3 blocks of 1,000 bytes live at the exec, 2 of 500 freed;
/// its peak (4,000 bytes) has all five live.
fn image_1() -> ByFunction {
    BTreeMap::from([
        ("first_kept".into(), [3, 3000, 0, 0, 3, 3000, 3, 3000]),
        ("first_scratch".into(), [2, 1000, 2, 1000, 0, 0, 2, 1000]),
    ])
}

/// What image 2 allocates: 4 blocks of 256 bytes live at exit, 1 of 4,096 freed; its
/// peak (5,120 bytes) has all five live.
fn image_2() -> ByFunction {
    BTreeMap::from([
        ("second_kept".into(), [4, 1024, 0, 0, 4, 1024, 4, 1024]),
        ("second_scratch".into(), [1, 4096, 1, 4096, 0, 0, 1, 4096]),
    ])
}

fn by_function(profile: &StackProfile) -> ByFunction {
    let mut out = ByFunction::new();
    for stack in &profile.stacks {
        let (_, innermost) = stack.logical().next().expect("a frame");
        let previous = out.insert(innermost.function.clone(), stack_flows(&stack.counts));
        assert!(previous.is_none(), "two stacks in {}", innermost.function);
    }
    out
}

/// The DHAT export's program points: per innermost function, [tb, tbk, eb, ebk, gb,
/// gbk].
fn dhat_points(path: &Path, command: &str) -> BTreeMap<String, [u64; 6]> {
    let file: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(file["cmd"], command, "{file}");
    file["pps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pp| {
            let n = |k: &str| pp[k].as_u64().unwrap();
            (
                dhat_function_names(&file, pp)[0].clone(),
                [n("tb"), n("tbk"), n("eb"), n("ebk"), n("gb"), n("gbk")],
            )
        })
        .collect()
}

/// The same from [`ByFunction`]'s flows.
fn as_dhat(flows: &ByFunction) -> BTreeMap<String, [u64; 6]> {
    flows
        .iter()
        .map(|(f, c)| (f.clone(), [c[1], c[0], c[5], c[4], c[7], c[6]]))
        .collect()
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn each_image_keeps_its_own_stacks_shown_and_exported_per_image() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(
        &repo_dir().join("tests/programs/exec_stacks.c"),
        dir.path(),
        &["-g"],
    );
    let exe_text = exe.display().to_string();
    let results = dir.path().join("results");
    let (out, _, stderr) = output(
        memtrack()
            .args(["run", "--stacks", "-o"])
            .arg(&results)
            .arg("--")
            .arg(&exe),
    );
    assert!(out.status.success(), "memtrack run failed: {stderr}");
    let read = MemtrackResult::read_dir(&results).unwrap();
    assert_eq!(read.len(), 1, "{read:#?}");
    let result = &read[0].process;
    let pid = result.pid;

    // The counters of each image, exactly the program's.
    assert_eq!(result.earlier_images.len(), 1, "{result:#?}");
    let first = &result.earlier_images[0];
    assert_eq!(first.command, std::slice::from_ref(&exe_text));
    assert_eq!(result.command, [exe_text.clone(), "second".into()]);
    assert_eq!(
        stats_flows(&first.stats, 5),
        [5, 4000, 2, 1000, 3, 3000, 5, 4000]
    );
    assert_eq!(
        stats_flows(&result.stats, 5),
        [5, 5120, 1, 4096, 4, 1024, 5, 5120]
    );
    // Its timeline too, kept per image: up to its peak, ending with what was live at
    // the exec.
    let timeline = first.timeline.as_ref().expect("image 1's timeline");
    assert_eq!(
        timeline.buckets.iter().map(|b| b.max_bytes).max(),
        Some(4000)
    );
    assert_eq!(timeline.buckets.last().map(|b| b.end_bytes), Some(3000));

    // The stacks file: one scope per image, each adding up to its image's counters, on
    // one table; image 2 begins where image 1 ended (the exec).
    let stacks = ProcessStacks::read_from(&results.join(stacks_file_name(pid))).unwrap();
    assert_eq!(stacks.image_count(), 2);
    let scopes = [stacks.image(1).unwrap(), stacks.image(2).unwrap()];
    assert_eq!(
        stack_flows(&scopes[0].total()),
        stats_flows(&first.stats, 5)
    );
    assert_eq!(
        stack_flows(&scopes[1].total()),
        stats_flows(&result.stats, 5)
    );
    assert!(scopes.iter().all(|s| s.lost.is_zero()), "{scopes:#?}");
    assert_eq!(scopes[0].start_ns, result.started_ns);
    assert!(scopes[0].start_ns < scopes[0].end_ns);
    assert_eq!(scopes[1].start_ns, scopes[0].end_ns);
    assert_eq!(Some(scopes[1].end_ns), result.ended_ns);
    for scope in scopes {
        assert!(
            scope
                .peak_ns
                .is_some_and(|t| scope.start_ns <= t && t <= scope.end_ns),
            "{scope:#?}"
        );
    }
    assert!(
        stderr.contains(&format!("memtrack: stacks of process {pid}: 4 stacks")),
        "{stderr}"
    );

    // Symbolized: each image's stacks by function, exactly, each profile matching its
    // image's counters.
    let loaded = stack_profile::load_dir(&results).unwrap();
    assert!(loaded.refused.is_empty(), "{:?}", loaded.refused);
    let (profiles, skipped) = stack_profile::resolve(&loaded.processes, &ScopeChoice::Process);
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(profiles.len(), 2);
    for (profile, (n, want)) in profiles.iter().zip([(1, image_1()), (2, image_2())]) {
        assert_eq!((profile.image, profile.images), (n, 2));
        assert_eq!(by_function(profile), want, "image {n}");
        assert!(
            profile.mismatches().is_empty(),
            "{:?}",
            profile.mismatches()
        );
        assert!(profile.earlier_images.is_empty());
    }
    assert_eq!(profiles[0].command, first.command);
    assert_eq!(profiles[1].command, result.command);
    let (only, _) = stack_profile::resolve(&loaded.processes, &ScopeChoice::Image(1));
    assert_eq!(only.len(), 1);
    assert_eq!(by_function(&only[0]), image_1());
    let (none, skipped) = stack_profile::resolve(&loaded.processes, &ScopeChoice::Image(3));
    assert!(none.is_empty());
    assert_eq!(skipped, [(pid, "ran 2 images, no image 3".to_string())]);

    // The report: each image under its own heading, each exact.
    let (out, report, err) = output(memtrack().args(["report", "--stacks"]).arg(&results));
    assert!(out.status.success(), "{err}");
    let first_heading = format!("process {pid}, image 1 of 2: {exe_text}\n");
    let second_heading = format!("process {pid}, image 2 of 2: {exe_text} second\n");
    let (Some(at_1), Some(at_2)) = (report.find(&first_heading), report.find(&second_heading))
    else {
        panic!("no heading per image in\n{report}");
    };
    assert!(at_1 < at_2, "{report}");
    let (image_1_text, image_2_text) = report.split_at(at_2);
    assert!(
        image_1_text.contains(
            "allocated 3.9 KiB (4,000 B) in 5 blocks; at peak 3.9 KiB (4,000 B) in 5 \
             blocks"
        ),
        "{report}"
    );
    assert!(
        image_1_text.contains("first_kept (exec_stacks.c:"),
        "{report}"
    );
    assert!(!image_1_text.contains("second_kept"), "{report}");
    assert!(
        image_2_text.contains("second_kept (exec_stacks.c:"),
        "{report}"
    );
    assert!(!image_2_text.contains("first_kept"), "{report}");
    assert_eq!(
        report
            .matches("  the stacks add up exactly to the counters\n")
            .count(),
        2,
        "{report}"
    );
    assert!(!report.contains("were not kept"), "{report}");

    // The exports: the last image by default, image 1 when asked for.
    let last_dhat = dir.path().join("last.dhat.json");
    let (out, _, err) = output(
        memtrack()
            .args(["report", "--stacks"])
            .arg(&results)
            .arg("--dhat")
            .arg(&last_dhat),
    );
    assert!(out.status.success(), "{err}");
    assert_eq!(
        dhat_points(&last_dhat, &format!("{exe_text} second")),
        as_dhat(&image_2())
    );
    let first_dhat = dir.path().join("first.dhat.json");
    let first_pprof = dir.path().join("first.pb.gz");
    let flames = dir.path().join("flames");
    let (out, report, err) = output(
        memtrack()
            .args(["report", "--stacks", "--image", "1"])
            .arg(&results)
            .arg("--dhat")
            .arg(&first_dhat)
            .arg("--pprof")
            .arg(&first_pprof)
            .arg("--flamegraph-dir")
            .arg(&flames),
    );
    assert!(out.status.success(), "{err}");
    assert!(report.contains(&first_heading), "{report}");
    assert!(!report.contains(&second_heading), "{report}");
    assert_eq!(dhat_points(&first_dhat, &exe_text), as_dhat(&image_1()));
    let allocated = std::fs::read_to_string(flames.join("allocated.svg")).unwrap();
    assert!(allocated.contains("first_kept"), "{allocated}");
    assert!(allocated.contains("image 1 of 2"), "{allocated}");
    assert!(!allocated.contains("second_kept"), "{allocated}");
    let profile = decode_pprof(&first_pprof);
    let string = |i: i64| profile.string_table[i as usize].as_str();
    // alloc_objects, alloc_space: every sample is image 1's, labelled so.
    let mut allocated = [0i64; 2];
    for sample in &profile.sample {
        allocated[0] += sample.value[0];
        allocated[1] += sample.value[1];
        let image = sample.label.iter().find(|l| string(l.key) == "image");
        assert_eq!(image.map(|l| l.num), Some(1), "{sample:?}");
    }
    assert_eq!(allocated, [5, 4000]);

    // An image the process did not run: a clear error, nothing written.
    let never = dir.path().join("never.dhat.json");
    let (out, _, err) = output(
        memtrack()
            .args(["report", "--stacks", "--image", "3"])
            .arg(&results)
            .arg("--dhat")
            .arg(&never),
    );
    assert_eq!(
        out.status.code(),
        Some(i32::from(memtrack_cli::exit_code::MEMTRACK_FAILED)),
        "{err}"
    );
    let said = format!(
        "no process in {} has stacks of image 3 (images are numbered from 1, the image a \
         process started with; the processes with stacks there ran at most 2)",
        results.display()
    );
    assert!(err.contains(&said), "{said:?} not in {err}");
    assert!(!never.exists());
}

fn decode_pprof(path: &PathBuf) -> pprof::proto::Profile {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    pprof::proto::Profile::decode(bytes.as_slice()).unwrap()
}
