//! memtrack's eBPF programs ship compiled, in `ebpf/memtrack-ebpf.o`, so that a user
//! builds this crate with stable Rust alone (no nightly, no bpf-linker, no LLVM).
//!
//! Inside memtrack's own repository this script refuses a stale object: it hashes the
//! sources the object is built from (the memtrack-ebpf and memtrack-common crates and
//! scripts/build-ebpf.sh) and compares the hash with the one recorded when the object
//! was built. A developer who changed them gets an error naming the script that
//! rebuilds the object, never a silently old one. In the published crate those sources
//! are not present and the shipped object is used as it is. CI rebuilds the object with
//! the pinned toolchain and fails on any byte of difference (`build-ebpf.sh --check`).

use std::{
    env,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

const OBJECT: &str = "ebpf/memtrack-ebpf.o";
const RECORDED_HASH: &str = "ebpf/memtrack-ebpf.sources.sha256";
/// What the object is built from, relative to the repository (as build-ebpf.sh hashes).
const SOURCES: &[&str] = &[
    "memtrack-ebpf/Cargo.toml",
    "memtrack-ebpf/src",
    "memtrack-common/Cargo.toml",
    "memtrack-common/src",
    "scripts/build-ebpf.sh",
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let object = manifest_dir.join(OBJECT);
    println!("cargo:rerun-if-changed={}", object.display());
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join(RECORDED_HASH).display()
    );
    if !object.is_file() {
        panic!(
            "memtrack: the compiled eBPF object {} is missing; in memtrack's repository, \
             run scripts/build-ebpf.sh to build it",
            object.display()
        );
    }
    let repo = manifest_dir
        .parent()
        .expect("a crate directory has a parent");
    if !repo.join("memtrack-ebpf/src").is_dir() {
        return; // the published crate: the shipped object is all there is
    }
    for source in SOURCES {
        println!("cargo:rerun-if-changed={}", repo.join(source).display());
    }
    let recorded = std::fs::read_to_string(manifest_dir.join(RECORDED_HASH)).unwrap_or_default();
    let current = sources_hash(repo);
    if recorded.trim() != current {
        panic!(
            "memtrack: the eBPF sources changed since {OBJECT} was built (recorded sources \
             hash {:?}, now {current}). Rebuild the object with scripts/build-ebpf.sh (it \
             needs the pinned nightly and bpf-linker: scripts/bootstrap.sh --ebpf installs \
             them) and commit memtrack-core/{OBJECT} and memtrack-core/{RECORDED_HASH}.",
            recorded.trim()
        );
    }
}

/// sha256 over the lines "<sha256 of file>  <path>\n" of every source file, sorted by
/// path bytewise: what `sha256sum` prints in scripts/build-ebpf.sh, hashed once more.
fn sources_hash(repo: &Path) -> String {
    let mut files = Vec::new();
    for source in SOURCES {
        collect_files(repo, Path::new(source), &mut files);
    }
    files.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    let mut listing = String::new();
    for relative in &files {
        let bytes = std::fs::read(repo.join(relative))
            .unwrap_or_else(|e| panic!("memtrack: reading {}: {e}", relative.display()));
        listing.push_str(&format!(
            "{:x}  {}\n",
            Sha256::digest(&bytes),
            relative.display()
        ));
    }
    format!("{:x}", Sha256::digest(listing.as_bytes()))
}

fn collect_files(repo: &Path, relative: &Path, out: &mut Vec<PathBuf>) {
    let path = repo.join(relative);
    if path.is_dir() {
        let entries = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("memtrack: listing {}: {e}", path.display()));
        for entry in entries {
            let entry =
                entry.unwrap_or_else(|e| panic!("memtrack: listing {}: {e}", path.display()));
            collect_files(repo, &relative.join(entry.file_name()), out);
        }
    } else if path.is_file() {
        out.push(relative.to_path_buf());
    }
}
