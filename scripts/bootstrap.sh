#!/usr/bin/env bash
# Installs, idempotently, everything memtrack needs on a fresh Debian 12 machine
# (see ../shared/ebpf-toolchain.md for why each piece is what it is):
#   - apt: LLVM 22 (for bpf-linker), C/C++ toolchain, allocator libraries for fixtures
#   - rustup: nightly rust-src (the eBPF crate is built with -Z build-std=core)
#   - bpf-linker 0.13 built against LLVM 22, installed into <repo>/.tools (not cached
#     outside the repo; built at most once per checkout)
# Safe to run repeatedly: every step checks first and does nothing when already done.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$REPO/.tools"
BPF_LINKER_VERSION="0.13.0"
LLVM_MAJOR=22

log() { printf '[bootstrap] %s\n' "$*" >&2; }

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        log "this step needs root ($1); re-run as root or with sudo"
        exit 1
    fi
}

apt_packages=(
    "llvm-${LLVM_MAJOR}-dev" "libpolly-${LLVM_MAJOR}-dev" libzstd-dev zlib1g-dev
    build-essential gcc g++ pkg-config
    libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev
    util-linux
)

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
if ! rustup toolchain list | grep -q '^nightly'; then
    log "installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
    log "adding rust-src to nightly"
    rustup component add rust-src --toolchain nightly
else
    log "nightly rust-src: present"
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
