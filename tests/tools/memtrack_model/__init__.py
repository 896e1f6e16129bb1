"""memtrack_model - the code the fixture verification tools share
(tests/fixtures/tools/ and tests/allocators/tools/): plain Python 3 standard
library, no dependencies.

  symbols.py     the allocator entry points, their argument layout, probed()
  accounting.py  the accounting rules (a reference tracker): Proc, outermost(), timeline(),
                 account()
  elf.py         nm symbols, ELF type, /proc/PID/maps
  dhat.py        valgrind DHAT summary lines -> expected.json "dhat" fields
  gdbtrace.py    entry/return breakpoints and the call stacks of the gdb tracers
                 (inside gdb only)
  outdir.py      out_dir(): the tools' output directory (a new random one by default,
                 a given one checked: not a link, not another user's)

Scripts import it with
    sys.dont_write_bytecode = True  # keep the source tree clean
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "tools"))
"""
