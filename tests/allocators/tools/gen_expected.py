#!/usr/bin/env python3
"""gen_expected.py - writes ../expected.json from the call sequences below
(derived from the fixture sources and, for code outside them - libstdc++,
tcmalloc, Rust std, glibc's ld.so/pthread_getattr_np - from the code paths
named in the comments, identified by the gdb traces' backtraces).
Nothing here is read from a trace; tools/verify.py checks the result against
gdb traces and valgrind DHAT.

usage: python3 tools/gen_expected.py > expected.json

Op tuples (one per allocator call the process makes, in order):
  ("A", sym, obj, size, id)           allocation of size bytes -> block id
  ("X", sym, obj)                     failed allocation (NULL)
  ("F", sym, obj, id or None)         release of block id (None: free(NULL), a call only)
  ("R", sym, obj, old_id, size, id)   realloc-like; old_id None = realloc(NULL, size)
  ("U", sym, obj)                     release of a pointer that is not a known block (unmatched)
sym = the symbol the caller called (mangled for C++); obj = where it resolved.
Optional last element {"dhat": False}: valgrind DHAT cannot see this call.
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from memtrack_model import accounting, elf, symbols  # noqa: E402

LIBDIR = "/usr/lib/x86_64-linux-gnu/"
LIBC, STDCXX = "libc.so.6", "libstdc++.so.6"
JE, MI, TC = "libjemalloc.so.2", "libmimalloc.so.2", "libtcmalloc_minimal.so.4"
NODHAT = {"dhat": False}

# ---------------------------------------------------------------- cxx_mix

# What each operator of libstdc++ 12 (libstdc++.so.6.0.30) calls, always through
# libstdc++'s PLT (so a hop to an operator the allocator library defines lands
# there). Checked: `gdb -batch -ex 'disassemble SYM' libstdc++.so.6.0.30` for all
# 20, and the nested calls in the gdb traces of cxx_mix_glibc/cxx_new_fail_glibc:
#   _Znwm(n)                   malloc(n ? n : 1); NULL -> new_handler, else throw
#                              std::bad_alloc
#   _ZnwmSt11align_val_t(n, a) aligned_alloc(a, (max(n, 1) + a - 1) & -a) (rounded
#                              up to a multiple of a, C11); NULL -> as _Znwm
#   nothrow new                try { return <the throwing one>(n[, a]); }
#                              catch (...) { return nullptr; }
#   new[] -> new, delete[] -> delete, sized and nothrow deletes -> the plain one
#   _ZdlPv, _ZdlPvSt11align_val_t   jmp free@plt (tail call)
# memtrack does not probe them (symbols.probed()): the call they forward to is
# the probed one.
STDCXX_CALLS = {
    "_Znwm": "malloc", "_Znam": "_Znwm",
    "_ZnwmRKSt9nothrow_t": "_Znwm", "_ZnamRKSt9nothrow_t": "_Znam",
    "_ZnwmSt11align_val_t": "aligned_alloc", "_ZnamSt11align_val_t": "_ZnwmSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t": "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t": "_ZnamSt11align_val_t",
    "_ZdlPv": "free", "_ZdaPv": "_ZdlPv", "_ZdlPvm": "_ZdlPv", "_ZdaPvm": "_ZdaPv",
    "_ZdlPvRKSt9nothrow_t": "_ZdlPv", "_ZdaPvRKSt9nothrow_t": "_ZdaPv",
    "_ZdlPvSt11align_val_t": "free", "_ZdaPvSt11align_val_t": "_ZdlPvSt11align_val_t",
    "_ZdlPvmSt11align_val_t": "_ZdlPvSt11align_val_t",
    "_ZdaPvmSt11align_val_t": "_ZdaPvSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t": "_ZdlPvSt11align_val_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t": "_ZdaPvSt11align_val_t",
}
C_FUNCTIONS = ("malloc", "aligned_alloc", "free")
# std::bad_alloc thrown by a failing operator new: __cxa_allocate_exception(8)
# mallocs 8 + 128 (its __cxa_refcounted_exception header); __cxa_end_catch frees it
BAD_ALLOC_OBJECT = 136
NESTED = "nested"        # an exception object allocated inside a probed call: no block


class CxxCalls:
    """The probed calls a C++ program's operator calls become. o_new = the
    allocator library whose operator new/delete interpose libstdc++'s (STDCXX:
    none), o_c = the process's malloc. An operator o_new does not define binds
    to libstdc++'s, which memtrack does not probe (symbols.probed()): it is
    replaced by the call it makes (STDCXX_CALLS), through the PLT, until a
    probed function is reached (libmimalloc.so.2 has no nothrow operator
    delete: libstdc++'s calls mimalloc's plain one). Such a call carries
    {"via": the operator the program called}: the program did not call it, it
    is keyed by the probed function (the first alias at its address)."""

    def __init__(self, o_new, o_c):
        self.ops = []
        self.o_new, self.o_c = o_new, o_c
        self.defined = {} if o_new == STDCXX else ALIAS_GROUPS[o_new]
        self.exceptions = 0

    def where(self, sym):
        if sym in C_FUNCTIONS:
            return self.o_c
        return self.o_new if sym in self.defined else STDCXX

    @staticmethod
    def opts(via):
        return ({"via": via[0]},) if via else ()

    def new(self, sym, size, bid, align=None, fail=False, via=()):
        """The program calls operator new `sym`(size[, align]) -> block bid;
        fail: the allocation fails. Returns None, or for a failure that throws
        std::bad_alloc what the catch block frees (caught())."""
        obj = self.where(sym)
        if symbols.probed(sym, obj):
            if fail:
                self.ops.append(("X", sym, obj) + self.opts(via))
                # a throwing operator of an allocator library allocates the
                # exception object inside the probed call
                return None if "nothrow" in sym or sym in C_FUNCTIONS else NESTED
            self.ops.append(("A", sym, obj, size, bid) + self.opts(via))
            return None
        nxt = STDCXX_CALLS[sym]
        n = size
        if nxt == "malloc":
            n = max(size, 1)
        elif nxt == "aligned_alloc":
            n = (max(size, 1) + align - 1) & -align
        thrown = self.new(nxt, n, bid, align, fail, via + (sym,))
        if fail and nxt in C_FUNCTIONS:
            # libstdc++'s operator new throws std::bad_alloc: the exception object
            # is malloc'ed outside any probed call, a block of its own
            self.exceptions += 1
            thrown = "bad_alloc%d" % self.exceptions
            self.ops.append(("A", "malloc", self.o_c, BAD_ALLOC_OBJECT, thrown)
                            + self.opts(via + (sym,)))
        if thrown is not None and "nothrow" in sym:
            self.caught(thrown, via + (sym,))     # the nothrow operator catches it
            return None
        return thrown

    def caught(self, thrown, via=()):
        """A catch block of std::bad_alloc ends: __cxa_end_catch frees the
        exception object, outside any probed call (a free of an unknown
        pointer if it was allocated inside one)."""
        if thrown == NESTED:
            self.ops.append(("U", "free", self.o_c) + self.opts(via))
        else:
            self.ops.append(("F", "free", self.o_c, thrown) + self.opts(via))

    def delete(self, sym, bid, via=()):
        """The program calls operator delete `sym` of block bid."""
        obj = self.where(sym)
        if symbols.probed(sym, obj):
            self.ops.append(("F", sym, obj, bid) + self.opts(via))
        else:
            self.delete(STDCXX_CALLS[sym], bid, via + (sym,))


def cxx_program(o_new, o_c):
    """cxx_mix.cpp main() (see CxxCalls)."""
    c = CxxCalls(o_new, o_c)
    A, F = c.new, c.delete
    # 1. vector<int>, 9 push_backs: capacities 1,2,4,8,16. _M_realloc_insert
    #    allocates the new buffer, moves, then frees the old one (sized delete:
    #    __new_allocator::deallocate -> operator delete(p, n*sizeof(int)))
    A("_Znwm", 4, "v1")
    A("_Znwm", 8, "v2"); F("_ZdlPvm", "v1")
    A("_Znwm", 16, "v4"); F("_ZdlPvm", "v2")
    A("_Znwm", 32, "v8"); F("_ZdlPvm", "v4")
    A("_Znwm", 64, "v16"); F("_ZdlPvm", "v8")
    F("_ZdlPvm", "v16")                                   # ~vector
    A("_Znwm", 32, "p"); F("_ZdlPvm", "p")                # 2. new Pod / delete
    A("_Znam", 40, "a"); F("_ZdaPv", "a")                 # 3. new int[10] / delete[]
    A("_Znam", 68, "w"); F("_ZdaPvm", "w")                # 4. new WithDtor[3]: 3*20 + 8 cookie
    A("_ZnwmSt11align_val_t", 64, "x", 64); F("_ZdlPvmSt11align_val_t", "x")      # 5.
    A("_ZnamSt11align_val_t", 128, "xa", 64); F("_ZdaPvSt11align_val_t", "xa")    # 6.
    A("_ZnamSt11align_val_t", 192, "xd", 64); F("_ZdaPvmSt11align_val_t", "xd")   # 7. 64 cookie + 2*64
    A("_ZnwmRKSt9nothrow_t", 32, "n"); F("_ZdlPvm", "n")                          # 8.
    A("_ZnamRKSt9nothrow_t", 24, "na"); F("_ZdaPv", "na")
    A("_ZnwmSt11align_val_tRKSt9nothrow_t", 64, "nx", 64); F("_ZdlPvmSt11align_val_t", "nx")
    A("_ZnamSt11align_val_tRKSt9nothrow_t", 192, "nxa", 64); F("_ZdaPvSt11align_val_t", "nxa")
    A("_Znwm", 100, "r"); F("_ZdlPv", "r")                                        # 9.
    A("_ZnwmRKSt9nothrow_t", 50, "r2"); F("_ZdlPvRKSt9nothrow_t", "r2")
    A("_ZnamRKSt9nothrow_t", 70, "r3"); F("_ZdaPvRKSt9nothrow_t", "r3")
    A("_ZnwmSt11align_val_t", 128, "r4", 64); F("_ZdlPvSt11align_val_t", "r4")
    A("_ZnwmSt11align_val_tRKSt9nothrow_t", 256, "r5", 128)
    F("_ZdlPvSt11align_val_tRKSt9nothrow_t", "r5")
    A("_ZnamSt11align_val_tRKSt9nothrow_t", 96, "r6", 32)
    F("_ZdaPvSt11align_val_tRKSt9nothrow_t", "r6")
    ops = c.ops
    ops += [("A", "malloc", o_c, 200, "m"), ("F", "free", o_c, "m"),                # 11.
            ("A", "calloc", o_c, 120, "c"), ("F", "free", o_c, "c"),
            ("A", "malloc", o_c, 10, "g"), ("R", "realloc", o_c, "g", 1000, "g2"),
            ("F", "free", o_c, "g2")]
    A("_Znwm", 32, "leak")                                                        # 12.
    return ops


HUGE = (1 << 63)         # SIZE_MAX/2 + 1 > PTRDIFF_MAX: every allocator fails at once


def cxx_new_fail_program(o_new, o_c, throwing):
    """cxx_new_fail.cpp main() (see CxxCalls).
    1. nothrow new[] -> nullptr. libstdc++: _ZnamRKSt9nothrow_t -> _Znam -> _Znwm
       -> malloc(huge) NULL -> throw std::bad_alloc (exception object malloc(136))
       -> caught inside the nothrow operator (__cxa_end_catch: free). None of the
       operators is probed: the failed malloc, the exception object and its free
       are outermost calls. Allocator libraries' nothrow operators return NULL.
    2. operator new(huge) throws std::bad_alloc, caught in main, whose
       __cxa_end_catch frees the exception object outside any allocator call.
       libstdc++: malloc fails, the exception object is a block, freed. An
       allocator library's probed operator new fails (the call ends by
       unwinding, not by returning); the exception object it allocated inside
       is no block, so its free is unmatched."""
    c = CxxCalls(o_new, o_c)
    c.new("_ZnamRKSt9nothrow_t", HUGE, None, fail=True)
    if throwing:
        c.caught(c.new("_Znwm", HUGE, None, fail=True))
    return c.ops


def cxx_variants(program=None):
    # libstdc++'s emergency exception-handling pool: a static initializer in
    # libstdc++ (eh_alloc.cc, pool::pool) mallocs 72704 bytes before main
    # (EMERGENCY_OBJ_SIZE * EMERGENCY_OBJ_COUNT + EMERGENCY_OBJ_COUNT *
    # sizeof(__cxa_dependent_exception)); never freed (only __gnu_cxx::__freeres,
    # which valgrind calls unless --run-cxx-freeres=no, frees it).
    pool = lambda o: [("A", "malloc", o, 72704, "eh_pool")]
    # tcmalloc 2.10 TCMallocGuard::TCMallocGuard() (static initializer of
    # libtcmalloc_minimal, runs after libstdc++'s): tc_free(tc_malloc(1)) twice
    # (thread-cache set-up), then MallocExtension::Register(new
    # TCMallocImplementation) -> operator new(16), and inside Register
    # InitModule's `new MallocExtension` -> operator new(8). Both never freed.
    # Calls go through libtcmalloc's own PLT (tc_malloc / tc_free / _Znwm).
    tc_init = [("A", "tc_malloc", TC, 1, "tc1"), ("F", "tc_free", TC, "tc1"),
               ("A", "tc_malloc", TC, 1, "tc2"), ("F", "tc_free", TC, "tc2"),
               ("A", "_Znwm", TC, 16, "tc_impl"), ("A", "_Znwm", TC, 8, "tc_ext")]
    prog = program or (lambda o_new, o_c, v: cxx_program(o_new, o_c))
    return {
        "glibc": {"lib": None, "link": "", "ops": pool(LIBC) + prog(STDCXX, LIBC, "glibc"),
                  "startup": ["libstdc++ emergency pool: malloc(72704), live"]},
        "jemalloc": {"lib": JE, "link": "-ljemalloc", "ops": pool(JE) + prog(JE, JE, "jemalloc"),
                     "startup": ["libstdc++ emergency pool: malloc(72704) -> jemalloc's malloc, live",
                                 "jemalloc itself: none (its init uses internal functions and mmap)"]},
        "mimalloc": {"lib": MI, "link": "-lmimalloc", "ops": pool(MI) + prog(MI, MI, "mimalloc"),
                     "startup": ["libstdc++ emergency pool: malloc(72704) -> mimalloc's malloc, live",
                                 "mimalloc itself: none"]},
        "tcmalloc": {"lib": TC, "link": "-ltcmalloc_minimal",
                     "ops": pool(TC) + tc_init + prog(TC, TC, "tcmalloc"),
                     "startup": ["libstdc++ emergency pool: malloc(72704) -> tcmalloc's malloc, live",
                                 "TCMallocGuard: tc_malloc(1)+tc_free twice, operator new(16) "
                                 "(TCMallocImplementation) and operator new(8) (MallocExtension), "
                                 "both live: +4 allocs / 26 B, +2 frees / 2 B, +2 live / 24 B"]},
    }

# ---------------------------------------------------------------- Rust

# Rust std start-up, Linux, Rust 1.95: std::rt::init ->
# stack_overflow::init -> install_main_guard_linux -> get_stack_start ->
# glibc pthread_getattr_np(main thread), which reads /proc/self/maps with stdio
# and sets the cpu affinity in the attr (glibc 2.36 nptl/pthread_getattr_np.c):
GETATTR = [
    ("A", "malloc", LIBC, 472, "file"),       # fopen: the FILE
    ("A", "malloc", LIBC, 120, "line"),       # getline: initial line buffer (120)
    ("A", "malloc", LIBC, 1024, "iobuf"),     # first read: stdio buffer (st_blksize 1024)
    ("R", "realloc", LIBC, "line", 240, "line2"),  # a maps line >= 120 chars (the ld.so
                                              # line is exactly 120 with its '\n')
    ("F", "free", LIBC, "line2"),             # free(line)
    ("F", "free", LIBC, "iobuf"),             # fclose
    ("F", "free", LIBC, "file"),
    ("R", "realloc", LIBC, None, 32, "cpuset"),    # cpuset, size 32 (256 CPUs) fits
    ("A", "calloc", LIBC, 152, "attrext"),    # pthread_attr_setaffinity_np: attr extension
    ("R", "realloc", LIBC, None, 32, "cpuset2"),   # ... its copy of the cpuset
    ("F", "free", LIBC, "cpuset"),
    ("F", "free", LIBC, "cpuset2"),           # pthread_attr_destroy
    ("F", "free", LIBC, "attrext"),
]


def rust_ops(kind):
    """kind: system | jemalloc | mimalloc. GlobalAlloc call -> entry point:
    system (std::alloc::System): alloc -> malloc (align <= 16 and <= size) or
      posix_memalign; alloc_zeroed -> calloc(size, 1); realloc -> realloc; dealloc -> free
    tikv-jemallocator 0.7.0: alloc -> _rjem_malloc (flags 0) / _rjem_mallocx(size,
      MALLOCX_LG_ALIGN(6)) when over-aligned; alloc_zeroed -> _rjem_calloc(1, size);
      realloc -> _rjem_realloc; dealloc -> _rjem_sdallocx(p, size, flags)
    mimalloc 0.1.52: alloc -> mi_malloc_aligned(size, align); alloc_zeroed ->
      mi_zalloc_aligned; realloc -> mi_realloc_aligned; dealloc -> mi_free"""
    if kind == "system":
        o = LIBC
        al, ala, az, re_, de = "malloc", "posix_memalign", "calloc", "realloc", "free"
        extra = {}
    elif kind == "jemalloc":
        o = "exe"
        al, ala, az, re_, de = "_rjem_malloc", "_rjem_mallocx", "_rjem_calloc", "_rjem_realloc", "_rjem_sdallocx"
        extra = NODHAT
    else:
        o = "exe"
        al, ala, az, re_, de = "mi_malloc_aligned", "mi_malloc_aligned", "mi_zalloc_aligned", "mi_realloc_aligned", "mi_free"
        extra = NODHAT

    def op(*t):
        return t + ((extra,) if extra else ())
    ops = list(GETATTR)
    # std start-up (Rust 1.95): stack_overflow::thread_info registers the main
    # thread: its name "main" as a Box<str> (4 B) and the BTreeMap leaf node
    # holding the entry (LeafNode<usize, ThreadInfo>, 544 B).
    ops += [op("A", al, o, 4, "name"), op("A", al, o, 544, "btnode")]
    # workload (src/lib.rs)
    ops.append(op("A", al, o, 80, "boxes"))
    ops += [op("A", al, o, 100, "b%d" % i) for i in range(10)]
    ops += [op("F", de, o, "b%d" % i) for i in range(10)]
    ops.append(op("F", de, o, "boxes"))
    ops += [op("A", al, o, 32, "v4"), op("R", re_, o, "v4", 64, "v8"),
            op("R", re_, o, "v8", 24, "v3"), op("F", de, o, "v3")]
    ops += [op("A", ala, o, 64, "al64"), op("F", de, o, "al64")]
    ops += [op("A", az, o, 65536, "zero"), op("F", de, o, "zero")]
    ops.append(op("A", al, o, 48, "leak"))
    # after main: the thread_info entry is removed (name freed; the empty
    # BTreeMap keeps its root node)
    ops.append(op("F", de, o, "name"))
    if kind == "mimalloc":
        # mimalloc's process-exit hook (mi_process_done -> _mi_thread_locals_done)
        # calls the exported mi_free(NULL): a call, no release
        ops.append(op("F", "mi_free", o, None))
    return ops

# ---------------------------------------------------------------- dlopen

def dlopen_ops():
    J = lambda *t: t
    ops = [("A", "malloc", LIBC, 300, "a"),
           ("A", "calloc", LIBC, 100, "b"), ("F", "free", LIBC, "b")]
    # dlopen("libjemalloc.so.2", RTLD_NOW|RTLD_LOCAL): ld.so allocates through
    # libc's malloc/calloc/free (__rtld_malloc & co point to them once libc is
    # relocated); these calls are not nested in any probed function, so they
    # count. Loads libjemalloc.so.2 and its not-yet-loaded DT_NEEDED libm.so.6,
    # libstdc++.so.6, libgcc_s.so.1 (paths from ld.so.cache, "/lib/x86_64-linux-gnu/...").
    dl = []
    for i, (path_len) in enumerate([38, 31, 36, 35]):   # jemalloc, libm, libstdc++, libgcc_s
        dl += [("A", "malloc", LIBC, path_len + 1, "path%d" % i),        # _dl_load_cache_lookup: strdup(path)
               ("A", "calloc", LIBC, 1202 + path_len + 1, "map%d" % i),  # _dl_new_object: link_map + name
               ("A", "malloc", LIBC, path_len + 1, "origin%d" % i)]      # _dl_new_object: l_origin
    dl += [("A", "malloc", LIBC, 56, "deps0"),    # _dl_map_object_deps: search lists /
           ("A", "malloc", LIBC, 88, "deps1"),    # l_initfini arrays of the new maps
           ("A", "malloc", LIBC, 40, "deps2"),
           ("A", "malloc", LIBC, 104, "deps3"),
           # _dl_check_map_versions: l_versions (ndx+1) * 24 per new object
           ("A", "calloc", LIBC, 19 * 24, "ver0"), ("A", "calloc", LIBC, 21 * 24, "ver1"),
           ("A", "calloc", LIBC, 69 * 24, "ver2"), ("A", "calloc", LIBC, 19 * 24, "ver3"),
           # relocation: do_lookup_unique (libstdc++'s STB_GNU_UNIQUE symbols):
           # table calloc(32, 31), grown to 61 and 127 entries, old tables freed;
           # add_dependency: l_reldeps (88)
           ("A", "calloc", LIBC, 32 * 31, "uniq31"), ("A", "calloc", LIBC, 32 * 61, "uniq61"),
           ("F", "free", LIBC, "uniq31"),
           ("A", "malloc", LIBC, 88, "reldeps"),
           ("A", "calloc", LIBC, 32 * 127, "uniq127"), ("F", "free", LIBC, "uniq61"),
           # _dl_find_object_update: temporary array (freed) + a mappings segment
           ("A", "malloc", LIBC, 32, "dlfo_tmp"), ("A", "malloc", LIBC, 2304, "dlfo_seg"),
           ("F", "free", LIBC, "dlfo_tmp"),
           # libstdc++ static initializer (run by dlopen): emergency EH pool. Its
           # malloc resolves in the global scope first -> glibc's, not jemalloc's.
           ("A", "malloc", LIBC, 72704, "eh_pool")]
    ops += dl
    # through the dlsym()ed jemalloc functions (jemalloc initializes itself
    # in its constructor during dlopen, without calling any probed symbol)
    ops += [("A", "malloc", JE, 1000 + i, "j%d" % i) for i in range(5)]
    ops += [("A", "mallocx", JE, 4096, "x%d" % i, NODHAT) for i in range(3)]
    ops += [("A", "mallocx", JE, 256, "x3", NODHAT)]
    ops += [("F", "free", JE, "j%d" % i) for i in range(5)]
    ops += [("F", "dallocx", JE, "x%d" % i, NODHAT) for i in range(4)]
    ops += [("F", "free", JE, None), ("A", "malloc", JE, 77, "jleak")]
    ops += [("A", "malloc", LIBC, 500, "z"), ("F", "free", LIBC, "z")]
    return ops

# ---------------------------------------------------------------- exec

def allocs_program(o):
    return [("A", "malloc", o, 1000, "a"), ("A", "calloc", o, 100, "b"),
            ("R", "realloc", o, "a", 2000, "a2"), ("A", "malloc", o, 300000, "c"),
            ("F", "free", o, "b"), ("F", "free", o, "c"), ("F", "free", o, "a2"),
            ("F", "free", o, None), ("A", "malloc", o, 64, "d")]


def static_startup(dir_term):
    """glibc 2.36 static start-up: __libc_init_first -> _dl_non_dynamic_init
    (a dynamic executable gets these from ld.so's internal minimal malloc
    instead, which is not probed). All live at exit."""
    o = "exe"
    return [("A", "malloc", o, dir_term, "origin", NODHAT),  # _dl_get_origin: dirname(/proc/self/exe) + "/" + NUL
            ("A", "calloc", o, 1225, "vdso_map", NODHAT),    # _dl_new_object (setup_vdso): the vDSO's link_map
            ("A", "malloc", o, 40, "sysdirs", NODHAT),       # _dl_init_paths: rtld_search_dirs.dirs (4+1 ptrs)
            ("A", "malloc", o, 320, "sysdirs2", NODHAT),     # _dl_init_paths: the 4 system dirs' r_search_path_elems
            ("A", "malloc", o, 160, "dlfo", NODHAT)]         # _dl_find_object_init


def pre_exec_ops():
    return [("A", "malloc", LIBC, 111, "p1"), ("A", "malloc", LIBC, 222, "p2"),
            ("F", "free", LIBC, "p2"), ("A", "calloc", LIBC, 90, "p3")]

# ---------------------------------------------------------------- simulator

REALLOC_LIKE = re.compile(r"realloc|rallocx")


def address_name(sym, obj):
    """The report name of the probed function at sym's address in obj: its
    first alias (symbols.name_rank order)."""
    g = ALIAS_GROUPS.get(obj, {}).get(sym)
    return symbols.symbolic(g[0]) if g else symbols.symbolic(sym)


def call_key(sym, obj, opts):
    """functions key: what the caller called; a call reached through an
    unprobed libstdc++ operator ("via") by the probed function it reached."""
    return address_name(sym, obj) if opts.get("via") else symbols.symbolic(sym)


def simulate(ops, key=call_key, dhat=False):
    """Apply the accounting rules (memtrack_model/accounting.py) to an op list:
    (totals, functions), or with dhat=True what DHAT prints for the ops it sees."""
    pr = accounting.Proc(realloc_like_name=REALLOC_LIKE.search)

    def live(bid):
        if bid not in pr.known:
            raise KeyError(bid)      # an op list that releases an unknown block is wrong
        return bid

    for op in ops:
        opts = op[-1] if isinstance(op[-1], dict) else {}
        if dhat and opts.get("dhat", True) is False:
            continue
        kind, sym, obj = op[0], op[1], op[2]
        name = key(sym, obj, opts)
        pr.f(name)["calls"] += 1
        if kind == "A":
            pr.alloc(name, op[4], op[3])
        elif kind == "X":
            pr.fail(name)
        elif kind == "U":
            pr.unmatched_free()
        elif kind == "F":
            if op[3] is not None:
                pr.release(live(op[3]), name, True)
        elif kind == "R":
            pr.realloc_like(name, op[3] and live(op[3]), op[4], op[5])
    if dhat:
        return pr.dhat()
    return pr.t, dict(sorted(pr.fn.items()))

# ---------------------------------------------------------------- aliases

def alias_groups(path):
    """{symbol: [all probed names at its address]} from the library's dynsym
    (in symbols.name_rank order, as alloc_trace.py sees them)."""
    res = {}
    for names in elf.probed_by_address(path, tables=(True,), check=True).values():
        for n in names:
            res[n] = names
    return res


def by_address_key(sym, obj, opts):
    return address_name(sym, obj)


def reached_groups(ops, groups_by_obj):
    res = {}
    for op in ops:
        g = groups_by_obj.get(op[2], {}).get(op[1])
        if g and len(g) > 1:
            res[symbols.symbolic(g[0]) + " @ " + g[0]] = g
    return dict(sorted(res.items()))


def objects_of(ops):
    res = {}
    for op in ops:
        opts = op[-1] if isinstance(op[-1], dict) else {}
        res.setdefault(call_key(op[1], op[2], opts), set()).add(op[2])
    return {k: sorted(v) for k, v in sorted(res.items())}

# ---------------------------------------------------------------- output

def proc_entry(ops, groups_by_obj=None, dhat=True, extra=None):
    totals, fns = simulate(ops)
    e = {"totals": totals, "functions": fns, "objects": objects_of(ops)}
    if groups_by_obj:
        _, fba = simulate(ops, key=by_address_key)
        if fba != fns:
            e["functions_by_address"] = fba
            e["address_groups"] = reached_groups(ops, groups_by_obj)
    if dhat:
        e["dhat"] = simulate(ops, dhat=True)
    if extra:
        e.update(extra)
    return e


def path_term(make_ops, fields_note):
    """expected numbers for a term T (path-dependent size): value at T=0 plus
    the list of fields that grow by T."""
    a = proc_entry(make_ops(0), dhat=False)
    b = proc_entry(make_ops(1), dhat=False)
    plus = [k for k in a["totals"] if a["totals"][k] != b["totals"][k]]
    plus += ["functions.%s.%s" % (fn, k) for fn in a["functions"] for k in a["functions"][fn]
             if a["functions"][fn][k] != b["functions"][fn][k]]
    a["plus_term"] = {"term": fields_note, "fields": plus}
    return a


ALIAS_GROUPS = {}


def main():
    groups = ALIAS_GROUPS
    groups.update({JE: alias_groups(LIBDIR + JE), MI: alias_groups(LIBDIR + MI),
                   TC: alias_groups(LIBDIR + TC), LIBC: alias_groups("/lib/x86_64-linux-gnu/libc.so.6"),
                   STDCXX: alias_groups(LIBDIR + STDCXX)})
    fixtures = {}
    for v, d in cxx_variants().items():
        entry = proc_entry(d["ops"], groups)
        entry["startup"] = d["startup"]
        prog = proc_entry(cxx_program(d["lib"] or STDCXX, d["lib"] or LIBC), dhat=False)
        entry["program_only"] = {"totals": prog["totals"], "functions": prog["functions"]}
        fixtures["cxx_mix_" + v] = {
            "source": "cxx_mix.cpp", "exit_code": 0, "allocator": d["lib"] or "glibc + libstdc++",
            "build": ("g++ -std=gnu++17 -O0 -fno-builtin -fsized-deallocation -o cxx_mix_%s cxx_mix.cpp %s"
                      % (v, d["link"])).strip(),
            "dhat_flags": "--run-libc-freeres=no --run-cxx-freeres=no" +
                          (" --soname-synonyms=somalloc=%s" % d["lib"] if d["lib"] else ""),
            "processes": {"main": entry}}
    nf = cxx_variants(lambda o_new, o_c, v: cxx_new_fail_program(o_new, o_c, v != "mimalloc"))
    for v, d in nf.items():
        entry = proc_entry(d["ops"], groups, dhat=False)
        entry["startup"] = d["startup"]
        entry["program_only"] = proc_entry(
            cxx_new_fail_program(d["lib"] or STDCXX, d["lib"] or LIBC, v != "mimalloc"),
            dhat=False)["totals"]
        flag = " -DFX_NO_THROWING_NEW" if v == "mimalloc" else ""
        fixtures["cxx_new_fail_" + v] = {
            "source": "cxx_new_fail.cpp", "exit_code": 0, "allocator": d["lib"] or "glibc + libstdc++",
            "build": ("g++ -std=gnu++17 -O0 -fno-builtin -fsized-deallocation%s -o cxx_new_fail_%s "
                      "cxx_new_fail.cpp %s" % (flag, v, d["link"])).strip(),
            "unwinds_through_operator_new": v != "mimalloc",
            "dhat": None,
            "dhat_note": "not DHAT-checkable: valgrind's replacement operator new aborts instead of "
                         "throwing std::bad_alloc",
            "processes": {"main": entry}}
        if v == "glibc":
            entry["totals_note"] = (
                "memtrack does not probe libstdc++'s operator new/delete (they forward to "
                "malloc/free, and a return probe on a throwing operator new makes the exception "
                "unwinding fail): the two failures are malloc's, and the two std::bad_alloc "
                "exception objects (__cxa_allocate_exception: malloc(8 + 128) = 136 B each) are "
                "allocations of their own, freed when caught.")
    for kind in ("system", "jemalloc", "mimalloc"):
        ops = rust_ops(kind)
        e = proc_entry(ops)
        e["components"] = {
            "glibc_pthread_getattr_np": proc_entry(GETATTR, dhat=False)["totals"],
            "rust_level": simulate([o for o in ops if o not in GETATTR])[0]}
        fixtures[kind + "_fixture"] = {
            "source": "rust/src/bin/%s_fixture.rs + rust/src/lib.rs" % kind, "exit_code": 0,
            "allocator": {"system": "glibc (std::alloc::System)",
                          "jemalloc": "tikv-jemallocator 0.7.0 (jemalloc 5.3.1, static, _rjem_*)",
                          "mimalloc": "mimalloc 0.1.52 (libmimalloc-sys, mimalloc v3, static, mi_*)"}[kind],
            "dhat_flags": "--run-libc-freeres=no --run-cxx-freeres=no",
            "dhat_note": "DHAT sees only glibc's malloc family: for jemalloc/mimalloc_fixture that is "
                         "the pthread_getattr_np part" if kind != "system" else "DHAT sees everything",
            "processes": {"main": e}}
    ops = dlopen_ops()
    e = proc_entry(ops)
    e["functions_by_object"] = {
        LIBC: simulate([o for o in ops if o[2] == LIBC])[1],
        JE: simulate([o for o in ops if o[2] == JE])[1]}
    e["functions_note"] = ("'functions' merges same-named functions of libc.so.6 and "
                           "libjemalloc.so.2 (malloc, free); functions_by_object separates them")
    fixtures["dlopen_jemalloc"] = {
        "source": "dlopen_jemalloc.c", "exit_code": 0, "images": 2,
        "earlier_images": [{"exe": "dlopen_jemalloc (before its self re-exec)",
                            "totals": simulate([])[0], "functions": {}}],
        "dhat_flags": "--trace-children=yes --run-libc-freeres=no --run-cxx-freeres=no",
        "dhat_note": "DHAT intercepts jemalloc's malloc/free too, but not mallocx/dallocx",
        "processes": {"main": e}}
    term = "len(dirname(realpath(executable))) + 2  (glibc _dl_get_origin: malloc(strlen(dir) + 1 + 1))"
    for name, target_static in (("static_allocs", True), ("dynamic_allocs", False)):
        if target_static:
            e = path_term(lambda T: static_startup(T) + allocs_program("exe"), term)
            e["program_only"] = proc_entry(allocs_program("exe"), dhat=False)["totals"]
            fixtures[name] = {"source": "static_allocs.c", "exit_code": 0, "static": True,
                              "dhat": None, "processes": {"main": e}}
        else:
            fixtures[name] = {"source": "static_allocs.c", "exit_code": 0, "static": False,
                              "processes": {"main": proc_entry(allocs_program(LIBC))}}
    pre = proc_entry(pre_exec_ops(), dhat=False)
    for name, target in (("exec_static", "static_allocs"), ("exec_dynamic", "dynamic_allocs")):
        fixtures[name] = {
            "source": "exec_static.c", "exit_code": 0, "images": 2,
            "final_image": target,
            "dhat_flags": "--trace-children=yes --run-libc-freeres=no --run-cxx-freeres=no",
            "earlier_images": [{"exe": name, "totals": pre["totals"], "functions": pre["functions"]}],
            "processes": {"main": fixtures[target]["processes"]["main"]}}
    fixtures["sh_exec_static"] = {
        "command": ["/bin/sh", "-c", "exec ./static_allocs"], "cwd": "OUT_DIR", "exit_code": 0,
        "final_image": "static_allocs",
        "earlier_images": "not specified (/bin/sh = dash: its own mallocs, ~45 blocks)",
        "environment": "no LD_LIBRARY_PATH (the static image's _dl_init_paths would allocate more)",
        "processes": {"main": fixtures["static_allocs"]["processes"]["main"]}}
    fixtures["bump"] = {
        "source": "bump.c", "exit_code": 0, "allocator": "none (no libc, no known symbol)",
        "expect": "no allocator entry point found; every counter 0; tracking must not fail",
        "processes": {"main": {"totals": simulate([])[0], "functions": {},
                               "syscalls_note": "1 mmap (1 MiB) + 1 munmap, no brk"}}}
    doc = {
        "format": "memtrack allocator fixture expectations v1",
        "conventions": {
            "base": "tests/fixtures/README.md and expected.json conventions (totals, requested sizes, "
                    "realloc atomic, nested calls not counted, free(NULL) a call only, lost_events 0)",
            "scope": "whole process from exec to exit of the FINAL image; images before an execve "
                     "are in earlier_images (informational)",
            "layers": "every allocator entry point reached is probed, except the C++ operators "
                      "defined in libstdc++.so.6 (memtrack does not probe them: they forward to "
                      "malloc/aligned_alloc/free, through which their calls are counted); a block is "
                      "counted once, at the outermost probed call on the thread (jemalloc's operator "
                      "new -> aligned_alloc = 1 block, 'operator new'; libstdc++'s operator new -> "
                      "malloc = 1 block, 'malloc'); calls made by libraries outside any probed call (libstdc++'s "
                      "pool, ld.so during dlopen, glibc's pthread_getattr_np, tcmalloc's init, Rust std) "
                      "are ordinary calls and count",
            "functions": "keyed by the symbol the caller called: the 20 C++ operators collapse into "
                         "'operator new', 'operator new[]', 'operator delete', 'operator delete[]' "
                         "(incl. nothrow, sized, aligned variants); jemalloc/mimalloc/tcmalloc names as "
                         "exported (mallocx, _rjem_malloc, mi_malloc_aligned, tc_malloc...); a call reached "
                         "through an unprobed libstdc++ operator by the probed function it reached (first "
                         "alias at its address: malloc, aligned_alloc, free...). bytes: "
                         "allocating functions the requested bytes handed out; releasing functions "
                         "(free, operator delete*, sdallocx, dallocx, mi_free...) the known bytes they "
                         "released; realloc-like functions (realloc, *_realloc*, rallocx) also grows/shrinks",
            "functions_by_address": "present where the allocator library puts several of those names at "
                                    "ONE address (mimalloc, tcmalloc): a uprobe cannot tell them apart, so "
                                    "this is what an address-keyed tracker can report, each address named "
                                    "after its first alias (public C name, then C++ operator in the order "
                                    "new, new[], nothrow..., delete, delete[]..., then allocator names); "
                                    "address_groups lists the aliases of every reached multi-name address",
            "objects": "which object(s) define each reached function (the probe site)",
            "plus_term": "numbers depend on a path length: the value given is for term = 0; add the term "
                         "to every listed field",
            "dhat": "valgrind 3.19 DHAT Total/t-gmax/t-end with dhat_flags; covers only calls DHAT can "
                    "intercept (see each fixture's dhat_note)",
            "environment": "no GLIBC_TUNABLES (except what dlopen_jemalloc sets for itself), MALLOC_*, "
                           "LD_PRELOAD, LD_LIBRARY_PATH, MALLOC_CONF, MIMALLOC_*, TCMALLOC_*; "
                           "kernel with <= 256 possible CPUs (Rust pthread_getattr_np cpuset); "
                           "executable paths shorter than 166 bytes (one getline realloc)"},
        "fixtures": fixtures}
    json.dump(doc, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
