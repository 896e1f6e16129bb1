"""The output directory of a verification tool.

The tools run as root (valgrind and gdb trace the fixtures; memtrack's own tests are
root). A fixed default such as /tmp/memtrack-fixtures-verify could be made in advance
by another user, as a link to somewhere root then writes: so the default is a new
directory with a random name, and a directory given with --out must not be a link or
another user's.
"""
import os
import tempfile


def out_dir(given, prefix):
    """The directory to write into: `given` (made if missing, mode 0700), checked, or
    a new one named `prefix` + random characters under $TMPDIR (or /tmp)."""
    if given is None:
        return tempfile.mkdtemp(prefix=prefix)
    if os.path.islink(given):
        raise SystemExit("%s is a symbolic link: give a directory you own" % given)
    if os.path.exists(given):
        st = os.stat(given)
        if not os.path.isdir(given) or st.st_uid != os.geteuid():
            raise SystemExit("%s is not a directory you own" % given)
        return os.path.abspath(given)
    parent = os.path.dirname(os.path.abspath(given))
    os.makedirs(parent, exist_ok=True)
    os.mkdir(given, 0o700)
    return os.path.abspath(given)
