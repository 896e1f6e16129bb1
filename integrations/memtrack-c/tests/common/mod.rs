//! What the C ABI's tests share: the library installed by its documented script into a
//! fresh prefix, programs compiled against it with pkg-config, and the `memtrack`
//! binary (built with cargo) to run them under, with its JSON report.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory cargo built this package's libraries into (target/debug): the test
/// binary lives in its `deps/`.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Runs `cargo build --quiet ARGS` in the repository (into this build directory: what
/// cargo builds for a test is not copied up to it, so the binary and the libraries the
/// install script takes are built as top-level targets here).
fn cargo_build(args: &[&str]) {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet"])
        .args(args)
        .current_dir(repo())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build {args:?} failed");
}

/// `memtrack`, built by cargo into this build directory once per test binary.
pub fn memtrack() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        cargo_build(&["-p", "memtrack-cli", "--bin", "memtrack"]);
        let bin = build_dir().join("memtrack");
        assert!(bin.is_file(), "{} missing", bin.display());
        bin
    })
}

/// The C ABI's shared and static libraries, built by cargo into this build directory
/// once per test binary (what `scripts/install-c-api.sh --from` takes).
fn c_libraries() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        cargo_build(&["-p", "memtrack-c", "--lib"]);
        for name in ["libmemtrack_c.so", "libmemtrack_c.a"] {
            let lib = build_dir().join(name);
            assert!(lib.is_file(), "{} missing", lib.display());
        }
    });
}

/// A prefix with the C ABI installed by `scripts/install-c-api.sh --from target/debug`.
pub struct Prefix {
    pub dir: tempfile::TempDir,
}

impl Prefix {
    pub fn install() -> Prefix {
        let dir = tempfile::tempdir().unwrap();
        install_into(dir.path());
        Prefix { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `pkg-config --cflags --libs PACKAGES...` against this prefix.
    pub fn pkg_config(&self, packages: &[&str]) -> Vec<String> {
        let out = Command::new("pkg-config")
            .args(["--cflags", "--libs"])
            .args(packages)
            .env("PKG_CONFIG_PATH", self.path().join("lib/pkgconfig"))
            .output()
            .expect("pkg-config runs (scripts/bootstrap.sh installs it)");
        assert!(
            out.status.success(),
            "pkg-config {packages:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// Compiles `source` with `compiler` (cc or c++) and `flags`, linked through
    /// pkg-config `packages` (and with an rpath to the prefix), into `out`.
    pub fn compile(
        &self,
        compiler: &str,
        source: &Path,
        out: &Path,
        flags: &[&str],
        packages: &[&str],
    ) {
        let output = Command::new(compiler)
            .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"])
            .args(flags)
            .arg(source)
            .arg("-o")
            .arg(out)
            .args(self.pkg_config(packages))
            .arg(format!("-Wl,-rpath,{}", self.path().join("lib").display()))
            .output()
            .expect("the compiler runs");
        assert!(
            output.status.success(),
            "compiling {}: {}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Runs the install script into `prefix`.
pub fn install_into(prefix: &Path) {
    c_libraries();
    let out = Command::new("bash")
        .arg(repo().join("scripts/install-c-api.sh"))
        .arg("--from")
        .arg(build_dir())
        .arg(prefix)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install-c-api.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `memtrack run -o DIR -- COMMAND` (with its environment and directory); its output,
/// after checking it exited 0.
pub fn memtrack_run(dir: &Path, command: &mut Command) -> Output {
    memtrack_run_exit(dir, command, 0)
}

/// As [`memtrack_run`], expecting exit code `code` (memtrack exits with the command's).
pub fn memtrack_run_exit(dir: &Path, command: &mut Command, code: i32) -> Output {
    let mut run = Command::new(memtrack());
    run.arg("run")
        .arg("-o")
        .arg(dir)
        .arg("--")
        .arg(command.get_program());
    run.args(command.get_args());
    for (k, v) in command.get_envs() {
        match v {
            Some(v) => run.env(k, v),
            None => run.env_remove(k),
        };
    }
    if let Some(cwd) = command.get_current_dir() {
        run.current_dir(cwd);
    }
    let out = run.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "memtrack run: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// `memtrack report --json DIR`, parsed.
pub fn report_json(dir: &Path) -> serde_json::Value {
    let out = Command::new(memtrack())
        .args(["report", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every benchmark region of the report, in order: (uri, its `stats`).
pub fn regions(report: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["benchmarks"].as_array().unwrap().iter())
        .map(|b| (b["uri"].as_str().unwrap().to_owned(), b["stats"].clone()))
        .collect()
}

/// A counter of a `stats` object.
pub fn counter(stats: &serde_json::Value, name: &str) -> u64 {
    stats[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {stats}"))
}

/// A venv under the target directory with msgpack and pytest from PyPI and
/// pytest-memtrack from this checkout (scripts/pytest-venv.sh, idempotent); its python.
pub fn pytest_venv() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let venv = build_dir().parent().unwrap().join("pytest-venv");
            let out = Command::new("bash")
                .arg(repo().join("scripts/pytest-venv.sh"))
                .arg(&venv)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "scripts/pytest-venv.sh: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            venv.join("bin/python")
        })
        .clone()
}
