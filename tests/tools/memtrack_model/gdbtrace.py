"""gdbtrace.py - the part the gdb tracers share (tests/fixtures/tools/gdb_trace.py,
tests/allocators/tools/alloc_trace.py); importable only INSIDE gdb.

A breakpoint on the first instruction of an entry point (exactly where a
uprobe sits) opens a call; one on its return address, read from [rsp] at
entry and matched back to the call by thread and stack pointer (like a
uretprobe), closes it. A tail call (realloc -> jmp malloc) returns both calls
at once. depth = number of traced calls already active on the thread (0 =
outermost). Events are written as JSON lines.
"""
import json

import gdb

from . import symbols
from .accounting import MASK

ARG_REGS = ("rdi", "rsi", "rdx", "rcx")

SETTINGS = ("set pagination off", "set confirm off", "set startup-with-shell off",
            "set detach-on-fork on", "set print thread-events off",
            "set print inferior-events off")


def configure(*extra):
    for cmd in SETTINGS + extra:
        gdb.execute(cmd)


def reg(name):
    return int(gdb.parse_and_eval("$" + name)) & MASK


def read(addr, n):
    return gdb.selected_inferior().read_memory(addr, n).tobytes()


def read_u64(addr):
    return int.from_bytes(read(addr, 8), "little")


class EntryBreakpoint(gdb.Breakpoint):
    """First instruction of an entry point: at_names = every probed name at
    that address (the first names it), at_obj = the object defining it."""

    def __init__(self, spec, names, obj=None):
        super().__init__(spec, internal=True)
        self.at_names = names
        self.at_obj = obj


class ReturnBreakpoint(gdb.Breakpoint):
    """Breakpoint on a return address (shared by all calls returning there)."""


class Tracer:
    def __init__(self):
        self.events = []
        self.clock = 0
        self.stacks = {}          # (pid, lwp) -> active calls, outermost first
        self.ret_bps = {}         # return address -> ReturnBreakpoint
        self.last_stop = None
        gdb.events.stop.connect(self._on_stop)

    def _on_stop(self, ev):
        self.last_stop = ev

    def tick(self):
        self.clock += 1
        return self.clock

    def thread(self):
        """(pid, lwp) of the selected thread and its active calls."""
        th = gdb.selected_thread()
        key = (th.ptid[0], th.ptid[1])
        return key, self.stacks.setdefault(key, [])

    def enter(self, key, st, rsp, retaddr, head, nargs):
        """A call opens: event = head + pid, tid, args, depth, ret, t_entry."""
        e = dict(head)
        e.update({"pid": key[0], "tid": key[1],
                  "args": [reg(r) for r in ARG_REGS[:nargs]],
                  "depth": len(st), "ret": None, "t_entry": self.tick(), "_rsp": rsp})
        self.events.append(e)
        st.append(e)
        if retaddr not in self.ret_bps:
            self.ret_bps[retaddr] = ReturnBreakpoint("*0x%x" % retaddr, internal=True)
        return e

    def returned(self, st, rsp):
        """At a return breakpoint: every active call on this thread whose
        frame returned here ends (ret = rax; posix_memalign-like: "out" = the
        block stored in *memptr)."""
        for e in [e for e in st if e["_rsp"] + 8 == rsp]:
            e["ret"] = reg("rax")
            e["t_ret"] = self.tick()
            kind = symbols.lookup(e["fn"])[1]
            if kind[0] == "pm" and e["ret"] == 0:
                e["out"] = read_u64(e["args"][kind[1]])
            st.remove(e)

    def forget(self):
        """An image is gone (execve): drop its return breakpoints and calls."""
        for bp in self.ret_bps.values():
            bp.delete()
        self.ret_bps.clear()
        self.stacks.clear()

    def write(self, path):
        with open(path, "w") as f:
            for e in self.events:
                e.pop("_rsp", None)
                f.write(json.dumps(e) + "\n")
