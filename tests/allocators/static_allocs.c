/* static_allocs.c - known glibc allocations, built twice:
 *   static_allocs   gcc -static (WITH its symbol table: malloc & co are found
 *                   in the executable itself, there is no libc.so)
 *   dynamic_allocs  ordinary dynamic build
 * Run directly, or as the image exec'd by exec_static / exec_dynamic or by
 * `sh -c 'exec ./static_allocs'`.
 *
 * Build: gcc -O0 -fno-builtin -static -o static_allocs static_allocs.c
 *        gcc -O0 -fno-builtin -o dynamic_allocs static_allocs.c */
#include "../fixtures/fixture.h"

static void *volatile keep; /* the leak stays reachable here */

int main(void)
{
    void *a, *b, *c, *d;

    a = malloc(1000);
    FX_CHECK(a != NULL);
    fx_use(a);
    b = calloc(10, 10);                 /* 100 */
    FX_CHECK(b != NULL);
    fx_use(b);
    a = realloc(a, 2000);               /* grow 1000 -> 2000 */
    FX_CHECK(a != NULL);
    fx_use(a);
    c = malloc(300000);                 /* mmapped chunk */
    FX_CHECK(c != NULL);
    fx_use(c);
    free(b);
    free(c);
    free(a);
    free(NULL);
    d = malloc(64);                     /* leaked */
    FX_CHECK(d != NULL);
    keep = d;
    return 0;
}
