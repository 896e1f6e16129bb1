// cxx_mix.cpp - every C++ operator new/delete variant (8 new + 12 delete),
// a std::vector<int> grown by push_back, a few C malloc-family calls and one
// leak. The same source is built against four
// allocators (glibc, -ljemalloc, -lmimalloc, -ltcmalloc_minimal); the numbers
// the program itself produces are the same for all four (see README.md).
//
// Build (see build.sh): g++ -std=gnu++17 -O0 -fno-builtin -fsized-deallocation
//                       -o OUT cxx_mix.cpp [-ljemalloc|-lmimalloc|-ltcmalloc_minimal]
// No stdio, no iostream (<iostream> would add a static initializer).
#include "../fixtures/fixture.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

struct Pod {                 // 32 bytes, trivially destructible
    long a[4];
};

struct WithDtor {            // 20 bytes, non-trivial destructor -> new[] adds an 8-byte cookie
    int v[5];
    ~WithDtor();
};
__attribute__((noinline)) WithDtor::~WithDtor() { fx_use(this); }

struct alignas(64) A64 {     // 64 bytes, over-aligned -> aligned new/delete
    char c[64];
};

struct alignas(64) A64D {    // 64 bytes, over-aligned + non-trivial destructor -> 64-byte cookie
    char c[64];
    ~A64D();
};
__attribute__((noinline)) A64D::~A64D() { fx_use(this); }

static Pod *volatile leaked;  // the one leak stays reachable here

static int aligned_to(const void *p, std::uintptr_t a)
{
    return (reinterpret_cast<std::uintptr_t>(p) % a) == 0;
}

int main()
{
    // 1. vector<int>: 9 push_backs -> capacities 1,2,4,8,16 (libstdc++ doubles):
    //    operator new 4,8,16,32,64; operator delete(p, n) of 4,8,16,32 while
    //    growing and of 64 when v is destroyed.
    {
        std::vector<int> v;
        for (int i = 0; i < 9; i++)
            v.push_back(i);
        FX_CHECK(v.size() == 9 && v.capacity() == 16);
        fx_use(v.data());
    }

    // 2. plain new / sized delete: _Znwm(32), _ZdlPvm(p, 32)
    Pod *p = new Pod;
    fx_use(p);
    delete p;

    // 3. new[] of a trivially destructible type / unsized delete[]: _Znam(40), _ZdaPv
    int *a = new int[10];
    fx_use(a);
    delete[] a;

    // 4. new[] with cookie / sized delete[]: _Znam(3*20+8 = 68), _ZdaPvm(p-8, 68)
    WithDtor *w = new WithDtor[3];
    fx_use(w);
    delete[] w;

    // 5. aligned new / sized aligned delete: _ZnwmSt11align_val_t(64, 64),
    //    _ZdlPvmSt11align_val_t(x, 64, 64)
    A64 *x = new A64;
    FX_CHECK(aligned_to(x, 64));
    fx_use(x);
    delete x;

    // 6. aligned new[] / aligned delete[]: _ZnamSt11align_val_t(128, 64), _ZdaPvSt11align_val_t
    A64 *xa = new A64[2];
    FX_CHECK(aligned_to(xa, 64));
    fx_use(xa);
    delete[] xa;

    // 7. aligned new[] with a 64-byte cookie / sized aligned delete[]:
    //    _ZnamSt11align_val_t(64+2*64 = 192, 64), _ZdaPvmSt11align_val_t(p-64, 192, 64)
    A64D *xd = new A64D[2];
    FX_CHECK(aligned_to(xd, 64));
    fx_use(xd);
    delete[] xd;

    // 8. nothrow new expressions (freed with the ordinary deletes)
    Pod *n = new (std::nothrow) Pod;             // _ZnwmRKSt9nothrow_t(32)
    FX_CHECK(n != nullptr);
    fx_use(n);
    delete n;                                    // _ZdlPvm(n, 32)
    int *na = new (std::nothrow) int[6];         // _ZnamRKSt9nothrow_t(24)
    FX_CHECK(na != nullptr);
    fx_use(na);
    delete[] na;                                 // _ZdaPv
    A64 *nx = new (std::nothrow) A64;            // _ZnwmSt11align_val_tRKSt9nothrow_t(64, 64)
    FX_CHECK(nx != nullptr && aligned_to(nx, 64));
    fx_use(nx);
    delete nx;                                   // _ZdlPvmSt11align_val_t(nx, 64, 64)
    A64 *nxa = new (std::nothrow) A64[3];        // _ZnamSt11align_val_tRKSt9nothrow_t(192, 64)
    FX_CHECK(nxa != nullptr && aligned_to(nxa, 64));
    fx_use(nxa);
    delete[] nxa;                                // _ZdaPvSt11align_val_t

    // 9. explicit operator calls: the delete variants no expression above uses
    void *r = ::operator new(100);                                   // _Znwm(100)
    fx_use(r);
    ::operator delete(r);                                            // _ZdlPv
    void *r2 = ::operator new(50, std::nothrow);                     // _ZnwmRKSt9nothrow_t(50)
    FX_CHECK(r2 != nullptr);
    fx_use(r2);
    ::operator delete(r2, std::nothrow);                             // _ZdlPvRKSt9nothrow_t
    void *r3 = ::operator new[](70, std::nothrow);                   // _ZnamRKSt9nothrow_t(70)
    FX_CHECK(r3 != nullptr);
    fx_use(r3);
    ::operator delete[](r3, std::nothrow);                           // _ZdaPvRKSt9nothrow_t
    void *r4 = ::operator new(128, std::align_val_t(64));            // _ZnwmSt11align_val_t(128, 64)
    FX_CHECK(aligned_to(r4, 64));
    fx_use(r4);
    ::operator delete(r4, std::align_val_t(64));                     // _ZdlPvSt11align_val_t
    void *r5 = ::operator new(256, std::align_val_t(128), std::nothrow); // _ZnwmSt11align_val_tRKSt9nothrow_t(256, 128)
    FX_CHECK(r5 != nullptr && aligned_to(r5, 128));
    fx_use(r5);
    ::operator delete(r5, std::align_val_t(128), std::nothrow);      // _ZdlPvSt11align_val_tRKSt9nothrow_t
    void *r6 = ::operator new[](96, std::align_val_t(32), std::nothrow); // _ZnamSt11align_val_tRKSt9nothrow_t(96, 32)
    FX_CHECK(r6 != nullptr && aligned_to(r6, 32));
    fx_use(r6);
    ::operator delete[](r6, std::align_val_t(32), std::nothrow);     // _ZdaPvSt11align_val_tRKSt9nothrow_t

    // 10. (allocation failures are in cxx_new_fail.cpp: in libstdc++ they
    //     unwind a C++ exception through the probed operator new frames)

    // 11. C allocator calls in the same program
    void *m = malloc(200);
    FX_CHECK(m != nullptr);
    fx_use(m);
    free(m);
    void *c = calloc(3, 40);
    FX_CHECK(c != nullptr);
    fx_use(c);
    free(c);
    void *g = malloc(10);
    FX_CHECK(g != nullptr);
    fx_use(g);
    g = realloc(g, 1000);
    FX_CHECK(g != nullptr);
    fx_use(g);
    free(g);

    // 12. the leak: operator new(32), never deleted
    leaked = new Pod;
    fx_use(leaked);
    return 0;
}
