# Sourced by tests/fixtures/build.sh and tests/allocators/build.sh (POSIX sh): the
# directory a build script writes into, in $out. The scripts run as root, and a fixed
# default name under /tmp could be made in advance by another user, as a link to
# somewhere root then writes; so:
#   out_dir PREFIX          a new directory PREFIX.XXXXXX under ${TMPDIR:-/tmp}
#   out_dir PREFIX GIVEN    GIVEN, made (mode 0700) if missing; refused when it is a
#                           symbolic link or not a directory this user owns
# The same rules as tests/tools/memtrack_model/outdir.py.
out_dir() {
    if [ $# -lt 2 ]; then
        out=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    elif [ -L "$2" ]; then
        echo "build.sh: $2 is a symbolic link: give a directory you own" >&2
        exit 1
    elif [ -e "$2" ]; then
        if ! { [ -d "$2" ] && [ -O "$2" ]; }; then
            echo "build.sh: $2 is not a directory you own" >&2
            exit 1
        fi
        out=$2
    else
        if ! { mkdir -p "$(dirname "$2")" && mkdir -m 700 "$2"; }; then
            echo "build.sh: cannot make $2" >&2
            exit 1
        fi
        out=$2
    fi
}
