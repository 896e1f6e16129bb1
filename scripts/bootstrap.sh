#!/usr/bin/env bash
# Installs, idempotently, what memtrack's build and tests need on a fresh Debian 12
# machine with Rust (rustup, stable):
#   - apt: C/C++ toolchain and the allocator libraries the test fixtures use; valgrind
#     (the stacks exports are checked against its DHAT output); python3.11 and chromium
#     (the CPython stacks test, and dh_view.html opened in headless Chromium by
#     scripts/dh_view_screenshot.py); setpriv (util-linux) and setcap (libcap2-bin) for
#     the tests run as user nobody; libbenchmark-dev (Google Benchmark 1.7.1, for the C
#     ABI's memtrack/benchmark.h test) and python3.11-venv (the pytest plugin's test
#     makes a venv under target/)
# With --ebpf, also what rebuilding the shipped eBPF object needs (scripts/build-ebpf.sh;
# nobody else needs it: the object ships compiled; docs/ebpf-toolchain.md says why each
# piece is what it is):
#   - apt: LLVM 22 (for bpf-linker)
#   - rustup: the pinned nightly with rust-src (the eBPF crate is built with
#     -Z build-std=core)
#   - bpf-linker 0.13.0 built against LLVM 22, installed into <repo>/.tools (built at
#     most once per checkout)
# With --book, also what building and link-checking the book (docs/, `mdbook build docs`)
# needs, pinned and built from crates.io into <repo>/.tools (each at most once per
# checkout): mdbook (without its serve and watch features) and the mdbook-linkcheck2
# backend (docs/book.toml). scripts/test.sh passes --ebpf --book.
# Safe to run repeatedly: every step checks first and does nothing when already done.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$REPO/.tools"
BPF_LINKER_VERSION="$(sed -n 's/^BPF_LINKER_VERSION="\(.*\)"$/\1/p' "$REPO/scripts/build-ebpf.sh")"
NIGHTLY="$(sed -n 's/^NIGHTLY="\(.*\)"$/\1/p' "$REPO/scripts/build-ebpf.sh")"
LLVM_MAJOR=22
MDBOOK_VERSION=0.5.4
MDBOOK_LINKCHECK2_VERSION=0.13.0

ebpf=0
book=0
for arg in "$@"; do
    case "$arg" in
        --ebpf) ebpf=1 ;;
        --book) book=1 ;;
        *) echo "usage: $0 [--ebpf] [--book]" >&2; exit 2 ;;
    esac
done

log() { printf '[bootstrap] %s\n' "$*" >&2; }

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        log "this step needs root ($1); re-run as root or with sudo"
        exit 1
    fi
}

apt_packages=(
    build-essential gcc g++ pkg-config
    libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev
    util-linux libcap2-bin valgrind python3.11 chromium
    libbenchmark-dev python3.11-venv
)
if [ "$ebpf" -eq 1 ]; then
    apt_packages+=("llvm-${LLVM_MAJOR}-dev" "libpolly-${LLVM_MAJOR}-dev" libzstd-dev zlib1g-dev)
fi

missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    need_root "apt-get install ${missing[*]}"
    log "installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    log "apt packages: present"
fi

if ! command -v rustup >/dev/null; then
    log "rustup not found: install Rust with rustup first"
    exit 1
fi
# A cargo-installed tool in $TOOLS/bin at exactly VERSION, else built (with cargo's
# --locked, so the tool's own lockfile pins its dependencies).
install_tool() {
    local bin="$1" crate="$2" version="$3"
    shift 3
    if [ -x "$TOOLS/bin/$bin" ] && "$TOOLS/bin/$bin" --version 2>/dev/null | grep -qw "v\?$version"; then
        log "$crate $version: present in $TOOLS"
    else
        log "building $crate $version into $TOOLS (minutes, once per checkout)"
        cargo +stable install --locked --root "$TOOLS" "$crate" --version "$version" "$@"
    fi
}

if [ "$book" -eq 1 ]; then
    install_tool mdbook mdbook "$MDBOOK_VERSION" --no-default-features --features search
    install_tool mdbook-linkcheck2 mdbook-linkcheck2 "$MDBOOK_LINKCHECK2_VERSION"
fi

if [ "$ebpf" -eq 0 ]; then
    log "done (the eBPF toolchain is not needed: the object ships compiled; --ebpf installs it)"
    exit 0
fi

if ! rustup toolchain list | grep -q "^$NIGHTLY"; then
    log "installing the pinned toolchain $NIGHTLY with rust-src"
    rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src
fi
if ! rustup component list --toolchain "$NIGHTLY" --installed | grep -q '^rust-src'; then
    log "adding rust-src to $NIGHTLY"
    rustup component add rust-src --toolchain "$NIGHTLY"
else
    log "$NIGHTLY rust-src: present"
fi

if [ -x "$TOOLS/bin/bpf-linker" ] && "$TOOLS/bin/bpf-linker" --version 2>/dev/null | grep -q "$BPF_LINKER_VERSION"; then
    log "bpf-linker $BPF_LINKER_VERSION: present in $TOOLS"
else
    log "building bpf-linker $BPF_LINKER_VERSION against LLVM $LLVM_MAJOR (about 75 s)"
    LLVM_PREFIX="/usr/lib/llvm-${LLVM_MAJOR}" cargo +stable install --locked \
        --root "$TOOLS" bpf-linker --version "$BPF_LINKER_VERSION" \
        --no-default-features --features "llvm-${LLVM_MAJOR}"
fi

log "done"
