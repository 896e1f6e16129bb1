//! The stacks exports, each made from the same [`StackProfile`]s
//! (`memtrack report --stacks DIR --dhat FILE --pprof FILE --flamegraph-dir DIR`):
//!
//! - [`dhat`]: valgrind DHAT's JSON format, which `dh_view.html` opens;
//! - [`pprof`]: pprof's `profile.proto`, gzipped (pprof, speedscope, the Firefox
//!   profiler read it);
//! - [`flamegraph`]: flamegraph SVGs of the bytes allocated, at peak and leaked
//!   (inferno).
//!
//! [`StackProfile`]: crate::stack_profile::StackProfile

pub mod dhat;
pub mod flamegraph;
pub mod pprof;

use std::path::Path;

use crate::{Error, Result};

/// Writes `bytes` to `path`, naming the file in the error.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::Write {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}
