/* exec_static.c - allocates a little, then execve()s FX_TARGET (default
 * "static_allocs", the statically linked build of static_allocs.c; built a
 * second time with -DFX_TARGET='"dynamic_allocs"' as exec_dynamic), found
 * next to this executable (/proc/self/exe), with argv {target, NULL} and an
 * EMPTY environment (so the new image's start-up does not depend on the
 * caller's environment).
 *
 * Before the exec (the first image; memtrack keeps it in earlier_images):
 * malloc(111) leaked, malloc(222) freed, calloc(3, 30) leaked.
 * The final image is the target: its numbers are static_allocs'.
 * exit code: the target's (0), or 86 if the exec failed.
 *
 * Build: gcc -O0 -fno-builtin -o exec_static exec_static.c
 *        gcc -O0 -fno-builtin -DFX_TARGET='"dynamic_allocs"' -o exec_dynamic exec_static.c */
#include "../fixtures/fixture.h"

#ifndef FX_TARGET
#define FX_TARGET "static_allocs"
#endif

static void *volatile keep[2];

int main(void)
{
    char path[4096];
    static const char target[] = FX_TARGET;
    char *const argv[] = {(char *)target, NULL};
    char *const envp[] = {NULL};
    ssize_t n;
    size_t dir, i;
    void *p;

    p = malloc(111);                    /* leaked by the first image */
    FX_CHECK(p != NULL);
    keep[0] = p;
    p = malloc(222);
    FX_CHECK(p != NULL);
    fx_use(p);
    free(p);
    p = calloc(3, 30);                  /* 90, leaked */
    FX_CHECK(p != NULL);
    keep[1] = p;

    n = readlink("/proc/self/exe", path, sizeof(path) - sizeof(target) - 1);
    FX_CHECK(n > 0 && (size_t)n < sizeof(path) - sizeof(target) - 1);
    dir = (size_t)n;
    while (dir > 0 && path[dir - 1] != '/')
        dir--;
    for (i = 0; i < sizeof(target); i++) /* copies the NUL too */
        path[dir + i] = target[i];
    execve(path, argv, envp);
    _exit(FX_EXIT_UNEXPECTED);          /* exec failed */
}
