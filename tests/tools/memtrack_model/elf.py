"""elf.py - ELF objects as the tracers and tables see them: defined function
symbols (nm), the ELF type, and where objects are mapped in a process.
Plain functions (no gdb), shared by the gdb tracers, gen_expected.py and
list_symbols.py."""
import re
import subprocess

from . import symbols

# "ADDR T name[@[@]VERSION]": defined global functions (T), weak (W), ifuncs (i)
NM_FUNCTION = re.compile(r"([0-9a-f]+) ([TWi]) ([^@\s]+)")


def nm_functions(path, dynamic=False, check=False):
    """[(addr, type, name)] of the defined global function symbols nm lists
    (.symtab, or .dynsym with dynamic), version suffix dropped, in nm's order."""
    out = subprocess.run(["nm", "--defined-only"] + (["-D"] if dynamic else []) + [path],
                         capture_output=True, text=True, check=check).stdout
    res = []
    for line in out.splitlines():
        m = NM_FUNCTION.match(line)
        if m:
            res.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return res


def probed_by_address(path, tables=(False, True), check=False):
    """{addr: [names]} of the entry points of symbols.py that path defines
    (tables: .symtab and/or .dynsym), each address's aliases in
    symbols.name_rank order (the first one names the address)."""
    res = {}
    for dynamic in tables:
        for addr, _type, name in nm_functions(path, dynamic, check):
            if symbols.lookup(name) is None:
                continue
            names = res.setdefault(addr, [])
            if name not in names:
                names.append(name)
    for names in res.values():
        names.sort(key=symbols.name_rank)
    return res


def elf_type(path):
    with open(path, "rb") as f:
        h = f.read(18)
    return int.from_bytes(h[16:18], "little")  # 2 = ET_EXEC, 3 = ET_DYN


def mappings(pid):
    """{path: {"lo", "hi", "off0"}} of the file-backed mappings of pid: the
    address range of each object and where its file offset 0 is mapped (the
    load base of an ET_DYN object)."""
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
