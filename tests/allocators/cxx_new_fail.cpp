// cxx_new_fail.cpp - failing C++ allocations, the two usual idioms:
//   1. nothrow new[] that fails: returns nullptr
//   2. throwing operator new that fails, std::bad_alloc caught in main
//      (not built for mimalloc: libmimalloc's operator new calls abort()
//      instead of throwing - it is C code - so there it is compiled out with
//      -DFX_NO_THROWING_NEW)
// The size is > PTRDIFF_MAX: every allocator fails at once, without touching
// its heap. Built against the same four allocators as cxx_mix.
//
// WHY THIS IS A SEPARATE FIXTURE: in libstdc++ the nothrow variant calls the
// throwing one and catches the std::bad_alloc it throws, and case 2 unwinds
// std::bad_alloc out of operator new into main. Both unwind through operator
// new frames. A uretprobe replaces the return address of a probed frame with
// the kernel's [uprobes] trampoline, which has no unwind info: libgcc's
// unwinder then stops (_URC_END_OF_STACK) and std::terminate() aborts the
// program (checked: tracefs uretprobes on libstdc++'s _Znwm and _Znam make
// the glibc build die with SIGABRT, exit 134). Exit code 0 under the tracker
// is part of the expectation. See README.md.
//
// Build: g++ -std=gnu++17 -O0 -fno-builtin -fsized-deallocation -o OUT cxx_new_fail.cpp [-l...]
#include "../fixtures/fixture.h"

#include <cstddef>
#include <cstdint>
#include <new>

int main()
{
    const std::size_t huge = fx_opaque(SIZE_MAX / 2 + 1);

    // 1. _ZnamRKSt9nothrow_t(huge) -> nullptr. libstdc++: calls _Znam -> _Znwm
    //    -> malloc fails -> throw std::bad_alloc (exception object: a nested
    //    malloc, freed - nested - when the nothrow operator catches it).
    void *p = ::operator new[](huge, std::nothrow);
    FX_CHECK(p == nullptr);

#ifndef FX_NO_THROWING_NEW
    // 2. _Znwm(huge) throws std::bad_alloc. The exception object is malloc'ed
    //    inside operator new (nested: not a block), but freed by
    //    __cxa_end_catch at the end of the catch block here, outside any
    //    allocator call: a free of an unknown pointer (1 unmatched free).
    int caught = 0;
    try {
        void *q = ::operator new(huge);
        fx_use(q);
    } catch (const std::bad_alloc &) {
        caught = 1;
    }
    FX_CHECK(caught == 1);
#endif
    return 0;
}
