# alloc_trace.py - reference trace of EVERY allocator entry point memtrack
# must probe (tests/tools/memtrack_model/symbols.py: glibc malloc family, the 20 C++ operator
# new/delete symbols, jemalloc *allocx (also "_rjem_"-prefixed, statically
# linked), mimalloc mi_*, tcmalloc tc_*), in the executable itself and in every
# shared object it maps, including ones dlopen()ed later and after execve().
# Run INSIDE gdb:   AT_OUT=trace.jsonl AT_BIN=./prog gdb -batch -x alloc_trace.py
#
# Like tests/fixtures/tools/gdb_trace.py (which it generalises): a breakpoint
# on the first instruction of each entry point (one per ADDRESS: aliases such
# as tcmalloc's free == operator delete == tc_free share one), and one on each
# return address, matched to its call by thread and stack pointer (like a
# uretprobe). This is exactly what uprobes see, so it includes calls made by
# libraries (libstdc++'s startup pool, tcmalloc's own init...) and nested calls
# (jemalloc's operator new -> aligned_alloc), which the accounting then drops;
# libstdc++'s operators are traced too, though memtrack does not probe them
# (the accounting sees through them: memtrack_model accounting.outermost()).
# The breakpoint/stack bookkeeping is tests/tools/memtrack_model/gdbtrace.py,
# shared with gdb_trace.py.
#
# Environment:
#   AT_OUT      output file (JSON lines), required
#   AT_BIN      program to run;  AT_ARGS  its arguments (JSON list, optional)
#   AT_BT       frames of backtrace to record for outermost probed calls (default 0)
#
# Event: {"img": exec generation (0 = first image), "exe": path, "fn": first
#   alias name, "names": all names at that address, "obj": object path,
#   "called": name the caller called when the call went through a PLT stub
#   (else null), "pid", "tid", "args": [rdi, rsi, rdx, rcx], "depth", "ret",
#   "out" (posix_memalign-like *memptr), "t_entry", "t_ret", ["bt"]}
import json
import os
import re
import subprocess
import sys

import gdb

sys.dont_write_bytecode = True  # keep the source tree clean
try:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "tools"))
    from memtrack_model import elf
except (NameError, ImportError):  # gdb may not set __file__ usefully:
    sys.path.insert(0, os.environ.get("AT_TOOLS", "."))  # the dir holding memtrack_model
    from memtrack_model import elf
from memtrack_model import symbols  # noqa: E402
from memtrack_model.accounting import MASK  # noqa: E402
from memtrack_model.gdbtrace import (EntryBreakpoint, ReturnBreakpoint, Tracer,  # noqa: E402
                                     configure, read, read_u64, reg)

out_path = os.environ["AT_OUT"]
bt_depth = int(os.environ.get("AT_BT", "0"))

tracer = Tracer()
img = [0]
armed = {}          # path -> base
entry_bps = []
plt_cache = {}
exe_path = [None]


def plt_map(path):
    """{offset of PLT stub: symbol} from objdump (mangled names)."""
    if path not in plt_cache:
        m = {}
        p = subprocess.run(["objdump", "-d", "-j", ".plt", "-j", ".plt.sec", path],
                           capture_output=True, text=True)
        for line in p.stdout.splitlines():
            mm = re.match(r"([0-9a-f]+) <([^>@]+)@plt>:", line)
            if mm:
                m[int(mm.group(1), 16)] = mm.group(2)
        plt_cache[path] = m
    return plt_cache[path]


def obj_of(pid, addr):
    for path, o in elf.mappings(pid).items():
        if o["lo"] <= addr < o["hi"]:
            return path, o
    return None, None


class CatchBreakpoint(gdb.Breakpoint):
    """__cxa_begin_catch: a C++ exception has been caught. Every traced call
    on this thread whose frame lay at or below the catching frame was unwound
    (never returns): it ends here, with ret 0 and "unwound": true (for an
    allocating function: a failed allocation). Needed for operator new
    throwing std::bad_alloc (cxx_new_fail)."""


def arm(pid):
    for path, o in elf.mappings(pid).items():
        if path in armed or o["off0"] is None:
            continue
        try:
            et = elf.elf_type(path)
        except OSError:
            continue
        if et not in (2, 3):
            continue
        base = 0 if et == 2 else o["off0"]
        armed[path] = base
        for addr, names in sorted(elf.probed_by_address(path).items()):
            entry_bps.append(EntryBreakpoint("*0x%x" % (base + addr), names, path))
        catch = [addr for addr, t, name in elf.nm_functions(path, dynamic=True)
                 if t == "T" and name == "__cxa_begin_catch"]
        if catch:
            entry_bps.append(CatchBreakpoint("*0x%x" % (base + catch[0]), internal=True))


def called_name(pid, retaddr, entry):
    """Name the caller used, if it called through a PLT stub."""
    try:
        b = read(retaddr - 5, 5)
    except gdb.MemoryError:
        return None
    if b[0] != 0xE8:
        return None
    target = (retaddr + int.from_bytes(b[1:], "little", signed=True)) & MASK
    if target == entry:
        return None           # direct call: ambiguous between aliases
    path, o = obj_of(pid, target)
    if path is None:
        return None
    base = 0 if elf.elf_type(path) == 2 else o["off0"]
    return plt_map(path).get(target - base)


def backtrace(n):
    frames = []
    f = gdb.newest_frame()
    while f is not None and len(frames) < n:
        nm = f.name()
        if nm is None:
            try:
                nm = gdb.execute("info symbol 0x%x" % f.pc(), to_string=True).strip()
            except gdb.error:
                nm = "0x%x" % f.pc()
        frames.append(nm)
        try:
            f = f.older()
        except gdb.error:
            break
    return frames


configure("set follow-fork-mode parent", "set follow-exec-mode same",
          "set print asm-demangle off")

gdb.execute("file " + os.environ["AT_BIN"])
args = json.loads(os.environ.get("AT_ARGS", "[]"))
if args:
    # with startup-with-shell off gdb splits the argument string on blanks
    # and honours no quoting; with it on, gdb's startup shell parses the
    # string and execs the program (that exec is not reported: starti stops
    # at the program's first instruction, as without the shell)
    import shlex
    gdb.execute("set startup-with-shell on")
    gdb.execute("set args " + " ".join(shlex.quote(a) for a in args))
gdb.execute("set stop-on-solib-events 1")
gdb.execute("starti", to_string=True)
exec_catch = gdb.execute("catch exec", to_string=True)
exec_bpnum = int(re.search(r"Catchpoint (\d+)", exec_catch).group(1))
# execve: remove every "*ADDR" breakpoint at the syscall's ENTRY. Left in
# place, gdb tries to re-insert them into the new image, fails (the old
# libraries are gone) and aborts its exec handling (no catchpoint stop, no
# shared-library events for the new image).
sc_catch = gdb.execute("catch syscall execve execveat", to_string=True)
sc_bpnum = int(re.search(r"Catchpoint (\d+)", sc_catch).group(1))
in_execve = [False]
pid = gdb.selected_inferior().pid
exe_path[0] = os.readlink("/proc/%d/exe" % pid)
arm(pid)


def disarm():
    for bp in entry_bps:
        bp.delete()
    entry_bps.clear()
    armed.clear()
    tracer.forget()


def on_exec(pid):
    """A new image: probe it (the old one was disarmed at execve entry)."""
    disarm()
    img[0] += 1
    exe_path[0] = os.readlink("/proc/%d/exe" % pid)
    arm(pid)


while True:
    if not any(i.pid for i in gdb.inferiors()):
        break
    tracer.last_stop = None
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error as exc:
        if os.environ.get("AT_DEBUG"):
            sys.stderr.write("continue: %s\n" % exc)
        continue
    ev = tracer.last_stop
    if os.environ.get("AT_DEBUG"):
        sys.stderr.write("stop: %r %r\n" % (type(ev), [b.number for b in getattr(ev, "breakpoints", [])]))
    if ev is None:
        continue
    pid = gdb.selected_inferior().pid
    if not pid:
        continue
    if isinstance(ev, gdb.BreakpointEvent) and any(b.number == exec_bpnum for b in ev.breakpoints):
        on_exec(pid)
        continue
    if isinstance(ev, gdb.BreakpointEvent) and any(b.number == sc_bpnum for b in ev.breakpoints):
        if not in_execve[0]:        # entry: disarm before the kernel replaces the image
            in_execve[0] = True
            disarm()
        else:                       # return (failed execve, or after the exec stop)
            in_execve[0] = False
            arm(pid)
        continue
    if not isinstance(ev, gdb.BreakpointEvent):
        arm(pid)            # solib event: map new objects (dlopen included)
        continue
    key, st = tracer.thread()
    rsp = reg("rsp")
    for bp in ev.breakpoints:
        if isinstance(bp, CatchBreakpoint):
            for e in [e for e in st if e["_rsp"] <= rsp]:
                e["ret"] = 0
                e["unwound"] = True
                e["t_ret"] = tracer.tick()
                st.remove(e)
            continue
        if isinstance(bp, ReturnBreakpoint):
            tracer.returned(st, rsp)
        elif isinstance(bp, EntryBreakpoint):
            retaddr = read_u64(rsp)
            outermost = not any(symbols.probed(o["fn"], o["obj"]) for o in st)
            e = tracer.enter(key, st, rsp, retaddr, {
                "img": img[0], "exe": exe_path[0], "fn": bp.at_names[0],
                "names": bp.at_names, "obj": bp.at_obj,
                "called": called_name(key[0], retaddr, reg("pc"))}, 4)
            if bt_depth and outermost:
                e["bt"] = backtrace(bt_depth)

tracer.write(out_path)
