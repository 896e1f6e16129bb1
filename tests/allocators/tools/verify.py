#!/usr/bin/env python3
"""verify.py - re-checks every number in ../expected.json:
  1. builds everything (../build.sh OUT) unless --no-build
  2. native run: exit code
  3. valgrind DHAT (where the fixture has a "dhat" entry)
  4. gdb reference trace (tools/alloc_trace.py + tools/account.py): totals,
     functions, functions_by_address, objects, earlier images
and prints which entry points each fixture reached (outermost, nested, and
traced but not probed: libstdc++'s operators).

usage: python3 tools/verify.py [--out DIR] [--no-build] [--only NAME,...]
Writes only under --out (default: a new directory memtrack-allocators-verify-XXXXXXXX
under $TMPDIR or /tmp, printed); --no-build needs --out (a directory built before).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from memtrack_model import accounting, dhat as dhat_output  # noqa: E402
from memtrack_model.outdir import out_dir  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}

failures = []
checks = [0]


def check(name, what, got, want):
    checks[0] += 1
    if got != want:
        failures.append("%s: %s: got %s, want %s" % (name, what, json.dumps(got), json.dumps(want)))
        print("  FAIL %s: got %s want %s" % (what, json.dumps(got), json.dumps(want)))
    else:
        print("  ok   %s" % what)


def command_of(name, fx, out):
    if "command" in fx:
        return fx["command"], out
    return [os.path.join(out, name)], out


def apply_term(entry, exe):
    """plus_term: add len(dirname(realpath(exe))) + 2 to the listed fields"""
    entry = json.loads(json.dumps(entry))
    pt = entry.get("plus_term")
    if not pt:
        return entry
    term = len(os.path.dirname(os.path.realpath(exe))) + 2
    for f in pt["fields"]:
        parts = f.split(".")
        if parts[0] == "functions":
            entry["functions"][parts[1]][parts[2]] += term
        else:
            entry["totals"][f] += term
    return entry


def dhat(name, fx, out, tmp):
    cmd, cwd = command_of(name, fx, out)
    flags = fx.get("dhat_flags", "--run-libc-freeres=no --run-cxx-freeres=no").split()
    p = subprocess.run(["valgrind", "--tool=dhat"] + flags +
                       ["--dhat-out-file=%s/dhat.%%p.json" % tmp] + cmd,
                       cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True)
    # the last process's summary (--trace-children: the final image)
    return list(dhat_output.summaries(p.stderr)[1].values())[-1]


def trace(name, fx, out, tmp):
    cmd, cwd = command_of(name, fx, out)
    tfile = os.path.join(tmp, name + ".jsonl")
    env = dict(CLEAN_ENV, AT_OUT=tfile, AT_BIN=cmd[0], AT_ARGS=json.dumps(cmd[1:]))
    subprocess.run(["gdb", "-nx", "-batch", "-x", os.path.join(HERE, "alloc_trace.py")],
                   cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    res = {}
    for mode in ([], ["--group-names"]):
        p = subprocess.run([sys.executable, os.path.join(HERE, "account.py"), tfile] + mode,
                           capture_output=True, text=True, check=True)
        res[bool(mode)] = json.loads(p.stdout)
    evs = [json.loads(l) for l in open(tfile)]
    return res, evs


def reached(evs, img):
    """(outermost probed, probed but only nested, traced but not probed)"""
    evs = [e for e in evs if e["img"] == img]
    outer_ids = {id(e) for e in accounting.outermost(evs)}
    outer, nested, unprobed = set(), set(), set()
    for e in evs:
        label = " = ".join(e["names"])
        if not accounting.probed(e):
            unprobed.add(label)
        else:
            (outer if id(e) in outer_ids else nested).add(label)
    return sorted(outer), sorted(nested - outer), sorted(unprobed)


def main():
    args = sys.argv[1:]
    if "--no-build" in args and "--out" not in args:
        raise SystemExit("--no-build needs --out DIR: the directory built before")
    out = out_dir(args[args.index("--out") + 1] if "--out" in args else None,
                  "memtrack-allocators-verify-")
    print("writing into " + out)
    only = args[args.index("--only") + 1].split(",") if "--only" in args else None
    if "--no-build" not in args:
        subprocess.run([os.path.join(ROOT, "build.sh"), out], check=True)
    out = os.path.abspath(out)
    exp = json.load(open(os.path.join(ROOT, "expected.json")))
    tmp = tempfile.mkdtemp(prefix="memtrack-alloc-verify-", dir=out)
    reach = {}
    for name, fx in exp["fixtures"].items():
        if only and name not in only:
            continue
        print("== " + name)
        cmd, cwd = command_of(name, fx, out)
        p = subprocess.run(cmd, cwd=cwd, env=CLEAN_ENV, capture_output=True)
        check(name, "native exit code", p.returncode, fx["exit_code"])
        want = fx["processes"]["main"]
        final_exe = os.path.join(out, fx.get("final_image", name))
        want = apply_term(want, final_exe)
        if want.get("dhat"):
            check(name, "DHAT", dhat(name, fx, out, tmp), want["dhat"])
        res, evs = trace(name, fx, out, tmp)
        procs = {k: v for k, v in res[False].items() if "/" in k}
        gprocs = {k: v for k, v in res[True].items() if "/" in k}
        imgs = sorted(v["img"] for v in procs.values())
        last = max(imgs) if imgs else 0
        if name == "bump":
            check(name, "gdb trace: no allocator calls", len(evs), 0)
            reach[name] = ([], [], [])
            continue
        got = next(v for v in procs.values() if v["img"] == last)
        gotg = next(v for v in gprocs.values() if v["img"] == last)
        check(name, "gdb trace totals", got["totals"], want["totals"])
        check(name, "gdb trace functions", got["functions"], want["functions"])
        check(name, "gdb trace objects", got["objects"], want["objects"])
        if "functions_by_address" in want:
            check(name, "gdb trace functions_by_address", gotg["functions"],
                  want["functions_by_address"])
        ei = fx.get("earlier_images")
        if isinstance(ei, list):
            for i, img in enumerate(ei):
                g = [v for v in procs.values() if v["img"] == i]
                zero = json.loads(json.dumps(img["totals"]))
                check(name, "gdb trace earlier image %d totals" % i,
                      g[0]["totals"] if g else {k: 0 for k in zero}, img["totals"])
        reach[name] = reached(evs, last)
    print("\n== entry points reached (final image; '=' joins aliases at one address)")
    for name, (outer, nested, unprobed) in reach.items():
        print("%s:\n  outermost: %s\n  nested only: %s\n  traced, not probed: %s" % (
            name, "; ".join(outer) or "-", "; ".join(nested) or "-", "; ".join(unprobed) or "-"))
    print("\n%d checks, %d failed" % (checks[0], len(failures)))
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
