# alloc_trace.py - reference trace of EVERY allocator entry point memtrack
# must probe (tools/symbols.py: glibc malloc family, the 20 C++ operator
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
# (operator new -> malloc), which the accounting then drops (depth > 0).
#
# Environment:
#   AT_OUT      output file (JSON lines), required
#   AT_BIN      program to run;  AT_ARGS  its arguments (JSON list, optional)
#   AT_BT       frames of backtrace to record for depth-0 calls (default 0)
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import symbols
except ImportError:  # gdb may not set __file__ usefully
    sys.path.insert(0, os.environ.get("AT_TOOLS", "."))
    import symbols

MASK = (1 << 64) - 1
out_path = os.environ["AT_OUT"]
bt_depth = int(os.environ.get("AT_BT", "0"))

events = []
clock = [0]
stacks = {}
last_stop = [None]
img = [0]
armed = {}          # path -> base
entry_bps = []
ret_bps = {}
plt_cache = {}
exe_path = [None]


def tick():
    clock[0] += 1
    return clock[0]


def reg(name):
    return int(gdb.parse_and_eval("$" + name)) & MASK


def read(addr, n):
    return gdb.selected_inferior().read_memory(addr, n).tobytes()


def elf_type(path):
    with open(path, "rb") as f:
        h = f.read(18)
    return int.from_bytes(h[16:18], "little")  # 2 = ET_EXEC, 3 = ET_DYN


def elf_symbols(path):
    """{addr: [names]} of global function symbols (symtab and dynsym)."""
    res = {}
    for extra in ([], ["-D"]):
        p = subprocess.run(["nm", "--defined-only"] + extra + [path],
                           capture_output=True, text=True)
        for line in p.stdout.splitlines():
            m = re.match(r"([0-9a-f]+) ([TWi]) ([^@\s]+)", line)
            if not m:
                continue
            name = m.group(3)
            if symbols.lookup(name) is None:
                continue
            names = res.setdefault(int(m.group(1), 16), [])
            if name not in names:
                names.append(name)
    for names in res.values():
        names.sort(key=name_rank)
    return res


def name_rank(name):
    """Order of aliases at one address: public C names, then C++ operators,
    then allocator-specific names, then glibc-private __libc_* aliases."""
    if name in symbols.GLIBC and not name.startswith("__"):
        return (0, list(symbols.GLIBC).index(name), name)
    if name in symbols.CXX:
        return (1, list(symbols.CXX).index(name), name)
    if name.startswith("__"):
        return (3, 0, name)
    return (2, 0, name)


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


def mappings(pid):
    objs = {}
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5]
            o = objs.setdefault(path, {"lo": lo, "hi": hi, "off0": None})
            o["lo"] = min(o["lo"], lo)
            o["hi"] = max(o["hi"], hi)
            if int(parts[2], 16) == 0 and o["off0"] is None:
                o["off0"] = lo
    return objs


def obj_of(pid, addr):
    for path, o in mappings(pid).items():
        if o["lo"] <= addr < o["hi"]:
            return path, o
    return None, None


class EntryBreakpoint(gdb.Breakpoint):
    def __init__(self, spec, names, obj):
        super().__init__(spec, internal=True)
        self.at_names = names
        self.at_obj = obj


class ReturnBreakpoint(gdb.Breakpoint):
    pass


class CatchBreakpoint(gdb.Breakpoint):
    """__cxa_begin_catch: a C++ exception has been caught. Every traced call
    on this thread whose frame lay at or below the catching frame was unwound
    (never returns): it ends here, with ret 0 and "unwound": true (for an
    allocating function: a failed allocation). Needed for operator new
    throwing std::bad_alloc (cxx_new_fail)."""


def arm(pid):
    for path, o in mappings(pid).items():
        if path in armed or o["off0"] is None:
            continue
        try:
            et = elf_type(path)
        except OSError:
            continue
        if et not in (2, 3):
            continue
        base = 0 if et == 2 else o["off0"]
        armed[path] = base
        for addr, names in sorted(elf_symbols(path).items()):
            entry_bps.append(EntryBreakpoint("*0x%x" % (base + addr), names, path))
        out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                             text=True).stdout
        m = re.search(r"^([0-9a-f]+) T __cxa_begin_catch", out, re.M)
        if m:
            entry_bps.append(CatchBreakpoint("*0x%x" % (base + int(m.group(1), 16)),
                                             internal=True))


def base_of(path):
    return armed.get(path)


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
    base = 0 if elf_type(path) == 2 else o["off0"]
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


def on_stop(ev):
    last_stop[0] = ev


gdb.events.stop.connect(on_stop)
for cmd in ("set pagination off", "set confirm off", "set startup-with-shell off",
            "set follow-fork-mode parent", "set detach-on-fork on",
            "set follow-exec-mode same", "set print thread-events off",
            "set print inferior-events off", "set print asm-demangle off"):
    gdb.execute(cmd)

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
    for bp in entry_bps + list(ret_bps.values()):
        bp.delete()
    entry_bps.clear()
    ret_bps.clear()
    armed.clear()
    stacks.clear()


def on_exec(pid):
    """A new image: probe it (the old one was disarmed at execve entry)."""
    disarm()
    img[0] += 1
    exe_path[0] = os.readlink("/proc/%d/exe" % pid)
    arm(pid)


def reg_ret_bp(addr):
    if addr not in ret_bps:
        ret_bps[addr] = ReturnBreakpoint("*0x%x" % addr, internal=True)


while True:
    if not any(i.pid for i in gdb.inferiors()):
        break
    last_stop[0] = None
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error as exc:
        if os.environ.get("AT_DEBUG"):
            sys.stderr.write("continue: %s\n" % exc)
        continue
    ev = last_stop[0]
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
    th = gdb.selected_thread()
    key = (th.ptid[0], th.ptid[1])
    st = stacks.setdefault(key, [])
    rsp = reg("rsp")
    for bp in ev.breakpoints:
        if isinstance(bp, CatchBreakpoint):
            for e in [e for e in st if e["_rsp"] <= rsp]:
                e["ret"] = 0
                e["unwound"] = True
                e["t_ret"] = tick()
                st.remove(e)
            continue
        if isinstance(bp, ReturnBreakpoint):
            done = [e for e in st if e["_rsp"] + 8 == rsp]
            for e in done:
                e["ret"] = reg("rax")
                e["t_ret"] = tick()
                kind = symbols.lookup(e["fn"])[1]
                if kind[0] == "pm" and e["ret"] == 0:
                    e["out"] = int.from_bytes(read(e["args"][kind[1]], 8), "little")
                st.remove(e)
        elif isinstance(bp, EntryBreakpoint):
            retaddr = int.from_bytes(read(rsp, 8), "little")
            e = {"img": img[0], "exe": exe_path[0], "fn": bp.at_names[0],
                 "names": bp.at_names, "obj": bp.at_obj,
                 "called": called_name(key[0], retaddr, reg("pc")),
                 "pid": key[0], "tid": key[1],
                 "args": [reg("rdi"), reg("rsi"), reg("rdx"), reg("rcx")],
                 "depth": len(st), "ret": None, "t_entry": tick(), "_rsp": rsp}
            if bt_depth and not st:
                e["bt"] = backtrace(bt_depth)
            events.append(e)
            st.append(e)
            reg_ret_bp(retaddr)

with open(out_path, "w") as f:
    for e in events:
        e.pop("_rsp", None)
        f.write(json.dumps(e) + "\n")
