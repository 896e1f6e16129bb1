//! `memtrack report --stacks DIR`: reads one results directory's result and stacks
//! files ([`stack_profile::load_dir`]), prints the top stacks ([`stacks_report`]) and
//! writes the exports asked for ([`export`]), saying on stderr what it skipped.

use std::path::{Path, PathBuf};

use memtrack::MemtrackResult;
use memtrack_cli::{Error, NoResults, NoStacks, exit_code};
use memtrack_report::{
    export,
    stack_profile::{self, ScopeChoice},
    stacks_report::{self, StacksOptions},
    units,
};

/// What `memtrack report --stacks` shows and writes.
#[derive(Clone, Debug, Default)]
pub struct StacksRequest {
    /// How many stacks each ranking lists (at least 1).
    pub top: usize,
    /// One benchmark region's stacks (by its exact uri) instead of whole processes.
    pub benchmark: Option<String>,
    /// One image of each process (1 for the first it ran) instead of every image in
    /// the report and the last one in the exports.
    pub image: Option<usize>,
    /// Where to write the DHAT JSON export.
    pub dhat: Option<PathBuf>,
    /// Where to write the gzipped pprof export.
    pub pprof: Option<PathBuf>,
    /// The directory for the flamegraph SVGs.
    pub flamegraph_dir: Option<PathBuf>,
}

/// `memtrack report --stacks DIR`: the top stacks, and the exports asked for. Like
/// `memtrack report`, it reports what it can read and then fails (201) if any file was
/// skipped; it fails too when no process there has the stacks asked for.
pub fn report_stacks(dir: &Path, request: &StacksRequest) -> Result<u8, Error> {
    // Every export's target first: a bad one fails before anything is shown.
    let checked = [
        request.dhat.as_deref().map(export::check_file_target),
        request.pprof.as_deref().map(export::check_file_target),
        request
            .flamegraph_dir
            .as_deref()
            .map(export::check_dir_target),
    ];
    for check in checked.into_iter().flatten() {
        check?;
    }
    let mut targets: Vec<(&str, PathBuf)> = Vec::new();
    targets.extend(request.dhat.clone().map(|p| ("--dhat", p)));
    targets.extend(request.pprof.clone().map(|p| ("--pprof", p)));
    if let Some(dir) = &request.flamegraph_dir {
        targets.extend(
            export::flamegraph::FlameMetric::ALL
                .map(|m| ("--flamegraph-dir", dir.join(m.file_name()))),
        );
    }
    export::check_distinct_targets(&targets)?;
    let loaded = stack_profile::load_dir(dir)?;
    for refused in &loaded.refused {
        eprintln!("memtrack: skipped {refused}");
    }
    if loaded.processes.is_empty() {
        return Err(no_results_for_stacks(dir, loaded.refused.len()));
    }
    let choice = match (&request.benchmark, request.image) {
        (Some(uri), _) => ScopeChoice::Benchmark(uri.clone()),
        (None, Some(n)) => ScopeChoice::Image(n),
        (None, None) => ScopeChoice::Process,
    };
    let (profiles, skipped) = stack_profile::resolve(&loaded.processes, &choice);
    let options = StacksOptions { top: request.top };
    print!("{}", stacks_report::render(&profiles, &skipped, options));
    if profiles.is_empty() {
        let cause = match (&request.benchmark, request.image) {
            (None, Some(image)) => NoStacks::Image {
                image,
                most: loaded
                    .processes
                    .iter()
                    .filter(|p| p.stacks.is_some())
                    .map(|p| p.process.earlier_images.len() + 1)
                    .max()
                    .unwrap_or(0),
            },
            (None, None) => NoStacks::Any,
            (Some(uri), _) => {
                let mut regions: Vec<String> = loaded
                    .processes
                    .iter()
                    .filter_map(|p| p.stacks.as_ref())
                    .flat_map(|s| s.regions.iter().map(|r| r.uri.clone()))
                    .collect();
                regions.sort_unstable();
                regions.dedup();
                NoStacks::Benchmark {
                    uri: uri.clone(),
                    regions,
                }
            }
        };
        return Err(Error::NoStacks {
            dir: dir.to_path_buf(),
            cause,
        });
    }
    // The exports take one image of each process (its files are named by pid): the
    // one asked for, or the last.
    let exported: Vec<_> = match choice {
        ScopeChoice::Process => profiles.into_iter().filter(|p| p.is_last_image()).collect(),
        ScopeChoice::Image(_) | ScopeChoice::Benchmark(_) => profiles,
    };
    let mut written = Vec::new();
    let mut export = || -> memtrack_report::Result<()> {
        if let Some(path) = &request.dhat {
            written.extend(export::dhat::write_all(&exported, path)?);
        }
        if let Some(path) = &request.pprof {
            export::pprof::write(&exported, path)?;
            written.push(path.clone());
        }
        if let Some(dir) = &request.flamegraph_dir {
            written.extend(export::flamegraph::write_all(&exported, dir)?);
        }
        Ok(())
    };
    let exported = export();
    for path in &written {
        eprintln!("memtrack: wrote {}", path.display());
    }
    exported?;
    if !loaded.refused.is_empty() {
        let reported = loaded.processes.len();
        eprintln!(
            "memtrack: reported {} {} of {} in {}; {} skipped (above)",
            units::exact(reported as u64),
            if reported == 1 {
                "process"
            } else {
                "processes"
            },
            units::exact((reported + loaded.refused.len()) as u64),
            dir.display(),
            loaded.refused.len()
        );
        return Ok(exit_code::MEMTRACK_FAILED);
    }
    Ok(exit_code::SUCCESS)
}

/// Why `memtrack report --stacks DIR` has nothing to report when DIR holds no readable
/// result file: `refused` files could not be read, or there are none; it reads one
/// results directory (not the tree below, as `memtrack report` does), so the result
/// directories below DIR are named.
fn no_results_for_stacks(dir: &Path, refused: usize) -> Error {
    if refused != 0 {
        return Error::NothingToReport(NoResults::NothingReadable {
            dir: dir.to_path_buf(),
            skipped: refused,
        });
    }
    let below: Vec<PathBuf> = MemtrackResult::scan_tree(dir)
        .map(|tree| tree.dirs.iter().map(|d| dir.join(&d.relative)).collect())
        .unwrap_or_default();
    const NAMED: usize = 5;
    Error::NothingToReport(NoResults::NoneHere {
        dir: dir.to_path_buf(),
        count: below.len(),
        below: below.into_iter().take(NAMED).collect(),
    })
}
