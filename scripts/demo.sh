#!/usr/bin/env bash
# memtrack's main job on a fresh machine: install what is missing, build memtrack, and
# track a demo workload (examples/demo/workload.c: a parent and a forked child with
# known allocations), printing the per-process report. Run as root (sudo): loading
# eBPF programs needs it.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/bootstrap.sh
cargo build --release --locked -p memtrack-cli --bin memtrack
mkdir -p target/demo
gcc -O0 -fno-builtin -o target/demo/workload examples/demo/workload.c
echo "== memtrack run -- target/demo/workload" >&2
./target/release/memtrack run --replace -o target/demo/results -- target/demo/workload
