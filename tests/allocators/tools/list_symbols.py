#!/usr/bin/env python3
"""list_symbols.py - the allocator entry points an ELF object defines, grouped
by address (aliases share one probe), as memtrack's discovery must see them.

usage: list_symbols.py ELF [ELF...] [--markdown]

For each object: every defined global function symbol (symtab if present,
else dynsym; nm --defined-only) that tests/tools/memtrack_model/symbols.py
knows (= must be probed), grouped by address; then the other allocation-related names it exports that
are NOT probed (queries such as malloc_usable_size, or allocating helpers
such as mi_strdup whose block size is not an argument) - for completeness.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from memtrack_model import elf, symbols  # noqa: E402

OTHER = re.compile(r"(alloc|free|^_Zn[wa]|^_Zd[la]|memalign|valloc|strdup|strndup|"
                   r"realpath|dupenv|wcsdup|mbsdup|expand|^mi_new|^tc_|^mi_heap_|^mi_theap_|"
                   r"usable_size|malloc_size|good_size|mallctl|mallinfo|mallopt|cfree)")


def defined(path):
    res = {}
    for dynamic in (False, True):
        for addr, _type, name in elf.nm_functions(path, dynamic):
            res.setdefault(name, addr)
    return res


def main():
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    for path in paths:
        syms = defined(path)
        groups = {}
        other = []
        for name, addr in syms.items():
            if symbols.lookup(name):
                groups.setdefault(addr, []).append(name)
            elif OTHER.search(name) and not name.startswith(
                    ("_rjem_je_", "__", "_ZN", "_R", "_mi_", "_dl_", "_IO_", "_nl_")):
                other.append(name)
        print("== %s: %d probed names at %d addresses" % (
            path, sum(len(v) for v in groups.values()), len(groups)))
        for addr, names in sorted(groups.items()):
            names.sort(key=lambda n: (symbols.symbolic(n) != n, n))
            print("  0x%06x  %s" % (addr, " = ".join(names)))
        if other:
            print("  not probed (queries/helpers): " + " ".join(sorted(other)))


if __name__ == "__main__":
    main()
