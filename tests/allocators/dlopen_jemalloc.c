/* dlopen_jemalloc.c - an allocator that appears at run time: dlopen()s
 * libjemalloc.so.2 with RTLD_NOW|RTLD_LOCAL (so it interposes nothing: the
 * program's own malloc stays glibc's), dlsym()s its malloc, free, mallocx and
 * dallocx and allocates through them; glibc malloc calls before and after.
 * jemalloc is never dlclose()d.
 *
 * Static TLS: libjemalloc.so.2 uses initial-exec TLS (DF_STATIC_TLS, a
 * 2632-byte PT_TLS); glibc 2.36's default static TLS surplus is too small for
 * dlopen() to place it ("cannot allocate memory in static TLS block"). So the
 * fixture first re-executes ITSELF with exactly one environment variable,
 *     GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096
 * unless GLIBC_TUNABLES already has exactly that value. The first image makes
 * no allocator calls at all; the expected numbers are the final image's
 * (memtrack keeps the first one in earlier_images). The otherwise empty
 * environment also makes ld.so's dlopen work independent of the caller's
 * environment (LD_LIBRARY_PATH would change its allocations). A harness that
 * sets GLIBC_TUNABLES to that value itself (no re-exec) must not set
 * LD_LIBRARY_PATH. (Under valgrind the re-exec'd image also has valgrind's
 * LD_PRELOAD; it does not re-exec again.)
 *
 * The dlopen itself makes glibc allocator calls (ld.so's link maps, search
 * paths, scopes; libstdc++'s emergency-pool malloc(72704) when it is loaded as
 * a dependency of libjemalloc) - see README.md for the exact list.
 *
 * Build: gcc -O0 -fno-builtin -o dlopen_jemalloc dlopen_jemalloc.c -ldl
 * (libjemalloc2 must be installed; no link-time dependency on it.) */
#include "../fixtures/fixture.h"

#include <dlfcn.h>

#define FX_MALLOCX_LG_ALIGN(la) ((int)(la)) /* jemalloc.h: MALLOCX_LG_ALIGN */

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef void *(*mallocx_fn)(size_t, int);
typedef void (*dallocx_fn)(void *, int);

static void *volatile keep[2]; /* the two leaks stay reachable here */

extern char **environ;

static const char fx_tunables[] = "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096";

static int streq(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

/* Re-exec with the fixed environment unless GLIBC_TUNABLES is already ours.
 * No allocator calls: a scan of environ, readlink into a stack buffer, execve. */
static void fx_reexec_with_tunables(void)
{
    char path[4096];
    char *const argv[] = {(char *)"dlopen_jemalloc", NULL};
    char *const envp[] = {(char *)fx_tunables, NULL};
    ssize_t n;
    char **e;

    for (e = environ; e && *e; e++)
        if (streq(*e, fx_tunables))
            return;
    n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    FX_CHECK(n > 0 && (size_t)n < sizeof(path) - 1);
    path[n] = 0;
    execve(path, argv, envp);
    _exit(FX_EXIT_UNEXPECTED);
}

int main(void)
{
    void *a, *b, *c, *h, *jb[5], *jx[4];
    malloc_fn jmalloc;
    free_fn jfree;
    mallocx_fn jmallocx;
    dallocx_fn jdallocx;
    int i;

    fx_reexec_with_tunables();

    /* glibc, before the dlopen */
    a = malloc(300);                         /* leaked */
    FX_CHECK(a != NULL);
    keep[0] = a;
    b = calloc(2, 50);                       /* 100 bytes, freed */
    FX_CHECK(b != NULL);
    fx_use(b);
    free(b);

    h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    FX_CHECK(h != NULL);
    jmalloc = (malloc_fn)dlsym(h, "malloc");
    jfree = (free_fn)dlsym(h, "free");
    jmallocx = (mallocx_fn)dlsym(h, "mallocx");
    jdallocx = (dallocx_fn)dlsym(h, "dallocx");
    FX_CHECK(jmalloc != NULL && jfree != NULL && jmallocx != NULL && jdallocx != NULL);
    /* RTLD_LOCAL: jemalloc's malloc is a different function from ours */
    FX_CHECK((void *)jmalloc != (void *)&malloc && (void *)jfree != (void *)&free);

    /* jemalloc: 5 x malloc(1000 + i), 3 x mallocx(4096, 0),
     * 1 x mallocx(256, MALLOCX_LG_ALIGN(6)) (64-byte aligned), 1 leaked malloc(77) */
    for (i = 0; i < 5; i++) {
        jb[i] = jmalloc(1000 + (size_t)i);
        FX_CHECK(jb[i] != NULL);
        fx_use(jb[i]);
    }
    for (i = 0; i < 3; i++) {
        jx[i] = jmallocx(4096, 0);
        FX_CHECK(jx[i] != NULL);
        fx_use(jx[i]);
    }
    jx[3] = jmallocx(256, FX_MALLOCX_LG_ALIGN(6));
    FX_CHECK(jx[3] != NULL && ((uintptr_t)jx[3] % 64) == 0);
    fx_use(jx[3]);
    for (i = 0; i < 5; i++)
        jfree(jb[i]);
    for (i = 0; i < 4; i++)
        jdallocx(jx[i], 0);
    jfree(NULL);                             /* a call, not a release */
    c = jmalloc(77);                         /* leaked (jemalloc block) */
    FX_CHECK(c != NULL);
    keep[1] = c;

    /* glibc, after */
    b = malloc(500);
    FX_CHECK(b != NULL);
    fx_use(b);
    free(b);
    return 0;
}
