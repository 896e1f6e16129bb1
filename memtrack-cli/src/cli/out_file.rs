//! Where a JSON document an option names goes (`run --json`, `report --json`,
//! `--bmf`, `--github-benchmark`): stdout for `-`, else a file, its directory opened
//! (and checked) before anything runs, written whole or not at all (mode 0600).

use std::path::{Path, PathBuf};

use memtrack::OutputDir;
use memtrack_cli::{Error, JsonProblem};

/// A JSON document's destination.
pub enum OutFile {
    /// `-`: stdout.
    Stdout,
    /// A file: its directory, its name there, the path as given, and the option that
    /// named it (for errors).
    File {
        dir: OutputDir,
        name: String,
        path: PathBuf,
        option: &'static str,
    },
}

impl OutFile {
    /// Opens the directory of `path` (`-`: stdout), for `option`; with `owner`, a
    /// directory made is given to that user (uid, gid).
    pub fn open(
        option: &'static str,
        path: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<Self, Error> {
        if path == Path::new("-") {
            return Ok(OutFile::Stdout);
        }
        let refused = |problem| Error::Json {
            option,
            path: path.to_path_buf(),
            problem: Box::new(problem),
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| refused(JsonProblem::NotAFileName))?;
        let parent = memtrack_report::export::directory_of(path);
        if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            return Err(refused(JsonProblem::Directory));
        }
        let dir = OutputDir::open(parent, owner).map_err(|e| refused(JsonProblem::Dir(e)))?;
        Ok(OutFile::File {
            dir,
            name: name.to_owned(),
            path: path.to_path_buf(),
            option,
        })
    }

    /// Whether it is stdout.
    pub fn is_stdout(&self) -> bool {
        matches!(self, OutFile::Stdout)
    }

    /// Writes `json` and a newline.
    pub fn write(&self, json: &str) -> Result<(), Error> {
        match self {
            OutFile::Stdout => {
                println!("{json}");
                Ok(())
            }
            OutFile::File {
                dir,
                name,
                path,
                option,
            } => dir
                .write_file(name, format!("{json}\n").as_bytes())
                .map(|_| ())
                .map_err(|e| Error::Json {
                    option,
                    path: path.clone(),
                    problem: Box::new(JsonProblem::Write(e)),
                }),
        }
    }
}
