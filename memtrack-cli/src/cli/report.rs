//! `memtrack report DIR`: the human or JSON report of every result in a tree of
//! directories, the limits checked against it, and the run's figures for history
//! engines (`--bmf`, `--github-benchmark`).

use std::path::Path;

use memtrack_cli::{Error, exit_code};
use memtrack_report::{
    history,
    limits::DirResults,
    report::{self, TextOptions},
    units,
};

use super::{Checks, out_file::OutFile, read_tree};

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
    let code = checks.check(&dirs, 0, exit_code::SUCCESS, false)?;
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
