#!/usr/bin/env bash
# What a user outside this repository gets, checked with stable Rust alone (no nightly,
# no bpf-linker, no .tools/ on PATH):
#   1. `cargo package --workspace` of every crate that is published (not `publish =
#      false`), with the verification build of each;
#   2. a new crate in a temporary directory that depends on the library by path builds,
#      and its in-process Tracker test counts exactly (as root; prints SKIPPED otherwise,
#      and fails instead when MEMTRACK_REQUIRE_PRIVILEGED=1).
# Prints how long each build took. --downstream-only skips 1.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[check-packaging] %s\n' "$*" >&2; }

# PATH without the checkout's .tools/bin (where bootstrap.sh --ebpf puts bpf-linker).
clean_path="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -x -F "$REPO/.tools/bin" | paste -sd: -)"
if PATH="$clean_path" command -v bpf-linker >/dev/null; then
    log "note: bpf-linker is on PATH outside .tools ($(PATH="$clean_path" command -v bpf-linker)); the builds below must not need it"
fi
export RUSTUP_TOOLCHAIN=stable

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ "${1:-}" != "--downstream-only" ]; then
    log "cargo package --workspace (verification builds with stable $(rustc --version | cut -d' ' -f2))"
    start=$(date +%s)
    # Crates with `publish = false` (examples, benches, test helpers) reach no user, and
    # cargo cannot package one that depends on another: its local registry of the
    # workspace's packages holds publishable ones only (memtrack-examples depends on the
    # sample crate examples/one-line).
    unpublished="$(cd "$REPO" && cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p["publish"] == []:
        print("--exclude", p["name"])
')"
    # shellcheck disable=SC2086 # one word per option and name
    (cd "$REPO" && PATH="$clean_path" CARGO_TARGET_DIR="$work/package-target" cargo package --workspace $unpublished --locked --quiet)
    log "cargo package --workspace: ok in $(( $(date +%s) - start )) s"
fi

log "a new crate depending on memtrack-core by path"
mkdir -p "$work/downstream/src" "$work/downstream/tests"
cat > "$work/downstream/Cargo.toml" <<TOML
[package]
name = "downstream"
version = "0.1.0"
edition = "2024"

[dependencies]
memtrack-core = { path = "$REPO/memtrack-core" }

# Its own workspace, whatever manifests the directories above it hold.
[workspace]
TOML
echo '//! A crate that embeds memtrack.' > "$work/downstream/src/lib.rs"
cat > "$work/downstream/tests/exact.rs" <<'RUST'
#[test]
fn one_box_is_counted_exactly() {
    if !memtrack::can_track() {
        if std::env::var_os("MEMTRACK_REQUIRE_PRIVILEGED").is_some() {
            panic!("MEMTRACK_REQUIRE_PRIVILEGED is set but this process cannot load eBPF programs");
        }
        eprintln!("SKIPPED one_box_is_counted_exactly: needs root or CAP_BPF+CAP_PERFMON");
        return;
    }
    let mut tracker = memtrack::Tracker::new().unwrap();
    tracker.start().unwrap();
    let boxed = std::hint::black_box(Box::new([7u8; 1000]));
    drop(boxed);
    tracker.stop().unwrap();
    let stats = tracker.collect().unwrap();
    assert_eq!(
        (stats.alloc_calls, stats.bytes_allocated, stats.free_calls, stats.bytes_freed),
        (1, 1000, 1, 1000)
    );
    assert_eq!((stats.live_blocks, stats.peak_live_bytes, stats.lost_events), (0, 1000, 0));
}
RUST
start=$(date +%s)
(cd "$work/downstream" && PATH="$clean_path" CARGO_TARGET_DIR="$work/downstream-target" cargo build --tests --quiet)
log "downstream build (cold, debug, own target dir): $(( $(date +%s) - start )) s"
(cd "$work/downstream" && PATH="$clean_path" CARGO_TARGET_DIR="$work/downstream-target" cargo test --quiet -- --nocapture)
log "ok"
