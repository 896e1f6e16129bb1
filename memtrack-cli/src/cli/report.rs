//! `memtrack report DIR`: the human or JSON report of every result in a tree of
//! directories, the limits checked against it.

use std::path::Path;

use memtrack_cli::{Error, exit_code};
use memtrack_report::{
    report::{self, TextOptions},
    units,
};

use super::{Checks, read_tree};

/// `memtrack report DIR`: reports what can be read, names on stderr what was refused,
/// and then exits 201 if anything was.
pub fn report(dir: &Path, json: bool, probes: bool, checks: &Checks) -> Result<u8, Error> {
    let found = read_tree(dir)?;
    let dirs = found.dir_results();
    if json {
        println!("{}", report::render_json_tree(&dirs));
    } else {
        let options = TextOptions::with_probe_sites(probes);
        print!("{}", report::render_text_tree(&dirs, options));
    }
    let code = checks.check(&dirs, 0, exit_code::SUCCESS)?;
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
