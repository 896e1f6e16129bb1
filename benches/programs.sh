#!/usr/bin/env bash
# Wall time of real programs nobody here wrote, untracked, under `memtrack run`, and under
# heaptrack, plus the fixed cost of tracking a short process (`/bin/true`), for
# BENCHMARKS.md. Not part of the benchmark runner: it times whole commands (start-up,
# the tools' own work and their exit included), where the runner times allocator loops.
#
#   sudo benches/programs.sh MEMTRACK [MEMTRACK_BEFORE] [RUNS]
#
# MEMTRACK is the `memtrack` binary to measure (cargo build --release -p memtrack-cli:
# target/release/memtrack); MEMTRACK_BEFORE, optional, another build of it (an earlier
# commit) measured in the same runs, alternating, so that the two compare under the
# same load. RUNS (default 3): runs per setup; each figure is the best of them (the
# programs are deterministic: other load on the machine only adds time). /bin/true
# runs 10 x RUNS times.
#
# The programs are installed with apt-get when missing (Debian 12 package names):
# sqlite3, perl, jq, g++ (also the gcc of the gcc -c row), heaptrack. Every workload is
# generated into a temporary directory, removed at the end:
#   sqlite3      30,000 INSERTs of a row with a 100-character text into a table with an
#                index, one transaction, an on-disk database in the temporary directory
#   perl         a hash of 200,000 keys, sorted
#   jq           200,000 objects built, filtered and counted
#   C++ std::map 200,000 insertions of <int, std::string> and their erasure (g++ -O2)
#   gcc -c       -O2 compilation of a generated C file of 300 functions (gcc, cc1, as:
#                three processes, each tracked)
# memtrack runs with -o into the temporary directory; its report goes to /dev/null.
# Prints a Markdown table on stdout (seconds, best of RUNS; ratios to untracked).
set -euo pipefail

if [ "$#" -lt 1 ]; then
    echo "usage: $0 MEMTRACK [MEMTRACK_BEFORE] [RUNS]" >&2
    exit 2
fi
MEMTRACK="$(realpath "$1")"
BEFORE="${2:-}"
[ -n "$BEFORE" ] && BEFORE="$(realpath "$BEFORE")"
RUNS="${3:-3}"

need=()
command -v sqlite3 >/dev/null || need+=(sqlite3)
command -v perl >/dev/null || need+=(perl)
command -v jq >/dev/null || need+=(jq)
command -v g++ >/dev/null || need+=(g++)
command -v heaptrack >/dev/null || need+=(heaptrack)
[ -x /usr/bin/time ] || need+=(time)
if [ "${#need[@]}" -gt 0 ]; then
    echo "programs.sh: installing ${need[*]}" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

WORK="$(mktemp -d /tmp/memtrack-programs.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# --- the workloads -------------------------------------------------------------------
TEXT="$(printf 'x%.0s' $(seq 100))"
awk -v text="$TEXT" 'BEGIN {
    print "CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER, v TEXT);"
    print "CREATE INDEX t_k ON t (k);"
    print "BEGIN;"
    for (i = 1; i <= 30000; i++) printf "INSERT INTO t (k, v) VALUES (%d, '\''%s'\'');\n", (i * 7919) % 30011, text
    print "COMMIT;"
    print "SELECT count(*), sum(k) FROM t;"
}' > "$WORK/inserts.sql"

cat > "$WORK/map.cc" <<'EOF'
#include <cstdio>
#include <map>
#include <string>
int main() {
    std::map<int, std::string> m;
    for (int i = 0; i < 200000; i++)
        m.emplace((i * 7919) % 200003, std::string(24 + i % 40, 'x'));
    unsigned long total = 0;
    for (const auto &kv : m)
        total += kv.second.size();
    for (int i = 0; i < 200000; i++)
        m.erase((i * 7919) % 200003);
    std::printf("%lu %zu\n", total, m.size());
    return 0;
}
EOF
g++ -O2 -o "$WORK/map" "$WORK/map.cc"

cat > "$WORK/hash.pl" <<'EOF'
my %h;
$h{$_} = "v" x ($_ % 50) for 1 .. 200000;
my @k = sort keys %h;
print scalar(@k), "\n";
EOF
echo '[range(200000) | {id: ., s: tostring}] | map(select(.id % 3 == 0)) | length' > "$WORK/objects.jq"

awk 'BEGIN {
    for (i = 0; i < 300; i++) {
        printf "int f%d(int *a, int n) { int s = %d; for (int j = 0; j < n; j++) { s += a[j] * %d; if (s > %d) s -= a[j / 2]; } return s; }\n", i, i, i % 17 + 1, i * 3 + 100
    }
}' > "$WORK/gen.c"

# name|command, run as is in $WORK (no shell: heaptrack follows no child process);
# `fresh` before a run removes what the previous run left (sqlite3's database)
WORKLOADS=(
    "sqlite3 30k inserts|sqlite3 db.sqlite .read\\ inserts.sql"
    "perl hash of 200k keys, sorted|perl hash.pl"
    "jq 200k objects|jq -n -f objects.jq"
    "C++ std::map 200k|./map"
    "gcc -O2 -c (300 functions)|gcc -O2 -c -o gen.o gen.c"
)
fresh() { rm -f "$WORK/db.sqlite"; }

# --- timing ----------------------------------------------------------------------------
now_ns() { date +%s%N; }

# seconds CMD...: one run's wall time in seconds (3 decimals), or "failed" (with the
# command's error output on stderr). The run's CPU time (user + system of every process
# of it, /usr/bin/time: the tool's rusage with its children's) goes to $WORK/cpu.
seconds() {
    local t0 t1
    fresh
    t0="$(now_ns)"
    if ! (cd "$WORK" && /usr/bin/time -f "%U %S" -o "$WORK/rusage" "$@") >/dev/null 2>"$WORK/stderr"; then
        echo "programs.sh: failed: $*" >&2
        tail -n 3 "$WORK/stderr" >&2
        echo failed
        return
    fi
    t1="$(now_ns)"
    awk '{ printf "%.3f", $1 + $2 }' "$WORK/rusage" > "$WORK/cpu"
    awk -v d="$((t1 - t0))" 'BEGIN { printf "%.3f", d / 1e9 }'
}

# run_setup's wall seconds, then "/" and its CPU seconds ("failed" if it failed).
timed() {
    local wall
    wall="$(run_setup "$@")"
    if [ "$wall" = failed ]; then echo failed; else echo "$wall/$(cat "$WORK/cpu")"; fi
}

# The smallest number among the arguments ("failed" if any run failed).
min() {
    case " $* " in *" failed "*) echo failed; return ;; esac
    printf '%s\n' "$@" | sort -g | head -n 1
}
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }


setups=(untracked memtrack)
[ -n "$BEFORE" ] && setups+=(before)
setups+=(heaptrack)

run_setup() {
    local setup="$1" cmd
    read -a cmd <<< "$2"  # no -r: "\\ " keeps a space inside an argument
    case "$setup" in
        untracked) seconds "${cmd[@]}" ;;
        memtrack) seconds "$MEMTRACK" run --replace -o "$WORK/out" -- "${cmd[@]}" ;;
        before) seconds "$BEFORE" run --replace -o "$WORK/out" -- "${cmd[@]}" ;;
        heaptrack) seconds heaptrack -o "$WORK/heaptrack.out" "${cmd[@]}" ;;
    esac
}

header="| program | untracked | memtrack |"
rule="|---|--:|--:|"
if [ -n "$BEFORE" ]; then
    header+=" memtrack before |"
    rule+="--:|"
fi
header+=" heaptrack | memtrack / untracked |"
rule+="--:|--:|"
[ -n "$BEFORE" ] && { header+=" before / untracked |"; rule+="--:|"; }
header+=" heaptrack / untracked |"
rule+="--:|"

echo "Wall time in seconds, best of $RUNS runs, and in brackets the best CPU time (user +"
echo "system of every process of the run; other load inflates it less). Each run starts the"
echo "tool and the program and ends when both have exited; \"failed\": the tool could not"
echo "run it; heaptrack follows no child process. $(nproc) CPUs, load average"
echo "$(cut -d' ' -f1 /proc/loadavg) at the start."
echo
echo "$header"
echo "$rule"
for entry in "${WORKLOADS[@]}"; do
    name="${entry%%|*}"
    cmd="${entry#*|}"
    declare -A samples=()
    for _ in $(seq "$RUNS"); do
        for setup in "${setups[@]}"; do
            samples[$setup]+=" $(timed "$setup" "$cmd")"
        done
    done
    declare -A best=() cpu=()
    for setup in "${setups[@]}"; do
        # shellcheck disable=SC2086
        best[$setup]="$(min $(printf '%s\n' ${samples[$setup]} | cut -d/ -f1))"
        # shellcheck disable=SC2086
        cpu[$setup]="$(min $(printf '%s\n' ${samples[$setup]} | cut -d/ -f2))"
    done
    cell() { echo "${best[$1]} (${cpu[$1]})"; }
    ratio() {
        case "$1$2" in *failed*) echo "-"; return ;; esac
        awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fx", a / b }'
    }
    row="| $name | $(cell untracked) | $(cell memtrack) |"
    [ -n "$BEFORE" ] && row+=" $(cell before) |"
    ratios() {
        echo "$(ratio "${best[$1]}" "${best[untracked]}") ($(ratio "${cpu[$1]}" "${cpu[untracked]}"))"
    }
    row+=" $(cell heaptrack) | $(ratios memtrack) |"
    [ -n "$BEFORE" ] && row+=" $(ratios before) |"
    row+=" $(ratios heaptrack) |"
    echo "$row"
    unset samples best cpu
done

echo
echo "\`memtrack run -- /bin/true\`, from memtrack's start to its exit, in ms: median (best) of $((10 * RUNS)) runs"
echo
if [ -n "$BEFORE" ]; then
    echo "| untracked | memtrack | memtrack before |"
    echo "|--:|--:|--:|"
else
    echo "| untracked | memtrack |"
    echo "|--:|--:|"
fi
u=() m=() b=()
for _ in $(seq $((10 * RUNS))); do
    u+=("$(seconds /bin/true)")
    m+=("$(seconds "$MEMTRACK" run --replace -o "$WORK/out" -- /bin/true)")
    [ -n "$BEFORE" ] && b+=("$(seconds "$BEFORE" run --replace -o "$WORK/out" -- /bin/true)")
done
ms() { awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }
row="| $(ms "$(median "${u[@]}")") ($(ms "$(min "${u[@]}")")) | $(ms "$(median "${m[@]}")") ($(ms "$(min "${m[@]}")")) |"
[ -n "$BEFORE" ] && row+=" $(ms "$(median "${b[@]}")") ($(ms "$(min "${b[@]}")")) |"
echo "$row"
