#!/usr/bin/env bash
# Makes, or brings up to date, a Python virtual environment at VENV with msgpack and
# pytest from PyPI and pytest-memtrack installed from this checkout. Idempotent, and
# safe to run concurrently (one run at a time holds VENV.lock).
#   usage: scripts/pytest-venv.sh VENV      (PYTHON=... picks the interpreter; default
#          Debian's /usr/bin/python3.11, which scripts/bootstrap.sh installs with venv)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 VENV" >&2; exit 2; }
venv="$1"
python="${PYTHON:-/usr/bin/python3.11}"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ]; then
    echo "[pytest-venv] creating $venv with $python" >&2
    "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import msgpack, pytest, setuptools, wheel' 2>/dev/null; then
    echo "[pytest-venv] pip install msgpack pytest setuptools wheel" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check msgpack pytest setuptools wheel
fi
# The plugin from a copy of its sources, so the checkout gets no build files.
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
cp -r "$REPO/integrations/python/pytest-memtrack/." "$src/"
rm -rf "$src/build" "$src"/src/*.egg-info
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --no-build-isolation --force-reinstall "$src"
echo "[pytest-venv] $venv: $("$venv/bin/python" -c 'import msgpack, pytest, pytest_memtrack; print("msgpack", ".".join(map(str, msgpack.version)), "pytest", pytest.__version__, "pytest-memtrack ok")')" >&2
