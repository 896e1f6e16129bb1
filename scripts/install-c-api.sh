#!/usr/bin/env bash
# Installs memtrack's C ABI into PREFIX (idempotent: running it again replaces the same
# files with the same content):
#   PREFIX/lib/libmemtrack.so.0.1.0, libmemtrack.so.0, libmemtrack.so   shared library
#   PREFIX/lib/libmemtrack.a                                             static library
#   PREFIX/include/memtrack.h, PREFIX/include/memtrack/benchmark.h      headers
#   PREFIX/lib/pkgconfig/memtrack.pc, memtrack-static.pc                pkg-config files
#
# usage: scripts/install-c-api.sh PREFIX            builds with cargo (release) first
#        scripts/install-c-api.sh --from DIR PREFIX  installs libmemtrack_c.{so,a} built
#                                                    in DIR (e.g. target/debug)
# Then: cc prog.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs memtrack)
# (outside the system's library directories, run the program with
# LD_LIBRARY_PATH=PREFIX/lib, or link with -Wl,-rpath,PREFIX/lib, or use memtrack-static).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CRATE="$REPO/integrations/memtrack-c"

usage() { echo "usage: $0 [--from DIR] PREFIX" >&2; exit 2; }
from=""
if [ "${1:-}" = "--from" ]; then
    [ $# -eq 3 ] || usage
    from="$2"
    shift 2
fi
[ $# -eq 1 ] || usage
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"

if [ -z "$from" ]; then
    echo "[install-c-api] cargo build --release -p memtrack-c" >&2
    (cd "$REPO" && cargo build --locked --release -p memtrack-c)
    from="${CARGO_TARGET_DIR:-$REPO/target}/release"
fi
for f in libmemtrack_c.so libmemtrack_c.a; do
    [ -f "$from/$f" ] || { echo "[install-c-api] $from/$f is missing (build memtrack-c first)" >&2; exit 1; }
done

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/Cargo.toml" | head -n1)"
soname="libmemtrack.so.0"
lib="$prefix/lib"
install -d -m 0755 "$lib" "$lib/pkgconfig" "$prefix/include/memtrack"
install -m 0755 "$from/libmemtrack_c.so" "$lib/libmemtrack.so.$version"
ln -sfn "libmemtrack.so.$version" "$lib/$soname"
ln -sfn "$soname" "$lib/libmemtrack.so"
install -m 0644 "$from/libmemtrack_c.a" "$lib/libmemtrack.a"
install -m 0644 "$CRATE/include/memtrack.h" "$prefix/include/memtrack.h"
install -m 0644 "$CRATE/include/memtrack/benchmark.h" "$prefix/include/memtrack/benchmark.h"
for pc in memtrack memtrack-static; do
    sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$CRATE/pkgconfig/$pc.pc.in" > "$lib/pkgconfig/$pc.pc.tmp"
    chmod 0644 "$lib/pkgconfig/$pc.pc.tmp"
    mv -f "$lib/pkgconfig/$pc.pc.tmp" "$lib/pkgconfig/$pc.pc"
done
echo "[install-c-api] installed memtrack's C ABI $version into $prefix" >&2
