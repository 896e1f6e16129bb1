#!/usr/bin/env python3
"""account.py - apply memtrack's accounting rules to an alloc_trace.py log:
a small reference tracker for every allocator family in tools/symbols.py.

usage: account.py TRACE.jsonl [--img N] [--pid PID] [--group-names] [--list]

Only outermost calls (depth 0 on their thread) are accounted: a block is
counted once, at the outermost probed entry point the program called
(operator new -> malloc is one block, named "operator new"). Allocations
take effect at return, frees at entry, realloc atomically at return
(tests/fixtures/README.md "Accounting rules").

Function keys: the symbol the caller called when it went through a PLT stub
(tools/symbols.py symbolic(): the 20 C++ operators collapse into "operator
new", "operator new[]", "operator delete", "operator delete[]"), otherwise the
first alias at the probed address. --group-names keys by the probed address
instead: the first alias at that address (public C name, then C++ operator,
then allocator-specific name), i.e. what a tracker that only knows the
address can report; "address_groups" then lists the aliases of each reached address
that has more than one name.
--list prints every depth-0 call (with its backtrace if recorded).
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, __import__("os").path.dirname(__file__))
import symbols  # noqa: E402

MASK = (1 << 64) - 1


class Proc:
    def __init__(self):
        self.known = {}
        self.t = dict(alloc_calls=0, free_calls=0, bytes_allocated=0, bytes_freed=0,
                      live_blocks=0, live_bytes=0, peak_live_bytes=0,
                      failed_allocs=0, unmatched_frees=0)
        self.fn = {}
        self.anomalies = []

    def f(self, name, realloc_like=False):
        if name not in self.fn:
            self.fn[name] = dict(calls=0, failures=0, bytes=0)
        if realloc_like:
            self.fn[name].setdefault("grows", 0)
            self.fn[name].setdefault("shrinks", 0)
        return self.fn[name]

    def alloc(self, fn, addr, size):
        t = self.t
        if addr in self.known:
            self.anomalies.append("address 0x%x handed out while still live" % addr)
        self.known[addr] = size
        t["alloc_calls"] += 1
        t["bytes_allocated"] += size
        t["live_blocks"] += 1
        t["live_bytes"] += size
        t["peak_live_bytes"] = max(t["peak_live_bytes"], t["live_bytes"])
        self.f(fn)["bytes"] += size

    def release(self, addr, fn, count_bytes):
        t = self.t
        if addr in self.known:
            size = self.known.pop(addr)
            t["free_calls"] += 1
            t["bytes_freed"] += size
            t["live_blocks"] -= 1
            t["live_bytes"] -= size
            if count_bytes:
                self.f(fn)["bytes"] += size
            return size
        t["unmatched_frees"] += 1
        return None

    def fail(self, fn):
        self.t["failed_allocs"] += 1
        self.f(fn)["failures"] += 1

    def realloc_like(self, fn, p, n, ret):
        self.f(fn, True)
        if p == 0:
            self.alloc(fn, ret, n) if ret else self.fail(fn)
            return
        if n == 0:
            self.release(p, fn, False)
            return
        if not ret:
            self.fail(fn)
            return
        t = self.t
        old = None
        if p in self.known:
            old = self.known.pop(p)
            t["free_calls"] += 1
            t["bytes_freed"] += old
            t["live_blocks"] -= 1
            t["live_bytes"] -= old
        else:
            t["unmatched_frees"] += 1
        self.alloc(fn, ret, n)
        if old is not None:
            if n > old:
                self.f(fn)["grows"] += 1
            elif n < old:
                self.f(fn)["shrinks"] += 1


GROUPS = {}


def key_of(e, group_names):
    if group_names:
        # what a tracker that only knows the probed address can report: the
        # first alias (alloc_trace.py name_rank order), all aliases recorded
        GROUPS.setdefault(e["names"][0], e["names"])
        return symbols.symbolic(e["names"][0])
    c = e.get("called")
    if c and symbols.lookup(c):
        return symbols.symbolic(c)
    return symbols.symbolic(e["names"][0])


def account(evs, group_names=False):
    evs = [e for e in evs if e["depth"] == 0]
    timeline = []
    for e in evs:
        if e.get("ret") is None:
            raise SystemExit("call without return: %r" % e)
        kind = symbols.lookup(e["fn"])[1]
        timeline.append((e["t_entry"] if kind[0] == "free" else e["t_ret"], e))
    timeline.sort(key=lambda x: x[0])
    procs = {}
    for _, e in timeline:
        pr = procs.setdefault((e["pid"], e["img"]), Proc())
        kind = symbols.lookup(e["fn"])[1]
        fn = key_of(e, group_names)
        a, r = e["args"], e["ret"]
        pr.f(fn)["calls"] += 1
        k = kind[0]
        if k == "free":
            if a[kind[1]] != 0:
                pr.release(a[kind[1]], fn, True)
        elif k == "alloc":
            pr.alloc(fn, r, a[kind[1]]) if r else pr.fail(fn)
        elif k == "calloc":
            n, s = a[kind[1]], a[kind[2]]
            if n * s > MASK or not r:
                pr.fail(fn)
            else:
                pr.alloc(fn, r, n * s)
        elif k == "pm":
            if (r & 0xffffffff) == 0:
                pr.alloc(fn, e["out"], a[kind[2]])
            else:
                pr.fail(fn)
        elif k == "realloc":
            pr.realloc_like(fn, a[kind[1]], a[kind[2]], r)
        elif k == "reallocn":
            n, s = a[kind[2]], a[kind[3]]
            if n * s > MASK:
                pr.f(fn, True)
                pr.fail(fn)
            else:
                pr.realloc_like(fn, a[kind[1]], n * s, r)
        else:
            pr.anomalies.append("unsupported entry point reached: %s" % e["fn"])
    return procs


def obj_name(e):
    """basename of the probed object, without the version tail (libstdc++.so.6.0.30
    -> libstdc++.so.6); "exe" for the executable itself"""
    if e["obj"] == e["exe"]:
        return "exe"
    return re.sub(r"(\.so\.\d+)(\.[\d.]+)?$", r"\1", os.path.basename(e["obj"]))


def objects(evs, group_names):
    res = {}
    for e in evs:
        if e["depth"] == 0:
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
        for e in evs:
            if e["depth"] == 0:
                print("img%d %-20s called=%-22s args=%s ret=0x%x %s" % (
                    e["img"], e["fn"], e.get("called"), [hex(x) for x in e["args"][:3]],
                    e["ret"] or 0, " <- ".join(e.get("bt", [])[1:])))
        return
    procs = account(evs, "--group-names" in args)
    nested = {}
    for e in evs:
        if e["depth"] > 0:
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
    if GROUPS:
        out["address_groups"] = {symbols.symbolic(k) + " @ " + k: v
                                 for k, v in sorted(GROUPS.items()) if len(v) > 1}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
