//! `memtrack run -- CMD`: the command tracked by the runner, its report printed on
//! stderr, the JSON report written where `--json` says, the limits checked.

use std::path::Path;

use memtrack::CommandSpec;
use memtrack_cli::{Error, runner::RunOptions, unsaved::Unsaved};
use memtrack_report::{
    limits::DirResults,
    report::{self, TextOptions},
    units,
};

use super::{Checks, out_file::OutFile};

/// `memtrack run`.
pub fn run(
    options: RunOptions,
    json: Option<&Path>,
    probes: bool,
    checks: &Checks,
    cmd: Vec<std::ffi::OsString>,
) -> Result<u8, Error> {
    let json = json
        .map(|p| OutFile::open("--json", p, options.run_as))
        .transpose()?;
    let mut argv = cmd.into_iter();
    let program = argv.next().expect("clap requires the command");
    let mut spec = CommandSpec::new(program).args(argv);
    if json.as_ref().is_some_and(OutFile::is_stdout) {
        // stdout is the JSON report's: the command writes its own to stderr.
        spec = spec.fd(1, 2);
    }
    // This process ends right after the run: the kernel's detaching of the probes
    // (grace periods) is left to a helper at exit instead of waited for. The results
    // are written and the report printed before that.
    memtrack::hand_off_links_at_exit();
    let outcome = memtrack_cli::runner::run(spec, &options)?;
    if outcome.unsaved.is_empty() {
        eprintln!(
            "memtrack: {} and {} in {}",
            units::count(outcome.results.processes.len() as u64, "result file"),
            fifo_protocol::MARKER_RESULT_FILE_NAME,
            outcome.dir.display()
        );
    } else {
        eprintln!(
            "memtrack: results in {}, but {} could not be written (named after the report)",
            outcome.dir.display(),
            units::count(outcome.unsaved.len() as u64, "file")
        );
    }
    if outcome.unattributed_lost_events != 0 {
        eprintln!(
            "memtrack: {} could not be attributed to a process",
            units::count(outcome.unattributed_lost_events, "event")
        );
    }
    if let memtrack::LaterLiveBlocks::Failed { blocks, reason } = &outcome.later_live_blocks {
        eprintln!(
            "memtrack: the kernel could not reserve {blocks} more preallocated live-block \
             entries ({reason}): the blocks beyond the first {} kept live had entries \
             allocated on demand instead (counted exactly, at a higher cost per call)",
            memtrack::LIVE_BLOCKS_AT_LOAD
        );
    }
    for (pid, stacks) in &outcome.stacks {
        eprintln!("memtrack: {}", stacks_line(*pid, stacks));
    }
    if let Some(walks) = outcome.stack_walks {
        eprintln!(
            "memtrack: stacks walked: {}, reused from the cache of walks: {}",
            walks.walked, walks.reused
        );
    }
    let options = TextOptions::with_probe_sites(probes);
    eprint!(
        "{}",
        report::render_text_with(&outcome.results.processes, options)
    );
    let mut unsaved = outcome.unsaved;
    if let Some(json) = &json
        && let Err(e) = json.write(&report::render_json(&outcome.results))
    {
        match json {
            OutFile::File { path, .. } => unsaved.push(Unsaved {
                path: path.clone(),
                what: "the JSON report, --json".into(),
                source: Box::new(e),
            }),
            OutFile::Stdout => return Err(e),
        }
    }
    // Said last, after the report: what a reader of a full disk's run sees at the end.
    for file in &unsaved {
        eprintln!("memtrack: {file}");
    }
    if !unsaved.is_empty() {
        eprintln!(
            "memtrack: {} not saved: the report above is complete, {} lacks {}",
            units::count(unsaved.len() as u64, "file"),
            outcome.dir.display(),
            if unsaved.len() == 1 { "it" } else { "them" }
        );
    }
    let command = outcome.exit.shell_code().clamp(0, 255) as u8;
    let dirs: [DirResults; 1] = [(Path::new(""), &outcome.results.processes)];
    checks.check(
        &dirs,
        outcome.unattributed_lost_events,
        command,
        !unsaved.is_empty(),
    )
}

/// What `memtrack run --stacks` says of one process's stacks: how many, where, and how
/// many blocks have an incomplete stack (always said, zeros too, so that a stack cut
/// short is never silent).
fn stacks_line(pid: u32, stacks: &memtrack::stacks::ProcessStacks) -> String {
    let incomplete = stacks.incomplete();
    format!(
        "stacks of process {pid}: {} (depth limit {}) in {}; blocks with an \
         incomplete stack: {} cut at the depth limit, {} at a frame without unwind \
         information, {} lost (stack map full, or the walk cut short)",
        units::count(stacks.stacks.len() as u64, "stack"),
        stacks.depth_limit,
        memtrack::stacks::stacks_file_name(pid),
        units::exact(incomplete.truncated_blocks),
        units::exact(incomplete.unknown_blocks),
        units::exact(incomplete.lost_blocks),
    )
}
