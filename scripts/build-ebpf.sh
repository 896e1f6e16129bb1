#!/usr/bin/env bash
# Builds memtrack's eBPF programs (crate memtrack-ebpf) into the object that ships inside
# the memtrack-core crate, memtrack-core/ebpf/memtrack-ebpf.o, and records the hash of
# the sources it was built from in memtrack-core/ebpf/memtrack-ebpf.sources.sha256
# (memtrack-core/build.rs refuses to build against a stale object).
#
#   scripts/build-ebpf.sh           rebuild and replace the shipped object (commit both files)
#   scripts/build-ebpf.sh --check   rebuild into a temporary directory and fail unless the
#                                   shipped object and hash are exactly what the sources build
#
# The toolchain is pinned so that the same sources give the same bytes on every machine:
# nightly $NIGHTLY with rust-src, bpf-linker $BPF_LINKER_VERSION built against LLVM 22
# (scripts/bootstrap.sh --ebpf installs both). Paths are remapped, so the checkout's
# location does not change the object. Why these pieces: docs/ebpf-toolchain.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NIGHTLY="nightly-2026-05-20"
BPF_LINKER_VERSION="0.13.0"
SHIPPED_DIR="$REPO/memtrack-core/ebpf"
OBJECT_NAME="memtrack-ebpf.o"
HASH_NAME="memtrack-ebpf.sources.sha256"

log() { printf '[build-ebpf] %s\n' "$*" >&2; }

check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

export PATH="$REPO/.tools/bin:$PATH"
if ! command -v bpf-linker >/dev/null || ! bpf-linker --version | grep -q "$BPF_LINKER_VERSION"; then
    log "bpf-linker $BPF_LINKER_VERSION not found in .tools/bin or PATH: run scripts/bootstrap.sh --ebpf"
    exit 1
fi
if ! rustup run "$NIGHTLY" rustc --version >/dev/null 2>&1; then
    log "toolchain $NIGHTLY not installed: run scripts/bootstrap.sh --ebpf"
    exit 1
fi

# The hash memtrack-core/build.rs compares: sha256 over "<sha256>  <path>" lines of every
# source file of the eBPF build, sorted by path (C locale), relative to the repository.
sources_hash() {
    (cd "$REPO" && find memtrack-ebpf/Cargo.toml memtrack-ebpf/src memtrack-common/Cargo.toml \
        memtrack-common/src scripts/build-ebpf.sh -type f -print0 \
        | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sysroot="$(rustup run "$NIGHTLY" rustc --print sysroot)"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
flags=(
    -Cdebuginfo=2 -Clink-arg=--btf -Ctarget-cpu=v3
    "--remap-path-prefix=$REPO=/memtrack"
    "--remap-path-prefix=$cargo_home=/cargo"
    "--remap-path-prefix=$sysroot=/rust-sysroot"
)
log "building with $(rustup run "$NIGHTLY" rustc --version) and $(bpf-linker --version)"
(
    cd "$REPO"
    # The outer environment's compiler settings must not leak into the BPF build.
    env -u RUSTC -u RUSTC_WRAPPER -u RUSTC_WORKSPACE_WRAPPER -u RUSTFLAGS -u CARGO_TARGET_DIR \
        -u CARGO_BUILD_TARGET -u RUSTUP_TOOLCHAIN \
        CARGO_ENCODED_RUSTFLAGS="$(IFS=$'\x1f'; echo "${flags[*]}")" \
        rustup run "$NIGHTLY" cargo build --locked --quiet --package memtrack-ebpf --bins --release \
        --target bpfel-unknown-none -Z build-std=core --target-dir "$work/target"
)
built="$work/target/bpfel-unknown-none/release/memtrack-ebpf"
hash="$(sources_hash)"

if [ "$check" -eq 1 ]; then
    ok=1
    if ! cmp -s "$built" "$SHIPPED_DIR/$OBJECT_NAME"; then
        log "FAIL: memtrack-core/ebpf/$OBJECT_NAME differs from what the sources build"
        log "      ($(stat -c %s "$SHIPPED_DIR/$OBJECT_NAME" 2>/dev/null || echo missing) bytes shipped, $(stat -c %s "$built") bytes built)"
        ok=0
    fi
    if [ "$(cat "$SHIPPED_DIR/$HASH_NAME" 2>/dev/null)" != "$hash" ]; then
        log "FAIL: memtrack-core/ebpf/$HASH_NAME does not match the sources"
        ok=0
    fi
    if [ "$ok" -eq 0 ]; then
        log "regenerate both with scripts/build-ebpf.sh and commit them"
        exit 1
    fi
    log "OK: the shipped object is exactly what the sources build (sha256 $(sha256sum "$built" | cut -d' ' -f1))"
else
    mkdir -p "$SHIPPED_DIR"
    cp "$built" "$SHIPPED_DIR/$OBJECT_NAME"
    echo "$hash" > "$SHIPPED_DIR/$HASH_NAME"
    log "wrote memtrack-core/ebpf/$OBJECT_NAME ($(stat -c %s "$built") bytes) and $HASH_NAME"
fi
