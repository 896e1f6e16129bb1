//! `memtrack diff BASE NEW`: two runs compared, in text and optionally Markdown and
//! HTML, with `--max-increase` checked.

use std::path::Path;

use memtrack_cli::{Error, exit_code};
use memtrack_report::{
    diff::{self, DiffOptions},
    export, html, units,
};

use super::read_tree;

/// `memtrack diff BASE NEW`.
pub fn diff(
    base: &Path,
    new: &Path,
    options: &DiffOptions,
    markdown: Option<&Path>,
    html_file: Option<&Path>,
) -> Result<u8, Error> {
    if let Some(file) = html_file {
        export::check_file_target(file)?;
    }
    let base_found = read_tree(base)?;
    let new_found = read_tree(new)?;
    let compared = diff::diff(&base_found.dir_results(), &new_found.dir_results(), options);
    if compared.compared.is_empty() {
        return Err(Error::NothingInCommon {
            base: base.to_path_buf(),
            new: new.to_path_buf(),
        });
    }
    print!("{}", diff::render_text(&compared, options));
    if let Some(path) = markdown {
        append(path, &diff::render_markdown(&compared, options, base, new))?;
    }
    if let Some(file) = html_file {
        let page = html::render_diff(&compared, options, base, new);
        html::write(file, &page)?;
        eprintln!(
            "memtrack: wrote {} ({})",
            file.display(),
            units::bytes(page.len() as u64)
        );
    }
    if base_found.refused + new_found.refused != 0 {
        eprintln!("memtrack: some result files were skipped (above): the comparison is incomplete");
        return Ok(exit_code::MEMTRACK_FAILED);
    }
    Ok(if compared.exceeded() != 0 {
        exit_code::LIMIT_EXCEEDED
    } else {
        exit_code::SUCCESS
    })
}

/// Appends `text` to `path` (created if missing, mode 0600; never through a symbolic
/// link), as a CI job summary file wants.
fn append(path: &Path, text: &str) -> Result<(), Error> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let failed = |source| Error::Markdown {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)
}
