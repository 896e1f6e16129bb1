#!/usr/bin/env bash
# The malloc+free loop of the memtrack benchmarks (programs/alloc_loops.c, mode
# malloc_free) under other heap tools, for reference next to memtrack's own figures
# (BENCHMARKS.md). Not part of the benchmark runner: these are external tools with other
# goals (heaptrack and DHAT also record call stacks), so the numbers are context, not a
# contest.
#
#   sudo benches/reference.sh [PAIRS] [RUNS]     (defaults: 1000000 pairs, best of 3 runs)
#
# Tools used when installed (apt-get install -y heaptrack bpftrace valgrind):
#   heaptrack   LD_PRELOAD interposer, unwinds every allocation's stack
#   bpftrace    uprobes on libc malloc/free, (a) counting calls, (b) tracking live blocks
#               exactly the classic way: malloc entry + uretprobe, free entry (needs root)
#   valgrind    --tool=dhat: runs the program on a synthetic CPU
# Prints a Markdown table of ns per malloc+free pair (the loop's own CLOCK_MONOTONIC
# timing, so start-up and the tools' reports are excluded).
set -euo pipefail

PAIRS="${1:-1000000}"
RUNS="${2:-3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$(mktemp -d /tmp/memtrack-reference.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

cp "$HERE/programs/timing.h" "$HERE/programs/alloc_loops.c" "$WORK/"
gcc -O2 -Wall -o "$WORK/alloc_loops" "$WORK/alloc_loops.c"
PROG=("$WORK/alloc_loops" malloc_free "$PAIRS")
LIBC="$(ldd "$WORK/alloc_loops" | awk '/libc\.so\.6/ { print $3 }')"

# The ns_per_op field of the loop's result line in a tool's combined output.
ns_per_op() { grep -o 'ns_per_op=[0-9.]*' | head -n 1 | cut -d= -f2; }

# best RUNS... : runs the rest of the command line RUNS times, prints the smallest figure.
best() {
    local best="" ns
    for _ in $(seq "$RUNS"); do
        ns="$("$@" 2>&1 | ns_per_op)"
        if [ -z "$ns" ]; then
            echo "failed"
            return
        fi
        if [ -z "$best" ] || awk -v a="$ns" -v b="$best" 'BEGIN { exit !(a < b) }'; then
            best="$ns"
        fi
    done
    echo "$best"
}

# row NAME FIGURE: a table row, the figure rounded (1 decimal below 100 ns).
row() {
    local figure="$2"
    if [[ "$figure" =~ ^[0-9.]+$ ]]; then
        figure="$(awk -v x="$figure" 'BEGIN { printf(x < 100 ? "%.1f" : "%.0f", x) }')"
    fi
    printf '| %s | %s |\n' "$1" "$figure"
}

echo "Reference: ${PAIRS} x p = malloc(64 + i % 100); free(p); best of ${RUNS} runs"
echo "($(uname -r), $(getconf GNU_LIBC_VERSION), $(nproc) CPUs, $(date -u +%F))"
echo
echo "| setup | ns per malloc+free pair |"
echo "|---|--:|"
row "untracked" "$(best "${PROG[@]}")"

if command -v heaptrack >/dev/null; then
    row "heaptrack $(heaptrack --version 2>/dev/null | awk '{ print $2 }')" \
        "$(best heaptrack -o "$WORK/heaptrack" "${PROG[@]}")"
else
    row "heaptrack" "not installed"
fi

if command -v bpftrace >/dev/null && [ "$(id -u)" -eq 0 ]; then
    version="$(bpftrace --version | awk '{ print $2 }')"
    count="uprobe:$LIBC:malloc /pid == cpid/ { @malloc = count(); }
           uprobe:$LIBC:free /pid == cpid/ { @free = count(); }"
    live="uprobe:$LIBC:malloc /pid == cpid/ { @size[tid] = arg0; }
          uretprobe:$LIBC:malloc /pid == cpid && @size[tid]/ {
              @live[retval] = @size[tid]; @bytes = sum(@size[tid]); delete(@size[tid]); }
          uprobe:$LIBC:free /pid == cpid && arg0/ { delete(@live[arg0]); }
          END { clear(@live); }"
    row "bpftrace $version: count malloc + free (entry uprobes)" \
        "$(best bpftrace -e "$count" -c "${PROG[*]}")"
    row "bpftrace $version: live blocks (malloc entry + uretprobe, free entry)" \
        "$(best bpftrace -e "$live" -c "${PROG[*]}")"
else
    row "bpftrace" "not installed (or not root)"
fi

if command -v valgrind >/dev/null; then
    row "valgrind $(valgrind --version | sed 's/valgrind-//') --tool=dhat" \
        "$(best valgrind --tool=dhat --dhat-out-file=/dev/null "${PROG[@]}")"
else
    row "valgrind --tool=dhat" "not installed"
fi
