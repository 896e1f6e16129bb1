//! The stacks views of a profile made of real return addresses of tests/stacks/call_tree.c
//! (the numbers valgrind DHAT reports for it, plus lost stacks), checked field by field:
//! the DHAT JSON parsed back (and compared with valgrind's own file for the same
//! program), the pprof profile decoded back, the flamegraphs' frames, the terminal
//! report, the `memtrack report --stacks` command, and dh_view.html opening the DHAT file
//! in headless Chromium.

mod stack_fixtures;

use std::{ffi::OsStr, io::Read, path::Path, process::Command};

use memtrack::{
    BenchmarkStats, MemtrackResult, Stats,
    stacks::{RegionStacks, ScopeStacks, StackCounts, StackEntry},
};
use memtrack_report::{
    export::{
        dhat,
        flamegraph::{self, FlameMetric},
        pprof,
    },
    stack_profile::{self, LoadedProcess, ScopeChoice, StackProfile},
    stacks_report::{self, StacksOptions},
};
use memtrack_test_support::dhat_function_names;
use prost::Message as _;
use serde_json::{Value, json};
use stack_fixtures::{built, call_tree_profile, call_tree_stacks, site_line};

fn profiles(loaded: &[LoadedProcess]) -> Vec<StackProfile> {
    let (profiles, skipped) = stack_profile::resolve(loaded, &ScopeChoice::Process);
    assert!(skipped.is_empty(), "{skipped:?}");
    profiles
}

fn call_tree() -> Vec<StackProfile> {
    profiles(&[call_tree_profile(&built().call_tree)])
}

/// The frame table entries of call_tree's frames, as valgrind writes them.
fn expected_ftbl() -> Vec<String> {
    let [first, second] = call_tree_stacks(&built().call_tree);
    let at = |address: u64, function: &str, site: &str| {
        format!(
            "{:#X}: {function} (call_tree.c:{})",
            address - 1,
            site_line("call_tree.c", site)
        )
    };
    vec![
        "[root]".to_string(),
        at(first[0], "decode", "decode calls malloc"),
        at(first[1], "parse_header", "parse_header calls decode"),
        at(first[1], "load", "load calls parse_header"),
        at(first[2], "main", "main calls load"),
        "[unknown]".to_string(),
        at(second[1], "load_other", "load_other calls decode"),
        at(second[2], "main", "main calls load_other"),
        "[stack lost: stack map full]".to_string(),
    ]
}

#[test]
fn dhat_export_field_by_field() {
    let file: Value = serde_json::from_str(&dhat::render(&call_tree()[0])).unwrap();
    let expected = json!({
        "dhatFileVersion": 2,
        "mode": "heap",
        "verb": "Allocated",
        "bklt": true,
        "bkacc": false,
        "tu": "bytes allocated",
        "Mtu": "MB allocated",
        "tuth": 0,
        "cmd": "./call_tree",
        "pid": 4242,
        "te": 1476,
        "tg": 532,
        "pps": [
            {"tb": 1160, "tbk": 10, "tl": 2500, "mb": 116, "mbk": 1, "gb": 116, "gbk": 1,
             "eb": 116, "ebk": 1, "fs": [1, 2, 3, 4, 5]},
            {"tb": 300, "tbk": 3, "tl": 400, "mb": 100, "mbk": 1, "gb": 100, "gbk": 1,
             "eb": 0, "ebk": 0, "fs": [1, 6, 7]},
            // No lifetimes were recorded for the lost stacks: no "tl" rather than a
            // made-up one.
            {"tb": 16, "tbk": 2, "mb": 0, "mbk": 0, "gb": 0, "gbk": 0,
             "eb": 8, "ebk": 1, "fs": [8]},
        ],
        "ftbl": expected_ftbl(),
    });
    assert_eq!(file, expected);
}

/// A stacks file from before the allocation clock (version 1: no `bytes_allocated`, no
/// lifetimes) keeps the µs of its scope's times, as dhat-rs writes, and has no "tl".
#[test]
fn dhat_export_of_a_file_without_the_allocation_clock_uses_microseconds() {
    let mut profile = call_tree().remove(0);
    profile.bytes_allocated = None;
    profile.peak_bytes_allocated = None;
    for stack in &mut profile.stacks {
        stack.counts.total_lifetime = None;
    }
    let file: Value = serde_json::from_str(&dhat::render(&profile)).unwrap();
    assert_eq!(
        [
            &file["tu"],
            &file["Mtu"],
            &file["tuth"],
            &file["te"],
            &file["tg"]
        ],
        [
            &json!("µs"),
            &json!("s"),
            &json!(10),
            &json!(9000),
            &json!(2000)
        ]
    );
    assert!(
        file["pps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|pp| pp.get("tl").is_none()),
        "{file}"
    );
}

/// The keys of a JSON object (serde_json's map sorts them: [`in_text_order`] puts them
/// back in the file's order).
fn key_order(value: &Value) -> Vec<String> {
    value
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect::<Vec<_>>()
}

/// `keys` in the order of their first `"key":` in `text`.
fn in_text_order(text: &str, mut keys: Vec<String>) -> Vec<String> {
    keys.sort_by_key(|k| text.find(&format!("\"{k}\":")).unwrap());
    keys
}

#[test]
fn dhat_export_has_valgrinds_fields_in_valgrinds_order_and_its_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("valgrind.json");
    let run = Command::new("valgrind")
        .arg("--tool=dhat")
        .arg(format!("--dhat-out-file={}", out.display()))
        .arg(&built().call_tree)
        .output()
        .expect("valgrind is needed for this test (scripts/bootstrap.sh installs it)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let valgrind_text = std::fs::read_to_string(&out).unwrap();
    let valgrind: Value = serde_json::from_str(&valgrind_text).unwrap();
    let ours_text = dhat::render(&call_tree()[0]);
    let ours: Value = serde_json::from_str(&ours_text).unwrap();

    // The same top-level fields in the same order.
    assert_eq!(
        in_text_order(&ours_text, key_order(&ours)),
        in_text_order(&valgrind_text, key_order(&valgrind))
    );
    // Program points: valgrind's fields but the access ones (memtrack does not see
    // reads and writes: "bkacc": false), in its order.
    let valgrind_pp = &valgrind["pps"][0];
    let pp_text = |text: &str| text[text.find("\"pps\"").unwrap()..].to_string();
    let mut wanted = in_text_order(&pp_text(&valgrind_text), key_order(valgrind_pp));
    wanted.retain(|k| !["rb", "wb", "acc"].contains(&k.as_str()));
    assert_eq!(
        in_text_order(&pp_text(&ours_text), key_order(&ours["pps"][0])),
        wanted
    );
    assert_eq!(valgrind["bkacc"], true);
    assert_eq!(ours["dhatFileVersion"], valgrind["dhatFileVersion"]);
    assert_eq!(ours["ftbl"][0], valgrind["ftbl"][0]);

    // Each of valgrind's program points has memtrack's numbers, matched by their
    // functions: valgrind's start at malloc (memtrack's at its caller) and stop at
    // main.
    let valgrind_pps = valgrind["pps"].as_array().unwrap();
    assert_eq!(valgrind_pps.len(), 2);
    for pp in valgrind_pps {
        let names = dhat_function_names(&valgrind, pp);
        assert_eq!(names[0], "malloc");
        let ours_pp = ours["pps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| {
                let mut mine = dhat_function_names(&ours, o);
                mine.retain(|n| n != "[unknown]");
                mine == names[1..]
            })
            .unwrap_or_else(|| panic!("no stack {names:?} in {ours}"));
        for field in ["tb", "tbk", "mb", "mbk", "gb", "gbk", "eb", "ebk"] {
            assert_eq!(ours_pp[field], pp[field], "{field} of {names:?}");
        }
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn pprof_export_decodes_back() {
    let encoded = pprof::encode_gzip(&pprof::build(&call_tree()));
    let profile = pprof::proto::Profile::decode(gunzip(&encoded).as_slice()).unwrap();
    let s = |i: i64| profile.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types,
        [
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
            ("peak_objects", "count"),
            ("peak_space", "bytes"),
        ]
    );
    assert_eq!(s(profile.default_sample_type), "alloc_space");
    assert_eq!(profile.time_nanos, 1_700_000_000_000_000_000);
    assert_eq!(profile.duration_nanos, 9_000_000);
    let values: Vec<&[i64]> = profile.sample.iter().map(|x| x.value.as_slice()).collect();
    assert_eq!(
        values,
        [
            &[10, 1160, 1, 116, 1, 116][..],
            &[3, 300, 0, 0, 1, 100],
            &[2, 16, 1, 8, 0, 0]
        ]
    );
    for sample in &profile.sample {
        let labels: Vec<(&str, &str, i64)> = sample
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str), l.num))
            .collect();
        assert_eq!(labels, [("pid", "", 4242), ("command", "./call_tree", 0)]);
    }
    let location = |id: u64| &profile.location[id as usize - 1];
    let function = |id: u64| &profile.function[id as usize - 1];
    // The first stack, leaf first; the inlined parse_header is a line of load's
    // location, before it.
    let lines: Vec<Vec<(&str, i64)>> = profile.sample[0]
        .location_id
        .iter()
        .map(|&id| {
            location(id)
                .line
                .iter()
                .map(|l| (s(function(l.function_id).name), l.line))
                .collect()
        })
        .collect();
    let line = |site| i64::from(site_line("call_tree.c", site));
    assert_eq!(
        lines,
        [
            vec![("decode", line("decode calls malloc"))],
            vec![
                ("parse_header", line("parse_header calls decode")),
                ("load", line("load calls parse_header"))
            ],
            vec![("main", line("main calls load"))],
            vec![("[unknown]", 0)],
        ]
    );
    let [first, _] = call_tree_stacks(&built().call_tree);
    assert_eq!(
        location(profile.sample[0].location_id[0]).address,
        first[0] - 1
    );
    // The two stacks share decode's location.
    assert_eq!(
        profile.sample[0].location_id[0],
        profile.sample[1].location_id[0]
    );
    // One mapping: the program, with its build id; the markers have none.
    assert_eq!(profile.mapping.len(), 1);
    let mapping = &profile.mapping[0];
    assert_eq!(s(mapping.filename), built().call_tree.to_str().unwrap());
    assert_eq!(
        s(mapping.build_id),
        stack_fixtures::build_id(&built().call_tree).unwrap()
    );
    assert!(mapping.has_functions && mapping.has_line_numbers && mapping.has_inline_frames);
    assert_eq!(location(profile.sample[0].location_id[3]).mapping_id, 0);
    let file = s(function(location(profile.sample[0].location_id[0]).line[0].function_id).filename);
    assert_eq!(
        Path::new(file),
        stack_fixtures::sources().join("call_tree.c")
    );
}

/// pprof itself (`go tool pprof`, independent of the message definitions memtrack
/// writes with) reads the export: the values under their sample types, the inlined
/// frame, the mapping's build id. Without Go the test says SKIPPED, unless
/// MEMTRACK_REQUIRE_GO_PPROF=1 makes that a failure.
#[test]
fn go_pprof_reads_the_export() {
    if Command::new("go").arg("version").output().is_err() {
        assert!(
            std::env::var_os("MEMTRACK_REQUIRE_GO_PPROF").is_none(),
            "MEMTRACK_REQUIRE_GO_PPROF is set but `go` cannot run"
        );
        eprintln!("SKIPPED go_pprof_reads_the_export: no go (apt-get install golang-go)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memtrack.pb.gz");
    pprof::write(&call_tree(), &path).unwrap();
    let run = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&path)
        .env("HOME", dir.path()) // pprof keeps its settings there
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let line = |site| site_line("call_tree.c", site);
    let source = stack_fixtures::sources().join("call_tree.c");
    let [first, _] = call_tree_stacks(&built().call_tree);
    for wanted in [
        "alloc_objects/count alloc_space/bytes[dflt] inuse_objects/count inuse_space/bytes \
         peak_objects/count peak_space/bytes\n"
            .to_string(),
        "         10       1160          1        116          1        116: 1 2 3 4 \n"
            .to_string(),
        "          3        300          0          0          1        100: 1 5 6 \n".to_string(),
        "          2         16          1          8          0          0: 7 \n".to_string(),
        format!(
            "     2: {:#x} M=1 parse_header {}:{} s=0\n             load {}:{} s=0\n",
            first[1] - 1,
            source.display(),
            line("parse_header calls decode"),
            source.display(),
            line("load calls parse_header")
        ),
        format!(
            "{} {} [FN][FL][LN][IN]",
            built().call_tree.display(),
            stack_fixtures::build_id(&built().call_tree).unwrap()
        ),
    ] {
        assert!(stdout.contains(&wanted), "{wanted:?} not in:\n{stdout}");
    }
}

#[test]
fn flamegraphs_have_the_frames_of_each_metric() {
    let profiles = call_tree();
    let root = "pid 4242: ./call_tree";
    let path = "[unknown];main;load;parse_header;decode";
    let other = "main;load_other;decode";
    let lost = "[stack lost: stack map full]";
    assert_eq!(
        flamegraph::collapsed(&profiles, FlameMetric::Allocated),
        [
            format!("{root};{lost} 16"),
            format!("{root};{path} 1160"),
            format!("{root};{other} 300")
        ]
    );
    assert_eq!(
        flamegraph::collapsed(&profiles, FlameMetric::AtPeak),
        [format!("{root};{path} 116"), format!("{root};{other} 100")]
    );
    assert_eq!(
        flamegraph::collapsed(&profiles, FlameMetric::Leaked),
        [format!("{root};{lost} 8"), format!("{root};{path} 116")]
    );
    let svg =
        String::from_utf8(flamegraph::render(&profiles, FlameMetric::Allocated).unwrap()).unwrap();
    assert!(svg.starts_with("<?xml"), "{}", &svg[..100]);
    for title in [
        "memtrack: bytes allocated",
        "<title>decode (1,160 bytes, 78.59%)</title>",
        "<title>decode (300 bytes, 20.33%)</title>",
        "<title>parse_header (1,160 bytes, 78.59%)</title>",
        "<title>load_other (300 bytes, 20.33%)</title>",
        "<title>pid 4242: ./call_tree (1,476 bytes, 100.00%)</title>",
    ] {
        assert!(svg.contains(title), "{title} not in the SVG");
    }
    // Nothing leaked: a small SVG that says so (inferno refuses empty input).
    let mut no_leak = call_tree_profile(&built().call_tree);
    let stacks = no_leak.stacks.as_mut().unwrap();
    stacks.process.entries.truncate(1);
    stacks.process.lost = StackCounts::default();
    stacks.process.entries[0].counts.live_bytes = 0;
    stacks.process.entries[0].counts.live_blocks = 0;
    let svg = flamegraph::render(&profiles_of(no_leak), FlameMetric::Leaked).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains("memtrack: bytes leaked (live at the end)"));
    assert!(svg.contains("no bytes: nothing to show"));
}

fn profiles_of(p: LoadedProcess) -> Vec<StackProfile> {
    profiles(&[p])
}

#[test]
fn terminal_report_ranks_and_shows_distinguishing_frames() {
    let text = stacks_report::render(&call_tree(), &[], StacksOptions { top: 2 });
    let line = |site| site_line("call_tree.c", site);
    let decode = format!("decode (call_tree.c:{})", line("decode calls malloc"));
    let through_load = format!(
        "         {decode}\n         parse_header (call_tree.c:{}) [inlined]\n         + 2 outer \
         frames: load < main < [unknown]\n",
        line("parse_header calls decode")
    );
    let through_other = format!(
        "         {decode}\n         load_other (call_tree.c:{})\n         + 1 outer frame: main\n",
        line("load_other calls decode")
    );
    let first = "    1.  78.6%  allocated 1.1 KiB (1,160 B) in 10 blocks, at peak 116 B in 1 \
                 block, live at end 116 B in 1 block\n";
    let expected = format!(
        "process 4242: ./call_tree\n\
         \x20 2 stacks (depth limit 64): allocated 1.4 KiB (1,476 B) in 15 blocks; at peak \
         216 B in 2 blocks, 2.0 ms after the start; live at end 124 B in 2 blocks\n\
         \x20 LOST STACKS: 16 B in 2 blocks allocated without a stack (the stack map was full)\n\
         \x20 the stacks add up exactly to the counters\n\
         \n\
         \x20 top 2 of 3 stacks by bytes allocated:\n\
         {first}{through_load}\
         \x20   2.  20.3%  allocated 300 B in 3 blocks, at peak 100 B in 1 block, live at end \
         0 B in 0 blocks\n\
         {through_other}\
         \n\
         \x20 top 2 of 2 stacks by bytes at peak (t-gmax):\n\
         \x20   1.  53.7%{}{through_load}\
         \x20   2.  46.3%{}{through_other}\
         \n\
         \x20 top 2 of 2 stacks by bytes leaked (live at end):\n\
         \x20   1.  93.5%{}{through_load}\
         \x20   2.   6.5%  allocated 16 B in 2 blocks, at peak 0 B in 0 blocks, live at end \
         8 B in 1 block\n\
         \x20        [stack lost: stack map full]\n\
         \n",
        &first[13..],
        "  allocated 300 B in 3 blocks, at peak 100 B in 1 block, live at end 0 B in 0 blocks\n",
        &first[13..],
    );
    assert_eq!(text, expected);
}

#[test]
fn counters_that_disagree_with_the_stacks_are_shown() {
    let mut p = call_tree_profile(&built().call_tree);
    p.process.stats.bytes_allocated += 1;
    p.process.stats.peak_live_bytes = 200;
    let text = stacks_report::render(&profiles_of(p), &[], StacksOptions::default());
    assert!(text.contains(
        "  MISMATCH: bytes allocated: 1476 in the stacks, 1477 in the counters\n  MISMATCH: \
         bytes at peak: 216 in the stacks, 200 in the counters (a block another thread was \
         allocating or freeing at the instant of the peak counts on one side only)\n"
    ));
    assert!(!text.contains("add up exactly"));
}

/// call_tree's profile with one benchmark region (the load_other stack only).
fn with_region() -> LoadedProcess {
    let mut p = call_tree_profile(&built().call_tree);
    let stacks = p.stacks.as_mut().unwrap();
    let counts = stacks.process.entries[1].counts.clone();
    stacks.regions.push(RegionStacks {
        uri: "benches/decode.rs::load_other".into(),
        counters: ScopeStacks {
            start_ns: 2_000_000,
            end_ns: 4_000_000,
            peak_ns: Some(3_000_000),
            peak_bytes_allocated: Some(100),
            bytes_allocated: Some(300),
            entries: vec![StackEntry { stack: 1, counts }],
            lost: StackCounts::default(),
        },
    });
    let mut stats = Stats::default();
    stats.alloc_calls = 3;
    stats.free_calls = 3;
    stats.bytes_allocated = 300;
    stats.bytes_freed = 300;
    stats.peak_live_bytes = 100;
    p.process
        .benchmarks
        .push(BenchmarkStats::new("benches/decode.rs::load_other", stats));
    p
}

fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

const NO_ARGS: [&OsStr; 0] = [];

/// `memtrack report --stacks DIR ARGS...`, run to its end.
fn report_stacks<const N: usize>(dir: &Path, args: [&OsStr; N]) -> std::process::Output {
    memtrack()
        .args(["report", "--stacks"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

fn save(dir: &Path, p: &LoadedProcess) {
    MemtrackResult::new(p.process.clone())
        .write_to_dir(dir)
        .unwrap();
    if let Some(stacks) = &p.stacks {
        let out = memtrack::OutputDir::create_all(dir, None).unwrap();
        stacks.write_to(&out, p.process.pid).unwrap();
    }
}

#[test]
fn report_stacks_writes_every_export() {
    let results = tempfile::tempdir().unwrap();
    save(results.path(), &with_region());
    let mut without = call_tree_profile(&built().call_tree);
    without.process.pid = 5000;
    without.stacks = None;
    save(results.path(), &without);
    let out = tempfile::tempdir().unwrap();
    let (dhat_path, pprof_path, svgs) = (
        out.path().join("memtrack.dhat.json"),
        out.path().join("memtrack.pb.gz"),
        out.path().join("flamegraphs"),
    );
    let run = memtrack()
        .args(["report", "--stacks", "--top", "1"])
        .arg(results.path())
        .arg("--dhat")
        .arg(&dhat_path)
        .arg("--pprof")
        .arg(&pprof_path)
        .arg("--flamegraph-dir")
        .arg(&svgs)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert!(
        stdout.starts_with("process 4242: ./call_tree\n"),
        "{stdout}"
    );
    assert!(stdout.contains(
        "\n  the stacks add up exactly to the counters\n  benchmark regions (--benchmark URI \
         shows one): benches/decode.rs::load_other\n"
    ));
    assert!(stdout.contains("  top 1 of 3 stacks by bytes allocated:\n"));
    assert!(
        stdout.ends_with("\nprocess 5000: no stacks recorded\n"),
        "{stdout}"
    );
    // One process with stacks: the DHAT file is the path given.
    let file: Value = serde_json::from_slice(&std::fs::read(&dhat_path).unwrap()).unwrap();
    assert_eq!(file["ftbl"], json!(expected_ftbl()));
    let profile =
        pprof::proto::Profile::decode(gunzip(&std::fs::read(&pprof_path).unwrap()).as_slice())
            .unwrap();
    assert_eq!(profile.sample.len(), 3);
    for svg in ["allocated.svg", "peak.svg", "leaked.svg"] {
        let text = std::fs::read_to_string(svgs.join(svg)).unwrap();
        assert!(text.contains("<title>decode ("), "{svg}");
    }
    for path in [&dhat_path, &pprof_path] {
        assert!(stderr.contains(&format!("memtrack: wrote {}\n", path.display())));
    }

    // One benchmark region's stacks instead.
    let region = memtrack()
        .args([
            "report",
            "--stacks",
            "--benchmark",
            "benches/decode.rs::load_other",
        ])
        .arg(results.path())
        .arg("--dhat")
        .arg(&dhat_path)
        .output()
        .unwrap();
    assert_eq!(region.status.code(), Some(0));
    let stdout = String::from_utf8(region.stdout).unwrap();
    assert!(
        stdout.starts_with(
            "benchmark benches/decode.rs::load_other in process 4242: ./call_tree\n  1 stack \
             (depth limit 64): allocated 300 B in 3 blocks; at peak 100 B in 1 block, 1.0 ms \
             after the start; live at end 0 B in 0 blocks\n  the stacks add up exactly to the \
             counters\n"
        ),
        "{stdout}"
    );
    let file: Value = serde_json::from_slice(&std::fs::read(&dhat_path).unwrap()).unwrap();
    // The region's own allocation clock: its 300 bytes, its peak after 100.
    assert_eq!((&file["te"], &file["tg"]), (&json!(300), &json!(100)));
    assert_eq!(file["pps"].as_array().unwrap().len(), 1);
}

#[test]
fn several_processes_get_one_dhat_file_each() {
    let results = tempfile::tempdir().unwrap();
    let first = call_tree_profile(&built().call_tree);
    let mut second = first.clone();
    second.process.pid = 4243;
    save(results.path(), &first);
    save(results.path(), &second);
    let out = tempfile::tempdir().unwrap();
    let run = report_stacks(
        results.path(),
        ["--dhat".as_ref(), out.path().join("d.json").as_ref()],
    );
    assert_eq!(run.status.code(), Some(0));
    for pid in [4242, 4243] {
        let path = out.path().join(format!("d.{pid}.json"));
        let file: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(file["pid"], pid);
    }
    assert!(!out.path().join("d.json").exists());
}

#[test]
fn a_corrupt_stacks_file_is_an_error_naming_it() {
    let results = tempfile::tempdir().unwrap();
    let p = call_tree_profile(&built().call_tree);
    MemtrackResult::new(p.process.clone())
        .write_to_dir(results.path())
        .unwrap();
    let path = results.path().join("4242.MemtrackStacks.msgpack");
    std::fs::write(&path, b"\x93\x01").unwrap();
    let run = report_stacks(results.path(), NO_ARGS);
    assert_eq!(run.status.code(), Some(201));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.starts_with(&format!(
            "memtrack: skipped reading stacks from {}: truncated or corrupt MessagePack",
            path.display()
        )),
        "{stderr}"
    );
    // A stack referring to an object that is not there.
    let mut bad = p.stacks.clone().unwrap();
    bad.stacks[1].frames[2].object = Some(7);
    let out = memtrack::OutputDir::open(results.path(), None).unwrap();
    bad.write_to(&out, 4242).unwrap();
    let run = report_stacks(results.path(), NO_ARGS);
    assert_eq!(run.status.code(), Some(201));
    assert_eq!(
        String::from_utf8_lossy(&run.stderr),
        format!(
            "memtrack: skipped reading stacks from {}: stack 1, frame 2: object 7 does not \
             exist (objects are numbered from 0 to 0)\nmemtrack: nothing in {} could be read \
             (1 file skipped, above): nothing to report\n",
            path.display(),
            results.path().display()
        )
    );
}

/// No stacks to show is an error (201), said with what there is; the processes are
/// still listed.
#[test]
fn no_stacks_to_show_is_an_error() {
    let results = tempfile::tempdir().unwrap();
    save(results.path(), &with_region());
    let out = tempfile::tempdir().unwrap();
    let run = memtrack()
        .args(["report", "--stacks", "--benchmark", "nope"])
        .arg(results.path())
        .arg("--pprof")
        .arg(out.path().join("x.pb.gz"))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(201));
    assert_eq!(
        String::from_utf8_lossy(&run.stderr),
        format!(
            "memtrack: no process in {} has stacks of benchmark nope (the exact uri; \
             benchmarks with stacks there: benches/decode.rs::load_other)\n",
            results.path().display()
        )
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        "process 4242: did not run that benchmark\n"
    );
    assert!(!out.path().join("x.pb.gz").exists());

    let mut without = with_region();
    without.stacks = None;
    let plain = tempfile::tempdir().unwrap();
    save(plain.path(), &without);
    let run = report_stacks(plain.path(), NO_ARGS);
    assert_eq!(run.status.code(), Some(201));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("has stacks (they are recorded by memtrack run --stacks"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        "process 4242: no stacks recorded\n"
    );
}

/// An export that cannot be written fails before anything is shown: a missing
/// directory, a flamegraph directory that is a file, a link.
#[test]
fn bad_export_targets_fail_before_the_report() {
    let results = tempfile::tempdir().unwrap();
    save(results.path(), &with_region());
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("file");
    std::fs::write(&file, "kept").unwrap();
    let link = out.path().join("link.json");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let in_file = file.join("x.json");
    let no_parent = out.path().join("no/flames");
    let cases: [(&str, &Path, String); 6] = [
        (
            "--pprof",
            Path::new("/nonexistent/x.pb.gz"),
            "writing /nonexistent/x.pb.gz: its directory /nonexistent does not exist: not \
             written"
                .to_string(),
        ),
        (
            "--flamegraph-dir",
            &file,
            format!(
                "writing {}: exists and is not a directory: not written",
                file.display()
            ),
        ),
        (
            "--dhat",
            out.path(),
            format!(
                "writing {}: is a directory (give a file name): not written",
                out.path().display()
            ),
        ),
        (
            "--dhat",
            &link,
            format!(
                "writing {}: is a symbolic link: not written",
                link.display()
            ),
        ),
        (
            "--dhat",
            &in_file,
            format!(
                "writing {}: its directory {} is not a directory: not written",
                in_file.display(),
                file.display()
            ),
        ),
        // The flamegraphs' directory is made, not the directories above it (as the
        // file exports need theirs).
        (
            "--flamegraph-dir",
            &no_parent,
            format!(
                "writing {}: its parent directory {} does not exist: not written",
                no_parent.display(),
                out.path().join("no").display()
            ),
        ),
    ];
    for (flag, target, said) in cases {
        let run = report_stacks(results.path(), [flag.as_ref(), target.as_ref()]);
        assert_eq!(run.status.code(), Some(201), "{flag} {target:?}");
        assert_eq!(
            String::from_utf8_lossy(&run.stderr),
            format!("memtrack: {said}\n")
        );
        assert!(run.stdout.is_empty(), "{flag} {target:?}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
}

/// Two exports naming one file would leave only the second: refused, naming both flags,
/// before anything is shown or written (the same name spelled two ways included).
#[test]
fn two_exports_to_one_file_are_refused() {
    let results = tempfile::tempdir().unwrap();
    save(results.path(), &with_region());
    let out = tempfile::tempdir().unwrap();
    let same = out.path().join("same.out");
    let flames = out.path().join("flames");
    std::fs::create_dir(&flames).unwrap();
    let spelled_twice = out.path().join(".").join("same.out");
    let in_flames = flames.join("peak.svg");
    let cases: [([&OsStr; 4], &Path, &str); 2] = [
        (
            [
                "--dhat".as_ref(),
                same.as_ref(),
                "--pprof".as_ref(),
                spelled_twice.as_ref(),
            ],
            &spelled_twice,
            "--dhat and --pprof both name it",
        ),
        (
            [
                "--dhat".as_ref(),
                in_flames.as_ref(),
                "--flamegraph-dir".as_ref(),
                flames.as_ref(),
            ],
            &in_flames,
            "--dhat and --flamegraph-dir both name it",
        ),
    ];
    for (args, path, said) in cases {
        let run = report_stacks(results.path(), args);
        assert_eq!(run.status.code(), Some(201), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&run.stderr),
            format!(
                "memtrack: writing {}: {said}: give each export its own file: not written\n",
                path.display()
            )
        );
        assert!(run.stdout.is_empty(), "{args:?}");
    }
    assert!(!same.exists() && std::fs::read_dir(&flames).unwrap().next().is_none());
}

/// A file that cannot be read is skipped and named, the others are reported, and the
/// exit code is 201, as `memtrack report` does; a directory holding no results names
/// the result directories below it (`--stacks` reads one directory).
#[test]
fn unreadable_files_are_skipped_and_the_rest_reported() {
    let results = tempfile::tempdir().unwrap();
    save(results.path(), &with_region());
    let bad = results.path().join("777.MemtrackResult.msgpack");
    std::fs::write(&bad, b"not msgpack").unwrap();
    let run = report_stacks(results.path(), NO_ARGS);
    assert_eq!(run.status.code(), Some(201));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.starts_with("process 4242: ./call_tree\n"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "memtrack: skipped result file {}: not a memtrack result",
            bad.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        lines[1],
        format!(
            "memtrack: reported 1 process of 2 in {}; 1 skipped (above)",
            results.path().display()
        )
    );

    let tree = tempfile::tempdir().unwrap();
    let run = report_stacks(tree.path(), NO_ARGS);
    assert_eq!(run.status.code(), Some(201));
    assert_eq!(
        String::from_utf8_lossy(&run.stderr),
        format!(
            "memtrack: {} holds no result files (*.MemtrackResult.msgpack): nothing to report\n",
            tree.path().display()
        )
    );
    let below = tree.path().join("suite/bench");
    std::fs::create_dir_all(&below).unwrap();
    save(&below, &with_region());
    let run = report_stacks(tree.path(), NO_ARGS);
    assert_eq!(run.status.code(), Some(201));
    assert_eq!(
        String::from_utf8_lossy(&run.stderr),
        format!(
            "memtrack: {} holds no result files (*.MemtrackResult.msgpack): nothing to \
             report; --stacks reads one results directory, and these below it hold results: \
             {}\n",
            tree.path().display(),
            below.display()
        )
    );
    assert!(run.stdout.is_empty());
}

#[test]
fn a_stacks_file_that_is_a_link_or_a_fifo_is_not_read() {
    let results = tempfile::tempdir().unwrap();
    let p = call_tree_profile(&built().call_tree);
    MemtrackResult::new(p.process.clone())
        .write_to_dir(results.path())
        .unwrap();
    let path = results.path().join("4242.MemtrackStacks.msgpack");
    let out = memtrack::OutputDir::create_all(&results.path().join("x"), None).unwrap();
    let elsewhere = p.stacks.as_ref().unwrap().write_to(&out, 4242).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    let report = || {
        let run = report_stacks(results.path(), NO_ARGS);
        assert_eq!(run.status.code(), Some(201));
        String::from_utf8_lossy(&run.stderr).into_owned()
    };
    let refused = |why: &str| {
        format!(
            "memtrack: skipped reading stacks from {}: {why}\nmemtrack: nothing in {} could \
             be read (1 file skipped, above): nothing to report\n",
            path.display(),
            results.path().display()
        )
    };
    assert_eq!(
        report(),
        refused("is a symbolic link, not a regular file; not read")
    );
    std::fs::remove_file(&path).unwrap();
    mkfifo(&path);
    // Opened without blocking, then refused: the report does not hang on it.
    assert_eq!(report(), refused("is a FIFO, not a regular file; not read"));
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

#[test]
fn exports_need_stacks() {
    let run = memtrack()
        .args(["report", "/nonexistent", "--dhat", "x.json"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(201));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--stacks"));
}

/// dh_view.html (valgrind's viewer) opens the DHAT export and shows its frames, in
/// headless Chromium (scripts/dh_view_screenshot.py). Chromium is large and not part
/// of the bootstrap: without it the test says SKIPPED, unless
/// MEMTRACK_REQUIRE_CHROMIUM=1 makes that a failure.
#[test]
fn dh_view_opens_the_dhat_export() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    if Command::new(&chromium).arg("--version").output().is_err() {
        assert!(
            std::env::var_os("MEMTRACK_REQUIRE_CHROMIUM").is_none(),
            "MEMTRACK_REQUIRE_CHROMIUM is set but {chromium} cannot run"
        );
        eprintln!(
            "SKIPPED dh_view_opens_the_dhat_export: no {chromium} (apt-get install chromium)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("call_tree.dhat.json");
    dhat::write_all(&call_tree(), &file).unwrap();
    let png = dir.path().join("dh_view.png");
    let dom = dir.path().join("dom.html");
    let script = stack_fixtures::sources().join("../../scripts/dh_view_screenshot.py");
    let ftbl = expected_ftbl();
    let run = Command::new("python3")
        .arg(script)
        .arg(&file)
        .arg(&png)
        .arg("--dom")
        .arg(&dom)
        .args(["--expect", "Command: ./call_tree"])
        .args(["--expect", "At t-gmax: 216 bytes (100%) in 2 blocks (100%)"])
        .args([
            "--expect", &ftbl[1], "--expect", &ftbl[2], "--expect", &ftbl[6],
        ])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
}

/// Frames outside any file, interrupted instructions and stacks cut at the depth limit
/// are shown as such in every view.
#[test]
fn anonymous_frames_and_truncated_stacks() {
    let mut p = call_tree_profile(&built().call_tree);
    let stacks = p.stacks.as_mut().unwrap();
    // An instruction a signal interrupted: shown and looked up as it is (a return
    // address would be shown at the call, one byte before).
    stacks.stacks[1].frames[2] = memtrack::stacks::Frame {
        interrupted: true,
        ..memtrack::stacks::Frame::returning_to(None, 0x7f00_0000_1234)
    };
    stacks.stacks[1].end = memtrack::stacks::StackEnd::Truncated;
    let profiles = profiles_of(p);
    let names: Vec<&str> = profiles[0].stacks[1]
        .logical()
        .map(|(_, l)| l.function.as_str())
        .collect();
    assert_eq!(
        names,
        ["decode", "load_other", "0x7f0000001234", "[truncated]"]
    );
    let file: Value = serde_json::from_str(&dhat::render(&profiles[0])).unwrap();
    let ftbl = file["ftbl"].as_array().unwrap();
    assert!(ftbl.contains(&json!("0x7F0000001234: 0x7f0000001234 (not in a file)")));
    assert!(ftbl.contains(&json!("[truncated]")));
    let profile = pprof::build(&profiles);
    let anonymous = &profile.location[profile.sample[1].location_id[2] as usize - 1];
    assert_eq!(
        (anonymous.mapping_id, anonymous.address),
        (0, 0x7f00_0000_1234)
    );
    assert_eq!(
        flamegraph::collapsed(&profiles, FlameMetric::Allocated)[1],
        "pid 4242: ./call_tree;[truncated];0x7f0000001234;load_other;decode 300"
    );
}

/// A process that exec'd: call_tree's stacks as its last image, and an earlier image
/// (`sh`) that allocated through load_other only (3 blocks of 100 bytes, all freed; its
/// peak one of them). With the earlier image's stacks kept, each image is a profile of
/// its own; from a stacks file written before they were kept, the last image's profile
/// names the earlier one.
#[test]
fn images_before_an_exec_are_profiles_of_their_own_or_named_when_not_kept() {
    let mut loaded = call_tree_profile(&built().call_tree);
    let stacks = loaded.stacks.as_mut().unwrap();
    let mut image = stacks.process.clone();
    image.entries.retain(|e| e.stack == 1);
    image.lost = StackCounts::default();
    image.entries[0].counts.at_peak_bytes = 100;
    let mut stats = Stats::default();
    stats.alloc_calls = 3;
    stats.bytes_allocated = 300;
    stats.free_calls = 3;
    stats.bytes_freed = 300;
    stats.peak_live_bytes = 100;
    loaded.process.earlier_images = vec![memtrack::ImageStats::new(vec!["sh".into()], stats)];
    let old = loaded.clone();
    loaded.stacks.as_mut().unwrap().earlier_images = vec![image];

    let kept = profiles(std::slice::from_ref(&loaded));
    assert_eq!(kept.len(), 2);
    let images: Vec<_> = kept.iter().map(|p| (p.image, p.images)).collect();
    assert_eq!(images, [(1, 2), (2, 2)]);
    assert_eq!(kept[0].command, ["sh"]);
    assert_eq!(kept[0].title(), "process 4242, image 1 of 2");
    assert_eq!(kept[0].stacks.len(), 1);
    assert_eq!(kept[0].total.alloc_bytes, 300);
    assert!(
        kept[0].mismatches().is_empty(),
        "{:?}",
        kept[0].mismatches()
    );
    assert_eq!(kept[1].command, ["./call_tree"]);
    assert!(
        kept[1].mismatches().is_empty(),
        "{:?}",
        kept[1].mismatches()
    );
    assert!(kept.iter().all(|p| p.earlier_images.is_empty()));
    let text = stacks_report::render(&kept, &[], StacksOptions::default());
    let first = text.find("process 4242, image 1 of 2: sh\n").expect(&text);
    let second = text
        .find("process 4242, image 2 of 2: ./call_tree\n")
        .expect(&text);
    assert!(first < second, "{text}");
    assert!(!text.contains("not kept"), "{text}");
    // The flamegraphs' root and pprof's labels say which image.
    let lines = flamegraph::collapsed(&kept[..1], FlameMetric::Allocated);
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("pid 4242 (image 1 of 2): sh;")),
        "{lines:?}"
    );
    let built_pprof = pprof::build(&kept[..1]);
    let image_key = built_pprof
        .string_table
        .iter()
        .position(|s| s == "image")
        .unwrap() as i64;
    for sample in &built_pprof.sample {
        let label = sample.label.iter().find(|l| l.key == image_key).unwrap();
        assert_eq!(label.num, 1);
    }
    let (one, skipped) =
        stack_profile::resolve(std::slice::from_ref(&loaded), &ScopeChoice::Image(1));
    assert!(skipped.is_empty());
    assert_eq!((one.len(), one[0].image), (1, 1));
    let (none, skipped) =
        stack_profile::resolve(std::slice::from_ref(&loaded), &ScopeChoice::Image(3));
    assert!(none.is_empty());
    assert_eq!(skipped, [(4242, "ran 2 images, no image 3".to_string())]);

    // A stacks file from before: the last image only, the earlier one named.
    let last = profiles(std::slice::from_ref(&old));
    assert_eq!(last.len(), 1);
    assert_eq!((last[0].image, last[0].images), (2, 2));
    assert_eq!(last[0].earlier_images.len(), 1);
    let text = stacks_report::render(&last, &[], StacksOptions::default());
    assert!(
        text.contains(
            "  note: before exec, as sh: allocated 300 B in 3 blocks, whose stacks were not \
             kept (a stacks file written before memtrack kept each image's; the stacks and \
             the counters above cover the image the process ran last)\n"
        ),
        "{text}"
    );
    let (none, skipped) =
        stack_profile::resolve(std::slice::from_ref(&old), &ScopeChoice::Image(1));
    assert!(none.is_empty());
    assert_eq!(
        skipped,
        [(
            4242,
            "the stacks of image 1 of 2 were not kept (its stacks file was written before \
             memtrack kept each image's stacks)"
                .to_string()
        )]
    );
    // Stacks of images that are not the result's are refused, by count.
    let stacks = loaded.stacks.as_ref().unwrap();
    assert!(stacks.check_images(1).is_ok());
    assert!(old.stacks.as_ref().unwrap().check_images(1).is_ok());
    assert_eq!(
        stacks.check_images(2).unwrap_err().to_string(),
        "holds the stacks of 1 image run before an exec, but the result file of its \
         process names 2: not from the same run"
    );
}

/// `memtrack report --stacks` of a directory where one stacks file holds an earlier
/// image its result does not name: that file is skipped with why, the other process is
/// reported image by image, `--image N` picks one, and an image no process ran is an
/// error.
#[test]
fn report_stacks_shows_each_image_and_refuses_images_that_are_not_the_results() {
    let results = tempfile::tempdir().unwrap();
    let mut exec = call_tree_profile(&built().call_tree);
    let scope = exec.stacks.as_ref().unwrap().process.clone();
    let mut stats = exec.process.stats.clone();
    stats.peak_time_ns = 0;
    exec.process.earlier_images = vec![memtrack::ImageStats::new(vec!["sh".into()], stats)];
    exec.stacks.as_mut().unwrap().earlier_images = vec![scope];
    save(results.path(), &exec);
    let mut other = exec.clone();
    other.process.pid = 4243;
    other.process.earlier_images.clear();
    save(results.path(), &other);

    let run = report_stacks(results.path(), NO_ARGS);
    assert_eq!(run.status.code(), Some(201));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.starts_with("process 4242, image 1 of 2: sh\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nprocess 4242, image 2 of 2: ./call_tree\n"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    let refused = format!(
        "memtrack: skipped reading stacks from {}: holds the stacks of 1 image run before \
         an exec, but the result file of its process names 0: not from the same run\n",
        results.path().join("4243.MemtrackStacks.msgpack").display()
    );
    assert!(stderr.starts_with(&refused), "{stderr}");

    std::fs::remove_file(results.path().join("4243.MemtrackStacks.msgpack")).unwrap();
    std::fs::remove_file(results.path().join("4243.MemtrackResult.msgpack")).unwrap();
    let run = report_stacks(results.path(), ["--image".as_ref(), "1".as_ref()]);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.starts_with("process 4242, image 1 of 2: sh\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("image 2 of 2"), "{stdout}");
    let run = report_stacks(results.path(), ["--image".as_ref(), "3".as_ref()]);
    assert_eq!(run.status.code(), Some(201));
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        "process 4242: ran 2 images, no image 3\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stderr),
        format!(
            "memtrack: no process in {} has stacks of image 3 (images are numbered from 1, \
             the image a process started with; the processes with stacks there ran at most \
             2)\n",
            results.path().display()
        )
    );
    for refused in [
        vec!["--image", "0"],
        vec!["--image", "1", "--benchmark", "b"],
    ] {
        let run = memtrack()
            .args(["report", "--stacks"])
            .arg(results.path())
            .args(&refused)
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(201), "{refused:?}: {run:?}");
    }
}
