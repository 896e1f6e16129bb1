//! Builds the eBPF programs (crate memtrack-ebpf) for bpfel-unknown-none and leaves the
//! object in OUT_DIR for `include_bytes!`.
//!
//! Why not aya-build: it replaces RUSTFLAGS wholesale, and the programs need
//! `-C target-cpu=v3` for `cmpxchg` (see ../shared/ebpf-toolchain.md). The toolchain
//! pieces (nightly rust-src, bpf-linker in <repo>/.tools/bin) come from
//! scripts/bootstrap.sh; when they are missing this script says so and how to fix it.

use std::{
    env,
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest_dir
        .parent()
        .expect("memtrack-core lives in the workspace root");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let ebpf_dir = repo.join("memtrack-ebpf");
    let common_dir = repo.join("memtrack-common");

    for path in [
        ebpf_dir.join("src"),
        ebpf_dir.join("Cargo.toml"),
        common_dir.join("src"),
        common_dir.join("Cargo.toml"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-env-changed=MEMTRACK_NIGHTLY");

    let path = search_path(repo);
    require_bpf_linker(&path);

    let toolchain = env::var("MEMTRACK_NIGHTLY").unwrap_or_else(|_| "nightly".to_string());
    let target_dir = out_dir.join("ebpf-target");
    let flags = ["-Cdebuginfo=2", "-Clink-arg=--btf", "-Ctarget-cpu=v3"].join("\x1f");

    let mut cmd = Command::new("rustup");
    cmd.args(["run", &toolchain, "cargo", "build"])
        .args(["--package", "memtrack-ebpf", "--bins", "--release"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(repo)
        .env("PATH", &path)
        .env("CARGO_ENCODED_RUSTFLAGS", flags);
    // The outer build's compiler settings must not leak into the nightly BPF build.
    for key in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTUP_TOOLCHAIN",
        "CARGO_MAKEFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "__CARGO_FIX_PLZ",
    ] {
        cmd.env_remove(key);
    }
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("memtrack: cannot run `rustup` to build the eBPF programs ({e}); run scripts/bootstrap.sh")
    });
    if !status.success() {
        panic!(
            "memtrack: building the eBPF programs failed ({status}); if the nightly toolchain, \
             its rust-src or bpf-linker are missing, run scripts/bootstrap.sh"
        );
    }
    let built = target_dir.join("bpfel-unknown-none/release/memtrack");
    let dst = out_dir.join("memtrack-ebpf.o");
    std::fs::copy(&built, &dst)
        .unwrap_or_else(|e| panic!("memtrack: copying {} failed: {e}", built.display()));
}

/// PATH with <repo>/.tools/bin (where bootstrap.sh installs bpf-linker) in front.
fn search_path(repo: &Path) -> OsString {
    let mut dirs = vec![repo.join(".tools/bin")];
    if let Some(path) = env::var_os("PATH") {
        dirs.extend(env::split_paths(&path));
    }
    env::join_paths(dirs).expect("PATH entries contain no separator")
}

fn require_bpf_linker(path: &OsString) {
    let found = env::split_paths(path).any(|dir| dir.join("bpf-linker").is_file());
    if !found {
        panic!(
            "memtrack: bpf-linker not found in <repo>/.tools/bin or PATH; run scripts/bootstrap.sh \
             (it builds bpf-linker 0.13 against LLVM 22)"
        );
    }
}
