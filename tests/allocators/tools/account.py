#!/usr/bin/env python3
"""account.py - apply memtrack's accounting rules to an alloc_trace.py log:
a small reference tracker for every allocator family in
tests/tools/memtrack_model/symbols.py.

usage: account.py TRACE.jsonl [--img N] [--pid PID] [--group-names] [--list]

Only outermost probed calls are accounted: a block is counted once, at the
outermost probed entry point on its thread (jemalloc's operator new ->
aligned_alloc is one block, named "operator new"). libstdc++'s C++ operators
are traced but not probed (memtrack does not probe them): the malloc/free/
aligned_alloc they forward to is the outermost call (memtrack_model
accounting.outermost()). Allocations
take effect at return, frees at entry, realloc atomically at return
(tests/fixtures/README.md "Accounting rules"; the rules themselves are
tests/tools/memtrack_model/accounting.py, shared with
tests/fixtures/tools/account.py).

Function keys: the symbol the caller called when it went through a PLT stub
(memtrack_model/symbols.py symbolic(): the 20 C++ operators collapse into "operator
new", "operator new[]", "operator delete", "operator delete[]"), otherwise the
first alias at the probed address. A call reached through an unprobed libstdc++
operator is keyed by the first alias at its address: the program did not call
it (and after a tail call, `jmp free@plt`, the return address names the
program's call of the operator). --group-names keys by the probed address
instead: the first alias at that address (public C name, then C++ operator,
then allocator-specific name), i.e. what a tracker that only knows the
address can report; "address_groups" then lists the aliases of each reached address
that has more than one name.
--list prints every outermost probed call (with its backtrace if recorded).
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from memtrack_model import accounting, symbols  # noqa: E402


GROUPS = {}


def key_of(e, group_names):
    if group_names:
        # what a tracker that only knows the probed address can report: the
        # first alias (symbols.name_rank order), all aliases recorded
        GROUPS.setdefault(e["names"][0], e["names"])
        return symbols.symbolic(e["names"][0])
    c = e.get("called")
    if c and symbols.lookup(c) and not e.get("via"):
        return symbols.symbolic(c)
    return symbols.symbolic(e["names"][0])


def account(evs, group_names=False):
    return accounting.account(evs, lambda e: (e["pid"], e["img"]),
                              lambda e: key_of(e, group_names))


def obj_name(e):
    """basename of the probed object, without the version tail (libstdc++.so.6.0.30
    -> libstdc++.so.6); "exe" for the executable itself"""
    if e["obj"] == e["exe"]:
        return "exe"
    return re.sub(r"(\.so\.\d+)(\.[\d.]+)?$", r"\1", os.path.basename(e["obj"]))


def objects(evs, group_names):
    res = {}
    for e in accounting.outermost(evs):
        res.setdefault(key_of(e, group_names), set()).add(obj_name(e))
    return {k: sorted(v) for k, v in sorted(res.items())}


def main():
    args = sys.argv[1:]
    evs = [json.loads(line) for line in open(args[0])]
    if "--pid" in args:
        evs = [e for e in evs if e["pid"] == int(args[args.index("--pid") + 1])]
    if "--img" in args:
        evs = [e for e in evs if e["img"] == int(args[args.index("--img") + 1])]
    if "--list" in args:
        for e in accounting.outermost(evs):
            print("img%d %-20s called=%-22s via=%s args=%s ret=0x%x %s" % (
                e["img"], e["fn"], e.get("called"), ",".join(e["via"]) or "-",
                [hex(x) for x in e["args"][:3]], e["ret"] or 0,
                " <- ".join(e.get("bt", [])[1:])))
        return
    procs = account(evs, "--group-names" in args)
    outer = {id(e) for e in accounting.outermost(evs)}
    nested, unprobed = {}, {}
    for e in evs:
        if not accounting.probed(e):
            unprobed[e["fn"]] = unprobed.get(e["fn"], 0) + 1
        elif id(e) not in outer:
            nested[e["fn"]] = nested.get(e["fn"], 0) + 1
    out = {}
    for (pid, img), pr in sorted(procs.items()):
        mine = [e for e in evs if e["pid"] == pid and e["img"] == img]
        d = {"pid": pid, "img": img, "exe": mine[0]["exe"],
             "totals": pr.t, "functions": dict(sorted(pr.fn.items())),
             "objects": objects(mine, "--group-names" in args)}
        if pr.anomalies:
            d["anomalies"] = pr.anomalies
        out["%d/%d" % (pid, img)] = d
    out["nested_calls_ignored"] = nested
    out["unprobed_calls_traced"] = unprobed
    if GROUPS:
        out["address_groups"] = {symbols.symbolic(k) + " @ " + k: v
                                 for k, v in sorted(GROUPS.items()) if len(v) > 1}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
