#!/bin/sh
# Build every allocator fixture into OUT_DIR, a directory this user owns (made if
# missing), or by default into a new directory with a random name under
# ${TMPDIR:-/tmp}, printed at the end (as root, a fixed name under /tmp could be
# planted by another user in advance: a given OUT_DIR must not be a link or someone
# else's).
# Never writes into the repository (cargo's target dir is OUT_DIR/rust-target;
# Cargo.lock is committed and used with --locked).
#
# Needs (Debian 12):  apt-get install gcc g++ libc6-dev \
#     libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev
# (libjemalloc-dev -> libjemalloc.so/libjemalloc2, libmimalloc-dev ->
#  libmimalloc.so/libmimalloc2.0, libgoogle-perftools-dev -> libtcmalloc_minimal.so),
# static glibc (libc6-dev's libc.a) and a Rust toolchain (cargo, 1.95) with
# network access to crates.io on the first build.
# Idempotent: rebuilds everything each time (cargo only what changed).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "build.sh: $*" >&2; exit 1; }
. "$here/../tools/out_dir.sh"
out_dir memtrack-allocators "$@"
out=$(cd "$out" && pwd)

command -v gcc >/dev/null || die "gcc not found (apt-get install gcc)"
command -v g++ >/dev/null || die "g++ not found (apt-get install g++)"
for pkg_lib in "libjemalloc-dev:jemalloc" "libmimalloc-dev:mimalloc" \
               "libgoogle-perftools-dev:tcmalloc_minimal"; do
    pkg=${pkg_lib%%:*}
    lib=${pkg_lib#*:}
    echo 'int main(void){return 0;}' | gcc -x c - -o "$out/.probe_$lib" -l"$lib" 2>/dev/null \
        || die "cannot link -l$lib: install $pkg (apt-get install $pkg)"
    rm -f "$out/.probe_$lib"
done
[ -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] \
    || die "libjemalloc.so.2 missing (apt-get install libjemalloc2), needed by dlopen_jemalloc"
echo 'int main(void){return 0;}' | gcc -x c - -static -o "$out/.probe_static" 2>/dev/null \
    || die "static glibc missing (apt-get install libc6-dev)"
rm -f "$out/.probe_static"

CFLAGS="-O0 -fno-builtin -Wall -Wextra -Werror"
CXXFLAGS="-std=gnu++17 -O0 -fno-builtin -fsized-deallocation -Wall -Wextra -Werror"

# 1. C++: the same source against four allocators. The allocator library comes
# before libstdc++ in DT_NEEDED (g++ appends -lstdc++ after user libraries), so
# its malloc AND operator new/delete interpose glibc's and libstdc++'s.
g++ $CXXFLAGS -o "$out/cxx_mix_glibc"    "$here/cxx_mix.cpp"
g++ $CXXFLAGS -o "$out/cxx_mix_jemalloc" "$here/cxx_mix.cpp" -ljemalloc
g++ $CXXFLAGS -o "$out/cxx_mix_mimalloc" "$here/cxx_mix.cpp" -lmimalloc
g++ $CXXFLAGS -o "$out/cxx_mix_tcmalloc" "$here/cxx_mix.cpp" -ltcmalloc_minimal
g++ $CXXFLAGS -o "$out/cxx_new_fail_glibc"    "$here/cxx_new_fail.cpp"
g++ $CXXFLAGS -o "$out/cxx_new_fail_jemalloc" "$here/cxx_new_fail.cpp" -ljemalloc
# libmimalloc's throwing operator new calls abort() on failure: only the nothrow case
g++ $CXXFLAGS -DFX_NO_THROWING_NEW -o "$out/cxx_new_fail_mimalloc" "$here/cxx_new_fail.cpp" -lmimalloc
g++ $CXXFLAGS -o "$out/cxx_new_fail_tcmalloc" "$here/cxx_new_fail.cpp" -ltcmalloc_minimal

# 3. dlopen (no link-time dependency on jemalloc)
gcc $CFLAGS -o "$out/dlopen_jemalloc" "$here/dlopen_jemalloc.c" -ldl

# 4. exec: static (with symbols: no -s) and dynamic targets, two exec'ers
gcc $CFLAGS -static -o "$out/static_allocs"  "$here/static_allocs.c"
gcc $CFLAGS         -o "$out/dynamic_allocs" "$here/static_allocs.c"
gcc $CFLAGS -o "$out/exec_static"  "$here/exec_static.c"
gcc $CFLAGS -DFX_TARGET='"dynamic_allocs"' -o "$out/exec_dynamic" "$here/exec_static.c"

# 5. no allocator at all
gcc -O0 -static -nostdlib -nostartfiles -fno-stack-protector -fno-builtin \
    -ffreestanding -Wall -Wextra -Werror -o "$out/bump" "$here/bump.c"

# 2. Rust (standalone cargo project, own [workspace], own target dir)
command -v cargo >/dev/null || die "cargo not found (Rust toolchain needed for the Rust fixtures)"
cargo build --release --locked --manifest-path "$here/rust/Cargo.toml" \
    --target-dir "$out/rust-target"
for b in jemalloc_fixture mimalloc_fixture system_fixture counting_fixture; do
    ln -sf "rust-target/release/$b" "$out/$b"
done

echo "built into $out"
