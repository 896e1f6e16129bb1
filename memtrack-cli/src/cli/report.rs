//! `memtrack report DIR`: the human, JSON or HTML report of every result in a tree of
//! directories, the limits checked against it, and the run's figures for history
//! engines (`--bmf`, `--github-benchmark`).

use std::path::Path;

use memtrack_cli::{Error, exit_code};
use memtrack_report::{
    export, history, html,
    limits::DirResults,
    report::{self, TextOptions},
    stack_profile::{self, STACKS_FILE_SUFFIX, ScopeChoice},
    units,
};

use super::{Checks, Found, out_file::OutFile, read_tree};

/// What `memtrack report` writes besides checking.
pub struct Outputs {
    /// `--json`: the JSON report, to stdout (instead of the human report) or to a file
    /// (beside the human report on stdout).
    pub json: Option<OutFile>,
    /// `--probes`: list where each probe sits in the human report.
    pub probes: bool,
    /// `--bmf FILE`: Bencher Metric Format.
    pub bmf: Option<OutFile>,
    /// `--github-benchmark FILE`: github-action-benchmark's `customSmallerIsBetter`.
    pub github_benchmark: Option<OutFile>,
}

/// `memtrack report DIR`: reports what can be read, names on stderr what was refused,
/// and then exits 201 if anything was.
pub fn report(dir: &Path, outputs: &Outputs, checks: &Checks) -> Result<u8, Error> {
    let found = read_tree(dir)?;
    let dirs = found.dir_results();
    match &outputs.json {
        Some(json) if json.is_stdout() => json.write(&report::render_json_tree(&dirs))?,
        json => {
            let options = TextOptions::with_probe_sites(outputs.probes);
            print!("{}", report::render_text_tree(&dirs, options));
            if let Some(file) = json {
                file.write(&report::render_json_tree(&dirs))?;
            }
        }
    }
    write_history(&dirs, outputs)?;
    finish(dir, &found, checks, 0)
}

/// `--bmf` and `--github-benchmark`: the series named with paths below the current
/// directory (the checkout, in CI) relative to it; what is left out said on stderr.
fn write_history(dirs: &[DirResults], outputs: &Outputs) -> Result<(), Error> {
    if outputs.bmf.is_none() && outputs.github_benchmark.is_none() {
        return Ok(());
    }
    let cwd = std::env::current_dir().ok();
    let root = cwd.as_deref().and_then(Path::to_str);
    let (series, omitted) = history::series(dirs, root);
    for o in &omitted {
        eprintln!("memtrack: left out of the history: {}: {}", o.name, o.why);
    }
    if let Some(file) = &outputs.bmf {
        file.write(&history::render_bmf(&series))?;
    }
    if let Some(file) = &outputs.github_benchmark {
        file.write(&history::render_github_benchmark(&series))?;
    }
    Ok(())
}

/// `memtrack report --html FILE DIR`: the page of every result in the tree, with the
/// stacks of the processes that have them, written to FILE; the limits checked as for
/// the other reports. A stacks file that cannot be read is named on stderr, its
/// process shown without stacks, and the exit code is then 201.
pub fn report_html(dir: &Path, file: &Path, checks: &Checks) -> Result<u8, Error> {
    export::check_file_target(file)?;
    let found = read_tree(dir)?;
    let (stacks, stacks_refused) = load_stacks(dir, &found)?;
    let dirs = found.dir_results();
    let page = html::render_report(dir, &dirs, &stacks)?;
    html::write(file, &page)?;
    eprintln!(
        "memtrack: wrote {} ({})",
        file.display(),
        units::bytes(page.len() as u64)
    );
    finish(dir, &found, checks, stacks_refused)
}

/// The stacks of each image of every process of `found` that has a stacks file,
/// symbolized, and how many stacks files could not be read (each named on stderr).
fn load_stacks(dir: &Path, found: &Found) -> Result<(html::StacksByPlace, usize), Error> {
    let mut stacks = html::StacksByPlace::new();
    let mut refused = 0;
    for (relative, processes) in &found.dirs {
        let full = dir.join(relative);
        let has_stacks = processes.iter().any(|p| {
            full.join(format!("{}{STACKS_FILE_SUFFIX}", p.pid))
                .symlink_metadata()
                .is_ok()
        });
        if !has_stacks {
            continue;
        }
        let loaded = stack_profile::load_dir(&full)?;
        for e in &loaded.refused {
            // The result files refused were named when the tree was read.
            if matches!(e, memtrack::record::Error::StacksFile { .. }) {
                eprintln!("memtrack: skipped {e}");
                refused += 1;
            }
        }
        let (profiles, _) = stack_profile::resolve(&loaded.processes, &ScopeChoice::Process);
        for profile in profiles {
            stacks.insert((relative.clone(), profile.pid, profile.image), profile);
        }
    }
    Ok((stacks, refused))
}

/// The limits checked against what was found, then exit 201 if any file was skipped.
fn finish(dir: &Path, found: &Found, checks: &Checks, stacks_refused: usize) -> Result<u8, Error> {
    let code = checks.check(&found.dir_results(), 0, exit_code::SUCCESS, false)?;
    if stacks_refused != 0 && found.refused == 0 {
        return Ok(exit_code::MEMTRACK_FAILED);
    }
    if found.refused != 0 {
        let reported = found.results();
        eprintln!(
            "memtrack: reported {} of {} in {}; {} skipped (above)",
            units::count(reported as u64, "result file"),
            units::exact((reported + found.refused) as u64),
            dir.display(),
            found.refused
        );
        return Ok(exit_code::MEMTRACK_FAILED);
    }
    Ok(code)
}
