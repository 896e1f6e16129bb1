"""accounting.py - memtrack's accounting rules (tests/fixtures/README.md
"Accounting rules", tests/allocators/README.md "Accounting rules"), written
once: a small reference tracker.

Used by both account.py scripts (applied to gdb traces of real runs) and by
tests/allocators/tools/gen_expected.py (applied to hand-written call
sequences).

Proc holds one process (image): the known live blocks, the totals and the
per-function numbers, with the field names of expected.json (memtrack's
Stats / FunctionStats). A "block" is whatever identifies it: the address in
a trace, an id in a hand-written sequence.

Only outermost probed calls are accounted (outermost(): nested calls are part
of the outer one; libstdc++'s C++ operators are not probed, symbols.probed()).
Allocations take effect when the call returns, releases when it is entered
(timeline()); a successful realloc(p, n>0) releases p's block and hands out
the new one atomically (no transient old+new for the peak).
"""
from . import symbols

MASK = (1 << 64) - 1

TOTALS_FIELDS = ("alloc_calls", "free_calls", "bytes_allocated", "bytes_freed",
                 "live_blocks", "live_bytes", "peak_live_bytes",
                 "failed_allocs", "unmatched_frees")

# what valgrind DHAT prints (Total / At t-gmax / At t-end), as expected.json names it
DHAT_FIELDS = ("total_bytes", "total_blocks", "gmax_bytes", "gmax_blocks",
               "end_bytes", "end_blocks")


def zero_totals():
    return dict.fromkeys(TOTALS_FIELDS, 0)


class Proc:
    def __init__(self, realloc_like_name=None):
        """realloc_like_name(name) -> true: the function gets grows/shrinks as
        soon as it is seen (otherwise when it first acts like realloc)."""
        self.known = {}   # block -> size
        self.t = zero_totals()
        self.fn = {}
        self.anomalies = []
        self.gmax_blocks = 0     # live blocks when the peak was last raised
        self.realloc_like_name = realloc_like_name

    def f(self, name, realloc_like=False):
        if name not in self.fn:
            self.fn[name] = dict(calls=0, failures=0, bytes=0)
        if realloc_like or (self.realloc_like_name and self.realloc_like_name(name)):
            self.fn[name].setdefault("grows", 0)
            self.fn[name].setdefault("shrinks", 0)
        return self.fn[name]

    def alloc(self, fn, block, size):
        t = self.t
        if block in self.known:
            self.anomalies.append("address %s handed out while still live" % (
                "0x%x" % block if isinstance(block, int) else repr(block)))
        self.known[block] = size
        t["alloc_calls"] += 1
        t["bytes_allocated"] += size
        t["live_blocks"] += 1
        t["live_bytes"] += size
        if t["live_bytes"] > t["peak_live_bytes"]:
            t["peak_live_bytes"] = t["live_bytes"]
            self.gmax_blocks = t["live_blocks"]
        self.f(fn)["bytes"] += size

    def release(self, block, fn, count_bytes):
        """Release of a non-NULL pointer. Returns the block's size, or None
        (unmatched). count_bytes: the releasing function's "bytes" (free,
        operator delete...; not realloc's releases)."""
        t = self.t
        if block in self.known:
            size = self.known.pop(block)
            t["free_calls"] += 1
            t["bytes_freed"] += size
            t["live_blocks"] -= 1
            t["live_bytes"] -= size
            if count_bytes:
                self.f(fn)["bytes"] += size
            return size
        self.unmatched_free()
        return None

    def unmatched_free(self):
        self.t["unmatched_frees"] += 1

    def fail(self, fn):
        self.t["failed_allocs"] += 1
        self.f(fn)["failures"] += 1

    def realloc_like(self, fn, p, n, ret):
        self.f(fn, True)
        if not p:
            self.alloc(fn, ret, n) if ret else self.fail(fn)
            return
        if n == 0:
            self.release(p, fn, False)   # frees p and returns NULL: not a failure
            return
        if not ret:
            self.fail(fn)                # p stays valid
            return
        old = self.release(p, fn, False)  # atomically: release old, hand out new
        self.alloc(fn, ret, n)
        if old is not None:
            if n > old:
                self.f(fn)["grows"] += 1
            elif n < old:
                self.f(fn)["shrinks"] += 1

    def call(self, fn, e):
        """Apply one outermost call of a trace event e (e["fn"] a name of
        symbols.py, "args" the argument registers, "ret", posix_memalign's
        "out"), accounted under the function name fn. The call itself is
        counted by the caller (f(fn)["calls"] += 1)."""
        kind = symbols.lookup(e["fn"])[1]
        a, r = e["args"], e["ret"]
        k = kind[0]
        if k == "free":
            if a[kind[1]] != 0:
                self.release(a[kind[1]], fn, True)
        elif k == "alloc":
            self.alloc(fn, r, a[kind[1]]) if r else self.fail(fn)
        elif k == "calloc":
            n, s = a[kind[1]], a[kind[2]]
            if n * s > MASK or not r:
                self.fail(fn)
            else:
                self.alloc(fn, r, n * s)
        elif k == "pm":
            if (r & 0xffffffff) == 0:
                self.alloc(fn, e["out"], a[kind[2]])
            else:
                self.fail(fn)
        elif k == "realloc":
            self.realloc_like(fn, a[kind[1]], a[kind[2]], r)
        elif k == "reallocn":
            n, s = a[kind[2]], a[kind[3]]
            if n * s > MASK:
                self.f(fn, True)
                self.fail(fn)
            else:
                self.realloc_like(fn, a[kind[1]], n * s, r)
        else:
            self.anomalies.append("unsupported entry point reached: %s" % e["fn"])

    def dhat(self):
        """What DHAT would print for the same calls (if it saw them all)."""
        t = self.t
        return dict(zip(DHAT_FIELDS, (t["bytes_allocated"], t["alloc_calls"],
                                      t["peak_live_bytes"], self.gmax_blocks,
                                      t["live_bytes"], t["live_blocks"])))


def probed(e):
    """Is the traced call e one memtrack probes? Traces cover every entry point
    of symbols.py, memtrack leaves libstdc++'s C++ operators out (symbols.probed)."""
    return symbols.probed(e["fn"], e.get("obj"))


def outermost(evs):
    """The calls memtrack accounts, in entry order: probed calls that begin while
    no probed call is active on their thread (a block is counted once, at the
    outermost probed call). A traced call that is not probed is transparent:
    libstdc++'s operator new -> malloc is one call, malloc's. Each returned
    event gets "via": the (unprobed) traced calls enclosing it, outermost first
    (empty: its caller called it directly).

    A trace's "depth" counts every traced call active at entry; the enclosing
    calls are rebuilt from it per thread (calls nest: those active when a call
    begins are the first `depth` of the previous call's chain plus that call)."""
    chains = {}
    res = []
    for e in sorted(evs, key=lambda e: e["t_entry"]):
        st = chains.setdefault((e.get("pid"), e.get("tid"), e.get("img")), [])
        if len(st) < e["depth"]:
            raise SystemExit("trace out of order: depth %d after %d active calls: %r"
                             % (e["depth"], len(st), e))
        del st[e["depth"]:]
        if probed(e) and not any(probed(o) for o in st):
            e["via"] = [o["fn"] for o in st]
            res.append(e)
        st.append(e)
    return res


def timeline(evs):
    """The outermost probed calls of a trace (outermost()) in accounting order:
    releases at entry, everything else at return."""
    timed = []
    for e in outermost(evs):
        if e.get("ret") is None:
            raise SystemExit("call without return: %r" % e)
        kind = symbols.lookup(e["fn"])[1]
        timed.append((e["t_entry"] if kind[0] == "free" else e["t_ret"], e))
    timed.sort(key=lambda x: x[0])
    return [e for _, e in timed]


def account(evs, proc_key, fn_key):
    """Account the outermost probed calls of evs: {proc_key(e): Proc}, each
    call under the function name fn_key(e) (e["via"] set, see outermost())."""
    procs = {}
    for e in timeline(evs):
        pr = procs.setdefault(proc_key(e), Proc())
        fn = fn_key(e)
        pr.f(fn)["calls"] += 1
        pr.call(fn, e)
    return procs
