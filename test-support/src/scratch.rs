//! Directories a test binary builds its programs into once and keeps until it exits.
//!
//! The tests run as root (CI), so the directory must not be one another user can choose
//! for them: a fixed name under /tmp (with the test's pid, which anyone can guess) could
//! be created in advance, as a symlink to somewhere root then writes. It is made with a
//! random name, exclusively, and removed when the test binary exits (the harness keeps
//! statics alive to the end, so nothing else would remove it).

use std::{
    os::unix::fs::PermissionsExt,
    path::PathBuf,
    sync::{Mutex, OnceLock},
};

/// The directories [`scratch_dir`] made (in the process [`OWNER`] names).
static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The pid of the process whose exit removes them (a forked child that calls `exit`
/// runs the same handler, and must not remove what its parent still runs).
static OWNER: OnceLock<u32> = OnceLock::new();

/// Removes every directory [`scratch_dir`] made, in the process that made them.
extern "C" fn remove_made() {
    if OWNER.get() != Some(&std::process::id()) {
        return;
    }
    if let Ok(dirs) = MADE.lock() {
        for dir in dirs.iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A new directory under the system's temporary directory, named `prefix` and random
/// characters, created exclusively; mode 0755, so that tests which run a program built
/// there as user `nobody` can run it. It is removed with its contents when this process
/// exits normally (also after failed tests: the harness exits through `exit`).
pub fn scratch_dir(prefix: &str) -> PathBuf {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a new temporary directory")
        .keep();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .expect("chmod of the new temporary directory");
    let mut made = MADE.lock().expect("the list of scratch directories");
    if OWNER.set(std::process::id()).is_ok() {
        // SAFETY: registers a function without arguments that only touches statics.
        unsafe {
            libc::atexit(remove_made);
        }
    }
    made.push(dir.clone());
    dir
}
