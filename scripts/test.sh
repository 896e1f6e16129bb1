#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is missing, check that the
# shipped eBPF object is exactly what its sources build, check formatting, lints and
# docs, build the book and check its links, then run every test. Run as root: the tests
# that load eBPF programs (or become user nobody) are marked #[ignore = "needs root
# ..."], so cargo lists them as ignored where they cannot run; as root this script runs
# them too (--include-ignored).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/bootstrap.sh --ebpf --book
echo "[test] the shipped eBPF object against a rebuild (scripts/build-ebpf.sh --check)" >&2
bash scripts/build-ebpf.sh --check
tests=()
if [ "$(id -u)" -eq 0 ]; then
    tests=(--include-ignored)
    # memtrack::testing's heap tests (the users' API) must not skip either.
    export MEMTRACK_REQUIRE_PRIVILEGED=1
    # bootstrap installs chromium: the HTML pages' browser tests must not skip either.
    export MEMTRACK_REQUIRE_CHROMIUM=1
else
    echo "[test] not root: the tests that need root are listed as ignored, not run" >&2
fi
echo "[test] cargo fmt --check" >&2
cargo fmt --all -- --check
echo "[test] cargo clippy --all-targets -- -D warnings" >&2
cargo clippy --locked --workspace --all-targets -- -D warnings
echo "[test] cargo doc, private items too (broken links are errors)" >&2
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps -q --document-private-items
echo "[test] the book: mdbook build docs (every internal link checked by mdbook-linkcheck2)" >&2
# mdbook itself only logs a missing {{#include}} (exit 0): such a line fails the step.
mkdir -p target
PATH="$REPO/.tools/bin:$PATH" mdbook build docs 2>&1 | tee target/book.log >&2
if grep -q 'ERROR' target/book.log; then
    echo "[test] mdbook build docs reported errors (above)" >&2
    exit 1
fi
echo "[test] cargo test" >&2
cargo test --locked --workspace --all-targets -- "${tests[@]}"
cargo test --locked --workspace --doc
if [ "$(id -u)" -eq 0 ]; then
    # Every benchmark runs once, small; the runner fails if any tracked run counted
    # inexactly. Its figures are not the point here (BENCHMARKS.md has the full run).
    echo "[test] benchmark smoke run: memtrack-benches --quick" >&2
    cargo run --locked -q -p memtrack-benches -- --quick > /dev/null
    # The README's first command, as a new user runs it (release build included); its
    # numbers are checked exactly by memtrack-cli/tests/demo.rs.
    echo "[test] the demo: scripts/demo.sh" >&2
    if ! bash scripts/demo.sh > target/demo.log 2>&1 \
        || ! grep -qx '  peak live       97.7 KiB (100,000 B)' target/demo.log; then
        cat target/demo.log >&2
        echo "[test] scripts/demo.sh failed or printed another report" >&2
        exit 1
    fi
fi
# What a user outside this repository gets: cargo package --workspace with its
# verification builds, and a new crate depending on memtrack-core by path whose
# in-process Tracker test counts exactly; stable Rust only, no bpf-linker on PATH.
echo "[test] packaging: scripts/check-packaging.sh" >&2
bash scripts/check-packaging.sh
