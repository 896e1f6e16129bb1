"""symbols.py - the allocator entry points memtrack's discovery must probe,
with their argument layout. Shared by the gdb tracers
(tests/fixtures/tools/gdb_trace.py, tests/allocators/tools/alloc_trace.py),
the reference accounting (accounting.py, used by both account.py scripts),
tests/allocators/tools/gen_expected.py and list_symbols.py (README tables).
probed(): which of them memtrack leaves unprobed (libstdc++'s C++ operators).

Each entry: NAME -> (kind, argument indexes). Registers: 0=rdi 1=rsi 2=rdx 3=rcx.
  ("alloc", s)            returns a block of arg[s] bytes (NULL = failure)
  ("calloc", n, s)        returns a block of arg[n]*arg[s] bytes
  ("pm", m, s)            posix_memalign-like: returns 0 and stores the block in *arg[m]
  ("realloc", p, s)       realloc-like: arg[p] (may be NULL) resized to arg[s]
  ("reallocn", p, n, s)   realloc-like with arg[n]*arg[s] bytes
  ("free", p)             releases arg[p] (NULL = no-op)
  ("inplace", p, s)       resizes arg[p] in place (jemalloc xallocx, mi_expand): not an
                          allocation; listed so the tracker knows them, never reached here
The Rust tikv-jemallocator build prefixes every jemalloc symbol with "_rjem_";
strip the prefix and look the rest up here.
"""

GLIBC = {
    "malloc": ("alloc", 0), "calloc": ("calloc", 0, 1), "realloc": ("realloc", 0, 1),
    "reallocarray": ("reallocn", 0, 1, 2), "free": ("free", 0), "cfree": ("free", 0),
    "aligned_alloc": ("alloc", 1), "memalign": ("alloc", 1),
    "posix_memalign": ("pm", 0, 2), "valloc": ("alloc", 0), "pvalloc": ("alloc", 0),
    # aliases some allocators export (same address as the public name)
    "__libc_malloc": ("alloc", 0), "__libc_calloc": ("calloc", 0, 1),
    "__libc_realloc": ("realloc", 0, 1), "__libc_free": ("free", 0),
    "__libc_cfree": ("free", 0), "__libc_memalign": ("alloc", 1),
    "__libc_valloc": ("alloc", 0), "__libc_pvalloc": ("alloc", 0),
    "__posix_memalign": ("pm", 0, 2),
}

CXX = {
    "_Znwm": ("alloc", 0), "_Znam": ("alloc", 0),
    "_ZnwmRKSt9nothrow_t": ("alloc", 0), "_ZnamRKSt9nothrow_t": ("alloc", 0),
    "_ZnwmSt11align_val_t": ("alloc", 0), "_ZnamSt11align_val_t": ("alloc", 0),
    "_ZnwmSt11align_val_tRKSt9nothrow_t": ("alloc", 0),
    "_ZnamSt11align_val_tRKSt9nothrow_t": ("alloc", 0),
    "_ZdlPv": ("free", 0), "_ZdaPv": ("free", 0),
    "_ZdlPvm": ("free", 0), "_ZdaPvm": ("free", 0),
    "_ZdlPvRKSt9nothrow_t": ("free", 0), "_ZdaPvRKSt9nothrow_t": ("free", 0),
    "_ZdlPvSt11align_val_t": ("free", 0), "_ZdaPvSt11align_val_t": ("free", 0),
    "_ZdlPvmSt11align_val_t": ("free", 0), "_ZdaPvmSt11align_val_t": ("free", 0),
    "_ZdlPvSt11align_val_tRKSt9nothrow_t": ("free", 0),
    "_ZdaPvSt11align_val_tRKSt9nothrow_t": ("free", 0),
}

JEMALLOC = {
    "mallocx": ("alloc", 0), "rallocx": ("realloc", 0, 1), "xallocx": ("inplace", 0, 1),
    "sdallocx": ("free", 0), "dallocx": ("free", 0),
}

MIMALLOC = {
    "mi_malloc": ("alloc", 0), "mi_calloc": ("calloc", 0, 1), "mi_realloc": ("realloc", 0, 1),
    "mi_free": ("free", 0), "mi_zalloc": ("alloc", 0), "mi_malloc_small": ("alloc", 0),
    "mi_zalloc_small": ("alloc", 0), "mi_mallocn": ("calloc", 0, 1),
    "mi_reallocn": ("reallocn", 0, 1, 2), "mi_reallocf": ("realloc", 0, 1),
    "mi_rezalloc": ("realloc", 0, 1), "mi_recalloc": ("reallocn", 0, 1, 2),
    "mi_expand": ("inplace", 0, 1),
    "mi_malloc_aligned": ("alloc", 0), "mi_malloc_aligned_at": ("alloc", 0),
    "mi_zalloc_aligned": ("alloc", 0), "mi_zalloc_aligned_at": ("alloc", 0),
    "mi_calloc_aligned": ("calloc", 0, 1), "mi_calloc_aligned_at": ("calloc", 0, 1),
    "mi_realloc_aligned": ("realloc", 0, 1), "mi_realloc_aligned_at": ("realloc", 0, 1),
    "mi_rezalloc_aligned": ("realloc", 0, 1), "mi_rezalloc_aligned_at": ("realloc", 0, 1),
    "mi_recalloc_aligned": ("reallocn", 0, 1, 2), "mi_recalloc_aligned_at": ("reallocn", 0, 1, 2),
    "mi_free_size": ("free", 0), "mi_free_aligned": ("free", 0),
    "mi_free_size_aligned": ("free", 0), "mi_cfree": ("free", 0),
    "mi_new": ("alloc", 0), "mi_new_nothrow": ("alloc", 0), "mi_new_aligned": ("alloc", 0),
    "mi_new_aligned_nothrow": ("alloc", 0), "mi_new_n": ("calloc", 0, 1),
    "mi_new_realloc": ("realloc", 0, 1), "mi_new_reallocn": ("reallocn", 0, 1, 2),
    "mi_posix_memalign": ("pm", 0, 2), "mi_memalign": ("alloc", 1),
    "mi_aligned_alloc": ("alloc", 1), "mi_valloc": ("alloc", 0), "mi_pvalloc": ("alloc", 0),
    "mi_reallocarray": ("reallocn", 0, 1, 2),
    # heap-explicit variants (first argument is the heap)
    "mi_heap_malloc": ("alloc", 1), "mi_heap_zalloc": ("alloc", 1),
    "mi_heap_calloc": ("calloc", 1, 2), "mi_heap_malloc_small": ("alloc", 1),
    "mi_heap_mallocn": ("calloc", 1, 2), "mi_heap_realloc": ("realloc", 1, 2),
    "mi_heap_reallocn": ("reallocn", 1, 2, 3), "mi_heap_reallocf": ("realloc", 1, 2),
    "mi_heap_rezalloc": ("realloc", 1, 2), "mi_heap_recalloc": ("reallocn", 1, 2, 3),
    "mi_heap_malloc_aligned": ("alloc", 1), "mi_heap_malloc_aligned_at": ("alloc", 1),
    "mi_heap_zalloc_aligned": ("alloc", 1), "mi_heap_zalloc_aligned_at": ("alloc", 1),
    "mi_heap_calloc_aligned": ("calloc", 1, 2), "mi_heap_calloc_aligned_at": ("calloc", 1, 2),
    "mi_heap_realloc_aligned": ("realloc", 1, 2), "mi_heap_realloc_aligned_at": ("realloc", 1, 2),
    "mi_heap_rezalloc_aligned": ("realloc", 1, 2), "mi_heap_rezalloc_aligned_at": ("realloc", 1, 2),
    "mi_heap_recalloc_aligned": ("reallocn", 1, 2, 3),
    "mi_heap_recalloc_aligned_at": ("reallocn", 1, 2, 3),
    "mi_heap_alloc_new": ("alloc", 1), "mi_heap_alloc_new_n": ("calloc", 1, 2),
    # libc-override extras exported by libmimalloc.so
    "reallocf": ("realloc", 0, 1), "vfree": ("free", 0), "_aligned_malloc": ("alloc", 0),
}

TCMALLOC = {
    "tc_malloc": ("alloc", 0), "tc_malloc_skip_new_handler": ("alloc", 0),
    "tc_free": ("free", 0), "tc_free_sized": ("free", 0), "tc_cfree": ("free", 0),
    "tc_realloc": ("realloc", 0, 1), "tc_calloc": ("calloc", 0, 1),
    "tc_memalign": ("alloc", 1), "tc_posix_memalign": ("pm", 0, 2),
    "tc_valloc": ("alloc", 0), "tc_pvalloc": ("alloc", 0),
    "tc_new": ("alloc", 0), "tc_newarray": ("alloc", 0),
    "tc_new_nothrow": ("alloc", 0), "tc_newarray_nothrow": ("alloc", 0),
    "tc_new_aligned": ("alloc", 0), "tc_newarray_aligned": ("alloc", 0),
    "tc_new_aligned_nothrow": ("alloc", 0), "tc_newarray_aligned_nothrow": ("alloc", 0),
    "tc_delete": ("free", 0), "tc_deletearray": ("free", 0),
    "tc_delete_nothrow": ("free", 0), "tc_deletearray_nothrow": ("free", 0),
    "tc_delete_sized": ("free", 0), "tc_deletearray_sized": ("free", 0),
    "tc_delete_aligned": ("free", 0), "tc_deletearray_aligned": ("free", 0),
    "tc_delete_sized_aligned": ("free", 0), "tc_deletearray_sized_aligned": ("free", 0),
    "tc_delete_aligned_nothrow": ("free", 0), "tc_deletearray_aligned_nothrow": ("free", 0),
}

ALL = {}
for _t in (GLIBC, CXX, JEMALLOC, MIMALLOC, TCMALLOC):
    ALL.update(_t)

RJEM_PREFIX = "_rjem_"


def lookup(name):
    """(canonical name, spec) for an ELF symbol name, or None."""
    if name in ALL:
        return name, ALL[name]
    if name.startswith(RJEM_PREFIX):
        base = name[len(RJEM_PREFIX):]
        if base in GLIBC or base in JEMALLOC:
            return name, ALL[base]
    return None


SYMBOLIC = {}
for _n in CXX:
    if _n.startswith("_Znw"):
        SYMBOLIC[_n] = "operator new"
    elif _n.startswith("_Zna"):
        SYMBOLIC[_n] = "operator new[]"
    elif _n.startswith("_Zdl"):
        SYMBOLIC[_n] = "operator delete"
    else:
        SYMBOLIC[_n] = "operator delete[]"


# GNU libstdc++'s operator new/delete are NOT probed (memtrack-targets
# src/process.rs, forwards_cxx_operators: the C++ operators of an object whose
# file name starts with "libstdc++"). They only forward, through libstdc++'s
# PLT, to malloc/aligned_alloc/free (or to the operator an allocator library
# interposes), which are probed; and a return probe on a throwing operator new
# would stop std::bad_alloc from unwinding. A traced call into one of them is
# transparent: the probed calls it makes are outermost if nothing probed
# encloses it (accounting.outermost()).
UNPROBED_CXX_OBJECT_PREFIX = "libstdc++"


def probed(name, obj=None):
    """Does memtrack probe the entry point `name` (a symbols.py name) defined in
    the object `obj` (a path or file name; None = not known: the name decides)?"""
    if lookup(name) is None:
        return False
    if obj and name in CXX and \
            obj.rsplit("/", 1)[-1].startswith(UNPROBED_CXX_OBJECT_PREFIX):
        return False
    return True


def symbolic(name):
    """Report name: C++ operators collapse to 'operator new' etc.; glibc-private
    __libc_* aliases to the public name; everything else as exported
    (the _rjem_ prefix is kept: it is the real symbol name)."""
    if name in SYMBOLIC:
        return SYMBOLIC[name]
    if name.startswith("__libc_"):
        return name[len("__libc_"):]
    if name == "__posix_memalign":
        return "posix_memalign"
    return name


def name_rank(name):
    """Order of aliases at one address: public C names, then C++ operators,
    then allocator-specific names, then glibc-private __libc_* aliases.
    The first name in this order names the address (alloc_trace.py events'
    "fn", expected.json's functions_by_address)."""
    if name in GLIBC and not name.startswith("__"):
        return (0, list(GLIBC).index(name), name)
    if name in CXX:
        return (1, list(CXX).index(name), name)
    if name.startswith("__"):
        return (3, 0, name)
    return (2, 0, name)
